"""Measuring what the heads of a pretrained encoder do (notebook 05).

What it holds:
- `head_label(l, i)`: "L3.H7" for head i of layer l (both counted from 0);
  `stack_attentions` and `top_heads` to collect and rank all heads;
- `word_positions`, `words`, `word_spans`: the WordPiece token positions of a
  hand-marked word, and the words of a sentence with their tokens;
- `word_attention`: THE rule that turns a token matrix into a word matrix (a
  word's pieces are combined by their MEAN, as query and as key), used by every
  word-level score here;
- `null_patterns`, `null_heads`: heads with no role (uniform, fixed offsets
  -2, -1, +1, +2, always-[CLS]) to compare every role against;
- `top_word`, `pair_scores`: whether a head's strongest word from the from-word
  is the marked to-word, over minimal pairs (`sentences`);
- `wilson_interval`, `beats_nulls`: the held-out statistics of a role;
- `offset_score`, `previous_token_score`, `next_token_score`: how much of its
  attention a head puts on the token just before / after each query;
- `special_token_mass`: the attention parked on [CLS] and [SEP];
- `positional_scores`, `positional_attention`, `offset_margin`: the pattern a
  head would have from the position embeddings alone, read off the weights;
- `ablated` and `cosine_change`: remove heads through `head_mask` and measure
  what changes.

Conventions (notebook 00's notation): the encoder returns attention weights
(B, h, N, N) per layer (rows = queries); `stack_attentions` puts all heads
first, (layers, h, B, N, N), and the scores take any (..., B, N, N) or
(..., N, N), returning one number per leading index (e.g. (layers, h)).
`attention_mask` (B, N) is BERT's (1 = real token). Position 0 is [CLS],
position n_b - 1 of sentence b (n_b real tokens) is [SEP]; the scores ignore
both, and the padding.
"""

from __future__ import annotations

import math
import string
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from .encoder import EncoderOutput, MiniLMEncoder, mean_pool

if TYPE_CHECKING:
    from .sentences import MinimalPair

__all__ = [
    "NULL_NAMES",
    "TIE",
    "ablated",
    "beats_nulls",
    "cosine_change",
    "head_label",
    "next_token_score",
    "null_heads",
    "null_patterns",
    "offset_margin",
    "offset_score",
    "pair_scores",
    "positional_attention",
    "positional_scores",
    "previous_token_score",
    "special_token_mass",
    "stack_attentions",
    "top_heads",
    "top_word",
    "wilson_interval",
    "word_attention",
    "word_positions",
    "word_spans",
    "words",
]

_PUNCTUATION = string.punctuation + "“”‘’"


def head_label(layer: int, head: int) -> str:
    """'L3.H7': head 7 of layer 3, both counted from 0."""
    return f"L{layer}.H{head}"


def stack_attentions(out: EncoderOutput) -> Tensor:
    """The weights of all heads of an encoder output, heads first: (layers, h, B, N, N)."""
    return torch.stack(out.attentions).transpose(1, 2)  # (layers, h, B, N, N)


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
    """(B, N) bool: the real tokens other than [CLS] and [SEP]."""
    mask = attention_mask.bool()  # (B, N)
    n = mask.sum(dim=1, keepdim=True)  # (B, 1) real tokens per sentence
    position = torch.arange(mask.shape[1], device=mask.device)[None]  # (1, N)
    return mask & (position >= 1) & (position <= n - 2)  # (B, N)


def offset_score(A: Tensor, attention_mask: Tensor, offset: int) -> Tensor:
    """The mean weight a head puts on the token `offset` places away (-1: the previous one).

    A (..., B, N, N), e.g. (B, N, N) for one head or (layers, h, B, N, N) for
    all: every query i for which i and i + offset are both real words (not
    [CLS], [SEP] or padding) counts once, pooled over the batch. Returns the
    leading axes (...), e.g. () or (layers, h).
    """
    B, N = attention_mask.shape
    if tuple(A.shape[-3:]) != (B, N, N):
        raise ValueError(
            f"A has shape {tuple(A.shape)}; expected (..., B, N, N) = (..., {B}, {N}, {N})"
        )
    word = _real_queries(attention_mask)  # (B, N)
    i = torch.arange(N)
    j = i + offset
    ok = (j >= 0) & (j < N)  # (N,)
    valid = word[:, i[ok]] & word[:, j[ok]]  # (B, N'): query i and key i + offset both words
    w = A[..., i[ok], j[ok]]  # (..., B, N')
    return (w * valid).sum(dim=(-2, -1)) / valid.sum()


def previous_token_score(A: Tensor, attention_mask: Tensor) -> Tensor:
    """`offset_score` with offset -1: the weight each word puts on the word token before it."""
    return offset_score(A, attention_mask, -1)


def next_token_score(A: Tensor, attention_mask: Tensor) -> Tensor:
    """`offset_score` with offset +1: the weight each word puts on the token after it."""
    return offset_score(A, attention_mask, +1)


# ---------------------------------------------------------------------------- words, nulls, roles


def word_spans(sentence: str, offsets: list[tuple[int, int]]) -> list[tuple[str, list[int]]]:
    """Every word of the sentence, in order, with its token positions: [(word, [p, ...]), ...].

    Words as `words` sees them (split at spaces, punctuation around them
    stripped, lower case); a word may occur several times, each occurrence its
    own entry. Tokens of punctuation, [CLS], [SEP] and padding belong to no word.
    """
    spans, start = [], 0
    for piece in sentence.split(" "):
        core = piece.strip(_PUNCTUATION)
        if core:
            begin = start + piece.index(core)
            end = begin + len(core)
            pos = [i for i, (s, e) in enumerate(offsets) if e > s and s >= begin and e <= end]
            if pos:
                spans.append((core.lower(), pos))
        start += len(piece) + 1
    return spans


def _check_square(A: Tensor, name: str) -> None:
    """ValueError naming A unless its last two axes are a square (N, N) matrix."""
    if A.dim() < 2 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"{name} has shape {tuple(A.shape)}; expected (..., N, N)")


def word_attention(A: Tensor, spans: list[tuple[str, list[int]]]) -> Tensor:
    """A token attention matrix as a word attention matrix: A (..., N, N) -> (..., W, W).

    THE piece-combining rule of notebook 05, used by every word-level score:
    entry (u, w) is the MEAN over u's pieces (queries) of the MEAN over w's
    pieces (keys) of the weights. With a mean, a head that spreads its weight
    evenly gives every word the same weight, whatever its number of pieces (a
    sum would hand "didn't", three pieces, three times a one-piece word's weight).
    Rows no longer sum to 1 (they are per-piece averages).
    """
    _check_square(A, "A")
    N = A.shape[-1]
    last = max((p for _, pos in spans for p in pos), default=-1)
    if last >= N:
        raise ValueError(f"spans name token {last}; A has shape {tuple(A.shape)}, only N = {N}")
    M = torch.zeros(len(spans), N, dtype=A.dtype)  # (W, N): row u averages u's pieces
    for u, (_, pos) in enumerate(spans):
        M[u, pos] = 1.0 / len(pos)
    return M @ A @ M.T  # (W, N) @ (..., N, N) @ (N, W) -> (..., W, W)


TIE = 1e-6  # margins within this count as ties: float rounding must not break a uniform head's tie

NULL_NAMES = ("uniform", "offset -2", "offset -1", "offset +1", "offset +2", "[CLS]")


def null_patterns(n: int, N: int | None = None) -> dict[str, Tensor]:
    """The null heads' (N, N) patterns for a sentence of n real tokens ([CLS] ... [SEP]).

    Heads with no role, to compare every role against: "uniform" (every row
    spreads evenly over the n real tokens), "offset k" for k = -2, -1, +1, +2
    (token i looks at token i + k, clipped to the sentence), "[CLS]" (every
    row on position 0). N >= n pads with rows and columns that no score reads
    (padding rows copy the uniform row; no weight on padding keys).
    """
    N = n if N is None else N
    if n < 1 or N < n:
        raise ValueError(f"n = {n}, N = {N}; expected 1 <= n <= N")
    uniform = torch.zeros(N, N)
    uniform[:, :n] = 1.0 / n  # (N, N)
    out = {"uniform": uniform}
    rows = torch.arange(N)
    for k in (-2, -1, +1, +2):
        P = torch.zeros(N, N)
        P[rows, (rows + k).clamp(0, n - 1)] = 1.0  # (N, N): i -> i + k inside the sentence
        out[f"offset {k:+d}"] = P
    cls = torch.zeros(N, N)
    cls[:, 0] = 1.0
    out["[CLS]"] = cls
    return out


def null_heads(attention_mask: Tensor) -> Tensor:
    """The null patterns for a padded batch, stacked like heads: (len(NULL_NAMES), B, N, N)."""
    N = attention_mask.shape[1]
    per_sentence = [null_patterns(int(n), N) for n in attention_mask.sum(dim=1)]
    return torch.stack(
        [torch.stack([p[name] for p in per_sentence]) for name in NULL_NAMES]
    )  # (nulls, B, N, N)


def _marked_word(spans: list[tuple[str, list[int]]], word: str, sentence: str) -> int:
    """The index in spans of a marked word, which must occur exactly once."""
    found = [u for u, (w, _) in enumerate(spans) if w == word.lower()]
    if len(found) != 1:
        raise ValueError(f"word {word!r} occurs {len(found)} times in {sentence!r}; expected once")
    return found[0]


def _margin(Aw: Tensor, src: int, dst: int) -> Tensor:
    """Word weight of dst minus the largest of every other candidate, from src: (...).

    Candidates: every word occurrence of the sentence except src itself (a
    repeated word such as "the" is a candidate each time). > 0 means dst is
    strictly the top word; a tie (a uniform head, a head on [CLS]) gives 0 up to
    rounding, which is why a pair counts as right only for a margin above TIE.
    """
    row = Aw[..., src, :]  # (..., W)
    others = torch.ones(row.shape[-1], dtype=torch.bool)
    others[[src, dst]] = False
    return row[..., dst] - row[..., others].max(dim=-1).values


def top_word(A: Tensor, sentence: str, offsets: list[tuple[int, int]], src: str) -> str | None:
    """The word to which one head, A (N, N), gives strictly the most weight from the word src
    (`word_attention`'s mean rule; every other word occurrence is a candidate), or None on a
    tie for the top (as for a uniform head)."""
    spans = word_spans(sentence, offsets)
    s = _marked_word(spans, src, sentence)
    row = word_attention(A, spans)[s].clone()  # (W,)
    row[s] = -1.0
    tops = (row > row.max() - TIE).nonzero().flatten()
    return spans[int(tops[0])][0] if len(tops) == 1 else None


def pair_scores(
    A: Tensor,
    texts: list[str],
    offsets: list[list[tuple[int, int]]],
    pairs: list[MinimalPair],
    reverse: bool = False,
) -> tuple[Tensor, Tensor]:
    """Score heads (or null heads) for a role on minimal pairs: (right, margin), each (P, ...).

    A (..., B, N, N): the weights of any stack of heads (e.g. (layers, h) or the
    nulls) for the batch `texts`, with their token `offsets`. For each pair and
    both of its sentences, the word matrix (`word_attention`) gives the weight
    from the marked src word to every other word; reverse=True swaps src and dst.
    right (P, ...) bool: dst is strictly the top word (by more than TIE) in BOTH sentences.
    margin (P, ...) float: the mean over the two sentences of (weight on dst -
    the largest weight on any other word), a tie-breaker for ranking heads.
    """
    right, margin = [], []
    for pair in pairs:
        m = []
        for marked in (pair.a, pair.b):
            b = texts.index(marked.sentence)
            spans = word_spans(marked.sentence, offsets[b])
            src = _marked_word(spans, marked.src, marked.sentence)
            dst = _marked_word(spans, marked.dst, marked.sentence)
            if reverse:
                src, dst = dst, src
            m.append(_margin(word_attention(A[..., b, :, :], spans), src, dst))  # (...)
        right.append((m[0] > TIE) & (m[1] > TIE))
        margin.append((m[0] + m[1]) / 2)
    return torch.stack(right), torch.stack(margin)  # (P, ...) each


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval (95 % for z = 1.96) for k successes in n trials."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"k = {k}, n = {n}; expected 0 <= k <= n and n >= 1")
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def beats_nulls(k: int, n: int, null_k: list[int], bar: float = 0.75) -> bool:
    """The rule for crediting a role, on held-out pairs: k of n right for the head,
    null_k for the null heads on the same pairs. True when the head gets more pairs right
    than every null, the lower end of its 95 % Wilson interval is above the best null's
    rate, and it gets at least `bar` of the pairs right."""
    best_null = max(null_k)
    return k > best_null and wilson_interval(k, n)[0] > best_null / n and k >= bar * n


def special_token_mass(A: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
    """The mean weight the words put on [CLS] and on [SEP]: A (..., B, N, N) -> two (...)."""
    word = _real_queries(attention_mask)  # (B, N)
    N = attention_mask.shape[1]
    sep = attention_mask.sum(dim=1) - 1  # (B,) position of [SEP]
    is_sep = torch.arange(N)[None] == sep[:, None]  # (B, N)
    on_cls = A[..., 0]  # (..., B, N): each query's weight on key 0
    on_sep = (A * is_sep[:, None, :]).sum(dim=-1)  # (..., B, N)
    total = word.sum()
    return (on_cls * word).sum(dim=(-2, -1)) / total, (on_sep * word).sum(dim=(-2, -1)) / total


# ---------------------------------------------------------------------------- from the weights


def positional_scores(model: MiniLMEncoder, N: int = 32) -> Tensor:
    """The attention scores each head would have from positions alone: (layers, h, N, N).

    P (N, C) are the first N position embeddings, layer-normalised as the
    embedding layer does. For head i of layer l, scores =
    (P W_Q^h + b_Q^h)(P W_K^h + b_K^h)ᵀ / √d_k, before the softmax. The
    approximation: the real input of layer 0 is LayerNorm(word + position +
    token type), not LayerNorm(position) (the normalisation of the sum is not
    a sum, and the word x position cross terms of the scores are dropped); for
    layers above 0 it also ignores everything the layers below have written.
    No sentence is run.
    """
    emb = model.embeddings
    with torch.no_grad():
        P = emb.norm(emb.position_embeddings.weight[:N])  # (N, C)
        scores = []
        for layer in model.layers:
            attn = layer.self_attn
            x = P[None]  # (1, N, C)
            q, k, _ = attn._project(x, x, x, True, True)  # (1, h, N, d_k) each: P W^h + b^h
            scores.append(q[0] @ k[0].transpose(1, 2) / math.sqrt(attn.head_dim))  # (h, N, N)
    return torch.stack(scores)  # (layers, h, N, N)


def positional_attention(model: MiniLMEncoder, N: int = 32) -> Tensor:
    """softmax of `positional_scores`: the pattern from positions alone, (layers, h, N, N)."""
    return torch.softmax(positional_scores(model, N), dim=-1)


def offset_margin(scores: Tensor, offset: int) -> Tensor:
    """How far the key at `offset` wins: scores (..., N, N) -> (...).

    For every query i with i + offset inside 1 .. N - 1 (position 0, [CLS], is
    left out as a key and a query), the score of key i + offset minus the
    largest score of any other key (except 0), averaged over i. Unlike the
    softmax weight, which saturates at 1, this keeps separating heads: a margin
    of 5 means the neighbour is e^5 ≈ 150 times as likely as the runner-up.
    """
    _check_square(scores, "scores")
    N = scores.shape[-1]
    i = torch.arange(1, N)
    i = i[(i + offset >= 1) & (i + offset < N)]
    s = scores[..., 1:, 1:]  # (..., N-1, N-1): no [CLS]
    rows = s[..., i - 1, :]  # (..., n_i, N-1)
    target = rows.gather(-1, (i + offset - 1).expand(*rows.shape[:-1]).unsqueeze(-1))[..., 0]
    others = rows.clone()
    others.scatter_(-1, (i + offset - 1).expand(*rows.shape[:-1]).unsqueeze(-1), -math.inf)
    return (target - others.max(dim=-1).values).mean(dim=-1)


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
    a = mean_pool(base.last_hidden_state, attention_mask)  # (B, C)
    b = mean_pool(other.last_hidden_state, attention_mask)  # (B, C)
    return 1.0 - torch.nn.functional.cosine_similarity(a, b, dim=-1)  # (B,)
