"""mha_lib.nn.backends: every attention function equals SDPA with the bottom-right causal mask,
on random q, k, v with grouped heads (a prompt, a chunk against a cache, one token). Notebook 09's
kernel, and both FlashAttentions inside the real model: tests/llm/test_triton_attention.py.

Tolerance: float64 on random inputs, 1e-12 (the same sums in another order; notebook 08's loop
rescales a running sum tile by tile).
"""

import pytest
import torch

from mha_lib.nn.backends import (
    ATTENTIONS,
    RecordWeights,
    attention_names,
    attention_weights,
    eager_attention,
    register_attention,
    resolve_attention,
    sdpa_attention,
    tiled_flash_attention,
)
from mha_lib.nn.gqa import repeat_kv
from mha_lib.nn.masks import bottom_right_causal_tensor, softcap_score_mod
from mha_lib.testing import assert_close
from tests.nn.nn_inputs import ATTENTION_SHAPES, bottom_right_reference, grouped_qkv

SHAPES = ATTENTION_SHAPES
qkv, reference = grouped_qkv, bottom_right_reference


@pytest.mark.parametrize(("n", "m"), SHAPES)
@pytest.mark.parametrize("fn", [sdpa_attention, eager_attention, tiled_flash_attention])
def test_each_attention_equals_masked_sdpa(fn, n, m):
    q, k, v = qkv(n, m)
    assert_close(fn(q, k, v), reference(q, k, v), rtol=0, atol=1e-12)


@pytest.mark.parametrize(("n", "m"), SHAPES)
def test_the_weights_are_a_causal_softmax(n, m):
    q, k, v = qkv(n, m, seed=1)
    w = attention_weights(q, k)  # (B, h, n, m)
    assert w.shape == (2, 6, n, m)
    assert_close(w.sum(-1), torch.ones(2, 6, n, dtype=torch.float64))
    assert (w.masked_select(~bottom_right_causal_tensor(n, m)) == 0).all()
    assert_close(w @ repeat_kv(v, 3), reference(q, k, v), rtol=0, atol=1e-12)


@pytest.mark.parametrize(("n", "m"), SHAPES)
def test_recording_the_weights_attends_as_the_written_out_form(n, m):
    q, k, v = qkv(n, m, seed=2)
    record = RecordWeights()
    out = [record(q, k, v), record(q[:, :, -1:], k, v)]  # two calls, as two layers would
    assert_close(out[0], eager_attention(q, k, v), rtol=0, atol=1e-12)
    assert len(record.weights) == 2
    assert_close(record.weights[0], attention_weights(q, k), rtol=0, atol=0)
    assert_close(out[1], reference(q[:, :, -1:], k, v), rtol=0, atol=1e-12)


def test_a_registered_function_is_found_by_name():
    register_attention("test-sdpa", sdpa_attention)
    try:
        assert resolve_attention("test-sdpa") is sdpa_attention
    finally:
        del ATTENTIONS["test-sdpa"]
    with pytest.raises(TypeError, match=r"a name \(str\) and a function"):
        register_attention("x", 3)


def test_names_and_bad_names():
    assert {"sdpa", "eager", "flash", "triton"} <= set(attention_names())
    with pytest.raises(ValueError, match=r"expected one of \['eager', 'flash', 'sdpa', 'triton'"):
        resolve_attention("tirton")
    assert resolve_attention("eager") is eager_attention
    assert resolve_attention(sdpa_attention) is sdpa_attention
    with pytest.raises(TypeError, match="attention must be a name of"):
        resolve_attention(3)


# ------------------------------------------------------------------ the options (notebook 15)


def written_out(q, k, v, window=None, cap=None, sinks=None):
    """The definition, one line at a time: scores, a soft cap, the window's band, a sink column
    per head, softmax, the sink's column dropped."""
    g = q.shape[1] // k.shape[1]
    n, m = q.shape[2], k.shape[2]
    s = q @ repeat_kv(k, g).transpose(-2, -1) / q.shape[-1] ** 0.5  # (B, h, n, m)
    if cap is not None:
        s = cap * torch.tanh(s / cap)
    i = torch.arange(n)[:, None] + (m - n)  # the queries' positions among the keys
    j = torch.arange(m)[None, :]
    allowed = (j <= i) & ((i - j < window) if window is not None else True)
    s = s.masked_fill(~allowed, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.view(1, -1, 1, 1).expand(*s.shape[:3], 1)], dim=-1)
    w = torch.softmax(s, dim=-1)[..., :m]
    return w @ repeat_kv(v, g)


@pytest.mark.parametrize(("n", "m"), SHAPES)
@pytest.mark.parametrize("fn", [sdpa_attention, eager_attention, tiled_flash_attention])
def test_a_window_is_the_band_of_the_last_keys(fn, n, m):
    q, k, v = qkv(n, m, seed=3)
    assert_close(fn(q, k, v, window=4), written_out(q, k, v, window=4), rtol=0, atol=1e-12)
    rec = RecordWeights()
    rec(q, k, v, window=4)
    assert int((rec.weights[0] > 0).sum(-1).max()) == 4  # no query sees more than 4 keys


@pytest.mark.parametrize(("n", "m"), SHAPES)
@pytest.mark.parametrize("fn", [sdpa_attention, eager_attention])
def test_soft_capping_and_sink_logits_as_the_definition_says(fn, n, m):
    q, k, v = qkv(n, m, seed=4)
    q = 4 * q  # scores of order 4: the cap of 2 changes them
    sinks = torch.linspace(-1, 2, 6, dtype=torch.float64)
    cap = softcap_score_mod(2.0)
    assert_close(fn(q, k, v, score_mod=cap), written_out(q, k, v, cap=2.0), rtol=0, atol=1e-12)
    assert_close(
        fn(q, k, v, sink_logits=sinks, window=5),
        written_out(q, k, v, window=5, sinks=sinks),
        rtol=0,
        atol=1e-12,
    )
    assert not torch.allclose(fn(q, k, v, score_mod=cap), fn(q, k, v))
    w = attention_weights(q, k, sink_logits=sinks)
    assert (w.sum(-1) < 1).all()  # every row gave the sink some weight


def test_the_tiled_loop_refuses_what_it_cannot_compute():
    q, k, v = qkv(3, 7)
    with pytest.raises(ValueError, match=r"takes a window only; got \['score_mod'\]"):
        tiled_flash_attention(q, k, v, score_mod=softcap_score_mod(1.0))
    with pytest.raises(ValueError, match=r"sink_logits has shape \(4,\); expected \(h,\) = \(6,\)"):
        eager_attention(q, k, v, sink_logits=torch.zeros(4, dtype=torch.float64))
