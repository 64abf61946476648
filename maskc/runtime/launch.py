"""A kernel launch prepared once and repeated cheaply.

The first call of a signature (tensors, runtime values, options) checks everything, plans and packs the
arguments; a repeated call rewrites only the pointers to its new outputs (and the backward's scratch) and
launches: no checks, no planning, no host synchronisation (it can be captured in a CUDA graph). The packed arguments are kept as ctypes
values with the array of their addresses that `cuLaunchKernel` takes, and the launch goes straight to the
driver: 37 us of host time per call against 51 us through CuPy's per-argument conversion (H200,
2026-12-03, docs/benchmarks.md). `MASKC_DIRECT_LAUNCH=0` launches through CuPy instead.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from maskc.kernels import abi

_CTYPES = {"ptr": ctypes.c_uint64, "i64": ctypes.c_int64, "i32": ctypes.c_int32, "f32": ctypes.c_float}
_TENSOR_MAP = ctypes.c_uint64 * 16  # a CUtensorMap: 128 bytes


def _ctype_value(arg: abi.Arg, value) -> ctypes._SimpleCData | ctypes.Array:
    """An argument as the C type the kernel reads: a tensor map from its 128 bytes, a number from a Python or
    numpy number (ctypes would wrap an i32 silently: it is checked)."""
    if arg.kind == "tensor_map":
        return _TENSOR_MAP.from_buffer_copy(value)
    if arg.kind == "i32" and not -2**31 <= value < 2**31:
        raise OverflowError(f"kernel argument {arg.name} = {value} does not fit in 32 bits")
    return _CTYPES[arg.kind](value)


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
        self._cupy_args = None  # packed when first needed
        self._args, self.device = args, device
        abi.check_names(args, values)
        self._values = [_ctype_value(a, values[a.name]) for a in args]
        names = [a.name for a in args]
        self._slot_index = tuple(names.index(s) for s in slots)
        # The slots' values side by side in one array, which a launch sets in one assignment.
        self._slots = (ctypes.c_uint64 * len(slots))(*(self._values[i].value for i in self._slot_index))
        for j, i in enumerate(self._slot_index):
            self._values[i] = ctypes.c_uint64.from_buffer(self._slots, 8 * j)
        self._addresses = (ctypes.c_void_p * len(self._values))(*(ctypes.addressof(v) for v in self._values))
        self._params = ctypes.addressof(self._addresses)  # what cuLaunchKernel takes
        self._counter_index = names.index("work_counter") if "work_counter" in names else None
        self._counter = None if self._counter_index is None else self._values[self._counter_index]
        self._lock = threading.Lock()  # the slots are shared by every call of this launch
        self._keep = keep  # device tables the arguments point to: alive as long as this launch

    def launch(self, stream_handle: int, *pointers: int) -> None:
        """Run the kernels on the stream, the slots' arguments first set to `pointers` (one for each)."""
        with self._lock:
            self._slots[:] = pointers
            if self._counter is not None:
                self._counter.value = work_counter(self.device.id, stream_handle)
            with self.device:
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

    def _launch_with_cupy(self, stream_handle: int) -> None:
        if self._cupy_args is None:  # the arguments as CuPy takes them, from what the kernels read now
            self._cupy_args = list(abi.pack(self._args, {a.name: _python_value(a, v)
                                                         for a, v in zip(self._args, self._values)}))
        args = self._cupy_args
        for index in self._slot_index:
            args[index] = np.uint64(self._values[index].value)
        if self._counter is not None:
            args[self._counter_index] = np.uint64(self._counter.value)
        stream = cupy_stream(stream_handle, self.device.id)
        for k in self.kernels:
            k.cupy_kernel((k.grid,), (k.threads,), tuple(args), shared_mem=k.shared, stream=stream)


def _python_value(arg: abi.Arg, value: ctypes._SimpleCData | ctypes.Array) -> object:
    return bytes(value) if arg.kind == "tensor_map" else value.value


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
