"""Checkers for notebook 08 (efficient attention).

- `check_sliding_window_mask(fn)`: fn(N, window) -> the (N, N) numpy bool
  mask of causal sliding-window attention (True = may attend): query i sees
  keys i - window + 1 .. i;
- `check_chunk_causal_mask(fn)`: fn(n, m) -> the (n, m) numpy bool causal
  mask for a chunk of n new queries against a cache of m keys (the chunk's
  own keys last), aligned to the bottom right;
- `check_decode_chunk(fn)`: fn(q_new, k_new, v_new, cache, stats) -> o, a
  chunk of n new tokens decoded against a `KVCache` through `flash_attention`
  (append, then attend with the bottom-right causal mask as a mask_mod, in
  tiles of 4 x 4, counting the tiles in `stats`).

This module imports torch, so `mha_lib.exercises` does not import it: notebooks
write `from mha_lib.exercises.nb08 import ...`.
"""

from __future__ import annotations

import numpy as np
import torch

from ..nn import KVCache, TileStats
from ._base import checker, diagnose, run

__all__ = ["check_chunk_causal_mask", "check_decode_chunk", "check_sliding_window_mask"]

BLOCK = 4  # the tile size the decoding exercise asks for: block_q = block_k = 4


def _bool_mask(result, shape: tuple[int, ...]):
    """A learner's mask as a numpy bool array of `shape`, or (None, what is wrong)."""
    if isinstance(result, torch.Tensor):
        result = result.detach().cpu().numpy()
    if not isinstance(result, np.ndarray):
        return None, f"expected a numpy bool array; got {type(result).__name__}"
    if result.dtype != bool:
        return None, (
            f"the mask has dtype {result.dtype}; expected bool (True = may attend): a float or "
            "int mask means something else to attention functions (it is added to the scores)"
        )
    if result.shape != shape:
        return None, f"the mask has shape {result.shape}; expected {shape}"
    return result, None


def _grid(n: int, m: int):
    return np.arange(n)[:, None], np.arange(m)[None, :]  # (n, 1) queries, (1, m) keys


# ---------------------------------------------------------------------------- sliding window


def _window_mistakes(N: int, w: int) -> dict[str, np.ndarray]:
    i, j = _grid(N, N)
    right = (j <= i) & (i - j < w)
    return {
        "it is inverted: True must mark the keys a query MAY attend to (the numpy core's and "
        "SDPA's convention)": ~right,
        "off by one: query i should see `window` keys (itself and the window - 1 before it); "
        "yours sees window + 1": (j <= i) & (i - j <= w),
        "off by one: query i should see `window` keys (itself and the window - 1 before it); "
        "yours sees window - 1": (j <= i) & (i - j < w - 1),
        "the window is on the wrong side: query i must see the tokens before it (j <= i), "
        "not the ones after it": (j >= i) & (j - i < w),
        "the window is two-sided: query i also sees |i - j| < window tokens in its future; "
        "a causal window keeps only j <= i": np.abs(i - j) < w,
        "it is not causal: the window bounds the past but query i still sees every key "
        "j > i; add j <= i": i - j < w,
        "it leaves out the diagonal: query i must see itself (key j = i)": (j < i) & (i - j <= w),
    }


@checker("sliding_window_mask")
def check_sliding_window_mask(fn):
    """Check fn(N, window) -> (N, N) bool, True where i - window < j <= i."""
    problem = None
    for N, w in ((7, 3), (6, 1), (4, 6), (1, 2), (9, 4)):
        result, problem = run(fn, N, w)
        if problem is None:
            mask, problem = _bool_mask(result, (N, N))
        if problem is None:
            i, j = _grid(N, N)
            if not np.array_equal(mask, (j <= i) & (i - j < w)):
                problem = diagnose(mask, _window_mistakes(N, w)) or (
                    f"wrong entries for N = {N}, window = {w}: row i must be True exactly "
                    "at i - window < j <= i"
                )
        if problem is not None:
            break
    return problem


# ---------------------------------------------------------------------------- chunk against a cache


def _chunk_mistakes(n: int, m: int) -> dict[str, np.ndarray]:
    i, j = _grid(n, m)
    right = j <= m - n + i
    return {
        "it is inverted: True must mark the keys a query MAY attend to (True = may NOT attend "
        "is nn.MultiheadAttention's convention)": ~right,
        "it is aligned to the top left (query i sees keys 0 .. i, what is_causal=True does "
        "when n != m); the n queries are the LAST n of the m tokens, so query i sees keys "
        "0 .. m - n + i": j <= i,
        "off by one: query i (at position m - n + i) must see its own key; yours blocks it": j
        < m - n + i,
        "off by one: query i (at position m - n + i) sees one key from its future": j
        <= m - n + i + 1,
        "it blocks nothing: a query of the chunk must not see the chunk's later tokens": np.ones(
            (n, m), dtype=bool
        ),
        "it blocks the chunk's own tokens: query i must see the cache AND the chunk's tokens "
        "up to itself": np.broadcast_to(j < m - n, (n, m)),
    }


@checker("chunk_causal_mask")
def check_chunk_causal_mask(fn):
    """Check fn(n, m) -> (n, m) bool, True where j <= m - n + i."""
    problem = None
    for n, m in ((3, 7), (1, 5), (4, 4), (2, 6), (5, 9)):
        result, problem = run(fn, n, m)
        if problem is None and isinstance(result, np.ndarray | torch.Tensor):
            shape = tuple(result.shape)
            if shape == (m, n) and n != m:
                problem = f"it has shape (m, n) = {shape}; expected (n, m): rows are the queries"
            elif shape == (m, m) and n != m:
                problem = (
                    f"it is the full (m, m) = {shape} causal mask; keep the rows of the n new "
                    "queries, the last n"
                )
        if problem is None:
            mask, problem = _bool_mask(result, (n, m))
        if problem is None:
            i, j = _grid(n, m)
            if not np.array_equal(mask, j <= m - n + i):
                problem = diagnose(mask, _chunk_mistakes(n, m)) or (
                    f"wrong entries for n = {n}, m = {m}: row i must be True exactly at "
                    "j <= m - n + i"
                )
        if problem is not None:
            break
    return problem


# ---------------------------------------------------------------------------- a chunk through flash


def _chunk_case(B: int, h: int, m_old: int, n: int, d: int, seed: int):
    """A cache holding m_old tokens (room for more), and a chunk of n new queries, keys, values."""
    gen = torch.Generator().manual_seed(seed)

    def randn(tokens):
        return torch.randn(B, h, tokens, d, generator=gen, dtype=torch.float64)

    q, k, v = randn(m_old + n), randn(m_old + n), randn(m_old + n)  # (B, h, m, d): every token
    cache = KVCache(B, h, m_old + n + 3, d, dtype=torch.float64)  # 3 empty slots at the end
    if m_old:
        cache.append(k[:, :, :m_old], v[:, :, :m_old])
    return q, k, v, cache


def _attend(q, k, v, allowed):
    """SDPA with an (n, m) bool mask (True = may attend); a row with nothing gives zeros."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


def _decode_mistakes(q, k, v, m_old: int, n: int) -> dict[str, torch.Tensor]:
    """The chunk's outputs under the usual mistakes; q, k, v (B, h, m, d) hold every token."""
    m = m_old + n
    q_new = q[:, :, m_old:]  # (B, h, n, d)
    i, j = torch.arange(n)[:, None], torch.arange(m)[None, :]  # (n, 1), (1, m)
    right = j <= i + m - n
    padded = torch.nn.functional.pad(k, (0, 0, 0, 3)), torch.nn.functional.pad(v, (0, 0, 0, 3))
    j_all = torch.arange(m + 3)[None, :]  # the whole buffer, empty slots included
    wrong = {
        "the mask is aligned to the top left (is_causal=True: query i sees keys 0 .. i); the "
        "n queries are the LAST n of the m tokens, so query i sees keys 0 .. m - n + i: "
        "use bottom_right_causal_mask_mod(n, m)": _attend(q_new, k, v, j <= i),
        "there is no mask: query i of the chunk also sees the chunk's later tokens": _attend(
            q_new, k, v, None
        ),
        "the chunk attends to its own keys only: the cached keys and values of the earlier "
        "tokens are left out": _attend(
            q_new, k[:, :, m_old:], v[:, :, m_old:], torch.ones(n, n, dtype=torch.bool).tril()
        ),
        "the mask is inverted: True must mark the keys a query MAY attend to": _attend(
            q_new, k, v, ~right
        ),
        "off by one: query i (at position m - n + i) must see its own key; yours blocks it": (
            _attend(q_new, k, v, j < i + m - n)
        ),
        "off by one: query i (at position m - n + i) sees one key from its future": _attend(
            q_new, k, v, j <= i + m - n + 1
        ),
        "it attends to the whole preallocated buffer cache.k, cache.v, empty slots included: "
        "use the first cache.length tokens (what cache.append returns)": _attend(
            q_new, *padded, j_all <= i + m + 3 - n
        ),
        "it attends to the whole preallocated buffer, empty slots included, with no mask": (
            _attend(q_new, *padded, None)
        ),
    }
    twice = torch.cat([k, k[:, :, m_old:]], dim=2), torch.cat([v, v[:, :, m_old:]], dim=2)
    wrong["the chunk was appended to the cache twice: append once, then attend"] = _attend(
        q_new, *twice, torch.arange(m + n)[None, :] <= i + m
    )
    if n <= m_old:
        wrong[
            "the mask's m is the cache length BEFORE the chunk was appended: m counts every "
            "key the chunk attends to, its own included"
        ] = _attend(q_new, k, v, j <= i + m_old - n)
    return wrong


def _expected_tiles(n: int, m: int, keys: int | None = None) -> TileStats:
    """Tiles of 4 x 4 over the bottom-right causal mask of n queries against m keys, laid
    over `keys` >= m columns (default m): visited and skipped."""
    stats = TileStats()
    for i0 in range(0, n, BLOCK):
        last_row = min(i0 + BLOCK, n) - 1
        for j0 in range(0, keys or m, BLOCK):
            allowed = j0 <= last_row + m - n  # the tile's first key is visible to its last row
            stats.visited += allowed
            stats.skipped += not allowed
    return stats


@checker("decode_chunk")
def check_decode_chunk(fn):
    """Check fn(q_new, k_new, v_new, cache, stats) -> o (B, h, n, d_v) for a chunk."""
    problem = None
    # (m_old, n): a chunk after a cache, one token, a prompt into an empty cache, a long chunk
    for case, (m_old, n) in enumerate(((6, 3), (9, 1), (0, 5), (6, 9))):
        q, k, v, cache = _chunk_case(1, 2, m_old, n, 3, seed=80 + case)
        stats = TileStats()
        new = (q[:, :, m_old:].clone(), k[:, :, m_old:].clone(), v[:, :, m_old:].clone())
        result, problem = run(fn, *new, cache, stats)
        if problem is None:
            problem = _judge_chunk(result, q, k, v, cache, stats, m_old, n)
        if problem is not None:
            if m_old == 0:
                problem += " [in the case of an empty cache: the chunk is the whole prompt]"
            break
    return problem


def _judge_chunk(result, q, k, v, cache, stats, m_old: int, n: int) -> str | None:
    m = m_old + n
    if isinstance(result, tuple | list) and len(result) == 2:
        return "it returns a pair: flash_attention returns (o, lse); return o only"
    if not isinstance(result, torch.Tensor):
        return f"expected a torch tensor o of shape (B, h, n, d_v); got {type(result).__name__}"
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    expected = expected[:, :, m_old:]  # (B, h, n, d_v): full causal attention, the chunk's rows
    got = result.detach().to("cpu", torch.float64)
    if got.shape != expected.shape:
        return f"o has shape {tuple(got.shape)}; expected (B, h, n, d_v) = {tuple(expected.shape)}"
    if not torch.allclose(got, expected, rtol=1e-9, atol=1e-12):
        for message, wrong in _decode_mistakes(q, k, v, m_old, n).items():
            if torch.allclose(got, wrong, rtol=1e-9, atol=1e-12):
                return message
        return (
            f"wrong values for a chunk of n = {n} after {m_old} cached tokens: expected full "
            "causal attention's last n rows"
        )
    if cache.length == m_old:
        return (
            "the output is right but the cache was not updated: append the chunk's keys and "
            "values (cache.append) so that the next step sees them"
        )
    if cache.length != m:
        return f"the cache holds {cache.length} tokens afterwards; expected m = {m}"
    want = _expected_tiles(n, m)
    if stats.total == 0:
        return (
            "the output is right but stats counted no tiles: attend with flash_attention(..., "
            "stats=stats)"
        )
    if stats.total == 2 * want.total:
        return "stats counted every tile twice: call flash_attention once per chunk"
    if stats != want and stats == _expected_tiles(n, m, cache.max_len):
        return (
            "the output is right, but flash_attention ran over the whole preallocated buffer "
            f"(max_len = {cache.max_len} keys, the empty slots masked): attend to the first "
            "cache.length tokens only (what cache.append returns)"
        )
    if stats != want:
        return (
            f"the output is right but stats counts {stats.visited} visited and {stats.skipped} "
            f"skipped tiles; tiles of 4 x 4 give {want.visited} and {want.skipped} "
            "(block_q=4, block_k=4)"
        )
    return None
