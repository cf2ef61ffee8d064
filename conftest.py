"""Settings for the whole test suite.

- The notebooks' stored outputs were computed on the CPU, and strict nbval compares them on the
  CPU on every machine: `mha_lib.runtime.pick_device()` honours MHA_LIB_DEVICE, and the notebook
  kernels that nbval starts inherit this process's environment. A machine with a GPU tests its
  GPU in tests/test_gpu.py instead.
- Notebook 09 needs triton, which ships wheels for Linux x86_64 only: where it cannot be
  imported, its notebook and solutions are skipped with the reason printed, not failed. So is
  notebook 12, whose section 5 runs notebook 09's kernel inside the language model (its
  solutions need no triton).
"""

import importlib.util
import os

import pytest

os.environ["MHA_LIB_DEVICE"] = "cpu"

TRITON_NOTEBOOKS = (
    "09_flash_attention_triton.ipynb",
    "09_flash_attention_triton_solutions.ipynb",
    "12_a_real_language_model.ipynb",
)


def triton_missing_reason(find_spec=importlib.util.find_spec) -> str | None:
    """Why the triton notebooks cannot run here, or None when triton is installed."""
    try:
        found = find_spec("triton") is not None
    except (ImportError, ValueError):  # a broken or blocked installation
        found = False
    return None if found else "triton is not installed (its wheels are for Linux x86_64 only)"


def pytest_collection_modifyitems(config, items):
    reason = triton_missing_reason()
    if reason is None:
        return
    for item in items:
        if item.path.name in TRITON_NOTEBOOKS:
            item.add_marker(
                pytest.mark.skip(reason=f"notebook {item.path.name[:2]} needs triton: {reason}")
            )


def pytest_report_header(config):
    lines = ["notebooks pinned to the CPU (MHA_LIB_DEVICE=cpu); GPU checks: tests/test_gpu.py"]
    reason = triton_missing_reason()
    if reason is not None:
        lines.append(f"notebooks 09 and 12 skipped: {reason}")
    return lines
