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
`mla.MultiHeadLatentAttention`): "MLA" spends the whole budget on the latent (d_R = 0: no
rotated key, no RoPE, as the other three have none), "MLA + RoPE" splits it between a latent and
a shared rotated key as DeepSeek's MLA does, but gives the key a quarter (DeepSeek-V3 gives it
64 of 576 numbers, about a ninth, which at a budget of 16 would be less than one rotated pair).
What the budget cannot make equal (query heads and widths, parameters, MLA's normalised latent)
is listed by `differences`.

The sweep trains every variant at every budget over `SEEDS` with the same data and steps
(about 20 minutes of one CPU core, too long for a notebook): `python -m mha_lib.efficient.recall`
writes `SWEEP_FILE` (`mha_lib/data/nb11_recall_sweep.json`) and notebook 11 reads it with
`load_sweep`. tests/efficient/test_recall.py regenerates a documented subset and compares it
within margins (training follows the processor's rounding, so not bit for bit), and trains a
seed outside the cache to test the claim notebook 11 states for every run. The ten runs of a
seed share its data and initial draws, so notebook 11 counts seeds, not runs, when it states a
rate or a mean over runs.
"""

from __future__ import annotations

import json
import sys
import time
from importlib import resources
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..nn.gqa import GroupedQueryAttention, grouped_scores
from ..runtime import provenance
from ..stats import t_interval, wilson_interval
from .mla import MultiHeadLatentAttention

__all__ = [
    "SEEDS",
    "SWEEP_FILE",
    "TASK",
    "VARIANTS",
    "RecallModel",
    "attention_layer",
    "attention_weights",
    "cache_numbers",
    "differences",
    "evaluate",
    "first_token_weight",
    "held_out_batch",
    "load_sweep",
    "make_model",
    "recall_batch",
    "run_jobs",
    "run_sweep",
    "sweep_summary",
    "sweep_table",
    "train_one",
    "uniform_first_token_weight",
    "value_weight",
]

SEEDS = tuple(range(16))
SOLVED = 0.9  # a run "solves" the task at this held-out accuracy or above
SINK_QUERIES = slice(4, None)  # first_token_weight averages the queries at positions 4 ..
SWEEP_FILE = Path(
    str(resources.files("mha_lib") / "data" / "nb11_recall_sweep.json")
)  # mha_lib/data/
TASK = {"pairs": 8, "num_keys": 16, "num_values": 16}  # 8 pairs + 8 queries = 24 tokens
TRAIN = {"steps": 600, "batch": 64, "lr": 3e-3, "d_model": 64, "layers": 1}

# attention configurations per cache budget (numbers per token per layer); MLA's head_dim is
# MQA's, so that the two have the same query heads and widths
VARIANTS: dict[int, dict[str, dict]] = {
    16: {
        "MHA": {"kind": "gqa", "num_heads": 2, "num_kv_heads": 2, "head_dim": 4},
        "GQA": {"kind": "gqa", "num_heads": 4, "num_kv_heads": 2, "head_dim": 4},
        "MQA": {"kind": "gqa", "num_heads": 4, "num_kv_heads": 1, "head_dim": 8},
        "MLA": {"kind": "mla", "num_heads": 4, "kv_lora_rank": 16, "rope_dim": 0, "head_dim": 8},
        "MLA + RoPE": {
            "kind": "mla", "num_heads": 4, "kv_lora_rank": 12, "rope_dim": 4, "head_dim": 8
        },
    },
    32: {
        "MHA": {"kind": "gqa", "num_heads": 2, "num_kv_heads": 2, "head_dim": 8},
        "GQA": {"kind": "gqa", "num_heads": 4, "num_kv_heads": 2, "head_dim": 8},
        "MQA": {"kind": "gqa", "num_heads": 4, "num_kv_heads": 1, "head_dim": 16},
        "MLA": {"kind": "mla", "num_heads": 4, "kv_lora_rank": 32, "rope_dim": 0, "head_dim": 16},
        "MLA + RoPE": {
            "kind": "mla", "num_heads": 4, "kv_lora_rank": 24, "rope_dim": 8, "head_dim": 16
        },
    },
}  # fmt: skip  # a table: one variant a line


def differences(cfg: dict) -> dict:
    """What differs between attentions of one budget: query heads, the width of one head's
    query·key product and of all queries, whether it rotates (RoPE) and whether its keys come
    from a normalised latent."""
    d_qk = cfg["head_dim"] + cfg.get("rope_dim", 0)
    return {
        "query heads": cfg["num_heads"],
        "q·k width": d_qk,
        "query width": cfg["num_heads"] * d_qk,
        "rope": cfg.get("rope_dim", 0) > 0,
        "normalised latent": cfg["kind"] == "mla",
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


def _sdpa(mask: Tensor | None):
    """The attention function of the MHA, GQA and MQA models: causal, or under `mask`, the
    key/value heads shared by their groups (enable_gqa=True for every variant, as the sweep ran)."""

    def attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    return attention


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
        elif isinstance(self.attn, GroupedQueryAttention):  # its heads of width head_dim
            a = self.attn(y, attention=_sdpa(mask))
        elif mask is None:  # a causal token mixer of another kind (notebook 16's state rules)
            a = self.attn(y)
        else:
            raise ValueError(
                f"a mask is given but the layer is a {type(self.attn).__name__}, "
                "which mixes causally and takes no mask"
            )
        x = x + a
        return x + self.mlp(self.norm2(x))


def attention_layer(cfg: dict, d_model: int, layer: int) -> nn.Module:
    """The attention of one layer under the configuration cfg: "gqa" (MHA, GQA, MQA) or "mla".
    The same for every layer here; another part passes `RecallModel` a function of its own
    (notebook 16: state rules and a hybrid stack)."""
    if cfg["kind"] == "mla":
        return MultiHeadLatentAttention(
            d_model,
            cfg["num_heads"],
            cfg["kv_lora_rank"],
            cfg["head_dim"],
            cfg["rope_dim"],
            cfg["head_dim"],
        )
    return GroupedQueryAttention(
        d_model, cfg["num_heads"], cfg["num_kv_heads"], head_dim=cfg["head_dim"]
    )


class RecallModel(nn.Module):
    """Embeddings, `layers` blocks with the given attention, a tied read-out.

    make_mixer(cfg, d_model, layer) -> the token mixer of block `layer` (default
    `attention_layer`); a mixer that is neither a `GroupedQueryAttention` nor an MLA layer is
    called as mixer(x) and must be causal itself.
    """

    def __init__(
        self,
        cfg: dict,
        vocab: int,
        max_len: int,
        d_model: int = 64,
        layers: int = 2,
        make_mixer=attention_layer,
    ):
        super().__init__()
        self.cfg = dict(cfg)
        self.embed = nn.Embedding(vocab, d_model)
        self.prev = nn.Embedding(vocab + 1, d_model)  # the previous token (vocab: none)
        self.pos = nn.Embedding(max_len, d_model)
        blocks = []
        for layer in range(layers):
            blocks.append(_Block(d_model, make_mixer(cfg, d_model, layer)))
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


def train_one(
    cfg: dict, seed: int, steps: int | None = None, build=make_model
) -> tuple[RecallModel, list[float]]:
    """Train a model with attention cfg from seed (build(cfg, seed) makes it: `make_model`, or
    another part's); return it and the loss every 50 steps."""
    steps = TRAIN["steps"] if steps is None else steps
    model = build(cfg, seed)
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


def _scores(attn: nn.Module, y: Tensor) -> Tensor:
    """The causal attention scores (B, h, N, N) of one attention layer on its input y."""
    N = y.shape[1]
    if isinstance(attn, MultiHeadLatentAttention):
        pos = torch.arange(N)
        q_nope, q_rope = attn.queries(y, pos)  # (B, h, N, d_N), (B, h, N, d_R)
        c, k_rope = attn.latents(y, pos)  # (B, N, r), (B, N, d_R)
        W_UK, _ = attn.up_weights()  # (h, d_N, r)
        k_nope = torch.einsum("bmr,hdr->bhmd", c, W_UK)  # (B, h, N, d_N)
        s = (q_nope @ k_nope.mT + q_rope @ k_rope[:, None].mT) * attn.scale
    else:
        q, k, _ = attn.project(y)  # (B, h, N, d), (B, h_kv, N, d)
        s = grouped_scores(q, k)  # (B, h, N, N)
    return s.masked_fill(~torch.ones(N, N, dtype=torch.bool).tril(), float("-inf"))


@torch.no_grad()
def attention_weights(model: RecallModel, tokens: Tensor) -> list[Tensor]:
    """Per layer, the attention weights (B, h, N, N) of the model on tokens (B, N)."""
    model.eval()
    x = model.inputs(tokens)
    out = []
    for block in model.blocks:
        out.append(_scores(block.attn, block.norm1(x)).softmax(-1))
        x = block(x)
    return out


def first_token_weight(model: RecallModel, tokens: Tensor, by_head: bool = False) -> list:
    """Per layer, the mean attention weight the queries at positions 4 .. N - 1 put on token 0
    (a 'sink' would take much of it), averaged over the heads or, with by_head, one number per
    head; uniform attention would give the mean of 1/(i + 1) over those positions
    (`uniform_first_token_weight`)."""
    out = []
    for w in attention_weights(model, tokens):  # (B, h, N, N)
        on_first = w[:, :, SINK_QUERIES, 0].mean((0, 2))  # (h,)
        out.append(
            [round(v, 4) for v in on_first.tolist()]
            if by_head
            else round(on_first.mean().item(), 4)
        )
    return out


def value_weight(model: RecallModel, tokens: Tensor) -> list[list[float]]:
    """Per layer and head, the mean attention weight that the answer positions (the repeated
    keys) put on the position of the value to recall (the token right after that key's first
    occurrence): what a head that does the recall looks at."""
    P = (tokens.shape[1]) // 3
    keys, asked = tokens[:, 0 : 2 * P : 2], tokens[:, 2 * P :]  # (B, P) each
    pair = (asked[:, :, None] == keys[:, None, :]).float().argmax(-1)  # (B, P): which pair
    value_pos = 2 * pair + 1  # (B, P)
    out = []
    for w in attention_weights(model, tokens):  # (B, h, N, N)
        B, h = w.shape[:2]
        rows = w[:, :, 2 * P :, :]  # (B, h, P, N): the answer positions' weights
        at_value = rows.gather(-1, value_pos[:, None, :, None].expand(B, h, P, 1))[..., 0]
        out.append([round(v, 4) for v in at_value.mean((0, 2)).tolist()])  # (h,)
    return out


def uniform_first_token_weight(N: int = 3 * TASK["pairs"]) -> float:
    """What first_token_weight would be if every query spread its weight evenly."""
    return sum(1 / (i + 1) for i in range(N)[SINK_QUERIES]) / len(range(N)[SINK_QUERIES])


def run_sweep(
    seeds=SEEDS,
    budgets=None,
    steps: int | None = None,
    verbose: bool = False,
    variants=None,
    processes: int = 1,
) -> dict:
    """Train every variant (or those named in variants) of every budget over seeds, each run
    on one thread (in `processes` worker processes); return the summary written to the file."""
    budgets = sorted(VARIANTS) if budgets is None else budgets
    jobs = [
        (budget, name, seed, steps)
        for budget in budgets
        for name in VARIANTS[budget]
        if variants is None or name in variants
        for seed in seeds
    ]
    runs = run_jobs(_one_run, jobs, processes, _say if verbose else None)
    return {
        **provenance("python -m mha_lib.efficient.recall"),
        "task": TASK,
        "train": {**TRAIN, **({"steps": steps} if steps else {})},
        "seeds": list(seeds),
        "budgets": list(budgets),
        "variants": {str(b): VARIANTS[b] for b in budgets},
        "runs": runs,
    }


def run_jobs(one_run, jobs: list, processes: int = 1, say=None) -> list:
    """[one_run(job) for job in jobs], in `processes` worker processes (spawned) when more than
    one, in order; say(run) after each run ends, if given. one_run must be a module-level
    function (the workers import it) and may set torch's threads: they are restored here."""
    if processes > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(processes) as pool:
            runs = []
            for run in pool.imap(one_run, jobs, chunksize=1):
                runs.append(run)
                if say is not None:
                    say(run)
        return runs
    threads = torch.get_num_threads()
    try:
        runs = []
        for job in jobs:
            runs.append(one_run(job))
            if say is not None:
                say(runs[-1])
    finally:
        torch.set_num_threads(threads)
    return runs


def _say(run: dict) -> None:
    print(
        f"{run['budget']:>3} {run['variant']} seed {run['seed']}: {run['accuracy']:.3f} "
        f"({run['seconds']:.0f} s)",
        flush=True,
    )


def _one_run(job: tuple) -> dict:
    """Train and evaluate one (budget, variant, seed), on one thread, as the cached sweep ran
    (tiny models only wait on a thread pool)."""
    budget, name, seed, steps = job
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    cfg = VARIANTS[budget][name]
    tokens, targets = held_out_batch()
    model, curve = train_one(cfg, seed, steps)
    return {
        "variant": name,
        "budget": budget,
        "cache_numbers": cache_numbers(cfg),
        "seed": seed,
        "params": sum(p.numel() for p in model.parameters()),
        "accuracy": round(evaluate(model, tokens, targets), 4),
        "loss_curve": curve,
        "first_token_weight": first_token_weight(model, tokens[:200]),
        "first_token_weight_by_head": first_token_weight(model, tokens[:200], by_head=True),
        "value_weight": value_weight(model, tokens[:200]),
        "seconds": round(time.perf_counter() - t0, 1),
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
    """Per (budget, variant): the mean accuracy and its 95 % t-interval over the seeds
    ("low", "high": not clipped, so they may pass 1 or 0 when the seeds split between solved
    and unsolved), how many seeds solved the task (accuracy >= SOLVED) with the Wilson interval
    of that rate, the parameter count."""
    params = {(r["budget"], r["variant"]): r["params"] for r in sweep["runs"]}
    out = {}
    for key, accs in sweep_table(sweep).items():
        n = len(accs)
        mean, half = (float(v) for v in t_interval(accs))
        solved = sum(a >= SOLVED for a in accs)
        out[key] = {
            "mean": mean,
            "low": mean - half,
            "high": mean + half,
            "solved": solved,
            "solved interval": wilson_interval(solved, n),
            "seeds": n,
            "params": params[key],
        }
    return out


def sweep_command(prog: str, run_sweep, default_out: Path, argv=None) -> int:
    """A sweep's command line (notebook 11's here, notebook 16's in
    `mha_lib.linear_attention.recall`): run_sweep(verbose=True, processes=...) -> a dict,
    written as JSON with the minutes it took."""
    import argparse

    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("out", nargs="?", type=Path, default=default_out)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    result = run_sweep(verbose=True, processes=args.processes)
    result["minutes"] = round((time.perf_counter() - t0) / 60, 1)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out} in {result['minutes']} min")
    return 0


def main(argv=None) -> int:
    return sweep_command("python -m mha_lib.efficient.recall", run_sweep, SWEEP_FILE, argv)


if __name__ == "__main__":
    sys.exit(main())
