"""The extrapolation experiment's tasks and model (notebook 10, §6)."""

import pytest
import torch

from mha_lib.extrapolation.model import SCHEMES, TinyCausal, loss_and_accuracy
from mha_lib.extrapolation.sweep import stretch
from mha_lib.extrapolation.tasks import K_BACK, TASKS, batch


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_model_is_causal_for_every_scheme(scheme):
    torch.manual_seed(0)
    model = TinyCausal(scheme).eval()
    x = torch.randint(0, 16, (2, 24))
    x2 = x.clone()
    x2[:, 15:] = (x2[:, 15:] + 1) % 16  # change the future of position 14
    with torch.no_grad():
        assert torch.allclose(model(x)[:, :15], model(x2)[:, :15], atol=1e-6)


def test_without_positions_one_causal_layer_sees_a_set_and_two_see_an_order():
    """NoPE, one layer: the last position's output is unchanged when the earlier tokens are
    shuffled. Two layers: it changes (the keys of layer 2 summarise prefixes of different
    lengths: the causal mask leaks order, as Haviv et al. 2022 found)."""
    x = torch.randint(0, 16, (1, 12), generator=torch.Generator().manual_seed(1))
    perm = torch.cat(
        [torch.randperm(11, generator=torch.Generator().manual_seed(2)), torch.tensor([11])]
    )
    with torch.no_grad():
        torch.manual_seed(0)
        one = TinyCausal("nope", n_layers=1).eval()
        assert torch.allclose(one(x)[0, -1], one(x[:, perm])[0, -1], atol=1e-5)
        torch.manual_seed(0)
        two = TinyCausal("nope", n_layers=2).eval()
        assert not torch.allclose(two(x)[0, -1], two(x[:, perm])[0, -1], atol=1e-3)


def test_stretching_changes_only_the_rope_settings():
    model = TinyCausal("rope")
    assert stretch(model, "rope + PI").rope_scale == 0.25
    model = TinyCausal("rope")
    assert stretch(model, "rope + base").rope_base == pytest.approx(10000 * 4 ** (16 / 14))
    with pytest.raises(ValueError, match="how"):
        stretch(model, "yarn")


def test_accuracy_is_per_position_and_nan_where_nothing_is_asked():
    model = TinyCausal("learned")
    x, y = batch("copy_back", torch.Generator().manual_seed(0), 8, 10, 16)
    loss, acc = loss_and_accuracy(model, x, y)
    assert acc.shape == (10,) and acc[:K_BACK].isnan().all() and loss.ndim == 0
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, 300, dtype=torch.long))
    with pytest.raises(ValueError, match="scheme"):
        TinyCausal("absolute")
    assert set(TASKS) == {"copy_back", "token_at"}
