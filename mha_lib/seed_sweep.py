"""Notebook 06's trainings repeated over many seeds, summarised, and cached in a data file.

A claim about what training produces ("four heads divide the work", "layer 0 grows a
previous-token head") is a claim about the seeds, not about one run. `run_sweep` trains, for
every seed in `SEEDS`, the two committees of Part 1 (4 heads of 8 and 1 head of 32) and the
two-layer attention-only model of Part 2, with the exact settings of `training`, and keeps a
few numbers per model (`summarise_committee`, `summarise_induction`), measured on fixed test
batches that no training saw. The whole sweep takes a few minutes on one CPU core, too long
for a notebook, so the summary is cached in `SWEEP_FILE` (`mha_lib/data/nb06_seed_sweep.json`)
and notebook 06 reads it with `load_sweep`.

Where the file comes from: `python -m mha_lib.seed_sweep` regenerates it (it records the torch
version, the processor and the CPU kernel level it ran with). The numbers follow training
trajectories, so another machine reproduces them closely, not bit for bit; the test that
regenerates the sweep (`tests/test_seed_sweep.py`) therefore compares the claims notebook 06
makes (frequencies over seeds, bounds), with margins, not the floats.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import torch
from torch import Tensor

from .circuits import (
    duplicate_token_score,
    induction_score,
    k_composition,
    ov_circuit,
    previous_token_score,
    q_composition,
    qk_circuit,
    relation_scores,
)
from .toy_models import AttentionOnly, Committee
from .toy_tasks import relation_positions, relations_batch
from .training import INDUCTION, copy_losses, subtask_accuracy, train_committee, train_induction

__all__ = [
    "SEEDS",
    "SWEEP_FILE",
    "committee_test_batch",
    "induction_test_batch",
    "load_sweep",
    "run_sweep",
    "summarise_committee",
    "summarise_induction",
]

SEEDS = tuple(range(12))
SWEEP_FILE = Path(__file__).with_name("data") / "nb06_seed_sweep.json"
TEST_T = 10  # block length of the induction test batch


def committee_test_batch(B: int = 1000) -> tuple[Tensor, Tensor, Tensor]:
    """Part 1's test set: B sequences from generator seed 100 (training uses seeds 0, 1, ...
    for its own generator, and draws fresh batches; these exact sequences are never trained on)."""
    return relations_batch(torch.Generator().manual_seed(100), B)


def induction_test_batch(B: int = 500) -> Tensor:
    """Part 2's test set: B sequences of a block of TEST_T tokens repeated once, (B, 2 TEST_T),
    from generator seed 7."""
    V = INDUCTION["vocab_size"]
    block = torch.randint(0, V, (B, TEST_T), generator=torch.Generator().manual_seed(7))
    return torch.cat([block, block], dim=1)  # (B, 2T)


def _rounded(x) -> list:
    """A tensor as nested lists of floats rounded to 4 digits (what the file stores)."""
    return torch.as_tensor(x).double().round(decimals=4).tolist()


def summarise_committee(model: Committee, test) -> dict:
    """accuracy (3,) per sub-task; scores (h, 3) relation scores; ablated (h, 3) the accuracy
    with each head removed (only for h > 1)."""
    symbols, labels, _ = test
    h = model.attention.num_heads
    with torch.no_grad():
        _, weights = model(symbols, labels, need_weights=True)  # (B, h, N, N)
    summary = {
        "accuracy": _rounded(subtask_accuracy(model, test)),
        "scores": _rounded(relation_scores(weights, relation_positions(labels))),
    }
    if h > 1:
        summary["ablated"] = _rounded(
            torch.stack(
                [subtask_accuracy(model, test, head_mask=1.0 - torch.eye(h)[i]) for i in range(h)]
            )
        )
    return summary


def _repeated_loss(model: AttentionOnly, tokens: Tensor, head_mask=None) -> float:
    """Mean next-token loss on the second copy of the test batch."""
    lengths = torch.full((tokens.shape[0],), tokens.shape[1] // 2)
    with torch.no_grad():
        ce, _, repeated = copy_losses(model, tokens, lengths, head_mask)
    return float((ce * repeated).sum() / repeated.sum())


def summarise_induction(model: AttentionOnly, curves: dict, tokens: Tensor) -> dict:
    """Scores (layers, h) of every head on the repeated test batch: previous, duplicate,
    induction; K- and Q-composition (h1, h0) of each layer-1 head with each layer-0 head;
    the loss on the second copy with nothing / each head / both layer-1 heads removed;
    and the running-mean (20) loss curves of both halves, every 10th step."""
    T = tokens.shape[1] // 2
    L, h = model.num_layers, model.num_heads
    with torch.no_grad():
        _, weights = model(tokens, need_weights=True)  # L x (B, h, 2T, 2T)
    qk = [qk_circuit(model.layers[1], h1) for h1 in range(h)]
    ov = [ov_circuit(model.layers[0], h0) for h0 in range(h)]
    ablated = torch.ones(L, h)
    for layer in range(L):
        for head in range(h):
            mask = torch.ones(L, h)
            mask[layer, head] = 0.0
            ablated[layer, head] = _repeated_loss(model, tokens, mask)
    no_layer1 = torch.ones(L, h)
    no_layer1[1] = 0.0
    width = 20
    kernel = torch.ones(width) / width

    def smooth(curve):
        return torch.nn.functional.conv1d(
            torch.tensor(curve, dtype=torch.float64)[None, None], kernel.double()[None, None]
        )[0, 0]  # running mean; entry k covers steps k+1 .. k+width

    return {
        "previous": _rounded(torch.stack([previous_token_score(w) for w in weights])),
        "duplicate": _rounded(torch.stack([duplicate_token_score(w, T) for w in weights])),
        "induction": _rounded(torch.stack([induction_score(w, T) for w in weights])),
        "k_composition": _rounded(
            [[k_composition(qk[h1], ov[h0]) for h0 in range(h)] for h1 in range(h)]
        ),
        "q_composition": _rounded(
            [[q_composition(qk[h1], ov[h0]) for h0 in range(h)] for h1 in range(h)]
        ),
        "loss": _rounded(_repeated_loss(model, tokens)),
        "ablated": _rounded(ablated),
        "ablated layer 1": _rounded(_repeated_loss(model, tokens, no_layer1)),
        "first half": _rounded(smooth(curves["first half"])[::10]),
        "repeated half": _rounded(smooth(curves["repeated half"])[::10]),
    }


def run_sweep(seeds=SEEDS, verbose: bool = False) -> dict:
    """Train and summarise every model of notebook 06 for each seed; a JSON-ready dict."""
    committee_test, induction_test = committee_test_batch(), induction_test_batch()
    sweep = {
        "made by": "python -m mha_lib.seed_sweep",
        "torch": torch.__version__,
        "machine": platform.machine(),
        "cpu capability": torch.backends.cpu.get_cpu_capability(),
        "seeds": list(seeds),
        "committee 4 heads": [],
        "committee 1 head": [],
        "induction": [],
    }
    for seed in seeds:
        for h, key in ((4, "committee 4 heads"), (1, "committee 1 head")):
            model, _ = train_committee(num_heads=h, seed=seed)
            sweep[key].append(summarise_committee(model, committee_test))
        model, curves = train_induction(seed=seed)
        sweep["induction"].append(summarise_induction(model, curves, induction_test))
        if verbose:
            print(f"seed {seed} done", file=sys.stderr, flush=True)
    return sweep


def load_sweep(path: Path | str = SWEEP_FILE) -> dict:
    """The cached sweep, as run_sweep returned it."""
    return json.loads(Path(path).read_text())


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else SWEEP_FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(run_sweep(verbose=True), indent=1) + "\n")
    print(f"wrote {out}")
