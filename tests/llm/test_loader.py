"""mha_lib.llm.loader: a tiny GGUF file loaded and checked against transformers reading the same
file, the real SmolLM2-135M against transformers on real text (weights, configuration, logits,
cached decoding, greedy generation token for token), and missing, truncated or foreign files.

Tolerances: as tests/nn/test_decoder.py says. The real model runs in float32: its logits (of size
up to about 40) differ from transformers' by at most 1e-4 on the texts below (the summation orders
of the matrix products differ, and RoPE's angles are computed as base^(-2i/d) here and
1/base^(2i/d) there, each rounded to float32); the test allows 1e-3, ten times that.
"""

import pytest
import torch

from mha_lib.efficient.cache_cost import cache_bytes, cache_config, cache_numbers_per_token
from mha_lib.llm.gguf_file import GGUFFile, find_model_file
from mha_lib.llm.loader import gguf_names, hf_names, load_decoder, read_weight
from mha_lib.nn.generation import Trace, generate
from mha_lib.testing import assert_close

LOGIT_ATOL = 1e-3  # see the module docstring
NEW_TOKENS = 40  # new tokens compared one by one
TEXTS = [
    "The capital of France is",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "Once upon a time, in 1987, a café served 12345 crêpes   to    tired travellers.",
]


def ids_of(shape, vocab, seed=0):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------ the loader, a tiny file


def test_loading_a_tiny_gguf_equals_transformers_reading_it(tiny_gguf):
    path, ref = tiny_gguf
    ours = load_decoder(path)
    assert ours.config.num_kv_heads == 2 and ours.config.rope_base == 500.0
    ids = ids_of((2, 13), 100, seed=10)
    with torch.no_grad():
        assert_close(ours(ids), ref(ids).logits, rtol=0, atol=1e-5)
    sd = ref.state_dict()
    q = sd["model.layers.1.self_attn.q_proj.weight"]
    assert_close(ours.layers[1].self_attn.q_proj.weight, q, rtol=0, atol=0)


def test_both_rope_layouts_load_to_the_same_logits(tiny_gguf):
    path, _ = tiny_gguf
    half, inter = load_decoder(path), load_decoder(path, rope_interleaved=True)
    with GGUFFile(path) as f:
        assert_close(inter.layers[0].self_attn.k_proj.weight, f.read("blk.0.attn_k.weight"),
                     rtol=0, atol=0)  # the file's rows, kept  # fmt: skip
    ids = ids_of((1, 11), 100, seed=11)
    with torch.no_grad():
        assert_close(inter(ids), half(ids), rtol=0, atol=1e-5)


def test_loading_fills_every_parameter_from_one_tensor(tiny_gguf):
    path, _ = tiny_gguf
    ours = load_decoder(path)
    names = gguf_names(ours.config)
    assert sorted(names.values()) == sorted(n for n, _ in ours.named_parameters())
    with GGUFFile(path) as f:
        assert set(names) == set(f.tensors)
    assert ours.lm_head is None and ours.output_weight is ours.embed.weight  # tied: stored once


def test_both_name_maps_cover_every_parameter_once(tiny_gguf):
    path, ref = tiny_gguf
    ours = load_decoder(path)
    params = sorted(n for n, _ in ours.named_parameters())
    assert sorted(gguf_names(ours.config).values()) == params
    assert sorted(hf_names(ours.config)) == params
    assert set(hf_names(ours.config).values()) <= set(ref.state_dict())


def test_a_shard_read_is_the_slice_of_the_whole(tiny_gguf):
    """read_weight: rows of whole heads (W_Q's put back into the half-split layout), columns on
    the blocks, written into a given tensor or a new one, a few rows at a time."""
    path, _ = tiny_gguf
    with GGUFFile(path) as f:
        whole = read_weight(f, "blk.1.attn_q.weight", head_dim=16)  # (64, 64)
        part = read_weight(f, "blk.1.attn_q.weight", (16, 48), (32, 64), head_dim=16)
        assert_close(part, whole[16:48, 32:64], rtol=0, atol=0)
        out = torch.empty(96, 64)
        assert read_weight(f, "blk.0.ffn_up.weight", out=out) is out
        assert_close(out, f.read("blk.0.ffn_up.weight"), rtol=0, atol=0)
        assert_close(read_weight(f, "blk.1.attn_q.weight"), f.read("blk.1.attn_q.weight"),
                     rtol=0, atol=0)  # head_dim=None: the file's rows  # fmt: skip
    ours = load_decoder(path)
    assert_close(whole, ours.layers[1].self_attn.q_proj.weight, rtol=0, atol=0)


# ------------------------------------------------------------------ the real model


def test_the_real_weights_equal_transformers_exactly(smollm2, reference_model):
    model, _ = smollm2
    sd = reference_model.state_dict()
    for l in (0, 17, 29):
        pairs = [("self_attn.q_proj",) * 2, ("self_attn.k_proj",) * 2,
                 ("mlp.down_proj",) * 2, ("norm1", "input_layernorm")]  # fmt: skip
        for ours, theirs in pairs:
            a = dict(model.named_parameters())[f"layers.{l}.{ours}.weight"]
            assert_close(a, sd[f"model.layers.{l}.{theirs}.weight"], rtol=0, atol=0)
    assert_close(model.embed.weight, sd["model.embed_tokens.weight"], rtol=0, atol=0)


def test_config_is_read_from_the_metadata(smollm2, reference_model):
    cfg, ref = smollm2[0].config, reference_model.config
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (
        ref.num_hidden_layers, ref.hidden_size, ref.num_attention_heads,
        ref.num_key_value_heads, ref.head_dim)  # fmt: skip
    assert cfg.intermediate_size == ref.intermediate_size and cfg.vocab_size == ref.vocab_size
    assert cfg.rope_base == ref.rope_parameters["rope_theta"] == 100000.0
    assert cfg.rms_norm_eps == ref.rms_norm_eps and cfg.context_length == 8192
    assert cfg.tie_embeddings and cfg.eos_token_id == 2


def test_the_real_logits_equal_transformers(smollm2, reference_model):
    model, tok = smollm2
    with torch.no_grad():
        for text in TEXTS:
            ids = torch.tensor([tok.encode(text)])
            ours, ref = model(ids), reference_model(ids).logits
            assert_close(ours, ref, rtol=0, atol=LOGIT_ATOL, msg=repr(text))
            assert torch.equal(ours.argmax(-1), ref.argmax(-1))


def test_the_real_model_decodes_with_the_cache_as_without(smollm2):
    model, tok = smollm2
    ids = torch.tensor([tok.encode(TEXTS[2])])
    n = ids.shape[1]
    with torch.no_grad():
        full = model(ids)
        cache = model.new_cache(1, n)
        parts = [model(ids[:, : n - 4], cache)] + [model(ids[:, t : t + 1], cache) for t in
                                                   range(n - 4, n)]  # fmt: skip
    assert_close(torch.cat(parts, 1), full, rtol=0, atol=LOGIT_ATOL)


def test_the_cache_costs_what_notebook_11_says(smollm2):
    model, _ = smollm2
    cfg = cache_config(model.config)
    assert cache_numbers_per_token(cfg) == 2 * 3 * 64
    cache = model.new_cache(1, 100)
    assert cache.nbytes == cache_bytes(cfg, 100) == 30 * 2 * 3 * 64 * 100 * 4


@pytest.mark.parametrize(
    "prompt",
    [
        "The history of the printing press begins",
        [{"role": "user", "content": "Explain what a hash table is."}],
    ],
    ids=["plain", "chat"],
)
def test_greedy_equals_transformers_token_for_token(smollm2, reference_model, prompt):
    model, tok = smollm2
    ids = tok.encode(prompt) if isinstance(prompt, str) else tok.encode_chat(prompt)
    ids = torch.tensor([ids])
    trace = Trace()
    ours = generate(model, ids, NEW_TOKENS, stop_ids=(), trace=trace)
    ref = reference_model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=NEW_TOKENS,
        min_new_tokens=NEW_TOKENS,
        do_sample=False,
        pad_token_id=2,
    )
    assert ours.shape[1] - ids.shape[1] == NEW_TOKENS
    assert ours[0].tolist() == ref[0].tolist()
    assert min(trace.logit_margins) > 1e-3  # no near-tie: equality is not luck of the rounding


def test_a_prompt_longer_than_the_real_context(smollm2):
    model, _ = smollm2
    with pytest.raises(ValueError, match="8193 tokens; the model's context is 8192"):
        model(torch.zeros(1, 8193, dtype=torch.long))


def test_missing_truncated_and_foreign_model_files(tmp_path, make_tiny_gguf):
    from mha_lib.llm import load_smollm2

    with pytest.raises(FileNotFoundError, match=r"no model file at .*requirements-model.txt"):
        load_decoder(tmp_path / "none.gguf")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(find_model_file().read_bytes()[:50_000_000])
    with pytest.raises(ValueError, match=r"has sha256 .* expected b179c952"):
        load_smollm2(cut)
    with pytest.raises(ValueError, match="truncated"):
        load_smollm2(cut, expected_sha256=None)
    make_tiny_gguf(tmp_path / "gpt.gguf", arch="gpt2")
    with pytest.raises(ValueError, match="holds a 'gpt2' model; expected 'llama'"):
        load_decoder(tmp_path / "gpt.gguf")
    make_tiny_gguf(tmp_path / "gap.gguf", skip=("blk.1.ffn_up.weight",))
    with pytest.raises(ValueError, match=r"missing \['blk.1.ffn_up.weight'\]"):
        load_decoder(tmp_path / "gap.gguf")


def test_an_unsupported_quantisation_type_is_refused_before_loading(tmp_path, make_tiny_gguf):
    import numpy as np

    extra = {"blk.0.ffn_up.weight": (np.zeros((96, 36), dtype=np.uint8), "RAW")}  # 2 blocks a row
    make_tiny_gguf(tmp_path / "k.gguf", skip=("blk.0.ffn_up.weight",), extra=extra)
    with pytest.raises(ValueError, match="'IQ4_NL' is not supported"):
        load_decoder(tmp_path / "k.gguf")
