"""What `maskc explain` shows: the IR after each pass, tile statistics for concrete runtime values, and a
picture of the mask with the tiles the kernel visits.

Everything here scales with the tiles the descriptor visits, never with n^2: visible pairs are counted
per visited tile (a full tile contributes its whole area, a partial tile is evaluated exactly, in chunks),
and pictures of long sequences are built at a reduced resolution from the same per-tile counts. The tiles
visited still grow with n^2 for dense masks (causal attention over n = 10^6 visits 61 million), so past
COUNTED_TILES_MAX the counts come from an even sample of the visited tiles, and a picture is refused.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from maskc import ir
from maskc.compiler import CompiledMask, compile_program
from maskc.diagnostics import show_value
from maskc.ir.members import member_split
from maskc.kernels import KernelOptions, TileKind
from maskc.plan import native
from maskc.plan.arrays import expand
from maskc.plan.layout import ConcreteLayout, SequenceValues
from maskc.plan.layout_batch import ValueColumns
from maskc.plan.members import split
from maskc.plan.planner import Descriptor
from maskc.tools.reference import dense_mask, visible

EXACT_PICTURE_MAX_N = 4096  # up to here the picture is the exact boolean mask, one pixel per pair
PICTURE_MAX_PIXELS = 2048  # beyond it, each pixel shows the visible fraction of a square of pairs
DUMP_MASK_MAX_N = 16384  # an n x n boolean array: 256 MiB at this size
PAIRS_PER_CHUNK = 1 << 20  # partial tiles are evaluated this many pairs at a time
# Visited tiles counted one by one (a few seconds and a few hundred MiB; causal attention up to n ~ 260,000):
# beyond, an even sample of this many, and no picture.
COUNTED_TILES_MAX = 1 << 22

FULL_COLOUR = "#2ca02c"
PARTIAL_COLOUR = "#ff7f0e"


# ---------------------------------------------------------------------------------------------------
# The IR after each pass
# ---------------------------------------------------------------------------------------------------


def show_param(p: ir.ParamDecl, consts: dict[str, object]) -> str:
    def literal(value) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, tuple):
            return "[" + ", ".join(literal(v) for v in value) + "]"
        return str(value)

    if p.const:
        return f"const {p.name}: {p.type} = {literal(consts[p.name])}"
    default = "" if p.default is None else f" = {literal(p.default)}"
    return f"{p.name}: {p.type}{default}"


def show_segment(seg: ir.Segment) -> str:
    if seg.kind == "family":
        return f"{seg.name}[i < {ir.show(seg.count)}] = {ir.show(seg.length)}"
    if seg.kind == "grid":
        return f"{seg.name} = grid({', '.join(ir.show(d) for d in seg.dims)})"
    return f"{seg.name} = {ir.show(seg.length)}"


def show_region(index: int, region: ir.Region) -> str:
    sides = f"[{index}] {'|'.join(region.q.segments)} -> {'|'.join(region.k.segments)}"
    return f"{sides} full" if region.pred == ir.TRUE else f"{sides} where {ir.show(region.pred)}"


def _region_lines(regions: tuple[ir.Region, ...]) -> list[str]:
    """One line per region, with the source rule(s) it came from as an aligned comment."""
    if not regions:
        return ["    (none: every pair is hidden)"]
    texts = [show_region(r, region) for r, region in enumerate(regions)]
    width = min(max(len(t) for t in texts), 60)
    return [f"    {t:<{width}}  # {region.rule}" if region.rule else f"    {t}" for t, region in zip(texts, regions)]


def compile_explained(program: ir.Program, options: KernelOptions = KernelOptions(),
                      consts: dict[str, object] | None = None) -> tuple[CompiledMask, list[str]]:
    """Compile, recording the IR after each pass: the full IR as lowered, then for each pass only what
    it changed (segments, regions, or nothing), so the effect of every pass stands out."""
    lines: list[str] = []
    previous: list[ir.Program] = []

    def observe(stage: str, prog: ir.Program) -> None:
        if not previous:
            lines.append(f"mask {prog.name}({', '.join(show_param(p, dict(prog.consts)) for p in prog.params)})")
            lines.append(f"== {stage}")
            changed_segments = changed_regions = True
        else:
            before = previous[-1]
            changed_segments = prog.segments != before.segments
            changed_regions = prog.regions != before.regions
            lines.append(f"== {stage}" + ("" if changed_segments or changed_regions else ": no change"))
        if changed_segments:
            lines.append("  segments:")
            lines.extend(f"    {show_segment(s)}" for s in prog.segments)
        if changed_regions:
            lines.append("  regions:")
            lines.extend(_region_lines(prog.regions))
        previous.append(prog)

    compiled = compile_program(program, options, consts, observe=observe)
    return compiled, lines


# What a pair of a partial tile costs: each rule's test as generated, and what makes it expensive, so that a mask
# can be rewritten (or a value made const) where the inner loop does more than it needs to.
PAIR_COSTS = (("long long", "64-bit arithmetic"), ("floordiv(", "a division"), ("floormod(", "a division"),
              ("array_read(", "a list read"), ("ancestor(", "an ancestor() walk"))


def pair_test_lines(compiled: CompiledMask, width: int = 110) -> list[str]:
    """The generated mask of partial tiles, rule by rule: the test of a pair, the values computed once per
    row and per column of a tile (what they stand for), and the costs a pair pays beyond 32-bit compares."""
    code = compiled.code

    def clip(text: str) -> str:
        return text if len(text) <= width else text[:width - 3] + "..."

    lines = ["== pair test (the mask of partial tiles; full tiles run none)"]
    if code.rules_are_key_intervals and compiled.tiling.tiles_are_runs:
        lines.append("  every rule is an interval of keys per row: a partial tile is masked by column ranges, "
                     "no test per pair")
        return lines
    fields = {f"{side}.{f.name}": f.comment for side, fs in (("q", code.row_fields), ("k", code.col_fields))
              for f in fs}
    for region in code.regions:
        lines.append(f"  [{region.index}] per pair: {clip(region.elem)}")
        used = [name for name in fields if re.search(rf"\b{re.escape(name)}\b", region.elem)]  # q.h1, not q.h10
        for name in used:
            lines.append(f"      {name} = {clip(fields[name])}  (once per {'row' if name[0] == 'q' else 'column'})")
        costs = sorted({cost for marker, cost in PAIR_COSTS if marker in region.elem})
        lines.append(f"      per pair: {', '.join(costs) if costs else '32-bit integer operations only'}")
    return lines


# ---------------------------------------------------------------------------------------------------
# Runtime values
# ---------------------------------------------------------------------------------------------------


def choose_sequences(program: ir.Program, n: int | None = None,
                     runtime: dict[str, object] | None = None) -> tuple[list[dict[str, object]], str]:
    """The sequences to plan for, and where their values came from: `n` if given (one sequence), else
    the mask's `batch:` section, else its defaults. `runtime` values override those of every sequence."""
    runtime = dict(runtime or {})
    overrides = ", with --param values" if runtime else ""
    if n is not None:
        return [{**runtime, "n": n}], f"n from --n{overrides}"
    if program.batch:
        return [{**dict(line), **runtime} for line in program.batch], f"the mask's default batch{overrides}"
    return [runtime], f"the mask's defaults{overrides}"


def describe_values(layout: ConcreteLayout, values: SequenceValues) -> str:
    """`n = 4350, prompt = 1299, responses = [838, 320, 517, 376]`: long lists shortened, tables sized."""
    shown = [f"n = {layout.n}"]
    shown += [f"{name} = {show_value(v)}" for name, v in values.scalars.items()]
    for name, a in values.arrays.items():
        if a.ndim == 2:
            shown.append(f"{name} = a {a.shape[0]} x {a.shape[1]} table")
        elif len(a) <= 12:
            shown.append(f"{name} = [{', '.join(show_value(x) for x in a)}]")
        else:
            head = ", ".join(show_value(x) for x in a[:8])
            shown.append(f"{name} = [{head}, ... {show_value(a[-1])}] ({len(a)} values)")
    return ", ".join(shown)


# ---------------------------------------------------------------------------------------------------
# Visited tiles and exact counts
# ---------------------------------------------------------------------------------------------------


def tile_tokens(desc: Descriptor, side: str, seq, tiles) -> np.ndarray:
    """The token in every slot of the given tiles, `[len(tiles), slots]`, -1 where a slot holds none.
    Everything here that looks at tokens goes through this: a tile is a set of tokens (a 2D tile of a grid
    is not a range)."""
    return desc.tokens(side, np.asarray(seq, dtype=np.int64), np.asarray(tiles, dtype=np.int64))


def entries_to_count(desc: Descriptor, max_tiles: int) -> np.ndarray | None:
    """The visited tiles to count one by one, as positions in the descriptor's lists: all of them (None) up to
    `max_tiles`, else one at random (seed 0) in each run of s consecutive positions, s chosen so that at most
    `max_tiles` are. The lists run by decreasing work, each by ascending k tile, so the sample spreads evenly
    over long and short rows and along each row; the random offsets keep it from falling in step with a
    pattern of the mask."""
    visited = len(desc.k_tile)
    if visited <= max_tiles:
        return None
    step = -(-visited // max_tiles)
    starts = np.arange(0, visited, step)
    return starts + np.random.default_rng(0).integers(0, np.minimum(step, visited - starts))


@dataclass
class VisitedTiles:
    """The descriptor flattened: one entry per visited (q tile, k tile), in descriptor order (all of them, or
    the sample `entries_to_count` chose; `weight` visited tiles stand behind each)."""

    seq: np.ndarray  # int64
    qtile: np.ndarray  # int64
    ktile: np.ndarray  # int64
    full: np.ndarray  # bool: no mask code runs there
    area: np.ndarray  # int64: (q, k) pairs of real tokens in the tile
    k_whole: np.ndarray  # bool: every slot of the k tile holds a token (else the tile cannot be FULL)
    weight: float = 1.0

    @staticmethod
    def of(desc: Descriptor, entries: np.ndarray | None = None) -> "VisitedTiles":
        """The tiles at the given positions of the descriptor's lists (None: every one)."""
        entries = np.arange(len(desc.k_tile)) if entries is None else np.asarray(entries, dtype=np.int64)
        work = np.searchsorted(desc.row_ptr, entries, side="right") - 1
        seq = desc.work_seq[work].astype(np.int64)
        qtile = desc.work_qtile[work].astype(np.int64)
        ktile = desc.k_tile[entries].astype(np.int64)
        # Tokens per tile, found once per work item and once per k tile of the batch (many entries share one).
        q_size = desc.sizes("q", desc.work_seq, desc.work_qtile)
        k_count = desc.blocks.tiles("k")
        k_size = desc.sizes("k", *expand(k_count))
        k_tokens = k_size[(np.cumsum(k_count) - k_count)[seq] + ktile]
        weight = len(desc.k_tile) / len(entries) if len(entries) else 1.0
        return VisitedTiles(seq, qtile, ktile, desc.kind[entries] == TileKind.FULL, q_size[work] * k_tokens,
                            k_tokens == desc.config.block_k, weight)

    @property
    def sampled(self) -> bool:
        return self.weight != 1.0

    def total(self, per_tile: np.ndarray) -> int:
        """The sum of a per-tile quantity over every visited tile: exact, or estimated from the sample."""
        return round(float(per_tile.sum()) * self.weight) if self.sampled else int(per_tile.sum())

    def __len__(self) -> int:
        return len(self.seq)


def _chunks(entries: np.ndarray, pairs_per_entry: int):
    step = max(1, PAIRS_PER_CHUNK // max(pairs_per_entry, 1))
    for start in range(0, len(entries), step):
        yield entries[start:start + step]


PartialChunk = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], None]


def visible_per_tile(program: ir.Program, desc: Descriptor, layouts: list[ConcreteLayout],
                     values: list[SequenceValues], tiles: VisitedTiles,
                     on_partial: PartialChunk | None = None) -> np.ndarray:
    """Exact visible pairs of every visited tile. A full tile is visible over its whole area (that is
    what FULL means to the kernel); a partial tile is evaluated with the brute-force definition
    (`reference.visible`), a chunk of tiles at a time. `on_partial(entries, q_tokens, k_tokens, vis)`
    sees each evaluated chunk (vis is `[len(entries), q slots, k slots]`)."""
    counts = np.where(tiles.full, tiles.area, 0)
    partial = ~tiles.full
    for b in np.unique(tiles.seq[partial]):
        entries = np.nonzero((tiles.seq == b) & partial)[0]
        for chunk in _chunks(entries, desc.config.block_q * desc.config.block_k):
            q = tile_tokens(desc, "q", tiles.seq[chunk], tiles.qtile[chunk])
            k = tile_tokens(desc, "k", tiles.seq[chunk], tiles.ktile[chunk])
            vis = visible(program, layouts[b], values[b], q[:, :, None], k[:, None, :])  # False at -1
            counts[chunk] = vis.sum(axis=(1, 2))
            if on_partial is not None:
                on_partial(chunk, q, k, vis)
    return counts


@dataclass
class TileReport:
    mask: str
    origin: str  # where the runtime values came from
    described: list[str]  # the values of each sequence
    block_q: int
    block_k: int
    pairs: int
    visible_pairs: int
    visited_pairs: int
    tiles_total: int
    tiles_full: int
    tiles_partial: int
    partial_in_fact_full: int  # every real pair visible and every slot of the k tile a token: could run as FULL
    partial_in_fact_empty: int
    tiles_refined: int
    tiles_conservative: int
    planned_by: str  # how the planner found the tiles: in closed form, or by its search
    descriptor_bytes: int
    plan_seconds: float
    tiles_counted: int  # visited tiles whose pairs were counted: all of them, or a sample (then the counts are estimates)
    as_called: str | None = None  # how a packed call runs these values, where it splits them (maskc.plan.members)

    @property
    def estimated(self) -> bool:
        return self.tiles_counted < self.tiles_full + self.tiles_partial

    @property
    def tiles_empty(self) -> int:
        return self.tiles_total - self.tiles_full - self.tiles_partial

    @property
    def visible_fraction(self) -> float:
        return self.visible_pairs / self.pairs if self.pairs else 0.0

    @property
    def tile_density(self) -> float:
        return self.visible_pairs / self.visited_pairs if self.visited_pairs else 0.0

    def lines(self) -> list[str]:
        def share(part: int, whole: int) -> str:
            return f"{100 * part / whole:.2f}%" if whole else "-"

        sequences = len(self.described)
        out = [f"tile statistics, values: {self.origin} ({sequences} sequence{'s' * (sequences != 1)}, "
               f"tiles of {self.block_q} queries x {self.block_k} keys)"]
        shown = self.described if sequences <= 10 else self.described[:8]
        out += [f"  sequence {b}: {text}" for b, text in enumerate(shown)]
        if len(shown) < sequences:
            out.append(f"  ... and {sequences - len(shown)} more")
        visited = self.tiles_full + self.tiles_partial
        about = "~" if self.estimated else ""  # marks the counts that the sample estimates
        if self.estimated:
            out.append(f"  counted            a sample of {self.tiles_counted:,} of the {visited:,} visited tiles: the "
                       f"figures marked ~ are estimates (every tile is counted up to {COUNTED_TILES_MAX:,}; give a "
                       "smaller --n for exact ones)")
        out += [
            f"  visible pairs      {about}{self.visible_pairs:,} of {self.pairs:,} "
            f"({'estimated' if self.estimated else 'exact count'}) = {100 * self.visible_fraction:.4f}%",
            f"  tiles              {self.tiles_total:,}: {self.tiles_empty:,} empty ({share(self.tiles_empty, self.tiles_total)}), "
            f"{self.tiles_full:,} full ({share(self.tiles_full, self.tiles_total)}), "
            f"{self.tiles_partial:,} partial ({share(self.tiles_partial, self.tiles_total)})",
            f"  tile density       {about}{self.tile_density:.4f} (visible pairs / the {about}{self.visited_pairs:,} pairs "
            f"of the {visited:,} visited tiles)",
            f"  planner            {self.planned_by}; {self.tiles_refined:,} tiles refined by exact evaluation, "
            f"{self.tiles_conservative:,} left partial past the refinement budget",
            f"  partial tiles      {about}{self.partial_in_fact_full:,} are in fact full, {about}"
            f"{self.partial_in_fact_empty:,} in fact empty (work a sharper planner would save)",
            f"  descriptor         {self.descriptor_bytes:,} bytes, planned in {1e3 * self.plan_seconds:.2f} ms",
        ]
        if self.as_called is not None:
            out.append(f"  as called          {self.as_called}")
        return out


def _planned_by(stats, regions: int) -> str:
    if stats.fast_path:
        return "row intervals in closed form, " + ("in C++" if stats.native else "with numpy (the C++ planner is off "
                                                    "or no C++ compiler built it; the same results, slower)")
    if stats.regions_factored == regions:
        return "every rule in closed form, by its factors"
    if stats.regions_factored:
        return f"{stats.regions_factored} of {regions} rules in closed form by their factors, the others searched"
    return "interval search"


def as_called(compiled: CompiledMask, sequences: list[dict[str, object]], layouts: list[ConcreteLayout]) -> str | None:
    """Where a packed call runs these values as one sequence per member (maskc.plan.members), what it plans."""
    how = member_split(compiled.program)
    if how is None or not layouts:
        return None
    lengths = [lay.n for lay in layouts]
    names = {name for line in sequences for name in line if name != "n"}
    defaults = {p.name: p.default for p in compiled.program.runtime_params}
    given = ValueColumns(len(lengths), {"n": lengths, **{name: [line.get(name, defaults[name]) for line in sequences]
                                                         for name in names}})
    parts = split(how, lengths, np.zeros(len(lengths), dtype=np.int64), given, compiled.options.tile)
    if parts is None:
        return None
    members = parts.values(given)
    stats = compiled.plan(members)[0].stats
    return (f"{len(members):,} sequences in a packed call, one per member of {how.family} (no rule crosses its "
            f"members: tiles start at each): {stats.tiles_full + stats.tiles_partial:,} tiles visited, "
            f"{stats.tiles_full:,} full, {stats.tiles_partial:,} partial")


def tile_report(compiled: CompiledMask, desc: Descriptor, layouts: list[ConcreteLayout],
                values: list[SequenceValues], origin: str, counts: np.ndarray, tiles: VisitedTiles) -> TileReport:
    partial = ~tiles.full
    stats = desc.stats
    return TileReport(
        mask=compiled.program.name,
        origin=origin,
        described=[describe_values(lay, val) for lay, val in zip(layouts, values)],
        block_q=desc.config.block_q,
        block_k=desc.config.block_k,
        pairs=sum(lay.n * lay.n for lay in layouts),
        visible_pairs=tiles.total(counts),
        visited_pairs=tiles.total(tiles.area),
        tiles_total=stats.tiles_total,
        tiles_full=stats.tiles_full,
        tiles_partial=stats.tiles_partial,
        partial_in_fact_full=tiles.total(partial & (counts == tiles.area) & tiles.k_whole),
        partial_in_fact_empty=tiles.total(partial & (counts == 0)),
        tiles_refined=stats.tiles_refined,
        tiles_conservative=stats.tiles_conservative,
        planned_by=_planned_by(stats, len(compiled.program.regions)),
        descriptor_bytes=desc.nbytes,
        plan_seconds=stats.seconds,
        tiles_counted=len(tiles),
    )


# ---------------------------------------------------------------------------------------------------
# Pictures
# ---------------------------------------------------------------------------------------------------


def picture_scale(n: int) -> int:
    """Pairs per pixel side: 1 (the exact mask) up to EXACT_PICTURE_MAX_N, else the smallest power of
    two that keeps the picture within PICTURE_MAX_PIXELS."""
    if n <= EXACT_PICTURE_MAX_N:
        return 1
    scale = 1
    while -(-n // scale) > PICTURE_MAX_PIXELS:
        scale *= 2
    return scale


def _pixels_per_tile(tokens: np.ndarray, scale: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For tiles given by their slot tokens, the pixels their tokens fall in, as CSR: tile t's pixels are
    pixels[starts[t]:starts[t + 1]], with counts[...] of its tokens in each."""
    tile = np.broadcast_to(np.arange(len(tokens), dtype=np.int64)[:, None], tokens.shape)
    real = tokens >= 0
    pixel = tokens[real] // scale
    span = int(pixel.max(initial=0)) + 1
    keys, counts = np.unique(tile[real] * span + pixel, return_counts=True)
    starts = np.searchsorted(keys // span, np.arange(len(tokens) + 1))
    return starts, keys % span, counts


def tile_pixel_pairs(desc: Descriptor, seq: int, qtiles: np.ndarray, ktiles: np.ndarray, scale: int):
    """The pixels that the pairs of each tile (qtiles[e], ktiles[e]) fall in. A tile's pairs are its q
    tokens x its k tokens, so they cover exactly the pixel rows of its q tokens x the pixel columns of
    its k tokens. Yields chunks of (entry, pixel row, pixel column, pairs of the tile in that pixel)."""
    # Pixels are found once per distinct q tile and k tile, then paired up per visited tile.
    q_ids, q_of = np.unique(qtiles, return_inverse=True)
    k_ids, k_of = np.unique(ktiles, return_inverse=True)
    q_of, k_of = q_of.reshape(-1), k_of.reshape(-1)
    q_start, q_pixel, q_count = _pixels_per_tile(tile_tokens(desc, "q", np.full(len(q_ids), seq), q_ids), scale)
    k_start, k_pixel, k_count = _pixels_per_tile(tile_tokens(desc, "k", np.full(len(k_ids), seq), k_ids), scale)
    q_len, k_len = np.diff(q_start)[q_of], np.diff(k_start)[k_of]
    per_entry = q_len * k_len
    step = max(1, PAIRS_PER_CHUNK // max(int(per_entry.max(initial=1)), 1))
    for lo in range(0, len(qtiles), step):
        entries = np.arange(lo, min(lo + step, len(qtiles)))
        sizes = per_entry[entries]
        entry = np.repeat(entries, sizes)
        offset = np.arange(len(entry)) - np.repeat(np.cumsum(sizes) - sizes, sizes)  # inside the entry's pairs
        qi = q_start[q_of[entry]] + offset // k_len[entry]
        ki = k_start[k_of[entry]] + offset % k_len[entry]
        yield entry, q_pixel[qi], k_pixel[ki], q_count[qi] * k_count[ki]


class MaskPicture:
    """The picture of one sequence, built from its visited tiles: visible pairs per pixel (a pixel is a
    `scale` x `scale` square of pairs) and, per pixel, a code for the tiles over it: 0 none, 1 or 2 full,
    3 or 4 partial (the two shades alternate between neighbouring tiles so that tiles can be told apart;
    where a pixel holds several tiles, partial wins)."""

    def __init__(self, desc: Descriptor, tiles: VisitedTiles, seq: int, n: int, scale: int):
        self.desc, self.tiles, self.seq, self.n, self.scale = desc, tiles, seq, n, scale
        self.size = -(-n // scale)
        self.visible = np.zeros((self.size, self.size), dtype=np.int64)
        self.kinds = np.zeros((self.size, self.size), dtype=np.int8)
        self.mine = np.nonzero(tiles.seq == seq)[0]

    def add_partial(self, entries: np.ndarray, q: np.ndarray, k: np.ndarray, vis: np.ndarray) -> None:
        """A chunk from `visible_per_tile`: its visible pairs, one by one."""
        if self.tiles.seq[entries[0]] != self.seq:  # a chunk holds tiles of one sequence
            return
        t, i, j = np.nonzero(vis)
        np.add.at(self.visible, (q[t, i] // self.scale, k[t, j] // self.scale), 1)

    def add_tiles(self, count_full: bool) -> None:
        """Mark every visited tile's pixels, and count the pairs of full tiles (all visible)."""
        qtile, ktile = self.tiles.qtile[self.mine], self.tiles.ktile[self.mine]
        full = self.tiles.full[self.mine]
        code = (np.where(full, 1, 3) + (qtile + ktile) % 2).astype(np.int8)
        for entry, row, col, pairs in tile_pixel_pairs(self.desc, self.seq, qtile, ktile, self.scale):
            np.maximum.at(self.kinds, (row, col), code[entry])
            if count_full:
                counted = full[entry]
                np.add.at(self.visible, (row[counted], col[counted]), pairs[counted])

    def fraction(self) -> np.ndarray:
        """Visible fraction of each pixel (pixels at the edge hold fewer pairs)."""
        side = np.clip(self.n - np.arange(self.size, dtype=np.int64) * self.scale, 0, self.scale)
        return self.visible / np.maximum(side[:, None] * side[None, :], 1)


def render_png(image: np.ndarray, kinds: np.ndarray, n: int, title: str) -> bytes:
    """The mask (visible = dark) with the visited tiles over it, as PNG bytes. Needs matplotlib."""
    from matplotlib.colors import to_rgba
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    # Overlay colours by tile code (see MaskPicture): none, full (two shades), partial (two shades).
    palette = np.zeros((5, 4))
    for code, (colour, alpha) in {1: (FULL_COLOUR, 0.30), 2: (FULL_COLOUR, 0.45),
                                  3: (PARTIAL_COLOUR, 0.30), 4: (PARTIAL_COLOUR, 0.45)}.items():
        palette[code] = to_rgba(colour, alpha)
    fig = Figure(figsize=(8, 8), dpi=150)
    ax = fig.add_subplot()
    ax.imshow(image, cmap="Greys", vmin=0, vmax=1, extent=(0, n, n, 0), interpolation="antialiased")
    ax.imshow(palette[kinds], extent=(0, n, n, 0), interpolation="nearest")
    ax.set_xlim(0, n)
    ax.set_ylim(n, 0)
    ax.set_xlabel("key position k")
    ax.set_ylabel("query position q")
    ax.set_title(title, fontsize=9)
    ax.legend(handles=[Patch(color=FULL_COLOUR, alpha=0.5, label="full tile"),
                       Patch(color=PARTIAL_COLOUR, alpha=0.5, label="partial tile")],
              loc="upper right", fontsize=8)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def mask_picture(program: ir.Program, desc: Descriptor, layouts: list[ConcreteLayout], values: list[SequenceValues],
                 tiles: VisitedTiles, picture: MaskPicture) -> bytes:
    """A PNG of sequence 0: for small n the exact mask, computed by brute force independently of the
    planner (a planner mistake shows as visible pairs outside the tiles); else the visible pairs per
    pixel gathered while counting the tiles."""
    n = layouts[0].n
    exact = picture.scale == 1
    picture.add_tiles(count_full=not exact)
    if exact:
        image = dense_mask(program, layouts[0], values[0]).astype(np.float32)
    else:
        fraction = picture.fraction()
        # A pixel with any visible pair is at least light grey, so sparse structure stays visible.
        image = np.where(fraction > 0, 0.25 + 0.75 * fraction, 0.0)
    mine = tiles.seq == 0
    title = (f"{program.name}: n = {n}, tiles of {desc.config.block_q} x {desc.config.block_k}: "
             f"{int((mine & tiles.full).sum()):,} full, {int((mine & ~tiles.full).sum()):,} partial")
    if not exact:
        title += f"\n(downsampled {picture.scale} x {picture.scale}: darker pixels hold more visible pairs)"
    return render_png(image, picture.kinds, n, title)


def dump_mask(program: ir.Program, layout: ConcreteLayout, values: SequenceValues) -> bytes:
    """The exact boolean mask of one sequence as `.npy` bytes."""
    if layout.n > DUMP_MASK_MAX_N:
        raise ValueError(f"--dump-mask writes an n x n array; n = {layout.n} is more than {DUMP_MASK_MAX_N} "
                         f"(choose a smaller n with --n or --param)")
    buffer = io.BytesIO()
    np.save(buffer, dense_mask(program, layout, values), allow_pickle=False)
    return buffer.getvalue()


def dump_batch(program: ir.Program, layouts: list[ConcreteLayout], values: list[SequenceValues]) -> bytes:
    """The exact boolean mask of the whole packed batch as `.npz` bytes: `mask` [T, T], block-diagonal (no pair
    crosses sequences), and `cu_seqlens` [B + 1], the sequences' boundaries in it."""
    lengths = [lay.n for lay in layouts]
    total = sum(lengths)
    if total > DUMP_MASK_MAX_N:
        raise ValueError(f"--dump-batch writes a T x T array; the batch has T = {total} tokens, more than "
                         f"{DUMP_MASK_MAX_N} (choose smaller sequences with --n or --param)")
    cu_seqlens = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    mask = np.zeros((total, total), dtype=bool)
    for b, (lay, val) in enumerate(zip(layouts, values)):
        lo, hi = cu_seqlens[b], cu_seqlens[b + 1]
        mask[lo:hi, lo:hi] = dense_mask(program, lay, val)
    buffer = io.BytesIO()
    np.savez(buffer, mask=mask, cu_seqlens=cu_seqlens)
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------------
# The whole of `maskc explain` after the passes
# ---------------------------------------------------------------------------------------------------


@dataclass
class Explained:
    report: TileReport
    png: bytes | None
    mask_npy: bytes | None
    batch_npz: bytes | None = None


def explain_values(compiled: CompiledMask, sequences: list[dict[str, object]], origin: str,
                   png: bool = False, dump: bool = False, dump_whole_batch: bool = False) -> Explained:
    """Plan for the given runtime values, count exactly, and (on request) draw and dump sequence 0, or dump
    the whole batch."""
    native.library(wait=True)  # (the planner a running model would have: in C++ where a compiler builds it)
    desc, layouts, values = compiled.plan(sequences)
    program = compiled.program
    first_n = layouts[0].n if layouts else 0
    if png and first_n == 0:
        raise ValueError("the first sequence is empty (n = 0): there is nothing to draw")
    entries = entries_to_count(desc, COUNTED_TILES_MAX)
    # Refuse a huge picture or --dump-mask before the slow work.
    if png and entries is not None:
        raise ValueError(f"--png draws every visited tile, and these values visit {len(desc.k_tile):,}: more than "
                         f"the {COUNTED_TILES_MAX:,} explain goes through one by one (causal attention up to "
                         "n ~ 260,000); give a smaller --n, or leave out --png (the counts are then estimated)")
    mask_npy = dump_mask(program, layouts[0], values[0]) if dump and layouts else None
    batch_npz = dump_batch(program, layouts, values) if dump_whole_batch else None
    tiles = VisitedTiles.of(desc, entries)
    picture = MaskPicture(desc, tiles, 0, first_n, picture_scale(first_n)) if png else None
    gather = picture.add_partial if picture is not None and picture.scale > 1 else None
    counts = visible_per_tile(program, desc, layouts, values, tiles, gather)
    report = tile_report(compiled, desc, layouts, values, origin, counts, tiles)
    report.as_called = as_called(compiled, sequences, layouts)
    image = mask_picture(program, desc, layouts, values, tiles, picture) if picture is not None else None
    return Explained(report, image, mask_npy, batch_npz)
