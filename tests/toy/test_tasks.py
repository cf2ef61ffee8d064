"""Tests of `mha_lib.toy.tasks`: shapes, the relations, the repeated block, seeding."""

from __future__ import annotations

import pytest
import torch

from mha_lib.toy.tasks import (
    IGNORE,
    relation_positions,
    relations_batch,
    repeated_block_batch,
)


def test_relations_batch_shapes_and_targets():
    symbols, labels, targets = relations_batch(torch.Generator().manual_seed(0), 5, 4, 9)
    assert symbols.shape == labels.shape == (5, 8) and targets.shape == (5, 8, 3)
    assert int(symbols.min()) >= 0 and int(symbols.max()) < 9
    for b in range(5):
        assert sorted(labels[b].tolist()) == [0, 0, 1, 1, 2, 2, 3, 3]  # every label twice
        for i in range(8):
            assert targets[b, i, 0] == (symbols[b, i - 1] if i > 0 else IGNORE)
            assert targets[b, i, 1] == (symbols[b, i + 1] if i < 7 else IGNORE)
            (partner,) = [j for j in range(8) if j != i and labels[b, j] == labels[b, i]]
            assert targets[b, i, 2] == symbols[b, partner]


def test_relation_positions_rejects_labels_not_in_pairs():
    with pytest.raises(ValueError, match="exactly twice"):
        relation_positions(torch.tensor([[0, 0, 0, 1]]))
    with pytest.raises(ValueError, match=r"expected \(B, N\)"):
        relation_positions(torch.tensor([0, 0, 1, 1]))


def test_repeated_block_batch_repeats_the_block():
    tokens, T = repeated_block_batch(torch.Generator().manual_seed(1), 50, 7, 3, 6)
    assert tokens.shape == (50, 12) and T.shape == (50,)
    assert int(T.min()) >= 3 and int(T.max()) <= 6 and len(set(T.tolist())) > 1
    assert int(tokens.min()) >= 0 and int(tokens.max()) < 7
    for b in range(50):
        t = int(T[b])
        assert torch.equal(tokens[b, t : 2 * t], tokens[b, :t])


def test_generators_are_seeded():
    a = relations_batch(torch.Generator().manual_seed(3), 4)
    b = relations_batch(torch.Generator().manual_seed(3), 4)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    c = repeated_block_batch(torch.Generator().manual_seed(3), 4, 10, 2, 5)
    d = repeated_block_batch(torch.Generator().manual_seed(3), 4, 10, 2, 5)
    assert all(torch.equal(x, y) for x, y in zip(c, d))


def test_bad_arguments():
    gen = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="max_len"):
        repeated_block_batch(gen, 2, 10, 5, 4)
    with pytest.raises(TypeError, match="B must be an int"):
        relations_batch(gen, 2.0)
