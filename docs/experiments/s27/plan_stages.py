"""The host planner's stages for new runtime values, timed apart (us, medians of 120 batches after 30): the
per-sequence values (`Attention.sequences`), bind, plan, kernel tables, and the backward's key tables, for packed
batches of 32768 tokens in COUNT random lengths (bench/plan_time.packed_batch). ROOT is the tree to time (a
worktree of another commit, to compare); no GPU needed.

    python docs/experiments/s27/plan_stages.py ROOT [document,rm_shared,hstu_jagged] [COUNT]
"""
import statistics
import sys
import time
root = sys.argv[1]
sys.path[:0] = [root + '/bench', root]
import numpy as np
import maskc
from plan_time import packed_batch
from maskc.plan.planner import plan, kernel_tables
ws = sys.argv[2].split(',') if len(sys.argv) > 2 else ['document', 'rm_shared', 'hstu_jagged']
count = int(sys.argv[3]) if len(sys.argv) > 3 else 12
out = []
for w in ws:
    attn = maskc.load(f"{root}/examples/{'causal' if w=='document' else w}.mask", arch="sm_90a", head_dim=128, dtype="fp16")
    c = attn.compiled
    try:  # the C++ planner where the tree has one (built, or loaded from the cache)
        from maskc.plan import native
        native.library(wait=True)
    except ImportError:
        pass
    rng = np.random.default_rng(5)
    T = {k: [] for k in ('seqs', 'bind', 'plan', 'ktab', 'bykey')}
    for i in range(150):
        cu, vals = packed_batch(rng, w, count)
        cu = cu.astype(np.int32)
        t0 = time.perf_counter()
        lengths = np.diff(cu).tolist()
        s = attn.sequences(lengths, vals)
        t1 = time.perf_counter()
        values, layouts = c.bind(s)
        t2 = time.perf_counter()
        d = plan(c.program, layouts, values, c.tiles)
        t3 = time.perf_counter()
        kt = kernel_tables(c.code, d, layouts, values, np.asarray(cu[:-1], np.int64))
        t4 = time.perf_counter()
        c.key_tables(d, kt)
        t5 = time.perf_counter()
        if i >= 30:
            for k, a, b in zip(T, (t0, t1, t2, t3, t4), (t1, t2, t3, t4, t5)):
                T[k].append(b - a)
    print(f"{w:12s} " + " ".join(f"{k}={1e6*statistics.median(v):6.1f}" for k, v in T.items()))
