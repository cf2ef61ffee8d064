"""Small synthetic sequence tasks on which heads learn to specialise (notebook 06).

What it holds:
- `relations_batch`: Part 1's task. Each token carries a symbol (what to report) and a label
  (every label occurs exactly twice per sequence). For every position i the model must name
  three symbols at once: the previous token's, the next token's, and that of the *partner*
  (the other token with the same label). `RELATIONS` names the three sub-tasks.
- `relation_positions`: for each relation, the key position it points to from each query.
- `repeated_block_batch`: Part 2's task. A block of T random tokens followed by the same
  block again, padded to a fixed length with fresh random tokens; T varies from sequence to
  sequence, so no fixed positional offset solves the copy.

Every generator takes a `torch.Generator`, so a batch is a function of the seed alone.
Shapes: B sequences of N tokens; targets with -100 where a position is not scored (the
value `torch.nn.functional.cross_entropy` ignores).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import check_int

__all__ = [
    "IGNORE",
    "RELATIONS",
    "relation_positions",
    "relations_batch",
    "repeated_block_batch",
]

IGNORE = -100  # target value that cross_entropy skips
RELATIONS = ("previous", "next", "same label")


def relation_positions(labels: Tensor) -> Tensor:
    """Where each relation points: (B, 3, N) key positions, -1 where there is none.

    labels (B, N): every label must occur exactly twice in each sequence. Row 0 is i - 1
    (none for i = 0), row 1 is i + 1 (none for i = N - 1), row 2 the partner j ≠ i with
    labels[j] = labels[i].
    """
    if not isinstance(labels, Tensor) or labels.dim() != 2:
        got = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
        raise ValueError(f"labels has shape {got}; expected (B, N)")
    B, N = labels.shape
    i = torch.arange(N)  # (N,)
    same = labels[:, :, None] == labels[:, None, :]  # (B, N, N)
    same &= ~torch.eye(N, dtype=torch.bool)  # not the token itself
    if not bool((same.sum(-1) == 1).all()):
        raise ValueError("every label must occur exactly twice in each sequence of labels")
    partner = same.float().argmax(-1)  # (B, N)
    previous = torch.where(i > 0, i - 1, -1).expand(B, N)  # (B, N)
    following = torch.where(i < N - 1, i + 1, -1).expand(B, N)  # (B, N)
    return torch.stack([previous, following, partner], dim=1)  # (B, 3, N)


def relations_batch(
    gen: torch.Generator, B: int, num_labels: int = 6, num_symbols: int = 16
) -> tuple[Tensor, Tensor, Tensor]:
    """B sequences of N = 2 * num_labels tokens for Part 1.

    Returns symbols (B, N) uniform in [0, num_symbols), labels (B, N) a random arrangement
    of each label twice, and targets (B, N, 3): the symbol at the previous position, at the
    next position and at the partner position (IGNORE where the relation points nowhere).
    """
    check_int(B, "B", 1)
    check_int(num_labels, "num_labels", 2)
    check_int(num_symbols, "num_symbols", 2)
    N = 2 * num_labels
    symbols = torch.randint(0, num_symbols, (B, N), generator=gen)  # (B, N)
    order = torch.rand(B, N, generator=gen).argsort(dim=-1)  # (B, N) a random permutation
    labels = order % num_labels  # (B, N): each label exactly twice
    where = relation_positions(labels)  # (B, 3, N)
    picked = symbols.gather(1, where.clamp(min=0).reshape(B, -1)).reshape(B, 3, N)  # (B, 3, N)
    targets = torch.where(where >= 0, picked, IGNORE)  # (B, 3, N)
    return symbols, labels, targets.transpose(1, 2).contiguous()  # ..., (B, N, 3)


def repeated_block_batch(
    gen: torch.Generator, B: int, vocab_size: int, min_len: int, max_len: int
) -> tuple[Tensor, Tensor]:
    """B sequences of 2 * max_len tokens: a random block of T tokens, the same block, filler.

    T is drawn per sequence from [min_len, max_len]; the filler after the two copies is fresh
    random tokens. Returns tokens (B, 2 * max_len) and the block lengths T (B,).
    Position i of the second copy (T <= i < 2T) holds the token of position i - T.
    """
    check_int(B, "B", 1)
    check_int(vocab_size, "vocab_size", 2)
    check_int(min_len, "min_len", 2)
    check_int(max_len, "max_len", min_len)
    L = 2 * max_len
    tokens = torch.randint(0, vocab_size, (B, L), generator=gen)  # (B, L)
    T = torch.randint(min_len, max_len + 1, (B,), generator=gen)  # (B,)
    i = torch.arange(L)  # (L,)
    second = (i >= T[:, None]) & (i < 2 * T[:, None])  # (B, L): the repeated copy
    source = torch.where(second, i - T[:, None], i)  # (B, L): where each token comes from
    return tokens.gather(1, source), T
