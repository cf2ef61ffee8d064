"""mha_lib.linear_attention.reference: the stored outputs of transformers' Qwen3_5ForCausalLM on
the tiny random model are what transformers gives (made again here), and what ours gives; the
weights go to transformers' layout and back (the zero-centred norms to rounding)."""

import importlib.util

import pytest
import torch

from mha_lib.linear_attention import HybridLM
from mha_lib.linear_attention.reference import (
    NEW_TOKENS,
    TINY,
    greedy_tokens,
    load_reference,
    make_reference,
    tiny_model,
    tiny_prompt,
)
from tests.linear_attention.linear_inputs import assert_near

HF = 2e-5  # relative to max |logit| (float32, transformers' order of operations)


def test_the_stored_reference_says_where_it_came_from():
    ref = load_reference()
    assert ref["made by"] == "python -m mha_lib.linear_attention.reference"
    assert {"torch", "transformers", "machine", "cpu capability"} <= set(ref)
    assert ref["config"] == TINY and ref["prompt"] == tiny_prompt()[0].tolist()
    assert len(ref["greedy"]) == NEW_TOKENS and ref["smallest greedy margin"] > 1e-3


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="no transformers")
def test_transformers_gives_the_stored_reference_again():
    fresh, stored = make_reference(), load_reference()
    assert fresh["greedy"] == stored["greedy"]
    assert_near(torch.tensor(fresh["logits"]), torch.tensor(stored["logits"]), HF)


def test_ours_gives_the_stored_reference():
    """What notebook 16 checks, without transformers."""
    ref, model = load_reference(), tiny_model()
    with torch.no_grad():
        logits = model(tiny_prompt())[0]  # (10, V)
    assert_near(logits, torch.tensor(ref["logits"]), HF)
    assert greedy_tokens(model) == ref["greedy"]


def test_the_weights_go_to_transformers_layout_and_back():
    model = tiny_model()
    again = HybridLM.from_hf_state(model.hf_state_dict(), model.config)
    for name, p in model.state_dict().items():  # the norms through w − 1 and back: to rounding
        assert_near(again.state_dict()[name], p, 0 if "norm" not in name else 1e-6)
    hf = model.hf_state_dict()
    assert hf["model.layers.3.self_attn.q_proj.weight"].shape == (2 * 4 * 8, 32)  # q and gate
    assert "model.layers.0.linear_attn.A_log" in hf and "lm_head.weight" in hf
