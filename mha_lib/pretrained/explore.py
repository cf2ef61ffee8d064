"""An explorer for the heads of all-MiniLM-L6-v2 on a sentence of your own (notebook 05).

Notebook 05 measures the 72 heads (6 layers x 12 heads) of a pretrained
sentence encoder on fixed, hand-marked sentences. This module lets a learner
type a sentence and look for themselves, with the same model, the same
attention module (`mha_lib.pytorch.MultiHeadAttention`) and the same scores:

- `run(sentence)`: the model's attention on one sentence, (layers, h, N, N);
- `show_heads(sentence, layer=None, head=None, words=True)`: one head, one
  layer's 12 heads, or all 72, as the series' heatmaps ([CLS] and [SEP] in red);
- `compare(sentence_a, sentence_b, layer, head, link=None)`: a minimal pair side
  by side, the difference of the two patterns on the words they share, and the
  head's role scores in both;
- `top_heads(sentence, role)`: the 72 heads ranked for a role on your sentence,
  next to the null heads of notebook 05 (heads with no role);
- `explorer()`: the same, as a small ipywidgets app (text boxes, selectors).

Every score comes from `roles`: the word-piece rule (`word_attention`,
pieces combined by their mean), the null heads (`null_heads`), the positional
and [CLS] scores, and the link test of the minimal pairs (`pair_scores`). This
module only runs the model, arranges the tokens and draws. Nothing is
downloaded: the weights come from the installed model package, and ipywidgets
ships its browser code inside its own package.

Shapes (notebook 00's notation): a sentence of N tokens ([CLS] ... [SEP]);
A (layers, h, N, N), rows = queries, columns = keys; with words=True a head's
(N, N) becomes (W, W), one row and column per word, [CLS], [SEP] and
punctuation mark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import Tensor

from ..plot import plot_attention, plot_heads
from ..runtime import release_freed_memory
from .encoder import MiniLMEncoder, load_minilm, tokenize
from .roles import (
    NULL_NAMES,
    head_label,
    next_token_score,
    null_heads,
    pair_scores,
    previous_token_score,
    special_token_mass,
    stack_attentions,
    word_attention,
    word_spans,
)
from .sentences import Marked, MinimalPair

__all__ = [
    "DEFAULT_SENTENCE",
    "POSITIONAL_ROLES",
    "VIEWS",
    "Comparison",
    "HeadExplorer",
    "Ranking",
    "Run",
    "compare",
    "explorer",
    "parse_link",
    "role_scores",
    "run",
    "show_heads",
    "top_heads",
    "units",
]

DEFAULT_SENTENCE = "The animal didn't cross the street because it was too tired."
POSITIONAL_ROLES = ("previous token", "next token", "[CLS]")  # scored on any sentence
SPECIAL = ("[CLS]", "[SEP]")
SPECIAL_COLOUR = "tab:red"  # tick labels of [CLS] and [SEP]
MAX_TOKENS = 64  # longer sentences make unreadable heatmaps (the model takes 512)
MAX_WIDTH, MAX_HEIGHT = 14.0, 11.0  # inches: every figure fits a laptop screen at 100 dpi
VIEWS = ("one head", "a layer", "all heads", "head ranking")
# the null head that IS a positional role, done perfectly: the baseline is the other nulls
SELF_NULL = {"previous token": "offset -1", "next token": "offset +1", "[CLS]": "[CLS]"}


@lru_cache(maxsize=1)
def _default_model() -> MiniLMEncoder:
    return load_minilm()


# ---------------------------------------------------------------------------- running the model


@dataclass
class Run:
    """One sentence through the model: its tokens, their character spans and every head's
    weights A (layers, h, N, N); attention_mask (1, N) is all ones (no padding)."""

    sentence: str
    tokens: list[str]
    offsets: list[tuple[int, int]]
    attention_mask: Tensor
    A: Tensor

    @property
    def num_layers(self) -> int:
        return self.A.shape[0]

    @property
    def num_heads(self) -> int:
        return self.A.shape[1]


def run(sentence: str, model: MiniLMEncoder | None = None) -> Run:
    """Tokenise one sentence and run it through the model (ours: `load_minilm()` by default)."""
    if not isinstance(sentence, str):
        raise TypeError(f"sentence must be a str; got {type(sentence).__name__}")
    if not sentence.strip():
        raise ValueError("sentence is empty; expected at least one word")
    model = _default_model() if model is None else model
    batch = tokenize(sentence)
    N = batch.input_ids.shape[1]
    if N > MAX_TOKENS:
        raise ValueError(
            f"sentence has {N} tokens; expected at most {MAX_TOKENS} (with [CLS] and [SEP]) "
            f"so that the heatmaps stay readable"
        )
    with torch.no_grad():
        out = model(batch.input_ids, batch.attention_mask)
    A = stack_attentions(out)[:, :, 0]  # (layers, h, N, N)
    return Run(sentence, batch.tokens[0], batch.offsets[0], batch.attention_mask, A)


def _check_head(r: Run, layer: int | None, head: int | None) -> None:
    """Clear errors for a layer or head out of range (None is allowed, checked by the caller)."""
    for name, value, n in (("layer", layer, r.num_layers), ("head", head, r.num_heads)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int; got {type(value).__name__}")
        if not 0 <= value < n:
            raise ValueError(f"{name} = {value}; expected 0 <= {name} < {n}")


# ---------------------------------------------------------------------------- tokens and words


def units(r: Run, words: bool = True) -> tuple[list[str], list[tuple[str, list[int]]]]:
    """The rows/columns to draw: (labels, spans), spans in `word_spans`' form.

    words=True: every word of `roles.word_spans` (its pieces together),
    and each token that belongs to no word ([CLS], [SEP], punctuation) on its
    own, in sentence order; labels are the words as typed. words=False: one
    unit per token, labelled with the token.
    """
    if not words:
        return list(r.tokens), [(t, [p]) for p, t in enumerate(r.tokens)]
    spans = word_spans(r.sentence, r.offsets)  # the words, as notebook 05 scores them
    in_word = {p for _, pos in spans for p in pos}
    alone = [(r.tokens[p], [p]) for p in range(len(r.tokens)) if p not in in_word]
    spans = sorted(spans + alone, key=lambda s: s[1][0])
    labels = []
    for name, pos in spans:
        if len(pos) == 1 and name == r.tokens[pos[0]] and name in SPECIAL:
            labels.append(name)
        else:
            labels.append(r.sentence[r.offsets[pos[0]][0] : r.offsets[pos[-1]][1]])
    return labels, spans


def pattern(r: Run, layer: int, head: int, words: bool = True) -> tuple[list[str], Tensor]:
    """(labels, M): head `head` of layer `layer` as drawn, M (W, W) (words) or (N, N)."""
    _check_head(r, layer, head)
    labels, spans = units(r, words)
    A = r.A[layer, head]  # (N, N)
    return labels, (word_attention(A, spans) if words else A)  # (W, W) or (N, N)


def _mark_special(ax) -> None:
    """[CLS] and [SEP] tick labels in red: they are not words."""
    for label in (*ax.get_xticklabels(), *ax.get_yticklabels()):
        if label.get_text() in SPECIAL:
            label.set_color(SPECIAL_COLOUR)


def _fit(fig, n_labels: int, ncols: int = 1) -> None:
    """Shrink a figure to at most MAX_WIDTH x MAX_HEIGHT inches (never enlarge it), and size
    its tick labels and titles to the room each label then has (between 5 and 10 points)."""
    width, height = fig.get_size_inches()
    scale = min(1.0, MAX_WIDTH / width, MAX_HEIGHT / height)
    fig.set_size_inches(width * scale, height * scale)
    panel = width * scale / ncols  # inches across one panel, its labels and a margin
    points = float(np.clip(0.6 * 72 * panel / max(n_labels, 1), 5, 10))
    for ax in fig.axes:
        ax.tick_params(labelsize=points)
        ax.title.set_fontsize(min(points + 2, 11))
        ax.xaxis.label.set_fontsize(points + 1)
        ax.yaxis.label.set_fontsize(points + 1)


# ---------------------------------------------------------------------------- role scores


def parse_link(link) -> tuple[str, ...]:
    """A link as (src, dst) or (src, dst_a, dst_b): from a tuple, or a string "it -> animal"
    (or "it -> animal / street" for a minimal pair whose answer moves)."""
    example = "'it -> animal' (or 'it -> animal / street' for a minimal pair)"
    if isinstance(link, str):
        if "->" not in link:
            text = link.strip()
            if not text:
                hint = "it is empty"
            elif text[:1] in "([" and text[-1:] in ")]":
                hint = "a Python tuple typed as text is not read: write the words with an arrow"
            elif "," in text:
                hint = "the words are separated by '->', not by a comma"
            else:
                hint = "there is no arrow between the two words"
            raise ValueError(f"link {link!r}: expected 'from -> to' ({hint}), e.g. {example}")
        src, dst = (s.strip() for s in link.split("->", 1))
        parts = (src, *(d.strip() for d in dst.split("/")))
    elif isinstance(link, (tuple, list)):
        parts = tuple(link)
    else:
        raise TypeError(
            f"a link must be a str such as {example} or a tuple ('it', 'animal'); "
            f"got {type(link).__name__}"
        )
    if len(parts) not in (2, 3) or not all(isinstance(p, str) and p for p in parts):
        raise ValueError(
            f"link {link!r}: expected (from-word, to-word) or (from-word, to-word in a, "
            f"to-word in b), e.g. ('it', 'animal')"
        )
    return parts


def _link_margin(r: Run, A: Tensor, src: str, dst: str) -> Tensor:
    """`roles.pair_scores` on one sentence: the word weight from src on dst minus the
    largest on any other word, for every head of A (..., N, N) -> (...). > TIE: dst is
    strictly the top word, the test notebook 05 applies to each sentence of a pair."""
    marked = Marked(r.sentence, src, dst)
    pair = MinimalPair("your link", marked, marked, "one sentence")
    _, margin = pair_scores(A[..., None, :, :], [r.sentence], [r.offsets], [pair])
    return margin[0]  # (...)


def _scores(r: Run, A: Tensor, role) -> Tensor:
    """One role's score for every head of A (..., N, N) on the sentence of r: (...)."""
    A = A[..., None, :, :]  # (..., 1, N, N): a batch of one sentence
    if role == "previous token":
        return previous_token_score(A, r.attention_mask)
    if role == "next token":
        return next_token_score(A, r.attention_mask)
    if role == "[CLS]":
        return special_token_mass(A, r.attention_mask)[0]
    src, dst = parse_link(role)[:2]
    return _link_margin(r, A[..., 0, :, :], src, dst)


def _role_name(role) -> str:
    """The role as shown: a positional role as it is, a link as 'src -> dst'. A name that is
    neither gets an error listing the roles (notebook 05's link roles need words marked)."""
    if isinstance(role, str) and role in POSITIONAL_ROLES:
        return role
    if isinstance(role, str) and "->" not in role:
        from .sentences import ROLES

        hint = ""
        if role.strip().lower() in ROLES:
            hint = (
                f"; {role.strip().lower()!r} is a role of notebook 05's minimal pairs, which "
                "needs its two words marked on your sentence: write the link, e.g. 'it -> animal'"
            )
        raise ValueError(
            f"role {role!r} is not one of the roles top_heads scores: "
            f"{', '.join(map(repr, POSITIONAL_ROLES))}, or a link 'from -> to' between two "
            f"words of your sentence, e.g. 'it -> animal'{hint}"
        )
    src, *dst = parse_link(role)
    return f"{src} -> {' / '.join(dst)}"


def role_scores(r: Run, layer: int, head: int, link=None) -> dict[str, float]:
    """The role scores of one head on one sentence: previous token, next token and [CLS]
    (the weight a word puts there, averaged over the words) and, with link = (src, dst),
    the link margin (weight on dst minus the best other word; > 0: dst is the top word)."""
    _check_head(r, layer, head)
    A = r.A[layer, head]  # (N, N)
    out = {role: float(_scores(r, A, role)) for role in POSITIONAL_ROLES}
    if link is not None:
        src, dst = parse_link(link)[:2]
        out[f"{src} -> {dst}"] = float(_link_margin(r, A, src, dst))
    return out


def _habit(scores: dict[str, float]) -> str:
    """A title that says what to notice: the head's strongest positional habit."""
    role, value = max(((k, scores[k]) for k in POSITIONAL_ROLES), key=lambda kv: kv[1])
    what = {"previous token": "looks one token back", "next token": "looks one token ahead"}
    what["[CLS]"] = "parks on [CLS]"
    if value >= 0.5:
        return f"{what[role]} ({value:.2f} of its weight)"
    return f"no strong habit (at most {value:.2f} on the previous, next token or [CLS])"


def _short_habit(scores: dict[str, float]) -> str:
    """The same in a few characters, for the small panels of a layer: 'back 1.00', 'mixed'."""
    role, value = max(((k, scores[k]) for k in POSITIONAL_ROLES), key=lambda kv: kv[1])
    short = {"previous token": "back", "next token": "ahead", "[CLS]": "[CLS]"}[role]
    return f"{short} {value:.2f}" if value >= 0.5 else "mixed"


# ---------------------------------------------------------------------------- the three views


def show_heads(
    sentence: str,
    layer: int | None = None,
    head: int | None = None,
    words: bool = True,
    model: MiniLMEncoder | None = None,
):
    """Draw one head (layer and head), one layer's 12 heads (layer only) or all 72 (neither).

    words=True combines the pieces of a word (`roles.word_attention`, the
    rule notebook 05 scores roles with); [CLS] and [SEP] keep their own row and
    column, labelled in red. Returns the Figure.
    """
    r = sentence if isinstance(sentence, Run) else run(sentence, model)
    if head is not None and layer is None:
        raise ValueError(f"head = {head} needs a layer; got layer = None")
    _check_head(r, layer, head)
    colour = "weight (mean over a word's pieces)" if words else "weight"
    if head is not None:
        labels, M = pattern(r, layer, head, words)
        habit = _habit(role_scores(r, layer, head))
        size = 1.5 + 0.42 * max(len(labels), 4)
        fig, ax = plt.subplots(figsize=(size + 1.4, size), layout="constrained")
        plot_attention(
            M.numpy(), labels, ax=ax, title=f"{head_label(layer, head)}: {habit}", label=colour
        )
        _mark_special(ax)
        _fit(fig, len(labels))
        return fig
    layers = range(r.num_layers) if layer is None else [layer]
    heads = [(l, i) for l in layers for i in range(r.num_heads)]
    mats, labels = [], None
    for l, i in heads:
        labels, M = pattern(r, l, i, words)
        mats.append(M.numpy())
    if layer is not None:
        titles = [f"{head_label(l, i)}: {_short_habit(role_scores(r, l, i))}" for l, i in heads]
        fig = plot_heads(
            np.stack(mats),
            labels,
            titles=titles,
            ncols=4,
            label=colour,
            suptitle=f"Layer {layer}'s 12 heads on your sentence: 'back' / 'ahead' / '[CLS]' "
            "name a head's strongest habit (over 0.5 of its weight)",
        )
        for ax in fig.axes[: len(heads)]:
            _mark_special(ax)
        _fit(fig, len(labels), ncols=4)  # 4 x 3 panels: at most 14 x 11 inches
        return fig
    fig = plot_heads(
        np.stack(mats),
        titles=[head_label(l, i) for l, i in heads],
        ncols=r.num_heads,
        label=colour,
        suptitle="All 72 heads on your sentence: column 0 is [CLS]; look for diagonals",
    )
    fig.set_size_inches(MAX_WIDTH, 8.0)
    for ax in fig.axes[: len(heads)]:
        ax.set(xlabel="", ylabel="", xticks=[], yticks=[])
        ax.title.set_fontsize(8)
    return fig


@dataclass
class Comparison:
    """compare's result: the figure, the shared words, the difference (b - a) on them, and
    the head's role scores {role: (score in a, score in b)}."""

    label: str
    figure: object
    shared: list[str]
    difference: Tensor
    scores: dict[str, tuple[float, float]] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"{self.label}: role scores in sentence a / sentence b"]
        for role, (a, b) in self.scores.items():
            kind = "margin" if "->" in role else "weight"
            lines.append(f"  {role:<22} {a:6.2f} / {b:6.2f}  ({kind})")
        return "\n".join(lines)


def _shared(labels_a: list[str], labels_b: list[str]) -> tuple[list[int], list[int]]:
    """Indices of the units both sentences have: the k-th "the" of a matches the k-th of b."""
    seen: dict[str, int] = {}
    keys_b = []
    for lab in labels_b:
        key = lab.lower()
        keys_b.append((key, seen.get(key, 0)))
        seen[key] = seen.get(key, 0) + 1
    seen, ia, ib = {}, [], []
    for u, lab in enumerate(labels_a):
        key = (lab.lower(), seen.get(lab.lower(), 0))
        seen[lab.lower()] = key[1] + 1
        if key in keys_b:
            ia.append(u)
            ib.append(keys_b.index(key))
    return ia, ib


def compare(
    sentence_a: str,
    sentence_b: str,
    layer: int,
    head: int,
    link=None,
    model: MiniLMEncoder | None = None,
) -> Comparison:
    """One head on a minimal pair: both word patterns, and b - a on the words they share.

    link: optional (src, dst) or (src, dst in a, dst in b), e.g. ("it", "animal",
    "street"): adds the link margin in each sentence, the test notebook 05's
    minimal pairs apply (> 0: the head's top word from src is dst).
    """
    ra, rb = run(sentence_a, model), run(sentence_b, model)
    _check_head(ra, layer, head)
    labels_a, Ma = pattern(ra, layer, head)
    labels_b, Mb = pattern(rb, layer, head)
    ia, ib = _shared(labels_a, labels_b)
    diff = Mb[ib][:, ib] - Ma[ia][:, ia]  # (S, S): the words both sentences have
    shared = [labels_a[u] for u in ia]
    sa, sb = role_scores(ra, layer, head), role_scores(rb, layer, head)
    scores = {role: (sa[role], sb[role]) for role in POSITIONAL_ROLES}
    if link is not None:
        src, *dst = parse_link(link)
        dst_a, dst_b = dst[0], dst[-1]
        scores[f"{src} -> {'/'.join(dict.fromkeys(dst))}"] = (
            float(_link_margin(ra, ra.A[layer, head], src, dst_a)),
            float(_link_margin(rb, rb.A[layer, head], src, dst_b)),
        )
    label = head_label(layer, head)
    width = 0.42 * (len(labels_a) + len(labels_b) + len(shared)) + 6
    height = 1.8 + 0.42 * max(len(labels_a), len(labels_b), 4)
    fig, axes = plt.subplots(1, 3, figsize=(width, height), layout="constrained")
    for ax, labels, M, name in ((axes[0], labels_a, Ma, "a"), (axes[1], labels_b, Mb, "b")):
        plot_attention(
            M.numpy(),
            labels,
            ax=ax,
            annotate=False,
            title=f"{label}, sentence {name}",
            label="weight (mean over a word's pieces)",
        )
        _mark_special(ax)
    big = max(float(diff.abs().max()), 1e-3)
    plot_attention(
        diff.numpy(),
        shared,
        ax=axes[2],
        vmin=-big,
        vmax=big,
        cmap="RdBu_r",
        annotate=False,
        label="weight in b - weight in a",
        title="What changes: red gains weight in b, blue loses",
    )
    _mark_special(axes[2])
    _fit(fig, max(len(labels_a), len(labels_b)), ncols=3)
    return Comparison(label, fig, shared, diff, scores)


@dataclass
class Ranking:
    """top_heads' result: every head's score (layers, h), the null heads' scores, the role."""

    sentence: str
    role: str
    scores: Tensor
    nulls: dict[str, float]
    k: int = 5

    @property
    def best_null(self) -> tuple[str, float]:
        """The best null head, leaving out the one that is this role done perfectly."""
        others = {n: s for n, s in self.nulls.items() if n != SELF_NULL.get(self.role)}
        return max(others.items(), key=lambda kv: kv[1])

    def top(self, k: int | None = None) -> list[tuple[str, float]]:
        """The k best heads, (label, score), best first (ties: the lower layer and head)."""
        h = self.scores.shape[1]
        order = sorted(range(self.scores.numel()), key=lambda j: -float(self.scores.flatten()[j]))
        return [(head_label(j // h, j % h), float(self.scores.flatten()[j])) for j in order][
            : k or self.k
        ]

    def above_nulls(self) -> int:
        """How many heads score strictly above every null head."""
        return int((self.scores > self.best_null[1] + 1e-6).sum())

    def __str__(self) -> str:
        kind = "link margin" if "->" in self.role else "score"
        heads = ", ".join(f"{lab} {s:.2f}" for lab, s in self.top())
        nulls = ", ".join(f"{n} {s:.2f}" for n, s in self.nulls.items())
        perfect = SELF_NULL.get(self.role)
        beyond = f" but {perfect} (this role, done perfectly)" if perfect else ""
        return (
            f"{self.role} ({kind}) on {self.sentence!r}\n"
            f"  best heads: {heads}\n"
            f"  null heads: {nulls}\n"
            f"  {self.above_nulls()} of {self.scores.numel()} heads score above every null "
            f"head{beyond}"
        )

    def plot(self):
        """The (layers, h) table of scores as a heatmap; heads above every null boxed."""
        L, h = self.scores.shape
        null_name, null_score = self.best_null
        fig, ax = plt.subplots(figsize=(12, 4.6), layout="constrained")
        plot_attention(
            self.scores.numpy(),
            [f"L{l}" for l in range(L)],
            [f"H{i}" for i in range(h)],
            ax=ax,
            vmin=None,
            vmax=None,
            annotate=True,
            label=f"{self.role} score",
            title=f"{self.role}: the {self.above_nulls()} boxed heads beat the null heads "
            f"(best: {null_name}, {null_score:.2f})",
        )
        ax.set(xlabel="head", ylabel="layer")
        for l, i in zip(*np.nonzero((self.scores > null_score + 1e-6).numpy())):
            ax.add_patch(plt.Rectangle((i - 0.5, l - 0.5), 1, 1, fill=False, ec="red", lw=2))
        return fig


def top_heads(
    sentence: str, role="previous token", k: int = 5, model: MiniLMEncoder | None = None
) -> Ranking:
    """Rank the 72 heads for a role on one sentence, with notebook 05's null heads as baseline.

    sentence: a string (or a `Run`). The ranking's text lists the best k heads,
    every null head's score, and how many heads beat the best null head; for a
    positional role the null head that is the role itself (offset -1 for the
    previous token) is shown but left out of that count.

    role: "previous token", "next token", "[CLS]" (positional: the mean weight
    the words put there), or a link you mark on your sentence, "it -> animal"
    or ("it", "animal"): for each head the word weight from the first word on
    the second minus the largest on any other word (`roles.pair_scores`;
    > 0 means the second word is the head's top word).
    The null heads (`roles.null_heads`: uniform, offsets -2, -1, +1, +2,
    always-[CLS]) are scored the same way on the same sentence.
    """
    r = sentence if isinstance(sentence, Run) else run(sentence, model)
    name = _role_name(role)
    role = name if name in POSITIONAL_ROLES else parse_link(role)[:2]
    scores = _scores(r, r.A, role)  # (layers, h)
    nulls = _scores(r, null_heads(r.attention_mask)[:, 0], role)  # (nulls,)
    return Ranking(r.sentence, name, scores, dict(zip(NULL_NAMES, nulls.tolist())), k)


# ---------------------------------------------------------------------------- the widget


class HeadExplorer:
    """The explorer as an ipywidgets app: type a sentence (and, for a minimal pair, a second
    one), pick a layer, a head and a view; the figure below redraws with the functions
    above. `redraw()` is what every control calls; `last` holds what it drew."""

    def __init__(
        self, sentence: str = DEFAULT_SENTENCE, model: MiniLMEncoder | None = None, pair: str = ""
    ):
        import ipywidgets as w  # imported here: the library works without it

        for name, value in (("sentence", sentence), ("pair", pair)):
            if isinstance(value, (tuple, list)):
                raise TypeError(
                    f"explorer takes one sentence as {name}; got a {type(value).__name__} of "
                    f"{len(value)}: for a minimal pair, write explorer(sentence_a, "
                    "pair=sentence_b), or type the second sentence in the box 'minimal pair'"
                )
            if not isinstance(value, str):
                raise TypeError(f"{name} must be a str; got {type(value).__name__}")
        self.model = _default_model() if model is None else model
        L, h = len(self.model.layers), self.model.num_heads
        wide = {"description_width": "initial"}
        self.sentence = w.Text(
            value=sentence, description="sentence", continuous_update=False, style=wide
        )
        self.pair = w.Text(
            value=pair,
            description="minimal pair (optional)",
            placeholder="the same sentence with one word changed",
            continuous_update=False,
            style=wide,
        )
        self.view = w.ToggleButtons(options=VIEWS, value="one head", description="view")
        self.layer = w.Dropdown(options=list(range(L)), value=0, description="layer")
        self.head = w.Dropdown(options=list(range(h)), value=2, description="head")
        self.role = w.Dropdown(
            options=[*POSITIONAL_ROLES, "link"], value="previous token", description="role"
        )
        self.link = w.Text(
            value="",
            description="link",
            placeholder="it -> animal (or: it -> animal / street)",
            continuous_update=False,
        )
        self.words = w.Checkbox(value=True, description="combine word pieces")
        self.out = w.Output()
        self.last: dict = {}
        for box, name in (
            (self.sentence, "sentence"),
            (self.pair, "pair"),
            (self.view, "view"),
            (self.layer, "layer"),
            (self.head, "head"),
            (self.role, "role"),
            (self.link, "link"),
            (self.words, "words"),
            (self.out, "figure"),
        ):
            box.add_class(f"mha-explorer-{name}")  # for the browser test
            if box is not self.out:
                box.observe(self._changed, names="value")
        for box in (self.sentence, self.pair):
            box.layout.width = "90%"
        self.box = w.VBox(
            [
                self.sentence,
                self.pair,
                self.view,
                w.HBox([self.layer, self.head, self.words]),
                w.HBox([self.role, self.link]),
                self.out,
            ]
        )
        self.box.add_class("mha-explorer")
        self.redraw()

    def _repr_mimebundle_(self, **kwargs):
        return self.box._repr_mimebundle_(**kwargs)

    def _changed(self, change) -> None:
        self.redraw()

    def draw(self) -> dict:
        """Compute and draw the current view; returns what was drawn (no display)."""
        sentence, pair = self.sentence.value, self.pair.value.strip()
        layer, head, view = self.layer.value, self.head.value, self.view.value
        if view == "head ranking":
            role = self.role.value
            if role == "link":
                role = parse_link(self.link.value)  # the link box's own message if unreadable
            ranking = top_heads(sentence, role, model=self.model)
            return {
                "view": view,
                "text": str(ranking),
                "data": ranking.scores.numpy(),
                "figure": ranking.plot(),
            }
        if view == "one head" and pair:
            link = self.link.value.strip() or None
            c = compare(sentence, pair, layer, head, link=link, model=self.model)
            return {
                "view": "minimal pair",
                "text": str(c),
                "data": c.difference.numpy(),
                "figure": c.figure,
            }
        r = run(sentence, self.model)
        kwargs = {"one head": (layer, head), "a layer": (layer, None), "all heads": (None, None)}
        l, i = kwargs[view]
        fig = show_heads(r, l, i, words=self.words.value)
        data = r.A if l is None else r.A[l] if i is None else pattern(r, l, i, self.words.value)[1]
        return {"view": view, "text": "", "data": np.asarray(data), "figure": fig}

    def redraw(self) -> dict:
        """Redraw into the output area; a bad sentence or link shows its error instead.

        The output area's `outputs` are set directly (text, then the figure as a PNG), not
        captured with `with self.out:`. A capture sends what it prints through the front end:
        run by nbconvert, the front end (nbclient) then sends the widget's new state back to
        the kernel as a message, which can still be in the kernel when nbconvert shuts it
        down, so that the shutdown's interrupt lands inside it ("KeyboardInterrupt caught in
        kernel"). Set directly, the state goes one way only, in JupyterLab as well.
        """
        try:
            drawn = self.draw()
        except (ValueError, TypeError) as error:
            drawn = {"view": self.view.value, "text": f"✗ {error}", "data": None}
        outputs = []
        if drawn["text"]:
            outputs.append(
                {"output_type": "stream", "name": "stdout", "text": drawn["text"] + "\n"}
            )
        figure = drawn.pop("figure", None)
        if figure is not None:
            outputs.append(_png_output(figure))
            plt.close(figure)
            # each redraw frees a figure (up to 14 x 11 in): hand its memory back, or a learner
            # trying many sentences leaves it in the kernel (mha_lib.runtime)
            release_freed_memory()
        self.out.outputs = tuple(outputs)
        self.last = drawn
        return drawn


def _png_output(fig) -> dict:
    """A figure as a notebook display_data output (PNG), for an Output widget's outputs."""
    import base64
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=fig.dpi)
    width, height = fig.get_size_inches() * fig.dpi
    return {
        "output_type": "display_data",
        "data": {
            "image/png": base64.b64encode(buffer.getvalue()).decode("ascii"),
            "text/plain": f"<Figure size {width:.0f}x{height:.0f}>",
        },
        "metadata": {},
    }


def explorer(sentence: str = DEFAULT_SENTENCE, model: MiniLMEncoder | None = None, pair: str = ""):
    """The head explorer widget, ready to display (the last line of a cell). pair: a second
    sentence, one word changed, to open on the minimal-pair view of one head."""
    return HeadExplorer(sentence, model, pair)
