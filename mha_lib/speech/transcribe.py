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

What it holds: `load_whisper`, `Transcript` (`.tokens`, `.text`, `.token_times`, `.words`
[(word, start, end)], `.cross_attentions`), `transcribe`, `greedy_tokens`.
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
from .timing import FRAME_SECONDS, token_times
from .tokenizer import WhisperTokenizer

__all__ = ["Transcript", "greedy_tokens", "load_whisper", "transcribe"]

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
    seconds, one per token; words: (word, start, end) in seconds, a word being the tokens from
    one that starts with a space to the next; cross_attentions: each layer's (1, h, T, S)
    cross-attention of the T text tokens."""

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
    rows = [w[:, :, len(prefix) :][:, :, : len(tokens)].cpu() for w in cross]  # (1, h, T, S)
    times, words = [], []
    heads = model.config.alignment_heads
    if tokens and heads and rows[0].shape[2] == len(tokens):
        n = min(len(audio), N_SAMPLES)
        num_frames = -(-n // HOP_LENGTH)  # the spectrogram columns the audio fills
        t, spans = token_times(rows, heads, num_frames)
        times = [float(x) for x in t]
        words = _words(tokenizer, tokens, times, spans)
    return Transcript(tokens, tokenizer.decode(tokens), times, words, rows)


def _words(tokenizer, tokens, times, spans):
    """(word, start, end): a word starts at a token whose text starts with a space (or the
    first); it starts at its first token's time and ends where its last token's frames end."""
    groups = []
    for i, t in enumerate(tokens):
        if not groups or tokenizer.token(t).startswith(" "):
            groups.append([])
        groups[-1].append(i)
    return [
        (
            tokenizer.decode([tokens[i] for i in g]).strip(),
            round(times[g[0]], 2),
            round(spans[g[-1]][1] * FRAME_SECONDS, 2),
        )
        for g in groups
    ]
