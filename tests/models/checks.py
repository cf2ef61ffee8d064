"""What every architecture file's test checks (imported by tests/models/test_<architecture>.py,
not a test): its transformers reader on a random model of its kind, its GGUF reader on a file
written from that model, its options described, its weights' table complete.

- `check_hf_reader(kind)`: our decoder, read and copied through the architecture's file, equals
  transformers' logits on a random model of tiny odd sizes; every option the config sets is one
  the file describes;
- `check_gguf_reader(kind, tmp_path)`: a GGUF file written from that model (with `GGUFWriter`)
  reads to the same configuration as the transformers config, but for the numbers a GGUF file
  does not store;
- `check_weights_table(arch, config)`: a model of `config` has exactly the weights of its file.
"""

from __future__ import annotations

from dataclasses import fields

import torch

from mha_lib import models
from mha_lib.nn.decoder import DecoderConfig
from mha_lib.testing import assert_close
from tests.hf_models import decoder_from_hf, random_hf

SIZES = (
    "vocab_size",
    "hidden_size",
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "rope_base",
    "rms_norm_eps",
    "context_length",
)
# transformers computes its RMSNorms in float32 (x.float()) even in a float64 model: the logits
# (of order 10) agree at float32's precision
ATOL = 1e-4
NOT_OPTIONS = {*SIZES, "bos_token_id", "eos_token_id", "tie_embeddings", "rope_freq_factors"}


def options_set(config: DecoderConfig) -> set[str]:
    """The fields of `config` (other than its sizes) that differ from a plain Llama's."""
    plain = DecoderConfig(**{name: getattr(config, name) for name in SIZES})
    return {
        f.name
        for f in fields(DecoderConfig)
        if f.name not in NOT_OPTIONS and getattr(config, f.name) != getattr(plain, f.name)
    }


def check_weights_table(arch: models.Architecture, config) -> None:
    """A model of `config` has exactly its file's weights, each with the file's three names."""
    own = set(arch.layer_weights)
    for l in range(config.num_layers):
        rows = set(models.layer_weights(config, l))
        if config.layer_type(l) == "linear_attention":
            assert rows == {w for w in own if not w.ours.startswith("self_attn.")} | set(
                arch.linear_weights
            )
        else:
            assert rows == own, (l, rows ^ own)
    assert set(models.model_weights(config)) <= set(arch.model_weights)


def check_hf_reader(kind: str, **kwargs) -> DecoderConfig:
    """Read a random transformers model of `kind` (`tests.hf_models.random_hf`) through its
    architecture's file: the logits equal transformers', its options are described, its weights
    tabled. Returns the config."""
    hf = random_hf(kind, **kwargs)
    arch, fields_ = models.config_fields_from_hf(hf.config)
    assert kind.startswith(arch.name) or hf.config.model_type in arch.hf_model_types
    config = DecoderConfig(**fields_)
    unexplained = options_set(config) - set(arch.options)
    assert not unexplained, f"{arch.name} sets {unexplained} without describing them"
    check_weights_table(arch, config)
    ours = decoder_from_hf(hf)
    ids = torch.randint(0, config.vocab_size, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(ids).logits
        assert_close(ours(ids), expected, rtol=0, atol=ATOL, msg=kind)
    return config


def check_gguf_reader(kind: str, tmp_path, **kwargs) -> DecoderConfig:
    """A GGUF file written from a random transformers model of `kind` reads to the config the
    transformers reader gives, but for the tokenizer's ids (the file's) and the norms' epsilon
    (a float32 in the file)."""
    from dataclasses import replace

    from mha_lib.llm.gguf_file import GGUFFile
    from tests.gguf_files import ARCH, vocab_size, write_gguf

    model_type = {"gemma3": "gemma3_text"}.get(kind, kind)
    size = vocab_size(model_type)  # the file's tokenizer's; C = 64: quantized blocks of 32
    hf = random_hf(kind, dtype=torch.float32, vocab_size=size, hidden_size=64, **kwargs)
    assert ARCH[model_type] == kind
    path = tmp_path / f"{kind}.gguf"
    write_gguf(path, hf, qtype="F32", embed_qtype="F32")
    with GGUFFile(path) as f:
        config = models.config_from_gguf(f)
    expected = models.config_from_hf(hf.config)
    eps = torch.tensor(expected.rms_norm_eps, dtype=torch.float32).item()  # a float32 in the file
    expected = replace(
        expected,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        rms_norm_eps=eps,
    )
    assert config == expected, {
        f.name: (getattr(config, f.name), getattr(expected, f.name))
        for f in fields(DecoderConfig)
        if getattr(config, f.name) != getattr(expected, f.name)
    }
    return config
