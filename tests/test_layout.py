"""The library is laid out in layers: the core on top, one layer of torch building blocks, one
of architectures, the parts as leaves, and the tools.

Checked from the source (no imports run):
- the core (what a learner reads beside notebooks 01-04, 07 and 10) imports only the core and
  the shared modules;
- the building blocks (`nn`: what every later part builds on) import only the core, the shared
  modules and themselves, and read no key of a GGUF file;
- the architectures (`models`: one file per architecture, what each model is) import only the
  core, the shared modules, the building blocks and themselves; every file of the package but
  its readers is one architecture, and the names of llama.cpp's tensors are spelled there only;
- a part imports only the core, the building blocks, the architectures, the shared modules,
  itself and the edges
  it declares: at most two other parts, each named in an `Edges:` paragraph of its package's
  docstring with the reason for it; the tools (exercises, benchmarks) may import anything;
- no module imports a private name (`_name`) from another package;
- there is no import cycle, every package says which notebook it serves and what to read
  first, the module table (docs/library.md) lists every module, the package overview
  (mha_lib/__init__.py) names every entry of the top level, and the tests mirror the library.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "mha_lib"
CORE = ["attention", "multihead", "pytorch", "block", "conv", "positions"]
SHARED = ["plot", "diagrams", "example", "stats", "testing", "runtime", "_checks"]
BLOCKS = ["nn"]  # the layer of torch building blocks
MODELS = ["models"]  # the layer of architectures, one file each
PARTS = [
    "pretrained",
    "toy",
    "efficient",
    "extrapolation",
    "llm",
    "distributed",
    "linear_attention",
    "speech",
    "sparse_attention",
]
TOOLS = ["exercises", "bench", "data"]
MAX_EDGES = 2  # other parts a part may import, each declared with its reason


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


def top(name: str) -> str:
    """The entry of the top level a module belongs to: mha_lib.nn.gqa -> nn."""
    return name.split(".")[1] if name.count(".") else ""


def declared_edges(part: str) -> dict[str, str]:
    """{other part: reason}, from the `Edges:` paragraph of the part's package docstring."""
    doc = ast.get_docstring(ast.parse((LIB / part / "__init__.py").read_text())) or ""
    paragraph = re.search(r"^Edges:(.*?)(?:\n\n|\Z)", doc, re.S | re.M)
    if paragraph is None:
        return {}
    edges = {}
    for item in re.split(r";\s*", paragraph.group(1).strip().rstrip(".")):
        m = re.match(r"`(?:mha_lib\.)?([a-z_]+)[a-z_.]*`\s*(.*)", item.strip(), re.S)
        assert m, f"{part}'s Edges: cannot read {item!r}; expected `package` and its reason"
        edges[m.group(1)] = " ".join(m.group(2).split())
    return edges


def test_top_level_is_the_core_the_blocks_the_shared_modules_and_one_package_per_part():
    entries = {p.stem for p in LIB.iterdir() if p.suffix == ".py" or p.is_dir()}
    entries -= {"__init__", "__pycache__"}
    assert entries == set(CORE + SHARED + BLOCKS + MODELS + PARTS + TOOLS)
    for part in BLOCKS + MODELS + PARTS + ["exercises", "bench"]:
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


def test_the_core_imports_only_the_core_and_the_shared_modules():
    known = modules()
    for name in CORE + SHARED:
        for target in imports_of(f"mha_lib.{name}", known[f"mha_lib.{name}"]):
            assert top(target) in CORE + SHARED, f"mha_lib.{name} imports {target}"


def test_the_building_blocks_import_only_the_core_the_shared_modules_and_themselves():
    for name, path in modules().items():
        if top(name) in BLOCKS:
            for target in imports_of(name, path):
                assert top(target) in CORE + SHARED + BLOCKS, f"{name} imports {target}"


def test_the_architectures_import_only_the_core_the_shared_modules_the_blocks_and_themselves():
    for name, path in modules().items():
        if top(name) in MODELS:
            for target in imports_of(name, path):
                assert top(target) in CORE + SHARED + BLOCKS + MODELS, f"{name} imports {target}"


# what a GGUF file's metadata keys and llama.cpp's tensor names look like, as string constants
GGUF_KEY = re.compile(
    r"^(general\.|tokenizer\.ggml\.|[a-z0-9]+\.(block_count|embedding_length|context_length|"
    r"feed_forward_length|attention\.|rope\.))"
)
TENSOR_NAME = re.compile(r"^(blk\.|(attn|ffn)_[a-z_]+\.(weight|bias)$|output_norm|token_embd)")


def strings(path: Path) -> set[str]:
    """The string constants of a module, docstrings included."""
    return {
        node.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def test_an_architecture_is_one_file_and_lives_in_models():
    """Every module of mha_lib/models but its readers holds one `ARCHITECTURE`; the building
    blocks read no GGUF key; llama.cpp's tensor names of a layer are spelled in mha_lib/models
    only (the loaders read them from there)."""
    for path in (LIB / "models").glob("*.py"):
        if path.stem in ("__init__", "read", "spec"):
            continue
        tree = ast.parse(path.read_text())
        assigned = [
            t.id
            for n in tree.body
            if isinstance(n, ast.Assign)
            for t in n.targets
            if isinstance(t, ast.Name)
        ]
        assert "ARCHITECTURE" in assigned, f"mha_lib/models/{path.name} holds no ARCHITECTURE"
    for name, path in modules().items():
        found = strings(path)
        if top(name) in BLOCKS:
            keys = sorted(s for s in found if GGUF_KEY.match(s))
            assert not keys, f"{name} reads GGUF keys {keys}: read them in mha_lib.models"
        if top(name) not in MODELS:
            tensors = sorted(s for s in found if TENSOR_NAME.match(s) and "." in s)
            allowed = {"token_embd.weight"}  # the embedding a QuantizedEmbedding reads by name
            assert set(tensors) <= allowed, f"{name} spells llama.cpp's tensor names {tensors}"


def test_a_part_imports_the_layers_below_and_only_the_edges_it_declares():
    used: dict[str, set[str]] = {part: set() for part in PARTS}
    for name, path in modules().items():
        part = top(name)
        if part not in PARTS:
            continue
        edges = declared_edges(part)
        for target in imports_of(name, path):
            other = top(target)
            if other in CORE + SHARED + BLOCKS + MODELS or other == part:
                continue
            assert other in edges, (
                f"{name} imports {target}, from the part {other!r}, which {part}'s package "
                "docstring does not declare under Edges:"
            )
            used[part].add(other)
    for part in PARTS:
        edges = declared_edges(part)
        assert len(edges) <= MAX_EDGES, f"{part} declares {len(edges)} edges: {sorted(edges)}"
        for other, reason in edges.items():
            assert other in PARTS and other != part, f"{part} declares an edge to {other!r}"
            assert len(reason.split()) >= 4, f"{part}'s edge to {other} gives no reason"
            assert other in used[part], f"{part} declares an edge to {other} it does not use"


def test_no_module_imports_a_private_name_from_another_package():
    known = modules()
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if not source.startswith("mha_lib"):
                continue
            source_package = (
                source
                if source in known and known[source].name == "__init__.py"
                else source.rpartition(".")[0]
            )
            private = [a.name for a in node.names if a.name.startswith("_")]
            assert source_package == package or not private, (
                f"{name} imports {private} from {source}, another package's private names"
            )


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
    for part in BLOCKS + MODELS + PARTS:
        doc = ast.get_docstring(ast.parse((LIB / part / "__init__.py").read_text()))
        assert doc and re.search(r"notebooks? \d\d", doc), part
        assert "Read first" in doc, part


def test_the_module_table_lists_every_module():
    readme = (ROOT / "docs" / "library.md").read_text()
    table = readme[readme.index("| module | what it holds | notebook |") :]
    table = table[: table.index("\n\n")]
    named = set(re.findall(r"`([a-z0-9_.]+)`", table))
    for name, path in modules().items():
        short = name.removeprefix("mha_lib.")
        if short == "mha_lib" or path.parent.name in ("exercises", "bench"):
            continue  # the tools are listed as packages
        if path.name == "__init__.py" and short in BLOCKS + MODELS + PARTS:
            continue  # a package is a heading of the table
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
    for entry in CORE + SHARED + BLOCKS + MODELS + PARTS + TOOLS:
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


def test_the_building_blocks_have_one_door():
    """A name of `mha_lib.nn` is imported from `mha_lib.nn` only: no part's package re-exports
    one (a second import path lets notebooks drift between two doors to the same object)."""
    for part in PARTS:
        tree = ast.parse((LIB / part / "__init__.py").read_text())
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level and (node.module or ""):
                assert not node.module.startswith("nn"), (
                    f"mha_lib/{part}/__init__.py imports {[a.name for a in node.names]} from "
                    f"..{node.module}: import them from mha_lib.nn"
                )
