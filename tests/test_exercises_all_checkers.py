"""Every checker of notebooks 00-04 prints exactly one line, returns a bool and never raises,
whatever the function under test returns or does; and each one is fast."""

import time

import numpy as np
import pytest
import torch

import mha_lib.exercises as ex
from mha_lib.exercises import nb04

CHECKERS = [getattr(ex, name) for name in ex.__all__] + [
    getattr(nb04, name) for name in nb04.__all__
]


def test_there_are_fourteen_checkers():
    assert len(CHECKERS) == 14


class Weird:
    """An object that refuses to be compared or converted."""

    def __eq__(self, other):
        raise RuntimeError("no comparisons")

    def __array__(self, *args, **kwargs):
        raise RuntimeError("no arrays")

    def __iter__(self):
        raise RuntimeError("no iteration")

    __hash__ = object.__hash__


STRANGE_ANSWERS = [
    object(),
    Weird(),
    (Weird(), Weird()),
    "text",
    {"a": 1},
    [[1, 2], [3]],  # ragged
    np.array(["a", "b"]),
    np.full((3, 3), np.nan),
    torch.zeros(2, 2, dtype=torch.complex64),
    (i for i in range(3)),
    float("inf"),
    (np.zeros(3), np.zeros(3), np.zeros(3)),
    [torch.zeros(1), None],
]


@pytest.mark.parametrize("checker", CHECKERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("answer", STRANGE_ANSWERS, ids=lambda a: type(a).__name__)
def test_checkers_never_raise(checker, answer, capsys):
    passed = checker(lambda *args: answer)
    lines = capsys.readouterr().out.splitlines()
    assert passed is False and len(lines) == 1 and lines[0].startswith("✗ "), lines


@pytest.mark.parametrize("checker", CHECKERS, ids=lambda c: c.__name__)
def test_checkers_report_a_crash_of_the_function(checker, capsys):
    def crash(*args):
        raise KeyError("boom")

    assert checker(crash) is False
    assert "raised KeyError: 'boom'" in capsys.readouterr().out


@pytest.mark.parametrize("checker", CHECKERS, ids=lambda c: c.__name__)
def test_checkers_are_fast(checker, capsys):
    """All cases of a checker with a plausible wrong answer run in well under a second."""
    start = time.perf_counter()
    checker(lambda *args: np.zeros((3, 3)))
    assert time.perf_counter() - start < 0.5
    capsys.readouterr()
