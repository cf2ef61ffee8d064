"""Train every position scheme over several seeds at length L; evaluate at L, 2L and 4L.

The experiment of notebook 10, §6. For each task of `tasks.TASKS`, each scheme of
`model.SCHEMES` and each seed of `SEEDS`, `train` fits a `TinyCausal` (settings in `TRAIN`) on
sequences of length L = TRAIN["L"], and `evaluate` measures its per-position accuracy on fixed
test sequences (generator seed 1000, never trained on) of lengths L, 2L and 4L. One more
variant, "nope + start", is NoPE on sequences that begin with a start token (`tasks.batch`'s
`start=True`). Then the RoPE models are stretched to 4L in two ways and evaluated as they are,
then along a fine-tune on sequences of length 4L (`FINETUNE`: evaluated after each number of
steps in FINETUNE["steps"], one run, so "after 500 steps" is the same run as "after 250 steps"
continued):
- "rope + PI": position interpolation (Chen et al., 2023), positions scaled by L / 4L;
- "rope + base": the "NTK-aware" larger base, base · 4^(d/(d-2)) with d = d_k;
- "rope": neither, the same fine-tune (the control: what the fine-tune alone buys).
A fine-tuned variant is named "<how>, tuned <steps>" ("rope + PI, tuned 500", "rope, tuned 100").
The fine-tune stops at 1000 steps, as Chen et al.'s does, so notebook 10 states what happens
within 1000 steps. Continuing it to 4000 (adding 2000 and 4000 to FINETUNE["steps"]) would take
the sweep from about 35 to about 90 minutes of one core: each (task, seed) trains six models of
about 7 s and runs three fine-tunes of about 19 s per 1000 steps (processor time, measured on a
busy 2-core AMD EPYC; to be measured again on an idle one).

The sweep takes about half an hour of one CPU core (an hour and a half on two busy shared
cores), so its summary is cached in `SWEEP_FILE` (`mha_lib/data/nb10_extrapolation.json`) and
notebook 10 reads it with `load_sweep`;
`python -m mha_lib.extrapolation.sweep` regenerates it. The numbers follow training
trajectories, which differ in their last bits from one processor to another;
`tests/extrapolation/test_sweep.py` regenerates `TEST_SUBSET` and compares its accuracies with
the cached ones within a margin, and trains a seed outside the cache to test the claims that
notebook 10 states for every seed (`seed_claims`, with the variants it needs in
`CLAIM_VARIANTS`).
"""

from __future__ import annotations

import json
import sys
import time
from importlib import resources
from pathlib import Path

import numpy as np
import torch

from ..runtime import provenance
from ..stats import t_interval
from .model import SCHEMES, TinyCausal, loss_and_accuracy
from .tasks import TASKS, batch

__all__ = [
    "CLAIM_VARIANTS",
    "FINETUNE",
    "LENGTHS",
    "SEEDS",
    "STRETCHED",
    "SWEEP_FILE",
    "TEST_SUBSET",
    "TRAIN",
    "WITH_START",
    "evaluate",
    "finetune",
    "load_sweep",
    "new_model",
    "one_seed",
    "run_sweep",
    "seed_claims",
    "seed_interval",
    "stretch",
    "summary",
    "train",
    "tuned",
    "variants",
]

TRAIN = {
    "L": 32,
    "vocab_size": 16,
    "C": 32,
    "num_heads": 2,
    "n_layers": 2,
    "steps": 1000,
    "batch_size": 32,
    "lr": 3e-3,
}
FINETUNE = {"steps": (100, 250, 500, 1000), "batch_size": 16, "lr": 1e-3}
LENGTHS = (32, 64, 128)  # L, 2L, 4L
SEEDS = tuple(range(10))
# what the regeneration test trains again (one model, about 15 s): seed 0 of copy_back
TEST_SUBSET = ("copy_back", 0, ("rope", "rope + PI", "rope + base"))
STRETCHED = ("rope + PI", "rope + base", "rope")  # "rope": the control, stretched by nothing
WITH_START = "nope + start"
SWEEP_FILE = Path(
    str(resources.files("mha_lib") / "data" / "nb10_extrapolation.json")
)  # mha_lib/data/
TEST_BATCH = 256


def new_model(scheme: str, start: bool = False) -> TinyCausal:
    """An untrained TinyCausal of the sweep's size (a start token adds one token and one
    position)."""
    cfg = TRAIN
    return TinyCausal(
        scheme,
        cfg["vocab_size"] + start,
        cfg["C"],
        cfg["num_heads"],
        cfg["n_layers"],
        max_len=4 * cfg["L"] + start,
    )


def train(
    task: str, scheme: str, seed: int, steps: int | None = None, start: bool = False
) -> TinyCausal:
    """A TinyCausal with `scheme`, initialised and trained from `seed` on `task` at length L
    (start: on sequences that begin with a start token)."""
    torch.manual_seed(seed)
    cfg = TRAIN
    model = new_model(scheme, start)
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.0)
    for _ in range(cfg["steps"] if steps is None else steps):
        x, y = batch(task, g, cfg["batch_size"], cfg["L"], cfg["vocab_size"], start)
        loss, _ = loss_and_accuracy(model, x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def stretch(model: TinyCausal, how: str, factor: int = 4) -> TinyCausal:
    """Set a RoPE model up for sequences `factor` times longer (in place; returns it)."""
    d = TRAIN["C"] // TRAIN["num_heads"]
    if how == "rope + PI":
        model.rope_scale = 1.0 / factor
    elif how == "rope + base":
        model.rope_base = 10000.0 * factor ** (d / (d - 2))
    elif how != "rope":
        raise ValueError(f"how = {how!r}; expected one of {STRETCHED}")
    return model


def finetune(model: TinyCausal, task: str, seed: int, N: int, steps: int):
    """Fine-tune on sequences of length N (in place), yielding the number of steps done after
    each of FINETUNE["steps"] up to `steps` (one run: the checkpoints of one curve)."""
    g = torch.Generator().manual_seed(10_000 + seed)
    opt = torch.optim.AdamW(model.parameters(), lr=FINETUNE["lr"], weight_decay=0.0)
    for step in range(1, steps + 1):
        x, y = batch(task, g, FINETUNE["batch_size"], N, TRAIN["vocab_size"])
        loss, _ = loss_and_accuracy(model, x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step in FINETUNE["steps"]:
            yield step


@torch.no_grad()
def evaluate(model: TinyCausal, task: str, start: bool = False, by_position: bool = True) -> dict:
    """{"acc": [accuracy at L, 2L, 4L], "by position": per-position accuracy at 4L (4L,)}:
    accuracy over every targeted position of TEST_BATCH fixed sequences (seed 1000; with a
    start token, the same sequences after it; by_position=False leaves "by position" out)."""
    out = {"acc": []}
    for N in LENGTHS:
        g = torch.Generator().manual_seed(1000)
        x, y = batch(task, g, TEST_BATCH, N, TRAIN["vocab_size"], start)
        _, acc = loss_and_accuracy(model, x, y)  # (N,) or (N + 1,)
        out["acc"].append(round(float(acc[~acc.isnan()].mean()), 4))
    if by_position:
        acc = acc[1:] if start else acc  # (4L,): positions counted from the first random token
        out["by position"] = [None if np.isnan(a) else round(float(a), 3) for a in acc.tolist()]
    return out


def tuned(how: str, steps: int) -> str:
    """The name of a stretched variant after `steps` fine-tune steps: "rope + PI, tuned 500"."""
    return f"{how}, tuned {steps}"


def variants() -> tuple[str, ...]:
    """Every variant the sweep evaluates: the five schemes, NoPE with a start token, the
    stretched RoPE models as they are, then along their fine-tune."""
    stretched = ("rope + PI", "rope + base")
    curves = tuple(tuned(how, n) for how in STRETCHED for n in FINETUNE["steps"])
    return SCHEMES + (WITH_START,) + stretched + curves


def one_seed(task: str, seed: int, only: tuple[str, ...] | None = None) -> dict:
    """{variant: evaluate()} for one (task, seed): every variant, or those in `only` (a
    fine-tune runs as far as the last checkpoint wanted)."""
    wanted = variants() if only is None else only
    unknown = set(wanted) - set(variants())
    if unknown:
        raise ValueError(f"unknown variants {sorted(unknown)}; expected some of {variants()}")
    row, rope_state = {}, None
    needs_rope = any(w.startswith("rope") for w in wanted)
    for scheme in SCHEMES:
        if scheme in wanted or (scheme == "rope" and needs_rope):
            model = train(task, scheme, seed)
            if scheme in wanted:
                row[scheme] = evaluate(model, task)
            if scheme == "rope":
                rope_state = {k: v.clone() for k, v in model.state_dict().items()}
    if WITH_START in wanted:
        row[WITH_START] = evaluate(train(task, "nope", seed, start=True), task, start=True)
    for how in STRETCHED:
        steps = [n for n in FINETUNE["steps"] if tuned(how, n) in wanted]
        if how not in wanted and not steps:
            continue
        model = new_model("rope")
        model.load_state_dict(rope_state)
        stretch(model, how)
        if how != "rope" and how in wanted:
            row[how] = evaluate(model, task, by_position=False)
        for done in finetune(model, task, seed, LENGTHS[-1], max(steps, default=0)):
            if done in steps:
                row[tuned(how, done)] = evaluate(model, task, by_position=False)
    return row


def _job(args: tuple[str, int]) -> tuple[str, int, dict, float]:
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    task, seed = args
    return task, seed, one_seed(task, seed), time.perf_counter() - t0


def run_sweep(seeds=SEEDS, processes: int = 1, verbose: bool = False) -> dict:
    """The whole sweep for `seeds`: {"seeds", ..., task: {variant: [evaluate() per seed]}},
    each (task, seed) trained independently (in `processes` worker processes)."""
    result = {
        "seeds": list(seeds),
        "lengths": list(LENGTHS),
        "train": TRAIN,
        "finetune": {**FINETUNE, "steps": list(FINETUNE["steps"])},
    }
    jobs = [(task, seed) for task in TASKS for seed in seeds]
    rows = {}

    def collect(done):  # as each (task, seed) ends, so that a long run shows its progress
        for task, seed, row, seconds in done:
            rows[task, seed] = row
            if verbose:
                print(f"{task} seed {seed}: {seconds:.0f} s", flush=True)

    if processes > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(processes) as pool:
            collect(pool.imap_unordered(_job, jobs, chunksize=1))
    else:
        collect(map(_job, jobs))
    for task in TASKS:
        result[task] = {v: [rows[task, s][v] for s in seeds] for v in variants()}
    return result


def load_sweep(path: Path = SWEEP_FILE) -> dict:
    """The cached sweep (see the module's docstring for where it comes from)."""
    return json.loads(Path(path).read_text())


def summary(sweep: dict, task: str, variant: str) -> np.ndarray:
    """(seeds, 3) accuracies at L, 2L, 4L of one variant."""
    return np.array([ev["acc"] for ev in sweep[task][variant]])


def seed_interval(acc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """acc (seeds, ...) -> (mean, half-width) of the 95 % t-interval over the seeds
    (`mha_lib.stats.t_interval` along axis 0)."""
    return t_interval(acc, axis=0)


# what seed_claims needs trained for one seed, per task: the absolute schemes, RoPE as trained,
# stretched, and along the fine-tune as far as the claims go (1000 steps)
CLAIM_VARIANTS = {
    "copy_back": (
        "sinusoidal",
        "learned",
        "rope",
        "rope + PI",
        "rope + base",
        "rope + PI, tuned 100",
        "rope + PI, tuned 250",
        "rope + PI, tuned 1000",
        "rope + base, tuned 100",
        "rope, tuned 100",
    ),
    "token_at": (
        "sinusoidal",
        "learned",
        "rope",
        "rope + base",
        WITH_START,
        "rope + PI, tuned 1000",
        "rope, tuned 1000",
    ),
}


def seed_claims(copy_back: dict, token_at: dict) -> dict[str, bool]:
    """The claims notebook 10 states for every seed, on one seed's evaluations ({variant:
    evaluate()} of each task, with at least CLAIM_VARIANTS[task]): each must hold in every
    cached seed and in a new one (tests/extrapolation/test_sweep.py trains one outside the
    cache). Everything else notebook 10 says about seeds is a rate ("k of n seeds") or a mean,
    which one new seed cannot test."""

    def acc(row, variant):
        return row[variant]["acc"]  # [L, 2L, 4L]

    def everywhere(row, variant, at_least=0.99):  # at L, 2L and 4L
        return min(acc(row, variant)) >= at_least

    cb, ta = copy_back, token_at
    return {
        "sinusoidal, learned and RoPE positions solve copy_back at L (accuracy >= 0.99)": all(
            acc(cb, s)[0] >= 0.99 for s in ("sinusoidal", "learned", "rope")
        ),
        "copy_back at 2L and at 4L: RoPE above sinusoidal and above learned": all(
            acc(cb, "rope")[j] > acc(cb, s)[j] for s in ("sinusoidal", "learned") for j in (1, 2)
        ),
        "token_at at 4L: sinusoidal and learned positions at 0.9 or above": all(
            acc(ta, s)[2] >= 0.9 for s in ("sinusoidal", "learned")
        ),
        "token_at at L: RoPE below 0.99": acc(ta, "rope")[0] < 0.99,
        "token_at, NoPE with a start token: 0.84 or above at L, 2L and 4L": everywhere(
            ta, WITH_START, 0.84
        ),
        "position interpolation without a fine-tune: copy_back below 0.1 at L, 2L and 4L": max(
            acc(cb, "rope + PI")
        )
        < 0.1,
        "the larger base, without a fine-tune: copy_back at 4L above plain RoPE's": acc(
            cb, "rope + base"
        )[2]
        > acc(cb, "rope")[2],
        "the larger base lowers token_at at L below plain RoPE's": acc(ta, "rope + base")[0]
        < acc(ta, "rope")[0],
        "copy_back, position interpolation after 100 and after 250 fine-tune steps: below 0.99 "
        "at one length at least": not any(
            everywhere(cb, tuned("rope + PI", k)) for k in (100, 250)
        ),
        "copy_back, position interpolation after 1000 fine-tune steps: 0.99 or above at L, 2L "
        "and 4L": everywhere(cb, tuned("rope + PI", 1000)),
        "copy_back, the larger base and the control after 100 fine-tune steps: 0.99 or above at "
        "L, 2L and 4L": all(everywhere(cb, tuned(how, 100)) for how in ("rope + base", "rope")),
        "token_at at 4L after 1000 fine-tune steps: position interpolation below the control": acc(
            ta, tuned("rope + PI", 1000)
        )[2]
        < acc(ta, tuned("rope", 1000))[2],
    }


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m mha_lib.extrapolation.sweep")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--out", type=Path, default=SWEEP_FILE)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    result = run_sweep(processes=args.processes, verbose=True)
    result.update(provenance("python -m mha_lib.extrapolation.sweep"))
    result["minutes"] = round((time.perf_counter() - t0) / 60, 1)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out} in {result['minutes']} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
