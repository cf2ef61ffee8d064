"""mha_lib.models.spec: a weight's split checked by name, the option that brings it (negated
too), a table's norms marked."""

import pytest

from mha_lib.models.spec import SPLITS, Weight, weights
from mha_lib.nn.decoder import DecoderConfig


def test_a_weight_row_knows_when_it_applies_and_refuses_an_unknown_split():
    tied = DecoderConfig.of_layer(hidden_size=8, num_heads=2)
    head = Weight(
        "lm_head.weight", "output.weight", "lm_head.weight", "not_split", "not tie_embeddings"
    )
    assert not head.applies(tied)
    from dataclasses import replace

    assert head.applies(replace(tied, tie_embeddings=False))
    assert Weight("a", None, None, "whole").applies(tied)
    with pytest.raises(ValueError, match=r"split = 'rows'; expected one of"):
        Weight("a", None, None, "rows")
    assert "heads_in" in SPLITS and len(SPLITS) == 9


def test_a_table_marks_its_norms_and_its_option():
    rows = weights(
        ("n.weight", "n", "n", "whole", "norm"), ("w", "w", "w", "heads"), when="qk_norm"
    )
    assert [w.norm for w in rows] == [True, False] and {w.when for w in rows} == {"qk_norm"}
