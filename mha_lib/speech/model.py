"""Whisper as the series builds it: notebook 04's encoder-decoder, on OpenAI's weights.

Derived in notebook 17; what makes it Whisper is `mha_lib.models.whisper` (its options, its
weights' names in transformers and in CTranslate2's file). Built from the series' parts:
- attention: each sublayer projects its queries, keys and values (`Attention`: W_Q, W_K with no
  bias, W_V, W_O, as transformers names them) and attends through notebook 04's
  `mha_lib.pytorch.explicit_attention` when its weights are wanted, torch's fused kernel
  otherwise; the encoder's is bidirectional, the decoder's self-attention causal through
  notebook 08's `KVCache` and `cached_attention` (a cache that grows by one token per step),
  its cross-attention reading keys and values of the encoder's output computed ONCE per
  utterance (`CrossCache`: 2 · L · B · 1500 · C numbers, fixed);
- positions: the encoder's are notebook 10's sinusoids (`whisper_sinusoids`: base
  10000^(C/(C-2)), the sines first), the decoder's learned (448 of them);
- pre-norm blocks: x + sublayer(LayerNorm(x)), a GELU MLP of 4C.

What it holds: `WhisperConfig` (`from_hf`, `from_ctranslate2`), `WhisperModel`
(`encode(mel)` (B, 80, 3000) -> (B, 1500, C), or one encoder layer's attention weights;
`decode(tokens, enc, cache=None, output_cross_attentions=False, last_logits_only=False)` ->
logits (B, T, V), or (logits, [(B, h, T, 1500) per layer]); `new_cache(enc, max_len)`),
`WhisperCache`, `whisper_sinusoids`, `state_from_ctranslate2`, `state_from_hf`, `state_to_hf`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..models.whisper import (
    ARCHITECTURE,
    CTRANSLATE2,
    CTRANSLATE2_ZERO_PARTS,
    ctranslate2_options,
)
from ..nn.kv_cache import KVCache, cached_attention
from ..positions import sinusoidal_positions
from ..pytorch import explicit_attention, merge_heads, split_heads

__all__ = [
    "WhisperCache",
    "WhisperConfig",
    "WhisperModel",
    "state_from_ctranslate2",
    "state_from_hf",
    "state_to_hf",
    "whisper_sinusoids",
]


@dataclass(frozen=True)
class WhisperConfig:
    """Whisper's sizes and generation tables (each field described in
    `mha_lib.models.whisper.OPTIONS`); defaults are Whisper base's."""

    vocab_size: int = 51865
    num_mel_bins: int = 80
    hidden_size: int = 512
    encoder_layers: int = 6
    encoder_heads: int = 8
    encoder_ffn_dim: int = 2048
    decoder_layers: int = 6
    decoder_heads: int = 8
    decoder_ffn_dim: int = 2048
    max_source_positions: int = 1500
    max_target_positions: int = 448
    alignment_heads: tuple = ()
    suppress_tokens: tuple = ()
    begin_suppress_tokens: tuple = ()

    def __post_init__(self) -> None:
        for name, heads in (
            ("encoder_heads", self.encoder_heads),
            ("decoder_heads", self.decoder_heads),
        ):
            if self.hidden_size % heads:
                raise ValueError(
                    f"{name} = {heads} does not divide hidden_size = {self.hidden_size}"
                )
        for layer, head in self.alignment_heads:
            if not (0 <= layer < self.decoder_layers and 0 <= head < self.decoder_heads):
                raise ValueError(
                    f"alignment head ({layer}, {head}) is not a decoder head: expected layer < "
                    f"{self.decoder_layers}, head < {self.decoder_heads}"
                )

    @classmethod
    def from_hf(cls, config) -> WhisperConfig:
        """From transformers' WhisperConfig (or a dict of its fields); its alignment heads and
        suppressed tokens when it carries them."""
        if isinstance(config, dict):
            from types import SimpleNamespace

            config = SimpleNamespace(**config)
        return cls(**ARCHITECTURE.hf_options(config))

    @classmethod
    def from_ctranslate2(cls, variables: dict, config_json: dict) -> WhisperConfig:
        """From a CTranslate2 file's variables and its config.json."""
        return cls(**ctranslate2_options(variables, config_json))


def whisper_sinusoids(N: int, C: int) -> Tensor:
    """(N, C) float64: Whisper's encoder positions, notebook 10's sinusoids with two changes:
    the frequencies 10000^(-i/(C/2 - 1)) (so the lowest is exactly 1/10000), which are
    `sinusoidal_positions`' base^(-2i/C) with base = 10000^(C/(C-2)); and all the sines first,
    then all the cosines (ours interleave them)."""
    pe = sinusoidal_positions(N, C, base=10000.0 ** (C / (C - 2)))  # (N, C), sin/cos interleaved
    return torch.cat([pe[:, 0::2], pe[:, 1::2]], dim=1)  # (N, C): sines, then cosines


class Attention(nn.Module):
    """One attention sublayer: W_Q, W_K (no bias), W_V, W_O of width C = h · d."""

    def __init__(self, C: int, h: int) -> None:
        super().__init__()
        self.h = h
        self.q_proj = nn.Linear(C, C)
        self.k_proj = nn.Linear(C, C, bias=False)
        self.v_proj = nn.Linear(C, C)
        self.out_proj = nn.Linear(C, C)

    def keys_values(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(B, S, C) -> k, v (B, h, S, d)."""
        return split_heads(self.k_proj(x), self.h), split_heads(self.v_proj(x), self.h)

    def attend(self, x: Tensor, k: Tensor, v: Tensor, need_weights: bool = False):
        """Queries of x (B, T, C) attend to every key k, v (B, h, S, d), no mask: the encoder's
        self-attention and the cross-attention. Returns (B, T, C) and (B, h, T, S) or None."""
        q = split_heads(self.q_proj(x), self.h)  # (B, h, T, d)
        if need_weights:
            heads, weights = explicit_attention(q, k, v, None, 0.0)  # (B, h, T, d), (B, h, T, S)
        else:
            heads, weights = F.scaled_dot_product_attention(q, k, v), None
        return self.out_proj(merge_heads(heads)), weights  # (B, T, C)

    def causal(self, x: Tensor, cache: KVCache) -> Tensor:
        """The decoder's self-attention: x (B, n, C), the n newest tokens, see every cached
        token and each other causally (notebook 08's `cached_attention`)."""
        q = split_heads(self.q_proj(x), self.h)  # (B, h, n, d)
        k, v = self.keys_values(x)  # (B, h, n, d)
        return self.out_proj(merge_heads(cached_attention(q, k, v, cache)))  # (B, n, C)


class MLP(nn.Module):
    def __init__(self, C: int, hidden: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(C, hidden), nn.Linear(hidden, C)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class EncoderLayer(nn.Module):
    """x + SelfAttention(LN(x)), then x + MLP(LN(x)): bidirectional, pre-norm."""

    def __init__(self, c: WhisperConfig) -> None:
        super().__init__()
        C = c.hidden_size
        self.norm_self, self.self_attn = nn.LayerNorm(C), Attention(C, c.encoder_heads)
        self.norm_mlp, self.mlp = nn.LayerNorm(C), MLP(C, c.encoder_ffn_dim)

    def forward(self, x: Tensor) -> Tensor:
        y = self.norm_self(x)
        x = x + self.self_attn.attend(y, *self.self_attn.keys_values(y))[0]
        return x + self.mlp(self.norm_mlp(x))


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention to the encoder, MLP: three pre-norm sublayers."""

    def __init__(self, c: WhisperConfig) -> None:
        super().__init__()
        C = c.hidden_size
        self.norm_self, self.self_attn = nn.LayerNorm(C), Attention(C, c.decoder_heads)
        self.norm_cross, self.cross_attn = nn.LayerNorm(C), Attention(C, c.decoder_heads)
        self.norm_mlp, self.mlp = nn.LayerNorm(C), MLP(C, c.decoder_ffn_dim)

    def forward(self, x: Tensor, self_cache: KVCache, cross_kv, need_weights: bool):
        x = x + self.self_attn.causal(self.norm_self(x), self_cache)
        y, weights = self.cross_attn.attend(self.norm_cross(x), *cross_kv, need_weights)
        x = x + y
        return x + self.mlp(self.norm_mlp(x)), weights


@dataclass
class WhisperCache:
    """What decoding one batch of utterances keeps: per decoder layer, a self-attention
    `KVCache` that grows by one token per step, and the cross-attention's keys and values of
    the encoder's output, computed once (B, h, 1500, d) each."""

    self_attn: list[KVCache]
    cross: list[tuple[Tensor, Tensor]]

    @property
    def length(self) -> int:
        return self.self_attn[0].length

    @property
    def nbytes(self) -> tuple[int, int]:
        """(the self-attention caches' bytes, allocated for max_len tokens; the cross cache's)."""
        own = sum(c.nbytes for c in self.self_attn)
        cross = sum(
            k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in self.cross
        )
        return own, cross


class Encoder(nn.Module):
    def __init__(self, c: WhisperConfig) -> None:
        super().__init__()
        C = c.hidden_size
        self.conv1 = nn.Conv1d(c.num_mel_bins, C, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(C, C, kernel_size=3, stride=2, padding=1)
        self.positions = nn.Parameter(
            whisper_sinusoids(c.max_source_positions, C).float(), requires_grad=False
        )  # (1500, C)
        self.layers = nn.ModuleList(EncoderLayer(c) for _ in range(c.encoder_layers))
        self.norm = nn.LayerNorm(C)


class Decoder(nn.Module):
    def __init__(self, c: WhisperConfig) -> None:
        super().__init__()
        C = c.hidden_size
        self.embed = nn.Embedding(c.vocab_size, C)
        self.positions = nn.Parameter(torch.zeros(c.max_target_positions, C))  # (448, C)
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.decoder_layers))
        self.norm = nn.LayerNorm(C)


class WhisperModel(nn.Module):
    """Whisper: `encode` the spectrogram once, then `decode` tokens against it (module
    docstring). Its parameters are named as `mha_lib.models.whisper`'s rows say."""

    def __init__(self, config: WhisperConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)

    def encode(self, mel: Tensor, attention_of_layer: int | None = None):
        """mel (B, n_mels, 2 · S) -> the encoder's output (B, S, C), S = 1500 for 30 s. With
        attention_of_layer = l, the weights (B, h, S, S) of encoder layer l's self-attention
        instead (the layers after it are not run)."""
        c = self.config
        if not isinstance(mel, Tensor) or mel.dim() != 3 or mel.shape[1] != c.num_mel_bins:
            got = tuple(mel.shape) if isinstance(mel, Tensor) else type(mel).__name__
            raise ValueError(
                f"mel has shape {got}; expected (B, {c.num_mel_bins}, {2 * c.max_source_positions})"
                " (log_mel gives one utterance's (n_mels, 3000): add a batch axis)"
            )
        if mel.shape[2] != 2 * c.max_source_positions:
            raise ValueError(
                f"mel has {mel.shape[2]} frames; expected {2 * c.max_source_positions} "
                f"(30 s: log_mel pads every utterance to it)"
            )
        e = self.encoder
        x = F.gelu(e.conv1(mel))  # (B, C, 3000)
        x = F.gelu(e.conv2(x)).transpose(1, 2)  # (B, 1500, C): stride 2, 20 ms a frame
        # contiguous: the transpose's layout would otherwise follow x through every residual
        # sum, and each sublayer would copy it again (5 % of the encoder's time; same values)
        x = (x + e.positions).contiguous()  # (B, 1500, C)
        if attention_of_layer is not None:
            if not 0 <= attention_of_layer < c.encoder_layers:
                raise ValueError(
                    f"attention_of_layer = {attention_of_layer}; expected 0 to "
                    f"{c.encoder_layers - 1}, an encoder layer"
                )
            for layer in e.layers[:attention_of_layer]:
                x = layer(x)
            attn = e.layers[attention_of_layer].self_attn
            y = e.layers[attention_of_layer].norm_self(x)  # (B, S, C)
            return attn.attend(y, *attn.keys_values(y), need_weights=True)[1]  # (B, h, S, S)
        for layer in e.layers:
            x = layer(x)
        return e.norm(x)

    def new_cache(self, enc: Tensor, max_len: int | None = None) -> WhisperCache:
        """A cache for decoding against `enc` (B, S, C): the cross-attention's keys and values
        of every layer, computed here once, and empty self-attention caches of max_len tokens
        (default: the decoder's positions, 448)."""
        c = self.config
        max_len = max_len or c.max_target_positions
        B, d = enc.shape[0], c.hidden_size // c.decoder_heads
        own = [
            KVCache(B, c.decoder_heads, max_len, d, dtype=enc.dtype, device=enc.device)
            for _ in self.decoder.layers
        ]
        cross = [
            tuple(t.contiguous() for t in layer.cross_attn.keys_values(enc))  # (B, h, S, d) each
            for layer in self.decoder.layers
        ]
        return WhisperCache(own, cross)

    def decode(
        self,
        tokens: Tensor,
        enc: Tensor,
        cache: WhisperCache | None = None,
        output_cross_attentions: bool = False,
        last_logits_only: bool = False,
    ):
        """tokens (B, T) after the cache's tokens -> logits (B, T, V); with
        output_cross_attentions, (logits, a list of each layer's cross-attention weights
        (B, h, T, S)). Without a cache, a fresh one for these tokens (thrown away). With
        last_logits_only, the logits of the last token alone (B, 1, V), all greedy decoding
        reads: the head is a (V, C) matrix, and each row more costs another pass over it."""
        c = self.config
        if not isinstance(tokens, Tensor) or tokens.dim() != 2:
            got = tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
            raise ValueError(f"tokens has shape {got}; expected (B, T) token ids")
        if not isinstance(enc, Tensor) or enc.dim() != 3 or enc.shape[2] != c.hidden_size:
            got = tuple(enc.shape) if isinstance(enc, Tensor) else type(enc).__name__
            raise ValueError(
                f"enc has shape {got}; expected (B, S, {c.hidden_size}), encode's output"
            )
        B, T = tokens.shape
        if cache is None:
            cache = self.new_cache(enc, T)
        start = cache.length
        if start + T > c.max_target_positions:
            raise ValueError(
                f"{start} cached + {T} new tokens = {start + T}; the decoder has "
                f"{c.max_target_positions} positions"
            )
        for kv in cache.self_attn:
            kv.check(B, T)
        dec = self.decoder
        x = dec.embed(tokens) + dec.positions[start : start + T]  # (B, T, C)
        weights = []
        for layer, own, cross in zip(dec.layers, cache.self_attn, cache.cross, strict=True):
            x, w = layer(x, own, cross, output_cross_attentions)
            weights.append(w)
        if last_logits_only:
            x = x[:, -1:]  # (B, 1, C)
        logits = dec.norm(x) @ dec.embed.weight.T  # (B, T, V): the output head is the embedding
        return (logits, weights) if output_cross_attentions else logits


def _layer_names(config: WhisperConfig):
    """(our full name, transformers' full name, CTranslate2's (name, part, parts) or None)."""
    rows = ARCHITECTURE.encoder_decoder_weights
    for w in rows["model"]:
        yield w.ours, w.hf, CTRANSLATE2["model"][w.ours]
    for stack, n in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        for l in range(n):
            for w in rows[f"{stack} layer"]:
                name, part, parts = CTRANSLATE2["layer"][w.ours]
                yield (
                    f"{stack}.layers.{l}.{w.ours}",
                    f"model.{stack}.layers.{l}.{w.hf}",
                    (f"{stack}/layer_{l}/{name}", part, parts),
                )


def state_from_ctranslate2(config: WhisperConfig, variables) -> dict:
    """Our state dict from a CTranslate2 file's variables (`CTranslate2File` or a dict): each
    fused tensor split into its W_Q, W_K, W_V; a zero K bias checked to be zero (transformers
    and ours have none)."""
    get = variables.__getitem__
    out = {}
    for ours, _, (name, part, parts) in _layer_names(config):
        out[ours] = get(name).chunk(parts, dim=0)[part] if parts > 1 else get(name)
    for stack, n in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        for l in range(n):
            for name, part, parts in CTRANSLATE2_ZERO_PARTS:
                full = f"{stack}/layer_{l}/{name}"
                if stack == "encoder" and name.startswith("attention/"):
                    continue
                if bool(get(full).chunk(parts)[part].any()):
                    raise ValueError(f"{full} has a non-zero W_K bias, which Whisper has not")
    return out


def state_from_hf(config: WhisperConfig, state: dict) -> dict:
    """Our state dict from transformers' WhisperForConditionalGeneration's (proj_out.weight is
    the embedding, tied)."""
    missing = [hf for _, hf, _ in _layer_names(config) if hf not in state]
    if missing:
        raise ValueError(f"{missing[0]} is missing from the state dict ({len(missing)} missing)")
    return {ours: state[hf] for ours, hf, _ in _layer_names(config)}


def state_to_hf(config: WhisperConfig, state: dict) -> dict:
    """transformers' state dict from ours, proj_out.weight (the tied head) included."""
    out = {hf: state[ours] for ours, hf, _ in _layer_names(config)}
    out["proj_out.weight"] = state["decoder.embed.weight"]
    return out
