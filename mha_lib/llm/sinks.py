"""Attention sinks in a real decoder: how much weight each head puts on the first position, and
what sits there.

Derived in notebook 13. A head whose queries put most of their weight on position 0, whatever
they are, is an *attention sink* (Xiao et al. 2023, who kept such tokens in a rolling cache:
notebook 11's `SinkKVCache`). The measures, all from one pass of `DecoderLM` with its weights:
- `first_token_attention(model, input_ids, start=1)`: (L, h), each head's mean weight on
  position 0, over the queries t >= start (and the batch); `position_attention` for any key;
- `uniform_first_token(N, start)`: what uniform causal attention would give, the mean of
  1 / (t + 1) over the same queries: the baseline a sink must beat;
- `layer_inputs(model, input_ids)`: the residual stream entering each layer (L, B, N, C), caught
  with forward pre-hooks; from it `value_norms` (the length of each token's value vector per
  key/value head) and `residual_norms`, and `ratio_to_rest` (position 0's against the median of
  the others); `weights_and_inputs` gives the weights and the layer inputs from one pass;
- `noop_correlation(weights, inputs, model, start)`: per head, the correlation over queries
  between the weight a query puts on position 0 and the length of the head's output there: a
  head that parks its weight on a small value writes little (the "no-op" reading of a sink).
Imports torch.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..nn.decoder import DecoderLM

__all__ = [
    "first_token_attention",
    "layer_inputs",
    "noop_correlation",
    "position_attention",
    "ratio_to_rest",
    "residual_norms",
    "uniform_first_token",
    "value_norms",
    "weights_and_inputs",
]


def _weights(model: DecoderLM, input_ids: Tensor) -> Tensor:
    """(L, B, h, N, N): every head's attention weights on input_ids (B, N)."""
    with torch.no_grad():
        _, weights = model(input_ids, need_weights=True)
    return torch.stack(weights)


def position_attention(weights, key: int = 0, start: int = 1) -> Tensor:
    """(L, h): the mean weight on position `key` over the queries t >= max(start, key) and the
    batch, from weights (L, B, h, N, N) (or a list of L tensors (B, h, N, N))."""
    A = torch.stack(list(weights)) if isinstance(weights, list | tuple) else weights
    if A.dim() != 5 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"weights has shape {tuple(A.shape)}; expected (L, B, h, N, N)")
    first = max(start, key)
    if not 0 <= key < A.shape[-1] or first >= A.shape[-1]:
        raise ValueError(
            f"key = {key}, start = {start}: no query t >= {first} in a sequence of "
            f"{A.shape[-1]} tokens"
        )
    return A[:, :, :, first:, key].mean(dim=(1, 3))  # (L, h)


def first_token_attention(model: DecoderLM, input_ids: Tensor, start: int = 1) -> Tensor:
    """(L, h): each head's mean attention weight on position 0, averaged over the queries from
    position `start` on (1: every query but the first, which can only see itself) and over the
    batch. input_ids (B, N)."""
    return position_attention(_weights(model, input_ids), 0, start)


def uniform_first_token(N: int, start: int = 1) -> float:
    """The same average for uniform causal attention: query t spreads 1 / (t + 1) over its keys,
    so it gives position 0 the weight 1 / (t + 1); the mean over t = start .. N - 1."""
    if not 0 <= start < N:
        raise ValueError(f"start = {start}, N = {N}; expected 0 <= start < N")
    return sum(1 / (t + 1) for t in range(start, N)) / (N - start)


def layer_inputs(model: DecoderLM, input_ids: Tensor, head_mask: Tensor | None = None) -> Tensor:
    """(L, B, N, C): the residual stream x entering each of the L layers (layer 0's is the
    embedding), caught with a forward pre-hook on each `DecoderBlock`; head_mask (L, h) as the
    model's (0 removes a head)."""
    return _run_with_hooks(model, input_ids, head_mask, need_weights=False)[1]


def weights_and_inputs(model: DecoderLM, input_ids: Tensor) -> tuple[Tensor, Tensor]:
    """(L, B, h, N, N) attention weights and (L, B, N, C) layer inputs, from one pass."""
    return _run_with_hooks(model, input_ids, None, need_weights=True)


def _run_with_hooks(model, input_ids, head_mask, need_weights: bool):
    caught: list[Tensor] = []
    hooks = [
        layer.register_forward_pre_hook(lambda module, args: caught.append(args[0]))
        for layer in model.layers
    ]
    try:
        with torch.no_grad():
            out = model(input_ids, head_mask=head_mask, need_weights=need_weights,
                        last_only=True)  # fmt: skip
    finally:
        for hook in hooks:
            hook.remove()
    weights = torch.stack(out[1]) if need_weights else None
    return weights, torch.stack(caught)


def value_norms(model: DecoderLM, inputs: Tensor) -> Tensor:
    """(L, B, h_kv, N): the length of each token's value vector, per layer and key/value head,
    from the layer inputs (L, B, N, C) of `layer_inputs`: v = v_proj(norm1(x))."""
    out = []
    for layer, x in zip(model.layers, inputs):
        _, _, v = layer.self_attn.project(layer.norm1(x))  # (B, h_kv, N, d)
        out.append(v.norm(dim=-1))  # (B, h_kv, N)
    return torch.stack(out)


def residual_norms(inputs: Tensor) -> Tensor:
    """(L, B, N): the length of the residual stream entering each layer, per token."""
    return inputs.norm(dim=-1)


def ratio_to_rest(norms: Tensor, skip: int = 1) -> Tensor:
    """(...): position 0's value of norms (..., N) over the median of positions skip .. N - 1
    (skip = 2 leaves out position 1 too, for a sequence whose first token was prepended)."""
    return norms[..., 0] / norms[..., skip:].median(dim=-1).values


def noop_correlation(model: DecoderLM, weights: Tensor, inputs: Tensor, start: int = 10) -> Tensor:
    """(L, h): per head, the correlation, over the queries t >= start of every sequence, between
    the weight a query puts on position 0 and the length of the head's output o_t = Σ_j a_tj v_j.
    weights (L, B, h, N, N), inputs (L, B, N, C) from the same input_ids."""
    cfg = model.config
    g = cfg.num_heads // cfg.num_kv_heads
    out = []
    for l, (layer, x) in enumerate(zip(model.layers, inputs)):
        _, _, v = layer.self_attn.project(layer.norm1(x))  # (B, h_kv, N, d)
        o = weights[l] @ v.repeat_interleave(g, dim=1)  # (B, h, N, d): each head's output
        a0 = weights[l][:, :, start:, 0].transpose(0, 1).flatten(1)  # (h, B·(N - start))
        size = o[:, :, start:].norm(dim=-1).transpose(0, 1).flatten(1)  # (h, B·(N - start))
        a0 = a0 - a0.mean(dim=1, keepdim=True)
        size = size - size.mean(dim=1, keepdim=True)
        out.append((a0 * size).sum(1) / (a0.norm(dim=1) * size.norm(dim=1)))  # (h,)
    return torch.stack(out)  # (L, h)
