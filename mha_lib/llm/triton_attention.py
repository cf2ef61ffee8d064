"""Notebook 09's Triton kernel as the attention of notebook 12's model.

Derived in notebook 12 §5. The decoder (`mha_lib.nn.decoder`) plugs in any function
attention(q, k, v) -> o whose n queries are the last n of the m keys (`mha_lib.nn.backends`);
notebook 09's forward kernel (`mha_lib.efficient.triton_flash.triton_attention`) is one, with
the causal mask aligned to the bottom right and the key/value heads repeated for their groups.
It imports triton when first called (on a CPU, Triton's interpreter runs it, slowly: use short
prompts); `mha_lib.llm` registers it under the name "triton". The kernel has no sliding window,
score_mod nor sink logits (notebook 15's options): a layer that needs one is refused by name.
"""

from __future__ import annotations

from torch import Tensor

from ..nn.gqa import repeat_kv

__all__ = ["triton_flash_attention"]


def triton_flash_attention(q: Tensor, k: Tensor, v: Tensor, **options) -> Tensor:
    """Notebook 09's Triton FlashAttention kernel (the interpreter on a CPU)."""
    if options:
        raise ValueError(
            f"notebook 09's kernel is causal attention only; this layer asks for "
            f"{sorted(options)}: use attention='sdpa' or 'eager'"
        )
    from ..efficient.triton_flash import triton_attention  # imports triton

    g = q.shape[1] // k.shape[1]
    k, v = repeat_kv(k, g), repeat_kv(v, g)  # (B, h, m, d)
    o, _ = triton_attention(q.contiguous(), k.contiguous(), v.contiguous(), causal="bottom_right")
    return o  # (B, h, n, d)
