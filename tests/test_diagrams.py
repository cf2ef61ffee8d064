"""Tests of the schematic figures in `mha_lib.diagrams`: they draw, and say what they must."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
from matplotlib.figure import Figure

from mha_lib.diagrams import head_split, multi_head_dataflow, transformer_blocks


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


@pytest.mark.parametrize("draw", [multi_head_dataflow, head_split, transformer_blocks])
def test_no_text_overlaps_other_text(draw):
    assert overlapping_texts(draw()) == []


def test_head_split_other_sizes_and_limits():
    fig = head_split(N=4, h=3, d=1)
    assert "head 2" in texts(fig)
    with pytest.raises(ValueError, match="head_split draws at most"):
        head_split(N=3, h=7, d=1)


def test_roadmap_names_the_core_path_in_order():
    from mha_lib.diagrams import roadmap

    labels = texts(roadmap())
    numbers = [t for t in labels if t in {"01", "02", "03", "03b", "04"}]
    assert numbers == ["01", "02", "03", "03b", "04"]
    assert "05–18" in labels and labels.count("torch") == 1
    assert overlapping_texts(roadmap()) == []


def test_dependency_graphs_count_steps_and_hops():
    import numpy as np

    from mha_lib.diagrams import dependency_graph, hops, sequential_steps

    for n in (2, 5, 23):
        depends_on, reads = dependency_graph("rnn", n)
        H = hops(reads)
        assert sequential_steps(depends_on) == n and H[0, n - 1] == n - 1
        assert np.isinf(H[n - 1, 0])  # a left-to-right RNN never carries anything back
        depends_on, reads = dependency_graph("attention", n)
        H = hops(reads)
        assert sequential_steps(depends_on) == 1 and H.max() == 1
    with pytest.raises(ValueError, match="'rnn' or 'attention'"):
        dependency_graph("cnn", 3)


def test_recurrence_vs_attention_titles_count_from_the_graphs():
    from mha_lib.diagrams import recurrence_vs_attention

    labels = texts(recurrence_vs_attention(6))
    assert any("6 steps" in t and "after 5 updates" in t for t in labels)
    assert any("1 step" in t and "in 1 hop" in t for t in labels)
    with pytest.raises(ValueError, match="2 to 9 tokens"):
        recurrence_vs_attention(12)


@pytest.mark.parametrize(
    "X", [[[1.0], [2.0], [3.0]], [[1.0, 0.0], [2.0, 2.0], [0.0, 5.0]]], ids=["C=1", "C=2"]
)
def test_diagonal_counterexample_shows_the_weights_it_claims(X):
    import numpy as np

    from mha_lib import self_attention
    from mha_lib.diagrams import diagonal_counterexample

    A = self_attention(np.array(X))[1]
    fig = diagonal_counterexample(X)
    title = fig.axes[1].get_title()
    assert f"= {A[0, 1]:.3f} (red) is above both" in title
    assert f"{A[0, 0]:.3f}" in title and f"{A[1, 1]:.3f}" in title
    with pytest.raises(ValueError, match="C = 1 or 2"):
        diagonal_counterexample(np.ones((3, 3)))


def test_single_head_dataflow_labels_every_step_and_shape():
    from mha_lib.diagrams import single_head_dataflow

    fig = single_head_dataflow()
    assert isinstance(fig, Figure)
    labels = texts(fig)
    for shape in ["(N, C)", "(N, d_k)", "(N, d_v)", "(N, N)", "(N, N), rows sum to 1"]:
        assert shape in labels, shape
    for weight in ["$W_Q$: (C, d_k)", "$W_K$: (C, d_k)", "$W_V$: (C, d_v)"]:
        assert weight in labels, weight
    for word in ["queries", "keys", "values", "scores", "weights", "output"]:
        assert word in labels, word
    assert any("softmax" in t for t in labels)
    assert not any("M" in t for t in labels if t.startswith("(")), (
        "one head of self-attention: M = N"
    )
    assert overlapping_texts(fig) == []


def test_transformer_blocks_put_the_layernorms_where_each_order_does():
    fig = transformer_blocks()
    assert isinstance(fig, Figure)
    post, pre = fig.axes
    for ax, name in ((post, "post-LN"), (pre, "pre-LN")):
        labels = [t.get_text() for t in ax.texts]
        assert any(t.startswith(name) for t in labels), name
        assert labels.count("LayerNorm") == 2 and labels.count("+") == 2
        assert "multi-head attention" in labels and "feed-forward" in labels
        assert "x  (B, N, E)" in labels and "output  (B, N, E)" in labels
    stream_x = {  # the x of the residual stream: where the input label sits
        name: next(t.get_position()[0] for t in ax.texts if t.get_text() == "x  (B, N, E)")
        for ax, name in ((post, "post"), (pre, "pre"))
    }
    ln_x = {
        name: [t.get_position()[0] for t in ax.texts if t.get_text() == "LayerNorm"]
        for ax, name in ((post, "post"), (pre, "pre"))
    }
    assert all(x == stream_x["post"] for x in ln_x["post"])  # on the stream
    assert all(x != stream_x["pre"] for x in ln_x["pre"])  # on the branches


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
