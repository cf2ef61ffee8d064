"""What a key/value cache costs: bytes per token per layer, and in total, for real models.

Derived in notebook 11. One layer of attention caches, per token,
- multi-head, grouped-query and multi-query attention: keys and values of the h_kv
  key/value heads, 2·h_kv·d_head numbers (h_kv = h, h/g or 1);
- multi-head latent attention: one latent and one shared rotated key, r + d_R numbers; with
  DeepSeek's sparse attention (notebook 18) the indexer's key too, D more numbers (one key per
  token, shared by the index heads: `index_head_dim`);
- a sliding window of W tokens: the same per token, but never more than W tokens
  (plus the S sinks a streaming decoder keeps).
The total for a context of N tokens sums over the layers: N·(per token) for a global layer,
min(N, W + S)·(per token) for a windowed one, times the bytes per number (2 for the
bfloat16 these models are served in) and the batch.

`MODELS` holds the published configurations the notebook uses, each written once with its
source (the model's config.json, read by hand; nothing is downloaded), and each model's
native context: the longest sequence it was trained on, as its paper or model card states it.
A config's `max_position_embeddings` is not always that: Mistral-7B-v0.1's says 32768, where
its paper trained it at 8192; DeepSeek-V3's says 163840 (YaRN's factor 40 times 4096), where its
report extends the context to 128K. A cache bill beyond the native context prices a sequence
the model was not trained on (`beyond_native`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._checks import check_int

__all__ = [
    "DEEPSEEK_V32",
    "MODELS",
    "CacheConfig",
    "beyond_native",
    "cache_bytes",
    "cache_config",
    "cache_numbers_per_token",
]


@dataclass(frozen=True)
class CacheConfig:
    """What decides a model's cache. kind: 'kv' (MHA, GQA, MQA by num_kv_heads) or 'mla'.

    index_head_dim: D, the key a sparse-attention indexer caches per token beside MLA's latent
    (0: no indexer; DeepSeek-V3.2: 128);
    window: the sliding window of the windowed layers (None: every layer global);
    window_layers: how many of the layers are windowed (default all, when window is set);
    native_context: the longest context the published model was trained on (None: unknown),
    its source in `source`.
    """

    name: str
    source: str
    layers: int
    kind: str = "kv"
    num_heads: int = 0
    num_kv_heads: int = 0
    head_dim: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    index_head_dim: int = 0
    window: int | None = None
    window_layers: int | None = None
    bytes_per_number: int = 2
    native_context: int | None = None

    @property
    def attention(self) -> str:
        """MHA, GQA, MQA or MLA, read from the configuration."""
        if self.kind == "mla":
            return "MLA"
        if self.num_kv_heads == self.num_heads:
            return "MHA"
        return "MQA" if self.num_kv_heads == 1 else "GQA"


def cache_numbers_per_token(cfg: CacheConfig) -> int:
    """Numbers one token adds to ONE layer's cache: 2·h_kv·d_head, or r + d_R for MLA (+ D, the
    indexer's key, with sparse attention)."""
    if cfg.kind == "mla":
        return cfg.kv_lora_rank + cfg.qk_rope_head_dim + cfg.index_head_dim
    if cfg.index_head_dim:
        raise ValueError(
            f"index_head_dim = {cfg.index_head_dim} with kind {cfg.kind!r}: an indexer's keys sit "
            "beside an MLA cache (kind 'mla')"
        )
    if cfg.kind != "kv":
        raise ValueError(f"kind must be 'kv' or 'mla'; got {cfg.kind!r}")
    return 2 * cfg.num_kv_heads * cfg.head_dim


def cache_bytes(cfg: CacheConfig, context: int, batch: int = 1, num_sinks: int = 0) -> int:
    """Bytes of the whole cache (all layers) after `context` tokens, for `batch` sequences."""
    N = check_int(context, "context", 0)
    B = check_int(batch, "batch", 1)
    check_int(num_sinks, "num_sinks", 0)
    per_token = cache_numbers_per_token(cfg) * cfg.bytes_per_number
    if cfg.window is None:
        return B * cfg.layers * N * per_token
    windowed = cfg.layers if cfg.window_layers is None else cfg.window_layers
    kept = min(N, cfg.window + num_sinks)
    return B * per_token * (windowed * kept + (cfg.layers - windowed) * N)


def beyond_native(cfg: CacheConfig, context: int) -> bool:
    """True when `context` tokens exceed the model's native context (False when unknown)."""
    return cfg.native_context is not None and context > cfg.native_context


def cache_config(config, bytes_per_number: int = 4) -> CacheConfig:
    """The configuration of a decoder (`mha_lib.nn.decoder.DecoderConfig`, read from a GGUF
    file's metadata in notebook 12): its layers, heads, key/value heads and head dimension, the
    cache in float32 by default."""
    return CacheConfig(
        "this model",
        "the GGUF file's metadata",
        config.num_layers,
        num_heads=config.num_heads,
        num_kv_heads=config.num_kv_heads,
        head_dim=config.head_dim,
        bytes_per_number=bytes_per_number,
    )


MODELS: dict[str, CacheConfig] = {
    c.name: c
    for c in (
        CacheConfig(
            "Llama-2-7B",
            "Llama-2-7b-hf config.json (max_position_embeddings 4096; Touvron et al. 2023)",
            32, num_heads=32, num_kv_heads=32, head_dim=128, native_context=4096,
        ),
        CacheConfig(
            "Falcon-7B",
            "falcon-7b config.json (multi_query: true); context: the model card's sequence "
            "length 2048",
            32, num_heads=71, num_kv_heads=1, head_dim=64, native_context=2048,
        ),
        CacheConfig(
            "Llama-3-8B",
            "Meta-Llama-3-8B config.json (max_position_embeddings 8192; Dubey et al. 2024)",
            32, num_heads=32, num_kv_heads=8, head_dim=128, native_context=8192,
        ),
        CacheConfig(
            "Mistral-7B",
            "Mistral-7B-v0.1 config.json (sliding_window 4096; its max_position_embeddings "
            "32768 is not the training length); context: the paper's context_len 8192 (Jiang et "
            "al. 2023, Table 1)",
            32, num_heads=32, num_kv_heads=8, head_dim=128, window=4096, native_context=8192,
        ),
        CacheConfig(
            "Gemma-2-9B",
            "gemma-2-9b config.json (sliding_window 4096 on every other layer, "
            "max_position_embeddings 8192; Gemma Team 2024)",
            42, num_heads=16, num_kv_heads=8, head_dim=256, window=4096, window_layers=21,
            native_context=8192,
        ),
        CacheConfig(
            "DeepSeek-V3",
            "DeepSeek-V3 config.json (kv_lora_rank 512, qk_rope_head_dim 64; "
            "max_position_embeddings 163840 = YaRN's factor 40 x 4096); context: the report's "
            "extension with YaRN from 4K to 32K, then to 128K = 131072 (DeepSeek-AI 2024)",
            61, kind="mla", num_heads=128, kv_lora_rank=512, qk_rope_head_dim=64,
            native_context=131_072,
        ),
    )
}  # fmt: skip  # a table: one model, its sizes on a line

# DeepSeek-V3.2: DeepSeek-V3's MLA and an indexer key of 128 numbers per token and layer, kept
# out of `MODELS` (notebook 11's bill); notebook 18 adds its row
DEEPSEEK_V32 = CacheConfig(
    "DeepSeek-V3.2",
    "transformers' DeepseekV32Config defaults, DeepSeek-V3.2-Exp's config.json (kv_lora_rank "
    "512, qk_rope_head_dim 64, index_head_dim 128); context: 128K = 131072, as DeepSeek-V3",
    61, kind="mla", num_heads=128, kv_lora_rank=512, qk_rope_head_dim=64, index_head_dim=128,
    native_context=131_072,
)  # fmt: skip
