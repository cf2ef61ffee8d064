"""The checkers of notebook 04 accept the right answer and name the usual mistakes."""

import numpy as np
import pytest
import torch

from mha_lib.exercises.nb04 import (
    check_causal_attn_mask,
    check_key_padding_mask,
    check_numpy_to_torch,
)


def verdict(capsys) -> str:
    """The single line a checker printed."""
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return out


# numpy_to_torch ---------------------------------------------------------------------------------


def reference_numpy_to_torch(W_q, W_k, W_v, W_o):
    in_proj = torch.from_numpy(np.concatenate([W_q.T, W_k.T, W_v.T]))  # (3C, C)
    return in_proj, torch.from_numpy(W_o.T.copy())  # (C, C)


def test_check_numpy_to_torch_accepts_reference(capsys):
    assert check_numpy_to_torch(reference_numpy_to_torch)
    assert "✓ numpy_to_torch: correct" in verdict(capsys)
    # numpy arrays are fine too
    assert check_numpy_to_torch(lambda q, k, v, o: (np.vstack([q.T, k.T, v.T]), o.T))
    assert "✓" in verdict(capsys)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda q, k, v, o: (np.concatenate([q, k, v]), o.T), "not transposed"),
        (lambda q, k, v, o: (np.concatenate([k.T, q.T, v.T]), o.T), "wrong order"),
        (lambda q, k, v, o: (np.concatenate([q, k, v], axis=1), o.T), "stacked along the rows"),
        (lambda q, k, v, o: (np.concatenate([q.T, k.T, v.T]), o), "out_proj_weight is not"),
        (lambda q, k, v, o: np.concatenate([q.T, k.T, v.T]), "expected a pair"),
        (lambda q, k, v, o: None, "not implemented"),
    ],
)
def test_check_numpy_to_torch_rejects_mistakes(capsys, wrong, message):
    assert not check_numpy_to_torch(wrong)
    out = verdict(capsys)
    assert out.startswith("✗ numpy_to_torch:") and message in out


# causal_attn_mask -------------------------------------------------------------------------------


def test_check_causal_attn_mask_accepts_reference(capsys):
    assert check_causal_attn_mask(lambda L: torch.ones(L, L, dtype=torch.bool).triu(1))
    assert "✓ causal_attn_mask: correct" in verdict(capsys)
    # the float form (0 and -inf) is accepted too
    assert check_causal_attn_mask(
        lambda L: torch.zeros(L, L).masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), -np.inf)
    )
    assert "✓" in verdict(capsys)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda L: torch.ones(L, L, dtype=torch.bool).tril(), "inverted"),
        (lambda L: torch.ones(L, L, dtype=torch.bool).triu(), "also blocks the diagonal"),
        (lambda L: torch.ones(L, L, dtype=torch.bool).tril(-1), "blocks the past"),
        (lambda L: torch.ones(L, L).triu(1), "ADDED to the scores"),
        (lambda L: np.triu(np.ones((L, L), dtype=bool), 1), "torch.from_numpy"),
        (lambda L: torch.ones(L, L, dtype=torch.int64).triu(1), "dtype torch.int64"),
        (lambda L: torch.ones(L + 1, L + 1, dtype=torch.bool).triu(1), "has shape"),
    ],
)
def test_check_causal_attn_mask_rejects_mistakes(capsys, wrong, message):
    assert not check_causal_attn_mask(wrong)
    out = verdict(capsys)
    assert out.startswith("✗ causal_attn_mask:") and message in out


# key_padding_mask -------------------------------------------------------------------------------


def reference_key_padding_mask(lengths, S):
    return torch.arange(S)[None, :] >= torch.tensor(lengths)[:, None]  # (B, S)


def test_check_key_padding_mask_accepts_reference(capsys):
    assert check_key_padding_mask(reference_key_padding_mask)
    assert "✓ key_padding_mask: correct" in verdict(capsys)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda lengths, S: ~reference_key_padding_mask(lengths, S), "inverted"),
        (
            lambda lengths, S: torch.arange(S)[None, :] > torch.tensor(lengths)[:, None],
            "off by one",
        ),
        (
            lambda lengths, S: reference_key_padding_mask(lengths, S)[:, None, None, :],
            "(B, 1, 1, M)",
        ),
        (lambda lengths, S: reference_key_padding_mask(lengths, S).float(), "ADDED"),
        (lambda lengths, S: 1 / 0, "ZeroDivisionError"),
    ],
)
def test_check_key_padding_mask_rejects_mistakes(capsys, wrong, message):
    assert not check_key_padding_mask(wrong)
    out = verdict(capsys)
    assert out.startswith("✗ key_padding_mask:") and message in out
