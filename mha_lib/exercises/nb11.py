"""Checkers for notebook 11 (smaller caches).

- `check_cache_bytes(fn)`: fn(layers, num_heads, num_kv_heads, head_dim, context,
  bytes_per_number) -> the bytes of a key/value cache for one sequence: keys and values of
  the num_kv_heads key/value heads, for every token and layer;
- `check_absorb_key(fn)`: fn(q_nope, W_UK) -> q_lat: each head's no-rope query turned into
  the latent space, q_nope (h, d_N), W_UK (h, d_N, r) -> (h, r), so that q_lat[i] · c equals
  q_nope[i] · (W_UK[i] @ c) for every latent c;
- `check_absorb_rotated(fn)`: fn(q, W_UK, t, j) -> q_lat (r,), the latent query that scores
  the key of the token at position j exactly when RoPE rotates the WHOLE key (no decoupled
  rope dimensions): q (d,) the query before its rotation at position t, W_UK (d, r) one head's
  key up-projection, the key k_j = rope(W_UK @ c_j, j), pairs (2i, 2i + 1) (MLA's layout),
  base 10000, and 0 <= j <= t; q_lat · c must equal rope(q, t) · rope(W_UK @ c, j) for every
  latent c. The answer is W_UKᵀ R_(t-j) q: it changes with j, which is why MLA keeps its
  rope dimensions apart;
- `check_sink_slot(fn)`: fn(t, num_sinks, window) -> the slot of token t in a rolling cache
  that keeps the first num_sinks tokens and a ring of window slots after them.

numpy only: the notebook may pass numpy arrays or torch tensors; answers are read either way.
"""

from __future__ import annotations

import numpy as np

from ._base import as_array, checker, diagnose, mismatch, run

__all__ = ["check_absorb_key", "check_absorb_rotated", "check_cache_bytes", "check_sink_slot"]


# ------------------------------------------------------------------------------- cache bytes

# (layers, num_heads, num_kv_heads, head_dim, context, bytes_per_number): sizes that all differ
CACHE_CASES = ((3, 8, 2, 5, 7, 4), (2, 6, 6, 4, 11, 8), (5, 12, 1, 3, 13, 2), (7, 4, 2, 9, 1, 1))


def cache_bytes_reference(L, h, h_kv, d, N, nbytes) -> int:
    return 2 * L * h_kv * d * N * nbytes


def _cache_mistakes(L, h, h_kv, d, N, nbytes) -> dict[str, int]:
    return {
        "it leaves out the factor 2: a cache holds keys AND values": L * h_kv * d * N * nbytes,
        "it uses num_heads, not num_kv_heads: only the key/value heads are cached (the query "
        "heads of a group share them)": 2 * L * h * d * N * nbytes,
        "it leaves out the layers: every layer has its own cache": 2 * h_kv * d * N * nbytes,
        "it counts numbers, not bytes: multiply by bytes_per_number": 2 * L * h_kv * d * N,
        "it counts bits (x 8): the question asks for bytes": 16 * L * h_kv * d * N * nbytes,
        "it gives each key/value head the model width num_heads · head_dim; a key/value head "
        "holds head_dim numbers": 2 * L * h_kv * h * d * N * nbytes,
        "it counts one token too many (context + 1)": 2 * L * h_kv * d * (N + 1) * nbytes,
    }


@checker("cache_bytes")
def check_cache_bytes(fn):
    """Check fn(layers, num_heads, num_kv_heads, head_dim, context, bytes_per_number)."""
    values = []
    for case in CACHE_CASES:
        result, problem = run(fn, *case)
        if problem:
            return problem
        value, problem = as_array(result, (), "a number")
        if problem:
            return problem
        values.append(float(value))
    expected = [cache_bytes_reference(*case) for case in CACHE_CASES]
    if values == expected:
        return None
    mistakes = [_cache_mistakes(*case) for case in CACHE_CASES]
    for message in mistakes[0]:
        if all(v == m[message] for v, m in zip(values, mistakes)):
            return message
    case = next(c for c, v, e in zip(CACHE_CASES, values, expected) if v != e)
    return (
        f"wrong value for {case}: expected "
        "2 · layers · num_kv_heads · head_dim · context · bytes_per_number"
    )


# ------------------------------------------------------------------------------- absorption

H, D_N, R = 3, 4, 6  # r != d_N, so a transposed W_UK shows in the shape


def _absorb_inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(H, D_N)), rng.normal(size=(H, D_N, R))


def absorb_reference(q_nope, W_UK):
    return np.einsum("hd,hdr->hr", q_nope, W_UK)  # (h, r)


def _absorb_mistakes(q, W) -> dict[str, np.ndarray]:
    right = absorb_reference(q, W)
    return {
        "it sums over the heads: each head keeps its own latent query (h, r)": np.broadcast_to(
            right.sum(0), right.shape
        ),
        "it uses head 0's up-projection for every head: W_UK[i] belongs to head i": np.einsum(
            "hd,dr->hr", q, W[0]
        ),
        "it applies the score scale 1/sqrt(d) here: the scale belongs to the scores, "
        "applied once": right / np.sqrt(D_N),
        "it pairs each query with another head's W_UK (the heads are shifted)": np.einsum(
            "hd,hdr->hr", q, np.roll(W, 1, axis=0)
        ),
        "it normalises the latent query: absorption is a product, nothing more": right
        / np.linalg.norm(right, axis=-1, keepdims=True),
        "it multiplies elementwise and sums over the latent axis instead of d_N": np.broadcast_to(
            np.einsum("hd,hdr->hd", q, W).sum(-1, keepdims=True), right.shape
        ),
        "it adds the heads' up-projections together: head i uses W_UK[i] alone": np.einsum(
            "hd,dr->hr", q, W.sum(0)
        ),
        "it reshapes W_UK[i] to (r, d_N) where it needs a transpose: a reshape keeps the "
        "numbers in memory order and scrambles the matrix": np.einsum(
            "hd,hrd->hr", q, W.reshape(W.shape[0], W.shape[2], W.shape[1])
        ),
    }


def _key_space(result, q, W) -> str:
    """Name an answer of q_nope's shape (h, d_N) by what it holds."""
    value = np.asarray(result, dtype=float)
    if np.allclose(value, q, rtol=1e-6, atol=1e-9):
        return (
            f"it returns q_nope unchanged, shape (h, d_N) = {(H, D_N)}: multiply each head's "
            f"query by W_UK[i] to land in the latent space (h, r) = {(H, R)}"
        )
    if np.allclose(value, np.einsum("hd,hdr->hd", q, W), rtol=1e-6, atol=1e-9):
        return (
            f"it sums over the latent axis r and keeps d_N (shape {(H, D_N)}): "
            "q_lat[i] = q_nope[i] @ W_UK[i] contracts d_N, the axis q_nope and W_UK[i] share, "
            f"and keeps r: (h, r) = {(H, R)} (np.einsum('hd,hdr->hr', ...))"
        )
    return (
        f"the result has shape {(H, D_N)}, the shape of q_nope, where (h, r) = {(H, R)} is "
        "expected: contract each head's query with the d_N axis of W_UK[i]"
    )


@checker("absorb_key")
def check_absorb_key(fn):
    """Check fn(q_nope (h, d_N), W_UK (h, d_N, r)) -> (h, r)."""
    for seed in (0, 1):
        q, W = _absorb_inputs(seed)
        result, problem = run(fn, q, W, names=("q_nope", "W_UK"))
        if problem:
            return problem
        shape = getattr(result, "shape", None)
        if shape is not None and tuple(shape) == (H, D_N):
            return _key_space(result, q, W)
        if shape is not None and tuple(shape) == (H, H, R):
            return (
                f"the result has shape (h, h, r) = {(H, H, R)}: q_nope @ W_UK broadcasts, so "
                "every head's query meets every head's W_UK; keep head i with W_UK[i] "
                "(np.einsum('hd,hdr->hr', ...) or (q_nope[:, None, :] @ W_UK)[:, 0])"
            )
        value, problem = as_array(result, (H, R), "an array")
        if problem:
            return problem
        right = absorb_reference(q, W)
        if np.allclose(value, right, rtol=1e-6, atol=1e-9):
            continue
        return diagnose(value, _absorb_mistakes(q, W)) or mismatch(
            value, right, "q_lat[i] = q_nope[i] @ W_UK[i] for each head i"
        )
    return None


# ------------------------------------------------------------------------------- rope vs absorption

D_K, R_ROT = 6, 4  # the key's d (3 rotated pairs) and the latent rank r: d != r, r even


def _rotate(x: np.ndarray, p: float, interleaved: bool = True) -> np.ndarray:
    """x (d,) turned by R_p, pair i by the angle p · 10000^(-2i/d) (p may be negative)."""
    d = x.shape[0]
    angle = p * 10000.0 ** (-np.arange(0, d, 2) / d)  # (d/2,)
    cos, sin = np.cos(angle), np.sin(angle)
    out = np.empty_like(x)
    if interleaved:
        x1, x2 = x[0::2], x[1::2]
        out[0::2], out[1::2] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    else:
        x1, x2 = x[: d // 2], x[d // 2 :]
        out[: d // 2], out[d // 2 :] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    return out


def absorb_rotated_reference(q, W_UK, t, j) -> np.ndarray:
    """W_UKᵀ R_(t-j) q, since rope(q, t) · rope(W_UK c, j) = (R_t q)ᵀ R_j W_UK c
    = (W_UKᵀ R_jᵀ R_t q) · c and R_jᵀ R_t = R_(t-j)."""
    return W_UK.T @ _rotate(q, t - j)


def _absorb_rotated_mistakes(q, W, t, j) -> dict[str, np.ndarray]:
    return {
        "it absorbs as if nothing were rotated (W_UKᵀ q): with RoPE on the whole key, a "
        "rotation sits between the query and W_UK": W.T @ q,
        "it rotates the query at t and forgets the key's rotation at j: the key k_j = "
        "R_j W_UK c_j is turned too, and R_jᵀ R_t = R_(t-j)": W.T @ _rotate(q, t),
        "it rotates by the key's position j; the score depends on the offset t - j": W.T
        @ _rotate(q, j),
        "it rotates by t + j: the two rotations meet as R_jᵀ R_t, an angle (t - j)·ω, not a "
        "sum": W.T @ _rotate(q, t + j),
        "it rotates the wrong way, by j - t: the query's R_t meets the key's R_j as "
        "R_jᵀ R_t = R_(t-j), so the query needs R_(t-j) q": W.T @ _rotate(q, j - t),
        "it rotates after W_UKᵀ, in the latent space: the rotation acts on the d key "
        "dimensions, so it comes before W_UKᵀ: W_UKᵀ (R_(t-j) q)": _rotate(W.T @ q, t - j),
        "it rotates in the half-split layout (pairs (i, i + d/2)): these keys turn the pairs "
        "(2i, 2i + 1), MLA's layout": W.T @ _rotate(q, t - j, interleaved=False),
    }


# (t, j): the offset t - j varies, and j = t and j = 0 are in
ROTATED_CASES = ((5, 2), (9, 9), (12, 0), (30, 17))


@checker("absorb_rotated")
def check_absorb_rotated(fn):
    """Check fn(q (d,), W_UK (d, r), t, j) -> q_lat (r,) = W_UKᵀ R_(t-j) q."""
    rng = np.random.default_rng(4)
    q, W = rng.normal(size=D_K), rng.normal(size=(D_K, R_ROT))
    for t, j in ROTATED_CASES:
        result, problem = run(fn, q, W, t, j, names=("q", "W_UK"))
        if problem:
            return problem
        shape = getattr(result, "shape", None)
        if shape is not None and tuple(shape) == (D_K,):
            return (
                f"the result has shape (d,) = {(D_K,)}: it is a rotated query in the key space; "
                f"multiply by W_UKᵀ to land in the latent space (r,) = {(R_ROT,)}"
            )
        value, problem = as_array(result, (R_ROT,), "an array")
        if problem:
            return problem
        right = absorb_rotated_reference(q, W, t, j)
        if np.allclose(value, right, rtol=1e-6, atol=1e-9):
            continue
        problem = diagnose(value, _absorb_rotated_mistakes(q, W, t, j)) or mismatch(
            value, right, "q_lat with q_lat · c = rope(q, t) · rope(W_UK @ c, j) for every c"
        )
        return f"{problem} [in the case t = {t}, j = {j}]"
    return None


# ------------------------------------------------------------------------------- sink slots


def slot_reference(t: int, S: int, W: int) -> int:
    return t if t < S else S + (t - S) % W


def _slot_mistakes(t: int, S: int, W: int) -> dict[str, int]:
    return {
        "the sinks are overwritten: tokens t < num_sinks must keep their own slots and the "
        "ring must start after them": t % W,
        "the ring wraps over all num_sinks + window slots, so it overwrites the sinks: wrap "
        "over the window slots only": t % (S + W),
        "the ring is not offset past the sinks: add num_sinks to (t - num_sinks) % window": (
            (t - S) % W if t >= S else -1
        ),
        "the ring counts from token 0, not from the first token after the sinks: use "
        "(t - num_sinks) % window": S + t % W if t >= S else -1,
        "off by one in the ring: (t - num_sinks - 1) % window": S + (t - S - 1) % W
        if t >= S
        else -1,
        "it never wraps: once the cache is full every new token lands in the last slot": min(
            t, S + W - 1
        ),
        "the first window token lands in a sink's slot: the ring starts at slot num_sinks": (
            S - 1 + (t - S) % W if t >= S else -1
        ),
    }


@checker("sink_slot")
def check_sink_slot(fn):
    """Check fn(t, num_sinks, window) -> int for many t, with and without sinks."""
    cases = [(t, S, W) for S, W in ((4, 3), (2, 5), (0, 4), (1, 1)) for t in range(14)]
    values = []
    for t, S, W in cases:
        result, problem = run(fn, t, S, W)
        if problem:
            return problem
        value, problem = as_array(result, (), "an integer")
        if problem:
            return problem
        values.append(float(value))
    expected = [slot_reference(*case) for case in cases]
    if values == expected:
        return None
    mistakes = [_slot_mistakes(*case) for case in cases]
    for message in mistakes[0]:
        if all(v == m[message] or v == e for v, m, e in zip(values, mistakes, expected)):
            return message
    (t, S, W), value, right = next((c, v, e) for c, v, e in zip(cases, values, expected) if v != e)
    return (
        f"token t = {t} with num_sinks = {S}, window = {W} goes to slot {right}; "
        f"yours gives {value:g}"
    )
