"""Multi-query associative recall, small models with MHA, GQA, MQA or MLA, an equal-budget sweep.

Derived in notebook 11 (part 4). The task is the Zoology benchmark's multi-query associative
recall (Arora et al. 2023), small: a sequence shows `pairs` key-value pairs
k_1 v_1 k_2 v_2 ..., then every key again in a new order; after each repeated key the model
must output its value. Answering needs a token far back, found by content: what a small
cache would have to keep.

Every model has the same body: token, previous-token and learned position embeddings (the
previous-token embedding does the job of a first layer or a short convolution, so that one
attention layer can solve the task), `TRAIN["layers"]` pre-norm blocks of causal
self-attention and an MLP, a tied read-out. Only the attention differs, each variant sized to
a cache budget in numbers per token per layer (`VARIANTS`): multi-head (2 h d numbers),
grouped-query (2 h_kv d), multi-query (2 d), and latent (r + d_R,
`mla.MultiHeadLatentAttention`).

The sweep trains every variant at every budget over `SEEDS` with the same data and steps
(about 15 minutes on one core, too long for a notebook): `python -m mha_lib.efficient.recall`
writes `SWEEP_FILE` (`mha_lib/data/nb11_recall_sweep.json`) and notebook 11 reads it with
`load_sweep`. tests/efficient/test_recall.py regenerates a documented subset and compares it
within margins (training follows the processor's rounding, so not bit for bit).
"""

from __future__ import annotations

import json
import platform
import sys
import time
from importlib import resources
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..stats import t_interval
from .mla import MultiHeadLatentAttention

__all__ = [
    "SEEDS",
    "SWEEP_FILE",
    "TASK",
    "VARIANTS",
    "RecallModel",
    "cache_numbers",
    "evaluate",
    "load_sweep",
    "make_model",
    "recall_batch",
    "run_sweep",
    "sweep_summary",
    "sweep_table",
    "train_one",
]

SEEDS = tuple(range(5))
SWEEP_FILE = Path(
    str(resources.files("mha_lib") / "data" / "nb11_recall_sweep.json")
)  # mha_lib/data/
TASK = {"pairs": 8, "num_keys": 16, "num_values": 16}  # 8 pairs + 8 queries = 24 tokens
TRAIN = {"steps": 600, "batch": 64, "lr": 3e-3, "d_model": 64, "layers": 1}

# attention configurations per cache budget (numbers per token per layer)
VARIANTS: dict[int, dict[str, dict]] = {
    16: {
        "MHA": {"kind": "gqa", "num_heads": 2, "num_kv_heads": 2, "head_dim": 4},
        "GQA": {"kind": "gqa", "num_heads": 4, "num_kv_heads": 2, "head_dim": 4},
        "MQA": {"kind": "gqa", "num_heads": 4, "num_kv_heads": 1, "head_dim": 8},
        "MLA": {"kind": "mla", "num_heads": 4, "kv_lora_rank": 12, "rope_dim": 4, "head_dim": 8},
    },
    32: {
        "MHA": {"kind": "gqa", "num_heads": 2, "num_kv_heads": 2, "head_dim": 8},
        "GQA": {"kind": "gqa", "num_heads": 4, "num_kv_heads": 2, "head_dim": 8},
        "MQA": {"kind": "gqa", "num_heads": 4, "num_kv_heads": 1, "head_dim": 16},
        "MLA": {"kind": "mla", "num_heads": 4, "kv_lora_rank": 24, "rope_dim": 8, "head_dim": 16},
    },
}


def cache_numbers(cfg: dict) -> int:
    """Numbers one token adds to one layer's cache under the configuration cfg."""
    if cfg["kind"] == "mla":
        return cfg["kv_lora_rank"] + cfg["rope_dim"]
    return 2 * cfg["num_kv_heads"] * cfg["head_dim"]


def recall_batch(
    batch: int, generator: torch.Generator, pairs: int = 8, num_keys: int = 16, num_values: int = 16
) -> tuple[Tensor, Tensor]:
    """tokens (batch, 3·pairs) and targets (batch, 3·pairs), -100 where nothing is asked.

    Keys are tokens 0 .. num_keys - 1 (distinct within a sequence), values num_keys ..
    num_keys + num_values - 1 (any). After the pairs, each key appears once more, in a new
    order; the target at that position is its value.
    """
    keys = torch.rand(batch, num_keys, generator=generator).argsort(dim=1)[:, :pairs]  # (B, P)
    values = num_keys + torch.randint(0, num_values, (batch, pairs), generator=generator)
    order = torch.rand(batch, pairs, generator=generator).argsort(dim=1)  # (B, P)
    ctx = torch.stack((keys, values), dim=2).reshape(batch, 2 * pairs)  # k1 v1 k2 v2 ...
    tokens = torch.cat((ctx, keys.gather(1, order)), dim=1)  # (B, 3P)
    targets = torch.full_like(tokens, -100)
    targets[:, 2 * pairs :] = values.gather(1, order)
    return tokens, targets


class _GroupedAttention(nn.Module):
    """Causal self-attention with h query heads of size d and h_kv key/value heads (no RoPE)."""

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, head_dim: int):
        super().__init__()
        self.h, self.h_kv, self.d = num_heads, num_kv_heads, head_dim
        self.q = nn.Linear(d_model, num_heads * head_dim, bias=False)
        self.kv = nn.Linear(d_model, 2 * num_kv_heads * head_dim, bias=False)
        self.o = nn.Linear(num_heads * head_dim, d_model, bias=False)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        B, N, _ = x.shape
        q = self.q(x).view(B, N, self.h, self.d).transpose(1, 2)  # (B, h, N, d)
        k, v = self.kv(x).view(B, N, 2, self.h_kv, self.d).permute(2, 0, 3, 1, 4)  # (B,h_kv,N,d)
        if mask is None:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        return self.o(o.transpose(1, 2).reshape(B, N, -1))


class _Block(nn.Module):
    def __init__(self, d_model: int, attention: nn.Module):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = attention
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model)
        )

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        y = self.norm1(x)
        if isinstance(self.attn, MultiHeadLatentAttention):
            a = self.attn(y, mask=mask, is_causal=True)
        else:
            a = self.attn(y, mask=mask)
        x = x + a
        return x + self.mlp(self.norm2(x))


class RecallModel(nn.Module):
    """Embeddings, `layers` blocks with the given attention, a tied read-out."""

    def __init__(self, cfg: dict, vocab: int, max_len: int, d_model: int = 64, layers: int = 2):
        super().__init__()
        self.cfg = dict(cfg)
        self.embed = nn.Embedding(vocab, d_model)
        self.prev = nn.Embedding(vocab + 1, d_model)  # the previous token (vocab: none)
        self.pos = nn.Embedding(max_len, d_model)
        blocks = []
        for _ in range(layers):
            if cfg["kind"] == "mla":
                attn = MultiHeadLatentAttention(
                    d_model,
                    cfg["num_heads"],
                    cfg["kv_lora_rank"],
                    cfg["head_dim"],
                    cfg["rope_dim"],
                    cfg["head_dim"],
                )
            else:
                attn = _GroupedAttention(
                    d_model, cfg["num_heads"], cfg["num_kv_heads"], cfg["head_dim"]
                )
            blocks.append(_Block(d_model, attn))
        self.blocks = nn.ModuleList(blocks)
        self.norm = nn.LayerNorm(d_model)

    def inputs(self, tokens: Tensor) -> Tensor:
        """Token + previous token + position embeddings (B, N, d_model)."""
        N = tokens.shape[1]
        prev = F.pad(tokens[:, :-1], (1, 0), value=self.prev.num_embeddings - 1)  # (B, N)
        pos = torch.arange(N, device=tokens.device)
        return self.embed(tokens) + self.prev(prev) + self.pos(pos)

    def forward(self, tokens: Tensor, mask: Tensor | None = None) -> Tensor:
        x = self.inputs(tokens)
        for block in self.blocks:
            x = block(x, mask)
        return self.norm(x) @ self.embed.weight.T  # (B, N, vocab)


def make_model(cfg: dict, seed: int) -> RecallModel:
    torch.manual_seed(seed)
    vocab = TASK["num_keys"] + TASK["num_values"]
    return RecallModel(cfg, vocab, 3 * TASK["pairs"], TRAIN["d_model"], TRAIN["layers"])


@torch.no_grad()
def evaluate(model: RecallModel, tokens: Tensor, targets: Tensor, mask=None) -> float:
    """Fraction of the asked positions whose most likely token is the right value."""
    model.eval()
    pred = model(tokens, mask).argmax(-1)
    asked = targets != -100
    return (pred[asked] == targets[asked]).float().mean().item()


def held_out_batch() -> tuple[Tensor, Tensor]:
    """2000 fixed sequences that no training sees (another generator seed)."""
    return recall_batch(2000, torch.Generator().manual_seed(10_000), **TASK)


def train_one(cfg: dict, seed: int, steps: int | None = None) -> tuple[RecallModel, list[float]]:
    """Train a model with attention cfg from seed; return it and the loss every 50 steps."""
    steps = TRAIN["steps"] if steps is None else steps
    model = make_model(cfg, seed)
    gen = torch.Generator().manual_seed(1000 + seed)
    opt = torch.optim.AdamW(model.parameters(), lr=TRAIN["lr"], weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, TRAIN["lr"], total_steps=steps, pct_start=0.1)
    curve = []
    model.train()
    for step in range(steps):
        tokens, targets = recall_batch(TRAIN["batch"], gen, **TASK)
        loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 50 == 0:
            curve.append(round(loss.item(), 4))
    return model, curve


@torch.no_grad()
def first_token_weight(model: RecallModel, tokens: Tensor) -> list[float]:
    """Per layer, the mean attention weight the queries at positions >= 4 put on token 0.

    Read from the MHA variant (for a 'sink'); uniform attention would give the mean of
    1/(i+1) over those positions.
    """
    model.eval()
    N = tokens.shape[1]
    x = model.inputs(tokens)
    out = []
    for block in model.blocks:
        attn = block.attn
        y = block.norm1(x)
        B = y.shape[0]
        q = attn.q(y).view(B, N, attn.h, attn.d).transpose(1, 2)
        k, _ = attn.kv(y).view(B, N, 2, attn.h_kv, attn.d).permute(2, 0, 3, 1, 4)
        k = k.repeat_interleave(attn.h // attn.h_kv, dim=1)
        s = (q @ k.transpose(-2, -1)) / attn.d**0.5
        s = s.masked_fill(~torch.ones(N, N, dtype=torch.bool).tril(), float("-inf"))
        w = s.softmax(-1)  # (B, h, N, N)
        out.append(round(w[:, :, 4:, 0].mean().item(), 4))
        x = block(x)
    return out


def run_sweep(
    seeds=SEEDS, budgets=None, steps: int | None = None, verbose: bool = False, variants=None
) -> dict:
    """Train every variant (or those named in variants) of every budget over seeds; return the
    summary written to the file."""
    budgets = sorted(VARIANTS) if budgets is None else budgets
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the cached sweep ran; tiny models only wait on a thread pool
    try:
        return _sweep(seeds, budgets, steps, verbose, variants)
    finally:
        torch.set_num_threads(threads)


def _sweep(seeds, budgets, steps, verbose, variants) -> dict:
    tokens, targets = held_out_batch()
    runs = []
    for budget in budgets:
        for name, cfg in VARIANTS[budget].items():
            if variants is not None and name not in variants:
                continue
            for seed in seeds:
                t0 = time.perf_counter()
                model, curve = train_one(cfg, seed, steps)
                run = {
                    "variant": name,
                    "budget": budget,
                    "cache_numbers": cache_numbers(cfg),
                    "seed": seed,
                    "params": sum(p.numel() for p in model.parameters()),
                    "accuracy": round(evaluate(model, tokens, targets), 4),
                    "loss_curve": curve,
                }
                if cfg["kind"] == "gqa" and cfg["num_kv_heads"] == cfg["num_heads"]:
                    run["first_token_weight"] = first_token_weight(model, tokens[:200])
                runs.append(run)
                if verbose:
                    dt = time.perf_counter() - t0
                    print(f"{budget:>3} {name} seed {seed}: {run['accuracy']:.3f} ({dt:.0f} s)")
    return {
        "made by": "python -m mha_lib.efficient.recall",
        "torch": torch.__version__,
        "machine": platform.machine(),
        "cpu capability": torch.backends.cpu.get_cpu_capability(),
        "task": TASK,
        "train": {**TRAIN, **({"steps": steps} if steps else {})},
        "seeds": list(seeds),
        "budgets": list(budgets),
        "variants": {str(b): VARIANTS[b] for b in budgets},
        "runs": runs,
    }


def load_sweep(path: Path | str = SWEEP_FILE) -> dict:
    """The cached sweep (see the module docstring for how it is made)."""
    return json.loads(Path(path).read_text())


def sweep_table(sweep: dict) -> dict[tuple[int, str], list[float]]:
    """{(budget, variant): [accuracy per seed]}."""
    table: dict[tuple[int, str], list[float]] = {}
    for run in sweep["runs"]:
        table.setdefault((run["budget"], run["variant"]), []).append(run["accuracy"])
    return table


def sweep_summary(sweep: dict) -> dict[tuple[int, str], dict]:
    """Per (budget, variant): mean accuracy, its 95 % t-interval over the seeds (clipped to
    [0, 1]), how many seeds solved the task (accuracy >= 0.9), the parameter count."""
    params = {(r["budget"], r["variant"]): r["params"] for r in sweep["runs"]}
    out = {}
    for key, accs in sweep_table(sweep).items():
        n = len(accs)
        mean, half = (float(v) for v in t_interval(accs))
        out[key] = {
            "mean": mean,
            "low": max(0.0, mean - half),
            "high": min(1.0, mean + half),
            "solved": sum(a >= 0.9 for a in accs),
            "seeds": n,
            "params": params[key],
        }
    return out


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else SWEEP_FILE
    out.write_text(json.dumps(run_sweep(verbose=True), indent=1) + "\n")
    print(f"wrote {out}")
