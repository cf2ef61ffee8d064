"""The checkers of notebook 13 accept right answers and name the usual mistakes."""

import numpy as np
import pytest
import torch

from mha_lib.exercises.nb13 import (
    causal_weights,
    check_first_token_score,
    check_perplexity,
    check_prefix_matching,
)
from mha_lib.llm.induction import stripe_score
from mha_lib.llm.sinks import position_attention


def verdict(capsys) -> str:
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return out


def test_the_weights_are_causal_and_normalised():
    A = causal_weights(2, 3, 6, 0)
    assert np.allclose(A.sum(-1), 1) and np.all(np.triu(A[0, 0], 1) == 0)


# first_token_score -----------------------------------------------------------------------------


def first_numpy(A, start):
    return A[:, :, start:, 0].mean(axis=(0, 2))


def first_torch(A, start):
    return torch.as_tensor(A)[:, :, start:, 0].mean(dim=(0, 2))


def first_loop(A, start):
    B, h, N, _ = A.shape
    return [
        sum(A[b, i, t, 0] for b in range(B) for t in range(start, N)) / (B * (N - start))
        for i in range(h)
    ]


def first_library(A, start):  # the library's own function, on weights (L = 1, B, h, N, N)
    return position_attention(torch.as_tensor(A)[None], 0, start)[0]


def first_np_functions(A, start):  # numpy's functions: torch tensors refuse axis=
    return np.mean(np.asarray(A)[:, :, start:, 0], axis=(0, 2))


@pytest.mark.parametrize(
    "fn", [first_numpy, first_torch, first_loop, first_library, first_np_functions]
)
def test_first_token_accepts_correct_forms(capsys, fn):
    assert check_first_token_score(fn)
    out = verdict(capsys)
    assert "✓ first_token_score: correct" in out and "numpy arrays only" not in out


def test_an_answer_for_numpy_arrays_only_passes_with_a_note(capsys):
    """The exercise gives torch tensors (the model's weights); numpy's np.mean(A, axis=...)
    raises on them, so the answer is judged on numpy arrays and told how to run the follow-up."""
    assert check_first_token_score(lambda A, s: np.mean(A[:, :, s:, 0], axis=(0, 2)))
    out = verdict(capsys)
    assert "✓ first_token_score: correct (on numpy arrays only" in out
    assert "A = np.asarray(A)" in out


def test_the_checkers_give_torch_tensors(capsys):
    seen = []
    check_first_token_score(lambda A, s: seen.append(type(A)) or first_torch(A, s))
    check_perplexity(lambda z, ids: seen.append((type(z), type(ids))) or ppl_torch(z, ids))
    assert seen[0] is torch.Tensor and seen[-1] == (torch.Tensor, torch.Tensor)
    capsys.readouterr()


FIRST_WRONG = [
    (lambda A, s: A[:, :, :, 0].mean(axis=(0, 2)), "only the queries t >= start count"),
    (lambda A, s: A[:, :, 0, s:].mean(axis=(0, 2)), "first ROW"),
    (lambda A, s: A[:, :, s + 1 :, 0].mean(axis=(0, 2)), "one query late"),
    (lambda A, s: A[:, :, s:, 0].sum(2).mean(0), "sums the weights"),
    (lambda A, s: A[:, :, s:, 0].sum(axis=(0, 2)) / (A.shape[0] * A.shape[2]), "divides by N"),
    (lambda A, s: A[:, :, s:, 0].max(2).mean(0), "largest weight"),
    (
        lambda A, s: np.diagonal(A, axis1=2, axis2=3)[:, :, s:].mean(axis=(0, 2)),
        "on itself (the diagonal)",
    ),
    (lambda A, s: A[:, :, s:, 0].mean(axis=(1, 2)), "averages over the heads (axis 1)"),
    (lambda A, s: float(A[:, :, s:, 0].mean()), "averages over the heads too"),
    (lambda A, s: A[:, :, s:, 0].mean(dim=2), "averages over the queries only"),
    (lambda A, s: A[:, :, s:, 1].mean(axis=(0, 2)), "position 1 (column 1)"),
    (lambda A, s: A[:, :, s:, -1].mean(axis=(0, 2)), "last column"),
    (lambda A, s: A[:, :, s - 1 :, 0].mean(axis=(0, 2)), "one query early"),
    (lambda A, s: np.median(np.asarray(A)[:, :, s:, 0], axis=2).mean(0), "median"),
    (lambda A, s: A[:, :, s:, 0].mean(dim=(0, 2)) * 2, "2 times the right one"),
    (lambda A, s: np.mean(A[:, :, :, 0], axis=(0, 2)), "only the queries t >= start count"),
    (lambda A, s: A[:, :, s:, 0].mean(dim=0), "averages over the batch only"),
]


@pytest.mark.parametrize(("fn", "words"), FIRST_WRONG, ids=[w for _, w in FIRST_WRONG])
def test_first_token_names_the_mistake(capsys, fn, words):
    assert not check_first_token_score(fn)
    assert words in verdict(capsys)


# prefix_matching -------------------------------------------------------------------------------


def prefix_numpy(A, period):
    t = np.arange(period, A.shape[-1])
    return A[:, :, t, t - period + 1].mean(axis=(0, 2))


def prefix_diagonal(A, period):
    return np.diagonal(A, offset=-(period - 1), axis1=2, axis2=3)[:, :, 1:].mean(axis=(0, 2))


def prefix_library(A, period):  # the library's stripe score, on weights (L = 1, B, h, N, N)
    return stripe_score(torch.as_tensor(A)[None], 1 - period, period)[0]


@pytest.mark.parametrize("fn", [prefix_numpy, prefix_diagonal, prefix_library])
def test_prefix_matching_accepts_correct_forms(capsys, fn):
    assert check_prefix_matching(fn)
    assert "✓ prefix_matching: correct" in verdict(capsys)


def _stripe(A, queries, keys):
    return A[:, :, queries, keys].mean(axis=(0, 2))


PREFIX_WRONG = [
    (
        lambda A, P: _stripe(A, np.arange(P, A.shape[-1]), np.arange(P, A.shape[-1]) - P),
        "duplicate-token",
    ),
    (
        lambda A, P: _stripe(A, np.arange(P, A.shape[-1]), np.arange(P, A.shape[-1]) - P + 2),
        "one past the token",
    ),
    (
        lambda A, P: _stripe(
            A, np.arange(P - 1, A.shape[-1]), np.arange(P - 1, A.shape[-1]) - P + 1
        ),
        "starts at query period - 1",
    ),
    (
        lambda A, P: _stripe(A, np.arange(P, A.shape[-1]) - P + 1, np.arange(P, A.shape[-1])),
        "transposed entry",
    ),
    (
        lambda A, P: (
            A[:, :, np.arange(P, A.shape[-1]), np.arange(1, A.shape[-1] - P + 1)].sum(2).mean(0)
        ),
        "sums the stripe",
    ),
    (
        lambda A, P: (
            A[:, :, np.arange(P, A.shape[-1]), np.arange(1, A.shape[-1] - P + 1)].sum(axis=(0, 2))
            / (A.shape[0] * A.shape[-1])
        ),
        "averages over every query",
    ),
    (
        lambda A, P: _stripe(A, np.arange(P, A.shape[-1]), np.arange(P, A.shape[-1]) - 1),
        "previous token",
    ),
    (
        lambda A, P: _stripe(
            A, np.arange(P + 1, A.shape[-1]), np.arange(P + 1, A.shape[-1]) - P + 1
        ),
        "one query late",
    ),
    (
        lambda A, P: _stripe(A, np.arange(P, A.shape[-1]), np.arange(P, A.shape[-1]) - P - 1),
        "t - period - 1",
    ),
    (
        lambda A, P: (
            A[:, :, np.arange(P, A.shape[-1]), np.arange(1, A.shape[-1] - P + 1)].max(2).mean(0)
        ),
        "largest weight",
    ),
    (lambda A, P: _stripe(A, np.arange(P, A.shape[-1]), np.arange(P, A.shape[-1])), "on itself"),
    (
        lambda A, P: torch.diagonal(A, offset=-(P - 1), dim1=2, dim2=3).mean(dim=(0, 2)),
        "starts at query period - 1",
    ),
    (
        lambda A, P: torch.diagonal(A, offset=-(P - 1), dim1=2, dim2=3)[:, :, 1:].mean(dim=0),
        "averages over the batch only",
    ),
    (
        lambda A, P: (
            torch.diagonal(A, offset=-(P - 1), dim1=2, dim2=3)[:, :, 1:].sum(dim=(0, 2))
            / A.shape[2]
        ),
        "times the right one",
    ),
]


@pytest.mark.parametrize(("fn", "words"), PREFIX_WRONG, ids=[w for _, w in PREFIX_WRONG])
def test_prefix_matching_names_the_mistake(capsys, fn, words):
    assert not check_prefix_matching(fn)
    assert words in verdict(capsys)


# perplexity ------------------------------------------------------------------------------------


def ppl_torch(logits, ids):
    logits, ids = torch.as_tensor(logits), torch.as_tensor(ids)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:])
    return loss.exp()


def ppl_numpy(logits, ids):
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    picked = np.take_along_axis(logp[:, :-1], ids[:, 1:, None], axis=-1)
    return float(np.exp(-picked.mean()))


def ppl_geometric(logits, ids):  # the geometric mean of 1 / p(right token)
    z = torch.as_tensor(logits)
    p = torch.softmax(z, -1)[:, :-1].gather(-1, torch.as_tensor(ids)[:, 1:, None])
    return (1 / p).log().mean().exp().item()


@pytest.mark.parametrize("fn", [ppl_torch, ppl_numpy, ppl_geometric])
def test_perplexity_accepts_correct_forms(capsys, fn):
    assert check_perplexity(fn)
    assert "✓ perplexity: correct" in verdict(capsys)


def _losses(logits, ids):
    logits, ids = torch.as_tensor(logits), torch.as_tensor(ids)
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none"
    )


PPL_WRONG = [
    (
        lambda z, ids: torch.nn.functional.cross_entropy(
            torch.as_tensor(z).transpose(1, 2), torch.as_tensor(ids)
        ).exp(),
        "shift by one",
    ),
    (lambda z, ids: _losses(z, ids).exp().mean(), "per-token perplexities"),
    (lambda z, ids: _losses(z, ids).mean(1).exp().mean(), "perplexities of the sequences"),
    (lambda z, ids: 2 ** _losses(z, ids).mean(), "base 2"),
    (lambda z, ids: _losses(z, ids).sum().exp(), "summed loss"),
    (
        lambda z, ids: np.exp(-np.take_along_axis(z[:, :-1], ids[:, 1:, None], -1).mean()),
        "raw logits as log-probabilities",
    ),
    (lambda z, ids: _losses(z, ids).mean(), "mean loss (cross-entropy)"),
    (
        lambda z, ids: (
            1
            / torch.softmax(torch.as_tensor(z), -1)[:, :-1]
            .gather(-1, torch.as_tensor(ids)[:, 1:, None])
            .mean()
        ),
        "1 / mean probability",
    ),
    (lambda z, ids: _losses(z, ids).mean(1).exp(), "keeps the sequences apart"),
    (
        lambda z, ids: torch.nn.functional.cross_entropy(
            torch.as_tensor(z)[:, 1:].transpose(1, 2), torch.as_tensor(ids)[:, :-1]
        ).exp(),
        "shifts the wrong way",
    ),
    (lambda z, ids: (-_losses(z, ids).mean()).exp(), "minus sign"),
    (lambda z, ids: 10 ** _losses(z, ids).mean(), "base 10"),
    (
        lambda z, ids: torch.exp(
            -torch.log_softmax(torch.as_tensor(z), 1)[:, :-1]
            .gather(-1, torch.as_tensor(ids)[:, 1:, None])
            .mean()
        ),
        "over the positions",
    ),
    (lambda z, ids: _losses(z, ids).mean().exp() + 1, "adds 1 to exp(mean loss)"),
    (lambda z, ids: torch.expm1(_losses(z, ids).mean()), "expm1"),
]


@pytest.mark.parametrize(("fn", "words"), PPL_WRONG, ids=[w for _, w in PPL_WRONG])
def test_perplexity_names_the_mistake(capsys, fn, words):
    assert not check_perplexity(fn)
    assert words in verdict(capsys)


def test_a_change_in_place_of_the_models_tensor_is_named(capsys):
    def in_place(A, start):
        A[:, :, :, 0] *= 1.0 + 0.0 * A.sum()  # an in-place write on the tensor it was given
        A /= A.sum(-1, keepdim=True)
        return A[:, :, start:, 0].mean(dim=(0, 2))

    assert not check_first_token_score(in_place)
    assert "in place" in verdict(capsys)
