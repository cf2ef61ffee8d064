"""mha_lib.extrapolation.tasks (notebook 10): the two tasks that need positions."""

import pytest
import torch

from mha_lib.extrapolation.tasks import A_AT, K_BACK, batch


def test_tasks_ask_for_the_token_k_back_and_the_token_at_position_A():
    g = torch.Generator().manual_seed(0)
    x, y = batch("copy_back", g, 4, 20, 16)
    assert (y[:, :K_BACK] == -1).all() and torch.equal(y[:, K_BACK:], x[:, :-K_BACK])
    x, y = batch("token_at", g, 4, 20, 16)
    assert (y[:, :A_AT] == -1).all() and (y[:, A_AT:] == x[:, A_AT : A_AT + 1]).all()
    with pytest.raises(ValueError, match="task"):
        batch("reverse", g, 1, 4, 16)


def test_a_start_token_goes_first_and_leaves_the_task_unchanged():
    x0, y0 = batch("token_at", torch.Generator().manual_seed(3), 4, 20, 16)
    x, y = batch("token_at", torch.Generator().manual_seed(3), 4, 20, 16, start=True)
    assert x.shape == y.shape == (4, 21)
    assert (x[:, 0] == 16).all() and (y[:, 0] == -1).all()
    assert torch.equal(x[:, 1:], x0) and torch.equal(y[:, 1:], y0)
