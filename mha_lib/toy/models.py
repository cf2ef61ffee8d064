"""The two small models of notebook 06, both built on `mha_lib.pytorch.MultiHeadAttention`.

What it holds:
- `Committee`: one attention layer over learned symbol, label and position embeddings, a
  residual connection and one linear read-out per sub-task (Part 1, `tasks.relations_batch`).
- `AttentionOnly`: a decoder with token and position embeddings, `num_layers` causal attention
  layers added to a residual stream, and an unembedding; no MLPs, no LayerNorm, no biases
  (Part 2, induction heads). Without biases and norms every head is exactly the matrices
  W_Q^h, W_K^h, W_V^h, W_O^h, which `circuits` reads out.

Both take `head_mask` to ablate heads (1 keeps a head, 0 removes its output) and return
per-head attention weights (B, h, N, N) when asked (`need_weights=True`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..pytorch import MultiHeadAttention

__all__ = ["AttentionOnly", "Committee"]


class Committee(nn.Module):
    """x_i = symbol + label + position embeddings; y = x + MHA(x); logits per sub-task."""

    def __init__(
        self,
        num_symbols: int,
        num_labels: int,
        seq_len: int,
        embed_dim: int,
        num_heads: int,
        num_tasks: int = 3,
    ) -> None:
        super().__init__()
        self.num_symbols, self.num_tasks, self.seq_len = num_symbols, num_tasks, seq_len
        self.symbol = nn.Embedding(num_symbols, embed_dim)
        self.label = nn.Embedding(num_labels, embed_dim)
        self.position = nn.Embedding(seq_len, embed_dim)
        self.attention = MultiHeadAttention(embed_dim, num_heads, batch_first=True)
        self.readout = nn.Linear(embed_dim, num_tasks * num_symbols)

    def embed(self, symbols: Tensor, labels: Tensor) -> Tensor:
        """(B, N) symbols and labels -> x (B, N, E)."""
        if symbols.shape != labels.shape or symbols.dim() != 2:
            raise ValueError(
                f"symbols has shape {tuple(symbols.shape)} and labels {tuple(labels.shape)}; "
                "expected both (B, N)"
            )
        if symbols.shape[1] != self.seq_len:
            raise ValueError(
                f"symbols has shape {tuple(symbols.shape)}; expected (B, N) with "
                f"N = seq_len = {self.seq_len}"
            )
        positions = torch.arange(self.seq_len, device=symbols.device)  # (N,)
        return self.symbol(symbols) + self.label(labels) + self.position(positions)  # (B, N, E)

    def forward(
        self,
        symbols: Tensor,
        labels: Tensor,
        head_mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Returns logits (B, N, num_tasks, num_symbols) and the weights (B, h, N, N) or None."""
        x = self.embed(symbols, labels)  # (B, N, E)
        out, weights = self.attention(
            x, need_weights=need_weights, average_attn_weights=False, head_mask=head_mask
        )  # (B, N, E), (B, h, N, N)
        logits = self.readout(x + out)  # (B, N, num_tasks * num_symbols)
        B, N, _ = logits.shape
        return logits.view(B, N, self.num_tasks, self.num_symbols), weights


class AttentionOnly(nn.Module):
    """Token + position embeddings, `num_layers` causal attention layers on a residual stream,
    unembedding. No MLPs, LayerNorms or biases."""

    def __init__(
        self, vocab_size: int, seq_len: int, embed_dim: int, num_heads: int, num_layers: int = 2
    ) -> None:
        super().__init__()
        self.vocab_size, self.seq_len = vocab_size, seq_len
        self.num_layers, self.num_heads = num_layers, num_heads
        self.token = nn.Embedding(vocab_size, embed_dim)
        self.position = nn.Embedding(seq_len, embed_dim)
        self.layers = nn.ModuleList(
            MultiHeadAttention(embed_dim, num_heads, bias=False, batch_first=True)
            for _ in range(num_layers)
        )
        self.unembed = nn.Linear(embed_dim, vocab_size, bias=False)

    def forward(
        self,
        tokens: Tensor,
        head_mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, list[Tensor] | None]:
        """tokens (B, N) -> logits (B, N, vocab_size) for the NEXT token at each position.

        head_mask: None or (num_layers, h), 1 keeps a head and 0 removes it. With
        need_weights, also returns one (B, h, N, N) weight tensor per layer.
        """
        if tokens.dim() != 2 or tokens.shape[1] > self.seq_len:
            raise ValueError(
                f"tokens has shape {tuple(tokens.shape)}; expected (B, N) with "
                f"N <= seq_len = {self.seq_len}"
            )
        if head_mask is not None and tuple(head_mask.shape) != (self.num_layers, self.num_heads):
            raise ValueError(
                f"head_mask has shape {tuple(head_mask.shape)}; expected (num_layers, h) = "
                f"({self.num_layers}, {self.num_heads})"
            )
        N = tokens.shape[1]
        positions = torch.arange(N, device=tokens.device)  # (N,)
        x = self.token(tokens) + self.position(positions)  # (B, N, E): the residual stream
        weights = []
        for layer, attention in enumerate(self.layers):
            mask = None if head_mask is None else head_mask[layer]  # (h,)
            out, w = attention(
                x,
                is_causal=True,
                need_weights=need_weights,
                average_attn_weights=False,
                head_mask=mask,
            )  # (B, N, E), (B, h, N, N)
            x = x + out  # each layer adds what its heads write
            weights.append(w)
        return self.unembed(x), (weights if need_weights else None)  # (B, N, V)
