"""mha_lib.models.read: the architecture files found by name (one file is one architecture),
the readers refusing what they do not read by name and before reading, the weights' tables
consistent across files (one split and one name per weight of ours), the names' maps and state
dicts, and RoPE scalings read from both sources."""

from dataclasses import replace

import pytest

from mha_lib import models
from mha_lib.models import ARCHITECTURES, gguf_names, hf_names, layer_weights, splits
from mha_lib.models.spec import SPLITS
from mha_lib.nn.decoder import DecoderConfig


def test_every_file_of_the_package_is_one_architecture():
    from pathlib import Path

    files = {p.stem for p in Path(models.__file__).parent.glob("*.py")}
    files -= {"__init__", "read", "spec"}
    assert len(ARCHITECTURES) == len(files) == 8
    for stem in files:
        module = __import__(f"mha_lib.models.{stem}", fromlist=["ARCHITECTURE"])
        arch = module.ARCHITECTURE
        assert ARCHITECTURES[arch.name] is arch
        assert module.__doc__ and "notebook" in module.__doc__, stem
        names = {f.name for f in __import__("dataclasses").fields(DecoderConfig)}
        from mha_lib.linear_attention import HybridConfig

        names |= {f.name for f in __import__("dataclasses").fields(HybridConfig)}
        from mha_lib.speech.model import WhisperConfig

        names |= {f.name for f in __import__("dataclasses").fields(WhisperConfig)}
        from mha_lib.sparse_attention import SparseMLAConfig

        names |= {f.name for f in __import__("dataclasses").fields(SparseMLAConfig)}
        assert set(arch.options) <= names, stem  # each option is a field of the config
        assert all(isinstance(v, str) and v for v in arch.options.values())


def test_the_tables_agree_across_files():
    """A weight of ours has one split and one llama.cpp name in every file; a row every model has
    (no `when`) is the plain Llama's; every split is one of SPLITS."""
    plain = set(ARCHITECTURES["llama"].layer_weights)
    seen = {}
    for arch in ARCHITECTURES.values():
        assert all(w.split in SPLITS for w in arch.linear_weights)
        for w in arch.layer_weights + arch.model_weights:  # a linear layer's mixer apart
            assert w.split in SPLITS
            assert w.when is not None or w in plain or w in ARCHITECTURES["llama"].model_weights
            before = seen.setdefault(w.ours, w)
            assert (before.split, before.gguf) == (w.split, w.gguf), (arch.name, w, before)


def test_a_config_no_file_describes_still_has_every_name():
    llama = DecoderConfig.of_layer(hidden_size=16, num_heads=2)
    sinks = replace(llama, attention_sinks=True, attn_output_gate=True, qk_norm=True)
    names = [w.ours for w in layer_weights(sinks)]
    assert {
        "self_attn.sink_logits",
        "self_attn.gate_proj.weight",
        "self_attn.q_norm.weight",
    } <= set(names)
    assert splits(sinks)["layers.0.self_attn.sink_logits"] == "head_logits"
    assert hf_names(sinks)["layers.0.self_attn.sink_logits"] == "model.layers.0.self_attn.sinks"
    with pytest.raises(ValueError, match=r"attention_sinks: a GGUF file stores no"):
        gguf_names(replace(llama, attention_sinks=True))
    names = gguf_names(llama)
    assert len(set(names.values())) == len(names) == 2 + 9  # tied: no output.weight
    assert len(gguf_names(replace(llama, tie_embeddings=False))) == 12


def test_state_dicts_go_to_transformers_and_back():
    import torch

    from mha_lib.nn.decoder import DecoderLM

    config = replace(DecoderConfig.of_layer(hidden_size=16, num_heads=2), sandwich_norms=True)
    ours = {k: v for k, v in DecoderLM(config).state_dict().items()}
    theirs = models.state_to_hf(config, ours, zero_centred=True)
    assert theirs["model.layers.0.pre_feedforward_layernorm.weight"].abs().max() == 0  # 1 - 1
    back = models.state_from_hf(config, theirs, zero_centred=True)
    assert back.keys() == ours.keys() and all(torch.equal(back[k], ours[k]) for k in ours)
    theirs.pop("model.layers.0.mlp.up_proj.weight")
    with pytest.raises(ValueError, match=r"model\.layers\.0\.mlp\.up_proj\.weight is missing"):
        models.state_from_hf(config, theirs)


def test_what_is_not_read_is_refused_by_name_before_reading(tmp_path, make_tiny_gguf):
    from types import SimpleNamespace

    from mha_lib.llm.gguf_file import GGUFFile

    make_tiny_gguf(tmp_path / "x.gguf", arch="falcon")
    with (
        GGUFFile(tmp_path / "x.gguf") as f,
        pytest.raises(
            ValueError,
            match=r"holds a 'falcon' model \(no file here describes it\); load_gguf "
            r"reads 'gemma2' \(Gemma 2\), 'gemma3' \(Gemma 3\), 'llama' \(Llama 2",
        ),
    ):
        models.config_from_gguf(f)
    with pytest.raises(ValueError, match=r"model_type = 'mistral' is not read here"):
        models.config_from_hf(SimpleNamespace(model_type="mistral"))
    with pytest.raises(ValueError, match=r"architecture 'falcon' is not described here"):
        models.architecture("falcon")


def test_a_tiny_llama_file_reads_to_notebook_12s_numbers(tmp_path, make_tiny_gguf):
    from mha_lib.llm.gguf_file import GGUFFile

    hf = make_tiny_gguf(tmp_path / "t.gguf")
    with GGUFFile(tmp_path / "t.gguf") as f:
        config = models.config_from_gguf(f)
    c = hf.config
    sizes = (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads)
    assert (config.num_layers, config.hidden_size, config.num_heads, config.num_kv_heads) == sizes
    assert config.rope_freq_factors is None and config.layer_types is None
