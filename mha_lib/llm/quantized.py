"""A tied embedding kept as its Q8_0 blocks: rows dequantized when looked up, the output head
computed chunk by chunk.

Used by notebook 15. Gemma 3 270M's embedding `token_embd.weight` is a (V, C) = (262144, 640)
matrix in Q8_0: every 32 weights of a row share a float16 scale d, w = d · q with q an int8.
Dequantized to float32 it is 671 MB, more than a learner's notebook may keep (Binder: at most
800 MB after the run). The same matrix is the input embedding and, tied, the output head
(logits = h Wᵀ). `QuantizedEmbedding` keeps what the file stores, the codes (V, C) int8 and the
scales (V, C/32) float16, 178 MB:

- `forward(ids)`: the rows of ids, dequantized (only those): (..., C), equal to gguf's
  `dequantize` of the same rows;
- `logits(h)`: h (..., C) -> (..., V), the rows dequantized `chunk_rows` at a time into a
  float32 buffer, each chunk multiplied by h as a float32 matrix product: the logits of the
  dequantized float32 matrix, to float32 rounding, with one small chunk in float32 at a time;
- `dequantize()`: the whole (V, C) float32 matrix, for comparisons.

Speed. Per token the head turns 168 M int8 codes into float32 before the product, where
`F.linear` on a float32 matrix reads 671 MB as they are. In chunks of 2048 rows (5 MB, which stay
in the processor's cache) one thread does it as fast as one thread runs `F.linear`. Split into
many small operations, torch's own threads spend their time waiting for each other (on a busy
machine, 20 times slower); so `logits` cuts the vocabulary into one part per torch thread and
runs each part in a thread of its own, with single-threaded kernels, and sets torch's thread
count back afterwards. Imports torch and numpy.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise

import numpy as np
import torch
from torch import Tensor, nn

from .._checks import check_int
from .gguf_file import GGUFFile

__all__ = ["BLOCK", "QuantizedEmbedding"]

BLOCK = 32  # weights sharing one scale in Q8_0
CHUNK_ROWS = 2048  # rows dequantized at once by `logits`: a 5 MB float32 buffer for C = 640


class QuantizedEmbedding(nn.Module):
    """A (V, C) Q8_0 matrix as int8 codes (V, C) and float16 scales (V, C / 32)."""

    def __init__(self, codes: Tensor, scales: Tensor, chunk_rows: int = CHUNK_ROWS) -> None:
        super().__init__()
        if codes.dtype != torch.int8 or codes.dim() != 2 or codes.shape[1] % BLOCK:
            raise ValueError(
                f"codes has dtype {codes.dtype} and shape {tuple(codes.shape)}; expected int8 "
                f"(V, C) with C a multiple of {BLOCK}"
            )
        V, C = codes.shape
        if scales.dtype != torch.float16 or tuple(scales.shape) != (V, C // BLOCK):
            raise ValueError(
                f"scales has dtype {scales.dtype} and shape {tuple(scales.shape)}; expected "
                f"float16 ({V}, {C // BLOCK}): one scale per {BLOCK} codes"
            )
        check_int(chunk_rows, "chunk_rows")
        self.register_buffer("codes", codes, persistent=False)  # (V, C) int8
        self.register_buffer("scales", scales, persistent=False)  # (V, C/32) float16
        self.num_embeddings, self.embedding_dim = V, C
        self.chunk_rows = chunk_rows

    @classmethod
    def from_gguf(cls, f: GGUFFile, name: str = "token_embd.weight", **kwargs):
        """The Q8_0 tensor name of an open GGUF file, its codes and scales copied out."""
        info = f.tensors.get(name)
        if info is None:
            raise KeyError(f"{f.path.name} has no tensor {name!r}")
        if info.qtype != "Q8_0" or len(info.shape) != 2:
            raise ValueError(f"{name} is {info.qtype} {info.shape}; expected a Q8_0 matrix")
        V, C = info.shape
        blocks = np.asarray(f.raw(name)).reshape(V, C // BLOCK, 2 + BLOCK)  # d (2 bytes), 32 q
        scales = torch.from_numpy(blocks[:, :, :2].copy().view("<f2").reshape(V, C // BLOCK))
        codes = torch.from_numpy(blocks[:, :, 2:].copy().view(np.int8).reshape(V, C))
        return cls(codes, scales.to(torch.float16), **kwargs)

    @property
    def nbytes(self) -> int:
        """Bytes kept: the codes and the scales."""
        return self.codes.nbytes + self.scales.nbytes

    def _dequantize(self, codes: Tensor, scales: Tensor, out: Tensor | None = None) -> Tensor:
        """codes (n, C) int8, scales (n, C/32) float16 -> (n, C) float32, w = d · q."""
        n, C = codes.shape
        w = torch.empty(n, C) if out is None else out
        w.copy_(codes)  # int8 -> float32, exact
        w.view(n, C // BLOCK, BLOCK).mul_(scales.float()[:, :, None])  # (n, C/32, 32)
        return w

    def forward(self, ids: Tensor) -> Tensor:
        """The embedding rows of token ids (...,): (..., C) float32."""
        if not isinstance(ids, Tensor) or ids.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"ids must be an integer tensor; got {getattr(ids, 'dtype', ids)}")
        if ids.numel() and not (0 <= int(ids.min()) and int(ids.max()) < self.num_embeddings):
            raise ValueError(
                f"ids holds values in [{int(ids.min())}, {int(ids.max())}]; expected token ids in "
                f"[0, {self.num_embeddings})"
            )
        flat = ids.reshape(-1)
        rows = self._dequantize(self.codes[flat], self.scales[flat])  # (n, C)
        return rows.view(*ids.shape, self.embedding_dim)

    def dequantize(self) -> Tensor:
        """The whole matrix (V, C) in float32 (671 MB for Gemma 3 270M)."""
        return self._dequantize(self.codes, self.scales)

    def logits(self, h: Tensor) -> Tensor:
        """The tied output head: h (..., C) float32 -> h Wᵀ (..., V), one chunk of rows of W
        dequantized at a time."""
        if (
            not isinstance(h, Tensor)
            or h.dtype != torch.float32
            or h.shape[-1:] != (self.embedding_dim,)
        ):
            raise ValueError(
                f"h has dtype {getattr(h, 'dtype', type(h).__name__)} and shape "
                f"{tuple(getattr(h, 'shape', ()))}; expected float32 (..., {self.embedding_dim})"
            )
        x = h.reshape(-1, self.embedding_dim)  # (M, C)
        out = torch.empty(x.shape[0], self.num_embeddings)  # (M, V)
        step = min(self.chunk_rows, self.num_embeddings)

        # the caller's grad and inference modes, which are per thread: the workers take them on
        inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()

        def part(rows: tuple[int, int]) -> None:  # rows [start, stop) of the vocabulary
            with torch.inference_mode(inference), torch.set_grad_enabled(grad):
                buffer = torch.empty(step, self.embedding_dim)  # (chunk, C), reused
                for r0 in range(rows[0], rows[1], step):
                    r1 = min(rows[1], r0 + step)
                    w = self._dequantize(self.codes[r0:r1], self.scales[r0:r1], buffer[: r1 - r0])
                    out[:, r0:r1] = x @ w.T  # (M, chunk)

        threads = torch.get_num_threads()
        chunks = -(-self.num_embeddings // step)
        bounds = [
            min(self.num_embeddings, step * (chunks * i // threads)) for i in range(threads + 1)
        ]
        parts = [(a, b) for a, b in pairwise(bounds) if a < b]  # one part per thread
        if len(parts) == 1:
            part(parts[0])
        else:
            torch.set_num_threads(1)  # each part single-threaded, the parts side by side
            try:
                with ThreadPoolExecutor(len(parts)) as pool:
                    list(pool.map(part, parts))
            finally:
                torch.set_num_threads(threads)
        return out.view(*h.shape[:-1], self.num_embeddings)
