"""The cached seed sweep of notebook 06 (`mha_lib/data/nb06_seed_sweep.json`) is what
`python -m mha_lib.toy.seed_sweep` makes.

The whole sweep (100 seeds, 300 small trainings) takes minutes, too slow for the test suite, so the
regeneration test trains `TEST_SEEDS`, a fixed subset of 8 seeds spread over the sweep (0, 14, ...,
98), and compares each with its cached entry. It runs `python -m mha_lib.toy.seed_sweep` in two
subprocesses (one per core; the seeds are independent), with torch's CPU kernels set to the level
the cache was made with when this processor has it: then a seed's training follows the cached
trajectory, and on the machine that made the cache it reproduces it exactly. Elsewhere (an ARM
processor, another BLAS) trajectories differ slightly, so the comparison has margins: how many of
the 8 seeds each of notebook 06's claims holds in, within a seed or two, and, under the cached
kernels, each seed's accuracies and losses."""

from __future__ import annotations

import json
import math
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mha_lib.toy.seed_sweep import (
    SEEDS,
    SUBSETS,
    SWEEP_FILE,
    TEST_SEEDS,
    every_seed_claims,
    frequency,
    load_sweep,
    seed_table,
    sweep_claims,
    wilson_interval,
)

LN_V = math.log(32)
ROOT = Path(__file__).resolve().parents[2]
PER_SEED = ("committee 4 heads", "committee 1 head", "induction")


def subset(sweep: dict, seeds) -> dict:
    """The entries of `seeds` only, in the order of `seeds`."""
    index = [sweep["seeds"].index(s) for s in seeds]
    out = {k: v for k, v in sweep.items() if k not in PER_SEED}
    out["seeds"] = list(seeds)
    out.update({k: [sweep[k][i] for i in index] for k in PER_SEED})
    return out


def test_the_cached_sweep_has_every_seed_and_says_where_it_came_from():
    assert SWEEP_FILE.is_file(), f"{SWEEP_FILE} is missing: python -m mha_lib.toy.seed_sweep"
    sweep = load_sweep()
    assert sweep["seeds"] == list(SEEDS) and len(SEEDS) >= 40
    assert set(TEST_SEEDS) <= set(SEEDS) and len(TEST_SEEDS) == 8
    assert sweep["made by"] == "python -m mha_lib.toy.seed_sweep"
    assert {"torch", "machine", "cpu capability"} <= set(sweep)
    for key in PER_SEED:
        assert len(sweep[key]) == len(SEEDS)
    table = seed_table(sweep)
    assert all(len(a) == 3 for a in table["acc4"] + table["acc1"])
    assert all(len(c["loss"]) == 49 for c in sweep["committee 4 heads"])  # 500 steps


def test_a_claim_counts_the_seeds_it_holds_in():
    sweep = load_sweep()
    claims = sweep_claims(subset(sweep, SEEDS[:1]), LN_V)
    assert claims["seeds"] == 1 and all(v in (0, 1) for v in claims.values())


def test_the_wilson_interval():
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(11, 11) == pytest.approx((0.7412, 1.0), abs=1e-4)
    assert wilson_interval(50, 50)[0] == pytest.approx(0.9287, abs=1e-4)
    for k in range(51):  # contains k/n, inside [0, 1]
        lo, hi = wilson_interval(k, 50)
        assert 0 <= lo <= k / 50 <= hi <= 1
    for bad in ((3, 2), (-1, 5), (0, 0)):
        with pytest.raises(ValueError, match="0 <= k <= n"):
            wilson_interval(*bad)
    assert frequency(21, 50) == "21 of 50 seeds (95 % interval 29–56 %)"


def regenerate(seeds, out: Path, capability: str | None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if capability is not None:
        env["ATEN_CPU_CAPABILITY"] = capability.lower()
    command = [sys.executable, "-m", "mha_lib.toy.seed_sweep", str(out), "--seeds"]
    return subprocess.Popen(
        command + [str(s) for s in seeds], env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True
    )


def merged(parts: list[dict]) -> dict:
    """One sweep from the files of several `regenerate` runs."""
    out = {k: v for k, v in parts[0].items() if k not in PER_SEED}
    out["seeds"] = [s for p in parts for s in p["seeds"]]
    out.update({k: [e for p in parts for e in p[k]] for k in PER_SEED})
    return out


def capability_of(cached: dict) -> str | None:
    """The cache's kernel level (AVX2, which any recent x86-64 processor has), asked for on x86;
    torch falls back to a lower level where the processor lacks it, and says so in the file."""
    return cached["cpu capability"] if platform.machine() in ("x86_64", "AMD64") else None


def run_all(groups, tmp_path: Path, capability: str | None, name: str) -> dict:
    """Regenerate each group of seeds in its own subprocess (one per core) and merge them."""
    runs = [
        regenerate(seeds, tmp_path / f"{name}{i}.json", capability)
        for i, seeds in enumerate(groups)
    ]
    for run in runs:
        _, err = run.communicate(timeout=900)
        assert run.returncode == 0, err
    return merged([json.loads((tmp_path / f"{name}{i}.json").read_text()) for i in range(2)])


def test_regenerating_the_test_seeds_gives_their_cached_entries_within_a_margin(tmp_path):
    cached = load_sweep()
    halves = (TEST_SEEDS[::2], TEST_SEEDS[1::2])
    fresh = run_all(halves, tmp_path, capability_of(cached), "half")
    assert sorted(fresh["seeds"]) == list(TEST_SEEDS)
    pinned = fresh["cpu capability"] == cached["cpu capability"]
    old = subset(cached, fresh["seeds"])

    # every claim of notebook 06 holds in as many of the 8 seeds, give or take a borderline seed
    # (two where the kernels differ from the cache's)
    fresh_claims, old_claims = sweep_claims(fresh, LN_V), sweep_claims(old, LN_V)
    margin = 1 if pinned else 2
    for claim, count in old_claims.items():
        assert abs(fresh_claims[claim] - count) <= margin, (claim, fresh_claims[claim], count)

    # under the cached kernels, each seed's numbers: accuracies within 2 points, losses within
    # 0.05, in at least 7 of the 8 seeds (on the machine that made the cache: all, exactly)
    if pinned:
        t_new, t_old = seed_table(fresh), seed_table(old)

        def agrees(i: int) -> bool:
            accuracies = t_new["acc4"][i] + t_new["acc1"][i], t_old["acc4"][i] + t_old["acc1"][i]
            losses = [
                (t_new[k][i], t_old[k][i]) for k in ("loss", "worst_layer0", "no_layer1", "end4")
            ]
            return all(abs(a - b) <= 0.02 for a, b in zip(*accuracies)) and all(
                abs(a - b) <= 0.05 for a, b in losses
            )

        agreeing = [s for i, s in enumerate(fresh["seeds"]) if agrees(i)]
        assert len(agreeing) >= 7, agreeing


# ---------------------------------------------------------------------------- new seeds

NEW_SEEDS = (100, 101)  # the first two seeds outside the sweep (SEEDS is 0 .. 99)

# What notebook 06 states as holding in every seed counted: "100 of 100", or "k of the k seeds
# with ...". A new seed must satisfy each of these (a conditional one when it meets the condition).
EVERY_SEED = {
    "4 heads: two or more above 95 %",
    "4 heads: no plateau at step 100, and all three above 99 %",
    "4 heads beat 1 head by 10 points on the mean",
    "4 heads: each relation has a head scoring above 0.5",
    "1 head: some sub-task below 30 %",
    "1 head: same label above 80 %; the largest share of its weight on the partner",
    "1 head: same label above 80 %; both neighbours above chance (1/16)",
    "both layer-1 heads are induction heads (above 0.6)",
    "the trained loss on the second copy is below 0.2 ln V",
    "the loss falls twice as far in the 100 steps around its drop as in steps 20-120",
    "removing both layer-1 heads raises the loss above 0.9 ln V",
    "duplicate-token head, no previous-token head; both induction heads Q-compose with it "
    "above 0.25",
    "duplicate-token head, no previous-token head; copying needs the duplicate-token head most",
    "duplicate-token head, no previous-token head; K-composition with the head of higher "
    "previous-token score below random",
}


def test_the_every_seed_claims_are_those_the_cache_supports():
    """EVERY_SEED is what the cached sweep holds in every seed (or every seed of a subset): if
    the cache is regenerated and a claim drops to a frequency, the notebook and this list follow."""
    claims = sweep_claims(load_sweep(), LN_V)
    assert set(every_seed_claims(claims)) == EVERY_SEED
    assert set(SUBSETS) <= set(claims) and set(SUBSETS.values()) <= set(claims)


def test_new_seeds_satisfy_every_claim_stated_for_every_seed(tmp_path):
    """Seeds 100 and 101, which the sweep never ran, trained with notebook 06's exact settings (the
    three models of a seed, in one subprocess per seed, about 20 s on two cores), satisfy every
    claim the notebook states for every seed counted (EVERY_SEED): a claim that held in 100 of 100
    seeds says the next seed should do it too, and this is where that is tested. A conditional one
    ("22 of the 22 seeds with a duplicate-token head and no previous-token head ...") is tested
    when a new seed meets its condition.

    The other claims are proportions, which one seed cannot test: "all three above 99 %" (98 of
    100), the plateau and second-drop counts, the score tallies (two heads on same label / previous
    / next, the commonest assignment, a spare head, what removing it costs), the wide head's kinds
    (same label, a neighbour, both neighbours, its weight on the partner or the neighbours),
    "removing one layer-0 head raises the loss above 0.5 ln V" (98 of 100), which layer-0 heads grow
    (previous-token, duplicate-token, both, one or the other), the K-composition near random (74 of
    77), which head copying needs most, and the Q-composition counts; and the means with
    t-intervals. One new seed adds one observation to a proportion or a mean; testing those takes a
    sweep of seeds."""
    cached = load_sweep()
    assert not set(NEW_SEEDS) & set(SEEDS), f"{NEW_SEEDS} must be seeds the sweep did not run"
    fresh = run_all(([NEW_SEEDS[0]], [NEW_SEEDS[1]]), tmp_path, capability_of(cached), "new")
    assert fresh["seeds"] == list(NEW_SEEDS)
    new = sweep_claims(fresh, LN_V)
    for claim in sorted(EVERY_SEED):
        if claim in SUBSETS:  # k of the k seeds with ...: every new seed with the condition
            assert new[claim] == new[SUBSETS[claim]], (claim, new[claim], new[SUBSETS[claim]])
        else:
            assert new[claim] == len(NEW_SEEDS), (claim, new[claim])


# ---------------------------------------------------------------------------- notebook 06's text

NOTEBOOK = ROOT / "notebooks" / "06_heads_that_learn.ipynb"
# "k of n seeds (lo–hi %)", "k of the n seeds with ... (lo–hi %)", "k of n (lo–hi %)"
COUNT = re.compile(r"(\d+) of (?:the |those )?(\d+)\b[^().;]{0,60}?\((\d+)–(\d+) %\)")


def markdown(path: Path = NOTEBOOK) -> str:
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def test_notebook_06_states_its_counts_with_their_intervals_and_has_one_summary():
    text = re.sub(r"\s+", " ", markdown())
    counts = COUNT.findall(text)
    assert len(counts) >= 20, counts
    for k, n, lo, hi in counts:
        a, b = wilson_interval(int(k), int(n))
        assert (lo, hi) == (f"{100 * a:.0f}", f"{100 * b:.0f}"), (k, n, lo, hi)
    claimed = set(sweep_claims(load_sweep(), LN_V).values())
    for k, n, _, _ in counts:  # a count out of the whole sweep is one of the sweep's claims
        assert int(n) != len(SEEDS) or int(k) in claimed, (k, n)
    # "every seed" / "in all seeds" only as "100 of 100", with its interval
    assert not re.search(r"(?i)\bin every seed|every seed's|\bin all (\d+ )?seeds", text)
    assert text.count("## Summary") == 1


# how notebook 06 names a subset of seeds, and the claim that counts it ("22 of the 22 seeds
# without a previous-token head" was once written where 23 seeds have none)
SUBSET_WORDS = {
    "that have a duplicate-token head and no previous-token head": (
        "duplicate-token head, no previous-token head"
    ),
    "with a duplicate-token head and no previous-token head": (
        "duplicate-token head, no previous-token head"
    ),
    "without a previous-token head": "layer 0 has no previous-token head",
    "with a previous-token head": "layer 0 has a previous-token head",
    "with a duplicate-token head": "layer 0 has a duplicate-token head",
    "without a plateau at step 100": "4 heads: no plateau at step 100",
}
NAMED = re.compile(r"\b(\d+) of (?:the |those )?(\d+) seeds ((?:that have|with|without) [^().;,]+)")


def test_notebook_06_counts_a_named_subset_of_seeds_out_of_its_size():
    """ "k of the k' seeds with X": k' is how many seeds have X in the sweep, counted there."""
    claims = sweep_claims(load_sweep(), LN_V)
    text = re.sub(r"\s+", " ", markdown())
    checked = 0
    for m in NAMED.finditer(text):
        words = next(
            (w for w in sorted(SUBSET_WORDS, key=len, reverse=True) if m[3].startswith(w)), None
        )
        if words is not None:
            assert int(m[2]) == claims[SUBSET_WORDS[words]], (m[0], claims[SUBSET_WORDS[words]])
            checked += 1
    assert checked >= 5, checked
