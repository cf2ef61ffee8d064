"""Gemma 2 (2B, 9B, 27B): Gemma 3's block without QK-norm, one sliding layer to each global one,
one RoPE base, scores and logits soft-capped.

Derived in notebook 15 (its soft caps; Gemma 3 is its successor). Every other layer, from the
first, sees its last `sliding_window` keys (4096); every score is soft-capped, c·tanh(s/c), at
`attn_logit_softcapping` (50) and the logits at `final_logit_softcapping` (30), both stored in
a GGUF file. Two numbers are not in the file and are set as llama.cpp sets them (`defaults`):
the pattern of two, and the scores' scale, 1/√d except for the 27B (46 layers), whose scores
are scaled by 1/√(C/h) = 1/√144 (transformers' `query_pre_attn_scalar`: 256 = d for the 2B and
9B, 144 for the 27B). Its norms are stored as Gemma 3's: 1 + w in a file and in ours.
"""

from __future__ import annotations

from . import gemma3, llama
from .spec import Architecture

DEFAULTS = {  # llama.cpp's, not stored in a GGUF file
    "sliding_window_pattern": 2,  # layer l is global when (l + 1) % 2 == 0
    "layers_of_27b": 46,  # its scores are scaled by 1/√(C/h), the others' by 1/√d
}

OPTIONS = {
    "layer_types": "one sliding-window layer to each global one",
    "sliding_window": "the keys a sliding layer's query sees, itself included",
    "query_scale": "the scores' scale: 1/√d, 1/√(C/h) for the 27B",
    "sandwich_norms": "four norms per block: each sublayer's output is normalised too",
    "embedding_scale": "the embedding multiplied by √C",
    "mlp_activation": "a GELU-gated MLP (tanh approximation), not SwiGLU",
    "attn_logit_softcap": "attention scores soft-capped: c·tanh(s/c)",
    "final_logit_softcap": "final logits soft-capped: c·tanh(z/c)",
}


def gguf_options(read) -> dict:
    """The options of a GGUF file's `gemma2.` keys, and the defaults it does not store."""
    return dict(
        **gemma3.gemma_block_options(read, DEFAULTS),
        attn_logit_softcap=read.need("attn_logit_softcapping"),
        final_logit_softcap=read.need("final_logit_softcapping"),
    )


ARCHITECTURE = Architecture(
    name="gemma2",
    models="Gemma 2",
    hf_model_types=("gemma2",),
    options=OPTIONS,
    defaults=DEFAULTS,
    gguf_options=gguf_options,
    hf_options=gemma3.hf_options,
    layer_weights=llama.LAYER_WEIGHTS[:5] + gemma3.SANDWICH_WEIGHTS + llama.LAYER_WEIGHTS[6:],
    model_weights=llama.MODEL_WEIGHTS,
    hf_norms_zero_centred=True,
)
