"""The mask zoo: which keys each query may attend to, in three equivalent forms.

Derived in notebook 08. Each mask is written
- as a numpy boolean array (N, M), True = may attend: the series' convention,
  and also what `F.scaled_dot_product_attention` takes as a bool `attn_mask`
  (`torch.from_numpy(mask)`);
- as a FlexAttention `mask_mod(b, h, q_idx, kv_idx) -> bool` (True = may
  attend), a function of index tensors; `mask_from_mask_mod` evaluates one on
  the whole (N, M) grid, and `flash.flash_attention(mask_mod=...)` one tile at
  a time.
ALiBi is not a mask but a bias added to the scores: `alibi_bias` (numpy, to
add to the scores or pass to SDPA as a float `attn_mask`) and
`alibi_score_mod` (FlexAttention `score_mod`).

The masks: causal for a chunk of n queries against m cached keys
(`bottom_right_causal_mask`; `mha_lib.causal_mask` is the square case; the torch tensor
`bottom_right_causal_tensor`, what a decoding step passes to SDPA),
sliding window (`bottom_right_window_tensor` for a chunk against a cache: a sliding-window
layer's mask, notebook 15), the window with sinks (notebook 11's rolling cache,
`sink_window_mask`), document (block-diagonal for packed sequences), prefix-LM.
Soft-capping (Gemma 2) is not a mask but a change of every score, c·tanh(s/c):
`softcap_score_mod`, a FlexAttention `score_mod` (notebook 15).
`leaks_future` tests causality by perturbing the future, with no reference.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from .._checks import check_int

__all__ = [
    "alibi_bias",
    "alibi_score_mod",
    "alibi_slopes",
    "bottom_right_causal_mask",
    "bottom_right_causal_mask_mod",
    "bottom_right_causal_tensor",
    "bottom_right_window_mask_mod",
    "bottom_right_window_tensor",
    "causal_mask_mod",
    "document_mask",
    "document_mask_mod",
    "leaks_future",
    "mask_from_mask_mod",
    "prefix_lm_mask",
    "prefix_lm_mask_mod",
    "sink_window_mask",
    "sliding_window_mask",
    "sliding_window_mask_mod",
    "softcap_score_mod",
]


# ----------------------------------------------------------------------------
# numpy boolean masks, True = may attend


def _check_chunk(n, m) -> None:
    """n queries of a chunk against m keys: both positive integers, n <= m."""
    check_int(n, "n", 1, numpy=True)
    check_int(m, "m", 1, numpy=True)
    if n > m:
        raise ValueError(
            f"n = {n} queries but only m = {m} keys; expected n <= m (the chunk's own keys "
            "are in the cache)"
        )


def bottom_right_causal_mask(n: int, m: int) -> np.ndarray:
    """(n, m) causal mask for the LAST n of m tokens: query i sits at position m - n + i.

    A chunk of n new queries attends to a cache of m keys (the chunk's own
    keys included, n <= m): query i sees keys 0 .. m - n + i. With n = m it is
    the square causal mask `mha_lib.causal_mask(n)`. The top-left aligned
    `np.tril(np.ones((n, m)))` (what SDPA's is_causal=True uses when n != m)
    would let query i see only keys 0 .. i: wrong for a chunk after a cache.
    """
    _check_chunk(n, m)
    return np.tril(np.ones((n, m), dtype=bool), k=m - n)  # (n, m)


def bottom_right_causal_tensor(n: int, m: int, device=None) -> Tensor:
    """`bottom_right_causal_mask(n, m)` as a torch bool tensor (n, m) on `device`, True = may
    attend (what SDPA takes as attn_mask): query i, the token m - n + i, sees keys 0 .. m - n + i.
    Made by the decoding steps (`kv_cache.cached_attention`, `backends`) for each chunk."""
    return torch.ones(n, m, dtype=torch.bool, device=device).tril(m - n)  # (n, m)


def bottom_right_window_tensor(n: int, m: int, window: int, device=None) -> Tensor:
    """(n, m) torch bool, True = may attend: the LAST n of m tokens in a sliding window of
    `window` keys, query i (the token m - n + i) seeing keys m - n + i - window < j <= m - n + i.
    With n = m it is `sliding_window_mask(n, window)`; what a sliding-window layer passes to SDPA
    for a prompt longer than its window (notebook 15)."""
    _check_chunk(n, m)
    check_int(window, "window", 1, numpy=True)
    ones = torch.ones(n, m, dtype=torch.bool, device=device)
    return ones.tril(m - n).triu(m - n - window + 1)  # (n, m)


def sliding_window_mask(N: int, window: int) -> np.ndarray:
    """(N, N) causal sliding window: query i sees keys i - window + 1 .. i (window keys)."""
    check_int(N, "N", 1, numpy=True)
    check_int(window, "window", 1, numpy=True)
    i = np.arange(N)[:, None]  # (N, 1) query positions
    j = np.arange(N)[None, :]  # (1, N) key positions
    return (j <= i) & (i - j < window)  # (N, N)


def sink_window_mask(N: int, window: int, num_sinks: int) -> np.ndarray:
    """(N, N) bool: query i sees keys i - window < j <= i, and the sinks j < num_sinks, j <= i."""
    check_int(num_sinks, "num_sinks", 0, numpy=True)
    j = np.arange(N)[None, :]
    causal = np.tril(np.ones((N, N), dtype=bool))
    return sliding_window_mask(N, window) | (causal & (j < num_sinks))


def document_mask(doc_ids) -> np.ndarray:
    """(N, N) block-diagonal mask for packed sequences: a token sees its own document only.

    doc_ids (N,) ints: the document each token belongs to. Combine with a
    causal mask (`&`) for packed causal language modelling.
    """
    doc_ids = np.asarray(doc_ids)
    if doc_ids.ndim != 1 or doc_ids.size == 0 or not np.issubdtype(doc_ids.dtype, np.integer):
        raise TypeError(
            f"doc_ids must be a non-empty 1-D array of ints (N,); got shape {doc_ids.shape} "
            f"and dtype {doc_ids.dtype}"
        )
    return doc_ids[:, None] == doc_ids[None, :]  # (N, N)


def prefix_lm_mask(N: int, prefix_len: int) -> np.ndarray:
    """(N, N) prefix-LM mask: every query sees the whole prefix, and the rest causally."""
    check_int(N, "N", 1, numpy=True)
    check_int(prefix_len, "prefix_len", 0, numpy=True)
    if prefix_len > N:
        raise ValueError(f"prefix_len must lie in [0, N] with N = {N}; got {prefix_len}")
    i = np.arange(N)[:, None]  # (N, 1)
    j = np.arange(N)[None, :]  # (1, N)
    return (j <= i) | (j < prefix_len)  # (N, N)


def alibi_slopes(num_heads: int) -> np.ndarray:
    """(h,) ALiBi slopes, one per head, by the rule of Press et al. ("Train Short, Test Long").

    For h a power of two the slopes are the geometric sequence 2^(-8k/h),
    k = 1..h. Otherwise take the h' slopes of the largest power of two h' < h
    and append every other slope (the 1st, 3rd, ...) of the rule for 2h' until
    there are h: h = 6 gives [2^-2, 2^-4, 2^-6, 2^-8] and then [2^-1, 2^-3].
    """
    h = check_int(num_heads, "num_heads", 1, numpy=True)
    p = 1 << (h.bit_length() - 1)  # the largest power of two <= h

    def geometric(n: int) -> np.ndarray:
        return 2.0 ** (-8.0 * np.arange(1, n + 1) / n)  # (n,)

    if p == h:
        return geometric(h)  # (h,)
    return np.concatenate([geometric(p), geometric(2 * p)[0::2][: h - p]])  # (h,)


def alibi_bias(N: int, M: int, num_heads: int) -> np.ndarray:
    """(h, N, M) ALiBi bias slope_h · (j - i), added to the scores: 0 on the diagonal,
    more negative the further back key j lies. Used with the causal mask (keys j > i blocked).
    """
    check_int(N, "N", 1, numpy=True)
    check_int(M, "M", 1, numpy=True)
    i = np.arange(N)[:, None]  # (N, 1)
    j = np.arange(M)[None, :]  # (1, M)
    return alibi_slopes(num_heads)[:, None, None] * (j - i)  # (h, N, M)


# ----------------------------------------------------------------------------
# FlexAttention forms: functions of (batch, head, query index, key index) tensors


def causal_mask_mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    """Causal, aligned to the top left: query q_idx may attend to keys kv_idx <= q_idx."""
    return q_idx >= kv_idx


def bottom_right_causal_mask_mod(n: int, m: int) -> Callable:
    """The mask_mod of `bottom_right_causal_mask(n, m)`: query q_idx sits at m - n + q_idx."""
    _check_chunk(n, m)
    offset = m - n

    def mask_mod(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + offset

    return mask_mod


def sliding_window_mask_mod(window: int) -> Callable:
    """The mask_mod of `sliding_window_mask(N, window)`."""
    check_int(window, "window", 1, numpy=True)

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (q_idx - kv_idx < window)

    return mask_mod


def bottom_right_window_mask_mod(n: int, m: int, window: int) -> Callable:
    """The mask_mod of `bottom_right_window_tensor(n, m, window)`."""
    _check_chunk(n, m)
    check_int(window, "window", 1, numpy=True)
    offset = m - n

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx + offset) & (q_idx + offset - kv_idx < window)

    return mask_mod


def document_mask_mod(doc_ids: Tensor) -> Callable:
    """The mask_mod of `document_mask(doc_ids)`; doc_ids (N,) int tensor."""
    if not isinstance(doc_ids, Tensor) or doc_ids.dim() != 1 or doc_ids.is_floating_point():
        raise TypeError("doc_ids must be a 1-D integer torch.Tensor (N,)")

    def mask_mod(b, h, q_idx, kv_idx):
        return doc_ids[q_idx] == doc_ids[kv_idx]

    return mask_mod


def prefix_lm_mask_mod(prefix_len: int) -> Callable:
    """The mask_mod of `prefix_lm_mask(N, prefix_len)`."""
    check_int(prefix_len, "prefix_len", 0, numpy=True)

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) | (kv_idx < prefix_len)

    return mask_mod


def alibi_score_mod(num_heads: int) -> Callable:
    """The score_mod adding `alibi_bias`: score + slope_h · (kv_idx - q_idx)."""
    slopes = torch.from_numpy(alibi_slopes(num_heads))  # (h,) float64

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes.to(score.dtype)[h] * (kv_idx - q_idx)

    return score_mod


def softcap_score_mod(cap: float) -> Callable:
    """The score_mod of Gemma 2's soft-capping: score -> cap · tanh(score / cap). Close to the
    identity for |score| much below cap, never beyond ±cap: one huge score can no longer take
    all of a row's weight. (Its final logits are capped the same way.)"""
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not cap > 0:
        raise ValueError(f"cap = {cap!r}; expected a positive number")

    def score_mod(score, b, h, q_idx, kv_idx):
        return torch.tanh(score / cap) * cap

    return score_mod


def mask_from_mask_mod(mask_mod: Callable, N: int, M: int) -> Tensor:
    """Evaluate a mask_mod on every (query, key) pair: (N, M) bool tensor, True = may attend."""
    check_int(N, "N", 1, numpy=True)
    check_int(M, "M", 1, numpy=True)
    zero = torch.tensor(0)
    q_idx = torch.arange(N)[:, None]  # (N, 1)
    kv_idx = torch.arange(M)[None, :]  # (1, M)
    return mask_mod(zero, zero, q_idx, kv_idx).expand(N, M).to(torch.bool)  # (N, M)


# ----------------------------------------------------------------------------
# a causality test that needs no reference


def leaks_future(attend: Callable[[Tensor], Tensor], x: Tensor, seed: int = 0) -> bool:
    """True if some output at position t changes when only tokens after t change.

    attend maps x (B, N, C) to outputs (B, N, ...). For each t, the tokens
    t+1 .. N-1 are replaced by random ones (seeded); a causal `attend` keeps
    outputs 0 .. t unchanged (to float precision).
    """
    if not isinstance(x, Tensor) or x.dim() != 3:
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x has shape {got}; expected (B, N, C)")
    gen = torch.Generator().manual_seed(seed)
    out = attend(x)  # (B, N, ...)
    N = x.shape[1]
    for t in range(N - 1):
        x2 = x.clone()
        noise = torch.randn(x2[:, t + 1 :].shape, generator=gen, dtype=x.dtype)
        x2[:, t + 1 :] = noise.to(x.device)  # (B, N - t - 1, C): a different future
        if not torch.allclose(attend(x2)[:, : t + 1], out[:, : t + 1], rtol=1e-5, atol=1e-6):
            return True
    return False
