"""Masks no one wrote by hand, on the GPU: random valid `.mask` programs from the grammar fuzzer's strategy
(tests/mask_strategies.py), each compiled for a kernel family and run forward and backward on fresh random
inputs (packed ragged batches, GQA, bf16 or fp16, head dims 64, 128 and 256 where the family has them), against
a float64 reference of the mask its oracle computes by brute force (independently of maskc's IR, planner and
generated code).

The examples' GPU tests cover the masks we know; these cover the ones users will write: predicates the
interval analysis cannot read, empty rows, sequences of one token, rules that see nothing, segments of every
kind. A fresh seed every run (a failure prints the program and its values, and hypothesis's blob replays it).
`MASKC_GPU_FUZZ_EXAMPLES=N` sets the examples per pass and head dim (default 6), `MASKC_FUZZ_SEED=S` fixes the
seed, `MASKC_GPU_FUZZ_LOG=PATH` appends each failing example to PATH as soon as it fails. Pass rules as in
test_kernels (output, LSE) and test_backward (gradients). Run with `pytest -m gpu`.
"""

from __future__ import annotations

import contextlib
import math
import os

import mask_strategies as ms
import pytest
from hypothesis import HealthCheck, given, note, seed, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

import maskc  # noqa: E402
from maskc.kernels import KernelOptions  # noqa: E402

from test_backward import PASS_IDS, PASSES, check_grads, poison_allocator, supported  # noqa: E402
from test_kernels import check, make_inputs  # noqa: E402

EXAMPLES = int(os.environ.get("MASKC_GPU_FUZZ_EXAMPLES", "6"))
SEED = os.environ.get("MASKC_FUZZ_SEED")
LOG = os.environ.get("MASKC_GPU_FUZZ_LOG")
HEADS = (4, 2)  # GQA: two query heads share each key head


def fuzz(test):
    # Each example compiles its kernels (NVRTC, a few seconds): few examples, no deadline, and no database
    # (the blob in a failure's report replays it).
    test = settings(max_examples=EXAMPLES, deadline=None, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])(test)
    return seed(int(SEED))(test) if SEED is not None else test


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("backward", PASSES, ids=PASS_IDS)
@fuzz
@given(case=ms.cases(max_sequences=3), dtype=st.sampled_from(["bf16", "fp16"]))
def test_random_masks_forward_and_gradients(case, dtype, backward, head_dim):
    arch, kernels = backward
    if head_dim not in KernelOptions(arch=arch).family.head_dims:
        pytest.skip(f"head dim {head_dim} is not a {arch} option")
    supported(arch, kernels, head_dim)
    oracle = ms.Oracle(case.program, ms.const_values(case))
    ok, _ = ms.split_sequences(case, oracle)  # (some may hold no token)
    if not ok or all(layout.n == 0 for _, layout in ok):
        return
    what = f"--- program:\n{case.text}\nconsts {case.consts}\nsequences {[v for v, _ in ok]}\n{dtype}"
    note(what)
    with reported_failures(f"{what}, head dim {head_dim}, {arch} {kernels or 'default'} pass"):
        run_case(case, ok, oracle, dtype, arch, kernels, head_dim)


@contextlib.contextmanager
def reported_failures(what: str):
    """With MASKC_GPU_FUZZ_LOG set, each failing example is appended to that file at once: hypothesis reports a
    failure only once it has shrunk it, and a device call's time limit can stop the run before then."""
    try:
        yield
    except Exception as exc:
        if LOG:
            with open(LOG, "a") as f:
                f.write(f"{what}\n{type(exc).__name__}: {exc}\n\n")
        raise


def run_case(case, ok, oracle, dtype, arch, kernels, head_dim):
    """The forward with poisoned outputs, then the gradients through autograd, each against the reference."""
    options = {} if kernels is None else {"backward_kernels": kernels}
    attn = maskc.loads(case.text, head_dim=head_dim, dtype=dtype, arch=arch, **options, **case.consts)
    (q, k, v, d_out), call, _, layouts = make_inputs(attn, [values for values, _ in ok], HEADS, tensors=4,
                                                     seed=case.seed)
    lengths = [lay.n for lay in layouts]
    masks = [oracle.mask(values, layout) for values, layout in ok]
    scale = 1.0 / math.sqrt(head_dim)

    out = torch.full_like(q, float("nan"))  # poisoned: every element must be written
    lse = torch.full((HEADS[0], sum(lengths)), float("nan"), device="cuda")
    attn(q, k, v, out=out, lse=lse, return_lse=True, **call)
    torch.cuda.synchronize()
    check(out, lse, q, k, v, masks, lengths, scale, packed=True)

    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    grad_out = attn(*leaves, **call)
    poison_allocator()
    grad_out.backward(d_out)
    torch.cuda.synchronize()
    check_grads([x.grad for x in leaves], (q, k, v, d_out), masks, lengths, scale, packed=True)
