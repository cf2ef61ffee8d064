"""mha_lib.models.gemma3: read from a transformers config and from a GGUF file, equal to
transformers; Gemma 3 270M's configuration read from its own file (each number against what
transformers 5.23 reads from the same file, written here as measured: loading it takes 35-50 s,
so tests/llm/test_gemma3.py does it once), the defaults named."""

import pytest

from mha_lib.models import ARCHITECTURES
from tests.llm.test_kquants import GEMMA_INSTALLED
from tests.models.checks import check_gguf_reader, check_hf_reader, options_set


def test_read_from_transformers_equals_transformers():
    config = check_hf_reader("gemma3")
    described = set(ARCHITECTURES["gemma3"].options)
    assert options_set(config) == described - {"attn_logit_softcap", "final_logit_softcap"}


def test_read_from_a_gguf_file_as_from_transformers(tmp_path):
    config = check_gguf_reader("gemma3", tmp_path)
    assert config.layer_types.count("full_attention") == 1  # 7 layers: the sixth is global


@pytest.mark.skipif(not GEMMA_INSTALLED, reason="the gemma3 part packages are not installed")
def test_gemma3_270ms_configuration_from_its_file():
    from mha_lib.llm.gguf_file import GGUFFile
    from mha_lib.llm.model_files import find_model_file
    from mha_lib.models import config_from_gguf

    with GGUFFile(find_model_file("gemma3")) as f:
        cfg = config_from_gguf(f)
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (
        18,
        640,
        4,
        1,
        256,
    )
    assert cfg.vocab_size == 262_144 and cfg.intermediate_size == 2048
    assert cfg.context_length == 32_768 and cfg.sliding_window == 512
    assert cfg.rope_base == 1e6 and cfg.rope_local_base == 10_000.0  # the second: a default
    full = [l for l, kind in enumerate(cfg.layer_types) if kind == "full_attention"]
    assert full == [5, 11, 17]
    assert cfg.query_scale == 256**-0.5 == cfg.head_dim**-0.5
    assert cfg.embedding_scale == 640**0.5 and cfg.mlp_activation == "gelu_tanh"
    assert cfg.qk_norm and cfg.sandwich_norms and cfg.tie_embeddings
    assert not cfg.attention_bias and cfg.attn_logit_softcap is None
    assert cfg.final_logit_softcap is None and abs(cfg.rms_norm_eps - 1e-6) < 1e-12
    assert (cfg.bos_token_id, cfg.eos_token_id) == (2, 1)
    assert set(ARCHITECTURES["gemma3"].defaults) == {
        "sliding_window_pattern",
        "rope_local_base",
        "layers_of_27b",
    }
    assert cfg.rope_freq_factors is None  # 270M stretches nothing (4B to 27B do)
