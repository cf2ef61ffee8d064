"""mha_lib.llm.tokenizer: the byte-level BPE rebuilt from the GGUF file gives transformers' ids, the
chat template renders as transformers renders it, and bad input is refused."""

import pytest

from mha_lib.llm.gguf_file import find_model_file
from mha_lib.llm.tokenizer import PRE_TOKENIZERS, GGUFTokenizer

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


@pytest.fixture(scope="module")
def tok(smollm2):
    return smollm2[1]


@pytest.mark.parametrize("text", TEXTS)
def test_ids_equal_transformers(tok, reference_tokenizer, text):
    ids = tok.encode(text)
    assert ids == reference_tokenizer.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text  # byte-level: nothing is lost


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
