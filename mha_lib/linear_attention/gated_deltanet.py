"""The gated DeltaNet layer of Qwen3-Next and Qwen3.5, with its cache for decoding.

Derived in notebook 16, around `update_rules.gated_delta_rule`. Equal to transformers'
`Qwen3_5GatedDeltaNet` (`GatedDeltaNet.from_hf` copies its weights; the parameters have its names
and shapes). For an input x (B, N, C), with h_k query/key heads of d_k and h_v value heads of d_v
(h_k divides h_v; key head i serves value heads r·i .. r·i + r − 1, r = h_v / h_k):

1. projections: q, k, v from one matrix (`in_proj_qkv`, C -> 2·h_k·d_k + h_v·d_v), the output
   gate z (`in_proj_z`, C -> h_v·d_v), and two numbers per value head, b and a (`in_proj_b`,
   `in_proj_a`, C -> h_v);
2. a short causal convolution over the sequence, depthwise (each of q, k, v's channels its own
   K taps, K = 4 in Qwen3.5), then SiLU: each token mixes in its K − 1 predecessors;
3. q and k L2-normalised per head (`l2_normalize`), so that the delta rule's erase,
   S ← (I − β k kᵀ) S, stays a contraction;
4. the write strength β = sigmoid(b) and the log-decay g = −exp(A_log)·softplus(a + dt_bias),
   one of each per token and value head;
5. the gated delta rule (`gated_delta_rule`, chunked; one `gated_delta_step` when decoding);
6. each head's output RMS-normalised and gated by SiLU(z) (`GatedRMSNorm`), then the output
   projection `out_proj` (h_v·d_v -> C).

`GatedDeltaNetCache`, made by `layer.new_cache(batch_size)`, is what the layer keeps between
calls: the convolution's last K − 1 inputs and the state, (B, h_v, d_k, d_v), both of a fixed
size however long the sequence. A decoder holds one per linear layer.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_int
from .update_rules import gated_delta_rule, gated_delta_step

__all__ = ["GatedDeltaNet", "GatedDeltaNetCache", "GatedRMSNorm", "initial_decays", "l2_normalize"]


class GatedDeltaNet(nn.Module):
    """Qwen3.5's gated DeltaNet layer: projections, causal convolution, gated delta rule, gate.

    x (B, N, C) -> (B, N, C). With a `cache` (from `new_cache`) the layer continues from the
    tokens the cache has seen and updates it: a prompt of N tokens runs chunked, one token runs
    one `gated_delta_step`.

    A fresh layer starts as Mamba-2's decays do: A = exp(A_log) uniform in [1, 16] and
    dt = softplus(dt_bias) log-uniform in [0.001, 0.1], so that with a = 0 each head keeps a
    fraction exp(−A·dt) between exp(−1.6) ≈ 0.2 and exp(−0.001) ≈ 0.999 of its state per token.
    transformers' own initialisation differs and does not matter here (`from_hf` copies every
    weight).
    """

    def __init__(
        self,
        hidden_size: int,
        num_key_heads: int,
        num_value_heads: int,
        key_head_dim: int,
        value_head_dim: int,
        conv_kernel_size: int = 4,
        eps: float = 1e-6,
        chunk_size: int = 64,
    ) -> None:
        super().__init__()
        C = check_int(hidden_size, "hidden_size", 1)
        h_k = check_int(num_key_heads, "num_key_heads", 1)
        h_v = check_int(num_value_heads, "num_value_heads", 1)
        d_k = check_int(key_head_dim, "key_head_dim", 1)
        d_v = check_int(value_head_dim, "value_head_dim", 1)
        K = check_int(conv_kernel_size, "conv_kernel_size", 1)
        self.chunk_size = check_int(chunk_size, "chunk_size", 1)
        if h_v % h_k != 0:
            raise ValueError(
                f"num_value_heads = {h_v} is not a multiple of num_key_heads = {h_k}; expected "
                "each key head to serve the same number of value heads"
            )
        self.hidden_size, self.num_key_heads, self.num_value_heads = C, h_k, h_v
        self.key_head_dim, self.value_head_dim, self.conv_kernel_size = d_k, d_v, K
        self.conv_dim = 2 * h_k * d_k + h_v * d_v  # the channels of q, k and v together

        self.in_proj_qkv = nn.Linear(C, self.conv_dim, bias=False)
        self.in_proj_z = nn.Linear(C, h_v * d_v, bias=False)
        self.in_proj_b = nn.Linear(C, h_v, bias=False)
        self.in_proj_a = nn.Linear(C, h_v, bias=False)
        # depthwise (groups = channels) and unpadded: `forward` pads on the left, causally
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, K, groups=self.conv_dim, bias=False)
        A_log, dt_bias = initial_decays(h_v)  # (h_v,) each
        self.A_log, self.dt_bias = nn.Parameter(A_log), nn.Parameter(dt_bias)
        self.norm = GatedRMSNorm(d_v, eps)
        self.out_proj = nn.Linear(h_v * d_v, C, bias=False)

    @classmethod
    def from_hf(cls, layer: nn.Module, chunk_size: int = 64) -> GatedDeltaNet:
        """Copy transformers' `Qwen3_5GatedDeltaNet` (or Qwen3-Next's, laid out the same)."""
        if layer.activation not in ("silu", "swish"):
            raise ValueError(f"the layer's activation is {layer.activation!r}; expected 'silu'")
        ours = cls(
            layer.hidden_size,
            layer.num_k_heads,
            layer.num_v_heads,
            layer.head_k_dim,
            layer.head_v_dim,
            layer.conv_kernel_size,
            layer.layer_norm_epsilon,
            chunk_size,
        )
        weight = layer.in_proj_qkv.weight
        ours.to(dtype=weight.dtype, device=weight.device)
        ours.load_state_dict(layer.state_dict())  # the same names and shapes, every one
        return ours

    def new_cache(self, batch_size: int, max_len: int | None = None) -> GatedDeltaNetCache:
        """An empty cache for `batch_size` sequences: zeros, in the layer's dtype and device.
        max_len is taken, as a decoder passes it to every layer, and not needed: the cache's size
        does not depend on the length."""
        B = check_int(batch_size, "batch_size", 1)
        w = self.in_proj_qkv.weight
        h_v, d_k, d_v = self.num_value_heads, self.key_head_dim, self.value_head_dim
        return GatedDeltaNetCache(
            conv_state=w.new_zeros(B, self.conv_dim, self.conv_kernel_size - 1),
            state=w.new_zeros(B, h_v, d_k, d_v),
        )

    def forward(
        self,
        x: Tensor,
        cache: GatedDeltaNetCache | None = None,
        *,
        positions: Tensor | None = None,
        attention=None,
        head_mask: Tensor | None = None,
    ) -> Tensor:
        """x (B, N, C) -> (B, N, C), continuing from the cache's tokens when one is given.

        The keywords are those a decoder block passes to its mixer (`mha_lib.nn.DecoderBlock`):
        positions and attention are not needed (the order of the tokens is the order of the
        writes; there is no softmax to swap), head_mask (h_v,) scales each value head's output
        before the norm's gate and W_O (0 removes it), as it scales an attention head's.
        """
        self._check_input(x, cache)
        if head_mask is not None and tuple(head_mask.shape) != (self.num_value_heads,):
            raise ValueError(
                f"head_mask has shape {tuple(head_mask.shape)}; expected (h_v,) = "
                f"({self.num_value_heads},), one entry per value head of this layer"
            )
        B, N, _ = x.shape
        h_k, h_v = self.num_key_heads, self.num_value_heads
        d_k, d_v, K = self.key_head_dim, self.value_head_dim, self.conv_kernel_size

        # 1-2. project q, k, v together and convolve them causally over the sequence
        qkv = self.in_proj_qkv(x).transpose(1, 2)  # (B, conv_dim, N): channels first
        past = qkv.new_zeros(B, self.conv_dim, K - 1) if cache is None else cache.conv_state
        qkv = torch.cat((past, qkv), dim=-1)  # (B, conv_dim, K − 1 + N): the K − 1 before
        if cache is not None:
            cache.conv_state = qkv[..., qkv.shape[-1] - (K - 1) :].clone()  # (B, conv_dim, K − 1)
        qkv = F.silu(self.conv1d(qkv)).transpose(1, 2)  # (B, N, conv_dim)
        q, k, v = qkv.split([h_k * d_k, h_k * d_k, h_v * d_v], dim=-1)

        # 3. heads; q and k unit vectors; each key head serves r = h_v / h_k value heads
        q = l2_normalize(q.reshape(B, N, h_k, d_k).transpose(1, 2))  # (B, h_k, N, d_k)
        k = l2_normalize(k.reshape(B, N, h_k, d_k).transpose(1, 2))  # (B, h_k, N, d_k)
        v = v.reshape(B, N, h_v, d_v).transpose(1, 2)  # (B, h_v, N, d_v)
        if h_v != h_k:
            q = q.repeat_interleave(h_v // h_k, dim=1)  # (B, h_v, N, d_k)
            k = k.repeat_interleave(h_v // h_k, dim=1)  # (B, h_v, N, d_k)

        # 4. how strongly each token writes, and how much of the state it lets decay
        beta = torch.sigmoid(self.in_proj_b(x)).transpose(1, 2)  # (B, h_v, N), in (0, 1)
        g = -self.A_log.exp() * F.softplus(self.in_proj_a(x) + self.dt_bias)  # (B, N, h_v) ≤ 0
        g = g.transpose(1, 2)  # (B, h_v, N)

        # 5. the gated delta rule: one step when decoding, chunked otherwise
        if cache is not None and N == 1:
            o, state = gated_delta_step(
                cache.state, q[:, :, 0], k[:, :, 0], v[:, :, 0], g[:, :, 0], beta[:, :, 0]
            )
            o = o[:, :, None]  # (B, h_v, 1, d_v)
        else:
            initial = None if cache is None else cache.state
            o, state = gated_delta_rule(q, k, v, g, beta, self.chunk_size, initial)
        if cache is not None:
            cache.state, cache.length = state, cache.length + N

        # 6. each head's output normalised and gated by z, then projected back to C
        z = self.in_proj_z(x).reshape(B, N, h_v, d_v)  # (B, N, h_v, d_v)
        o = self.norm(o.transpose(1, 2), z)  # (B, N, h_v, d_v)
        if head_mask is not None:
            o = o * head_mask.view(1, 1, h_v, 1).to(o.dtype)  # 0 removes a head
        return self.out_proj(o.reshape(B, N, h_v * d_v))  # (B, N, C)

    def _check_input(self, x, cache) -> None:
        if not isinstance(x, Tensor):
            raise TypeError(f"x must be a torch.Tensor; got {type(x).__name__}")
        if x.dim() != 3 or x.shape[-1] != self.hidden_size:
            raise ValueError(
                f"x has shape {tuple(x.shape)}; expected (B, N, C) with C = {self.hidden_size}"
            )
        if cache is None:
            return
        if not isinstance(cache, GatedDeltaNetCache):
            raise TypeError(f"cache must be a GatedDeltaNetCache; got {type(cache).__name__}")
        needs = (x.shape[0], self.num_value_heads, self.key_head_dim, self.value_head_dim)
        if tuple(cache.state.shape) != needs:
            raise ValueError(
                f"cache.state has shape {tuple(cache.state.shape)}; expected (B, h_v, d_k, d_v) "
                f"= {needs}, with B = {x.shape[0]} from x (make it with layer.new_cache(B))"
            )


class GatedDeltaNetCache:
    """One gated-DeltaNet layer's memory of the tokens it has seen, of a fixed size.

    conv_state (B, conv_dim, K − 1): the convolution's last K − 1 inputs (q, k, v's channels
    before the convolution); state (B, h_v, d_k, d_v): the gated delta rule's state; length:
    the tokens seen so far. Softmax attention's cache grows by 2·h_kv·d numbers per token; this
    one stays at B·(conv_dim·(K − 1) + h_v·d_k·d_v) numbers.
    """

    rolling = False  # it forgets by decaying, never by dropping tokens: any n at a time

    def __init__(self, conv_state: Tensor, state: Tensor) -> None:
        self.conv_state = conv_state  # (B, conv_dim, K − 1)
        self.state = state  # (B, h_v, d_k, d_v)
        self.length = 0

    @property
    def seen(self) -> int:
        """Tokens seen so far, the position of the next one (what a decoder's cache asks)."""
        return self.length

    @property
    def nbytes(self) -> int:
        """Bytes held by the two tensors (the same after 1 token or a million)."""
        return sum(t.numel() * t.element_size() for t in (self.conv_state, self.state))

    def check(self, batch_size: int, n: int) -> None:
        """Raise ValueError unless a step for batch_size sequences fits: any n tokens do."""
        if batch_size != self.state.shape[0]:
            raise ValueError(
                f"input_ids has batch {batch_size}; the cache was made for {self.state.shape[0]}"
            )

    def truncate(self, length: int) -> None:
        """Only to the tokens seen: a state cannot forget its last tokens (they are summed in)."""
        check_int(length, "length", 0)
        if length != self.length:
            raise ValueError(
                f"a gated-DeltaNet cache holds a state of {self.length} tokens and cannot go back "
                f"to {length}: its tokens are summed into the state (decode again from a copy)"
            )


class GatedRMSNorm(nn.Module):
    """RMSNorm over each head's d_v outputs, then a SiLU gate: w ∘ o / rms(o) ∘ silu(z).

    o, z (..., d_v) -> (..., d_v); one weight w (d_v,) shared by every head.
    """

    def __init__(self, d_v: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(check_int(d_v, "d_v", 1)))
        self.eps = eps

    def forward(self, o: Tensor, z: Tensor) -> Tensor:
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + self.eps)  # (..., d_v)
        return self.weight * o * F.silu(z)  # (..., d_v)


def initial_decays(num_heads: int) -> tuple[Tensor, Tensor]:
    """A fresh layer's A_log and dt_bias (num_heads,), as Mamba-2 starts its decays: A = exp(A_log)
    uniform in [1, 16], dt = softplus(dt_bias) log-uniform in [0.001, 0.1] (drawn from torch's
    global generator, A first)."""
    h = check_int(num_heads, "num_heads", 1)
    A = torch.empty(h).uniform_(1, 16)  # (h,)
    dt = torch.empty(h).uniform_(math.log(1e-3), math.log(1e-1)).exp()  # (h,)
    return A.log(), dt + torch.log(-torch.expm1(-dt))  # softplus(dt_bias) = dt


def l2_normalize(x: Tensor, eps: float = 1e-6) -> Tensor:
    """x / sqrt(‖x‖² + eps) along the last axis: unit vectors (eps as in Qwen3.5's code)."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)
