"""Host only: what pairing neighbouring key tiles would cost in steps, per anchor workload. A cluster of two dK/dV
CTAs (key tiles 2m and 2m + 1 of one sequence) walks the union of their two query-tile lists in lockstep, so the
pair takes 2 x |union| CTA-steps of the GPU's time where today's CTAs take |list 2m| + |list 2m + 1|. Prints, per
workload, the steps of today's lists, of the pairs' unions, and the overhead 2 |union| / |lists| - 1 (the paired
kernel gains only if its per-step saving is larger).

    PYTHONPATH=. python docs/experiments/s40/pair_union.py [WORKLOAD ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from maskc.codegen import KernelOptions
from maskc.compiler import compile_file
from maskc.plan.by_key import by_key
from maskc.plan.planner import plan

ROOT = Path(__file__).resolve().parents[3]
ANCHORS = ["causal", "shared_prompt", "hstu", "document", "rm_shared", "clear", "clear_text", "full", "hstu_jagged"]


def union_overhead(name: str) -> tuple[int, int]:
    compiled = compile_file(ROOT / "examples" / f"{name}.mask", KernelOptions(arch="sm_90a", head_dim=128))
    program = compiled.program
    sequences = [dict(line) for line in program.batch] if program.batch else [{}]
    values, layouts = compiled.bind(sequences)
    keys = by_key(plan(program, layouts, values, compiled.tiles))
    lists = {}
    for w in range(len(keys.work_seq)):
        lo, hi = keys.col_ptr[w], keys.col_ptr[w + 1]
        lists[int(keys.work_seq[w]), int(keys.work_ktile[w])] = set(keys.q_tile[lo:hi].tolist())
    steps = sum(len(s) for s in lists.values())
    paired = 0
    for (seq, k), tiles in lists.items():
        if k % 2 == 0:  # a pair, or (the sequence's last tile) a lone one
            partner = lists.get((seq, k + 1))
            paired += len(tiles) if partner is None else 2 * len(tiles | partner)
    return steps, paired


def main(names: list[str]) -> None:
    for name in names or ANCHORS:
        steps, paired = union_overhead(name)
        print(f"{name:14s} tiles today {steps:7d}   paired (2 x union) {paired:7d}   overhead {paired / steps - 1:+7.2%}")


if __name__ == "__main__":
    main(sys.argv[1:])
