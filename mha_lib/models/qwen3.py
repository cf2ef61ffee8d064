"""Qwen3 (dense): Llama with QK-norm, and heads whose size d need not be C / h.

Derived in notebook 15. Each head's queries and keys get an RMSNorm over d before RoPE (one
weight of d for the queries, one for the keys, shared by the heads); the file stores d as
`qwen3.attention.key_length` (read by `mha_lib.models.read` for every architecture), W_Q and
W_K half-split (nothing to permute). Mixture-of-experts Qwen3 files ("qwen3moe") are another
architecture, not read here.
"""

from __future__ import annotations

from . import llama
from .spec import Architecture, weights

QK_NORM_WEIGHTS = weights(
    ("self_attn.q_norm.weight", "attn_q_norm.weight", "self_attn.q_norm.weight", "whole", "norm"),
    ("self_attn.k_norm.weight", "attn_k_norm.weight", "self_attn.k_norm.weight", "whole", "norm"),
    when="qk_norm",
)

ARCHITECTURE = Architecture(
    name="qwen3",
    models="Qwen3",
    hf_model_types=("qwen3",),
    options={"qk_norm": "an RMSNorm over each head's queries and keys before RoPE"},
    defaults={},
    gguf_options=lambda read: {"qk_norm": True},
    hf_options=lambda config: {"qk_norm": True},
    layer_weights=llama.LAYER_WEIGHTS + QK_NORM_WEIGHTS,
    model_weights=llama.MODEL_WEIGHTS,
)
