"""A Llama-style decoder built from the series' parts, and SmolLM2-135M loaded into it.

Derived in notebook 12. The architecture (Llama's, which SmolLM2 uses), for token ids (B, N):

    x = embed[ids]                                        (B, N, C)
    for each of the L layers (pre-norm, as notebook 04's `TransformerBlock(norm_first=True)`):
        x = x + attention(RMSNorm(x))                     GQA, RoPE, KV cache
        x = x + SwiGLU(RMSNorm(x))
    logits = RMSNorm(x) @ embedᵀ                          (B, N, V), the embedding tied

- `RMSNorm`: x / sqrt(mean(x²) + eps) · weight, no mean subtracted, no bias (new here);
- `SwiGLU`: down(silu(gate(x)) ∘ up(x)), C -> F -> C (new here);
- `DecoderAttention`: notebook 08's `GroupedQueryAttention` (h query heads, h_kv key/value
  heads, its q_proj, k_proj, v_proj, out_proj), with notebook 10's `rope` on the queries and
  keys, notebook 08's `KVCache` (or notebook 11's `SinkKVCache`), and the attention itself a
  pluggable function (`mha_lib.llm.backends`);
- `DecoderBlock`, `DecoderLM`, `DecoderCache` (one cache per layer), `DecoderConfig` (the
  architecture's numbers, read from the file's metadata by `DecoderConfig.from_gguf`);
- `load_decoder(path)`, `load_smollm2()` -> (model, tokenizer).

RoPE and the rows of W_Q, W_K. llama.cpp's converter stores each head's rows of W_Q and W_K
permuted from transformers' half-split layout (pairs (i, i + d/2)) to adjacent pairs (2i, 2i + 1):
GGUF row j of a head is transformers' row `rope_permutation(d)[j]`. `load_decoder` undoes it by
default and rotates half-split pairs (`rope_interleaved=False`); with `rope_interleaved=True` it
keeps the file's rows and rotates adjacent pairs. The scores, and so the logits, are the same.

For notebook 13: `model(ids, need_weights=True)` returns (logits, weights), the (B, h, n, m)
attention weights of every layer; `head_mask` (L, h) scales each head's output (0 removes it);
`model.new_sink_cache(...)` decodes with notebook 11's rolling cache of sinks and a window
(keys cached before RoPE, rotated by their place in the cache, as StreamingLLM).
For notebook 14: `GGUFFile.read(name, rows=, cols=)` reads one shard of a matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..positions import rope, rope_permutation
from ..pytorch import merge_heads, split_heads
from .backends import AttentionFn, attention_weights, resolve_attention
from .gqa import GroupedQueryAttention, repeat_kv
from .kv_cache import DecoderCache, KVCache, SinkKVCache

__all__ = [
    "DecoderAttention",
    "DecoderBlock",
    "DecoderConfig",
    "DecoderLM",
    "RMSNorm",
    "SwiGLU",
]


# ---------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class DecoderConfig:
    """The numbers of a Llama-style decoder (notebook 00's notation in the comments)."""

    vocab_size: int  # V
    hidden_size: int  # C
    num_layers: int  # L
    num_heads: int  # h
    num_kv_heads: int  # h_kv
    head_dim: int  # d = d_k = d_v
    intermediate_size: int  # F, the SwiGLU's width
    rope_base: float
    rms_norm_eps: float
    context_length: int
    tie_embeddings: bool = True
    bos_token_id: int | None = None
    eos_token_id: int | None = None

    @classmethod
    def from_gguf(cls, f) -> DecoderConfig:
        """Read every number from the file's metadata (`{arch}.block_count`, ...)."""
        arch = f.value("general.architecture")
        if arch != "llama":
            raise ValueError(
                f"{f.path.name} holds a {arch!r} model; expected 'llama' (Llama, SmolLM2)"
            )
        C = int(f.value("llama.embedding_length"))
        h = int(f.value("llama.attention.head_count"))
        d = C // h
        rope_dim = int(f.value("llama.rope.dimension_count"))
        if rope_dim != d:
            raise ValueError(
                f"llama.rope.dimension_count = {rope_dim}; expected the head dimension {d} "
                "(partial rotary embeddings are not supported here)"
            )
        keys = f.keys()
        vocab = (
            int(f.value("llama.vocab_size"))
            if "llama.vocab_size" in keys
            else len(f.value("tokenizer.ggml.tokens"))
        )
        return cls(
            vocab_size=vocab,
            hidden_size=C,
            num_layers=int(f.value("llama.block_count")),
            num_heads=h,
            num_kv_heads=int(f.value("llama.attention.head_count_kv")),
            head_dim=d,
            intermediate_size=int(f.value("llama.feed_forward_length")),
            rope_base=float(f.value("llama.rope.freq_base")),
            rms_norm_eps=float(f.value("llama.attention.layer_norm_rms_epsilon")),
            context_length=int(f.value("llama.context_length")),
            tie_embeddings="output.weight" not in f.tensors,
            bos_token_id=_optional_int(f, "tokenizer.ggml.bos_token_id", keys),
            eos_token_id=_optional_int(f, "tokenizer.ggml.eos_token_id", keys),
        )


def _optional_int(f, key: str, keys: list[str]) -> int | None:
    return int(f.value(key)) if key in keys else None


# ---------------------------------------------------------------------------- the parts


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) · weight over the last axis (Zhang and Sennrich, 2019)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))  # (C,)
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)  # (..., 1)
        return self.weight * (x * rms)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) ∘ up(x)): a gated feed-forward network (Shazeer, 2020), C -> F -> C."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)  # (C -> F)
        self.up_proj = nn.Linear(dim, hidden, bias=False)  # (C -> F)
        self.down_proj = nn.Linear(hidden, dim, bias=False)  # (F -> C)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderAttention(GroupedQueryAttention):
    """Notebook 08's grouped-query attention with RoPE on q and k and a pluggable attention.

    forward(x (B, n, C), positions (n,), cache, attention, head_mask, weights) -> (B, n, C):
    x holds n new tokens at `positions`; their keys and values are appended to `cache` (a
    `KVCache`, or a `SinkKVCache` one token at a time), or, without a cache, the n tokens attend
    causally among themselves.
    """

    def __init__(self, config: DecoderConfig, rope_interleaved: bool = False) -> None:
        super().__init__(config.hidden_size, config.num_heads, config.num_kv_heads, bias=False)
        self.rope_base = config.rope_base
        self.rope_interleaved = rope_interleaved

    def _rope(self, x: Tensor, positions: Tensor) -> Tensor:
        return rope(x, positions, self.rope_base, interleaved=self.rope_interleaved)

    def forward(  # type: ignore[override]
        self,
        x: Tensor,
        positions: Tensor,
        cache: KVCache | SinkKVCache | None = None,
        attention: AttentionFn | None = None,
        head_mask: Tensor | None = None,
        weights: list[Tensor] | None = None,
    ) -> Tensor:
        h, h_kv = self.num_heads, self.num_kv_heads
        q = split_heads(self.q_proj(x), h)  # (B, h, n, d)
        k = split_heads(self.k_proj(x), h_kv)  # (B, h_kv, n, d)
        v = split_heads(self.v_proj(x), h_kv)  # (B, h_kv, n, d)
        if isinstance(cache, SinkKVCache):  # StreamingLLM: keys cached before RoPE
            cache.append(k, v)
            k, v = cache.keys_values()  # (B, h_kv, m, d), m <= S + W, in text order
            places = torch.arange(k.shape[2], device=x.device)  # their places in the cache
            q, k = self._rope(q, places[-1:]), self._rope(k, places)
        else:
            q, k = self._rope(q, positions), self._rope(k, positions)
            if cache is not None:
                k, v = cache.append(k, v)  # (B, h_kv, m, d): everything cached so far
        if weights is not None:  # written out, to keep the weights (B, h, n, m)
            w = attention_weights(q, k)
            weights.append(w)
            heads = w @ repeat_kv(v, h // h_kv)  # (B, h, n, d)
        else:
            heads = (attention or resolve_attention("sdpa"))(q, k, v)  # (B, h, n, d)
        if head_mask is not None:
            heads = heads * head_mask.view(1, h, 1, 1).to(heads.dtype)  # 0 removes a head
        return self.out_proj(merge_heads(heads))  # (B, n, C)


class DecoderBlock(nn.Module):
    """One pre-norm layer: x + attention(norm1(x)), then + mlp(norm2(x)) (notebook 04's form)."""

    def __init__(self, config: DecoderConfig, rope_interleaved: bool = False) -> None:
        super().__init__()
        self.norm1 = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = DecoderAttention(config, rope_interleaved)
        self.norm2 = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = SwiGLU(config.hidden_size, config.intermediate_size)

    def forward(self, x: Tensor, positions: Tensor, cache=None, attention=None,
                head_mask=None, weights=None) -> Tensor:  # fmt: skip
        x = x + self.self_attn(self.norm1(x), positions, cache, attention, head_mask, weights)
        return x + self.mlp(self.norm2(x))  # (B, n, C)


# ---------------------------------------------------------------------------- the model


class DecoderLM(nn.Module):
    """A Llama-style causal language model: embedding, L pre-norm blocks, norm, tied head.

    forward(input_ids (B, n), cache=None, *, attention=None, head_mask=None,
    need_weights=False, last_only=False) -> logits (B, n, V), or (logits, weights) with
    need_weights, weights a list of L tensors (B, h, n, m). Without a cache, the n tokens are
    positions 0 .. n - 1; with one, they follow the cached tokens. attention: a name of
    `backends.ATTENTIONS` or a function attention(q, k, v) -> o; by default the model's
    (`self.attention`, set at construction). head_mask (L, h): each head's output is scaled
    by its entry (0 ablates it). last_only: the logits of the last token only (B, 1, V).
    """

    def __init__(
        self,
        config: DecoderConfig,
        attention: str | AttentionFn = "sdpa",
        rope_interleaved: bool = False,
    ) -> None:
        super().__init__()
        self.config = config
        self.attention = resolve_attention(attention)
        self.rope_interleaved = rope_interleaved
        embed = torch.empty(config.vocab_size, config.hidden_size)  # (V, C)
        if embed.device.type != "meta":  # (on the meta device, initialising loads sympy)
            nn.init.normal_(embed)  # nn.Embedding's own initialisation
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size, _weight=embed)
        self.layers = nn.ModuleList(
            DecoderBlock(config, rope_interleaved) for _ in range(config.num_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        # tied: the output projection IS the embedding matrix (stored once)
        self.lm_head = (
            None
            if config.tie_embeddings
            else nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        )

    @property
    def output_weight(self) -> Tensor:
        """(V, C): the embedding itself when tied."""
        return self.embed.weight if self.lm_head is None else self.lm_head.weight

    def set_rope_layout(self, interleaved: bool) -> None:
        """Move every layer's rows of W_Q and W_K to the other RoPE layout, in place.

        interleaved=True: each head's rows as the GGUF file stores them, pairs (2i, 2i + 1);
        False: transformers' half-split pairs (i, i + d/2). The logits do not change.
        """
        if not isinstance(interleaved, bool):
            raise TypeError(f"interleaved must be a bool; got {type(interleaved).__name__}")
        if interleaved == self.rope_interleaved:
            return
        perm = rope_permutation(self.config.head_dim)  # half-split row perm[j] -> GGUF row j
        order = perm if interleaved else torch.argsort(perm)
        d = self.config.head_dim
        with torch.no_grad():
            for layer in self.layers:
                attn = layer.self_attn
                for proj in (attn.q_proj, attn.k_proj):
                    w = proj.weight  # (heads·d, C)
                    w.copy_(w.view(-1, d, w.shape[1])[:, order].reshape(w.shape))
                attn.rope_interleaved = interleaved
        self.rope_interleaved = interleaved

    def new_cache(self, batch_size: int, max_len: int) -> DecoderCache:
        """An empty KVCache per layer, for max_len tokens (prompt and generated)."""
        cfg, w = self.config, self.embed.weight
        if isinstance(max_len, int) and max_len > cfg.context_length:
            raise ValueError(
                f"max_len = {max_len} is longer than the model's context of "
                f"{cfg.context_length} tokens"
            )
        return DecoderCache([
            KVCache(batch_size, cfg.num_kv_heads, max_len, cfg.head_dim, dtype=w.dtype,
                    device=w.device)
            for _ in range(cfg.num_layers)
        ])  # fmt: skip

    def new_sink_cache(self, batch_size: int, window: int, num_sinks: int = 4) -> DecoderCache:
        """A rolling SinkKVCache per layer: the first num_sinks tokens and the last window."""
        cfg, w = self.config, self.embed.weight
        return DecoderCache([
            SinkKVCache(batch_size, cfg.num_kv_heads, cfg.head_dim, window, num_sinks,
                        dtype=w.dtype, device=w.device)
            for _ in range(cfg.num_layers)
        ])  # fmt: skip

    def forward(
        self,
        input_ids: Tensor,
        cache: DecoderCache | None = None,
        *,
        attention: str | AttentionFn | None = None,
        head_mask: Tensor | None = None,
        need_weights: bool = False,
        last_only: bool = False,
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        self._check(input_ids, cache, head_mask)
        n = input_ids.shape[1]
        start = 0 if cache is None else cache.length
        positions = torch.arange(start, start + n, device=input_ids.device)  # (n,)
        fn = self.attention if attention is None else resolve_attention(attention)
        weights: list[Tensor] | None = [] if need_weights else None
        x = self.embed(input_ids)  # (B, n, C)
        for l, layer in enumerate(self.layers):
            layer_cache = None if cache is None else cache.layers[l]
            mask = None if head_mask is None else head_mask[l]
            x = layer(x, positions, layer_cache, fn, mask, weights)
        if last_only:
            x = x[:, -1:]  # (B, 1, C)
        logits = F.linear(self.norm(x), self.output_weight)  # (B, n, V)
        return (logits, weights) if need_weights else logits

    def _check(self, ids, cache, head_mask) -> None:
        """Raise, naming the argument, before anything (the cache above all) is changed."""
        cfg = self.config
        if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.is_floating_point():
            got = (
                f"a {ids.dtype} tensor of shape {tuple(ids.shape)}"
                if isinstance(ids, Tensor)
                else type(ids).__name__
            )
            raise TypeError(f"input_ids is {got}; expected an integer tensor (B, n)")
        if ids.dtype == torch.bool or ids.shape[1] < 1:
            raise ValueError(f"input_ids has shape {tuple(ids.shape)}; expected (B, n), n >= 1")
        bad = (ids < 0) | (ids >= cfg.vocab_size)
        if bad.any():
            where = tuple(int(i) for i in bad.nonzero()[0])
            raise ValueError(
                f"input_ids holds {int(ids[where])} at {where}; expected token ids in "
                f"[0, {cfg.vocab_size})"
            )
        n = ids.shape[1]
        if cache is None:
            if n > cfg.context_length:
                raise ValueError(
                    f"input_ids has {n} tokens; the model's context is {cfg.context_length}"
                )
        else:
            if not isinstance(cache, DecoderCache) or len(cache.layers) != cfg.num_layers:
                raise TypeError(
                    f"cache must be a DecoderCache of {cfg.num_layers} layers "
                    "(model.new_cache or model.new_sink_cache)"
                )
            first = cache.layers[0]
            if first.k.shape[0] != ids.shape[0]:
                raise ValueError(
                    f"input_ids has batch {ids.shape[0]}; the cache was made for {first.k.shape[0]}"
                )
            if cache.rolling and n != 1:
                raise ValueError(
                    f"input_ids has {n} tokens; a sink cache takes one token at a time"
                )
            if not cache.rolling:
                end = cache.length + n
                if end > cfg.context_length:
                    raise ValueError(
                        f"{cache.length} cached + {n} new tokens = {end} is longer than the "
                        f"model's context of {cfg.context_length} tokens"
                    )
                if end > first.max_len:
                    raise ValueError(
                        f"{cache.length} cached + {n} new tokens = {end} do not fit the cache's "
                        f"max_len = {first.max_len}"
                    )
        if head_mask is not None:
            shape = (cfg.num_layers, cfg.num_heads)
            if not isinstance(head_mask, Tensor) or tuple(head_mask.shape) != shape:
                got = tuple(head_mask.shape) if isinstance(head_mask, Tensor) else head_mask
                raise ValueError(f"head_mask has shape {got}; expected (L, h) = {shape}")
