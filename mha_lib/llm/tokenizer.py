"""The tokenizer and the chat template of a GGUF file, rebuilt from its metadata.

Derived in notebook 12. A GGUF file has no tokenizer.json: it stores the vocabulary
(`tokenizer.ggml.tokens`, each token spelled in GPT-2's byte alphabet, a space as 'Ġ'), the
merges (`tokenizer.ggml.merges`, best first), each token's type (3 = control: the special
tokens such as `<|im_start|>`), and the NAME of the pre-tokenizer (`tokenizer.ggml.pre`). The
name stands for the rules llama.cpp applies before the merges. For 'smollm' (as for StarCoder)
llama.cpp splits the text with two regular expressions, one after the other:
1. `\\p{N}`: every digit on its own (so numbers are read digit by digit);
2. GPT-2's: contractions, ` ?` letters, ` ?` digits, ` ?` other symbols, runs of spaces;
then each piece is written in the byte alphabet and merged by byte-level BPE. `PRE_TOKENIZERS`
holds those expressions; `GGUFTokenizer` builds them with the `tokenizers` library. Other
files name others (notebook 15): Llama 3's 'llama-bpe' keeps runs of up to three digits
together and lets a word take one symbol before it, and llama.cpp looks each piece up whole
before merging it (`IGNORE_MERGES`); Qwen's 'qwen2' is the same with one digit at a time. The
chat template, a Jinja template stored in `tokenizer.chat_template`, is rendered with jinja2's
sandbox, as transformers renders it.

What it holds:
- `GGUFTokenizer.from_gguf(path or GGUFFile)`;
- `encode(text, add_bos=None) -> ids` (None: as the file says, `tokenizer.ggml.add_bos_token`;
  SmolLM2's says no), `decode(ids) -> text`, `pieces(ids)` (the stored tokens);
- `render_chat(messages, add_generation_prompt=True) -> str` and `encode_chat(messages)`;
- `eos_id`, `bos_id`, `add_bos`, `vocab_size`.
Imports tokenizers and jinja2 (and gguf, through `gguf_file`).
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

from .gguf_file import GGUFFile

__all__ = ["GPT2_SPLIT", "LLAMA3_SPLIT", "PRE_TOKENIZERS", "QWEN2_SPLIT", "GGUFTokenizer"]

# GPT-2's split (llama.cpp's spelling of it): contractions, words, numbers, symbols, spaces.
GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# Llama 3's (llama.cpp's spelling, the contractions in either case): a word may take one symbol
# before it, digits in runs of up to three, symbols with the newlines after them.
_CONTRACTIONS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
LLAMA3_SPLIT = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")  # Qwen: one digit at a time
# `tokenizer.ggml.pre` -> the expressions llama.cpp splits with, in order.
PRE_TOKENIZERS: dict[str, tuple[str, ...]] = {
    "smollm": (r"\p{N}", GPT2_SPLIT),
    "starcoder": (r"\p{N}", GPT2_SPLIT),
    "gpt2": (GPT2_SPLIT,),
    "llama-bpe": (LLAMA3_SPLIT,),
    "llama3": (LLAMA3_SPLIT,),
    "qwen2": (QWEN2_SPLIT,),
}
IGNORE_MERGES = {"llama-bpe", "llama3"}  # a piece that is a token is taken whole
CONTROL = 3  # llama.cpp's token type of a special token


class GGUFTokenizer:
    """Byte-level BPE from a GGUF file's vocabulary and merges, with its chat template."""

    def __init__(
        self,
        tokens: list[str],
        merges: list[str],
        token_types: list[int],
        pre: str,
        chat_template: str | None = None,
        bos_id: int | None = None,
        eos_id: int | None = None,
        add_bos: bool = False,
    ) -> None:
        if pre not in PRE_TOKENIZERS:
            raise ValueError(
                f"tokenizer.ggml.pre = {pre!r} is not supported; expected one of "
                f"{sorted(PRE_TOKENIZERS)}"
            )
        vocab = {token: i for i, token in enumerate(tokens)}
        pairs = [tuple(m.split(" ")) for m in merges]  # "Ġ t" -> ("Ġ", "t")
        tok = Tokenizer(models.BPE(vocab, pairs, ignore_merges=pre in IGNORE_MERGES))
        splits = [
            pre_tokenizers.Split(Regex(expr), behavior="isolated") for expr in PRE_TOKENIZERS[pre]
        ]
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
        )
        tok.decoder = decoders.ByteLevel()
        special = [t for t, kind in zip(tokens, token_types) if kind == CONTROL]
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
        self._tok = tok
        self.pre = pre
        self.special_tokens = special
        self.chat_template = chat_template
        self.bos_id, self.eos_id = bos_id, eos_id
        self.add_bos = add_bos
        self.vocab_size = len(tokens)

    @classmethod
    def from_gguf(cls, source: str | Path | GGUFFile) -> GGUFTokenizer:
        """The tokenizer a GGUF file describes (a file name or an open `GGUFFile`)."""
        if not isinstance(source, GGUFFile):
            with GGUFFile(source) as f:
                return cls.from_gguf(f)
        f = source
        model = f.value("tokenizer.ggml.model")
        if model != "gpt2":
            raise ValueError(
                f"tokenizer.ggml.model = {model!r}; only byte-level BPE ('gpt2') is built here"
            )
        keys = f.keys()

        def get(key, default=None):
            return f.value(key) if key in keys else default

        return cls(
            tokens=f.value("tokenizer.ggml.tokens"),
            merges=f.value("tokenizer.ggml.merges"),
            token_types=f.value("tokenizer.ggml.token_type"),
            pre=f.value("tokenizer.ggml.pre"),
            chat_template=get("tokenizer.chat_template"),
            bos_id=get("tokenizer.ggml.bos_token_id"),
            eos_id=get("tokenizer.ggml.eos_token_id"),
            add_bos=bool(get("tokenizer.ggml.add_bos_token", False)),
        )

    @property
    def eos_token(self) -> str | None:
        return None if self.eos_id is None else self._tok.id_to_token(self.eos_id)

    @property
    def bos_token(self) -> str | None:
        return None if self.bos_id is None else self._tok.id_to_token(self.bos_id)

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        """Token ids of text; special tokens written in the text (`<|im_end|>`) stay whole.
        add_bos: start with the BOS token; None (the default) does what the file asks
        (`self.add_bos`, from `tokenizer.ggml.add_bos_token`)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str; got {type(text).__name__}")
        add_bos = self.add_bos if add_bos is None else add_bos
        if add_bos and self.bos_id is None:
            raise ValueError(
                "add_bos=True, but the file names no BOS token (tokenizer.ggml.bos_token_id)"
            )
        bos = [self.bos_id] if add_bos else []
        return bos + self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """The text of token ids (a list, or a 1-d tensor)."""
        ids = [int(i) for i in (ids.tolist() if hasattr(ids, "tolist") else ids)]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"ids holds {bad[0]}; expected token ids in [0, {self.vocab_size})")
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def pieces(self, ids) -> list[str]:
        """The stored tokens of ids, in the byte alphabet ('Ġ' is a space, 'Ċ' a newline)."""
        return [self._tok.id_to_token(int(i)) for i in ids]

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The chat template of the file rendered for messages [{"role": ..., "content": ...}]."""
        if self.chat_template is None:
            raise ValueError("this file stores no chat template (tokenizer.chat_template)")
        if not isinstance(messages, list) or not all(
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
            for m in messages
        ):
            raise TypeError(
                'messages must be a list of {"role": str, "content": str} dicts, e.g. '
                '[{"role": "user", "content": "Hi"}]'
            )
        return _compiled(self.chat_template).render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
        )

    def encode_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
        """encode(render_chat(messages)): the ids a chat model is given (the template writes
        any BOS token itself, so none is added)."""
        return self.encode(self.render_chat(messages, add_generation_prompt), add_bos=False)


_TEMPLATES: dict[str, object] = {}


def _compiled(source: str):
    """The template compiled in jinja2's sandbox, with transformers' settings (cached)."""
    if source not in _TEMPLATES:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise ValueError(f"the chat template refused the messages: {message}")

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.globals["raise_exception"] = raise_exception
        _TEMPLATES[source] = env.from_string(source)
    return _TEMPLATES[source]
