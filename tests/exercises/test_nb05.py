"""The checkers of notebook 05 accept right answers and name the usual mistakes."""

import re
import string

import numpy as np
import pytest
import torch

from mha_lib.exercises import check_minimal_pair, check_previous_token_score, check_word_positions


def verdict(capsys) -> str:
    """The single line a checker printed."""
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return out


# previous_token_score ---------------------------------------------------------------------------


def score_vectorised(A, attention_mask):
    n = attention_mask.sum(dim=1, keepdim=True)  # (B, 1)
    i = torch.arange(1, A.shape[-1])  # queries 1 .. T-1, keys i - 1
    keep = (i[None] >= 2) & (i[None] <= n - 2)  # (B, T-1): words whose previous token is a word
    values = A[:, i, i - 1]  # (B, T-1)
    return (values * keep).sum() / keep.sum()


def score_loop(A, attention_mask):
    values = []
    for b in range(A.shape[0]):
        n = int(attention_mask[b].sum())
        values += [float(A[b, i, i - 1]) for i in range(2, n - 1)]
    return sum(values) / len(values)


def test_check_previous_token_score_accepts_right_forms(capsys):
    assert check_previous_token_score(score_vectorised)
    assert "✓ previous_token_score: correct" in verdict(capsys)
    assert check_previous_token_score(score_loop)
    assert "✓" in verdict(capsys)
    assert check_previous_token_score(lambda A, m: np.float64(score_loop(A.numpy(), m.numpy())))
    assert "✓" in verdict(capsys)


def loop_variant(first, last, offset=-1, per_sentence=False, ignore_mask=False):
    def fn(A, attention_mask):
        per, pooled = [], []
        for b in range(A.shape[0]):
            n = A.shape[-1] + 1 if ignore_mask else int(attention_mask[b].sum())
            row = [float(A[b, i, i + offset]) for i in range(first, last(n))]
            per.append(sum(row) / len(row))
            pooled += row
        return sum(per) / len(per) if per_sentence else sum(pooled) / len(pooled)

    return fn


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (loop_variant(1, lambda n: n - 1), "[CLS] is not the previous WORD"),
        (loop_variant(2, lambda n: n), "[SEP] is counted"),
        (loop_variant(2, lambda n: n - 1, ignore_mask=True), "padding is counted"),
        (loop_variant(1, lambda n: n - 1, ignore_mask=True), "all counted"),
        (loop_variant(1, lambda n: n - 2, offset=+1), "NEXT-token score"),
        (lambda A, m: score_vectorised(A.transpose(1, 2), m), "NEXT-token score"),
        (loop_variant(1, lambda n: n - 1, offset=0), "weight on itself"),
        (loop_variant(2, lambda n: n - 1, offset=+1), "NEXT-token score"),  # A[b, i, i+1]
        (loop_variant(2, lambda n: 9 - 1, ignore_mask=True), "padding is ignored"),  # T = 9
        (loop_variant(1, lambda n: n), "[CLS] and [SEP] are counted"),
        (loop_variant(2, lambda n: n, offset=+1), "NEXT-token score"),
        (loop_variant(2, lambda n: n - 1, per_sentence=True), "averaged first"),
        (lambda A, m: A[:, 2:, 1:-1].diagonal(dim1=1, dim2=2), "expected one number"),
        (lambda A, m: None, "not implemented"),
        (lambda A, m: 0.5, "expected"),
    ],
)
def test_check_previous_token_score_rejects_mistakes(capsys, wrong, message):
    assert not check_previous_token_score(wrong)
    out = verdict(capsys)
    assert out.startswith("✗ previous_token_score:") and message in out, out


# word_positions ---------------------------------------------------------------------------------

STRIP = string.punctuation


def positions_by_span(sentence, offsets, word, strip=True, lower=True, extra=0):
    start = 0
    for piece in sentence.split(" "):
        core = piece.strip(STRIP)
        if (core.lower() == word.lower()) if lower else (core == word):
            begin = start + piece.index(core)
            end = begin + len(core) if strip else start + len(piece)
            hits = [i for i, (s, e) in enumerate(offsets) if e > s and s >= begin and e <= end]
            return hits + [hits[-1] + k for k in range(1, extra + 1)]
        start += len(piece) + 1
    return []


def positions_by_regex(sentence, offsets, word):
    """A second correct form: a case-insensitive regular expression for the whole word."""
    match = re.search(rf"(?<![\w']){re.escape(word)}(?![\w'])", sentence, flags=re.IGNORECASE)
    begin, end = match.span()
    return [i for i, (s, e) in enumerate(offsets) if e > s and begin <= s and e <= end]


def test_check_word_positions_accepts_right_forms(capsys):
    assert check_word_positions(positions_by_span)
    assert "✓ word_positions: correct" in verdict(capsys)
    assert check_word_positions(positions_by_regex)
    assert "✓" in verdict(capsys)


def positions_by_find(sentence, offsets, word, overlap=False):
    """The substring mistake: the first match of the letters, which may be inside a word."""
    begin = sentence.lower().find(word.lower())
    end = begin + len(word)
    if overlap:
        return [i for i, (s, e) in enumerate(offsets) if e > s and s < end and e > begin]
    return [i for i, (s, e) in enumerate(offsets) if e > s and s >= begin and e <= end]


def word_index(sentence, offsets, word, shift=0):
    ws = [p.strip(STRIP).lower() for p in sentence.split(" ")]
    return [ws.index(word.lower()) + shift]


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda s, o, w: positions_by_span(s, o, w)[:1], "only the first WordPiece"),
        (lambda s, o, w: [p - 1 for p in positions_by_span(s, o, w)], "off by one"),
        (lambda s, o, w: word_index(s, o, w), "index among the words, not"),
        (lambda s, o, w: word_index(s, o, w, shift=1), "+1 for [CLS]"),
        (lambda s, o, w: positions_by_span(s, o, w, strip=False), "full stop is counted"),
        (lambda s, o, w: positions_by_span(s, o, w, extra=1), "one token too many"),
        (lambda s, o, w: positions_by_span(s, o, w, lower=False), "case-insensitively"),
        (lambda s, o, w: "didn", "expected a list of token positions"),
        (positions_by_find, "inside an earlier word ('it' inside 'fit')"),
        (lambda s, o, w: positions_by_find(s, o, w, overlap=True), "sentence.find(word)"),
        (lambda s, o, w: None, "not implemented"),
    ],
)
def test_check_word_positions_rejects_mistakes(capsys, wrong, message):
    assert not check_word_positions(wrong)
    out = verdict(capsys)
    assert out.startswith("✗ word_positions:") and message in out, out


# minimal_pair ---------------------------------------------------------------------------------

RUNNING = "The animal didn't cross the street because it was too tired."
MAT, OLD_MAT = "The cat slept on the mat.", "The cat slept on the old mat."


def pair(**changes):
    """A right answer (L3.H1's weight from 'it' to 'animal' falls when the street is wide),
    with some entries changed."""
    answer = {
        "head": "L3.H1",
        "a": RUNNING,
        "b": RUNNING.replace("tired", "wide"),
        "from": "it",
        "to": "animal",
        "prediction": "down",
    }
    answer.update(changes)
    return lambda: answer


def test_check_minimal_pair_accepts_right_forms(capsys):
    assert check_minimal_pair(pair())
    assert "✓ minimal_pair: correct" in verdict(capsys)
    assert check_minimal_pair(pair(head=(3, 1), prediction="Down"))  # a tuple, any case
    assert "✓" in verdict(capsys)
    inserted = pair(
        head="L1.H7", a=MAT, b=OLD_MAT, prediction="down", **{"from": "on", "to": "mat"}
    )
    assert check_minimal_pair(inserted)  # one word inserted
    assert "✓" in verdict(capsys)
    removed = pair(head="L1.H7", a=OLD_MAT, b=MAT, prediction="up", **{"from": "on", "to": "mat"})
    assert check_minimal_pair(removed)  # one word removed: the weight comes back
    assert "✓" in verdict(capsys)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (pair(prediction="up"), "went down, not up"),
        (pair(b=RUNNING.replace("tired", "wide").replace("animal", "dog")), "more than one word"),
        (pair(b=RUNNING), "the same: change one word"),
        (pair(b="The animal crossed the street."), "more than one word"),
        (pair(head="L6.H1"), "not a head of this model"),
        (pair(head="3.1"), "not a head of this model"),
        (pair(prediction="same"), "must be 'up' or 'down'"),
        (pair(to="the"), "occurs 2 times"),
        (pair(to="street", b=RUNNING.replace("street", "road")), "occurs 0 times in sentence b"),
        (pair(**{"from": "it", "to": "it"}), "the same word"),
        (pair(head="L0.H2", a=MAT, b=OLD_MAT, **{"from": "on", "to": "slept"}), "barely moves"),
        (pair(a=1), "must be text"),
        (lambda: {"a": RUNNING}, "lacks 'head'"),
        (lambda: [RUNNING, RUNNING], "expected a dict"),
        (lambda: None, "not implemented"),
    ],
)
def test_check_minimal_pair_rejects_mistakes(capsys, wrong, message):
    assert not check_minimal_pair(wrong)
    out = verdict(capsys)
    assert out.startswith("✗ minimal_pair:") and message in out, out
