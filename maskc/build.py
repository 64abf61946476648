"""Build: CUDA source -> cubin with NVRTC, cached by content hash.

NVRTC (from the `nvidia-cuda-nvrtc` wheel, driven through `cuda.bindings.nvrtc`) compiles for any
architecture with no GPU present. We load cubins, never PTX: a newer NVRTC writes PTX that an older driver
may refuse, while its cubins load. The cache key is the sha256 of everything the output depends on; writes
are atomic (a temporary file, then `os.replace`), so concurrent builds never see half a file.
`MASKC_CACHE_DIR` overrides the location.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from maskc import __version__


class BuildError(RuntimeError):
    """NVRTC rejected generated code: an internal error (exit code 3), with the source dumped for a report."""

    def __init__(self, message: str, log: str, dumped: Path | None):
        self.log = log
        self.dumped = dumped
        where = f"; the generated source is in {dumped}" if dumped else ""
        super().__init__(f"{message}{where}\n{log}")


def cache_dir() -> Path:
    root = os.environ.get("MASKC_CACHE_DIR")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "maskc"


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


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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
    log_path = target.with_suffix(".log")
    if target.exists():
        return Artifact(target, emit, log_path.read_text() if log_path.exists() else "")

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
            _atomic_write(dumped, source.encode())
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
    _atomic_write(log_path, log.encode())
    _atomic_write(target, data)
    return Artifact(target, emit, log)
