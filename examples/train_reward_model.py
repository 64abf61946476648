"""Train a small transformer with maskc's attention, and the same model with a dense reference, side by side.

The batches are reward-model packings (examples/rm_shared.mask): groups of one prompt and four responses, each
group its own sequence of a packed jagged batch; a response sees the prompt and itself causally, never another
response. Every step draws new lengths, so every step has a new mask: maskc plans it (no recompile), the
reference builds a dense boolean mask and runs PyTorch's scaled_dot_product_attention on it.

The task is next-token prediction on tokens from a fixed random Markov chain (a prompt token predicts the next
prompt token; a response token the next token of its response), so the loss falls to the chain's entropy. Both
runs start from the same weights and see the same batches; their loss curves must agree within the stated
tolerance. The script writes a PNG of both curves and prints the time per step of each.

    python examples/train_reward_model.py [--steps 300] [--tokens 16384] [--compile] [--png train.png]

Needs a CUDA GPU, PyTorch, CuPy and maskc.
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import maskc
from maskc.tools.reference import dense_mask

MASK = Path(__file__).resolve().parent / "rm_shared.mask"
RESPONSES = 4  # per group: a fixed count, so that the per-sequence lists are one [groups, 4] tensor
TOLERANCE = 0.02  # the two loss curves (mean of every 10 steps) may differ by 2% of the reference


class Block(torch.nn.Module):
    def __init__(self, width: int, heads: int, attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width, bias=False)
        self.proj = torch.nn.Linear(width, width, bias=False)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width))

    def forward(self, x, batch):
        t, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).to(torch.bfloat16).view(t, 3, self.heads, width // self.heads).unbind(1)
        x = x + self.proj(self.attention(q, k, v, batch).reshape(t, width).float())
        return x + self.mlp(self.norm2(x))


class Model(torch.nn.Module):
    def __init__(self, vocab: int, width: int, heads: int, layers: int, attention):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.blocks = torch.nn.ModuleList(Block(width, heads, attention) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab, bias=False)

    def forward(self, tokens, batch):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, batch)
        return self.head(self.norm(x))


def make_batch(rng: np.random.Generator, tokens: int, chain: np.ndarray, device) -> dict:
    """Groups of [prompt, 4 responses] packed into `tokens` tokens (the last group takes what is left),
    tokens from the Markov chain, and next-token targets inside each segment (-100 at segment ends)."""
    prompts, responses, lengths = [], [], []
    left = tokens
    while left > 0:
        size = min(left, int(rng.integers(1024, 3072)))
        if left - size < 1024:
            size = left  # no tiny last group
        cuts = np.sort(rng.choice(np.arange(1, size), RESPONSES, replace=False))  # prompt, then 4 responses
        seg = np.diff(np.concatenate([[0], cuts, [size]]))
        prompts.append(int(seg[0]))
        responses.append([int(x) for x in seg[1:]])
        lengths.append(size)
        left -= size
    segments = np.array([x for p, rs in zip(prompts, responses) for x in [p, *rs]])
    ids = markov_tokens(rng, chain, segments)
    targets = np.concatenate([np.append(s[1:], -100) for s in np.split(ids, np.cumsum(segments)[:-1])])
    cu = np.concatenate([[0], np.cumsum(lengths)])
    return {"tokens": torch.tensor(ids, device=device), "targets": torch.tensor(targets, device=device),
            "cu_seqlens": torch.tensor(cu, dtype=torch.int32), "prompt": torch.tensor(prompts),
            "responses": torch.tensor(responses), "lengths": lengths}


def markov_tokens(rng: np.random.Generator, chain: np.ndarray, segments: np.ndarray) -> np.ndarray:
    """One chain walk per segment, all segments a position at a time (vectorised across segments)."""
    vocab = chain.shape[0]
    cumulative = np.cumsum(chain, axis=1)
    walk = np.zeros((len(segments), int(segments.max())), dtype=np.int64)
    walk[:, 0] = rng.integers(vocab, size=len(segments))
    for j in range(1, walk.shape[1]):
        u = rng.random(len(segments))[:, None]
        walk[:, j] = np.minimum((cumulative[walk[:, j - 1]] < u).sum(axis=1), vocab - 1)
    return np.concatenate([walk[i, :n] for i, n in enumerate(segments)])


def maskc_attention(attn):
    def attention(q, k, v, batch):
        return attn(q, k, v, cu_seqlens=batch["cu_seqlens"], prompt=batch["prompt"], responses=batch["responses"])
    return attention


def dense_attention(q, k, v, batch):
    """SDPA with the exact boolean mask of the packed batch (`with_dense_mask`)."""
    heads_first = [x.transpose(0, 1).unsqueeze(0) for x in (q, k, v)]  # [1, H, T, D]
    out = F.scaled_dot_product_attention(*heads_first, attn_mask=batch["dense_mask"])
    return out[0].transpose(0, 1)


def with_dense_mask(attn, batch: dict) -> dict:
    """The batch with its [T, T] mask: block diagonal over the groups, each block maskc's exact mask."""
    sequences = [{"prompt": int(p), "responses": r.tolist()} for p, r in zip(batch["prompt"], batch["responses"])]
    values, layouts = attn.compiled.bind(sequences)
    total = sum(batch["lengths"])
    mask = torch.zeros(total, total, dtype=torch.bool, device=batch["tokens"].device)
    start = 0
    for lay, val in zip(layouts, values):
        mask[start:start + lay.n, start:start + lay.n] = torch.from_numpy(dense_mask(attn.program, lay, val))
        start += lay.n
    return batch | {"dense_mask": mask}


def train(model, batches, steps: int, lr: float, compile_model: bool, prepare=lambda batch: batch):
    """Losses and seconds per step; `prepare` (untimed) readies a batch for the model."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    forward = torch.compile(model, fullgraph=True, dynamic=True) if compile_model else model
    losses, times = [], []
    for step in range(steps):
        batch = prepare(batches[step])
        torch.cuda.synchronize()
        start = time.perf_counter()
        logits = forward(batch["tokens"], batch)
        loss = F.cross_entropy(logits.float(), batch["targets"], ignore_index=-100)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    return losses, times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--tokens", type=int, default=16384, help="tokens per packed batch")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8, help="width / heads must be 64 or 128")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compile", action="store_true", help="torch.compile(fullgraph=True) both models")
    parser.add_argument("--png", default="train_reward_model.png")
    args = parser.parse_args()

    device = torch.device("cuda")
    head_dim = args.width // args.heads
    attn = maskc.load(MASK, head_dim=head_dim, dtype="bf16")
    print(attn, flush=True)  # its kernel family and backward pass
    rng = np.random.default_rng(args.seed)
    chain = rng.dirichlet(np.full(args.vocab, 0.05), size=args.vocab)  # a peaked Markov chain: learnable
    batches = [make_batch(rng, args.tokens, chain, device) for _ in range(args.steps)]
    entropy = float(-(chain * np.log(chain + 1e-30)).sum(axis=1).mean())

    torch.manual_seed(args.seed)
    model = Model(args.vocab, args.width, args.heads, args.layers, maskc_attention(attn)).to(device)
    reference = copy.deepcopy(model)
    for block in reference.blocks:
        block.attention = dense_attention

    runs = {}
    for name, m, prepare in (("maskc", model, lambda b: b), ("dense SDPA", reference, lambda b: with_dense_mask(attn, b))):
        losses, times = train(m, batches, args.steps, args.lr, args.compile, prepare)
        runs[name] = (losses, times)
        print(f"{name:11s} final loss {statistics.mean(losses[-10:]):.4f}, "
              f"median step {1e3 * statistics.median(times[5:] or times):.1f} ms", flush=True)

    # The curves, averaged over windows of 10 steps, must agree within TOLERANCE of the reference.
    a, b = (np.array(runs[n][0]) for n in ("maskc", "dense SDPA"))
    window = 10
    smooth = [np.convolve(x, np.ones(window) / window, mode="valid") for x in (a, b)]
    worst = float(np.max(np.abs(smooth[0] - smooth[1]) / smooth[1]))
    agree = worst <= TOLERANCE
    print(f"chain entropy {entropy:.4f} nats; largest gap between the curves (means of {window} steps): "
          f"{100 * worst:.2f}% of the reference (tolerance {100 * TOLERANCE:.0f}%): {'agree' if agree else 'DISAGREE'}")
    speedup = statistics.median(runs["dense SDPA"][1][5:]) / statistics.median(runs["maskc"][1][5:])
    print(f"time per step: maskc {1e3 * statistics.median(runs['maskc'][1][5:]):.1f} ms, dense SDPA "
          f"{1e3 * statistics.median(runs['dense SDPA'][1][5:]):.1f} ms ({speedup:.2f}x)")

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 4.5))
        for name, (losses, times) in runs.items():
            ax.plot(losses, label=f"{name} ({1e3 * statistics.median(times[5:]):.0f} ms/step)", alpha=0.8)
        ax.axhline(entropy, color="gray", linestyle=":", label="entropy of the chain")
        ax.set(xlabel="step", ylabel="loss (nats)", title=f"rm_shared packing, {args.tokens} tokens/step, "
               f"{args.layers} layers x {args.heads} heads of {head_dim}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)
        print(f"picture: {args.png}")
    except ImportError:
        print("no picture: matplotlib is not installed")
    return 0 if agree and math.isfinite(worst) else 1


if __name__ == "__main__":
    raise SystemExit(main())
