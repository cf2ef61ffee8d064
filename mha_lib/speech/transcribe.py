"""From audio to timed text: load Whisper base, then decode greedily with its cross cache.

Derived in notebook 17. `load_whisper(path=None)` reads a model folder (model.bin, config.json,
tokenizer.json; by default Whisper base, joined from its installed part packages by
`mha_lib.llm.find_model_file("whisper")`, never downloaded) with our own CTranslate2 reader.
`transcribe(model, tokenizer, audio)` encodes the spectrogram once, computes each layer's
cross-attention keys and values once, then decodes one token at a time after the four-token
prefix: the logits of the config's suppressed tokens set to -inf (and, at the first step, of
its begin-suppressed ones), the most likely token taken, until <|endoftext|>. This is
transformers' `generate` with greedy search (tests/speech check the tokens equal). Each token's
cross-attention row is kept as it is computed, and the alignment heads time the tokens
(`mha_lib.speech.timing`).

`align(model, tokenizer, audio, text)` times a text that is known rather than heard (forced
alignment): the prefix and the text's tokens go through the decoder in one pass, each token's
cross-attention row is the one it gets as the decoder's input, exactly as in `transcribe` (so
aligning the text `transcribe` heard gives the same times), and the same DTW times them.

What it holds: `load_whisper`, `Transcript` (`.tokens`, `.text`, `.token_times`, `.words`
[(word, start, end)], `.cross_attentions`), `transcribe`, `align`, `greedy_tokens`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from ..llm.model_files import find_model_file
from .audio import HOP_LENGTH, N_SAMPLES, log_mel
from .ctranslate2 import read_ctranslate2
from .model import WhisperConfig, WhisperModel, state_from_ctranslate2
from .timing import token_spans, token_times
from .tokenizer import WhisperTokenizer

__all__ = ["Transcript", "align", "audio_frames", "greedy_tokens", "load_whisper", "transcribe"]

SPEC = "WhisperSpec"


def load_whisper(path: str | Path | None = None) -> tuple[WhisperModel, WhisperTokenizer]:
    """(model, tokenizer) of a Whisper model folder in CTranslate2's layout (model.bin,
    config.json, tokenizer.json), or of Whisper base when path is None. float32 weights (the
    file's float16 widened exactly), in eval mode."""
    folder = find_model_file("whisper").parent if path is None else Path(path)
    if folder.is_file():
        folder = folder.parent
    for name in ("model.bin", "config.json", "tokenizer.json"):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder} has no {name}: expected a Whisper model folder")
    f = read_ctranslate2(folder / "model.bin")
    if f.spec != SPEC:
        raise ValueError(f"{folder / 'model.bin'} holds a {f.spec!r} model; expected {SPEC!r}")
    config = WhisperConfig.from_ctranslate2(
        f.variables, json.loads((folder / "config.json").read_text())
    )
    model = WhisperModel(config)
    model.load_state_dict(state_from_ctranslate2(config, f), strict=True)
    return model.eval(), WhisperTokenizer(folder / "tokenizer.json")


@dataclass
class Transcript:
    """tokens: the text tokens after the prefix, without <|endoftext|>; text; token_times:
    seconds, one per token, where it ends (as transformers' token timestamps: `timing`'s
    docstring says why it is the end); words: (word, start, end) in seconds, a word being the
    tokens from one that starts with a space to the next, timed as OpenAI does (`token_spans`:
    the rows of the queries that predict each token, from the <|notimestamps|> step's on);
    cross_attentions: each layer's (1, h, T + 1, S) cross-attention of the T + 1 queries that
    predict the text tokens and then the end (the <|notimestamps|> step's, then each token's)."""

    tokens: list[int]
    text: str
    token_times: list[float]
    words: list[tuple[str, float, float]]
    cross_attentions: list[Tensor] = field(repr=False, default_factory=list)


@torch.no_grad()
def greedy_tokens(model: WhisperModel, prefix: list[int], enc: Tensor, eot: int,
                  max_new_tokens: int | None = None, cross_attentions: bool = True):  # fmt: skip
    """Greedy decoding of one utterance: (the new tokens, the end token included if reached;
    each layer's cross-attention (1, h, n, S) of the rows fed: the prefix, then each new token
    but the last). With cross_attentions=False the weights are neither computed nor kept
    (torch's fused kernel attends) and the list is empty: the same tokens, no token times."""
    c = model.config
    limit = c.max_target_positions - len(prefix)
    max_new_tokens = limit if max_new_tokens is None else min(max_new_tokens, limit)
    cache = model.new_cache(enc)
    suppress = torch.tensor(list(c.suppress_tokens), dtype=torch.long)
    begin = torch.tensor(list(c.begin_suppress_tokens), dtype=torch.long)
    x = torch.tensor([prefix], device=enc.device)  # (1, 4)
    new, rows = [], [[] for _ in range(c.decoder_layers)]
    for step in range(max_new_tokens):
        if cross_attentions:
            logits, cross = model.decode(
                x, enc, cache, output_cross_attentions=True, last_logits_only=True
            )
            for kept, w in zip(rows, cross, strict=True):
                kept.append(w)
        else:
            logits = model.decode(x, enc, cache, last_logits_only=True)
        scores = logits[0, -1].float().clone()  # (V,)
        scores[suppress] = -math.inf
        if step == 0:
            scores[begin] = -math.inf
        token = int(scores.argmax())
        new.append(token)
        if token == eot:
            break
        x = torch.tensor([[token]], device=enc.device)
    return new, [torch.cat(r, dim=2) for r in rows] if cross_attentions else []


@torch.no_grad()
def transcribe(model: WhisperModel, tokenizer: WhisperTokenizer, audio, language: str = "en",
               max_new_tokens: int | None = None) -> Transcript:  # fmt: skip
    """Transcribe up to 30 s of 16 kHz mono audio (module docstring)."""
    prefix = tokenizer.prefix(language)  # checks the language
    mel = log_mel(audio, model.config.num_mel_bins)  # (80, 3000), checks the audio
    device = next(model.parameters()).device
    enc = model.encode(mel[None].to(device))  # (1, 1500, C)
    new, cross = greedy_tokens(model, prefix, enc, tokenizer.eot, max_new_tokens)
    tokens = new[:-1] if new and new[-1] == tokenizer.eot else new
    return _timed(model, tokenizer, audio, prefix, tokens, cross)


@torch.no_grad()
def align(model: WhisperModel, tokenizer: WhisperTokenizer, audio, text: str,
          language: str = "en") -> Transcript:  # fmt: skip
    """Time a known text in the audio (forced alignment, module docstring). The text is
    tokenised as Whisper writes it, after a space (" The animal ...")."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"text = {text!r}; expected the words spoken, a non-empty string")
    prefix = tokenizer.prefix(language)
    tokens = tokenizer.encode(" " + text.strip())
    if len(prefix) + len(tokens) > model.config.max_target_positions:
        raise ValueError(
            f"text has {len(tokens)} tokens; at most "
            f"{model.config.max_target_positions - len(prefix)} fit after the prefix"
        )
    mel = log_mel(audio, model.config.num_mel_bins)  # (80, 3000), checks the audio
    device = next(model.parameters()).device
    enc = model.encode(mel[None].to(device))  # (1, 1500, C)
    x = torch.tensor([prefix + tokens], device=device)  # (1, 4 + T)
    _, cross = model.decode(x, enc, output_cross_attentions=True)  # [(1, h, 4 + T, S)] per layer
    return _timed(model, tokenizer, audio, prefix, tokens, cross)


def _timed(model, tokenizer, audio, prefix, tokens, cross) -> Transcript:
    """The Transcript of tokens after prefix; cross holds each layer's cross-attention of the
    queries fed: the prefix, then at least every token but the end."""
    P, T = len(prefix), len(tokens)
    rows = [w[:, :, P - 1 : P + T].cpu() for w in cross]  # (1, h, T + 1, S): predicting rows
    times, words = [], []
    heads = model.config.alignment_heads
    if tokens and heads and rows[0].shape[2] == T + 1:
        frames = audio_frames(audio)
        reading = [w[:, :, 1:] for w in rows]  # (1, h, T, S): the queries reading each token
        times = [float(x) for x in token_times(reading, heads, frames)[0]]  # where each ends
        starts, ends = token_spans(rows, heads, frames)
        words = _words(tokenizer, tokens, starts, ends)
    return Transcript(tokens, tokenizer.decode(tokens), times, words, rows)


def audio_frames(audio) -> int:
    """The spectrogram columns (10 ms each) that the audio fills, at most 3000."""
    return -(-min(len(audio), N_SAMPLES) // HOP_LENGTH)


def _words(tokenizer, tokens, starts, ends):
    """(word, start, end): a word is the tokens from one whose text starts with a space (or the
    first) to the next; it starts where its first token starts and ends where its last ends."""
    return [
        (
            tokenizer.decode([tokens[i] for i in g]).strip(),
            round(float(starts[g[0]]), 2),
            round(float(ends[g[-1]]), 2),
        )
        for g in tokenizer.word_groups(tokens)
    ]
