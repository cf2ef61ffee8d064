"""Checkers for notebook 05 (the heads of a pretrained model).

- `check_previous_token_score(fn)`: fn(A (B, T, T), attention_mask (B, T)) -> one number,
  the mean weight that each word puts on the token just before it, pooled over the
  batch, ignoring [CLS], [SEP] and the padding;
- `check_word_positions(fn)`: fn(sentence, offsets, word) -> the token positions of a
  word in the tokenised sentence;
- `check_minimal_pair(fn)`: fn() -> a minimal pair of the learner's own, a head, a link
  and a predicted direction; the checker runs the model and judges the pair and the
  prediction.

torch (and, for `check_word_positions`, the model's tokenizer) are imported when a
checker runs, so `import mha_lib.exercises` stays numpy-only.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from ._base import Note, report, run

__all__ = ["check_minimal_pair", "check_previous_token_score", "check_word_positions"]


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


def _score_mistakes(A, mask) -> list[tuple[str, float]]:
    """The wrong scores a learner's reading of the exercise can give, each named by its
    mistakes: which queries (first .. last), which key (offset), pooled or per sentence."""
    T = A.shape[-1]
    ranges = {  # (first query, last query + 1 as a function of n and T): what goes wrong
        "words": (2, lambda n: n - 1, None),
        "cls": (
            1,
            lambda n: n - 1,
            "the first word's weight on [CLS] is counted: [CLS] is not "
            "the previous WORD, so start at the second word (position 2)",
        ),
        "sep": (
            2,
            lambda n: n,
            "[SEP] is counted as a query: stop at the last word (position n - 2)",
        ),
        "cls+sep": (
            1,
            lambda n: n,
            "[CLS] and [SEP] are counted: keep only real words as "
            "query and key (positions 2 .. n - 2)",
        ),
        "pad": (
            2,
            lambda n: T - 1,
            "the padding is ignored: every sentence has its own "
            "length n_b = attention_mask[b].sum(), so stop at each sentence's last word",
        ),
        "pad+sep": (
            2,
            lambda n: T,
            "the padding is counted: use attention_mask (1 = real "
            "token) to keep each sentence's own tokens",
        ),
        "all": (
            1,
            lambda n: T,
            "[CLS], [SEP] and padding are all counted: keep only real words as query and key",
        ),
    }
    offsets = {
        -1: None,
        +1: "this is the NEXT-token score (A[b, i, i+1], or A[b, i-1, i]): rows are queries, "
        "so the previous token of query i is column i - 1",
        0: "this is each token's weight on itself (the diagonal), not on the token before it",
    }
    mistakes: list[tuple[str, float]] = []
    for offset, offset_msg in offsets.items():
        for first, last, range_msg in ranges.values():
            for per_sentence in (False, True):
                parts = [m for m in (offset_msg, range_msg) if m]
                if per_sentence:
                    parts.append(
                        "each sentence is averaged first, then the sentences: pool all "
                        "(sentence, word) pairs into one mean, so that a long sentence counts "
                        "with all its words"
                    )
                if not parts:
                    continue  # the right answer
                start = first if offset >= 0 else max(first, -offset)
                queries = lambda n, T, s=start, e=last: range(s, min(e(n), T - max(offset, 0)))  # noqa: E731
                try:
                    value = _pairs_mean(A, mask, queries, offset, per_sentence)
                except (ValueError, ZeroDivisionError):
                    continue
                mistakes.append(("; and ".join(parts), value))
    # the NEXT-token score as the notebook defines it (queries 1 .. n - 3)
    mistakes.append((offsets[+1], _pairs_mean(A, mask, lambda n, T: range(1, n - 2), +1)))
    return sorted(mistakes, key=lambda mv: mv[0].count("; and "))  # single mistakes first


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
    from ..pretrained.roles import previous_token_score

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
                (msg for msg, wrong in mistakes if np.isclose(value, wrong, atol=1e-9)),
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
    ("The trophy didn't fit in the suitcase because it was too big.", "it"),  # "fit" has "it"
)

_STRIP = ".,!?;:'\""
_FIND_MISTAKE = (
    "the first match of the letters is inside an earlier word ({word!r} inside {host!r}): "
    "sentence.find(word) finds a substring, not a word; split the sentence into words and "
    "compare whole words"
)


def _find_answers(sentence, offsets, word) -> tuple[str | None, list[list[int]]]:
    """What sentence.lower().find(word) leads to when the first match of the letters is
    inside another word: that word, and the token positions a learner would then return
    (the tokens inside the match, or those overlapping it). (None, []) otherwise."""
    begin = sentence.lower().find(word.lower())
    if begin < 0:
        return None, []
    end = begin + len(word)
    host = next((p.strip(_STRIP) for p, s, e in _pieces_at(sentence) if s <= begin < e), None)
    if host is None or host.lower() == word.lower():
        return None, []
    inside = [i for i, (s, e) in enumerate(offsets) if e > s and s >= begin and e <= end]
    overlap = [i for i, (s, e) in enumerate(offsets) if e > s and s < end and e > begin]
    return host, [inside, overlap]


def _pieces_at(sentence):
    """(word, start, end) for every space-separated piece of the sentence."""
    start = 0
    for piece in sentence.split(" "):
        yield piece, start, start + len(piece)
        start += len(piece) + 1


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
    from ..pretrained.encoder import tokenize
    from ..pretrained.roles import word_positions

    name = "word_positions"
    problem = None
    for sentence, word in _WORD_CASES:
        offsets = tokenize(sentence).offsets[0]
        right = word_positions(sentence, offsets, word)
        result, problem = run(fn, sentence, list(offsets), word)
        if problem is None:
            got, problem = _as_positions(result)
        if problem is None and got != right:
            host, found = _find_answers(sentence, offsets, word)
            if host is not None and got in found:
                problem = _FIND_MISTAKE.format(word=word, host=host)
            elif not got:
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


# ---------------------------------------------------------------------------- a minimal pair

PAIR_KEYS = ("head", "a", "b", "from", "to", "prediction")
MIN_CHANGE = 0.02  # a smaller move of the weight is too small to call a prediction right


@lru_cache(maxsize=1)
def _model():
    from ..pretrained.encoder import load_minilm

    return load_minilm()


def _parse_head(head) -> tuple[int, int] | None:
    """(layer, head) from "L1.H7" or (1, 7); None if it names no head of the model."""
    if isinstance(head, str):
        match = re.fullmatch(r"L(\d+)\.H(\d+)", head.strip())
        if match is None:
            return None
        head = (int(match[1]), int(match[2]))
    if (
        isinstance(head, tuple)
        and len(head) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) for x in head)
        and 0 <= head[0] < 6
        and 0 <= head[1] < 12
    ):
        return head
    return None


def _one_word_apart(a: list[str], b: list[str]) -> str | None:
    """None when the word lists differ in exactly one word (replaced, inserted or removed)."""
    if a == b:
        return "the two sentences are the same: change one word"
    if len(a) == len(b):
        changed = [(x, y) for x, y in zip(a, b) if x != y]
        if len(changed) == 1:
            return None
        what = ", ".join(f"{x!r} -> {y!r}" for x, y in changed[:3])
    else:
        short, long = sorted((a, b), key=len)
        if len(long) == len(short) + 1 and any(
            long[:k] + long[k + 1 :] == short for k in range(len(long))
        ):
            return None
        what = f"{len(a)} words against {len(b)}"
    return (
        f"the sentences differ in more than one word ({what}): a minimal pair changes one "
        "word (replace, insert or remove one), so that what the head does differently can only "
        "come from that word"
    )


def _link_weight(sentence: str, layer: int, head: int, src: str, dst: str) -> float:
    """The word-level weight (mean over pieces, `roles.word_attention`) from src to dst."""
    import torch

    from ..pretrained.encoder import tokenize
    from ..pretrained.roles import word_attention, word_spans

    batch = tokenize(sentence)
    with torch.no_grad():
        out = _model()(batch.input_ids, batch.attention_mask)
    A = out.attentions[layer][0, head]  # (N, N)
    spans = word_spans(sentence, batch.offsets[0])
    ws = [w for w, _ in spans]
    Aw = word_attention(A, spans)  # (W, W)
    return float(Aw[ws.index(src), ws.index(dst)])


def _judge_pair(pair) -> str | Note | None:
    from ..pretrained.roles import words

    if not isinstance(pair, dict):
        return f"expected a dict with the keys {', '.join(PAIR_KEYS)}; got {type(pair).__name__}"
    missing = [k for k in PAIR_KEYS if k not in pair]
    if missing:
        return f"the dict lacks {', '.join(map(repr, missing))}; it needs {', '.join(PAIR_KEYS)}"
    texts = {k: pair[k] for k in ("a", "b", "from", "to", "prediction")}
    wrong_type = [k for k, v in texts.items() if not isinstance(v, str)]
    if wrong_type:
        return f"{', '.join(map(repr, wrong_type))} must be text (str)"
    head = _parse_head(pair["head"])
    if head is None:
        return (
            f"head {pair['head']!r} is not a head of this model: write 'L<layer>.H<head>' "
            "with layer 0-5 and head 0-11 (or a tuple (layer, head))"
        )
    prediction = pair["prediction"].strip().lower()
    if prediction not in ("up", "down"):
        return (
            f"prediction must be 'up' or 'down' (how the head's weight from 'from' to 'to' "
            f"changes from sentence a to sentence b); got {pair['prediction']!r}"
        )
    src, dst = pair["from"].strip().lower(), pair["to"].strip().lower()
    if src == dst:
        return f"'from' and 'to' are the same word ({src!r}): a link joins two words"
    wa, wb = words(pair["a"]), words(pair["b"])
    problem = _one_word_apart(wa, wb)
    if problem is not None:
        return problem
    for key, ws in (("a", wa), ("b", wb)):
        for role, w in (("from", src), ("to", dst)):
            if ws.count(w) != 1:
                return (
                    f"the {role}-word {w!r} occurs {ws.count(w)} times in sentence {key}: "
                    "each marked word must occur exactly once in both sentences, so that it "
                    "names one place"
                )
    before = _link_weight(pair["a"], *head, src, dst)
    after = _link_weight(pair["b"], *head, src, dst)
    moved = "up" if after > before else "down"
    label = f"L{head[0]}.H{head[1]}"
    numbers = f"{label}: {src!r} -> {dst!r} {before:.2f} in a, {after:.2f} in b"
    if abs(after - before) < MIN_CHANGE:
        return (
            f"the weight barely moves ({numbers}): a change below {MIN_CHANGE} is too small to "
            "call a prediction right; find a word that matters more to this head"
        )
    if moved != prediction:
        return (
            f"the weight went {moved}, not {prediction} ({numbers}): the pair is a fair test "
            "and the head did not do what you predicted; that is a finding, write it down"
        )
    return Note(f"{numbers}, {moved} as predicted")


def check_minimal_pair(fn) -> bool:
    """Check fn() -> {"head", "a", "b", "from", "to", "prediction"}: a minimal pair (one word
    apart), a link of marked words, and a predicted direction that the head then follows."""
    name = "minimal_pair"
    result, problem = run(fn)
    if problem is None:
        try:
            problem = _judge_pair(result)
        except Exception as exc:  # an answer the checker could not read
            problem = f"could not check the answer ({type(exc).__name__}: {exc})"
    return report(name, problem)
