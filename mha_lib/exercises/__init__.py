"""Checkers for the notebooks' exercises.

Each `check_*` function calls the learner's function on a few inputs, compares
the result with the library's reference, prints one line (✓, or ✗ with what is
most likely wrong: transposed keys, a missing scale, softmax over the wrong
axis, ...) and returns True or False. It never raises, so a notebook whose
exercise is still `...` runs to the end. Solutions live in `solutions/`.

The inputs are chosen so that shortcuts fail: N != M, d_k != d_v, h·d_k != C,
odd sizes, a batch axis where the exercise has one. One rule for answers in
every checker: the values are judged, not the container; a numpy array, a list
or a torch tensor (any device, requires_grad, nn.Parameter) is read the same
way. Where the exercise asks for a tensor (notebook 04) a correct numpy answer
passes with a note. An answer that calls the library's own version of the function
the exercise asks for (`mha_lib.softmax` in the softmax exercise, ...) is rejected with a
message naming it; the library's other functions stay allowed (see `_base.watching`).
An error that a torch habit raises on numpy arrays (.view, .permute, .transpose(1, 2),
dim=, torch.softmax) is named as such (`_base.numpy_habit`).

This package stays numpy-only. The checkers of notebooks 05, 07, 12, 13, 14 and 15 import torch
only when they run, so they are re-exported here; the modules `nb04` and `nb08`
import torch as they load, so notebooks 04 and 08 import their checkers from
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
from .nb03b import *  # noqa: F403
from .nb03b import __all__ as _nb03b
from .nb05 import *  # noqa: F403  (imports torch only when a checker runs)
from .nb05 import __all__ as _nb05
from .nb06 import *  # noqa: F403
from .nb06 import __all__ as _nb06
from .nb07 import *  # noqa: F403
from .nb07 import __all__ as _nb07
from .nb11 import *  # noqa: F403
from .nb11 import __all__ as _nb11
from .nb12 import *  # noqa: F403  (imports gguf and torch only when a checker runs)
from .nb12 import __all__ as _nb12
from .nb13 import *  # noqa: F403
from .nb13 import __all__ as _nb13
from .nb14 import *  # noqa: F403
from .nb14 import __all__ as _nb14
from .nb15 import *  # noqa: F403  (imports gguf and torch only when a checker runs)
from .nb15 import __all__ as _nb15
from .nb16 import *  # noqa: F403
from .nb16 import __all__ as _nb16
from .nb17 import *  # noqa: F403
from .nb17 import __all__ as _nb17
from .nb18 import *  # noqa: F403
from .nb18 import __all__ as _nb18

__all__ = [
    *_nb00,
    *_nb01,
    *_nb02,
    *_nb03,
    *_nb03b,
    *_nb05,
    *_nb06,
    *_nb07,
    *_nb11,
    *_nb12,
    *_nb13,
    *_nb14,
    *_nb15,
    *_nb16,
    *_nb17,
    *_nb18,
]
