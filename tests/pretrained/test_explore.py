"""`mha_lib.pretrained.explore`: the explorer's functions and its widget's callbacks, in Python.

The same explorer in a real browser: tests/pretrained/test_browser_explorer.py.
"""

import base64
import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from mha_lib.pretrained import explore
from mha_lib.pretrained.encoder import load_minilm, tokenize
from mha_lib.pretrained.roles import (
    NULL_NAMES,
    next_token_score,
    null_heads,
    pair_scores,
    previous_token_score,
    special_token_mass,
    stack_attentions,
    word_attention,
    word_spans,
)
from mha_lib.pretrained.sentences import PAIRS

S = explore.DEFAULT_SENTENCE
WIDE = S.replace("tired", "wide")


@pytest.fixture(scope="module")
def model():
    return load_minilm()


@pytest.fixture(scope="module")
def r(model):
    return explore.run(S, model)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_run_is_the_models_attention(model, r):
    batch = tokenize(S)
    A = stack_attentions(model(batch.input_ids, batch.attention_mask))[:, :, 0]
    assert r.A.shape == (6, 12, 16, 16) and torch.equal(r.A, A)
    assert r.tokens[0] == "[CLS]" and r.tokens[-1] == "[SEP]"
    torch.testing.assert_close(r.A.sum(-1), torch.ones(6, 12, 16))


def test_words_use_the_rule_of_head_roles(r):
    labels, spans = explore.units(r)
    assert labels == [
        "[CLS]",
        "The",
        "animal",
        "didn't",
        "cross",
        "the",
        "street",
        "because",
        "it",
        "was",
        "too",
        "tired",
        ".",
        "[SEP]",
    ]
    assert sorted(p for _, pos in spans for p in pos) == list(range(16))  # every token once
    _, M = explore.pattern(r, 0, 2)
    torch.testing.assert_close(M, word_attention(r.A[0, 2], spans))
    words_only = word_spans(S, r.offsets)  # the words 05 scores: the rows of M that are words
    w = [labels.index(lab) for lab in ("The", "animal", "didn't")]
    torch.testing.assert_close(M[w][:, w], word_attention(r.A[0, 2], words_only)[:3, :3])
    labels_t, M_t = explore.pattern(r, 0, 2, words=False)
    assert labels_t == r.tokens and torch.equal(M_t, r.A[0, 2])


def test_role_scores_equal_head_roles_directly(r):
    A = r.A[:, :, None]  # (layers, h, 1, N, N)
    prev = previous_token_score(A, r.attention_mask)
    on_cls = special_token_mass(A, r.attention_mask)[0]
    ranking = explore.top_heads(r, "previous token")
    torch.testing.assert_close(ranking.scores, prev)
    assert ranking.top(1)[0][0] == "L0.H2" and ranking.top(1)[0][1] > 0.99
    assert torch.equal(explore.top_heads(r, "[CLS]").scores, on_cls)
    nxt = next_token_score(A, r.attention_mask)
    s = explore.role_scores(r, 1, 8)
    assert s["next token"] == pytest.approx(float(nxt[1, 8]))
    assert s["previous token"] == pytest.approx(float(prev[1, 8]))


def test_null_heads_are_the_baseline(r):
    ranking = explore.top_heads(r, "previous token")
    assert list(ranking.nulls) == list(NULL_NAMES)
    nulls = null_heads(r.attention_mask)  # (nulls, 1, N, N)
    expected = previous_token_score(nulls, r.attention_mask)
    assert ranking.nulls["offset -1"] == pytest.approx(1.0)
    assert ranking.nulls["uniform"] == pytest.approx(1 / 16)
    assert list(ranking.nulls.values()) == pytest.approx(expected.tolist())
    # the baseline leaves out offset -1, which is the role done perfectly
    assert ranking.best_null == ("uniform", pytest.approx(1 / 16))
    assert ranking.above_nulls() == int((ranking.scores > 1 / 16 + 1e-6).sum()) > 1
    assert "above every null head but offset -1 (this role, done perfectly)" in str(ranking)
    cls = explore.top_heads(r, "[CLS]")
    assert cls.nulls["[CLS]"] == pytest.approx(1.0) and cls.best_null[0] != "[CLS]"


def test_link_ranking_is_pair_scores_on_one_sentence(r):
    ranking = explore.top_heads(r, "it -> animal")
    assert ranking.role == "it -> animal"
    # the same numbers from roles' own minimal-pair scorer, on a pair of 05
    pair = next(p for p in PAIRS["coreference"] if p.a.sentence == S)
    _, margin = pair_scores(
        r.A[:, :, None], [S], [r.offsets], [type(pair)("coreference", pair.a, pair.a, "same")]
    )
    torch.testing.assert_close(ranking.scores, margin[0])
    assert explore.top_heads(r, ("it", "animal")).scores.equal(ranking.scores)
    # null heads: none has "animal" as its strict top word from "it"
    assert all(v <= 1e-6 for v in ranking.nulls.values())
    assert ranking.above_nulls() == int((ranking.scores > 1e-6).sum()) > 0
    assert "it -> animal (link margin)" in str(ranking)


def test_compare_difference_on_shared_words(model):
    c = explore.compare(S, WIDE, 3, 1, link=("it", "animal", "street"), model=model)
    assert "tired" not in c.shared and "wide" not in c.shared and "it" in c.shared
    assert len(c.shared) == 13 and c.difference.shape == (13, 13)
    ra, rb = explore.run(S, model), explore.run(WIDE, model)
    la, Ma = explore.pattern(ra, 3, 1)
    lb, Mb = explore.pattern(rb, 3, 1)
    it_a, it_b, an_a, an_b = la.index("it"), lb.index("it"), la.index("animal"), lb.index("animal")
    k, j = c.shared.index("it"), c.shared.index("animal")
    assert float(c.difference[k, j]) == pytest.approx(float(Mb[it_b, an_b] - Ma[it_a, an_a]))
    margin_a, margin_b = c.scores["it -> animal/street"]
    assert margin_a > 0 > margin_b  # 05's finding: L3.H1 picks "animal" in both sentences
    assert c.scores["previous token"][0] == pytest.approx(
        explore.role_scores(ra, 3, 1)["previous token"]
    )
    assert "it -> animal/street" in str(c)


def test_shared_words_match_repeated_words_in_order():
    ia, ib = explore._shared(["[CLS]", "the", "cat", "the", "mat"], ["[CLS]", "the", "mat"])
    assert (ia, ib) == ([0, 1, 4], [0, 1, 2])


def test_show_heads_figures(r):
    one = explore.show_heads(r, 0, 2)
    assert "L0.H2: looks one token back" in one.axes[0].get_title()
    red = [t.get_text() for t in one.axes[0].get_xticklabels() if t.get_color() == "tab:red"]
    assert red == ["[CLS]", "[SEP]"]
    layer = explore.show_heads(r, 1)
    assert sum(ax.get_title().startswith("L1.H") for ax in layer.axes) == 12
    every = explore.show_heads(r)
    assert sum(ax.get_title().startswith("L") for ax in every.axes) == 72
    tokens = explore.show_heads(r, 0, 2, words=False)
    assert len(tokens.axes[0].get_xticklabels()) == 16


LONG = (
    "The quick brown fox jumped over the lazy dog while the farmer in the old red barn "
    "was sleeping soundly after a long lunch with his three noisy brothers and their friends."
)


@pytest.mark.parametrize("sentence", [S, LONG])
def test_every_figure_fits_a_screen(model, sentence):
    """At most 14 x 11 inches (a laptop screen at 100 dpi), with labels that still fit: the
    layer view of a long sentence was 40 x 31 inches."""
    r = explore.run(sentence, model)
    figures = [explore.show_heads(r, 1), explore.show_heads(r, 1, 7), explore.show_heads(r)]
    figures.append(
        explore.compare(sentence, sentence.replace("The", "A", 1), 1, 7, model=model).figure
    )
    for fig in figures:
        width, height = fig.get_size_inches()
        assert width <= explore.MAX_WIDTH + 1e-6 and height <= explore.MAX_HEIGHT + 1e-6
    layer = figures[0]
    width = layer.get_size_inches()[0]
    labels = explore.units(r)[0]
    size = layer.axes[0].get_xticklabels()[0].get_fontsize()
    assert 5 <= size <= 10
    assert size / 72 * len(labels) <= width / 4  # the labels of a panel fit its width
    if sentence == S:
        assert width > 12  # a short sentence is not shrunk needlessly


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda m: explore.run("", m), ValueError, "sentence is empty"),
        (lambda m: explore.run(3, m), TypeError, "sentence must be a str"),
        (lambda m: explore.run("word " * 80, m), ValueError, "expected at most 64"),
        (lambda m: explore.show_heads(S, 6, 0, model=m), ValueError, "layer = 6; expected"),
        (lambda m: explore.show_heads(S, 0, 12, model=m), ValueError, "head = 12; expected"),
        (lambda m: explore.show_heads(S, None, 3, model=m), ValueError, "needs a layer"),
        (lambda m: explore.show_heads(S, 1.0, 3, model=m), TypeError, "layer must be an int"),
        (
            lambda m: explore.top_heads(S, "coreference", model=m),
            ValueError,
            "is not one of the roles top_heads scores: 'previous token', 'next token', "
            "'[CLS]', or a link 'from -> to'",
        ),
        (lambda m: explore.top_heads(S, "coreference", model=m), ValueError, "needs its two words"),
        (lambda m: explore.top_heads(S, "prev token", model=m), ValueError, "'previous token'"),
        (lambda m: explore.top_heads(S, 3, model=m), TypeError, "a link must be a str"),
        (lambda m: explore.explorer((S, WIDE), model=m), TypeError, "pair=sentence_b"),
        (lambda m: explore.explorer(3, model=m), TypeError, "sentence must be a str; got int"),
        (lambda m: explore.top_heads(S, "it -> zebra", model=m), ValueError, "'zebra' occurs 0"),
        (lambda m: explore.top_heads(S, ("it",), model=m), ValueError, "expected (from-word"),
    ],
)
def test_bad_input_is_named(model, call, error, message):
    with pytest.raises(error, match=re.escape(message)):
        call(model)


def test_the_documented_example_runs(monkeypatch):
    """docs/explorer.md's example, as written there (the widget needs ipywidgets)."""
    pytest.importorskip("ipywidgets")
    text = (Path(__file__).resolve().parents[2] / "docs" / "explorer.md").read_text()
    section = text.split("# Explore the heads of a real model", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    printed = []
    monkeypatch.setattr("builtins.print", lambda *a, **k: printed.append(" ".join(map(str, a))))
    exec(compile(code, "docs/explorer.md", "exec"), {})
    assert printed[0].startswith("L3.H1: role scores") and "are -> keys" in printed[1]


# ---------------------------------------------------------------------------- the widget


@pytest.fixture
def widget(model):
    pytest.importorskip("ipywidgets")
    return explore.explorer(model=model)


def test_widget_draws_the_default_head(widget, r):
    assert widget.last["view"] == "one head" and widget.last["text"] == ""
    np.testing.assert_array_equal(widget.last["data"], explore.pattern(r, 0, 2)[1].numpy())


def test_widget_redraws_on_sentence_and_head(widget, model):
    widget.sentence.value = "The cat slept on the old mat."
    drawn = widget.last["data"]
    r = explore.run("The cat slept on the old mat.", model)
    np.testing.assert_array_equal(drawn, explore.pattern(r, 0, 2)[1].numpy())
    widget.layer.value, widget.head.value = 1, 7  # two callbacks, one redraw each
    np.testing.assert_array_equal(widget.last["data"], explore.pattern(r, 1, 7)[1].numpy())
    widget.words.value = False
    np.testing.assert_array_equal(widget.last["data"], r.A[1, 7].numpy())


def test_widget_views(widget, model):
    r = explore.run(S, model)
    widget.view.value = "a layer"
    np.testing.assert_array_equal(widget.last["data"], r.A[0].numpy())
    widget.view.value = "all heads"
    assert widget.last["data"].shape == (6, 12, 16, 16)
    widget.view.value = "head ranking"
    assert "best heads: L0.H2 1.00" in widget.last["text"]
    widget.role.value = "link"
    widget.link.value = "it -> animal"
    assert widget.last["text"].startswith("it -> animal (link margin)")
    np.testing.assert_array_equal(
        widget.last["data"], explore.top_heads(r, "it -> animal").scores.numpy()
    )


def test_widget_minimal_pair(widget, model):
    widget.layer.value, widget.head.value = 3, 1
    widget.link.value = "it -> animal / street"
    widget.pair.value = WIDE
    assert widget.last["view"] == "minimal pair"
    c = explore.compare(S, WIDE, 3, 1, link="it -> animal / street", model=model)
    np.testing.assert_array_equal(widget.last["data"], c.difference.numpy())
    assert widget.last["text"] == str(c)


def test_widget_outputs_are_set_not_captured(widget):
    """The output area's outputs are set directly (no `with out:` capture, whose echo from
    nbclient made nbconvert's shutdown interrupt land in the kernel): text, then a PNG."""
    assert widget.out.msg_id == ""
    assert [o["output_type"] for o in widget.out.outputs] == ["display_data"]
    png = widget.out.outputs[0]["data"]["image/png"]
    assert base64.b64decode(png)[:8] == b"\x89PNG\r\n\x1a\n"
    widget.view.value = "head ranking"
    assert [o["output_type"] for o in widget.out.outputs] == ["stream", "display_data"]
    assert widget.out.outputs[0]["text"] == widget.last["text"] + "\n"
    assert plt.get_fignums() == []  # every figure drawn is closed


def test_widget_opens_on_a_minimal_pair(model):
    pytest.importorskip("ipywidgets")
    w = explore.explorer(S, model=model, pair=WIDE)
    assert w.last["view"] == "minimal pair" and w.pair.value == WIDE


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ("('it', 'animal')", "a Python tuple typed as text is not read"),
        ("it, animal", "separated by '->', not by a comma"),
        ("it animal", "there is no arrow"),
        ("", "it is empty"),
    ],
)
def test_widget_names_what_is_wrong_with_a_typed_link(widget, typed, message):
    widget.view.value = "head ranking"
    widget.role.value = "link"
    widget.link.value = "it -> animal"
    widget.link.value = typed
    assert widget.last["text"].startswith(f"✗ link {typed!r}: expected 'from -> to'")
    assert message in widget.last["text"] and widget.last["data"] is None
    assert widget.out.outputs[0]["text"] == widget.last["text"] + "\n"


def test_widget_reports_a_bad_sentence_instead_of_failing(widget):
    widget.sentence.value = "   "
    assert widget.last["text"] == "✗ sentence is empty; expected at least one word"
    assert widget.last["data"] is None
    widget.sentence.value = S  # and recovers
    assert widget.last["data"] is not None
