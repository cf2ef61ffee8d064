"""pyproject.toml's extras against the pinned files: every package a requirements file pins is
declared in an extra (the test stack and the site's in `test` and `site`, what the notebooks
import in `notebooks` and the extras it names), each extra's range admits the pinned version, and
every third-party module the library imports is declared."""

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EXTRAS = PYPROJECT["project"]["optional-dependencies"]
# modules that come with a declared distribution, under names of their own (the Binder walk,
# `mha_lib.bench binder`, drives kernels with jupyterlab's own client and notebook format)
COMES_WITH = {
    "jupyterlab": {"jupyter_client", "nbclient", "nbformat", "IPython"},
    "ipywidgets": {"IPython"},
}


def pinned(name: str) -> dict[str, Requirement]:
    out = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            req = Requirement(line)
            out[req.name.lower()] = req
    return out


def declared(extra: str, seen: set[str] | None = None) -> dict[str, Requirement]:
    """The requirements of an extra, with the extras it names (mha_lib[...]) followed."""
    seen = set() if seen is None else seen
    out = {}
    for line in EXTRAS[extra]:
        req = Requirement(line)
        if req.name == "mha_lib":
            for inner in req.extras - seen:
                seen.add(inner)
                out |= declared(inner, seen)
        else:
            out[req.name.lower()] = req
    return out


def base() -> dict[str, Requirement]:
    return {
        Requirement(r).name.lower(): Requirement(r) for r in PYPROJECT["project"]["dependencies"]
    }


@pytest.mark.parametrize(
    "pins, extra",
    [("requirements.txt", "notebooks"), ("requirements-dev.txt", "test")],
)
def test_every_pin_is_declared_and_admitted(pins, extra):
    allowed = base() | declared(extra) | declared("site")
    for name, req in pinned(pins).items():
        assert name in allowed, f"{pins} pins {name}, which no extra of pyproject.toml declares"
        (version,) = [Version(s.version) for s in req.specifier]
        assert allowed[name].specifier.contains(version), (
            f"{pins} pins {name}=={version}, outside pyproject.toml's {allowed[name]}"
        )


def test_every_declared_package_is_pinned():
    pins = pinned("requirements.txt") | pinned("requirements-dev.txt")
    for extra in EXTRAS:
        for name in declared(extra):
            assert name in pins, f"the extra {extra!r} declares {name}, which no file pins"


def test_every_third_party_module_the_library_imports_is_declared():
    names = set()
    for path in (ROOT / "mha_lib").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names.add(node.module.split(".")[0])
    third_party = {n for n in names if n not in sys.stdlib_module_names and n != "mha_lib"}
    everything = base() | {n: r for extra in EXTRAS for n, r in declared(extra).items()}
    as_imported = {re.sub(r"[-.]", "_", n) for n in everything}
    for name, modules in COMES_WITH.items():
        if name in everything:
            as_imported |= modules
    missing = sorted(third_party - as_imported)
    assert not missing, f"mha_lib imports {missing}, which pyproject.toml declares nowhere"
