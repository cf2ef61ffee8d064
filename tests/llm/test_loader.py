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
from mha_lib.llm.loader import load_decoder, read_weight
from mha_lib.models import gguf_names, hf_names
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
        assert_close(
            inter.layers[0].self_attn.k_proj.weight, f.read("blk.0.attn_k.weight"), rtol=0, atol=0
        )  # the file's rows, kept
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
        assert_close(
            read_weight(f, "blk.1.attn_q.weight"), f.read("blk.1.attn_q.weight"), rtol=0, atol=0
        )  # head_dim=None: the file's rows
    ours = load_decoder(path)
    assert_close(whole, ours.layers[1].self_attn.q_proj.weight, rtol=0, atol=0)


# ------------------------------------------------------------------ the real model


def test_the_real_weights_equal_transformers_exactly(smollm2, reference_model):
    model, _ = smollm2
    sd = reference_model.state_dict()
    for l in (0, 17, 29):
        pairs = [
            ("self_attn.q_proj",) * 2,
            ("self_attn.k_proj",) * 2,
            ("mlp.down_proj",) * 2,
            ("norm1", "input_layernorm"),
        ]
        for ours, theirs in pairs:
            a = dict(model.named_parameters())[f"layers.{l}.{ours}.weight"]
            assert_close(a, sd[f"model.layers.{l}.{theirs}.weight"], rtol=0, atol=0)
    assert_close(model.embed.weight, sd["model.embed_tokens.weight"], rtol=0, atol=0)


def test_config_is_read_from_the_metadata(smollm2, reference_model):
    cfg, ref = smollm2[0].config, reference_model.config
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (
        ref.num_hidden_layers,
        ref.hidden_size,
        ref.num_attention_heads,
        ref.num_key_value_heads,
        ref.head_dim,
    )
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
        parts = [model(ids[:, : n - 4], cache)] + [
            model(ids[:, t : t + 1], cache) for t in range(n - 4, n)
        ]
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


def test_the_default_encoding_and_notebook_15s_own_file_cell_generate_as_transformers(
    smollm2, reference_model, reference_tokenizer
):
    """SmolLM2's file asks for no BOS (`tokenizer.ggml.add_bos_token = false`): `encode` adds
    none by default, as transformers' tokenizer; notebook 15's "your own file" cell, run on this
    file, prints transformers' greedy completion of the default encoding."""
    from tests.notebook_source import run_your_own_file_cell

    tok = smollm2[1]
    prompt = "The capital of France is"
    ids = tok.encode(prompt)
    assert not tok.add_bos and ids == reference_tokenizer(prompt).input_ids
    ids = torch.tensor([ids])
    expected = reference_model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=20, do_sample=False, pad_token_id=2
    )
    completion = tok.decode(expected[0, ids.shape[1] :], skip_special_tokens=True)
    assert "Paris" in completion
    printed = run_your_own_file_cell(find_model_file())
    assert printed.strip().endswith(repr(completion)), printed


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


# ------------------------------------------------------------------ load_gguf: every architecture

KINDS = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3": "gemma3_text"}
FORMATS = ("F32", "F16", "Q8_0", "Q4_0")
TOKENIZER_TEXTS = [
    "The capital of France is Paris.",
    "def f(x):\n    return x ** 2  # 12345\n\n",
    "Once upon a time, 1987 crêpes   café ÜNÏCÖDÉ 😀 -> {a: [1, 2]}",
    "  leading spaces, trailing tabs\t\t\nand CamelCase words, don't we'll I'M",
]


def hf_of(kind: str):
    """A random transformers model of `kind` for a file: float32, C = 64 (quantized blocks of
    32), the vocabulary of the file's tokenizer, Qwen3's heads of 128 (transformers reads no
    head size from a qwen3 file and takes its default, 128: here not C / h = 16)."""
    import torch

    from tests.gguf_files import vocab_size
    from tests.hf_models import random_hf

    return random_hf(
        kind,
        vocab_size=vocab_size(KINDS[kind]),
        hidden_size=64,
        dtype=torch.float32,
        qwen3_head_dim=128,
        gemma3_head_dim=256,
    )


@pytest.fixture(
    scope="module", params=[(k, q) for k in KINDS for q in FORMATS], ids=lambda p: f"{p[0]}-{p[1]}"
)
def written(request, tmp_path_factory):
    """(kind, qtype, ours, tokenizer, transformers' model read from the same file, path)."""
    from mha_lib.llm.loader import load_gguf
    from tests.gguf_files import write_gguf
    from tests.hf_models import hf_model_from_gguf

    kind, qtype = request.param
    path = tmp_path_factory.mktemp("gguf") / f"{kind}-{qtype}.gguf"
    write_gguf(path, hf_of(kind), qtype=qtype)
    ours, tok = load_gguf(path)
    return kind, qtype, ours, tok, hf_model_from_gguf(path), path


def test_load_gguf_equals_transformers_reading_the_same_file(written):
    """Logits of random weights (of order 5) to float32's rounding, and 12 greedy tokens, on
    a prompt longer than Gemma's window (5) in every format."""
    kind, qtype, ours, _, ref, _ = written
    assert type(ref).__name__.lower().startswith(kind)
    ids = ids_of((2, 13), ours.config.vocab_size, seed=30)
    with torch.no_grad():
        assert_close(ours(ids), ref(ids).logits, rtol=0, atol=1e-4, msg=f"{kind} {qtype}")
    prompt = ids[:1, :9]
    trace = Trace()
    out = generate(ours, prompt, 12, stop_ids=(), trace=trace)
    expected = ref.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=12,
        min_new_tokens=12,
        do_sample=False,
        pad_token_id=0,
    )
    assert out.tolist() == expected.tolist()
    assert min(trace.logit_margins) > 1e-3  # no near-tie: the equality is not luck


def test_load_gguf_builds_the_architecture_the_file_names(written):
    kind, qtype, ours, tok, _, path = written
    cfg = ours.config
    with GGUFFile(path, skip_arrays=True) as f:
        assert f.value("general.architecture") == kind
        assert {f.tensors[n].qtype for n in f.tensors if n.endswith("ffn_up.weight")} == {qtype}
    assert cfg.qk_norm == (kind in ("qwen3", "gemma3"))
    assert cfg.attention_bias == (kind == "qwen2")
    assert cfg.sandwich_norms == (kind == "gemma3")
    if kind == "gemma3":
        assert cfg.layer_types == ("sliding_attention",) * 5 + (
            "full_attention",
            "sliding_attention",
        )
        assert cfg.sliding_window == 5 and cfg.rope_local_base == 10000.0
        assert type(tok).__name__ == "SentencePieceTokenizer"
    else:
        assert cfg.layer_types is None and type(tok).__name__ == "GGUFTokenizer"
    assert type(ours.embed).__name__ == "QuantizedEmbedding"  # the tied Q8_0 embedding, kept


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_tokenizer_from_the_file_equals_transformers(kind, tmp_path):
    """Byte-level BPE with llama.cpp's 'llama-bpe' and 'qwen2' splits, and SentencePiece with
    scores and byte fallback (é, Ü, 😀 are not pieces of the small vocabulary), against
    transformers' tokenizer built from the same file."""
    from mha_lib.llm.loader import tokenizer_from_gguf
    from tests.gguf_files import write_gguf
    from tests.hf_models import hf_tokenizer_from_gguf

    path = tmp_path / f"{kind}.gguf"
    write_gguf(path, hf_of(kind), qtype="F32")
    with GGUFFile(path) as f:
        ours = tokenizer_from_gguf(f)
    ref = hf_tokenizer_from_gguf(path)
    for text in TOKENIZER_TEXTS:
        ids = ours.encode(text, add_bos=False)
        assert ids == ref.encode(text, add_special_tokens=False), (kind, text)
        assert ours.encode(text) == ref.encode(text), (kind, text)  # by default, as the file says
        assert ours.decode(ids) == text
    # the files written here ask for BOS as Llama 3's and Gemma's do, Qwen's do not
    assert (ours.encode("a")[0] == ours.bos_id) == (kind in ("llama", "gemma3"))
    if kind == "gemma3":
        assert any(ours.token_types[i] == 6 for i in ours.encode("😀", add_bos=False))  # bytes


def test_the_rope_layout_and_the_float_embedding_keep_the_logits(tmp_path):
    """rope_interleaved moves Qwen2's rows (and biases) and Gemma's (and QK-norm weights) into
    adjacent pairs; quantized_embedding=False dequantizes the embedding: the same logits."""
    from mha_lib.llm.loader import load_gguf
    from tests.gguf_files import write_gguf

    for kind in ("qwen2", "gemma3"):
        path = tmp_path / f"{kind}.gguf"
        write_gguf(path, hf_of(kind), qtype="Q8_0")
        base, _ = load_gguf(path)
        inter, _ = load_gguf(path, rope_interleaved=True)
        plain, _ = load_gguf(path, quantized_embedding=False)
        assert inter.rope_interleaved and type(plain.embed).__name__ == "Embedding"
        ids = ids_of((1, 11), base.config.vocab_size, seed=31)
        with torch.no_grad():
            assert_close(inter(ids), base(ids), rtol=0, atol=1e-5, msg=kind)
            assert_close(plain(ids), base(ids), rtol=0, atol=0, msg=kind)


def test_bad_files_are_refused_before_a_weight_is_read(tmp_path, monkeypatch):
    """Truncated, foreign, of an unknown architecture, missing a tensor, of a wrong shape, of an
    unsupported format or tokenizer: each a clear error, and no weight read (nothing is half
    loaded)."""
    import numpy as np

    from mha_lib.llm import loader
    from tests.gguf_files import write_gguf

    reads = []
    monkeypatch.setattr(loader, "read_weight", lambda *a, **k: reads.append(a[1]))
    hf = hf_of("qwen2")
    good = tmp_path / "good.gguf"
    write_gguf(good, hf, qtype="Q8_0")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(good.read_bytes()[:-3000])
    foreign = tmp_path / "foreign.gguf"
    foreign.write_bytes(b"PK\x03\x04" + bytes(4000))
    cases = {
        "phi3": (
            r"holds a 'phi3' model \(no file here describes it\); load_gguf reads "
            r"'gemma2'.*'gemma3'.*'llama'.*'qwen2'.*'qwen3'",
            dict(arch="phi3"),
        ),
        "gap": (r"missing \['blk.1.ffn_up.weight'\]", dict(skip=("blk.1.ffn_up.weight",))),
        "shape": (
            r"blk.0.ffn_up.weight has shape \(96, 32\); expected \(96, 64\)",
            dict(
                skip=("blk.0.ffn_up.weight",),
                extra={"blk.0.ffn_up.weight": (np.zeros((96, 32), np.float32), "F32")},
            ),
        ),
        "format": (
            "'IQ4_NL' is not supported",
            dict(
                skip=("blk.0.ffn_up.weight",),
                extra={"blk.0.ffn_up.weight": (np.zeros((96, 36), np.uint8), "RAW")},
            ),
        ),
        "no vocabulary": ("stores no vocabulary", dict(vocab=False)),
    }
    for name, (message, kwargs) in cases.items():
        path = tmp_path / f"{name}.gguf"
        write_gguf(path, hf, qtype="Q8_0", **kwargs)
        with pytest.raises(ValueError, match=message):
            loader.load_gguf(path)
    with pytest.raises(ValueError, match="truncated"):
        loader.load_gguf(cut)
    with pytest.raises(ValueError, match="not a readable GGUF file"):
        loader.load_gguf(foreign)
    with pytest.raises(FileNotFoundError, match="no GGUF file at"):
        loader.load_gguf(tmp_path / "none.gguf")
    with pytest.raises(ValueError, match=r"has sha256 .* expected 00"):
        loader.load_gguf(good, expected_sha256="00" * 32)
    assert reads == []


# name: (kind, transformers' rope_parameters)
LLAMA3 = {
    "rope_type": "llama3",
    "rope_theta": 500.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}
GEMMA3_LINEAR = {
    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
}
QWEN2_YARN = {
    "rope_type": "yarn",
    "rope_theta": 3000.0,
    "factor": 4.0,
    "original_max_position_embeddings": 4096,
}
QWEN3_YARN = {
    "rope_type": "yarn",
    "rope_theta": 5000.0,
    "factor": 8.0,
    "original_max_position_embeddings": 2048,
}
ROPE_SCALINGS = {
    "llama3": ("llama", LLAMA3),
    "gemma3-linear": ("gemma3", GEMMA3_LINEAR),
    "qwen2-yarn": ("qwen2", QWEN2_YARN),
    "qwen3-yarn": ("qwen3", QWEN3_YARN),
}


@pytest.mark.parametrize("name", list(ROPE_SCALINGS))
def test_a_file_with_a_rope_scaling_loads_equal_to_transformers(name, tmp_path):
    """Llama 3.1's and 3.2's scaling (llama.cpp writes it as rope_freqs.weight), Gemma 3 4B to
    27B's linear one on the global layers, and YaRN as Qwen2.5's and Qwen3's files may hold it
    (rope.scaling.type "yarn", its factor and original context): the loaded model equals
    transformers built with the same configuration (logits, 12 greedy tokens), its factors equal
    transformers' own frequencies' ratio, and without them the logits are far off (the factors
    matter here)."""
    from dataclasses import replace

    from mha_lib.llm.loader import load_gguf
    from mha_lib.nn.decoder import DecoderLM
    from tests.gguf_files import vocab_size, write_gguf
    from tests.hf_models import config_from_hf, random_hf

    kind, rope = ROPE_SCALINGS[name]
    hf = random_hf(
        kind,
        vocab_size=vocab_size(KINDS[kind]),
        hidden_size=64,
        dtype=torch.float32,
        rope_parameters=rope,
    )
    path = tmp_path / f"{name}.gguf"
    write_gguf(path, hf, qtype="F32", embed_qtype="F32")
    ours, _ = load_gguf(path)
    factors = torch.tensor(ours.config.rope_freq_factors)
    expected = torch.tensor(config_from_hf(hf.config).rope_freq_factors)
    assert_close(factors, expected, rtol=1e-6, atol=0)
    distinct = len(set(factors.tolist()))  # llama3: 1, two blended, 8; linear: 8; yarn: a ramp
    assert distinct == 4 if kind == "llama" else distinct == 1 if kind == "gemma3" else distinct > 2
    ids = ids_of((2, 21), ours.config.vocab_size, seed=32)
    plain = DecoderLM(replace(ours.config, rope_freq_factors=None, query_scale=None)).eval()
    plain.load_state_dict(ours.state_dict())
    with torch.no_grad():
        assert_close(ours(ids), hf(ids).logits, rtol=0, atol=1e-4, msg=name)
        assert (plain(ids) - hf(ids).logits).abs().max() > 1e-2
    prompt = ids[:1, :9]
    out = generate(ours, prompt, 12, stop_ids=())
    expected = hf.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=12,
        min_new_tokens=12,
        do_sample=False,
        pad_token_id=0,
    )
    assert out.tolist() == expected.tolist()


def test_gemma3_27b_scales_its_scores_as_llama_cpp_does(tmp_path):
    """llama.cpp scales Gemma 3's scores by 1/√d, but the 27B's (62 layers) by 1/√(C/h), which is
    transformers' query_pre_attn_scalar (168 = 5376/32 for the 27B). Here d = 32 and C/h = 16:
    a file of 62 layers loads equal to transformers with query_pre_attn_scalar 16."""
    from mha_lib.llm.loader import load_gguf
    from tests.gguf_files import vocab_size, write_gguf
    from tests.hf_models import random_hf

    hf = random_hf(
        "gemma3",
        vocab_size=vocab_size("gemma3_text"),
        hidden_size=64,
        dtype=torch.float32,
        gemma3_head_dim=32,
        num_layers=62,
        query_pre_attn_scalar=16,
        weight_std=0.05,
    )
    path = tmp_path / "gemma3-62.gguf"
    write_gguf(path, hf, qtype="F32", embed_qtype="F32")
    ours, _ = load_gguf(path)
    assert ours.config.query_scale == 16**-0.5 and ours.config.head_dim == 32
    ids = ids_of((1, 11), ours.config.vocab_size, seed=33)
    with torch.no_grad():
        assert_close(ours(ids), hf(ids).logits, rtol=0, atol=1e-4)


def test_a_rope_scaling_not_read_here_is_refused_by_name(tmp_path, monkeypatch):
    """A file stretched another way (rope.scaling.type "longrope"), or a YaRN that llama.cpp
    adjusts beyond transformers' (yarn_ext_factor), is refused naming the key, before a weight
    is read; so are Llama 3 factors of the wrong length."""
    import gguf
    import numpy as np

    from mha_lib.llm import loader
    from tests.gguf_files import write_gguf

    reads = []
    monkeypatch.setattr(loader, "read_weight", lambda *a, **k: reads.append(a[1]))
    add_base = gguf.GGUFWriter.add_rope_freq_base

    def stretched(kind, **keys):
        def add(self, value):  # the converter writes these beside the base
            add_base(self, value)
            self.add_rope_scaling_type(kind)
            self.add_rope_scaling_factor(4.0)
            self.add_rope_scaling_orig_ctx_len(16)
            for key, v in keys.items():
                getattr(self, f"add_rope_scaling_{key}")(v)

        return add

    for kind, keys, message in (
        (gguf.RopeScalingType.LONGROPE, {}, r"qwen2.rope.scaling.type = 'longrope'"),
        (
            gguf.RopeScalingType.YARN,
            {"yarn_ext_factor": 0.5},
            r"qwen2.rope.scaling.yarn_ext_factor is set",
        ),
    ):
        monkeypatch.setattr(gguf.GGUFWriter, "add_rope_freq_base", stretched(kind, **keys))
        path = tmp_path / "qwen2-stretched.gguf"
        write_gguf(path, hf_of("qwen2"), qtype="Q8_0")
        with pytest.raises(ValueError, match=message):
            loader.load_gguf(path)
    monkeypatch.setattr(gguf.GGUFWriter, "add_rope_freq_base", add_base)
    path = tmp_path / "llama-bad-factors.gguf"
    write_gguf(path, hf_of("llama"), qtype="Q8_0", extra={"rope_freqs.weight": (np.ones(5), "F32")})
    with pytest.raises(ValueError, match=r"rope_freqs.weight has 5 factors; expected .* = 8"):
        loader.load_gguf(path)
    assert reads == []
