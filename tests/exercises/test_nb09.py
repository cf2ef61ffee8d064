"""The checkers of notebook 09 accept right kernels and name the usual mistakes."""

import pytest

# import the checkers first: they choose Triton's interpreter before triton is imported
nb09 = pytest.importorskip("mha_lib.exercises.nb09", reason="triton: Linux x86_64 only")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from mha_lib.efficient.triton_flash import causal_key_end  # noqa: E402

check_logsumexp_kernel = nb09.check_logsumexp_kernel
check_causal_key_end = nb09.check_causal_key_end


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
            "one short",
        ),
        (_causal(lambda s, b, N, M, c: max(0, min(M, _last(s, b, N) + 1))), "alignment"),
        (
            _causal(lambda s, b, N, M, c: max(0, min(M, _last(s, b, N) - _off(N, M, c) + 1))),
            "wrong sign",
        ),
        (_causal(lambda s, b, N, M, c: max(0, _last(s, b, N) + _off(N, M, c) + 1)), "clamped to M"),
        (_causal(lambda s, b, N, M, c: max(0, min(M, s + b + _off(N, M, c)))), "partial"),
        (lambda s, b, N, M, c: causal_key_end(s, b, N, M, c or "top_left"), "causal=None"),
        (lambda s, b, N, M, c: float(causal_key_end(s, b, N, M, c)), "expected an int"),
        (lambda s, b, N, M, c: None, "not implemented"),
        (
            _causal(lambda s, b, N, M, c: max(0, min(M, _last(s, b, N) + _off(N, M, c) + 1 + b))),
            "runs to key",
        ),
    ],
)
def test_check_causal_key_end_rejects_mistakes(capsys, wrong, message):
    assert not check_causal_key_end(wrong)
    out = verdict(capsys)
    assert out.startswith("✗ causal_key_end:") and message in out, out
