"""Packed members as sequences of their own: a tiling that starts at every member of a family no rule crosses.

Tiles are cut per sequence, from its first token (plan/tiling.py). A mask whose sequence is one family whose
members never see each other (examples/document.mask: `D[i] = docs[i]`, `D[i] -> D[i] causal`) gets tiles that
straddle members, and a tile across a boundary is partial (mask code on every pair) and mostly hidden. Run as
a packed batch of one sequence per member, the same mask has tiles that start at each member's first token:
for ANCHORS' document workload (12 documents in 32768 tokens) the 128 x 128 tiles visited fall from 4,570 to
4,471 and the partial ones from 711 to 263, and on an H100 the forward's cycles by 5.9%, the dK/dV kernel's by
5.0% (docs/benchmarks.md, thirty-seventh session).

Splitting is exact when nothing of the mask changes for a member taken out of its sequence:
  - the layout is that one family, `F[i] = L[i]` with `L` a runtime list parameter (a member's sequence gets
    `L = [length]` and n = length);
  - every rule is `F[i] -> F[i]` (the passes give it the conjunct `q`'s member == `k`'s member);
  - the rest of each predicate reads nothing that moves with the member: `q.pos`, `k.pos`, scalar parameters
    other than `n`, and the positions `q`, `k` only where a shift of both cancels (`k <= q`, `q - k < w`); no
    member index, no list, no `n`.
The runtime applies it to a packed call's values (`split`, then `Members.values`) before planning, so every
planner and kernel sees an ordinary packed batch; values it cannot read (not lists of non-negative ints summing to
each sequence's length) are left as given, and the planner reports what is wrong with them. Short members are left
together too: apart, each fills a tile of its own with few tokens (`_fewer_tiles` decides by the tiles both ways
would visit). A padded call keeps its sequences (its LSE is [B, H, N]: a member cannot be a sequence there).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from maskc import ir
from maskc.plan.arrays import expand
from maskc.plan.layout_batch import ValueColumns


@dataclass(frozen=True)
class MemberSplit:
    """The family whose members a call's sequences split into, and the list parameter of its lengths."""

    family: str
    lengths: str
    default: tuple | None  # the list parameter's default (a call may leave it out)


def member_split(program: ir.Program) -> MemberSplit | None:
    """How `program`'s sequences split into their family's members (see the module's docstring), or None."""
    if len(program.segments) != 1:
        return None
    family = program.segments[0]
    if family.kind != "family" or not isinstance(family.length, ir.Index):
        return None
    name = family.length.array
    decl = program.param(name)
    if decl is None or family.length.indices != (ir.FamilyIndex(),) or family.count != ir.ArrayLen(name):
        return None
    if not program.regions or not all(_within_members(r, family.name) for r in program.regions):
        return None
    return MemberSplit(family.name, name, decl.default)


_SAME_MEMBER = (ir.Compare("==", ir.Member("q"), ir.Member("k")), ir.Compare("==", ir.Member("k"), ir.Member("q")))


def _within_members(region: ir.Region, family: str) -> bool:
    """Whether the region is `F[i] -> F[i]` with a predicate that no member's place in its sequence changes."""
    if region.q.segments != (family,) or region.k.segments != (family,):
        return False
    parts = ir.conjuncts(region.pred)
    same = [p for p in parts if p in _SAME_MEMBER]
    return bool(same) and all(_shift(p) == 0 for p in parts if p not in _SAME_MEMBER)


def _shift(e: ir.Expr) -> int | None:
    """How `e` changes when both tokens move by c inside one sequence (their member moving with them): by
    `_shift(e) * c`, or None where it changes otherwise or cannot be told (a member index, a list, `n`)."""
    if isinstance(e, ir.Const):
        return 0
    if isinstance(e, ir.Param):
        return None if e.name == "n" else 0
    if isinstance(e, ir.Token):
        return {"pos": 0, "index": 1, "start": 1, "end": 1}.get(e.attr)
    if isinstance(e, ir.Unary):
        a = _shift(e.arg)
        if a is None:
            return None
        return -a if e.op == "neg" else (0 if a == 0 else None)
    if isinstance(e, ir.Pow):
        return 0 if _shift(e.base) == 0 else None
    if isinstance(e, ir.Binary):
        a, b = _shift(e.lhs), _shift(e.rhs)
        if a is None or b is None:
            return None
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if e.op in ("min", "max"):
            return a if a == b else None
        if e.op == "*":
            if a == b == 0:
                return 0
            scale = e.lhs if b != 0 else e.rhs  # the factor that does not move, if it is a number
            moving = b if b != 0 else a
            return moving * scale.value if isinstance(scale, ir.Const) and type(scale.value) is int else None
        return 0 if a == b == 0 else None  # // and %
    if isinstance(e, ir.Compare):
        a, b = _shift(e.lhs), _shift(e.rhs)
        return 0 if a is not None and a == b else None
    if isinstance(e, ir.Logic):
        return 0 if all(_shift(a) == 0 for a in e.args) else None
    return None  # Member, FamilyIndex, lists and their aggregates, ancestors, segment bounds


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
