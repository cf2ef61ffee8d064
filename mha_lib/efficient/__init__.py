"""Efficient attention: FlashAttention as Triton kernels, and smaller caches (latent attention,
the cache bill, the equal-budget recall sweep): the part of the library behind notebooks 09 and 11,
and the names notebook 08 derives.

Notebook 08's building blocks (the KV cache, grouped-query attention, the mask zoo,
FlashAttention in plain torch) are what later parts build on, so they live in `mha_lib.nn` and
are imported from there only (`from mha_lib.nn import flash_attention`). Read first:
`mha_lib.nn.kv_cache`, then `mha_lib.nn.flash`, the tiled algorithm that `triton_flash` turns
into GPU kernels. This package imports torch, so it is imported explicitly; `import mha_lib`
stays numpy-only. `triton_flash` imports triton and is never imported here
(`import mha_lib.efficient.triton_flash as ta`).

A module per idea:
- `triton_flash` (notebook 09): the forward and backward of `mha_lib.nn.flash` as Triton
  kernels, run by Triton's interpreter on a CPU (imports triton);
- `cache_cost` (notebook 11): cache bytes per token and in total, and the published
  configurations of real models;
- `mla` (notebook 11): multi-head latent attention, its latent cache `MLACache`, weight
  absorption and the cost of one decoding step;
- `recall` (notebook 11): multi-query associative recall, small models with each attention,
  and the equal-cache-budget training sweep.
Notebook 11's modules are imported explicitly
(`from mha_lib.efficient.mla import MultiHeadLatentAttention`).

Notation: q (B, h, N, d_k), k (B, h_kv, M, d_k), v (B, h_kv, M, d_v);
h query heads, h_kv key/value heads, g = h / h_kv query heads per group.
"""
