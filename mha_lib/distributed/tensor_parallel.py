"""Tensor parallelism: the heads, the MLP and the vocabulary of a decoder split over P ranks.

Derived in notebook 14 §3 (Shoeybi et al. 2019, "Megatron-LM"). Notebook 03 §5 wrote the output
of multi-head attention as a sum over heads, Concat(head_1..head_h) W_O = Σ_h head_h W_O^h.
The heads are independent until W_O sums them, so rank r can hold its own heads whole:
- W_Q, W_K, W_V split by columns (in x @ W: the output features, i.e. by head): column-parallel;
  with grouped-query attention each rank takes whole key/value groups, the query heads of a
  group with their shared key/value head;
- W_O split by rows (the input features that face each head): row-parallel; rank r computes
  Σ_{h in r} head_h W_O^h, a partial sum, and one all_reduce adds the P partial sums;
- the MLP the same way: W_gate and W_up by columns (SwiGLU's product is elementwise, so each rank
  keeps whole hidden units), W_down by rows, one all_reduce;
- the embedding by rows (vocabulary-parallel): rank r holds the rows of its vocabulary range,
  looks up the ids in its range (zeros for the others) and an all_reduce completes the
  lookup; the tied output head uses the same rows, so rank r computes the logits of its range
  and an all_gather puts the P ranges side by side.
The norms are tiny and every rank holds them whole. No rank holds the whole model.

Weights are stored (out, in) as in PyTorch and Hugging Face (y = x @ W.T): "by columns of W"
above is by rows of the stored weight, and the reverse. `shard_plan` says, per weight, the rows
and columns of the stored tensor that rank r reads.

What it holds:
- `check_world_size(config, world_size)`: the sizes P must divide, with the message naming them;
- `shard_plan(config, rank, world_size)`: {name: (rows, cols)} slices of each stored weight;
- `load_shard(config, weights, rank, world_size)`: this rank's shard from a weight source
  (`decoder.RandomWeights`, `decoder.TensorWeights`, or any callable(name, rows, cols)), and
  the numbers read;
- `Collectives`: the all_reduce and all_gather of the forward pass, with their payload bytes
  counted per place (embedding, attention, mlp, logits); counted=True runs the all_reduce as
  `collectives.ring_all_reduce`, whose bytes on the wire are counted too;
- `sharded_logits(config, shard, input_ids, comm)`: the forward pass on this rank;
- `tensor_parallel_rank(config, weights, input_ids, counted)`: worker;
- `all_reduce_bytes(config, world_size, bytes_per_number)`: the bytes per token, by formula;
- `tensor_parallel_logits(input_ids, world_size, config=TINY, weights=None)`: the whole model
  sharded over world_size new processes; returns the logits (B, N, V).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import Tensor

from .._checks import check_int
from .collectives import Traffic, ring_all_reduce
from .decoder import (
    ALL,
    TINY,
    DecoderConfig,
    RandomWeights,
    _check_ids,
    attention_heads,
    rms_norm,
    swiglu,
)
from .launch import rank_device, run

__all__ = [
    "Collectives",
    "all_reduce_bytes",
    "check_world_size",
    "load_shard",
    "shard_plan",
    "sharded_logits",
    "tensor_parallel_logits",
    "tensor_parallel_rank",
]


def check_world_size(config: DecoderConfig, world_size: int) -> None:
    """Raise ValueError unless world_size divides the key/value heads, the MLP and the
    vocabulary."""
    P = check_int(world_size, "world_size", 1)
    for what, n in (
        ("num_kv_heads", config.num_kv_heads),  # whole key/value groups per rank
        ("intermediate", config.intermediate),
        ("vocab_size", config.vocab_size),
    ):
        if n % P:
            raise ValueError(
                f"world_size = {P} does not divide {what} = {n}: each rank must hold "
                f"{what} / world_size whole {'key/value heads' if what == 'num_kv_heads' else what}"
            )


def _range(n: int, rank: int, world_size: int) -> slice:
    share = n // world_size
    return slice(rank * share, (rank + 1) * share)


def shard_plan(config: DecoderConfig, rank: int, world_size: int) -> dict[str, tuple[slice, slice]]:
    """{name: (rows, cols)}: the part of each stored (out, in) weight that `rank` holds."""
    check_world_size(config, world_size)
    c, P = config, world_size
    heads = _range(c.num_heads * c.head_dim, rank, P)  # rank r's query heads, whole
    kv = _range(c.num_kv_heads * c.head_dim, rank, P)  # and the key/value heads they share
    hidden = _range(c.intermediate, rank, P)
    plan = {"model.embed_tokens.weight": (_range(c.vocab_size, rank, P), ALL)}
    for i in range(c.num_layers):
        p = f"model.layers.{i}."
        plan |= {
            p + "input_layernorm.weight": (ALL, ALL),
            p + "self_attn.q_proj.weight": (heads, ALL),  # column-parallel W_Q
            p + "self_attn.k_proj.weight": (kv, ALL),
            p + "self_attn.v_proj.weight": (kv, ALL),
            p + "self_attn.o_proj.weight": (ALL, heads),  # row-parallel W_O
            p + "post_attention_layernorm.weight": (ALL, ALL),
            p + "mlp.gate_proj.weight": (hidden, ALL),
            p + "mlp.up_proj.weight": (hidden, ALL),
            p + "mlp.down_proj.weight": (ALL, hidden),
        }
    plan["model.norm.weight"] = (ALL, ALL)
    return plan


def load_shard(config: DecoderConfig, weights, rank: int, world_size: int) -> tuple[dict, int]:
    """This rank's weights {name: tensor}, read slice by slice from `weights`; and how many
    numbers were read (nothing else is asked of the source)."""
    shard, read = {}, 0
    for name, (rows, cols) in shard_plan(config, rank, world_size).items():
        shard[name] = weights(name, rows, cols)
        read += shard[name].numel()
    return shard, read


@dataclass
class Collectives:
    """The forward pass's collectives, counted: payload bytes per place, and (counted=True) the
    bytes this rank put on the wire in the ring all_reduce."""

    counted: bool = False
    payload: dict[str, int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    traffic: Traffic = field(default_factory=Traffic)

    def _note(self, where: str, x: Tensor) -> None:
        self.payload[where] = self.payload.get(where, 0) + x.numel() * x.element_size()
        self.calls[where] = self.calls.get(where, 0) + 1

    def all_reduce(self, x: Tensor, where: str) -> Tensor:
        """The sum of x over the ranks (a new tensor when counted, else x summed in place)."""
        self._note(where, x)
        if self.counted:
            return ring_all_reduce(x, self.traffic)
        dist.all_reduce(x)
        return x

    def all_gather_last(self, x: Tensor, where: str) -> Tensor:
        """Every rank's x side by side along the last axis."""
        self._note(where, x)
        pieces = [torch.empty_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(pieces, x.contiguous())
        return torch.cat(pieces, dim=-1)


def sharded_logits(
    config: DecoderConfig, shard: dict[str, Tensor], input_ids: Tensor, comm: Collectives
) -> Tensor:
    """The decoder's forward pass on this rank's shard; every rank ends with the logits
    (B, N, V)."""
    c = config
    E = shard["model.embed_tokens.weight"]  # (V/P, C): this rank's vocabulary range
    first = dist.get_rank() * E.shape[0]
    local = input_ids - first  # (B, N)
    mine = (local >= 0) & (local < E.shape[0])
    x = E[local.clamp(0, E.shape[0] - 1)] * mine[..., None]  # (B, N, C): zeros for others' ids
    x = comm.all_reduce(x, "embedding")  # each id found on exactly one rank
    for i in range(c.num_layers):
        w = {
            n.removeprefix(f"model.layers.{i}."): t
            for n, t in shard.items()
            if n.startswith(f"model.layers.{i}.")
        }
        h = rms_norm(x, w["input_layernorm.weight"], c.rms_eps)
        partial = attention_heads(
            h, *(w[f"self_attn.{p}_proj.weight"] for p in "qkvo"), c.head_dim, c.rope_base
        )  # (B, N, C): Σ over this rank's heads of head_h W_O^h
        x = x + comm.all_reduce(partial, "attention")
        h = rms_norm(x, w["post_attention_layernorm.weight"], c.rms_eps)
        partial = swiglu(h, *(w[f"mlp.{p}_proj.weight"] for p in ("gate", "up", "down")))
        x = x + comm.all_reduce(partial, "mlp")
    x = rms_norm(x, shard["model.norm.weight"], c.rms_eps)
    return comm.all_gather_last(x @ E.T, "logits")  # (B, N, V/P) per rank -> (B, N, V)


def tensor_parallel_rank(
    config: DecoderConfig, weights, input_ids: Tensor, counted: bool = False
) -> dict:
    """Worker: load this rank's shard, run the forward pass; returns {"logits" (B, N, V),
    "read" (numbers read from the source), "held" (numbers of the shard), "payload" and "calls"
    per place, "traffic" (wire bytes, when counted)}."""
    r, P = dist.get_rank(), dist.get_world_size()
    check_world_size(config, P)
    ids = _check_ids(input_ids, config.vocab_size).to(rank_device())
    shard, read = load_shard(config, weights, r, P)
    shard = {n: t.to(ids.device) for n, t in shard.items()}
    comm = Collectives(counted=counted)
    with torch.no_grad():
        logits = sharded_logits(config, shard, ids, comm)
    return {
        "logits": logits.cpu(),
        "read": read,
        "held": sum(t.numel() for t in shard.values()),
        "payload": comm.payload,
        "calls": comm.calls,
        "traffic": comm.traffic,
    }


def all_reduce_bytes(
    config: DecoderConfig, world_size: int, bytes_per_number: int = 4
) -> dict[str, float]:
    """Per token, by formula: "per_layer_payload", the bytes handed to all_reduce in one layer
    (two all_reduces of C numbers: after W_O and after W_down); "per_layer_sent", what one rank
    sends for them in a ring all_reduce (2 (P-1)/P of the payload); the same for the whole model
    ("payload", "sent"), with the embedding's all_reduce (C numbers) and the logits' all_gather
    (V/P numbers from each rank)."""
    check_world_size(config, world_size)
    P, b, c = world_size, bytes_per_number, config
    per_layer = 2 * c.hidden * b
    ring = 2 * (P - 1) / P
    return {
        "per_layer_payload": per_layer,
        "per_layer_sent": ring * per_layer,
        "payload": c.num_layers * per_layer + c.hidden * b + c.vocab_size // P * b,
        "sent": ring * (c.num_layers * per_layer + c.hidden * b) + (P - 1) * c.vocab_size // P * b,
    }


def tensor_parallel_logits(
    input_ids: Tensor,
    world_size: int,
    config: DecoderConfig = TINY,
    weights=None,
    **run_options,
) -> Tensor:
    """The decoder sharded over world_size new processes: logits (B, N, V) for input_ids (B, N).

    weights: a weight source (default: `RandomWeights(config, seed=0)`); each rank reads only
    its shard from it. run_options go to `launch.run` (timeout, comm_timeout, backend).
    """
    ids = _check_ids(input_ids, config.vocab_size)
    check_world_size(config, world_size)
    if weights is None:
        weights = RandomWeights(config, seed=0)
    results = run(tensor_parallel_rank, world_size, config, weights, ids.cpu(), **run_options)
    return results[0]["logits"]
