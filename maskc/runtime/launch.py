"""A kernel launch prepared once and repeated cheaply.

The first call of a signature (tensors, runtime values, options) checks everything, plans and packs the
arguments; a repeated call rewrites only the pointers to its new outputs (and the backward's scratch) and
launches: no checks, no planning, no host synchronisation (it can be captured in a CUDA graph). The arguments
are packed once into one buffer, with the array of their addresses that `cuLaunchKernel` takes, and the launch
goes straight to the driver: 37 us of host time per call against 51 us through CuPy's per-argument conversion
(H200, 2026-12-03, docs/benchmarks.md). `MASKC_DIRECT_LAUNCH=0` launches through CuPy instead.
"""

from __future__ import annotations

import array
import copy
import ctypes
import functools
import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple

from maskc.kernels import abi
from maskc.memo import per_object

# How each kind of argument is stored for the driver: struct code, size, alignment (a CUtensorMap is 64-byte
# aligned in CUDA's headers; the driver copies each argument from the address it is given).
_STORAGE = {"ptr": ("Q", 8, 8), "i64": ("q", 8, 8), "i32": ("i", 4, 4), "f32": ("f", 4, 4),
            "tensor_map": ("128s", 128, 64)}
_BUFFER_ALIGN = 64


class _Layout(NamedTuple):
    """Where a kernel's arguments go in one buffer, and what a launch's packing reads of them."""

    packer: struct.Struct  # packs every argument in one call (checking each value's range as it does)
    offsets: tuple[int, ...]  # of each argument in the buffer (at an offset aligned to its kind)
    names: tuple[str, ...]  # the arguments' names, in order
    name_set: frozenset[str]
    slot_index: tuple[int, ...]  # the argument each slot is
    counter: int | None  # the index of the scheduler's counter (the Hopper forward's work_counter), or None


@per_object  # (by the list's identity: a family's argument lists are constants, and hashing one costs ~7 us)
def _layout(args: tuple[abi.Arg, ...], slots: tuple[str, ...]) -> _Layout:
    """The layout of a kernel's arguments in one buffer, with `slots` the arguments a launch rewrites: found once
    per argument list, since a plan of new runtime values packs them again."""
    fmt, offsets, at = ["<"], [], 0
    for arg in args:
        code, size, align = _STORAGE[arg.kind]
        pad = -at % align
        fmt.append(f"{pad}x{code}" if pad else code)
        offsets.append(at + pad)
        at += pad + size
    names = tuple(a.name for a in args)
    return _Layout(struct.Struct("".join(fmt)), tuple(offsets), names, frozenset(names),
                   tuple(names.index(s) for s in slots),
                   names.index("work_counter") if "work_counter" in names else None)


class Kernel(NamedTuple):
    """One kernel of a prepared launch and its launch shape."""

    function_handle: int  # the driver's CUfunction
    grid: int
    threads: int
    shared: int
    cupy_kernel: object = None  # the same kernel as CuPy's RawKernel: the fallback launch


class PreparedLaunch:
    """Kernels run one after another on a stream over one argument list (the forward: one kernel; the backward
    pass: its two or three), and `slots`, the pointer arguments a repeated call may rewrite: its outputs and
    scratch buffers. `launch` runs them."""

    def __init__(self, kernels: tuple[Kernel, ...], device, args: tuple[abi.Arg, ...], values: dict[str, object],
                 slots: tuple[str, ...], keep: object):
        """`values`: every argument by name (a tensor map as its 128 bytes)."""
        from cuda.bindings import driver

        self._success = driver.CUresult.CUDA_SUCCESS
        self.kernels = kernels
        # cuLaunchKernel with each kernel's function and shape bound: a launch adds the stream and the arguments.
        self._launches = tuple(functools.partial(driver.cuLaunchKernel, driver.CUfunction(k.function_handle), k.grid,
                                                 1, 1, k.threads, 1, 1, k.shared) for k in kernels)
        # CuPy's launch of the same packed arguments: with MASKC_DIRECT_LAUNCH=0, and the fallback when this
        # cuda-bindings refuses the direct call (its Python API differs between versions).
        self._can_use_cupy = all(k.cupy_kernel is not None for k in kernels)
        self._use_cupy = self._can_use_cupy and os.environ.get("MASKC_DIRECT_LAUNCH") == "0"
        self._args, self.device = args, device
        self._device_id = getattr(device, "id", None)
        self._current_device = _current_device_function()
        layout = _layout(args, slots)
        if len(values) != len(args) or values.keys() != layout.name_set:  # (the quick test of check_names')
            abi.check_names(args, values)
        self._keep = keep  # device tables the arguments point to: alive as long as this launch
        self._pack(values, slots)

    def _pack(self, values: dict[str, object], slots: tuple[str, ...]) -> None:
        """Every argument in one buffer, packed by one struct call; the slots in an array of their own, which a
        launch sets in one assignment; the driver gets each argument's address."""
        args = self._args
        self._values, self._slot_names = values, slots  # (for with_arguments)
        layout = _layout(args, slots)
        self._buffer = (ctypes.c_uint8 * (layout.packer.size + _BUFFER_ALIGN))()
        base = ctypes.addressof(self._buffer)
        self._shift = -base % _BUFFER_ALIGN
        try:
            layout.packer.pack_into(self._buffer, self._shift, *map(values.__getitem__, layout.names))
        except struct.error as exc:  # a value out of its C type's range: an internal error, never wrapped
            raise OverflowError(f"kernel arguments do not fit their C types: {exc}") from None
        self._slot_index = layout.slot_index
        self._slots = (ctypes.c_uint64 * len(slots))(*map(values.__getitem__, slots))
        start = base + self._shift
        addresses = array.array("Q", [start + offset for offset in layout.offsets])
        for j, i in enumerate(self._slot_index):
            addresses[i] = ctypes.addressof(self._slots) + 8 * j
        self._addresses = (ctypes.c_uint64 * len(args)).from_buffer_copy(addresses)
        self._params = ctypes.addressof(self._addresses)  # what cuLaunchKernel takes
        self._counter = None  # the scheduler's counter, set by every launch (the Hopper forward's)
        if layout.counter is not None:
            self._counter = ctypes.c_uint64.from_buffer(self._buffer, self._shift + layout.offsets[layout.counter])
        self._lock = threading.Lock()  # the slots are shared by every call of this launch

    def with_arguments(self, values: dict[str, object]) -> "PreparedLaunch":
        """The same kernels and slots with the arguments `values` (by name) replaced: another layer's tensors.
        (Arguments named already: no checks; a buffer, slots and lock of its own.)"""
        new = copy.copy(self)
        new._pack(self._values | values, self._slot_names)
        return new

    def launch(self, stream_handle: int, *pointers: int) -> None:
        """Run the kernels on the stream, the slots' arguments first set to `pointers` (one for each)."""
        with self._lock:
            self._slots[:] = pointers
            if self._counter is not None:
                self._counter.value = work_counter(self._device_id, stream_handle)
            # CuPy's device context makes the device current only where another one is, at ~1 us a launch (H200);
            # asking for the current device costs a tenth of that, and the common case needs nothing more.
            if self._current_device is not None and self._current_device() == self._device_id:
                return self._launch_here(stream_handle)
            with self.device:
                return self._launch_here(stream_handle)

    def _launch_here(self, stream_handle: int) -> None:
        """The kernels, on the current device (this launch's)."""
        if self._use_cupy:
            return self._launch_with_cupy(stream_handle)
        stream, params = _stream(stream_handle), self._params
        for launch in self._launches:
            try:
                (err,) = launch(stream, params, 0)
            except (TypeError, ValueError, AttributeError):
                if not self._can_use_cupy or launch is not self._launches[0]:
                    raise
                self._use_cupy = True
                return self._launch_with_cupy(stream_handle)
            if err != self._success:
                raise RuntimeError(f"maskc: the kernel launch failed ({err.name})")

    def argument_bytes(self) -> list[bytes]:
        """Each argument's bytes, as the driver reads them now, in signature order."""
        return [ctypes.string_at(address, _STORAGE[a.kind][1]) for a, address in zip(self._args, self._addresses)]

    def _launch_with_cupy(self, stream_handle: int) -> None:
        """The same arguments through CuPy, which takes numpy scalars of their C types."""
        values = {a.name: struct.unpack("<" + _STORAGE[a.kind][0], data)[0]
                  for a, data in zip(self._args, self.argument_bytes())}
        stream = cupy_stream(stream_handle, self.device.id)
        args = abi.pack(self._args, values)
        for k in self.kernels:
            k.cupy_kernel((k.grid,), (k.threads,), args, shared_mem=k.shared, stream=stream)


class LaunchCache:
    """Prepared launches by call key (`maskc.runtime._call_key`: the tensors' addresses, and the rest of the
    call), kept for the calls of the `plans` most recent plans, `launches` of them at most in all; and by the
    rest of the call alone (`like`), the latest launch of it, which a call with other tensors re-points.

    A model calls one mask from each of its layers, each layer with tensors of its own: L layers are L keys of
    one plan, called in turn. A cache bounded by keys alone drops every one of them before its next call once L
    passes the bound (16 once: a 17-layer model's every call was a checked one, ~10x the host time). What a
    launch holds on the device is its plan's tables, so the bound that matters is on plans: a training step's
    new runtime values make a new plan, and the launches of the plans before it go with them."""

    def __init__(self, plans: int = 8, launches: int = 1024):
        self._max_plans, self._max_launches = plans, launches
        self._launches: dict = {}  # key -> launch, oldest first (a call looks here first: one dict look-up)
        self._plan_of: dict = {}  # key -> id of its plan
        self._plans: OrderedDict = OrderedDict()  # id(plan) -> (plan, its keys), least recently added to first
        self._latest: dict = {}  # key[1] -> the latest key with it
        self.get = self._launches.get  # get(key): the launch or None (the dict's own method: no Python frame)

    def like(self, key) -> tuple[object, object] | None:
        """(launch, plan) of the latest call kept with the same signature as `key` (key[1]) but other tensors, or
        None."""
        other = self._latest.get(key[1])
        return None if other is None else (self._launches[other], self._plans[self._plan_of[other]][0])

    def put(self, key, launch, plan) -> None:
        """Keep `launch` for `key`; `plan` is what it was prepared from (its descriptor), held so that its id
        names it while cached."""
        self._forget(key)
        entry = self._plans.get(id(plan))
        if entry is None or entry[0] is not plan:
            entry = self._plans[id(plan)] = (plan, set())
        self._plans.move_to_end(id(plan))
        entry[1].add(key)
        self._launches[key] = launch
        self._plan_of[key] = id(plan)
        self._latest[key[1]] = key
        while len(self._plans) > self._max_plans:
            _, (_, keys) = self._plans.popitem(last=False)
            for old in keys:
                del self._launches[old], self._plan_of[old]
                if self._latest.get(old[1]) == old:
                    del self._latest[old[1]]
        while len(self._launches) > self._max_launches:
            self._forget(next(iter(self._launches)))

    def _forget(self, key) -> None:
        plan = self._plan_of.pop(key, None)
        if plan is None:
            return
        del self._launches[key]
        if self._latest.get(key[1]) == key:
            del self._latest[key[1]]
        keys = self._plans[plan][1]
        keys.discard(key)
        if not keys:
            del self._plans[plan]

    def __len__(self) -> int:
        return len(self._launches)

    def items(self):
        return self._launches.items()

    def values(self):
        return self._launches.values()

    def clear(self) -> None:
        self._launches.clear()
        self._plan_of.clear()
        self._plans.clear()
        self._latest.clear()


@lru_cache(maxsize=1)
def _current_device_function() -> Callable[[], int] | None:
    """CuPy's look-up of the current CUDA device (cudaGetDevice), or None without CuPy."""
    try:
        import cupy

        return cupy.cuda.runtime.getDevice
    except (ImportError, AttributeError):
        return None


class _WorkCounters:
    """The Hopper forward's scheduler counters (`abi.SCHEDULER`): one int[2] per stream, from one zeroed pool
    per device. Every launch leaves its counter zero, so launches on one stream (which run one after another)
    share it; launches on different streams may overlap and get different ones. Slots are handed out when a
    stream is first seen, without allocating, so a first call on a stream that is capturing a CUDA graph is
    fine; after SLOTS streams they are reused, oldest first."""

    SLOTS = 4096

    def __init__(self):
        self._pools: dict[int, object] = {}
        self._slots: dict[int, dict[int, int]] = {}  # per device: stream handle -> slot, oldest first
        self._lock = threading.Lock()

    def address(self, device: int, stream_handle: int) -> int:
        with self._lock:
            slots = self._slots.setdefault(device, {})
            slot = slots.get(stream_handle)
            if slot is None:
                slot = slots.pop(next(iter(slots))) if len(slots) >= self.SLOTS else len(slots)
                slots[stream_handle] = slot
            pool = self._pools.get(device)
            if pool is None:
                pool = self._pools[device] = self._zeroed_pool(device)
        return pool.data.ptr + 8 * slot

    def _zeroed_pool(self, device: int):
        import cupy

        with cupy.cuda.Device(device):
            pool = cupy.zeros(2 * self.SLOTS, dtype=cupy.int32)
            cupy.cuda.get_current_stream().synchronize()  # zero before any stream's launch reads it
        return pool


_work_counters = _WorkCounters()


def work_counter(device: int, stream_handle: int) -> int:
    """The device address of the scheduler counter for launches on this stream."""
    return _work_counters.address(device, stream_handle)


@lru_cache(maxsize=256)
def cupy_stream(handle: int, device: int):
    """A stream handle as CuPy's stream object (made once per handle)."""
    import cupy

    return cupy.cuda.ExternalStream(handle, device)


@lru_cache(maxsize=256)
def _stream(handle: int):
    from cuda.bindings import driver

    return driver.CUstream(handle)


def current_stream_handle(x) -> int:
    """The caller's current stream for tensor `x`: torch's current stream for torch tensors, CuPy's for CuPy
    arrays."""
    if type(x).__module__.startswith("torch"):
        return current_stream_of("torch", x.device.index or 0)()
    return current_stream_of("cupy", x.device.id)()


@lru_cache(maxsize=64)
def current_stream_of(library: str, device: int):
    """A function of no arguments that returns the current stream of `library` on `device`: what a prepared
    launch calls at every launch (torch's through the fast accessor Triton uses, when present)."""
    if library == "torch":
        import torch

        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return functools.partial(raw, device)
        return lambda: torch.cuda.current_stream(device).cuda_stream
    import cupy

    return lambda: cupy.cuda.get_current_stream(device).ptr
