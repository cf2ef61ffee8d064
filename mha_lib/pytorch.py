"""Multi-head attention as a PyTorch module: a drop-in for `nn.MultiheadAttention`.

Derived in notebook 04 from the numpy version of notebook 03
(`mha_lib.multi_head_attention`). This module imports torch, so it is imported
explicitly (`from mha_lib.pytorch import MultiHeadAttention`); `import mha_lib`
stays numpy-only.

What it holds, in reading order:
- `explicit_attention`: softmax(q kᵀ/√d + mask) v with the weights written out, the
  algorithm;
- `MultiHeadAttention`: the same constructor (defaults included: batch_first=False,
  inputs (L, B, E)), parameters (names and layout), forward arguments and results as
  `torch.nn.MultiheadAttention`, so it can replace it in existing code and load its
  `state_dict`; the series' own code passes batch_first=True, as it does to torch's.
  Its `forward` is project -> attend -> merge -> out_proj; the attention runs
  `torch.nn.functional.scaled_dot_product_attention` (fused kernels: the (L, S) attention
  matrix is never kept), and `explicit_attention` only when `need_weights=True`;
- the helpers (heads split and merged, masks merged), then every input check.
The device the notebooks run on is chosen by `mha_lib.runtime.pick_device()`.

Notation, the same as in the numpy core: a batch of B sequences; queries
(B, L, E) with L tokens of E = embed_dim features (C in the numpy notebooks);
keys (B, S, kdim) and values (B, S, vdim) with S tokens; h = num_heads heads
of d = head_dim = E / h features each (d_k = d_v = d).

The numpy core writes projections as X @ W_q with W_q (C, h*d_k); torch's
`Linear` stores the transpose, weight (out, in), and computes X @ weight.T. So
W_q = in_proj_weight[:E].T, W_k = in_proj_weight[E:2E].T,
W_v = in_proj_weight[2E:].T and W_o = out_proj.weight.T.

Masks follow `nn.MultiheadAttention`, NOT the numpy core: a boolean
`key_padding_mask` or `attn_mask` is True where a query may NOT attend; a
floating-point mask is added to the scores (-inf blocks).

Fully masked rows (a query allowed to attend to no key at all): this module
gives that query zero attention weights and a zero attention output, so the
module's output for it is `out_proj.bias` (zeros without bias), and the
gradients flowing through it are zero. It never returns NaN for such rows.
For comparison, in torch 2.13 `scaled_dot_product_attention` also gives zeros
on the CPU, while `nn.MultiheadAttention` gives NaN with `need_weights=True`
and in its inference fast path (notebook 04 checks this in code).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._checks import check_int

__all__ = ["MultiHeadAttention", "explicit_attention", "merge_heads", "split_heads"]


def explicit_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
) -> tuple[Tensor, Tensor]:
    """softmax(q kᵀ / √d + mask) v written out, keeping the (L, S) weights: the algorithm.

    q (B, h, L, d), k (B, h, S, d), v (B, h, S, d_v) (any leading dimensions that broadcast);
    mask: None or a float mask broadcastable to (B, h, L, S), added to the scores (-inf blocks);
    is_causal: query i sees keys 0..i (top-left, as `F.scaled_dot_product_attention`). A row
    with every key blocked gives NaN here: `MultiHeadAttention` never passes one (the rule for
    such rows is in this module's docstring). Returns (output (B, h, L, d_v), weights
    (B, h, L, S)); dropout (if any) is applied to the weights. `F.scaled_dot_product_attention`
    computes the same output without keeping the weights.
    """
    _check_qkv(q, k, v)
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, h, L, S)
    if mask is not None:
        scores = scores + mask  # (B, h, L, S)
    if is_causal:
        L, S = scores.shape[-2:]
        future = torch.ones(L, S, dtype=torch.bool, device=q.device).triu(1)  # (L, S)
        scores = scores.masked_fill(future, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # (B, h, L, S), rows sum to 1
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return torch.matmul(weights, v), weights  # (B, h, L, d_v), (B, h, L, S)


class MultiHeadAttention(nn.Module):
    """Multi-head attention, a drop-in replacement for `nn.MultiheadAttention`.

    Arguments, parameters and results are those of
    `torch.nn.MultiheadAttention`, defaults included (batch_first=False, as in torch):
    embed_dim E, num_heads h (h must divide E, d = E / h), dropout on the
    attention weights (training only), bias for the in- and out-projections,
    kdim / vdim for keys and values of other widths, batch_first, device,
    dtype. The parameters have the same names and shapes, so `state_dict`s
    load both ways, and `from_torch` / `to_torch` convert exactly:
    - in_proj_weight (3E, E) = [W_q; W_k; W_v] in torch's (out, in) layout,
      or q_proj_weight (E, E), k_proj_weight (E, kdim), v_proj_weight
      (E, vdim) when kdim or vdim differ from E;
    - in_proj_bias (3E,) (if bias);
    - out_proj, an `nn.Linear(E, E, bias)`.

    Differences from `nn.MultiheadAttention`, all documented in `forward`:
    need_weights defaults to False (the fast path), key and value default to
    query, is_causal=True works without an attn_mask, fully masked rows give
    zeros rather than NaN, and add_bias_kv / add_zero_attn are not supported.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        *,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        _check_config(embed_dim, num_heads, dropout, add_bias_kv, add_zero_attn)
        self.embed_dim = embed_dim
        self.kdim = embed_dim if kdim is None else check_int(kdim, "kdim")
        self.vdim = embed_dim if vdim is None else check_int(vdim, "vdim")
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads  # d = d_k = d_v
        self.dropout = float(dropout)
        self.batch_first = bool(batch_first)
        # attributes that code written for nn.MultiheadAttention may read
        self.bias_k = self.bias_v = None
        self.add_zero_attn = False

        # Parameters created in the order nn.MultiheadAttention creates them, so
        # that the same seed gives the same initial weights.
        factory = {"device": device, "dtype": dtype}
        E = embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = nn.Parameter(
                torch.empty((3 * E, E), **factory)
            )  # [W_q; W_k; W_v]
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = nn.Parameter(torch.empty((E, E), **factory))  # (E, E)
            self.k_proj_weight = nn.Parameter(torch.empty((E, self.kdim), **factory))  # (E, kdim)
            self.v_proj_weight = nn.Parameter(torch.empty((E, self.vdim), **factory))  # (E, vdim)
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = nn.Parameter(torch.empty(3 * E, **factory))  # (3E,)
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = nn.Linear(E, E, bias=bias, **factory)  # W_o, stored (E, E) = W_o.T
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise as nn.MultiheadAttention: Xavier-uniform projections, zero biases."""
        if self._qkv_same_embed_dim:
            nn.init.xavier_uniform_(self.in_proj_weight)
        else:
            nn.init.xavier_uniform_(self.q_proj_weight)
            nn.init.xavier_uniform_(self.k_proj_weight)
            nn.init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            nn.init.zeros_(self.in_proj_bias)
            nn.init.zeros_(self.out_proj.bias)

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, dropout={self.dropout}, "
            f"kdim={self.kdim}, vdim={self.vdim}, batch_first={self.batch_first}"
        )

    # ------------------------------------------------------------------
    # forward pass

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = False,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
        head_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from `query` to `key`/`value`; returns (output, weights or None).

        Shapes with batch_first=True (the series' layout; with the default
        batch_first=False, torch's, the batched inputs and the output are
        (L, B, E) instead, and the weights stay batch first):
        - query (B, L, E) or unbatched (L, E); key (B, S, kdim), value
          (B, S, vdim), unbatched (S, kdim), (S, vdim). key defaults to query
          and value to key (self-attention).
        - key_padding_mask (B, S) or unbatched (S,): True (or -inf) marks keys
          that are padding.
        - attn_mask (L, S), the same for every sequence and head, or
          (B*h, L, S) (unbatched: (h, L, S)), entry b*h + i for sequence b and
          head i. Bool: True = may NOT attend. Float: added to the scores.
        - need_weights: also return the attention weights, averaged over the
          heads (B, L, S) if average_attn_weights, else per head (B, h, L, S)
          (unbatched: (L, S) / (h, L, S)). Default False (unlike
          nn.MultiheadAttention): the weights are then never materialised.
        - is_causal: a causal mask (query i sees keys 0..i). As in
          nn.MultiheadAttention, when attn_mask is given it is trusted to be
          that causal mask and may be skipped in favour of the fused causal
          kernel; unlike nn.MultiheadAttention, attn_mask may be left out.
        - head_mask (not in nn.MultiheadAttention): None, or a float tensor
          (h,) or (B, h) that multiplies each head's output before the heads
          are concatenated and projected by W_o: 1 keeps head i, 0 removes it
          (ablation; notebooks 05 and 06). The returned weights are the
          weights the heads computed, unscaled.

        A query with no key to attend to gets zero weights and a zero attention output (this
        module's docstring states the rule). Returns output shaped like query (last axis E) and
        the weights or None.
        """
        key = query if key is None else key
        value = key if value is None else value
        # every check in one place (`_check_forward`, below the class); masks become floats
        query, key, value, kpm, am, hm, batched = _check_forward(
            self, query, key, value, key_padding_mask, attn_mask, head_mask
        )  # (B, L, E), (B, S, kdim), (B, S, vdim); (B, 1, 1, S), (1|B, 1|h, L, S), (1|B, h, 1, 1)

        q, k, v = self.project(query, key, value)  # (B, h, L, d), (B, h, S, d), (B, h, S, d)
        heads, weights = self._attend(q, k, v, am, kpm, is_causal, need_weights)  # (B, h, L, d)
        if hm is not None:
            heads = heads * hm  # (B, h, L, d) * (1|B, h, 1, 1): scale or remove heads
        out = self.out_proj(merge_heads(heads))  # (B, L, h*d) -> (B, L, E)

        return self._as_given(out, weights, batched, average_attn_weights)

    def project(
        self, query: Tensor, key: Tensor | None = None, value: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """q = query W_q, k = key W_k, v = value W_v, each split into h heads: what the heads
        attend with (public, as `GroupedQueryAttention.project`, for the measures that read
        q and k, notebook 05's positional scores).

        query (B, L, E), key (B, S, kdim), value (B, S, vdim) -> q (B, h, L, d),
        k (B, h, S, d), v (B, h, S, d); key defaults to query and value to key, as in
        `forward`. Batch first, unchecked (`forward` checks its inputs). torch stores each W
        transposed, (out, in).
        """
        key = query if key is None else key
        value = key if value is None else value
        if self._qkv_same_embed_dim:
            w_q, w_k, w_v = self.in_proj_weight.chunk(3)  # [W_q; W_k; W_v] (3E, E) -> 3 x (E, E)
        else:
            w_q, w_k, w_v = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        b = self.in_proj_bias  # (3E,) or None
        b_q, b_k, b_v = (None, None, None) if b is None else b.chunk(3)  # each (E,)
        h = self.num_heads
        q = split_heads(F.linear(query, w_q, b_q), h)  # (B, h, L, d)
        k = split_heads(F.linear(key, w_k, b_k), h)  # (B, h, S, d)
        v = split_heads(F.linear(value, w_v, b_v), h)  # (B, h, S, d)
        return q, k, v

    def _attend(self, q, k, v, am, kpm, is_causal: bool, need_weights: bool):
        """Each head's softmax(q kᵀ/√d + mask) v (B, h, L, d), and its weights (B, h, L, S) when
        need_weights (else None). am (1|B, 1|h, L, S) and kpm (B, 1, 1, S): float masks or None.
        """
        L, S = q.shape[2], k.shape[2]
        # nn.MultiheadAttention's rule: is_causal uses the fused causal kernel when it can
        causal_kernel = bool(is_causal) and kpm is None and not need_weights
        if is_causal and not causal_kernel and am is None:
            blocked = torch.ones(L, S, dtype=torch.bool, device=q.device).triu_(1)  # (L, S)
            am = _additive_mask(blocked, "attn_mask", q.dtype, q.device)[None, None]
        mask, fully = _merge_masks(None if causal_kernel else am, kpm)
        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            heads, weights = explicit_attention(q, k, v, mask, dropout_p)
        else:  # the fused kernel: the (L, S) weights are never stored
            heads = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal_kernel
            )
            weights = None
        if fully is not None:  # a row with nothing to attend to: zeros (the module's rule)
            heads = heads.masked_fill(fully, 0.0)  # (B, h, L, d)
            weights = None if weights is None else weights.masked_fill(fully, 0.0)
        return heads, weights

    def _as_given(self, out: Tensor, weights, batched: bool, average: bool):
        """out (B, L, E) and weights (B, h, L, S) back in the caller's layout."""
        if weights is not None and average:
            weights = weights.mean(dim=1)  # (B, L, S)
        if not batched:
            out = out.squeeze(0)  # (L, E)
            weights = None if weights is None else weights.squeeze(0)  # (L, S) or (h, L, S)
        elif not self.batch_first:
            out = out.transpose(0, 1)  # (L, B, E)
        return out, weights

    # ------------------------------------------------------------------
    # conversion to and from torch.nn.MultiheadAttention

    @classmethod
    def from_torch(cls, m: nn.MultiheadAttention) -> MultiHeadAttention:
        """A `MultiHeadAttention` with the configuration and a copy of the weights of `m`.

        Works with the packed `in_proj_weight` and with separate
        q/k/v_proj_weight (kdim/vdim); keeps m's device, dtype and train/eval mode.
        """
        if not isinstance(m, nn.MultiheadAttention):
            raise TypeError(f"m must be a torch.nn.MultiheadAttention; got {type(m).__name__}")
        if m.bias_k is not None or m.add_zero_attn:
            raise NotImplementedError(
                "m uses add_bias_kv or add_zero_attn, which this module does not support"
            )
        weight = m.out_proj.weight
        new = cls(
            m.embed_dim,
            m.num_heads,
            dropout=m.dropout,
            bias=m.in_proj_bias is not None,
            kdim=m.kdim,
            vdim=m.vdim,
            batch_first=m.batch_first,
            device=weight.device,
            dtype=weight.dtype,
        )
        new.load_state_dict(m.state_dict())  # same names and shapes: an exact copy
        return new.train(m.training)

    def to_torch(self) -> nn.MultiheadAttention:
        """An `nn.MultiheadAttention` with this configuration and a copy of these weights."""
        weight = self.out_proj.weight
        m = nn.MultiheadAttention(
            self.embed_dim,
            self.num_heads,
            dropout=self.dropout,
            bias=self.in_proj_bias is not None,
            kdim=self.kdim,
            vdim=self.vdim,
            batch_first=self.batch_first,
            device=weight.device,
            dtype=weight.dtype,
        )
        m.load_state_dict(self.state_dict())
        return m.train(self.training)


# ----------------------------------------------------------------------------
# the heads, split and merged; the masks, merged


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """(B, L, h*d) -> (B, h, L, d), a view: head i owns features i*d:(i+1)*d."""
    B, L, hd = x.shape
    return x.view(B, L, num_heads, hd // num_heads).transpose(1, 2)  # (B, h, L, d)


def merge_heads(x: Tensor) -> Tensor:
    """(B, h, L, d) -> (B, L, h*d): the heads side by side along the features."""
    B, h, L, d = x.shape
    return x.transpose(1, 2).reshape(B, L, h * d)  # (B, L, h*d)


def _merge_masks(am: Tensor | None, kpm: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
    """One float mask for the kernel, and which query rows are fully masked.

    Returns (mask, fully): mask broadcastable to (B, h, L, S) or None; fully (B|1, h|1, L|1, 1)
    bool, True for rows where every key is -inf. Those rows are unmasked in `mask`, so that no
    kernel sees a row of -inf and no NaN reaches the gradients; `_attend` zeroes their results.
    """
    if am is None and kpm is None:
        return None, None
    mask = kpm if am is None else (am if kpm is None else am + kpm)  # (B|1, h|1, L|1, S)
    fully = torch.isneginf(mask).all(dim=-1, keepdim=True)  # (B|1, h|1, L|1, 1)
    return mask.masked_fill(fully, 0.0), fully


# ----------------------------------------------------------------------------
# input checks: everything `MultiHeadAttention` verifies, once, at its boundary.
# Each message names the argument, the shape (or type) it got and what it needs.


def _check_config(embed_dim, num_heads, dropout, add_bias_kv, add_zero_attn) -> None:
    """The constructor's arguments: h divides E, dropout in [0, 1), no bias_kv / zero_attn."""
    check_int(embed_dim, "embed_dim")
    check_int(num_heads, "num_heads")
    if embed_dim % num_heads != 0:
        raise ValueError(
            f"embed_dim = {embed_dim} is not divisible by num_heads = {num_heads}; "
            "expected embed_dim = num_heads * head_dim"
        )
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)):
        raise TypeError(f"dropout must be a float; got {type(dropout).__name__}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must lie in [0, 1); got {dropout}")
    if add_bias_kv or add_zero_attn:
        raise NotImplementedError(
            "add_bias_kv and add_zero_attn are not supported by this module; "
            "use torch.nn.MultiheadAttention for them"
        )


def _check_forward(module, query, key, value, key_padding_mask, attn_mask, head_mask):
    """All of `forward`'s checks; returns the inputs batch first and the masks as floats.

    -> query (B, L, E), key (B, S, kdim), value (B, S, vdim), key_padding_mask as
    (B, 1, 1, S) or None, attn_mask as (1, 1, L, S) or (B, h, L, S) or None,
    head_mask as (1|B, h, 1, 1) or None, and whether the input was batched.
    """
    query, key, value, batched = _check_inputs(module, query, key, value)
    B, L, _ = query.shape
    S = key.shape[1]
    h = module.num_heads
    kpm = _check_key_padding_mask(key_padding_mask, B, S, batched, query)
    am = _check_attn_mask(attn_mask, h, B, L, S, batched, query)
    hm = _check_head_mask(head_mask, h, B, query)
    return query, key, value, kpm, am, hm, batched


def _check_inputs(module, query, key, value) -> tuple[Tensor, Tensor, Tensor, bool]:
    """Validate query/key/value; return them as (B, L, E), (B, S, kdim), (B, S, vdim)."""
    for name, x in (("query", query), ("key", key), ("value", value)):
        _check_float_tensor(x, name)
    E, first = module.embed_dim, module.batch_first
    batched_layout = "(B, L, E)" if first else "(L, B, E)"
    if query.dim() not in (2, 3):
        raise ValueError(
            f"query has shape {tuple(query.shape)}; expected {batched_layout} or unbatched "
            f"(L, E) with E = embed_dim = {E}"
        )
    batched = query.dim() == 3
    for name, x, seq, width_name, width in (
        ("query", query, "L", "E", E),
        ("key", key, "S", "kdim", module.kdim),
        ("value", value, "S", "vdim", module.vdim),
    ):
        if not batched:
            expected = f"({seq}, {width_name})"
        else:
            expected = f"(B, {seq}, {width_name})" if first else f"({seq}, B, {width_name})"
        if x.dim() != query.dim() or x.shape[-1] != width:
            raise ValueError(
                f"{name} has shape {tuple(x.shape)}; expected {expected} with "
                f"{width_name} = {width} (query has shape {tuple(query.shape)})"
            )
        param = module.out_proj.weight
        if x.dtype != param.dtype and not torch.is_autocast_enabled(x.device.type):
            raise TypeError(
                f"{name} has dtype {x.dtype} but the module's parameters are {param.dtype}; "
                f"convert one of them, e.g. module.to({x.dtype})"
            )
    if not batched:
        query, key, value = query[None], key[None], value[None]  # (1, L, E), ...
    elif not first:
        query, key, value = (x.transpose(0, 1) for x in (query, key, value))  # (B, L, E)
    B, S = key.shape[0], key.shape[1]
    if query.shape[0] != B:
        raise ValueError(
            f"key has batch size {B} but query has batch size {query.shape[0]}; "
            "expected the same batch size B"
        )
    if value.shape[:2] != (B, S):
        raise ValueError(
            f"value has shape {tuple(value.shape)} (as (B, S, vdim)); expected "
            f"(B, S, vdim) = ({B}, {S}, {module.vdim}) to match key"
        )
    return query, key, value, batched


def _check_key_padding_mask(mask, B, S, batched, query) -> Tensor | None:
    """key_padding_mask (B, S) or (S,) -> float (B, 1, 1, S) to add to the scores."""
    if mask is None:
        return None
    mask = _additive_mask(mask, "key_padding_mask", query.dtype, query.device)
    expected = (B, S) if batched else (S,)
    if tuple(mask.shape) != expected:
        raise ValueError(
            f"key_padding_mask has shape {tuple(mask.shape)}; expected "
            f"{'(B, S)' if batched else '(S,)'} = {expected}"
        )
    return mask.view(B, 1, 1, S)  # (B, 1, 1, S): the same for every head and query


def _check_attn_mask(mask, h, B, L, S, batched, query) -> Tensor | None:
    """attn_mask (L, S) or (B*h, L, S) -> float (1, 1, L, S) or (B, h, L, S)."""
    if mask is None:
        return None
    mask = _additive_mask(mask, "attn_mask", query.dtype, query.device)
    if mask.dim() == 2 and tuple(mask.shape) == (L, S):
        return mask[None, None]  # (1, 1, L, S)
    if mask.dim() == 3 and tuple(mask.shape) == (B * h, L, S):
        return mask.view(B, h, L, S)  # (B, h, L, S)
    three_d = f"(B*h, L, S) = ({B * h}, {L}, {S})" if batched else f"(h, L, S) = ({h}, {L}, {S})"
    raise ValueError(
        f"attn_mask has shape {tuple(mask.shape)}; expected (L, S) = ({L}, {S}) or {three_d}"
    )


def _check_head_mask(head_mask, h, B, query) -> Tensor | None:
    """head_mask (h,) or (B, h), float -> (1|B, h, 1, 1) to multiply the heads with."""
    if head_mask is None:
        return None
    if not isinstance(head_mask, Tensor) or not torch.is_floating_point(head_mask):
        got = head_mask.dtype if isinstance(head_mask, Tensor) else type(head_mask).__name__
        raise TypeError(
            f"head_mask must be a floating-point tensor (1 keeps a head, 0 removes it); got {got}"
        )
    if tuple(head_mask.shape) not in ((h,), (B, h)):
        raise ValueError(
            f"head_mask has shape {tuple(head_mask.shape)}; expected (h,) = ({h},) or "
            f"(B, h) = ({B}, {h})"
        )
    head_mask = head_mask.to(device=query.device, dtype=query.dtype)
    return head_mask.reshape(-1, h, 1, 1)  # (1|B, h, 1, 1)


def _check_qkv(q, k, v) -> None:
    """explicit_attention's q (..., L, d), k (..., S, d), v (..., S, d_v)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        _check_float_tensor(x, name)
        if x.dim() < 2:
            raise ValueError(f"{name} has shape {tuple(x.shape)}; expected (..., tokens, features)")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"k has shape {tuple(k.shape)}; expected (..., S, d) with d = {q.shape[-1]} from q "
            f"of shape {tuple(q.shape)} (queries and keys share d)"
        )
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(
            f"v has shape {tuple(v.shape)}; expected (..., S, d_v) with S = {k.shape[-2]} from k "
            f"of shape {tuple(k.shape)} (one value per key)"
        )


def _check_float_tensor(x, name: str) -> None:
    """Raise TypeError unless `x` is a floating-point tensor."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
    if not torch.is_floating_point(x):
        raise TypeError(f"{name} must be a floating-point tensor; got dtype {x.dtype}")


def _additive_mask(mask, name: str, dtype: torch.dtype, device: torch.device) -> Tensor:
    """A boolean (True = may NOT attend) or float mask as a float mask to add to the scores."""
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None; got {type(mask).__name__}")
    if mask.dtype == torch.bool:
        mask = mask.to(device)
        return torch.zeros(mask.shape, dtype=dtype, device=device).masked_fill_(mask, float("-inf"))
    if not torch.is_floating_point(mask):
        raise TypeError(
            f"{name} must be bool (True = may NOT attend) or floating point (added to the "
            f"scores); got dtype {mask.dtype}"
        )
    return mask.to(device=device, dtype=dtype)
