"""The library is laid out as the series: a small core on top, one package per part.

Checked from the source (no imports run): the core never imports a part's package, there is
no import cycle between mha_lib's modules, every package says which notebook it serves, the
README's module table lists every module, and the tests mirror the library's packages.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "mha_lib"
CORE = ["attention", "multihead", "pytorch", "block", "conv", "positions"]
SHARED = ["plot", "diagrams", "example", "stats", "testing", "optim", "memory", "_checks"]
PARTS = ["pretrained", "toy", "efficient", "extrapolation", "distributed"]
TOOLS = ["exercises", "bench", "data"]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in LIB.rglob("*.py")}


def imports_of(name: str, path: Path) -> set[str]:
    """The mha_lib modules that `name` imports (at the top or inside functions)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("mha_lib")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("mha_lib"):
                found.add(target)
                found |= {f"{target}.{a.name}" for a in node.names}
    known = modules()
    return {m for m in found if m in known and m != name}


def test_top_level_is_the_core_the_shared_modules_and_one_package_per_part():
    entries = {p.stem for p in LIB.iterdir() if p.suffix == ".py" or p.is_dir()}
    entries -= {"__init__", "__pycache__"}
    assert entries == set(CORE + SHARED + PARTS + TOOLS)
    for part in PARTS + ["exercises", "bench"]:
        assert (LIB / part / "__init__.py").is_file(), part


def test_the_core_imports_no_part():
    known = modules()
    for name in CORE + SHARED:
        for target in imports_of(f"mha_lib.{name}", known[f"mha_lib.{name}"]):
            top = target.split(".")[1]
            assert top in CORE + SHARED, f"mha_lib.{name} imports {target}, a part's package"


def test_no_import_cycle():
    known = modules()
    graph = {name: imports_of(name, path) for name, path in known.items()}
    # a package's __init__ that imports its own modules is not a cycle through them
    for name in graph:
        graph[name] = {t for t in graph[name] if not name.startswith(t + ".")}
    state: dict[str, int] = {}

    def visit(node, stack):
        state[node] = 1
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack + [node, nxt]))
            if nxt not in state:
                visit(nxt, stack + [node])
        state[node] = 2

    for name in graph:
        if name not in state:
            visit(name, [])


def test_each_package_says_its_notebook_and_what_to_read_first():
    for part in PARTS:
        doc = ast.get_docstring(ast.parse((LIB / part / "__init__.py").read_text()))
        assert doc and re.search(r"notebooks? \d\d", doc), part
        assert "Read first" in doc, part


def test_readme_module_table_lists_every_module():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| module | what it holds | notebook |") :]
    table = table[: table.index("\n\n")]
    named = set(re.findall(r"`([a-z_.]+)`", table))
    for name, path in modules().items():
        short = name.removeprefix("mha_lib.")
        if short == "mha_lib" or path.parent.name in ("exercises", "bench"):
            continue  # the tools are listed as packages
        if path.name == "__init__.py" and short in PARTS:
            continue  # a part's package is a heading of the table
        assert short in named, f"{short} is not in the README's module table"


def test_tests_mirror_the_packages():
    for part in PARTS + ["exercises"]:
        assert (ROOT / "tests" / part).is_dir(), f"tests/{part}/ is missing"
    for path in LIB.glob("*/*.py"):
        if path.parent.name in ("bench",) or path.name.startswith("_"):
            continue
        test_dir = ROOT / "tests" / path.parent.name
        assert any(test_dir.glob("test_*.py")), f"no tests for {path.relative_to(ROOT)}"
    for name in ("pretrained/encoder", "pretrained/roles", "pretrained/explore", "toy/tasks"):
        assert (ROOT / "tests" / f"{name.split('/')[0]}/test_{name.split('/')[1]}.py").is_file()
