"""Checkers for notebook 18 (choosing keys: DeepSeek-V3.2's lightning indexer on notebook 11's
latent attention).

float64 numpy arrays and Python numbers in, numpy arrays, torch tensors or numbers out (an
answer written for torch tensors only is run again on tensors and passes with a note):
- `check_index_scores(fn)`: fn(q, k, w) -> the index scores (n, m) of n queries against m keys,
  scores[t, s] = Σ_h w[t, h] · ReLU(q[t, h] · k[s]), with q (n, H, D) the index queries (one per
  index head), k (m, D) the index keys (ONE per token, shared by the H heads) and w (n, H) each
  query's weights; no scale and no mask. The library's `LightningIndexer` computes the same
  sum with 1/√D inside the ReLU and 1/√H on w: since ReLU(a·x) = a·ReLU(x) for a > 0, its
  scores are these divided by √(H·D) (tests/exercises/test_nb18.py checks it);
- `check_causal_topk_mask(fn)`: fn(scores, k) -> the bool mask (N, N), True = query t may
  attend key s: s <= t and s among the k highest-scoring of the keys 0 .. t (all t + 1 of them
  while t + 1 <= k), for index scores (N, N) whose future is NOT masked (every entry finite).
  It is `mha_lib.sparse_attention.causal_topk`'s mask once the future is set to -inf (an answer
  that calls that function is refused: the exercise asks for it);
- `check_indexer_cache_bytes(fn)`: fn(layers, batch, tokens, index_n_heads, index_head_dim,
  bytes_per_number) -> the bytes of the indexer's key cache: ONE key of index_head_dim numbers
  per token and layer, shared by the index heads, and no values:
  layers · batch · tokens · index_head_dim · bytes_per_number.

The sizes all differ (n != m != H != D), so a swap of roles or axes shows in the shape, and
each shape a usual mistake gives is named. The scores are asked on more queries than keys too
(n > m), where weighting by the key's row of w, w[s], gives numbers instead of an error. The
top-k scores have no ties, and the mask is also asked with k above N (every earlier key is
chosen). The cache's cases make every catalogued formula give other numbers. An answer is
judged to the precision of its own dtype (`TOLERANCE`): float64 tightly, float32 to about 1e-5;
a float16 answer right to float16's precision is refused with a message that says so.
"""

from __future__ import annotations

import numpy as np

from ._base import (
    GENERIC,
    Library,
    checker,
    diagnose,
    first_note,
    judge_array,
    judge_byte_counts,
    run_as,
    to_numpy,
    within,
)

__all__ = ["check_causal_topk_mask", "check_index_scores", "check_indexer_cache_bytes"]


def _mismatch(value, expected, what: str, prec: str) -> str:
    """The message for values that match no catalogued mistake."""
    if not np.all(np.isfinite(value)):
        return f"the result contains inf or NaN; expected {what} (no mask: every entry finite)"
    if prec == "float16" and within(value, expected, "float16"):
        return (
            f"right to float16's precision (about 1e-3) only: the answer is float16; compute "
            f"{what} in float32 or float64"
        )
    if bool(np.allclose(value, expected, rtol=1e-2, atol=1e-2)):
        return (
            f"close to {what}, but only to about 1e-3 ({prec}): something rounds; do not round "
            "the answer or what it is computed from"
        )
    return f"wrong values: expected {what}"


def _shape(result) -> tuple | None:
    shape = getattr(result, "shape", None)
    try:
        return None if shape is None else tuple(shape)
    except TypeError:  # an object whose shape is not a tuple of sizes
        return None


# ------------------------------------------------------------------------------- index scores

# (n queries, m keys, H index heads, D): all different within a case, so a swapped axis shows in
# the shape; the second case has more queries than keys (w[s] reads a row of w there)
SCORE_CASES = ((5, 7, 3, 4), (8, 6, 2, 5), (5, 7, 3, 4))
SQUARE = (6, 6, 2, 5)  # as many queries as keys: only to name an answer that raised on the cases


def _score_inputs(seed: int, sizes: tuple[int, int, int, int] | None = None):
    """q (n, H, D), k (m, D), w (n, H) of case `seed` (or of `sizes`): dot products of order 1,
    so about half are negative and the ReLU matters; weights of both signs (a head may vote
    against a key)."""
    n, m, H, D = SCORE_CASES[seed] if sizes is None else sizes
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(n, H, D))  # (n, H, D): one index query per head
    k = rng.normal(size=(m, D))  # (m, D): one index key per token, shared by the heads
    w = rng.normal(size=(n, H))  # (n, H): each query's weight for each head
    return q, k, w


def _dots(q, k):
    return np.einsum("thd,sd->ths", q, k)  # (n, H, m): q[t, h] · k[s]


def index_scores_reference(q, k, w):
    relu = np.maximum(_dots(q, k), 0.0)  # (n, H, m)
    return np.einsum("th,ths->ts", w, relu)  # (n, m): Σ_h w[t, h] · ReLU(q[t, h] · k[s])


def _softmax(x, axis=-1):
    z = np.exp(x - x.max(axis=axis, keepdims=True))
    return z / z.sum(axis=axis, keepdims=True)


def _score_mistakes(q, k, w) -> dict[str, np.ndarray]:
    """Mistakes whose output has the right shape (n, m)."""
    n, H, D = q.shape
    m = len(k)
    dots = _dots(q, k)  # (n, H, m)
    relu = np.maximum(dots, 0.0)  # (n, H, m)
    right = index_scores_reference(q, k, w)  # (n, m)
    weighted = w[:, :, None] * relu  # (n, H, m)
    scrambled = np.maximum(dots.reshape(n, m, H), 0.0)  # (n, m, H): a reshape, not a transpose
    mistakes = {
        "it leaves out the ReLU: scores[t, s] = Σ_h w[t, h] · ReLU(q[t, h] · k[s]), each "
        "head's dot product clipped at 0 before it is weighted": np.einsum("th,ths->ts", w, dots),
        "it applies the ReLU after summing the heads: each head's dot product is clipped at 0 "
        "first, ReLU(q[t, h] · k[s]), then weighted by w[t, h] and summed": np.maximum(
            np.einsum("th,ths->ts", w, dots), 0.0
        ),
        "it applies the ReLU after multiplying by w[t, h]: ReLU(q[t, h] · k[s]) first, then "
        "the weight, which may be negative (a head may vote against a key)": np.maximum(
            w[:, :, None] * dots, 0.0
        ).sum(1),
        "it applies the ReLU to each product q[t, h, d] · k[s, d] before summing over D: the "
        "ReLU clips the whole dot product q[t, h] · k[s]": np.einsum(
            "th,thsd->ts", w, np.maximum(q[:, :, None, :] * k[None, None], 0.0)
        ),
        "it does not weight the heads (a plain sum of ReLU(q[t, h] · k[s]) over h): each head "
        "is multiplied by the query's weight w[t, h]": relu.sum(1),
        "it takes the mean over the heads: the heads are weighted by w[t, h] and summed, "
        "Σ_h w[t, h] · ReLU(q[t, h] · k[s])": relu.mean(1),
        "it divides the weighted sum by H (a mean over the heads): the weighted heads are "
        "summed, no division": right / H,
        "it takes the max over the heads: the heads' weighted scores are summed, "
        "Σ_h w[t, h] · ReLU(q[t, h] · k[s])": weighted.max(1),
        "it takes the max of the unweighted heads: the heads' scores are weighted by w[t, h] "
        "and summed": relu.max(1),
        "it applies a softmax over the keys: the index scores are only compared with each "
        "other to choose the top k, so there is no softmax": _softmax(right, axis=-1),
        "it divides by √D, as the library's LightningIndexer does inside the ReLU: this "
        "exercise asks for the scores without a scale": right / np.sqrt(D),
        "it multiplies the weights by 1/√H, as the library's LightningIndexer does: this "
        "exercise asks for the scores without a scale": right / np.sqrt(H),
        "it applies both of the library's scales (1/√D in the ReLU, 1/√H on w), as "
        "LightningIndexer does: this exercise asks for the scores without a scale": right
        / np.sqrt(H * D),
        "it reshapes the (n, H, m) dot products to (n, m, H) where it needs a transpose: a "
        "reshape keeps the numbers in memory order and scrambles heads and keys (use "
        "np.swapaxes, or einsum)": np.einsum("th,tsh->ts", w, scrambled),
        "it applies a causal mask (-inf for s > t): this exercise asks for the scores of "
        "every key, with no mask": np.where(np.tril(np.ones((n, m), dtype=bool)), right, -np.inf),
        "it applies a causal mask aligned to the last key: this exercise asks for the scores "
        "of every key, with no mask": np.where(
            np.tril(np.ones((n, m), dtype=bool), k=m - n), right, -np.inf
        ),
    }
    if m <= n:  # w[s] has a row for every key only where there are no more keys than queries
        mistakes[
            "it weights by the key's row of w (w[s, h]): the weights belong to the query, "
            "w[t, h], one per query and head (w is (n, H))"
        ] = np.einsum("sh,ths->ts", w[:m], relu)
    return mistakes


def _score_other_shapes(q, k, w) -> dict[tuple, tuple[dict, str]]:
    """For each wrong shape a usual mistake gives: (its mistakes, the message when none fits)."""
    n, H, _ = q.shape
    m = len(k)
    relu = np.maximum(_dots(q, k), 0.0)  # (n, H, m)
    right = index_scores_reference(q, k, w)  # (n, m)
    weighted = w[:, :, None] * relu  # (n, H, m)
    return {
        (m, n): (
            {
                f"the scores are transposed ((m, n) = {(m, n)}): one row per query, one column "
                "per key, (n, m)": right.T,
            },
            f"the result has shape (m, n) = {(m, n)}: the scores have one row per query and one "
            f"column per key, (n, m) = {(n, m)}",
        ),
        (n, H, m): (
            {
                f"it returns each head's weighted scores (n, H, m) = {(n, H, m)}: sum them "
                "over the heads": weighted,
                f"it returns each head's ReLU(q[t, h] · k[s]), (n, H, m) = {(n, H, m)}: weight "
                "them by w[t, h] and sum over the heads": relu,
            },
            f"the result has shape (n, H, m) = {(n, H, m)}, one score per head: the heads are "
            "weighted and summed into one score per query and key",
        ),
        (n, m, H): (
            {
                f"it returns each head's weighted scores (n, m, H) = {(n, m, H)}: sum them "
                "over the heads": weighted.transpose(0, 2, 1),
            },
            f"the result has shape (n, m, H) = {(n, m, H)}, one score per head: the heads are "
            "weighted and summed into one score per query and key",
        ),
    }


def _judge_scores(fn, args) -> tuple[str | None, str | None]:
    """(problem or None, note or None) for one case of the index scores."""
    result, problem, note = run_as(fn, "numpy", *args, names=("q", "k", "w"))
    if problem:
        return problem, None
    q, k, _ = args
    shape = (len(q), len(k))  # (n, m)
    expected = index_scores_reference(*args)
    return judge_array(
        result,
        shape,
        expected,
        _score_other_shapes(*args),
        lambda: _score_mistakes(*args),
        "Σ_h w[t, h] · ReLU(q[t, h] · k[s])",
        _mismatch,
        note,
    )


@checker("index_scores")
def check_index_scores(fn):
    """Check fn(q (n, H, D), k (m, D), w (n, H)) -> scores (n, m), scores[t, s] =
    Σ_h w[t, h] · ReLU(q[t, h] · k[s]): no scale, no mask (the library's LightningIndexer
    divides these by √(H·D)). On n = 5 queries against m = 7 keys, then n = 8 against m = 6,
    where a weight read from the key's row, w[s], gives numbers instead of an error."""
    notes = []
    for seed in range(len(SCORE_CASES)):
        problem, note = _judge_scores(fn, _score_inputs(seed))
        if problem:
            return _named_elsewhere(fn, seed, problem) or problem
        notes.append(note)
    return first_note(notes)


def _named_elsewhere(fn, seed: int, problem: str) -> str | None:
    """For an answer that raised on case `seed`: the mistake another case, or a square probe
    (n = m), names, with the error (weighting by the key's row of w, w[s], raises where there are
    more keys than queries, and in einsum wherever n != m), or None."""
    if not problem.startswith(GENERIC[0]):
        return None
    others = [_score_inputs(other) for other in range(len(SCORE_CASES)) if other != seed]
    for args in [*others, _score_inputs(len(SCORE_CASES), SQUARE)]:
        named, _ = _judge_scores(fn, args)
        if named is not None and not named.startswith(GENERIC):
            n, m, _, _ = SCORE_CASES[seed]
            raised = problem.removeprefix("your function ")
            return f"{named} (with n = {n} queries and m = {m} keys it {raised})"
    return None


# ------------------------------------------------------------------------------- causal top-k

# (N, k): k below N twice, then above N, where every earlier key is chosen; each case's scores
# are drawn with its seed in MASK_SEEDS, on which every catalogued mask differs from the right
# one and from every other (tests/exercises/test_nb18.py checks it)
MASK_CASES = ((7, 3), (9, 4), (6, 8))
MASK_SEEDS = (2, 6, 3)


def _mask_inputs(case: int):
    """scores (N, N) and k of a case: every entry finite, no two of a row closer than 1e-3 (so
    float32 keeps their order)."""
    N, k = MASK_CASES[case]
    rng = np.random.default_rng(MASK_SEEDS[case])
    return rng.normal(size=(N, N)), k  # (N, N): scores of both signs, the future included


def _causal(N: int) -> np.ndarray:
    return np.tril(np.ones((N, N), dtype=bool))  # (N, N): s <= t


def _top(scores, k: int, axis: int = -1, lowest: bool = False) -> np.ndarray:
    """True at the k largest (or smallest) finite entries along `axis` (all of them if fewer)."""
    x = np.moveaxis(np.asarray(scores, dtype=float), axis, -1)  # (..., N)
    order = np.argsort(x if lowest else -x, axis=-1, kind="stable")  # best first
    ranks = np.argsort(order, axis=-1, kind="stable")  # each entry's place in that order
    chosen = (ranks < k) & np.isfinite(x)
    return np.moveaxis(chosen, -1, axis)


def causal_topk_mask_reference(scores, k: int) -> np.ndarray:
    N = len(scores)
    masked = np.where(_causal(N), scores, -np.inf)  # (N, N): the future blocked
    return _top(masked, k)  # (N, N) bool, True = may attend


def _mask_mistakes(scores, k: int) -> dict[str, np.ndarray]:
    """Mistakes whose mask has the right shape (N, N)."""
    N = len(scores)
    causal = _causal(N)
    past = np.where(causal, scores, -np.inf)  # (N, N): keys 0 .. t
    before = np.where(np.tril(causal, -1), scores, -np.inf)  # (N, N): keys 0 .. t - 1
    right = causal_topk_mask_reference(scores, k)
    t, s = np.arange(N)[:, None], np.arange(N)[None, :]
    eye = np.eye(N, dtype=bool)
    return {
        "it is inverted: True must mark the keys a query MAY attend to (the chosen ones)": ~right,
        "it chooses the top k among ALL keys, then blocks the future: a query whose best keys "
        "lie in its future keeps fewer than k; block the future first (-inf for s > t), "
        "then choose the k best of keys 0 .. t": _top(scores, k) & causal,
        "it is not causal: it chooses the top k among all N keys, the future included; only "
        "keys s <= t may be chosen": _top(scores, k),
        "it chooses the k LOWEST scores: the indexer keeps the keys of highest score": _top(
            past, k, lowest=True
        ),
        "it chooses along the query axis (the k best queries of each column): each query, a "
        "row, chooses its k best keys among the columns 0 .. t": _top(past, k, axis=0),
        "the mask is transposed: rows are the queries and columns the keys, True at (t, s) for "
        "s <= t": right.T,
        "it always adds the query's own key to the k chosen (k + 1 keys where it was not "
        "among them): each query keeps exactly the k best of keys 0 .. t, itself only if it "
        "is among them": right | eye,
        "it chooses k of the keys before the query and adds its own key (k + 1 keys): the "
        "query's own key competes with the others, the k best of keys 0 .. t": _top(before, k)
        | eye,
        "it never lets a query choose its own key (only s < t): keys 0 .. t, the query's own "
        "token included, compete": _top(before, k),
        "it keeps k + 1 keys: each query keeps the k best": _top(past, k + 1),
        "it keeps k - 1 keys: each query keeps the k best": _top(past, k - 1),
        "it keeps the last k keys (a sliding window): the indexer keeps the k keys of highest "
        "score among 0 .. t, wherever they are": causal & (t - s < k),
        "it ignores k (every key s <= t): each query keeps only the k best of its keys": causal,
    }


def _read_mask(result, N: int, k: int, scores) -> tuple[np.ndarray | None, str | None]:
    """A learner's mask as a numpy bool array (N, N), or (None, what is wrong with it)."""
    if isinstance(result, (tuple, list)) and len(result) == 2 and _shape(result[1]):
        return None, (
            "it returns a pair, as torch.topk's (values, indices) or causal_topk's (indices, "
            "mask): return the bool mask (N, N) alone"
        )
    try:
        values = to_numpy(result)
    except (TypeError, ValueError, RuntimeError):
        return None, f"expected a bool mask (N, N) = {(N, N)}; got {type(result).__name__}"
    if values.dtype == object or values.dtype.kind not in "biuf":
        return None, f"expected a bool mask (N, N) = {(N, N)}; got {type(result).__name__}"
    if k < N and values.shape == (N, k):
        return None, (
            f"it returns the chosen keys' indices, shape (N, k) = {values.shape}: the exercise "
            f"asks for the mask (N, N) = {(N, N)}, True at each query's chosen keys "
            "(mask[t, indices[t]] = True)"
        )
    if values.shape != (N, N):
        return None, f"expected a bool mask (N, N) = {(N, N)}; got shape {values.shape}"
    if values.dtype.kind == "b":
        return values, None
    right = causal_topk_mask_reference(scores, k)
    if values.dtype.kind == "f" and np.isin(values, (0.0, -np.inf)).all():
        return None, (
            "it returns an additive float mask (0 where allowed, -inf where blocked): the "
            "exercise asks for a bool mask, True = may attend (mask == 0 turns it into one)"
        )
    shown = getattr(result, "dtype", values.dtype)
    if np.isin(values, (0, 1)).all():
        verdict = "the right keys" if np.array_equal(values == 1, right) else "0s and 1s"
        return None, (
            f"the mask has dtype {shown} ({verdict}): return a bool mask, True = may attend "
            "(.astype(bool), or a tensor's .bool()); attention functions add a float mask to "
            "the scores, where 1 blocks nothing"
        )
    return None, f"the mask has dtype {shown}; expected bool, True = may attend"


def _judge_mask(fn, scores, k: int) -> tuple[str | None, str | None]:
    """(problem or None, note or None) for one case of the causal top-k mask."""
    N = len(scores)
    result, problem, note = run_as(fn, "numpy", scores, k, names=("scores", "k"))
    if problem:
        if k > N and any(w in problem for w in ("out of range", "out of bounds", "kth")):
            return (
                f"with k = {k} above the N = {N} keys it {problem.removeprefix('your function ')}"
                ": while a query has t + 1 <= k keys it keeps all of them (choose min(k, t + 1))"
            ), None
        return problem, None
    mask, problem = _read_mask(result, N, k, scores)
    if problem:
        return problem, None
    right = causal_topk_mask_reference(scores, k)
    if np.array_equal(mask, right):
        return None, note
    named = diagnose(mask.astype(float), _mask_mistakes(scores, k))
    if named:
        return named, None
    rows = np.flatnonzero((mask != right).any(axis=1))
    return (
        f"wrong keys for N = {N}, k = {k}, first in row t = {rows[0]}: query t may attend "
        "key s exactly when s <= t and s is among the k highest-scoring of keys 0 .. t"
    ), None


@checker(
    "causal_topk_mask",
    writes=(
        Library(
            "mha_lib.sparse_attention.indexer",
            "causal_topk",
            "mha_lib.sparse_attention.causal_topk",
            load=False,
        ),
    ),
)
def check_causal_topk_mask(fn):
    """Check fn(scores (N, N), k) -> bool (N, N), True where s <= t and s is among the k
    highest-scoring of keys 0 .. t; on N = 7, k = 3, on N = 9, k = 4 and on N = 6, k = 8 (every
    earlier key)."""
    notes = []
    for case in range(len(MASK_CASES)):
        problem, note = _judge_mask(fn, *_mask_inputs(case))
        if problem:
            return problem
        notes.append(note)
    return first_note(notes)


# ------------------------------------------------------------------------------- the key cache

# (layers, batch, tokens, index_n_heads, index_head_dim, bytes_per_number): DeepSeek-V3.2's
# indexer (61 layers, 64 heads of 128, FP8 keys) at 128K tokens, then small sizes that all
# differ; together the cases tell every catalogued formula apart (tests/exercises/test_nb18.py
# checks it)
CACHE_CASES = ((61, 1, 131072, 64, 128, 1), (3, 5, 11, 4, 7, 2), (4, 2, 100, 8, 16, 4))
MLA_LATENT = 512 + 64  # DeepSeek's r + d_R: what MLA caches per token and layer


def indexer_cache_bytes_reference(L, B, T, H, D, nbytes) -> int:
    return L * B * T * D * nbytes


def _cache_mistakes(L, B, T, H, D, nbytes) -> dict[str, float]:
    right = indexer_cache_bytes_reference(L, B, T, H, D, nbytes)
    return {
        "it multiplies by index_n_heads: the H index heads share ONE key per token (each has "
        "its own query, not its own key)": right * H,
        "it counts keys AND values (x 2), as a KV cache does: the indexer only scores keys, "
        "so it caches keys and no values": right * 2,
        "it counts keys and values for every index head (x 2 x index_n_heads): the indexer "
        "caches one key per token, shared by the heads, and no values": right * 2 * H,
        "it counts one layer: every layer has its own indexer, so its own keys": right / L,
        "it leaves out the batch: each sequence keeps its own keys": right / B,
        "it leaves out the tokens: one key is kept for every token seen": right / T,
        "it prices MLA's latent (r + d_R = 512 + 64 numbers) instead: the question asks for "
        "the indexer's keys, index_head_dim numbers per token": right / D * MLA_LATENT,
        "it adds MLA's latent (512 + 64 numbers): the question asks for the indexer's keys "
        "alone, index_head_dim numbers per token": right / D * (D + MLA_LATENT),
        "it caches the weights w too (index_head_dim + index_n_heads numbers): the weights "
        "belong to the query, made from the new token and never cached": right / D * (D + H),
        "it splits the key among the heads (index_head_dim / index_n_heads): each head uses "
        "the whole key of index_head_dim numbers": right / H,
        "it counts bits (x 8): the question asks for bytes": right * 8,
        "it counts numbers, not bytes: multiply by bytes_per_number": right / nbytes,
        "it uses index_head_dim = 128, DeepSeek-V3.2's, not the argument: use the arguments": right
        / D
        * 128,
        "it returns megabytes (/ 10⁶): the question asks for bytes": right / 1e6,
        "it returns mebibytes (/ 2²⁰): the question asks for bytes": right / 2**20,
        "it counts one token more than there are (tokens + 1)": right / T * (T + 1),
    }


@checker("indexer_cache_bytes")
def check_indexer_cache_bytes(fn):
    """Check fn(layers, batch, tokens, index_n_heads, index_head_dim, bytes_per_number) -> a
    number of bytes (an int, a float, a numpy number or a 0-d tensor)."""
    return judge_byte_counts(
        fn,
        CACHE_CASES,
        indexer_cache_bytes_reference,
        _cache_mistakes,
        "layers, batch, tokens, index_n_heads, index_head_dim, bytes_per_number",
        "layers · batch · tokens · index_head_dim · bytes_per_number",
        "return one number, the bytes of the whole cache",
    )
