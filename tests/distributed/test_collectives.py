"""mha_lib.distributed.collectives: on 1 to 4 processes each collective leaves every rank with what
its definition says, and the ring algorithms written with send/recv equal torch.distributed's
collectives while sending exactly the bytes of the formula (counted per rank)."""

import sys

import pytest

from mha_lib.distributed.collectives import GLOO_OPS, Traffic, bytes_written, ring_bytes
from mha_lib.testing import assert_close
from tests.distributed.distributed_inputs import GLOO_NUMEL, WORLD_SIZES


@pytest.mark.parametrize("P", WORLD_SIZES)
def test_each_collective_leaves_what_its_definition_says(groups, P):
    results = groups[P]
    total = P * (P + 1) / 2  # 1 + 2 + ... + P
    for r in range(P):
        reduce = results["all_reduce"][r]
        assert_close(reduce["before"], [(r + 1) * 1.0, (r + 1) * 10.0, (r + 1) * 100.0])
        assert_close(reduce["after"], [total, 10 * total, 100 * total], rtol=0, atol=0)
        gather = results["all_gather"][r]
        assert_close(gather["after"], [[10.0 * j, 10.0 * j + 1] for j in range(P)], rtol=0, atol=0)
        scatter = results["reduce_scatter"][r]
        assert scatter["before"].shape == (P, 2)
        assert_close(scatter["after"], [(r + 1) * total] * 2, rtol=0, atol=0)
        shifted = results["send_recv"][r]
        assert_close(shifted["after"], [float((r - 1) % P)] * 3, rtol=0, atol=0)


@pytest.mark.parametrize("P", WORLD_SIZES)
def test_ring_collectives_equal_torch_distributed_and_send_the_formulas_bytes(groups, P):
    for r in range(P):
        counted = groups[P]["counted_24"][r]
        assert max(counted["errors"].values()) < 1e-5  # float32 sums in another order
        sent = counted["traffic"].sent
        for op in ("all_reduce", "reduce_scatter", "all_gather"):
            assert sent.get(op, 0) == ring_bytes(op, 24, P, 4), (op, sent)
            assert counted["traffic"].received.get(op, 0) == sent.get(op, 0)
        assert counted["traffic"].messages.get("all_reduce", 0) == 2 * (P - 1)


@pytest.mark.parametrize("P", WORLD_SIZES)
def test_ring_collectives_with_pieces_of_unequal_size(groups, P):
    """23 numbers over P ranks: pieces of 23 // P and 23 // P + 1; each rank sends the pieces it
    passes on, so the counts differ by rank by at most one number per step."""
    sizes = [23 // P + (j < 23 % P) for j in range(P)]
    for r in range(P):
        counted = groups[P]["counted_uneven"][r]
        assert max(counted["errors"].values()) < 1e-12  # float64
        passed_on = sum(sizes[(r - s) % P] for s in range(P - 1))  # all-gather: pieces r, r-1, ...
        assert counted["traffic"].sent.get("all_gather", 0) == passed_on * 8


@pytest.mark.skipif(bytes_written() is None, reason="the system reports no bytes written")
@pytest.mark.parametrize("P", WORLD_SIZES)
def test_what_gloo_itself_writes(groups, P):
    """gloo's all-reduce and all-gather write the ring formula's bytes plus a header per write
    (under 1 % here, 768 KiB); its reduce-scatter writes about twice the formula, as much as its
    all-reduce: it reduces everything, then keeps its piece."""
    for r in range(P):
        measured = groups[P]["gloo_bytes"][r]
        assert set(measured) == set(GLOO_OPS)
        for op in ("all_reduce", "all_gather"):
            formula, (written, calls) = ring_bytes(op, GLOO_NUMEL, P, 4), measured[op]
            assert formula <= written <= 1.01 * formula + 1000, (op, written, formula)
            assert (written == 0) == (P == 1) and calls <= 1000
        if P > 1:
            ratio = measured["reduce_scatter"][0] / ring_bytes("reduce_scatter", GLOO_NUMEL, P, 4)
            assert 1.9 < ratio < 2.1, ratio


def test_bytes_written_counts_this_process_writes(tmp_path):
    if not sys.platform.startswith("linux"):
        assert bytes_written() is None or len(bytes_written()) == 2
        return
    before = bytes_written()
    (tmp_path / "x").write_bytes(b"0" * 100_000)
    after = bytes_written()
    assert after[0] - before[0] >= 100_000 and after[1] > before[1]


def test_ring_bytes_formula():
    assert ring_bytes("all_reduce", 1200, 4) == 2 * 3 * 300 * 4  # 2 (P-1)/P · n · bytes
    assert ring_bytes("reduce_scatter", 1200, 4, 2) == 3 * 300 * 2
    assert ring_bytes("all_gather", 1200, 1) == 0  # one rank: nothing to send
    assert ring_bytes("send", 7, 3, 8) == 56
    # per rank, an all-reduce never sends more than twice its tensor, however many ranks
    assert all(ring_bytes("all_reduce", 720, P, 1) < 2 * 720 for P in (2, 3, 4, 5, 6, 8))
    with pytest.raises(ValueError, match="numel = 10 is not divisible by world_size = 4"):
        ring_bytes("all_reduce", 10, 4)
    with pytest.raises(ValueError, match="op must be one of"):
        ring_bytes("broadcast", 10, 2)
    with pytest.raises(ValueError, match="world_size must be at least 1"):
        ring_bytes("all_gather", 10, 0)


def test_traffic_adds_up():
    t = Traffic()
    t.add("kv", sent=10, received=12)
    t.add("kv", sent=5)
    t.add("logits", received=3)
    assert t.sent == {"kv": 15, "logits": 0} and t.received == {"kv": 12, "logits": 3}
    assert t.messages == {"kv": 2, "logits": 1} and t.total_sent == 15
