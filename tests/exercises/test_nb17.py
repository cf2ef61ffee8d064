"""The checkers of notebook 17 accept right answers (numpy and torch, float64 and float32) and
name the usual mistakes: every wrong answer catalogued here gets a message naming its mistake
(the test asserts a distinctive part of it), never the generic "wrong values"."""

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_lib.attention import scaled_dot_product_attention, softmax
from mha_lib.exercises._base import GENERIC
from mha_lib.exercises.nb17 import (
    CACHE_CASES,
    S_LONG,
    S,
    _cache_mistakes,
    _cross_inputs,
    _cross_mistakes,
    _dtw_inputs,
    _dtw_mistakes,
    check_cross_attention,
    check_cross_cache_bytes,
    check_dtw_totals,
    cross_attention_reference,
    cross_cache_bytes_reference,
    dtw_totals_reference,
)
from mha_lib.speech.timing import dtw


def verdict(capsys) -> str:
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return out


# cross_attention --------------------------------------------------------------------------------


def _attend(Q, K, V, scale=None, axis=-1, mask=None):
    scores = Q @ K.T * (1 / np.sqrt(Q.shape[-1]) if scale is None else scale)  # (T, S)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    w = np.exp(scores - scores.max(axis=axis, keepdims=True))
    return w / w.sum(axis=axis, keepdims=True) @ V


def cross_numpy(X, E, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, E @ W_K, E @ W_V  # (T, d_k), (S, d_k), (S, d_v)
    scores = Q @ K.T / np.sqrt(K.shape[-1])  # (T, S)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights @ V  # (T, d_v)


def cross_einsum(X, E, W_Q, W_K, W_V):
    scores = np.einsum("tc,ck,sd,dk->ts", X, W_Q, E, W_K) / np.sqrt(W_Q.shape[1])
    return softmax(scores) @ E @ W_V


def cross_series_function(X, E, W_Q, W_K, W_V):  # notebook 01's function: allowed
    return scaled_dot_product_attention(X @ W_Q, E @ W_K, E @ W_V)[0]


def cross_torch(X, E, W_Q, W_K, W_V):
    X, E, W_Q, W_K, W_V = (torch.as_tensor(a) for a in (X, E, W_Q, W_K, W_V))
    Q, K, V = X @ W_Q, E @ W_K, E @ W_V
    return torch.softmax(Q @ K.T / W_Q.shape[1] ** 0.5, dim=-1) @ V


def cross_torch_only(X, E, W_Q, W_K, W_V):  # torch functions on what it is given
    Q, K, V = X @ W_Q, E @ W_K, E @ W_V
    return F.softmax(Q @ K.mT / Q.size(-1) ** 0.5, dim=-1) @ V


def cross_torch_sdpa(X, E, W_Q, W_K, W_V):  # no mask: is_causal stays False
    X, E, W_Q, W_K, W_V = (torch.as_tensor(a) for a in (X, E, W_Q, W_K, W_V))
    return F.scaled_dot_product_attention(X @ W_Q, E @ W_K, E @ W_V)


def cross_float32(X, E, W_Q, W_K, W_V):
    X, E, W_Q, W_K, W_V = (np.asarray(a, dtype=np.float32) for a in (X, E, W_Q, W_K, W_V))
    scores = (X @ W_Q) @ (E @ W_K).T / np.float32(np.sqrt(W_Q.shape[1]))  # stays float32
    return softmax(scores) @ (E @ W_V)


def cross_torch_float32(X, E, W_Q, W_K, W_V):
    X, E, W_Q, W_K, W_V = (torch.as_tensor(a, dtype=torch.float32) for a in (X, E, W_Q, W_K, W_V))
    return torch.softmax((X @ W_Q) @ (E @ W_K).T / W_Q.shape[1] ** 0.5, dim=-1) @ (E @ W_V)


@pytest.mark.parametrize(
    "fn",
    [
        cross_numpy,
        cross_einsum,
        cross_series_function,
        cross_torch,
        cross_torch_only,
        cross_torch_sdpa,
        cross_float32,
        cross_torch_float32,
    ],
)
def test_cross_attention_accepts_correct_forms(capsys, fn):
    assert check_cross_attention(fn)
    out = verdict(capsys)
    assert "✓ cross_attention: correct" in out
    if fn is cross_torch_only:
        assert "on torch tensors only" in out


def _causal(X, E, W_Q, W_K, W_V):  # the decoder's self-attention mask, (T, S) lower triangle
    mask = np.tril(np.ones((len(X), len(E)), dtype=bool))
    return _attend(X @ W_Q, E @ W_K, E @ W_V, mask=mask)


def _causal_torch(X, E, W_Q, W_K, W_V):  # torch's is_causal on T != S: the same triangle
    X, E, W_Q, W_K, W_V = (torch.as_tensor(a) for a in (X, E, W_Q, W_K, W_V))
    return F.scaled_dot_product_attention(X @ W_Q, E @ W_K, E @ W_V, is_causal=True)


def _causal_last(X, E, W_Q, W_K, W_V):
    mask = np.tril(np.ones((len(X), len(E)), dtype=bool), k=len(E) - len(X))
    return _attend(X @ W_Q, E @ W_K, E @ W_V, mask=mask)


def _weights_of(X, E, W_Q, W_K, W_V):
    return scaled_dot_product_attention(X @ W_Q, E @ W_K, E @ W_V)[1]


def _torch_linear(X, E, W_Q, W_K, W_V):  # nn.Linear's habit: F.linear(x, W) is x @ W.T
    X, E, W_Q, W_K, W_V = (torch.as_tensor(a) for a in (X, E, W_Q, W_K, W_V))
    Q, K, V = F.linear(X, W_Q), F.linear(E, W_K), F.linear(E, W_V)
    return torch.softmax(Q @ K.T / K.shape[-1] ** 0.5, dim=-1) @ V


def _in_place_scale(X, E, W_Q, W_K, W_V):
    X /= np.sqrt(W_Q.shape[1])  # the scale folded into the caller's X
    return _attend(X @ W_Q, E @ W_K, E @ W_V, scale=1.0)


CROSS_WRONG = [
    (_causal, "causal mask"),
    (_causal_torch, "causal mask"),
    (_causal_last, "causal mask aligned to the last frame"),
    (lambda X, E, Wq, Wk, Wv: _attend(X @ Wq, X @ Wk, X @ Wv), "keys and values from X"),
    (lambda X, E, Wq, Wk, Wv: _attend(E @ Wq, X @ Wk, X @ Wv), "roles are swapped"),
    (lambda X, E, Wq, Wk, Wv: _attend(E @ Wq, E @ Wk, E @ Wv), "all from E"),
    (lambda X, E, Wq, Wk, Wv: _attend(X @ Wq, E @ Wk, E @ Wv, scale=1.0), "does not scale"),
    (
        lambda X, E, Wq, Wk, Wv: _attend(X @ Wq, E @ Wk, E @ Wv, scale=X.shape[1] ** -0.5),
        "√C",
    ),
    (
        lambda X, E, Wq, Wk, Wv: _attend(X @ Wq, E @ Wk, E @ Wv, scale=1 / Wq.shape[1]),
        "divides the scores by d_k",
    ),
    (
        lambda X, E, Wq, Wk, Wv: _attend(X @ Wq, E @ Wk, E @ Wv, scale=Wv.shape[1] ** -0.5),
        "√d_v",
    ),
    (
        lambda X, E, Wq, Wk, Wv: _attend(X @ Wq, E @ Wk, E @ Wv, scale=Wq.shape[1] ** 0.5),
        "multiplies the scores by √d_k",
    ),
    (lambda X, E, Wq, Wk, Wv: _attend(X @ Wq, E @ Wk, E @ Wv, axis=0), "queries' axis"),
    (
        lambda X, E, Wq, Wk, Wv: (
            softmax(((X @ Wq) @ (E @ Wk).T / np.sqrt(Wq.shape[1])).ravel()).reshape(len(X), len(E))
            @ (E @ Wv)
        ),
        "whole (T, S) matrix",
    ),
    (
        lambda X, E, Wq, Wk, Wv: (X @ Wq) @ (E @ Wk).T / np.sqrt(Wq.shape[1]) @ (E @ Wv),
        "leaves out the softmax",
    ),
    (lambda X, E, Wq, Wk, Wv: _attend(X @ Wq, E @ Wq, E @ Wv), "keys with W_Q"),
    (_weights_of, "returns the weights (T, S)"),
    (lambda X, E, Wq, Wk, Wv: _weights_of(X, E, Wq, Wk, Wv).T, "weights, transposed"),
    (lambda X, E, Wq, Wk, Wv: _attend(X @ Wq, E @ Wk, E), "forgets W_V"),
    (lambda X, E, Wq, Wk, Wv: _attend(X @ Wq, E @ Wk, E @ Wk), "keys as values"),
    (lambda X, E, Wq, Wk, Wv: cross_numpy(X, E, Wq, Wk, Wv).T, "output is transposed"),
    (
        lambda X, E, Wq, Wk, Wv: scaled_dot_product_attention(X @ Wq, E @ Wk, E @ Wv),
        "a pair (output, weights)",
    ),
    (lambda X, E, Wq, Wk, Wv: cross_numpy(X, E, Wq.T, Wk.T, Wv.T), "transposed weights"),
    (_torch_linear, "transposed weights"),
    (_in_place_scale, "changes its argument X in place"),
    (
        lambda X, E, Wq, Wk, Wv: torch.as_tensor(cross_numpy(X, E, Wq, Wk, Wv)).half(),
        "float16's precision",
    ),
    (lambda X, E, Wq, Wk, Wv: np.round(cross_numpy(X, E, Wq, Wk, Wv), 3), "something rounds"),
    (lambda X, E, Wq, Wk, Wv: None, "not implemented"),
]


@pytest.mark.parametrize("fn, words", CROSS_WRONG)
def test_cross_attention_names_the_mistake(capsys, fn, words):
    assert not check_cross_attention(fn)
    out = verdict(capsys)
    assert out.startswith("✗ cross_attention:") and words in out, out
    assert not out.removeprefix("✗ cross_attention: ").startswith(GENERIC), out


def test_every_cross_attention_mistake_is_its_own_and_not_the_answer():
    """On each of the checker's cases, every catalogued mistake of the right shape differs from
    the right output and from every other mistake, so each is named by its own message."""
    for seed, frames in ((0, S), (1, S), (2, S_LONG)):
        args = _cross_inputs(seed, frames)
        rows = [("right", cross_attention_reference(*args)), *_cross_mistakes(*args).items()]
        for (a, va), (b, vb) in itertools.combinations(rows, 2):
            assert not np.allclose(va, vb, rtol=1e-4, atol=1e-4), (seed, a, b)


def test_cross_attention_asks_an_encoder_output_of_many_frames(capsys):
    """An answer that works only while E has few rows fails on the case of S = 30 frames."""

    def few_frames_only(X, E, W_Q, W_K, W_V):
        if len(E) > 10:
            raise ValueError("too many frames")
        return cross_numpy(X, E, W_Q, W_K, W_V)

    assert not check_cross_attention(few_frames_only)
    assert "too many frames" in verdict(capsys)


# dtw_totals -------------------------------------------------------------------------------------


def dtw_loop(cost):
    T, F_ = cost.shape
    D = np.full((T + 1, F_ + 1), np.inf)
    D[0, 0] = 0.0
    for i in range(1, T + 1):
        for j in range(1, F_ + 1):
            D[i, j] = cost[i - 1, j - 1] + min(D[i - 1, j - 1], D[i - 1, j], D[i, j - 1])
    return D


def dtw_frames_outer(cost):  # the library's order: frame by frame, each frame's tokens
    T, F_ = cost.shape
    D = np.full((T + 1, F_ + 1), np.inf)
    D[0, 0] = 0.0
    for j in range(1, F_ + 1):
        for i in range(1, T + 1):
            D[i, j] = cost[i - 1, j - 1] + np.min([D[i - 1, j - 1], D[i - 1, j], D[i, j - 1]])
    return D


def dtw_anti_diagonals(cost):
    """Vectorised over each anti-diagonal i + j = s, whose cells need only s - 1 and s - 2."""
    T, F_ = cost.shape
    D = np.full((T + 1, F_ + 1), np.inf)
    D[0, 0] = 0.0
    for s in range(2, T + F_ + 1):
        i = np.arange(max(1, s - F_), min(T, s - 1) + 1)  # rows of this anti-diagonal
        j = s - i
        before = np.minimum(np.minimum(D[i - 1, j - 1], D[i - 1, j]), D[i, j - 1])
        D[i, j] = cost[i - 1, j - 1] + before
    return D


def dtw_row_by_row(cost):
    """Each row from the row above at once (diagonal and token moves), then the frame moves
    along the row."""
    T, F_ = cost.shape
    D = np.full((T + 1, F_ + 1), np.inf)
    D[0, 0] = 0.0
    for i in range(1, T + 1):
        from_above = np.minimum(D[i - 1, :-1], D[i - 1, 1:])  # (F,): diagonal or token move
        for j in range(1, F_ + 1):
            D[i, j] = cost[i - 1, j - 1] + min(from_above[j - 1], D[i, j - 1])
    return D


def dtw_torch(cost):
    cost = torch.as_tensor(cost)
    T, F_ = cost.shape
    D = torch.full((T + 1, F_ + 1), float("inf"), dtype=cost.dtype)
    D[0, 0] = 0
    for i in range(1, T + 1):
        for j in range(1, F_ + 1):
            prev = torch.stack([D[i - 1, j - 1], D[i - 1, j], D[i, j - 1]])
            D[i, j] = cost[i - 1, j - 1] + prev.min()
    return D


def dtw_float32(cost):
    return dtw_anti_diagonals(np.asarray(cost, dtype=np.float32)).astype(np.float32)


def dtw_torch_float32(cost):
    return dtw_torch(torch.as_tensor(cost, dtype=torch.float32))


def dtw_padded(cost):  # the cost padded to D's shape, so D[i, j] adds padded[i, j]
    T, F_ = cost.shape
    padded = np.pad(cost, ((1, 0), (1, 0)))
    D = np.full((T + 1, F_ + 1), np.inf)
    D[0, 0] = 0.0
    for i, j in itertools.product(range(1, T + 1), range(1, F_ + 1)):
        D[i, j] = padded[i, j] + min(D[i - 1, j - 1], D[i - 1, j], D[i, j - 1])
    return D


@pytest.mark.parametrize(
    "fn",
    [
        dtw_loop,
        dtw_frames_outer,
        dtw_anti_diagonals,
        dtw_row_by_row,
        dtw_torch,
        dtw_float32,
        dtw_torch_float32,
        dtw_padded,
    ],
)
def test_dtw_totals_accepts_correct_forms(capsys, fn):
    assert check_dtw_totals(fn)
    assert "✓ dtw_totals: correct" in verdict(capsys)


@pytest.mark.parametrize("seed", range(6))
def test_the_table_is_the_library_dtw_paths_total(seed):
    """mha_lib.speech.timing.dtw's path (the notebook's) costs D[T, F], and no monotone path of
    a small table costs less; ties are absent from random costs."""
    rng = np.random.default_rng(seed)
    cost = rng.normal(size=(3 + seed % 3, 8 - seed % 4))
    D = dtw_totals_reference(cost)
    tokens, frames = dtw(cost)
    assert tokens[0] == 0 and frames[0] == 0
    assert tokens[-1] == cost.shape[0] - 1 and frames[-1] == cost.shape[1] - 1
    steps = np.stack([np.diff(tokens), np.diff(frames)], axis=1)
    assert {tuple(s) for s in steps} <= {(1, 1), (1, 0), (0, 1)}
    assert abs(cost[tokens, frames].sum() - D[-1, -1]) < 1e-5  # dtw sums in float32


def test_the_checkers_costs_are_the_library_dtw_paths_totals():
    for seed in (0, 1, 2):
        cost = _dtw_inputs(seed)
        assert cost.shape[0] != cost.shape[1]
        tokens, frames = dtw(cost)
        assert abs(cost[tokens, frames].sum() - dtw_totals_reference(cost)[-1, -1]) < 1e-5


def test_every_dtw_mistake_is_its_own_and_not_the_answer():
    """On each of the checker's costs, every catalogued table differs from the right one and
    from every other, so each mistake is named by its own message."""
    for seed in (0, 1, 2):
        cost = _dtw_inputs(seed)
        rows = [("right", dtw_totals_reference(cost)), *_dtw_mistakes(cost).items()]
        for (a, va), (b, vb) in itertools.combinations(rows, 2):
            assert not np.allclose(va, vb, rtol=1e-4, atol=1e-4), (seed, a, b)


def _dtw(cost, pick=min, edge=np.inf, corner=0.0, moves="dul", add=True, cost_of=None):
    """A learner's loop with one thing changed."""
    T, F_ = cost.shape
    D = np.full((T + 1, F_ + 1), edge)
    D[0, 0] = corner
    for i in range(1, T + 1):
        for j in range(1, F_ + 1):
            before = {"d": D[i - 1, j - 1], "u": D[i - 1, j], "l": D[i, j - 1]}
            c = cost[i - 1, j - 1] if cost_of is None else cost_of(cost, i, j)
            D[i, j] = pick(before[m] for m in moves) + (c if add else 0.0)
    return D


def _mixed_indices(
    cost,
):  # loops over cost's indices, fills D[i + 1, j + 1] with cost[i - 1, j - 1]
    T, F_ = cost.shape
    D = np.full((T + 1, F_ + 1), np.inf)
    D[0, 0] = 0.0
    for i in range(T):
        for j in range(F_):
            D[i + 1, j + 1] = cost[i - 1, j - 1] + min(D[i, j], D[i, j + 1], D[i + 1, j])
    return D


def _in_place_dtw(cost):
    cost += 1.0  # shifts the caller's array, to take it back below
    return dtw_loop(cost - 1.0)


DTW_WRONG = [
    (lambda c: _dtw(c, pick=max), "or it takes the max"),
    (lambda c: _dtw(c, pick=max, edge=-np.inf), "it takes the max (with -inf edges)"),
    (lambda c: _dtw(c, moves="ul"), "leaves out the diagonal move"),
    (lambda c: _dtw(c, moves="dl"), "token move"),
    (lambda c: _dtw(c, moves="du"), "frame move"),
    (lambda c: _dtw(c, edge=0.0), "first row and column are 0"),
    (lambda c: _dtw(c, add=False), "never adds the cost"),
    (_mixed_indices, "cost of the cell before"),
    (lambda c: _dtw(c, cost_of=lambda cost, i, j: cost[i, j]), "reads cost[i, j] for D[i, j]"),
    (lambda c: _dtw(c, corner=np.inf), "D[0, 0] at +inf"),
    (lambda c: _dtw(c, corner=np.inf, edge=np.inf), "D[0, 0] at +inf"),
    (lambda c: _dtw(c, edge=1e9), "a large number standing in for +inf"),
    (lambda c: np.where(np.isinf(dtw_loop(c)), -np.inf, dtw_loop(c)), "hold -inf: apart from"),
    (lambda c: dtw_loop(c)[1:, 1:], "without its first row and column"),
    (lambda c: dtw_loop(c).T, "the table is transposed"),
    (lambda c: dtw_loop(c)[-1, -1], "returns one number"),
    (_in_place_dtw, "changes its argument cost in place"),
    (lambda c: torch.as_tensor(dtw_loop(c)).half(), "float16's precision"),
    (lambda c: np.round(dtw_loop(c), 3), "something rounds"),
    (lambda c: None, "not implemented"),
]


@pytest.mark.parametrize("fn, words", DTW_WRONG)
def test_dtw_totals_names_the_mistake(capsys, fn, words):
    assert not check_dtw_totals(fn)
    out = verdict(capsys)
    assert out.startswith("✗ dtw_totals:") and words in out, out
    assert not out.removeprefix("✗ dtw_totals: ").startswith(GENERIC), out


# cross_cache_bytes ------------------------------------------------------------------------------


def cache_plain(decoder_layers, encoder_layers, C, S, B, bytes_per_number):
    return 2 * decoder_layers * B * S * C * bytes_per_number


def cache_per_layer(decoder_layers, encoder_layers, C, S, B, bytes_per_number):
    keys = B * S * C * bytes_per_number  # one layer's keys
    return float(decoder_layers * (keys + keys))


def cache_numpy(decoder_layers, encoder_layers, C, S, B, bytes_per_number):
    return np.int64(np.prod([2, decoder_layers, B, S, C, bytes_per_number]))


def cache_torch(decoder_layers, encoder_layers, C, S, B, bytes_per_number):
    keys = torch.zeros(decoder_layers, B, S, C)  # one layer's keys for each decoder layer
    return torch.tensor(2 * keys.numel() * bytes_per_number)


@pytest.mark.parametrize("fn", [cache_plain, cache_per_layer, cache_numpy, cache_torch])
def test_cross_cache_bytes_accepts_correct_forms(capsys, fn):
    assert check_cross_cache_bytes(fn)
    assert "✓ cross_cache_bytes: correct" in verdict(capsys)


CACHE_WRONG = [
    (lambda Ld, Le, C, S, B, b: Ld * B * S * C * b, "factor 2"),
    (lambda Ld, Le, C, S, B, b: 2 * Le * B * S * C * b, "uses encoder_layers"),
    (lambda Ld, Le, C, S, B, b: 2 * (Ld + Le) * B * S * C * b, "both stacks"),
    (lambda Ld, Le, C, S, B, b: 16 * Ld * B * S * C * b, "bits"),
    (lambda Ld, Le, C, S, B, b: 2 * Ld * B * S * C, "numbers, not bytes"),
    (lambda Ld, Le, C, S, B, b: 2 * Ld * S * C * b, "leaves out the batch B"),
    (lambda Ld, Le, C, S, B, b: 2 * B * S * C * b, "counts one layer"),
    (lambda Ld, Le, C, S, B, b: 2 * Ld * B * C * b, "leaves out S"),
    (lambda Ld, Le, C, S, B, b: 2 * Ld * C * C * b, "weights W_K and W_V"),
    (lambda Ld, Le, C, S, B, b: 2 * Ld * B * 1500 * C * b, "1,500 frames"),
    (lambda Ld, Le, C, S, B, b: 2 * Ld * B * S * 512 * b, "C = 512"),
    (lambda Ld, Le, C, S, B, b: 2 * Ld * B * S * C * b / 1e6, "megabytes"),
    (lambda Ld, Le, C, S, B, b: 2 * Ld * B * S * C * b / 2**20, "mebibytes"),
    (lambda Ld, Le, C, S, B, b: 2 * (Ld + 1) * B * S * C * b, "one more decoder layer"),
    (lambda Ld, Le, C, S, B, b: 55_296_000, "same number for every case"),
    (lambda Ld, Le, C, S, B, b: 3 * Ld * B * S * C * b, "expected 2 · decoder_layers"),
    (lambda Ld, Le, C, S, B, b: (Ld * B * S * C * b, Ld * B * S * C * b), "several numbers"),
    (lambda Ld, Le, C, S, B, b: f"{2 * Ld * B * S * C * b} bytes", "got a str"),
    (lambda Ld, Le, C, S, B, b: np.full(2, 2 * Ld * B * S * C * b), "one number of bytes"),
    (lambda Ld, Le, C, S, B, b: True, "got a bool"),
    (lambda Ld, Le, C, S, B, b: None, "not implemented"),
]


@pytest.mark.parametrize("fn, words", CACHE_WRONG)
def test_cross_cache_bytes_names_the_mistake(capsys, fn, words):
    assert not check_cross_cache_bytes(fn)
    out = verdict(capsys)
    assert out.startswith("✗ cross_cache_bytes:") and words in out, out


def test_the_cache_cases_tell_every_formula_apart():
    """Over the checker's cases, each catalogued formula gives numbers that differ from the
    right ones and from every other formula's, so each mistake has one name."""
    right = tuple(cross_cache_bytes_reference(*case) for case in CACHE_CASES)
    mistakes = [_cache_mistakes(*case) for case in CACHE_CASES]
    rows = {message: tuple(m[message] for m in mistakes) for message in mistakes[0]}
    assert len(rows) >= 6
    for (a, va), (b, vb) in itertools.combinations([("right", right), *rows.items()], 2):
        assert not np.allclose(va, vb, rtol=1e-9, atol=0), (a, b)


def test_whisper_base_cross_cache():
    """Whisper base (6 decoder layers, C = 512, 1,500 frames) keeps 18,432,000 bytes of
    cross-attention cache per utterance in float16."""
    assert cross_cache_bytes_reference(6, 6, 512, 1500, 1, 2) == 18_432_000
