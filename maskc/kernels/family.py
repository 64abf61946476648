"""Kernel families as data.

A family is one way of computing attention on some GPUs: a template folder, the architectures it
compiles for, the head dims and dtypes it supports, its tile shape per head dim, its shared-memory
buffers, its launch shape and its argument list (`maskc.kernels.abi`). Adding a family is adding an entry
to `FAMILIES` and its templates; nothing else names a family's numbers.

`KernelOptions` are what a compile depends on besides the mask; they are validated against the family
the architecture selects, so an option the family cannot honour is refused before anything is rendered.
"""

from __future__ import annotations

import numbers
import re
from dataclasses import dataclass, field
from functools import cached_property

from maskc.kernels import abi
from maskc.plan.tiling import TileConfig

ELEMENT_BYTES = 2  # bf16 and fp16
MAX_SHARED_BYTES = 227 * 1024  # dynamic shared memory a CTA may have on sm_80 and sm_90
DTYPES = {"bf16": "bf16", "fp16": "f16"}  # option name -> PTX type name


@dataclass(frozen=True)
class BackwardKernels:
    """A backward pass: `kernels`, launched in that order on one stream, all taking `args`, on the forward
    plan's tiles.

    Deterministic passes: a dQ kernel over the forward descriptor (it also writes delta = rowsum(dO * O)),
    then a dK/dV kernel over the descriptor by key tile. Portable: 4 warps, a key tile in chunks of
    `key_chunk` keys (one chunk per dK/dV CTA). Hopper: a producer warp and two consumer warpgroups of 64
    rows; the dQ kernel streams K and V tiles, the dK/dV kernel Q and dO in steps of `q_step` queries through
    `stages` buffers.

    The fused Hopper pass (not deterministic): `prep` writes delta, the dK/dV kernel also adds each step's
    dS K into an fp32 block per query tile (bulk reductions from many CTAs, so the order of the sums varies
    from run to run), and `dq_store` scales and rounds it into dq: five matrix products per tile pair instead
    of seven."""

    name: str  # the option that selects it (KernelOptions.backward_kernels)
    template: str  # under templates/
    summary: str
    head_dims: tuple[int, ...]
    args: tuple[abi.Arg, ...] = abi.BACKWARD_ARGS  # both kernels take this list
    hopper: bool = False
    key_tiles: tuple[tuple[int, int], ...] = ()  # the (head dim, plan key tile) pairs it supports; () for any
    # Head dims at which the Hopper kernels split the head dim in two, where the registers for the whole of it
    # are not there: each dK/dV consumer takes all keys of a (64-key) tile and half of dK and dV, and two dQ
    # CTAs share a query tile, half of dQ each. Both repeat the products S and dP for it.
    split_head_dims: tuple[int, ...] = ()
    key_chunk: int = 64
    q_step: int = 64
    stages: int = 2
    row_bytes: int = 128  # Hopper dK/dV: shared memory per query for its mask row (a larger row is not stored)
    kernels: tuple[str, ...] = ("dq", "dkdv")  # in launch order
    deterministic: bool = True

    @property
    def fused(self) -> bool:
        """Whether dQ is accumulated by the dK/dV kernel (into the fp32 `dq_accum`)."""
        return "dq_store" in self.kernels

    def supports(self, options: KernelOptions) -> bool:
        return options.head_dim in self.head_dims and (not self.key_tiles
                                                         or (options.head_dim, options.block_k) in self.key_tiles)

    def dq_splits(self, options: KernelOptions) -> int:
        """dQ CTAs per (query tile, head): 2 where the head dim is split (each writes half of dQ), else 1."""
        return 2 if options.head_dim in self.split_head_dims else 1

    def dq_stages(self, options: KernelOptions) -> tuple[int, int]:
        """The Hopper dQ kernel's K and V pipeline depths (V is free once dP has landed, K only after dQ += dS K):
        two of each where they fit beside the Q and dO tiles, else two of K and one of V (head dim 256: 64 KB
        each of Q and dO, 32 KB a K or V tile), else one of each."""
        return next(s for s in ((2, 2), (2, 1), (1, 1)) if self._dq_bytes(options, *s) <= MAX_SHARED_BYTES)

    def _dq_bytes(self, options: KernelOptions, k_stages: int, v_stages: int) -> int:
        d, bq, bk = options.head_dim, options.block_q, options.block_k
        tiles = (2 * bq + (k_stages + v_stages) * bk) * d * ELEMENT_BYTES
        return 1024 + tiles + bq * 4 + 8 * (1 + 2 * (k_stages + v_stages))

    def threads(self, kernel: str) -> int:
        if kernel in ("prep", "dq_store"):
            return 256  # whole rows, 16 bytes a thread; dq_store also reads one float4 per dK/dV consumer thread
        return 384 if self.hopper else 128

    def shared_memory_bytes(self, options: KernelOptions, kernel: str) -> int:
        """Portable dQ: Q and dO tiles, two K chunks and a V chunk; portable dK/dV: a K and a V chunk, Q and dO
        tiles; both with the LSE and delta of the query tile (fp32). Hopper dQ: Q and dO tiles, two stages of K
        and V tiles, delta of the query tile; Hopper dK/dV: the K and V tiles, then per stage a step of Q and of
        dO with their LSE, delta and mask rows. Hopper kernels add their mbarriers and 1024 bytes of alignment."""
        d, bq, bk = options.head_dim, options.block_q, options.block_k
        if kernel in ("prep", "dq_store"):  # rows straight from global memory
            return 0
        if self.hopper and kernel == "dq":
            return self._dq_bytes(options, *self.dq_stages(options))
        if self.hopper:
            per_stage = 2 * self.q_step * d * ELEMENT_BYTES + 2 * self.q_step * 4 + self.q_step * self.row_bytes
            # fused: dS^T of two steps, and a step's dQ (fp32) staged for its bulk reduction
            d_s = 2 * bk * self.q_step * ELEMENT_BYTES + self.q_step * d * 4 if self.fused else 0
            return 1024 + 2 * bk * d * ELEMENT_BYTES + self.stages * per_stage + d_s + 8 * (1 + 2 * self.stages)
        k_chunks = {"dq": 3, "dkdv": 2}[kernel]
        return (2 * bq + k_chunks * self.key_chunk) * d * ELEMENT_BYTES + 2 * bq * 4

    def grid(self, kernel: str, options: KernelOptions, items: int, num_heads: int, kv_heads: int) -> int:
        """dQ (and prep, dq_store): one CTA per (query tile, query head), or `dq_splits` of them; dK/dV: per
        (key chunk, key/value head), or per (key tile, key/value head) for the Hopper kernel."""
        if kernel == "dq":
            return items * num_heads * self.dq_splits(options)
        if kernel != "dkdv":
            return items * num_heads
        chunks = 1 if self.hopper else options.block_k // self.key_chunk
        return items * chunks * kv_heads


PORTABLE_BACKWARD = BackwardKernels(
    name="portable",
    template="sm80/attention_bwd.cu.j2",
    summary="portable: mma.sync, ldmatrix, cp.async; deterministic (no atomics: dQ over the forward descriptor, "
            "dK and dV over the descriptor by key tile)",
    head_dims=(64, 128),
)

HOPPER_FUSED_BACKWARD = BackwardKernels(
    name="hopper_fused",
    template="sm90a/attention_bwd.cu.j2",
    summary="wgmma and TMA; one kernel over key tiles computes dK, dV and each step's share of dQ, summed into "
            "an fp32 accumulator per query tile by bulk reductions (five products per tile pair instead of "
            "seven); NOT deterministic: the order of dQ's sums varies from run to run",
    head_dims=(128,),
    args=abi.SM90A_FUSED_BACKWARD_ARGS,
    hopper=True,
    key_tiles=((128, 128),),
    kernels=("prep", "dkdv", "dq_store"),
    deterministic=False,
)

HOPPER_BACKWARD = BackwardKernels(
    name="hopper",
    template="sm90a/attention_bwd.cu.j2",
    summary="wgmma and TMA, a producer warp and two consumer warpgroups of 64 rows (queries for dQ; keys for dK "
            "and dV, or at head dim 256 all 64 keys of a tile and half the head dim each); deterministic (no atomics)",
    head_dims=(64, 128, 256),
    args=abi.SM90A_BACKWARD_ARGS,
    hopper=True,
    key_tiles=((64, 128), (128, 128), (256, 64)),
    split_head_dims=(256,),
)


@dataclass(frozen=True)
class KernelFamily:
    name: str  # also the template folder: templates/<name>/attention_<direction>.cu.j2
    summary: str
    archs: tuple[str, ...]  # --arch values that select this family
    head_dims: tuple[int, ...]
    dtypes: tuple[str, ...]
    tiles: dict[int, tuple[int, int]]  # head dim -> (block_q, block_k), the default tile
    narrow_block_k: dict[int, int]  # head dim -> a narrower key tile the kernels also support (option key_tile)
    threads: int  # per CTA
    persistent: bool  # one CTA per SM walking (work item, head) pairs, else one CTA per pair
    # Shared-memory tiles: how many Q tiles, K tiles and V tiles of (rows x head dim) elements it keeps.
    q_buffers: int
    k_buffers: int  # the default; a pipelined family may offer more stages (kv_stage_choices)
    v_buffers: int
    extra_shared_bytes: int  # barriers and the like, beyond the tiles
    forward_args: tuple[abi.Arg, ...]
    min_blocks_per_sm: int = 1
    min_run: int = 1  # grid tiles at least this many tokens wide (bulk copies of whole 1024-byte swizzle rows)
    # Warp-specialised families: registers per thread of the producer and consumer warpgroups (setmaxnreg);
    # 128 x producer + 256 x consumer must stay within the 64K registers of a multiprocessor.
    producer_registers: int = 0
    consumer_registers: int = 0
    kv_stage_choices: tuple[int, ...] = ()  # K/V pipeline depths the template supports (option kv_stages)
    stage_o: bool = False  # the forward may write O through shared memory (o_staged)
    backward: tuple[BackwardKernels, ...] = ()  # the backward passes it offers, the default first

    @property
    def uses_tensor_maps(self) -> bool:
        """Whether a kernel of the family takes TMA tensor maps (the generated file then declares TensorMap)."""
        args = self.forward_args + tuple(a for b in self.backward for a in b.args)
        return any(a.kind == "tensor_map" for a in args)

    def template(self, direction: str = "fwd") -> str:
        return f"{self.name}/attention_{direction}.cu.j2"

    def q_stages(self, options: KernelOptions) -> int:
        """Q tiles in shared memory: `q_buffers`, or fewer where they would not fit (head dim 256)."""
        return next((q for q in range(self.q_buffers, 1, -1) if self._bytes(options, q) <= MAX_SHARED_BYTES), 1)

    def o_staged(self, options: KernelOptions) -> bool:
        """Whether the forward writes O through shared memory, a Q tile of it beside the pipeline's tiles (the
        families that `stage_o`, where that fits: not at head dim 256), so that a warp stores whole rows. Straight
        from the accumulators, each of a warp's stores covers 16 bytes of 8 rows, half a 32-byte sector each."""
        return self._o_staging_bytes(options, self._bytes(options, self.q_stages(options))) > 0

    def shared_memory_bytes(self, options: KernelOptions) -> int:
        tiles = self._bytes(options, self.q_stages(options))
        return tiles + self._o_staging_bytes(options, tiles)

    def _o_staging_bytes(self, options: KernelOptions, tiles: int) -> int:
        """A Q tile for O where the family stages it and it fits beside `tiles` bytes, else 0."""
        q_tile = options.block_q * options.head_dim * ELEMENT_BYTES
        return q_tile if self.stage_o and tiles + q_tile <= MAX_SHARED_BYTES else 0

    def _bytes(self, options: KernelOptions, q_tiles: int) -> int:
        """Shared memory for q_tiles Q tiles, the K and V tiles of the pipeline, and the extra bytes."""
        block_q, block_k = options.tile
        kv_tiles = options.kv_stages_or(self.k_buffers) + options.kv_stages_or(self.v_buffers)
        return (q_tiles * block_q + kv_tiles * block_k) * options.head_dim * ELEMENT_BYTES + self.extra_shared_bytes

    def grid(self, work_items: int, num_heads: int, sm_count: int) -> int:
        pairs = work_items * num_heads
        return min(pairs, sm_count * self.min_blocks_per_sm) if self.persistent else pairs


SM80 = KernelFamily(
    name="sm80",
    summary="portable: mma.sync, ldmatrix, cp.async (sm_80 and later), in the manner of FlashAttention-2",
    archs=("sm_80", "sm_86", "sm_89", "sm_90"),
    head_dims=(64, 128),
    dtypes=("bf16", "fp16"),
    tiles={64: (128, 64), 128: (128, 64)},
    narrow_block_k={},
    threads=128,
    persistent=False,
    q_buffers=1, k_buffers=2, v_buffers=1,  # K double-buffered, V single
    extra_shared_bytes=0,
    forward_args=abi.SM80_FORWARD_ARGS,
    min_blocks_per_sm=2,
    backward=(PORTABLE_BACKWARD,),
)

SM90A = KernelFamily(
    name="sm90a",
    summary="Hopper: wgmma, TMA on mbarriers, a producer warp and two consumer warpgroups, persistent grid",
    archs=("sm_90a",),
    head_dims=(64, 128, 256),
    dtypes=("bf16", "fp16"),
    tiles={64: (128, 128), 128: (128, 128), 256: (128, 64)},
    narrow_block_k={64: 64, 128: 64},  # an option for 2D/3D neighbourhoods: smaller key boxes (4 x 16 on a 2D grid)
    threads=384,
    persistent=True,
    q_buffers=2, k_buffers=2, v_buffers=2,  # a two-stage K/V pipeline; Q double-buffered where it fits
    extra_shared_bytes=2048,  # 1024-byte alignment of the tiles, then the mbarriers
    forward_args=abi.SM90A_FORWARD_ARGS,
    min_run=8,
    kv_stage_choices=(2, 3),
    stage_o=True,
    producer_registers=24,
    consumer_registers=240,
    # The fused pass where it applies (head dim 128: 1.04-1.11x the Hopper pair end to end on the H200), else
    # the Hopper pair (1.3-1.7x the portable kernels), else the portable kernels (64-key tiles); see
    # docs/training.md. The fused pass is not deterministic: backward_kernels="hopper" is.
    backward=(HOPPER_FUSED_BACKWARD, HOPPER_BACKWARD, PORTABLE_BACKWARD),
)

FAMILIES = (SM80, SM90A)
ARCHS = tuple(a for f in FAMILIES for a in f.archs)
HEAD_DIMS = tuple(sorted({d for f in FAMILIES for d in f.head_dims}))
BACKWARD_PASSES = tuple(dict.fromkeys(b.name for f in FAMILIES for b in f.backward))  # every backward_kernels value


def family_for(arch: str) -> KernelFamily:
    for f in FAMILIES:
        if arch in f.archs:
            return f
    raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")


@dataclass(frozen=True)
class KernelOptions:
    """Everything a compile depends on besides the mask; frozen, so it can key the build cache. The
    architecture selects the kernel family (`sm_90a`: the Hopper family; the others: the portable one)."""

    head_dim: int = 128
    dtype: str = "bf16"
    arch: str = "sm_90"
    key_tile: int | None = None  # keys per tile; None: the family's default for this head dim
    kv_stages: int | None = None  # depth of the K/V pipeline; None: the family's default
    backward_kernels: str | None = None  # which backward pass (BackwardKernels.name); None: the family's default
    deterministic: bool = False  # a backward pass that gives the same bits twice (the fastest such pass)
    family: KernelFamily = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        for name in ("head_dim", "key_tile", "kv_stages"):  # whole numbers (numpy's too), not 128.0 or "128"
            value = getattr(self, name)
            if value is None and name != "head_dim":
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ValueError(f"{name} must be an int, got {value!r}")
            object.__setattr__(self, name, int(value))
        if not isinstance(self.deterministic, bool):
            raise ValueError(f"deterministic must be True or False, got {self.deterministic!r}")
        family = family_for(self.arch)
        object.__setattr__(self, "family", family)
        if self.dtype not in family.dtypes:
            raise ValueError(f"dtype must be one of {list(family.dtypes)}, got {self.dtype!r}")
        if self.head_dim not in family.head_dims:
            raise ValueError(f"head_dim must be one of {family.head_dims} for {self.arch} "
                             f"(the {family.name} kernels), got {self.head_dim!r}")
        default = family.tiles[self.head_dim][1]
        allowed = sorted({default, family.narrow_block_k.get(self.head_dim, default)})
        if self.key_tile is not None and self.key_tile not in allowed:
            raise ValueError(f"key_tile must be one of {allowed} for head dim {self.head_dim} on {self.arch} "
                             f"(the {family.name} kernels), got {self.key_tile}")
        named = next((b for b in family.backward if b.name == self.backward_kernels), None)
        if self.deterministic and named is not None and not named.deterministic:
            raise ValueError(f"backward_kernels={self.backward_kernels!r} is not deterministic; the deterministic "
                             "option asks for a pass that is")
        if self.backward_kernels is not None and self.backward is None:
            names = [b.name for b in self.family.backward if b.supports(self)]
            where = (f"for head dim {self.head_dim} and key tile {self.tile[1]} on {self.arch} "
                     f"(the {family.name} kernels)")
            if not names:
                raise ValueError(f"backward_kernels={self.backward_kernels!r}: there is no backward pass {where}")
            raise ValueError(f"backward_kernels must be one of {names} {where}, got {self.backward_kernels!r}")
        if self.kv_stages is not None:
            if self.kv_stages not in family.kv_stage_choices:
                raise ValueError(f"kv_stages must be one of {list(family.kv_stage_choices)} on {self.arch} "
                                 f"(the {family.name} kernels), got {self.kv_stages}")
            if family.shared_memory_bytes(self) > MAX_SHARED_BYTES:
                raise ValueError(f"{self.kv_stages} K/V stages of {self.tile[1]} keys at head dim {self.head_dim} do "
                                 f"not fit in {MAX_SHARED_BYTES // 1024} KB of shared memory")

    @cached_property  # (the options are frozen; a call asks for this several times)
    def backward(self) -> BackwardKernels | None:
        """The backward kernels for these options: the one named by `backward_kernels`, else the family's
        first that supports them (and is deterministic, if asked); None where none does (head dim 256)."""
        chosen = [b for b in self.family.backward if b.supports(self)
                  and (self.backward_kernels is None or b.name == self.backward_kernels)
                  and (b.deterministic or not self.deterministic)]
        return chosen[0] if chosen else None

    def kv_stages_or(self, default: int) -> int:
        return self.kv_stages or default

    @property
    def tile(self) -> tuple[int, int]:
        block_q, block_k = self.family.tiles[self.head_dim]
        return block_q, self.key_tile or block_k

    @property
    def tile_config(self) -> TileConfig:
        return TileConfig(self.tile[0], self.tile[1], self.family.min_run)

    @property
    def block_q(self) -> int:
        return self.tile[0]

    @property
    def block_k(self) -> int:
        return self.tile[1]

    @property
    def element(self) -> str:
        return DTYPES[self.dtype]


def _identifier(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def kernel_name(mask_name: str, options: KernelOptions, direction: str = "fwd") -> str:
    """A readable, unique name: mask, direction, family, head dim, dtype, and the key tile when it is not
    the family's default."""
    tile = "" if options.tile == options.family.tiles[options.head_dim] else f"_bk{options.tile[1]}"
    stages = "" if options.kv_stages is None else f"_s{options.kv_stages}"
    return (f"maskc_{_identifier(mask_name)}_{direction}_{options.family.name}_hd{options.head_dim}_{options.dtype}"
            f"{tile}{stages}")


def planner_name(mask_name: str, options: KernelOptions) -> str:
    """The standalone planner depends on the mask and the tile shape only."""
    return f"maskc_{_identifier(mask_name)}_bq{options.block_q}_bk{options.block_k}"
