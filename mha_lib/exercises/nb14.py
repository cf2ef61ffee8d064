"""Checkers for notebook 14 (attention across devices).

- `check_merge_partials(fn)`: fn(o_a, lse_a, o_b, lse_b) -> (o, lse): the attention over two
  disjoint sets of keys A and B from the attention over each, o (n, d_v), lse (n,), by their
  log-sum-exp; a row that saw no key of A has lse_a = -inf and o_a = 0, and a row that saw no
  key in either part (a causal ring's first steps) must come out as o = 0, lse = -inf. The
  arguments are numpy arrays (an answer for torch tensors only passes with a note, `run_as`);
- `check_zigzag(fn)`: fn(world_size) -> for each rank the two chunk indices (of 0 .. 2P-1) it
  holds, such that under a causal mask every rank computes the same number of chunk pairs at
  every step of the ring; any balanced assignment passes, and the checker prints its work;
- `check_split_plan(fn)`: fn(name) -> "rows" or "columns": how tensor parallelism splits each weight
  of a decoder layer, written as in the notebook, x @ W with W (in, out); name is one of
  "W_Q", "W_K", "W_V", "W_O", "W_gate", "W_up", "W_down" and "E" (the embedding, (V, C)).

numpy only (torch is imported only to run an answer written for tensors): answers may be numpy
arrays, lists or torch tensors.
"""

from __future__ import annotations

import numpy as np

from ._base import Note, as_array, checker, close, mismatch, run, run_as, to_numpy

__all__ = ["check_merge_partials", "check_split_plan", "check_zigzag"]


# ----------------------------------------------------------------------------------- merge


def merge_reference(o_a, lse_a, o_b, lse_b):
    lse = np.logaddexp(lse_a, lse_b)  # (n,)
    safe = np.where(np.isneginf(lse), 0.0, lse)
    return np.exp(lse_a - safe)[:, None] * o_a + np.exp(lse_b - safe)[:, None] * o_b, lse


EMPTY = 4  # the row where neither part saw a key


def _merge_case(seed: int, big: bool = False):
    """Five rows: ordinary, one whose A part saw no key (lse_a = -inf, o_a = 0), lse of very
    different sizes, and one where neither part saw a key (row EMPTY: both -inf, both 0);
    big: every finite lse near 800, where exp overflows float64."""
    rng = np.random.default_rng(seed)
    n, d_v = 5, 3
    o_a, o_b = rng.normal(size=(n, d_v)), rng.normal(size=(n, d_v))
    lse_a, lse_b = rng.normal(size=n), rng.normal(size=n)
    lse_a[1], o_a[1] = -np.inf, 0.0
    lse_b[3] = lse_a[3] + 6.0
    lse_a[EMPTY] = lse_b[EMPTY] = -np.inf
    o_a[EMPTY] = o_b[EMPTY] = 0.0
    if big:
        lse_a, lse_b = lse_a + 800.0, lse_b + 800.0
    return o_a, lse_a, o_b, lse_b


def _merge_mistakes(o_a, lse_a, o_b, lse_b) -> list[tuple[str, np.ndarray, np.ndarray | None]]:
    """(message, wrong o, wrong lse or None when the o alone is wrong)."""
    o, lse = merge_reference(o_a, lse_a, o_b, lse_b)
    with np.errstate(all="ignore"):
        w_a, w_b = np.exp(lse_a)[:, None], np.exp(lse_b)[:, None]
        share_a = (lse_a / (lse_a + lse_b))[:, None]
        return [
            (
                "it averages the two outputs: weight each by its share of the softmax's total, "
                "e^(lse_a - L) and e^(lse_b - L) with L = log(e^lse_a + e^lse_b)",
                (o_a + o_b) / 2,
                None,
            ),
            (
                "it adds the two outputs: each is already normalised over its own keys, so the sum "
                "counts the normaliser twice; weight each by e^(lse - L)",
                o_a + o_b,
                None,
            ),
            (
                "it weights by e^lse_a and e^lse_b without dividing by their sum e^L: the "
                "weights of a softmax sum to 1",
                w_a * o_a + w_b * o_b,
                None,
            ),
            (
                "it swaps the weights: o_a's weight is A's share, e^(lse_a - L)",
                np.exp(lse_b - lse)[:, None] * o_a + np.exp(lse_a - lse)[:, None] * o_b,
                None,
            ),
            (
                "it weights by the log-sum-exps themselves, lse_a / (lse_a + lse_b): the softmax "
                "mass of a part is e^lse, not lse",
                share_a * o_a + (1 - share_a) * o_b,
                None,
            ),
            (
                "the new lse is the larger of the two: it must be the log of the summed masses, "
                "L = log(e^lse_a + e^lse_b) (np.logaddexp)",
                o,
                np.maximum(lse_a, lse_b),
            ),
            (
                "the new lse adds the two: masses add, so L = log(e^lse_a + e^lse_b), not "
                "lse_a + lse_b",
                o,
                lse_a + lse_b,
            ),
            (
                "the new lse is their mean: L = log(e^lse_a + e^lse_b) (np.logaddexp)",
                o,
                (lse_a + lse_b) / 2,
            ),
        ]


def _read_pair(result, n: int, d_v: int):
    if not isinstance(result, tuple | list) or len(result) != 2:
        return None, None, f"expected a pair (o, lse); got {type(result).__name__}"
    o, problem = as_array(result[0], (n, d_v), "o as an array")
    if problem:
        return None, None, f"o: {problem}"
    lse, problem = as_array(result[1], (n,), "lse as an array")
    if problem:
        return None, None, f"lse: {problem}"
    return o, lse, None


def _same(a, b) -> bool:
    return close(np.where(np.isneginf(a), -1e300, a), np.where(np.isneginf(b), -1e300, b))


@checker("merge_partials")
def check_merge_partials(fn):
    """Check fn(o_a (n, d_v), lse_a (n,), o_b, lse_b) -> (o (n, d_v), lse (n,))."""
    notes, empty_row = set(), None
    for seed, big in ((0, False), (1, False), (2, True)):
        case = _merge_case(seed, big)
        result, problem, note = run_as(fn, "numpy", *case, names=("o_a", "lse_a", "o_b", "lse_b"))
        if problem:
            return problem
        notes.add(note)
        o, lse, problem = _read_pair(result, *case[0].shape)
        if problem:
            return problem
        right_o, right_lse = merge_reference(*case)
        if _same(o, right_o) and _same(lse, right_lse):
            continue
        rows = np.arange(len(o)) != EMPTY  # every row but the one that saw no key at all
        o_rows, lse_rows = o[rows], lse[rows]
        for message, wrong_o, wrong_lse in _merge_mistakes(*case):
            if _same(o_rows, wrong_o[rows]) and (
                wrong_lse is None or _same(lse_rows, wrong_lse[rows])
            ):
                return message
        if _same(o_rows, right_o[rows]) and _same(lse_rows, right_lse[rows]):
            # only the row with no key is wrong: said last, when no other case shows a mistake
            empty_row = empty_row or (
                f"row {EMPTY}, where neither part saw a key (lse_a = lse_b = -inf, both o = 0), "
                f"comes out as o = {_show(o[EMPTY])}, lse = {_show(lse[EMPTY])}; it must stay "
                "o = 0, lse = -inf (in a causal ring a row can have seen no key yet): there "
                "lse - L is -inf - (-inf) = NaN, so where L = -inf use the weights 0"
            )
            continue
        if big and not (np.all(np.isfinite(o_rows)) and np.all(np.isfinite(lse_rows))):
            return (
                "it overflows when the log-sum-exps are large (here about 800: e^800 is inf in "
                "float64): subtract the larger lse before exponentiating, or use np.logaddexp"
            )
        if not np.all(np.isfinite(o_rows)):
            return (
                "the output holds inf or NaN where a part saw no key (lse = -inf, o = 0): such a "
                "part must get weight e^(-inf) = 0, and only that"
            )
        if _same(o_rows, right_o[rows]):
            return mismatch(lse_rows, right_lse[rows], "lse = log(e^lse_a + e^lse_b)")
        return mismatch(o_rows, right_o[rows], "o = e^(lse_a - L) o_a + e^(lse_b - L) o_b")
    if empty_row:
        return empty_row
    notes.discard(None)
    return Note(notes.pop()) if notes else None


def _show(x: np.ndarray) -> str:
    values = np.atleast_1d(x)
    if np.isnan(values).any():
        return "NaN"
    return np.array2string(values, precision=2) if values.size > 1 else f"{float(values[0]):g}"


# ----------------------------------------------------------------------------------- zigzag


def causal_work(assignment, world_size: int) -> np.ndarray:
    """(P steps, P ranks): the chunk pairs each rank computes at each ring step, causal.

    At step t rank r attends its two query chunks to the key chunks of rank (r - t) mod P;
    chunk a against chunk b is computed unless a < b (the diagonal a = b counts as one)."""
    P = world_size
    work = np.zeros((P, P), dtype=int)
    for t in range(P):
        for r in range(P):
            keys = assignment[(r - t) % P]
            work[t, r] = sum(a >= b for a in assignment[r] for b in keys)
    return work


def _read_assignment(result, P: int):
    try:
        arr = to_numpy(result)
    except (TypeError, ValueError, RuntimeError):
        return None, f"expected a list of P pairs of chunk indices; got {type(result).__name__}"
    if arr.dtype.kind not in "iuf" or arr.shape != (P, 2):
        shape = getattr(arr, "shape", None)
        if shape == (2 * P,):
            return None, (
                f"expected one pair per rank, shape (P, 2) = ({P}, 2); got a flat list of "
                f"{2 * P} numbers: group them by rank, [(a_0, b_0), (a_1, b_1), ...]"
            )
        return None, f"expected one pair of chunk indices per rank, shape ({P}, 2); got {shape}"
    if not np.array_equal(arr, np.round(arr)):
        return None, "chunk indices must be whole numbers"
    return [tuple(int(c) for c in pair) for pair in arr], None


def _shape(result):
    try:
        return np.asarray(to_numpy(result)).shape
    except Exception:  # ragged lists, objects that refuse to be converted
        return None


def _assignment_problem(chunks, P: int) -> str | None:
    if chunks == [(r, 2 * P - 1 - r) for r in range(1, P + 1)]:
        return (
            "it numbers the ranks 1 .. P: ranks are 0 .. P - 1, and rank r holds chunks r and "
            "2P - 1 - r (rank 0: chunks 0 and 2P - 1)"
        )
    held = [c for pair in chunks for c in pair]
    if sorted(held) == list(range(1, 2 * P + 1)):
        return f"chunk numbers start at 0: the 2P = {2 * P} chunks are 0 .. {2 * P - 1}"
    outside = sorted({c for c in held if not 0 <= c < 2 * P})
    if outside:
        return (
            f"chunk {outside[0]} does not exist for world_size = {P}: the chunks are "
            f"0 .. 2P - 1 = {2 * P - 1} (an off-by-one in 2P - 1 - r?)"
        )
    for c in range(2 * P):
        owners = [r for r, pair in enumerate(chunks) for x in pair if x == c]
        if len(owners) > 1:
            return (
                f"chunk {c} is held twice (by rank{'s' if len(set(owners)) > 1 else ''} "
                f"{', '.join(str(o) for o in sorted(set(owners)))}) and so some chunk by no "
                "rank: each of the 2P chunks must be held by exactly one rank"
            )
    return None


@checker("zigzag")
def check_zigzag(fn):
    """Check fn(world_size) -> P pairs of chunks, balanced under a causal mask at every step."""
    results = {}
    for P in (2, 3, 4, 5):
        result, problem = run(fn, P)
        if problem:
            return problem
        results[P] = result
    transposed = [P for P, result in results.items() if P > 2 and _shape(result) == (2, P)]
    if transposed:
        P = transposed[0]
        return (
            f"it is transposed: for world_size = {P} it returns shape (2, {P}), two rows of "
            f"{P} chunks; the answer has one row per rank, shape ({P}, 2), [(a_0, b_0), "
            "(a_1, b_1), ...] (for P = 2 the two shapes look alike)"
        )
    lines = []
    for P, result in results.items():
        chunks, problem = _read_assignment(result, P)
        if problem:
            return problem
        problem = _assignment_problem(chunks, P)
        if problem:
            return f"{problem} [world_size = {P}]"
        work = causal_work(chunks, P)
        totals = work.sum(axis=0)
        if chunks == [(2 * r, 2 * r + 1) for r in range(P)]:
            return (
                f"this is the contiguous layout: with P = {P} the ranks compute {totals.tolist()} "
                "pairs in all, the first rank almost nothing and the last everything, so at "
                "every step most ranks wait for the last; pair an early chunk with a late one"
            )
        if len(set(totals.tolist())) > 1:  # equal totals are equal at every step (the tests)
            return (
                f"unbalanced: with P = {P} the ranks compute {totals.tolist()} chunk pairs in "
                "all (a later chunk needs more keys: chunk c needs c full pairs and one "
                "diagonal); give every rank the same sum of chunk indices"
            )
        lines.append(f"P = {P}: {int(work.max(axis=1).sum())} pair-steps")
    return Note("every rank the same work at every step; " + ", ".join(lines))


# ----------------------------------------------------------------------------------- split

WEIGHTS = ("W_Q", "W_K", "W_V", "W_O", "W_gate", "W_up", "W_down", "E")
SPLIT = {
    "W_Q": "columns",
    "W_K": "columns",
    "W_V": "columns",
    "W_O": "rows",
    "W_gate": "columns",
    "W_up": "columns",
    "W_down": "rows",
    "E": "rows",
}
_WORDS = {
    "rows": ("rows", "row", "r", "rowwise", "row-wise", "row-parallel", "row parallel"),
    "columns": (
        "columns",
        "column",
        "cols",
        "col",
        "c",
        "columnwise",
        "column-wise",
        "column-parallel",
        "column parallel",
    ),
}


def _read_split(value) -> str | None:
    """'rows' or 'columns' from the ways one writes them: "by row", "Rows", "column-parallel",
    "split by columns", "c", ..."""
    if isinstance(value, str):
        word = " ".join(value.strip().lower().replace("_", " ").split())
        for prefix in ("split by ", "split along ", "by ", "along ", "split "):
            word = word.removeprefix(prefix)
        word = word.removesuffix(" split").removesuffix(".")
        for answer, forms in _WORDS.items():
            if word in forms:
                return answer
    return None


# what goes wrong when one weight is split the other way, in x @ W with W (in, out)
WRONG_SPLIT = {
    "W_Q": (
        "W_Q by rows would give each rank some input features of every head's queries, so "
        "every score q·k would need a sum over the ranks before the softmax; split it by "
        "columns, whole heads per rank, and the heads stay independent until W_O"
    ),
    "W_K": (
        "W_K by rows would give each rank some input features of every head's keys, so every "
        "score q·k would need a sum over the ranks before the softmax; split it by columns, the "
        "key/value heads of the rank's own query heads"
    ),
    "W_V": (
        "W_V by rows would give each rank some input features of every head's values: each "
        "value vector, and so each head's weighted sum of them, would be a partial sum that "
        "needs an all-reduce before W_O; split it by columns, the value heads of the rank's own "
        "heads, and each rank computes whole heads"
    ),
    "W_O": (
        "W_O by columns would leave each rank needing every head's output (an all-gather "
        "before W_O); split W_O by rows, the rows facing the rank's own heads, so that "
        "Σ_h head_h W_O^h splits into one partial sum per rank and one all_reduce adds them"
    ),
    "W_gate": (
        "W_gate and W_up by rows would give each rank some input features of every hidden unit, "
        "so x W_gate would be a partial sum that needs an all-reduce before silu (a "
        "nonlinearity does not split over a sum); split both by columns: whole hidden units per "
        "rank, and silu and the product * are unit by unit"
    ),
    "W_down": (
        "W_down by columns: each rank holds some hidden units of the MLP (W_gate and W_up "
        "by columns), so W_down must take those units' rows and its partial outputs be "
        "summed by one all_reduce, as for W_O"
    ),
    "E": (
        "E by columns would give every rank a slice of every token's features; vocabulary-"
        "parallel splits E by rows (by token): each rank looks up its own tokens and, as the "
        "tied output head, computes the logits of its own part of the vocabulary"
    ),
}


@checker("split_plan")
def check_split_plan(fn):
    """Check fn(name) -> "rows" | "columns" for each weight, in x @ W layout (W (in, out))."""
    answers = {}
    for name in WEIGHTS:
        result, problem = run(fn, name)
        if problem:
            return problem
        answer = _read_split(result)
        if answer is None:
            got = repr(result) if isinstance(result, str) else type(result).__name__
            return f'for {name} expected "rows" or "columns"; got {got}'
        answers[name] = answer
    if answers == SPLIT:
        return None
    wrong = [n for n in WEIGHTS if answers[n] != SPLIT[n]]
    stored = {n: ("rows" if SPLIT[n] == "columns" else "columns") for n in WEIGHTS if n != "E"}
    if all(answers[n] == stored[n] for n in stored):
        return (
            "this is the split of PyTorch's stored weights, (out, in), where y = x @ W.T; the "
            "question writes x @ W with W (in, out): transpose every answer (keep E's)"
        )
    if answers["W_gate"] != answers["W_up"]:
        return (
            "W_gate and W_up are split differently: SwiGLU multiplies them elementwise, "
            "silu(x W_gate) * (x W_up), so each rank must hold the same hidden units of both "
            "(both by columns)"
        )
    return WRONG_SPLIT[wrong[0]]  # the first weight split the wrong way, in the layer's order
