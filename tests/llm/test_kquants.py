"""mha_lib.llm.kquants: one Q4_K and one Q6_K super-block dequantized by hand equal gguf's
`dequantize` (on blocks of random bytes, and on real blocks of Gemma 3's file when installed);
the formats' sizes; the min-max Q4_K quantizer writes blocks gguf reads back; what the sub-block
scales buy; clear errors."""

import importlib.util

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize

from mha_lib.llm.kquants import (
    FORMATS,
    QK_K,
    bytes_per_weight,
    dequantize_q4_k_block,
    dequantize_q6_k_block,
    q4_k_scales,
    quantize_one_scale,
    quantize_q4_k,
    requantization_errors,
)
from mha_lib.llm.model_files import MODELS, find_model_file
from mha_lib.testing import assert_close

GEMMA_INSTALLED = all(importlib.util.find_spec(p) for p in MODELS["gemma3"].packages)


def random_blocks(nbytes: int, n: int, seed: int = 0, d_at: tuple[int, ...] = ()) -> np.ndarray:
    """n blocks of random bytes, with moderate float16s at the byte offsets d_at."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(n, nbytes), dtype=np.uint8)
    for at in d_at:
        d = rng.uniform(1e-3, 1e-1, size=n).astype(np.float16)
        blocks[:, at : at + 2] = d.view(np.uint8).reshape(n, 2)
    return blocks


def test_the_formats_bytes_per_weight():
    assert FORMATS["Q4_K"] == (256, 144) and FORMATS["Q6_K"] == (256, 210)
    assert bytes_per_weight("Q4_K") == 0.5625  # 4.5 bits: 4 + (2 · 16 + 8 · 2 · 6) / 256
    assert bytes_per_weight("Q6_K") == 210 / 256  # 6.5625 bits
    assert bytes_per_weight("Q5_0") == 22 / 32 and bytes_per_weight("Q8_0") == 34 / 32
    assert bytes_per_weight("F32") == 4
    with pytest.raises(ValueError, match=r"qtype = 'IQ2_XS'; expected one of F32, F16, "):
        bytes_per_weight("IQ2_XS")


def test_q4_k_block_equals_gguf_on_random_bytes():
    blocks = random_blocks(144, 64, d_at=(0, 2))
    ours = np.stack([dequantize_q4_k_block(b) for b in blocks])
    assert_close(ours, dequantize(blocks, Q.Q4_K).reshape(-1, QK_K))


def test_q6_k_block_equals_gguf_on_random_bytes():
    blocks = random_blocks(210, 64, d_at=(208,))
    ours = np.stack([dequantize_q6_k_block(b) for b in blocks])
    assert_close(ours, dequantize(blocks, Q.Q6_K).reshape(-1, QK_K))


def test_the_scales_unpack_as_gguf_and_pack_back():
    from gguf.quants import Q4_K

    packed = random_blocks(12, 200, seed=1)
    ours = np.stack([np.concatenate(q4_k_scales(p)) for p in packed])
    sc, m = Q4_K.get_scale_min(packed)
    assert np.array_equal(ours, np.concatenate([sc, m], axis=1))
    assert ours.min() == 0 and ours.max() == 63  # 6 bits each
    w = np.random.default_rng(2).normal(size=(50, QK_K)).astype(np.float32)
    blocks = quantize_q4_k(w)
    for b in blocks:  # the packing writes what the unpacking reads
        sc, m = q4_k_scales(b[4:16])
        assert sc.max() == 63 and m.max() == 63  # min-max: the widest sub-block takes 63


def test_the_quantizer_writes_blocks_gguf_reads_back_close_to_the_weights():
    rng = np.random.default_rng(3)
    w = (rng.normal(size=(40, QK_K)) * rng.uniform(0.01, 2, size=(40, 1))).astype(np.float32)
    blocks = quantize_q4_k(w)
    assert blocks.shape == (40, 144) and blocks.dtype == np.uint8
    back = dequantize(blocks, Q.Q4_K).reshape(-1, QK_K)
    assert_close(np.stack([dequantize_q4_k_block(b) for b in blocks]), back)
    spread = w.max(1, keepdims=True) - np.minimum(w.min(1, keepdims=True), 0)
    assert np.all(np.abs(back - w) <= spread / 15)  # within a step of the coarsest grid
    zeros = quantize_q4_k(np.zeros((1, QK_K), np.float32))
    assert np.array_equal(dequantize(zeros, Q.Q4_K), np.zeros((1, QK_K), np.float32))


def test_sub_block_scales_beat_one_scale_and_nearly_match_q4_1():
    rng = np.random.default_rng(4)
    w = rng.standard_t(df=5, size=(64, 1024)).astype(np.float32)  # heavier tails than normal
    e = requantization_errors(w)
    assert e["Q4_K"] < e["one scale per 256"] and e["Q4_1"] < e["one scale per 256"]
    assert e["Q4_K"] < 1.01 * e["Q4_1"]
    one = quantize_one_scale(w.reshape(-1, QK_K))
    assert len(np.unique(one[0])) <= 16  # 4-bit codes: at most 16 values a block
    with pytest.raises(ValueError, match=r"w has shape \(3, 100\); expected a number of weights"):
        requantization_errors(np.zeros((3, 100)))
    two = requantization_errors(w, ways=("one scale per 256", "Q4_K"))
    assert two == {k: e[k] for k in ("one scale per 256", "Q4_K")}
    with pytest.raises(ValueError, match="ways holds 'Q4_0'"):
        requantization_errors(w, ways=("Q4_0",))


def test_a_block_of_the_wrong_size_or_type_is_refused():
    with pytest.raises(
        ValueError, match=r"shape \(143,\); expected the \(144,\) uint8 bytes of one Q4_K"
    ):
        dequantize_q4_k_block(np.zeros(143, np.uint8))
    with pytest.raises(
        ValueError, match=r"dtype float32 .* expected the \(210,\) uint8 bytes of one Q6_K"
    ):
        dequantize_q6_k_block(np.zeros(210, np.float32))


@pytest.mark.skipif(not GEMMA_INSTALLED, reason="the gemma3 part packages are not installed")
def test_real_blocks_of_gemma3_equal_gguf():
    from mha_lib.llm.gguf_file import GGUFFile

    rng = np.random.default_rng(0)
    with GGUFFile(find_model_file("gemma3"), skip_arrays=True) as f:
        kinds = {t.qtype for t in f.tensors.values()}
        assert kinds == {"F32", "Q5_0", "Q4_K", "Q8_0", "Q6_K"}
        for name, t in f.tensors.items():
            assert t.nbytes == t.num_weights * bytes_per_weight(t.qtype), name
            if t.qtype not in ("Q4_K", "Q6_K"):
                continue
            assert t.shape[1] % QK_K == 0, name  # K-quants only where rows are whole blocks
            nbytes = FORMATS[t.qtype][1]
            raw = f.raw(name).reshape(-1, nbytes)
            picked = raw[rng.choice(len(raw), 8, replace=False)]
            fn = dequantize_q4_k_block if t.qtype == "Q4_K" else dequantize_q6_k_block
            ours = np.stack([fn(b) for b in picked])
            assert_close(ours, dequantize(picked, Q[t.qtype]).reshape(-1, QK_K))
