"""Packed members as sequences of their own: a tiling that starts at every member of a family no rule crosses.

Tiles are cut per sequence, from its first token (plan/tiling.py). A mask whose sequence is one family whose
members never see each other (examples/document.mask: `D[i] = docs[i]`, `D[i] -> D[i] causal`) gets tiles that
straddle members, and a tile across a boundary is partial (mask code on every pair) and mostly hidden. Run as
a packed batch of one sequence per member, the same mask has tiles that start at each member's first token:
for ANCHORS' document workload (12 documents in 32768 tokens) the 128 x 128 tiles visited fall from 4,570 to
4,471 and the partial ones from 711 to 263, and on an H100 the forward's cycles by 5.9%, the dK/dV kernel's by
5.0% (docs/benchmarks.md, thirty-seventh session).

Splitting is exact when nothing of the mask changes for a member taken out of its sequence (which masks that is:
maskc.ir.members). The runtime applies it to a packed call's values (`split`, then `Members.values`) before
planning, so every planner and kernel sees an ordinary packed batch; values it cannot read (not lists of
non-negative ints summing to each sequence's length) are left as given, and the planner reports what is wrong with
them. Short members are left together too: apart, each fills a tile of its own with few tokens (`_fewer_tiles`
decides by the tiles both ways would visit). A padded call keeps its sequences (its LSE is [B, H, N]: a member
cannot be a sequence there).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from maskc.ir.members import MemberSplit
from maskc.plan.arrays import expand
from maskc.plan.layout_batch import ValueColumns


@dataclass(frozen=True)
class Members:
    """A call's sequences split into their members: one sequence each, in order."""

    how: MemberSplit
    lengths: list[int]
    offsets: np.ndarray  # int64: each member's first token in the call's tensors
    rows: list[int]  # the sequence each member comes from

    def values(self, sequences: ValueColumns) -> ValueColumns:
        """The members' runtime values, from those of the call's sequences (a member keeps its sequence's values
        but the lengths': `n` and the list are its own). Made from each call's values: a call's lists are its own."""
        lengths = self.how.lengths
        columns = {"n": self.lengths, lengths: [[x] for x in self.lengths]}
        columns.update((name, [column[b] for b in self.rows]) for name, column in sequences.columns.items()
                       if name not in columns)
        return ValueColumns(len(self.lengths), columns)


def split(how: MemberSplit, lengths: list[int], offsets: np.ndarray, sequences: ValueColumns,
          tile: tuple[int, int] | None) -> Members | None:
    """A call's sequences as one sequence per non-empty member, the members' order kept; None where the values
    do not split (left for the planner to check and report) or where splitting would not visit fewer tiles of
    `tile` (block_q, block_k) queries x keys (`_fewer_tiles`; None: split wherever the values allow)."""
    count = len(lengths)
    column = sequences.columns.get(how.lengths)
    if column is None:
        if how.default is None:
            return None
        column = [list(how.default)] * count
        values = ValueColumns(count, {how.lengths: column})
    else:
        values = sequences
    read = values.int_lists(how.lengths)
    if read is None:
        return None
    flat, sizes = read
    if len(flat) and flat.min() < 0:
        return None
    ends = np.cumsum(sizes)
    totals = np.concatenate(([0], np.cumsum(flat)))
    firsts = ends - sizes  # each sequence's first member in `flat`
    if not np.array_equal(totals[ends] - totals[firsts], np.asarray(lengths, dtype=np.int64)):
        return None
    seq = np.repeat(np.arange(count), sizes)
    keep = flat > 0
    if not keep.any():
        return None
    seq = seq[keep]
    if tile is not None and not _fewer_tiles(flat[keep], np.asarray(lengths, dtype=np.int64), *tile):
        return None
    offsets = np.asarray(offsets, dtype=np.int64)[seq] + totals[:-1][keep] - totals[firsts][seq]
    return Members(how, flat[keep].tolist(), offsets, seq.tolist())


def _fewer_tiles(members: np.ndarray, lengths: np.ndarray, block_q: int, block_k: int) -> bool:
    """Whether tiling each member on its own visits fewer tiles than tiling each sequence from its start, for both
    a mask that is whole inside each member and one causal inside each: the shapes that bound what a rule
    inside members looks like. Short members lose: each then fills a tile of its own with few tokens (512
    documents of 64 tokens take 512 tiles apart and 256 together); long ones gain the tiles that straddle two
    (ANCHORS' 12 documents: 4,471 against 4,570 at 128 x 128). `members`: the non-empty members' lengths,
    sequence by sequence; `lengths`: the sequences' (the members tile them)."""
    ends = np.cumsum(members)
    starts = ends - members
    # Apart: a member of L tokens has ceil(L / block_q) query tiles; the one holding queries a..b-1 sees keys up to
    # b - 1 when causal, up to L - 1 when whole.
    q_tiles = -(-members // block_q)
    member, tile = expand(q_tiles)
    last_query = np.minimum((tile + 1) * block_q, members[member]) - 1
    apart_causal = int(np.sum(last_query // block_k + 1))
    apart_whole = int(np.sum(q_tiles * -(-members // block_k)))
    # Together: a query tile of a sequence sees from the start of its first query's member to the end of its last
    # query's member (whole), or to its last query (causal).
    seq_start = np.cumsum(lengths) - lengths
    seq, tile = expand(-(-lengths // block_q))
    a = seq_start[seq] + tile * block_q
    b = np.minimum(a + block_q, seq_start[seq] + lengths[seq])
    lo = starts[np.searchsorted(ends, a, side="right")] - seq_start[seq]
    hi = ends[np.searchsorted(ends, b - 1, side="right")] - seq_start[seq]
    together_causal = int(np.sum((b - seq_start[seq] - 1) // block_k - lo // block_k + 1))
    together_whole = int(np.sum(-(-hi // block_k) - lo // block_k))
    return apart_causal < together_causal and apart_whole < together_whole
