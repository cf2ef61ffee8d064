"""mha_lib.linear_attention.update_rules: linear attention's two forms equal; the delta rule and the
gated delta rule equal their direct token-by-token forms and transformers' reference functions
(chunked and recurrent) on odd lengths, chunk sizes and head counts, with and without an initial
state, in float32 and float64; bad input refused with its shape or value named.

transformers computes its rules in float32 whatever the input dtype, so in float64 it agrees with
ours to float32's precision (relative to the output's scale), not to float64's; our own forms
agree with each other to float64's.
"""

import importlib.util
import itertools

import pytest
import torch

from mha_lib.linear_attention.update_rules import (
    delta_rule,
    gated_delta_recurrence,
    gated_delta_rule,
    gated_delta_step,
    linear_attention,
    linear_attention_recurrence,
)
from tests.linear_attention.linear_inputs import (
    DTYPES,
    assert_near,
    reference,
    rule_inputs,
    to_hf,
)

needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers is not installed"
)
OURS = {torch.float32: 1e-5, torch.float64: 1e-12}  # ours against ours, relative to max |o|
HF = 1e-5  # against transformers, which computes in float32


# --- linear attention ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("N", [1, 7, 40])
def test_linear_attention_parallel_form_equals_its_recurrence(N, dtype):
    q, k, v, *_ = rule_inputs(2, 3, N, 5, 4, seed=N, dtype=dtype)
    o = linear_attention(q, k, v)  # (B, h, N, d_v)
    o_rec, S = linear_attention_recurrence(q, k, v)
    assert_near(o_rec, o, OURS[dtype])
    # the final state is the sum of every k_j v_jᵀ
    assert_near(S, torch.einsum("bhnk,bhnv->bhkv", k, v), OURS[dtype])


def test_linear_attention_is_the_masked_score_matrix_times_the_values():
    q, k, v, *_ = rule_inputs(1, 2, 6, 4, 3, seed=0, dtype=torch.float64)
    o = linear_attention(q, k, v)
    for i in range(6):  # o_i = Σ_{j≤i} (q_i·k_j / √d_k) v_j, written out
        expected = sum(
            (q[:, :, i] * k[:, :, j]).sum(-1, keepdim=True) / 2 * v[:, :, j] for j in range(i + 1)
        )
        assert_near(o[:, :, i], expected, 1e-14)


@pytest.mark.parametrize("chunk_size", [1, 4, 64])
def test_linear_attention_is_the_gated_rule_without_erase_decay_or_beta(chunk_size):
    q, k, v, g, beta, S0 = rule_inputs(2, 3, 13, 5, 4, seed=1, dtype=torch.float64, state=True)
    zeros, ones = torch.zeros_like(g), torch.ones_like(beta)
    o = linear_attention(q, k, v)
    o_chunked, S = gated_delta_rule(q, k, v, zeros, ones, chunk_size, erase=False)
    o_steps, S_steps = gated_delta_recurrence(q, k, v, zeros, ones, erase=False)
    assert_near(o_chunked, o, 1e-12)
    assert_near(o_steps, o, 1e-12)
    assert_near(S, S_steps, 1e-12)
    # with an initial state: the state's read, q_t·S_0 / √d_k, added to every output
    o_rec, S_rec = linear_attention_recurrence(q, k, v, S0)
    o_gated, S_gated = gated_delta_rule(q, k, v, zeros, ones, chunk_size, S0, erase=False)
    assert_near(o_rec, o + q @ S0 / 5**0.5, 1e-12)
    assert_near(o_gated, o_rec, 1e-12)
    assert_near(S_gated, S_rec, 1e-12)


@pytest.mark.parametrize("chunk_size", [1, 5, 64])
def test_without_erase_the_gated_rule_is_decayed_linear_attention(chunk_size):
    """o_i = Σ_{j≤i} exp(G_i − G_j) (q_i·k_j / √d_k) β_j v_j + exp(G_i) q_i·S_0 / √d_k, with
    G_i = g_1 + ... + g_i: the direct form, one (N, N) decay matrix."""
    q, k, v, g, beta, S0 = rule_inputs(2, 2, 17, 4, 3, seed=2, dtype=torch.float64, state=True)
    G = g.cumsum(-1)  # (B, h, N)
    decay = (G[..., :, None] - G[..., None, :]).exp().tril()  # (B, h, N, N)
    direct = (q @ k.transpose(-1, -2) * decay) @ (beta[..., None] * v) / 2
    direct = direct + G.exp()[..., None] * (q @ S0) / 2
    o, _ = gated_delta_rule(q, k, v, g, beta, chunk_size, S0, erase=False)
    assert_near(o, direct, 1e-12)


# --- the delta rule and the gated delta rule ------------------------------------------------------


def delta_rule_written_out(q, k, v, g, beta, S):
    """The gated delta rule token by token, as its formula reads, one (batch, head) at a time."""
    B, h, N, d_k = q.shape
    o = torch.zeros(B, h, N, v.shape[-1], dtype=q.dtype)
    S = S.clone()
    for b, i, t in itertools.product(range(B), range(h), range(N)):
        kt, vt = k[b, i, t], v[b, i, t]
        S_decayed = g[b, i, t].exp() * S[b, i]  # (d_k, d_v)
        S[b, i] = S_decayed + beta[b, i, t] * torch.outer(kt, vt - S_decayed.T @ kt)
        o[b, i, t] = S[b, i].T @ q[b, i, t] / d_k**0.5
    return o, S


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_gated_rule_equals_its_formula_written_out(dtype):
    q, k, v, g, beta, S0 = rule_inputs(2, 2, 9, 4, 3, seed=3, dtype=dtype, state=True)
    o, S = delta_rule_written_out(q, k, v, g, beta, S0)
    for chunk_size in (1, 4, 64):
        o_c, S_c = gated_delta_rule(q, k, v, g, beta, chunk_size, S0)
        assert_near(o_c, o, OURS[dtype])
        assert_near(S_c, S, OURS[dtype])
    o_r, S_r = gated_delta_recurrence(q, k, v, g, beta, S0)
    assert_near(o_r, o, OURS[dtype])
    assert_near(S_r, S, OURS[dtype])


@pytest.mark.parametrize("state", [False, True])
def test_the_delta_rule_is_the_gated_rule_without_decay(state):
    q, k, v, _, beta, S0 = rule_inputs(2, 3, 21, 6, 5, seed=4, dtype=torch.float64, state=state)
    zeros = torch.zeros_like(beta)
    o, S = delta_rule_written_out(
        q, k, v, zeros, beta, S0 if state else torch.zeros(2, 3, 6, 5, dtype=torch.float64)
    )
    o_d, S_d = delta_rule(q, k, v, beta, chunk_size=8, initial_state=S0)
    assert_near(o_d, o, 1e-12)
    assert_near(S_d, S, 1e-12)


def test_a_delta_rule_write_is_one_gradient_step_on_the_squared_error():
    """S + β k (v − Sᵀk)ᵀ = S − β ∇_S ½‖Sᵀk − v‖²; with β = 1 and a unit key, afterwards Sᵀk = v."""
    gen = torch.Generator().manual_seed(5)
    S = torch.randn(1, 1, 6, 4, generator=gen, dtype=torch.float64)
    k = torch.nn.functional.normalize(
        torch.randn(1, 1, 6, generator=gen, dtype=torch.float64), dim=-1
    )
    v = torch.randn(1, 1, 4, generator=gen, dtype=torch.float64)
    q = torch.zeros_like(k)
    beta = torch.full((1, 1), 0.3, dtype=torch.float64)
    S_leaf = S.clone().requires_grad_()
    (0.5 * ((S_leaf[0, 0].T @ k[0, 0] - v[0, 0]) ** 2).sum()).backward()
    _, S_new = gated_delta_step(S, q, k, v, torch.zeros_like(beta), beta)
    assert_near(S_new, S - 0.3 * S_leaf.grad, 1e-14)
    _, S_one = gated_delta_step(S, q, k, v, torch.zeros_like(beta), torch.ones_like(beta))
    assert_near(S_one[0, 0].T @ k[0, 0], v[0, 0], 1e-14)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("N, chunk_size", [(1, 64), (7, 3), (64, 16), (67, 16), (130, 64)])
def test_chunked_equals_step_by_step(N, chunk_size, dtype):
    q, k, v, g, beta, S0 = rule_inputs(2, 3, N, 8, 6, seed=N, dtype=dtype, state=True)
    o_c, S_c = gated_delta_rule(q, k, v, g, beta, chunk_size, S0)
    o_r, S_r = gated_delta_recurrence(q, k, v, g, beta, S0)
    assert_near(o_c, o_r, OURS[dtype])
    assert_near(S_c, S_r, OURS[dtype])


@pytest.mark.parametrize("erase", [True, False])
def test_chunked_gradients_equal_step_by_step_gradients(erase):
    """Training differentiates the chunked form: its gradients with respect to every input
    (the initial state too) are the recurrence's."""
    inputs = rule_inputs(2, 3, 37, 8, 6, seed=9, dtype=torch.float64, state=True)
    grads = []
    for rule in (
        lambda q, k, v, g, beta, S0: gated_delta_rule(q, k, v, g, beta, 8, S0, erase=erase),
        lambda q, k, v, g, beta, S0: gated_delta_recurrence(q, k, v, g, beta, S0, erase=erase),
    ):
        xs = [x.clone().requires_grad_() for x in inputs]
        o, S = rule(*xs)
        (o.sin().sum() + S.cos().sum()).backward()
        grads.append([x.grad for x in xs])
    for chunked, steps in zip(*grads, strict=True):
        assert_near(chunked, steps, 1e-12)


def test_the_recurrence_is_the_public_step_token_after_token():
    q, k, v, g, beta, S = rule_inputs(2, 2, 11, 4, 3, seed=6, dtype=torch.float64, state=True)
    o_r, S_r = gated_delta_recurrence(q, k, v, g, beta, S)
    for t in range(11):
        o_t, S = gated_delta_step(S, q[:, :, t], k[:, :, t], v[:, :, t], g[:, :, t], beta[:, :, t])
        assert torch.equal(o_t, o_r[:, :, t])
    assert torch.equal(S, S_r)


@pytest.mark.parametrize("split", [1, 20, 33])
def test_the_state_carries_a_sequence_across_calls(split):
    q, k, v, g, beta, _ = rule_inputs(1, 2, 50, 8, 8, seed=7, dtype=torch.float64)
    o, S = gated_delta_rule(q, k, v, g, beta, 16)
    first, S_half = gated_delta_rule(*(x[:, :, :split] for x in (q, k, v, g, beta)), 16)
    second, S_end = gated_delta_rule(*(x[:, :, split:] for x in (q, k, v, g, beta)), 16, S_half)
    assert_near(torch.cat((first, second), dim=2), o, 1e-12)
    assert_near(S_end, S, 1e-12)


def test_an_empty_sequence_returns_the_initial_state():
    q, k, v, g, beta, S0 = rule_inputs(1, 2, 0, 4, 3, seed=8, dtype=torch.float32, state=True)
    for o, S in (
        gated_delta_rule(q, k, v, g, beta, 4, S0),
        gated_delta_recurrence(q, k, v, g, beta, S0),
        linear_attention_recurrence(q, k, v, S0),
    ):
        assert o.shape == (1, 2, 0, 3) and torch.equal(S, S0)
    assert linear_attention(q, k, v).shape == (1, 2, 0, 3)


# --- against transformers -----------------------------------------------------------------------


@needs_transformers
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("state", [False, True])
@pytest.mark.parametrize(
    "h, N, chunk_size", [(1, 1, 64), (3, 7, 4), (2, 33, 8), (4, 65, 16), (3, 131, 64)]
)
def test_chunked_rule_equals_transformers(h, N, chunk_size, state, dtype):
    hf_chunk = reference("torch_chunk_gated_delta_rule")
    hf_recurrent = reference("torch_recurrent_gated_delta_rule")
    q, k, v, g, beta, S0 = rule_inputs(2, h, N, 8, 6, seed=10 * h + N, dtype=dtype, state=state)
    o, S = gated_delta_rule(q, k, v, g, beta, chunk_size, S0)
    o_hf, S_hf = hf_chunk(
        *to_hf(q, k, v, g, beta),
        chunk_size,
        S0,
        output_final_state=True,
        use_qk_l2norm_in_kernel=False,
    )
    assert o_hf.dtype == dtype  # computed in float32, returned in the input's dtype
    assert_near(o, o_hf.transpose(1, 2), HF)
    assert_near(S, S_hf.to(dtype), HF)
    o_rec, S_rec = hf_recurrent(*to_hf(q, k, v, g, beta), S0, output_final_state=True)
    assert_near(gated_delta_recurrence(q, k, v, g, beta, S0)[0], o_rec.transpose(1, 2), HF)
    assert_near(S, S_rec.to(dtype), HF)


@needs_transformers
@pytest.mark.parametrize("dtype", DTYPES)
def test_one_step_equals_transformers_recurrent_rule_on_one_token(dtype):
    hf_recurrent = reference("torch_recurrent_gated_delta_rule")
    q, k, v, g, beta, S0 = rule_inputs(3, 4, 1, 16, 8, seed=11, dtype=dtype, state=True)
    o, S = gated_delta_step(S0, q[:, :, 0], k[:, :, 0], v[:, :, 0], g[:, :, 0], beta[:, :, 0])
    o_hf, S_hf = hf_recurrent(*to_hf(q, k, v, g, beta), S0, output_final_state=True)
    assert_near(o, o_hf[:, 0], HF)
    assert_near(S, S_hf.to(dtype), HF)


# --- bad input ----------------------------------------------------------------------------------

q, k, v, g, beta, S0 = rule_inputs(2, 3, 5, 4, 6, seed=12, dtype=torch.float32, state=True)
GOOD = {"q": q, "k": k, "v": v, "g": g, "beta": beta, "chunk_size": 4, "initial_state": S0}
RULE_CASES = [
    # (arguments overriding the good ones, exception, regex the message must match)
    ({"q": q[0]}, ValueError, r"q has shape \(3, 5, 4\); expected \(B, h, N, d_k\)"),
    ({"k": k[:, :, :4]}, ValueError, r"k has shape \(2, 3, 4, 4\); expected .* = \(2, 3, 5, 4\)"),
    (
        {"v": v[:, :2]},
        ValueError,
        r"v has shape \(2, 2, 5, 6\); expected \(B, h, N, d_v\) with "
        r"\(B, h, N\) = \(2, 3, 5\) from q",
    ),
    (
        {"g": g[..., None]},
        ValueError,
        r"g has shape \(2, 3, 5, 1\); expected \(B, h, N\) = \(2, 3, 5\) from q",
    ),
    ({"beta": beta.transpose(1, 2)}, ValueError, r"beta has shape \(2, 5, 3\); expected"),
    (
        {"initial_state": S0.transpose(-1, -2)},
        ValueError,
        r"initial_state has shape \(2, 3, 6, 4\); expected \(B, h, d_k, d_v\) = \(2, 3, 4, 6\)",
    ),
    (
        {"g": g.abs() + 0.5},
        ValueError,
        r"g holds log-decays, so every entry must be ≤ 0 .* got a maximum of",
    ),
    ({"beta": beta + 1}, ValueError, r"beta .* must lie in \[0, 1\]; got values from"),
    ({"beta": -beta}, ValueError, r"beta .* must lie in \[0, 1\]"),
    ({"chunk_size": 0}, ValueError, r"chunk_size must be at least 1; got 0"),
    ({"chunk_size": 2.5}, TypeError, r"chunk_size must be an int; got float"),
    ({"chunk_size": True}, TypeError, r"chunk_size must be an int; got bool"),
    ({"v": v.double()}, TypeError, r"v is torch.float64 on cpu but q is torch.float32"),
    ({"q": q.numpy()}, TypeError, r"q must be a torch.Tensor; got ndarray"),
    ({"k": k.long()}, TypeError, r"k must hold floating-point numbers; got dtype torch.int64"),
]


@pytest.mark.parametrize("override, exc, match", RULE_CASES)
def test_gated_delta_rule_rejects(override, exc, match):
    with pytest.raises(exc, match=match):
        gated_delta_rule(**{**GOOD, **override})


@pytest.mark.parametrize("override, exc, match", RULE_CASES[:9])
def test_the_recurrence_rejects_what_the_chunked_rule_rejects(override, exc, match):
    args = {**GOOD, **override}
    del args["chunk_size"]
    with pytest.raises(exc, match=match):
        gated_delta_recurrence(**args)


def test_the_other_sequence_functions_reject_bad_shapes():
    with pytest.raises(ValueError, match=r"v has shape \(2, 3, 4, 6\); expected"):
        linear_attention(q, k, v[:, :, :4])
    with pytest.raises(ValueError, match=r"initial_state has shape \(3, 4, 6\)"):
        linear_attention_recurrence(q, k, v, S0[0])
    with pytest.raises(ValueError, match=r"beta has shape \(2, 3\); expected \(B, h, N\)"):
        delta_rule(q, k, v, beta[..., 0])
    with pytest.raises(TypeError, match=r"beta must be a torch.Tensor; got float"):
        delta_rule(q, k, v, 0.5)
    with pytest.raises(ValueError, match=r"chunk_size must be at least 1; got -1"):
        delta_rule(q, k, v, beta, chunk_size=-1)


STEP = {
    "state": S0,
    "q": q[:, :, 0],
    "k": k[:, :, 0],
    "v": v[:, :, 0],
    "g": g[:, :, 0],
    "beta": beta[:, :, 0],
}
STEP_CASES = [
    ({"state": S0[0]}, r"state has shape \(3, 4, 6\); expected \(B, h, d_k, d_v\)"),
    (
        {"q": q[:, :, :1]},
        r"q has shape \(2, 3, 1, 4\); expected \(B, h, d_k\) = \(2, 3, 4\) from "
        r"state \(2, 3, 4, 6\) \(one token\)",
    ),
    ({"k": k[:, :2, 0]}, r"k has shape \(2, 2, 4\); expected \(B, h, d_k\) = \(2, 3, 4\)"),
    ({"v": v[:, :, 0, :4]}, r"v has shape \(2, 3, 4\); expected \(B, h, d_v\) = \(2, 3, 6\)"),
    ({"g": g[:, :, :1]}, r"g has shape \(2, 3, 1\); expected \(B, h\) = \(2, 3\)"),
    ({"beta": beta[:, 0]}, r"beta has shape \(2, 5\); expected \(B, h\) = \(2, 3\)"),
    ({"g": g[:, :, 0] + 2}, r"g holds log-decays"),
    ({"beta": beta[:, :, 0] * 3}, r"beta .* must lie in \[0, 1\]"),
]


@pytest.mark.parametrize("override, match", STEP_CASES)
def test_gated_delta_step_rejects(override, match):
    with pytest.raises(ValueError, match=match):
        gated_delta_step(**{**STEP, **override})
