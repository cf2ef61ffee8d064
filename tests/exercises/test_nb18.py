"""The checkers of notebook 18 accept right answers (numpy and torch, float64 and float32, loops
and vectorised) and name the usual mistakes: every wrong answer catalogued here gets a message
naming its mistake (the test asserts a distinctive part of it), never the generic "wrong
values". The references are also checked against the library: `LightningIndexer`'s scores and
`causal_topk`'s mask."""

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_lib.exercises._base import GENERIC
from mha_lib.exercises.nb18 import (
    CACHE_CASES,
    MASK_CASES,
    SCORE_CASES,
    SQUARE,
    _cache_mistakes,
    _mask_inputs,
    _mask_mistakes,
    _score_inputs,
    _score_mistakes,
    causal_topk_mask_reference,
    check_causal_topk_mask,
    check_index_scores,
    check_indexer_cache_bytes,
    index_scores_reference,
    indexer_cache_bytes_reference,
)
from mha_lib.sparse_attention import IndexerCache, LightningIndexer, causal_topk


def verdict(capsys) -> str:
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return out


# index_scores -----------------------------------------------------------------------------------


def scores_loop(q, k, w):
    n, H, _ = q.shape
    m = len(k)
    scores = np.zeros((n, m))
    for t in range(n):
        for s in range(m):
            for h in range(H):
                scores[t, s] += w[t, h] * max(q[t, h] @ k[s], 0.0)
    return scores


def scores_einsum(q, k, w):
    dots = np.einsum("thd,sd->ths", q, k)  # (n, H, m)
    return np.einsum("th,ths->ts", w, np.maximum(dots, 0))


def scores_matmul(q, k, w):
    relu = np.maximum(q @ k.T, 0)  # (n, H, D) @ (D, m) -> (n, H, m)
    return (w[:, None, :] @ relu)[:, 0]  # (n, 1, H) @ (n, H, m) -> (n, m)


def scores_torch(q, k, w):
    q, k, w = (torch.as_tensor(a) for a in (q, k, w))
    return (w[:, :, None] * torch.relu(q @ k.T)).sum(1)


def scores_torch_only(q, k, w):  # torch functions on what it is given
    return torch.einsum("th,ths->ts", w, F.relu(q @ k.mT))


def scores_float32(q, k, w):
    q, k, w = (np.asarray(a, dtype=np.float32) for a in (q, k, w))
    return np.einsum("th,ths->ts", w, np.maximum(q @ k.T, np.float32(0)))


def scores_torch_float32(q, k, w):
    q, k, w = (torch.as_tensor(a, dtype=torch.float32) for a in (q, k, w))
    return torch.einsum("th,ths->ts", w, torch.relu(q @ k.T))


@pytest.mark.parametrize(
    "fn",
    [
        scores_loop,
        scores_einsum,
        scores_matmul,
        scores_torch,
        scores_torch_only,
        scores_float32,
        scores_torch_float32,
    ],
)
def test_index_scores_accepts_correct_forms(capsys, fn):
    assert check_index_scores(fn)
    out = verdict(capsys)
    assert "✓ index_scores: correct" in out
    if fn is scores_torch_only:
        assert "on torch tensors only" in out


def _heads(q, k, w, combine, relu_first=True):
    """Each head's score (n, H, m), combined over the heads by `combine`."""
    dots = np.einsum("thd,sd->ths", q, k)
    return combine(np.maximum(dots, 0) if relu_first else dots, w)


def _key_weights_loop(q, k, w):  # w[s, h]: IndexError while m > n
    n, H, _ = q.shape
    scores = np.zeros((n, len(k)))
    for t in range(n):
        for s in range(len(k)):
            scores[t, s] = sum(w[s, h] * max(q[t, h] @ k[s], 0.0) for h in range(H))
    return scores


def _key_weights_einsum(q, k, w):  # the weights' axis named like the keys': raises while m != n
    return np.einsum("sh,ths->ts", w, np.maximum(np.einsum("thd,sd->ths", q, k), 0))


def _library_scales(q, k, w):  # what LightningIndexer computes
    D, H = q.shape[-1], q.shape[1]
    relu = np.maximum(np.einsum("thd,sd->ths", q, k) / np.sqrt(D), 0)
    return np.einsum("th,ths->ts", w / np.sqrt(H), relu)


def _scrambled(q, k, w):  # (n, H, m) reshaped to (n, m, H)
    n, H, _ = q.shape
    dots = (q.reshape(n * H, -1) @ k.T).reshape(n, len(k), H)
    return (np.maximum(dots, 0) * w[:, None, :]).sum(-1)


def _in_place_relu(q, k, w):
    q[q < 0] = 0  # clips the caller's queries, not the dot products
    return scores_einsum(q, k, w)


SCORES_WRONG = [
    (
        lambda q, k, w: _heads(q, k, w, lambda d, w: (w[:, :, None] * d).sum(1), False),
        "leaves out the ReLU",
    ),
    (
        lambda q, k, w: np.maximum(
            _heads(q, k, w, lambda d, w: (w[:, :, None] * d).sum(1), False), 0
        ),
        "ReLU after summing the heads",
    ),
    (
        lambda q, k, w: _heads(
            q, k, w, lambda d, w: np.maximum(w[:, :, None] * d, 0).sum(1), False
        ),
        "after multiplying by w[t, h]",
    ),
    (
        lambda q, k, w: np.einsum("th,thsd->ts", w, np.maximum(q[:, :, None] * k[None, None], 0)),
        "to each product",
    ),
    (lambda q, k, w: _heads(q, k, w, lambda r, w: r.sum(1)), "does not weight the heads"),
    (lambda q, k, w: _heads(q, k, w, lambda r, w: r.mean(1)), "mean over the heads"),
    (
        lambda q, k, w: _heads(q, k, w, lambda r, w: (w[:, :, None] * r).mean(1)),
        "divides the weighted sum by H",
    ),
    (
        lambda q, k, w: _heads(q, k, w, lambda r, w: (w[:, :, None] * r).max(1)),
        "max over the heads",
    ),
    (lambda q, k, w: _heads(q, k, w, lambda r, w: r.max(1)), "max of the unweighted heads"),
    (_key_weights_loop, "key's row of w"),
    (_key_weights_einsum, "key's row of w"),
    (
        lambda q, k, w: torch.softmax(torch.as_tensor(scores_einsum(q, k, w)), -1),
        "softmax over the keys",
    ),
    (lambda q, k, w: scores_einsum(q, k, w).T, "scores are transposed"),
    (lambda q, k, w: scores_einsum(q, k, w).T[::-1], "shape (m, n)"),
    (lambda q, k, w: scores_einsum(q, k, w) / np.sqrt(q.shape[-1]), "divides by √D"),
    (lambda q, k, w: scores_einsum(q, k, w / np.sqrt(q.shape[1])), "1/√H"),
    (_library_scales, "both of the library's scales"),
    (_scrambled, "reshapes the (n, H, m)"),
    (
        lambda q, k, w: np.where(
            np.tril(np.ones((len(q), len(k)), bool)), scores_einsum(q, k, w), -np.inf
        ),
        "causal mask (-inf for s > t)",
    ),
    (
        lambda q, k, w: np.where(
            np.tril(np.ones((len(q), len(k)), bool), len(k) - len(q)),
            scores_einsum(q, k, w),
            -np.inf,
        ),
        "causal mask aligned to the last key",
    ),
    (
        lambda q, k, w: w[:, :, None] * np.maximum(q @ k.T, 0),
        "each head's weighted scores (n, H, m)",
    ),
    (lambda q, k, w: np.maximum(q @ k.T, 0), "each head's ReLU"),
    (lambda q, k, w: (w[:, :, None] * np.maximum(q @ k.T, 0)).transpose(0, 2, 1), "(n, m, H)"),
    (_in_place_relu, "changes its argument q in place"),
    (lambda q, k, w: torch.as_tensor(scores_einsum(q, k, w)).half(), "float16's precision"),
    (lambda q, k, w: np.round(scores_einsum(q, k, w), 3), "something rounds"),
    (lambda q, k, w: None, "not implemented"),
]


@pytest.mark.parametrize("fn, words", SCORES_WRONG)
def test_index_scores_names_the_mistake(capsys, fn, words):
    assert not check_index_scores(fn)
    out = verdict(capsys)
    assert out.startswith("✗ index_scores:") and words in out, out
    assert not out.removeprefix("✗ index_scores: ").startswith(GENERIC), out


def test_every_index_scores_mistake_is_its_own_and_not_the_answer():
    """On each of the checker's cases, every catalogued mistake of the right shape differs from
    the right scores and from every other mistake, so each is named by its own message; the
    sizes differ within each case, and one case has more queries than keys. On the square probe
    (n = m) that names an answer which raised on the cases, weighting by w[s] is its own."""
    assert any(n > m for n, m, _, _ in SCORE_CASES) and any(n < m for n, m, _, _ in SCORE_CASES)
    for seed, sizes in enumerate(SCORE_CASES):
        assert len(set(sizes)) == 4, sizes
        args = _score_inputs(seed)
        rows = [("right", index_scores_reference(*args)), *_score_mistakes(*args).items()]
        assert len(rows) >= 9
        for (a, va), (b, vb) in itertools.combinations(rows, 2):
            assert not np.allclose(va, vb, rtol=1e-4, atol=1e-4), (seed, a, b)
    args = _score_inputs(len(SCORE_CASES), SQUARE)  # the probe: w[s] is its own there too
    mistakes = _score_mistakes(*args)
    key_rows = next(v for message, v in mistakes.items() if "key's row of w" in message)
    for other in [index_scores_reference(*args), *mistakes.values()]:
        assert other is key_rows or not np.allclose(other, key_rows, rtol=1e-4, atol=1e-4)


def test_the_reference_is_the_lightning_indexers_formula_without_its_scales():
    """LightningIndexer (d_R = 0: no rotation) scores Σ_h (w_h / √H) · ReLU(q_h · k / √D): on its
    own queries, keys and weights, the reference divided by √(H·D) gives the same numbers, for 5
    new tokens against 7 keys (2 of them cached first), wherever causality lets a key be seen."""
    torch.manual_seed(0)
    C, r_q, H, D, n, before = 10, 6, 3, 4, 5, 2
    indexer = LightningIndexer(C, r_q, H, D, qk_rope_head_dim=0).double()
    x = torch.randn(1, before + n, C, dtype=torch.float64)  # (B, m, C)
    q_latent = torch.randn(1, before + n, r_q, dtype=torch.float64)  # (B, m, r_q)
    cache = IndexerCache()
    with torch.no_grad():
        indexer(x[:, :before], q_latent[:, :before], cache=cache)
        ours = indexer(x[:, before:], q_latent[:, before:], cache=cache)[0]  # (n, m)
        positions = torch.arange(before + n)
        k = indexer.keys(x, positions)[0]  # (m, D)
        q = indexer.queries(q_latent[:, before:], positions[before:])[0]  # (n, H, D)
        w = indexer.weights_proj(x[:, before:])[0]  # (n, H)
    assert ours.shape == (n, before + n)
    reference = index_scores_reference(q.numpy(), k.numpy(), w.numpy()) / np.sqrt(H * D)
    seen = torch.isfinite(ours).numpy()  # (n, m): the bottom-right causal mask
    assert seen.sum() == n * before + n * (n + 1) // 2
    np.testing.assert_allclose(ours.numpy()[seen], reference[seen], rtol=1e-12, atol=1e-12)


def test_index_scores_weights_may_be_negative():
    """The checker's weights have both signs (a head may vote against a key), so the ReLU's
    place relative to w matters."""
    for seed in range(len(SCORE_CASES)):
        _, _, w = _score_inputs(seed)
        assert (w < 0).any() and (w > 0).any()


# causal_topk_mask -------------------------------------------------------------------------------


def mask_loop(scores, k):
    N = len(scores)
    mask = np.zeros((N, N), dtype=bool)
    for t in range(N):
        past = list(range(t + 1))
        best = sorted(past, key=lambda s: scores[t, s], reverse=True)[:k]
        mask[t, best] = True
    return mask


def mask_argsort(scores, k):
    N = len(scores)
    causal = np.tril(np.ones((N, N), dtype=bool))
    masked = np.where(causal, scores, -np.inf)
    order = np.argsort(-masked, axis=-1)[:, :k]  # (N, min(k, N)): best first
    mask = np.zeros((N, N), dtype=bool)
    np.put_along_axis(mask, order, True, axis=-1)
    return mask & causal


def mask_rank(scores, k):  # a key is chosen when fewer than k earlier keys beat it
    N = len(scores)
    causal = np.tril(np.ones((N, N), dtype=bool))
    masked = np.where(causal, scores, -np.inf)
    beaten_by = (masked[:, None, :] > masked[:, :, None]).sum(-1)  # (N, N)
    return causal & (beaten_by < k)


def mask_torch(scores, k):
    scores = torch.as_tensor(scores)
    N = scores.shape[0]
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    masked = scores.masked_fill(~causal, float("-inf"))
    top = masked.topk(min(k, N), dim=-1).indices  # (N, min(k, N))
    mask = torch.zeros(N, N, dtype=torch.bool).scatter(-1, top, True)
    return mask & causal


def mask_torch_only(scores, k):  # torch methods on what it is given
    N = scores.shape[0]
    masked = scores.masked_fill(~torch.ones(N, N, dtype=torch.bool).tril(), float("-inf"))
    top = masked.topk(min(k, N), dim=-1)
    return torch.zeros(N, N, dtype=torch.bool).scatter(-1, top.indices, top.values > -torch.inf)


def mask_float32(scores, k):  # scores rounded to float32 keep their order (no near-ties)
    return mask_argsort(np.asarray(scores, dtype=np.float32), k)


@pytest.mark.parametrize(
    "fn", [mask_loop, mask_argsort, mask_rank, mask_torch, mask_torch_only, mask_float32]
)
def test_causal_topk_mask_accepts_correct_forms(capsys, fn):
    assert check_causal_topk_mask(fn)
    out = verdict(capsys)
    assert "✓ causal_topk_mask: correct" in out
    if fn is mask_torch_only:
        assert "on torch tensors only" in out


def _chosen(scores, k, causal_first=True, causal_after=True, lowest=False, axis=-1, extra=0):
    """A learner's top-k with one thing changed."""
    N = len(scores)
    causal = np.tril(np.ones((N, N), dtype=bool))
    x = np.where(causal, scores, -np.inf) if causal_first else np.asarray(scores, dtype=float)
    x = x.T if axis == 0 else x
    order = np.argsort(x if lowest else -x, axis=-1)[:, : k + extra]
    mask = np.zeros((N, N), dtype=bool)
    np.put_along_axis(mask, order, True, axis=-1)
    mask = mask & np.isfinite(x)
    mask = mask.T if axis == 0 else mask
    return mask & causal if causal_after else mask


def _self_added(scores, k):
    return mask_argsort(scores, k) | np.eye(len(scores), dtype=bool)


def _before_then_self(scores, k):  # k of keys 0 .. t - 1, then the query's own key
    N = len(scores)
    before = np.where(np.tril(np.ones((N, N), dtype=bool), -1), scores, -np.inf)
    return _chosen(before, k) | np.eye(N, dtype=bool)


def _strictly_before(scores, k):
    N = len(scores)
    before = np.where(np.tril(np.ones((N, N), dtype=bool), -1), scores, -np.inf)
    return _chosen(before, k)


def _window(scores, k):
    t, s = np.indices(scores.shape)
    return (s <= t) & (t - s < k)


def _topk_values_indices(scores, k):
    return torch.as_tensor(scores).topk(min(k, len(scores)), dim=-1)


def _library(scores, k):  # the library's own function, which the exercise asks to write
    masked = torch.as_tensor(scores).masked_fill(
        ~torch.ones(len(scores), len(scores), dtype=torch.bool).tril(), float("-inf")
    )
    return causal_topk(masked[None], k)[1][0]


def _numpy_topk_only(scores, k):  # argpartition at k: raises once k is above N
    N = len(scores)
    masked = np.where(np.tril(np.ones((N, N), dtype=bool)), scores, -np.inf)
    top = np.argpartition(-masked, k, axis=-1)[:, :k]
    mask = np.zeros((N, N), dtype=bool)
    np.put_along_axis(mask, top, True, axis=-1)
    return mask & np.isfinite(masked)


def _in_place_mask(scores, k):
    scores[np.triu_indices(len(scores), 1)] = -np.inf  # blocks the future in the caller's array
    return mask_argsort(scores, k)


MASK_WRONG = [
    (lambda s, k: ~mask_argsort(s, k), "inverted"),
    (lambda s, k: _chosen(s, k, causal_first=False), "top k among ALL keys, then blocks"),
    (lambda s, k: _chosen(s, k, causal_first=False, causal_after=False), "is not causal"),
    (lambda s, k: _chosen(s, k, lowest=True), "k LOWEST"),
    (lambda s, k: _chosen(s, k, axis=0), "along the query axis"),
    (lambda s, k: mask_argsort(s, k).T, "transposed"),
    (_self_added, "always adds the query's own key"),
    (_before_then_self, "adds its own key (k + 1 keys)"),
    (_strictly_before, "never lets a query choose its own key"),
    (lambda s, k: _chosen(s, k, extra=1), "keeps k + 1 keys"),
    (lambda s, k: _chosen(s, k, extra=-1), "keeps k - 1 keys"),
    (_window, "sliding window"),
    (lambda s, k: np.tril(np.ones(s.shape, dtype=bool)), "ignores k"),
    (lambda s, k: mask_argsort(s, k).astype(int), "(the right keys)"),
    (lambda s, k: torch.as_tensor(mask_argsort(s, k)).float(), "(the right keys)"),
    (lambda s, k: _chosen(s, k, lowest=True).astype(np.int64), "(0s and 1s)"),
    (lambda s, k: np.where(mask_argsort(s, k), 0.0, -np.inf), "additive float mask"),
    (lambda s, k: np.argsort(-s, axis=-1)[:, :k], "indices, shape (N, k)"),
    (_topk_values_indices, "returns a pair"),
    (_library, "mha_lib.sparse_attention.causal_topk"),
    (_numpy_topk_only, "above the N = 6 keys"),
    (_in_place_mask, "changes its argument scores in place"),
    (lambda s, k: None, "not implemented"),
]


@pytest.mark.parametrize("fn, words", MASK_WRONG)
def test_causal_topk_mask_names_the_mistake(capsys, fn, words):
    assert not check_causal_topk_mask(fn)
    out = verdict(capsys)
    assert out.startswith("✗ causal_topk_mask:") and words in out, out
    assert not out.removeprefix("✗ causal_topk_mask: ").startswith(GENERIC), out


def test_every_mask_mistake_is_its_own_and_not_the_answer():
    """On each case with k below N, every catalogued mask differs from the right one and from
    every other, so each mistake is named by its own message; no two scores of a row are closer
    than 1e-3, so float32 keeps their order."""
    for seed, (N, k) in enumerate(MASK_CASES):
        scores, _ = _mask_inputs(seed)
        assert np.isfinite(scores).all()
        assert np.diff(np.sort(scores, axis=1), axis=1).min() > 1e-3  # no near-ties in a row
        if k >= N:
            continue
        rows = [
            ("right", causal_topk_mask_reference(scores, k)),
            *_mask_mistakes(scores, k).items(),
        ]
        assert len(rows) >= 9
        for (a, va), (b, vb) in itertools.combinations(rows, 2):
            assert not np.array_equal(va, vb), (seed, a, b)


@pytest.mark.parametrize("seed", range(4))
def test_the_reference_is_causal_topk_after_masking_the_future(seed):
    """The reference mask equals the library's causal_topk's once the future is -inf, and keeps
    min(k, t + 1) keys in row t, all of them s <= t."""
    rng = np.random.default_rng(seed)
    N, k = 6 + seed, (2, 3, 5, 20)[seed]
    scores = rng.normal(size=(N, N))
    future = torch.ones(N, N, dtype=torch.bool).triu(1)
    masked = torch.as_tensor(scores).masked_fill(future, float("-inf"))[None]  # (1, N, N)
    ours = causal_topk_mask_reference(scores, k)
    np.testing.assert_array_equal(ours, causal_topk(masked, k)[1][0].numpy())
    np.testing.assert_array_equal(ours.sum(1), np.minimum(k, np.arange(1, N + 1)))
    assert not (ours & future.numpy()).any()


def test_the_checkers_masks_agree_with_causal_topk():
    for seed, (N, k) in enumerate(MASK_CASES):
        scores, _ = _mask_inputs(seed)
        masked = np.where(np.tril(np.ones((N, N), dtype=bool)), scores, -np.inf)
        library = causal_topk(torch.as_tensor(masked)[None], k)[1][0].numpy()
        np.testing.assert_array_equal(causal_topk_mask_reference(scores, k), library)


# indexer_cache_bytes ----------------------------------------------------------------------------


def cache_plain(layers, batch, tokens, index_n_heads, index_head_dim, bytes_per_number):
    return layers * batch * tokens * index_head_dim * bytes_per_number


def cache_float(layers, batch, tokens, index_n_heads, index_head_dim, bytes_per_number):
    per_token = float(index_head_dim * bytes_per_number)  # one key, shared by the heads
    return layers * batch * tokens * per_token


def cache_numpy(layers, batch, tokens, index_n_heads, index_head_dim, bytes_per_number):
    return np.prod(np.array([layers, batch, tokens, index_head_dim, bytes_per_number]))


def cache_torch(layers, batch, tokens, index_n_heads, index_head_dim, bytes_per_number):
    keys = torch.zeros(batch, tokens, index_head_dim)  # one layer's IndexerCache.keys
    return torch.tensor(layers * keys.numel() * bytes_per_number)


@pytest.mark.parametrize("fn", [cache_plain, cache_float, cache_numpy, cache_torch])
def test_indexer_cache_bytes_accepts_correct_forms(capsys, fn):
    assert check_indexer_cache_bytes(fn)
    assert "✓ indexer_cache_bytes: correct" in verdict(capsys)


CACHE_WRONG = [
    (lambda L, B, T, H, D, b: L * B * T * H * D * b, "multiplies by index_n_heads"),
    (lambda L, B, T, H, D, b: 2 * L * B * T * D * b, "keys AND values"),
    (lambda L, B, T, H, D, b: 2 * L * B * T * H * D * b, "for every index head"),
    (lambda L, B, T, H, D, b: B * T * D * b, "counts one layer"),
    (lambda L, B, T, H, D, b: L * T * D * b, "leaves out the batch"),
    (lambda L, B, T, H, D, b: L * B * D * b, "leaves out the tokens"),
    (lambda L, B, T, H, D, b: L * B * T * (512 + 64) * b, "prices MLA's latent"),
    (lambda L, B, T, H, D, b: L * B * T * (512 + 64 + D) * b, "adds MLA's latent"),
    (lambda L, B, T, H, D, b: L * B * T * (D + H) * b, "weights w too"),
    (lambda L, B, T, H, D, b: L * B * T * D / H * b, "splits the key among the heads"),
    (lambda L, B, T, H, D, b: 8 * L * B * T * D * b, "bits"),
    (lambda L, B, T, H, D, b: L * B * T * D, "numbers, not bytes"),
    (lambda L, B, T, H, D, b: L * B * T * 128 * b, "index_head_dim = 128"),
    (lambda L, B, T, H, D, b: L * B * T * D * b / 1e6, "megabytes"),
    (lambda L, B, T, H, D, b: L * B * T * D * b / 2**20, "mebibytes"),
    (lambda L, B, T, H, D, b: L * B * (T + 1) * D * b, "tokens + 1"),
    (lambda L, B, T, H, D, b: 1_000_000, "same number for every case"),
    (lambda L, B, T, H, D, b: 3 * L * B * T * D * b, "expected layers · batch"),
    (lambda L, B, T, H, D, b: (L * B * T * D * b, 0), "several numbers"),
    (lambda L, B, T, H, D, b: f"{L * B * T * D * b} bytes", "got a str"),
    (lambda L, B, T, H, D, b: np.full(2, L * B * T * D * b), "one number of bytes"),
    (lambda L, B, T, H, D, b: True, "got a bool"),
    (lambda L, B, T, H, D, b: None, "not implemented"),
]


@pytest.mark.parametrize("fn, words", CACHE_WRONG)
def test_indexer_cache_bytes_names_the_mistake(capsys, fn, words):
    assert not check_indexer_cache_bytes(fn)
    out = verdict(capsys)
    assert out.startswith("✗ indexer_cache_bytes:") and words in out, out


def test_the_cache_cases_tell_every_formula_apart():
    """Over the checker's cases, each catalogued formula gives numbers that differ from the
    right ones and from every other formula's, so each mistake has one name."""
    right = tuple(indexer_cache_bytes_reference(*case) for case in CACHE_CASES)
    mistakes = [_cache_mistakes(*case) for case in CACHE_CASES]
    rows = {message: tuple(m[message] for m in mistakes) for message in mistakes[0]}
    assert len(rows) >= 8
    for (a, va), (b, vb) in itertools.combinations([("right", right), *rows.items()], 2):
        assert not np.allclose(va, vb, rtol=1e-9, atol=0), (a, b)


def test_the_reference_is_what_an_indexer_cache_holds():
    """IndexerCache keeps B·T·D numbers per layer: layers of them, in float32 (4 bytes), make
    the reference's bytes, whatever the number of index heads."""
    torch.manual_seed(0)
    L, B, T, H, D = 2, 3, 5, 4, 6
    total = 0
    for _ in range(L):
        indexer, cache = LightningIndexer(8, 7, H, D, qk_rope_head_dim=2), IndexerCache()
        with torch.no_grad():
            indexer(torch.randn(B, T, 8), torch.randn(B, T, 7), cache=cache)
        total += cache.nbytes
    assert total == indexer_cache_bytes_reference(L, B, T, H, D, 4)


def test_deepseek_v32_indexer_cache():
    """DeepSeek-V3.2's indexer (61 layers, D = 128, FP8 keys: 1 byte) keeps 61 · 16 MiB = 976 MiB
    for one sequence of 128K tokens, beside MLA's 576 numbers per token and layer."""
    assert indexer_cache_bytes_reference(61, 1, 131072, 64, 128, 1) == 61 * 2**24
