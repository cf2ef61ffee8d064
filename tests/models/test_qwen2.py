"""mha_lib.models.qwen2: biases on q, k and v, read from a transformers config and from a GGUF
file, equal to transformers."""

from mha_lib.models import ARCHITECTURES, hf_names
from tests.models.checks import check_gguf_reader, check_hf_reader, options_set


def test_read_from_transformers_equals_transformers():
    config = check_hf_reader("qwen2")
    assert options_set(config) == {"attention_bias"}
    assert "layers.1.self_attn.v_proj.bias" in hf_names(config)
    assert "layers.1.self_attn.out_proj.bias" not in hf_names(config)  # none on W_O


def test_read_from_a_gguf_file_as_from_transformers(tmp_path):
    assert check_gguf_reader("qwen2", tmp_path).attention_bias
    assert ARCHITECTURES["qwen2"].options == {"attention_bias": "biases on q, k and v, none on W_O"}
