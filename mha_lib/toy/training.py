"""A small, seeded training loop, and the two trainings of notebook 06.

`train` runs Adam (`mha_lib.runtime.Adam`: torch.optim.Adam's steps, float for float) for a fixed
number of steps on batches drawn from a seeded `torch.Generator`, with torch's intra-op threads
set to `threads` (1 by default) for the duration of the call and restored afterwards. What that
makes repeatable, and what not: on one machine, with the same threads and the same numeric
kernels, the same seed gives the same loss curve, float for float, on every run. A different
processor (or kernels chosen for a different instruction set, e.g.
`ATEN_CPU_CAPABILITY=default`) rounds some sums differently, and training amplifies those
last-bit differences: the run follows a slightly different trajectory, so its losses, accuracies and
scores differ a little (and a borderline seed may end up on the other side of a threshold).
Claims about trained models are therefore asserted with margins, and over several seeds
(`seed_sweep`). It returns the curves the loss function reports and, when asked, snapshots of
the model taken during training (`record`, `record_steps`): what notebook 06 shows as "watch the
head form".

`train_committee` (Part 1) and `train_induction` (Part 2) are the exact trainings the notebook
runs, with their settings in `COMMITTEE` and `INDUCTION`; the losses and accuracies they use
sit beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_int
from ..runtime import Adam
from .models import AttentionOnly, Committee
from .tasks import IGNORE, relations_batch, repeated_block_batch

__all__ = [
    "COMMITTEE",
    "INDUCTION",
    "committee_loss",
    "copy_losses",
    "induction_loss",
    "snapshot_steps",
    "subtask_accuracy",
    "train",
    "train_committee",
    "train_induction",
]

LossFn = Callable[[nn.Module, object], Tensor | tuple[Tensor, dict[str, float]]]


def train(
    model: nn.Module,
    make_batch: Callable[[torch.Generator], object],
    loss_fn: LossFn,
    steps: int,
    lr: float = 1e-2,
    seed: int = 0,
    threads: int = 1,
    record: Callable[[nn.Module], Tensor] | None = None,
    record_steps: Sequence[int] = (),
) -> dict:
    """Train `model` in place with Adam(lr) for `steps` steps; return the curves.

    make_batch(gen) draws one batch from the generator (seeded with `seed`);
    loss_fn(model, batch) returns the loss, or (loss, {name: value}) to record more curves.
    Returns {"loss": [...], name: [...]}, one value per step. With `record`, also
    "snapshots": {s: record(model)} for every s in record_steps, taken after s optimiser steps
    (s = 0: before training), in eval mode and without gradients, so that recording does not
    change the training.
    """
    check_int(steps, "steps")
    record_steps = sorted(set(record_steps))
    if record_steps and record is None:
        raise ValueError("record_steps given without record: pass record=fn(model) -> Tensor")
    if any(
        isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= steps for s in record_steps
    ):
        raise ValueError(f"record_steps must be ints in [0, steps = {steps}]; got {record_steps}")
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(seed)
        optimiser = Adam(model.parameters(), lr=lr)  # torch.optim.Adam's steps, lighter import
        history: dict = {"loss": []}
        snapshots: dict[int, Tensor] = {}

        def snapshot(step: int) -> None:
            if step in record_steps:
                model.eval()
                with torch.no_grad():
                    snapshots[step] = record(model).detach().cpu().clone()
                model.train()

        model.train()
        snapshot(0)
        for step in range(1, steps + 1):
            result = loss_fn(model, make_batch(gen))
            loss, extras = result if isinstance(result, tuple) else (result, {})
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            history["loss"].append(loss.item())
            for name, value in extras.items():
                history.setdefault(name, []).append(float(torch.as_tensor(value).detach()))
            snapshot(step)
        model.eval()
        if record is not None:
            history["snapshots"] = snapshots
        return history
    finally:
        torch.set_num_threads(previous_threads)


# ---------------------------------------------------------------------------- Part 1: committee

COMMITTEE = {"num_symbols": 16, "num_labels": 6, "embed_dim": 32, "batch": 128, "lr": 2e-2}


def committee_loss(model: Committee, batch) -> Tensor:
    """Cross-entropy averaged over the scored positions of all three sub-tasks (one mean, so
    a uniform guess scores ln num_symbols)."""
    symbols, labels, targets = batch  # (B, N), (B, N), (B, N, 3)
    logits, _ = model(symbols, labels)  # (B, N, 3, V)
    return F.cross_entropy(
        logits.reshape(-1, model.num_symbols), targets.reshape(-1), ignore_index=IGNORE
    )


def subtask_accuracy(model: Committee, batch, head_mask: Tensor | None = None) -> Tensor:
    """Accuracy per sub-task (3,) on a batch, scored positions only; head_mask ablates heads."""
    symbols, labels, targets = batch  # (B, N), (B, N), (B, N, 3)
    with torch.no_grad():
        logits, _ = model(symbols, labels, head_mask=head_mask)  # (B, N, 3, V)
    scored = targets != IGNORE  # (B, N, 3)
    right = (logits.argmax(dim=-1) == targets) & scored  # (B, N, 3)
    return right.sum(dim=(0, 1)) / scored.sum(dim=(0, 1))  # (3,)


def snapshot_steps(steps: int, count: int) -> list[int]:
    """`count` + 1 evenly spaced steps from 0 to `steps` (both included), e.g. (500, 25) ->
    0, 20, 40, ..., 500: where to record snapshots of a training run."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= steps:
        raise ValueError(f"count = {count!r}; expected an int in [1, steps = {steps}]")
    return sorted({round(k * steps / count) for k in range(count + 1)})


def train_committee(
    num_heads: int, seed: int, steps: int = 500, probe=None, record_steps: Sequence[int] = ()
) -> tuple[Committee, dict]:
    """Part 1's model with `num_heads` heads of width embed_dim / num_heads, trained from `seed`.

    Every setting but num_heads is fixed (COMMITTEE), so models with 1 or 4 heads have the same
    parameter count, data and budget. Returns the model and its history {"loss": [...]}; with
    probe = (symbols, labels) of one sequence (1, N) and record_steps, also "snapshots":
    {s: the heads' weights (h, N, N) on the probe after s steps}.
    """
    c = COMMITTEE
    torch.manual_seed(seed)
    N = 2 * c["num_labels"]
    model = Committee(c["num_symbols"], c["num_labels"], N, c["embed_dim"], num_heads)

    def make_batch(gen):
        return relations_batch(gen, c["batch"], c["num_labels"], c["num_symbols"])

    def record(m: Committee) -> Tensor:
        return m(probe[0], probe[1], need_weights=True)[1][0]  # (h, N, N)

    history = train(
        model,
        make_batch,
        committee_loss,
        steps,
        lr=c["lr"],
        seed=seed,
        record=record if probe is not None else None,
        record_steps=record_steps,
    )
    return model, history


# ---------------------------------------------------------------------------- Part 2: induction

INDUCTION = {
    "vocab_size": 32,
    "min_len": 4,
    "max_len": 12,
    "embed_dim": 32,
    "num_heads": 2,
    "batch": 64,
    "lr": 1e-2,
}


def copy_losses(model: AttentionOnly, tokens: Tensor, T: Tensor, head_mask=None):
    """Next-token cross-entropy (B, N - 1) and the masks (B, N - 1) of the two halves.

    Query i predicts token i + 1. "first" = i < T - 1 (inside the first copy: unpredictable),
    "repeated" = T <= i < 2T - 1 (inside the second copy: the answer is T tokens back).
    """
    logits, _ = model(tokens, head_mask=head_mask)  # (B, N, V)
    B, N = tokens.shape
    ce = F.cross_entropy(
        logits[:, :-1].reshape(-1, model.vocab_size), tokens[:, 1:].reshape(-1), reduction="none"
    ).view(B, N - 1)  # (B, N - 1)
    i = torch.arange(N - 1)[None]  # (1, N - 1)
    first = i < T[:, None] - 1  # (B, N - 1)
    repeated = (i >= T[:, None]) & (i < 2 * T[:, None] - 1)  # (B, N - 1)
    return ce, first, repeated


def induction_loss(model: AttentionOnly, batch):
    """Mean next-token loss over all positions, and the curves of the two halves."""
    tokens, T = batch  # (B, N), (B,)
    ce, first, repeated = copy_losses(model, tokens, T)
    parts = {
        "first half": (ce * first).sum() / first.sum(),
        "repeated half": (ce * repeated).sum() / repeated.sum(),
    }
    return ce.mean(), parts


def train_induction(
    seed: int = 0, steps: int = 1000, probe: Tensor | None = None, record_steps: Sequence[int] = ()
) -> tuple[AttentionOnly, dict]:
    """Part 2's two-layer attention-only model (INDUCTION settings) trained from `seed`.

    Returns the model and the curves {"loss", "first half", "repeated half"}, one per step;
    with probe = tokens (1, N) and record_steps, also "snapshots": {s: the weights
    (layers, h, N, N) of every head on the probe after s steps}.
    """
    c = INDUCTION
    torch.manual_seed(seed)
    model = AttentionOnly(
        c["vocab_size"], 2 * c["max_len"], c["embed_dim"], c["num_heads"], num_layers=2
    )

    def make_batch(gen):
        return repeated_block_batch(gen, c["batch"], c["vocab_size"], c["min_len"], c["max_len"])

    def record(m: AttentionOnly) -> Tensor:
        return torch.stack([w[0] for w in m(probe, need_weights=True)[1]])  # (layers, h, N, N)

    history = train(
        model,
        make_batch,
        induction_loss,
        steps,
        lr=c["lr"],
        seed=seed,
        record=record if probe is not None else None,
        record_steps=record_steps,
    )
    return model, history
