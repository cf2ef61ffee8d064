"""Checkers for notebook 04 (multi-head attention in PyTorch).

- `check_numpy_to_torch(fn)`: fn(W_q, W_k, W_v, W_o) -> (in_proj_weight, out_proj_weight),
  the numpy weights of notebook 03 in `nn.MultiheadAttention`'s layout;
- `check_causal_attn_mask(fn)`: fn(L) -> the (L, L) causal `attn_mask` in
  `nn.MultiheadAttention`'s convention (True = may NOT attend);
- `check_key_padding_mask(fn)`: fn(lengths, S) -> the (B, S) `key_padding_mask`
  (True on the padding);
- `check_attention_forward(fn)`: fn(x, in_proj_weight, out_proj_weight, num_heads) -> (B, N, E),
  the module's forward pass for self-attention without biases or masks (SDPA or written out);
- `check_pre_ln_block(fn)`: fn(x, blk) -> (B, N, E), one pre-LN block with causal
  self-attention, from the parts of a `mha_lib.block.TransformerBlock`.

One rule for every checker (see `_base`): the values are judged, not the container.
Tensors pass on any device, with `requires_grad=True` or as an `nn.Parameter`. A numpy
array (or a nested list) with the right values passes too, with a note that PyTorch
needs a tensor (`torch.from_numpy`). A mask may be bool (True = may NOT attend) or
float (added to the scores: 0 where allowed, -inf or a very negative number where
blocked); an integer mask is rejected, as `nn.MultiheadAttention` rejects it.

The first three read tensors without importing torch; the last two hand the learner torch
tensors and a torch block, so they import torch (and `mha_lib.block`) when they run. Like the
rest of the PyTorch notebook's code this module is not part of `mha_lib.exercises`'s namespace:
notebooks write `from mha_lib.exercises.nb04 import ...`.
"""

from __future__ import annotations

import numpy as np

from ._base import (
    GENERIC,
    Library,
    Note,
    as_array,
    checker,
    close,
    diagnose,
    in_case,
    is_tensor,
    mismatch,
    numpy_habit,
    run,
    to_numpy,
)

__all__ = [
    "check_attention_forward",
    "check_causal_attn_mask",
    "check_key_padding_mask",
    "check_numpy_to_torch",
    "check_pre_ln_block",
]

_NOT_A_TENSOR = "{} not a tensor; nn.MultiheadAttention needs one: torch.as_tensor(...)"


# ---------------------------------------------------------------------------- weights


def _weights(C: int, seed: int):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((C, C)) for _ in range(4)]  # W_q, W_k, W_v, W_o


def _block_mistake(in_proj: np.ndarray, Ws: list[np.ndarray]) -> str:
    """Say what is wrong with in_proj_weight (3C, C), from what each block of C rows holds."""
    C = Ws[0].shape[0]
    names = ("W_q", "W_k", "W_v")
    if close(in_proj, np.concatenate(Ws)):
        return (
            "the projections are not transposed: torch's Linear stores weight as (out, in) "
            "and computes X @ weight.T, so in_proj_weight = [W_q.T; W_k.T; W_v.T]"
        )
    blocks = np.split(in_proj, 3)  # each (C, C)
    held = []  # (j, transposed) for each block: it holds W_j.T or W_j; None: neither
    for block in blocks:
        found = [(j, True) for j, W in enumerate(Ws) if close(block, W.T)]
        found += [(j, False) for j, W in enumerate(Ws) if close(block, W)]
        held.append(found[0] if found else None)
    for i, h in enumerate(held):
        if h is not None and h == (i, False):
            return f"block {i} ({names[i]}) is not transposed: every block is W.T"
    if all(h is not None for h in held):
        shown = "; ".join(f"{names[j]}{'.T' if t else ''}" for j, t in held)
        sources = [j for j, _ in held]
        if len(set(sources)) < 3:
            repeated = next(names[j] for j in sources if sources.count(j) > 1)
            return (
                f"it uses {repeated} for more than one block: in_proj_weight is [{shown}]; "
                "each projection has its own block, [W_q.T; W_k.T; W_v.T]"
            )
        return (
            f"the three blocks are in the wrong order, [{shown}]: in_proj_weight is "
            "[W_q.T; W_k.T; W_v.T]"
        )
    i = next(i for i, block in enumerate(blocks) if not close(block, Ws[i].T))
    rows = f"rows {i * C}:{(i + 1) * C}"
    return f"wrong values in block {i} of in_proj_weight ({rows}); expected {names[i]}.T"


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
        problem = numpy_habit(problem)  # the arguments are numpy arrays
        if problem is None and isinstance(result, dict):
            problem = (
                "it returns a dict: return the pair (in_proj_weight, out_proj_weight), a tuple"
            )
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


def _lengths_as_a_row(fn) -> bool:
    """True when fn, on a batch of B = S sequences (where a row of lengths broadcasts), blocks
    position j of every row by lengths[j]: the lengths were not made a column."""
    lengths, S = [3, 1, 4, 2], 4
    result, problem = run(fn, list(lengths), S)
    if problem is not None:
        return False
    shape = np.shape(to_numpy(result)) if hasattr(result, "shape") else None
    if shape not in ((S,), (1, S), (S, S)):
        return False
    blocked, problem = _blocked(result, shape)
    row = np.arange(S) >= np.array(lengths)  # (S,): position j against lengths[j]
    return problem is None and np.array_equal(
        np.broadcast_to(blocked, (S, S)), np.broadcast_to(row, (S, S))
    )


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
        if problem is not None and problem.startswith(GENERIC[0]) and _lengths_as_a_row(fn):
            return (
                "the lengths are not a column: compare the positions (1, S) with the lengths "
                "as (B, 1), torch.tensor(lengths)[:, None], so that row b uses lengths[b] "
                f"({problem[14:]})"
            )
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


# ---------------------------------------------------------------------------- the forward pass

# (seed, B, N, E, h): d = E / h = 3, then 4 with three heads, then 2 with four
_FORWARD_CASES = ((10, 2, 5, 6, 2), (11, 3, 4, 12, 3), (12, 1, 7, 8, 4))
_FORWARD = "SDPA of the heads of x @ in_proj_weight.T, merged, times out_proj_weight.T"
_NOT_A_TENSOR_OUT = (
    "the output is a numpy array; a module's forward returns a tensor, which autograd can follow"
)


def _forward_inputs(seed: int, B: int, N: int, E: int):
    """Seeded x (B, N, E), in_proj_weight (3E, E), out_proj_weight (E, E), as numpy float64."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, N, E))  # (B, N, E)
    in_proj = rng.standard_normal((3 * E, E)) / np.sqrt(E)  # (3E, E): [W_q; W_k; W_v], (out, in)
    out_proj = rng.standard_normal((E, E)) / np.sqrt(E)  # (E, E): W_o.T
    return x, in_proj, out_proj


def _forward_variant(
    x,
    in_proj,
    out_proj,
    h,
    order=(0, 1, 2),
    transpose_in=True,
    transpose_out=True,
    split="blocks",
    merge="right",
    scale=None,
    causal=False,
    project_out=True,
    axis=-1,
):
    """The forward pass in numpy with one switch flipped (the defaults give the right one)."""
    from ..attention import softmax

    B, N, E = x.shape
    d = E // h
    blocks = np.split(in_proj, 3)  # 3 x (E, E), each (out, in)
    q, k, v = (x @ (blocks[i].T if transpose_in else blocks[i]) for i in order)  # (B, N, E)

    def heads(t):  # (B, N, E) -> (B, h, N, d)
        if split == "over heads":  # (B, N, h, d): attention among the heads of each token
            return t.reshape(B, N, h, d)
        if split == "no transpose":
            return t.reshape(B, h, N, d)
        if split == "interleaved":
            return t.reshape(B, N, d, h).transpose(0, 3, 1, 2)
        return t.reshape(B, N, h, d).transpose(0, 2, 1, 3)

    q, k, v = heads(q), heads(k), heads(v)
    scores = q @ k.swapaxes(-1, -2) / (np.sqrt(d) if scale is None else scale)  # (B, h, N, N)
    if causal:
        scores = np.where(np.tril(np.ones((N, N), dtype=bool)), scores, -np.inf)
    out = softmax(scores, axis=axis) @ v  # (B, h, N, d)
    if split == "over heads" or merge == "no transpose":
        concat = out.reshape(B, N, E)
    else:
        concat = out.transpose(0, 2, 1, 3).reshape(B, N, E)  # (B, N, h*d)
    if not project_out:
        return concat
    return concat @ (out_proj.T if transpose_out else out_proj)  # (B, N, E)


def _forward_mistakes(x, in_proj, out_proj, h) -> dict[str, np.ndarray]:
    """The outputs of the usual wrong forward passes, keyed by what is wrong."""
    E = x.shape[-1]
    args = (x, in_proj, out_proj, h)
    mistakes = {
        "it multiplies by the weights as they are stored: torch keeps them as (out, in), so "
        "every projection is x @ W.T (F.linear(x, W)), in_proj_weight's blocks and "
        "out_proj_weight alike": _forward_variant(*args, transpose_in=False, transpose_out=False),
        "the input projections are not transposed: q = x @ in_proj_weight[:E].T (torch stores "
        "(out, in)), and the same for k and v": _forward_variant(*args, transpose_in=False),
        "out_proj_weight is not transposed: the output is concat @ out_proj_weight.T (torch "
        "stores (out, in))": _forward_variant(*args, transpose_out=False),
        "the output projection is missing: multiply the merged heads by out_proj_weight.T": (
            _forward_variant(*args, project_out=False)
        ),
        "it splits the heads with view(B, h, N, d), which scrambles tokens: view(B, N, h, d), "
        "then transpose(1, 2)": _forward_variant(*args, split="no transpose"),
        "it takes each head's features interleaved (view(B, N, d, h)); head i owns the block "
        "i*d:(i+1)*d, so view(B, N, h, d)": _forward_variant(*args, split="interleaved"),
        "it merges the heads with reshape(B, N, E) straight from (B, h, N, d), which scrambles "
        "tokens: transpose(1, 2) first": _forward_variant(*args, merge="no transpose"),
        "it divides the scores by √E, the model width; each head uses √d with d = E / h "
        "(SDPA's default scale)": _forward_variant(*args, scale=np.sqrt(E)),
        "the scores are not divided by √d (scale=1 in SDPA?): leave SDPA's default scale, "
        "1/√d": _forward_variant(*args, scale=1.0),
        "it is causal (is_causal=True or a mask): this forward pass has no mask, every token "
        "sees every token": _forward_variant(*args, causal=True),
        "it attends over the heads, not the tokens: after view(B, N, h, d) the heads are the "
        "second-last axis, so SDPA mixes the h heads of each token; transpose(1, 2) to "
        "(B, h, N, d) before SDPA, and back after": _forward_variant(*args, split="over heads"),
        "softmax over the wrong axis: each query's weights over the keys (dim=-1) must sum "
        "to 1": _forward_variant(*args, axis=-2),
        "it divides the scores by d; SDPA's default divides by √d": _forward_variant(
            *args, scale=float(E // h)
        ),
    }
    names = ("q", "k", "v")
    for order in ((1, 0, 2), (0, 2, 1), (2, 1, 0), (1, 2, 0), (2, 0, 1)):
        took = ", ".join(f"{n} from block {i}" for n, i in zip(names, order))
        mistakes[
            f"the blocks of in_proj_weight are taken in the wrong order ({took}): rows 0:E hold "
            "W_q, E:2E W_k and 2E:3E W_v (in_proj_weight.chunk(3) gives them in that order)"
        ] = _forward_variant(*args, order=order)
    return mistakes


def _forward_problem(
    fn, seed: int, B: int, N: int, E: int, h: int, transposed: tuple[bool, bool] = (False, False)
) -> str | None:
    """What is wrong with fn on one seeded case, a Note for a numpy answer, or None.

    transposed: hand fn in_proj_weight.T and/or out_proj_weight.T instead, to test an answer
    that uses the weights as they are stored."""
    import torch

    x, in_proj, out_proj = _forward_inputs(seed, B, N, E)
    expected = _forward_variant(x, in_proj, out_proj, h)  # (B, N, E)
    given = (x, in_proj.T if transposed[0] else in_proj, out_proj.T if transposed[1] else out_proj)
    tensors = [torch.from_numpy(a.copy()) for a in given]
    result, problem = run(fn, *tensors, h, names=("x", "in_proj_weight", "out_proj_weight"))
    if problem is None and isinstance(result, (tuple, list)) and len(result) == 2:
        first, second = (as_array(r, None)[0] for r in result)
        if (
            (first is None or first.shape != (B, N, E))
            and second is not None
            and close(second, expected)
        ):
            return "the pair is in the wrong order: a module returns (output, weights)"
        result = result[0]  # a module's (output, weights) pair
    raw = result
    if problem is None:
        result, problem = as_array(result, None)
    if problem is None and result.shape != (B, N, E):
        if result.shape == (B, h, N, E // h):
            return (
                f"it returns the heads, (B, h, N, d) = {result.shape}: merge them, "
                "transpose(1, 2).reshape(B, N, E), and apply out_proj_weight"
            )
        problem = f"expected shape (B, N, E) = {(B, N, E)}; got {result.shape}"
    if problem is None and not close(result, expected):
        problem = diagnose(result, _forward_mistakes(x, in_proj, out_proj, h))
        if problem is None and _varies(fn, tensors, h, result):
            problem = (
                "its output changes from call to call: dropout is on (dropout_p > 0 in SDPA?); "
                "this forward pass has no dropout, dropout_p=0"
            )
        problem = problem or mismatch(result, expected, _FORWARD)
    if problem is not None and "view size is not compatible" in problem:
        problem = (
            "view cannot reshape a tensor that is not contiguous, as the heads are after "
            "transpose(1, 2): merge them with .reshape(B, N, E), or .contiguous().view(B, N, E) "
            f"({problem.removeprefix('your function ')})"
        )
    if problem is None and not is_tensor(raw):
        return Note(_NOT_A_TENSOR_OUT)
    return problem


def _varies(fn, tensors, h, result) -> bool:
    """True when a second call of fn on the same inputs gives another output (dropout)."""
    again, problem = run(fn, *tensors, h)
    if problem is None and isinstance(again, (tuple, list)) and len(again) == 2:
        again = again[0]
    again, problem = (None, problem) if problem else as_array(again, None)
    return problem is None and again.shape == result.shape and not close(again, result)


def _stored_layout(fn, seed: int, B: int, N: int, E: int, h: int) -> str | None:
    """Name an answer that uses torch's (out, in) weights as numpy's (in, out): it is right
    when handed the transposed weights. None if it is not."""
    messages = {
        (True, True): (
            f"it multiplies by the weights as they are stored: in_proj_weight is "
            f"(3E, E) = {(3 * E, E)} and out_proj_weight (E, E), both (out, in), so every "
            "projection is x @ W.T (F.linear(x, W))"
        ),
        (True, False): (
            f"it multiplies by in_proj_weight as it is stored, (3E, E) = {(3 * E, E)}, (out, in): "
            "the packed projection is x @ in_proj_weight.T (F.linear(x, in_proj_weight))"
        ),
        (False, True): (
            "it multiplies by out_proj_weight as it is stored, (out, in): the output is "
            "concat @ out_proj_weight.T"
        ),
    }
    for transposed, message in messages.items():
        probe = _forward_problem(fn, seed, B, N, E, h, transposed)
        if probe is None or isinstance(probe, Note):
            return message
    return None


@checker(
    "attention_forward",
    writes=(
        Library(
            "mha_lib.pytorch",
            "MultiHeadAttention.forward",
            "mha_lib.pytorch.MultiHeadAttention (its forward)",
        ),
    ),
)
def check_attention_forward(fn):
    """Check fn(x, in_proj_weight, out_proj_weight, num_heads) -> (B, N, E): the forward pass of
    `MultiHeadAttention` for self-attention without biases or masks, weights in torch's
    (out, in) layout, float64 tensors in. An (output, weights) pair is read for its output; a
    numpy array passes with a note.
    """
    problem = None
    for seed, B, N, E, h in _FORWARD_CASES:
        problem = _forward_problem(fn, seed, B, N, E, h)
        if problem is not None and problem.startswith(GENERIC):
            problem = _stored_layout(fn, seed, B, N, E, h) or problem
        if problem is not None and "must match the size of tensor" in problem:
            problem = (
                "two tensors' sizes do not match: after the split, q, k and v are (B, h, N, d) "
                "and the scores q @ k.transpose(-2, -1) are (B, h, N, N) (k.transpose(1, 2) "
                f"would swap the heads and the tokens instead) ({problem[14:]})"
            )
        if problem is not None and not isinstance(problem, Note) and h != 2:
            hint = (
                f"it is right with 2 heads and wrong with {h}: do not hard-code the number of "
                "heads; use num_heads (d = E // num_heads)"
            )
            probe = _forward_problem(fn, seed + 10, B, N, E, 2)  # the same sizes, 2 heads
            problem = in_case(problem, (hint, lambda: probe is None or isinstance(probe, Note)))
        if problem is not None and not isinstance(problem, Note):
            return problem
    return problem


# ---------------------------------------------------------------------------- the block

# (seed, B, N, E, h, F): E = 8 with 2 heads, then E = 12 with 3 heads, F = 2E
_BLOCK_CASES = ((20, 2, 5, 8, 2, 16), (21, 3, 6, 12, 3, 24))


def _block_inputs(seed: int, B: int, N: int, E: int, h: int, F_: int):
    """A seeded pre-LN TransformerBlock (float64, eval, dropout 0, random biases and LayerNorm
    parameters, so that every part shows) and x (B, N, E)."""
    import torch

    from ..block import TransformerBlock

    gen = torch.Generator().manual_seed(seed)
    blk = TransformerBlock(E, h, F_, dropout=0.0, norm_first=True, dtype=torch.float64).eval()
    with torch.no_grad():
        for name, param in blk.named_parameters():
            scale = 1.0 if ("norm" in name or name.endswith("bias")) else 1 / np.sqrt(E)
            base = 1.0 if name.startswith("norm") and name.endswith("weight") else 0.0
            param.copy_(base + scale * torch.randn(param.shape, generator=gen, dtype=param.dtype))
    x = 2 * torch.randn(B, N, E, generator=gen, dtype=torch.float64) + 1  # (B, N, E)
    return x, blk


def _block_mistakes(x, blk) -> dict[str, np.ndarray]:
    """The outputs of the usual wrong pre-LN causal blocks, keyed by what is wrong."""
    import torch
    import torch.nn.functional as F

    N = x.shape[1]
    n1, n2 = blk.norm1, blk.norm2
    inverted = torch.ones(N, N, dtype=torch.bool).tril()  # the numpy core's causal mask

    def attend(t, causal=True, mask=None):
        return blk.self_attn(t, is_causal=causal and mask is None, attn_mask=mask)[0]

    def ff(t, act=True):
        hidden = blk.linear1(t)  # (B, N, F)
        return blk.linear2(F.relu(hidden) if act else hidden)  # (B, N, E)

    def plain_norm(t):  # LayerNorm without its weight and bias
        return F.layer_norm(t, t.shape[-1:], eps=n1.eps)

    def ff_no_bias(t):
        hidden = F.relu(t @ blk.linear1.weight.T)
        return hidden @ blk.linear2.weight.T

    def then_ff(y, norm=n2, f=ff):  # the second half, on y
        return y + f(norm(y))

    float_ones = torch.ones(N, N, dtype=x.dtype).triu(1)  # a float mask of 1s, added

    with torch.no_grad():
        x1 = x + attend(n1(x))  # the right first half
        post = n1(x + attend(x))
        added_norm = n1(x) + attend(n1(x))  # each residual adds the normalised input
        outputs = {
            "there is no causal mask: token i sees the tokens after it; pass is_causal=True to "
            "the attention (or attn_mask = the (N, N) mask, True above the diagonal)": (
                (lambda y: y + ff(n2(y)))(x + attend(n1(x), causal=False))
            ),
            "the causal mask is inverted: True on and below the diagonal is the numpy core's "
            "convention (True = may attend); the module blocks where the mask is True, so use "
            "triu(diagonal=1) or is_causal=True": (
                (lambda y: y + ff(n2(y)))(x + attend(n1(x), mask=inverted))
            ),
            "this is a post-LN block (norm1(x + attn(x)), the original Transformer's order); "
            "pre-LN normalises what enters each sublayer and adds the sublayer's output to x "
            "as it is: x + attn(norm1(x))": n2(post + ff(post)),
            "the residuals add the normalised input, norm1(x) + attn(norm1(x)): the residual "
            "path carries x itself, x + attn(norm1(x)), and x + ff(norm2(x))": (
                n2(added_norm) + ff(n2(added_norm))
            ),
            "the residual around attention is missing: x + attn(norm1(x)), not attn(norm1(x))": (
                (lambda y: y + ff(n2(y)))(attend(n1(x)))
            ),
            "the residual around the feed-forward network is missing: x + ff(norm2(x))": (
                ff(n2(x1))
            ),
            "it uses norm1 for both sublayers: the feed-forward network reads norm2(x)": (
                x1 + ff(n1(x1))
            ),
            "the feed-forward network has no activation: linear2(relu(linear1(t)))": (
                x1 + ff(n2(x1), act=False)
            ),
            "the feed-forward network reads the block's input, not x after attention (a "
            "parallel block): x = x + attn(norm1(x)), then x + ff(norm2(x)) with the new x": (
                x1 + ff(n2(x))
            ),
            "the sublayers are in the wrong order: attention first, then the feed-forward "
            "network": (lambda y: y + attend(n1(y)))(x + ff(n2(x))),
            "attention reads x unnormalised: pre-LN normalises what enters attention, "
            "x + attn(norm1(x))": then_ff(x + attend(x)),
            "the feed-forward network reads its input unnormalised: pre-LN normalises what "
            "enters it too, x + ff(norm2(x))": then_ff(x1, norm=lambda t: t),
            "it normalises the block's output with norm2: pre-LN leaves the residual stream "
            "unnormalised (a model has one final LayerNorm after its LAST block)": n2(then_ff(x1)),
            "it normalises the block's output with norm1: pre-LN leaves the residual stream "
            "unnormalised (a model has one final LayerNorm after its LAST block)": n1(then_ff(x1)),
            "norm1 and norm2 are swapped: norm1 comes before attention, norm2 before the "
            "feed-forward network": then_ff(x + attend(n2(x)), norm=n1),
            "the feed-forward sublayer is missing: after x + attn(norm1(x)) comes "
            "x + linear2(relu(linear1(norm2(x))))": x1,
            "the activation is GELU; this block's feed-forward network uses ReLU (F.relu)": (
                then_ff(x1, f=lambda t: blk.linear2(F.gelu(blk.linear1(t))))
            ),
            "it normalises without the LayerNorms' weight and bias (F.layer_norm(x, (E,)) "
            "alone): blk.norm1(x) and blk.norm2(x) also scale and shift": (
                then_ff(x + attend(plain_norm(x)), norm=plain_norm)
            ),
            "it leaves out the Linear layers' biases: blk.linear1(t) is t @ weight.T + bias "
            "(call the layers, blk.linear1(t))": then_ff(x1, f=ff_no_bias),
            "the float mask holds 1s, and a float mask is ADDED to the scores, so it blocks "
            "nothing: use a bool mask (True above the diagonal) or 0 and -inf, or "
            "is_causal=True": then_ff(x + attend(n1(x), mask=float_ones)),
            "it returns the attention sublayer's output alone, attn(norm1(x)) (the first of "
            "self_attn's (output, weights)): add the residual x, then the feed-forward "
            "sublayer": attend(n1(x)),
            "the mask blocks the past (True below the diagonal): True marks the keys a query "
            "may NOT attend to, the future ones, triu(diagonal=1)": then_ff(
                x + attend(n1(x), mask=torch.ones(N, N, dtype=torch.bool).tril(-1))
            ),
            "the mask also blocks the diagonal (triu(diagonal=0)): token i may attend to "
            "itself, triu(diagonal=1)": then_ff(
                x + attend(n1(x), mask=torch.ones(N, N, dtype=torch.bool).triu(0))
            ),
            "the keys and values read x unnormalised: self-attention on norm1(x) uses norm1(x) "
            "as query, key and value (blk.self_attn(norm1(x), is_causal=True))": then_ff(
                x + blk.self_attn(n1(x), x, x, is_causal=True)[0]
            ),
        }
    return {message: out.numpy() for message, out in outputs.items()}


def _block_problem(fn, case: tuple) -> str | None:
    """What is wrong with fn on one seeded block, a Note for a numpy answer, or None."""
    import torch

    _, B, N, E, _, _ = case
    x, blk = _block_inputs(*case)
    with torch.no_grad():
        expected = blk(x, is_causal=True)[0].numpy()  # (B, N, E)
    result, problem = run(fn, x.clone(), blk, names=("x",))
    if problem is None and isinstance(result, (tuple, list)) and len(result) == 2:
        result = result[0]  # the block's own (output, weights) pair
    raw = result
    if problem is None:
        result, problem = as_array(result, (B, N, E), "a tensor (B, N, E)")
    if problem is not None and "Can't call numpy() on Tensor that requires grad" in problem:
        return (
            "it calls .numpy() on a tensor that autograd follows (the block's parameters "
            "require grad): return the tensor itself"
        )
    if problem is not None and "cannot be multiplied" in problem:
        return (
            "a matrix product's shapes do not line up: the feed-forward network is "
            "linear2(relu(linear1(t))), linear1 (E -> F) first, and a Linear's weight is "
            "(out, in), so t @ weight.T multiplies by it by hand; call the layers "
            f"({problem.removeprefix('your function ')})"
        )
    if problem is None and not close(result, expected):
        problem = diagnose(result, _block_mistakes(x, blk)) or mismatch(
            result, expected, "x + attn(norm1(x)) with a causal mask, then x + ff(norm2(x))"
        )
    if problem is None and not is_tensor(raw):
        return Note(_NOT_A_TENSOR_OUT)
    return problem


@checker(
    "pre_ln_block",
    writes=(
        Library("mha_lib.block", "TransformerBlock.forward", "blk(x) (TransformerBlock's forward)"),
    ),
)
def check_pre_ln_block(fn):
    """Check fn(x, blk) -> (B, N, E): one pre-LN block with causal self-attention (GPT-2's
    order), computed from the parts of `blk`, a `mha_lib.block.TransformerBlock` in eval mode
    (norm1, self_attn, norm2, linear1, ReLU, linear2). An (output, weights) pair is read for its
    output; a numpy array passes with a note.
    """
    problem = None
    for case in _BLOCK_CASES:
        problem = _block_problem(fn, case)
        if problem is not None and not isinstance(problem, Note):
            return problem
    return problem
