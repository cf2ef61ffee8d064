"""The four collectives on small tensors, and the bytes each one moves.

Derived in notebook 14 §2. Workers (run them on P ranks with `launch.run`), each returning what
its rank held before and after:
- `all_reduce_demo()`: rank r holds (r + 1)·[1, 10, 100]; every rank ends with the sum;
- `all_gather_demo()`: rank r holds [10 r, 10 r + 1]; every rank ends with all P pieces;
- `reduce_scatter_demo()`: rank r holds P pieces; rank j ends with the sum of everyone's piece j;
- `send_recv_demo()`: each rank sends its tensor to the next rank of the ring and receives the
  previous rank's (point-to-point, `batch_isend_irecv`).

The ring algorithms, written with point-to-point messages so that the bytes can be counted on
the way (gloo and NCCL pick their own algorithms inside `dist.all_reduce`; the ring is the one
whose bytes per rank do not grow with P):
- `ring_reduce_scatter(x, traffic)`, `ring_all_gather(piece, traffic)`,
  `ring_all_reduce(x, traffic)` (= reduce-scatter, then all-gather), on the current group;
- `start_ring_pass(send, receive)`, `finish_ring_pass(...)`: one step of a ring, each rank
  sending to the next and receiving from the previous, its bytes counted: the exchange every
  ring here is made of (`distributed.ring` passes keys and values with it);
- `Traffic`: the bytes this rank sent and received, by operation;
- `ring_bytes(op, numel, world_size, bytes_per_number)`: the bytes one rank sends, by formula:
  (P-1)/P · n for reduce-scatter and all-gather of an n-number tensor, 2 (P-1)/P · n for
  all-reduce, n for a send;
- `counted_collectives(numel)`: worker running the three ring collectives on one vector,
  checking each against what `torch.distributed` computes, returning the counted `Traffic`.

What gloo itself sends. The counts above are of the library's own ring, so they equal the
formula by construction; what the backend sends inside `dist.all_reduce` is another matter. On
Linux every process can read the bytes it has written through system calls, sockets included
(`wchar` in /proc/self/io, with `syscw`, the number of such calls):
- `bytes_written()`: (bytes, calls) this process has written so far, or None where the system
  does not say (macOS, Windows, a kernel without task I/O accounting);
- `gloo_traffic(numel)`: worker measuring, around each of gloo's `dist.all_reduce`,
  `dist.all_gather` and `dist.reduce_scatter` on numel float32 numbers, what this rank wrote
  (during a collective a rank writes only to its peers' sockets; gloo adds a small header to
  each message, so the bytes exceed the payload by a few dozen per call).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import Tensor

from .._checks import check_int
from .launch import rank_device

__all__ = [
    "GLOO_OPS",
    "RING_OPS",
    "Traffic",
    "all_gather_demo",
    "all_reduce_demo",
    "bytes_written",
    "counted_collectives",
    "finish_ring_pass",
    "gloo_traffic",
    "reduce_scatter_demo",
    "ring_all_gather",
    "ring_all_reduce",
    "ring_bytes",
    "ring_reduce_scatter",
    "send_recv_demo",
    "start_ring_pass",
]


# --------------------------------------------------------------------------------- the demos


def all_reduce_demo() -> dict:
    """Worker: every rank ends with the sum of all ranks' (r + 1)·[1, 10, 100]."""
    r, device = dist.get_rank(), rank_device()
    x = (r + 1) * torch.tensor([1.0, 10.0, 100.0], device=device)  # (3,)
    before = x.clone()
    dist.all_reduce(x)  # in place: op=SUM by default
    return {"before": before.cpu(), "after": x.cpu()}


def all_gather_demo() -> dict:
    """Worker: every rank ends with the P pieces [10 r, 10 r + 1], in rank order."""
    r, P, device = dist.get_rank(), dist.get_world_size(), rank_device()
    piece = torch.tensor([10.0 * r, 10.0 * r + 1], device=device)  # (2,)
    pieces = [torch.empty(2, device=device) for _ in range(P)]
    dist.all_gather(pieces, piece)
    return {"before": piece.cpu(), "after": torch.stack(pieces).cpu()}  # (P, 2)


def reduce_scatter_demo() -> dict:
    """Worker: rank r holds pieces (r + 1)·[j + 1, j + 1] for j < P; rank j ends with the sum
    over ranks of piece j."""
    r, P, device = dist.get_rank(), dist.get_world_size(), rank_device()
    pieces = [(r + 1) * torch.full((2,), j + 1.0, device=device) for j in range(P)]  # P x (2,)
    out = torch.empty(2, device=device)
    dist.reduce_scatter(out, pieces)
    return {"before": torch.stack(pieces).cpu(), "after": out.cpu()}  # (P, 2), (2,)


def send_recv_demo() -> dict:
    """Worker: each rank sends [r, r, r] to rank r + 1 and receives from rank r - 1 (mod P)."""
    r, P, device = dist.get_rank(), dist.get_world_size(), rank_device()
    x = torch.full((3,), float(r), device=device)
    got = torch.empty(3, device=device)
    if P == 1:  # a ring of one: the message would go to itself
        got.copy_(x)
    else:
        ops = [dist.P2POp(dist.isend, x, (r + 1) % P), dist.P2POp(dist.irecv, got, (r - 1) % P)]
        for request in dist.batch_isend_irecv(ops):  # both posted at once: no deadlock
            request.wait()
    return {"before": x.cpu(), "after": got.cpu()}


# ----------------------------------------------------------------------- counted ring collectives

RING_OPS = ("reduce_scatter", "all_gather", "all_reduce", "send")


@dataclass
class Traffic:
    """Bytes this rank sent and received, by operation name (a count, not a formula)."""

    sent: dict[str, int] = field(default_factory=dict)
    received: dict[str, int] = field(default_factory=dict)
    messages: dict[str, int] = field(default_factory=dict)

    def add(self, op: str, sent: int = 0, received: int = 0) -> None:
        self.sent[op] = self.sent.get(op, 0) + sent
        self.received[op] = self.received.get(op, 0) + received
        self.messages[op] = self.messages.get(op, 0) + 1

    @property
    def total_sent(self) -> int:
        return sum(self.sent.values())


def _nbytes(x: Tensor) -> int:
    return x.numel() * x.element_size()


def start_ring_pass(send: Tensor, receive: Tensor, tag: int = 0) -> list:
    """Post the send of `send` to the next rank of the ring and the receive into `receive` from
    the previous one, and return at once: the requests to wait for (`finish_ring_pass`). What
    runs between the two overlaps the transfer (ring attention computes a block meanwhile)."""
    r, P = dist.get_rank(), dist.get_world_size()
    ops = [
        dist.P2POp(dist.isend, send, (r + 1) % P, tag=tag),
        dist.P2POp(dist.irecv, receive, (r - 1) % P, tag=tag),
    ]
    return dist.batch_isend_irecv(ops)


def finish_ring_pass(
    requests, send: Tensor, receive: Tensor, traffic: Traffic | None, op: str
) -> None:
    """Wait for a pass started by `start_ring_pass`; count its bytes in `traffic` under `op`."""
    for request in requests:
        request.wait()
    if traffic is not None:
        traffic.add(op, sent=_nbytes(send), received=_nbytes(receive))


def _ring_step(send: Tensor, recv: Tensor, traffic: Traffic | None, op: str) -> None:
    """Send `send` to the next rank while receiving `recv` from the previous one."""
    finish_ring_pass(start_ring_pass(send, recv), send, recv, traffic, op)


def ring_reduce_scatter(
    x: Tensor, traffic: Traffic | None = None, op: str = "reduce_scatter"
) -> Tensor:
    """Sum x over the ranks and keep piece `rank` of the flattened sum; P - 1 ring steps.

    x: any shape, the same on every rank; its numbers are cut into P nearly equal pieces
    (`tensor_split`). At step s rank r sends its running sum of piece r - s - 1 and adds the
    previous rank's running sum of piece r - s - 2 to its own: after P - 1 steps piece r holds
    every rank's contribution. Returns that piece (1-D), as `dist.reduce_scatter` would. The
    bytes go to `traffic` under `op`.
    """
    r, P = dist.get_rank(), dist.get_world_size()
    pieces = [p.clone() for p in x.reshape(-1).tensor_split(P)]  # P x (about numel/P,)
    for s in range(P - 1):
        send, into = pieces[(r - s - 1) % P], pieces[(r - s - 2) % P]
        got = torch.empty_like(into)
        _ring_step(send, got, traffic, op)
        into += got
    return pieces[r]


def ring_all_gather(
    piece: Tensor, sizes: list[int], traffic: Traffic | None = None, op: str = "all_gather"
) -> Tensor:
    """Every rank's piece, concatenated in rank order (1-D); P - 1 ring steps.

    piece: this rank's 1-D piece; sizes: the length of every rank's piece. At step s rank r
    passes on piece r - s and receives piece r - s - 1 from the previous rank.
    """
    r, P = dist.get_rank(), dist.get_world_size()
    if len(sizes) != P or sizes[r] != piece.numel():
        raise ValueError(
            f"sizes = {sizes}; expected one length per rank (P = {P}) with sizes[{r}] = "
            f"{piece.numel()}, this rank's piece"
        )
    pieces = [piece.reshape(-1) if j == r else piece.new_empty(sizes[j]) for j in range(P)]
    for s in range(P - 1):
        _ring_step(pieces[(r - s) % P], pieces[(r - s - 1) % P], traffic, op)
    return torch.cat(pieces)


def ring_all_reduce(x: Tensor, traffic: Traffic | None = None) -> Tensor:
    """The sum of x over the ranks, on every rank: ring reduce-scatter, then ring all-gather.

    2 (P - 1) steps, each sending about numel / P numbers: 2 (P - 1)/P · numel in all, whatever
    P (a tree or a star would send more from some rank as P grows). Returns a new tensor.
    """
    P = dist.get_world_size()
    sizes = [p.numel() for p in x.reshape(-1).tensor_split(P)]
    mine = ring_reduce_scatter(x, traffic, "all_reduce")
    return ring_all_gather(mine, sizes, traffic, "all_reduce").reshape(x.shape)


def ring_bytes(op: str, numel: int, world_size: int, bytes_per_number: int = 4) -> int:
    """Bytes one rank sends in a ring `op` on a tensor of numel numbers (numel divisible by P).

    numel is the whole tensor: the input of reduce-scatter and all-reduce, the output of
    all-gather, the message of a send.
    """
    if op not in RING_OPS:
        raise ValueError(f"op must be one of {RING_OPS}; got {op!r}")
    check_int(numel, "numel", 1)
    P = check_int(world_size, "world_size", 1)
    check_int(bytes_per_number, "bytes_per_number", 1)
    if op == "send":
        return numel * bytes_per_number
    if numel % P:
        raise ValueError(f"numel = {numel} is not divisible by world_size = {P}")
    steps = 2 * (P - 1) if op == "all_reduce" else P - 1
    return steps * (numel // P) * bytes_per_number


def counted_collectives(numel: int, dtype: torch.dtype = torch.float32) -> dict:
    """Worker: the three ring collectives on one vector, each checked against torch.distributed.

    Rank r holds x_r = r + arange(numel) / numel. Returns the counted `Traffic` and, per
    operation, the largest difference from what torch.distributed computes on the same data:
    `dist.all_reduce` (the reduce-scatter's piece r is piece r of that sum) and
    `dist.all_gather_object` of every rank's piece (pieces may differ in size by one).
    """
    r, P = dist.get_rank(), dist.get_world_size()
    check_int(numel, "numel", P)
    x = r + torch.arange(numel, dtype=dtype, device=rank_device()) / numel  # (numel,)
    traffic = Traffic()

    reference = x.clone()
    dist.all_reduce(reference)
    errors = {"all_reduce": float((ring_all_reduce(x, traffic) - reference).abs().max())}
    piece = ring_reduce_scatter(x, traffic)
    errors["reduce_scatter"] = float((piece - reference.tensor_split(P)[r]).abs().max())

    mine = x.tensor_split(P)[r].clone()  # this rank's piece of its own x
    pieces = [None] * P
    dist.all_gather_object(pieces, mine)
    gathered = ring_all_gather(mine, [p.numel() for p in pieces], traffic)
    errors["all_gather"] = float(
        (gathered - torch.cat([p.to(x.device) for p in pieces])).abs().max()
    )
    return {"traffic": traffic, "errors": errors}


# ----------------------------------------------------------------------- what gloo itself sends


def bytes_written() -> tuple[int, int] | None:
    """(bytes, write calls) this process has written so far, to files, pipes and sockets alike,
    from Linux's /proc/self/io (`wchar`, `syscw`); None where the system does not report it."""
    try:
        with open("/proc/self/io") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return int(fields["wchar"]), int(fields["syscw"])
    except (OSError, KeyError, ValueError):
        return None


GLOO_OPS = ("all_reduce", "all_gather", "reduce_scatter")


def gloo_traffic(numel: int) -> dict[str, tuple[int, int]] | None:
    """Worker: {op: (bytes, write calls)} this rank wrote during each of the backend's own
    all-reduce, all-gather and reduce-scatter of numel float32 numbers (numel divisible by P:
    the input of all-reduce and reduce-scatter, the output of all-gather, as in `ring_bytes`);
    None where `bytes_written` is not available. Every rank waits at a barrier before each
    collective, so that none is still writing for the one before."""
    P = dist.get_world_size()
    check_int(numel, "numel", P)
    if numel % P:
        raise ValueError(f"numel = {numel} is not divisible by world_size = {P}")
    if bytes_written() is None:
        dist.barrier()  # every rank takes part, as in a measured run
        return None
    device, n = rank_device(), numel // P
    x = torch.ones(numel, device=device)  # (numel,)
    piece = torch.ones(n, device=device)  # (numel / P,)
    calls = {
        "all_reduce": lambda: dist.all_reduce(x),
        "all_gather": lambda: dist.all_gather([torch.empty_like(piece) for _ in range(P)], piece),
        "reduce_scatter": lambda: dist.reduce_scatter(
            torch.empty_like(piece), list(x.tensor_split(P))
        ),
    }
    out = {}
    for op in GLOO_OPS:
        dist.barrier()
        before = bytes_written()
        calls[op]()
        after = bytes_written()
        out[op] = (after[0] - before[0], after[1] - before[1])
    dist.barrier()
    return out
