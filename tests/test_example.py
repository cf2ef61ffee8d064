"""mha_lib.example: the running example, as every notebook of the core series reads it."""

import numpy as np

from mha_lib.example import FEATURES, TOKENS, running_example


def test_shapes_and_a_fresh_copy_each_time():
    tokens, X = running_example()
    assert len(tokens) == 11 and X.shape == (len(tokens), len(FEATURES)) == (11, 6)
    assert X.dtype == np.float64
    X[0, 0] = 99.0
    tokens.append("extra")
    again_tokens, again = running_example()
    assert again[0, 0] == 0.0 and again_tokens == TOKENS


def test_the_features_a_reader_can_check_by_eye():
    tokens, X = running_example()
    row = dict(zip(tokens, X))
    thing, alive = FEATURES.index("thing"), FEATURES.index("alive")
    # "it" shares the features of "animal" that a coreference head would need to link them
    assert row["it"][thing] == row["animal"][thing] == 1.0
    assert row["it"][alive] == row["animal"][alive] == 1.0
    assert row["street"][alive] == 0.0  # and not the street's: a street is not alive
    assert (X >= 0).all() and (X.max(axis=0) > 0).all()  # every feature is used by some token
    # the two "the"s are the same token, so they have the same features
    assert np.array_equal(X[tokens.index("The")], X[tokens.index("the")])
