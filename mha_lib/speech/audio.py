"""Sound into what Whisper's encoder reads: 30 s of 16 kHz samples as a log-mel spectrogram.

Derived in notebook 17. Whisper hears 30 s at a time: the samples are padded with silence (or
cut) to 480,000, cut into windows of 400 samples (25 ms) every 160 (10 ms), each window's power
spectrum (a Hann window, 201 frequencies up to 8 kHz) summed into 80 mel bands (triangles on
Slaney's mel scale, each of unit area), then log10, clipped 8 below the loudest value (80 dB)
and scaled to about [-1, 1]: (80, 3000) numbers, one column per 10 ms. The encoder's stride-2
convolution then makes 1,500 frames of 20 ms. `log_mel` equals transformers'
`WhisperFeatureExtractor` (tests/speech/test_audio.py).

What it holds: `SAMPLE_RATE`, `N_SAMPLES`, `mel_filters()`, `log_mel(audio)`, `read_wav(path)`
(a PCM WAV file of 8, 16 or 32-bit integer samples, any rate and channel count, as 16 kHz
mono float32 in [-1, 1]: channels averaged, the rate changed by band-limited
interpolation) and `write_wav(path, audio)` (16 kHz mono int16).
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "HOP_LENGTH",
    "N_FFT",
    "N_MELS",
    "N_SAMPLES",
    "SAMPLE_RATE",
    "log_mel",
    "mel_filters",
    "read_wav",
    "write_wav",
]

SAMPLE_RATE = 16_000  # Hz
N_FFT = 400  # samples per window: 25 ms
HOP_LENGTH = 160  # samples between windows: 10 ms
N_MELS = 80
CHUNK_SECONDS = 30
N_SAMPLES = CHUNK_SECONDS * SAMPLE_RATE  # 480,000 samples: 3,000 frames


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above."""
    f = np.asarray(f, dtype=np.float64)
    mel = 3.0 * f / 200.0
    log_part = 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(f >= 1000.0, log_part, mel)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    f = 200.0 * m / 3.0
    return np.where(m >= 15.0, 1000.0 * np.exp(np.log(6.4) / 27.0 * (m - 15.0)), f)


def mel_filters(n_mels: int = N_MELS, n_fft: int = N_FFT, rate: int = SAMPLE_RATE) -> np.ndarray:
    """(n_fft/2 + 1, n_mels) float64: triangle m rises from mel point m to m + 1 and falls to
    m + 2 (n_mels + 2 points evenly spaced in mels from 0 Hz to rate/2), scaled by
    2 / (width in Hz) so each has unit area (Slaney's normalisation)."""
    fft_freqs = np.linspace(0, rate // 2, n_fft // 2 + 1)  # (F,)
    points = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(rate / 2), n_mels + 2))  # (M+2,)
    width = np.diff(points)  # (M+1,)
    slopes = points[None, :] - fft_freqs[:, None]  # (F, M+2)
    down = -slopes[:, :-2] / width[:-1]  # rising edge, (F, M)
    up = slopes[:, 2:] / width[1:]  # falling edge, (F, M)
    filters = np.maximum(0.0, np.minimum(down, up))  # (F, M)
    return filters * (2.0 / (points[2:] - points[:-2]))[None, :]


_FILTERS: dict[int, Tensor] = {}


def log_mel(audio, n_mels: int = N_MELS) -> Tensor:
    """(n_mels, 3000) float32 log-mel spectrogram of `audio`, 16 kHz mono samples (1-D, numpy or
    torch, any float dtype, at most 30 s: longer audio is cut, shorter padded with zeros), as
    transformers' WhisperFeatureExtractor computes it. Audio that is not 1-D, is empty or holds
    a NaN or an infinity is refused with a ValueError saying so."""
    x = torch.as_tensor(np.asarray(audio) if not isinstance(audio, Tensor) else audio)
    if x.dim() != 1:
        raise ValueError(
            f"audio has shape {tuple(x.shape)}; expected 1-D samples (N,) at 16 kHz mono "
            "(read_wav averages a file's channels)"
        )
    if x.numel() == 0:
        raise ValueError("audio is empty: expected at least one sample")
    if not x.is_floating_point():
        raise ValueError(
            f"audio has dtype {x.dtype}; expected float samples in [-1, 1] "
            "(integer PCM: divide by 32768, as read_wav does)"
        )
    if not bool(torch.isfinite(x).all()):
        raise ValueError("audio holds NaN or infinite samples; expected finite samples")
    x = x.detach().to("cpu", torch.float32)[:N_SAMPLES]
    x = torch.nn.functional.pad(x, (0, N_SAMPLES - x.numel()))  # (480000,)
    window = torch.hann_window(N_FFT)
    stft = torch.stft(x, N_FFT, HOP_LENGTH, window=window, return_complex=True)  # (201, 3001)
    power = (stft[..., :-1].abs() ** 2).contiguous()  # (201, 3000), the last frame dropped
    if n_mels not in _FILTERS:
        _FILTERS[n_mels] = torch.from_numpy(mel_filters(n_mels)).to(torch.float32)  # (201, M)
    mel = _FILTERS[n_mels].T @ power  # (M, 3000)
    log = torch.clamp(mel, min=1e-10).log10()
    log = torch.maximum(log, log.max() - 8.0)  # 80 dB below the loudest
    return (log + 4.0) / 4.0  # (M, 3000)


def read_wav(path: str | Path) -> np.ndarray:
    """A WAV file's samples as 16 kHz mono float32 in [-1, 1] (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is not a file")
    try:
        with wave.open(str(path), "rb") as w:
            channels, width, rate = w.getnchannels(), w.getsampwidth(), w.getframerate()
            raw = w.readframes(w.getnframes())
    except (wave.Error, EOFError, RuntimeError, OSError) as e:  # what `wave` raises on junk
        raise ValueError(
            f"{path.name} is not a PCM WAV file ({e}); expected integer samples (convert it, "
            "e.g. to 16-bit PCM, with any audio editor)"
        ) from e
    if width == 1:
        x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        x = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    elif width == 4:
        x = np.frombuffer(raw, "<i4").astype(np.float32) / 2147483648.0
    else:
        raise ValueError(f"{path.name} has {8 * width}-bit samples; expected 8, 16 or 32-bit")
    x = x.reshape(-1, channels).mean(axis=1)  # (N,) mono
    return _resample(x, rate, SAMPLE_RATE).astype(np.float32)


def _resample(x: np.ndarray, rate: int, target: int) -> np.ndarray:
    """x at `rate` Hz brought to `target` Hz by windowed-sinc interpolation (a low-pass at the
    lower of the two Nyquist frequencies, so nothing above it folds back)."""
    if rate == target or x.size == 0:
        return x
    n_out = round(x.size * target / rate)
    t = np.arange(n_out) * (rate / target)  # output instants, in input samples
    cutoff = min(1.0, target / rate)  # of the input's Nyquist frequency
    half = 16 / cutoff  # taps on each side
    out = np.zeros(n_out, dtype=np.float64)
    for start in range(0, n_out, 4096):  # a block of outputs at a time
        tb = t[start : start + 4096]
        lo = np.floor(tb - half).astype(np.int64)
        offsets = np.arange(int(2 * half) + 2)
        idx = lo[:, None] + offsets[None, :]  # (b, taps)
        dt = tb[:, None] - idx
        kernel = cutoff * np.sinc(cutoff * dt)  # the ideal low-pass, (b, taps)
        kernel *= 0.5 + 0.5 * np.cos(np.pi * np.clip(dt / half, -1, 1))  # Hann taper
        valid = (idx >= 0) & (idx < x.size)
        out[start : start + tb.size] = (
            np.where(valid, x[np.clip(idx, 0, x.size - 1)], 0) * kernel
        ).sum(1)
    return out


def write_wav(path: str | Path, audio) -> Path:
    """Write 16 kHz mono samples in [-1, 1] as a 16-bit WAV file (clipped to that range)."""
    x = np.clip(np.asarray(audio, dtype=np.float64), -1.0, 32767 / 32768)
    path = Path(path)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(np.round(x * 32768).astype("<i2").tobytes())
    return path
