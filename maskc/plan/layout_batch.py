"""Every sequence of a batch bound and laid out at once: `bind_batch`.

A packed batch has a sequence per document or per group, often hundreds, with new lengths every step. Bound one
by one (`bind_sequence`, `concrete_layout`, `validate_values`), each cost ~7 us on the dev VM: most of the
planning of a batch of short documents. Most masks' layouts have one of two forms: segments whose lengths are
sums and products of scalar parameters and n, and families `R[i] = list[i]` of `len(list)` members. For those,
this module checks each parameter over the batch at once, evaluates each segment's length for every sequence in
one numpy call, and keeps the results as columns (`layout.BatchLayouts`, `layout.BatchValues`): the planner reads
those, and a sequence's `ConcreteLayout` or `SequenceValues` is made only where some code asks for it.

Those objects are the per-sequence path's exactly; or bind_batch returns None: where the layout has another form, and
where any value is out of the ordinary (a type, a range, a negative length, a layout that does not add up to n).
The per-sequence path then binds the batch and reports the problem with its source location.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import numpy as np

from maskc import ir
from maskc.ir.evaluate import Env, evaluate
from maskc.memo import per_object
from maskc.plan.layout import (INT32_MAX, INT32_MIN, MAX_FAMILY_MEMBERS, MAX_SEQUENCE_LENGTH, BatchLayouts,
                               BatchValues, _layout_facts, _MadeOnDemand, _runtime_checks)

_NO_DEFAULT = object()


class ValueColumns(_MadeOnDemand):
    """A batch's runtime values as a call gives them: per name, one value per sequence (a packed call's keywords
    are columns already: `prompt=[...]`, `responses=[[...], ...]`). It reads as a sequence of dicts, one per
    sequence, made only when asked for; `bind_batch` and the plan cache's key read the columns instead, each
    checked and converted to numpy once (`ints`, `int_lists`). For a thousand sequences that saves ~2 ms of
    per-value Python on the dev VM, where both made and read a dict per sequence and checked every value twice."""

    def __init__(self, count: int, columns: dict[str, list]):
        self.count = count
        self.columns = columns  # name -> a list of `count` values
        self._made: dict[int, dict] = {}
        self._converted: dict[tuple[str, str], object] = {}

    def __len__(self) -> int:
        return self.count

    def _make(self, b: int) -> dict[str, object]:
        return {name: column[b] for name, column in self.columns.items()}

    def ints(self, name: str) -> np.ndarray | None:
        """The column as int64 where every value is an int (Python's or numpy's; a bool is not), else None (a value
        past 64 bits too)."""
        return self._convert(name, "ints", _int_array)

    def int_lists(self, name: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(every entry end to end as int64, each value's size) where every value is a list or tuple of Python
        ints, else None (an entry past 64 bits too)."""
        return self._convert(name, "int lists", _int_list_arrays)

    def _convert(self, name: str, kind: str, convert):
        key = (name, kind)
        if key not in self._converted:
            self._converted[key] = convert(self.columns[name])
        return self._converted[key]


def _int_array(column: list) -> np.ndarray | None:
    try:
        if set(map(type, column)) <= {int}:  # (the types' set: 3x quicker than a test per value in Python)
            return np.array(column, dtype=np.int64)
        if all(type(v) is int or isinstance(v, np.integer) for v in column):
            return np.array([int(v) for v in column], dtype=np.int64)  # (int(): a uint64 past 2^63 must not wrap)
    except OverflowError:
        pass
    return None


def _int_list_arrays(column: list) -> tuple[np.ndarray, np.ndarray] | None:
    if not set(map(type, column)) <= {list, tuple}:
        return None
    flat = list(itertools.chain.from_iterable(column))
    if not set(map(type, flat)) <= {int}:
        return None
    try:
        return np.array(flat, dtype=np.int64), np.fromiter(map(len, column), dtype=np.int64, count=len(column))
    except OverflowError:
        return None


@dataclass(frozen=True)
class _BatchForm:
    """What bind_batch needs to know about a program whose layout it can bind, found once per program."""

    n_default: int | None
    uses_n: bool
    # Parameters in declaration order (n left out): (name, kind, default), kind "int", "bool" or "list" (of ints);
    # a const parameter's default is its compiled-in value.
    params: tuple[tuple[str, str, object], ...]
    consts: frozenset[str]
    allowed: frozenset[str]  # the names a sequence may give
    # Per symbolic segment: ("single", length expression) or ("family", the list its members' lengths are).
    segments: tuple[tuple[str, object], ...]


def _plain_length(e: ir.Expr, lists: set[str]) -> bool:
    """Whether a length can be evaluated for the whole batch at once: integer arithmetic without division over
    constants and scalar parameters."""
    for node in ir.walk(e):
        o = ir.operation(node)
        if o is not None:
            if o.op.divides:
                return False
        elif not isinstance(node, ir.Const) and not (isinstance(node, ir.Param) and node.name not in lists):
            return False
    return True


@per_object
def _batch_form(program: ir.Program) -> _BatchForm | None:
    checks = _runtime_checks(program)
    if checks.divisors or checks.trees:
        return None
    consts = dict(program.consts)
    params, lists = [], set()
    for decl in program.params:
        if decl.name == "n":
            continue
        if decl.type.depth == 0:
            kind = decl.type.elem
        elif decl.type.depth == 1 and decl.type.elem == "int":
            kind = "list"
            lists.add(decl.name)
        else:
            return None
        default = consts[decl.name] if decl.const else _NO_DEFAULT if decl.default is None else decl.default
        params.append((decl.name, kind, default))
    facts = _layout_facts(program)
    segments = []
    for s, seg in enumerate(program.segments):
        if seg.kind == "single" and _plain_length(seg.length, lists):
            segments.append(("single", seg.length))
        elif seg.kind == "family" and s in facts.plain and facts.counted.get(s) == facts.plain[s]:
            segments.append(("family", facts.plain[s]))
        else:
            return None
    n_decl = program.param("n")
    const_names = frozenset(p.name for p in program.params if p.const)
    return _BatchForm(n_default=None if n_decl is None else n_decl.default, uses_n=facts.uses_n, params=tuple(params),
                      consts=const_names, allowed=frozenset({"n"} | {p.name for p in program.params} - const_names),
                      segments=tuple(segments))


def _given(sequences, name: str, default) -> list:
    """One name's value in every sequence, `default` where a sequence does not give it."""
    if isinstance(sequences, ValueColumns):
        column = sequences.columns.get(name)
        return [default] * len(sequences) if column is None else column
    return [given.get(name, default) for given in sequences]


def _given_ints(sequences, name: str, default) -> np.ndarray | None:
    """_given as int64, or None where a value is not an int."""
    if isinstance(sequences, ValueColumns) and name in sequences.columns:
        return sequences.ints(name)
    return _int_array(_given(sequences, name, default))


def _int_list(x) -> list[int] | None:
    """A list parameter's value as a list of ints, or None where the per-sequence path should look at it."""
    if type(x) in (list, tuple):
        return list(x) if all(type(v) is int for v in x) else None
    if isinstance(x, np.ndarray) and x.ndim == 1 and (x.dtype.kind in "iu" or x.size == 0):
        return x.tolist()
    return None


def _list_column(sequences, name: str, default) -> tuple[np.ndarray, np.ndarray] | None:
    """A list parameter's entries in every sequence end to end, and each sequence's count, as bind_sequence checks
    them, or None."""
    if isinstance(sequences, ValueColumns) and name in sequences.columns:
        arrays = sequences.int_lists(name)
        if arrays is not None:  # (else a value may be a numpy array, which _int_list takes)
            return arrays if not len(arrays[1]) or arrays[1].max() <= MAX_FAMILY_MEMBERS else None
    column = [_int_list(value) for value in _given(sequences, name, default)]
    if any(value is None or len(value) > MAX_FAMILY_MEMBERS for value in column):
        return None
    return _int_list_arrays(column)


def _scalar_column(form: _BatchForm, name: str, kind: str, default, sequences) -> tuple[list, np.ndarray] | None:
    """A scalar parameter's value in every sequence, checked as bind_sequence checks it, as Python values and as an
    array, or None."""
    if kind == "bool":
        column = _given(sequences, name, default)
        if not all(isinstance(v, (bool, np.bool_)) for v in column):
            return None
        column = [bool(value) for value in column]
        return column, np.array(column, dtype=bool)
    array = _given_ints(sequences, name, default)
    if array is None or (name not in form.consts and len(array)
                         and not INT32_MIN <= array.min() <= array.max() <= INT32_MAX):
        return None
    return array.tolist(), array


@functools.lru_cache(maxsize=64)
def _single_entries(count: int, segments: int) -> tuple[np.ndarray, ...]:
    """entry_ptr, entry_seq, symbol, member and codes (BatchLayouts) of `count` sequences of `segments` entries each,
    the same for every batch of that size (read-only)."""
    symbol = np.tile(np.arange(segments, dtype=np.int64), count)
    tables = (np.arange(0, count * segments + 1, segments, dtype=np.int64), np.arange(count).repeat(segments), symbol,
              np.zeros(count * segments, dtype=np.int64), symbol.astype(np.int32))
    for a in tables:
        a.flags.writeable = False
    return tables


def bind_batch(program: ir.Program, sequences: list[dict[str, object]]) -> tuple[BatchValues, BatchLayouts] | None:
    """(values, layouts) of every sequence, as `CompiledMask.bind` binds them one by one, or None (see above).
    `sequences`: a list of dicts, or ValueColumns."""
    form = _batch_form(program)
    if form is None or not sequences:
        return None
    if isinstance(sequences, ValueColumns):
        if not form.allowed.issuperset(sequences.columns):
            return None
    elif not all(form.allowed.issuperset(given) for given in sequences):
        return None
    count = len(sequences)
    n_given = _given(sequences, "n", form.n_default)
    given_n = [n is not None for n in n_given]
    if form.uses_n and not all(given_n):
        return None
    ns = _given_ints(sequences, "n", form.n_default) if all(given_n) else \
        _int_array([n if known else 0 for n, known in zip(n_given, given_n)])
    if ns is None or not 0 <= ns.min() <= ns.max() <= MAX_SEQUENCE_LENGTH:
        return None
    scalars: dict[str, list] = {}
    env = Env(params={})
    # The list parameters' entries end to end, how many each sequence has, and where each sequence's end.
    lists: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for name, kind, default in form.params:
        if kind == "list":
            arrays = _list_column(sequences, name, default)
            if arrays is None:
                return None
            flat, sizes = arrays
            if len(flat) and (flat.min() < INT32_MIN or flat.max() > INT32_MAX):
                return None
            lists[name] = flat, sizes, sizes.cumsum()
        else:
            column = _scalar_column(form, name, kind, default, sequences)
            if column is None:
                return None
            scalars[name], env.params[name] = column

    # Per sequence and segment: its entries (1, or a family's members) and its tokens.
    n = env.params["n"] = ns
    entries = np.ones((count, len(form.segments)), dtype=np.int64)
    tokens = np.empty((count, len(form.segments)), dtype=np.int64)
    parts = []  # (segment, the entries' lengths, how many per sequence)
    for s, (kind, what) in enumerate(form.segments):
        if kind == "single":
            length = np.asarray(evaluate(what, env), dtype=np.int64)
            if length.shape != (count,):  # (a constant; np.broadcast_to costs ~5 us where there is nothing to do)
                length = np.broadcast_to(length, (count,))
            tokens[:, s] = length
            parts.append((s, length, None))
        else:
            flat, sizes, ends = lists[what]
            if len(flat) and flat.min() < 0:
                return None
            entries[:, s] = sizes
            running = np.concatenate([[0], np.cumsum(flat)])
            tokens[:, s] = running[ends] - running[ends - entries[:, s]]
            parts.append((s, flat, entries[:, s]))
    if (tokens < 0).any():
        return None
    bounds = np.zeros((count, len(form.segments) + 1), dtype=np.int64)
    np.cumsum(tokens, axis=1, out=bounds[:, 1:])
    total = bounds[:, -1]
    mismatch = total != n if all(given_n) else (total != n) & np.array(given_n)  # (where n was given)
    if (total > MAX_SEQUENCE_LENGTH).any() or mismatch.any():
        return None

    # Every entry in layout order: by sequence, then segment, then member.
    base = total.cumsum() - total  # (the sequences lie back to back in the planner's global coordinate)
    segments = len(form.segments)
    if all(per is None for _, _, per in parts):  # an entry per segment: it starts where its segment does
        lengths = tokens.reshape(-1)
        starts = bounds[:, :-1].reshape(-1)
        global_starts = (bounds[:, :-1] + base[:, None]).reshape(-1)
        entry_ptr, entry_seq, symbol, member, codes = _single_entries(count, segments)
    else:
        per_entry = entries.reshape(-1)
        symbol = _single_entries(count, segments)[2].repeat(per_entry)
        # A segment's entries, in layout order, are its lengths in the order bind_batch has them (by sequence, then
        # member): each goes where its symbol is.
        lengths = np.empty(len(symbol), dtype=np.int64)
        for s, length, _ in parts:
            lengths[symbol == s] = length
        per_sequence = entries.sum(axis=1)
        entry_ptr = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(per_sequence, out=entry_ptr[1:])
        entry_seq = np.arange(count).repeat(per_sequence)
        global_starts = np.cumsum(lengths) - lengths
        starts = global_starts - base.take(entry_seq)
        member = np.arange(len(lengths)) - np.repeat(per_entry.cumsum() - per_entry, per_entry)
        codes = (symbol | member << 5).astype(np.int32)  # (members < 2^24: no overflow)
    layouts = BatchLayouts(starts=starts, lengths=lengths, symbol=symbol, member=member, counts=entries,
                           bounds=bounds, entry_ptr=entry_ptr, entry_seq=entry_seq, base=base,
                           global_starts=global_starts, codes=codes)
    values = BatchValues(ns=[x if given else None for x, given in zip(ns.tolist(), given_n)], scalars=scalars,
                         lists={name: (flat, ends.tolist()) for name, (flat, _, ends) in lists.items()})
    return values, layouts
