"""mha_lib.pretrained.sentences (notebook 05): the hand-marked minimal pairs, well formed."""

from itertools import pairwise

from mha_lib.pretrained.roles import (
    words,
)
from mha_lib.pretrained.sentences import PAIRS, ROLES, MinimalPair, sentences, split

# ---------------------------------------------------------------------------- the sentence list


def distance(m):
    """The to-word's place relative to the from-word, in words."""
    ws = words(m.sentence)
    return ws.index(m.dst.lower()) - ws.index(m.src.lower())


def test_role_sentences_are_well_formed():
    assert set(PAIRS) == set(ROLES)
    all_texts = sentences()
    assert len(all_texts) == len(set(all_texts)) == 480
    for role, pairs in PAIRS.items():
        assert len(pairs) >= 40, role
        selection, held_out = split(pairs)
        assert not {id(p) for p in selection} & {id(p) for p in held_out}
        assert len(selection) == len(held_out) == len(pairs) // 2
        for pair in pairs:
            assert isinstance(pair, MinimalPair) and pair.role == role
            for m in (pair.a, pair.b):
                ws = words(m.sentence)
                assert ws.count(m.src.lower()) == 1 and ws.count(m.dst.lower()) == 1, m
                # never the first or the last word: those baselines find nothing
                assert 0 < ws.index(m.dst.lower()) < len(ws) - 1, m
            # the answer moves: a different word, or the same word at another distance
            assert pair.a.dst != pair.b.dst or distance(pair.a) != distance(pair.b), pair
            a, b = pair.a.sentence.split(" "), pair.b.sentence.split(" ")
            if pair.change == "adjective swapped":
                assert len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == 1, pair
            elif pair.change == "words inserted":
                m = len(b) - len(a)
                assert m >= 1 and any(b[:k] + b[k + m :] == a for k in range(len(b))), pair
                # inserted between the two marked words
                assert abs(distance(pair.b)) == abs(distance(pair.a)) + m, pair
            else:
                assert pair.change == "nouns swapped", pair
                assert sorted(words(pair.a.sentence)) == sorted(words(pair.b.sentence))
            for m in (pair.a, pair.b):  # "a", never "a" before a vowel ("a apple")
                ws = m.sentence.lower().split(" ")
                assert all(w[0] not in "aeiou" for v, w in pairwise(ws) if v == "a"), m
