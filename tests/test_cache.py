"""The cache under stress (maskc.cache): eight processes building one mask at once in one shared directory,
damaged entries (a cubin or its record, the parser tables, compiled templates) rebuilt rather than loaded,
and an unwritable cache directory replaced by a temporary one with a warning."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from maskc.cache import CacheDirWarning, read_entry
from maskc.compiler import compile_file
from maskc.kernels import KernelOptions

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CAUSAL = EXAMPLES / "causal.mask"
ARCH = "sm_80"  # one architecture, the forward kernel only: NVRTC takes about a second
ELF = b"\x7fELF"

# Compile causal.mask and build its forward cubin; print the cubin's path and sha256. With `wait`, import
# everything, say "ready" and wait for the go file, so that the processes' compiles overlap.
BUILD = """
import hashlib, os, sys, time
from maskc.compiler import compile_file
from maskc.kernels import KernelOptions
mask, arch, go = sys.argv[1:4]
if go:
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.005)
artifact = compile_file(mask, KernelOptions(arch=arch)).build(direction="fwd")
data = artifact.path.read_bytes()
assert data[:4] == b"\\x7fELF", data[:16]
print(artifact.path, hashlib.sha256(data).hexdigest(), flush=True)
"""

# Compile causal.mask to CUDA source (parser and templates, no NVRTC); print the source's sha256.
RENDER = """
import hashlib, sys
from maskc.compiler import compile_file
print(hashlib.sha256(compile_file(sys.argv[1]).source.encode()).hexdigest())
"""


def _python(script: str, *args: str, cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, MASKC_CACHE_DIR=str(cache))
    return subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                          timeout=120)


def _assert_every_entry_intact(cache: Path) -> None:
    """No temporary file is left, every entry matches its sha256, and so does every artifact its record."""
    files = [p for p in cache.rglob("*") if p.is_file()]
    assert files and not [p for p in files if p.name.endswith(".tmp")]
    for path in files:
        if path.suffix in (".cubin", ".ptx"):
            record = json.loads(read_entry(path.with_suffix(".meta")))
            assert hashlib.sha256(path.read_bytes()).hexdigest() == record["sha256"], path
        else:
            assert read_entry(path) is not None, path


def test_eight_processes_build_one_mask_at_once_in_one_cache(tmp_path):
    cache, go = tmp_path / "cache", tmp_path / "go"
    env = dict(os.environ, MASKC_CACHE_DIR=str(cache))
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", BUILD, str(CAUSAL), ARCH, str(go)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(8)]
    try:
        for p in procs:
            assert p.stdout.readline() == "ready\n", p.stderr.read()
        go.touch()
        results = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
    printed = {out.strip() for out, _ in results}
    assert len(printed) == 1, printed  # one path, one digest
    path, digest = printed.pop().split()
    assert Path(path).is_relative_to(cache) and hashlib.sha256(Path(path).read_bytes()).hexdigest() == digest
    _assert_every_entry_intact(cache)
    assert time.perf_counter() - start < 60


@pytest.fixture(scope="module")
def fresh_cubin(tmp_path_factory) -> bytes:
    """The forward cubin of causal.mask, built in a cache of its own."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MASKC_CACHE_DIR", str(tmp_path_factory.mktemp("fresh")))
        return compile_file(CAUSAL, KernelOptions(arch=ARCH)).build(direction="fwd").path.read_bytes()


def _flip(path: Path, at: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    i = int(len(data) * at)
    data[i : i + 8] = bytes(b ^ 0xFF for b in data[i : i + 8])
    path.write_bytes(bytes(data))


def _truncate(path: Path, size: int | None = None) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 if size is None else size])


DAMAGE = {
    "cubin bytes flipped": lambda cubin: _flip(cubin),
    "cubin ELF header flipped": lambda cubin: _flip(cubin, 0.0),
    "cubin truncated": lambda cubin: _truncate(cubin),
    "cubin emptied": lambda cubin: _truncate(cubin, 0),
    "cubin removed": lambda cubin: cubin.unlink(),
    "record flipped": lambda cubin: _flip(cubin.with_suffix(".meta")),
    "record truncated": lambda cubin: _truncate(cubin.with_suffix(".meta")),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_cubin_is_rebuilt_not_loaded(damage, fresh_cubin, tmp_path, monkeypatch):
    monkeypatch.setenv("MASKC_CACHE_DIR", str(tmp_path))
    compiled = compile_file(CAUSAL, KernelOptions(arch=ARCH))
    cubin = compiled.build(direction="fwd").path
    assert cubin.read_bytes() == fresh_cubin
    DAMAGE[damage](cubin)
    again = compiled.build(direction="fwd")
    assert again.path == cubin  # rebuilt in place
    assert cubin.read_bytes()[:4] == ELF and cubin.read_bytes() == fresh_cubin
    _assert_every_entry_intact(tmp_path)


def test_a_damaged_ptx_is_rebuilt_not_loaded(tmp_path, monkeypatch):
    monkeypatch.setenv("MASKC_CACHE_DIR", str(tmp_path))
    compiled = compile_file(CAUSAL, KernelOptions(arch=ARCH))
    ptx = compiled.build("ptx", "fwd").path
    text = ptx.read_text()
    ptx.write_text(text.replace(".target sm_80", ".target sm_90"))
    assert compiled.build("ptx", "fwd").path.read_text() == text


@pytest.fixture
def unwritable(tmp_path):
    """Cache directories that cannot be used: read-only (not for root, whom permissions do not stop), a
    path through a regular file, and a regular file."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    dirs = [blocker / "cache", blocker]
    if os.geteuid() != 0:
        read_only = tmp_path / "read-only"
        read_only.mkdir()
        read_only.chmod(0o500)
        dirs.append(read_only)
    yield dirs
    if os.geteuid() != 0:
        read_only.chmod(0o700)  # so that pytest can remove it


def test_an_unwritable_cache_directory_is_replaced_by_a_temporary_one(unwritable, fresh_cubin, monkeypatch):
    for configured in unwritable:
        monkeypatch.setenv("MASKC_CACHE_DIR", str(configured))
        with pytest.warns(CacheDirWarning) as warned:
            compiled = compile_file(CAUSAL, KernelOptions(arch=ARCH))
            cubin = compiled.build(direction="fwd").path
            assert compiled.build(direction="fwd").path == cubin  # cached in the temporary directory
        assert len(warned) == 1  # once per directory and process
        message = str(warned[0].message)
        assert str(configured) in message and str(cubin.parents[1]) in message
        assert cubin.is_relative_to(tempfile.gettempdir()) and not cubin.is_relative_to(configured)
        assert cubin.read_bytes() == fresh_cubin


def test_a_process_with_an_unwritable_cache_warns_once_and_leaves_nothing_behind(unwritable):
    """Parser, templates and NVRTC all use the temporary directory; it goes when the process exits."""
    for configured in unwritable:
        run = _python(BUILD, str(CAUSAL), ARCH, "", cache=configured)
        assert run.returncode == 0, run.stderr
        assert run.stderr.count("CacheDirWarning") == 1 and str(configured) in run.stderr, run.stderr
        path = Path(run.stdout.split()[0])
        assert path.is_relative_to(tempfile.gettempdir()) and not path.exists()


def _replace(old: bytes, new: bytes):
    """A same-length edit: the file still parses as what it was (a pickle, marshalled code), with other contents."""
    def edit(path: Path) -> None:
        path.write_bytes(path.read_bytes().replace(old, new))
    return edit


FRONT_AND_TEMPLATE_DAMAGE = {
    # A keyword of the grammar renamed inside the parser tables; text of the kernel changed in the templates.
    "contents edited": (_replace(b"segments", b"segmentz"), _replace(b"__global__", b"__device__")),
    "bytes flipped": (_flip, _flip),
    "truncated": (_truncate, _truncate),
    "cut after the first bytes": (lambda p: _truncate(p, 20), lambda p: _truncate(p, 20)),
    "emptied": (lambda p: _truncate(p, 0), lambda p: _truncate(p, 0)),
}


@pytest.mark.parametrize("damage", FRONT_AND_TEMPLATE_DAMAGE)
def test_damaged_parser_tables_and_compiled_templates_are_rebuilt(damage, tmp_path):
    reference = _python(RENDER, str(CAUSAL), cache=tmp_path / "reference")
    assert reference.returncode == 0, reference.stderr
    cache = tmp_path / "cache"
    assert _python(RENDER, str(CAUSAL), cache=cache).stdout == reference.stdout
    front, templates = (sorted((cache / kind).iterdir()) for kind in ("front", "templates"))
    assert front and templates
    before = {path: path.read_bytes() for path in front + templates}
    damage_front, damage_template = FRONT_AND_TEMPLATE_DAMAGE[damage]
    for path in front:
        damage_front(path)
    for path in templates:
        damage_template(path)
    for files in (front, templates):
        assert any(path.read_bytes() != before[path] for path in files)
    again = _python(RENDER, str(CAUSAL), cache=cache)
    assert again.returncode == 0, again.stderr
    assert again.stdout == reference.stdout
    _assert_every_entry_intact(cache)
