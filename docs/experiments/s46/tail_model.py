"""A model of the Hopper dK/dV kernel's tail (the forty-sixth session; docs/training.md). The hardware starts CTAs
in blockIdx order on whichever multiprocessor frees up first; each CTA costs its item's query tiles plus ITEM_COST
(the forty-fifth session's fit: ~17,000 SM cycles an item against ~7,260 a query tile). The makespan of that list
schedule over 132 multiprocessors, divided by a perfect split of the same work, for main's order (`item_head_at`:
the long items head-major, then the rest head-major) and for the rest's last G heads item-major together (the tl
patch, docs/experiments/s46/bwd-tail-heads.patch, whose `tail_heads` picks G). A model on the descriptors, not a
measurement: it leaves out L2, the dQ reductions and the clocks.

    PYTHONPATH=. python docs/experiments/s46/tail_model.py
"""

import heapq
from pathlib import Path

import numpy as np

from maskc.compiler import compile_file
from maskc.kernels import KernelOptions
from maskc.plan.by_key import by_key, long_items
from maskc.plan.planner import plan

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
HEADS, MULTIPROCESSORS, ITEM_COST = 16, 132, 2.3
ANCHORS = ["full", "causal", "shared_prompt", "hstu", "document", "rm_shared", "clear", "clear_text"]


def makespan_over_ideal(costs: list[float]) -> float:
    finish = [0.0] * MULTIPROCESSORS
    for cost in costs:
        heapq.heapreplace(finish, finish[0] + cost)
    return max(finish) / (sum(costs) / MULTIPROCESSORS)


def order(tiles: np.ndarray, long: int, tail: int) -> list[float]:
    """Each CTA's item length in blockIdx order: the long items head-major, the rest head-major but the last `tail`
    heads item-major together (tail 1: main's order)."""
    rest = list(tiles[long:])
    costs = list(tiles[:long]) * HEADS + rest * (HEADS - tail)
    return costs + [t for t in rest for _ in range(tail)]


def main():
    print(f"{'workload':14s} {'G1':>7s} {'G2':>7s} {'G3':>7s} {'G4':>7s}  longest/share (G1: main's order)")
    for name in ANCHORS:
        compiled = compile_file(EXAMPLES / f"{name}.mask", KernelOptions(arch="sm_90a"))
        values, layouts = compiled.bind([dict(line) for line in compiled.program.batch] or [{}])
        key_desc = by_key(plan(compiled.program, layouts, values, compiled.tiles))
        tiles = np.diff(key_desc.col_ptr).astype(float)
        long = long_items(key_desc.col_ptr, MULTIPROCESSORS)
        spans = [makespan_over_ideal([t + ITEM_COST for t in order(tiles, long, g)]) for g in (1, 2, 3, 4)]
        share = tiles[long:].sum() / MULTIPROCESSORS
        print(f"{name:14s} " + " ".join(f"{s:7.4f}" for s in spans) + f"  {tiles[long:].max() / share:.2f}")


if __name__ == "__main__":
    main()
