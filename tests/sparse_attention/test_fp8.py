"""`mha_lib.sparse_attention.fp8`: the Hadamard rotation, FP8 e4m3 rounding and the top-k
comparison notebook 18 measures with."""

import pytest
import torch

from mha_lib.sparse_attention.fp8 import E4M3_MAX, e4m3, hadamard, topk_changes
from mha_lib.testing import assert_close


@pytest.mark.parametrize("D", [1, 2, 8, 128])
def test_hadamard_is_orthogonal_with_entries_of_one_size(D):
    H = hadamard(D)  # (D, D)
    assert_close(H @ H.T, torch.eye(D, dtype=torch.float64), atol=1e-12, rtol=0)
    assert_close(H.abs() * D**0.5, torch.ones(D, D, dtype=torch.float64), atol=1e-12, rtol=0)


def test_hadamard_keeps_every_dot_product_and_refuses_other_sizes():
    gen = torch.Generator().manual_seed(0)
    q, k = (
        torch.randn(5, 16, generator=gen, dtype=torch.float64),
        torch.randn(7, 16, generator=gen, dtype=torch.float64),
    )
    H = hadamard(16)
    assert_close((q @ H) @ (k @ H).T, q @ k.T, atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match=r"D = 12; .*power of 2"):
        hadamard(12)


def test_e4m3_keeps_what_it_can_hold_and_rounds_the_rest_to_its_three_mantissa_bits():
    held = torch.tensor([[448.0, -1.5, 0.25, 0.0, 3.5, -208.0]])  # e4m3 numbers, max already 448
    assert torch.equal(e4m3(held), held)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(64, 32, generator=gen, dtype=torch.float64) * torch.logspace(-3, 3, 64)[:, None]
    r = e4m3(x)
    top = x.abs().amax(-1, keepdim=True)
    big = x.abs() > top / 64  # well inside e4m3's normal range after the row's scale
    assert ((r - x).abs() <= 2**-4 * x.abs() + 1e-300)[big].all()  # half an ulp of 3 bits
    assert not torch.equal(r, x)
    assert torch.equal(e4m3(torch.zeros(2, 3)), torch.zeros(2, 3))
    assert e4m3(x.float()).dtype == torch.float32
    assert E4M3_MAX == torch.finfo(torch.float8_e4m3fn).max


def test_e4m3_scales_each_row_by_a_power_of_two():
    x = torch.tensor([[1.0, 3.0], [1000.0, 3000.0]], dtype=torch.float64)
    r = e4m3(x)
    assert_close(
        r[1] / r[0], torch.tensor([1000.0, 1000.0], dtype=torch.float64), rtol=0.07, atol=0
    )
    with pytest.raises(ValueError, match="inf or NaN"):
        e4m3(torch.tensor([1.0, float("inf")]))
    with pytest.raises(ValueError, match="expected a float tensor"):
        e4m3(torch.tensor([1, 2]))


def _scores(rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_topk_changes_counts_a_swap_and_its_rank():
    inf = float("-inf")
    ref = _scores([[5.0, inf, inf, inf, inf], [5.0, 4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0, 5.0]])
    other = _scores(
        [[0.0, inf, inf, inf, inf], [5.0, 4.0, 0.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0, 5.0]]
    )
    got = topk_changes(ref, other, k=3)  # row 0 sees one key: not compared
    assert got == {"queries": 2, "changed": 1, "overlap": 1 - 1 / 6, "worst rank": 3}
    assert topk_changes(ref, ref, 3) == {
        "queries": 2,
        "changed": 0,
        "overlap": 1.0,
        "worst rank": 2,
    }


def test_topk_changes_counts_no_swap_between_tied_keys():
    ref = _scores([[3.0, 1.0, 1.0, 0.0]])  # keys 1 and 2 tie for the second place
    other = _scores([[3.0, 0.5, 2.0, 0.0]])  # takes key 2 where ref's topk may take key 1
    assert topk_changes(ref, other, k=2)["changed"] == 0


def test_topk_changes_refuses_what_it_cannot_compare():
    a = _scores([[1.0, 2.0]])
    with pytest.raises(ValueError, match="same shape"):
        topk_changes(a, _scores([[1.0, 2.0, 3.0]]), 1)
    with pytest.raises(ValueError, match="same keys"):
        topk_changes(a, _scores([[1.0, float("-inf")]]), 1)
    with pytest.raises(ValueError, match="k"):
        topk_changes(a, a, 0)
