"""The checkers of notebook 00: a catalogue of wrong answers, each rejected with a message
that names the mistake, and several correct forms, each accepted."""

from pathlib import Path

import numpy as np
import pytest

from mha_lib.exercises import check_parameter_count, check_shapes


def verdict(checker, fn, capsys):
    """Run a checker; return (passed, the one line it printed)."""
    passed = checker(fn)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1, lines
    return passed, lines[0]


# ---------------------------------------------------------------------------- shapes


def shapes(C, h, d_k, d_v):
    return {
        "X": ("N", C),
        "W_Q^h": (C, d_k),
        "W_K^h": (C, d_k),
        "W_V^h": (C, d_v),
        "W_O": (h * d_v, C),
    }


def shapes_with(**changes):
    """The right shapes with some entries replaced by fn(C, h, d_k, d_v)."""
    return lambda C, h, d_k, d_v: (
        shapes(C, h, d_k, d_v) | {key: f(C, h, d_k, d_v) for key, f in changes.items()}
    )


def shapes_of_arrays(C, h, d_k, d_v):
    """Lists, and numpy ints read off real arrays."""
    W_o = np.zeros((h * d_v, C))
    return {
        "X": ["N", np.int64(C)],
        "W_Q^h": list(np.zeros((C, d_k)).shape),
        "W_K^h": np.zeros((C, d_k)).shape,
        "W_V^h": np.zeros((C, d_v)).shape,
        "W_O": W_o.shape,
    }


SHAPES_RIGHT = [shapes, shapes_of_arrays, shapes_with(note=lambda *a: "extra keys are fine")]

SHAPES_WRONG = [
    (shapes_with(W_O=lambda C, h, d_k, d_v: (C, h * d_v)), "W_O is transposed"),
    (shapes_with(**{"W_Q^h": lambda C, h, d_k, d_v: (d_k, C)}), "W_Q^h is transposed"),
    (shapes_with(W_O=lambda C, h, d_k, d_v: (d_v, C)), "has h*d_v rows"),
    (shapes_with(W_O=lambda C, h, d_k, d_v: (h * d_k, C)), "h*d_v, not h*d_k"),
    (shapes_with(**{"W_V^h": lambda C, h, d_k, d_v: (C, d_k)}), "width is d_v, not d_k"),
    (shapes_with(X=lambda C, h, d_k, d_v: (C, "N")), "X is transposed"),
    (shapes_with(X=lambda C, h, d_k, d_v: (None, C)), 'use the string "N"'),
    (shapes_with(**{"W_K^h": lambda C, h, d_k, d_v: (C, h * d_k)}), "ONE head's matrix"),
    (
        lambda C, h, d_k, d_v: shapes(C, h, C // h, C // h),
        "assumes d_k = d_v = C / h",
    ),
    (lambda C, h, d_k, d_v: shapes(512, 8, 64, 64), "same shapes for every C"),
    (
        lambda C, h, d_k, d_v: {k: v for k, v in shapes(C, h, d_k, d_v).items() if k != "W_O"},
        "no key 'W_O'",
    ),
    (shapes_with(W_O=lambda C, h, d_k, d_v: h * d_v * C), "must be a shape"),
    (lambda C, h, d_k, d_v: list(shapes(C, h, d_k, d_v).values()), "expected a dict"),
    # shapes written as text or as symbols: once read as "the same shapes for every C"
    (
        lambda C, h, d_k, d_v: {
            "X": "(N, C)",
            "W_Q^h": "(C, d_k)",
            "W_K^h": "(C, d_k)",
            "W_V^h": "(C, d_v)",
            "W_O": "(h*d_v, C)",
        },
        "is given as the text '(N, C)'",
    ),
    (
        lambda C, h, d_k, d_v: {
            "X": ("N", "C"),
            "W_Q^h": ("C", "d_k"),
            "W_K^h": ("C", "d_k"),
            "W_V^h": ("C", "d_v"),
            "W_O": ("h*d_v", "C"),
        },
        "X has the symbol 'C' as a string",
    ),
    (
        shapes_with(**{"W_V^h": lambda C, h, d_k, d_v: f"({C}, {d_v})"}),
        "W_V^h is given as the text",
    ),
    (shapes_with(W_O=lambda C, h, d_k, d_v: (C, C)), "(C, C) holds only when h*d_v = C"),
    (shapes_with(**{"W_Q^h": lambda C, h, d_k, d_v: (C, C)}), "not to C"),
    (
        lambda C, h, d_k, d_v: {k.replace("^h", ""): v for k, v in shapes(C, h, d_k, d_v).items()},
        "no key 'W_Q^h' but has 'W_Q'",
    ),
    (lambda C, h, d_k, d_v: None, "not implemented"),
]


@pytest.mark.parametrize("fn", SHAPES_RIGHT)
def test_check_shapes_accepts(fn, capsys):
    assert verdict(check_shapes, fn, capsys) == (True, "✓ shapes: correct")


@pytest.mark.parametrize(("fn", "words"), SHAPES_WRONG)
def test_check_shapes_names_the_mistake(fn, words, capsys):
    passed, line = verdict(check_shapes, fn, capsys)
    assert not passed and line.startswith("✗ shapes: ") and words in line, line


# ---------------------------------------------------------------------------- parameter count


def count(C, h, d_k, d_v):
    return h * (2 * C * d_k + C * d_v) + h * d_v * C


def count_by_arrays(C, h, d_k, d_v):
    """Counting the entries of real arrays: a numpy int."""
    weights = [np.zeros((C, h * d_k)), np.zeros((C, h * d_k)), np.zeros((C, h * d_v))]
    return sum(W.size for W in weights) + np.zeros((h * d_v, C)).size


COUNT_RIGHT = [
    count,
    count_by_arrays,
    lambda C, h, d_k, d_v: float(count(C, h, d_k, d_v)),
    lambda C, h, d_k, d_v: np.float32(count(C, h, d_k, d_v)),
]

COUNT_WRONG = [
    (lambda C, h, d_k, d_v: 2 * C * d_k + C * d_v + h * d_v * C, "multiply those by h"),
    (lambda C, h, d_k, d_v: h * (2 * C * d_k + C * d_v), "output projection"),
    (lambda C, h, d_k, d_v: h * (2 * C * d_k + C * d_v) + d_v * C, "not d_v"),
    (lambda C, h, d_k, d_v: 3 * C * h * d_k + h * d_v * C, "mixes up d_k and d_v"),
    (lambda C, h, d_k, d_v: h * (C * d_k + C * d_v) + h * d_v * C, "only one of W_Q^h"),
    (lambda C, h, d_k, d_v: 4 * C * C, "4C² holds only when"),
    (lambda C, h, d_k, d_v: count(C, h, d_k, d_v) + h * (2 * d_k + d_v) + C, "no biases"),
    (lambda C, h, d_k, d_v: 1048576, "same number for every"),
    (lambda C, h, d_k, d_v: count(C, h, d_k, d_v) + 1, "expected"),
    (lambda C, h, d_k, d_v: str(count(C, h, d_k, d_v)), "expected a number"),
    (lambda C, h, d_k, d_v: 1 / 0, "ZeroDivisionError"),
    (lambda C, h, d_k, d_v: count(C, h, d_k, d_v) - h * d_v * C + C * C, "not (C, C)"),
    (lambda C, h, d_k, d_v: 4 * C * h * d_k, "it uses d_k for every matrix"),
    (lambda C, h, d_k, d_v: h * (2 * C * d_k + C * d_v + h * d_v * C), "count its h*d_v*C"),
    (lambda C, h, d_k, d_v: (h * 2 * C * d_k, h * C * d_v, h * d_v * C), "add them up"),
    (lambda C, h, d_k, d_v: None, "not implemented"),
]


@pytest.mark.parametrize("fn", COUNT_RIGHT)
def test_check_parameter_count_accepts(fn, capsys):
    assert verdict(check_parameter_count, fn, capsys) == (True, "✓ parameter count: correct")


@pytest.mark.parametrize(("fn", "words"), COUNT_WRONG)
def test_check_parameter_count_names_the_mistake(fn, words, capsys):
    passed, line = verdict(check_parameter_count, fn, capsys)
    assert not passed and line.startswith("✗ parameter count: ") and words in line, line


def test_catalogues_are_complete():
    assert len(SHAPES_WRONG) >= 6 and len(SHAPES_RIGHT) >= 2
    assert len(COUNT_WRONG) >= 6 and len(COUNT_RIGHT) >= 2


# ---------------------------------------------------------------------------- the notebook

ROOT = Path(__file__).resolve().parents[2]
