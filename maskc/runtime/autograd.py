"""torch integration: autograd and torch.compile.

A call on torch tensors that require grad is recorded as one autograd node. The forward saves q, k, v and its
own outputs O and LSE (nothing of size N^2, and no plan: the backward finds the plan again from the plan cache
by the same runtime values); the backward runs the family's backward kernels (`Attention.backward`). LSE,
when returned, is a constant to autograd (no gradient flows through it).

In eager mode the node is a `torch.autograd.Function` (`_eager_function`): its forward and backward call
`Attention.forward` and `Attention.backward`, whose repeated calls launch what their first call prepared. While
torch.compile traces, the same call is the custom op `maskc::attention` (its backward
`maskc::attention_backward`), with fake implementations, so that `torch.compile(model, fullgraph=True)`
captures a model that calls maskc without a graph break. (The custom op's own dispatch costs ~50-80 us of host
time a call on the dev VM, several times maskc's, hence the Function outside compiled graphs.) Runtime values
given as tensors are data to torch.compile (changing them never recompiles); runtime values given as Python
values are constants of the graph, as any Python value is (changing them recompiles). The ops are registered
once torch is imported and an `Attention` is made or called (`register`), before any tracing.
"""

import functools
import itertools
import sys
import threading
import weakref
from typing import List, Optional  # spelled so: torch infers the ops' schemas from these hints (no List[str])

_attentions: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # handle -> Attention
_handles = itertools.count(1)
_lock = threading.Lock()
_registered = False


def handle_of(attn) -> str:
    """A name for `attn` in the custom ops (an op's schema cannot carry a Python object). A string: an int
    argument becomes a symbolic int under torch.compile(dynamic=True), which names nothing until run."""
    with _lock:
        handle = str(next(_handles))
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


def traced_values(params: dict) -> tuple[str, list]:
    """Runtime values as the op takes them while torch.compile traces: each a tensor (graph inputs; a Python
    value becomes a constant tensor of the graph, guarded like any Python value), with their names joined by
    commas (op schemas take no list of strings). A ragged per-sequence list cannot be a tensor, and is refused."""
    import torch

    values = {}
    for name, value in params.items():
        try:
            values[name] = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
        except (ValueError, TypeError):
            raise ValueError(f"under torch.compile, runtime value '{name}' must be a tensor or a value torch.tensor "
                             "accepts (per-sequence lists of one length); ragged lists work outside torch.compile"
                             ) from None
    names = sorted(values)
    return ",".join(names), [values[n] for n in names]


def _params(names: str, values: list) -> dict:
    """The runtime values back from the op's arguments."""
    return dict(zip(names.split(",") if names else (), values))


def _define_ops() -> None:
    import torch

    from maskc.runtime import rows_aligned

    @torch.library.custom_op("maskc::attention", mutates_args=())
    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: Optional[torch.Tensor],
                  handle: str, scale: Optional[float], names: str,
                  values: List[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        attn = _attentions[handle]
        return attn.forward(q, k, v, cu_seqlens=cu_seqlens, scale=scale, **_params(names, values))

    # The fake implementations give what the real ones return: new contiguous tensors, whatever q's strides.
    @attention.register_fake
    def _(q, k, v, cu_seqlens, handle, scale, names, values):
        if cu_seqlens is not None:  # [T, H, D] -> LSE [H, T]
            lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
        else:  # [B, N, H, D] -> LSE [B, H, N]
            lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
        return q.new_empty(q.shape), lse

    @torch.library.custom_op("maskc::attention_backward", mutates_args=())
    def attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                           d_out: torch.Tensor, cu_seqlens: Optional[torch.Tensor], handle: str,
                           scale: Optional[float], names: str,
                           values: List[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if not rows_aligned(d_out.data_ptr(), d_out.stride()):
            d_out = d_out.contiguous()  # autograd may hand over any layout; the kernels read whole 16-byte rows
        attn = _attentions[handle]
        return attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu_seqlens, scale=scale,
                             **_params(names, values))

    @attention_backward.register_fake
    def _(q, k, v, out, lse, d_out, cu_seqlens, handle, scale, names, values):
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)

    def setup_context(ctx, inputs, output):
        q, k, v, cu_seqlens, handle, scale, names, values = inputs
        out, lse = output
        attn = _attentions.get(handle)
        if attn is not None:  # (a compiled model's calls never go through attention_op)
            attn.compiled.build_backward_ahead()
        ctx.save_for_backward(q, k, v, out, lse, cu_seqlens, *values)
        ctx.call = (handle, scale, names)
        ctx.mark_non_differentiable(lse)

    def backward(ctx, d_out, _d_lse):
        q, k, v, out, lse, cu_seqlens, *values = ctx.saved_tensors
        handle, scale, names = ctx.call
        dq, dk, dv = torch.ops.maskc.attention_backward(q, k, v, out, lse, d_out, cu_seqlens, handle, scale,
                                                        names, values)
        # One entry per input, in the inputs' structure: `values` is a list, so its entry is a list too.
        return dq, dk, dv, None, None, None, None, [None] * len(values)

    attention.register_autograd(backward, setup_context=setup_context)


def attention_op(attn, q, k, v, cu_seqlens, scale, return_lse: bool, params: dict):
    """The call autograd records (or torch.compile traces)."""
    import torch

    if not torch.compiler.is_compiling():
        attn.compiled.build_backward_ahead()  # the backward will come: build it while the forward runs
        from maskc.runtime import plain_values

        out, lse = _eager_function().apply(q, k, v, attn, cu_seqlens, scale, plain_values(params))
        return (out, lse) if return_lse else out
    if _unavailable is not None:
        raise RuntimeError(f"maskc's torch.compile support could not be set up with torch {torch.__version__} "
                           f"({_unavailable}); call maskc outside the compiled region")
    # (the op's setup_context starts the backward's build: Dynamo traces this function, and a lock would break
    # the graph)
    if cu_seqlens is not None and not isinstance(cu_seqlens, torch.Tensor):
        cu_seqlens = torch.as_tensor(cu_seqlens, dtype=torch.int64)
    names, values = traced_values(params)
    out, lse = torch.ops.maskc.attention(q, k, v, cu_seqlens, attn.handle, scale, names, values)
    return (out, lse) if return_lse else out


@functools.lru_cache(maxsize=None)
def _eager_function():
    """The autograd.Function of an eager call (made once torch is imported)."""
    import torch

    from maskc.runtime import rows_aligned

    class Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, attn, cu_seqlens, scale, params):
            out, lse = attn.forward(q, k, v, cu_seqlens=cu_seqlens, scale=scale, **params)
            ctx.mark_non_differentiable(lse)
            packed_tensor = isinstance(cu_seqlens, torch.Tensor)  # saved, so that an in-place change is caught
            ctx.save_for_backward(q, k, v, out, lse, *((cu_seqlens,) if packed_tensor else ()))
            ctx.call = (attn, None if packed_tensor else cu_seqlens, scale, params)
            return out, lse

        @staticmethod
        def backward(ctx, d_out, _d_lse):
            q, k, v, out, lse, *saved_cu = ctx.saved_tensors
            attn, cu_seqlens, scale, params = ctx.call
            if not rows_aligned(d_out.data_ptr(), d_out.stride()):
                d_out = d_out.contiguous()  # autograd may hand over any layout; the kernels read whole 16-byte rows
            dq, dk, dv = attn.backward(q, k, v, out, lse, d_out, cu_seqlens=saved_cu[0] if saved_cu else cu_seqlens,
                                       scale=scale, **params)
            return dq, dk, dv, None, None, None, None

    return Attention
