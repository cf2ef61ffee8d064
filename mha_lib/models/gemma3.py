"""Gemma 3's text models (270M to 27B): sliding-window and global layers, four norms per block,
QK-norm, a scaled embedding, a GELU-gated MLP, one RoPE base per kind of layer.

Derived in notebook 15. Five sliding layers (each query sees its last `sliding_window` keys,
RoPE base 10,000) to one global layer (every earlier key, the file's `rope.freq_base`); a norm
after each sublayer too; the embedding times √C. Three numbers are not in a GGUF file and are
set as llama.cpp sets them (`defaults`): the pattern of six, the sliding layers' base, and the
scores' scale, 1/√d except for the 27B (62 layers), whose scores are scaled by 1/√(C/h) =
1/√168 (transformers' `query_pre_attn_scalar`: 256 = d for 270M to 12B, 168 for the 27B).
Gemma 3 4B to 27B stretch their global layers' RoPE linearly (factor 8), read as frequency
factors by `mha_lib.models.read`. Every norm is stored as the weight it multiplies by, 1 + w,
in a GGUF file and in ours; transformers stores w (`hf_norms_zero_centred`).
"""

from __future__ import annotations

from . import llama, qwen3
from .spec import Architecture, weights

DEFAULTS = {  # transformers' Gemma3TextConfig defaults, not stored in a GGUF file
    "sliding_window_pattern": 6,  # layer l is global when (l + 1) % 6 == 0
    "rope_local_base": 10_000.0,
    "layers_of_27b": 62,  # its scores are scaled by 1/√(C/h), the others' by 1/√d
}

OPTIONS = {
    "layer_types": "five sliding-window layers to each global one",
    "sliding_window": "the keys a sliding layer's query sees, itself included",
    "rope_local_base": "the sliding layers' RoPE base (10,000), the global ones' rope_base",
    "qk_norm": "an RMSNorm over each head's queries and keys before RoPE",
    "query_scale": "the scores' scale: 1/√d, 1/√(C/h) for the 27B",
    "sandwich_norms": "four norms per block: each sublayer's output is normalised too",
    "embedding_scale": "the embedding multiplied by √C",
    "mlp_activation": "a GELU-gated MLP (tanh approximation), not SwiGLU",
    "attn_logit_softcap": "attention scores soft-capped, if the file says so (Gemma 2's)",
    "final_logit_softcap": "final logits soft-capped, if the file says so (Gemma 2's)",
}

# Gemma's four norms: transformers' post_attention_layernorm is a post-norm here, and the MLP's
# pre-norm is pre_feedforward_layernorm
SANDWICH_WEIGHTS = weights(
    ("norm2.weight", "ffn_norm.weight", "pre_feedforward_layernorm.weight", "whole", "norm"),
    (
        "post_norm1.weight",
        "post_attention_norm.weight",
        "post_attention_layernorm.weight",
        "whole",
        "norm",
    ),
    (
        "post_norm2.weight",
        "post_ffw_norm.weight",
        "post_feedforward_layernorm.weight",
        "whole",
        "norm",
    ),
    when="sandwich_norms",
)


def gemma_block_options(read, defaults: dict) -> dict:
    """What Gemma 2's and Gemma 3's files share: sliding layers in a pattern (every
    `sliding_window_pattern`-th layer global), the window from the file, four norms, the
    embedding times √C, the GELU-gated MLP, and the scores' scale 1/√d, 1/√(C/h) for the
    model of `layers_of_27b` layers (as llama.cpp sets them)."""
    L, pattern = read.num_layers, defaults["sliding_window_pattern"]
    layers_27b = L == defaults["layers_of_27b"]
    return dict(
        layer_types=tuple(
            "full_attention" if (l + 1) % pattern == 0 else "sliding_attention" for l in range(L)
        ),
        sliding_window=int(read.need("attention.sliding_window")),
        query_scale=(read.hidden_size // read.num_heads if layers_27b else read.head_dim) ** -0.5,
        sandwich_norms=True,
        embedding_scale=float(read.hidden_size) ** 0.5,
        mlp_activation="gelu_tanh",
    )


def gguf_options(read) -> dict:
    """The options of a GGUF file's `gemma3.` keys, and the defaults it does not store."""
    return dict(
        **gemma_block_options(read, DEFAULTS),
        rope_local_base=DEFAULTS["rope_local_base"],
        qk_norm=True,
        attn_logit_softcap=read.get("attn_logit_softcapping"),
        final_logit_softcap=read.get("final_logit_softcapping"),
    )


def hf_options(config) -> dict:
    """The options of transformers' `Gemma3TextConfig` (or `Gemma2Config`: `gemma2.py`)."""
    rope = config.rope_parameters
    per_type = "sliding_attention" in rope
    if getattr(config, "hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        raise ValueError(
            f"hidden_activation = {config.hidden_activation!r}; expected 'gelu_pytorch_tanh'"
        )
    return dict(
        layer_types=tuple(config.layer_types),
        sliding_window=config.sliding_window,
        rope_local_base=float(rope["sliding_attention"]["rope_theta"]) if per_type else None,
        qk_norm=config.model_type == "gemma3_text",
        query_scale=config.query_pre_attn_scalar**-0.5,
        sandwich_norms=True,
        embedding_scale=config.hidden_size**0.5,
        mlp_activation="gelu_tanh",
        attn_logit_softcap=getattr(config, "attn_logit_softcapping", None),
        final_logit_softcap=getattr(config, "final_logit_softcapping", None),
    )


ARCHITECTURE = Architecture(
    name="gemma3",
    models="Gemma 3",
    hf_model_types=("gemma3_text",),
    options=OPTIONS,
    defaults=DEFAULTS,
    gguf_options=gguf_options,
    hf_options=hf_options,
    layer_weights=llama.LAYER_WEIGHTS[:5]
    + SANDWICH_WEIGHTS
    + llama.LAYER_WEIGHTS[6:]
    + qwen3.QK_NORM_WEIGHTS,
    model_weights=llama.MODEL_WEIGHTS,
    hf_norms_zero_centred=True,
)
