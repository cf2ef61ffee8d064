"""Checkers for the notebooks' exercises.

Each `check_*` function calls the learner's function on a few inputs, compares
the result with the library's reference, prints one line (✓, or ✗ with what is
most likely wrong: transposed keys, a missing scale, softmax over the wrong
axis, ...) and returns True or False. It never raises, so a notebook whose
exercise is still `...` runs to the end. Solutions live in `solutions/`.

The checkers of the torch notebooks import torch, so they are not re-exported
here (this package stays numpy-only): notebooks 04 and 08 import them from
`mha_lib.exercises.nb04` and `mha_lib.exercises.nb08`.
"""

from .nb00 import *  # noqa: F403
from .nb00 import __all__ as _nb00
from .nb01 import *  # noqa: F403
from .nb01 import __all__ as _nb01
from .nb02 import *  # noqa: F403
from .nb02 import __all__ as _nb02
from .nb03 import *  # noqa: F403
from .nb03 import __all__ as _nb03

__all__ = [*_nb00, *_nb01, *_nb02, *_nb03]
