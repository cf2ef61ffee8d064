"""`mha_lib.head_roles` and `mha_lib.role_sentences`: the scores of notebook 05."""

import pytest
import torch

from mha_lib.head_roles import (
    ablated,
    cosine_change,
    head_label,
    link_score,
    next_token_score,
    positional_attention,
    previous_token_score,
    role_link_scores,
    special_token_mass,
    stack_attentions,
    top_heads,
    top_word,
    word_positions,
    words,
)
from mha_lib.pretrained import load_minilm, tokenize
from mha_lib.role_sentences import ROLES, SENTENCES, partner_of


@pytest.fixture(scope="module")
def model():
    return load_minilm()


def padded_mask(lengths, T):
    return (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).long()  # (B, T)


def previous_token_matrix(lengths, T):
    """(B, T, T): every real token after [CLS] looks at the token before it; [CLS] at itself."""
    A = torch.zeros(len(lengths), T, T)
    for b, n in enumerate(lengths):
        A[b, 0, 0] = 1.0
        for i in range(1, T):
            A[b, i, i - 1 if i < n else 0] = 1.0  # padding rows: anything
    return A


def test_offset_scores_detect_a_previous_token_head():
    lengths, T = [7, 5, 9], 9
    mask = padded_mask(lengths, T)
    A = previous_token_matrix(lengths, T)
    assert previous_token_score(A, mask) == pytest.approx(1.0)
    assert next_token_score(A, mask) == pytest.approx(0.0)
    assert next_token_score(A.transpose(-1, -2), mask) == pytest.approx(1.0)  # the mirror image
    uniform = mask[:, None, :].expand(-1, T, -1) / mask.sum(1)[:, None, None]  # (B, T, T)
    assert previous_token_score(uniform, mask) < 0.25
    random = torch.softmax(torch.randn(3, T, T, generator=torch.Generator().manual_seed(0)), -1)
    assert previous_token_score(random, mask) < 0.3
    # a stack of heads (layers, h, B, T, T) gives one score per head
    stack = torch.stack([A, uniform, random])[None]  # (1, 3, B, T, T)
    scores = previous_token_score(stack, mask)
    assert scores.shape == (1, 3) and top_heads(scores, 1)[0][0] == "L0.H0"


def test_offset_score_ignores_cls_sep_and_padding():
    lengths, T = [5, 3], 6
    mask = padded_mask(lengths, T)
    A = previous_token_matrix(lengths, T)
    A[:, 1] = 0.0
    A[:, 1, 0] = 1.0  # the first word looks at [CLS], its "previous token": not counted
    A[0, 4] = 0.0
    A[0, 4, 2] = 1.0  # [SEP] of sentence 0 looks elsewhere: not counted
    A[1, 5] = 0.0  # a padding row: not counted
    assert previous_token_score(A, mask) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="expected"):
        previous_token_score(A[:, :5], mask)


def test_word_positions_and_words():
    sentence = "The animal didn't cross the street because it was too tired."
    batch = tokenize(sentence)
    offsets = batch.offsets[0]
    assert word_positions(sentence, offsets, "didn't") == [3, 4, 5]
    assert word_positions(sentence, offsets, "tired") == [13]  # not the full stop
    assert word_positions(sentence, offsets, "animal") == [2]
    with pytest.raises(ValueError, match="2 times"):
        word_positions(sentence, offsets, "the")
    assert words(sentence)[:3] == ["the", "animal", "didn't"]
    A = torch.zeros(16, 16)
    A[10, 2] = 0.7  # "it" -> "animal"
    A[10, 8] = 0.3  # "it" -> "street"
    assert link_score(A, [10], [2]) == pytest.approx(0.7)
    assert link_score(A, [3, 4, 5], [2]) == pytest.approx(0.0)
    assert top_word(A, sentence, offsets, "it") == "animal"


def test_special_token_mass():
    lengths, T = [4, 3], 5
    mask = padded_mask(lengths, T)
    A = torch.zeros(2, T, T)
    A[:, :, 0] = 0.75
    A[0, :, 3] = 0.25  # sentence 0: [SEP] at 3
    A[1, :, 2] = 0.25  # sentence 1: [SEP] at 2
    on_cls, on_sep = special_token_mass(A, mask)
    assert on_cls == pytest.approx(0.75) and on_sep == pytest.approx(0.25)


def test_head_labels():
    assert head_label(3, 7) == "L3.H7"
    scores = torch.zeros(6, 12)
    scores[2, 11], scores[0, 2] = 0.9, 0.5
    assert [label for label, _ in top_heads(scores, 2)] == ["L2.H11", "L0.H2"]


# ---------------------------------------------------------------------------- the model


def test_ablation_with_head_mask_equals_zeroing_the_slice_by_hand(model):
    batch = tokenize(["The cat slept on the mat.", "A man waited at the station in the rain."])
    layer, head, d = 2, 5, 32
    out = ablated(model, batch.input_ids, batch.attention_mask, [(layer, head)])
    W_o = model.layers[layer].self_attn.out_proj.weight  # (E, h*d): head i's columns i*d:(i+1)*d
    saved = W_o[:, head * d : (head + 1) * d].clone()
    try:
        with torch.no_grad():
            W_o[:, head * d : (head + 1) * d] = 0.0
            by_hand = model(batch.input_ids, batch.attention_mask)
    finally:
        with torch.no_grad():
            W_o[:, head * d : (head + 1) * d] = saved
    for a, b in zip(out.hidden_states, by_hand.hidden_states):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        base = model(batch.input_ids, batch.attention_mask)
    for a, b in zip(base.attentions[: layer + 1], out.attentions[: layer + 1]):
        torch.testing.assert_close(a, b)  # up to the ablated layer, nothing changes
    assert (cosine_change(base, out, batch.attention_mask) > 0).all()
    assert torch.allclose(
        cosine_change(base, base, batch.attention_mask), torch.zeros(2), atol=1e-6
    )


def test_positional_attention_shape_and_l0h2(model):
    W = positional_attention(model, T=16)
    assert W.shape == (6, 12, 16, 16)
    torch.testing.assert_close(W.sum(-1), torch.ones(6, 12, 16))
    i = torch.arange(2, 15)
    assert W[0, 2, i, i - 1].min() > 0.9  # the previous-token head, from the weights alone


def test_role_scores_run_on_every_sentence(model):
    texts = [s.sentence for s in SENTENCES]
    batch = tokenize(texts)
    with torch.no_grad():
        A = stack_attentions(model(batch.input_ids, batch.attention_mask))  # (L, h, B, T, T)
    n_links = sum(len(s.links) for s in SENTENCES)
    scores = role_link_scores(A, texts, batch.offsets, SENTENCES)
    assert scores.shape == (n_links, 6, 12) and ((scores >= 0) & (scores <= 1 + 1e-6)).all()


# ---------------------------------------------------------------------------- the sentence list


def test_role_sentences_are_well_formed():
    assert 20 <= len(SENTENCES) <= 50
    assert len({s.sentence for s in SENTENCES}) == len(SENTENCES)
    assert {s.role for s in SENTENCES} == set(ROLES)
    for item in SENTENCES:
        assert item.links, item
        ws = words(item.sentence)
        for src, dst in item.links:
            assert ws.count(src.lower()) == 1 and ws.count(dst.lower()) == 1, (item, src, dst)
        partner = partner_of(item)
        if partner is None:
            continue
        assert partner_of(partner) is item
        assert len(partner.links) == len(item.links)
        a, b = item.sentence.split(" "), partner.sentence.split(" ")
        if len(a) == len(b):  # one word replaced
            assert sum(x != y for x, y in zip(a, b)) == 1, (a, b)
        else:  # one word inserted
            short, long = sorted((a, b), key=len)
            assert len(long) == len(short) + 1
            assert any(long[:k] + long[k + 1 :] == short for k in range(len(long))), (a, b)
        assert item.links != partner.links or len(a) != len(b)  # the answer moves
