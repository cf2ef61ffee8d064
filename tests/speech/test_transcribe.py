"""mha_lib.speech.transcribe: greedy decoding equals transformers' `generate` with the same
suppressed tokens (tiny random models; the packaged Whisper base on the stored espeak-ng
utterances, tokens and token times alike), the Transcript's parts agree with each other, and
load_whisper refuses what is not a Whisper folder."""

import json

import numpy as np
import pytest
import torch

from mha_lib.speech.ctranslate2 import write_ctranslate2
from mha_lib.speech.transcribe import align, greedy_tokens, load_whisper, transcribe
from mha_lib.speech.utterances import UTTERANCES, utterance
from tests.speech.conftest import TINY, needs_whisper, tiny_pair


@pytest.mark.parametrize("seed", [0, 3, 4])
def test_greedy_tokens_equal_generate_with_the_suppressed_tokens(seed):
    from transformers import GenerationConfig
    from transformers.generation.utils import GenerationMixin

    hf, ours = tiny_pair(seed)
    g = torch.Generator().manual_seed(seed)
    mel = torch.randn(1, TINY["num_mel_bins"], 2 * TINY["max_source_positions"], generator=g)
    prefix = [1, 3, 4]
    gen = GenerationConfig(
        decoder_start_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        suppress_tokens=TINY["suppress_tokens"],
        begin_suppress_tokens=TINY["begin_suppress_tokens"],
        max_length=TINY["max_target_positions"],
        do_sample=False,
        num_beams=1,
    )
    with torch.no_grad():
        ref = GenerationMixin.generate(  # the plain greedy loop, not Whisper's long-form one
            hf, input_features=mel, decoder_input_ids=torch.tensor([prefix]), generation_config=gen
        )[0, len(prefix) :].tolist()
        new, cross = greedy_tokens(ours, prefix, ours.encode(mel), eot=2)
    assert new == ref
    assert (
        not set(new) & set(TINY["suppress_tokens"]) and new[0] not in TINY["begin_suppress_tokens"]
    )
    fed = len(prefix) + len(new) - 1  # the rows fed: the prefix, then each new token but the last
    assert [w.shape[2] for w in cross] == [fed] * TINY["decoder_layers"]
    with torch.no_grad():  # without the weights: torch's fused kernel, the same tokens
        fused = greedy_tokens(ours, prefix, ours.encode(mel), eot=2, cross_attentions=False)
    assert fused == (new, [])


# what Whisper base hears in each utterance (greedy, as transformers does): numbers as digits,
# and words misheard in all but three (notebook 17 shows them)
HEARD = {
    "animal": " The animal didn't cross the street because it was too tired.",
    "attention": " Attention, let every word look at every other word.",
    "cross": " and decoder listens to the encoder through cross-attention.",
    "seconds": " 30 seconds on sound become 1500 frames.",
    "heads": " each head in its own way learns to read the sentence.",
    "grows": " The cash rolls, one token every step.",
    "queries": " We are in our questions and key answer M.",
    "softmax": " cause become weight, rob my roll, through the softmax.",
    "documents": " Long-talk humans make their tension matrix large. Very large.",
    "whisper": " We've appeared as the sound. Very bright sound at words.",
    "story": " Small models, trimmed well, can follow a simple story.",
    "looks": " The model looks back, world by world, at what it wrote.",
}


@needs_whisper
@pytest.mark.parametrize("name", list(UTTERANCES))
def test_the_packaged_model_transcribes_each_utterance_as_transformers(
    name, whisper_base, whisper_base_hf
):
    from transformers import WhisperFeatureExtractor

    model, tok = whisper_base
    hf, _ = whisper_base_hf
    audio, record = utterance(name)
    inputs = WhisperFeatureExtractor()(
        audio, sampling_rate=16000, return_tensors="pt", return_attention_mask=True
    )
    with torch.no_grad():
        ref = hf.generate(
            inputs.input_features,
            attention_mask=inputs.attention_mask,
            language="en",
            task="transcribe",
            return_token_timestamps=True,
        )
    ours = transcribe(model, tok, audio)
    assert ours.tokens == ref["sequences"][0].tolist()
    np.testing.assert_allclose(ours.token_times, ref["token_timestamps"][0].numpy(), atol=1e-6)
    assert ours.text == HEARD[name], (ours.text, record["text"])
    assert [w for w, *_ in ours.words] == ours.text.split()
    starts = [s for _, s, _ in ours.words]
    assert starts == sorted(starts) and all(s <= e for _, s, e in ours.words)
    assert ours.words[-1][2] <= len(audio) / 16000 + 0.02  # no word after the audio ends
    assert tok.encode(ours.text) == ours.tokens  # Whisper writes the BPE's own tokens
    forced = align(model, tok, audio, ours.text)  # the heard text, aligned in one pass
    assert forced.tokens == ours.tokens and forced.words == ours.words


@needs_whisper
def test_the_transcript_keeps_the_text_tokens_cross_attention(whisper_base):
    model, tok = whisper_base
    audio, _ = utterance("cross")
    t = transcribe(model, tok, audio)
    assert tok.eot not in t.tokens and len(t.token_times) == len(t.tokens)
    assert [w.shape for w in t.cross_attentions] == [(1, 8, len(t.tokens) + 1, 1500)] * 6
    assert tok.decode(t.tokens) == t.text


def test_load_whisper_refuses_a_folder_that_is_not_whisper(tmp_path):
    with pytest.raises(
        FileNotFoundError, match=r"has no model.bin: expected a Whisper model folder"
    ):
        load_whisper(tmp_path)
    write_ctranslate2(
        tmp_path / "model.bin", {"x": np.zeros(2, np.float32)}, spec="TransformerSpec"
    )
    (tmp_path / "config.json").write_text(json.dumps({}))
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(
        ValueError, match=r"holds a 'TransformerSpec' model; expected 'WhisperSpec'"
    ):
        load_whisper(tmp_path)


@needs_whisper
def test_bad_audio_is_refused_before_the_model_runs(whisper_base):
    model, tok = whisper_base
    with pytest.raises(ValueError, match=r"audio is empty"):
        transcribe(model, tok, np.zeros(0, np.float32))
    with pytest.raises(ValueError, match=r"language = 'xx' is not one of Whisper's"):
        transcribe(model, tok, np.zeros(1600, np.float32), language="xx")
    with pytest.raises(ValueError, match=r"text = '  '; expected the words spoken"):
        align(model, tok, np.zeros(1600, np.float32), "  ")


@needs_whisper
def test_forced_alignment_times_words_near_espeaks_own_starts(whisper_base):
    """The reading of the rows matters: OpenAI's (the queries that predict each token) puts the
    words' starts within 0.2 s of espeak-ng's on every stored utterance; transformers' token
    times read as starts are late on every one."""
    model, tok = whisper_base
    for name in UTTERANCES:
        audio, record = utterance(name)
        a = align(model, tok, audio, record["text"])
        assert [w for w, *_ in a.words] == record["text"].split()
        ref = np.array([s for _, s in record["words"]])
        starts = np.array([s for _, s, _ in a.words])
        assert np.abs(starts - ref)[1:].mean() < 0.2, name
        firsts = [i for i, t in enumerate(a.tokens) if tok.token(t).startswith(" ")]
        late = np.array([a.token_times[i] for i in firsts]) - ref
        assert late[1:].mean() > 0.1, name
