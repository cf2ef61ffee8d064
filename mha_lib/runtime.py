"""What the notebooks' kernels need to run well on a learner's machine: which device, an
optimiser that keeps the kernel small, and freed memory handed back; and what a process knows
about where it runs: its memory (and that of the processes it started), and its provenance.

- `pick_device()`: a CUDA GPU, else Apple's MPS, else the CPU; MHA_LIB_DEVICE overrides it
  (notebook 04 on; the test command sets it to "cpu").
- `Adam`: torch.optim.Adam's steps, float for float, for notebook 04's training cell and
  notebook 06's trainings. In your own code use `torch.optim.Adam` (or `AdamW`): this class
  exists only because building a torch.optim optimiser imports torch's compiler stack
  (torch._dynamo, and with it sympy and, where installed, triton), about 150 MB that stay in
  the kernel for the rest of the session, on a Binder machine that has 2 GB for all of a
  learner's kernels. It does the same arithmetic as `torch.optim.Adam`'s loop over parameters on
  the CPU, in the same order (tests/test_runtime.py checks that the parameters agree float for
  float after many steps), and imports nothing but torch.
- `SGD`: plain gradient descent, `p <- p - lr * p.grad` (torch.optim.SGD's steps without
  momentum), for notebook 04's primer on what an optimiser's `step()` does; same reason.
- `release_freed_memory()`: what notebook 05 does after its largest section. On Linux, glibc's
  allocator keeps memory that a program frees inside the program when the freed blocks sit in
  the middle of its heap: after notebook 05 frees the attention weights and hidden states of
  its 480 sentences, its kernel still holds about 120 MB of them, unused but counted against
  the machine's memory until the kernel shuts down. This function collects Python's garbage
  and then asks glibc to return every free page (`malloc_trim(0)`). It frees nothing that is
  still in use and changes no result. Elsewhere (macOS, Windows, a Linux without glibc) the
  allocator works differently, and the function only collects garbage.
- `proc_status_bytes`, `peak_rss`, `descendants`, `tree_memory`: a process's memory, read from
  /proc on Linux (what notebook 14's launcher and the benchmarks report; `bench binder` walks
  the series with them);
- `provenance(made_by)`: the torch version, Python, machine and CPU capability a cached sweep
  was made with.

One Adam step, per parameter p with gradient g, at step t (beta1, beta2, eps as in Kingma & Ba,
2015):
    p <- p * (1 - lr * weight_decay)                  (decoupled weight decay, as AdamW)
    m <- beta1 m + (1 - beta1) g                      (mean of the gradients)
    v <- beta2 v + (1 - beta2) g²                     (mean of their squares)
    p <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
"""

from __future__ import annotations

import ctypes
import gc
import os
import platform
import sys
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

__all__ = [
    "SGD",
    "Adam",
    "descendants",
    "peak_rss",
    "pick_device",
    "proc_status_bytes",
    "provenance",
    "release_freed_memory",
    "tree_memory",
]


# ---------------------------------------------------------------------------- the device


def pick_device() -> torch.device:
    """The best available device: a CUDA GPU, else Apple's MPS, else the CPU.

    The environment variable MHA_LIB_DEVICE overrides the choice ("cpu", "cuda", "cuda:1",
    "mps"): the test command sets MHA_LIB_DEVICE=cpu, so that the notebooks' stored CPU
    outputs are compared on the CPU even on a machine with a GPU. A device that is named
    but not available is an error, not a silent fallback.
    """
    name = os.environ.get("MHA_LIB_DEVICE", "").strip()
    if name:
        return _named_device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _named_device(name: str) -> torch.device:
    """The device that MHA_LIB_DEVICE names, after checking that this machine has it."""
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise ValueError(
            f"MHA_LIB_DEVICE={name!r} is not a device name; expected 'cpu', 'cuda', "
            "'cuda:<index>' or 'mps'"
        ) from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"MHA_LIB_DEVICE={name!r}, but torch sees no CUDA device here")
    if device.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ValueError(f"MHA_LIB_DEVICE={name!r}, but torch sees no MPS device here")
    if device.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"MHA_LIB_DEVICE={name!r}: expected 'cpu', 'cuda' or 'mps'")
    return device


# ---------------------------------------------------------------------------- the optimiser


class Adam:
    """Adam (with decoupled weight decay when weight_decay > 0, i.e. AdamW).

    params: the tensors to train (e.g. `model.parameters()`); `zero_grad()` then `step()`, as
    with torch.optim. A parameter whose .grad is None is skipped, and its step count stays.
    """

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ):
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("params is empty (or nothing in it requires grad); nothing to train")
        for name, value in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a number >= 0; got {value!r}")
        if len(betas) != 2 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"betas must be two numbers in [0, 1); got {betas!r}")
        self.lr, self.betas, self.eps, self.weight_decay = lr, tuple(betas), eps, weight_decay
        self.steps = [0] * len(self.params)  # per parameter, as torch.optim counts them
        self.m = [torch.zeros_like(p) for p in self.params]  # first moments, p's shape
        self.v = [torch.zeros_like(p) for p in self.params]  # second moments, p's shape

    def zero_grad(self) -> None:
        """Drop every gradient (set it to None, as torch.optim does by default)."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One Adam step for every parameter that has a gradient."""
        beta1, beta2 = self.betas
        for i, (p, m, v) in enumerate(zip(self.params, self.m, self.v)):
            if p.grad is None:
                continue
            g = p.grad
            self.steps[i] += 1
            t = float(self.steps[i])
            if self.weight_decay != 0:
                p.mul_(1 - self.lr * self.weight_decay)
            m.lerp_(g, 1 - beta1)  # m + (1 - beta1)(g - m)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            denom = (v.sqrt() / (1 - beta2**t) ** 0.5).add_(self.eps)
            p.addcdiv_(m, denom, value=-(self.lr / (1 - beta1**t)))


class SGD:
    """Plain gradient descent: `step()` moves every parameter against its gradient, by lr times it.

    torch.optim.SGD's steps with its defaults (no momentum, no weight decay), float for float;
    params, `zero_grad()` and `step()` as with torch.optim. A parameter whose .grad is None is
    left as it is.
    """

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3):
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("params is empty (or nothing in it requires grad); nothing to train")
        if not isinstance(lr, (int, float)) or isinstance(lr, bool) or lr < 0:
            raise ValueError(f"lr must be a number >= 0; got {lr!r}")
        self.lr = lr

    def zero_grad(self) -> None:
        """Drop every gradient (set it to None, as torch.optim does by default)."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One step for every parameter that has a gradient: p <- p - lr * p.grad."""
        for p in self.params:
            if p.grad is not None:
                p.add_(p.grad, alpha=-self.lr)


# ---------------------------------------------------------------------------- freed memory


def release_freed_memory() -> bool:
    """gc.collect(), then glibc's malloc_trim(0) on Linux; True if malloc_trim ran."""
    gc.collect()
    if not sys.platform.startswith("linux"):
        return False
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim  # glibc only
    except (OSError, AttributeError):
        return False
    trim(0)
    return True


# ---------------------------------------------------------------------------- a process's memory


def proc_status_bytes(field: str, pid: int | str = "self") -> int:
    """A memory field of /proc/<pid>/status (Linux), in bytes: "VmRSS" (resident now), "VmHWM"
    (its peak). OSError where there is no such file; RuntimeError where it lacks the field."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024  # the file says kB
    raise RuntimeError(f"{field} not found in /proc/{pid}/status")


def peak_rss() -> int | None:
    """This process's peak resident set size in bytes, or None where the system does not say.

    Linux: VmHWM from /proc/self/status, the peak of this program's memory (for a fork, from
    the moment it was forked, the pages it shares with its parent included). (getrusage's
    ru_maxrss would be wrong there: it keeps the peak of the process before it called exec, and a
    spawned process starts as a copy of its parent, a whole Jupyter kernel.) Elsewhere
    ru_maxrss (bytes on macOS, KiB on other systems); None on Windows.
    """
    if os.path.exists("/proc/self/status"):
        return proc_status_bytes("VmHWM")
    try:
        import resource
    except ImportError:  # Windows
        return None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024


def descendants(pid: int) -> list[int]:
    """The processes started by `pid`, by the processes they started, and so on (Linux:
    /proc/<pid>/task/*/children; [] elsewhere or once the process has ended)."""
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                children = [int(c) for c in f.read().split()]
        except OSError:  # the thread has ended
            continue
        for child in children:
            found += [child, *descendants(child)]
    return found


def tree_memory(pids: Sequence[int]) -> dict[str, int] | None:
    """The memory of processes `pids` together, in bytes, from /proc/<pid>/smaps_rollup (Linux;
    None elsewhere): "pss", the sum of their proportional set sizes (a page shared by k
    processes counts 1/k in each: torch's libraries, mapped by every process, and the pages of a
    file several processes read count once in the sum; what a container's memory limit counts),
    and "rss", the sum of their resident sets (a shared page counted in every process: an upper
    bound). A process that has ended counts 0."""
    if not os.path.exists("/proc/self/smaps_rollup"):
        return None
    total = {"pss": 0, "rss": 0}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    key = line.split(":")[0]
                    if key in ("Pss", "Rss"):
                        total[key.lower()] += int(line.split()[1]) * 1024  # kB
        except OSError:  # the process has ended
            pass
    return total


# ---------------------------------------------------------------------------- where a result ran


def provenance(made_by: str) -> dict[str, str]:
    """What a cached sweep records about the run that made it: the command, torch's version,
    Python's, the machine and the CPU capability torch's kernels use (the last bits of a
    training trajectory depend on them)."""
    return {
        "made by": made_by,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu capability": torch.backends.cpu.get_cpu_capability(),
    }
