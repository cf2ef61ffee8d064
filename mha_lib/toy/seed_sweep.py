"""Notebook 06's trainings repeated over many seeds, summarised, and cached in a data file.

A claim about what training produces ("four heads divide the work", "layer 0 grows a
previous-token head") is a claim about the seeds, not about one run. `run_sweep` trains, for
every seed in `SEEDS`, the two committees of Part 1 (4 heads of 8 and 1 head of 32) and the
two-layer attention-only model of Part 2, with the exact settings of `training`, and keeps a
few numbers per model (`summarise_committee`, `summarise_induction`), measured on fixed test
batches that no training saw. The whole sweep takes a few minutes on one CPU core, too long
for a notebook, so the summary is cached in `SWEEP_FILE` (`mha_lib/data/nb06_seed_sweep.json`)
and notebook 06 reads it with `load_sweep`.

Where the file comes from: `python -m mha_lib.toy.seed_sweep` regenerates it (it records the torch
version, the processor and the CPU kernel level it ran with). The numbers follow training
trajectories, so another machine reproduces them closely, not bit for bit; the test that
regenerates the sweep (`tests/toy/test_seed_sweep.py`) therefore compares the claims notebook 06
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
from .models import AttentionOnly, Committee
from .tasks import relation_positions, relations_batch
from .training import INDUCTION, copy_losses, subtask_accuracy, train_committee, train_induction

__all__ = [
    "SEEDS",
    "SWEEP_FILE",
    "committee_test_batch",
    "induction_test_batch",
    "load_sweep",
    "run_sweep",
    "seed_table",
    "summarise_committee",
    "summarise_induction",
    "sweep_claims",
]

SEEDS = tuple(range(12))
SWEEP_FILE = Path(__file__).parents[1] / "data" / "nb06_seed_sweep.json"  # mha_lib/data/
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
        "made by": "python -m mha_lib.toy.seed_sweep",
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


# ---------------------------------------------------------------------------- the claims

PREVIOUS_HEAD = (
    0.4  # a layer-0 head with a previous-token score above this is "a previous-token head"
)
DUPLICATE_HEAD = 0.4  # ... with a duplicate-token score above this, "a duplicate-token head"


def seed_table(sweep: dict) -> dict[str, list]:
    """Per seed, the quantities notebook 06's claims are about (lists over seeds).

    Part 1: acc4 (3,) and acc1 (3,), the test accuracy per sub-task of 4 heads and of 1 head.
    Part 2: induction (h,) of layer 1; prev / dup, the largest previous- and duplicate-token
    score in layer 0 and which head has it; q_dup (h,), the Q-composition of each layer-1 head
    with the duplicate-token head; k_prev (h,), the K-composition with the previous-token head;
    worst_layer0, the second-copy loss without the layer-0 head that matters most;
    no_layer1, the loss without both layer-1 heads.
    """
    table: dict[str, list] = {k: [] for k in ("acc4", "acc1", "induction", "prev", "dup")}
    for k in ("prev_head", "dup_head", "q_dup", "k_prev", "loss", "worst_layer0", "no_layer1"):
        table[k] = []
    for c4, c1, ind in zip(
        sweep["committee 4 heads"], sweep["committee 1 head"], sweep["induction"]
    ):
        table["acc4"].append(c4["accuracy"])
        table["acc1"].append(c1["accuracy"])
        table["induction"].append(ind["induction"][1])
        prev, dup = ind["previous"][0], ind["duplicate"][0]
        p, d = (
            max(range(len(prev)), key=prev.__getitem__),
            max(range(len(dup)), key=dup.__getitem__),
        )
        table["prev"].append(prev[p])
        table["dup"].append(dup[d])
        table["prev_head"].append(p)
        table["dup_head"].append(d)
        table["q_dup"].append([row[d] for row in ind["q_composition"]])
        table["k_prev"].append([row[p] for row in ind["k_composition"]])
        table["loss"].append(ind["loss"])
        table["worst_layer0"].append(max(ind["ablated"][0]))
        table["no_layer1"].append(ind["ablated layer 1"])
    return table


def sweep_claims(sweep: dict, ln_v: float) -> dict[str, int]:
    """How many seeds each of notebook 06's statements holds in (and "seeds", how many there are).

    ln_v = ln(vocab_size), the loss of a uniform guess in Part 2.
    """
    t = seed_table(sweep)

    def count(flags) -> int:
        return int(sum(bool(f) for f in flags))

    has_prev = [p > PREVIOUS_HEAD for p in t["prev"]]
    has_dup = [d > DUPLICATE_HEAD for d in t["dup"]]
    return {
        "seeds": len(t["acc4"]),
        "4 heads: all three above 99 %": count(min(a) > 0.99 for a in t["acc4"]),
        "4 heads: two or more above 95 %": count(sorted(a)[1] > 0.95 for a in t["acc4"]),
        "1 head: same label above 80 %, neighbours below 40 %": count(
            a[2] > 0.8 and max(a[:2]) < 0.4 for a in t["acc1"]
        ),
        "1 head: a neighbour above 80 %, same label below 30 %": count(
            max(a[:2]) > 0.8 and a[2] < 0.3 for a in t["acc1"]
        ),
        "1 head: both neighbours above 80 %": count(min(a[:2]) > 0.8 for a in t["acc1"]),
        "1 head: some sub-task below 30 %": count(min(a) < 0.3 for a in t["acc1"]),
        "4 heads beat 1 head by 10 points on the mean": count(
            sum(a4) / 3 > sum(a1) / 3 + 0.1 for a4, a1 in zip(t["acc4"], t["acc1"])
        ),
        "both layer-1 heads are induction heads (above 0.6)": count(
            min(i) > 0.6 for i in t["induction"]
        ),
        "layer 0 has a previous-token head": count(has_prev),
        "layer 0 has a duplicate-token head": count(has_dup),
        "layer 0 has one or the other": count(p or d for p, d in zip(has_prev, has_dup)),
        "duplicate-token head, no previous-token head": count(
            d and not p for p, d in zip(has_prev, has_dup)
        ),
        "... and both induction heads Q-compose with it above 0.25": count(
            d and not p and min(q) > 0.25 for p, d, q in zip(has_prev, has_dup, t["q_dup"])
        ),
        "previous-token head, K-composition within 0.05 of random": count(
            p and min(k) < 0.23 for p, k in zip(has_prev, t["k_prev"])
        ),
        "removing one layer-0 head raises the loss above 0.5 ln V": count(
            w > 0.5 * ln_v for w in t["worst_layer0"]
        ),
        "removing both layer-1 heads raises the loss above 0.9 ln V": count(
            n > 0.9 * ln_v for n in t["no_layer1"]
        ),
        "the trained loss on the second copy is below 0.2 ln V": count(
            x < 0.2 * ln_v for x in t["loss"]
        ),
    }
