"""The checkers of notebook 10 accept right answers and name the usual mistakes."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_lib.exercises.nb10 import (
    check_decode_step,
    check_rope,
    check_score_table,
    check_seed_interval,
)
from mha_lib.nn import cached_attention
from mha_lib.positions import rope


def verdict(capsys) -> str:
    """The single line a checker printed."""
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return out


def rejected(capsys, check, fn, words):
    assert not check(fn)
    out = verdict(capsys)
    assert out.startswith("✗") and words in out, out


# rope -------------------------------------------------------------------------------------------


def make_rope(
    sign=1.0,
    exponent=2.0,
    swap_layout=False,
    use_arange=False,
    cos_only=False,
    out_half=False,
    flip=False,
    no_position=False,
):
    def fn(x, positions, interleaved):
        N, d = x.shape
        inter = interleaved != swap_layout
        omega = 10000.0 ** (-exponent * torch.arange(d // 2, dtype=torch.float64) / d)
        if flip:
            omega = omega.flip(0)
        p = torch.arange(N) if use_arange else positions
        angle = sign * p.double()[:, None] * omega
        if no_position:
            angle = omega.expand(N, -1)
        cos, sin = angle.cos(), angle.sin()
        if cos_only:
            sin = torch.zeros_like(sin)
        if inter:
            x1, x2 = x[:, 0::2], x[:, 1::2]
        else:
            x1, x2 = x[:, : d // 2], x[:, d // 2 :]
        a, b = x1 * cos - x2 * sin, x2 * cos + x1 * sin
        if inter and not out_half:
            return torch.stack([a, b], -1).flatten(-2)
        return torch.cat([a, b], -1)

    return fn


def rope_complex(x, positions, interleaved):
    """Meta's complex-number form (with a permutation for the half-split layout)."""
    d = x.shape[-1]
    perm = torch.stack([torch.arange(d // 2), torch.arange(d // 2) + d // 2], -1).flatten()
    xi = x if interleaved else x[:, perm]
    omega = 1.0 / 10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    z = torch.view_as_complex(xi.reshape(-1, d // 2, 2).contiguous())
    out = torch.view_as_real(z * torch.polar(torch.ones_like(omega), positions[:, None] * omega))
    out = out.flatten(-2)
    return out if interleaved else out[:, torch.argsort(perm)]


def rope_numpy(x, positions, interleaved):
    x = x.numpy()
    d = x.shape[1]
    theta = positions.numpy()[:, None] * 10000.0 ** (-np.arange(0, d, 2) / d)
    if interleaved:
        out = x.copy()
        out[:, 0::2] = x[:, 0::2] * np.cos(theta) - x[:, 1::2] * np.sin(theta)
        out[:, 1::2] = x[:, 1::2] * np.cos(theta) + x[:, 0::2] * np.sin(theta)
        return out
    rot = np.concatenate([-x[:, d // 2 :], x[:, : d // 2]], 1)
    return x * np.cos(np.tile(theta, 2)) + rot * np.sin(np.tile(theta, 2))


def rope_transformers_style(x, positions, interleaved, angle_layout=None, dtype=torch.float64):
    """transformers' form: angles laid out per coordinate, x·cos + rotate(x)·sin. The angle
    layout must match the pairing: cat([θ, θ]) for (i, i + d/2), θ repeated in place for
    (2i, 2i + 1); angle_layout swaps it (a mix of the two conventions), dtype=torch.float32
    computes the frequencies and angles as transformers does."""
    d = x.shape[-1]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=dtype) / d))
    theta = positions[:, None].to(dtype) * inv_freq  # (N, d/2)
    layout = ("meta" if interleaved else "hf") if angle_layout is None else angle_layout
    per_coord = theta.repeat_interleave(2, -1) if layout == "meta" else torch.cat([theta] * 2, -1)
    if interleaved:
        turned = torch.stack([-x[:, 1::2], x[:, 0::2]], -1).flatten(-2)
    else:
        turned = torch.cat([-x[:, d // 2 :], x[:, : d // 2]], -1)
    return x * per_coord.cos() + turned * per_coord.sin()


def rope_in_float32(x, positions, interleaved):
    """Right in float32, then handed back as float32."""
    return rope_transformers_style(x.float(), positions, interleaved, dtype=torch.float32)


@pytest.mark.parametrize(
    "fn",
    [
        make_rope(),
        rope_complex,
        rope_numpy,
        rope_transformers_style,
        lambda x, p, i: rope(x, p, interleaved=i),
    ],
)
def test_check_rope_accepts_correct_forms(capsys, fn):
    assert check_rope(fn)
    assert "✓ rope: correct" in verdict(capsys)


@pytest.mark.parametrize(
    "fn, words",
    [
        (make_rope(sign=-1.0), "rotates the wrong way"),
        (make_rope(exponent=1.0), "base^(-i/d)"),
        (make_rope(swap_layout=True), "pairs the wrong coordinates"),
        (make_rope(use_arange=True), "ignores the positions given"),
        (make_rope(cos_only=True), "keeps only the cos terms"),
        (make_rope(out_half=True), "returns the half-split layout"),
        (make_rope(flip=True), "frequencies are reversed"),
        (make_rope(no_position=True), "forgets the position"),
        (lambda x, p, i: x, "returns x unchanged"),
        (lambda x, p, i: None, "not implemented yet"),
        (
            lambda x, p, i: rope_transformers_style(x, p, i, dtype=torch.float32),
            "the angles are computed in float32",
        ),
        (rope_in_float32, "the result is rounded to float32"),
        (
            lambda x, p, i: rope_transformers_style(x, p, i, "meta" if not i else "hf"),
            "it mixes the two layouts: it pairs (i, i + d/2)",
        ),
        (
            lambda x, p, i: rope_transformers_style(x, p, i, "hf"),
            "it mixes the two layouts: it pairs (2i, 2i + 1)",
        ),
    ],
)
def test_check_rope_names_the_mistake(capsys, fn, words):
    rejected(capsys, check_rope, fn, words)


# score table ------------------------------------------------------------------------------------


def table(rot_q=True, rot_k=True, transpose=False, scale=1.0, mixed=False, k_back=False):
    def fn(q, k, N):
        pos = torch.arange(N)
        Q = rope(q.expand(N, -1), pos) if rot_q else q.expand(N, -1)
        if not rot_k:
            K = k.expand(N, -1)
        elif mixed:
            K = rope(k.expand(N, -1), pos, interleaved=True)
        elif k_back:
            K = make_rope(sign=-1.0)(k.expand(N, -1).clone(), pos, False)
        else:
            K = rope(k.expand(N, -1), pos)
        S = (Q @ K.T) * scale
        return S.T if transpose else S

    return fn


def table_loop(q, k, N):
    S = np.zeros((N, N))
    for m in range(N):
        for n in range(N):
            S[m, n] = float(
                rope(q[None], torch.tensor([m]))[0] @ rope(k[None], torch.tensor([n]))[0]
            )
    return S


def table_relative(q, k, N):
    """Only the offset matters: S[m, n] = rope(q, m - n + N) · rope(k, N)."""
    S = torch.empty(N, N, dtype=torch.float64)
    kN = rope(k[None], torch.tensor([N]))[0]
    for m in range(N):
        for n in range(N):
            S[m, n] = rope(q[None], torch.tensor([m - n + N]))[0] @ kN
    return S


def table_interleaved(q, k, N):
    pos = torch.arange(N)
    return (
        rope(q.expand(N, -1), pos, interleaved=True)
        @ rope(k.expand(N, -1), pos, interleaved=True).T
    )


@pytest.mark.parametrize("fn", [table(), table_loop, table_relative])
def test_check_score_table_accepts_correct_forms(capsys, fn):
    assert check_score_table(fn)
    assert "✓ score_table: correct" in verdict(capsys)


@pytest.mark.parametrize(
    "fn, words",
    [
        (table(rot_k=False), "keys are not rotated"),
        (table(rot_q=False), "queries are not rotated"),
        (table(rot_q=False, rot_k=False), "nothing is rotated"),
        (table(transpose=True), "transposed"),
        (table(scale=8**-0.5), "scaled by 1/√d"),
        (table(mixed=True), "different layouts"),
        (table(k_back=True), "m + n"),
        (table_interleaved, "the interleaved layout"),
    ],
)
def test_check_score_table_names_the_mistake(capsys, fn, words):
    rejected(capsys, check_score_table, fn, words)


# decode step ------------------------------------------------------------------------------------


def at(t):
    return torch.tensor([t])


def decode_right(q, k, v, cache, t):
    return cached_attention(rope(q, at(t)), rope(k, at(t)), v, cache)


def decode_by_hand(q, k, v, cache, t):
    keys, values = cache.append(rope(k, at(t)), v)
    s = rope(q, at(t)) @ keys.transpose(-1, -2) / q.shape[-1] ** 0.5
    return torch.softmax(s, -1) @ values


def decode_rerotate_from_raw(q, k, v, cache, t):
    """Wasteful but right: keep raw keys, rotate each at its own position every step."""
    keys, values = cache.append(k, v)
    m = keys.shape[2]
    return F.scaled_dot_product_attention(rope(q, at(t)), rope(keys, torch.arange(m)), values)


def decode_double(q, k, v, cache, t):
    keys, values = cache.append(rope(k, at(t)), v)
    m = keys.shape[2]
    return F.scaled_dot_product_attention(rope(q, at(t)), rope(keys, torch.full((m,), t)), values)


def decode_double_in_place(q, k, v, cache, t):
    cache.append(rope(k, at(t)), v)
    m = cache.length
    cache.k[:, :, :m] = rope(cache.k[:, :, :m], torch.full((m,), t))
    return F.scaled_dot_product_attention(rope(q, at(t)), cache.k[:, :, :m], cache.v[:, :, :m])


def decode_top_left(q, k, v, cache, t):
    """08's lesson missed: one query, m keys, is_causal=True (SDPA's mask is top-left)."""
    keys, values = cache.append(rope(k, at(t)), v)
    return F.scaled_dot_product_attention(rope(q, at(t)), keys, values, is_causal=True)


def decode_by_hand_unscaled(scale):
    def fn(q, k, v, cache, t):
        keys, values = cache.append(rope(k, at(t)), v)
        s = rope(q, at(t)) @ keys.transpose(-1, -2)
        s = s / q.shape[-1] if scale == "d" else s * scale
        return torch.softmax(s, -1) @ values

    return fn


def decode_shifted(q, k, v, cache, t):
    """Every position shifted by the same constant: no score changes."""
    return cached_attention(rope(q, at(t + 7)), rope(k, at(t + 7)), v, cache)


@pytest.mark.parametrize(
    "fn", [decode_right, decode_by_hand, decode_rerotate_from_raw, decode_shifted]
)
def test_check_decode_step_accepts_correct_forms(capsys, fn):
    assert check_decode_step(fn)
    assert "✓ decode_step: correct" in verdict(capsys)


@pytest.mark.parametrize(
    "fn, words",
    [
        (decode_double_in_place, "rotated again at every step (the classic bug)"),
        (lambda q, k, v, c, t: cached_attention(rope(q, at(t)), k, v, c), "new key is not rotated"),
        (lambda q, k, v, c, t: cached_attention(q, rope(k, at(t)), v, c), "query is not rotated"),
        (lambda q, k, v, c, t: cached_attention(q, k, v, c), "absolute position"),
        (
            lambda q, k, v, c, t: cached_attention(rope(q, at(t + 1)), rope(k, at(t)), v, c),
            "rotated at different positions",
        ),
        (
            lambda q, k, v, c, t: cached_attention(
                rope(q, at(t)), rope(k, at(t)), rope(v, at(t)), c
            ),
            "values are rotated too",
        ),
        (
            lambda q, k, v, c, t: F.scaled_dot_product_attention(rope(q, at(t)), rope(k, at(t)), v),
            "never appended",
        ),
        (lambda q, k, v, c, t: None, "not implemented yet"),
        (decode_top_left, "is_causal=True with one query"),
        (
            lambda q, k, v, c, t: cached_attention(rope(q, at(0)), rope(k, at(t)), v, c),
            "rotated at position 0, its index in a chunk of one",
        ),
        (decode_by_hand_unscaled(1.0), "not divided by √d"),
        (decode_by_hand_unscaled("d"), "divided by d, not by √d"),
    ],
)
def test_check_decode_step_names_the_mistake(capsys, fn, words):
    rejected(capsys, check_decode_step, fn, words)


def test_the_double_rotation_without_writing_back_is_named_too(capsys):
    """Rotating the cached keys at the current position without storing them back rotates each
    key twice (once on entry, once now): the scores then equal an unrotated query's."""
    rejected(capsys, check_decode_step, decode_double, "rotated a second time")


# seed interval ----------------------------------------------------------------------------------

T = {2: 4.303, 4: 2.776, 7: 2.365}


def interval(ddof=1, q=None, sqrt=True, power=1, axis=0, width=1.0, t_dof=-1):
    def fn(acc):
        s = acc.shape[0]
        sd = acc.std(axis, ddof=ddof) ** power
        tq = (
            {2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 7: 2.365, 8: 2.306}[s + t_dof]
            if q is None
            else q
        )
        return acc.mean(axis), width * tq * sd / (np.sqrt(s) if sqrt else 1)

    return fn


def interval_as(convention):
    """The right interval, returned in another convention: convention(mean, half) -> pair."""

    def fn(acc):
        return convention(*interval()(acc))

    return fn


def prediction_interval_of_one_seed(acc):
    """A plausible mix-up: the 95 % prediction interval for one new seed, not the mean's."""
    s = acc.shape[0]
    return acc.mean(0), T[s - 1] * acc.std(0, ddof=1) * np.sqrt(1 + 1 / s)


def interval_torch(acc):
    a = torch.tensor(acc)
    s = a.shape[0]
    return a.mean(0), T[s - 1] * a.std(0) / s**0.5


@pytest.mark.parametrize("fn", [interval(), interval_torch, lambda a: list(interval()(a))])
def test_check_seed_interval_accepts_correct_forms(capsys, fn):
    assert check_seed_interval(fn)
    assert "✓ seed_interval: correct" in verdict(capsys)


@pytest.mark.parametrize(
    "fn, words",
    [
        (interval(ddof=0), "use s - 1 (ddof=1)"),
        (interval(q=1.96), "1.96"),
        (interval(sqrt=False), "forgets to divide by √s"),
        (interval(t_dof=0), "s degrees of freedom"),
        (interval(q=1.0), "standard error alone"),
        (interval(power=2), "variance"),
        (interval(width=2.0), "whole width"),
        (prediction_interval_of_one_seed, "prediction interval for one new seed"),
        (interval(axis=1), "wrong axis"),
        (lambda acc: acc.mean(0), "expected a pair"),
        (interval_as(lambda m, h: (m - h, m + h)), "it returns (low, high)"),
        (interval(q=2.776), "2.776, the quantile for 5 seeds"),
        (interval_as(lambda m, h: (h, m)), "it returns (half_width, mean)"),
        (interval_as(lambda m, h: (m, (m - h, m + h))), "its second element is (low, high)"),
    ],
)
def test_check_seed_interval_names_the_mistake(capsys, fn, words):
    rejected(capsys, check_seed_interval, fn, words)
