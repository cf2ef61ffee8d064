"""The benchmarks: one entry point, no import cycle, each benchmark runnable on tiny sizes."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mha_lib.bench import interleaved_medians
from mha_lib.bench.__main__ import BENCHMARKS, main


def test_interleaved_medians_times_every_callable():
    calls = []
    med = interleaved_medians({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, 3)
    assert set(med) == {"a", "b"} and all(t >= 0 for t in med.values())
    assert calls == ["a", "b"] * 4  # one warm-up round, then 3 interleaved rounds


def test_importing_the_package_imports_no_benchmark_and_no_torch():
    code = (
        "import sys, mha_lib.bench; "
        "print(sorted(m for m in sys.modules if m.startswith(('mha_lib.bench.', 'torch'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['mha_lib.bench.timing']"


@pytest.mark.parametrize("argv", [[], ["nonsense"]])
def test_entry_point_lists_the_benchmarks(capsys, argv):
    assert main(argv) == 2
    out = capsys.readouterr().out
    assert all(name in out for name in BENCHMARKS)


def test_numpy_benchmark_runs_on_tiny_sizes(tmp_path, capsys):
    path = tmp_path / "bench.json"
    assert main(["numpy", "--sizes", "8", "16", "--json", str(path)]) == 0
    rows = json.loads(path.read_text())["numpy"]
    assert [r["N"] for r in rows] == [8, 16]
    assert all(r["speedup"] > 0 for r in rows)
    assert "loop / vectorised" in capsys.readouterr().out


def test_torch_benchmark_runs_on_tiny_sizes(tmp_path):
    pytest.importorskip("torch")
    path = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "mha_lib.bench", "torch", "--sizes", "16", "--batch", "1"]
    cmd += ["--memory-sizes", "32", "--json", str(path)]
    subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300)
    numbers = json.loads(path.read_text())
    assert [r["N"] for r in numbers["forward"]] == [16]
    assert {r["mode"] for r in numbers["memory"]} == {"forward", "forward_backward"}
    from mha_lib.bench.torch_mha import markdown_torch

    lines = markdown_torch(numbers)  # speed: header + 1 row; memory: header + 2 rows
    assert len(lines) == 8 and lines[2].startswith("| 16 | ") and lines[6].startswith("| forward,")


def test_numpy_markdown_prints_the_readme_rows(tmp_path, capsys):
    path = tmp_path / "numpy.json"
    rows = [{"N": 64, "loop_ms": 2.131, "vectorised_ms": 1.3, "speedup": 1.6392, "repeats": 5}]
    path.write_text(json.dumps({"numpy": rows}))
    assert main(["numpy", "--markdown", str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "| N | loop ms | vectorised ms | loop / vectorised |",
        "|---|---|---|---|",
        "| 64 | 2.13 | 1.30 | 1.64× |",
    ]


def test_torch_markdown_prints_the_readme_rows(tmp_path, capsys):
    pytest.importorskip("torch")
    fwd = {"N": 64, "module_ms": 9.04, "nn.MHA_ms": 9.1, "module_speedup": 1.0177}
    fwd["module_gemm_fraction"] = 0.913
    fb = {"N": 64, "module_ms": 28.0, "nn.MHA_ms": 28.92, "module_speedup": 1.0311}
    mem = [
        {"mode": "forward", "N": 4096, "B": 1, "naive_mib": 1053.2, "module_mib": 43.4},
        {"mode": "forward_backward", "N": 4096, "B": 1, "naive_mib": 1573, "module_mib": 69.1},
    ]
    mem[0]["nn.MHA_mib"], mem[1]["nn.MHA_mib"] = 540.6, 69.0
    path = tmp_path / "torch.json"
    path.write_text(json.dumps({"forward": [fwd], "forward_backward": [fb], "memory": mem}))
    assert main(["torch", "--markdown", str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "| N | forward: module ms | nn.MHA ms | module vs MHA | % GEMM "
        "| forward+backward: module ms | nn.MHA ms | module vs MHA |",
        "|---|---|---|---|---|---|---|---|",
        "| 64 | 9.0 | 9.1 | 1.02× | 91% | 28.0 | 28.9 | 1.03× |",
        "",
        "| peak memory growth of one pass, B = 1 | naive | this module | nn.MHA |",
        "|---|---|---|---|",
        "| forward, N = 4096 | 1053 MiB | 43 MiB | 541 MiB |",
        "| forward + backward, N = 4096 | 1573 MiB | 69 MiB | 69 MiB |",
    ]


def test_markdown_reads_what_json_writes(tmp_path, capsys):
    path = tmp_path / "bench.json"
    assert main(["numpy", "--sizes", "8", "16", "--json", str(path)]) == 0
    capsys.readouterr()
    assert main(["numpy", "--markdown", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and lines[2].startswith("| 8 | ") and lines[3].startswith("| 16 | ")


def test_efficient_benchmark_runs_on_tiny_sizes(tmp_path):
    pytest.importorskip("torch")
    path = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "mha_lib.bench", "efficient", "--sizes", "8", "16"]
    cmd += ["--flash-sizes", "32", "--memory-sizes", "32", "--gqa-length", "16"]
    cmd += ["--kv-memory-sizes", "16"]
    cmd += ["--json", str(path)]
    subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300)
    numbers = json.loads(path.read_text())
    assert [r["N"] for r in numbers["kv_cache"]] == [8, 16]
    assert [r["h_kv"] for r in numbers["gqa_memory"]] == [32, 8, 1]
    assert all(r["computed_mib"] == r["measured_mib"] for r in numbers["gqa_memory"])
    assert "SDPA_peak_mib" in numbers["flash"][0]
    assert "recompute_step_peak_mib" in numbers["kv_cache"][1]


def test_mla_benchmark_runs_on_tiny_sizes(tmp_path):
    pytest.importorskip("torch")
    path = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "mha_lib.bench", "mla", "--sizes", "8", "32", "--heads", "2"]
    cmd += ["--repeats", "1", "--json", str(path)]
    subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300)
    rows = json.loads(path.read_text())["rows"]
    assert [r["m"] for r in rows] == [8, 32]
    assert all(r["max_abs_difference"] < 1e-3 for r in rows)
    assert all(r["absorbed_flops_per_byte"] > r["expanded_flops_per_byte"] for r in rows)
    assert {"rebuild_ms", "expanded_ms", "absorbed_ms"} <= set(rows[0])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc: Linux only")
def test_binder_walk_keeps_kernels_alive_and_adds_them_up(capsys):
    """`python -m mha_lib.bench binder` on the two smallest notebooks: one row each, the running
    total covers both live kernels, and the README table has a column per notebook."""
    from mha_lib.bench import binder

    root = Path(__file__).resolve().parents[1] / "notebooks"
    paths = [root / "00_start_here.ipynb", root / "01_self_attention_without_weights.ipynb"]
    assert main(["binder", *map(str, paths), "--markdown"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "all live kernels" in line and "|" not in line]
    assert [line.split()[0] for line in lines] == [p.name for p in paths]
    totals = [float(line.split("all live kernels")[1].split()[0]) for line in lines]
    kernels = [float(line.split("kernel")[1].split()[0]) for line in lines]
    assert 20 < kernels[0] < 2000 and 20 < kernels[1] < 2000  # a Python kernel, plausibly sized
    assert totals[0] == pytest.approx(kernels[0], abs=1)
    assert totals[1] > max(kernels) + 10  # both kernels were alive when the second was measured
    assert "| after | 00 | 01 |" in out and "| all live kernels, MB PSS |" in out
    assert "| run time, s |" in out
    assert binder.markdown([]).startswith("| after |")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_kernels_memory_includes_the_processes_it_left_running():
    """Notebook 14's kernel leaves a server process running: the walk must count it."""
    from mha_lib.bench import binder

    sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
    code = f"import subprocess, time; subprocess.Popen({sleeper!r}); time.sleep(30)"
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.time() + 20
        while not binder.descendants(parent.pid) and time.time() < deadline:
            time.sleep(0.1)
        (child,) = binder.descendants(parent.pid)  # the sleeper
        assert binder.descendants(child) == []
        alone, with_child = binder.pss_mb(parent.pid), binder.tree_pss_mb(parent.pid)
        assert with_child == pytest.approx(alone + binder.pss_mb(child), rel=0.2)
        assert with_child > alone + 1  # a Python interpreter costs more than a megabyte
    finally:
        parent.kill()
        parent.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_walk_sees_a_process_that_lives_only_a_moment():
    """A child that holds 200 MB for a second, then ends: the sampled peak of the tree sees it."""
    from mha_lib.bench import binder

    child = "b = bytearray(200 * 2**20); import time; time.sleep(1.5)"
    code = f"import subprocess, sys, time; subprocess.run([sys.executable, '-c', {child!r}])"
    with binder.TreePeak(every=0.05) as watch:
        parent = subprocess.Popen([sys.executable, "-c", code + "; time.sleep(1)"])
        watch.pid = parent.pid
        parent.wait()
        time.sleep(0.1)
    assert watch.peak_mb > 200  # the child's 200 MB, while it lived


def test_rope_benchmark_runs_on_tiny_sizes(tmp_path):
    pytest.importorskip("torch")
    path = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "mha_lib.bench", "rope", "--shape", "2", "2", "16", "8"]
    cmd += ["--repeats", "2", "--threads", "1", "--json", str(path)]
    subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300)
    row = json.loads(path.read_text())["rope"]
    assert (row["N"], row["d"]) == (16, 8) and row["ours_ms"] > 0
    if "ratio" in row:  # transformers installed: same rotation, to float32 rounding
        assert row["max_abs_difference"] < 1e-5 and row["ratio"] > 0


def test_llm_benchmark_runs_on_tiny_sizes(tmp_path):
    """Our decoder alone (transformers' load takes a minute): a short prefill and decode."""
    path = tmp_path / "llm.json"
    cmd = [
        sys.executable,
        "-m",
        "mha_lib.bench",
        "llm",
        "--no-reference",
        "--prompt-len",
        "8",
        "--new-tokens",
        "3",
        "--repeats",
        "1",
        "--json",
        str(path),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "tokens/s with the KV cache" in result.stdout
    row = json.loads(path.read_text())
    assert row["load_ours_s"] > 0 and row["decode_ours_tok_s"] > 0


def test_llm_benchmark_runs_gemma3_on_tiny_sizes(tmp_path):
    """--model gemma3: Gemma 3 270M alone, a short prefill and decode (its packages installed)."""
    from tests.llm.test_kquants import GEMMA_INSTALLED

    if not GEMMA_INSTALLED:
        pytest.skip("the gemma3 packages are not installed")
    path = tmp_path / "llm.json"
    cmd = [
        sys.executable,
        "-m",
        "mha_lib.bench",
        "llm",
        "--model",
        "gemma3",
        "--no-reference",
        "--prompt-len",
        "8",
        "--new-tokens",
        "3",
        "--repeats",
        "1",
        "--json",
        str(path),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Gemma 3 270M" in result.stdout
    row = json.loads(path.read_text())
    assert row["model"] == "gemma3" and row["decode_ours_tok_s"] > 0


def test_whisper_benchmark_runs_on_tiny_sizes(tmp_path, capsys):
    """--tiny: a random Whisper of odd sizes against transformers holding its weights, the whole
    benchmark (the equality check included: the same tokens and token times, else status 1),
    and --markdown prints docs/benchmarks.md's table from the JSON."""
    pytest.importorskip("transformers")
    path = tmp_path / "whisper.json"
    cmd = [sys.executable, "-m", "mha_lib.bench", "whisper", "--tiny", "--repeats", "1"]
    cmd += ["--json", str(path)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "the same 6 tokens from both" in result.stdout
    row = json.loads(path.read_text())
    assert row["model"] == "tiny random Whisper" and row["token_times_max_difference_s"] < 1e-6
    assert all(row[f"{m}_speed_ratio"] > 0 for m in ("encode", "greedy", "timed"))
    assert main(["whisper", "--markdown", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6 and lines[3].startswith("| encode, (1, 80, 3000) spectrogram | ")


def test_whisper_benchmark_stops_where_ours_and_transformers_differ(capsys):
    """The check before the timing: tokens that part, or token times that differ, are printed
    and stop the benchmark with status 1."""
    from types import SimpleNamespace

    torch = pytest.importorskip("torch")
    from mha_lib.bench.whisper import check_equal

    def fns(greedy_ref, times_ref):
        return {
            "greedy ours": lambda: [5, 6, 9],  # 9: the end token, left out before comparing
            "greedy transformers": lambda: torch.tensor([greedy_ref]),
            "timed ours": lambda: SimpleNamespace(tokens=[5, 6], token_times=[0.0, 0.1], text=""),
            "timed transformers": lambda: {
                "sequences": torch.tensor([[5, 6]]),
                "token_timestamps": torch.tensor([times_ref]),
            },
        }

    assert check_equal(fns([5, 6], [0.0, 0.1]), eot=9)["tokens"] == 2
    for greedy_ref, times_ref, message in (
        ([5, 7], [0.0, 0.1], "greedy transcription, no token times: the tokens part at 1"),
        ([5, 6], [0.0, 0.12], "token times differ by up to 0.02 s"),
    ):
        with pytest.raises(SystemExit) as stop:
            check_equal(fns(greedy_ref, times_ref), eot=9)
        assert stop.value.code == 1
        assert message in capsys.readouterr().out


def test_deltanet_benchmark_runs_on_tiny_sizes(tmp_path, capsys):
    """Tiny sizes: the three forms of the rule agree (the benchmark asserts it), every time is
    positive, and --markdown prints docs/benchmarks.md's two tables from the JSON."""
    pytest.importorskip("torch")
    path = tmp_path / "deltanet.json"
    cmd = [
        sys.executable,
        "-m",
        "mha_lib.bench",
        "deltanet",
        "--shape",
        "1",
        "2",
        "40",
        "8",
        "--chunk-size",
        "8",
        "--decode-sizes",
        "16",
        "64",
        "--repeats",
        "1",
        "--threads",
        "1",
        "--json",
        str(path),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "chunked is" in result.stdout and "one decoding step" in result.stdout
    numbers = json.loads(path.read_text())
    seq = numbers["sequence"]
    assert seq["N"] == 40 and seq["chunked_ms"] > 0 and seq["recurrence_ms"] > 0
    assert seq["recurrence_difference"] < 1e-4
    if "transformers_ms" in seq:
        assert seq["transformers_difference"] < 1e-4
    assert [r["N"] for r in numbers["decode"]] == [16, 64]
    assert numbers["decode"][1]["cache_mib"] == 4 * numbers["decode"][0]["cache_mib"]
    assert numbers["decode"][0]["state_mib"] == 2 * 8 * 8 * 4 / 2**20
    # the per-call overhead: the same steps at h = 1, d = 2, timed beside them (no timing is
    # asserted, only that it was measured and reported)
    assert seq["recurrence_tiny_ms"] > 0 and seq["overhead_share"] > 0
    assert numbers["decode"][0]["tiny_step_ms"] > 0
    assert "per-call overhead" in result.stdout
    assert main(["deltanet", "--markdown", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| the whole sequence, N = 40, h = 2, d = 8, 1 thread |")
    assert any(
        line.startswith("| step by step at h = 1, d = 2 (per-call overhead) |") for line in lines
    )
    assert lines[-3].startswith("| 64 |") and "per-call overhead" in lines[-1]


def test_sparse_benchmark_runs_on_tiny_sizes(tmp_path, capsys):
    """--tiny: N below and above k, the gathered and mask paths checked equal before timing,
    every time positive, and --markdown prints docs/benchmarks.md's tables from the JSON."""
    pytest.importorskip("torch")
    path = tmp_path / "sparse.json"
    cmd = [sys.executable, "-m", "mha_lib.bench", "sparse", "--tiny", "--repeats", "1"]
    cmd += ["--threads", "1", "--json", str(path)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "gathered and mask paths agree at every N" in result.stdout
    numbers = json.loads(path.read_text())
    assert numbers["tiny"] and numbers["sizes"]["topk"] == 8
    for part in ("prefill", "decode"):
        rows = numbers[part]
        assert [r["N"] for r in rows] == [6, 20]  # below and above k = 8
        assert all(r["gathered_vs_mask_difference"] < 1e-4 for r in rows)
        for r in rows:
            assert all(r[f"{name}_ms"] > 0 for name in ("dense", "indexer", "mask", "gathered"))
            assert 0 < r["indexer_share_gathered"] < 1
    assert main(["sparse", "--markdown", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| prefill, N tokens (B = 2, h = 2, d = 8, H = 2, D = 8, k = 8, ")
    assert lines[2].startswith("| 6 | ") and lines[3].startswith("| 20 | ")
    assert lines[-2].startswith("Prefill: indexer + gathered keys is faster than dense")
    assert lines[-1].startswith("Decoding: indexer + gathered keys is faster than dense")


def test_sparse_benchmark_stops_where_the_two_paths_differ(monkeypatch, capsys):
    """The check before the timing: attention over the gathered keys that is not the mask path's
    is printed and stops the benchmark with status 1."""
    pytest.importorskip("torch")
    from mha_lib.bench import sparse

    right = sparse.gathered_attention
    monkeypatch.setattr(sparse, "gathered_attention", lambda *a: right(*a) * 1.01)
    with pytest.raises(SystemExit) as stop:
        main(["sparse", "--tiny", "--repeats", "1"])
    assert stop.value.code == 1
    assert "attention over the gathered keys differs from the mask path" in capsys.readouterr().out


def test_sparse_benchmark_says_from_which_n_sparse_wins():
    """The smallest N from which sparse is faster at every larger N measured, else None."""
    pytest.importorskip("torch")
    from mha_lib.bench.sparse import wins_from

    def rows(*ratios):
        return [{"N": 2**i, "r": r} for i, r in enumerate(ratios)]

    assert wins_from(rows(0.5, 0.9, 1.2, 1.5), "r") == 4
    assert wins_from(rows(0.5, 1.1, 0.9, 1.5), "r") == 8  # a win that did not last is not it
    assert wins_from(rows(0.5, 0.9, 1.0), "r") is None
    assert wins_from(rows(1.2, 1.3), "r") == 1
