"""A stand-in for CuPy and the CUDA driver, for testing the runtime's launches without a GPU.

Arrays are shapes, strides and made-up device addresses (nothing is stored in them; what is copied to the device
is kept by address, see `device_bytes`); kernels are names; launches are recorded with the bytes of every
argument as the driver would read them, and device contexts with the device they make current (`Recorded`).
Tensor maps encode to bytes that name the tensor's address, so a map of another tensor differs.
`install(monkeypatch, ...)` puts it in place of `cupy`, the driver's launch and the TMA encoder, and returns the
record.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import sys
import types
from dataclasses import dataclass, field

import numpy as np

_addresses = itertools.count(1 << 32, 1 << 20)  # 1 MiB apart: every fake allocation 16-byte aligned
STREAM = 7  # the current stream's handle
_SIZES = {"ptr": 8, "i64": 8, "i32": 4, "f32": 4, "tensor_map": 128}  # bytes the driver reads of each kind


class Device:
    """CuPy's device context: makes its device current (counted) where another one is, and restores it after."""

    record: Recorded | None = None  # (set by install)

    def __init__(self, id: int = 0):
        self.id = id
        self.attributes = {"MultiProcessorCount": 132}

    def __enter__(self):
        if self.record is not None:
            self.record.device_contexts += 1
        if self.record is not None and self.record.current_device != self.id:
            self._previous, self.record.current_device = self.record.current_device, self.id
            self.record.device_switches += 1
        return self

    def __exit__(self, *exc):
        if self.record is not None and hasattr(self, "_previous"):
            self.record.current_device = self._previous
            del self._previous
        return False


class ndarray:
    """A device array: what maskc reads of one (shape, strides in bytes, dtype, device, data.ptr)."""

    __module__ = "cupy"  # what maskc.runtime dispatches on

    def __init__(self, shape, dtype=np.float16, strides=None, ptr=None):
        self.shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.itemsize = self.dtype.itemsize
        contiguous = tuple(math.prod(self.shape[i + 1:]) * self.itemsize for i in range(len(self.shape)))
        self.strides = contiguous if strides is None else tuple(strides)
        self.data = types.SimpleNamespace(ptr=next(_addresses) if ptr is None else ptr)
        self.device = Device(0)


@dataclass
class Launch:
    kernel: str
    grid: int
    threads: int
    shared: int
    args: list[bytes]  # each argument's bytes, in signature order


@dataclass
class Recorded:
    launches: list[Launch] = field(default_factory=list)
    functions: dict[int, str] = field(default_factory=dict)  # driver handle -> kernel name
    device_memory: dict[int, bytes] = field(default_factory=dict)  # what was copied to the device, by address
    current_device: int = 0  # what cudaGetDevice says
    device_contexts: int = 0  # times a Device context was entered
    device_switches: int = 0  # ... and made its device current


def device_bytes(record: Recorded, address: int, size: int) -> bytes:
    """`size` bytes at a device address inside what was copied there."""
    for start, data in record.device_memory.items():
        if start <= address and address + size <= start + len(data):
            return data[address - start:address - start + size]
    raise AssertionError(f"nothing copied to the device holds {size} bytes at {address:#x}")


class _RawKernel:
    def __init__(self, name: str, record: Recorded):
        self.name, self.ptr, self.record = name, 1000 + len(record.functions), record
        record.functions[self.ptr] = name
        self.max_dynamic_shared_size_bytes = 0

    def __call__(self, grid, block, args, shared_mem=0, stream=None):  # CuPy's launch: numpy scalars
        assert stream.ptr == STREAM
        self.record.launches.append(Launch(self.name, grid[0], block[0], shared_mem, [a.tobytes() for a in args]))


def install(monkeypatch, signatures: dict[str, tuple]) -> Recorded:
    """CuPy, the driver's cuLaunchKernel and the TMA encoder replaced by fakes, with the runtime's caches of
    CuPy objects emptied (call `clear_caches` after the test too). `signatures`: kernel name -> its arguments
    (maskc.kernels.abi.Arg), which say how many bytes the driver reads of each."""
    from cuda.bindings import driver

    from maskc import runtime
    from maskc.runtime import launch, tensor_maps

    record = Recorded()
    monkeypatch.setattr(Device, "record", record)
    cupy = types.ModuleType("cupy")
    cupy.ndarray = ndarray
    cupy.float32 = np.float32
    cupy.empty = lambda shape, dtype=np.float16: ndarray(shape, dtype)
    cupy.empty_like = lambda a: ndarray(a.shape, a.dtype)
    cupy.asarray = lambda a: _copied(record, a)
    cupy.zeros = lambda shape, dtype=np.float16: ndarray(shape, dtype)
    cupy.int32 = np.int32
    cupy.cuda = types.SimpleNamespace(Device=Device, ExternalStream=lambda handle, device: _Stream(handle),
                                      get_current_stream=lambda device=0: _Stream(STREAM),
                                      runtime=types.SimpleNamespace(getDevice=lambda: record.current_device))
    cupy.RawModule = lambda path: types.SimpleNamespace(get_function=lambda name: _RawKernel(name, record))
    monkeypatch.setitem(sys.modules, "cupy", cupy)

    def cu_launch_kernel(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        # The argument sizes come from the kernel's signature, as the driver reads them from the cubin.
        addresses = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        name = record.functions[int(function)]
        assert stream == launch._stream(STREAM) and (gy, gz, by, bz, extra) == (1, 1, 1, 1, 0)
        assert record.current_device == 0, "a kernel of device 0 launched while another device was current"
        record.launches.append(Launch(name, gx, bx, shared, [ctypes.string_at(addresses[i], _SIZES[a.kind])
                                                             for i, a in enumerate(signatures[name])]))
        return (driver.CUresult.CUDA_SUCCESS,)

    monkeypatch.setattr(driver, "cuLaunchKernel", cu_launch_kernel)
    monkeypatch.setattr(tensor_maps, "_encode", lambda ptr, dtype, dims, strides, box: (
        ptr.to_bytes(8, "little") + bytes(str((dims, strides, box)), "ascii").ljust(120, b" ")[:120]))
    clear_caches()
    monkeypatch.setattr(runtime, "_per_plan_values", {})
    monkeypatch.setattr(launch, "_work_counters", launch._WorkCounters())
    return record


def _copied(record: Recorded, host) -> ndarray:
    """A host array copied to the (fake) device: its bytes kept at its address, for `device_bytes`."""
    host = np.ascontiguousarray(host)
    array = ndarray(host.shape, host.dtype)
    record.device_memory[array.data.ptr] = host.tobytes()
    return array


class _Stream:
    def __init__(self, ptr: int):
        self.ptr = ptr

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self):
        pass


def clear_caches() -> None:
    from maskc import runtime
    from maskc.runtime import launch

    for cache in (runtime._module, runtime._function, runtime._multiprocessors, launch.cupy_stream, launch.current_stream_of,
                  launch._current_device_function):
        cache.cache_clear()
