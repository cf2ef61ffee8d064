"""Generating text: greedy decoding and sampling (temperature, top-k, top-p), with a KV cache.

Derived in notebook 12. A causal language model gives, at the last position, logits over the V
tokens of its vocabulary for the NEXT token. Generating repeats: pick a token from them, append
it, run the model again. With a KV cache (notebook 08) the prompt is run once (the prefill) and
each later step runs only the one new token against the cached keys and values; without it every
step runs the whole sequence again. Both give the same tokens (tests/nn/test_generation.py).

How a token is picked from the logits z (V,):
- greedy: argmax z (temperature 0, the default);
- sampling: softmax(z / T), after keeping only the k largest logits (top-k) and/or the smallest
  set of most probable tokens whose probabilities sum to at least p (top-p, "nucleus"); then one
  draw: u uniform in [0, 1) from a seeded `torch.Generator` on the CPU, and the first token whose
  cumulative probability exceeds u (inverse transform sampling).

What it holds:
- `top_k_filter(logits, k)`, `top_p_filter(logits, p)`: the logits with the others set to -inf;
- `pick_next(logits, temperature, top_k, top_p, generator, trace)`: one token per row;
- `generate(model, input_ids, max_new_tokens, ...)`: the whole loop, greedy by default, with the
  cache; it stops a row at a stop token (the model's end-of-turn `<|im_end|>` by default);
- `Trace`: what a generation can record for checking that its text is stable: the gap between
  the two largest logits at each greedy step, and how far each sampling draw u fell from the
  nearest boundary of the cumulative distribution.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from .._checks import check_int

__all__ = ["Trace", "generate", "pick_next", "top_k_filter", "top_p_filter"]


@dataclass
class Trace:
    """Per step of a generation (all rows): the top-1 minus top-2 logit gap, and for sampling
    the distance of each draw u from the nearest cumulative-probability boundary."""

    logit_margins: list[float] = field(default_factory=list)
    draw_margins: list[float] = field(default_factory=list)


def top_k_filter(logits: Tensor, k: int) -> Tensor:
    """Keep the k largest logits of each row (ties at the k-th kept too); the rest -> -inf."""
    check_int(k, "top_k")
    k = min(k, logits.shape[-1])
    kth = logits.topk(k, dim=-1).values[..., -1:]  # (..., 1)
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Keep the smallest set of most probable tokens whose probabilities sum to >= p."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
        raise ValueError(f"top_p = {p!r}; expected a number in (0, 1]")
    if p == 1:
        return logits  # everything (the sums below could round to 1 before the last token)
    probs, order = torch.softmax(logits, dim=-1).sort(dim=-1, descending=True)  # (..., V)
    before = probs.cumsum(dim=-1) - probs  # the mass of the tokens ranked above each one
    drop_sorted = before >= p  # already p without it: not needed (the first is always kept)
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def pick_next(
    logits: Tensor,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    trace: Trace | None = None,
) -> Tensor:
    """The next token of each row of logits (B, V): (B,) int64."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"temperature must be a number; got {type(temperature).__name__}")
    if temperature < 0:
        raise ValueError(f"temperature = {temperature}; expected >= 0 (0 is greedy)")
    if temperature == 0:
        if trace is not None:
            top2 = logits.topk(2, dim=-1).values  # (B, 2)
            trace.logit_margins.append(float((top2[:, 0] - top2[:, 1]).min()))
        return logits.argmax(dim=-1)
    z = logits.float() / temperature
    if top_k is not None:
        z = top_k_filter(z, top_k)
    if top_p is not None:
        z = top_p_filter(z, top_p)
    cdf = torch.softmax(z, dim=-1).cumsum(dim=-1).cpu()  # (B, V)
    u = torch.rand(cdf.shape[0], 1, generator=generator, dtype=cdf.dtype)  # (B, 1), on the CPU
    u = u * cdf[:, -1:]  # the last entry is 1 up to rounding
    ids = torch.searchsorted(cdf, u, right=True).clamp(max=cdf.shape[1] - 1)  # (B, 1)
    if trace is not None:
        lo = torch.gather(cdf, 1, (ids - 1).clamp(min=0)).where(ids > 0, 0.0)
        hi = torch.gather(cdf, 1, ids)
        trace.draw_margins.append(float(torch.minimum(u - lo, hi - u).min()))
    return ids[:, 0].to(logits.device)


@torch.no_grad()
def generate(
    model,
    input_ids: Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    stop_ids: tuple[int, ...] | None = None,
    attention=None,
    trace: Trace | None = None,
) -> Tensor:
    """input_ids (B, N) followed by up to max_new_tokens generated tokens: (B, N + T).

    Greedy by default; temperature > 0 samples (with top_k, top_p and a seeded CPU generator).
    use_cache: prefill once, then one token per step against a `DecoderCache`; False runs the
    whole sequence every step (the same tokens, slower). stop_ids: a row stops after one of
    them (default: the model's end-of-turn token, `config.eos_token_id`; () never stops);
    once every row has stopped, generation ends, and a row that stopped earlier is padded with
    its stop token. attention: the attention function for this call (default the model's).
    """
    check_int(max_new_tokens, "max_new_tokens", 0)
    if not isinstance(input_ids, Tensor) or input_ids.dim() != 2:
        got = tuple(input_ids.shape) if isinstance(input_ids, Tensor) else type(input_ids).__name__
        raise ValueError(f"input_ids has shape {got}; expected (B, N)")
    cfg = model.config
    total = input_ids.shape[1] + max_new_tokens
    if total > cfg.context_length:
        raise ValueError(
            f"{input_ids.shape[1]} prompt tokens + max_new_tokens = {max_new_tokens} is "
            f"{total}, longer than the model's context of {cfg.context_length} tokens"
        )
    if stop_ids is None:
        stop_ids = () if cfg.eos_token_id is None else (cfg.eos_token_id,)
    stops = torch.tensor(list(stop_ids), dtype=torch.long, device=input_ids.device)
    ids = input_ids
    if max_new_tokens == 0:
        return ids
    cache = model.new_cache(ids.shape[0], total) if use_cache else None
    logits = model(ids, cache, attention=attention, last_only=True)[:, -1]  # (B, V)
    done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
    pad = stops[0] if len(stops) else torch.tensor(0, device=ids.device)
    for step in range(max_new_tokens):
        nxt = pick_next(logits, temperature, top_k, top_p, generator, trace)  # (B,)
        nxt = torch.where(done, pad, nxt)
        ids = torch.cat([ids, nxt[:, None]], dim=1)  # (B, N + step + 1)
        done |= torch.isin(nxt, stops)
        if bool(done.all()) or step == max_new_tokens - 1:
            break
        if use_cache:
            logits = model(nxt[:, None], cache, attention=attention)[:, -1]
        else:
            logits = model(ids, attention=attention, last_only=True)[:, -1]
    return ids
