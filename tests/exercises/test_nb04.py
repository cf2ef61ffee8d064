"""The checkers of notebook 04: a catalogue of wrong answers, each rejected with a message
that names the mistake, and several correct forms, each accepted.

The rule for containers is the same in every checker: tensors pass on any device, with
requires_grad or as nn.Parameter; numpy arrays with the right values pass with a note that
PyTorch needs a tensor."""

import numpy as np
import pytest
import torch
from torch import nn

from mha_lib.exercises.nb04 import (
    check_causal_attn_mask,
    check_key_padding_mask,
    check_numpy_to_torch,
)

NUMPY_NOTE = "not a tensor; nn.MultiheadAttention needs one: torch.as_tensor(...)"


def verdict(checker, fn, capsys):
    """Run a checker; return (passed, the one line it printed)."""
    passed = checker(fn)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1, lines
    return passed, lines[0]


# numpy_to_torch ---------------------------------------------------------------------------------


def reference_numpy_to_torch(W_q, W_k, W_v, W_o):
    in_proj = torch.from_numpy(np.concatenate([W_q.T, W_k.T, W_v.T]))  # (3C, C)
    return in_proj, torch.from_numpy(W_o.T.copy())  # (C, C)


def as_parameters(W_q, W_k, W_v, W_o):
    """Parameters (requires_grad=True) are tensors like any other."""
    in_proj, out_proj = reference_numpy_to_torch(W_q, W_k, W_v, W_o)
    return nn.Parameter(in_proj), nn.Parameter(out_proj)


def from_a_module(W_q, W_k, W_v, W_o):
    """Load into nn.MultiheadAttention (float32) and return its own parameters."""
    C = W_q.shape[0]
    attn = nn.MultiheadAttention(C, 1, bias=False)
    with torch.no_grad():
        attn.in_proj_weight.copy_(torch.from_numpy(np.concatenate([W_q.T, W_k.T, W_v.T])))
        attn.out_proj.weight.copy_(torch.from_numpy(W_o.T.copy()))
    return attn.in_proj_weight, attn.out_proj.weight


def stacked_as_columns_then_transposed(W_q, W_k, W_v, W_o):
    """Another valid route: [W_q W_k W_v] (C, 3C), transposed, as a list."""
    in_proj = torch.from_numpy(np.concatenate([W_q, W_k, W_v], axis=1)).T
    return [in_proj, torch.from_numpy(W_o).T]


TO_TORCH_RIGHT = [
    reference_numpy_to_torch,
    as_parameters,
    from_a_module,
    stacked_as_columns_then_transposed,
]


def tensors(in_proj, out_proj):
    return torch.from_numpy(np.ascontiguousarray(in_proj)), torch.from_numpy(out_proj.copy())


TO_TORCH_WRONG = [
    (lambda q, k, v, o: tensors(np.concatenate([q, k, v]), o.T), "not transposed"),
    (lambda q, k, v, o: tensors(np.concatenate([k.T, q.T, v.T]), o.T), "wrong order"),
    (lambda q, k, v, o: tensors(np.concatenate([q.T, k, v.T]), o.T), "block 1 (W_k)"),
    (lambda q, k, v, o: tensors(np.concatenate([q, k, v], axis=1), o.T), "along the rows"),
    (lambda q, k, v, o: (torch.stack(tensors(q.T, o.T)[:1] * 3), o.T), "not stack"),
    (lambda q, k, v, o: tensors(np.concatenate([q.T, k.T, v.T]), o), "out_proj_weight is not"),
    (lambda q, k, v, o: tensors(np.concatenate([q.T, k.T, v.T]), o.T)[::-1], "wrong order"),
    (lambda q, k, v, o: tensors(np.concatenate([q.T, k.T, 2 * v.T]), o.T), "block 2"),
    (
        lambda q, k, v, o: tuple(t.half() for t in reference_numpy_to_torch(q, k, v, o)),
        "not float16",
    ),
    (lambda q, k, v, o: reference_numpy_to_torch(q, k, v, o)[0], "expected a pair"),
    (lambda q, k, v, o: ("in_proj", "out_proj"), "expected a pair of arrays or tensors"),
    (lambda q, k, v, o: None, "not implemented"),
]


@pytest.mark.parametrize("fn", TO_TORCH_RIGHT)
def test_check_numpy_to_torch_accepts(fn, capsys):
    assert verdict(check_numpy_to_torch, fn, capsys) == (True, "✓ numpy_to_torch: correct")


def test_check_numpy_to_torch_accepts_numpy_with_a_note(capsys):
    passed, line = verdict(
        check_numpy_to_torch, lambda q, k, v, o: (np.vstack([q.T, k.T, v.T]), o.T), capsys
    )
    assert passed and line.startswith("✓ numpy_to_torch: correct (") and NUMPY_NOTE in line


@pytest.mark.parametrize(("fn", "words"), TO_TORCH_WRONG)
def test_check_numpy_to_torch_names_the_mistake(fn, words, capsys):
    passed, line = verdict(check_numpy_to_torch, fn, capsys)
    assert not passed and line.startswith("✗ numpy_to_torch: ") and words in line, line


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_check_numpy_to_torch_accepts_gpu_tensors(capsys):
    def on_gpu(W_q, W_k, W_v, W_o):
        return tuple(t.cuda() for t in as_parameters(W_q, W_k, W_v, W_o))

    assert verdict(check_numpy_to_torch, on_gpu, capsys) == (True, "✓ numpy_to_torch: correct")


# causal_attn_mask -------------------------------------------------------------------------------


def causal(L):
    return torch.ones(L, L, dtype=torch.bool).triu(1)


CAUSAL_RIGHT = [
    causal,
    lambda L: ~torch.tril(torch.ones(L, L, dtype=torch.bool)),
    lambda L: torch.zeros(L, L).masked_fill(causal(L), -np.inf),  # float: 0 and -inf
    lambda L: nn.Transformer.generate_square_subsequent_mask(L),  # float: 0 and -inf
    lambda L: torch.zeros(L, L).masked_fill(causal(L), torch.finfo(torch.float32).min),
    lambda L: causal(L).requires_grad_(False).to("cpu"),
]

CAUSAL_WRONG = [
    (lambda L: torch.ones(L, L, dtype=torch.bool).tril(), "inverted"),
    (lambda L: torch.ones(L, L, dtype=torch.bool).triu(), "also blocks the diagonal"),
    (lambda L: torch.ones(L, L, dtype=torch.bool).tril(-1), "blocks the past"),
    (lambda L: torch.ones(L, L, dtype=torch.bool).triu(2), "off by one"),
    (lambda L: torch.zeros(L, L, dtype=torch.bool), "blocks nothing"),
    (lambda L: torch.ones(L, L).triu(1), "ADDED to the scores"),
    (lambda L: -torch.ones(L, L).triu(1), "only lowers the scores"),
    (lambda L: torch.ones(L, L, dtype=torch.int64).triu(1), "dtype torch.int64"),
    (lambda L: np.triu(np.ones((L, L), dtype=np.uint8), 1), "dtype uint8"),
    (lambda L: torch.ones(L + 1, L + 1, dtype=torch.bool).triu(1), "for L = 4"),
    (lambda L: causal(4), "(L, L) for L = 1"),
    (lambda L: causal(L)[None], "has shape (1, 4, 4)"),
    (lambda L: torch.full((L, L), np.nan), "NaN"),
    (lambda L: "causal", "must be a bool tensor"),
    (lambda L: None, "not implemented"),
]


@pytest.mark.parametrize("fn", CAUSAL_RIGHT)
def test_check_causal_attn_mask_accepts(fn, capsys):
    assert verdict(check_causal_attn_mask, fn, capsys) == (True, "✓ causal_attn_mask: correct")


@pytest.mark.parametrize(
    "fn",
    [
        lambda L: np.triu(np.ones((L, L), dtype=bool), 1),
        lambda L: np.triu(np.ones((L, L), dtype=bool), 1).tolist(),
    ],
)
def test_check_causal_attn_mask_accepts_numpy_with_a_note(fn, capsys):
    passed, line = verdict(check_causal_attn_mask, fn, capsys)
    assert passed and line.startswith("✓ causal_attn_mask: correct (") and NUMPY_NOTE in line


@pytest.mark.parametrize(("fn", "words"), CAUSAL_WRONG)
def test_check_causal_attn_mask_names_the_mistake(fn, words, capsys):
    passed, line = verdict(check_causal_attn_mask, fn, capsys)
    assert not passed and line.startswith("✗ causal_attn_mask: ") and words in line, line


def test_accepted_causal_masks_work_in_multihead_attention():
    """Every tensor form the checker accepts gives nn.MultiheadAttention's causal output."""
    torch.manual_seed(0)
    attn = nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 5, 8)  # (B, L, E)
    reference, _ = attn(x, x, x, attn_mask=causal(5))
    for fn in CAUSAL_RIGHT:
        out, _ = attn(x, x, x, attn_mask=fn(5))
        torch.testing.assert_close(out, reference)


# key_padding_mask -------------------------------------------------------------------------------


def reference_key_padding_mask(lengths, S):
    return torch.arange(S)[None, :] >= torch.tensor(lengths)[:, None]  # (B, S)


KEY_PADDING_RIGHT = [
    reference_key_padding_mask,
    lambda lengths, S: torch.tensor([[j >= n for j in range(S)] for n in lengths]),
    lambda lengths, S: torch.zeros(len(lengths), S).masked_fill(
        reference_key_padding_mask(lengths, S), -np.inf
    ),
]


def positions_and_lengths(lengths, S):
    return torch.arange(S)[None, :], torch.tensor(lengths)[:, None]  # (1, S), (B, 1)


KEY_PADDING_WRONG = [
    (lambda lengths, S: ~reference_key_padding_mask(lengths, S), "inverted"),
    (lambda lengths, S: torch.gt(*positions_and_lengths(lengths, S)), "off by one"),
    (
        lambda lengths, S: (
            torch.ge(*positions_and_lengths(lengths, S))
            | torch.eq(
                positions_and_lengths(lengths, S)[0] + 1, positions_and_lengths(lengths, S)[1]
            )
        ),
        "last real token",
    ),
    (
        lambda lengths, S: torch.lt(
            positions_and_lengths(lengths, S)[0], S - positions_and_lengths(lengths, S)[1]
        ),
        "pads at the start",
    ),
    (lambda lengths, S: reference_key_padding_mask(lengths, S).T, "transposed"),
    (
        lambda lengths, S: reference_key_padding_mask(lengths, max(lengths)),
        "use the argument S",
    ),
    (
        lambda lengths, S: reference_key_padding_mask(lengths, S)[:, None, None, :],
        "(B, 1, 1, M)",
    ),
    (lambda lengths, S: reference_key_padding_mask(lengths, S).float(), "ADDED"),
    (lambda lengths, S: reference_key_padding_mask(lengths, S).long(), "not integers"),
    (lambda lengths, S: torch.zeros(len(lengths), S, dtype=torch.bool), "blocks nothing"),
    (lambda lengths, S: 1 / 0, "ZeroDivisionError"),
]


@pytest.mark.parametrize("fn", KEY_PADDING_RIGHT)
def test_check_key_padding_mask_accepts(fn, capsys):
    assert verdict(check_key_padding_mask, fn, capsys) == (True, "✓ key_padding_mask: correct")


def test_check_key_padding_mask_accepts_numpy_with_a_note(capsys):
    def numpy_mask(lengths, S):
        return np.arange(S)[None, :] >= np.array(lengths)[:, None]

    passed, line = verdict(check_key_padding_mask, numpy_mask, capsys)
    assert passed and line.startswith("✓ key_padding_mask: correct (") and NUMPY_NOTE in line


@pytest.mark.parametrize(("fn", "words"), KEY_PADDING_WRONG)
def test_check_key_padding_mask_names_the_mistake(fn, words, capsys):
    passed, line = verdict(check_key_padding_mask, fn, capsys)
    assert not passed and line.startswith("✗ key_padding_mask: ") and words in line, line


def test_catalogues_are_complete():
    for wrong, right in (
        (TO_TORCH_WRONG, TO_TORCH_RIGHT),
        (CAUSAL_WRONG, CAUSAL_RIGHT),
        (KEY_PADDING_WRONG, KEY_PADDING_RIGHT),
    ):
        assert len(wrong) >= 6 and len(right) >= 2
