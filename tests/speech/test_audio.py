"""mha_lib.speech.audio: log_mel equals transformers' WhisperFeatureExtractor (its mel filters
exactly, the spectrogram of short, exact and too long audio), bad audio is refused with a
message saying what is wrong, and WAV files of other rates, widths and channel counts come back
as 16 kHz mono."""

import wave

import numpy as np
import pytest
import torch

from mha_lib.speech.audio import N_SAMPLES, log_mel, mel_filters, read_wav, write_wav


def test_the_mel_filters_are_transformers():
    from transformers import WhisperFeatureExtractor

    ref = WhisperFeatureExtractor().mel_filters
    assert mel_filters().shape == (201, 80)
    np.testing.assert_allclose(mel_filters(), ref, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("n", [1, 16_000 * 3 + 7, N_SAMPLES, N_SAMPLES + 12_345])
def test_log_mel_equals_whisper_feature_extractor(n):
    from transformers import WhisperFeatureExtractor

    audio = (np.random.default_rng(n).standard_normal(n) * 0.1).astype(np.float32)
    ref = WhisperFeatureExtractor()(audio, sampling_rate=16000, return_tensors="pt")
    ours = log_mel(audio)
    assert ours.shape == (80, 3000) and ours.dtype == torch.float32
    torch.testing.assert_close(ours, ref.input_features[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(log_mel(torch.from_numpy(audio).double()), ours, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "audio, message",
    [
        (np.zeros((2, 100), np.float32), r"audio has shape \(2, 100\); expected 1-D samples"),
        (np.zeros(0, np.float32), r"audio is empty"),
        (np.array([0.0, np.nan], np.float32), r"audio holds NaN or infinite samples"),
        (np.array([0.0, np.inf]), r"audio holds NaN or infinite samples"),
        (np.zeros(10, np.int16), r"audio has dtype torch.int16; expected float samples"),
    ],
)
def test_bad_audio_is_refused_saying_why(audio, message):
    with pytest.raises(ValueError, match=message):
        log_mel(audio)


def _write(path, samples, rate, channels, width):
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(samples.tobytes())


def test_read_wav_brings_any_rate_and_channels_to_16k_mono(tmp_path):
    rate = 22_050
    t = np.arange(rate) / rate  # 1 s
    tone = 0.5 * np.sin(2 * np.pi * 440 * t)
    stereo = np.stack([tone, tone], axis=1)
    _write(tmp_path / "a.wav", np.round(stereo * 32767).astype("<i2"), rate, 2, 2)
    x = read_wav(tmp_path / "a.wav")
    assert x.dtype == np.float32 and x.shape == (16_000,)
    expected = 0.5 * np.sin(2 * np.pi * 440 * np.arange(16_000) / 16_000)
    assert np.abs(x - expected)[200:-200].max() < 2e-3  # the edges aside (no samples outside)
    write_wav(tmp_path / "b.wav", x)
    np.testing.assert_allclose(read_wav(tmp_path / "b.wav"), x, atol=1 / 32768)
    _write(tmp_path / "c.wav", np.full(8, 200, np.uint8), 16_000, 1, 1)
    np.testing.assert_allclose(read_wav(tmp_path / "c.wav"), (200 - 128) / 128)
    _write(tmp_path / "d.wav", np.zeros(8, "<i2").view(np.uint8)[:12], 16_000, 1, 3)
    with pytest.raises(ValueError, match=r"has 24-bit samples; expected 8, 16 or 32-bit"):
        read_wav(tmp_path / "d.wav")
    (tmp_path / "e.wav").write_bytes(b"RIFF0000WAVEnot a wav file")
    with pytest.raises(ValueError, match=r"e.wav is not a PCM WAV file"):
        read_wav(tmp_path / "e.wav")
    with pytest.raises(FileNotFoundError, match=r"nothing.wav is not a file"):
        read_wav(tmp_path / "nothing.wav")
