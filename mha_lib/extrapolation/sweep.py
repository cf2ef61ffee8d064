"""Train every position scheme over several seeds at length L; evaluate at L, 2L and 4L.

The experiment of notebook 10, §6. For each task of `tasks.TASKS`, each scheme of
`model.SCHEMES` and each seed of `SEEDS`, `train` fits a `TinyCausal` (settings in `TRAIN`) on
sequences of length L = TRAIN["L"], and `evaluate` measures its per-position accuracy on fixed
test sequences (generator seed 1000, never trained on) of lengths L, 2L and 4L. Then the RoPE
models are stretched to 4L in two ways and evaluated again, without and with a short
fine-tune (`FINETUNE`) on sequences of length 4L:
- "rope + PI": position interpolation (Chen et al., 2023), positions scaled by L / 4L;
- "rope + base": the "NTK-aware" larger base, base · 4^(d/(d-2)) with d = d_k;
- "rope + fine-tune": neither, the same fine-tune (the control: what the fine-tune alone buys).

The sweep takes several minutes on one CPU core, so its summary is cached in `SWEEP_FILE`
(`mha_lib/data/nb10_extrapolation.json`) and notebook 10 reads it with `load_sweep`;
`python -m mha_lib.extrapolation.sweep` regenerates it. The numbers follow training
trajectories, which differ in their last bits from one processor to another;
`tests/extrapolation/test_sweep.py` regenerates `TEST_SUBSET` (one seed, four variants) and
compares its accuracies with the cached ones within a margin.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from importlib import resources
from pathlib import Path

import numpy as np
import torch

from ..stats import t_interval
from .model import SCHEMES, TinyCausal, loss_and_accuracy
from .tasks import TASKS, batch

__all__ = [
    "FINETUNE",
    "LENGTHS",
    "SEEDS",
    "STRETCHED",
    "SWEEP_FILE",
    "TEST_SUBSET",
    "TRAIN",
    "evaluate",
    "load_sweep",
    "one_seed",
    "run_sweep",
    "seed_interval",
    "stretch",
    "summary",
    "train",
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
FINETUNE = {"steps": 100, "batch_size": 16, "lr": 1e-3}
LENGTHS = (32, 64, 128)  # L, 2L, 4L
SEEDS = tuple(range(5))
# what the test regenerates (under a minute): seed 0 of copy_back, these variants
TEST_SUBSET = ("copy_back", 0, ("sinusoidal", "rope", "rope + PI", "rope + PI, tuned"))
STRETCHED = ("rope + PI", "rope + base", "rope + fine-tune")
SWEEP_FILE = Path(
    str(resources.files("mha_lib") / "data" / "nb10_extrapolation.json")
)  # mha_lib/data/
TEST_BATCH = 256


def train(task: str, scheme: str, seed: int, steps: int | None = None) -> TinyCausal:
    """A TinyCausal with `scheme`, initialised and trained from `seed` on `task` at length L."""
    torch.manual_seed(seed)
    cfg = TRAIN
    model = TinyCausal(
        scheme, cfg["vocab_size"], cfg["C"], cfg["num_heads"], cfg["n_layers"], max_len=4 * cfg["L"]
    )
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.0)
    for _ in range(cfg["steps"] if steps is None else steps):
        x, y = batch(task, g, cfg["batch_size"], cfg["L"], cfg["vocab_size"])
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
    elif how != "rope + fine-tune":
        raise ValueError(f"how = {how!r}; expected one of {STRETCHED}")
    return model


def finetune(model: TinyCausal, task: str, seed: int, N: int) -> TinyCausal:
    """FINETUNE["steps"] steps on sequences of length N (in place; returns it)."""
    g = torch.Generator().manual_seed(10_000 + seed)
    opt = torch.optim.AdamW(model.parameters(), lr=FINETUNE["lr"], weight_decay=0.0)
    for _ in range(FINETUNE["steps"]):
        x, y = batch(task, g, FINETUNE["batch_size"], N, TRAIN["vocab_size"])
        loss, _ = loss_and_accuracy(model, x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


@torch.no_grad()
def evaluate(model: TinyCausal, task: str) -> dict:
    """{"acc": [accuracy at L, 2L, 4L], "by position": per-position accuracy at 4L (4L,)}:
    accuracy over every targeted position of TEST_BATCH fixed sequences (seed 1000)."""
    out = {"acc": []}
    for N in LENGTHS:
        x, y = batch(task, torch.Generator().manual_seed(1000), TEST_BATCH, N, TRAIN["vocab_size"])
        _, acc = loss_and_accuracy(model, x, y)  # (N,)
        out["acc"].append(round(float(acc[~acc.isnan()].mean()), 4))
    out["by position"] = [None if np.isnan(a) else round(float(a), 3) for a in acc.tolist()]
    return out


def variants() -> tuple[str, ...]:
    """Every variant the sweep evaluates: the five schemes, then the stretched RoPE models."""
    return SCHEMES + (
        "rope + PI",
        "rope + PI, tuned",
        "rope + base",
        "rope + base, tuned",
        "rope + fine-tune",
    )


def one_seed(task: str, seed: int, only: tuple[str, ...] | None = None) -> dict:
    """{variant: evaluate()} for one (task, seed): every variant, or those in `only`."""
    wanted = variants() if only is None else only
    row, rope_state = {}, None
    for scheme in SCHEMES:
        if scheme in wanted or (scheme == "rope" and any(w.startswith("rope +") for w in wanted)):
            model = train(task, scheme, seed)
            if scheme in wanted:
                row[scheme] = evaluate(model, task)
            if scheme == "rope":
                rope_state = {k: v.clone() for k, v in model.state_dict().items()}
    for variant in wanted:
        if not variant.startswith("rope +"):
            continue
        how, tuned = variant.removesuffix(", tuned"), variant.endswith("tuned")
        model = TinyCausal(
            "rope",
            TRAIN["vocab_size"],
            TRAIN["C"],
            TRAIN["num_heads"],
            TRAIN["n_layers"],
            max_len=4 * TRAIN["L"],
        )
        model.load_state_dict(rope_state)
        stretch(model, how)
        if tuned or how == "rope + fine-tune":
            finetune(model, task, seed, LENGTHS[-1])
        row[variant] = evaluate(model, task)
    return row


def _job(args: tuple[str, int]) -> tuple[str, int, dict, float]:
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    task, seed = args
    return task, seed, one_seed(task, seed), time.perf_counter() - t0


def run_sweep(seeds=SEEDS, processes: int = 1, verbose: bool = False) -> dict:
    """The whole sweep for `seeds`: {"seeds", ..., task: {variant: [evaluate() per seed]}},
    each (task, seed) trained independently (in `processes` worker processes)."""
    result = {"seeds": list(seeds), "lengths": list(LENGTHS), "train": TRAIN, "finetune": FINETUNE}
    jobs = [(task, seed) for task in TASKS for seed in seeds]
    if processes > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(processes) as pool:
            done = pool.map(_job, jobs, chunksize=1)
    else:
        done = map(_job, jobs)
    rows = {}
    for task, seed, row, seconds in done:
        rows[task, seed] = row
        if verbose:
            print(f"{task} seed {seed}: {seconds:.0f} s", flush=True)
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


def main() -> int:
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    result = run_sweep(processes=2, verbose=True)
    result["made by"] = "python -m mha_lib.extrapolation.sweep"
    result["torch"] = torch.__version__
    result["machine"] = platform.machine()
    result["cpu capability"] = torch.backends.cpu.get_cpu_capability()
    result["minutes"] = round((time.perf_counter() - t0) / 60, 1)
    SWEEP_FILE.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {SWEEP_FILE} in {result['minutes']} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
