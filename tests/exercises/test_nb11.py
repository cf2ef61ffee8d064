"""The checkers of notebook 11 accept right answers and name the usual mistakes."""

import numpy as np
import pytest
import torch

from mha_lib.efficient.sink_cache import slot_of
from mha_lib.exercises.nb11 import check_absorb_key, check_cache_bytes, check_sink_slot


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
    (lambda q, W: q * 1.0, "key space"),
    (lambda q, W: np.einsum("hd,dr->hr", q, W.sum(0)), "adds the heads' up-projections"),
    (lambda q, W: absorb_einsum(q, W) + 1, "wrong values"),
    (lambda q, W: np.einsum("hd,hdr->rh", q, W), "expected shape"),
]


@pytest.mark.parametrize("fn, words", ABSORB_WRONG)
def test_absorb_key_names_the_mistake(capsys, fn, words):
    assert not check_absorb_key(fn)
    out = verdict(capsys)
    assert out.startswith("✗ absorb_key:") and words in out, out


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
