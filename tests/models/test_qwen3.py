"""mha_lib.models.qwen3: QK-norm and heads of d != C / h, read from a transformers config and from
a GGUF file (d from `qwen3.attention.key_length`), equal to transformers."""

from tests.models.checks import check_gguf_reader, check_hf_reader, options_set


def test_read_from_transformers_equals_transformers():
    config = check_hf_reader("qwen3", qwen3_head_dim=24)
    assert options_set(config) == {"qk_norm"}
    assert config.head_dim == 24 != config.hidden_size // config.num_heads


def test_read_from_a_gguf_file_as_from_transformers(tmp_path):
    config = check_gguf_reader("qwen3", tmp_path, qwen3_head_dim=40)
    assert config.head_dim == 40 and config.qk_norm
