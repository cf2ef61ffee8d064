"""Small GGUF files written in the tests, the way llama.cpp's converter writes them, from random
transformers models (imported by the tests and conftest.py, not a test).

- `bpe_vocab()`, `spm_vocab()`: a small vocabulary learned here on the documentation text
  (`mha_lib.llm.texts.doc_text`), deterministic: byte-level BPE with its merges (as Llama 3's and
  Qwen's files store them), or SentencePiece pieces with scores and the 256 byte tokens (as
  Gemma's);
- `write_gguf(path, hf, ...)`: a transformers model (`tests.hf_models.random_hf`) written as a
  GGUF file of its architecture: the numbers in the metadata, the matrices in one format
  (F32, F16, Q8_0, Q4_0, Q4_1, ...), the norms and biases in F32, the embedding in its own format;
  llama's W_Q and W_K rows permuted to adjacent RoPE pairs, Gemma's norms stored as 1 + w (as
  llama.cpp's converter does); a vocabulary when given one; a RoPE scaling as the converter
  writes it: Llama 3's as the tensor `rope_freqs.weight` (`llama3_rope_factors`), a linear one
  as `rope.scaling.type` and `rope.scaling.factor`.
"""

from __future__ import annotations

import json
from functools import cache

ARCH = {
    "llama": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "gemma2": "gemma2",
    "gemma3_text": "gemma3",
}
PRE = {"llama": "llama-bpe", "qwen2": "qwen2", "qwen3": "qwen2"}  # tokenizer.ggml.pre
SPACE = "\u2581"
SENTENCEPIECE = ("gemma2", "gemma3_text")  # the kinds whose files hold a SentencePiece vocabulary


def _corpus() -> list[str]:
    from mha_lib.llm.texts import doc_paragraphs

    return doc_paragraphs()[:60]


@cache
def bpe_vocab(size: int = 420) -> dict:
    """{tokens, merges, token_type, bos, eos}: byte-level BPE learned on the corpus; the 256
    bytes in GPT-2's alphabet, the merges best first, two control tokens at the end."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=size, initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator(_corpus(), trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab] + ["<|begin_of_text|>", "<|end_of_text|>"]
    merges = [" ".join(m) if isinstance(m, list) else m for m in model["merges"]]
    types = [1] * (len(tokens) - 2) + [3, 3]
    return {
        "tokens": tokens,
        "merges": merges,
        "token_type": types,
        "bos": len(tokens) - 2,
        "eos": len(tokens) - 1,
    }


@cache
def spm_vocab(size: int = 300) -> dict:
    """{tokens, scores, token_type, bos, eos, pad, unk}: SentencePiece pieces learned on the
    corpus (a space spelled '▁', a piece's score falling with the order it was learned in),
    after four control tokens and the 256 byte tokens <0x00>..<0xFF> (byte fallback)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="never")
    trainer = trainers.BpeTrainer(vocab_size=size, show_progress=False)
    tok.train_from_iterator(_corpus(), trainer)
    pieces = [
        t
        for t, _ in sorted(json.loads(tok.to_str())["model"]["vocab"].items(), key=lambda kv: kv[1])
    ]
    special = ["<pad>", "<eos>", "<bos>", "<unk>"]
    tokens = special + [f"<0x{b:02X}>" for b in range(256)] + pieces
    types = [3, 3, 3, 2] + [6] * 256 + [1] * len(pieces)
    scores = [0.0] * (4 + 256) + [-float(i) for i in range(len(pieces))]
    return {
        "tokens": tokens,
        "scores": scores,
        "token_type": types,
        "pad": 0,
        "eos": 1,
        "bos": 2,
        "unk": 3,
    }


def add_vocab(w, kind: str) -> None:
    """Write a tokenizer for an architecture: BPE (llama, qwen2, qwen3) or SentencePiece."""
    if kind in SENTENCEPIECE:
        v = spm_vocab()
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(v["tokens"])
        w.add_token_scores(v["scores"])
        w.add_token_types(v["token_type"])
        w.add_pad_token_id(v["pad"])
        w.add_unk_token_id(v["unk"])
        w.add_add_bos_token(True)
        w.add_add_space_prefix(False)
    else:
        v = bpe_vocab()
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(PRE[kind])
        w.add_token_list(v["tokens"])
        w.add_token_merges(v["merges"])
        w.add_token_types(v["token_type"])
        if kind == "llama":  # as Llama 3's files do: the tokenizer starts every text with BOS
            w.add_add_bos_token(True)
    w.add_bos_token_id(v["bos"])
    w.add_eos_token_id(v["eos"])


def llama3_rope_factors(rope: dict, d: int) -> list[float]:
    """The (d/2,) factors llama.cpp's converter stores for Llama 3's RoPE scaling (written here
    from the scaling's definition, not from transformers): a pair whose wavelength 2π/ω_i is
    shorter than original/high_freq_factor keeps its frequency (1), one longer than
    original/low_freq_factor is slowed by `factor`, and in between the two are blended."""
    import math

    factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    original = rope["original_max_position_embeddings"]
    out = []
    for i in range(d // 2):
        wavelength = 2 * math.pi * rope["rope_theta"] ** (2 * i / d)
        if wavelength < original / high:
            out.append(1.0)
        elif wavelength > original / low:
            out.append(float(factor))
        else:
            smooth = (original / wavelength - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return out


def vocab_size(kind: str) -> int:
    return len((spm_vocab() if kind in SENTENCEPIECE else bpe_vocab())["tokens"])


def write_gguf(
    path, hf, *, qtype="Q8_0", embed_qtype="Q8_0", arch=None, vocab=True, skip=(), extra=None
):
    """Write transformers model hf (float32) as a GGUF file at path (see the module docstring).

    arch: the name written as general.architecture (default: hf's); skip: tensor names left
    out; extra: {name: (array, qtype)} added ("RAW": bytes said to be IQ4_NL, a format the
    series does not read)."""
    import gguf
    import numpy as np
    import torch
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import quantize

    from mha_lib.models import gguf_names, hf_names
    from mha_lib.positions import rope_permutation
    from tests.hf_models import config_from_hf

    c = hf.config
    kind = c.model_type
    ours = config_from_hf(c)
    w = gguf.GGUFWriter(path, arch or ARCH[kind])
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    rope = c.rope_parameters
    w.add_rope_freq_base(
        (rope["full_attention"] if "full_attention" in rope else rope)["rope_theta"]
    )
    if kind == "llama":
        w.add_rope_dimension_count(ours.head_dim)
        w.add_vocab_size(c.vocab_size)
    if kind in ("qwen3", "gemma2", "gemma3_text"):
        w.add_key_length(ours.head_dim)
        w.add_value_length(ours.head_dim)
    if kind in ("gemma2", "gemma3_text"):
        w.add_sliding_window(c.sliding_window)
    if kind == "gemma2":  # its soft caps, always in the file
        w.add_attn_logit_softcapping(c.attn_logit_softcapping)
        w.add_final_logit_softcapping(c.final_logit_softcapping)
    scaling = rope["full_attention"] if "full_attention" in rope else rope
    if scaling.get("rope_type") == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(scaling["factor"])
    elif scaling.get("rope_type") == "yarn":  # as llama.cpp's converter writes Qwen's
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(scaling["factor"])
        w.add_rope_scaling_orig_ctx_len(scaling["original_max_position_embeddings"])
    elif scaling.get("rope_type") == "llama3":
        factors = llama3_rope_factors(scaling, ours.head_dim)
        extra = {"rope_freqs.weight": (np.array(factors, np.float32), "F32"), **(extra or {})}
    if vocab:
        add_vocab(w, kind)
    sd = hf.state_dict()
    to_hf = hf_names(ours)
    heads = {"attn_q": ours.num_heads, "attn_k": ours.num_kv_heads}

    def put(name, t, fmt, force=False):
        if name in skip and not force:
            return
        a = t.detach().numpy()
        if fmt == "RAW":
            w.add_tensor(name, a.astype(np.uint8), raw_dtype=Q.IQ4_NL)
            return
        a = a.astype(np.float32)
        if fmt == "F32":
            w.add_tensor(name, a)
        elif fmt == "F16":
            w.add_tensor(name, a.astype(np.float16))
        else:
            w.add_tensor(name, quantize(a, Q[fmt]), raw_dtype=Q[fmt])

    for theirs, name in gguf_names(ours).items():
        t = sd[to_hf[name]].float()
        part = theirs.split(".")[-2]  # attn_q, ffn_norm, token_embd, ...
        if "norm" in part:
            put(theirs, t + 1 if ours.sandwich_norms else t, "F32")  # Gemma: 1 + w
        elif theirs.endswith(".bias"):
            put(theirs, t, "F32")
        elif theirs == "token_embd.weight":
            put(theirs, t, embed_qtype)
        else:
            if kind == "llama" and part in heads:  # llama.cpp: half-split rows -> pairs
                d = ours.head_dim
                t = t.view(heads[part], d, -1)[:, rope_permutation(d)].reshape(t.shape)
            put(theirs, t, qtype)
    for name, (array, fmt) in (extra or {}).items():  # after the skipped ones: replacements
        put(name, torch.as_tensor(array), fmt, force=True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return hf
