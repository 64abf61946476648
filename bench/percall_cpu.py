"""A repeated call's Python glue, measured without a GPU: `attn(q, k, v)` and `attn.backward(...)` on CPU tensors
through the real fast paths (`_call_key`, the prepared launches' look-up, `_Launch.run` or `_BackwardLaunch.run`,
`PreparedLaunch.launch` with its lock, slots and scheduler counter), with the three things that need a GPU faked:
the driver's launch, CuPy's device context and the stream handle. On the H200 those add ~7 us a kernel
(bench/percall.py: cuLaunchKernel 5.7-6.6, the device context 1.05, the stream 0.5) to what this measures; the
backward launches three. It also checks the fast paths' control flow (outputs, pointers).

Needs torch (any build; no GPU is used) besides maskc's own dependencies:

    python bench/percall_cpu.py
"""

from __future__ import annotations

import gc
import sys
import weakref
from pathlib import Path
from types import SimpleNamespace

import torch
from cuda.bindings import driver

import maskc
from maskc import runtime
from maskc.runtime import launch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # (PYTHONSAFEPATH leaves the script's folder out)
from timing import us_per_call  # noqa: E402

CAUSAL = Path(__file__).resolve().parents[1] / "examples" / "causal.mask"
STREAM = 7


class _NoDevice:
    """Stands for CuPy's device context."""

    id = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _tensor(x) -> runtime._Tensor:
    return runtime._Tensor("q", "torch", tuple(x.shape), tuple(x.stride()), "bf16", 0, x.data_ptr(), False, x)


def fake_prepared(attn) -> launch.PreparedLaunch:
    family = attn.compiled.options.family
    values = {a.name: bytes(128) if a.kind == "tensor_map" else 0 for a in family.forward_args}
    launch._work_counters._pools[0] = SimpleNamespace(data=SimpleNamespace(ptr=1 << 20))
    done = driver.CUresult.CUDA_SUCCESS
    driver.cuLaunchKernel = lambda *args: (done,)  # (a launch binds it when prepared)
    return launch.PreparedLaunch((launch.Kernel(0, 132, family.threads, 1024),), _NoDevice(), family.forward_args,
                                 values, ("o", "lse"), None)


def prepare(attn, prepared, q, k, v, out=None, lse_shape=(1, 16, 1024), **keys) -> None:
    """Cache a launch for this call signature, as a first (checked) call would."""
    made = runtime._Launch.of(prepared, _tensor(q), lse_shape)
    made.current_stream = lambda: STREAM
    attn._launches.put(runtime._call_key(q, k, v, keys.get("cu_seqlens"), None, out, None, keys.get("params", {})),
                       made, prepared)


def per_call(fn, inner: int = 2000, outer: int = 30) -> float:
    return us_per_call(fn, inner, outer, warmup=inner)


def check_control_flow(attn, prepared, q, k, v) -> None:
    calls = []
    timed_launch = prepared.launch
    prepared.launch = lambda stream, out_ptr=None, lse_ptr=None: calls.append((stream, out_ptr, lse_ptr))
    try:
        o = attn(q, k, v)
        assert o.shape == q.shape and o.dtype == q.dtype and calls[-1] == (STREAM, o.data_ptr(), 0)
        o, lse = attn(q, k, v, return_lse=True)
        assert lse.shape == (1, 16, 1024) and lse.dtype == torch.float32
        assert calls[-1] == (STREAM, o.data_ptr(), lse.data_ptr())
        strided = q.transpose(1, 2).contiguous().transpose(1, 2)  # O by shape: contiguous, unlike q
        prepare(attn, prepared, strided, k, v)
        o = attn(strided, k, v)
        assert o.shape == strided.shape and o.is_contiguous() and calls[-1] == (STREAM, o.data_ptr(), 0)
        out = torch.empty_like(q)  # the caller's buffer: its pointer is the launch's own
        prepare(attn, prepared, q, k, v, out=out)
        assert attn(q, k, v, out=out) is out and calls[-1] == (STREAM, out.data_ptr(), 0)
        first = q.transpose(1, 2).contiguous().transpose(1, 2)  # a cached launch keeps no tensor of its first call
        prepare(attn, prepared, first, k, v)
        gone = weakref.ref(first)
        del first
        gc.collect()
        assert gone() is None, "a prepared launch holds its first call's q"
    finally:
        prepared.launch = timed_launch


def prepare_backward(attn, q, k, v, out, lse, d_out) -> list:
    """Cache a backward launch for this call signature, as a first (checked) call would, with its kernels'
    launches faked; returns the list each launch appends its slots' pointers to."""
    bwd, options = attn.compiled.options.backward, attn.compiled.options
    values = {a.name: bytes(128) if a.kind == "tensor_map" else 0 for a in bwd.args}
    slots = runtime.BACKWARD_SLOTS + (("dq_accum",) if bwd.fused else ())
    prepared = launch.PreparedLaunch(tuple(launch.Kernel(0, 132, bwd.threads(kernel), 1024) for kernel in bwd.kernels),
                                     _NoDevice(), bwd.args, values, slots, None)
    calls = []
    timed_launch = prepared.launch
    prepared.launch = lambda stream, *pointers: calls.append(pointers) or timed_launch(stream, *pointers)
    accum = (1024 // options.block_q, q.shape[2], options.block_q * options.head_dim) if bwd.fused else None
    made = runtime._BackwardLaunch.of(prepared, _tensor(q), _tensor(k), _tensor(v), tuple(lse.shape), accum, None)
    made.current_stream = lambda: STREAM
    key = runtime._backward_key(q, k, v, out, lse, d_out, None, None, {})
    attn._backward_launches.put(key, made, prepared)
    return calls


def check_backward_control_flow(attn, calls, q, k, v, out, lse, d_out) -> None:
    dq, dk, dv = attn.backward(q, k, v, out, lse, d_out)
    assert [g.shape for g in (dq, dk, dv)] == [q.shape, k.shape, v.shape] and dq.is_contiguous()
    assert calls[-1][:3] == (dq.data_ptr(), dk.data_ptr(), dv.data_ptr()) and len(calls[-1]) == 5


def main() -> None:
    attn = maskc.load(CAUSAL, arch="sm_90a")
    q, k, v, out, d_out = (torch.randn(1, 1024, 16, 128, dtype=torch.bfloat16) for _ in range(5))
    lse = torch.zeros(1, 16, 1024)
    prepared = fake_prepared(attn)
    prepare(attn, prepared, q, k, v)
    check_control_flow(attn, prepared, q, k, v)
    backward_calls = prepare_backward(attn, q, k, v, out, lse, d_out)
    check_backward_control_flow(attn, backward_calls, q, k, v, out, lse, d_out)
    # A call autograd records (one autograd.Function node), and the node's backward on the same graph.
    leaf = q.clone().requires_grad_(True)
    prepare(attn, prepared, leaf, k, v)
    recorded = attn(leaf, k, v)
    saved_out, saved_lse = recorded.grad_fn.saved_tensors[3:5]
    prepare_backward(attn, leaf, k, v, saved_out, saved_lse, d_out)
    rows = [("attn(q, k, v)", lambda: attn(q, k, v)),
            ("attn(q, k, v, return_lse=True)", lambda: attn(q, k, v, return_lse=True)),
            ("attn.backward (hopper_fused: 3 kernels)", lambda: attn.backward(q, k, v, out, lse, d_out)),
            ("attn(leaf, k, v), recorded by autograd", lambda: attn(leaf, k, v)),
            ("torch.autograd.grad of that call", lambda: torch.autograd.grad(recorded, leaf, d_out, retain_graph=True)),
            ("_through_torch_op", lambda: runtime._through_torch_op(q, k, v)),
            ("_call_key", lambda: runtime._call_key(q, k, v, None, None, None, None, {})),
            ("torch.empty_like(q)", lambda: torch.empty_like(q)),
            ("PreparedLaunch.launch (faked driver)", lambda: prepared.launch(STREAM, 1, 0))]
    print(f"torch {torch.__version__}; us per call, median of 30 loops of 2000")
    for name, fn in rows:
        print(f"{name:40s} {per_call(fn):7.3f}")


if __name__ == "__main__":
    main()
