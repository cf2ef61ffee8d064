"""mha_lib.models.deepseek_v32: DeepSeek-V3.2 (dense layers) read from a transformers config into
notebook 18's SparseMLAConfig (config_from_hf refuses it, naming that reader), every option it
sets described, its weights' table naming exactly our parameters and transformers' (MLA's and
the indexer's rows in place of the plain attention's), its GGUF files refused by name. The
logits against transformers are tests/sparse_attention/test_sparse_mla.py's."""

from dataclasses import fields

import pytest

from mha_lib.models import ARCHITECTURES, config_from_hf
from mha_lib.models.deepseek_v32 import ARCHITECTURE, OPTIONS
from tests.sparse_attention.sparse_inputs import hf_config, hf_model, needs_transformers


def test_the_file_is_found_by_its_name_and_reads_no_gguf():
    assert ARCHITECTURES["deepseek32"] is ARCHITECTURE
    assert ARCHITECTURE.gguf_options is None and ARCHITECTURE.config_class == "sparse_mla"
    assert not any(w.ours.startswith("self_attn.") for w in ARCHITECTURE.layer_weights)
    assert all(w.ours.startswith("self_attn.") for w in ARCHITECTURE.attention_weights)


@needs_transformers
def test_every_option_is_a_field_of_the_config_and_described():
    from mha_lib.sparse_attention import SparseMLAConfig

    names = {f.name for f in fields(SparseMLAConfig)}
    assert set(OPTIONS) <= names
    assert set(ARCHITECTURE.hf_options(hf_config())) == set(OPTIONS)
    with pytest.raises(ValueError, match=r"SparseMLAConfig\.from_hf"):
        config_from_hf(hf_config())


@needs_transformers
@pytest.mark.parametrize("tie", [False, True])
def test_the_weights_table_names_every_parameter_on_both_sides(tie):
    """Our names from the table are exactly our model's parameters; transformers' are exactly
    its state dict's (but a tied lm_head.weight, the embedding itself)."""
    from mha_lib.sparse_attention import DeepseekV32LM
    from mha_lib.sparse_attention.sparse_mla import SparseMLAConfig

    hf = hf_model(layers=2, tie=tie)
    config = SparseMLAConfig.from_hf(hf.config)
    ours, theirs = set(), set()
    for w in ARCHITECTURE.model_weights:
        if w.applies(config):
            ours.add(w.ours)
            theirs.add(w.hf)
    for l in range(2):
        for w in ARCHITECTURE.layer_weights + ARCHITECTURE.attention_weights:
            ours.add(f"layers.{l}.{w.ours}")
            theirs.add(f"model.layers.{l}.{w.hf}")
    assert ours == set(DeepseekV32LM(config).state_dict())
    assert theirs | ({"lm_head.weight"} if tie else set()) == set(hf.state_dict())


def test_its_gguf_files_are_refused_by_name(tmp_path, make_tiny_gguf):
    from mha_lib.llm.gguf_file import GGUFFile
    from mha_lib.models import config_from_gguf

    make_tiny_gguf(tmp_path / "d.gguf", arch="deepseek32")
    with (
        GGUFFile(tmp_path / "d.gguf") as f,
        pytest.raises(
            ValueError, match=r"holds a 'deepseek32' model \(its files are not read here\)"
        ),
    ):
        config_from_gguf(f)
