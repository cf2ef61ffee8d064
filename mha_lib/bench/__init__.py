"""The series' benchmarks, one module each, run through one entry point:

    python -m mha_lib.bench numpy   # vectorised vs per-head loop (notebook 03)
    python -m mha_lib.bench torch   # the PyTorch module vs nn.MultiheadAttention (notebook 04)
    python -m mha_lib.bench efficient  # KV cache, GQA, FlashAttention (notebook 08)
    python -m mha_lib.bench triton  # Triton FlashAttention vs SDPA, on a GPU (notebook 09)
    python -m mha_lib.bench rope    # rope vs transformers' apply_rotary_pos_emb (notebook 10)
    python -m mha_lib.bench deltanet  # the gated delta rule: chunked, step by step (notebook 16)
    python -m mha_lib.bench whisper  # Whisper base vs transformers' generate (notebook 17)
    python -m mha_lib.bench sparse  # top-k attention vs dense SDPA at growing N (notebook 18)

- `timing`: interleaved repeats and medians, shared by all of them;
- `memory`: peak memory growth of one pass in a fresh process (imports torch);
- `numpy_mha`, `torch_mha`, `efficient`, `triton`, `rope`, `deltanet`, `whisper`, `sparse`: one
  benchmark each (all but the first import torch; `triton` also triton; `whisper` also
  transformers).

Importing this package imports neither numpy's benchmark nor torch; the entry
point (`__main__`) imports only the benchmark it is asked for.
"""

from .timing import interleaved_medians

__all__ = ["interleaved_medians"]
