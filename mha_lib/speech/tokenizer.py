"""Whisper's tokenizer: GPT-2's byte-level BPE with Whisper's special tokens, read from its
`tokenizer.json` by the `tokenizers` package.

Derived in notebook 17. Whisper's decoder is told what to do by four tokens before the text:
<|startoftranscript|>, the language (<|en|>), the task (<|transcribe|>) and
<|notimestamps|>; it stops with <|endoftext|>. `WhisperTokenizer(path)`: `encode(text)`,
`decode(ids)` (special tokens left out), `token(id)` (one token's text, its leading space kept:
a token that starts a word starts with a space), `word_groups(ids)` (each word's tokens),
`id(name)`, `prefix(language)` (the four tokens), `eot`.

The packaged tokenizer.json lacks BPE's first merge ("Ġ t" -> "Ġt", id 256: its list has
49,999 merges where GPT-2's has 50,000, the first line of merges.txt lost), so " to" would
encode as two tokens that Whisper never writes. `WhisperTokenizer` puts back every merge the
vocabulary needs and the list lacks (GPT-2's ids follow the merges' order: token 256 + k is made
by merge k) and refuses a file where a missing token cannot be split into two it has.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["WhisperTokenizer"]


class WhisperTokenizer:
    """The tokenizer of a Whisper model folder's tokenizer.json."""

    def __init__(self, path: str | Path) -> None:
        from tokenizers import Tokenizer

        self.path = Path(path)
        spec = json.loads(self.path.read_text())
        restored = _restore_merges(spec["model"]) if spec["model"]["type"] == "BPE" else []
        self._tok = Tokenizer.from_str(json.dumps(spec))
        self.restored_merges = restored  # [(left, right)] put back
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

    def word_groups(self, ids) -> list[list[int]]:
        """The positions in ids of each word's tokens: a word starts at a token whose text
        starts with a space (or at the first token) and runs to the next."""
        groups: list[list[int]] = []
        for i, t in enumerate(ids):
            if not groups or self.token(t).startswith(" "):
                groups.append([])
            groups[-1].append(i)
        return groups

    def __len__(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)


def _restore_merges(model: dict) -> list[tuple[str, str]]:
    """Put back, at its rank, each merge that makes a vocabulary token (id >= 256, GPT-2's
    order) no merge makes; returns them. Merges may be "a b" strings or [a, b] pairs."""
    vocab, merges = model["vocab"], model["merges"]
    as_pair = (lambda m: tuple(m.split(" "))) if merges and isinstance(merges[0], str) else tuple
    made = {"".join(as_pair(m)) for m in merges}
    missing = sorted(
        (i, t) for t, i in vocab.items() if 256 <= i < 256 + len(merges) + 1 and t not in made
    )
    restored = []
    for i, t in missing:
        splits = [(t[:k], t[k:]) for k in range(1, len(t)) if t[:k] in vocab and t[k:] in vocab]
        if len(splits) != 1:
            raise ValueError(
                f"tokenizer.json: no merge makes token {t!r} (id {i}) and it splits into "
                f"{len(splits)} pairs of tokens; expected exactly one"
            )
        pair = splits[0]
        merges.insert(i - 256, " ".join(pair) if isinstance(merges[0], str) else list(pair))
        restored.append(pair)
    return restored
