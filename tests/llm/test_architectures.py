"""mha_lib.llm.architectures: Gemma 3 270M's configuration read from its file (each number
against what transformers 5.23 reads from the same file, written here as measured: loading it
takes 35-50 s, so tests/llm/test_gemma3.py does it once), the defaults named, the differences
from notebook 12's Llama, and an unknown architecture refused by name."""

from dataclasses import replace

import pytest

from mha_lib.llm.architectures import ARCHITECTURES, config_from_gguf, differences
from mha_lib.llm.gguf_file import GGUFFile
from mha_lib.llm.model_files import find_model_file
from tests.llm.test_kquants import GEMMA_INSTALLED


@pytest.mark.skipif(not GEMMA_INSTALLED, reason="the gemma3 part packages are not installed")
def test_gemma3_270ms_configuration_from_its_file():
    with GGUFFile(find_model_file("gemma3")) as f:
        cfg = config_from_gguf(f)
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (
        18, 640, 4, 1, 256)  # fmt: skip
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
    lines = differences(cfg)
    assert len(lines) == 8 and lines[0].startswith("15 of 18 layers attend within a sliding")
    assert set(ARCHITECTURES["gemma3"].defaults) == {
        "sliding_window_pattern", "rope_local_base", "layers_of_27b"}  # fmt: skip
    assert cfg.rope_freq_factors is None  # 270M stretches nothing (4B to 27B do)


def test_a_llama_has_no_differences_and_others_are_named(tmp_path, make_tiny_gguf):
    from mha_lib.nn.decoder import DecoderConfig

    make_tiny_gguf(tmp_path / "t.gguf")
    with GGUFFile(tmp_path / "t.gguf") as f:
        cfg = config_from_gguf(f)
        assert cfg == DecoderConfig.from_gguf(f)  # notebook 12's reader, the same numbers
    assert differences(cfg) == []
    pairs = cfg.head_dim // 2
    llama3 = replace(cfg, rope_freq_factors=(1.0,) * (pairs - 1) + (8.0,))
    assert differences(llama3) == [
        "RoPE's frequencies divided by factors from 1 to 8 in the global layers (a longer context)"
    ]
    linear = differences(replace(cfg, rope_freq_factors=(8.0,) * pairs))
    assert linear == ["RoPE's frequencies divided by 8 in the global layers (a longer context)"]
    make_tiny_gguf(tmp_path / "x.gguf", arch="falcon")
    with (
        GGUFFile(tmp_path / "x.gguf") as f,
        pytest.raises(
            ValueError, match=r"holds a 'falcon' model; load_gguf reads 'llama' \(Llama 2"
        ),
    ):
        config_from_gguf(f)


def test_qwen3_5s_options_and_every_other_are_named():
    """Qwen3.5-27B's hybrid stack: its 48 linear layers, partial RoPE and output gate each get a
    line; so do sink logits, and every option of the config set alone on a Llama gets one."""
    from mha_lib.linear_attention import QWEN3_5_27B
    from mha_lib.nn.decoder import DecoderConfig

    lines = differences(QWEN3_5_27B)
    assert lines[0] == (
        "48 of 64 layers mix tokens through a gated-DeltaNet state (linear attention), the "
        "others through softmax attention"
    )
    assert "partial RoPE: only the first 64 of each head's 256 numbers turn" in lines
    assert "each head's output gated by sigmoid(x W_G) before W_O" in lines
    assert "QK-norm: an RMSNorm over each head's queries and keys before RoPE" in lines
    assert len(lines) == 6  # and d = 256 not C/h, and an output matrix of its own
    llama = DecoderConfig.of_layer(hidden_size=64, num_heads=4, num_kv_heads=2)
    assert differences(llama) == []
    options = {  # field: a value that is not Llama's
        "qk_norm": True, "rope_dim": 8, "attention_bias": True, "query_scale": 0.1,
        "sandwich_norms": True, "embedding_scale": 8.0, "mlp_activation": "gelu_tanh",
        "attn_logit_softcap": 30.0, "final_logit_softcap": 20.0, "attention_sinks": True,
        "attn_output_gate": True, "tie_embeddings": False, "rope_freq_factors": (2.0,) * 8,
        "num_kv_heads": 1, "head_dim": 8,
        "layer_types": ("sliding_attention",), "rope_local_base": 100.0,
    }  # fmt: skip
    for name, value in options.items():
        extra = {"sliding_window": 4} if name in ("layer_types", "rope_local_base") else {}
        if name == "rope_local_base":
            extra["layer_types"] = ("sliding_attention",)
        lines = differences(replace(llama, **{name: value}, **extra))
        assert len(lines) == 1 + (name == "rope_local_base"), (name, lines)
    sinks = differences(replace(llama, attention_sinks=True))
    assert sinks == ["a learned sink logit per head in every softmax (attention may go nowhere)"]
