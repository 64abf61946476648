"""Every sequence of a batch bound and laid out at once: `bind_batch`.

A packed batch has a sequence per document or per group, often hundreds, with new lengths every step. Bound one
by one (`bind_sequence`, `concrete_layout`, `validate_values`), each cost ~7 us on the dev VM: most of the
planning of a batch of short documents. Most masks' layouts have one of two forms: segments whose lengths are
sums and products of scalar parameters and n, and families `R[i] = list[i]` of `len(list)` members. For those,
this module checks the values in one loop, evaluates each segment's length for every sequence in one numpy
call, and cuts the results into the same `SequenceValues` and `ConcreteLayout` objects.

It returns the per-sequence path's result exactly, or None: where the program's layout has another form, and
where any value is out of the ordinary (a type, a range, a negative length, a layout that does not add up to n).
The per-sequence path then binds the batch and reports the problem with its source location.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from maskc import ir
from maskc.ir.evaluate import Env, evaluate
from maskc.plan.layout import (INT32_MAX, INT32_MIN, MAX_FAMILY_MEMBERS, MAX_SEQUENCE_LENGTH, ConcreteLayout,
                               SequenceValues, _entry_tables, _layout_facts, _runtime_checks)

_NO_DEFAULT = object()


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


_forms: dict[int, tuple[ir.Program, _BatchForm | None]] = {}


def _batch_form(program: ir.Program) -> _BatchForm | None:
    hit = _forms.get(id(program))
    if hit is not None and hit[0] is program:
        return hit[1]
    form = _find_form(program)
    if len(_forms) > 64:
        _forms.clear()
    _forms[id(program)] = (program, form)
    return form


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


def _find_form(program: ir.Program) -> _BatchForm | None:
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


def _int_value(x) -> int | None:
    if type(x) is int:
        return x
    if isinstance(x, np.integer):
        return int(x)
    return None


def _int_list(x) -> list[int] | None:
    """A list parameter's value as a list of ints, or None where the per-sequence path should look at it."""
    if type(x) in (list, tuple):
        return list(x) if all(type(v) is int for v in x) else None
    if isinstance(x, np.ndarray) and x.ndim == 1 and (x.dtype.kind in "iu" or x.size == 0):
        return x.tolist()
    return None


def bind_batch(program: ir.Program, sequences: list[dict[str, object]]
               ) -> tuple[list[SequenceValues], list[ConcreteLayout]] | None:
    """(values, layouts) of every sequence, as `CompiledMask.bind` binds them one by one, or None (see above)."""
    form = _batch_form(program)
    if form is None or not sequences:
        return None
    count = len(sequences)
    ns: list[int] = []
    given_n: list[bool] = []
    columns: dict[str, list] = {name: [] for name, _, _ in form.params}
    for given in sequences:
        if not form.allowed.issuperset(given):
            return None
        n = given.get("n", form.n_default)
        if n is not None:
            n = _int_value(n)
            if n is None or not 0 <= n <= MAX_SEQUENCE_LENGTH:
                return None
        elif form.uses_n:
            return None
        ns.append(0 if n is None else n)
        given_n.append(n is not None)
        for name, kind, default in form.params:
            value = given.get(name, default)
            if kind == "list":
                value = _int_list(value)
                if value is None or len(value) > MAX_FAMILY_MEMBERS or (value and min(value) < INT32_MIN):
                    return None
                if value and max(value) > INT32_MAX:
                    return None
            elif kind == "bool":
                if not isinstance(value, (bool, np.bool_)):
                    return None
                value = bool(value)
            else:
                value = _int_value(value)
                if value is None or (name not in form.consts and not INT32_MIN <= value <= INT32_MAX):
                    return None
            columns[name].append(value)

    # Each segment's lengths for the whole batch: [B] for a single segment, a list of lists for a family.
    env = Env(params={name: np.array(columns[name], dtype=bool if kind == "bool" else np.int64)
                      for name, kind, _ in form.params if kind != "list"})
    env.params["n"] = np.array(ns, dtype=np.int64)
    total = np.zeros(count, dtype=np.int64)
    lengths_of: list = []
    for kind, what in form.segments:
        if kind == "single":
            length = np.broadcast_to(np.asarray(evaluate(what, env), dtype=np.int64), (count,))
            if (length < 0).any():
                return None
            total += length
            lengths_of.append(length.tolist())
        else:
            members = columns[what]
            if any(m and min(m) < 0 for m in members):
                return None
            total += np.array([sum(m) for m in members], dtype=np.int64)
            lengths_of.append(members)
    if (total > MAX_SEQUENCE_LENGTH).any() or ((total != env.params["n"]) & np.array(given_n)).any():
        return None

    # The batch's entries end to end, then cut per sequence (views of one array each).
    flat: list[int] = []
    ends: list[int] = []
    bounds: list[tuple[int, ...]] = []
    counts: list[tuple[int, ...]] = []
    for b in range(count):
        position, row, seq_counts = 0, [], []
        for (kind, _), lengths in zip(form.segments, lengths_of):
            row.append(position)
            if kind == "single":
                length = lengths[b]
                flat.append(length)
                position += length
                seq_counts.append(1)
            else:
                members = lengths[b]
                flat.extend(members)
                position += sum(members)
                seq_counts.append(len(members))
        row.append(position)
        bounds.append(tuple(row))
        counts.append(tuple(seq_counts))
        ends.append(len(flat))
    all_lengths = np.array(flat, dtype=np.int64)
    entry_base = np.array([0, *ends[:-1]], dtype=np.int64)
    token_base = np.cumsum(total) - total
    entries = np.diff(np.array([0, *ends], dtype=np.int64))
    all_starts = np.cumsum(all_lengths) - all_lengths - np.repeat(token_base, entries)
    lists = [(name, columns[name]) for name, kind, _ in form.params if kind == "list"]
    list_arrays = {name: np.array([v for value in col for v in value], dtype=np.int64) for name, col in lists}
    list_ends = {name: np.cumsum([len(value) for value in col]).tolist() for name, col in lists}
    scalar_names = [name for name, kind, _ in form.params if kind != "list"]

    values, layouts = [], []
    for b in range(count):
        lo, hi = int(entry_base[b]), ends[b]
        arrays = {}
        for name, _ in lists:
            end = list_ends[name][b]
            arrays[name] = list_arrays[name][end - len(columns[name][b]):end]
        values.append(SequenceValues(ns[b] if given_n[b] else None, {name: columns[name][b] for name in scalar_names},
                                     arrays))
        symbol, member, first = _entry_tables(counts[b])
        layouts.append(ConcreteLayout(n=bounds[b][-1], starts=all_starts[lo:hi], lengths=all_lengths[lo:hi],
                                      symbol=symbol, member=member, first=first, grid_dims={}, bounds=bounds[b]))
    return values, layouts
