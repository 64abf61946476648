"""The descriptor seen from the keys: what the backward pass's dK/dV kernel walks.

The forward descriptor lists, per query tile, the key tiles it visits and their kinds. dK and dV are sums
over queries, so their kernel needs the transpose: per key tile, the query tiles that see it, with the same
kinds (a tile pair's kind does not depend on the direction it is walked in). It is computed from the forward
descriptor, never planned again: one planning per runtime values serves both passes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from maskc.plan import native
from maskc.plan.arrays import stable_order
from maskc.plan.planner import Descriptor, TileConfig


@dataclass(frozen=True)
class KeyDescriptor:
    """CSR of query tiles per key tile, every key tile of every sequence listed once (a key tile no query
    sees is a work item with no query tiles: its dK and dV are zeros), most work first, query tiles
    ascending inside each (or, `staggered`, a rotation of that)."""

    work_seq: np.ndarray  # int32 [W]: the sequence of each work item (one key tile)
    work_ktile: np.ndarray  # int32 [W]: the key tile inside its sequence
    col_ptr: np.ndarray  # int32 [W + 1]: the query tiles of item w are q_tile[col_ptr[w] : col_ptr[w + 1]]
    q_tile: np.ndarray  # int32 [nnz]
    kind: np.ndarray  # like Descriptor.kind
    q_item: np.ndarray  # int32 [nnz]: the forward work item of the same (sequence, query tile)

    def tiles_of(self, seq: int, ktile: int) -> tuple[np.ndarray, np.ndarray]:
        """The (query tiles, kinds) that see one key tile."""
        w = np.nonzero((self.work_seq == seq) & (self.work_ktile == ktile))[0][0]
        lo, hi = self.col_ptr[w], self.col_ptr[w + 1]
        return self.q_tile[lo:hi], self.kind[lo:hi]


# Items longer than this many times a head's share of the GPU go in a pass of their own (`long_items`). With 1,
# the Hopper backward lost 2-5% on document, rm_shared and hstu (L2: more of the CTAs at once read different
# heads' tiles); 2 gave clear_text the same +18% and left the others as they were (H200, docs/training.md).
LONG_ITEM_SHARES = 2
# Head-major, the last head's longest items start when each multiprocessor has about one head's share of work left;
# an item longer than that share runs on past the others. The last `tail_heads` heads go item-major together, so
# that their longest items start earlier; grouped where the tail a head-major end would leave exceeds this
# fraction of a head's share (then the CTAs at once read two heads' tiles, for the last heads only). Two heads on
# shared_prompt, rm_shared and document: their dK/dV kernels' cycles -2.6%, -1.9%, -2.6% (H100, ncu at locked
# clocks; docs/experiments/s46/tail_model.py predicted -2.5%, -1.7%, -1.4%; docs/training.md, forty-seventh session).
TAIL_SLACK = 0.25


def by_key(desc: Descriptor, stagger: bool = False) -> KeyDescriptor:
    """The transpose of `desc` (`staggered` with `stagger`). Its arrays have a tile's entry each (65,536 for full
    attention at 32K), and its time was half page faults: glibc gave the freed temporaries back to the OS and
    faulted them in again at the next call. So they are few, 32-bit where the values allow, and computed in place
    where they can be. The C++ planner (plan/native.py), where it is built, makes the same arrays in a pass over
    the tiles."""
    lib = native.library()
    made = native.key_descriptor(lib, desc, stagger) if lib is not None else None
    if made is not None:
        return KeyDescriptor(*made)
    k_base = desc.blocks.tile_base("k")  # global key tile of tile 0 per sequence
    per_item = desc.row_ptr[1:] - desc.row_ptr[:-1]  # (np.diff: 3x the cost)
    item = np.arange(len(per_item), dtype=np.int32).repeat(per_item)
    narrow = k_base[-1] < 2**31
    global_k = k_base.take(desc.work_seq).astype(np.int32 if narrow else np.int64).repeat(per_item)
    global_k += desc.k_tile
    total_k = int(k_base[-1])
    counts = np.bincount(global_k, minlength=total_k)  # (int64: numpy's intp)
    most = int(counts.max(initial=0))
    visit = stable_order(most - counts, most + 1)  # most work first, as the forward kernels visit query tiles
    # By key tile (in visiting order), then query tile: one stable sort of a combined key rank * stride + query tile
    # (lexsort of the two: 1.4-2x slower at 32K; the pairs are distinct, so the order is the same, whatever the
    # stride past the query tiles). Made in the narrowest type that holds it, its first term gathered from a table
    # per key tile: a radix sort where it fits 16 bits (a few packed documents: 86 -> ~20 us), without converting
    # the tile-sized arrays.
    stride = int(desc.work_qtile.max(initial=0)) + 1
    bound = total_k * stride
    dtype = np.uint16 if bound <= 1 << 16 else np.int32 if bound < 2**31 else np.int64
    rank = np.empty(total_k, dtype=dtype)
    rank[visit] = np.arange(0, bound, stride, dtype=dtype)
    key = rank.take(global_k)
    key += desc.work_qtile.astype(dtype).repeat(per_item)
    order = key.argsort(kind="stable")
    q_item = item.take(order)
    seq_of_k = np.arange(len(k_base) - 1, dtype=np.int32).repeat(k_base[1:] - k_base[:-1])  # (searchsorted: 2x)
    work_seq = seq_of_k.take(visit)
    key_desc = KeyDescriptor(
        work_seq=work_seq,
        work_ktile=(visit - k_base.take(work_seq)).astype(np.int32),
        col_ptr=_pointers(counts.take(visit)),
        q_tile=desc.work_qtile.take(q_item),
        kind=desc.kind.take(order),
        q_item=q_item,
    )
    return staggered(key_desc, desc.config) if stagger else key_desc


def staggered(key_desc: KeyDescriptor, config: TileConfig) -> KeyDescriptor:
    """The same lists, where consecutive key tiles' lists begin at the same query tile (a run), each rotated to
    begin at its key tile's diagonal (the query tile holding the key tile's first position; its lists wrap).

    The fused backward adds every step's dQ into its query tile's dq_accum from the dK/dV kernel. Its CTAs
    start a head's consecutive key tiles together, and in ascending order those of full attention (or of a prefix,
    or of global tokens) all walk the same query tiles in step, reducing into one tile at once: the full mask's
    backward ran 8% below causal's, and staggered 7% faster (H100, docs/training.md). Started at their
    diagonals, neighbouring CTAs walk one tile apart, as causal's do, each reading the Q and dO tiles the one
    before read a step earlier. Lists that do not start together are left as they are: rotating every list lost
    4-8% on documents and shared prompts. dK, dV and the dQ sums do not depend on the order."""
    ptr = key_desc.col_ptr
    counts = ptr[1:] - ptr[:-1]
    if len(key_desc.q_item) == 0:
        return key_desc
    # The forward item (sequence, query tile) each list begins at; -1 for lists with none, which join no run.
    first = np.where(counts > 0, key_desc.q_item.take(np.minimum(ptr[:-1], len(key_desc.q_item) - 1)), -1)
    together = np.zeros(len(first), dtype=bool)
    together[1:] = (first[1:] == first[:-1]) & (first[1:] >= 0)
    together[:-1] |= together[1:]  # a run's first list too
    if not together.any():
        return key_desc
    item = np.arange(len(counts), dtype=np.int32).repeat(counts)
    diagonal = key_desc.work_ktile.astype(np.int64) * config.block_k // config.block_q
    before = np.zeros(len(item) + 1, dtype=np.int32)  # the lists ascend: the tiles before the diagonal come first
    np.cumsum(key_desc.q_tile < diagonal.take(item), out=before[1:])
    shift = before.take(ptr[1:]) - before.take(ptr[:-1])
    shift[~together | (shift == counts)] = 0
    source = np.arange(len(item), dtype=np.int32)
    source += shift.take(item)
    wrap = counts.take(item)
    wrap *= source >= ptr[1:].take(item)
    source -= wrap
    return replace(key_desc, q_tile=key_desc.q_tile.take(source), kind=key_desc.kind.take(source),
                   q_item=key_desc.q_item.take(source))


def _pointers(counts: np.ndarray) -> np.ndarray:
    """int32 CSR pointers of items with these counts: 0, then their running sum."""
    ptr = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=ptr[1:])
    return ptr


@dataclass(frozen=True)
class KeyTables:
    """The key descriptor as the dK/dV kernel reads it (`abi.KEY_DESCRIPTOR`)."""

    key_work: np.ndarray  # int32 [W, 2]: (sequence, key tile)
    col_ptr: np.ndarray  # int32 [W + 1]
    q_tiles: np.ndarray  # int32 [nnz]
    q_kinds: np.ndarray  # kind_t [nnz]
    q_items: np.ndarray  # int32 [nnz]

    def arrays_in_order(self) -> tuple[np.ndarray, ...]:
        return (self.key_work, self.col_ptr, self.q_tiles, self.q_kinds, self.q_items)


def key_tables(key_desc: KeyDescriptor, kind_dtype: np.dtype) -> KeyTables:
    return KeyTables(
        key_work=_pairs(key_desc.work_seq, key_desc.work_ktile),
        col_ptr=key_desc.col_ptr,
        q_tiles=key_desc.q_tile,
        q_kinds=key_desc.kind.astype(kind_dtype, copy=False),
        q_items=key_desc.q_item,
    )


def _pairs(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """int32 [W, 2]: the two columns side by side (np.stack and a conversion: 3x the cost)."""
    out = np.empty((len(first), 2), dtype=np.int32)
    out[:, 0], out[:, 1] = first, second
    return out


def long_items(item_ptr: np.ndarray, multiprocessors: int) -> int:
    """How many of the first work items of a CSR (`row_ptr`, `col_ptr`) the Hopper backward kernels take in a pass
    of their own, before the others (`item_head_at`): the leading items with more tiles than LONG_ITEM_SHARES
    times one head's whole work spread over the GPU. The descriptors list a longest item first (the forward's go
    longest first inside groups that share keys, so only their leading run counts)."""
    per_item = np.diff(item_ptr.astype(np.int64))
    short = per_item * multiprocessors <= LONG_ITEM_SHARES * per_item.sum()
    return int(np.argmax(short)) if short.any() else len(per_item)


def tail_heads(item_ptr: np.ndarray, long: int, multiprocessors: int) -> int:
    """How many of the last heads the Hopper backward kernels visit item-major together (`item_head_at`; 1: every
    head head-major): enough that the longest of the items after the `long` leading ones fits in that many heads'
    shares of the GPU, less TAIL_SLACK of a share. The kernels take at most their count of heads."""
    per_item = np.diff(item_ptr.astype(np.int64))[long:]
    total = int(per_item.sum())
    if total == 0:
        return 1
    need = int(per_item.max()) * multiprocessors / total - TAIL_SLACK
    return max(1, int(np.ceil(need)))
