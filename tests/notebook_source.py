"""Reading the notebooks' code as Python, for the tests that check what the cells do (not a test).

`code_cells(path)` gives each code cell's index and source, with IPython's `%magic` and `!shell`
lines left out so that `ast.parse` reads the rest; `dotted(node)` names a call or attribute
chain ("torch.testing.assert_close").
"""

import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]*_*.ipynb"))


def code_cells(path: Path) -> list[tuple[int, str]]:
    """(index in the notebook's cells, source without magic or shell lines) of every code cell."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [
        (
            index,
            "\n".join(
                l
                for l in "".join(cell["source"]).splitlines()
                if not l.lstrip().startswith(("%", "!"))
            ),
        )
        for index, cell in enumerate(cells)
        if cell["cell_type"] == "code"
    ]


def dotted(node) -> str:
    """'a.b.c' for an attribute chain a.b.c (or a name), else ''."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def run_your_own_file_cell(path: Path) -> str:
    """What notebook 15's "your own file" cell prints when MY_GGUF is set to path (a GGUF file):
    the cell that sets `MY_GGUF = None`, run with the notebook's imports and path put in."""
    import contextlib
    import io

    import torch

    from mha_lib.llm import load_gguf
    from mha_lib.llm.architectures import differences
    from mha_lib.nn import generate

    notebook = ROOT / "notebooks" / "15_the_attention_of_the_models_you_run.ipynb"
    (source,) = [s for _, s in code_cells(notebook) if "MY_GGUF = None" in s]
    source = source.replace("MY_GGUF = None", f"MY_GGUF = {str(path)!r}", 1)
    namespace = {
        "torch": torch,
        "generate": generate,
        "load_gguf": load_gguf,
        "differences": differences,
    }
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(source, str(notebook), "exec"), namespace)
    return printed.getvalue()
