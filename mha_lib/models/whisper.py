"""Whisper (OpenAI's speech recogniser, tiny to large): an encoder-decoder, the Transformer of 03
and 04 with all three uses of attention, read from a transformers config or a CTranslate2 file.

Derived in notebook 17. Not the decoder of `mha_lib.nn.decoder` but notebook 04's two stacks,
built by `mha_lib.speech` (`config_class="whisper"`, `WhisperConfig`):
- the encoder: two convolutions over the log-mel spectrogram (the second of stride 2: 3,000
  frames of 10 ms become 1,500 of 20 ms), GELU after each, fixed sinusoidal positions, then
  pre-norm blocks of bidirectional self-attention and a GELU MLP, and a final LayerNorm;
- the decoder: a token embedding plus learned positions, pre-norm blocks of causal
  self-attention, cross-attention (queries from the text, keys and values from the encoder's
  output) and a GELU MLP, a final LayerNorm, the logits scored against the embedding (tied);
- every norm a LayerNorm with a bias (eps 1e-5), every projection biased but W_K's (transformers
  has no k_proj bias; CTranslate2 fuses [W_Q; W_K; W_V] and stores zeros for the K part).
No GGUF (`gguf_options=None`). The weights' rows give our name and transformers' (llama.cpp's is
None: no GGUF file); each is under `encoder.layers.{l}.` / `model.encoder.layers.{l}.`,
`decoder.layers.{l}.` / `model.decoder.layers.{l}.`, or is the model's own
(`Architecture.encoder_decoder_weights`, by "model", "encoder layer", "decoder layer").
CTranslate2's names (`CTRANSLATE2`) are a fourth column of this file alone: its fused
projections are split (rows of [W_Q; W_K; W_V], or of [W_K; W_V] in the cross-attention).
Its `config.json` adds what transformers keeps in a generation config: the alignment heads
(layer, head) whose cross-attention times each token, the tokens suppressed at every step and
those suppressed at the first.
"""

from __future__ import annotations

from .spec import Architecture, weights

# the sizes of a WhisperConfig: {our field: transformers' WhisperConfig attribute}
HF_FIELDS = {
    "vocab_size": "vocab_size",
    "num_mel_bins": "num_mel_bins",
    "hidden_size": "d_model",
    "encoder_layers": "encoder_layers",
    "encoder_heads": "encoder_attention_heads",
    "encoder_ffn_dim": "encoder_ffn_dim",
    "decoder_layers": "decoder_layers",
    "decoder_heads": "decoder_attention_heads",
    "decoder_ffn_dim": "decoder_ffn_dim",
    "max_source_positions": "max_source_positions",
    "max_target_positions": "max_target_positions",
}

OPTIONS = {
    "vocab_size": "the tokens the decoder embeds and scores (51,865 for the multilingual models)",
    "num_mel_bins": "the spectrogram's mel bands, the first convolution's input channels (80)",
    "hidden_size": "C, the width of both stacks (512 for base)",
    "encoder_layers": "the encoder's blocks (6 for base)",
    "encoder_heads": "the encoder's self-attention heads (8 for base, d = C / h = 64)",
    "encoder_ffn_dim": "the encoder MLP's hidden units (4C)",
    "decoder_layers": "the decoder's blocks (6 for base)",
    "decoder_heads": "the decoder's heads, in self- and cross-attention alike",
    "decoder_ffn_dim": "the decoder MLP's hidden units (4C)",
    "max_source_positions": "encoder frames after the stride-2 convolution (1,500 = 30 s)",
    "max_target_positions": "the decoder's learned positions: the longest token sequence (448)",
    "alignment_heads": "(layer, head) pairs of cross-attention that follow the audio in time",
    "suppress_tokens": "token ids never generated (their logits set to -inf at every step)",
    "begin_suppress_tokens": "token ids not generated first (a space, the end token)",
}

# published sizes (each model's config.json on its model card, openai/whisper-NAME): width C,
# layers and heads of each stack (d = C / h = 64 in every one), mel bands; the 30 s window
# (1,500 encoder frames) and 448 decoder positions are the same in all of them
PUBLISHED = {
    "base": dict(hidden_size=512, encoder_layers=6, decoder_layers=6, heads=8, num_mel_bins=80),
    "small": dict(hidden_size=768, encoder_layers=12, decoder_layers=12, heads=12, num_mel_bins=80),
    "large-v3": dict(
        hidden_size=1280, encoder_layers=32, decoder_layers=32, heads=20, num_mel_bins=128
    ),
    "large-v3-turbo": dict(
        hidden_size=1280, encoder_layers=32, decoder_layers=4, heads=20, num_mel_bins=128
    ),
}

DEFAULTS = {  # neither a transformers config nor the CTranslate2 file stores these
    "layer_norm_eps": 1e-5,  # torch's LayerNorm default, as Whisper's code uses it
    "sample_rate": 16_000,  # Hz, the feature extractor's
    "hop_length": 160,  # samples between spectrogram frames (10 ms)
    "median_filter_width": 7,  # the DTW's smoothing of the alignment heads (transformers')
}


def hf_options(config) -> dict:
    """Our WhisperConfig's fields from transformers' WhisperConfig (and its generation config's
    alignment heads when the config carries them). What Whisper's code fixes is refused by name
    when a config changes it: the activation, a scaled embedding."""
    if getattr(config, "activation_function", "gelu") != "gelu":
        raise ValueError(
            f"activation_function = {config.activation_function!r}; Whisper's MLPs use "
            "'gelu' (the exact, erf form), the only one read here"
        )
    if getattr(config, "scale_embedding", False):
        raise ValueError("scale_embedding = True: Whisper's embeddings are not scaled here")
    out = {ours: int(getattr(config, hf)) for ours, hf in HF_FIELDS.items()}
    heads = getattr(config, "alignment_heads", None)
    out["alignment_heads"] = tuple(tuple(int(x) for x in p) for p in heads) if heads else ()
    out["suppress_tokens"] = tuple(getattr(config, "suppress_tokens", None) or ())
    out["begin_suppress_tokens"] = tuple(getattr(config, "begin_suppress_tokens", None) or ())
    return out


def ctranslate2_options(variables: dict, config_json: dict) -> dict:
    """Our WhisperConfig's fields from a CTranslate2 file's variables ({name: tensor}; sizes
    from their shapes, head counts from `encoder/num_heads`, `decoder/num_heads`) and its
    config.json (alignment heads, suppressed tokens)."""

    def layers(stack: str) -> int:
        return sum(
            1
            for n in variables
            if n.startswith(f"{stack}/layer_") and n.endswith("/ffn/linear_0/weight")
        )

    V, C = variables["decoder/embeddings/weight"].shape
    return {
        "vocab_size": int(V),
        "num_mel_bins": int(variables["encoder/conv1/weight"].shape[1]),
        "hidden_size": int(C),
        "encoder_layers": layers("encoder"),
        "encoder_heads": int(variables["encoder/num_heads"]),
        "encoder_ffn_dim": int(variables["encoder/layer_0/ffn/linear_0/weight"].shape[0]),
        "decoder_layers": layers("decoder"),
        "decoder_heads": int(variables["decoder/num_heads"]),
        "decoder_ffn_dim": int(variables["decoder/layer_0/ffn/linear_0/weight"].shape[0]),
        "max_source_positions": int(variables["encoder/position_encodings/encodings"].shape[0]),
        "max_target_positions": int(variables["decoder/position_encodings/encodings"].shape[0]),
        "alignment_heads": tuple(
            tuple(int(x) for x in p) for p in config_json.get("alignment_heads", ())
        ),
        "suppress_tokens": tuple(int(t) for t in config_json.get("suppress_ids", ())),
        "begin_suppress_tokens": tuple(int(t) for t in config_json.get("suppress_ids_begin", ())),
    }


def _attention(ours: str, hf: str, norm_ours: str, norm_hf: str, when=None):
    """One attention sublayer's rows: its pre-norm, W_Q, W_K (no bias), W_V, W_O."""
    return weights(
        (f"{norm_ours}.weight", None, f"{norm_hf}.weight", "whole", "norm"),
        (f"{norm_ours}.bias", None, f"{norm_hf}.bias", "whole"),
        (f"{ours}.q_proj.weight", None, f"{hf}.q_proj.weight", "heads"),
        (f"{ours}.q_proj.bias", None, f"{hf}.q_proj.bias", "heads"),
        (f"{ours}.k_proj.weight", None, f"{hf}.k_proj.weight", "kv_heads"),
        (f"{ours}.v_proj.weight", None, f"{hf}.v_proj.weight", "kv_heads"),
        (f"{ours}.v_proj.bias", None, f"{hf}.v_proj.bias", "kv_heads"),
        (f"{ours}.out_proj.weight", None, f"{hf}.out_proj.weight", "heads_in"),
        (f"{ours}.out_proj.bias", None, f"{hf}.out_proj.bias", "whole"),
        when=when,
    )


MLP_WEIGHTS = weights(
    ("norm_mlp.weight", None, "final_layer_norm.weight", "whole", "norm"),
    ("norm_mlp.bias", None, "final_layer_norm.bias", "whole"),
    ("mlp.fc1.weight", None, "fc1.weight", "hidden"),
    ("mlp.fc1.bias", None, "fc1.bias", "hidden"),
    ("mlp.fc2.weight", None, "fc2.weight", "hidden_in"),
    ("mlp.fc2.bias", None, "fc2.bias", "whole"),
)

# one encoder layer's, under `encoder.layers.{l}.` (ours) and `model.encoder.layers.{l}.`
ENCODER_LAYER_WEIGHTS = (
    _attention("self_attn", "self_attn", "norm_self", "self_attn_layer_norm") + MLP_WEIGHTS
)
# one decoder layer's, under `decoder.layers.{l}.` and `model.decoder.layers.{l}.`
DECODER_LAYER_WEIGHTS = (
    _attention("self_attn", "self_attn", "norm_self", "self_attn_layer_norm")
    + _attention("cross_attn", "encoder_attn", "norm_cross", "encoder_attn_layer_norm")
    + MLP_WEIGHTS
)
# the model's own (the output head is the embedding: transformers' proj_out.weight, tied)
MODEL_WEIGHTS = weights(
    ("encoder.conv1.weight", None, "model.encoder.conv1.weight", "not_split"),
    ("encoder.conv1.bias", None, "model.encoder.conv1.bias", "not_split"),
    ("encoder.conv2.weight", None, "model.encoder.conv2.weight", "not_split"),
    ("encoder.conv2.bias", None, "model.encoder.conv2.bias", "not_split"),
    ("encoder.positions", None, "model.encoder.embed_positions.weight", "whole"),
    ("encoder.norm.weight", None, "model.encoder.layer_norm.weight", "whole", "norm"),
    ("encoder.norm.bias", None, "model.encoder.layer_norm.bias", "whole"),
    ("decoder.embed.weight", None, "model.decoder.embed_tokens.weight", "vocab"),
    ("decoder.positions", None, "model.decoder.embed_positions.weight", "whole"),
    ("decoder.norm.weight", None, "model.decoder.layer_norm.weight", "whole", "norm"),
    ("decoder.norm.bias", None, "model.decoder.layer_norm.bias", "whole"),
)

# CTranslate2's name of each of ours (within a layer: after `{stack}/layer_{l}/`), with the
# rows of a fused tensor it holds: (name, part, parts), the part-th of `parts` equal blocks
_ATTN_CT2 = {"q_proj": 0, "k_proj": 1, "v_proj": 2}
CTRANSLATE2 = {
    "model": {
        "encoder.conv1.weight": ("encoder/conv1/weight", 0, 1),
        "encoder.conv1.bias": ("encoder/conv1/bias", 0, 1),
        "encoder.conv2.weight": ("encoder/conv2/weight", 0, 1),
        "encoder.conv2.bias": ("encoder/conv2/bias", 0, 1),
        "encoder.positions": ("encoder/position_encodings/encodings", 0, 1),
        "encoder.norm.weight": ("encoder/layer_norm/gamma", 0, 1),
        "encoder.norm.bias": ("encoder/layer_norm/beta", 0, 1),
        "decoder.embed.weight": ("decoder/embeddings/weight", 0, 1),
        "decoder.positions": ("decoder/position_encodings/encodings", 0, 1),
        "decoder.norm.weight": ("decoder/layer_norm/gamma", 0, 1),
        "decoder.norm.bias": ("decoder/layer_norm/beta", 0, 1),
    },
    "layer": {
        "norm_mlp.weight": ("ffn/layer_norm/gamma", 0, 1),
        "norm_mlp.bias": ("ffn/layer_norm/beta", 0, 1),
        "mlp.fc1.weight": ("ffn/linear_0/weight", 0, 1),
        "mlp.fc1.bias": ("ffn/linear_0/bias", 0, 1),
        "mlp.fc2.weight": ("ffn/linear_1/weight", 0, 1),
        "mlp.fc2.bias": ("ffn/linear_1/bias", 0, 1),
        "norm_self.weight": ("self_attention/layer_norm/gamma", 0, 1),
        "norm_self.bias": ("self_attention/layer_norm/beta", 0, 1),
        # self-attention: linear_0 = [W_Q; W_K; W_V], linear_1 = W_O
        **{
            f"self_attn.{p}.{kind}": ("self_attention/linear_0/" + kind, i, 3)
            for p, i in _ATTN_CT2.items()
            for kind in ("weight", "bias")
            if not (p == "k_proj" and kind == "bias")
        },
        "self_attn.out_proj.weight": ("self_attention/linear_1/weight", 0, 1),
        "self_attn.out_proj.bias": ("self_attention/linear_1/bias", 0, 1),
        # cross-attention (decoder only): linear_0 = W_Q, linear_1 = [W_K; W_V], linear_2 = W_O
        "norm_cross.weight": ("attention/layer_norm/gamma", 0, 1),
        "norm_cross.bias": ("attention/layer_norm/beta", 0, 1),
        "cross_attn.q_proj.weight": ("attention/linear_0/weight", 0, 1),
        "cross_attn.q_proj.bias": ("attention/linear_0/bias", 0, 1),
        "cross_attn.k_proj.weight": ("attention/linear_1/weight", 0, 2),
        "cross_attn.v_proj.weight": ("attention/linear_1/weight", 1, 2),
        "cross_attn.v_proj.bias": ("attention/linear_1/bias", 1, 2),
        "cross_attn.out_proj.weight": ("attention/linear_2/weight", 0, 1),
        "cross_attn.out_proj.bias": ("attention/linear_2/bias", 0, 1),
    },
}
# the fused biases' parts transformers has no tensor for: zero in every file CTranslate2 writes
CTRANSLATE2_ZERO_PARTS = (
    ("self_attention/linear_0/bias", 1, 3),  # W_K's bias in [b_Q; b_K; b_V]
    ("attention/linear_1/bias", 0, 2),  # W_K's bias in [b_K; b_V]
)

ARCHITECTURE = Architecture(
    name="whisper",
    models="Whisper tiny to large (speech to text)",
    hf_model_types=("whisper",),
    options=OPTIONS,
    defaults=DEFAULTS,
    gguf_options=None,
    hf_options=hf_options,
    layer_weights=(),  # not the decoder of mha_lib.nn.decoder: its rows are below
    encoder_decoder_weights={
        "model": MODEL_WEIGHTS,
        "encoder layer": ENCODER_LAYER_WEIGHTS,
        "decoder layer": DECODER_LAYER_WEIGHTS,
    },
    config_class="whisper",
)
