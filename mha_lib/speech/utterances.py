"""Notebook 17's utterances: twelve short sentences spoken by espeak-ng, stored as 16 kHz WAV,
with the time each word starts.

Derived in notebook 17, which reads them (it needs no espeak-ng). Made once at development time
by `python -m mha_lib.speech.utterances` (needs espeak-ng, a Debian package): each sentence is
spoken with its voice and speed into espeak-ng's 22,050 Hz WAV, brought to 16 kHz mono by
`read_wav` and written as int16 by `write_wav` into `mha_lib/data/nb17_<name>.wav`; the text,
voice, speed, exact command, espeak-ng's version and each file's sha256 go to
`mha_lib/data/nb17_utterances.json` (the provenance). Different voices and speeds, so the
alignment heads are checked on more than one speaker.

Each word's start is espeak-ng's own: the same sentence is spoken a second time through
libespeak-ng's C interface (`word_starts`, with ctypes), whose word events say at which sample
each word begins; `make_utterances` checks that this second rendering is, sample for sample, the
start of the command line's WAV (which goes on a little longer at the end), so the times are the
stored audio's. They are the reference the notebook times Whisper's words against.

What it holds: `UTTERANCES` (name -> (text, voice, words per minute)), `utterance(name)` ->
(16 kHz float32 samples, its provenance record: "words" holds [word, start in seconds] pairs),
`word_starts(text, voice, speed)`, `make_utterances(folder)`.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import multiprocessing
import shlex
import subprocess
import tempfile
import wave
from importlib import resources
from pathlib import Path

import numpy as np

from .audio import SAMPLE_RATE, read_wav, write_wav

__all__ = ["PROVENANCE", "UTTERANCES", "make_utterances", "utterance", "word_starts"]

UTTERANCES = {  # name: (text, espeak-ng voice, speed in words per minute)
    "animal": ("The animal didn't cross the street because it was too tired.", "en-us", 160),
    "attention": ("Attention lets every word look at every other word.", "en+f3", 140),
    "cross": ("The decoder listens to the encoder through cross attention.", "en-gb", 190),
    "seconds": ("Thirty seconds of sound become fifteen hundred frames.", "en-us+m3", 125),
    "heads": ("Each head, in its own way, learns to read the sentence.", "en-gb-x-rp", 150),
    "grows": ("The cache grows. One token, at every step.", "en-us+f2", 170),
    "queries": ("Queries ask questions, and keys answer them.", "en+m7", 140),
    "softmax": ("Scores become weights, row by row, through the softmax.", "en-gb-scotland", 155),
    "documents": ("Long documents make the attention matrix large. Very large.", "en-us+f4", 180),
    "whisper": ("Whisper hears the sound. Then it writes down the words.", "en-029", 150),
    "story": ("Small models, trained well, can follow a simple story.", "en-gb-x-gbclan", 165),
    "looks": ("The model looks back, word by word, at what it wrote.", "en-us-nyc", 135),
}
PROVENANCE = "nb17_utterances.json"


def _data() -> Path:
    return Path(str(resources.files("mha_lib") / "data"))


def utterance(name: str) -> tuple[np.ndarray, dict]:
    """(samples (N,) float32 at 16 kHz, its provenance record) of a stored utterance."""
    if name not in UTTERANCES:
        raise ValueError(f"name = {name!r}; expected one of {', '.join(map(repr, UTTERANCES))}")
    records = json.loads((_data() / PROVENANCE).read_text())["utterances"]
    record = next(r for r in records if r["file"] == f"nb17_{name}.wav")
    return read_wav(_data() / record["file"]), record


def espeak_command(text: str, voice: str, speed: int, out: str = "raw.wav") -> list[str]:
    return ["espeak-ng", "-v", voice, "-s", str(speed), "-w", out, text]


class _Event(ctypes.Structure):
    """libespeak-ng's espeak_EVENT (speak_lib.h)."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", ctypes.c_char * 8),
    ]


class _Voice(ctypes.Structure):
    """libespeak-ng's espeak_VOICE (speak_lib.h), to pick a voice by its language code."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("languages", ctypes.c_char_p),
        ("identifier", ctypes.c_char_p),
        ("gender", ctypes.c_ubyte),
        ("age", ctypes.c_ubyte),
        ("variant", ctypes.c_ubyte),
        ("xx1", ctypes.c_ubyte),
        ("score", ctypes.c_int),
        ("spare", ctypes.c_void_p),
    ]


_SYNCHRONOUS, _WORD_EVENT, _RATE, _CHARACTERS_UTF8 = 2, 1, 1, 1  # speak_lib.h's constants


def word_starts(text: str, voice: str, speed: int) -> tuple[np.ndarray, int, list[int]]:
    """espeak-ng speaking text through libespeak-ng: (its samples (n,) int16, their rate, the
    sample at which each of text's whitespace-separated words starts)."""
    lib = ctypes.CDLL("libespeak-ng.so.1")
    rate = lib.espeak_Initialize(_SYNCHRONOUS, 0, None, 0)
    lib.espeak_SetVoiceByProperties.argtypes = [ctypes.POINTER(_Voice)]
    chunks, starts = [], []

    def on_audio(wav, n, events):
        if n > 0:
            chunks.append(np.ctypeslib.as_array(wav, (n,)).copy())
        i = 0
        while events[i].type != 0:  # the list ends with espeak_EVENT_LIST_TERMINATED
            if events[i].type == _WORD_EVENT:
                starts.append(events[i].sample)
            i += 1
        return 0

    callback = ctypes.CFUNCTYPE(
        ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event)
    )(on_audio)
    lib.espeak_SetSynthCallback(callback)
    if lib.espeak_SetVoiceByName(voice.encode()) != 0:  # as the command line: a voice's name,
        language = _Voice(languages=voice.encode())  # or else a language code
        if lib.espeak_SetVoiceByProperties(ctypes.byref(language)) != 0:
            raise ValueError(f"voice = {voice!r}: libespeak-ng has no such voice")
    lib.espeak_SetParameter(_RATE, speed, 0)
    data = text.encode()
    lib.espeak_Synth(data, len(data) + 1, 0, _CHARACTERS_UTF8, 0, 0, None, None)
    lib.espeak_Synchronize()
    if len(starts) != len(text.split()):
        raise RuntimeError(
            f"espeak-ng reported {len(starts)} word starts for the {len(text.split())} words of "
            f"{text!r}"
        )
    return np.concatenate(chunks), rate, starts


def make_utterances(folder: str | Path | None = None, names=None) -> dict:
    """Speak each utterance with espeak-ng and store it, with the provenance file, in folder
    (default: mha_lib/data). Returns the provenance."""
    folder = _data() if folder is None else Path(folder)
    version = subprocess.run(
        ["espeak-ng", "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    records = []
    for name in names or UTTERANCES:
        text, voice, speed = UTTERANCES[name]
        with tempfile.TemporaryDirectory() as tmp:
            raw = Path(tmp) / "raw.wav"
            subprocess.run(espeak_command(text, voice, speed, str(raw)), check=True)
            audio = read_wav(raw)
            with wave.open(str(raw)) as w:
                cli = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
        with multiprocessing.get_context("spawn").Pool(1) as pool:  # a fresh libespeak-ng for
            samples, rate, starts = pool.apply(word_starts, (text, voice, speed))  # each, as -w
        if cli.size < samples.size or not np.array_equal(cli[: samples.size], samples):
            raise RuntimeError(f"{name}: libespeak-ng's audio is not the start of the command's")
        path = write_wav(folder / f"nb17_{name}.wav", audio)
        records.append(
            {
                "file": path.name,
                "text": text,
                "voice": voice,
                "speed_wpm": speed,
                "command": shlex.join(espeak_command(text, voice, speed)),
                "converted": "espeak-ng's 22,050 Hz WAV read by mha_lib.speech.audio.read_wav "
                "(windowed-sinc resampling to 16 kHz, mono) and written by write_wav (int16)",
                "samples": int(audio.size),
                "seconds": round(audio.size / SAMPLE_RATE, 3),
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                "words": [
                    [word, round(start / rate, 4)]
                    for word, start in zip(text.split(), starts, strict=True)
                ],
            }
        )
    provenance = {
        "what": "short utterances made with espeak-ng for notebook 17 (16 kHz int16 mono WAV), "
        "with each word's start (seconds) from libespeak-ng's word events",
        "made_by": "python -m mha_lib.speech.utterances",
        "espeak_ng_version": version,
        "utterances": records,
    }
    (folder / PROVENANCE).write_text(json.dumps(provenance, indent=1, ensure_ascii=False) + "\n")
    return provenance


if __name__ == "__main__":
    print(json.dumps(make_utterances(), indent=1))
