"""The checkers of notebook 15 accept right answers and name the usual mistakes."""

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from mha_lib.exercises.nb15 import (
    MASK_CASES,
    check_dequantize_q4_k,
    check_layer_mask,
    check_q4_k_scales,
    check_softcap_attention,
    q4_k_blocks,
)
from mha_lib.llm.kquants import dequantize_q4_k_block, q4_k_scales


def verdict(capsys) -> str:
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return out


def test_the_blocks_are_real_q4_k_and_use_every_scale_bit():
    blocks = q4_k_blocks()
    expected = dequantize(blocks, GGMLQuantizationType.Q4_K).reshape(-1, 256)
    assert np.array_equal(np.stack([dequantize_q4_k_block(b) for b in blocks]), expected)
    assert np.all(np.isfinite(expected))
    scales = np.stack([np.concatenate(q4_k_scales(b[4:16])) for b in blocks])  # (6, 16)
    bits = (scales[..., None] >> np.arange(6)) & 1  # (6 blocks, 16 fields, 6 bits)
    assert bits.any(axis=0).all()  # each bit of each field is 1 in some block


# q4_k_scales -----------------------------------------------------------------------------------


def scales_loop(p):
    sc, m = [], []
    for j in range(8):
        if j < 4:
            sc.append(p[j] & 63)
            m.append(p[j + 4] & 63)
        else:
            sc.append((p[j + 4] & 0xF) | ((p[j - 4] >> 6) << 4))
            m.append((p[j + 4] >> 4) | ((p[j] >> 6) << 4))
    return sc, m


def scales_gguf(p):
    from gguf.quants import Q4_K

    sc, m = Q4_K.get_scale_min(p[None])
    return sc[0], m[0]


def scales_torch(p):
    t = torch.from_numpy(p.astype(np.int64))
    lo = torch.cat([t[0:4] & 63, (t[8:12] & 15) | ((t[0:4] >> 6) << 4)])
    mins = torch.cat([t[4:8] & 63, (t[8:12] >> 4) | ((t[4:8] >> 6) << 4)])
    return lo, mins


@pytest.mark.parametrize("fn", [scales_loop, scales_gguf, scales_torch, q4_k_scales])
def test_scales_accept_correct_forms(capsys, fn):
    assert check_q4_k_scales(fn)
    assert "✓ q4_k_scales: correct" in verdict(capsys)


def _i(p):
    return p.astype(np.int64)


SCALES_WRONG = [
    (lambda p: q4_k_scales(p)[::-1], "scales and minimums are swapped"),
    (
        lambda p: (
            np.concatenate([_i(p)[0:4] & 63, (_i(p)[8:12] >> 4) | ((_i(p)[0:4] >> 6) << 4)]),
            np.concatenate([_i(p)[4:8] & 63, (_i(p)[8:12] & 15) | ((_i(p)[4:8] >> 6) << 4)]),
        ),
        "nibbles of bytes 8-11 are swapped",
    ),
    (
        lambda p: (
            np.concatenate([_i(p)[0:4] & 63, _i(p)[8:12] & 15]),
            np.concatenate([_i(p)[4:8] & 63, _i(p)[8:12] >> 4]),
        ),
        "lack their top 2 bits",
    ),
    (
        lambda p: (
            np.concatenate([_i(p)[0:4] & 63, (_i(p)[8:12] & 15) | (_i(p)[0:4] >> 6)]),
            np.concatenate([_i(p)[4:8] & 63, (_i(p)[8:12] >> 4) | (_i(p)[4:8] >> 6)]),
        ),
        "not shifted up",
    ),
    (
        lambda p: (
            np.concatenate([_i(p)[0:4] & 63, (_i(p)[8:12] & 15) | ((_i(p)[4:8] >> 6) << 4)]),
            np.concatenate([_i(p)[4:8] & 63, (_i(p)[8:12] >> 4) | ((_i(p)[0:4] >> 6) << 4)]),
        ),
        "come from the wrong bytes",
    ),
    (
        lambda p: (
            np.concatenate([_i(p)[0:4], q4_k_scales(p)[0][4:]]),
            np.concatenate([_i(p)[4:8], q4_k_scales(p)[1][4:]]),
        ),
        "keep the top 2 bits",
    ),
    (
        lambda p: (
            np.concatenate([_i(p)[0:4] & 63, _i(p)[8:12] & 63]),
            np.concatenate([_i(p)[4:8] & 63, _i(p)[8:12] & 63]),
        ),
        "6-bit fields of bytes 8-11",
    ),
    (lambda p: (q4_k_scales(p)[0] + 1, q4_k_scales(p)[1]), "every scale is one too large"),
    (lambda p: (q4_k_scales(p)[0], q4_k_scales(p)[1] + 1), "every minimum is one too large"),
    (lambda p: np.concatenate(q4_k_scales(p)), "expected a pair"),
    (lambda p: (q4_k_scales(p)[0][:4], q4_k_scales(p)[1]), "expected shape (8,)"),
    (lambda p: None, "not implemented"),
]


@pytest.mark.parametrize("fn, words", SCALES_WRONG)
def test_scales_name_the_mistake(capsys, fn, words):
    assert not check_q4_k_scales(fn)
    out = verdict(capsys)
    assert out.startswith("✗ q4_k_scales:") and words in out, out


def test_scales_in_place_change_is_named(capsys):
    def destroys(p):
        out = q4_k_scales(p)
        p[:] = 0
        return out

    assert not check_q4_k_scales(destroys)
    assert "changes its argument packed in place" in verdict(capsys)


# dequantize_q4_k -------------------------------------------------------------------------------


def deq_gguf(b):
    return dequantize(b[None], GGMLQuantizationType.Q4_K)[0]


def deq_numpy(b):
    d, dmin = b[0:2].view(np.float16)[0], b[2:4].view(np.float16)[0]
    sc, m = scales_loop(b[4:16].astype(np.int64))
    codes = b[16:].reshape(4, 32)
    q = np.stack([codes & 15, codes >> 4], axis=1).reshape(8, 32)
    return (float(d) * np.array(sc)[:, None] * q - float(dmin) * np.array(m)[:, None]).ravel()


def deq_loop(b):
    d, dmin = b[0:2].view(np.float16)[0], b[2:4].view(np.float16)[0]
    sc, m = scales_loop(b[4:16].astype(np.int64))
    out = []
    for j in range(8):
        group = b[16 + 32 * (j // 2) : 16 + 32 * (j // 2 + 1)]
        codes = group & 15 if j % 2 == 0 else group >> 4
        out += [float(d) * sc[j] * int(q) - float(dmin) * m[j] for q in codes]
    return out


def deq_torch(b):
    t = torch.from_numpy(b.copy())
    d, dmin = t[0:2].view(torch.float16).float(), t[2:4].view(torch.float16).float()
    sc, m = (torch.as_tensor(x, dtype=torch.float32) for x in scales_torch(b[4:16]))
    codes = t[16:].view(4, 32).long()
    q = torch.stack([codes & 15, codes >> 4], dim=1).reshape(8, 32).float()
    return (d * sc[:, None] * q - dmin * m[:, None]).reshape(256)


@pytest.mark.parametrize("fn", [deq_gguf, deq_numpy, deq_loop, deq_torch, dequantize_q4_k_block])
def test_dequantize_accepts_correct_forms(capsys, fn):
    assert check_dequantize_q4_k(fn)
    assert "✓ dequantize_q4_k: correct" in verdict(capsys)


def _with(b, **parts):
    """deq_numpy with one of its parts replaced (d, dmin, sc, m, q, sign)."""
    d = float(b[0:2].view(np.float16)[0])
    dmin = float(b[2:4].view(np.float16)[0])
    sc, m = (np.array(x, dtype=float) for x in scales_loop(b[4:16].astype(np.int64)))
    codes = b[16:].reshape(4, 32)
    q = np.stack([codes & 15, codes >> 4], axis=1).reshape(8, 32).astype(float)
    v = {"d": d, "dmin": dmin, "sc": sc, "m": m, "q": q, "sign": -1.0} | parts
    return (v["d"] * v["sc"][:, None] * v["q"] + v["sign"] * v["dmin"] * v["m"][:, None]).ravel()


def _codes(b):
    c = b[16:].reshape(4, 32)
    return (c & 15).astype(float), (c >> 4).astype(float)


def _q4_1_order(b):
    lo, hi = _codes(b)
    return np.concatenate([lo[:, :16], hi[:, :16], lo[:, 16:], hi[:, 16:]], axis=1).reshape(8, 32)


def _bad_scales(b, fn):
    sc, m = fn(b[4:16])
    return _with(b, sc=np.array(sc, dtype=float), m=np.array(m, dtype=float))


DEQ_WRONG = [
    (lambda b: _with(b, q=_q4_1_order(b)), "Q4_1 order"),
    (lambda b: _with(b, q=np.stack(_codes(b), axis=-1).reshape(8, 32)), "interleaved"),
    (lambda b: _with(b, q=np.stack(_codes(b)[::-1], axis=1).reshape(8, 32)), "swapped: sub-block"),
    (lambda b: _with(b, sign=1.0), "adds the minimum"),
    (lambda b: _with(b, m=np.zeros(8)), "leaves out the minimums"),
    (
        lambda b: _with(
            b, d=float(b[2:4].view(np.float16)[0]), dmin=float(b[0:2].view(np.float16)[0])
        ),
        "d and dmin are swapped",
    ),
    (lambda b: deq_numpy(b) - 8 * np.repeat(_d_sc(b), 32), "centres the codes"),
    (
        lambda b: _with(b, d=float(b[0:2].view(">f2")[0]), dmin=float(b[2:4].view(">f2")[0])),
        "big-endian",
    ),
    (
        lambda b: _with(b, d=float(b[0:2].view("<u2")[0]), dmin=float(b[2:4].view("<u2")[0])),
        "as integers",
    ),
    (lambda b: _with(b, sc=np.ones(8)), "leaves out the sub-block scales"),
    (lambda b: _bad_scales(b, lambda p: q4_k_scales(p)[::-1]), "scales and minimums are swapped"),
    (lambda b: _bad_scales(b, SCALES_WRONG[2][0]), "lack their top 2 bits"),
    (lambda b: _bad_scales(b, SCALES_WRONG[4][0]), "come from the wrong bytes"),
    (lambda b: _bad_scales(b, SCALES_WRONG[1][0]), "nibbles of bytes 8-11 are swapped"),
    (lambda b: deq_numpy(b).astype(np.float16), "only to about 1e-3"),
    (lambda b: deq_numpy(b) + 1, "every weight is off by the same amount (+1)"),
    (lambda b: deq_numpy(b) - 0.25, "every weight is off by the same amount (-0.25)"),
    (lambda b: deq_numpy(b).reshape(8, 32), "expected shape (256,)"),
    (lambda b: None, "not implemented"),
]


def _d_sc(b):
    return float(b[0:2].view(np.float16)[0]) * np.array(scales_loop(b[4:16].astype(np.int64))[0])


@pytest.mark.parametrize("fn, words", DEQ_WRONG)
def test_dequantize_names_the_mistake(capsys, fn, words):
    assert not check_dequantize_q4_k(fn)
    out = verdict(capsys)
    assert out.startswith("✗ dequantize_q4_k:") and words in out, out


# layer_mask ------------------------------------------------------------------------------------


def mask_numpy(layer_type, N, window):
    i, j = np.arange(N)[:, None], np.arange(N)[None, :]
    allowed = j <= i
    if layer_type == "sliding_attention":
        allowed &= i - j < window
    return allowed


def mask_torch(layer_type, N, window):
    ones = torch.ones(N, N, dtype=torch.bool)
    if layer_type == "full_attention":
        return ones.tril()
    return ones.tril().triu(-(window - 1))


def mask_library(layer_type, N, window):
    from mha_lib.nn.masks import sliding_window_mask

    return sliding_window_mask(N, window if layer_type == "sliding_attention" else N)


def mask_loops(layer_type, N, window):
    out = [[0] * N for _ in range(N)]
    for i in range(N):
        first = max(0, i - window + 1) if layer_type == "sliding_attention" else 0
        for j in range(first, i + 1):
            out[i][j] = 1
    return out


def test_the_mask_cases_cover_both_kinds_and_long_windows():
    kinds = {t for t, _, _ in MASK_CASES}
    assert kinds == {"sliding_attention", "full_attention"}
    assert any(t == "sliding_attention" and w >= n for t, n, w in MASK_CASES)


@pytest.mark.parametrize("fn", [mask_numpy, mask_torch, mask_library, mask_loops])
def test_layer_mask_accepts_correct_forms(capsys, fn):
    assert check_layer_mask(fn)
    assert "✓ layer_mask: correct" in verdict(capsys)


def _ij(N):
    return np.arange(N)[:, None], np.arange(N)[None, :]


def _sliding(fn):
    """An answer that gets full layers right and computes sliding ones with fn(i, j, window)."""

    def answer(layer_type, N, window):
        i, j = _ij(N)
        return fn(i, j, window) if layer_type == "sliding_attention" else j <= i

    return answer


MASK_WRONG = [
    (lambda t, N, w: _ij(N)[1] <= _ij(N)[0], "the mask of a full_attention layer"),
    (lambda t, N, w: mask_numpy("sliding_attention", N, w), "the mask of a sliding_attention"),
    (_sliding(lambda i, j, w: (j <= i) & (i - j <= w)), "window + 1 keys"),
    (_sliding(lambda i, j, w: (j <= i) & (i - j < w - 1)), "window - 1 keys"),
    (_sliding(lambda i, j, w: np.abs(i - j) < w), "not causal"),
    (lambda t, N, w: mask_numpy(t, N, w).T, "transposed"),
    (_sliding(lambda i, j, w: (j < i) & (i - j < w)), "does not see itself"),
    (_sliding(lambda i, j, w: (j <= i) & (j < w)), "first `window` keys"),
    (lambda t, N, w: ~mask_numpy(t, N, w), "may NOT see"),
    (lambda t, N, w: mask_numpy(t, N, w)[:-1], "expected shape"),
    (
        lambda t, N, w: np.where(mask_numpy(t, N, w), 0.0, -np.inf),
        "it returns an additive mask (0 where a key is seen, -inf where not)",
    ),
    (
        lambda t, N, w: torch.zeros(N, N).masked_fill(
            ~torch.from_numpy(mask_numpy(t, N, w)), float("-inf")
        ),
        "the exercise asks for booleans",
    ),
    (lambda t, N, w: None, "not implemented"),
]


def test_an_answer_that_matches_no_mistake_is_still_refused(capsys):
    """Outside the catalogue: refused, with the generic message."""
    odd = _sliding(lambda i, j, w: (j <= i) & (i - j < w) & (j % 2 == 0))
    assert not check_layer_mask(odd)
    assert "wrong values" in verdict(capsys)


@pytest.mark.parametrize("fn, words", MASK_WRONG)
def test_layer_mask_names_the_mistake(capsys, fn, words):
    assert not check_layer_mask(fn)
    out = verdict(capsys)
    assert out.startswith("✗ layer_mask:") and words in out, out


# softcap_attention -----------------------------------------------------------------------------


def softcap_torch(q, k, v, cap):
    N, d = q.shape[-2], q.shape[-1]
    s = q @ k.transpose(-1, -2) / d**0.5  # (B, h, N, N)
    s = cap * torch.tanh(s / cap)
    s = s.masked_fill(~torch.ones(N, N, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def softcap_library(q, k, v, cap):
    from mha_lib.nn.backends import eager_attention
    from mha_lib.nn.masks import softcap_score_mod

    return eager_attention(q, k, v, score_mod=softcap_score_mod(cap))


def softcap_sdpa_mask(q, k, v, cap):
    """The capped scores as an additive float mask of SDPA on zero queries: another form."""
    import torch.nn.functional as F

    N, d = q.shape[-2], q.shape[-1]
    s = cap * torch.tanh(q @ k.transpose(-1, -2) / d**0.5 / cap)
    s = s.masked_fill(~torch.ones(N, N, dtype=torch.bool).tril(), float("-inf"))
    return F.scaled_dot_product_attention(torch.zeros_like(q), k, v, attn_mask=s)


def softcap_numpy(q, k, v, cap):
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    N, d = q.shape[-2], q.shape[-1]
    s = cap * np.tanh(q @ np.swapaxes(k, -1, -2) / np.sqrt(d) / cap)
    s = np.where(np.tril(np.ones((N, N), bool)), s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("fn", [softcap_torch, softcap_library, softcap_sdpa_mask, softcap_numpy])
def test_softcap_accepts_correct_forms(capsys, fn):
    assert check_softcap_attention(fn)
    assert "✓ softcap_attention: correct" in verdict(capsys)


def _attn(q, k, v, cap, score=None, after_mask=False, after_softmax=False):
    N, d = q.shape[-2], q.shape[-1]
    raw = q @ k.transpose(-1, -2)
    s = score(raw, d) if score else cap * torch.tanh(raw / d**0.5 / cap)
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    if after_mask:
        s = cap * torch.tanh((raw / d**0.5).masked_fill(~causal, float("-inf")) / cap)
        return torch.softmax(s, dim=-1) @ v
    w = torch.softmax(s.masked_fill(~causal, float("-inf")), dim=-1)
    if after_softmax:
        w = cap * torch.tanh(w / cap)
    return w @ v


def _score(fn):
    return lambda q, k, v, c: _attn(q, k, v, c, score=lambda r, d: fn(r, d, c))


SOFTCAP_WRONG = [
    (lambda q, k, v, c: _attn(q, k, v, c, after_mask=True), "after the mask"),
    (
        lambda q, k, v, c: _attn(q, k, v, c, score=lambda r, d: r / d**0.5, after_softmax=True),
        "after the softmax",
    ),
    (_score(lambda r, d, c: r / d**0.5), "no cap"),
    (_score(lambda r, d, c: (r / d**0.5).clamp(-c, c)), "clamp"),
    (_score(lambda r, d, c: torch.tanh(r / d**0.5 / c)), "factor"),
    (_score(lambda r, d, c: c * torch.tanh(r / d**0.5)), "cap·tanh(s)"),
    (_score(lambda r, d, c: c * torch.tanh(r / c) / d**0.5), "before dividing"),
    (_score(lambda r, d, c: c * torch.tanh(r / c)), "divided by √d"),
    (lambda q, k, v, c: _attn(q, k, v, c)[..., :-1], "expected shape"),
    (lambda q, k, v, c: _attn(q, k, v, c).half(), "only to about 1e-3"),
    (lambda q, k, v, c: None, "not implemented"),
]


@pytest.mark.parametrize("fn, words", SOFTCAP_WRONG)
def test_softcap_names_the_mistake(capsys, fn, words):
    assert not check_softcap_attention(fn)
    out = verdict(capsys)
    assert out.startswith("✗ softcap_attention:") and words in out, out


def test_softcap_on_numpy_only_passes_with_a_note(capsys):
    def numpy_only(q, k, v, cap):
        assert isinstance(q, np.ndarray)
        return softcap_numpy(q, k, v, cap)

    assert check_softcap_attention(numpy_only)
    out = verdict(capsys)
    assert "✓ softcap_attention: correct (on numpy arrays only" in out, out


CATALOGUES = [
    (check_q4_k_scales, SCALES_WRONG),
    (check_dequantize_q4_k, DEQ_WRONG),
    (check_layer_mask, MASK_WRONG),
    (check_softcap_attention, SOFTCAP_WRONG),
]


@pytest.mark.parametrize(
    "check, fn", [(check, fn) for check, wrong in CATALOGUES for fn, _ in wrong]
)
def test_no_catalogued_answer_gets_the_generic_message(capsys, check, fn):
    """Every wrong answer of the catalogues is refused naming its mistake, none with the
    message for values that match no known mistake."""
    assert not check(fn)
    out = verdict(capsys)
    assert "wrong values" not in out and "contains inf or NaN" not in out, out
