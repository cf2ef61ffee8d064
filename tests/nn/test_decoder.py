"""mha_lib.nn.decoder against transformers' Llama: the parts on random weights and odd sizes, the
caches, and bad input (the loader and the real SmolLM2-135M: tests/llm/test_loader.py).

Tolerances. On random weights in float64 our parts and transformers' would agree to 1e-12 (the
same operations in another order), but transformers computes RMSNorm and RoPE's angles in float32
whatever the input's dtype: where those enter, the comparison is at float32's precision
(RAND_ATOL = 1e-5 on numbers of order 1, about a hundred float32 roundings); our own parts against
each other (cache against no cache, one layout against the other) stay at 1e-10.
"""

import pytest
import torch
import torch.nn.functional as F

from mha_lib.models import hf_names
from mha_lib.nn.backends import RecordWeights, resolve_attention
from mha_lib.nn.decoder import (
    DecoderAttention,
    DecoderBlock,
    DecoderConfig,
    DecoderLM,
    RMSNorm,
    SwiGLU,
)
from mha_lib.nn.generation import generate
from mha_lib.nn.kv_cache import KVCache, SinkKVCache
from mha_lib.nn.masks import bottom_right_window_tensor
from mha_lib.positions import rope
from mha_lib.testing import assert_close
from tests.hf_models import decoder_from_hf, random_hf

RAND_ATOL = 1e-5  # see the module docstring


def ours_from_hf(hf, dtype=torch.float64) -> DecoderLM:
    """A DecoderLM with a copy of a transformers LlamaForCausalLM's weights (tied embedding)."""
    c = hf.config
    cfg = DecoderConfig(
        vocab_size=c.vocab_size,
        hidden_size=c.hidden_size,
        num_layers=c.num_hidden_layers,
        num_heads=c.num_attention_heads,
        num_kv_heads=c.num_key_value_heads,
        head_dim=c.hidden_size // c.num_attention_heads,
        intermediate_size=c.intermediate_size,
        rope_base=float(c.rope_parameters["rope_theta"]),
        rms_norm_eps=c.rms_norm_eps,
        context_length=c.max_position_embeddings,
        eos_token_id=2,
    )
    ours = DecoderLM(cfg).to(dtype).eval()
    sd = hf.state_dict()
    ours.load_state_dict({k: sd[v] for k, v in hf_names(cfg).items()})
    return ours


@pytest.fixture(scope="module")
def odd():
    """A random transformers Llama of odd sizes (C = 48, h = 6, h_kv = 2, d = 8, V = 101),
    float64, random norm weights, and our copy of it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=101,
        hidden_size=48,
        intermediate_size=72,
        num_hidden_layers=3,
        num_attention_heads=6,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rope_theta=1000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
    )
    hf = LlamaForCausalLM(cfg).double().eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)  # nothing hides behind weights of 1
    return hf, ours_from_hf(hf)


def ids_of(shape, vocab, seed=0):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------ the parts, random weights


def test_rmsnorm_equals_transformers():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    ref, ours = LlamaRMSNorm(7, eps=1e-5), RMSNorm(7, eps=1e-5)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ours.weight.copy_(ref.weight)
    x = torch.randn(3, 5, 7, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert_close(ours(x), ref(x))  # float32, float32's default tolerances


def test_swiglu_equals_transformers_mlp(odd):
    hf, ours = odd
    x = torch.randn(2, 5, 48, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert_close(ours.layers[1].mlp(x), hf.model.layers[1].mlp(x), rtol=0, atol=1e-12)
    assert isinstance(ours.layers[1].mlp, SwiGLU)


def test_one_layers_gqa_attention_equals_transformers(odd):
    hf, ours = odd
    x = torch.randn(2, 9, 48, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    pos = torch.arange(9)
    rotary = hf.model.rotary_emb(x, pos[None].expand(2, 9))
    with torch.no_grad():
        ref, _ = hf.model.layers[2].self_attn(x, rotary, attention_mask=None)
        assert_close(ours.layers[2].self_attn(x, pos), ref, rtol=0, atol=RAND_ATOL)


def test_the_whole_model_equals_transformers_on_random_weights(odd):
    hf, ours = odd
    ids = ids_of((2, 17), 101)
    with torch.no_grad():
        assert_close(ours(ids), hf(ids).logits, rtol=0, atol=RAND_ATOL)
        assert_close(ours(ids, attention="eager"), hf(ids).logits, rtol=0, atol=RAND_ATOL)


def test_cached_decoding_equals_the_full_forward(odd):
    _, ours = odd
    ids = ids_of((2, 20), 101, seed=4)
    with torch.no_grad():
        full = ours(ids)  # (2, 20, V)
        cache = ours.new_cache(2, 20)
        parts = [ours(ids[:, :7], cache), ours(ids[:, 7:10], cache)]  # a prefill, a chunk
        parts += [ours(ids[:, t : t + 1], cache) for t in range(10, 20)]  # one at a time
    assert cache.length == 20
    assert_close(torch.cat(parts, dim=1), full, rtol=0, atol=1e-10)
    assert cache.nbytes == 3 * 2 * 2 * 2 * 20 * 8 * 8  # L · 2 · B · h_kv · N · d · 8 bytes


def test_a_sink_cache_that_evicts_nothing_equals_the_kv_cache(odd):
    _, ours = odd
    ids = ids_of((1, 12), 101, seed=5)
    with torch.no_grad():
        full = ours(ids)
        sink = ours.new_sink_cache(1, window=10, num_sinks=2)
        steps = torch.cat([ours(ids[:, t : t + 1], sink) for t in range(12)], dim=1)
        assert sink.rolling and sink.length == 12
        assert_close(steps, full, rtol=0, atol=1e-10)


def test_a_sink_cache_past_its_window_keeps_the_sinks_and_the_last_keys_before_rope(odd):
    """After eviction the cache holds tokens 0, 1 (sinks) and the last 3, in text order, their
    keys as projected (not rotated: each step rotates them by their place in the cache); the
    first layer's keys depend on each token alone, so they can be computed directly."""
    _, ours = odd
    ids = ids_of((1, 9), 101, seed=6)
    with torch.no_grad():
        sink = ours.new_sink_cache(1, window=3, num_sinks=2)
        steps = [ours(ids[:, t : t + 1], sink) for t in range(9)]
        kept = sink.layers[0].positions()
        k_sink, _ = sink.layers[0].keys_values()  # (1, h_kv, 5, d)
        x = ours.layers[0].norm1(ours.embed(ids[:, kept]))  # (1, 5, C)
        k_direct = ours.layers[0].self_attn.k_proj(x).view(1, 5, 2, 8).transpose(1, 2)
    assert kept == [0, 1, 6, 7, 8] and sink.length == 9
    assert_close(k_sink, k_direct, rtol=0, atol=1e-12)
    assert all(torch.isfinite(s).all() for s in steps)


def test_a_sink_cache_at_text_positions_that_evicts_nothing_equals_the_kv_cache(odd):
    _, ours = odd
    ids = ids_of((1, 12), 101, seed=5)
    with torch.no_grad():
        full = ours(ids)
        sink = ours.new_sink_cache(1, window=10, num_sinks=2, rope_positions="original")
        steps = torch.cat([ours(ids[:, t : t + 1], sink) for t in range(12)], dim=1)
    assert_close(steps, full, rtol=0, atol=1e-10)


def test_the_head_on_top_of_the_hidden_states_is_the_forward(odd):
    _, ours = odd
    ids = ids_of((2, 9), 101, seed=12)
    with torch.no_grad():
        x = ours.hidden_states(ids)  # (B, N, C): the residual stream after the last block
        assert x.shape == (2, 9, 48)
        assert_close(ours.logits(x), ours(ids), rtol=0, atol=0)
        assert_close(ours.logits(x[:, -1:]), ours(ids, last_only=True), rtol=0, atol=0)


def test_qkv_is_what_a_layer_attends_with(odd):
    """A layer's output is W_O of the attention of its qkv: the queries and keys rotated."""
    _, ours = odd
    attn = ours.layers[1].self_attn
    x = torch.randn(2, 7, 48, dtype=torch.float64, generator=torch.Generator().manual_seed(13))
    pos = torch.arange(7)
    with torch.no_grad():
        q, k, v = attn.qkv(x, pos)  # (2, 6, 7, 8), (2, 2, 7, 8), (2, 2, 7, 8)
        heads = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        expected = attn.out_proj(heads.transpose(1, 2).reshape(2, 7, 48))
        assert_close(attn(x, pos), expected, rtol=0, atol=1e-12)
        assert_close(k, rope(attn.project(x)[1], pos, 1000.0), rtol=0, atol=0)


def test_a_block_takes_another_attention_module(odd):
    _, ours = odd
    layer = ours.layers[0]
    block = DecoderBlock(ours.config, attention=layer.self_attn).double()
    block.load_state_dict(layer.state_dict())
    x = torch.randn(1, 5, 48, dtype=torch.float64, generator=torch.Generator().manual_seed(14))
    assert block.self_attn is layer.self_attn
    with torch.no_grad():
        assert_close(block(x, torch.arange(5)), layer(x, torch.arange(5)), rtol=0, atol=0)


def test_a_layer_stands_alone_on_its_sizes(odd):
    """DecoderAttention and DecoderBlock from the config's names for their sizes only (no
    vocabulary, no layer count), equal to the model's layer with the same weights and base, and
    the (1, N) positions transformers passes equal to (N,)."""
    _, ours = odd
    layer, rope_base = ours.layers[1], ours.config.rope_base
    sizes = dict(hidden_size=48, num_heads=6, num_kv_heads=2, rms_norm_eps=1e-5)
    attn = DecoderAttention(**sizes, rope_base=rope_base).double()
    block = DecoderBlock(**sizes, rope_base=rope_base, intermediate_size=72).double()
    attn.load_state_dict(layer.self_attn.state_dict())
    block.load_state_dict(layer.state_dict())
    x = torch.randn(2, 7, 48, dtype=torch.float64, generator=torch.Generator().manual_seed(15))
    pos = torch.arange(3, 10)
    with torch.no_grad():
        assert_close(attn(x, pos), layer.self_attn(x, pos), rtol=0, atol=0)
        assert_close(attn(x, pos[None]), layer.self_attn(x, pos), rtol=0, atol=0)
        assert_close(block(x, pos), layer(x, pos), rtol=0, atol=0)
    alone = DecoderAttention(hidden_size=64, num_heads=4)  # every default
    assert (alone.num_heads, alone.num_kv_heads, alone.head_dim) == (4, 4, 16)
    assert DecoderBlock(hidden_size=64, num_heads=4).mlp.up_proj.out_features == 256  # F = 4·C


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda c: DecoderAttention(c, hidden_size=48), "got a config and the sizes"),
        (lambda c: DecoderBlock(c, num_heads=6), "got a config and the sizes"),
        (lambda c: DecoderAttention(hidden_size=50, num_heads=6), "give head_dim"),
        (lambda c: DecoderAttention(hidden_size=48, num_heads=0), "num_heads = 0"),
        (lambda c: DecoderBlock(hidden_size=48.0, num_heads=6), "hidden_size = 48.0"),
        (lambda c: DecoderAttention(hidden_size=48, num_heads=6, bogus=1), "bogus"),
        (lambda c: DecoderAttention({"hidden_size": 48}), "expected a DecoderConfig"),
    ],
)
def test_a_lone_layers_bad_sizes_are_named(odd, make, words):
    with pytest.raises((TypeError, ValueError), match=words):
        make(odd[1].config)


def test_need_weights_gives_each_layers_weights(odd):
    _, ours = odd
    ids = ids_of((2, 6), 101, seed=7)
    with torch.no_grad():
        logits, weights = ours(ids, need_weights=True)
        assert_close(logits, ours(ids), rtol=0, atol=1e-12)
    assert len(weights) == 3 and weights[0].shape == (2, 6, 6, 6)  # (B, h, N, N)
    assert_close(weights[1].sum(-1), torch.ones(2, 6, 6, dtype=torch.float64))
    assert (weights[2].triu(1) == 0).all()  # causal


def test_head_mask_removes_a_heads_output(odd):
    _, ours = odd
    ids = ids_of((1, 8), 101, seed=8)
    mask = torch.ones(3, 6)
    mask[1, 4] = 0
    with torch.no_grad():
        masked = ours(ids, head_mask=mask)
        copy = DecoderLM(ours.config).double().eval()
        copy.load_state_dict(ours.state_dict())
        copy.layers[1].self_attn.out_proj.weight[:, 4 * 8 : 5 * 8] = 0  # head 4's columns of W_O
        assert_close(masked, copy(ids), rtol=0, atol=1e-12)
        assert not torch.allclose(masked, ours(ids))


def test_the_rope_layout_switch_keeps_the_logits(odd):
    _, ours = odd
    ids = ids_of((1, 10), 101, seed=9)
    with torch.no_grad():
        before = ours(ids)
        ours.set_rope_layout(True)
        inter = ours(ids)
        ours.set_rope_layout(False)
        assert_close(inter, before, rtol=0, atol=1e-12)
        assert_close(ours(ids), before, rtol=0, atol=0)


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("ids", "error", "words"),
    [
        (
            torch.tensor([[5, 101]]),
            ValueError,
            r"holds 101 at \(0, 1\); expected token ids in \[0, 101\)",
        ),
        (torch.tensor([[-1, 3]]), ValueError, r"holds -1 at \(0, 0\)"),
        (torch.tensor([3, 4]), TypeError, r"shape \(2,\); expected an integer tensor \(B, n\)"),
        (torch.tensor([[0.0, 1.0]]), TypeError, "torch.float32 tensor"),
        ([[1, 2]], TypeError, "input_ids is list"),
        (torch.zeros(1, 0, dtype=torch.long), ValueError, r"n >= 1"),
        (torch.zeros(1, 65, dtype=torch.long), ValueError, "65 tokens; the model's context is 64"),
    ],
)
def test_bad_ids_are_refused(odd, ids, error, words):
    _, ours = odd
    with pytest.raises(error, match=words):
        ours(ids)


def test_a_refused_call_leaves_the_cache_unchanged(odd):
    _, ours = odd
    cache = ours.new_cache(1, 10)
    with torch.no_grad():
        ours(torch.tensor([[1, 2, 3]]), cache)
        before = [c.k.clone() for c in cache.layers]
        for bad in (
            torch.tensor([[4, 500]]),
            torch.zeros(1, 8, dtype=torch.long),
            torch.zeros(2, 1, dtype=torch.long),
        ):
            with pytest.raises(ValueError):
                ours(bad, cache)
    assert cache.length == 3
    assert all(torch.equal(b, c.k) for b, c in zip(before, cache.layers))


def test_other_bad_arguments(odd):
    _, ours = odd
    ids = torch.tensor([[1, 2]])
    with pytest.raises(
        ValueError, match=r"head_mask has shape \(6,\); expected \(L, h\) = \(3, 6\)"
    ):
        ours(ids, head_mask=torch.ones(6))
    with pytest.raises(ValueError, match="a sink cache takes one token at a time"):
        ours(ids, ours.new_sink_cache(1, window=4))
    with pytest.raises(TypeError, match="cache must be a DecoderCache"):
        ours(ids, KVCache(1, 2, 10, 8))
    with pytest.raises(ValueError, match="attention = 'fast'; expected one of"):
        ours(ids, attention="fast")
    with pytest.raises(ValueError, match="longer than the model's context of 64"):
        ours.new_cache(1, 65)


# ------------------------------------------------------------------ QK-norm and partial RoPE


@pytest.fixture(scope="module")
def qwen3():
    """A random transformers Qwen3 (QK-norm; head_dim 12 is not C/h = 8), float64, and ours."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(1)
    cfg = Qwen3Config(
        vocab_size=97,
        hidden_size=48,
        intermediate_size=80,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=3,
        head_dim=12,
        max_position_embeddings=64,
        rope_theta=5000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    )
    hf = Qwen3ForCausalLM(cfg).double().eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    c = hf.config
    ours = (
        DecoderLM(
            DecoderConfig(
                vocab_size=c.vocab_size,
                hidden_size=c.hidden_size,
                num_layers=c.num_hidden_layers,
                num_heads=c.num_attention_heads,
                num_kv_heads=c.num_key_value_heads,
                head_dim=c.head_dim,
                intermediate_size=c.intermediate_size,
                rope_base=float(c.rope_parameters["rope_theta"]),
                rms_norm_eps=c.rms_norm_eps,
                context_length=c.max_position_embeddings,
                qk_norm=True,
            )
        )
        .double()
        .eval()
    )
    sd = hf.state_dict()
    ours.load_state_dict({k: sd[v] for k, v in hf_names(ours.config).items()})
    return hf, ours


def test_qk_norm_equals_transformers_qwen3(qwen3):
    hf, ours = qwen3
    ids = ids_of((2, 11), 97, seed=4)
    with torch.no_grad():
        assert_close(ours(ids), hf(ids).logits, rtol=0, atol=RAND_ATOL)
    q, k, _ = ours.layers[0].self_attn.project(torch.randn(1, 3, 48, dtype=torch.float64))
    rms = q.pow(2).mean(-1).sqrt() / ours.layers[0].self_attn.q_norm.weight.pow(2).mean().sqrt()
    assert q.shape == (1, 6, 3, 12) and k.shape == (1, 3, 3, 12) and rms.max() < 2


def test_the_rope_layout_switch_moves_the_qk_norm_weights_too(qwen3):
    _, ours = qwen3
    ids = ids_of((1, 9), 97, seed=5)
    with torch.no_grad():
        before = ours(ids)
        ours.set_rope_layout(True)
        after = ours(ids)
        ours.set_rope_layout(False)
    assert_close(after, before, rtol=0, atol=1e-10)


def test_partial_rope_turns_the_first_rope_dim_numbers_only():
    cfg = DecoderConfig(
        vocab_size=11,
        hidden_size=16,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        head_dim=8,
        intermediate_size=8,
        rope_base=100.0,
        rms_norm_eps=1e-6,
        context_length=32,
        rope_dim=4,
    )
    attn = DecoderLM(cfg).double().layers[0].self_attn
    x = torch.randn(1, 2, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    pos = torch.arange(3, 8)
    out = attn.rotate(x, pos)
    assert_close(out[..., :4], rope(x[..., :4], pos, 100.0), rtol=0, atol=0)
    assert_close(out[..., 4:], x[..., 4:], rtol=0, atol=0)
    with pytest.raises(ValueError, match="rope_dim = 4"):
        DecoderLM(cfg).set_rope_layout(True)


# ------------------------------------------------------------------ other architectures (15)
# Each a random transformers model of tiny odd sizes in float64, read into a DecoderLM through
# the one configuration; transformers computes RMSNorm in float32 in Gemma (x.float()), so the
# comparisons are at float32's precision there (GEMMA_ATOL on logits of order 10).

GEMMA_ATOL = 1e-4


@pytest.fixture(scope="module", params=["qwen2", "gemma2", "gemma3"])
def other(request):
    hf = random_hf(request.param)
    return request.param, hf, decoder_from_hf(hf)


def test_other_architectures_equal_transformers_past_their_window(other):
    """13 tokens: past every sliding window (5), so the windowed mask matters."""
    kind, hf, ours = other
    ids = ids_of((2, 13), 101, seed=20)
    with torch.no_grad():
        ref = hf(ids).logits
        for attention in ("sdpa", "eager"):
            assert_close(ours(ids, attention=attention), ref, rtol=0, atol=GEMMA_ATOL, msg=kind)
        if kind != "gemma2":  # the tiled loop takes windows, not soft-capping
            assert_close(ours(ids, attention="flash"), ref, rtol=0, atol=GEMMA_ATOL, msg=kind)


def test_other_architectures_decode_with_their_caches(other):
    """A prefill longer than the window, a chunk, then one token at a time: the sliding layers'
    rolling caches (notebook 11's, no sinks) and the global layers' KV caches give the logits
    of one pass, and transformers' cached generation gives the same greedy tokens."""
    kind, hf, ours = other
    ids = ids_of((1, 24), 101, seed=21)
    with torch.no_grad():
        full = ours(ids)
        cache = ours.new_cache(1, 24)
        parts = [ours(ids[:, :7], cache), ours(ids[:, 7:9], cache)]
        parts += [ours(ids[:, t : t + 1], cache) for t in range(9, 24)]
    assert_close(torch.cat(parts, dim=1), full, rtol=0, atol=1e-10, msg=kind)
    kinds = {type(c).__name__ for c in cache.layers}
    windows = {c.window for c in cache.layers if isinstance(c, SinkKVCache)}
    if kind == "qwen2":
        assert kinds == {"KVCache"}
    else:
        assert kinds == {"KVCache", "SinkKVCache"} and windows == {5} and not cache.rolling
    prompt = ids[:, :9]
    out = generate(ours, prompt, 12, stop_ids=())
    ref = hf.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=12,
        min_new_tokens=12,
        do_sample=False,
        pad_token_id=0,
    )
    assert out.tolist() == ref.tolist(), kind


def test_need_weights_respects_the_window_and_the_soft_cap(other):
    kind, hf, ours = other
    ids = ids_of((1, 11), 101, seed=22)
    with torch.no_grad():
        _, weights = ours(ids, need_weights=True)
        ref = hf(ids, output_attentions=True).attentions
    for l, (w, r) in enumerate(zip(weights, ref)):
        assert_close(w, r, rtol=0, atol=1e-6, msg=f"{kind} layer {l}")
        if ours.layers[l].self_attn.window is not None:  # nothing beyond the last 5 keys
            assert float(w[..., 10, :6].abs().max()) == 0.0


def test_a_gemma3_layer_has_its_type_its_base_and_its_cache():
    ours = decoder_from_hf(random_hf("gemma3"))
    types = [layer.self_attn.layer_type for layer in ours.layers]
    assert types == ["sliding_attention"] * 5 + ["full_attention", "sliding_attention"]
    assert [layer.self_attn.rope_base for layer in ours.layers[4:6]] == [10000.0, 1e6]
    assert ours.layers[0].self_attn.query_factor == 1.0  # scores scaled by 1/√d: nothing to do
    other = decoder_from_hf(random_hf("gemma3", query_pre_attn_scalar=256))
    assert other.layers[0].self_attn.query_factor == 0.25  # 256^-1/2 · √16: folded into q
    cache = ours.new_cache(1, 40)
    assert cache.layers[0].nbytes == 2 * 1 * 1 * 5 * 16 * 8  # a window's worth, float64
    assert cache.layers[5].nbytes == 2 * 1 * 1 * 40 * 16 * 8
    with pytest.raises(ValueError, match="max_len = 65 is longer than the model's context"):
        ours.new_cache(1, 65)


def test_unknown_layer_types_and_bad_options_are_refused():
    base = dict(
        vocab_size=11,
        hidden_size=16,
        num_layers=2,
        num_heads=2,
        num_kv_heads=1,
        head_dim=8,
        intermediate_size=8,
        rope_base=100.0,
        rms_norm_eps=1e-6,
        context_length=32,
    )
    with pytest.raises(ValueError, match=r"layer_types\[1\] = 'local' is not a layer"):
        DecoderConfig(**base, layer_types=("full_attention", "local"))
    with pytest.raises(ValueError, match="layer_types has 1 entries; expected one per layer"):
        DecoderConfig(**base, layer_types=("full_attention",))
    with pytest.raises(ValueError, match="sliding_window = None; a sliding_attention layer"):
        DecoderConfig(**base, layer_types=("sliding_attention", "full_attention"))
    with pytest.raises(ValueError, match="mlp_activation = 'relu'; expected one of"):
        DecoderConfig(**base, mlp_activation="relu")
    cfg = DecoderConfig(
        **base, layer_types=["sliding_attention", "full_attention"], sliding_window=4
    )
    assert cfg.layer_types == ("sliding_attention", "full_attention")  # a list becomes a tuple
    with pytest.raises(ValueError, match=r"notebook 09's kernel .* \['window'\]"):
        DecoderLM(cfg)(ids_of((1, 6), 11), attention="triton")


def test_the_gpt_oss_attention_layers_sink_logits_equal_transformers():
    """gpt-oss's learned sinks (an extra logit per head that takes weight and adds no value) at
    the level of one attention layer, sliding and full: the whole model (mixture of experts,
    YaRN) is out of scope. Its biases on all four projections are left out here (the config's
    attention_bias=False): ours models Qwen2's, on q, k and v."""
    import transformers as tf
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention

    torch.manual_seed(3)
    c = tf.GptOssConfig(
        hidden_size=48,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_hidden_layers=2,
        sliding_window=5,
        attention_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
    )
    c._attn_implementation = "eager"
    cfg = DecoderConfig(
        vocab_size=11,
        hidden_size=48,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        intermediate_size=8,
        rope_base=1000.0,
        rms_norm_eps=1e-6,
        context_length=64,
        layer_types=tuple(c.layer_types),
        sliding_window=5,
        attention_sinks=True,
    )
    ours = DecoderLM(cfg).double()
    x = torch.randn(2, 12, 48, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    pos = torch.arange(12)
    angles = pos[:, None].double() * 1000.0 ** (-torch.arange(0, 16, 2).double() / 16)
    rotary = (angles.cos()[None].expand(2, -1, -1), angles.sin()[None].expand(2, -1, -1))
    for l in range(2):
        ref = GptOssAttention(c, l).double()
        with torch.no_grad():
            ref.sinks.uniform_(-1.0, 3.0)
            mine = ours.layers[l].self_attn
            for a, b in (
                ("q_proj", "q_proj"),
                ("k_proj", "k_proj"),
                ("v_proj", "v_proj"),
                ("out_proj", "o_proj"),
            ):
                getattr(mine, a).weight.copy_(getattr(ref, b).weight)
            mine.sink_logits.copy_(ref.sinks)
            window = 5 if mine.window else 12
            allowed = bottom_right_window_tensor(12, 12, window)
            mask = torch.zeros(12, 12, dtype=torch.float64).masked_fill(~allowed, float("-inf"))
            expected, ref_weights = ref(x, rotary, mask[None, None])
            assert_close(mine(x, pos), expected, rtol=0, atol=1e-10, msg=f"layer {l}")
            recorder = RecordWeights()
            mine(x, pos, attention=recorder)
        assert_close(recorder.weights[0], ref_weights, rtol=0, atol=1e-12)
        assert float(recorder.weights[0].sum(-1).max()) < 1  # the sink took its share
    assert [layer.self_attn.window for layer in ours.layers] == [5, None]


# ------------------------------------------------------------------ the output gate, layer types


def test_the_output_gate_equals_transformers_qwen3_5_attention():
    """Qwen3.5's full-attention layer (QK-norm, partial RoPE on a quarter of d, the sigmoid
    output gate carried by q_proj) against DecoderAttention with the three options; its norms
    are zero-centred (1 + w) and its q_proj holds each head's d query rows, then d gate rows."""
    from transformers import Qwen3_5TextConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import (
        Qwen3_5Attention,
        Qwen3_5TextRotaryEmbedding,
    )

    hf_cfg = Qwen3_5TextConfig(
        vocab_size=11,
        hidden_size=24,
        intermediate_size=8,
        num_hidden_layers=1,
        layer_types=["full_attention"],
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
    )
    hf_cfg._attn_implementation = "sdpa"
    hf = Qwen3_5Attention(hf_cfg, 0).double().eval()
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(0.4 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
    cfg = DecoderConfig(
        vocab_size=11,
        hidden_size=24,
        num_layers=1,
        num_heads=4,
        num_kv_heads=2,
        head_dim=8,
        intermediate_size=8,
        rope_base=10000.0,
        rms_norm_eps=1e-6,
        context_length=64,
        qk_norm=True,
        rope_dim=2,
        attn_output_gate=True,
    )
    ours = DecoderLM(cfg).double().layers[0].self_attn
    q_and_gate = hf.q_proj.weight.view(4, 16, 24)  # (h, 2d, C)
    with torch.no_grad():
        ours.q_proj.weight.copy_(q_and_gate[:, :8].reshape(32, 24))
        ours.gate_proj.weight.copy_(q_and_gate[:, 8:].reshape(32, 24))
        for mine, theirs in (
            (ours.k_proj, hf.k_proj),
            (ours.v_proj, hf.v_proj),
            (ours.out_proj, hf.o_proj),
        ):
            mine.weight.copy_(theirs.weight)
        ours.q_norm.weight.copy_(1 + hf.q_norm.weight)
        ours.k_norm.weight.copy_(1 + hf.k_norm.weight)
    x = torch.randn(2, 9, 24, generator=gen, dtype=torch.float64)
    positions = torch.arange(9)
    cos_sin = Qwen3_5TextRotaryEmbedding(hf_cfg)(x, positions[None].expand(2, 9))
    with torch.no_grad():
        expected, _ = hf(x, cos_sin, None)
        assert_close(ours(x, positions), expected, rtol=0, atol=RAND_ATOL)
        gated = ours(x, positions)
        ours.gate_proj.weight.zero_()  # sigmoid(0) = 1/2: every number passes at half
        half = ours(x, positions)
        ours.gate_proj = None  # no gate: W_O of the merged heads
        ungated = ours(x, positions)
    assert_close(2 * half, ungated, rtol=0, atol=1e-12)
    assert not torch.allclose(gated, ungated)


def test_layer_types_name_each_layers_mixer_and_unknown_names_are_refused():
    base = dict(
        vocab_size=11,
        hidden_size=16,
        num_layers=2,
        num_heads=2,
        num_kv_heads=1,
        head_dim=8,
        intermediate_size=8,
        rope_base=100.0,
        rms_norm_eps=1e-6,
        context_length=32,
    )
    cfg = DecoderConfig(**base, layer_types=["full_attention", "full_attention"])
    assert cfg.layer_types == ("full_attention", "full_attention")  # a tuple, hashable
    assert DecoderConfig(**base).layer_type(1) == "full_attention"
    with pytest.raises(ValueError, match=r"layer_types\[1\] = 'mamba' is not a layer"):
        DecoderConfig(**base, layer_types=("full_attention", "mamba"))
    with pytest.raises(ValueError, match=r"layer_types has 1 entries; expected one per layer"):
        DecoderConfig(**base, layer_types=("full_attention",))
    linear = DecoderConfig(**base, layer_types=("linear_attention", "full_attention"))
    with pytest.raises(ValueError, match=r"layer_types\[0\] = 'linear_attention'.*HybridLM"):
        DecoderLM(linear)


def test_each_layer_may_attend_with_its_own_function():
    """attention= takes one function per layer: here the written-out one in layer 0 and SDPA in
    layer 1 give the logits of either alone, and each is called by its own layer only; a list of
    the wrong length is refused naming num_layers."""
    torch.manual_seed(40)
    config = DecoderConfig.of_layer(
        hidden_size=32, num_heads=4, num_kv_heads=2, vocab_size=41, context_length=16, num_layers=2
    )
    model = DecoderLM(config).eval()
    ids = ids_of((1, 7), config.vocab_size, seed=40)
    calls = []

    def counted(name):
        def fn(q, k, v, **options):
            calls.append(name)
            return resolve_attention(name)(q, k, v, **options)

        return fn

    with torch.no_grad():
        mixed = model(ids, attention=[counted("eager"), counted("sdpa")])
        assert_close(mixed, model(ids, attention="sdpa"), rtol=0, atol=1e-5)
    assert calls == ["eager", "sdpa"]
    expected = r"a list of 1 functions; expected one per layer \(num_layers = 2\)"
    with pytest.raises(ValueError, match=expected):
        model(ids, attention=["sdpa"])
