"""Prepared launches (maskc.runtime, maskc.runtime.launch) without a GPU: CuPy and the driver's launch are
fakes (tests/fake_cupy.py) that record every launch with the bytes of each argument. A repeated call, forward
or backward, must launch exactly what its first (checked) call prepared, with only the pointers to its new
outputs and scratch changed; another tensor must be prepared anew; and nothing prepared may hold a tensor of
the call that prepared it. (That the kernels compute the right thing is tests/gpu's business.)"""

from __future__ import annotations

import functools
import gc
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from fake_cupy import clear_caches, install, ndarray
from small_configs import SMALL, packed_call

import maskc
from maskc import runtime
from maskc.diagnostics import ValueProblem
from maskc.runtime import BACKWARD_SLOTS, KEY_TABLE_ARGS, TABLE_ARGS
from maskc.runtime.launch import LaunchCache

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CAUSAL = EXAMPLES / "causal.mask"
N, HEADS, KV_HEADS = 256, 4, 2  # GQA: two query heads per key head


def _signatures(attn) -> dict[str, tuple]:
    compiled, options = attn.compiled, attn.compiled.options
    signatures = {compiled.name: options.family.forward_args}
    if options.backward is not None:
        signatures |= dict.fromkeys(compiled.backward_names, options.backward.args)
    return signatures


@pytest.fixture
def fake(monkeypatch):
    def installed(attn):
        return install(monkeypatch, _signatures(attn))
    yield installed
    clear_caches()


def _inputs(head_dim: int, packed: bool):
    shape_q = (N, HEADS, head_dim) if packed else (1, N, HEADS, head_dim)
    shape_k = shape_q[:-2] + (KV_HEADS, head_dim)
    q, k, v = ndarray(shape_q), ndarray(shape_k), ndarray(shape_k)
    lse = ndarray((HEADS, N) if packed else (1, HEADS, N), np.float32)
    return q, k, v, ndarray(shape_q), lse, ndarray(shape_q)


def _args(kernel_args, launch) -> dict[str, bytes]:
    """A recorded launch's arguments by name."""
    return {a.name: b for a, b in zip(kernel_args, launch.args)}


def _pointer(x) -> bytes:
    return x.data.ptr.to_bytes(8, "little")


BACKWARDS = [("sm_90a", 128, "hopper_fused"), ("sm_90a", 64, "hopper"), ("sm_80", 64, "portable")]


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize(("arch", "head_dim", "backward"), BACKWARDS)
def test_a_repeated_backward_launches_what_the_first_prepared_with_its_new_outputs(fake, arch, head_dim, backward,
                                                                                   packed):
    attn = maskc.load(CAUSAL, arch=arch, head_dim=head_dim, dtype="fp16", backward_kernels=backward)
    record = fake(attn)
    q, k, v, out, lse, d_out = _inputs(head_dim, packed)
    call = {"cu_seqlens": np.array([0, 100, N])} if packed else {}
    bwd = attn.compiled.options.backward
    slots = BACKWARD_SLOTS + (("dq_accum",) if bwd.fused else ())

    first = attn.backward(q, k, v, out, lse, d_out, **call)
    second = attn.backward(q, k, v, out, lse, d_out, **call)
    assert len(attn._backward_launches) == 1
    kernels = len(bwd.kernels)
    assert [x.kernel for x in record.launches] == 2 * list(attn.compiled.backward_names)
    for grads in (first, second):
        assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]
        assert all(g.dtype == np.float16 and g.strides == ndarray(g.shape).strides for g in grads)
    once, again = record.launches[:kernels], record.launches[kernels:]
    for a, b in zip(once, again):
        assert (a.grid, a.threads, a.shared) == (b.grid, b.threads, b.shared)
        assert b.args == again[0].args  # the kernels of one call share their arguments
        args_a, args_b = _args(bwd.args, a), _args(bwd.args, b)
        assert {n for n in args_a if args_a[n] != args_b[n]} == set(slots)  # only the new buffers' pointers
    for grads, launch in ((first, once[0]), (second, again[0])):
        args = _args(bwd.args, launch)
        assert [args[n] for n in ("dq", "dk", "dv")] == [_pointer(g) for g in grads]
        for name, heads in (("dq", HEADS), ("dk", KV_HEADS), ("dv", KV_HEADS)):  # contiguous, in elements
            strides = [int.from_bytes(args[f"{name}_stride_{d}"], "little") for d in "bth"]
            assert strides == [0 if packed else N * heads * head_dim, heads * head_dim, head_dim]
        scratch = [int.from_bytes(args[n], "little") for n in slots[3:]]  # delta, then dq_accum in one buffer
        assert 0 not in scratch and not set(scratch) & {g.data.ptr for g in first + second}
        if bwd.fused:
            lse_bytes = 4 * int(np.prod(lse.shape))
            assert scratch[1] - scratch[0] >= lse_bytes and scratch[1] % 256 == 0
    inputs = {"q": q, "k": k, "v": v, "o": out, "lse": lse, "dout": d_out}
    assert all(args[name] == _pointer(x) for name, x in inputs.items())


@pytest.mark.parametrize(("arch", "head_dim", "backward"), BACKWARDS)
def test_a_backward_given_other_tensors_is_prepared_for_them(fake, arch, head_dim, backward):
    attn = maskc.load(CAUSAL, arch=arch, head_dim=head_dim, dtype="fp16", backward_kernels=backward)
    record = fake(attn)
    q, k, v, out, lse, d_out = _inputs(head_dim, False)
    attn.backward(q, k, v, out, lse, d_out)
    other = ndarray(d_out.shape)
    attn.backward(q, k, v, out, lse, other)
    assert len(attn._backward_launches) == 2
    kernels = len(attn.compiled.options.backward.kernels)
    first, second = (_args(attn.compiled.options.backward.args, record.launches[i]) for i in (0, kernels))
    assert first["dout"] == _pointer(d_out) and second["dout"] == _pointer(other)
    if "tm_dout" in first:  # the Hopper kernels read dO through a tensor map of its address
        assert first["tm_dout"][:8] == _pointer(d_out) and second["tm_dout"][:8] == _pointer(other)


def test_a_repeated_forward_launches_what_the_first_prepared_with_its_new_outputs(fake):
    attn = maskc.load(CAUSAL, arch="sm_90a", head_dim=128, dtype="fp16")
    record = fake(attn)
    q, k, v, *_ = _inputs(128, False)
    out1, lse1 = attn(q, k, v, return_lse=True)
    out2, lse2 = attn(q, k, v, return_lse=True)
    args = attn.compiled.options.family.forward_args
    first, second = (_args(args, launch) for launch in record.launches)
    assert {n for n in first if first[n] != second[n]} == {"o", "lse"}
    assert (first["o"], first["lse"], second["o"], second["lse"]) == tuple(map(_pointer, (out1, lse1, out2, lse2)))
    assert first["tm_q"][:8] == _pointer(q) and first["work_counter"] != bytes(8)


def test_every_layer_of_a_deep_model_finds_its_launch_again(fake, monkeypatch):
    # A model of 40 layers calls one mask, each layer with tensors of its own: a step checks, plans and prepares
    # once, forward and backward (its first layer), and the other layers re-point that launch at their tensors;
    # the step after finds every layer's launch, and new runtime values begin again.
    attn = maskc.load(CAUSAL, arch="sm_90a", head_dim=128, dtype="fp16")
    fake(attn)
    layers = [_inputs(128, True) for _ in range(40)]
    prepared = []
    for name in ("_call", "_prepare_backward"):
        original = getattr(maskc.Attention, name)
        monkeypatch.setattr(maskc.Attention, name, functools.partialmethod(
            lambda self, *args, _original=original, _name=name: prepared.append(_name) or _original(self, *args)))
    rebound = []
    for cls in (runtime._Launch, runtime._BackwardLaunch):
        original = cls.rebound
        monkeypatch.setattr(cls, "rebound", lambda self, addresses, _original=original:
                            rebound.append(addresses) or _original(self, addresses))
    for cu_seqlens in ([0, 100, N], [0, 100, N], [0, 30, N]):
        for q, k, v, out, lse, d_out in layers:
            attn(q, k, v, cu_seqlens=np.array(cu_seqlens, dtype=np.int32))
        for q, k, v, out, lse, d_out in reversed(layers):
            attn.backward(q, k, v, out, lse, d_out, cu_seqlens=np.array(cu_seqlens, dtype=np.int32))
    assert prepared == ["_call", "_prepare_backward"] * 2
    assert len(rebound) == 2 * 2 * 39


REPOINTED = [("causal", "sm_90a", 128), ("causal", "sm_80", 64), ("sliding_window", "sm_90a", 64),
             ("full", "sm_90a", 256), ("clear", "sm_90a", 128), ("clear_text", "sm_90a", 64), ("clear", "sm_80", 128)]


@pytest.mark.parametrize(("name", "arch", "head_dim"), REPOINTED)
def test_a_launch_re_pointed_at_other_tensors_is_the_one_a_checked_call_prepares(fake, name, arch, head_dim):
    # The examples' small values, as a packed call: grids too, whose key tiles the Hopper kernels copy as whole
    # boxes through maps of their own (tm_k_box), made from the tensors' addresses as well.
    consts, sequences = SMALL[name]

    def load():
        return maskc.load(EXAMPLES / f"{name}.mask", arch=arch, head_dim=head_dim, dtype="fp16", **consts)

    lengths, keywords = packed_call(load(), sequences)
    tokens = sum(lengths)

    def tensors():
        q, out, d_out = (ndarray((tokens, HEADS, head_dim)) for _ in range(3))
        k, v = (ndarray((tokens, KV_HEADS, head_dim)) for _ in range(2))
        return q, k, v, out, ndarray((HEADS, tokens), np.float32), d_out

    first, second = tensors(), tensors()

    def launched(calls) -> list[dict]:
        """The arguments of the last call's forward and backward launches, kernel by kernel."""
        attn = load()
        record = fake(attn)
        for q, k, v, out, lse, d_out in calls:
            attn(q, k, v, **keywords)
            attn.backward(q, k, v, out, lse, d_out, **keywords)
        options = attn.compiled.options
        kernels = [options.family.forward_args] + [options.backward.args] * len(options.backward.kernels)
        return [_args(a, launch) for a, launch in zip(kernels, record.launches[-len(kernels):])]

    repointed = launched([first, second])  # the second call re-points the first one's launches
    clear_caches()
    checked = launched([second])
    # The same plan's tables and the scheduler's counters, made again after clear_caches; the outputs, new at
    # every call (a first call also gives the forward a buffer for LSE, which a repeated one leaves out).
    made_again = set(TABLE_ARGS + KEY_TABLE_ARGS) | {"work_counter"}
    for a, b in zip(repointed, checked, strict=True):
        new_at_every_call = set(BACKWARD_SLOTS) | {"dq_accum"} if "dq" in a else {"o", "lse"}
        assert {n for n in a if a[n] != b[n]} - made_again <= new_at_every_call
        assert a["q"] == _pointer(second[0]) if "q" in a else a["tm_q"][:8] == _pointer(second[0])
    if name.startswith("clear") and arch == "sm_90a":  # whole grid boxes: their maps moved with the tensors
        q, k, v, _, _, d_out = second
        for launch in repointed:  # the forward's Q and key tiles; the backward's steps of Q and dO, its K and V
            boxes = {"tm_q_box": q, "tm_k_box": k, "tm_v_box": v} | ({"tm_dout_box": d_out} if "dq" in launch else {})
            assert launch["grid_boxes"] == (1).to_bytes(4, "little")
            assert {n: launch[n][:8] for n in boxes} == {n: _pointer(t) for n, t in boxes.items()}


@pytest.mark.parametrize("backward", [False, True])
def test_a_layer_whose_tensors_the_kernels_cannot_read_is_refused_not_re_pointed(fake, backward):
    attn = maskc.load(CAUSAL, arch="sm_90a", head_dim=128, dtype="fp16")
    fake(attn)
    q, k, v, out, lse, d_out = _inputs(128, False)
    attn(q, k, v)
    attn.backward(q, k, v, out, lse, d_out)
    moved = ndarray(q.shape, ptr=q.data.ptr + 8 * 4096 + 2)  # the same signature, rows 2 bytes off 16
    with pytest.raises(ValueError, match="16-byte aligned"):
        if backward:
            attn.backward(q, k, v, out, lse, moved)
        else:
            attn(moved, k, v)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_strides_the_kernels_cannot_follow_are_refused(fake, arch):
    # The Hopper kernels read q, k and v through TMA maps, which take positive strides only: an expanded k (MQA
    # written as k.expand) or a flipped q is refused, not read from the wrong place. The portable kernel follows
    # any stride. An out= whose rows overlap, or are not 16-byte aligned, is refused by both.
    attn = maskc.load(CAUSAL, arch=arch, head_dim=128, dtype="fp16")
    record = fake(attn)
    q, k, v, out, *_ = _inputs(128, True)
    expanded = ndarray(k.shape, strides=(128 * 2, 0, 2), ptr=k.data.ptr)  # one head's data for every head
    flipped = ndarray((N, HEADS, 128), strides=(-HEADS * 128 * 2, 128 * 2, 2), ptr=q.data.ptr + (N - 1) * HEADS * 256)
    cu = np.array([0, N], dtype=np.int32)
    for name, call in (("k", lambda: attn(q, expanded, v, cu_seqlens=cu)), ("q", lambda: attn(flipped, k, v, cu_seqlens=cu))):
        if arch == "sm_90a":
            with pytest.raises(ValueError, match=f"{name} has stride .* positive strides"):
                call()
        else:
            call()
    overlapping = ndarray((N, HEADS, 128), strides=(0, 256, 2), ptr=out.data.ptr)
    with pytest.raises(ValueError, match="out's rows overlap"):
        attn(q, k, v, cu_seqlens=cu, out=overlapping)
    shifted = ndarray(out.shape, ptr=out.data.ptr + 4)  # rows 4-byte aligned: the kernels write O 16 bytes at a time
    with pytest.raises(ValueError, match="out's .* rows 16-byte aligned"):
        attn(q, k, v, cu_seqlens=cu, out=shifted)
    assert len(record.launches) == (0 if arch == "sm_90a" else 2)


def test_a_repeated_call_refuses_what_the_first_call_would(fake):
    # Values equal to accepted ones but of another type (True for 1, 300.0 for 300) are not taken for them.
    attn = maskc.load(EXAMPLES / "hstu.mask", arch="sm_90a", head_dim=128, dtype="fp16")
    fake(attn)
    q, k, v = (ndarray((600, HEADS, 128)) for _ in range(3))
    attn(q, k, v, cu_seqlens=[0, 300, 600], targets=16, scale=1)
    with pytest.raises(ValueError, match="scale must be"):
        attn(q, k, v, cu_seqlens=[0, 300, 600], targets=16, scale=True)
    with pytest.raises(ValueError, match="cu_seqlens must be a 1-D integer array"):
        attn(q, k, v, cu_seqlens=[0, 300.0, 600.0], targets=16, scale=1)
    for odd in ({16}, bytearray(b"1"), [{1}, {2}]):  # unhashable: refused by the checks, not by the cache's key
        with pytest.raises(ValueError, match="'targets' is an int"):
            attn(q, k, v, cu_seqlens=[0, 300, 600], targets=odd)
    with pytest.raises(ValueError, match="scale must be"):  # scale * log2(e) is 0 as a float32
        attn(q, k, v, cu_seqlens=[0, 300, 600], targets=16, scale=1e-50)


def test_the_launches_kept_are_those_of_the_most_recent_plans():
    cache = LaunchCache(plans=2, launches=5)
    plans = [object() for _ in range(3)]
    for layer in range(2):
        cache.put(("a", layer), "A", plans[0])
        cache.put(("b", layer), "B", plans[1])
    assert len(cache) == 4 and cache.get(("a", 1)) == "A"
    cache.put(("c", 0), "C", plans[2])  # a third plan: the first one's launches go
    assert sorted(cache.items()) == [(("b", 0), "B"), (("b", 1), "B"), (("c", 0), "C")]
    for layer in range(1, 4):
        cache.put(("c", layer), "C", plans[2])  # past 5 launches: the oldest go first
    assert [key for key, _ in cache.items()] == [("b", 1), ("c", 0), ("c", 1), ("c", 2), ("c", 3)]
    cache.put(("b", 1), "B again", plans[2])  # a key prepared again, for another plan: one entry, that plan's
    cache.put(("d", 0), "D", plans[0])
    assert [key for key, _ in cache.items()] == [("c", 1), ("c", 2), ("c", 3), ("b", 1), ("d", 0)]
    cache.clear()
    assert len(cache) == 0 and cache.get(("d", 0)) is None


def test_nothing_prepared_holds_a_tensor_of_the_call_that_prepared_it(fake):
    attn = maskc.load(CAUSAL, arch="sm_90a", head_dim=128, dtype="fp16")
    fake(attn)
    q, k, v, out, lse, d_out = _inputs(128, False)
    attn(q, k, v)
    attn.backward(q, k, v, out, lse, d_out)
    gone = [weakref.ref(x) for x in (q, k, v, out, lse, d_out)]
    del q, k, v, out, lse, d_out
    gc.collect()
    assert [ref() for ref in gone] == [None] * 6


class _TorchLike:
    """What _call_key reads of a torch cu_seqlens: a tensor whose memory a new one may take over, with the same
    id, address and version (as a training step's new cu_seqlens often does)."""

    __module__ = "torch"

    def __init__(self, values, device: str):
        self.values, self.device, self.dtype, self._version = np.array(values), _Device(device), "int32", 0

    def numpy(self):
        return self.values

    def data_ptr(self) -> int:
        return 1 << 40


class _Device:
    def __init__(self, type: str):
        self.type = type


def test_a_new_cu_seqlens_in_an_old_ones_place_never_finds_its_launch():
    """A torch cu_seqlens on the host is keyed by its content; one on the GPU by the tensor, which the key holds,
    so that no other tensor can take its id and address while the launch is cached."""
    from maskc.runtime import _call_key

    q, k, v, *_ = _inputs(64, True)
    host = _TorchLike([0, 100, N], "cpu")
    key = _call_key(q, k, v, host, None, None, None, {})
    host.values = np.array([0, 50, N])  # a new tensor in the old one's place
    assert _call_key(q, k, v, host, None, None, None, {}) != key
    assert _call_key(q, k, v, _TorchLike([0, 50, N], "cpu"), None, None, None, {}) == \
        _call_key(q, k, v, host, None, None, None, {})

    gpu = _TorchLike([0, 100, N], "cuda")
    key = _call_key(q, k, v, gpu, None, None, None, {})
    assert key == _call_key(q, k, v, gpu, None, None, None, {})
    assert key != _call_key(q, k, v, _TorchLike([0, 100, N], "cuda"), None, None, None, {})
    held = weakref.ref(gpu)
    del gpu
    gc.collect()
    assert held() is not None, "the key must hold a GPU cu_seqlens while it is cached"
    del key
    gc.collect()
    assert held() is None


def test_through_cupy_a_launch_passes_the_same_arguments(fake, monkeypatch):
    """MASKC_DIRECT_LAUNCH=0 launches through CuPy (the fallback where cuda-bindings refuses the direct call):
    the same kernels, shapes and argument bytes as the driver's launch, but for the new buffers' pointers."""
    q, k, v, out, lse, d_out = _inputs(128, False)
    records, record = [], None
    for direct in ("1", "0"):
        monkeypatch.setenv("MASKC_DIRECT_LAUNCH", direct)
        attn = maskc.load(CAUSAL, arch="sm_90a", head_dim=128, dtype="fp16")
        record = record or fake(attn)
        attn.backward(q, k, v, out, lse, d_out)
        grads = attn.backward(q, k, v, out, lse, d_out)  # the prepared launch
        last = _args(attn.compiled.options.backward.args, record.launches[-1])
        assert [last[n] for n in ("dq", "dk", "dv")] == [_pointer(g) for g in grads]
        records.append(list(record.launches))
        record.launches.clear()
    bwd = attn.compiled.options.backward
    tables = {"work", "row_ptr", "k_tiles", "kinds", "seq_table", "seg_start", "seg_code", "arrays", "key_work",
              "col_ptr", "q_tiles", "q_kinds", "q_items"}  # each Attention plans and uploads its own
    slots = set(BACKWARD_SLOTS) | {"dq_accum"} | tables
    assert len(records[0]) == len(records[1]) == 2 * len(bwd.kernels)
    for a, b in zip(*records):
        assert (a.kernel, a.grid, a.threads, a.shared) == (b.kernel, b.grid, b.threads, b.shared)
        args_a, args_b = _args(bwd.args, a), _args(bwd.args, b)
        assert {n for n in args_a if args_a[n] != args_b[n]} <= slots


# -- Any input: a launch or a ValueError ---------------------------------------------------------------------

DOCUMENT = EXAMPLES / "document.mask"


@st.composite
def _arrays(draw, shape, broken: bool):
    """An array of this shape, fp16, contiguous or heads first (both valid); if `broken`, with one thing drawn
    around the valid ones: an extent, the rank, the dtype, the strides or the address."""
    shape = list(shape)
    change = draw(st.sampled_from(["extent", "rank", "dtype", "strides", "address"] if broken else
                                  ["none", "none", "heads first"]))
    dtype = np.float16
    if change == "extent" and shape:
        shape[draw(st.integers(0, len(shape) - 1))] = draw(st.integers(0, 70))
    elif change == "rank":
        shape = shape[:-1] if draw(st.booleans()) and shape else shape + [2]
    elif change == "dtype":
        dtype = draw(st.sampled_from([np.float32, np.int32, np.float64, np.uint8]))
    array = ndarray(shape, dtype)
    if change == "strides" and shape:
        array.strides = tuple(draw(st.integers(-4, 4096)) * array.itemsize for _ in shape)
    elif change == "heads first":  # [.., H, N, D] in memory
        *batch, tokens, heads, dim = shape
        inner = (dim, tokens * dim, 1)
        array.strides = tuple(x * array.itemsize for x in [heads * tokens * dim] * len(batch) + list(inner))
    elif change == "address":
        array.data.ptr += draw(st.sampled_from([2, 8, 16 << 20]))
    return array


FAULTS = ["none"] * 4 + ["q", "k", "v", "cu_seqlens", "docs", "scale", "unknown name", "out", "lse", "d_out"]


@st.composite
def _calls(draw):
    """q, k, v and the call's keywords for examples/document.mask (docs: [int], one list per sequence): valid,
    or with one fault (the heads of q and k, which must divide, are drawn with or without one)."""
    fault = draw(st.sampled_from(FAULTS))
    packed = draw(st.booleans())
    heads, kv_heads = draw(st.sampled_from([(4, 2), (4, 4), (4, 1), (0, 1), (3, 2), (2, 0)]))
    tokens, batch = draw(st.integers(0, 300)), draw(st.integers(0, 3))
    q_shape = (tokens, heads, 64) if packed else (batch, tokens, heads, 64)
    kv_shape = q_shape[:-2] + (kv_heads, 64)
    q, k, v = (draw(_arrays(shape, fault == name)) for name, shape in (("q", q_shape), ("k", kv_shape),
                                                                       ("v", kv_shape)))
    keywords, lengths = {}, [tokens] * batch
    if packed:
        cut = draw(st.integers(0, tokens))
        bounds = [0, cut, tokens]
        if fault == "cu_seqlens":
            bounds = draw(st.sampled_from([[0, tokens + 1, tokens], [1, tokens], [0, cut], [], [[0, tokens]],
                                           [0, tokens + 1], [0, tokens, cut - 1]]))
        keywords["cu_seqlens"] = draw(st.sampled_from([bounds, np.array(bounds, dtype=np.int32), tuple(bounds)] +
                                                      ([np.array(bounds, dtype=np.float32)] if fault == "cu_seqlens"
                                                       else [])))
        lengths = [cut, tokens - cut]
    elif fault == "cu_seqlens":
        keywords["cu_seqlens"] = [0, tokens]  # with a padded q
    docs = [[n] if n < 2 else [n // 2, n - n // 2] for n in lengths]  # documents that fill each sequence
    keywords["docs"] = docs if len(set(map(tuple, docs))) != 1 or draw(st.booleans()) else docs[0] if docs else []
    if fault == "docs":
        keywords["docs"] = draw(st.sampled_from([[[-1, 2]], [[]], [["a"]], 5, "x", [[tokens + 1]], [1.5], None,
                                                 [docs[0]] * (len(docs) + 1) if docs else [[1]]]))
    if fault == "scale" or draw(st.integers(0, 5)) == 0:
        keywords["scale"] = draw(st.sampled_from([0.0, -1.0, float("nan"), float("inf"), "x", True, 1e300, [0.5]]
                                                 if fault == "scale" else [0.125, None, np.float32(0.5), 2]))
    if fault == "unknown name":
        keywords[draw(st.sampled_from(["window", "n", "lengths"]))] = 3
    # The outputs (the forward's out= and lse=, drawn or not) and the backward's inputs out, lse and d_out.
    lse_shape = (heads, tokens) if packed else (batch, heads, tokens)
    outputs = {"out": draw(_arrays(q_shape, fault == "out")), "d_out": draw(_arrays(q_shape, fault == "d_out")),
               "lse": ndarray(lse_shape, np.float32)}
    if fault == "lse":
        outputs["lse"] = draw(st.sampled_from([ndarray(lse_shape, np.float16), ndarray(lse_shape[:-1], np.float32),
                                               ndarray(lse_shape[::-1], np.float32) if heads != tokens else None]))
    return q, k, v, keywords, outputs, draw(st.sampled_from([(), ("out",), ("lse",), ("out", "lse")]))


@settings(max_examples=300, deadline=None)
@given(call=_calls(), backward=st.booleans())
def test_any_call_launches_or_says_what_is_wrong(call, backward):
    """Whatever the tensors (shapes, dtypes, strides, addresses), cu_seqlens, runtime values and scale, a call
    and a backward call either launch or raise a ValueError; nothing else escapes (no TypeError, IndexError,
    struct.error, ...), and a call that launched does so again from its prepared launch."""
    attn = _document_attention()
    with pytest.MonkeyPatch.context() as monkeypatch:
        try:
            _call_twice(attn, install(monkeypatch, _signatures(attn)), backward, *call)
        finally:
            clear_caches()
            attn._launches.clear()  # (their kernels are this example's fakes)
            attn._backward_launches.clear()


def _call_twice(attn, record, backward, q, k, v, keywords, outputs, given):
    launched = []
    for _ in range(2):
        try:
            if backward:
                grads = attn.backward(q, k, v, outputs["out"], outputs["lse"], outputs["d_out"], **keywords)
                assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]
            else:
                out = attn(q, k, v, **keywords, **{name: outputs[name] for name in given})
                assert out.shape == q.shape and ("out" not in given or out is outputs["out"])
        except ValueError as error:
            assert str(error) and not record.launches  # refused before anything ran, and says why
            return
        launched.append(len(record.launches))
    assert launched[1] == 2 * launched[0]  # the repeated call ran the same kernels again


@functools.lru_cache(maxsize=1)
def _document_attention():
    return maskc.load(DOCUMENT, arch="sm_90a", head_dim=64, dtype="fp16")


def test_a_packed_call_of_long_documents_plans_each_document_as_a_sequence_and_short_ones_together(fake, monkeypatch):
    """maskc.plan.members: the forward, its backward and a plan made ahead all plan the members as sequences (at
    their token offsets) where that visits fewer tiles, and the sequences as given where it does not."""
    from maskc.compiler import CompiledMask
    from maskc.runtime import Attention

    attn = _document_attention()
    fake(attn)
    planned, tables = [], CompiledMask.tables
    monkeypatch.setattr(CompiledMask, "tables", lambda self, seqs, offsets, **kw: planned.append(
        ([s["n"] for s in seqs], offsets.tolist())) or tables(self, seqs, offsets, **kw))
    q, k, v = ndarray((2300, 4, 64)), ndarray((2300, 2, 64)), ndarray((2300, 2, 64))
    call = {"cu_seqlens": [0, 300, 2300], "docs": [[300], [1000, 1000]]}
    out, lse = attn(q, k, v, return_lse=True, **call)
    attn.backward(q, k, v, out, lse, ndarray(q.shape), **call)
    attn.plan(**call)
    assert planned and all(p == ([300, 1000, 1000], [0, 300, 1300]) for p in planned)
    planned.clear()
    attn(q, k, v, cu_seqlens=[0, 300, 2300], docs=[[300], [60] * 30 + [200]])
    assert planned == [([300, 2000], [0, 300])]
    monkeypatch.setenv("MASKC_MEMBERS", "0")  # (read when an Attention is made)
    planned.clear()
    together = Attention(attn.compiled)
    fake(together)
    together(q, k, v, **call)
    assert planned == [([300, 2000], [0, 300])]


DIVIDED_DOCUMENTS = """mask divided(docs: [int], w: int = 3)
segments:
    D[i] = docs[i]
rules:
    D[i] -> D[i] where k <= q and (q - k) // w < 2
"""


def test_values_a_split_call_refuses_are_reported_of_the_sequences_as_given(fake, monkeypatch):
    """A member's index and n are not the caller's: a zero divisor in a call that splits names the caller's
    sequence, in the forward and in a plan made ahead."""
    from maskc.compiler import CompiledMask

    attn = maskc.loads(DIVIDED_DOCUMENTS, arch="sm_90a", head_dim=64, dtype="fp16")
    fake(attn)
    planned, tables = [], CompiledMask.tables
    monkeypatch.setattr(CompiledMask, "tables", lambda self, seqs, offsets, **kw: planned.append(
        [s["n"] for s in seqs]) or tables(self, seqs, offsets, **kw))
    call = {"cu_seqlens": [0, 2000, 2300], "docs": [[1000, 1000], [300]]}
    attn.plan(**call, w=[3, 3])
    assert planned == [[1000, 1000, 300]]  # (these values split)
    q, k, v = ndarray((2300, 2, 64)), ndarray((2300, 2, 64)), ndarray((2300, 2, 64))
    for run in (lambda: attn.plan(**call, w=[3, 0]), lambda: attn(q, k, v, **call, w=[3, 0])):
        with pytest.raises(ValueProblem, match=r"sequence 1: the divisor w is zero \(n = 300, w = 0\)"):
            run()


def test_a_call_and_its_backward_given_a_plan_made_ahead_launch_with_its_tables(fake):
    """`plan=` (a plan made in a DataLoader worker, pickled): the call checks it is for its values, adopts it
    (the plan cache then holds the plan's own tables) and launches; a plan for other values is refused first."""
    import pickle

    attn = _document_attention()
    record = fake(attn)
    q, k, v = ndarray((300, 4, 64)), ndarray((300, 2, 64)), ndarray((300, 2, 64))
    call = {"cu_seqlens": [0, 120, 300], "docs": [[60, 60], [180]]}
    plan = pickle.loads(pickle.dumps(attn.plan(**call)))
    other = attn.plan(cu_seqlens=[0, 150, 300], docs=[[150], [150]])
    with pytest.raises(ValueError, match="other runtime values"):
        attn(q, k, v, plan=other, **call)
    assert not record.launches
    out, lse = attn(q, k, v, plan=plan, return_lse=True, **call)
    assert len(record.launches) == 1
    # (the sequences as planned: maskc.plan.members may run the documents apart)
    _, offsets, sequences, _ = attn._split_members([120, 180], np.array([0, 120]),
                                                   attn.sequences([120, 180], {"docs": call["docs"]}), None)
    assert attn.compiled.tables(sequences, offsets)[1] is plan.tables[1]
    attn.backward(q, k, v, out, lse, ndarray(q.shape), plan=plan, **call)
    assert len(record.launches) == 1 + len(attn.compiled.options.backward.kernels)


def test_threads_sharing_a_prepared_launch_each_launch_with_their_own_outputs(fake):
    """The pointer slots of a prepared launch are shared by every call of its signature: a launch sets them and
    launches under one lock, so each thread's kernels write that thread's new outputs, forward and backward."""
    import sys
    import threading

    attn = maskc.load(CAUSAL, arch="sm_90a", head_dim=128, dtype="fp16")
    record = fake(attn)
    q, k, v, out, lse, d_out = _inputs(128, False)
    attn(q, k, v)
    attn.backward(q, k, v, out, lse, d_out)  # both prepared
    forward_args, backward_args = attn.compiled.options.family.forward_args, attn.compiled.options.backward.args
    results, errors = [], []

    def work():
        try:
            for _ in range(200):
                results.append(("fwd", attn(q, k, v).data.ptr))
                results.append(("bwd", attn.backward(q, k, v, out, lse, d_out)[0].data.ptr))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch as often as they can
    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors
    written = {"fwd": [], "bwd": []}
    for launch in record.launches:
        if launch.kernel == attn.compiled.name:
            written["fwd"].append(int.from_bytes(_args(forward_args, launch)["o"], "little"))
        elif launch.kernel == attn.compiled.backward_names[-1]:  # each backward's last kernel
            written["bwd"].append(int.from_bytes(_args(backward_args, launch)["dq"], "little"))
    for kind in ("fwd", "bwd"):
        mine = sorted(ptr for k, ptr in results if k == kind)
        assert sorted(written[kind][1:]) == mine  # (the first launch was the preparing call's)


# Every example with the default pass of the H200 (the fused Hopper backward); a 1D, a grid, a tree and a
# per-sequence-list mask with the Hopper pair (head dim 64) and the portable kernels too (each builds two cubins).
LAUNCHED = ([(name, "sm_90a", 128) for name in sorted(SMALL)] +
            [(name, arch, 64) for name in ("causal", "clear_text", "tree", "rm_shared") for arch in ("sm_90a", "sm_80")])


@pytest.fixture(scope="module")
def launched_cubins():
    """The cubins of LAUNCHED built ahead, two at a time (NVRTC releases the GIL), into the cache every load finds."""
    def build(config):
        name, arch, head_dim = config
        compiled = maskc.load(EXAMPLES / f"{name}.mask", arch=arch, head_dim=head_dim, dtype="fp16",
                              **SMALL[name][0]).compiled
        return compiled.cubin, compiled.backward_cubin

    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(build, LAUNCHED))


@pytest.mark.parametrize(("name", "arch", "head_dim"), LAUNCHED)
def test_every_example_launches_forward_and_backward_and_again(fake, launched_cubins, name, arch, head_dim):
    """Every example's small batch (packed, its runtime values one per sequence, GQA): the forward and the
    backward launch, and their repeated calls launch the same kernels with the same arguments but for their new
    outputs (grid masks' box maps, trees' tables and per-sequence lists included)."""
    consts, sequences = SMALL[name]
    attn = maskc.load(EXAMPLES / f"{name}.mask", arch=arch, head_dim=head_dim, dtype="fp16", **consts)
    record = fake(attn)
    lengths, call = packed_call(attn, sequences)
    tokens = sum(lengths)
    q, out, d_out = (ndarray((tokens, 4, head_dim)) for _ in range(3))
    k, v = ndarray((tokens, 2, head_dim)), ndarray((tokens, 2, head_dim))
    forward = attn.compiled.options.family.forward_args
    bwd = attn.compiled.options.backward
    for _ in range(2):
        attn(q, k, v, out=out, **call)
        attn.backward(q, k, v, out, ndarray((4, tokens), np.float32), d_out, **call)
    per_call = 1 + len(bwd.kernels)
    assert [x.kernel for x in record.launches] == 2 * [attn.compiled.name, *attn.compiled.backward_names]
    first, again = record.launches[:per_call], record.launches[per_call:]
    fwd_a, fwd_b = _args(forward, first[0]), _args(forward, again[0])
    assert {n for n in fwd_a if fwd_a[n] != fwd_b[n]} <= {"lse"} and fwd_b["lse"] == bytes(8)  # (no LSE asked for)
    slots = set(BACKWARD_SLOTS) | {"dq_accum", "lse"}  # (a new lse array each call here)
    for a, b in zip(first[1:], again[1:]):
        args_a, args_b = _args(bwd.args, a), _args(bwd.args, b)
        assert {n for n in args_a if args_a[n] != args_b[n]} <= slots


def test_a_launch_makes_its_device_current_only_where_another_one_is(fake):
    """CuPy's device context costs ~1 us a launch: a launch on the current device goes without it; where another
    device is current, the launch makes its own current for the kernels and restores the other after."""
    from fake_cupy import STREAM

    attn = maskc.load(CAUSAL, arch="sm_90a", head_dim=128, dtype="fp16")
    record = fake(attn)
    q, k, v, out, lse, d_out = _inputs(128, False)
    attn(q, k, v)
    attn.backward(q, k, v, out, lse, d_out)
    (forward,), (backward,) = attn._launches.values(), attn._backward_launches.values()
    launches = [lambda: forward.prepared.launch(STREAM, 1 << 20, 0),
                lambda: backward.prepared.launch(STREAM, *(n << 20 for n in range(2, 7)))]
    for current, entered in ((0, 0), (1, 1)):
        for launch in launches:
            record.current_device, record.device_contexts, record.device_switches = current, 0, 0
            before = len(record.launches)
            launch()
            assert len(record.launches) > before
            assert (record.device_contexts, record.device_switches, record.current_device) == (entered, entered, current)


@pytest.mark.parametrize("name", ["tree", "rm_shared", "clear_text"])
def test_the_plans_tables_are_on_the_device_where_the_arguments_point(fake, name):
    """A plan's tables (and the backward's by key tile) go to the device in one copy; each table argument points
    at its table's bytes there."""
    from fake_cupy import device_bytes

    from maskc.runtime import KEY_TABLE_ARGS, TABLE_ARGS

    consts, sequences = SMALL[name]
    attn = maskc.load(EXAMPLES / f"{name}.mask", arch="sm_90a", head_dim=64, dtype="fp16", **consts)
    record = fake(attn)
    lengths, call = packed_call(attn, sequences)
    tokens = sum(lengths)
    q, out, d_out = (ndarray((tokens, 2, 64)) for _ in range(3))
    attn(q, q, q, out=out, **call)
    attn.backward(q, q, q, out, ndarray((2, tokens), np.float32), d_out, **call)
    plan = attn.plan(**call)
    tables, key_tables = plan.tables[1].arrays_in_order(), plan.key_tables.arrays_in_order()
    forward = _args(attn.compiled.options.family.forward_args, record.launches[0])
    backward = _args(attn.compiled.options.backward.args, record.launches[1])
    for args, names, arrays in ((forward, TABLE_ARGS, tables), (backward, TABLE_ARGS + KEY_TABLE_ARGS,
                                                                tables + key_tables)):
        for arg, table in zip(names, arrays):
            address = int.from_bytes(args[arg], "little")
            assert address % 256 == 0
            assert device_bytes(record, address, table.nbytes) == np.ascontiguousarray(table).tobytes(), arg


def test_a_backward_finds_what_its_forwards_checks_found_and_a_list_changed_in_place_is_new(fake, monkeypatch):
    """A backward call given its forward's runtime values (equal ones: other objects) finds what the forward's
    checks found of them, its plan key included (Attention._checked_values, keyed by content); a list changed in
    place since is new values, checked and planned for anew."""
    from maskc.compiler import CompiledMask

    attn = maskc.load(DOCUMENT, arch="sm_90a", head_dim=64, dtype="fp16")
    record = fake(attn)
    made, plan_key = [], CompiledMask.plan_key
    monkeypatch.setattr(CompiledMask, "plan_key", staticmethod(lambda *a: made.append(a) or plan_key(*a)))
    q, k, v = ndarray((300, 4, 64)), ndarray((300, 2, 64)), ndarray((300, 2, 64))
    docs = [[60, 60], [180]]
    out, lse = attn(q, k, v, cu_seqlens=[0, 120, 300], docs=docs, return_lse=True)
    attn.backward(q, k, v, out, lse, ndarray(q.shape), cu_seqlens=[0, 120, 300], docs=[[60, 60], [180]])
    assert len(made) == 1 and len(attn.compiled._plans) == 1 and len(attn._checked_values) == 1
    docs[0][:] = [30, 90]
    attn.backward(q, k, v, out, lse, ndarray(q.shape), cu_seqlens=[0, 120, 300], docs=docs)
    assert len(made) == 2 and len(attn.compiled._plans) == 2 and len(attn._checked_values) == 2
    _, offsets, sequences, _ = attn._split_members([120, 180], np.array([0, 120]),
                                                   attn.sequences([120, 180], {"docs": [[30, 90], [180]]}), None)
    new = plan_key(sequences, offsets)
    assert list(attn.compiled._plans)[-1] == new
    assert len(record.launches) == 1 + 2 * len(attn.compiled.options.backward.kernels)
