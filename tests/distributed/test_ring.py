"""mha_lib.distributed.ring: ring attention over 1 to 4 processes equals SDPA (odd lengths, N != M,
causal and not, both layouts), the work each rank does at each step is the counted table, the
bytes it sends are the formula's and equal an all-gather's; the merge, the layouts and bad input.

The float64 cases agree with SDPA to 1e-12 (the ring only reorders the sums); the float32 case
to 2e-6, the rounding of float32 sums of 37 terms of order 1, with a margin."""

import math

import pytest
import torch
import torch.nn.functional as F

from mha_lib.distributed.ring import (
    block_kind,
    chunk_bounds,
    gather_sequence,
    layout_chunks,
    merge_partials,
    rank_calls,
    rank_positions,
    ring_attention_spawn,
    ring_kv_bytes,
    split_sequence,
    work_per_step,
)
from mha_lib.nn.flash import flash_attention_forward
from mha_lib.testing import assert_close
from tests.distributed.distributed_inputs import GRAD_CASES, WORLD_SIZES, ring_cases, ring_inputs

CASES = list(ring_cases(1))


def tolerance(dtype) -> dict:
    return {"rtol": 0, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 2e-6, "atol": 2e-6}


@pytest.mark.parametrize("P", WORLD_SIZES)
@pytest.mark.parametrize("name", CASES)
def test_ring_attention_equals_sdpa(groups, P, name):
    case = ring_cases(P)[name]
    q, k, v, _ = ring_inputs(case)
    is_causal, layout = case[6], case[7]
    ranks = groups[P][name]
    o = gather_sequence([r["o"] for r in ranks], q.shape[2], layout)
    assert_close(
        o, F.scaled_dot_product_attention(q, k, v, is_causal=is_causal), **tolerance(q.dtype)
    )
    lse = gather_sequence([r["lse"][..., None] for r in ranks], q.shape[2], layout)[..., 0]
    scores = q @ k.mT / math.sqrt(q.shape[-1])  # (B, h, N, M)
    if is_causal:
        scores = scores.masked_fill(torch.ones(q.shape[2], k.shape[2]).triu(1).bool(), -math.inf)
    assert_close(lse, scores.logsumexp(-1), **tolerance(q.dtype))


@pytest.mark.parametrize("P", WORLD_SIZES)
@pytest.mark.parametrize("name", CASES)
def test_work_counted_on_each_rank_is_the_table(groups, P, name):
    is_causal, layout = ring_cases(P)[name][6:8]
    table = work_per_step(P, layout, is_causal)  # [step][rank]
    for r, result in enumerate(groups[P][name]):
        assert [c for c, _ in result["work"]] == [row[r] for row in table]
        assert all(c + s == 4 for c, s in result["work"])  # 2 query chunks x 2 key chunks


def test_zigzag_balances_the_causal_work_and_contiguous_idles():
    for P in (2, 3, 4, 5):
        zigzag, contiguous = work_per_step(P, "zigzag", True), work_per_step(P, "contiguous", True)
        assert zigzag == [[3] * P] + [[2] * P] * (P - 1)  # every rank the same at every step
        assert contiguous[0] == [3] * P
        for t in range(1, P):  # rank r holds rank r - t's block: full if it came from before
            assert contiguous[t] == [0 if r < t else 4 for r in range(P)]
        total = P * (2 * P + 1)  # chunk pairs a >= b over 2P chunks
        assert sum(map(sum, zigzag)) == sum(map(sum, contiguous)) == total
        assert sum(max(row) for row in zigzag) == 2 * P + 1  # the slowest rank, summed over steps
        assert sum(max(row) for row in contiguous) == 4 * P - 1
    assert work_per_step(3, "contiguous", False) == [[4, 4, 4]] * 3


@pytest.mark.parametrize("P", WORLD_SIZES)
def test_bytes_sent_are_the_formula_and_an_all_gathers(groups, P):
    case = ring_cases(P)["zigzag_causal"]
    B, h, _, M, d_k, d_v = case[:6]
    bounds = chunk_bounds(M, P)
    sizes = [sum(bounds[c][1] - bounds[c][0] for c in pair) for pair in layout_chunks("zigzag", P)]
    for r, (ring, gathered) in enumerate(zip(groups[P]["zigzag_causal"], groups[P]["gathered"])):
        # rank r forwards every block but the one of rank r + 1, which it receives last
        forwarded = sum(sizes) - sizes[(r + 1) % P] if P > 1 else 0
        assert ring["traffic"].sent.get("kv", 0) == B * h * forwarded * (d_k + d_v) * 8
        assert gathered["traffic"].total_sent == ring["traffic"].sent.get("kv", 0)
        assert gathered["held"] == B * h * M * (d_k + d_v)
    even = ring_kv_bytes(B, h, 8 * P, d_k, d_v, P, 8)
    assert even["ring_sent"] == even["gather_sent"] == (P - 1) * B * h * 8 * (d_k + d_v) * 8
    assert even["ring_held"] * P == even["gather_held"] * min(P, 2)


@pytest.mark.parametrize("P", WORLD_SIZES)
def test_gathering_everything_gives_the_same_output(groups, P):
    case = ring_cases(P)["zigzag_causal"]
    q, k, v, _ = ring_inputs(case)
    o = gather_sequence([r["o"] for r in groups[P]["gathered"]], q.shape[2], "zigzag")
    assert_close(o, F.scaled_dot_product_attention(q, k, v, is_causal=True), rtol=0, atol=1e-12)


@pytest.mark.parametrize("P", WORLD_SIZES)
@pytest.mark.parametrize("name", list(GRAD_CASES))
def test_backward_on_the_ring_equals_autograd(groups, P, name):
    """dq, dk, dv from the ring (each block's gradient travelling behind it) equal autograd's
    through SDPA, to 1e-12 in float64; each rank sends P - 1 blocks and P block gradients."""
    case = ring_cases(P)[GRAD_CASES[name]]
    q, k, v, do = ring_inputs(case)
    is_causal, layout = case[6], case[7]
    q, k, v = (x.clone().requires_grad_(True) for x in (q, k, v))
    F.scaled_dot_product_attention(q, k, v, is_causal=is_causal).backward(do)
    ranks = groups[P][name]
    for grad, x in (("dq", q), ("dk", k), ("dv", v)):
        got = gather_sequence([r[grad] for r in ranks], x.shape[2], layout)
        assert_close(got, x.grad, rtol=0, atol=1e-12, msg=grad)
    for result in ranks:
        sent = result["traffic"].sent
        assert sent.get("kv", 0) == result["forward_traffic"].sent.get("kv", 0)
        assert result["traffic"].messages.get("dkv", 0) == (P if P > 1 else 0)


def test_ring_attention_spawn_returns_the_gathered_output():
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 3, 15, 8, generator=g) for _ in range(3))
    o = ring_attention_spawn(q, k, v, 2, is_causal=True)
    assert o.shape == (2, 3, 15, 8)
    assert_close(o, F.scaled_dot_product_attention(q, k, v, is_causal=True), rtol=2e-6, atol=2e-6)


# ------------------------------------------------------------------------------ in one process


def test_merge_of_two_key_sets_is_attention_over_both():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 7, 4, generator=g, dtype=torch.float64)
    k = torch.randn(2, 3, 11, 4, generator=g, dtype=torch.float64)
    v = torch.randn(2, 3, 11, 5, generator=g, dtype=torch.float64)
    for cut in (1, 5, 10):
        o_a, lse_a = flash_attention_forward(q, k[:, :, :cut], v[:, :, :cut])
        o_b, lse_b = flash_attention_forward(q, k[:, :, cut:], v[:, :, cut:])
        o, lse = merge_partials(o_a, lse_a, o_b, lse_b)
        assert_close(o, F.scaled_dot_product_attention(q, k, v), rtol=0, atol=1e-13)
        assert_close(lse, (q @ k.mT / 2).logsumexp(-1), rtol=0, atol=1e-13)
        assert_close(merge_partials(o_b, lse_b, o_a, lse_a)[0], o, rtol=0, atol=1e-15)
    # a part with no key (lse = -inf, o = 0), the start of every ring: the other part unchanged
    empty_o, empty_lse = torch.zeros_like(o_a), torch.full_like(lse_a, -math.inf)
    o, lse = merge_partials(empty_o, empty_lse, o_a, lse_a)
    assert_close(o, o_a, rtol=0, atol=0)
    assert_close(lse, lse_a, rtol=0, atol=0)
    o, lse = merge_partials(empty_o, empty_lse, empty_o, empty_lse)  # nothing seen at all: 0
    assert not o.isnan().any() and (o == 0).all() and (lse == -math.inf).all()


def test_merge_does_not_overflow_with_large_scores():
    o_a, o_b = torch.ones(1, 3), -torch.ones(1, 3)
    o, lse = merge_partials(o_a, torch.tensor([1000.0]), o_b, torch.tensor([1000.0]))
    assert_close(o, torch.zeros(1, 3), rtol=0, atol=1e-6)
    assert_close(lse, torch.tensor([1000.0 + math.log(2)]))


def test_layouts_cover_every_token_once():
    for N, P in ((13, 3), (8, 4), (2, 1), (37, 4)):
        bounds = chunk_bounds(N, P)
        sizes = [b - a for a, b in bounds]
        assert bounds[0][0] == 0 and bounds[-1][1] == N and max(sizes) - min(sizes) <= 1
        for layout in ("contiguous", "zigzag"):
            positions = torch.cat([rank_positions(N, P, layout, r) for r in range(P)])
            assert sorted(positions.tolist()) == list(range(N))
        assert layout_chunks("zigzag", P) == [(r, 2 * P - 1 - r) for r in range(P)]
        x = torch.randn(2, 3, N, 4)
        for layout in ("contiguous", "zigzag"):
            blocks = split_sequence(x, P, layout)
            assert all(b.untyped_storage().nbytes() == b.numel() * 4 for b in blocks)  # own copy
            assert_close(gather_sequence(blocks, N, layout), x, rtol=0, atol=0)
    assert rank_positions(8, 2, "zigzag", 0).tolist() == [0, 1, 6, 7]
    assert rank_positions(8, 2, "contiguous", 1).tolist() == [4, 5, 6, 7]


def test_block_kinds():
    assert block_kind(2, 1, True) == "full" and block_kind(1, 1, True) == "diagonal"
    assert block_kind(1, 2, True) == "skipped" and block_kind(1, 2, False) == "full"


# ------------------------------------------------------------------------------- bad input


def test_bad_input_is_named_before_any_process_starts():
    q = torch.randn(1, 2, 7, 4)
    with pytest.raises(
        ValueError, match=r"N = 7 tokens .* world_size = 4 .* N >= 2 · world_size = 8"
    ):
        ring_attention_spawn(q, q, q, 4)
    with pytest.raises(ValueError, match=r"M = 5 tokens .* world_size = 3"):
        ring_attention_spawn(
            torch.randn(1, 2, 9, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4), 3
        )
    with pytest.raises(ValueError, match="world_size must be at least 1; got 0"):
        ring_attention_spawn(q, q, q, 0)
    with pytest.raises(TypeError, match="world_size must be an int"):
        ring_attention_spawn(q, q, q, 2.0)
    with pytest.raises(ValueError, match=r"q has shape \(7, 4\)"):
        ring_attention_spawn(q[0, 0], q, q, 2)
    with pytest.raises(ValueError, match=r"k has shape \(1, 3, 7, 4\).*expected \(B, h, M, d_k\)"):
        ring_attention_spawn(q, torch.randn(1, 3, 7, 4), q, 2)
    with pytest.raises(ValueError, match=r"v has shape \(1, 2, 6, 4\)"):
        ring_attention_spawn(q, q, torch.randn(1, 2, 6, 4), 2)
    with pytest.raises(ValueError, match="is_causal=True needs as many keys as queries; got N = 7"):
        ring_attention_spawn(q, torch.randn(1, 2, 9, 4), torch.randn(1, 2, 9, 4), 2, is_causal=True)
    with pytest.raises(ValueError, match="layout must be one of"):
        ring_attention_spawn(q, q, q, 2, layout="striped")
    with pytest.raises(ValueError, match=r"k has shape .* torch\.float64"):
        ring_attention_spawn(q, q.double(), q, 2)
    with pytest.raises(ValueError, match=r"do has shape \(1, 2, 7\); expected \(B, h, N, d_v\)"):
        rank_calls(q, q, q, 2, do=q[..., 0])
    with pytest.raises(ValueError, match="M = 12 is not divisible by 2 · world_size = 8"):
        ring_kv_bytes(1, 1, 12, 4, 4, 4)
