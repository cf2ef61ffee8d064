"""Qwen2 and Qwen2.5: Llama with biases on q, k and v (none on W_O).

Derived in notebook 15. A file stores W_Q and W_K in transformers' half-split RoPE layout
(nothing to permute); a RoPE scaling it may hold is read by `mha_lib.models.read`.
"""

from __future__ import annotations

from . import llama
from .spec import Architecture, weights

BIAS_WEIGHTS = weights(
    ("self_attn.q_proj.bias", "attn_q.bias", "self_attn.q_proj.bias", "heads"),
    ("self_attn.k_proj.bias", "attn_k.bias", "self_attn.k_proj.bias", "kv_heads"),
    ("self_attn.v_proj.bias", "attn_v.bias", "self_attn.v_proj.bias", "kv_heads"),
    when="attention_bias",
)

ARCHITECTURE = Architecture(
    name="qwen2",
    models="Qwen2, Qwen2.5",
    hf_model_types=("qwen2",),
    options={"attention_bias": "biases on q, k and v, none on W_O"},
    defaults={},
    gguf_options=lambda read: {"attention_bias": True},
    hf_options=lambda config: {"attention_bias": True},
    layer_weights=llama.LAYER_WEIGHTS + BIAS_WEIGHTS,
    model_weights=llama.MODEL_WEIGHTS,
)
