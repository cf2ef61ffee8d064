"""Checkers for notebook 13 (inside a language model).

- `check_first_token_score(fn)`: fn(A, start) -> (h,): each head's mean attention weight on
  position 0, over the queries t >= start of every sequence; A (B, h, N, N) causal attention
  weights (rows = queries, columns = keys);
- `check_prefix_matching(fn)`: fn(A, period) -> (h,): each head's mean weight from each query
  t >= period to key t - period + 1, the token after the previous occurrence of token t when a
  block of `period` tokens is repeated; A (B, h, N, N);
- `check_perplexity(fn)`: fn(logits, ids) -> the perplexity of the sequences: exp of the mean,
  over every sequence and position, of the loss of token t + 1 under the logits at t;
  logits (B, N, V), ids (B, N).

The arguments are torch tensors, as the model gives them and as each exercise's follow-up passes
them (`run_as`): an answer written with torch (`.mean(dim=...)`) or with numpy functions that
torch tensors accept passes; one that works on numpy arrays only is judged on numpy arrays and,
if right, passes with a note saying to convert the model's tensors first. The references are
numpy; torch is imported only when a checker runs. Answers may be numbers, arrays or tensors.
"""

from __future__ import annotations

import numpy as np

from ._base import Note, as_array, checker, diagnose, mismatch, run_as, to_numpy

__all__ = ["check_first_token_score", "check_perplexity", "check_prefix_matching"]


def causal_weights(B: int, h: int, N: int, seed: int) -> np.ndarray:
    """(B, h, N, N) random causal attention weights: each row a softmax over keys 0 .. t."""
    rng = np.random.default_rng(seed)
    scores = rng.normal(scale=2.0, size=(B, h, N, N))
    scores[..., 0] += rng.uniform(0, 3, size=(B, h, N))  # some weight on position 0, as a sink
    scores = np.where(np.tril(np.ones((N, N), dtype=bool)), scores, -np.inf)
    w = np.exp(scores - scores.max(-1, keepdims=True))
    return w / w.sum(-1, keepdims=True)


def _wrong_shape(shape, B: int, h: int, queries: int, first: str) -> str | None:
    """Name the mistake behind a result of the wrong shape: the axes it kept or averaged away.
    queries: how many queries count (from `first` on)."""
    if shape == (h,):
        return None
    if shape in ((), (1,)):
        return (
            f"expected shape {(h,)}, one number per head (averaged over the batch and the "
            f"queries); got shape {shape}: it averages over the heads too, keep axis 1 apart"
        )
    if shape == (B,):
        return (
            f"expected shape {(h,)}, one number per head (averaged over the batch and the "
            f"queries); got shape {shape}, one per sequence: it averages over the heads (axis 1) "
            "and keeps the batch (axis 0); average over axes 0 and 2"
        )
    if shape == (h, queries):
        return (
            f"expected shape {(h,)}; got {shape}, one number per head and query: it averages "
            f"over the batch only; average over the queries t >= {first} too (axes 0 and 2)"
        )
    if shape == (B, h):
        return (
            f"expected shape {(h,)}; got {shape}, one number per sequence and head: it averages "
            "over the queries only; average over the batch too (axes 0 and 2)"
        )
    return None


def _scaled(value: np.ndarray, right: np.ndarray, first: str) -> str | None:
    """Name an answer that is the right one times a constant (the same for every head)."""
    if not np.all(np.isfinite(value)) or np.any(right == 0):
        return None
    ratio = value / right
    if np.allclose(ratio, ratio[0], rtol=1e-6, atol=0) and not np.isclose(ratio[0], 1):
        return (
            f"every head's score is {ratio[0]:.4g} times the right one: a factor is off (a count "
            f"in the division, or a stray constant); the score is the plain mean over the "
            f"sequences and the queries t >= {first}"
        )
    return None


def _check_heads(fn, cases, reference, mistakes, what, names, first):
    """Run fn on each (A, arg) case; compare with reference; name a mistake if one matches.
    first: the name of the first query that counts ("start", "period"), which is arg."""
    notes = set()
    for A, arg in cases:
        B, h, N = A.shape[:3]
        result, problem, note = run_as(fn, "torch", A, arg, names=names)
        if problem:
            return problem
        notes.add(note)
        shape = getattr(np.asarray(to_numpy(result)) if _readable(result) else None, "shape", None)
        if shape is not None and (problem := _wrong_shape(shape, B, h, N - arg, first)):
            return problem
        value, problem = as_array(result, (h,), "an array")
        if problem:
            return problem
        right = reference(A, arg)
        if np.allclose(value, right, rtol=1e-5, atol=1e-7):
            continue
        return (
            diagnose(value, mistakes(A, arg), tol=1e-5)
            or _scaled(value, right, first)
            or mismatch(value, right, what)
        )
    return _passed(notes)


def _passed(notes: set) -> Note | None:
    """The verdict of a right answer: a note when it ran on numpy arrays only."""
    notes.discard(None)
    return Note(notes.pop()) if notes else None


def _readable(result) -> bool:
    try:
        return np.asarray(to_numpy(result)).dtype.kind in "biuf"
    except Exception:  # ragged lists, objects that refuse to be converted
        return False


# ------------------------------------------------------------------------------- first token


def first_token_reference(A: np.ndarray, start: int) -> np.ndarray:
    return A[:, :, start:, 0].mean(axis=(0, 2))  # (h,)


def _first_token_mistakes(A: np.ndarray, start: int) -> dict[str, np.ndarray]:
    B, _, N, _ = A.shape
    t = np.arange(start, N)
    return {
        "it averages over every query, 0 .. N - 1: only the queries t >= start count (query 0 "
        "can only see itself, so its weight on position 0 is always 1)": A[:, :, :, 0].mean((0, 2)),
        "it reads the first ROW (what query 0 attends to), not the first COLUMN (the weight "
        "each query puts on key 0): rows are queries, columns keys": A[:, :, 0, start:].mean(
            (0, 2)
        ),
        "it starts one query late (t > start): the queries t >= start count": A[
            :, :, start + 1 :, 0
        ].mean((0, 2)),
        "it sums the weights over the queries instead of averaging them": A[:, :, start:, 0]
        .sum(2)
        .mean(0),
        "it divides by N, not by the number of queries t >= start": A[:, :, start:, 0].sum((0, 2))
        / (B * N),
        "it takes the largest weight on position 0, not the mean": A[:, :, start:, 0]
        .max(2)
        .mean(0),
        "it measures the weight each query puts on itself (the diagonal), not on position 0": A[
            :, :, t, t
        ].mean((0, 2)),
        "it reads position 1 (column 1); the first position is column 0": A[:, :, start:, 1].mean(
            (0, 2)
        ),
        "it reads the last column (key N - 1), which only the last query can see; the first "
        "position is column 0": A[:, :, start:, -1].mean((0, 2)),
        "it starts one query early (t >= start - 1): the queries t >= start count": A[
            :, :, start - 1 :, 0
        ].mean((0, 2)),
        "it takes the median over the queries, not the mean": np.median(
            A[:, :, start:, 0], axis=2
        ).mean(0),
    }


@checker("first_token_score")
def check_first_token_score(fn):
    """Check fn(A (B, h, N, N), start) -> (h,) on random causal weights of odd sizes."""
    cases = [(causal_weights(3, 4, 11, 0), 2), (causal_weights(2, 5, 9, 1), 1)]
    return _check_heads(
        fn,
        cases,
        first_token_reference,
        _first_token_mistakes,
        "the mean of A[b, i, t, 0] over every sequence b and query t >= start, for each head i",
        ("A", "start"),
        "start",
    )


# ------------------------------------------------------------------------------- prefix matching


def prefix_matching_reference(A: np.ndarray, period: int) -> np.ndarray:
    t = np.arange(period, A.shape[-1])
    return A[:, :, t, t - period + 1].mean(axis=(0, 2))  # (h,)


def _prefix_mistakes(A: np.ndarray, period: int) -> dict[str, np.ndarray]:
    N = A.shape[-1]
    P = period
    t = np.arange(P, N)

    def stripe(queries, keys):
        return A[:, :, queries, keys].mean((0, 2))

    return {
        "it reads key t - period, the earlier occurrence of the token itself (a duplicate-token "
        "head), not the token AFTER it, t - period + 1": stripe(t, t - P),
        "it reads key t - period + 2, one past the token that followed the earlier "
        "occurrence": stripe(t, t - P + 2),
        "it starts at query period - 1: the first query of the second copy is t = period": stripe(
            np.arange(P - 1, N), np.arange(P - 1, N) - P + 1
        ),
        "it reads the transposed entry A[t - period + 1, t] (rows are queries, columns keys: "
        "A[t, t - period + 1])": stripe(t - P + 1, t),
        "it sums the stripe over the queries instead of averaging it": A[:, :, t, t - P + 1]
        .sum(2)
        .mean(0),
        "it averages over every query of the sequence (zeros where the first copy has no "
        "earlier occurrence): only the queries t >= period count": A[:, :, t, t - P + 1].sum((0, 2))
        / (A.shape[0] * N),
        "it uses the previous token of the query, t - 1 (a previous-token score)": stripe(t, t - 1),
        "it starts one query late (t > period): the first query of the second copy is "
        "t = period": stripe(t[1:], t[1:] - P + 1),
        "it reads key t - period - 1, two before the token that followed the earlier "
        "occurrence": stripe(t, t - P - 1),
        "it takes the largest weight on the stripe, not the mean": A[:, :, t, t - P + 1]
        .max(2)
        .mean(0),
        "it measures the weight each query puts on itself (the diagonal), not on t - period + 1": (
            stripe(t, t)
        ),
    }


@checker("prefix_matching")
def check_prefix_matching(fn):
    """Check fn(A (B, h, N, N), period) -> (h,) on random causal weights of odd sizes."""
    cases = [(causal_weights(2, 3, 14, 2), 7), (causal_weights(3, 4, 13, 3), 5)]
    return _check_heads(
        fn,
        cases,
        prefix_matching_reference,
        _prefix_mistakes,
        "the mean of A[b, i, t, t - period + 1] over every sequence b and query t >= period",
        ("A", "period"),
        "period",
    )


# ------------------------------------------------------------------------------- perplexity


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _token_losses(logits: np.ndarray, ids: np.ndarray, shift: int = 1) -> np.ndarray:
    """(B, N - shift): -log p(ids[:, t + shift] | logits[:, t])."""
    logp = _log_softmax(logits)
    N = ids.shape[1]
    rows = logp[:, : N - shift]  # (B, N - shift, V)
    return -np.take_along_axis(rows, ids[:, shift:, None], axis=-1)[..., 0]


def perplexity_reference(logits: np.ndarray, ids: np.ndarray) -> float:
    return float(np.exp(_token_losses(logits, ids).mean()))


def _perplexity_inputs(seed: int):
    rng = np.random.default_rng(seed)
    B, N, V = 3, 9, 7
    logits = rng.normal(scale=2.0, size=(B, N, V))
    logits[1] += 1.5 * rng.normal(size=(N, V))  # sequences of different difficulty
    return logits, rng.integers(0, V, size=(B, N))


def _perplexity_mistakes(logits: np.ndarray, ids: np.ndarray) -> dict[str, float]:
    losses = _token_losses(logits, ids)
    logp = _log_softmax(logits)
    probs = np.exp(logp)
    same = -np.take_along_axis(logp, ids[..., None], axis=-1)[..., 0]  # logits t vs token t
    backwards = -np.take_along_axis(logp[:, 1:], ids[:, :-1, None], axis=-1)[..., 0]
    z = logits - logits.max(1, keepdims=True)
    logp_positions = z - np.log(np.exp(z).sum(1, keepdims=True))  # softmax over axis 1
    over_positions = -np.take_along_axis(logp_positions[:, :-1], ids[:, 1:, None], axis=-1)
    return {
        "it scores token t with the logits at t: the logits at t predict token t + 1 (shift by "
        "one)": float(np.exp(same.mean())),
        "it averages the per-token perplexities exp(loss): perplexity is exp of the MEAN "
        "loss": float(np.exp(losses).mean()),
        "it averages the perplexities of the sequences: take exp of the mean loss over every "
        "token of every sequence": float(np.exp(losses.mean(1)).mean()),
        "it uses base 2 (2 ** mean loss): the losses are natural logs, so exp": float(
            2 ** losses.mean()
        ),
        "it exponentiates the summed loss, not the mean": float(np.exp(losses.sum())),
        "it treats the raw logits as log-probabilities: apply log-softmax first": float(
            np.exp(-np.take_along_axis(logits[:, :-1], ids[:, 1:, None], axis=-1).mean())
        ),
        "it returns the mean loss (cross-entropy), not its exponential": float(losses.mean()),
        "it inverts the mean probability of the right token: exp of the mean negative log "
        "probability is not 1 / mean probability": float(
            1 / np.take_along_axis(probs[:, :-1], ids[:, 1:, None], axis=-1).mean()
        ),
        "it shifts the wrong way (the logits at t + 1 against token t): the logits at t predict "
        "token t + 1": float(np.exp(backwards.mean())),
        "it drops the minus sign: exp(mean log p) is 1 / perplexity": float(np.exp(-losses.mean())),
        "it uses base 10 (10 ** mean loss): the losses are natural logs, so exp": float(
            10 ** losses.mean()
        ),
        "it takes the softmax over the positions (axis 1), not over the vocabulary (the last "
        "axis)": float(np.exp(over_positions.mean())),
        "it adds 1 to exp(mean loss): the perplexity is exp(mean loss) itself (a model that is "
        "always sure and right has perplexity 1)": float(np.exp(losses.mean()) + 1),
        "it computes expm1(mean loss) = exp(mean loss) - 1: the perplexity is exp(mean loss) "
        "itself (a model that is always sure and right has perplexity 1, not 0)": float(
            np.expm1(losses.mean())
        ),
    }


@checker("perplexity")
def check_perplexity(fn):
    """Check fn(logits (B, N, V), ids (B, N)) -> a number."""
    notes = set()
    for seed in (0, 1):
        logits, ids = _perplexity_inputs(seed)
        result, problem, note = run_as(fn, "torch", logits, ids, names=("logits", "ids"))
        if problem:
            return problem
        notes.add(note)
        value, problem = as_array(result, None, "a number")
        if problem:
            return problem
        if value.shape in ((ids.shape[0],), (ids.shape[0], 1)):
            return (
                f"expected one number for the whole batch; got an array of shape {value.shape}, "
                "one per sequence: it keeps the sequences apart; the mean loss is over every "
                "position of every sequence, then exp"
            )
        if value.size != 1:
            return f"expected one number for the whole batch; got an array of shape {value.shape}"
        value = value.reshape(())
        right = perplexity_reference(logits, ids)
        if np.isclose(value, right, rtol=1e-6):
            continue
        return diagnose(value, _perplexity_mistakes(logits, ids), tol=1e-6) or mismatch(
            value,
            right,
            "exp(mean over b and t < N - 1 of -log softmax(logits[b, t])[ids[b, t + 1]])",
        )
    return _passed(notes)
