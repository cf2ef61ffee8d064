"""When each token was said: dynamic time warping over the alignment heads' cross-attention.

Derived in notebook 17. A few cross-attention heads of Whisper's decoder (its config's
`alignment_heads`, found by OpenAI) look at the audio frames where the token they are reading
is spoken. Their weights (one row per token, one column per 20 ms frame, cut to the frames the
audio fills) are standardised over the tokens (each frame's column to mean 0 and standard
deviation 1), smoothed by a median filter of width 7 along time and averaged over the heads;
DTW then finds the monotone path from (first token, first frame) to (last token, last frame)
that maximises the summed weight, moving one token, one frame, or both at each step. A token's
time is the first frame its row takes on the path, times 0.02 s. This is transformers'
`_extract_token_timestamps` (tests/speech/test_timing.py checks it equal), written out.

Which moment that time is: token k's row is the query of the step whose INPUT is token k, and
that step predicts token k + 1, so its heads look where token k + 1 is spoken: the path enters
row k where token k ends and the next begins. The first row's time is 0 by construction (the
path starts at (0, 0)), so the first token "ends" at 0: a word's start read from these times
is wrong for the second word. OpenAI's word timing (`token_spans`) starts one row earlier,
with the <|notimestamps|> step, the query that predicts the first token: T + 1 rows, whose
times are where each token starts and, last, where the final one ends. Notebook 17 measures
both readings against espeak-ng's own word starts.

What it holds: `median_filter(x, width)`, `dtw(cost)` -> (token indices, frame indices),
`alignment_matrix(cross, heads, num_frames)`, `token_times(cross, heads, num_frames)` ->
(times (T,), spans [(first frame, last frame + 1)] per token), `token_spans(cross, heads,
num_frames)` -> (starts (T,), ends (T,)).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "FRAME_SECONDS",
    "alignment_matrix",
    "dtw",
    "median_filter",
    "token_spans",
    "token_times",
]

FRAME_SECONDS = 0.02  # one encoder frame: two spectrogram columns of 10 ms


def median_filter(x: Tensor, width: int) -> Tensor:
    """The median of each window of `width` (odd) along the last axis, the edges reflected
    (unchanged when the axis is not longer than width // 2)."""
    if width <= 0 or width % 2 != 1:
        raise ValueError(f"width = {width}; expected a positive odd number")
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    padded = torch.nn.functional.pad(x, (pad, pad, 0, 0), mode="reflect")
    return padded.unfold(-1, width, 1).sort()[0][..., pad]


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest monotone path through cost (T, F) from (0, 0) to (T-1, F-1), each step
    one token (down), one frame (right) or both (diagonal): (token indices, frame indices)
    along it. Ties go to the frame step, then the token step, as transformers breaks them."""
    T, F = cost.shape
    total = np.full((T + 1, F + 1), np.inf, dtype=np.float32)
    step = -np.ones((T + 1, F + 1), dtype=np.int8)  # 0 diagonal, 1 token, 2 frame
    total[0, 0] = 0
    for j in range(1, F + 1):
        for i in range(1, T + 1):
            diag, up, left = total[i - 1, j - 1], total[i - 1, j], total[i, j - 1]
            if diag < up and diag < left:
                best, s = diag, 0
            elif up < diag and up < left:
                best, s = up, 1
            else:
                best, s = left, 2
            total[i, j] = cost[i - 1, j - 1] + best
            step[i, j] = s
    step[0, :], step[:, 0] = 2, 1  # the edges lead back to (0, 0)
    i, j, tokens, frames = T, F, [], []
    while i > 0 or j > 0:
        tokens.append(i - 1)
        frames.append(j - 1)
        s = step[i, j]
        i, j = (i - 1, j - 1) if s == 0 else (i - 1, j) if s == 1 else (i, j - 1)
    return np.array(tokens[::-1]), np.array(frames[::-1])


def alignment_matrix(cross: list[Tensor], heads, num_frames: int | None = None,
                     filter_width: int = 7) -> Tensor:  # fmt: skip
    """(T, F) the standardised, smoothed, head-averaged weights of the alignment heads.

    cross: each decoder layer's cross-attention (1, h, T, S) for the T tokens timed; heads:
    (layer, head) pairs; num_frames: spectrogram columns the audio fills (the weights are cut
    to num_frames // 2 encoder frames; None: all S)."""
    w = torch.stack([cross[layer][0, head] for layer, head in heads])  # (A, T, S)
    if num_frames is not None:
        w = w[..., : num_frames // 2]  # (A, T, F)
    std, mean = torch.std_mean(w, dim=-2, keepdim=True, unbiased=False)  # over the tokens
    w = median_filter((w - mean) / std, filter_width)  # (A, T, F)
    return w.mean(dim=0)  # (T, F)


def token_times(cross: list[Tensor], heads, num_frames: int | None = None):
    """(times (T,) in seconds, spans [(first frame, end frame)] per token) of the T tokens whose
    cross-attention rows `cross` holds (see `alignment_matrix`)."""
    matrix = alignment_matrix(cross, heads, num_frames)
    tokens, frames = dtw(-matrix.double().numpy())
    first = np.r_[True, np.diff(tokens) != 0]  # where the path enters each token's row
    times = frames[first] * FRAME_SECONDS
    spans = [(int(frames[tokens == t].min()), int(frames[tokens == t].max()) + 1)
             for t in range(matrix.shape[0])]  # fmt: skip
    return times, spans


def token_spans(cross: list[Tensor], heads, num_frames: int | None = None):
    """(starts (T,), ends (T,)) in seconds of T tokens, OpenAI's reading: cross holds each
    layer's cross-attention (1, h, T + 1, S) of the T + 1 queries that PREDICT the tokens and
    then the end (the <|notimestamps|> step's, then each token's); the path enters row k where
    token k starts, and row T where the last token ends."""
    times, _ = token_times(cross, heads, num_frames)  # (T + 1,)
    return times[:-1], times[1:]
