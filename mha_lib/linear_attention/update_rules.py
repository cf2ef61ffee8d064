"""How a fixed-size state is written and read: causal linear attention, the delta rule and the
gated delta rule, each as one step, as a step-by-step recurrence and as a parallel form.

Derived in notebook 16. Softmax attention keeps every key and value it has seen (notebook 08's
cache grows with N); these rules keep one matrix per head instead, the state S (d_k, d_v), and a
token reads it with its query: o_t = S_tᵀ q_t. What differs is how a token writes to it. For one
head, with q_t already scaled by 1/√d_k:

- linear attention:  S_t = S_{t-1} + k_t v_tᵀ
  (softmax attention with the softmax removed: o_t = Σ_{j≤t} (q_t·k_j) v_j);
- the delta rule:    S_t = S_{t-1} + β_t k_t (v_t − S_{t-1}ᵀ k_t)ᵀ
  (first erase what the state stores under k_t, then write v_t there: one step of gradient
  descent on ½‖Sᵀk_t − v_t‖² with learning rate β_t in [0, 1]);
- the gated delta rule: the state first decays by α_t = exp(g_t), with the log-decay g_t ≤ 0,
  then the delta rule writes: S_t = α_t S_{t-1} + β_t k_t (v_t − α_t S_{t-1}ᵀ k_t)ᵀ.

With g = 0 the gated rule is the delta rule; with `erase=False` (no S_{t-1}ᵀ k_t term), g = 0
and β = 1 it is linear attention (with g < 0: linear attention with a decay).

What it holds:
- `linear_attention(q, k, v)`: the parallel form, (QKᵀ masked causally, no softmax) V;
- `linear_attention_recurrence(q, k, v)`: the same outputs token by token, and the state;
- `gated_delta_step(state, q, k, v, g, beta)`: one token of the gated delta rule;
- `gated_delta_recurrence(q, k, v, g, beta)`: a sequence, one `gated_delta_step` per token;
- `gated_delta_rule(q, k, v, g, beta, chunk_size=64)`: the chunked form. Inside a chunk of C
  tokens everything is matrices (the writes of the chunk's tokens depend on each other through a
  C×C unit lower-triangular system, solved once for all chunks: the "UT transform"); across
  chunks the state carries the past, two matrix products per chunk. This is FlashAttention's
  tiling idea (notebook 08) applied to a recurrence: matrix products of C tokens at a time, and
  N/C sequential steps instead of N;
- `delta_rule(q, k, v, beta)`: `gated_delta_rule` with g = 0.

The semantics are those of transformers' `torch_chunk_gated_delta_rule` (Qwen3-Next, Qwen3.5):
queries scaled by 1/√d_k inside the rule; queries and keys L2-normalised by the layer, not
here (`gated_deltanet.l2_normalize`); the state starts at zero unless `initial_state` is given.
Everything is computed in the inputs' dtype (transformers computes in float32 always).

Shapes, in the series' layout: q, k (B, h, N, d_k); v (B, h, N, d_v); g, beta (B, h, N);
state (B, h, d_k, d_v); outputs o (B, h, N, d_v). One token (the step): q, k (B, h, d_k),
v (B, h, d_v), g, beta (B, h).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .._checks import check_int

__all__ = [
    "delta_rule",
    "gated_delta_recurrence",
    "gated_delta_rule",
    "gated_delta_step",
    "linear_attention",
    "linear_attention_recurrence",
]


def linear_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal linear attention, parallel form: o_i = Σ_{j≤i} (q_i·k_j / √d_k) v_j.

    Softmax attention without the softmax: the scores are masked causally (zero above the
    diagonal) and multiply the values as they are, unnormalised. O(N²) like softmax attention;
    `linear_attention_recurrence` computes the same outputs with a fixed-size state.
    q, k (B, h, N, d_k), v (B, h, N, d_v) -> o (B, h, N, d_v).
    """
    _check_sequence(q, k, v)
    N, d_k = q.shape[-2:]
    scores = q @ k.transpose(-2, -1) * d_k**-0.5  # (B, h, N, N)
    causal = torch.ones(N, N, dtype=torch.bool, device=q.device).tril()  # (N, N): j ≤ i
    return scores.masked_fill(~causal, 0.0) @ v  # (B, h, N, d_v)


def linear_attention_recurrence(
    q: Tensor, k: Tensor, v: Tensor, initial_state: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Causal linear attention token by token: S_t = S_{t-1} + k_t v_tᵀ, o_t = S_tᵀ q_t / √d_k.

    q, k (B, h, N, d_k), v (B, h, N, d_v), initial_state (B, h, d_k, d_v) or None (zeros)
    -> (o (B, h, N, d_v), the state after the last token (B, h, d_k, d_v)).
    """
    S = _check_sequence(q, k, v, initial_state=initial_state)  # (B, h, d_k, d_v)
    q = q * q.shape[-1] ** -0.5
    o = v.new_empty(v.shape)  # (B, h, N, d_v)
    for t in range(q.shape[2]):
        S = S + k[:, :, t, :, None] * v[:, :, t, None, :]  # (B, h, d_k, d_v): add k_t v_tᵀ
        o[:, :, t] = (q[:, :, t, None, :] @ S).squeeze(-2)  # (B, h, d_v): S_tᵀ q_t
    return o, S


def gated_delta_step(
    state: Tensor, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, *, erase: bool = True
) -> tuple[Tensor, Tensor]:
    """One token of the gated delta rule: decay, erase what k reads, write v, read with q.

    S ← exp(g) S;  S ← S + β k (v − Sᵀk)ᵀ;  o = Sᵀ q / √d_k.  (`erase=False`: S ← S + β k vᵀ.)
    state (B, h, d_k, d_v); q, k (B, h, d_k); v (B, h, d_v); g (B, h) log-decays ≤ 0;
    beta (B, h) in [0, 1] -> (o (B, h, d_v), the new state (B, h, d_k, d_v)).
    """
    _check_step(state, q, k, v, g, beta)
    return _step(state, q * q.shape[-1] ** -0.5, k, v, g, beta, erase)


def _step(S, q, k, v, g, beta, erase: bool):
    """`gated_delta_step` without the checks, q already scaled."""
    S = S * g.exp()[..., None, None]  # (B, h, d_k, d_v): the decay
    write = v  # (B, h, d_v)
    if erase:
        write = v - (k[..., None, :] @ S).squeeze(-2)  # (B, h, d_v): v − Sᵀk
    S = S + k[..., :, None] * (beta[..., None] * write)[..., None, :]  # (B, h, d_k, d_v)
    return (q[..., None, :] @ S).squeeze(-2), S  # (B, h, d_v), (B, h, d_k, d_v)


def gated_delta_recurrence(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    initial_state: Tensor | None = None,
    *,
    erase: bool = True,
) -> tuple[Tensor, Tensor]:
    """The gated delta rule over a sequence, one `gated_delta_step` per token.

    N sequential steps, each O(d_k·d_v) per head: the reference the chunked form is checked
    against, and what decoding does one token at a time.
    q, k (B, h, N, d_k), v (B, h, N, d_v), g, beta (B, h, N), initial_state (B, h, d_k, d_v) or
    None (zeros) -> (o (B, h, N, d_v), the state after the last token (B, h, d_k, d_v)).
    """
    S = _check_sequence(q, k, v, g, beta, initial_state)  # (B, h, d_k, d_v)
    q = q * q.shape[-1] ** -0.5
    o = v.new_empty(v.shape)  # (B, h, N, d_v)
    for t in range(q.shape[2]):
        q_t, k_t, v_t, g_t, beta_t = (x[:, :, t] for x in (q, k, v, g, beta))  # token t
        o[:, :, t], S = _step(S, q_t, k_t, v_t, g_t, beta_t, erase)  # (B, h, d_v), S
    return o, S


def gated_delta_rule(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    chunk_size: int = 64,
    initial_state: Tensor | None = None,
    *,
    erase: bool = True,
) -> tuple[Tensor, Tensor]:
    """The gated delta rule, chunked: matrices inside each chunk, the state across chunks.

    Equal to `gated_delta_recurrence` up to rounding. Inside a chunk of C tokens, with decays
    γ_i = g_1 + ... + g_i counted from the chunk's start, the state entering the chunk S_0 and
    D_ij = exp(γ_i − γ_j) for j ≤ i (0 above the diagonal), token i writes the vector
        u_i = β_i (v_i − exp(γ_i) S_0ᵀ k_i − Σ_{j<i} D_ij (k_i·k_j) u_j),
    its value minus what the state already stores under k_i. Stacked as rows, that is the unit
    lower-triangular system (I + L) U = β V − (β exp(γ) K) S_0 with L = strictly-lower(β K Kᵀ ∘ D).
    With T = (I + L)⁻¹ (one triangular solve for every chunk at once: the "UT transform"),
    U = W − K_c S_0, where W = T β V and K_c = T (β exp(γ) K) do not depend on the state. Then
        S_C = exp(γ_C) S_0 + (exp(γ_C − γ) K)ᵀ U           (the state handed to the next chunk)
        O   = (exp(γ) Q) S_0 + (Q Kᵀ ∘ D) U                (the state's part + the chunk's part).
    Everything that does not depend on the state is computed for every chunk at once; the loop
    over the chunks does three matrix products each (U, the state's part of O, S_C), each fused
    with the addition beside it.
    `erase=False` removes the erase term: U = β V.
    q, k (B, h, N, d_k), v (B, h, N, d_v), g (B, h, N) ≤ 0, beta (B, h, N) in [0, 1],
    initial_state (B, h, d_k, d_v) or None (zeros)
    -> (o (B, h, N, d_v), the state after the last token (B, h, d_k, d_v)).
    """
    S = _check_sequence(q, k, v, g, beta, initial_state)  # (B, h, d_k, d_v)
    C = check_int(chunk_size, "chunk_size", 1)
    B, h, N, d_k = q.shape
    d_v = v.shape[-1]
    if N == 0:
        return v.clone(), S  # (B, h, 0, d_v), the initial state
    pad = -N % C
    if pad:  # whole chunks: a padded token has k = 0 and beta = 0 (it writes nothing) and g = 0
        # (it keeps the state as it is), so the final state is the last real token's
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    n, BH = (N + pad) // C, B * h  # chunks; the sequences' heads, one batch of matrices
    q = q.reshape(BH, n, C, d_k) * d_k**-0.5  # (BH, n, C, d_k)
    k = k.reshape(BH, n, C, d_k)  # (BH, n, C, d_k)
    v = v.reshape(BH, n, C, d_v)  # (BH, n, C, d_v)
    g, beta = g.reshape(BH, n, C), beta.reshape(BH, n, C)  # (BH, n, C)
    S = S.reshape(BH, d_k, d_v)  # (BH, d_k, d_v)

    # inside every chunk at once
    gamma = g.cumsum(-1)  # (BH, n, C): log of the decay from the chunk's start to token i
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()  # (C, C): j ≤ i
    D = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(~causal, -torch.inf).exp()
    # D (BH, n, C, C): the decay from token j to token i, 0 for j > i
    k_beta = k * beta[..., None]  # (BH, n, C, d_k): β_i k_i
    W = v * beta[..., None]  # (BH, n, C, d_v): β_i v_i, what each token writes without erase
    K_c = None
    if erase:
        L = (k_beta @ k.mT * D).tril(-1)  # (BH, n, C, C)
        eye = torch.eye(C, dtype=q.dtype, device=q.device).expand_as(L)
        T = torch.linalg.solve_triangular(L, eye, upper=False, unitriangular=True)  # (I + L)⁻¹
        W = T @ W  # (BH, n, C, d_v)
        K_c = T @ (k_beta * gamma.exp()[..., None])  # (BH, n, C, d_k)
    # the keys decayed to the chunk's end and the whole chunk's decay (for the state), the
    # queries decayed from the chunk's start (to read the state), q_i·k_j decayed from j to i
    k_state = (k * (gamma[..., -1:] - gamma).exp()[..., None]).mT  # (BH, n, d_k, C)
    chunk_decay = gamma[..., -1].exp()[..., None, None]  # (BH, n, 1, 1)
    q_state = q * gamma.exp()[..., None]  # (BH, n, C, d_k)
    P = q @ k.mT * D  # (BH, n, C, C), j ≤ i

    # across chunks, through the state: the only loop, three products per chunk (each
    # baddbmm(A, X, Y) = A + X @ Y in one pass). Chunk c's tokens write U = W − K_c S, read
    # the state they started with plus their own writes, and hand on the decayed state
    o = v.new_empty(BH, n, C, d_v)
    for c in range(n):
        U = W[:, c] if K_c is None else torch.baddbmm(W[:, c], K_c[:, c], S, alpha=-1)
        o[:, c] = torch.baddbmm(P[:, c] @ U, q_state[:, c], S)  # (BH, C, d_v)
        S = torch.baddbmm(S * chunk_decay[:, c], k_state[:, c], U)  # (BH, d_k, d_v)
    return o.reshape(B, h, n * C, d_v)[:, :, :N], S.reshape(B, h, d_k, d_v)


def delta_rule(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    chunk_size: int = 64,
    initial_state: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The delta rule, S_t = S_{t-1} + β_t k_t (v_t − S_{t-1}ᵀ k_t)ᵀ: the gated rule with g = 0.

    q, k (B, h, N, d_k), v (B, h, N, d_v), beta (B, h, N) in [0, 1], initial_state
    (B, h, d_k, d_v) or None -> (o (B, h, N, d_v), the state after the last token).
    """
    _check_tensors({"q": q, "beta": beta})
    g = beta.new_zeros(q.shape[:3])  # (B, h, N): no decay
    return gated_delta_rule(q, k, v, g, beta, chunk_size, initial_state)


# ---------------------------------------------------------------------------------------------
# input checks: shapes named with what they got and what they need, g ≤ 0, beta in [0, 1]


def _shape(x) -> str:
    return str(tuple(x.shape)) if isinstance(x, Tensor) else type(x).__name__


def _check_tensors(named: dict[str, Tensor | None]) -> None:
    """Every argument a floating tensor, all of one dtype and on one device."""
    given = {name: x for name, x in named.items() if x is not None}
    for name, x in given.items():
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
        if not x.is_floating_point():
            raise TypeError(f"{name} must hold floating-point numbers; got dtype {x.dtype}")
    first, x0 = next(iter(given.items()))
    for name, x in given.items():
        if x.dtype != x0.dtype or x.device != x0.device:
            raise TypeError(
                f"{name} is {x.dtype} on {x.device} but {first} is {x0.dtype} on {x0.device}; "
                "expected one dtype and one device for every argument"
            )


def _check_gates(g: Tensor | None, beta: Tensor | None) -> None:
    if g is not None and g.numel() and g.max() > 0:
        raise ValueError(
            f"g holds log-decays, so every entry must be ≤ 0 (a decay exp(g) of at most 1); "
            f"got a maximum of {g.max().item():.3g}"
        )
    if beta is not None and beta.numel() and (beta.min() < 0 or beta.max() > 1):
        raise ValueError(
            f"beta is a write strength and must lie in [0, 1]; got values from "
            f"{beta.min().item():.3g} to {beta.max().item():.3g}"
        )


def _check_sequence(q, k, v, g=None, beta=None, initial_state=None) -> Tensor:
    """Check a sequence's inputs; return the initial state (zeros if None given)."""
    _check_tensors({"q": q, "k": k, "v": v, "g": g, "beta": beta, "initial_state": initial_state})
    if q.dim() != 4:
        raise ValueError(f"q has shape {_shape(q)}; expected (B, h, N, d_k)")
    B, h, N, d_k = q.shape
    if k.shape != q.shape:
        raise ValueError(f"k has shape {_shape(k)}; expected (B, h, N, d_k) = {tuple(q.shape)}")
    if v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"v has shape {_shape(v)}; expected (B, h, N, d_v) with (B, h, N) = {(B, h, N)} from q"
        )
    d_v = v.shape[-1]
    for name, x in (("g", g), ("beta", beta)):
        if x is not None and x.shape != (B, h, N):
            raise ValueError(
                f"{name} has shape {_shape(x)}; expected (B, h, N) = {(B, h, N)} from q, "
                "one number per token and head"
            )
    _check_gates(g, beta)
    if initial_state is None:
        return q.new_zeros(B, h, d_k, d_v)
    if initial_state.shape != (B, h, d_k, d_v):
        raise ValueError(
            f"initial_state has shape {_shape(initial_state)}; expected (B, h, d_k, d_v) = "
            f"{(B, h, d_k, d_v)} from q and v"
        )
    return initial_state


def _check_step(state, q, k, v, g, beta) -> None:
    _check_tensors({"state": state, "q": q, "k": k, "v": v, "g": g, "beta": beta})
    if state.dim() != 4:
        raise ValueError(f"state has shape {_shape(state)}; expected (B, h, d_k, d_v)")
    B, h, d_k, d_v = state.shape
    needs = {"q": (B, h, d_k), "k": (B, h, d_k), "v": (B, h, d_v), "g": (B, h), "beta": (B, h)}
    for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
        if x.shape != needs[name]:
            what = {"q": "(B, h, d_k)", "k": "(B, h, d_k)", "v": "(B, h, d_v)"}.get(name, "(B, h)")
            raise ValueError(
                f"{name} has shape {_shape(x)}; expected {what} = {needs[name]} from state "
                f"{tuple(state.shape)} (one token)"
            )
    _check_gates(g, beta)
