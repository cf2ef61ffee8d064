"""mha_lib.llm.quantized: a Q8_0 matrix kept as int8 codes and float16 scales; rows looked up
equal gguf's dequantization, the chunked tied head equals the float32 matrix product; clear
errors. On a small file written here, and on Gemma 3's embedding when installed."""

import importlib.util

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize, quantize

from mha_lib.llm.gguf_file import GGUFFile
from mha_lib.llm.model_files import MODELS, find_model_file
from mha_lib.llm.quantized import QuantizedEmbedding
from mha_lib.testing import assert_close

GEMMA_INSTALLED = all(importlib.util.find_spec(p) for p in MODELS["gemma3"].packages)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """(file, float32 weights) of a (1000, 96) Q8_0 matrix written with gguf's writer."""
    import gguf

    path = tmp_path_factory.mktemp("q8") / "e.gguf"
    w = np.random.default_rng(0).normal(size=(1000, 96)).astype(np.float32)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tensor("token_embd.weight", quantize(w, Q.Q8_0), raw_dtype=Q.Q8_0)
    writer.add_tensor("norm", w[0])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with GGUFFile(path, skip_arrays=True) as f:
        yield f, dequantize(quantize(w, Q.Q8_0), Q.Q8_0)


def test_rows_equal_gguf_and_only_the_blocks_are_kept(small):
    f, W = small
    emb = QuantizedEmbedding.from_gguf(f)
    assert emb.codes.dtype == torch.int8 and emb.codes.shape == (1000, 96)
    assert emb.scales.dtype == torch.float16 and emb.scales.shape == (1000, 3)
    assert emb.nbytes == 1000 * 96 + 1000 * 3 * 2 == f.tensors["token_embd.weight"].nbytes
    ids = torch.tensor([[0, 999, 5], [5, 17, 0]])  # (B, N)
    rows = emb(ids)  # (B, N, C)
    assert rows.shape == (2, 3, 96) and rows.dtype == torch.float32
    assert_close(rows.numpy(), W[ids.numpy()])
    assert_close(emb.dequantize().numpy(), W)
    assert emb(torch.tensor([], dtype=torch.int64)).shape == (0, 96)


@pytest.mark.parametrize("chunk_rows", [1, 7, 256, 5000])
def test_the_chunked_head_equals_the_float32_product(small, chunk_rows):
    f, W = small
    emb = QuantizedEmbedding.from_gguf(f, chunk_rows=chunk_rows)
    h = torch.randn(2, 5, 96, generator=torch.Generator().manual_seed(1))  # (B, N, C)
    logits = emb.logits(h)  # (B, N, V)
    assert logits.shape == (2, 5, 1000)
    expected = F.linear(h, torch.from_numpy(W))
    ulp = 2**-23 * float(expected.abs().max())  # float32's spacing at the largest logit
    assert_close(logits.numpy(), expected.numpy(), atol=8 * ulp, rtol=0)  # summation order
    exact = h.double() @ torch.from_numpy(W).double().T
    assert float((logits.double() - exact).abs().max()) < 8 * ulp


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_parts_run_side_by_side_and_the_thread_count_comes_back(small, threads):
    f, _ = small
    emb = QuantizedEmbedding.from_gguf(f, chunk_rows=64)
    h = torch.randn(3, 96, generator=torch.Generator().manual_seed(2))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        logits = emb.logits(h)
        assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)
    one = QuantizedEmbedding.from_gguf(f, chunk_rows=1000).logits(h)  # one chunk, one part
    assert_close(logits.numpy(), one.numpy())  # each row's product is the same, in any part


@pytest.mark.parametrize("mode", ["inference_mode", "no_grad"])
def test_the_parts_run_in_the_callers_mode(small, mode):
    """Inference and grad modes are per thread: the workers take on the caller's (under
    torch.inference_mode the output is an inference tensor, which only that mode may write)."""
    f, _ = small
    emb = QuantizedEmbedding.from_gguf(f, chunk_rows=64)
    h = torch.randn(3, 96, generator=torch.Generator().manual_seed(2))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with getattr(torch, mode)():
            logits = emb.logits(h)
    finally:
        torch.set_num_threads(before)
    assert logits.is_inference() == (mode == "inference_mode")
    assert_close(logits.numpy(), emb.logits(h).numpy())


def test_bad_input_is_named(small):
    f, _ = small
    emb = QuantizedEmbedding.from_gguf(f)
    with pytest.raises(
        ValueError, match=r"ids holds values in \[0, 1000\]; expected token ids in "
    ):
        emb(torch.tensor([0, 1000]))
    with pytest.raises(TypeError, match=r"ids must be an integer tensor; got torch.float32"):
        emb(torch.zeros(2))
    with pytest.raises(
        ValueError, match=r"h has dtype torch.float32 and shape \(2, 95\); expected "
    ):
        emb.logits(torch.zeros(2, 95))
    with pytest.raises(ValueError, match=r"h has dtype torch.float64 .* expected float32"):
        emb.logits(torch.zeros(2, 96, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"norm is F32 \(96,\); expected a Q8_0 matrix"):
        QuantizedEmbedding.from_gguf(f, "norm")
    with pytest.raises(KeyError, match=r"has no tensor 'output.weight'"):
        QuantizedEmbedding.from_gguf(f, "output.weight")
    with pytest.raises(ValueError, match=r"codes has dtype torch.float32 .* expected int8"):
        QuantizedEmbedding(torch.zeros(4, 32), torch.zeros(4, 1, dtype=torch.float16))
    with pytest.raises(
        ValueError, match=r"scales has dtype torch.float16 and shape \(4, 2\); expec"
    ):
        QuantizedEmbedding(torch.zeros(4, 32, dtype=torch.int8), torch.zeros(4, 2).half())
    with pytest.raises(ValueError, match=r"chunk_rows must be at least 1; got 0"):
        QuantizedEmbedding.from_gguf(f, chunk_rows=0)
    with pytest.raises(TypeError, match=r"chunk_rows must be an int; got bool"):
        QuantizedEmbedding.from_gguf(f, chunk_rows=True)


@pytest.mark.skipif(not GEMMA_INSTALLED, reason="the gemma3 part packages are not installed")
def test_gemma3_embedding_rows_and_head():
    with GGUFFile(find_model_file("gemma3"), skip_arrays=True) as f:
        emb = QuantizedEmbedding.from_gguf(f)
        assert (emb.num_embeddings, emb.embedding_dim) == (262144, 640)
        assert emb.nbytes == f.tensors["token_embd.weight"].nbytes  # 178 MB, not 671 MB
        ids = torch.tensor([2, 818, 5279, 262143, 0])
        raw = np.asarray(f.raw("token_embd.weight"))
        assert_close(emb(ids).numpy(), dequantize(raw[ids.numpy()], Q.Q8_0))
    rows = torch.arange(0, 262144, 4099)  # a sample of rows across the vocabulary
    h = torch.randn(2, 640, generator=torch.Generator().manual_seed(0))
    logits = emb.logits(h)  # (2, V)
    W = emb(rows)  # (n, C), exact rows
    expected = F.linear(h, W)
    ulp = 2**-23 * float(expected.abs().max())
    assert_close(logits[:, rows].numpy(), expected.numpy(), atol=8 * ulp, rtol=0)
