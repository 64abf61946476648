"""The driver: a `.mask` file to a `CompiledMask` (optimised IR, CUDA source, cubin on demand), and the
planning of descriptors for runtime values. The stages themselves live in their own modules; this one
only strings them together in pipeline order.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import numpy as np

from maskc import gcpause, ir
from maskc.build import Artifact, compile_source
from maskc.codegen import MaskCode, render_source
from maskc.diagnostics import Diagnostic, MaskError, Span, ValueProblem, error, show_value, value_problem
from maskc.front import read_file, read_program
from maskc.ir.ranges import INT64, check_ranges
from maskc.kernels import KernelOptions, kernel_name
from maskc.passes import run_pipeline
from maskc.plan.layout import (
    ConcreteLayout,
    SequenceValues,
    bind_sequence,
    concrete_layout,
    validate_values,
)
from maskc.plan.layout_batch import ValueColumns, bind_batch
from maskc.plan.by_key import KeyDescriptor, KeyTables, by_key, key_tables
from maskc.plan.planner import Descriptor, KernelTables, TileConfig, kernel_tables, plan
from maskc.plan.tiling import Tiling, tiling_for

PLAN_CACHE_SIZE = 64
# The largest predicates (IR nodes in all the rules, after the passes) a kernel is built for. NVRTC's time and
# memory grow with the mask code, which the kernel evaluates per element of a partial tile: 1,000 `or` terms
# (5,000 nodes) build in 12 s, 3,200 in 90 s and 1.3 GB; 20,000 were past 11 GB and 9 minutes when stopped.
MAX_KERNEL_NODES = 4096


def bind_consts(program: ir.Program, given: dict[str, object]) -> ir.Program:
    """Fix the value of every `const` parameter: as given at compile time, else its default.
    Runtime parameters in `given` are call arguments, not part of a compile, and are ignored here."""
    unknown = sorted(name for name in given if name != "n" and program.param(name) is None)
    if unknown:
        names = ", ".join(p.name for p in program.params) or "none"
        raise value_problem(program.span, f"unknown parameter '{unknown[0]}'",
                            f"the parameters of {program.name}: {names}")
    values = []
    for p in program.params:
        if not p.const:
            continue
        if p.type.depth:
            raise error(p.span, f"const parameter '{p.name}' is a list; only scalars can be const")
        value = given.get(p.name, p.default)
        if value is None:
            raise value_problem(p.span, f"const parameter '{p.name}' has no value",
                                f"give one when compiling (--param {p.name}=...) or declare a default")
        wants_bool = p.type.elem == "bool"
        if isinstance(value, bool) != wants_bool or not isinstance(value, (int, np.integer, bool)):
            raise value_problem(p.span, f"const parameter '{p.name}' is {p.type}, got {show_value(value)}")
        if not wants_bool and not INT64[0] <= int(value) <= INT64[1]:
            # A C compiler would wrap the literal silently: the kernel would test another value.
            raise value_problem(p.span, f"const parameter '{p.name}' = {int(value)} does not fit in a 64-bit "
                                "integer", "const values must lie in [-2^63, 2^63 - 1]")
        values.append((p.name, bool(value) if wants_bool else int(value)))
    return replace(program, consts=tuple(values))


@dataclass
class CompiledMask:
    """A mask compiled for one set of kernel options and const values."""

    program: ir.Program  # after the optimisation passes
    options: KernelOptions
    source: str
    code: MaskCode
    _plans: OrderedDict = field(default_factory=OrderedDict, repr=False)
    _key_tables: dict = field(default_factory=dict, repr=False)
    _backward_build: tuple[int, Future] | None = field(default=None, repr=False)  # (pid, build) build_backward_ahead started

    @cached_property
    def name(self) -> str:
        return kernel_name(self.program.name, self.options)

    @cached_property
    def tiling(self) -> Tiling:
        return tiling_for(self.program, self.options.block_q, self.options.block_k, self.options.family.min_run)

    @property
    def tiles(self) -> TileConfig:
        return self.options.tile_config

    @cached_property
    def shared_memory_bytes(self) -> int:
        return self.options.family.shared_memory_bytes(self.options)

    def build(self, emit: str = "cubin", direction: str | None = None) -> Artifact:
        """The file built with NVRTC: every kernel in it, or one direction's (`fwd` or `bwd`) -- a process
        that only runs the forward never waits for the backward kernels to compile."""
        sizes = [sum(1 for _ in ir.walk(r.pred)) for r in self.program.regions]
        if sum(sizes) > MAX_KERNEL_NODES:
            largest = self.program.regions[sizes.index(max(sizes))]
            raise error(largest.span, f"this mask is too large to build into a kernel: its rules have {sum(sizes):,} "
                        f"operations and operands after the passes, more than {MAX_KERNEL_NODES:,}",
                        "maskc check, maskc explain and maskc compile --emit cu still take it"
                        ).with_source(self.program.source)
        only = {None: (), "fwd": ("-DMASKC_FORWARD_ONLY",), "bwd": ("-DMASKC_BACKWARD_ONLY",)}[direction]
        suffix = f".{direction}" if direction else ""
        return compile_source(self.source, self.options.arch, name=f"{self.name}{suffix}.cu", emit=emit,
                              extra_options=only)

    @cached_property
    def cubin(self) -> Path:
        """The forward kernel."""
        return self.build("cubin", "fwd").path

    @cached_property
    def backward_cubin(self) -> Path:
        """The backward kernels (`backward_names`); a ValueError where the family has none for these options."""
        if self.options.backward is None:
            o = self.options
            dims = sorted({d for b in o.family.backward for d in b.head_dims})
            raise ValueError(f"no backward kernels for head dim {o.head_dim} in the {o.family.name} family "
                             f"(they support head dims {dims})")
        with _building:
            started = self._backward_build
        if started is None or started[0] != os.getpid():  # (a forked child has no thread to finish it)
            return self.build("cubin", "bwd").path
        return started[1].result().path

    def build_backward_ahead(self) -> None:
        """Start building the backward kernels in a thread, for a call whose backward will come (its inputs require
        grad). NVRTC releases the GIL, so the forward's build and launch run meanwhile: a training step's first call
        waits for the slower of the two builds, not their sum (dev VM: 0.67 s against 1.31). A failed build raises
        where the backward asks for it; a process that exits meanwhile waits for the build to end (it is on disk for
        the next one). Nothing to do when they are built, building or absent."""
        if self._backward_build is not None or self.options.backward is None or "backward_cubin" in self.__dict__:
            return
        with _building:
            if self._backward_build is None:
                self._backward_build = (os.getpid(), _builders().submit(self.build, "cubin", "bwd"))

    @cached_property
    def backward_names(self) -> tuple[str, ...]:
        """The backward kernels in launch order (`BackwardKernels.kernels`): the dQ kernel, then the dK/dV
        kernel; for the fused pass prep, dK/dV, dq_store."""
        return tuple(kernel_name(self.program.name, self.options, f"bwd_{k}") for k in self.options.backward.kernels)

    # -- planning -----------------------------------------------------------------------------------

    def bind(self, sequences: list[dict[str, object]]) -> tuple[Sequence[SequenceValues], Sequence[ConcreteLayout]]:
        """Every sequence's values checked and laid out: lists, or for a batch bound at once (layout_batch.py),
        sequences of the same objects made on demand."""
        if len(sequences) >= BIND_AT_ONCE:
            at_once = bind_batch(self.program, sequences)
            if at_once is not None:
                return at_once
        values, layouts = [], []  # one by one: any other layout, and every problem reported where it is
        for b, given in enumerate(sequences):
            where = f"sequence {b}" if len(sequences) > 1 else self.program.name
            v = bind_sequence(self.program, given, where)
            lay = concrete_layout(self.program, v, where)
            validate_values(self.program, v, lay, where)
            values.append(v)
            layouts.append(lay)
        return values, layouts

    def plan(self, sequences: list[dict[str, object]]
             ) -> tuple[Descriptor, Sequence[ConcreteLayout], Sequence[SequenceValues]]:
        values, layouts = self.bind(sequences)
        return plan(self.program, layouts, values, self.tiles), layouts, values

    @cached_property
    def fingerprint(self) -> str:
        """What a plan of this mask depends on besides the runtime values: the program after the passes, its const
        values, the tile shapes and the tables' layout, all of which the generated source spells out."""
        return hashlib.sha256(self.source.encode()).hexdigest()[:32]

    @staticmethod
    def plan_key(sequences: list[dict[str, object]], token_offsets: np.ndarray | None = None) -> tuple:
        """The runtime values a plan is made for, as the plan cache keys them."""
        return _values_key(sequences), _token_offsets(sequences, token_offsets).tobytes()

    def adopt(self, key: tuple, tables: tuple[Descriptor, KernelTables, list[ConcreteLayout]],
              by_key_tables: KeyTables | None = None) -> None:
        """Cache a plan made elsewhere (`maskc.runtime.Plan`: in another process, say) for the runtime values
        `key` (plan_key), with its backward tables if it has them, as if `tables` had made it here."""
        self._keep_plan(key, tables)
        if by_key_tables is not None:
            self._keep_key_tables(tables[0], by_key_tables)

    def _keep_plan(self, key: tuple, tables: tuple) -> None:
        """The plan cache, most recent last, PLAN_CACHE_SIZE plans at most."""
        self._plans[key] = tables
        self._plans.move_to_end(key)
        if len(self._plans) > PLAN_CACHE_SIZE:
            self._plans.popitem(last=False)

    def _keep_key_tables(self, desc: Descriptor, by_key_tables: KeyTables) -> None:
        if len(self._key_tables) > PLAN_CACHE_SIZE:
            self._key_tables.clear()
        self._key_tables[id(desc)] = (desc, by_key_tables)  # holds desc, so its id is not reused while cached

    def tables(self, sequences: list[dict[str, object]], token_offsets: np.ndarray | None = None,
               key: tuple | None = None) -> tuple[Descriptor, KernelTables, list[ConcreteLayout]]:
        """Descriptor and kernel tables for these runtime values; cached by the values as given, so that a
        repeated call costs a lookup, not a layout of every sequence (changing a value never recompiles).
        `key`: their plan_key, where the caller has it already."""
        offsets = _token_offsets(sequences, token_offsets)
        key = self.plan_key(sequences, offsets) if key is None else key
        hit = self._plans.get(key)
        if hit is not None:
            self._plans.move_to_end(key)
            return hit
        values, layouts = self.bind(sequences)
        desc = plan(self.program, layouts, values, self.tiles)
        try:
            result = (desc, kernel_tables(self.code, desc, layouts, values, offsets), layouts)
        except ValueProblem as exc:
            raise exc.with_source(self.program.source) from None
        self._keep_plan(key, result)
        return result

    def key_tables(self, desc: Descriptor, tables: KernelTables) -> KeyTables:
        """The backward pass's tables by key tile: the transpose of a descriptor `tables` returned, made once."""
        hit = self._key_tables.get(id(desc))
        if hit is not None and hit[0] is desc:
            return hit[1]
        result = key_tables(self.key_descriptor(desc), tables.kinds.dtype)
        self._keep_key_tables(desc, result)
        return result

    def key_descriptor(self, desc: Descriptor) -> KeyDescriptor:
        """The descriptor by key tile that this mask's backward pass walks: staggered for the fused pass, the one
        whose dK/dV kernel also sums dQ (by_key.staggered)."""
        return by_key(desc, stagger=self.options.backward.fused)


def _token_offsets(sequences: list, token_offsets: np.ndarray | None) -> np.ndarray:
    """Where each sequence's tokens begin in the call's tensors: as given, or 0 for every sequence."""
    return np.zeros(len(sequences), dtype=np.int64) if token_offsets is None else np.asarray(token_offsets, np.int64)


_building = threading.Lock()
_executor: tuple[int, ThreadPoolExecutor] | None = None


def _builders() -> ThreadPoolExecutor:
    """Threads for builds started ahead (two: each NVRTC build takes a core), this process's own (a forked child
    inherits the pool but not its threads). Called under _building."""
    global _executor
    if _executor is None or _executor[0] != os.getpid():
        _executor = (os.getpid(), ThreadPoolExecutor(max_workers=2, thread_name_prefix="maskc-build"))
    return _executor[1]


# Batches of at least this many sequences are bound at once where the layout allows (plan/layout_batch.py): its
# numpy calls cost 35-60 us whatever the batch, binding one by one 7-11 us a sequence (dev VM; rm_shared's 9
# sequences: 87 against 98 us).
BIND_AT_ONCE = 8


def _values_key(sequences: list[dict[str, object]]) -> tuple:
    """frozen_values of every sequence, or where every sequence gives the same names, each an int or a list of
    ints (a packed batch: lengths, a prompt and its responses), those as columns of bytes: 0.1-0.3 us a sequence
    against 0.8-2 (dev VM). Values a call gave as columns (ValueColumns) are read as such."""
    columns = sequences if isinstance(sequences, ValueColumns) else None
    if columns is None:
        names = sorted(sequences[0]) if sequences else []
        if not all(len(s) == len(names) for s in sequences):
            return _frozen_list(map(frozen_values, sequences), len(sequences))
        columns = ValueColumns(len(sequences), {name: [s.get(name) for s in sequences] for name in names})
    key = []
    for name in sorted(columns.columns):
        ints = columns.ints(name)
        if ints is not None:
            key.append((name, "int", ints.tobytes()))
            continue
        lists = columns.int_lists(name)
        if lists is None:
            return _frozen_list(map(frozen_values, sequences), len(sequences))
        key.append((name, "list of int", lists[1].tobytes(), lists[0].tobytes()))
    return ("columns", tuple(key))


def frozen_values(value) -> object:
    """A hashable form of runtime values that keeps types apart (True is not 1, 1 is not 1.0)."""
    kind = type(value)
    if kind is int or kind is bool:  # most leaves (a packed batch keys a length per sequence): the quick way
        return (kind.__name__, value)
    if isinstance(value, dict):
        return tuple(sorted([(k, frozen_values(v)) for k, v in value.items()]))
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        # Most lists are of ints (a length per document), or of such lists (a packed batch's per-sequence lists):
        # a tuple of them, not a tuple per value.
        # Tables of bools (a block-sparse layout: 65,536 of them at 32K) too, in their own kind (True is not 1).
        types = set(map(type, value))  # (the types' set: 3x quicker than a test per value in Python)
        for leaf in (int, bool):
            if types <= {leaf}:
                return (f"{leaf.__name__}s", _frozen_list(value))
            if types <= {list, tuple} and set(map(type, itertools.chain.from_iterable(value))) <= {leaf}:
                return (f"lists of {leaf.__name__}s", _frozen_list(map(tuple, value), len(value)))
        return ("list", _frozen_list((frozen_values(v) for v in value), len(value)))
    try:
        hash(value)
    except TypeError:  # a set, a bytearray: no runtime value's type; binding says so, once the key is made
        return (type(value).__name__, id(value))
    return (type(value).__name__, value)


class HashedOnce(tuple):
    """A tuple that computes its hash once: a long one in a key (a value per sequence of a thousand-sequence
    batch) is hashed by every dict that key goes through (the launch cache's look-ups and book-keeping: a dozen
    times for a new batch, 17 us each for rm_shared's 1,024 sequences, dev VM)."""

    def __hash__(self) -> int:
        h = self.__dict__.get("hash")
        if h is None:
            h = self.__dict__["hash"] = tuple.__hash__(self)
        return h

    def __reduce__(self):  # (a plan's key pickles to another process, whose str hashes differ: the hash stays here)
        return HashedOnce, (tuple(self),)


# Lists frozen longer than this keep their hash (HashedOnce); shorter ones are plain tuples, which a repeated
# call's single look-up hashes sooner.
_HASHED_ONCE_FROM = 64


def _frozen_list(entries, count: int | None = None) -> tuple:
    """A tuple of `entries` (`count` of them, where they are not a sized collection)."""
    return HashedOnce(entries) if (len(entries) if count is None else count) >= _HASHED_ONCE_FROM else tuple(entries)


def compile_program(program: ir.Program, options: KernelOptions = KernelOptions(),
                    consts: dict[str, object] | None = None, observe=None) -> CompiledMask:
    """Optimise, check and generate code for a parsed program."""
    try:
        program = bind_consts(program, dict(consts or {}))
        with gcpause.paused():
            program = run_pipeline(program, observe=observe)
            check_ranges(program)
            source, code = render_source(program, options)
    except MaskError as exc:
        raise exc.with_source(program.source) if program.source else exc
    except RecursionError:  # nesting the front end took, a few levels short of its own limit (calls nest deeper here)
        raise MaskError(Diagnostic(Span.unknown(), "expressions are nested too deeply"), program.source) from None
    return CompiledMask(program, options, source, code)


def compile_file(path: str | Path, options: KernelOptions = KernelOptions(),
                 consts: dict[str, object] | None = None) -> CompiledMask:
    return compile_program(read_file(str(path)), options, consts)


def compile_text(text: str, options: KernelOptions = KernelOptions(), consts: dict[str, object] | None = None,
                 path: str = "<mask>") -> CompiledMask:
    return compile_program(read_program(text, path), options, consts)
