"""The checkers of notebook 06 accept right answers and name the usual mistakes."""

import numpy as np
import pytest
import torch

from mha_lib.exercises import check_induction_score, check_q_composition
from mha_lib.exercises.nb06 import _composition_mistakes, _induction_mistakes, _rank_d, _weights
from mha_lib.toy.circuits import induction_score, q_composition


def verdict(capsys) -> str:
    """The single line a checker printed."""
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return out


# q_composition ----------------------------------------------------------------------------------


def fro(M):
    return np.linalg.norm(M)


def test_check_q_composition_accepts_correct_forms(capsys):
    assert check_q_composition(lambda W_QK, W_OV: fro(W_OV @ W_QK) / (fro(W_QK) * fro(W_OV)))
    assert "✓ q_composition: correct" in verdict(capsys)
    # transposed: ‖W_QKᵀ W_OVᵀ‖ is the same number
    assert check_q_composition(lambda W_QK, W_OV: fro(W_QK.T @ W_OV.T) / fro(W_QK) / fro(W_OV))
    assert "✓" in verdict(capsys)
    # torch, returning a 0-d tensor
    assert check_q_composition(
        lambda W_QK, W_OV: (
            torch.linalg.norm(torch.tensor(W_OV) @ torch.tensor(W_QK))
            / (torch.linalg.norm(torch.tensor(W_QK)) * torch.linalg.norm(torch.tensor(W_OV)))
        )
    )
    assert "✓" in verdict(capsys)
    # the Frobenius norm written out as sqrt(trace(M Mᵀ)), returning a Python float
    assert check_q_composition(
        lambda W_QK, W_OV: float(
            np.sqrt(np.trace((W_OV @ W_QK) @ (W_OV @ W_QK).T))
            / np.sqrt(np.sum(W_QK**2) * np.sum(W_OV**2))
        )
    )
    assert "✓" in verdict(capsys)
    # the library's own function
    assert check_q_composition(
        lambda W_QK, W_OV: q_composition(torch.tensor(W_QK), torch.tensor(W_OV))
    )
    assert "✓" in verdict(capsys)
    # written for torch tensors (the notebook's qk_circuit and ov_circuit are tensors): numpy
    # arrays make torch.linalg.norm raise, so the checker calls it again with tensors
    assert check_q_composition(
        lambda W_QK, W_OV: (
            torch.linalg.norm(W_OV @ W_QK) / (torch.linalg.norm(W_QK) * torch.linalg.norm(W_OV))
        )
    )
    assert "✓" in verdict(capsys)
    assert check_q_composition(lambda W_QK, W_OV: q_composition(W_QK, W_OV))
    assert "✓" in verdict(capsys)


def test_the_q_composition_mistakes_are_distinct_on_the_test_matrices():
    rng = np.random.default_rng(20)
    W_QK, W_OV = _rank_d(rng, 7, 3), _rank_d(rng, 7, 3)
    values = [float(v) for v in _composition_mistakes(W_QK, W_OV).values()]
    values.append(fro(W_OV @ W_QK) / (fro(W_QK) * fro(W_OV)))  # the right answer
    assert min(abs(a - b) for i, a in enumerate(values) for b in values[i + 1 :]) > 1e-3


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda W_QK, W_OV: fro(W_QK @ W_OV.T) / (fro(W_QK) * fro(W_OV)), "K-composition"),
        (lambda W_QK, W_OV: fro(W_QK @ W_OV) / (fro(W_QK) * fro(W_OV)), "wrong order"),
        # the same number written as W_OVᵀ W_QKᵀ, or with the arguments taken as (W_OV, W_QK):
        # the message names all three forms, not only W_QK @ W_OV
        (lambda W_QK, W_OV: fro(W_OV.T @ W_QK.T) / (fro(W_QK) * fro(W_OV)), "W_OV.T @ W_QK.T"),
        (lambda W_OV, W_QK: fro(W_OV @ W_QK) / (fro(W_QK) * fro(W_OV)), "arguments taken as"),
        (
            lambda W_QK, W_OV: (
                np.linalg.norm(W_OV @ W_QK, "nuc")
                / (np.linalg.norm(W_QK, "nuc") * np.linalg.norm(W_OV, "nuc"))
            ),
            "nuclear norm",
        ),
        (lambda W_QK, W_OV: fro(W_OV @ W_QK) / fro(W_QK), "divides by ‖W_QK‖_F only"),
        (lambda W_QK, W_OV: fro(W_OV @ W_QK) / fro(W_OV), "divides by ‖W_OV‖_F only"),
        (lambda W_QK, W_OV: (W_OV @ W_QK) / (fro(W_QK) * fro(W_OV)), "returns a (7, 7) matrix"),
        (lambda W_QK, W_OV: fro(W_OV @ W_QK), "not normalised"),
        (
            lambda W_QK, W_OV: (
                np.linalg.norm(W_OV @ W_QK, 2) / (np.linalg.norm(W_QK, 2) * np.linalg.norm(W_OV, 2))
            ),
            "spectral norm",
        ),
        (lambda W_QK, W_OV: fro(W_OV @ W_QK) ** 2 / (fro(W_QK) * fro(W_OV)) ** 2, "squares"),
        (lambda W_QK, W_OV: fro(W_OV @ W_QK) / (fro(W_QK) + fro(W_OV)), "adds the two norms"),
        (lambda W_QK, W_OV: fro(W_OV * W_QK) / (fro(W_QK) * fro(W_OV)), "element-wise"),
        (lambda W_QK, W_OV: np.sum(W_OV * W_QK) / (fro(W_QK) * fro(W_OV)), "cosine"),
        (lambda W_QK, W_OV: fro(W_OV @ W_OV) / fro(W_OV) ** 2, "uses W_OV twice"),
        (lambda W_QK, W_OV: fro(W_OV.T @ W_QK) / (fro(W_QK) * fro(W_OV)), "W_OV.T @ W_QK"),
        (lambda W_QK, W_OV: fro(W_QK.T @ W_OV) / (fro(W_QK) * fro(W_OV)), "transposes one of"),
        # a K-composition written the other way round is the same number: named as such
        (lambda W_QK, W_OV: fro(W_OV @ W_QK.T) / (fro(W_QK) * fro(W_OV)), "K-composition"),
        # mistakes written with torch functions get the same messages
        (
            lambda W_QK, W_OV: (
                torch.linalg.norm(W_QK @ W_OV.T)
                / (torch.linalg.norm(W_QK) * torch.linalg.norm(W_OV))
            ),
            "K-composition",
        ),
        (lambda W_QK, W_OV: torch.linalg.norm(W_OV @ W_QK), "not normalised"),
        (
            lambda W_QK, W_OV: 0.5 + fro(W_OV @ W_QK) / (fro(W_QK) * fro(W_OV)),
            "wrong values: expected ‖W_OV W_QK‖_F / (‖W_QK‖_F ‖W_OV‖_F)",
        ),
        (
            lambda W_QK, W_OV: np.array([fro(W_OV @ W_QK) / (fro(W_QK) * fro(W_OV))]),
            "expected shape ()",
        ),
        (lambda W_QK, W_OV: None, "not implemented"),
        (lambda W_QK, W_OV: 1 / 0, "raised ZeroDivisionError"),
        (
            lambda W_QK, W_OV: W_OV.norm_of(W_QK),
            "raised AttributeError: 'numpy.ndarray' object has no attribute 'norm_of' with "
            "numpy arrays, and AttributeError: 'Tensor' object",
        ),
    ],
)
def test_check_q_composition_rejects_mistakes(capsys, wrong, message):
    assert not check_q_composition(wrong)
    out = verdict(capsys)
    assert out.startswith("✗ q_composition:") and message in out, out


# induction_score --------------------------------------------------------------------------------


def test_the_induction_mistakes_are_distinct_on_the_first_test_weights():
    """Each mistake gives its own numbers on the first case (B = 2, h = 3, T = 5), so an answer
    gets the message of its own mistake."""
    A, T = _weights(10, 2, 3, 10), 5
    rows = np.arange(T, 2 * T)
    values = list(_induction_mistakes(A, T).values()) + [A[:, :, rows, rows - T + 1].mean((0, 2))]
    for i, a in enumerate(values):
        for b in values[i + 1 :]:
            assert np.abs(a - b).max() > 1e-3


def _ind(A, T, offset, start, stop):
    rows = np.arange(start, stop)
    return A[:, :, rows, rows + offset].mean(axis=(0, 2))


def test_check_induction_score_accepts_correct_forms(capsys):
    assert check_induction_score(lambda A, T: _ind(A, T, 1 - T, T, 2 * T))
    assert "✓ induction_score: correct" in verdict(capsys)
    assert check_induction_score(
        lambda A, T: np.diagonal(A, 1 - T, -2, -1)[..., 1 : T + 1].mean(axis=(0, 2))
    )
    assert "✓" in verdict(capsys)
    assert check_induction_score(
        lambda A, T: np.mean([A[:, :, i, i - T + 1] for i in range(T, 2 * T)], axis=(0, 1))
    )
    assert "✓" in verdict(capsys)
    # written for torch tensors, as the notebook's weights are: `dim=` makes numpy raise
    assert check_induction_score(
        lambda A, T: A.diagonal(offset=1 - T, dim1=-2, dim2=-1)[..., 1 : T + 1].mean(dim=(0, 2))
    )
    assert "✓" in verdict(capsys)
    assert check_induction_score(lambda A, T: induction_score(A, T))
    assert "✓" in verdict(capsys)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda A, T: _ind(A, T, -T, T, 2 * T), "previous occurrence itself"),
        (lambda A, T: _ind(A, T, -1, T, 2 * T), "previous token A[i, i - 1]"),
        (lambda A, T: _ind(A, T, -T - 1, T + 1, 2 * T), "BEFORE the previous occurrence"),
        (lambda A, T: _ind(A, T, 1 - T, T - 1, 2 * T - 1), "starts at query T - 1"),
        (lambda A, T: _ind(A, T, 1 - T, T, 2 * T - 1), "leaves out the last query"),
        (
            lambda A, T: A[:, :, np.arange(1, T + 1), np.arange(T, 2 * T)].mean(axis=(0, 2)),
            "transposed",
        ),
        (lambda A, T: np.full(A.shape[1], _ind(A, T, 1 - T, T, 2 * T).mean()), "averages the"),
        (
            lambda A, T: A[:, :, np.arange(T, 2 * T), np.arange(1, T + 1)].mean(axis=2),
            "average over the batch",
        ),
        (
            lambda A, T: A[:, :, torch.arange(T, 2 * T), torch.arange(0, T)].mean(dim=(0, 2)),
            "previous occurrence itself",
        ),
        (
            lambda A, T: A[:, :, T:, :].mean(axis=(0, 2, 3)),
            "wrong values: expected per head, the mean of A[b, head, i, i - T + 1]",
        ),
        (
            lambda A, T: A[:, :, np.arange(T, 2 * T), np.arange(1, T + 1)].mean(axis=(0, 1)),
            "average over the batch and the queries (axes 0 and 2)",
        ),
        (
            lambda A, T: A[:, :, np.arange(T, 2 * T), np.arange(1, T + 1)].sum(axis=(0, 2)),
            "it sums over the batch and the queries",
        ),
        (
            lambda A, T: A[:, :, np.arange(T, 2 * T), np.arange(1, T + 1)].sum(axis=2).mean(0),
            "it sums over the queries",
        ),
        (lambda A, T: _ind(A, T, 1 - T, T + 1, 2 * T), "starts at query T + 1"),
        (
            lambda A, T: np.diagonal(A, 1 - T, -2, -1).mean(axis=(0, 2)),
            "it includes query T - 1",
        ),
        (
            lambda A, T: np.diagonal(A, T - 1, -2, -1)[..., :T].mean(axis=(0, 2)),
            "the offset has the wrong sign",
        ),
        (
            lambda A, T: A[0][:, np.arange(T, 2 * T), np.arange(1, T + 1)].mean(axis=1),
            "the first sequence only",
        ),
        (lambda A, T: None, "not implemented"),
    ],
)
def test_check_induction_score_rejects_mistakes(capsys, wrong, message):
    assert not check_induction_score(wrong)
    out = verdict(capsys)
    assert out.startswith("✗ induction_score:") and message in out
