"""Random transformers models of tiny odd sizes and our copies of them, shared by the tests of
mha_lib.nn.decoder and mha_lib.llm.loader (imported by them, not a test).

- `random_hf(kind, ...)`: a random transformers causal LM, "llama", "qwen2" (biases on q, k,
  v), "qwen3" (QK-norm, head_dim not C/h), "gemma2" (soft-capping, query_pre_attn_scalar not d,
  1:1 sliding windows) or "gemma3" (5 sliding layers to 1 global, one key/value head, two RoPE
  bases, QK-norm), with eager attention and weights large enough that soft caps and windows
  change the logits;
- `config_from_hf(config)`: our `DecoderConfig` of its configuration (`mha_lib.models`'s reader);
- `decoder_from_hf(hf)`: our `DecoderLM` with a copy of its weights, Gemma's norms, which
  transformers applies as (1 + w), stored as the weight 1 + w (as a GGUF file stores them);
- `hf_model_from_gguf(path)`, `hf_tokenizer_from_gguf(path)`: transformers' model (float32) and
  tokenizer read from a GGUF file, the references of every loader test.
"""

from __future__ import annotations

import logging
import warnings

import torch

from mha_lib import models
from mha_lib.nn.decoder import DecoderConfig, DecoderLM

KINDS = ("llama", "qwen2", "qwen3", "gemma2", "gemma3")


def quiet_transformers():
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    logging.getLogger("transformers").setLevel(logging.ERROR)


def hf_model_from_gguf(path):
    """transformers' causal LM read from the GGUF file at path, in float32, in eval mode."""
    from transformers import AutoModelForCausalLM

    quiet_transformers()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch.float32
        ).eval()


def hf_tokenizer_from_gguf(path):
    """transformers' tokenizer read from the GGUF file at path."""
    from transformers import AutoTokenizer

    quiet_transformers()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def random_hf(
    kind: str,
    seed: int = 0,
    *,
    vocab_size: int = 101,
    hidden_size: int = 48,
    dtype=torch.float64,
    weight_std: float = 0.15,
    qwen3_head_dim: int = 24,
    gemma3_head_dim: int = 16,
    rope_parameters: dict | None = None,
    num_layers: int | None = None,
    query_pre_attn_scalar: int | None = None,
):
    """A random transformers causal LM of `kind` (see the module docstring): C = hidden_size,
    F = 1.5 C, 4 query heads of 16 (qwen3: qwen3_head_dim; gemma3: gemma3_head_dim, with
    query_pre_attn_scalar = d, as every Gemma 3 but the 27B), tied embedding, context 64; norm
    weights drawn around their neutral value, biases in [-0.5, 0.5], other weights
    N(0, weight_std²). rope_parameters: transformers' RoPE configuration instead of the kind's
    (a scaling: Llama 3's, a linear one, YaRN). num_layers, query_pre_attn_scalar: Gemma 2's and
    Gemma 3's, instead of 4 and 20 (Gemma 2), 7 and d (Gemma 3)."""
    import transformers as tf

    if kind not in KINDS:
        raise ValueError(f"kind = {kind!r}; expected one of {KINDS}")
    quiet_transformers()
    torch.manual_seed(seed)
    common = dict(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 3 // 2,
        max_position_embeddings=64,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        num_attention_heads=4,
    )
    rope = {} if rope_parameters is None else {"rope_parameters": rope_parameters}
    if kind == "llama":
        rope = rope or {"rope_theta": 500.0}
        cfg = tf.LlamaConfig(
            **common, num_hidden_layers=2, num_key_value_heads=2, head_dim=16, **rope
        )
    elif kind == "qwen2":
        rope = rope or {"rope_theta": 3000.0}
        cfg = tf.Qwen2Config(**common, num_hidden_layers=2, num_key_value_heads=2, **rope)
    elif kind == "qwen3":
        rope = rope or {"rope_theta": 5000.0}
        cfg = tf.Qwen3Config(
            **common, num_hidden_layers=2, num_key_value_heads=2, head_dim=qwen3_head_dim, **rope
        )
    elif kind == "gemma2":
        cfg = tf.Gemma2Config(
            **common,
            num_hidden_layers=num_layers or 4,
            num_key_value_heads=2,
            head_dim=16,
            sliding_window=5,
            query_pre_attn_scalar=query_pre_attn_scalar or 20,
            attn_logit_softcapping=3.0,
            final_logit_softcapping=5.0,
        )
    else:  # gemma3: the scores scaled by 1/√d, as llama.cpp scales them (all but the 27B)
        cfg = tf.Gemma3TextConfig(
            **common,
            num_hidden_layers=num_layers or 7,
            num_key_value_heads=1,
            head_dim=gemma3_head_dim,
            sliding_window=5,
            query_pre_attn_scalar=query_pre_attn_scalar or gemma3_head_dim,
            **rope,
        )
    cfg._attn_implementation = "eager"
    cls = {
        "llama": tf.LlamaForCausalLM,
        "qwen2": tf.Qwen2ForCausalLM,
        "qwen3": tf.Qwen3ForCausalLM,
        "gemma2": tf.Gemma2ForCausalLM,
        "gemma3": tf.Gemma3ForCausalLM,
    }[kind]
    hf = cls(cfg).to(dtype).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name:  # Llama's w around 1; Gemma's (1 + w) around 1 too
                p.uniform_(-0.5, 0.5) if kind.startswith("gemma") else p.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                p.uniform_(-0.5, 0.5)
            else:  # weights large enough that scores and logits reach the soft caps
                p.normal_(0.0, weight_std)
    return hf


def config_from_hf(c) -> DecoderConfig:
    """Our DecoderConfig of a transformers Llama, Qwen2, Qwen3, Gemma 2 or Gemma 3 config: the
    library's reader (`mha_lib.models.config_from_hf`), named here for the tests."""
    return models.config_from_hf(c)


def rope_freq_factors_from_hf(c) -> tuple[float, ...] | None:
    """The global layers' RoPE factors of a transformers config, from transformers' own
    frequencies: RoPE's base^(-2i/d) divided by the scaled ones (None: no scaling)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rope = c.rope_parameters
    rope = rope["full_attention"] if "full_attention" in rope else rope
    if rope.get("rope_type", "default") == "default":
        return None
    layer_type = "full_attention" if "full_attention" in c.rope_parameters else None
    scaled, _ = ROPE_INIT_FUNCTIONS[rope["rope_type"]](c, "cpu", layer_type=layer_type)
    d = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    plain = rope["rope_theta"] ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    return tuple((plain / scaled.double()).tolist())


def decoder_from_hf(hf, dtype=torch.float64) -> DecoderLM:
    """Our DecoderLM with a copy of hf's weights (see the module docstring)."""
    arch, fields = models.config_fields_from_hf(hf.config)
    cfg = DecoderConfig(**fields)
    ours = DecoderLM(cfg).to(dtype).eval()
    sd = hf.state_dict()
    plus_one = arch.hf_norms_zero_centred  # transformers' w, applied as 1 + w: ours is 1 + w
    ours.load_state_dict(
        {
            k: sd[v] + 1 if plus_one and "norm" in k else sd[v]
            for k, v in models.hf_names(cfg).items()
        }
    )
    return ours


# transformers' RoPE scalings the small models below carry: Llama 3's, and Gemma 3 4B to 27B's
# linear one on the global layers
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}
GEMMA3_LINEAR_ROPE = {
    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
}


SMALL_CONFIGS = (
    *KINDS,
    "llama3_rope",
    "gemma3_linear_rope",
    "attention_sinks",
    "attn_output_gate",
    "rope_dim",
)  # the names small_configs gives


def small_configs(vocab_size: int = 96) -> dict[str, DecoderConfig]:
    """name: a DecoderConfig of a small model for the consumers' tests (tests/test_consumers.py,
    tests/distributed): each architecture of `random_hf` (its `config_from_hf`), vocab_size
    rows (96: divisible by 1 to 4 ranks), and one config per option no architecture there has:
    Llama 3's RoPE frequency factors, Gemma 3's linear ones on its global layers, gpt-oss's sink
    logits, Qwen3.5's output gate and its partial RoPE (on the Llama)."""
    from dataclasses import replace

    cfgs = {kind: config_from_hf(random_hf(kind, vocab_size=vocab_size).config) for kind in KINDS}
    cfgs["llama3_rope"] = config_from_hf(
        random_hf("llama", vocab_size=vocab_size, rope_parameters=LLAMA3_ROPE).config
    )
    cfgs["gemma3_linear_rope"] = config_from_hf(
        random_hf("gemma3", vocab_size=vocab_size, rope_parameters=GEMMA3_LINEAR_ROPE).config
    )
    llama = cfgs["llama"]
    cfgs["attention_sinks"] = replace(llama, attention_sinks=True)
    cfgs["attn_output_gate"] = replace(llama, attn_output_gate=True)
    cfgs["rope_dim"] = replace(llama, rope_dim=llama.head_dim // 4)
    assert tuple(cfgs) == SMALL_CONFIGS
    return cfgs
