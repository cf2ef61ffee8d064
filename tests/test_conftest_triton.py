"""The root conftest skips notebook 09 where triton cannot be imported (decision tested by
simulating its absence)."""

from types import SimpleNamespace

import conftest


def test_triton_present_means_no_skip():
    assert conftest.triton_missing_reason(lambda name: object()) is None


def test_triton_absent_gives_a_reason():
    reason = conftest.triton_missing_reason(lambda name: None)
    assert "not installed" in reason and "Linux x86_64" in reason


def test_the_hook_marks_only_the_triton_notebooks(monkeypatch):
    monkeypatch.setattr(conftest, "triton_missing_reason", lambda: "triton is not installed")
    names = [*conftest.TRITON_NOTEBOOKS, "08_efficient_attention.ipynb"]
    marked = {}

    def item(name):
        return SimpleNamespace(
            path=SimpleNamespace(name=name), add_marker=lambda m: marked.setdefault(name, m)
        )

    conftest.pytest_collection_modifyitems(None, [item(n) for n in names])
    assert set(marked) == set(conftest.TRITON_NOTEBOOKS)
    assert all("needs triton" in m.kwargs["reason"] for m in marked.values())


def test_notebook_09_is_listed_in_the_readme_and_the_learning_path():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    link = "09_flash_attention_triton.ipynb"
    assert f"(notebooks/{link})" in (root / "README.md").read_text()
    assert f"({link})" in (root / "notebooks" / "00_start_here.ipynb").read_text()
    assert f"({link})" in (root / "notebooks" / "08_efficient_attention.ipynb").read_text()
