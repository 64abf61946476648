"""Host descriptor build time for the ANCHORS.md workloads at N = 32768: median of 20 builds, each planned
from scratch (no cache), descriptor and kernel tables included. With --ahead, also what a call given a plan made
ahead pays instead (`Attention.plan` in a worker, `attn(..., plan=plan)`): the checks that adopt a pickled plan.

    python bench/plan_time.py [--ahead] [--json out.json] [WORKLOAD ...]
    python bench/plan_time.py --packed     # packed batches; packed images and videos; block-sparse layouts
    python bench/plan_time.py --lists      # masks that read lists per token (document ids) or per member
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from maskc.compiler import compile_file
from maskc.kernels import KernelOptions
from maskc.plan.planner import kernel_tables, plan

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ANCHORS = ["full", "causal", "sliding_window", "document", "shared_prompt", "rm_shared", "hstu", "hstu_jagged",
           "clear", "clear_text"]


def default_sequences(compiled):
    program = compiled.program
    if program.batch:
        return [dict(line) for line in program.batch]
    return [{}]


def time_one(name: str, repeats: int = 20) -> dict:
    compiled = compile_file(EXAMPLES / f"{name}.mask", KernelOptions())
    sequences = default_sequences(compiled)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        values, layouts = compiled.bind(sequences)
        desc = plan(compiled.program, layouts, values, compiled.tiles)
        kernel_tables(compiled.code, desc, layouts, values, np.zeros(len(layouts), dtype=np.int64))
        times.append(time.perf_counter() - start)
    s = desc.stats
    return {"workload": name, "median_ms": 1e3 * statistics.median(times), "min_ms": 1e3 * min(times),
            "tiles_full": s.tiles_full, "tiles_partial": s.tiles_partial, "tiles_refined": s.tiles_refined,
            "tiles_conservative": s.tiles_conservative, "descriptor_bytes": desc.nbytes}


def time_adoption(name: str, repeats: int = 20) -> float:
    """Median ms of adopting a pickled plan of the workload's default runtime values (as a call given `plan=`
    does once its inputs are checked): the plan key of the call's values compared with the plan's, and a
    cache insertion."""
    import pickle
    from types import SimpleNamespace

    import maskc

    attn = maskc.load(EXAMPLES / f"{name}.mask", arch="sm_90a")
    sequences = default_sequences(attn.compiled)
    lengths = [lay.n for lay in attn.compiled.bind(sequences)[1]]
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    offsets = cu[:-1]
    names = sorted({k for s in sequences for k in s} - {"n"})
    params = {k: [s[k] for s in sequences] for k in names}  # one value per sequence
    plan = pickle.loads(pickle.dumps(attn.plan(cu_seqlens=cu, **params)))
    call = SimpleNamespace(sequences=attn.sequences(lengths, params), offsets=offsets)
    times = []
    for _ in range(repeats):
        attn.compiled._plans.clear()
        start = time.perf_counter()
        attn._adopt(plan, call)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def packed_batch(rng: np.random.Generator, name: str, sequences: int) -> tuple[np.ndarray, dict]:
    """cu_seqlens of 32768 tokens in `sequences` random lengths, and the mask's runtime parameters as a user would
    pass them: for rm_shared, each sequence a prompt and up to four responses; for hstu_jagged, each user's
    context and targets; for the others (one document a sequence, causal), none."""
    cuts = np.sort(rng.choice(np.arange(1, 32768), sequences - 1, replace=False))
    lengths = np.diff(np.concatenate([[0], cuts, [32768]]))
    cu_seqlens = np.concatenate([[0], np.cumsum(lengths)])
    if name == "rm_shared":
        prompts, responses = [], []
        for n in lengths.tolist():
            parts = rng.multinomial(n, rng.dirichlet(np.ones(int(rng.integers(1, 6))))).tolist()
            prompts.append(parts[0])
            responses.append(parts[1:])
        return cu_seqlens, {"prompt": prompts, "responses": responses}
    if name == "hstu_jagged":
        context = np.minimum(lengths, 6)
        targets = (rng.random(sequences) * (lengths - context) / 4).astype(np.int64)
        return cu_seqlens, {"context": context.tolist(), "targets": targets.tolist()}
    return cu_seqlens, {}


def time_packed(name: str, sequences: int, repeats: int = 20) -> float:
    """Median ms of `attn.plan(cu_seqlens=...)` with new lengths every time (no cache hits)."""
    import maskc

    attn = maskc.load(EXAMPLES / f"{name}.mask", arch="sm_90a")
    rng = np.random.default_rng(sequences)
    times = []
    for _ in range(repeats + 2):
        cu, params = packed_batch(rng, name, sequences)
        attn.compiled._plans.clear()  # (one sequence of 32768 tokens has the same values every time)
        start = time.perf_counter()
        attn.plan(cu_seqlens=cu, **params)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times[2:])


# Images and videos of random sizes packed into one batch (a diffusion transformer trained at many resolutions):
# the grid's dimensions are runtime values of each sequence. The disc's radius differs per image; NATTEN's window
# reads the dimensions (its clamp), so each image has values of its own.
IMAGES = {
    "images": """mask images(h: int, w: int, r: int = 8)
segments:
    I = grid(h, w)
rules:
    I -> I   where (q.y - k.y)^2 + (q.x - k.x)^2 <= r^2
""",
    "natten": (EXAMPLES / "natten2d.mask").read_text().replace("const h: int = 128, const w: int = 256",
                                                               "h: int, w: int"),
    "videos": """mask videos(t: int, h: int, w: int, r: int = 4)
segments:
    V = grid(t, h, w)
rules:
    V -> V   where abs(q.t - k.t) <= 1 and abs(q.y - k.y) <= r and abs(q.x - k.x) <= r and k.t <= q.t
""",
}


def packed_grids(rng: np.random.Generator, name: str, count: int) -> tuple[np.ndarray, dict]:
    """cu_seqlens and values of `count` images (or videos) of random sizes, about 32768 tokens in all."""
    h, w = rng.integers(8, 64, count), rng.integers(8, 64, count)
    t = rng.integers(2, 9, count) if name == "videos" else np.ones(count, np.int64)
    scale = np.sqrt(32768 / (t * h * w).sum())
    smallest = 14 if name == "natten" else 1  # (NATTEN's 13 x 13 window needs 13 rows and columns)
    h, w = np.maximum((h * scale).astype(int), smallest), np.maximum((w * scale).astype(int), smallest)
    cu = np.concatenate([[0], np.cumsum(t * h * w)])
    if name == "videos":
        return cu, {"t": t.tolist(), "h": h.tolist(), "w": w.tolist()}
    if name == "natten":
        return cu, {"h": h.tolist(), "w": w.tolist()}
    return cu, {"h": h.tolist(), "w": w.tolist(), "r": rng.integers(2, 12, count).tolist()}


def time_packed_grids(name: str, count: int, repeats: int = 10) -> float:
    """Median ms of `attn.plan(cu_seqlens=...)` for packed images or videos of new sizes every time."""
    import maskc

    attn = maskc.loads(IMAGES[name], arch="sm_90a")
    rng = np.random.default_rng(count)
    times = []
    for _ in range(repeats + 2):
        cu, params = packed_grids(rng, name, count)
        start = time.perf_counter()
        attn.plan(cu_seqlens=cu, **params)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times[2:])


def time_block_layout(n: int, repeats: int = 7) -> float:
    """Median ms of planning examples/block_sparse.mask at n tokens with a new random layout (10% of the 128 x 128
    blocks, and the diagonal) every time: block-sparse attention whose blocks are chosen per step."""
    import maskc

    attn = maskc.load(EXAMPLES / "block_sparse.mask", arch="sm_90a")
    rng = np.random.default_rng(n)
    times = []
    for _ in range(repeats + 2):
        blocks = n // 128
        layout = (rng.random((blocks, blocks)) < 0.1) | np.eye(blocks, dtype=bool)
        start = time.perf_counter()
        attn.plan(batch=1, n=n, layout=layout.tolist())
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times[2:])


# Masks that read lists the way FlexAttention's users write them (a document id per token, global flags, an
# interleaved text and image layout), with values for 32768 tokens.
LIST_MASKS = {
    "doc_ids": ("mask doc_ids(n: int = 1024, doc: [int] = [])\nsegments:\n    S = n\nrules:\n"
                "    S -> S   causal where doc[q] == doc[k]\n"),
    "global_flags": ("mask global_flags(n: int = 1024, w: int = 256, g: [bool] = [])\nsegments:\n    S = n\n"
                     "rules:\n    S -> S   causal where q - k < w\n    S -> S   where g[q] or g[k]\n"),
    "image_text": ("mask image_text(lens: [int] = [5], image: [bool] = [false])\nsegments:\n    M[i] = lens[i]\n"
                   "rules:\n    * -> *       causal\n    M[i] -> M[i] where image[i]\n"),
}


def list_values(rng: np.random.Generator, name: str, tokens: int = 32768) -> dict:
    """New values of a LIST_MASKS mask: 16 documents (or members, every other one an image) of random lengths,
    or 1% of the tokens global."""
    lengths = np.diff(np.concatenate(([0], np.sort(rng.choice(np.arange(1, tokens), 15, replace=False)), [tokens])))
    if name == "doc_ids":
        return {"n": tokens, "doc": np.repeat(np.arange(16), lengths)}
    if name == "global_flags":
        return {"n": tokens, "g": rng.random(tokens) < 0.01}
    return {"lens": lengths.tolist(), "image": [i % 2 == 1 for i in range(16)]}


def time_lists(name: str, repeats: int = 7) -> tuple[float, int, int]:
    """Median ms of attn.plan with new values each time (forward and backward tables), the tiles the last plan
    lists and how many of them it left partial unproven (past the refinement budget)."""
    import maskc

    attn = maskc.loads(LIST_MASKS[name], arch="sm_90a")
    rng = np.random.default_rng(0)
    times = []
    for _ in range(repeats + 2):
        values = list_values(rng, name)
        n = values.pop("n", None)
        start = time.perf_counter()
        made = attn.plan(batch=1, n=n if n is not None else int(sum(values["lens"])), **values)
        times.append(time.perf_counter() - start)
    stats = made.tables[0].stats
    return 1e3 * statistics.median(times[2:]), stats.tiles_visited, stats.tiles_conservative


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    parser.add_argument("--ahead", action="store_true", help="also time adopting a plan made ahead")
    parser.add_argument("workloads", nargs="*", default=ANCHORS)
    parser.add_argument("--packed", action="store_true", help="time packed batches of many sequences instead")
    parser.add_argument("--lists", action="store_true", help="time masks that read lists per token or per member")
    args = parser.parse_args()
    if args.lists:
        print(f"host: {platform.processor() or platform.machine()}, python {platform.python_version()}, numpy {np.__version__}")
        print("attn.plan with forward and backward tables, 32768 tokens, new values each time (sm_90a tiles)")
        print(f"{'mask':14s} {'median ms':>10s} {'tiles listed':>13s} {'unproven':>9s}")
        for name in LIST_MASKS:
            ms, listed, unproven = time_lists(name)
            print(f"{name:14s} {ms:10.2f} {listed:13d} {unproven:9d}")
        return
    if args.packed:
        print(f"host: {platform.processor() or platform.machine()}, python {platform.python_version()}, numpy {np.__version__}")
        print("attn.plan(cu_seqlens=...) with forward and backward tables, 32768 tokens, new lengths each time, median ms")
        counts = (1, 16, 64, 256, 1024)
        print(f"{'workload':12s}" + "".join(f"{f'{c} seqs':>11s}" for c in counts))
        for name in ("causal", "rm_shared"):
            print(f"{name:12s}" + "".join(f"{time_packed(name, c):11.3f}" for c in counts))
        print("packed images (a disc of a radius per image) and videos, of random sizes, ~32768 tokens, median ms")
        counts = (1, 4, 16, 64)
        print(f"{'workload':12s}" + "".join(f"{f'{c} seqs':>11s}" for c in counts))
        for name in IMAGES:
            print(f"{name:12s}" + "".join(f"{time_packed_grids(name, c):11.3f}" for c in counts))
        print("block_sparse, a new random layout (10% of the blocks) every time, median ms")
        print("".join(f"{f'n = {n}':>12s}{time_block_layout(n):9.3f}" for n in (4096, 32768)))
        return
    rows = [time_one(w) for w in args.workloads]
    print(f"host: {platform.processor() or platform.machine()}, python {platform.python_version()}, numpy {np.__version__}")
    print(f"{'workload':16s} {'median ms':>10s} {'full':>7s} {'partial':>8s} {'refined':>8s} {'conserv.':>8s}")
    for r in rows:
        print(f"{r['workload']:16s} {r['median_ms']:10.2f} {r['tiles_full']:7d} {r['tiles_partial']:8d} "
              f"{r['tiles_refined']:8d} {r['tiles_conservative']:8d}")
    if args.ahead:
        print(f"{'workload':16s} {'plan made ahead, adopted by the call (ms)':>42s}")
        for r in rows:
            r["adopt_ms"] = time_adoption(r["workload"])
            print(f"{r['workload']:16s} {r['adopt_ms']:42.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
