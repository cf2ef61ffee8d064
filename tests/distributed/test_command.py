"""mha_lib.distributed.command: the jobs pass on 1 to 4 processes (SmolLM2's on 3, against the model
in one process); `python -m mha_lib.distributed` starts its own processes, and under torchrun
joins the group torchrun starts."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mha_lib.distributed.command import main
from tests.distributed.distributed_inputs import WORLD_SIZES

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("P", WORLD_SIZES)
def test_jobs_print_their_check_on_rank_0_only(groups, P):
    for job in ("job_ring", "job_collectives", "job_tp"):
        if job == "job_tp" and 3 % P:
            continue  # the random-weight model has 3 key/value heads
        lines = groups[P][job]
        assert lines[0].startswith("✓ ") and f" {P} ranks" in lines[0]
        assert lines[1:] == [None] * (P - 1)


def test_the_smollm2_job_continues_the_prompt_like_the_one_process_model(groups):
    lines = groups[3]["job_smollm2"]
    assert lines[1:] == [None, None]
    assert lines[0] == (
        "✓ SmolLM2-135M sharded over 3 ranks == the model in one process (logits to 0.0005, "
        "the same 2 greedy tokens): 'The capital of France is' -> ' Paris.'"
    )


def test_main_spawns_its_processes(capsys):
    assert main(["tp", "--world-size", "1"]) == 0
    assert (
        capsys.readouterr().out
        == "✓ the random-weight decoder sharded over 1 ranks == DecoderLM in one process\n"
    )


def test_under_torchrun():
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:
        pytest.skip("torchrun is not installed next to this Python")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = [
        torchrun,
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "mha_lib.distributed",
        "ring",
        "--tokens",
        "9",
        "--causal",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "✓ ring attention (zigzag, is_causal=True) on 2 ranks, N = 9 == SDPA\n"
