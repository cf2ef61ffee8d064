"""Checkers for notebook 16 (beyond softmax: linear attention, the delta rule, gated DeltaNet).

One head, no batch; float64 numpy arrays in, numpy arrays or torch tensors out (an answer
written for torch tensors only is run again on tensors and passes with a note):
- `check_delta_step(fn)`: fn(S, k, v, beta) -> the state after one delta-rule write,
  S + β k (v − Sᵀk)ᵀ: S (d_k, d_v), k (d_k,) a unit vector, v (d_v,), beta a float in (0, 1);
- `check_gated_step(fn)`: fn(S, k, v, g, beta) -> the state after one gated delta-rule write:
  decay by α = exp(g) (g ≤ 0, a log-decay), then the delta rule on the decayed state,
  α S + β k (v − α Sᵀk)ᵀ;
- `check_chunk_state(fn)`: fn(S0, K, U, g) -> the state handed to the next chunk when the C
  tokens of a chunk write the rows of U (C, d_v) under their keys K (C, d_k) and decay the state
  by exp(g_i) each (g (C,)): with γ = cumsum(g), exp(γ_C) S0 + (exp(γ_C − γ) ∘ K)ᵀ U, which equals
  C steps S ← exp(g_i) S + k_i u_iᵀ.

d_k != d_v everywhere, so a transposed state or outer product shows in the shape; a square case
is run where a transpose cannot show otherwise. An answer is judged to the precision of its own
dtype (`TOLERANCE`): float64 tightly, float32 to about 1e-5; a float16 answer right to float16's
precision is refused with a message that says so. The chunk's state is also asked at a decay as
strong as notebook 16's own (g = −30 per token over 64 tokens), where exp(γ_C)/exp(γ_i) is 0/0.
"""

from __future__ import annotations

import numpy as np

from ._base import TOLERANCE, Note, as_array, checker, diagnose, precision, run_as

__all__ = ["check_chunk_state", "check_delta_step", "check_gated_step"]

D_K, D_V, C = 5, 3, 6


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x)


def _step_inputs(seed: int, d_k: int = D_K, d_v: int = D_V):
    rng = np.random.default_rng(seed)
    S = rng.normal(size=(d_k, d_v))  # (d_k, d_v)
    k = _unit(rng.normal(size=d_k))  # (d_k,)
    v = rng.normal(size=d_v)  # (d_v,)
    beta = float(rng.uniform(0.2, 0.9))
    g = float(np.log(rng.uniform(0.3, 0.8)))  # a decay well away from 1
    return S, k, v, g, beta


def _allclose(value, expected, prec: str) -> bool:
    rtol, atol = TOLERANCE[prec]
    return bool(np.allclose(value, expected, rtol=rtol, atol=atol))


def _mismatch(value, expected, what: str, prec: str) -> str:
    """The message for values that match no catalogued mistake."""
    if not np.all(np.isfinite(value)):
        return f"the result contains inf or NaN; expected {what}"
    if prec == "float16" and _allclose(value, expected, "float16"):
        return (
            f"right to float16's precision (about 1e-3) only: the answer is float16; compute "
            f"{what} in float32 or float64"
        )
    if _close_to(value, expected, 1e-2):
        return (
            f"close to {what}, but only to about 1e-3 ({prec}): something rounds; do not round "
            "the answer or what it is computed from"
        )
    return f"wrong values: expected {what}"


def _close_to(value, expected, tol: float) -> bool:
    return bool(np.allclose(value, expected, rtol=tol, atol=tol))


def _judge(fn, args, names, shape, expected, mistakes, what):
    """Run fn as numpy (then torch); (problem or None, note or None)."""
    result, problem, note = run_as(fn, "numpy", *args, names=names)
    if problem:
        return problem, None
    if getattr(result, "shape", None) is not None and tuple(result.shape) == shape[::-1]:
        return (
            f"the result has shape {shape[::-1]}, the state transposed: the state is "
            f"(d_k, d_v) = {shape}, keys along its rows, values along its columns "
            "(np.outer(k, ...), not np.outer(..., k))"
        ), None
    value, problem = as_array(result, shape, "an array")
    if problem:
        return problem, None
    prec = precision(result)
    if prec != "float16" and _allclose(value, expected, prec):
        return None, note
    named = diagnose(value, mistakes, tol=max(1e-6, TOLERANCE[prec][0]))
    return named or _mismatch(value, expected, what, prec), None


def _verdict(problems_and_notes) -> str | None:
    notes = []
    for problem, note in problems_and_notes:
        if problem:
            return problem
        if note:
            notes.append(note)
    return Note(notes[0]) if notes else None


# ------------------------------------------------------------------------------- the delta step


def delta_step_reference(S, k, v, beta):
    return S + beta * np.outer(k, v - S.T @ k)  # (d_k, d_v)


def _delta_mistakes(S, k, v, beta) -> dict[str, np.ndarray]:
    right = delta_step_reference(S, k, v, beta)
    return {
        "it writes β k vᵀ without erasing: that is linear attention's write; the delta rule "
        "first takes away what S stores under k (Sᵀk) and writes β k (v − Sᵀk)ᵀ": S
        + beta * np.outer(k, v),
        "it returns S unchanged": S,
        "it returns the change β k (v − Sᵀk)ᵀ, not the new state S + that change": right - S,
        "the correction has the wrong sign: one step of gradient descent on ½‖Sᵀk − v‖² adds "
        "β k (v − Sᵀk)ᵀ": S - beta * np.outer(k, v - S.T @ k),
        "it leaves out β: the write strength scales the whole correction": S
        + np.outer(k, v - S.T @ k),
        "β scales v but not the erase: the correction β (v − Sᵀk) is scaled as a whole": S
        + np.outer(k, beta * v - S.T @ k),
        "β scales the erase but not v: the correction β (v − Sᵀk) is scaled as a whole": S
        + np.outer(k, v - beta * S.T @ k),
        "it applies β twice (β² k (v − Sᵀk)ᵀ)": S + beta**2 * np.outer(k, v - S.T @ k),
        "it shrinks the whole state by (1 − β): the erase takes away only what S stores under "
        "k, β k (Sᵀk)ᵀ, and leaves every direction orthogonal to k as it was": (1 - beta) * S
        + beta * np.outer(k, v),
        "it erases what S stores under k but never writes v: the delta rule adds β k vᵀ after "
        "the erase": S - beta * np.outer(k, S.T @ k),
        "it returns only the new pair's write β k vᵀ: the state keeps what it held, minus the "
        "erase β k (Sᵀk)ᵀ": beta * np.outer(k, v),
    }


def _square_delta(fn) -> str | None:
    """On a square state, name a read with S k instead of Sᵀ k (a transpose that a
    rectangular state turns into an error)."""
    S, k, v, _, beta = _step_inputs(7, D_K, D_K)
    result, problem, _ = run_as(fn, "numpy", S, k, v, beta, names=("S", "k", "v", "beta"))
    if problem or result is None:
        return None
    value, problem = as_array(result, (D_K, D_K))
    if problem:
        return None
    if _allclose(value, S + beta * np.outer(k, v - S @ k), precision(result)):
        return (
            "it reads the state with S k: S is (d_k, d_v), keys along its rows, so what it "
            "stores under k is Sᵀ k (k @ S), a vector of d_v numbers"
        )
    return None


@checker("delta_step")
def check_delta_step(fn):
    """Check fn(S (d_k, d_v), k (d_k,), v (d_v,), beta) -> (d_k, d_v)."""
    verdicts = []
    for seed in (0, 1, 2):
        S, k, v, _, beta = _step_inputs(seed)
        problem, note = _judge(
            fn,
            (S, k, v, beta),
            ("S", "k", "v", "beta"),
            (D_K, D_V),
            delta_step_reference(S, k, v, beta),
            _delta_mistakes(S, k, v, beta),
            "S + β k (v − Sᵀk)ᵀ",
        )
        if problem:
            return _square_delta(fn) or problem
        verdicts.append((problem, note))
    return _verdict(verdicts)


# ------------------------------------------------------------------------------- the decay


def gated_step_reference(S, k, v, g, beta):
    alpha = np.exp(g)
    return alpha * S + beta * np.outer(k, v - alpha * S.T @ k)  # (d_k, d_v)


def _gated_mistakes(S, k, v, g, beta) -> dict[str, np.ndarray]:
    a = np.exp(g)

    def write(decayed, state=None):  # the delta rule's write on the (decayed) state
        state = decayed if state is None else state
        return beta * np.outer(k, v - state.T @ k)

    return {
        "it never decays: the state is multiplied by α = exp(g) before the write": S + write(S),
        "it multiplies by g itself: g is a log-decay (≤ 0); the decay is α = exp(g), between "
        "0 and 1": g * S + write(g * S),
        "it multiplies by exp(−g), which is above 1 and grows the state: the decay is "
        "α = exp(g), g ≤ 0": np.exp(-g) * S + write(np.exp(-g) * S),
        "it erases what the undecayed state stores: decay first, then read Sᵀk from α S, "
        "the state the write corrects": a * S + write(S),
        "it decays after the write: the new token's write must not decay; α S first, then "
        "the delta rule": a * (S + write(S)),
        "it decays what the erase reads but not the state itself: S ← α S, then the delta "
        "rule on it": S + write(a * S),
        "it uses 1 + g, the first-order approximation of exp(g): the decay is exactly exp(g)": (
            1 + g
        )
        * S
        + write((1 + g) * S),
        "it decays the write as well (α β k (v − α Sᵀk)ᵀ): only the old state decays": a * S
        + a * write(a * S),
        "it decays but never erases (α S + β k vᵀ): that is linear attention with a decay; "
        "the gated delta rule also takes away what α S stores under k": a * S
        + beta * np.outer(k, v),
        "it leaves out β: the write strength scales the whole correction": a * S
        + np.outer(k, v - a * S.T @ k),
        "it returns S unchanged": S,
        "it returns only the decayed state α S: the delta rule's write β k (v − α Sᵀk)ᵀ "
        "comes after the decay": a * S,
    }


@checker("gated_step")
def check_gated_step(fn):
    """Check fn(S (d_k, d_v), k (d_k,), v (d_v,), g, beta) -> (d_k, d_v)."""
    verdicts = []
    for seed in (0, 1, 2):
        S, k, v, g, beta = _step_inputs(seed)
        problem, note = _judge(
            fn,
            (S, k, v, g, beta),
            ("S", "k", "v", "g", "beta"),
            (D_K, D_V),
            gated_step_reference(S, k, v, g, beta),
            _gated_mistakes(S, k, v, g, beta),
            "α S + β k (v − α Sᵀk)ᵀ with α = exp(g)",
        )
        if problem:
            return problem
        verdicts.append((problem, note))
    return _verdict(verdicts)


# ------------------------------------------------------------------------------- the chunk's state


def _chunk_inputs(seed: int):
    rng = np.random.default_rng(seed)
    S0 = rng.normal(size=(D_K, D_V))  # (d_k, d_v)
    K = rng.normal(size=(C, D_K))  # (C, d_k)
    U = rng.normal(size=(C, D_V))  # (C, d_v)
    g = np.log(rng.uniform(0.4, 0.9, size=C))  # (C,), distinct decays
    return S0, K, U, g


def chunk_state_reference(S0, K, U, g):
    gamma = np.cumsum(g)  # (C,): log of the decay from the chunk's start to token i
    return np.exp(gamma[-1]) * S0 + (np.exp(gamma[-1] - gamma)[:, None] * K).T @ U


def chunk_state_steps(S0, K, U, g):
    """The same state, token by token: S ← exp(g_i) S + k_i u_iᵀ."""
    S = S0
    for k, u, g_i in zip(K, U, g):
        S = np.exp(g_i) * S + np.outer(k, u)
    return S


def _chunk_mistakes(S0, K, U, g) -> dict[str, np.ndarray]:
    gamma = np.cumsum(g)
    last = gamma[-1]

    def written(decay):  # Σ_i decay_i k_i u_iᵀ
        return (decay[:, None] * K).T @ U

    return {
        "it does not decay S0: the state entering the chunk decays by exp(γ_C) over its C "
        "tokens": S0 + written(np.exp(last - gamma)),
        "it decays every write by the whole chunk's exp(γ_C): token i's write decays only "
        "over the tokens after it, exp(γ_C − γ_i)": np.exp(last) * (S0 + K.T @ U),
        "it leaves the writes undecayed: token i's write decays over the tokens after it, "
        "exp(γ_C − γ_i)": np.exp(last) * S0 + K.T @ U,
        "it decays each write from the chunk's start (exp(γ_i)), not from token i to the "
        "chunk's end (exp(γ_C − γ_i))": np.exp(last) * S0 + written(np.exp(gamma)),
        "the decay's exponent has the wrong sign: exp(γ_i − γ_C) is above 1; token i's write "
        "decays by exp(γ_C − γ_i) ≤ 1": np.exp(last) * S0 + written(np.exp(gamma - last)),
        "it uses g where it needs its cumulative sum γ = cumsum(g): the decay from token i "
        "to the end is the product of the decays after it": np.exp(g[-1]) * S0
        + written(np.exp(g[-1] - g)),
        "it counts token i's own decay in its write (exp(γ_C − γ_i + g_i)): token i decays "
        "the state, then writes, so its write decays only after it": np.exp(last) * S0
        + written(np.exp(last - gamma + g)),
        "it leaves out the state the chunk started with: S_C = exp(γ_C) S0 + the chunk's "
        "writes": written(np.exp(last - gamma)),
        "it leaves out the chunk's writes: S_C = exp(γ_C) S0 + Σ_i exp(γ_C − γ_i) k_i u_iᵀ": np.exp(
            last
        )
        * S0,
        "it returns S0 unchanged: the chunk decays it by exp(γ_C) and adds its writes": S0,
        "it decays S0 by the last token's exp(g_C) only: over the chunk it decays by "
        "exp(γ_C) = exp(g_1 + … + g_C)": np.exp(g[-1]) * S0 + written(np.exp(last - gamma)),
    }


STRONG = (64, -30.0)  # notebook 16's boundary gate g = −30, on every token of a 64-token chunk


def _strong_inputs():
    """A chunk of 64 tokens each decaying the state by about exp(−30): γ_C ≈ −1920, so exp(γ_i)
    underflows to 0 and exp(−γ_i) overflows, while every exp(γ_C − γ_i) is a number ≤ 1."""
    rng = np.random.default_rng(5)
    tokens, g = STRONG
    S0 = rng.normal(size=(D_K, D_V))
    K, U = rng.normal(size=(tokens, D_K)), rng.normal(size=(tokens, D_V))
    return S0, K, U, g + rng.uniform(-1, 1, size=tokens)


def _overflow(value) -> str | None:
    if np.all(np.isfinite(value)):
        return None
    tokens, g = STRONG
    return (
        f"the result contains inf or NaN at a strong decay (g ≈ −{abs(g):g} on each of {tokens} "
        f"tokens, the notebook's own boundary gate): exp(γ_i) underflows to 0 and exp(−γ_i) "
        "overflows, so exp(γ_C)/exp(γ_i) is 0/0 there; write each write's decay as one "
        "exponential, exp(γ_C − γ_i), which is never above 1"
    )


@checker("chunk_state")
def check_chunk_state(fn):
    """Check fn(S0 (d_k, d_v), K (C, d_k), U (C, d_v), g (C,)) -> (d_k, d_v), on two chunks of
    mild decays and one of decays as strong as notebook 16's gate (`STRONG`)."""
    verdicts = []
    for seed in (0, 1, "strong"):
        S0, K, U, g = _strong_inputs() if seed == "strong" else _chunk_inputs(seed)
        if seed == "strong":
            result, problem, _ = run_as(fn, "numpy", S0, K, U, g, names=("S0", "K", "U", "g"))
            value, _ = (None, None) if problem else as_array(result, (D_K, D_V))
            if value is not None and _overflow(value):
                return _overflow(value)
        expected = chunk_state_reference(S0, K, U, g)
        mistakes = {} if seed == "strong" else _chunk_mistakes(S0, K, U, g)
        problem, note = _judge(
            fn,
            (S0, K, U, g),
            ("S0", "K", "U", "g"),
            (D_K, D_V),
            expected,
            mistakes,
            "exp(γ_C) S0 + (exp(γ_C − γ) ∘ K)ᵀ U with γ = cumsum(g), the state after C steps",
        )
        if problem:
            return problem
        verdicts.append((problem, note))
    return _verdict(verdicts)
