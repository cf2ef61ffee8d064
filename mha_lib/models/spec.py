"""What an architecture file says: `Architecture`, one row per weight (`Weight`), the ways tensor
parallelism splits a weight (`SPLITS`), and the weights of options no architecture file brings.

Derived in notebook 15 (the files learners have) and 14 (how each weight is split over ranks).
Every architecture is the series' one decoder (`mha_lib.nn.decoder.DecoderConfig`, by its
options): a file of this package says which options it sets and why, where each number comes
from in a GGUF file and in a transformers config, and what each weight is called in the three
places it lives: our parameters, llama.cpp's file and transformers' state dict.

A weight row belongs to every model (`when` None: the plain Llama's weights, `llama.py`) or to
the models whose config sets an option (`when="qk_norm"`, or `"not tie_embeddings"`). An
option's row replaces a plain row of the same name of ours: Gemma's four norms rename the MLP's
pre-norm in transformers (`pre_feedforward_layernorm`), so `gemma3.py` gives `norm2.weight` a
row of its own under `sandwich_norms`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["OPTION_WEIGHTS", "SPLITS", "Architecture", "Weight", "weights"]

# how tensor parallelism (notebook 14, `mha_lib.distributed.tensor_parallel`) splits a weight
# stored (out, in) as in torch: by rows (its output features) or by columns (its inputs)
SPLITS = {
    "whole": "every rank holds it whole (a norm's weight, shared by every head)",
    "vocab": "rows by vocabulary range: each rank looks up and scores its own ids",
    "heads": "rows by query heads, whole heads of d (W_Q, its bias, the gate's W_G)",
    "kv_heads": "rows by key/value heads, with the query heads that share them (W_K, W_V)",
    "heads_in": "columns by query heads: each rank's partial sum, all-reduced (W_O)",
    "hidden": "rows by the MLP's hidden units (W_gate, W_up)",
    "hidden_in": "columns by the MLP's hidden units, all-reduced (W_down)",
    "head_logits": "one number per query head, with its head (a sink logit)",
    "not_split": "not split: tensor parallelism refuses the option that brings it",
}


@dataclass(frozen=True)
class Weight:
    """One weight, by its three names: ours (in a layer, `self_attn.q_proj.weight`, or of the
    model, `embed.weight`), llama.cpp's (`attn_q.weight`; None: not in a GGUF file) and
    transformers' (`self_attn.q_proj.weight`; None: no tensor of its own there), how tensor
    parallelism splits it (of `SPLITS`), the config option that brings it (None: every
    model; "qk_norm"; "not tie_embeddings"), and whether it is a norm's weight."""

    ours: str
    gguf: str | None
    hf: str | None
    split: str
    when: str | None = None
    norm: bool = False  # a norm's weight (transformers stores w where norms are zero-centred)

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"split = {self.split!r}; expected one of {sorted(SPLITS)}")

    def applies(self, config) -> bool:
        """Whether a model of `config` has this weight."""
        if self.when is None:
            return True
        negated = self.when.startswith("not ")
        value = bool(getattr(config, self.when.removeprefix("not ")))
        return value != negated


def weights(*rows: tuple, when: str | None = None) -> tuple[Weight, ...]:
    """A table of weights, one row each: (ours, llama.cpp's, transformers', split), and "norm"
    after them for a norm's weight; when: the option that brings them all (None: every model)."""
    return tuple(Weight(*row[:4], when=when, norm=row[4:] == ("norm",)) for row in rows)


@dataclass(frozen=True)
class Architecture:
    """One architecture: what it is, where its numbers come from, its weights.

    name: llama.cpp's `general.architecture`; hf_model_types: transformers' `model_type`s it
    reads; options: {DecoderConfig field: what it does, one line}, every option the
    architecture sets; defaults: numbers neither source stores, and where they come from;
    gguf_options(read) -> {field: value}, from a GGUF file's `{name}.` keys (read.get(key,
    default), read.need(key), read.block_count, ...; None: files of this architecture are
    not read); hf_options(config) -> {field: value}, from a transformers config;
    rope_rows_permuted: llama.cpp's converter stored each head's rows of W_Q and W_K in
    adjacent RoPE pairs (its llama only); model_weights, layer_weights: `Weight` rows
    (linear_weights: the mixer of a "linear_attention" layer, in place of `self_attn.` rows);
    config_class: "decoder" (`DecoderConfig`), "hybrid" (notebook 16's `HybridConfig`, whose
    linear-attention layers `mha_lib.linear_attention` builds), "whisper" (notebook 17's
    encoder-decoder, `mha_lib.speech.WhisperConfig`) or "sparse_mla" (notebook 18's
    `mha_lib.sparse_attention.SparseMLAConfig`, DeepSeek-V3.2); encoder_decoder_weights: an
    encoder-decoder's rows, which are not the decoder's, by where they sit ("model", "encoder
    layer", "decoder layer"; empty for a decoder); attention_weights: the rows of a layer's
    attention when it is not grouped-query attention, in place of the plain `self_attn.` rows
    ("sparse_mla": DeepSeek-V3.2's latent attention and its indexer); hf_norms_zero_centred: every
    norm's weight is stored by transformers as w, applied as 1 + w (ours and a GGUF file's
    hold 1 + w); hf_defaults: a config.json's keys transformers fills in when they are absent.
    """

    name: str
    models: str
    hf_model_types: tuple[str, ...]
    options: dict[str, str]
    defaults: dict
    gguf_options: Callable | None
    hf_options: Callable
    layer_weights: tuple[Weight, ...]
    model_weights: tuple[Weight, ...] = ()
    linear_weights: tuple[Weight, ...] = ()  # a "linear_attention" layer's mixer, if any
    rope_rows_permuted: bool = False
    config_class: str = "decoder"
    hf_norms_zero_centred: bool = False  # transformers stores w and multiplies by 1 + w
    hf_defaults: dict = field(default_factory=dict)  # a config.json's keys transformers fills
    encoder_decoder_weights: dict = field(default_factory=dict)  # {where: rows}, "whisper" only
    attention_weights: tuple[Weight, ...] = ()  # an attention not grouped-query's, "sparse_mla"


# the weights of options the series adds on its own (no architecture file reads them): a sink
# logit per head (gpt-oss's, notebook 11)
OPTION_WEIGHTS = weights(
    ("self_attn.sink_logits", None, "self_attn.sinks", "head_logits"), when="attention_sinks"
)
