"""The attention functions a `DecoderLM` can run: the series' attentions, plugged into a real model.

Derived in notebook 12. Inside every layer the model computes the queries, keys and values,
rotates them (RoPE), stores them in the cache, and then calls ONE function:

    attention(q, k, v) -> o,   q (B, h, n, d), k and v (B, h_kv, m, d), o (B, h, n, d)

with h_kv dividing h (grouped-query attention: query head i uses key/value head i // (h/h_kv)).
The n queries are the LAST n of the m tokens whose keys are given (n = m for a prompt without a
cache, n = 1 for a decoding step): query i sees keys 0 .. m - n + i, the causal mask aligned to
the bottom right (notebook 08). Any function of this form can be plugged in:

- `sdpa_attention`: torch's fused `scaled_dot_product_attention` (the default);
- `eager_attention`: the definition written out, through notebook 08's
  `grouped_query_attention`; `attention_weights(q, k)` returns its (B, h, n, m) weights, what
  notebook 13 studies;
- `flash_attention_08`: notebook 08's tiled FlashAttention loop in plain torch
  (`mha_lib.efficient.flash.flash_attention`, with the bottom-right causal `mask_mod`);
- "triton": notebook 09's Triton kernel, a part's (`mha_lib.efficient.triton_flash`), which this
  layer does not import: `mha_lib.llm` registers it (`register_attention`).
`ATTENTIONS` names them ("sdpa", "eager", "flash", and "triton" once registered), for
`DecoderLM(attention=...)`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from .flash import flash_attention
from .gqa import grouped_query_attention, repeat_kv
from .masks import bottom_right_causal_mask_mod

__all__ = [
    "ATTENTIONS",
    "attention_weights",
    "bottom_right_mask",
    "eager_attention",
    "flash_attention_08",
    "register_attention",
    "resolve_attention",
    "sdpa_attention",
]

AttentionFn = Callable[[Tensor, Tensor, Tensor], Tensor]


def bottom_right_mask(n: int, m: int, device=None) -> Tensor:
    """(n, m) bool, True = may attend: query i (token m - n + i) sees keys 0 .. m - n + i."""
    return torch.ones(n, m, dtype=torch.bool, device=device).tril(m - n)


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """torch's fused attention, the query heads grouped over the key/value heads."""
    n, m = q.shape[2], k.shape[2]
    gqa = q.shape[1] != k.shape[1]
    if n == 1:  # one new token, the last: it sees every key
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
    if n == m:  # a whole prompt: the plain causal mask
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    mask = bottom_right_mask(n, m, q.device)  # (n, m)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)


def attention_weights(q: Tensor, k: Tensor) -> Tensor:
    """softmax(q kᵀ / √d) under the bottom-right causal mask: (B, h, n, m), rows sum to 1."""
    g = q.shape[1] // k.shape[1]
    scores = q @ repeat_kv(k, g).transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, h, n, m)
    mask = bottom_right_mask(q.shape[2], k.shape[2], q.device)  # (n, m)
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


def eager_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Notebook 08's `grouped_query_attention`, the weights written out."""
    mask = bottom_right_mask(q.shape[2], k.shape[2], q.device)  # (n, m)
    return grouped_query_attention(q, k, v, mask=mask)


def flash_attention_08(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Notebook 08's tiled FlashAttention loop (blocks of 64), key/value heads repeated."""
    g = q.shape[1] // k.shape[1]
    mask_mod = bottom_right_causal_mask_mod(q.shape[2], k.shape[2])
    o, _ = flash_attention(q, repeat_kv(k, g), repeat_kv(v, g), mask_mod=mask_mod)
    return o  # (B, h, n, d)


ATTENTIONS: dict[str, AttentionFn] = {
    "sdpa": sdpa_attention,
    "eager": eager_attention,
    "flash": flash_attention_08,
}  # and "triton", notebook 09's kernel, which `mha_lib.llm` registers (it imports triton)


def resolve_attention(attention: str | AttentionFn) -> AttentionFn:
    """A name of `ATTENTIONS` or a function attention(q, k, v) -> o, as a function."""
    if isinstance(attention, str):
        if attention not in ATTENTIONS:
            raise ValueError(f"attention = {attention!r}; expected one of {sorted(ATTENTIONS)}")
        return ATTENTIONS[attention]
    if not callable(attention):
        raise TypeError(
            f"attention must be a name of {sorted(ATTENTIONS)} or a function "
            f"attention(q, k, v) -> o; got {type(attention).__name__}"
        )
    return attention


def register_attention(name: str, fn: AttentionFn) -> None:
    """Make `fn`, a function attention(q, k, v) -> o of the form above, available by name."""
    if not isinstance(name, str) or not callable(fn):
        raise TypeError("register_attention takes a name (str) and a function attention(q, k, v)")
    ATTENTIONS[name] = fn
