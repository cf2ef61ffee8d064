"""mha_lib.sparse_attention.nsa: NSA's three branches equal to fla-core 0.6.0's pure-torch
reference (`naive_nsa_selection`, `naive_nsa_compression`, `naive_nsa_topk`, `naive_nsa`) on odd
sizes with GQA, through the outputs stored in mha_lib/data/nsa_reference.json everywhere and
through fla's file itself where its unzipped wheel is (tests/sparse_attention/fla_nsa.py: more
seeds, and the stored outputs made again); the mean pooling against a plain loop; the choice
with a stride below the block against the paper's Eq. 9 as a loop; the dense limits (every block
chosen, a window of N) equal to causal attention; causality; bad input refused naming the
argument and the shape it needs.

fla computes in float32: float32 inputs agree to float32's rounding and the chosen blocks as
sets (fla lists them best first, `select_blocks` in increasing order); no near-tie decides a
choice on these inputs (a test)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_lib.nn.masks import leaks_future
from mha_lib.sparse_attention.nsa import (
    NativeSparseAttention,
    compress,
    compressed_attention,
    nsa_attention,
    nsa_branches,
    select_blocks,
    selected_attention,
    window_attention,
)
from tests.sparse_attention.fla_nsa import (
    CASES,
    FLA_VERSION,
    NAIVE_PATH,
    NAIVE_SHA256,
    REFERENCE_FILE,
    case_inputs,
    fla_mean_pooling,
    fla_outputs,
    load_naive,
    load_reference,
)

REFERENCE = load_reference()
NAMES = [case["name"] for case in CASES]
# more seeds and sizes, against fla's file itself where it is (two with G >= 16: naive_nsa)
SIZES = ("B", "N", "h", "h_kv", "d_k", "d_v", "block", "n_selected")
LIVE = [
    dict(name=f"live{seed}", seed=seed, **dict(zip(SIZES, sizes)))
    for seed, sizes in enumerate(
        [
            (1, 19, 4, 2, 5, 3, 3, 4),
            (2, 14, 6, 3, 3, 4, 4, 3),
            (1, 23, 2, 1, 7, 5, 5, 3),
            (1, 21, 4, 1, 4, 2, 2, 6),
            (1, 17, 16, 1, 5, 3, 3, 3),
            (1, 13, 32, 2, 3, 2, 4, 3),
        ],
        start=10,
    )
]


def fla():
    try:
        return load_naive()
    except (FileNotFoundError, ValueError) as exc:
        pytest.skip(
            f"fla-core {FLA_VERSION}'s {NAIVE_PATH} is not here ({exc}); the stored outputs are "
            "checked by the other tests"
        )


def as_sets(indices: torch.Tensor) -> torch.Tensor:
    """Block indices (..., n), -1 padded, in increasing order with the -1s last."""
    big = torch.iinfo(indices.dtype).max
    ordered = indices.masked_fill(indices < 0, big).sort(-1).values
    return ordered.masked_fill(ordered == big, -1)


def ours(case: dict) -> dict[str, torch.Tensor]:
    x = case_inputs(case)
    q, k, v, b, n = x["q"], x["k"], x["v"], case["block"], case["n_selected"]
    k_cmp, v_cmp = compress(k, v, b, b)
    indices, _ = select_blocks(q, k_cmp, b, b, b, n)
    out = {
        "topk": indices,
        "selection": selected_attention(q, k, v, x["indices"], b),
        "compression": compressed_attention(q, k_cmp, v_cmp, b, b)[0],
    }
    window_off = torch.zeros_like(x["gates"][..., :1])  # naive_nsa runs without its window
    gates = torch.cat([x["gates"], window_off], dim=-1)  # (B, h, N, 3)
    out["nsa"] = nsa_attention(q, k, v, gates, b, b, b, n, window=1)
    return out


def assert_same(mine: dict, theirs: dict) -> None:
    assert set(theirs) <= set(mine)
    for name, t in theirs.items():
        if name == "topk":
            n = mine[name].shape[-1]  # fla pads to n_selected, ours stops at the blocks there are
            assert torch.equal(as_sets(t)[..., :n], mine[name]), name
            assert (as_sets(t)[..., n:] == -1).all(), name
        else:
            torch.testing.assert_close(mine[name], t, rtol=1e-5, atol=2e-6, msg=name)


def test_the_stored_reference_says_where_it_comes_from():
    import json

    data = json.loads(REFERENCE_FILE.read_text())
    assert data["fla-core"] == FLA_VERSION and data["file"] == NAIVE_PATH
    assert data["sha256"] == NAIVE_SHA256
    assert data["made by"].startswith("python -m tests.sparse_attention.fla_nsa")
    assert [case["name"] for case in data["cases"]] == NAMES
    assert REFERENCE_FILE.stat().st_size < 20_000  # a small fixture


@pytest.mark.parametrize("name", NAMES)
def test_each_branch_and_the_choice_equal_the_stored_fla_outputs(name):
    case, stored = REFERENCE[name]
    with torch.no_grad():
        assert_same(ours(case), stored)


@pytest.mark.parametrize("name", NAMES)
def test_fla_makes_the_stored_outputs_again(name):
    naive = fla()
    case, stored = REFERENCE[name]
    with torch.no_grad():
        live = fla_outputs(naive, case)
    assert set(live) == set(stored)
    for key, t in stored.items():
        if key == "topk":
            assert torch.equal(as_sets(live[key]), as_sets(t))
        else:
            torch.testing.assert_close(live[key], t, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", LIVE, ids=lambda case: case["name"])
def test_each_branch_and_the_choice_equal_fla_on_more_seeds(case):
    naive = fla()
    with torch.no_grad():
        assert_same(ours(case), fla_outputs(naive, case))


def test_no_near_tie_decides_a_choice():
    """The chosen sets can agree exactly across float32 arithmetics: on every case, at every
    query whose choice is not all forced (at least 30 of them), the last block chosen on merit
    beats the first left out by more than 1e-3 (float64)."""
    gaps = []
    for case in CASES + LIVE:
        x = case_inputs(case)
        q, k, b, n = x["q"].double(), x["k"].double(), case["block"], case["n_selected"]
        k_cmp, _ = compress(k, k, b, b)
        B, h, N, d_k = q.shape
        h_kv, N_c = k_cmp.shape[1], k_cmp.shape[2]
        for t in range(N):
            own = t // b
            free = sorted(set(range(own + 1)) - {0, own, own - 1})  # ranked on merit
            room = n - len({0, own, max(own - 1, 0)})
            if room <= 0 or len(free) <= room:
                continue
            visible = [j for j in range(N_c) if (j + 1) * b - 1 <= t]
            s = q[:, :, t] @ k_cmp[:, :, visible].repeat_interleave(h // h_kv, 1).transpose(-1, -2)
            p = (s * d_k**-0.5).softmax(-1).view(B, h_kv, h // h_kv, -1).mean(2)  # (B, h_kv, ·)
            ranked = p[..., free].sort(-1, descending=True).values
            gaps.append((ranked[..., room - 1] - ranked[..., room]).min().item())
    assert len(gaps) >= 30 and min(gaps) > 1e-3, (len(gaps), min(gaps))


def test_the_stand_in_for_fla_mean_pooling_is_the_kernel_s_rule():
    x = torch.randn(2, 11, 3, 4, dtype=torch.float64)
    pooled = fla_mean_pooling(x, 4)  # (2, 3, 3, 4): chunks 0-3, 4-7, 8-10
    torch.testing.assert_close(pooled[:, 2], x[:, 8:].mean(1))
    k_cmp, _ = compress(x.transpose(1, 2), x.transpose(1, 2), 4, 4)  # whole blocks only
    torch.testing.assert_close(k_cmp.transpose(1, 2), pooled[:, :2])


@pytest.mark.parametrize(
    "N, block, stride", [(13, 4, 2), (9, 3, 3), (10, 5, 1), (7, 2, 2), (3, 4, 2)]
)
def test_compress_is_the_mean_of_each_whole_block(N, block, stride):
    gen = torch.Generator().manual_seed(N)
    k = torch.randn(2, 3, N, 5, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 3, N, 2, generator=gen, dtype=torch.float64)
    k_cmp, v_cmp = compress(k, v, block, stride)
    starts = list(range(0, N - block + 1, stride))
    assert k_cmp.shape == (2, 3, len(starts), 5) and v_cmp.shape == (2, 3, len(starts), 2)
    for j, s in enumerate(starts):
        torch.testing.assert_close(k_cmp[:, :, j], k[:, :, s : s + block].mean(2))
        torch.testing.assert_close(v_cmp[:, :, j], v[:, :, s : s + block].mean(2))


def eq9_choice(q, k_cmp, block, stride, block_size, n):
    """The choice as the paper's Eq. 9 counts it, one query at a time, over stride-d pieces:
    p_slc[i] = Σ_m Σ_n p_cmp[(l'/d)·i + m - n], m < l'/d, n < l/d (piece m of selection block
    i lies in compressed block (l'/d)·i + m - n, the n-th piece of that block), p_cmp averaged
    over the group's heads; the first, previous and own block always in."""
    B, h, N, d_k = q.shape
    h_kv, N_c = k_cmp.shape[1], k_cmp.shape[2]
    G, n_blocks = h // h_kv, -(-N // block_size)
    out = torch.full((B, h_kv, N, min(n, n_blocks)), -1)
    for b, g, t in np.ndindex(B, h_kv, N):
        visible = [j for j in range(N_c) if j * stride + block - 1 <= t]
        p = torch.zeros(N_c, dtype=q.dtype)
        for head in range(g * G, (g + 1) * G):
            if visible:
                s = q[b, head, t] @ k_cmp[b, g, visible].T / d_k**0.5
                p[visible] += s.softmax(-1) / G
        score = {}
        for i in range(t // block_size + 1):
            score[i] = sum(
                p[j]
                for m in range(block_size // stride)
                for nn in range(block // stride)
                if 0 <= (j := block_size // stride * i + m - nn) < N_c
            )
            if i in (0, t // block_size, t // block_size - 1):
                score[i] = float("inf")
        best = sorted(score, key=lambda i: -float(score[i]))[:n]
        out[b, g, t, : len(best)] = torch.tensor(sorted(best))
    return out


@pytest.mark.parametrize("block, stride, block_size", [(4, 2, 4), (4, 2, 8), (6, 3, 3), (3, 3, 3)])
def test_the_choice_with_overlapping_blocks_is_the_paper_s_eq9(block, stride, block_size):
    gen = torch.Generator().manual_seed(block * 10 + stride)
    q = torch.randn(1, 4, 29, 3, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 2, 29, 3, generator=gen, dtype=torch.float64)
    k_cmp, _ = compress(k, k, block, stride)
    indices, allowed = select_blocks(q, k_cmp, block, stride, block_size, 4)
    assert torch.equal(indices, eq9_choice(q, k_cmp, block, stride, block_size, 4))
    # the mask holds exactly the chosen blocks' tokens up to the query
    for t in range(29):
        tokens = {
            s
            for i in indices[0, 1, t].tolist()
            if i >= 0
            for s in range(i * block_size, (i + 1) * block_size)
            if s <= t
        }
        assert set(allowed[0, 1, t].nonzero().flatten().tolist()) == tokens


def random_qkv(seed=0, B=2, h=4, h_kv=2, N=15, d_k=5, d_v=3):
    gen = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, h, N, d_k, generator=gen, dtype=torch.float64),
        torch.randn(B, h_kv, N, d_k, generator=gen, dtype=torch.float64),
        torch.randn(B, h_kv, N, d_v, generator=gen, dtype=torch.float64),
    )


def causal_sdpa(q, k, v):
    G = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(
        q, k.repeat_interleave(G, 1), v.repeat_interleave(G, 1), is_causal=True
    )


def test_every_block_chosen_and_a_window_of_N_are_causal_attention():
    q, k, v = random_qkv()
    out = nsa_branches(q, k, v, block=3, stride=3, block_size=3, n_selected=5, window=15)
    assert (out["indices"][..., -1] == -1).any()  # early queries: fewer blocks than 5
    torch.testing.assert_close(out["selected"], causal_sdpa(q, k, v))
    torch.testing.assert_close(out["window"], causal_sdpa(q, k, v))


def test_the_window_is_the_last_w_keys_of_each_query():
    q, k, v = random_qkv(1, N=11)
    out = window_attention(q, k, v, 4)
    for t in range(11):
        lo = max(0, t - 3)
        kk = k[:, :, lo : t + 1].repeat_interleave(2, 1)  # (B, h, keys of the window, d_k)
        vv = v[:, :, lo : t + 1].repeat_interleave(2, 1)
        want = F.scaled_dot_product_attention(q[:, :, t : t + 1], kk, vv)  # no mask: all of them
        torch.testing.assert_close(out[:, :, t : t + 1], want)


def test_the_compressed_branch_is_zero_before_the_first_whole_block():
    q, k, v = random_qkv(2)
    k_cmp, v_cmp = compress(k, v, 4, 2)
    out, probs = compressed_attention(q, k_cmp, v_cmp, 4, 2)
    assert (out[:, :, :3] == 0).all() and (out[:, :, 3:] != 0).all()
    torch.testing.assert_close(probs[:, :, 3:].sum(-1), torch.ones(2, 4, 12, dtype=q.dtype))


def test_nsa_is_the_gated_sum_of_its_branches_and_causal():
    q, k, v = random_qkv(3)
    gen = torch.Generator().manual_seed(4)
    gates = torch.sigmoid(torch.randn(2, 4, 15, 3, generator=gen, dtype=torch.float64))
    args = dict(block=4, stride=2, block_size=4, n_selected=3, window=5)
    branches = nsa_branches(q, k, v, **args)
    want = sum(
        gates[..., i, None] * branches[name]
        for i, name in enumerate(["compressed", "selected", "window"])
    )
    torch.testing.assert_close(nsa_attention(q, k, v, gates, **args), want)

    W = torch.randn(3, 4 * 5 + 2 * 5 + 2 * 3, generator=gen, dtype=torch.float64)

    def attend(x):  # x (B, N, 3) -> q, k, v by one projection, NSA's output (B, N, h·d_v)
        B, N, _ = x.shape
        p = x @ W
        q = p[..., :20].view(B, N, 4, 5).transpose(1, 2)
        k = p[..., 20:30].view(B, N, 2, 5).transpose(1, 2)
        v = p[..., 30:].view(B, N, 2, 3).transpose(1, 2)
        g = torch.full((B, 4, N, 3), 0.5, dtype=x.dtype)
        return nsa_attention(q, k, v, g, **args).transpose(1, 2).reshape(B, N, -1)

    x = torch.randn(2, 15, 3, generator=gen, dtype=torch.float64)
    assert not leaks_future(attend, x)


def test_a_query_before_every_whole_block_takes_only_the_forced_blocks():
    q, k, v = random_qkv(7, N=3)
    k_cmp, _ = compress(k, v, 4, 2)  # N = 3 < l = 4: no whole block
    assert k_cmp.shape[2] == 0
    indices, allowed = select_blocks(q, k_cmp, 4, 2, 2, 3)  # blocks {0, 1} of l' = 2
    assert indices[0, 0].tolist() == [[0, -1], [0, -1], [0, 1]]
    assert torch.equal(allowed[0, 0], torch.ones(3, 3, dtype=torch.bool).tril())


def layer(seed=8):
    torch.manual_seed(seed)
    sizes = dict(block=4, stride=2, block_size=4, n_selected=3, window=3)
    return NativeSparseAttention(7, 4, 2, 5, 3, **sizes).double()


def test_the_layer_is_nsa_on_its_projections_and_causal():
    nsa = layer()
    x = torch.randn(2, 13, 7, dtype=torch.float64)
    q, k, v, gates = nsa.heads(x)
    assert gates.shape == (2, 4, 13, 3) and ((gates > 0) & (gates < 1)).all()
    out = nsa_attention(q, k, v, gates, **nsa.sizes).transpose(1, 2).reshape(2, 13, 12)
    with torch.no_grad():
        torch.testing.assert_close(nsa(x), nsa.out_proj(out))
        assert not leaks_future(nsa, x)


def test_the_layer_learns_every_weight_with_finite_gradients():
    nsa = layer()
    x = torch.randn(2, 13, 7, dtype=torch.float64)  # queries 0..2 see no compressed block
    nsa(x).square().sum().backward()
    for name, p in nsa.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_float32_and_float64_agree():
    q, k, v = random_qkv(5)
    gates = torch.full((2, 4, 15, 3), 0.5, dtype=torch.float64)
    args = dict(block=3, stride=3, block_size=3, n_selected=3, window=4)
    out64 = nsa_attention(q, k, v, gates, **args)
    out32 = nsa_attention(q.float(), k.float(), v.float(), gates.float(), **args)
    assert out32.dtype == torch.float32
    torch.testing.assert_close(out32.double(), out64, rtol=1e-5, atol=1e-5)


Q, K, V = random_qkv(6)
K_CMP, V_CMP = compress(K, V, 3, 3)
INDICES, _ = select_blocks(Q, K_CMP, 3, 3, 3, 3)
GATES = torch.full((2, 4, 15, 3), 0.5, dtype=torch.float64)
NSA = dict(block=3, stride=3, block_size=3, n_selected=3, window=4)

BAD = [
    (
        lambda: compress(K[0], V, 3, 3),
        ValueError,
        "k has shape (2, 15, 5); expected a float tensor (B, h_kv, N, d_k)",
    ),
    (
        lambda: compress(K, V[:, :, :7], 3, 3),
        ValueError,
        "v has shape (2, 2, 7, 3); expected (B, h_kv, N, d_v)",
    ),
    (lambda: compress(K, V, 3, 4), ValueError, "stride = 4 > block = 3"),
    (lambda: compress(K, V, 0, 1), ValueError, "block must be at least 1"),
    (lambda: compress(K, V, 3, 1.5), TypeError, "stride must be an int"),
    (
        lambda: compressed_attention(Q, K_CMP[:, :, :, :4], V_CMP, 3, 3),
        ValueError,
        "k_cmp has shape (2, 2, 5, 4)",
    ),
    (
        lambda: compressed_attention(Q, K_CMP, V_CMP[:, :1], 3, 3),
        ValueError,
        "v_cmp has shape (2, 1, 5, 3)",
    ),
    (
        lambda: compressed_attention(Q, K_CMP.float(), V_CMP, 3, 3),
        TypeError,
        "k_cmp has dtype torch.float32",
    ),
    (
        lambda: select_blocks(Q, K_CMP[:, :1].expand(2, 3, 5, 5), 3, 3, 3, 3),
        ValueError,
        "h_kv = 3 key/value heads; expected a divisor of q's h = 4",
    ),
    (lambda: select_blocks(Q, K_CMP, 3, 3, 3, 2), ValueError, "n_selected must be at least 3"),
    (lambda: select_blocks(Q, K_CMP, 3, 3, 0, 3), ValueError, "block_size must be at least 1"),
    (
        lambda: select_blocks(Q.long(), K_CMP, 3, 3, 3, 3),
        ValueError,
        "q has shape (2, 4, 15, 5); expected a float tensor",
    ),
    (
        lambda: selected_attention(Q, K, V, INDICES[:, :1], 3),
        ValueError,
        "indices has shape (2, 1, 15, 3); expected integer block indices (B, h_kv, N, n)",
    ),
    (
        lambda: selected_attention(Q, K, V, INDICES.float(), 3),
        ValueError,
        "expected integer block indices",
    ),
    (
        lambda: selected_attention(Q, K, V, INDICES + 1, 3),
        ValueError,
        "expected -1 (none) or a block 0 .. 4",
    ),
    (
        lambda: selected_attention(Q, K[:, :, :9], V[:, :, :9], INDICES, 3),
        ValueError,
        "k has shape (2, 2, 9, 5); expected N = 15 tokens",
    ),
    (lambda: window_attention(Q, K, V, 0), ValueError, "window must be at least 1"),
    (
        lambda: window_attention(Q, K, V, 4, scale=-1.0),
        ValueError,
        "scale must be a positive number",
    ),
    (
        lambda: nsa_attention(Q, K, V, GATES[..., :2], **NSA),
        ValueError,
        "gates has shape (2, 4, 15, 2); expected (B, h, N, 3)",
    ),
    (
        lambda: layer()(torch.randn(2, 13, 6)),
        ValueError,
        "x has shape (2, 13, 6); expected (B, N, C)",
    ),
    (
        lambda: NativeSparseAttention(7, 4, 3, 5, 3, 4, 2, 4, 3, 3),
        ValueError,
        "num_kv_heads = 3; expected a divisor of num_heads = 4",
    ),
    (
        lambda: nsa_attention(Q, K, V, GATES * 4, **NSA),
        ValueError,
        "gates must hold a sigmoid's outputs",
    ),
]


@pytest.mark.parametrize("call, error, message", BAD, ids=[b[2][:40] for b in BAD])
def test_bad_input_is_refused_naming_the_argument(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value)
