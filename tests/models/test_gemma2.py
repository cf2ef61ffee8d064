"""mha_lib.models.gemma2: soft caps, a query scale not 1/√d, one sliding layer to each global one,
read from a transformers config equal to transformers; its GGUF files refused by name."""

import pytest

from mha_lib.models import ARCHITECTURES
from tests.models.checks import check_hf_reader, options_set


def test_read_from_transformers_equals_transformers():
    config = check_hf_reader("gemma2")
    assert options_set(config) == set(ARCHITECTURES["gemma2"].options)  # every one it names
    assert config.layer_types[:2] == ("sliding_attention", "full_attention")
    assert config.query_scale == 20**-0.5  # query_pre_attn_scalar, not d = 16


def test_its_gguf_files_are_refused_by_name(tmp_path, make_tiny_gguf):
    from mha_lib.llm.gguf_file import GGUFFile
    from mha_lib.models import config_from_gguf

    make_tiny_gguf(tmp_path / "g.gguf", arch="gemma2")
    with (
        GGUFFile(tmp_path / "g.gguf") as f,
        pytest.raises(ValueError, match=r"holds a 'gemma2' model \(its files are not read here\)"),
    ):
        config_from_gguf(f)
