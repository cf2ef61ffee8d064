"""A real pretrained encoder and what its heads do: the part of the library behind notebook 05.

Read first: `encoder` (all-MiniLM-L6-v2 loaded from its safetensors file into our own
`mha_lib.pytorch.MultiHeadAttention`, about 350 lines), then `roles` (how a head is scored
against the null heads and the positional baselines), then `sentences` (the hand-marked
minimal pairs it is scored on). `explore` puts those heads on a sentence of your own, as
figures and as a widget.

A module per idea:
- `encoder`: the tokenizer, `MiniLMEncoder`, `load_minilm`, `mean_pool`;
- `roles`: word-level attention, null heads and positional baselines, role scores with
  Wilson intervals, the positional part of the QK circuit, ablation;
- `sentences`: `ROLES` and `PAIRS`, the minimal pairs each role is measured on;
- `explore`: the explorer of notebook 05's last part.

Imports torch, safetensors and tokenizers, so each module is imported by its full name
(`from mha_lib.pretrained.encoder import load_minilm`); this package imports nothing itself.
The core (`mha_lib.attention`, `multihead`, `pytorch`, `block`) never imports it.
"""
