"""DeepSeek-V3.2 (dense layers): notebook 11's multi-head latent attention with a lightning
indexer that chooses the keys each query attends to (DeepSeek sparse attention).

Derived in notebook 18. Read from a transformers `DeepseekV32Config` into notebook 18's
`SparseMLAConfig` (`config_class` "sparse_mla", built by `mha_lib.sparse_attention`): the
decoder's sizes and, as options, MLA's and the indexer's. Every layer is pre-norm, RMSNorm,
sparse MLA, RMSNorm, SwiGLU, as a Llama's, but its attention is not grouped-query attention:
its rows (`attention_weights`) replace the plain `self_attn.` rows. DeepSeek-V3.2's published
model has a mixture of experts in all but its first three layers (`mlp_layer_types` "sparse",
from `first_k_dense_replace` and `n_routed_experts`): such a configuration is refused by name
here, the dense layers are enough for the attention. llama.cpp calls the architecture
"deepseek32"; its GGUF files are not read here (`gguf_options` None).

How transformers' fields become options (`hf_options`), and what is refused by name:
- MLA's sizes: kv_lora_rank r, q_lora_rank r_q (required: the indexer reads the query's latent;
  transformers' V3.2 has no full-rank query path), qk_nope_head_dim d_N, qk_rope_head_dim d_R,
  v_head_dim d_V; num_key_value_heads must equal num_attention_heads; MLA's RoPE is
  interleaved and the indexer's half-split, always (no field says so);
- the indexer's: index_n_heads H, index_head_dim D, index_topk k;
- rope_parameters: "default", or "yarn" (as DeepSeek-V3's, `mha_lib.efficient.mla.yarn`);
- refused: mlp_layer_types with a "sparse" (MoE) layer, attention_bias, mlp_bias, a hidden_act
  other than "silu", attention_dropout (training only; the series trains no V3.2 here),
  layer_types other than "indexed_attention".
"""

from __future__ import annotations

from . import llama
from .spec import Architecture, weights

OPTIONS = {
    "kv_lora_rank": "r, MLA's latent: what each token caches, with the d_R rotated numbers",
    "q_lora_rank": "r_q, the query's latent c_Q, which MLA and the indexer's queries read",
    "qk_nope_head_dim": "d_N, each head's query/key numbers not turned by RoPE",
    "qk_rope_head_dim": "d_R, the turned numbers: MLA's shared rotated key, the indexer's first",
    "v_head_dim": "d_V, each head's value numbers",
    "index_n_heads": "H, the indexer's heads, each with a query and a weight per token",
    "index_head_dim": "D, the indexer's head size: one key of D numbers per token, cached",
    "index_topk": "k, the keys each query's MLA may attend to (the index scores' best k)",
    "rope_scaling": "YaRN's stretch of RoPE (None: the default RoPE)",
}

# MLA's rows (notebook 11's `MultiHeadLatentAttention`, q_lora_rank set), under `self_attn.`:
# (ours, llama.cpp's: not read here, transformers', tensor parallelism's split)
MLA_WEIGHTS = weights(
    ("self_attn.q_a_proj.weight", None, "self_attn.q_a_proj.weight", "whole"),
    ("self_attn.q_a_norm.weight", None, "self_attn.q_a_layernorm.weight", "whole", "norm"),
    ("self_attn.q_b_proj.weight", None, "self_attn.q_b_proj.weight", "heads"),
    ("self_attn.kv_a_proj.weight", None, "self_attn.kv_a_proj_with_mqa.weight", "whole"),
    ("self_attn.kv_a_norm.weight", None, "self_attn.kv_a_layernorm.weight", "whole", "norm"),
    ("self_attn.kv_b_proj.weight", None, "self_attn.kv_b_proj.weight", "heads"),
    ("self_attn.out_proj.weight", None, "self_attn.o_proj.weight", "heads_in"),
)

# the lightning indexer's (`mha_lib.sparse_attention.LightningIndexer`): every rank would hold
# it whole (its one key per token is shared by its heads)
INDEXER_WEIGHTS = weights(
    ("self_attn.indexer.q_proj.weight", None, "self_attn.indexer.wq_b.weight", "whole"),
    ("self_attn.indexer.k_proj.weight", None, "self_attn.indexer.wk.weight", "whole"),
    ("self_attn.indexer.k_norm.weight", None, "self_attn.indexer.k_norm.weight", "whole", "norm"),
    ("self_attn.indexer.k_norm.bias", None, "self_attn.indexer.k_norm.bias", "whole"),
    (
        "self_attn.indexer.weights_proj.weight",
        None,
        "self_attn.indexer.weights_proj.weight",
        "whole",
    ),
)

# a layer's other rows are the plain Llama's: its two norms and its SwiGLU
LAYER_WEIGHTS = tuple(w for w in llama.LAYER_WEIGHTS if not w.ours.startswith("self_attn."))


def hf_options(config) -> dict:
    """The options of a `DeepseekV32Config`: MLA's and the indexer's sizes, the RoPE's YaRN;
    what the series does not build is refused naming its field."""
    kinds = list(config.mlp_layer_types or [])
    moe = [l for l, kind in enumerate(kinds) if kind != "dense"]
    if moe:
        raise ValueError(
            f"mlp_layer_types = {kinds}: layers {moe} are mixtures of experts "
            f"(first_k_dense_replace = {config.first_k_dense_replace}, n_routed_experts = "
            f"{config.n_routed_experts}), not read here; expected every layer 'dense' "
            "(first_k_dense_replace >= num_hidden_layers)"
        )
    refused = {
        "attention_bias": (config.attention_bias, False),
        "mlp_bias": (config.mlp_bias, False),
        "hidden_act": (config.hidden_act, "silu"),
        "attention_dropout": (config.attention_dropout, 0.0),
    }
    for name, (value, expected) in refused.items():
        if value != expected:
            raise ValueError(f"{name} = {value!r}; expected {expected!r}, as DeepSeek-V3.2 has")
    if config.q_lora_rank is None:
        raise ValueError(
            "q_lora_rank = None; the indexer reads the query's latent: expected an int"
        )
    if config.num_key_value_heads != config.num_attention_heads:
        raise ValueError(
            f"num_key_value_heads = {config.num_key_value_heads}; expected num_attention_heads "
            f"= {config.num_attention_heads} (MLA's heads each up-project the latent)"
        )
    layer_types = list(config.layer_types or [])
    if any(kind != "indexed_attention" for kind in layer_types):
        raise ValueError(
            f"layer_types = {layer_types}; expected every layer 'indexed_attention' (sparse MLA)"
        )
    rope = dict(config.rope_parameters or {})
    kind = rope.get("rope_type", "default")
    if kind not in ("default", "yarn"):
        raise ValueError(f"rope_parameters' rope_type = {kind!r}; expected 'default' or 'yarn'")
    scaling = None
    if kind == "yarn":
        scaling = {k: v for k, v in rope.items() if k not in ("rope_theta",)}
        if scaling.get("factor") is None:  # transformers' fallback, as for DeepSeek-V3
            scaling["factor"] = (
                config.max_position_embeddings / scaling["original_max_position_embeddings"]
            )
    return dict(
        kv_lora_rank=config.kv_lora_rank,
        q_lora_rank=config.q_lora_rank,
        qk_nope_head_dim=config.qk_nope_head_dim,
        qk_rope_head_dim=config.qk_rope_head_dim,
        v_head_dim=config.v_head_dim,
        index_n_heads=config.index_n_heads,
        index_head_dim=config.index_head_dim,
        index_topk=config.index_topk,
        rope_scaling=scaling,
    )


ARCHITECTURE = Architecture(
    name="deepseek32",
    models="DeepSeek-V3.2 (dense layers)",
    hf_model_types=("deepseek_v32",),
    options=OPTIONS,
    defaults={},
    gguf_options=None,
    hf_options=hf_options,
    layer_weights=LAYER_WEIGHTS,
    model_weights=llama.MODEL_WEIGHTS,
    attention_weights=MLA_WEIGHTS + INDEXER_WEIGHTS,
    config_class="sparse_mla",
)
