"""A key/value cache for generation, and one causal attention step that uses it.

Derived in notebook 08. When a model generates token by token, the keys and
values of the tokens already seen never change (causal attention: earlier
tokens do not see later ones). `KVCache` keeps them, so a decoding step
projects only the new token(s) and attends to the cache: O(N) work per
token instead of recomputing all N tokens, at the price of memory
2·B·h_kv·N·d numbers per layer, kept for the whole generation.

What it holds:
- `KVCache(batch_size, num_kv_heads, max_len, head_dim)`: preallocated
  k, v (B, h_kv, max_len, d); `append` writes the new keys and values after
  the `length` already stored and returns views of everything stored;
- `cached_attention(q, k_new, v_new, cache)`: append, then attend with the
  causal mask aligned to the bottom right (a chunk of n queries is the LAST
  n of the m cached tokens), the query heads grouped over the key/value heads.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .._checks import check_int

__all__ = ["KVCache", "cached_attention"]


class KVCache:
    """Keys and values of the first `length` tokens, in preallocated (B, h_kv, max_len, d)."""

    def __init__(
        self,
        batch_size: int,
        num_kv_heads: int,
        max_len: int,
        head_dim: int,
        *,
        dtype: torch.dtype = torch.float32,
        device=None,
    ) -> None:
        B = check_int(batch_size, "batch_size", 1)
        h_kv = check_int(num_kv_heads, "num_kv_heads", 1)
        self.max_len = check_int(max_len, "max_len", 1)
        d = check_int(head_dim, "head_dim", 1)
        self.k = torch.zeros(
            B, h_kv, self.max_len, d, dtype=dtype, device=device
        )  # (B, h_kv, T, d)
        self.v = torch.zeros(
            B, h_kv, self.max_len, d, dtype=dtype, device=device
        )  # (B, h_kv, T, d)
        self.length = 0  # tokens stored so far

    @property
    def nbytes(self) -> int:
        """Bytes held by the cache's two tensors (allocated for max_len tokens)."""
        return self.k.untyped_storage().nbytes() + self.v.untyped_storage().nbytes()

    def append(self, k_new: Tensor, v_new: Tensor) -> tuple[Tensor, Tensor]:
        """Store k_new, v_new (B, h_kv, n, d) after the cached tokens.

        Returns views k, v (B, h_kv, length, d) of all tokens stored so far
        (the new ones last).
        """
        B, h_kv, _, d = self.k.shape
        for name, x in (("k_new", k_new), ("v_new", v_new)):
            if not isinstance(x, Tensor):
                raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
            if x.dim() != 4 or (x.shape[0], x.shape[1], x.shape[3]) != (B, h_kv, d):
                raise ValueError(
                    f"{name} has shape {tuple(x.shape)}; expected (B, h_kv, n, d) with "
                    f"B = {B}, h_kv = {h_kv}, d = {d} (the cache's)"
                )
        n = k_new.shape[2]
        if v_new.shape[2] != n:
            raise ValueError(f"k_new has {n} tokens but v_new has {v_new.shape[2]}")
        if self.length + n > self.max_len:
            raise ValueError(
                f"the cache holds {self.length} of max_len = {self.max_len} tokens; "
                f"{n} more do not fit"
            )
        end = self.length + n
        self.k[:, :, self.length : end] = k_new  # (B, h_kv, n, d) written in place
        self.v[:, :, self.length : end] = v_new
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]  # (B, h_kv, length, d), views

    def truncate(self, length: int) -> None:
        """Forget every token after the first `length` (e.g. to decode again from there)."""
        check_int(length, "length", 0)
        if length > self.length:
            raise ValueError(f"length must lie in [0, {self.length}]; got {length}")
        self.length = length


def cached_attention(q: Tensor, k_new: Tensor, v_new: Tensor, cache: KVCache) -> Tensor:
    """One causal attention step: append k_new, v_new to the cache, then attend.

    q (B, h, n, d): the queries of n new tokens, the last n of the m = cache
    length tokens after the append; k_new, v_new (B, h_kv, n, d) with h_kv
    dividing h (query head i uses key/value head i // (h / h_kv)).
    Query i may attend to keys 0 .. m - n + i: the causal mask aligned to the
    bottom right. Returns (B, h, n, d).
    """
    for name, x in (("q", q), ("k_new", k_new), ("v_new", v_new)):
        if not isinstance(x, Tensor) or x.dim() != 4:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"{name} has shape {got}; expected 4 dims (B, heads, n, d)")
    h, h_kv = q.shape[1], cache.k.shape[1]
    if h % h_kv != 0:
        raise ValueError(f"q has h = {h} heads; expected a multiple of the cache's h_kv = {h_kv}")
    if q.shape[2] != k_new.shape[2]:
        raise ValueError(
            f"q has {q.shape[2]} new tokens but k_new has shape {tuple(k_new.shape)}; "
            "expected the same n"
        )
    k, v = cache.append(k_new, v_new)  # (B, h_kv, m, d)
    n, m = q.shape[2], k.shape[2]
    mask = None  # one query, the last token: it may attend to every cached key
    if n > 1:
        mask = torch.ones(n, m, dtype=torch.bool, device=q.device).tril(m - n)  # (n, m)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=h != h_kv)
