"""The forward's orders of the forty-eighth session (docs/hopper.md), modelled: balance by the forty-seventh session's
list schedule (docs/experiments/s47/forward_tail_model.py: each (item, head) pair its key tiles plus FIXED, handed
out greedily over 132 multiprocessors in the list's order), and an L2 proxy: the K and V bytes of the distinct
(head, key tile) pairs that the 132 pairs in flight read, at every point of the list (a sliding window of 132 pairs),
at head dim 128 in bf16. Printed per anchor, for
  G2    main before this session (the last head group two heads),
  G4    fg4, landed (the last group four heads),
  S     sil as measured (the short items, 1/4 of the longest or less, out of their key groups, longest first, in a
        last pass over every head; document's forward cycles +7.7% on an H100),
  SG    the same pass with the short items kept in their key groups' order (not built).
The proxy is not a cache model: it says how many bytes the CTAs at once want, not what L2 keeps.

    PYTHONPATH=. python docs/experiments/s48/forward_order_model.py
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s47"))
from forward_tail_model import (ANCHORS, HEADS, MULTIPROCESSORS, anchor, makespan_over_ideal,  # noqa: E402
                                pair_at, short_items_last)

FIXED = 2.3  # key tiles' worth of an item's fixed cost (docs/hopper.md: ~3)
TILE_BYTES = 128 * 128 * 2 * 2  # a key tile's K and V at head dim 128, bf16


def heads_of(items: list[int]) -> list[int]:
    """Each pair's head where an item's pairs take its heads in order (true of every order here): recovered by
    counting each item's pairs so far."""
    seen = {}
    heads = []
    for i in items:
        heads.append(seen.get(i, 0))
        seen[i] = seen.get(i, 0) + 1
    return heads


def l2_proxy(items: list[int], heads: list[int], desc) -> tuple[float, float]:
    """Max and mean over the list of the MB the 132 pairs in flight read (distinct (sequence, head, key tile))."""
    reads = [frozenset((int(desc.work_seq[i]), h, int(k)) for k in desc.k_tile[desc.row_ptr[i]:desc.row_ptr[i + 1]])
             for i, h in zip(items, heads)]
    sizes = []
    for start in range(0, max(1, len(reads) - MULTIPROCESSORS + 1), 16):
        sizes.append(len(frozenset().union(*reads[start:start + MULTIPROCESSORS])) * TILE_BYTES / 2**20)
    return max(sizes), float(np.mean(sizes))


def main():
    print(f"{'workload':14s} {'order':5s} {'tail':>7s} {'L2 max':>8s} {'L2 mean':>8s}  (tail: makespan over a perfect "
          "split - 1; L2: MB the pairs in flight read)")
    for name in ANCHORS:
        desc, tiles, run_first, run_last = anchor(name)
        pairs = range(len(tiles) * HEADS)
        orders = {}
        for g in (2, 4):
            chosen = [pair_at(k, len(tiles), run_first, run_last, g) for k in pairs]
            orders[f"G{g}"] = ([i for i, _ in chosen], [h for _, h in chosen])
        for label, longest_first in (("S", True), ("SG", False)):
            items = short_items_last(tiles, run_first, run_last, tiles.max() / 4, longest_first)
            orders[label] = (items, heads_of(items))
        for label, (items, heads) in orders.items():
            span = makespan_over_ideal(list(tiles[items] + FIXED)) - 1
            top, mean = l2_proxy(items, heads, desc)
            print(f"{name:14s} {label:5s} {span:7.2%} {top:8.1f} {mean:8.1f}")


if __name__ == "__main__":
    main()
