"""`python -m mha_lib.bench WHICH [options]`: run one of the series' benchmarks.

WHICH picks the module; the options after it are that benchmark's own
(`python -m mha_lib.bench torch --help` lists them).
"""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = {
    "numpy": ("numpy_mha", "numpy multi-head attention: vectorised vs per-head loop"),
    "torch": ("torch_mha", "the PyTorch module vs nn.MultiheadAttention (speed and memory)"),
    "efficient": ("efficient", "KV cache, GQA cache memory, plain-torch FlashAttention vs SDPA"),
    "mla": ("mla", "notebook 11's latent attention: a decoding step rebuilt, expanded, absorbed"),
    "triton": ("triton", "notebook 09's Triton FlashAttention vs SDPA's flash backend (GPU)"),
    "rope": ("rope", "notebook 10's rope vs transformers' apply_rotary_pos_emb (ratio)"),
    "llm": ("llm", "notebook 12's decoder vs transformers: loading, prefill, decoding (CPU)"),
    "whisper": ("whisper", "notebook 17's Whisper base vs transformers: load, encode, transcribe"),
    "deltanet": ("deltanet", "notebook 16's gated delta rule: chunked, step by step, decoding"),
    "sparse": ("sparse", "notebook 18's top-k attention (the indexer's keys) vs dense SDPA"),
    "binder": ("binder", "the series walked with every kernel alive: memory per kernel (Linux)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in BENCHMARKS:
        print("usage: python -m mha_lib.bench {" + ",".join(BENCHMARKS) + "} [options]")
        for name, (_, what) in BENCHMARKS.items():
            print(f"  {name:<10} {what}")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(f".{BENCHMARKS[argv[0]][0]}", __package__)
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
