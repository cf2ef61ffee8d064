"""mha_lib.llm.sentencepiece: llama.cpp's SentencePiece rule on small vocabularies made here
(the best-scored pair first, ties to the left, special tokens cut out longest first, byte
fallback, words merged alone); on Gemma 3's file (when installed): the special ids, ids equal to
transformers' tokenizer read from the same file on every kind of text, and where the two part,
the ids llama.cpp itself gives; decoding round-trips."""

import hashlib
import importlib.util
import json
import random
from pathlib import Path

import pytest

from mha_lib.llm.model_files import MODELS, find_model_file
from mha_lib.llm.sentencepiece import SPACE, SentencePieceTokenizer

GEMMA_INSTALLED = all(importlib.util.find_spec(p) for p in MODELS["gemma3"].packages)
needs_gemma = pytest.mark.skipif(
    not GEMMA_INSTALLED, reason="the gemma3 packages are not installed"
)

BYTES = [f"<0x{b:02X}>" for b in range(256)]


def tiny(tokens: dict[str, float], user_defined=(), control=("<bos>", "<eos>"), add_bos=False):
    """A tokenizer of the given (token: score) pieces, plus control tokens, user-defined ones and
    the 256 byte tokens; add_bos as a file's `tokenizer.ggml.add_bos_token`."""
    names = [*control, *user_defined, *BYTES, *tokens]
    scores = [0.0] * (len(control) + len(user_defined) + 256) + list(tokens.values())
    kinds = [3] * len(control) + [4] * len(user_defined) + [6] * 256 + [1] * len(tokens)
    return SentencePieceTokenizer(names, scores, kinds, bos_id=0, eos_id=1, add_bos=add_bos)


def test_the_best_scored_pair_is_merged_first():
    tok = tiny({"a": -1, "b": -1, "c": -1, "ab": -5, "bc": -2, "abc": -3})
    # bc (-2) is merged before ab (-5); then a + bc is the token abc
    assert tok.pieces(tok.encode("abc")) == ["abc"]
    tok = tiny({"a": -1, "b": -1, "c": -1, "ab": -5, "bc": -2})
    assert tok.pieces(tok.encode("abc")) == ["a", "bc"]
    tok = tiny({"a": -1, "b": -1, "c": -1, "ab": -2, "bc": -5})
    assert tok.pieces(tok.encode("abc")) == ["ab", "c"]


def test_a_tie_goes_to_the_leftmost_pair():
    tok = tiny({"a": -1, "aa": -2})
    assert tok.pieces(tok.encode("aaa")) == ["aa", "a"]
    assert tok.pieces(tok.encode("aaaaa")) == ["aa", "aa", "a"]


def test_spaces_become_the_block_and_unknown_characters_their_bytes():
    tok = tiny({SPACE: -1, "h": -1, "i": -1, f"{SPACE}h": -2, f"{SPACE}hi": -3})
    assert tok.pieces(tok.encode(" hi")) == [f"{SPACE}hi"]
    assert tok.pieces(tok.encode("hé")) == ["h", "<0xC3>", "<0xA9>"]  # é is not a token
    assert tok.decode(tok.encode(" hé hi")) == " hé hi"


def test_special_tokens_are_cut_out_first_longest_first():
    tok = tiny({"<": -1, "b": -1, "o": -1, "s": -1, ">": -1, "x": -1}, user_defined=["\n", "\n\n"])
    ids = tok.encode("x<bos>\n\n\nx")
    assert tok.pieces(ids) == ["x", "<bos>", "\n\n", "\n", "x"]
    assert tok.pieces(tok.encode("<bos>", parse_special=False)) == ["<", "b", "o", "s", ">"]
    assert tok.pieces(tok.encode("\n\n", parse_special=False)) == ["\n\n"]  # user-defined: always
    assert tok.encode("x", add_bos=True) == [0, tok.token_id("x")]
    assert tok.decode(ids, skip_special_tokens=True) == "x\n\n\nx"
    assert tok.decode(ids) == "x<bos>\n\n\nx"


def test_encode_adds_bos_as_the_file_says_unless_told():
    asks, silent = tiny({"x": -1}, add_bos=True), tiny({"x": -1})
    x = asks.token_id("x")
    assert asks.encode("x") == [0, x] and asks.encode("x", add_bos=False) == [x]
    assert silent.encode("x") == [x] and silent.encode("x", add_bos=True) == [0, x]
    nameless = SentencePieceTokenizer(["x"], [0.0], [1], add_bos=True)  # no BOS id in the file
    with pytest.raises(ValueError, match=r"add_bos=True, but the file names no BOS token"):
        nameless.encode("x")


def test_words_merged_alone_give_the_ids_of_the_whole_text():
    """The split before each '▁' changes nothing: no token spans it, except after a character
    that some token holds before a '▁' (here '>', as Gemma's '>▁</')."""
    rng = random.Random(0)
    pieces = ["a", "b", ">", "<", "/", SPACE, SPACE + "a", "ab", SPACE + "ab", f">{SPACE}</", "</"]
    tok = tiny({p: -float(i) for i, p in enumerate(pieces)})
    assert tok._glue == {">"}
    for _ in range(300):
        text = "".join(rng.choice("ab<>/ ") for _ in range(rng.randint(1, 12)))
        assert tok._stretch(text) == list(tok._merge(text.replace(" ", SPACE))), text


def test_bad_input_is_named():
    tok = tiny({"a": -1})
    with pytest.raises(TypeError, match="text must be a str; got bytes"):
        tok.encode(b"a")
    with pytest.raises(ValueError, match=r"ids holds 999; expected token ids in \[0, 259\)"):
        tok.decode([999])
    with pytest.raises(ValueError, match=r"lengths 2, 1 and 2; expected one score and one type"):
        SentencePieceTokenizer(["a", "b"], [0.0], [1, 1])
    with pytest.raises(ValueError, match=r"stores no chat template"):
        tok.render_chat([{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match=r"tokenizer.ggml.model = 'gpt2'; only SentencePiece"):
        SentencePieceTokenizer.from_gguf(find_model_file("smollm2"))


# ------------------------------------------------------------------------------ Gemma 3's file

# every kind of text the tokenizers must agree on
TEXTS = {
    "plain": ["The capital of France is", "Hello world", "ALL CAPS SHOUTING", "trailing  "],
    "digits": ["numbers 1234567890 and 3.14159, 1,000,000", "2024-01-15T12:34:56Z", "x=-0.5e-3"],
    "code": [
        "def f(x):\n    return x ** 2  # square\n\n\nclass A:\n\tpass\n",
        "for (int i = 0; i < n; ++i) { a[i] = b[i] * 2; }",
        "<b>bold</b> <table><tr><td>x</td></tr></table> a>b </div>",
        "https://example.com/path?q=1&r=2#frag mixedCase_identifier",
    ],
    "accents": [
        "café naïve résumé über Ærø",
        "Ünïcödé — “quotes” ‘single’ … ellipsis",
        "e\u0301 combining accent",
        "Здравствуйте, мир! Γειά σου κόσμε",
    ],
    "byte fallback": [
        "emoji 😀🤽\u200d♀️🧑🏽\u200d🚀 and rare 𓀀 𝔹𝕆𝕃𝔻 \U0010fffd",
        "\x01 control \x7f and \u00a0nbsp\u2009thin",
        "日本語のテキストと中文",
    ],
    "whitespace": [
        " ",
        "  leading",
        "a  b   c    d",
        "a" + " " * 31 + "b",
        "\n",
        "\n\n\n\n\n",
        "\t\ttabs\t",
        "\r\nwindows\r\n",
        "a" + "\n" * 40 + "b",
        "a" + "\t" * 40 + "b",
    ],
    "special": [
        "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
        "<bos>text with <eos> inside <pad> <unk> <mask>",
        "<0x41> is written out",
    ],
}

# What llama.cpp itself gives on this file: `llama_tokenize` (add_special = false) of the llama.cpp
# vendored in llama-cpp-python 0.3.36, built from its sources and run on the vocabulary alone
# (`vocab_only`), on the texts below, 300 random ones and `doc_text()` (its ids by their hash).
# "ids" with special tokens parsed in the text, "ids_plain" (where different) without.
LLAMA_CPP_IDS = json.loads((Path(__file__).parent / "llama_cpp_gemma3_ids.json").read_text())

# Where transformers' tokenizer parts from llama.cpp's rule (ids from the file above):
# 1. a run of 32 or more spaces: llama.cpp cuts the longest user-defined token out first (31
#    spaces), transformers merges the run as '▁' pieces with BPE, into other runs;
# 2. a '▁' written in the text next to a space: llama.cpp matches runs of spaces in the raw text,
#    where a '▁' is no space; transformers after turning spaces into '▁'.
LLAMA_CPP = {
    "x" + " " * 40 + "y": [236781, 167, 145, 236762],
    "a" + " " * 32 + "b": [236746, 167, 518],
    f"x{SPACE} y": [236781, 236743, 570],
    f"{SPACE}{SPACE}": [236743, 236743],
}


@pytest.fixture(scope="module")
def gemma():
    return SentencePieceTokenizer.from_gguf(find_model_file("gemma3"))


@pytest.fixture(scope="module")
def reference():
    """transformers' tokenizer read from the same file (about a minute and 1 GB on 2 cores)."""
    from tests.hf_models import hf_tokenizer_from_gguf

    return hf_tokenizer_from_gguf(find_model_file("gemma3"))


@needs_gemma
def test_gemma3_special_tokens_and_no_chat_template(gemma):
    assert gemma.vocab_size == 262144
    assert (gemma.pad_id, gemma.eos_id, gemma.bos_id, gemma.unk_id) == (0, 1, 2, 3)
    assert gemma.pieces([0, 1, 2, 3]) == ["<pad>", "<eos>", "<bos>", "<unk>"]
    assert gemma.token_id("<start_of_turn>") == 105 and gemma.token_id("<end_of_turn>") == 106
    assert gemma.add_bos and gemma.chat_template is None  # the base model's file stores none
    assert len(gemma.special_tokens) == 6249 and len(gemma.user_defined) == 165
    assert gemma.encode("<start_of_turn>user", add_bos=False) == [105, 2364]


@needs_gemma
def test_gemma3_ids_equal_llama_cpps(gemma):
    from mha_lib.llm.texts import doc_text

    for entry in LLAMA_CPP_IDS["texts"]:
        text = entry["text"]
        assert gemma.encode(text, add_bos=False) == entry["ids"], text
        plain = gemma.encode(text, add_bos=False, parse_special=False)
        assert plain == entry.get("ids_plain", entry["ids"]), text
    assert {e["text"] for e in LLAMA_CPP_IDS["texts"]} >= {t for k in TEXTS.values() for t in k}
    assert LLAMA_CPP.items() <= {e["text"]: e["ids"] for e in LLAMA_CPP_IDS["texts"]}.items()
    ids = gemma.encode(doc_text(), add_bos=False)
    digest = hashlib.sha256(json.dumps(ids).encode()).hexdigest()
    assert (len(ids), digest) == (
        LLAMA_CPP_IDS["doc_text"]["count"],
        LLAMA_CPP_IDS["doc_text"]["sha256"],
    )


@needs_gemma
@pytest.mark.parametrize("kind", TEXTS)
def test_gemma3_ids_equal_transformers(gemma, reference, kind):
    for text in TEXTS[kind]:
        ours = gemma.encode(text, add_bos=False)
        assert ours == reference(text, add_special_tokens=False).input_ids, text
        assert gemma.encode(text) == reference(text).input_ids, text  # both as the file says: BOS
        assert gemma.encode(text)[0] == gemma.bos_id
        assert gemma.decode(ours) == text == reference.decode(ours), text
        plain = gemma.decode(ours, skip_special_tokens=True)
        assert plain == reference.decode(ours, skip_special_tokens=True), text


@needs_gemma
def test_gemma3_ids_equal_transformers_on_random_text(gemma, reference):
    rng = random.Random(0)
    alphabet = [*"abcXYZ019 .,;:!?'\"()[]{}<>/\\-_=+*&%$#@~`|\n\t\r", *"éüñßø—“”…€±×"]
    alphabet += ["😀", "🤽", "\u200d", "𓀀", "日", "한", "ع", "<b>", "</b>", "<eos>", "  ", "\n\n"]
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
        ids = gemma.encode(text, add_bos=False)
        assert ids == reference(text, add_special_tokens=False).input_ids, text
        assert gemma.decode(ids) == text


@needs_gemma
@pytest.mark.parametrize("text", LLAMA_CPP, ids=repr)
def test_where_transformers_parts_ours_gives_llama_cpps_ids(gemma, reference, text):
    assert gemma.encode(text, add_bos=False) == LLAMA_CPP[text]
    assert reference(text, add_special_tokens=False).input_ids != LLAMA_CPP[text]
    if SPACE not in text:  # a written '▁' decodes as a space, in both
        assert gemma.decode(LLAMA_CPP[text]) == text


@needs_gemma
def test_gemma3_long_text_is_fast_and_round_trips(gemma):
    import time

    from mha_lib.llm.texts import doc_text

    text = doc_text()
    start = time.perf_counter()
    ids = gemma.encode(text, add_bos=False)
    assert time.perf_counter() - start < 30  # about 0.5 s on 2 idle cores
    assert gemma.decode(ids) == text and len(ids) == 11913
