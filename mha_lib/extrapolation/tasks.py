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

Shapes: tokens (B, N) int64; targets (B, N) int64 with -1 where no loss is taken.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["TASKS", "batch"]

TASKS = ("copy_back", "token_at")
K_BACK = 3  # copy_back's offset
A_AT = 5  # token_at's position


def batch(task: str, generator: torch.Generator, B: int, N: int, V: int) -> tuple[Tensor, Tensor]:
    """(tokens (B, N), targets (B, N)) for `task`; targets -1 where there is nothing to predict."""
    if task not in TASKS:
        raise ValueError(f"task = {task!r}; expected one of {TASKS}")
    x = torch.randint(0, V, (B, N), generator=generator)  # (B, N)
    y = torch.full_like(x, -1)  # (B, N)
    if task == "copy_back":
        y[:, K_BACK:] = x[:, :-K_BACK]
    else:
        y[:, A_AT:] = x[:, A_AT : A_AT + 1]
    return x, y
