"""The planner's fast path for rules that factor over the axes of a tile: `search_by_factors`.

A tile is a box: a range of rows times a range of columns (times a range of frames) of a grid, or a range of a run
of tokens, its one axis. Many neighbourhood rules are a conjunction of *factors*, each reading its own axes:
NATTEN's window `(rows of k near q's row, clamped) and (columns of k near q's column, clamped)`, a video's
`abs(q.t - k.t) <= rt and abs(q.y - k.y) <= ry and ...`, CLEAR's disc `(q.y - k.y)^2 + (q.x - k.x)^2 <= r^2` (one
factor over two axes), a dilated window `0 <= q - k < w and (q - k) % d == 0` on a run. The pairs of two boxes are
a product over the axes, so their visible pairs are the product over the factors of each factor's visible part:
a pair of tiles is EMPTY where some factor sees nothing of it, FULL where every factor sees all of it.

Each factor is evaluated once per group of sequences with the same parameter values, into a table with running
sums (a summed-area table), and read per pair of tiles with a few lookups:
- a factor over one axis of a grid: over the absolute coordinates (q.c, k.c), and the pair's rectangle of them;
- a factor that reads its coordinates only as differences (`q.c - k.c`, or `q.c` compared with `k.c`, with the
  same c; for a run, its positions `q - k`): over the differences d = q.c - k.c, and the pair's *window* of them
  (a q range [a, a + m) against a k range [b, b + l) makes every difference in [a - b - l + 1, a - b + m - 1], and
  every combination over the axes is some pair). Such a factor may read several axes (the disc);
- a factor that reads a run's positions only as `q // B` and `k // B`, B a multiple of the tile sizes (a
  block-sparse layout `layout[q // 128][k // 128]`, chunks `q // c == k // c`): the same over a whole pair of
  tiles, so over (q tile, k tile), and a factor of its own even beside others on the same axis (`and k <= q`).
Only the k tiles each factor can see from a q tile are looked at. The general search (`planner.py`) reaches the
same kinds by interval arithmetic over boxes of tiles, in rounds of halving with hundreds of numpy calls each
(4-40 ms for a 32K-token image on the dev VM). This path is exact, so its tiles need no refinement.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from maskc import ir
from maskc.ir.evaluate import Env, evaluate
from maskc.memo import per_object
from maskc.plan.arrays import expand
from maskc.plan.layout import scalar_column
from maskc.plan.tiling import Tiling

# Token attributes as axes of a tile, (t, y, x): a grid's coordinates; a run's positions, along its one axis.
_GRID_AXES = {"t": 0, "y": 1, "x": 2}
_RUN_AXES = {"index": 2, "pos": 2}
_UNREAD = (ir.Member, ir.FamilyIndex, ir.Index, ir.ArrayLen, ir.ArraySum, ir.Ancestor, ir.SegmentBound)
# Past these the general search takes over: its cost follows the tiles it visits, this path's the cells of its
# tables (~4 n for a grid of n tokens, 8 n for a video, 2 n for a run, each a few numpy operations of the rule;
# times the groups of parameter values). Measured on the dev VM, a dilated window on a run: at 2^16 cells (32768
# tokens) 2.6 ms against the search's 15.6, at 2^21 cells 115 against 65; the limit sits between. The tile pairs
# looked at are capped too (a dozen int64 temporaries of 3 columns each).
MAX_CELLS = 1 << 19
MAX_PAIRS = 1 << 19


@dataclass(frozen=True)
class Factor:
    """Conjuncts of a rule that read the axes `axes` (of (t, y, x)) and no other."""

    expr: ir.Expr
    axes: tuple[int, ...]
    # "differences": reads them only as differences, evaluated over q.c - k.c; "absolute": over (q.c, k.c), one
    # axis of a grid; "tiles": a run's positions only as `q // B` and `k // B`, B a multiple of the side's tile
    # size, so the same over a whole tile: evaluated over (q tile, k tile) (block-sparse layouts, chunks).
    kind: str
    steps: tuple[tuple[str, str, ir.Expr], ...] = ()  # for "tiles": (side, attribute, B) of every `x // B`


@dataclass(frozen=True)
class FactoredForm:
    """A region whose q side and k side are each one segment tiled on its own (a grid, or a run of one segment),
    and whose rule is a conjunction of factors."""

    factors: tuple[Factor, ...]
    axes: tuple[tuple[str, int], ...]  # token attribute -> axis, for this region's blocks
    params: tuple[str, ...]  # the parameters the rule reads (n among them)
    bools: frozenset[str]  # those of them that are bools
    # The grid's axes, where its own pairs are read as positions, `q - k` (a dilated window laid out as a grid,
    # passes/residue_grid.py): the difference is the coordinates' differences times the grid's strides along
    # them, so the tables depend on those strides.
    positions: tuple[int, ...] = ()


@per_object
def factored_forms(program: ir.Program, tiling: Tiling) -> tuple[FactoredForm | None, ...]:
    """Each region in this path's form, or None where the path does not apply (found once per program)."""
    return tuple(_factored_form(program, region, tiling) for region in program.regions)


def _conjuncts(e: ir.Expr) -> list[ir.Expr]:
    if isinstance(e, ir.Logic) and e.op == "and":
        return [c for arg in e.args for c in _conjuncts(arg)]
    return [e]


def _factored_form(program: ir.Program, region: ir.Region, tiling: Tiling) -> FactoredForm | None:
    kinds = set()
    for side in (region.q, region.k):
        if len(side.segments) != 1:
            return None
        s = program.segment_index(side.segments[0])
        block = next((b for b in tiling.blocks if b.first == s == b.last), None)
        if block is None or program.segments[s].kind == "family":
            return None
        kinds.add(block.grid)
    if len(kinds) != 1:
        return None
    grid = kinds.pop()
    axis_of = _GRID_AXES if grid else _RUN_AXES
    # On a grid joined to itself, positions read as differences span every axis of the grid (`q - k` is the
    # coordinates' differences times the strides).
    own_axes = set(range(3 - len(program.segment(region.q.segments[0]).dims), 3)) if grid else set()
    positions = grid and region.q.segments == region.k.segments
    conjuncts, axes, factors, positions_read = [], [], [], False
    for c in _conjuncts(region.pred):
        steps = None if grid else _tile_steps(c)
        if steps:  # constant over every pair of tiles: a factor of its own, whatever else reads the axis
            factors.append(Factor(c, (2,), "tiles", steps))
            continue
        nodes = list(ir.walk(c))
        reads_positions = grid and any(isinstance(n, ir.Token) and n.attr in _RUN_AXES for n in nodes)
        if reads_positions and not (positions and _differences_only(c)):
            return None
        if any(isinstance(n, _UNREAD) or (isinstance(n, ir.Token) and n.attr not in axis_of | _RUN_AXES)
               for n in nodes):
            return None
        conjuncts.append(c)
        axes.append(set(own_axes) if reads_positions else {axis_of[n.attr] for n in nodes if isinstance(n, ir.Token)})
        positions_read |= reads_positions
    # Conjuncts that share an axis are one factor; those that read no token go with the first factor.
    groups: list[tuple[set[int], list[ir.Expr]]] = []
    for c, read in zip(conjuncts, axes):
        if not read:
            continue
        joined = [g for g in groups if g[0] & read]
        merged = (set(read).union(*(g[0] for g in joined)), [e for g in joined for e in g[1]] + [c])
        groups = [g for g in groups if not g[0] & read] + [merged]
    constant = [c for c, read in zip(conjuncts, axes) if not read]
    if not groups and not factors:
        return None  # (no token read: the search decides a whole block at once)
    if groups:
        groups[0][1].extend(constant)
    elif constant:
        factors[0] = Factor(ir.Logic("and", (factors[0].expr, *constant)), factors[0].axes, "tiles", factors[0].steps)
    for read, exprs in groups:
        expr = exprs[0] if len(exprs) == 1 else ir.Logic("and", tuple(exprs))
        differences = _differences_only(expr)
        if not differences and (len(read) > 1 or not grid):  # (a run's absolute table would be n x n)
            return None
        factors.append(Factor(expr, tuple(sorted(read)), "differences" if differences else "absolute"))
    params = tuple(sorted(ir.params_used(region.pred)))
    bools = frozenset(p for p in params if p != "n" and program.param(p).type.elem == "bool")
    return FactoredForm(tuple(factors), tuple(axis_of.items()), params, bools,
                        tuple(sorted(own_axes)) if positions_read else ())


def _differences_only(e: ir.Expr) -> bool:
    """Whether `e` reads the tokens only through `q.a - k.a`, `k.a - q.a` or a comparison of q.a with k.a (the
    same attribute a): then, evaluated with q.a = d and k.a = 0, it gives its value at every pair whose
    differences are d."""
    if isinstance(e, (ir.Binary, ir.Compare)) and (isinstance(e, ir.Compare) or e.op == "-"):
        a, b = e.lhs, e.rhs
        if isinstance(a, ir.Token) and isinstance(b, ir.Token) and a.attr == b.attr and {a.side, b.side} == {"q", "k"}:
            return True
    if isinstance(e, ir.Token):
        return False
    return all(_differences_only(child) for child in ir.children(e))


def _tile_steps(e: ir.Expr) -> tuple[tuple[str, str, ir.Expr], ...] | None:
    """(side, attribute, B) of every `q // B` or `k // B` in `e` (a run's position, `q.pos` too, over a constant or a
    parameter B) where it reads the tokens only so, and reads no member or segment bound; else None. Lists may be
    read (a block-sparse layout `layout[q // 128][k // 128]`)."""
    steps = []

    def walk(node) -> bool:
        if isinstance(node, ir.Binary) and node.op == "//" and isinstance(node.lhs, ir.Token) \
                and node.lhs.attr in _RUN_AXES and isinstance(node.rhs, (ir.Const, ir.Param)):
            steps.append((node.lhs.side, node.lhs.attr, node.rhs))
            return True
        if isinstance(node, (ir.Token, ir.Member, ir.FamilyIndex, ir.SegmentBound)):
            return False
        return all(walk(child) for child in ir.children(node))

    return tuple(steps) if walk(e) and steps else None


# ---------------------------------------------------------------------------------------------------
# Tables of a factor, per group of parameter values
# ---------------------------------------------------------------------------------------------------


def _running_sums(visible: np.ndarray) -> np.ndarray:
    """Running sums over every axis but the first (the group), with a zero border: sums[g, i, j, ...] =
    visible[g, :i, :j, ...].sum(). In int32 (a table has at most MAX_CELLS cells), summed in place: half the
    memory traffic of int64 temporaries."""
    sums = np.zeros((visible.shape[0], *(s + 1 for s in visible.shape[1:])), dtype=np.int32)
    inner = sums[(slice(None), *(slice(1, None) for _ in visible.shape[1:]))]
    np.cumsum(visible, axis=1, dtype=np.int32, out=inner)
    for axis in range(2, visible.ndim):
        np.cumsum(inner, axis=axis, out=inner)
    return sums


def _first_last(seen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first and the last index along the last axis where `seen` holds: (its length, -1) where it nowhere
    does, so that first > last."""
    some = seen.any(axis=-1)
    length = seen.shape[-1]
    return (np.where(some, seen.argmax(axis=-1), length),
            np.where(some, length - 1 - seen[..., ::-1].argmax(axis=-1), -1))


def _box_count(sums: np.ndarray, group: np.ndarray, lo: list[np.ndarray], hi: list[np.ndarray]) -> np.ndarray:
    """How many cells of each group's table lie in the boxes [lo, hi] (inclusive, per axis, in the table's
    cells; 0 where a box is empty), by inclusion and exclusion over the box's corners."""
    empty = np.zeros(len(group), dtype=bool)
    for a in range(len(lo)):
        empty |= lo[a] > hi[a]
    ends = [(np.where(empty, 0, lo[a]), np.where(empty, 0, hi[a] + 1)) for a in range(len(lo))]
    total = np.zeros(len(group), dtype=np.int64)
    for corner in range(1 << len(lo)):
        index = tuple(ends[a][corner >> a & 1 ^ 1] for a in range(len(lo)))
        if bin(corner).count("1") % 2:
            total -= sums[(group, *index)]
        else:
            total += sums[(group, *index)]
    return total


class _DifferenceTable:
    """A factor over differences: its table over the differences of its axes, and the range of differences where
    each group sees anything ([s_lo, s_hi] per axis; s_lo > s_hi where it sees nothing)."""

    def __init__(self, factor: Factor, axis_of: dict[str, int], params: dict[str, np.ndarray], lo, hi,
                 strides: np.ndarray | None = None):
        """`strides` [groups, 3]: a grid's strides per axis, where the factor reads positions (q - k) on it."""
        self.axes = factor.axes
        shape = [len(strides) if strides is not None else len(next(iter(params.values()))) if params else 1]
        tokens = {}
        position = np.zeros([1] * (len(self.axes) + 1), dtype=np.int64)
        for attr, a in axis_of.items():
            if a in self.axes:
                d = np.arange(lo[a], hi[a] + 1, dtype=np.int64)
                tokens[("q", attr)] = d.reshape([1] + [-1 if b == a else 1 for b in self.axes])
                tokens[("k", attr)] = 0
                if strides is not None:
                    position = position + tokens[("q", attr)] * strides[:, a].reshape([-1] + [1] * len(self.axes))
        if strides is not None:
            for attr in _RUN_AXES:
                tokens[("q", attr)], tokens[("k", attr)] = position, 0
        shape += [int(hi[a] - lo[a] + 1) for a in self.axes]
        value = evaluate(factor.expr, Env(params={n: v.reshape([-1] + [1] * len(self.axes)) for n, v in params.items()},
                                          tokens=tokens))
        visible = np.broadcast_to(np.asarray(value, dtype=bool), tuple(shape))
        groups = shape[0]
        self.s_lo, self.s_hi = np.zeros((groups, 3), np.int64), np.zeros((groups, 3), np.int64)
        for i, a in enumerate(self.axes):
            seen = visible.any(axis=tuple(j + 1 for j in range(len(self.axes)) if j != i))  # [groups, cells along a]
            first, last = _first_last(seen)
            self.s_lo[:, a], self.s_hi[:, a] = first + lo[a], last + lo[a]
        sees = (self.s_lo[:, list(self.axes)] <= self.s_hi[:, list(self.axes)]).all(axis=1)
        # Only the part of the table where some group sees anything is summed.
        self.u_lo = self.s_lo[sees].min(axis=0) if sees.any() else lo.copy()
        self.u_hi = self.s_hi[sees].max(axis=0) if sees.any() else lo - 1
        cut = tuple(slice(int(self.u_lo[a] - lo[a]), max(int(self.u_hi[a] - lo[a] + 1), 0)) for a in self.axes)
        self.sums = _running_sums(visible[(slice(None), *cut)])

    def k_range(self, rows: "_Rows") -> dict:
        """Per axis of the factor, the k coordinates some q coordinate in [q_lo, q_hi] may see."""
        return {a: (rows.q_lo[:, a] - self.s_hi[rows.group, a], rows.q_hi[:, a] - self.s_lo[rows.group, a])
                for a in self.axes}

    def count(self, rows: "_Rows"):
        """(visible differences in each pair's window, the window's size)."""
        w_lo = {a: rows.q_lo[:, a] - rows.k_hi[:, a] for a in self.axes}
        w_hi = {a: rows.q_hi[:, a] - rows.k_lo[:, a] for a in self.axes}
        size = np.prod([w_hi[a] - w_lo[a] + 1 for a in self.axes], axis=0)
        count = _box_count(self.sums, rows.group,
                           [np.maximum(w_lo[a], self.u_lo[a]) - self.u_lo[a] for a in self.axes],
                           [np.minimum(w_hi[a], self.u_hi[a]) - self.u_lo[a] for a in self.axes])
        return count, size


class _AbsoluteTable:
    """A factor over one axis c of a grid: its table over (q.c, k.c), and for each q tile along c the k
    coordinates some of its rows see."""

    def __init__(self, factor: Factor, axis_of: dict[str, int], params: dict[str, np.ndarray], q_len: int,
                 k_len: int, q_step: int):
        (self.axis,) = factor.axes
        groups = len(next(iter(params.values()))) if params else 1
        q = np.arange(q_len, dtype=np.int64).reshape(1, -1, 1)
        k = np.arange(k_len, dtype=np.int64).reshape(1, 1, -1)
        tokens = {(side, attr): (q if side == "q" else k) for attr, a in axis_of.items() if a == self.axis
                  for side in "qk"}
        value = evaluate(factor.expr, Env(params={n: v.reshape(-1, 1, 1) for n, v in params.items()}, tokens=tokens))
        visible = np.broadcast_to(np.asarray(value, dtype=bool), (groups, q_len, k_len))
        self.sums = _running_sums(visible)
        # Per q tile along the axis (q_step rows each): the first and last k coordinate any of its rows sees.
        tiles = -(-q_len // q_step)
        rows = np.zeros((groups, tiles * q_step, k_len), dtype=bool)
        rows[:, :q_len] = visible
        seen = rows.reshape(groups, tiles, q_step, k_len).any(axis=2)  # [groups, tiles, k]
        self.first, self.last = _first_last(seen)

    def k_range(self, rows: "_Rows") -> dict:
        c = self.axis
        return {c: (self.first[rows.group, rows.qt[:, c]], self.last[rows.group, rows.qt[:, c]])}

    def count(self, rows: "_Rows"):
        c = self.axis
        size = (rows.q_hi[:, c] - rows.q_lo[:, c] + 1) * (rows.k_hi[:, c] - rows.k_lo[:, c] + 1)
        return _box_count(self.sums, rows.group, [rows.q_lo[:, c], rows.k_lo[:, c]],
                          [rows.q_hi[:, c], rows.k_hi[:, c]]), size


class _TileTable:
    """A factor that is the same over every pair of tiles (a run read only as `q // B`, `k // B`, B a multiple of
    the tile size): its value per (q tile, k tile) of each instance, and per q tile the k tiles it sees."""

    def __init__(self, factor: Factor, bt, batch, inst: dict[str, np.ndarray], params: dict[str, np.ndarray],
                 group: np.ndarray, q_tiles: np.ndarray, k_tiles: np.ndarray, q_size: int, k_size: int):
        starts = {"q": bt.start[inst["qg"]], "k": bt.start[inst["kg"]]}  # where each instance's block begins
        for side, attr, step in factor.steps:
            b = np.asarray(evaluate(step, Env(params=params)), dtype=np.int64).reshape(-1)[group] \
                if isinstance(step, ir.Param) else np.full(len(group), step.value, dtype=np.int64)
            size = q_size if side == "q" else k_size
            # A tile lies in one step of B when B is a multiple of its size, and its positions (in the sequence,
            # for `index`) start on a multiple of B.
            if not ((b > 0) & (b % size == 0) & ((starts[side] % np.maximum(b, 1) == 0) | (attr == "pos"))).all():
                raise _Declined
        q_len, k_len = int(q_tiles.max()), int(k_tiles.max())
        t = np.arange(q_len, dtype=np.int64).reshape(1, -1, 1) * q_size
        u = np.arange(k_len, dtype=np.int64).reshape(1, 1, -1) * k_size
        tokens = {("q", "pos"): t, ("q", "index"): starts["q"].reshape(-1, 1, 1) + t,
                  ("k", "pos"): u, ("k", "index"): starts["k"].reshape(-1, 1, 1) + u}
        values = {n: v[group].reshape(-1, 1, 1) for n, v in params.items()}
        if ir.arrays_used(factor.expr):  # lists are each sequence's own: one instance at a time
            visible = np.zeros((len(group), q_len, k_len), dtype=bool)
            for i, b in enumerate(inst["seq"].tolist()):
                env = Env(params={n: v[i] for n, v in values.items()}, arrays=batch.values[b].arrays,
                          tokens={key: v[i if v.shape[0] > 1 else 0] for key, v in tokens.items()})
                visible[i] = evaluate(factor.expr, env)
        else:
            visible = np.broadcast_to(np.asarray(evaluate(factor.expr, Env(params=values, tokens=tokens)), dtype=bool),
                                      (len(group), q_len, k_len))
        self.visible = visible
        first, last = _first_last(visible)  # (k tiles; as k coordinates below)
        self.first, self.last = first * k_size, np.where(last < 0, -1, (last + 1) * k_size - 1)

    def k_range(self, rows: "_Rows") -> dict:
        return {2: (self.first[rows.inst, rows.qt[:, 2]], self.last[rows.inst, rows.qt[:, 2]])}

    def count(self, rows: "_Rows"):
        count = self.visible[rows.inst, rows.qt[:, 2], rows.kt[:, 2]].astype(np.int64)
        return count, np.ones_like(count)  # (all the pair's pairs, or none)


class _Declined(Exception):
    """Values this path does not take: the search plans them."""


# ---------------------------------------------------------------------------------------------------
# The tile pairs
# ---------------------------------------------------------------------------------------------------


@dataclass
class _Rows:
    """The q tiles (or pairs of tiles) being looked at: per row its instance, its group of parameter values, its q
    tile along each axis and that tile's box [q_lo, q_hi]; for pairs also the k tile and its box."""

    inst: np.ndarray
    group: np.ndarray
    qt: np.ndarray  # int64 [P, 3]
    q_lo: np.ndarray
    q_hi: np.ndarray
    kt: np.ndarray | None = None
    k_lo: np.ndarray | None = None
    k_hi: np.ndarray | None = None


def search_by_factors(form: FactoredForm, batch, inst: dict[str, np.ndarray]) -> dict | None:
    """The tile pairs the region makes some pair of visible, for every instance (one per sequence: its segment
    against its segment): arrays `inst`, `qt` (q tile, in its sequence), `kt` (k tile) and `full` (every pair of
    the two tiles visible); or None past MAX_CELLS or MAX_PAIRS, or for values the path declines. Sequences with
    the same values of the parameters the rule reads share one evaluation of it."""
    bt = batch.blocks
    qg, kg = inst["qg"], inst["kg"]
    q_dims, k_dims = bt.dims[qg], bt.dims[kg]  # [I, 3]
    q_shape, k_shape = bt.q_shape[qg[0]], bt.k_shape[kg[0]]  # (one block each side: one tile shape)
    q_tiles = -(-q_dims // q_shape)  # tiles per axis
    k_tiles = -(-k_dims // k_shape)
    values = np.stack([batch.bounds[:, -1] if name == "n" else scalar_column(batch.values, name).astype(np.int64)
                       for name in form.params] or [np.zeros(len(batch.bounds), np.int64)], axis=1)
    values = values.take(inst["seq"], axis=0)
    if form.positions:  # (the tables depend on the grid's strides along its axes too: a frame, a row, a token)
        all_strides = np.stack([q_dims[:, 1] * q_dims[:, 2], q_dims[:, 2], np.ones(len(q_dims), np.int64)], axis=1)
        values = np.concatenate([values, all_strides[:, list(form.positions)]], axis=1)
    if (values == values[:1]).all():  # (the usual case, where np.unique costs ~0.1 ms)
        keys, group = values[:1], np.zeros(len(values), dtype=np.int64)
    else:
        keys, group = np.unique(values, axis=0, return_inverse=True)
        group = group.reshape(-1)
    params = {name: keys[:, j].astype(bool) if name in form.bools else keys[:, j] for j, name in enumerate(form.params)}
    strides = None
    if form.positions:  # per group, the strides along the grid's axes (0 along the others, which it lacks)
        strides = np.zeros((len(keys), 3), np.int64)
        strides[:, list(form.positions)] = keys[:, -len(form.positions):]
    axis_of = dict(form.axes)

    # Differences d = q.c - k.c lie in [-(k dim - 1), q dim - 1]: tables over the widest of the batch.
    q_len, k_len = q_dims.max(axis=0), k_dims.max(axis=0)
    lo, hi = 1 - k_len, q_len - 1
    tables = []
    for f in form.factors:
        if f.kind == "tiles":
            cells = float(len(group) * q_tiles[:, 2].max() * k_tiles[:, 2].max())
        else:
            cells = len(keys) * np.prod([float(hi[a] - lo[a] + 1) if f.kind == "differences" else
                                         float(q_len[a] * k_len[a]) for a in f.axes])
        if cells > MAX_CELLS:
            return None
        try:
            if f.kind == "differences":
                tables.append(_DifferenceTable(f, axis_of, params, lo, hi, strides))
            elif f.kind == "absolute":
                a = f.axes[0]
                tables.append(_AbsoluteTable(f, axis_of, params, int(q_len[a]), int(k_len[a]), int(q_shape[a])))
            else:
                tables.append(_TileTable(f, bt, batch, inst, params, group, q_tiles[:, 2], k_tiles[:, 2],
                                         int(q_shape[2]), int(k_shape[2])))
        except (ZeroDivisionError, _Declined):  # values the checks would refuse, or tiles across steps: the search
            return None

    # Every q tile of every instance: its box [q_lo, q_hi] per axis, and the k tiles worth a look per axis: those
    # every factor may see, the others all.
    which, local = expand(np.prod(q_tiles, axis=1))
    qt = _axes_of(local, q_tiles.take(which, axis=0))
    q_lo = qt * q_shape
    rows = _Rows(which, group.take(which), qt, q_lo, np.minimum(q_lo + q_shape, q_dims.take(which, axis=0)) - 1)
    first = np.zeros_like(qt)
    last = k_tiles.take(which, axis=0) - 1
    for table in tables:
        for a, (k_first, k_last) in table.k_range(rows).items():
            first[:, a] = np.maximum(first[:, a], np.maximum(k_first, 0) // k_shape[a])
            last[:, a] = np.minimum(last[:, a], np.where(k_last < 0, -1, k_last // k_shape[a]))
    tile_tables = [table for table in tables if isinstance(table, _TileTable)]
    if tile_tables:  # (a run) the k tiles the first tile table sees, where the other factors' ranges allow
        i, t, u = np.nonzero(tile_tables[0].visible)
        real = (t < q_tiles[i, 2]) & (u < k_tiles[i, 2])  # (the table is as wide as the longest sequence)
        row, u = ((np.cumsum(q_tiles[:, 2]) - q_tiles[:, 2])[i] + t).compress(real), u.compress(real)
        seen = (first[row, 2] <= u) & (u <= last[row, 2])
        if np.count_nonzero(seen) > MAX_PAIRS:
            return None
        pair, u = row.compress(seen), u.compress(seen)
        kt = np.zeros((len(pair), 3), dtype=np.int64)
        kt[:, 2] = u
    else:
        span = np.maximum(last - first + 1, 0)
        candidates = np.prod(span, axis=1)
        if candidates.sum() > MAX_PAIRS:
            return None
        pair, offset = expand(candidates)
        kt = first[pair] + _axes_of(offset, span[pair])
    k_lo = kt * k_shape
    pairs = _Rows(which.take(pair), rows.group.take(pair), qt.take(pair, axis=0), rows.q_lo.take(pair, axis=0),
                  rows.q_hi.take(pair, axis=0), kt, k_lo, np.minimum(k_lo + k_shape, k_dims.take(which.take(pair), axis=0)) - 1)
    keep = np.ones(len(pair), dtype=bool)
    full = np.ones(len(pair), dtype=bool)
    for table in tables:
        count, size = table.count(pairs)
        keep &= count > 0
        full &= count == size
    i = pairs.inst.compress(keep)
    return dict(inst=i,
                qt=bt.first_q[qg].take(i) + _tile_id(pairs.qt.compress(keep, axis=0), q_tiles.take(i, axis=0)),
                kt=bt.first_k[kg].take(i) + _tile_id(kt.compress(keep, axis=0), k_tiles.take(i, axis=0)),
                full=full.compress(keep))


def _axes_of(local: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """int64 [P, 3]: (t, y, x) of position `local` in a row-major [t, y, x] arrangement of counts per axis."""
    x = local % counts[:, 2]
    rest = local // counts[:, 2]
    return np.stack([rest // counts[:, 1], rest % counts[:, 1], x], axis=1)


def _tile_id(axes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The tile number of (t, y, x) in a block with `counts` tiles per axis (tiling.py's frames, rows, columns)."""
    return (axes[:, 0] * counts[:, 1] + axes[:, 1]) * counts[:, 2] + axes[:, 2]
