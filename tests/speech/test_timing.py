"""mha_lib.speech.timing: the median filter and DTW equal transformers' own, and token times
equal transformers' `_extract_token_timestamps` on tiny random models' cross-attention (with
and without the frames cut to the audio's length); DTW's path on cases small enough to check by
hand."""

import numpy as np
import pytest
import torch

from mha_lib.speech.timing import (
    alignment_matrix,
    dtw,
    median_filter,
    token_spans,
    token_times,
)
from tests.speech.conftest import TINY, TINY_ALIGNMENT_HEADS, tiny_pair


def test_median_filter_equals_transformers():
    from transformers.models.whisper.generation_whisper import _median_filter

    x = torch.randn(2, 3, 5, 40, generator=torch.Generator().manual_seed(0))
    for width in (1, 3, 7):
        assert torch.equal(median_filter(x, width), _median_filter(x, width))
    short = torch.randn(1, 2, 3)
    assert torch.equal(median_filter(short, 7), short)  # not longer than width // 2: unchanged
    with pytest.raises(ValueError, match=r"width = 4; expected a positive odd number"):
        median_filter(x, 4)


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (6, 4), (9, 31)])
def test_dtw_equals_transformers(shape):
    from transformers.models.whisper.generation_whisper import _dynamic_time_warping

    g = np.random.default_rng(sum(shape))
    cost = g.standard_normal(shape)
    ours, ref = dtw(cost), _dynamic_time_warping(cost)
    assert np.array_equal(ours[0], ref[0]) and np.array_equal(ours[1], ref[1])


def test_dtw_follows_the_cheap_diagonal_and_every_token_and_frame_is_on_the_path():
    cost = np.ones((3, 5))
    cost[0, 0:2] = cost[1, 2] = cost[2, 3:] = 0  # token 0 in frames 0-1, 1 in 2, 2 in 3-4
    tokens, frames = dtw(cost)
    assert tokens.tolist() == [0, 0, 1, 2, 2] and frames.tolist() == [0, 1, 2, 3, 4]
    assert set(tokens) == {0, 1, 2} and set(frames) == set(range(5))


class GenerateOutput(dict):
    """What `_extract_token_timestamps` reads of generate's output."""

    __getattr__ = dict.__getitem__


@pytest.mark.parametrize("num_frames", [None, 9, 14])
def test_token_times_equal_transformers_extract_token_timestamps(num_frames):
    hf, ours = tiny_pair(5)
    g = torch.Generator().manual_seed(5)
    mel = torch.randn(1, TINY["num_mel_bins"], 2 * TINY["max_source_positions"], generator=g)
    tokens = torch.randint(3, TINY["vocab_size"], (1, 9), generator=g)
    prefix = 3
    with torch.no_grad():
        _, cross = ours.decode(tokens, ours.encode(mel), output_cross_attentions=True)
    # generate's cross-attentions: the prefix's rows in its first step, then one row a step
    steps = [tuple(w[:, :, :prefix] for w in cross)]
    steps += [tuple(w[:, :, t : t + 1] for w in cross) for t in range(prefix, 9)]
    out = GenerateOutput(cross_attentions=steps, sequences=torch.cat([tokens, tokens[:, :1]], 1))
    frames = None if num_frames is None else torch.tensor([num_frames])
    ref = hf._extract_token_timestamps(
        out, [list(h) for h in TINY_ALIGNMENT_HEADS], num_frames=frames, num_input_ids=prefix
    )[0, prefix:-1]
    times, spans = token_times([w[:, :, prefix:] for w in cross], TINY_ALIGNMENT_HEADS, num_frames)
    np.testing.assert_allclose(times, ref.numpy(), atol=1e-6)
    assert len(spans) == 9 - prefix and spans[0][0] == 0
    assert all(a < b for a, b in spans) and spans[-1][1] == (num_frames or 14) // 2


def test_the_alignment_matrix_is_standardised_over_the_tokens():
    w = [torch.rand(1, 3, 6, 10, generator=torch.Generator().manual_seed(l)) for l in range(3)]
    m = alignment_matrix(w, [(0, 1)], filter_width=1)  # no smoothing: each column standardised
    torch.testing.assert_close(m.mean(0), torch.zeros(10), atol=1e-6, rtol=0)
    torch.testing.assert_close(m.std(0, unbiased=False), torch.ones(10), atol=1e-5, rtol=0)
    assert alignment_matrix(w, [(0, 1), (2, 0)], num_frames=8).shape == (6, 4)


def test_token_spans_read_the_predicting_rows_as_starts():
    g = torch.Generator().manual_seed(5)
    cross = [torch.rand(1, 3, 7, 40, generator=g) for _ in range(2)]  # T + 1 = 7 rows
    heads = [(0, 1), (1, 2)]
    times, _ = token_times(cross, heads, 60)
    starts, ends = token_spans(cross, heads, 60)
    assert starts[0] == 0 and list(starts) == list(times[:-1]) and list(ends) == list(times[1:])
    assert all(s <= e for s, e in zip(starts, ends, strict=True)) and len(starts) == 6
