"""Checks that the host planner of this tree gives byte-identical output to another commit's (by default HEAD, so
that uncommitted planner work is checked against the last commit) or another tree's: for every example, its default sequences and random ragged batches at small and
large sizes, for the tile shapes of the kernel families and of the tests, the descriptor (arrays, block table,
stats), the kernel tables, the key descriptor and its tables, and the errors raised for bad values.

    python bench/plan_identical.py [--base REV | --base DIR] [--seed S] [--random R]

Each tree's output is computed in a subprocess with that tree on PYTHONPATH (`dump` mode) and pickled under /tmp;
the base's is kept there and reused while the base is the same commit. A revision is checked out in a temporary
git worktree, removed afterwards. A refactoring of the planner
should leave this quiet: any difference is printed (case, field) and the exit status is 1.
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tempfile
import time
from dataclasses import fields
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parents[1]
EXAMPLES = HERE / "examples"

# Const values that keep the grid examples small (tests/small_configs.py).
SMALL_CONSTS = {"clear": {"h": 13, "w": 21}, "clear_text": {"h": 11, "w": 17}, "natten2d": {"h": 14, "w": 19},
                "video3d": {"frames": 3, "h": 7, "w": 9}}


def random_sequence(name: str, rng: np.random.Generator, scale: int) -> dict:
    """Runtime values of one sequence of example `name`, lengths up to about 300 * scale tokens: ragged sizes,
    empty segments and families, odd windows, some values the planner must refuse (zero divisors)."""
    def n(lo=0, hi=300):
        return int(rng.integers(lo * scale, hi * scale + 1))

    def lengths(count_max=6, each=60):
        return [int(x) for x in rng.integers(0, each * scale + 1, size=int(rng.integers(0, count_max + 1)))]

    def small(lo, hi):
        return int(rng.integers(lo, hi + 1))

    if name == "block_sparse":
        rows, cols = small(0, 6), small(0, 6)
        return {"n": n(0, 700), "layout": (rng.random((rows, cols)) < 0.5).tolist()}
    if name in ("causal", "full"):
        return {"n": n()}
    if name == "chunked_causal":
        return {"n": n(), "chunk": int(rng.choice([-1, 1, 1, 1, 1, 1, 1, 0])) * small(1, 80 * scale)}
    if name == "clear":
        return {"r": small(-2, 9 * max(1, scale // 8))}
    if name == "clear_text":
        return {"text": small(0, 40 * scale), "r": small(-1, 9 * max(1, scale // 8))}
    if name == "dilated_window":
        return {"n": n(), "window": small(-3, 40 * scale), "dilation": int(rng.choice([-4, -1, 0, 1, 2, 3, 6]))}
    if name == "document":
        docs = lengths(12 if scale > 1 else 5)
        if docs and rng.random() < 0.1:
            docs[0] = -1  # refused
        return {"docs": docs}
    if name == "global_window":
        g = small(0, 20)
        return {"global_tokens": g, "radius": small(-2, 40 * scale), "n": g + n(0, 120)}
    if name == "hstu":
        t = small(0, 50 * scale)
        return {"targets": t, "n": t + n(0, 120)}
    if name == "hstu_jagged":
        c, t = small(0, 10), small(0, 30 * scale)
        return {"context": c, "targets": t, "n": c + t + n(0, 120)}
    if name == "natten2d":
        return {"kernel": small(-1, 9 + scale), "d": int(rng.choice([-2, -1, 1, 2, 3]))}
    if name == "prefix_lm":
        p = small(0, 60 * scale)
        return {"prefix": p, "n": p + n(0, 120)}
    if name == "rm_shared":
        return {"prompt": small(0, 60 * scale), "responses": lengths()}
    if name == "shared_prompt":
        r = lengths()
        return {"responses": r, "n": sum(r) + n(0, 120)}
    if name == "sinks_window":
        s = small(0, 10)
        return {"sinks": s, "window": small(-2, 50 * scale), "n": s + n(0, 120)}
    if name == "sliding_window":
        return {"n": n(), "window": small(-2, 60 * scale)}
    if name == "tree":
        size = small(0, 20)
        parent = [int(rng.integers(-1, x + (rng.random() < 0.02))) for x in range(size)]  # rarely refused
        return {"parent": parent, "n": size + n(0, 80)}
    if name == "video3d":
        return {"rt": small(-1, 3), "ry": small(-1, 4), "rx": small(-1, 5)}
    raise KeyError(name)


def cases(seed: int, randoms: int):
    """(case id, example, const values, kernel options index, tile config or None, sequences, extra plan
    arguments), deterministic for a seed."""
    from maskc.plan.tiling import TileConfig

    rng = np.random.default_rng(seed)
    names = sorted(p.stem for p in EXAMPLES.glob("*.mask"))
    test_configs = [TileConfig(16, 8), TileConfig(8, 16), TileConfig(32, 32), TileConfig(16, 16, 8)]
    for name in names:
        grid = name in SMALL_CONSTS
        # The defaults (the benchmark's workloads), for every family's tiles.
        for o in range(len(OPTIONS)):
            yield f"{name}/default/opt{o}", name, {}, o, None, None, {}
        consts = SMALL_CONSTS.get(name, {})
        for i in range(randoms):
            batch = int(rng.integers(1, 5))
            small = [random_sequence(name, rng, 1) for _ in range(batch)]
            for o in range(len(OPTIONS)):
                yield f"{name}/small{i}/opt{o}", name, consts, o, None, small, {}
            c = test_configs[i % len(test_configs)]
            yield f"{name}/small{i}/cfg{c.block_q}x{c.block_k}x{c.min_run}", name, consts, 0, c, small, {}
            yield f"{name}/small{i}/search", name, consts, 0, None, small, {"fast": False}
            yield f"{name}/small{i}/budget", name, consts, 0, None, small, {"refine_budget": 64 * 128 * 3}
            if not grid or i % 3 == 0:  # the grid examples plan slowly at their default sizes
                large = [random_sequence(name, rng, 8 if grid else 100) for _ in range(int(rng.integers(1, 6)))]
                yield f"{name}/large{i}/opt{i % len(OPTIONS)}", name, {}, i % len(OPTIONS), None, large, {}


def _options():
    from maskc.kernels import KernelOptions
    return [KernelOptions(), KernelOptions(arch="sm_90a"), KernelOptions(arch="sm_90a", key_tile=64),
            KernelOptions(arch="sm_90a", head_dim=256), KernelOptions(arch="sm_80", head_dim=64)]


OPTIONS = None


def _arrays(obj, prefix: str) -> dict:
    """The dataclass's fields by name (arrays as they are, other values too)."""
    return {f"{prefix}.{f.name}": getattr(obj, f.name) for f in fields(obj)}


def run_case(compiled, config, sequences, extra) -> dict:
    from maskc.plan.by_key import by_key, key_tables
    from maskc.plan.planner import kernel_tables, plan, visited_tiles_floor

    if sequences is None:
        program = compiled.program
        sequences = [dict(line) for line in program.batch] if program.batch else [{}]
    out: dict = {}
    try:
        values, layouts = compiled.bind(sequences)
        config = config or compiled.tiles
        desc = plan(compiled.program, layouts, values, config, **extra)
        ns = np.array([lay.n for lay in layouts], dtype=np.int64)
        offsets = np.cumsum(ns) - ns
        tables = kernel_tables(compiled.code, desc, layouts, values, offsets)
        out.update(_arrays(desc, "desc"))
        del out["desc.stats"], out["desc.blocks"], out["desc.config"]
        out["desc.config"] = (desc.config.block_q, desc.config.block_k, desc.config.min_run)
        out.update(_arrays(desc.blocks, "blocks"))
        stats = _arrays(desc.stats, "stats")
        del stats["stats.seconds"]
        stats.pop("stats.native", None)  # (which of two planners made the same bytes)
        out.update(stats)
        out["longest_equal_run"] = desc.longest_equal_run()
        out.update(_arrays(tables, "tables"))
        key = by_key(desc)
        out.update(_arrays(key, "by_key"))
        out.update(_arrays(key_tables(key, tables.kinds.dtype), "key_tables"))
        if not extra:
            out["floor"] = visited_tiles_floor(compiled.program, layouts, values, config)
    except Exception as exc:  # the same values must fail the same way (wherever this script's examples lie)
        out["error"] = f"{type(exc).__name__}: {exc}".replace(str(EXAMPLES), "<examples>")
    return out


def dump(path: str, seed: int, randoms: int, bind_at_once: int | None = None) -> None:
    global OPTIONS
    import maskc
    from maskc.compiler import compile_file

    if bind_at_once is not None:  # every batch of this many sequences bound at once (plan/layout_batch.py)
        import maskc.compiler
        maskc.compiler.BIND_AT_ONCE = bind_at_once

    try:  # the C++ planner where this tree has one and it builds: it plans every case it can, from the first
        from maskc.plan import native
        native.library(wait=True)
    except ImportError:
        pass
    OPTIONS = _options()
    compiled_cache: dict = {}
    results = {"maskc": maskc.__file__}
    for case_id, name, consts, o, config, sequences, extra in cases(seed, randoms):
        key = (name, tuple(sorted(consts.items())), o)
        if key not in compiled_cache:
            compiled_cache[key] = compile_file(EXAMPLES / f"{name}.mask", OPTIONS[o], consts)
        results[case_id] = run_case(compiled_cache[key], config, sequences, extra)
    with open(path, "wb") as f:
        pickle.dump(results, f)


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and np.array_equal(a, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _dump_with(tree: Path, out: Path, seed: int, randoms: int, bind_at_once: int | None = None) -> None:
    env = dict(os.environ, PYTHONPATH=str(tree))
    more = [] if bind_at_once is None else ["--bind-at-once", str(bind_at_once)]
    subprocess.run([sys.executable, __file__, "--dump", str(out), "--seed", str(seed), "--random", str(randoms), *more],
                   env=env, check=True, cwd="/tmp")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", default="HEAD", help="the commit (or a directory holding a tree) to compare with")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--random", type=int, default=8, help="random batches per example")
    parser.add_argument("--bind-at-once", type=int, help="this tree binds batches of this many sequences at once "
                        "(maskc.compiler.BIND_AT_ONCE; 1: every batch its layout allows)")
    parser.add_argument("--dump", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dump:
        dump(args.dump, args.seed, args.random, args.bind_at_once)
        return
    if Path(args.base).is_dir():
        compare(Path(args.base).resolve(), args)
        return
    revision = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--verify", args.base], capture_output=True,
                              text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch) / "base"
        subprocess.run(["git", "-C", str(HERE), "worktree", "add", "--detach", "--quiet", str(tree), revision], check=True)
        try:
            compare(tree, args)
        finally:
            subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(tree)], check=True)


def compare(base: Path, args) -> None:
    """Both trees' output, compared; exits with 1 on any difference."""
    head = subprocess.run(["git", "-C", str(base), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    base_out = Path(f"/tmp/plan_identical_base_{head[:12]}_{args.seed}_{args.random}.pkl")
    start = time.perf_counter()
    fresh = not base_out.exists()
    if fresh:
        _dump_with(base, base_out, args.seed, args.random)
    new_out = Path(f"/tmp/plan_identical_new_{os.getpid()}.pkl")
    _dump_with(HERE, new_out, args.seed, args.random, args.bind_at_once)
    old, new = (pickle.loads(p.read_bytes()) for p in (base_out, new_out))
    new_out.unlink()
    # Each dump names the maskc it imported: the tree asked for, not an installed copy. (A cached base was
    # checked when it was made, perhaps from a worktree since removed.)
    assert not fresh or Path(old["maskc"]).resolve().is_relative_to(base), "the base dump did not use the base tree"
    assert Path(new["maskc"]).resolve().is_relative_to(HERE), "the new dump did not use this tree"
    del old["maskc"], new["maskc"]
    problems = []
    if old.keys() != new.keys():
        problems.append(f"different cases: {sorted(old.keys() ^ new.keys())[:5]}")
    errors = 0
    for case in sorted(old.keys() & new.keys()):
        a, b = old[case], new[case]
        errors += "error" in a
        for name in sorted(a.keys() | b.keys()):
            if name not in a or name not in b or not _same(a[name], b[name]):
                problems.append(f"{case}: {name} differs")
    for p in problems[:50]:
        print(p)
    print(f"{len(old)} cases ({errors} refused values), {len(problems)} differences, "
          f"{time.perf_counter() - start:.0f} s")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
