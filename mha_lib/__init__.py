"""mha_lib: the helper library of the multi-head attention series.

Each piece is derived in a notebook first and then lives here:
- `attention`: softmax, scaled dot-product attention, unweighted
  self-attention, causal and padding masks (notebook 01);
- `multihead`: multi-head attention, per-head loop and vectorised, self- and
  cross-attention (notebook 03);
- `plot`: the attention heatmaps used by every notebook (import it explicitly);
- `diagrams`: schematic figures of the data flow and of the head split
  (notebook 03; import it explicitly);
- `exercises`: checkers for the notebooks' exercises;
- `pytorch`: the PyTorch module (notebook 04; imports torch, so import it explicitly);
- `block`: a Transformer encoder block around it (notebook 04; imports torch);
- `pretrained`: the pretrained encoder all-MiniLM-L6-v2 run through our attention, its
  tokenizer and mean pooling (notebook 05; imports torch, safetensors, tokenizers);
- `head_roles`, `role_sentences`: the scores that measure what its heads do, and the
  hand-marked sentences they are measured on (notebook 05);
- `explore`: those heads on a sentence of your own, as figures and as a widget (notebook 05);
- `toy_tasks`, `toy_models`, `training`, `circuits`: small tasks, attention-only models, a
  seeded training loop and head scores / QK and OV circuits (notebook 06; import torch);
- `seed_sweep`, `formation`: the seed sweep behind notebook 06's claims, and the strips and
  slider that show heads forming during training (notebook 06; import torch);
- `conv`: a k×k convolution computed as multi-head self-attention with k² heads
  (notebook 07; imports torch, so import it explicitly);
- `efficient`: KV cache, grouped-query attention, FlashAttention forward and
  backward in plain torch, the mask zoo (notebook 08; imports torch, so import
  it explicitly);
- `triton_attention`: FlashAttention as Triton kernels, forward and backward, run by
  Triton's interpreter on a CPU (notebook 09; imports triton, so import it explicitly);
- `bench`: the benchmarks, `python -m mha_lib.bench numpy|torch|efficient|triton`.

`import mha_lib` imports numpy only, so the numpy notebooks start quickly.
Masks are boolean everywhere in the numpy core, and True means "may attend".
"""

from .attention import (
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
    self_attention,
    softmax,
)
from .multihead import (
    merge_heads,
    multi_head_attention,
    multi_head_attention_loop,
    split_heads,
)

__version__ = "0.1.0"

__all__ = [
    "causal_mask",
    "merge_heads",
    "multi_head_attention",
    "multi_head_attention_loop",
    "padding_mask",
    "scaled_dot_product_attention",
    "self_attention",
    "softmax",
    "split_heads",
]
