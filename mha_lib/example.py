"""The running example of the series: one sentence with small hand-made embeddings.

Every notebook of the core series uses these numbers, so a reader can follow
them from notebook to notebook. Each of the C = 6 features has a meaning a
person can read off (is it a thing, is it alive, ...); the values are chosen
by hand, not learned. "it" shares the features of "animal", which is what a
coreference head would need to link them.
"""

from __future__ import annotations

import numpy as np

TOKENS = [
    "The",
    "animal",
    "didn't",
    "cross",
    "the",
    "street",
    "because",
    "it",
    "was",
    "too",
    "tired",
]
FEATURES = ["thing", "alive", "place", "action", "negation", "function word"]

_X = np.array(
    [
        # thing alive place action neg  function
        [0.0, 0.0, 0.0, 0.0, 0.0, 1.0],  # The
        [1.0, 1.0, 0.0, 0.0, 0.0, 0.0],  # animal
        [0.0, 0.0, 0.0, 0.5, 1.0, 0.5],  # didn't
        [0.0, 0.0, 0.0, 1.0, 0.0, 0.0],  # cross
        [0.0, 0.0, 0.0, 0.0, 0.0, 1.0],  # the
        [1.0, 0.0, 1.0, 0.0, 0.0, 0.0],  # street
        [0.0, 0.0, 0.0, 0.5, 0.0, 1.0],  # because
        [1.0, 1.0, 0.0, 0.0, 0.0, 0.5],  # it
        [0.0, 0.0, 0.0, 0.5, 0.0, 0.5],  # was
        [0.0, 0.0, 0.0, 0.0, 0.5, 0.5],  # too
        [0.0, 1.0, 0.0, 0.5, 0.0, 0.0],  # tired
    ]
)


def running_example() -> tuple[list[str], np.ndarray]:
    """Return (tokens, X) with X of shape (N, C) = (11, 6), float64, a fresh copy."""
    return list(TOKENS), _X.copy()
