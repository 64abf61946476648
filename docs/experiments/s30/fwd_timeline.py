"""Where a forward work item's time goes (the thirtieth session's question, docs/hopper.md), from clock64 stamps that
docs/experiments/s30/fwd-timeline.patch adds to the Hopper forward kernel (a build of its own, branch
s30-fwd-timeline: the patch is not on main).

The item cost (docs/experiments/s26/item_cost.py) prices a forward item at ~3 full tiles of the GPU's time beyond
its tiles (H200, 2026-12-06: 39.0 ns, a full tile 13.4 ns), a sixth of document's forward. Per pair (a query tile
and head), consumer 0's stamps: Q seen, the first K landed, the first S landed, its loop done (and consumer 1's),
its epilogue (O and LSE written) done, and inside the epilogue each barrier and the staging; the producer's: the
claim of the pair (start, end), its Q load and its first K load issued.
Per multiprocessor, the gap from one pair's epilogue to the next pair's Q seen.

    python docs/experiments/s30/fwd_timeline.py [--lengths 512 2048 32768] [--workloads document rm_shared]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

import maskc

N, HEADS, HEAD_DIM = 32768, 16, 128
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "docs" / "experiments" / "s28"))

from timeline import cycles_per_ns, each_call, timeline_buffer  # noqa: E402  (its import records every RawModule made after it)

ROWS, SLOTS = 65536, 16


def stamps(attn, cu_seqlens, values: dict) -> np.ndarray:
    """The stamps of one forward call (after three to warm up)."""
    q, k, v = (torch.randn(N, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    for _ in range(3):
        attn(q, k, v, cu_seqlens=cu_seqlens, **values)
    buf = timeline_buffer((ROWS, SLOTS))
    buf.fill(0)
    torch.cuda.synchronize()
    attn(q, k, v, cu_seqlens=cu_seqlens, **values)
    torch.cuda.synchronize()
    return buf.get()


def run(name: str, attn, cu_seqlens, values: dict) -> None:
    t = stamps(attn, cu_seqlens, values).astype(np.int64)
    t = t[(t[:, 1] != 0) & (t[:, 4] != 0) & (t[:, 6] != 0)]  # (an item without key tiles has no loop)
    sm, seen, k_first, first_s, end0, end1, epi, tiles, gtime, claim0, claim1, q_issued = (t[:, i] for i in range(12))
    k_issued, epi_barrier, epi_staged, epi_barrier2 = (t[:, i] for i in range(12, 16))
    ghz = cycles_per_ns(sm, seen, gtime)
    us = lambda c: np.median(c) / ghz / 1e3  # noqa: E731
    # Per multiprocessor, in order: the gap from a pair's epilogue to the next one seen, and what the next one's
    # producer did meanwhile (its claim's end and its Q load issued, against this pair's loop end).
    gaps, claim_after_loop, q_after_loop, busy, span = [], [], [], 0, 0
    gap_after = np.zeros(len(t), dtype=np.int64)  # per pair: until the next pair on its multiprocessor is seen
    for s in np.unique(sm):
        sel = np.flatnonzero(sm == s)
        order = sel[np.argsort(seen[sel])]
        prev, nxt = order[:-1], order[1:]
        gaps.extend(seen[nxt] - epi[prev])
        gap_after[prev] = seen[nxt] - epi[prev]
        claimed = claim1[nxt] != 0
        claim_after_loop.extend((claim1[nxt] - end0[prev])[claimed])
        q_after_loop.extend(q_issued[nxt] - end0[prev])
        busy += (epi[order] - seen[order]).sum()
        span += epi[order].max() - seen[order].min()
    many = tiles > 1
    per_tile = (end0 - first_s)[many] / (tiles[many] - 1)
    tile_us = us(per_tile)
    print(f"== {name}: {len(t)} pairs on {len(np.unique(sm))} SMs, {ghz:.3f} cycles/ns, tiles a pair median "
          f"{np.median(tiles):.0f} (max {tiles.max()}); pairs' own time {busy / span:.1%} of the SMs' span")
    print(f"   us (median): a tile in the loop {tile_us:.2f}; Q seen -> first K {us(k_first - seen):.2f}; first K -> "
          f"first S landed {us(first_s - k_first):.2f}; loop ends apart {us(np.abs(end0 - end1)):.2f}; epilogue "
          f"{us(epi - end0):.2f}; epilogue -> next Q seen {us(np.array(gaps)):.2f}")
    claimed = claim1 != 0  # (a CTA's first pair is its block index, not claimed)
    print(f"   epilogue (us, median): first barrier {us(epi_barrier - end0):.2f}, O and LSE staged "
          f"{us(epi_staged - epi_barrier):.2f}, second barrier {us(epi_barrier2 - epi_staged):.2f}, copies "
          f"{us(epi - epi_barrier2):.2f}; the item's first K issued -> landed {us(k_first - k_issued):.2f} "
          f"(issued {us(k_issued - q_issued):.2f} after its Q)")
    print(f"   producer (us, median): a claim {us((claim1 - claim0)[claimed]):.2f}; next claim done "
          f"{us(np.array(claim_after_loop)):+.2f} and next Q issued {us(np.array(q_after_loop)):+.2f} from the loop's end")
    for lo, hi in ((1, 1), (2, 2), (3, 4), (5, 8), (9, 32), (33, 1 << 30)):
        sel = (tiles >= lo) & (tiles <= hi)
        if not sel.any():
            continue
        whole = epi[sel] - seen[sel] + gap_after[sel]
        beyond = us(whole - tiles[sel] * np.median(per_tile))
        print(f"   tiles {lo:>3d}-{min(hi, tiles.max()):<5d} {sel.sum():5d} pairs: whole (to the next) {us(whole):7.2f} us, beyond its "
              f"tiles at the loop's rate {beyond:5.2f} us (= {beyond / tile_us:.2f} tiles); to the first S "
              f"{us(first_s[sel] - seen[sel]):.2f}, epilogue {us(epi[sel] - end0[sel]):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", nargs="*", type=int, default=[512, 2048, 32768])
    ap.add_argument("--workloads", nargs="*", default=["document", "rm_shared"])
    args = ap.parse_args()
    for call in each_call(args.lengths, args.workloads):
        run(*call)
    full = maskc.load(ROOT / "examples" / "full.mask", head_dim=HEAD_DIM, dtype="bf16")
    for length in args.lengths[:1]:  # documents without a partial tile: every tile full
        run(f"full documents of {length}", full, torch.arange(0, N + 1, length, dtype=torch.int32), {})


if __name__ == "__main__":
    main()
