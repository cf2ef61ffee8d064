"""Checkers for notebook 05 (the heads of a pretrained model).

- `check_previous_token_score(fn)`: fn(A (B, T, T), attention_mask (B, T)) -> one number,
  the mean weight that each word puts on the token just before it, pooled over the
  batch, ignoring [CLS], [SEP] and the padding;
- `check_word_positions(fn)`: fn(sentence, offsets, word) -> the token positions of a
  word in the tokenised sentence.

torch (and, for `check_word_positions`, the model's tokenizer) are imported when a
checker runs, so `import mha_lib.exercises` stays numpy-only.
"""

from __future__ import annotations

import numpy as np

from ._base import report, run

__all__ = ["check_previous_token_score", "check_word_positions"]


# ---------------------------------------------------------------------------- previous-token score

_LENGTHS, _T = (6, 4, 8, 5), 9  # real tokens per sentence ([CLS] ... [SEP]), padded to T


def _score_cases():
    """(A (B, T, T), attention_mask (B, T)) pairs: random weights, different lengths."""
    import torch

    g = torch.Generator().manual_seed(5)
    mask = (torch.arange(_T)[None] < torch.tensor(_LENGTHS)[:, None]).long()  # (B, T)
    scores = 3.0 * torch.randn(len(_LENGTHS), _T, _T, generator=g, dtype=torch.float64)
    scores = scores.masked_fill(mask[:, None, :] == 0, float("-inf"))  # no weight on padding
    A = torch.softmax(scores, dim=-1)  # (B, T, T)
    A_small = A[:2, :6, :6].clone() / A[:2, :6, :6].sum(-1, keepdim=True)  # B = 2, T = 6
    return [(A, mask), (A_small, mask[:2, :6])]


def _pairs_mean(A, mask, queries, offset: int, per_sentence: bool = False) -> float:
    """Mean of A[b, i, i + offset] over the (b, i) for which queries(b, n) holds (a variant
    family used to name mistakes)."""
    values = []
    for b in range(A.shape[0]):
        n = int(mask[b].sum())
        row = [float(A[b, i, i + offset]) for i in queries(n, A.shape[-1]) if 0 <= i + offset]
        values.append(row)
    if per_sentence:
        return float(np.mean([np.mean(v) for v in values if v]))
    return float(np.mean([x for v in values for x in v]))


def _score_mistakes(A, mask) -> dict[str, float]:
    words = lambda n, T: range(2, n - 1)  # noqa: E731  queries i with i - 1 and i both words
    return {
        "the first word's weight on [CLS] is counted: [CLS] is not the previous WORD, so start "
        "at the second word (position 2)": _pairs_mean(A, mask, lambda n, T: range(1, n - 1), -1),
        "[SEP] is counted as a query: stop at the last word (position n - 2)": _pairs_mean(
            A, mask, lambda n, T: range(2, n), -1
        ),
        "the padding is counted: use attention_mask (1 = real token) to keep each sentence's "
        "own tokens": _pairs_mean(A, mask, lambda n, T: range(2, T), -1),
        "[CLS], [SEP] and padding are all counted: keep only real words as query and key": (
            _pairs_mean(A, mask, lambda n, T: range(1, T), -1)
        ),
        "this is the NEXT-token score (A[b, i, i+1], or A[b, i-1, i]): rows are queries, so "
        "the previous token of query i is column i - 1": _pairs_mean(
            A, mask, lambda n, T: range(1, n - 2), +1
        ),
        "this is each token's weight on itself (the diagonal), not on the token before it": (
            _pairs_mean(A, mask, lambda n, T: range(1, n - 1), 0)
        ),
        "each sentence is averaged first, then the sentences: pool all (sentence, word) pairs "
        "into one mean, so that a long sentence counts with all its words": _pairs_mean(
            A, mask, words, -1, per_sentence=True
        ),
    }


def _as_number(result) -> tuple[float | None, str | None]:
    """A learner's answer as one finite float (number, 0-d or 1-element array or tensor)."""
    try:
        if hasattr(result, "detach"):
            result = result.detach().cpu().numpy()
        arr = np.asarray(result)
        if arr.dtype.kind not in "iuf":  # not real numbers (complex, text, objects)
            raise TypeError
        value = float(arr.reshape(()))
    except Exception:  # anything that is not one real number
        return None, f"expected one number; got {type(result).__name__}"
    if not np.isfinite(value):
        return None, f"expected a finite number; got {value}"
    return value, None


def check_previous_token_score(fn) -> bool:
    """Check fn(A (B, T, T), attention_mask (B, T)) -> the pooled previous-token score."""
    from ..head_roles import previous_token_score

    name = "previous_token_score"
    problem = None
    for A, mask in _score_cases():
        expected = float(previous_token_score(A, mask))
        result, problem = run(fn, A.clone(), mask.clone())
        if problem is None:
            value, problem = _as_number(result)
        if problem is None and not np.isclose(value, expected, rtol=1e-6, atol=1e-9):
            mistakes = _score_mistakes(A, mask)
            problem = next(
                (msg for msg, wrong in mistakes.items() if np.isclose(value, wrong, atol=1e-9)),
                f"got {value:.4f}; expected {expected:.4f}: the mean of A[b, i, i-1] over the "
                "words i (positions 2 .. n_b - 2) of every sentence b",
            )
        if problem is not None:
            break
    return report(name, problem)


# ---------------------------------------------------------------------------- word positions

_WORD_CASES = (
    ("The animal didn't cross the street because it was too tired.", "street"),
    ("The animal didn't cross the street because it was too tired.", "didn't"),
    ("The animal didn't cross the street because it was too tired.", "tired"),
    ("Tokenizers split unbelievably long words.", "tokenizers"),
    ("Tokenizers split unbelievably long words.", "unbelievably"),
)


def _word_mistakes(sentence, offsets, word, right: list[int]) -> dict[tuple, str]:
    ws = [p.strip(".,!?;:'\"").lower() for p in sentence.split(" ")]
    k = ws.index(word.lower())
    full_stop = [i for i, (s, e) in enumerate(offsets) if sentence[s:e] == "." and e > s]
    mistakes: dict[tuple, str] = {}
    for wrong, message in (
        (
            right[:1],
            "only the first WordPiece: a word can be several tokens (didn't -> didn ' t); "
            "return every token inside the word",
        ),
        (
            [p - 1 for p in right],
            "off by one: position 0 is [CLS], so the first word is at position 1",
        ),
        (
            [k],
            "that is the word's index among the words, not a token position: count tokens "
            "(position 0 is [CLS], and one word may be several tokens)",
        ),
        (
            [k + 1],
            "that is the word's index among the words (+1 for [CLS]), not its token positions: "
            "a word before it was split into several tokens",
        ),
        (
            sorted(set(right) | {f for f in full_stop if f == right[-1] + 1}),
            "the full stop is counted: strip the punctuation around the word ('tired.' -> 'tired')",
        ),
        (right + [right[-1] + 1], "one token too many: the word ends where its characters end"),
    ):
        mistakes.setdefault(tuple(wrong), message)  # the first, most likely, reading wins
    mistakes.pop(tuple(right), None)
    return mistakes


def _as_positions(result) -> tuple[list[int] | None, str | None]:
    """A learner's answer as a list of ints (a list, tuple, array or tensor of integers)."""
    try:
        if hasattr(result, "detach"):
            result = result.detach().cpu().tolist()
        if isinstance(result, (str, bytes)):
            raise TypeError
        items = list(np.asarray(result).reshape(-1)) if isinstance(result, np.ndarray) else result
        got = []
        for p in items:
            if isinstance(p, bool) or not isinstance(p, (int, np.integer)):
                raise TypeError
            got.append(int(p))
    except Exception:  # anything that is not a sequence of ints
        return None, f"expected a list of token positions (ints); got {type(result).__name__}"
    return got, None


def check_word_positions(fn) -> bool:
    """Check fn(sentence, offsets, word) -> token positions of word (a list of ints)."""
    from ..head_roles import word_positions
    from ..pretrained import tokenize

    name = "word_positions"
    problem = None
    for sentence, word in _WORD_CASES:
        offsets = tokenize(sentence).offsets[0]
        right = word_positions(sentence, offsets, word)
        result, problem = run(fn, sentence, list(offsets), word)
        if problem is None:
            got, problem = _as_positions(result)
        if problem is None and got != right:
            if not got:
                problem = (
                    f"no positions for {word!r}: compare the words case-insensitively "
                    "(the sentence may write it with a capital)"
                )
            else:
                mistakes = _word_mistakes(sentence, offsets, word, right)
                problem = mistakes.get(
                    tuple(got),
                    f"for {word!r} in {sentence!r} got {got}; expected {right}",
                )
        if problem is not None:
            break
    return report(name, problem)
