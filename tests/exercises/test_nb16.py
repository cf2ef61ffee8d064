"""The checkers of notebook 16 accept right answers (numpy and torch, float64 and float32) and
name the usual mistakes: every wrong answer catalogued here gets a message naming its mistake
(the test asserts a distinctive part of it), never the generic "wrong values"."""

import numpy as np
import pytest
import torch

from mha_lib.exercises._base import GENERIC
from mha_lib.exercises.nb16 import (
    check_chunk_state,
    check_delta_step,
    check_gated_step,
    chunk_state_reference,
    chunk_state_steps,
)
from mha_lib.linear_attention import gated_delta_step


def verdict(capsys) -> str:
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return out


# delta_step -------------------------------------------------------------------------------------


def delta_outer(S, k, v, beta):
    return S + beta * np.outer(k, v - S.T @ k)


def delta_k_at_S(S, k, v, beta):
    read = k @ S  # (d_v,): what S stores under k
    return S + beta * k[:, None] * (v - read)[None, :]


def delta_projector(S, k, v, beta):
    # (I − β k kᵀ) S + β k vᵀ: the erase as a projection
    return (np.eye(len(k)) - beta * np.outer(k, k)) @ S + beta * np.outer(k, v)


def delta_torch(S, k, v, beta):
    S, k, v = (torch.as_tensor(x) for x in (S, k, v))
    return S + beta * torch.outer(k, v - S.T @ k)


def delta_torch_only(S, k, v, beta):  # torch functions on what it is given
    return S + beta * torch.outer(k, v - S.mT @ k)


def delta_library(S, k, v, beta):  # the library's step: one head, q unused
    t = [torch.as_tensor(x)[None, None] for x in (S, k, k, v)]
    zero, b = torch.zeros(1, 1, dtype=torch.float64), torch.full((1, 1), beta, dtype=torch.float64)
    _, new = gated_delta_step(t[0], t[1], t[2], t[3], zero, b)
    return new[0, 0]


def delta_float32(S, k, v, beta):  # computed in float32: rounding of about 1e-7
    S, k, v = (np.asarray(x, dtype=np.float32) for x in (S, k, v))
    return S + np.float32(beta) * np.outer(k, v - S.T @ k)


def delta_torch_float32(S, k, v, beta):
    S, k, v = (torch.as_tensor(x, dtype=torch.float32) for x in (S, k, v))
    return S + beta * torch.outer(k, v - S.T @ k)


@pytest.mark.parametrize(
    "fn",
    [
        delta_outer,
        delta_k_at_S,
        delta_projector,
        delta_torch,
        delta_torch_only,
        delta_library,
        delta_float32,
        delta_torch_float32,
    ],
)
def test_delta_step_accepts_correct_forms(capsys, fn):
    assert check_delta_step(fn)
    out = verdict(capsys)
    assert "✓ delta_step: correct" in out
    if fn is delta_torch_only:
        assert "on torch tensors only" in out


def _in_place(S, k, v, beta):
    S += beta * np.outer(k, v - S.T @ k)
    return S


DELTA_WRONG = [
    (lambda S, k, v, b: S + b * np.outer(k, v), "without erasing"),
    (lambda S, k, v, b: S.copy(), "returns S unchanged"),
    (lambda S, k, v, b: b * np.outer(k, v - S.T @ k), "returns the change"),
    (lambda S, k, v, b: S - b * np.outer(k, v - S.T @ k), "wrong sign"),
    (lambda S, k, v, b: S + b * np.outer(k, S.T @ k - v), "wrong sign"),
    (lambda S, k, v, b: S + np.outer(k, v - S.T @ k), "leaves out β"),
    (lambda S, k, v, b: S + np.outer(k, b * v - S.T @ k), "β scales v but not the erase"),
    (lambda S, k, v, b: S + np.outer(k, v - b * S.T @ k), "β scales the erase but not v"),
    (lambda S, k, v, b: S + b * b * np.outer(k, v - S.T @ k), "β twice"),
    (lambda S, k, v, b: S + b * np.outer(k, v - S @ k), "reads the state with S k"),
    (lambda S, k, v, b: (S + b * np.outer(k, v - S.T @ k)).T, "the state transposed"),
    (_in_place, "changes its argument S in place"),
    (lambda S, k, v, b: (1 - b) * S + b * np.outer(k, v), "shrinks the whole state"),
    (lambda S, k, v, b: S - b * np.outer(k, S.T @ k), "never writes v"),
    (lambda S, k, v, b: b * np.outer(k, v), "only the new pair's write"),
    (
        lambda S, k, v, b: torch.as_tensor(S + b * np.outer(k, v - S.T @ k)).half(),
        "float16's precision",
    ),
    (lambda S, k, v, b: np.round(S + b * np.outer(k, v - S.T @ k), 3), "something rounds"),
    (lambda S, k, v, b: None, "not implemented"),
]


@pytest.mark.parametrize("fn, words", DELTA_WRONG)
def test_delta_step_names_the_mistake(capsys, fn, words):
    assert not check_delta_step(fn)
    out = verdict(capsys)
    assert out.startswith("✗ delta_step:") and words in out, out
    assert not out.removeprefix("✗ delta_step: ").startswith(GENERIC), out


# gated_step -------------------------------------------------------------------------------------


def gated_numpy(S, k, v, g, beta):
    S = np.exp(g) * S  # the decay first
    return S + beta * np.outer(k, v - S.T @ k)


def gated_one_line(S, k, v, g, beta):
    a = np.exp(g)
    return a * S + beta * np.outer(k, v - a * (k @ S))


def gated_torch(S, k, v, g, beta):
    S, k, v = (torch.as_tensor(x) for x in (S, k, v))
    S = S * torch.exp(torch.tensor(g))
    return S + beta * torch.outer(k, v - S.T @ k)


def gated_library(S, k, v, g, beta):
    t = [torch.as_tensor(x)[None, None] for x in (S, k, k, v)]
    g_, b = (torch.full((1, 1), x, dtype=torch.float64) for x in (g, beta))
    return gated_delta_step(t[0], t[1], t[2], t[3], g_, b)[1][0, 0]


def gated_float32(S, k, v, g, beta):
    S, k, v = (np.asarray(x, dtype=np.float32) for x in (S, k, v))
    S = np.exp(np.float32(g)) * S
    return S + np.float32(beta) * np.outer(k, v - S.T @ k)


def gated_torch_float32(S, k, v, g, beta):
    S, k, v = (torch.as_tensor(x, dtype=torch.float32) for x in (S, k, v))
    S = S * torch.exp(torch.tensor(g))
    return S + beta * torch.outer(k, v - S.T @ k)


@pytest.mark.parametrize(
    "fn",
    [gated_numpy, gated_one_line, gated_torch, gated_library, gated_float32, gated_torch_float32],
)
def test_gated_step_accepts_correct_forms(capsys, fn):
    assert check_gated_step(fn)
    assert "✓ gated_step: correct" in verdict(capsys)


def _write(S, k, v, beta):
    return beta * np.outer(k, v - S.T @ k)


GATED_WRONG = [
    (lambda S, k, v, g, b: S + _write(S, k, v, b), "never decays"),
    (lambda S, k, v, g, b: g * S + _write(g * S, k, v, b), "multiplies by g itself"),
    (lambda S, k, v, g, b: np.exp(-g) * S + _write(np.exp(-g) * S, k, v, b), "exp(−g)"),
    (lambda S, k, v, g, b: np.exp(g) * S + _write(S, k, v, b), "undecayed state"),
    (lambda S, k, v, g, b: np.exp(g) * (S + _write(S, k, v, b)), "decays after the write"),
    (lambda S, k, v, g, b: S + _write(np.exp(g) * S, k, v, b), "but not the state itself"),
    (lambda S, k, v, g, b: (1 + g) * S + _write((1 + g) * S, k, v, b), "first-order"),
    (
        lambda S, k, v, g, b: np.exp(g) * S + np.exp(g) * _write(np.exp(g) * S, k, v, b),
        "decays the write as well",
    ),
    (lambda S, k, v, g, b: np.exp(g) * S + b * np.outer(k, v), "never erases"),
    (
        lambda S, k, v, g, b: np.exp(g) * S + np.outer(k, v - np.exp(g) * S.T @ k),
        "leaves out β",
    ),
    (lambda S, k, v, g, b: S.copy(), "returns S unchanged"),
    (lambda S, k, v, g, b: np.exp(g) * S, "only the decayed state"),
    (
        lambda S, k, v, g, b: torch.as_tensor(gated_numpy(S, k, v, g, b)).half(),
        "float16's precision",
    ),
    (lambda S, k, v, g, b: gated_numpy(S, k, v, round(g, 2), b), "something rounds"),
    (lambda S, k, v, g, b: None, "not implemented"),
]


@pytest.mark.parametrize("fn, words", GATED_WRONG)
def test_gated_step_names_the_mistake(capsys, fn, words):
    assert not check_gated_step(fn)
    out = verdict(capsys)
    assert out.startswith("✗ gated_step:") and words in out, out
    assert not out.removeprefix("✗ gated_step: ").startswith(GENERIC), out


# chunk_state ------------------------------------------------------------------------------------


def chunk_numpy(S0, K, U, g):
    gamma = np.cumsum(g)
    to_end = np.exp(gamma[-1] - gamma)  # (C,): token i's decay to the chunk's end
    return np.exp(gamma[-1]) * S0 + (to_end[:, None] * K).T @ U


def chunk_einsum(S0, K, U, g):
    gamma = np.cumsum(g)
    return np.exp(gamma[-1]) * S0 + np.einsum("i,ik,iv->kv", np.exp(gamma[-1] - gamma), K, U)


def chunk_steps(S0, K, U, g):  # the recurrence itself is right, only slower
    S = S0
    for k, u, g_i in zip(K, U, g):
        S = np.exp(g_i) * S + np.outer(k, u)
    return S


def chunk_torch(S0, K, U, g):
    S0, K, U, g = (torch.as_tensor(x) for x in (S0, K, U, g))
    gamma = g.cumsum(0)
    return gamma[-1].exp() * S0 + (K * (gamma[-1] - gamma).exp()[:, None]).T @ U


def chunk_float32(S0, K, U, g):
    S0, K, U, g = (np.asarray(x, dtype=np.float32) for x in (S0, K, U, g))
    gamma = np.cumsum(g)
    return np.exp(gamma[-1]) * S0 + (np.exp(gamma[-1] - gamma)[:, None] * K).T @ U


def chunk_torch_float32(S0, K, U, g):
    S0, K, U, g = (torch.as_tensor(x, dtype=torch.float32) for x in (S0, K, U, g))
    gamma = g.cumsum(0)
    return gamma[-1].exp() * S0 + (K * (gamma[-1] - gamma).exp()[:, None]).T @ U


@pytest.mark.parametrize(
    "fn", [chunk_numpy, chunk_einsum, chunk_steps, chunk_torch, chunk_float32, chunk_torch_float32]
)
def test_chunk_state_accepts_correct_forms(capsys, fn):
    assert check_chunk_state(fn)
    assert "✓ chunk_state: correct" in verdict(capsys)


def test_the_chunk_formula_is_the_recurrence():
    rng = np.random.default_rng(3)
    S0, K, U = rng.normal(size=(4, 2)), rng.normal(size=(7, 4)), rng.normal(size=(7, 2))
    g = np.log(rng.uniform(0.1, 1.0, size=7))
    assert np.abs(chunk_state_reference(S0, K, U, g) - chunk_state_steps(S0, K, U, g)).max() < 1e-12


def _decayed(S0, K, U, decay, state_decay):
    return state_decay * S0 + (decay[:, None] * K).T @ U


def _chunk_exp_ratio(S0, K, U, g):  # right on mild decays, 0/0 at g = −30 over 64 tokens
    gamma = np.cumsum(g)
    return np.exp(gamma[-1]) * S0 + ((np.exp(gamma[-1]) / np.exp(gamma))[:, None] * K).T @ U


def _chunk_exp_ratio_torch(S0, K, U, g):
    S0, K, U, g = (torch.as_tensor(x) for x in (S0, K, U, g))
    gamma = g.cumsum(0)
    return gamma[-1].exp() * S0 + (K * (gamma[-1].exp() * (-gamma).exp())[:, None]).T @ U


CHUNK_WRONG = [
    (lambda S0, K, U, g: _decayed(S0, K, U, np.exp(g.sum() - np.cumsum(g)), 1.0), "not decay S0"),
    (lambda S0, K, U, g: np.exp(g.sum()) * (S0 + K.T @ U), "whole chunk's exp"),
    (lambda S0, K, U, g: np.exp(g.sum()) * S0 + K.T @ U, "writes undecayed"),
    (
        lambda S0, K, U, g: _decayed(S0, K, U, np.exp(np.cumsum(g)), np.exp(g.sum())),
        "from the chunk's start",
    ),
    (
        lambda S0, K, U, g: _decayed(S0, K, U, np.exp(np.cumsum(g) - g.sum()), np.exp(g.sum())),
        "wrong sign",
    ),
    (lambda S0, K, U, g: _decayed(S0, K, U, np.exp(g[-1] - g), np.exp(g[-1])), "cumulative sum"),
    (
        lambda S0, K, U, g: _decayed(S0, K, U, np.exp(g.sum() - np.cumsum(g) + g), np.exp(g.sum())),
        "own decay",
    ),
    (lambda S0, K, U, g: (np.exp(g.sum() - np.cumsum(g))[:, None] * K).T @ U, "leaves out the"),
    (lambda S0, K, U, g: (np.exp(g.sum()) * S0 + K.T @ U).T, "the state transposed"),
    (lambda S0, K, U, g: np.exp(g.sum()) * S0, "leaves out the chunk's writes"),
    (lambda S0, K, U, g: S0.copy(), "returns S0 unchanged"),
    (
        lambda S0, K, U, g: _decayed(S0, K, U, np.exp(g.sum() - np.cumsum(g)), np.exp(g[-1])),
        "last token's exp(g_C) only",
    ),
    (_chunk_exp_ratio, "exp(γ_C)/exp(γ_i) is 0/0"),
    (_chunk_exp_ratio_torch, "exp(γ_C)/exp(γ_i) is 0/0"),
    (lambda S0, K, U, g: torch.as_tensor(chunk_numpy(S0, K, U, g)).half(), "float16's precision"),
    (lambda S0, K, U, g: np.round(chunk_numpy(S0, K, U, g), 3), "something rounds"),
    (lambda S0, K, U, g: None, "not implemented"),
]


@pytest.mark.parametrize("fn, words", CHUNK_WRONG)
def test_chunk_state_names_the_mistake(capsys, fn, words):
    assert not check_chunk_state(fn)
    out = verdict(capsys)
    assert out.startswith("✗ chunk_state:") and words in out, out
    assert not out.removeprefix("✗ chunk_state: ").startswith(GENERIC), out


def test_the_exp_ratio_is_right_on_mild_decays_and_breaks_on_the_notebooks_gate():
    """The catalogue's exp(γ_C)/exp(γ_i) is the right formula in exact arithmetic: only the
    strong decay (g = −30 over 64 tokens, notebook 16's gate) tells it apart."""
    from mha_lib.exercises.nb16 import _chunk_inputs, _strong_inputs

    S0, K, U, g = _chunk_inputs(0)
    assert np.allclose(_chunk_exp_ratio(S0, K, U, g), chunk_state_reference(S0, K, U, g))
    S0, K, U, g = _strong_inputs()
    with np.errstate(all="ignore"):
        assert not np.isfinite(_chunk_exp_ratio(S0, K, U, g)).all()
    assert np.isfinite(chunk_state_reference(S0, K, U, g)).all()
    assert np.allclose(chunk_state_reference(S0, K, U, g), chunk_state_steps(S0, K, U, g))
