"""One process group per world size for the tests of mha_lib.distributed.

Starting a group costs a second or more (each process imports torch), so each world size
P = 1..4 gets one group, started the first time a test asks for it, which runs in turn every
check that needs P processes (`launch.in_turn`): the collectives, every ring-attention case,
the tensor-parallel decoder where P divides its heads. The tests compare what the ranks
returned with the single-process references. The fault tests start their own groups.
"""

from __future__ import annotations

import pytest

from tests.distributed.distributed_inputs import Groups


@pytest.fixture(scope="session")
def groups() -> Groups:
    return Groups()
