"""Attention with a fixed-size state: linear attention, the delta rule, gated DeltaNet.

Serves notebook 16 (beyond softmax). Read first: `update_rules`, from `linear_attention` and
`linear_attention_recurrence` (the same outputs, once as masked QKᵀ without a softmax and once
as a state S_t = S_{t-1} + k_t v_tᵀ) to `gated_delta_step` (decay, erase, write, read: four
lines) and `gated_delta_rule`, its chunked form; then `gated_deltanet`, Qwen3.5's layer around
it, and `hybrid`, Qwen3.5's decoder around that. This package imports torch, so it is imported
explicitly (`from mha_lib.linear_attention import gated_delta_rule`); `import mha_lib` stays
numpy-only.

A module per idea:
- `update_rules`: how each rule writes and reads its state (B, h, d_k, d_v): linear
  attention (parallel and recurrent), the delta rule, the gated delta rule as a step, a
  step-by-step recurrence and the chunked form, with transformers' semantics (the 1/√d_k query
  scale; q and k normalised by the layer);
- `gated_deltanet`: `GatedDeltaNet`, equal to transformers' `Qwen3_5GatedDeltaNet`
  (`from_hf`): projections, short causal convolution, L2-normalised q and k, the decay
  g = −exp(A_log)·softplus(a + dt_bias), β = sigmoid(b), the gated RMSNorm; and
  `GatedDeltaNetCache`, its fixed-size memory for decoding;
- `hybrid`: `HybridLM`, Qwen3.5's text decoder, equal to transformers' `Qwen3_5ForCausalLM`
  (`from_hf`): notebook 12's `DecoderLM` whose "linear_attention" blocks mix tokens with a
  `GatedDeltaNet`, its one loop over the layers and its `generate` unchanged;
- `reference`: transformers' logits and greedy tokens on a tiny random Qwen3.5, stored
  (`python -m mha_lib.linear_attention.reference`), so that the notebook checks `HybridLM`
  against them without importing transformers;
- `recall`: notebook 11's associative-recall task at an equal state/cache budget, softmax
  attention against linear attention, DeltaNet, gated DeltaNet and a 3:1 hybrid, over seeds
  (`python -m mha_lib.linear_attention.recall`, cached in `mha_lib/data`).

Edges: `efficient` the recall sweep runs notebook 11's task, models and training loop
(`efficient.recall`).

Notation: q, k (B, h, N, d_k), v (B, h, N, d_v); g (B, h, N) log-decays ≤ 0; beta (B, h, N)
write strengths in [0, 1]; the state S (B, h, d_k, d_v), read as o_t = S_tᵀ q_t / √d_k.
"""

from .gated_deltanet import (
    GatedDeltaNet,
    GatedDeltaNetCache,
    GatedRMSNorm,
    initial_decays,
    l2_normalize,
)
from .hybrid import QWEN3_5_27B, HybridConfig, HybridLM, state_numbers
from .update_rules import (
    delta_rule,
    gated_delta_recurrence,
    gated_delta_rule,
    gated_delta_step,
    linear_attention,
    linear_attention_recurrence,
)

__all__ = [
    "QWEN3_5_27B",
    "GatedDeltaNet",
    "GatedDeltaNetCache",
    "GatedRMSNorm",
    "HybridConfig",
    "HybridLM",
    "delta_rule",
    "gated_delta_recurrence",
    "gated_delta_rule",
    "gated_delta_step",
    "initial_decays",
    "l2_normalize",
    "linear_attention",
    "linear_attention_recurrence",
    "state_numbers",
]
