"""mha_lib.distributed.decoder: the one-process reference equals transformers' LlamaForCausalLM on
random weights (random norm weights too, odd sizes, grouped-query attention); the sum over
head groups is the whole layer; the weight sources give every process the same numbers.

Tolerance against transformers, float64: 1e-7 on logits of order 1. transformers computes the
RoPE angles in float32 whatever the model's dtype, so its rotation is off by about 1e-8 where
ours (float64 angles) is exact."""

import pytest
import torch

from mha_lib.distributed.decoder import (
    SMOLLM2_135M,
    TINY,
    DecoderConfig,
    RandomWeights,
    TensorWeights,
    attention_heads,
    decoder_logits,
    swiglu,
    weight_shapes,
)
from mha_lib.testing import assert_close


def hf_model(c: DecoderConfig, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=c.vocab_size,
        hidden_size=c.hidden,
        intermediate_size=c.intermediate,
        num_hidden_layers=c.num_layers,
        num_attention_heads=c.num_heads,
        num_key_value_heads=c.num_kv_heads,
        head_dim=c.head_dim,
        rope_theta=c.rope_base,
        rms_norm_eps=c.rms_eps,
        tie_word_embeddings=True,
        attn_implementation="eager",
    )
    model = LlamaForCausalLM(config).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(1.0, 0.2)  # nothing hides behind weights of 1
    return model


@pytest.mark.parametrize(
    "config",
    [TINY, DecoderConfig(50, 30, 3, 5, 1, 6, 22, rope_base=500.0, rms_eps=1e-6)],
    ids=["tiny", "mqa_odd"],
)
def test_equals_transformers_llama(config):
    model = hf_model(config, seed=0)
    ids = torch.randint(0, config.vocab_size, (2, 11), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(ids).logits  # (2, 11, V)
    state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    assert set(state) == set(weight_shapes(config))
    ours = decoder_logits(config, TensorWeights(state), ids)
    assert ours.shape == (2, 11, config.vocab_size)
    assert_close(ours, expected, rtol=1e-6, atol=1e-7)


def test_the_sum_over_head_groups_is_the_whole_layer():
    """Notebook 03's W_O as a sum over heads, with groups: rank-sized groups of query heads with
    their key/value heads, summed, give the layer; and the MLP's hidden units the same."""
    c = TINY
    w = RandomWeights(c, seed=1, dtype=torch.float64)
    x = torch.randn(2, 7, c.hidden, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    W = {p: w(f"model.layers.0.self_attn.{p}_proj.weight") for p in "qkvo"}
    whole = attention_heads(x, W["q"], W["k"], W["v"], W["o"], c.head_dim, c.rope_base)
    d, g = c.head_dim, c.num_heads // c.num_kv_heads
    parts = 0
    for j in range(c.num_kv_heads):  # one key/value head and its g query heads at a time
        q_rows, kv_rows = slice(j * g * d, (j + 1) * g * d), slice(j * d, (j + 1) * d)
        parts = parts + attention_heads(
            x, W["q"][q_rows], W["k"][kv_rows], W["v"][kv_rows], W["o"][:, q_rows], d, c.rope_base
        )
    assert_close(parts, whole, rtol=0, atol=1e-12)
    M = {p: w(f"model.layers.0.mlp.{p}_proj.weight") for p in ("gate", "up", "down")}
    halves = [slice(0, 40), slice(40, c.intermediate)]
    split = sum(swiglu(x, M["gate"][s], M["up"][s], M["down"][:, s]) for s in halves)
    assert_close(split, swiglu(x, M["gate"], M["up"], M["down"]), rtol=0, atol=1e-12)


def test_weight_sources_give_the_same_numbers_everywhere():
    a, b = RandomWeights(TINY, seed=4), RandomWeights(TINY, seed=4)
    name = "model.layers.1.self_attn.o_proj.weight"
    full = a(name)
    assert full.shape == (TINY.hidden, TINY.num_heads * TINY.head_dim)
    assert_close(b(name, slice(3, 9), slice(16, 32)), full[3:9, 16:32], rtol=0, atol=0)
    assert (RandomWeights(TINY, seed=5)(name) != full).all()  # another seed, other numbers
    norm = a("model.norm.weight", slice(0, 4))
    assert norm.shape == (4,) and 0.3 < float(a("model.norm.weight").mean()) < 1.7
    assert abs(float(full.std()) * (TINY.num_heads * TINY.head_dim) ** 0.5 - 1) < 0.1
    given = TensorWeights({name: full})
    assert_close(given(name, slice(1, 2)), full[1:2], rtol=0, atol=0)
    with pytest.raises(KeyError, match=r"no weight named 'lm_head\.weight'"):
        a("lm_head.weight")


def test_sizes_of_smollm2():
    """134.5 million parameters, as published: the embedding (tied) and 30 layers."""
    assert SMOLLM2_135M.parameters == 134_515_008
    shapes = weight_shapes(SMOLLM2_135M)
    assert shapes["model.layers.0.self_attn.q_proj.weight"] == (576, 576)
    assert shapes["model.layers.0.self_attn.k_proj.weight"] == (192, 576)  # 3 heads of 64
    assert len(shapes) == 1 + 30 * 9 + 1


def test_bad_ids_are_named():
    w = RandomWeights(TINY)
    with pytest.raises(ValueError, match=r"ids from 0 to 96; expected 0 .. 95"):
        decoder_logits(TINY, w, torch.tensor([[0, 96]]))
    with pytest.raises(TypeError, match="input_ids must be an integer tensor"):
        decoder_logits(TINY, w, torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"input_ids has shape \(1, 1, 3\)"):
        decoder_logits(TINY, w, torch.zeros(1, 1, 3, dtype=torch.long))
    assert decoder_logits(TINY, w, torch.tensor([1, 2, 3])).shape == (1, 3, 96)
