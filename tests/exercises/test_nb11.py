"""The checkers of notebook 11 accept right answers and name the usual mistakes."""

import numpy as np
import pytest
import torch

from mha_lib.exercises.nb11 import (
    check_absorb_key,
    check_absorb_rotated,
    check_cache_bytes,
    check_sink_slot,
)
from mha_lib.nn.kv_cache import slot_of
from mha_lib.positions import rope


def verdict(capsys) -> str:
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return out


# cache_bytes ------------------------------------------------------------------------------------


def bytes_plain(L, h, h_kv, d, N, b):
    return 2 * L * h_kv * d * N * b


def bytes_numpy(L, h, h_kv, d, N, b):
    return np.int64(np.prod([2, L, h_kv, d, N, b]))


def bytes_per_layer_then_total(L, h, h_kv, d, N, b):
    per_token_layer = 2 * h_kv * d * b
    return float(per_token_layer * N * L)


@pytest.mark.parametrize("fn", [bytes_plain, bytes_numpy, bytes_per_layer_then_total])
def test_cache_bytes_accepts_correct_forms(capsys, fn):
    assert check_cache_bytes(fn)
    assert "✓ cache_bytes: correct" in verdict(capsys)


CACHE_WRONG = [
    (lambda L, h, hk, d, N, b: L * hk * d * N * b, "factor 2"),
    (lambda L, h, hk, d, N, b: 2 * L * h * d * N * b, "not num_kv_heads"),
    (lambda L, h, hk, d, N, b: 2 * hk * d * N * b, "leaves out the layers"),
    (lambda L, h, hk, d, N, b: 2 * L * hk * d * N, "numbers, not bytes"),
    (lambda L, h, hk, d, N, b: 16 * L * hk * d * N * b, "bits"),
    (lambda L, h, hk, d, N, b: 2 * L * hk * h * d * N * b, "model width"),
    (lambda L, h, hk, d, N, b: 2 * L * hk * d * (N + 1) * b, "context + 1"),
    (lambda L, h, hk, d, N, b: 3 * L * hk * d * N * b, "wrong value"),
    (lambda L, h, hk, d, N, b: None, "not implemented"),
    (lambda L, h, hk, d, N, b: [1, 2], "expected shape ()"),
    (lambda L, h, hk, d, N, b: "many", "expected a number"),
]


@pytest.mark.parametrize("fn, words", CACHE_WRONG)
def test_cache_bytes_names_the_mistake(capsys, fn, words):
    assert not check_cache_bytes(fn)
    out = verdict(capsys)
    assert out.startswith("✗ cache_bytes:") and words in out, out


# absorb_key -------------------------------------------------------------------------------------


def absorb_einsum(q, W):
    return np.einsum("hd,hdr->hr", q, W)


def absorb_loop(q, W):
    return np.stack([q[i] @ W[i] for i in range(q.shape[0])])


def absorb_torch(q, W):
    q, W = torch.as_tensor(q), torch.as_tensor(W)
    return (q[:, None, :] @ W).squeeze(1)  # (h, 1, d_N) @ (h, d_N, r)


@pytest.mark.parametrize("fn", [absorb_einsum, absorb_loop, absorb_torch])
def test_absorb_key_accepts_correct_forms(capsys, fn):
    assert check_absorb_key(fn)
    assert "✓ absorb_key: correct" in verdict(capsys)


ABSORB_WRONG = [
    (lambda q, W: np.broadcast_to(absorb_einsum(q, W).sum(0), (3, 6)), "sums over the heads"),
    (lambda q, W: np.einsum("hd,dr->hr", q, W[0]), "head 0"),
    (lambda q, W: absorb_einsum(q, W) / np.sqrt(q.shape[1]), "scale"),
    (lambda q, W: absorb_einsum(q, np.roll(W, 1, axis=0)), "shifted"),
    (
        lambda q, W: absorb_einsum(q, W) / np.linalg.norm(absorb_einsum(q, W), axis=-1)[:, None],
        "normalises",
    ),
    (lambda q, W: q * 1.0, "returns q_nope unchanged"),
    (lambda q, W: np.einsum("hd,dr->hr", q, W.sum(0)), "adds the heads' up-projections"),
    (lambda q, W: absorb_einsum(q, W) + 1, "wrong values"),
    (lambda q, W: np.einsum("hd,hdr->rh", q, W), "expected shape"),
    (lambda q, W: np.einsum("hd,hdr->hd", q, W), "sums over the latent axis r"),
    (lambda q, W: q @ W, "q_nope @ W_UK broadcasts"),
    (lambda q, W: q * 2.0, "the shape of q_nope"),
    (lambda q, W: np.einsum("hd,hrd->hr", q, W.reshape(3, 6, 4)), "reshapes W_UK[i]"),
]


@pytest.mark.parametrize("fn, words", ABSORB_WRONG)
def test_absorb_key_names_the_mistake(capsys, fn, words):
    assert not check_absorb_key(fn)
    out = verdict(capsys)
    assert out.startswith("✗ absorb_key:") and words in out, out


# absorb_rotated ---------------------------------------------------------------------------------


def rotated_rope(q, W, t, j):
    """mha_lib's rope at the offset t - j, then W_UKᵀ."""
    q = torch.as_tensor(q)[None]  # (1, d)
    return (rope(q, torch.tensor([t - j]), interleaved=True)[0] @ torch.as_tensor(W)).numpy()


def rotated_probe(q, W, t, j):
    """The investigation's route: q_lat[k] is the score against the unit latent e_k, whose key
    is rope(W_UK[:, k], j)."""
    q_t = rope(torch.as_tensor(q)[None], torch.tensor([t]), interleaved=True)[0]  # (d,)
    r = W.shape[1]
    keys = rope(torch.as_tensor(W).T.contiguous(), torch.full((r,), j), interleaved=True)  # (r, d)
    return keys @ q_t


def rotation_matrix(p, d):
    M = np.zeros((d, d))
    for i in range(d // 2):
        a = p * 10000.0 ** (-2 * i / d)
        M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]
    return M


def rotated_matrices(q, W, t, j):
    d = q.shape[0]
    return W.T @ rotation_matrix(j, d).T @ rotation_matrix(t, d) @ q


@pytest.mark.parametrize("fn", [rotated_rope, rotated_probe, rotated_matrices])
def test_absorb_rotated_accepts_correct_forms(capsys, fn):
    assert check_absorb_rotated(fn)
    assert "✓ absorb_rotated: correct" in verdict(capsys)


def with_rotation(p, latent_side=False, half_split=False):
    def fn(q, W, t, j):
        d = q.shape[0]
        if half_split:
            perm = np.stack([np.arange(d // 2), np.arange(d // 2) + d // 2], -1).ravel()
            inv = np.argsort(perm)
            R = rotation_matrix(p(t, j), d)[np.ix_(inv, inv)]
            return W.T @ R @ q
        if latent_side:
            return rotation_matrix(p(t, j), W.shape[1]) @ (W.T @ q)
        return W.T @ rotation_matrix(p(t, j), d) @ q

    return fn


ROTATED_WRONG = [
    (lambda q, W, t, j: W.T @ q, "as if nothing were rotated"),
    (with_rotation(lambda t, j: t), "forgets the key's rotation"),
    (with_rotation(lambda t, j: j), "rotates by the key's position j"),
    (with_rotation(lambda t, j: t + j), "rotates by t + j"),
    (with_rotation(lambda t, j: j - t), "rotates the wrong way"),
    (with_rotation(lambda t, j: t - j, latent_side=True), "in the latent space"),
    (with_rotation(lambda t, j: t - j, half_split=True), "half-split layout"),
    (lambda q, W, t, j: rotation_matrix(t - j, q.shape[0]) @ q, "shape (d,)"),
    (lambda q, W, t, j: 2 * W.T @ rotation_matrix(t - j, q.shape[0]) @ q, "wrong values"),
    (lambda q, W, t, j: None, "not implemented"),
]


@pytest.mark.parametrize("fn, words", ROTATED_WRONG)
def test_absorb_rotated_names_the_mistake(capsys, fn, words):
    assert not check_absorb_rotated(fn)
    out = verdict(capsys)
    assert out.startswith("✗ absorb_rotated:") and words in out, out


# sink_slot --------------------------------------------------------------------------------------


def slot_branch(t, S, W):
    if t < S:
        return t
    return S + (t - S) % W


def slot_numpy(t, S, W):
    return int(np.where(t < S, t, S + np.mod(t - S, W)))


@pytest.mark.parametrize("fn", [slot_branch, slot_numpy, slot_of])
def test_sink_slot_accepts_correct_forms(capsys, fn):
    assert check_sink_slot(fn)
    assert "✓ sink_slot: correct" in verdict(capsys)


SLOT_WRONG = [
    (lambda t, S, W: t % W, "sinks are overwritten"),
    (lambda t, S, W: t % (S + W), "overwrites the sinks"),
    (lambda t, S, W: t if t < S else (t - S) % W, "not offset past the sinks"),
    (lambda t, S, W: t if t < S else S + t % W, "counts from token 0"),
    (lambda t, S, W: t if t < S else S + (t - S - 1) % W, "off by one"),
    (lambda t, S, W: min(t, S + W - 1), "never wraps"),
    (lambda t, S, W: t if t < S else S - 1 + (t - S) % W, "starts at slot num_sinks"),
    (lambda t, S, W: t if t < S else S + (t - S) % W + 1, "goes to slot"),
    (lambda t, S, W: "slot", "expected an integer"),
]


@pytest.mark.parametrize("fn, words", SLOT_WRONG)
def test_sink_slot_names_the_mistake(capsys, fn, words):
    assert not check_sink_slot(fn)
    out = verdict(capsys)
    assert out.startswith("✗ sink_slot:") and words in out, out
