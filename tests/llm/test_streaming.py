"""mha_lib.llm.streaming: the batched streaming attention against the rolling cache token by token
(a random float64 decoder of odd sizes, the real model, and the small models of every option the
one pass must follow: two RoPE bases and sliding layers, RoPE frequency factors, partial RoPE,
soft caps, sink logits), against an explicit per-query computation, and against transformers'
model under the same explicit mask; the mask of a sliding layer's window over its cache; the
recomputed window; the perplexity; the cached sweep regenerated in part; bad input.

Tolerances. On the random float64 decoder the batched and the token-by-token computations agree to
1e-9 (the same operations in another order; RoPE's angles computed once for a text position, once
for a place in the cache and a shift). The real model runs in float32: its losses (of order 1 to
15) differ between the two by at most about 3e-4 (measured), so the tests allow 2e-3; against
transformers' logits the allowance is notebook 12's, 1e-3. The cached sweep was computed on
another run of the same code: its block means are compared to 2e-3.
"""

import math

import numpy as np
import pytest
import torch

from mha_lib.llm.streaming import (
    SWEEP,
    load_sweep,
    log_perplexity_interval,
    masked_losses,
    recomputed_losses,
    rolling_losses,
    setting_name,
    streaming_attention,
    streaming_mask,
    streaming_perplexity,
    sweep_losses,
    token_losses,
)
from mha_lib.llm.texts import doc_text, stretches
from mha_lib.nn.decoder import DecoderConfig, DecoderLM
from mha_lib.nn.masks import sink_window_mask
from mha_lib.positions import rope
from mha_lib.stats import t_interval
from mha_lib.testing import assert_close

REAL_ATOL = 2e-3  # see the module docstring


@pytest.fixture(scope="module")
def small():
    """A random float64 decoder of odd sizes: C = 40, h = 4, h_kv = 2, d = 10, V = 53, 3 layers,
    RoPE base 500, random norm weights."""
    cfg = DecoderConfig(
        vocab_size=53,
        hidden_size=40,
        num_layers=3,
        num_heads=4,
        num_kv_heads=2,
        head_dim=10,
        intermediate_size=56,
        rope_base=500.0,
        rms_norm_eps=1e-5,
        context_length=64,
    )
    torch.manual_seed(0)
    model = DecoderLM(cfg).double().eval().requires_grad_(False)
    for name, p in model.named_parameters():
        if "norm" in name:
            p.uniform_(0.5, 1.5)
    return model


def ids_of(shape, vocab, seed=0):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def real_ids(smollm2):
    _, tok = smollm2
    return torch.tensor([tok.encode(doc_text())[:20]])


# ------------------------------------------------------------------ batched == token by token


@pytest.mark.parametrize("positions", ["cache", "original"])
@pytest.mark.parametrize(("window", "sinks"), [(5, 0), (4, 1), (3, 2), (6, 3), (1, 1)])
def test_the_batched_attention_equals_the_rolling_cache(small, window, sinks, positions):
    ids = ids_of((2, 19), 53, seed=window + 7 * sinks)
    with torch.no_grad():
        rolled = rolling_losses(small, ids, window, sinks, positions)
        batched = masked_losses(small, ids, window, sinks, positions)
    assert rolled.shape == (2, 18)
    assert_close(batched, rolled, rtol=0, atol=1e-9)


def test_the_two_positions_differ_only_with_sinks_past_the_window(small):
    """Without sinks the window keys keep their distances: the two positions are one setting.
    With sinks they differ once the cache has evicted (t > S + W - 1), and not before."""
    ids = ids_of((1, 20), 53, seed=3)
    with torch.no_grad():
        a, b = (masked_losses(small, ids, 5, 0, p) for p in ("cache", "original"))
        assert_close(a, b, rtol=0, atol=1e-10)
        a, b = (masked_losses(small, ids, 5, 2, p) for p in ("cache", "original"))
    assert_close(a[:, :6], b[:, :6], rtol=0, atol=1e-10)  # queries t <= S + W - 1 = 6
    assert (a[:, 7:] - b[:, 7:]).abs().max() > 1e-3


def test_the_perplexity_is_the_exp_of_the_mean_loss(small):
    ids = ids_of((2, 12), 53, seed=5)
    with torch.no_grad():
        losses = rolling_losses(small, ids, 4, 1, "cache")
    ppl = streaming_perplexity(small, ids, 4, 1, "cache")  # rolling by default
    assert abs(ppl - float(losses.mean().exp())) < 1e-9
    assert abs(streaming_perplexity(small, ids, 4, 1, "cache", method="masked") - ppl) < 1e-9


def test_a_window_as_long_as_the_text_is_the_full_cache(small):
    ids = ids_of((2, 15), 53, seed=4)
    with torch.no_grad():
        full = token_losses(small, ids)
        for positions in ("cache", "original"):
            assert_close(masked_losses(small, ids, 15, 2, positions), full, rtol=0, atol=1e-10)
        logits = small(ids)
    direct = torch.nn.functional.cross_entropy(
        logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none"
    )
    assert_close(full, direct, rtol=0, atol=1e-10)


@pytest.mark.parametrize("positions", ["cache", "original"])
def test_the_real_model_streams_alike_token_by_token_and_batched(smollm2, real_ids, positions):
    model, _ = smollm2
    with torch.no_grad():
        rolled = rolling_losses(model, real_ids, 6, 2, positions)  # evicting from t = 8 on
        batched = masked_losses(model, real_ids, 6, 2, positions)
    assert_close(batched, rolled, rtol=0, atol=REAL_ATOL)
    p_mask = streaming_perplexity(model, real_ids, 6, 2, positions, method="masked")
    assert abs(math.log(p_mask) - float(rolled.double().mean())) < REAL_ATOL


# ------------------------------------------------------------------ the attention function itself


def explicit_cache_attention(q, k, v, window, sinks, base):
    """Each query on its own: its cache (sinks, then the last window tokens), every key rotated by
    its place in the cache and the query by its own, softmax over the cache. q, k, v are NOT
    rotated here (B, h, N, d), h = h_kv."""
    N, d = q.shape[2:]
    out = torch.zeros_like(q)
    for t in range(N):
        kept = [j for j in range(t + 1) if j < sinks or j > t - window]  # text order
        places = torch.arange(len(kept))
        K = rope(k[:, :, kept], places, base)  # (B, h, m, d)
        Q = rope(q[:, :, t : t + 1], places[-1:], base)  # (B, h, 1, d)
        w = torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(d), dim=-1)
        out[:, :, t] = (w @ v[:, :, kept])[:, :, 0]
    return out


@pytest.mark.parametrize(("window", "sinks"), [(4, 1), (3, 3), (7, 2), (2, 5)])
def test_cache_positions_equal_sink_keys_just_before_each_querys_window(window, sinks):
    g = torch.Generator().manual_seed(window * 10 + sinks)
    B, h, N, d, base = 2, 3, 13, 8, 300.0
    q, k, v = (torch.randn(B, h, N, d, generator=g, dtype=torch.float64) for _ in range(3))
    positions = torch.arange(N)
    fn = streaming_attention(window, sinks, "cache", base)
    ours = fn(rope(q, positions, base), rope(k, positions, base), v)
    assert_close(ours, explicit_cache_attention(q, k, v, window, sinks, base), rtol=0, atol=1e-12)


def test_original_positions_are_a_band_with_sink_columns():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, 11, 6, generator=g, dtype=torch.float64)  # h = 4
    k, v = (torch.randn(1, 2, 11, 6, generator=g, dtype=torch.float64) for _ in range(2))
    allowed = torch.from_numpy(sink_window_mask(11, 3, 2))  # (N, N)
    scores = q @ k.repeat_interleave(2, 1).transpose(-2, -1) / math.sqrt(6)
    w = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    expected = w @ v.repeat_interleave(2, 1)
    assert_close(streaming_attention(3, 2, "original")(q, k, v), expected, rtol=0, atol=1e-12)


# ------------------------------------------------------------------ against transformers


def test_original_positions_equal_transformers_under_the_same_mask(smollm2, reference_model):
    model, tok = smollm2
    ids = torch.tensor([tok.encode(doc_text())[100:140]])
    N, window, sinks = ids.shape[1], 8, 2
    allowed = torch.from_numpy(sink_window_mask(N, window, sinks))
    mask = torch.zeros(1, 1, N, N).masked_fill(~allowed, float("-inf"))  # added to the scores
    with torch.no_grad():
        theirs = reference_model(ids, attention_mask=mask).logits  # (1, N, V)
        fn = streaming_attention(window, sinks, "original", model.config.rope_base)
        ours = model(ids, attention=fn)
        losses = masked_losses(model, ids, window, sinks, "original")
    assert_close(ours, theirs, rtol=0, atol=1e-3)
    expected = torch.nn.functional.cross_entropy(theirs[0, :-1], ids[0, 1:], reduction="none")
    assert_close(losses[0], expected, rtol=0, atol=REAL_ATOL)
    ppl = streaming_perplexity(model, ids, window, sinks, "original", method="masked")
    assert abs(math.log(ppl) - float(expected.double().mean())) < REAL_ATOL


# ------------------------------------------------------------------ the recomputed window


def test_the_recomputed_window_encodes_each_window_afresh(small):
    ids = ids_of((2, 20), 53, seed=9)
    queries = [6, 11, 18]
    with torch.no_grad():
        ours = recomputed_losses(small, ids, 7, queries, batch=2)
        for b in range(2):
            for i, t in enumerate(queries):
                logits = small(ids[b : b + 1, t - 6 : t + 1])[0, -1]  # the window alone
                expected = torch.nn.functional.cross_entropy(logits, ids[b, t + 1])
                assert abs(float(ours[b, i]) - float(expected)) < 1e-10
        # a window that reaches the first token is the full cache
        full = token_losses(small, ids)
        assert_close(recomputed_losses(small, ids, 7, [6]), full[:, 6:7], rtol=0, atol=1e-10)


# ------------------------------------------------------------------ the sweep


def test_the_cached_sweep_regenerates(smollm2):
    """The first 200 losses of the first stretch, at W = 64 with 0, 1 and 4 sinks, against the
    cached block means; the recomputed window at its first two query positions."""
    model, tok = smollm2
    sweep = load_sweep()
    assert sweep["stretch"] == SWEEP["stretch"] and sweep["stretches"] == SWEEP["stretches"]
    ids = stretches(tok.encode(doc_text()), sweep["stretch"], 1)  # (1, 2001)
    block = sweep["block"]
    with torch.no_grad():
        for S, positions in [(0, "cache"), (1, "cache"), (4, "original")]:
            losses = masked_losses(model, ids[:, : 2 * block + 1], 64, S, positions)[0]
            means = losses.double().view(2, block).mean(1)
            cached = torch.tensor(sweep["blocks"][setting_name(64, S, positions)][0][:2])
            assert_close(means, cached.double(), rtol=0, atol=2e-3)
        queries = sweep["queries"][:2]
        rec = recomputed_losses(model, ids[:, : queries[-1] + 2], 64, queries)[0]
    cached = torch.tensor(sweep["at_queries"][setting_name(64, -1)][0][:2])
    assert_close(rec.double(), cached.double(), rtol=0, atol=2e-3)


def test_the_sweep_summaries():
    sweep = {
        "stretch": 251,
        "block": 100,
        "blocks": {"a": [[1.0, 2.0, 4.0], [2.0, 2.0, 2.0]]},
        "at_queries": {"a": [[1.0, 3.0], [2.0, 2.0]]},
    }
    assert_close(
        sweep_losses(sweep, "a"), np.array([(100 + 200 + 200) / 250, 2.0]), rtol=0, atol=1e-12
    )
    assert_close(sweep_losses(sweep, "a", "queries"), np.array([2.0, 2.0]), rtol=0, atol=0)
    ppl, low, high = log_perplexity_interval([1.0, 2.0, 3.0])
    mean, half = t_interval([1.0, 2.0, 3.0])
    assert abs(ppl - math.exp(2.0)) < 1e-12 and abs(high - math.exp(mean + half)) < 1e-12
    assert low < ppl < high
    assert setting_name(None) == "full" and setting_name(64) == "W=64 window"
    assert setting_name(64, 0, "original") == "W=64 window"
    assert setting_name(128, 4, "original") == "W=128 S=4 original"
    assert setting_name(64, -1) == "W=64 recomputed"


def test_the_cached_sweep_holds_every_setting():
    sweep = load_sweep()
    names = {setting_name(None)}
    for W in sweep["windows"]:
        names |= {setting_name(W), setting_name(W, -1)}
        names |= {setting_name(W, S, p) for S in sweep["sinks"] for p in ("cache", "original")}
    assert set(sweep["at_queries"]) == names
    assert set(sweep["blocks"]) == names - {setting_name(W, -1) for W in sweep["windows"]}
    for name, rows in sweep["blocks"].items():
        assert len(rows) == sweep["stretches"], name
        assert all(len(r) == -(-(sweep["stretch"] - 1) // sweep["block"]) for r in rows)
    assert len(sweep["queries"]) == 64 and min(sweep["queries"]) >= max(sweep["windows"])


# ------------------------------------------------------------------ bad input


def test_bad_arguments_are_refused(small):
    ids = ids_of((1, 8), 53)
    with pytest.raises(ValueError, match="positions = 'text'"):
        masked_losses(small, ids, 3, 1, "text")
    with pytest.raises(ValueError, match="window must be at least 1"):
        rolling_losses(small, ids, 0, 1)
    with pytest.raises(ValueError, match="sinks must be at least 0"):
        streaming_attention(3, -1)
    with pytest.raises(TypeError, match="window must be an int"):
        streaming_attention(2.5, 1)
    with pytest.raises(ValueError, match="method = 'fast'"):
        streaming_perplexity(small, ids, 3, 1, method="fast")
    with pytest.raises(ValueError, match=r"input_ids has shape \(8,\)"):
        token_losses(small, ids[0])
    with pytest.raises(ValueError, match="N >= 2"):
        token_losses(small, ids[:, :1])
    with pytest.raises(ValueError, match="queries holds"):
        recomputed_losses(small, ids, 4, [2])
    with pytest.raises(ValueError, match="queries holds"):
        recomputed_losses(small, ids, 4, [7])
    with pytest.raises(ValueError, match="without a cache"):
        q = torch.zeros(1, 4, 1, 10)
        streaming_attention(3, 1)(q, torch.zeros(1, 2, 5, 10), torch.zeros(1, 2, 5, 10))


def test_an_option_the_function_does_not_know_is_refused_by_name():
    q = torch.zeros(1, 4, 6, 10)
    k = v = torch.zeros(1, 2, 6, 10)
    with pytest.raises(ValueError, match=r"asks for \['alibi_slopes'\] too"):
        streaming_attention(3, 1)(q, k, v, alibi_slopes=torch.zeros(4))


# ------------------------------------------------------------------ every option of the config

# the small models of tests/hf_models.small_configs that set an option the one pass must follow:
# two RoPE bases and sliding layers of window 5 (Gemma 3: 7 layers, the sixth global), with
# linear RoPE factors on the global layer too, Llama 3's factors, partial RoPE, Gemma 2's soft
# caps (and its sliding layers), gpt-oss's sink logits
OPTION_MODELS = (
    "gemma3",
    "gemma3_linear_rope",
    "llama3_rope",
    "rope_dim",
    "gemma2",
    "attention_sinks",
)
# (window, sinks, positions): a streaming window below the models' sliding window of 5 with a
# cache of 5 (every sink within a sliding layer's window) and of 6 (the first sink out of it),
# one above it (no sink within it once the cache is full), and no sinks; N = 14 tokens is past
# every S + W and the sliding window
SETTINGS = [
    (3, 2, "cache"),
    (3, 3, "cache"),
    (7, 2, "cache"),
    (4, 0, "cache"),
    (3, 3, "original"),
    (7, 2, "original"),
]


@pytest.fixture(scope="module")
def option_models():
    from mha_lib.distributed.weights import RandomWeights
    from tests.hf_models import small_configs

    configs = small_configs()
    return {
        name: RandomWeights(configs[name], seed=3, dtype=torch.float64).model()
        for name in OPTION_MODELS
    }


@pytest.mark.parametrize("name", OPTION_MODELS)
def test_every_option_streams_in_one_pass_as_through_the_rolling_cache(option_models, name):
    """Each layer turns its sinks' keys with its own RoPE (base, frequency factors, rope_dim)
    and applies its own window, soft cap and sink logits as its rolling cache does: the
    one-pass losses equal the token-by-token ones, past both windows."""
    model = option_models[name]
    ids = ids_of((1, 14), 96, seed=11)
    with torch.no_grad():
        for window, sinks, positions in SETTINGS:
            expected = rolling_losses(model, ids, window, sinks, positions)
            ours = masked_losses(model, ids, window, sinks, positions)
            assert_close(ours, expected, rtol=0, atol=1e-10)
        assert (ours - token_losses(model, ids)).abs().max() > 1e-3  # the window mattered
    assert all(not layer.self_attn._forward_pre_hooks for layer in model.layers)


def test_the_sinks_turned_again_matter_on_the_two_base_model(option_models):
    """Gemma 3's cache positions differ from its text positions once the cache has evicted
    (t > S + W - 1 = 4), and not before: the sinks' keys are turned again, with each layer's
    base."""
    model = option_models["gemma3"]
    ids = ids_of((1, 14), 96, seed=11)
    with torch.no_grad():
        a, b = (masked_losses(model, ids, 3, 2, p) for p in ("cache", "original"))
    assert_close(a[:, :4], b[:, :4], rtol=0, atol=1e-10)
    assert (a[:, 5:] - b[:, 5:]).abs().max() > 1e-3


@pytest.mark.parametrize(
    ("window", "sinks", "own"),
    [(3, 2, 5), (3, 3, 5), (7, 2, 5), (4, 0, 2), (2, 4, 3), (6, 1, None)],
)
def test_the_mask_is_the_last_of_the_cached_keys(window, sinks, own):
    """Row t of `streaming_mask`: the cache's keys after token t (the sinks, then the last
    window tokens, in text order), of which a sliding layer sees its last `own`."""
    N = 15
    mask = streaming_mask(N, window, sinks, own)
    for t in range(N):
        cached = [j for j in range(t + 1) if j < sinks or j > t - window]
        seen = cached if own is None else cached[-own:]
        assert mask[t].nonzero().flatten().tolist() == seen, t
    if own is None:
        assert torch.equal(mask, torch.from_numpy(sink_window_mask(N, window, sinks)))


def test_a_linear_layer_is_refused_by_name(small):
    """A model with gated-DeltaNet layers has no keys to roll: refused naming them, by both."""
    from mha_lib.linear_attention import HybridConfig, HybridLM

    hybrid = HybridConfig(
        **{
            **small.config.__dict__,
            "layer_types": ("linear_attention", "linear_attention", "full_attention"),
        },
        linear_num_key_heads=2,
        linear_num_value_heads=2,
        linear_key_head_dim=4,
        linear_value_head_dim=4,
    )
    model = HybridLM(hybrid).double().eval()
    ids = ids_of((1, 12), 53, seed=3)
    for run in (masked_losses, rolling_losses):
        with pytest.raises(ValueError, match=r"layer_types\[0\] = 'linear_attention'"):
            run(model, ids, 4, 2, "original")
