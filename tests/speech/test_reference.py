"""mha_lib.speech.reference: `hf_whisper` gives transformers' model holding our weights (the
same tensors, the same outputs as transformers' own model of those weights), a generation
config that decodes as `transcribe` does, and refuses weights that do not fill it exactly."""

import pytest
import torch

from mha_lib.speech import reference
from mha_lib.speech.reference import hf_whisper
from tests.speech.conftest import TINY, TINY_ALIGNMENT_HEADS, tiny_pair


class TinyTokenizer:
    """What hf_whisper reads of a tokenizer, for TINY's 37 tokens."""

    sot, eot = TINY["decoder_start_token_id"], TINY["eos_token_id"]

    def id(self, name):
        return {"<|notimestamps|>": 3, "<|en|>": 4, "<|transcribe|>": 5, "<|translate|>": 6}[name]


def test_it_holds_our_weights_and_computes_what_transformers_computes():
    hf_own, ours = tiny_pair(0)
    hf, gen = hf_whisper(ours, TinyTokenizer())
    assert hf.generation_config is gen and not hf.training
    shared = hf.model.decoder.layers[1].fc1.weight, ours.decoder.layers[1].mlp.fc1.weight
    assert shared[0].data_ptr() == shared[1].data_ptr()  # the same memory, not a copy
    assert hf.proj_out.weight is hf.model.decoder.embed_tokens.weight  # the tied head
    g = torch.Generator().manual_seed(0)
    mel = torch.randn(2, TINY["num_mel_bins"], 2 * TINY["max_source_positions"], generator=g)
    tokens = torch.tensor([[1, 4, 5, 3, 20], [1, 4, 5, 3, 11]])
    with torch.no_grad():
        a = hf(input_features=mel, decoder_input_ids=tokens, output_attentions=True)
        b = hf_own(input_features=mel, decoder_input_ids=tokens, output_attentions=True)
    assert torch.equal(a.logits, b.logits)
    assert all(torch.equal(x, y) for x, y in zip(a.cross_attentions, b.cross_attentions))
    assert gen.suppress_tokens == TINY["suppress_tokens"]
    assert gen.begin_suppress_tokens == TINY["begin_suppress_tokens"]
    assert gen.alignment_heads == [list(p) for p in TINY_ALIGNMENT_HEADS]
    assert (gen.decoder_start_token_id, gen.eos_token_id, gen.no_timestamps_token_id) == (1, 2, 3)
    assert gen.max_length == TINY["max_target_positions"] and gen.median_filter_width == 7


def test_sdpa_attention_gives_the_same_logits():
    _, ours = tiny_pair(3)
    eager, _ = hf_whisper(ours, TinyTokenizer())
    sdpa, _ = hf_whisper(ours, TinyTokenizer(), attn_implementation="sdpa")
    assert sdpa.config._attn_implementation == "sdpa"
    mel = torch.randn(1, TINY["num_mel_bins"], 2 * TINY["max_source_positions"])
    tokens = torch.tensor([[1, 4, 5, 3]])
    with torch.no_grad():
        a = eager(input_features=mel, decoder_input_ids=tokens).logits
        b = sdpa(input_features=mel, decoder_input_ids=tokens).logits
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_weights_that_do_not_fill_transformers_model_are_refused(monkeypatch):
    _, ours = tiny_pair(0)
    real = reference.state_to_hf

    def one_off(config, state):
        out = real(config, state)
        del out["model.decoder.layers.2.fc2.bias"]
        out["model.decoder.layers.2.extra"] = torch.zeros(1)
        return out

    monkeypatch.setattr(reference, "state_to_hf", one_off)
    with pytest.raises(
        ValueError,
        match=r"our weights do not fill transformers' WhisperForConditionalGeneration exactly: "
        r"1 missing key\(s\) \['model.decoder.layers.2.fc2.bias'\], 1 unexpected key\(s\) "
        r"\['model.decoder.layers.2.extra'\]",
    ):
        hf_whisper(ours, TinyTokenizer())
