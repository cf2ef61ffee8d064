"""mha_lib.distributed.tensor_parallel: notebook 12's decoder sharded over 1 to 4 processes (where
they divide its key/value heads) equals notebook 12's DecoderLM in one process, on random weights
and on SmolLM2-135M (all 30 layers, 1 and 3 ranks, each rank reading only its shard of the GGUF
file, no rank holding the whole model); greedy generation through the shards picks the same
tokens; the collectives' bytes are counted and equal the formula; bad world sizes are named
before any process starts.

Tolerances. Random weights: float64 to 1e-12; float32 to 2e-5 on logits of order 10 (the ranks'
sums run in another order, about 10 float32 roundings). SmolLM2: `SMOLLM2_ATOL` (5e-4 on logits
of order 30), justified here against the same model in float64: the sharded float32 logits are
no farther from the float64 ones than three times the one-process float32 model's own error."""

from dataclasses import asdict, replace

import pytest
import torch

from mha_lib.distributed.tensor_parallel import (
    SMOLLM2_ATOL,
    AttentionShard,
    DecoderShard,
    all_reduce_bytes,
    check_world_size,
    load_shard,
    shard_plan,
    tensor_parallel_logits,
)
from mha_lib.distributed.weights import TINY, GGUFWeights, RandomWeights, parameter_shapes
from mha_lib.nn import generate
from mha_lib.testing import assert_close
from tests.distributed.distributed_inputs import (
    ARCH_WORLD_SIZES,
    SMOLLM2_NEW_TOKENS,
    SMOLLM2_WORLD_SIZES,
    WORLD_SIZES,
    tp_cases,
    tp_config,
    tp_ids,
)
from tests.hf_models import SMALL_CONFIGS


def reference(weights, ids) -> torch.Tensor:
    """Notebook 12's DecoderLM with the same weights, in this process."""
    with torch.no_grad():
        return weights.model()(ids)


@pytest.mark.parametrize("P", WORLD_SIZES)
@pytest.mark.parametrize("name", ["tp_float64", "tp_counted"])
def test_sharded_logits_equal_the_one_process_model(groups, P, name):
    weights, _, new_tokens = tp_cases(P)[name]
    ids = tp_ids(weights)
    expected = reference(weights, ids)
    tol = (
        {"rtol": 0, "atol": 1e-12}
        if weights.dtype == torch.float64
        else {"rtol": 2e-6, "atol": 2e-5}
    )
    for result in groups[P][name]:  # every rank ends with all the logits
        assert_close(result["logits"], expected, **tol)
    if new_tokens:  # greedy through the shards: the one-process model's tokens
        tokens = generate(weights.model(), ids, new_tokens, stop_ids=())[:, ids.shape[1] :]
        for result in groups[P][name]:
            assert result["generated"].tolist() == tokens.tolist()


@pytest.mark.parametrize("P", ARCH_WORLD_SIZES)
@pytest.mark.parametrize("name", SMALL_CONFIGS)
def test_every_architecture_sharded_equals_the_one_process_model(groups, P, name):
    """float64 logits to 1e-12 (of order 5 to 45): each option sharded as one process runs it,
    and each rank reads exactly what it holds."""
    weights = tp_cases(P)[f"arch_{name}"][0]
    ids = tp_ids(weights)  # (2, 9): past Gemma's sliding window of 5
    expected = reference(weights, ids)
    for result in groups[P][f"arch_{name}"]:
        assert_close(result["logits"], expected, rtol=0, atol=1e-12)
        assert result["read"] == result["held"]
        assert P == 1 or result["held"] < sum(p.numel() for p in weights.model().parameters())


def test_gemma3s_one_key_value_head_is_copied_to_the_ranks_of_its_query_heads():
    """Gemma 3's h = 4 query heads share h_kv = 1 key/value head: over 2 ranks each holds 2 query
    heads and the whole W_K and W_V; over 3 the query heads do not split, and the message says
    so; QK-norm's and the four norms' weights are whole on every rank."""
    from tests.hf_models import small_configs

    config = small_configs()["gemma3"]
    d = config.head_dim
    assert (config.num_heads, config.num_kv_heads) == (4, 1)
    for r in range(2):
        plan = shard_plan(config, r, 2)
        assert plan["layers.0.self_attn.q_proj.weight"] == ((2 * d * r, 2 * d * (r + 1)), None)
        assert plan["layers.0.self_attn.k_proj.weight"] == ((0, d), None)  # the one head, copied
        assert plan["layers.0.self_attn.v_proj.weight"] == ((0, d), None)
        for name in ("self_attn.q_norm", "self_attn.k_norm", "post_norm1", "post_norm2"):
            assert plan[f"layers.6.{name}.weight"] == (None, None)
    shard, _ = load_shard(RandomWeights(config), 1, 2)
    attn = shard.layers[0].self_attn
    assert (attn.num_heads, attn.num_kv_heads, attn.window) == (2, 1, 5)  # layer 0 slides
    assert shard.layers[5].self_attn.window is None  # layer 5 is global
    with pytest.raises(ValueError, match="world_size = 3 does not divide num_heads = 4"):
        check_world_size(config, 3)


def test_a_linear_attention_layer_is_refused_by_name():
    from mha_lib.linear_attention import HybridConfig

    layers = ("linear_attention", "full_attention")
    hybrid = HybridConfig(**{**asdict(TINY), "layer_types": layers})
    with pytest.raises(ValueError, match=r"layer_types\[0\] = 'linear_attention': tensor para"):
        check_world_size(hybrid, 1)


@pytest.mark.parametrize("P", WORLD_SIZES)
def test_each_rank_reads_only_its_shard(groups, P):
    config = tp_config(P)
    total = sum(torch.Size(s).numel() for s in parameter_shapes(config).values())
    results = groups[P]["tp_float64"]
    norms = (2 * config.num_layers + 1) * config.hidden_size  # replicated on every rank
    for result in results:
        assert result["read"] == result["held"] == (total - norms) // P + norms
        assert P == 1 or result["held"] < total
    assert sum(r["held"] for r in results) == total + (P - 1) * norms


@pytest.mark.parametrize("P", WORLD_SIZES)
def test_collective_bytes_are_counted_and_equal_the_formula(groups, P):
    names = ["tp_counted"] + (["smollm2"] if P in SMOLLM2_WORLD_SIZES else [])
    for name in names:
        weights = tp_cases(P)[name][0]
        config, tokens = weights.config, tp_ids(weights).numel()
        formula = all_reduce_bytes(config, P, 4)
        for result in groups[P][name]:
            payload = result["payload"]
            assert result["calls"] == {
                "embedding": 1,
                "attention": config.num_layers,
                "mlp": config.num_layers,
                "logits": 1,
            }
            per_layer = (payload["attention"] + payload["mlp"]) / config.num_layers / tokens
            assert per_layer == formula["per_layer_payload"] == 2 * config.hidden_size * 4
            assert sum(payload.values()) == formula["payload"] * tokens
            sent = result["traffic"].sent.get("all_reduce", 0)  # counted on the wire (ring)
            reduced = payload["embedding"] + payload["attention"] + payload["mlp"]
            assert sent == 2 * (P - 1) * reduced // P
            assert sent / tokens / (2 * config.num_layers + 1) * 2 == pytest.approx(
                formula["per_layer_sent"]
            )


# ------------------------------------------------------------------------------- SmolLM2-135M


@pytest.mark.parametrize("P", SMOLLM2_WORLD_SIZES)
def test_smollm2_sharded_equals_notebook_12s_model(groups, smollm2_reference, P):
    """All 30 layers; logits to SMOLLM2_ATOL, the same argmax everywhere (every top-2 gap is
    wider than twice the tolerance, so it cannot flip), the same greedy tokens."""
    expected = smollm2_reference["logits"]  # (1, N, V)
    top2 = expected.topk(2, dim=-1).values
    assert float((top2[..., 0] - top2[..., 1]).min()) > 2 * SMOLLM2_ATOL
    assert min(smollm2_reference["margins"]) > 2 * SMOLLM2_ATOL
    for result in groups[P]["smollm2"]:
        assert result["logits"].shape == expected.shape == (1, 12, 49152)
        assert_close(result["logits"], expected, rtol=0, atol=SMOLLM2_ATOL)
        assert (result["logits"].argmax(-1) == expected.argmax(-1)).all()
        assert result["generated"].shape == (1, SMOLLM2_NEW_TOKENS)
        assert result["generated"].tolist() == smollm2_reference["generated"].tolist()


def test_smollm2_sharded_is_as_exact_as_the_one_process_model(groups, smollm2_reference):
    """Against the same model in float64 (the exact logits, to float32's eye), the 3-rank float32
    logits are no farther than three times the one-process float32 logits are: the sharding
    changes the order of the sums, not their precision. SMOLLM2_ATOL is about ten times the
    distance between the two float32 models."""
    exact = smollm2_reference["logits64"]
    one_process = (smollm2_reference["logits"].double() - exact).abs().max()
    sharded = (groups[3]["smollm2"][0]["logits"].double() - exact).abs().max()
    assert 0 < one_process < SMOLLM2_ATOL / 5
    assert sharded <= 3 * one_process
    between = (groups[3]["smollm2"][0]["logits"] - smollm2_reference["logits"]).abs().max()
    assert between < SMOLLM2_ATOL / 3


def test_no_rank_holds_the_whole_of_smollm2(groups, smollm2_reference):
    total = smollm2_reference["parameters"]
    assert total == 134_515_008  # as published (the embedding tied)
    norms = (2 * 30 + 1) * 576
    held = [result["held"] for result in groups[3]["smollm2"]]
    assert held == [(total - norms) // 3 + norms] * 3  # 44 861 760: a third, and the norms
    assert [result["read"] for result in groups[3]["smollm2"]] == held
    assert groups[1]["smollm2"][0]["held"] == total  # one rank: the whole model


# ------------------------------------------------------------------------------ without processes


@pytest.mark.parametrize("config, P", [(TINY, 3), (GGUFWeights().config, 3), (TINY, 1)])
def test_the_plan_splits_every_weight_once_and_copies_the_norms(config, P):
    """Along the axis a weight is split, the ranks' ranges tile it exactly once; the other axis
    is whole. Norms are whole on every rank."""
    for name, shape in parameter_shapes(config).items():
        pieces = [shard_plan(config, r, P)[name] for r in range(P)]
        if len(shape) == 1:
            assert all(p == (None, None) for p in pieces), name
            continue
        axis = 0 if pieces[0][1] is None else 1
        n = shape[axis]
        assert [p[axis] for p in pieces] == [(n * j // P, n * (j + 1) // P) for j in range(P)]
        assert all(p[1 - axis] is None for p in pieces), name


def test_smollm2_over_three_ranks():
    """3 query heads and 1 key/value head per rank; a third of the MLP and of the vocabulary;
    W_O's and W_down's columns cut on the file's 32-weight blocks (192 = 6·32, 512 = 16·32)."""
    config = GGUFWeights().config
    plan = shard_plan(config, 1, 3)
    assert plan["layers.0.self_attn.q_proj.weight"] == ((192, 384), None)  # heads 3, 4, 5
    assert plan["layers.0.self_attn.k_proj.weight"] == ((64, 128), None)  # key/value head 1
    assert plan["layers.0.self_attn.out_proj.weight"] == (None, (192, 384))
    assert plan["layers.0.mlp.down_proj.weight"] == (None, (512, 1024))
    assert plan["embed.weight"] == ((16384, 32768), None)
    assert all(c is None or c[0] % 32 == c[1] % 32 == 0 for _, c in plan.values())
    bytes_ = all_reduce_bytes(config, 3, 4)
    assert bytes_["per_layer_payload"] == 2 * 576 * 4 == 4608
    assert bytes_["per_layer_sent"] == 4608 * 4 / 3 == 6144
    assert bytes_["logits_sent"] == 2 * 16384 * 4  # two other ranks' thirds of V = 49152
    assert 0.40 < bytes_["logits_sent"] / bytes_["sent"] < 0.42  # 41 %: notebook 14 says so


def test_a_shard_is_notebook_12s_block_with_fewer_heads():
    """Rank r's layer is a DecoderAttention of h/P query heads and h_kv/P key/value heads, and a
    SwiGLU of F/P units; on random weights, the P partial outputs of a layer add up to the whole
    layer's output (notebook 03's W_O as a sum over heads)."""
    weights = RandomWeights(TINY, seed=1, dtype=torch.float64)
    whole = weights.model()
    x = torch.randn(2, 7, 48, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    positions = torch.arange(7)
    attn = mlp = 0
    for r in range(3):
        shard, _ = load_shard(weights, r, 3)
        layer = shard.layers[1]
        assert isinstance(layer.self_attn, AttentionShard) and isinstance(shard, DecoderShard)
        assert (layer.self_attn.num_heads, layer.self_attn.num_kv_heads) == (2, 1)
        assert layer.mlp.down_proj.weight.shape == (48, 32)
        with torch.no_grad():
            attn = attn + layer.self_attn(x, positions)
            mlp = mlp + layer.mlp(x)
    with torch.no_grad():
        assert_close(attn, whole.layers[1].self_attn(x, positions), rtol=0, atol=1e-12)
        assert_close(mlp, whole.layers[1].mlp(x), rtol=0, atol=1e-12)


def test_tensor_parallel_logits_runs_smollm2_by_default(monkeypatch):
    """Without weights it shards SmolLM2 from its GGUF file (the processes replaced here by a
    recorder: the groups above run the real thing)."""
    from mha_lib.distributed import tensor_parallel

    seen = {}

    def fake_run(fn, world_size, weights, ids, **options):
        seen.update(fn=fn, world_size=world_size, weights=weights, ids=ids)
        return [{"logits": torch.zeros(1, ids.shape[1], weights.config.vocab_size)}]

    monkeypatch.setattr(tensor_parallel, "run", fake_run)
    logits = tensor_parallel_logits(torch.tensor([[1, 2, 3]]), 3)
    assert logits.shape == (1, 3, 49152)
    assert isinstance(seen["weights"], GGUFWeights) and seen["world_size"] == 3
    assert seen["fn"] is tensor_parallel.tensor_parallel_rank


def test_tensor_parallel_logits_on_random_weights():
    ids = torch.randint(0, 96, (1, 13), generator=torch.Generator().manual_seed(5))
    weights = RandomWeights(TINY, seed=0)
    logits = tensor_parallel_logits(ids, 3, weights)
    assert logits.shape == (1, 13, TINY.vocab_size)
    assert_close(logits, reference(weights, ids), rtol=2e-6, atol=2e-5)


def test_world_sizes_that_do_not_divide_are_named():
    """Refused before any process starts: SmolLM2 has 3 key/value heads."""
    ids = torch.zeros(1, 3, dtype=torch.long)
    for P in (2, 4):
        with pytest.raises(
            ValueError,
            match=f"world_size = {P} does not divide num_kv_heads = 3: each rank must hold "
            "num_kv_heads / world_size whole key/value heads",
        ):
            tensor_parallel_logits(ids, P)
    with pytest.raises(ValueError, match="world_size = 4 does not divide num_kv_heads = 3"):
        check_world_size(TINY, 4)  # more ranks than key/value heads, not a multiple
    check_world_size(TINY, 6)  # a multiple: each key/value head copied to 2 ranks
    with pytest.raises(ValueError, match="world_size = 12 does not divide num_heads = 6"):
        check_world_size(replace(TINY, vocab_size=12 * 8, intermediate_size=12 * 8), 12)
    with pytest.raises(ValueError, match="world_size must be at least 1"):
        tensor_parallel_logits(ids, 0, RandomWeights(TINY))
    with pytest.raises(ValueError, match=r"expected 0 \.\. 95"):
        tensor_parallel_logits(torch.tensor([[200]]), 3, RandomWeights(TINY))
    with pytest.raises(TypeError, match="input_ids must be an integer tensor"):
        tensor_parallel_logits(torch.zeros(1, 3), 3, RandomWeights(TINY))
    with pytest.raises(ValueError, match="does not divide intermediate_size = 100"):
        check_world_size(replace(TINY, intermediate_size=100), 3)
    with pytest.raises(ValueError, match="tie_embeddings = False"):
        check_world_size(replace(TINY, tie_embeddings=False), 3)
    with pytest.raises(ValueError, match=r"rank = 3; expected 0 \.\. 2"):
        shard_plan(TINY, 3, 3)
