"""Tests of `mha_lib.toy.models` and `mha_lib.toy.training`: shapes, causality, ablation,
determinism of training, and short runs of the notebook's two trainings."""

from __future__ import annotations

import pytest
import torch

from mha_lib.toy.models import AttentionOnly, Committee
from mha_lib.toy.tasks import relations_batch


def committee_model(h: int = 4) -> Committee:
    torch.manual_seed(0)
    return Committee(num_symbols=9, num_labels=3, seq_len=6, embed_dim=16, num_heads=h).eval()


def test_committee_shapes():
    model = committee_model()
    symbols, labels, _ = relations_batch(torch.Generator().manual_seed(0), 5, 3, 9)
    logits, weights = model(symbols, labels, need_weights=True)
    assert logits.shape == (5, 6, 3, 9) and weights.shape == (5, 4, 6, 6)
    assert model(symbols, labels)[1] is None
    with pytest.raises(ValueError, match="seq_len"):
        model(symbols[:, :4], labels[:, :4])


def test_committee_head_mask_removes_exactly_one_head():
    # Ablating head 1 equals subtracting head 1's own contribution through its rows of W_O.
    model = committee_model()
    symbols, labels, _ = relations_batch(torch.Generator().manual_seed(1), 3, 3, 9)
    x = model.embed(symbols, labels)  # (B, N, E)
    attention = model.attention
    with torch.no_grad():
        full, _ = attention(x)
        keep = torch.tensor([1.0, 0.0, 1.0, 1.0])
        ablated, _ = attention(x, head_mask=keep)
        only, _ = attention(x, head_mask=1.0 - keep)  # head 1 alone (plus the bias)
        bias = attention.out_proj.bias
        torch.testing.assert_close(ablated, full - (only - bias), atol=1e-6, rtol=1e-5)
        # the weights of the other heads are unchanged by the mask
        _, w_full = attention(x, need_weights=True, average_attn_weights=False)
        _, w_abl = attention(x, need_weights=True, average_attn_weights=False, head_mask=keep)
        torch.testing.assert_close(w_full, w_abl)


def test_attention_only_is_causal_and_ablates_per_layer():
    torch.manual_seed(0)
    model = AttentionOnly(vocab_size=11, seq_len=8, embed_dim=16, num_heads=2).eval()
    tokens = torch.randint(0, 11, (3, 8), generator=torch.Generator().manual_seed(0))
    logits, weights = model(tokens, need_weights=True)
    assert logits.shape == (3, 8, 11) and len(weights) == 2
    assert all(w.shape == (3, 2, 8, 8) for w in weights)
    assert all(bool((torch.triu(w, diagonal=1) == 0).all()) for w in weights)
    changed = tokens.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % 11  # change the future only
    with torch.no_grad():
        torch.testing.assert_close(model(changed)[0][:, :5], logits[:, :5].detach())
        # removing layer 1's heads leaves layer 0's weights as they were
        mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
        _, masked = model(tokens, head_mask=mask, need_weights=True)
        torch.testing.assert_close(masked[0], weights[0])
    with pytest.raises(ValueError, match="num_layers, h"):
        model(tokens, head_mask=torch.ones(2))
