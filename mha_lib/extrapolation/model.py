"""One small causal attention model whose only switch is the position scheme (notebook 10).

`TinyCausal`: token embedding (V, C), then `n_layers` pre-LayerNorm causal attention layers
(h heads of d_k = C / h, no feed-forward: the two tasks need only routing), a final LayerNorm
and an unembedding (C, V). The position scheme is one of `SCHEMES`:
- "nope": nothing; only the causal mask breaks the symmetry;
- "sinusoidal": `sinusoidal_positions(N, C)` added to X (N, C);
- "learned": a learned table (max_len, C) added to X; rows past the training length are
  never updated, they keep their random initial values;
- "alibi": slope_h · (n - m) added to head h's scores (slopes of notebook 08);
- "rope": `rope` on every head's queries and keys, with `rope_base` and `rope_scale`
  (position interpolation), which can be changed after training.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..nn.masks import alibi_slopes
from ..positions import rope, sinusoidal_positions

__all__ = ["SCHEMES", "TinyCausal", "loss_and_accuracy"]

SCHEMES = ("nope", "sinusoidal", "learned", "alibi", "rope")


class TinyCausal(nn.Module):
    def __init__(
        self,
        scheme: str,
        vocab_size: int = 16,
        C: int = 32,
        num_heads: int = 2,
        n_layers: int = 2,
        max_len: int = 256,
        rope_base: float = 10000.0,
    ):
        super().__init__()
        if scheme not in SCHEMES:
            raise ValueError(f"scheme = {scheme!r}; expected one of {SCHEMES}")
        self.scheme, self.h, self.max_len = scheme, num_heads, max_len
        self.rope_base, self.rope_scale = rope_base, 1.0
        self.embed = nn.Embedding(vocab_size, C)
        if scheme == "learned":
            self.pos = nn.Embedding(max_len, C)
        self.norms = nn.ModuleList(nn.LayerNorm(C) for _ in range(n_layers))
        self.qkv = nn.ModuleList(nn.Linear(C, 3 * C, bias=False) for _ in range(n_layers))
        self.out = nn.ModuleList(nn.Linear(C, C, bias=False) for _ in range(n_layers))
        self.norm_f = nn.LayerNorm(C)
        self.unembed = nn.Linear(C, vocab_size)
        self.register_buffer("slopes", torch.from_numpy(alibi_slopes(num_heads)).float())

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens (B, N) -> logits (B, N, V)."""
        B, N = tokens.shape
        if N > self.max_len:
            raise ValueError(f"N = {N} is longer than max_len = {self.max_len}")
        x = self.embed(tokens)  # (B, N, C)
        C = x.shape[-1]
        pos = torch.arange(N, device=tokens.device)  # (N,)
        if self.scheme == "sinusoidal":
            x = x + sinusoidal_positions(N, C).to(x.dtype)  # (B, N, C)
        elif self.scheme == "learned":
            x = x + self.pos(pos)  # (B, N, C)
        bias = torch.zeros(N, N).masked_fill(pos[None, :] > pos[:, None], -math.inf)  # (N, N)
        if self.scheme == "alibi":
            bias = bias + self.slopes[:, None, None] * (pos[None, :] - pos[:, None])  # (h, N, N)
        for norm, qkv, out in zip(self.norms, self.qkv, self.out):
            q, k, v = qkv(norm(x)).view(B, N, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)
            if self.scheme == "rope":  # q, k (B, h, N, d_k)
                q = rope(q, pos, self.rope_base, scale=self.rope_scale)
                k = rope(k, pos, self.rope_base, scale=self.rope_scale)
            s = q @ k.transpose(-1, -2) / math.sqrt(C // self.h) + bias  # (B, h, N, N)
            a = torch.softmax(s, dim=-1) @ v  # (B, h, N, d_k)
            x = x + out(a.transpose(1, 2).reshape(B, N, C))  # (B, N, C)
        return self.unembed(self.norm_f(x))  # (B, N, V)


def loss_and_accuracy(model: TinyCausal, tokens: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """(mean cross-entropy over the targeted positions, per-position accuracy (N,) over the batch;
    NaN at positions with no target)."""
    logits = model(tokens)  # (B, N, V)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-1)
    hit = (logits.argmax(-1) == targets).float()  # (B, N)
    valid = (targets >= 0).float()
    acc = hit.sum(0) / valid.sum(0)  # (N,), NaN where no target
    return loss, acc
