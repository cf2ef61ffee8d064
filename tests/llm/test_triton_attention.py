"""mha_lib.llm.triton_attention: notebook 09's kernel as the decoder's attention equals SDPA with
the bottom-right causal mask, and the series' FlashAttentions (notebook 08's loop, notebook 09's
kernel) run inside the real model with its logits.

Tolerances: float32. On random inputs the kernel's output is within 1e-5 of SDPA's. Inside the real
model the logits with `flash` and `triton` differ from SDPA's by at most about 1e-4 (measured), and
the tests allow 1e-3, as tests/llm/test_loader.py does against transformers.
"""

import importlib.util
import subprocess
import sys

import pytest
import torch

from mha_lib.llm.triton_attention import triton_flash_attention
from mha_lib.nn.backends import ATTENTIONS, attention_names, resolve_attention
from mha_lib.testing import assert_close
from tests.nn.nn_inputs import ATTENTION_SHAPES, bottom_right_reference, grouped_qkv

HAS_TRITON = importlib.util.find_spec("triton") is not None
if HAS_TRITON:  # chosen before anything else imports triton (transformers can, in other tests):
    import mha_lib.efficient.triton_flash  # noqa: F401  it picks the interpreter on a CPU
SHAPES = ATTENTION_SHAPES


def qkv(n, m, seed=0):
    return grouped_qkv(n, m, dtype=torch.float32, seed=seed)  # float32, as the kernel runs


def test_the_decoder_finds_the_kernel_by_name_in_a_fresh_process():
    """No import-time registration: "triton" resolves in a process that never imported
    mha_lib.llm (the lookup imports the part's module, which imports triton only when called)."""
    code = (
        "import sys; from mha_lib.nn.backends import resolve_attention;"
        "assert 'mha_lib.llm' not in sys.modules;"
        "f = resolve_attention('triton'); print(f.__module__, f.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["mha_lib.llm.triton_attention", "triton_flash_attention"]
    assert resolve_attention("triton") is triton_flash_attention
    assert "triton" not in ATTENTIONS and "triton" in attention_names()


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (Linux x86_64 only)")
@pytest.mark.parametrize(("n", "m"), SHAPES)
def test_the_triton_kernel_equals_masked_sdpa(n, m):
    q, k, v = qkv(n, m)
    assert_close(
        triton_flash_attention(q, k, v), bottom_right_reference(q, k, v), rtol=0, atol=1e-5
    )


@pytest.mark.parametrize("name", ["flash", "triton"])
def test_the_series_attentions_inside_the_real_model(smollm2, name):
    if name == "triton" and not HAS_TRITON:
        pytest.skip("triton is not installed (Linux x86_64 only)")
    model, tok = smollm2
    ids = torch.tensor([tok.encode("Attention is all you")])  # short: the interpreter is slow
    with torch.no_grad():
        ref = model(ids)
        ours = model(ids, attention=name)
        if name == "flash":  # and a cached step (the interpreter is too slow for two runs)
            cache = model.new_cache(1, ids.shape[1] + 1)
            model(ids, cache, attention=name)
            step = model(torch.tensor([[ref[0, -1].argmax()]]), cache, attention=name)
            full = model(torch.cat([ids, ref[:, -1:].argmax(-1)], 1))
            assert_close(step[:, -1], full[:, -1], rtol=0, atol=1e-3)
    assert_close(ours, ref, rtol=0, atol=1e-3)
    assert torch.equal(ours.argmax(-1), ref.argmax(-1))
