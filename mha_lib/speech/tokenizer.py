"""Whisper's tokenizer: GPT-2's byte-level BPE with Whisper's special tokens, read from its
`tokenizer.json` by the `tokenizers` package.

Derived in notebook 17. Whisper's decoder is told what to do by four tokens before the text:
<|startoftranscript|>, the language (<|en|>), the task (<|transcribe|>) and
<|notimestamps|>; it stops with <|endoftext|>. `WhisperTokenizer(path)`: `encode(text)`,
`decode(ids)` (special tokens left out), `token(id)` (one token's text, its leading space kept:
a token that starts a word starts with a space), `id(name)`, `prefix(language)` (the four
tokens), `eot`.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["WhisperTokenizer"]


class WhisperTokenizer:
    """The tokenizer of a Whisper model folder's tokenizer.json."""

    def __init__(self, path: str | Path) -> None:
        from tokenizers import Tokenizer

        self.path = Path(path)
        self._tok = Tokenizer.from_file(str(self.path))
        self.eot = self.id("<|endoftext|>")
        self.sot = self.id("<|startoftranscript|>")

    def id(self, token: str) -> int:
        """The id of a token written out ("<|en|>"), refused by name when it has none."""
        i = self._tok.token_to_id(token)
        if i is None:
            raise ValueError(f"{token!r} is not a token of {self.path.name}")
        return i

    def prefix(self, language: str = "en", task: str = "transcribe") -> list[int]:
        """[<|startoftranscript|>, <|language|>, <|task|>, <|notimestamps|>]."""
        try:
            lang = self.id(f"<|{language}|>")
        except ValueError:
            raise ValueError(f"language = {language!r} is not one of Whisper's") from None
        return [self.sot, lang, self.id(f"<|{task}|>"), self.id("<|notimestamps|>")]

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids) -> str:
        """The text of ids, special tokens left out."""
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=True)

    def token(self, i: int) -> str:
        """One token's text (its leading space kept; a piece of a UTF-8 character may show as
        the replacement character)."""
        return self._tok.decode([int(i)], skip_special_tokens=False)

    def __len__(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)
