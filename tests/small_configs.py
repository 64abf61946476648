"""Small configurations of every example (const values, and runtime values per sequence): ragged sizes,
empty segments and families, several sequences, so that brute force stays cheap."""

import contextlib

SMALL = {
    "block_sparse": ({}, [{"n": 700}]),
    "causal": ({}, [{"n": 300}, {"n": 129}]),
    "chunked_causal": ({}, [{"n": 300, "chunk": 37}]),
    "clear": ({"h": 13, "w": 21}, [{"r": 4}]),
    "clear_text": ({"h": 11, "w": 17}, [{"text": 20, "r": 5}]),
    "dilated_window": ({}, [{"n": 300, "window": 10, "dilation": 3}]),
    "document": ({}, [{"docs": [50, 0, 70, 3, 90]}, {"docs": [200]}]),
    "full": ({}, [{"n": 100}, {"n": 0}, {"n": 65}]),
    "global_window": ({}, [{"n": 300, "global_tokens": 5, "radius": 20}]),
    "hstu": ({}, [{"n": 300, "targets": 40}]),
    "hstu_jagged": ({}, [{"n": 300}, {"n": 270, "targets": 30}]),
    "natten2d": ({"h": 14, "w": 19}, [{"kernel": 5, "d": 1}, {"kernel": 3, "d": 2}]),
    "prefix_lm": ({}, [{"n": 300, "prefix": 45}]),
    "rm_shared": ({}, [{"prompt": 40, "responses": [30, 0, 25]}, {"prompt": 13, "responses": []}]),
    "shared_prompt": ({}, [{"n": 300, "responses": [50, 60, 7]}]),
    "sinks_window": ({}, [{"n": 300, "sinks": 4, "window": 30}]),
    "sliding_window": ({}, [{"n": 300, "window": 33}]),
    "tree": ({}, [{"n": 60}, {"n": 40, "parent": [-1, 0, 1, 0, 3, 3, -1, 6]}]),
    "video3d": ({"frames": 3, "h": 7, "w": 9}, [{"rt": 1, "ry": 2, "rx": 3}]),
}


# Grids whose rules pin an axis, so that their tiles are one token wide along it (plan/tiling.py, pinned_axes):
# a dilated window written as a grid of `d` columns, windows inside each frame of a video beside text. Mask text
# and sequences. `dilated_boxes` has the same grid in every sequence, so that the Hopper kernels copy its tiles as
# boxes (runtime/__init__.py, _grid_box_maps); `dilated_rows`' differ in rows only, so they copy the boxes that
# stay inside each grid; `dilated`'s differ in width, so they copy them token by token.
_DILATED = ("mask m(n: int = 96, w: int = 5, d: int = 4)\nsegments:\n    S = grid(n // d, d)\nrules:\n"
            "    S -> S   where q.x == k.x and 0 <= q.y - k.y < w\n")
PINNED = {
    "dilated": (_DILATED, [{"n": 96}, {"n": 60, "d": 3, "w": 2}, {"n": 8, "d": 8}, {"n": 1200, "d": 4, "w": 40}]),
    "dilated_boxes": (_DILATED, [{"n": 1200, "w": 40}, {"n": 1200, "w": 3}]),
    "dilated_rows": (_DILATED, [{"n": 1200, "w": 40}, {"n": 1000, "w": 7}, {"n": 1204}]),  # boxes inside each grid
    "frames": ("mask m(h: int = 5, w: int = 6, r: int = 1)\nsegments:\n    T = 3\n    V = grid(3, h, w)\nrules:\n"
               "    V -> V   where q.t == k.t and abs(q.y - k.y) <= r and abs(q.x - k.x) <= r\n    * -> T   full\n",
               [{"n": 93}, {"n": 3 + 3 * 4 * 9, "h": 4, "w": 9, "r": 2}, {"n": 3 + 3 * 20 * 24, "h": 20, "w": 24}]),
}


def packed_call(attn, sequences) -> tuple[list[int], dict]:
    """The sequences' lengths, and the keywords of a packed call on them: cu_seqlens (numpy) and every runtime
    parameter as one value per sequence."""
    import numpy as np

    values, layouts = attn.compiled.bind(sequences)
    lengths = [lay.n for lay in layouts]
    params = {p.name: [val.arrays[p.name].tolist() if p.type.depth else val.scalars[p.name] for val in values]
              for p in attn.program.runtime_params}
    return lengths, {"cu_seqlens": np.concatenate([[0], np.cumsum(lengths)]), **params}


@contextlib.contextmanager
def without_residue_grids():
    """Compile without the pass that lays a dilated window out as a grid (passes/residue_grid.py), so that the
    planner's paths and the mask code for residues on a run see the window on its run."""
    from maskc import passes

    saved = passes.PIPELINE
    passes.PIPELINE = tuple((name, fn) for name, fn in saved if name != "residue-grids")
    try:
        yield
    finally:
        passes.PIPELINE = saved
