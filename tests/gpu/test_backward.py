"""Gradients on the GPU: every example against a float64 reference, through autograd (torch) and through the
CuPy forward/backward pair, with fresh random inputs, ragged packed and padded batches, GQA and empty rows.

Pass rule (FlashAttention's for gradients): for each of dQ, dK, dV,
max |dX - dX_ref| <= 2 x max |dX_lowp - dX_ref| + 1e-4, where dX_ref is the float64 gradient and dX_lowp the
gradient of the same attention computed by PyTorch in the input precision. Tokens that see nothing (rows with
no visible key, keys no query sees) get exactly 0, and nothing is NaN. Run with `pytest -m gpu`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from small_configs import PINNED, SMALL

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

import maskc  # noqa: E402
from maskc.kernels import KernelOptions  # noqa: E402
from maskc.tools.reference import dense_mask  # noqa: E402
from maskc.tools.trial import computed_error  # noqa: E402

from test_kernels import EXAMPLES, FAMILIES, check, make_inputs  # noqa: E402
from test_kernels import make_case as make_kernel_case  # noqa: E402


def reference_attention(q, k, v, mask, scale, upcast: bool):
    """[N, H, D] tensors, an [N, N] mask -> O [N, H, D]; differentiable, and free of NaN for rows that see
    nothing (their P is 0, so is their output and every gradient through them)."""
    dt = torch.float64 if upcast else q.dtype
    qh, kh, vh = (x.to(dt).transpose(0, 1) for x in (q, k, v))
    if kh.shape[0] != qh.shape[0]:
        rep = qh.shape[0] // kh.shape[0]
        kh, vh = kh.repeat_interleave(rep, 0), vh.repeat_interleave(rep, 0)
    s = (qh @ kh.transpose(1, 2)) * scale if upcast else (qh @ kh.transpose(1, 2)).float() * scale
    s = s.masked_fill(~mask, float("-inf"))
    m = s.amax(dim=-1, keepdim=True).detach()
    p = torch.exp(s - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    p = p / p.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(p.dtype).tiny)
    return (p.to(dt) @ vh).transpose(0, 1)


def reference_grads(q, k, v, d_out, mask, scale, upcast: bool):
    leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
    out = reference_attention(*leaves, mask, scale, upcast)
    out.backward(d_out.to(out.dtype))
    return [x.grad for x in leaves]


# Every backward pass the GPU can run: each family's default (on Hopper at head dim 128: the fused pass), and on
# Hopper also the deterministic Hopper pair and the portable kernels built for sm_90a (the fallback for 64-key
# tiles).
PASSES = [(arch, None) for arch in FAMILIES] + (
    [("sm_90a", "hopper"), ("sm_90a", "portable")] if "sm_90a" in FAMILIES else [])
PASS_IDS = [f"{arch}-{kernels or 'default'}" for arch, kernels in PASSES]


def make_case(name, **kw):
    """The example, (q, k, v, d_out), the call's keywords, the masks and the lengths (test_kernels.make_case)."""
    return make_kernel_case(name, tensors=4, **kw)


def pass_case(name, backward, seed):
    """make_case with GQA (4 query heads, 2 key heads) for one of PASSES."""
    arch, kernels = backward
    options = {} if kernels is None else {"backward_kernels": kernels}
    return make_case(name, heads=(4, 2), seed=seed, arch=arch, **options)


def assert_same_gradients(attn, got, want, message: str) -> None:
    """(dq, dk, dv) twice from the same inputs: the same bits, except dq of a pass that is not deterministic
    (it adds dQ's partial sums in a varying order), which must agree closely."""
    exact = (attn.compiled.options.backward.deterministic, True, True)
    for a, b, same_bits in zip(got, want, exact):
        if same_bits:
            assert torch.equal(a, b), message
        else:
            torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-3)


def poison_allocator():
    """Fill memory the caching allocator will hand out next with NaN: every gradient element must be written."""
    junk = torch.full((64 << 20,), float("nan"), device="cuda", dtype=torch.float32)
    del junk


def check_grads(grads, tensors, masks, lengths, scale, packed):
    q, k, v, d_out = tensors
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    for g, what in zip(grads, ("dq", "dk", "dv")):
        assert not torch.isnan(g).any(), f"NaN in {what}"
    for b, mask_np in enumerate(masks):
        n = lengths[b]
        if n == 0:
            continue
        sel = slice(offsets[b], offsets[b + 1]) if packed else slice(0, n)
        part = [x[sel] if packed else x[b, sel] for x in (q, k, v, d_out)]
        got = [g[sel] if packed else g[b, sel] for g in grads]
        mask = torch.from_numpy(mask_np).to(q.device)
        ref = reference_grads(*part[:3], part[3], mask, scale, upcast=True)
        low = reference_grads(*part[:3], part[3], mask, scale, upcast=False)
        for what, x, r, lo in zip(("dq", "dk", "dv"), got, ref, low):
            err = computed_error(x, r)
            bound = 2 * (lo.double() - r).abs().max().item() + 1e-4
            assert err <= bound, f"sequence {b}: {what} max error {err:.3g} > bound {bound:.3g}"
        unseen_rows, unseen_keys = ~mask.any(dim=1), ~mask.any(dim=0)
        assert (got[0][unseen_rows] == 0).all(), f"sequence {b}: rows that see no key must get dq = 0"
        assert (got[1][unseen_keys] == 0).all() and (got[2][unseen_keys] == 0).all(), \
            f"sequence {b}: keys no query sees must get dk = dv = 0"


def supported(arch, kernels, head_dim=128):
    if kernels is not None and not any(b.name == kernels and b.supports(KernelOptions(arch=arch, head_dim=head_dim))
                                       for b in KernelOptions(arch=arch, head_dim=head_dim).family.backward):
        pytest.skip(f"the {kernels} backward pass does not support head dim {head_dim}")


def run_autograd(name, backward=(None, None), **kw):
    arch, kernels = backward
    supported(arch, kernels, kw.get("head_dim", 128))
    if kernels is not None:
        kw["backward_kernels"] = kernels
    attn, tensors, call, masks, lengths = make_case(name, arch=arch, **kw)
    q, k, v, d_out = tensors
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    out = attn(*leaves, **call)
    assert out.requires_grad
    poison_allocator()
    out.backward(d_out)
    torch.cuda.synchronize()
    head_dim = q.shape[-1]
    check_grads([x.grad for x in leaves], tensors, masks, lengths, 1.0 / math.sqrt(head_dim), call["cu_seqlens"] is not None)


@pytest.mark.parametrize("backward", PASSES, ids=PASS_IDS)
@pytest.mark.parametrize("name", sorted(SMALL))
def test_gradients_bf16_hd128_packed(name, backward):
    run_autograd(name, backward)


@pytest.mark.parametrize("backward", PASSES, ids=PASS_IDS)
@pytest.mark.parametrize("name", ["causal", "document", "clear_text", "rm_shared", "tree", "block_sparse", "natten2d"])
def test_gradients_fp16_hd64_gqa(name, backward):
    run_autograd(name, backward, head_dim=64, dtype="fp16", heads=(6, 2), seed=1)


@pytest.mark.parametrize("backward", PASSES, ids=PASS_IDS)
@pytest.mark.parametrize("name", ["hstu", "natten2d", "sliding_window", "clear"])
def test_gradients_padded_batch(name, backward):
    run_autograd(name, backward, packed=False, seed=2)


@pytest.mark.parametrize("backward", PASSES, ids=PASS_IDS)
@pytest.mark.parametrize("name, sequences", [("causal", [{"n": 3001}]), ("document", [{"docs": [900, 5, 1400, 700]}])])
def test_gradients_longer_sequences(name, sequences, backward):
    run_autograd(name, backward, sequences=sequences, heads=(4, 1), seed=3)


HOPPER = [("sm_90a", None)] if "sm_90a" in FAMILIES else []


@pytest.mark.parametrize("backward", HOPPER, ids=["sm_90a-default"][:len(HOPPER)])
@pytest.mark.parametrize("name, kw", [
    *[(name, {}) for name in sorted(SMALL)],
    ("causal", dict(dtype="fp16", heads=(6, 2), seed=1)),
    ("natten2d", dict(dtype="fp16", heads=(6, 2), seed=1)),
    ("clear", dict(packed=False, seed=2)),
    ("document", dict(sequences=[{"docs": [900, 5, 1400, 700]}], heads=(4, 1), seed=3)),
])
def test_gradients_hd256_hopper(name, kw, backward):
    """Head dim 256: the Hopper pair with the head dim split in two (two dQ CTAs per query tile, dK/dV
    consumers on half the columns each), in bf16 and fp16, packed and padded, with GQA."""
    run_autograd(name, backward, head_dim=256, **kw)


@pytest.mark.parametrize("backward", PASSES, ids=PASS_IDS)
def test_backward_is_deterministic_and_the_cupy_pair_matches_autograd(backward):
    import cupy

    attn, tensors, call, _, _ = pass_case("shared_prompt", backward, seed=4)
    q, k, v, d_out = tensors
    out, lse = attn(q, k, v, return_lse=True, **call)
    first = attn.backward(q, k, v, out, lse, d_out, **call)
    second = attn.backward(q, k, v, out, lse, d_out, **call)
    assert_same_gradients(attn, first, second, "the backward pass must give the same bits on the same inputs")
    as_cupy = [cupy.from_dlpack(x) for x in (q, k, v, d_out)]
    cu = cupy.asarray(call["cu_seqlens"].numpy())
    params = {name: value for name, value in call.items() if name != "cu_seqlens"}
    o_c, lse_c = attn(*as_cupy[:3], cu_seqlens=cu, return_lse=True, **params)
    grads_c = attn.backward(*as_cupy[:3], o_c, lse_c, as_cupy[3], cu_seqlens=cu, **params)
    assert_same_gradients(attn, first, [torch.from_dlpack(g) for g in grads_c], "CuPy and torch take the same kernels")


@pytest.mark.parametrize("backward", PASSES, ids=PASS_IDS)
def test_a_repeated_backward_reads_its_inputs_anew_and_writes_new_gradients(backward):
    """A backward call with the tensors of an earlier one launches what that one prepared: it must read the
    tensors' new contents (d_out and q changed in place), write new gradient tensors, and be right (against
    the float64 reference); the earlier call's gradients stay as they were."""
    attn, tensors, call, masks, lengths = pass_case("document", backward, seed=9)
    q, k, v, d_out = tensors
    out, lse = attn(q, k, v, return_lse=True, **call)
    first = attn.backward(q, k, v, out, lse, d_out, **call)
    kept = [g.clone() for g in first]
    q.copy_(torch.randn_like(q))
    d_out.copy_(torch.randn_like(d_out))
    attn(q, k, v, out=out, lse=lse, **call)  # the forward again, into the same buffers: O and LSE for the new q
    poison_allocator()
    again = attn.backward(q, k, v, out, lse, d_out, **call)
    torch.cuda.synchronize()
    assert len(attn._backward_launches) == 1 and all(a.data_ptr() != b.data_ptr() for a, b in zip(first, again))
    assert all(torch.equal(a, b) for a, b in zip(first, kept))
    check_grads(again, (q, k, v, d_out), masks, lengths, 1.0 / math.sqrt(q.shape[-1]), call["cu_seqlens"] is not None)


def test_a_repeated_backward_can_be_captured_in_a_cuda_graph():
    """After a first backward with the same tensors and values, a backward call does no host synchronisation: it
    can be captured in a CUDA graph, and replaying the graph recomputes the gradients for new contents of q, k,
    v, out, lse and d_out (the forward replayed before it)."""
    attn, tensors, call, masks, lengths = make_case("document", heads=(4, 2), seed=11)
    q, k, v, d_out = tensors
    out, lse = torch.empty_like(q), torch.empty(q.shape[1], q.shape[0], device="cuda", dtype=torch.float32)
    attn(q, k, v, out=out, lse=lse, **call)
    attn.backward(q, k, v, out, lse, d_out, **call)  # plans and prepares both launches
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        attn(q, k, v, out=out, lse=lse, **call)
        grads = attn.backward(q, k, v, out, lse, d_out, **call)
    for _ in range(2):
        for x in (q, k, v, d_out):
            x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        check_grads(grads, (q, k, v, d_out), masks, lengths, 1.0 / math.sqrt(q.shape[-1]), True)


def test_a_new_gpu_cu_seqlens_every_step_gets_its_own_plan():
    """A training loop that makes a new cu_seqlens on the GPU every step: the caching allocator gives it the
    last step's address, and Python often its id. Each step must be planned for its own lengths, forward and
    backward, with the same q, k, v (reused buffers, as in training)."""
    attn = maskc.load(EXAMPLES / "causal.mask", head_dim=128, dtype="bf16")
    gen = torch.Generator(device="cuda").manual_seed(10)
    q, k, v, d_out = (torch.randn(600, 4, 128, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
    scale = 1.0 / math.sqrt(128)
    for bounds in ([0, 250, 600], [0, 400, 600], [0, 100, 600], [0, 400, 600]):
        cu = torch.tensor(bounds, dtype=torch.int32, device="cuda")
        out, lse = attn(q, k, v, cu_seqlens=cu, return_lse=True)
        grads = attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu)
        torch.cuda.synchronize()
        lengths = np.diff(bounds).tolist()
        masks = [np.tril(np.ones((n, n), dtype=bool)) for n in lengths]
        for b, n in enumerate(lengths):
            sel = slice(bounds[b], bounds[b + 1])
            want = reference_attention(q[sel], k[sel], v[sel], torch.from_numpy(masks[b]).cuda(), scale, upcast=True)
            err = (out[sel].double() - want).abs().max().item()
            assert err < 2e-2, f"lengths {lengths}: sequence {b} max error {err:.3g}"
        check_grads(grads, (q, k, v, d_out), masks, lengths, scale, True)
        del cu, out, lse, grads


@pytest.mark.skipif("sm_90a" not in FAMILIES, reason="the pass that is not deterministic is Hopper's")
def test_torch_deterministic_mode_refuses_the_pass_that_is_not():
    attn, tensors, call, _, _ = make_case("causal", arch="sm_90a", backward_kernels="hopper_fused")
    q, k, v, d_out = tensors
    out, lse = attn(q, k, v, return_lse=True, **call)
    try:
        torch.use_deterministic_algorithms(True)
        with pytest.raises(RuntimeError, match='not deterministic .* backward_kernels="hopper"'):
            attn.backward(q, k, v, out, lse, d_out, **call)
        torch.use_deterministic_algorithms(True, warn_only=True)
        with pytest.warns(UserWarning, match="not deterministic"):
            attn.backward(q, k, v, out, lse, d_out, **call)
        exact, tensors, call, _, _ = make_case("causal", arch="sm_90a", deterministic=True)
        assert exact.compiled.options.backward.name == "hopper"
        q, k, v, d_out = tensors
        out, lse = exact(q, k, v, return_lse=True, **call)
        torch.use_deterministic_algorithms(True)
        exact.backward(q, k, v, out, lse, d_out, **call)  # the deterministic pass runs as usual
    finally:
        torch.use_deterministic_algorithms(False)


def test_backward_checks_its_inputs():
    attn, tensors, call, _, _ = make_case("causal")
    q, k, v, d_out = tensors
    out, lse = attn(q, k, v, return_lse=True, **call)
    with pytest.raises(ValueError, match="d_out must be like q"):
        attn.backward(q, k, v, out, lse, d_out[:-1], **call)
    with pytest.raises(ValueError, match="lse must be a contiguous float32"):
        attn.backward(q, k, v, out, lse.double(), d_out, **call)
    with pytest.raises(ValueError, match="out= and lse= cannot be given"):
        attn(q.requires_grad_(True), k, v, out=torch.empty_like(q), **call)


def test_torch_compile_captures_the_call_and_new_runtime_values_do_not_recompile():
    """fullgraph=True (no graph break), aot_eager (fake tensors through the ops' fake implementations), and three
    steps with new sequence lengths and a new window: one compile, gradients equal to the eager call's."""
    from torch._dynamo.testing import CompileCounterWithBackend

    attn = maskc.load(EXAMPLES / "sliding_window.mask", head_dim=64, arch=FAMILIES[-1])

    def loss_of(q, k, v, cu, window):
        return attn(q, k, v, cu_seqlens=cu, window=window).float().square().sum()

    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(loss_of, backend=counter, fullgraph=True, dynamic=True)
    gen = torch.Generator(device="cuda").manual_seed(5)
    for lengths, window in (([300, 400], 17), ([100, 600], 40), ([250, 200, 250], 5)):
        base = [torch.randn(700, 4, 64, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3)]
        cu = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32)
        leaves = [x.clone().requires_grad_(True) for x in base]
        compiled(*leaves, cu, torch.tensor(window)).backward()
        assert attn.compiled._backward_build is not None  # started by the op's setup_context while tracing
        eager = [x.clone().requires_grad_(True) for x in base]
        loss_of(*eager, cu, window).backward()
        assert_same_gradients(attn, [x.grad for x in leaves], [x.grad for x in eager], "compiled and eager differ")
    assert counter.frame_count == 1, f"compiled {counter.frame_count} times"


def test_a_call_autograd_records_builds_the_backward_ahead():
    """Its backward kernels start building in a thread when the forward is called (CompiledMask.build_backward_ahead);
    a call under no_grad starts nothing."""
    gen = torch.Generator(device="cuda").manual_seed(6)
    q, k, v = (torch.randn(1, 300, 2, 64, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
    quiet = maskc.load(EXAMPLES / "causal.mask", head_dim=64, arch=FAMILIES[-1])
    with torch.no_grad():
        quiet(q.requires_grad_(True), k, v)
    assert quiet.compiled._backward_build is None
    attn = maskc.load(EXAMPLES / "causal.mask", head_dim=64, arch=FAMILIES[-1])
    out = attn(q, k, v)
    assert attn.compiled._backward_build is not None
    out.float().square().sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


@pytest.mark.parametrize("backward", PASSES, ids=PASS_IDS)
@pytest.mark.parametrize("name", sorted(PINNED))
def test_grids_with_pinned_axes(name, backward):
    """Tiles one token wide along an axis the rules pin (plan/tiling.py, pinned_axes): the output, LSE and
    gradients of every pass, GQA, sequences whose grids are narrower and wider than a tile."""
    arch, kernels = backward
    supported(arch, kernels)
    text, sequences = PINNED[name]
    attn = maskc.loads(text, arch=arch, **({"backward_kernels": kernels} if kernels else {}))
    tensors, call, values, layouts = make_inputs(attn, sequences, heads=(4, 2), seed=4, tensors=4)
    masks = [dense_mask(attn.program, lay, val) for lay, val in zip(layouts, values)]
    lengths, scale = [lay.n for lay in layouts], 1.0 / math.sqrt(128)
    out, lse = attn(*tensors[:3], return_lse=True, **call)
    check(out, lse, *tensors[:3], masks, lengths, scale, packed=True)
    leaves = [x.clone().requires_grad_(True) for x in tensors[:3]]
    poison_allocator()
    attn(*leaves, **call).backward(tensors[3])
    torch.cuda.synchronize()
    check_grads([x.grad for x in leaves], tensors, masks, lengths, scale, packed=True)
