"""`python -m mha_lib.bench binder`: walk the series as a Binder learner does, kernels kept alive.

JupyterLab keeps the kernel of every notebook a learner opened until it is shut down, and
Binder gives the whole session 2 GB. This command opens the notebooks in order (all of
`notebooks/` by default), runs each top to bottom in its own kernel, keeps every kernel alive,
and after each notebook prints:
- this kernel's PSS (proportional set size, the memory a container's limit counts: pages
  shared between kernels are split between them), with that of any process it left running,
  and the kernel's own peak resident set size (VmHWM);
- the peak PSS of the kernel and every process it started, together, sampled while the notebook
  ran (notebook 14's ranks live inside one cell: the walk counts them);
- the PSS of all live kernels together (recomputed each time: sharing changes);
- how long the kernel took to start and run every cell (wall time).
Linux only (it reads /proc/<pid>/smaps_rollup and /proc/<pid>/status).

    python -m mha_lib.bench binder [NOTEBOOK ...] [--markdown]
    python -m mha_lib.bench binder NOTEBOOK --cells     # the kernel's PSS after every cell
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

from ..runtime import descendants, proc_status_bytes, tree_memory

ROOT = Path(__file__).resolve().parents[2]


def pss_mb(pid: int) -> float:
    """The proportional set size of process `pid`, in MB (from /proc/<pid>/smaps_rollup)."""
    return tree_memory([pid])["pss"] / 2**20


def tree_pss_mb(pid: int) -> float:
    """The PSS of process `pid` and every process it started, in MB: what a kernel costs."""
    return tree_memory([pid, *descendants(pid)])["pss"] / 2**20


def peak_mb(pid: int) -> float:
    """The peak resident set size of process `pid` (VmHWM), in MB."""
    return proc_status_bytes("VmHWM", pid) / 2**20


class TreePeak:
    """The highest PSS of a kernel and the processes it starts, together, sampled every `every`
    seconds by a thread while a notebook runs: notebook 14's ranks live only inside one cell, so
    a measure taken between cells would miss them."""

    def __init__(self, every: float = 0.2):
        self.every, self.pid, self.peak_mb = every, None, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            if self.pid is not None:
                self.peak_mb = max(self.peak_mb, tree_pss_mb(self.pid))

    def __enter__(self) -> TreePeak:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def run_alive(path: Path, timeout: int = 600, per_cell=None, watch: TreePeak | None = None):
    """Run notebook `path` top to bottom in a new kernel, and return its still-running manager.

    per_cell(index, pss_mb), if given, is called after each code cell: where the memory goes;
    watch, a running `TreePeak`, is pointed at the kernel once it has started."""
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(path.parent), env={**os.environ, "MHA_LIB_DEVICE": "cpu"})
    if watch is not None:
        watch.pid = km.provisioner.pid
    client = NotebookClient(nb, km=km, timeout=timeout, allow_errors=False)
    with client.setup_kernel():  # the kernel is ours (km given): it outlives the client
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
            if per_cell is not None and cell.cell_type == "code":
                per_cell(index, tree_pss_mb(km.provisioner.pid))
    return km


def walk(paths: list[Path], out=print) -> list[dict]:
    """Run each notebook in turn with every kernel kept alive; one row per notebook."""
    rows, alive = [], []
    try:
        for path in paths:
            start = time.perf_counter()
            with TreePeak() as watch:
                km = run_alive(path, watch=watch)
            seconds = time.perf_counter() - start  # the kernel's start and every cell
            alive.append(km)
            pid = km.provisioner.pid
            row = {
                "notebook": path.name,
                "seconds": seconds,
                "kernel_mb": tree_pss_mb(pid),
                "peak_mb": peak_mb(pid),
                "tree_peak_mb": watch.peak_mb,
                "all_mb": sum(tree_pss_mb(k.provisioner.pid) for k in alive),
            }
            rows.append(row)
            out(
                f"{row['notebook']:<45} {seconds:5.1f} s  kernel {row['kernel_mb']:6.0f} MB PSS  "
                f"peak {row['peak_mb']:6.0f} MB  with its processes "
                f"{row['tree_peak_mb']:6.0f} MB PSS  all live kernels {row['all_mb']:6.0f} MB"
            )
    finally:
        for km in alive:
            km.shutdown_kernel(now=True)
    return rows


def markdown(rows: list[dict]) -> str:
    """The table of binder/README.md: one column per notebook."""
    names = [r["notebook"].split("_")[0] for r in rows]  # "03", "03b", ...
    lines = [
        "| after | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(rows),
        "| run time, s | " + " | ".join(f"{r['seconds']:.0f}" for r in rows) + " |",
        "| this kernel, MB PSS | " + " | ".join(f"{r['kernel_mb']:.0f}" for r in rows) + " |",
        "| its peak, MB RSS | " + " | ".join(f"{r['peak_mb']:.0f}" for r in rows) + " |",
        "| its peak with the processes it starts, MB PSS | "
        + " | ".join(f"{r['tree_peak_mb']:.0f}" for r in rows)
        + " |",
        "| all live kernels, MB PSS | " + " | ".join(f"{r['all_mb']:.0f}" for r in rows) + " |",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_lib.bench binder", description=__doc__)
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    parser.add_argument(
        "--markdown", action="store_true", help="also print binder/README.md's table"
    )
    parser.add_argument(
        "--cells", action="store_true", help="one notebook: its kernel's PSS after every cell"
    )
    args = parser.parse_args(argv)
    if not sys.platform.startswith("linux"):
        print("python -m mha_lib.bench binder reads /proc: Linux only")
        return 2
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
    if args.cells:
        if len(paths) != 1:
            print("--cells takes exactly one notebook")
            return 2
        km = run_alive(
            paths[0].resolve(), per_cell=lambda i, mb: print(f"cell {i:>3}: {mb:6.0f} MB")
        )
        km.shutdown_kernel(now=True)
        return 0
    rows = walk([p.resolve() for p in paths])
    if args.markdown:
        print(markdown(rows))
    return 0
