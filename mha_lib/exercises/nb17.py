"""Checkers for notebook 17 (cross-attention on real weights: Whisper base, the series' own
encoder-decoder).

float64 numpy arrays and Python numbers in, numpy arrays, torch tensors or numbers out (an
answer written for torch tensors only is run again on tensors and passes with a note):
- `check_cross_attention(fn)`: fn(X, E, W_Q, W_K, W_V) -> the output (T, d_v) of ONE head of
  cross-attention: queries from the decoder's states X (T, C), keys and values from the
  encoder's output E (S, C), W_Q and W_K (C, d_k), W_V (C, d_v):
  softmax(X W_Q (E W_K)ᵀ / √d_k) E W_V, with NO mask (every token may look at every frame);
- `check_dtw_totals(fn)`: fn(cost) -> the table D (T + 1, F + 1) of the cheapest totals of
  dynamic time warping over cost (T, F), as notebook 17 and `mha_lib.speech.timing.dtw` define
  it: D[0, 0] = 0, D[i, 0] = D[0, j] = +inf for i, j > 0, and for i, j >= 1
  D[i, j] = cost[i-1, j-1] + min(D[i-1, j-1], D[i-1, j], D[i, j-1]) (a step moves one token
  and one frame, one token, or one frame);
- `check_cross_cache_bytes(fn)`: fn(decoder_layers, encoder_layers, C, S, B, bytes_per_number)
  -> the bytes of an encoder-decoder's cross-attention cache: every DECODER layer keeps the
  keys and the values of the S encoder frames, C numbers each, for each of B utterances:
  2 · decoder_layers · B · S · C · bytes_per_number.

The sizes all differ (T != S != C != d_k != d_v, T != F), so a swap of roles or axes shows in
the shape, and each shape a usual mistake gives is named; an answer that multiplies by W.T, as
torch's nn.Linear stores its weight (out, in), raises on these sizes and is named too. The
cross-attention is also asked with an encoder output of many more frames than tokens (S = 30),
as in Whisper (1,500 frames).
The cache's cases make every catalogued formula give other numbers. An answer is judged to the
precision of its own dtype (`TOLERANCE`): float64 tightly, float32 to about 1e-5; a float16
answer right to float16's precision is refused with a message that says so.
"""

from __future__ import annotations

import numpy as np

from ._base import (
    TOLERANCE,
    as_array,
    checker,
    diagnose,
    first_note,
    judge_array,
    judge_byte_counts,
    precision,
    run_as,
    within,
)

__all__ = ["check_cross_attention", "check_cross_cache_bytes", "check_dtw_totals"]


def _mismatch(value, expected, what: str, prec: str) -> str:
    """The message for values that match no catalogued mistake."""
    finite = np.isfinite(expected)
    if finite.all() and not np.all(np.isfinite(value)):
        return f"the result contains inf or NaN; expected {what}"
    if np.isnan(value).any() or not np.array_equal(np.isfinite(value), finite):
        return (
            f"the result's inf and NaN cells are not the table's (+inf in the first row and "
            f"column, except D[0, 0] = 0, and nowhere else here); expected {what}"
        )
    value, expected = value[finite], expected[finite]
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


# ------------------------------------------------------------------------------- cross-attention

T, S, C, D_K, D_V = 4, 9, 6, 3, 5  # all different: a swap of roles or axes shows in the shape
S_LONG = 30  # an encoder output of many more frames than tokens, as Whisper's 1,500


def _cross_inputs(seed: int, frames: int = S):
    """X (T, C), E (frames, C), W_Q, W_K (C, d_k), W_V (C, d_v): scores of order 1, so that
    the weights are neither uniform nor one-hot and every mistake moves the output."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(T, C))  # (T, C): the decoder's states
    E = rng.normal(size=(frames, C))  # (S, C): the encoder's output
    W_Q, W_K = (rng.normal(size=(C, D_K)) / np.sqrt(C) for _ in range(2))  # (C, d_k)
    W_V = rng.normal(size=(C, D_V)) / np.sqrt(C)  # (C, d_v)
    return X, E, W_Q, W_K, W_V


def _softmax(x, axis=-1):
    z = np.exp(x - x.max(axis=axis, keepdims=True))
    return z / z.sum(axis=axis, keepdims=True)


def _weights(Q, K, scale=None, mask=None, axis=-1):
    """softmax over `axis` of Q Kᵀ · scale (1/√d_k by default), -inf where mask is False."""
    scores = Q @ K.T * (1 / np.sqrt(Q.shape[-1]) if scale is None else scale)  # (T, S)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    if axis is None:  # over the whole matrix
        return _softmax(scores.ravel()).reshape(scores.shape)
    return _softmax(scores, axis)


def cross_weights_reference(X, E, W_Q, W_K, W_V):
    return _weights(X @ W_Q, E @ W_K)  # (T, S)


def cross_attention_reference(X, E, W_Q, W_K, W_V):
    return cross_weights_reference(X, E, W_Q, W_K, W_V) @ (E @ W_V)  # (T, d_v)


def _cross_mistakes(X, E, W_Q, W_K, W_V) -> dict[str, np.ndarray]:
    """Mistakes whose output has the right shape (T, d_v)."""
    Q, K, V = X @ W_Q, E @ W_K, E @ W_V  # (T, d_k), (S, d_k), (S, d_v)
    t, s = len(X), len(E)
    d_k, d_v, c = Q.shape[-1], V.shape[-1], X.shape[-1]
    top_left = np.tril(np.ones((t, s), dtype=bool))  # key j <= query i
    bottom_right = np.tril(np.ones((t, s), dtype=bool), k=s - t)  # j <= i + S - T
    weights_and_values = [
        (
            "it applies a causal mask, which belongs to the decoder's SELF-attention: in "
            "cross-attention every token may look at every encoder frame, so there is no mask",
            _weights(Q, K, mask=top_left),
            V,
        ),
        (
            "it applies a causal mask aligned to the last frame: cross-attention has no mask, "
            "every token looks at every encoder frame",
            _weights(Q, K, mask=bottom_right),
            V,
        ),
        (
            "it takes the keys and values from X: that is self-attention; in cross-attention "
            "the keys and values come from the encoder's output E (E W_K, E W_V)",
            _weights(Q, X @ W_K),
            X @ W_V,
        ),
        (
            "it does not scale the scores: divide X W_Q (E W_K)ᵀ by √d_k",
            _weights(Q, K, scale=1.0),
            V,
        ),
        (
            "it divides the scores by √C, the model's width: the scale is √d_k, the width of "
            "one head's queries and keys",
            _weights(Q, K, scale=1 / np.sqrt(c)),
            V,
        ),
        ("it divides the scores by d_k: the scale is √d_k", _weights(Q, K, scale=1 / d_k), V),
        (
            "it divides the scores by √d_v: the scale is √d_k, the width of the queries and "
            "keys whose dot products are scaled",
            _weights(Q, K, scale=1 / np.sqrt(d_v)),
            V,
        ),
        (
            "it multiplies the scores by √d_k: divide by it",
            _weights(Q, K, scale=np.sqrt(d_k)),
            V,
        ),
        (
            "its softmax runs over the queries' axis (each column sums to 1): each token's row "
            "of weights over the S frames must sum to 1 (softmax over the last axis, the keys')",
            _weights(Q, K, axis=0),
            V,
        ),
        (
            "its softmax runs over the whole (T, S) matrix at once: each token's row must sum "
            "to 1 (softmax over the last axis)",
            _weights(Q, K, axis=None),
            V,
        ),
        (
            "it leaves out the softmax: the scores become weights through a softmax over the "
            "frames",
            Q @ K.T / np.sqrt(d_k),
            V,
        ),
        ("it makes the keys with W_Q (E W_Q): the keys are E W_K", _weights(Q, E @ W_Q), V),
    ]
    return {message: w @ values for message, w, values in weights_and_values}  # (T, d_v) each


def _cross_other_shapes(X, E, W_Q, W_K, W_V) -> dict[tuple, tuple[dict, str]]:
    """For each wrong shape a usual mistake gives: (its mistakes, the message when none fits)."""
    Q, K, V = X @ W_Q, E @ W_K, E @ W_V
    t, s, c = len(X), len(E), X.shape[-1]
    d_k, d_v = Q.shape[-1], V.shape[-1]
    weights = _weights(Q, K)  # (T, S)
    roles = (
        f"the result has shape (S, d_v) = {(s, d_v)}, one row per encoder frame: in "
        "cross-attention the queries come from the decoder's states X, one row per token, "
        "and the keys and values from the encoder's output E"
    )
    return {
        (s, d_v): (
            {
                "the roles are swapped: it takes the queries from E and the keys and values "
                f"from X; {roles}": _weights(E @ W_Q, X @ W_K) @ (X @ W_V),
                "it takes the queries, keys and values all from E, the encoder's "
                f"self-attention; {roles}": _weights(E @ W_Q, K) @ V,
            },
            roles,
        ),
        (t, s): (
            {
                f"it returns the weights (T, S) = {(t, s)}, not the output: multiply them by "
                "the values E W_V": weights,
            },
            f"the result has shape (T, S) = {(t, s)}, the weights' shape: the output is the "
            "weights times the values E W_V, (T, d_v)",
        ),
        (s, t): (
            {
                f"it returns the weights, transposed ((S, T) = {(s, t)}), not the output: "
                "multiply the (T, S) weights by the values E W_V": weights.T,
            },
            f"the result has shape (S, T) = {(s, t)}: the output is (T, d_v), the (T, S) "
            "weights times the values E W_V",
        ),
        (t, c): (
            {
                "it forgets W_V: the values are E W_V, not E itself": weights @ E,
            },
            f"the result has shape (T, C) = {(t, c)}: the values are E W_V, d_v = {d_v} "
            "numbers per frame",
        ),
        (t, d_k): (
            {"it uses the keys as values (E W_K): the values are E W_V": weights @ K},
            f"the result has shape (T, d_k) = {(t, d_k)}: the values are E W_V, of width d_v",
        ),
        (d_v, t): (
            {
                f"the output is transposed ((d_v, T) = {(d_v, t)}): one row per decoder "
                "token, (T, d_v)": (weights @ V).T,
            },
            f"the result has shape (d_v, T) = {(d_v, t)}: the output has one row per decoder "
            f"token, (T, d_v) = {(t, d_v)}",
        ),
    }


def _linear_layout(fn, args) -> str | None:
    """Name an answer that raised because it multiplies by W.T, as x @ W.T computes nn.Linear
    (whose weight is stored (out, in)): it is right on the weights transposed."""
    X, E, W_Q, W_K, W_V = args
    result, problem, _ = run_as(fn, "numpy", X, E, W_Q.T, W_K.T, W_V.T)
    if problem:
        return None
    value, problem = as_array(result, (len(X), W_V.shape[-1]))
    expected = cross_attention_reference(*args)
    if problem or not within(value, expected, precision(result)):
        return None
    return (
        "it multiplies by the transposed weights (X @ W_Q.T), as a torch nn.Linear's (out, in) "
        "weight is used: here W_Q and W_K are (C, d_k) and W_V is (C, d_v), so Q = X @ W_Q, "
        "K = E @ W_K, V = E @ W_V"
    )


def _judge_cross(fn, args) -> tuple[str | None, str | None]:
    """(problem or None, note or None) for one case of the cross-attention."""
    names = ("X", "E", "W_Q", "W_K", "W_V")
    result, problem, note = run_as(fn, "numpy", *args, names=names)
    if problem:
        return _linear_layout(fn, args) or problem, None
    shape = (len(args[0]), args[4].shape[-1])  # (T, d_v)
    expected = cross_attention_reference(*args)
    if isinstance(result, (tuple, list)) and len(result) == 2:
        first = getattr(result[0], "shape", None)
        if first is not None and tuple(first) == shape:
            return (
                "it returns a pair (output, weights), as mha_lib.scaled_dot_product_attention "
                "does: return the output (T, d_v) alone (its [0])"
            ), None
    return judge_array(
        result,
        shape,
        expected,
        _cross_other_shapes(*args),
        lambda: _cross_mistakes(*args),
        "softmax(X W_Q (E W_K)ᵀ / √d_k) E W_V",
        _mismatch,
        note,
    )


@checker("cross_attention")
def check_cross_attention(fn):
    """Check fn(X (T, C), E (S, C), W_Q (C, d_k), W_K (C, d_k), W_V (C, d_v)) -> (T, d_v), on
    two encoder outputs of S = 9 frames and one of S = 30."""
    notes = []
    for seed, frames in ((0, S), (1, S), (2, S_LONG)):
        problem, note = _judge_cross(fn, _cross_inputs(seed, frames))
        if problem:
            return problem
        notes.append(note)
    return first_note(notes)


# ------------------------------------------------------------------------------- DTW's totals


def _dtw_inputs(seed: int):
    """cost (T, F), T != F, no two totals tied: uniform costs in (0, 1), the negated weights
    of the notebook's alignment (all below 0), and normal ones of both signs."""
    rng = np.random.default_rng(seed)
    if seed == 0:
        return rng.uniform(0.05, 1.0, size=(4, 7))
    if seed == 1:
        return -rng.uniform(0.05, 1.0, size=(6, 5))
    return rng.normal(size=(5, 9))


def _totals(cost, pick=np.min, edge=np.inf, corner=0.0, moves="dul", add=True, shift=False):
    """The DTW table, with the knobs its mistakes turn: pick (np.min; np.max), the edges' value,
    D[0, 0], the moves allowed (d diagonal, u one token, l one frame), the cost added or not,
    and the cost read one cell early (cost[i-2, j-2] where D[i, j] needs cost[i-1, j-1])."""
    t, f = cost.shape
    used = np.roll(cost, (1, 1), axis=(0, 1)) if shift else cost
    D = np.full((t + 1, f + 1), edge, dtype=float)
    D[0, 0] = corner
    for i in range(1, t + 1):
        for j in range(1, f + 1):
            before = {"d": D[i - 1, j - 1], "u": D[i - 1, j], "l": D[i, j - 1]}
            best = pick([before[m] for m in moves])
            D[i, j] = best + (used[i - 1, j - 1] if add else 0.0)
    return D


def dtw_totals_reference(cost):
    return _totals(cost)


def _dtw_mistakes(cost) -> dict[str, np.ndarray]:
    """Mistakes whose table has the right shape (T + 1, F + 1)."""
    return {
        # leaving out the diagonal and taking the max give the same table: every total +inf
        "every total is +inf, nothing leads out of D[0, 0] = 0: either it leaves out the "
        "diagonal move D[i-1, j-1] (only the diagonal leads from D[0, 0] to D[1, 1]; a step may "
        "move one token and one frame at once), or it takes the max, which picks the +inf of "
        "the first row and column (the cheapest path takes the min)": _totals(cost, moves="ul"),
        "it takes the max (with -inf edges): DTW keeps the cheapest total, the min of D[i-1, j-1], "
        "D[i-1, j] and D[i, j-1]": _totals(cost, pick=np.max, edge=-np.inf),
        "it leaves out the token move D[i-1, j] (one token, the same frame): several tokens "
        "may be said within one frame": _totals(cost, moves="dl"),
        "it leaves out the frame move D[i, j-1] (one frame, the same token): a token lasts "
        "several frames": _totals(cost, moves="du"),
        "its first row and column are 0: only D[0, 0] is 0, the other cells of the first row "
        "and column are +inf, so every path starts at (0, 0)": _totals(cost, edge=0.0),
        "it never adds the cost: D[i, j] = cost[i-1, j-1] + the min of the three totals "
        "before": _totals(cost, add=False),
        "it adds the cost of the cell before (cost[i-2, j-2], wrapping around at the start): "
        "D has one more row and column than cost, so D[i, j] adds cost[i-1, j-1]": _totals(
            cost, shift=True
        ),
        "it leaves D[0, 0] at +inf: the path starts there with a total of 0": _totals(
            cost, corner=np.inf
        ),
    }


def _dtw_other_shape(value, cost, prec) -> str | None:
    """Name an answer of the wrong shape: (T, F), transposed, or only the last total."""
    t, f = cost.shape
    right = dtw_totals_reference(cost)
    if value.shape == (t, f):
        if within(value, right[1:, 1:], prec):
            return (
                f"it returns the (T, F) = {(t, f)} table without its first row and column: "
                f"the table is (T + 1, F + 1) = {(t + 1, f + 1)}, D[0, 0] = 0 and the rest of "
                "the first row and column +inf"
            )
        return (
            f"the result has shape (T, F) = {(t, f)}: the table has one more row and column, "
            f"(T + 1, F + 1) = {(t + 1, f + 1)}, whose first row and column start every path"
        )
    if value.shape == (f + 1, t + 1):
        if within(value, right.T, prec):
            return (
                f"the table is transposed ((F + 1, T + 1) = {(f + 1, t + 1)}): its rows are "
                f"the tokens, (T + 1, F + 1) = {(t + 1, f + 1)}"
            )
        return (
            f"the result has shape (F + 1, T + 1) = {(f + 1, t + 1)}: the rows are the tokens, "
            f"(T + 1, F + 1) = {(t + 1, f + 1)}"
        )
    if value.size == 1:
        return (
            "it returns one number: the exercise asks for the whole table D "
            f"(T + 1, F + 1) = {(t + 1, f + 1)}, whose last cell D[T, F] is the path's total"
        )
    return None


def _dtw_edges(value, right) -> str | None:
    """Name an answer whose cells i, j >= 1 are right but whose first row or column is not."""
    if not np.allclose(value[1:, 1:], right[1:, 1:], rtol=1e-5, atol=1e-5):
        return None
    edges = np.r_[value[0, 1:], value[1:, 0]]
    if value[0, 0] != 0:
        return f"D[0, 0] is {value[0, 0]:g}: the path starts there with a total of 0"
    if np.all(np.isfinite(edges)) and np.all(edges > 1e3):
        return (
            f"its first row and column hold {edges.min():g}, a large number standing in for "
            "+inf: D[i, 0] = D[0, j] = np.inf (float('inf')), which no sum of costs reaches"
        )
    wrong = edges[edges != np.inf][0]
    return (
        f"its first row and column hold {wrong:g}: apart from D[0, 0] = 0 they are +inf, so "
        "every path starts at (0, 0)"
    )


@checker("dtw_totals")
def check_dtw_totals(fn):
    """Check fn(cost (T, F)) -> D (T + 1, F + 1) on three costs: positive, negative (the
    notebook's negated weights) and of both signs; T < F and T > F."""
    notes = []
    for seed in (0, 1, 2):
        cost = _dtw_inputs(seed)
        result, problem, note = run_as(fn, "numpy", cost, names=("cost",))
        if problem:
            if "out of bounds" in problem and "IndexError" in problem:
                return (
                    "it reads cost[i, j] for D[i, j]: D has one more row and column than cost, "
                    f"so D[i, j] adds cost[i-1, j-1] ({problem})"
                )
            return problem
        t, f = cost.shape
        value, problem = as_array(result, None, "an array")
        if problem:
            return problem
        prec = precision(result)
        if value.shape != (t + 1, f + 1):
            return _dtw_other_shape(value, cost, prec) or (
                f"expected shape (T + 1, F + 1) = {(t + 1, f + 1)}; got {value.shape}"
            )
        right = dtw_totals_reference(cost)
        if prec != "float16" and within(value, right, prec):
            notes.append(note)
            continue
        named = diagnose(value, _dtw_mistakes(cost), tol=max(1e-6, TOLERANCE[prec][0]))
        what = "D[i, j] = cost[i-1, j-1] + min(D[i-1, j-1], D[i-1, j], D[i, j-1])"
        if named or prec == "float16":
            return named or _mismatch(value, right, what, prec)
        return _dtw_edges(value, right) or _mismatch(value, right, what, prec)
    return first_note(notes)


# ------------------------------------------------------------------------------- the cross cache

# (decoder_layers, encoder_layers, C, S, B, bytes_per_number): Whisper tiny's width and 1,500
# frames with stacks of different depths, then Whisper small's width; together the cases tell
# every catalogued formula apart (tests/exercises/test_nb17.py checks it)
CACHE_CASES = ((4, 6, 384, 1500, 3, 2), (6, 4, 768, 750, 5, 4), (3, 7, 20, 11, 2, 8))


def cross_cache_bytes_reference(L_dec, L_enc, C, S, B, nbytes) -> int:
    return 2 * L_dec * B * S * C * nbytes


def _cache_mistakes(L_dec, L_enc, C, S, B, nbytes) -> dict[str, float]:
    right = cross_cache_bytes_reference(L_dec, L_enc, C, S, B, nbytes)
    return {
        "it leaves out the factor 2: the cache holds keys AND values": right / 2,
        "it uses encoder_layers: the cache is kept by each DECODER layer, whose "
        "cross-attention reads it (the encoder runs once and keeps nothing)": right / L_dec * L_enc,
        "it counts both stacks (encoder_layers + decoder_layers): only the decoder's layers "
        "keep a cross-attention cache": right / L_dec * (L_dec + L_enc),
        "it counts bits (x 8): the question asks for bytes": right * 8,
        "it counts numbers, not bytes: multiply by bytes_per_number": right / nbytes,
        "it leaves out the batch B: each utterance has its own encoder output, so its own "
        "keys and values": right / B,
        "it counts one layer: every decoder layer has its own W_K and W_V, so its own keys "
        "and values of the S frames": right / L_dec,
        "it leaves out S: keys and values are kept for every one of the S encoder frames": right
        / S,
        "it counts the weights W_K and W_V (C x C each), not the keys and values they make: "
        "the cache holds S frames x C numbers": right / S * C / B,
        "it uses 1,500 frames, Whisper's, not S: use the arguments": right / S * 1500,
        "it uses C = 512, Whisper base's width, not C: use the arguments": right / C * 512,
        "it returns megabytes (/ 10⁶): the question asks for bytes": right / 1e6,
        "it returns mebibytes (/ 2²⁰): the question asks for bytes": right / 2**20,
        "it counts one more decoder layer than there are": right / L_dec * (L_dec + 1),
    }


@checker("cross_cache_bytes")
def check_cross_cache_bytes(fn):
    """Check fn(decoder_layers, encoder_layers, C, S, B, bytes_per_number) -> a number of bytes
    (an int, a float, a numpy number or a 0-d tensor)."""
    return judge_byte_counts(
        fn,
        CACHE_CASES,
        cross_cache_bytes_reference,
        _cache_mistakes,
        "decoder_layers, encoder_layers, C, S, B, bytes_per_number",
        "2 · decoder_layers · B · S · C · bytes_per_number",
        "add them up into one number of bytes, the keys' and the values' together",
    )
