"""torch integration: autograd and torch.compile.

A call on torch tensors that require grad is recorded as one autograd node. The forward saves q, k, v and its
own outputs O and LSE (nothing of size N^2, and no plan: the backward finds the plan again from the plan cache
by the same runtime values); the backward runs the family's backward kernels (`Attention.backward`). LSE,
when returned, is a constant to autograd (no gradient flows through it).

The same call is also the custom op `maskc::attention` (its backward `maskc::attention_backward`), with
fake implementations, so that `torch.compile(model, fullgraph=True)` captures a model that calls maskc
without a graph break. Runtime values given as tensors are data to torch.compile (changing them never
recompiles); runtime values given as Python values are constants of the graph, as any Python value is
(changing them recompiles). The ops are registered once torch is imported and an `Attention` is made or
called (`register`), before any tracing.
"""

import itertools
import json
import sys
import threading
import weakref
from typing import List, Optional  # spelled so: torch infers the ops' schemas from these hints (no List[str])

_attentions: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # handle -> Attention (the ops' integer)
_handles = itertools.count(1)
_lock = threading.Lock()
_registered = False


def handle_of(attn) -> int:
    """A small integer naming `attn` in the custom ops (the op schema cannot carry a Python object)."""
    with _lock:
        handle = next(_handles)
        _attentions[handle] = attn
    return handle


def torch_loaded() -> bool:
    return "torch" in sys.modules


_unavailable: str | None = None  # why the ops could not be defined (this torch refused them), if so


def register() -> None:
    """Define maskc's custom ops (once; a no-op until torch is imported). A torch that refuses them costs
    autograd and torch.compile support, never the plain call: the reason is kept and raised on first use."""
    global _registered, _unavailable
    if _registered or not torch_loaded():
        return
    with _lock:
        if not _registered:
            try:
                _define_ops()
            except Exception as exc:  # noqa: BLE001 - any refusal of this torch version; reported when used
                _unavailable = f"{type(exc).__name__}: {exc}"
            _registered = True


def split_values(params: dict, tracing: bool):
    """Runtime values as the ops take them: tensors by name (graph inputs) and the other values as one JSON
    string. While torch.compile traces, every value becomes a tensor (a Python value is then a constant
    tensor of the graph, guarded like any Python value); a ragged per-sequence list cannot, and is refused."""
    import torch

    if tracing:
        values = {}
        for name, value in params.items():
            try:
                values[name] = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
            except (ValueError, TypeError):
                raise ValueError(f"under torch.compile, runtime value '{name}' must be a tensor or a value torch.tensor "
                                 "accepts (per-sequence lists of one length); ragged lists work outside torch.compile") from None
        names = sorted(values)
        return "{}", ",".join(names), [values[n] for n in names]
    tensors = {name: value for name, value in params.items() if isinstance(value, torch.Tensor)}
    constants = {name: value for name, value in params.items() if name not in tensors}
    names = sorted(tensors)
    return json.dumps(constants, sort_keys=True, default=_jsonable), ",".join(names), [tensors[n] for n in names]


def _jsonable(value):
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return value.tolist()
    raise TypeError(f"runtime value of type {type(value).__name__} is not a number, a list or a tensor")


def _params(constants: str, names: str, values: list) -> dict:
    """The runtime values back from the ops' arguments (`names`: the tensor values' names, comma-separated:
    op schemas take no list of strings)."""
    return json.loads(constants) | dict(zip(names.split(",") if names else (), values))


def _define_ops() -> None:
    import torch

    from maskc.runtime import rows_aligned

    @torch.library.custom_op("maskc::attention", mutates_args=())
    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: Optional[torch.Tensor],
                  handle: int, scale: Optional[float], constants: str, names: str,
                  values: List[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        attn = _attentions[handle]
        return attn.forward(q, k, v, cu_seqlens=cu_seqlens, scale=scale, **_params(constants, names, values))

    # The fake implementations give what the real ones return: new contiguous tensors, whatever q's strides.
    @attention.register_fake
    def _(q, k, v, cu_seqlens, handle, scale, constants, names, values):
        if cu_seqlens is not None:  # [T, H, D] -> LSE [H, T]
            lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
        else:  # [B, N, H, D] -> LSE [B, H, N]
            lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
        return q.new_empty(q.shape), lse

    @torch.library.custom_op("maskc::attention_backward", mutates_args=())
    def attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                           d_out: torch.Tensor, cu_seqlens: Optional[torch.Tensor], handle: int,
                           scale: Optional[float], constants: str, names: str,
                           values: List[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if not rows_aligned(d_out.data_ptr(), d_out.stride()):
            d_out = d_out.contiguous()  # autograd may hand over any layout; the kernels read whole 16-byte rows
        attn = _attentions[handle]
        return attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu_seqlens, scale=scale,
                             **_params(constants, names, values))

    @attention_backward.register_fake
    def _(q, k, v, out, lse, d_out, cu_seqlens, handle, scale, constants, names, values):
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)

    def setup_context(ctx, inputs, output):
        q, k, v, cu_seqlens, handle, scale, constants, names, values = inputs
        out, lse = output
        attn = _attentions.get(handle)
        if attn is not None:  # (a compiled model's calls never go through attention_op)
            attn.compiled.build_backward_ahead()
        ctx.save_for_backward(q, k, v, out, lse, cu_seqlens, *values)
        ctx.call = (handle, scale, constants, names)
        ctx.mark_non_differentiable(lse)

    def backward(ctx, d_out, _d_lse):
        q, k, v, out, lse, cu_seqlens, *values = ctx.saved_tensors
        handle, scale, constants, names = ctx.call
        dq, dk, dv = torch.ops.maskc.attention_backward(q, k, v, out, lse, d_out, cu_seqlens, handle, scale,
                                                        constants, names, values)
        # One entry per input, in the inputs' structure: `values` is a list, so its entry is a list too.
        return dq, dk, dv, None, None, None, None, None, [None] * len(values)

    attention.register_autograd(backward, setup_context=setup_context)


def attention_op(attn, q, k, v, cu_seqlens, scale, return_lse: bool, params: dict):
    """The call through the custom op (autograd, torch.compile)."""
    import torch

    if _unavailable is not None:
        raise RuntimeError(f"maskc's autograd and torch.compile support could not be set up with torch "
                           f"{torch.__version__} ({_unavailable}); call it under torch.no_grad() for the forward alone")

    tracing = torch.compiler.is_compiling()
    if not tracing:  # autograd records this call, so its backward will come: build it while the forward runs
        attn.compiled.build_backward_ahead()  # (under torch.compile, setup_context does: Dynamo traces this)
    if cu_seqlens is not None and not isinstance(cu_seqlens, torch.Tensor):
        cu_seqlens = torch.as_tensor(cu_seqlens, dtype=torch.int64)
    constants, names, values = split_values(params, tracing)
    out, lse = torch.ops.maskc.attention(q, k, v, cu_seqlens, attn.handle, scale, constants, names, values)
    return (out, lse) if return_lse else out
