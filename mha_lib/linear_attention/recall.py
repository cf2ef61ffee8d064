"""Associative recall at an equal state/cache budget: softmax attention, linear attention,
DeltaNet, gated DeltaNet and a 3:1 hybrid, trained side by side over seeds.

Derived in notebook 16 (section 6). The task, the held-out sequences, the embeddings, the
blocks and the training loop are notebook 11's (`mha_lib.efficient.recall`): a sequence shows
8 key-value pairs, then the 8 keys again in a new order, and after each the model must give
its value. Only the token mixer differs, and every model has `LAYERS` = 4 blocks so that the
hybrid can stack three gated-DeltaNet layers under one softmax layer, as Qwen3.5 does.

The budget. A softmax layer's cache grows by 2·h_kv·d numbers per token; after the task's
N = 24 tokens it holds 2·h_kv·d·N. A state rule holds h·d_k·d_v numbers whatever N is. At a
budget of b numbers per token (notebook 11's larger one, 32), every layer may hold b·N numbers
when the last query reads: the softmax model is notebook 11's multi-head one (h = 2,
d = b/4 = 8), and the state rules get h heads of square states d_k = d_v = d (as Qwen3.5's)
with h·d² = b·N: 3 heads of 16 × 16 (`VARIANTS`, `layer_numbers`). The hybrid's layers are the
gated-DeltaNet and softmax layers of that budget, so it holds the same numbers in every layer.
The budget is equal at N = 24 only: a longer sequence would grow the cache and leave the state
as it is. One budget and `SEEDS` = 16 seeds keep the sweep to about 50 minutes of two cores.

The state rules are one module, `StateMixer`, with two switches: q, k and v projected as
notebook 08's attention projects them, q and k L2-normalised, then
- "linear": linear attention, S_t = S_{t−1} + k_t v_tᵀ (no erase, β = 1, no decay);
- "delta": the delta rule, β_t = sigmoid(x_t W_b) (the erase on);
- "gated_delta": the gated delta rule, with g_t = −exp(A_log)·softplus(x_t W_a + dt_bias)
  (the decay on);
read o_t = S_tᵀ q_t / √d_k, merged, and W_O. Qwen3.5's layer (`gated_deltanet.GatedDeltaNet`)
adds a short convolution (here the previous-token embedding does its work, for every model)
and an output gate with a norm; neither is here, so that only the rule differs. What the budget
cannot make equal is listed by `differences`.

`python -m mha_lib.linear_attention.recall` trains every variant of every budget over `SEEDS`
(`run_sweep`; each run on one thread, in two processes) and writes `SWEEP_FILE`
(`mha_lib/data/nb16_recall_sweep.json`), which notebook 16 reads with `load_sweep`;
tests/linear_attention/test_recall.py regenerates a slice and trains a seed outside the cache.
The five models of a seed share its data and the draws of their embeddings, so the notebook
counts seeds when it states how often an ordering held. What it states about seeds comes from
here, one source for the notebook and the tests: `seed_claims` (every statement about one seed's
five runs: solved or not, and for every two models, which erred less), `claim_counts` (in how
many cached seeds each held), `every_seed_claims` (those that held in all of them: the only
"every seed" statements the notebook makes) and `new_seed_intervals` (where one new seed should
land); the tests train a seed outside the cache and check the last two on it.
`python -m mha_lib.linear_attention.recall --extend` trains only the seeds of `SEEDS` that the
file lacks and adds them to it, with a "parts" entry saying which command, machine and minutes
made which seeds.
"""

from __future__ import annotations

import json
import sys
import time
from importlib import resources
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_int
from ..efficient import recall
from ..efficient.recall import (
    TASK,
    TRAIN,
    RecallModel,
    evaluate,
    held_out_batch,
    run_jobs,
)
from ..pytorch import merge_heads, split_heads
from ..runtime import provenance
from .gated_deltanet import initial_decays, l2_normalize
from .update_rules import gated_delta_rule

__all__ = [
    "BUDGETS",
    "LAYERS",
    "RULES",
    "SEEDS",
    "SWEEP_FILE",
    "VARIANTS",
    "StateMixer",
    "accuracy_by_pair",
    "claim_counts",
    "differences",
    "every_seed_claims",
    "gate_means",
    "layer_numbers",
    "load_sweep",
    "make_model",
    "mixer_for",
    "new_seed_intervals",
    "run_sweep",
    "seed_claims",
    "sweep_summary",
    "sweep_table",
]

SEEDS = tuple(range(16))
LAYERS = 4  # three gated-DeltaNet layers under one softmax layer make the hybrid
N = 3 * TASK["pairs"]  # 24 tokens: the length at which the budgets are equal
BUDGETS = (32,)  # numbers per token per layer of the softmax caches (notebook 11's larger one)
RULES = ("linear", "delta", "gated_delta")
SWEEP_FILE = Path(str(resources.files("mha_lib") / "data" / "nb16_recall_sweep.json"))


def _variants(budget: int) -> dict[str, dict]:
    softmax = {"kind": "gqa", "num_heads": 2, "num_kv_heads": 2, "head_dim": budget // 4}
    h, d = {32: (3, 16)}[budget]  # h·d² = budget·N
    state = {"kind": "state", "num_heads": h, "head_dim": d}
    return {
        "softmax": softmax,
        "linear attention": {**state, "rule": "linear"},
        "DeltaNet": {**state, "rule": "delta"},
        "gated DeltaNet": {**state, "rule": "gated_delta"},
        "hybrid 3:1": {
            "kind": "hybrid",
            "layer_types": ("linear_attention",) * 3 + ("full_attention",),
            "linear_attention": {**state, "rule": "gated_delta"},
            "full_attention": softmax,
        },
    }


VARIANTS: dict[int, dict[str, dict]] = {b: _variants(b) for b in BUDGETS}


class StateMixer(nn.Module):
    """Causal token mixing through a state (B, h, d_k, d_v) per sequence: linear attention, the
    delta rule or the gated delta rule (`rule`), nothing else different.

    x (B, N, C) -> (B, N, C). Parameters: q_proj, k_proj (C -> h·d_k), v_proj (C -> h·d_v),
    out_proj (h·d_v -> C); with the erase, b_proj (C -> h) for β = sigmoid(x W_b); with the
    decay, a_proj (C -> h), A_log and dt_bias (h,) for g = −exp(A_log)·softplus(x W_a +
    dt_bias), started as Mamba-2 starts them (`initial_decays`).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        key_dim: int,
        value_dim: int,
        rule: str,
        chunk_size: int = N,
    ) -> None:
        super().__init__()
        if rule not in RULES:
            raise ValueError(f"rule = {rule!r}; expected one of {RULES}")
        C = check_int(embed_dim, "embed_dim", 1)
        h = check_int(num_heads, "num_heads", 1)
        d_k, d_v = check_int(key_dim, "key_dim", 1), check_int(value_dim, "value_dim", 1)
        self.num_heads, self.key_dim, self.value_dim, self.rule = h, d_k, d_v, rule
        self.chunk_size = check_int(chunk_size, "chunk_size", 1)
        self.q_proj = nn.Linear(C, h * d_k, bias=False)  # W_Q (C, h·d_k)
        self.k_proj = nn.Linear(C, h * d_k, bias=False)  # W_K (C, h·d_k)
        self.v_proj = nn.Linear(C, h * d_v, bias=False)  # W_V (C, h·d_v)
        self.b_proj = nn.Linear(C, h, bias=False) if rule != "linear" else None  # β's
        self.a_proj = nn.Linear(C, h, bias=False) if rule == "gated_delta" else None  # g's
        if rule == "gated_delta":
            A_log, dt_bias = initial_decays(h)  # (h,) each
            self.A_log, self.dt_bias = nn.Parameter(A_log), nn.Parameter(dt_bias)
        self.out_proj = nn.Linear(h * d_v, C, bias=False)  # W_O (h·d_v, C)

    def gates(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x (B, N, C) -> the log-decays g and the write strengths β, (B, h, N) each."""
        B, N, _ = x.shape
        if self.b_proj is None:  # linear attention: write everything, forget nothing
            ones = x.new_ones(B, self.num_heads, N)
            return torch.zeros_like(ones), ones
        beta = torch.sigmoid(self.b_proj(x)).transpose(1, 2)  # (B, h, N)
        if self.a_proj is None:  # the delta rule: no decay
            return torch.zeros_like(beta), beta
        g = -self.A_log.exp() * F.softplus(self.a_proj(x) + self.dt_bias)  # (B, N, h) ≤ 0
        return g.transpose(1, 2), beta  # (B, h, N) each

    def forward(self, x: Tensor) -> Tensor:
        h = self.num_heads
        q = l2_normalize(split_heads(self.q_proj(x), h))  # (B, h, N, d_k), unit vectors
        k = l2_normalize(split_heads(self.k_proj(x), h))  # (B, h, N, d_k)
        v = split_heads(self.v_proj(x), h)  # (B, h, N, d_v)
        g, beta = self.gates(x)  # (B, h, N) each
        erase = self.rule != "linear"
        o, _ = gated_delta_rule(q, k, v, g, beta, self.chunk_size, erase=erase)  # (B, h, N, d_v)
        return self.out_proj(merge_heads(o))  # (B, N, C)


def mixer_for(cfg: dict, d_model: int, layer: int) -> nn.Module:
    """The token mixer of block `layer` under cfg: notebook 11's attention ("gqa"), a
    `StateMixer` ("state"), or, for a "hybrid", the one its layer_types name for that layer."""
    if cfg["kind"] == "hybrid":
        return mixer_for(cfg[cfg["layer_types"][layer]], d_model, layer)
    if cfg["kind"] == "state":
        d = cfg["head_dim"]
        return StateMixer(d_model, cfg["num_heads"], d, d, cfg["rule"])
    return recall.attention_layer(cfg, d_model, layer)


def make_model(cfg: dict, seed: int) -> RecallModel:
    """Notebook 11's recall model with `LAYERS` blocks whose mixers `mixer_for` makes."""
    torch.manual_seed(seed)
    vocab = TASK["num_keys"] + TASK["num_values"]
    return RecallModel(cfg, vocab, N, TRAIN["d_model"], LAYERS, make_mixer=mixer_for)


def layer_numbers(cfg: dict, tokens: int = N) -> list[int]:
    """Per layer, the numbers it holds for one sequence once `tokens` tokens have been read:
    2·h_kv·d per token for a softmax cache, h·d_k·d_v for a state whatever the length."""
    if cfg["kind"] == "hybrid":
        return [layer_numbers(cfg[t], tokens)[0] for t in cfg["layer_types"]]
    if cfg["kind"] == "state":
        per_layer = cfg["num_heads"] * cfg["head_dim"] ** 2
    else:
        per_layer = 2 * cfg["num_kv_heads"] * cfg["head_dim"] * tokens
    return [per_layer] * LAYERS


def differences(cfg: dict) -> dict:
    """What the budget leaves unequal, per model: heads, the width of one q·k product, the
    width of all values read (what W_O mixes), whether q and k are unit vectors, the layers
    whose memory grows with N."""
    if cfg["kind"] == "hybrid":
        parts = [differences(cfg[t]) for t in cfg["layer_types"]]
        return {key: [p[key] for p in parts] for key in parts[0]}
    heads, d = cfg["num_heads"], cfg["head_dim"]
    state = cfg["kind"] == "state"
    return {
        "heads": heads,
        "q·k width": d,
        "value width": heads * d,
        "unit q, k": state,
        "grows with N": not state,
    }


@torch.no_grad()
def accuracy_by_pair(model: RecallModel, tokens: Tensor, targets: Tensor) -> list[float]:
    """The accuracy of the answers by the pair they ask for: entry i is the accuracy on the
    queries whose pair was shown i-th (positions 2i, 2i + 1; the first the oldest)."""
    model.eval()
    P = TASK["pairs"]
    keys, asked = tokens[:, 0 : 2 * P : 2], tokens[:, 2 * P :]  # (B, P) each
    pair = (asked[:, :, None] == keys[:, None, :]).float().argmax(-1)  # (B, P): which pair
    right = model(tokens).argmax(-1)[:, 2 * P :] == targets[:, 2 * P :]  # (B, P)
    return [round(right[pair == i].float().mean().item(), 4) for i in range(P)]


@torch.no_grad()
def gate_means(model: RecallModel, tokens: Tensor) -> list[dict]:
    """Per block with a state rule, the mean over tokens of each head's decay exp(g) and write
    strength β on `tokens`, as the trained model sets them ({} for a softmax block)."""
    model.eval()
    x, out = model.inputs(tokens), []
    for block in model.blocks:
        if isinstance(block.attn, StateMixer):
            g, beta = block.attn.gates(block.norm1(x))  # (B, h, N) each
            out.append(
                {
                    "decay": [round(v, 4) for v in g.exp().mean((0, 2)).tolist()],
                    "beta": [round(v, 4) for v in beta.mean((0, 2)).tolist()],
                }
            )
        else:
            out.append({})
        x = block(x)
    return out


def run_sweep(
    seeds=SEEDS,
    budgets=BUDGETS,
    variants=None,
    steps: int | None = None,
    processes: int = 1,
    verbose: bool = False,
) -> dict:
    """Train every variant (or those named) of every budget over seeds, each run on one thread
    (in `processes` worker processes); return the summary written to the file."""
    jobs = [  # seed by seed, so that the first seeds' results come first
        (budget, name, seed, steps)
        for seed in seeds
        for budget in budgets
        for name in VARIANTS[budget]
        if variants is None or name in variants
    ]
    runs = run_jobs(_one_run, jobs, processes, _say if verbose else None)
    return {
        **provenance("python -m mha_lib.linear_attention.recall"),
        "task": TASK,
        "train": {**TRAIN, "layers": LAYERS, **({"steps": steps} if steps else {})},
        "seeds": list(seeds),
        "budgets": list(budgets),
        "variants": {str(b): VARIANTS[b] for b in budgets},
        "runs": runs,
    }


def _say(run: dict) -> None:
    print(
        f"{run['budget']:>3} {run['variant']:<16} seed {run['seed']:>2}: "
        f"{run['accuracy']:.3f} ({run['seconds']:.0f} s)",
        flush=True,
    )


def _one_run(job: tuple) -> dict:
    """Train and evaluate one (budget, variant, seed) on one thread."""
    budget, name, seed, steps = job
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    cfg = VARIANTS[budget][name]
    tokens, targets = held_out_batch()
    model, curve = recall.train_one(cfg, seed, steps, build=make_model)
    return {
        "variant": name,
        "budget": budget,
        "layer_numbers": layer_numbers(cfg),
        "seed": seed,
        "params": sum(p.numel() for p in model.parameters()),
        "accuracy": round(evaluate(model, tokens, targets), 4),
        "accuracy_by_pair": accuracy_by_pair(model, tokens, targets),
        "gates": gate_means(model, tokens[:200]),
        "loss_curve": curve,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def load_sweep(path: Path | str = SWEEP_FILE) -> dict:
    """The cached sweep (see the module docstring for how it is made)."""
    return json.loads(Path(path).read_text())


def sweep_table(sweep: dict) -> dict[tuple[int, str], dict[int, float]]:
    """{(budget, variant): {seed: accuracy}}."""
    table: dict[tuple[int, str], dict[int, float]] = {}
    for run in sweep["runs"]:
        table.setdefault((run["budget"], run["variant"]), {})[run["seed"]] = run["accuracy"]
    return table


SOLVED = 0.9  # notebook 11's threshold: a run solves the task at this accuracy or above


def seed_claims(runs: list[dict]) -> dict[str, bool]:
    """Every statement about one seed's runs (one per model, one budget) that notebook 16 could
    make "in every seed": each model solved the task (accuracy >= `SOLVED`), and, for every two
    models, "A erred less than B" (a strictly smaller share of wrong answers)."""
    wrong = {run["variant"]: 1 - run["accuracy"] for run in runs}
    names = list(wrong)
    claims = {
        f"each of the {len(names)} models solved the task (accuracy >= {SOLVED})": all(
            run["accuracy"] >= SOLVED for run in runs
        )
    }
    for a in names:
        for b in names:
            if a != b:
                claims[f"{a} erred less than {b}"] = wrong[a] < wrong[b]
    return claims


def _by_seed(sweep: dict) -> dict[int, list[dict]]:
    by_seed: dict[int, list[dict]] = {}
    for run in sweep["runs"]:
        by_seed.setdefault(run["seed"], []).append(run)
    return {seed: by_seed[seed] for seed in sorted(by_seed)}


def claim_counts(sweep: dict) -> dict[str, int]:
    """{claim: the number of cached seeds in which it held} for every `seed_claims` claim."""
    counts: dict[str, int] = {}
    for runs in _by_seed(sweep).values():
        for claim, held in seed_claims(runs).items():
            counts[claim] = counts.get(claim, 0) + int(held)
    return counts


def every_seed_claims(sweep: dict) -> list[str]:
    """The claims that held in every cached seed: all that notebook 16 states "in every seed"
    (tests/linear_attention/test_recall.py checks each on a seed outside the cache)."""
    n = len(_by_seed(sweep))
    return [claim for claim, k in claim_counts(sweep).items() if k == n]


def new_seed_intervals(sweep: dict, level: float = 0.95) -> dict[str, tuple[float, float]]:
    """Per model, the `level` prediction interval for one new seed's accuracy (mean ± t · sd ·
    √(1 + 1/s) over the s cached seeds, `mha_lib.stats.prediction_interval`; not clipped),
    the interval notebook 16 prints as "one new seed, 95 %"."""
    from ..stats import prediction_interval

    table = {name: by_seed for (_, name), by_seed in sweep_table(sweep).items()}
    out = {}
    for name, by_seed in table.items():
        mean, half = prediction_interval(np.array(list(by_seed.values())), level=level)
        out[name] = (float(mean - half), float(mean + half))
    return out


def sweep_summary(sweep: dict) -> dict[tuple[int, str], dict]:
    """Per (budget, variant): notebook 11's summary (`efficient.recall.sweep_summary`: the mean
    accuracy with its 95 % t-interval over the seeds, not clipped; how many seeds solved the task,
    accuracy >= 0.9, with the Wilson interval of that rate; the parameter count)."""
    return recall.sweep_summary(sweep)


def extend_sweep(
    path: Path | str = SWEEP_FILE, seeds=SEEDS, processes: int = 2, verbose: bool = False
) -> dict:
    """The cached sweep at path with the seeds it lacks trained and added: the runs it holds are
    kept as they are (each run depends on its seed only), the new ones appended, and "parts"
    says which seeds each command made, with its provenance and minutes."""
    old = load_sweep(path)
    missing = [s for s in seeds if s not in old["seeds"]]
    fresh = run_sweep(seeds=missing, processes=processes, verbose=verbose) if missing else None
    if fresh is not None:
        for key in ("task", "train", "budgets", "variants"):
            if json.loads(json.dumps(fresh[key])) != old[key]:
                raise ValueError(f"the cache's {key} differs from this code's; rerun it all")
    made_by = ("made by", "torch", "python", "machine", "cpu capability", "minutes")
    parts = old.get("parts") or [{"seeds": old["seeds"], **{k: old[k] for k in made_by}}]
    out = {k: v for k, v in old.items() if k not in ("parts", "runs")}
    out["seeds"] = sorted(set(old["seeds"]) | set(missing))
    out["runs"] = old["runs"] + (fresh["runs"] if fresh else [])
    out["parts"] = parts + (
        [{"seeds": missing, **{k: fresh[k] for k in made_by[:-1]}}] if fresh else []
    )
    return out


def main(argv=None) -> int:
    """`python -m mha_lib.linear_attention.recall [out] [--processes P] [--extend]`: the whole
    sweep, or with --extend only the seeds of `SEEDS` the file at out lacks, added to it."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--extend" not in argv:
        return recall.sweep_command(
            "python -m mha_lib.linear_attention.recall", run_sweep, SWEEP_FILE, argv
        )
    argv.remove("--extend")
    import argparse

    parser = argparse.ArgumentParser(prog="python -m mha_lib.linear_attention.recall --extend")
    parser.add_argument("out", nargs="?", type=Path, default=SWEEP_FILE)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    result = extend_sweep(args.out, processes=args.processes, verbose=True)
    minutes = round((time.perf_counter() - t0) / 60, 1)
    result["parts"][-1].setdefault("minutes", minutes)
    result["minutes"] = round(sum(p["minutes"] for p in result["parts"]), 1)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out} ({len(result['seeds'])} seeds) in {minutes} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
