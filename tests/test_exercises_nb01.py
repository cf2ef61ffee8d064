"""The checkers of notebook 01 accept the right answer and name the usual mistakes."""

import math

import numpy as np
import pytest

from mha_lib import scaled_dot_product_attention, softmax
from mha_lib.exercises import (
    check_diagonal_counterexample,
    check_scaled_dot_product_attention,
    check_softmax,
)
from mha_lib.exercises.nb01 import _attention_mistakes


def verdict(capsys) -> str:
    """The single line a checker printed."""
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return out


# softmax ----------------------------------------------------------------------------------------


def stable_softmax(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_check_softmax_accepts_reference(capsys):
    assert check_softmax(stable_softmax)
    assert "✓ softmax: correct" in verdict(capsys)
    assert check_softmax(softmax)
    assert "✓ softmax: correct" in verdict(capsys)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda x: np.exp(x) / np.exp(x).sum(axis=0, keepdims=True), "wrong axis"),
        (lambda x: np.exp(x) / np.exp(x).sum(), "whole matrix"),
        (lambda x: np.exp(x), "without dividing"),
        (lambda x: x / x.sum(axis=-1, keepdims=True), "without exponentiating"),
        (lambda x: np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True), "overflows"),
        (lambda x: None, "not implemented"),
        (lambda x: 1 / 0, "ZeroDivisionError"),
    ],
)
def test_check_softmax_names_the_mistake(capsys, wrong, message):
    with np.errstate(all="ignore"):
        assert not check_softmax(wrong)
    out = verdict(capsys)
    assert out.startswith("✗ softmax:") and message in out


# scaled dot-product attention -------------------------------------------------------------------


def attention(q, k, v):
    weights = stable_softmax(q @ k.T / np.sqrt(q.shape[-1]))  # (N, M)
    return weights @ v  # (N, d_v)


def test_check_attention_accepts_reference(capsys):
    assert check_scaled_dot_product_attention(attention)
    assert "✓ scaled dot-product attention: correct" in verdict(capsys)
    assert check_scaled_dot_product_attention(scaled_dot_product_attention)  # (out, weights)
    assert "✓" in verdict(capsys)


def sdpa(q, k, v, scale, axis=-1, transpose=False):
    scores = k @ q.T if transpose else q @ k.T
    return softmax(scores * scale, axis=axis) @ v


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda q, k, v: sdpa(q, k, v, 1.0), "scale is missing"),
        (lambda q, k, v: sdpa(q, k, v, 1 / q.shape[-1]), "divides the scores by d_k"),
        (lambda q, k, v: sdpa(q, k, v, 1 / math.sqrt(v.shape[-1])), "√d_v"),
        (lambda q, k, v: sdpa(q, k, v, 1 / math.sqrt(q.shape[-1]), axis=0), "wrong axis"),
        (lambda q, k, v: sdpa(q, k, v, 1 / math.sqrt(q.shape[-1]), transpose=True), "k @ q.T"),
        (
            lambda q, k, v: sdpa(q, k, v, 1 / math.sqrt(q.shape[-1]), axis=0, transpose=True),
            "weights are transposed",
        ),
        (lambda q, k, v: softmax(q @ k.T) / math.sqrt(q.shape[-1]) @ v, "after the softmax"),
        (lambda q, k, v: softmax(q @ k / math.sqrt(q.shape[-1])) @ v, "transpose k"),
        (lambda q, k, v: softmax(q @ k.T / math.sqrt(q.shape[-1])), "multiply them by v"),
        (lambda q, k, v: softmax(q @ k.T / math.sqrt(k.shape[0])) @ v, "wrong values"),
        (lambda q, k, v: softmax(q @ k.T / math.sqrt(q.shape[-1])) @ k, "expected shape"),
        (lambda q, k, v: None, "not implemented"),
    ],
)
def test_check_attention_names_the_mistake(capsys, wrong, message):
    assert not check_scaled_dot_product_attention(wrong)
    out = verdict(capsys)
    assert out.startswith("✗ scaled dot-product attention:") and message in out


def test_attention_mistakes_are_distinguishable():
    """Every diagnosed mistake gives an output different from the others and from the answer."""
    rng = np.random.default_rng(1)
    q, k, v = rng.normal(size=(5, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 3))
    outputs = [*_attention_mistakes(q, k, v).values(), scaled_dot_product_attention(q, k, v)[0]]
    for a in range(len(outputs)):
        for b in range(a + 1, len(outputs)):
            assert not np.allclose(outputs[a], outputs[b], rtol=1e-3, atol=1e-3)


# diagonal counterexample ------------------------------------------------------------------------


def test_check_counterexample_accepts_a_counterexample(capsys):
    assert check_diagonal_counterexample(lambda: np.array([[1.0, 0.0], [2.0, 2.0], [0.0, 5.0]]))
    assert "✓ diagonal counterexample: correct" in verdict(capsys)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda: np.array([[1.0, 0.0], [2.0, 2.0]]), "use at least 3"),
        (lambda: np.array([[1.0], [2.0], [3.0]]), "parallel"),
        (lambda: np.array([[1.0, 0.0], [2.0, 0.1], [0.0, 0.0]]), "zero vector"),
        (lambda: np.eye(3), "same norm"),
        (lambda: np.diag([1.0, 2.0, 3.0]), "no token attends more"),
        (lambda: np.array([[1.0, 0.0], [2.0, 1.0], [0.0, 1.0]]), "competitor"),
        (lambda: np.ones(3), "expected a matrix"),
        (lambda: np.array([[np.nan, 0.0], [1.0, 1.0], [2.0, 0.0]]), "NaN"),
        (lambda: None, "not implemented"),
    ],
)
def test_check_counterexample_names_the_mistake(capsys, wrong, message):
    assert not check_diagonal_counterexample(wrong)
    out = verdict(capsys)
    assert out.startswith("✗ diagonal counterexample:") and message in out
