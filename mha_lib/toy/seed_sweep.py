"""Notebook 06's trainings repeated over many seeds, summarised, and cached in a data file.

A claim about what training produces ("four heads divide the work", "layer 0 grows a
previous-token head") is a claim about the seeds, not about one run. `run_sweep` trains, for
every seed in `SEEDS` (100 seeds, 0 to 99), the two committees of Part 1 (4 heads of 8 and 1 head
of 32) and the two-layer attention-only model of Part 2, with the exact settings of `training`,
and keeps a few numbers per model (`summarise_committee`, `summarise_induction`), measured on
fixed test batches that no training saw. Notebook 06 states each claim with an interval that says
what it covers, never as the range the cached seeds spanned: "k of n seeds" with a 95 % Wilson
interval (`wilson_interval`, `frequency`), the range of the rate, which is the chance that a seed
the sweep did not run does the same; "k of the k' seeds with ..." for a claim about a subset
(`SUBSETS` names the claim that counts the k'); a size as a mean with the t-interval of that mean
(`mha_lib.stats.t_interval`), which says where the average over seeds lies, and, where a sentence
speaks of one new seed, the wider prediction interval (`mha_lib.stats.prediction_interval`).
`sweep_claims` counts every statement; `every_seed_claims` lists those that held in every seed
(of their subset), which `tests/toy/test_seed_sweep.py` checks again on seeds outside `SEEDS`.
A count picked after looking, such as how many seeds share the commonest of the 38 assignments
of heads to jobs, is the largest of many counts: the notebook states it without an interval.

Why 100 seeds. The sweep first had 50 seeds, 0 to 49. A second 50, 50 to 99, trained with the
same code, kept every claim that had held in every seed, but put several frequencies outside the
95 % intervals stated from the first 50 (two heads on "next": 3 of the first 50, 16 of the
second). An interval says how far a count can be off when the seeds are a typical sample; a
sample that happens to be skewed on a claim is what it can miss. So the sweep pools both: a count
over 100 seeds is still a sample, with narrower intervals that say how far it can be off.

Where the file comes from. The whole sweep takes about 15 minutes on one CPU core, too long for a
notebook, so the summary is cached in `SWEEP_FILE` (`mha_lib/data/nb06_seed_sweep.json`) and
notebook 06 reads it with `load_sweep`. Regenerate it with

    ATEN_CPU_CAPABILITY=avx2 python -m mha_lib.toy.seed_sweep

(`python -m mha_lib.toy.seed_sweep OUT --seeds 0 14 28` writes a few seeds to another file). The
file records the torch version, the processor and the CPU kernel level it ran with; the cached
one was made with torch's AVX2 kernels (`ATEN_CPU_CAPABILITY=avx2`), which every x86-64 processor
of the last decade has, so that other x86 machines can reproduce it. The numbers follow training
trajectories: with other kernels (another level, another processor family) a seed's run takes a
slightly different path, and its numbers come out close, not bit for bit. The test that
regenerates the sweep (`tests/toy/test_seed_sweep.py`) therefore trains only `TEST_SEEDS`, 8 of
the 100 seeds (the whole sweep is too slow for the test suite), with the cached kernel level where
the processor has it, and compares them with their cached entries, with margins.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from importlib import resources
from pathlib import Path

import torch
from torch import Tensor

from ..runtime import provenance
from ..stats import wilson_interval
from .circuits import (
    duplicate_token_score,
    induction_score,
    k_composition,
    ov_circuit,
    previous_token_score,
    q_composition,
    qk_circuit,
    random_composition,
    relation_scores,
)
from .models import AttentionOnly, Committee
from .tasks import relation_positions, relations_batch
from .training import INDUCTION, copy_losses, subtask_accuracy, train_committee, train_induction

__all__ = [
    "DUPLICATE_HEAD",
    "NEAR_RANDOM",
    "NEEDED",
    "PREVIOUS_HEAD",
    "SEEDS",
    "SUBSETS",
    "SWEEP_FILE",
    "TEST_SEEDS",
    "committee_test_batch",
    "composition_null",
    "every_seed_claims",
    "frequency",
    "induction_test_batch",
    "load_sweep",
    "run_sweep",
    "seed_table",
    "summarise_committee",
    "summarise_induction",
    "sweep_claims",
    "wilson_interval",
]

SEEDS = tuple(range(100))
TEST_SEEDS = SEEDS[::14]  # 0, 14, ..., 98: the 8 seeds tests/toy/test_seed_sweep.py regenerates
SWEEP_FILE = Path(
    str(resources.files("mha_lib") / "data" / "nb06_seed_sweep.json")
)  # mha_lib/data/
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


SMOOTH = 20  # the stored loss curves: running means over this many steps, every 10th entry


def _smoothed(curve) -> list:
    """A per-step loss curve as its running mean over SMOOTH steps, every 10th entry (rounded):
    entry k covers steps 10k+1 .. 10k+SMOOTH."""
    kernel = torch.ones(SMOOTH, dtype=torch.float64) / SMOOTH
    mean = torch.nn.functional.conv1d(
        torch.tensor(curve, dtype=torch.float64)[None, None], kernel[None, None]
    )[0, 0]
    return _rounded(mean[::10])


def summarise_committee(model: Committee, test, history: dict | None = None) -> dict:
    """accuracy (3,) per sub-task; scores (h, 3) relation scores; ablated (h, 3) the accuracy
    with each head removed (only for h > 1); with the training history, "loss", the training
    loss curve (running mean of SMOOTH steps, every 10th entry)."""
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
    if history is not None:
        summary["loss"] = _smoothed(history["loss"])
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
        "first half": _smoothed(curves["first half"]),
        "repeated half": _smoothed(curves["repeated half"]),
    }


def run_sweep(seeds=SEEDS, verbose: bool = False) -> dict:
    """Train and summarise every model of notebook 06 for each seed; a JSON-ready dict."""
    committee_test, induction_test = committee_test_batch(), induction_test_batch()
    sweep = {
        **provenance("python -m mha_lib.toy.seed_sweep"),
        "seeds": list(seeds),
        "committee 4 heads": [],
        "committee 1 head": [],
        "induction": [],
    }
    for seed in seeds:
        for h, key in ((4, "committee 4 heads"), (1, "committee 1 head")):
            model, history = train_committee(num_heads=h, seed=seed)
            sweep[key].append(summarise_committee(model, committee_test, history))
        model, curves = train_induction(seed=seed)
        sweep["induction"].append(summarise_induction(model, curves, induction_test))
        if verbose:
            print(f"seed {seed} done", file=sys.stderr, flush=True)
    return sweep


def load_sweep(path: Path | str = SWEEP_FILE) -> dict:
    """The cached sweep, as run_sweep returned it."""
    return json.loads(Path(path).read_text())


# ---------------------------------------------------------------------------- the claims

PREVIOUS_HEAD = (
    0.4  # a layer-0 head with a previous-token score above this is "a previous-token head"
)
DUPLICATE_HEAD = 0.4  # ... with a duplicate-token score above this, "a duplicate-token head"
NEEDED = 0.1  # removing a head "costs" a sub-task when its accuracy falls by more than this
NEAR_RANDOM = 0.05  # a composition score "near random": at most this far above the null mean


def composition_null() -> Tensor:
    """Composition scores of 100 random pairs of rank-16 (32, 32) circuits (generator seed 3):
    the level notebook 06 compares the trained heads' K- and Q-composition with."""
    C, h = INDUCTION["embed_dim"], INDUCTION["num_heads"]
    return random_composition(C, C // h, count=100, seed=3)


def _drop_ratio(curve: list, ln_v: float) -> float:
    """How much farther the second-copy loss falls in the 100 steps around its drop than in
    steps 20-120: (curve at the drop - 50 steps) - (curve at the drop + 50 steps), over
    (curve at step 20) - (curve at step 120). The drop is the first stored entry below ln V / 2;
    curve: running means of SMOOTH steps, every 10th (entry k covers steps 10k+1 .. 10k+20).
    0 when the loss never falls below ln V / 2."""
    k = next((i for i, x in enumerate(curve) if x < ln_v / 2), None)
    if k is None:  # no drop
        return 0.0
    return (curve[max(k - 5, 0)] - curve[k + 5]) / (curve[0] - curve[10])


def _spare(scores: list, accuracy: list, ablated: list) -> tuple[int, int, list] | None:
    """The spare head of a four-head committee, as the relation scores see it: when two heads
    score above 0.5 on one relation r, the one of the two with the lower score. Returns (r,
    that head, what removing it costs each sub-task (3,)), or None when no relation has two."""
    for r in range(3):
        pair = [h for h, row in enumerate(scores) if row[r] > 0.5]
        if len(pair) == 2:
            spare = min(pair, key=lambda h: scores[h][r])
            return r, spare, [a - b for a, b in zip(accuracy, ablated[spare])]
    return None


def seed_table(sweep: dict, ln_v: float = math.log(INDUCTION["vocab_size"])) -> dict[str, list]:
    """Per seed, the quantities notebook 06's claims are about (lists over seeds).

    Part 1: acc4 (3,) and acc1 (3,), the test accuracy per sub-task of 4 heads and of 1 head;
    heads4 (3,), how many of the 4 heads score above 0.5 on each relation, and jobs, which ones
    (per relation a tuple of heads: the assignment of heads to jobs); spare, the spare
    head by those scores (`_spare`: relation, head, cost (3,)) or None; scores1 (3,), the wide
    head's relation scores; plateau4 and end4, the 4-head model's training loss around step
    100 (running mean over steps 91-110) and at the end (steps 481-500).
    Part 2: induction (h,) of layer 1; prev / dup, the largest previous- and duplicate-token
    score in layer 0 and which head has it (prev_head, dup_head); q_dup (h,), the Q-composition
    of each layer-1 head with the duplicate-token head; k_prev (h,), the K-composition with the
    previous-token head; without_prev / without_dup, the second-copy loss without that layer-0
    head; needed_head, the layer-0 head whose removal raises it most, and worst_layer0, that
    loss; no_layer1, the loss without both layer-1 heads; drop_ratio, how much farther the
    second-copy loss falls in the 100 steps around its drop than in steps 20-120 (ln_v locates
    the drop: the first step below ln_v / 2).
    """
    names = ("acc4", "acc1", "heads4", "jobs", "spare", "scores1", "plateau4", "end4", "induction")
    names += ("prev", "dup", "prev_head", "dup_head", "q_dup", "k_prev", "loss", "without_prev")
    names += ("without_dup", "needed_head", "worst_layer0", "no_layer1", "drop_ratio")
    table: dict[str, list] = {k: [] for k in names}
    for c4, c1, ind in zip(
        sweep["committee 4 heads"], sweep["committee 1 head"], sweep["induction"]
    ):
        table["acc4"].append(c4["accuracy"])
        table["acc1"].append(c1["accuracy"])
        table["heads4"].append([sum(row[r] > 0.5 for row in c4["scores"]) for r in range(3)])
        table["jobs"].append(
            tuple(tuple(h for h, row in enumerate(c4["scores"]) if row[r] > 0.5) for r in range(3))
        )
        table["spare"].append(_spare(c4["scores"], c4["accuracy"], c4["ablated"]))
        table["scores1"].append(c1["scores"][0])
        table["plateau4"].append(c4["loss"][9])  # entry k: steps 10k+1 .. 10k+SMOOTH
        table["end4"].append(c4["loss"][-1])
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
        without = ind["ablated"][0]  # (h,) the loss without each layer-0 head
        table["without_prev"].append(without[p])
        table["without_dup"].append(without[d])
        table["needed_head"].append(max(range(len(without)), key=without.__getitem__))
        table["worst_layer0"].append(max(without))
        table["no_layer1"].append(ind["ablated layer 1"])
        table["drop_ratio"].append(_drop_ratio(ind["repeated half"], ln_v))
    return table


def sweep_claims(sweep: dict, ln_v: float) -> dict[str, int]:
    """How many seeds each of notebook 06's statements holds in (and "seeds", how many there are).

    ln_v = ln(vocab_size), the loss of a uniform guess in Part 2. A layer-0 head "is" a
    previous-token (duplicate-token) head when its score is above PREVIOUS_HEAD
    (DUPLICATE_HEAD); "copying needs head X most" means that removing X raises the loss on the
    second copy more than removing the other layer-0 head. A statement of the form "k of the
    k' seeds with ..." counts the seeds where both hold; `SUBSETS` names the claim it narrows.
    """
    t = seed_table(sweep, ln_v)
    null = composition_null()
    near_random = float(null.mean()) + NEAR_RANDOM  # "at most 0.05 above random"
    below_random = float(null.mean() - 2 * null.std())  # "below random (mean - 2 std)"

    def count(flags) -> int:
        return int(sum(bool(f) for f in flags))

    plateau = [x > 0.2 for x in t["plateau4"]]
    all99 = [min(a) > 0.99 for a in t["acc4"]]
    label1 = [a[2] > 0.8 for a in t["acc1"]]  # the wide head learned "same label"
    spare = t["spare"]
    spare_free = [s is not None and s[2][s[0]] < NEEDED for s in spare]
    spare_other = [
        s is not None and any(c > NEEDED for r, c in enumerate(s[2]) if r != s[0]) for s in spare
    ]
    P = [p > PREVIOUS_HEAD for p in t["prev"]]
    D = [d > DUPLICATE_HEAD for d in t["dup"]]
    Q = [min(q) > 0.25 for q in t["q_dup"]]  # both induction heads Q-compose with the dup head
    needs_prev = [p and n == h for p, n, h in zip(P, t["needed_head"], t["prev_head"])]
    needs_dup = [d and n == h for d, n, h in zip(D, t["needed_head"], t["dup_head"])]
    dup_only = [d and not p for p, d in zip(P, D)]
    return {
        "seeds": len(t["acc4"]),
        # Part 1: four heads against one wide head
        "4 heads: all three above 99 %": count(all99),
        "4 heads: two or more above 95 %": count(sorted(a)[1] > 0.95 for a in t["acc4"]),
        "4 heads: the loss still above 0.2 at step 100 (a plateau)": count(plateau),
        "4 heads: a plateau at step 100, below 0.1 by step 500 (a second drop)": count(
            x and y < 0.1 for x, y in zip(plateau, t["end4"])
        ),
        "4 heads: no plateau at step 100": count(not x for x in plateau),
        "4 heads: no plateau at step 100, and all three above 99 %": count(
            not x and a for x, a in zip(plateau, all99)
        ),
        "4 heads beat 1 head by 10 points on the mean": count(
            sum(a4) / 3 > sum(a1) / 3 + 0.1 for a4, a1 in zip(t["acc4"], t["acc1"])
        ),
        # Part 1: which head does which job, by score and by ablation
        "4 heads: each relation has a head scoring above 0.5": count(
            min(j) >= 1 for j in t["heads4"]
        ),
        "4 heads: two heads on same label, one on each neighbour": count(
            j == [1, 1, 2] for j in t["heads4"]
        ),
        "4 heads: two heads on previous, one on each other relation": count(
            j == [2, 1, 1] for j in t["heads4"]
        ),
        "4 heads: two heads on next, one on each other relation": count(
            j == [1, 2, 1] for j in t["heads4"]
        ),
        "4 heads: the seeds that share the commonest assignment of heads to jobs": max(
            Counter(t["jobs"]).values()
        ),
        "4 heads: two heads score above 0.5 on one relation": count(s is not None for s in spare),
        "4 heads: without the spare head, its relation loses less than 10 points": count(
            spare_free
        ),
        "4 heads: without the spare head, another sub-task loses more than 10 points": count(
            spare_other
        ),
        # Part 1: the wide head
        "1 head: same label above 80 %, neighbours below 40 %": count(
            a[2] > 0.8 and max(a[:2]) < 0.4 for a in t["acc1"]
        ),
        "1 head: a neighbour above 80 %, same label below 30 %": count(
            max(a[:2]) > 0.8 and a[2] < 0.3 for a in t["acc1"]
        ),
        "1 head: both neighbours above 80 %": count(  # among those that give up the partner
            min(a[:2]) > 0.8 and a[2] < 0.3 for a in t["acc1"]
        ),
        "1 head: some sub-task below 30 %": count(min(a) < 0.3 for a in t["acc1"]),
        "1 head: same label above 80 %": count(label1),
        "1 head: same label above 80 %; the largest share of its weight on the partner": count(
            k and s[2] > max(s[:2]) for k, s in zip(label1, t["scores1"])
        ),
        "1 head: same label above 80 %; more than 1/12 of its weight on each neighbour": count(
            k and min(s[:2]) > 1 / 12 for k, s in zip(label1, t["scores1"])
        ),
        "1 head: same label above 80 %; both neighbours above chance (1/16)": count(
            k and min(a[:2]) > 1 / 16 for k, a in zip(label1, t["acc1"])
        ),
        "1 head: same label at most 80 %": count(not k for k in label1),
        "1 head: same label at most 80 %; less than 0.15 of its weight on the partner": count(
            not k and s[2] < 0.15 for k, s in zip(label1, t["scores1"])
        ),
        # Part 2: induction heads
        "both layer-1 heads are induction heads (above 0.6)": count(
            min(i) > 0.6 for i in t["induction"]
        ),
        "the trained loss on the second copy is below 0.2 ln V": count(
            x < 0.2 * ln_v for x in t["loss"]
        ),
        "the loss falls twice as far in the 100 steps around its drop as in steps 20-120": count(
            r > 2 for r in t["drop_ratio"]
        ),
        "removing one layer-0 head raises the loss above 0.5 ln V": count(
            w > 0.5 * ln_v for w in t["worst_layer0"]
        ),
        "removing both layer-1 heads raises the loss above 0.9 ln V": count(
            n > 0.9 * ln_v for n in t["no_layer1"]
        ),
        # Part 2: which layer-0 heads, and which route
        "layer 0 has a previous-token head": count(P),
        "layer 0 has a duplicate-token head": count(D),
        "layer 0 has both": count(p and d for p, d in zip(P, D)),
        "layer 0 has one or the other": count(p or d for p, d in zip(P, D)),
        "layer 0 has no previous-token head": count(not p for p in P),
        "previous-token head, no duplicate-token head": count(p and not d for p, d in zip(P, D)),
        "duplicate-token head, no previous-token head": count(dup_only),
        "duplicate-token head, no previous-token head; both induction heads Q-compose with it "
        "above 0.25": count(o and q for o, q in zip(dup_only, Q)),
        "duplicate-token head, no previous-token head; copying needs the duplicate-token head "
        "most": count(o and n for o, n in zip(dup_only, needs_dup)),
        "duplicate-token head, no previous-token head; K-composition with the head of higher "
        "previous-token score below random": count(
            o and max(k) < below_random for o, k in zip(dup_only, t["k_prev"])
        ),
        "duplicate-token head; both induction heads Q-compose with it above 0.25": count(
            d and q for d, q in zip(D, Q)
        ),
        "both Q-compose with the duplicate-token head above 0.25, yet copying needs the "
        "previous-token head most": count(d and q and n for d, q, n in zip(D, Q, needs_prev)),
        "previous-token head; both induction heads K-compose with it at most 0.05 above "
        "random": count(p and max(k) <= near_random for p, k in zip(P, t["k_prev"])),
        "copying needs the previous-token head most": count(needs_prev),
        "copying needs the duplicate-token head most": count(needs_dup),
        "copying needs the duplicate-token head most; no previous-token head": count(
            n and not p for n, p in zip(needs_dup, P)
        ),
        "copying needs the duplicate-token head most; layer 0 has both": count(
            n and p for n, p in zip(needs_dup, P)
        ),
    }


SUBSETS = {  # a claim stated as "k of the k' seeds with ...": the claim that counts the k'
    "4 heads: no plateau at step 100, and all three above 99 %": "4 heads: no plateau at step 100",
    "4 heads: without the spare head, its relation loses less than 10 points": (
        "4 heads: two heads score above 0.5 on one relation"
    ),
    "4 heads: without the spare head, another sub-task loses more than 10 points": (
        "4 heads: two heads score above 0.5 on one relation"
    ),
    "1 head: same label above 80 %; the largest share of its weight on the partner": (
        "1 head: same label above 80 %"
    ),
    "1 head: same label above 80 %; more than 1/12 of its weight on each neighbour": (
        "1 head: same label above 80 %"
    ),
    "1 head: same label above 80 %; both neighbours above chance (1/16)": (
        "1 head: same label above 80 %"
    ),
    "1 head: same label at most 80 %; less than 0.15 of its weight on the partner": (
        "1 head: same label at most 80 %"
    ),
    "1 head: both neighbours above 80 %": "1 head: a neighbour above 80 %, same label below 30 %",
    "duplicate-token head, no previous-token head; both induction heads Q-compose with it "
    "above 0.25": "duplicate-token head, no previous-token head",
    "duplicate-token head, no previous-token head; copying needs the duplicate-token head "
    "most": "duplicate-token head, no previous-token head",
    "duplicate-token head, no previous-token head; K-composition with the head of higher "
    "previous-token score below random": "duplicate-token head, no previous-token head",
    "duplicate-token head; both induction heads Q-compose with it above 0.25": (
        "layer 0 has a duplicate-token head"
    ),
    "both Q-compose with the duplicate-token head above 0.25, yet copying needs the "
    "previous-token head most": "duplicate-token head; both induction heads Q-compose with it "
    "above 0.25",
    "previous-token head; both induction heads K-compose with it at most 0.05 above random": (
        "layer 0 has a previous-token head"
    ),
}


def every_seed_claims(claims: dict[str, int]) -> list[str]:
    """The claims that hold in every seed counted ("n of n"), or in every seed of the subset
    they narrow ("k of the k seeds with ..."): the form a new seed must satisfy too."""
    n = claims["seeds"]
    return [
        c
        for c, k in claims.items()
        if c != "seeds" and (k == n or (c in SUBSETS and k == claims[SUBSETS[c]]))
    ]


# ---------------------------------------------------------------------------- frequencies


def frequency(k: int, n: int, what: str = "seeds") -> str:
    """'k of n seeds (95 % interval lo–hi %)': how notebook 06 states a claim about seeds."""
    lo, hi = wilson_interval(k, n)
    return f"{k} of {n} {what} (95 % interval {100 * lo:.0f}–{100 * hi:.0f} %)"


def _main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m mha_lib.toy.seed_sweep",
        description="Train notebook 06's models for every seed and write the summary (JSON).",
    )
    parser.add_argument("out", nargs="?", type=Path, default=SWEEP_FILE, help="the file to write")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), help="default: SEEDS")
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(run_sweep(args.seeds, verbose=True), indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    _main()
