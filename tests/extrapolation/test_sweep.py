"""The cached sweep of notebook 10 (`mha_lib/data/nb10_extrapolation.json`) is what
`python -m mha_lib.extrapolation.sweep` makes. The whole sweep takes minutes; this test
regenerates `TEST_SUBSET` (seed 0 of copy_back: sinusoidal, RoPE, RoPE + PI without and with
its fine-tune, under a minute on one core) and compares its accuracies at L, 2L and 4L with the
cached ones. Training trajectories differ in their last bits from one processor to another, so
the comparison allows 0.05 (on about 7000 to 32000 predictions per number; under torch's generic
kernels, ATEN_CPU_CAPABILITY=default, the largest difference measured was 0.008)."""

import numpy as np
import pytest
import torch

from mha_lib.extrapolation.sweep import (
    LENGTHS,
    SEEDS,
    SWEEP_FILE,
    TEST_SUBSET,
    load_sweep,
    one_seed,
    summary,
    variants,
)


def test_the_cached_sweep_has_every_seed_and_variant_and_says_where_it_came_from():
    sweep = load_sweep()
    assert sweep["seeds"] == list(SEEDS) and len(SEEDS) >= 5
    assert sweep["made by"] == "python -m mha_lib.extrapolation.sweep"
    assert sweep["lengths"] == list(LENGTHS)
    for task in ("copy_back", "token_at"):
        for variant in variants():
            acc = summary(sweep, task, variant)
            assert acc.shape == (len(SEEDS), 3) and ((0 <= acc) & (acc <= 1)).all()
            assert len(sweep[task][variant][0]["by position"]) == LENGTHS[-1]


@pytest.mark.skipif(not SWEEP_FILE.exists(), reason="no cached sweep")
def test_regenerating_a_seed_gives_the_cached_accuracies_within_a_margin():
    task, seed, only = TEST_SUBSET
    torch.set_num_threads(1)
    fresh = one_seed(task, seed, only)
    cached = load_sweep()[task]
    i = load_sweep()["seeds"].index(seed)
    for variant in only:
        a, b = np.array(fresh[variant]["acc"]), np.array(cached[variant][i]["acc"])
        assert np.abs(a - b).max() <= 0.05, (variant, a, b)
