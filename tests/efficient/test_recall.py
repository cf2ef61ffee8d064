"""mha_lib.efficient.recall: the task, the models' cache budgets, and the cached sweep of
notebook 11 (`mha_lib/data/nb11_recall_sweep.json`, made by `python -m mha_lib.efficient.recall`).

The sweep follows training trajectories, which differ slightly from processor to processor, so
the regeneration test retrains a documented subset, `SUBSET` (two models of the 32-number
budget, seed 0, each solving the task well away from the threshold; about 20 s), and compares
the early losses closely and the final accuracy within a margin, never bit for bit.

`test_a_new_seed_meets_the_claims_stated_for_every_run` trains seed 16, outside the cache's
0 .. 15, of all five attentions at the 32-number budget (about 40 s of one core), and checks the
one claim notebook 11 states for every run: a run that answers at least half of the queries right
has a head putting over half its weight, at the answer positions, on the value to recall. Every
other claim of its sections 3 and 4 is a rate or a mean over the 16 seeds, which one new seed
cannot test: how many runs solve the task per attention and budget (with Wilson intervals), the
mean accuracies and their t-intervals, which of them are apart, the mean gain from 16 to 32
numbers and in how many seeds accuracy rose, and in how many seeds the solving runs give token 0
less than the uniform share.
"""

from __future__ import annotations

import pytest
import torch

from mha_lib.efficient.mla import MultiHeadLatentAttention
from mha_lib.efficient.recall import (
    SEEDS,
    SWEEP_FILE,
    TASK,
    VARIANTS,
    cache_numbers,
    differences,
    load_sweep,
    make_model,
    recall_batch,
    run_sweep,
    sweep_summary,
    uniform_first_token_weight,
)

SUBSET = {"budgets": [32], "variants": ["MHA", "MQA"], "seeds": [0]}


def test_recall_batch_asks_for_the_value_of_each_repeated_key():
    tokens, targets = recall_batch(50, torch.Generator().manual_seed(0), **TASK)
    P = TASK["pairs"]
    assert tokens.shape == targets.shape == (50, 3 * P)
    assert (targets[:, : 2 * P] == -100).all()
    for row, target in zip(tokens.tolist(), targets.tolist()):
        pairs = dict(zip(row[0 : 2 * P : 2], row[1 : 2 * P : 2]))
        assert len(pairs) == P and all(k < TASK["num_keys"] for k in pairs)
        assert sorted(row[2 * P :]) == sorted(pairs)
        assert [pairs[k] for k in row[2 * P :]] == target[2 * P :]


def test_every_variant_fills_its_budget():
    for budget, variants in VARIANTS.items():
        assert set(variants) == {"MHA", "GQA", "MQA", "MLA", "MLA + RoPE"}
        for name, cfg in variants.items():
            assert cache_numbers(cfg) == budget, (budget, name)
            model = make_model(cfg, 0)
            attn = model.blocks[0].attn
            if name.startswith("MLA"):
                assert isinstance(attn, MultiHeadLatentAttention)
                assert attn.cache_numbers_per_token() == budget
                assert (attn.qk_rope_head_dim > 0) == (name == "MLA + RoPE")
            else:
                assert 2 * attn.num_kv_heads * attn.head_dim == budget
        # MLA's heads are MQA's: the same query heads and q·k width when it has no rope key
        assert (
            differences(variants["MLA"])["query width"]
            == differences(variants["MQA"])["query width"]
        )


def test_the_cached_sweep_has_every_seed_per_variant_and_says_where_it_came_from():
    sweep = load_sweep()
    assert sweep["made by"] == "python -m mha_lib.efficient.recall"
    assert {"torch", "machine", "cpu capability"} <= set(sweep)
    assert sweep["seeds"] == list(SEEDS) and len(SEEDS) >= 16
    summary = sweep_summary(sweep)
    assert set(summary) == {(b, n) for b in VARIANTS for n in VARIANTS[b]}
    for s in summary.values():
        assert s["seeds"] == len(SEEDS) and s["low"] <= s["mean"] <= s["high"]  # not clipped
        lo, hi = s["solved interval"]
        assert 0 <= lo <= s["solved"] / s["seeds"] <= hi <= 1
    for run in sweep["runs"]:
        h = VARIANTS[run["budget"]][run["variant"]]["num_heads"]
        assert len(run["value_weight"][0]) == len(run["first_token_weight_by_head"][0]) == h


def test_the_uniform_share_of_token_0_is_the_mean_of_one_over_i_plus_one():
    assert uniform_first_token_weight() == pytest.approx(
        sum(1 / (i + 1) for i in range(4, 24)) / 20
    )


@pytest.mark.skipif(not SWEEP_FILE.exists(), reason="no cached sweep")
def test_regenerating_a_subset_of_the_sweep_gives_the_same_results_within_margins():
    cached = {(r["budget"], r["variant"], r["seed"]): r for r in load_sweep()["runs"]}
    fresh = run_sweep(**SUBSET)
    assert len(fresh["runs"]) == 2
    for run in fresh["runs"]:
        old = cached[(run["budget"], run["variant"], run["seed"])]
        assert run["params"] == old["params"]
        # the first losses follow the same data and initialisation: equal to rounding
        assert run["loss_curve"][:3] == pytest.approx(old["loss_curve"][:3], abs=0.02)
        # the final accuracy: the same up to what other processors' rounding may move
        assert abs(run["accuracy"] - old["accuracy"]) <= 0.05, (run, old["accuracy"])


NEW_SEED = 16  # outside the cache's SEEDS
NEW_RUNS = {"budgets": [32], "seeds": [NEW_SEED]}  # every attention


def test_a_new_seed_meets_the_claims_stated_for_every_run():
    """Notebook 11 §3: in every seed, each run with accuracy >= 0.5 has a head putting over half
    its weight, at the answer positions, on the value to recall. Seed 16 of all five attentions at
    budget 32; at least three must reach 0.5, or the claim was hardly exercised (on the reference
    machine MHA, MLA and MLA + RoPE solve the task, with a head at 0.88, 0.98 and 0.97 on the
    value, and GQA and MQA reach about 0.52, with a head at 0.70 and 0.67)."""
    assert NEW_SEED not in SEEDS
    fresh = run_sweep(**NEW_RUNS)
    assert len(fresh["runs"]) == len(VARIANTS[32])
    half_right = [run for run in fresh["runs"] if run["accuracy"] >= 0.5]
    assert len(half_right) >= 3, [run["accuracy"] for run in fresh["runs"]]
    for run in half_right:
        assert max(run["value_weight"][0]) > 0.5, run
