"""A model of the Hopper forward's tail (the forty-seventh session; docs/hopper.md). The forward's persistent grid
hands out (work item, head) pairs greedily in `pair_at`'s order (templates/sm90a/attention_fwd.cu.j2: the longest
run of equal-length items head-major, the rest in groups of HEAD_GROUP heads, item-major inside a group, the items
longest first), which is a list schedule over 132 multiprocessors: each pair costs its key tiles plus FIXED. Printed:
the makespan over a perfect split, for main's order, for the last group widened to G heads (`tail` below), and for
the short items taken out of the groups into a last pass over every head (`short_items_last`). A
model on the descriptors, not a measurement: it leaves out L2, the clocks and the pairs' fixed cost, which is a
guess here (1 or 2.3 key tiles).

    PYTHONPATH=. python docs/experiments/s47/forward_tail_model.py
"""

import heapq
from pathlib import Path

import numpy as np

from maskc.compiler import compile_file
from maskc.kernels import KernelOptions
from maskc.plan.planner import plan

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
HEADS, MULTIPROCESSORS, HEAD_GROUP = 16, 132, 2
ANCHORS = ["full", "causal", "shared_prompt", "hstu", "document", "rm_shared", "clear", "clear_text"]


def pair_at(pair: int, items: int, run_first: int, run_last: int, tail: int) -> tuple[int, int]:
    """The template's pair_at, with the rest's last `tail` heads one group (tail = HEAD_GROUP: main's order before
    fg4, which made it 4)."""
    run_begin, run_end = run_first * HEADS, run_last * HEADS
    if run_begin <= pair < run_end:
        run_items, in_run = run_last - run_first, pair - run_begin
        return run_first + in_run % run_items, in_run // run_items
    before = pair < run_begin
    first, count = (0, run_first) if before else (run_last, items - run_last)
    local = pair if before else pair - run_end
    head_first = 0
    while True:  # groups of HEAD_GROUP heads, then the last `tail` heads as one
        heads = tail if HEADS - head_first <= tail else min(HEAD_GROUP, HEADS - head_first)
        if local < count * heads:
            return first + local // heads, head_first + local % heads
        local -= count * heads
        head_first += heads


def short_items_last(tiles: np.ndarray, run_first: int, run_last: int, threshold: float,
                     longest_first: bool = True) -> list[int]:
    """Each pair's item in a different order: main's over the items longer than `threshold` key tiles (and the
    equal-length run), then the short ones longest first (or, `longest_first` false, in the descriptor's order: their
    key groups together), each item's HEADS heads side by side: a last pass of many short pairs, which read few keys
    (so all heads at once stay in L2)."""
    short = [i for i in range(len(tiles)) if not run_first <= i < run_last and tiles[i] <= threshold]
    keep = [i for i in range(len(tiles)) if tiles[i] > threshold or run_first <= i < run_last]
    first = keep.index(run_first) if run_last > run_first else 0
    order = [keep[pair_at(k, len(keep), first, first + run_last - run_first, HEAD_GROUP)[0]]
             for k in range(len(keep) * HEADS)]
    last_pass = sorted(short, key=lambda i: -tiles[i]) if longest_first else short
    return order + [i for i in last_pass for _ in range(HEADS)]


def makespan_over_ideal(costs: list[float]) -> float:
    finish = [0.0] * MULTIPROCESSORS
    for cost in costs:
        heapq.heapreplace(finish, finish[0] + cost)
    return max(finish) / (sum(costs) / MULTIPROCESSORS)


def anchor(name: str):
    """An anchor's plan at its example's default values: (descriptor, key tiles per item, its equal-length run)."""
    compiled = compile_file(EXAMPLES / f"{name}.mask", KernelOptions(arch="sm_90a"))
    values, layouts = compiled.bind([dict(line) for line in compiled.program.batch] or [{}])
    desc = plan(compiled.program, layouts, values, compiled.tiles)
    return desc, np.diff(desc.row_ptr).astype(float), *desc.longest_equal_run()


def main():
    tails = (2, 4, 6, 8)
    print(f"{'workload':14s} fixed " + " ".join(f"{'G' + str(g):>7s}" for g in tails) + "  S1/8    S1/4    S1/2"
          "  (G2: main's order before fg4, G4: since; S: short items last, under 1/8, 1/4, 1/2 of the longest)")
    for name in ANCHORS:
        desc, tiles, run_first, run_last = anchor(name)
        for fixed in (1.0, 2.3):
            spans = []
            for g in tails:
                order = [pair_at(k, len(tiles), run_first, run_last, g)[0] for k in range(len(tiles) * HEADS)]
                spans.append(makespan_over_ideal(list(tiles[order] + fixed)))
            for fraction in (1 / 8, 1 / 4, 1 / 2):
                order = short_items_last(tiles, run_first, run_last, tiles.max() * fraction)
                spans.append(makespan_over_ideal(list(tiles[order] + fixed)))
            print(f"{name:14s} {fixed:5.1f} " + " ".join(f"{s:7.4f}" for s in spans))


if __name__ == "__main__":
    main()
