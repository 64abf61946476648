"""Launch: run a compiled mask on torch or CuPy tensors.

Tensors are used in place (zero copy): only their data pointers and strides reach the kernel. Every check
happens before the launch and fails with a ValueError naming the tensor. The kernel runs on the caller's
current stream (torch's current stream for torch tensors, CuPy's for CuPy arrays), so the result is ordered
after the producers of q, k and v like any other operation on that stream.
"""

from __future__ import annotations

import functools
import math
import numbers
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

import numpy as np

from maskc.compiler import CompiledMask, frozen_values
from maskc.diagnostics import Span, ValueProblem, value_problem
from maskc.ir.members import member_split
from maskc.memo import per_object
from maskc.plan import native
from maskc.plan.by_key import KeyTables, long_items, tail_heads
from maskc.plan.layout_batch import ValueColumns
from maskc.plan.members import split
from maskc.runtime.launch import Kernel, LaunchCache, PreparedLaunch, cupy_stream, current_stream_handle, current_stream_of
from maskc.runtime.tensor_maps import grid_box_map, tensor_map

_ELEMENT_BYTES = 2
_ALIGN = 16


@dataclass(frozen=True)
class _Tensor:
    """What the launch needs of one tensor, whatever library it came from."""

    name: str
    library: str  # "torch" | "cupy"
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    dtype: str  # "bf16" | "fp16" | other
    device: int
    ptr: int
    requires_grad: bool
    obj: object


@dataclass(frozen=True, eq=False)
class Plan:
    """The plan of one call's runtime values, made ahead of the call by `Attention.plan`: in a DataLoader's
    workers, say, so that a training step whose lengths are new does not wait for the host planner. It holds
    numpy arrays only, so it pickles. Give it back to the call with the same runtime values:
    `attn(q, k, v, cu_seqlens=cu, plan=plan, **params)`; a plan made for other values or another mask is
    refused with a ValueError."""

    mask: str  # CompiledMask.fingerprint of the mask it was made for
    values: tuple  # the runtime values it was made for (CompiledMask.plan_key)
    tables: tuple  # (Descriptor, KernelTables, layouts), as CompiledMask.tables makes them
    key_tables: KeyTables | None  # the backward pass's tables by key tile; None without a backward pass


def _describe(x, name: str) -> _Tensor:
    mod = type(x).__module__
    if mod.startswith("torch"):
        import torch

        dtype = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(x.dtype, str(x.dtype).replace("torch.", ""))
        if x.device.type != "cuda":
            raise ValueError(f"{name} is on {x.device}; maskc needs CUDA tensors")
        return _Tensor(name, "torch", tuple(x.shape), tuple(x.stride()), dtype, x.device.index or 0, x.data_ptr(),
                       bool(x.requires_grad), x)
    if mod.startswith("cupy"):
        dtype = _dtype_name(x.dtype)
        strides = tuple(s // x.itemsize for s in x.strides)
        return _Tensor(name, "cupy", tuple(x.shape), strides, dtype, x.device.id, x.data.ptr, False, x)
    raise ValueError(f"{name} must be a torch tensor or a CuPy array, got {type(x).__name__}")


@lru_cache(maxsize=64)
def _dtype_name(dtype) -> str:
    """A numpy dtype's name as maskc spells it (str() of a dtype costs ~5 us)."""
    return {"bfloat16": "bf16", "float16": "fp16"}.get(str(dtype), str(dtype))


def _host_ints(x, name: str) -> np.ndarray:
    """cu_seqlens and similar: a host copy (a device tensor costs one small synchronous copy)."""
    if x is None:
        return None
    mod = type(x).__module__
    if mod.startswith("torch"):
        x = x.detach().cpu().numpy()
    elif mod.startswith("cupy"):
        x = x.get()
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError):  # ragged nested lists, say
        raise ValueError(f"{name} must be a 1-D integer array, got {type(x).__name__} {x!r:.60}") from None
    if arr.ndim != 1 or arr.dtype.kind not in "iu":  # (np.issubdtype(dtype, np.integer), at a tenth of its ~2 us)
        raise ValueError(f"{name} must be a 1-D integer array, got shape {arr.shape} and dtype {arr.dtype}")
    return arr.astype(np.int64)


@lru_cache(maxsize=None)
def _module(path: str, name: str, shared: int, device: int):
    import cupy

    with cupy.cuda.Device(device):
        module = cupy.RawModule(path=path)
        kernel = module.get_function(name)
        kernel.max_dynamic_shared_size_bytes = shared
    return module, kernel


@lru_cache(maxsize=None)
def _function(path: str, name: str, shared: int, device: int) -> tuple[int, object]:
    """The driver's handle of a kernel of a cubin on a device, and CuPy's function: found once, as the module is
    loaded once (a plan of new runtime values needs its kernels again: their launch shape is the plan's)."""
    import cupy

    _, function = _module(path, name, shared, device)
    with cupy.cuda.Device(device):  # CuPy's RawKernel keeps one driver function per device
        return getattr(function, "kernel", function).ptr, function


def _kernel(cubin, name: str, shared: int, device: int, grid: int, threads: int) -> Kernel:
    """A kernel of a cubin, as a prepared launch runs it."""
    handle, function = _function(str(cubin), name, shared, device)
    return Kernel(handle, grid, threads, shared, function)


class Attention:
    """`attn(q, k, v, *, cu_seqlens=None, scale=None, return_lse=False, **runtime_params)`.

    q: `[B, N, Hq, D]` (padded batch) or `[T, Hq, D]` with `cu_seqlens` (`[B + 1]`, packed jagged batch);
    k, v: the same with Hkv heads, Hq a multiple of Hkv (query head h uses key/value head h // (Hq / Hkv)).
    Runtime parameters are keywords: a value for every sequence, or a list with one value per sequence.
    Returns O like q (and, with `return_lse=True`, LSE in fp32, `[B, Hq, N]` or `[Hq, T]`).
    """

    def __init__(self, compiled: CompiledMask):
        from maskc.runtime import autograd

        self.compiled = compiled
        self.handle = autograd.handle_of(self)  # how torch's custom ops name this mask (maskc.runtime.autograd)
        autograd.register()
        native.start()  # the C++ planner for calls with new runtime values, built or loaded in the background
        # Launches prepared for recent call signatures (tensors, values, options): a repeated call skips
        # every check, the planning and the argument packing (see _call_key).
        self._launches = LaunchCache()
        self._backward_launches = LaunchCache()  # the same for `backward`
        # What the checks found of recent runtime values, by content (see _inputs): a backward call finds its
        # forward's, and each layer's call after the first its predecessor's.
        self._checked_values: dict[tuple, _CheckedValues] = {}
        # A packed sequence of a family whose members never see each other runs as one sequence per member,
        # so that tiles start at each member (maskc.plan.members); None for other masks, and with MASKC_MEMBERS=0
        # (the sequences as given: the same results, for comparisons).
        self._members = member_split(compiled.program) if os.environ.get("MASKC_MEMBERS", "1") != "0" else None

    @property
    def program(self):
        return self.compiled.program

    def __repr__(self) -> str:
        o = self.compiled.options
        b = o.backward
        backward = "none" if b is None else f"{b.name} ({'' if b.deterministic else 'not '}deterministic)"
        return (f"<maskc.Attention {self.program.name}: head_dim={o.head_dim} dtype={o.dtype} arch={o.arch} "
                f"backward={backward}>")

    # -- the call -------------------------------------------------------------------------------------

    def sequences(self, lengths: list[int], params: dict[str, object]) -> ValueColumns:
        """Per-sequence runtime values from keyword arguments: broadcast, or one per sequence (as columns: a
        sequence of dicts, one per sequence, made when asked for)."""
        count = len(lengths)
        # (a call's lengths are Python ints already: a copy, not an int() per sequence, 3x quicker)
        n = list(lengths) if set(map(type, lengths)) <= {int} else [int(n) for n in lengths]
        columns: dict[str, list] = {"n": n}
        for name, value in plain_values(params).items():
            decl = self.program.param(name)
            if decl is None or name == "n":
                known = ", ".join(p.name for p in self.program.runtime_params) or "none"
                raise _problem(self.program, self.program.span, f"unknown runtime parameter '{name}' for mask "
                               f"{self.program.name} (runtime parameters: {known})")
            if decl.const:
                raise _problem(self.program, decl.span, f"'{name}' is const (compiled in); compile again to change it")
            try:
                per_sequence = _is_per_sequence(value, decl.type.depth, count)
            except RecursionError:
                raise _problem(self.program, decl.span, f"'{name}' is nested too deeply for a {decl.type}") from None
            if per_sequence and len(value) != count:
                raise _problem(self.program, decl.span,
                               f"'{name}' has {len(value)} values for {count} sequences")
            columns[name] = list(value) if per_sequence else [value] * count
        return ValueColumns(count, columns)

    def plan(self, *, cu_seqlens=None, batch: int | None = None, n: int | None = None, **params) -> Plan:
        """The plan of a call's runtime values, made ahead of the call (see `Plan`): for a packed batch its
        `cu_seqlens`, for a padded one `batch` sequences of `n` tokens; and the call's runtime parameters. Needs
        no GPU and no tensors."""
        padded = batch is not None or n is not None
        if (cu_seqlens is None) != padded or (padded and (batch is None or n is None)):
            raise ValueError("plan() takes cu_seqlens (a packed batch) or batch and n (a padded one)")
        if cu_seqlens is not None:
            lengths, offsets = _packed(cu_seqlens)
        else:
            if not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 0 for x in (batch, n)):
                raise ValueError(f"batch and n must be non-negative integers, got {batch!r} and {n!r}")
            _check_sequence_count(int(batch), "batch")
            lengths, offsets = [int(n)] * int(batch), np.zeros(int(batch), dtype=np.int64)
        sequences = self.sequences(lengths, params)
        given = None
        if cu_seqlens is not None:
            _, offsets, sequences, given = self._split_members(lengths, offsets, sequences, None)
        compiled = self.compiled
        native.start()  # (an Attention sent to a worker process starts its C++ planner there too)
        key = compiled.plan_key(sequences, offsets)
        tables = self._tables(sequences, offsets, key, given)
        by_key = compiled.key_tables(*tables[:2]) if compiled.options.backward is not None else None
        return Plan(compiled.fingerprint, key, tables, by_key)

    def _adopt(self, plan, x: _Inputs) -> None:
        """Cache a plan made ahead (`plan=`) for this call, once it is known to be this mask's and made for this
        call's runtime values."""
        if not isinstance(plan, Plan):
            raise ValueError(f"plan must be what Attention.plan returns, got {type(plan).__name__}")
        if plan.mask != self.compiled.fingerprint:
            raise ValueError("plan was made for another mask, or other const values or kernel options")
        if plan.values != x.plan_key:
            raise ValueError("plan was made for other runtime values than this call's (cu_seqlens, the batch's shape "
                             "or a runtime parameter differs)")
        self.compiled.adopt(plan.values, plan.tables, plan.key_tables)

    def __call__(self, q, k, v, *, cu_seqlens=None, scale: float | None = None, return_lse: bool = False,
                 out=None, lse=None, plan: Plan | None = None, **params):
        checked = key = None
        if plan is not None:
            if type(q).__module__.startswith("torch"):
                import torch

                if torch.compiler.is_compiling():
                    raise ValueError("plan= cannot be given under torch.compile (a compiled graph would not see "
                                     "a new plan); give runtime values as tensors instead")
            key = _call_key(q, k, v, cu_seqlens, scale, out, lse, plain_values(params) if params else params)
            checked = self._inputs(q, k, v, cu_seqlens, scale, params, key)
            self._adopt(plan, checked)
        if _through_torch_op(q, k, v):
            from maskc.runtime import autograd

            if out is not None or lse is not None:
                raise ValueError("out= and lse= cannot be given when q, k or v requires grad or under torch.compile "
                                 "(autograd owns the outputs)")
            autograd.register()
            return autograd.attention_op(self, q, k, v, cu_seqlens, scale, return_lse, params)
        return self._forward(q, k, v, cu_seqlens, scale, out, lse, return_lse,
                             plain_values(params) if params else params, checked, key)

    def forward(self, q, k, v, *, cu_seqlens=None, scale: float | None = None, out=None, lse=None,
                return_lse: bool = True, plan: Plan | None = None, **params):
        """The call without autograd: `(out, lse)` (or out alone with `return_lse=False`), whatever requires
        grad. With `backward`, the forward/backward pair CuPy users call by hand."""
        params = plain_values(params)
        checked = key = None
        if plan is not None:
            key = _call_key(q, k, v, cu_seqlens, scale, out, lse, params)
            checked = self._inputs(q, k, v, cu_seqlens, scale, params, key)
            self._adopt(plan, checked)
        return self._forward(q, k, v, cu_seqlens, scale, out, lse, return_lse, params, checked, key)

    def _forward(self, q, k, v, cu_seqlens, scale, out, lse, return_lse: bool, params: dict,
                 checked: _Inputs | None, key: tuple | None):
        """A call's outputs: through the prepared launch of its signature where there is one (no checks, no
        planning), else checked (`checked`: its inputs, where a plan's adoption checked them already, and `key`
        its _call_key), planned and prepared for the next call of the same signature."""
        if checked is None:
            key = _call_key(q, k, v, cu_seqlens, scale, out, lse, params)
        prepared = self._launches.get(key) if key is not None else None
        if prepared is not None:
            return prepared.run(q, out, lse, return_lse)
        prepared = _repointed(self._launches, key)
        if prepared is not None:  # the call of another layer: its own tensors, all else the same
            return prepared.run(q, out, lse, return_lse)
        result = self._call(checked or self._inputs(q, k, v, cu_seqlens, scale, params, key), out, lse)
        if key is not None and result.launch is not None:
            self._launches.put(key, result.launch, result.plan)
        return result.outputs(return_lse)

    def _inputs(self, q, k, v, cu_seqlens, scale, params, key: tuple | None = None) -> _Inputs:
        """q, k, v, cu_seqlens, scale and runtime values, checked (a ValueError names what is wrong). `key`: the
        call's _call_key or _backward_key, whose last part keys the runtime values by content: values checked
        before (a forward's, for its backward) keep their lengths and plan key, found once."""
        o = self.compiled.options
        tq, tk, tv = _describe(q, "q"), _describe(k, "k"), _describe(v, "v")
        for t in (tq, tk, tv):
            if t.dtype != o.dtype:
                raise ValueError(f"{t.name} is {t.dtype}, but this kernel was compiled for {o.dtype}")
            if t.device != tq.device or t.library != tq.library:
                raise ValueError(f"q, k and v must be on one device and of one library ({t.name} is not)")
        packed = cu_seqlens is not None
        rank = 3 if packed else 4
        for t in (tq, tk, tv):
            if len(t.shape) != rank:
                layout = "[T, H, D] with cu_seqlens" if packed else "[B, N, H, D] (or [T, H, D] with cu_seqlens)"
                raise ValueError(f"{t.name} has shape {list(t.shape)}; expected {layout}")
            if t.shape[-1] != o.head_dim:
                raise ValueError(f"{t.name} has head dim {t.shape[-1]}, but this kernel was compiled for {o.head_dim}")
            _check_rows(t)
        if tk.shape != tv.shape:
            raise ValueError(f"k and v must have the same shape, got {list(tk.shape)} and {list(tv.shape)}")
        if tq.shape[:-2] != tk.shape[:-2]:
            raise ValueError(f"q and k must index the same tokens (self-attention), got {list(tq.shape)} and {list(tk.shape)}")
        hq, hkv = tq.shape[-2], tk.shape[-2]
        if hkv == 0 or hq % hkv:
            raise ValueError(f"q has {hq} heads, which is not a multiple of k's {hkv} heads")
        if scale is None:
            scale = 1.0 / math.sqrt(o.head_dim)
        # The kernels take scale * log2(e) as a float32: past its range the softmax would be NaN, and below its
        # smallest value the scale would be 0 (uniform attention), not an error.
        if (isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not math.isfinite(scale)
                or not _FLOAT32_MIN <= scale * math.log2(math.e) < _FLOAT32_MAX or scale < _FLOAT32_MIN):
            raise ValueError(f"scale must be a positive finite number a float32 holds, got {scale!r}")
        scale = float(scale)

        # (the lengths follow from cu_seqlens and T, or from q's shape)
        values_key = None if key is None else (key[1][-1], tq.shape[0] if packed else tq.shape[:2])
        seen = None if values_key is None else self._checked_values.get(values_key)
        if seen is not None:  # (their checks below passed already)
            lengths, offsets = seen.lengths, seen.offsets
        elif packed:
            lengths, offsets = _packed(cu_seqlens, tq.shape[0])
        else:
            _check_sequence_count(tq.shape[0], "q's batch dimension")
            lengths = [tq.shape[1]] * tq.shape[0]
            offsets = np.zeros(len(lengths), dtype=np.int64)
        if seen is None:
            longest = max(lengths, default=0)
            if longest > 2**31 - 1:
                raise ValueError(f"a sequence of {longest} tokens is longer than the 2^31 - 1 maskc supports")
        if math.prod(tq.shape) >= 2**63:
            raise ValueError("q is too large: tokens x heads x head_dim must stay below 2^63")

        sequences = self.sequences(lengths, params)  # (made again: the lists in it are this call's)
        if seen is None and values_key is not None:
            if len(self._checked_values) >= _CHECKED_VALUES:
                self._checked_values.clear()
            seen = self._checked_values[values_key] = _CheckedValues(lengths, offsets)
        given = None
        if packed:
            lengths, offsets, sequences, given = self._split_members(lengths, offsets, sequences, seen)
        return _Inputs(tq, tk, tv, packed, scale, lengths, offsets, sequences, seen, given)

    def _split_members(self, lengths: list[int], offsets: np.ndarray, sequences: ValueColumns,
                       seen: _CheckedValues | None):
        """A packed call's (lengths, offsets, sequences), each sequence split into its family's members where the
        mask allows it and that visits fewer tiles (maskc.plan.members; the planner checks and reports values that
        do not split), else as given; then (sequences, offsets) as given where they were split, else None. `seen`
        keeps the split for later calls with these values."""
        if self._members is None:
            return lengths, offsets, sequences, None
        if seen is not None and seen.members is not _NOT_SPLIT:
            members = seen.members
        else:
            members = split(self._members, lengths, offsets, sequences, self.compiled.options.tile)
            if members is not None and len(members.lengths) > MAX_SEQUENCES:
                members = None
            if seen is not None:
                seen.members = members
        if members is None:
            return lengths, offsets, sequences, None
        return members.lengths, members.offsets, members.values(sequences), (sequences, offsets)

    def _tables(self, sequences: ValueColumns, offsets: np.ndarray, key: tuple, given: tuple | None):
        """compiled.tables of a call's values. Where the call's sequences were split into members (`given`: the
        sequences and offsets before) and the planner refuses the values, the sequences as given are planned
        instead for the message: a member's index and n are not the caller's."""
        try:
            return self.compiled.tables(sequences, offsets, key=key)
        except ValueProblem:
            if given is not None:
                self.compiled.tables(*given)  # (refuses them too: the split keeps every scalar parameter)
            raise

    def _call(self, x: _Inputs, out, lse) -> _Result:
        """The checked call: plan (or find the plan), check the outputs, prepare the launch and launch it."""
        tq, tk, tv = x.q, x.k, x.v
        desc, tables, _ = self._tables(x.sequences, x.offsets, x.plan_key, x.given)
        to, tl = _outputs(tq, out, lse, x.lse_shape)
        launch = self._prepare(tq, tk, tv, to, tl, x.packed, desc, tables, x.scale, x.lse_shape)
        if launch is not None:
            launch.launch(to.obj, tl.obj)
        return _Result(launch, desc, to.obj, tl.obj)

    def backward(self, q, k, v, out, lse, d_out, *, cu_seqlens=None, scale: float | None = None,
                 plan: Plan | None = None, **params):
        """The gradients of a call: given q, k, v and the keywords of `attn(q, k, v, return_lse=True, ...)`, its
        outputs `out` and `lse`, and `d_out`, the gradient of the loss with respect to `out`, returns
        `(dq, dk, dv)` shaped like q, k and v (dk and dv summed over the query heads that share a key head).

        Deterministic (the same inputs give the same bits) unless the options' backward pass is the fused
        Hopper one (`backward_kernels="hopper_fused"`, sm_90a's default at head dim 128), whose dq differs in
        its last bits from run to run; `load(..., deterministic=True)` chooses a pass that is deterministic.
        This is the pair CuPy users call by hand; with torch tensors that require grad, calling `attn` records
        it for autograd instead. As for the forward, a repeated call (the same tensors and values) launches
        what the first one prepared, with no checks and no planning."""
        params = plain_values(params) if params else params
        key = _backward_key(q, k, v, out, lse, d_out, cu_seqlens, scale, params)
        checked = None
        if plan is not None:
            checked = self._inputs(q, k, v, cu_seqlens, scale, params, key)
            self._adopt(plan, checked)
        launch = self._backward_launches.get(key) if key is not None else None
        if launch is None:
            launch = _repointed(self._backward_launches, key)
        if launch is None:
            launch, plan = self._prepare_backward(checked or self._inputs(q, k, v, cu_seqlens, scale, params, key),
                                                  out, lse, d_out)
            if key is not None:
                self._backward_launches.put(key, launch, plan)
        return launch.run(q, k, v)

    def _prepare_backward(self, x: _Inputs, out, lse, d_out) -> tuple["_BackwardLaunch", object]:
        """The checked backward (`x`: its inputs, checked): check out, lse and d_out, find the plan and its
        tables by key tile, pack the arguments. Returns the launch and the descriptor it was prepared from."""
        compiled, options, bwd = self.compiled, self.compiled.options, self.compiled.options.backward
        if bwd is None:
            compiled.backward_cubin  # raises: no backward kernels for these options
        tq, tk, tv = x.q, x.k, x.v
        to, tdo = _describe(out, "out"), _describe(d_out, "d_out")
        for t in (to, tdo):
            if t.shape != tq.shape or t.dtype != tq.dtype or t.device != tq.device or t.library != tq.library:
                raise ValueError(f"{t.name} must be like q ({tq.library}, {tq.dtype}, {list(tq.shape)}), got "
                                 f"{t.library}, {t.dtype}, {list(t.shape)}")
            _check_rows(t)
        tl = _describe(lse, "lse")
        _check_lse(tl, tq, x.lse_shape)
        nondeterministic = bwd.name if tq.library == "torch" and not bwd.deterministic else None
        desc, tables, _ = self._tables(x.sequences, x.offsets, x.plan_key, x.given)
        hq, hkv = tq.shape[-2], tk.shape[-2]
        if len(desc.work_seq) == 0 or hq == 0:  # nothing to launch: the gradients have no elements
            return _BackwardLaunch.of(None, tq, tk, tv, x.lse_shape, None, nondeterministic), desc
        key_tables = compiled.key_tables(desc, tables)
        stream = _stream(tq)
        tensors = (tq, tk, tv, to, tl, tdo)  # in _backward_key's order
        arguments = functools.partial(_backward_tensor_arguments, compiled, x.packed, tables.seq_table)
        values = arguments(*tensors)
        for name, t in {"q": tq, "k": tk, "v": tv, "o": to, "dout": tdo}.items():
            values.update(zip(_STRIDES[name], _token_strides(t.strides, x.packed)))
        for name, t in (("dq", tq), ("dk", tk), ("dv", tv)):  # new contiguous tensors at every call (BACKWARD_SLOTS)
            values.update(zip(_STRIDES[name], _token_strides(_contiguous_strides(t.shape), x.packed)))
        values.update(zip(("lse_stride_b", "lse_stride_h"), _lse_strides(tq, x.packed)))
        values.update(num_heads=hq, kv_group=hq // hkv, scale_log2=x.scale * math.log2(math.e), scale=x.scale)
        device_tables = (_upload(tables, tq.device, stream), _upload(key_tables, tq.device, stream))
        values.update(zip(TABLE_ARGS + KEY_TABLE_ARGS, device_tables[0].pointers + device_tables[1].pointers))
        # per query tile and head, the fp32 sum of dS K over key tiles (fused: prep zeroes it, dq_store rounds it)
        dq_accum_shape = (len(desc.work_seq), hq, options.block_q * options.head_dim) if bwd.fused else None
        slots = BACKWARD_SLOTS + (("dq_accum",) if bwd.fused else ())
        values.update(dict.fromkeys(slots, 0))  # set by every launch
        if "tm_q" in _names(bwd.args):  # the Hopper kernels read through TMA tensor maps
            values["packed"] = int(x.packed)
            multiprocessors = _multiprocessors(tq.device)
            def visiting_order():  # long_items and tail_heads of both descriptors
                long_query = long_items(desc.row_ptr, multiprocessors)
                long_key = long_items(key_tables.col_ptr, multiprocessors)
                return (long_query, long_key, tail_heads(desc.row_ptr, long_query, multiprocessors),
                        tail_heads(key_tables.col_ptr, long_key, multiprocessors))

            (values["long_query_items"], values["long_key_items"], values["tail_query_heads"],
             values["tail_key_heads"]) = _per_plan("visiting order", desc, tq.device, visiting_order)
        import cupy

        def backward_kernels():  # dQ (or prep) first: it writes delta
            query_items, key_items = len(desc.work_seq), len(key_tables.col_ptr) - 1
            return tuple(_kernel(compiled.backward_cubin, name, bwd.shared_memory_bytes(options, kernel), tq.device,
                                 bwd.grid(kernel, options, key_items if kernel == "dkdv" else query_items, hq, hkv),
                                 bwd.threads(kernel))
                         for kernel, name in zip(bwd.kernels, compiled.backward_names))

        kernels = _per_plan(("backward kernels", compiled.backward_cubin, hq, hkv), desc, tq.device, backward_kernels)
        prepared = PreparedLaunch(kernels, cupy.cuda.Device(tq.device), bwd.args, values, slots, device_tables)
        return _BackwardLaunch.of(prepared, tq, tk, tv, x.lse_shape, dq_accum_shape, nondeterministic,
                                  _repointing(arguments, tensors, rows=(True, True, True, True, False, True))), desc

    def _prepare(self, tq, tk, tv, to, tl, packed, desc, tables, scale, lse_shape):
        """Everything a launch needs, packed once; None when there is nothing to launch."""
        import cupy

        compiled, options = self.compiled, self.compiled.options
        family = options.family
        hq, hkv = tq.shape[-2], tk.shape[-2]
        stream = _stream(tq)
        strides = {t: _token_strides(x.strides, packed) for t, x in (("q", tq), ("k", tk), ("v", tv), ("o", to))}
        lse_strides = _lse_strides(tq, packed)
        work_items = len(desc.work_seq)
        if work_items == 0 or hq == 0:
            return None
        device_tables = _upload(tables, tq.device, stream)
        values = {
            "o": to.ptr, "lse": tl.ptr,
            **dict(zip(_STRIDES["o"], strides["o"])),
            "lse_stride_b": lse_strides[0], "lse_stride_h": lse_strides[1],
            "num_heads": hq, "kv_group": hq // hkv, "scale_log2": scale * math.log2(math.e),
            **dict(zip(TABLE_ARGS, device_tables.pointers)),
        }
        arguments = functools.partial(_forward_tensor_arguments, compiled, packed, tables.seq_table)
        values.update(arguments(tq, tk, tv))
        names = _names(family.forward_args)
        if "q" in names:  # the portable kernel reads Q, K and V through pointers
            for t in ("q", "k", "v"):
                values.update(zip(_STRIDES[t], strides[t]))
        if "tm_q" in names:  # the Hopper kernels read them through TMA tensor maps
            values["packed"] = int(packed)
            values["total_work"] = work_items * hq
            values["head_major_first"], values["head_major_last"] = _per_plan("head-major run", desc, tq.device,
                                                                              desc.longest_equal_run)
            values["work_counter"] = 0  # the stream's counter, set by every launch
        kernel = _per_plan(("forward kernel", compiled.cubin, hq), desc, tq.device, lambda: _kernel(
            compiled.cubin, compiled.name, compiled.shared_memory_bytes, tq.device,
            family.grid(work_items, hq, _multiprocessors(tq.device)), family.threads))
        prepared = PreparedLaunch((kernel,), cupy.cuda.Device(tq.device), family.forward_args, values, ("o", "lse"),
                                  device_tables)
        return _Launch.of(prepared, tq, lse_shape, _repointing(arguments, (tq, tk, tv), rows=(True, True, True)))


# Runtime values an Attention remembers the checks of (_CheckedValues): a model's layers call with the same ones.
_CHECKED_VALUES = 16


_NOT_SPLIT = object()  # (a _CheckedValues whose split was not asked for yet)


@dataclass(eq=False)
class _CheckedValues:
    """What the checks found of a call's runtime values, kept for later calls with the same ones (by content): the
    lengths and token offsets of the sequences, and the values' plan key once made."""

    lengths: list[int]
    offsets: np.ndarray
    plan_key: tuple | None = None
    members: object = _NOT_SPLIT  # maskc.plan.members.split's answer (Members or None) once asked


@dataclass(frozen=True)
class _Inputs:
    """A call's inputs after the checks."""

    q: _Tensor
    k: _Tensor
    v: _Tensor
    packed: bool  # a jagged batch ([T, H, D] with cu_seqlens), else padded ([B, N, H, D])
    scale: float
    lengths: list[int]
    offsets: np.ndarray  # token offset of each sequence
    sequences: ValueColumns  # runtime values per sequence
    seen: _CheckedValues | None = None  # kept for later calls with these values; None where they cannot be keyed
    given: tuple | None = None  # a packed call's (sequences, offsets) before its split into members, if split

    @cached_property
    def plan_key(self) -> tuple:
        """The runtime values' CompiledMask.plan_key: made once for a call, and for a call of values checked
        before, found (for a thousand sequences of rm_shared: 0.28 ms, dev VM)."""
        seen = self.seen
        if seen is not None and seen.plan_key is not None:
            return seen.plan_key
        key = CompiledMask.plan_key(self.sequences, self.offsets)
        if seen is not None:
            seen.plan_key = key
        return key

    @property
    def lse_shape(self) -> tuple[int, ...]:
        """LSE is [H, T] for a packed batch, [B, H, N] for a padded one."""
        q = self.q
        return (q.shape[-2], q.shape[0]) if self.packed else (len(self.lengths), q.shape[-2], q.shape[1])


def rows_aligned(ptr: int, strides: tuple[int, ...]) -> bool:
    """Whether the kernels can read a tensor's rows: its last dimension contiguous, its data pointer and other
    strides whole 16-byte steps (they copy rows 16 bytes at a time)."""
    return strides[-1] == 1 and ptr % _ALIGN == 0 and all(s % (_ALIGN // _ELEMENT_BYTES) == 0 for s in strides[:-1])


def _check_rows(t: _Tensor) -> None:
    if t.strides[-1] != 1:
        raise ValueError(f"{t.name}'s last dimension must be contiguous (stride 1), got stride {t.strides[-1]}")
    if not rows_aligned(t.ptr, t.strides):
        raise ValueError(f"{t.name}'s rows must be 16-byte aligned (data pointer and strides multiples of 8 elements)")


def _check_positive_strides(t: _Tensor) -> None:
    """The Hopper kernels read a tensor through TMA, whose maps take positive strides: a stride of 0 (an expanded
    view) or below (a flipped one) along an extent past one is refused, not read wrongly."""
    for axis, (extent, stride) in enumerate(zip(t.shape, t.strides)):
        if extent > 1 and stride <= 0:
            raise ValueError(f"{t.name} has stride {stride} along dimension {axis} (shape {list(t.shape)}); the Hopper "
                             "kernels read it through TMA, which needs positive strides: pass a contiguous tensor "
                             "(k and v may have fewer heads than q, for GQA and MQA)")


def _overlapping(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether two elements of a strided tensor may share an address: unless its dimensions of extent past one,
    by stride, each step past all of the smaller ones (a layout made from a contiguous one by permuting, slicing
    and striding does), it is taken to overlap."""
    span = 1
    for stride, extent in sorted((abs(s), e) for s, e in zip(strides, shape) if e > 1):
        if stride < span:
            return True
        span = stride * extent
    return False


def _token_strides(strides: tuple[int, ...], packed: bool) -> tuple[int, int, int]:
    """(sequence, token, head) strides of a tensor with these strides: [T, H, D] has no sequence stride."""
    return (0,) + tuple(strides[:2]) if packed else tuple(strides[:3])


def _tensor_maps(options, packed: bool, tensors: dict[str, tuple[_Tensor, int]]) -> dict[str, bytes]:
    """`tm_NAME` for each tensor: a 4-D TMA map (head dim, heads, tokens, sequences) with boxes of `run` rows."""
    maps = {}
    for name, (t, run) in tensors.items():
        _check_positive_strides(t)
        tokens, sequences = (t.shape[0], 1) if packed else (t.shape[1], t.shape[0])
        b, tok, h = _token_strides(t.strides, packed)
        maps[f"tm_{name}"] = tensor_map(t.ptr, options.dtype, options.head_dim, t.shape[-2], tokens, sequences,
                                        h, tok, b, run)
    return maps


def _grid_boxes(compiled, packed: bool, seq_table: np.ndarray, values: dict[str, object],
                tensors: dict[str, tuple[_Tensor, str, int]]) -> dict[str, object]:
    """`tm_NAME_box` for each NAME: (tensor, side, slots), `grid_boxes` and `SIDE_box_seq_tokens` (abi.GRID_BOXES,
    abi.BACKWARD_BOXES): 5-D maps whose boxes are `slots` slots of a `side` tile of the grid block (a whole tile,
    or a step of one). Where this call cannot use them (no grid, grids that differ between sequences in more
    than their outermost extent, sequences that are not whole token steps apart) grid_boxes is 0, the kernels
    copy row by row, and the maps are the 4-D ones in `values` (never read)."""
    maps = _grid_box_maps(compiled, packed, seq_table, tensors)
    row_by_row = {"grid_boxes": 0, "q_box_seq_tokens": 0, "k_box_seq_tokens": 0}
    return maps or {f"tm_{name}_box": values[f"tm_{name}"] for name in tensors} | row_by_row


def _grid_box_maps(compiled, packed, seq_table, tensors) -> dict[str, object] | None:
    tiling = compiled.tiling
    block = tiling.box_block
    if block is None or len(seq_table) == 0:
        return None
    columns = [compiled.code.seq_table.block(block, f) for f in ("dims_t", "dims_y", "dims_x")]
    grids = seq_table[:, columns]
    # The grids may differ in their outermost extent (rows of a 2D grid, frames of a 3D one: the strides stay
    # the same), which the maps take at its largest; the kernels then copy a box only where it stays inside its
    # sequence's grid (grid_boxes 2), the rest row by row.
    outermost = 0 if len(compiled.program.segments[tiling.blocks[block].first].dims) == 3 else 1
    inner = grids[:, outermost + 1:]
    if (inner != inner[0]).any() or (grids[:, :outermost] != grids[0, :outermost]).any():
        return None
    grid = tuple(int(d) for d in grids.max(axis=0))
    if 0 in grid:
        return None
    differ = bool((grids[:, outermost] != grid[outermost]).any())
    options, maps, steps = compiled.options, {}, {"q": set(), "k": set()}
    for name, (t, side, slots) in tensors.items():
        seq_stride, tok, head = _token_strides(t.strides, packed)
        if packed or t.shape[0] == 1:
            seq_step, extent = 0, t.shape[0] if packed else t.shape[1]
        elif tok > 0 and seq_stride % tok == 0:
            seq_step = seq_stride // tok
            extent = (t.shape[0] - 1) * seq_step + t.shape[1]
        else:
            return None
        if extent >= 2**31:  # x coordinates are 32-bit
            return None
        steps[side].add(seq_step)
        try:
            maps[f"tm_{name}_box"] = grid_box_map(t.ptr, options.dtype, options.head_dim, t.shape[-2], extent, grid,
                                                  head, tok, tiling.step_box(side, slots))
        except ValueError:  # e.g. a box larger than a grid whose extents are runtime values: copy rows instead
            return None
    if any(len(s) > 1 for s in steps.values()):  # one step serves the maps of each side
        return None
    seq_tokens = {f"{side}_box_seq_tokens": min(s, default=0) for side, s in steps.items()}
    return maps | {"grid_boxes": 2 if differ else 1} | seq_tokens


def _forward_tensor_arguments(compiled, packed: bool, seq_table: np.ndarray, tq: _Tensor, tk: _Tensor,
                              tv: _Tensor) -> dict[str, object]:
    """The forward's arguments that depend on where q, k and v are: their addresses (the portable kernel), or
    the TMA maps of them (the Hopper kernel)."""
    options = compiled.options
    if "q" in _names(options.family.forward_args):
        return {"q": tq.ptr, "k": tk.ptr, "v": tv.ptr}
    q_run, k_run = compiled.tiling.run("q"), compiled.tiling.run("k")
    maps = _tensor_maps(options, packed, {"q": (tq, q_run), "k": (tk, k_run), "v": (tv, k_run)})
    tiles = {"q": (tq, "q", options.block_q)} | _key_tiles(options, tk, tv)
    return maps | _grid_boxes(compiled, packed, seq_table, maps, tiles)


def _key_tiles(options, tk: _Tensor, tv: _Tensor) -> dict[str, tuple[_Tensor, str, int]]:
    """Whole key tiles of k and v as _grid_boxes takes them: the forward's tiles, and the backward kernels' own."""
    return {"k": (tk, "k", options.block_k), "v": (tv, "k", options.block_k)}


def _backward_tensor_arguments(compiled, packed: bool, seq_table: np.ndarray, tq: _Tensor, tk: _Tensor,
                               tv: _Tensor, to: _Tensor, tl: _Tensor, tdo: _Tensor) -> dict[str, object]:
    """The backward's arguments that depend on where its tensors are: their addresses, and for the Hopper
    kernels the TMA maps of q, dO, k and v."""
    bwd = compiled.options.backward
    values = {"q": tq.ptr, "k": tk.ptr, "v": tv.ptr, "o": to.ptr, "lse": tl.ptr, "dout": tdo.ptr}
    if "tm_q" in _names(bwd.args):
        q_run, k_run = min(compiled.tiling.run("q"), bwd.q_step), compiled.tiling.run("k")
        maps = _tensor_maps(compiled.options, packed, {"q": (tq, q_run), "dout": (tdo, q_run), "k": (tk, k_run),
                                                       "v": (tv, k_run)})
        boxes = {"q": (tq, "q", bwd.q_step), "dout": (tdo, "q", bwd.q_step)} | _key_tiles(compiled.options, tk, tv)
        values |= maps | _grid_boxes(compiled, packed, seq_table, maps, boxes)
    return values


def _repointing(arguments: Callable[..., dict], tensors: tuple[_Tensor, ...], rows: tuple[bool, ...]):
    """A function of addresses (the first part of `_call_key`, in `tensors`' order) that gives `arguments` of
    the same tensors there: what a launch prepared for these tensors needs, re-pointed at another layer's. None
    where an address the kernels read rows from (`rows`) is not 16-byte aligned (the checked call says why).
    Holds none of the tensors."""
    kept = tuple(_Tensor(t.name, t.library, t.shape, t.strides, t.dtype, t.device, 0, False, None) for t in tensors)

    def at(addresses: tuple[int, ...]) -> dict | None:
        if any(row and address % _ALIGN for row, address in zip(rows, addresses)):
            return None
        return arguments(*(_Tensor(t.name, t.library, t.shape, t.strides, t.dtype, t.device, address, False, None)
                           for t, address in zip(kept, addresses)))
    return at


def _repointed(cache: LaunchCache, key: tuple | None):
    """The launch of a call whose tensors are new but whose signature is not (`key`: its _call_key): the
    signature's latest launch re-pointed at them and kept for `key`; None where there is none to re-point."""
    like = cache.like(key) if key is not None else None
    if like is None:
        return None
    launch = like[0].rebound(key[0])
    if launch is not None:
        cache.put(key, launch, like[1])
    return launch


# Sequences in one call: the host plans each (its lengths, a table row, its work items: ~0.6 KB and 2 us a
# sequence of one tile), so a million of them take a second or two and under a gigabyte.
MAX_SEQUENCES = 1 << 20


def _check_sequence_count(count: int, what: str) -> None:
    if count > MAX_SEQUENCES:
        raise ValueError(f"{what} holds {count:,} sequences; a call takes at most {MAX_SEQUENCES:,}")


def _packed(cu_seqlens, total: int | None = None) -> tuple[list[int], np.ndarray]:
    """(lengths, token offsets) of a packed batch from its cu_seqlens, checked: from 0, never decreasing, and ending
    at the tensors' token count T where there are tensors."""
    cu = _host_ints(cu_seqlens, "cu_seqlens")
    _check_sequence_count(len(cu) - 1, "cu_seqlens")
    lengths = np.diff(cu)  # (one difference serves the check and the result)
    if len(cu) < 1 or cu[0] != 0 or (total is not None and cu[-1] != total) or (len(lengths) and lengths.min() < 0):
        rule = "start at 0 and never decrease" if total is None else f"start at 0, never decrease and end at T = {total}"
        raise ValueError(f"cu_seqlens must {rule}, got {cu.tolist()}")
    return lengths.tolist(), cu[:-1]


def _lse_strides(tq: _Tensor, packed: bool) -> tuple[int, int]:
    """(sequence, head) strides of a contiguous LSE: [H, T] packed, [B, H, N] padded."""
    return (0, tq.shape[0]) if packed else (tq.shape[-2] * tq.shape[1], tq.shape[1])


def _through_torch_op(q, k, v) -> bool:
    """Whether the call goes through maskc's torch custom op: torch tensors, and either torch.compile is
    tracing or autograd must record the call (grad mode on, an input that requires grad)."""
    if not type(q).__module__.startswith("torch"):
        return False
    import torch

    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return True
    return torch.compiler.is_compiling()


@dataclass
class _Launch:
    """A launch prepared for one call signature, and how a repeated call makes its outputs and finds its stream:
    functions of this signature's library and device, chosen once (`of`), since a repeated call's host time is
    the budget (issue 5: 15 us)."""

    prepared: PreparedLaunch
    current_stream: Callable[[], int]
    pointer: Callable[[object], int]
    new_out: Callable[[object], object]  # of q
    new_lse: Callable[[object], object]  # of q
    arguments: Callable[[tuple], dict | None] | None = None  # addresses -> arguments of tensors there (_repointing)

    @staticmethod
    def of(prepared: PreparedLaunch, tq: _Tensor, lse_shape: tuple, arguments=None) -> "_Launch":
        # (Nothing here may hold the first call's tensors: a prepared launch lives as long as the cache keeps it.)
        return _Launch(prepared, current_stream_of(tq.library, tq.device), _pointer_function(tq), _new_like(tq),
                       _new_float32(tq, lse_shape), arguments)

    def rebound(self, addresses: tuple[int, ...]) -> "_Launch | None":
        """This launch for the same signature's tensors at `addresses` (another layer's q, k and v), or None."""
        return _rebound(self, addresses)

    def launch(self, out, lse) -> None:
        """Launch on the current stream, writing `out` and `lse` (None: the kernel writes no LSE)."""
        pointer = self.pointer
        self.prepared.launch(self.current_stream(), pointer(out), 0 if lse is None else pointer(lse))

    def run(self, q, out, lse, return_lse: bool):
        """A repeated call: new outputs unless the caller gave them (LSE only when it is returned: an
        allocation is a quarter of a repeated call's host time), then the launch."""
        if out is None:
            out = self.new_out(q)
        if lse is None and return_lse:
            lse = self.new_lse(q)
        self.launch(out, lse)
        return (out, lse) if return_lse else out


# Each tensor's (sequence, token, head) stride arguments (abi.TENSORS, abi.BACKWARD_TENSORS).
_STRIDES = {t: tuple(f"{t}_stride_{d}" for d in "bth") for t in ("q", "k", "v", "o", "dout", "dq", "dk", "dv")}


@per_object  # (by the list's identity: a family's argument lists are constants, and hashing one costs ~7 us)
def _names(args: tuple) -> frozenset[str]:
    """The names of a kernel's arguments."""
    return frozenset(a.name for a in args)


# The kernel arguments that point at a plan's tables (KernelTables.arrays_in_order), and at the backward's tables
# by key tile (KeyTables.arrays_in_order).
TABLE_ARGS = ("work", "row_ptr", "k_tiles", "kinds", "seq_table", "seg_start", "seg_code", "arrays")
KEY_TABLE_ARGS = ("key_work", "col_ptr", "q_tiles", "q_kinds", "q_items")

# The backward's pointer arguments each call gives new tensors, in the order `_BackwardLaunch.run` passes them
# (the fused pass adds dq_accum).
BACKWARD_SLOTS = ("dq", "dk", "dv", "delta")


@dataclass
class _BackwardLaunch:
    """The backward kernels prepared for one call signature (None: nothing to launch), and how a call makes
    their new outputs (dq, dk, dv: contiguous, like q, k, v) and scratch (delta, then the fused pass's
    dq_accum, in one float32 buffer: an allocation costs 3-6 us on the H200's host)."""

    prepared: PreparedLaunch | None
    nondeterministic: str | None  # the pass's name where torch's deterministic mode must refuse it
    current_stream: Callable[[], int]
    pointer: Callable[[object], int]
    new_dq: Callable[[object], object]  # of q
    new_dk: Callable[[object], object]  # of k
    new_dv: Callable[[object], object]  # of v
    new_scratch: Callable[[object], object]  # of q
    scratch_offsets: tuple[int, ...]  # bytes from the scratch buffer's start to delta (0) and dq_accum
    arguments: Callable[[tuple], dict | None] | None = None  # as _Launch's

    @staticmethod
    def of(prepared, tq: _Tensor, tk: _Tensor, tv: _Tensor, lse_shape: tuple, dq_accum_shape: tuple | None,
           nondeterministic: str | None, arguments=None) -> "_BackwardLaunch":
        # (Nothing here may hold the first call's tensors: a prepared launch lives as long as the cache keeps it.)
        delta = -(-math.prod(lse_shape) // _SCRATCH_ALIGN) * _SCRATCH_ALIGN
        accum = 0 if dq_accum_shape is None else math.prod(dq_accum_shape)
        offsets = (0,) if dq_accum_shape is None else (0, 4 * delta)
        return _BackwardLaunch(prepared, nondeterministic, current_stream_of(tq.library, tq.device),
                               _pointer_function(tq), _new_like(tq), _new_like(tk), _new_like(tv),
                               _new_float32(tq, (delta + accum,)), offsets, arguments)

    def rebound(self, addresses: tuple[int, ...]) -> "_BackwardLaunch | None":
        """As `_Launch.rebound`, for q, k, v, out, lse and d_out at `addresses`."""
        if self.prepared is None:  # nothing to launch, wherever the tensors are
            return self
        return _rebound(self, addresses)

    def run(self, q, k, v) -> tuple:
        """(dq, dk, dv): new tensors, written by the kernels on the current stream. The scratch is freed once
        the launches are queued, as the caching allocators of torch and CuPy allow (stream-ordered reuse)."""
        if self.nondeterministic is not None:
            _honour_torch_determinism(self.nondeterministic)
        dq, dk, dv = self.new_dq(q), self.new_dk(k), self.new_dv(v)
        if self.prepared is not None:
            pointer, scratch = self.pointer, self.new_scratch(q)
            at = pointer(scratch)
            self.prepared.launch(self.current_stream(), pointer(dq), pointer(dk), pointer(dv),
                                 *(at + offset for offset in self.scratch_offsets))
        return dq, dk, dv


_SCRATCH_ALIGN = 64  # floats: dq_accum starts 256 bytes into a line past delta (the kernels' bulk copies need 16)


def _pointer_function(t: _Tensor) -> Callable[[object], int]:
    """The device address of a tensor of t's library."""
    if t.library == "torch":
        import torch

        return torch.Tensor.data_ptr
    return _pointer


def _new_like(t: _Tensor) -> Callable[[object], object]:
    """A function of a tensor like t that makes a new contiguous one of t's shape, dtype and device: empty_like
    where t is contiguous (half the host time of an allocation by shape, dtype and device on the H200)."""
    shape, contiguous = t.shape, t.strides == _contiguous_strides(t.shape)
    if t.library == "torch":
        import torch

        device, dtype = t.obj.device, t.obj.dtype
        return torch.empty_like if contiguous else (lambda x: torch.empty(shape, dtype=dtype, device=device))
    return functools.partial(_empty_like, shape=None if contiguous else shape, dtype=None)


def _new_float32(t: _Tensor, shape: tuple) -> Callable[[object], object]:
    """A function of a tensor like t that makes a new float32 one of this shape on t's device."""
    if t.library == "torch":
        import torch

        device = t.obj.device
        return lambda x: torch.empty(shape, dtype=torch.float32, device=device)
    return functools.partial(_empty_like, shape=shape, dtype="float32")


@dataclass
class _Result:
    launch: _Launch | None
    plan: object  # the descriptor the launch was prepared from
    out: object
    lse: object

    def outputs(self, return_lse: bool):
        return (self.out, self.lse) if return_lse else self.out


def _rebound(launch, addresses: tuple[int, ...]):
    """A _Launch or _BackwardLaunch with its prepared arguments re-pointed at tensors at `addresses` (its
    `arguments` function says which), or None where they cannot be."""
    values = None if launch.arguments is None else launch.arguments(addresses)
    return None if values is None else replace(launch, prepared=launch.prepared.with_arguments(values))


_FLOAT32_MAX = float(np.finfo(np.float32).max)
_FLOAT32_MIN = float(np.finfo(np.float32).smallest_normal)


def _call_key(q, k, v, cu_seqlens, scale, out, lse, params) -> tuple | None:
    """What determines a launch, cheaply, as a pair: the addresses of q, k and v, and the call's signature
    (their shapes, strides, dtypes and devices, the scale, out= and lse= where given, the runtime values). A
    launch prepared for one signature serves another address of it once re-pointed (another layer of a model:
    `_Launch.rebound`). None when a call cannot be keyed safely (a CuPy cu_seqlens, whose content could change
    unseen); such calls always take the checked path. A cu_seqlens on the host is keyed by its content. One on
    the GPU (whose content would cost a synchronisation) is keyed by the tensor itself and its version counter
    (an in-place torch update changes it); the key holds the tensor, so that a new tensor cannot take its id
    and address while the key is cached (a training step's new cu_seqlens often would, and would find the last
    step's plan)."""
    try:
        if type(q).__module__.startswith("torch"):  # the usual call, spelled out (a repeated call has ~15 us)
            addresses = (q.data_ptr(), k.data_ptr(), v.data_ptr())
            layout = (q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype, k.device, v.shape,
                      v.stride(), v.dtype, v.device)
        else:
            addresses, layout = _addresses_and_layout((q, k, v))
        return _key(addresses, [type(scale), scale, layout, None if out is None else _tensor_key(out),
                                None if lse is None else _tensor_key(lse)], cu_seqlens, params)
    except (TypeError, AttributeError, ValueError, RuntimeError):  # unusual inputs: the checked path says what
        return None  # is wrong


def _backward_key(q, k, v, out, lse, d_out, cu_seqlens, scale, params) -> tuple | None:
    """`_call_key` for a backward call: its outputs and d_out are inputs too, and re-pointed like q, k and v."""
    try:
        addresses, layout = _addresses_and_layout((q, k, v, out, lse, d_out))
        return _key(addresses, [type(scale), scale, layout], cu_seqlens, params)
    except (TypeError, AttributeError, ValueError, RuntimeError):
        return None


def _addresses_and_layout(tensors: tuple) -> tuple[tuple, tuple]:
    """The tensors' addresses, and their shapes, strides, dtypes and devices."""
    if type(tensors[0]).__module__.startswith("torch"):
        return (tuple([t.data_ptr() for t in tensors]),
                tuple([(t.shape, t.stride(), t.dtype, t.device) for t in tensors]))
    return tuple([t.data.ptr for t in tensors]), tuple([(t.shape, t.strides, t.dtype.str, t.device.id) for t in tensors])


def _key(addresses: tuple, parts: list, cu_seqlens, params) -> tuple | None:
    """(addresses, the rest of the call: `parts`, then cu_seqlens and the runtime values, as one part, which
    Attention._inputs keys what it found of them by); raises TypeError and the like for inputs that are not what
    they should be."""
    given = None
    if cu_seqlens is not None:
        mod = type(cu_seqlens).__module__
        if mod.startswith("torch") and cu_seqlens.device.type == "cpu":
            given = ("torch", cu_seqlens.dtype, cu_seqlens.numpy().tobytes())
        elif mod.startswith("torch"):
            given = ("torch", _Held(cu_seqlens), cu_seqlens.data_ptr(), cu_seqlens._version, cu_seqlens.device)
        elif isinstance(cu_seqlens, np.ndarray):
            given = ("numpy", cu_seqlens.dtype.str, cu_seqlens.tobytes())
        elif isinstance(cu_seqlens, (list, tuple)):
            given = ("list", frozen_values(cu_seqlens))  # (by type too: 300.0 is refused, 300 is not)
        else:
            return None
    parts.append((given, frozen_values(params) if params else None))
    rest = tuple(parts)
    hash(rest)  # (the addresses always hash)
    return addresses, rest


class _Held:
    """A part of a key that is equal to another only if both hold the same object, and keeps it alive (so
    that its id, the hash, is not reused while the key is)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other) -> bool:
        return type(other) is _Held and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


def _tensor_key(x) -> tuple:
    if type(x).__module__.startswith("torch"):
        return (x.data_ptr(), x.shape, x.stride(), x.dtype, x.device)
    return (x.data.ptr, x.shape, x.strides, x.dtype.str, x.device.id)


def _honour_torch_determinism(backward_name: str) -> None:
    """Under torch.use_deterministic_algorithms(True), refuse a backward pass that cannot give the same bits
    twice (or warn, in warn-only mode), as PyTorch's own operations do."""
    import torch

    if not torch.are_deterministic_algorithms_enabled():
        return
    message = (f"maskc's {backward_name!r} backward pass is not deterministic (dq's partial sums are added in a "
               "varying order), and torch.use_deterministic_algorithms(True) is set: load the mask with "
               "deterministic=True (or backward_kernels=\"hopper\") for a deterministic pass")
    if torch.is_deterministic_algorithms_warn_only_enabled():
        warnings.warn(message, stacklevel=4)  # (the caller of Attention.backward)
    else:
        raise RuntimeError(message)


def _pointer(x) -> int:
    return x.data_ptr() if type(x).__module__.startswith("torch") else x.data.ptr


def _empty_like(q, shape, dtype):
    """A new array on q's device and library: q's dtype, or float32 when `dtype` is given; `shape` None: q's
    shape and dtype, by empty_like (q's layout where q is contiguous; half the host time of an allocation by
    shape, dtype and device, H200)."""
    if type(q).__module__.startswith("torch"):
        import torch

        if shape is None:
            return torch.empty_like(q)
        return torch.empty(shape, dtype=q.dtype if dtype is None else torch.float32, device=q.device)
    import cupy

    with q.device:
        if shape is None:
            return cupy.empty_like(q)
        return cupy.empty(shape, dtype=q.dtype if dtype is None else cupy.float32)


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides, in elements, of an array of this shape."""
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= int(extent)
    return tuple(reversed(strides))


def _stream(t: _Tensor):
    """The caller's current stream as a CuPy stream (torch's current stream for torch tensors)."""
    return cupy_stream(current_stream_handle(t.obj), t.device)


@lru_cache(maxsize=None)
def _multiprocessors(device: int) -> int:
    import cupy

    return cupy.cuda.Device(device).attributes["MultiProcessorCount"]


def _outputs(tq: _Tensor, out, lse, lse_shape) -> tuple[_Tensor, _Tensor]:
    """The output buffers: the caller's (checked), or new ones like q (contiguous, of q's library, dtype and
    device, as the checks ask: those are not checked)."""
    to = _describe(_empty_like(tq.obj, tq.shape, None) if out is None else out, "out")
    tl = _describe(_empty_like(tq.obj, lse_shape, "float32") if lse is None else lse, "lse")
    if out is not None:
        if to.shape != tq.shape or to.dtype != tq.dtype or to.device != tq.device or to.library != tq.library:
            raise ValueError(f"out must be like q ({tq.library}, {tq.dtype}, {list(tq.shape)}), got "
                             f"{to.library}, {to.dtype}, {list(to.shape)}")
        if not rows_aligned(to.ptr, to.strides):  # (the kernels write O 16 bytes at a time, as they read q)
            raise ValueError("out's last dimension must be contiguous and its rows 16-byte aligned (data pointer and "
                             "strides multiples of 8 elements)")
        if _overlapping(to.shape, to.strides):
            raise ValueError(f"out's rows overlap in memory (strides {list(to.strides)} for shape {list(to.shape)}): "
                             "the kernel would write several of them to one place")
    if lse is not None:
        _check_lse(tl, tq, lse_shape)
    return to, tl


def _check_lse(tl: _Tensor, tq: _Tensor, lse_shape) -> None:
    expected = tuple(int(x) for x in lse_shape)
    if (tl.shape != expected or tl.dtype != "float32" or tl.strides != _contiguous_strides(expected)
            or tl.device != tq.device or tl.library != tq.library):
        raise ValueError(f"lse must be a contiguous float32 tensor of shape {list(expected)} on q's device")


def _problem(program, span: Span, message: str) -> ValueProblem:
    """A ValueError about runtime values, reported at `span` in the mask's source."""
    return value_problem(span, message).with_source(program.source)


def plain_values(params: dict) -> dict:
    """Runtime values given as torch tensors or CuPy arrays, as the Python values they hold (so that a tensor
    updated in place is read again, never cached by identity); a numpy array of no dimensions, as its number."""
    plain = {}
    for name, value in params.items():
        mod = type(value).__module__
        if mod.startswith("torch"):
            value = value.tolist()
        elif mod.startswith("cupy"):
            value = value.get().tolist()
        elif type(value) is np.ndarray and value.ndim == 0:
            value = value.item()
        plain[name] = value
    return plain


def _is_per_sequence(value, depth: int, sequences: int) -> bool:
    """A list one level deeper than the parameter's type gives one value per sequence. Only a list of empty lists
    can be read both ways (`[[], []]` for a table: one table of two empty rows, or an empty table per sequence);
    with one entry per sequence it is read per sequence. (A numpy array says its depth by its shape.)"""
    lowest, highest = _depth_bounds(value)
    if lowest != highest and lowest <= depth < highest:
        return isinstance(value, (list, tuple)) and len(value) == sequences
    return lowest > depth


def _depth_bounds(value) -> tuple[int, float]:
    """The nesting depths a runtime value can have: a number 0, an array its ndim, a list one more than its
    entries, where an empty list can be of any depth from 1. Lists are read down their first entries, and along
    all of them only where that meets an empty list (the depth of a first entry `[]` is the others' to say)."""
    if isinstance(value, np.ndarray):
        return value.ndim, value.ndim
    if not isinstance(value, (list, tuple)):
        return 0, 0
    if not value:
        return 1, math.inf
    lowest, highest = _depth_bounds(value[0])
    if lowest != highest:
        flat = _flat_lists_bounds(value)
        if flat is not None:
            lowest, highest = max(lowest, flat[0]), min(highest, flat[1])
            return 1 + lowest, 1 + highest
        for entry in value[1:]:  # (entries that disagree are left to the values' checks, which name them)
            low, high = _depth_bounds(entry)
            lowest, highest = max(lowest, low), min(highest, high)
    return 1 + lowest, 1 + highest


def _flat_lists_bounds(entries) -> tuple[int, float] | None:
    """The bounds _depth_bounds finds along `entries` where each is a list or tuple, empty (1, inf) or beginning
    with a number (1, 1): a per-sequence list of lists that begins with an empty one (a group of no responses)
    is read in a few passes, not a call per entry (0.5 ms for a thousand sequences, dev VM). None otherwise."""
    if not set(map(type, entries)) <= {list, tuple}:
        return None
    firsts = [entry[0] for entry in entries if entry]
    if any(issubclass(t, (np.ndarray, list, tuple)) for t in set(map(type, firsts))):
        return None
    return 1, 1 if firsts else math.inf


_per_plan_values: dict = {}


def _per_plan(what: str, plan_part, device: int, compute: Callable[[], object]):
    """`compute()`, made once per part of a plan (its descriptor, its tables), device and `what`: a checked call
    of runtime values seen before (every layer of a model after the first) finds it. Kept with the part, so
    that its id is not reused while cached."""
    key = (what, id(plan_part), device)
    hit = _per_plan_values.get(key)
    if hit is not None and hit[0] is plan_part:
        return hit[1]
    value = compute()
    if len(_per_plan_values) > 512:
        _per_plan_values.clear()
    _per_plan_values[key] = (plan_part, value)
    return value


_TABLE_ALIGN = 256  # bytes between the starts of two tables in their device buffer (the kernels read 16 at most)
_ZERO_BYTES = np.zeros(_TABLE_ALIGN, dtype=np.uint8)  # padding between tables (read-only)
_ZERO_BYTES.flags.writeable = False


@dataclass(frozen=True, eq=False)
class _DeviceTables:
    """A plan's tables on the device: one buffer (kept alive by whoever holds this), each table at its pointer."""

    buffer: object
    pointers: tuple[int, ...]  # in arrays_in_order()'s order


def _upload(tables, device: int, stream) -> _DeviceTables:
    """Device copies of the kernel tables, made once per (tables, device) and kept with them: one buffer and one
    copy for all of them (a copy through CuPy costs several us of host time, and a plan has 8 tables, its
    backward's 5 more)."""
    def copy() -> _DeviceTables:
        import cupy

        # The tables' bytes, each padded with zeros to the next _TABLE_ALIGN, in one concatenation.
        parts, offsets, end = [], [], 0
        for a in tables.arrays_in_order():
            pad = -end % _TABLE_ALIGN
            if pad:
                parts.append(_ZERO_BYTES[:pad])
            offsets.append(end + pad)
            parts.append(np.ascontiguousarray(a).reshape(-1).view(np.uint8))
            end += pad + a.nbytes
        host = np.concatenate(parts) if end else np.zeros(1, dtype=np.uint8)
        with cupy.cuda.Device(device), stream:
            buffer = cupy.asarray(host)
        return _DeviceTables(buffer, tuple(buffer.data.ptr + at for at in offsets))

    return _per_plan("uploaded", tables, device, copy)


def load(path, **options) -> Attention:
    """Compile a `.mask` file for the given options (head_dim, dtype, arch, const parameters) and return
    the attention callable. Const parameters are passed as keyword options too. Without `arch`, maskc
    picks the kernel family for the current GPU and this mask (`default_arch`)."""
    from maskc.front import read_file

    return _load(read_file(str(path)), options)


def loads(text: str, **options) -> Attention:
    """`load` for the text of a mask."""
    from maskc.front import read_program

    if not isinstance(text, str):
        raise ValueError(f"loads takes the text of a mask as a str, got {type(text).__name__}"
                         + (" (decode it first)" if isinstance(text, (bytes, bytearray)) else ""))

    return _load(read_program(text), options)


def _load(program, options: dict) -> Attention:
    from maskc.compiler import compile_program

    kernel_options, consts = split_options(options, program)
    return Attention(compile_program(program, kernel_options, consts))


KERNEL_OPTIONS = ("head_dim", "dtype", "arch", "key_tile", "kv_stages", "backward_kernels", "deterministic")


def split_options(options: dict, program=None) -> tuple:
    """`load`'s keywords: (KernelOptions, const values). Given the program, every other keyword must name one
    of its const parameters: a runtime parameter's value at load time would go unused (its values are given
    per call), so it is refused with a ValueError, as is a name the mask does not have."""
    from maskc.kernels import KernelOptions

    kernel = {k: v for k, v in options.items() if k in KERNEL_OPTIONS}
    consts = {k: v for k, v in options.items() if k not in KERNEL_OPTIONS}
    if program is not None:
        for name, value in consts.items():
            _check_load_keyword(program, name, value)
    if "arch" not in kernel:
        kernel["arch"] = default_arch(kernel.get("head_dim", 128))
    return KernelOptions(**kernel), consts


def _check_load_keyword(program, name: str, value) -> None:
    decl = program.param(name)
    if decl is not None and decl.const:
        return
    accepted = (f"load-time keywords are kernel options ({', '.join(KERNEL_OPTIONS)}) and const parameters "
                f"({', '.join(p.name for p in program.params if p.const) or f'{program.name} has none'})")
    if name == "n":
        raise _problem(program, decl.span if decl is not None else program.span,
                       f"'n' is the length of each sequence: every call takes it from the shapes of q, k and v "
                       f"(or cu_seqlens), never from load; {accepted}")
    if decl is not None:
        example = repr(value) if len(repr(value)) <= 40 else "..."  # a Python call: Python's spelling
        raise _problem(program, decl.span, f"'{name}' is a runtime parameter of mask {program.name}: its values are "
                       f"given per call, as in attn(q, k, v, {name}={example}), and changing them never recompiles; "
                       f"{accepted}")
    runtime = ", ".join(p.name for p in program.runtime_params) or "none"
    raise _problem(program, program.span, f"mask {program.name} has no parameter or option '{name}': {accepted}; "
                   f"its runtime parameters ({runtime}) are given per call")


def default_arch(head_dim: int = 128) -> str:
    """The kernel family for the current GPU: on Hopper (sm_90) the Hopper family for every head dim it has
    (grid masks included: since their tiles' slots are computed once per tile, its forward is as fast as the
    portable one there and its backward 1.6-1.8x faster; docs/hopper.md), elsewhere the portable family for
    the GPU's own architecture."""
    from maskc.kernels import SM90A

    arch = current_arch()
    if arch == "sm_90" and head_dim in SM90A.head_dims:
        return "sm_90a"
    return arch


def current_arch() -> str:
    """The architecture of the current GPU ('sm_90' on an H100/H200), or sm_90 when there is none."""
    try:
        import cupy

        return f"sm_{cupy.cuda.Device().compute_capability}"  # CuPy spells 9.0 as "90"
    except Exception:  # no CuPy or no GPU: compile for the most common target
        return "sm_90"
