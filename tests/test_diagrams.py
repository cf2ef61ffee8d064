"""Tests of the schematic figures in `mha_lib.diagrams`: they draw, and say what they must."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
from matplotlib.figure import Figure

from mha_lib.diagrams import head_split, multi_head_dataflow


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def overlapping_texts(fig):
    """Pairs of text labels whose rendered boxes overlap."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [
        (t.get_text(), t.get_window_extent(renderer))
        for ax in fig.axes
        for t in ax.texts
        if t.get_text().strip()
    ]
    return [
        (a, b)
        for i, (a, box_a) in enumerate(boxes)
        for b, box_b in boxes[i + 1 :]
        if box_a.overlaps(box_b)
    ]


def test_dataflow_labels_every_shape():
    fig = multi_head_dataflow()
    assert isinstance(fig, Figure)
    labels = texts(fig)
    for shape in ["(N, C)", "(N, d_k)", "(M, d_k)", "(M, d_v)", "(N, M)", "(N, d_v)"]:
        assert shape in labels, shape
    assert "(N, h·d_v)" in labels and "(h·d_v, C)" in labels
    assert any("softmax" in t for t in labels) and any("W_O" in t for t in labels)
    assert any("Cross-attention" in t for t in labels)


def test_head_split_shows_the_mixing():
    fig = head_split(N=3, h=2, d=2)
    assert isinstance(fig, Figure)
    labels = texts(fig)
    assert any("transpose" in t for t in labels)
    assert "head 0 never sees token 2" in labels
    assert sum("✗" in t for t in labels) >= 2  # the mixed rows are marked
    cells = {t for t in labels if t.isdigit()}
    assert cells == {str(10 * t + f) for t in range(3) for f in range(4)}


@pytest.mark.parametrize("draw", [multi_head_dataflow, head_split])
def test_no_text_overlaps_other_text(draw):
    assert overlapping_texts(draw()) == []


def test_head_split_other_sizes_and_limits():
    fig = head_split(N=4, h=3, d=1)
    assert "head 2" in texts(fig)
    with pytest.raises(ValueError, match="head_split draws at most"):
        head_split(N=3, h=7, d=1)


def test_one_vs_two_heads_task_draws_both_answers():
    from mha_lib.diagrams import one_vs_two_heads_task

    fig = one_vs_two_heads_task()
    texts = " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    assert "Two heads" in texts and "One head" in texts and "half of the target is lost" in texts
    assert "$c_3$" in texts and "token 4" in texts  # the query and the token just before it
    assert overlapping_texts(fig) == []
    plt.close(fig)
    with pytest.raises(ValueError, match="query"):
        one_vs_two_heads_task(n_tok=6, query=1)
