"""A rolling key/value cache: the first S tokens ("sinks") and the last W tokens, nothing else.

Derived in notebook 11, beside notebook 08's `KVCache`. Mistral and Gemma-2 attend within a
sliding window of W tokens, so a decoder needs to keep only the last W keys and values;
StreamingLLM (Xiao et al. 2023) showed that models trained with full attention also need the
first few tokens, on which they park attention weight, and kept S of them: the memory stays
S + W slots however long the sequence grows.

Token t (0-based) lives in slot `slot_of(t, S, W)`: t while t < S, then S + (t - S) mod W, a
ring over the W window slots; a new token overwrites the oldest window token. Decoding token t
with this cache equals full attention under the mask `sink_window_mask` (notebook 08's sliding
window plus the sink columns), which tests/efficient/test_sink_cache.py checks.

Positions: StreamingLLM stores keys before RoPE and rotates them by their place in the cache
(0 .. len - 1), not by their place in the text, so the positions a model sees never exceed
S + W. `SinkKVCache.positions()` gives the tokens' text positions, `cache_positions()` those
places.

What it holds:
- `slot_of(t, num_sinks, window)`: the index arithmetic;
- `sink_window_mask(N, window, num_sinks)`: the numpy mask (True = may attend);
- `SinkKVCache(batch_size, num_kv_heads, head_dim, window, num_sinks)`: `append` one token,
  `keys_values()` in text order, `positions()`, `cache_positions()`, `len()`, `nbytes`;
- `sink_cached_attention(q, k_new, v_new, cache)`: one decoding step.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .._checks import check_int
from .masks import sliding_window_mask

__all__ = ["SinkKVCache", "sink_cached_attention", "sink_window_mask", "slot_of"]


def slot_of(t: int, num_sinks: int, window: int) -> int:
    """The slot of token t in a cache of num_sinks sinks and a ring of window slots."""
    if t < num_sinks:
        return t
    return num_sinks + (t - num_sinks) % window


def sink_window_mask(N: int, window: int, num_sinks: int) -> np.ndarray:
    """(N, N) bool: query i sees keys i - window < j <= i, and the sinks j < num_sinks, j <= i."""
    check_int(num_sinks, "num_sinks", 0)
    j = np.arange(N)[None, :]
    causal = np.tril(np.ones((N, N), dtype=bool))
    return sliding_window_mask(N, window) | (causal & (j < num_sinks))


class SinkKVCache:
    """Keys and values of the first num_sinks tokens and the last window tokens.

    Preallocated k, v (B, h_kv, S + W, d): memory fixed at 2·B·h_kv·(S + W)·d numbers.
    """

    def __init__(
        self,
        batch_size: int,
        num_kv_heads: int,
        head_dim: int,
        window: int,
        num_sinks: int = 4,
        *,
        dtype: torch.dtype = torch.float32,
        device=None,
    ) -> None:
        B = check_int(batch_size, "batch_size", 1)
        h_kv = check_int(num_kv_heads, "num_kv_heads", 1)
        d = check_int(head_dim, "head_dim", 1)
        self.window = check_int(window, "window", 1)
        self.num_sinks = check_int(num_sinks, "num_sinks", 0)
        slots = self.num_sinks + self.window
        self.k = torch.zeros(B, h_kv, slots, d, dtype=dtype, device=device)  # (B, h_kv, S+W, d)
        self.v = torch.zeros(B, h_kv, slots, d, dtype=dtype, device=device)
        self.seen = 0  # tokens appended so far (the next token's text position)

    def __len__(self) -> int:
        return min(self.seen, self.num_sinks + self.window)

    @property
    def nbytes(self) -> int:
        """Bytes held by the two tensors: fixed, whatever the number of tokens seen."""
        return self.k.untyped_storage().nbytes() + self.v.untyped_storage().nbytes()

    def positions(self) -> list[int]:
        """The text positions of the cached tokens, in text order (sinks first)."""
        S, W, t = self.num_sinks, self.window, self.seen
        sinks = list(range(min(S, t)))
        return sinks + list(range(max(S, t - W), t))

    def cache_positions(self) -> list[int]:
        """StreamingLLM's positions: each cached token's place in the cache, 0 .. len - 1."""
        return list(range(len(self)))

    def order(self) -> list[int]:
        """The slots of the cached tokens, in text order."""
        return [slot_of(t, self.num_sinks, self.window) for t in self.positions()]

    def append(self, k_new: Tensor, v_new: Tensor) -> None:
        """Store the keys and values (B, h_kv, 1, d) of the next token, evicting the oldest
        window token once the cache is full."""
        B, h_kv, _, d = self.k.shape
        for name, x in (("k_new", k_new), ("v_new", v_new)):
            if not isinstance(x, Tensor) or tuple(x.shape) != (B, h_kv, 1, d):
                got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
                raise ValueError(
                    f"{name} has shape {got}; expected (B, h_kv, 1, d) = {(B, h_kv, 1, d)}: "
                    "one token at a time (a chunk would evict keys its own first queries need)"
                )
        s = slot_of(self.seen, self.num_sinks, self.window)
        self.k[:, :, s] = k_new[:, :, 0]
        self.v[:, :, s] = v_new[:, :, 0]
        self.seen += 1

    def keys_values(self) -> tuple[Tensor, Tensor]:
        """k, v (B, h_kv, len, d) of the cached tokens, in text order."""
        idx = torch.tensor(self.order(), device=self.k.device)
        return self.k[:, :, idx], self.v[:, :, idx]


def sink_cached_attention(q: Tensor, k_new: Tensor, v_new: Tensor, cache: SinkKVCache) -> Tensor:
    """Append one token's k_new, v_new (B, h_kv, 1, d), then its query q (B, h, 1, d) attends to
    every cached token (sinks and window; all are in its past). Returns (B, h, 1, d)."""
    if not isinstance(q, Tensor) or q.dim() != 4 or q.shape[2] != 1:
        got = tuple(q.shape) if isinstance(q, Tensor) else type(q).__name__
        raise ValueError(f"q has shape {got}; expected (B, h, 1, d): one token at a time")
    cache.append(k_new, v_new)
    k, v = cache.keys_values()  # (B, h_kv, len, d)
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=q.shape[1] != k.shape[1])
