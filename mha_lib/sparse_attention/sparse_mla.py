"""DeepSeek-V3.2's attention and decoder: notebook 11's MLA masked by the lightning indexer's
choice, on the series' decoder.

Derived in notebook 18. `SparseMLA` is notebook 11's `MultiHeadLatentAttention` with a
`LightningIndexer` beside it: for n new tokens x (B, n, C)

    c_Q = RMSNorm(x W_DQ)                           (B, n, r_q)   MLA's query latent
    I = indexer(x, c_Q)                             (B, n, m)     index scores, -inf after t
    allowed = causal_topk(I, index_topk)            (B, n, m)     True = may attend
    out = MLA(x, mask=allowed)                      (B, n, C)

MLA itself is unchanged (its forward's `mask` is and-ed with its causal mask); only which keys
each query's softmax runs over changes. Its cache, `SparseMLACache`, is MLA's latent cache
(c and k_R per token) with the indexer's keys beside it (`IndexerCache`).

`DeepseekV32LM` is notebook 12's `DecoderLM` whose blocks mix tokens with a `SparseMLA` (its
`new_layer`), so its one loop over the layers, its head, `new_cache` and `mha_lib.nn.generate`
are the decoder's; `from_hf` copies transformers' `DeepseekV32ForCausalLM` (dense MLP layers;
a mixture of experts is refused by name) through the architecture's file
(`mha_lib.models.deepseek_v32`: its options and each weight's names), and
`topk_indices(ids, layer)` gives the keys each query of a layer chose.

`SparseMLAConfig` is `DecoderConfig` with MLA's and the indexer's sizes. Everything is
computed as transformers computes it (tests/sparse_attention/test_sparse_mla.py), but its
RMSNorms compute in float32 whatever the dtype and ours in the input's, so a float64 model
agrees with it at float32's precision.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .._checks import check_int
from ..efficient.mla import MLACache, MultiHeadLatentAttention
from ..models import config_fields_from_hf
from ..models.deepseek_v32 import ARCHITECTURE
from ..nn.backends import RecordWeights
from ..nn.decoder import DecoderBlock, DecoderConfig, DecoderLM
from .indexer import IndexerCache, LightningIndexer, causal_topk

__all__ = ["DeepseekV32LM", "SparseMLA", "SparseMLACache", "SparseMLAConfig"]


class SparseMLACache(MLACache):
    """One sparse-MLA layer's memory of the tokens seen: MLA's c (B, T, r) and k_R (B, T, d_R),
    and the indexer's keys (B, T, D) in `index`: r + d_R + D numbers per token and sequence.

    What a decoder's cache asks of its entries (`mha_lib.nn.kv_cache.DecoderCache`): `seen`,
    `check`, `rolling`, `nbytes`, `truncate`. batch_size and max_len are what `check` holds a
    step to (the tensors grow as tokens come)."""

    rolling = False  # every token seen stays: a query may choose any earlier key

    def __init__(self, batch_size: int, max_len: int) -> None:
        super().__init__()
        self.batch_size = check_int(batch_size, "batch_size", 1)
        self.max_len = check_int(max_len, "max_len", 1)
        self.index = IndexerCache()

    @property
    def seen(self) -> int:
        """Tokens seen so far, the position of the next one."""
        return len(self)

    @property
    def nbytes(self) -> int:
        """Bytes held by MLA's latents and the indexer's keys: B · T · (r + d_R + D) numbers."""
        return super().nbytes + self.index.nbytes

    def check(self, batch_size: int, n: int) -> None:
        """Raise ValueError unless a step of n new tokens for batch_size sequences fits."""
        if batch_size != self.batch_size:
            raise ValueError(
                f"input_ids has batch {batch_size}; the cache was made for {self.batch_size}"
            )
        end = len(self) + n
        if end > self.max_len:
            raise ValueError(
                f"{len(self)} cached + {n} new tokens = {end} do not fit the cache's "
                f"max_len = {self.max_len}"
            )

    def truncate(self, length: int) -> None:
        """Forget every token after the first `length`, in MLA's cache and the indexer's."""
        check_int(length, "length", 0)
        if length > len(self):
            raise ValueError(f"length = {length}; the cache holds {len(self)} tokens")
        if self.c is not None:
            self.c = self.c[:, :length].clone()
            self.k_rope = self.k_rope[:, :length].clone()
        self.index.truncate(length)


class SparseMLA(MultiHeadLatentAttention):
    """Multi-head latent attention whose queries see only the keys the indexer chooses.

    MLA's arguments (a low-rank query, q_lora_rank r_q, is required: the indexer reads its
    latent), then index_n_heads H, index_head_dim D, index_topk k. Parameters: MLA's, and the
    `indexer`'s. Its forward is what a decoder block calls, forward(x (B, n, C), positions=None,
    cache=None, attention=None, head_mask=None) -> (B, n, C); `choose(x, positions, cache)`
    gives the chosen keys (indices (B, n, k'), allowed (B, n, m)) without attending.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        kv_lora_rank: int,
        qk_nope_head_dim: int,
        qk_rope_head_dim: int,
        v_head_dim: int,
        q_lora_rank: int,
        index_n_heads: int,
        index_head_dim: int,
        index_topk: int,
        rope_base: float = 10000.0,
        rope_scaling: dict | None = None,
    ) -> None:
        if q_lora_rank is None:
            raise ValueError(
                "q_lora_rank = None: the indexer reads MLA's query latent, so sparse MLA needs "
                "the low-rank query path (DeepSeek-V3.2 has q_lora_rank = 1536)"
            )
        super().__init__(
            d_model,
            num_heads,
            kv_lora_rank,
            qk_nope_head_dim,
            qk_rope_head_dim,
            v_head_dim,
            q_lora_rank=q_lora_rank,
            rope_base=rope_base,
            rope_interleaved=True,  # MLA's pairs (2i, 2i + 1); the indexer's are half-split
            rope_scaling=rope_scaling,
        )
        self.index_topk = check_int(index_topk, "index_topk", 1)
        self.indexer = LightningIndexer(
            d_model,
            q_lora_rank,
            index_n_heads,
            index_head_dim,
            qk_rope_head_dim,
            rope_base,
            rope_scaling,
        )

    def new_cache(self, batch_size: int, max_len: int) -> SparseMLACache:
        """An empty cache for max_len tokens of batch_size sequences (what `DecoderLM.new_cache`
        asks each layer's attention for)."""
        return SparseMLACache(batch_size, max_len)

    def choose(
        self, x: Tensor, positions: Tensor | None = None, cache: SparseMLACache | None = None
    ) -> tuple[Tensor, Tensor]:
        """The keys each of the n queries of x (B, n, C) chooses: (indices (B, n, k'), -1 where
        fewer keys are visible; allowed (B, n, m), True = may attend). With a cache, the n new
        index keys are appended to it (and m counts the cached tokens)."""
        if cache is not None and not isinstance(cache, SparseMLACache):
            raise TypeError(f"cache must be a SparseMLACache; got {type(cache).__name__}")
        # (B, n, r_q): c_Q, MLA's query latent (its `queries` computes it again: one small
        # product twice, so that MLA's forward stays notebook 11's)
        q_latent = self.q_a_norm(self.q_a_proj(x))
        index_cache = None if cache is None else cache.index
        scores = self.indexer(x, q_latent, positions, index_cache)  # (B, n, m)
        return causal_topk(scores, self.index_topk)

    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        cache: SparseMLACache | None = None,
        attention=None,
        head_mask: Tensor | None = None,
        absorb: bool = False,
    ) -> Tensor:
        """x (B, n, C) -> (B, n, C): the indexer chooses, then MLA attends over the chosen keys.

        positions (n,), default len(cache) .. len(cache) + n - 1. attention: the decoder's
        attention function, not used (MLA scores with its own SDPA); a `RecordWeights` is
        refused, as is a head_mask (neither is supported by this layer yet). absorb: MLA's
        weight absorption (the same result)."""
        if isinstance(attention, RecordWeights):
            raise ValueError(
                "need_weights: a sparse-MLA layer does not record its attention weights (use "
                "topk_indices for the keys each query chose)"
            )
        if head_mask is not None:
            raise ValueError("head_mask: a sparse-MLA layer does not scale its heads")
        if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != self.d_model:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x has shape {got}; expected (B, n, C) with C = {self.d_model}")
        n = x.shape[1]
        if positions is None:
            start = 0 if cache is None else len(cache)
            positions = torch.arange(start, start + n, device=x.device)  # (n,)
        _, allowed = self.choose(x, positions, cache)  # (B, n, m)
        return super().forward(x, positions, cache=cache, absorb=absorb, mask=allowed[:, None])


# ---------------------------------------------------------------------------- the decoder


@dataclass(frozen=True)
class SparseMLAConfig(DecoderConfig):
    """A `DecoderConfig` whose layers attend with sparse MLA, and the sizes of that attention
    (defaults: DeepSeek-V3.2's). layer_types: every layer "indexed_attention" (transformers'
    name; the default), which the decoder's other consumers refuse by name; num_kv_heads is
    num_heads and head_dim d_N + d_R (MLA has no grouped key/value heads); rope_scaling: None or
    a YaRN dictionary (`mha_lib.efficient.mla.yarn`), turning MLA's and the indexer's RoPE
    alike."""

    kv_lora_rank: int = 512  # r, the latent each token caches
    q_lora_rank: int = 1536  # r_q, the query's latent, which the indexer reads
    qk_nope_head_dim: int = 128  # d_N
    qk_rope_head_dim: int = 64  # d_R
    v_head_dim: int = 128  # d_V
    index_n_heads: int = 64  # H
    index_head_dim: int = 128  # D
    index_topk: int = 2048  # k, the keys each query may attend to
    rope_scaling: dict | None = None

    def __post_init__(self) -> None:
        if self.layer_types is None:  # every layer sparse MLA: transformers' "indexed_attention"
            object.__setattr__(self, "layer_types", ("indexed_attention",) * self.num_layers)
        super().__post_init__()
        others = [l for l, kind in enumerate(self.layer_types) if kind != "indexed_attention"]
        if others:
            raise ValueError(
                f"layer_types[{others[0]}] = {self.layer_types[others[0]]!r}; a SparseMLAConfig's "
                "layers are all 'indexed_attention' (sparse MLA)"
            )
        minimums = dict(
            kv_lora_rank=1,
            q_lora_rank=1,
            qk_nope_head_dim=0,
            qk_rope_head_dim=0,
            v_head_dim=1,
            index_n_heads=1,
            index_head_dim=1,
            index_topk=1,
        )
        for name, minimum in minimums.items():
            check_int(getattr(self, name), name, minimum)
        if self.index_head_dim < self.qk_rope_head_dim:
            raise ValueError(
                f"index_head_dim = {self.index_head_dim} < qk_rope_head_dim = "
                f"{self.qk_rope_head_dim}: the indexer turns the first d_R numbers of its heads"
            )

    @classmethod
    def from_hf(cls, config) -> SparseMLAConfig:
        """Every number from transformers' `DeepseekV32Config`, read by the architecture's file
        (`mha_lib.models.deepseek_v32`): a configuration with mixture-of-experts layers, biases,
        or a RoPE other than the default or YaRN is refused by name."""
        kind = getattr(config, "model_type", type(config).__name__)
        if kind != "deepseek_v32":
            raise ValueError(
                f"config is a {kind!r} configuration; expected transformers' DeepseekV32Config "
                "('deepseek_v32')"
            )
        _, fields = config_fields_from_hf(config)
        # MLA turns its own RoPE (YaRN inside MultiHeadLatentAttention, from rope_scaling): the
        # decoder's frequency factors and folded query scale are not used
        fields.update(
            rope_freq_factors=None,
            query_scale=None,
            num_kv_heads=config.num_attention_heads,
            head_dim=config.qk_nope_head_dim + config.qk_rope_head_dim,
        )
        return cls(**fields)


class DeepseekV32LM(DecoderLM):
    """DeepSeek-V3.2's decoder with dense MLP layers: notebook 12's `DecoderLM` whose token
    mixer in every block is a `SparseMLA`.

    Everything is `DecoderLM`'s (hidden_states, logits, forward, new_cache, and so
    `mha_lib.nn.generate`); only the blocks differ. need_weights, a head_mask and a sink cache
    are refused by name. `topk_indices(ids, layer)` gives the keys each query chose.
    """

    def __init__(self, config: SparseMLAConfig, attention="sdpa") -> None:
        if not isinstance(config, SparseMLAConfig):
            raise TypeError(f"config must be a SparseMLAConfig; got {type(config).__name__}")
        super().__init__(config, attention)

    def new_layer(self, layer: int) -> nn.Module:
        """Block `layer`: RMSNorm, sparse MLA, RMSNorm, SwiGLU."""
        c = self.config
        mixer = SparseMLA(
            c.hidden_size,
            c.num_heads,
            c.kv_lora_rank,
            c.qk_nope_head_dim,
            c.qk_rope_head_dim,
            c.v_head_dim,
            c.q_lora_rank,
            c.index_n_heads,
            c.index_head_dim,
            c.index_topk,
            rope_base=c.rope_base,
            rope_scaling=c.rope_scaling,
        )
        return DecoderBlock(c, attention=mixer)

    def new_sink_cache(self, *args, **kwargs):
        raise ValueError(
            "a sparse-MLA model has no sink cache: its indexer may choose any earlier token, "
            "which a rolling cache would have dropped (use new_cache)"
        )

    @torch.no_grad()
    def topk_indices(self, input_ids: Tensor, layer: int) -> Tensor:
        """The keys each query of layer `layer` chose on input_ids (B, N), positions 0 .. N - 1:
        (B, N, k') int64, k' = min(index_topk, N), best first, -1 where a query sees fewer than
        k' keys (query t sees t + 1). The whole model runs (its one loop over the layers); a
        hook keeps layer `layer`'s index scores."""
        check_int(layer, "layer", 0)
        if layer >= len(self.layers):
            raise ValueError(
                f"layer = {layer}; expected 0 <= layer < num_layers = {len(self.layers)}"
            )
        attn = self.layers[layer].self_attn
        seen = []
        hook = attn.indexer.register_forward_hook(lambda mod, args, out: seen.append(out))
        try:
            self.hidden_states(input_ids)  # the model's one loop; the hook keeps the scores
        finally:
            hook.remove()
        return causal_topk(seen[0], attn.index_topk)[0]

    @classmethod
    def from_hf(cls, model: nn.Module) -> DeepseekV32LM:
        """Copy transformers' `DeepseekV32ForCausalLM` (dense MLP layers), in its dtype and
        device."""
        if type(model).__name__ != "DeepseekV32ForCausalLM":
            raise TypeError(
                f"model is a {type(model).__name__}; expected transformers' DeepseekV32ForCausalLM"
            )
        return cls.from_hf_state(model.state_dict(), SparseMLAConfig.from_hf(model.config))

    @classmethod
    def from_hf_state(cls, state: dict[str, Tensor], config: SparseMLAConfig) -> DeepseekV32LM:
        """Our model from a state dict in transformers' names (`from_hf` without transformers),
        in its dtype and device. A missing weight is refused by its name."""
        weight = state["model.embed_tokens.weight"]
        ours = cls(config).to(device=weight.device, dtype=weight.dtype)
        ours.load_state_dict(weights_from_hf(state, config))
        return ours.eval()


def weights_from_hf(state: dict[str, Tensor], config: SparseMLAConfig) -> dict[str, Tensor]:
    """transformers' state dict -> ours, by the names of the architecture's file
    (`mha_lib.models.deepseek_v32`: the model's rows, and each layer's norms, MLP, MLA and
    indexer rows)."""
    pairs = [(w.ours, w.hf) for w in ARCHITECTURE.model_weights if w.applies(config)]
    for l in range(config.num_layers):
        for w in ARCHITECTURE.layer_weights + ARCHITECTURE.attention_weights:
            pairs.append((f"layers.{l}.{w.ours}", f"model.layers.{l}.{w.hf}"))
    for l in range(config.num_layers):
        key = f"model.layers.{l}.mlp.gate_proj.weight"
        if key not in state:
            raise ValueError(f"{key} is missing: expected a dense MLP (DeepSeek's MoE is not)")
    out = {}
    for ours, hf in pairs:
        if hf not in state:
            raise ValueError(f"{hf} is missing from the state dict (our {ours})")
        out[ours] = state[hf]
    return out
