"""Where a repeated call's host time goes (a development probe; bench/harness.py --first-call reports the per-call
figure itself). Causal attention, N = 1024, 16 heads, head dim 128, bf16, on the GPU:

    python bench/percall.py pieces        # each piece of the fast path timed alone, and the whole call
    python bench/percall.py alternatives  # other ways to do the same pieces (allocation, keys, launch)
    python bench/percall.py harness       # the harness's measure: host time of each call, packed, no_grad
    python bench/percall.py backward      # attn.backward repeated and checked, and an autograd step, per pass

Timings are medians of `outer` loops of `inner` calls (us per call), with a synchronize before each loop. The
host side of these machines moves by several us between runs: compare builds alternately, in one call.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import maskc
from maskc import runtime
from maskc.runtime import launch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # (PYTHONSAFEPATH leaves the script's folder out)
from timing import us_per_call  # noqa: E402

CAUSAL = Path(__file__).resolve().parents[1] / "examples" / "causal.mask"


def per_call(fn, inner: int = 100, outer: int = 40) -> float:
    return us_per_call(fn, inner, outer, before_each_loop=torch.cuda.synchronize)


def report(rows) -> None:
    for name, fn in rows:
        fn()
        torch.cuda.synchronize()
        print(f"{name:48s} {per_call(fn):7.2f} us", flush=True)


def pieces() -> None:
    attn = maskc.load(CAUSAL, head_dim=128, dtype="bf16")
    q, k, v = (torch.randn(1, 1024, 16, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    attn(q, k, v)
    torch.cuda.synchronize()
    ((key, prepared_call),) = attn._launches.items()
    prepared = prepared_call.prepared
    out, lse = torch.empty_like(q), torch.empty(1, 16, 1024, device="cuda", dtype=torch.float32)
    stream = launch.current_stream_handle(q)
    report([
        ("attn(q, k, v)", lambda: attn(q, k, v)),
        ("attn(q, k, v, return_lse=True)", lambda: attn(q, k, v, return_lse=True)),
        ("_through_torch_op", lambda: runtime._through_torch_op(q, k, v)),
        ("_call_key", lambda: runtime._call_key(q, k, v, None, None, None, None, {})),
        ("the prepared launches' look-up", lambda: attn._launches.get(key)),
        ("O like q (_empty_like, shape None)", lambda: runtime._empty_like(q, None, None)),
        ("LSE (the launch's new_lse)", lambda: prepared_call.new_lse(q)),
        ("current_stream_handle", lambda: launch.current_stream_handle(q)),
        ("the launch's current_stream", prepared_call.current_stream),
        ("work_counter", lambda: launch.work_counter(0, stream)),
        ("PreparedLaunch.launch", lambda: prepared.launch(stream, out.data_ptr(), lse.data_ptr())),
    ])


def alternatives() -> None:
    from cuda.bindings import driver

    attn = maskc.load(CAUSAL, head_dim=128, dtype="bf16")
    q, k, v = (torch.randn(1, 1024, 16, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    attn(q, k, v)
    torch.cuda.synchronize()
    prepared = next(iter(attn._launches.values())).prepared
    stream = launch.current_stream_handle(q)
    addresses = ctypes.addressof(prepared._addresses)
    cu_launch = ctypes.CDLL("libcuda.so.1").cuLaunchKernel  # no argtypes: the arguments are ctypes values already
    cu_launch.restype = ctypes.c_int
    one = ctypes.c_uint(1)
    kernel = prepared.kernels[0]
    function = driver.CUfunction(kernel.function_handle)
    prebuilt = (ctypes.c_void_p(kernel.function_handle), ctypes.c_uint(kernel.grid), one, one,
                ctypes.c_uint(kernel.threads), one, one, ctypes.c_uint(kernel.shared), ctypes.c_void_p(stream),
                ctypes.c_void_p(addresses), ctypes.c_void_p(0))
    shape, lse_shape = tuple(q.shape), (1, 16, 1024)
    report([
        ("torch.empty(shape, dtype=, device=)", lambda: torch.empty(shape, dtype=q.dtype, device=q.device)),
        ("q.new_empty(shape)", lambda: q.new_empty(shape)),
        ("torch.empty_like(q)", lambda: torch.empty_like(q)),
        ("torch.empty(lse_shape, float32, device=)", lambda: torch.empty(lse_shape, dtype=torch.float32,
                                                                          device=q.device)),
        ("tensor key with .device", lambda: (q.data_ptr(), q.shape, q.stride(), q.dtype, q.device)),
        ("tensor key with .get_device()", lambda: (q.data_ptr(), q.shape, q.stride(), q.dtype, q.get_device())),
        ("torch.compiler.is_compiling()", torch.compiler.is_compiling),
        ("cuda-bindings cuLaunchKernel", lambda: driver.cuLaunchKernel(
            function, kernel.grid, 1, 1, kernel.threads, 1, 1, kernel.shared, launch._stream(stream), addresses, 0)),
        ("ctypes cuLaunchKernel, prebuilt arguments", lambda: cu_launch(*prebuilt)),
        ("with the launch's cupy Device", lambda: _enter(prepared.device)),
        ("torch.cuda.current_device()", torch.cuda.current_device),
        ("a threading.Lock, held and released", lambda: _enter(prepared._lock)),
        ("plain_values({})", lambda: runtime.plain_values({})),
    ])


def _enter(context) -> None:
    with context:
        pass


def harness_style(rounds: int = 5, calls: int = 200) -> None:
    """As bench/harness.py's call_overhead: packed inputs, a CPU cu_seqlens, under no_grad; the host time of
    each call (median) and a loop of `calls` with a synchronize only at its ends; then the host time of a call
    that finds the GPU idle, and SDPA flash's two host times, for the same question about it."""
    attn = maskc.load(CAUSAL, head_dim=128, dtype="bf16")
    q, k, v = (torch.randn(1024, 16, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    cu = torch.tensor([0, 1024], dtype=torch.int32)
    qs, ks, vs = (x.unsqueeze(0).transpose(1, 2) for x in (q, k, v))

    def call():
        return attn(q, k, v, cu_seqlens=cu)

    def sdpa():  # (flash chosen once, outside: entering sdpa_kernel costs tens of us a call)
        return torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True)

    with torch.no_grad(), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        for _ in range(rounds):
            host, loop = queued_host_us(call, calls)
            sdpa_host, _ = queued_host_us(sdpa, calls)  # SDPA flash in the same state of the GPU's queue
            print(f"host {host:6.1f} us  loop {loop:6.1f} us  "
                  f"host with an idle GPU {idle_host_us(call, calls):6.1f} us  "
                  f"SDPA flash: host {sdpa_host:6.1f} us, with an idle GPU {idle_host_us(sdpa, calls):6.1f} us",
                  flush=True)


def queued_host_us(fn, calls: int) -> tuple[float, float]:
    """After 10 calls to warm up, a loop of `calls` with a synchronize only at its ends: the host time of each
    call (median, us; the launches queue up on the GPU meanwhile) and the loop's time per call (us)."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    host = []
    start = time.perf_counter()
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        host.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return 1e6 * statistics.median(host), 1e6 * (time.perf_counter() - start) / calls


def idle_host_us(fn, calls: int) -> float:
    """The host time of a call that finds the GPU idle and its queue empty (a synchronize before each): what the
    call itself costs, with no wait for room in a full launch queue."""
    host = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        host.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return 1e6 * statistics.median(host)


def backward() -> None:
    """The backward's host time per call (a repeated call launches what the first prepared; a checked one finds
    the plan and its tables cached, but checks, packs and loads again), and a whole autograd step of a repeated
    call (forward through the custom op, then backward), for the default pass and the deterministic one."""
    for kernels in ("hopper_fused", "hopper"):
        attn = maskc.load(CAUSAL, head_dim=128, dtype="bf16", backward_kernels=kernels)
        q, k, v, d_out = (torch.randn(1, 1024, 16, 128, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        out, lse = attn(q, k, v, return_lse=True)
        leaf = q.clone().requires_grad_(True)

        def checked():
            attn._backward_launches.clear()
            attn.backward(q, k, v, out, lse, d_out)

        def step():
            attn(leaf, k, v).backward(d_out)

        print(f"-- {kernels}")
        report([("attn.backward, repeated", lambda: attn.backward(q, k, v, out, lse, d_out)),
                ("attn.backward, checked (plan cached)", checked),
                ("autograd step: attn(leaf, k, v).backward(d_out)", step)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("pieces", "alternatives", "harness", "backward"))
    {"pieces": pieces, "alternatives": alternatives, "harness": harness_style,
     "backward": backward}[ap.parse_args().what]()


if __name__ == "__main__":
    main()
