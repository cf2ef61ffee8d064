"""The checkers of notebook 08 accept right answers and name the usual mistakes."""

import numpy as np
import pytest
import torch

from mha_lib.exercises.nb08 import (
    check_chunk_causal_mask,
    check_online_softmax_step,
    check_sliding_window_mask,
)


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


# online_softmax_step ----------------------------------------------------------------------------


def step_reference(m, s, acc, scores, v_block):
    m_new = torch.maximum(m, scores.max(dim=-1, keepdim=True).values)
    rescale = torch.exp(m - m_new)
    p = torch.exp(scores - m_new)
    return m_new, s * rescale + p.sum(dim=-1, keepdim=True), acc * rescale + p @ v_block


def step_numpy(m, s, acc, scores, v_block):
    m, s, acc, scores, v_block = (t.numpy() for t in (m, s, acc, scores, v_block))
    m_new = np.maximum(m, scores.max(axis=-1, keepdims=True))
    p = np.exp(scores - m_new)
    alpha = np.exp(m - m_new)
    return m_new, alpha * s + p.sum(axis=-1, keepdims=True), alpha * acc + p @ v_block


@pytest.mark.parametrize("fn", [step_reference, step_numpy])
def test_check_online_softmax_step_accepts_correct_forms(capsys, fn):
    assert check_online_softmax_step(fn)
    assert "✓ online_softmax_step: correct" in verdict(capsys)


def _mistake(kind):
    def fn(m, s, acc, scores, v_block):
        block_max = scores.max(dim=-1, keepdim=True).values
        m_new = block_max if kind == "block max" else torch.maximum(m, block_max)
        if kind == "old max":
            m_new = m
        rescale = torch.exp(m - m_new)
        if kind == "upside down":
            rescale = torch.exp(m_new - m)
        p = torch.exp(scores - m_new)
        s_new = (s if kind in ("sum", "both") else s * rescale) + p.sum(dim=-1, keepdim=True)
        acc_new = (acc if kind in ("acc", "both") else acc * rescale) + p @ v_block
        if kind == "no max":
            s_new = s + torch.exp(scores).sum(dim=-1, keepdim=True)
        if kind == "normalised":
            acc_new = acc_new / s_new
        if kind == "squeezed":
            return m_new[:, 0], s_new[:, 0], acc_new
        if kind == "pair":
            return m_new, s_new
        return m_new, s_new, acc_new

    return fn


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("sum", "forgot to rescale the running sum"),
        ("acc", "forgot to rescale acc"),
        ("both", "forgot to rescale both"),
        ("upside down", "upside down"),
        ("block max", "the block's max only"),
        ("old max", "the old max"),
        ("normalised", "acc_new is normalised"),
        ("no max", "without subtracting the max"),
        ("squeezed", "keep a (N, 1) axis"),
        ("pair", "expected a triple"),
    ],
)
def test_check_online_softmax_step_rejects_mistakes(capsys, kind, message):
    assert not check_online_softmax_step(_mistake(kind))
    out = verdict(capsys)
    assert out.startswith("✗ online_softmax_step:") and message in out


def test_check_online_softmax_step_reports_a_crash(capsys):
    def crash(m, s, acc, scores, v_block):
        return scores @ acc  # wrong shapes

    assert not check_online_softmax_step(crash)
    assert "raised RuntimeError" in verdict(capsys)
