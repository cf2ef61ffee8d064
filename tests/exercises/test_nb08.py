"""The checkers of notebook 08 accept right answers and name the usual mistakes."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_lib.exercises.nb08 import (
    check_chunk_causal_mask,
    check_decode_chunk,
    check_sliding_window_mask,
)
from mha_lib.nn import bottom_right_causal_mask_mod, flash_attention


def verdict(capsys) -> str:
    """The single line a checker printed."""
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return out


def grid(n, m):
    return np.arange(n)[:, None], np.arange(m)[None, :]


# sliding_window_mask ----------------------------------------------------------------------------


def window_reference(N, window):
    i, j = grid(N, N)
    return (j <= i) & (i - j < window)


def window_with_tril(N, window):
    ones = np.ones((N, N), dtype=bool)
    return np.tril(ones) & ~np.tril(ones, k=-window)


def window_loop(N, window):
    mask = np.zeros((N, N), dtype=bool)
    for i in range(N):
        mask[i, max(0, i - window + 1) : i + 1] = True
    return mask


@pytest.mark.parametrize("fn", [window_reference, window_with_tril, window_loop])
def test_check_sliding_window_mask_accepts_correct_forms(capsys, fn):
    assert check_sliding_window_mask(fn)
    assert "✓ sliding_window_mask: correct" in verdict(capsys)


def test_check_sliding_window_mask_accepts_a_torch_bool_tensor(capsys):
    assert check_sliding_window_mask(lambda N, w: torch.from_numpy(window_reference(N, w)))
    assert "✓" in verdict(capsys)


def _w(rule):
    def fn(N, window):
        i, j = grid(N, N)
        return rule(i, j, window)

    return fn


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (_w(lambda i, j, w: ~((j <= i) & (i - j < w))), "inverted"),
        (_w(lambda i, j, w: (j <= i) & (i - j <= w)), "yours sees window + 1"),
        (_w(lambda i, j, w: (j <= i) & (i - j < w - 1)), "yours sees window - 1"),
        (_w(lambda i, j, w: (j >= i) & (j - i < w)), "wrong side"),
        (_w(lambda i, j, w: np.abs(i - j) < w), "two-sided"),
        (_w(lambda i, j, w: i - j < w), "not causal"),
        (_w(lambda i, j, w: (j < i) & (i - j <= w)), "leaves out the diagonal"),
        (lambda N, w: window_reference(N, w).astype(int), "expected bool"),
        (lambda N, w: window_reference(N, w)[:, :-1], "has shape"),
        (lambda N, w: None, "not implemented"),
        (lambda N, w: window_reference(N, w).tolist(), "expected a numpy bool array"),
    ],
)
def test_check_sliding_window_mask_rejects_mistakes(capsys, wrong, message):
    assert not check_sliding_window_mask(wrong)
    out = verdict(capsys)
    assert out.startswith("✗ sliding_window_mask:") and message in out


# chunk_causal_mask ------------------------------------------------------------------------------


def chunk_reference(n, m):
    return np.tril(np.ones((n, m), dtype=bool), k=m - n)


def chunk_from_square(n, m):
    return np.tril(np.ones((m, m), dtype=bool))[m - n :]  # the last n rows


def chunk_from_positions(n, m):
    i, j = grid(n, m)
    return j <= (m - n) + i


@pytest.mark.parametrize("fn", [chunk_reference, chunk_from_square, chunk_from_positions])
def test_check_chunk_causal_mask_accepts_correct_forms(capsys, fn):
    assert check_chunk_causal_mask(fn)
    assert "✓ chunk_causal_mask: correct" in verdict(capsys)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda n, m: ~chunk_reference(n, m), "inverted"),
        (lambda n, m: np.tril(np.ones((n, m), dtype=bool)), "aligned to the top left"),
        (lambda n, m: np.tril(np.ones((n, m), dtype=bool), k=m - n - 1), "blocks it"),
        (lambda n, m: np.tril(np.ones((n, m), dtype=bool), k=m - n + 1), "from its future"),
        (lambda n, m: np.ones((n, m), dtype=bool), "blocks nothing"),
        (lambda n, m: np.broadcast_to(np.arange(m) < m - n, (n, m)).copy(), "chunk's own tokens"),
        (lambda n, m: chunk_reference(n, m).T, "shape (m, n)"),
        (lambda n, m: np.tril(np.ones((m, m), dtype=bool)), "full (m, m)"),
        (lambda n, m: chunk_reference(n, m).astype(float), "expected bool"),
        (lambda n, m: None, "not implemented"),
    ],
)
def test_check_chunk_causal_mask_rejects_mistakes(capsys, wrong, message):
    assert not check_chunk_causal_mask(wrong)
    out = verdict(capsys)
    assert out.startswith("✗ chunk_causal_mask:") and message in out


# decode_chunk -----------------------------------------------------------------------------------


def decode_reference(q_new, k_new, v_new, cache, stats):
    k, v = cache.append(k_new, v_new)  # (B, h, m, d): the cache and the chunk
    n, m = q_new.shape[2], k.shape[2]
    mod = bottom_right_causal_mask_mod(n, m)
    return flash_attention(q_new, k, v, block_q=4, block_k=4, mask_mod=mod, stats=stats)[0]


def decode_own_mask_mod(q_new, k_new, v_new, cache, stats):
    cache.append(k_new, v_new)
    k, v = cache.k[:, :, : cache.length], cache.v[:, :, : cache.length]
    offset = cache.length - q_new.shape[2]  # query i sits at position offset + i

    def mask_mod(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + offset

    o, _ = flash_attention(q_new, k, v, False, 4, 4, mask_mod=mask_mod, stats=stats)
    return o


def decode_positions_mask_mod(q_new, k_new, v_new, cache, stats):
    start = cache.length  # position of the chunk's first token
    k, v = cache.append(k_new, v_new)
    o, _lse = flash_attention(
        q_new,
        k,
        v,
        block_q=4,
        block_k=4,
        mask_mod=lambda b, h, i, j: j <= start + i,
        stats=stats,
    )
    return o


@pytest.mark.parametrize("fn", [decode_reference, decode_own_mask_mod, decode_positions_mask_mod])
def test_check_decode_chunk_accepts_correct_forms(capsys, fn):
    assert check_decode_chunk(fn)
    assert "✓ decode_chunk: correct" in verdict(capsys)


def _decode(mask, keys="appended", blocks=4, calls=1, stats_on=True, ret="o", append=1):
    """A decoding step with one mistake; mask(n, m, length_before) -> mask_mod or 'causal'."""

    def fn(q_new, k_new, v_new, cache, stats):
        before = cache.length
        if append == 0:
            k = torch.cat([cache.k[:, :, :before], k_new], dim=2)
            v = torch.cat([cache.v[:, :, :before], v_new], dim=2)
        for _ in range(append):
            k, v = cache.append(k_new, v_new)
        if keys == "buffer":
            k, v = cache.k, cache.v
        elif keys == "chunk":
            k, v = k_new, v_new
        n, m = q_new.shape[2], k.shape[2]
        mod = mask(n, m, before)
        for _ in range(calls):
            out = flash_attention(
                q_new,
                k,
                v,
                is_causal=mod == "causal",
                block_q=blocks,
                block_k=blocks,
                mask_mod=None if mod in ("causal", None) else mod,
                stats=stats if stats_on else None,
            )
        return out if ret == "pair" else out[0]

    return fn


def _offset(extra):
    def mask(n, m, before):
        return lambda b, h, i, j: j <= i + m - n + extra

    return mask


def sdpa_with_the_right_mask(q_new, k_new, v_new, cache, stats):
    k, v = cache.append(k_new, v_new)
    n, m = q_new.shape[2], k.shape[2]
    allowed = torch.ones(n, m, dtype=torch.bool).tril(m - n)
    return F.scaled_dot_product_attention(q_new, k, v, attn_mask=allowed)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (_decode(lambda n, m, before: "causal"), "aligned to the top left"),
        (_decode(lambda n, m, before: None), "there is no mask"),
        (_decode(lambda n, m, before: "causal", keys="chunk"), "its own keys only"),
        (
            _decode(lambda n, m, before: lambda b, h, i, j: ~(j <= i + m - n)),
            "the mask is inverted",
        ),
        (_decode(_offset(-1)), "yours blocks it"),
        (_decode(_offset(+1)), "one key from its future"),
        (
            _decode(lambda n, m, before: bottom_right_causal_mask_mod(n, m), keys="buffer"),
            "empty slots included: use the first cache.length",
        ),
        (_decode(lambda n, m, before: None, keys="buffer"), "empty slots included, with no mask"),
        (
            _decode(lambda n, m, before: lambda b, h, i, j: j <= i + before - n),
            "BEFORE the chunk was appended",
        ),
        (_decode(_offset(0), append=0), "the cache was not updated"),
        (_decode(_offset(0), append=2), "appended to the cache twice"),
        (_decode(_offset(0), stats_on=False), "stats counted no tiles"),
        (sdpa_with_the_right_mask, "stats counted no tiles"),
        (_decode(_offset(0), calls=2), "every tile twice"),
        (_decode(_offset(0), blocks=64), "tiles of 4 x 4 give"),
        (_decode(_offset(0), blocks=2), "tiles of 4 x 4 give"),
        (_decode(_offset(0), ret="pair"), "return o only"),
        (
            _decode(lambda n, m, before: lambda b, h, i, j: j <= i + m - n, keys="buffer"),
            "empty slots included: use the first cache.length",
        ),
        (lambda q, k, v, cache, stats: None, "not implemented"),
        (lambda q, k, v, cache, stats: q.numpy(), "expected a torch tensor"),
        (lambda q, k, v, cache, stats: q[:, :, :, :2], "o has shape"),
    ],
)
def test_check_decode_chunk_rejects_mistakes(capsys, wrong, message):
    assert not check_decode_chunk(wrong)
    out = verdict(capsys)
    assert out.startswith("✗ decode_chunk:") and message in out, out


def test_check_decode_chunk_whole_buffer_with_the_right_mask_is_named(capsys):
    """Over the whole buffer, bottom_right_causal_mask_mod(n, m) masks the empty slots: the
    values are right, the tiles are not those of the m keys."""

    def fn(q_new, k_new, v_new, cache, stats):
        cache.append(k_new, v_new)
        n, m = q_new.shape[2], cache.length
        mod = bottom_right_causal_mask_mod(n, m)
        return flash_attention(q_new, cache.k, cache.v, False, 4, 4, mask_mod=mod, stats=stats)[0]

    assert not check_decode_chunk(fn)
    assert "ran over the whole preallocated buffer" in verdict(capsys)
