"""The benchmark harness: the ANCHORS.md workloads on one GPU, in one process, for maskc and the systems it
is measured against, each checked against a float32 reference before it is timed.

Systems (`--systems`, all by default):

    maskc        examples/NAME.mask through maskc.load (kernel family from --family), one packed batch
    flex-triton  torch.compile(flex_attention) with a BlockMask from create_block_mask (default Triton backend)
    sdpa-flash   scaled_dot_product_attention under sdpa_kernel(SDPBackend.FLASH_ATTENTION)   (full, causal)
    sdpa-cudnn   scaled_dot_product_attention under sdpa_kernel(SDPBackend.CUDNN_ATTENTION)   (full, causal)
    fa4          flash_attn.cute.flash_attn_func                     (full, causal, sliding window)
    flex-fa4     flex_attention with kernel_options={"BACKEND": "FLASH"} (FA4's CuTe-DSL backend)

fa4 and flex-fa4 run only where `flash_attn.cute` imports; otherwise they are reported as skipped. SDPA has no
native sliding window, so it is "n/a" there. Every system fails soft: an exception becomes an "error" entry
and the run goes on; a wrong output is "FAILED" and is not timed.

Check: fresh random inputs per workload; a sample of rows (--rows, plus the first and last) computed densely
in float32 from the exact boolean mask of those rows (the workload's mask_mod); pass if max |O - O_ref| <= 2 x
the error of the same rows computed by PyTorch in bf16/fp16, + 1e-5 (FlashAttention's rule).
Timing: triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median").
Effective TFLOP/s = 4 * visible pairs * head_dim * heads / time, visible pairs counted exactly from the mask.

--backward adds training cost (fa4 is then left out, "n/a"). After the forward passes its check, dQ of the
sampled rows is checked against autograd of dense float32 attention of those rows (a row's dQ depends on that
row only); pass if max |dQ - dQ_ref| <= 2 x the error of the same in bf16/fp16 + 1e-4, and no NaN anywhere in
dQ. Then three times: the forward alone (under torch.no_grad(), as without --backward), forward + backward
(a fresh forward, then .backward(dO)), and the backward alone (one forward, then .backward(dO,
retain_graph=True) repeated); do_bench sets the gradients to None before each timed call. The backward counts
as 2.5 forward passes (FlashAttention's convention: five matrix products to the forward's two), so
fwd+bwd TFLOP/s = 3.5 x forward flops / time and backward TFLOP/s = 2.5 x forward flops / time.

    python bench/harness.py [--workloads NAME ...] [--systems NAME ...] [--family auto|sm80|sm90a]
                            [--head-dim 64|128|256] [--dtype bf16|fp16] [--heads H] [--n N]
                            [--sweep] [--first-call] [--backward] [--json PATH] [--png PATH]

`--workloads` with no names skips the anchor table (e.g. `--workloads --sweep`). The module imports without
torch or a GPU (tests/test_bench_harness.py tests its pure parts on the CPU).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import itertools
import json
import math
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from maskc.kernels.family import BACKWARD_PASSES

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

ANCHOR_N = 32768
WORKLOADS = ("full", "causal", "sliding_window", "document", "shared_prompt", "rm_shared", "hstu", "hstu_jagged",
             "clear", "clear_text")
# The other examples at their defaults (N = 32768 each): masks outside ANCHORS.md, run on request
# (`--workloads more` for all of them).
MORE_WORKLOADS = ("chunked_causal", "prefix_lm", "sinks_window", "global_window", "dilated_window", "tree",
                  "natten2d", "video3d")
ALL_WORKLOADS = WORKLOADS + MORE_WORKLOADS
SYSTEMS = ("maskc", "flex-triton", "sdpa-flash", "sdpa-cudnn", "fa4", "flex-fa4")
LABELS = {"maskc": "maskc", "flex-triton": "flexT", "sdpa-flash": "sdpaF", "sdpa-cudnn": "cuDNN", "fa4": "FA4",
          "flex-fa4": "flexFA4"}
FAMILIES = {"auto": None, "sm80": "sm_80", "sm90a": "sm_90a"}
SWEEP_N = (1024, 4096, 8192, 16384)
SWEEP_WORKLOADS = ("causal", "full")
BENCH = {"warmup": 25, "rep": 200, "return_mode": "median"}
BACKWARD_FLOPS = 2.5  # the backward's work in forward passes: five matrix products to the forward's two
DEVICE = "cuda"  # every tensor of the run lives here

# ANCHORS.md's geometry at N = 32768.
DOCS = [2053, 328, 850, 361, 2568, 1799, 1174, 5864, 2613, 5035, 6306, 3817]
RM_GROUPS = [[1299, 838, 320, 517, 376], [2038, 716, 739, 923, 644], [1453, 352, 755, 285, 655],
             [1910, 878, 258, 968, 712], [1569, 994, 490, 861, 360], [1674, 287, 278, 282, 921],
             [1042, 646, 958, 477, 688], [1083, 796, 483, 704, 763], [776]]
JAGGED = [7955, 7809, 8202, 8802]

FIRST_CALL_N = 4096
FIRST_CALL_MASK = """\
# first-call benchmark: a sliding window whose name is new in every run, so that no cache has its kernel
mask {name}(n: int = {n}, window: int = {window})
segments:
    S = n
rules:
    S -> S   where 0 <= q - k < window
"""


# =============================================================================================================
# Workloads (pure: numpy only)
# =============================================================================================================

@dataclass
class Workload:
    """One benchmark configuration: maskc's const values and, per packed sequence, its runtime values with
    its length "n". The FlexAttention mask_mod, the SDPA/FA4 forms and the maskc call all come from this."""

    name: str
    n: int
    consts: dict
    sequences: list

    @property
    def lengths(self) -> list[int]:
        return [int(s["n"]) for s in self.sequences]

    @property
    def label(self) -> str:
        return self.name if self.n == ANCHOR_N else f"{self.name} {self.n}"

    def maskc_params(self) -> dict:
        """Runtime keyword arguments of the maskc call: one value per sequence (cu_seqlens gives n)."""
        keys = [k for k in self.sequences[0] if k != "n"]
        return {k: [s[k] for s in self.sequences] for k in keys}


def scale_lengths(lengths: list[int], total: int) -> list[int]:
    """Positive integer lengths proportional to `lengths` that sum to `total` (largest remainders);
    `lengths` itself when it already sums to `total`."""
    full = sum(lengths)
    if total == full:
        return list(lengths)
    if total < len(lengths):
        raise ValueError(f"{total} tokens cannot hold {len(lengths)} segments")
    exact = [x * total / full for x in lengths]
    out = [max(1, int(e)) for e in exact]
    order = sorted(range(len(out)), key=lambda i: exact[i] - int(exact[i]), reverse=True)
    i = 0
    while sum(out) < total:
        out[order[i % len(out)]] += 1
        i += 1
    while sum(out) > total:
        out[out.index(max(out))] -= 1
    return out


def _scaled(x: int, n: int) -> int:
    return max(1, round(x * n / ANCHOR_N))


def make_workload(name: str, n: int = ANCHOR_N) -> Workload:
    """ANCHORS.md's workload `name` at N = 32768 (exactly the defaults of examples/NAME.mask); other N scale
    every segment, window and target count by N / 32768 (grids keep their width: N must then be a multiple
    of 256)."""
    if name not in ALL_WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; the workloads: {', '.join(ALL_WORKLOADS)}")
    consts: dict = {}
    if name in MORE_WORKLOADS:
        return _more_workload(name, n)
    if name in ("full", "causal"):
        seqs = [{"n": n}]
    elif name == "sliding_window":
        seqs = [{"n": n, "window": _scaled(4096, n)}]
    elif name == "document":
        seqs = [{"n": n, "docs": scale_lengths(DOCS, n)}]
    elif name == "shared_prompt":
        r = _scaled(4096, n)
        if n - 6 * r < 1:
            raise ValueError(f"shared_prompt needs more than {6 * r} tokens, got {n}")
        seqs = [{"n": n, "responses": [r] * 6}]
    elif name == "rm_shared":
        flat = scale_lengths([x for g in RM_GROUPS for x in g], n)
        seqs, at = [], 0
        for g in RM_GROUPS:
            part, at = flat[at:at + len(g)], at + len(g)
            seqs.append({"n": sum(part), "prompt": part[0], "responses": part[1:]})
    elif name == "hstu":
        seqs = [{"n": n, "targets": _scaled(2048, n)}]
    elif name == "hstu_jagged":
        t = _scaled(256, n)
        seqs = [{"n": length, "context": 6, "targets": t} for length in scale_lengths(JAGGED, n)]
        if min(s["n"] for s in seqs) <= 6 + t:
            raise ValueError(f"hstu_jagged needs longer sequences than {n} tokens give")
    else:  # clear, clear_text: a grid of n / 256 rows
        if n % 256:
            raise ValueError(f"{name} needs N to be a multiple of 256 (a grid of N / 256 rows), got {n}")
        h = n // 256
        if name == "clear":
            consts, seqs = {"h": h, "w": 256}, [{"n": n, "r": 16}]
        else:
            consts, seqs = {"h": h, "w": 252}, [{"n": n, "text": 4 * h, "r": 16}]
    return Workload(name, n, consts, seqs)


def _more_workload(name: str, n: int) -> Workload:
    """The examples outside ANCHORS.md: their defaults at N = 32768, scaled as make_workload says."""
    consts: dict = {}
    if name == "chunked_causal":
        seq = {"n": n, "chunk": _scaled(2048, n)}
    elif name == "prefix_lm":
        seq = {"n": n, "prefix": _scaled(4096, n)}
    elif name == "sinks_window":
        seq = {"n": n, "sinks": 4, "window": _scaled(4096, n)}
    elif name == "global_window":
        seq = {"n": n, "global_tokens": 16, "radius": _scaled(2048, n)}
    elif name == "dilated_window":
        seq = {"n": n, "window": _scaled(1024, n), "dilation": 4}
    elif name == "tree":
        seq = {"n": n, "parent": [-1, 0, 0, 1, 1, 2, 3, 4]}
    elif name == "natten2d":
        if n % 256:
            raise ValueError(f"natten2d needs N to be a multiple of 256 (a grid of N / 256 rows), got {n}")
        consts, seq = {"h": n // 256, "w": 256}, {"n": n, "kernel": 13, "d": 1}
    else:  # video3d: frames of 64 x 64
        if n % 4096:
            raise ValueError(f"video3d needs N to be a multiple of 4096 (frames of 64 x 64), got {n}")
        consts, seq = {"frames": n // 4096, "h": 64, "w": 64}, {"n": n, "rt": 1, "ry": 7, "rx": 7}
    return Workload(name, n, consts, [seq])


def _ids(lengths, array):
    """Segment index of every token of segments of these lengths laid back to back."""
    return array(np.repeat(np.arange(len(lengths)), lengths))


def mask_mod(w: Workload, array=np.asarray):
    """The workload as a FlexAttention mask_mod over its whole packed batch (token indices 0..N-1; nothing
    crosses a packed sequence). `array` turns numpy index tables into the tensors the mod reads (torch on the
    GPU for FlexAttention; numpy itself for the CPU test)."""
    name, seqs = w.name, w.sequences
    if name == "full":
        return lambda b, h, q, k: (q >= 0) & (k >= 0)
    if name == "causal":
        return lambda b, h, q, k: k <= q
    if name == "sliding_window":
        window = seqs[0]["window"]
        return lambda b, h, q, k: (k <= q) & (q - k < window)
    if name == "document":
        doc = _ids(seqs[0]["docs"], array)
        return lambda b, h, q, k: (doc[q] == doc[k]) & (k <= q)
    if name == "shared_prompt":
        prompt = w.n - sum(seqs[0]["responses"])
        seg = _ids([prompt] + list(seqs[0]["responses"]), array)
        return lambda b, h, q, k: (k <= q) & ((k < prompt) | (seg[q] == seg[k]))
    if name == "rm_shared":
        seg_lengths = [x for s in seqs for x in [s["prompt"], *s["responses"]]]
        seg, group = _ids(seg_lengths, array), _ids([s["n"] for s in seqs], array)
        firsts = [i == 0 for s in seqs for i in range(1 + len(s["responses"]))]
        in_prompt = array(np.repeat(np.array(firsts), seg_lengths))
        return lambda b, h, q, k: (k <= q) & (group[q] == group[k]) & (in_prompt[k] | (seg[q] == seg[k]))
    if name == "hstu":
        history = w.n - seqs[0]["targets"]
        return lambda b, h, q, k: ((k <= q) & (k < history)) | (k == q)
    if name == "hstu_jagged":
        return _hstu_jagged_mod(w, array)
    if name == "clear":
        return _circle_mod(w.consts["w"], seqs[0]["r"] ** 2, strict=False)
    if name == "clear_text":
        text = seqs[0]["text"]
        circle = _circle_mod(w.consts["w"], seqs[0]["r"] ** 2, strict=True)
        return lambda b, h, q, k: (q < text) | (k < text) | ((q >= text) & (k >= text) & circle(b, h, q - text, k - text))
    if name in MORE_WORKLOADS:
        return _more_mask_mod(w, array)
    raise ValueError(f"no mask_mod for {name!r}")


def _more_mask_mod(w: Workload, array):
    """mask_mods of MORE_WORKLOADS, written from docs/language.md's meaning of each example's rules."""
    name, s = w.name, w.sequences[0]
    if name == "chunked_causal":
        chunk = s["chunk"]
        return lambda b, h, q, k: (k <= q) & (q // chunk == k // chunk)
    if name == "prefix_lm":
        prefix = s["prefix"]
        return lambda b, h, q, k: (k < prefix) | (k <= q)
    if name == "sinks_window":
        sinks, window = s["sinks"], s["window"]
        return lambda b, h, q, k: (k <= q) & ((k < sinks) | (q - k < window))
    if name == "global_window":
        g, radius = s["global_tokens"], s["radius"]
        return lambda b, h, q, k: (q < g) | (k < g) | (q - k <= radius) & (k - q <= radius)
    if name == "dilated_window":
        span, dilation = s["window"] * s["dilation"], s["dilation"]
        return lambda b, h, q, k: (k <= q) & (q - k < span) & ((q - k) % dilation == 0)
    if name == "tree":
        return _tree_mod(w.n, s["parent"], array)
    if name == "natten2d":
        return _natten_mod(w.consts["h"], w.consts["w"], s["kernel"], s["d"])
    frames_w, plane = w.consts["w"], w.consts["h"] * w.consts["w"]
    rt, ry, rx = s["rt"], s["ry"], s["rx"]

    def video_mod(b, h, q, k):
        near = lambda a, c, r: (a - c <= r) & (c - a <= r)  # noqa: E731 - |a - c| <= r without abs()
        return (near(q // plane, k // plane, rt) & near(q % plane // frames_w, k % plane // frames_w, ry)
                & near(q % frames_w, k % frames_w, rx))
    return video_mod


def _tree_mod(n: int, parent: list[int], array):
    """A causal prefix, then a draft tree whose nodes see the whole prefix and their ancestors (and themselves)."""
    d = len(parent)
    ancestor = np.zeros((d, d), dtype=bool)
    for node in range(d):
        at = node
        while at >= 0:
            ancestor[node, at] = True
            at = parent[at]
    table, prefix = array(ancestor.reshape(-1)), n - d

    def mod(b, h, q, k):
        node_q, node_k = (q - prefix).clip(0, d - 1), (k - prefix).clip(0, d - 1)
        in_tree = (q >= prefix) & (k >= prefix) & table[node_q * d + node_k]
        return ((k <= q) & (k < prefix)) | in_tree
    return mod


def _natten_mod(height: int, width: int, kernel: int, d: int):
    """examples/natten2d.mask: a kernel x kernel window of the query's residue class, clamped inside the grid."""
    def start(c, extent):  # the window's first row (column) in units of d, clamped
        hi = (extent - c % d + d - 1) // d - kernel
        x = c // d - kernel // 2
        x = x * (x >= 0)
        return x - (x - hi) * (x > hi)

    def mod(b, h, q, k):
        qy, qx, ky, kx = q // width, q % width, k // width, k % width
        sy, sx = start(qy, height), start(qx, width)
        return ((qy % d == ky % d) & (qx % d == kx % d) & (ky // d - sy >= 0) & (ky // d - sy < kernel)
                & (kx // d - sx >= 0) & (kx // d - sx < kernel))
    return mod


def _circle_mod(width: int, r2: int, strict: bool):
    def mod(b, h, q, k):
        dy, dx = q // width - k // width, q % width - k % width
        d = dy * dy + dx * dx
        return d < r2 if strict else d <= r2
    return mod


def _hstu_jagged_mod(w: Workload, array):
    lengths = w.lengths
    context, targets = {s["context"] for s in w.sequences}, {s["targets"] for s in w.sequences}
    if len(context) != 1 or len(targets) != 1:
        raise ValueError("hstu_jagged's mask_mod needs one context and one target count for all sequences")
    c, t = context.pop(), targets.pop()
    seq = _ids(lengths, array)
    start = array(np.repeat(np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths))
    length = array(np.repeat(np.array(lengths), lengths))

    def mod(b, h, q, k):
        lq, lk = q - start[q], k - start[k]
        u = length[q] - t
        return (seq[q] == seq[k]) & (((lk < u) & ((lq < c) | (lq >= u) | (lk <= lq))) | (q == k))
    return mod


def native_form(w: Workload):
    """How SDPA and FA4 express the workload natively: ("full"|"causal", None), ("window", keys incl. self),
    or None."""
    if w.name in ("full", "causal"):
        return w.name, None
    if w.name == "sliding_window":
        return "window", w.sequences[0]["window"]
    return None


# =============================================================================================================
# Options, numbers and formatting (pure)
# =============================================================================================================

def family_options(family: str) -> dict:
    """maskc.load's arch option for --family: auto lets maskc choose (the current GPU's); sm80 is the
    portable family built for this GPU's own arch (a cubin of another major arch does not load)."""
    arch = FAMILIES[family]
    if arch == "sm_80":
        try:
            import torch

            major, minor = torch.cuda.get_device_capability()
            arch = f"sm_{major}{minor}"
        except Exception:  # no GPU: the name is all that is needed (argument parsing, tests)
            pass
    return {} if arch is None else {"arch": arch}


def maskc_options(args) -> dict:
    """maskc.load's options from the command line: the family's arch, and the backward pass if one is named."""
    chosen = {"backward_kernels": args.backward_kernels} if args.backward_kernels else {}
    return family_options(args.family) | chosen


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", nargs="*", choices=ALL_WORKLOADS + ("more",), default=list(WORKLOADS),
                   metavar="NAME",
                   help=f"workloads (default: ANCHORS.md's {len(WORKLOADS)}); none skips the table; 'more' adds the "
                        f"other examples. One of: {', '.join(ALL_WORKLOADS)}")
    p.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS), metavar="NAME",
                   help=f"systems (default: all). One of: {', '.join(SYSTEMS)}")
    p.add_argument("--family", choices=list(FAMILIES), default="auto",
                   help="maskc kernel family: auto (no arch), sm80 (arch='sm_80'), sm90a (arch='sm_90a')")
    p.add_argument("--backward-kernels", choices=BACKWARD_PASSES, default=None,
                   help="maskc's backward pass (default: maskc's choice for the options; docs/training.md)")
    p.add_argument("--head-dim", type=int, choices=(64, 128, 256), default=128)
    p.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--n", type=int, default=ANCHOR_N,
                   help="tokens per workload (default 32768, ANCHORS.md's); others scale every segment")
    p.add_argument("--rows", type=int, default=256, help="rows checked against the float32 reference")
    p.add_argument("--sweep", action="store_true",
                   help=f"also causal and full at N = {', '.join(map(str, SWEEP_N))}")
    p.add_argument("--first-call", action="store_true",
                   help="also first-call costs (maskc cold and warm cache, Flex-Triton) and per-call host overhead")
    p.add_argument("--backward", action="store_true",
                   help="also forward + backward and backward alone (dQ checked first; fa4 left out)")
    p.add_argument("--json", metavar="PATH", help="write every number here (rewritten as the run goes)")
    p.add_argument("--png", metavar="PATH", help="bar plot of effective TFLOP/s (matplotlib)")
    p.add_argument("--first-call-child", metavar="CONFIG", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.n <= 0 or args.heads <= 0 or args.rows <= 0:
        p.error("--n, --heads and --rows must be positive")
    if "more" in args.workloads:
        args.workloads = list(dict.fromkeys(w for name in args.workloads
                                            for w in (MORE_WORKLOADS if name == "more" else (name,))))
    return args


def tflops(pairs: float, heads: int, head_dim: int, ms: float) -> float:
    """Effective TFLOP/s: 4 * visible pairs * head_dim * heads / time (two matrix products of 2 flops)."""
    return 4.0 * pairs * head_dim * heads / (ms * 1e-3) / 1e12


def training_tflops(pairs: float, heads: int, head_dim: int, bwd_ms: float, step_ms: float) -> dict:
    """Backward-mode numbers of a system: the backward counted as 2.5 forward passes, forward + backward
    (a training step of the attention) as 3.5."""
    return {"bwd_ms": bwd_ms, "bwd_tflops": BACKWARD_FLOPS * tflops(pairs, heads, head_dim, bwd_ms),
            "step_ms": step_ms, "step_tflops": (1 + BACKWARD_FLOPS) * tflops(pairs, heads, head_dim, step_ms)}


def ratios(systems: dict) -> tuple:
    """(maskc / Flex-Triton, maskc / best other system), in effective TFLOP/s; None where not measured."""
    mine = systems.get("maskc", {})
    if mine.get("status") != "ok":
        return None, None
    flex = systems.get("flex-triton", {})
    vs_flex = mine["tflops"] / flex["tflops"] if flex.get("status") == "ok" else None
    others = [r["tflops"] for s, r in systems.items() if s != "maskc" and r.get("status") == "ok"]
    return vs_flex, (mine["tflops"] / max(others) if others else None)


_SHORT = {"FAILED": "FAIL", "error": "err", "n/a": "n/a", "skipped": "skip"}


def cell(result: dict | None, key: str = "tflops", digits: int = 1) -> str:
    if not result:
        return "-"
    if result.get("status") == "ok":
        return f"{result[key]:.{digits}f}"
    return _SHORT.get(result.get("status"), "?")


def _num(x, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def format_table(rows: list, systems: list, title: str) -> str:
    """Effective TFLOP/s per workload and system, the ratios, then the times in ms; compact."""
    wide = max([14] + [len(r["label"]) for r in rows])
    head = f"{'workload':{wide}s} {'vis%':>6s} " + " ".join(f"{LABELS[s]:>7s}" for s in systems)
    lines = [title, "effective TFLOP/s:", head + f" {'m/flex':>6s} {'m/best':>6s} {'plan':>6s} {'BM':>6s}"]
    for r in rows:
        vis = "-" if r.get("visible") is None else f"{100 * r['visible']:.2f}"
        vs_flex, vs_best = ratios(r.get("systems", {}))
        plan = r.get("systems", {}).get("maskc", {}).get("plan_ms")
        lines.append(f"{r['label']:{wide}s} {vis:>6s} "
                     + " ".join(f"{cell(r['systems'].get(s)):>7s}" for s in systems)
                     + f" {_num(vs_flex):>6s} {_num(vs_best):>6s} {_num(plan):>6s} {_num(r.get('blockmask_ms')):>6s}")
    lines.append("time (ms):")
    lines.append(head)
    for r in rows:
        lines.append(f"{r['label']:{wide}s} {'':>6s} "
                     + " ".join(f"{cell(r['systems'].get(s), 'ms', 3):>7s}" for s in systems))
    lines.append("m/flex = maskc / flex-triton, m/best = maskc / best other (TFLOP/s); plan = maskc descriptor "
                 "build, BM = create_block_mask (ms). FAIL = wrong output (not timed), err = exception, "
                 "n/a = no native form, skip = not installed")
    return "\n".join(lines)


def backward_rows(rows: list, kind: str) -> list:
    """The rows with each system's backward-mode numbers, kind "step" (forward + backward) or "bwd" (the
    backward alone), in the places of the forward's, so that format_table and ratios read them unchanged. A
    system whose forward did not pass has no backward status: its forward status stands for both."""
    def numbers(res: dict) -> dict:
        status = res.get("bwd_status", res.get("status"))
        if status != "ok":
            return {"status": status}
        return {"status": "ok", "ms": res[f"{kind}_ms"], "tflops": res[f"{kind}_tflops"]}
    return [{"label": r["label"], "visible": r.get("visible"),
             "systems": {s: numbers(res) for s, res in r.get("systems", {}).items()}} for r in rows]


def format_progress(label: str, system: str, res: dict) -> str:
    """The line printed as each system finishes a workload."""
    line = (f"{label:16s} {system:12s} {res['status']:7s} "
            + (f"{res['tflops']:7.1f} TFLOP/s {res['ms']:9.3f} ms " if res["status"] == "ok" else "")
            + (f"err {res['max_err']:.2e} <= {res['bound']:.2e} " if "max_err" in res else "")
            + res.get("error", res.get("note", "")))
    if "bwd_status" in res:
        line += (f"| backward {res['bwd_status']} "
                 + (f"fwd+bwd {res['step_tflops']:.1f} TFLOP/s {res['step_ms']:.3f} ms, "
                    f"bwd {res['bwd_tflops']:.1f} TFLOP/s {res['bwd_ms']:.3f} ms " if res["bwd_status"] == "ok" else "")
                 + (f"dQ err {res['dq_err']:.2e} <= {res['dq_bound']:.2e} " if "dq_err" in res else "")
                 + res.get("bwd_error", ""))
    return line


def format_problems(rows: list) -> str:
    """One line per failed or erroring system (the table only says FAIL / err)."""
    lines = []
    for r in rows:
        if r.get("error"):
            lines.append(f"{r['label']}: {r['error'][:200]}")
        for s, res in r.get("systems", {}).items():
            if res.get("status") == "FAILED":
                lines.append(f"{r['label']}/{s}: FAILED max|O-O_ref| {res['max_err']:.3e}, bound {res['bound']:.3e}"
                             + (" (NaN in the output)" if res.get("nan") else "")
                             + (f" (visible pairs by exp(LSE) {res['visible_pairs_lse']}, by the mask "
                                f"{r.get('visible_pairs')})" if res.get("lse_count_agrees") is False else ""))
            elif res.get("status") == "error":
                lines.append(f"{r['label']}/{s}: {res['error'][:200]}")
            if res.get("bwd_status") == "FAILED":
                lines.append(f"{r['label']}/{s}: backward FAILED max|dQ-dQ_ref| {res['dq_err']:.3e}, bound "
                             f"{res['dq_bound']:.3e}" + (" (NaN in dQ)" if res.get("dq_nan") else ""))
            elif res.get("bwd_status") == "error":
                lines.append(f"{r['label']}/{s}: backward: {res['bwd_error'][:200]}")
    return "\n".join(lines)


def format_first_call(fc: dict) -> str:
    """The first-call and per-call overhead numbers as a small table."""
    lines = [f"first call of a new mask (N = {fc.get('n')}, {fc.get('heads')} heads), ms:",
             f"{'':40s} {'render':>7s} {'nvrtc':>8s} {'plan':>6s} {'load+1st':>8s} {'total':>8s} {'2nd':>6s}"]
    for key, label in (("maskc_cold", "maskc, empty cache, this process"),
                       ("maskc_cold_fresh", "maskc, empty cache, fresh process"),
                       ("maskc_warm_cache", "maskc, warm cache, fresh process")):
        r = fc.get(key) or {}
        if "error" in r:
            lines.append(f"{label:40s} error: {r['error'][:120]}")
        elif r:
            lines.append(f"{label:40s} {r['render_ms']:7.1f} {r['nvrtc_ms']:8.1f} {r['plan_ms']:6.1f} "
                         f"{r['load_launch_ms']:8.1f} {r['total_ms']:8.1f} {r['second_ms']:6.2f}")
    warm = fc.get("maskc_warm_cache") or {}
    if "import_ms" in warm:
        lines.append(f"  (fresh process: imports {warm['import_ms']:.0f} ms, of which maskc "
                     f"{warm.get('maskc_import_ms', float('nan')):.0f}, CUDA init {warm['cuda_init_ms']:.0f} ms, "
                     f"new cache files {warm['new_cache_files']}: {'cache hit' if warm['cache_hit'] else 'NO cache hit'})")
    flex = fc.get("flex_triton") or {}
    if "error" in flex:
        lines.append(f"{'Flex-Triton':40s} error: {flex['error'][:120]}")
    elif flex:
        lines.append(f"{'Flex-Triton: BlockMask, compile+1st call':40s} BlockMask {flex['blockmask_ms']:.1f}, "
                     f"compile+1st {flex['compile_first_ms']:.1f}, total {flex['total_ms']:.1f}, 2nd {flex['second_ms']:.2f}")
    over = fc.get("overhead") or {}
    if over:
        lines.append(f"per call, causal N = {over.get('n')}, {fc.get('heads')} heads, us: loop of "
                     f"{over.get('calls')} calls (sync at the ends) / host side of a call / GPU (do_bench)")
        for s, r in over.get("systems", {}).items():
            if "error" in r:
                lines.append(f"  {s:12s} error: {r['error'][:120]}")
            else:
                lines.append(f"  {s:12s} {r['loop_us']:8.1f} / {r['host_us']:8.1f} / {1e3 * r['gpu_ms']:8.1f}")
        tiny = over.get("maskc_tiny")
        if tiny:
            lines.append(f"  maskc, tiny problem (N = {tiny.get('n')}, 1 head): "
                         + (f"error: {tiny['error'][:100]}" if "error" in tiny else f"{tiny['loop_us']:.1f} us per call"))
    return "\n".join(lines)


def to_json(results: dict) -> str:
    def plain(o):  # numpy (and torch) scalars and arrays; anything else as text
        return o.tolist() if hasattr(o, "tolist") else str(o)
    return json.dumps(results, indent=1, default=plain)


def save_json(results: dict, path: str | None) -> None:
    if path:
        Path(path).write_text(to_json(results))


def save_png(results: dict, path: str) -> None:
    """Grouped bars of effective TFLOP/s per workload and system: the anchor table, and the sweep if run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sections = [(title, rows) for title, rows in (("anchors", results.get("anchors")), ("sweep", results.get("sweep")))
                if rows]
    if not sections:
        return
    systems = results["settings"]["systems"]
    widest = max(len(rows) for _, rows in sections)
    fig, axes = plt.subplots(len(sections), 1, figsize=(max(8.0, 1.2 * widest), 4.2 * len(sections)), squeeze=False)
    s = results["settings"]
    for ax, (title, rows) in zip(axes[:, 0], sections):
        x = np.arange(len(rows))
        width = 0.8 / len(systems)
        for i, system in enumerate(systems):
            values = [r["systems"].get(system, {}).get("tflops", 0.0) if r["systems"].get(system, {}).get("status") == "ok"
                      else 0.0 for r in rows]
            ax.bar(x - 0.4 + (i + 0.5) * width, values, width, label=system)
        ax.set_xticks(x, [r["label"] for r in rows], rotation=30, ha="right")
        ax.set_ylabel("effective TFLOP/s")
        ax.set_title(f"{title}: {s['dtype']}, {s['heads']} heads, head dim {s['head_dim']}, maskc family {s['family']} "
                     f"({results.get('meta', {}).get('gpu', '?')})", fontsize=9)
        ax.legend(fontsize=8, ncol=3)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# =============================================================================================================
# On the GPU: inputs, reference, systems
# =============================================================================================================

class NotApplicable(Exception):
    """The system has no native form of this workload."""


@dataclass
class Inputs:
    q: object  # [T, H, D] packed, the caller's dtype
    k: object
    v: object
    cu: object  # int32 cu_seqlens, on the host (as a caller would keep it)
    pick: object  # sampled rows (int64, GPU)
    ref: object  # float32 reference of the sampled rows, [R, H, D]
    bound: float  # the pass bound
    pairs: int  # exact visible (q, k) pairs, per head
    d_out: object = None  # backward mode: the upstream gradient, [T, H, D]
    dq_ref: object = None  # backward mode: float32 reference dQ of the sampled rows, [R, H, D]
    dq_bound: float | None = None  # backward mode: its pass bound
    _bhsd: tuple | None = None

    def bhsd(self):
        """Contiguous [1, H, T, D] copies (FlexAttention's layout), made once. In backward mode they are
        leaves of their own, so that a timed backward does not include copying gradients back to [T, H, D]."""
        if self._bhsd is None:
            self._bhsd = tuple(x.detach().unsqueeze(0).transpose(1, 2).contiguous().requires_grad_(x.requires_grad)
                               for x in (self.q, self.k, self.v))
        return self._bhsd

    def leaves(self) -> tuple:
        """Every tensor a system's gradients land on."""
        return (self.q, self.k, self.v, *(self._bhsd or ()))

    def clear_grads(self) -> None:
        for x in self.leaves():
            x.grad = None


@dataclass
class Prepared:
    fn: object  # the timed call
    to_thd: object  # its output -> [T, H, D] (a view)
    info: dict
    context: object = contextlib.nullcontext
    grad_q: object = None  # backward mode: dQ as [T, H, D], read from the leaf it lands on


class Context:
    """What the run shares: settings, the compiled flex_attention, FA4 if importable, per-workload BlockMasks."""

    def __init__(self, args):
        import torch

        self.args = args
        self.heads, self.head_dim, self.rows = args.heads, args.head_dim, args.rows
        self.dtype_name = args.dtype
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
        self.maskc_options = maskc_options(args)
        self.backward = args.backward
        self.systems = list(args.systems)
        self.unavailable: dict[str, str] = {}
        self.notes: list[str] = []
        self.flex = self.fa4 = None
        self.block_masks: dict = {}
        if {"flex-triton", "flex-fa4"} & set(self.systems):
            try:
                from torch.nn.attention.flex_attention import flex_attention

                # One compiled flex_attention; each mask_mod, N and kernel_options is a recompile, and
                # fresh_dynamo() empties the cache between workloads so that guards stay few.
                self.flex = torch.compile(flex_attention, dynamic=False)
            except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
                self._unavailable(("flex-triton", "flex-fa4"), f"flex_attention unavailable: {_short(exc)}")
            try:
                torch._dynamo.config.recompile_limit = 64
                torch._dynamo.config.accumulated_recompile_limit = 1024
            except Exception as exc:  # noqa: BLE001
                self.notes.append(f"dynamo's recompile limits unchanged ({_short(exc)})")
            if self.backward:
                # The backward alone is timed by repeating out.backward(retain_graph=True), which AOTAutograd
                # refuses for a compiled backward that donates (frees) its saved buffers.
                with contextlib.suppress(ImportError, AttributeError):  # a torch without donated buffers
                    from torch._functorch import config as functorch_config

                    functorch_config.donated_buffer = False
        if {"fa4", "flex-fa4"} & set(self.systems):
            try:
                from flash_attn.cute import flash_attn_func

                self.fa4 = flash_attn_func
            except Exception as exc:  # noqa: BLE001
                self._unavailable(("fa4", "flex-fa4"), f"flash_attn.cute is not importable ({_short(exc)})")

    def fresh_dynamo(self) -> None:
        """Forget compiled flex_attention specialisations (compiling again costs time, not measured)."""
        if self.flex is not None:
            import torch

            torch._dynamo.reset()

    def _unavailable(self, systems, note: str) -> None:
        for s in systems:
            if s in self.systems:
                self.unavailable.setdefault(s, note)
        self.notes.append(f"{', '.join(systems)}: {note}")


def _short(exc: BaseException, limit: int = 300) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().replace("\n", " | ")
    return text if len(text) <= limit else text[:limit] + " ..."


def count_pairs(mod, n: int, device) -> int:
    """Exact number of visible (q, k) pairs, evaluating the mask_mod over row blocks."""
    import torch

    keys = torch.arange(n, device=device)[None, :]
    chunk = max(1, (1 << 25) // n)
    total = 0
    for start in range(0, n, chunk):
        rows = torch.arange(start, min(n, start + chunk), device=device)[:, None]
        total += int(torch.broadcast_to(mod(0, 0, rows, keys), (rows.shape[0], n)).sum().item())
    return total


def reference(q, k, v, mask, pick) -> tuple:
    """Float32 attention of the sampled rows from the exact mask rows, and the pass bound: 2 x the error of
    the same rows computed in q's dtype (bf16/fp16 products, fp32 softmax) + 1e-5."""
    import torch

    scale = 1.0 / math.sqrt(q.shape[-1])
    ref = torch.empty(len(pick), q.shape[1], q.shape[2], dtype=torch.float32, device=q.device)
    low = torch.empty_like(ref)
    for h in range(q.shape[1]):
        qh, kh, vh = q[pick, h], k[:, h], v[:, h]
        s = (qh.float() @ kh.float().T) * scale
        ref[:, h] = torch.softmax(s.masked_fill(~mask, float("-inf")), -1).nan_to_num(0) @ vh.float()
        s_low = (qh @ kh.T).float() * scale
        p_low = torch.softmax(s_low.masked_fill(~mask, float("-inf")), -1).nan_to_num(0).to(q.dtype)
        low[:, h] = (p_low @ vh).float()
    return ref, 2 * (low - ref).abs().max().item() + 1e-5


def reference_dq(q, k, v, d_out, mask, pick) -> tuple:
    """dQ of the sampled rows by autograd of dense float32 attention (a row's dQ depends only on its own q,
    mask row and upstream gradient, and on every k and v), and the pass bound: 2 x the error of the same
    computed in q's dtype (bf16/fp16 products, fp32 softmax) + 1e-4."""
    import torch

    scale = 1.0 / math.sqrt(q.shape[-1])

    def dq(h: int, dtype):
        qh = q[pick, h].to(dtype).requires_grad_()
        s = (qh @ k[:, h].to(dtype).T).float() * scale
        p = torch.softmax(s.masked_fill(~mask, float("-inf")), -1)
        (p.to(dtype) @ v[:, h].to(dtype)).backward(d_out[pick, h].to(dtype))
        return qh.grad.float().nan_to_num(0)  # a row that sees no key has O = 0 whatever its q: dQ = 0

    ref = torch.stack([dq(h, torch.float32) for h in range(q.shape[1])], 1)
    low = torch.stack([dq(h, q.dtype) for h in range(q.shape[1])], 1)
    return ref, 2 * (low - ref).abs().max().item() + 1e-4


def make_inputs(w: Workload, ctx: Context, backward: bool = False) -> Inputs:
    import torch

    T = w.n
    q, k, v = (torch.randn(T, ctx.heads, ctx.head_dim, device=DEVICE, dtype=ctx.dtype) for _ in range(3))
    cu = torch.tensor(np.concatenate([[0], np.cumsum(w.lengths)]), dtype=torch.int32)
    mod = mask_mod(w, lambda a: torch.as_tensor(a, device=DEVICE))
    rng = np.random.default_rng(T)
    pick = np.unique(np.concatenate([[0, T - 1], rng.choice(T, size=min(ctx.rows, T), replace=False)]))
    pick = torch.as_tensor(pick, device=DEVICE)
    rows_mask = torch.broadcast_to(mod(0, 0, pick[:, None], torch.arange(T, device=DEVICE)[None, :]), (len(pick), T))
    ref, bound = reference(q, k, v, rows_mask, pick)
    inp = Inputs(q, k, v, cu, pick, ref, bound, count_pairs(mod, T, DEVICE))
    if backward:
        inp.d_out = torch.randn_like(q)
        inp.dq_ref, inp.dq_bound = reference_dq(q, k, v, inp.d_out, rows_mask, pick)
        for x in (q, k, v):
            x.requires_grad_()  # after the references: the systems' gradients land here (Flex's: bhsd())
    return inp


def check(out_thd, inp: Inputs) -> dict:
    """max |O - O_ref| over the sampled rows against the bound; NaN anywhere in the output fails."""
    import torch

    err = (out_thd[inp.pick].float() - inp.ref).abs().max().item()
    nan = bool(torch.isnan(out_thd).any().item())
    return {"max_err": err, "bound": inp.bound, "nan": nan, "passed": (not nan) and err <= inp.bound}


def check_dq(dq_thd, inp: Inputs) -> dict:
    """max |dQ - dQ_ref| over the sampled rows against the bound; NaN anywhere in dQ fails."""
    import torch

    err = (dq_thd[inp.pick].float() - inp.dq_ref).abs().max().item()
    nan = bool(torch.isnan(dq_thd).any().item())
    return {"dq_err": err, "dq_bound": inp.dq_bound, "dq_nan": nan, "dq_passed": (not nan) and err <= inp.dq_bound}


def poison(inp: Inputs) -> None:
    """Leave NaN in the caching allocator's next block of the output's size, so that rows a system never
    writes show up in the check instead of another system's leftovers."""
    import torch

    block = torch.full_like(inp.q, float("nan"))
    del block


def prepare_maskc(w: Workload, inp: Inputs, ctx: Context) -> Prepared:
    import torch

    import maskc

    attn = maskc.load(EXAMPLES / f"{w.name}.mask", head_dim=ctx.head_dim, dtype=ctx.dtype_name, **ctx.maskc_options, **w.consts)
    params = w.maskc_params()
    plan_ms = []
    for _ in range(10):
        t0 = time.perf_counter()
        attn.compiled.plan(attn.sequences(w.lengths, params))
        plan_ms.append(1e3 * (time.perf_counter() - t0))
    # q = 0 makes every visible score 0, so exp(LSE) of a row is its number of visible keys.
    with torch.no_grad():  # only LSE is read: nothing for autograd to record in backward mode
        _, lse = attn(torch.zeros_like(inp.q), inp.k, inp.v, cu_seqlens=inp.cu, return_lse=True, **params)
    lse_pairs = round(torch.exp(lse.double()).round().sum().item() / ctx.heads)
    info = {"plan_ms": statistics.median(plan_ms), "kernel": repr(attn), "visible_pairs_lse": lse_pairs,
            "lse_count_agrees": lse_pairs == inp.pairs}
    return Prepared(lambda: attn(inp.q, inp.k, inp.v, cu_seqlens=inp.cu, **params), lambda o: o, info,
                    grad_q=lambda: inp.q.grad)


def block_mask(w: Workload, ctx: Context, row: dict):
    """create_block_mask for the workload (128 x 128 blocks), built once per workload; its build times
    (first, then the median of 5) go in the row."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    key = (w.name, w.n)
    if key not in ctx.block_masks:
        mod = mask_mod(w, lambda a: torch.as_tensor(a, device=DEVICE))
        times = []
        for _ in range(6):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            bm = create_block_mask(mod, None, None, w.n, w.n, device=DEVICE)
            torch.cuda.synchronize()
            times.append(1e3 * (time.perf_counter() - t0))
        ctx.block_masks = {key: bm}  # one workload at a time
        row["blockmask_first_ms"], row["blockmask_ms"] = times[0], statistics.median(times[1:])
    return ctx.block_masks[key]


def prepare_flex(w: Workload, inp: Inputs, ctx: Context, row: dict, backend: str | None) -> Prepared:
    bm = block_mask(w, ctx, row)
    qf, kf, vf = inp.bhsd()
    flex = ctx.flex
    options = None if backend is None else {"BACKEND": backend}

    def fn():
        if options is None:
            return flex(qf, kf, vf, block_mask=bm)  # the default: Triton
        return flex(qf, kf, vf, block_mask=bm, kernel_options=options)
    return Prepared(fn, lambda o: o[0].transpose(0, 1), {"backend": backend or "default (Triton)"},
                    grad_q=lambda: qf.grad[0].transpose(0, 1))


def prepare_sdpa(w: Workload, inp: Inputs, ctx: Context, backend: str) -> Prepared:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    form = native_form(w)
    if form is None or form[0] == "window":
        raise NotApplicable("no native form in SDPA" + (" (no sliding window argument)" if form else ""))
    causal = form[0] == "causal"
    chosen = getattr(SDPBackend, backend)
    views = tuple(x.unsqueeze(0).transpose(1, 2) for x in (inp.q, inp.k, inp.v))  # [1, H, T, D], BSHD memory
    layout = "BSHD strides"
    with sdpa_kernel(chosen):
        try:
            F.scaled_dot_product_attention(*views, is_causal=causal)
            torch.cuda.synchronize()
        except RuntimeError:
            views, layout = inp.bhsd(), "BHSD contiguous"  # the backend may want the other layout

    def grad_q():  # the BSHD views' gradients land on the packed leaves; the BHSD copies are leaves themselves
        return inp.q.grad if layout == "BSHD strides" else views[0].grad[0].transpose(0, 1)
    return Prepared(lambda: F.scaled_dot_product_attention(*views, is_causal=causal),
                    lambda o: o[0].transpose(0, 1), {"layout": layout}, lambda: sdpa_kernel(chosen), grad_q)


def prepare_fa4(w: Workload, inp: Inputs, ctx: Context) -> Prepared:
    form = native_form(w)
    if form is None:
        raise NotApplicable("FA4 has full, causal and sliding windows only")
    kind, window = form
    options = {"causal": kind == "causal"}
    if kind == "window":
        options["window_size"] = (window - 1, 0)  # keys q - (window - 1) .. q: `window` keys, itself included
    q4, k4, v4 = (x.unsqueeze(0) for x in (inp.q, inp.k, inp.v))  # [1, T, H, D]
    fa4 = ctx.fa4

    def first(o):
        return (o[0] if isinstance(o, tuple) else o)[0]
    return Prepared(lambda: fa4(q4, k4, v4, **options), first, {"options": repr(options)})


def prepare(system: str, w: Workload, inp: Inputs, ctx: Context, row: dict) -> Prepared:
    if system == "maskc":
        return prepare_maskc(w, inp, ctx)
    if system == "flex-triton":
        return prepare_flex(w, inp, ctx, row, None)
    if system == "flex-fa4":
        return prepare_flex(w, inp, ctx, row, "FLASH")
    if system == "sdpa-flash":
        return prepare_sdpa(w, inp, ctx, "FLASH_ATTENTION")
    if system == "sdpa-cudnn":
        return prepare_sdpa(w, inp, ctx, "CUDNN_ATTENTION")
    if system == "fa4":
        return prepare_fa4(w, inp, ctx)
    raise ValueError(system)


def run_system(system: str, w: Workload, inp: Inputs, ctx: Context, row: dict) -> dict:
    """Check, then time, one system on one workload (in backward mode, then its backward); never raises."""
    import torch
    from triton.testing import do_bench

    backward = inp.d_out is not None
    if system in ctx.unavailable:
        return {"status": "skipped", "note": ctx.unavailable[system]}
    if backward and system == "fa4":
        return {"status": "n/a", "note": "backward mode: not measured"}
    res: dict = {}
    try:
        prep = prepare(system, w, inp, ctx, row)
        res.update(prep.info)
        with prep.context():
            with torch.no_grad():  # the forward alone, as in inference (in backward mode the inputs require grad)
                poison(inp)
                out = prep.fn()
                torch.cuda.synchronize()
                res.update(check(prep.to_thd(out), inp))
                del out
                if res.get("lse_count_agrees") is False:  # maskc's kernel saw another mask than the reference's
                    res["passed"] = False
                if not res["passed"]:
                    res["status"] = "FAILED"
                    return res
                ms = do_bench(prep.fn, **BENCH)
            res.update(status="ok", ms=ms, tflops=tflops(inp.pairs, ctx.heads, ctx.head_dim, ms))
            if backward:
                res.update(run_backward(prep, inp, ctx))
    except NotApplicable as exc:
        res.update(status="n/a", note=str(exc))
    except Exception as exc:  # noqa: BLE001 - fail soft: recorded, the run goes on
        res.update(status="error", error=_short(exc), traceback=traceback.format_exc(limit=8))
    return res


def run_backward(prep: Prepared, inp: Inputs, ctx: Context) -> dict:
    """Backward mode, once the forward passed: check dQ, then time forward + backward and the backward alone.
    The outcome is bwd_status, beside the forward's status; never raises."""
    import torch
    from triton.testing import do_bench

    res: dict = {}
    try:
        inp.clear_grads()  # gradients accumulate: the check must see one backward's alone
        out = prep.fn()
        d_out = torch.empty_like(out)  # the upstream gradient in the output's own layout, through the to_thd view
        prep.to_thd(d_out).copy_(inp.d_out)
        out.backward(d_out)
        torch.cuda.synchronize()
        res.update(check_dq(prep.grad_q(), inp))
        if not res["dq_passed"]:
            res["bwd_status"] = "FAILED"
            return res
        leaves = inp.leaves()  # do_bench sets their gradients to None before each timed call: no accumulation
        step_ms = do_bench(lambda: prep.fn().backward(d_out), grad_to_none=leaves, **BENCH)
        kept = prep.fn()  # one forward whose graph every timed backward reuses
        bwd_ms = do_bench(lambda: kept.backward(d_out, retain_graph=True), grad_to_none=leaves, **BENCH)
        res.update(bwd_status="ok", **training_tflops(inp.pairs, ctx.heads, ctx.head_dim, bwd_ms, step_ms))
    except Exception as exc:  # noqa: BLE001 - fail soft: the forward's numbers stand
        res.update(bwd_status="error", bwd_error=_short(exc), bwd_traceback=traceback.format_exc(limit=8))
    finally:
        inp.clear_grads()  # their memory, before the next system
    return res


def run_workload(name: str, n: int, ctx: Context) -> dict:
    import torch

    row: dict = {"workload": name, "n": n, "label": name if n == ANCHOR_N else f"{name} {n}", "systems": {}}
    ctx.fresh_dynamo()
    try:
        w = make_workload(name, n)
        row.update(label=w.label, sequences=len(w.sequences))
        inp = make_inputs(w, ctx, ctx.backward)
    except Exception as exc:  # noqa: BLE001
        row["error"] = _short(exc)
        row["systems"] = {s: {"status": "error", "error": "no inputs: " + row["error"]} for s in ctx.systems}
        print(f"{row['label']}: {row['error']}", flush=True)
        return row
    row["visible_pairs"], row["visible"] = inp.pairs, inp.pairs / n / n
    row["err_bound"] = inp.bound
    for system in ctx.systems:
        res = row["systems"][system] = run_system(system, w, inp, ctx, row)
        print(format_progress(row["label"], system, res), flush=True)
    row["ratio_vs_flex"], row["ratio_vs_best"] = ratios(row["systems"])
    del inp
    ctx.block_masks.clear()
    torch.cuda.empty_cache()
    return row


# =============================================================================================================
# First call and per-call overhead
# =============================================================================================================

def maskc_first_call(text: str, n: int, heads: int, head_dim: int, dtype: str, arch: dict, res: dict) -> dict:
    """Stages of maskc's first call of a new mask, into `res` as they finish (an error keeps the earlier ones):
    render (parse, passes, CUDA source), NVRTC (or a cache read), descriptor plan, then module load + table
    upload + first launch; and a second call."""
    import torch

    import maskc

    q, k, v = (torch.randn(n, heads, head_dim, device=DEVICE,
                           dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]) for _ in range(3))
    cu = torch.tensor([0, n], dtype=torch.int32)
    torch.cuda.synchronize()

    def stage(key, fn):
        t0 = time.perf_counter()
        value = fn()
        torch.cuda.synchronize()
        res[key] = 1e3 * (time.perf_counter() - t0)
        return value

    attn = stage("render_ms", lambda: maskc.loads(text, head_dim=head_dim, dtype=dtype, **arch))
    res["cubin"] = str(stage("nvrtc_ms", lambda: attn.compiled.cubin))  # NVRTC, or the persistent cache
    # The same sequences and offsets as the call below, which then finds this plan in the cache.
    stage("plan_ms", lambda: attn.compiled.tables(attn.sequences([n], {}), np.zeros(1, dtype=np.int64)))
    stage("load_launch_ms", lambda: attn(q, k, v, cu_seqlens=cu))
    res["total_ms"] = res["render_ms"] + res["nvrtc_ms"] + res["plan_ms"] + res["load_launch_ms"]
    stage("second_ms", lambda: attn(q, k, v, cu_seqlens=cu))
    return res


def _cache_files(root: Path) -> set:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def child_main(config_path: str) -> None:
    """--first-call-child: a fresh process times maskc's first call with the persistent cache the parent
    filled (MASKC_CACHE_DIR); prints one JSON line."""
    t0 = time.perf_counter()
    import cupy  # noqa: F401 - imported here so that the first launch does not pay for it
    import torch

    t_maskc = time.perf_counter()
    import maskc.runtime  # noqa: F401 - maskc's own modules (parser, passes, templates, runtime), timed apart

    t1 = time.perf_counter()
    torch.zeros(1, device=DEVICE)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    cfg = json.loads(Path(config_path).read_text())
    cache = Path(os.environ["MASKC_CACHE_DIR"])
    before = _cache_files(cache)
    res = maskc_first_call(cfg["text"], cfg["n"], cfg["heads"], cfg["head_dim"], cfg["dtype"], cfg["arch"], {})
    new = _cache_files(cache) - before
    res.update(import_ms=1e3 * (t1 - t0), maskc_import_ms=1e3 * (t1 - t_maskc), cuda_init_ms=1e3 * (t2 - t1),
               cache_files_before=len(before), new_cache_files=len(new), cache_hit=len(new) == 0)
    print(json.dumps(res), flush=True)


def first_call_maskc(ctx: Context) -> dict:
    """maskc cold (empty persistent cache) in this process, which has used maskc before; then in fresh processes
    as on a new machine: cold (empty cache), then warm (the cache the cold one filled: cubin, parser, templates)."""
    n = FIRST_CALL_N
    text = FIRST_CALL_MASK.format(name=f"first_call_{secrets.token_hex(6)}", n=n, window=512 + secrets.randbelow(1024))
    out: dict = {"mask": text}
    cache = Path(tempfile.mkdtemp(prefix="maskc-first-call-"))
    fresh_cache = Path(tempfile.mkdtemp(prefix="maskc-first-call-fresh-"))
    saved = os.environ.get("MASKC_CACHE_DIR")
    os.environ["MASKC_CACHE_DIR"] = str(cache)  # maskc.build reads it at every compile
    try:
        cold = out["maskc_cold"] = {}
        try:
            with contextlib.suppress(ImportError):
                import cupy  # noqa: F401 - as in a process that has used maskc before
            maskc_first_call(text, n, ctx.heads, ctx.head_dim, ctx.dtype_name, ctx.maskc_options, cold)
            cold["cache_files_after"] = len(_cache_files(cache))
        except Exception as exc:  # noqa: BLE001
            cold["error"] = _short(exc)
        config = cache / "child.json"
        config.write_text(json.dumps({"text": text, "n": n, "heads": ctx.heads, "head_dim": ctx.head_dim,
                                      "dtype": ctx.dtype_name, "arch": ctx.maskc_options}))
        # The children's own cache: this process's Jinja and parser caches live where it started.
        os.environ["MASKC_CACHE_DIR"] = str(fresh_cache)
        out["maskc_cold_fresh"] = _run_child(config)
        out["maskc_warm_cache"] = _run_child(config)
    finally:
        if saved is None:
            os.environ.pop("MASKC_CACHE_DIR", None)
        else:
            os.environ["MASKC_CACHE_DIR"] = saved
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(fresh_cache, ignore_errors=True)
    return out


def _run_child(config: Path) -> dict:
    try:
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--first-call-child", str(config)],
                              capture_output=True, text=True, timeout=300, env=dict(os.environ), check=False)
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            err = proc.stderr.strip().splitlines() or ["(no output)"]
            return {"error": f"child exited {proc.returncode}: {err[-1]}", "stderr_tail": "\n".join(err[-30:])}
        return json.loads(lines[-1])
    except Exception as exc:  # noqa: BLE001
        return {"error": _short(exc)}


def first_call_flex(ctx: Context) -> dict:
    """Flex-Triton's first call of a new mask_mod: create_block_mask, then compile + first call."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    n, window = FIRST_CALL_N, 512 + secrets.randbelow(1024)  # a constant no compile cache has seen

    def mod(b, h, q, k):
        return (k <= q) & (q - k < window)
    q, k, v = (torch.randn(1, ctx.heads, n, ctx.head_dim, device=DEVICE, dtype=ctx.dtype) for _ in range(3))
    torch.cuda.synchronize()
    t = [time.perf_counter()]
    bm = create_block_mask(mod, None, None, n, n, device=DEVICE)
    torch.cuda.synchronize()
    t.append(time.perf_counter())
    ctx.flex(q, k, v, block_mask=bm)
    torch.cuda.synchronize()
    t.append(time.perf_counter())
    ctx.flex(q, k, v, block_mask=bm)
    torch.cuda.synchronize()
    t.append(time.perf_counter())
    ms = [1e3 * (b - a) for a, b in itertools.pairwise(t)]
    return {"window": window, "blockmask_ms": ms[0], "compile_first_ms": ms[1], "total_ms": ms[0] + ms[1],
            "second_ms": ms[2]}


def call_overhead(prep: Prepared, calls: int) -> dict:
    """A loop of `calls` calls with a synchronize only at its ends (us per call), the host time of each call
    (median, us; launches are asynchronous) and the GPU time (do_bench median, ms)."""
    import torch
    from triton.testing import do_bench

    with prep.context(), torch.no_grad():  # the forward alone, as run_system times it
        for _ in range(10):
            prep.fn()
        torch.cuda.synchronize()
        host = []
        start = time.perf_counter()
        for _ in range(calls):
            t0 = time.perf_counter()
            prep.fn()
            host.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
        gpu_ms = do_bench(prep.fn, **BENCH)
    return {"loop_us": 1e6 * wall / calls, "host_us": 1e6 * statistics.median(host), "gpu_ms": gpu_ms}


def overhead(ctx: Context, n: int = 1024, calls: int = 200) -> dict:
    """Per-call cost with unchanged runtime values: causal at N = 1024 for maskc, Flex-Triton and SDPA flash
    (each checked first), and maskc on a tiny problem (N = 128, one head), which is all host side."""
    out: dict = {"n": n, "calls": calls, "systems": {}}
    ctx.fresh_dynamo()
    w = make_workload("causal", n)
    inp = make_inputs(w, ctx)
    for system in ("maskc", "flex-triton", "sdpa-flash"):
        if system not in ctx.systems or system in ctx.unavailable:
            continue
        res = run_system(system, w, inp, ctx, {})
        if res["status"] != "ok":
            out["systems"][system] = {"error": res.get("error", res["status"])}
            continue
        try:
            out["systems"][system] = call_overhead(prepare(system, w, inp, ctx, {}), calls)
        except Exception as exc:  # noqa: BLE001
            out["systems"][system] = {"error": _short(exc)}
    if "maskc" in ctx.systems:
        out["maskc_tiny"] = {"n": 128}
        try:
            tiny = copy.copy(ctx)
            tiny.heads = 1
            wt = make_workload("causal", 128)
            out["maskc_tiny"].update(call_overhead(prepare_maskc(wt, make_inputs(wt, tiny), tiny), calls))
        except Exception as exc:  # noqa: BLE001
            out["maskc_tiny"]["error"] = _short(exc)
    return out


def first_call(ctx: Context) -> dict:
    out: dict = {"n": FIRST_CALL_N, "heads": ctx.heads}
    if "maskc" in ctx.systems:
        out.update(first_call_maskc(ctx))
    if "flex-triton" in ctx.systems and "flex-triton" not in ctx.unavailable:
        try:
            out["flex_triton"] = first_call_flex(ctx)
        except Exception as exc:  # noqa: BLE001
            out["flex_triton"] = {"error": _short(exc)}
    try:
        out["overhead"] = overhead(ctx)
    except Exception as exc:  # noqa: BLE001
        out["overhead"] = {"error": _short(exc)}
    return out


# =============================================================================================================
# The run
# =============================================================================================================

def _command(cmd: list[str]) -> str | None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
        return proc.stdout.strip() if proc.returncode == 0 else None
    except Exception:  # noqa: BLE001
        return None


def environment() -> dict:
    """GPU, driver, versions, commit and date: everything the numbers depend on that the run can see."""
    info: dict = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "python": platform.python_version(), "numpy": np.__version__, "host": platform.machine()}
    smi = _command(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm", "--format=csv,noheader"])
    if smi:
        info["nvidia_smi"] = smi.splitlines()[0]
        parts = [p.strip() for p in info["nvidia_smi"].split(",")]
        if len(parts) >= 2:
            info["driver"] = parts[1]
    # The maskc measured may be a wheel built elsewhere than this checkout: MASKC_COMMIT names its commit.
    checkout = _command(["git", "-C", str(ROOT), "rev-parse", "HEAD"])
    info["git_commit"] = os.environ.get("MASKC_COMMIT") or checkout
    info["harness_commit"] = checkout
    for module in ("torch", "triton", "cupy", "maskc", "matplotlib"):
        try:
            info[module] = __import__(module).__version__
        except Exception:  # noqa: BLE001
            info[module] = None
    with contextlib.suppress(Exception):
        import maskc

        info["maskc_file"] = maskc.__file__
    with contextlib.suppress(Exception):
        from maskc.build import nvrtc_version

        info["nvrtc"] = nvrtc_version()
    with contextlib.suppress(Exception):
        import torch

        info.update(gpu=torch.cuda.get_device_name(), capability=list(torch.cuda.get_device_capability()),
                    cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
                    sms=torch.cuda.get_device_properties(0).multi_processor_count)
    info["flash_attn_4"] = _dist_version("flash-attn-4", "fa4")
    return info


def _dist_version(*names: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for name in names:
        with contextlib.suppress(PackageNotFoundError):
            return version(name)
    return None


def settings(args) -> dict:
    return {"workloads": args.workloads, "systems": args.systems, "family": args.family,
            "maskc_options": maskc_options(args), "head_dim": args.head_dim, "dtype": args.dtype,
            "heads": args.heads, "n": args.n, "rows": args.rows, "sweep": args.sweep, "first_call": args.first_call,
            "do_bench": BENCH, "sweep_n": list(SWEEP_N), "flex": "torch.compile(flex_attention, dynamic=False)",
            "pass_rule": "max|O - O_ref| <= 2 x max|O_lowprec_torch - O_ref| + 1e-5 on sampled rows",
            "backward": args.backward,
            "backward_flops": f"F = 4 * visible pairs * head_dim * heads (forward); bwd_tflops = {BACKWARD_FLOPS} F / "
                              f"bwd_ms, step_tflops = {1 + BACKWARD_FLOPS} F / step_ms (forward + backward)",
            "dq_pass_rule": "max|dQ - dQ_ref| <= 2 x max|dQ_lowprec_torch - dQ_ref| + 1e-4 on sampled rows, no NaN"}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.first_call_child:
        child_main(args.first_call_child)
        return 0
    import torch

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference is float32
    ctx = Context(args)
    if DEVICE == "cuda" and not torch.cuda.is_available():
        ctx.notes.append("torch sees no CUDA device: every system will report an error")
    results = {"meta": environment(), "settings": settings(args), "notes": ctx.notes, "anchors": [], "sweep": [],
               "first_call": None}
    print(f"{results['meta'].get('gpu')} | torch {results['meta'].get('torch')} | maskc {results['meta'].get('maskc')} "
          f"| family {args.family} | {args.dtype} | {args.heads} heads | head dim {args.head_dim}", flush=True)
    for note in ctx.notes:
        print("note:", note, flush=True)
    save_json(results, args.json)
    for name in args.workloads:
        results["anchors"].append(run_workload(name, args.n, ctx))
        save_json(results, args.json)
    if args.sweep:
        for n in SWEEP_N:
            for name in SWEEP_WORKLOADS:
                results["sweep"].append(run_workload(name, n, ctx))
                save_json(results, args.json)
    if args.first_call:
        results["first_call"] = first_call(ctx)
        save_json(results, args.json)
    if args.png:
        try:
            save_png(results, args.png)
        except Exception as exc:  # noqa: BLE001
            ctx.notes.append(f"no PNG: {_short(exc)}")
            save_json(results, args.json)
    print_summary(results, args)
    return 0


def print_summary(results: dict, args) -> None:
    """Problems and notes first, then the tables: the tail of the output is what the GPU tool returns."""
    rows = results["anchors"] + results["sweep"]
    problems = format_problems(rows)
    print("\n" + "=" * 100)
    if problems:
        print("problems:\n" + problems)
    for note in results["notes"]:
        print("note:", note)
    m = results["meta"]
    print(f"{m.get('gpu')} (driver {m.get('driver')}), torch {m.get('torch')}, triton {m.get('triton')}, "
          f"cupy {m.get('cupy')}, maskc {m.get('maskc')} @ {str(m.get('git_commit'))[:10]}, {m.get('date')}")
    setting = f"{args.dtype}, {args.heads} heads, head dim {args.head_dim}, maskc family {args.family}"
    named = "ANCHORS workloads" if set(args.workloads) <= set(WORKLOADS) else "workloads"
    sections = [(title, rows) for title, rows in ((f"{named}, N = {args.n}", results["anchors"]),
                                                  ("sweep, batch 1", results["sweep"])) if rows]
    for title, rows in sections:
        print(format_table(rows, args.systems, f"{title}: forward, {setting}"))
    if args.backward:
        for kind, what in (("step", f"fwd+bwd (backward counted as {BACKWARD_FLOPS} x forward)"),
                           ("bwd", "backward alone")):
            for title, rows in sections:
                print(format_table(backward_rows(rows, kind), args.systems, f"{title}: {what}, {setting}"))
    if results["first_call"]:
        print(format_first_call(results["first_call"]))


if __name__ == "__main__":
    sys.exit(main())
