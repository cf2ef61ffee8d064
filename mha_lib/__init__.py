"""mha_lib: the helper library of the multi-head attention series.

Laid out in layers, as the series builds. The core, on top, is what notebooks 01-04, 07 and
10 derive and what a learner reads beside them; each module opens with its algorithm:
- `attention`: scaled dot-product attention, softmax, unweighted self-attention,
  causal and padding masks (notebooks 01-02);
- `multihead`: multi-head attention, the per-head loop and the vectorised form,
  self- and cross-attention (notebook 03);
- `pytorch`: `explicit_attention` and the module `MultiHeadAttention`, a drop-in
  for `nn.MultiheadAttention` (notebook 04; imports torch, so import it explicitly);
- `block`: a Transformer encoder block around it (notebook 04; imports torch);
- `conv`: a k x k convolution computed as multi-head self-attention with k^2
  heads (notebook 07; imports torch);
- `positions`: sinusoidal encodings, `rope` (rotary embeddings), T5's relative
  buckets (notebook 10; imports torch).
The first two are the numpy core; the other four, and the building blocks, the torch layer.
Shared by every notebook: `testing` (`assert_close`, the one equality check),
`plot` (attention heatmaps), `diagrams` (the core path's schematic figures: the
roadmap, data flows, the head split, the pre- and post-LN blocks), `example` (the running
example), `stats` (Wilson and t intervals), `runtime` (`pick_device`, a light `Adam` and
`SGD`, freed memory handed back, a process's memory and a sweep's provenance) and `_checks`
(input checks with clear messages).

Below the core, one layer of torch building blocks that every later part builds on, importing
only the core and the shared modules:
- `nn/`: the KV caches (plain and with sinks), grouped-query attention, the mask zoo,
  FlashAttention in plain torch, head scores and circuits, the decoder with its pluggable
  attention functions, and generation (notebooks 08, 11, 12).

Below them, the architectures, importing only the layers above:
- `models/`: one file per architecture (Llama, Qwen2, Qwen3, Gemma 2, Gemma 3, Qwen3.5,
  Whisper, DeepSeek-V3.2): the
  options it sets, where its numbers come from in a GGUF file and in a transformers config,
  each weight's names and how tensor parallelism splits it; one reader per source
  (notebooks 12, 15, 16, 17, 18).

One package per later part, a leaf: it imports the core, the building blocks, the shared
modules and at most two other parts it declares (its `Edges:`), and nothing imports it but the
tools:
- `pretrained/`: a real pretrained encoder and what its heads do (notebook 05);
- `toy/`: small tasks and models on which heads learn, over seeds (notebook 06);
- `efficient/`: FlashAttention as Triton kernels, smaller caches (latent attention,
  the cache bill, the equal-budget recall sweep) (notebooks 09, 11; the names notebook 08
  derives are re-exported from `nn`);
- `extrapolation/`: how far each position scheme extrapolates, over seeds
  (notebook 10);
- `llm/`: a real language model, SmolLM2-135M, read from its GGUF file into the decoder of
  `nn`, and measured from the inside (notebooks 12, 13);
- `distributed/`: attention across processes with `torch.distributed`: the
  collectives, heads split over ranks (tensor parallelism, SmolLM2 sharded over
  three processes), a sequence split over a ring (ring attention) (notebook 14);
- `linear_attention/`: attention with a fixed-size state: linear attention, the
  delta rule and the gated delta rule (one step, step by step, chunked),
  Qwen3.5's gated DeltaNet layer with its cache, its hybrid decoder, and the recall
  sweep at an equal state/cache budget (notebook 16);
- `speech/`: Whisper base, an encoder-decoder on real weights: the log-mel spectrogram, our
  reader of its CTranslate2 file, the model built from the series' attention with a fixed
  cross-attention cache, greedy transcription and word times by DTW (notebook 17);
- `sparse_attention/`: choosing keys: DeepSeek's lightning indexer, its causal top-k as a mask
  on notebook 11's latent attention, its key cache, and DeepSeek-V3.2's decoder (dense layers)
  on the series' decoder, checked against transformers (notebook 18).
And the tools: `exercises` (the checkers), `bench` (`python -m mha_lib.bench
numpy|torch|efficient|triton|rope|mla|llm|whisper|deltanet|sparse|binder`), `data` (cached sweeps,
read with `importlib.resources`).

`import mha_lib` imports numpy only, so the numpy notebooks start quickly.
Masks are boolean everywhere in the numpy core, and True means "may attend".
"""

from importlib.metadata import version

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

__version__ = version("mha_lib")  # written once, in pyproject.toml

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
