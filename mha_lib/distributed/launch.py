"""Start P processes, join them in one process group, run one function on every rank.

Derived in notebook 14 §1 and §5. Each rank is a process of its own, as each GPU of a real job
is driven by its own process. Here the processes run on the CPU and talk through
`torch.distributed`'s gloo backend (TCP on this machine), so the same code runs on a laptop, on
Binder and in CI; with backend="nccl" each rank takes the GPU of its number instead.

What it holds:
- `run(fn, world_size, *args, per_rank=None, ...)`: start world_size processes with
  `torch.multiprocessing`, join them in one group, call fn(*args, *per_rank[rank]) on every
  rank and return what each rank returned, as a `Ranks` list (with each process's peak memory,
  the peak of all the processes together and the run's wall time). The processes are not
  copies of the caller (a notebook's kernel): with the *forkserver* method (Linux, macOS) a
  server process, a fresh interpreter, imports torch once and each rank is a fork of it, so a
  group pays for one import of torch, not one per rank, and the ranks share its memory until
  they write to it; with *spawn* (Windows) each rank is a fresh interpreter. Either way fn is
  imported by its module and name (a function defined in a notebook cannot be found);
- `GroupError`: what `run` raises when a rank raises, exits or hangs; it names the rank and the
  cause, and is raised only after every process has been joined or killed;
- `in_turn(calls)`: a worker that runs several workers one after the other in one group (every
  group costs a second or more to start: its processes import torch);
- `whoami()`: a worker returning its rank, the world size, the backend and its process id;
- `fail_on_rank`, `hang_on_rank`: workers that fail on purpose, for §5;
- `peak_rss()`: this process's peak resident memory (what `run` reports for each rank), and
  `tree_memory(pids)`: the memory of several processes together, PSS and RSS (Linux), which
  `run` samples for the parent and its ranks while they run, reporting the peak: both are
  `mha_lib.runtime`'s, the one reader of a process's memory;
- `rank_device()`: where this rank computes (the CPU under gloo, its own GPU under NCCL);
- `init_from_env()`: join the group that `torchrun` describes in the environment.

How a fault ends the group instead of hanging it:
- the parent hosts the group's key-value store (`TCPStore`) on a port the system picks free at
  start (port 0), and every rank meets the others there;
- every rank waits at a barrier after joining and before leaving, so a fault inside fn is met
  by peers that are fully connected;
- the group has a timeout (comm_timeout): a rank waiting in a collective for a peer that never
  comes raises after it, instead of waiting forever;
- the parent waits on every rank with a deadline (timeout); after the first failure it collects
  the other ranks' reports for a moment, then kills every process still alive and joins them all.
A rank that raised is named first; ranks that only saw the consequence (a peer closed its
connection, a collective timed out waiting for it) are listed after; a rank still running when
the others timed out waiting for it is named as hung.
"""

from __future__ import annotations

import os
import pickle
import re
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import timedelta
from multiprocessing.connection import wait

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from .._checks import check_int
from ..runtime import descendants, peak_rss, tree_memory

__all__ = [
    "GroupError",
    "Ranks",
    "fail_on_rank",
    "hang_on_rank",
    "in_turn",
    "init_from_env",
    "peak_rss",
    "rank_device",
    "run",
    "tree_memory",
    "whoami",
]

# forkserver where the system has it (Linux, macOS): a server process imports torch once, and
# each rank is a fork of it; spawn elsewhere (Windows): each rank a fresh interpreter
START_METHOD = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
HOST = "127.0.0.1"
GRACE_S = 1.0  # after a first failure, how long the other ranks' reports are awaited
SAMPLE_S = 0.2  # while the ranks run, the parent samples their memory and its own this often
# what a rank reports when a peer failed first: the consequence, not the cause (gloo's words)
_SECONDARY = re.compile(
    r"Timed out|Connection (reset|closed)|closed by peer|Broken pipe|Socket Timeout", re.I
)
# gloo's messages open with the C++ source location, "[/path/pair.cc:537] "
_SOURCE_LOCATION = re.compile(r"\[[^\]]*\.(cc|cpp|h|hpp):\d+\]\s*")


class Ranks(list):
    """What each rank returned, in rank order, with how the run went.

    seconds: wall time of the whole run (starting the processes included);
    peak_rss: each process's peak resident memory in bytes (Linux and macOS; None elsewhere);
    together: the peak of the parent and every rank together, sampled every SAMPLE_S seconds
    while they ran, {"pss": bytes, "rss": bytes} (Linux; None elsewhere): see `tree_memory`.
    """

    seconds: float = 0.0
    peak_rss: list[int | None]
    together: dict[str, int] | None = None


class GroupError(RuntimeError):
    """A rank failed, so the whole group was ended: every process joined or killed.

    rank: the rank named as the cause; kind: "raised", "hung", "exited" or "timed out";
    cause: one line (the exception's type and message, or what happened); reports: one line
    per rank that reported or was killed; traceback: the cause's traceback, when it raised.
    """

    def __init__(self, rank: int, world_size: int, kind: str, cause: str, reports, tb=""):
        self.rank, self.world_size, self.kind, self.cause = rank, world_size, kind, cause
        self.reports, self.traceback = dict(reports), tb
        lines = [f"rank {rank} of {world_size} {kind}: {cause}"]
        lines += [f"  rank {r}: {line}" for r, line in sorted(self.reports.items()) if r != rank]
        lines.append("  every process of the group was joined or killed")
        if tb:
            lines += [f"traceback on rank {rank}:", tb.rstrip()]
        super().__init__("\n".join(lines))


def _rank_main(rank, world_size, port, backend, comm_timeout, threads, payload, conn) -> None:
    """The body of each rank's process: join the group, run fn, send back one report."""
    try:
        torch.set_num_threads(threads)
        fn, args = pickle.loads(payload)
        if backend == "nccl":
            torch.cuda.set_device(rank)  # one GPU per rank, chosen before the group forms
        store = dist.TCPStore(HOST, port, world_size, is_master=False, timeout=comm_timeout)
        dist.init_process_group(
            backend, store=store, rank=rank, world_size=world_size, timeout=comm_timeout
        )
        # no rank starts before every rank has joined: a rank that fails at once would otherwise
        # close its sockets while a slower peer is still connecting, and that peer would report
        # the lost connection instead of finding the same fault itself
        dist.barrier()
        value = fn(*args)
        # no rank leaves before every rank is done: a rank that is still connecting (gloo sets
        # up its connections as it starts) would otherwise see its peers' sockets close
        dist.barrier()
        dist.destroy_process_group()
        conn.send_bytes(pickle.dumps(("ok", value, peak_rss())))
        conn.close()
    except BaseException as exc:  # everything goes back to the parent, then this process ends
        message = _SOURCE_LOCATION.sub("", str(exc)).strip()
        line = f"{type(exc).__name__}: {message}".strip().splitlines()[0]
        report = ("error", line, traceback.format_exc(), peak_rss())
        try:
            conn.send_bytes(pickle.dumps(report))
            conn.close()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)  # no atexit handlers: a broken group must not hold this process


def _stop_forkserver() -> None:
    """End the fork server, which would otherwise live as long as this process and keep torch
    in memory (multiprocessing starts it again for the next run). Its `_stop` is what Python's
    own tests call; where it is missing, the server is left running."""
    if START_METHOD != "forkserver":
        return
    from multiprocessing import forkserver

    stop = getattr(forkserver._forkserver, "_stop", None)
    if stop is not None:
        stop()


def _check_fn(fn) -> None:
    if not callable(fn):
        raise TypeError(f"fn must be a function; got {type(fn).__name__}")
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if module in (None, "__main__") or "<" in name:
        raise TypeError(
            f"fn = {getattr(fn, '__name__', fn)!r} is defined in {module or 'no module'}"
            f"{' (a lambda or a nested function)' if '<' in name else ''}; the ranks' processes "
            "import fn by its module and name, so it must be a function of a module "
            "(a .py file), such as the workers of mha_lib.distributed"
        )


def run(
    fn: Callable,
    world_size: int,
    *args,
    per_rank: Sequence[tuple] | None = None,
    backend: str = "gloo",
    timeout: float = 300.0,
    comm_timeout: float = 60.0,
    threads: int = 1,
) -> Ranks:
    """Run fn(*args, *per_rank[rank]) on world_size new processes; return each rank's result.

    fn: a function of a module (each rank imports it), called once on every rank, inside an
    initialised process group (`torch.distributed.get_rank()` tells it which rank it is).
    per_rank: None, or one tuple of extra arguments for each rank, sent to that rank only.
    timeout: seconds for the whole run; a rank still running then is killed. comm_timeout:
    the group's timeout, how long a collective or a receive waits for a peer. threads: torch
    threads per process (1: P processes share the cores without oversubscribing them).
    Arguments and results travel pickled (tensors by value). Raises `GroupError` naming the
    rank and the cause if a rank raises, exits without a result, or hangs.
    """
    _check_fn(fn)
    check_int(world_size, "world_size", 1)
    check_int(threads, "threads", 1)
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' (CPU) or 'nccl' (GPUs); got {backend!r}")
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise ValueError(
            f"backend 'nccl' needs one GPU per rank: world_size = {world_size}, "
            f"GPUs = {torch.cuda.device_count()}"
        )
    for name, value in (("timeout", timeout), ("comm_timeout", comm_timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name} must be a positive number of seconds; got {value!r}")
    if per_rank is not None and (isinstance(per_rank, (str, bytes)) or len(per_rank) != world_size):
        got = len(per_rank) if isinstance(per_rank, Sequence) else type(per_rank).__name__
        raise ValueError(f"per_rank must hold one tuple per rank ({world_size}); got {got}")
    payloads = [
        pickle.dumps((fn, tuple(args) + tuple(per_rank[r] if per_rank else ())))
        for r in range(world_size)
    ]

    ctx = mp.get_context(START_METHOD)
    if START_METHOD == "forkserver":  # the server imports torch once; each rank is a copy
        ctx.set_forkserver_preload(["mha_lib.distributed", fn.__module__])
    pg_timeout = timedelta(seconds=comm_timeout)
    start = time.perf_counter()
    store = dist.TCPStore(HOST, 0, world_size, is_master=True, wait_for_workers=False)
    procs, readers = [], []
    try:
        for rank in range(world_size):
            reader, writer = ctx.Pipe(duplex=False)
            p = ctx.Process(
                target=_rank_main,
                args=(
                    rank,
                    world_size,
                    store.port,
                    backend,
                    pg_timeout,
                    threads,
                    payloads[rank],
                    writer,
                ),
                daemon=True,
            )
            p.start()
            writer.close()  # the child holds its own end
            procs.append(p)
            readers.append(reader)
        reports, together = _collect(procs, readers, start + timeout)
    finally:
        for p in procs:  # whatever happened: nothing outlives the call
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(2.0)
            if p.is_alive():
                p.kill()
                p.join()
        for reader in readers:
            reader.close()
        del store
        _stop_forkserver()
    _raise_if_failed(reports, world_size, timeout, comm_timeout)
    results = Ranks(r[1] for r in reports)
    results.seconds = time.perf_counter() - start
    results.peak_rss = [r[2] for r in reports]
    results.together = together
    return results


def _collect(procs, readers, deadline: float) -> tuple[list, dict[str, int] | None]:
    """One report per rank: ("ok", value, rss), ("error", line, tb, rss), or what became of it;
    and the peak memory of this process and the ranks together (`tree_memory`).

    Returns when every rank has reported or exited, when the deadline passes, or GRACE_S after
    the first failure; ranks with no report then are marked ("running",) or ("exited", code).
    """
    world_size = len(procs)
    reports: list = [None] * world_size
    first_failure = None
    peak = tree_memory([os.getpid(), *descendants(os.getpid())])
    while any(r is None for r in reports):
        now = time.perf_counter()
        end = deadline if first_failure is None else min(deadline, first_failure + GRACE_S)
        if now >= end:
            break
        waiting = [i for i in range(world_size) if reports[i] is None]
        ready = wait(
            [readers[i] for i in waiting] + [procs[i].sentinel for i in waiting],
            min(end - now, SAMPLE_S),
        )
        if peak is not None:  # this process, the ranks, the fork server: all its descendants
            sample = tree_memory([os.getpid(), *descendants(os.getpid())])
            peak = {k: max(peak[k], sample[k]) for k in peak}
        for i in waiting:
            if readers[i] in ready or procs[i].sentinel in ready:
                reports[i] = _read_report(readers[i], procs[i])
                if reports[i] is not None and reports[i][0] != "ok" and first_failure is None:
                    first_failure = time.perf_counter()
    for i, p in enumerate(procs):
        if reports[i] is None:
            reports[i] = ("running",) if p.is_alive() else ("exited", p.exitcode)
    return reports, peak


def _read_report(reader, proc):
    """The rank's report if it sent one; ("exited", code) if it ended without; else None."""
    try:
        if reader.poll():
            kind, *rest = pickle.loads(reader.recv_bytes())
            return (kind, *rest)
    except (EOFError, OSError):
        pass
    if proc.sentinel in wait([proc.sentinel], 0):
        proc.join()
        return ("exited", proc.exitcode)
    return None


def _raise_if_failed(reports, world_size: int, timeout: float, comm_timeout: float):
    if all(r[0] == "ok" for r in reports):
        return
    lines = {}
    for rank, r in enumerate(reports):
        if r[0] == "error":
            lines[rank] = f"raised {r[1]}"
        elif r[0] == "exited":
            lines[rank] = f"exited with code {r[1]} without a result"
        elif r[0] == "running":
            lines[rank] = "still running: killed"
    errors = [rank for rank, r in enumerate(reports) if r[0] == "error"]
    primary = [rank for rank in errors if not _SECONDARY.search(reports[rank][1])]
    exited = [rank for rank, r in enumerate(reports) if r[0] == "exited"]
    running = [rank for rank, r in enumerate(reports) if r[0] == "running"]
    if primary:
        rank = primary[0]
        raise GroupError(rank, world_size, "raised", reports[rank][1], lines, reports[rank][2])
    if exited:
        rank = exited[0]
        cause = f"the process ended with code {reports[rank][1]} without a result"
        raise GroupError(rank, world_size, "exited", cause, lines)
    if errors and running:  # the others gave up waiting: the ranks still running hung
        rank = running[0]
        cause = (
            "still running after the others timed out waiting for it in a collective "
            f"(comm_timeout = {comm_timeout:g} s); killed"
        )
        raise GroupError(rank, world_size, "hung", cause, lines)
    if running:
        rank = running[0]
        cause = f"did not finish within timeout = {timeout:g} s; killed"
        raise GroupError(rank, world_size, "timed out", cause, lines)
    rank = errors[0]  # only consequences reported: name the first
    raise GroupError(rank, world_size, "raised", reports[rank][1], lines, reports[rank][2])


# ----------------------------------------------------------------------------- on every rank


def rank_device() -> torch.device:
    """Where this rank computes: its own GPU under NCCL, the CPU under gloo."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def init_from_env(backend: str = "gloo", comm_timeout: float = 60.0) -> None:
    """Join the group described by torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR...)."""
    torch.set_num_threads(1)
    dist.init_process_group(backend, timeout=timedelta(seconds=comm_timeout))
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", dist.get_rank())))


def whoami() -> dict:
    """Worker: this rank's place in the group and its process."""
    return {
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "backend": dist.get_backend(),
        "pid": os.getpid(),
    }


def in_turn(calls: Sequence[tuple[Callable, tuple]]) -> list:
    """Worker: run each (fn, args) of calls in turn on this rank; return the list of results."""
    return [fn(*args) for fn, args in calls]


def fail_on_rank(bad_rank: int) -> float:
    """Worker: rank bad_rank raises ValueError; the others wait for it in an all_reduce."""
    rank = dist.get_rank()
    if rank == bad_rank:
        raise ValueError(f"rank {rank} fails on purpose before the all_reduce")
    x = torch.ones(1)
    dist.all_reduce(x)
    return float(x)


def hang_on_rank(bad_rank: int, seconds: float = 3600.0) -> float:
    """Worker: rank bad_rank sleeps for `seconds` (it hangs); the others wait in an all_reduce."""
    if dist.get_rank() == bad_rank:
        time.sleep(seconds)
    x = torch.ones(1)
    dist.all_reduce(x)
    return float(x)
