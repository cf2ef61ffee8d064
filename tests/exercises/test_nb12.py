"""The checkers of notebook 12 accept right answers and name the usual mistakes."""

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from mha_lib.exercises.nb12 import (
    check_dequantize_q4_1,
    check_gguf_row_order,
    check_top_p,
    q4_1_blocks,
)
from mha_lib.nn.generation import top_p_filter
from mha_lib.positions import rope_permutation


def verdict(capsys) -> str:
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return out


def test_the_blocks_are_real_q4_1():
    blocks = q4_1_blocks()
    ours = np.stack([np.concatenate([b[4:] & 15, b[4:] >> 4]) for b in blocks])
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    expected = dequantize(blocks, GGMLQuantizationType.Q4_1).reshape(-1, 32)
    assert np.array_equal(d * ours + m, expected)


# dequantize_q4_1 -------------------------------------------------------------------------------


def deq_numpy(b):
    d, m = b[:2].view(np.float16)[0], b[2:4].view(np.float16)[0]
    q = np.concatenate([b[4:] & 0x0F, b[4:] >> 4])
    return float(d) * q + float(m)


def deq_gguf(b):
    return dequantize(b[None], GGMLQuantizationType.Q4_1)[0]


def deq_torch(b):
    t = torch.from_numpy(b.copy())
    d, m = t[:2].view(torch.float16).float(), t[2:4].view(torch.float16).float()
    q = torch.cat([t[4:] & 15, t[4:] >> 4]).float()
    return d * q + m


@pytest.mark.parametrize("fn", [deq_numpy, deq_gguf, deq_torch])
def test_dequantize_accepts_correct_forms(capsys, fn):
    assert check_dequantize_q4_1(fn)
    assert "✓ dequantize_q4_1: correct" in verdict(capsys)


def _d(b):
    return float(b[:2].view(np.float16)[0]), float(b[2:4].view(np.float16)[0])


def _lohi(b):
    return (b[4:] & 15).astype(float), (b[4:] >> 4).astype(float)


def deq_bytes_as_float32(b):
    return float(b[:4].view(np.float32)[0]) * np.concatenate(_lohi(b))


DEQ_WRONG = [
    (lambda b: _d(b)[0] * np.stack(_lohi(b), 1).reshape(-1) + _d(b)[1], "wrong order"),
    (lambda b: _d(b)[0] * np.concatenate(_lohi(b)[::-1]) + _d(b)[1], "halves are swapped"),
    (lambda b: _d(b)[0] * np.concatenate(_lohi(b)), "leaves out the minimum"),
    (lambda b: _d(b)[0] * (np.concatenate(_lohi(b)) - 8) + _d(b)[1], "Q4_0"),
    (lambda b: _d(b)[1] * np.concatenate(_lohi(b)) + _d(b)[0], "d and m are swapped"),
    (lambda b: float(b[:2].view(np.uint16)[0]) * np.concatenate(_lohi(b)) + _d(b)[1], "integer"),
    (
        lambda b: (
            float(b[:2].view(">f2")[0]) * np.concatenate(_lohi(b)) + float(b[2:4].view(">f2")[0])
        ),
        "big-endian",
    ),
    (lambda b: _d(b)[0] * (np.concatenate(_lohi(b)) + _d(b)[1]), "adds m before scaling"),
    (lambda b: _d(b)[0] ** -1 * np.concatenate(_lohi(b)) + _d(b)[1], "divides by d"),
    (
        lambda b: _d(b)[0] * np.concatenate([b[4:] & 15, b[4:] & 0xF0]).astype(float) + _d(b)[1],
        "without shifting them down",
    ),
    (
        lambda b: _d(b)[0] * np.concatenate([b[4:] & 15, b[4:] << 4]).astype(float) + _d(b)[1],
        "shifts the wrong way",
    ),
    (deq_bytes_as_float32, "one float32"),
    (lambda b: deq_numpy(b) + 1, "wrong values"),
    (lambda b: deq_numpy(b)[:16], "expected shape (32,)"),
    (lambda b: None, "not implemented"),
]


@pytest.mark.parametrize("fn, words", DEQ_WRONG)
def test_dequantize_names_the_mistake(capsys, fn, words):
    assert not check_dequantize_q4_1(fn)
    out = verdict(capsys)
    assert out.startswith("✗ dequantize_q4_1:") and words in out, out


# gguf_row_order --------------------------------------------------------------------------------


def rows_stack(d):
    return np.stack([np.arange(d // 2), np.arange(d // 2) + d // 2], 1).reshape(-1)


def rows_loop(d):
    out = []
    for i in range(d // 2):
        out += [i, i + d // 2]
    return out


@pytest.mark.parametrize("fn", [rows_stack, rows_loop, rope_permutation])
def test_row_order_accepts_correct_forms(capsys, fn):
    assert check_gguf_row_order(fn)
    assert "✓ gguf_row_order: correct" in verdict(capsys)


ROW_WRONG = [
    (lambda d: np.arange(d), "identity"),
    (lambda d: np.argsort(rows_stack(d)), "inverse order"),
    (lambda d: np.stack([np.arange(d // 2) + d // 2, np.arange(d // 2)], 1).reshape(-1), "swapped"),
    (lambda d: rows_stack(d) + 1, "from 1"),
    (lambda d: rows_stack(d)[::-1], "the right order reversed"),
    (lambda d: np.arange(d)[::-1], "it reverses the rows"),
    (lambda d: np.arange(d // 2), "returns"),
    (lambda d: np.zeros(d, dtype=int), "not a permutation"),
    (lambda d: np.roll(rows_stack(d), 2), "wrong order"),
    (lambda d: np.stack([np.arange(d // 2), d - 1 - np.arange(d // 2)], 1).reshape(-1), "mirror"),
    (
        lambda d: np.stack([np.arange(d // 2), np.arange(d // 2) + d // 2 - 1], 1).reshape(-1),
        "i + d/2 - 1",
    ),
    (
        lambda d: np.stack([np.arange(d // 2), np.arange(d // 2) + d], 1).reshape(-1),
        "not (i, i + d)",
    ),
    (lambda d: np.stack([np.arange(d // 2), np.arange(d // 2) + d // 2], 1), "returns the pairs"),
    (lambda d: np.arange(d).reshape(d // 2, 2).T.reshape(-1), "inverse order"),
    (lambda d: torch.arange(d), "identity"),
]


def test_reversed_rows_are_not_blamed_on_pairing():
    """np.arange(d)[::-1] was once told that it pairs each row with the next one."""
    import io
    from contextlib import redirect_stdout

    with redirect_stdout(io.StringIO()) as out:
        check_gguf_row_order(lambda d: np.arange(d)[::-1])
    assert "pairs each row with the next" not in out.getvalue()


@pytest.mark.parametrize("fn, words", ROW_WRONG)
def test_row_order_names_the_mistake(capsys, fn, words):
    assert not check_gguf_row_order(fn)
    out = verdict(capsys)
    assert out.startswith("✗ gguf_row_order:") and words in out, out


# top_p -----------------------------------------------------------------------------------------


def top_p_library(z, p):
    return top_p_filter(torch.as_tensor(z), p)


def top_p_loop(z, p):
    out = np.full_like(z, -np.inf)
    for r, row in enumerate(z):
        probs = np.exp(row - row.max())
        probs /= probs.sum()
        total = 0.0
        for i in np.argsort(-probs):
            out[r, i] = row[i]
            total += probs[i]
            if total >= p:
                break
    return out


def top_p_torch(z, p):  # torch's own functions, as on the model's logits
    probs, order = torch.softmax(z, dim=-1).sort(dim=-1, descending=True)
    drop = (probs.cumsum(dim=-1) - probs >= p).scatter(-1, order, probs.cumsum(-1) - probs >= p)
    return z.masked_fill(drop, float("-inf"))


def top_p_numpy(z, p):  # numpy only: np.take_along_axis refuses a tensor's indices
    probs = np.exp(z - z.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    order = np.argsort(-probs, -1)
    sp = np.take_along_axis(probs, order, -1)
    keep = np.zeros(z.shape, bool)
    np.put_along_axis(keep, order, np.cumsum(sp, -1) - sp < p, -1)
    return np.where(keep, z, -np.inf)


@pytest.mark.parametrize("fn", [top_p_library, top_p_loop, top_p_torch])
def test_top_p_accepts_correct_forms(capsys, fn):
    assert check_top_p(fn)
    out = verdict(capsys)
    assert "✓ top_p: correct" in out and "only" not in out


def test_top_p_for_numpy_arrays_only_passes_with_a_note(capsys):
    """The model's logits are torch tensors, which the checker passes; an answer for numpy arrays
    is judged on numpy arrays and told how to run on the model's logits."""
    assert check_top_p(top_p_numpy)
    out = verdict(capsys)
    assert "✓ top_p: correct (on numpy arrays only" in out and "np.asarray(logits)" in out


def test_the_dequantize_checker_gives_numpy_bytes(capsys):
    seen = []
    check_dequantize_q4_1(lambda b: seen.append(type(b)) or deq_numpy(b))
    assert seen[0] is np.ndarray
    capsys.readouterr()


def _sm(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _keep(z, p, rule):
    probs = _sm(z)
    order = np.argsort(-probs, -1, kind="stable")
    sp = np.take_along_axis(probs, order, -1)
    ks = rule(sp, np.take_along_axis(z, order, -1))
    keep = np.zeros_like(ks)
    np.put_along_axis(keep, order, ks, -1)
    return np.where(keep, z, -np.inf)


def ascending(z, p):
    """Sorted from the least probable: keep while the mass before is below p."""
    probs = _sm(z)
    order = np.argsort(probs, -1, kind="stable")
    sp = np.take_along_axis(probs, order, -1)
    keep = np.zeros(z.shape, bool)
    np.put_along_axis(keep, order, np.cumsum(sp, -1) - sp < p, -1)
    return np.where(keep, z, -np.inf)


def one_too_many(z, p):
    def rule(sp, sz):
        k = np.cumsum(sp, -1) - sp < p
        k[..., 1:] |= k[..., :-1].copy()
        return k

    return _keep(z, p, rule)


TOP_P_WRONG = [
    (lambda z, p: _keep(z, p, lambda sp, sz: np.cumsum(sp, -1) <= p), "takes the sum past p"),
    (lambda z, p: _keep(z, p, lambda sp, sz: np.cumsum(sz, -1) - sz < p), "sums the logits"),
    (lambda z, p: np.where(_sm(z) >= p, z, -np.inf), "own probability"),
    (ascending, "least probable"),
    (
        lambda z, p: np.where(np.isfinite(top_p_loop(z, p)), _sm(z), -np.inf),
        "returns the probabilities",
    ),
    (lambda z, p: np.where(np.isfinite(top_p_loop(z, p)), z, 0.0), "set to 0"),
    (one_too_many, "one token too many"),
    (lambda z, p: np.full_like(z, -np.inf), "keeps no token"),
    (lambda z, p: top_p_loop(z, p) + 1, "wrong values"),
    (lambda z, p: np.where(np.cumsum(_sm(z), -1) - _sm(z) < p, z, -np.inf), "vocabulary's order"),
    (lambda z, p: whole_batch(z, p), "the whole batch at once"),
    (lambda z, p: softmax_axis0(z, p), "axis 0"),
]


def whole_batch(z, p):
    """Each row's softmax, then every row's probabilities sorted together."""
    z = np.asarray(z)
    flat = _sm(z).reshape(-1)
    order = np.argsort(-flat, kind="stable")
    keep = np.zeros(flat.shape, bool)
    keep[order] = np.cumsum(flat[order]) - flat[order] < p
    return np.where(keep.reshape(z.shape), z, -np.inf)


def softmax_axis0(z, p):
    z = np.asarray(z)
    probs = np.exp(z - z.max(0, keepdims=True))
    probs /= probs.sum(0, keepdims=True)
    order = np.argsort(-probs, -1, kind="stable")
    sp = np.take_along_axis(probs, order, -1)
    keep = np.zeros(z.shape, bool)
    np.put_along_axis(keep, order, np.cumsum(sp, -1) - sp < p, -1)
    return np.where(keep, z, -np.inf)


@pytest.mark.parametrize("fn, words", TOP_P_WRONG)
def test_top_p_names_the_mistake(capsys, fn, words):
    assert not check_top_p(fn)
    out = verdict(capsys)
    assert out.startswith("✗ top_p:") and words in out, out
