"""The checkers of notebook 03: a catalogue of wrong answers, each rejected with a message
that names the mistake, and several correct forms, each accepted."""

import functools
import math

import numpy as np
import pytest
import torch

import mha_lib
import mha_lib.pytorch
from mha_lib import merge_heads, multi_head_attention, softmax, split_heads
from mha_lib.exercises import check_merge_heads, check_multi_head_attention, check_split_heads


def verdict(checker, fn, capsys):
    """Run a checker; return (passed, the one line it printed)."""
    passed = checker(fn)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1, lines
    return passed, lines[0]


def not_implemented(*args):
    return None  # your code here


def raises(*args):
    raise RuntimeError("boom")


# ---------------------------------------------------------------------------- split_heads


def split_right(Y, num_heads):
    B, N, hd = Y.shape
    return Y.reshape(B, N, num_heads, hd // num_heads).transpose(0, 2, 1, 3)


def split_no_transpose(Y, num_heads):
    B, N, hd = Y.shape
    return Y.reshape(B, num_heads, N, hd // num_heads)


def split_wrong_order(Y, num_heads):
    B, N, hd = Y.shape
    return Y.reshape(B, N, num_heads, hd // num_heads)  # (B, N, h, d)


def split_interleaved(Y, num_heads):
    return np.stack([Y[..., i::num_heads] for i in range(num_heads)], axis=1)


def split_transpose_first(Y, num_heads):
    B, N, hd = Y.shape
    return Y.transpose(0, 2, 1).reshape(B, num_heads, N, hd // num_heads)


def split_last_axes_swapped(Y, num_heads):
    return split_right(Y, num_heads).transpose(0, 1, 3, 2)


def split_by_blocks(Y, num_heads):
    """Another valid algorithm: stack the column blocks along a new axis 1."""
    return np.stack(np.split(Y, num_heads, axis=-1), axis=1)


def split_torch(Y, num_heads):
    B, N, hd = Y.shape
    return torch.from_numpy(Y).view(B, N, num_heads, hd // num_heads).transpose(1, 2)


SPLIT_RIGHT = [
    split_right,
    split_by_blocks,
    split_torch,
    lambda Y, h: split_torch(Y, h).float(),
    lambda Y, h: split_right(Y.astype(np.float32), h),
    lambda Y, h: np.swapaxes(Y.reshape(*Y.shape[:2], h, -1), 1, 2),
]


def split_float_d(Y, num_heads):
    B, N, hd = Y.shape
    return Y.reshape(B, N, num_heads, hd / num_heads).transpose(0, 2, 1, 3)


def split_two_heads(Y, num_heads):
    return split_right(Y, 2)


SPLIT_WRONG = [
    (split_no_transpose, "reshape without transpose"),
    (split_wrong_order, "(B, N, h, d)"),
    (split_interleaved, "interleaved"),
    (split_transpose_first, "transposes before reshaping"),
    (split_last_axes_swapped, "last two axes are swapped"),
    (lambda Y, num_heads: np.stack(np.split(Y, num_heads, axis=-1)), "heads come before the batch"),
    (lambda Y, num_heads: split_right(Y, num_heads)[0], "batch axis B = 2 is lost"),
    (split_two_heads, "use the argument num_heads"),
    (split_float_d, "integer division"),
    (not_implemented, "not implemented yet"),
    (raises, "RuntimeError: boom"),
    # torch habits on numpy arrays
    (lambda Y, h: Y.view(*Y.shape[:2], h, -1).transpose(1, 2), "calls .view(...)"),
    (lambda Y, h: Y.reshape(*Y.shape[:2], h, -1).permute(0, 2, 1, 3), "no .permute()"),
    (lambda Y, h: Y.reshape(*Y.shape[:2], h, -1).transpose(1, 2), "np.swapaxes(x, 1, 2)"),
    (lambda Y, h: np.stack(np.split(Y, h, dim=-1), axis=1), "not torch's dim="),
    (lambda Y, h: np.stack(Y.chunk(h, -1), axis=1), "np.split(x, 3, axis=-1)"),
    (lambda Y, h: np.stack(np.split(Y, Y.shape[-1] // h, axis=-1), axis=1), "the sizes swapped"),
]


@pytest.mark.parametrize("fn", SPLIT_RIGHT)
def test_split_heads_accepts(fn, capsys):
    passed, line = verdict(check_split_heads, fn, capsys)
    assert passed and line == "✓ split_heads: correct"


@pytest.mark.parametrize(("fn", "words"), SPLIT_WRONG)
def test_split_heads_names_the_mistake(fn, words, capsys):
    passed, line = verdict(check_split_heads, fn, capsys)
    assert not passed
    assert line.startswith("✗ split_heads: ") and words in line, line


# ---------------------------------------------------------------------------- merge_heads


def merge_right(Y):
    B, h, N, d = Y.shape
    return Y.transpose(0, 2, 1, 3).reshape(B, N, h * d)


def merge_no_transpose(Y):
    B, h, N, d = Y.shape
    return Y.reshape(B, N, h * d)


def merge_interleaved(Y):
    B, h, N, d = Y.shape
    return Y.transpose(0, 2, 3, 1).reshape(B, N, h * d)


def merge_no_reshape(Y):
    return Y.transpose(0, 2, 1, 3)


def merge_summed(Y):
    return Y.sum(axis=1)


def merge_by_concatenation(Y):
    """Another valid algorithm: concatenate the heads along the features."""
    return np.concatenate([Y[:, i] for i in range(Y.shape[1])], axis=-1)


def merge_torch(Y):
    B, h, N, d = Y.shape
    return torch.from_numpy(Y).transpose(1, 2).reshape(B, N, h * d)


MERGE_RIGHT = [
    merge_right,
    merge_by_concatenation,
    merge_torch,
    lambda Y: merge_torch(Y).float(),
    lambda Y: merge_right(Y.astype(np.float32)),
]

MERGE_WRONG = [
    (merge_no_transpose, "reshape without transpose"),
    (merge_interleaved, "interleaved"),
    (merge_no_reshape, "reshape to (B, N, h*d)"),
    (merge_summed, "sums or averages the heads"),
    (lambda Y: Y.mean(axis=1), "sums or averages the heads"),
    (lambda Y: np.concatenate([Y[:, i] for i in range(Y.shape[1])], axis=1), "along the tokens"),
    (lambda Y: merge_right(Y)[0], "batch axis B = 2 is lost"),
    (lambda Y: merge_right(Y[:, ::-1]), "reverse order"),
    (not_implemented, "not implemented yet"),
    # torch habits on numpy arrays
    (lambda Y: Y.transpose(1, 2).reshape(Y.shape[0], Y.shape[2], -1), "np.swapaxes(x, 1, 2)"),
    (lambda Y: Y.permute(0, 2, 1, 3).reshape(Y.shape[0], Y.shape[2], -1), "no .permute()"),
    (lambda Y: np.swapaxes(Y, 1, 2).contiguous(), "no .contiguous()"),
    (lambda Y: np.swapaxes(Y, 1, 2).view(Y.shape[0], Y.shape[2], -1), "calls .view(...)"),
    (lambda Y: np.concatenate(list(np.moveaxis(Y, 1, 0)), dim=-1), "not torch's dim="),
]


@pytest.mark.parametrize("fn", MERGE_RIGHT)
def test_merge_heads_accepts(fn, capsys):
    passed, line = verdict(check_merge_heads, fn, capsys)
    assert passed and line == "✓ merge_heads: correct"


@pytest.mark.parametrize(("fn", "words"), MERGE_WRONG)
def test_merge_heads_names_the_mistake(fn, words, capsys):
    passed, line = verdict(check_merge_heads, fn, capsys)
    assert not passed
    assert line.startswith("✗ merge_heads: ") and words in line, line


# ---------------------------------------------------------------------------- multi-head attention


def mha_right(X, W_q, W_k, W_v, W_o, num_heads):
    """The per-head loop a learner would write."""
    heads = []
    for W_q_i, W_k_i, W_v_i in zip(
        np.split(W_q, num_heads, axis=1),
        np.split(W_k, num_heads, axis=1),
        np.split(W_v, num_heads, axis=1),
    ):
        q, k, v = X @ W_q_i, X @ W_k_i, X @ W_v_i
        heads.append(softmax(q @ k.T / math.sqrt(q.shape[1])) @ v)
    return np.concatenate(heads, axis=1) @ W_o


def mha_with(
    scale=None,
    split="right",
    combine="concat",
    softmax_axis=-1,
    swap_qk=False,
    merge="right",
    shared_weights=False,
):
    """A learner's vectorised multi-head attention with one mistake switched on."""

    def fn(X, W_q, W_k, W_v, W_o, num_heads):
        N, h = X.shape[0], num_heads
        if swap_qk:
            W_q, W_k = W_k, W_q

        def heads_of(Y):  # (N, h*d) -> (h, N, d)
            d = Y.shape[1] // h
            if split == "no transpose":
                return Y.reshape(h, N, d)
            if split == "interleaved":
                return np.stack([Y[:, i::h] for i in range(h)])
            return Y.reshape(N, h, d).transpose(1, 0, 2)

        q, k, v = heads_of(X @ W_q), heads_of(X @ W_k), heads_of(X @ W_v)
        d_k = q.shape[-1]
        s = q @ k.transpose(0, 2, 1) / (math.sqrt(d_k) if scale is None else scale(h, d_k))
        A = softmax(s, axis=softmax_axis)  # (h, N, N)
        if shared_weights:
            A = A.mean(axis=0)  # one pattern for all heads
        heads = A @ v  # (h, N, d_v)
        if combine == "per head":
            return heads
        if combine == "sum":
            return heads.sum(axis=0)
        if merge == "no transpose":
            concat = heads.reshape(N, -1)
        else:
            concat = heads.transpose(1, 0, 2).reshape(N, -1)  # (N, h*d_v)
        if combine == "no W_o":
            return concat
        if combine == "mean":
            W_o_blocks = np.split(W_o, h, axis=0)
            return sum(heads[i] @ W_o_blocks[i] for i in range(h)) / h
        return concat @ W_o

    return fn


def mha_two_heads_only(X, W_q, W_k, W_v, W_o, num_heads):
    return mha_right(X, W_q, W_k, W_v, W_o, 2)


def mha_d_from_C(X, W_q, W_k, W_v, W_o, num_heads):
    """Reads the head width off C: d = C // h, right only when h*d_k = C."""
    N, C = X.shape
    d = C // num_heads
    q, k, v = ((X @ W).reshape(N, num_heads, d).transpose(1, 0, 2) for W in (W_q, W_k, W_v))
    A = softmax(q @ k.transpose(0, 2, 1) / math.sqrt(d))
    return (A @ v).transpose(1, 0, 2).reshape(N, -1) @ W_o


def mha_scale_from_C(X, W_q, W_k, W_v, W_o, num_heads):
    """Splits right, but scales by √(C / h)."""
    return mha_with(scale=lambda h, d_k: math.sqrt(X.shape[1] / h))(
        X, W_q, W_k, W_v, W_o, num_heads
    )


def mha_v_split_like_q(X, W_q, W_k, W_v, W_o, num_heads):
    """Assumes d_v = d_k when splitting V."""
    N, d_k = X.shape[0], W_q.shape[1] // num_heads
    q, k, v = ((X @ W).reshape(N, num_heads, d_k).transpose(1, 0, 2) for W in (W_q, W_k, W_v))
    A = softmax(q @ k.transpose(0, 2, 1) / math.sqrt(d_k))
    return (A @ v).transpose(1, 0, 2).reshape(N, -1) @ W_o


def mha_per_head_output_blocks(X, W_q, W_k, W_v, W_o, num_heads):
    """Another valid algorithm: each head times its block of rows of W_o, summed; float32."""
    heads = mha_with(combine="per head")(X, W_q, W_k, W_v, W_o, num_heads)  # (h, N, d_v)
    blocks = np.split(W_o, num_heads, axis=0)  # h x (d_v, C)
    return sum(head @ block for head, block in zip(heads, blocks)).astype(np.float32)


def mha_torch(X, W_q, W_k, W_v, W_o, num_heads):
    """torch's scaled_dot_product_attention per head, returned as a tensor."""
    X, W_q, W_k, W_v, W_o = (torch.from_numpy(a) for a in (X, W_q, W_k, W_v, W_o))
    N = X.shape[0]
    q, k, v = ((X @ W).view(N, num_heads, -1).transpose(0, 1) for W in (W_q, W_k, W_v))
    heads = torch.nn.functional.scaled_dot_product_attention(q, k, v)  # (h, N, d_v)
    return heads.transpose(0, 1).reshape(N, -1) @ W_o


def mha_with_the_library_helpers(X, W_q, W_k, W_v, W_o, num_heads):
    """Calls mha_lib.split_heads, merge_heads and scaled_dot_product_attention, which notebooks
    01-03 gave before this exercise: fine."""
    q, k, v = (mha_lib.split_heads((X @ W)[None], num_heads)[0] for W in (W_q, W_k, W_v))
    heads = [mha_lib.scaled_dot_product_attention(q[i], k[i], v[i])[0] for i in range(num_heads)]
    return mha_lib.merge_heads(np.stack(heads)[None])[0] @ W_o


MHA_RIGHT = [
    mha_right,
    mha_with(),
    mha_with_the_library_helpers,
    mha_per_head_output_blocks,
    mha_torch,
    lambda *args: mha_torch(*args).float(),
    lambda X, *rest: mha_right(X.astype(np.float32), *rest),
]


def mha_torch_habit_W_o_T(X, W_q, W_k, W_v, W_o, num_heads):
    """Multiplies by W_o.T, as with a torch Linear's weight."""
    return mha_right(X, W_q, W_k, W_v, W_o.T, num_heads)


def mha_heads_reversed(X, W_q, W_k, W_v, W_o, num_heads):
    """Each head meets the wrong block of W_o: the heads concatenated in reverse order."""
    heads = mha_with(combine="per head")(X, W_q, W_k, W_v, W_o, num_heads)  # (h, N, d_v)
    return np.concatenate(list(heads[::-1]), axis=1) @ W_o


def mha_torch_habit_softmax(X, W_q, W_k, W_v, W_o, num_heads):
    heads = []
    for W_q_i, W_k_i, W_v_i in zip(*(np.split(W, num_heads, axis=1) for W in (W_q, W_k, W_v))):
        q, k, v = X @ W_q_i, X @ W_k_i, X @ W_v_i
        heads.append(torch.softmax(q @ k.T / math.sqrt(q.shape[1]), dim=-1) @ v)
    return np.concatenate(heads, axis=1) @ W_o


def mha_torch_habit_transpose(X, W_q, W_k, W_v, W_o, num_heads):
    """k.transpose(-2, -1) with torch's meaning, on a (h, N, d) numpy array."""
    N = X.shape[0]
    q, k, v = ((X @ W).reshape(N, num_heads, -1).swapaxes(0, 1) for W in (W_q, W_k, W_v))
    A = softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
    return (A @ v).swapaxes(0, 1).reshape(N, -1) @ W_o


def mha_torch_habit_view(X, W_q, W_k, W_v, W_o, num_heads):
    N = X.shape[0]
    q, k, v = ((X @ W).view(N, num_heads, -1).swapaxes(0, 1) for W in (W_q, W_k, W_v))
    A = softmax(q @ k.swapaxes(-2, -1) / math.sqrt(q.shape[-1]))
    return (A @ v).swapaxes(0, 1).reshape(N, -1) @ W_o


def mha_transpose_no_op(X, W_q, W_k, W_v, W_o, num_heads):
    """The per-head loop with k.transpose(-2, -1): on a 2-D numpy array it keeps k as it is."""
    heads = []
    for W_q_i, W_k_i, W_v_i in zip(*(np.split(W, num_heads, axis=1) for W in (W_q, W_k, W_v))):
        q, k, v = X @ W_q_i, X @ W_k_i, X @ W_v_i
        heads.append(softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[1])) @ v)
    return np.concatenate(heads, axis=1) @ W_o


MHA_WRONG = [
    (mha_torch_habit_W_o_T, "it multiplies by W_o.T: W_o has shape (h·d_v, C) = (4, 6)"),
    (mha_heads_reversed, "reverse order"),
    (mha_with(combine="no W_o"), "W_o is missing"),
    (mha_with(combine="per head"), "one output per head"),
    (mha_with(combine="sum"), "summed or averaged"),
    (mha_with(combine="mean"), "averages the heads"),
    (mha_with(shared_weights=True), "averages the attention weights"),
    (mha_with(scale=lambda h, d_k: math.sqrt(h * d_k)), "√(h·d_k)"),
    (mha_scale_from_C, "d_k = C / num_heads"),
    (mha_d_from_C, "not C // num_heads"),
    (mha_v_split_like_q, "d_v = W_v.shape[1] // num_heads"),
    (mha_with(scale=lambda h, d_k: 1.0), "does not divide the scores by √d_k"),
    (mha_with(split="no transpose"), "reshape without transpose"),
    (mha_with(split="interleaved"), "interleaved"),
    (mha_with(merge="no transpose"), "merges the heads with a reshape without transpose"),
    (mha_with(swap_qk=True), "scores are transposed"),
    (mha_with(softmax_axis=-2), "wrong axis"),
    (mha_two_heads_only, "do not hard-code the number of heads"),
    (not_implemented, "not implemented yet"),
    (raises, "RuntimeError: boom"),
    (mha_with(scale=lambda h, d_k: math.sqrt(5)), "√N, the number of tokens"),
    (lambda X, *rest: mha_right(X, *rest) + X, "it adds X to the output"),
    (lambda *args: mha_right(*args[:5], 1), "a single head over all the columns"),
    # torch habits on numpy arrays
    (mha_torch_habit_softmax, "it passes a numpy array to torch.softmax()"),
    (mha_torch_habit_transpose, "np.swapaxes(k, -2, -1)"),
    (mha_torch_habit_view, "calls .view(...)"),
    (mha_transpose_no_op, "k.transpose(-2, -1) for one head's 2-D k"),
]


@pytest.mark.parametrize("fn", MHA_RIGHT)
def test_multi_head_attention_accepts(fn, capsys):
    passed, line = verdict(check_multi_head_attention, fn, capsys)
    assert passed and line == "✓ multi_head_attention: correct"


@pytest.mark.parametrize(("fn", "words"), MHA_WRONG)
def test_multi_head_attention_names_the_mistake(fn, words, capsys):
    passed, line = verdict(check_multi_head_attention, fn, capsys)
    assert not passed
    assert line.startswith("✗ multi_head_attention: ") and words in line, line


def test_multi_head_attention_has_a_case_where_h_d_k_is_not_C():
    from mha_lib.exercises.nb03 import _MHA_CASES

    assert any(h * d_k != C and h * d_v != C and d_k != d_v for _, _, C, h, d_k, d_v in _MHA_CASES)


def test_multi_head_attention_blames_no_mistake_that_was_not_made(capsys):
    """W_o.T raises a matmul error in the first case, whose hint is about d_k: the message names
    W_o.T and says nothing of d_k. A mistake that every probe shows too gets no hint at all."""
    passed, line = verdict(check_multi_head_attention, mha_torch_habit_W_o_T, capsys)
    assert not passed and "W_o.T" in line and "d_k" not in line, line

    def wrong_everywhere_but_case_one(X, W_q, W_k, W_v, W_o, num_heads):
        off = X.shape != (5, 6) or num_heads != 2 or W_v.shape[1] != 4
        return mha_right(X, W_q, W_k, W_v, W_o, num_heads) + 0.1 * off

    passed, line = verdict(check_multi_head_attention, wrong_everywhere_but_case_one, capsys)
    assert not passed and "wrong values" in line and "[" not in line, line


def test_keys_from_queries_is_named(capsys):
    def keys_from_queries(X, W_q, W_k, W_v, W_o, num_heads):
        return mha_right(X, W_q, W_q, W_v, W_o, num_heads)

    passed, line = verdict(check_multi_head_attention, keys_from_queries, capsys)
    assert not passed and "W_q for the keys too" in line


def test_catalogues_are_complete():
    for wrong, right in (
        (SPLIT_WRONG, SPLIT_RIGHT),
        (MERGE_WRONG, MERGE_RIGHT),
        (MHA_WRONG, MHA_RIGHT),
    ):
        assert len(wrong) >= 6 and len(right) >= 2


def test_checkers_are_exported():
    import mha_lib.exercises as ex
    import mha_lib.exercises.nb03 as nb03

    for name in ("check_split_heads", "check_merge_heads", "check_multi_head_attention"):
        assert name in nb03.__all__ and name in ex.__all__


# answers that call the library function the exercise asks for -----------------------------------

LIBRARY = "the exercise asks you to write it yourself"

BY_THE_LIBRARY = [
    (check_split_heads, split_heads, "mha_lib.split_heads"),
    (check_split_heads, lambda Y, h: mha_lib.multihead.split_heads(Y, h), "mha_lib.split_heads"),
    (check_split_heads, functools.partial(mha_lib.split_heads), "mha_lib.split_heads"),
    (
        check_split_heads,
        lambda Y, h: mha_lib.pytorch.split_heads(torch.from_numpy(Y), h),
        "mha_lib.pytorch.split_heads",
    ),
    (check_merge_heads, merge_heads, "mha_lib.merge_heads"),
    (check_merge_heads, lambda Y: mha_lib.merge_heads(Y), "mha_lib.merge_heads"),
    (
        check_merge_heads,
        lambda Y: mha_lib.pytorch.merge_heads(torch.from_numpy(Y)),
        "mha_lib.pytorch.merge_heads",
    ),
    (check_multi_head_attention, multi_head_attention, "mha_lib.multi_head_attention"),
    (
        check_multi_head_attention,
        lambda *args: mha_lib.multi_head_attention(*args),
        "mha_lib.multi_head_attention",
    ),
    (
        check_multi_head_attention,
        lambda *args: mha_lib.multihead.multi_head_attention_loop(*args),
        "mha_lib.multi_head_attention_loop",
    ),
]


@pytest.mark.parametrize(("check", "fn", "shown"), BY_THE_LIBRARY)
def test_the_library_answer_is_rejected(check, fn, shown, capsys):
    passed, line = verdict(check, fn, capsys)
    assert not passed and f"it calls {shown}" in line and LIBRARY in line, line


def test_the_watch_on_the_library_is_undone():
    before = (mha_lib.split_heads, mha_lib.multihead.split_heads, split_heads)
    check_split_heads(lambda Y, h: split_heads(Y, h) + 1 / 0)
    assert (mha_lib.split_heads, mha_lib.multihead.split_heads, split_heads) == before
    assert mha_lib.multihead.split_heads.__module__ == "mha_lib.multihead"
