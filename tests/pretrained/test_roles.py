"""`mha_lib.pretrained.roles` and `mha_lib.pretrained.sentences`: the scores of notebook 05."""

import pytest
import torch

from mha_lib.pretrained.encoder import load_minilm, tokenize
from mha_lib.pretrained.roles import (
    BAR,
    BASELINE_NAMES,
    CREDITED,
    LINKS,
    NULL_NAMES,
    ablated,
    baseline_heads,
    baseline_patterns,
    beats_rivals,
    cosine_change,
    credited_heads,
    head_label,
    judge,
    next_token_score,
    null_heads,
    null_patterns,
    offset_margin,
    pair_scores,
    parse_head,
    positional_attention,
    positional_scores,
    previous_token_score,
    special_token_mass,
    stack_attentions,
    top_heads,
    top_word,
    wilson_interval,
    word_attention,
    word_positions,
    word_spans,
    words,
)
from mha_lib.pretrained.sentences import PAIRS, ROLES, Marked, MinimalPair, sentences, split

RUNNING = "The animal didn't cross the street because it was too tired."


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
    batch = tokenize(RUNNING)
    offsets = batch.offsets[0]
    assert word_positions(RUNNING, offsets, "didn't") == [3, 4, 5]
    assert word_positions(RUNNING, offsets, "tired") == [13]  # not the full stop
    assert word_positions(RUNNING, offsets, "animal") == [2]
    with pytest.raises(ValueError, match="2 times"):
        word_positions(RUNNING, offsets, "the")
    assert words(RUNNING)[:3] == ["the", "animal", "didn't"]
    spans = word_spans(RUNNING, offsets)
    assert [w for w, _ in spans] == words(RUNNING)  # "the" twice, each its own entry
    assert spans[2] == ("didn't", [3, 4, 5]) and spans[-1] == ("tired", [13])


def test_word_attention_takes_the_mean_of_the_pieces():
    offsets = tokenize(RUNNING).offsets[0]
    spans = word_spans(RUNNING, offsets)
    N, W = len(offsets), len(spans)
    even = null_patterns(N)["uniform"]  # (N, N): a head with no role
    Aw = word_attention(even, spans)
    assert Aw.shape == (W, W)
    torch.testing.assert_close(Aw, torch.full((W, W), 1.0 / N))  # "didn't" gets no more
    A = torch.zeros(N, N)
    A[10, 4] = 0.6  # "it" -> the apostrophe of "didn't"
    A[10, 2] = 0.3  # "it" -> "animal"
    Aw = word_attention(A, spans)
    assert Aw[7, 2] == pytest.approx(0.2) and Aw[7, 1] == pytest.approx(0.3)
    assert top_word(A, RUNNING, offsets, "it") == "animal"  # 0.3 beats 0.6 / 3
    assert top_word(even, RUNNING, offsets, "it") is None  # a tie has no top word
    A = torch.zeros(N, N)
    A[10, 7] = 0.5  # "it" -> the second "the": a candidate like any word
    assert top_word(A, RUNNING, offsets, "it") == "the"
    stack = torch.stack([A, even])[None]  # (1, 2, N, N): any leading axes
    assert word_attention(stack, spans).shape == (1, 2, W, W)
    with pytest.raises(ValueError, match=r"A has shape \(16, 15\); expected \(..., N, N\)"):
        word_attention(A[:, :15], spans)
    with pytest.raises(ValueError, match="spans name token 13; A has shape"):
        word_attention(A[:10, :10], spans)


def test_null_patterns():
    n, N = 6, 8
    nulls = null_patterns(n, N)
    assert tuple(nulls) == NULL_NAMES
    for name, P in nulls.items():
        assert P.shape == (N, N), name
        torch.testing.assert_close(P.sum(-1), torch.ones(N))
        assert P[:, n:].sum() == 0, name  # no weight on padding
    assert nulls["offset -1"][3, 2] == 1 and nulls["offset +2"][3, 5] == 1
    assert nulls["offset +2"][5, 5] == 1  # clipped to the sentence
    assert (nulls["[CLS]"][:, 0] == 1).all()
    mask = padded_mask([6, 4], 8)
    stacked = null_heads(mask)
    assert stacked.shape == (len(NULL_NAMES), 2, 8, 8)
    torch.testing.assert_close(stacked[:, 1], torch.stack(list(null_patterns(4, 8).values())))
    with pytest.raises(ValueError, match="expected 1 <= n <= N"):
        null_patterns(5, 3)


def test_wilson_interval_and_the_crediting_rule():
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(11, 11) == pytest.approx((0.7412, 1.0), abs=1e-4)
    with pytest.raises(ValueError, match="expected 0 <= k <= n"):
        wilson_interval(3, 2)
    assert BAR == 0.75
    assert beats_rivals(20, 20, [0, 0, 0])
    assert beats_rivals(15, 20, [0, 0])  # the bar, and 0.53 > 0.16 (0 of 20's upper end)
    assert not beats_rivals(14, 20, [0, 0])  # below the 3-in-4 bar
    assert not beats_rivals(20, 20, [0, 20, 0])  # a rival does as well: no role
    # the margin: the head's interval wholly above the best rival's
    assert wilson_interval(18, 20)[0] < wilson_interval(10, 20)[1] < wilson_interval(19, 20)[0]
    assert not beats_rivals(18, 20, [10]) and beats_rivals(19, 20, [10])
    with pytest.raises(ValueError, match="rival_k is empty"):
        beats_rivals(20, 20, [])


def test_offset_margin_separates_what_the_softmax_saturates():
    N = 8
    i = torch.arange(N)
    sharp = torch.zeros(N, N)
    sharp[i[1:], i[1:] - 1] = 20.0
    sharper = 2 * sharp
    for s in (sharp, sharper):
        w = torch.softmax(s, -1)[i[2:], i[2:] - 1]
        assert w.min() > 0.9999  # the weights cannot tell them apart
    assert offset_margin(sharp, -1) == pytest.approx(20.0)
    assert offset_margin(sharper, -1) == pytest.approx(40.0)
    assert offset_margin(torch.stack([sharp, sharper]), -1).shape == (2,)
    assert offset_margin(sharp, +1) < 0
    with pytest.raises(ValueError, match="scores has shape"):
        offset_margin(sharp[:, :5], -1)


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
    W = positional_attention(model, N=16)
    assert W.shape == (6, 12, 16, 16)
    torch.testing.assert_close(W.sum(-1), torch.ones(6, 12, 16))
    torch.testing.assert_close(W, torch.softmax(positional_scores(model, N=16), -1))
    i = torch.arange(2, 15)
    assert W[0, 2, i, i - 1].min() > 0.9  # the previous-token head, from the weights alone


@pytest.fixture(scope="module")
def role_batch(model):
    texts = sentences()
    batch = tokenize(texts)
    with torch.no_grad():
        A = stack_attentions(model(batch.input_ids, batch.attention_mask))  # (L, h, B, N, N)
    return texts, batch, A


def marked_head(texts, batch, pairs, reverse=False):
    """(B, N, N): a head that does the role perfectly, built from the marks themselves."""
    A = null_heads(batch.attention_mask)[0].clone()  # uniform rows to start from
    for pair in pairs:
        for m in (pair.a, pair.b):
            b = texts.index(m.sentence)
            src, dst = (m.dst, m.src) if reverse else (m.src, m.dst)
            for p in word_positions(m.sentence, batch.offsets[b], src):
                A[b, p] = 0.0
                A[b, p, word_positions(m.sentence, batch.offsets[b], dst)] = 1.0
    return A


@pytest.fixture(scope="module")
def rivals(role_batch):
    """The 6 null heads and the 10 positional baselines on the role sentences: {name: (B, N, N)}."""
    texts, batch, _ = role_batch
    mask = batch.attention_mask
    nulls = dict(zip(NULL_NAMES, null_heads(mask)))
    return nulls | dict(zip(BASELINE_NAMES, baseline_heads(texts, batch.offsets, mask)))


# How many of a link's 80 single sentences each rival gets right (its word is the marked one;
# rivals not named get none). A pair needs both of its sentences, and no rival gets one pair.
SENTENCE_HITS = {
    "coreference: it -> referent": {"offset -2": 40, "word -2": 40},
    "negation: didn't -> verb": {"offset +1": 20, "word +1": 20, "word +2": 20, "word +3": 40},
    "negation: verb -> didn't": {
        "offset -2": 40, "offset -1": 20, "word -3": 40, "word -2": 20, "word -1": 20
    },
    "preposition -> object": {
        "offset +1": 8, "offset +2": 28, "word +1": 8, "word +2": 28, "word +3": 26, "word +4": 18
    },
    "agreement: verb -> subject": {"offset -1": 24, "word -4": 24, "word -3": 2, "word -1": 24},
    "agreement: subject -> verb": {"offset +1": 24, "word +1": 24, "word +3": 2, "word +4": 24},
    "object: verb -> object": {
        "offset +1": 8, "offset +2": 28, "word +1": 8, "word +2": 28, "word +3": 26, "word +4": 18
    },
    "similarity: noun -> similar": {"word -3": 10, "word +3": 10, "word +4": 10},
}  # fmt: skip  # a table: one link a line


def test_baseline_patterns_point_at_words():
    offsets = tokenize(RUNNING).offsets[0]
    N = len(offsets)
    P = baseline_patterns(RUNNING, offsets, N)
    assert tuple(P) == BASELINE_NAMES
    assert BASELINE_NAMES == (
        "first word",
        "last word",
        "word -4",
        "word -3",
        "word -2",
        "word -1",
        "word +1",
        "word +2",
        "word +3",
        "word +4",
    )
    for name, M in P.items():
        assert M.shape == (N, N), name
        torch.testing.assert_close(M.sum(-1), torch.ones(N))
    # the, animal, didn't, cross, the, street, because, it, was, too, tired (11 words)
    assert top_word(P["word -4"], RUNNING, offsets, "because") == "didn't"  # three pieces
    assert top_word(P["word +1"], RUNNING, offsets, "didn't") == "cross"  # from all three
    assert top_word(P["word -2"], RUNNING, offsets, "it") == "street"
    assert top_word(P["last word"], RUNNING, offsets, "it") == "tired"  # not the full stop
    assert top_word(P["first word"], RUNNING, offsets, "it") == "the"
    spans = word_spans(RUNNING, offsets)
    assert word_attention(P["first word"], spans)[7, 0] == 1.0  # the first "the", not the second
    assert word_attention(P["first word"], spans)[7, 4] == 0.0
    assert top_word(P["word +4"], RUNNING, offsets, "too") is None  # no such word: a tie
    assert top_word(P["last word"], RUNNING, offsets, "tired") is None  # only itself
    with pytest.raises(ValueError, match="expected 1 <= n <= N"):
        baseline_patterns(RUNNING, offsets, N, N - 1)
    # a padded batch: the same patterns, no weight on padding
    texts = [RUNNING, "The cat slept on the mat."]
    batch = tokenize(texts)
    stacked = baseline_heads(texts, batch.offsets, batch.attention_mask)
    assert stacked.shape == (len(BASELINE_NAMES), 2, N, N)
    n1 = int(batch.attention_mask[1].sum())
    short = baseline_patterns(texts[1], batch.offsets[1], n1, N)
    torch.testing.assert_close(stacked[:, 1], torch.stack(list(short.values())))
    assert stacked[:, 1, :, n1:].sum() == 0


@pytest.mark.parametrize("link", list(LINKS))
def test_no_null_head_or_positional_baseline_is_credited(role_batch, rivals, link):
    texts, batch, A = role_batch
    role, reverse = LINKS[link]
    R = torch.stack(list(rivals.values()))  # (rivals, B, N, N)
    # single sentences: each rival's word is the marked one in some of them ...
    singles = [MinimalPair(role, m, m, "one") for p in PAIRS[role] for m in (p.a, p.b)]
    right, _ = pair_scores(R, texts, batch.offsets, singles, reverse)  # (80, rivals)
    hits = {name: int(k) for name, k in zip(rivals, right.sum(0)) if k}
    assert hits == SENTENCE_HITS[link]
    # ... but in no pair both: the answer moves in every pair
    right, margin = pair_scores(R, texts, batch.offsets, PAIRS[role], reverse)  # (40, rivals)
    assert right.shape == margin.shape == (len(PAIRS[role]), len(rivals))
    assert right.sum() == 0, {name: int(k) for name, k in zip(rivals, right.sum(0))}
    # the crediting rule, applied to each rival as if it were a head, against all the others
    selection, held_out = split(PAIRS[role])
    k_out = pair_scores(R, texts, batch.offsets, held_out, reverse)[0].sum(0).tolist()
    for j, name in enumerate(rivals):
        others = k_out[:j] + k_out[j + 1 :]
        assert not beats_rivals(k_out[j], len(held_out), others), name
    # a head that does the role gets every pair right, and is credited
    perfect = marked_head(texts, batch, PAIRS[role], reverse)
    right_p, _ = pair_scores(perfect, texts, batch.offsets, held_out, reverse)
    assert right_p.all() and beats_rivals(int(right_p.sum()), len(held_out), k_out)
    # and the real heads: (P, layers, h)
    right_h, _ = pair_scores(A, texts, batch.offsets, selection, reverse)
    assert right_h.shape == (len(selection), 6, 12)


def test_the_check_fails_on_pairs_that_end_on_the_object():
    """The preposition pairs cut after the object, as the first version of 05 wrote them:
    then the last word IS the object, and the rule credits the "last word" baseline."""

    def cut(m):
        ws = m.sentence.split(" ")
        k = next(j for j, w in enumerate(ws) if w.strip(".,").lower() == m.dst)
        return Marked(" ".join(ws[: k + 1]).rstrip(",") + ".", m.src, m.dst)

    inside = [p for p in PAIRS["preposition"] if words(p.a.sentence)[0] != p.a.src]
    pairs = [MinimalPair(p.role, cut(p.a), cut(p.b), p.change) for p in inside]
    texts = list(dict.fromkeys(s for p in pairs for s in (p.a.sentence, p.b.sentence)))
    assert texts[0] == "The cat slept on the mat." and len(texts) == 2 * len(pairs) == 72
    batch = tokenize(texts)
    R = baseline_heads(texts, batch.offsets, batch.attention_mask)
    held_out = split(pairs)[1]
    k = pair_scores(R, texts, batch.offsets, held_out)[0].sum(0).tolist()
    last = BASELINE_NAMES.index("last word")
    assert k[last] == len(held_out) == 18
    assert beats_rivals(k[last], 18, k[:last] + k[last + 1 :])  # a shortcut, credited
    with pytest.raises(ValueError, match="has 2 words; expected at least 3"):
        short = Marked("Without help.", "without", "help")
        pair_scores(
            R,
            ["Without help."],
            tokenize("Without help.").offsets,
            [MinimalPair("preposition", short, short, "one")],
        )


def test_credited_is_the_verdict_of_the_pairs(role_batch, rivals):
    """`CREDITED` is what notebook 05 computes: `judge` on every link, then `credited_heads`."""
    texts, batch, A = role_batch
    verdicts = {link: judge(A, rivals, texts, batch.offsets, link) for link in LINKS}
    assert credited_heads(verdicts) == CREDITED
    assert set(CREDITED) <= set(ROLES)
    assert not [link for link, v in verdicts.items() if v.credited and LINKS[link][1]]
    for link, v in verdicts.items():
        role = LINKS[link][0]
        assert v.n_sel == v.n_out == 20 and set(v.rivals) == set(NULL_NAMES + BASELINE_NAMES)
        assert len(v.candidates) == 3 and v.candidates[0] == (v.head, v.k_sel, v.k_out)
        if v.credited:
            # it beats the best positional baseline and the best null head on the held-out
            # pairs, by the stated margin: its interval wholly above theirs
            best_baseline = max(v.rivals[name] for name in BASELINE_NAMES)
            best_null = max(v.rivals[name] for name in NULL_NAMES)
            for best in (best_baseline, best_null):
                assert v.interval[0] > wilson_interval(best, v.n_out)[1]
            assert v.k_out >= BAR * v.n_out and CREDITED[role] == parse_head(v.head)
    with pytest.raises(ValueError, match="is not one of LINKS"):
        judge(A, rivals, texts, batch.offsets, "coreference")


def test_a_summing_rule_would_credit_the_uniform_head():
    """The reason for the mean: summed over pieces, an even head finds "didn't"."""
    offsets = tokenize(RUNNING).offsets[0]
    spans = word_spans(RUNNING, offsets)
    even = null_patterns(len(offsets))["uniform"]
    summed = [even[9, pos].sum() for _, pos in spans]  # from "because"
    assert max(summed) == summed[2]  # "didn't", three pieces, would win
    assert top_word(even, RUNNING, offsets, "because") is None  # the mean rule: a tie
