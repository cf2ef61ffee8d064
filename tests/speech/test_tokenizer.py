"""mha_lib.speech.tokenizer: Whisper base's tokenizer.json read by `tokenizers` gives the ids and
texts transformers' WhisperTokenizerFast gives, its four-token prefix, and refuses unknown
tokens and languages by name."""

import pytest

from tests.speech.conftest import needs_whisper


@pytest.fixture(scope="module")
def tok():
    from mha_lib.llm.model_files import find_model_file
    from mha_lib.speech.tokenizer import WhisperTokenizer

    return WhisperTokenizer(find_model_file("whisper").parent / "tokenizer.json")


@needs_whisper
def test_the_prefix_and_special_tokens(tok):
    assert tok.prefix("en") == [50258, 50259, 50359, 50363]
    # 50,364 tokens: the model scores 1,501 more, the timestamps <|0.00|> to <|30.00|>, which
    # this tokenizer.json does not name (transcription without timestamps never makes them)
    assert tok.eot == 50257 and len(tok) == 50364 == 51865 - 1501
    assert tok.prefix("fr")[1] == tok.id("<|fr|>")


@needs_whisper
def test_encode_and_decode_as_transformers(tok):
    from transformers import WhisperTokenizerFast

    ref = WhisperTokenizerFast(tokenizer_file=str(tok.path))
    text = " The animal didn't cross the street because it was too tired."
    ids = tok.encode(text)
    assert ids == ref.encode(text, add_special_tokens=False)
    assert tok.decode(tok.prefix() + ids + [tok.eot]) == text
    assert ref.decode(ids) == text
    assert [tok.token(i) for i in ids[:3]] == [" The", " animal", " didn"]


@needs_whisper
def test_unknown_tokens_and_languages_are_refused(tok):
    with pytest.raises(ValueError, match=r"'<\|xx\|>' is not a token of tokenizer.json"):
        tok.id("<|xx|>")
    with pytest.raises(ValueError, match=r"language = 'klingon' is not one of Whisper's"):
        tok.prefix("klingon")
