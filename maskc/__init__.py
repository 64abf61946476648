"""maskc: a compiler for attention masks.

    attn = maskc.load("hstu.mask", head_dim=128, dtype="bf16")
    out = attn(q, k, v, targets=256)
"""

__version__ = "0.1.0"
