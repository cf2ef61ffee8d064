"""Notebook 11's recall task under a key budget: dense latent attention, a window, random keys
and the lightning indexer's top-k, trained from one dense checkpoint over seeds.

Derived in notebook 18 (its trained toy). The task, the held-out sequences, the embeddings and
the blocks are notebook 11's (`mha_lib.efficient.recall`): 8 key-value pairs, then the 8 keys
again in a new order, after each the value to recall; N = 24 tokens, one attention layer. The
attention is notebook 11's budget-32 "MLA" (d_model 64, h = 4 heads, r = 32, d_N = d_V = 16, no
rotated key) with a low-rank query (r_q = 16), and beside it a `LightningIndexer` (H = 2 index
heads of D = 8, no RoPE) reading MLA's query latent c_Q, as DeepSeek-V3.2 has it. The layer,
`IndexedAttention`, lets each query attend to the keys its `keys` choice allows:

- "dense": every earlier key and itself (notebook 11's layer);
- "window": the last k keys, itself included;
- "top-k": the k keys of largest index score (`causal_topk`);
- "random": k keys drawn at random among the visible ones (a null model; its draws come from
  the layer's own seeded generator).

The budget is k = `KEYS` = 4 keys per query. Each answer needs one key, the value right after
the key's first showing (the previous-token embedding marks that position with the key), so 4
keys leave room to find it; the answers sit at positions 16 .. 23 and the values at 1, 3 .. 15,
so a window of 4 reaches a value only from the first three answers, and only the value of one
of the last two pairs (positions 13 and 15): it holds the value for 1/16 of the answers.
Random keys find the value with probability 4/(t + 1), under a quarter.

Training, per seed, DeepSeek's stages scaled down (`STAGES`):
1. dense: the model trains dense for 1200 steps, notebook 11's optimiser and schedule
   (`efficient.recall.train_one`; the indexer is not used and stays as initialised). Twice
   notebook 11's 600 steps: at 600 this layer (notebook 11's budget-32 MLA with a low-rank
   query) solved seed 0 only to 0.13 accuracy, and notebook 11's MLA solves 7 of 16 seeds;
   at 1200 every seed of `SEEDS` solves it, so that the warm-up copies an attention that
   finds the value;
2. warm-up: the model frozen, only the indexer trains, `STAGES["warm-up"]` steps, on
   KL(p || softmax(I)) where p is the dense attention weights summed over the heads and
   renormalised per query (`indexer_target`, `indexer_loss`), DeepSeek's dense warm-up;
3. from that one checkpoint, `STAGES["continue"]` more steps under each key choice, the same
   data for each: the model trains on the task under its mask; in "top-k" the indexer trains
   on the same KL restricted to the chosen keys, its input detached from the model's graph,
   DeepSeek's sparse stage.

Each seed records the held-out accuracy after every stage and continuation, and how often the
chosen keys of an answer query hold the value it must recall (`value_chosen`): for the window,
the random keys and the indexer's top-k, and for the indexer also before its warm-up (the
untrained indexer, a null model) and right after it. The window's and the random keys' shares
depend only on the held-out sequences and the evaluation's draws (seed `EVAL_DRAWS`), not on
training, so they are the same in every seed: 1/16 and about 0.19.

`python -m mha_lib.sparse_attention.recall` trains `SEEDS` (`run_sweep`, each seed on one
thread) and writes `SWEEP_FILE` (`mha_lib/data/nb18_recall_sweep.json`) with its provenance,
and seed 0's trained top-k model to `MODEL_FILE` (`mha_lib/data/nb18_recall_seed0.pt`, a plain
dict of float32 tensors), which `load_trained` reads back so that notebook 18 can show which
keys the trained indexer picks without training. What the notebook states comes from here:
`sweep_summary` (means with t-intervals over seeds, solved counts with Wilson intervals),
`seed_claims` (every statement about one seed), `claim_counts` (in how many cached seeds each
held) and `every_seed_claims`; tests/sparse_attention/test_recall.py regenerates seed 0 within
margins and trains a seed outside the cache to check the every-seed claims on it.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from importlib import resources
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_int
from ..efficient import recall
from ..efficient.mla import MultiHeadLatentAttention
from ..efficient.recall import TASK, TRAIN, RecallModel, held_out_batch, recall_batch, run_jobs
from ..runtime import provenance
from ..stats import t_interval, wilson_interval
from .indexer import LightningIndexer, causal_topk

__all__ = [
    "ATTENTION",
    "INDEXER",
    "KEYS",
    "KEY_CHOICES",
    "MODEL_FILE",
    "SEEDS",
    "SOLVED",
    "STAGES",
    "SWEEP_FILE",
    "IndexedAttention",
    "attention_weights",
    "block_input",
    "chosen_keys",
    "claim_counts",
    "evaluate_keys",
    "every_seed_claims",
    "indexer_loss",
    "indexer_target",
    "load_sweep",
    "load_trained",
    "make_model",
    "run_seed",
    "run_sweep",
    "seed_claims",
    "sweep_summary",
    "value_chosen",
    "value_positions",
]

SEEDS = tuple(range(12))
KEYS = 4  # k: the keys each query may attend to (each answer needs one: the value)
KEY_CHOICES = ("dense", "window", "top-k", "random")
SOLVED = recall.SOLVED  # 0.9, notebook 11's threshold
N = 3 * TASK["pairs"]  # 24 tokens
# notebook 11's budget-32 "MLA" with a low-rank query, whose latent the indexer reads
ATTENTION = {"num_heads": 4, "kv_lora_rank": 32, "head_dim": 16, "rope_dim": 0, "q_lora_rank": 16}
INDEXER = {"index_n_heads": 2, "index_head_dim": 8, "qk_rope_head_dim": 0}
STAGES = {
    "dense": 2 * TRAIN["steps"],  # notebook 11's optimiser and schedule, twice its 600 steps
    "warm-up": 200,  # the indexer alone, on the dense weights
    "continue": 300,  # each key choice from the dense checkpoint
    "continue lr": 1e-3,  # the model's peak learning rate in the continuations
    "indexer lr": 3e-3,  # the indexer's (AdamW, constant)
}
EVAL_DRAWS = 20_000  # the random keys' generator seed when evaluating
SWEEP_FILE = Path(str(resources.files("mha_lib") / "data" / "nb18_recall_sweep.json"))
MODEL_FILE = Path(str(resources.files("mha_lib") / "data" / "nb18_recall_seed0.pt"))


class IndexedAttention(nn.Module):
    """Latent attention (`mla`) whose queries attend to the keys `keys` chooses, k per query,
    with a lightning indexer (`indexer`) reading the attention's query latent.

    d_model C; keys: "dense", "window", "top-k" or "random" (see the module docstring; it may
    be changed after construction); k: the keys per query; seed: the random keys' generator
    (`generator`, on the CPU). Called as mixer(x (B, N, C)) -> (B, N, C), causal, as
    `RecallModel` calls a token mixer of its own."""

    def __init__(self, d_model: int, keys: str = "dense", k: int = KEYS, seed: int = 0):
        super().__init__()
        a, i = ATTENTION, INDEXER
        self.mla = MultiHeadLatentAttention(
            d_model,
            a["num_heads"],
            a["kv_lora_rank"],
            a["head_dim"],
            a["rope_dim"],
            a["head_dim"],
            q_lora_rank=a["q_lora_rank"],
        )
        self.indexer = LightningIndexer(
            d_model,
            a["q_lora_rank"],
            i["index_n_heads"],
            i["index_head_dim"],
            i["qk_rope_head_dim"],
        )
        self.keys = keys
        self.k = check_int(k, "k", 1)
        self.generator = torch.Generator().manual_seed(check_int(seed, "seed", 0))

    @property
    def keys(self) -> str:
        return self._keys

    @keys.setter
    def keys(self, keys: str) -> None:
        if keys not in KEY_CHOICES:
            raise ValueError(f"keys = {keys!r}; expected one of {KEY_CHOICES}")
        self._keys = keys

    def index_scores(self, x: Tensor) -> Tensor:
        """The indexer's scores (B, N, N) of x (B, N, C), -inf after each query; x and MLA's
        query latent are detached, so that only the indexer's weights get gradients."""
        x = x.detach()
        q_latent = self.mla.q_a_norm(self.mla.q_a_proj(x)).detach()  # (B, N, r_q): c_Q
        return self.indexer(x, q_latent)  # (B, N, N)

    def key_scores(self, x: Tensor, keys: str) -> Tensor:
        """Per query, a score for every key (B, N, N), -inf after the query, whose k largest are
        the keys `keys` chooses: the key's position (window), a uniform draw (random), the index
        score (top-k)."""
        B, N, _ = x.shape
        causal = torch.ones(N, N, dtype=torch.bool).tril()  # (N, N)
        if keys == "window":
            scores = torch.arange(N, dtype=x.dtype).expand(B, N, N)  # later keys score higher
        elif keys == "random":
            scores = torch.rand(B, N, N, generator=self.generator, dtype=x.dtype)
        elif keys == "top-k":
            return self.index_scores(x)  # (B, N, N), already causal
        else:
            raise ValueError(f"keys = {keys!r}; expected 'window', 'random' or 'top-k'")
        return scores.masked_fill(~causal, float("-inf"))  # (B, N, N)

    def choose(self, x: Tensor, keys: str | None = None) -> Tensor | None:
        """The "may attend" mask (B, N, N), True = may attend, of the queries of x (B, N, C)
        under keys (default `self.keys`): k keys each (all visible ones while fewer), None for
        "dense" (causal)."""
        keys = self.keys if keys is None else keys
        if keys not in KEY_CHOICES:
            raise ValueError(f"keys = {keys!r}; expected one of {KEY_CHOICES}")
        if keys == "dense":
            return None
        with torch.no_grad():
            return causal_topk(self.key_scores(x, keys), self.k)[1]  # (B, N, N)

    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != self.mla.d_model:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x has shape {got}; expected (B, N, C) with C = {self.mla.d_model}")
        allowed = self.choose(x)  # (B, N, N) or None
        if allowed is None:
            return self.mla(x, is_causal=True)  # (B, N, C)
        return self.mla(x, is_causal=True, mask=allowed[:, None])  # (B, N, C)


def make_model(cfg: dict | None = None, seed: int = 0, keys: str = "dense") -> RecallModel:
    """Notebook 11's recall model with one `IndexedAttention` layer, drawn from seed (cfg: not
    used, for `efficient.recall.train_one`'s build(cfg, seed); None or `ATTENTION`)."""
    if cfg is not None and cfg != ATTENTION:
        raise ValueError(f"cfg = {cfg!r}; this model has one attention, ATTENTION (or None)")
    check_int(seed, "seed", 0)
    torch.manual_seed(seed)
    vocab = TASK["num_keys"] + TASK["num_values"]
    return RecallModel(
        ATTENTION,
        vocab,
        N,
        TRAIN["d_model"],
        1,
        make_mixer=lambda cfg, d_model, layer: IndexedAttention(d_model, keys, KEYS, seed),
    )


def _mixer(model: RecallModel) -> IndexedAttention:
    if not isinstance(model, RecallModel) or not isinstance(model.blocks[0].attn, IndexedAttention):
        raise TypeError("model must be a RecallModel with an IndexedAttention (make_model)")
    return model.blocks[0].attn


def block_input(model: RecallModel, tokens: Tensor) -> Tensor:
    """What the attention reads on tokens (B, N): the first block's normalised input (B, N, C)."""
    return model.blocks[0].norm1(model.inputs(tokens))


def attention_weights(mla: MultiHeadLatentAttention, y: Tensor, allowed=None) -> Tensor:
    """The attention weights (B, h, N, N) of mla on its input y (B, N, C): causal, and only on
    the keys allowed (B, N, N) allows when given. As `MultiHeadLatentAttention.attend` scores
    (no rotated key here)."""
    N = y.shape[1]
    pos = torch.arange(N)
    q_nope, q_rope = mla.queries(y, pos)  # (B, h, N, d_N), (B, h, N, d_R)
    c, k_rope = mla.latents(y, pos)  # (B, N, r), (B, N, d_R)
    W_UK, _ = mla.up_weights()  # (h, d_N, r)
    k_nope = torch.einsum("bmr,hdr->bhmd", c, W_UK)  # (B, h, N, d_N)
    s = (q_nope @ k_nope.mT + q_rope @ k_rope[:, None].mT) * mla.scale  # (B, h, N, N)
    may = torch.ones(N, N, dtype=torch.bool).tril()  # (N, N)
    if allowed is not None:
        may = may & allowed[:, None]  # (B, 1, N, N)
    return s.masked_fill(~may, float("-inf")).softmax(-1)  # (B, h, N, N)


def indexer_target(weights: Tensor) -> Tensor:
    """The indexer's target p (B, N, N) from attention weights (B, h, N, N): summed over the
    heads and renormalised per query (L1), as DeepSeek-V3.2 trains its indexer."""
    p = weights.sum(1)  # (B, N, N)
    return p / p.sum(-1, keepdim=True)


def _kl(p: Tensor, scores: Tensor, allowed: Tensor) -> Tensor:
    """Mean over queries of KL(p || softmax(scores over the allowed keys)); p (B, N, N) is zero
    off the allowed keys (B, N, N)."""
    log_q = scores.masked_fill(~allowed, float("-inf")).log_softmax(-1)  # (B, N, N)
    log_q = log_q.masked_fill(~allowed, 0.0)  # no -inf where p is 0
    return (torch.xlogy(p, p) - p * log_q).sum(-1).mean()


def indexer_loss(model: RecallModel, tokens: Tensor) -> Tensor:
    """The indexer's loss on tokens (B, N) under the model's keys: "dense", the warm-up,
    KL(p || softmax(I)) over every visible key with p the dense weights (`indexer_target`);
    "top-k", the sparse stage, the same over the chosen keys only, p the weights of the sparse
    attention. Only the indexer's weights get gradients."""
    mixer = _mixer(model)
    if mixer.keys not in ("dense", "top-k"):
        raise ValueError(
            f"the model's keys are {mixer.keys!r}; the indexer trains under 'dense' or 'top-k'"
        )
    with torch.no_grad():
        y = block_input(model, tokens)  # (B, N, C)
        allowed = mixer.choose(y)  # (B, N, N) or None
        p = indexer_target(attention_weights(mixer.mla, y, allowed))  # (B, N, N)
    if allowed is None:
        allowed = torch.ones(*p.shape, dtype=torch.bool).tril()  # (B, N, N)
    return _kl(p, mixer.index_scores(y), allowed)


def value_positions(tokens: Tensor) -> Tensor:
    """Per answer query (positions 2P .. 3P - 1 of tokens (B, 3P)), the position of the value
    it must recall, the token after its key's first showing: (B, P)."""
    P = tokens.shape[1] // 3
    keys, asked = tokens[:, 0 : 2 * P : 2], tokens[:, 2 * P :]  # (B, P) each
    pair = (asked[:, :, None] == keys[:, None, :]).float().argmax(-1)  # (B, P): which pair
    return 2 * pair + 1  # (B, P)


@torch.no_grad()
def chosen_keys(model: RecallModel, tokens: Tensor, keys: str = "top-k") -> Tensor:
    """The keys each query of tokens (B, N) attends to under keys ("window", "top-k" or
    "random", drawn from seed `EVAL_DRAWS`): indices (B, N, k), best first, -1 where a query
    sees fewer than k keys; what notebook 18 draws for the trained indexer (`load_trained`)."""
    mixer = _mixer(model)
    if keys == "dense":
        raise ValueError("keys = 'dense': every query attends to every earlier key")
    mixer.generator.manual_seed(EVAL_DRAWS)
    model.eval()
    return causal_topk(mixer.key_scores(block_input(model, tokens), keys), mixer.k)[0]


@torch.no_grad()
def value_chosen(model: RecallModel, tokens: Tensor, keys: str) -> float:
    """The share of answer queries whose keys under `keys` hold the value they must recall
    (random keys drawn from seed `EVAL_DRAWS`)."""
    mixer = _mixer(model)
    if keys == "dense":
        raise ValueError("keys = 'dense': every query sees every earlier key, the value too")
    mixer.generator.manual_seed(EVAL_DRAWS)
    model.eval()
    P = tokens.shape[1] // 3
    allowed = mixer.choose(block_input(model, tokens), keys)  # (B, N, N)
    rows = allowed[:, 2 * P :, :]  # (B, P, N): the answer queries
    return rows.gather(-1, value_positions(tokens)[..., None]).float().mean().item()


@torch.no_grad()
def evaluate_keys(model: RecallModel, tokens: Tensor, targets: Tensor, keys: str) -> float:
    """Held-out accuracy of the model with its attention under `keys` (random keys drawn from
    seed `EVAL_DRAWS`); the model's own keys are left as they were."""
    mixer = _mixer(model)
    before = mixer.keys
    mixer.keys = keys
    mixer.generator.manual_seed(EVAL_DRAWS)
    try:
        return recall.evaluate(model, tokens, targets)
    finally:
        mixer.keys = before


def _warm_up(model: RecallModel, seed: int, steps: int) -> list[float]:
    """Stage 2: the model frozen (no step on its weights), the indexer alone on the dense KL;
    the loss every 50 steps."""
    mixer = _mixer(model)
    mixer.keys = "dense"
    gen = torch.Generator().manual_seed(2000 + seed)
    opt = torch.optim.AdamW(mixer.indexer.parameters(), lr=STAGES["indexer lr"])
    curve = []
    model.train()
    for step in range(steps):
        tokens, _ = recall_batch(TRAIN["batch"], gen, **TASK)
        loss = indexer_loss(model, tokens)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            curve.append(round(loss.item(), 4))
    return curve


def _continue(model: RecallModel, keys: str, seed: int, steps: int) -> tuple[list, list]:
    """Stage 3: the model trains on the task under `keys` (notebook 11's optimiser and schedule
    at `STAGES["continue lr"]`, the indexer excluded); under "top-k" the indexer trains on the
    sparse KL beside it. The same data for every keys. Returns the task loss and the indexer's
    loss every 50 steps ([] when the indexer does not train)."""
    mixer = _mixer(model)
    mixer.keys = keys
    mixer.generator.manual_seed(4000 + seed)
    gen = torch.Generator().manual_seed(3000 + seed)
    index_params = set(mixer.indexer.parameters())
    main = [p for p in model.parameters() if p not in index_params]
    lr = STAGES["continue lr"]
    opt = torch.optim.AdamW(main, lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, lr, total_steps=steps, pct_start=0.1)
    index_opt = torch.optim.AdamW(mixer.indexer.parameters(), lr=STAGES["indexer lr"])
    curve, kl_curve = [], []
    model.train()
    for step in range(steps):
        tokens, targets = recall_batch(TRAIN["batch"], gen, **TASK)
        loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if keys == "top-k":
            kl = indexer_loss(model, tokens)
            index_opt.zero_grad()
            kl.backward()
            index_opt.step()
            if step % 50 == 0:
                kl_curve.append(round(kl.item(), 4))
        if step % 50 == 0:
            curve.append(round(loss.item(), 4))
    return curve, kl_curve


def run_seed(seed: int, stages: dict | None = None) -> tuple[dict, RecallModel]:
    """Train one seed through the three stages (`STAGES`, or stages overriding some of its step
    counts); return its record and the model continued under "top-k"."""
    stages = {**STAGES, **(stages or {})}
    tokens, targets = held_out_batch()
    t0 = time.perf_counter()
    model, curve = recall.train_one(ATTENTION, seed, stages["dense"], build=make_model)
    dense = {
        "accuracy": round(evaluate_keys(model, tokens, targets, "dense"), 4),
        "loss_curve": curve,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    t0 = time.perf_counter()
    untrained = value_chosen(model, tokens, "top-k")
    kl_curve = _warm_up(model, seed, stages["warm-up"])
    warm = {
        "value_chosen_untrained": round(untrained, 4),
        "value_chosen": round(value_chosen(model, tokens, "top-k"), 4),
        "accuracy_top_k": round(evaluate_keys(model, tokens, targets, "top-k"), 4),
        "kl_curve": kl_curve,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    checkpoint = copy.deepcopy(model.state_dict())
    continued, top_k_model = {}, None
    for keys in KEY_CHOICES:
        t0 = time.perf_counter()
        model.load_state_dict(checkpoint)
        before = evaluate_keys(model, tokens, targets, keys)
        curve, kl_curve = _continue(model, keys, seed, stages["continue"])
        run = {
            "accuracy_before": round(before, 4),
            "accuracy": round(evaluate_keys(model, tokens, targets, keys), 4),
            "loss_curve": curve,
        }
        if keys != "dense":
            run["value_chosen"] = round(value_chosen(model, tokens, keys), 4)
        if kl_curve:
            run["kl_curve"] = kl_curve
        run["seconds"] = round(time.perf_counter() - t0, 1)
        continued[keys] = run
        if keys == "top-k":
            top_k_model = copy.deepcopy(model)
    return {"seed": seed, "dense": dense, "warm-up": warm, "continued": continued}, top_k_model


def _one_run(job: tuple) -> dict:
    """One seed on one thread, as the cached sweep ran; seed 0's top-k model saved to
    model_file when one is given."""
    seed, stages, model_file = job
    torch.set_num_threads(1)
    run, model = run_seed(seed, stages)
    if model_file is not None and seed == 0:
        state = {name: t.detach().float().clone() for name, t in model.state_dict().items()}
        torch.save(state, model_file)
    return run


def _say(run: dict) -> None:
    c = run["continued"]
    accs = " ".join(f"{keys} {c[keys]['accuracy']:.3f}" for keys in KEY_CHOICES)
    seconds = run["dense"]["seconds"] + run["warm-up"]["seconds"]
    seconds += sum(r["seconds"] for r in c.values())
    print(f"seed {run['seed']:>3}: {accs} ({seconds:.0f} s)", flush=True)


def run_sweep(
    seeds=SEEDS,
    stages: dict | None = None,
    processes: int = 1,
    verbose: bool = False,
    model_file: Path | str | None = None,
) -> dict:
    """Train every seed (`run_seed`, each on one thread, in `processes` worker processes);
    return the summary written to the file; seed 0's top-k model to model_file if given."""
    jobs = [(seed, stages, model_file) for seed in seeds]
    runs = run_jobs(_one_run, jobs, processes, _say if verbose else None)
    return {
        **provenance("python -m mha_lib.sparse_attention.recall"),
        "task": TASK,
        "train": {**TRAIN, "layers": 1},
        "attention": ATTENTION,
        "indexer": INDEXER,
        "keys": KEYS,
        "stages": {**STAGES, **(stages or {})},
        "seeds": list(seeds),
        "runs": runs,
    }


def load_sweep(path: Path | str = SWEEP_FILE) -> dict:
    """The cached sweep (see the module docstring for how it is made)."""
    return json.loads(Path(path).read_text())


def load_trained(path: Path | str = MODEL_FILE) -> RecallModel:
    """Seed 0's model as the sweep left it after its "top-k" continuation, in "top-k" mode, in
    eval mode."""
    model = make_model(None, 0, keys="top-k")
    model.load_state_dict(torch.load(Path(path), weights_only=True))
    return model.eval()


def seed_claims(run: dict) -> dict[str, bool]:
    """Every statement about one seed's record (a `run_seed` record) that notebook 18 could make
    "in every seed": which key choices solve the task (accuracy >= `SOLVED`) after their
    continuation, and whether the trained indexer's keys hold the value more often than the
    window's, the random keys' and the untrained indexer's."""
    c, warm = run["continued"], run["warm-up"]
    claims = {f"{keys} solves the task": c[keys]["accuracy"] >= SOLVED for keys in KEY_CHOICES}
    claims.update(
        {f"{keys} does not solve the task": c[keys]["accuracy"] < SOLVED for keys in KEY_CHOICES}
    )
    trained = c["top-k"]["value_chosen"]
    claims["the trained indexer picks the value more often than the window"] = (
        trained > c["window"]["value_chosen"]
    )
    claims["the trained indexer picks the value more often than random keys"] = (
        trained > c["random"]["value_chosen"]
    )
    claims["the trained indexer picks the value more often than the untrained one"] = (
        trained > warm["value_chosen_untrained"]
    )
    claims["the warmed-up indexer picks the value more often than the untrained one"] = (
        warm["value_chosen"] > warm["value_chosen_untrained"]
    )
    return claims


def claim_counts(sweep: dict) -> dict[str, int]:
    """{claim: the number of cached seeds in which it held}, for every `seed_claims` claim."""
    counts: dict[str, int] = {}
    for run in sweep["runs"]:
        for claim, held in seed_claims(run).items():
            counts[claim] = counts.get(claim, 0) + int(held)
    return counts


def every_seed_claims(sweep: dict) -> list[str]:
    """The claims that held in every cached seed: all that notebook 18 states "in every seed"."""
    n = len(sweep["runs"])
    return [claim for claim, k in claim_counts(sweep).items() if k == n]


def _mean(values: list[float]) -> dict:
    mean, half = (float(v) for v in t_interval(values))
    return {"mean": mean, "low": mean - half, "high": mean + half}


def sweep_summary(sweep: dict) -> dict[str, dict]:
    """Per key choice after its continuation (and "dense before": the dense stage's model):
    the mean accuracy with its 95 % t-interval over the seeds (not clipped), how many seeds
    solved the task (accuracy >= `SOLVED`) with the Wilson interval of that rate, and for the
    chosen keys the mean share of answer queries whose keys hold the value (with its
    t-interval); "indexer untrained" and "indexer warmed up" give that share before and after
    the warm-up."""
    runs = sweep["runs"]
    n = len(runs)
    out = {}
    rows = {"dense before": [r["dense"]["accuracy"] for r in runs]}
    rows.update({keys: [r["continued"][keys]["accuracy"] for r in runs] for keys in KEY_CHOICES})
    for name, accs in rows.items():
        solved = sum(a >= SOLVED for a in accs)
        out[name] = {
            "accuracy": _mean(accs),
            "solved": solved,
            "solved interval": wilson_interval(solved, n),
            "seeds": n,
        }
        if name in ("window", "top-k", "random"):
            out[name]["value chosen"] = _mean([r["continued"][name]["value_chosen"] for r in runs])
    for name, field in (
        ("indexer untrained", "value_chosen_untrained"),
        ("indexer warmed up", "value_chosen"),
    ):
        out[name] = {"value chosen": _mean([r["warm-up"][field] for r in runs]), "seeds": n}
    return out


def main(argv=None) -> int:
    """`python -m mha_lib.sparse_attention.recall [out] [--processes P]`: every seed of
    `SEEDS`, written to out (default `SWEEP_FILE`), seed 0's top-k model to `MODEL_FILE`."""

    def sweep(verbose: bool, processes: int) -> dict:
        return run_sweep(processes=processes, verbose=verbose, model_file=MODEL_FILE)

    return recall.sweep_command(
        "python -m mha_lib.sparse_attention.recall", sweep, SWEEP_FILE, argv
    )


if __name__ == "__main__":
    sys.exit(main())
