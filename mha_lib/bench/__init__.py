"""The series' benchmarks, one module each, run through one entry point:

    python -m mha_lib.bench numpy   # vectorised vs per-head loop (notebook 03)
    python -m mha_lib.bench torch   # the PyTorch module vs nn.MultiheadAttention (notebook 04)

- `timing`: interleaved repeats and medians, shared by all of them;
- `numpy_mha`, `torch_mha`: one benchmark each (`torch_mha` imports torch).

Importing this package imports neither numpy's benchmark nor torch; the entry
point (`__main__`) imports only the benchmark it is asked for.
"""

from .timing import interleaved_medians

__all__ = ["interleaved_medians"]
