"""mha_lib.distributed.tensor_parallel: the decoder sharded over 1 to 4 processes (where they divide
its key/value heads) equals the one-process model; each rank reads only its shard and no rank
holds the whole model; the collectives' bytes are counted and equal the formula; bad world
sizes are named.

Tolerances: float64 to 1e-12. float32 to 2e-5 on logits of order 10: the ranks' sums run in
another order (partial sums over heads, added by the all_reduce), about 10 float32 roundings."""

import pytest
import torch

from mha_lib.distributed.decoder import (
    SMOLLM2_135M,
    TINY,
    RandomWeights,
    decoder_logits,
    weight_shapes,
)
from mha_lib.distributed.tensor_parallel import (
    all_reduce_bytes,
    check_world_size,
    load_shard,
    shard_plan,
    tensor_parallel_logits,
)
from mha_lib.testing import assert_close
from tests.distributed.distributed_inputs import WORLD_SIZES, tp_cases, tp_config, tp_ids


@pytest.mark.parametrize("P", WORLD_SIZES)
@pytest.mark.parametrize("name", ["tp_float64", "tp_counted"])
def test_sharded_logits_equal_the_one_process_model(groups, P, name):
    config, weights, _ = tp_cases(P)[name]
    expected = decoder_logits(config, weights, tp_ids())
    tol = (
        {"rtol": 0, "atol": 1e-12}
        if weights.dtype == torch.float64
        else {"rtol": 2e-6, "atol": 2e-5}
    )
    for result in groups[P][name]:  # every rank ends with all the logits
        assert_close(result["logits"], expected, **tol)


@pytest.mark.parametrize("P", WORLD_SIZES)
def test_each_rank_reads_only_its_shard(groups, P):
    config = tp_config(P)
    total = config.parameters
    results = groups[P]["tp_float64"]
    norms = (2 * config.num_layers + 1) * config.hidden  # replicated on every rank
    for result in results:
        assert result["read"] == result["held"] == (total - norms) // P + norms
        assert P == 1 or result["held"] < total
    assert sum(r["held"] for r in results) == total + (P - 1) * norms


@pytest.mark.parametrize("P", WORLD_SIZES)
def test_collective_bytes_are_counted_and_equal_the_formula(groups, P):
    config = tp_config(P)
    tokens = tp_ids().numel()
    formula = all_reduce_bytes(config, P, 4)
    for result in groups[P]["tp_counted"]:
        payload = result["payload"]
        assert result["calls"] == {
            "embedding": 1,
            "attention": config.num_layers,
            "mlp": config.num_layers,
            "logits": 1,
        }
        per_layer = (payload["attention"] + payload["mlp"]) / config.num_layers / tokens
        assert per_layer == formula["per_layer_payload"] == 2 * config.hidden * 4
        assert sum(payload.values()) == formula["payload"] * tokens
        sent = result["traffic"].sent.get("all_reduce", 0)  # counted on the wire, ring all_reduce
        reduced = payload["embedding"] + payload["attention"] + payload["mlp"]
        assert sent == 2 * (P - 1) * reduced // P
        assert sent / tokens / (2 * config.num_layers + 1) * 2 == pytest.approx(
            formula["per_layer_sent"]
        )


def test_tensor_parallel_logits():
    ids = torch.randint(0, 96, (1, 13), generator=torch.Generator().manual_seed(5))
    logits = tensor_parallel_logits(ids, 3)
    assert logits.shape == (1, 13, TINY.vocab_size)
    assert_close(
        logits, decoder_logits(TINY, RandomWeights(TINY, seed=0), ids), rtol=2e-6, atol=2e-5
    )


# ------------------------------------------------------------------------------ without processes


@pytest.mark.parametrize("config, P", [(TINY, 3), (SMOLLM2_135M, 3), (TINY, 1)])
def test_the_plan_splits_every_weight_once_and_copies_the_norms(config, P):
    """Along the axis a weight is split, the ranks' ranges tile it exactly once; the other axis
    is whole. Norms are whole on every rank."""
    for name, (n_rows, n_cols) in weight_shapes(config).items():
        pieces = [shard_plan(config, r, P)[name] for r in range(P)]
        if "norm" in name:
            assert all(p == (slice(None), slice(None)) for p in pieces), name
            continue
        split_rows = pieces[0][1] == slice(None)
        axis, n = (0, n_rows) if split_rows else (1, n_cols)
        ranges = [p[axis].indices(n) for p in pieces]
        assert [r[0] for r in ranges] == [n * j // P for j in range(P)], name
        assert [r[1] for r in ranges] == [n * (j + 1) // P for j in range(P)], name
        assert all(p[1 - axis] == slice(None) for p in pieces), name


def test_smollm2_over_three_ranks():
    """3 query heads and 1 key/value head per rank; a third of the MLP and of the vocabulary."""
    plan = shard_plan(SMOLLM2_135M, 1, 3)
    rows, _ = plan["model.layers.0.self_attn.q_proj.weight"]
    assert (rows.start, rows.stop) == (192, 384)  # heads 3, 4, 5 of 64
    rows, _ = plan["model.layers.0.self_attn.k_proj.weight"]
    assert (rows.start, rows.stop) == (64, 128)  # key/value head 1
    _, cols = plan["model.layers.0.self_attn.o_proj.weight"]
    assert (cols.start, cols.stop) == (192, 384)
    rows, _ = plan["model.embed_tokens.weight"]
    assert (rows.start, rows.stop) == (16384, 32768)
    bytes_ = all_reduce_bytes(SMOLLM2_135M, 3, 4)
    assert bytes_["per_layer_payload"] == 2 * 576 * 4 == 4608
    assert bytes_["per_layer_sent"] == 4608 * 4 / 3 == 6144


def test_load_shard_asks_the_source_for_slices_only():
    calls = []
    source = RandomWeights(TINY, seed=2)

    def recording(name, rows, cols):
        out = source(name, rows, cols)
        calls.append((name, out.numel()))
        return out

    shard, read = load_shard(TINY, recording, 2, 3)
    assert read == sum(n for _, n in calls) == sum(t.numel() for t in shard.values())
    assert len(calls) == len(weight_shapes(TINY))  # one read per weight
    full = dict(weight_shapes(TINY))
    assert all(n < full[name][0] * full[name][1] for name, n in calls if "norm" not in name)


def test_world_sizes_that_do_not_divide_are_named():
    ids = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="world_size = 2 does not divide num_kv_heads = 3"):
        tensor_parallel_logits(ids, 2)
    with pytest.raises(ValueError, match="world_size = 4 does not divide num_kv_heads = 3"):
        check_world_size(TINY, 4)
    with pytest.raises(ValueError, match="world_size = 6 does not divide num_kv_heads = 3"):
        check_world_size(TINY, 6)  # more ranks than key/value heads
    with pytest.raises(ValueError, match="world_size must be at least 1"):
        tensor_parallel_logits(ids, 0)
    with pytest.raises(ValueError, match=r"expected 0 \.\. 95"):
        tensor_parallel_logits(torch.tensor([[200]]), 3)
    small_mlp = TINY.__class__(96, 48, 2, 6, 3, 8, 100)
    with pytest.raises(ValueError, match="does not divide intermediate = 100"):
        check_world_size(small_mlp, 3)
