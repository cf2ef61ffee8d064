"""Qwen3.5's text decoder: gated-DeltaNet layers and softmax layers in one stack, from the
series' blocks.

Derived in notebook 16 (section 7). Qwen3.5 (like Qwen3-Next) is notebook 12's decoder in
which three of every four layers mix tokens through a gated-DeltaNet state instead of softmax
attention (`layer_types`: "linear_attention" ×3, then "full_attention"). Nothing else about the
stack changes, so `HybridLM` is a `DecoderLM` that builds its "linear_attention" blocks with a
`GatedDeltaNet` as their token mixer (`new_layer`) and runs `DecoderLM.hidden_states`, the
series' one loop over the layers. Its cache (`new_cache`) is a `DecoderCache` whose entries each
layer makes: a `GatedDeltaNetCache` (the convolution's last inputs and the state, of a fixed
size) per linear layer, a `KVCache` per full layer; `mha_lib.llm.generate` decodes with it.

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

from ..nn.decoder import DecoderBlock, DecoderConfig, DecoderLM
from .gated_deltanet import GatedDeltaNet

__all__ = ["HybridConfig", "HybridLM"]


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
        """Every number from transformers' `Qwen3_5TextConfig` (dense MLP, default RoPE)."""
        if getattr(config, "model_type", None) != "qwen3_5_text":
            raise ValueError(
                f"config is a {getattr(config, 'model_type', type(config).__name__)!r} "
                "configuration; expected transformers' Qwen3_5TextConfig ('qwen3_5_text')"
            )
        rope = dict(config.rope_parameters or {})
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"rope_type = {rope['rope_type']!r}; expected 'default'")
        if config.hidden_act != "silu" or config.attention_bias:
            raise ValueError(
                f"hidden_act = {config.hidden_act!r}, attention_bias = {config.attention_bias}; "
                "expected 'silu' and no bias, as Qwen3.5 has"
            )
        d = config.head_dim
        rope_dim = int(d * rope.get("partial_rotary_factor", 1.0))
        eos = config.eos_token_id
        return cls(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            num_layers=config.num_hidden_layers,
            num_heads=config.num_attention_heads,
            num_kv_heads=config.num_key_value_heads,
            head_dim=d,
            intermediate_size=config.intermediate_size,
            rope_base=float(rope["rope_theta"]),
            rms_norm_eps=config.rms_norm_eps,
            context_length=config.max_position_embeddings,
            tie_embeddings=bool(config.tie_word_embeddings),
            bos_token_id=config.bos_token_id,
            eos_token_id=eos[0] if isinstance(eos, list | tuple) else eos,
            qk_norm=True,
            rope_dim=None if rope_dim == d else rope_dim,
            attn_output_gate=True,
            layer_types=tuple(config.layer_types),
            linear_num_key_heads=config.linear_num_key_heads,
            linear_num_value_heads=config.linear_num_value_heads,
            linear_key_head_dim=config.linear_key_head_dim,
            linear_value_head_dim=config.linear_value_head_dim,
            linear_conv_kernel_dim=config.linear_conv_kernel_dim,
        )


class HybridLM(DecoderLM):
    """A decoder whose layers are softmax attention or gated DeltaNet, as layer_types says.

    Everything is `DecoderLM`'s (hidden_states, logits, forward, new_cache, and so
    `mha_lib.llm.generate`); only the blocks differ. A linear layer ignores the attention
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
            "a hybrid model has no sink cache: its linear layers' states have already summed in "
            "the tokens a rolling cache would drop (use new_cache)"
        )

    @classmethod
    def from_hf(cls, model: nn.Module, chunk_size: int = 64) -> HybridLM:
        """Copy transformers' `Qwen3_5ForCausalLM` (dense MLP), in its dtype and device."""
        if type(model).__name__ != "Qwen3_5ForCausalLM":
            raise TypeError(
                f"model is a {type(model).__name__}; expected transformers' Qwen3_5ForCausalLM"
            )
        config = replace(HybridConfig.from_hf(model.config), chunk_size=chunk_size)
        weight = model.lm_head.weight
        with torch.device("meta"):  # no initialisation: every weight is copied below
            ours = cls(config)
        ours = ours.to_empty(device=weight.device).to(weight.dtype)
        ours.load_state_dict(_weights_from_hf(model.state_dict(), config))
        return ours.eval()


def _weights_from_hf(hf: dict[str, Tensor], config: HybridConfig) -> dict[str, Tensor]:
    """transformers' state dict -> ours: names, the zero-centred norms as 1 + w, q_proj split."""
    out = {"embed.weight": hf["model.embed_tokens.weight"]}
    out["norm.weight"] = 1 + hf["model.norm.weight"]
    if not config.tie_embeddings:
        out["lm_head.weight"] = hf["lm_head.weight"]
    h, d, C = config.num_heads, config.head_dim, config.hidden_size
    for l, kind in enumerate(config.layer_types):
        src, dst = f"model.layers.{l}.", f"layers.{l}."
        out[dst + "norm1.weight"] = 1 + hf[src + "input_layernorm.weight"]
        out[dst + "norm2.weight"] = 1 + hf[src + "post_attention_layernorm.weight"]
        for name in ("gate_proj", "up_proj", "down_proj"):
            key = f"{src}mlp.{name}.weight"
            if key not in hf:
                raise ValueError(f"{key} is missing: expected a dense MLP (Qwen3.5's MoE is not)")
            out[f"{dst}mlp.{name}.weight"] = hf[key]
        if kind == "linear_attention":
            prefix = src + "linear_attn."
            for key, value in hf.items():
                if key.startswith(prefix):
                    out[dst + "self_attn." + key[len(prefix) :]] = value  # the same names
            continue
        attn = src + "self_attn."
        q_and_gate = hf[attn + "q_proj.weight"].view(h, 2 * d, C)  # per head: d q rows, d gate
        out[dst + "self_attn.q_proj.weight"] = q_and_gate[:, :d].reshape(h * d, C)
        out[dst + "self_attn.gate_proj.weight"] = q_and_gate[:, d:].reshape(h * d, C)
        for ours, theirs in (("k_proj", "k_proj"), ("v_proj", "v_proj"), ("out_proj", "o_proj")):
            out[f"{dst}self_attn.{ours}.weight"] = hf[f"{attn}{theirs}.weight"]
        for name in ("q_norm", "k_norm"):
            out[f"{dst}self_attn.{name}.weight"] = 1 + hf[f"{attn}{name}.weight"]
    return out
