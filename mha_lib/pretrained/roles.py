"""Measuring what the heads of a pretrained encoder do (notebook 05).

What it holds:
- `head_label(l, i)`: "L3.H7" for head i of layer l (both counted from 0);
  `stack_attentions` and `top_heads` to collect and rank all heads;
- `word_positions`, `words`, `word_spans`: the WordPiece token positions of a
  hand-marked word, and the words of a sentence with their tokens;
- `word_attention`: THE rule that turns a token matrix into a word matrix (a
  word's pieces are combined by their MEAN, as query and as key), used by every
  word-level score here;
- `null_patterns`, `null_heads`: heads with no role (uniform, fixed token
  offsets -2, -1, +1, +2, always-[CLS]) to compare every role against;
- `baseline_patterns`, `baseline_heads`: the positional baselines of Clark et
  al. 2019 at the word level (first word, last word, the word k places away,
  k = -4 .. +4), scored like heads;
- `top_word`, `pair_scores`: whether a head's strongest word from the from-word
  is the marked to-word, over minimal pairs (`sentences`);
- `wilson_interval`, `beats_rivals`: the held-out statistics of a role and THE
  rule that credits it (the head's interval wholly above the best rival's);
- `LINKS`, `judge`, `Verdict`, `credited_heads`, `CREDITED`: every link of
  notebook 05 chosen on one half of its pairs and judged on the other, and the
  verdict as data, {role: (layer, head)};
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
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..nn.circuits import previous_token_score as _previous_token_score
from ..nn.circuits import stripe_score
from ..stats import wilson_interval
from .encoder import EncoderOutput, MiniLMEncoder, mean_pool, run_in_chunks
from .sentences import PAIRS, split

if TYPE_CHECKING:
    from .sentences import MinimalPair

__all__ = [
    "BAR",
    "BASELINE_NAMES",
    "CREDITED",
    "LINKS",
    "NULL_NAMES",
    "OFFSETS",
    "TIE",
    "Verdict",
    "ablated",
    "baseline_heads",
    "baseline_patterns",
    "beats_rivals",
    "cosine_change",
    "credited_heads",
    "head_label",
    "judge",
    "next_token_score",
    "null_heads",
    "null_patterns",
    "offset_margin",
    "offset_score",
    "pair_scores",
    "parse_head",
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
    w, lead = _heads_second(A, attention_mask)
    word = _real_queries(attention_mask)  # (B, N)
    return stripe_score(w, offset, max(-offset, 0), valid=word)[0].reshape(lead)


def _heads_second(A: Tensor, attention_mask: Tensor) -> tuple[Tensor, tuple[int, ...]]:
    """A (..., B, N, N) as the (1, B, K, N, N) weights of `mha_lib.nn.circuits`, K the heads
    of the leading axes (...), which are returned too."""
    B, N = attention_mask.shape
    if tuple(A.shape[-3:]) != (B, N, N):
        raise ValueError(
            f"A has shape {tuple(A.shape)}; expected (..., B, N, N) = (..., {B}, {N}, {N})"
        )
    lead = tuple(A.shape[:-3])
    return A.reshape(-1, B, N, N).transpose(0, 1)[None], lead  # (1, B, K, N, N)


def previous_token_score(A: Tensor, attention_mask: Tensor) -> Tensor:
    """`offset_score` with offset -1: the weight each word puts on the word token before it
    (`mha_lib.nn.circuits.previous_token_score` over the real words)."""
    w, lead = _heads_second(A, attention_mask)
    word = _real_queries(attention_mask)  # (B, N)
    return _previous_token_score(w, valid=word)[0].reshape(lead)


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
            if len(spans) < 3:
                raise ValueError(
                    f"{marked.sentence!r} has {len(spans)} words; expected at least 3 (the two "
                    "marked words and one other for the to-word to beat)"
                )
            src = _marked_word(spans, marked.src, marked.sentence)
            dst = _marked_word(spans, marked.dst, marked.sentence)
            if reverse:
                src, dst = dst, src
            m.append(_margin(word_attention(A[..., b, :, :], spans), src, dst))  # (...)
        right.append((m[0] > TIE) & (m[1] > TIE))
        margin.append((m[0] + m[1]) / 2)
    return torch.stack(right), torch.stack(margin)  # (P, ...) each


# ---------------------------------------------------------------------------- positional baselines

OFFSETS = (-4, -3, -2, -1, +1, +2, +3, +4)  # word offsets of the positional baselines
BASELINE_NAMES = ("first word", "last word", *(f"word {k:+d}" for k in OFFSETS))


def _word_target(name: str, u: int, W: int) -> int | None:
    """The word a positional baseline attends to from word u of W, or None (no such word)."""
    if name == "first word":
        return 0
    if name == "last word":
        return W - 1
    t = u + int(name.split()[1])
    return t if 0 <= t < W else None


def baseline_patterns(
    sentence: str, offsets: list[tuple[int, int]], n: int, N: int | None = None
) -> dict[str, Tensor]:
    """The positional baselines' (N, N) patterns for one sentence of n real tokens.

    Word-level baselines as in Clark et al. 2019 ("What does BERT look at?",
    Table 1): from every word, all the weight on the FIRST word of the
    sentence, on the LAST word, or on the word k places away, k = -4 .. +4
    (k != 0), words as `word_spans` sees them (punctuation is not a word).
    Every piece of the from-word puts its weight evenly on the pieces of the
    target word, so `word_attention` (the mean rule) makes the target the
    strictly top word, and `pair_scores` scores a baseline exactly as it scores
    a head. Where the target does not exist (word u + k outside the sentence)
    the row spreads evenly over the real tokens: a tie, no answer. Rows that
    are not words ([CLS], [SEP], punctuation, padding) are uniform too; no
    score reads them. Returns {name: (N, N)} in the order of BASELINE_NAMES.
    """
    N = n if N is None else N
    if n < 1 or N < n:
        raise ValueError(f"n = {n}, N = {N}; expected 1 <= n <= N")
    spans = word_spans(sentence, offsets)
    W = len(spans)
    out = {}
    for name in BASELINE_NAMES:
        P = torch.zeros(N, N)
        P[:, :n] = 1.0 / n  # (N, N): uniform rows, overwritten for every word with a target
        for u, (_, pos) in enumerate(spans):
            t = _word_target(name, u, W)
            if t is None:
                continue
            target = spans[t][1]
            for p in pos:
                P[p] = 0.0
                P[p, target] = 1.0 / len(target)
        out[name] = P
    return out


def baseline_heads(
    texts: list[str], offsets: list[list[tuple[int, int]]], attention_mask: Tensor
) -> Tensor:
    """The positional baselines for a padded batch, stacked like heads:
    (len(BASELINE_NAMES), B, N, N), to be scored by `pair_scores` like any head."""
    N = attention_mask.shape[1]
    per_sentence = [
        baseline_patterns(t, o, int(n), N)
        for t, o, n in zip(texts, offsets, attention_mask.sum(dim=1))
    ]
    return torch.stack(
        [torch.stack([p[name] for p in per_sentence]) for name in BASELINE_NAMES]
    )  # (baselines, B, N, N)


# ---------------------------------------------------------------------------- crediting a role

BAR = 0.75  # a credited head gets at least 3 in 4 held-out pairs right


def beats_rivals(k: int, n: int, rival_k: list[int], bar: float = BAR) -> bool:
    """THE rule for crediting a role, on held-out pairs: k of n right for the head, rival_k
    for every rival (the null heads and the positional baselines) on the same n pairs.

    True when the head gets at least `bar` of the pairs right AND the lower end of its 95 %
    Wilson interval lies above the upper end of the best rival's (the two intervals do not
    overlap): the margin by which a role must beat every shortcut. With the best rival at
    0 of 20, the head needs 15 of 20 (the bar); with a rival at 10 of 20, it needs 19.
    """
    if not rival_k:
        raise ValueError("rival_k is empty; expected the rivals' counts on the same pairs")
    best = max(rival_k)
    return k >= bar * n and wilson_interval(k, n)[0] > wilson_interval(best, n)[1]


# name in notebook 05 -> (role in PAIRS, scored backwards, from the to-word to the from-word?)
LINKS = {
    "coreference: it -> referent": ("coreference", False),
    "negation: didn't -> verb": ("negation", False),
    "negation: verb -> didn't": ("negation", True),
    "preposition -> object": ("preposition", False),
    "agreement: verb -> subject": ("agreement", False),
    "agreement: subject -> verb": ("agreement", True),
    "object: verb -> object": ("object", False),
    "similarity: noun -> similar": ("similarity", False),
}


def parse_head(label: str) -> tuple[int, int]:
    """'L3.H7' -> (3, 7), the inverse of `head_label`."""
    layer, head = label.removeprefix("L").split(".H")
    return int(layer), int(head)


@dataclass(frozen=True)
class Verdict:
    """One link judged on minimal pairs: the head chosen on the selection half, its count
    there and on the held-out half, every rival's held-out count, and the best few heads."""

    link: str  # a key of LINKS
    head: str  # the head chosen on the selection half, "L3.H1"
    k_sel: int  # its pairs right on the selection half, of n_sel
    n_sel: int
    k_out: int  # its pairs right on the held-out half, of n_out
    n_out: int
    rivals: dict[str, int]  # null heads and positional baselines: held-out pairs right
    candidates: list[tuple[str, int, int]]  # the best heads on selection: (label, k_sel, k_out)

    @property
    def interval(self) -> tuple[float, float]:
        """The 95 % Wilson interval of the chosen head's held-out count."""
        return wilson_interval(self.k_out, self.n_out)

    @property
    def best_rival(self) -> tuple[str, int]:
        """The rival with the most held-out pairs right (the first on a tie)."""
        return max(self.rivals.items(), key=lambda kv: kv[1])

    @property
    def credited(self) -> bool:
        """`beats_rivals` on the held-out pairs."""
        return beats_rivals(self.k_out, self.n_out, list(self.rivals.values()))


def judge(
    A: Tensor,
    rivals: dict[str, Tensor],
    texts: list[str],
    offsets: list[list[tuple[int, int]]],
    link: str,
    pairs: list[MinimalPair] | None = None,
    k: int = 3,
    swap: bool = False,
) -> Verdict:
    """Judge one link (a key of LINKS): choose on one half of its pairs, report on the other.

    A (layers, h, B, N, N): every head on the batch `texts`; rivals: {name: (B, N, N)}
    (the null heads and the positional baselines, scored the same way). pairs: the
    role's pairs (default PAIRS[role]); `split` cuts them into a selection half, where
    the head with the most pairs right (ties: the larger mean margin) is chosen, and a
    held-out half, where it and every rival are counted. candidates: the k best heads
    on the selection half with both counts, so that a reader sees whether the choice
    hinged on one pair. swap=True exchanges the halves (chosen on the odd pairs, reported
    on the even ones), to see whether the verdict depends on the split.
    """
    if link not in LINKS:
        raise ValueError(f"link {link!r} is not one of LINKS: {', '.join(map(repr, LINKS))}")
    role, reverse = LINKS[link]
    selection, held_out = split(PAIRS[role] if pairs is None else pairs)
    if swap:
        selection, held_out = held_out, selection
    r_sel, m_sel = pair_scores(A, texts, offsets, selection, reverse)  # (P_s, layers, h)
    r_out, _ = pair_scores(A, texts, offsets, held_out, reverse)  # (P_o, layers, h)
    R = torch.stack(list(rivals.values()))  # (rivals, B, N, N)
    r_riv, _ = pair_scores(R, texts, offsets, held_out, reverse)  # (P_o, rivals)
    k_sel, k_out = r_sel.sum(0), r_out.sum(0)  # (layers, h) each
    key = k_sel + 0.49 * m_sel.mean(0)  # most pairs right; the margin (|m| < 1) breaks ties
    best = [label for label, _ in top_heads(key, k)]
    candidates = [(b, int(k_sel[parse_head(b)]), int(k_out[parse_head(b)])) for b in best]
    head, ks, ko = candidates[0]
    counts = {name: int(c) for name, c in zip(rivals, r_riv.sum(0))}
    return Verdict(link, head, ks, len(selection), ko, len(held_out), counts, candidates)


def credited_heads(verdicts: dict[str, Verdict]) -> dict[str, tuple[int, int]]:
    """The verdict as data: {role (a key of ROLES): (layer, head)} for every link scored
    forwards, as the role is defined, that is credited; the form of `CREDITED`."""
    return {
        LINKS[name][0]: parse_head(v.head)
        for name, v in verdicts.items()
        if not LINKS[name][1] and v.credited
    }


# notebook 05's verdict: the head chosen on the selection half of each role's pairs, credited
# by `beats_rivals` on the held-out half. Recomputed by tests/pretrained/test_roles.py and by
# the notebook, which both assert that they find exactly this.
CREDITED: dict[str, tuple[int, int]] = {
    "preposition": (3, 1),  # L3.H1
    "object": (3, 1),  # L3.H1
    "similarity": (1, 1),  # L1.H1
}


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
            q, k, _ = attn.project(x)  # (1, h, N, d_k) each: P W^h + b^h
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
    before W_O (head_mask 0), everything else unchanged (`run_in_chunks`: a few sentences at a
    time, into preallocated outputs)."""
    L, h = len(model.layers), model.num_heads
    head_mask = torch.ones(L, h)  # (layers, h)
    for layer, head in heads:
        head_mask[layer, head] = 0.0
    return run_in_chunks(model, input_ids, attention_mask, head_mask=head_mask)


def cosine_change(base: EncoderOutput, other: EncoderOutput, attention_mask: Tensor) -> Tensor:
    """1 - cos between the mean-pooled sentence vectors of two runs: (B,)."""
    a = mean_pool(base.last_hidden_state, attention_mask)  # (B, C)
    b = mean_pool(other.last_hidden_state, attention_mask)  # (B, C)
    return 1.0 - torch.nn.functional.cosine_similarity(a, b, dim=-1)  # (B,)
