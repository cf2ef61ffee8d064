"""mha_lib.efficient.recall: the task, the models' cache budgets, and the cached sweep of
notebook 11 (`mha_lib/data/nb11_recall_sweep.json`, made by `python -m mha_lib.efficient.recall`).

The sweep follows training trajectories, which differ slightly from processor to processor, so
the regeneration test retrains a documented subset, `SUBSET` (two models of the 32-number
budget, seed 0, each solving the task well away from the threshold; about 30 s), and compares
the early losses closely and the final accuracy within a margin, never bit for bit.
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
    load_sweep,
    make_model,
    recall_batch,
    run_sweep,
    sweep_summary,
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
        assert set(variants) == {"MHA", "GQA", "MQA", "MLA"}
        for name, cfg in variants.items():
            assert cache_numbers(cfg) == budget, (budget, name)
            model = make_model(cfg, 0)
            attn = model.blocks[0].attn
            if name == "MLA":
                assert isinstance(attn, MultiHeadLatentAttention)
                assert attn.cache_numbers_per_token() == budget
            else:
                assert 2 * attn.h_kv * attn.d == budget


def test_the_cached_sweep_has_five_seeds_per_variant_and_says_where_it_came_from():
    sweep = load_sweep()
    assert sweep["made by"] == "python -m mha_lib.efficient.recall"
    assert {"torch", "machine", "cpu capability"} <= set(sweep)
    assert sweep["seeds"] == list(SEEDS) and len(SEEDS) >= 5
    summary = sweep_summary(sweep)
    assert set(summary) == {(b, n) for b in VARIANTS for n in VARIANTS[b]}
    for s in summary.values():
        assert s["seeds"] == len(SEEDS) and 0 <= s["low"] <= s["mean"] <= s["high"] <= 1


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
