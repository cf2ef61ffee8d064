"""mha_lib.toy.training (notebook 06): the seeded training loop is deterministic and moves the
right way, and its snapshots change nothing."""

from __future__ import annotations

import pytest
import torch

from mha_lib.toy.models import Committee
from mha_lib.toy.tasks import relations_batch, repeated_block_batch
from mha_lib.toy.training import (
    committee_loss,
    copy_losses,
    snapshot_steps,
    subtask_accuracy,
    train,
    train_committee,
    train_induction,
)


def committee_model(h: int = 4) -> Committee:
    torch.manual_seed(0)
    return Committee(num_symbols=9, num_labels=3, seq_len=6, embed_dim=16, num_heads=h).eval()


def test_train_is_deterministic_and_restores_threads():
    before = torch.get_num_threads()
    curves = []
    for _ in range(2):
        model = committee_model()

        def make_batch(gen):
            return relations_batch(gen, 16, 3, 9)

        curves.append(train(model, make_batch, committee_loss, steps=5, seed=4)["loss"])
    assert curves[0] == curves[1]  # bit for bit
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="steps"):
        train(committee_model(), make_batch, committee_loss, steps=0)


def test_short_committee_training_moves_the_right_way():
    model, history = train_committee(num_heads=4, seed=0, steps=60)
    loss = history["loss"]
    assert loss[-1] < 0.8 * loss[0] and "snapshots" not in history
    acc = subtask_accuracy(model, relations_batch(torch.Generator().manual_seed(9), 200))
    assert acc.shape == (3,) and bool((acc > 1 / 16).all())


def test_short_induction_training_moves_the_right_way():
    # The notebook trains 1000 steps; 250 are enough to see the repeated half pull away.
    model, curves = train_induction(seed=0, steps=250)
    first, repeated = curves["first half"], curves["repeated half"]
    assert len(first) == len(repeated) == len(curves["loss"]) == 250
    assert sum(repeated[-20:]) / 20 < 0.75 * sum(first[-20:]) / 20
    tokens, T = repeated_block_batch(torch.Generator().manual_seed(1), 8, 32, 4, 12)
    ce, first_mask, repeated_mask = copy_losses(model, tokens, T)
    assert ce.shape == first_mask.shape == repeated_mask.shape == (8, 23)
    assert not bool((first_mask & repeated_mask).any())


def test_snapshots_are_taken_at_the_asked_steps_and_do_not_change_training():
    def make_batch(gen):
        return relations_batch(gen, 16, 3, 9)

    probe = relations_batch(torch.Generator().manual_seed(5), 1, 3, 9)[:2]

    def record(m):
        return m(*probe, need_weights=True)[1][0]  # (h, N, N)

    plain = train(committee_model(), make_batch, committee_loss, steps=6, seed=4)
    model = committee_model()
    weights_at_start = record(model.eval()).detach().clone()
    recorded = train(
        committee_model(),
        make_batch,
        committee_loss,
        steps=6,
        seed=4,
        record=record,
        record_steps=[6, 0, 3, 3],
    )
    assert recorded["loss"] == plain["loss"]  # recording leaves the trajectory alone
    snaps = recorded["snapshots"]
    assert sorted(snaps) == [0, 3, 6] and snaps[0].shape == (4, 6, 6)
    torch.testing.assert_close(snaps[0], weights_at_start)  # step 0 = before training
    assert not torch.equal(snaps[0], snaps[6])
    # the last snapshot is the trained model
    trained = committee_model()
    train(trained, make_batch, committee_loss, steps=6, seed=4)
    torch.testing.assert_close(snaps[6], record(trained).detach())
    with pytest.raises(ValueError, match="record_steps"):
        train(committee_model(), make_batch, committee_loss, steps=6, record_steps=[2])
    with pytest.raises(ValueError, match="record_steps"):
        train(
            committee_model(), make_batch, committee_loss, steps=6, record=record, record_steps=[7]
        )


def test_snapshot_steps():
    assert snapshot_steps(500, 25) == list(range(0, 501, 20))
    assert snapshot_steps(10, 3) == [0, 3, 7, 10]
    with pytest.raises(ValueError, match="count"):
        snapshot_steps(10, 0)


def test_the_notebook_trainings_record_the_probe():
    symbols, labels, _ = relations_batch(torch.Generator().manual_seed(1), 1)
    _, history = train_committee(4, seed=0, steps=4, probe=(symbols, labels), record_steps=[0, 4])
    assert sorted(history["snapshots"]) == [0, 4]
    assert history["snapshots"][4].shape == (4, 12, 12)
    tokens, _ = repeated_block_batch(torch.Generator().manual_seed(1), 1, 32, 4, 12)
    _, curves = train_induction(seed=0, steps=3, probe=tokens, record_steps=[1, 3])
    assert curves["snapshots"][3].shape == (2, 2, 24, 24)  # (layers, h, N, N)
    rows = curves["snapshots"][3].sum(-1)
    torch.testing.assert_close(rows, torch.ones_like(rows))
