"""The row-interval planner in C++ on the host, where a C++ compiler is found: the same descriptors as
`rows.plan_ranges` with `planner._descriptor`, and the same transposes as `by_key.by_key`, byte for byte, in a
fifth of the time or less (new runtime values at every call: packed documents, reward-model groups).

numpy's cost here is the number of its calls, a hundred or more of a few microseconds each on arrays of a few
hundred values; a query tile at a time in C++ costs microseconds in all (cpp/tiles.h, whose classes the GPU's
form of the planner shares: docs/experiments/gpu_planner). The library is built once per machine with the C++
compiler (`$CXX`, else `c++`, else `g++`) into the cache directory, in a thread of its own that `maskc.load`
starts (`start`): until it is ready, and wherever no compiler builds it, the numpy planner plans (the same
results, slower). `MASKC_NATIVE=0` keeps to numpy.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np

from maskc.cache import atomic_write, cache_dir, read_entry, write_entry
from maskc.plan.layout import entry_pointers, joined

SOURCES = ("tiles.h", "order.h", "host.cpp")
_SOURCES_DIR = Path(__file__).resolve().parent / "cpp"

_lock = threading.Lock()
_state: dict = {}  # "thread": the build, "library": the loaded library or None once the build failed


def start() -> None:
    """Builds (or finds in the cache) and loads the library in a thread of its own, once per process: an
    `Attention` starts it, so that the plans of its calls with new runtime values find it ready."""
    if os.environ.get("MASKC_NATIVE", "1") == "0":
        return
    with _lock:
        if "thread" not in _state:
            _state["thread"] = threading.Thread(target=_build_and_load, name="maskc-native", daemon=True)
            _state["thread"].start()


def library(wait: bool = False) -> ctypes.CDLL | None:
    """The host planner's library once loaded, else None (not started, still being built, not buildable, or
    MASKC_NATIVE=0); `wait` starts it where it is not and waits for it."""
    if os.environ.get("MASKC_NATIVE", "1") == "0":
        return None
    if wait:
        start()
        thread = _state.get("thread")
        if thread is not None:
            thread.join()
    return _state.get("library")


def _build_and_load() -> None:
    try:
        lib = _load(_built())
    except Exception:  # no compiler, a failed build, a library that does not load: numpy plans
        lib = None
    with _lock:
        _state["library"] = lib


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++"):
        if name and shutil.which(name):
            return name
    return None


def _built() -> Path:
    """The library in the cache, built when missing or damaged (its sha256 is kept beside it, as for cubins)."""
    compiler = _compiler()
    if compiler is None:
        raise FileNotFoundError("no C++ compiler")
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    flags = ["-O2", "-std=c++17", "-shared", "-fPIC"]
    key = hashlib.sha256("\0".join([compiler, version, *flags,
                                    *((_SOURCES_DIR / name).read_text() for name in SOURCES)]).encode()).hexdigest()
    target = cache_dir() / "native" / f"planner-{key[:32]}.so"
    record = target.with_suffix(".meta")
    entry = read_entry(record)
    try:
        if entry is not None and hashlib.sha256(target.read_bytes()).hexdigest() == json.loads(entry)["sha256"]:
            return target
    except OSError:
        pass
    # Built beside its place in the cache (a process that exits mid-build leaves its file there, not in /tmp).
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, out = tempfile.mkstemp(dir=target.parent, prefix=".build.", suffix=".so")
    os.close(fd)
    try:
        subprocess.run([compiler, *flags, "-I", str(_SOURCES_DIR), str(_SOURCES_DIR / "host.cpp"), "-o", out],
                       check=True, capture_output=True, timeout=300)
        data = Path(out).read_bytes()
    finally:
        os.unlink(out)
    atomic_write(target, data)
    write_entry(record, json.dumps({"sha256": hashlib.sha256(data).hexdigest()}).encode())
    return target


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    lib.maskc_descriptor.restype = ctypes.c_void_p
    lib.maskc_descriptor_tiles.restype = None
    lib.maskc_key_descriptor.restype = ctypes.c_int
    return lib


def _ptr(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)


def _int64(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def descriptor(lib: ctypes.CDLL, consts: np.ndarray, batch, bits: np.ndarray, bq: int, bk: int, check_size):
    """(work_seq, work_qtile, row_ptr, k_tile, kind, full tiles) of the batch (planner._Batch) whose regions'
    constants per concrete segment are `consts` (rows.segment_constants); None where memory ran out.
    `check_size(work items, tiles)` may refuse the descriptor (raise) before its tiles are written."""
    ns = _int64(batch.bounds[:, -1])
    sequences = len(ns)
    entry_ptr = _int64(entry_pointers(batch.layouts))
    items = int(((ns + (bq - 1)) // bq).sum())
    work_seq, work_qtile = np.empty(items, dtype=np.int32), np.empty(items, dtype=np.int32)
    row_ptr = np.empty(items + 1, dtype=np.int32)
    tiles, full = ctypes.c_int64(), ctypes.c_int64()
    consts, starts = _int64(consts), joined(batch.layouts, "starts", np.int64)  # (in each sequence)
    lengths, bits = _int64(batch.lengths), np.ascontiguousarray(bits, dtype=np.uint32)
    handle = lib.maskc_descriptor(_ptr(consts), _ptr(starts), _ptr(lengths), _ptr(entry_ptr), _ptr(ns), _ptr(bits),
                                  ctypes.c_int64(len(lengths)), ctypes.c_int(len(bits)), ctypes.c_int64(bq),
                                  ctypes.c_int64(bk), ctypes.c_int64(sequences), _ptr(work_seq), _ptr(work_qtile),
                                  _ptr(row_ptr), ctypes.byref(tiles), ctypes.byref(full))
    if not handle:
        return None
    try:
        check_size(items, tiles.value)
    except BaseException:
        lib.maskc_descriptor_tiles(ctypes.c_void_p(handle), None, None)  # (frees them)
        raise
    # One allocation for both, as planner._descriptor makes them.
    both = np.empty(2 * tiles.value, dtype=np.int32)
    k_tile, kind = both[:tiles.value], both[tiles.value:].view(np.uint32)
    lib.maskc_descriptor_tiles(ctypes.c_void_p(handle), _ptr(k_tile), _ptr(kind))
    return work_seq, work_qtile, row_ptr, k_tile, kind, full.value


def key_descriptor(lib: ctypes.CDLL, desc, stagger: bool) -> tuple | None:
    """(work_seq, work_ktile, col_ptr, q_tile, kind, q_item) of by_key.by_key(desc, stagger); None where memory ran
    out."""
    qtile_base, ktile_base = desc.blocks.tile_base("q"), desc.blocks.tile_base("k")
    keys, tiles, items = int(ktile_base[-1]), len(desc.k_tile), len(desc.work_seq)
    if ktile_base[-1] >= 2**31 or tiles >= 2**31 or desc.kind.dtype != np.uint32:
        return None  # (the key descriptor's int32 fields: by_key widens them where it must)
    work_seq, work_ktile = np.empty(keys, dtype=np.int32), np.empty(keys, dtype=np.int32)
    col_ptr = np.empty(keys + 1, dtype=np.int32)
    q_tile, q_item = np.empty(tiles, dtype=np.int32), np.empty(tiles, dtype=np.int32)
    kind = np.empty(tiles, dtype=np.uint32)
    arrays = [np.ascontiguousarray(a, dtype=np.int32) for a in (desc.work_seq, desc.work_qtile, desc.row_ptr,
                                                                desc.k_tile)]
    done = lib.maskc_key_descriptor(*map(_ptr, arrays), _ptr(np.ascontiguousarray(desc.kind)), ctypes.c_int64(items),
                                    _ptr(_int64(qtile_base)), _ptr(_int64(ktile_base)),
                                    ctypes.c_int64(len(qtile_base) - 1), _ptr(work_seq), _ptr(work_ktile),
                                    _ptr(col_ptr), _ptr(q_tile), _ptr(kind), _ptr(q_item),
                                    ctypes.c_int32(desc.config.block_k if stagger else 0),
                                    ctypes.c_int32(desc.config.block_q))
    return (work_seq, work_ktile, col_ptr, q_tile, kind, q_item) if done == 0 else None
