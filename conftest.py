"""Settings for the whole test suite.

The notebooks' stored outputs were computed on the CPU, and strict nbval compares them on the CPU
on every machine: `mha_lib.pytorch.pick_device()` honours MHA_LIB_DEVICE, and the notebook
kernels that nbval starts inherit this process's environment. A machine with a GPU tests its GPU
in tests/test_gpu.py instead.
"""

import os

os.environ["MHA_LIB_DEVICE"] = "cpu"


def pytest_report_header(config):
    return "notebooks pinned to the CPU (MHA_LIB_DEVICE=cpu); GPU checks: tests/test_gpu.py"
