"""mha_lib.sparse_attention.recall: notebook 18's trained toy, notebook 11's recall task under a
budget of k keys per query (dense, a window, random keys, the lightning indexer's top-k), and its
cached sweep (`mha_lib/data/nb18_recall_sweep.json`, made by
`python -m mha_lib.sparse_attention.recall`).

The sweep follows training trajectories, which differ slightly from processor to processor, so
the regeneration test retrains seed 0 (all three stages, four continuations) and compares the
early losses closely and the accuracies and value shares within margins, never bit for bit.
`test_a_new_seed_meets_the_claims_stated_for_every_seed` trains seed 100, outside the cache, and
checks on it every claim that held in every cached seed (`every_seed_claims`), the only "every
seed" statements notebook 18 makes; its rates and means over seeds are checked on the cache.
"""

from __future__ import annotations

import pytest
import torch

from mha_lib.efficient.recall import TASK, held_out_batch, recall_batch
from mha_lib.sparse_attention.recall import (
    KEY_CHOICES,
    KEYS,
    MODEL_FILE,
    SEEDS,
    SOLVED,
    SWEEP_FILE,
    IndexedAttention,
    attention_weights,
    block_input,
    chosen_keys,
    claim_counts,
    evaluate_keys,
    every_seed_claims,
    indexer_loss,
    indexer_target,
    load_sweep,
    load_trained,
    make_model,
    run_seed,
    seed_claims,
    sweep_summary,
    value_chosen,
    value_positions,
)

N = 3 * TASK["pairs"]


def _x(B: int = 3, seed: int = 0) -> torch.Tensor:
    return torch.randn(B, N, 64, generator=torch.Generator().manual_seed(seed))  # (B, N, C)


# ---------------------------------------------------------------------------- the layer


def test_dense_keys_are_causal_mla_and_top_k_with_every_key_is_dense_exactly():
    torch.manual_seed(0)
    mixer = IndexedAttention(64, keys="dense", k=N)
    x = _x()
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    dense = mixer(x)  # (B, N, C)
    assert torch.allclose(dense, mixer.mla(x, is_causal=False, mask=causal), atol=1e-6)
    mixer.keys = "top-k"  # k = N: every visible key is chosen
    assert torch.equal(mixer(x), dense)
    mixer.k = KEYS  # fewer keys: the output changes
    assert not torch.allclose(mixer(x), dense, atol=1e-3)


@pytest.mark.parametrize("keys", ["window", "random", "top-k"])
def test_every_mask_is_causal_with_k_keys_where_k_are_visible(keys):
    torch.manual_seed(0)
    mixer = IndexedAttention(64, keys=keys, k=KEYS)
    allowed = mixer.choose(_x())  # (B, N, N)
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    assert not (allowed & ~causal).any()
    want = torch.arange(1, N + 1).clamp(max=KEYS)  # (N,): min(k, t + 1)
    assert (allowed.sum(-1) == want).all()
    if keys == "window":  # the last k keys, itself included
        t, s = torch.arange(N)[:, None], torch.arange(N)[None, :]
        assert (allowed == ((s <= t) & (s > t - KEYS))).all()


def test_random_keys_follow_the_layer_generator():
    torch.manual_seed(0)
    mixer = IndexedAttention(64, keys="random", seed=3)
    x = _x()
    first = mixer.choose(x)
    assert not torch.equal(first, mixer.choose(x))  # new draws each call
    mixer.generator.manual_seed(3)
    assert torch.equal(first, mixer.choose(x))  # the same draws from the same seed


def test_the_indexer_target_is_a_distribution_per_query_over_the_allowed_keys():
    model = make_model(None, 0)
    tokens, _ = recall_batch(4, torch.Generator().manual_seed(1), **TASK)
    with torch.no_grad():
        y = block_input(model, tokens)
        mixer = model.blocks[0].attn
        for allowed in (None, mixer.choose(y, "window")):
            p = indexer_target(attention_weights(mixer.mla, y, allowed))  # (B, N, N)
            assert torch.allclose(p.sum(-1), torch.ones(4, N))
            assert (p.triu(1) == 0).all()
            if allowed is not None:
                assert (p[~allowed] == 0).all()


def test_the_indexer_loss_is_zero_at_its_target_and_trains_only_the_indexer():
    model = make_model(None, 0, keys="top-k")
    tokens, _ = recall_batch(4, torch.Generator().manual_seed(1), **TASK)
    loss = indexer_loss(model, tokens)
    assert loss.item() > 0
    loss.backward()
    mixer = model.blocks[0].attn
    assert all(p.grad is not None for p in mixer.indexer.parameters())
    index_params = set(mixer.indexer.parameters())
    assert all(p.grad is None for p in model.parameters() if p not in index_params)
    # an indexer whose scores are log p has nothing left to learn: swap it for one
    with torch.no_grad():
        y = block_input(model, tokens)
        p = indexer_target(attention_weights(mixer.mla, y))  # (B, N, N)
    mixer.keys = "dense"
    mixer.index_scores = lambda x: p.log()  # (B, N, N), -inf above the diagonal
    assert indexer_loss(model, tokens).item() == pytest.approx(0.0, abs=1e-6)


def test_value_positions_point_at_the_value_after_each_asked_key():
    tokens, targets = recall_batch(20, torch.Generator().manual_seed(2), **TASK)
    pos = value_positions(tokens)  # (B, P)
    P = TASK["pairs"]
    asked = tokens[:, 2 * P :]
    assert (tokens.gather(1, pos - 1) == asked).all()  # the key shown just before
    assert (tokens.gather(1, pos) == targets[:, 2 * P :]).all()  # the value to recall


def test_the_window_holds_the_value_only_for_early_answers_to_late_pairs():
    model = make_model(None, 0)
    tokens, _ = held_out_batch()
    tokens = tokens[:500]
    share = value_chosen(model, tokens, "window")
    # answer t (16, 17, 18) reaches back to t - 3: the value at 15 from 16 .. 18, at 13 from 16
    P = TASK["pairs"]
    pos = value_positions(tokens)  # (B, P)
    t = torch.arange(2 * P, 3 * P)
    assert share == pytest.approx((pos > t - KEYS).float().mean().item())
    assert share < 0.1


# ---------------------------------------------------------------------------- bad input


def test_bad_input_is_refused_by_name():
    with pytest.raises(ValueError, match="keys = 'sparse'"):
        IndexedAttention(64, keys="sparse")
    mixer = IndexedAttention(64)
    with pytest.raises(ValueError, match="keys = 'all'"):
        mixer.keys = "all"
    with pytest.raises(ValueError, match="k"):
        IndexedAttention(64, k=0)
    with pytest.raises(ValueError, match=r"x has shape \(2, 24, 32\)"):
        mixer(torch.zeros(2, 24, 32))
    with pytest.raises(ValueError, match="cfg"):
        make_model({"kind": "gqa"}, 0)
    model = make_model(None, 0, keys="window")
    tokens, targets = recall_batch(2, torch.Generator().manual_seed(0), **TASK)
    with pytest.raises(ValueError, match="'window'"):
        indexer_loss(model, tokens)
    with pytest.raises(ValueError, match="keys = 'dense'"):
        value_chosen(model, tokens, "dense")
    with pytest.raises(ValueError, match="keys = 'dense'"):
        chosen_keys(model, tokens, "dense")
    with pytest.raises(ValueError, match="keys = 'best'"):
        evaluate_keys(model, tokens, targets, "best")
    with pytest.raises(TypeError, match="IndexedAttention"):
        indexer_loss(torch.nn.Linear(2, 2), tokens)


# ---------------------------------------------------------------------------- the cached sweep


@pytest.mark.skipif(not SWEEP_FILE.exists(), reason="no cached sweep")
def test_the_cached_sweep_says_where_it_came_from_and_holds_the_claims_notebook_18_states():
    sweep = load_sweep()
    assert sweep["made by"] == "python -m mha_lib.sparse_attention.recall"
    assert {"torch", "machine", "cpu capability", "minutes"} <= set(sweep)
    assert sweep["seeds"] == list(SEEDS) and len(SEEDS) >= 8
    assert [r["seed"] for r in sweep["runs"]] == list(SEEDS)
    n = len(SEEDS)
    summary = sweep_summary(sweep)
    for row in summary.values():
        assert row["seeds"] == n
        for part in ("accuracy", "value chosen"):
            if part in row:
                assert row[part]["low"] <= row[part]["mean"] <= row[part]["high"]
        if "solved" in row:
            lo, hi = row["solved interval"]
            assert 0 <= lo <= row["solved"] / n <= hi <= 1
    # what notebook 18 states, in k-of-n form
    counts = claim_counts(sweep)
    assert counts["dense solves the task"] == n
    assert counts["top-k solves the task"] == n
    assert counts["window does not solve the task"] == n
    assert counts["random does not solve the task"] == n
    for null in ("the window", "random keys", "the untrained one"):
        assert counts[f"the trained indexer picks the value more often than {null}"] == n
    assert summary["top-k"]["solved"] == n and summary["window"]["solved"] == 0
    trained = summary["top-k"]["value chosen"]
    for null in ("window", "random"):
        assert trained["low"] > summary[null]["value chosen"]["high"]
    assert trained["low"] > summary["indexer untrained"]["value chosen"]["high"]


@pytest.mark.skipif(not MODEL_FILE.exists(), reason="no stored model")
def test_the_stored_model_is_seed_0s_top_k_model():
    model = load_trained()
    assert model.blocks[0].attn.keys == "top-k"
    assert MODEL_FILE.stat().st_size < 1_000_000
    assert all(t.dtype == torch.float32 for t in model.state_dict().values())
    tokens, targets = held_out_batch()
    picks = chosen_keys(model, tokens[:100])  # (B, N, k)
    assert picks.shape == (100, N, KEYS)
    mask = model.blocks[0].attn.choose(block_input(model, tokens[:100]))  # (B, N, N)
    assert (mask.sum(-1) == (picks >= 0).sum(-1)).all()
    assert mask.gather(-1, picks.clamp(min=0)).all()  # the indices are the mask's keys
    run = next(r for r in load_sweep()["runs"] if r["seed"] == 0)["continued"]["top-k"]
    # stored and evaluated on the same machine: the same numbers to rounding
    assert evaluate_keys(model, tokens, targets, "top-k") == pytest.approx(
        run["accuracy"], abs=1e-3
    )
    assert value_chosen(model, tokens, "top-k") == pytest.approx(run["value_chosen"], abs=1e-3)


def _close(fresh: dict, cached: dict) -> None:
    """Seed records equal within what other processors' rounding may move."""
    assert fresh["dense"]["loss_curve"][:3] == pytest.approx(
        cached["dense"]["loss_curve"][:3], abs=0.02
    )
    assert abs(fresh["dense"]["accuracy"] - cached["dense"]["accuracy"]) <= 0.05
    for field in ("value_chosen_untrained", "value_chosen"):
        assert abs(fresh["warm-up"][field] - cached["warm-up"][field]) <= 0.05, field
    for keys in KEY_CHOICES:
        new, old = fresh["continued"][keys], cached["continued"][keys]
        assert abs(new["accuracy"] - old["accuracy"]) <= 0.05, keys
        if keys != "dense":
            assert abs(new["value_chosen"] - old["value_chosen"]) <= 0.05, keys


@pytest.mark.skipif(not SWEEP_FILE.exists(), reason="no cached sweep")
def test_regenerating_seed_0_gives_the_cached_record_within_margins():
    cached = next(r for r in load_sweep()["runs"] if r["seed"] == 0)
    fresh, _ = run_seed(0)
    _close(fresh, cached)


NEW_SEED = 100  # outside the cache's SEEDS


@pytest.mark.skipif(not SWEEP_FILE.exists(), reason="no cached sweep")
def test_a_new_seed_meets_the_claims_stated_for_every_seed():
    """Every claim that held in every cached seed (`every_seed_claims`: dense and top-k solve
    the task, the window and random keys do not, the trained indexer picks the value more often
    than the window, random keys and the untrained indexer) holds for seed 100."""
    assert NEW_SEED not in SEEDS
    claims = every_seed_claims(load_sweep())
    assert len(claims) >= 8, claims  # the claims above were all exercised
    fresh, _ = run_seed(NEW_SEED)
    held = seed_claims(fresh)
    assert [c for c in claims if not held[c]] == [], fresh
    assert fresh["continued"]["top-k"]["accuracy"] >= SOLVED
