"""mha_lib.models.qwen3_5: Qwen3.5's hybrid read from a transformers config into notebook 16's
HybridConfig (config_from_hf refuses it, naming that reader), its weights' table (the linear
layers' gated DeltaNet, the gate inside transformers' q_proj) complete, its GGUF files refused
by name. The logits against transformers are tests/linear_attention/test_hybrid.py's."""

import pytest

from mha_lib.models import ARCHITECTURES, config_from_hf, hf_names
from tests.models.checks import check_weights_table


def small_qwen3_5_config():
    from transformers import Qwen3_5TextConfig

    return Qwen3_5TextConfig(
        vocab_size=61,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        layer_types=["linear_attention"] * 3 + ["full_attention"],
        rope_parameters={"rope_theta": 500.0, "rope_type": "default", "partial_rotary_factor": 0.5},
    )


def test_read_into_the_hybrid_config_with_every_option_described():
    from mha_lib.linear_attention import HybridConfig
    from tests.models.checks import options_set

    c = small_qwen3_5_config()
    config = HybridConfig.from_hf(c)
    arch = ARCHITECTURES["qwen35"]
    assert options_set(config) == set(arch.options)
    assert config.rope_dim == 4 and config.linear_num_value_heads == 4
    check_weights_table(arch, config)
    names = hf_names(config)
    assert names["layers.0.self_attn.A_log"] == "model.layers.0.linear_attn.A_log"
    assert "layers.3.self_attn.gate_proj.weight" not in names  # inside transformers' q_proj
    with pytest.raises(ValueError, match=r"HybridConfig\.from_hf"):
        config_from_hf(c)
    assert HybridConfig.from_hf(c.to_dict()) == config  # a config.json's fields alike


def test_its_gguf_files_are_refused_by_name(tmp_path, make_tiny_gguf):
    from mha_lib.llm.gguf_file import GGUFFile
    from mha_lib.models import config_from_gguf

    make_tiny_gguf(tmp_path / "q.gguf", arch="qwen35")
    with (
        GGUFFile(tmp_path / "q.gguf") as f,
        pytest.raises(ValueError, match=r"holds a 'qwen35' model \(its files are not read here\)"),
    ):
        config_from_gguf(f)
