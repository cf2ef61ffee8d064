"""mha_lib.nn.generation: the filters against transformers' logits warpers, sampling against the
distribution it samples, generation with and without the cache, and stopping (greedy decoding of
the real model against transformers' `generate`, token for token: tests/llm/test_loader.py)."""

import pytest
import torch

from mha_lib.llm.loader import load_decoder
from mha_lib.nn.generation import Trace, generate, pick_next, top_k_filter, top_p_filter
from mha_lib.testing import assert_close


def logits_of(shape, seed=0):
    return 3 * torch.randn(shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def tiny(tiny_gguf):
    return load_decoder(tiny_gguf[0])


@pytest.mark.parametrize("k", [1, 5, 37, 101])
def test_top_k_equals_transformers(k):
    from transformers.generation.logits_process import TopKLogitsWarper

    z = logits_of((3, 101))
    expected = TopKLogitsWarper(top_k=k)(None, z.clone())
    assert torch.equal(top_k_filter(z, k), expected)
    assert (top_k_filter(z, k).isfinite().sum(-1) == min(k, 101)).all()


@pytest.mark.parametrize("p", [0.05, 0.5, 0.9, 0.999, 1.0])
def test_top_p_equals_transformers(p):
    from transformers.generation.logits_process import TopPLogitsWarper

    z = logits_of((4, 97), seed=1)
    expected = TopPLogitsWarper(top_p=p)(None, z.clone())
    ours = top_p_filter(z, p)
    assert torch.equal(ours.isfinite(), expected.isfinite())
    kept = torch.softmax(z, -1).where(ours.isfinite(), 0.0).sum(-1)
    assert (kept >= p - 1e-6).all()  # the kept tokens carry at least p


def test_greedy_is_the_argmax_and_records_the_margin():
    z = logits_of((2, 50), seed=2)
    trace = Trace()
    assert torch.equal(pick_next(z, trace=trace), z.argmax(-1))
    top2 = z.topk(2).values
    assert trace.logit_margins == [float((top2[:, 0] - top2[:, 1]).min())]


def test_sampling_follows_the_distribution():
    """20 000 draws from a 5-token distribution: each frequency within 5 standard errors."""
    z = torch.tensor([[2.0, 1.0, 0.0, -1.0, 0.5]]).expand(20_000, 5)
    g = torch.Generator().manual_seed(3)
    ids = pick_next(z, temperature=1.0, generator=g)
    freq = torch.bincount(ids, minlength=5).double() / 20_000
    p = torch.softmax(z[0].double(), -1)
    assert ((freq - p).abs() <= 5 * (p * (1 - p) / 20_000).sqrt()).all()


def test_sampling_with_a_seed_repeats_and_respects_the_filters():
    z = logits_of((6, 40), seed=4)
    draws = [
        pick_next(z, 0.7, top_k=5, top_p=0.8, generator=torch.Generator().manual_seed(5))
        for _ in range(2)
    ]
    assert torch.equal(draws[0], draws[1])
    allowed = top_p_filter(top_k_filter(z / 0.7, 5), 0.8).isfinite()
    assert allowed.gather(1, draws[0][:, None]).all()


def test_cached_generation_equals_uncached(tiny):
    ids = torch.randint(0, 100, (2, 5), generator=torch.Generator().manual_seed(6))
    a = generate(tiny, ids, 20, stop_ids=())
    b = generate(tiny, ids, 20, stop_ids=(), use_cache=False)
    assert a.shape == (2, 25) and torch.equal(a, b) and torch.equal(a[:, :5], ids)
    g1, g2 = (torch.Generator().manual_seed(7) for _ in range(2))
    s1 = generate(tiny, ids, 20, temperature=1.0, generator=g1, stop_ids=())
    s2 = generate(tiny, ids, 20, temperature=1.0, generator=g2, stop_ids=(), use_cache=False)
    assert torch.equal(s1, s2)


def test_generation_stops_at_a_stop_token_and_pads_rows_that_stopped(tiny):
    ids = torch.randint(0, 100, (2, 4), generator=torch.Generator().manual_seed(8))
    free = generate(tiny, ids, 12, stop_ids=())
    stop = int(free[0, 6])  # row 0's third new token
    out = generate(tiny, ids, 12, stop_ids=(stop,))
    first = int((free[0, 4:] == stop).nonzero()[0]) + 4
    assert torch.equal(out[0, : first + 1], free[0, : first + 1])
    assert (out[0, first:] == stop).all()
    if not (free[1, 4:] == stop).any():
        assert out.shape[1] == 16 and torch.equal(out[1], free[1])
    assert generate(tiny, ids, 0).shape == (2, 4)


def test_the_default_stop_is_the_models_end_of_turn(tiny):
    assert tiny.config.eos_token_id is None  # the tiny file names none: never stops
    ids = torch.zeros(1, 3, dtype=torch.long)
    assert generate(tiny, ids, 7).shape == (1, 10)


def test_bad_arguments(tiny):
    ids = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="max_new_tokens must be at least 0; got -1"):
        generate(tiny, ids, -1)
    with pytest.raises(TypeError, match="max_new_tokens must be an int; got float"):
        generate(tiny, ids, 2.0)
    with pytest.raises(ValueError, match="longer than the model's context of 64 tokens"):
        generate(tiny, ids, 62)
    with pytest.raises(ValueError, match=r"input_ids has shape \(3,\); expected \(B, N\)"):
        generate(tiny, ids[0], 2)
    with pytest.raises(ValueError, match=r"temperature = -0\.5; expected >= 0"):
        generate(tiny, ids, 2, temperature=-0.5)
    with pytest.raises(ValueError, match=r"top_p = 1\.5; expected a number in"):
        generate(tiny, ids, 2, temperature=1.0, top_p=1.5)
    with pytest.raises(ValueError, match="top_k must be at least 1; got 0"):
        generate(tiny, ids, 2, temperature=1.0, top_k=0)
    with pytest.raises(TypeError, match="top_k must be an int; got float"):
        generate(tiny, ids, 2, temperature=1.0, top_k=5.0)
    z = logits_of((1, 10))
    assert_close(top_p_filter(z, 1.0), z, rtol=0, atol=0)
