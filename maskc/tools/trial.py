"""What `maskc run` does: run a compiled mask on random inputs and check the result.

With a usable GPU (PyTorch and CuPy, a CUDA device): launch the kernel, compare sampled rows with a float32
reference, and time it. Without one: build the cubin anyway, check the descriptor against the brute-force
mask and run the CPU model of the kernel's tile loop (`reference.simulate`) against dense attention.
Both work at the sizes asked for; when those are large, a sample of query rows (whole query tiles on the
CPU) is checked against brute force, always including the first and the last.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from maskc import ir
from maskc.compiler import CompiledMask, compile_program
from maskc.kernels import KernelOptions, TileKind
from maskc.plan.layout import ConcreteLayout, SequenceValues
from maskc.plan.planner import Descriptor
from maskc.tools.explain import COUNTED_TILES_MAX, VisitedTiles, entries_to_count, tile_tokens, visible_per_tile
from maskc.tools.reference import attention, attention_backward, simulate, simulate_backward, visible

CPU_PAIR_BUDGET = 1 << 25  # (query row, key) pairs checked by brute force on the CPU, over all sequences
CPU_MAX_TOKENS = 1 << 18  # the CPU model holds q, k and v of every sequence in float32
CPU_TOLERANCE = 1e-4  # float32 tile loop against float64 attention, inputs ~ N(0, 1)
CPU_GRAD_TOKENS = 4096  # the CPU model of the backward pass runs on every row and key: short batches only
GPU_EXACT_ROWS = 1024  # sequences up to this length are checked on every row
GPU_SAMPLED_ROWS = 256  # longer ones on this many random rows, plus the first and the last ...
GPU_CHECK_PAIRS = 1 << 26  # ... fewer where rows x n would pass this: the reference holds a score per (row, key)
GPU_WARMUP, GPU_REPEATS = 3, 20
GPU_GRAD_EXACT = 4096  # dk and dv (a sum over every row) are checked on sequences up to this length


def sequence_lengths(compiled, sequences: list[dict]) -> list[int]:
    """How many tokens each of these sequences has (binding costs microseconds; a plan can cost seconds)."""
    return [lay.n for lay in compiled.bind(sequences)[1]]


def gpu_problem() -> str | None:
    """Why the GPU path cannot run here, or None when it can."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed (pip install 'maskc[gpu]')"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA GPU"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "CuPy sees no CUDA GPU"
    except Exception as exc:  # a driver problem shows up here, whatever its type
        return f"CuPy cannot use the GPU ({exc})"
    return None


def _describe_sizes(lengths: list[int], origin: str) -> str:
    if len(lengths) == 1:
        return f"1 sequence of {lengths[0]:,} tokens ({origin})"
    return f"{len(lengths)} sequences, {sum(lengths):,} tokens ({origin})"


def _max_abs(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b|, where equal infinities (LSE = -inf of empty rows) count as no difference."""
    if a.size == 0:
        return 0.0
    with np.errstate(invalid="ignore"):
        diff = np.where(a == b, 0.0, np.abs(a.astype(np.float64) - b.astype(np.float64)))
    diff[np.isnan(diff)] = np.inf  # a NaN is as wrong as it gets
    return float(diff.max())


# ---------------------------------------------------------------------------------------------------
# Without a GPU
# ---------------------------------------------------------------------------------------------------


@dataclass
class CpuCheck:
    mask: str
    sizes: str
    arch: str
    cubin_bytes: int
    head_dim: int
    rows_checked: int
    rows_total: int
    query_tiles_checked: int
    query_tiles_total: int
    seed: int
    descriptor_problems: list[str] = field(default_factory=list)
    max_error: float = 0.0
    lse_error: float = 0.0
    tolerance: float = CPU_TOLERANCE
    # --backward: the backward kernels' cubin, and the CPU model of their tile loops against dense gradients
    # (max relative error of dq, dk, dv), or why it did not run.
    backward_cubin_bytes: int = 0
    grad_error: float | None = None
    backward_skipped: str = ""

    @property
    def passed(self) -> bool:
        return (not self.descriptor_problems and self.max_error <= self.tolerance and self.lse_error <= self.tolerance
                and (self.grad_error is None or self.grad_error <= self.tolerance))

    def lines(self) -> list[str]:
        everything = self.rows_checked == self.rows_total
        which = ("every query row" if everything else
                 f"{self.rows_checked:,} of {self.rows_total:,} query rows ({self.query_tiles_checked} of "
                 f"{self.query_tiles_total} query tiles: the first and last of each sequence, those where "
                 f"segments begin, others at random with seed {self.seed})")
        verdict = "exact" if not self.descriptor_problems else f"{len(self.descriptor_problems)} problem(s)"
        out = [
            f"{self.mask}: {self.sizes}",
            f"  kernel       built for {self.arch}: {self.cubin_bytes:,} bytes of cubin",
            f"  checked      {which}",
            f"  descriptor   {verdict} against the brute-force mask",
        ]
        out += [f"    {p}" for p in self.descriptor_problems[:10]]
        out.append(f"  tile loop    max |O - O_ref| = {self.max_error:.2e}, max |LSE - LSE_ref| = {self.lse_error:.2e} "
                   f"(float32 CPU model of the kernel vs float64 attention, one head of dim {self.head_dim}, "
                   f"tolerance {self.tolerance:.0e})")
        if self.backward_cubin_bytes:
            out.append(f"  backward     built: {self.backward_cubin_bytes:,} bytes of cubin")
        if self.grad_error is not None:
            out.append(f"  gradients    max |dX - dX_ref| / max |dX_ref| = {self.grad_error:.2e} over dq, dk, dv (float32 "
                       f"CPU model of the backward kernels vs float64, every row and key, tolerance {self.tolerance:.0e})")
        elif self.backward_skipped:
            out.append(f"  gradients    not checked: {self.backward_skipped}")
        out.append("passed" if self.passed else "FAILED")
        return out

    def as_json(self) -> dict:
        return {"device": "cpu", **asdict(self), "passed": self.passed}


def sample_work(desc: Descriptor, layouts: list[ConcreteLayout], budget: int,
                rng: np.random.Generator) -> list[np.ndarray]:
    """Per sequence, the work items (query tiles) to check: all of them when the budget allows; else as
    many as the sequence's share of the budget pays for (at least 4): first the first and the last tile
    and the tiles holding a segment's first token (where masks change shape), then random others."""
    per_seq = [np.nonzero(desc.work_seq == b)[0] for b in range(len(layouts))]
    if sum(lay.n * lay.n for lay in layouts) <= budget:
        return per_seq
    share = budget // max(len(layouts), 1)
    chosen = []
    for b, (lay, works) in enumerate(zip(layouts, per_seq)):
        count = min(len(works), max(4, share // max(desc.config.block_q * lay.n, 1)))
        by_tile = works[np.argsort(desc.work_qtile[works], kind="stable")]
        tokens = tile_tokens(desc, "q", np.full(len(works), b), desc.work_qtile[works])
        starts = lay.starts[(lay.starts > 0) & (lay.starts < lay.n)]
        boundaries = works[np.isin(tokens, starts).any(axis=1)]
        picked: list[int] = []
        for group in (by_tile[:1], by_tile[-1:], rng.permutation(boundaries), rng.permutation(works)):
            for w in group:
                if len(picked) < count and int(w) not in picked:
                    picked.append(int(w))
        chosen.append(np.array(sorted(picked), dtype=np.int64))
    return chosen


def _descriptor_problems(desc: Descriptor, work: int, n: int, truth: np.ndarray) -> list[str]:
    """The descriptor's list for one query tile against the true mask of its rows: no visible pair may
    lie in a skipped key tile, no hidden pair in a FULL one, and no key may be listed twice."""
    seq, qtile = int(desc.work_seq[work]), int(desc.work_qtile[work])
    lo, hi = desc.row_ptr[work], desc.row_ptr[work + 1]
    k_tiles, kinds = desc.k_tile[lo:hi].astype(np.int64), desc.kind[lo:hi]
    where = f"sequence {seq}, query tile {qtile}"
    tokens = tile_tokens(desc, "k", np.full(len(k_tiles), seq), k_tiles)
    kind_of = np.broadcast_to(np.where(kinds == TileKind.FULL, TileKind.FULL, TileKind.PARTIAL)[:, None], tokens.shape)
    real = tokens >= 0
    per_key = np.full(n, TileKind.EMPTY, dtype=np.int8)  # the kind of the tile each key lies in; EMPTY: skipped
    per_key[tokens[real]] = kind_of[real]
    problems = []
    if len(np.unique(tokens[real])) != int(real.sum()):
        problems.append(f"{where}: a key is listed in two tiles")
    missed = int((truth & (per_key == TileKind.EMPTY)[None, :]).sum())
    hidden = int((~truth & (per_key == TileKind.FULL)[None, :]).sum())
    if missed:
        problems.append(f"{where}: {missed} visible pairs lie in key tiles the descriptor skips")
    if hidden:
        problems.append(f"{where}: {hidden} hidden pairs lie in key tiles marked full")
    return problems


def run_on_cpu(compiled: CompiledMask, sequences: list[dict[str, object]], origin: str, seed: int = 0,
               budget: int = CPU_PAIR_BUDGET, backward: bool = False) -> CpuCheck:
    program, options = compiled.program, compiled.options
    # The lengths first (binding costs microseconds): the plan of a long sequence alone can take seconds and
    # gigabytes, for nothing when the check refuses it.
    lengths = sequence_lengths(compiled, sequences)
    if sum(lengths) > CPU_MAX_TOKENS:
        raise ValueError(f"{sum(lengths):,} tokens are too many for the CPU check (at most {CPU_MAX_TOKENS:,}); "
                         "give a smaller --n or --batch")
    desc, layouts, values = compiled.plan(sequences)
    if backward:
        compiled.build_backward_ahead()  # both directions build at once
    cubin = compiled.cubin  # the kernel cannot run here, but it must build
    rng = np.random.default_rng(seed)
    chosen = sample_work(desc, layouts, budget, rng)
    # The rows (query tokens) of each chosen work item, and their true mask over every key.
    rows = {int(w): _real(tile_tokens(desc, "q", desc.work_seq[[w]], desc.work_qtile[[w]])[0])
            for works in chosen for w in works}
    check = CpuCheck(
        mask=program.name, sizes=_describe_sizes(lengths, origin), arch=options.arch,
        cubin_bytes=cubin.stat().st_size, head_dim=options.head_dim,
        rows_checked=sum(len(r) for r in rows.values()), rows_total=sum(lengths),
        query_tiles_checked=len(rows), query_tiles_total=len(desc.work_seq), seed=seed,
    )
    scale = 1.0 / math.sqrt(options.head_dim)
    qs, ks, vs = ([rng.standard_normal((n, options.head_dim), dtype=np.float32) for n in lengths] for _ in range(3))
    all_chosen = np.concatenate(chosen) if chosen else np.zeros(0, np.int64)
    outs, lses = simulate(program, _only(desc, all_chosen), layouts, values, qs, ks, vs, scale)
    for b, (lay, val, works) in enumerate(zip(layouts, values, chosen)):
        seq_rows = np.concatenate([rows[int(w)] for w in works]) if len(works) else np.zeros(0, np.int64)
        if len(seq_rows) == 0:
            continue
        truth = visible(program, lay, val, seq_rows[:, None], np.arange(lay.n)[None, :])
        start = 0
        for w in works:
            count = len(rows[int(w)])
            check.descriptor_problems += _descriptor_problems(desc, int(w), lay.n, truth[start:start + count])
            start += count
        o_ref, lse_ref = attention(qs[b][seq_rows], ks[b], vs[b], truth, scale)
        check.max_error = max(check.max_error, _max_abs(outs[b][seq_rows], o_ref))
        check.lse_error = max(check.lse_error, _max_abs(lses[b][seq_rows], lse_ref))
    if backward:
        check.backward_cubin_bytes = compiled.backward_cubin.stat().st_size
        if sum(lengths) > CPU_GRAD_TOKENS:
            check.backward_skipped = (f"{sum(lengths):,} tokens; the CPU model of the backward pass runs on up to "
                                      f"{CPU_GRAD_TOKENS:,} (give a smaller --n or --batch)")
        else:
            check.grad_error = _cpu_grad_error(compiled, desc, layouts, values, qs, ks, vs, scale, rng)
    return check


def _cpu_grad_error(compiled, desc, layouts, values, qs, ks, vs, scale, rng) -> float:
    """The CPU model of the backward kernels (of the options' pass) against dense float64 gradients, every row
    and key."""
    program = compiled.program
    masks = [visible(program, lay, val, np.arange(lay.n)[:, None], np.arange(lay.n)[None, :])
             for lay, val in zip(layouts, values)]
    forward = [attention(qs[b], ks[b], vs[b], masks[b], scale) for b in range(len(layouts))]
    d_out = [rng.standard_normal(x.shape, dtype=np.float32) for x in qs]
    got = simulate_backward(program, desc, compiled.key_descriptor(desc), layouts, values, qs, ks, vs,
                            [f[0].astype(np.float32) for f in forward], [f[1] for f in forward], d_out, scale,
                            fused=compiled.options.backward.fused)
    worst = 0.0
    for b in range(len(layouts)):
        want = attention_backward(qs[b], ks[b], vs[b], masks[b], scale, d_out[b])
        for x, r in zip((got[0][b], got[1][b], got[2][b]), want):
            worst = max(worst, _max_abs(x, r) / max(1.0, float(np.abs(r).max(initial=0))))
    return worst


def _real(tokens: np.ndarray) -> np.ndarray:
    return tokens[tokens >= 0].astype(np.int64)


def _only(desc: Descriptor, works: np.ndarray) -> Descriptor:
    """The descriptor restricted to some work items (everything else about the batch unchanged)."""
    works = np.asarray(works, dtype=np.int64)
    starts, ends = desc.row_ptr[works].astype(np.int64), desc.row_ptr[works + 1].astype(np.int64)
    entries = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends)]) if len(works) else np.zeros(0, np.int64)
    return replace(
        desc,
        work_seq=desc.work_seq[works],
        work_qtile=desc.work_qtile[works],
        row_ptr=np.concatenate([[0], np.cumsum(ends - starts)]).astype(desc.row_ptr.dtype),
        k_tile=desc.k_tile[entries],
        kind=desc.kind[entries],
    )


# ---------------------------------------------------------------------------------------------------
# On a GPU (cannot be tested without one: kept short, built on maskc's own runtime)
# ---------------------------------------------------------------------------------------------------


@dataclass
class GpuRun:
    mask: str
    device: str
    arch: str
    sizes: str
    heads: int
    kv_heads: int
    head_dim: int
    dtype: str
    rows_checked: int
    max_error: float
    error_bound: float
    lse_error: float
    nan: bool
    empty_rows_ok: bool
    milliseconds: float
    visible_pairs: int
    tflops: float
    visible_pairs_estimated: bool = False  # counted on a sample of the visited tiles (explain.COUNTED_TILES_MAX)
    backward: BackwardRun | None = None

    @property
    def passed(self) -> bool:
        return (not self.nan and self.empty_rows_ok and self.max_error <= self.error_bound
                and self.lse_error <= 1e-3 and (self.backward is None or self.backward.passed))

    def lines(self) -> list[str]:
        return [
            f"{self.mask} on {self.device} ({self.arch}): {self.sizes}, {self.heads} heads ({self.kv_heads} kv heads), "
            f"head dim {self.head_dim}, {self.dtype}",
            f"  error    max |O - O_ref| = {self.max_error:.2e} past {self.dtype}'s rounding (bound {self.error_bound:.2e}: "
            f"twice the error of PyTorch in {self.dtype}), max |LSE - LSE_ref| = {self.lse_error:.2e} (bound 1e-03), "
            f"on {self.rows_checked:,} query rows against float32",
            *(["  NaN in the output"] if self.nan else []),
            *([] if self.empty_rows_ok else ["  rows that see no key are not 0 with LSE = -inf"]),
            f"  time     {self.milliseconds:.3f} ms (median of {GPU_REPEATS} launches), "
            f"{self.tflops:.1f} TFLOP/s effective ({'~' * self.visible_pairs_estimated}{self.visible_pairs:,} visible "
            f"pairs{', estimated from a sample of the visited tiles' * self.visible_pairs_estimated})",
            *(self.backward.lines(self.dtype) if self.backward else []),
            "passed" if self.passed else "FAILED",
        ]

    def as_json(self) -> dict:
        return {**asdict(self), "passed": self.passed}


@dataclass
class BackwardRun:
    """`maskc run --backward`: the gradients checked and timed."""

    errors: dict[str, float]  # max |dX - dX_ref| for dq, dk, dv
    bounds: dict[str, float]  # twice PyTorch's own error in the input precision, plus 1e-4
    rows_checked: int
    keys_checked: int
    nan: bool
    milliseconds: float  # the backward alone
    step_milliseconds: float  # forward and backward
    tflops: float  # the backward counted as 2.5 forward passes
    step_tflops: float
    kernels: str  # which backward pass ran (BackwardKernels.name)
    deterministic: bool

    @property
    def passed(self) -> bool:
        return not self.nan and all(self.errors[x] <= self.bounds[x] for x in self.errors)

    def lines(self, dtype: str) -> list[str]:
        errors = ", ".join(f"max |{x} - {x}_ref| = {self.errors[x]:.2e} (bound {self.bounds[x]:.2e})" for x in self.errors)
        return [
            f"  gradient {errors}: errors past {dtype}'s rounding, bounds twice the error of PyTorch in {dtype}, "
            f"against float32, on {self.rows_checked:,} "
            f"query rows (dq) and {self.keys_checked:,} keys (dk, dv: sequences up to {GPU_GRAD_EXACT:,} tokens)",
            *(["  NaN in a gradient"] if self.nan else []),
            f"  backward {self.milliseconds:.3f} ms, {self.tflops:.1f} TFLOP/s effective (2.5 x the forward's work); "
            f"forward + backward {self.step_milliseconds:.3f} ms, {self.step_tflops:.1f} TFLOP/s",
            f"  backward pass {self.kernels}: " + ("deterministic" if self.deterministic else
                                                   "not deterministic (dq's sums are added in a varying order; "
                                                   "--deterministic picks a pass that is)"),
        ]


def run_on_gpu(program: ir.Program, consts: dict[str, object], sequences: list[dict[str, object]], origin: str, *,
               heads: int, kv_heads: int, head_dim: int, dtype: str, seed: int, arch: str | None = None,
               backward: bool = False, backward_kernels: str | None = None, deterministic: bool = False) -> GpuRun:
    import torch

    from maskc.runtime import Attention, default_arch

    if kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"--heads ({heads}) must be a multiple of --kv-heads ({kv_heads})")
    options = KernelOptions(head_dim, dtype, arch or default_arch(head_dim), backward_kernels=backward_kernels,
                            deterministic=deterministic)
    compiled = compile_program(program, options, consts)
    program = compiled.program  # with the const values bound: what the reference evaluates
    attn = Attention(compiled)
    values, layouts = compiled.bind(sequences)
    lengths = [lay.n for lay in layouts]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    # Plan, and weigh the inputs against the GPU's memory, before allocating them: a request too big for either
    # is refused at once, with a message, rather than after gigabytes of inputs or as an out-of-memory error.
    desc, _, _ = compiled.tables(sequences, offsets[:-1])
    if backward:
        compiled.build_backward_ahead()  # while the forward builds and runs
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    _check_gpu_memory(sum(lengths), heads, kv_heads, head_dim, torch_dtype.itemsize, backward)
    # Every runtime value as one value per sequence, exactly as bound above.
    params = {p.name: [val.arrays[p.name].tolist() if p.type.depth else val.scalars[p.name] for val in values]
              for p in program.runtime_params}
    gen = torch.Generator(device="cuda").manual_seed(seed)
    total = sum(lengths)
    q = torch.randn(total, heads, head_dim, device="cuda", dtype=torch_dtype, generator=gen)
    k = torch.randn(total, kv_heads, head_dim, device="cuda", dtype=torch_dtype, generator=gen)
    v = torch.randn(total, kv_heads, head_dim, device="cuda", dtype=torch_dtype, generator=gen)
    cu_seqlens = torch.tensor(offsets, dtype=torch.int32)  # on the host: no copy back per launch
    out = torch.full_like(q, float("nan"))  # poisoned: every element must be written
    lse = torch.full((heads, total), float("nan"), device="cuda")

    def launch():
        attn(q, k, v, cu_seqlens=cu_seqlens, out=out, lse=lse, return_lse=True, **params)

    launch()
    torch.cuda.synchronize()
    errors = _gpu_errors(program, layouts, values, offsets, q, k, v, out, lse, 1.0 / math.sqrt(head_dim), seed)

    ms = _median_ms(launch)
    # Visible pairs by tile, as explain counts them (on a sample of the tiles where they are too many).
    tiles = VisitedTiles.of(desc, entries_to_count(desc, COUNTED_TILES_MAX))
    visible_pairs = tiles.total(visible_per_tile(program, desc, layouts, values, tiles))
    forward_flops = 4 * visible_pairs * head_dim * heads
    run = GpuRun(
        mask=program.name, device=torch.cuda.get_device_name(), arch=compiled.options.arch,
        sizes=_describe_sizes(lengths, origin), heads=heads, kv_heads=kv_heads, head_dim=head_dim, dtype=dtype,
        **errors, milliseconds=ms, visible_pairs=visible_pairs, tflops=_tflops(forward_flops, ms),
        visible_pairs_estimated=tiles.sampled,
    )
    if backward:
        d_out = torch.randn(q.shape, device="cuda", dtype=torch_dtype, generator=gen)

        def launch_backward():
            return attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu_seqlens, **params)

        grads = launch_backward()
        torch.cuda.synchronize()
        checked = _gpu_grad_errors(program, layouts, values, offsets, q, k, v, d_out, grads, 1.0 / math.sqrt(head_dim), seed)
        back_ms = _median_ms(launch_backward)
        step_ms = _median_ms(lambda: (launch(), launch_backward()))
        run.backward = BackwardRun(**checked, milliseconds=back_ms, step_milliseconds=step_ms,
                                   tflops=_tflops(2.5 * forward_flops, back_ms),
                                   step_tflops=_tflops(3.5 * forward_flops, step_ms),
                                   kernels=attn.compiled.options.backward.name,
                                   deterministic=attn.compiled.options.backward.deterministic)
    return run


def _check_gpu_memory(tokens: int, heads: int, kv_heads: int, head_dim: int, element_bytes: int,
                      backward: bool) -> None:
    """Refuse inputs that cannot fit in the GPU's free memory: q, the output and its LSE (per query head), k and
    v (per key/value head); the backward pass adds the output's gradient, the three input gradients and delta."""
    import torch

    per_token = (2 * heads + 2 * kv_heads) * head_dim * element_bytes + 4 * heads
    if backward:
        per_token += (2 * heads + 2 * kv_heads) * head_dim * element_bytes + 4 * heads
    need = tokens * per_token
    free, _ = torch.cuda.mem_get_info()
    if need > free:
        raise ValueError(f"{tokens:,} tokens with {heads} query and {kv_heads} key/value heads of dim {head_dim} "
                         f"take {need / 2**30:.1f} GiB of GPU memory for the inputs, outputs"
                         f"{' and gradients' if backward else ''}, more than the {free / 2**30:.1f} GiB free; "
                         "give a smaller --n, --batch or --heads")


def _sampled_rows(n: int, rng: np.random.Generator) -> np.ndarray:
    """The query rows of a sequence checked against float32 attention: every row of a short sequence, else the
    first, the last and GPU_SAMPLED_ROWS at random, fewer where rows x n would pass GPU_CHECK_PAIRS."""
    if n <= GPU_EXACT_ROWS:
        return np.arange(n)
    count = min(GPU_SAMPLED_ROWS, max(GPU_CHECK_PAIRS // n - 2, 0))
    return np.unique(np.concatenate([[0, n - 1], rng.choice(n, count, replace=False)]))


def _median_ms(fn) -> float:
    """The median time of `fn` on the GPU, in milliseconds, after a warm-up."""
    import torch

    for _ in range(GPU_WARMUP):
        fn()
    times = []
    for _ in range(GPU_REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12 if ms > 0 else 0.0


def computed_error(x, reference) -> float:
    """The largest error of an output `x` (a bf16 or fp16 torch tensor) against its higher-precision reference,
    less at each element what rounding the reference to x's dtype may cost there (half a unit in the last
    place): the error of the computation, not of the format. The rules below compare it with twice PyTorch's
    error in the input precision; on a few tokens that error can be near zero, and a correct kernel whose
    result lies a hair past a rounding midpoint then failed them (a three-token mask's dK: 0.00806 against a
    bound of 0.00791, where half a unit is 0.0078)."""
    import torch

    # |r| = m 2^e with 1/2 <= m < 1, where a unit in the last place is eps 2^(e - 1)
    _, exponent = torch.frexp(reference.abs())
    half_unit = torch.finfo(x.dtype).eps * torch.exp2((exponent - 2).to(reference.dtype))
    return ((x.double() - reference).abs() - half_unit).clamp(min=0).max().item()


def _gpu_grad_errors(program, layouts, values, offsets, q, k, v, d_out, grads, scale: float, seed: int) -> dict:
    """Gradients against float32 autograd of dense attention, one head at a time: dq on the rows that
    `_gpu_errors` samples (a row's dq needs only that row), dk and dv on every key of sequences up to
    GPU_GRAD_EXACT tokens (a key's gradient needs every row). The bound is twice the error of PyTorch in the
    input precision, plus 1e-4 (errors beyond the output format's rounding: `computed_error`)."""
    import torch

    rng = np.random.default_rng(seed)
    group = q.shape[1] // k.shape[1]
    names = ("dq", "dk", "dv")
    errors, low = dict.fromkeys(names, 0.0), dict.fromkeys(names, 0.0)
    rows_checked = keys_checked = 0

    def dense_grads(qh, kh, vh, doh, mask, dt):
        leaves = [x.detach().to(dt).requires_grad_(True) for x in (qh, kh, vh)]
        s = ((leaves[0] @ leaves[1].T).float() * scale).masked_fill(~mask, float("-inf"))
        m = s.amax(dim=-1, keepdim=True).detach()
        p = torch.exp(s - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
        p = p / p.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny)
        (p.to(dt) @ leaves[2]).float().mul(doh.float()).sum().backward()
        return [x.grad.float() for x in leaves]

    for b, (lay, val) in enumerate(zip(layouts, values)):
        n = lay.n
        if n == 0:
            continue
        whole = n <= GPU_GRAD_EXACT
        rows = np.arange(n) if whole else _sampled_rows(n, rng)
        rows_checked += len(rows)
        keys_checked += n if whole else 0
        mask = torch.from_numpy(visible(program, lay, val, rows[:, None], np.arange(n)[None, :])).cuda()
        token = torch.from_numpy(offsets[b] + rows).cuda()
        keys = slice(int(offsets[b]), int(offsets[b] + n))
        # Per key/value head: dq of each of its query heads, and (whole sequences) dk and dv, which are sums
        # over those query heads.
        for kv in range(k.shape[1]):
            key_sums = [torch.zeros_like(k[keys, kv], dtype=torch.float32) for _ in range(4)]  # dk, dv; ref, lowp
            for h in range(kv * group, (kv + 1) * group):
                inputs = (q[token, h], k[keys, kv], v[keys, kv], d_out[token, h], mask)
                ref, lowp = dense_grads(*inputs, torch.float32), dense_grads(*inputs, q.dtype)
                errors["dq"] = max(errors["dq"], computed_error(grads[0][token, h], ref[0]))
                low["dq"] = max(low["dq"], (lowp[0] - ref[0]).abs().max().item())
                for j, x in enumerate((ref[1], ref[2], lowp[1], lowp[2])):
                    key_sums[j] += x
            if whole:
                for name, got, ref, lowp in (("dk", grads[1], key_sums[0], key_sums[2]),
                                             ("dv", grads[2], key_sums[1], key_sums[3])):
                    errors[name] = max(errors[name], computed_error(got[keys, kv], ref))
                    low[name] = max(low[name], (lowp - ref).abs().max().item())
    return dict(errors=errors, bounds={x: 2 * low[x] + 1e-4 for x in names}, rows_checked=rows_checked,
                keys_checked=keys_checked, nan=any(bool(torch.isnan(g).any()) for g in grads))


def _gpu_errors(program, layouts: list[ConcreteLayout], values: list[SequenceValues], offsets: np.ndarray,
                q, k, v, out, lse, scale: float, seed: int) -> dict:
    """Sampled rows of every sequence against float32 attention, one head at a time (bounded memory);
    the bound is FlashAttention's: twice the error of the same attention done by PyTorch in the input
    precision, plus 1e-5 (errors beyond the output format's rounding: `computed_error`)."""
    import torch

    rng = np.random.default_rng(seed)
    heads, group = q.shape[1], q.shape[1] // k.shape[1]
    max_error = low_error = lse_error = 0.0
    empty_ok, rows_checked = True, 0
    for b, (lay, val) in enumerate(zip(layouts, values)):
        n = lay.n
        if n == 0:
            continue
        rows = _sampled_rows(n, rng)
        rows_checked += len(rows)
        mask = torch.from_numpy(visible(program, lay, val, rows[:, None], np.arange(n)[None, :])).cuda()
        empty = ~mask.any(dim=1)
        token = torch.from_numpy(offsets[b] + rows).cuda()
        keys = slice(int(offsets[b]), int(offsets[b] + n))
        for h in range(heads):
            qh, kh, vh = q[token, h], k[keys, h // group], v[keys, h // group]
            s = (qh.float() @ kh.float().T * scale).masked_fill(~mask, float("-inf"))
            o_ref = torch.softmax(s, dim=-1).nan_to_num(0.0) @ vh.float()
            s_low = ((qh @ kh.T).float() * scale).masked_fill(~mask, float("-inf"))
            o_low = torch.softmax(s_low, dim=-1).nan_to_num(0.0).to(qh.dtype) @ vh
            o = out[token, h].float()
            l_out = lse[h, token]
            max_error = max(max_error, computed_error(out[token, h], o_ref))
            low_error = max(low_error, (o_low.float() - o_ref).abs().max().item())
            if (~empty).any():
                l_ref = torch.logsumexp(s[~empty], dim=-1)
                lse_error = max(lse_error, (l_out[~empty] - l_ref).abs().max().item())
            if empty.any():
                empty_ok &= bool((o[empty] == 0).all() and torch.isneginf(l_out[empty]).all())
    return dict(rows_checked=rows_checked, max_error=max_error, error_bound=2 * low_error + 1e-5,
                lse_error=lse_error, nan=bool(torch.isnan(out).any()), empty_rows_ok=empty_ok)
