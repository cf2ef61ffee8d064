"""Where each rank's weights come from: weight sources that read one shard and nothing else.

Derived in notebook 14 §3. The model itself is notebook 12's (`mha_lib.nn.decoder`: its
`DecoderConfig`, `RMSNorm`, `SwiGLU`, `DecoderAttention` with `positions.rope`, `DecoderLM`);
what is distributed-specific is that every rank builds its own part of it, in its own process,
reading only the rows and columns it holds. A *weight source* is a callable

    weights(name, rows=None, cols=None) -> float32 tensor

with `DecoderLM`'s parameter names ("embed.weight", "layers.0.self_attn.q_proj.weight", ...) and
torch's (out, in) layout; rows and cols are (start, stop) ranges or None (all), as in
`GGUFFile.read`. A source also has `config` (the `DecoderConfig`) and `model()`, the whole model in
one process (the reference), and `close()`, called once the weights are read. It travels to
each rank pickled, so it carries a path or a seed, never weights.

What it holds:
- `TINY`: notebook 14's random-weight model (width 48, 6 query heads and 3 key/value heads of 8,
  2 layers, a vocabulary of 96): SmolLM2's architecture, small;
- `parameter_shapes(config)`: {name: shape} of every parameter of a `DecoderLM`;
- `RandomWeights(config, seed)`: seeded random weights, each tensor drawn from a generator
  seeded by the seed and its name, so any process reading any part of it gets the same numbers;
- `GGUFWeights(path)`: SmolLM2-135M's GGUF file (by default the packaged one), opened in each
  process with `GGUFFile(path, skip_arrays=True)` (the tensor table without the vocabulary) and
  read with notebook 12's `llm.loader.read_weight` (`GGUFFile.read(name, rows=, cols=)` a few MB
  at a time, the rows of W_Q and W_K put back into the half-split RoPE layout, as
  `load_decoder` reads them); `model()` is `load_decoder`;
- `fill(model, plan, weights)`: every parameter of a model built on the meta device, read from
  a source through a plan {name: (rows, cols)}; returns how many numbers were read.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import torch
from torch import Tensor, nn

from ..llm.gguf_file import GGUFFile, find_model_file
from ..llm.loader import load_decoder, read_weight
from ..models import config_from_gguf, gguf_names
from ..models.llama import ROPE_PERMUTED
from ..nn.decoder import DecoderConfig, DecoderLM

__all__ = ["TINY", "GGUFWeights", "RandomWeights", "fill", "parameter_shapes"]

# notebook 14's random-weight model: 2 query heads per key/value head (SmolLM2 has 3)
TINY = DecoderConfig(
    vocab_size=96,
    hidden_size=48,
    num_layers=2,
    num_heads=6,
    num_kv_heads=3,
    head_dim=8,
    intermediate_size=96,
    rope_base=10000.0,
    rms_norm_eps=1e-5,
    context_length=64,
)


def parameter_shapes(config: DecoderConfig) -> dict[str, tuple[int, ...]]:
    """{name: shape} of every parameter of DecoderLM(config) (built on the meta device)."""
    with torch.device("meta"):
        model = DecoderLM(config)
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


def _span(span: tuple[int, int] | None, size: int) -> slice:
    return slice(0, size) if span is None else slice(*span)


class RandomWeights:
    """A weight source of seeded random weights: `weights(name, rows, cols)`.

    Linear weights are normal with standard deviation 1/√in (outputs of order 1), the embedding
    normal with standard deviation 1, norm weights 1 + 0.2·normal (so that a norm weight read
    from the wrong place shows). Tensor `name` comes from a generator seeded with
    crc32("seed:name"): the same numbers in every process. Each call draws the whole tensor
    (the models it is meant for are small) and returns the part asked for.
    """

    def __init__(self, config: DecoderConfig, seed: int = 0, dtype: torch.dtype = torch.float32):
        self.config, self.seed, self.dtype = config, seed, dtype
        self.shapes = parameter_shapes(config)

    def __call__(self, name: str, rows=None, cols=None) -> Tensor:
        if name not in self.shapes:
            raise KeyError(f"no weight named {name!r} in this model")
        shape = self.shapes[name]
        g = torch.Generator().manual_seed(zlib.crc32(f"{self.seed}:{name}".encode()))
        if len(shape) == 1:  # a norm's weight, (C,)
            full = 1 + 0.2 * torch.randn(shape, generator=g, dtype=torch.float64)
            return full[_span(rows, shape[0])].to(self.dtype)
        std = 1.0 if name == "embed.weight" else shape[1] ** -0.5
        full = std * torch.randn(shape, generator=g, dtype=torch.float64)
        part = full[_span(rows, shape[0]), _span(cols, shape[1])]
        return part.to(self.dtype).contiguous()

    def close(self) -> None:
        """Nothing to let go of (the weights are drawn on each call)."""

    def model(self) -> DecoderLM:
        """The whole model in one process: notebook 12's DecoderLM with these weights."""
        with torch.device("meta"):
            model = DecoderLM(self.config)
        fill(model, {name: (None, None) for name in self.shapes}, self)
        return model.eval()


class GGUFWeights:
    """A weight source over a GGUF file of a Llama-style model (default: SmolLM2-135M's).

    Pickled, it carries its path, and the config and names it read there, no weight; each
    process opens the file itself, once, with `GGUFFile(path, skip_arrays=True)`, and every
    call reads just the rows and columns asked for (`GGUFFile.read`: only the blocks holding
    them are dequantized). Columns of a quantised matrix must start and stop on its 32-weight
    blocks; rows of W_Q and W_K must be whole heads.
    """

    def __init__(self, path: str | Path | None = None):
        self.path = find_model_file() if path is None else Path(path)
        self._file: GGUFFile | None = None
        self.config = config_from_gguf(self.file)
        self.names = {ours: theirs for theirs, ours in gguf_names(self.config).items()}

    @property
    def file(self) -> GGUFFile:
        """The file, opened in this process on first use (without its metadata's arrays)."""
        if self._file is None:
            self._file = GGUFFile(self.path, skip_arrays=True)
        return self._file

    def close(self) -> None:
        """Close the file in this process (its memory map: the pages read so far); the next
        read opens it again."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __getstate__(self) -> dict:
        return {"path": self.path, "config": self.config, "names": self.names}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _file=None)

    def __call__(self, name: str, rows=None, cols=None) -> Tensor:
        if name not in self.names:
            raise KeyError(f"no weight named {name!r} in {self.path.name}")
        theirs = self.names[name]
        n = self.file.tensors[theirs].shape
        if len(n) == 1:  # a norm's weight (C,), whole, or a bias with its heads' rows
            return self.file.read(theirs)[_span(rows, n[0])]
        start, stop = (0, n[0]) if rows is None else rows
        if not 0 <= start < stop <= n[0]:
            raise ValueError(f"rows = {rows} of {name}; expected 0 <= start < stop <= {n[0]}")
        rope_rows, d = theirs.endswith(ROPE_PERMUTED), self.config.head_dim
        if rope_rows and (start % d or stop % d):
            raise ValueError(f"rows = {rows} of {name}: expected whole heads of {d} rows")
        return read_weight(self.file, theirs, (start, stop), cols, head_dim=d)

    def model(self) -> DecoderLM:
        """The whole model in one process: notebook 12's `load_decoder` on the same file."""
        model = load_decoder(self.file)
        self.close()
        return model


def fill(model: nn.Module, plan: dict, weights) -> int:
    """Give each parameter of `model` (built on the meta device: shapes only) the part of the
    weight `plan[name] = (rows, cols)` that `weights` returns; the number of numbers read."""
    params = dict(model.named_parameters())
    if set(plan) != set(params):
        missing, extra = sorted(set(params) - set(plan)), sorted(set(plan) - set(params))
        raise ValueError(f"the plan does not fit the model: missing {missing}, extra {extra}")
    read = 0
    for name, (rows, cols) in plan.items():
        t = weights(name, rows, cols)
        if tuple(t.shape) != tuple(params[name].shape):
            raise ValueError(
                f"{name}: the source gave shape {tuple(t.shape)}; the model holds "
                f"{tuple(params[name].shape)} (rows {rows}, cols {cols})"
            )
        module_name, _, key = name.rpartition(".")
        setattr(model.get_submodule(module_name), key, nn.Parameter(t, requires_grad=False))
        read += t.numel()
    return read
