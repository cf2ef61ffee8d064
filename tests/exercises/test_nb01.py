"""The checkers of notebook 01: a catalogue of wrong answers, each rejected with a message
that names the mistake, and several correct forms, each accepted."""

import functools
import math

import numpy as np
import pytest
import torch

import mha_lib
import mha_lib.attention
from mha_lib import scaled_dot_product_attention, softmax
from mha_lib.exercises import (
    check_diagonal_counterexample,
    check_scaled_dot_product_attention,
    check_softmax,
)
from mha_lib.exercises.nb01 import _attention_mistakes


def verdict(checker, fn, capsys):
    """Run a checker; return (passed, the one line it printed)."""
    passed = checker(fn)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1, lines
    return passed, lines[0]


# softmax ----------------------------------------------------------------------------------------


def stable_softmax(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def logsumexp_softmax(x):
    """Another valid algorithm: exp(x - logsumexp(x)), returned in float32."""
    z = x - np.max(x, axis=-1, keepdims=True)
    return np.exp(z - np.log(np.exp(z).sum(axis=-1, keepdims=True))).astype(np.float32)


def row_by_row_softmax(x):
    """A loop over rows, for any number of leading axes, into a float buffer."""
    x = np.asarray(x, dtype=float)
    out = np.empty_like(x)
    for index in np.ndindex(x.shape[:-1]):
        e = np.exp(x[index] - x[index].max())
        out[index] = e / e.sum()
    return out


SOFTMAX_RIGHT = [
    stable_softmax,
    logsumexp_softmax,
    row_by_row_softmax,
    lambda x: torch.softmax(torch.as_tensor(x, dtype=torch.float64), dim=-1),
    lambda x: torch.softmax(torch.as_tensor(x, dtype=torch.float64), dim=-1).float(),
]


def shifted(x, shift, over=-1):
    """exp(x - shift) normalised over `over`."""
    e = np.exp(x - shift)
    return e / e.sum(axis=over, keepdims=True)


def in_place(x):
    x -= x.max(axis=-1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=-1, keepdims=True)
    return x


def into_zeros_like(x):
    out = np.zeros_like(x)
    out[...] = stable_softmax(x)
    return out


def without_keepdims(x):
    e = np.exp(x - np.max(x, axis=-1))  # (..., M) - (...): lines up only when x is 1-D
    return e / e.sum(axis=-1)


def sum_without_keepdims(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / e.sum(axis=-1)  # (..., M) / (...)


def torch_without_keepdim(x):
    t = torch.as_tensor(x, dtype=torch.float64)
    e = torch.exp(t - t.max(dim=-1).values)
    return e / e.sum(dim=-1)


SOFTMAX_WRONG = [
    (without_keepdims, "drops keepdims: on a small matrix the row maxima (or sums) have shape"),
    (sum_without_keepdims, "keepdims=True"),
    (torch_without_keepdim, "it drops keepdims"),
    (lambda x: shifted(x, x.max(axis=0, keepdims=True), over=0), "wrong axis"),
    (lambda x: shifted(x, x.max(), over=None), "sum of the whole array"),
    (lambda x: np.exp(x), "without dividing"),
    (lambda x: x / x.sum(axis=-1, keepdims=True), "without exponentiating"),
    (lambda x: shifted(x, 0.0), "subtract each row's maximum before exp"),
    (lambda x: shifted(x, x.max()), "ONE maximum for the whole array"),
    (lambda x: shifted(x, x.max(axis=0, keepdims=True)), "each column's maximum"),
    (lambda x: shifted(x, x.min(axis=-1, keepdims=True)), "MINIMUM"),
    (lambda x: shifted(x, x.max(axis=1, keepdims=True), over=1), "works on 2-D input only"),
    (lambda x: shifted(x, x.max(axis=-1)[:, None]), "works on 2-D input only"),
    (
        lambda x: (
            np.exp(x - x.max(axis=-1, keepdims=True))
            / np.exp(x - x.max(axis=-1, keepdims=True)).max(axis=-1, keepdims=True)
        ),
        "largest entry is 1 and the rows do not sum to 1",
    ),
    # exp only, no normalisation: the review's case, once told it divides by the maximum
    (lambda x: np.exp(x - x.max(axis=-1, keepdims=True)), "without dividing by the row sum"),
    # torch habits on numpy arrays
    (lambda x: torch.softmax(x, dim=-1), "it passes a numpy array to torch.softmax()"),
    (lambda x: torch.nn.functional.softmax(x, dim=-1), "no .softmax(), a torch tensor method"),
    (lambda x: shifted(x, x.max(dim=-1, keepdims=True)), "numpy's keyword is axis=..."),
    (lambda x: shifted(x, x.max(axis=-1, keepdim=True)), "keepdims=True (with an s)"),
    (lambda x: np.softmax(x, axis=-1), "numpy has no np.softmax"),
    (lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True).view(-1), "calls .view(...)"),
    # numerator and denominator from different exponentials, or summed over the wrong axis
    (
        lambda x: np.exp(x - x.max(axis=-1, keepdims=True)) / np.exp(x).sum(-1, keepdims=True),
        "its rows do not sum to 1",
    ),
    (lambda x: stable_softmax(x) * 1.5, "row sums run from 1.5 to 1.5"),
    (lambda x: np.log(stable_softmax(x)), "log-softmax"),
    (lambda x: stable_softmax(np.asarray(x, dtype=np.float16)), "float16"),
    (in_place, "in place"),
    (into_zeros_like, "returns integers"),
    (lambda x: np.round(stable_softmax(x), 2), "do not round"),
    (lambda x: None, "not implemented"),
    (lambda x: 1 / 0, "ZeroDivisionError"),
]


@pytest.mark.parametrize("fn", SOFTMAX_RIGHT)
def test_check_softmax_accepts(fn, capsys):
    assert verdict(check_softmax, fn, capsys) == (True, "✓ softmax: correct")


@pytest.mark.parametrize(("fn", "words"), SOFTMAX_WRONG)
def test_check_softmax_names_the_mistake(fn, words, capsys):
    passed, line = verdict(check_softmax, fn, capsys)
    assert not passed and line.startswith("✗ softmax: ") and words in line, line


def test_global_maximum_gives_nan_on_the_learners_example():
    """The reported hole: one maximum for the whole array turns a far row into NaN."""
    x = np.array([[0.0, 1.0], [-1e4, -1e4 + 1.0]])
    with np.errstate(all="ignore"):
        assert np.isnan(shifted(x, x.max())).any()
    assert np.allclose(softmax(x), [[0.269, 0.731]] * 2, atol=1e-3)


# scaled dot-product attention -------------------------------------------------------------------


def attention(q, k, v):
    weights = stable_softmax(q @ k.T / np.sqrt(q.shape[-1]))  # (N, M)
    return weights @ v  # (N, d_v)


def attention_einsum_list(q, k, v):
    """einsum, returned as a list [output, weights]."""
    weights = softmax(np.einsum("nd,md->nm", q, k) / math.sqrt(q.shape[-1]))
    return [np.einsum("nm,me->ne", weights, v), weights]


def attention_torch(q, k, v):
    q, k, v = (torch.from_numpy(a) for a in (q, k, v))
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)  # a tensor


def attention_with_the_library_softmax(q, k, v):
    """Calls mha_lib.softmax, which notebook 01 gave before this exercise: fine."""
    weights = mha_lib.softmax(q @ k.T / np.sqrt(q.shape[-1]))  # (N, M)
    return weights @ v, weights


ATTENTION_RIGHT = [
    attention,
    attention_with_the_library_softmax,  # (output, weights)
    attention_einsum_list,
    attention_torch,
    lambda q, k, v: attention(q, k, v).astype(np.float32),
    lambda q, k, v: attention_torch(q, k, v).float(),
]


def sdpa(q, k, v, scale, axis=-1, transpose=False):
    scores = k @ q.T if transpose else q @ k.T
    return softmax(scores * scale, axis=axis) @ v


def inv_sqrt(n):
    return 1 / math.sqrt(n)


def unstable(q, k, v):
    e = np.exp(q @ k.T / math.sqrt(q.shape[-1]))
    return e / e.sum(axis=-1, keepdims=True) @ v


def clipped_scores(q, k, v):
    """Clips the scaled scores to [-50, 50]: right for ordinary scores, wrong for large ones."""
    return softmax(np.clip(q @ k.T / math.sqrt(q.shape[-1]), -50, 50)) @ v


ATTENTION_WRONG = [
    (lambda q, k, v: sdpa(q, k, v, 1.0), "scale is missing"),
    (lambda q, k, v: sdpa(q, k, v, 1 / q.shape[-1]), "divides the scores by d_k"),
    (lambda q, k, v: sdpa(q, k, v, inv_sqrt(v.shape[-1])), "√d_v"),
    (lambda q, k, v: sdpa(q, k, v, inv_sqrt(k.shape[0])), "number of tokens"),
    (lambda q, k, v: sdpa(q, k, v, inv_sqrt(q.shape[0])), "number of tokens"),
    (lambda q, k, v: sdpa(q, k, v, inv_sqrt(q.shape[-1]), axis=0), "wrong axis"),
    (lambda q, k, v: sdpa(q, k, v, inv_sqrt(q.shape[-1]), transpose=True), "k @ q.T"),
    (
        lambda q, k, v: sdpa(q, k, v, inv_sqrt(q.shape[-1]), axis=0, transpose=True),
        "weights are transposed",
    ),
    (lambda q, k, v: softmax(q @ k.T) / math.sqrt(q.shape[-1]) @ v, "after the softmax"),
    (lambda q, k, v: softmax(q @ k / math.sqrt(q.shape[-1])) @ v, "k is not transposed"),
    (lambda q, k, v: softmax(q @ k.T / math.sqrt(q.shape[-1])), "multiply them by v"),
    (lambda q, k, v: scaled_dot_product_attention(q, k, v)[::-1], "wrong order"),
    (unstable, "large (about 1e3)"),
    (lambda q, k, v: softmax(q @ k.T / math.sqrt(q.shape[-1])) @ k, "expected shape"),
    (lambda q, k, v: sdpa(q, k, v, inv_sqrt(4)), "right with d_k = 4, d_v = 3"),
    (lambda q, k, v: sdpa(q, k, v, inv_sqrt(4)), "read d_k = q.shape[-1]"),
    (lambda q, k, v: attention(q, k[: len(q)], v[: len(q)]), "right with N = M = 5 tokens"),
    (clipped_scores, "right when the scores are about 1 and wrong when they are about 1e3"),
    (lambda q, k, v: sdpa(q, k, v, 0.9 * inv_sqrt(q.shape[-1])), "wrong values"),
    (lambda q, k, v: softmax(q @ k.transpose(-2, -1) / 2) @ v, "k.transpose(-2, -1)"),
    # shape errors, diagnosed on a probe where every product fits
    (lambda q, k, v: softmax(q @ k.T / np.sqrt(q.shape[-1])) @ v.T, "it multiplies by v.T"),
    (lambda q, k, v: softmax(q @ v.T / np.sqrt(q.shape[-1])) @ k, "k and v are swapped"),
    (lambda q, k, v: softmax(q * k / np.sqrt(q.shape[-1])) @ v, "entry by entry (q * k)"),
    (lambda q, k, v: softmax(q @ k.T * np.sqrt(q.shape[-1])) @ v, "multiplies the scores by √d_k"),
    (
        lambda q, k, v: torch.softmax(q @ k.T / np.sqrt(q.shape[-1]), dim=-1) @ v,
        "torch.softmax()",
    ),
    (lambda q, k, v: None, "not implemented"),
]


@pytest.mark.parametrize("fn", ATTENTION_RIGHT)
def test_check_attention_accepts(fn, capsys):
    passed, line = verdict(check_scaled_dot_product_attention, fn, capsys)
    assert passed and line == "✓ scaled dot-product attention: correct"


@pytest.mark.parametrize(("fn", "words"), ATTENTION_WRONG)
def test_check_attention_names_the_mistake(fn, words, capsys):
    passed, line = verdict(check_scaled_dot_product_attention, fn, capsys)
    assert not passed and line.startswith("✗ scaled dot-product attention: ")
    assert words in line, line


def test_check_attention_adds_no_hint_that_the_answer_does_not_show(capsys):
    """A generic mistake in a later case gets "wrong values" alone when the answer is also wrong
    on every probe (here: wrong as soon as N != M or d_v != 3), so no hint is shown."""

    def wrong_unless_case_one(q, k, v):
        off = len(q) != len(k) or v.shape[1] != 3
        return sdpa(q, k, v, inv_sqrt(q.shape[-1])) + 0.1 * off

    passed, line = verdict(check_scaled_dot_product_attention, wrong_unless_case_one, capsys)
    assert not passed and "wrong values" in line and "[" not in line, line


def test_attention_mistakes_are_distinguishable():
    """Every diagnosed mistake gives an output different from the others and from the answer."""
    rng = np.random.default_rng(1)
    q, k, v = rng.normal(size=(5, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 3))
    outputs = [*_attention_mistakes(q, k, v).values(), scaled_dot_product_attention(q, k, v)[0]]
    for a in range(len(outputs)):
        for b in range(a + 1, len(outputs)):
            assert not np.allclose(outputs[a], outputs[b], rtol=1e-3, atol=1e-3)


# diagonal counterexample ------------------------------------------------------------------------

COUNTEREXAMPLE_RIGHT = [
    lambda: np.array([[1.0, 0.0], [2.0, 2.0], [0.0, 5.0]]),
    lambda: [[1, 0, 0], [2, 2, 0], [0, 5, 0], [0, 0, 1]],  # a list of ints, N = 4, C = 3
    lambda: torch.tensor([[1.0, 0.0], [2.0, 2.0], [0.0, 5.0]], requires_grad=True),
]

COUNTEREXAMPLE_WRONG = [
    (lambda: np.array([[1.0, 0.0], [2.0, 2.0], [0.0, 5.0]]).T, "X looks transposed"),
    (lambda: np.array([[1, 0, 0], [2, 2, 0], [0, 5, 0], [0, 0, 1]]).T, "return X.T"),
    (lambda: np.array([[1.0, 0.0], [2.0, 2.0]]), "use at least 3"),
    (lambda: np.array([[1.0], [2.0], [3.0]]), "parallel"),
    (lambda: np.array([[1.0, 1.0], [2.0, 2.0], [0.0, 1.0]]), "parallel"),
    (lambda: np.array([[1.0, 0.0], [2.0, 0.1], [0.0, 0.0]]), "zero vector"),
    (lambda: np.eye(3), "same norm"),
    (lambda: np.diag([1.0, 2.0, 3.0]), "no token attends more"),
    (lambda: np.array([[1.0, 0.0], [2.0, 1.0], [0.0, 1.0]]), "competitor"),
    (lambda: np.ones(3), "expected a matrix"),
    (lambda: np.array([[np.nan, 0.0], [1.0, 1.0], [2.0, 0.0]]), "NaN"),
    (lambda: "X", "expected a matrix X (N, C)"),
    # the weights α of a counterexample instead of its X: once read as "X looks transposed"
    (
        lambda: mha_lib.self_attention(np.array([[1.0, 0.0], [2.0, 2.0], [0.0, 5.0]]))[1],
        "like attention weights α",
    ),
    (
        lambda: mha_lib.self_attention(np.array([[1.0, 0.0], [2.0, 2.0], [0.0, 5.0]])),
        "return X alone",
    ),
    (lambda: None, "not implemented"),
]


@pytest.mark.parametrize("fn", COUNTEREXAMPLE_RIGHT)
def test_check_counterexample_accepts(fn, capsys):
    passed, line = verdict(check_diagonal_counterexample, fn, capsys)
    assert passed and line == "✓ diagonal counterexample: correct"


@pytest.mark.parametrize(("fn", "words"), COUNTEREXAMPLE_WRONG)
def test_check_counterexample_names_the_mistake(fn, words, capsys):
    passed, line = verdict(check_diagonal_counterexample, fn, capsys)
    assert not passed and line.startswith("✗ diagonal counterexample: ") and words in line, line


def test_catalogues_are_complete():
    for wrong, right in (
        (SOFTMAX_WRONG, SOFTMAX_RIGHT),
        (ATTENTION_WRONG, ATTENTION_RIGHT),
        (COUNTEREXAMPLE_WRONG, COUNTEREXAMPLE_RIGHT),
    ):
        assert len(wrong) >= 6 and len(right) >= 2


# answers that call the library function the exercise asks for -----------------------------------

LIBRARY = "the exercise asks you to write it yourself"


class CallableSoftmax:
    def __call__(self, x):
        return mha_lib.attention.softmax(x)


def softmax_through_a_closure():
    sm = mha_lib.softmax

    def my_softmax(x):
        return sm(x)

    return my_softmax


SOFTMAX_BY_THE_LIBRARY = [
    softmax,  # the function itself
    lambda x: mha_lib.attention.softmax(x),  # through its module
    lambda x: mha_lib.softmax(x, axis=-1),  # through the package
    lambda x: softmax(x),  # a name in the answer's globals
    functools.partial(mha_lib.softmax, axis=-1),
    functools.partial(lambda x, f: f(x), f=softmax),
    CallableSoftmax(),
    softmax_through_a_closure(),
    lambda x, sm=softmax: sm(x),  # a default argument
]


@pytest.mark.parametrize("fn", SOFTMAX_BY_THE_LIBRARY)
def test_check_softmax_rejects_the_library_softmax(fn, capsys):
    passed, line = verdict(check_softmax, fn, capsys)
    assert not passed and "it calls mha_lib.softmax" in line and LIBRARY in line, line


ATTENTION_BY_THE_LIBRARY = [
    scaled_dot_product_attention,
    lambda q, k, v: mha_lib.scaled_dot_product_attention(q, k, v)[0],
    lambda q, k, v: mha_lib.attention.scaled_dot_product_attention(q, k, v),
    functools.partial(scaled_dot_product_attention, mask=None),
]


@pytest.mark.parametrize("fn", ATTENTION_BY_THE_LIBRARY)
def test_check_attention_rejects_the_library_attention(fn, capsys):
    passed, line = verdict(check_scaled_dot_product_attention, fn, capsys)
    assert not passed and "it calls mha_lib.scaled_dot_product_attention" in line, line
    assert LIBRARY in line, line


def test_a_wrong_answer_through_the_library_keeps_its_diagnosis(capsys):
    passed, line = verdict(
        check_scaled_dot_product_attention,
        lambda q, k, v: scaled_dot_product_attention(q, k, v)[::-1],
        capsys,
    )
    assert not passed and "wrong order" in line and "mha_lib.scaled_dot_product_attention" in line


def test_the_watch_on_the_library_is_undone_even_when_the_answer_raises(capsys):
    original = mha_lib.attention.softmax
    names = dict(globals())

    def calls_then_raises(x):
        mha_lib.softmax(x)
        raise RuntimeError("boom")

    passed, line = verdict(check_softmax, calls_then_raises, capsys)
    assert not passed and "boom" in line and "mha_lib.softmax" in line, line
    assert mha_lib.attention.softmax is original and mha_lib.softmax is original
    assert globals()["softmax"] is original and globals().keys() == names.keys()
    # and the checker still accepts a right answer afterwards
    assert verdict(check_softmax, stable_softmax, capsys) == (True, "✓ softmax: correct")
