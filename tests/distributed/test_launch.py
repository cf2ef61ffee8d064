"""mha_lib.distributed.launch: run() gives every rank its place and its own arguments and returns
what each returned; a rank that raises, a shape that does not divide, a rank that hangs and a
run past its deadline each end the whole group with a GroupError naming the rank and the cause,
with every process joined or killed; bad arguments are named before anything starts."""

import multiprocessing
import os

import pytest
import torch

from mha_lib.distributed import launch
from mha_lib.distributed.launch import GroupError, fail_on_rank, hang_on_rank, run
from mha_lib.distributed.tensor_parallel import tensor_parallel_rank
from mha_lib.distributed.weights import TINY, RandomWeights
from tests.distributed.distributed_inputs import WORLD_SIZES


def no_child_left():
    """No rank alive, and no fork server either (it would hold torch in memory)."""
    from multiprocessing import forkserver

    server = forkserver._forkserver._forkserver_pid
    return multiprocessing.active_children() == [] and server is None


@pytest.mark.parametrize("P", WORLD_SIZES)
def test_every_rank_knows_its_place(groups, P):
    found = groups[P]["whoami"]
    assert [w["rank"] for w in found] == list(range(P))
    assert {w["world_size"] for w in found} == {P} and {w["backend"] for w in found} == {"gloo"}
    assert len({w["pid"] for w in found} | {os.getpid()}) == P + 1  # P new processes
    assert no_child_left()


def test_run_returns_each_processs_peak_memory_and_all_together(groups):
    groups[2]
    assert len(groups.peak_rss[2]) == 2 and groups.seconds[2] > 0
    if os.name == "posix":  # a process that imported torch holds tens of MB at least
        assert all(rss > 50e6 for rss in groups.peak_rss[2])
    if os.path.exists("/proc/self/smaps_rollup"):  # sampled: this process, the ranks, the server
        together = groups.together[2]
        assert together["rss"] > together["pss"] > 2 * 50e6
        assert together["rss"] > launch.peak_rss() / 2 + sum(groups.peak_rss[2]) / 2
    assert no_child_left()


def test_tree_memory_sums_processes_and_skips_ended_ones():
    """RSS counts a shared page in every process that maps it, PSS splits it between them, so
    RSS >= PSS; a process that no longer exists counts 0."""
    memory = launch.tree_memory([os.getpid()])
    if memory is None:
        pytest.skip("no /proc/<pid>/smaps_rollup here")
    assert memory["rss"] >= memory["pss"] > 10e6
    assert launch.tree_memory([os.getpid(), 2**22 + 12345]) == pytest.approx(memory, rel=0.05)


def test_a_rank_that_raises_ends_the_group_and_is_named():
    with pytest.raises(GroupError) as info:
        run(fail_on_rank, 2, 1, timeout=120)
    err = info.value
    assert (err.rank, err.world_size, err.kind) == (1, 2, "raised")
    assert err.cause == "ValueError: rank 1 fails on purpose before the all_reduce"
    assert str(err).startswith("rank 1 of 2 raised: ValueError: rank 1 fails on purpose")
    assert "rank 0: raised RuntimeError" in str(err)  # the consequence: its peer left
    assert "ValueError" in err.traceback and "fail_on_rank" in err.traceback
    assert "every process of the group was joined or killed" in str(err)
    assert no_child_left()


def test_a_shape_that_does_not_divide_ends_the_group():
    """Every rank finds it (the heads of TINY do not split over 2 ranks); the lowest is named."""
    ids = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(GroupError) as info:
        run(tensor_parallel_rank, 2, RandomWeights(TINY), ids, timeout=120)
    err = info.value
    assert (err.rank, err.kind) == (0, "raised")
    assert "world_size = 2 does not divide num_kv_heads = 3" in err.cause
    assert no_child_left()


def test_a_rank_that_hangs_is_killed_and_named():
    """Rank 0 waits for rank 1 in an all_reduce; after comm_timeout it gives up, and rank 1, still
    sleeping, is killed and named as hung."""
    with pytest.raises(GroupError) as info:
        run(hang_on_rank, 2, 1, comm_timeout=1.5, timeout=120)
    err = info.value
    assert (err.rank, err.kind) == (1, "hung")
    assert "still running after the others timed out waiting for it" in err.cause
    assert err.reports[0].startswith("raised RuntimeError") and "Timed out" in err.reports[0]
    assert "comm_timeout = 1.5 s); killed" in err.cause
    assert no_child_left()


def test_a_run_past_its_deadline_is_killed():
    """A lone rank has nobody to time out with: the deadline ends it."""
    with pytest.raises(GroupError) as info:
        run(hang_on_rank, 1, 0, timeout=2)
    err = info.value
    assert (err.rank, err.world_size, err.kind) == (0, 1, "timed out")
    assert err.cause == "did not finish within timeout = 2 s; killed"
    assert no_child_left()


def test_reports_name_the_cause_before_its_consequences():
    """The ranking of what the ranks reported, without processes: a real error before a peer's
    lost connection, a process that died, a hung rank, the deadline."""
    lost = ("error", "RuntimeError: Connection closed by peer [127.0.0.1]:1234", "tb", None)
    timed_out = ("error", "RuntimeError: Timed out waiting 1500ms for recv operation", "tb", None)
    real = ("error", "ZeroDivisionError: division by zero", "Traceback ...", None)
    ok = ("ok", 1.0, None)
    cases = [
        ([lost, real, lost], 1, "raised"),
        ([ok, ("exited", -9), lost], 1, "exited"),
        ([timed_out, ("running",), timed_out], 1, "hung"),
        ([ok, ("running",), ("running",)], 1, "timed out"),
        ([timed_out, timed_out], 0, "raised"),  # only consequences: the first is named
    ]
    for reports, rank, kind in cases:
        with pytest.raises(GroupError) as info:
            launch._raise_if_failed(reports, len(reports), 60.0, 1.5)
        assert (info.value.rank, info.value.kind) == (rank, kind), reports
    err = info.value
    assert set(err.reports) == {0, 1}
    launch._raise_if_failed([ok, ok], 2, 60.0, 1.5)  # all well: nothing raised


def test_bad_arguments_are_named_before_anything_starts():
    with pytest.raises(TypeError, match="lambda or a nested function"):
        run(lambda: 0, 2)

    def nested():
        return 0

    with pytest.raises(TypeError, match="must be a function of a module"):
        run(nested, 2)
    in_a_notebook = launch.whoami.__class__(launch.whoami.__code__, {}, "whoami")
    in_a_notebook.__module__ = "__main__"
    with pytest.raises(TypeError, match=r"'whoami' is defined in __main__"):
        run(in_a_notebook, 2)
    with pytest.raises(TypeError, match="fn must be a function; got int"):
        run(3, 2)
    with pytest.raises(ValueError, match="world_size must be at least 1; got 0"):
        run(launch.whoami, 0)
    with pytest.raises(TypeError, match="world_size must be an int; got bool"):
        run(launch.whoami, True)
    with pytest.raises(ValueError, match=r"per_rank must hold one tuple per rank \(3\); got 2"):
        run(launch.whoami, 3, per_rank=[(), ()])
    with pytest.raises(ValueError, match=r"backend must be 'gloo' .* got 'mpi'"):
        run(launch.whoami, 2, backend="mpi")
    if torch.cuda.device_count() < 64:
        with pytest.raises(ValueError, match="backend 'nccl' needs one GPU per rank"):
            run(launch.whoami, 64, backend="nccl")
    with pytest.raises(ValueError, match="comm_timeout must be a positive number"):
        run(launch.whoami, 2, comm_timeout=0)
    assert no_child_left()
