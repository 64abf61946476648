"""Runtime values and the concrete layout of each sequence.

The IR's layout is symbolic: segment lengths are expressions in the parameters. For a batch of sequences
with given runtime values this module validates the values (types, ranges), evaluates every length, checks
that the segments tile [0, n) exactly, and returns a `ConcreteLayout` per sequence: the start of every
segment (every family member counts as one), in order.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from maskc import ir
from maskc.diagnostics import Span, ValueProblem, show_value, value_problem
from maskc.ir import MAX_FAMILY_MEMBERS, layout_uses_n  # noqa: F401  (part of this module's interface)
from maskc.ir.evaluate import Env, evaluate
from maskc.memo import per_object

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
MAX_SEQUENCE_LENGTH = 2**31 - 1
@dataclass(frozen=True)
class SequenceValues:
    """The runtime values of one sequence: `n`, scalars and list parameters (numpy arrays)."""

    n: int | None
    scalars: dict[str, int | bool] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    def key(self) -> tuple:
        """A hashable identity, for caching descriptors by value."""
        return (
            self.n,
            tuple(sorted(self.scalars.items())),
            tuple((k, v.shape, v.dtype.str, v.tobytes()) for k, v in sorted(self.arrays.items())),
        )


@dataclass(frozen=True)
class ConcreteLayout:
    """Where the segments of one sequence lie.

    Concrete segments are the symbolic segments with families expanded, in layout order. `first[s]` to
    `first[s + 1]` are the concrete entries of symbolic segment `s`; `member` is the family index (0 for
    segments that are not families).
    """

    n: int
    starts: np.ndarray  # int64 [C]
    lengths: np.ndarray  # int64 [C]
    symbol: np.ndarray  # int32 [C]
    member: np.ndarray  # int32 [C]
    first: np.ndarray  # int64 [S + 1]
    grid_dims: dict[int, tuple[int, ...]]  # symbolic segment -> (h, w) or (t, h, w)
    # Where each symbolic segment begins (an empty one where the next does), then n: a row of
    # tiling.segment_boundaries, known for free while laying out (the planner needs it for every sequence).
    bounds: tuple[int, ...]

    def span(self, symbol: int) -> tuple[int, int]:
        """The token range [start, end) of a symbolic segment (all members of a family)."""
        lo, hi = self.first[symbol], self.first[symbol + 1]
        if lo == hi:
            start = self.starts[lo] if lo < len(self.starts) else self.n
            return int(start), int(start)
        return int(self.starts[lo]), int(self.starts[hi - 1] + self.lengths[hi - 1])


class _MadeOnDemand(Sequence):
    """A read-only sequence whose items are made when first asked for, then kept."""

    _made: dict

    def __getitem__(self, b):
        if isinstance(b, slice):
            return [self[i] for i in range(*b.indices(len(self)))]
        b = range(len(self))[b]  # an IndexError past the end, as a list's
        made = self._made.get(b)
        if made is None:
            made = self._made[b] = self._make(b)
        return made

    def _make(self, b: int):
        raise NotImplementedError

    def __getstate__(self) -> dict:  # a pickled plan carries the columns, not the items made from them
        return {**self.__dict__, "_made": {}}


class BatchLayouts(_MadeOnDemand):
    """The layouts of a batch bound at once (`layout_batch.bind_batch`), as columns: each field of every sequence
    end to end, which is how the planner reads them, and a sequence's ConcreteLayout made only when it is asked
    for (a batch of a thousand documents need not make a thousand objects). Its layouts have no grids. Besides a
    ConcreteLayout's fields it keeps what bind_batch finds on the way and the planner needs for the whole batch
    (the sequences lie back to back in one global coordinate). Its arrays are read-only: the planner reads them
    as they are, and a plan keeps its layouts."""

    def __init__(self, starts: np.ndarray, lengths: np.ndarray, symbol: np.ndarray, member: np.ndarray,
                 counts: np.ndarray, bounds: np.ndarray, entry_ptr: np.ndarray, entry_seq: np.ndarray,
                 base: np.ndarray, global_starts: np.ndarray, codes: np.ndarray):
        self.starts, self.lengths = starts, lengths  # int64 [C]: every sequence's entries (starts in the sequence)
        self.symbol, self.member = symbol, member  # int64 [C]
        self.counts = counts  # int64 [B, S]: entries per symbolic segment
        self.bounds = bounds  # int64 [B, S + 1]: a row of ConcreteLayout.bounds per sequence
        self.entry_ptr = entry_ptr  # int64 [B + 1]: sequence b's entries are [entry_ptr[b], entry_ptr[b + 1])
        self.entry_seq = entry_seq  # int64 [C]: the sequence of each entry
        self.base = base  # int64 [B]: where each sequence's token 0 lies in the batch
        self.global_starts = global_starts  # int64 [C]: starts in the batch
        self.codes = codes  # int32 [C]: symbol | member << 5, as the kernel's segment table holds them
        for a in (starts, lengths, symbol, member, counts, bounds, entry_ptr, entry_seq, base, global_starts, codes):
            a.flags.writeable = False
        self._made: dict[int, ConcreteLayout] = {}

    def __len__(self) -> int:
        return len(self.bounds)

    def _make(self, b: int) -> ConcreteLayout:
        lo, hi = int(self.entry_ptr[b]), int(self.entry_ptr[b + 1])
        symbol, member, first = _entry_tables(tuple(self.counts[b].tolist()))
        bounds = tuple(self.bounds[b].tolist())
        return ConcreteLayout(n=bounds[-1], starts=self.starts[lo:hi], lengths=self.lengths[lo:hi], symbol=symbol,
                              member=member, first=first, grid_dims={}, bounds=bounds)


class BatchValues(_MadeOnDemand):
    """The runtime values of a batch bound at once, as columns (a list per scalar parameter, each list parameter's
    entries end to end), and a sequence's SequenceValues made only when it is asked for."""

    def __init__(self, ns: list[int | None], scalars: dict[str, list], lists: dict[str, tuple[np.ndarray, list[int]]]):
        self.ns = ns
        self.scalars = scalars  # name -> one value per sequence, in declaration order
        self.lists = lists  # name -> (int64 entries of every sequence, where each sequence's end)
        self._made: dict[int, SequenceValues] = {}

    def __len__(self) -> int:
        return len(self.ns)

    def _make(self, b: int) -> SequenceValues:
        arrays = {name: flat[ends[b - 1] if b else 0:ends[b]] for name, (flat, ends) in self.lists.items()}
        return SequenceValues(self.ns[b], {name: col[b] for name, col in self.scalars.items()}, arrays)


def joined(layouts: Sequence[ConcreteLayout], name: str, dtype) -> np.ndarray:
    """One field of every layout of a batch, end to end, as a new array of `dtype` (empty for no layouts)."""
    if isinstance(layouts, BatchLayouts):
        return getattr(layouts, name).astype(dtype)
    return np.concatenate([getattr(lay, name) for lay in layouts] or [np.zeros(0, dtype)], dtype=dtype)


def entries_per_sequence(layouts: Sequence[ConcreteLayout]) -> np.ndarray:
    """int64 [B]: how many concrete segments each sequence has."""
    if isinstance(layouts, BatchLayouts):
        return layouts.entry_ptr[1:] - layouts.entry_ptr[:-1]
    return np.array([len(lay.starts) for lay in layouts], dtype=np.int64)


def entry_pointers(layouts: Sequence[ConcreteLayout]) -> np.ndarray:
    """int64 [B + 1]: the concrete segments of every layout end to end, where each sequence's begin (the last: all)."""
    if isinstance(layouts, BatchLayouts):
        return layouts.entry_ptr
    ptr = np.zeros(len(layouts) + 1, dtype=np.int64)
    np.cumsum([len(lay.starts) for lay in layouts], out=ptr[1:])
    return ptr


def segment_codes(layouts: Sequence[ConcreteLayout]) -> np.ndarray:
    """int32 [C]: symbol | member << 5 of every concrete segment end to end (members < 2^24: no overflow)."""
    if isinstance(layouts, BatchLayouts):
        return layouts.codes
    return joined(layouts, "symbol", np.int32) | (joined(layouts, "member", np.int32) << 5)


def joined_grid_dims(layouts: Sequence[ConcreteLayout]) -> np.ndarray:
    """int64 [C, 3]: entry_grid_dims of every layout of a batch, end to end."""
    if isinstance(layouts, BatchLayouts):  # (whose layouts have no grids)
        return np.ones((len(layouts.starts), 3), dtype=np.int64)
    return np.concatenate([entry_grid_dims(lay) for lay in layouts] + [np.zeros((0, 3), np.int64)])


def scalar_column(values: Sequence[SequenceValues], name: str) -> np.ndarray:
    """One scalar parameter's value in every sequence."""
    if isinstance(values, BatchValues):
        return np.array(values.scalars[name])
    return np.array([v.scalars[name] for v in values])


def list_column(values: Sequence[SequenceValues], name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One list parameter's entries in every sequence, end to end (int64), where each sequence's begin, and
    how many each has."""
    if isinstance(values, BatchValues):
        flat, ends = values.lists[name]
        ends = np.asarray(ends, dtype=np.int64)
    else:
        parts = [np.asarray(v.arrays[name], dtype=np.int64).reshape(-1) for v in values]
        flat = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        ends = np.cumsum([len(x) for x in parts], dtype=np.int64)
    starts = np.zeros(len(ends), dtype=np.int64)
    starts[1:] = ends[:-1]
    return np.asarray(flat, dtype=np.int64), starts, ends - starts


# Every problem with runtime values is a ValueProblem (maskc.diagnostics, re-exported here): a ValueError that
# points at the most specific source it concerns, reported in the program's source file.


def _in_source(fn):
    """A ValueProblem raised by `fn(program, ...)` is reported in the program's source file."""

    @functools.wraps(fn)
    def wrapper(program: ir.Program, *args, **kwargs):
        try:
            return fn(program, *args, **kwargs)
        except ValueProblem as exc:
            raise exc.with_source(program.source) from None

    return wrapper


def _known(*spans: Span) -> Span:
    """The first known span (a pass may have built an expression without one)."""
    return next((s for s in spans if s.line), Span.unknown())


def _segments_reading_n(program: ir.Program) -> list[ir.Segment]:
    return [s for s in program.segments
            if any("n" in ir.params_used(e) for e in (s.length, s.count, *s.dims) if e is not None)]


def _n_span(program: ir.Program) -> Span:
    """Where n is reported: its declaration, else the first segment whose length reads it, else the mask's name."""
    decl = program.param("n")
    return _known(decl.span if decl is not None else Span.unknown(),
                  *(s.span for s in _segments_reading_n(program)), program.span)


def _describe(values: SequenceValues, names: set[str]) -> str:
    shown = []
    if values.n is not None:
        shown.append(f"n = {values.n}")
    for name in sorted(names):
        if name in values.scalars:
            shown.append(f"{name} = {show_value(values.scalars[name])}")
        elif name in values.arrays:
            shown.append(f"{name} = {show_value(values.arrays[name])}")
    return ", ".join(shown)


# ---------------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------------


def _as_scalar(decl: ir.ParamDecl, value, where: str):
    if decl.type.elem == "bool":
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        raise value_problem(decl.span, f"{where}: parameter '{decl.name}' is a bool, got {show_value(value)}")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise value_problem(decl.span, f"{where}: parameter '{decl.name}' is an int, got {show_value(value)}")
    value = int(value)
    if not decl.const and not INT32_MIN <= value <= INT32_MAX:
        raise value_problem(
            decl.span, f"{where}: parameter '{decl.name}' = {value} is outside the 32-bit range of runtime integers"
        )
    return value


def _as_array(decl: ir.ParamDecl, value, where: str) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except ValueError:
        arr = None
    if arr is not None and arr.size == 0 and arr.dtype != object and 1 <= arr.ndim < decl.type.depth:
        arr = arr.reshape((0,) * decl.type.depth)  # `[]` is an empty table too
    if (arr is not None and arr.dtype == object and arr.ndim == decl.type.depth and decl.type.elem == "int"
            and all(type(x) is int for x in arr.flat)):  # ints past 64 bits: numpy keeps them as objects
        raise value_problem(decl.span, f"{where}: parameter '{decl.name}' has values outside the 32-bit range")
    if arr is None or arr.dtype == object or arr.ndim != decl.type.depth:
        raise value_problem(
            decl.span, f"{where}: parameter '{decl.name}' must be a {decl.type} "
            f"({decl.type.depth}-dimensional, rectangular), got {show_value(value)}"
        )
    if arr.size == 0:
        return np.zeros(arr.shape, dtype=bool if decl.type.elem == "bool" else np.int64)
    if decl.type.elem == "bool":
        if arr.dtype != bool:
            raise value_problem(decl.span, f"{where}: parameter '{decl.name}' must hold bools, got {show_value(value)}")
        return arr.copy()
    if arr.dtype.kind not in "ium":  # the kinds of np.integer (timedelta64 is one; bool is not)
        raise value_problem(decl.span, f"{where}: parameter '{decl.name}' must hold ints, got {show_value(value)}")
    arr = arr.astype(np.int64)
    # A short list is checked in Python: numpy's reductions cost more, and a batch binds a list per sequence.
    flat = arr.ravel().tolist() if arr.size <= 256 else None
    lo, hi = (min(flat), max(flat)) if flat is not None else (arr.min(), arr.max())
    if lo < INT32_MIN or hi > INT32_MAX:
        raise value_problem(decl.span, f"{where}: parameter '{decl.name}' has values outside the 32-bit range")
    return arr


@_in_source
def bind_sequence(program: ir.Program, given: dict[str, object], where: str = "mask") -> SequenceValues:
    """Validate one sequence's runtime values and fill in defaults. `given` may hold 'n'."""
    consts = dict(program.consts)
    declared = _layout_facts(program).params
    unknown = [name for name in given if name != "n" and name not in declared]
    if unknown:
        known = ", ".join(p.name for p in program.runtime_params) or "none"
        raise value_problem(program.span, f"{where}: unknown parameter '{unknown[0]}' (runtime parameters: {known})")
    scalars: dict[str, int | bool] = {}
    arrays: dict[str, np.ndarray] = {}
    n = given.get("n")
    n_decl = declared.get("n")
    if n is None and n_decl is not None:
        n = n_decl.default
    if n is not None:
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or not 0 <= n <= MAX_SEQUENCE_LENGTH:
            raise value_problem(_n_span(program), f"{where}: n = {show_value(n)} must be an integer in [0, 2^31 - 1]")
        n = int(n)
    for decl in program.params:
        if decl.name == "n":
            continue
        if decl.const:
            if decl.name in given:
                shown = show_value(consts.get(decl.name))
                raise value_problem(decl.span, f"{where}: '{decl.name}' is const: it is compiled in (as {shown}); "
                                    "compile again to change it")
            value = consts[decl.name]
        elif decl.name in given:
            value = given[decl.name]
        elif decl.default is not None:
            value = decl.default
        else:
            raise value_problem(decl.span, f"{where}: runtime parameter '{decl.name}' has no default and was not given")
        if decl.type.depth == 0:
            scalars[decl.name] = _as_scalar(decl, value, where)
        else:
            arrays[decl.name] = _as_array(decl, value, where)
    return SequenceValues(n, scalars, arrays)


# ---------------------------------------------------------------------------------------------------
# Layout
# ---------------------------------------------------------------------------------------------------


def _env(values: SequenceValues, n: int | None) -> Env:
    params: dict[str, object] = {k: (v if isinstance(v, bool) else np.int64(v)) for k, v in values.scalars.items()}
    if n is not None:
        params["n"] = np.int64(n)
    return Env(params=params, arrays=values.arrays)


@dataclass(frozen=True)
class _LayoutFacts:
    """What concrete_layout looks up in the IR, found once per program."""

    uses_n: bool
    family_lists: dict[int, tuple[str, ...]]  # family segment -> the lists its length reads at the member index
    plain: dict[int, str]  # family segment of the usual form `R[i] = list[i]` -> the list
    params: dict[str, ir.ParamDecl]  # by name
    # Lengths and counts read without evaluating an expression (layouts are made per sequence, per call):
    direct: dict[int, str]  # single segment whose length is an int parameter -> the parameter
    counted: dict[int, str]  # family segment whose count is len(list) -> the list
    needs_env: bool  # some segment's length, count or dims is evaluated


@per_object
def _layout_facts(program: ir.Program) -> _LayoutFacts:
    lists = {s: tuple(dict.fromkeys(node.array for node in ir.walk(seg.length) if isinstance(node, ir.Index)
                                    and node.indices and isinstance(node.indices[0], ir.FamilyIndex)))
             for s, seg in enumerate(program.segments) if seg.kind == "family"}
    plain = {s: _family_list(seg) for s, seg in enumerate(program.segments)
             if seg.kind == "family" and seg.length == ir.Index(_family_list(seg), (ir.FamilyIndex(),))}
    params = {p.name: p for p in program.params}
    direct = {s: seg.length.name for s, seg in enumerate(program.segments) if seg.kind == "single"
              and isinstance(seg.length, ir.Param) and seg.length.name in params
              and params[seg.length.name].type.elem == "int" and not params[seg.length.name].type.depth}
    counted = {s: seg.count.array for s, seg in enumerate(program.segments)
               if seg.kind == "family" and isinstance(seg.count, ir.ArrayLen)}
    needs_env = any(seg.kind == "grid" or (seg.kind == "single" and s not in direct)
                    or (seg.kind == "family" and (s not in counted or s not in plain))
                    for s, seg in enumerate(program.segments))
    return _LayoutFacts(layout_uses_n(program), lists, plain, params, direct, counted, needs_env)


def _check_family_lists(seg: ir.Segment, names: tuple[str, ...], count: int, values: SequenceValues, where: str) -> None:
    for name in names:
        size = len(values.arrays[name])
        if size != count:
            raise value_problem(seg.span,
                                f"{where}: family {seg.name} has {count} members but '{name}' has {size} entries")


def _family_list(seg: ir.Segment) -> str:
    return seg.length.array if isinstance(seg.length, ir.Index) else ""


@_in_source
def concrete_layout(program: ir.Program, values: SequenceValues, where: str = "mask") -> ConcreteLayout:
    facts = _layout_facts(program)
    uses_n = facts.uses_n
    if uses_n and values.n is None:
        raise value_problem(_n_span(program), f"{where}: the layout depends on n; give the sequence length")
    env = _env(values, values.n if uses_n else None) if facts.needs_env else None
    # Per segment its length (an int), or its members' lengths (an array, for a family); the tables are built
    # at the end with a few numpy calls (a batch lays out many sequences per call).
    parts: list = []
    counts: list[int] = []
    grid_dims: dict[int, tuple[int, ...]] = {}
    position = 0

    def problem(seg: ir.Segment, what: str, span: Span | None = None) -> ValueProblem:
        """A problem with a segment's length: at `span` (the expression at fault) where known, else the segment."""
        span = Span.unknown() if span is None else span
        names = set().union(*(ir.params_used(e) | ir.arrays_used(e)
                               for e in (seg.length, seg.count, *seg.dims) if e is not None))
        given = _describe(values, names)  # (empty where only const values, compiled in, are read)
        return value_problem(_known(span, seg.span), f"{where}: segment {seg.name} {what}" + (f" ({given})" if given else ""))

    bounds: list[int] = []
    for s, seg in enumerate(program.segments):
        bounds.append(position)
        try:
            if s in facts.direct:
                name = facts.direct[s]
                length = values.n if name == "n" else values.scalars[name]
            elif seg.kind == "single":
                length = int(evaluate(seg.length, env))
            elif seg.kind == "grid":
                dims = tuple(int(evaluate(d, env)) for d in seg.dims)
                if min(dims) < 0:
                    bad = next(d for d, x in zip(seg.dims, dims) if x < 0)
                    raise problem(seg, f"has negative grid dimensions {' x '.join(map(str, dims))}", bad.span)
                grid_dims[s] = dims
                length = int(np.prod(dims, dtype=object))
            else:
                count = len(values.arrays[facts.counted[s]]) if s in facts.counted else int(evaluate(seg.count, env))
                if count < 0:
                    raise problem(seg, f"has a negative member count {count}", seg.count.span)
                if count > MAX_FAMILY_MEMBERS:
                    raise problem(seg, f"has {count} members, more than the limit of {MAX_FAMILY_MEMBERS}",
                                  seg.count.span)
                _check_family_lists(seg, facts.family_lists[s], count, values, where)
                if s in facts.plain:
                    length = values.arrays[facts.plain[s]].astype(np.int64)  # `R[i] = list[i]`, the usual form
                else:
                    env.family_index = np.arange(count, dtype=np.int64)
                    length = np.broadcast_to(np.asarray(evaluate(seg.length, env), dtype=np.int64), (count,)).copy()
                    env.family_index = None
        except ZeroDivisionError as exc:
            raise problem(seg, f"divides by zero: {exc}", getattr(exc, "span", Span.unknown())) from None
        if isinstance(length, int):
            if length < 0:
                raise problem(seg, f"has negative length {length}")
            position += length
            counts.append(1)
        else:
            small = len(length) <= 256  # a few members: Python is quicker than numpy's calls
            if small:
                length = length.tolist()
            if len(length) and (min(length) if small else length.min()) < 0:
                bad = int(np.argmin(length))
                raise problem(seg, f"member {bad} has negative length {int(length[bad])}")
            position += sum(length) if small else int(length.sum())
            counts.append(len(length))
        if position > MAX_SEQUENCE_LENGTH:
            raise problem(seg, f"ends at token {position}, beyond the limit of 2^31 - 1 tokens per sequence")
        parts.append(length)

    if values.n is not None and position != values.n:
        if uses_n:
            raise value_problem(  # where n enters the layout
                _known(*(s.span for s in _segments_reading_n(program))),
                f"{where}: the segments cover {position} tokens, not n = {values.n}: the layout must tile [0, n) "
                f"exactly ({_describe(values, set(values.scalars) | set(values.arrays))})"
            )
        everything = functools.reduce(Span.merge, (s.span for s in program.segments), Span.unknown())
        raise value_problem(everything, f"{where}: the layout fixes the length to {position} tokens, but n = "
                            f"{values.n} was given: its segments never mention n, so the length comes from the "
                            "parameters; change those instead (with the command line: --param NAME=VALUE rather than "
                            "--n)")
    if all(not isinstance(x, np.ndarray) for x in parts):  # few entries: lists cost less than numpy's calls
        flat = [v for x in parts for v in ((x,) if isinstance(x, int) else x)]
        lengths = np.array(flat, dtype=np.int64)
        starts = np.array([0, *itertools.accumulate(flat[:-1])], dtype=np.int64) if flat else np.zeros(0, np.int64)
    else:
        lengths = np.concatenate([np.asarray([x] if isinstance(x, int) else x, dtype=np.int64) for x in parts])
        starts = np.cumsum(lengths) - lengths
    symbol, member, first = _entry_tables(tuple(counts))
    return ConcreteLayout(n=position, starts=starts, lengths=lengths, symbol=symbol, member=member, first=first,
                          grid_dims=grid_dims, bounds=(*bounds, position))


@functools.lru_cache(maxsize=256)
def _entry_tables(counts: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """symbol, member and first of a layout whose segments have these numbers of entries: they depend on the
    counts alone, which the sequences of a batch mostly share, so each is made once (read-only)."""
    if sum(counts) <= 256:  # few entries: lists cost less than numpy's calls
        symbol = np.array([s for s, c in enumerate(counts) for _ in range(c)], dtype=np.int32)
        member = np.array([m for c in counts for m in range(c)], dtype=np.int32)
    else:
        symbol = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
        member = (np.arange(sum(counts)) - np.repeat(np.cumsum(counts) - counts, counts)).astype(np.int32)
    first = np.array([0, *itertools.accumulate(counts)], dtype=np.int64)
    for a in (symbol, member, first):
        a.flags.writeable = False
    return symbol, member, first


def entry_grid_dims(layout: ConcreteLayout) -> np.ndarray:
    """(t, y, x) dimensions of every concrete segment that is a grid, (1, 1, 1) for the others."""
    dims = np.ones((len(layout.starts), 3), dtype=np.int64)
    for s, d in layout.grid_dims.items():
        dims[layout.first[s]:layout.first[s + 1], 3 - len(d):] = np.maximum(d, 1)
    return dims


class SegmentFacts(Mapping):
    """For each position: its symbolic segment (`symbol`), family member, position in the segment (`pos`),
    where the segment starts and ends, and grid coordinates (`t`, `y`, `x`; 0 outside grids), from a table of
    concrete segments (`starts` ascending, `dims` per entry); `start` and `end` relative to `origin`.

    Each field is computed when first read: a predicate reads few of them, and the planner asks about 10^5-10^6
    positions at once (a per-token flags mask's plan spent a quarter of its time on fields nothing read)."""

    FIELDS = ("symbol", "member", "pos", "start", "end", "t", "y", "x")

    def __init__(self, starts: np.ndarray, lengths: np.ndarray, symbol: np.ndarray, member: np.ndarray,
                 dims: np.ndarray, positions: np.ndarray, origin=0):
        self._positions = np.asarray(positions, dtype=np.int64)
        self._entry = np.searchsorted(starts, self._positions, side="right") - 1
        self._tables = starts, lengths, symbol, member, dims
        self._origin = origin
        self._known: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._known:
            self._known[name] = self._field(name)
        return self._known[name]

    def _field(self, name: str) -> np.ndarray:
        starts, lengths, symbol, member, dims = self._tables
        c = self._entry
        if name == "symbol":
            return symbol[c]
        if name == "member":
            return member[c].astype(np.int64)
        if name == "start":
            return starts[c] - self._origin
        if name == "end":
            return starts[c] + lengths[c] - self._origin
        if name == "pos":
            return self._positions - starts[c]
        pos, y_dim, x_dim = self["pos"], dims[c, 1], dims[c, 2]
        if name == "t":
            return pos // (x_dim * y_dim)
        if name == "y":
            return (pos // x_dim) % y_dim
        if name == "x":
            return pos % x_dim
        raise KeyError(name)

    def __iter__(self):
        return iter(self.FIELDS)

    def __len__(self) -> int:
        return len(self.FIELDS)


def token_info(program: ir.Program, layout: ConcreteLayout, positions: np.ndarray) -> SegmentFacts:
    """SegmentFacts of positions in one sequence."""
    return SegmentFacts(layout.starts, layout.lengths, layout.symbol, layout.member, entry_grid_dims(layout),
                         positions)


def segment_bounds(names: list[str], layout: ConcreteLayout) -> dict[tuple[str, bool], np.int64]:
    """Where every symbolic segment (named in layout order) begins and ends: the values of ir.SegmentBound."""
    out = {}
    for s, name in enumerate(names):
        lo, hi = layout.span(s)
        out[(name, False)], out[(name, True)] = np.int64(lo), np.int64(hi)
    return out


@dataclass(frozen=True)
class _RuntimeChecks:
    """What validate_values looks at, found once per program: divisors of the sequence alone, and trees."""

    divisors: tuple[tuple[ir.Expr, Span], ...]  # with where to report it: the divisor, else its rule
    trees: tuple[str, ...]


@per_object
def _runtime_checks(program: ir.Program) -> _RuntimeChecks:
    divisors, trees = [], []
    for region in program.regions:
        for node in ir.walk(region.pred):
            o = ir.operation(node)
            if o is not None and o.op.divides and \
                    not any(isinstance(x, (ir.Token, ir.Member)) for x in ir.walk(o.args[1])):
                divisors.append((o.args[1], _known(o.args[1].span, node.span, region.span)))
            if isinstance(node, ir.Ancestor):
                trees.append(node.array)
    return _RuntimeChecks(tuple(divisors), tuple(dict.fromkeys(trees)))


@_in_source
def validate_values(program: ir.Program, values: SequenceValues, layout: ConcreteLayout, where: str = "mask") -> None:
    """Checks on runtime values that the kernel could not report: zero divisors and malformed trees."""
    checks = _runtime_checks(program)
    if checks.divisors:
        env = _env(values, layout.n)
        for divisor, span in checks.divisors:
            try:
                zero = int(evaluate(divisor, env)) == 0
            except ZeroDivisionError:
                zero = True
            if zero:
                names = ir.params_used(divisor) | ir.arrays_used(divisor)
                raise value_problem(span, f"{where}: the divisor {ir.show(divisor)} is zero "
                                          f"({_describe(values, names)})")
    for name in checks.trees:
        parent = values.arrays[name]
        bad = np.nonzero((parent >= np.arange(len(parent))) | (parent < -1))[0]
        if len(bad):
            x = int(bad[0])
            raise value_problem(program.param(name).span, f"{where}: '{name}' must list each parent before its "
                                f"child (-1 <= parent[x] < x, -1 for a root); parent[{x}] = {int(parent[x])}")
