"""A Llama-style decoder built from the series' parts: the model notebooks 12 to 14 run.

Derived in notebook 12. The architecture (Llama's, which SmolLM2 uses), for token ids (B, N):

    x = embed[ids]                                        (B, N, C)
    for each of the L layers (pre-norm, as notebook 04's `TransformerBlock(norm_first=True)`):
        x = x + attention(RMSNorm(x))                     GQA, RoPE, KV cache
        x = x + SwiGLU(RMSNorm(x))
    logits = RMSNorm(x) @ embedᵀ                          (B, N, V), the embedding tied

- `DecoderConfig`: the architecture's numbers (`mha_lib.models.config_from_gguf` reads them
  from a GGUF file's metadata, as `mha_lib.llm.GGUFFile` opens it);
- `RMSNorm`: x / sqrt(mean(x²) + eps) · weight, no mean subtracted, no bias (new here);
- `SwiGLU`: down(silu(gate(x)) ∘ up(x)), C -> F -> C (new here);
- `DecoderAttention`: notebook 08's `GroupedQueryAttention` (h query heads, h_kv key/value
  heads, its q_proj, k_proj, v_proj, out_proj, its forward) with notebook 10's `rope` as the
  rotation of its queries and keys;
- `DecoderBlock`, `DecoderLM`.
The weights come from a file through `mha_lib.llm.loader` (`load_decoder`, `load_smollm2`).

The seams, so that what builds on the model adds to it and never writes its loop again:
- `DecoderLM.hidden_states(ids, cache)` is the one loop over the layers, `logits(x)` the head on
  top of it, and `forward` the two;
- the attention inside every layer is a function attention(q, k, v) -> o (`mha_lib.nn.backends`),
  by name or given per call (one for every layer, or a list of one per layer): the weights
  notebook 13 studies are recorded by one such function (`model(ids, need_weights=True)` ->
  (logits, weights)); `head_mask` (L, h) scales each head's output (0 removes it);
- a cache is one entry per layer (`mha_lib.nn.kv_cache.DecoderCache`), each made by its layer's
  attention, and each entry decides which keys its queries see and where RoPE turns them: a
  `KVCache` rotates at the text positions, notebook 11's `SinkKVCache` at the places in the
  cache (StreamingLLM) or at the text positions (`model.new_sink_cache(..., rope_positions=)`);
- `DecoderAttention.qkv(x, positions)` gives one layer's rotated queries, keys and values, for
  the measures; `DecoderBlock(config, attention=...)` takes another attention module (notebook
  14's ranks give each block their share of the heads) or another token mixer;
- `DecoderConfig.layer_types` names each layer's mixer as transformers does and
  `DecoderLM.new_layer(l)` builds block l: a part that brings another mixer overrides it
  (notebook 16's `mha_lib.linear_attention.HybridLM`, whose gated-DeltaNet layers keep a state
  in their cache entry instead of keys and values; notebook 18's
  `mha_lib.sparse_attention.DeepseekV32LM`, whose "indexed_attention" layers are latent
  attention over the keys an indexer chooses).

Other architectures are options of the config, never another loop (notebook 15 derives each):
- `layer_types`, transformers' name of each layer's attention: "full_attention" (every earlier
  key) or "sliding_attention" (the last `sliding_window` keys, RoPE base `rope_local_base`,
  notebook 11's rolling cache without sinks): Gemma 3's five sliding layers to one global;
- `qk_norm` (Qwen3, Gemma 3), `rope_dim` (partial RoPE), `attention_bias` (biases on q, k and v:
  Qwen2), `query_scale` (the scores' scale instead of 1/√d: Gemma's query_pre_attn_scalar^-1/2,
  folded into the queries);
- `sandwich_norms`: four norms per block, one after each sublayer too (Gemma 2 and 3);
  `embedding_scale` (Gemma multiplies the embedding by √C); `mlp_activation` ("silu": SwiGLU;
  "gelu_tanh": Gemma's GELU-gated MLP);
- score modifications, each a keyword of the attention function (`mha_lib.nn.backends`):
  `attn_logit_softcap` (Gemma 2's c·tanh(s/c)), `attention_sinks` (gpt-oss's learned sink logit
  per head); and `final_logit_softcap` on the logits;
- `attn_output_gate`: each head's output times sigmoid(x W_G) before W_O (Qwen3.5's
  full-attention layers);
- a tied embedding may be a module with its own `logits(x)` (notebook 15's `QuantizedEmbedding`,
  rows dequantized on lookup): the head asks it for the logits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..positions import rope, rope_frequencies, rope_permutation
from ..pytorch import merge_heads
from .backends import AttentionFn, RecordWeights, resolve_attention
from .gqa import GroupedQueryAttention
from .kv_cache import DecoderCache, KVCache, SinkKVCache
from .masks import softcap_score_mod

__all__ = [
    "LAYER_TYPES",
    "MLP_ACTIVATIONS",
    "DecoderAttention",
    "DecoderBlock",
    "DecoderConfig",
    "DecoderLM",
    "RMSNorm",
    "SwiGLU",
]

MLP_ACTIVATIONS = {"silu": F.silu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


# ---------------------------------------------------------------------------- configuration

# the token mixers a layer may have, by transformers' names: softmax attention over every
# earlier token or over the last sliding_window (notebook 15), a fixed-size state (a
# gated-DeltaNet layer, `mha_lib.linear_attention`, notebook 16), or latent attention over the
# keys a learned indexer chooses (DeepSeek's sparse attention, `mha_lib.sparse_attention`,
# notebook 18)
LAYER_TYPES = ("full_attention", "sliding_attention", "linear_attention", "indexed_attention")


@dataclass(frozen=True)
class DecoderConfig:
    """The numbers of a Llama-style decoder (notebook 00's notation in the comments)."""

    vocab_size: int  # V
    hidden_size: int  # C
    num_layers: int  # L
    num_heads: int  # h
    num_kv_heads: int  # h_kv
    head_dim: int  # d = d_k = d_v
    intermediate_size: int  # F, the SwiGLU's width
    rope_base: float
    rms_norm_eps: float
    context_length: int
    tie_embeddings: bool = True
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    qk_norm: bool = False  # an RMSNorm over each head's q and k before RoPE (Qwen3, Gemma 3)
    rope_dim: int | None = None  # RoPE on the first rope_dim of each head's d (None: all d)
    layer_types: tuple[str, ...] | None = None  # per layer, of LAYER_TYPES (None: all full)
    sliding_window: int | None = None  # W, the keys a sliding layer's query sees (itself too)
    rope_local_base: float | None = None  # the sliding layers' RoPE base (None: rope_base)
    # (rope_dim/2,) the global layers' RoPE frequencies ω_i divided by these: Llama 3's scaling
    # (as llama.cpp stores it, rope_freqs.weight) or a linear one (every factor the same)
    rope_freq_factors: tuple[float, ...] | None = None
    attention_bias: bool = False  # biases on q, k and v (Qwen2)
    query_scale: float | None = None  # scores q·k times this (None: 1/√d; Gemma: 256^-1/2)
    sandwich_norms: bool = False  # a norm after each sublayer too: four per block (Gemma)
    embedding_scale: float | None = None  # the embedding times this (None: 1; Gemma: √C)
    mlp_activation: str = "silu"  # of MLP_ACTIVATIONS: SwiGLU, or Gemma's "gelu_tanh"
    attn_logit_softcap: float | None = None  # c: scores to c·tanh(s/c) (Gemma 2)
    final_logit_softcap: float | None = None  # c: logits to c·tanh(z/c) (Gemma 2)
    attention_sinks: bool = False  # a learned sink logit per head (gpt-oss)
    # each head's output times sigmoid(x W_G) before W_O (Qwen3.5's full-attention layers)
    attn_output_gate: bool = False

    def __post_init__(self) -> None:
        """Refuse a configuration the decoder cannot build, naming the field."""
        if self.layer_types is not None:
            types = tuple(self.layer_types)
            if len(types) != self.num_layers:
                raise ValueError(
                    f"layer_types has {len(types)} entries; expected one per layer "
                    f"(num_layers = {self.num_layers})"
                )
            for l, kind in enumerate(types):
                if kind not in LAYER_TYPES:
                    raise ValueError(
                        f"layer_types[{l}] = {kind!r} is not a layer this decoder builds; "
                        f"expected one of {LAYER_TYPES}"
                    )
            if "sliding_attention" in types and not (
                isinstance(self.sliding_window, int) and self.sliding_window >= 1
            ):
                raise ValueError(
                    f"sliding_window = {self.sliding_window!r}; a sliding_attention layer needs "
                    "a positive int"
                )
            object.__setattr__(self, "layer_types", types)  # a tuple, whatever was given
        if self.rope_freq_factors is not None:
            factors = tuple(float(f) for f in self.rope_freq_factors)
            if not all(math.isfinite(f) and f > 0 for f in factors):
                raise ValueError(f"rope_freq_factors = {factors}; expected positive numbers")
            object.__setattr__(self, "rope_freq_factors", factors)  # a tuple of floats
        if self.mlp_activation not in MLP_ACTIVATIONS:
            raise ValueError(
                f"mlp_activation = {self.mlp_activation!r}; expected one of "
                f"{sorted(MLP_ACTIVATIONS)}"
            )

    def layer_type(self, layer: int) -> str:
        """The token mixer of layer `layer` (of LAYER_TYPES): "full_attention" unless
        layer_types says another."""
        return "full_attention" if self.layer_types is None else self.layer_types[layer]

    @classmethod
    def of_layer(
        cls,
        hidden_size: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
        **fields,
    ) -> DecoderConfig:
        """The configuration of one layer on its own, for a `DecoderAttention` or a
        `DecoderBlock` built from its sizes (`DecoderAttention(hidden_size=64, num_heads=4)`).

        num_kv_heads defaults to num_heads (every head its own keys and values), head_dim to
        hidden_size / num_heads. The numbers a lone layer never reads get neutral values
        (vocab_size 1, num_layers 1, context_length 0), the others the usual defaults
        (intermediate_size 4·C, rope_base 10000, rms_norm_eps 1e-6); any field of the config
        may be given by name (`qk_norm=True`, `rope_base=500000.0`, ...).
        """
        for name, value in (("hidden_size", hidden_size), ("num_heads", num_heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} = {value!r}; expected a positive int")
        if head_dim is None:
            if hidden_size % num_heads:
                raise ValueError(
                    f"hidden_size = {hidden_size} is not a multiple of num_heads = {num_heads}; "
                    "give head_dim"
                )
            head_dim = hidden_size // num_heads
        sizes = dict(
            vocab_size=1,
            hidden_size=hidden_size,
            num_layers=1,
            num_heads=num_heads,
            num_kv_heads=num_heads if num_kv_heads is None else num_kv_heads,
            head_dim=head_dim,
            intermediate_size=4 * hidden_size,
            rope_base=10000.0,
            rms_norm_eps=1e-6,
            context_length=0,
        )
        return cls(**{**sizes, **fields})


# ---------------------------------------------------------------------------- the parts


def _layer_config(config: DecoderConfig | None, sizes: dict) -> DecoderConfig:
    """A layer's config: the one given, or `DecoderConfig.of_layer(**sizes)`; not both."""
    if config is None:
        return DecoderConfig.of_layer(**sizes)
    if sizes:
        raise TypeError(
            f"got a config and the sizes {sorted(sizes)}; give one: a DecoderConfig, or the "
            "sizes by name (hidden_size=, num_heads=, ...)"
        )
    if not isinstance(config, DecoderConfig):
        raise TypeError(f"config is a {type(config).__name__}; expected a DecoderConfig")
    return config


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) · weight over the last axis (Zhang and Sennrich, 2019)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))  # (C,)
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)  # (..., 1)
        return self.weight * (x * rms)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) ∘ up(x)): a gated feed-forward network (Shazeer, 2020), C -> F -> C.

    activation: "silu" (SwiGLU), or "gelu_tanh" (GELU with its tanh approximation: Gemma's
    GeGLU); `MLP_ACTIVATIONS` holds them."""

    def __init__(self, dim: int, hidden: int, activation: str = "silu") -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)  # (C -> F)
        self.up_proj = nn.Linear(dim, hidden, bias=False)  # (C -> F)
        self.down_proj = nn.Linear(hidden, dim, bias=False)  # (F -> C)
        if activation not in MLP_ACTIVATIONS:
            raise ValueError(
                f"activation = {activation!r}; expected one of {sorted(MLP_ACTIVATIONS)}"
            )
        self.activation = activation
        self.act = MLP_ACTIVATIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class DecoderAttention(GroupedQueryAttention):
    """Notebook 08's grouped-query attention with notebook 10's RoPE on the queries and keys.

    Built from a `DecoderConfig`, or on its own from its sizes by the config's names
    (`DecoderAttention(hidden_size=64, num_heads=4, num_kv_heads=2)`, `DecoderConfig.of_layer`).
    Its forward is `GroupedQueryAttention.forward`, causal: forward(x (B, n, C), positions (n,),
    cache=None, attention=None, head_mask=None) -> (B, n, C). x holds n new tokens at
    `positions`; a cache (`KVCache`, or `SinkKVCache` one token at a time) stores their keys and
    values and decides where each is rotated; without one, the n tokens attend causally among
    themselves. `rotate` is RoPE, with the model's base and layout; `qkv(x, positions)` gives
    the rotated q, k and v, for the measures.

    Three options of later models, from the config: `qk_norm` gives each head's queries and keys
    an RMSNorm of their own over d (`q_norm`, `k_norm`, weights shared by the heads) before
    RoPE, so a score's size no longer grows with the size of x (Qwen3, Gemma 3); `rope_dim`
    turns only the first rope_dim numbers of each head and passes the rest as they are
    (partial rotary: Qwen3.5's full-attention layers); `attn_output_gate` multiplies the heads'
    outputs, number by number, by sigmoid(x W_G) before W_O (`gate_proj`, W_G (C, h·d): Qwen3.5's
    full-attention layers, whose q_proj yields queries and gate together), so a head can send
    nothing when it has nothing to add.

    And, notebook 15's, per layer (`layer`, its index, picks its type in `layer_types`): a
    sliding layer's queries see their last `window` keys (the option `window` of the attention
    function, and a rolling `SinkKVCache` without sinks from `new_cache`) and its RoPE turns
    with `rope_local_base`, and a global layer's RoPE turns pair i at ω_i / factor_i with
    `rope_freq_factors` (Llama 3's scaling, or a linear one: Gemma 3 4B to 27B); `attention_bias`
    puts biases on q, k and v (not on W_O);
    `query_scale` is folded into the queries (q times query_scale·√d, so that q·k/√d is the
    score the model wants, for every attention function and every measure of q);
    `attn_logit_softcap` and `attention_sinks` are told to the attention function as a
    `score_mod` and as `sink_logits` (h,), a parameter (`attention_options`).
    """

    causal = True

    def __init__(
        self,
        config: DecoderConfig | None = None,
        rope_interleaved: bool = False,
        layer: int = 0,
        **sizes,
    ) -> None:
        config = _layer_config(config, sizes)
        C, h, h_kv = config.hidden_size, config.num_heads, config.num_kv_heads
        super().__init__(C, h, h_kv, bias=config.attention_bias, head_dim=config.head_dim)
        if config.attention_bias:  # Qwen2: biases on q, k and v, none on W_O
            self.out_proj = nn.Linear(h * config.head_dim, C, bias=False)
        self.layer_type = config.layer_type(layer)
        sliding = self.layer_type == "sliding_attention"
        self.window = config.sliding_window if sliding else None
        local = sliding and config.rope_local_base is not None
        self.rope_base = config.rope_local_base if local else config.rope_base
        self.rope_interleaved = rope_interleaved
        self.rope_dim = config.head_dim if config.rope_dim is None else config.rope_dim
        # the global layers' frequencies divided by these (None: RoPE's own base^(-2i/d))
        self.rope_freq_factors = None if sliding else config.rope_freq_factors
        if self.rope_freq_factors is not None and len(self.rope_freq_factors) != self.rope_dim // 2:
            raise ValueError(
                f"rope_freq_factors has {len(self.rope_freq_factors)} entries; expected one per "
                f"pair of the rotated dimensions, rope_dim / 2 = {self.rope_dim // 2}"
            )
        if config.qk_norm:
            self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps)  # (d,)
            self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps)  # (d,)
        else:
            self.q_norm = self.k_norm = None
        # q times query_scale·√d makes q·k/√d equal query_scale·q·k (1: nothing to do)
        d = config.head_dim
        self.query_factor = 1.0 if config.query_scale is None else config.query_scale * d**0.5
        cap = config.attn_logit_softcap
        self.score_mod = None if cap is None else softcap_score_mod(cap)
        self.sink_logits = nn.Parameter(torch.zeros(h)) if config.attention_sinks else None
        self.gate_proj = nn.Linear(C, h * d, bias=False) if config.attn_output_gate else None

    def output(self, heads: Tensor, x: Tensor) -> Tensor:
        """heads (B, h, n, d) -> (B, n, C): merged, gated by sigmoid(x W_G) when the config asks
        for the output gate, then W_O."""
        o = merge_heads(heads)  # (B, n, h·d)
        if self.gate_proj is not None:
            o = o * torch.sigmoid(self.gate_proj(x))  # (B, n, h·d), x the layer's input
        return self.out_proj(o)  # (B, n, C)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, n, C) -> q (B, h, n, d), k, v (B, h_kv, n, d), q and k normalised per head when
        the config asks for QK-norm, q scaled by the config's query_scale."""
        q, k, v = super().project(x)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)  # over each head's d
        if self.query_factor != 1.0:
            q = q * self.query_factor
        return q, k, v

    def attention_options(self, m: int) -> dict:
        """What this layer tells its attention function when its queries see m keys: the window
        (a sliding layer, when some query would see more than it), the soft-capping score_mod
        and the sink logits, each only if the layer has it."""
        options = {}
        if self.window is not None and m > self.window:
            options["window"] = self.window
        if self.score_mod is not None:
            options["score_mod"] = self.score_mod
        if self.sink_logits is not None:
            options["sink_logits"] = self.sink_logits
        return options

    def new_cache(self, batch_size: int, max_len: int) -> KVCache | SinkKVCache:
        """An empty cache for this layer: a KVCache of max_len tokens, or in a sliding layer
        notebook 11's rolling cache of its window, without sinks, keys rotated at their text
        positions (a window's worth of memory however long the text)."""
        if self.window is None:
            return super().new_cache(batch_size, max_len)
        return self.new_sink_cache(batch_size, self.window, 0, rope_positions="original")

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        """RoPE (notebook 10): x (B, heads, n, d) turned by its positions (n,); with a partial
        rotary, only its first rope_dim numbers; with frequency factors, pair i turns at
        ω_i / factor_i."""
        frequencies = None
        if self.rope_freq_factors is not None:
            factors = torch.tensor(self.rope_freq_factors, dtype=torch.float64, device=x.device)
            omega = rope_frequencies(self.rope_dim, self.rope_base).to(x.device)  # (rope_dim/2,)
            frequencies = omega / factors  # (rope_dim/2,)
        turn = dict(interleaved=self.rope_interleaved, frequencies=frequencies)
        if self.rope_dim == x.shape[-1]:
            return rope(x, positions, self.rope_base, **turn)
        turned = rope(x[..., : self.rope_dim], positions, self.rope_base, **turn)
        return torch.cat([turned, x[..., self.rope_dim :]], dim=-1)  # (B, heads, n, d)


class DecoderBlock(nn.Module):
    """One pre-norm layer: x + attention(norm1(x)), then + mlp(norm2(x)) (notebook 04's form).

    Built from a `DecoderConfig`, or on its own from its sizes by the config's names
    (`DecoderBlock(hidden_size=64, num_heads=4, intermediate_size=172)`, `DecoderConfig.of_layer`).
    With `sandwich_norms` (Gemma 2 and 3) each sublayer's output is normalised too before it is
    added: x + post_norm1(attention(norm1(x))), then + post_norm2(mlp(norm2(x))).
    attention: the layer's token mixer (default: a `DecoderAttention` of the config's sizes, of
    layer `layer`'s type); notebook 14's ranks give each block their own share of the heads,
    notebook 16's hybrid gives some blocks a gated-DeltaNet layer. The block calls it as
    mixer(x, positions=, cache=, attention=, head_mask=) and adds what it returns, (B, n, C).
    """

    def __init__(
        self,
        config: DecoderConfig | None = None,
        rope_interleaved: bool = False,
        attention: nn.Module | None = None,
        layer: int = 0,
        **sizes,
    ) -> None:
        super().__init__()
        config = _layer_config(config, sizes)
        C, eps = config.hidden_size, config.rms_norm_eps
        self.norm1 = RMSNorm(C, eps)
        self.self_attn = (
            DecoderAttention(config, rope_interleaved, layer) if attention is None else attention
        )
        self.norm2 = RMSNorm(C, eps)
        self.mlp = SwiGLU(C, config.intermediate_size, config.mlp_activation)
        self.post_norm1 = RMSNorm(C, eps) if config.sandwich_norms else None
        self.post_norm2 = RMSNorm(C, eps) if config.sandwich_norms else None

    def forward(
        self, x: Tensor, positions: Tensor, cache=None, attention=None, head_mask=None
    ) -> Tensor:
        a = self.self_attn(
            self.norm1(x),
            positions=positions,
            cache=cache,
            attention=attention,
            head_mask=head_mask,
        )
        x = x + (a if self.post_norm1 is None else self.post_norm1(a))
        m = self.mlp(self.norm2(x))  # (B, n, C)
        return x + (m if self.post_norm2 is None else self.post_norm2(m))  # (B, n, C)


# ---------------------------------------------------------------------------- the model


class DecoderLM(nn.Module):
    """A Llama-style causal language model: embedding, L pre-norm blocks, norm, tied head.

    hidden_states(input_ids (B, n), cache=None, *, attention=None, head_mask=None) -> (B, n, C):
    the residual stream after the last block, the model's one loop over its layers; logits(x)
    -> (B, n, V): the head on top of it, the final RMSNorm and the output projection.
    forward(input_ids, cache=None, *, attention=None, head_mask=None, need_weights=False,
    last_only=False) -> logits (B, n, V), or (logits, weights) with need_weights, weights a list
    of L tensors (B, h, n, m), recorded by the attention function (`backends.RecordWeights`).
    Without a cache, the n tokens are positions 0 .. n - 1; with one, they follow the tokens it
    has seen. attention: a name of `backends.attention_names()` or a function
    attention(q, k, v) -> o; by default the model's (`self.attention`, set at construction).
    head_mask (L, h): each head's output is scaled by its entry (0 ablates it). last_only: the
    logits of the last token only (B, 1, V). `new_cache` and `new_sink_cache` make a
    `DecoderCache` whose entries each layer's attention makes for itself.
    """

    def __init__(
        self,
        config: DecoderConfig,
        attention: str | AttentionFn = "sdpa",
        rope_interleaved: bool = False,
    ) -> None:
        super().__init__()
        self.config = config
        self.attention = resolve_attention(attention)
        self.rope_interleaved = rope_interleaved
        embed = torch.empty(config.vocab_size, config.hidden_size)  # (V, C)
        if embed.device.type != "meta":  # (on the meta device, initialising loads sympy)
            nn.init.normal_(embed)  # nn.Embedding's own initialisation
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size, _weight=embed)
        self.layers = nn.ModuleList(self.new_layer(l) for l in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        # tied: the output projection IS the embedding matrix (stored once)
        self.lm_head = (
            None
            if config.tie_embeddings
            else nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        )

    def new_layer(self, layer: int) -> nn.Module:
        """Block `layer`, of the kind the config's layer_types names: softmax attention here; a
        part with another token mixer overrides this (`mha_lib.linear_attention.HybridLM`,
        `mha_lib.sparse_attention.DeepseekV32LM`)."""
        kind = self.config.layer_type(layer)
        if kind not in ("full_attention", "sliding_attention"):
            raise ValueError(
                f"layer_types[{layer}] = {kind!r}: DecoderLM builds softmax-attention layers only "
                "(a 'linear_attention' layer needs mha_lib.linear_attention.HybridLM, an "
                "'indexed_attention' one mha_lib.sparse_attention.DeepseekV32LM)"
            )
        return DecoderBlock(self.config, self.rope_interleaved, layer=layer)

    @property
    def output_weight(self) -> Tensor:
        """(V, C): the embedding itself when tied."""
        return self.embed.weight if self.lm_head is None else self.lm_head.weight

    def set_rope_layout(self, interleaved: bool) -> None:
        """Move every layer's rows of W_Q and W_K to the other RoPE layout, in place.

        interleaved=True: each head's rows as the GGUF file stores them, pairs (2i, 2i + 1);
        False: transformers' half-split pairs (i, i + d/2). The logits do not change. With
        QK-norm, its weights over d move with the rows, and so do biases on q and k.
        """
        if not isinstance(interleaved, bool):
            raise TypeError(f"interleaved must be a bool; got {type(interleaved).__name__}")
        if interleaved == self.rope_interleaved:
            return
        if self.config.rope_dim not in (None, self.config.head_dim):
            raise ValueError(
                f"rope_dim = {self.config.rope_dim} < head_dim = {self.config.head_dim}: the "
                "layout switch moves whole heads' rows and supports RoPE on all of d only"
            )
        perm = rope_permutation(self.config.head_dim)  # half-split row perm[j] -> GGUF row j
        order = perm if interleaved else torch.argsort(perm)
        d = self.config.head_dim
        with torch.no_grad():
            for layer in self.layers:
                attn = layer.self_attn
                if not isinstance(attn, DecoderAttention):
                    continue  # a token mixer without RoPE
                for proj in (attn.q_proj, attn.k_proj):
                    w = proj.weight  # (heads·d, C)
                    w.copy_(w.view(-1, d, w.shape[1])[:, order].reshape(w.shape))
                    if proj.bias is not None:  # (heads·d,): Qwen2's biases move with the rows
                        proj.bias.copy_(proj.bias.view(-1, d)[:, order].reshape(-1))
                for norm in (attn.q_norm, attn.k_norm):
                    if norm is not None:
                        norm.weight.copy_(norm.weight[order])  # (d,)
                attn.rope_interleaved = interleaved
        self.rope_interleaved = interleaved

    def new_cache(self, batch_size: int, max_len: int) -> DecoderCache:
        """An empty cache per layer, for max_len tokens (prompt and generated): a KVCache, or a
        sliding layer's rolling cache of its window (`DecoderAttention.new_cache`)."""
        if isinstance(max_len, int) and max_len > self.config.context_length:
            raise ValueError(
                f"max_len = {max_len} is longer than the model's context of "
                f"{self.config.context_length} tokens"
            )
        return DecoderCache(
            [layer.self_attn.new_cache(batch_size, max_len) for layer in self.layers]
        )

    def new_sink_cache(
        self, batch_size: int, window: int, num_sinks: int = 4, rope_positions: str = "cache"
    ) -> DecoderCache:
        """A rolling SinkKVCache per layer: the first num_sinks tokens and the last window, the
        keys rotated at their places in the cache (StreamingLLM) or, with
        rope_positions="original", at their positions in the text."""
        return DecoderCache(
            [
                layer.self_attn.new_sink_cache(batch_size, window, num_sinks, rope_positions)
                for layer in self.layers
            ]
        )

    def hidden_states(
        self,
        input_ids: Tensor,
        cache: DecoderCache | None = None,
        *,
        attention: str | AttentionFn | list | tuple | None = None,
        head_mask: Tensor | None = None,
    ) -> Tensor:
        """input_ids (B, n) -> (B, n, C): the residual stream after the last block. attention:
        one function (or name) for every layer, or a list of one per layer (notebook 13's
        streaming attention turns each layer's sinks with that layer's RoPE)."""
        self._check(input_ids, cache, head_mask)
        n = input_ids.shape[1]
        start = 0 if cache is None else cache.length
        positions = torch.arange(start, start + n, device=input_ids.device)  # (n,)
        fns = self._layer_attentions(attention)  # one per layer
        x = self.embed(input_ids)  # (B, n, C)
        if self.config.embedding_scale is not None:
            x = x * self.config.embedding_scale  # Gemma: √C, as a float32 number
        for l, layer in enumerate(self.layers):
            layer_cache = None if cache is None else cache.layers[l]
            mask = None if head_mask is None else head_mask[l]
            x = layer(x, positions, layer_cache, fns[l], mask)
        return x  # (B, n, C)

    def _layer_attentions(self, attention) -> list[AttentionFn]:
        """The attention function of each layer: the model's, the one given, or the list given
        (one per layer, refused naming its length otherwise)."""
        L = len(self.layers)
        if isinstance(attention, list | tuple):
            if len(attention) != L:
                raise ValueError(
                    f"attention is a list of {len(attention)} functions; expected one per layer "
                    f"(num_layers = {L}) or a single function"
                )
            return [resolve_attention(a) for a in attention]
        return [self.attention if attention is None else resolve_attention(attention)] * L

    def logits(self, x: Tensor) -> Tensor:
        """The head: the residual stream x (B, n, C) -> logits (B, n, V). A tied embedding that
        computes its own head (`logits`, notebook 15's `QuantizedEmbedding`) is asked for it;
        a `final_logit_softcap` c caps them to c·tanh(z/c)."""
        x = self.norm(x)  # (B, n, C)
        if self.lm_head is None and hasattr(self.embed, "logits"):
            z = self.embed.logits(x)  # (B, n, V), its rows dequantized chunk by chunk
        else:
            z = F.linear(x, self.output_weight)  # (B, n, V)
        cap = self.config.final_logit_softcap
        return z if cap is None else torch.tanh(z / cap) * cap

    def forward(
        self,
        input_ids: Tensor,
        cache: DecoderCache | None = None,
        *,
        attention: str | AttentionFn | None = None,
        head_mask: Tensor | None = None,
        need_weights: bool = False,
        last_only: bool = False,
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        recorder = RecordWeights() if need_weights else None  # written out, the weights kept
        x = self.hidden_states(
            input_ids, cache, attention=recorder or attention, head_mask=head_mask
        )
        if last_only:
            x = x[:, -1:]  # (B, 1, C)
        logits = self.logits(x)  # (B, n, V)
        return (logits, recorder.weights) if need_weights else logits

    def _check(self, ids, cache, head_mask) -> None:
        """Raise, naming the argument, before anything (the cache above all) is changed."""
        cfg = self.config
        if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.is_floating_point():
            got = (
                f"a {ids.dtype} tensor of shape {tuple(ids.shape)}"
                if isinstance(ids, Tensor)
                else type(ids).__name__
            )
            raise TypeError(f"input_ids is {got}; expected an integer tensor (B, n)")
        if ids.dtype == torch.bool or ids.shape[1] < 1:
            raise ValueError(f"input_ids has shape {tuple(ids.shape)}; expected (B, n), n >= 1")
        bad = (ids < 0) | (ids >= cfg.vocab_size)
        if bad.any():
            where = tuple(int(i) for i in bad.nonzero()[0])
            raise ValueError(
                f"input_ids holds {int(ids[where])} at {where}; expected token ids in "
                f"[0, {cfg.vocab_size})"
            )
        n = ids.shape[1]
        if cache is None:
            if n > cfg.context_length:
                raise ValueError(
                    f"input_ids has {n} tokens; the model's context is {cfg.context_length}"
                )
        else:
            if not isinstance(cache, DecoderCache) or len(cache.layers) != cfg.num_layers:
                raise TypeError(
                    f"cache must be a DecoderCache of {cfg.num_layers} layers "
                    "(model.new_cache or model.new_sink_cache)"
                )
            end = cache.length + n
            if not cache.rolling and end > cfg.context_length:
                raise ValueError(
                    f"{cache.length} cached + {n} new tokens = {end} is longer than the "
                    f"model's context of {cfg.context_length} tokens"
                )
            cache.check(ids.shape[0], n)  # the batch, and the room in every layer's cache
        if head_mask is not None:
            shape = (cfg.num_layers, cfg.num_heads)
            if not isinstance(head_mask, Tensor) or tuple(head_mask.shape) != shape:
                got = tuple(head_mask.shape) if isinstance(head_mask, Tensor) else head_mask
                raise ValueError(f"head_mask has shape {got}; expected (L, h) = {shape}")
