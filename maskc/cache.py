"""The on-disk cache: NVRTC's cubins and PTX (maskc.build), the parser's LALR tables (maskc.front.syntax) and
Jinja's compiled templates (maskc.codegen), under one directory.

Where: `MASKC_CACHE_DIR`, else `$XDG_CACHE_HOME/maskc`, else `~/.cache/maskc`. A directory that cannot be
created or written (read-only, or a path through a regular file) costs speed, never a compile: the process
warns once (`CacheDirWarning`) and caches in a temporary directory of its own, removed when it exits.

Writes are atomic (`atomic_write`): the bytes go to a temporary file with a name no other process or thread
can hold, in the target's directory, are fsynced, and `os.replace` gives them the target's name. A reader
sees the old file or the new one, never part of one. Processes building the same entry at once each write
it whole, and the last replace wins.

Nothing is used before it is checked, so a damaged file (truncated, bits flipped, whatever did it) is
rebuilt, never loaded. An entry (`write_entry`) is its payload
behind a one-line header holding the payload's sha256; `read_entry` returns the payload only when the two
agree. A cubin cannot carry a header (the driver and `maskc compile` take the file as it is), so maskc.build
keeps it raw, beside an entry that records its sha256. A damaged file is not deleted first: the rebuild
replaces it, because a delete could remove the good copy another process has just put in its place.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import tempfile
import threading
import warnings
from functools import cache, lru_cache
from pathlib import Path

_HEADER = b"maskc-cache sha256 "  # then 64 hex digits and a newline, then the payload
_DIGITS = 64


class CacheDirWarning(UserWarning):
    """The cache directory cannot be written; this process caches in a temporary directory instead."""


_choosing = threading.Lock()  # one check, and one warning, per directory even when threads build at once


def cache_dir() -> Path:
    """The directory to cache in: the configured one when it can be written, else this process's own."""
    with _choosing:
        return _usable(_configured())


def _configured() -> Path:
    root = os.environ.get("MASKC_CACHE_DIR")  # read at every call: a process may point it elsewhere
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "maskc"


@cache
def _usable(root: Path) -> Path:
    try:
        root.mkdir(parents=True, exist_ok=True)
        # Write a file rather than read the permissions: root writes into 0o500 directories, and a
        # read-only file system refuses everyone.
        fd, probe = tempfile.mkstemp(dir=root, prefix=".probe.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
        return root
    except OSError as exc:
        fallback = _process_dir()
        warnings.warn(f"maskc cannot write its cache directory {root} ({exc.strerror or exc}); this process "
                      f"caches in {fallback} instead", CacheDirWarning)
        return fallback


@lru_cache(maxsize=1)
def _process_dir() -> Path:
    path = Path(tempfile.mkdtemp(prefix="maskc-cache-"))
    owner = os.getpid()

    def remove() -> None:
        if os.getpid() == owner:  # a forked child exiting must not take its parent's directory with it
            shutil.rmtree(path, ignore_errors=True)

    atexit.register(remove)
    return path


def atomic_write(path: Path, data: bytes) -> None:
    """Put `data` at `path` all at once (see the module's docstring)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Same directory: os.replace cannot cross file systems. mkstemp: a fresh name, created exclusively.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # the bytes reach the disk before the name does: a crash leaves no short file
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_entry(path: Path, payload: bytes) -> None:
    """Store `payload` at `path` behind a header holding its sha256, atomically."""
    atomic_write(path, _HEADER + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)


def read_entry(path: Path) -> bytes | None:
    """The payload stored at `path` by `write_entry`; None when the file is missing, unreadable or damaged."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    start = len(_HEADER) + _DIGITS + 1
    digest, payload = data[len(_HEADER) : start - 1], data[start:]
    intact = (data.startswith(_HEADER) and data[start - 1 : start] == b"\n"
              and hashlib.sha256(payload).hexdigest().encode() == digest)
    return payload if intact else None
