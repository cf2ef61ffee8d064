"""mha_lib: the helper library of the multi-head attention series.

Laid out as the series is. The core, on top, is what notebooks 01-04 derive and
what a learner reads beside them:
- `attention`: softmax, scaled dot-product attention, unweighted
  self-attention, causal and padding masks (notebooks 01-02);
- `multihead`: multi-head attention, per-head loop and vectorised, self- and
  cross-attention (notebook 03);
- `pytorch`: the PyTorch module `MultiHeadAttention` (notebook 04; imports
  torch, so import it explicitly);
- `block`: a Transformer encoder block around it (notebook 04; imports torch);
- `conv`: a k x k convolution computed as multi-head self-attention with k^2
  heads (notebook 07; imports torch).
Shared by every notebook: `plot` (attention heatmaps), `diagrams` (the data
flow and the head split), `example` (the running example), `_checks` (input
checks with clear messages).

One package per later part, each importing the core and never imported by it:
- `pretrained/`: a real pretrained encoder and what its heads do (notebook 05);
- `toy/`: small tasks and models on which heads learn, over seeds (notebook 06);
- `efficient/`: KV cache, grouped-query attention, the mask zoo, FlashAttention
  in torch and as Triton kernels (notebooks 08, 09).
And the tools: `exercises` (the checkers), `bench` (`python -m mha_lib.bench
numpy|torch|efficient|triton`), `data` (cached sweeps).

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
