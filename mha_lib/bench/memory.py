"""Peak memory growth of one pass, measured in a fresh process; shared by the benchmarks.

A benchmark's child process builds what it needs, warms up, then calls
`start(device)`, runs the pass, and prints `finish(device, before)` as one
line of JSON. The parent runs each child with `growth_in_subprocess`, so no
variant inherits another's cached allocations.

On a GPU the growth is `torch.cuda.max_memory_allocated()` minus the memory
allocated before the pass. On the CPU it is the process's peak resident set
size during the pass minus its resident set size before (Linux: VmHWM, reset
through /proc/self/clear_refs; elsewhere ru_maxrss, a peak since the start; both read by
`mha_lib.runtime`),
with glibc told to return large freed blocks at once so that the resident set
size follows the memory actually in use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from ..runtime import peak_rss, proc_status_bytes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start(device: torch.device) -> int:
    """Reset the peak and return the memory in use now (bytes)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    if os.path.exists("/proc/self/clear_refs"):
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current VmRSS
        return proc_status_bytes("VmRSS")
    return peak_rss()


def finish(device: torch.device, before: int) -> str:
    """The growth of the peak since `start`, as the JSON line a child prints."""
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
    else:
        peak = peak_rss()  # VmHWM on Linux (reset by `start`), ru_maxrss elsewhere
    return json.dumps({"growth_bytes": int(peak - before)})


def growth_in_subprocess(module: str, args: list[str]) -> int:
    """Run `python -m module *args` in a fresh process; return the growth it printed (bytes)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["MALLOC_MMAP_THRESHOLD_"] = str(128 * 1024)  # glibc: freed large blocks go back at once
    cmd = [sys.executable, "-m", module, *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"memory subprocess failed: {' '.join(cmd)}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])["growth_bytes"]
