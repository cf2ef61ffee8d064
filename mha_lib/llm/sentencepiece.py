"""A SentencePiece tokenizer rebuilt from a GGUF file's vocabulary and scores (Gemma's).

Derived in notebook 15 (notebook 12's `GGUFTokenizer` rebuilds byte-level BPE, which stores
merges). A file with `tokenizer.ggml.model = "llama"` stores no merges: each token has a score
(`tokenizer.ggml.scores`) and a type (`tokenizer.ggml.token_type`: 1 normal, 3 control such as
`<bos>`, 4 user-defined such as runs of spaces or newlines, 6 a byte `<0x41>`). A space is
spelled '▁' (U+2581) inside tokens. llama.cpp tokenizes such a vocabulary so:

1. special tokens are cut out of the text first, whole: the user-defined ones always, the
   control ones when the text may hold them (`<start_of_turn>` in a chat); the longest first;
2. in each remaining stretch every space becomes '▁', and the stretch is split into characters;
3. of all adjacent pairs whose concatenation is a token, the one whose token has the highest
   score is merged (on a tie, the leftmost), again and again until no pair forms a token;
4. a piece that is not a token (a character missing from the vocabulary, such as a rare emoji)
   becomes its UTF-8 bytes, one `<0xXX>` token each: byte fallback.
`SentencePieceTokenizer` does exactly that, in Python. Step 3 never merges across a '▁' unless
some token holds '▁' after another character (Gemma's vocabulary has one, '>▁</'), so each word
is tokenized alone and remembered: fast on long texts.

The tests check the ids against llama.cpp's own tokenizer on this file. transformers builds the
tokenizer differently (BPE with merges recovered from the vocabulary, the tokens of runs of
spaces respelled with '▁'); its ids are the same except on runs of 32 spaces or more and on a
'▁' written in the text beside a space, where llama.cpp's are those above.

What it holds: `SentencePieceTokenizer.from_gguf(path or GGUFFile)`, `encode(text,
add_bos=None)` (None: as the file says, `tokenizer.ggml.add_bos_token`; Gemma's files say yes,
as transformers' tokenizer and llama.cpp read them), `decode(ids, skip_special_tokens=False)`,
`pieces(ids)`, `bos_id`, `eos_id`, `pad_id`, `unk_id`, `add_bos`, `vocab_size`, `chat_template`
(None when the file stores none, as Gemma 3 270M's), `render_chat` / `encode_chat` (from
`tokenizer`). Imports numpy (and gguf, through `gguf_file`).
"""

from __future__ import annotations

import heapq
from functools import lru_cache
from pathlib import Path

from .gguf_file import GGUFFile

__all__ = ["SPACE", "TOKEN_TYPES", "SentencePieceTokenizer"]

SPACE = "\u2581"  # '▁', a space inside a SentencePiece token
TOKEN_TYPES = {1: "normal", 2: "unknown", 3: "control", 4: "user-defined", 5: "unused", 6: "byte"}
NORMAL, CONTROL, USER_DEFINED, BYTE = 1, 3, 4, 6
KEYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type")


class SentencePieceTokenizer:
    """SentencePiece (llama.cpp's 'llama' tokenizer) from a vocabulary, its scores and types."""

    def __init__(
        self,
        tokens: list[str],
        scores: list[float],
        token_types: list[int],
        *,
        bos_id: int | None = None,
        eos_id: int | None = None,
        pad_id: int | None = None,
        unk_id: int | None = None,
        add_bos: bool = False,
        chat_template: str | None = None,
    ) -> None:
        if not len(tokens) == len(scores) == len(token_types):
            raise ValueError(
                f"tokens, scores and token_types have lengths {len(tokens)}, {len(scores)} and "
                f"{len(token_types)}; expected one score and one type per token"
            )
        self.tokens, self.scores, self.token_types = list(tokens), list(scores), list(token_types)
        self.vocab = {token: i for i, token in enumerate(self.tokens)}
        self.vocab_size = len(self.tokens)
        self.bos_id, self.eos_id, self.pad_id, self.unk_id = bos_id, eos_id, pad_id, unk_id
        self.add_bos = add_bos
        self.chat_template = chat_template
        # the byte tokens <0x00>..<0xFF>
        self.byte_ids = [self.vocab.get(f"<0x{b:02X}>") for b in range(256)]
        # what is cut out of the text before merging, longest first
        self.user_defined = _longest_first(self.tokens, self.token_types, (USER_DEFINED,))
        self.specials = _longest_first(self.tokens, self.token_types, (CONTROL, USER_DEFINED))
        self.special_tokens = [t for t, k in zip(self.tokens, self.token_types) if k == CONTROL]
        # characters after which a '▁' may be merged into a token: words split elsewhere
        inner = [t for t in self.tokens if SPACE in t[1:]]  # (Gemma's: one token, '>▁</')
        self._glue = {t[j - 1] for t in inner for j in range(1, len(t)) if t[j] == SPACE}
        self._word = lru_cache(maxsize=1 << 16)(self._merge)

    @classmethod
    def from_gguf(cls, source: str | Path | GGUFFile) -> SentencePieceTokenizer:
        """The tokenizer a GGUF file of `tokenizer.ggml.model = "llama"` describes.

        A file name is opened and closed here (a few seconds for Gemma's 262 144 tokens); an
        open `GGUFFile` is read as it is."""
        if not isinstance(source, GGUFFile):
            with GGUFFile(source) as f:
                return cls.from_gguf(f)
        f = source
        model = f.value("tokenizer.ggml.model")
        if model != "llama":
            raise ValueError(
                f"tokenizer.ggml.model = {model!r}; only SentencePiece ('llama') is built here "
                "(byte-level BPE, 'gpt2': GGUFTokenizer)"
            )
        keys = f.keys()

        def get(key, default=None):
            return f.value(key) if key in keys else default

        return cls(
            *(f.value(key) for key in KEYS),
            bos_id=get("tokenizer.ggml.bos_token_id"),
            eos_id=get("tokenizer.ggml.eos_token_id"),
            pad_id=get("tokenizer.ggml.padding_token_id"),
            unk_id=get("tokenizer.ggml.unknown_token_id"),
            add_bos=bool(get("tokenizer.ggml.add_bos_token", False)),
            chat_template=get("tokenizer.chat_template"),
        )

    def token_id(self, token: str) -> int:
        """The id of a token spelled as stored ('<start_of_turn>', '▁the')."""
        if token not in self.vocab:
            raise KeyError(f"{token!r} is not in the vocabulary")
        return self.vocab[token]

    @property
    def bos_token(self) -> str | None:
        return None if self.bos_id is None else self.tokens[self.bos_id]

    @property
    def eos_token(self) -> str | None:
        return None if self.eos_id is None else self.tokens[self.eos_id]

    # ------------------------------------------------------------------------------- encoding

    def encode(
        self, text: str, add_bos: bool | None = None, parse_special: bool = True
    ) -> list[int]:
        """Token ids of text. Special tokens written in the text (`<start_of_turn>`) stay whole
        unless parse_special=False; user-defined ones (runs of spaces or newlines) always do.
        add_bos: start with `<bos>`; None (the default) does what the file asks
        (`self.add_bos`, from `tokenizer.ggml.add_bos_token`: True for Gemma)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str; got {type(text).__name__}")
        add_bos = self.add_bos if add_bos is None else add_bos
        if add_bos and self.bos_id is None:
            raise ValueError(
                "add_bos=True, but the file names no BOS token (tokenizer.ggml.bos_token_id)"
            )
        ids = [self.bos_id] if add_bos else []
        for piece, token in self._partition(text, parse_special):
            if token is not None:
                ids.append(token)
            else:
                ids.extend(self._stretch(piece))
        return ids

    def _partition(self, text: str, parse_special: bool) -> list[tuple[str, int | None]]:
        """text cut into (stretch, None) and (special token, its id), llama.cpp's way: each
        special token in turn, longest first, is cut out of every stretch still raw."""
        parts: list[tuple[str, int | None]] = [(text, None)]
        for token in self.specials if parse_special else self.user_defined:
            if not any(token in piece for piece, tid in parts if tid is None):
                continue
            cut = []
            for piece, tid in parts:
                if tid is not None or token not in piece:
                    cut.append((piece, tid))
                    continue
                pieces = piece.split(token)
                for i, rest in enumerate(pieces):
                    if i:
                        cut.append((token, self.vocab[token]))
                    if rest:
                        cut.append((rest, None))
            parts = cut
        return parts

    def _stretch(self, text: str) -> list[int]:
        """The ids of a stretch of ordinary text: spaces to '▁', each word merged alone."""
        text = text.replace(" ", SPACE)
        ids, start = [], 0
        for i in range(1, len(text)):
            if text[i] == SPACE and text[i - 1] not in self._glue:  # no token spans this '▁'
                ids.extend(self._word(text[start:i]))
                start = i
        ids.extend(self._word(text[start:]))
        return ids

    def _merge(self, text: str) -> tuple[int, ...]:
        """llama.cpp's merge loop on one word: the best-scored adjacent pair first."""
        if not text:
            return ()
        symbols = list(text)  # one symbol per character; merged ones become ''
        nxt = list(range(1, len(text))) + [-1]
        prv = list(range(-1, len(text) - 1))
        queue: list[tuple[float, int, int, int]] = []  # (-score, left, right, length)

        def push(left: int, right: int) -> None:
            if left < 0 or right < 0:
                return
            joined = symbols[left] + symbols[right]
            token = self.vocab.get(joined)
            if token is not None:
                heapq.heappush(queue, (-self.scores[token], left, right, len(joined)))

        for i in range(1, len(text)):
            push(i - 1, i)
        while queue:
            _, left, right, length = heapq.heappop(queue)
            a, b = symbols[left], symbols[right]
            if not a or not b or len(a) + len(b) != length:  # one of them changed since
                continue
            symbols[left], symbols[right] = a + b, ""
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prv[nxt[right]] = left
            push(prv[left], left)
            push(left, nxt[left])
        ids: list[int] = []
        i = 0
        while i >= 0:
            token = self.vocab.get(symbols[i])
            if token is not None:
                ids.append(token)
            else:  # byte fallback: the piece's UTF-8 bytes, one token each
                ids.extend(self.byte_ids[b] for b in symbols[i].encode("utf-8"))
            i = nxt[i]
        return tuple(ids)

    # ------------------------------------------------------------------------------- decoding

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """The text of token ids (a list, or a 1-d tensor): '▁' back to spaces, byte tokens
        joined into UTF-8 (an incomplete character becomes U+FFFD); control tokens written out
        unless skip_special_tokens."""
        ids = [int(i) for i in (ids.tolist() if hasattr(ids, "tolist") else ids)]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"ids holds {bad[0]}; expected token ids in [0, {self.vocab_size})")
        out = bytearray()
        for i in ids:
            kind, token = self.token_types[i], self.tokens[i]
            if kind == BYTE:
                out.append(int(token[3:5], 16))
            elif kind == CONTROL:
                if not skip_special_tokens:
                    out += token.encode("utf-8")
            else:
                out += token.replace(SPACE, " ").encode("utf-8")
        return out.decode("utf-8", errors="replace")

    def pieces(self, ids) -> list[str]:
        """The stored tokens of ids ('▁' is a space, '<0x0A>' a byte)."""
        return [self.tokens[int(i)] for i in ids]

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The file's chat template rendered for messages (as `GGUFTokenizer.render_chat`)."""
        from .tokenizer import GGUFTokenizer

        return GGUFTokenizer.render_chat(self, messages, add_generation_prompt)

    def encode_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
        """encode(render_chat(messages)): the ids a chat model is given (the template writes
        any `<bos>` itself, so none is added)."""
        return self.encode(self.render_chat(messages, add_generation_prompt), add_bos=False)


def _longest_first(tokens: list[str], types: list[int], kinds: tuple[int, ...]) -> list[str]:
    found = [t for t, k in zip(tokens, types) if k in kinds and t]
    return sorted(found, key=len, reverse=True)
