"""A reader of CTranslate2's `model.bin`: the format Whisper base ships in, read by our own code.

Used by notebook 17 (`load_whisper`). The file is little-endian and holds, in order:
- the binary version (uint32; 6 for the files CTranslate2 writes today, 3 to 6 read here), the
  specification's name (a string: uint16 length counting a closing NUL byte, then the bytes and
  that NUL; "WhisperSpec") and its revision (uint32);
- the number of variables (uint32), then each variable: its name (a string, scopes joined by
  "/": `encoder/layer_0/self_attention/linear_0/weight`), its rank (uint8), each dimension
  (uint32), its dtype (uint8, CTranslate2's `DataType`: 0 float32, 1 int8, 2 int16, 3 int32,
  4 float16, 5 bfloat16), its size in bytes (uint32) and the bytes, row-major;
- the number of aliases (uint32), then each alias and the variable it names (two strings).

`read_ctranslate2(path)` -> `CTranslate2File` (`.version`, `.spec`, `.revision`, `.variables`
{name: torch tensor}, `.aliases` {alias: name}); floating weights come back as float32 (float16
and bfloat16 widened exactly), integers as int64. A file that is not one (wrong size, version,
name, rank, dtype or byte count) is refused with a ValueError naming what is wrong, from the
header alone, before any weight is converted.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

__all__ = ["DTYPES", "CTranslate2File", "read_ctranslate2", "write_ctranslate2"]

VERSIONS = range(3, 7)  # binary versions read here (aliases since 3, spec revision since 4)
# CTranslate2's DataType ids -> (numpy dtype of the stored bytes, its name)
DTYPES = {
    0: (np.dtype("<f4"), "float32"),
    1: (np.dtype("i1"), "int8"),
    2: (np.dtype("<i2"), "int16"),
    3: (np.dtype("<i4"), "int32"),
    4: (np.dtype("<f2"), "float16"),
    5: (np.dtype("<u2"), "bfloat16"),  # the top 16 bits of a float32
}
MAX_RANK = 8


@dataclass
class CTranslate2File:
    """A read model.bin: its binary version, specification name and revision, variables and
    aliases (an alias names another variable: the decoder's output projection is often the
    embedding)."""

    version: int
    spec: str
    revision: int
    variables: dict[str, torch.Tensor]
    aliases: dict[str, str]

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.variables[self.aliases.get(name, name)]


class _Cursor:
    """Reads little-endian fields of a bytes-like buffer, refusing to run past its end."""

    def __init__(self, data, path: Path) -> None:
        self.data, self.pos, self.path = data, 0, path

    def take(self, n: int, what: str):
        if self.pos + n > len(self.data):
            raise ValueError(
                f"{self.path.name} ends at byte {len(self.data)} inside {what} (needs "
                f"{self.pos + n}): not a CTranslate2 model.bin, or a truncated one"
            )
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def u8(self, what: str) -> int:
        return self.take(1, what)[0]

    def u16(self, what: str) -> int:
        return struct.unpack("<H", self.take(2, what))[0]

    def u32(self, what: str) -> int:
        return struct.unpack("<I", self.take(4, what))[0]

    def string(self, what: str) -> str:
        n = self.u16(what)
        raw = bytes(self.take(n, what))
        if n == 0 or raw[-1] != 0:
            raise ValueError(f"{self.path.name}: {what} is not a NUL-terminated string")
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{self.path.name}: {what} is not UTF-8 text") from e


def read_ctranslate2(path: str | Path) -> CTranslate2File:
    """Read a CTranslate2 model.bin (see the module docstring). The whole layout is checked
    first (the header, every variable's name, rank, shape, dtype and byte count, the aliases,
    nothing after them); only then are the weights converted, float16 to float32."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is not a file")
    data = memoryview(np.memmap(path, dtype=np.uint8, mode="r")) if path.stat().st_size else b""
    c = _Cursor(data, path)
    version = c.u32("the binary version")
    if version not in VERSIONS:
        raise ValueError(
            f"{path.name} starts with binary version {version}; expected a CTranslate2 model.bin "
            f"of version {VERSIONS.start} to {VERSIONS.stop - 1} (is it a model.bin at all?)"
        )
    spec = c.string("the specification's name")
    revision = c.u32("the specification's revision") if version >= 4 else 1
    layout = []  # (name, shape, dtype id, offset)
    for i in range(c.u32("the number of variables")):
        name = c.string(f"variable {i}'s name")
        rank = c.u8(f"{name}'s rank")
        if rank > MAX_RANK:
            raise ValueError(f"{path.name}: {name} has rank {rank}; expected at most {MAX_RANK}")
        shape = tuple(c.u32(f"{name}'s shape") for _ in range(rank))
        dtype = c.u8(f"{name}'s dtype")
        if dtype not in DTYPES:
            raise ValueError(
                f"{path.name}: {name} has dtype id {dtype}; expected one of "
                + ", ".join(f"{k} ({v[1]})" for k, v in DTYPES.items())
            )
        size = c.u32(f"{name}'s byte count")
        expected = int(np.prod(shape, dtype=np.int64)) * DTYPES[dtype][0].itemsize
        if size != expected:
            raise ValueError(
                f"{path.name}: {name} of shape {shape} and dtype {DTYPES[dtype][1]} stores "
                f"{size} bytes; expected {expected}"
            )
        layout.append((name, shape, dtype, c.pos))
        c.take(size, f"{name}'s bytes")
    aliases = {}
    if version >= 3:
        for i in range(c.u32("the number of aliases")):
            alias = c.string(f"alias {i}")
            aliases[alias] = c.string(f"alias {alias!r}'s variable")
    if c.pos != len(data):
        raise ValueError(
            f"{path.name} has {len(data) - c.pos} bytes after its last alias: not a CTranslate2 "
            "model.bin"
        )
    names = {name for name, *_ in layout}
    for alias, target in aliases.items():
        if target not in names:
            raise ValueError(f"{path.name}: alias {alias!r} names {target!r}, no variable")
    variables = {name: _tensor(data, shape, dtype, at) for name, shape, dtype, at in layout}
    return CTranslate2File(version, spec, revision, variables, aliases)


def _tensor(data, shape: tuple[int, ...], dtype: int, at: int) -> torch.Tensor:
    """One variable's bytes as a tensor: float32 for every floating type, int64 for integers."""
    np_dtype, name = DTYPES[dtype]
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.frombuffer(data, dtype=np_dtype, count=count, offset=at).reshape(shape)
    if name == "bfloat16":
        return torch.from_numpy(raw.astype(np.uint32) << 16).view(torch.float32).clone()
    if name in ("float16", "float32"):
        return torch.from_numpy(raw.astype(np.float32))
    return torch.from_numpy(raw.astype(np.int64))


def write_ctranslate2(
    path: str | Path,
    variables: dict[str, np.ndarray],
    *,
    spec: str = "WhisperSpec",
    revision: int = 3,
    aliases: dict[str, str] | None = None,
    version: int = 6,
) -> Path:
    """Write a model.bin in the layout `read_ctranslate2` reads (for tests: tiny random models,
    files broken on purpose). Arrays keep their numpy dtype (float32, float16, int8/16/32)."""
    ids = {v[0]: k for k, v in DTYPES.items() if v[1] != "bfloat16"}

    def string(s: str) -> bytes:
        raw = s.encode("utf-8") + b"\0"
        return struct.pack("<H", len(raw)) + raw

    out = [struct.pack("<I", version), string(spec), struct.pack("<I", revision)]
    out.append(struct.pack("<I", len(variables)))
    for name, value in variables.items():
        value = np.ascontiguousarray(value)
        dtype = value.dtype.newbyteorder("<") if value.dtype.itemsize > 1 else value.dtype
        out += [string(name), struct.pack("<B", value.ndim)]
        out += [struct.pack("<I", d) for d in value.shape]
        out += [struct.pack("<B", ids[np.dtype(dtype)]), struct.pack("<I", value.nbytes)]
        out.append(value.astype(dtype).tobytes())
    aliases = aliases or {}
    out.append(struct.pack("<I", len(aliases)))
    for alias, target in aliases.items():
        out += [string(alias), string(target)]
    path = Path(path)
    path.write_bytes(b"".join(out))
    return path
