"""Checkers for notebook 12 (a real language model).

- `check_dequantize_q4_1(fn)`: fn(block) -> the 32 weights of one Q4_1 block, block being its 20
  bytes (numpy uint8): a float16 scale d, a float16 minimum m, then 16 bytes whose low nibbles
  are weights 0..15 and high nibbles weights 16..31; w = d · q + m;
- `check_gguf_row_order(fn)`: fn(d) -> the order of one head's rows of W_Q (or W_K) in a GGUF
  file: row j of the file is row order[j] of transformers' (half-split) layout, so that the
  file's rows rotate in adjacent pairs (2i, 2i + 1);
- `check_top_p(fn)`: fn(logits, p) -> the logits (B, V) (a torch tensor) with every token
  outside the top-p set at -inf (the smallest set of most probable tokens whose probabilities
  sum to >= p).

What each gets: `block` is a numpy array, as `GGUFFile.raw` gives it; `logits` a torch tensor, as
the model gives them (`run_as`: an answer written for the other kind is run on that kind too and,
if right, passes with a note saying to convert first). Answers may be arrays, lists or tensors.
The references are numpy; torch is imported only when a checker runs.
"""

from __future__ import annotations

import numpy as np

from ._base import Note, as_array, checker, diagnose, mismatch, run, run_as, to_numpy

__all__ = ["check_dequantize_q4_1", "check_gguf_row_order", "check_top_p"]


# ------------------------------------------------------------------------------- Q4_1 blocks


def q4_1_blocks(seed: int = 0, n: int = 4) -> np.ndarray:
    """n Q4_1 blocks (n, 20) of random weights, written as llama.cpp writes them."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(n, 32)) * rng.uniform(0.01, 2, size=(n, 1)) + rng.normal(size=(n, 1))
    lo, hi = w.min(1, keepdims=True), w.max(1, keepdims=True)
    d = ((hi - lo) / 15).astype(np.float16)
    m = lo.astype(np.float16)
    q = np.clip(np.round((w - m.astype(float)) / d.astype(float)), 0, 15).astype(np.uint8)
    packed = q[:, :16] | (q[:, 16:] << 4)  # byte j: weight j (low), weight j + 16 (high)
    return np.concatenate([d.view(np.uint8), m.view(np.uint8), packed], axis=1)


def _parts(block: np.ndarray):
    d = float(block[:2].view(np.float16)[0])
    m = float(block[2:4].view(np.float16)[0])
    lo, hi = (block[4:] & 0x0F).astype(float), (block[4:] >> 4).astype(float)
    return d, m, lo, hi


def dequantize_q4_1_reference(block: np.ndarray) -> np.ndarray:
    d, m, lo, hi = _parts(block)
    return d * np.concatenate([lo, hi]) + m  # (32,)


def _q4_1_mistakes(block: np.ndarray) -> dict[str, np.ndarray]:
    d, m, lo, hi = _parts(block)
    q = np.concatenate([lo, hi])
    pairs = np.stack([lo, hi], axis=1).reshape(-1)  # low, high of byte 0, then byte 1, ...
    raw_d = float(block[:2].view(np.uint16)[0])
    big_d = float(block[:2].view(">f2")[0])
    big_m = float(block[2:4].view(">f2")[0])
    return {
        "the nibbles are in the wrong order: weights 0..15 are the LOW nibbles of the 16 bytes, "
        "weights 16..31 their high nibbles (not low, high of byte 0, then of byte 1, ...)": d
        * pairs
        + m,
        "the halves are swapped: the LOW nibbles hold weights 0..15, the high ones 16..31": d
        * np.concatenate([hi, lo])
        + m,
        "it leaves out the minimum m: Q4_1 stores w = d · q + m": d * q,
        "it centres q (q - 8), as Q4_0 does; Q4_1's q is unsigned and m carries the offset": d
        * (q - 8)
        + m,
        "d and m are swapped: the scale d comes first (bytes 0-1), the minimum m next (2-3)": m * q
        + d,
        "it reads d's two bytes as an integer; they are a float16 (view them as np.float16)": (
            raw_d * q + m
        ),
        "it reads the float16s big-endian; GGUF is little-endian (np.float16 on this machine)": (
            big_d * q + big_m
        ),
        "it adds m before scaling: w = d · q + m, not d · (q + m)": d * (q + m),
        "it divides by d: d is the step between two levels, w = d · q + m": q / d + m,
        "it masks the high nibbles (byte & 0xF0) without shifting them down: weight j + 16 is "
        "byte j >> 4": d * np.concatenate([lo, 16 * hi]) + m,
        "it shifts the wrong way (byte << 4): weight j + 16 is byte j >> 4, its high four bits": d
        * np.concatenate([lo, (16 * lo) % 256])
        + m,
        "it reads bytes 0-3 as one float32: d and m are two float16s, bytes 0-1 and 2-3": (
            float(block[:4].view(np.float32)[0]) * q
        ),
    }


@checker("dequantize_q4_1")
def check_dequantize_q4_1(fn):
    """Check fn(block (20,) uint8) -> (32,) weights on several blocks."""
    notes = set()
    for block in q4_1_blocks():
        result, problem, note = run_as(fn, "numpy", block, names=("block",))
        if problem:
            return problem
        notes.add(note)
        value, problem = as_array(result, (32,), "an array of 32 weights")
        if problem:
            return problem
        right = dequantize_q4_1_reference(block)
        if np.allclose(value, right, rtol=1e-6, atol=1e-9):
            continue
        return diagnose(value, _q4_1_mistakes(block)) or mismatch(
            value, right, "w = d · q + m for the 32 nibbles, low nibbles first"
        )
    return _passed(notes)


def _passed(notes: set) -> Note | None:
    """The verdict of a right answer: a note when it ran on the other kind of array only."""
    notes.discard(None)
    return Note(notes.pop()) if notes else None


# ------------------------------------------------------------------------------- GGUF rows


def gguf_row_order_reference(d: int) -> np.ndarray:
    half = np.arange(d // 2)
    return np.stack([half, half + d // 2], axis=1).reshape(-1)  # 0, d/2, 1, d/2 + 1, ...


def _row_mistakes(d: int) -> dict[str, np.ndarray]:
    right = gguf_row_order_reference(d)
    half = np.arange(d // 2)
    return {
        "that is the identity: the file's rows are not transformers' rows in the same order": (
            np.arange(d)
        ),
        "that is the inverse order (transformers' row i comes from the file's row order[i]); "
        "the question asks, for each row j of the file, which row of transformers' it is": (
            np.argsort(right)
        ),
        "the halves are swapped: the file's row 0 is transformers' row 0, its row 1 is row d/2": (
            np.stack([half + d // 2, half], axis=1).reshape(-1)
        ),
        "it counts rows from 1; Python counts from 0": right + 1,
        "it is the right order reversed: the file's row 0 is transformers' row 0": right[
            ::-1
        ].copy(),
        "it reverses the rows (d - 1, ..., 1, 0): the file keeps each half in order and "
        "interleaves the two, row 2i from row i, row 2i + 1 from row i + d/2": np.arange(d)[::-1],
        "it pairs row i with row d - 1 - i (the mirror); a rotation pair is (i, i + d/2)": (
            np.stack([half, d - 1 - half], axis=1).reshape(-1)
        ),
        "it pairs row i with row i + d/2 - 1; a rotation pair is (i, i + d/2)": np.stack(
            [half, half + d // 2 - 1], axis=1
        ).reshape(-1),
    }


@checker("gguf_row_order")
def check_gguf_row_order(fn):
    """Check fn(d) -> (d,) row indices for several even d."""
    for d in (8, 16, 64):
        result, problem = run(fn, d)
        if problem:
            return problem
        arr = _readable(result)
        if arr is not None and arr.shape == (d // 2,):
            return f"it returns {d // 2} indices for d = {d}: every one of the d rows has a place"
        if arr is not None and arr.shape in ((d // 2, 2), (2, d // 2)):
            return (
                f"it returns the pairs, shape {arr.shape}: the question asks for one order of "
                f"the d = {d} rows, the pairs laid side by side (flatten them row by row)"
            )
        value, problem = as_array(result, (d,), "an array of d row indices")
        if problem:
            return problem
        right = gguf_row_order_reference(d)
        if np.array_equal(value, right):
            continue
        named = diagnose(value, _row_mistakes(d), tol=0)
        if named:
            return named
        if value.max() >= d or value.min() < 0:
            return (
                f"for d = {d} it uses row {int(value.max() if value.max() >= d else value.min())}"
                f": one head has rows 0 .. {d - 1} (a pair is (i, i + d/2), not (i, i + d))"
            )
        if sorted(value.tolist()) != list(range(d)):
            return f"for d = {d} it is not a permutation of 0 .. {d - 1}: some row is lost"
        return f"wrong order for d = {d}: row 2i of the file holds coordinate i, row 2i + 1 i + d/2"
    return None


def _readable(result):
    """A result's values as a numpy array when they can be read, else None."""
    try:
        return np.asarray(to_numpy(result))
    except Exception:  # ragged lists, objects that refuse to be converted
        return None


# ------------------------------------------------------------------------------- top-p


def top_p_reference(logits: np.ndarray, p: float) -> np.ndarray:
    z = np.asarray(logits, dtype=float)
    probs = np.exp(z - z.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    order = np.argsort(-probs, axis=-1, kind="stable")
    sorted_p = np.take_along_axis(probs, order, -1)
    before = np.cumsum(sorted_p, -1) - sorted_p
    keep_sorted = before < p
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, -1)
    return np.where(keep, z, -np.inf)


def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _keep_to_logits(z, keep):
    return np.where(keep, z, -np.inf)


def _top_p_mistakes(z: np.ndarray, p: float) -> dict[str, np.ndarray]:
    probs = _softmax(z)
    order = np.argsort(-probs, axis=-1, kind="stable")
    sp = np.take_along_axis(probs, order, -1)
    cum = np.cumsum(sp, -1)

    def unsort(keep_sorted):
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, -1)
        return keep

    right_keep = np.isfinite(top_p_reference(z, p))
    extra = (cum - sp) < p  # the right set, sorted ...
    extra[..., 1:] |= extra[..., :-1].copy()  # ... and the token after it
    sz = np.take_along_axis(z, order, -1)
    asc = np.argsort(probs, axis=-1, kind="stable")
    asc_keep = np.zeros_like(right_keep)
    np.put_along_axis(
        asc_keep,
        asc,
        (np.cumsum(np.take_along_axis(probs, asc, -1), -1) - np.take_along_axis(probs, asc, -1))
        < p,
        -1,
    )
    return {
        "it drops the token that takes the sum past p: keep every token until the sum REACHES "
        "p, that one included (the smallest set with probability >= p)": _keep_to_logits(
            z, unsort(cum <= p)
        ),
        "it sums the logits, not the probabilities: softmax first": _keep_to_logits(
            z, unsort((np.cumsum(sz, -1) - sz) < p)
        ),
        "it keeps each token whose own probability is >= p; top-p sums the most probable "
        "tokens' probabilities until they reach p": _keep_to_logits(z, probs >= p),
        "it sorts from the least probable: the nucleus is the MOST probable tokens": (
            _keep_to_logits(z, asc_keep)
        ),
        "it returns the probabilities; the question asks for the logits, the others at -inf": (
            np.where(right_keep, probs, -np.inf)
        ),
        "the dropped tokens are set to 0; a logit of 0 still has probability: use -inf": np.where(
            right_keep, z, 0.0
        ),
        "it keeps one token too many: stop as soon as the kept ones sum to p": (
            _keep_to_logits(z, unsort(extra))
        ),
        "it sums the probabilities in the vocabulary's order: sort them, most probable first, "
        "before summing": _keep_to_logits(z, (np.cumsum(probs, -1) - probs) < p),
        "it sorts the whole batch at once: each row is its own distribution, sort and sum "
        "along the last axis": _keep_to_logits(z, _flat_keep(probs, p)),
        "it takes the softmax over the batch (axis 0): each row's probabilities are over the "
        "vocabulary, the last axis": _keep_to_logits(z, _row_keep(_softmax(z.T).T, p)),
    }


def _row_keep(probs: np.ndarray, p: float) -> np.ndarray:
    """The top-p set of each row of probs, sorted most probable first."""
    order = np.argsort(-probs, axis=-1, kind="stable")
    sp = np.take_along_axis(probs, order, -1)
    keep = np.zeros(probs.shape, dtype=bool)
    np.put_along_axis(keep, order, (np.cumsum(sp, -1) - sp) < p, -1)
    return keep


def _flat_keep(probs: np.ndarray, p: float) -> np.ndarray:
    """Every row's probabilities sorted together, summed until p (the batch as one row)."""
    return _row_keep(probs.reshape(1, -1), p).reshape(probs.shape)


TOP_P_CASES = ((0.9, 0), (0.5, 1), (0.2, 2), (0.99, 3))


def _same(value: np.ndarray, wrong: np.ndarray) -> bool:
    """The same tokens kept, with the same values."""
    return np.array_equal(np.isfinite(value), np.isfinite(wrong)) and np.allclose(
        np.where(np.isfinite(value), value, 0), np.where(np.isfinite(wrong), wrong, 0)
    )


@checker("top_p")
def check_top_p(fn):
    """Check fn(logits (B, V), p) -> (B, V) on several p, with rows of very different spreads;
    a mistake is named when the answer matches it in every case."""
    cases, values, notes = [], [], set()
    for p, seed in TOP_P_CASES:
        rng = np.random.default_rng(seed)
        z = rng.normal(size=(3, 12)) * np.array([[0.5], [2.0], [6.0]])
        result, problem, note = run_as(fn, "torch", z, p, names=("logits", "p"))
        if problem:
            return problem
        notes.add(note)
        value, problem = as_array(result, z.shape, "an array of logits")
        if problem:
            return problem
        if np.isnan(value).any():
            return "the result contains NaN; expected the logits, the others at -inf"
        cases.append((z, p))
        values.append(value)
    rights = [top_p_reference(z, p) for z, p in cases]
    if all(_same(v, r) for v, r in zip(values, rights)):
        return _passed(notes)
    mistakes = [_top_p_mistakes(z, p) for z, p in cases]
    for message in mistakes[0]:
        if all(_same(v, m[message]) for v, m in zip(values, mistakes)):
            return message
    if not all(np.isfinite(v).any(axis=-1).all() for v in values):
        return "a row keeps no token at all: the most probable token is always kept"
    (z, p), value, right = next(
        (c, v, r) for c, v, r in zip(cases, values, rights) if not _same(v, r)
    )
    return mismatch(
        np.where(np.isfinite(value), value, -1e9),
        np.where(np.isfinite(right), right, -1e9),
        f"the logits of the smallest set of most probable tokens whose probabilities sum "
        f"to >= p (p = {p}), the others at -inf",
    )
