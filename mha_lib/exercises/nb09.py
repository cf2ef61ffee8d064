"""Checkers for notebook 09 (FlashAttention as a Triton kernel).

- `check_logsumexp_kernel(kernel)`: a `@triton.jit` kernel
  `kernel(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr)`, one program
  instance per row, that walks the row in blocks of BLOCK columns keeping a running
  max and a running sum (the online softmax's bookkeeping) and stores the row's
  log-sum-exp at out_ptr + row. The checker launches it under the interpreter on
  rows whose length is and is not a multiple of BLOCK, with NaN stored just past
  the end of each row, so a load without `mask=` shows up;
- `check_causal_key_end(fn)`: fn(start_q, block_q, N, M, causal) -> one past the
  last key a causal query block may see, the bound of the forward kernel's loop
  over keys. The checker counts the tiles the bound makes a kernel visit, over
  every query block, and compares with the fewest that see every allowed key;
- `check_backward_tile(fn)`: fn(q_i, k_j, v_j, do_i, lse_i, delta_i) -> (dq_i, dk_j,
  dv_j), the shares of one (query block, key block) tile in the three gradients, the
  body of the backward kernels' loops in torch. The checker runs it on every tile of a
  case with partial tiles and block_q != block_k, and sums the shares into the full
  gradients, which must equal autograd's through naive attention.

This module imports torch and triton (through `mha_lib.efficient.triton_flash`, which
chooses the interpreter on a machine without a GPU), so `mha_lib.exercises` does
not import it: notebook 09 writes `from mha_lib.exercises.nb09 import ...`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..efficient import triton_flash as ta
from ._base import as_array, checker, close, run

__all__ = ["check_backward_tile", "check_causal_key_end", "check_logsumexp_kernel"]


# ---------------------------------------------------------------------------- log-sum-exp kernel


def _is_kernel(fn) -> bool:
    """True for a function decorated with @triton.jit (compiled or interpreted)."""
    return hasattr(fn, "__getitem__") and callable(getattr(fn, "fn", None))


def _online_lse(row, block, *, rescale=True, sign=1, add_m=True, pad=None, reset=False):
    """The blocked log-sum-exp of one row (float64) and its usual mistakes."""
    n = len(row)
    m, s = -math.inf, 0.0
    for j0 in range(0, n, block):
        x = list(row[j0 : j0 + block])
        if pad is not None:
            x += [pad] * (block - len(x))  # what a load returns where the mask is False
        if reset:
            m, s = -math.inf, 0.0
        m_new = max(m, max(x))
        factor = math.exp(sign * (m - m_new)) if rescale and m > -math.inf else 1.0
        s = s * factor + sum(math.exp(xi - m_new) for xi in x)
        m = m_new
    return (m if add_m else 0.0) + math.log(s)


def _lse_mistakes(rows, block) -> dict[str, np.ndarray]:
    def each(**kw):
        return np.array([_online_lse(r, block, **kw) for r in rows])

    return {
        "the masked-out columns of the last block are loaded as 0 and count as exp(0 - m): "
        "load with other=-float('inf') so that they add exp(-inf) = 0": each(pad=0.0),
        "the running sum is not rescaled when the max grows: s = s * exp(m - m_new) + ...": each(
            rescale=False
        ),
        "the rescale factor is upside down: exp(m - m_new) (at most 1), not exp(m_new - m)": each(
            sign=-1
        ),
        "the result forgets the max: log-sum-exp = m + log(s), with s summed relative to m": each(
            add_m=False
        ),
        "m and s are reset inside the loop over blocks: only the last block is counted; "
        "initialise them once, before the loop": each(reset=True),
        "every step of the loop loads the same first block: the columns of the block that "
        "starts at `start` are start + tl.arange(0, BLOCK)": np.array(
            [_online_lse(r[:block], block) + math.log(-(-len(r) // block)) for r in rows]
        ),
        "the loop misses the last, partial block: loop over range(0, n_cols, BLOCK) and let the "
        "mask switch off the columns past the end": np.array(
            [
                _online_lse(r[: len(r) // block * block], block) if len(r) >= block else math.nan
                for r in rows
            ]
        ),
        "the result mixes bases: m + tl.log2(s); with tl.exp the sum is in base e, so the result "
        "is m + tl.log(s)": np.array(
            [_online_lse(r, block, add_m=False) / math.log(2) + max(r) for r in rows]
        ),
        "it divides the sum by n_cols (a log-mean-exp): the log-sum-exp is m + log(s), "
        "without dividing": each() - math.log(len(rows[0])),
    }


def _lse_cases():
    """(rows (R, n), BLOCK): a row length that is not a multiple of BLOCK first."""
    gen = torch.Generator().manual_seed(9)
    cases = []
    for R, n, block in ((3, 37, 16), (2, 5, 16), (2, 48, 16)):
        rows = torch.randn(R, n, generator=gen, dtype=torch.float64) * 3
        rows[:, n // 2 :] += 6.0  # the max grows in a later block, so rescaling matters
        rows[0] += 95.0  # exp without the max subtracted overflows float32 here
        cases.append((rows.float(), block))
    return cases


_UNSET = -12345.0  # what out holds before the kernel runs


def _launch(kernel, rows: torch.Tensor, block: int):
    """Run the kernel over rows stored with NaN past each row's end; (out, problem)."""
    R, n = rows.shape
    stride = -(-n // block) * block + 5  # room for a whole last block of NaN, and more
    x = torch.full((R, stride), math.nan, dtype=torch.float32, device=ta.DEVICE)
    x[:, :n] = rows.to(ta.DEVICE)
    out = torch.full((R,), _UNSET, dtype=torch.float32, device=ta.DEVICE)
    if not _is_kernel(kernel):
        _, problem = run(kernel, x, out, n, stride, block)
        raised = problem is not None and problem.startswith("your function raised")
        return None, problem if raised else (
            f"expected a @triton.jit kernel; got {type(kernel).__name__} (decorate the "
            "function with @triton.jit)"
        )
    _, problem = run(lambda: kernel[(R,)](x, out, n, stride, BLOCK=block) or 0)
    if problem is not None:
        return None, problem
    if not torch.equal(x[:, n:].isnan(), torch.ones_like(x[:, n:], dtype=torch.bool)):
        return None, "the kernel writes into x: it must only read x and store into out_ptr"
    if R > 1 and out[0] != _UNSET and torch.all(out[1:] == _UNSET):
        return None, (
            "only out_ptr[0] is written: every program stores at out_ptr; store row r's result "
            "at out_ptr + row"
        )
    if torch.any(out == _UNSET):
        return None, "out_ptr + row holds nothing for some rows: store each row's result there"
    return out.cpu().double().numpy(), None


@checker("logsumexp_kernel")
def check_logsumexp_kernel(kernel):
    """Check a blocked log-sum-exp kernel against torch.logsumexp, row by row."""
    problem = None
    for rows, block in _lse_cases():
        n = rows.shape[1]
        got, problem = _launch(kernel, rows, block)
        if problem is None:
            problem = _diagnose_lse(got, rows.double(), block)
        if problem is not None:
            if not problem.startswith(("your function raised", "expected a @triton", "out_ptr")):
                problem += f" [rows of {n} columns, BLOCK = {block}]"
            break
    return problem


def _diagnose_lse(got: np.ndarray, rows: torch.Tensor, block: int) -> str | None:
    n = rows.shape[1]
    expected = torch.logsumexp(rows, dim=1).numpy()  # (R,)
    if np.allclose(got, expected, rtol=1e-5, atol=1e-5):
        return None
    if np.any(np.isnan(got)):
        if not np.isnan(got[0]) and n % block:
            return (
                "rows after the first are wrong: row r starts at x_ptr + r * stride_row "
                "(the rows are not packed one after the other)"
            )
        if n % block:
            return (
                "NaN: the last block's loads read past the end of the row (there lies "
                "whatever follows in memory); load with mask=cols < n_cols"
            )
        return "out_ptr + row holds NaN for some rows: store one result per row"
    if np.all(np.isinf(got)) and len(got) > 1:  # rows 1.. hold small values: no plain overflow
        return (
            "every row is inf, even rows of small numbers: the block's terms use the max from "
            "before the block (m = -inf at the first block, so exp(x - m) = inf); use the "
            "new max, exp(x - m_new)"
        )
    if np.any(np.isinf(got)) or not np.all(np.isfinite(got)):
        return "exp overflowed: subtract the running max before exp, exp(x - m)"
    rows_list = rows.tolist()
    for message, wrong in _lse_mistakes(rows_list, block).items():
        if np.allclose(got, wrong, rtol=1e-5, atol=1e-5) and not np.allclose(
            wrong, expected, rtol=1e-5, atol=1e-5
        ):
            return message
    if np.allclose(got[0], expected[0], rtol=1e-5, atol=1e-5):
        return (
            "rows after the first are wrong: row r starts at x_ptr + r * stride_row "
            "(the rows are not packed one after the other)"
        )
    if np.allclose(got, expected / math.log(2), rtol=1e-5) or np.allclose(
        got * math.log(2), expected, rtol=1e-4
    ):
        return "the result is in base 2: tl.exp goes with tl.log (tl.exp2 with tl.log2)"
    return "wrong values: expected log(sum(exp(x))) of each row (torch.logsumexp)"


# ---------------------------------------------------------------------------- causal key end


_CASES = (  # (N, M, block_q, block_k, causal): square, not multiples, N != M both ways
    (64, 64, 16, 16, "top_left"),
    (37, 53, 16, 16, "bottom_right"),
    (53, 37, 16, 16, "top_left"),
    (37, 53, 16, 16, "top_left"),
    (50, 29, 16, 8, "bottom_right"),
    (45, 46, 8, 16, "bottom_right"),  # a block's last key opens a key tile: off by one shows
    (29, 40, 8, 16, None),
)


def _tiles(ends, N, M, block_q, block_k, causal) -> tuple[int, int]:
    """(tiles the bounds `ends`, one per query block, make a kernel visit; tiles needed)."""
    need = [ta.causal_key_end(s, block_q, N, M, causal) for s in range(0, N, block_q)]
    return tuple(sum(max(0, -(-e // block_k)) for e in es) for es in (ends, need))


def _key_end_mistakes() -> dict[str, object]:
    """Each plausible wrong bound, by the message that names its mistake."""

    def last(s, b, N):
        return min(s + b, N) - 1

    def off(N, M, c):
        return M - N if c == "bottom_right" else 0

    def causal(rule):  # the rule for a causal mask; every key without one
        return lambda s, b, N, M, c: M if c is None else rule(s, b, N, M, c)

    return {
        "it visits every key block: a causal query block needs keys only up to its last "
        "row (+ M - N when bottom-right); the tiles above the diagonal are all masked": (
            lambda s, b, N, M, c: M
        ),
        "it stops before the diagonal tile: the block's rows see keys up to start_q + "
        "block_q - 1 (+ offset), so the loop must run to one past that": causal(
            lambda s, b, N, M, c: max(0, min(M, s + off(N, M, c)))
        ),
        "it is one short: the last visible key is last_row + offset, and the bound is one "
        "past it, last_row + offset + 1": causal(
            lambda s, b, N, M, c: max(0, min(M, last(s, b, N) + off(N, M, c)))
        ),
        "it is one too many: the block's last row is min(start_q + block_q, N) - 1, and "
        "the bound is one past its last key, last_row + offset + 1 (not + 2)": causal(
            lambda s, b, N, M, c: max(0, min(M, last(s, b, N) + off(N, M, c) + 2))
        ),
        "it ignores the alignment: with bottom_right, query i sees keys up to i + M - N": causal(
            lambda s, b, N, M, c: max(0, min(M, last(s, b, N) + 1))
        ),
        "the offset has the wrong sign: bottom_right shifts the diagonal by M - N, not N - M": (
            causal(lambda s, b, N, M, c: max(0, min(M, last(s, b, N) - off(N, M, c) + 1)))
        ),
        "the bottom-right offset is one short: query i sees keys up to i + M - N, so the "
        "offset is M - N, not M - N - 1": causal(
            lambda s, b, N, M, c: max(
                0, min(M, last(s, b, N) + off(N, M, c) - (c == "bottom_right") + 1)
            )
        ),
        "the bottom-right offset is one too many: query i sees keys up to i + M - N, so the "
        "offset is M - N, not M - N + 1": causal(
            lambda s, b, N, M, c: max(
                0, min(M, last(s, b, N) + off(N, M, c) + (c == "bottom_right") + 1)
            )
        ),
        "it is not clamped to M: past the last key there is nothing to visit": causal(
            lambda s, b, N, M, c: max(0, last(s, b, N) + off(N, M, c) + 1)
        ),
        "it is clamped to M - 1: the bound is one past the last key the block may see, "
        "so when that key is the last one, M - 1, the bound is M": causal(
            lambda s, b, N, M, c: max(0, min(M - 1, last(s, b, N) + off(N, M, c) + 1))
        ),
        "it is not clamped to 0: with bottom_right and N > M, the first query blocks may "
        "see no key at all, and their bound is 0, not a negative number": causal(
            lambda s, b, N, M, c: min(M, last(s, b, N) + off(N, M, c) + 1)
        ),
        "it uses the block's first row, start_q, where it needs its last, min(start_q + "
        "block_q, N) - 1: every row of the block must see its keys": causal(
            lambda s, b, N, M, c: max(0, min(M, s + off(N, M, c) + 1))
        ),
        "it is clamped to N: the bound counts keys, so clamp it to M, the number of keys": causal(
            lambda s, b, N, M, c: max(0, min(N, last(s, b, N) + off(N, M, c) + 1))
        ),
        "with bottom_right it visits every key block: bottom_right is causal too, the diagonal "
        "shifted by M - N (query i sees keys up to i + M - N)": (
            lambda s, b, N, M, c: M if c != "top_left" else max(0, min(M, last(s, b, N) + 1))
        ),
        "the top-left mask has no offset: query i sees keys up to i; M - N shifts the diagonal "
        "for bottom_right only": causal(
            lambda s, b, N, M, c: max(0, min(M, last(s, b, N) + M - N + 1))
        ),
        "the last query block is partial: its last row is N - 1, not start_q + block_q - 1": (
            causal(lambda s, b, N, M, c: max(0, min(M, s + b + off(N, M, c))))
        ),
        "the last query block is partial and its last row is N - 1: min(start_q + block_q, "
        "N) - 1, not min(start_q + block_q - 1, N)": causal(
            lambda s, b, N, M, c: max(0, min(M, min(s + b - 1, N) + off(N, M, c) + 1))
        ),
        "without a causal mask (causal=None) every query block sees all M keys": (
            lambda s, b, N, M, c: ta.causal_key_end(s, b, N, M, c or "top_left")
        ),
    }


def _ends_of(fn, N, M, block_q, causal):
    """fn's bound for every query block of one case: (list of ints, None) or (None, why)."""
    ends = []
    for start_q in range(0, N, block_q):
        result, problem = run(fn, start_q, block_q, N, M, causal)
        if problem is not None:
            return None, problem
        if (
            isinstance(result, torch.Tensor)
            and result.numel() == 1
            and not result.is_floating_point()
        ):
            result = int(result)
        if isinstance(result, bool) or not isinstance(result, int | np.integer):
            return None, f"expected an int; got {type(result).__name__}"
        ends.append(int(result))
    return ends, None


@checker("causal_key_end")
def check_causal_key_end(fn):
    """Check fn(start_q, block_q, N, M, causal) -> int over every query block of a few
    shapes, counting the (query block, key block) tiles the bound visits.

    A wrong answer is named by the known mistake that gives the same bounds on every
    case; failing that, by the one that does on the first case it gets wrong."""
    got = {}
    for case in _CASES:
        ends, problem = _ends_of(fn, *case[:3], case[4])
        if problem is not None:
            return problem
        got[case] = ends
    right = {
        c: [ta.causal_key_end(s, c[2], c[0], c[1], c[4]) for s in range(0, c[0], c[2])]
        for c in _CASES
    }
    wrong_cases = [c for c in _CASES if got[c] != right[c]]
    if not wrong_cases:
        return None
    # where to show it: the first case whose tile count it changes, else the first it gets wrong
    shown = next((c for c in wrong_cases if len(set(_tiles(got[c], *c))) == 2), wrong_cases[0])
    N, M, block_q, block_k, causal = shown
    visited, needed = _tiles(got[shown], *shown)
    start_q, end, bound = next(
        (s, e, r) for s, e, r in zip(range(0, N, block_q), got[shown], right[shown]) if e != r
    )
    where = f"[N = {N}, M = {M}, block_q = {block_q}, block_k = {block_k}, causal = {causal!r}: "
    if visited != needed:
        where += f"{visited} tiles visited, {needed} needed]"
    else:
        where += f"the tiles needed, {needed}, but the block at start_q = {start_q} stops "
        where += f"at {end}, not {bound}]"
    mistakes = _key_end_mistakes()

    def bounds(rule, c):
        return [rule(s, c[2], c[0], c[1], c[4]) for s in range(0, c[0], c[2])]

    for message, rule in mistakes.items():  # the same bounds everywhere
        if all(bounds(rule, c) == got[c] for c in _CASES):
            return f"{message} {where}"
    for message, rule in mistakes.items():  # the same bounds on the first case it gets wrong
        if bounds(rule, wrong_cases[0]) == got[wrong_cases[0]]:
            return f"{message} {where}"
    if end < bound:
        return (
            f"the block at start_q = {start_q} stops at key {end}, but its rows may see "
            f"keys up to {bound - 1}: those keys would be left out {where}"
        )
    return (
        f"the block at start_q = {start_q} runs to key {end}; {bound} suffice: every "
        f"key from {bound} on is masked for all its rows {where}"
    )


# ---------------------------------------------------------------------------- backward tile


_TILE_CASE = (37, 29, 12, 16, 8)  # (N, M, d, block_q, block_k): partial tiles, d, b_q, b_k apart


def _backward_case():
    """q, k, v, do, o, lse, delta (float64, one batch and head) and the full gradients."""
    N, M, d = _TILE_CASE[:3]
    gen = torch.Generator().manual_seed(23)
    q, k, v = (torch.randn(n, d, generator=gen, dtype=torch.float64) * 1.5 for n in (N, M, M))
    do = torch.randn(N, d, generator=gen, dtype=torch.float64)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    scores = leaves[0] @ leaves[1].T / math.sqrt(d)  # (N, M)
    o = torch.softmax(scores, dim=-1) @ leaves[2]  # (N, d), autograd through the naive form
    grads = torch.autograd.grad(o, leaves, do)
    lse = torch.logsumexp(scores.detach(), dim=-1)  # (N,)
    delta = (do * o.detach()).sum(dim=-1)  # (N,) rowsum(dO ∘ O)
    return (q, k, v, do, o.detach(), lse, delta), grads


def _tile_grads(
    q_i,
    k_j,
    v_j,
    do_i,
    lse_i,
    delta_i,
    *,
    p_from="lse",
    scale_p="1/√d",
    grads_times="1/√d",
    dq_times=None,
    dk_times=None,
    dv_times="1",
    ds_form="right",
    dv_from="p",
    dp_with="v",
    dq_with="k",
):
    """One tile's (dq_i, dk_j, dv_j), and the usual mistakes (float64)."""
    scale = 1.0 / math.sqrt(q_i.shape[-1])
    factor = {"1/√d": scale, "1": 1.0, "√d": 1.0 / scale}
    s = q_i @ k_j.T * factor[scale_p]  # (b_q, b_k)
    if p_from == "lse":
        p = torch.exp(s - lse_i[:, None])
    elif p_from == "tile_softmax":
        p = torch.softmax(s, dim=-1)
    else:  # "exp": L forgotten
        p = torch.exp(s)
    dp = do_i @ (v_j if dp_with == "v" else k_j).T  # (b_q, b_k)
    if ds_form == "right":
        ds = p * (dp - delta_i[:, None])
    elif ds_form == "no_delta":
        ds = p * dp
    elif ds_form == "no_p":
        ds = dp - delta_i[:, None]
    else:  # "tile_delta": D summed over this tile's keys only
        ds = p * (dp - (p * dp).sum(dim=-1, keepdim=True))
    dq = ds @ (k_j if dq_with == "k" else v_j) * factor[dq_times or grads_times]  # (b_q, d)
    dk = ds.T @ q_i * factor[dk_times or grads_times]  # (b_k, d)
    dv = (p if dv_from == "p" else ds).T @ do_i * factor[dv_times]  # (b_k, d)
    return dq, dk, dv


_TILE_MISTAKES = {
    "the weights are normalised within the tile (a softmax over its b_k keys): rebuild "
    "them from the saved log-sum-exp, P = exp(S - L), which normalises over all M keys": dict(
        p_from="tile_softmax"
    ),
    "the weights forget L: P = exp(S - L), with lse_i, not exp(S)": dict(p_from="exp"),
    "the scores are not scaled when P is rebuilt: S = q kᵀ / √d, then P = exp(S - L)": dict(
        scale_p="1"
    ),
    "the scores are multiplied by √d when P is rebuilt: S = q kᵀ / √d, then P = exp(S - L)": (
        dict(scale_p="√d")
    ),
    "dK lacks the factor 1/√d (dQ has it): the scores were q kᵀ / √d, so dK = dSᵀ Q / √d": dict(
        dk_times="1"
    ),
    "dQ lacks the factor 1/√d (dK has it): the scores were q kᵀ / √d, so dQ = dS K / √d": dict(
        dq_times="1"
    ),
    "dV is multiplied by 1/√d: the scale belongs to the scores, so dQ and dK carry it and "
    "dV = Pᵀ dO does not": dict(dv_times="1/√d"),
    "dQ and dK lack the factor 1/√d: the scores were q kᵀ / √d, so dQ = dS K / √d and "
    "dK = dSᵀ Q / √d": dict(grads_times="1"),
    "the scale has no place anywhere: S = q kᵀ / √d when P is rebuilt, and dQ = dS K / √d, "
    "dK = dSᵀ Q / √d": dict(scale_p="1", grads_times="1"),
    "dQ and dK are multiplied by √d: the factor is 1/√d": dict(grads_times="√d"),
    "dS forgets D: through the softmax, dS = P ∘ (dP - D), not P ∘ dP": dict(ds_form="no_delta"),
    "dS lacks the factor P: dS = P ∘ (dP - D), not dP - D": dict(ds_form="no_p"),
    "D is computed from this tile only (Σ_j P_ij dP_ij over its b_k keys, or rowsum(dO ∘ P V_j), "
    "the same number): D_i runs over all M keys, which a tile does not see; use delta_i = "
    "rowsum(dO ∘ O), given": dict(ds_form="tile_delta"),
    "dV takes the weights, not dS: dV = Pᵀ dO": dict(dv_from="ds"),
    "dP multiplies dO by the keys: dP = dO Vᵀ (the values were weighted, O = P V)": dict(
        dp_with="k"
    ),
    "dQ multiplies dS by the values: dQ = dS K / √d (the scores were q kᵀ)": dict(dq_with="v"),
}

_NAMES = ("dq_i", "dk_j", "dv_j")


def _read_triple(result, shapes):
    """The learner's (dq_i, dk_j, dv_j) as float arrays, or (None, why not)."""
    if isinstance(result, torch.Tensor) or not isinstance(result, tuple | list):
        return None, f"expected a tuple (dq_i, dk_j, dv_j); got {type(result).__name__}"
    if len(result) != 3:
        return None, f"expected a tuple of three, (dq_i, dk_j, dv_j); got {len(result)} items"
    arrays = []
    for name, x in zip(_NAMES, result):
        arr, problem = as_array(x, None, f"{name} as an array")
        if problem is not None:
            return None, problem
        arrays.append(arr)
    got = tuple(a.shape for a in arrays)
    if got != shapes:
        if (got[1], got[0], got[2]) == shapes:
            return None, "the result is in the order (dk_j, dq_i, dv_j): return (dq_i, dk_j, dv_j)"
        for name, g, want in zip(_NAMES, got, shapes):
            if g == want[::-1]:
                return None, f"{name} is transposed: it has shape {g}; expected {want}"
            if g != want:
                return None, (
                    f"{name} has shape {g}; expected {want} (dq_i like q_i, dk_j and dv_j like k_j)"
                )
    return arrays, None


def _judge_tile(arrays, tile) -> str | None:
    expected = [t.numpy() for t in _tile_grads(*tile)]
    if all(close(a, e) for a, e in zip(arrays, expected)):
        return None
    for message, kw in _TILE_MISTAKES.items():
        wrong = [t.numpy() for t in _tile_grads(*tile, **kw)]
        if all(close(a, w) for a, w in zip(arrays, wrong)):
            return message
    bad = [n for n, a, e in zip(_NAMES, arrays, expected) if not close(a, e)]
    if not all(np.all(np.isfinite(a)) for a in arrays):
        return "the result contains inf or NaN: rebuild P as exp(S - L), which is at most 1"
    if all(close(a, e, tol=1e-2) for a, e in zip(arrays, expected)):
        return (
            f"close to the right {', '.join(bad)}, but only to about 1e-3: compute in "
            "float64 or float32 (the inputs' own type), not float16"
        )
    hint = {
        ("dv_j",): "dV = Pᵀ dO, with P = exp(S - L) and S = q kᵀ / √d",
        ("dq_i",): "dQ = dS K / √d",
        ("dk_j",): "dK = dSᵀ Q / √d",
        ("dq_i", "dk_j"): "dV is right, so P is: look at dP = dO Vᵀ and dS = P ∘ (dP - D)",
    }.get(tuple(bad), "start from P = exp(S - L) with S = q kᵀ / √d, then dV = Pᵀ dO")
    return f"wrong values in {', '.join(bad)}: {hint}"


def _shape_hint(problem: str, fn) -> str:
    """A hint for an error about shapes, only when the answer shows the mistake it names:
    an elementwise (broadcast) error that the same answer does not raise on a square tile
    (b_q = b_k) comes from a (b_q,) vector used against a (b_q, b_k) tile; an error of a
    matrix product comes from operands that do not fit."""
    if "cannot be multiplied" in problem or "mat1 and mat2" in problem or "matmul" in problem:
        return (
            " [a matrix product's shapes do not fit: q_i and do_i are (b_q, d), k_j and v_j "
            "(b_k, d); S = q_i k_jᵀ and dP = do_i v_jᵀ take the transposes of k_j and v_j]"
        )
    if "must match the size" in problem or "broadcast" in problem:
        (q, k, v, do, _, lse, delta), _ = _backward_case()
        square = (q[:8], k[:8], v[:8], do[:8], lse[:8], delta[:8])  # b_q = b_k = 8
        _, problem_square = run(fn, *(t.clone() for t in square))
        if problem_square is None or "must match the size" not in problem_square:
            return (
                " [lse_i and delta_i hold one number per query row, shape (b_q,): use them as "
                "lse_i[:, None] and delta_i[:, None] against a (b_q, b_k) tile]"
            )
    return ""


@checker("backward_tile")
def check_backward_tile(fn):
    """Check fn(q_i, k_j, v_j, do_i, lse_i, delta_i) -> (dq_i, dk_j, dv_j), one tile's
    shares of the three gradients, on every tile of a case with partial tiles; the
    shares summed over the tiles must give autograd's gradients through naive attention."""
    (q, k, v, do, _, lse, delta), grads = _backward_case()
    N, M, d, block_q, block_k = _TILE_CASE
    total = [np.zeros((N, d)), np.zeros((M, d)), np.zeros((M, d))]
    for j0 in range(0, M, block_k):  # the dK/dV kernel's order: key blocks outside
        for i0 in range(0, N, block_q):
            i1, j1 = min(i0 + block_q, N), min(j0 + block_k, M)
            tile = (q[i0:i1], k[j0:j1], v[j0:j1], do[i0:i1], lse[i0:i1], delta[i0:i1])
            result, problem = run(fn, *(t.clone() for t in tile))
            if problem is not None:
                return problem + _shape_hint(problem, fn)
            shapes = ((i1 - i0, d), (j1 - j0, d), (j1 - j0, d))
            arrays, problem = _read_triple(result, shapes)
            if problem is None:
                problem = _judge_tile(arrays, tile)
            if problem is not None:
                return f"{problem} [the tile of queries {i0}..{i1 - 1}, keys {j0}..{j1 - 1}]"
            total[0][i0:i1] += arrays[0]
            total[1][j0:j1] += arrays[1]
            total[2][j0:j1] += arrays[2]
    for name, got, want in zip(("dq", "dk", "dv"), total, grads):
        if not close(got, want.numpy(), tol=1e-5):  # every tile was right to 1e-6
            return f"the tiles' {name} summed differ from autograd's gradient"
    return None
