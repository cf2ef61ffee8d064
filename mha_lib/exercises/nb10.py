"""Checkers for notebook 10 (positions and RoPE).

- `check_rope(fn)`: fn(x, positions, interleaved) -> x rotated by RoPE (base 10000): x (N, d)
  float64 tensor, positions (N,) int64; pairs (i, i + d/2) when interleaved is False, pairs
  (2i, 2i + 1), kept in that layout, when it is True; in float64, to 1e-9 (angles computed in
  float32, as transformers does, are off by about 1e-7 and are named as such);
- `check_score_table(fn)`: fn(q, k, N) -> the (N, N) table S[m, n] = rope(q at m) · rope(k at n)
  for one query vector q (d,) and one key vector k (d,) placed at every position (no scaling,
  half-split layout);
- `check_decode_step(fn)`: fn(q_new, k_new, v_new, cache, position) -> o (B, h, 1, d), one
  decoding step with RoPE: rotate the new query and key at their absolute position, append the
  rotated key (and the value) to the `KVCache`, attend over every cached key with the scale
  1/√d (shifting every position by the same constant changes no score, so such a shift is
  accepted);
- `check_seed_interval(fn)`: fn(acc) -> (mean, half-width) of the 95 % t-interval over seeds,
  acc (seeds, lengths), as notebook 10's extrapolation figure draws it (an interval returned in
  another convention, (low, high) or (half-width, mean), is named as such).

Each message names a mistake only when the answer shows it: an answer equal to a known wrong
one, or one that passes a probe differing from the failed case in what the message is about
(positions all 0 for the precision of the angles; the answer's own returned pair for the
interval's convention).

This module imports torch, so `mha_lib.exercises` does not import it: notebooks write
`from mha_lib.exercises.nb10 import ...`.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..nn import KVCache, cached_attention
from ..positions import rope
from ..stats import t_quantile
from ._base import as_array, checker, close, diagnose, mismatch, run, to_numpy

__all__ = ["check_decode_step", "check_rope", "check_score_table", "check_seed_interval"]


def _rotate(x, angle, interleaved):
    """x (..., N, d) rotated pairwise by angle (N, d/2), in the given layout."""
    cos, sin = angle.cos(), angle.sin()
    d = x.shape[-1]
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).flatten(-2)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def _omega(d, exponent=2.0):
    return 10000.0 ** (-exponent * torch.arange(d // 2, dtype=torch.float64) / d)


# ---------------------------------------------------------------------------- rope


def _rope_mistakes(x, pos, interleaved) -> dict[str, np.ndarray]:
    N, d = x.shape
    p = pos.double()[:, None]
    right = p * _omega(d)
    other = not interleaved
    layout = "(2i, 2i + 1)" if interleaved else "(i, i + d/2)"
    wrong = {
        "it rotates the wrong way (angle -p·ω_i): the sign of the sin terms is swapped "
        "(rotate_half is (-x2, x1), not (x2, -x1))": _rotate(x, -right, interleaved),
        f"it pairs the wrong coordinates: interleaved={interleaved} means pairs {layout}": _rotate(
            x, right, other
        ),
        "the frequencies are base^(-i/d); they must be base^(-2i/d), i = 0 .. d/2 - 1 (the "
        "exponent runs over even numbers 0, 2, .., d - 2)": _rotate(
            x, p * _omega(d, 1.0), interleaved
        ),
        "the frequencies are reversed (base^(+2i/d) or i counted from the end): pair 0 must "
        "turn fastest, one radian per position": _rotate(x, p * _omega(d).flip(0), interleaved),
        "it ignores the positions given and uses 0 .. N-1": _rotate(
            x, torch.arange(N, dtype=torch.float64)[:, None] * _omega(d), interleaved
        ),
        "it forgets the position: every row is turned by ω_i, whatever its position": _rotate(
            x, _omega(d).expand(N, -1), interleaved
        ),
        "it keeps only the cos terms: a rotation mixes each pair (x1 cos - x2 sin, "
        "x2 cos + x1 sin)": x * torch.cat([right.cos()] * 2, -1),
    }
    # a layout mixed from the two conventions: one's pairs with the other's angle layout
    per_coord_hf = torch.cat([right, right], -1)  # (N, d): transformers' cat([θ, θ])
    per_coord_meta = right.repeat_interleave(2, -1)  # (N, d): Meta's θ repeated in place
    if interleaved:
        x_pair = torch.stack([-x[..., 1::2], x[..., 0::2]], -1).flatten(-2)  # (-x1, x0, ...)
        wrong[
            "it mixes the two layouts: it pairs (2i, 2i + 1) as Meta's code does but lays the "
            "angles out as transformers does (cat([θ, θ]): coordinate c gets ω_(c mod d/2)); "
            "with interleaved pairs both coordinates of pair i turn by ω_i: repeat each angle "
            "in place (θ.repeat_interleave(2))"
        ] = x * per_coord_hf.cos() + x_pair * per_coord_hf.sin()
    else:
        x_half = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1)  # rotate_half
        wrong[
            "it mixes the two layouts: it pairs (i, i + d/2) with rotate_half as transformers "
            "does but lays the angles out as Meta's interleaved code does (each angle repeated "
            "in place, repeat_interleave): with half-split pairs, coordinates i and i + d/2 "
            "share ω_i: cat([θ, θ])"
        ] = x * per_coord_meta.cos() + x_half * per_coord_meta.sin()
    if interleaved:
        half = _rotate(x, right, False)
        wrong[
            "it returns the half-split layout: with interleaved=True the rotated pair i goes "
            "back to coordinates (2i, 2i + 1)"
        ] = _rotate(x, right, True)[..., torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])]
        del half
    return {k: v.numpy() for k, v in wrong.items()}


def _rope_precision(fn, x, interleaved, result, expected) -> str | None:
    """Name a float32 computation, when the answer is right to float32's precision: float32
    angles if the same answer is exact at positions all 0 (angle 0: cos 1 and sin 0 in any
    precision), a float32 result otherwise."""
    err = float(np.abs(result - expected).max())
    if not 1e-9 < err <= 1e-4 * max(1.0, float(np.abs(expected).max())):
        return None
    zeros = torch.zeros(x.shape[0], dtype=torch.int64)
    at_zero, problem = run(fn, x.clone(), zeros, interleaved)
    if problem is None:
        at_zero, problem = as_array(at_zero, tuple(x.shape))
    if problem is None and close(at_zero, x.numpy(), 1e-12):
        return (
            "right only to float32's precision (about 1e-7), not to 1e-9: the angles are "
            "computed in float32 (a "
            "float32 torch.arange or frequency table, as transformers computes them); x is "
            "float64, and the exercise asks for the rotation in float64: build the "
            "frequencies and the angles p·ω_i in float64 (dtype=torch.float64 or x.dtype)"
        )
    return (
        "right only to float32's precision (about 1e-7), not to 1e-9: the result is rounded to "
        "float32 (x or the output converted to float32); keep x's float64 throughout"
    )


@checker("rope")
def check_rope(fn):
    """Check fn(x, positions, interleaved) against `mha_lib.positions.rope`."""
    g = torch.Generator().manual_seed(0)
    for N, d, interleaved, pos in (
        (5, 8, False, torch.tensor([3, 4, 7, 20, 21])),
        (5, 8, True, torch.tensor([3, 4, 7, 20, 21])),
        (3, 2, False, torch.tensor([0, 1, 2])),
        (4, 16, True, torch.tensor([100, 0, 5, 6])),
    ):
        x = torch.randn(N, d, generator=g, dtype=torch.float64)
        result, problem = run(fn, x.clone(), pos.clone(), interleaved)
        if problem is None:
            result, problem = as_array(result, (N, d))
        if problem is None:
            expected = rope(x, pos, interleaved=interleaved).numpy()
            if not close(result, expected, 1e-9):
                if close(result, x.numpy()):
                    problem = "it returns x unchanged"
                else:
                    problem = (
                        diagnose(result, _rope_mistakes(x, pos, interleaved))
                        or _rope_precision(fn, x, interleaved, result, expected)
                        or mismatch(
                            result, expected, f"rope(x, positions, interleaved={interleaved})"
                        )
                    )
                problem += f" [in the case N = {N}, d = {d}, interleaved = {interleaved}]"
        if problem is not None:
            return problem
    return None


# ---------------------------------------------------------------------------- score table


def _score_mistakes(q, k, N) -> dict[str, np.ndarray]:
    d = q.shape[0]
    pos = torch.arange(N)
    Q = rope(q.expand(N, d), pos)  # (N, d): q at every position
    K = rope(k.expand(N, d), pos)
    right = Q @ K.T
    return {
        "the keys are not rotated: S[m, n] then depends on m alone": (Q @ k)[:, None].expand(N, N),
        "the queries are not rotated: S[m, n] then depends on n alone": (K @ q)[None, :].expand(
            N, N
        ),
        "nothing is rotated: every entry is q · k": torch.full((N, N), float(q @ k)),
        "it is transposed: rows are the query positions m, columns the key positions n": right.T,
        "it is scaled by 1/√d: the table asks for the plain dot product": right / d**0.5,
        "the query and the key use different layouts (one interleaved, one half-split): both "
        "must be rotated the same way": Q @ rope(k.expand(N, d), pos, interleaved=True).T,
        "it rotates in the interleaved layout (pairs (2i, 2i + 1)); the exercise asks for the "
        "half-split one, rope's default (pairs (i, i + d/2))": rope(
            q.expand(N, d), pos, interleaved=True
        )
        @ rope(k.expand(N, d), pos, interleaved=True).T,
        "the key is rotated backwards (angle -n·ω): the score then depends on m + n, not m - n": Q
        @ _rotate(k.expand(N, d), -pos.double()[:, None] * _omega(d), False).T,
    }


@checker("score_table")
def check_score_table(fn):
    """Check fn(q, k, N) -> (N, N) with S[m, n] = rope(q, m) · rope(k, n)."""
    g = torch.Generator().manual_seed(1)
    for N, d in ((6, 8), (4, 2), (9, 16)):
        q, k = torch.randn(2, d, generator=g, dtype=torch.float64)
        result, problem = run(fn, q.clone(), k.clone(), N)
        if problem is None:
            result, problem = as_array(result, (N, N))
        if problem is None:
            pos = torch.arange(N)
            expected = (rope(q.expand(N, d), pos) @ rope(k.expand(N, d), pos).T).numpy()
            if not close(result, expected, 1e-9):
                problem = diagnose(
                    result, {k: v.numpy() for k, v in _score_mistakes(q, k, N).items()}
                )
                problem = problem or mismatch(result, expected, "S[m, n] = rope(q, m) · rope(k, n)")
                problem += f" [in the case N = {N}, d = {d}]"
        if problem is not None:
            return problem
    return None


# ---------------------------------------------------------------------------- decode step


def _decode_all(step, q, k, v) -> np.ndarray:
    """Run `step` token by token on one fresh cache: (B, h, N, d) outputs, as numpy."""
    B, h, N, d = q.shape
    cache = KVCache(B, h, N, d, dtype=q.dtype)
    outs = []
    for t in range(N):
        o = step(q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], cache, t)
        outs.append(torch.as_tensor(to_numpy(o)).reshape(B, h, 1, d))
    return torch.cat(outs, 2).numpy()


def _double_rotation(q, k, v, cache, t):
    p = torch.tensor([t])
    cached_attention(q, rope(k, p), v, cache)  # the right step fills the cache ...
    m = cache.length
    cache.k[:, :, :m] = rope(cache.k[:, :, :m], torch.full((m,), t))  # ... then rotates again
    return F.scaled_dot_product_attention(rope(q, p), cache.k[:, :, :m], cache.v[:, :, :m])


def _decode_mistakes() -> dict[str, callable]:
    def at(t):
        return torch.tensor([t])

    def no_key(q, k, v, c, t):
        return cached_attention(rope(q, at(t)), k, v, c)

    def no_query(q, k, v, c, t):
        return cached_attention(q, rope(k, at(t)), v, c)

    def nothing(q, k, v, c, t):
        return cached_attention(q, k, v, c)

    def query_after_append(q, k, v, c, t):
        return cached_attention(rope(q, at(t + 1)), rope(k, at(t)), v, c)

    def values_too(q, k, v, c, t):
        return cached_attention(rope(q, at(t)), rope(k, at(t)), rope(v, at(t)), c)

    def no_append(q, k, v, c, t):
        return F.scaled_dot_product_attention(rope(q, at(t)), rope(k, at(t)), v)

    def top_left(q, k, v, c, t):
        keys, values = c.append(rope(k, at(t)), v)
        return F.scaled_dot_product_attention(rope(q, at(t)), keys, values, is_causal=True)

    def by_hand(scale):
        def step(q, k, v, c, t):
            keys, values = c.append(rope(k, at(t)), v)
            s = rope(q, at(t)) @ keys.transpose(-1, -2) * scale(q.shape[-1])
            return torch.softmax(s, -1) @ values

        return step

    return {
        "the cached keys are rotated again at every step (the classic bug): a key is rotated "
        "once, at its own position, when it enters the cache; rotate only the NEW key": (
            _double_rotation
        ),
        "the new key is not rotated: the cache must hold rotated keys": no_key,
        "the new query is not rotated (or rotated at position 0, its index in a chunk of one), "
        "or the cached keys are rotated a second time at the current position (which cancels "
        "the query's rotation in every score): rotate the query at the token's absolute "
        "position, and each key once, when it enters the cache": no_query,
        "nothing is rotated, or the token is rotated at position 0 (its index within a chunk "
        "of one): rotate at its absolute position": nothing,
        "the query and the new key are rotated at different positions (the cache's length "
        "after the append is t + 1): both belong to token t, at position t": query_after_append,
        "the values are rotated too: RoPE turns queries and keys only": values_too,
        "the new key is never appended: the step attends to the new token alone": no_append,
        "is_causal=True with one query and the m cached keys: SDPA aligns its causal mask "
        "top-left, so the single query sees key 0 only (notebook 08's bottom-right lesson); "
        "a decoding query may see every cached key: pass no mask": top_left,
        "the scores are not divided by √d: softmax(q·kᵀ / √d), d = the head size": by_hand(
            lambda d: 1.0
        ),
        "the scores are divided by d, not by √d": by_hand(lambda d: 1.0 / d),
    }


@checker("decode_step")
def check_decode_step(fn):
    """Check fn(q_new, k_new, v_new, cache, position) over a whole sequence against full
    causal attention with RoPE."""
    g = torch.Generator().manual_seed(2)
    for B, h, N, d in ((1, 2, 6, 8), (2, 1, 4, 4)):
        q, k, v = torch.randn(3, B, h, N, d, generator=g, dtype=torch.float64)
        pos = torch.arange(N)
        expected = F.scaled_dot_product_attention(
            rope(q, pos), rope(k, pos), v, is_causal=True
        ).numpy()

        def calls(q_new, k_new, v_new, cache, t):
            out, problem = run(fn, q_new, k_new, v_new, cache, t)
            if problem is not None:
                raise _Stop(problem)
            arr, problem = as_array(out, (B, h, 1, d))
            if problem is not None:
                raise _Stop(problem)
            return torch.from_numpy(arr)

        try:
            result = _decode_all(calls, q, k, v)
        except _Stop as stop:
            return f"{stop} [in the case (B, h, N, d) = {(B, h, N, d)}]"
        if not close(result, expected, 1e-9):
            wrong = {m: _decode_all(f, q, k, v) for m, f in _decode_mistakes().items()}
            problem = diagnose(result, wrong) or mismatch(
                result, expected, "full causal attention with RoPE, token by token"
            )
            return f"{problem} [in the case (B, h, N, d) = {(B, h, N, d)}]"
    return None


class _Stop(Exception):
    pass


# ---------------------------------------------------------------------------- seed interval


# t quantiles from a printed table (three decimals: 2.776 for 2.776445) are right too
T_TABLE_TOL = 1e-3


def _interval_mistakes(acc) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    s = acc.shape[0]
    sd, sd0 = acc.std(0, ddof=1), acc.std(0, ddof=0)
    t = t_quantile(0.975, s - 1)
    wrong = {
        "the sd divides by s: with a handful of seeds use s - 1 (ddof=1)": t * sd0 / np.sqrt(s),
        "it uses 1.96 (the normal quantile): with s seeds the 95 % quantile is Student's t "
        "with s - 1 degrees of freedom (2.776 for 5 seeds)": 1.96 * sd / np.sqrt(s),
        "it forgets to divide by √s: that is the spread of one seed, not of the mean": t * sd,
        "it uses t with s degrees of freedom; the interval of a mean of s values has s - 1": (
            t_quantile(0.975, s) * sd / np.sqrt(s)
        ),
        "it is the standard error alone (sd/√s): multiply by the t quantile for 95 %": sd
        / np.sqrt(s),
        "it uses the variance instead of the standard deviation": t * sd**2 / np.sqrt(s),
        "it is the whole width (2 × the half-width)": 2 * t * sd / np.sqrt(s),
        "it is the prediction interval for one new seed, t · sd · √(1 + 1/s): the error bars "
        "are for the mean, t · sd / √s": t * sd * np.sqrt(1 + 1 / s),
    }
    if s != 5:
        wrong[
            "it uses t = 2.776, the quantile for 5 seeds, whatever the number of seeds: the "
            "quantile depends on s, t_quantile(0.975, s - 1)"
        ] = 2.776 * sd / np.sqrt(s)
    return wrong


def _interval_convention(result, acc) -> str | None:
    """Name an interval returned in another convention than (mean, half-width), read from the
    answer's own pair: (low, high), (half-width, mean), or (mean, (low, high))."""
    s = acc.shape[0]
    mean = acc.mean(0)
    half = t_quantile(0.975, s - 1) * acc.std(0, ddof=1) / np.sqrt(s)
    try:
        first, second = (np.asarray(to_numpy(r), dtype=float) for r in result)
    except (TypeError, ValueError):
        return None
    if close(first, mean - half, T_TABLE_TOL) and close(second, mean + half, T_TABLE_TOL):
        return (
            "it returns (low, high) = (mean - half-width, mean + half-width); the exercise asks "
            "for (mean, half_width): return the centre and the half-width"
        )
    if close(first, half, T_TABLE_TOL) and close(second, mean):
        return "it returns (half_width, mean): the order is (mean, half_width)"
    if close(first, mean) and second.shape == (2, mean.shape[0]):
        if close(second, np.stack([mean - half, mean + half]), T_TABLE_TOL):
            return (
                "its second element is (low, high); the exercise asks for the half-width "
                "alone: return (mean, half_width)"
            )
    return None


@checker("seed_interval")
def check_seed_interval(fn):
    """Check fn(acc (s, L)) -> (mean (L,), half-width (L,)) of the 95 % t-interval."""
    g = np.random.default_rng(3)
    for s, n in ((5, 3), (3, 2), (8, 4)):
        acc = g.uniform(0.2, 1.0, size=(s, n))
        result, problem = run(fn, acc)
        if problem is None and not (isinstance(result, tuple | list) and len(result) == 2):
            problem = "expected a pair (mean, half-width)"
        if problem is None and np.shape(to_numpy(result[0])) == (s,):
            problem = "the mean is over the wrong axis: average over the seeds (axis 0)"
        if problem is None:
            problem = _interval_convention(result, acc)
        if problem is None:
            mean, problem = as_array(result[0], (n,), "the mean")
        if problem is None and not close(mean, acc.mean(0)):
            problem = "the mean is wrong: average over the seeds (axis 0)"
        if problem is None:
            half, problem = as_array(result[1], (n,), "the half-width")
        if problem is None:
            expected = t_quantile(0.975, s - 1) * acc.std(0, ddof=1) / np.sqrt(s)
            if close(half, -expected):
                problem = "the half-width is negative"
            elif not close(half, expected, tol=T_TABLE_TOL):
                problem = diagnose(half, _interval_mistakes(acc), T_TABLE_TOL) or mismatch(
                    half, expected, "t_{0.975, s-1} · sd / √s"
                )
        if problem is not None:
            return f"{problem} [in the case of {s} seeds]"
    return None
