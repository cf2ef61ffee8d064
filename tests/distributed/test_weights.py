"""mha_lib.distributed.weights: the weight sources give every process the same numbers, any part of
a weight equals that part of the whole, GGUFWeights' whole tensors are those of notebook 12's
load_decoder (the RoPE rows of W_Q and W_K put back the same way), a source travels to a process
as a path or a seed, and fill() builds notebook 12's DecoderLM from a source."""

import pickle

import pytest
import torch

from mha_lib.distributed.weights import TINY, GGUFWeights, RandomWeights, fill, parameter_shapes
from mha_lib.nn.decoder import DecoderLM
from mha_lib.testing import assert_close


def test_random_weights_are_the_same_in_every_process_and_part():
    a, b = RandomWeights(TINY, seed=4), RandomWeights(TINY, seed=4)
    name = "layers.1.self_attn.out_proj.weight"
    full = a(name)
    assert full.shape == (TINY.hidden_size, TINY.num_heads * TINY.head_dim)
    assert_close(b(name, (3, 9), (16, 32)), full[3:9, 16:32], rtol=0, atol=0)
    assert_close(pickle.loads(pickle.dumps(a))(name), full, rtol=0, atol=0)
    assert (RandomWeights(TINY, seed=5)(name) != full).all()  # another seed, other numbers
    norm = a("norm.weight", (0, 4))
    assert norm.shape == (4,) and 0.3 < float(a("norm.weight").mean()) < 1.7
    assert abs(float(full.std()) * (TINY.num_heads * TINY.head_dim) ** 0.5 - 1) < 0.1
    with pytest.raises(KeyError, match=r"no weight named 'lm_head\.weight'"):
        a("lm_head.weight")


def test_random_weights_model_is_decoder_lm_with_those_weights():
    weights = RandomWeights(TINY, seed=2, dtype=torch.float64)
    model = weights.model()
    assert type(model) is DecoderLM and not model.training
    params = dict(model.named_parameters())
    assert set(params) == set(parameter_shapes(TINY))
    for name, p in params.items():
        assert p.dtype == torch.float64 and not p.requires_grad
        assert_close(p, weights(name), rtol=0, atol=0)
    assert model.output_weight is model.embed.weight  # tied


def test_gguf_weights_equal_notebook_12s_loader(smollm2_reference):
    """Whole tensors as load_decoder gives them (W_Q's and W_K's rows put back from the file's
    RoPE layout the same way); parts (rows, block-aligned columns, whole heads) equal those
    parts of the whole."""
    weights = GGUFWeights()
    assert set(weights.names) == smollm2_reference["names"]
    whole = smollm2_reference["weights"]
    for name, expected in whole.items():
        assert_close(weights(name), expected, rtol=0, atol=0, msg=name)
    q = whole["layers.7.self_attn.q_proj.weight"]  # (576, 576): 9 heads of 64 rows
    part = weights("layers.7.self_attn.q_proj.weight", (192, 384))
    assert_close(part, q[192:384], rtol=0, atol=0)
    down = whole["layers.29.mlp.down_proj.weight"]  # (576, 1536)
    part = weights("layers.29.mlp.down_proj.weight", None, (512, 1024))
    assert_close(part, down[:, 512:1024], rtol=0, atol=0)
    embed = whole["embed.weight"]  # read in chunks of rows: the seams must not show
    assert_close(weights("embed.weight", (100, 16484)), embed[100:16484], rtol=0, atol=0)


def test_gguf_weights_travel_as_a_path():
    weights = GGUFWeights()
    weights("norm.weight")  # opens the file in this process
    state = pickle.dumps(weights)
    assert len(state) < 50_000  # the path, the config and the names: no weight
    copy = pickle.loads(state)
    assert copy._file is None and copy.config == weights.config
    assert_close(copy("layers.0.norm1.weight"), weights("layers.0.norm1.weight"), rtol=0, atol=0)
    weights.close()
    assert weights._file is None
    assert weights("norm.weight").shape == (576,)  # opened again


def test_gguf_weights_bad_parts_are_named():
    weights = GGUFWeights()
    with pytest.raises(
        ValueError,
        match=r"rows = \(10, 74\) of layers\.0\.self_attn\.q_proj"
        r"\.weight: expected whole heads of 64 rows",
    ):
        weights("layers.0.self_attn.q_proj.weight", (10, 74))
    with pytest.raises(
        ValueError,
        match=r"rows = \(0, 600\) of layers\.0\.mlp\.down_proj\.weight; "
        r"expected 0 <= start < stop <= 576",
    ):
        weights("layers.0.mlp.down_proj.weight", (0, 600))
    with pytest.raises(ValueError, match="multiples of 32"):
        weights("layers.0.mlp.down_proj.weight", None, (0, 100))
    with pytest.raises(KeyError, match=r"no weight named 'lm_head\.weight' in SmolLM2"):
        weights("lm_head.weight")


def test_fill_checks_the_plan_and_the_shapes():
    weights = RandomWeights(TINY)
    with torch.device("meta"):
        model = DecoderLM(TINY)
    plan = {name: (None, None) for name in parameter_shapes(TINY)}
    with pytest.raises(ValueError, match=r"missing \['norm\.weight'\], extra \[\]"):
        fill(model, {k: v for k, v in plan.items() if k != "norm.weight"}, weights)
    with pytest.raises(
        ValueError,
        match=r"embed\.weight: the source gave shape \(10, 48\); the "
        r"model holds \(96, 48\)",
    ):
        fill(model, plan | {"embed.weight": ((0, 10), None)}, weights)
    assert fill(model, plan, weights) == sum(p.numel() for p in model.parameters())


def test_parameter_shapes():
    shapes = parameter_shapes(GGUFWeights().config)
    assert len(shapes) == 1 + 30 * 9 + 1  # the embedding, 9 per layer, the last norm
    assert shapes["layers.0.self_attn.k_proj.weight"] == (192, 576)  # 3 heads of 64
    assert sum(torch.Size(s).numel() for s in shapes.values()) == 134_515_008
