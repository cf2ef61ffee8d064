"""mha_lib.llm.sinks against the same quantities computed from transformers' eager attention weights
and residual streams on the same file; the uniform baseline; the no-op correlation written out;
the scores of every prefix from one pass; the cached sweep over kinds of text regenerated in part.

Tolerances: the real model's attention weights differ from transformers' by at most about 4e-6
(float32 sums in another order; measured), so means of them are compared to 1e-4; the residual
streams, whose first position grows to a norm of several hundred, to 1e-3 relative.
"""

import numpy as np
import pytest
import torch

from mha_lib.llm.sinks import (
    SWEEP,
    first_token_attention,
    kind_stretches,
    layer_inputs,
    load_sweep,
    noop_correlation,
    position_attention,
    prefix_first_token,
    ratio_to_rest,
    residual_norms,
    run_sweep,
    sink_counts,
    sweep_scores,
    uniform_first_token,
    value_norms,
)
from mha_lib.llm.texts import KINDS, doc_paragraphs
from mha_lib.testing import assert_close


@pytest.fixture(scope="module")
def paragraphs(smollm2, reference_run):
    """Two paragraphs of 24 tokens, our model's weights and layer inputs, transformers' run."""
    model, tok = smollm2
    ids = torch.tensor([tok.encode(p)[:24] for p in doc_paragraphs()[2:4]])
    with torch.no_grad():
        _, weights = model(ids, need_weights=True)
    return ids, torch.stack(weights), layer_inputs(model, ids), reference_run(ids)


def test_first_token_attention_equals_transformers(smollm2, paragraphs):
    model, _ = smollm2
    ids, _, _, theirs = paragraphs
    A = torch.stack(theirs.attentions)  # (L, B, h, N, N)
    for start in (1, 10):
        expected = A[:, :, :, start:, 0].mean(dim=(1, 3))  # (L, h)
        ours = first_token_attention(model, ids, start=start)
        assert ours.shape == (30, 9)
        assert_close(ours, expected, rtol=0, atol=1e-4)
    assert_close(
        position_attention(A, key=3, start=10), A[:, :, :, 10:, 3].mean(dim=(1, 3)), rtol=0, atol=0
    )


def test_the_uniform_baseline_is_uniform_attention_scored_alike():
    N = 17
    uniform = torch.tril(torch.ones(N, N)) / torch.arange(1, N + 1)[:, None]  # (N, N)
    A = uniform.expand(2, 3, 4, N, N)  # (L, B, h, N, N)
    for start in (1, 5):
        expected = torch.full((2, 4), uniform_first_token(N, start))
        assert_close(position_attention(A, 0, start), expected, rtol=0, atol=1e-6)
    assert abs(uniform_first_token(3, 1) - (1 / 2 + 1 / 3) / 2) < 1e-15
    with pytest.raises(ValueError, match="start = 3, N = 3"):
        uniform_first_token(3, 3)


def test_layer_inputs_are_transformers_hidden_states(paragraphs):
    _, _, inputs, theirs = paragraphs
    expected = torch.stack(theirs.hidden_states[:-1])  # (L, B, N, C): what enters each layer
    assert inputs.shape == expected.shape
    scale = expected.norm(dim=-1, keepdim=True)  # (L, B, N, 1)
    assert ((inputs - expected) / scale).abs().max() < 1e-3
    assert_close(residual_norms(inputs), expected.norm(dim=-1), rtol=1e-3, atol=1e-3)


def test_value_norms_equal_transformers_value_projection(smollm2, reference_model, paragraphs):
    model, _ = smollm2
    _, _, inputs, theirs = paragraphs
    ours = value_norms(model, inputs)  # (L, B, h_kv, N)
    for l in (0, 14, 29):
        layer = reference_model.model.layers[l]
        with torch.no_grad():
            v = layer.self_attn.v_proj(layer.input_layernorm(theirs.hidden_states[l]))
        expected = v.view(2, 24, 3, 64).norm(dim=-1).transpose(1, 2)  # (B, h_kv, N)
        assert_close(ours[l], expected, rtol=1e-3, atol=1e-4)


def test_ratio_to_rest():
    norms = torch.tensor([[10.0, 1.0, 2.0, 3.0], [6.0, 100.0, 2.0, 4.0]])
    assert_close(ratio_to_rest(norms), torch.tensor([5.0, 1.5]), rtol=0, atol=1e-6)
    assert_close(ratio_to_rest(norms, skip=2), torch.tensor([10 / 2, 6 / 2]), rtol=0, atol=1e-6)


def test_noop_correlation_written_out(smollm2, paragraphs):
    model, _ = smollm2
    _, weights, inputs, _ = paragraphs
    ours = noop_correlation(model, weights, inputs, start=5)  # (L, h)
    for l, i in [(3, 2), (20, 6)]:
        layer = model.layers[l]
        v = layer.self_attn.v_proj(layer.norm1(inputs[l])).view(2, 24, 3, 64)[:, :, i // 3]
        o = weights[l][:, i] @ v  # (B, N, d): head i's output
        a0 = weights[l][:, i, 5:, 0].flatten().double().numpy()
        size = o[:, 5:].norm(dim=-1).flatten().double().numpy()
        assert abs(float(ours[l, i]) - np.corrcoef(a0, size)[0, 1]) < 1e-4


def test_noop_correlation_per_sequence(smollm2, paragraphs):
    """Per sequence, the same correlation over that sequence's queries alone."""
    model, _ = smollm2
    _, weights, inputs, _ = paragraphs
    each = noop_correlation(model, weights, inputs, start=5, per_sequence=True)  # (B, L, h)
    assert each.shape == (2, 30, 9)
    for b in range(2):
        alone = noop_correlation(model, weights[:, b : b + 1], inputs[:, b : b + 1], start=5)
        assert_close(each[b], alone, rtol=0, atol=1e-6)


def test_prefix_scores_equal_a_pass_over_the_prefix(smollm2):
    """Causal attention: the first n tokens of a pass over N are a pass over n, so one pass
    gives every length's score."""
    model, tok = smollm2
    ids = kind_stretches(tok, "licence", 48, 1)  # (1, 48)
    with torch.no_grad():
        _, weights = model(ids, need_weights=True)
    first = torch.stack([w[:, :, :, 0] for w in weights])  # (L, 1, h, 48)
    prefix = prefix_first_token(first, (20, 48), start=10)  # (2, L, h)
    assert_close(prefix[1], first_token_attention(model, ids, start=10), rtol=0, atol=1e-6)
    assert_close(prefix[0], first_token_attention(model, ids[:, :20], start=10), rtol=0, atol=1e-4)
    with pytest.raises(ValueError, match="start = 10 < n <= N"):
        prefix_first_token(first, (10,), start=10)


def test_the_documentation_stretches_leave_out_notebook_13s_paragraphs(smollm2):
    """The documentation's stretches come from its end; notebook 13 chooses its sink heads on
    the first prose paragraphs and measures them on the next 8: none of those is in a stretch."""
    _, tok = smollm2
    counts = SWEEP["stretches"]
    stretch = kind_stretches(tok, "documentation", SWEEP["length"], counts["documentation"])
    text = " ".join(tok.decode(stretch.flatten().tolist()).split())
    used = [p for p in doc_paragraphs() if len(tok.encode(p)) >= 64][:12]
    assert not any(p[:80] in text for p in used)
    for kind in ("code", "licence"):
        assert kind_stretches(tok, kind, SWEEP["length"], counts[kind]).shape == (
            counts[kind],
            SWEEP["length"],
        )


def test_the_cached_sweep_regenerates(smollm2):
    """The first 128 tokens of the first stretch of each kind, against the cache (4 decimals)."""
    model, tok = smollm2
    sweep = load_sweep()
    assert sweep["lengths"] == list(SWEEP["lengths"]) and sweep["start"] == SWEEP["start"]
    assert set(sweep["scores"]) == set(KINDS) and sweep["stretches"] == SWEEP["stretches"]
    for kind in KINDS:
        count = SWEEP["stretches"][kind]  # the documentation's stretches end at its end
        ids = kind_stretches(tok, kind, SWEEP["length"], count)[:1, :128]
        cached = torch.tensor(sweep_scores(sweep, kind)[0, sweep["lengths"].index(128)])
        ours = first_token_attention(model, ids, start=sweep["start"])
        assert_close(ours, cached.float(), rtol=0, atol=2e-4)
    assert sink_counts(sweep, "code").shape == (SWEEP["stretches"]["code"], len(SWEEP["lengths"]))
    uniform = [uniform_first_token(n, SWEEP["start"]) for n in SWEEP["lengths"]]
    assert np.allclose(sweep["uniform"], uniform)


def test_the_sweep_command_reproduces_a_slice(smollm2):
    """run_sweep, what `python -m mha_lib.llm.sinks` runs, on the first stretch of code at the
    two shortest lengths (a stretch's first tokens do not depend on its length for code)."""
    model, tok = smollm2
    sweep = load_sweep()
    lengths = tuple(sweep["lengths"][:2])
    part = run_sweep(model, tok, stretches={"code": 1}, lengths=lengths)
    assert part["made by"] == sweep["made by"] and part["lengths"] == list(lengths)
    assert_close(
        np.array(part["scores"]["code"][0]), sweep_scores(sweep, "code")[0, :2], rtol=0, atol=2e-4
    )


def test_bad_arguments():
    with pytest.raises(ValueError, match="no query"):
        position_attention(torch.zeros(1, 1, 1, 4, 4), key=0, start=4)
    with pytest.raises(ValueError, match=r"expected \(L, B, h, N, N\)"):
        position_attention(torch.zeros(2, 4, 4))
