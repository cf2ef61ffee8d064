"""A Transformer encoder block around our multi-head attention.

Derived in notebook 04, section 11 (where multi-head attention sits in a
Transformer), which writes the block out inline and checks it against this
class and `nn.TransformerEncoderLayer`; notebook 05 stacks six of them to run
a real pretrained encoder. Imports torch.

One block, for x (B, N, E):
- post-LayerNorm (the original Transformer, BERT; norm_first=False):
      x = norm1(x + dropout1(attn(x)))
      x = norm2(x + dropout2(ff(x)))
- pre-LayerNorm (GPT-2 and most recent models; norm_first=True):
      x = x + dropout1(attn(norm1(x)))
      x = x + dropout2(ff(norm2(x)))
with ff(x) = linear2(dropout(activation(linear1(x)))), linear1 (E -> F),
linear2 (F -> E), F = dim_feedforward.

The submodules have the names and shapes of `nn.TransformerEncoderLayer`
(self_attn, linear1, dropout, linear2, norm1, norm2, dropout1, dropout2), and
self_attn is a `mha_lib.pytorch.MultiHeadAttention`, whose parameters are
named as nn.MultiheadAttention's. So a `state_dict` loads both ways and
`from_torch` copies a torch layer exactly.

In training mode with dropout, the same seed gives the same outputs as
`nn.TransformerEncoderLayer`: every dropout draws the same random numbers for
the same positions. (torch's attention output is stored as (N, B, E) and a
dropout mask is drawn in memory order, so `_attention_dropout` lays ours out
the same way first, in training with dropout only: the fused fast path stays
copy-free.)
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from .pytorch import MultiHeadAttention

__all__ = ["TransformerBlock"]

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}  # F.gelu is the exact (erf) GELU


class TransformerBlock(nn.Module):
    """Multi-head self-attention and a feed-forward network, each with a residual and LayerNorm.

    Arguments as `nn.TransformerEncoderLayer(batch_first=True)`: d_model E,
    nhead h, dim_feedforward F, dropout, activation ("relu" or "gelu"),
    layer_norm_eps, norm_first, bias. `forward` returns (output (B, N, E),
    attention weights or None), unlike torch's layer, which returns the output
    alone: the weights are what notebooks 05 and 06 study.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}; got {activation!r}")
        factory = {"device": device, "dtype": dtype}
        self.self_attn = MultiHeadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=True, **factory
        )
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias, **factory)  # (E -> F)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias, **factory)  # (F -> E)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.activation_name = activation
        self.activation = ACTIVATIONS[activation]
        self.norm_first = bool(norm_first)

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> TransformerBlock:
        """A block with the configuration and a copy of the weights of a torch encoder layer."""
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise TypeError(
                f"layer must be a torch.nn.TransformerEncoderLayer; got {type(layer).__name__}"
            )
        if not layer.self_attn.batch_first:
            raise ValueError("layer has batch_first=False; expected batch_first=True")
        act = {F.relu: "relu", F.gelu: "gelu"}.get(layer.activation)
        if act is None:
            raise ValueError(f"layer's activation {layer.activation!r} is not relu or gelu")
        weight = layer.linear1.weight
        new = cls(
            layer.self_attn.embed_dim,
            layer.self_attn.num_heads,
            dim_feedforward=layer.linear1.out_features,
            dropout=layer.dropout.p,
            activation=act,
            layer_norm_eps=layer.norm1.eps,
            norm_first=layer.norm_first,
            bias=layer.linear1.bias is not None,
            device=weight.device,
            dtype=weight.dtype,
        )
        new.load_state_dict(layer.state_dict())  # same names and shapes: an exact copy
        return new.train(layer.training)

    def forward(
        self,
        x: Tensor,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        head_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, N, E) -> (B, N, E), and the per-head weights (B, h, N, N) if need_weights.

        Masks as in `MultiHeadAttention` (bool True = may NOT attend);
        head_mask (h,) or (B, h) scales each head's output (0 removes it).
        """
        kwargs = {
            "attn_mask": attn_mask,
            "key_padding_mask": key_padding_mask,
            "is_causal": is_causal,
            "need_weights": need_weights,
            "average_attn_weights": False,
            "head_mask": head_mask,
        }
        if self.norm_first:
            a, weights = self.self_attn(self.norm1(x), **kwargs)  # (B, N, E)
            x = x + self._attention_dropout(a)
            x = x + self.dropout2(self._ff(self.norm2(x)))
        else:
            a, weights = self.self_attn(x, **kwargs)  # (B, N, E)
            x = self.norm1(x + self._attention_dropout(a))
            x = self.norm2(x + self.dropout2(self._ff(x)))
        return x, weights  # (B, N, E), (B, h, N, N) or None

    def _attention_dropout(self, a: Tensor) -> Tensor:
        """dropout1(a) for a (B, N, E), dropping the positions torch's layer drops (same seed)."""
        if self.training and self.dropout1.p > 0:
            a = a.transpose(0, 1).contiguous().transpose(0, 1)  # (B, N, E), stored as (N, B, E)
        return self.dropout1(a)

    def _ff(self, x: Tensor) -> Tensor:
        """The position-wise feed-forward network: (B, N, E) -> (B, N, F) -> (B, N, E)."""
        return self.linear2(self.dropout(self.activation(self.linear1(x))))
