"""`mha_lib.block.TransformerBlock` equals `nn.TransformerEncoderLayer` with the same weights."""

import pytest
import torch
from torch import nn

from mha_lib.block import TransformerBlock
from mha_lib.pytorch import MultiHeadAttention

E, H, FF = 12, 3, 20


def pair(norm_first, activation, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    ref = nn.TransformerEncoderLayer(
        E,
        H,
        FF,
        dropout=0.0,
        activation=activation,
        norm_first=norm_first,
        batch_first=True,
        dtype=dtype,
    )
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if "bias" in name or "norm" in name:
                p.normal_()  # non-trivial biases and LayerNorm affine parameters
    return ref, TransformerBlock.from_torch(ref)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("train", [True, False])
def test_equals_torch_encoder_layer(norm_first, activation, train):
    ref, ours = pair(norm_first, activation)
    ref.train(train), ours.train(train)
    x = torch.randn(2, 7, E, dtype=torch.float64)
    kpm = torch.tensor([[False] * 7, [False] * 4 + [True] * 3])  # True = padding
    with torch.no_grad():
        expected = ref(x, src_key_padding_mask=kpm)
        got, w = ours(x, key_padding_mask=kpm, need_weights=True)
    real = ~kpm  # torch's fast path (eval) may leave padded rows as anything; compare real ones
    torch.testing.assert_close(got[real], expected[real])
    assert isinstance(ours.self_attn, MultiHeadAttention)
    assert w.shape == (2, H, 7, 7)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, H, 7, dtype=torch.float64))
    assert torch.all(w[1, :, :, 4:] == 0)  # nobody attends to padding


def test_causal_mask_equals_torch():
    ref, ours = pair(False, "gelu")
    x = torch.randn(1, 6, E, dtype=torch.float64)
    blocked = torch.ones(6, 6, dtype=torch.bool).triu(1)  # True = may NOT attend
    expected = ref(x, src_mask=blocked)
    torch.testing.assert_close(ours(x, attn_mask=blocked)[0], expected)
    torch.testing.assert_close(ours(x, is_causal=True)[0], expected)


def test_gradients_equal_torch():
    ref, ours = pair(True, "gelu")
    x1 = torch.randn(2, 5, E, dtype=torch.float64, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    ref(x1).square().sum().backward()
    ours(x2)[0].square().sum().backward()
    torch.testing.assert_close(x2.grad, x1.grad)
    for (n1, p1), (n2, p2) in zip(ref.named_parameters(), ours.named_parameters(), strict=True):
        assert n1 == n2
        torch.testing.assert_close(p2.grad, p1.grad, msg=n1)


def test_state_dict_loads_both_ways():
    ref, ours = pair(False, "relu")
    back = nn.TransformerEncoderLayer(E, H, FF, dropout=0.0, batch_first=True, dtype=torch.float64)
    back.load_state_dict(ours.state_dict())
    x = torch.randn(2, 4, E, dtype=torch.float64)
    torch.testing.assert_close(back(x), ref(x))


def test_head_mask_reaches_the_attention():
    _, ours = pair(False, "gelu")
    x = torch.randn(2, 4, E, dtype=torch.float64)
    assert not torch.allclose(ours(x, head_mask=torch.tensor([1.0, 0.0, 1.0]))[0], ours(x)[0])


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"activation must be one of \['gelu', 'relu'\]"):
        TransformerBlock(E, H, activation="tanh")
    with pytest.raises(TypeError, match=r"layer must be a torch.nn.TransformerEncoderLayer"):
        TransformerBlock.from_torch(nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"expected batch_first=True"):
        TransformerBlock.from_torch(nn.TransformerEncoderLayer(E, H, FF))


@pytest.mark.parametrize("norm_first", [False, True])
def test_training_with_dropout_equals_torch_under_the_same_seed(norm_first):
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(E, H, FF, dropout=0.2, norm_first=norm_first, batch_first=True)
    ours = TransformerBlock.from_torch(ref)
    x = torch.randn(2, 7, E)
    kpm = torch.tensor([[False] * 7, [False] * 4 + [True] * 3])
    torch.manual_seed(5)
    expected = ref(x, src_key_padding_mask=kpm)
    torch.manual_seed(5)
    got, _ = ours(x, key_padding_mask=kpm)
    torch.testing.assert_close(got, expected)
    torch.manual_seed(6)
    assert not torch.allclose(ours(x, key_padding_mask=kpm)[0], got), "dropout is on"
