"""Are the alignment heads special? The measures notebook 17 times words with.

Derived in notebook 17. A word's start is read from the cross-attention of the queries that
predict each token (`timing.token_spans`); this module holds what the notebook compares with
espeak-ng's own word starts (`mha_lib.speech.utterances`), each one short:
- `word_starts(tokenizer, tokens, cross, heads, num_frames)`: the start of each word (a word
  begins at a token whose text starts with a space, or the first) when `heads` time the tokens;
- `start_error(starts, reference)`: the mean absolute difference in seconds over every word but
  the first (both start at 0 by construction: DTW's path starts at frame 0, espeak-ng's first
  word event at sample 0);
- `same_layer_sets(heads, num_heads)`: every set of heads that takes as many heads from each
  layer as `heads` does, none of them an alignment head: the ablation's comparison sets;
- `letters_baseline(text, audio)` and `even_baseline(text, audio)`: null models that know the
  words but not the audio's content, only where it is loud: they spread the words' starts over
  the loud span, in proportion to the letters before each word, or evenly.
"""

from __future__ import annotations

import itertools

import numpy as np

from .audio import SAMPLE_RATE
from .timing import token_spans

__all__ = ["even_baseline", "letters_baseline", "same_layer_sets", "start_error", "word_starts"]

LOUD = 0.02  # a sample is loud above this fraction of the utterance's peak


def word_starts(tokenizer, tokens, cross, heads, num_frames: int) -> np.ndarray:
    """(W,) seconds: where each word starts. cross: each layer's (1, h, T + 1, S) of the
    queries that predict the T tokens and the end (`Transcript.cross_attentions`)."""
    starts, _ = token_spans(cross, heads, num_frames)  # (T,)
    return np.asarray([starts[g[0]] for g in tokenizer.word_groups(tokens)], dtype=np.float64)


def start_error(starts, reference) -> float:
    """Mean |starts - reference| in seconds over the words after the first."""
    starts, reference = np.asarray(starts, float), np.asarray(reference, float)
    if starts.shape != reference.shape or starts.ndim != 1 or starts.size < 2:
        raise ValueError(
            f"starts has shape {starts.shape}, reference {reference.shape}; expected the same "
            "(W,), W >= 2 words"
        )
    return float(np.abs(starts - reference)[1:].mean())


def same_layer_sets(heads, num_heads: int) -> list[tuple[tuple[int, int], ...]]:
    """Every set of non-alignment heads with as many heads from each layer as `heads` has."""
    layers: dict[int, list[int]] = {}
    for layer, head in heads:
        layers.setdefault(layer, []).append(head)
    choices = [
        itertools.combinations([h for h in range(num_heads) if h not in chosen], len(chosen))
        for chosen in layers.values()
    ]
    return [
        tuple((layer, h) for layer, picked in zip(layers, combo, strict=True) for h in picked)
        for combo in itertools.product(*choices)
    ]


def _loud_span(audio) -> tuple[float, float]:
    """(first, last) loud sample's time in seconds."""
    audio = np.asarray(audio, dtype=np.float64)
    loud = np.flatnonzero(np.abs(audio) > LOUD * np.abs(audio).max())
    return loud[0] / SAMPLE_RATE, loud[-1] / SAMPLE_RATE


def letters_baseline(text: str, audio) -> np.ndarray:
    """(W,) seconds: word k starts after the share of the loud span that the letters of the
    words before it take (spaces not counted)."""
    first, last = _loud_span(audio)
    letters = np.array([len(w) for w in text.split()], dtype=np.float64)
    before = np.concatenate([[0.0], np.cumsum(letters)[:-1]]) / letters.sum()
    return first + (last - first) * before


def even_baseline(text: str, audio) -> np.ndarray:
    """(W,) seconds: the words' starts spread evenly over the loud span."""
    first, last = _loud_span(audio)
    W = len(text.split())
    return first + (last - first) * np.arange(W) / W
