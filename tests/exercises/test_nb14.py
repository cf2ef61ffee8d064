"""The checkers of notebook 14 accept right answers and name the usual mistakes."""

import numpy as np
import pytest
import torch

from mha_lib.distributed.ring import layout_chunks, merge_partials, work_per_step
from mha_lib.exercises.nb14 import (
    SPLIT,
    causal_work,
    check_merge_partials,
    check_split_plan,
    check_zigzag,
)


def verdict(capsys) -> str:
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return out


# merge_partials ---------------------------------------------------------------------------------


def merge_logaddexp(o_a, lse_a, o_b, lse_b):
    lse = np.logaddexp(lse_a, lse_b)
    safe = np.where(np.isneginf(lse), 0.0, lse)  # a row with no key in either part
    return np.exp(lse_a - safe)[:, None] * o_a + np.exp(lse_b - safe)[:, None] * o_b, lse


def merge_max_shift(o_a, lse_a, o_b, lse_b):
    m = np.maximum(lse_a, lse_b)
    m = np.where(np.isneginf(m), 0.0, m)  # the guard: neither part saw a key
    w_a, w_b = np.exp(lse_a - m), np.exp(lse_b - m)
    total = w_a + w_b
    o = (w_a[:, None] * o_a + w_b[:, None] * o_b) / np.where(total > 0, total, 1.0)[:, None]
    return o, m + np.log(total)


def merge_library(o_a, lse_a, o_b, lse_b):
    return merge_partials(*(torch.as_tensor(x) for x in (o_a, lse_a, o_b, lse_b)))


def merge_torch(o_a, lse_a, o_b, lse_b):  # torch's functions: numpy arrays refuse them
    lse = torch.logaddexp(lse_a, lse_b)
    safe = lse.masked_fill(lse == -torch.inf, 0.0)
    return torch.exp(lse_a - safe)[:, None] * o_a + torch.exp(lse_b - safe)[:, None] * o_b, lse


@pytest.mark.parametrize("fn", [merge_logaddexp, merge_max_shift, merge_library])
def test_merge_accepts_correct_forms(capsys, fn):
    assert check_merge_partials(fn)
    out = verdict(capsys)
    assert "✓ merge_partials: correct" in out and "only" not in out


def test_merge_for_torch_tensors_only_passes_with_a_note(capsys):
    assert check_merge_partials(merge_torch)
    out = verdict(capsys)
    assert "✓ merge_partials: correct (on torch tensors only" in out
    assert "o_a = torch.as_tensor(o_a)" in out


def merge_unguarded_max(o_a, lse_a, o_b, lse_b):
    """The max trick without the guard: NaN where neither part saw a key (once accepted)."""
    m = np.maximum(lse_a, lse_b)
    w_a, w_b = np.exp(lse_a - m), np.exp(lse_b - m)
    o = (w_a[:, None] * o_a + w_b[:, None] * o_b) / (w_a + w_b)[:, None]
    return o, m + np.log(w_a + w_b)


def merge_unguarded_logaddexp(o_a, lse_a, o_b, lse_b):
    lse = np.logaddexp(lse_a, lse_b)
    return np.exp(lse_a - lse)[:, None] * o_a + np.exp(lse_b - lse)[:, None] * o_b, lse


def merge_unguarded_torch(o_a, lse_a, o_b, lse_b):
    o_a, lse_a, o_b, lse_b = (torch.as_tensor(x) for x in (o_a, lse_a, o_b, lse_b))
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_a - lse)[:, None] * o_a + torch.exp(lse_b - lse)[:, None] * o_b, lse


def merge_zero_lse(o_a, lse_a, o_b, lse_b):
    """Guarded weights, but the row with no key gets lse 0 instead of -inf."""
    o, lse = merge_logaddexp(o_a, lse_a, o_b, lse_b)
    return o, np.where(np.isneginf(lse), 0.0, lse)


def _naive(o_a, lse_a, o_b, lse_b):
    w_a, w_b = np.exp(lse_a)[:, None], np.exp(lse_b)[:, None]
    return (w_a * o_a + w_b * o_b) / (w_a + w_b), np.log(np.exp(lse_a) + np.exp(lse_b))


def _right_o(o_a, lse_a, o_b, lse_b):
    return merge_logaddexp(o_a, lse_a, o_b, lse_b)[0]


MERGE_WRONG = [
    (lambda a, la, b, lb: ((a + b) / 2, np.logaddexp(la, lb)), "averages the two outputs"),
    (lambda a, la, b, lb: (a + b, np.logaddexp(la, lb)), "adds the two outputs"),
    (
        lambda a, la, b, lb: (np.exp(la)[:, None] * a + np.exp(lb)[:, None] * b, la),
        "without dividing by their sum",
    ),
    (
        lambda a, la, b, lb: (
            merge_logaddexp(b, la, a, lb)[0],
            np.logaddexp(la, lb),
        ),
        "swaps the weights",
    ),
    (
        lambda a, la, b, lb: (
            (la / (la + lb))[:, None] * a + (1 - la / (la + lb))[:, None] * b,
            np.logaddexp(la, lb),
        ),
        "weights by the log-sum-exps themselves",
    ),
    (lambda a, la, b, lb: (_right_o(a, la, b, lb), np.maximum(la, lb)), "the larger of the two"),
    (lambda a, la, b, lb: (_right_o(a, la, b, lb), la + lb), "the new lse adds the two"),
    (lambda a, la, b, lb: (_right_o(a, la, b, lb), (la + lb) / 2), "the new lse is their mean"),
    (_naive, "overflows"),
    (merge_unguarded_max, "neither part saw a key"),
    (merge_unguarded_logaddexp, "neither part saw a key"),
    (merge_unguarded_torch, "neither part saw a key"),
    (merge_zero_lse, "neither part saw a key"),
    (lambda a, la, b, lb: _right_o(a, la, b, lb), "expected a pair (o, lse)"),
    (lambda a, la, b, lb: (a.T, la), "o: expected shape"),
    (lambda a, la, b, lb: None, "not implemented"),
]


@pytest.mark.parametrize("fn, words", MERGE_WRONG)
def test_merge_names_the_mistake(capsys, fn, words):
    assert not check_merge_partials(fn)
    out = verdict(capsys)
    assert out.startswith("✗ merge_partials:") and words in out, out


def test_merge_rejects_nan_where_a_part_saw_no_key(capsys):
    def max_shift_unguarded(o_a, lse_a, o_b, lse_b):
        w = np.exp(np.stack([lse_a, lse_b]) - np.stack([lse_a, lse_b]))  # -inf - -inf: NaN
        return w[0][:, None] * o_a + w[1][:, None] * o_b, np.logaddexp(lse_a, lse_b)

    assert not check_merge_partials(max_shift_unguarded)
    assert "inf or NaN where a part saw no key" in verdict(capsys)


# zigzag -----------------------------------------------------------------------------------------


def zigzag_pairs(P):
    return [(r, 2 * P - 1 - r) for r in range(P)]


def zigzag_library(P):
    return layout_chunks("zigzag", P)


def zigzag_numpy(P):
    r = np.arange(P)
    return np.stack([r, 2 * P - 1 - r], axis=1)


def mirrored(P):  # another balanced assignment: the middle two chunks to rank 0, the ends last
    return [(P - 1 - r, P + r) for r in range(P)]


@pytest.mark.parametrize("fn", [zigzag_pairs, zigzag_library, zigzag_numpy, mirrored])
def test_zigzag_accepts_balanced_assignments(capsys, fn):
    assert check_zigzag(fn)
    out = verdict(capsys)
    assert "✓ zigzag: correct" in out and "P = 4: 9 pair-steps" in out


ZIGZAG_WRONG = [
    (lambda P: [(2 * r, 2 * r + 1) for r in range(P)], "this is the contiguous layout"),
    (lambda P: [(r, r + P) for r in range(P)], "unbalanced"),
    (lambda P: [(r, 2 * P - r) for r in range(P)], "does not exist"),
    (lambda P: [(r + 1, 2 * P - r) for r in range(P)], "chunk numbers start at 0"),
    (lambda P: [(r, P - 1 - r) for r in range(P)], "is held twice"),
    (lambda P: [c for r in range(P) for c in (r, 2 * P - 1 - r)], "a flat list"),
    (lambda P: [(r, 2 * P - 1 - r) for r in range(P)][:-1], "shape"),
    (lambda P: [(2 * r + 1, 2 * r) for r in range(P)][::-1], "unbalanced"),
    (lambda P: None, "not implemented"),
    (lambda P: [list(range(P)), [2 * P - 1 - r for r in range(P)]], "transposed"),
    (lambda P: np.stack([np.arange(P), 2 * P - 1 - np.arange(P)]), "transposed"),
    (lambda P: [(r, 2 * P - 2 - r) for r in range(P)], "is held twice"),
    (lambda P: [(r, 2 * P - 1 - r) for r in range(1, P + 1)], "numbers the ranks 1 .. P"),
    (lambda P: [(P - 1 - r, P - 1 + r) for r in range(P)], "is held twice"),
    (lambda P: {r: (r, 2 * P - 1 - r) for r in range(P)}, "shape"),
]


@pytest.mark.parametrize("fn, words", ZIGZAG_WRONG)
def test_zigzag_names_the_mistake(capsys, fn, words):
    assert not check_zigzag(fn)
    out = verdict(capsys)
    assert out.startswith("✗ zigzag:") and words in out, out


def test_a_transposed_zigzag_is_not_called_unbalanced(capsys):
    """At P = 2 a (2, P) answer reads as two ranks' pairs; it was once told "unbalanced"."""
    assert not check_zigzag(lambda P: [list(range(P)), [2 * P - 1 - r for r in range(P)]])
    out = verdict(capsys)
    assert "unbalanced" not in out and "transposed" in out


def test_equal_totals_mean_equal_work_at_every_step():
    """Why the checker judges the totals only: over every assignment of the 2P chunks to P = 3
    ranks, those that give every rank the same total give it the same work at every step."""
    import itertools

    P, balanced = 3, 0
    for order in itertools.permutations(range(2 * P)):
        chunks = [order[2 * r : 2 * r + 2] for r in range(P)]
        work = causal_work(chunks, P)
        if len(set(work.sum(axis=0).tolist())) == 1:
            balanced += 1
            assert all(len(set(row)) == 1 for row in work.tolist()), chunks
    assert balanced == 6 * 8  # 3! ways to deal the pairs {0, 5}, {1, 4}, {2, 3}, 2^3 orders


def test_causal_work_is_the_librarys_table():
    for P in (2, 3, 4):
        for layout in ("contiguous", "zigzag"):
            table = causal_work(layout_chunks(layout, P), P)
            assert table.tolist() == work_per_step(P, layout, True)


# split_plan -------------------------------------------------------------------------------------


def split_dict(name):
    return SPLIT[name]


def split_words(name):
    return "column-parallel" if name in ("W_Q", "W_K", "W_V", "W_gate", "W_up") else "Rows"


def split_short(name):
    return {"rows": "r", "columns": "cols"}[SPLIT[name]]


def split_by(name):
    return "by row" if SPLIT[name] == "rows" else "by column"


def split_sentence(name):
    return {"rows": "Split by rows.", "columns": "column-wise"}[SPLIT[name]]


@pytest.mark.parametrize("fn", [split_dict, split_words, split_short, split_by, split_sentence])
def test_split_accepts_correct_forms(capsys, fn):
    assert check_split_plan(fn)
    assert "✓ split_plan: correct" in verdict(capsys)


def _except(name, answer):
    return lambda n: answer if n == name else SPLIT[n]


SPLIT_WRONG = [
    (lambda n: {"rows": "columns", "columns": "rows"}[SPLIT[n]] if n != "E" else "rows", "PyTorch"),
    (lambda n: "columns", "W_O by columns"),
    (lambda n: "rows", "W_Q by rows"),
    (_except("W_up", "rows"), "W_gate and W_up are split differently"),
    (_except("W_down", "columns"), "W_down by columns"),
    (_except("E", "columns"), "E by columns"),
    (_except("W_V", "rows"), "W_V by rows"),
    (_except("W_O", "columns"), "W_O by columns"),
    (lambda n: "heads", 'expected "rows" or "columns"'),
    (lambda n: None, "not implemented"),
    (_except("W_Q", "rows"), "W_Q by rows"),
    (_except("W_K", "rows"), "W_K by rows"),
    (_except("W_gate", "rows"), "W_gate and W_up are split differently"),
    (lambda n: "rows" if n in ("W_gate", "W_up") else SPLIT[n], "W_gate and W_up by rows"),
    (lambda n: "rows" if n in ("W_Q", "W_K", "W_V") else SPLIT[n], "W_Q by rows"),
    (lambda n: "columns" if n in ("W_O", "W_down") else SPLIT[n], "W_O by columns"),
    (lambda n: 1, 'expected "rows" or "columns"'),
]


def test_the_split_messages_blame_the_weight_that_is_wrong(capsys):
    """W_V is not in the scores, and W_gate with W_up by rows is not a mistake about E (both
    were once said)."""
    check_split_plan(_except("W_V", "rows"))
    out = verdict(capsys)
    assert "score" not in out and "W_V by rows" in out
    check_split_plan(lambda n: "rows" if n in ("W_gate", "W_up") else SPLIT[n])
    out = verdict(capsys)
    assert "E by" not in out and "silu" in out


@pytest.mark.parametrize("fn, words", SPLIT_WRONG)
def test_split_names_the_mistake(capsys, fn, words):
    assert not check_split_plan(fn)
    out = verdict(capsys)
    assert out.startswith("✗ split_plan:") and words in out, out
