"""transformers' Whisper holding our weights: the reference that notebook 17's model is checked
against.

Derived for notebook 17's checks. `hf_whisper(model, tokenizer)` builds transformers'
`WhisperForConditionalGeneration` with our model's sizes and weights (`state_to_hf`: every
tensor of transformers' state dict filled, none left over, else a ValueError naming the first
missing or unexpected key) and the `GenerationConfig` that makes its `generate` decode as
`transcribe` does: the four-token prefix (start of transcript, language, task, no timestamps),
the suppressed and begin-suppressed tokens, the alignment heads and the median filter of 7 that
time the tokens. The weights are our model's own tensors, shared, not copied (built on the meta
device, then assigned). transformers is imported when the function is called, not with this
module. Used by the tests (the session fixture `whisper_base_hf`) and by
`python -m mha_lib.bench whisper`.

What it holds: `hf_whisper`.
"""

from __future__ import annotations

import torch

from .model import WhisperModel, state_to_hf
from .tokenizer import WhisperTokenizer

__all__ = ["hf_whisper"]

MEDIAN_FILTER_WIDTH = 7  # transformers' and OpenAI's default for the token timestamps


def hf_whisper(
    model: WhisperModel, tokenizer: WhisperTokenizer, attn_implementation: str = "eager"
):
    """(transformers' WhisperForConditionalGeneration holding model's weights, in eval mode, its
    GenerationConfig, also set as its generation_config). attn_implementation is transformers'
    ("eager" computes the attention weights the comparisons read; "sdpa" is its default)."""
    from transformers import GenerationConfig, WhisperForConditionalGeneration
    from transformers import WhisperConfig as HFConfig

    c, tok = model.config, tokenizer
    hf_config = HFConfig(
        vocab_size=c.vocab_size,
        num_mel_bins=c.num_mel_bins,
        d_model=c.hidden_size,
        encoder_layers=c.encoder_layers,
        encoder_attention_heads=c.encoder_heads,
        encoder_ffn_dim=c.encoder_ffn_dim,
        decoder_layers=c.decoder_layers,
        decoder_attention_heads=c.decoder_heads,
        decoder_ffn_dim=c.decoder_ffn_dim,
        max_source_positions=c.max_source_positions,
        max_target_positions=c.max_target_positions,
        decoder_start_token_id=tok.sot,
        eos_token_id=tok.eot,
        pad_token_id=tok.eot,
        bos_token_id=tok.eot,
        suppress_tokens=list(c.suppress_tokens),
        begin_suppress_tokens=list(c.begin_suppress_tokens),
        attn_implementation=attn_implementation,
    )
    with torch.device("meta"):
        hf = WhisperForConditionalGeneration(hf_config)
    result = hf.load_state_dict(state_to_hf(c, model.state_dict()), strict=False, assign=True)
    if result.missing_keys or result.unexpected_keys:
        missing, unexpected = result.missing_keys, result.unexpected_keys
        raise ValueError(
            f"our weights do not fill transformers' WhisperForConditionalGeneration exactly: "
            f"{len(missing)} missing key(s) {missing[:3]}, {len(unexpected)} unexpected key(s) "
            f"{unexpected[:3]}"
        )
    hf.tie_weights()
    hf.eval()
    gen = GenerationConfig(
        decoder_start_token_id=tok.sot,
        eos_token_id=tok.eot,
        pad_token_id=tok.eot,
        suppress_tokens=list(c.suppress_tokens),
        begin_suppress_tokens=list(c.begin_suppress_tokens),
        no_timestamps_token_id=tok.id("<|notimestamps|>"),
        is_multilingual=True,
        lang_to_id={"<|en|>": tok.id("<|en|>")},
        task_to_id={"transcribe": tok.id("<|transcribe|>"), "translate": tok.id("<|translate|>")},
        alignment_heads=[list(p) for p in c.alignment_heads],
        max_length=c.max_target_positions,
        median_filter_width=MEDIAN_FILTER_WIDTH,
    )
    hf.generation_config = gen
    return hf, gen
