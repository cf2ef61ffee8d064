"""The Triton kernels of notebook 09 equal SDPA and notebook 08's flash_attention.

On a machine without a GPU (or with MHA_LIB_DEVICE=cpu) the kernels run in Triton's
interpreter on CPU tensors, so these tests run everywhere triton installs; the sizes
are small so that the interpreter stays fast. The tests marked `gpu` repeat the
equalities on a CUDA device with the compiled kernels and are skipped without one.
"""

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

# import the library first: it chooses the interpreter before triton is imported
pytest.importorskip(
    "mha_lib.efficient.triton_flash", reason="triton ships wheels for Linux x86_64 only"
)

from mha_lib.efficient.triton_flash import (
    BACKWARD_DESIGNS,
    DEVICE,
    INTERPRETED,
    KERNELS,
    backward_cost,
    causal_key_end,
    causal_query_start,
    default_blocks,
    row_softmax,
    tiles_loaded,
    tiles_per_program,
    tiles_visited,
    triton_attention,
    triton_attention_backward,
    triton_attention_forward,
    vector_add,
)
from mha_lib.nn.flash import flash_attention, hbm_bytes

TOL = dict(rtol=1e-5, atol=1e-5)


def randn(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype).to(DEVICE)


def allowed(N, M, causal, device=DEVICE):
    """(N, M) bool, True = may attend, for SDPA's attn_mask."""
    if causal is None:
        return None
    offset = M - N if causal == "bottom_right" else 0
    return torch.ones(N, M, dtype=torch.bool, device=device).tril(offset)


def reference(q, k, v, causal):
    """SDPA in float64 with an explicit mask; rows that see no key get 0 (as our kernel)."""
    N, M = q.shape[2], k.shape[2]
    mask = allowed(N, M, causal, q.device)
    q, k, v = (t.double() for t in (q, k, v))
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    if mask is not None:
        o = o.masked_fill(~mask.any(dim=1)[:, None], 0.0)
    return o


SHAPES = [  # (B, h, N, M, d): multiples of the 16-blocks and not, N != M, N = 1, M = 1
    (1, 2, 32, 32, 16),
    (2, 1, 19, 37, 16),
    (1, 2, 37, 19, 32),
    (1, 1, 1, 23, 16),
    (1, 1, 21, 1, 16),
    (1, 1, 17, 17, 64),
]
CAUSALS = [None, "top_left", "bottom_right"]


def test_vector_add_and_row_softmax_equal_torch():
    x, y = randn(100, seed=1), randn(100, seed=2)
    torch.testing.assert_close(vector_add(x, y), x + y, rtol=0, atol=0)
    x = randn(5, 37, seed=3) * 4
    torch.testing.assert_close(row_softmax(x), torch.softmax(x, dim=1), **TOL)


@pytest.mark.parametrize("causal", CAUSALS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward_and_gradients_equal_sdpa(shape, causal):
    B, h, N, M, d = shape
    q, k, v = randn(B, h, N, d, seed=1), randn(B, h, M, d, seed=2), randn(B, h, M, d, seed=3)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    o, lse = triton_attention(q, k, v, causal)
    expected = reference(q, k, v, causal)
    torch.testing.assert_close(o.double(), expected, **TOL)
    do = randn(B, h, N, d, seed=4)
    grads = torch.autograd.grad(o, (q, k, v), do)
    expected_grads = torch.autograd.grad(expected, (q, k, v), do.double())
    for name, g, e in zip("qkv", grads, expected_grads):
        torch.testing.assert_close(g.double(), e.double(), **TOL, msg=f"d{name}")
    # the log-sum-exp of each row's scaled scores
    scores = (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(d)
    mask = allowed(N, M, causal)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    torch.testing.assert_close(lse.double(), torch.logsumexp(scores, dim=-1), **TOL)


@pytest.mark.parametrize("causal", [None, "top_left"])
def test_equals_notebook_08_flash_attention(causal):
    q, k, v = randn(1, 2, 29, 32, seed=5), randn(1, 2, 41, 32, seed=6), randn(1, 2, 41, 32, seed=7)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    o, lse = triton_attention(q, k, v, causal)
    o8, lse8 = flash_attention(q, k, v, is_causal=causal is not None, block_q=16, block_k=16)
    torch.testing.assert_close(o, o8, **TOL)
    torch.testing.assert_close(lse, lse8, **TOL)
    do = randn(1, 2, 29, 32, seed=8)
    for g, g8 in zip(torch.autograd.grad(o, (q, k, v), do), torch.autograd.grad(o8, (q, k, v), do)):
        torch.testing.assert_close(g, g8, **TOL)


def test_other_block_sizes_give_the_same_result():
    q, k, v = randn(1, 1, 45, 16, seed=9), randn(1, 1, 50, 16, seed=10), randn(1, 1, 50, 16)
    o, lse = triton_attention_forward(q, k, v, "bottom_right")
    o2, _ = triton_attention_forward(q, k, v, "bottom_right", block_q=32, block_k=16)
    torch.testing.assert_close(o, o2, **TOL)
    do = randn(1, 1, 45, 16, seed=11)
    g = triton_attention_backward(do, q, k, v, o, lse, "bottom_right")
    g2 = triton_attention_backward(do, q, k, v, o, lse, "bottom_right", block_q=16, block_k=32)
    for a, b in zip(g, g2):
        torch.testing.assert_close(a, b, **TOL)


def test_rows_that_see_no_key_give_zeros_and_zero_gradients():
    q, k, v = (randn(1, 1, n, 16, seed=s).requires_grad_() for n, s in ((20, 1), (5, 2), (5, 3)))
    o, lse = triton_attention(q, k, v, "bottom_right")  # rows 0 .. 14 see no key
    assert torch.all(o[0, 0, :15] == 0) and torch.all(torch.isneginf(lse[0, 0, :15]))
    assert torch.isfinite(lse[0, 0, 15:]).all()
    o.sum().backward()
    assert torch.all(q.grad[0, 0, :15] == 0) and torch.isfinite(k.grad).all()


def test_causal_tiles_counted_by_the_kernel():
    # 4 query blocks × 4 key blocks: causal visits the 10 on and below the diagonal
    assert tiles_visited(64, 64, None) == 16
    assert tiles_visited(64, 64, "top_left") == 10
    for N, M, c in ((37, 53, "bottom_right"), (53, 37, "top_left"), (50, 29, "bottom_right")):
        expected = sum(-(-causal_key_end(s, 16, N, M, c) // 16) for s in range(0, N, 16))
        assert tiles_visited(N, M, c) == expected


def test_causal_key_end_is_one_past_the_last_visible_key():
    for N, M, c in ((37, 53, "bottom_right"), (53, 37, "top_left"), (9, 30, "top_left")):
        mask = allowed(N, M, c, "cpu")
        for s in range(0, N, 16):
            visible = mask[s : s + 16].any(dim=0).nonzero()
            end = int(visible.max()) + 1 if len(visible) else 0
            assert causal_key_end(s, 16, N, M, c) == end


TILE_CASES = [  # (N, M, block_q, block_k): square, N != M both ways, partial blocks, b_q != b_k
    (64, 64, 16, 16),
    (37, 53, 16, 16),
    (53, 37, 16, 16),
    (50, 29, 16, 32),
    (45, 46, 32, 16),
]


def live_tiles(N, M, causal, block_q, block_k):
    """(query blocks, key blocks) bool: the tiles holding at least one pair the mask allows."""
    mask = allowed(N, M, causal, "cpu")
    if mask is None:
        mask = torch.ones(N, M, dtype=torch.bool)
    n_q, n_k = -(-N // block_q), -(-M // block_k)
    live = torch.zeros(n_q, n_k, dtype=torch.bool)
    for i in range(n_q):
        for j in range(n_k):
            live[i, j] = mask[
                i * block_q : (i + 1) * block_q, j * block_k : (j + 1) * block_k
            ].any()
    return live.numpy()


@pytest.mark.parametrize("causal", CAUSALS)
@pytest.mark.parametrize("case", TILE_CASES, ids=lambda c: "x".join(map(str, c)))
def test_every_kernel_loads_exactly_the_tiles_the_mask_reaches(case, causal):
    """forward, dkdv and dq, counted by the kernels themselves: each loads every tile that
    holds an allowed pair, and no other (the causal bounds are tight)."""
    N, M, block_q, block_k = case
    live = live_tiles(N, M, causal, block_q, block_k)
    for kernel in KERNELS:
        loaded = tiles_loaded(N, M, causal, block_q, block_k, kernel)
        np.testing.assert_array_equal(loaded > 0, live, err_msg=kernel)
        assert tiles_visited(N, M, causal, block_q, block_k, kernel) == live.sum()


def test_tiles_loaded_gives_each_programs_loop_order():
    dkdv = tiles_loaded(48, 48, "top_left", kernel="dkdv")  # a column walks down from the diagonal
    np.testing.assert_array_equal(dkdv, [[1, 0, 0], [2, 1, 0], [3, 2, 1]])
    dq = tiles_loaded(48, 48, "top_left", kernel="dq")  # a row walks right up to the diagonal
    np.testing.assert_array_equal(dq, [[1, 0, 0], [1, 2, 0], [1, 2, 3]])
    assert tiles_per_program(48, 48, "top_left", kernel="dkdv") == [3, 2, 1]
    with pytest.raises(ValueError, match="kernel must be one of"):
        tiles_per_program(48, 48, None, kernel="backward")


@pytest.mark.parametrize("causal", CAUSALS)
@pytest.mark.parametrize("case", TILE_CASES, ids=lambda c: "x".join(map(str, c)))
def test_causal_query_start_is_where_the_dkdv_kernel_starts(case, causal):
    N, M, block_q, block_k = case
    counts = tiles_per_program(N, M, causal, block_q, block_k, "dkdv")
    n_q = -(-N // block_q)
    for j, count in enumerate(counts):
        start = causal_query_start(j * block_k, block_q, N, M, causal)
        assert count == max(0, n_q - start // block_q), (j, start)


def test_default_blocks():
    assert default_blocks(64, "forward", interpreted=True) == (16, 16)
    assert default_blocks(64, "forward", interpreted=False) == (128, 64)
    assert default_blocks(128, "forward", interpreted=False) == (128, 32)
    assert default_blocks(64, "dkdv", interpreted=False) == (64, 64)
    assert default_blocks(64) == ((16, 16) if INTERPRETED else (128, 64))


@pytest.mark.parametrize("causal", CAUSALS)
@pytest.mark.parametrize("case", [(64, 64, 16, 16), (53, 48, 16, 16), (37, 64, 32, 16)])
def test_hbm_bytes_loads_the_tiles_the_kernel_visits(case, causal):
    """With M a multiple of block_k every K and V tile is whole: the tiled count is Q and
    O once, L in float32, and 2 · block_k · d numbers per tile the kernel itself counts."""
    N, M, block_q, block_k = case
    d, b = 64, 2
    tiles = tiles_visited(N, M, causal, block_q, block_k)
    rest = 2 * N * d * b + 4 * N
    assert (
        hbm_bytes(N, M, d, "tiled", causal, block_q, block_k, b)
        == rest + tiles * 2 * block_k * d * b
    )


@pytest.mark.parametrize("causal", CAUSALS)
@pytest.mark.parametrize(
    "case", [(64, 48, 16, 16), (53, 37, 16, 16), (37, 64, 32, 16), (40, 24, 16, 8)]
)
def test_backward_cost_counts_the_tiles_the_kernels_visit(case, causal):
    """backward_cost against the kernels' own counts (`tiles_loaded`, from the tiles each
    program counts), live rows and keys only: the split does 4 products per tile the dK/dV
    kernel visits and 3 per tile the dQ kernel visits, FlashAttention-2's atomic design 5 per
    tile of its key-parallel kernel (the dK/dV kernel's loop); bytes as the docstring lists
    them, here added up tile by tile from the grid of visited tiles."""
    N, M, block_q, block_k = case
    d, e = 16, 2
    rows = [min(block_q, N - s) for s in range(0, N, block_q)]  # live rows of each query block
    keys = [min(block_k, M - s) for s in range(0, M, block_k)]  # live keys of each key block
    visited = {
        kernel: tiles_loaded(N, M, causal, block_q, block_k, kernel) > 0
        for kernel in ("dkdv", "dq")
    }
    pairs = {
        k: sum(rows[i] * keys[j] for (i, j), v in np.ndenumerate(g) if v)
        for k, g in visited.items()
    }
    split = backward_cost(N, M, d, causal, block_q, block_k, "split", e)
    atomic = backward_cost(N, M, d, causal, block_q, block_k, "atomic", e)
    assert split["flops"] == 2 * d * (4 * pairs["dkdv"] + 3 * pairs["dq"])
    assert atomic["flops"] == 2 * d * 5 * pairs["dkdv"]
    assert split["exps"] == pairs["dkdv"] + pairs["dq"] and atomic["exps"] == pairs["dkdv"]
    prepass = 2 * N * d * e + 4 * N
    key_side = sum(4 * c * d * e for c in keys) + sum(
        (2 * rows[i] * d * e + 8 * rows[i]) for (i, j), v in np.ndenumerate(visited["dkdv"]) if v
    )
    query_side = sum(3 * r * d * e + 8 * r for r in rows) + sum(
        2 * keys[j] * d * e for (i, j), v in np.ndenumerate(visited["dq"]) if v
    )
    atomics = sum(8 * rows[i] * d for (i, j), v in np.ndenumerate(visited["dkdv"]) if v)
    assert split["bytes"] == prepass + key_side + query_side
    assert atomic["bytes"] == prepass + key_side + atomics + N * d * (4 + 4 + e)
    assert split["launches"] == atomic["launches"] == 3


def test_backward_cost_is_seven_products_against_five():
    for causal in CAUSALS:
        split, atomic = (backward_cost(256, 256, 64, causal, 64, 64, x) for x in BACKWARD_DESIGNS)
        assert 5 * split["flops"] == 7 * atomic["flops"] and split["exps"] == 2 * atomic["exps"]
    full = backward_cost(256, 256, 64, None, 64, 64, "atomic")
    assert full["flops"] == 2.5 * 4 * 256 * 256 * 64  # the benchmark's count: 2.5 forwards
    with pytest.raises(ValueError, match="design must be one of"):
        backward_cost(64, 64, 16, design="fused")
    with pytest.raises(ValueError, match="block_q must be at least 1; got 0"):
        backward_cost(64, 64, 16, block_q=0)
    with pytest.raises(ValueError, match="causal must be one of"):
        backward_cost(64, 64, 16, causal="lower")


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        (((1, 1, 4, 16), (1, 1, 4, 16), (1, 1, 4, 16), "causal"), ValueError, "causal must be"),
        (((1, 1, 4, 12), (1, 1, 4, 12), (1, 1, 4, 12), None), ValueError, "d in (16"),
        (((1, 1, 4, 16), (1, 2, 4, 16), (1, 2, 4, 16), None), ValueError, "k has shape"),
        (((1, 1, 4, 16), (1, 1, 4, 16), (1, 1, 5, 16), None), ValueError, "v has shape"),
        (((4, 16), (1, 1, 4, 16), (1, 1, 4, 16), None), ValueError, "q has shape (4, 16)"),
    ],
)
def test_bad_input_names_the_argument(args, error, words):
    q, k, v, causal = args
    with pytest.raises(error) as info:
        triton_attention_forward(randn(*q), randn(*k), randn(*v), causal)
    assert words in str(info.value)


def test_bad_dtype_and_blocks_are_refused():
    q = randn(1, 1, 4, 16)
    with pytest.raises(TypeError, match=r"q has dtype torch\.float64"):
        triton_attention_forward(q.double(), q.double(), q.double())
    with pytest.raises(TypeError, match="k has dtype"):
        triton_attention_forward(q, q.half(), q)
    with pytest.raises(ValueError, match="block_q must be a power of two"):
        triton_attention_forward(q, q, q, block_q=24)
    with pytest.raises(TypeError, match=r"q must be a torch\.Tensor"):
        triton_attention_forward(q.tolist(), q, q)
    if INTERPRETED:
        with pytest.raises(TypeError, match="no bfloat16 arithmetic"):
            triton_attention_forward(q.bfloat16(), q.bfloat16(), q.bfloat16())


def test_float16_under_the_interpreter_or_gpu():
    q, k, v = (randn(1, 1, 19, 16, seed=s).half() for s in (1, 2, 3))
    o, _ = triton_attention_forward(q, k, v, "top_left")
    assert o.dtype == torch.float16
    torch.testing.assert_close(o.double(), reference(q, k, v, "top_left"), rtol=2e-3, atol=2e-3)


def test_the_interpreter_is_chosen_by_mha_lib_device():
    code = "import mha_lib.efficient.triton_flash as t; print(t.INTERPRETED, t.DEVICE)"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["MHA_LIB_DEVICE"] = "cpu"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["True", "cpu"], out.stderr[-2000:]


# ---------------------------------------------------------------------------- on a GPU

gpu = pytest.mark.skipif(
    INTERPRETED or not torch.cuda.is_available(),
    reason="needs a CUDA GPU with the compiled kernels (these tests ran the interpreter)",
)


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", CAUSALS)
@pytest.mark.parametrize("d", [64, 128])
def test_gpu_forward_and_gradients_equal_sdpa(dtype, causal, d):
    B, h, N, M = 2, 3, 333, 517
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    q, k, v = (randn(B, h, n, d, seed=s).to(dtype) for s, n in ((1, N), (2, M), (3, M)))
    if dtype == torch.float32:  # the reference in float64; tl.dot in full float32
        torch.backends.cuda.matmul.allow_tf32 = False
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    o, _ = triton_attention(q, k, v, causal)
    expected = reference(q, k, v, causal)
    torch.testing.assert_close(o.double(), expected, **tol)
    do = randn(B, h, N, d, seed=4).to(dtype)
    for g, e in zip(
        torch.autograd.grad(o, (q, k, v), do), torch.autograd.grad(expected, (q, k, v), do.double())
    ):
        torch.testing.assert_close(g.double(), e.double(), **tol)


def test_benchmark_without_a_gpu_prints_correctness_only(tmp_path):
    if not INTERPRETED:
        pytest.skip("on a GPU the benchmark times; here the interpreter's path is tested")
    path = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "mha_lib.bench", "triton", "--json", str(path)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "measures nothing about speed" in out.stdout and "< 1e-5 ✓" in out.stdout
    import json

    numbers = json.loads(path.read_text())
    assert numbers["interpreted"] and numbers["speed"] == []
    assert len(numbers["correctness"]) == 12
    assert all(r["max_error"] < 1e-5 for r in numbers["correctness"])
