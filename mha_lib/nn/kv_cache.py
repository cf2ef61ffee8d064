"""What a decoder keeps between steps: a key/value cache, a rolling one with sinks, and the
container of one cache per layer that a model decodes with.

Derived in notebook 08 (`KVCache`, `cached_attention`) and notebook 11 (`SinkKVCache`). When a
model generates token by token, the keys and values of the tokens already seen never change
(causal attention: earlier tokens do not see later ones). `KVCache` keeps them, so a decoding
step projects only the new token(s) and attends to the cache: O(N) work per token instead of
recomputing all N tokens, at the price of memory 2·B·h_kv·N·d numbers per layer, kept for the
whole generation.

Mistral and Gemma-2 attend within a sliding window of W tokens, so a decoder needs to keep only
the last W keys and values; StreamingLLM (Xiao et al. 2023) showed that models trained with full
attention also need the first few tokens, on which they park attention weight, and kept S of
them: `SinkKVCache` holds S + W slots however long the sequence grows. Token t (0-based) lives
in slot `slot_of(t, S, W)`: t while t < S, then S + (t - S) mod W, a ring over the W window
slots; a new token overwrites the oldest window token. Decoding token t with this cache equals
full attention under the mask `masks.sink_window_mask` (notebook 08's sliding window plus the
sink columns), which tests/nn/test_kv_cache.py checks.

Positions: StreamingLLM stores keys before RoPE and rotates them by their place in the cache
(0 .. len - 1), not by their place in the text, so the positions a model sees never exceed
S + W. `SinkKVCache.positions()` gives the tokens' text positions, `cache_positions()` those
places.

A sliding-window layer (Gemma 3's, notebook 15) keeps the same cache with no sinks, its keys
rotated at their text positions: S = 0, `rope_positions="original"`. Such a cache also takes a
chunk of n tokens at once (a prompt): its queries see the cached tokens and the chunk, all
consecutive in the text, and the layer's window mask (`masks.bottom_right_window_tensor`) says
which; only the last W are kept.

What it holds:
- `KVCache(batch_size, num_kv_heads, max_len, head_dim)`: preallocated k, v (B, h_kv,
  max_len, d); `append` writes the new keys and values after the `length` already stored and
  returns views of everything stored;
- `cached_attention(q, k_new, v_new, cache)`: append, then attend with the causal mask aligned
  to the bottom right (a chunk of n queries is the LAST n of the m cached tokens), the query
  heads grouped over the key/value heads;
- `slot_of(t, num_sinks, window)`: the rolling cache's index arithmetic;
- `SinkKVCache(batch_size, num_kv_heads, head_dim, window, num_sinks)`: `append` one token
  (or a chunk, without sinks), `keys_values()` in text order, `positions()`,
  `cache_positions()`, `len()`, `nbytes`;
- `sink_cached_attention(q, k_new, v_new, cache)`: one decoding step with it;
- `DecoderCache`: one cache per layer, what a decoder (`mha_lib.nn.decoder`) decodes with.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .._checks import check_int
from .masks import bottom_right_causal_tensor

__all__ = [
    "ROPE_POSITIONS",
    "DecoderCache",
    "KVCache",
    "SinkKVCache",
    "cached_attention",
    "sink_cached_attention",
    "slot_of",
]

ROPE_POSITIONS = ("cache", "original")  # where a SinkKVCache rotates its keys


class KVCache:
    """Keys and values of the first `length` tokens, in preallocated (B, h_kv, max_len, d)."""

    rolling = False  # every token seen stays (a SinkKVCache drops the oldest of its window)

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
    def seen(self) -> int:
        """Tokens seen so far, the position of the next one: here every one is stored."""
        return self.length

    @property
    def nbytes(self) -> int:
        """Bytes held by the cache's two tensors (allocated for max_len tokens)."""
        return self.k.untyped_storage().nbytes() + self.v.untyped_storage().nbytes()

    def check(self, batch_size: int, n: int) -> None:
        """Raise ValueError unless a step of n new tokens for batch_size sequences fits: what a
        model checks before anything is stored."""
        if batch_size != self.k.shape[0]:
            raise ValueError(
                f"input_ids has batch {batch_size}; the cache was made for {self.k.shape[0]}"
            )
        end = self.length + n
        if end > self.max_len:
            raise ValueError(
                f"{self.length} cached + {n} new tokens = {end} do not fit the cache's "
                f"max_len = {self.max_len}"
            )

    def update(self, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, rotate):
        """A decoder layer's step: q (B, h, n, d), k, v (B, h_kv, n, d) of n new tokens at
        `positions` (n,), not yet rotated. Rotates q and k at their positions
        (`rotate(x, positions)`: RoPE, or nothing), stores k and v, and returns q with every key
        and value stored so far, (B, h_kv, length, d): the n queries are the last n of them."""
        q, k = rotate(q, positions), rotate(k, positions)
        k, v = self.append(k, v)  # (B, h_kv, m, d)
        return q, k, v

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
        mask = bottom_right_causal_tensor(n, m, q.device)  # (n, m)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=h != h_kv)


def slot_of(t: int, num_sinks: int, window: int) -> int:
    """The slot of token t in a cache of num_sinks sinks and a ring of window slots."""
    if t < num_sinks:
        return t
    return num_sinks + (t - num_sinks) % window


class SinkKVCache:
    """Keys and values of the first num_sinks tokens and the last window tokens.

    Preallocated k, v (B, h_kv, S + W, d): memory fixed at 2·B·h_kv·(S + W)·d numbers.
    rope_positions: where a decoder layer's `update` rotates the keys: "cache", by their place in
    the cache (StreamingLLM: keys stored before RoPE, rotated again at every step), or
    "original", at their position in the text (rotated once, before they are stored).
    Without sinks and at the text positions (a sliding-window layer's cache) it takes chunks of
    several tokens (`takes_chunks`); otherwise one token at a time.
    """

    rolling = True  # the oldest window token is dropped once full

    def __init__(
        self,
        batch_size: int,
        num_kv_heads: int,
        head_dim: int,
        window: int,
        num_sinks: int = 4,
        *,
        rope_positions: str = "cache",
        dtype: torch.dtype = torch.float32,
        device=None,
    ) -> None:
        B = check_int(batch_size, "batch_size", 1)
        h_kv = check_int(num_kv_heads, "num_kv_heads", 1)
        d = check_int(head_dim, "head_dim", 1)
        self.window = check_int(window, "window", 1)
        self.num_sinks = check_int(num_sinks, "num_sinks", 0)
        if rope_positions not in ROPE_POSITIONS:
            raise ValueError(
                f"rope_positions = {rope_positions!r}; expected one of {ROPE_POSITIONS}"
            )
        self.rope_positions = rope_positions
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

    @property
    def takes_chunks(self) -> bool:
        """Whether a step may bring several tokens: only without sinks and with the keys at their
        text positions (then the cached tokens and a chunk are consecutive in the text, and a
        window mask says what each query sees)."""
        return self.num_sinks == 0 and self.rope_positions == "original"

    def append(self, k_new: Tensor, v_new: Tensor) -> None:
        """Store the keys and values (B, h_kv, n, d) of the next n tokens (n = 1 unless
        `takes_chunks`), evicting the oldest window tokens once the cache is full."""
        B, h_kv, _, d = self.k.shape
        for name, x in (("k_new", k_new), ("v_new", v_new)):
            if (
                not isinstance(x, Tensor)
                or x.dim() != 4
                or (x.shape[0], x.shape[1], x.shape[3]) != (B, h_kv, d)
            ):
                got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
                raise ValueError(
                    f"{name} has shape {got}; expected (B, h_kv, n, d) with (B, h_kv, d) = "
                    f"{(B, h_kv, d)}"
                )
        n = k_new.shape[2]
        if v_new.shape[2] != n or (n != 1 and not self.takes_chunks):
            raise ValueError(
                f"k_new has {n} tokens and v_new {v_new.shape[2]}; expected one token at a time "
                "(a chunk would evict keys its own first queries need), unless the cache has no "
                "sinks and rotates at the text positions"
            )
        kept = min(n, self.window + self.num_sinks)  # the last ones (without sinks: the window)
        start = self.seen + n - kept  # text position of the first token kept
        slots = [slot_of(t, self.num_sinks, self.window) for t in range(start, start + kept)]
        idx = torch.tensor(slots, device=self.k.device)
        self.k.index_copy_(2, idx, k_new[:, :, n - kept :])  # (B, h_kv, kept, d) into their slots
        self.v.index_copy_(2, idx, v_new[:, :, n - kept :])
        self.seen += n

    def keys_values(self) -> tuple[Tensor, Tensor]:
        """k, v (B, h_kv, len, d) of the cached tokens, in text order."""
        S, W = self.num_sinks, self.window
        if self.seen <= S + W:  # nothing evicted yet: slots 0 .. len - 1 are in text order
            return self.k[:, :, : self.seen], self.v[:, :, : self.seen]  # views
        oldest = slot_of(self.seen - W, S, W)  # the ring starts at the oldest window token
        order = [*range(S), *range(oldest, S + W), *range(S, oldest)]
        idx = torch.tensor(order, device=self.k.device)
        return self.k[:, :, idx], self.v[:, :, idx]

    def check(self, batch_size: int, n: int) -> None:
        """Raise ValueError unless a step of n new tokens for batch_size sequences fits."""
        if batch_size != self.k.shape[0]:
            raise ValueError(
                f"input_ids has batch {batch_size}; the cache was made for {self.k.shape[0]}"
            )
        if n != 1 and not self.takes_chunks:
            raise ValueError(f"input_ids has {n} tokens; a sink cache takes one token at a time")

    def update(self, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, rotate):
        """A decoder layer's step, one token: q (B, h, 1, d), k, v (B, h_kv, 1, d), not yet
        rotated, at text position `positions` (1,). Stores k and v and returns q with the cached
        keys and values (B, h_kv, len, d) in text order, rotated (`rotate(x, positions)`) by
        `rope_positions`: at their places in the cache, the query at the last place, or at their
        text positions, the query at its own. A chunk of n tokens (`takes_chunks`) returns the
        keys and values cached before it followed by its own, (B, h_kv, m + n, d), m <= W: its
        queries are the last n of them, and the layer's window mask says which each sees."""
        if self.rope_positions == "original":  # each key rotated once, at its text position
            q, k = rotate(q, positions), rotate(k, positions)
            if k.shape[2] > 1 and self.takes_chunks:  # the chunk needs the keys it evicts
                k_old, v_old = self.keys_values()  # (B, h_kv, m, d), before the chunk
                k_all, v_all = torch.cat([k_old, k], dim=2), torch.cat([v_old, v], dim=2)
                self.append(k, v)  # (after the copies: it overwrites the slots k_old views)
                return q, k_all, v_all
            self.append(k, v)
            k, v = self.keys_values()  # (B, h_kv, m, d), m <= S + W, in text order
            return q, k, v
        self.append(k, v)  # StreamingLLM: keys cached before RoPE
        k, v = self.keys_values()  # (B, h_kv, m, d), m <= S + W, in text order
        places = torch.arange(k.shape[2], device=k.device)  # their places in the cache
        return rotate(q, places[-1:]), rotate(k, places), v

    def truncate(self, length: int) -> None:
        """Not possible: the tokens it evicted are gone."""
        raise ValueError("a SinkKVCache cannot be truncated (its evicted tokens are gone)")


def sink_cached_attention(q: Tensor, k_new: Tensor, v_new: Tensor, cache: SinkKVCache) -> Tensor:
    """Append one token's k_new, v_new (B, h_kv, 1, d), then its query q (B, h, 1, d) attends to
    every cached token (sinks and window; all are in its past). Returns (B, h, 1, d)."""
    if not isinstance(q, Tensor) or q.dim() != 4 or q.shape[2] != 1:
        got = tuple(q.shape) if isinstance(q, Tensor) else type(q).__name__
        raise ValueError(f"q has shape {got}; expected (B, h, 1, d): one token at a time")
    cache.append(k_new, v_new)
    k, v = cache.keys_values()  # (B, h_kv, len, d)
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=q.shape[1] != k.shape[1])


class DecoderCache:
    """One cache per layer of a decoder, each made by its layer's attention (`new_cache` or
    `new_sink_cache` of `mha_lib.nn.gqa.GroupedQueryAttention`): notebook 08's `KVCache`s or
    notebook 11's `SinkKVCache`s. A model decodes with it and asks nothing of its entries but
    `update` (store a step, say what the queries see), `check`, `seen`, `rolling`, `nbytes` and
    `truncate`: another kind of layer (a recurrent state instead of keys and values) brings its
    own entry.

    `length` is the number of tokens seen (the position of the next one); `nbytes` what the
    caches hold. Made by `DecoderLM.new_cache` or `DecoderLM.new_sink_cache`.
    """

    def __init__(self, layers: list) -> None:
        if not isinstance(layers, list | tuple) or not layers:
            raise TypeError("layers must be a non-empty list of per-layer caches")
        self.layers = list(layers)

    @property
    def rolling(self) -> bool:
        """True when every layer's cache drops tokens (a sink cache on every layer: the model
        may stream past its context). A model whose sliding layers roll and whose global
        layers keep everything (Gemma 3's `new_cache`) is not rolling: its context holds."""
        return all(c.rolling for c in self.layers)

    @property
    def length(self) -> int:
        return self.layers[0].seen

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.layers)

    def check(self, batch_size: int, n: int) -> None:
        """Raise ValueError, naming why, unless every layer's cache takes n new tokens."""
        for c in self.layers:
            c.check(batch_size, n)

    def truncate(self, length: int) -> None:
        """Forget every token after the first `length` (KVCache only)."""
        for c in self.layers:
            c.truncate(length)
