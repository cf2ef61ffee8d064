"""`mha_lib.positions` (notebook 10): `rope` against transformers' Llama rotary code and the
exact rotation (Meta's complex form in float64), its relative property and norm preservation
(hypothesis), the two layouts, KV-cache decoding with RoPE, sinusoidal encodings, bad inputs;
RoPE's linear, Llama 3 and YaRN scalings against transformers' ROPE_INIT_FUNCTIONS."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib.positions import (
    linear_frequency_factors,
    llama3_frequency_factors,
    rope,
    rope_frequencies,
    rope_permutation,
    sinusoidal_positions,
    t5_relative_buckets,
    yarn_frequency_factors,
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


# --- RoPE's scalings: the factors that divide the frequencies, against transformers -----------


class _TorchInFloat64:
    """torch, with torch.float and torch.float32 standing for float64. transformers' RoPE
    initialisers build their frequencies in float32; run with this as their module's `torch`,
    the same code computes in float64, so that its formulas are compared with ours to 1e-12,
    not to float32's 1e-6. Each test also compares the float32 run, to 1e-5."""

    float = float32 = torch.float64

    def __getattr__(self, name):
        return getattr(torch, name)


def transformers_frequencies(
    rope_parameters: dict, dim: int, monkeypatch, in_float64: bool, config=None
):
    """(frequencies (dim/2,), attention factor) from transformers' ROPE_INIT_FUNCTIONS for
    `config` (by default a Llama config whose heads turn all of their `dim` numbers)."""
    rope_utils = pytest.importorskip("transformers.modeling_rope_utils")
    from transformers import LlamaConfig

    cfg = config or LlamaConfig(hidden_size=2 * dim, num_attention_heads=2, head_dim=dim)
    cfg.rope_parameters = rope_parameters
    with monkeypatch.context() as m:
        if in_float64:
            m.setattr(rope_utils, "torch", _TorchInFloat64())
        freqs, attention_factor = rope_utils.ROPE_INIT_FUNCTIONS[rope_parameters["rope_type"]](
            cfg, "cpu"
        )
    assert freqs.dtype == (torch.float64 if in_float64 else torch.float32)
    return freqs.double(), attention_factor


def assert_factors_equal_transformers(factors, rope_parameters, dim, monkeypatch, config=None):
    """RoPE's base^(-2i/dim) divided by our factors equals transformers' frequencies: to 1e-12
    relative when its code runs in float64, to 1e-5 in its own float32."""
    assert isinstance(factors, tuple) and len(factors) == dim // 2
    assert all(type(f) is float for f in factors)
    ours = rope_frequencies(dim, rope_parameters["rope_theta"]) / torch.tensor(
        factors, dtype=torch.float64
    )  # (d/2,)
    for in_float64, rtol in ((True, 1e-12), (False, 1e-5)):
        theirs, attention_factor = transformers_frequencies(
            rope_parameters, dim, monkeypatch, in_float64, config
        )
        assert_close(ours, theirs, rtol=rtol, atol=0)
    return attention_factor


@pytest.mark.parametrize("dim", [10, 24, 40, 128])
@pytest.mark.parametrize("factor", [2.0, 4.0, 8.0, 32.0, 1.5])
def test_linear_factors_equal_transformers(dim, factor, monkeypatch):
    factors = linear_frequency_factors(dim, factor)
    assert factors == (factor,) * (dim // 2)
    params = {"rope_type": "linear", "rope_theta": 10000.0, "factor": factor}
    assert assert_factors_equal_transformers(factors, params, dim, monkeypatch) == 1.0


def test_linear_factors_rotate_as_interpolated_positions():
    """Dividing every frequency by factor turns each pair as `rope(..., scale=1/factor)` does."""
    x = torch.randn(2, 6, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    pos = torch.tensor([0, 1, 7, 100, 4000, 33_000])
    omega = rope_frequencies(24, 1e6) / torch.tensor(
        linear_frequency_factors(24, 8.0), dtype=torch.float64
    )
    assert_close(rope(x, pos, frequencies=omega), rope(x, pos, 1e6, scale=1 / 8), rtol=1e-12)


LLAMA3_CASES = [  # (dim, base, factor, low_freq_factor, high_freq_factor, original)
    (128, 500_000.0, 8.0, 1.0, 4.0, 8192),  # Llama 3.1
    (64, 500_000.0, 32.0, 1.0, 4.0, 8192),  # Llama 3.2 1B
    (128, 500_000.0, 32.0, 1.0, 4.0, 8192),  # Llama 3.2 3B
    (24, 500.0, 8.0, 1.0, 4.0, 32),  # the small test models' (tests/hf_models.py)
    (40, 10_000.0, 4.0, 2.0, 8.0, 2048),
    (10, 10_000.0, 2.0, 0.5, 3.0, 256),
]


@pytest.mark.parametrize("dim, base, factor, low, high, original", LLAMA3_CASES)
def test_llama3_factors_equal_transformers(dim, base, factor, low, high, original, monkeypatch):
    factors = llama3_frequency_factors(dim, base, factor, low, high, original)
    params = {
        "rope_type": "llama3",
        "rope_theta": base,
        "factor": factor,
        "low_freq_factor": low,
        "high_freq_factor": high,
        "original_max_position_embeddings": original,
    }
    assert assert_factors_equal_transformers(factors, params, dim, monkeypatch) == 1.0
    # the first pair is kept, the last divided by factor, each in between at least as stretched
    # as the pair before
    assert factors[0] == 1.0 and factors[-1] == factor
    assert list(factors) == sorted(factors)


def test_llama3_blends_some_pairs_of_llama_3_1():
    """Llama 3.1's 64 pairs: some kept, some divided by 8, and some blended between."""
    factors = llama3_frequency_factors(128, 500_000.0, 8.0, 1.0, 4.0, 8192)
    kept, divided = factors.count(1.0), factors.count(8.0)
    assert kept > 0 and divided > 0 and kept + divided < 64


YARN_CASES = [  # (dim, base, factor, original, keyword arguments)
    (128, 1e6, 4.0, 32768, {}),  # Qwen2.5's and Qwen3's recommended rope_scaling
    (64, 10_000.0, 40.0, 4096, {"mscale": 1.0, "mscale_all_dim": 1.0}),  # DeepSeek-V3
    (64, 10_000.0, 40.0, 4096, {"mscale": 0.707, "mscale_all_dim": 1.0}),
    (24, 10_000.0, 8.0, 64, {"mscale": 1.0, "mscale_all_dim": 0.5}),
    (64, 150_000.0, 32.0, 4096, {"truncate": False}),  # gpt-oss's
    (40, 10_000.0, 2.0, 256, {"truncate": False, "beta_fast": 16.0, "beta_slow": 2.0}),
    (24, 1e6, 32.0, 1024, {"attention_factor": 0.8}),
    (10, 10_000.0, 4.0, 128, {}),
    (40, 500.0, 8.0, 32, {"beta_fast": 8.0}),
    (24, 500.0, 8.0, 32768, {}),  # high clipped to dim - 1 = 23, not to the last pair, 11
    (10, 10_000.0, 4.0, 4, {}),  # every pair turns less than once: low = high = 0 (+ 0.001)
]


@pytest.mark.parametrize("dim, base, factor, original, kwargs", YARN_CASES)
def test_yarn_factors_and_attention_factor_equal_transformers(
    dim, base, factor, original, kwargs, monkeypatch
):
    factors, attention_factor = yarn_frequency_factors(dim, base, factor, original, **kwargs)
    params = {
        "rope_type": "yarn",
        "rope_theta": base,
        "factor": factor,
        "original_max_position_embeddings": original,
        **kwargs,
    }
    theirs = assert_factors_equal_transformers(factors, params, dim, monkeypatch)
    assert type(attention_factor) is float
    assert attention_factor == pytest.approx(theirs, rel=1e-14)
    assert all(1.0 <= f <= factor for f in factors)
    assert list(factors) == sorted(factors)


def test_yarn_keeps_fast_pairs_divides_slow_ones_and_blends_between():
    """Qwen2.5's YaRN (128 dims, base 10^6, 32,768 tokens stretched by 4): the fast pairs kept,
    the slow ones divided by 4, some blended; the attention factor 0.1 · ln 4 + 1."""
    factors, attention_factor = yarn_frequency_factors(128, 1e6, 4.0, 32768)
    kept, divided = factors.count(1.0), factors.count(4.0)
    assert kept > 0 and divided > 0 and kept + divided < 64
    assert attention_factor == 0.1 * math.log(4.0) + 1
    # DeepSeek's mscale and mscale_all_dim, both 1: the factor on RoPE's cos and sin is 1
    assert yarn_frequency_factors(64, 1e4, 40.0, 4096, mscale=1.0, mscale_all_dim=1.0)[1] == 1.0
    assert yarn_frequency_factors(64, 1e4, 1.0, 4096)[1] == 1.0  # no stretch, no factor


def test_qwen_configs_and_partial_rope_give_the_same_factors(monkeypatch):
    """Through Qwen2's config (Qwen2.5: d = C/h = 128) and Qwen3's (head_dim 128), YaRN's
    factors are the same; with partial RoPE (a quarter of a 96-number head turning, as
    transformers' partial_rotary_factor), `dim` is the number of rotated dimensions, 24."""
    pytest.importorskip("transformers")
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    qwen = {
        "rope_type": "yarn",
        "rope_theta": 1e6,
        "factor": 4.0,
        "original_max_position_embeddings": 32768,
    }
    factors, attention_factor = yarn_frequency_factors(128, 1e6, 4.0, 32768)
    for config in (
        Qwen2Config(hidden_size=256, num_attention_heads=2),
        Qwen3Config(hidden_size=64, num_attention_heads=2, head_dim=128),
    ):
        theirs = assert_factors_equal_transformers(factors, qwen, 128, monkeypatch, config)
        assert theirs == pytest.approx(attention_factor, rel=1e-14)
    partial = LlamaConfig(hidden_size=192, num_attention_heads=2, head_dim=96)
    for params, ours in (
        ({"rope_type": "linear", "factor": 8.0}, linear_frequency_factors(24, 8.0)),
        (
            {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
            llama3_frequency_factors(24, 500.0, 8.0, 1.0, 4.0, 64),
        ),
        (
            {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64},
            yarn_frequency_factors(24, 500.0, 8.0, 64)[0],
        ),
    ):
        params = {**params, "rope_theta": 500.0, "partial_rotary_factor": 0.25}
        assert_factors_equal_transformers(ours, params, 24, monkeypatch, partial)


def test_yarns_attention_factor_multiplies_every_score_by_its_square():
    """transformers multiplies cos and sin by the attention factor: its rotated queries and keys
    are ours (`rope` with the divided frequencies) times the factor, each score times its square.
    Its rotary embedding computes the angles in float32 (whatever x's dtype): equal to float32's
    precision at positions up to 512, as test_rope_equals_transformers_llama allows."""
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig

    d, base = 24, 10_000.0
    factors, attention_factor = yarn_frequency_factors(d, base, 8.0, 64)
    cfg = LlamaConfig(hidden_size=2 * d, num_attention_heads=2, head_dim=d)
    cfg.rope_parameters = {
        "rope_type": "yarn",
        "rope_theta": base,
        "factor": 8.0,
        "original_max_position_embeddings": 64,
    }
    g = torch.Generator().manual_seed(7)
    q, k = torch.randn(2, 1, 2, 9, d, generator=g, dtype=torch.float64)  # (B, h, N, d_k)
    pos = torch.tensor([0, 1, 2, 30, 63, 64, 200, 511, 512])
    rotary = llama.LlamaRotaryEmbedding(cfg)
    assert rotary.attention_scaling == pytest.approx(attention_factor, rel=1e-14)
    assert attention_factor > 1.2  # 0.1 · ln 8 + 1
    cos, sin = rotary(q, pos[None])  # (1, N, d), times the attention factor
    q_ref, k_ref = llama.apply_rotary_pos_emb(q, k, cos, sin)
    omega = rope_frequencies(d, base) / torch.tensor(factors, dtype=torch.float64)  # (d/2,)
    q_ours, k_ours = rope(q, pos, frequencies=omega), rope(k, pos, frequencies=omega)
    atol = 4 * torch.finfo(torch.float32).eps * 513 * float(torch.cat([q, k]).abs().max())
    assert_close(q_ref, attention_factor * q_ours, rtol=0, atol=atol * attention_factor)
    assert_close(k_ref, attention_factor * k_ours, rtol=0, atol=atol * attention_factor)
    scores, scores_ref = q_ours @ k_ours.mT, q_ref @ k_ref.mT  # (B, h, N, N)
    assert_close(scores_ref, attention_factor**2 * scores, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(scores_ref, scores, rtol=0.1)  # the factor is no rounding


@pytest.mark.parametrize(
    "function, kwargs, error, words",
    [
        (linear_frequency_factors, {"dim": 7, "factor": 2.0}, ValueError, "dim = 7"),
        (linear_frequency_factors, {"dim": 8, "factor": 0.0}, ValueError, "factor = 0.0"),
        (linear_frequency_factors, {"dim": 8, "factor": "8"}, TypeError, "factor is a str"),
        (linear_frequency_factors, {"dim": 8, "factor": math.inf}, ValueError, "factor = inf"),
        (linear_frequency_factors, {"dim": 8, "factor": True}, TypeError, "factor is a bool"),
        (llama3_frequency_factors, {"base": 1.0}, ValueError, "base = 1.0"),
        (llama3_frequency_factors, {"factor": -8.0}, ValueError, "factor = -8.0"),
        (llama3_frequency_factors, {"low_freq_factor": 4.0}, ValueError, "low_freq_factor <"),
        (llama3_frequency_factors, {"high_freq_factor": 0}, ValueError, "high_freq_factor = 0"),
        (
            llama3_frequency_factors,
            {"original_context_length": 8192.0},
            TypeError,
            "original_context_length must be an int",
        ),
        (
            llama3_frequency_factors,
            {"original_context_length": 0},
            ValueError,
            "original_context_length must be at least 1",
        ),
        (yarn_frequency_factors, {"dim": 0}, ValueError, "dim = 0"),
        (yarn_frequency_factors, {"factor": math.nan}, ValueError, "factor = nan"),
        (yarn_frequency_factors, {"original_context_length": None}, TypeError, "original_con"),
        (yarn_frequency_factors, {"beta_fast": 1.0}, ValueError, "beta_fast > beta_slow"),
        (yarn_frequency_factors, {"beta_slow": 0.0}, ValueError, "beta_slow = 0.0"),
        (yarn_frequency_factors, {"truncate": 1}, TypeError, "truncate is a int"),
        (yarn_frequency_factors, {"attention_factor": 0.0}, ValueError, "attention_factor = 0"),
        (yarn_frequency_factors, {"mscale": -1.0}, ValueError, "mscale = -1.0"),
        (yarn_frequency_factors, {"mscale_all_dim": "1"}, TypeError, "mscale_all_dim is a str"),
    ],
)
def test_bad_scaling_arguments_are_named(function, kwargs, error, words):
    defaults = {
        linear_frequency_factors: {"dim": 8, "factor": 2.0},
        llama3_frequency_factors: {
            "dim": 8,
            "base": 500.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_context_length": 32,
        },
        yarn_frequency_factors: {
            "dim": 8,
            "base": 1e4,
            "factor": 4.0,
            "original_context_length": 64,
        },
    }[function]
    with pytest.raises(error, match=words):
        function(**{**defaults, **kwargs})
