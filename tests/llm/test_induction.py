"""mha_lib.llm.induction against the same quantities computed from transformers' eager attention
weights and logits on the same file; the stripes on hand-made patterns; the circuits against the
layer's own scores and outputs; the cached sweep regenerated in part.

Tolerances as in test_sinks.py: attention weights to 1e-4 in means; losses (of order 1 to 15)
to 2e-3, notebook 12's logit tolerance of 1e-3 doubled; the cached sweep (4 decimals) to 2e-3.
"""

import math

import pytest
import torch

from mha_lib.llm.induction import (
    PERIODS,
    TOKEN_RANGE,
    composition_scores,
    copy_losses,
    copy_statistics,
    head_mask_without,
    induction_scores,
    load_periods,
    load_sweep,
    ov_circuit,
    previous_token_score,
    qk_circuit,
    random_tokens,
    run_periods,
    stripe_score,
    swapped_stripe,
    uniform_target_losses,
)
from mha_lib.llm.sinks import layer_inputs
from mha_lib.positions import rope
from mha_lib.testing import assert_close
from mha_lib.toy.circuits import k_composition, q_composition

P = 12  # a short period: the repeated block of the tests


@pytest.fixture(scope="module")
def repeated(reference_run):
    ids = random_tokens(2, P, seed=5)
    return ids, reference_run(ids)


def test_random_tokens_repeat_once_and_are_seeded():
    ids = random_tokens(3, 7, seed=1)
    assert ids.shape == (3, 14) and torch.equal(ids[:, :7], ids[:, 7:])
    assert torch.equal(ids, random_tokens(3, 7, seed=1))
    fresh = random_tokens(3, 7, seed=1, repeated=False)
    assert not torch.equal(fresh[:, :7], fresh[:, 7:])
    low, high = TOKEN_RANGE
    assert int(ids.min()) >= low and int(ids.max()) < high
    assert torch.equal(random_tokens(2, 7, seed=4), random_tokens(5, 7, seed=4)[:2])


def test_stripes_on_hand_made_patterns():
    N = 10
    induction = torch.zeros(N, N)
    for t in range(N):
        induction[t, t - 4 if t >= 5 else 0] = 1.0  # period 5: key t - 5 + 1
    previous = torch.diag(torch.ones(N - 1), -1)
    previous[0, 0] = 1.0
    A = torch.stack([induction, previous]).expand(3, 2, 2, N, N)  # (L, B, h, N, N)
    assert_close(stripe_score(A, -4, 5), torch.tensor([[1.0, 0.0]] * 3), rtol=0, atol=0)
    # the induction pattern's query 1 looks at key 0, its previous token: 1 of the 9 queries
    assert_close(stripe_score(A, -1, 1), torch.tensor([[1 / 9, 1.0]] * 3), rtol=0, atol=1e-7)
    assert stripe_score(A, -1, 1, per_sequence=True).shape == (2, 3, 2)
    with pytest.raises(ValueError, match="offset = -3, start = 2"):
        stripe_score(A, -3, 2)


def test_induction_and_previous_token_score_equal_transformers(smollm2, repeated):
    model, _ = smollm2
    ids, theirs = repeated
    A = torch.stack(theirs.attentions)  # (L, B, h, N, N)
    t = torch.arange(P, 2 * P)
    expected = A[:, :, :, t, t - P + 1].mean(dim=(1, 3))  # (L, h)
    assert_close(induction_scores(model, ids, P), expected, rtol=0, atol=1e-4)
    t = torch.arange(1, 2 * P)
    expected = A[:, :, :, t, t - 1].mean(dim=(1, 3))
    assert_close(previous_token_score(model, ids), expected, rtol=0, atol=1e-4)
    with pytest.raises(ValueError, match="period = 24"):
        induction_scores(model, ids, 2 * P)


def test_copy_losses_equal_transformers(smollm2, reference_model, repeated):
    model, _ = smollm2
    ids, theirs = repeated
    losses = torch.nn.functional.cross_entropy(
        theirs.logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none"
    )  # (B, 2P - 1): the loss of token t + 1
    expected = torch.stack([losses[:, : P - 1].mean(1), losses[:, P:].mean(1)], dim=1)
    assert_close(copy_losses(model, ids, P), expected, rtol=0, atol=2e-3)
    # a head removed: transformers with that head's columns of W_O set to zero
    heads = [(17, 3), (18, 6)]
    o_proj = [reference_model.model.layers[l].self_attn.o_proj.weight for l, _ in heads]
    saved = [w.clone() for w in o_proj]
    try:
        with torch.no_grad():
            for w, (_, i) in zip(o_proj, heads):
                w[:, i * 64 : (i + 1) * 64] = 0
            logits = reference_model(ids).logits
    finally:
        with torch.no_grad():
            for w, s in zip(o_proj, saved):
                w.copy_(s)
    losses = torch.nn.functional.cross_entropy(
        logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none"
    )
    expected = torch.stack([losses[:, : P - 1].mean(1), losses[:, P:].mean(1)], dim=1)
    ours = copy_losses(model, ids, P, head_mask_without(heads, 30, 9))
    assert_close(ours, expected, rtol=0, atol=2e-3)


def test_head_mask_without():
    mask = head_mask_without([(0, 1), (2, 0)], 3, 2)
    assert mask.tolist() == [[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]


def test_swapped_stripe_with_one_stream_is_the_layers_own_score(smollm2):
    model, _ = smollm2
    ids = random_tokens(1, P, seed=6)
    x = layer_inputs(model, ids)  # (L, 1, N, C)
    with torch.no_grad():
        _, weights = model(ids, need_weights=True)
    for l in (2, 17):
        expected = stripe_score(weights[l][None], 1 - P, P)[0]  # (h,)
        assert_close(swapped_stripe(model, l, x[l], x[l], 1 - P, P), expected, rtol=0, atol=1e-5)


def test_the_circuits_give_the_layers_scores_and_outputs(smollm2):
    """For rows x_i, x_j of the residual stream: (u_i W_QK(i - j) u_jᵀ) / √d is the layer's score of
    query i on key j, u = x / rms(x); u_j W_OV is what head h's value of j writes through W_O."""
    model, _ = smollm2
    g = torch.Generator().manual_seed(0)
    x = 3 * torch.randn(2, 576, generator=g)  # two residual rows
    l, h = 17, 4
    block = model.layers[l]
    attn = block.self_attn
    d = 64
    with torch.no_grad():
        a = block.norm1(x)  # (2, C)
        q = attn.q_proj(a)[0, h * d : (h + 1) * d]  # head h's query of row 0
        k = attn.k_proj(a)[1, (h // 3) * d : (h // 3 + 1) * d]  # its group's key of row 1
        for i, j in [(5, 5), (9, 2), (40, 1)]:
            qi = rope(q[None], torch.tensor([i]), model.config.rope_base)[0]
            kj = rope(k[None], torch.tensor([j]), model.config.rope_base)[0]
            u = x / x.pow(2).mean(-1, keepdim=True).add(model.config.rms_norm_eps).sqrt()
            circuit = u[0] @ qk_circuit(model, l, h, i - j) @ u[1] / math.sqrt(d)
            assert abs(float(circuit) - float(qi @ kj) / math.sqrt(d)) < 1e-4
        v = attn.v_proj(a)[1, (h // 3) * d : (h // 3 + 1) * d]
        written = v @ attn.out_proj.weight[:, h * d : (h + 1) * d].T  # (C,)
        assert_close(u[1] @ ov_circuit(model, l, h), written, rtol=0, atol=1e-4)
    with pytest.raises(ValueError, match="layer 30, head 0"):
        qk_circuit(model, 30, 0)


def test_composition_scores_equal_notebook_06s_on_the_circuits(smollm2):
    model, _ = smollm2
    earlier = [(16, 0), (3, 5)]
    for kind, score in (("K", k_composition), ("Q", q_composition)):
        for distance in (0, 7):
            ours = composition_scores(model, [(17, 4), (2, 8)], earlier, kind, distance)
            assert ours.shape == (2, 2)
            for row, later in zip(ours, [(17, 4), (2, 8)]):
                W_QK = qk_circuit(model, *later, distance)
                expected = [score(W_QK, ov_circuit(model, *lh)) for lh in earlier]
                assert_close(row, torch.tensor(expected), rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="kind = 'V'"):
        composition_scores(model, [(17, 4)], earlier, "V")


def test_the_cached_sweep_regenerates(smollm2):
    """The first two held-out sequences: their induction scores, their copy losses, and their
    second copy's loss without the top induction head, against the cached numbers."""
    model, _ = smollm2
    sweep = load_sweep()
    period = sweep["period"]
    ids = random_tokens(2, period, sweep["seeds"]["held out"])
    with torch.no_grad():
        _, weights = model(ids, need_weights=True)
    scores = stripe_score(torch.stack(weights), 1 - period, period, per_sequence=True)
    cached = torch.tensor(sweep["scores"]["held out"]["induction"][:2])  # (2, L, h)
    assert_close(scores, cached, rtol=0, atol=2e-3)
    assert_close(
        copy_losses(model, ids, period), torch.tensor(sweep["copy losses"][:2]), rtol=0, atol=2e-3
    )
    top = [tuple(x) for x in sweep["ablations"]["1"]["top"]]
    removed = copy_losses(model, ids, period, head_mask_without(top, 30, 9))[:, 1]
    cached = torch.tensor(sweep["ablations"]["1"]["top second copy"][:2])
    assert_close(removed, cached, rtol=0, atol=2e-3)


# ------------------------------------------------------------------ a random token's expected loss


def test_uniform_target_loss_is_the_mean_loss_over_the_range():
    """-mean over x in R of log softmax(z)_x, computed directly; never below ln R (Gibbs), and
    ln R exactly for a prediction uniform over R and nothing outside it."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(3, 5, 49152, generator=g) * 3
    low, high = TOKEN_RANGE
    direct = -torch.log_softmax(z.double(), -1)[..., low:high].mean(-1)
    assert_close(uniform_target_losses(z), direct, rtol=0, atol=1e-9)
    ln_R = math.log(high - low)
    assert (uniform_target_losses(z) >= ln_R).all()
    flat = torch.full((49152,), -1e4)
    flat[low:high] = 0.0  # uniform over R, nothing elsewhere
    assert abs(float(uniform_target_losses(flat)) - ln_R) < 1e-9


def test_copy_statistics_are_copy_losses_and_their_expectation(smollm2):
    model, _ = smollm2
    ids = random_tokens(3, P, seed=7)
    stats = copy_statistics(model, ids, P, chunk=2)  # two chunks: 2 and 1 sequences
    losses = copy_losses(model, ids, P)  # (3, 2)
    assert_close(stats["first"], losses[:, 0], rtol=0, atol=1e-5)
    assert_close(stats["second"], losses[:, 1], rtol=0, atol=1e-5)
    with torch.no_grad():
        expected = uniform_target_losses(model(ids)[:, : P - 1]).mean(1)
    assert_close(stats["uniform target"], expected.float(), rtol=0, atol=1e-5)
    assert (stats["uniform target"] >= math.log(TOKEN_RANGE[1] - TOKEN_RANGE[0])).all()


def test_the_cached_periods_regenerate(smollm2):
    """The first 2 sequences at the shortest period, against the cache (4 decimals)."""
    model, _ = smollm2
    cached = load_periods()
    assert cached["periods"] == list(PERIODS["periods"]) and cached["seed"] == PERIODS["seed"]
    period = cached["periods"][0]
    # run_periods is what `python -m mha_lib.llm.induction periods` runs
    part = run_periods(model, periods=[period], batch=2)
    assert part["made by"] == cached["made by"] and part["seed"] == cached["seed"]
    for name, values in part["statistics"][str(period)].items():
        expected = torch.tensor(cached["statistics"][str(period)][name][:2])
        assert_close(torch.tensor(values), expected, rtol=0, atol=2e-3)
    assert all(
        len(v) == cached["batch"] for per in cached["statistics"].values() for v in per.values()
    )


def test_the_circuits_fold_the_query_scale_and_refuse_what_is_not_linear_by_name():
    """On random small models (tests/hf_models.small_configs): Gemma 2's query scale
    (query_pre_attn_scalar 20, not d = 16) is folded into W_QK, which gives the layer's score;
    QK-norm (Qwen3), biases (Qwen2), the output gate, the four norms of a Gemma block and a
    distance beyond a sliding layer's window are refused naming their option. (tests/
    test_consumers.py runs every layer of every model.)"""
    from mha_lib.distributed.weights import RandomWeights
    from tests.hf_models import small_configs

    cfgs = small_configs()
    gemma2 = RandomWeights(cfgs["gemma2"], seed=1, dtype=torch.float64).model()
    d = 16
    x = 3 * torch.randn(1, 6, 48, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    u = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    block = gemma2.layers[1]
    with torch.no_grad():
        q, k, _ = block.self_attn.qkv(block.norm1(x), torch.arange(6))
        score = q[0, 3, 5] @ k[0, 1, 2] / math.sqrt(d)
        W_QK = qk_circuit(gemma2, 1, 3, 3)
    assert abs(float(u[0, 5] @ W_QK @ u[0, 2]) / math.sqrt(d) - float(score)) < 1e-9
    assert gemma2.config.query_scale == 20**-0.5  # folded: 1/√d would be off by √(20/16)
    with pytest.raises(ValueError, match=r"^sandwich_norms: "):
        ov_circuit(gemma2, 1, 3)
    with pytest.raises(ValueError, match=r"distance = 5: layer 0 .* \(sliding_window\)"):
        qk_circuit(gemma2, 0, 0, 5)  # Gemma 2's even layers slide over 5 keys
    refusals = (
        ("qwen3", "qk_norm", qk_circuit),
        ("qwen2", "attention_bias", qk_circuit),
        ("qwen2", "attention_bias", ov_circuit),
        ("attn_output_gate", "attn_output_gate", ov_circuit),
    )
    for name, option, circuit in refusals:
        model = RandomWeights(cfgs[name]).model()
        with pytest.raises(ValueError, match=f"^{option}: "):
            circuit(model, 0, 0)
