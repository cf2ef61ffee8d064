"""mha_lib.testing.assert_close: what it accepts, what it rejects, what its message says, and
what importing it costs a kernel."""

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from mha_lib.testing import assert_close
from tests.notebook_source import NOTEBOOKS, SOLUTIONS, code_cells, dotted

ROOT = Path(__file__).resolve().parents[1]


def test_equal_and_close_pass():
    x = np.linspace(-1, 1, 12).reshape(3, 4)
    assert_close(x, x.copy())
    assert_close(x, x + 5e-8)  # within float64's default atol + rtol·|x|
    assert_close(torch.tensor(x), x)  # a tensor against an array
    assert_close(1.0, 1.0 + 1e-9)  # Python numbers
    assert_close([1, 2, 3], np.array([1, 2, 3]))
    assert_close(torch.ones(2, dtype=torch.float16), torch.ones(2) + 5e-4)  # float16's rtol 1e-3


def test_defaults_follow_the_less_precise_dtype():
    a = torch.ones(4, dtype=torch.float32)
    assert_close(a + 5e-6, a.double())  # float32's atol 1e-5 applies to the pair
    with pytest.raises(AssertionError):
        assert_close(a.double() + 5e-6, a.double())  # float64's does not allow it
    assert_close(torch.ones(3, dtype=torch.bfloat16), torch.full((3,), 1.01))


def test_the_tolerances_are_those_of_torch_testing():
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        x = torch.randn(200, generator=g).to(dtype)
        for scale in (1e-8, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2):
            y = (x.double() + scale * torch.randn(200, generator=g, dtype=torch.float64)).to(dtype)
            try:
                torch.testing.assert_close(y, x)
                theirs = True
            except AssertionError:
                theirs = False
            try:
                assert_close(y, x)
                ours = True
            except AssertionError:
                ours = False
            assert ours == theirs, (dtype, scale)


def test_one_tolerance_given_keeps_the_others_default():
    assert_close(np.array([1.0]), np.array([1.0 + 1e-3]), rtol=2e-3)
    with pytest.raises(AssertionError, match=r"atol = 1e-07, rtol = 0\.0001"):
        assert_close(np.array([1.0]), np.array([1.0 + 1e-3]), rtol=1e-4)


def test_integers_and_booleans_are_exact():
    assert_close(torch.tensor([1, 2]), np.array([1, 2]))
    assert_close(np.array([True, False]), np.array([True, False]))
    with pytest.raises(AssertionError, match="1 of 2 elements"):
        assert_close(np.array([True, False]), np.array([True, True]))
    with pytest.raises(AssertionError):
        assert_close(torch.tensor([1, 2]), torch.tensor([1, 3]))


def test_exact_equality_on_request():
    x = torch.randn(5, generator=torch.Generator().manual_seed(1))
    assert_close(x, x.clone(), rtol=0, atol=0)
    with pytest.raises(AssertionError):
        assert_close(x, x + 1e-7, rtol=0, atol=0)


def test_the_message_names_the_largest_difference_and_where():
    expected = np.zeros((2, 3))
    actual = expected.copy()
    actual[1, 2] = 0.5
    actual[0, 0] = 0.1
    with pytest.raises(AssertionError) as info:
        assert_close(actual, expected, atol=1e-3, msg="scores")
    text = str(info.value)
    assert text.startswith("scores: not close: 2 of 6 elements (33.3 %)")
    assert "Largest absolute difference: 0.5 at index (1, 2)" in text
    assert "actual 0.5, expected 0" in text


def test_tuples_of_arrays_are_compared_pair_by_pair():
    o, lse = torch.ones(2, 3), torch.zeros(2)
    assert_close((o, lse), (o.clone(), lse.clone()))
    with pytest.raises(AssertionError, match=r"^element 1: not close: 1 of 2"):
        assert_close((o, lse), (o, torch.tensor([0.0, 1.0])))
    with pytest.raises(AssertionError, match=r"out\[0\]: actual has shape \(2, 3\)"):
        assert_close((o, lse), (o.T, lse), msg="out")
    with pytest.raises(AssertionError, match="2 arrays; expected 1"):
        assert_close((o, lse), [o])


def test_shapes_must_match():
    with pytest.raises(AssertionError, match=r"shape \(3, 4\); expected shape \(4, 3\)"):
        assert_close(np.zeros((3, 4)), np.zeros((4, 3)))
    with pytest.raises(AssertionError, match="nothing is broadcast"):
        assert_close(np.zeros((1, 3)), np.zeros(3))
    with pytest.raises(AssertionError, match="nothing is broadcast"):
        assert_close(0.0, np.zeros(3))  # the array must be the actual one


def test_a_single_expected_number_applies_to_every_element():
    assert_close(np.full((2, 3), 0.5), 0.5)
    assert_close(torch.ones(4).softmax(0).sum(), 1.0)
    with pytest.raises(AssertionError, match=r"(?s)1 of 3 elements.*at index \(2,\)"):
        assert_close(np.array([1.0, 1.0, 1.1]), 1.0)


def test_nan_and_inf():
    inf = float("inf")
    assert_close(np.array([inf, -inf, 1.0]), np.array([inf, -inf, 1.0]))
    with pytest.raises(AssertionError, match="actual inf, expected -inf"):
        assert_close(np.array([inf]), np.array([-inf]))
    with pytest.raises(AssertionError, match="actual inf, expected 1"):
        assert_close(np.array([inf]), np.array([1.0]), atol=1e9)
    with pytest.raises(AssertionError, match="NaN in only one of them at index \\(1,\\)"):
        assert_close(np.array([0.0, np.nan]), np.array([0.0, 1.0]))
    with pytest.raises(AssertionError, match="equal_nan=True"):
        assert_close(np.array([np.nan]), np.array([np.nan]))
    assert_close(np.array([np.nan]), np.array([np.nan]), equal_nan=True)


def test_complex_and_conjugate_views():
    z = torch.randn(4, dtype=torch.complex64, generator=torch.Generator().manual_seed(2))
    assert_close(z.conj(), z.resolve_conj().conj().resolve_conj())
    with pytest.raises(AssertionError):
        assert_close(z, z.conj())


def test_tensors_that_need_grad_are_compared():
    w = torch.ones(3, requires_grad=True)
    assert_close(w * 2, torch.full((3,), 2.0))


def test_importing_it_loads_neither_torch_nor_sympy():
    code = (
        "import sys, mha_lib.testing; "
        "print(sorted(m for m in ('torch', 'sympy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_torch_testing_still_costs_what_the_module_docstring_says():
    """If torch.testing stops importing torch.distributed.tensor and sympy, assert_close's reason
    to exist beside it weakens: this test then fails, and the docstring needs a new look."""
    code = (
        "import sys, torch; x = torch.ones(3); before = set(sys.modules); "
        "torch.testing.assert_close(x, x); new = set(sys.modules) - before; "
        "print('sympy' in new, 'torch.distributed.tensor' in new)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]


# ------------------------------------------------------------------ one way in every notebook

OTHER_CHECKS = {
    "np.testing.assert_allclose",
    "np.testing.assert_array_equal",
    "np.testing.assert_array_almost_equal",
    "np.testing.assert_almost_equal",
    "np.testing.assert_equal",
    "torch.testing.assert_close",
    "torch.testing.assert_allclose",
}
# a bare `assert f(a, b)` with one of these fails with an empty AssertionError
SILENT_IN_ASSERT = {
    "torch.allclose",
    "np.allclose",
    "torch.equal",
    "np.array_equal",
    "np.array_equiv",
    "torch.isclose",
    "np.isclose",
    "math.isclose",
}


def other_equality_checks(source: str) -> list[str]:
    """The equality checks in `source` other than mha_lib.testing.assert_close (read with ast:
    comments and strings do not count; `assert not torch.allclose(...)`, a claim that two
    things differ, is allowed)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and dotted(node.func) in OTHER_CHECKS:
            found.append(dotted(node.func))
        elif isinstance(node, ast.Assert):
            terms = node.test.values if isinstance(node.test, ast.BoolOp) else [node.test]
            for term in terms:
                if isinstance(term, ast.Call) and dotted(term.func) in SILENT_IN_ASSERT:
                    found.append(f"assert {dotted(term.func)}(...)")
                elif isinstance(term, ast.Call) and dotted(term.func) in ("all", "any"):
                    inner = term.args[0] if term.args else None
                    if isinstance(inner, ast.GeneratorExp | ast.ListComp) and isinstance(
                        inner.elt, ast.Call
                    ):
                        if dotted(inner.elt.func) in SILENT_IN_ASSERT:
                            found.append(f"assert {dotted(term.func)}({dotted(inner.elt.func)}")
    return found


def test_the_finder_flags_the_other_forms_and_only_those():
    flagged = [
        "np.testing.assert_allclose(a, b)",
        "torch.testing.assert_close(a, b, rtol=0, atol=0)",
        "assert torch.allclose(a, b)",
        "assert np.allclose(a, b), 'differ'",
        "assert torch.equal(a, b) and x > 0",
        "assert all(torch.equal(p, q) for p, q in pairs)",
        "assert math.isclose(x, 0.5)",
    ]
    for code in flagged:
        assert len(other_equality_checks(code)) == 1, code
    allowed = [
        "assert_close(a, b)",
        "assert not torch.allclose(a, b)",
        "same = torch.equal(a, b)",
        "# np.testing.assert_allclose(a, b)",
        "print('assert torch.allclose(a, b)')",
        "assert (a == b).all()",
    ]
    for code in allowed:
        assert other_equality_checks(code) == [], code


@pytest.mark.parametrize("path", NOTEBOOKS + SOLUTIONS, ids=lambda p: p.name)
def test_every_notebook_checks_equality_one_way(path):
    for index, source in code_cells(path):
        others = other_equality_checks(source)
        assert not others, (
            f"{path.parent.name}/{path.name} cell {index} checks equality with "
            f"{', '.join(others)}: use mha_lib.testing.assert_close, whose failure names the "
            "largest difference (tests/README.md)"
        )
