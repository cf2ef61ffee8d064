"""Attention across devices with `torch.distributed`: the part of the library behind notebook 14.

A model too large for one device is split by its heads (tensor parallelism); a sequence too
long for one device is split by its tokens (ring attention). Both run here on P processes of
this machine, which talk through torch.distributed's gloo backend, so they run on a laptop,
on Binder and in CI; with backend="nccl" the same code runs one process per GPU. The model
split by heads is notebook 12's (`mha_lib.nn.decoder`, read by `mha_lib.llm`): SmolLM2-135M,
all 30 layers, over 3 processes, each reading only its third of the GGUF file.

Read first: `launch` (how P processes are started, joined in a group, and ended when one
fails, about 400 lines), then `collectives` (the four collectives, and the ring all-reduce
written with point-to-point messages so that its bytes can be counted), then `ring` or
`tensor_parallel` (with `weights`).

A module per idea:
- `launch`: `run(fn, world_size, ...)` starts the processes (torch.multiprocessing: forkserver,
  or spawn where there is none) and returns what each rank returned, with the memory of all
  the processes together; `GroupError` names the rank that failed and why;
- `collectives`: workers showing all_reduce, all_gather, reduce_scatter and send/recv; the ring
  algorithms with their bytes counted (`Traffic`) and by formula (`ring_bytes`);
- `ring`: ring attention, forward and backward, contiguous and load-balanced ("zigzag") causal
  layouts, the merge of partial results by log-sum-exp, the work and bytes counted;
  `ring_attention_spawn`;
- `weights`: where each rank's weights come from: `GGUFWeights` (a GGUF file, each rank reading
  its rows and columns only), `RandomWeights` (seeded, the same in every process), `TINY`;
- `tensor_parallel`: notebook 12's decoder sharded by heads, MLP units and vocabulary, its
  collectives counted, the one-process model as the reference; `tensor_parallel_logits`;
- `command`: `python -m mha_lib.distributed collectives|ring|tp|smollm2`, spawned or under
  torchrun.

Imports torch, so it is imported explicitly (`from mha_lib.distributed import ...`); the core
never imports it.

Edges: `llm` each rank reads its shard of notebook 12's GGUF file with its reader and loader
(`llm.gguf_file`, `llm.loader`), and the terminal job decodes with its tokenizer.

Workers, the functions that run on every rank, are module functions: the ranks import them by
module and name.
"""

from .launch import GroupError, Ranks, run
from .ring import ring_attention_spawn
from .tensor_parallel import tensor_parallel_logits

__all__ = ["GroupError", "Ranks", "ring_attention_spawn", "run", "tensor_parallel_logits"]
