"""maskc: a compiler for attention masks.

    attn = maskc.load("hstu.mask", head_dim=128, dtype="bf16")
    out = attn(q, k, v, targets=256)              # torch or CuPy tensors, on the caller's stream

`maskc.load(path, **options)` / `maskc.loads(text, **options)` compile a mask (options: head_dim, dtype,
arch, key_tile, kv_stages, and values for `const` parameters) and return an `Attention` callable. Runtime
parameters are not load options: their values are given per call (a ValueError says so).
"""

__version__ = "0.1.0"

from maskc.diagnostics import MaskError  # noqa: E402

__all__ = ["Attention", "MaskError", "Plan", "load", "loads", "__version__"]


def __getattr__(name: str):
    """`Attention`, `Plan`, `load` and `loads` come from `maskc.runtime`, imported on first use: importing one
    stage (`maskc.codegen`, say) loads that stage's imports only, not the planner and the runtime."""
    if name in ("Attention", "Plan", "load", "loads"):
        from maskc import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module 'maskc' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"Attention", "Plan", "load", "loads"})
