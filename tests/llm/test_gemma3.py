"""Gemma 3 270M (the real file, `load_gemma3`) against transformers' Gemma3ForCausalLM reading the
same file: weights, logits on every kind of text, a prompt longer than the sliding window
through both caches, and 24 greedy tokens. Its tokenizer's ids against transformers' and
llama.cpp's: tests/llm/test_sentencepiece.py.

transformers' model is loaded once for the module (35 to 50 s on a busy 2-core machine, 3.2 GB at
its peak, 1.1 GB kept); the module takes about 4 minutes there (the prompt past the window,
through both caches, about half of it).

Tolerance: both run in float32 from the same dequantized weights, with RoPE angles computed in
another order and other summation orders; the logits (of size up to about 30) differ by at most
2e-4 on these texts; the tests allow 2e-3, ten times that.
"""

import pytest
import torch

from mha_lib.llm.texts import kind_text
from mha_lib.nn.generation import Trace, generate
from mha_lib.testing import assert_close
from tests.llm.test_kquants import GEMMA_INSTALLED

pytestmark = pytest.mark.skipif(not GEMMA_INSTALLED, reason="the gemma3 packages are not installed")

LOGIT_ATOL = 2e-3  # see the module docstring
PROMPT = "The capital of France is"
EXPECTED = (
    " the capital of the country of France. It is the largest city in France and the "
    "second largest city in Europe. It is located in the middle of"
)


@pytest.fixture(scope="module")
def pair():
    """(ours, tokenizer, transformers' model), the two models read from the same file."""
    from mha_lib.llm.loader import load_gemma3
    from mha_lib.llm.model_files import find_model_file
    from tests.hf_models import hf_model_from_gguf

    ours, tok = load_gemma3()
    return ours, tok, hf_model_from_gguf(find_model_file("gemma3"))


def test_the_weights_equal_transformers_with_the_norms_folded(pair):
    """The matrices exactly; each norm's weight is transformers' w + 1 exactly (the file stores
    1 + w, transformers subtracts 1 at load and multiplies by 1 + w: the same float32 numbers)."""
    ours, _, ref = pair
    sd = ref.state_dict()
    params = dict(ours.named_parameters())
    for l in (0, 5, 17):
        for mine, theirs in (
            ("self_attn.q_proj", "self_attn.q_proj"),
            ("mlp.down_proj", "mlp.down_proj"),
        ):
            assert_close(
                params[f"layers.{l}.{mine}.weight"],
                sd[f"model.layers.{l}.{theirs}.weight"],
                rtol=0,
                atol=0,
            )
    for name, p in params.items():
        if "norm" in name:
            theirs = "model." + name.replace("norm1", "input_layernorm").replace(
                "norm2", "pre_feedforward_layernorm"
            ).replace("post_pre_feedforward_layernorm", "post_feedforward_layernorm").replace(
                "post_input_layernorm", "post_attention_layernorm"
            )
            assert_close(p, 1.0 + sd[theirs], rtol=0, atol=0)
    embed = ours.embed.dequantize()  # the quantized embedding, all its rows
    assert_close(embed, sd["model.embed_tokens.weight"], rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["documentation", "code", "licence"])
def test_the_logits_equal_transformers(pair, kind):
    ours, tok, ref = pair
    ids = torch.tensor([tok.encode(kind_text(kind)[:1200], add_bos=True)])
    with torch.no_grad():
        a, b = ours(ids), ref(ids).logits
    assert_close(a, b, rtol=0, atol=LOGIT_ATOL, msg=kind)
    assert torch.equal(a.argmax(-1), b.argmax(-1))


def test_a_prompt_past_the_window_through_both_caches(pair):
    """700 tokens (past the sliding window of 512) at once and through the caches (a prefill of
    600, a chunk of 90, ten single tokens): the sliding layers' rolling caches and the global
    layers' KV caches give transformers' logits."""
    ours, tok, ref = pair
    ids = torch.tensor([tok.encode(kind_text("documentation"), add_bos=True)[:700]])
    with torch.no_grad():
        expected = ref(ids).logits
        assert_close(ours(ids), expected, rtol=0, atol=LOGIT_ATOL)
        cache = ours.new_cache(1, 700)
        parts = [ours(ids[:, :600], cache), ours(ids[:, 600:690], cache)]
        parts += [ours(ids[:, t : t + 1], cache) for t in range(690, 700)]
    assert_close(torch.cat(parts, 1), expected, rtol=0, atol=LOGIT_ATOL)
    held = {type(c).__name__: c for c in cache.layers}
    assert len(held["SinkKVCache"]) == 512 and held["KVCache"].length == 700


def test_24_greedy_tokens_equal_transformers(pair):
    ours, tok, ref = pair
    ids = torch.tensor([tok.encode(PROMPT, add_bos=True)])
    trace = Trace()
    out = generate(ours, ids, 24, stop_ids=(), trace=trace)
    expected = ref.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=24,
        min_new_tokens=24,
        do_sample=False,
        pad_token_id=0,
    )
    assert out.tolist() == expected.tolist()
    assert tok.decode(out[0, ids.shape[1] :]).startswith(EXPECTED[:60])
    assert min(trace.logit_margins) > 1e-2  # no near-tie: the equality is not luck


def test_the_default_encoding_starts_at_bos_and_generates_as_transformers(pair):
    """The file asks for <bos> (`tokenizer.ggml.add_bos_token`), so `encode` adds it by default, as
    transformers' tokenizer does (tests/llm/test_sentencepiece.py compares the two); greedy
    generation from that default equals transformers' `generate`, and so does what notebook 15's
    "your own file" cell prints for this file. Without <bos> the model repeats ' The'."""
    from mha_lib.llm.model_files import find_model_file
    from tests.notebook_source import run_your_own_file_cell

    ours, tok, ref = pair
    ids = torch.tensor([tok.encode(PROMPT)])  # (1, 6)
    assert ids[0, 0] == tok.bos_id and ids[0, 1:].tolist() == tok.encode(PROMPT, add_bos=False)
    out = generate(ours, ids, 20)
    expected = ref.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=20, do_sample=False, pad_token_id=0
    )
    assert out.tolist() == expected.tolist()
    completion = tok.decode(out[0, ids.shape[1] :])
    assert completion.startswith(EXPECTED[:60])
    printed = run_your_own_file_cell(find_model_file("gemma3"))
    assert printed.strip().endswith(repr(completion)), printed
