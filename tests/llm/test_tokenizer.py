r"""mha_lib.llm.tokenizer: the byte-level BPE rebuilt from the GGUF file gives the ids of
llama.cpp's rule, the chat template renders as transformers renders it, and bad input is refused.

Two references. transformers' tokenizer read from the same file, on text whose numbers are ASCII
digits; and llama.cpp's rule for the file's pre-tokenizer name ('smollm'), written out here in
plain Python (its two expressions with the `regex` module, GPT-2's byte alphabet, the merges by
rank), on numerals beyond 0-9 (¾ ² ٣٤٥ Ⅻ ①). There the two references disagree: transformers'
GGUF loader builds GPT-2's split alone, without llama.cpp's first expression `\p{N}`, so a
space before such a numeral joins it (' ²' -> 'ĠÂ', '²'), where llama.cpp, and this tokenizer,
isolate the numeral (' ²' -> 'Ġ', 'Â²'). ASCII digits come out the same either way only
because the vocabulary has no merge of a space with a digit.
"""

import itertools

import pytest
import regex

from mha_lib.llm.gguf_file import GGUFFile, find_model_file
from mha_lib.llm.tokenizer import GPT2_SPLIT, PRE_TOKENIZERS, GGUFTokenizer

TEXTS = [
    "Hello world",
    "The year 2024 had 366 days; 3.14159 is π, 1,000,000 is a million.",
    "def add(a, b):\n\treturn a + b  # two spaces\n\n\nclass X:\n    pass\n",
    "Crème brûlée, naïve café, Ærøskøbing, São Paulo, Zürich.",
    "whitespace    runs\t\ttabs \n \n  and trailing   ",
    "   leading spaces",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "I'm sure they'll say it's 'quoted' — isn't it?",
    "emoji 🙂🚀 and 中文字符 and العربية",
    "x=1;y=2;print(x**y)//3!=4",
    "<|endoftext|><file_sep><jupyter_code>import numpy as np",
    "",
]


# numerals that are not ASCII digits, after spaces, letters and digits
NUMERALS = [
    "¾ cup and a ½ spoon",
    "x² + y² = z²; E = mc²",
    "page ٣٤٥ of ١٢",
    "chapter Ⅻ, part ① and ②",
    "2¾ and 10 ¼, ٣ and 3",
    "footnote¹ ²³ ³",
]


@pytest.fixture(scope="module")
def tok(smollm2):
    return smollm2[1]


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte alphabet: printable bytes stand for themselves, the others for 256 + i."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    shifted = [b for b in range(256) if b not in keep]
    table = {b: chr(b) for b in keep}
    table.update({b: chr(256 + i) for i, b in enumerate(shifted)})
    return table


@pytest.fixture(scope="module")
def llama_cpp_rule():
    r"""text -> ids by llama.cpp's rule for 'smollm', written out: split by `\p{N}` (each
    numeral alone), split each piece by GPT-2's expression, write it in the byte alphabet and
    apply the merges, lowest rank first, until none applies."""
    with GGUFFile(find_model_file()) as f:
        tokens, merges = f.value("tokenizer.ggml.tokens"), f.value("tokenizer.ggml.merges")
    vocab = {t: i for i, t in enumerate(tokens)}
    rank = {tuple(m.split(" ")): i for i, m in enumerate(merges)}
    alphabet = _bytes_to_unicode()

    def bpe(word: str) -> list[str]:
        parts = list(word)
        while len(parts) > 1:
            pairs = [
                (rank.get((a, b), len(rank)), i)
                for i, (a, b) in enumerate(itertools.pairwise(parts))
            ]
            best, i = min(pairs)
            if best == len(rank):
                break
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        return parts

    def encode(text: str) -> list[int]:
        ids = []
        for piece in regex.split(r"(\p{N})", text):  # the first expression, isolated matches
            for word in regex.findall(GPT2_SPLIT, piece):  # the second, on what is left
                ids += [vocab[p] for p in bpe("".join(alphabet[b] for b in word.encode()))]
        return ids

    return encode


@pytest.mark.parametrize("text", TEXTS)
def test_ids_equal_transformers(tok, reference_tokenizer, text):
    ids = tok.encode(text)
    assert ids == reference_tokenizer.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text  # byte-level: nothing is lost


@pytest.mark.parametrize("text", TEXTS[:6] + TEXTS[7:10])  # no special tokens
def test_the_written_out_rule_is_transformers_on_ascii_digits(llama_cpp_rule, tok, text):
    assert llama_cpp_rule(text) == tok.encode(text)


@pytest.mark.parametrize("text", NUMERALS)
def test_numerals_beyond_ascii_follow_llama_cpps_rule(tok, llama_cpp_rule, text):
    ids = tok.encode(text)
    assert ids == llama_cpp_rule(text)
    assert tok.decode(ids) == text


def test_transformers_gguf_loader_has_no_digit_split(tok, reference_tokenizer):
    """Why NUMERALS are not compared with transformers: its loader splits by GPT-2's expression
    only, so a space joins a numeral other than 0-9."""
    differs = [
        t
        for t in NUMERALS
        if tok.encode(t) != reference_tokenizer.encode(t, add_special_tokens=False)
    ]
    assert len(differs) >= 4, differs
    assert reference_tokenizer.convert_ids_to_tokens(
        reference_tokenizer.encode(" ²", add_special_tokens=False)
    ) == ["ĠÂ", "²"]
    assert tok.pieces(tok.encode(" ²")) == ["Ġ", "Â²"]


def test_digits_are_read_one_by_one(tok):
    assert tok.pieces(tok.encode("in 2024")) == ["in", "Ġ", "2", "0", "2", "4"]
    assert PRE_TOKENIZERS["smollm"][0] == r"\p{N}"


def test_special_tokens_stay_whole(tok):
    ids = tok.encode("<|im_start|>assistant<|im_end|>")
    assert ids[0] == 1 and ids[-1] == 2 == tok.eos_id
    assert tok.eos_token == "<|im_end|>" and len(tok.special_tokens) == 17
    assert tok.decode(ids, skip_special_tokens=True) == "assistant"


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "What is 2 + 2?"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        [
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": "Another, in  French?\n"},
        ],
    ],
)
def test_the_chat_template_renders_as_transformers(tok, reference_tokenizer, messages):
    for gen in (True, False):
        ours = tok.render_chat(messages, add_generation_prompt=gen)
        ref = reference_tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=gen
        )
        assert ours == ref
        ids = reference_tokenizer.encode(ref, add_special_tokens=False)
        assert tok.encode_chat(messages, add_generation_prompt=gen) == ids
    assert ours.startswith("<|im_start|>")


def test_built_from_a_path_equals_built_from_the_open_file(tok):
    again = GGUFTokenizer.from_gguf(find_model_file())
    assert again.encode(TEXTS[1]) == tok.encode(TEXTS[1]) and again.vocab_size == 49152


def test_bad_input(tok):
    with pytest.raises(TypeError, match="text must be a str; got list"):
        tok.encode(["a"])
    with pytest.raises(ValueError, match=r"ids holds 49152; expected token ids in \[0, 49152\)"):
        tok.decode([1, 49152])
    with pytest.raises(TypeError, match="messages must be a list of"):
        tok.render_chat([{"role": "user"}])
    with pytest.raises(TypeError, match="messages must be a list of"):
        tok.render_chat("Hi")
    with pytest.raises(ValueError, match="'bert' is not supported"):
        GGUFTokenizer(["a"], [], [1], pre="bert")
    no_template = GGUFTokenizer(["a", "b"], [], [1, 1], pre="gpt2")
    with pytest.raises(ValueError, match="stores no chat template"):
        no_template.render_chat([{"role": "user", "content": "x"}])
