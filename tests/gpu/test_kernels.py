"""Every example on the GPU against a float64 reference, with fresh random inputs and poisoned outputs.

Pass rule (FlashAttention's): max |O - O_ref| <= 2 x (max |O_lowp - O_ref|) + 1e-5, where O_lowp is the
same attention computed by PyTorch in the input precision, and the left side counts only what lies beyond
rounding O_ref to the output's format (`computed_error`); LSE within 1e-3; rows that see no key are exactly 0
with LSE = -inf; no NaN anywhere. Run on a GPU machine with `pytest -m gpu`.
"""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import numpy as np
import pytest
from small_configs import SMALL

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

import maskc  # noqa: E402
from maskc.tools.reference import dense_mask  # noqa: E402
from maskc.tools.trial import computed_error  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TORCH_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}


def reference(q, k, v, mask, scale, upcast: bool):
    """Attention of one sequence, [N, H, D] tensors and an [N, N] mask; float64 when `upcast`, else in the
    input precision as PyTorch would compute it."""
    dt = torch.float64 if upcast else q.dtype
    qh, kh, vh = (x.to(dt).transpose(0, 1) for x in (q, k, v))  # [H, N, D]
    if kh.shape[0] != qh.shape[0]:
        rep = qh.shape[0] // kh.shape[0]
        kh, vh = kh.repeat_interleave(rep, 0), vh.repeat_interleave(rep, 0)
    s = (qh @ kh.transpose(1, 2)).float() * scale if not upcast else (qh @ kh.transpose(1, 2)) * scale
    s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    o = p.to(dt) @ vh
    return o.transpose(0, 1), lse  # [N, H, D], [H, N]


def check(out, lse, q, k, v, masks, lengths, scale, packed):
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    for b, mask_np in enumerate(masks):
        n = lengths[b]
        if n == 0:
            continue
        sel = slice(offsets[b], offsets[b + 1]) if packed else slice(0, n)
        qb, kb, vb = (x[sel] if packed else x[b, sel] for x in (q, k, v))
        ob = out[sel] if packed else out[b, sel]
        lb = lse[:, sel] if packed else lse[b, :, sel]
        mask = torch.from_numpy(mask_np).to(q.device)
        o_ref, lse_ref = reference(qb, kb, vb, mask, scale, upcast=True)
        o_low, _ = reference(qb, kb, vb, mask, scale, upcast=False)
        assert not torch.isnan(ob).any(), f"sequence {b}: NaN in O"
        empty = ~mask.any(dim=1)
        if empty.any():
            assert (ob[empty] == 0).all(), f"sequence {b}: rows that see no key must be 0"
            assert torch.isneginf(lb[:, empty]).all(), f"sequence {b}: rows that see no key must have LSE -inf"
        err = computed_error(ob, o_ref)
        bound = 2 * (o_low.double() - o_ref).abs().max().item() + 1e-5
        assert err <= bound, f"sequence {b}: max error {err:.3g} > bound {bound:.3g}"
        live = ~empty
        if live.any():
            lerr = (lb[:, live].double() - lse_ref[:, live]).abs().max().item()
            assert lerr <= 1e-3, f"sequence {b}: LSE error {lerr:.3g}"


# Every kernel family the GPU can run: the portable one (built for this GPU: cubins of another major
# architecture do not load), and on Hopper the sm_90a one.
_CAPABILITY = torch.cuda.get_device_capability() if torch.cuda.is_available() else (0, 0)
FAMILIES = [f"sm_{_CAPABILITY[0]}{_CAPABILITY[1]}"] + (["sm_90a"] if _CAPABILITY == (9, 0) else [])


def make_case(name, head_dim=128, dtype="bf16", heads=(4, 4), packed=True, seed=0, arch=None, sequences=None,
              tensors=3, **options):
    """An example compiled for the GPU with its small configuration (or `sequences`), fresh random tensors
    (q, k, v, then any more shaped like q), the call's keywords (cu_seqlens, every runtime parameter as one
    value per sequence, as the reference sees them), the exact masks and the lengths."""
    consts, small = SMALL[name]
    attn = maskc.load(EXAMPLES / f"{name}.mask", head_dim=head_dim, dtype=dtype, arch=arch or FAMILIES[0], **options,
                      **consts)
    made, call, values, layouts = make_inputs(attn, sequences or small, heads, packed, seed, tensors)
    masks = [dense_mask(attn.program, lay, val) for lay, val in zip(layouts, values)]
    return attn, made, call, masks, [lay.n for lay in layouts]


def make_inputs(attn, sequences, heads=(4, 4), packed=True, seed=0, tensors=3):
    """Fresh random tensors for `sequences` of a loaded mask (q, k, v, then any more shaped like q), the call's
    keywords (cu_seqlens, every runtime parameter as one value per sequence), and the bound values and
    layouts."""
    head_dim, dtype = attn.compiled.options.head_dim, attn.compiled.options.dtype
    values, layouts = attn.compiled.bind(sequences)
    lengths = [lay.n for lay in layouts]
    if not packed and len(set(lengths)) != 1:
        pytest.skip("a padded batch needs equal lengths")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    hq, hkv = heads
    shape = (sum(lengths),) if packed else (len(lengths), lengths[0])
    made = [torch.randn(*shape, hkv if i in (1, 2) else hq, head_dim, device="cuda", dtype=TORCH_DTYPE[dtype],
                        generator=gen) for i in range(tensors)]
    params = {p.name: [val.arrays[p.name].tolist() if p.type.depth else val.scalars[p.name] for val in values]
              for p in attn.program.runtime_params}
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32) if packed else None
    return made, dict(cu_seqlens=cu, **params), values, layouts


def run_case(name, head_dim=128, dtype="bf16", heads=(4, 4), packed=True, **kw):
    attn, (q, k, v), call, masks, lengths = make_case(name, head_dim, dtype, heads, packed, **kw)
    out = torch.full_like(q, float("nan"))  # poisoned: every element must be written
    lse_shape = (heads[0], sum(lengths)) if packed else (len(lengths), heads[0], lengths[0])
    lse = torch.full(lse_shape, float("nan"), device="cuda")
    attn(q, k, v, out=out, lse=lse, return_lse=True, **call)
    torch.cuda.synchronize()
    check(out, lse, q, k, v, masks, lengths, 1.0 / math.sqrt(head_dim), packed)


@pytest.mark.parametrize("arch", FAMILIES)
@pytest.mark.parametrize("name", sorted(SMALL))
def test_example_bf16_hd128_packed(name, arch):
    run_case(name, arch=arch)


@pytest.mark.parametrize("arch", FAMILIES)
@pytest.mark.parametrize("name", ["causal", "document", "clear_text", "rm_shared", "tree", "block_sparse"])
def test_example_fp16_hd64_gqa(name, arch):
    run_case(name, head_dim=64, dtype="fp16", heads=(6, 2), seed=1, arch=arch)


@pytest.mark.parametrize("arch", FAMILIES)
@pytest.mark.parametrize("name", ["hstu", "natten2d", "sliding_window", "tree", "clear"])
def test_example_padded_batch(name, arch):
    run_case(name, packed=False, heads=(2, 1), seed=2, arch=arch)


@pytest.mark.skipif("sm_90a" not in FAMILIES, reason="head dim 256 is a Hopper-family option")
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("name", ["causal", "document", "clear_text", "video3d"])
def test_example_hd256_hopper(name, dtype):
    run_case(name, head_dim=256, dtype=dtype, heads=(4, 2), seed=3, arch="sm_90a")


@pytest.mark.parametrize("arch", FAMILIES)
@pytest.mark.parametrize("name, sequences", [("causal", [{"n": 3001}]), ("sliding_window", [{"n": 2900, "window": 700}]),
                                             ("document", [{"docs": [1000, 17, 1500]}, {"docs": [129, 2000]}])])
def test_longer_sequences_cycle_the_pipeline(name, sequences, arch):
    """Dozens of key tiles per row and more (work item, head) pairs than CTAs: every pipeline stage and
    barrier phase is reused many times, and a persistent CTA takes several work items."""
    run_case(name, heads=(8, 2), seed=4, arch=arch, sequences=sequences)


@pytest.mark.skipif("sm_90a" not in FAMILIES, reason="a Hopper-family option")
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("name", ["clear_text", "natten2d", "video3d", "document", "causal"])
def test_example_hopper_64_key_tiles(name, head_dim):
    run_case(name, head_dim=head_dim, heads=(4, 2), seed=5, arch="sm_90a", key_tile=64)


@pytest.mark.skipif("sm_90a" not in FAMILIES, reason="a Hopper-family option")
@pytest.mark.parametrize("layout", ["packed", "padded", "heads_first"])
def test_grid_tiles_load_as_whole_boxes(layout, monkeypatch):
    """The Hopper kernels copy a grid's tiles as one TMA box per 64 columns (grid_boxes = 1) in every common
    layout, and stay exact: interior tiles as boxes, tiles cut by the grid's edges row by row (x) or zero-filled
    (y), sequences placed on the box maps' x axis by token_offset (packed) or SIDE_box_seq_tokens (padded; with
    GQA the query and key sides differ where heads come first). The forward's Q and key tiles; both backward
    passes' steps of Q and dO and their K and V tiles."""
    import maskc.runtime

    used = []
    real = maskc.runtime._grid_box_maps
    monkeypatch.setattr(maskc.runtime, "_grid_box_maps", lambda *a: used.append(real(*a)) or used[-1])
    heads = (4, 2)
    attn = maskc.load(EXAMPLES / "clear.mask", arch="sm_90a", h=21, w=76)
    n = 21 * 76  # 76 = 4 x 16 + 12 = 9 x 8 + 4: the last tile of each row is cut by the grid's right edge
    radii = [5, 9]
    gen = torch.Generator(device="cuda").manual_seed(6)
    if layout == "packed":
        q, k, v = (torch.randn(2 * n, h, 128, device="cuda", dtype=torch.bfloat16, generator=gen) for h in (4, 2, 2))
        call = dict(cu_seqlens=torch.tensor([0, n, 2 * n], dtype=torch.int32), r=radii)
    else:  # [B, N, H, D]; heads_first: a view of [B, H, N, D] memory
        q, k, v = (torch.randn(2, h, n, 128, device="cuda", dtype=torch.bfloat16, generator=gen).transpose(1, 2)
                   if layout == "heads_first" else
                   torch.randn(2, n, h, 128, device="cuda", dtype=torch.bfloat16, generator=gen) for h in (4, 2, 2))
        call = dict(r=radii)
    out, lse = attn(q, k, v, return_lse=True, **call)
    torch.cuda.synchronize()
    steps = [{"packed": 0, "padded": n, "heads_first": h * n}[layout] for h in heads]

    def boxes_used():
        assert used and used[-1] is not None and used[-1]["grid_boxes"] == 1
        assert [used[-1]["q_box_seq_tokens"], used[-1]["k_box_seq_tokens"]] == steps

    boxes_used()
    values, layouts = attn.compiled.bind([{"n": n, "r": r} for r in radii])
    masks = [dense_mask(attn.program, lay, val) for lay, val in zip(layouts, values)]
    check(out, lse, q, k, v, masks, [n, n], 1.0 / math.sqrt(128), layout == "packed")
    from test_backward import check_grads

    d_out = torch.randn(q.shape, device="cuda", dtype=torch.bfloat16, generator=gen).as_strided(q.shape, q.stride())
    for kernels in ("hopper_fused", "hopper"):
        attn = maskc.load(EXAMPLES / "clear.mask", arch="sm_90a", h=21, w=76, backward_kernels=kernels)
        leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]  # (clone keeps the strides)
        attn(*leaves, **call).backward(d_out)
        boxes_used()
        check_grads([x.grad for x in leaves], (q, k, v, d_out), masks, [n, n], 1.0 / math.sqrt(128), layout == "packed")


@pytest.mark.parametrize("arch", FAMILIES)
def test_fresh_inputs_every_call(arch):
    for seed in range(3):
        run_case("document", seed=10 + seed, arch=arch)


def test_cupy_arrays_give_the_same_result_as_torch_tensors():
    """CuPy arrays in, CuPy arrays out (zero copy through their pointers), on CuPy's current stream."""
    import cupy

    consts, sequences = SMALL["document"]
    attn = maskc.load(EXAMPLES / "document.mask", head_dim=64, dtype="fp16", **consts)
    values, layouts = attn.compiled.bind(sequences)
    lengths = [lay.n for lay in layouts]
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    params = {"docs": [v.arrays["docs"].tolist() for v in values]}
    q, k, v = (torch.randn(sum(lengths), 2, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    expected = attn(q, k, v, cu_seqlens=cu, **params)
    qc, kc, vc = (cupy.from_dlpack(x) for x in (q, k, v))
    got = attn(qc, kc, vc, cu_seqlens=cu, **params)
    assert isinstance(got, cupy.ndarray) and got.dtype == cupy.float16 and got.shape == qc.shape
    torch.testing.assert_close(torch.from_dlpack(got), expected, rtol=0, atol=0)


@pytest.mark.parametrize("arch", FAMILIES)
def test_repeated_calls_reuse_the_prepared_launch_and_stay_right(arch):
    """A repeated call takes the prepared launch (no checks, no planning); new runtime values, an in-place
    update of a torch cu_seqlens and new output buffers must still give the right answer."""
    attn = maskc.load(EXAMPLES / "document.mask", head_dim=128, dtype="bf16", arch=arch)
    gen = torch.Generator(device="cuda").manual_seed(7)
    q, k, v = (torch.randn(600, 4, 128, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
    cu = torch.tensor([0, 250, 600], dtype=torch.int32, device="cuda")
    cases = [([[100, 150], [350]], [0, 250, 600]), ([[100, 150], [350]], [0, 250, 600]), ([[250], [50, 300]], [0, 250, 600]),
             ([[400], [200]], [0, 400, 600])]
    for docs, bounds in cases:
        cu.copy_(torch.tensor(bounds, dtype=torch.int32))  # in place: the call must see the new lengths
        out = attn(q, k, v, cu_seqlens=cu, docs=docs)
        out2 = attn(q, k, v, cu_seqlens=cu, docs=docs)  # the prepared launch, new output buffers
        assert out2.data_ptr() != out.data_ptr()
        fresh = maskc.load(EXAMPLES / "document.mask", head_dim=128, dtype="bf16", arch=arch)
        expected = fresh(q, k, v, cu_seqlens=bounds, docs=docs)
        torch.testing.assert_close(out, expected, rtol=0, atol=0)
        torch.testing.assert_close(out2, expected, rtol=0, atol=0)


@pytest.mark.parametrize("arch", FAMILIES)
def test_a_repeated_call_that_does_not_return_lse_writes_none(arch):
    """A repeated call without return_lse launches with a null LSE (no allocation, no write); calls of the same
    prepared launch that return it, or write it into the caller's buffer, still get the exact LSE."""
    attn = maskc.load(EXAMPLES / "document.mask", head_dim=128, dtype="bf16", arch=arch)
    q, k, v = (torch.randn(700, 4, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    call = {"cu_seqlens": [0, 300, 700], "docs": [[100, 200], [400]]}
    out, lse = attn(q, k, v, return_lse=True, **call)  # plans and prepares the launch
    mine = torch.full_like(lse, float("nan"))
    for return_lse in (False, True, False, True):
        got = attn(q, k, v, return_lse=return_lse, **call)
        torch.testing.assert_close(got[0] if return_lse else got, out, rtol=0, atol=0)
        if return_lse:
            torch.testing.assert_close(got[1], lse, rtol=0, atol=0)
        attn(q, k, v, lse=mine, **call)  # the caller's LSE buffer: written even though not returned
        torch.testing.assert_close(mine, lse, rtol=0, atol=0)
        mine.fill_(float("nan"))


@pytest.mark.parametrize("arch", FAMILIES)
def test_a_repeated_call_with_a_strided_q_is_right_and_the_launch_keeps_no_tensor(arch):
    """q not contiguous: a repeated call's O is allocated by shape (contiguous), and is right; the prepared launch
    holds none of the first call's tensors (it lives as long as the cache keeps it)."""
    import gc
    import weakref

    attn = maskc.load(EXAMPLES / "causal.mask", head_dim=128, dtype="bf16", arch=arch)
    gen = torch.Generator(device="cuda").manual_seed(8)
    q = torch.randn(1, 4, 500, 128, device="cuda", dtype=torch.bfloat16, generator=gen).transpose(1, 2)
    k, v = (torch.randn(1, 500, 4, 128, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
    first = attn(q, k, v)
    again, lse = attn(q, k, v, return_lse=True)  # the prepared launch
    assert again.is_contiguous() and again.data_ptr() != first.data_ptr()
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    expected, expected_lse = maskc.load(EXAMPLES / "causal.mask", head_dim=128, dtype="bf16", arch=arch)(
        q.contiguous(), k, v, return_lse=True)
    torch.testing.assert_close(again, expected, rtol=0, atol=0)
    torch.testing.assert_close(lse, expected_lse, rtol=0, atol=0)
    gone = weakref.ref(q)
    del q
    gc.collect()
    assert gone() is None, "the prepared launch holds the first call's q"


@pytest.mark.skipif("sm_90a" not in FAMILIES, reason="a Hopper-family option")
@pytest.mark.parametrize("name", ["causal", "document", "clear_text", "rm_shared"])
def test_example_hopper_three_kv_stages(name):
    run_case(name, heads=(4, 2), seed=6, arch="sm_90a", kv_stages=3)
    run_case("causal", heads=(8, 2), seed=6, arch="sm_90a", kv_stages=3, sequences=[{"n": 3001}])


@pytest.mark.parametrize("arch", FAMILIES)
def test_a_repeated_call_can_be_captured_in_a_cuda_graph(arch):
    """After a first call with the same tensors and values, a call does no host synchronisation: it can be
    captured in a CUDA graph, and replaying the graph recomputes the output for new contents of q, k, v."""
    attn = maskc.load(EXAMPLES / "document.mask", head_dim=128, dtype="bf16", arch=arch)
    q, k, v = (torch.randn(700, 4, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    cu = torch.tensor([0, 300, 700], dtype=torch.int32, device="cuda")
    docs = [[100, 200], [400]]
    out = torch.empty_like(q)
    attn(q, k, v, cu_seqlens=cu, docs=docs, out=out)  # plans and prepares the launch
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        attn(q, k, v, cu_seqlens=cu, docs=docs, out=out)
    for _ in range(2):
        for x in (q, k, v):
            x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        expected = maskc.load(EXAMPLES / "document.mask", head_dim=128, dtype="bf16", arch=arch)(
            q, k, v, cu_seqlens=[0, 300, 700], docs=docs)
        torch.testing.assert_close(out, expected, rtol=0, atol=0)


@pytest.mark.skipif("sm_90a" not in FAMILIES, reason="the Hopper forward's scheduler")
def test_calls_on_concurrent_streams_each_get_their_own_work_counter():
    """The Hopper forward's CTAs claim their work from a counter that each launch leaves zero; launches on
    different streams may overlap, so each stream has its own. Many launches of one prepared call on four
    streams at once, each stream with its own inputs, must all give that stream's answer."""
    attn = maskc.load(EXAMPLES / "document.mask", head_dim=128, dtype="bf16", arch="sm_90a")
    docs, bounds = [[3000, 1096], [2048, 2048]], [0, 4096, 8192]
    cu = torch.tensor(bounds, dtype=torch.int32, device="cuda")
    streams = [torch.cuda.Stream() for _ in range(4)]
    inputs = [[torch.randn(8192, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3)] for _ in streams]
    expected = [attn(*x, cu_seqlens=cu, docs=docs) for x in inputs]
    outs = [torch.empty_like(e) for e in expected]
    torch.cuda.synchronize()
    for _ in range(20):
        for stream, x, out in zip(streams, inputs, outs):
            with torch.cuda.stream(stream):
                out.fill_(float("nan"))  # a pair that no CTA ran would leave NaN, not the last call's rows
                attn(*x, cu_seqlens=cu, docs=docs, out=out)
    torch.cuda.synchronize()
    for out, e in zip(outs, expected):
        torch.testing.assert_close(out, e, rtol=0, atol=0)


@pytest.mark.parametrize("arch", FAMILIES)
def test_a_plan_made_ahead_elsewhere_serves_the_call_and_its_gradients(arch):
    """plan=: a plan made apart from the call (by another callable of the mask, pickled, as a DataLoader worker
    would) gives the call's exact output, and its gradients; a plan made for other lengths is refused."""
    docs, bounds = [[100, 150], [350]], [0, 250, 600]
    worker = maskc.load(EXAMPLES / "document.mask", head_dim=128, dtype="bf16", arch=arch)
    plan = pickle.loads(pickle.dumps(worker.plan(cu_seqlens=bounds, docs=docs)))
    attn = maskc.load(EXAMPLES / "document.mask", head_dim=128, dtype="bf16", arch=arch)
    gen = torch.Generator(device="cuda").manual_seed(11)
    q, k, v, d_out = (torch.randn(600, 4, 128, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
    cu = torch.tensor(bounds, dtype=torch.int32)
    inputs = [x.clone().requires_grad_() for x in (q, k, v)]
    out = attn(*inputs, cu_seqlens=cu, plan=plan, docs=docs)
    out.backward(d_out)
    fresh = maskc.load(EXAMPLES / "document.mask", head_dim=128, dtype="bf16", arch=arch)
    again = [x.clone().requires_grad_() for x in (q, k, v)]
    expected = fresh(*again, cu_seqlens=cu, docs=docs)
    expected.backward(d_out)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    for got, want in zip(inputs, again):  # dq's sums may differ in their last bits (the fused pass)
        torch.testing.assert_close(got.grad, want.grad)
    with pytest.raises(ValueError, match="other runtime values"):
        attn(q, k, v, cu_seqlens=[0, 300, 600], plan=plan, docs=docs)
