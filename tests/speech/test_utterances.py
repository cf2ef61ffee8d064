"""mha_lib.speech.utterances: the stored utterances are 16 kHz int16 mono WAV files whose
hashes, lengths, texts and word starts the provenance records; with espeak-ng installed, one is
spoken again and comes out byte for byte the same, its word starts too."""

import hashlib
import json
import shutil
import wave
from pathlib import Path

import pytest

from mha_lib.speech.utterances import PROVENANCE, UTTERANCES, make_utterances, utterance

DATA = Path(__file__).resolve().parents[2] / "mha_lib" / "data"


def test_every_utterance_is_stored_with_its_provenance():
    provenance = json.loads((DATA / PROVENANCE).read_text())
    assert [r["file"] for r in provenance["utterances"]] == [f"nb17_{n}.wav" for n in UTTERANCES]
    assert provenance["espeak_ng_version"].startswith("eSpeak NG text-to-speech: 1.51")
    for name, record in zip(UTTERANCES, provenance["utterances"], strict=True):
        text, voice, speed = UTTERANCES[name]
        assert (record["text"], record["voice"], record["speed_wpm"]) == (text, voice, speed)
        assert record["command"].startswith(f"espeak-ng -v {voice} -s {speed} -w raw.wav ")
        path = DATA / record["file"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == record["sha256"]
        with wave.open(str(path)) as w:
            assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
            assert w.getnframes() == record["samples"]
        audio, same = utterance(name)
        assert audio.shape == (record["samples"],) and same == record
        assert 1.0 < record["seconds"] < 6.0  # short: seconds of speech each
        words = [w for w, _ in record["words"]]
        starts = [s for _, s in record["words"]]
        assert words == text.split() and starts[0] == 0.0
        assert starts == sorted(starts) and starts[-1] < record["seconds"]
    with pytest.raises(ValueError, match=r"name = 'x'; expected one of 'animal'"):
        utterance("x")


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_an_utterance_is_made_again_byte_for_byte(tmp_path):
    made = make_utterances(tmp_path, names=["cross"])
    assert (tmp_path / "nb17_cross.wav").read_bytes() == (DATA / "nb17_cross.wav").read_bytes()
    stored = json.loads((DATA / PROVENANCE).read_text())
    assert made["utterances"][0] == stored["utterances"][2]
