"""Checkers for the notebooks' exercises.

Each `check_*` function calls the learner's function on a few inputs, compares
the result with the library's reference, prints one line (✓, or ✗ with what is
most likely wrong: transposed keys, a missing scale, softmax over the wrong
axis, ...) and returns True or False. It never raises, so a notebook whose
exercise is still `...` runs to the end. Solutions live in `solutions/`.
"""

from .nb00 import *  # noqa: F403
from .nb00 import __all__ as _nb00
from .nb01 import *  # noqa: F403
from .nb01 import __all__ as _nb01
from .nb02 import *  # noqa: F403
from .nb02 import __all__ as _nb02
from .nb03 import *  # noqa: F403
from .nb03 import __all__ as _nb03
from .nb05 import *  # noqa: F403  (imports torch only when a checker runs)
from .nb05 import __all__ as _nb05

__all__ = [*_nb00, *_nb01, *_nb02, *_nb03, *_nb05]
