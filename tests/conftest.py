"""Fixtures shared by the tests (tests/nn, tests/llm, ...): the real model and its reference, loaded
once per test session, and tiny GGUF files written here. The imports are inside the fixtures, so
a session that uses none of them imports neither torch nor gguf for them.

- `smollm2`: our (model, tokenizer), from the packaged GGUF file (about 5 s);
- `reference_model`, `reference_tokenizer`: transformers' LlamaForCausalLM and tokenizer read
  from the same file (`from_pretrained(dir, gguf_file=name)`: about 15 s and 50 s on 2 cores);
  every comparison with them shares these two;
- `reference_run(ids)`: the reference model's output with eager attention, its attention
  weights and residual streams included (notebook 13's comparisons);
- `write_tiny_gguf(path, ...)`: a small Llama GGUF file of odd sizes, written with gguf's own
  writer the way llama.cpp's converter writes one (W_Q and W_K rows permuted to adjacent pairs,
  matrices in Q4_1, the embedding in Q8_0, norms in F32), from a random transformers model; the
  loaders are tested on it against transformers reading the same file, in well under a second;
  `tests/gguf_files.py` writes files of the other architectures, with a vocabulary (Gemma 3
  270M's real file and its reference are module fixtures of tests/llm/test_gemma3.py: they are
  big, and only that module needs them).
"""

from __future__ import annotations

import logging
import warnings
from types import SimpleNamespace

import pytest

TINY = {
    "vocab_size": 100,
    "hidden_size": 64,  # C, a multiple of 32 (the blocks)
    "intermediate_size": 96,  # F
    "num_hidden_layers": 2,
    "num_attention_heads": 4,  # h, d = 16
    "num_key_value_heads": 2,  # h_kv
    "max_position_embeddings": 64,
    "rope_theta": 500.0,
    "rms_norm_eps": 1e-5,
}


def _quiet_transformers():
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    logging.getLogger("transformers").setLevel(logging.ERROR)


def tiny_hf_model(seed: int = 0):
    """A random transformers LlamaForCausalLM of the TINY sizes (tied embedding)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    _quiet_transformers()
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**TINY, tie_word_embeddings=True)).eval()


def write_tiny_gguf(path, hf=None, *, qtype="Q4_1", arch="llama", skip=(), extra=None):
    """Write hf's weights (a tiny_hf_model by default) as a llama.cpp GGUF file at path.

    qtype: the format of the attention and MLP matrices; skip: tensor names left out;
    extra: {name: (array, qtype)} added. Returns the transformers model written.
    """
    import gguf
    import numpy as np
    import torch
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import quantize

    from mha_lib.llm.loader import gguf_names, hf_names
    from mha_lib.positions import rope_permutation

    hf = tiny_hf_model() if hf is None else hf
    cfg = hf.config
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(TINY["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_vocab_size(cfg.vocab_size)
    sd = hf.state_dict()

    def put(name, t, kind, force=False):
        if name in skip and not force:
            return
        a = t.detach().numpy()
        if kind == "RAW":  # bytes as given, said to be IQ4_NL (a format the series does not read)
            w.add_tensor(name, a.astype(np.uint8), raw_dtype=Q.IQ4_NL)
            return
        a = a.astype(np.float32)
        if kind == "F32":
            w.add_tensor(name, a)
        else:
            w.add_tensor(name, quantize(a, Q[kind]), raw_dtype=Q[kind])

    def permute(t, heads):  # llama.cpp's converter: half-split rows -> adjacent pairs
        d = t.shape[0] // heads
        return t.view(heads, d, -1)[:, rope_permutation(d)].reshape(t.shape)

    # our parameter names link llama.cpp's (gguf_names) and transformers' (hf_names)
    layout = SimpleNamespace(num_layers=cfg.num_hidden_layers, tie_embeddings=True, qk_norm=False,
                             sandwich_norms=False, attention_bias=False)  # fmt: skip
    to_hf = hf_names(layout)
    g = torch.Generator().manual_seed(1)
    norms = {"output_norm.weight": torch.rand(cfg.hidden_size, generator=g) + 0.5}
    for l in range(cfg.num_hidden_layers):
        for name in (f"blk.{l}.attn_norm.weight", f"blk.{l}.ffn_norm.weight"):
            norms[name] = torch.rand(cfg.hidden_size, generator=g) + 0.5
    heads = {"attn_q": cfg.num_attention_heads, "attn_k": cfg.num_key_value_heads}
    for theirs, ours in gguf_names(layout).items():
        part = theirs.split(".")[-2]  # attn_q, ffn_norm, token_embd, ...
        if theirs in norms:
            put(theirs, norms[theirs], "F32")
        elif theirs == "token_embd.weight":
            put(theirs, sd[to_hf[ours]], "Q8_0")
        elif part in heads:
            put(theirs, permute(sd[to_hf[ours]], heads[part]), qtype)
        else:
            put(theirs, sd[to_hf[ours]], qtype)
    for name, (array, kind) in (extra or {}).items():  # after the skipped ones: replacements
        put(name, torch.as_tensor(array), kind, force=True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return hf


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory):
    """(path, transformers model read from it): the tiny file and its reference."""
    import torch
    from transformers import AutoModelForCausalLM

    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(path)
    _quiet_transformers()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch.float32
        ).eval()
    return path, ref


@pytest.fixture(scope="session")
def smollm2():
    from mha_lib.llm import load_smollm2

    return load_smollm2()


@pytest.fixture(scope="session")
def reference_model():
    import torch
    from transformers import AutoModelForCausalLM

    from mha_lib.llm.gguf_file import find_model_file

    _quiet_transformers()
    path = find_model_file()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch.float32
        )
    return model.eval()


@pytest.fixture(scope="session")
def reference_tokenizer():
    from transformers import AutoTokenizer

    from mha_lib.llm.gguf_file import find_model_file

    _quiet_transformers()
    path = find_model_file()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


@pytest.fixture
def make_tiny_gguf():
    """write_tiny_gguf, for tests that write a variant of the tiny file."""
    return write_tiny_gguf


@pytest.fixture
def make_tiny_hf():
    """tiny_hf_model, for tests that need a random transformers model of the tiny sizes."""
    return tiny_hf_model


@pytest.fixture(scope="session")
def reference_run(reference_model):
    """ids -> transformers' output on them with eager attention: logits, every layer's attention
    weights (`attentions`, L x (B, h, N, N)) and residual streams (`hidden_states`, L + 1 x
    (B, N, C)). The shared reference model's attention implementation is put back afterwards."""

    import torch

    def run(ids, **kwargs):
        old = reference_model.config._attn_implementation
        reference_model.set_attn_implementation("eager")
        try:
            with torch.no_grad():
                return reference_model(
                    ids, output_attentions=True, output_hidden_states=True, **kwargs
                )
        finally:
            reference_model.set_attn_implementation(old)

    return run
