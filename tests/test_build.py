"""The build (maskc.build): every example compiled by NVRTC to a cubin for sm_80 and sm_90a (no GPU needed),
the content-addressed cache, MASKC_CACHE_DIR, and a source NVRTC rejects reported as a BuildError naming the
dumped .cu. Each example compiles once per architecture, two at a time (NVRTC releases the GIL)."""

from __future__ import annotations

import multiprocessing
import os
import re
import subprocess
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sass_tools import sass_tools
from small_configs import SMALL

from maskc import build
from maskc.build import BuildError, compile_source
from maskc.compiler import compile_file, compile_text
from maskc.kernels import KernelOptions

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ARCHS = ("sm_80", "sm_90a")  # one per kernel family: the portable kernels and the Hopper ones
ELF = b"\x7fELF"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("maskc-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MASKC_CACHE_DIR", str(root))
        yield root


@pytest.fixture(scope="module")
def cubins(cache):
    """(example, arch) -> cubin path, every example compiled once per architecture."""
    jobs = {(name, arch): compile_file(EXAMPLES / f"{name}.mask", KernelOptions(arch=arch), SMALL[name][0])
            for name in sorted(SMALL) for arch in ARCHS}
    with ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 1))) as pool:
        paths = dict(zip(jobs, pool.map(lambda c: c.build().path, jobs.values())))
    return paths


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_example_compiles_to_a_cubin(name, arch, cubins, cache):
    path = cubins[(name, arch)]
    assert path.suffix == ".cubin" and path.is_relative_to(cache)
    data = path.read_bytes()
    assert data[:4] == ELF and len(data) > 1000


def test_architectures_get_different_cubins(cubins):
    assert cubins[("causal", "sm_80")] != cubins[("causal", "sm_90a")]
    assert cubins[("causal", "sm_80")].read_bytes() != cubins[("causal", "sm_90a")].read_bytes()


def test_a_second_compile_hits_the_cache(cubins, cache):
    c = compile_file(EXAMPLES / "hstu.mask", KernelOptions(arch="sm_80"))
    first = cubins[("hstu", "sm_80")]
    before = first.stat().st_mtime_ns
    start = time.perf_counter()
    again = compile_source(c.source, "sm_80", name="other-name.cu")  # the name is not part of the key
    assert time.perf_counter() - start < 0.2
    assert again.path == first and again.path.stat().st_mtime_ns == before
    assert again.kind == "cubin"
    # The cache is keyed by content: another source (one byte more) is another file.
    other = compile_source(c.source + "\n", "sm_80")
    assert other.path != first and other.path.read_bytes()[:4] == ELF


def test_the_cache_directory_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MASKC_CACHE_DIR", str(tmp_path / "mine"))
    assert build.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("MASKC_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert build.cache_dir() == tmp_path / "xdg" / "maskc"


def test_ptx_on_request(cache):
    c = compile_text("mask t(n: int = 8)\nsegments:\n    S = n\nrules:\n    S -> S   causal\n")
    art = compile_source(c.source, "sm_80", emit="ptx")
    text = art.path.read_text()
    assert art.kind == "ptx" and art.path.is_relative_to(cache) and ".target sm_80" in text and "\x00" not in text
    with pytest.raises(ValueError, match="emit"):
        compile_source(c.source, "sm_80", emit="fatbin")


def test_a_source_nvrtc_rejects_is_a_build_error_naming_the_dumped_source(tmp_path, monkeypatch):
    monkeypatch.setenv("MASKC_CACHE_DIR", str(tmp_path))
    garbage = "this is not CUDA { at all\n"
    with pytest.raises(BuildError) as info:
        compile_source(garbage, "sm_80", name="broken.cu")
    err = info.value
    assert err.dumped is not None and err.dumped.suffix == ".cu" and err.dumped.is_relative_to(tmp_path)
    assert err.dumped.read_text() == garbage
    assert str(err.dumped) in str(err) and "maskc bug" in str(err)
    assert err.log and "error" in err.log
    # Nothing was cached: no cubin, no log, and a second try fails the same way.
    assert not list(tmp_path.rglob("*.cubin"))
    with pytest.raises(BuildError):
        compile_source(garbage, "sm_80")


def test_a_build_leaves_python_bytes_alone(tmp_path, monkeypatch):
    """A regression: NVRTC wrote its (empty) log into `b" " * 1`, CPython's one shared b" ", after which
    every b" " of the process was b"\\x00" (print's separators, for one)."""
    monkeypatch.setenv("MASKC_CACHE_DIR", str(tmp_path))
    compile_source("__global__ void k() {}\n", "sm_80")
    assert " ".encode()[0] == 32  # the byte's value: b" " == bytes([32]) compares the shared object with itself


def test_list_reads_in_arithmetic_compile(cache):
    """A regression (the generated kernel called ambiguous overloads on 64-bit list reads)."""
    c = compile_text("mask t(w: int = 2, L: [int] = [])\nsegments:\n    S = n\nrules:\n"
                     "    S -> S   where 0 <= L[q] % (-5) < w or min(L[k], 3) == max(L[q], -1)\n",
                     KernelOptions(arch="sm_80"))
    assert c.cubin.read_bytes()[:4] == ELF


def test_a_new_process_reuses_the_parser_tables_and_compiled_templates(tmp_path):
    """The LALR tables and the compiled templates are kept in the cache directory, so that a new process
    does not rebuild them (most of its first compile); an unwritable directory only turns that off."""
    import sys

    script = ("import sys; from maskc.compiler import compile_file; from maskc.kernels import KernelOptions;"
              f"compile_file({str(EXAMPLES / 'causal.mask')!r}, KernelOptions(arch='sm_90a'))")
    env = dict(os.environ, MASKC_CACHE_DIR=str(tmp_path / "cache"))
    for _ in range(2):
        subprocess.run([sys.executable, "-c", script], env=env, check=True)
    assert [p.stat().st_size > 1000 for p in (tmp_path / "cache" / "front").iterdir()] == [True]
    assert any((tmp_path / "cache" / "templates").iterdir())
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    subprocess.run([sys.executable, "-c", script], env=dict(os.environ, MASKC_CACHE_DIR=str(blocked)), check=True)


@pytest.mark.parametrize("name", ["causal", "document", "clear_text", "tree", "video3d"])
def test_the_hopper_backward_kernels_compile(name, cache):
    """The Hopper dK/dV kernel (an option of the sm_90a family) builds for 1D, grid and tree masks."""
    c = compile_file(EXAMPLES / f"{name}.mask", KernelOptions(arch="sm_90a", backward_kernels="hopper"), SMALL[name][0])
    assert c.backward_cubin.read_bytes()[:4] == ELF


WGMMA_PIPELINE_NOTES = re.compile(r"\(C751\d\)[^\n]*")  # ptxas: wgmma serialised, or waits injected into it


@pytest.mark.parametrize("name", sorted(SMALL))
def test_ptxas_keeps_the_hopper_kernels_wgmma_pipelines(name, cubins):
    """ptxas neither serialises the wgmma of an sm_90a kernel (forward, default backward) nor injects waits into
    it. Its notes C7510-C7517 mark a kernel that compiles and is correct but runs its matrix products one at a
    time: a wgmma issued in a branch, or too few registers, does that (it happened once, see docs/hopper.md)."""
    c = compile_file(EXAMPLES / f"{name}.mask", KernelOptions(arch="sm_90a"), SMALL[name][0])
    assert WGMMA_PIPELINE_NOTES.findall(c.build().log) == []


@pytest.mark.parametrize(("name", "head_dim"), [("causal", 128), ("document", 64)])
def test_the_hopper_forward_runs_its_softmax_under_its_own_p_v(name, head_dim, cache):
    """In the sm_90a forward's loop, after the wait for S (`WARPGROUP.DEPBAR.LE gsb0, 0x1`: P V still in flight)
    come the tile's exponentials, and only then the wait for P V (`... 0x0`). ptxas is free to hoist that wait
    above them -- it did, and the softmax then ran after P V instead of under it (docs/hopper.md, v4): a kernel
    as correct as before and ~5% slower, which only the SASS shows."""
    tools = sass_tools()
    if tools is None:
        pytest.skip("no cuobjdump and nvdisasm (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    cuobjdump, env = tools
    c = compile_file(EXAMPLES / f"{name}.mask", KernelOptions(arch="sm_90a", head_dim=head_dim), SMALL[name][0])
    run = subprocess.run([cuobjdump, "-sass", "-fun", c.name, str(c.build("cubin", "fwd").path)],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    sass = run.stdout
    ops = re.findall(r"(WARPGROUP\.DEPBAR\.LE gsb0, 0x[01]|MUFU\.EX2)", sass)
    exponentials = c.options.block_k // 2  # a thread's share of a tile
    overlapped = []  # per wait for S with P V in flight: the exponentials before the wait for P V
    for i, op in enumerate(ops):
        if op.endswith("0x1"):
            following = ops[i + 1:]
            end = next((j for j, o in enumerate(following) if o.endswith("0x0")), len(following))
            overlapped.append(following[:end].count("MUFU.EX2"))
    assert overlapped and min(overlapped) >= exponentials, overlapped


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_the_hopper_kernels_copy_o_dk_and_dv_out_16_bytes_a_store(direction, cache):
    """The sm_90a forward stages O, and the fused dK/dV kernel dK and dV, in shared memory so that a warp stores whole
    rows 16 bytes a thread. NVVM once compiled those 16-byte copies into four 4-byte stores (`STG.E` at +0x4, +0x8,
    +0xc), correct and a quarter as wide (docs/training.md, thirtieth session): only the SASS shows it."""
    tools = sass_tools()
    if tools is None:
        pytest.skip("no cuobjdump and nvdisasm (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    cuobjdump, env = tools
    c = compile_file(EXAMPLES / "document.mask", KernelOptions(arch="sm_90a"), SMALL["document"][0])
    name = c.name if direction == "fwd" else next(n for n in c.backward_names if "dkdv" in n)
    run = subprocess.run([cuobjdump, "-sass", "-fun", name, str(c.build("cubin", direction).path)],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    stores = re.findall(r"STG\.E(\.128)? [^;]*?(\+0x[0-9a-f]+)?\]", run.stdout)
    assert sum(width == ".128" for width, _ in stores) >= 2, stores  # (O's copy, or dK's and dV's, however unrolled)
    assert not [offset for width, offset in stores if width == "" and offset in ("+0x4", "+0x8", "+0xc")], stores


def test_backward_kernels_built_ahead_are_the_ones_a_backward_gets(tmp_path, monkeypatch):
    monkeypatch.setenv("MASKC_CACHE_DIR", str(tmp_path))
    c = compile_file(EXAMPLES / "causal.mask", KernelOptions(arch="sm_90a"))
    c.build_backward_ahead()
    pid, started = c._backward_build
    assert pid == os.getpid()
    c.build_backward_ahead()  # once started, again is nothing
    assert c._backward_build[1] is started
    path = c.backward_cubin
    assert started.done() and path == started.result().path and path.read_bytes()[:4] == ELF
    assert path == compile_file(EXAMPLES / "causal.mask", KernelOptions(arch="sm_90a")).build("cubin", "bwd").path


def test_a_backward_built_ahead_that_fails_raises_where_the_backward_asks(tmp_path, monkeypatch):
    monkeypatch.setenv("MASKC_CACHE_DIR", str(tmp_path))
    c = compile_file(EXAMPLES / "causal.mask", KernelOptions(arch="sm_90a"))

    def broken(emit="cubin", direction=None):
        raise build.BuildError("NVRTC refused it", "log", None)

    monkeypatch.setattr(c, "build", broken)
    c.build_backward_ahead()
    with pytest.raises(build.BuildError, match="NVRTC refused it"):
        c.backward_cubin



def test_a_forked_child_builds_the_backward_itself(tmp_path, monkeypatch):
    """A build started ahead and still running when the process forks never finishes in the child (it has no
    thread for it): the child's backward builds its own instead of waiting forever."""
    monkeypatch.setenv("MASKC_CACHE_DIR", str(tmp_path))
    c = compile_file(EXAMPLES / "causal.mask", KernelOptions(arch="sm_90a"))
    real, release = c.build, threading.Event()

    def held(emit="cubin", direction=None):
        release.wait(60)
        return real(emit, direction)

    monkeypatch.setattr(c, "build", held)
    c.build_backward_ahead()
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()

    def child():
        c.build = real
        results.put(str(c.backward_cubin))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # (forking a process with threads, Python 3.12)
        process = ctx.Process(target=child)
        process.start()
    try:
        path = results.get(timeout=60)
    finally:
        release.set()
        process.join(60)
    assert Path(path).read_bytes()[:4] == ELF and path == str(c.backward_cubin)
