"""Notebook 09 needs triton, which ships wheels for Linux x86_64 only: where it cannot be
imported, its notebook and solutions are skipped with the reason printed, not failed."""

import importlib.util

import pytest

TRITON_NOTEBOOKS = ("09_flash_attention_triton.ipynb", "09_flash_attention_triton_solutions.ipynb")


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
    skip = pytest.mark.skip(reason=f"notebook 09 needs triton: {reason}")
    for item in items:
        if item.path.name in TRITON_NOTEBOOKS:
            item.add_marker(skip)


def pytest_report_header(config):
    reason = triton_missing_reason()
    return None if reason is None else f"notebook 09 skipped: {reason}"
