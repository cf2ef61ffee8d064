"""mha_lib.nn.circuits: stripe scores on hand-made patterns and as the toy's head scores, and the
circuits of one head, of a MultiHeadAttention and of a grouped-query layer (the key and value of
its group). The composition scores are tested with notebook 06's toy (tests/toy/test_circuits.py)
and with SmolLM2 (tests/llm/test_induction.py)."""

import pytest
import torch

from mha_lib.nn import circuits
from mha_lib.nn.circuits import head_weights, ov_circuit, qk_circuit, stripe_score
from mha_lib.nn.gqa import GroupedQueryAttention
from mha_lib.pytorch import MultiHeadAttention
from mha_lib.testing import assert_close
from mha_lib.toy.circuits import duplicate_token_score, induction_score, previous_token_score


def test_a_stripe_is_the_mean_weight_on_key_t_plus_offset():
    N = 10
    A = torch.rand(3, 2, 4, N, N, generator=torch.Generator().manual_seed(0))  # (L, B, h, N, N)
    for offset, start in ((0, 0), (-1, 1), (-4, 5), (-3, 9), (2, 0), (1, 4)):
        t = torch.arange(start, N - max(offset, 0))
        expected = A[..., t, t + offset].mean(dim=(1, 3))  # (L, h)
        assert_close(stripe_score(A, offset, start), expected, rtol=0, atol=1e-6)
        per = stripe_score(A, offset, start, per_sequence=True)  # (B, L, h)
        assert_close(per, A[..., t, t + offset].mean(-1).permute(1, 0, 2), rtol=0, atol=1e-6)
    assert_close(stripe_score(list(A), -1, 1), stripe_score(A, -1, 1), rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"expected \(L, B, h, N, N\)"):
        stripe_score(A[0], -1, 1)


def test_a_stripe_over_valid_tokens_is_the_mean_over_the_pairs_both_valid():
    N, B = 9, 3
    gen = torch.Generator().manual_seed(2)
    A = torch.rand(2, B, 4, N, N, generator=gen, dtype=torch.float64)  # (L, B, h, N, N)
    valid = torch.rand(B, N, generator=gen) > 0.3  # (B, N)
    for offset, start in ((-1, 1), (-2, 3), (0, 0), (1, 0), (2, 4)):
        t = torch.arange(start, N - max(offset, 0))
        pairs = (valid[:, t] & valid[:, t + offset]).double()  # (B, n)
        w = A[..., t, t + offset]  # (L, B, h, n)
        expected = (w * pairs[None, :, None]).sum(dim=(1, 3)) / pairs.sum()  # (L, h)
        assert_close(stripe_score(A, offset, start, valid=valid), expected, rtol=1e-12, atol=0)
        per = (w * pairs[None, :, None]).sum(-1) / pairs.sum(-1)[None, :, None]  # (L, B, h)
        got = stripe_score(A, offset, start, per_sequence=True, valid=valid)
        assert_close(got, per.permute(1, 0, 2), rtol=1e-12, atol=0, equal_nan=True)  # no pair: NaN
    everything = torch.ones(B, N, dtype=torch.bool)
    assert_close(
        stripe_score(A, -1, 1, valid=everything), stripe_score(A, -1, 1), rtol=1e-12, atol=0
    )
    with pytest.raises(ValueError, match=r"valid has shape \(3, 8\); expected \(B, N\)"):
        stripe_score(A, -1, 1, valid=valid[:, 1:])
    with pytest.raises(ValueError, match="offset = 2, start = 7"):
        stripe_score(A, 2, 7)  # the queries 7 and 8 have no key two tokens after them


def test_previous_token_score_is_defined_once():
    """Notebook 05's (an encoder's words), notebook 06's (the toy) and notebook 13's (a decoder)
    previous-token scores are `nn.circuits.previous_token_score`: the stripe one token back."""
    from mha_lib.llm import induction
    from mha_lib.pretrained import roles
    from mha_lib.toy import circuits as toy

    gen = torch.Generator().manual_seed(3)
    A = torch.rand(2, 3, 4, 7, 7, generator=gen)  # (L, B, h, N, N)
    assert_close(circuits.previous_token_score(A), stripe_score(A, -1, 1), rtol=0, atol=0)
    assert_close(circuits.previous_token_score(A, start=3), stripe_score(A, -1, 3), rtol=0, atol=0)
    assert_close(toy.previous_token_score(A[0]), stripe_score(A[:1], -1, 1)[0], rtol=0, atol=1e-6)
    # an encoder's batch: sentences of 7 and 5 tokens, [CLS] and [SEP] and padding left out
    mask = torch.tensor([[1] * 7, [1] * 5 + [0] * 2])  # (B, N), 1 = real token
    heads = A[0, :2].permute(1, 0, 2, 3)  # (h, B, N, N): roles' layout, heads first
    words = torch.tensor([[0] + [1] * 5 + [0], [0] + [1] * 3 + [0] * 3]).bool()
    expected = stripe_score(A[:1, :2], -1, 1, valid=words)[0]  # (h,)
    assert_close(roles.previous_token_score(heads, mask), expected, rtol=0, atol=1e-6)
    b, i = torch.tensor([0] * 4 + [1] * 2), torch.tensor([2, 3, 4, 5, 2, 3])  # the word pairs
    by_hand = heads[:, b, i, i - 1].mean(-1)  # (h,)
    assert_close(roles.previous_token_score(heads, mask), by_hand, rtol=0, atol=1e-6)
    # a decoder's: the stripe of the weights the model returns on the ids
    from mha_lib.nn.decoder import DecoderConfig, DecoderLM

    torch.manual_seed(0)
    model = DecoderLM(
        DecoderConfig(
            vocab_size=50,
            hidden_size=16,
            num_layers=2,
            num_heads=4,
            num_kv_heads=2,
            head_dim=4,
            intermediate_size=32,
            rope_base=10000.0,
            rms_norm_eps=1e-6,
            context_length=16,
        )
    ).eval()
    ids = torch.randint(0, 50, (2, 9), generator=gen)
    with torch.no_grad():
        _, weights = model(ids, need_weights=True)
    expected = stripe_score(torch.stack(weights), -1, 2)  # (L, h)
    assert_close(induction.previous_token_score(model, ids, 2), expected, rtol=0, atol=0)


def test_the_toys_head_scores_are_stripes_of_the_second_copy():
    T, N = 4, 11  # the block repeated, then 3 tokens more
    A = torch.rand(2, 3, N, N, generator=torch.Generator().manual_seed(1))  # (B, h, N, N)
    block = A[None, :, :, : 2 * T, : 2 * T]  # (1, B, h, 2T, 2T)
    assert_close(previous_token_score(A), stripe_score(A[None], -1, 1)[0], rtol=0, atol=1e-6)
    assert_close(induction_score(A, T), stripe_score(block, 1 - T, T)[0], rtol=0, atol=1e-6)
    assert_close(duplicate_token_score(A, T), stripe_score(block, -T, T)[0], rtol=0, atol=1e-6)
    assert previous_token_score(A[0, 0]).shape == ()  # one (N, N) matrix: a scalar


def test_a_grouped_heads_circuits_use_its_groups_key_and_value():
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(12, 4, 2, head_dim=5).double()  # 2 query heads per group
    for head in range(4):
        W_q, W_k, W_v, W_o = head_weights(gqa, head)  # (12, 5) x 3, (5, 12)
        q, kv = slice(5 * head, 5 * head + 5), slice(5 * (head // 2), 5 * (head // 2) + 5)
        assert_close(W_q, gqa.q_proj.weight[q].T.detach(), rtol=0, atol=0)
        assert_close(W_k, gqa.k_proj.weight[kv].T.detach(), rtol=0, atol=0)
        assert_close(W_v, gqa.v_proj.weight[kv].T.detach(), rtol=0, atol=0)
        assert_close(W_o, gqa.out_proj.weight[:, q].T.detach(), rtol=0, atol=0)
        assert_close(qk_circuit(gqa, head), W_q @ W_k.T, rtol=0, atol=0)
        assert_close(ov_circuit(gqa, head), W_v @ W_o, rtol=0, atol=0)


def test_a_multi_head_attentions_heads_are_its_packed_blocks():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, bias=False, batch_first=True).double()
    same = GroupedQueryAttention.from_mha(mha)
    for head in range(2):
        for ours, theirs in zip(head_weights(mha, head), head_weights(same, head)):
            assert_close(ours, theirs, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"head = 2; expected an int in \[0, 2\)"):
        head_weights(mha, 2)
    with pytest.raises(TypeError, match="MultiHeadAttention with a packed in_proj_weight"):
        head_weights(MultiHeadAttention(8, 2, kdim=4), 0)


def test_a_decoder_layers_query_scale_is_folded_and_what_is_not_linear_is_refused():
    """qk_circuit folds the layer's query scale (Gemma 2's): x_i W_QK x_jᵀ / √d is the layer's
    score of two rows at the same position; biases, QK-norm and the output gate are refused
    naming their option, each on the side it changes."""
    from mha_lib.nn.decoder import DecoderAttention

    torch.manual_seed(0)
    attn = DecoderAttention(
        hidden_size=12, num_heads=4, num_kv_heads=2, head_dim=6, query_scale=0.1
    ).double()
    x = torch.randn(1, 2, 12, dtype=torch.float64)
    with torch.no_grad():
        q, k, _ = attn.qkv(x, torch.zeros(2, dtype=torch.long))  # both at position 0
        for head in range(4):
            score = q[0, head, 0] @ k[0, head // 2, 1] / 6**0.5
            circuit = x[0, 0] @ qk_circuit(attn, head) @ x[0, 1] / 6**0.5
            assert_close(circuit, score, rtol=0, atol=1e-12)
    sizes = dict(hidden_size=12, num_heads=4, num_kv_heads=2)
    for option, side in (("attention_bias", "both"), ("qk_norm", "qk"), ("attn_output_gate", "ov")):
        layer = DecoderAttention(**sizes, **{option: True})
        for kind, circuit in (("qk", qk_circuit), ("ov", ov_circuit)):
            if side in (kind, "both"):
                with pytest.raises(ValueError, match=f"^{option}: "):
                    circuit(layer, 0)
            else:
                circuit(layer, 0)
    with pytest.raises(ValueError, match=r"^attention_bias: "):  # a packed bias too
        qk_circuit(MultiHeadAttention(8, 2, bias=True, batch_first=True), 0)
