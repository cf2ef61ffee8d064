"""The checkers of notebook 09 accept right kernels and name the usual mistakes."""

import pytest

# import the checkers first: they choose Triton's interpreter before triton is imported
nb09 = pytest.importorskip("mha_lib.exercises.nb09", reason="triton: Linux x86_64 only")

import math  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from mha_lib.efficient.triton_flash import causal_key_end  # noqa: E402

check_logsumexp_kernel = nb09.check_logsumexp_kernel
check_causal_key_end = nb09.check_causal_key_end
check_backward_tile = nb09.check_backward_tile


def verdict(capsys) -> str:
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return out


# logsumexp_kernel: correct forms -----------------------------------------------------------------


@triton.jit
def lse_reference(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    tl.store(out_ptr + row, m + tl.log(s))


@triton.jit
def lse_base_two(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = tl.full((), -float("inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
        x = x * 1.4426950408889634  # log2(e)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp2(m - m_new) + tl.sum(tl.exp2(x - m_new), axis=0)
        m = m_new
    tl.store(out_ptr + row, (m + tl.log2(s)) * 0.6931471805599453)


@triton.jit
def lse_two_passes(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    for start in range(0, n_cols, BLOCK):  # first the max, then the sum
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
        m = tl.maximum(m, tl.max(x, axis=0))
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
        s += tl.sum(tl.exp(x - m), axis=0)
    tl.store(out_ptr + row, m + tl.log(s))


@pytest.mark.parametrize("kernel", [lse_reference, lse_base_two, lse_two_passes])
def test_check_logsumexp_kernel_accepts_correct_forms(capsys, kernel):
    assert check_logsumexp_kernel(kernel)
    assert "✓ logsumexp_kernel: correct" in verdict(capsys)


# logsumexp_kernel: mistakes ----------------------------------------------------------------------


@triton.jit
def lse_no_mask(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    tl.store(out_ptr + row, m + tl.log(s))


@triton.jit
def lse_other_zero(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=0.0)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    tl.store(out_ptr + row, m + tl.log(s))


@triton.jit
def lse_no_rescale(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    tl.store(out_ptr + row, m + tl.log(s))


@triton.jit
def lse_upside_down(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        factor = tl.where(m == -float("inf"), 1.0, tl.exp(m_new - m))
        s = s * factor + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    tl.store(out_ptr + row, m + tl.log(s))


@triton.jit
def lse_forgets_max(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    tl.store(out_ptr + row, tl.log(s))


@triton.jit
def lse_no_max(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
        s += tl.sum(tl.exp(x), axis=0)
    tl.store(out_ptr + row, tl.log(s))


@triton.jit
def lse_reset_in_loop(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        m = -float("inf")
        s = 0.0
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    tl.store(out_ptr + row, m + tl.log(s))


@triton.jit
def lse_packed_rows(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    tl.store(out_ptr + row, m + tl.log(s))


@triton.jit
def lse_mixed_bases(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    tl.store(out_ptr + row, (m + tl.log(s)) * 1.4426950408889634)


@triton.jit
def lse_stores_nothing(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols)


@triton.jit
def lse_stores_at_out_ptr(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    tl.store(out_ptr, m + tl.log(s))


@triton.jit
def lse_same_block(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):  # noqa: B007 (the mistake: start unused)
        cols = tl.arange(0, BLOCK)  # start forgotten
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    tl.store(out_ptr + row, m + tl.log(s))


@triton.jit
def lse_misses_last_block(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols - BLOCK + 1, BLOCK):  # whole blocks only
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    tl.store(out_ptr + row, m + tl.log(s))


@triton.jit
def lse_old_max(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m), axis=0)  # the old max
        m = m_new
    tl.store(out_ptr + row, m + tl.log(s))


@triton.jit
def lse_log2_of_sum(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    tl.store(out_ptr + row, m + tl.log2(s))


@triton.jit
def lse_log_mean_exp(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    tl.store(out_ptr + row, m + tl.log(s / n_cols))


@triton.jit
def lse_mask_without_other(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols)  # other left out
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    tl.store(out_ptr + row, m + tl.log(s))


def lse_not_a_kernel(x_ptr, out_ptr, n_cols, stride_row, BLOCK):
    return None


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lse_no_mask, "mask=cols < n_cols"),
        (lse_other_zero, "other=-float('inf')"),
        (lse_no_rescale, "running sum is not rescaled"),
        (lse_upside_down, "upside down"),
        (lse_forgets_max, "forgets the max"),
        (lse_no_max, "exp overflowed"),
        (lse_reset_in_loop, "reset inside the loop"),
        (lse_packed_rows, "stride_row"),
        (lse_mixed_bases, "base 2"),
        (lse_stores_nothing, "holds nothing"),
        (lse_not_a_kernel, "expected a @triton.jit kernel"),
        (lse_stores_at_out_ptr, "only out_ptr[0] is written"),
        (lse_same_block, "loads the same first block"),
        (lse_misses_last_block, "misses the last, partial block"),
        (lse_old_max, "the max from before the block"),
        (lse_log2_of_sum, "mixes bases"),
        (lse_log_mean_exp, "log-mean-exp"),
        (lse_mask_without_other, "other=-float('inf')"),
    ],
)
def test_check_logsumexp_kernel_rejects_mistakes(capsys, wrong, message):
    assert not check_logsumexp_kernel(wrong)
    out = verdict(capsys)
    assert out.startswith("✗ logsumexp_kernel:") and message in out, out


# causal_key_end ---------------------------------------------------------------------------------


def key_end_loop(start_q, block_q, N, M, causal):
    """Scan the keys: one past the last one any row of the block may see."""
    offset = M - N if causal == "bottom_right" else 0
    end = 0
    for i in range(start_q, min(start_q + block_q, N)):
        for j in range(M):
            if causal is None or j <= i + offset:
                end = max(end, j + 1)
    return end


def key_end_torch(start_q, block_q, N, M, causal):
    if causal is None:
        return M
    offset = M - N if causal == "bottom_right" else 0
    last = min(start_q + block_q, N) - 1
    return int(torch.tensor(last + offset + 1).clamp(0, M))


@pytest.mark.parametrize("fn", [causal_key_end, key_end_loop, key_end_torch])
def test_check_causal_key_end_accepts_correct_forms(capsys, fn):
    assert check_causal_key_end(fn)
    assert "✓ causal_key_end: correct" in verdict(capsys)


def _off(N, M, c):
    return M - N if c == "bottom_right" else 0


def _last(s, b, N):
    return min(s + b, N) - 1


def _causal(rule):
    return lambda s, b, N, M, c: M if c is None else rule(s, b, N, M, c)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda s, b, N, M, c: M, "visits every key block"),
        (_causal(lambda s, b, N, M, c: max(0, min(M, s + _off(N, M, c)))), "before the diagonal"),
        (
            _causal(lambda s, b, N, M, c: max(0, min(M, _last(s, b, N) + _off(N, M, c)))),
            "it is one short",
        ),
        (  # one short and no clamp to 0 either: the first mistake on the first case
            _causal(lambda s, b, N, M, c: min(M, _last(s, b, N) + _off(N, M, c))),
            "it is one short",
        ),
        (
            _causal(lambda s, b, N, M, c: max(0, min(M, _last(s, b, N) + _off(N, M, c) + 2))),
            "one too many",
        ),
        (  # the last row taken as min(start_q + block_q, N), one past it
            _causal(lambda s, b, N, M, c: max(0, min(M, min(s + b, N) + _off(N, M, c) + 1))),
            "one too many",
        ),
        (_causal(lambda s, b, N, M, c: max(0, min(M, _last(s, b, N) + 1))), "alignment"),
        (
            _causal(lambda s, b, N, M, c: max(0, min(M, _last(s, b, N) - _off(N, M, c) + 1))),
            "wrong sign",
        ),
        (
            _causal(
                lambda s, b, N, M, c: max(
                    0, min(M, _last(s, b, N) + _off(N, M, c) - (c == "bottom_right") + 1)
                )
            ),
            "offset is one short",
        ),
        (
            _causal(
                lambda s, b, N, M, c: max(
                    0, min(M, _last(s, b, N) + _off(N, M, c) + (c == "bottom_right") + 1)
                )
            ),
            "offset is one too many",
        ),
        (
            _causal(lambda s, b, N, M, c: max(0, _last(s, b, N) + _off(N, M, c) + 1)),
            "clamped to M:",
        ),
        (
            _causal(lambda s, b, N, M, c: max(0, min(M - 1, _last(s, b, N) + _off(N, M, c) + 1))),
            "clamped to M - 1",
        ),
        (
            _causal(lambda s, b, N, M, c: min(M, _last(s, b, N) + _off(N, M, c) + 1)),
            "not clamped to 0",
        ),
        (_causal(lambda s, b, N, M, c: max(0, min(M, s + b + _off(N, M, c)))), "partial: its"),
        (
            _causal(lambda s, b, N, M, c: max(0, min(M, min(s + b - 1, N) + _off(N, M, c) + 1))),
            "not min(start_q + block_q - 1, N)",
        ),
        (lambda s, b, N, M, c: causal_key_end(s, b, N, M, c or "top_left"), "causal=None"),
        (lambda s, b, N, M, c: float(causal_key_end(s, b, N, M, c)), "expected an int"),
        (lambda s, b, N, M, c: None, "not implemented"),
        (
            _causal(lambda s, b, N, M, c: max(0, min(M, _last(s, b, N) + _off(N, M, c) + 1 + b))),
            "runs to key",
        ),
        (_causal(lambda s, b, N, M, c: max(0, min(M, s + _off(N, M, c) + 1))), "first row"),
        (
            _causal(lambda s, b, N, M, c: max(0, min(N, _last(s, b, N) + _off(N, M, c) + 1))),
            "clamped to N",
        ),
        (  # bottom_right treated as no mask
            lambda s, b, N, M, c: M if c != "top_left" else max(0, min(M, _last(s, b, N) + 1)),
            "with bottom_right it visits every key block",
        ),
        (  # the offset M - N applied to top_left too: was "stops before the diagonal tile"
            _causal(lambda s, b, N, M, c: max(0, min(M, _last(s, b, N) + M - N + 1))),
            "top-left mask has no offset",
        ),
    ],
)
def test_check_causal_key_end_rejects_mistakes(capsys, wrong, message):
    assert not check_causal_key_end(wrong)
    out = verdict(capsys)
    assert out.startswith("✗ causal_key_end:") and message in out, out


def test_causal_key_end_messages_are_each_one_mistakes_own():
    """No two mistakes of the catalogue give the same bounds on every case, so each answer
    gets the message of its own mistake, not another's."""
    mistakes = nb09._key_end_mistakes()
    signatures = {}
    for message, rule in mistakes.items():
        signature = tuple(
            tuple(rule(s, bq, N, M, c) for s in range(0, N, bq)) for N, M, bq, _, c in nb09._CASES
        )
        assert signature not in signatures, (message, signatures.get(signature))
        signatures[signature] = message


def test_an_off_by_one_is_not_called_a_missing_clamp(capsys):
    """Issue 22: an answer one short was told about a clamp to 0."""
    one_short = _causal(lambda s, b, N, M, c: max(0, min(M, _last(s, b, N) + _off(N, M, c))))
    assert not check_causal_key_end(one_short)
    out = verdict(capsys)
    assert "one short" in out and "clamp" not in out, out


# backward_tile: correct forms ---------------------------------------------------------------------


def tile_reference(q_i, k_j, v_j, do_i, lse_i, delta_i):
    scale = 1 / math.sqrt(q_i.shape[-1])
    p = torch.exp(q_i @ k_j.T * scale - lse_i[:, None])  # (b_q, b_k)
    ds = p * (do_i @ v_j.T - delta_i[:, None])
    return ds @ k_j * scale, ds.T @ q_i * scale, p.T @ do_i


def tile_einsum(q_i, k_j, v_j, do_i, lse_i, delta_i):
    d = q_i.shape[1]
    p = torch.einsum("id,jd->ij", q_i / d**0.5, k_j).sub(lse_i.unsqueeze(1)).exp()
    dp = torch.einsum("id,jd->ij", do_i, v_j)
    ds = p * (dp - delta_i.unsqueeze(1))
    return [
        torch.einsum("ij,jd->id", ds, k_j) / d**0.5,
        torch.einsum("ij,id->jd", ds, q_i) / d**0.5,
        torch.einsum("ij,id->jd", p, do_i),
    ]


def tile_numpy(q_i, k_j, v_j, do_i, lse_i, delta_i):
    q, k, v, do, lse, delta = (t.numpy() for t in (q_i, k_j, v_j, do_i, lse_i, delta_i))
    qs = q / np.sqrt(q.shape[1])  # the scale folded into q once
    p = np.exp(qs @ k.T - lse[:, None])
    ds = p * (do @ v.T - delta[:, None])
    return ds @ k / np.sqrt(q.shape[1]), ds.T @ qs, p.T @ do


def tile_float32(q_i, k_j, v_j, do_i, lse_i, delta_i):
    args = (t.float() for t in (q_i, k_j, v_j, do_i, lse_i, delta_i))
    return tuple(g.double() for g in tile_reference(*args))


def tile_in_place(q_i, k_j, v_j, do_i, lse_i, delta_i):
    q_i /= math.sqrt(q_i.shape[-1])  # changes its own copy of the tile only
    p = torch.exp(q_i @ k_j.T - lse_i[:, None])
    ds = p * (do_i @ v_j.T - delta_i[:, None])
    return ds @ k_j / math.sqrt(k_j.shape[-1]), ds.T @ q_i, p.T @ do_i


@pytest.mark.parametrize(
    "fn", [tile_reference, tile_einsum, tile_numpy, tile_float32, tile_in_place]
)
def test_check_backward_tile_accepts_correct_forms(capsys, fn):
    assert check_backward_tile(fn)
    assert "✓ backward_tile: correct" in verdict(capsys)


# backward_tile: mistakes -------------------------------------------------------------------------


def tile_with(p_of=None, ds_of=None, dv_of=None, dp_of=None, dq_of=None, g=None, out=None):
    """The reference with one step replaced: each replacement gets (s, p, dp, ds, tile)."""

    def fn(q_i, k_j, v_j, do_i, lse_i, delta_i):
        tile = (q_i, k_j, v_j, do_i, lse_i, delta_i)
        scale = 1 / math.sqrt(q_i.shape[-1])
        s = q_i @ k_j.T * scale
        p = p_of(s, tile) if p_of else torch.exp(s - lse_i[:, None])
        dp = dp_of(tile) if dp_of else do_i @ v_j.T
        ds = ds_of(p, dp, tile) if ds_of else p * (dp - delta_i[:, None])
        f = g(scale) if g else scale
        dq = dq_of(ds, tile) * f if dq_of else ds @ k_j * f
        dk, dv = ds.T @ q_i * f, dv_of(p, ds, tile) if dv_of else p.T @ do_i
        return out(dq, dk, dv) if out else (dq, dk, dv)

    return fn


def _unscaled(q_i, k_j, v_j, do_i, lse_i, delta_i):
    p = torch.exp(q_i @ k_j.T - lse_i[:, None])
    ds = p * (do_i @ v_j.T - delta_i[:, None])
    return ds @ k_j, ds.T @ q_i, p.T @ do_i


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (tile_with(p_of=lambda s, t: torch.softmax(s, dim=-1)), "normalised within the tile"),
        (tile_with(p_of=lambda s, t: torch.exp(s)), "forget L"),
        (
            tile_with(p_of=lambda s, t: torch.exp(s * math.sqrt(t[0].shape[-1]) - t[4][:, None])),
            "not scaled when P is rebuilt",
        ),
        (tile_with(g=lambda scale: 1.0), "lack the factor 1/√d"),
        (_unscaled, "no place anywhere"),
        (tile_with(g=lambda scale: 1 / scale), "multiplied by √d"),
        (tile_with(ds_of=lambda p, dp, t: p * dp), "forgets D"),
        (tile_with(ds_of=lambda p, dp, t: dp - t[5][:, None]), "lacks the factor P"),
        (
            tile_with(ds_of=lambda p, dp, t: p * (dp - (p * dp).sum(-1, keepdim=True))),
            "computed from this tile only",
        ),
        (tile_with(dv_of=lambda p, ds, t: ds.T @ t[3]), "dV takes the weights"),
        (tile_with(dp_of=lambda t: t[3] @ t[1].T), "dP = dO Vᵀ"),
        (tile_with(dq_of=lambda ds, t: ds @ t[2]), "dQ = dS K"),
        (tile_with(ds_of=lambda p, dp, t: p * (dp - t[5])), "delta_i[:, None]"),
        (tile_with(out=lambda dq, dk, dv: (dk, dq, dv)), "in the order (dk_j, dq_i, dv_j)"),
        (tile_with(out=lambda dq, dk, dv: (dq, dk, dv.T)), "dv_j is transposed"),
        (tile_with(out=lambda dq, dk, dv: (dq, dk)), "a tuple of three"),
        (tile_with(out=lambda dq, dk, dv: dq), "expected a tuple"),
        (tile_with(out=lambda dq, dk, dv: (dq.half(), dk.half(), dv.half())), "not float16"),
        (lambda *tile: None, "not implemented"),
        (tile_with(p_of=lambda s, t: torch.exp(s * t[0].shape[-1] - t[4][:, None])), "by √d"),
        (tile_with(out=lambda dq, dk, dv: (dq, dk * math.sqrt(12), dv)), "dK lacks the factor"),
        (tile_with(out=lambda dq, dk, dv: (dq * math.sqrt(12), dk, dv)), "dQ lacks the factor"),
        (tile_with(out=lambda dq, dk, dv: (dq, dk, dv / math.sqrt(12))), "dV is multiplied by"),
        (  # D from the tile's own share of O: the same number as Σ_j P dP over the tile
            tile_with(ds_of=lambda p, dp, t: p * (dp - (t[3] * (p @ t[2])).sum(-1, keepdim=True))),
            "rowsum(dO ∘ P V_j)",
        ),
        (  # dP = dO V without the transpose: a matmul error, not the lse hint (issue 31)
            tile_with(dp_of=lambda t: t[3] @ t[2]),
            "a matrix product's shapes do not fit",
        ),
        (  # lse_i without [:, None]: fails on the 16 x 8 tile, not on a square one
            tile_with(p_of=lambda s, t: torch.exp(s - t[4])),
            "use them as lse_i[:, None]",
        ),
    ],
)
def test_check_backward_tile_rejects_mistakes(capsys, wrong, message):
    assert not check_backward_tile(wrong)
    out = verdict(capsys)
    assert out.startswith("✗ backward_tile:") and message in out, out


def test_the_matmul_error_gets_no_hint_about_lse(capsys):
    """Issue 31: dP = dO V (no transpose) raised a matmul error and was told to use
    lse_i[:, None], a mistake it did not make."""
    assert not check_backward_tile(tile_with(dp_of=lambda t: t[3] @ t[2]))
    out = verdict(capsys)
    assert "lse_i[:, None]" not in out and "do not fit" in out, out
