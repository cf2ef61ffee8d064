"""Qwen3.5's text decoder (dense): gated-DeltaNet layers (linear attention) with a softmax layer
every fourth, whose attention has QK-norm, partial RoPE and an output gate.

Derived in notebook 16. Read from a transformers `Qwen3_5TextConfig` (or a config.json's
`text_config`) into notebook 16's `HybridConfig` (`config_class` "hybrid": the linear layers'
sizes beside the decoder's); its GGUF files are refused by name. transformers' layout differs
from ours in two ways, which `mha_lib.linear_attention.hybrid` translates: every norm is
zero-centred (stored w, applied as 1 + w), and a full layer's `q_proj` holds, head by head, d
query rows then d gate rows (ours: `q_proj` and `gate_proj`, hence the gate's transformers name
None below). A linear layer's weights are the gated DeltaNet's, named alike under
`linear_attn.` (theirs) and `self_attn.` (ours), and not split by tensor parallelism.
"""

from __future__ import annotations

from . import llama, qwen3
from .spec import Architecture, weights

OPTIONS = {
    "layer_types": "three gated-DeltaNet (linear attention) layers to each softmax one",
    "qk_norm": "an RMSNorm over each head's queries and keys before RoPE",
    "rope_dim": "partial RoPE: only the first quarter of each head's d turns",
    "attn_output_gate": "each head's output gated by sigmoid(x W_G) before W_O",
}

GATE_WEIGHTS = weights(("self_attn.gate_proj.weight", None, None, "heads"), when="attn_output_gate")

# the gated DeltaNet's weights (mha_lib.linear_attention.GatedDeltaNet), in a linear layer
LINEAR_WEIGHTS = weights(
    *(
        (f"self_attn.{name}", None, f"linear_attn.{name}", "not_split")
        for name in (
            "A_log",
            "dt_bias",
            "in_proj_qkv.weight",
            "in_proj_z.weight",
            "in_proj_b.weight",
            "in_proj_a.weight",
            "conv1d.weight",
            "norm.weight",
            "out_proj.weight",
        )
    )
)

HF_DEFAULTS = {  # transformers' Qwen3_5TextConfig, for the keys a config.json may leave out
    "layer_types": None,
    "rope_parameters": None,
    "attention_bias": False,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "bos_token_id": None,
    "eos_token_id": None,
    "rms_norm_eps": 1e-6,
}


def hf_options(config) -> dict:
    """The options and the linear layers' sizes of a `Qwen3_5TextConfig`."""
    if config.hidden_act != "silu" or config.attention_bias:
        raise ValueError(
            f"hidden_act = {config.hidden_act!r}, attention_bias = {config.attention_bias}; "
            "expected 'silu' and no bias, as Qwen3.5 has"
        )
    d = config.head_dim
    rope_dim = int(d * dict(config.rope_parameters or {}).get("partial_rotary_factor", 1.0))
    return dict(
        qk_norm=True,
        rope_dim=None if rope_dim == d else rope_dim,
        attn_output_gate=True,
        layer_types=tuple(config.layer_types),
        linear_num_key_heads=config.linear_num_key_heads,
        linear_num_value_heads=config.linear_num_value_heads,
        linear_key_head_dim=config.linear_key_head_dim,
        linear_value_head_dim=config.linear_value_head_dim,
        linear_conv_kernel_dim=config.linear_conv_kernel_dim,
    )


ARCHITECTURE = Architecture(
    name="qwen35",
    models="Qwen3.5",
    hf_model_types=("qwen3_5_text",),
    options=OPTIONS,
    defaults={},
    gguf_options=None,
    hf_options=hf_options,
    layer_weights=llama.LAYER_WEIGHTS + qwen3.QK_NORM_WEIGHTS + GATE_WEIGHTS,
    model_weights=llama.MODEL_WEIGHTS,
    linear_weights=LINEAR_WEIGHTS,
    config_class="hybrid",
    hf_norms_zero_centred=True,
    hf_defaults=HF_DEFAULTS,
)
