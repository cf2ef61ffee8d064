"""The segmentation SentencePiece's unigram model defines, beside the one llama.cpp computes.

Derived in notebook 15. A SentencePiece vocabulary gives each piece a score (a log
probability); the unigram model's segmentation of a word is the one whose pieces' scores add
up highest. llama.cpp (and `SentencePieceTokenizer`, which follows it) does not search for it:
it merges the best-scored adjacent pair, again and again (`sentencepiece`). The two differ on
many words; `best_total_pieces` finds the other one by dynamic programming (Viterbi) over the
word's characters, so that a notebook can show a word where they differ.

What it holds: `best_total_pieces(tokenizer, word) -> list[str]`, `total_score(tokenizer,
pieces) -> float`. Plain Python.
"""

from __future__ import annotations

__all__ = ["best_total_pieces", "total_score"]

NORMAL = 1  # tokenizer.ggml.token_type of an ordinary piece


def best_total_pieces(tokenizer, word: str) -> list[str]:
    """The pieces of the vocabulary's ordinary tokens that spell word ('▁' for a space) with
    the highest total score: best[i] = max over j < i of best[j] + score(word[j:i]). Raises
    if no such segmentation exists (a character with no piece of its own)."""
    if not word:
        raise ValueError("word is empty")
    vocab, scores, types = tokenizer.vocab, tokenizer.scores, tokenizer.token_types
    best: list[tuple[float, int] | None] = [(0.0, 0)] + [None] * len(word)  # (score, start)
    for i in range(1, len(word) + 1):
        for j in range(i):
            token = vocab.get(word[j:i])
            if best[j] is None or token is None or types[token] != NORMAL:
                continue
            total = best[j][0] + scores[token]
            if best[i] is None or total > best[i][0]:
                best[i] = (total, j)
    if best[-1] is None:
        raise ValueError(f"{word!r} cannot be spelled with the vocabulary's ordinary pieces")
    pieces, i = [], len(word)
    while i > 0:
        j = best[i][1]
        pieces.append(word[j:i])
        i = j
    return pieces[::-1]


def total_score(tokenizer, pieces) -> float:
    """The sum of the pieces' scores."""
    return float(sum(tokenizer.scores[tokenizer.vocab[p]] for p in pieces))
