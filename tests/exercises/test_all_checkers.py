"""Every checker of every notebook prints exactly one line, returns a bool and never raises,
whatever the function under test returns or does."""

import ast
import importlib
import importlib.util
import json
import pkgutil
from pathlib import Path

import numpy as np
import pytest
import torch

import mha_lib.exercises

# nb09 needs triton (Linux x86_64 only): without it, its checkers are left out here
NEEDS_TRITON = {"nb09"}
HAS_TRITON = importlib.util.find_spec("triton") is not None
MODULES = [
    importlib.import_module(f"mha_lib.exercises.{m.name}")
    for m in pkgutil.iter_modules(mha_lib.exercises.__path__)
    if m.name.startswith("nb") and (HAS_TRITON or m.name not in NEEDS_TRITON)
]
CHECKERS = [getattr(mod, name) for mod in MODULES for name in mod.__all__]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_every_notebook_has_at_least_two_checked_exercises(module):
    checks = [name for name in module.__all__ if name.startswith("check_")]
    assert len(checks) >= 2, module.__name__


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


def test_no_two_notebooks_export_the_same_checker_name():
    """`mha_lib.exercises` re-exports every notebook's checkers: a repeated name would hide one."""
    names = [name for mod in MODULES for name in mod.__all__]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    # every checker is importable from mha_lib.exercises, except those of the modules that
    # import torch (nb09: and triton) as they load (imported explicitly by their notebooks)
    explicit = [
        mod for mod in MODULES if mod.__name__.rsplit(".", 1)[1] in ("nb04", "nb08", "nb09", "nb10")
    ]
    assert len(explicit) == 3 + HAS_TRITON
    assert set(names) - {n for mod in explicit for n in mod.__all__} <= set(
        mha_lib.exercises.__all__
    )


NOTEBOOKS = sorted(
    p
    for folder in ("notebooks", "solutions")
    for p in (Path(__file__).resolve().parents[2] / folder).glob("[0-9][0-9]*_*.ipynb")
)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_checker_cell_echoes_its_verdict(path):
    """A cell ending in a bare `check_...(...)` makes Jupyter echo True or False under the ✓ or ✗
    line: every checker call assigns its verdict (`passed = check_...(...)`)."""
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        tree = ast.parse("".join(cell["source"]))
        last = tree.body[-1] if tree.body else None
        if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call):
            func = last.value.func
            name = getattr(func, "id", getattr(func, "attr", ""))
            assert not name.startswith("check"), f"{path.name}: {''.join(cell['source'])[:80]}"
        if "passed = check_" in "".join(cell["source"]):
            assert not any(o["output_type"] == "execute_result" for o in cell["outputs"])
