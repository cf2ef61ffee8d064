"""The checkers of notebook 04: a catalogue of wrong answers, each rejected with a message
that names the mistake, and several correct forms, each accepted.

The rule for containers is the same in every checker: tensors pass on any device, with
requires_grad or as nn.Parameter; numpy arrays with the right values pass with a note that
PyTorch needs a tensor."""

import functools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mha_lib.block
import mha_lib.pytorch
from mha_lib.exercises.nb04 import (
    _BLOCK_CASES,
    _FORWARD_CASES,
    _block_inputs,
    _block_mistakes,
    _forward_inputs,
    _forward_mistakes,
    _forward_variant,
    check_attention_forward,
    check_causal_attn_mask,
    check_key_padding_mask,
    check_numpy_to_torch,
    check_pre_ln_block,
)
from mha_lib.pytorch import MultiHeadAttention

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
    lambda q, k, v, o: tuple(t.float() for t in reference_numpy_to_torch(q, k, v, o)),
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
    # W_q.T three times: once read as "the three blocks are in the wrong order"
    (lambda q, k, v, o: tensors(np.concatenate([q.T, q.T, q.T]), o.T), "it uses W_q for more"),
    (lambda q, k, v, o: tensors(np.concatenate([q.T, k.T, k.T]), o.T), "it uses W_k for more"),
    (lambda q, k, v, o: tensors(np.concatenate([v.T, k.T, q.T]), o.T), "[W_v.T; W_k.T; W_q.T]"),
    (lambda q, k, v, o: (torch.cat([q.T, k.T, v.T]), o.T), "it passes a numpy array to torch.cat"),
    (
        lambda q, k, v, o: dict(zip(("in_proj_weight", "out_proj_weight"), tensors(q, o))),
        "it returns a dict",
    ),
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
    (
        lambda lengths, S: torch.arange(S)[None, :] >= torch.tensor(lengths),
        "the lengths are not a column",
    ),
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


# attention_forward ------------------------------------------------------------------------------


def forward_sdpa(x, in_proj_weight, out_proj_weight, num_heads):
    """The module's fast path: one packed projection, SDPA, merge, out_proj."""
    B, N, E = x.shape
    q, k, v = F.linear(x, in_proj_weight).chunk(3, dim=-1)  # (B, N, E) each
    q, k, v = (t.view(B, N, num_heads, E // num_heads).transpose(1, 2) for t in (q, k, v))
    heads = F.scaled_dot_product_attention(q, k, v)  # (B, h, N, d)
    return heads.transpose(1, 2).reshape(B, N, E) @ out_proj_weight.T  # (B, N, E)


def forward_written_out(x, in_proj_weight, out_proj_weight, num_heads):
    """Notebook 04's TinyMultiHeadAttention, with the weights transposed; returns a pair."""
    B, N, E = x.shape
    d = E // num_heads
    W_q, W_k, W_v = (W.T for W in in_proj_weight.split(E))  # numpy's layout, (E, E) each
    q, k, v = ((x @ W).view(B, N, num_heads, d).transpose(1, 2) for W in (W_q, W_k, W_v))
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1)  # (B, h, N, N)
    out = (weights @ v).transpose(1, 2).reshape(B, N, E) @ out_proj_weight.T
    return out, weights


def forward_through_the_module(x, in_proj_weight, out_proj_weight, num_heads):
    """Load the weights into MultiHeadAttention (float64) and call it: (output, None)."""
    E = x.shape[-1]
    attn = MultiHeadAttention(E, num_heads, bias=False, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        attn.in_proj_weight.copy_(in_proj_weight)
        attn.out_proj.weight.copy_(out_proj_weight)
    return attn(x)


def forward_with_the_library_split(x, in_proj_weight, out_proj_weight, num_heads):
    """Calls mha_lib.pytorch's split_heads and merge_heads, given in notebook 04: fine."""
    q, k, v = (
        mha_lib.pytorch.split_heads(t, num_heads) for t in F.linear(x, in_proj_weight).chunk(3, -1)
    )
    heads = F.scaled_dot_product_attention(q, k, v)  # (B, h, N, d)
    return F.linear(mha_lib.pytorch.merge_heads(heads), out_proj_weight)


FORWARD_RIGHT = [
    forward_sdpa,
    forward_written_out,
    forward_with_the_library_split,
    lambda x, a, b, h: forward_sdpa(x, a, b, h).float(),  # float32 is fine
    lambda x, a, b, h: forward_sdpa(x.float(), a.float(), b.float(), h),  # computed in float32
]


def forward_with(**wrong):
    """A learner's forward pass with one mistake switched on (see `_forward_variant`)."""

    def fn(x, in_proj_weight, out_proj_weight, num_heads):
        args = (x.numpy(), in_proj_weight.numpy(), out_proj_weight.numpy(), num_heads)
        return torch.from_numpy(_forward_variant(*args, **wrong))

    return fn


def forward_stored_layout(x, in_proj_weight, out_proj_weight, num_heads):
    """numpy's habit, X @ W, with torch's (out, in) weights: a shape error, (E, 3E) expected."""
    return forward_sdpa(x, in_proj_weight.T, out_proj_weight.T, num_heads)


def forward_in_proj_as_stored(x, in_proj_weight, out_proj_weight, num_heads):
    return forward_sdpa(x, in_proj_weight.T, out_proj_weight, num_heads)


def forward_sdpa_scale_E(x, in_proj_weight, out_proj_weight, num_heads):
    B, N, E = x.shape
    q, k, v = F.linear(x, in_proj_weight).chunk(3, dim=-1)
    q, k, v = (t.view(B, N, num_heads, E // num_heads).transpose(1, 2) for t in (q, k, v))
    heads = F.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(E))
    return heads.transpose(1, 2).reshape(B, N, E) @ out_proj_weight.T


def forward_returns_heads(x, in_proj_weight, out_proj_weight, num_heads):
    B, N, E = x.shape
    q, k, v = F.linear(x, in_proj_weight).chunk(3, dim=-1)
    q, k, v = (t.view(B, N, num_heads, E // num_heads).transpose(1, 2) for t in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v)  # (B, h, N, d): not merged


def forward_over_heads(x, in_proj_weight, out_proj_weight, num_heads):
    """view(B, N, h, d) without transpose(1, 2): SDPA then attends among the heads."""
    B, N, E = x.shape
    q, k, v = (t.view(B, N, num_heads, -1) for t in F.linear(x, in_proj_weight).chunk(3, -1))
    return F.linear(F.scaled_dot_product_attention(q, k, v).reshape(B, N, E), out_proj_weight)


def forward_scale_d(x, in_proj_weight, out_proj_weight, num_heads):
    _B, _N, E = x.shape
    q, k, v = (
        mha_lib.pytorch.split_heads(t, num_heads) for t in F.linear(x, in_proj_weight).chunk(3, -1)
    )
    heads = F.scaled_dot_product_attention(q, k, v, scale=num_heads / E)  # 1/d, not 1/√d
    return F.linear(mha_lib.pytorch.merge_heads(heads), out_proj_weight)


def forward_view_merge(x, in_proj_weight, out_proj_weight, num_heads):
    """Written out, merged with view after transpose(1, 2): not contiguous, view raises."""
    B, N, E = x.shape
    q, k, v = (
        mha_lib.pytorch.split_heads(t, num_heads) for t in F.linear(x, in_proj_weight).chunk(3, -1)
    )
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E // num_heads), dim=-1)
    return F.linear((weights @ v).transpose(1, 2).view(B, N, E), out_proj_weight)


def forward_k_transposed_1_2(x, in_proj_weight, out_proj_weight, num_heads):
    """Written out with k.transpose(1, 2) on (B, h, N, d): heads and tokens swapped."""
    E = x.shape[-1]
    q, k, v = (
        mha_lib.pytorch.split_heads(t, num_heads) for t in F.linear(x, in_proj_weight).chunk(3, -1)
    )
    weights = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(E // num_heads), dim=-1)
    return F.linear(mha_lib.pytorch.merge_heads(weights @ v), out_proj_weight)


def forward_with_dropout(x, in_proj_weight, out_proj_weight, num_heads):
    _B, _N, _E = x.shape
    q, k, v = (
        mha_lib.pytorch.split_heads(t, num_heads) for t in F.linear(x, in_proj_weight).chunk(3, -1)
    )
    heads = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
    return F.linear(mha_lib.pytorch.merge_heads(heads), out_proj_weight)


FORWARD_WRONG = [
    (forward_with(transpose_in=False, transpose_out=False), "as they are stored"),
    (forward_stored_layout, "in_proj_weight is (3E, E) = (18, 6)"),
    (forward_in_proj_as_stored, "x @ in_proj_weight.T (F.linear"),
    (forward_with(transpose_in=False), "input projections are not transposed"),
    (forward_with(transpose_out=False), "out_proj_weight is not transposed"),
    (forward_with(project_out=False), "output projection is missing"),
    (forward_with(split="no transpose"), "view(B, h, N, d)"),
    (forward_with(split="interleaved"), "interleaved"),
    (forward_with(merge="no transpose"), "merges the heads with reshape(B, N, E)"),
    (forward_sdpa_scale_E, "by √E"),
    (forward_with(scale=1.0), "not divided by √d"),
    (forward_with(causal=True), "it is causal"),
    (forward_with(order=(1, 0, 2)), "q from block 1, k from block 0, v from block 2"),
    (forward_with(order=(2, 1, 0)), "wrong order"),
    (lambda x, a, b, h: forward_sdpa(x, a, b, 2), "right with 2 heads and wrong with 3"),
    (forward_returns_heads, "it returns the heads"),
    (lambda x, a, b, h: forward_sdpa(x, a, b, h).half(), "not float16"),
    (lambda x, a, b, h: None, "not implemented"),
    (forward_over_heads, "it attends over the heads, not the tokens"),
    (forward_with(axis=-2), "softmax over the wrong axis"),
    (forward_scale_d, "divides the scores by d;"),
    (forward_view_merge, "merge them with .reshape(B, N, E)"),
    (forward_with_dropout, "changes from call to call"),
    (lambda x, a, b, h: (None, forward_sdpa(x, a, b, h)), "the pair is in the wrong order"),
    (forward_k_transposed_1_2, "k.transpose(1, 2) would swap the heads and the tokens"),
]


@pytest.mark.parametrize("fn", FORWARD_RIGHT)
def test_check_attention_forward_accepts(fn, capsys):
    assert verdict(check_attention_forward, fn, capsys) == (True, "✓ attention_forward: correct")


def test_check_attention_forward_accepts_numpy_with_a_note(capsys):
    passed, line = verdict(
        check_attention_forward, lambda x, a, b, h: forward_sdpa(x, a, b, h).numpy(), capsys
    )
    assert passed and line.startswith("✓ attention_forward: correct (") and "numpy" in line


@pytest.mark.parametrize(("fn", "words"), FORWARD_WRONG)
def test_check_attention_forward_names_the_mistake(fn, words, capsys):
    passed, line = verdict(check_attention_forward, fn, capsys)
    assert not passed and line.startswith("✗ attention_forward: ") and words in line, line


def test_forward_mistakes_are_distinguishable():
    for seed, B, N, E, h in _FORWARD_CASES:
        x, in_proj, out_proj = _forward_inputs(seed, B, N, E)
        outputs = [
            *_forward_mistakes(x, in_proj, out_proj, h).values(),
            _forward_variant(x, in_proj, out_proj, h),
        ]
        for i in range(len(outputs)):
            for j in range(i + 1, len(outputs)):
                assert not np.allclose(outputs[i], outputs[j], rtol=1e-3, atol=1e-3), (i, j)


def test_forward_reference_is_the_module():
    """The checker's numpy reference equals MultiHeadAttention with the same weights."""
    for seed, B, N, E, h in _FORWARD_CASES:
        x, in_proj, out_proj = _forward_inputs(seed, B, N, E)
        out, _ = forward_through_the_module(
            *(torch.from_numpy(a) for a in (x, in_proj, out_proj)), h
        )
        np.testing.assert_allclose(
            out.detach().numpy(), _forward_variant(x, in_proj, out_proj, h), atol=1e-12
        )


# pre_ln_block -----------------------------------------------------------------------------------


def block_from_parts(x, blk):
    x = x + blk.self_attn(blk.norm1(x), is_causal=True)[0]
    return x + blk.linear2(F.relu(blk.linear1(blk.norm2(x))))


def block_with_mask(x, blk):
    """A boolean attn_mask in nn.MultiheadAttention's convention (True = may NOT attend)."""
    N = x.shape[1]
    causal = torch.ones(N, N, dtype=torch.bool).triu(diagonal=1)
    x = x + blk.self_attn(blk.norm1(x), attn_mask=causal)[0]
    return x + blk.linear2(F.relu(blk.linear1(blk.norm2(x)))), None


def block_by_hand(x, blk):
    """LayerNorm by hand, a float mask of 0 and -inf, the weights read off the modules."""
    N = x.shape[1]

    def layer_norm(t, norm):
        mean, var = t.mean(-1, keepdim=True), t.var(-1, unbiased=False, keepdim=True)
        return (t - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias

    mask = torch.zeros(N, N, dtype=x.dtype).masked_fill(
        torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf")
    )
    x = x + blk.self_attn(layer_norm(x, blk.norm1), attn_mask=mask)[0]
    hidden = F.relu(layer_norm(x, blk.norm2) @ blk.linear1.weight.T + blk.linear1.bias)
    return x + hidden @ blk.linear2.weight.T + blk.linear2.bias


BLOCK_RIGHT = [
    block_from_parts,
    block_with_mask,
    block_by_hand,
    lambda x, blk: block_from_parts(x, blk).float(),  # float32 is fine
    lambda x, blk: torch.nn.functional.pad(block_from_parts(x, blk), (0, 0)),
]


def block_with(mistake):
    """The checker's own mistaken block (by its message's first words), as a learner's fn."""

    def fn(x, blk):
        outputs = _block_mistakes(x, blk)
        (message,) = [m for m in outputs if m.startswith(mistake)]
        return torch.from_numpy(outputs[message])

    return fn


def block_post_ln(x, blk):
    x = blk.norm1(x + blk.self_attn(x, is_causal=True)[0])
    return blk.norm2(x + blk.linear2(F.relu(blk.linear1(x))))


def block_adds_norm(x, blk):
    t = blk.norm1(x)
    x = t + blk.self_attn(t, is_causal=True)[0]
    t = blk.norm2(x)
    return t + blk.linear2(F.relu(blk.linear1(t)))


def block_no_mask(x, blk):
    x = x + blk.self_attn(blk.norm1(x))[0]
    return x + blk.linear2(F.relu(blk.linear1(blk.norm2(x))))


def block_numpy_mask(x, blk):
    keep = torch.from_numpy(np.tril(np.ones((x.shape[1],) * 2, dtype=bool)))  # True = may attend
    x = x + blk.self_attn(blk.norm1(x), attn_mask=keep)[0]
    return x + blk.linear2(F.relu(blk.linear1(blk.norm2(x))))


def block_parallel(x, blk):
    a = blk.self_attn(blk.norm1(x), is_causal=True)[0]
    return x + a + blk.linear2(F.relu(blk.linear1(blk.norm2(x))))


def block_no_relu(x, blk):
    x = x + blk.self_attn(blk.norm1(x), is_causal=True)[0]
    return x + blk.linear2(blk.linear1(blk.norm2(x)))


def block_norm1_twice(x, blk):
    x = x + blk.self_attn(blk.norm1(x), is_causal=True)[0]
    return x + blk.linear2(F.relu(blk.linear1(blk.norm1(x))))


def block_pre(
    attn_norm=True,
    ff_norm=True,
    final=None,
    swap_norms=False,
    ff=True,
    act=F.relu,
    plain_norm=False,
    bias=True,
    float_ones=False,
    kv_raw=False,
    mask=None,
):
    """A learner's pre-LN block written from the parts, with one mistake switched on."""

    def fn(x, blk):
        N = x.shape[1]
        n1, n2 = (blk.norm2, blk.norm1) if swap_norms else (blk.norm1, blk.norm2)
        if plain_norm:
            n1 = n2 = functools.partial(F.layer_norm, normalized_shape=x.shape[-1:])
        t = n1(x) if attn_norm else x
        if mask is not None:
            a = blk.self_attn(t, attn_mask=mask(N))[0]
        elif float_ones:
            a = blk.self_attn(t, attn_mask=torch.ones(N, N, dtype=x.dtype).triu(1))[0]
        elif kv_raw:
            a = blk.self_attn(t, x, x, is_causal=True)[0]
        else:
            a = blk.self_attn(t, is_causal=True)[0]
        x = x + a
        if not ff:
            return x
        t = n2(x) if ff_norm else x
        if bias:
            out = x + blk.linear2(act(blk.linear1(t)))
        else:
            out = x + act(t @ blk.linear1.weight.T) @ blk.linear2.weight.T
        return {"norm1": blk.norm1, "norm2": blk.norm2, None: lambda y: y}[final](out)

    return fn


def block_linears_swapped(x, blk):
    x = x + blk.self_attn(blk.norm1(x), is_causal=True)[0]
    return x + blk.linear1(F.relu(blk.linear2(blk.norm2(x))))


def block_weight_not_transposed(x, blk):
    x = x + blk.self_attn(blk.norm1(x), is_causal=True)[0]
    return x + F.relu(blk.norm2(x) @ blk.linear1.weight) @ blk.linear2.weight


BLOCK_WRONG = [
    (block_no_mask, "no causal mask"),
    (block_numpy_mask, "the causal mask is inverted"),
    (block_post_ln, "post-LN"),
    (block_adds_norm, "the residuals add the normalised input"),
    (block_parallel, "a parallel block"),
    (block_no_relu, "no activation"),
    (block_norm1_twice, "norm1 for both sublayers"),
    (block_with("the residual around attention"), "the residual around attention is missing"),
    (block_with("the residual around the feed"), "around the feed-forward network is missing"),
    (block_with("the sublayers are in the wrong order"), "wrong order"),
    (lambda x, blk: block_from_parts(x, blk).float().half(), "not float16"),
    (lambda x, blk: block_from_parts(x, blk)[:, :-1], "expected shape (2, 5, 8); got (2, 4, 8)"),
    (lambda x, blk: None, "not implemented"),
    # six mistakes that once all got "wrong values"
    (block_pre(attn_norm=False), "attention reads x unnormalised"),
    (block_pre(ff_norm=False), "feed-forward network reads its input unnormalised"),
    (block_pre(final="norm2"), "normalises the block's output with norm2"),
    (block_pre(final="norm1"), "normalises the block's output with norm1"),
    (block_pre(swap_norms=True), "norm1 and norm2 are swapped"),
    (block_pre(ff=False), "the feed-forward sublayer is missing"),
    (block_pre(act=F.gelu), "the activation is GELU"),
    (block_pre(plain_norm=True), "without the LayerNorms' weight and bias"),
    (block_pre(bias=False), "leaves out the Linear layers' biases"),
    (block_pre(float_ones=True), "the float mask holds 1s"),
    (block_pre(kv_raw=True), "the keys and values read x unnormalised"),
    (block_weight_not_transposed, "a Linear's weight is (out, in)"),
    (block_linears_swapped, "linear1 (E -> F) first"),
    (lambda x, blk: blk.self_attn(blk.norm1(x), is_causal=True), "attention sublayer's output"),
    (block_pre(mask=lambda N: torch.ones(N, N, dtype=torch.bool).tril(-1)), "blocks the past"),
    (block_pre(mask=lambda N: torch.ones(N, N, dtype=torch.bool).triu(0)), "also blocks the diag"),
    (lambda x, blk: block_from_parts(x, blk).numpy(), "it calls .numpy() on a tensor"),
]


@pytest.mark.parametrize("fn", BLOCK_RIGHT)
def test_check_pre_ln_block_accepts(fn, capsys):
    assert verdict(check_pre_ln_block, fn, capsys) == (True, "✓ pre_ln_block: correct")


def test_check_pre_ln_block_accepts_numpy_with_a_note(capsys):
    passed, line = verdict(
        check_pre_ln_block, lambda x, blk: block_from_parts(x, blk).detach().numpy(), capsys
    )
    assert passed and line.startswith("✓ pre_ln_block: correct (") and "numpy" in line


@pytest.mark.parametrize(("fn", "words"), BLOCK_WRONG)
def test_check_pre_ln_block_names_the_mistake(fn, words, capsys):
    passed, line = verdict(check_pre_ln_block, fn, capsys)
    assert not passed and line.startswith("✗ pre_ln_block: ") and words in line, line


def test_block_mistakes_are_distinguishable():
    for case in _BLOCK_CASES:
        x, blk = _block_inputs(*case)
        with torch.no_grad():
            right = blk(x, is_causal=True)[0].numpy()
        outputs = [*_block_mistakes(x, blk).values(), right]
        for i in range(len(outputs)):
            for j in range(i + 1, len(outputs)):
                assert not np.allclose(outputs[i], outputs[j], rtol=1e-3, atol=1e-3), (i, j)


def test_catalogues_are_complete():
    for wrong, right in (
        (TO_TORCH_WRONG, TO_TORCH_RIGHT),
        (CAUSAL_WRONG, CAUSAL_RIGHT),
        (KEY_PADDING_WRONG, KEY_PADDING_RIGHT),
        (FORWARD_WRONG, FORWARD_RIGHT),
        (BLOCK_WRONG, BLOCK_RIGHT),
    ):
        assert len(wrong) >= 6 and len(right) >= 2


# answers that call the library function the exercise asks for -----------------------------------

LIBRARY = "the exercise asks you to write it yourself"


def test_the_library_forward_is_rejected(capsys):
    passed, line = verdict(check_attention_forward, forward_through_the_module, capsys)
    assert not passed and "it calls mha_lib.pytorch.MultiHeadAttention" in line, line
    assert LIBRARY in line


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, blk: blk(x, is_causal=True),  # the block itself: (output, None)
        lambda x, blk: blk.forward(x, is_causal=True)[0],
        lambda x, blk: mha_lib.block.TransformerBlock.forward(blk, x, is_causal=True),
        functools.partial(lambda x, blk, causal: blk(x, is_causal=causal), causal=True),
    ],
)
def test_the_library_block_is_rejected(fn, capsys):
    passed, line = verdict(check_pre_ln_block, fn, capsys)
    assert not passed and "it calls blk(x) (TransformerBlock's forward)" in line, line
    assert LIBRARY in line


def test_a_wrong_library_block_keeps_its_diagnosis(capsys):
    passed, line = verdict(check_pre_ln_block, lambda x, blk: blk(x), capsys)
    assert not passed and "no causal mask" in line and "TransformerBlock's forward" in line


def test_the_watch_on_the_block_is_undone_even_when_the_answer_raises(capsys):
    forward = mha_lib.block.TransformerBlock.forward

    def calls_then_raises(x, blk):
        blk(x, is_causal=True)
        raise RuntimeError("boom")

    passed, line = verdict(check_pre_ln_block, calls_then_raises, capsys)
    assert not passed and "boom" in line and "TransformerBlock's forward" in line, line
    assert mha_lib.block.TransformerBlock.forward is forward
    assert verdict(check_pre_ln_block, block_from_parts, capsys) == (
        True,
        "✓ pre_ln_block: correct",
    )
