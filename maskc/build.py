"""Build: CUDA source -> cubin with NVRTC, cached by content hash.

NVRTC (from the `nvidia-cuda-nvrtc` wheel, driven through `cuda.bindings.nvrtc`) compiles for any
architecture with no GPU present. We load cubins, never PTX: a newer NVRTC writes PTX that an older driver
may refuse, while its cubins load. The cache key is the sha256 of everything the output depends on. The
artifact is stored raw as `<key>.cubin` (or `.ptx`: the driver and `maskc compile` read the file as it is),
and beside it `<key>.meta`, a verified entry holding NVRTC's log and the artifact's sha256; a hit is an
artifact whose bytes match that sha256, anything else is built again (NVRTC gives the same bytes for the
same key, so concurrent builders agree; were it not to, an artifact and a record from two builders would
only cost a rebuild). See maskc.cache for the directory, atomic writes and the entries.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from maskc import __version__
from maskc.cache import atomic_write, cache_dir, read_entry, write_entry


class BuildError(RuntimeError):
    """NVRTC rejected generated code: an internal error (exit code 3), with the source dumped for a report."""

    def __init__(self, message: str, log: str, dumped: Path | None):
        self.log = log
        self.dumped = dumped
        where = f"; the generated source is in {dumped}" if dumped else ""
        super().__init__(f"{message}{where}\n{log}")


@lru_cache(maxsize=1)
def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # pragma: no cover - a broken install
        raise BuildError("cuda-bindings is not installed (pip install cuda-bindings nvidia-cuda-nvrtc)", str(exc), None) from None
    return nvrtc


def nvrtc_version() -> str:
    nvrtc = _nvrtc()
    err, major, minor = nvrtc.nvrtcVersion()
    _check(err, "nvrtcVersion")
    return f"{major}.{minor}"


def _check(err, what: str, log: str = "") -> None:
    if int(err) != 0:
        raise BuildError(f"NVRTC failed in {what} ({err})", log, None)


@dataclass(frozen=True)
class Artifact:
    path: Path
    kind: str  # "cubin" | "ptx"
    log: str


def compile_source(source: str, arch: str, name: str = "maskc.cu", emit: str = "cubin",
                   extra_options: tuple[str, ...] = ()) -> Artifact:
    """Compile `source` for `arch` ('sm_80', 'sm_90', 'sm_90a', ...); cached."""
    if emit not in ("cubin", "ptx"):
        raise ValueError(f"emit must be 'cubin' or 'ptx', got {emit!r}")
    nvrtc = _nvrtc()
    options = ("-std=c++17", f"--gpu-architecture={arch}", "--use_fast_math", "-lineinfo", *extra_options)
    key = hashlib.sha256(
        "\0".join([__version__, source, " ".join(options), emit, nvrtc_version()]).encode()
    ).hexdigest()
    target = cache_dir() / key[:2] / f"{key}.{emit}"
    record = target.with_suffix(".meta")
    log = _cached_log(target, record)
    if log is not None:
        return Artifact(target, emit, log)

    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check(err, "nvrtcCreateProgram")
    try:
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
        # NVRTC writes into the buffers it is given: bytearrays, never bytes (`b" " * 1` is CPython's one
        # shared b" ", and an empty log would turn every b" " of the process into b"\x00").
        err, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log_buf = bytearray(size)
        nvrtc.nvrtcGetProgramLog(prog, log_buf)
        log = log_buf.decode(errors="replace").rstrip("\x00").strip()
        if int(result) != 0:
            dumped = cache_dir() / "failed" / f"{key}.cu"
            atomic_write(dumped, source.encode())
            raise BuildError(f"NVRTC could not compile the generated kernel for {arch} (a maskc bug)", log, dumped)
        if emit == "cubin":
            err, size = nvrtc.nvrtcGetCUBINSize(prog)
            _check(err, "nvrtcGetCUBINSize")
            data = bytearray(size)
            _check(nvrtc.nvrtcGetCUBIN(prog, data)[0], "nvrtcGetCUBIN")
        else:
            err, size = nvrtc.nvrtcGetPTXSize(prog)
            _check(err, "nvrtcGetPTXSize")
            data = bytearray(size)
            _check(nvrtc.nvrtcGetPTX(prog, data)[0], "nvrtcGetPTX")
            data = data.rstrip(b"\x00")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    # The artifact first, then the record that vouches for it: until the record is there, no reader trusts it.
    atomic_write(target, data)
    write_entry(record, json.dumps({"sha256": hashlib.sha256(data).hexdigest(), "log": log}).encode())
    return Artifact(target, emit, log)


def _cached_log(target: Path, record: Path) -> str | None:
    """NVRTC's log for a cached artifact whose bytes match the sha256 in its record; None (build it again)
    when either file is missing, unreadable or damaged."""
    entry = read_entry(record)
    if entry is None:
        return None
    recorded = json.loads(entry)
    try:
        data = target.read_bytes()
    except OSError:
        return None
    return recorded["log"] if hashlib.sha256(data).hexdigest() == recorded["sha256"] else None
