"""Autograd: a maskc call on torch tensors that require grad, recorded as one `torch.autograd.Function`.

The forward saves q, k, v and its own outputs O and LSE (nothing of size N^2, and no plan: the plan is found
again by the same runtime values, from the plan cache); the backward runs the family's backward kernels
(`Attention.backward`). LSE, when returned, is a constant to autograd (no gradient flows through it).
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def _function():
    import torch

    class MaskedAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, attn, cu_seqlens, scale, params, q, k, v):
            out, lse = attn(q.detach(), k.detach(), v.detach(), cu_seqlens=cu_seqlens, scale=scale,
                            return_lse=True, **params)
            ctx.attn, ctx.cu_seqlens, ctx.scale, ctx.params = attn, cu_seqlens, scale, params
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.mark_non_differentiable(lse)
            return out, lse

        @staticmethod
        def backward(ctx, d_out, _d_lse):
            q, k, v, out, lse = ctx.saved_tensors
            if d_out.stride(-1) != 1 or d_out.data_ptr() % 16 or any(s % 8 for s in d_out.stride()[:-1]):
                d_out = d_out.contiguous()  # the kernels read whole 16-byte rows
            dq, dk, dv = ctx.attn.backward(q.detach(), k.detach(), v.detach(), out, lse, d_out,
                                           cu_seqlens=ctx.cu_seqlens, scale=ctx.scale, **ctx.params)
            return None, None, None, None, dq, dk, dv

    return MaskedAttention


def attention_with_grad(attn, q, k, v, cu_seqlens, scale, return_lse: bool, params: dict):
    out, lse = _function().apply(attn, cu_seqlens, scale, params, q, k, v)
    return (out, lse) if return_lse else out
