"""mha_lib.speech.ctranslate2: our reader gives back what was written (every dtype, aliases,
float16 widened exactly), refuses a file that is not a CTranslate2 model.bin with a message
naming what is wrong before it converts a weight, and reads the packaged Whisper base's file."""

import struct

import numpy as np
import pytest
import torch

from mha_lib.speech.ctranslate2 import read_ctranslate2, write_ctranslate2
from tests.speech.conftest import needs_whisper


def test_what_is_written_is_read_back(tmp_path):
    g = np.random.default_rng(0)
    variables = {
        "encoder/w": g.standard_normal((3, 5)).astype(np.float16),
        "encoder/b": g.standard_normal(7).astype(np.float32),
        "decoder/num_heads": np.array(8, np.int8),
        "decoder/alignment_heads": np.array(1, np.int16),
        "decoder/ids": np.arange(4, dtype=np.int32),
    }
    path = write_ctranslate2(
        tmp_path / "model.bin", variables, aliases={"decoder/out": "encoder/w"}
    )
    f = read_ctranslate2(path)
    assert (f.version, f.spec, f.revision) == (6, "WhisperSpec", 3)
    assert list(f.variables) == list(variables) and f.aliases == {"decoder/out": "encoder/w"}
    w = f["encoder/w"]
    assert w.dtype == torch.float32 and torch.equal(
        w, torch.from_numpy(variables["encoder/w"].astype(np.float32))
    )
    assert f["decoder/out"] is w  # an alias names the variable itself
    assert int(f["decoder/num_heads"]) == 8 and f["decoder/ids"].tolist() == [0, 1, 2, 3]
    assert f["decoder/num_heads"].dtype == torch.int64


def test_bfloat16_is_widened_exactly(tmp_path):
    x = torch.tensor([1.5, -2.25, 3.0e-3], dtype=torch.bfloat16)
    path = write_ctranslate2(tmp_path / "m.bin", {"x": np.zeros(3, np.int16)})
    raw = bytearray(path.read_bytes())
    at = raw.index(b"x\0") + 2 + 1 + 4  # after the name: rank, one dimension
    raw[at] = 5  # the dtype id of bfloat16
    raw[at + 5 : at + 11] = x.view(torch.int16).numpy().astype("<i2").tobytes()
    path.write_bytes(bytes(raw))
    assert torch.equal(read_ctranslate2(path)["x"], x.float())


def _header(version=6, spec="WhisperSpec"):
    name = spec.encode() + b"\0"
    return struct.pack("<I", version) + struct.pack("<H", len(name)) + name + struct.pack("<I", 3)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", r"ends at byte 0 inside the binary version"),
        (b"GGUF\x03\x00\x00\x00", r"starts with binary version 1179993927; expected a CTranslate2"),
        (
            struct.pack("<I", 6) + b"\x05\x00WhisperSpec",
            r"the specification's name is not a NUL-terminated",
        ),
        (
            _header() + struct.pack("<I", 1) + b"\x02\x00x\0" + b"\x09",
            r"x has rank 9; expected at most 8",
        ),
        (
            _header() + struct.pack("<I", 1) + b"\x02\x00x\0\x01" + struct.pack("<I", 2) + b"\x07",
            r"x has dtype id 7",
        ),
        (
            _header()
            + struct.pack("<I", 1)
            + b"\x02\x00x\0\x01"
            + struct.pack("<I", 2)
            + b"\x00"
            + struct.pack("<I", 4),
            r"x of shape \(2,\) and dtype float32 stores 4 bytes; expected 8",
        ),
        (
            _header()
            + struct.pack("<I", 1)
            + b"\x02\x00x\0\x01"
            + struct.pack("<I", 2)
            + b"\x00"
            + struct.pack("<I", 8)
            + b"\0" * 4,
            r"ends at byte \d+ inside x's bytes",
        ),
        (_header() + struct.pack("<II", 0, 0) + b"extra", r"has 5 bytes after its last alias"),
        (
            _header() + struct.pack("<II", 0, 1) + b"\x02\x00a\0\x02\x00b\0",
            r"alias 'a' names 'b', no variable",
        ),
    ],
)
def test_a_file_that_is_not_one_is_refused_saying_why(tmp_path, content, message):
    path = tmp_path / "model.bin"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        read_ctranslate2(path)


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"is not a file"):
        read_ctranslate2(tmp_path / "nothing.bin")


@needs_whisper
def test_the_packaged_whisper_base_file():
    from mha_lib.llm.model_files import find_model_file

    f = read_ctranslate2(find_model_file("whisper"))
    assert (f.version, f.spec, f.revision) == (6, "WhisperSpec", 3)
    assert len(f.variables) == 212 and f.aliases == {
        "decoder/projection/weight": "decoder/embeddings/weight"
    }
    assert f["decoder/embeddings/weight"].shape == (51865, 512)
    assert f["encoder/conv1/weight"].shape == (512, 80, 3)
    assert int(f["encoder/num_heads"]) == int(f["decoder/num_heads"]) == 8
