"""mha_lib.llm.architectures: the differences from notebook 12's Llama, one line per option, of
Gemma 3 270M's configuration, of a tiny Llama file's (none), of Qwen3.5-27B's and of every option
set alone. (The configurations are read by mha_lib.models, tested in tests/models/.)"""

from dataclasses import replace

import pytest

from mha_lib.llm.architectures import differences
from mha_lib.llm.gguf_file import GGUFFile
from mha_lib.llm.model_files import find_model_file
from mha_lib.models import config_from_gguf
from tests.llm.test_kquants import GEMMA_INSTALLED


@pytest.mark.skipif(not GEMMA_INSTALLED, reason="the gemma3 part packages are not installed")
def test_gemma3_270ms_differences():
    with GGUFFile(find_model_file("gemma3")) as f:
        lines = differences(config_from_gguf(f))
    assert len(lines) == 8 and lines[0].startswith("15 of 18 layers attend within a sliding")


def test_a_llama_has_no_differences_and_others_are_named(tmp_path, make_tiny_gguf):
    make_tiny_gguf(tmp_path / "t.gguf")
    with GGUFFile(tmp_path / "t.gguf") as f:
        cfg = config_from_gguf(f)
    assert differences(cfg) == []
    pairs = cfg.head_dim // 2
    llama3 = replace(cfg, rope_freq_factors=(1.0,) * (pairs - 1) + (8.0,))
    assert differences(llama3) == [
        "RoPE's frequencies divided by factors from 1 to 8 in the global layers (a longer context)"
    ]
    linear = differences(replace(cfg, rope_freq_factors=(8.0,) * pairs))
    assert linear == ["RoPE's frequencies divided by 8 in the global layers (a longer context)"]


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
        "qk_norm": True,
        "rope_dim": 8,
        "attention_bias": True,
        "query_scale": 0.1,
        "sandwich_norms": True,
        "embedding_scale": 8.0,
        "mlp_activation": "gelu_tanh",
        "attn_logit_softcap": 30.0,
        "final_logit_softcap": 20.0,
        "attention_sinks": True,
        "attn_output_gate": True,
        "tie_embeddings": False,
        "rope_freq_factors": (2.0,) * 8,
        "num_kv_heads": 1,
        "head_dim": 8,
        "layer_types": ("sliding_attention",),
        "rope_local_base": 100.0,
    }
    for name, value in options.items():
        extra = {"sliding_window": 4} if name in ("layer_types", "rope_local_base") else {}
        if name == "rope_local_base":
            extra["layer_types"] = ("sliding_attention",)
        lines = differences(replace(llama, **{name: value}, **extra))
        assert len(lines) == 1 + (name == "rope_local_base"), (name, lines)
    sinks = differences(replace(llama, attention_sinks=True))
    assert sinks == ["a learned sink logit per head in every softmax (attention may go nowhere)"]
