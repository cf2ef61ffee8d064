"""mha_lib.nn.backends: every attention function equals SDPA with the bottom-right causal mask,
on random q, k, v with grouped heads (a prompt, a chunk against a cache, one token). Notebook 09's
kernel, and both FlashAttentions inside the real model: tests/llm/test_triton_attention.py.

Tolerance: float64 on random inputs, 1e-12 (the same sums in another order; notebook 08's loop
rescales a running sum tile by tile).
"""

import pytest
import torch
import torch.nn.functional as F

from mha_lib.nn.backends import (
    ATTENTIONS,
    attention_weights,
    bottom_right_mask,
    eager_attention,
    flash_attention_08,
    resolve_attention,
    sdpa_attention,
)
from mha_lib.nn.gqa import repeat_kv
from mha_lib.testing import assert_close

SHAPES = [(7, 7), (3, 11), (1, 9)]  # (n, m): a prompt, a chunk against a cache, one token


def qkv(n, m, dtype=torch.float64, seed=0, h=6, h_kv=2, d=16):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, h, n, d, generator=g, dtype=dtype)
    k = torch.randn(2, h_kv, m, d, generator=g, dtype=dtype)
    v = torch.randn(2, h_kv, m, d, generator=g, dtype=dtype)
    return q, k, v


def reference(q, k, v):
    """SDPA on repeated key/value heads with the explicit bottom-right mask."""
    g = q.shape[1] // k.shape[1]
    mask = bottom_right_mask(q.shape[2], k.shape[2])
    return F.scaled_dot_product_attention(q, repeat_kv(k, g), repeat_kv(v, g), attn_mask=mask)


def test_the_mask_puts_the_queries_last():
    assert bottom_right_mask(2, 4).tolist() == [[True, True, True, False], [True] * 4]


@pytest.mark.parametrize(("n", "m"), SHAPES)
@pytest.mark.parametrize("fn", [sdpa_attention, eager_attention, flash_attention_08])
def test_each_attention_equals_masked_sdpa(fn, n, m):
    q, k, v = qkv(n, m)
    assert_close(fn(q, k, v), reference(q, k, v), rtol=0, atol=1e-12)


@pytest.mark.parametrize(("n", "m"), SHAPES)
def test_the_weights_are_a_causal_softmax(n, m):
    q, k, v = qkv(n, m, seed=1)
    w = attention_weights(q, k)  # (B, h, n, m)
    assert w.shape == (2, 6, n, m)
    assert_close(w.sum(-1), torch.ones(2, 6, n, dtype=torch.float64))
    assert (w.masked_select(~bottom_right_mask(n, m)) == 0).all()
    assert_close(w @ repeat_kv(v, 3), reference(q, k, v), rtol=0, atol=1e-12)


def test_names_and_bad_names():
    assert {"sdpa", "eager", "flash"} <= set(
        ATTENTIONS
    )  # and "triton", once mha_lib.llm is imported
    assert resolve_attention("eager") is eager_attention
    assert resolve_attention(sdpa_attention) is sdpa_attention
    with pytest.raises(TypeError, match="attention must be a name of"):
        resolve_attention(3)
