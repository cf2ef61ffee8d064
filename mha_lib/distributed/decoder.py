"""A Llama-like decoder in one process: the reference the sharded model is checked against.

Derived in notebook 14 §3, with the architecture of notebook 12's SmolLM2: token embeddings,
then per layer RMSNorm, grouped-query attention with RoPE (half-split pairs, as Hugging Face's
Llama), a residual, RMSNorm, a SwiGLU MLP and a residual; a last RMSNorm, and logits from the
embedding matrix itself (tied embeddings). No biases.

Weights are read through a *weight source*: a callable `weights(name, rows, cols)` returning
rows `rows` and columns `cols` (slices) of the named tensor, with Hugging Face's Llama names and
layout (a linear layer's weight is (out, in), so y = x @ W.T). A source reads only what is asked
for, which is what lets each rank of a sharded model read its own shard and nothing else.

What it holds:
- `DecoderConfig`; `SMOLLM2_135M` (from its config.json) and `TINY` (notebook 14's
  random-weight model, the same shape of model, small);
- `weight_shapes(config)`: the name and shape of every weight;
- `RandomWeights(config, seed)`: a source of seeded random weights, each tensor drawn from its
  own generator (seeded from the seed and the name), so any process reading any slice of any
  tensor gets the same numbers; `TensorWeights(tensors)`: a source over given tensors;
- `rms_norm`, `attention_heads`, `swiglu`: the pieces, written for any subset of the heads and
  of the MLP's hidden units (the sharded model calls them on its shard);
- `decoder_logits(config, weights, input_ids)`: the whole model, (B, N) ids -> (B, N, V).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..positions import rope

__all__ = [
    "SMOLLM2_135M",
    "TINY",
    "DecoderConfig",
    "RandomWeights",
    "TensorWeights",
    "attention_heads",
    "decoder_logits",
    "rms_norm",
    "swiglu",
    "weight_shapes",
]


@dataclass(frozen=True)
class DecoderConfig:
    """The sizes of a Llama-like decoder (notation of notebook 00: C the width, h the heads)."""

    vocab_size: int
    hidden: int  # C
    num_layers: int
    num_heads: int  # h
    num_kv_heads: int  # h_kv
    head_dim: int  # d
    intermediate: int  # the MLP's hidden units
    rope_base: float = 10000.0
    rms_eps: float = 1e-5

    @property
    def parameters(self) -> int:
        return sum(rows * cols for rows, cols in weight_shapes(self).values())


# SmolLM2-135M's config.json (HuggingFaceTB/SmolLM2-135M): hidden_size 576, 30 layers, 9 heads,
# 3 key/value heads, head_dim 64, intermediate_size 1536, vocab_size 49152, rope_theta 100000,
# rms_norm_eps 1e-5, tie_word_embeddings true.
SMOLLM2_135M = DecoderConfig(49152, 576, 30, 9, 3, 64, 1536, rope_base=100000.0)
# the random-weight model of notebook 14: 2 query heads per key/value head, as SmolLM2 has 3
TINY = DecoderConfig(96, 48, 2, 6, 3, 8, 96)


def weight_shapes(config: DecoderConfig) -> dict[str, tuple[int, int]]:
    """{name: (rows, cols)} of every weight, (out, in) for linear layers, (C, 1) for norms."""
    c = config
    shapes = {"model.embed_tokens.weight": (c.vocab_size, c.hidden)}
    for i in range(c.num_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (c.hidden, 1),
            p + "self_attn.q_proj.weight": (c.num_heads * c.head_dim, c.hidden),
            p + "self_attn.k_proj.weight": (c.num_kv_heads * c.head_dim, c.hidden),
            p + "self_attn.v_proj.weight": (c.num_kv_heads * c.head_dim, c.hidden),
            p + "self_attn.o_proj.weight": (c.hidden, c.num_heads * c.head_dim),
            p + "post_attention_layernorm.weight": (c.hidden, 1),
            p + "mlp.gate_proj.weight": (c.intermediate, c.hidden),
            p + "mlp.up_proj.weight": (c.intermediate, c.hidden),
            p + "mlp.down_proj.weight": (c.hidden, c.intermediate),
        }
    shapes["model.norm.weight"] = (c.hidden, 1)
    return shapes


ALL = slice(None)


class RandomWeights:
    """A weight source of seeded random weights: `weights(name, rows, cols)`.

    Linear weights are normal with standard deviation 1/√in (outputs of order 1), the embedding
    normal with standard deviation 1, norm weights 1 + 0.2·normal (so that a norm weight read
    from the wrong place shows). Tensor `name` comes from a generator seeded with
    crc32("seed:name"): the same numbers in every process. Each call draws the whole tensor
    and returns the slice asked for; what a caller keeps is the slice.
    """

    def __init__(self, config: DecoderConfig, seed: int = 0, dtype: torch.dtype = torch.float32):
        self.config, self.seed, self.dtype = config, seed, dtype
        self.shapes = weight_shapes(config)

    def __call__(self, name: str, rows: slice = ALL, cols: slice = ALL) -> Tensor:
        if name not in self.shapes:
            raise KeyError(f"no weight named {name!r} in this model")
        n_rows, n_cols = self.shapes[name]
        g = torch.Generator().manual_seed(zlib.crc32(f"{self.seed}:{name}".encode()))
        if n_cols == 1:  # a norm's weight, (C,)
            full = 1 + 0.2 * torch.randn(n_rows, generator=g, dtype=torch.float64)
            return full[rows].to(self.dtype)
        std = 1.0 if "embed_tokens" in name else n_cols**-0.5
        full = std * torch.randn(n_rows, n_cols, generator=g, dtype=torch.float64)
        return full[rows, cols].to(self.dtype).contiguous()


class TensorWeights:
    """A weight source over given tensors {name: tensor} (a state dict): slices them."""

    def __init__(self, tensors: dict[str, Tensor]):
        self.tensors = tensors

    def __call__(self, name: str, rows: slice = ALL, cols: slice = ALL) -> Tensor:
        t = self.tensors[name]
        return (t[rows] if t.dim() == 1 else t[rows, cols]).detach().clone()


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """x / √(mean(x²) + eps) · weight over the last axis (RMSNorm, no mean subtracted)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def attention_heads(
    x: Tensor,
    W_q: Tensor,
    W_k: Tensor,
    W_v: Tensor,
    W_o: Tensor,
    head_dim: int,
    rope_base: float,
) -> Tensor:
    """Causal grouped-query attention of the heads whose weights are given; (B, N, C).

    x (B, N, C); W_q (h'·d, C), W_k and W_v (h_kv'·d, C), W_o (C, h'·d): any h' query heads
    and the h_kv' key/value heads they use, h_kv' dividing h' (all heads: the whole layer; one
    rank's heads: that rank's partial sum, notebook 03's "W_O as a sum over heads").
    """
    B, N, _ = x.shape
    d = head_dim
    q = (x @ W_q.T).view(B, N, -1, d).transpose(1, 2)  # (B, h', N, d)
    k = (x @ W_k.T).view(B, N, -1, d).transpose(1, 2)  # (B, h_kv', N, d)
    v = (x @ W_v.T).view(B, N, -1, d).transpose(1, 2)  # (B, h_kv', N, d)
    positions = torch.arange(N, device=x.device)
    q, k = rope(q, positions, rope_base), rope(k, positions, rope_base)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return heads.transpose(1, 2).reshape(B, N, -1) @ W_o.T  # (B, N, h'·d) @ (h'·d, C)


def swiglu(x: Tensor, W_gate: Tensor, W_up: Tensor, W_down: Tensor) -> Tensor:
    """silu(x W_gateᵀ) ∘ (x W_upᵀ) W_downᵀ for any subset of the hidden units; (B, N, C)."""
    return (F.silu(x @ W_gate.T) * (x @ W_up.T)) @ W_down.T  # (B, N, I') @ (I', C)


def _check_ids(input_ids, vocab_size: int) -> Tensor:
    if not isinstance(input_ids, Tensor) or input_ids.dtype not in (torch.int32, torch.int64):
        got = input_ids.dtype if isinstance(input_ids, Tensor) else type(input_ids).__name__
        raise TypeError(f"input_ids must be an integer tensor (B, N); got {got}")
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    if input_ids.dim() != 2 or input_ids.shape[1] < 1:
        raise ValueError(f"input_ids has shape {tuple(input_ids.shape)}; expected (B, N)")
    if input_ids.min() < 0 or input_ids.max() >= vocab_size:
        raise ValueError(
            f"input_ids holds ids from {int(input_ids.min())} to {int(input_ids.max())}; "
            f"expected 0 .. {vocab_size - 1} (vocab_size)"
        )
    return input_ids


def decoder_logits(config: DecoderConfig, weights, input_ids: Tensor) -> Tensor:
    """The whole model in one process: input_ids (B, N) (or (N,)) -> logits (B, N, V)."""
    c = config
    ids = _check_ids(input_ids, c.vocab_size)
    E = weights("model.embed_tokens.weight")  # (V, C)
    x = E[ids]  # (B, N, C)
    for i in range(c.num_layers):
        w = {n: weights(f"model.layers.{i}.{n}") for n in _LAYER_NAMES}
        h = rms_norm(x, w["input_layernorm.weight"], c.rms_eps)
        x = x + attention_heads(
            h, *(w[f"self_attn.{p}_proj.weight"] for p in "qkvo"), c.head_dim, c.rope_base
        )
        h = rms_norm(x, w["post_attention_layernorm.weight"], c.rms_eps)
        x = x + swiglu(h, *(w[f"mlp.{p}_proj.weight"] for p in ("gate", "up", "down")))
    x = rms_norm(x, weights("model.norm.weight"), c.rms_eps)
    return x @ E.T  # (B, N, V): the output head is the embedding (tied)


_LAYER_NAMES = (
    "input_layernorm.weight",
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
)
