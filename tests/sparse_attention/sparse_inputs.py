"""Tiny random DeepSeek-V3.2 models of odd sizes for the tests of mha_lib.sparse_attention
(imported by them, not a test). transformers is imported when a helper runs: it imports triton,
which notebook 09's module must import first, and tests are all collected before any runs."""

import importlib.util

import pytest
import torch

needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers is not installed"
)

V = 37  # the vocabulary
# odd sizes wherever the architecture allows them (d_R is even: RoPE turns pairs; the indexer's
# D = 9 leaves 3 numbers unturned after its 6)
SIZES = dict(
    vocab_size=V,
    hidden_size=21,
    intermediate_size=19,
    num_attention_heads=3,
    num_key_value_heads=3,
    kv_lora_rank=11,
    q_lora_rank=13,
    qk_nope_head_dim=5,
    qk_rope_head_dim=6,
    v_head_dim=7,
    index_n_heads=5,
    index_head_dim=9,
    max_position_embeddings=64,
)
YARN = {
    "rope_theta": 500.0,
    "rope_type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 16,
    "mscale": 0.7,
    "mscale_all_dim": 1.0,
}


def hf_config(layers=2, topk=5, tie=False, rope=None, **fields):
    """A DeepseekV32Config of SIZES with dense MLP layers (first_k_dense_replace = layers)."""
    from transformers import DeepseekV32Config

    return DeepseekV32Config(
        **{
            **SIZES,
            "num_hidden_layers": layers,
            "first_k_dense_replace": layers,
            "index_topk": topk,
            "tie_word_embeddings": tie,
            "rope_parameters": rope or {"rope_theta": 500.0, "rope_type": "default"},
            "bos_token_id": None,
            "eos_token_id": None,
            "attn_implementation": "eager",
            **fields,
        }
    )


def randomize(model, seed):
    """Every parameter (norms' weights and the indexer's LayerNorm bias too) drawn anew, seeded."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            p.copy_(0.3 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
    return model


def hf_model(layers=2, topk=5, tie=False, rope=None, dtype=torch.float32, seed=0):
    """transformers' DeepseekV32ForCausalLM of hf_config, every weight random, in eval mode."""
    from transformers import DeepseekV32ForCausalLM

    torch.manual_seed(seed)
    model = DeepseekV32ForCausalLM(hf_config(layers, topk, tie, rope)).to(dtype)
    return randomize(model, seed).eval()


def ids_of(B, N, seed=1):
    return torch.randint(0, V, (B, N), generator=torch.Generator().manual_seed(seed))


def assert_near(a, b, rel):
    """|a − b| ≤ rel · max |b| elementwise: a tolerance relative to the output's scale."""
    assert a.shape == b.shape, (a.shape, b.shape)
    scale = max(b.abs().max().item(), 1e-30)
    err = (a - b).abs().max().item()
    assert err <= rel * scale, f"largest difference {err:.3g}, {err / scale:.3g} of max |b|"


def same_choices(ours, theirs):
    """Our indices (B, N, k), -1 where a query sees fewer keys, against transformers' (which
    fill those places with keys after the query, masked later): the same set of visible keys
    for every query. Returns the number of rows compared."""
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    B, N, _ = ours.shape
    for b in range(B):
        for t in range(N):
            mine = {int(j) for j in ours[b, t] if j >= 0}
            visible = {int(j) for j in theirs[b, t] if j <= t}
            assert mine == visible, (b, t, sorted(mine), sorted(visible))
    return B * N
