"""Qwen3.5's text decoder: gated-DeltaNet layers and softmax layers in one stack, from the
series' blocks.

Derived in notebook 16 (section 7). Qwen3.5 (like Qwen3-Next) is notebook 12's decoder in
which three of every four layers mix tokens through a gated-DeltaNet state instead of softmax
attention (`layer_types`: "linear_attention" ×3, then "full_attention"). Nothing else about the
stack changes, so `HybridLM` is a `DecoderLM` that builds its "linear_attention" blocks with a
`GatedDeltaNet` as their token mixer (`new_layer`) and runs `DecoderLM.hidden_states`, the
series' one loop over the layers. Its cache (`new_cache`) is a `DecoderCache` whose entries each
layer makes: a `GatedDeltaNetCache` (the convolution's last inputs and the state, of a fixed
size) per linear layer, a `KVCache` per full layer; `mha_lib.nn.generate` decodes with it.

The full-attention layers are notebook 12's `DecoderAttention` with three options of the
config: QK-norm, partial RoPE (only the first rope_dim = head_dim / 4 numbers of each head
turn) and the sigmoid output gate. Qwen3.5's code differs in how it stores a few weights, which
`HybridLM.from_hf` translates:
- its RMSNorms (every one but the gated norm of the linear layers) are zero-centred: they
  multiply by 1 + w and store w (so that weight decay pulls them to 1); ours store 1 + w;
- its q_proj yields, for each head, d query rows followed by d gate rows; ours keeps them in
  q_proj and `gate_proj`.

`HybridConfig` is `DecoderConfig` with the linear layers' sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from ..models import config_fields_from_hf, state_from_hf, state_to_hf
from ..nn.decoder import DecoderBlock, DecoderConfig, DecoderLM
from .gated_deltanet import GatedDeltaNet

__all__ = ["QWEN3_5_27B", "HybridConfig", "HybridLM", "state_numbers"]


@dataclass(frozen=True)
class HybridConfig(DecoderConfig):
    """A `DecoderConfig` whose layer_types may say "linear_attention", and the sizes of those
    layers: h_k key heads and h_v value heads of d_k and d_v, a convolution of K taps, the
    chunk the gated delta rule runs in."""

    linear_num_key_heads: int = 16  # h_k
    linear_num_value_heads: int = 32  # h_v
    linear_key_head_dim: int = 128  # d_k
    linear_value_head_dim: int = 128  # d_v
    linear_conv_kernel_dim: int = 4  # K
    chunk_size: int = 64

    @classmethod
    def from_hf(cls, config) -> HybridConfig:
        """Every number from transformers' `Qwen3_5TextConfig` (dense MLP, default RoPE), or from
        a dict of its fields (a config.json's text_config), read by the architecture's file
        (`mha_lib.models.qwen3_5`)."""
        if isinstance(config, dict):
            config = {"model_type": "qwen3_5_text", **config}
        kind = config.get("model_type") if isinstance(config, dict) else None
        kind = kind or getattr(config, "model_type", type(config).__name__)
        if kind != "qwen3_5_text":
            raise ValueError(
                f"config is a {kind!r} configuration; expected transformers' Qwen3_5TextConfig "
                "('qwen3_5_text')"
            )
        _, fields = config_fields_from_hf(config)
        return cls(**fields)


class HybridLM(DecoderLM):
    """A decoder whose layers are softmax attention or gated DeltaNet, as layer_types says.

    Everything is `DecoderLM`'s (hidden_states, logits, forward, new_cache, and so
    `mha_lib.nn.generate`); only the blocks differ. A linear layer ignores the attention
    function (it has no softmax) and takes a head_mask row of its own h_v value heads; the
    weights `need_weights` returns are the full layers' only. A sink cache is refused: it
    drops tokens that a state has already summed in.
    """

    def __init__(self, config: HybridConfig, attention="sdpa") -> None:
        if not isinstance(config, HybridConfig):
            raise TypeError(f"config must be a HybridConfig; got {type(config).__name__}")
        super().__init__(config, attention)

    def new_layer(self, layer: int) -> nn.Module:
        """Block `layer`: a gated-DeltaNet mixer for "linear_attention", else DecoderLM's."""
        c = self.config
        if c.layer_type(layer) != "linear_attention":
            return super().new_layer(layer)
        mixer = GatedDeltaNet(
            c.hidden_size,
            c.linear_num_key_heads,
            c.linear_num_value_heads,
            c.linear_key_head_dim,
            c.linear_value_head_dim,
            c.linear_conv_kernel_dim,
            c.rms_norm_eps,
            c.chunk_size,
        )
        return DecoderBlock(c, attention=mixer)

    def new_sink_cache(self, *args, **kwargs):
        raise ValueError(
            "a hybrid model has no sink cache: its linear layers' states (layer_types "
            "'linear_attention') have already summed in the tokens a rolling cache would drop "
            "(use new_cache)"
        )

    @classmethod
    def from_hf(cls, model: nn.Module, chunk_size: int = 64) -> HybridLM:
        """Copy transformers' `Qwen3_5ForCausalLM` (dense MLP), in its dtype and device."""
        if type(model).__name__ != "Qwen3_5ForCausalLM":
            raise TypeError(
                f"model is a {type(model).__name__}; expected transformers' Qwen3_5ForCausalLM"
            )
        config = replace(HybridConfig.from_hf(model.config), chunk_size=chunk_size)
        return cls.from_hf_state(model.state_dict(), config)

    @classmethod
    def from_hf_state(cls, state: dict[str, Tensor], config: HybridConfig) -> HybridLM:
        """Our model from a state dict in transformers' names and layout (`from_hf` without
        transformers), in its dtype and device."""
        weight = state["model.embed_tokens.weight"]
        with torch.device("meta"):  # no initialisation: every weight is copied below
            ours = cls(config)
        ours = ours.to_empty(device=weight.device).to(weight.dtype)
        ours.load_state_dict(_weights_from_hf(state, config))
        return ours.eval()

    def hf_state_dict(self) -> dict[str, Tensor]:
        """Our weights in transformers' names and layout (what `from_hf_state` reads): the
        names and the zero-centred norms (w = weight − 1) by the architecture's table
        (`mha_lib.models.qwen3_5`), q_proj's rows interleaved with gate_proj's, head by head."""
        c, ours = self.config, self.state_dict()
        if not (c.qk_norm and c.attn_output_gate):
            raise ValueError(
                f"qk_norm = {c.qk_norm}, attn_output_gate = {c.attn_output_gate}: transformers' "
                "Qwen3.5 layout has both"
            )
        out = state_to_hf(c, ours, zero_centred=True)
        h, d, C = c.num_heads, c.head_dim, c.hidden_size
        for l in range(c.num_layers):
            if c.layer_type(l) == "linear_attention":
                continue
            mixer = f"layers.{l}.self_attn."
            q = ours[mixer + "q_proj.weight"].view(h, d, C)  # (h, d, C)
            gate = ours[mixer + "gate_proj.weight"].view(h, d, C)
            q_and_gate = torch.cat([q, gate], 1).reshape(2 * h * d, C)  # per head: d q, d gate
            out[f"model.layers.{l}.self_attn.q_proj.weight"] = q_and_gate
        return out


def _weights_from_hf(hf: dict[str, Tensor], config: HybridConfig) -> dict[str, Tensor]:
    """transformers' state dict -> ours: the names and the zero-centred norms as 1 + w by the
    architecture's table (`mha_lib.models.qwen3_5`), q_proj split into q_proj and gate_proj."""
    for l in range(config.num_layers):
        key = f"model.layers.{l}.mlp.gate_proj.weight"
        if key not in hf:
            raise ValueError(f"{key} is missing: expected a dense MLP (Qwen3.5's MoE is not)")
    out = state_from_hf(config, hf, zero_centred=True)
    h, d, C = config.num_heads, config.head_dim, config.hidden_size
    for l in range(config.num_layers):
        if config.layer_type(l) == "linear_attention":
            continue
        dst = f"layers.{l}.self_attn."
        q_and_gate = out[dst + "q_proj.weight"].view(h, 2 * d, C)  # per head: d q rows, d gate
        out[dst + "q_proj.weight"] = q_and_gate[:, :d].reshape(h * d, C)
        out[dst + "gate_proj.weight"] = q_and_gate[:, d:].reshape(h * d, C)
    return out


def state_numbers(config: HybridConfig) -> dict[str, int]:
    """Numbers one sequence keeps in ONE linear layer, whatever its length (`GatedDeltaNetCache`):
    "state", the h_v·d_k·d_v of the rule's state, and "conv", the convolution's last K − 1
    inputs of its conv_dim = 2·h_k·d_k + h_v·d_v channels."""
    h_k, h_v = config.linear_num_key_heads, config.linear_num_value_heads
    d_k, d_v = config.linear_key_head_dim, config.linear_value_head_dim
    conv_dim = 2 * h_k * d_k + h_v * d_v
    return {"state": h_v * d_k * d_v, "conv": conv_dim * (config.linear_conv_kernel_dim - 1)}


# Qwen3.5-27B's text decoder, as its config.json's text_config gives it (read by hand; nothing
# is downloaded): 64 layers, every fourth full attention (full_attention_interval 4), 24 query
# heads and 4 key/value heads of 256 in the full layers (a quarter of each rotated:
# partial_rotary_factor 0.25), 16 key heads and 48 value heads of 128 in the linear layers,
# a convolution of 4, max_position_embeddings 262144 (the model card's native context), and
# mamba_ssm_dtype float32: the linear layers' states are kept in float32.
QWEN3_5_27B = HybridConfig(
    vocab_size=248_320,
    hidden_size=5120,
    num_layers=64,
    num_heads=24,
    num_kv_heads=4,
    head_dim=256,
    intermediate_size=17_408,
    rope_base=10_000_000.0,
    rms_norm_eps=1e-6,
    context_length=262_144,
    tie_embeddings=False,
    qk_norm=True,
    rope_dim=64,
    attn_output_gate=True,
    layer_types=(("linear_attention",) * 3 + ("full_attention",)) * 16,
    linear_num_key_heads=16,
    linear_num_value_heads=48,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
)
