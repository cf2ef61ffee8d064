"""mha_lib.speech.alignment: the comparison sets of notebook 17's ablation are every other
choice with as many heads per layer, the null models spread words over the loud span as they
say, the error skips the first word, and word starts are the first tokens' starts."""

import math
from collections import Counter

import numpy as np
import pytest
import torch

from mha_lib.speech.alignment import (
    even_baseline,
    letters_baseline,
    same_layer_sets,
    start_error,
    word_starts,
)
from mha_lib.speech.timing import token_spans

BASE = ((3, 1), (4, 2), (4, 3), (4, 7), (5, 1), (5, 2), (5, 4), (5, 6))


def test_same_layer_sets_are_every_other_choice_with_as_many_heads_per_layer():
    sets = same_layer_sets(BASE, 8)
    assert len(sets) == math.comb(7, 1) * math.comb(5, 3) * math.comb(4, 4) == 70
    assert len(set(sets)) == 70
    per_layer = Counter(layer for layer, _ in BASE)
    for s in sets:
        assert Counter(layer for layer, _ in s) == per_layer and not set(s) & set(BASE)
    assert same_layer_sets(((0, 0),), 3) == [((0, 1),), ((0, 2),)]


def test_the_null_models_spread_the_words_over_the_loud_span():
    audio = np.zeros(16000 * 3, np.float32)
    audio[8000:40000] = 0.5  # loud from 0.5 s to 2.5 s
    even = even_baseline("a bb ccc dddd", audio)
    np.testing.assert_allclose(even, [0.5, 1.0, 1.5, 2.0], atol=1e-4)
    letters = letters_baseline("a bb ccc dddd", audio)  # 10 letters: 0, 1, 3, 6 before each
    np.testing.assert_allclose(letters, 0.5 + 2.0 * np.array([0, 1, 3, 6]) / 10, atol=1e-4)


def test_start_error_skips_the_first_word_and_refuses_unequal_lists():
    assert start_error([0.0, 1.0, 2.5], [0.3, 1.2, 2.0]) == pytest.approx((0.2 + 0.5) / 2)
    with pytest.raises(ValueError, match=r"starts has shape \(2,\), reference \(3,\)"):
        start_error([0.0, 1.0], [0.0, 1.0, 2.0])


class Words:
    """A tokenizer whose tokens 1, 2, 3... read " w", "x", " w"... (a space starts a word)."""

    def token(self, i):
        return " w" if i % 2 else "x"

    def word_groups(self, ids):
        from mha_lib.speech.tokenizer import WhisperTokenizer

        return WhisperTokenizer.word_groups(self, ids)


def test_word_starts_are_the_starts_of_each_words_first_token():
    g = torch.Generator().manual_seed(2)
    cross = [torch.rand(1, 2, 6, 30, generator=g) for _ in range(2)]  # T + 1 = 6 rows
    tokens = [1, 2, 3, 5, 6]  # words: [1, 2], [3], [5, 6]
    starts, _ = token_spans(cross, [(0, 1), (1, 0)], 50)
    got = word_starts(Words(), tokens, cross, [(0, 1), (1, 0)], 50)
    np.testing.assert_array_equal(got, starts[[0, 2, 3]])
