"""mha_lib.sparse_attention.indexer: the lightning indexer's scores and top-k choices equal to
transformers' DeepseekV32Indexer (called directly, on tiny odd sizes, default RoPE and YaRN, N
below and above index_topk), with its key cache equal to one pass, the causal top-k's indices
and mask, the cache's bytes, and bad input refused naming the argument and the shape it needs.

transformers computes the index scores in float32 (q.float(), k.float()); ours are float32 for
a float32 layer, so the scores agree to float32's rounding and the top-k sets exactly (no
near-tie at the k-th key on these seeds)."""

from contextlib import contextmanager

import pytest
import torch

from mha_lib.efficient.cache_cost import (
    CacheConfig,
    cache_bytes,
)
from mha_lib.sparse_attention import (
    IndexerCache,
    LightningIndexer,
    causal_topk,
    indexer_numbers_per_token,
)
from mha_lib.testing import assert_close
from tests.sparse_attention.sparse_inputs import (
    SIZES,
    YARN,
    assert_near,
    hf_config,
    needs_transformers,
    randomize,
    same_choices,
)

C, R_Q = SIZES["hidden_size"], SIZES["q_lora_rank"]
H, D, D_R = SIZES["index_n_heads"], SIZES["index_head_dim"], SIZES["qk_rope_head_dim"]


def indexers(topk, rope=None, seed=0):
    """(transformers' DeepseekV32Indexer with random weights, ours with a copy of them, the
    rotary embedding that makes transformers' cos and sin)."""
    from transformers.models.deepseek_v32.modeling_deepseek_v32 import (
        DeepseekV32Indexer,
        DeepseekV32RotaryEmbedding,
    )

    config = hf_config(topk=topk, rope=rope)
    theirs = randomize(DeepseekV32Indexer(config, layer_idx=0), seed).eval()
    scaling = None
    if rope is not None:
        scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
    ours = LightningIndexer(C, R_Q, H, D, D_R, rope_base=500.0, rope_scaling=scaling)
    with torch.no_grad():
        ours.q_proj.weight.copy_(theirs.wq_b.weight)
        ours.k_proj.weight.copy_(theirs.wk.weight)
        ours.k_norm.weight.copy_(theirs.k_norm.weight)
        ours.k_norm.bias.copy_(theirs.k_norm.bias)
        ours.weights_proj.weight.copy_(theirs.weights_proj.weight)
    return theirs, ours.eval(), DeepseekV32RotaryEmbedding(config)


@contextmanager
def kept_topk_inputs(monkeypatch):
    """Every tensor torch.Tensor.topk is called on, kept: transformers' indexer returns only the
    indices, its scores are the tensor it takes the top-k of."""
    seen, topk = [], torch.Tensor.topk

    def spy(self, *args, **kwargs):
        seen.append(self.detach().clone())
        return topk(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "topk", spy)
    yield seen
    monkeypatch.setattr(torch.Tensor, "topk", topk)


def inputs(B, N, seed=3):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, C, generator=gen)  # (B, N, C)
    q_latent = torch.randn(B, N, R_Q, generator=gen)  # (B, N, r_q)
    return x, q_latent


def hf_indexer(theirs, rotary, x, q_latent):
    """transformers' indices (B, N, k) and scores (B, N, N) on x at positions 0 .. N - 1."""
    B, N, _ = x.shape
    positions = torch.arange(N)[None]  # (1, N)
    causal = torch.ones(N, N, dtype=torch.bool).tril()[None].expand(B, N, N)  # (B, N, N)
    return theirs(x, q_latent, rotary(x, positions), causal, positions)


@needs_transformers
@pytest.mark.parametrize("N, topk", [(4, 6), (13, 5), (13, 13)])
@pytest.mark.parametrize("rope", [None, YARN])
def test_scores_and_choices_equal_transformers(monkeypatch, N, topk, rope):
    """N below, above and at index_topk; the default RoPE and YaRN (on the indexer's turned
    numbers, half-split, with its attention factor mscale / mscale_all_dim != 1)."""
    theirs, ours, rotary = indexers(topk, rope)
    x, q_latent = inputs(2, N)
    with torch.no_grad(), kept_topk_inputs(monkeypatch) as seen:
        their_indices = hf_indexer(theirs, rotary, x, q_latent)
    their_scores = seen[0]
    with torch.no_grad():
        scores = ours(x, q_latent)  # (B, N, N)
    assert scores.shape == their_scores.shape == (2, N, N)
    blocked = torch.ones(N, N, dtype=torch.bool).triu(1)  # a key after its query
    assert (
        torch.isneginf(scores[:, blocked]).all() and torch.isneginf(their_scores[:, blocked]).all()
    )
    assert_near(scores[:, ~blocked], their_scores[:, ~blocked], 1e-6)
    indices, allowed = causal_topk(scores, topk)
    assert indices.shape == (2, N, min(topk, N))
    assert same_choices(indices, their_indices.long()) == 2 * N
    # the mask holds exactly the chosen keys: min(t + 1, k) per query t, none after it
    assert allowed.sum(-1).tolist() == [[min(t + 1, topk) for t in range(N)]] * 2
    assert not allowed[:, blocked].any()


@needs_transformers
def test_the_cache_gives_the_scores_of_one_pass(monkeypatch):
    """A prompt of 7 tokens, then 2, then one at a time: each chunk's scores are the rows of one
    pass over all 13 (the causal mask aligned to the bottom right), to float32's rounding."""
    _, ours, _ = indexers(topk=5)
    x, q_latent = inputs(2, 13)
    cache = IndexerCache()
    with torch.no_grad():
        full = ours(x, q_latent)  # (B, 13, 13)
        rows = []
        for a, b in [(0, 7), (7, 9)] + [(t, t + 1) for t in range(9, 13)]:
            chunk = ours(x[:, a:b], q_latent[:, a:b], cache=cache)  # (B, b - a, b)
            assert chunk.shape == (2, b - a, b) and len(cache) == b
            rows.append(torch.nn.functional.pad(chunk, (0, 13 - b), value=float("-inf")))
    assert_near(torch.cat(rows, dim=1).nan_to_num(neginf=0), full.nan_to_num(neginf=0), 1e-6)
    assert cache.keys.shape == (2, 13, D)


def test_causal_topk_chooses_the_best_visible_keys():
    """Hand-made scores: each query's best k visible keys, best first, -1 beyond the visible."""
    inf = float("-inf")
    scores = torch.tensor([[[0.5, inf, inf, inf], [1.0, 3.0, inf, inf], [2.0, -1.0, 0.0, inf]]])
    indices, allowed = causal_topk(scores, 2)
    assert indices.tolist() == [[[0, -1], [1, 0], [0, 2]]]
    assert allowed.tolist() == [
        [[True, False, False, False], [True, True, False, False], [True, False, True, False]]
    ]
    indices, allowed = causal_topk(scores, 9)  # k >= M: every visible key
    assert indices.shape == (1, 3, 4)
    assert_close(allowed, torch.isfinite(scores))


def test_the_indexer_caches_D_numbers_per_token():
    """The cache holds B·T·D numbers, the indexer's part of a sparse-MLA layer's bill
    (`cache_cost.CacheConfig.index_head_dim`, here with no latent beside it)."""
    ours = LightningIndexer(C, R_Q, H, D, D_R)
    cache = IndexerCache()
    x, q_latent = inputs(3, 10)
    with torch.no_grad():
        ours(x, q_latent, cache=cache)
    assert cache.nbytes == 3 * 10 * D * 4 == 3 * 10 * indexer_numbers_per_token(D) * 4
    cfg = CacheConfig(
        "t", "test", 1, kind="mla", kv_lora_rank=0, index_head_dim=D, bytes_per_number=4
    )
    assert cache.nbytes == cache_bytes(cfg, 10, batch=3)
    cache.truncate(4)
    assert len(cache) == 4 and cache.nbytes == 3 * 4 * D * 4


def test_bad_input_names_the_argument_and_the_shape_it_needs():
    ours = LightningIndexer(C, R_Q, H, D, D_R)
    x, q_latent = inputs(2, 5)
    with pytest.raises(
        ValueError, match=r"x has shape \(2, 5, 20\); expected \(B, n, C\) with C = 21"
    ):
        ours(x[..., :20], q_latent)
    with pytest.raises(
        ValueError, match=r"q_latent has shape \(2, 4, 13\); expected \(B, n, r_q\) = \(2, 5, 13\)"
    ):
        ours(x, q_latent[:, :4])
    with pytest.raises(TypeError, match=r"cache must be an IndexerCache; got dict"):
        ours(x, q_latent, cache={})
    cache = IndexerCache()
    cache.append(torch.zeros(2, 3, D))
    with pytest.raises(
        ValueError, match=r"k has shape \(1, 1, 9\); expected \(B, n, D\) with B = 2"
    ):
        cache.append(torch.zeros(1, 1, D))
    with pytest.raises(ValueError, match=r"length = 4; the cache holds 3 keys"):
        cache.truncate(4)
    with pytest.raises(ValueError, match=r"qk_rope_head_dim = 5; expected an even number"):
        LightningIndexer(C, R_Q, H, D, 5)
    with pytest.raises(ValueError, match=r"qk_rope_head_dim = 10; expected an even number at most"):
        LightningIndexer(C, R_Q, H, D, 10)
    with pytest.raises(ValueError, match=r"scores is a torch.int64 tensor of shape \(2, 3\)"):
        causal_topk(torch.zeros(2, 3, dtype=torch.long), 2)
    with pytest.raises(
        ValueError, match=r"scores is a torch.float32 tensor of shape \(3, 3\); expected"
    ):
        causal_topk(torch.zeros(3, 3), 2)
    with pytest.raises(ValueError, match=r"k must be at least 1; got 0"):
        causal_topk(torch.zeros(1, 3, 3), 0)
