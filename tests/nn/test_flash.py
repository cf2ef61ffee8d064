"""mha_lib.nn.flash: FlashAttention in plain torch equals SDPA (with and without a
mask_mod, forward and backward), skips fully masked tiles, keeps O(N) memory for backward, counts
the bytes it moves; bad input is refused."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib.nn import (
    KVCache,
    TileStats,
    bottom_right_causal_mask_mod,
    cached_attention,
    causal_mask_mod,
    document_mask_mod,
    flash_attention,
    flash_attention_backward,
    flash_attention_forward,
    hbm_bytes,
    prefix_lm_mask_mod,
    saved_for_backward_bytes,
    sliding_window_mask_mod,
)
from mha_lib.pytorch import explicit_attention
from tests.nn.nn_inputs import DTYPES, TOL, qkv, randn, seeds

# --- FlashAttention ------------------------------------------------------------------------------


def assert_flash_equals_sdpa(B, h, N, M, d_k, d_v, block_q, block_k, causal, dtype, seed):
    q, k, v = qkv(B, h, N, M, d_k, d_v, seed, dtype, requires_grad=True)
    o, lse = flash_attention(q, k, v, is_causal=causal, block_q=block_q, block_k=block_k)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # (B, h, N, d_v)
    tol = TOL[dtype]
    torch.testing.assert_close(o, ref, rtol=tol, atol=tol)
    scores = q.detach() @ k.detach().transpose(-2, -1) / math.sqrt(d_k)  # (B, h, N, M)
    if causal:
        scores = scores.masked_fill(torch.ones(N, M, dtype=torch.bool).triu(1), -math.inf)
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1), rtol=tol, atol=tol)
    do = randn(B, h, N, d_v, seed=seed + 3, dtype=dtype)
    grads = torch.autograd.grad(o, (q, k, v), do)
    grads_ref = torch.autograd.grad(ref, (q, k, v), do)
    for g, g_ref in zip(grads, grads_ref):
        torch.testing.assert_close(g, g_ref, rtol=tol, atol=tol)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 2),  # B
    st.integers(1, 3),  # h
    st.integers(1, 20),  # N
    st.integers(1, 20),  # M
    st.integers(1, 5),  # d_k
    st.integers(1, 5),  # d_v
    st.integers(1, 8),  # block_q
    st.integers(1, 8),  # block_k
    st.booleans(),
    st.sampled_from(DTYPES),
    seeds,
)
def test_flash_equals_sdpa_random_shapes(B, h, N, M, d_k, d_v, bq, bk, causal, dtype, seed):
    assert_flash_equals_sdpa(B, h, N, M, d_k, d_v, bq, bk, causal, dtype, seed)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("N", "M", "block_q", "block_k"),
    [
        (1, 1, 64, 64),  # one query, one key
        (1, 37, 64, 16),  # one query
        (37, 1, 16, 64),  # one key
        (64, 64, 16, 16),  # multiples of the blocks
        (100, 37, 64, 16),  # N, M not multiples, N > M
        (37, 100, 16, 64),  # N < M
        (5, 7, 1, 1),  # blocks of one row / one key
    ],
)
def test_flash_equals_sdpa_edge_sizes(N, M, block_q, block_k, causal, dtype):
    assert_flash_equals_sdpa(2, 2, N, M, 8, 6, block_q, block_k, causal, dtype, seed=0)


def test_flash_one_head_and_d_equal_one():
    assert_flash_equals_sdpa(1, 1, 9, 11, 1, 1, 4, 3, True, torch.float32, seed=5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("N", "M"), [(5, 7), (7, 5), (1, 3)])
def test_flash_backward_gradcheck(N, M, causal):
    q, k, v = qkv(1, 2, N, M, 3, 2, seed=1, dtype=torch.float64, requires_grad=True)

    def output(q, k, v):
        return flash_attention(q, k, v, is_causal=causal, block_q=2, block_k=3)[0]

    assert torch.autograd.gradcheck(output, (q, k, v))


def test_flash_forward_and_backward_functions_match_the_autograd_function():
    q, k, v = qkv(1, 2, 10, 12, 4, 3, seed=2, dtype=torch.float64, requires_grad=True)
    o, lse = flash_attention_forward(q.detach(), k.detach(), v.detach(), True, 4, 5)
    do = randn(1, 2, 10, 3, seed=9)
    grads = flash_attention_backward(do, q.detach(), k.detach(), v.detach(), o, lse, True, 4, 5)
    o_ref, _ = flash_attention(q, k, v, True, 4, 5)
    torch.testing.assert_close(o, o_ref.detach())
    for g, g_ref in zip(grads, torch.autograd.grad(o_ref, (q, k, v), do)):
        torch.testing.assert_close(g, g_ref)


# --- FlashAttention with a mask_mod --------------------------------------------------------------


def zoo_mask_mods(N, M, seed):
    """(name, mask_mod, (N, M) bool mask) for every mask of the zoo at these sizes."""
    rng = np.random.default_rng(seed)
    ids = np.sort(rng.integers(0, 3, size=max(N, M)))  # packed documents, in order
    n_prefix = int(rng.integers(0, M + 1))
    window = int(rng.integers(1, 5))
    i, j = np.arange(N)[:, None], np.arange(M)[None, :]  # written from each definition
    mods = [
        ("none", None, np.ones((N, M), dtype=bool)),
        ("causal", causal_mask_mod, j <= i),
        ("window", sliding_window_mask_mod(window), (j <= i) & (i - j < window)),
        ("document", document_mask_mod(torch.from_numpy(ids)), ids[:N, None] == ids[None, :M]),
        ("prefix-LM", prefix_lm_mask_mod(n_prefix), (j <= i) | (j < n_prefix)),
    ]
    if N <= M:
        mods.append(("bottom-right", bottom_right_causal_mask_mod(N, M), j <= i + M - N))
    return mods


def assert_flash_with_mask_mod_equals_sdpa(B, h, N, M, d, bq, bk, dtype, seed):
    q, k, v = qkv(B, h, N, M, d, d + 1, seed, dtype, requires_grad=True)
    do = randn(B, h, N, d + 1, seed=seed + 3, dtype=dtype)
    tol = TOL[dtype]
    for name, mod, mask in zoo_mask_mods(N, M, seed):
        stats = TileStats()
        o, lse = flash_attention(q, k, v, block_q=bq, block_k=bk, mask_mod=mod, stats=stats)
        attn_mask = torch.from_numpy(mask)
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)  # (B, h, N, d_v)
        torch.testing.assert_close(o, ref, rtol=tol, atol=tol, msg=name)
        assert torch.isfinite(o).all(), name
        scores = q.detach() @ k.detach().transpose(-2, -1) / math.sqrt(d)  # (B, h, N, M)
        expected_lse = torch.logsumexp(scores.masked_fill(~attn_mask, -math.inf), dim=-1)
        torch.testing.assert_close(lse, expected_lse, rtol=tol, atol=tol, msg=name)
        for g, g_ref in zip(
            torch.autograd.grad(o, (q, k, v), do), torch.autograd.grad(ref, (q, k, v), do)
        ):
            assert torch.isfinite(g).all(), name
            torch.testing.assert_close(g, g_ref, rtol=tol, atol=tol, msg=name)
        nq, nk = -(-N // bq), -(-M // bk)
        padded = np.zeros((nq * bq, nk * bk), dtype=bool)
        padded[:N, :M] = mask
        live = padded.reshape(nq, bq, nk, bk).any(axis=(1, 3))  # (nq, nk) tiles with a True
        assert (stats.visited, stats.skipped) == (live.sum(), (~live).sum()), name


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 2),  # B
    st.integers(1, 2),  # h
    st.integers(1, 17),  # N
    st.integers(1, 17),  # M
    st.integers(1, 4),  # d
    st.integers(1, 6),  # block_q
    st.integers(1, 6),  # block_k
    st.sampled_from(DTYPES),
    seeds,
)
def test_flash_with_every_mask_of_the_zoo_equals_sdpa_with_the_explicit_mask(
    B, h, N, M, d, bq, bk, dtype, seed
):
    assert_flash_with_mask_mod_equals_sdpa(B, h, N, M, d, bq, bk, dtype, seed % 2**31)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("N", "M", "bq", "bk"), [(16, 16, 4, 4), (5, 23, 2, 8), (23, 5, 8, 2)])
def test_flash_with_mask_mods_fixed_sizes(N, M, bq, bk, dtype):
    assert_flash_with_mask_mod_equals_sdpa(2, 2, N, M, 4, bq, bk, dtype, seed=11)


def test_is_causal_is_the_causal_mask_mod():
    q, k, v = qkv(1, 2, 11, 7, 3, 3, seed=4, dtype=torch.float64)
    a, b = TileStats(), TileStats()
    o1, l1 = flash_attention(q, k, v, True, 4, 2, stats=a)
    o2, l2 = flash_attention(q, k, v, False, 4, 2, mask_mod=causal_mask_mod, stats=b)
    assert torch.equal(o1, o2) and torch.equal(l1, l2) and a == b


def test_flash_skips_fully_masked_tiles_in_both_passes():
    """Causal N = M = 64 in tiles of 16: the 4 x 4 grid keeps its 10 tiles on or below the
    diagonal; a window of 16 keeps the 4 diagonal tiles and the 3 below them."""
    q, k, v = qkv(1, 1, 64, 64, 4, 4, seed=5, dtype=torch.float64)
    for mod, visited in ((causal_mask_mod, 10), (sliding_window_mask_mod(16), 7)):
        forward, backward = TileStats(), TileStats()
        o, lse = flash_attention_forward(q, k, v, False, 16, 16, mod, forward)
        flash_attention_backward(torch.ones_like(o), q, k, v, o, lse, False, 16, 16, mod, backward)
        assert forward == backward == TileStats(visited=visited, skipped=16 - visited)
        assert forward.total == 16 and forward.sparsity == (16 - visited) / 16
    calls = []

    def spy(b, h, q_idx, kv_idx):
        calls.append((int(q_idx.min()), int(kv_idx.min())))
        return kv_idx <= q_idx

    flash_attention(q, k, v, block_q=32, block_k=32, mask_mod=spy)
    assert calls == [(0, 0), (0, 32), (32, 0), (32, 32)]  # evaluated once per tile


def test_flash_rows_with_nothing_to_attend_give_zeros_and_zero_gradients():
    q, k, v = qkv(1, 2, 6, 8, 3, 2, seed=6, dtype=torch.float64, requires_grad=True)

    def mod(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (q_idx % 3 != 0)  # rows 0 and 3 see nothing

    o, lse = flash_attention(q, k, v, block_q=2, block_k=3, mask_mod=mod)
    assert (o[:, :, [0, 3]] == 0).all() and torch.isneginf(lse[:, :, [0, 3]]).all()
    assert torch.isfinite(o).all()
    dq, dk, dv = torch.autograd.grad(o.sum(), (q, k, v))
    assert (dq[:, :, [0, 3]] == 0).all() and torch.isfinite(dk).all() and torch.isfinite(dv).all()
    assert torch.autograd.gradcheck(
        lambda q, k, v: flash_attention(q, k, v, block_q=2, block_k=3, mask_mod=mod)[0], (q, k, v)
    )


@pytest.mark.parametrize(("N", "M"), [(3, 7), (7, 7), (4, 4)])
def test_flash_gradcheck_with_the_bottom_right_and_document_masks(N, M):
    q, k, v = qkv(1, 2, N, M, 3, 2, seed=7, dtype=torch.float64, requires_grad=True)
    ids = torch.tensor([0, 0, 1, 1, 1, 2, 2])[:M]
    for mod in (bottom_right_causal_mask_mod(N, M), document_mask_mod(ids)):
        assert torch.autograd.gradcheck(
            lambda q, k, v, mod=mod: flash_attention(q, k, v, block_q=2, block_k=3, mask_mod=mod)[
                0
            ],
            (q, k, v),
        )


def test_flash_mask_mod_may_depend_on_batch_and_head():
    q, k, v = qkv(2, 3, 9, 9, 4, 4, seed=8, dtype=torch.float64)

    def per_head_window(b, h, q_idx, kv_idx):  # head h looks back h + 1 tokens, batch 1 also
        return (kv_idx <= q_idx) & ((q_idx - kv_idx <= h) | (b == 1))  # all of the past

    o, _ = flash_attention(q, k, v, block_q=4, block_k=4, mask_mod=per_head_window)
    i, j = torch.arange(9)[:, None], torch.arange(9)[None, :]
    h = torch.arange(3)[:, None, None]
    mask = torch.stack([(j <= i) & (i - j <= h), (j <= i).expand(3, 9, 9)])  # (B, h, N, M)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(o, ref)


def test_a_chunk_against_a_cache_through_flash_attention():
    """Prefill 6 tokens into a cache, then a chunk of 3 through flash with the bottom-right
    mask_mod: equal to full causal attention over all 9 tokens, and to cached_attention."""
    q, k, v = qkv(1, 2, 9, 9, 4, 4, seed=9, dtype=torch.float64)
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (1, 2, 9, 4)
    cache = KVCache(1, 2, 9, 4, dtype=torch.float64)
    cache.append(k[:, :, :6], v[:, :, :6])
    expected = cached_attention(q[:, :, 6:], k[:, :, 6:], v[:, :, 6:], cache)
    k_all, v_all = cache.k[:, :, :9], cache.v[:, :, :9]
    chunk, _ = flash_attention(
        q[:, :, 6:], k_all, v_all, block_q=2, block_k=4, mask_mod=bottom_right_causal_mask_mod(3, 9)
    )
    torch.testing.assert_close(chunk, full[:, :, 6:])
    torch.testing.assert_close(chunk, expected)
    top_left, _ = flash_attention(q[:, :, 6:], k_all, v_all, True, 2, 4)
    assert (top_left - full[:, :, 6:]).abs().max() > 1e-3


def test_flash_keeps_linear_memory_for_backward_naive_quadratic():
    def kept(fn, N):
        q, k, v = qkv(1, 2, N, N, 16, 16, seed=0, dtype=torch.float32, requires_grad=True)
        return saved_for_backward_bytes(lambda: fn(q, k, v))

    def flash(q, k, v):
        return flash_attention(q, k, v, is_causal=True)[0]

    def naive(q, k, v):
        return explicit_attention(q, k, v, is_causal=True)[0]

    # flash: q, k, v, o (each N·16 floats per head) and lse (N floats per head), exactly
    for N in (128, 256):
        assert kept(flash, N) == 2 * (4 * N * 16 + N) * 4
    assert kept(naive, 512) / kept(naive, 256) > 3.5  # the N×N weights dominate
    assert kept(naive, 512) >= 2 * 512 * 512 * 4


# ---------------------------------------------------------------------------- HBM bytes


def test_hbm_bytes_by_hand():
    """N = M = 32, d = 16, tiles of 16 × 16, float16, one head, counted by hand."""
    # naive: S = Q Kᵀ reads 2·32·16, writes 32·32; softmax reads and writes 32·32;
    # O = P V reads 32·32 + 32·16, writes 32·16
    assert hbm_bytes(32, 32, 16, "naive") == (1024 + 1024 + 1024 + 1024 + 1024 + 1024) * 2
    # tiled: 2 programs, each Q 16·16 once, K and V 16·16 per key tile (2 each), O 16·16;
    # L: 32 floats of 4 bytes
    q_o = 2 * (256 + 256)
    assert hbm_bytes(32, 32, 16, "tiled") == (q_o + 2 * 2 * 2 * 256) * 2 + 32 * 4
    # causal: program 0 visits 1 key tile, program 1 visits 2
    assert hbm_bytes(32, 32, 16, "tiled", "top_left") == (q_o + 3 * 2 * 256) * 2 + 32 * 4
    # a partial last block moves its live rows only: N = 20, M = 24 -> Q, O 20 rows; keys
    # 16 + 8 per program, 2 programs
    expected = (2 * 20 * 16 + 2 * 2 * 24 * 16) * 4 + 20 * 4
    assert hbm_bytes(20, 24, 16, "tiled", bytes_per_number=4) == expected
    # bottom right, N = 40 > M = 16 (offset -24): rows 0..15 see no key, so the first
    # program loads no K or V tile; the other two load the one key tile
    expected = (2 * 40 * 16 + 2 * 2 * 16 * 16) * 2 + 40 * 4
    assert hbm_bytes(40, 16, 16, "tiled", "bottom_right") == expected


def test_hbm_bytes_grows_as_n_squared_over_the_query_block():
    """K and V are read once per query block: the tiled count is about 2 N² d / block_q
    numbers, the naive one about 4 N²; at N = 4096, d = 64 the blocks decide which wins."""
    naive = hbm_bytes(4096, 4096, 64, "naive")
    assert naive == (4 * 4096 * 64 + 4 * 4096**2) * 2
    big = hbm_bytes(4096, 4096, 64, "tiled", block_q=128, block_k=64)
    small = hbm_bytes(4096, 4096, 64, "tiled", block_q=16, block_k=16)
    assert 3.9 < naive / big < 4.0 and 1.9 < small / naive < 2.0
    assert hbm_bytes(4096, 4096, 64, "tiled", "top_left", 128, 64) < 0.55 * big


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        (dict(N=0, M=4, d=16), ValueError, "N must be at least 1; got 0"),
        (dict(N=4, M=4, d=16, form="fused"), ValueError, "form must be one of"),
        (dict(N=4, M=4, d=16, causal=True), ValueError, "causal must be None"),
        (dict(N=4, M=4, d=16, block_q=2.0), TypeError, "block_q must be an int; got float"),
    ],
)
def test_hbm_bytes_refuses_bad_input(kwargs, error, words):
    with pytest.raises(error, match=words):
        hbm_bytes(**kwargs)


def hbm_line():
    """The count notebooks 08 and 09 both print, computed here from the same function."""
    naive = hbm_bytes(4096, 4096, 64, "naive")
    big = hbm_bytes(4096, 4096, 64, "tiled", block_q=128, block_k=64)
    small = hbm_bytes(4096, 4096, 64, "tiled", block_q=16, block_k=16)
    return (
        f"one head, N = 4096, d = 64, float16: naive {naive / 2**20:.1f} MiB; tiled, "
        f"128 × 64 tiles {big / 2**20:.1f} MiB ({naive / big:.1f} times fewer); "
        f"16 × 16 tiles {small / 2**20:.1f} MiB ({small / naive:.1f} times more)"
    )


def test_notebooks_08_and_09_state_the_same_byte_count():
    """Issue 22: one count of the bytes, from one function, in both notebooks."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for name in ("08_efficient_attention", "09_flash_attention_triton"):
        cells = json.loads((root / "notebooks" / f"{name}.ipynb").read_text())["cells"]
        printed = [
            line
            for cell in cells
            if cell["cell_type"] == "code"
            for out in cell["outputs"]
            for line in "".join(out.get("text", "")).splitlines()
        ]
        assert hbm_line() in printed, name


# --- bad input -----------------------------------------------------------------------------------

q4 = torch.zeros(1, 2, 5, 4)
k4 = torch.zeros(1, 2, 6, 4)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: flash_attention(q4[0], k4, k4), ValueError, "q has shape"),
        (lambda: flash_attention(q4, k4[..., :3], k4), ValueError, "d_k = 4"),
        (lambda: flash_attention(q4, k4, k4[:, :, :5]), ValueError, "v has shape"),
        (lambda: flash_attention(q4, k4[:, :1], k4[:, :1]), ValueError, "h = 2"),
        (lambda: flash_attention(q4, k4, k4, block_q=0), ValueError, "block_q must be at least 1"),
        (lambda: flash_attention(q4, k4, k4, block_k=2.0), TypeError, "block_k must be an int"),
        (lambda: flash_attention(q4.long(), k4, k4), TypeError, "floating-point"),
        (lambda: flash_attention(q4, k4.double(), k4), TypeError, "k is torch.float64"),
        (lambda: flash_attention(q4, k4, k4, is_causal=1), TypeError, "is_causal"),
        (lambda: flash_attention(q4[:, :, :0], k4, k4), ValueError, "at least one token"),
        (
            lambda: flash_attention(q4, k4, k4, is_causal=True, mask_mod=causal_mask_mod),
            ValueError,
            "give one of them",
        ),
        (lambda: flash_attention(q4, k4, k4, mask_mod="causal"), TypeError, "mask_mod must be a"),
        (
            lambda: flash_attention(q4, k4, k4, mask_mod=lambda b, h, i, j: (j <= i).float()),
            TypeError,
            "mask_mod must return a bool tensor",
        ),
        (
            lambda: flash_attention(q4, k4, k4, mask_mod=lambda b, h, i, j: torch.ones(3, 3) > 0),
            ValueError,
            "mask_mod returned shape (3, 3)",
        ),
        (lambda: flash_attention(q4, k4, k4, stats={}), TypeError, "stats must be a TileStats"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value)
