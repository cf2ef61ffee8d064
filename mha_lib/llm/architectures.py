"""How a model's configuration differs from notebook 12's Llama, one line per option it sets.

Derived in notebook 15. What each architecture is (the options it sets, where its numbers come
from, its weights' names) lives in its own file of `mha_lib.models`, and `load_gguf` reads a
file through them; `differences(config)` describes any configuration, whichever architecture it
came from (a `HybridConfig`'s linear-attention layers and a `SparseMLAConfig`'s indexed layers
too). Imports the building blocks only.
"""

from __future__ import annotations

from ..nn.decoder import DecoderConfig

__all__ = ["differences"]


def differences(config: DecoderConfig) -> list[str]:
    """How `config` differs from notebook 12's Llama (SmolLM2-135M: every layer softmax
    attention over every earlier key, GQA, one RoPE base over all of d, two norms per block,
    SwiGLU, no biases, scores scaled by 1/√d, no sinks, no gate), one line per option it sets
    (a `HybridConfig`'s linear-attention layers too); [] for a Llama."""
    c = config
    out = []
    if c.layer_types is not None and "linear_attention" in c.layer_types:
        linear = c.layer_types.count("linear_attention")
        out.append(
            f"{linear} of {c.num_layers} layers mix tokens through a gated-DeltaNet state "
            "(linear attention), the others through softmax attention"
        )
    if c.layer_types is not None and "indexed_attention" in c.layer_types:
        indexed = c.layer_types.count("indexed_attention")
        k = getattr(c, "index_topk", None)
        keys = "the keys" if k is None else f"the {k} keys"
        out.append(
            f"{indexed} of {c.num_layers} layers attend with latent attention to {keys} a "
            "learned indexer chooses for each query (DeepSeek's sparse attention)"
        )
    if c.layer_types is not None and "sliding_attention" in c.layer_types:
        sliding = c.layer_types.count("sliding_attention")
        out.append(
            f"{sliding} of {c.num_layers} layers attend within a sliding window of "
            f"{c.sliding_window} keys, the others to every earlier key"
        )
    if c.rope_freq_factors is not None:
        lo, hi = min(c.rope_freq_factors), max(c.rope_freq_factors)
        what = f"by {lo:g}" if lo == hi else f"by factors from {lo:g} to {hi:g}"
        out.append(f"RoPE's frequencies divided {what} in the global layers (a longer context)")
    if c.rope_local_base is not None and c.rope_local_base != c.rope_base:
        out.append(
            f"RoPE base {c.rope_local_base:,.0f} in the sliding layers, "
            f"{c.rope_base:,.0f} in the global ones"
        )
    if c.rope_dim not in (None, c.head_dim):
        out.append(
            f"partial RoPE: only the first {c.rope_dim} of each head's {c.head_dim} numbers turn"
        )
    if c.num_kv_heads == 1:
        out.append(f"one key/value head for {c.num_heads} query heads (multi-query attention)")
    if c.head_dim * c.num_heads != c.hidden_size:
        out.append(f"heads of d = {c.head_dim}, not C / h = {c.hidden_size // c.num_heads}")
    if c.qk_norm:
        out.append("QK-norm: an RMSNorm over each head's queries and keys before RoPE")
    if c.attention_bias:
        out.append("biases on q, k and v")
    if c.query_scale is not None and abs(c.query_scale * c.head_dim**0.5 - 1) > 1e-12:
        out.append(f"scores scaled by {c.query_scale:.4g}, not 1/√d = {c.head_dim**-0.5:.4g}")
    if c.attention_sinks:
        out.append("a learned sink logit per head in every softmax (attention may go nowhere)")
    if c.attn_output_gate:
        out.append("each head's output gated by sigmoid(x W_G) before W_O")
    if c.sandwich_norms:
        out.append("four norms per block: each sublayer's output is normalised too")
    if c.embedding_scale is not None:
        out.append(f"the embedding multiplied by {c.embedding_scale:.4g} (√C)")
    if c.mlp_activation != "silu":
        out.append(f"a gated MLP with {c.mlp_activation}, not SwiGLU's silu")
    if c.attn_logit_softcap is not None:
        out.append(f"attention scores soft-capped at {c.attn_logit_softcap:g}")
    if c.final_logit_softcap is not None:
        out.append(f"final logits soft-capped at {c.final_logit_softcap:g}")
    if not c.tie_embeddings:
        out.append("an output matrix of its own (the embedding is not tied)")
    return out
