"""Llama (Llama 2 and 3.x, SmolLM2): notebook 12's decoder, the plain model every other file of
this package changes.

Derived in notebook 12. Every layer: RMSNorm, grouped-query attention with RoPE over all of d,
RMSNorm, SwiGLU; the embedding tied to the output head unless the file holds `output.weight`.
It sets no option of its own. llama.cpp's converter stores each head's rows of W_Q and W_K
permuted from transformers' half-split RoPE layout to adjacent pairs (`rope_rows_permuted`),
and Llama 3.1's and 3.2's frequency scaling as a tensor, `rope_freqs.weight` (read with the
other RoPE scalings by `mha_lib.models.read`).
"""

from __future__ import annotations

from .spec import Architecture, weights

# the model's own weights: (ours, llama.cpp's, transformers', tensor parallelism's split)
MODEL_WEIGHTS = weights(
    ("embed.weight", "token_embd.weight", "model.embed_tokens.weight", "vocab"),
    ("norm.weight", "output_norm.weight", "model.norm.weight", "whole", "norm"),
) + weights(
    ("lm_head.weight", "output.weight", "lm_head.weight", "not_split"), when="not tie_embeddings"
)

# one layer's, each under `layers.{l}.` (ours), `blk.{l}.` (llama.cpp's), `model.layers.{l}.`
LAYER_WEIGHTS = weights(
    ("norm1.weight", "attn_norm.weight", "input_layernorm.weight", "whole", "norm"),
    ("self_attn.q_proj.weight", "attn_q.weight", "self_attn.q_proj.weight", "heads"),
    ("self_attn.k_proj.weight", "attn_k.weight", "self_attn.k_proj.weight", "kv_heads"),
    ("self_attn.v_proj.weight", "attn_v.weight", "self_attn.v_proj.weight", "kv_heads"),
    ("self_attn.out_proj.weight", "attn_output.weight", "self_attn.o_proj.weight", "heads_in"),
    ("norm2.weight", "ffn_norm.weight", "post_attention_layernorm.weight", "whole", "norm"),
    ("mlp.gate_proj.weight", "ffn_gate.weight", "mlp.gate_proj.weight", "hidden"),
    ("mlp.up_proj.weight", "ffn_up.weight", "mlp.up_proj.weight", "hidden"),
    ("mlp.down_proj.weight", "ffn_down.weight", "mlp.down_proj.weight", "hidden_in"),
)

# the tensors whose rows llama.cpp's converter permuted to adjacent RoPE pairs, head by head
ROPE_PERMUTED = ("attn_q.weight", "attn_k.weight")

ARCHITECTURE = Architecture(
    name="llama",
    models="Llama 2 and 3.x, SmolLM2",
    hf_model_types=("llama",),
    options={},
    defaults={},
    gguf_options=lambda read: {},
    hf_options=lambda config: {},
    layer_weights=LAYER_WEIGHTS,
    model_weights=MODEL_WEIGHTS,
    rope_rows_permuted=True,
)
