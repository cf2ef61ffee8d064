"""What each model is, in one place: one file per architecture, and the readers that run
through them.

Derived in notebooks 12 and 15 (16 for Qwen3.5, 17 for Whisper, 18 for DeepSeek-V3.2). Every
model the series runs is the building blocks' one decoder (`mha_lib.nn.decoder.DecoderConfig`,
by its options); what makes a Gemma 3 a Gemma 3 is in `gemma3.py`: the options it sets and why,
where each number comes from in a GGUF file and in a transformers config, the defaults neither
stores, and each weight's three names (ours, llama.cpp's, transformers') with how tensor
parallelism splits it. This package imports the core, the shared modules and the building blocks
only; the loaders of `llm`, the weight sources of `distributed`, the hybrid of
`linear_attention` and the sparse-attention decoder of `sparse_attention` read through it, and
the building blocks read no GGUF key.

Read first: `spec` (what a file says), `llama` (the plain model), then any architecture.
- `spec`: `Architecture`, `Weight` (a weight's names and split), `SPLITS`;
- `llama`, `qwen2`, `qwen3`, `gemma2`, `gemma3`, `qwen3_5`, `whisper`, `deepseek_v32`: one
  architecture each;
- `read`: `ARCHITECTURES` (every file here, found by name: adding an architecture is adding
  its file and its test), `config_from_gguf(f)`, `config_from_hf(config)`,
  `config_fields_from_hf`, `layer_weights`, `gguf_names`, `hf_names`, `splits`,
  `state_from_hf`, `state_to_hf`.
"""

from .read import (
    ARCHITECTURES,
    architecture,
    config_fields_from_hf,
    config_from_gguf,
    config_from_hf,
    gguf_names,
    hf_names,
    layer_weights,
    model_weights,
    splits,
    state_from_hf,
    state_to_hf,
)
from .spec import SPLITS, Architecture, Weight

__all__ = [
    "ARCHITECTURES",
    "SPLITS",
    "Architecture",
    "Weight",
    "architecture",
    "config_fields_from_hf",
    "config_from_gguf",
    "config_from_hf",
    "gguf_names",
    "hf_names",
    "layer_weights",
    "model_weights",
    "splits",
    "state_from_hf",
    "state_to_hf",
]
