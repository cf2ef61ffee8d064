"""`mha_lib.positions` (notebook 10): `rope` against transformers' Llama rotary code and the
exact rotation (Meta's complex form in float64), its relative property and norm preservation
(hypothesis), the two layouts, KV-cache decoding with RoPE, sinusoidal encodings, bad inputs."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib.positions import (
    rope,
    rope_frequencies,
    rope_permutation,
    sinusoidal_positions,
    t5_relative_buckets,
)
from mha_lib.testing import assert_close


def exact_rope(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Meta's complex-number form, in float64: pairs (2i, 2i + 1) times e^{i p ω_i}."""
    d = x.shape[-1]
    omega = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    rot = torch.polar(torch.ones_like(omega), positions.double()[:, None] * omega)  # (N, d/2)
    return torch.view_as_real(z * rot).flatten(-2)


@pytest.mark.parametrize("d", [2, 16, 64, 128])
@pytest.mark.parametrize("base", [10000.0, 500000.0, 100.0])
@pytest.mark.parametrize("offset", [0, 37, 4090])
def test_rope_equals_transformers_llama(d, base, offset):
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig

    g = torch.Generator().manual_seed(d + offset)
    q = torch.randn(2, 3, 20, d, generator=g)  # (B, h, N, d_k)
    k = torch.randn(2, 3, 20, d, generator=g)
    pos = torch.arange(offset, offset + 20)
    cfg = LlamaConfig(hidden_size=3 * d, num_attention_heads=3, rope_theta=base, head_dim=d)
    cfg.rope_parameters = {"rope_type": "default", "rope_theta": base}
    cos, sin = llama.LlamaRotaryEmbedding(cfg)(q, pos[None])  # (1, N, d)
    q_ref, k_ref = llama.apply_rotary_pos_emb(q, k, cos, sin)
    # both compute the angles p·ω in float32, in another order of operations: they may differ
    # by a few ulps of the largest angle, times the size of the coordinates
    eps = torch.finfo(torch.float32).eps
    atol = 4 * eps * (offset + 20) * float(torch.cat([q, k]).abs().max()) + 1e-6
    torch.testing.assert_close(rope(q, pos, base), q_ref, atol=atol, rtol=0)
    torch.testing.assert_close(rope(k, pos, base), k_ref, atol=atol, rtol=0)


@pytest.mark.parametrize("offset", [0, 1000, 99_990, 200_000])
def test_rope_in_float64_is_the_exact_rotation_at_any_position(offset):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 10, 64, generator=g, dtype=torch.float64)
    pos = torch.arange(offset, offset + 10)
    ref = exact_rope(x, pos, 10000.0)
    assert (rope(x, pos, interleaved=True) - ref).abs().max() < 1e-10
    perm = rope_permutation(64)
    assert (rope(x, pos)[..., perm] - exact_rope(x[..., perm], pos, 10000.0)).abs().max() < 1e-10


def test_rope_keeps_the_dtype_and_leaves_the_input_alone():
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        x = torch.randn(3, 8, dtype=torch.float32).to(dtype)
        before = x.clone()
        y = rope(x, torch.arange(3))
        assert y.dtype == dtype and torch.equal(x, before) and y.data_ptr() != x.data_ptr()


def test_a_row_of_positions_per_sequence_rotates_each_sequence_by_its_own():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 2, 5, 8, generator=g, dtype=torch.float64)  # (B, h, N, d)
    pos = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11], [2, 2, 3, 9, 40]])  # (B, N)
    for interleaved in (False, True):
        ours = rope(x, pos, interleaved=interleaved)
        rows = torch.stack([rope(x[b], pos[b], interleaved=interleaved) for b in range(3)])
        assert_close(ours, rows, rtol=0, atol=0)
        # and for x (B, N, d), one head's worth, as MLA's shared rope key
        assert_close(rope(x[:, 0], pos), torch.stack([rope(x[b, 0], pos[b]) for b in range(3)]))


def test_one_row_of_positions_serves_every_sequence_of_the_batch():
    """positions (1, N), as transformers passes position_ids, equals (N,) for x (B, ..., N, d)."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 2, 5, 8, generator=g, dtype=torch.float64)  # (B, h, N, d)
    pos = torch.tensor([4, 5, 6, 9, 30])  # (N,)
    for interleaved in (False, True):
        ours = rope(x, pos[None], interleaved=interleaved)  # (1, N) positions
        assert_close(ours, rope(x, pos, interleaved=interleaved), rtol=0, atol=0)
        assert_close(rope(x[:, 0], pos[None]), rope(x[:, 0], pos), rtol=0, atol=0)  # (B, N, d)
    with pytest.raises(ValueError, match=r"\(1, N\)"):
        rope(x[0, 0], pos[None])  # x (N, d) has no batch to broadcast over


def test_float32_angles_compute_as_transformers_does():
    """angle_dtype=float32 on float64 x: the angles carry float32's error (about 1e-2 rad at
    position 10^5), which the default float64 angles do not."""
    x = torch.randn(1, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    pos = torch.tensor([100_000])
    exact = exact_rope(x, pos, 10000.0)
    assert (rope(x, pos, interleaved=True) - exact).abs().max() < 1e-10
    err32 = (rope(x, pos, interleaved=True, angle_dtype=torch.float32) - exact).abs().max()
    assert 1e-4 < err32 < 0.1


def test_positions_need_not_start_at_zero_nor_be_contiguous():
    x = torch.randn(4, 8, dtype=torch.float64)
    pos = torch.tensor([3, 9, 10, 50])
    full = rope(torch.stack([x[0]] * 51), torch.arange(51))
    assert torch.allclose(rope(x[:1], pos[:1]), full[3:4])
    rows = torch.cat([rope(x[i : i + 1], pos[i : i + 1]) for i in range(4)])
    assert torch.allclose(rope(x, pos), rows)


def test_the_two_layouts_give_equal_scores_once_the_columns_are_permuted():
    g = torch.Generator().manual_seed(2)
    X = torch.randn(12, 24, generator=g, dtype=torch.float64)  # (N, C)
    W_q, W_k = torch.randn(2, 24, 16, generator=g, dtype=torch.float64)  # (C, d_k)
    pos = torch.arange(12)
    perm = rope_permutation(16)
    s_half = rope(X @ W_q, pos) @ rope(X @ W_k, pos).T
    s_inter = (
        rope(X @ W_q[:, perm], pos, interleaved=True)
        @ rope(X @ W_k[:, perm], pos, interleaved=True).T
    )
    assert (s_half - s_inter).abs().max() < 1e-10


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(0, 10**5),
    n=st.integers(0, 10**5),
    shift=st.integers(0, 10**5),
    half_d=st.integers(1, 32),
    interleaved=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_score_depends_only_on_the_offset_and_norms_are_kept(
    m, n, shift, half_d, interleaved, seed
):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 1, 2 * half_d, generator=g, dtype=torch.float64)

    def score(a, b):
        qa = rope(q, torch.tensor([a]), interleaved=interleaved)
        kb = rope(k, torch.tensor([b]), interleaved=interleaved)
        return float((qa * kb).sum())

    assert math.isclose(score(m, n), score(m + shift, n + shift), abs_tol=1e-9)
    rq = rope(q, torch.tensor([m]), interleaved=interleaved)
    assert math.isclose(float(rq.norm()), float(q.norm()), rel_tol=1e-12)


def test_decoding_token_by_token_with_a_cache_equals_full_causal_attention():
    from mha_lib.nn import KVCache, cached_attention

    g = torch.Generator().manual_seed(3)
    B, h, N, d = 2, 2, 9, 8
    q, k, v = torch.randn(3, B, h, N, d, generator=g, dtype=torch.float64)
    pos = torch.arange(N)
    full = torch.nn.functional.scaled_dot_product_attention(
        rope(q, pos), rope(k, pos), v, is_causal=True
    )
    cache = KVCache(B, h, N, d, dtype=torch.float64)
    steps = []
    for t in range(N):
        p = pos[t : t + 1]
        kt = rope(k[:, :, t : t + 1], p)  # rotated once, on the way in
        steps.append(cached_attention(rope(q[:, :, t : t + 1], p), kt, v[:, :, t : t + 1], cache))
    assert (torch.cat(steps, dim=2) - full).abs().max() < 1e-12


def test_sinusoidal_positions_are_sin_and_cos_of_the_rope_frequencies():
    P = sinusoidal_positions(50, 8)
    assert P.shape == (50, 8) and P.dtype == torch.float64
    omega = rope_frequencies(8)
    assert torch.allclose(P[:, 0::2], torch.sin(torch.arange(50.0)[:, None] * omega))
    assert torch.allclose(P[:, 1::2], torch.cos(torch.arange(50.0)[:, None] * omega))
    assert torch.allclose(P[0], torch.tensor([0.0, 1.0] * 4, dtype=torch.float64))


def test_t5_buckets_match_transformers():
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    rel = torch.arange(-300, 1)
    ours = t5_relative_buckets(rel, 32, 128)
    ref = t5.T5Attention._relative_position_bucket(rel, bidirectional=False)
    assert torch.equal(ours, ref)


@pytest.mark.parametrize(
    "x, positions, kwargs, error, words",
    [
        (torch.randn(4, 7), torch.arange(4), {}, ValueError, "even"),
        (torch.randn(4, 8), torch.arange(5), {}, ValueError, "expected (N,) = (4,)"),
        (torch.randn(4, 8), torch.arange(4.0), {}, TypeError, "integer dtype"),
        (torch.randn(4, 8), [0, 1, 2, 3], {}, TypeError, "positions is a list"),
        (torch.arange(8).view(1, 8), torch.arange(1), {}, TypeError, "floating-point"),
        (torch.randn(4, 8), torch.tensor([0, 1, -2, 3]), {}, ValueError, "negative"),
        (torch.randn(4, 8), torch.arange(4), {"base": 1.0}, ValueError, "base"),
        (torch.randn(4, 8), torch.arange(4), {"scale": 0.0}, ValueError, "scale"),
        (
            torch.randn(2, 4, 8),
            torch.zeros(3, 4, dtype=torch.long),
            {},
            ValueError,
            "(B, N) = (2, 4)",
        ),
        (
            torch.randn(4, 8),
            torch.arange(4),
            {"angle_dtype": torch.float16},
            ValueError,
            "angle_dtype",
        ),
        (
            torch.randn(4, 8),
            torch.arange(4),
            {"frequencies": torch.ones(8)},
            ValueError,
            "expected (d/2,) = (4,)",
        ),
    ],
)
def test_bad_inputs_are_named(x, positions, kwargs, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        rope(x, positions, **kwargs)


def test_given_frequencies_replace_the_base():
    """rope(..., frequencies=ω) turns pair i by p·ω_i: base^(-2i/d) gives the default rotation,
    and any other ω (a stretched RoPE such as YaRN's) turns each pair by its own."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 5, 8, dtype=torch.float64, generator=g)
    pos = torch.tensor([0, 3, 9, 40, 41])
    for interleaved in (False, True):
        default = rope(x, pos, 500.0, interleaved)
        given = rope(x, pos, interleaved=interleaved, frequencies=rope_frequencies(8, 500.0))
        assert_close(given, default, rtol=0, atol=0)
    omega = torch.tensor([1.0, 0.3, 0.01, 0.002], dtype=torch.float64)
    x1, x2 = x[..., :4], x[..., 4:]
    angle = pos[:, None] * omega  # (N, d/2)
    expected = torch.cat(
        [x1 * angle.cos() - x2 * angle.sin(), x2 * angle.cos() + x1 * angle.sin()], -1
    )
    assert_close(rope(x, pos, frequencies=omega), expected)
