"""Checkers for notebook 04 (multi-head attention in PyTorch).

- `check_numpy_to_torch(fn)`: fn(W_q, W_k, W_v, W_o) -> (in_proj_weight, out_proj_weight),
  the numpy weights of notebook 03 in `nn.MultiheadAttention`'s layout;
- `check_causal_attn_mask(fn)`: fn(L) -> the (L, L) causal `attn_mask` in
  `nn.MultiheadAttention`'s convention (True = may NOT attend);
- `check_key_padding_mask(fn)`: fn(lengths, S) -> the (B, S) `key_padding_mask`
  (True on the padding).

One rule for every checker (see `_base`): the values are judged, not the container.
Tensors pass on any device, with `requires_grad=True` or as an `nn.Parameter`. A numpy
array (or a nested list) with the right values passes too, with a note that PyTorch
needs a tensor (`torch.from_numpy`). A mask may be bool (True = may NOT attend) or
float (added to the scores: 0 where allowed, -inf or a very negative number where
blocked); an integer mask is rejected, as `nn.MultiheadAttention` rejects it.

It reads tensors without importing torch; like the rest of the PyTorch notebook's code
it is not part of `mha_lib.exercises`'s namespace: notebooks write
`from mha_lib.exercises.nb04 import ...`.
"""

from __future__ import annotations

import numpy as np

from ._base import Note, as_array, checker, close, is_tensor, run, to_numpy

__all__ = ["check_causal_attn_mask", "check_key_padding_mask", "check_numpy_to_torch"]

_NOT_A_TENSOR = "{} not a tensor; nn.MultiheadAttention needs one: torch.as_tensor(...)"


# ---------------------------------------------------------------------------- weights


def _weights(C: int, seed: int):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((C, C)) for _ in range(4)]  # W_q, W_k, W_v, W_o


def _block_mistake(in_proj: np.ndarray, Ws: list[np.ndarray]) -> str:
    """Say what is wrong with in_proj_weight (3C, C), one block of C rows at a time."""
    C = Ws[0].shape[0]
    names = ("W_q", "W_k", "W_v")
    if close(in_proj, np.concatenate(Ws)):
        return (
            "the projections are not transposed: torch's Linear stores weight as (out, in) "
            "and computes X @ weight.T, so in_proj_weight = [W_q.T; W_k.T; W_v.T]"
        )
    for i, block in enumerate(np.split(in_proj, 3)):  # each (C, C)
        if close(block, Ws[i].T):
            continue
        if close(block, Ws[i]):
            return f"block {i} ({names[i]}) is not transposed: every block is W.T"
        if any(close(block, W.T) or close(block, W) for W in Ws):
            return "the three blocks are in the wrong order: in_proj_weight is [W_q; W_k; W_v]"
        rows = f"rows {i * C}:{(i + 1) * C}"
        return f"wrong values in block {i} of in_proj_weight ({rows}); expected {names[i]}.T"
    return "wrong values in in_proj_weight: expected [W_q.T; W_k.T; W_v.T]"


def _weights_problem(pair, W_q, W_k, W_v, W_o) -> str | None:
    """What is wrong with a learner's (in_proj_weight, out_proj_weight), or None."""
    C = W_q.shape[0]
    (in_proj, problem), (out_proj, problem_out) = (as_array(w, None) for w in pair)
    if problem or problem_out:
        return "expected a pair of arrays or tensors (in_proj_weight, out_proj_weight)"
    if in_proj.shape == (C, C) and out_proj.shape == (3 * C, C):
        return "the pair is in the wrong order: return (in_proj_weight, out_proj_weight)"
    if in_proj.shape == (3, C, C):
        return (
            f"in_proj_weight has shape (3, C, C) = {in_proj.shape}: concatenate the blocks "
            f"along the rows (torch.cat or np.concatenate), (3C, C) = {(3 * C, C)}, not stack"
        )
    if in_proj.shape == (C, 3 * C):
        return (
            f"in_proj_weight has shape (C, 3C) = {in_proj.shape}; expected (3C, C) = "
            f"{(3 * C, C)}: torch stores the projections stacked along the rows, each as (out, in)"
        )
    if in_proj.shape != (3 * C, C):
        return f"in_proj_weight has shape {in_proj.shape}; expected (3C, C) = {(3 * C, C)}"
    if out_proj.shape != (C, C):
        return f"out_proj_weight has shape {out_proj.shape}; expected (C, C) = {(C, C)}"
    expected = np.concatenate([W_q.T, W_k.T, W_v.T])  # (3C, C)
    if not close(in_proj, expected):
        if close(in_proj, expected, tol=1e-2):
            return "in_proj_weight is right only to about 1e-3: use float32 or float64, not float16"
        return _block_mistake(in_proj, [W_q, W_k, W_v])
    if not close(out_proj, W_o.T):
        if close(out_proj, W_o):
            return "out_proj_weight is not transposed: out_proj is a Linear too, so it holds W_o.T"
        return "wrong values in out_proj_weight: expected W_o.T"
    return None


@checker("numpy_to_torch")
def check_numpy_to_torch(fn):
    """Check fn(W_q, W_k, W_v, W_o) -> (in_proj_weight (3C, C), out_proj_weight (C, C)).

    Tensors (any device, requires_grad, nn.Parameter) and float32 are fine; numpy arrays
    pass with a note.
    """
    for C, seed in ((6, 0), (4, 1), (5, 2)):
        Ws = _weights(C, seed)  # numpy layout: X @ W, each (C, C)
        result, problem = run(fn, *Ws, names=("W_q", "W_k", "W_v", "W_o"))
        if problem is None and (not isinstance(result, (tuple, list)) or len(result) != 2):
            problem = "expected a pair (in_proj_weight, out_proj_weight)"
        problem = problem or _weights_problem(result, *Ws)
        if problem is not None:
            return problem
    if not all(is_tensor(w) for w in result):
        return Note(_NOT_A_TENSOR.format("a weight is"))
    return None


# ---------------------------------------------------------------------------- masks


def _blocked(result, shape: tuple[int, ...]):
    """A learner's mask as a bool array, True where blocked, or (None, what is wrong)."""
    try:
        values = to_numpy(result)
    except (TypeError, ValueError, RuntimeError):
        return None, f"the mask must be a bool tensor; got {type(result).__name__}"
    if values.dtype == object or values.dtype.kind in "USV":
        return None, f"the mask must be a bool tensor; got {type(result).__name__}"
    if values.shape != shape:
        return None, f"the mask has shape {values.shape}; expected {shape}"
    if values.dtype == np.bool_:
        return values, None
    if not np.issubdtype(values.dtype, np.floating):
        return None, (
            f"the mask has dtype {getattr(result, 'dtype', values.dtype)}; "
            "nn.MultiheadAttention takes bool "
            "(True = may NOT attend) or float (added to the scores), not integers"
        )
    if np.isnan(values).any() or (values > 0).any():
        if np.isin(values, (0.0, 1.0)).all():
            return None, (
                "a float mask is ADDED to the scores, so 1.0 blocks nothing; return a bool "
                "mask (True = may NOT attend) or a float mask of 0 and -inf"
            )
        return None, "a float mask must be 0 (may attend) or -inf (blocked); it has NaN or > 0"
    if ((values < 0) & (values > -1e4)).any():
        return None, (
            f"a float mask of 0 and {values.min():g} only lowers the scores a little; blocked "
            "entries must be -inf (or a very negative number such as -1e9)"
        )
    return values < 0, None  # 0 = may attend, -inf or <= -1e4 = blocked


def _mask_verdict(result, blocked, expected, wrong: dict[str, np.ndarray | None]) -> str | None:
    """Compare a learner's blocked entries with the expected ones, naming a known mistake.

    The first entry of `wrong` is the message for an inverted mask, the last the
    message for entries that match no known mistake.
    """
    if np.array_equal(blocked, expected):
        return None if is_tensor(result) else Note(_NOT_A_TENSOR.format("the mask is"))
    messages = list(wrong)
    if np.array_equal(blocked, ~expected):
        return messages[0]
    if not blocked.any():
        return "it blocks nothing: True (or -inf) marks the keys a query may NOT attend to"
    for message in messages[1:-1]:
        if wrong[message] is not None and np.array_equal(blocked, wrong[message]):
            return message
    return messages[-1]


@checker("causal_attn_mask")
def check_causal_attn_mask(fn):
    """Check fn(L) -> (L, L) attn_mask, True (or -inf) above the diagonal: query i may not
    attend to keys j > i. Bool or float (0 / -inf); a numpy array passes with a note."""
    for L in (4, 1, 7):
        ones = np.ones((L, L), dtype=bool)
        expected = np.triu(ones, 1)  # True = may NOT attend
        result, problem = run(fn, L)
        if problem is None:
            blocked, problem = _blocked(result, (L, L))
            if problem and "shape" in problem:
                problem += f" = (L, L) for L = {L}"
        if problem is None:
            problem = _mask_verdict(
                result,
                blocked,
                expected,
                {
                    "it is inverted: True on and below the diagonal is the numpy core's "
                    "convention (True = may attend); nn.MultiheadAttention blocks where the "
                    "mask is True, so use triu(diagonal=1)": None,
                    "it also blocks the diagonal: token i may attend to itself. Token 0 is then "
                    "left with nothing to attend to (a fully masked row, NaN in "
                    "nn.MultiheadAttention); use triu(diagonal=1)": np.triu(ones, 0),
                    "it blocks the past instead of the future: query i (row) must not see keys "
                    "j > i (columns to the right of the diagonal)": np.tril(ones, -1),
                    "off by one: it lets query i see key i + 1; block every j > i, "
                    "triu(diagonal=1)": np.triu(ones, 2),
                    "wrong entries: row i must block exactly the columns j > i": None,
                },
            )
        if problem is not None and not isinstance(problem, Note):
            return problem
    return problem


@checker("key_padding_mask")
def check_key_padding_mask(fn):
    """Check fn(lengths, S) -> (B, S) key_padding_mask, True (or -inf) on the padding keys,
    positions >= lengths[b]. Bool or float (0 / -inf); a numpy array passes with a note."""
    for lengths, S in (([5, 3, 1], 5), ([2, 4], 6), ([4, 1, 3, 2], 4)):
        B = len(lengths)
        positions = np.arange(S)[None, :]  # (1, S)
        lens = np.array(lengths)[:, None]  # (B, 1)
        expected = positions >= lens  # (B, S), True on padding
        result, problem = run(fn, list(lengths), S)
        if problem is None:
            shape = np.shape(to_numpy(result)) if hasattr(result, "shape") else None
            if shape == (B, 1, 1, S):
                problem = (
                    f"it has the numpy core's shape (B, 1, 1, M) = {shape}; "
                    "nn.MultiheadAttention's key_padding_mask is (B, S)"
                )
            elif shape == (S, B) and S != B:
                problem = f"it is transposed, shape (S, B) = {shape}: one row per sequence, (B, S)"
            elif shape == (B, max(lengths)) and max(lengths) != S:
                problem = (
                    f"it is max(lengths) = {max(lengths)} wide; the batch is padded to S = {S} "
                    "tokens: use the argument S"
                )
        if problem is None:
            blocked, problem = _blocked(result, (B, S))
        if problem is None:
            problem = _mask_verdict(
                result,
                blocked,
                expected,
                {
                    "it is inverted: True must mark the padding (the keys to ignore), not the "
                    "real tokens": None,
                    "off by one: sequence b has real tokens at positions 0 .. lengths[b] - 1 "
                    "and padding from position lengths[b] on": positions > lens,
                    "off by one: position lengths[b] - 1 is the last real token, not "
                    "padding": positions >= lens - 1,
                    "it pads at the start: the real tokens come first, the padding last": (
                        positions < S - lens
                    ),
                    "it is transposed: row b is sequence b, column j is position j": (
                        expected.T if B == S else None
                    ),
                    "wrong entries: row b must be True exactly at positions >= lengths[b]": None,
                },
            )
        if problem is not None and not isinstance(problem, Note):
            return problem
    return problem
