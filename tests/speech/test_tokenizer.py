"""mha_lib.speech.tokenizer: Whisper base's tokenizer.json, its missing first merge put back,
gives the ids and texts transformers' WhisperTokenizerFast gives on the repaired file, its
four-token prefix, and refuses unknown tokens and languages by name."""

import json

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
def test_encode_and_decode_as_transformers(tok, tmp_path):
    from transformers import WhisperTokenizerFast

    text = " The animal didn't cross the street because it was too tired."
    ids = tok.encode(text)
    as_packaged = WhisperTokenizerFast(tokenizer_file=str(tok.path))
    assert as_packaged.encode(text, add_special_tokens=False) != ids  # " the" in two pieces
    repaired = tmp_path / "tokenizer.json"
    repaired.write_text(json.dumps(json.loads(tok._tok.to_str())))
    ref = WhisperTokenizerFast(tokenizer_file=str(repaired))
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


@needs_whisper
def test_the_missing_first_merge_is_put_back(tok):
    assert tok.restored_merges == [("Ġ", "t")]
    assert [tok.token(i) for i in tok.encode(" learns to read the token")] == [
        " learns",
        " to",
        " read",
        " the",
        " token",
    ]


def test_a_missing_merge_that_cannot_be_told_is_refused(tmp_path):
    from mha_lib.speech.tokenizer import WhisperTokenizer

    byte_tokens = {chr(0x100 + i) if i < 33 else chr(i) for i in range(33, 127)}
    vocab = {t: i for i, t in enumerate(sorted(byte_tokens))}
    vocab = {
        **{f"b{i}": i for i in range(256 - len(vocab))},
        **{t: i + 256 - len(vocab) for t, i in vocab.items()},
    }
    vocab.update({"ab": 256, "abc": 257, "bc": 258})  # "abc" is "ab"+"c" or "a"+"bc"
    spec = json.loads(_minimal_tokenizer(vocab, ["a b", "b c"]))
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec))
    with pytest.raises(
        ValueError, match=r"no merge makes token 'abc' \(id 257\) and it splits into 2"
    ):
        WhisperTokenizer(path)


def _minimal_tokenizer(vocab, merges):
    return json.dumps(
        {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [],
            "normalizer": None,
            "pre_tokenizer": {
                "type": "ByteLevel",
                "add_prefix_space": False,
                "trim_offsets": True,
                "use_regex": True,
            },
            "post_processor": None,
            "decoder": {
                "type": "ByteLevel",
                "add_prefix_space": True,
                "trim_offsets": True,
                "use_regex": True,
            },
            "model": {
                "type": "BPE",
                "dropout": None,
                "unk_token": None,
                "continuing_subword_prefix": "",
                "end_of_word_suffix": "",
                "fuse_unk": False,
                "vocab": vocab,
                "merges": merges,
            },
        }
    )
