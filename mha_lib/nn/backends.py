"""The attention functions a `DecoderLM` can run: the series' attentions, plugged into a real model.

Derived in notebook 12. Inside every layer the model computes the queries, keys and values,
rotates them (RoPE), stores them in the cache, and then calls ONE function:

    attention(q, k, v) -> o,   q (B, h, n, d), k and v (B, h_kv, m, d), o (B, h, n, d)

with h_kv dividing h (grouped-query attention: query head i uses key/value head i // (h/h_kv)).
The n queries are the LAST n of the m tokens whose keys are given (n = m for a prompt without a
cache, n = 1 for a decoding step): query i sees keys 0 .. m - n + i, the causal mask aligned to
the bottom right (notebook 08).

Later models change that attention a little, and a layer tells the function so by keywords,
passed only when the layer has them (so that any function of (q, k, v) serves a Llama), each
derived in notebook 15:
- `window=W`: a sliding-window layer (Gemma 2 and 3, gpt-oss): query i sees only keys
  m - n + i - W < j <= m - n + i, passed when some query would otherwise see more (m > W);
- `score_mod=f`: every score s changed to f(s, b, h, q_idx, kv_idx) before the mask, a
  FlexAttention score_mod (Gemma 2's soft-capping, `masks.softcap_score_mod`);
- `sink_logits=s`: (h,) a learned logit per head joining every row's softmax with no value
  (gpt-oss): its weight is taken from the keys and dropped.
A function that cannot compute one says so (a ValueError naming it) rather than ignore it.

Any function of this form can be plugged in, by name:

- "sdpa", `sdpa_attention` (`mha_lib.nn.gqa`): torch's fused `scaled_dot_product_attention`,
  the default;
- "eager", `eager_attention`: the definition written out, through notebook 08's
  `grouped_query_attention`;
- "flash", `tiled_flash_attention`: notebook 08's tiled FlashAttention loop in plain torch
  (`mha_lib.nn.flash.flash_attention`, with the bottom-right causal `mask_mod`);
- "triton": notebook 09's Triton kernel, a part's (`mha_lib.efficient.triton_flash`, wrapped by
  `mha_lib.llm.triton_attention`), which this layer never imports: `PARTS_ATTENTIONS` names it
  by the module that holds it, imported when the name is first asked for, in any process.
`ATTENTIONS` holds this layer's functions and any a learner adds (`register_attention`);
`resolve_attention` looks a name up there, then in `PARTS_ATTENTIONS`, for
`DecoderLM(attention=...)`. "sdpa" computes a window with a mask
and hands a score_mod or sink logits to the written-out form; the tiled loop takes a window (a
`mask_mod`) and neither of the others. `attention_weights(q, k, **options)` gives the
(B, h, n, m) weights the written-out form computes, and `RecordWeights` is an attention function
that keeps them, one tensor per layer: how a model returns its weights (notebook 13 studies
them) without a list passed through every layer.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from torch import Tensor

from .flash import flash_attention
from .gqa import grouped_query_attention, grouped_weights, repeat_kv, sdpa_attention
from .masks import (
    bottom_right_causal_mask_mod,
    bottom_right_causal_tensor,
    bottom_right_window_mask_mod,
    bottom_right_window_tensor,
)

__all__ = [
    "ATTENTIONS",
    "PARTS_ATTENTIONS",
    "RecordWeights",
    "attention_names",
    "attention_weights",
    "eager_attention",
    "register_attention",
    "resolve_attention",
    "sdpa_attention",
    "tiled_flash_attention",
]

AttentionFn = Callable[..., Tensor]  # attention(q, k, v, **options) -> o


def _mask(q: Tensor, k: Tensor, window: int | None) -> Tensor:
    """(n, m): the bottom-right causal mask, within the window when there is one."""
    n, m = q.shape[2], k.shape[2]
    if window is None:
        return bottom_right_causal_tensor(n, m, q.device)
    return bottom_right_window_tensor(n, m, window, q.device)


def attention_weights(
    q: Tensor,
    k: Tensor,
    *,
    window: int | None = None,
    score_mod=None,
    sink_logits: Tensor | None = None,
) -> Tensor:
    """softmax(q kᵀ / √d) under the bottom-right causal mask (B, h, n, m): rows sum to 1, or to
    less with sink logits (the sink's share is not a key's)."""
    return grouped_weights(q, k, _mask(q, k, window), score_mod=score_mod, sink_logits=sink_logits)


def eager_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    window: int | None = None,
    score_mod=None,
    sink_logits: Tensor | None = None,
) -> Tensor:
    """Notebook 08's `grouped_query_attention`, the weights written out."""
    return grouped_query_attention(
        q, k, v, _mask(q, k, window), score_mod=score_mod, sink_logits=sink_logits
    )


class RecordWeights:
    """The written-out attention, keeping its weights: each call appends the (B, h, n, m)
    weights it used to `weights` (a model's layers call it in order: one tensor per layer)."""

    def __init__(self) -> None:
        self.weights: list[Tensor] = []

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, **options) -> Tensor:
        w = attention_weights(q, k, **options)  # (B, h, n, m)
        self.weights.append(w)
        return w @ repeat_kv(v, q.shape[1] // k.shape[1])  # (B, h, n, d)


def tiled_flash_attention(
    q: Tensor, k: Tensor, v: Tensor, *, window: int | None = None, **options
) -> Tensor:
    """Notebook 08's tiled FlashAttention loop (blocks of 64), key/value heads repeated; a
    window is its mask_mod (tiles outside the band are skipped)."""
    if options:
        raise ValueError(
            f"the tiled loop takes a window only; got {sorted(options)}: use attention='eager'"
        )
    g = q.shape[1] // k.shape[1]
    n, m = q.shape[2], k.shape[2]
    if window is None:
        mask_mod = bottom_right_causal_mask_mod(n, m)
    else:
        mask_mod = bottom_right_window_mask_mod(n, m, window)
    o, _ = flash_attention(q, repeat_kv(k, g), repeat_kv(v, g), mask_mod=mask_mod)
    return o  # (B, h, n, d)


ATTENTIONS: dict[str, AttentionFn] = {
    "sdpa": sdpa_attention,
    "eager": eager_attention,
    "flash": tiled_flash_attention,
}

# the parts' attention functions, by name -> (module, function): imported on first use, so that a
# name works in a fresh process and this layer imports no part (the triton module imports triton)
PARTS_ATTENTIONS: dict[str, tuple[str, str]] = {
    "triton": ("mha_lib.llm.triton_attention", "triton_flash_attention"),
}


def attention_names() -> list[str]:
    """Every name `resolve_attention` knows: this layer's, the learner's and the parts'."""
    return sorted(set(ATTENTIONS) | set(PARTS_ATTENTIONS))


def resolve_attention(attention: str | AttentionFn) -> AttentionFn:
    """A name of `attention_names()` or a function attention(q, k, v, **options) -> o, as a
    function."""
    if isinstance(attention, str):
        if attention in ATTENTIONS:
            return ATTENTIONS[attention]
        if attention in PARTS_ATTENTIONS:
            module, name = PARTS_ATTENTIONS[attention]
            return getattr(importlib.import_module(module), name)
        raise ValueError(f"attention = {attention!r}; expected one of {attention_names()}")
    if not callable(attention):
        raise TypeError(
            f"attention must be a name of {attention_names()} or a function "
            f"attention(q, k, v) -> o; got {type(attention).__name__}"
        )
    return attention


def register_attention(name: str, fn: AttentionFn) -> None:
    """Make `fn`, a function attention(q, k, v) -> o of the form above, available by name."""
    if not isinstance(name, str) or not callable(fn):
        raise TypeError("register_attention takes a name (str) and a function attention(q, k, v)")
    ATTENTIONS[name] = fn
