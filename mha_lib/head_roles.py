"""Measuring what the heads of a pretrained encoder do (notebook 05).

What it holds:
- `head_label(l, i)`: "L3.H7" for head i of layer l (both counted from 0);
  `stack_attentions` and `top_heads` to collect and rank all heads;
- `word_positions`, `words`: the WordPiece token positions of a hand-marked word, and the
  words of a sentence as it sees them;
- `offset_score`, `previous_token_score`, `next_token_score`: how much of its
  attention a head puts on the token just before / after each query;
- `link_score`, `role_link_scores`: the attention a head gives, from a marked
  word, to the word it should link to (the role scores, over `role_sentences`);
- `top_word`: the word a head attends to most from a given word (minimal pairs);
- `special_token_mass`: the attention parked on [CLS] and [SEP];
- `positional_attention`: the previous/next-token pattern a head would have
  from the position embeddings alone, read off the weights;
- `ablated` and `cosine_change`: remove heads through `head_mask` and measure
  what changes.

Conventions: the encoder returns attention weights (B, h, T, T) per layer
(rows = queries); `stack_attentions` puts all heads first, (layers, h, B, T, T),
and the scores take any (..., B, T, T), returning one number per leading
index (e.g. (layers, h)). `attention_mask` (B, T) is BERT's (1 = real token).
Position 0 is [CLS], position n_b - 1 of sentence b (n_b real tokens) is
[SEP]; the scores ignore both, and the padding.
"""

from __future__ import annotations

import math
import string

import torch
from torch import Tensor

from .pretrained import EncoderOutput, MiniLMEncoder, mean_pool

__all__ = [
    "ablated",
    "cosine_change",
    "head_label",
    "link_score",
    "next_token_score",
    "offset_score",
    "positional_attention",
    "previous_token_score",
    "role_link_scores",
    "special_token_mass",
    "stack_attentions",
    "top_heads",
    "top_word",
    "word_positions",
    "words",
]

_PUNCTUATION = string.punctuation + "“”‘’"


def head_label(layer: int, head: int) -> str:
    """'L3.H7': head 7 of layer 3, both counted from 0."""
    return f"L{layer}.H{head}"


def stack_attentions(out: EncoderOutput) -> Tensor:
    """The weights of all heads of an encoder output, heads first: (layers, h, B, T, T)."""
    return torch.stack(out.attentions).transpose(1, 2)  # (layers, h, B, T, T)


def top_heads(scores: Tensor, k: int = 3) -> list[tuple[str, float]]:
    """The k best heads of a (layers, h) score table, as (label, score), best first."""
    h = scores.shape[-1]
    values, flat = scores.flatten().topk(k)
    return [(head_label(int(j) // h, int(j) % h), float(v)) for v, j in zip(values, flat)]


# ---------------------------------------------------------------------------- words and tokens


def word_positions(sentence: str, offsets: list[tuple[int, int]], word: str) -> list[int]:
    """The token positions of `word` in a tokenised sentence.

    The sentence is split at spaces; each piece, stripped of leading and
    trailing punctuation, is a word, compared case-insensitively. `word` must
    occur exactly once. offsets: the (start, end) character span of every token
    ([CLS], [SEP] and padding have (0, 0)). Returns the positions of the tokens
    inside the word: "didn't" -> three tokens (didn, ', t); "tired." -> only
    "tired", not the full stop.
    """
    spans, start = [], 0
    for piece in sentence.split(" "):
        core = piece.strip(_PUNCTUATION)
        if core:
            begin = start + piece.index(core)
            spans.append((core.lower(), begin, begin + len(core)))
        start += len(piece) + 1
    found = [(b, e) for w, b, e in spans if w == word.lower()]
    if len(found) != 1:
        raise ValueError(f"word {word!r} occurs {len(found)} times in {sentence!r}; expected once")
    begin, end = found[0]
    return [i for i, (s, e) in enumerate(offsets) if e > s and s >= begin and e <= end]


def words(sentence: str) -> list[str]:
    """The words of a sentence as `word_positions` sees them: split at spaces, stripped of
    leading and trailing punctuation, lower case."""
    return [w.lower() for w in (p.strip(_PUNCTUATION) for p in sentence.split(" ")) if w]


# ---------------------------------------------------------------------------- scores


def _real_queries(attention_mask: Tensor) -> Tensor:
    """(B, T) bool: the real tokens other than [CLS] and [SEP]."""
    mask = attention_mask.bool()  # (B, T)
    n = mask.sum(dim=1, keepdim=True)  # (B, 1) real tokens per sentence
    position = torch.arange(mask.shape[1], device=mask.device)[None]  # (1, T)
    return mask & (position >= 1) & (position <= n - 2)  # (B, T)


def offset_score(A: Tensor, attention_mask: Tensor, offset: int) -> Tensor:
    """The mean weight a head puts on the token `offset` places away (-1: the previous one).

    A (..., B, T, T), e.g. (B, T, T) for one head or (layers, h, B, T, T) for
    all: every query i for which i and i + offset are both real words (not
    [CLS], [SEP] or padding) counts once, pooled over the batch. Returns the
    leading axes (...), e.g. () or (layers, h).
    """
    B, T = attention_mask.shape
    if tuple(A.shape[-3:]) != (B, T, T):
        raise ValueError(
            f"A has shape {tuple(A.shape)}; expected (..., B, T, T) = (..., {B}, {T}, {T})"
        )
    word = _real_queries(attention_mask)  # (B, T)
    i = torch.arange(T)
    j = i + offset
    ok = (j >= 0) & (j < T)  # (T,)
    valid = word[:, i[ok]] & word[:, j[ok]]  # (B, T'): query i and key i + offset both words
    w = A[..., i[ok], j[ok]]  # (..., B, T')
    return (w * valid).sum(dim=(-2, -1)) / valid.sum()


def previous_token_score(A: Tensor, attention_mask: Tensor) -> Tensor:
    """`offset_score` with offset -1: the weight each word puts on the word token before it."""
    return offset_score(A, attention_mask, -1)


def next_token_score(A: Tensor, attention_mask: Tensor) -> Tensor:
    """`offset_score` with offset +1: the weight each word puts on the token after it."""
    return offset_score(A, attention_mask, +1)


def link_score(A: Tensor, from_positions: list[int], to_positions: list[int]) -> Tensor:
    """The attention from one word to another: summed over the to-word's tokens, averaged over
    the from-word's tokens. A (..., T, T) -> (...)."""
    return A[..., from_positions, :][..., to_positions].sum(dim=-1).mean(dim=-1)


def role_link_scores(
    A: Tensor, texts: list[str], offsets: list[list[tuple[int, int]]], items, reverse=False
) -> Tensor:
    """The `link_score` of every head for every hand-marked link of `items` (RoleSentence).

    A (..., B, T, T): the weights for the batch `texts` (with their token
    offsets); reverse=True scores the links backwards (to-word -> from-word).
    Returns (n_links, ...), e.g. (n_links, layers, h).
    """
    scores = []
    for item in items:
        b = texts.index(item.sentence)
        for src, dst in item.links:
            if reverse:
                src, dst = dst, src
            src_pos = word_positions(item.sentence, offsets[b], src)
            dst_pos = word_positions(item.sentence, offsets[b], dst)
            scores.append(link_score(A[..., b, :, :], src_pos, dst_pos))
    return torch.stack(scores)  # (n_links, ...)


def top_word(A: Tensor, sentence: str, offsets: list[tuple[int, int]], src: str) -> str:
    """The word (other than src itself) to which one head, A (T, T), gives the most weight
    from the word src. Candidates: the words that occur once (not "the" when it occurs
    twice), not [CLS], [SEP] or padding."""
    all_words = words(sentence)
    candidates = [w for w in all_words if w != src.lower() and all_words.count(w) == 1]
    src_pos = word_positions(sentence, offsets, src)
    weight = [link_score(A, src_pos, word_positions(sentence, offsets, w)) for w in candidates]
    return candidates[max(range(len(weight)), key=weight.__getitem__)]


def special_token_mass(A: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
    """The mean weight the words put on [CLS] and on [SEP]: A (..., B, T, T) -> two (...)."""
    word = _real_queries(attention_mask)  # (B, T)
    T = attention_mask.shape[1]
    sep = attention_mask.sum(dim=1) - 1  # (B,) position of [SEP]
    is_sep = torch.arange(T)[None] == sep[:, None]  # (B, T)
    on_cls = A[..., 0]  # (..., B, T): each query's weight on key 0
    on_sep = (A * is_sep[:, None, :]).sum(dim=-1)  # (..., B, T)
    total = word.sum()
    return (on_cls * word).sum(dim=(-2, -1)) / total, (on_sep * word).sum(dim=(-2, -1)) / total


# ---------------------------------------------------------------------------- from the weights


def positional_attention(model: MiniLMEncoder, T: int = 32) -> Tensor:
    """The attention each head would have from positions alone: (layers, h, T, T).

    P (T, E) are the first T position embeddings, layer-normalised as the
    embedding layer does (without the word and token-type parts). For head i
    of layer l, scores = (P W_Q^h + b_Q^h)(P W_K^h + b_K^h)ᵀ / √d, then softmax.
    No sentence is run; for layers above 0 this is what the head would do if
    the position part of its input were still the raw position embeddings.
    """
    emb = model.embeddings
    with torch.no_grad():
        P = emb.norm(emb.position_embeddings.weight[:T])  # (T, E)
        weights = []
        for layer in model.layers:
            attn = layer.self_attn
            x = P[None]  # (1, T, E)
            q, k, _ = attn._project(x, x, x, True, True)  # (1, h, T, d) each: P W^h + b^h
            scores = q[0] @ k[0].transpose(1, 2) / math.sqrt(attn.head_dim)  # (h, T, T)
            weights.append(torch.softmax(scores, dim=-1))
    return torch.stack(weights)  # (layers, h, T, T)


# ---------------------------------------------------------------------------- ablation


def ablated(
    model: MiniLMEncoder, input_ids: Tensor, attention_mask: Tensor, heads: list[tuple[int, int]]
) -> EncoderOutput:
    """Run the model with the given heads (layer, head) removed: their outputs are zeroed
    before W_O (head_mask 0), everything else unchanged."""
    L, h = len(model.layers), model.num_heads
    head_mask = torch.ones(L, h)  # (layers, h)
    for layer, head in heads:
        head_mask[layer, head] = 0.0
    with torch.no_grad():
        return model(input_ids, attention_mask, head_mask=head_mask)


def cosine_change(base: EncoderOutput, other: EncoderOutput, attention_mask: Tensor) -> Tensor:
    """1 - cos between the mean-pooled sentence vectors of two runs: (B,)."""
    a = mean_pool(base.last_hidden_state, attention_mask)  # (B, E)
    b = mean_pool(other.last_hidden_state, attention_mask)  # (B, E)
    return 1.0 - torch.nn.functional.cosine_similarity(a, b, dim=-1)  # (B,)
