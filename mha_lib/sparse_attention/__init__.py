"""Choosing keys: DeepSeek's sparse attention, a learned mask on notebook 11's latent attention.

Serves notebook 18. Read first: `indexer`, from `LightningIndexer` (the index scores
Σ_h w_h · ReLU(q_h · k), one key per token shared by the index heads) to `causal_topk` (each
query's best k earlier keys as a "may attend" mask); then `sparse_mla`, notebook 11's
`MultiHeadLatentAttention` masked by that choice, and DeepSeek-V3.2's decoder around it on the
series' `DecoderLM`; then `nsa`, Native Sparse Attention's three gated branches. This package
imports torch, so it is imported explicitly (`from mha_lib.sparse_attention import
DeepseekV32LM`); `import mha_lib` stays numpy-only.

A module per idea:
- `indexer`: `LightningIndexer`, equal to transformers' `DeepseekV32Indexer` (its projections,
  the key's LayerNorm, RoPE on the first d_R numbers in half-split pairs, the weights' 1/√H),
  its key cache `IndexerCache` (D numbers per token beside MLA's r + d_R:
  `indexer_numbers_per_token`), `causal_topk` (indices (B, N, k) and the mask (B, N, M));
- `fp8`: the indexer's precision, `hadamard` (an orthogonal rotation: no score changes), `e4m3`
  (FP8 rounding with a scale per row) and `topk_changes` (how many top-k sets a change of
  precision changes);
- `sparse_mla`: `SparseMLA` (MLA with the indexer's mask) and its cache `SparseMLACache` (MLA's
  latents and the indexer's keys); `SparseMLAConfig`; `DeepseekV32LM`, equal to transformers'
  `DeepseekV32ForCausalLM` with dense MLP layers (`from_hf`), whose `topk_indices(ids, layer)`
  gives the keys each query chose, and whose `generate` is the series' (`mha_lib.nn.generate`);
- `nsa`: Native Sparse Attention, sparse attention by blocks rather than keys: three causal
  branches per query (attention over mean-pooled blocks of l tokens every d, over the n blocks
  of l' tokens those blocks' attention ranks highest, a GQA group sharing the choice, and over a
  sliding window), mixed by per-head sigmoid gates (`nsa_attention`), each branch a function
  (`compress`, `compressed_attention`, `select_blocks`, `selected_attention`,
  `window_attention`), equal to fla-core's pure-torch reference; `NativeSparseAttention`, the
  layer with its projections and gates;
- `recall`: notebook 18's trained toy, notebook 11's recall task with one latent-attention layer
  under a budget of k = 4 keys per query, chosen dense, by a window, at random or by a lightning
  indexer (warmed up on the dense attention's weights, then trained on the chosen keys, as
  DeepSeek trains it): `IndexedAttention`, the training stages, the cached sweep over seeds
  (`mha_lib/data/nb18_recall_sweep.json`, `load_sweep`, `sweep_summary`, `every_seed_claims`)
  and seed 0's trained model (`load_trained`).

Edges: `efficient` the sparse layer is notebook 11's `MultiHeadLatentAttention` with its latent
cache and its YaRN (`efficient.mla`).

Notation: x (B, N, C); M keys (N, or the cached tokens and the new ones); H index heads of D,
k = index_topk; MLA's r (kv_lora_rank), r_q (q_lora_rank), d_N, d_R, d_V. NSA's q (B, h, N, d_k)
and k, v (B, h_kv, N, ·), blocks of l = block tokens every d = stride compressed, blocks of
l' = block_size tokens selected, n = n_selected of them, a window of w = window keys.
"""

from .indexer import IndexerCache, LightningIndexer, causal_topk, indexer_numbers_per_token
from .nsa import (
    NativeSparseAttention,
    compress,
    compressed_attention,
    nsa_attention,
    nsa_branches,
    select_blocks,
    selected_attention,
    window_attention,
)
from .sparse_mla import DeepseekV32LM, SparseMLA, SparseMLACache, SparseMLAConfig

__all__ = [
    "DeepseekV32LM",
    "IndexerCache",
    "LightningIndexer",
    "NativeSparseAttention",
    "SparseMLA",
    "SparseMLACache",
    "SparseMLAConfig",
    "causal_topk",
    "compress",
    "compressed_attention",
    "indexer_numbers_per_token",
    "nsa_attention",
    "nsa_branches",
    "select_blocks",
    "selected_attention",
    "window_attention",
]
