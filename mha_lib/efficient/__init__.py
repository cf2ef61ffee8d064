"""Efficient attention from scratch: KV cache, grouped-query attention, FlashAttention, masks,
and smaller caches (latent attention, sliding windows with sinks).

Derived in notebook 08 (`triton_flash` in notebook 09; `cache_cost`, `mla`, `sink_cache` and
`recall` in notebook 11, read after `kv_cache` and `gqa`). Read first: `kv_cache`
(decoding one token at a time, about 100 lines), then `masks`, `gqa`, and `flash`, the
tiled algorithm that `triton_flash` turns into GPU kernels. This package imports torch, so
it is imported explicitly (`from mha_lib.efficient import flash_attention`); `import
mha_lib` stays numpy-only. `triton_flash` imports triton and is never imported here
(`import mha_lib.efficient.triton_flash as ta`).

A module per idea:
- `masks`: the mask zoo (causal, bottom-right causal for a chunk against a
  cache, sliding window, document, prefix-LM, ALiBi) as numpy boolean masks
  (True = may attend), as FlexAttention `mask_mod` / `score_mod` functions,
  and a perturb-the-future test for causality;
- `kv_cache`: `KVCache` and `cached_attention`, one decoding step that
  appends the new keys and values and attends;
- `gqa`: grouped-query attention (`num_kv_heads` key/value heads shared by
  groups of query heads; 1 is multi-query attention), as a function and as
  a module that decodes with a `KVCache`;
- `flash`: FlashAttention forward and backward in plain torch (tiles over
  queries and keys, running max and sum, recomputed backward), with any
  mask of the zoo given as a `mask_mod`; tiles the mask blocks entirely are
  skipped and counted (`TileStats`); `hbm_bytes`, the bytes a forward pass moves
  between HBM and the chip, naive or tiled (counted tile by tile);
- `triton_flash`: the same forward and backward as Triton kernels, run by
  Triton's interpreter on a CPU (notebook 09; imports triton);
- `cache_cost` (notebook 11): cache bytes per token and in total, and the
  published configurations of real models;
- `mla` (notebook 11): multi-head latent attention, its latent cache
  `MLACache`, weight absorption and the cost of one decoding step;
- `sink_cache` (notebook 11): the rolling cache of S sinks and the last W
  tokens, beside `KVCache`;
- `recall` (notebook 11): multi-query associative recall, small models with
  each attention, and the equal-cache-budget training sweep.
Notebook 11's modules are imported explicitly
(`from mha_lib.efficient.mla import MultiHeadLatentAttention`).

Notation: q (B, h, N, d_k), k (B, h_kv, M, d_k), v (B, h_kv, M, d_v);
h query heads, h_kv key/value heads, g = h / h_kv query heads per group.
"""

from .flash import (
    TileStats,
    causal_key_end,
    flash_attention,
    flash_attention_backward,
    flash_attention_forward,
    hbm_bytes,
    saved_for_backward_bytes,
)
from .gqa import GroupedQueryAttention, grouped_query_attention, repeat_kv
from .kv_cache import KVCache, cached_attention
from .masks import (
    alibi_bias,
    alibi_score_mod,
    alibi_slopes,
    bottom_right_causal_mask,
    bottom_right_causal_mask_mod,
    causal_mask_mod,
    document_mask,
    document_mask_mod,
    leaks_future,
    mask_from_mask_mod,
    prefix_lm_mask,
    prefix_lm_mask_mod,
    sliding_window_mask,
    sliding_window_mask_mod,
)

__all__ = [
    "GroupedQueryAttention",
    "KVCache",
    "TileStats",
    "alibi_bias",
    "alibi_score_mod",
    "alibi_slopes",
    "bottom_right_causal_mask",
    "bottom_right_causal_mask_mod",
    "cached_attention",
    "causal_key_end",
    "causal_mask_mod",
    "document_mask",
    "document_mask_mod",
    "flash_attention",
    "flash_attention_backward",
    "flash_attention_forward",
    "grouped_query_attention",
    "hbm_bytes",
    "leaks_future",
    "mask_from_mask_mod",
    "prefix_lm_mask",
    "prefix_lm_mask_mod",
    "repeat_kv",
    "saved_for_backward_bytes",
    "sliding_window_mask",
    "sliding_window_mask_mod",
]
