"""Code generation: the IR becomes a self-contained CUDA source file.

`mask_code` turns the regions into the mask functions the kernels call (split by what each value depends
on), `host_code` writes the standalone planner's host expressions, and `render_source` puts the file
together from the templates: `common/kernel.cu.j2` (banner, rules, launch contract), `common/mask.cu.j2`,
the family's attention kernel (`<family>/attention_fwd.cu.j2`) and `common/planner.cu.j2`.
"""

from __future__ import annotations

import contextlib
import io
import os
from functools import lru_cache
from pathlib import Path

import jinja2

from maskc import __version__, ir
from maskc.cache import cache_dir, read_entry, write_entry
from maskc.codegen.host_code import family_lists, host_expr
from maskc.codegen.mask_code import MAX_REGIONS, MaskCode, SeqValue, mask_code
from maskc.ir.members import member_split
from maskc.kernels import KernelOptions, abi, kernel_name, planner_name
from maskc.plan.tiling import tiling_for
from maskc.resources import resource_dir

__all__ = ["MAX_REGIONS", "KernelOptions", "MaskCode", "kernel_name", "mask_code", "planner_name", "render_source"]


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        bytecode_cache=_BytecodeCache(cache_dir() / "templates"),  # most of a new process's first render
    )


class _BytecodeCache(jinja2.BytecodeCache):
    """Jinja's compiled templates, kept as maskc cache entries. Jinja names them by template and rejects
    one compiled from other template text; the entry's sha256 rejects a damaged file (which Jinja's own
    file cache could load, or fail on)."""

    def __init__(self, directory: Path):
        self.directory = directory

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        saved = read_entry(self._path(bucket))
        if saved is not None:
            bucket.load_bytecode(io.BytesIO(saved))

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        code = io.BytesIO()
        bucket.write_bytecode(code)
        with contextlib.suppress(OSError):  # a cache that cannot be written only costs time
            write_entry(self._path(bucket), code.getvalue())

    def _path(self, bucket: jinja2.bccache.Bucket) -> Path:
        return self.directory / f"{bucket.key}.bytecode"


def _grids(program: ir.Program, code: MaskCode) -> dict[str, list[dict]]:
    """Per side, the grid segments whose coordinates the mask reads, with their dimensions as C code."""
    out: dict[str, list[dict]] = {"q": [], "k": []}
    for side in "qk":
        for f in sorted(code.token_fields[side]):
            if not f.startswith("grid:"):
                continue
            seg = program.segment(f[5:])
            dims = []
            for d in seg.dims:
                # At least 1, as the planner's (maskc.plan.layout.entry_grid_dims): an empty grid holds no token,
                # but the coordinates of every token are computed, and dividing by 0 traps on the host.
                if isinstance(d, ir.Const):
                    dims.append(str(max(int(d.value), 1)))
                else:
                    dims.append(f"imax({_seq_value_ref(code, d)}, 1)")
            out[side].append({"name": seg.name, "symbol": program.segment_index(seg.name), "dims": dims})
    return out


def _seq_value_ref(code: MaskCode, e: ir.Expr) -> str:
    for i, sv in enumerate(code.seq_values):
        if sv.expr == e:
            return f"(int)s.v{i}"
    code.seq_values.append(SeqValue(e, "long long", False))
    return f"(int)s.v{len(code.seq_values) - 1}"


def one_rule_kinds(code: MaskCode) -> list[int]:
    """The kind of a partial tile of one eager rule, for each such rule where there are several (a single rule, or
    rules tested only where their bit is set, gain nothing from a constant kind)."""
    eager = [abi.TileKind.rule_bit(r.index) for r in code.regions if r.eager]
    return eager if len(eager) > 1 else []


_Q, _K = ir.Token("q", "index"), ir.Token("k", "index")
_KEY_AT_OR_BEFORE_QUERY = (ir.Compare("<=", _K, _Q), ir.Compare(">=", _Q, _K))


def is_plain_causal(program: ir.Program, tiling) -> bool:
    """Whether the mask is causal attention and nothing else: one segment (so the whole sequence) and one rule,
    `k <= q`, between all of its tokens, over tiles that are runs of tokens (slot s of tile t holds token
    t * block + s). A partial tile's mask is then a compare of slots, which the Hopper kernels use instead of
    the rules' row intervals: the dK/dV kernel's mask rows and words of key bits, and the forward's intervals
    (H100: causal's forward +0.9%, backward +1.2%; docs/training.md, thirty-fifth session)."""
    return (len(program.segments) == 1 and len(program.regions) == 1 and tiling.tiles_are_runs
            and program.regions[0].pred in _KEY_AT_OR_BEFORE_QUERY)


def banner_name(program: ir.Program) -> str:
    """How the banner names the mask: the file's base name (`hstu.mask`), `<stdin>` or `<mask>`. Never the
    path as typed, so that the same file gives the same bytes from any directory."""
    return os.path.basename(program.source.path) if program.source else "<mask>"


def render_source(program: ir.Program, options: KernelOptions, source_name: str = "") -> tuple[str, MaskCode]:
    """The complete `.cu` file for the mask, and the mask code the planner needs to fill its tables."""
    code = mask_code(program)
    tiling = tiling_for(program, options.block_q, options.block_k, options.family.min_run)
    code.blocks = len(tiling.blocks)
    grids = _grids(program, code)
    family = options.family
    P = planner_name(program.name, options)
    tables = frozenset(p.name for p in program.params if p.type.depth == 2)
    text = _environment().get_template("common/kernel.cu.j2").render(
        version=__version__,
        source_name=source_name or banner_name(program),
        program=program,
        rules=[(r.rule or ir.show(r.pred)) for r in program.regions],
        members=member_split(program),
        show=ir.show,
        code=code,
        seq=code.seq_table,
        grids=grids,
        opt=options,
        family=family,
        args=family.forward_args,
        attention_template=family.template("fwd"),
        shared_bytes=family.shared_memory_bytes(options),
        kernel_name=kernel_name(program.name, options),
        backward=options.backward,
        backward_args=options.backward.args if options.backward else (),
        dq_name=kernel_name(program.name, options, "bwd_dq"),
        dkdv_name=kernel_name(program.name, options, "bwd_dkdv"),
        prep_name=kernel_name(program.name, options, "bwd_prep"),
        dq_store_name=kernel_name(program.name, options, "bwd_dq_store"),
        KEY_CHUNK=options.backward.key_chunk if options.backward else 0,
        BACKWARD_THREADS=options.backward.threads("dq") if options.backward else 0,
        Q_STEP=options.backward.q_step if options.backward else 0,
        STAGES=options.backward.stages if options.backward else 0,
        element=options.element,
        tiling=tiling,
        # Partial tiles masked by ranges of columns (mask.cu.j2's visible_columns) instead of pair by pair.
        key_intervals=code.rules_are_key_intervals and tiling.tiles_are_runs,
        # Partial tiles masked by comparing slots (hopper.cu.j2's hide_past_diagonal): the mask is `k <= q` alone.
        plain_causal=family.name == "sm90a" and is_plain_causal(program, tiling),
        params=list(program.params),
        P=P,
        runtime_params=program.runtime_params,
        host=lambda e: host_expr(e, P, [s.name for s in program.segments], tables),
        family_lists=family_lists(program),
        layout_uses_n=ir.layout_uses_n(program),
        max_members=ir.MAX_FAMILY_MEMBERS,
        # The kinds of partial tiles of one rule that the pair-by-pair masks specialise (templates/common/rule_kinds.j2):
        # one per eager rule, where there are several.
        one_rule_kinds=one_rule_kinds(code),
        TileKind=abi.TileKind,
        CLASS_EMPTY=abi.CLASS_EMPTY,
        CLASS_FULL=abi.CLASS_FULL,
    )
    return text, code
