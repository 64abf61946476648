"""The kernel ABI: what crosses from the host to a generated kernel, defined once.

Three things are written here and nowhere else:

- the kernel arguments (`Arg`): their order, C type and meaning. The templates render the signature and
  the launch comment from these lists, and the runtime packs its values by name with `pack`, so the two
  cannot drift apart;
- the per-sequence table (`SeqTable`): one int64 row per sequence that the planner fills (in Python, or
  the standalone planner in the `.cu`) and the kernels read; every offset comes from here;
- the tile kinds (`TileKind`) the descriptor hands to the kernels.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np


class TileKind(enum.IntEnum):
    """What a (query tile, key tile) pair is to a kernel:

    - FULL: every pair is visible and every key slot holds a token: the kernel runs no mask code there;
    - PARTIAL: some pair may be hidden: the kernel evaluates the rules that may apply there;
    - EMPTY: no pair is visible: the tile is not listed.

    The descriptor lists FULL and PARTIAL tiles with one `kind_t` each: FULL is stored as its value, 0
    (`KIND_FULL` in the generated code), and a PARTIAL tile as the set of rules that may make a pair visible
    there, bit `rule_bit(r)` for region r, never 0 -- so `kind != FULL` is the partial test. The values of
    PARTIAL and EMPTY only name classes of tiles (the planner's exact check returns them); they are never
    stored in a descriptor. The standalone planner's classifier writes its own encoding (`CLASS_EMPTY`,
    `CLASS_FULL` or the rule bits), in which EMPTY, FULL and PARTIAL are all told apart."""

    FULL = 0
    PARTIAL = 1
    EMPTY = 2

    @staticmethod
    def rule_bit(region: int) -> int:
        """The bit of region `region` in a partial tile's kind (and in a class of the classifier)."""
        return 1 << region

    @staticmethod
    def rules(kind: int) -> list[int]:
        """The regions a descriptor kind names: those a partial tile evaluates; none for FULL."""
        return [r for r in range(int(kind).bit_length()) if int(kind) >> r & 1]


# The classes of the standalone planner's exact classifier (`classify_tile`, `<P>_classify`; u32 per tile):
# CLASS_EMPTY when no pair is visible, CLASS_FULL when every pair is (and every key slot holds a token), else
# the bits of the rules that make some pair visible. `<P>_build_descriptor` turns them into descriptor kinds.
# (CLASS_FULL is bit 31, above every rule's bit: codegen refuses more than 31 rules, MAX_REGIONS.)
CLASS_EMPTY = 0
CLASS_FULL = 1 << 31


@dataclass(frozen=True)
class Arg:
    """One kernel argument: its C type in the signature, how its value is passed, and what it means."""

    name: str
    ctype: str  # as written in the kernel's signature
    doc: str
    kind: str = "ptr"  # "ptr" (64-bit device address), "i64", "i32", "f32", "tensor_map" (128-byte struct)

    @property
    def declaration(self) -> str:
        if self.kind == "ptr":
            return f"{self.ctype} __restrict__ {self.name}"
        if self.kind == "tensor_map":
            return f"const __grid_constant__ {self.ctype} {self.name}"
        return f"{self.ctype} {self.name}"

    def value(self, x) -> object:
        if self.kind == "ptr":
            return np.uint64(x)
        if self.kind == "i64":
            return np.int64(x)
        if self.kind == "i32":
            return np.int32(x)
        if self.kind == "f32":
            return np.float32(x)
        if self.kind == "tensor_map":
            return tensor_map_arg(x)
        raise ValueError(f"unknown argument kind {self.kind!r}")


# A CUtensorMap (128 bytes, 64-byte aligned) passed by value: CuPy copies a numpy structured scalar of this
# type into the launch, and the driver places it at the offset the kernel's metadata gives.
TENSOR_MAP_DTYPE = np.dtype([("words", np.uint64, 16)], align=True)


def tensor_map_arg(words) -> np.void:
    arr = np.zeros(1, dtype=TENSOR_MAP_DTYPE)
    arr["words"][0] = np.frombuffer(bytes(words), dtype=np.uint64) if isinstance(words, (bytes, bytearray)) else words
    return arr[0]


def check_names(args: tuple[Arg, ...], values: dict[str, object]) -> None:
    """A value for every argument and nothing else; a missing or unexpected name is an internal error."""
    if len(values) != len(args) or any(a.name not in values for a in args):
        missing = [a.name for a in args if a.name not in values]
        extra = sorted(set(values) - {a.name for a in args})
        raise KeyError(f"kernel arguments: missing {missing}, unexpected {extra}")


def pack(args: tuple[Arg, ...], values: dict[str, object]) -> tuple:
    """The launch arguments in signature order, as CuPy takes them (numpy scalars of their C types)."""
    check_names(args, values)
    return tuple(a.value(values[a.name]) for a in args)


def _strides(prefix: str, tensor: str) -> tuple[Arg, ...]:
    return tuple(Arg(f"{prefix}_stride_{d}", "i64", f"{tensor}: elements between {what}", "i64")
                 for d, what in (("b", "sequences of a padded batch (0 when packed)"), ("t", "tokens"), ("h", "heads")))


# Pointers and strides, as the portable kernel reads Q, K and V (and as every family writes O and LSE).
TENSORS = (
    Arg("q", "const u16*", "queries: token t of sequence b, head h at b*stride_b + (token_offset[b] + t)*stride_t + h*stride_h"),
    Arg("k", "const u16*", "keys, addressed like q (head h / kv_group)"),
    Arg("v", "const u16*", "values, addressed like k"),
)
OUTPUTS = (
    Arg("o", "u16*", "output, addressed like q"),
    Arg("lse", "float*", "log-sum-exp (natural log) at b*lse_stride_b + h*lse_stride_h + token_offset[b] + t; "
                         "-inf for a row that sees no key; null: not written (a call that does not return it)"),
)
TENSOR_STRIDES = _strides("q", "q") + _strides("k", "k") + _strides("v", "v")
OUTPUT_STRIDES = _strides("o", "o") + (
    Arg("lse_stride_b", "i64", "lse: elements between sequences of a padded batch (0 when packed)", "i64"),
    Arg("lse_stride_h", "i64", "lse: elements between heads", "i64"),
)
HEADS = (
    Arg("num_heads", "int", "query heads", "i32"),
    Arg("kv_group", "int", "query heads per key/value head (GQA: kv head = h / kv_group)", "i32"),
    Arg("scale_log2", "float", "softmax scale times log2(e)", "f32"),
)
DESCRIPTOR = (
    Arg("work", "const int*", "[work_items][2] (sequence, query tile) in visiting order, most work first"),
    Arg("row_ptr", "const int*", "[work_items + 1]: the key tiles of work item w are k_tiles[row_ptr[w] : row_ptr[w + 1]]"),
    Arg("k_tiles", "const int*", "key tile index inside the sequence"),
    Arg("kinds", "const kind_t*", "per listed key tile: KIND_FULL (0: every pair visible, no mask code) or "
                                  "the bits of the rules that may apply (a partial tile)"),
)
SEQUENCES = (
    Arg("seq_table", "const i64*", "[B][SEQ_FIELDS] per sequence (the table below)"),
    Arg("seg_start", "const int*", "start of every segment (family members count one each), per sequence from segment_begin"),
    Arg("seg_code", "const int*", "symbol | member << 5 of every segment"),
    Arg("arrays", "const int*", "list parameters, all sequences, flattened"),
)

# The Hopper family reads Q, K and V through TMA tensor maps (4-D: head dim, heads, tokens, sequences)
# instead of pointers, and walks work items with a persistent grid.
TENSOR_MAPS = (
    Arg("tm_q", "TensorMap", "q as a 4-D TMA tensor map: (head dim, heads, tokens, sequences), 128B swizzle, "
                             "boxes of 64 x 1 x Q_RUN x 1", "tensor_map"),
    Arg("tm_k", "TensorMap", "k, the same with boxes of 64 x 1 x K_RUN x 1", "tensor_map"),
    Arg("tm_v", "TensorMap", "v, like k", "tensor_map"),
)
# Tiles of the mask's first grid block (Tiling.box_block) in one TMA box per 64 columns, through 5-D maps whose
# axes are the grid's, instead of one copy per row of the tile (a dilated window's tiles one column wide would
# take 128 copies a tile). The caller's runtime values and layout decide whether they can be used: the same grid
# extents in every sequence but the outermost, and the sequences of q and dout, and those of k and v, the same
# whole steps apart on the token axis. Where not, grid_boxes is 0 and every tile is copied row by row through the
# 4-D maps.
GRID_BOX_FLAGS = (
    Arg("grid_boxes", "int", "1: tiles of the grid block load through the tm_*_box maps; 2: the same, but the sequences' "
                             "grids differ in their outermost extent (the maps take the largest), so a box that "
                             "reaches past its own grid is copied row by row; 0: row by row", "i32"),
    Arg("q_box_seq_tokens", "int", "tokens between consecutive sequences on the x axis of the maps of q (and dout) "
                                   "(padded batch; 0 packed, where token_offset places a sequence)", "i32"),
    Arg("k_box_seq_tokens", "int", "the same for the maps of k and v (with GQA and heads first it differs)", "i32"),
)
KEY_BOX_MAPS = (
    Arg("tm_k_box", "TensorMap", "k as a 5-D TMA tensor map (head dim, heads, x, y, t), 128B swizzle: x counts tokens "
                                 "from the tensor's start, y and t step by the grid's row and frame; boxes of 64 x 1 x "
                                 "the grid block's key tile shape (x, y, t)", "tensor_map"),
    Arg("tm_v_box", "TensorMap", "v, like tm_k_box", "tensor_map"),
)
# The forward's boxes: its Q tile of the grid block (once per work item) and its key tiles.
GRID_BOXES = (
    Arg("tm_q_box", "TensorMap", "q as a 5-D map like tm_k_box, boxes of 64 x 1 x the grid block's query tile "
                                 "shape", "tensor_map"),
) + KEY_BOX_MAPS + GRID_BOX_FLAGS
# The backward kernels' Q and dO in steps (64 queries of a query tile, Tiling.step_box: the dK/dV kernels' pipeline
# steps; the dQ kernel's tile as two), and their K and V tiles, under the same conditions.
BACKWARD_BOXES = (
    Arg("tm_q_box", "TensorMap", "q as a 5-D map like tm_k_box, boxes of 64 x 1 x one step of a query tile of the "
                                 "grid block (x, y, t)", "tensor_map"),
    Arg("tm_dout_box", "TensorMap", "dout, like tm_q_box", "tensor_map"),
) + KEY_BOX_MAPS + GRID_BOX_FLAGS
PERSISTENT = (
    Arg("packed", "int", "1: a packed batch (tokens at token_offset[b], sequence coordinate 0); 0: padded", "i32"),
    Arg("total_work", "int", "work_items * num_heads: (work item, head) pairs the persistent grid shares out", "i32"),
)

# The forward's dynamic scheduler: each CTA claims its next (work item, head) pair from a global counter.
SCHEDULER = (
    Arg("work_counter", "int*", "int[2] the scheduler's state: zeroed once before the first launch, left zero by "
                                "every launch; launches that may run at the same time need one each"),
)

# The forward's order over (work item, head) pairs: item-major (the heads of one item run side by side, so work
# stays longest first), except in the longest run of items with equal key tile counts, which goes head-major
# (the CTAs running at once then share one head's K and V in L2: full at 32K, 608 -> 634 TFLOP/s on the H200;
# making every item head-major broke longest-first and lost 10-20% elsewhere, docs/hopper.md).
HEAD_MAJOR_RUN = (
    Arg("head_major_first", "int", "first work item of the run whose pairs are visited head-major", "i32"),
    Arg("head_major_last", "int", "one past its last work item (equal to head_major_first: no such run)", "i32"),
)

SM80_FORWARD_ARGS = TENSORS + OUTPUTS + TENSOR_STRIDES + OUTPUT_STRIDES + HEADS + DESCRIPTOR + SEQUENCES
SM90A_FORWARD_ARGS = (TENSOR_MAPS + GRID_BOXES + OUTPUTS + OUTPUT_STRIDES + HEADS + PERSISTENT + SCHEDULER
                      + HEAD_MAJOR_RUN + DESCRIPTOR + SEQUENCES)

# The backward pass: two kernels with this one argument list, the dQ kernel first (it writes `delta`, which the
# dK/dV kernel reads). `d_out` is spelled `dout` (`do` is a C keyword).
BACKWARD_TENSORS = TENSORS + (
    Arg("o", "const u16*", "the forward's output, addressed like q"),
    Arg("dout", "const u16*", "the gradient of the loss with respect to o, addressed like q"),
    Arg("lse", "const float*", "the forward's log-sum-exp, as the forward writes it"),
    Arg("delta", "float*", "scratch written by the dQ kernel (the fused pass: prep), read by the dK/dV kernel: "
                           "rowsum(dout * o), addressed like lse"),
    Arg("dq", "u16*", "gradient of q (written), addressed like q"),
    Arg("dk", "u16*", "gradient of k (written), addressed like k; summed over the query heads of a key head"),
    Arg("dv", "u16*", "gradient of v (written), addressed like v"),
)
BACKWARD_STRIDES = (TENSOR_STRIDES + _strides("o", "o") + _strides("dout", "dout") + OUTPUT_STRIDES[-2:]
                    + _strides("dq", "dq") + _strides("dk", "dk") + _strides("dv", "dv"))
KEY_DESCRIPTOR = (
    Arg("key_work", "const int*", "[key_items][2] (sequence, key tile) in visiting order: the descriptor by key tile"),
    Arg("col_ptr", "const int*", "[key_items + 1]: the query tiles that see key item w are q_tiles[col_ptr[w] : col_ptr[w + 1]]"),
    Arg("q_tiles", "const int*", "query tile index inside the sequence"),
    Arg("q_kinds", "const kind_t*", "per listed query tile: its kind, as in `kinds`"),
    Arg("q_items", "const int*", "per listed query tile: its work item in `work` (where the fused pass sums its dQ)"),
)
BACKWARD_ARGS = (BACKWARD_TENSORS + BACKWARD_STRIDES + HEADS
                 + (Arg("scale", "float", "softmax scale (dQ and dK are multiplied by it)", "f32"),)
                 + DESCRIPTOR + KEY_DESCRIPTOR + SEQUENCES)
# The Hopper dK/dV kernel also reads Q, K, V and dout through TMA tensor maps (boxes of up to 64 query rows).
SM90A_BACKWARD_ARGS = BACKWARD_ARGS + TENSOR_MAPS + (
    Arg("tm_dout", "TensorMap", "dout, like tm_q", "tensor_map"),
    PERSISTENT[0],
    Arg("long_query_items", "int", "the dQ kernel's CTAs go head-major twice: over the first this many work items "
                                   "(the longest), then over the rest (any count from 0, one pass, to the items is "
                                   "correct; maskc counts those longer than two heads' shares of the GPU)", "i32"),
    Arg("long_key_items", "int", "the same for the dK/dV kernel's key items", "i32"),
    Arg("tail_query_heads", "int", "then the dQ kernel's last this many heads go item-major together (1: "
                                   "head-major to the end; any count from 1 is correct)", "i32"),
    Arg("tail_key_heads", "int", "the same for the dK/dV kernel", "i32"),
) + BACKWARD_BOXES
# The fused Hopper pass: dQ is summed over key tiles into an fp32 accumulator by the dK/dV kernel, then scaled
# and rounded into dq by a last kernel.
SM90A_FUSED_BACKWARD_ARGS = SM90A_BACKWARD_ARGS + (
    Arg("dq_accum", "float*", "fp32 scratch, zeroed by prep: [work_items][num_heads][block_q * head_dim], "
                              "each query tile's sum of dS K over key tiles, in wgmma's accumulator order"),
)


@dataclass(frozen=True)
class SeqTable:
    """The per-sequence table: int64 [B][width], one row per sequence, laid out as

        token_offset, length, segment_begin, segment_count,
        per block of tiles: start, dims_t, dims_y, dims_x, first_q, first_k,
        per list parameter: offset, rows, cols (into `arrays`),
        the sequence values the mask code needs (MaskSeq.v0, v1, ...).
    """

    blocks: int
    arrays: int
    values: int

    FIXED = ("token_offset", "length", "segment_begin", "segment_count")
    BLOCK = ("start", "dims_t", "dims_y", "dims_x", "first_q", "first_k")
    ARRAY = ("offset", "rows", "cols")

    def fixed(self, name: str) -> int:
        return self.FIXED.index(name)

    def block(self, b: int, name: str = "start") -> int:
        return len(self.FIXED) + len(self.BLOCK) * b + self.BLOCK.index(name)

    def array(self, slot: int, name: str = "offset") -> int:
        return len(self.FIXED) + len(self.BLOCK) * self.blocks + len(self.ARRAY) * slot + self.ARRAY.index(name)

    def value(self, index: int) -> int:
        return len(self.FIXED) + len(self.BLOCK) * self.blocks + len(self.ARRAY) * self.arrays + index

    @property
    def width(self) -> int:
        return self.value(self.values)
