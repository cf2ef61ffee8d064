"""Tests of `mha_lib.pytorch`: equality with `torch.nn.MultiheadAttention` (outputs,
weights and gradients, weights copied both ways), with the numpy core, gradcheck,
the fully-masked-row rule, bad inputs, low precision and the GPU (skipped without one).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mha_lib
from mha_lib import pytorch as mha_torch
from mha_lib.pytorch import MultiHeadAttention, explicit_attention
from mha_lib.runtime import pick_device
from mha_lib.testing import assert_close

E, H = 8, 2  # embed_dim, num_heads (head_dim 4)
TOL = {
    torch.float32: {"rtol": 1e-5, "atol": 1e-5},
    torch.float64: {"rtol": 1e-10, "atol": 1e-10},
}
DTYPES = [torch.float32, torch.float64]
HAS_CUDA = torch.cuda.is_available()


# ----------------------------------------------------------------------------
# helpers


def make_pair(direction: str, dtype=torch.float32, seed: int = 0, **kwargs):
    """(reference nn.MultiheadAttention, MultiHeadAttention) holding the same weights.

    direction "from_torch": build the torch module, copy with from_torch;
    "to_torch": build ours, copy with to_torch. Biases are made non-zero so
    that they are tested too. Both are in training mode (dropout 0), so torch
    takes its general (non-fast) path.
    """
    kwargs.setdefault("batch_first", True)
    torch.manual_seed(seed)
    if direction == "from_torch":
        ref = nn.MultiheadAttention(E, H, dtype=dtype, **kwargs)
        _randomise_biases(ref)
        ours = MultiHeadAttention.from_torch(ref)
    else:
        ours = MultiHeadAttention(E, H, dtype=dtype, **kwargs)
        _randomise_biases(ours)
        ref = ours.to_torch()
    return ref, ours


def _randomise_biases(m):
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "bias" in name:
                p.normal_()


def _leaf(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=dtype).requires_grad_()


def run_both(ref, ours, inputs, **kwargs):
    """Forward and backward through both modules; return both (out, weights, grads)."""
    results = []
    for m in (ref, ours):
        leaves = [x.detach().clone().requires_grad_() for x in inputs]
        q, k, v = _qkv(leaves, inputs)
        out, w = m(q, k, v, **kwargs)
        g = torch.Generator().manual_seed(123)
        cot = torch.randn(out.shape, generator=g, dtype=out.dtype)  # cotangent
        m.zero_grad()
        (out * cot).sum().backward()
        grads = {n: p.grad.clone() for n, p in m.named_parameters()}
        grads.update({f"input{i}": x.grad.clone() for i, x in enumerate(leaves)})
        results.append((out.detach(), None if w is None else w.detach(), grads))
    return results


def _qkv(leaves, inputs):
    """Rebuild query/key/value from the leaves, keeping `key is value` etc. as in inputs."""
    if len(inputs) == 1:
        return leaves[0], leaves[0], leaves[0]
    if len(inputs) == 2:
        return leaves[0], leaves[1], leaves[1]
    return tuple(leaves)


def assert_same(res_ref, res_ours, dtype, rows=None):
    """Outputs, weights and gradients agree; `rows` selects the compared output rows."""
    (o1, w1, g1), (o2, w2, g2) = res_ref, res_ours
    tol = TOL[dtype]
    assert o1.shape == o2.shape
    sel = (lambda t: t) if rows is None else rows
    torch.testing.assert_close(sel(o2), sel(o1), **tol)
    assert (w1 is None) == (w2 is None)
    if w1 is not None:
        assert w1.shape == w2.shape
        torch.testing.assert_close(w2, w1, **tol)
    assert g1.keys() == g2.keys()
    for name in g1:
        torch.testing.assert_close(g2[name], g1[name], **tol, msg=f"gradient of {name}")


# ----------------------------------------------------------------------------
# equality with nn.MultiheadAttention


@pytest.mark.parametrize("direction", ["from_torch", "to_torch"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B", [1, 3])
@pytest.mark.parametrize("need_weights,average", [(False, True), (True, True), (True, False)])
def test_self_attention_matches_torch(direction, dtype, B, need_weights, average):
    ref, ours = make_pair(direction, dtype)
    x = _leaf((B, 5, E), dtype, 1)  # (B, L, E)
    res = run_both(ref, ours, [x], need_weights=need_weights, average_attn_weights=average)
    assert_same(*res, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shared_kv", [True, False])
def test_cross_attention_different_lengths(dtype, shared_kv):
    ref, ours = make_pair("from_torch", dtype)
    q = _leaf((2, 5, E), dtype, 1)  # (B, L, E)
    k = _leaf((2, 7, E), dtype, 2)  # (B, S, E)
    v = _leaf((2, 7, E), dtype, 3)  # (B, S, E)
    inputs = [q, k] if shared_kv else [q, k, v]
    for need_weights in (False, True):
        assert_same(*run_both(ref, ours, inputs, need_weights=need_weights), dtype)


def _padding(B, S, lengths):
    """bool (B, S), True on padding keys (nn.MultiheadAttention's convention)."""
    return torch.arange(S)[None, :] >= torch.tensor(lengths)[:, None]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("need_weights", [False, True])
def test_key_padding_mask(dtype, kind, need_weights):
    ref, ours = make_pair("from_torch", dtype)
    x = _leaf((3, 6, E), dtype, 1)
    kpm = _padding(3, 6, [6, 4, 1])  # (B, S)
    if kind == "float":
        kpm = torch.zeros(3, 6, dtype=dtype).masked_fill(kpm, float("-inf"))
    assert_same(*run_both(ref, ours, [x], key_padding_mask=kpm, need_weights=need_weights), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["bool2d", "float2d", "bool3d", "float3d_finite"])
@pytest.mark.parametrize("need_weights", [False, True])
def test_attn_mask(dtype, kind, need_weights):
    B, L, S = 2, 5, 7
    ref, ours = make_pair("from_torch", dtype)
    q, kv = _leaf((B, L, E), dtype, 1), _leaf((B, S, E), dtype, 2)
    g = torch.Generator().manual_seed(5)
    blocked = torch.rand(L, S, generator=g) < 0.4  # (L, S), True = may NOT attend
    blocked[:, 0] = False  # no fully masked row here (see the dedicated test)
    if kind == "bool2d":
        mask = blocked
    elif kind == "float2d":
        mask = torch.zeros(L, S, dtype=dtype).masked_fill(blocked, float("-inf"))
    elif kind == "bool3d":
        mask = torch.rand(B * H, L, S, generator=g) < 0.4  # (B*h, L, S)
        mask[..., 0] = False
    else:  # any additive bias, e.g. a relative-position bias
        mask = torch.randn(B * H, L, S, generator=g, dtype=dtype)
    res = run_both(ref, ours, [q, kv], attn_mask=mask, need_weights=need_weights)
    assert_same(*res, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_kpm", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_is_causal_with_mask_hint(dtype, with_kpm, need_weights):
    """nn.MultiheadAttention needs attn_mask as a hint for is_causal; both agree."""
    ref, ours = make_pair("from_torch", dtype)
    x = _leaf((2, 6, E), dtype, 1)
    causal = torch.ones(6, 6, dtype=torch.bool).triu(1)  # True above the diagonal
    kpm = _padding(2, 6, [6, 3]) if with_kpm else None
    res = run_both(
        ref,
        ours,
        [x],
        attn_mask=causal,
        is_causal=True,
        key_padding_mask=kpm,
        need_weights=need_weights,
    )
    assert_same(*res, dtype)


def test_is_causal_without_mask_builds_it():
    """Where nn.MultiheadAttention raises, this module applies the causal mask itself."""
    ref, ours = make_pair("from_torch", torch.float64)
    x = _leaf((2, 6, E), torch.float64, 1)
    causal = torch.ones(6, 6, dtype=torch.bool).triu(1)
    with pytest.raises(RuntimeError, match="Need attn_mask"):
        ref(x, x, x, is_causal=True)
    expected, w_ref = ref(x, x, x, attn_mask=causal)
    for need_weights in (False, True):
        out, w = ours(x, is_causal=True, need_weights=need_weights)
        torch.testing.assert_close(out, expected, **TOL[torch.float64])
        if need_weights:
            torch.testing.assert_close(w, w_ref, **TOL[torch.float64])
    out, _ = ours(x, is_causal=True, key_padding_mask=_padding(2, 6, [6, 4]))
    expected, _ = ref(x, x, x, attn_mask=causal, key_padding_mask=_padding(2, 6, [6, 4]))
    torch.testing.assert_close(out, expected, **TOL[torch.float64])


@pytest.mark.parametrize("direction", ["from_torch", "to_torch"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [True, False])
def test_kdim_vdim_and_bias(direction, dtype, bias):
    ref, ours = make_pair(direction, dtype, kdim=6, vdim=3, bias=bias)
    assert ours.in_proj_weight is None and ours.k_proj_weight.shape == (E, 6)
    q, k, v = _leaf((2, 5, E), dtype, 1), _leaf((2, 4, 6), dtype, 2), _leaf((2, 4, 3), dtype, 3)
    kpm = _padding(2, 4, [4, 2])
    for need_weights in (False, True):
        res = run_both(ref, ours, [q, k, v], key_padding_mask=kpm, need_weights=need_weights)
        assert_same(*res, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_bias_off_packed(dtype):
    ref, ours = make_pair("to_torch", dtype, bias=False)
    assert ours.in_proj_bias is None and ours.out_proj.bias is None
    assert_same(*run_both(ref, ours, [_leaf((2, 5, E), dtype, 1)], need_weights=True), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("need_weights,average", [(False, True), (True, True), (True, False)])
def test_unbatched_input(dtype, need_weights, average):
    ref, ours = make_pair("from_torch", dtype)
    q, kv = _leaf((5, E), dtype, 1), _leaf((7, E), dtype, 2)  # (L, E), (S, E)
    kpm = torch.zeros(7, dtype=dtype)  # (S,), float like attn_mask
    kpm[5:] = float("-inf")
    mask = torch.zeros(H, 5, 7, dtype=dtype)  # (h, L, S), float
    mask[0, :, 3] = float("-inf")
    res = run_both(
        ref,
        ours,
        [q, kv],
        key_padding_mask=kpm,
        attn_mask=mask,
        need_weights=need_weights,
        average_attn_weights=average,
    )
    assert res[1][0].shape == (5, E)
    assert_same(*res, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_first_false(dtype):
    ref, ours = make_pair("from_torch", dtype, batch_first=False)
    assert not ours.batch_first
    x = _leaf((5, 3, E), dtype, 1)  # (L, B, E)
    res = run_both(ref, ours, [x], key_padding_mask=_padding(3, 5, [5, 2, 4]), need_weights=True)
    assert res[1][0].shape == (5, 3, E)
    assert_same(*res, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_default_constructor_is_a_drop_in_for_torchs(dtype):
    """Under both constructors' defaults (batch_first=False): (L, N, E) in, the same results."""
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(E, H, dtype=dtype)
    _randomise_biases(ref)
    ours = MultiHeadAttention(E, H, dtype=dtype)
    ours.load_state_dict(ref.state_dict())  # the same weights
    assert ours.batch_first is False and ref.batch_first is False
    x = _leaf((5, 3, E), dtype, 1)  # (L, N, E): 5 tokens, 3 sequences
    res = run_both(ref, ours, [x], need_weights=True)
    assert res[1][0].shape == (5, 3, E) and res[1][1].shape == (3, 5, 5)
    assert_same(*res, dtype)
    # torch's default need_weights=True against ours (False): the same output
    with torch.no_grad():
        torch.testing.assert_close(ours(x, x, x)[0], ref(x, x, x)[0], **TOL[dtype])
        # the same weights read batch first would mix the sequences: a different result
        ours.batch_first = True
        assert (ours(x, x, x)[0] - ref(x, x, x)[0]).abs().max() > 0.1


def random_configuration(gen: torch.Generator):
    """(constructor kwargs, forward kwargs, (L, S, B)) of one random configuration: odd sizes,
    kdim/vdim often not E, bool or float masks (key 0 never blocked, so no row is fully
    masked), either layout, weights averaged or not, dropout 0."""

    def draw(lo, hi):
        return int(torch.randint(lo, hi + 1, (), generator=gen))

    h, d, B, L, S = draw(1, 4), draw(1, 5), draw(1, 3), draw(1, 6), draw(1, 7)
    E_ = h * d
    config = {
        "embed_dim": E_,
        "num_heads": h,
        "kdim": E_ if draw(0, 1) else draw(1, 9),
        "vdim": E_ if draw(0, 1) else draw(1, 9),
        "bias": bool(draw(0, 1)),
        "batch_first": bool(draw(0, 1)),
    }
    as_float = bool(draw(0, 1))

    def mask(*shape):
        blocked = torch.rand(shape, generator=gen) < 0.4
        blocked[..., 0] = False  # key 0 stays visible to every query
        if not as_float:
            return blocked
        return torch.zeros(shape, dtype=torch.float64).masked_fill(blocked, float("-inf"))

    call = {
        "key_padding_mask": mask(B, S) if draw(0, 1) else None,
        "attn_mask": [None, lambda: mask(L, S), lambda: mask(B * h, L, S)][draw(0, 2)],
        "need_weights": bool(draw(0, 1)),
        "average_attn_weights": bool(draw(0, 1)),
    }
    if call["attn_mask"] is not None:
        call["attn_mask"] = call["attn_mask"]()
    return config, call, (L, S, B)


@pytest.mark.parametrize("seed", range(40))
def test_random_configurations_match_torch(seed):
    """Outputs, weights and gradients equal nn.MultiheadAttention's with the same weights."""
    gen = torch.Generator().manual_seed(seed)
    config, call, (L, S, B) = random_configuration(gen)
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(**config, dropout=0.0, dtype=torch.float64)
    _randomise_biases(ref)
    ours = MultiHeadAttention.from_torch(ref)
    assert ours.batch_first == config["batch_first"]

    def draw(n, width):  # a batch in the configuration's layout
        t = torch.randn(B, n, width, generator=gen, dtype=torch.float64)
        return t if config["batch_first"] else t.transpose(0, 1).contiguous()

    inputs = [draw(L, config["embed_dim"]), draw(S, config["kdim"]), draw(S, config["vdim"])]
    res = run_both(ref, ours, inputs, **call)
    assert_same(*res, torch.float64)
    assert (res[1][1] is None) == (not call["need_weights"])


def test_random_configurations_cover_every_option():
    """The 40 seeds above draw each option both ways."""
    seen = set()
    for seed in range(40):
        config, call, _ = random_configuration(torch.Generator().manual_seed(seed))
        E_ = config["embed_dim"]
        seen |= {
            ("kdim != E", config["kdim"] != E_),
            ("vdim != E", config["vdim"] != E_),
            ("batch_first", config["batch_first"]),
            ("bias", config["bias"]),
            ("padding", call["key_padding_mask"] is not None),
            ("attn_mask 3-D", call["attn_mask"] is not None and call["attn_mask"].dim() == 3),
            ("attn_mask 2-D", call["attn_mask"] is not None and call["attn_mask"].dim() == 2),
            (
                "float masks",
                any(
                    m is not None and m.is_floating_point()
                    for m in (call["key_padding_mask"], call["attn_mask"])
                ),
            ),
            ("need_weights", call["need_weights"]),
            ("average", call["average_attn_weights"]),
            ("odd E", E_ % 2 == 1),
        }
    names = {name for name, _ in seen}
    assert all((name, True) in seen and (name, False) in seen for name in names), sorted(seen)


def test_eval_mode_matches_torch_fast_path():
    """In eval mode without grad, torch takes its native fast path; still equal."""
    ref, ours = make_pair("from_torch")
    ref.eval(), ours.eval()
    x = torch.randn(3, 9, E)
    kpm = _padding(3, 9, [9, 5, 2])
    with torch.inference_mode():
        for need_weights in (False, True):
            expected, _ = ref(x, x, x, key_padding_mask=kpm, need_weights=need_weights)
            out, _ = ours(x, key_padding_mask=kpm, need_weights=need_weights)
            torch.testing.assert_close(out, expected, **TOL[torch.float32])


@pytest.mark.parametrize("need_weights", [False, True])
def test_dropout_matches_torch_with_same_seed(need_weights):
    """Dropout draws the same random numbers in the same order as nn.MultiheadAttention."""
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(E, H, dropout=0.3, batch_first=True)
    ours = MultiHeadAttention.from_torch(ref)
    x = torch.randn(2, 6, E)
    torch.manual_seed(7)
    expected, w_ref = ref(x, x, x, need_weights=need_weights)
    torch.manual_seed(7)
    out, w = ours(x, need_weights=need_weights)
    torch.testing.assert_close(out, expected)
    if need_weights:
        torch.testing.assert_close(w, w_ref)
    ours.eval()
    assert torch.equal(ours(x)[0], ours(x)[0]), "no dropout in eval mode"


def test_same_seed_same_initial_weights():
    torch.manual_seed(3)
    ref = nn.MultiheadAttention(E, H, batch_first=True, kdim=5, vdim=7)
    torch.manual_seed(3)
    ours = MultiHeadAttention(E, H, kdim=5, vdim=7, batch_first=True)
    assert ref.state_dict().keys() == ours.state_dict().keys()
    for name, p in ref.state_dict().items():
        assert torch.equal(p, ours.state_dict()[name]), name


def test_round_trip_is_exact_and_keeps_mode():
    ref, ours = make_pair("from_torch", torch.float64)
    back = ours.to_torch()
    for name, p in ref.state_dict().items():
        assert torch.equal(back.state_dict()[name], p)
    assert back.training and MultiHeadAttention.from_torch(ref.eval()).training is False
    assert back.batch_first and back.in_proj_weight.dtype == torch.float64


def test_drop_in_inside_transformer_encoder_layer():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, H, dim_feedforward=16, dropout=0.0, batch_first=True)
    x = torch.randn(2, 5, E)
    kpm = _padding(2, 5, [5, 3])
    expected = layer(x, src_key_padding_mask=kpm)
    layer.self_attn = MultiHeadAttention.from_torch(layer.self_attn)
    torch.testing.assert_close(layer(x, src_key_padding_mask=kpm), expected)


def test_weights_materialised_only_when_asked(monkeypatch):
    ours = MultiHeadAttention(E, H, batch_first=True)
    x = torch.randn(2, 5, E)
    expected, _ = ours(x, need_weights=True)
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def counting_sdpa(*args, **kwargs):
        calls.append(1)
        return sdpa(*args, **kwargs)

    def forbidden(*args, **kwargs):
        raise AssertionError("the explicit (L, S) path was used")

    monkeypatch.setattr(mha_torch, "explicit_attention", forbidden)
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting_sdpa)
    out, w = ours(x)
    assert w is None and calls == [1]
    torch.testing.assert_close(out, expected)


# ----------------------------------------------------------------------------
# fully masked rows: one rule, never NaN


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("where", ["key_padding_mask", "attn_mask", "both"])
def test_fully_masked_rows_give_bias_not_nan(need_weights, where):
    """A query that may attend to no key: zero weights and attention output, out = out_proj.bias."""
    ref, ours = make_pair("from_torch", torch.float64)
    x = _leaf((2, 4, E), torch.float64, 1)
    kpm = _padding(2, 4, [4, 0]) if where != "attn_mask" else None  # sequence 1: all padding
    am = None
    if where != "key_padding_mask":
        am = torch.zeros(4, 4, dtype=torch.bool)
        am[2] = True  # query 2 blocked everywhere
    masked = torch.zeros(2, 4, dtype=torch.bool)  # (B, L): fully masked query rows
    if kpm is not None:
        masked[1] = True
    if am is not None:
        masked[:, 2] = True
    out, w = ours(x, key_padding_mask=kpm, attn_mask=am, need_weights=need_weights)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[masked], ours.out_proj.bias.expand(int(masked.sum()), E))
    if need_weights:
        assert (w[masked] == 0).all() and torch.isfinite(w).all()
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in ours.parameters())
    assert torch.isfinite(x.grad).all()
    # the other rows agree with nn.MultiheadAttention (its need_weights=False path
    # also gives zeros there, its need_weights=True path gives NaN)
    expected, _ = ref(x, x, x, key_padding_mask=kpm, attn_mask=am, need_weights=False)
    torch.testing.assert_close(out[~masked], expected[~masked], **TOL[torch.float64])


def test_fully_masked_row_of_one_head_only():
    """A 3-D attn_mask can block a row for one head; that head contributes zeros."""
    ours = MultiHeadAttention(E, H, dtype=torch.float64, batch_first=True)
    x = torch.randn(1, 3, E, dtype=torch.float64)
    am = torch.zeros(H, 3, 3, dtype=torch.bool)
    am[1, 0] = True  # head 1, query 0: nothing to attend to
    for nw in (False, True):
        out, w = ours(x, attn_mask=am, need_weights=nw, average_attn_weights=False)
        assert torch.isfinite(out).all()
    assert (w[0, 1, 0] == 0).all()
    assert abs(w[0, 0, 0].sum().item() - 1.0) < 1e-12


def test_torch_behaviour_on_fully_masked_rows_is_as_documented():
    """The facts behind the docstring: torch 2.13 SDPA gives zeros, MHA's weights path NaN."""
    q = torch.randn(1, 1, 2, 4)
    blocked_row0 = torch.tensor([[False, False], [True, True]])  # SDPA: True = may attend
    out = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=blocked_row0)
    assert (out[0, 0, 0] == 0).all()
    ref = nn.MultiheadAttention(E, H, batch_first=True)
    x = torch.randn(1, 2, E)
    _, w = ref(x, x, x, key_padding_mask=torch.tensor([[True, True]]), need_weights=True)
    assert torch.isnan(w).all()


# ----------------------------------------------------------------------------
# the numpy core


@pytest.mark.parametrize("mask", [None, "causal", "padding"])
def test_matches_numpy_core(mask):
    """Bias off, same weights: torch Linear stores (out, in), the numpy core uses (in, out)."""
    torch.manual_seed(0)
    ours = MultiHeadAttention(E, H, bias=False, dtype=torch.float64, batch_first=True)
    W = ours.in_proj_weight.detach().numpy()  # (3E, E) = [W_q; W_k; W_v] as (out, in)
    W_q, W_k, W_v = W[:E].T, W[E : 2 * E].T, W[2 * E :].T  # each (C, h*d_k)
    W_o = ours.out_proj.weight.detach().numpy().T  # (h*d_v, C)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((3, 6, E))  # (B, N, C)
    np_mask, kwargs = None, {}
    if mask == "causal":
        np_mask = mha_lib.causal_mask(6)  # True = may attend
        kwargs["attn_mask"] = torch.from_numpy(~np_mask)  # True = may NOT attend
    elif mask == "padding":
        np_mask = mha_lib.padding_mask([6, 4, 2], 6)  # (B, 1, 1, N)
        kwargs["key_padding_mask"] = torch.from_numpy(~np_mask[:, 0, 0])  # (B, N)
    expected, w_np = mha_lib.multi_head_attention(
        X, W_q, W_k, W_v, W_o, H, mask=np_mask, return_weights=True
    )
    with torch.no_grad():
        out, w = ours(torch.from_numpy(X), need_weights=True, average_attn_weights=False, **kwargs)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(w.numpy(), w_np, rtol=1e-10, atol=1e-10)


def test_matches_numpy_core_float32_unbatched():
    torch.manual_seed(1)
    ours = MultiHeadAttention(E, H, bias=False)
    W = ours.in_proj_weight.detach().numpy()
    X = np.random.default_rng(1).standard_normal((5, E)).astype(np.float32)  # (N, C)
    expected = mha_lib.multi_head_attention(
        X, W[:E].T, W[E : 2 * E].T, W[2 * E :].T, ours.out_proj.weight.detach().numpy().T, H
    )
    with torch.no_grad():
        out, _ = ours(torch.from_numpy(X))
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------
# gradcheck (float64)


@pytest.mark.parametrize("need_weights", [False, True])
def test_gradcheck_self_attention_with_masks(need_weights):
    torch.manual_seed(0)
    ours = MultiHeadAttention(E, H, dtype=torch.float64, batch_first=True)
    _randomise_biases(ours)
    x = torch.randn(2, 4, E, dtype=torch.float64, requires_grad=True)
    kpm = _padding(2, 4, [4, 2])
    am = torch.ones(4, 4, dtype=torch.bool).triu(1)

    def f(t):
        return ours(t, key_padding_mask=kpm, attn_mask=am, need_weights=need_weights)[0]

    assert torch.autograd.gradcheck(f, (x,))


def test_gradcheck_cross_attention_and_parameters():
    torch.manual_seed(0)
    ours = MultiHeadAttention(E, H, kdim=3, vdim=5, dtype=torch.float64, batch_first=True)
    q = torch.randn(2, 3, E, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 4, 5, dtype=torch.float64, requires_grad=True)
    params = dict(ours.named_parameters())

    def f(q, k, v, *ps):
        new = dict(zip(params, ps))
        return torch.func.functional_call(ours, new, (q, k, v))[0]

    assert torch.autograd.gradcheck(f, (q, k, v, *params.values()))


# ----------------------------------------------------------------------------
# bad inputs: clear errors naming the argument and the shapes


def _x(*shape, dtype=torch.float32):
    return torch.zeros(shape, dtype=dtype)


BAD_CONSTRUCTOR = [
    ((10, 3), {}, ValueError, r"embed_dim = 10 is not divisible by num_heads = 3"),
    ((8, 0), {}, ValueError, r"num_heads must be at least 1; got 0"),
    ((8.0, 2), {}, TypeError, r"embed_dim must be an int; got float"),
    ((8, 2), {"dropout": 1.5}, ValueError, r"dropout must lie in \[0, 1\); got 1.5"),
    ((8, 2), {"kdim": 0}, ValueError, r"kdim must be at least 1"),
    ((8, 2), {"add_bias_kv": True}, NotImplementedError, r"add_bias_kv"),
]


@pytest.mark.parametrize("args,kwargs,exc,match", BAD_CONSTRUCTOR)
def test_bad_constructor_arguments(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        MultiHeadAttention(*args, **kwargs)


BAD_FORWARD = [
    # (description, call, exception, message)
    (
        "4-D query",
        lambda m: m(_x(2, 3, 5, 8)),
        ValueError,
        r"query has shape \(2, 3, 5, 8\); expected \(B, L, E\) or unbatched \(L, E\) "
        r"with E = embed_dim = 8",
    ),
    (
        "query width",
        lambda m: m(_x(2, 5, 7)),
        ValueError,
        r"query has shape \(2, 5, 7\); expected \(B, L, E\) with E = 8",
    ),
    (
        "key rank",
        lambda m: m(_x(2, 5, 8), _x(5, 8)),
        ValueError,
        r"key has shape \(5, 8\); expected \(B, S, kdim\) with kdim = 8",
    ),
    (
        "key width vs kdim",
        lambda m: m(_x(2, 5, 8), _x(2, 4, 6), _x(2, 4, 8)),
        ValueError,
        r"key has shape \(2, 4, 6\); expected \(B, S, kdim\) with kdim = 8",
    ),
    (
        "batch mismatch",
        lambda m: m(_x(2, 5, 8), _x(3, 4, 8)),
        ValueError,
        r"key has batch size 3 but query has batch size 2",
    ),
    (
        "value length",
        lambda m: m(_x(2, 5, 8), _x(2, 4, 8), _x(2, 6, 8)),
        ValueError,
        r"value has shape \(2, 6, 8\).*expected \(B, S, vdim\) = \(2, 4, 8\)",
    ),
    (
        "integer query",
        lambda m: m(torch.zeros(2, 5, 8, dtype=torch.int64)),
        TypeError,
        r"query must be a floating-point tensor; got dtype torch.int64",
    ),
    (
        "numpy query",
        lambda m: m(np.zeros((2, 5, 8))),
        TypeError,
        r"query must be a torch.Tensor; got ndarray",
    ),
    (
        "dtype vs parameters",
        lambda m: m(_x(2, 5, 8, dtype=torch.float64)),
        TypeError,
        r"query has dtype torch.float64 but the module's parameters are torch.float32",
    ),
    (
        "key_padding_mask shape",
        lambda m: m(_x(2, 5, 8), key_padding_mask=torch.zeros(2, 4, dtype=torch.bool)),
        ValueError,
        r"key_padding_mask has shape \(2, 4\); expected \(B, S\) = \(2, 5\)",
    ),
    (
        "unbatched key_padding_mask",
        lambda m: m(_x(5, 8), key_padding_mask=torch.zeros(1, 5, dtype=torch.bool)),
        ValueError,
        r"key_padding_mask has shape \(1, 5\); expected \(S,\) = \(5,\)",
    ),
    (
        "key_padding_mask dtype",
        lambda m: m(_x(2, 5, 8), key_padding_mask=torch.zeros(2, 5, dtype=torch.int64)),
        TypeError,
        r"key_padding_mask must be bool \(True = may NOT attend\) or floating point",
    ),
    (
        "attn_mask 2-D shape",
        lambda m: m(_x(2, 5, 8), _x(2, 4, 8), attn_mask=torch.zeros(5, 5, dtype=torch.bool)),
        ValueError,
        r"attn_mask has shape \(5, 5\); expected \(L, S\) = \(5, 4\) or "
        r"\(B\*h, L, S\) = \(4, 5, 4\)",
    ),
    (
        "attn_mask 3-D heads",
        lambda m: m(_x(5, 8), attn_mask=torch.zeros(3, 5, 5)),
        ValueError,
        r"attn_mask has shape \(3, 5, 5\); expected \(L, S\) = \(5, 5\) or "
        r"\(h, L, S\) = \(2, 5, 5\)",
    ),
    (
        "attn_mask dtype",
        lambda m: m(_x(2, 5, 8), attn_mask=torch.zeros(5, 5, dtype=torch.int32)),
        TypeError,
        r"attn_mask must be bool \(True = may NOT attend\) or floating point",
    ),
    (
        "attn_mask not a tensor",
        lambda m: m(_x(2, 5, 8), attn_mask=np.zeros((5, 5), dtype=bool)),
        TypeError,
        r"attn_mask must be a torch.Tensor or None; got ndarray",
    ),
]


@pytest.mark.parametrize("what,call,exc,match", BAD_FORWARD, ids=[c[0] for c in BAD_FORWARD])
def test_bad_forward_inputs(what, call, exc, match):
    m = MultiHeadAttention(E, H, batch_first=True)
    with pytest.raises(exc, match=match):
        call(m)


def test_from_torch_refuses_what_it_cannot_copy():
    with pytest.raises(TypeError, match=r"m must be a torch\.nn\.MultiheadAttention; got Linear"):
        MultiHeadAttention.from_torch(nn.Linear(2, 2))
    with pytest.raises(NotImplementedError, match="add_bias_kv or add_zero_attn"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(E, H, add_bias_kv=True))


# ----------------------------------------------------------------------------
# devices and precisions


def test_the_test_command_pins_the_notebooks_to_the_cpu():
    # the root conftest.py sets it before any notebook kernel starts; kernels inherit it
    assert os.environ.get("MHA_LIB_DEVICE") == "cpu"


def _supports(device, dtype) -> bool:
    try:
        x = torch.ones(2, 2, device=device, dtype=dtype)
        torch.nn.functional.scaled_dot_product_attention(x[None], x[None], x[None])
        return True
    except (RuntimeError, TypeError):
        return False


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_smoke(dtype):
    device = pick_device()
    if not _supports(device, dtype):
        pytest.skip(f"{dtype} not supported on {device}")
    torch.manual_seed(0)
    ours = MultiHeadAttention(E, H, batch_first=True)
    x = torch.randn(2, 6, E)
    kpm = _padding(2, 6, [6, 3])
    expected, _ = ours(x, key_padding_mask=kpm)
    low = MultiHeadAttention.from_torch(ours.to_torch()).to(device=device, dtype=dtype)
    for need_weights in (False, True):
        out, _ = low(
            x.to(device, dtype), key_padding_mask=kpm.to(device), need_weights=need_weights
        )
        assert out.dtype == dtype and torch.isfinite(out).all()
        torch.testing.assert_close(out.float().cpu(), expected.detach(), rtol=5e-2, atol=5e-2)


def test_autocast_like_torch():
    """Under autocast, float32 parameters meet bfloat16 activations, as in nn.MultiheadAttention."""
    device = pick_device()
    if not _supports(device, torch.bfloat16):
        pytest.skip(f"bfloat16 not supported on {device}")
    ref, ours = make_pair("from_torch")
    ref, ours = ref.to(device), ours.to(device)
    x = torch.randn(2, 5, E, device=device)
    kpm = _padding(2, 5, [5, 3]).to(device)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        for need_weights in (False, True):
            expected, _ = ref(x, x, x, key_padding_mask=kpm, need_weights=need_weights)
            out, _ = ours(x.bfloat16(), key_padding_mask=kpm, need_weights=need_weights)
            assert out.dtype == expected.dtype == torch.bfloat16
            torch.testing.assert_close(out, expected, rtol=2e-2, atol=2e-2)


# ----------------------------------------------------------------------------
# packaging


def test_import_mha_lib_does_not_import_torch():
    code = (
        "import sys, mha_lib, mha_lib.exercises; "
        "assert 'torch' not in sys.modules, 'import mha_lib pulled in torch'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ----------------------------------------------------------------------------
# head_mask: removing or scaling single heads (ablation, notebooks 05 and 06)


@pytest.mark.parametrize("need_weights", [False, True])
def test_head_mask_zero_removes_exactly_that_heads_columns(need_weights):
    torch.manual_seed(0)
    m = MultiHeadAttention(E, H, dtype=torch.float64, batch_first=True)
    x = torch.randn(3, 5, E, dtype=torch.float64)
    out, w = m(x, need_weights=need_weights, average_attn_weights=False)
    hm = torch.tensor([1.0, 0.0], dtype=torch.float64)
    out_ablated, w_ablated = m(
        x, need_weights=need_weights, average_attn_weights=False, head_mask=hm
    )
    # by hand: the concatenated heads with head 1's block zeroed, then W_o
    q, k, v = m.project(x)  # (B, h, N, d)
    heads = torch.softmax(q @ k.transpose(-2, -1) / (E // H) ** 0.5, dim=-1) @ v
    heads[:, 1] = 0.0
    by_hand = m.out_proj(heads.transpose(1, 2).reshape(3, 5, E))
    torch.testing.assert_close(out_ablated, by_hand)
    assert not torch.allclose(out_ablated, out)
    if need_weights:  # the weights are what the heads computed, not scaled
        torch.testing.assert_close(w_ablated, w)


def test_head_mask_of_ones_changes_nothing_and_per_sequence_masks_apply_per_row():
    torch.manual_seed(0)
    m = MultiHeadAttention(E, H, batch_first=True)
    x = torch.randn(2, 4, E)
    torch.testing.assert_close(m(x, head_mask=torch.ones(H))[0], m(x)[0])
    per_row = torch.tensor([[1.0, 1.0], [0.0, 1.0]])  # (B, h): ablate head 0 of sequence 1 only
    out = m(x, head_mask=per_row)[0]
    torch.testing.assert_close(out[0], m(x)[0][0])
    torch.testing.assert_close(out[1], m(x, head_mask=torch.tensor([0.0, 1.0]))[0][1])


def test_head_mask_gradients_flow_to_the_mask():
    torch.manual_seed(0)
    m = MultiHeadAttention(E, H, dtype=torch.float64, batch_first=True)
    x = torch.randn(2, 4, E, dtype=torch.float64)
    hm = torch.ones(H, dtype=torch.float64, requires_grad=True)
    m(x, head_mask=hm)[0].sum().backward()
    assert hm.grad is not None and hm.grad.shape == (H,)


@pytest.mark.parametrize(
    "head_mask,exc,match",
    [
        (torch.ones(3), ValueError, r"head_mask has shape \(3,\); expected \(h,\) = \(2,\)"),
        (torch.ones(2, 2, 2), ValueError, r"or \(B, h\) = \(4, 2\)"),
        (torch.ones(2, dtype=torch.bool), TypeError, r"head_mask must be a floating-point"),
        ([1.0, 0.0], TypeError, r"got list"),
    ],
)
def test_bad_head_mask(head_mask, exc, match):
    m = MultiHeadAttention(E, H, batch_first=True)
    with pytest.raises(exc, match=match):
        m(_x(4, 5, E), head_mask=head_mask)


# ----------------------------------------------------------------------------
# explicit_attention: the algorithm, written out


@pytest.mark.parametrize("L, S", [(7, 9), (9, 7), (1, 5), (6, 6)])
def test_explicit_attention_equals_sdpa(L, S):
    g = torch.Generator().manual_seed(L * 10 + S)
    q = torch.randn(2, 3, L, 4, generator=g, dtype=torch.float64)  # (B, h, L, d)
    k = torch.randn(2, 3, S, 4, generator=g, dtype=torch.float64)  # (B, h, S, d)
    v = torch.randn(2, 3, S, 5, generator=g, dtype=torch.float64)  # (B, h, S, d_v)
    mask = torch.randn(2, 1, L, S, generator=g, dtype=torch.float64)  # a float mask, added
    for causal in (False, True):
        out, w = explicit_attention(q, k, v, is_causal=causal)
        assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        assert_close(w.sum(-1), 1.0)
    out, _ = explicit_attention(q, k, v, mask)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_explicit_attention_names_bad_input():
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 6)
    with pytest.raises(
        ValueError, match=r"k has shape \(1, 2, 5, 3\); expected \(\.\.\., S, d\) with d = 4"
    ):
        explicit_attention(q, torch.randn(1, 2, 5, 3), v)
    with pytest.raises(
        ValueError, match=r"v has shape \(1, 2, 4, 6\); expected \(\.\.\., S, d_v\) with S = 5"
    ):
        explicit_attention(q, k, torch.randn(1, 2, 4, 6))
    with pytest.raises(TypeError, match="q must be a floating-point tensor"):
        explicit_attention(torch.ones(1, 2, 3, 4, dtype=torch.long), k, v)
    with pytest.raises(ValueError, match=r"v has shape \(5,\)"):
        explicit_attention(q, k, torch.randn(5))


def test_project_is_what_the_heads_attend_with():
    """`project`, public for the measures that read q and k (notebook 05's positional scores):
    the forward pass is softmax(q kᵀ/√d) v of its q, k, v, merged and projected by W_o."""
    torch.manual_seed(0)
    m = MultiHeadAttention(E, H, dtype=torch.float64, batch_first=True, bias=True)
    x = torch.randn(3, 5, E, dtype=torch.float64)
    q, k, v = m.project(x)  # (B, h, N, d)
    assert q.shape == k.shape == v.shape == (3, H, 5, E // H)
    for got, want in zip(m.project(x, x, x), (q, k, v)):
        assert_close(got, want, rtol=0, atol=0)
    heads = torch.softmax(q @ k.transpose(-2, -1) / (E // H) ** 0.5, dim=-1) @ v
    by_hand = m.out_proj(heads.transpose(1, 2).reshape(3, 5, E))
    assert_close(m(x)[0], by_hand, rtol=0, atol=1e-12)
