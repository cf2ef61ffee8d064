"""The library is laid out as the series: a small core on top, one package per part.

Checked from the source (no imports run): the core never imports a part's package, there is
no import cycle between mha_lib's modules, every package says which notebook it serves, the
module table (docs/library.md) lists every module, and the tests mirror the library's packages.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "mha_lib"
CORE = ["attention", "multihead", "pytorch", "block", "conv", "positions"]
SHARED = ["plot", "diagrams", "example", "stats", "testing", "runtime", "_checks"]
PARTS = [
    "pretrained",
    "toy",
    "efficient",
    "extrapolation",
    "llm",
    "distributed",
    "linear_attention",
]
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


# each core module opens with the algorithm it derives; helpers and input checks follow it
ALGORITHM_FIRST = {
    "attention": "scaled_dot_product_attention",
    "multihead": "multi_head_attention_loop",
    "pytorch": "explicit_attention",
    "block": "TransformerBlock",
    "conv": "attention_conv2d",
    "positions": "rope",
}


def test_top_level_is_the_core_the_shared_modules_and_one_package_per_part():
    entries = {p.stem for p in LIB.iterdir() if p.suffix == ".py" or p.is_dir()}
    entries -= {"__init__", "__pycache__"}
    assert entries == set(CORE + SHARED + PARTS + TOOLS)
    for part in PARTS + ["exercises", "bench"]:
        assert (LIB / part / "__init__.py").is_file(), part


def test_every_core_module_opens_with_its_algorithm():
    assert set(ALGORITHM_FIRST) == set(CORE)
    for name, first in ALGORITHM_FIRST.items():
        tree = ast.parse((LIB / f"{name}.py").read_text())
        defs = [
            node.name
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_")
        ]
        assert defs[0] == first, f"mha_lib/{name}.py opens with {defs[0]}, not {first}"
        private_first = [
            node.name
            for node in tree.body[
                : tree.body.index(next(n for n in tree.body if getattr(n, "name", "") == first))
            ]
            if isinstance(node, ast.FunctionDef)
        ]
        assert not private_first, f"mha_lib/{name}.py defines {private_first} before {first}"


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


def test_the_module_table_lists_every_module():
    readme = (ROOT / "docs" / "library.md").read_text()
    table = readme[readme.index("| module | what it holds | notebook |") :]
    table = table[: table.index("\n\n")]
    named = set(re.findall(r"`([a-z_.]+)`", table))
    for name, path in modules().items():
        short = name.removeprefix("mha_lib.")
        if short == "mha_lib" or path.parent.name in ("exercises", "bench"):
            continue  # the tools are listed as packages
        if path.name == "__init__.py" and short in PARTS:
            continue  # a part's package is a heading of the table
        assert short in named, f"{short} is not in docs/library.md's module table"


def test_tests_mirror_the_library():
    """One test module per library module: mha_lib/x.py -> tests/test_x.py and
    mha_lib/pkg/x.py -> tests/pkg/test_x.py (exercises/nbNN.py -> tests/exercises/test_nbNN.py).
    The benchmarks are one small tool package, tested as one (tests/test_bench.py)."""
    missing = []
    for path in sorted(LIB.rglob("*.py")):
        if path.stem.startswith("_") or path.parent.name == "bench":
            continue
        package = path.parent.relative_to(LIB)
        test = ROOT / "tests" / package / f"test_{path.stem}.py"
        if not test.is_file():
            missing.append(f"{path.relative_to(ROOT)} -> {test.relative_to(ROOT)}")
    assert not missing, "no test module for: " + "; ".join(missing)
    assert (ROOT / "tests" / "test_bench.py").is_file()


def test_the_package_overview_names_every_module_and_benchmark():
    """mha_lib/__init__.py's docstring is the map a reader opens first: it must name every
    module and package of the top level, and every benchmark `python -m mha_lib.bench` runs."""
    doc = ast.get_docstring(ast.parse((LIB / "__init__.py").read_text()))
    named = set(re.findall(r"`([a-z_]+)/?`", doc))
    for entry in CORE + SHARED + PARTS + TOOLS:
        assert entry in named, f"mha_lib/__init__.py's overview does not name `{entry}`"
    bench_main = ast.parse((LIB / "bench" / "__main__.py").read_text())
    table = next(
        node.value
        for node in bench_main.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "BENCHMARKS"
    )
    benchmarks = {key.value for key in table.keys}
    listed = re.search(r"python -m mha_lib\.bench\s+([a-z|]+)", doc)
    assert listed and set(listed.group(1).split("|")) == benchmarks, listed
