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

The options of later models (`DecoderConfig`) run as in one process: what belongs to a head
goes with it (biases on q, k and v, the output gate's W_G, a sink logit), what every head
shares is whole on every rank (QK-norm's weights, the four norms of a sandwich block), the
layer's own options ride on the `DecoderAttention` each rank builds (a sliding layer's window
and RoPE base, RoPE's frequency factors, partial RoPE, the query scale, the soft cap of the
scores), and the rest sits in `DecoderShard.forward` (the embedding's scale, the logits' soft
cap, number by number on each rank's range). With fewer key/value heads than ranks (Gemma 3's
one), each key/value head is copied to the ranks of its query heads. A "linear_attention" layer
is refused by name.

The model is notebook 12's (`mha_lib.nn.decoder`): each rank builds `DecoderBlock`s whose
attention is a `DecoderAttention` with its own h/P query heads and h_kv/P key/value heads
(`AttentionShard`) and whose MLP is a `SwiGLU` of F/P hidden units, and runs `DecoderBlock`'s
two residual steps with an all_reduce after each: `DecoderShard.forward` is the decoder's loop
written out once more, on purpose, to show where Megatron's two all-reduces sit (its docstring
says why this copy is kept rather than parallel linears inside the model's own loop). Weights
are stored (out, in) as in PyTorch (y = x @ W.T): "by columns of W" above is by rows of the
stored weight, and the reverse.

What it holds:
- `check_world_size(config, world_size)`: the sizes P must divide, with the message naming them;
- `shard_plan(config, rank, world_size)`: {parameter name: (rows, cols)} of each stored weight
  that rank r reads, as (start, stop) ranges (None: all), the ranges of `GGUFFile.read`;
- `AttentionShard`, `DecoderShard` (rank r's part of a `DecoderLM`: `forward(ids, cache,
  last_only=...)` as `DecoderLM`'s, so notebook 12's `generate` runs on it), `load_shard`;
- `Collectives`: the all_reduce and all_gather of the forward pass, with their payload bytes
  counted per place (embedding, attention, mlp, logits); counted=True runs the all_reduce as
  `collectives.ring_all_reduce`, whose bytes on the wire are counted too;
- `tensor_parallel_rank(weights, input_ids, counted, new_tokens)`: worker (logits, greedy
  tokens through the sharded model, what was read and sent); `one_process_rank`: worker, the
  whole model in one process (`weights.model()`, notebook 12's DecoderLM), the reference;
- `all_reduce_bytes(config, world_size, bytes_per_number)`: the bytes per token, by formula;
- `tensor_parallel_logits(input_ids, world_size, weights=None)`: the model (SmolLM2-135M from
  its GGUF file by default) sharded over world_size new processes; returns the logits (B, N, V).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_int
from ..models import splits
from ..nn.backends import resolve_attention
from ..nn.decoder import DecoderAttention, DecoderBlock, DecoderConfig, RMSNorm
from ..nn.generation import Trace, generate
from ..nn.kv_cache import DecoderCache
from .collectives import Traffic, ring_all_reduce
from .launch import rank_device, run
from .weights import GGUFWeights, fill

__all__ = [
    "SMOLLM2_ATOL",
    "AttentionShard",
    "Collectives",
    "DecoderShard",
    "all_reduce_bytes",
    "check_world_size",
    "load_shard",
    "one_process_rank",
    "shard_plan",
    "tensor_parallel_logits",
    "tensor_parallel_rank",
]

Span = tuple[int, int] | None  # (start, stop), or None for all
# How far SmolLM2's sharded float32 logits may lie from the one-process model's: both are float32
# roundings of the same exact logits (of order 10 to 30), whose sums run in another order (each
# rank's partial sums over its heads and hidden units, added by the all_reduce), through 30
# layers. tests/distributed/test_tensor_parallel.py measures each against the same model in
# float64: the sharded logits are no farther from it than a small multiple of the one-process
# model's own float32 error, and this bound is about ten times their distance (5e-5 there).
SMOLLM2_ATOL = 5e-4


def check_world_size(config: DecoderConfig, world_size: int) -> None:
    """Raise ValueError unless world_size divides the key/value heads (or, with fewer key/value
    heads than ranks, is a multiple of them and divides the query heads: each key/value head is
    then copied to the ranks of its query heads), the MLP and the vocabulary, and the output
    head is the embedding, tied. A layer the ranks cannot split (a "linear_attention" or an
    "indexed_attention" layer of `layer_types`) is refused by name."""
    P = check_int(world_size, "world_size", 1)
    not_split = {
        "linear_attention": "a gated-DeltaNet layer",
        "indexed_attention": "a sparse latent-attention layer (notebook 18's)",
    }
    for l in range(config.num_layers):
        kind = config.layer_type(l)
        if kind in not_split:
            raise ValueError(
                f"layer_types[{l}] = {kind!r}: tensor parallelism splits softmax attention by "
                f"heads; {not_split[kind]} is not split here"
            )
    h, h_kv = config.num_heads, config.num_kv_heads
    copied = P > h_kv and P % h_kv == 0  # each key/value head on P / h_kv ranks
    if copied and h % P:
        raise ValueError(
            f"world_size = {P} does not divide num_heads = {h}: with fewer key/value heads than "
            "ranks, each rank must hold num_heads / world_size whole query heads of one group "
            "(its key/value head copied)"
        )
    sizes = [] if copied else [("num_kv_heads", h_kv, "key/value heads, each with its query heads")]
    for what, n, unit in (
        *sizes,
        ("intermediate_size", config.intermediate_size, "hidden units of the MLP"),
        ("vocab_size", config.vocab_size, "rows of the vocabulary"),
    ):
        if n % P:
            raise ValueError(
                f"world_size = {P} does not divide {what} = {n}: each rank must hold "
                f"{what} / world_size whole {unit}"
            )
    if not config.tie_embeddings:
        raise ValueError(
            "tie_embeddings = False: this split takes the output head from the embedding's "
            "rows (tied, as SmolLM2); an untied head is not split here"
        )


def _range(n: int, rank: int, world_size: int) -> tuple[int, int]:
    share = n // world_size
    return rank * share, (rank + 1) * share


def _kv_range(config: DecoderConfig, rank: int, world_size: int) -> tuple[int, int]:
    """The rows of W_K and W_V (whole heads of d) that rank r's query heads read: its h_kv/P
    key/value heads, or, with fewer key/value heads than ranks, the one its group shares."""
    d, h_kv, P = config.head_dim, config.num_kv_heads, world_size
    if P <= h_kv:
        return _range(h_kv * d, rank, P)
    group = rank // (P // h_kv)  # the ranks P/h_kv at a time share a key/value head
    return group * d, (group + 1) * d


def shard_plan(config: DecoderConfig, rank: int, world_size: int) -> dict[str, tuple[Span, Span]]:
    """{parameter name: (rows, cols)}: the part of each stored (out, in) weight `rank` holds.

    How each weight is split is its row's (`mha_lib.models`, `SPLITS`): beyond Llama's
    weights, the biases of q, k and v (Qwen2) and the output gate's W_G (Qwen3.5) go with
    their heads' rows, the sink logits (gpt-oss) with their heads; the norms (two or four per
    block, QK-norm's over d shared by the heads) are whole on every rank."""
    check_world_size(config, world_size)
    check_int(rank, "rank", 0)
    if rank >= world_size:
        raise ValueError(f"rank = {rank}; expected 0 .. {world_size - 1} (world_size - 1)")
    c, P, d = config, world_size, config.head_dim
    heads = _range(c.num_heads * d, rank, P)  # rank r's query heads, whole
    kv = _kv_range(c, rank, P)  # and the key/value heads they share
    hidden = _range(c.intermediate_size, rank, P)
    spans: dict[str, tuple[Span, Span]] = {
        "whole": (None, None),
        "vocab": (_range(c.vocab_size, rank, P), None),
        "heads": (heads, None),  # column-parallel W_Q (and W_G, q's bias)
        "kv_heads": (kv, None),
        "heads_in": (None, heads),  # row-parallel W_O
        "hidden": (hidden, None),  # column-parallel W_gate, W_up
        "hidden_in": (None, hidden),  # row-parallel W_down
        "head_logits": (_range(c.num_heads, rank, P), None),  # (h,): one per query head
    }
    plan = {}
    for name, split in splits(config).items():  # each weight's split, from `mha_lib.models`
        if split not in spans:  # check_world_size refused what brings it
            raise ValueError(f"{name} is not split by tensor parallelism ({split})")
        plan[name] = spans[split]
    return plan


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


class AttentionShard(DecoderAttention):
    """Notebook 12's `DecoderAttention` with h/P query heads and their h_kv/P key/value heads
    (with fewer key/value heads than ranks, the one their group shares), of layer `layer`.

    It is the decoder's attention layer built for fewer heads of the same width d (notebook 08's
    `GroupedQueryAttention` takes head_dim): its forward is DecoderAttention's, unchanged: RoPE,
    the KV cache (of this rank's key/value heads only, made by its own `new_cache`), attention,
    and W_O's rows facing these heads, so it returns this rank's partial sum
    Σ_{h in rank} head_h W_O^h (B, n, C), to be all-reduced. Build it on the meta device and give
    it weights with `weights.fill` (`load_shard` does).
    """

    def __init__(self, config: DecoderConfig, world_size: int, layer: int = 0) -> None:
        P = world_size
        h_kv = max(config.num_kv_heads // P, 1)  # fewer key/value heads than ranks: one, copied
        super().__init__(
            replace(config, num_heads=config.num_heads // P, num_kv_heads=h_kv), layer=layer
        )


class DecoderShard(nn.Module):
    """Rank r's part of a `DecoderLM`: its vocabulary rows, its heads and MLP units in every
    layer, and the norms whole.

    forward(input_ids (B, n), cache=None, *, attention=None, last_only=False) -> logits
    (B, n, V) on every rank, as `DecoderLM.forward`: every rank of the group calls it with the
    same ids, and `new_cache` makes a cache as `DecoderLM.new_cache` does, so notebook 12's
    `generate` runs on it. `comm` (a `Collectives`) does and counts the collectives. Build it on
    the meta device and fill it with `load_shard`.

    Its forward is the one copy of the decoder's loop outside `DecoderLM.hidden_states`, kept on
    purpose (rather than swapping in column- and row-parallel linears that reduce inside the
    model's own loop): written out, it shows where Megatron's collectives sit, which is what
    notebook 14 teaches, and each `AttentionShard` stays a module that returns its partial sum
    (the notebook checks it against the heads it holds, in one process, with no group).
    """

    def __init__(self, config: DecoderConfig, rank: int, world_size: int) -> None:
        super().__init__()
        check_world_size(config, world_size)
        self.config, self.rank, self.world_size = config, rank, world_size
        C, P = config.hidden_size, world_size
        self.attention = resolve_attention("sdpa")
        rows = torch.empty(config.vocab_size // P, C)  # this rank's rows of the vocabulary
        # (given, not initialised: nn.Embedding's own initialisation on the meta device would
        # import sympy, 75 MB a process)
        self.embed = nn.Embedding(config.vocab_size // P, C, _weight=rows)
        mlp = replace(config, intermediate_size=config.intermediate_size // P)  # its hidden units
        self.layers = nn.ModuleList(
            DecoderBlock(mlp, attention=AttentionShard(config, P, l))  # and its heads
            for l in range(config.num_layers)
        )
        self.norm = RMSNorm(C, config.rms_norm_eps)
        self.comm = Collectives()

    def new_cache(self, batch_size: int, max_len: int) -> DecoderCache:
        """An empty KVCache per layer for this rank's key/value heads (h_kv/P of them)."""
        return DecoderCache(
            [layer.self_attn.new_cache(batch_size, max_len) for layer in self.layers]
        )

    def forward(
        self,
        input_ids: Tensor,
        cache: DecoderCache | None = None,
        *,
        attention=None,
        last_only: bool = False,
    ) -> Tensor:
        comm, n = self.comm, input_ids.shape[1]
        start = 0 if cache is None else cache.length
        positions = torch.arange(start, start + n, device=input_ids.device)  # (n,)
        fn = self.attention if attention is None else resolve_attention(attention)
        E = self.embed.weight  # (V/P, C): this rank's vocabulary range
        local = input_ids - self.rank * E.shape[0]  # (B, n)
        mine = (local >= 0) & (local < E.shape[0])
        x = E[local.clamp(0, E.shape[0] - 1)] * mine[..., None]  # (B, n, C): 0 for others' ids
        x = comm.all_reduce(x, "embedding")  # each id is found on exactly one rank
        if self.config.embedding_scale is not None:
            x = x * self.config.embedding_scale  # Gemma: √C
        for l, layer in enumerate(self.layers):  # DecoderBlock.forward, with Megatron's two
            layer_cache = None if cache is None else cache.layers[l]
            partial = layer.self_attn(layer.norm1(x), positions, layer_cache, fn)  # (B, n, C)
            a = comm.all_reduce(partial, "attention")  # all_reduce 1: Σ_ranks Σ_h head_h W_O^h
            x = x + (a if layer.post_norm1 is None else layer.post_norm1(a))  # (sandwich norms)
            m = comm.all_reduce(layer.mlp(layer.norm2(x)), "mlp")  # all_reduce 2: W_down's
            x = x + (m if layer.post_norm2 is None else layer.post_norm2(m))
        if last_only:
            x = x[:, -1:]  # (B, 1, C)
        logits = F.linear(self.norm(x), E)  # (B, n, V/P): the logits of this rank's range
        cap = self.config.final_logit_softcap
        if cap is not None:  # c·tanh(z/c), number by number: on each rank's range
            logits = torch.tanh(logits / cap) * cap
        return comm.all_gather_last(logits, "logits")  # (B, n, V)


def load_shard(weights, rank: int, world_size: int) -> tuple[DecoderShard, int]:
    """Rank r's DecoderShard with its weights read from `weights` (a source of
    `mha_lib.distributed.weights`), and how many numbers were read."""
    config = weights.config
    plan = shard_plan(config, rank, world_size)
    with torch.device("meta"):  # shapes only: no memory, no random initialisation
        shard = DecoderShard(config, rank, world_size)
    read = fill(shard, plan, weights)
    return shard.eval(), read


def _check_ids(input_ids, vocab_size: int) -> Tensor:
    if not isinstance(input_ids, Tensor) or input_ids.dtype not in (torch.int32, torch.int64):
        got = input_ids.dtype if isinstance(input_ids, Tensor) else type(input_ids).__name__
        raise TypeError(f"input_ids must be an integer tensor (B, N); got {got}")
    if input_ids.dim() != 2 or input_ids.shape[1] < 1:
        raise ValueError(f"input_ids has shape {tuple(input_ids.shape)}; expected (B, N)")
    if input_ids.min() < 0 or input_ids.max() >= vocab_size:
        raise ValueError(
            f"input_ids holds ids from {int(input_ids.min())} to {int(input_ids.max())}; "
            f"expected 0 .. {vocab_size - 1} (vocab_size)"
        )
    return input_ids.long()


def tensor_parallel_rank(
    weights, input_ids: Tensor, counted: bool = False, new_tokens: int = 0
) -> dict:
    """Worker: load this rank's shard, run the forward pass, then (new_tokens > 0) generate
    greedily with notebook 12's `generate` on the shard (every rank picks the same token: every
    rank holds the same gathered logits). Returns {"logits" (B, N, V), "generated" (B, T) or
    None, "margins" (the top-1 minus top-2 logit gap at each greedy step), "read" (numbers
    read from the source), "held" (numbers of the shard), "payload" and "calls" per place and
    "traffic" (wire bytes, when counted), all for the forward pass}."""
    r, P = dist.get_rank(), dist.get_world_size()
    ids = _check_ids(input_ids, weights.config.vocab_size).to(rank_device())
    shard, read = load_shard(weights, r, P)
    weights.close()  # (a file: its pages are in the shard now)
    shard = shard.to(ids.device)
    shard.comm = comm = Collectives(counted=counted)
    with torch.no_grad():
        logits = shard(ids)  # (B, N, V)
    generated, trace = None, Trace()
    if new_tokens:
        shard.comm = Collectives()  # (not counted: the counts above are the forward pass's)
        generated = generate(shard, ids, new_tokens, stop_ids=(), trace=trace)[:, ids.shape[1] :]
    return {
        "logits": logits.cpu(),
        "generated": None if generated is None else generated.cpu(),
        "margins": trace.logit_margins,
        "read": read,
        "held": sum(p.numel() for p in shard.parameters()),
        "payload": comm.payload,
        "calls": comm.calls,
        "traffic": comm.traffic,
    }


def one_process_rank(weights, input_ids: Tensor, new_tokens: int = 0) -> dict:
    """Worker (world size 1): the whole model in this one process, `weights.model()` (notebook
    12's DecoderLM; for a GGUF file its own `load_decoder`), the reference. Returns {"logits",
    "generated", "margins", "held"} as `tensor_parallel_rank`."""
    ids = _check_ids(input_ids, weights.config.vocab_size)
    model = weights.model()
    trace = Trace()
    with torch.no_grad():
        logits = model(ids)  # (B, N, V)
        generated = None
        if new_tokens:
            generated = generate(model, ids, new_tokens, stop_ids=(), trace=trace)
            generated = generated[:, ids.shape[1] :]
    return {
        "logits": logits,
        "generated": generated,
        "margins": trace.logit_margins,
        "held": sum(p.numel() for p in model.parameters()),
    }


def all_reduce_bytes(
    config: DecoderConfig, world_size: int, bytes_per_number: int = 4
) -> dict[str, float]:
    """Per token, by formula: "per_layer_payload", the bytes handed to all_reduce in one layer
    (two all_reduces of C numbers: after W_O and after W_down); "per_layer_sent", what one rank
    sends for them in a ring all_reduce (2 (P-1)/P of the payload); the same for the whole model
    ("payload", "sent"), with the embedding's all_reduce (C numbers) and the logits' all_gather
    (V/P numbers from each rank); "logits_sent", the part of "sent" that gathers the logits,
    (P-1)/P · V numbers, which only a pass that needs every position's logits pays."""
    check_world_size(config, world_size)
    P, b, c = world_size, bytes_per_number, config
    per_layer = 2 * c.hidden_size * b
    ring = 2 * (P - 1) / P
    reduced = c.num_layers * per_layer + c.hidden_size * b
    logits_sent = (P - 1) * c.vocab_size // P * b
    return {
        "per_layer_payload": per_layer,
        "per_layer_sent": ring * per_layer,
        "payload": reduced + c.vocab_size // P * b,
        "sent": ring * reduced + logits_sent,
        "logits_sent": logits_sent,
    }


def tensor_parallel_logits(
    input_ids: Tensor, world_size: int, weights=None, **run_options
) -> Tensor:
    """The model sharded over world_size new processes: logits (B, N, V) for input_ids (B, N).

    weights: a weight source of `mha_lib.distributed.weights` (default: `GGUFWeights()`,
    SmolLM2-135M-Instruct from its packaged GGUF file); each rank reads only its shard from it.
    run_options go to `launch.run` (timeout, comm_timeout, backend).
    """
    if weights is None:
        weights = GGUFWeights()
    check_world_size(weights.config, world_size)
    ids = _check_ids(input_ids, weights.config.vocab_size)
    results = run(tensor_parallel_rank, world_size, weights, ids.cpu(), **run_options)
    return results[0]["logits"]
