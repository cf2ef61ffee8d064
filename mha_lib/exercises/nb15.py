"""Checkers for notebook 15 (the attention of the models you run: Gemma 3 and K-quants).

- `check_q4_k_scales(fn)`: fn(packed) -> (scales, mins), the 8 six-bit sub-block scales and 8
  six-bit minimums (integers 0..63) packed in Q4_K's 12 bytes (numpy uint8): bytes 0-3 hold
  scales 0-3 and bytes 4-7 minimums 0-3 in their low 6 bits; bytes 8-11 hold scales 4-7 in their
  low nibbles and minimums 4-7 in their high nibbles, whose top 2 bits are the top 2 bits of
  bytes 0-3 (scales) and 4-7 (minimums);
- `check_dequantize_q4_k(fn)`: fn(block) -> the 256 weights of one Q4_K super-block, block being
  its 144 bytes (numpy uint8): d and dmin (float16), the 12 bytes of scales and minimums, then
  128 bytes of 4-bit codes, each 32 bytes holding sub-block 2g in their low nibbles and 2g + 1
  in their high nibbles; w = d · sc_j · q - dmin · m_j;
- `check_layer_mask(fn)`: fn(layer_type, N, window) -> (N, N) bool, True where query i may
  attend to key j: "full_attention": every key j <= i; "sliding_attention": the last `window`
  keys, i - window < j <= i (transformers' convention, and llama.cpp's);
- `check_softcap_attention(fn)`: fn(q, k, v, cap) -> o (B, h, N, d), causal attention whose
  scores s = q·k/√d are soft-capped to cap·tanh(s/cap) before the mask and the softmax (Gemma 2;
  capping after the mask would turn a masked -inf into -cap and let a query see the future).

numpy only: the notebook may pass numpy arrays or torch tensors; answers are read either way.
The blocks are written by `mha_lib.llm.kquants.quantize_q4_k` (imported when a checker runs),
plus blocks of random bytes, so that every bit of the scales is used.
"""

from __future__ import annotations

import numpy as np

from ._base import Note, as_array, checker, diagnose, mismatch, run, run_as

__all__ = [
    "check_dequantize_q4_k",
    "check_layer_mask",
    "check_q4_k_scales",
    "check_softcap_attention",
]


def q4_k_blocks(seed: int = 0) -> np.ndarray:
    """Six Q4_K blocks (6, 144): three quantized from random weights of different ranges, three
    of random bytes (with moderate float16 d and dmin), so that every scale bit is set somewhere."""
    from ..llm.kquants import quantize_q4_k

    rng = np.random.default_rng(seed)
    w = rng.normal(size=(3, 8, 32)) * rng.uniform(0.01, 3, size=(3, 8, 1)) + rng.normal(
        size=(3, 8, 1)
    )
    made = quantize_q4_k(w.reshape(3, 256).astype(np.float32))
    noise = rng.integers(0, 256, size=(3, 144), dtype=np.uint8)
    scales = rng.uniform(0.001, 0.1, size=(3, 2)).astype(np.float16)
    noise[:, :4] = scales.view(np.uint8).reshape(3, 4)
    return np.concatenate([made, noise])


def _parts(block: np.ndarray):
    """(d, dmin, sc, m, q) of a block: q (8, 32) in sub-block order; float32 as gguf."""
    from ..llm.kquants import q4_k_scales

    d = np.frombuffer(block[0:2].tobytes(), "<f2")[0].astype(np.float32)
    dmin = np.frombuffer(block[2:4].tobytes(), "<f2")[0].astype(np.float32)
    sc, m = q4_k_scales(block[4:16])
    codes = block[16:].reshape(4, 32)
    q = np.stack([codes & 15, codes >> 4], axis=1).reshape(8, 32).astype(np.float32)
    return d, dmin, sc.astype(np.float32), m.astype(np.float32), q


def _weights(d, dmin, sc, m, q, sign=-1.0) -> np.ndarray:
    return ((d * sc)[:, None] * q + sign * (dmin * m)[:, None]).reshape(256)


def _scale_mistakes(packed: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    from ..llm.kquants import q4_k_scales

    p = packed.astype(np.int64)
    sc, m = q4_k_scales(packed)
    low = (p[8:12] & 15, p[8:12] >> 4)  # the nibbles of bytes 8-11
    return {
        "scales and minimums are swapped: bytes 0-3 hold the SCALES of sub-blocks 0-3, "
        "bytes 4-7 their minimums": (m, sc),
        "the nibbles of bytes 8-11 are swapped: their LOW nibble is scale 4-7, their high "
        "nibble minimum 4-7": (
            np.concatenate([sc[:4], low[1] | ((p[0:4] >> 6) << 4)]),
            np.concatenate([m[:4], low[0] | ((p[4:8] >> 6) << 4)]),
        ),
        "sub-blocks 4-7 lack their top 2 bits: each is a nibble of bytes 8-11 plus the top 2 "
        "bits of bytes 0-3 (scales) or 4-7 (minimums), shifted up by 4": (
            np.concatenate([sc[:4], low[0]]),
            np.concatenate([m[:4], low[1]]),
        ),
        "the top 2 bits of sub-blocks 4-7 are not shifted up: they are bits 4 and 5 of the "
        "value (<< 4 after >> 6)": (
            np.concatenate([sc[:4], low[0] | (p[0:4] >> 6)]),
            np.concatenate([m[:4], low[1] | (p[4:8] >> 6)]),
        ),
        "the top 2 bits of sub-blocks 4-7 come from the wrong bytes: the scales' from bytes "
        "0-3, the minimums' from bytes 4-7": (
            np.concatenate([sc[:4], low[0] | ((p[4:8] >> 6) << 4)]),
            np.concatenate([m[:4], low[1] | ((p[0:4] >> 6) << 4)]),
        ),
        "sub-blocks 0-3 keep the top 2 bits of their bytes: mask them to 6 bits (& 63)": (
            np.concatenate([p[0:4], sc[4:]]),
            np.concatenate([p[4:8], m[4:]]),
        ),
        "sub-blocks 4-7 are read as 6-bit fields of bytes 8-11 (& 63); a byte there holds two "
        "nibbles, a scale's and a minimum's": (
            np.concatenate([sc[:4], p[8:12] & 63]),
            np.concatenate([m[:4], p[8:12] & 63]),
        ),
        "every scale is one too large (sc + 1): the 6-bit fields hold the scales as they are, "
        "0..63, with nothing added": (sc + 1, m),
        "every minimum is one too large (m + 1): the 6-bit fields hold the minimums as they "
        "are, 0..63, with nothing added": (sc, m + 1),
    }


@checker("q4_k_scales")
def check_q4_k_scales(fn):
    """Check fn(packed (12,) uint8) -> (scales (8,), mins (8,)) on the blocks' 12 bytes."""
    from ..llm.kquants import q4_k_scales

    for block in q4_k_blocks():
        packed = block[4:16].copy()
        result, problem = run(fn, packed, names=("packed",))
        if problem:
            return problem
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            return f"expected a pair (scales, mins) of 8 integers each; got {type(result).__name__}"
        sc, problem = as_array(result[0], (8,), "8 scales")
        if problem:
            return problem
        m, problem = as_array(result[1], (8,), "8 minimums")
        if problem:
            return problem
        right = q4_k_scales(packed)
        got = np.concatenate([sc, m])
        if np.array_equal(got, np.concatenate(right)):
            continue
        wrong = {k: np.concatenate(v) for k, v in _scale_mistakes(packed).items()}
        return diagnose(got, wrong, tol=0) or (
            "wrong values: expected the 6-bit scales and minimums (0..63) of sub-blocks 0-7"
        )
    return None


def _q4_k_mistakes(block: np.ndarray) -> dict[str, np.ndarray]:
    d, dmin, sc, m, q = _parts(block)
    codes = block[16:].reshape(4, 32)
    lo, hi = (codes & 15).astype(np.float32), (codes >> 4).astype(np.float32)
    # notebook 12's Q4_1 order, per sub-block: byte j of 16 holds weights j and j + 16
    q4_1 = np.concatenate([lo[:, :16], hi[:, :16], lo[:, 16:], hi[:, 16:]], axis=1)
    pairs = np.stack([lo, hi], axis=-1).reshape(8, 32)  # low, high of byte 0, then byte 1...
    swapped = np.stack([hi, lo], axis=1).reshape(8, 32)
    mistakes = {
        "the nibbles are in notebook 12's Q4_1 order (byte j: weights j and j + 16); in Q4_K "
        "each 32 bytes hold two whole sub-blocks, the first in the low nibbles": _weights(
            d, dmin, sc, m, q4_1.reshape(8, 32)
        ),
        "the nibbles are interleaved (low, high of byte 0, then byte 1, ...); each 32 bytes hold "
        "sub-block 2g in their low nibbles, then sub-block 2g + 1 in their high nibbles": _weights(
            d, dmin, sc, m, pairs
        ),
        "the low and high nibbles are swapped: sub-block 2g is in the LOW nibbles": _weights(
            d, dmin, sc, m, swapped
        ),
        "it adds the minimum; Q4_K subtracts it: w = d · sc · q - dmin · m": _weights(
            d, dmin, sc, m, q, sign=1.0
        ),
        "it leaves out the minimums: w = d · sc · q - dmin · m": _weights(d, dmin, sc, 0 * m, q),
        "d and dmin are swapped: d (bytes 0-1) scales the codes, dmin (bytes 2-3) the "
        "minimums": _weights(dmin, d, sc, m, q),
        "it centres the codes (q - 8), as Q4_0 does; Q4_K's q is unsigned, the minimum carries "
        "the offset": _weights(d, dmin, sc, m, q - 8),
        "it reads d and dmin big-endian; GGUF is little-endian": _weights(
            block[0:2].view(">f2")[0].astype(np.float32),
            block[2:4].view(">f2")[0].astype(np.float32),
            sc,
            m,
            q,
        ),
        "it reads d and dmin's bytes as integers; they are float16s (view them as float16)": (
            _weights(
                block[0:2].view("<u2")[0].astype(np.float32),
                block[2:4].view("<u2")[0].astype(np.float32),
                sc,
                m,
                q,
            )
        ),
        "it leaves out the sub-block scales: each sub-block's codes are scaled by d · sc_j and "
        "its minimum is dmin · m_j": _weights(d, dmin, np.ones(8, np.float32), m, q),
    }
    for message, (sc_bad, m_bad) in _scale_mistakes(block[4:16]).items():
        mistakes[f"the 6-bit scales are unpacked wrong: {message}"] = _weights(
            d, dmin, sc_bad.astype(np.float32), m_bad.astype(np.float32), q
        )
    return mistakes


@checker("dequantize_q4_k")
def check_dequantize_q4_k(fn):
    """Check fn(block (144,) uint8) -> (256,) weights on several blocks."""
    from ..llm.kquants import dequantize_q4_k_block

    for block in q4_k_blocks():
        result, problem = run(fn, block, names=("block",))
        if problem:
            return problem
        value, problem = as_array(result, (256,), "an array of 256 weights")
        if problem:
            return problem
        right = dequantize_q4_k_block(block)
        if np.allclose(value, right, rtol=1e-6, atol=1e-9):
            continue
        return (
            diagnose(value, _q4_k_mistakes(block), tol=1e-5)
            or _constant_offset(value, right)
            or mismatch(
                value, right, "w = d · sc_j · q - dmin · m_j for the 8 sub-blocks of 32 codes"
            )
        )
    return None


def _constant_offset(value: np.ndarray, right: np.ndarray) -> str | None:
    """The message for weights that are all off by one same nonzero amount, else None."""
    diff = value - right
    if not np.all(np.isfinite(diff)) or np.allclose(diff, 0, atol=1e-6):
        return None
    if np.allclose(diff, diff[0], rtol=1e-4, atol=1e-6 * max(1.0, np.abs(right).max())):
        return (
            f"every weight is off by the same amount ({diff[0]:+.4g}): each sub-block's offset is "
            "-dmin · m_j, its own, and nothing is added to all 256 weights"
        )
    return None


# the mask of a layer ------------------------------------------------------------------------


def layer_mask(layer_type: str, N: int, window: int) -> np.ndarray:
    """(N, N) bool: the reference mask of a full or sliding layer (see the module docstring)."""
    i, j = np.arange(N)[:, None], np.arange(N)[None, :]  # (N, 1) queries, (1, N) keys
    causal = j <= i
    return causal & (i - j < window) if layer_type == "sliding_attention" else causal


def _mask_mistakes(layer_type: str, N: int, window: int) -> dict[str, np.ndarray]:
    i, j = np.arange(N)[:, None], np.arange(N)[None, :]
    causal = j <= i
    other = "full_attention" if layer_type == "sliding_attention" else "sliding_attention"
    return {
        f"it gives a {layer_type} layer the mask of a {other} layer: a sliding layer sees the "
        "last `window` keys, a full layer every earlier key": layer_mask(other, N, window),
        "the window holds window + 1 keys (i - j <= window): query i sees the `window` keys "
        "i - window + 1 .. i, itself included": causal & (i - j <= window),
        "the window holds window - 1 keys: query i sees the `window` keys i - window + 1 .. i, "
        "itself included": causal & (i - j < window - 1),
        "the mask is not causal: the window reaches into the future (|i - j| < window); a "
        "query sees only keys j <= i": np.abs(i - j) < window
        if layer_type == "sliding_attention"
        else np.ones((N, N), bool),
        "the mask is transposed (rows are keys): row i must be query i, True at the keys it "
        "sees, j <= i": layer_mask(layer_type, N, window).T,
        "query i does not see itself: its own key is in the window (j <= i)": causal
        & (j < i)
        & (i - j < window)
        if layer_type == "sliding_attention"
        else j < i,
        "the window is the first `window` keys of the text (j < window); a sliding layer keeps "
        "the LAST window keys before each query": causal & (j < window),
        "True marks the keys a query may NOT see; the mask is True where attention is "
        "allowed": ~layer_mask(layer_type, N, window),
    }


MASK_CASES = (  # (layer_type, N, window): both kinds, windows shorter and longer than the text
    ("sliding_attention", 9, 4),
    ("full_attention", 9, 4),
    ("sliding_attention", 12, 5),
    ("full_attention", 7, 3),
    ("sliding_attention", 6, 8),
    ("sliding_attention", 10, 1),
)


@checker("layer_mask")
def check_layer_mask(fn):
    """Check fn(layer_type, N, window) -> (N, N) bool, both kinds of layer, windows shorter
    and longer than the text."""
    for layer_type, N, window in MASK_CASES:
        result, problem = run(fn, layer_type, N, window, names=("layer_type", "N", "window"))
        if problem:
            return problem
        got, problem = as_array(result, (N, N), f"an (N, N) = ({N}, {N}) mask")
        if problem:
            return problem
        right = layer_mask(layer_type, N, window)
        if set(np.unique(got).tolist()) <= {0.0, 1.0} and np.array_equal(got != 0, right):
            continue
        if np.isneginf(got).any() and set(np.unique(got[np.isfinite(got)]).tolist()) <= {0.0}:
            return (
                "it returns an additive mask (0 where a key is seen, -inf where not), the kind "
                "added to the scores before a softmax; the exercise asks for booleans, True where "
                "query i may attend to key j"
            )
        wrong = {
            k: v.astype(np.float64)
            for k, v in _mask_mistakes(layer_type, N, window).items()
            if not np.array_equal(v, right)
        }
        case = f" ({layer_type}, N = {N}, window = {window})"
        found = diagnose(got, wrong, tol=0)
        if found:
            return found + case
        return "wrong values: expected True where query i sees key j" + case
    return None


# soft-capped attention ------------------------------------------------------------------------


def _softmax(s: np.ndarray) -> np.ndarray:
    s = s - s.max(-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(-1, keepdims=True)


def softcap_attention(q, k, v, cap: float, where: str = "right", how: str = "tanh") -> np.ndarray:
    """Causal attention with capped scores, in float64; `where`/`how` make the known mistakes."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    N, d = q.shape[-2], q.shape[-1]
    raw = q @ np.swapaxes(k, -1, -2)  # (B, h, N, N)
    s = raw / np.sqrt(d)
    capped = {
        "tanh": lambda x: cap * np.tanh(x / cap),
        "no c": lambda x: np.tanh(x / cap),
        "no divide": lambda x: cap * np.tanh(x),
        "clamp": lambda x: np.clip(x, -cap, cap),
        "none": lambda x: x,
    }[how]
    causal = np.tril(np.ones((N, N), bool))
    if where == "before scaling":
        s = capped(raw) / np.sqrt(d)
    elif where == "after mask":  # the masked scores become -cap: every key is seen
        return _softmax(capped(np.where(causal, s, -1e30))) @ v
    elif where == "after softmax":
        w = capped(_softmax(np.where(causal, s, -np.inf)))
        return w @ v
    else:
        s = capped(s)
    w = _softmax(np.where(causal, s, -np.inf))
    return w @ v


def softcap_inputs(seed: int = 0):
    """(q, k, v) float32 (2, 2, 6, 8) with scores of size up to ~40: the cap (10) matters."""
    rng = np.random.default_rng(seed)
    q = (rng.normal(size=(2, 2, 6, 8)) * 4).astype(np.float32)
    k = (rng.normal(size=(2, 2, 6, 8)) * 4).astype(np.float32)
    v = rng.normal(size=(2, 2, 6, 8)).astype(np.float32)
    return q, k, v


@checker("softcap_attention")
def check_softcap_attention(fn):
    """Check fn(q, k, v, cap) -> o (B, h, N, d) on torch tensors (numpy arrays accepted with a
    note), with caps that matter (10) and one that hardly does (1000)."""
    for seed, cap in ((0, 10.0), (1, 5.0), (2, 1000.0)):
        q, k, v = softcap_inputs(seed)
        result, problem, note = run_as(fn, "torch", q, k, v, cap, names=("q", "k", "v", "cap"))
        if problem:
            return problem
        got, problem = as_array(result, q.shape, f"an output of shape {q.shape} (B, h, N, d)")
        if problem:
            return problem
        right = softcap_attention(q, k, v, cap)
        if np.allclose(got, right, rtol=1e-4, atol=1e-5):
            continue
        wrong = {
            "it caps the scores after the mask: tanh turns a masked -inf into -cap, and the "
            "query sees the future; cap first, then mask": softcap_attention(
                q, k, v, cap, "after mask"
            ),
            "it caps the weights after the softmax; the cap is a score modification, applied "
            "to s = q·k/√d before the softmax": softcap_attention(q, k, v, cap, "after softmax"),
            "no cap: the scores must become cap·tanh(s/cap)": softcap_attention(
                q, k, v, cap, how="none"
            ),
            "a hard clamp to [-cap, cap]; the soft cap is cap·tanh(s/cap), smooth and below cap "
            "in size everywhere": softcap_attention(q, k, v, cap, how="clamp"),
            "tanh(s/cap) without the factor cap: the capped scores lie in (-1, 1) and attention "
            "is nearly uniform; multiply by cap": softcap_attention(q, k, v, cap, how="no c"),
            "cap·tanh(s): divide the scores by cap inside the tanh": softcap_attention(
                q, k, v, cap, how="no divide"
            ),
            "it caps q·k before dividing by √d; Gemma 2 caps the scaled score "
            "s = q·k/√d": softcap_attention(q, k, v, cap, "before scaling"),
            "the scores are not divided by √d: s = q·k/√d": softcap_attention(
                q * np.sqrt(q.shape[-1]), k, v, cap
            ),
        }
        found = diagnose(
            got, {m: w for m, w in wrong.items() if not np.allclose(w, right)}, tol=1e-4
        )
        return found or mismatch(got, right, "softmax(mask(cap·tanh(q·kᵀ/√d / cap))) · v")
    return Note(note) if note else None
