"""fla-core's pure-torch NSA reference, loaded by path, and its outputs stored for machines
without it.

fla-core 0.6.0 (flash-linear-attention's core package) holds NSA's naive reference in
`fla/ops/nsa/naive.py`: `naive_nsa_selection` (the selected branch), `naive_nsa_compression`
(the compressed branch), `naive_nsa_topk` (the choice of blocks) and `naive_nsa` (the gated sum;
its window branch calls flash-attn, so it is used here with window_size = 0). fla itself is never
installed where transformers runs: its wheel is downloaded without dependencies
(`pip download --no-deps fla-core==0.6.0 -d /tmp/fla_wheel`) and unzipped into a folder
(`FLA_SRC`, default /tmp/fla_src), and only that one file is loaded, by path. It imports
`einops.repeat` (one pattern), `fla.ops.utils.prepare_chunk_offsets` (for variable lengths,
unused here) and `fla.ops.utils.pooling.mean_pooling` (a Triton kernel): `load_naive` gives it
small stand-ins for the three, and flash-attn is left absent (the file only warns).
`fla_mean_pooling` is the stand-in for the kernel, written as a plain loop from the kernel's
code (chunks of `block_size` tokens, the last one averaged over the tokens it has).

`python -m tests.sparse_attention.fla_nsa [FLA_SRC]` writes `REFERENCE_FILE`: for each case of
`CASES` the outputs of fla's functions on inputs drawn by `case_inputs` (numpy's PCG64 from the
case's seed, float32), with the file's sha256, fla-core's version and the run's provenance.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import sys
import types
import warnings
from importlib import resources
from pathlib import Path

import numpy as np
import torch

from mha_lib.runtime import provenance

FLA_VERSION = "0.6.0"
NAIVE_PATH = "fla/ops/nsa/naive.py"  # inside the wheel
NAIVE_SHA256 = "7f36fe31b25608466d5eb635a70aced4ace7d082187936fe158211799279d2c3"
FLA_SRC = Path(os.environ.get("FLA_SRC", "/tmp/fla_src"))
REFERENCE_FILE = Path(str(resources.files("mha_lib") / "data" / "nsa_reference.json"))
MADE_BY = "python -m tests.sparse_attention.fla_nsa /tmp/fla_src"

# Odd sizes, GQA (G = h / h_kv query heads per group), B = 2 once, blocks of l = d = l' (fla's
# NSA), N not a multiple of the block, n_selected below and above the number of blocks, 16
# blocks once ("long": many choices made on merit, not forced). "full": naive_nsa (its GQA must
# have G >= 16, a power of 2).
CASES = [
    dict(name="gqa2", seed=0, B=1, N=13, h=4, h_kv=2, d_k=5, d_v=3, block=3, n_selected=3),
    dict(name="gqa3", seed=1, B=2, N=11, h=3, h_kv=1, d_k=4, d_v=2, block=4, n_selected=4),
    dict(name="mha", seed=2, B=1, N=11, h=3, h_kv=3, d_k=6, d_v=2, block=2, n_selected=5),
    dict(name="many", seed=3, B=1, N=9, h=2, h_kv=1, d_k=3, d_v=2, block=2, n_selected=9),
    dict(name="long", seed=5, B=1, N=31, h=2, h_kv=1, d_k=4, d_v=2, block=2, n_selected=6),
    dict(name="full", seed=4, B=1, N=9, h=16, h_kv=1, d_k=4, d_v=2, block=2, n_selected=3),
]


def case_inputs(case: dict) -> dict[str, torch.Tensor]:
    """q (B, h, N, d_k), k (B, h_kv, N, d_k), v (B, h_kv, N, d_v) in the series' layout, the
    gates (B, h, N, 2) in (0, 1) (compressed, selected), float32, and random block indices
    (B, h_kv, N, n) for the selection branch alone: distinct blocks at or before the query's, at
    least one, the unused slots -1 (a repeated block would count twice in fla's gather)."""
    rng = np.random.default_rng(case["seed"])
    B, N, h, h_kv = case["B"], case["N"], case["h"], case["h_kv"]
    d_k, d_v, block, n = case["d_k"], case["d_v"], case["block"], case["n_selected"]

    def normal(*shape):
        return torch.from_numpy(rng.standard_normal(shape).astype(np.float32))

    q, k, v = normal(B, h, N, d_k), normal(B, h_kv, N, d_k), normal(B, h_kv, N, d_v)
    gates = torch.sigmoid(normal(B, h, N, 2))
    indices = np.full((B, h_kv, N, n), -1)
    for b, head, t in np.ndindex(B, h_kv, N):
        blocks = rng.permutation(t // block + 1)[:n]  # distinct blocks at or before the query's
        keep = max(1, int((rng.random(len(blocks)) > 0.25).sum()))  # some slots left unused
        indices[b, head, t, :keep] = blocks[:keep]
    return dict(q=q, k=k, v=v, gates=gates, indices=torch.from_numpy(indices))


def fla_layout(x: torch.Tensor) -> torch.Tensor:
    """(B, heads, N, ·) -> fla's (B, N, heads, ·)."""
    return x.transpose(1, 2).contiguous()


def fla_mean_pooling(x: torch.Tensor, chunk_size: int, cu_seqlens=None) -> torch.Tensor:
    """fla's `mean_pooling` kernel as a loop: x (B, T, H, D) -> (B, ⌈T / chunk_size⌉, H, D), the
    mean of each chunk of chunk_size tokens, the last over the tokens it has."""
    if cu_seqlens is not None:
        raise NotImplementedError("variable lengths are not used here")
    B, T, H, D = x.shape
    out = x.new_zeros(B, -(-T // chunk_size), H, D)
    for i, start in enumerate(range(0, T, chunk_size)):
        out[:, i] = x[:, start : start + chunk_size].float().mean(1).to(x.dtype)
    return out


def _repeat(x: torch.Tensor, pattern: str, **sizes) -> torch.Tensor:
    """einops.repeat for the one pattern naive.py uses."""
    if pattern != "b t h d -> b t (h g) d" or set(sizes) != {"g"}:
        raise NotImplementedError(f"einops pattern {pattern!r} with {sizes}")
    if x.dim() != 4:
        raise NotImplementedError("4-d tensors only")
    return x.repeat_interleave(sizes["g"], dim=2)  # (h g): each head repeated g times, in place


@contextlib.contextmanager
def _stand_ins():
    """Put einops, fla.ops.utils(.pooling) stand-ins in sys.modules while naive.py imports,
    leaving any module already there alone and taking the stand-ins out afterwards."""
    einops = types.ModuleType("einops")
    einops.repeat = _repeat
    utils = types.ModuleType("fla.ops.utils")

    def prepare_chunk_offsets(*args, **kwargs):
        raise NotImplementedError("variable lengths are not used here")

    utils.prepare_chunk_offsets = prepare_chunk_offsets
    pooling = types.ModuleType("fla.ops.utils.pooling")
    pooling.mean_pooling = fla_mean_pooling
    shims = {
        "einops": einops,
        "fla": types.ModuleType("fla"),
        "fla.ops": types.ModuleType("fla.ops"),
        "fla.ops.utils": utils,
        "fla.ops.utils.pooling": pooling,
    }
    added = [name for name in shims if name not in sys.modules]
    for name in added:
        sys.modules[name] = shims[name]
    try:
        yield
    finally:
        for name in added:
            del sys.modules[name]


def naive_file(root: Path = FLA_SRC) -> Path:
    return Path(root) / NAIVE_PATH


def load_naive(root: Path = FLA_SRC) -> types.ModuleType:
    """fla-core's naive.py from the unzipped wheel at root, by path, with stand-ins for what it
    imports. FileNotFoundError when it is not there; ValueError when it is another version."""
    path = naive_file(root)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is not there (unzip fla-core {FLA_VERSION}'s wheel)")
    if hashlib.sha256(path.read_bytes()).hexdigest() != NAIVE_SHA256:
        raise ValueError(f"{path} is not fla-core {FLA_VERSION}'s naive.py (its sha256 differs)")
    spec = importlib.util.spec_from_file_location("fla_nsa_naive", path)
    module = importlib.util.module_from_spec(spec)
    with _stand_ins(), warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", ImportWarning
        )  # flash-attn absent: only the window needs it
        spec.loader.exec_module(module)
    return module


def fla_outputs(naive: types.ModuleType, case: dict) -> dict[str, torch.Tensor]:
    """fla's outputs on the case's inputs, in the series' layout: "topk" (B, h_kv, N, n) (fla's
    order, -1 padded); "selection" (B, h, N, d_v), of the random indices, and "compression"
    (B, h, N, d_v); for G >= 16 (what naive_nsa takes) "nsa" (B, h, N, d_v) in their place,
    naive_nsa's gated sum of the two with window_size = 0."""
    x = case_inputs(case)
    q, k, v = (fla_layout(x[name]) for name in ("q", "k", "v"))
    block, n = case["block"], case["n_selected"]
    scale = case["d_k"] ** -0.5
    k_cmp, v_cmp = fla_mean_pooling(k, block), fla_mean_pooling(v, block)
    out = {"topk": naive.naive_nsa_topk(q, k_cmp, n, block, scale)}
    if case["h"] // case["h_kv"] < 16:
        out["selection"] = naive.naive_nsa_selection(q, k, v, fla_layout(x["indices"]), block)
        out["compression"] = naive.naive_nsa_compression(q, k_cmp, v_cmp, block, scale)[0]
    else:
        g = fla_layout(x["gates"])  # (B, N, h, 2)
        out["nsa"] = naive.naive_nsa(
            q, k, v, g_cmp=g[..., 0], g_slc=g[..., 1], block_counts=n, block_size=block
        )
    return {name: fla_layout(t) for name, t in out.items()}  # back to (B, heads, N, ·)


def make_reference(root: Path = FLA_SRC) -> dict:
    """The stored file's contents: provenance, the cases, fla's outputs per case."""
    naive = load_naive(root)
    with torch.no_grad():
        cases = []
        for case in CASES:
            outputs = fla_outputs(naive, case)
            cases.append(
                {
                    **case,
                    "outputs": {
                        name: {
                            "shape": list(t.shape),
                            "values": [
                                int(x) if name == "topk" else float(f"{x:.6g}")
                                for x in t.flatten().tolist()
                            ],
                        }
                        for name, t in outputs.items()
                    },
                }
            )
    return {
        **provenance(MADE_BY),
        "fla-core": FLA_VERSION,
        "file": NAIVE_PATH,
        "sha256": NAIVE_SHA256,
        "how": (
            f"pip download --no-deps fla-core=={FLA_VERSION} -d /tmp/fla_wheel, the wheel "
            "unzipped into /tmp/fla_src; naive.py loaded by path (tests/sparse_attention/"
            "fla_nsa.py), mean_pooling written as a loop, naive_nsa with window_size = 0"
        ),
        "inputs": "tests.sparse_attention.fla_nsa.case_inputs(case): numpy PCG64 from the seed",
        "cases": cases,
    }


def load_reference() -> dict:
    """The stored reference, outputs as tensors: {case name: (case, {output: tensor})}."""
    data = json.loads(REFERENCE_FILE.read_text())
    out = {}
    for case in data["cases"]:
        tensors = {}
        for name, t in case["outputs"].items():
            dtype = torch.long if name == "topk" else torch.float32
            tensors[name] = torch.tensor(t["values"], dtype=dtype).view(t["shape"])
        params = {key: value for key, value in case.items() if key != "outputs"}
        out[case["name"]] = (params, tensors)
    return out


def dumps(data: dict) -> str:
    """JSON with each list of numbers on one line."""
    text = json.dumps(data, indent=1, ensure_ascii=False)
    return re.sub(r"\[[-0-9.e,\s]*\]", lambda m: re.sub(r"\s+", "", m.group(0)), text) + "\n"


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else FLA_SRC
    REFERENCE_FILE.write_text(dumps(make_reference(root)))
    print(f"wrote {REFERENCE_FILE} ({REFERENCE_FILE.stat().st_size} bytes)")
