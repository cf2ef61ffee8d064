"""Two tasks that need positions, for the extrapolation experiment of notebook 10.

Both draw sequences of uniform random tokens (V of them, no special token, so no content marks
where the sequence starts) and ask, at every position t, for one earlier token:
- `copy_back` (relative position): the token k places back, x[t - k], for t >= k. The answer
  sits at the same offset from every query: a scheme that sees offsets m - n can reuse at 4L
  what it learned at L.
- `token_at` (absolute position): the token at absolute position A, x[A], for t >= A. The
  answer sits at one fixed position, ever further back as t grows: a scheme that marks
  absolute positions has the same target at every length; a scheme that sees only offsets
  must find the key at offset t - A, an offset never seen in training once t >= L + A.
  (Position 0 would be too easy a target: under the causal mask the first token attends only
  to itself, which marks it without any position scheme.)
Neither can be solved without some position information beyond the causal mask, except by
what the causal mask itself reveals (a causal model without positions can still infer them,
Haviv et al. 2022).

With `start=True` every sequence begins with a start token (token V, outside the V random
ones) before its N random tokens, as the sequences of a language model begin with one: the
constructions by which a model without positions can still count (Kazemnejad et al. 2023) need
such a token. Positions are then counted from the first random token, so the targets are the
same tokens as without it.

Shapes: tokens (B, N) int64, or (B, N + 1) with the start token; targets alike, -1 where no
loss is taken.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["TASKS", "batch"]

TASKS = ("copy_back", "token_at")
K_BACK = 3  # copy_back's offset
A_AT = 5  # token_at's position


def batch(
    task: str, generator: torch.Generator, B: int, N: int, V: int, start: bool = False
) -> tuple[Tensor, Tensor]:
    """(tokens (B, N), targets (B, N)) for `task`; targets -1 where there is nothing to predict.
    start: put the start token V first, (B, N + 1) each (the random tokens are the same)."""
    if task not in TASKS:
        raise ValueError(f"task = {task!r}; expected one of {TASKS}")
    x = torch.randint(0, V, (B, N), generator=generator)  # (B, N)
    y = torch.full_like(x, -1)  # (B, N)
    if task == "copy_back":
        y[:, K_BACK:] = x[:, :-K_BACK]
    else:
        y[:, A_AT:] = x[:, A_AT : A_AT + 1]
    if start:
        x = torch.cat([torch.full((B, 1), V), x], dim=1)  # (B, N + 1)
        y = torch.cat([torch.full((B, 1), -1), y], dim=1)
    return x, y
