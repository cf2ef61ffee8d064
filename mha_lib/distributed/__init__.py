"""Attention across devices with `torch.distributed`: the part of the library behind notebook 14.

A model too large for one device is split by its heads (tensor parallelism); a sequence too
long for one device is split by its tokens (ring attention). Both run here on P processes of
this machine, which talk through torch.distributed's gloo backend, so they run on a laptop,
on Binder and in CI; with backend="nccl" the same code runs one process per GPU.

Read first: `launch` (how P processes are started, joined in a group, and ended when one
fails, about 200 lines), then `collectives` (the four collectives, and the ring all-reduce
written with point-to-point messages so that its bytes can be counted), then `ring` or
`tensor_parallel`.

A module per idea:
- `launch`: `run(fn, world_size, ...)` starts the processes (torch.multiprocessing, spawn) and
  returns what each rank returned; `GroupError` names the rank that failed and why;
- `collectives`: workers showing all_reduce, all_gather, reduce_scatter and send/recv; the ring
  algorithms with their bytes counted (`Traffic`) and by formula (`ring_bytes`);
- `ring`: ring attention, forward and backward, contiguous and load-balanced ("zigzag") causal
  layouts, the merge of partial results by log-sum-exp, the work and bytes counted;
  `ring_attention_spawn`;
- `decoder`: a Llama-like decoder in one process (SmolLM2's architecture), weights read by name
  and slice from a weight source (seeded random, or given tensors);
- `tensor_parallel`: the same decoder sharded by heads, MLP units and vocabulary, its collectives
  counted; `tensor_parallel_logits`;
- `command`: `python -m mha_lib.distributed collectives|ring|tp`, spawned or under torchrun.

Imports torch, so it is imported explicitly (`from mha_lib.distributed import ...`); the core
never imports it. Workers, the functions that run on every rank, are module functions: spawned
processes import them by name.
"""

from .launch import GroupError, Ranks, run
from .ring import ring_attention_spawn
from .tensor_parallel import tensor_parallel_logits

__all__ = ["GroupError", "Ranks", "ring_attention_spawn", "run", "tensor_parallel_logits"]
