"""TMA tensor maps for the Hopper kernels: Q, K and V as 4-D tensors (head dim, heads, tokens, sequences).

A map describes a tensor's address, extents and strides, and the box one bulk copy moves: 64 elements of
the head dim (128 bytes, the widest row the 128-byte swizzle allows; a head dim of 128 takes two boxes),
one head, `rows` tokens, one sequence. Rows past the end of the tensor (or of a padded sequence) arrive
as zeros. A grid's key tiles also have 5-D maps whose axes are the grid's (`grid_box_map`), so that a
whole tile is one box. Encoding costs a driver call, so maps are cached by everything they depend on.
"""

from __future__ import annotations

from functools import lru_cache

from maskc.kernels.family import ELEMENT_BYTES

BOX_COLUMNS = 64  # head-dim elements per box: 128 bytes, the 128-byte swizzle's row


def tensor_map(ptr: int, dtype: str, head_dim: int, heads: int, tokens: int, sequences: int,
               stride_h: int, stride_t: int, stride_b: int, rows: int) -> bytes:
    """The 128 bytes of a tiled tensor map (head dim, heads, tokens, sequences), boxes of `rows` tokens;
    strides in elements. Raises ValueError if the driver refuses."""
    # A stride must be a non-zero multiple of 16 bytes even along an extent of one, where it is never used.
    strides = tuple(s * ELEMENT_BYTES if s else 16 for s in (stride_h, stride_t, stride_b))
    return _encode(ptr, dtype, (head_dim, heads, max(tokens, 1), max(sequences, 1)), strides,
                   (_box_columns(head_dim), 1, rows, 1))


def grid_box_map(ptr: int, dtype: str, head_dim: int, heads: int, x_extent: int, grid: tuple[int, int, int],
                 stride_h: int, stride_t: int, box: tuple[int, int, int]) -> bytes:
    """A 5-D map (head dim, heads, x, y, t) over a grid of (t, y, x) = `grid` tokens: x counts tokens from the
    tensor's start (`x_extent` of them), y steps by a grid row (x extent tokens) and t by a frame, so that one
    box of (t, y, x) = `box` tokens is a whole tile of the grid. The axes overlap in memory (x runs over every
    row); the kernels never let a box's x run past the grid's right edge. Strides in elements."""
    frames, rows, width = grid
    strides = tuple(s * ELEMENT_BYTES for s in (stride_h, stride_t, width * stride_t, rows * width * stride_t))
    return _encode(ptr, dtype, (head_dim, heads, x_extent, rows, frames), strides,
                   (_box_columns(head_dim), 1, box[2], box[1], box[0]))


def _box_columns(head_dim: int) -> int:
    return BOX_COLUMNS if head_dim >= BOX_COLUMNS else head_dim


@lru_cache(maxsize=1024)
def _encode(ptr: int, dtype: str, dims: tuple[int, ...], byte_strides: tuple[int, ...], box: tuple[int, ...]) -> bytes:
    from cuda.bindings import driver

    data_type = (driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 if dtype == "bf16"
                 else driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16)
    err, tmap = driver.cuTensorMapEncodeTiled(
        data_type, len(dims), ptr, [driver.cuuint64_t(d) for d in dims], [driver.cuuint64_t(s) for s in byte_strides],
        [driver.cuuint32_t(b) for b in box], [driver.cuuint32_t(1)] * len(dims),
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    if err != driver.CUresult.CUDA_SUCCESS:
        raise ValueError(f"cannot describe this tensor to the TMA unit ({err.name}): dims {list(dims)}, byte strides "
                         f"{list(byte_strides)}; the Hopper kernels need 16-byte aligned rows and strides")
    return b"".join(int(w).to_bytes(8, "little") for w in tmap.opaque)
