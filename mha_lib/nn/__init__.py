"""The torch building blocks every later part builds on: caches, grouped-query attention, masks,
FlashAttention in plain torch, the decoder and its attention functions, and generation.

Derived in notebooks 08 (caches, GQA, masks, FlashAttention), 11 (the rolling cache with sinks)
and 12 (the decoder and generation). Each module imports only the core (`mha_lib.pytorch`,
`mha_lib.positions`), the shared modules and this package; the parts (`efficient`, `llm`,
`distributed`, ...) import it, never the reverse. Read first: `kv_cache` (decoding one token at
a time), then `gqa`, `masks` and `flash` (notebook 08), then `decoder` and `backends`
(notebook 12). This package imports torch, so it is imported explicitly
(`from mha_lib.nn import DecoderLM`); `import mha_lib` stays numpy-only.

A module per idea:
- `masks`: the mask zoo (causal, bottom-right causal for a chunk against a cache, sliding
  window, window with sinks, document, prefix-LM, ALiBi) as numpy boolean masks (True = may
  attend), as torch tensors where a decoding step needs one, as FlexAttention `mask_mod` /
  `score_mod` functions, and a perturb-the-future test;
- `kv_cache`: what a decoder keeps: `KVCache` and `cached_attention` (one decoding step),
  notebook 11's rolling `SinkKVCache`, and `DecoderCache`, one cache per layer;
- `gqa`: grouped-query attention (`num_kv_heads` key/value heads shared by groups of query
  heads; 1 is multi-query attention), as a function and as a module with a `KVCache`;
- `flash`: FlashAttention forward and backward in plain torch, any mask of the zoo as a
  `mask_mod`, fully masked tiles skipped and counted (`TileStats`), the bytes a pass moves;
- `circuits`: what a head does, read from its weights (QK and OV circuits, composition) and
  from its attention weights (`stripe_score`), for notebook 06's toy and notebook 13's model;
- `decoder`: a Llama-style decoder: `DecoderConfig`, `RMSNorm`, `SwiGLU`, `DecoderAttention`
  (GQA with RoPE), `DecoderBlock`, `DecoderLM`, with the seams later models plug into (one
  loop over the layers, `hidden_states`; the attention function; the caches each layer makes);
- `backends`: the attention functions a decoder plugs in (`ATTENTIONS`);
- `generation`: `generate` (greedy or sampled, with or without the cache), top-k and top-p
  filters, `Trace`.

Capturing what a model computes, one rule for the whole library:
- attention weights are recorded by the attention function, never by editing a layer:
  `DecoderLM(ids, need_weights=True)` runs its layers with `backends.RecordWeights`, which
  computes the written-out weights and keeps one tensor per layer (`llm.sinks`,
  `llm.induction`: notebook 13), and the core's `MultiHeadAttention` returns its own with
  `need_weights=True`, as `nn.MultiheadAttention` does (`pretrained`, `toy`: notebooks 05, 06);
- activations are read through a forward hook, removed after the pass, or through a public
  seam, never by replacing a `forward` or calling another package's private method: a
  layer's input by a pre-hook on each `DecoderBlock` (`llm.sinks.layer_inputs`), one layer's
  rotated q, k, v by `DecoderAttention.qkv(x, positions)` (`llm.induction.swapped_stripe`), an
  encoder layer's q and k by `MultiHeadAttention.project(x)`
  (`pretrained.roles.positional_scores`), the residual stream after the last layer by
  `DecoderLM.hidden_states` (the one-pass losses, `llm.streaming.token_losses`), one layer's
  index scores by a forward hook on its indexer (`sparse_attention.DeepseekV32LM.topk_indices`).
`tests/nn/test_capture.py` reads the library's source for both.

Notation: q (B, h, N, d_k), k (B, h_kv, M, d_k), v (B, h_kv, M, d_v);
h query heads, h_kv key/value heads, g = h / h_kv query heads per group.
"""

from .backends import (
    ATTENTIONS,
    PARTS_ATTENTIONS,
    RecordWeights,
    attention_names,
    attention_weights,
    eager_attention,
    register_attention,
    resolve_attention,
    tiled_flash_attention,
)
from .decoder import DecoderAttention, DecoderBlock, DecoderConfig, DecoderLM, RMSNorm, SwiGLU
from .flash import (
    TileStats,
    causal_key_end,
    flash_attention,
    flash_attention_backward,
    flash_attention_forward,
    hbm_bytes,
    saved_for_backward_bytes,
)
from .generation import Trace, generate, pick_next, top_k_filter, top_p_filter
from .gqa import (
    GroupedQueryAttention,
    grouped_query_attention,
    grouped_scores,
    repeat_kv,
    sdpa_attention,
)
from .kv_cache import (
    ROPE_POSITIONS,
    DecoderCache,
    KVCache,
    SinkKVCache,
    cached_attention,
    sink_cached_attention,
    slot_of,
)
from .masks import (
    alibi_bias,
    alibi_score_mod,
    alibi_slopes,
    bottom_right_causal_mask,
    bottom_right_causal_mask_mod,
    bottom_right_causal_tensor,
    causal_mask_mod,
    document_mask,
    document_mask_mod,
    leaks_future,
    mask_from_mask_mod,
    prefix_lm_mask,
    prefix_lm_mask_mod,
    sink_window_mask,
    sliding_window_mask,
    sliding_window_mask_mod,
)

__all__ = [
    "ATTENTIONS",
    "PARTS_ATTENTIONS",
    "ROPE_POSITIONS",
    "DecoderAttention",
    "DecoderBlock",
    "DecoderCache",
    "DecoderConfig",
    "DecoderLM",
    "GroupedQueryAttention",
    "KVCache",
    "RMSNorm",
    "RecordWeights",
    "SinkKVCache",
    "SwiGLU",
    "TileStats",
    "Trace",
    "alibi_bias",
    "alibi_score_mod",
    "alibi_slopes",
    "attention_names",
    "attention_weights",
    "bottom_right_causal_mask",
    "bottom_right_causal_mask_mod",
    "bottom_right_causal_tensor",
    "cached_attention",
    "causal_key_end",
    "causal_mask_mod",
    "document_mask",
    "document_mask_mod",
    "eager_attention",
    "flash_attention",
    "flash_attention_backward",
    "flash_attention_forward",
    "generate",
    "grouped_query_attention",
    "grouped_scores",
    "hbm_bytes",
    "leaks_future",
    "mask_from_mask_mod",
    "pick_next",
    "prefix_lm_mask",
    "prefix_lm_mask_mod",
    "register_attention",
    "repeat_kv",
    "resolve_attention",
    "saved_for_backward_bytes",
    "sdpa_attention",
    "sink_cached_attention",
    "sink_window_mask",
    "sliding_window_mask",
    "sliding_window_mask_mod",
    "slot_of",
    "tiled_flash_attention",
    "top_k_filter",
    "top_p_filter",
]
