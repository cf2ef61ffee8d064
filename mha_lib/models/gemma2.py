"""Gemma 2: Gemma 3's block without QK-norm, one sliding layer to each global one, one RoPE
base, scores and logits soft-capped.

Derived in notebook 15 (its soft caps; the tests run it as Gemma 3's elder). Read from a
transformers config only: its GGUF files are refused by name (`gguf_options` None).
"""

from __future__ import annotations

from . import gemma3, llama
from .spec import Architecture

ARCHITECTURE = Architecture(
    name="gemma2",
    models="Gemma 2",
    hf_model_types=("gemma2",),
    options={
        **{k: v for k, v in gemma3.OPTIONS.items() if k not in ("qk_norm", "rope_local_base")},
        "layer_types": "one sliding-window layer to each global one",
        "query_scale": "the scores' scale, 1/√query_pre_attn_scalar",
        "attn_logit_softcap": "attention scores soft-capped: c·tanh(s/c)",
        "final_logit_softcap": "final logits soft-capped: c·tanh(z/c)",
    },
    defaults={},
    gguf_options=None,
    hf_options=gemma3.hf_options,
    layer_weights=llama.LAYER_WEIGHTS[:5] + gemma3.SANDWICH_WEIGHTS + llama.LAYER_WEIGHTS[6:],
    model_weights=llama.MODEL_WEIGHTS,
    hf_norms_zero_centred=True,
)
