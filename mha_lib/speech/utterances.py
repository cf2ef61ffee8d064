"""Notebook 17's utterances: four short sentences spoken by espeak-ng, stored as 16 kHz WAV.

Derived in notebook 17, which reads them (it needs no espeak-ng). Made once at development time
by `python -m mha_lib.speech.utterances` (needs espeak-ng, a Debian package): each sentence is
spoken with its voice and speed into espeak-ng's 22,050 Hz WAV, brought to 16 kHz mono by
`read_wav` and written as int16 by `write_wav` into `mha_lib/data/nb17_<name>.wav`; the text,
voice, speed, exact command, espeak-ng's version and each file's sha256 go to
`mha_lib/data/nb17_utterances.json` (the provenance). Different voices and speeds, so the
alignment heads are checked on more than one speaker.

What it holds: `UTTERANCES` (name -> (text, voice, words per minute)), `utterance(name)` ->
(16 kHz float32 samples, its provenance record), `make_utterances(folder)`.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

import numpy as np

from .audio import SAMPLE_RATE, read_wav, write_wav

__all__ = ["PROVENANCE", "UTTERANCES", "make_utterances", "utterance"]

UTTERANCES = {  # name: (text, espeak-ng voice, speed in words per minute)
    "animal": ("The animal didn't cross the street because it was too tired.", "en-us", 160),
    "attention": ("Attention lets every word look at every other word.", "en+f3", 140),
    "cross": ("The decoder listens to the encoder through cross attention.", "en-gb", 190),
    "seconds": ("Thirty seconds of sound become fifteen hundred frames.", "en-us+m3", 125),
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
            }
        )
    provenance = {
        "what": "short utterances made with espeak-ng for notebook 17 (16 kHz int16 mono WAV)",
        "made_by": "python -m mha_lib.speech.utterances",
        "espeak_ng_version": version,
        "utterances": records,
    }
    (folder / PROVENANCE).write_text(json.dumps(provenance, indent=1, ensure_ascii=False) + "\n")
    return provenance


if __name__ == "__main__":
    print(json.dumps(make_utterances(), indent=1))
