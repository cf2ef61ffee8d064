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
