"""mha_lib.speech.model: Whisper built from the series' parts equals transformers'
WhisperForConditionalGeneration on tiny random models of odd sizes (encoder states, logits,
every layer's cross-attention weights, with and without the cache) and on the packaged Whisper
base; a CTranslate2 file of odd sizes written from our weights reads back into the same model
(a non-zero W_K bias refused); its sinusoids are notebook 10's with another base; its inputs
are checked."""

import pytest
import torch

from mha_lib.speech.model import (
    WhisperConfig,
    WhisperModel,
    state_from_hf,
    state_to_hf,
    whisper_sinusoids,
)
from tests.speech.conftest import TINY, needs_whisper, tiny_pair


def tiny_inputs(seed=0, B=2, T=5):
    g = torch.Generator().manual_seed(seed)
    mel = torch.randn(B, TINY["num_mel_bins"], 2 * TINY["max_source_positions"], generator=g)
    tokens = torch.randint(0, TINY["vocab_size"], (B, T), generator=g)
    return mel, tokens


@pytest.mark.parametrize("seed", [0, 1])
def test_encoder_logits_and_cross_attention_equal_transformers(seed):
    hf, ours = tiny_pair(seed)
    mel, tokens = tiny_inputs(seed)
    with torch.no_grad():
        out = hf(input_features=mel, decoder_input_ids=tokens, output_attentions=True)
        enc = ours.encode(mel)
        logits, cross = ours.decode(tokens, enc, output_cross_attentions=True)
    torch.testing.assert_close(enc, out.encoder_last_hidden_state, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits, out.logits, rtol=1e-5, atol=1e-5)
    assert len(cross) == TINY["decoder_layers"]
    for w, ref in zip(cross, out.cross_attentions, strict=True):
        assert w.shape == (2, 3, 5, TINY["max_source_positions"])
        torch.testing.assert_close(w, ref, rtol=1e-5, atol=1e-6)
    assert ours.decode(tokens, enc).shape == (2, 5, TINY["vocab_size"])  # no flag: logits alone
    with torch.no_grad():
        last, last_cross = ours.decode(
            tokens, enc, output_cross_attentions=True, last_logits_only=True
        )
    assert last.shape == (2, 1, TINY["vocab_size"])  # what greedy decoding reads
    torch.testing.assert_close(last, out.logits[:, -1:], rtol=1e-5, atol=1e-5)
    assert [w.shape for w in last_cross] == [w.shape for w in cross]  # every row's weights
    S = TINY["max_source_positions"]
    for layer, ref in enumerate(out.encoder_attentions):  # each encoder layer's weights
        with torch.no_grad():
            w = ours.encode(mel, attention_of_layer=layer)
        assert w.shape == (2, 3, S, S)
        torch.testing.assert_close(w, ref, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"attention_of_layer = 9; expected 0 to 1, an encoder"):
        ours.encode(mel, attention_of_layer=9)


def test_decoding_token_by_token_with_the_cache_equals_all_at_once():
    _, ours = tiny_pair(2)
    mel, tokens = tiny_inputs(2, B=1, T=6)
    with torch.no_grad():
        enc = ours.encode(mel)
        whole, whole_cross = ours.decode(tokens, enc, output_cross_attentions=True)
        cache = ours.new_cache(enc)
        first, c1 = ours.decode(tokens[:, :3], enc, cache, output_cross_attentions=True)
        steps = [first] + [ours.decode(tokens[:, t : t + 1], enc, cache) for t in range(3, 6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(c1[0], whole_cross[0][:, :, :3], rtol=1e-5, atol=1e-6)
    assert cache.length == 6
    own, cross = cache.nbytes  # the self cache allocated for 11 positions; the cross cache fixed
    C, S, L = TINY["d_model"], TINY["max_source_positions"], TINY["decoder_layers"]
    assert own == 2 * L * 11 * C * 4 and cross == 2 * L * S * C * 4


def test_the_state_dict_maps_both_ways_with_no_key_left_over():
    hf, ours = tiny_pair(0)
    mapped = state_to_hf(ours.config, ours.state_dict())
    assert set(mapped) == set(hf.state_dict())
    back = state_from_hf(ours.config, hf.state_dict())
    assert set(back) == set(ours.state_dict())
    with pytest.raises(ValueError, match=r"model.encoder.conv1.weight is missing"):
        state_from_hf(ours.config, {})


def test_whisper_sinusoids_are_notebook_10s_with_another_base_and_the_sines_first():
    import math

    for N, C in [(1500, 512), (7, 12)]:
        pe = whisper_sinusoids(N, C)
        inv = torch.exp(-math.log(10000) / (C // 2 - 1) * torch.arange(C // 2, dtype=torch.float64))
        t = torch.arange(N, dtype=torch.float64)[:, None] * inv[None]
        torch.testing.assert_close(pe, torch.cat([t.sin(), t.cos()], dim=1), rtol=0, atol=1e-9)


def test_bad_inputs_are_refused_by_name():
    _, ours = tiny_pair(0)
    mel, tokens = tiny_inputs(0)
    with pytest.raises(ValueError, match=r"mel has shape \(5, 14\); expected \(B, 5, 14\)"):
        ours.encode(mel[0])
    with pytest.raises(ValueError, match=r"mel has 13 frames; expected 14"):
        ours.encode(mel[..., :13])
    enc = ours.encode(mel)
    with pytest.raises(ValueError, match=r"tokens has shape \(5,\); expected \(B, T\)"):
        ours.decode(tokens[0], enc)
    with pytest.raises(ValueError, match=r"enc has shape \(2, 7\); expected \(B, S, 12\)"):
        ours.decode(tokens, enc[..., 0])
    long = torch.zeros(1, 12, dtype=torch.long)
    with pytest.raises(ValueError, match=r"0 cached \+ 12 new tokens = 12; the decoder has 11"):
        ours.decode(long, enc[:1])
    with pytest.raises(ValueError, match=r"decoder_heads = 5 does not divide hidden_size = 12"):
        WhisperConfig(hidden_size=12, encoder_heads=3, decoder_heads=5)
    with pytest.raises(ValueError, match=r"alignment head \(6, 0\) is not a decoder head"):
        WhisperConfig(alignment_heads=((6, 0),))
    assert isinstance(
        WhisperModel(
            WhisperConfig(
                hidden_size=12,
                encoder_heads=3,
                decoder_heads=3,
                encoder_layers=1,
                decoder_layers=1,
                vocab_size=10,
                encoder_ffn_dim=8,
                decoder_ffn_dim=8,
            )
        ),
        WhisperModel,
    )


@needs_whisper
def test_the_packaged_weights_equal_transformers_holding_them(whisper_base, whisper_base_hf):
    model, tok = whisper_base
    hf, _ = whisper_base_hf
    g = torch.Generator().manual_seed(0)
    mel = torch.randn(1, 80, 3000, generator=g) * 0.3
    tokens = torch.tensor([tok.prefix("en") + tok.encode(" The animal didn't cross")])
    with torch.no_grad():
        out = hf(input_features=mel, decoder_input_ids=tokens, output_attentions=True)
        enc = model.encode(mel)
        logits, cross = model.decode(tokens, enc, output_cross_attentions=True)
    assert enc.shape == (1, 1500, 512) and logits.shape == (1, tokens.shape[1], 51865)
    torch.testing.assert_close(enc, out.encoder_last_hidden_state, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(logits, out.logits, rtol=1e-4, atol=1e-3)
    for w, ref in zip(cross, out.cross_attentions, strict=True):
        assert w.shape == (1, 8, tokens.shape[1], 1500)
        torch.testing.assert_close(w, ref, rtol=1e-4, atol=1e-5)


def ctranslate2_variables(ours: WhisperModel) -> dict:
    """Our weights in CTranslate2's layout (its names, fused projections, a zero K bias, the
    head counts as int8 scalars), as its converter writes them: the test of the other way."""
    import numpy as np

    from mha_lib.models.whisper import CTRANSLATE2, CTRANSLATE2_ZERO_PARTS

    state = {k: v.numpy() for k, v in ours.state_dict().items()}
    c = ours.config
    parts: dict[str, dict[int, np.ndarray]] = {}
    sizes: dict[str, int] = {}

    def put(name, part, n, value):
        parts.setdefault(name, {})[part] = value
        sizes[name] = n

    for key, (name, part, n) in CTRANSLATE2["model"].items():
        put(name, part, n, state[key])
    for stack, L in (("encoder", c.encoder_layers), ("decoder", c.decoder_layers)):
        for l in range(L):
            for key, (name, part, n) in CTRANSLATE2["layer"].items():
                if f"{stack}.layers.{l}.{key}" in state:
                    put(f"{stack}/layer_{l}/{name}", part, n, state[f"{stack}.layers.{l}.{key}"])
            for name, part, n in CTRANSLATE2_ZERO_PARTS:
                full = f"{stack}/layer_{l}/{name}"
                if full in parts:
                    put(full, part, n, np.zeros(c.hidden_size, np.float32))
    out = {name: np.concatenate([p[i] for i in range(sizes[name])]) for name, p in parts.items()}
    out["encoder/num_heads"] = np.array(c.encoder_heads, np.int8)
    out["decoder/num_heads"] = np.array(c.decoder_heads, np.int8)
    return out


def test_a_ctranslate2_file_of_odd_sizes_reads_back_into_the_same_model(tmp_path):
    from mha_lib.speech.ctranslate2 import read_ctranslate2, write_ctranslate2
    from mha_lib.speech.model import state_from_ctranslate2

    _, ours = tiny_pair(6)
    variables = ctranslate2_variables(ours)
    f = read_ctranslate2(write_ctranslate2(tmp_path / "model.bin", variables))
    config_json = {"alignment_heads": [[1, 0]], "suppress_ids": [5], "suppress_ids_begin": [2]}
    config = WhisperConfig.from_ctranslate2(f.variables, config_json)
    assert config == type(config)(
        **{
            **ours.config.__dict__,
            "alignment_heads": ((1, 0),),
            "suppress_tokens": (5,),
            "begin_suppress_tokens": (2,),
        }
    )
    state = state_from_ctranslate2(config, f)
    assert set(state) == set(ours.state_dict())
    assert all(torch.equal(state[k], v) for k, v in ours.state_dict().items())
    variables["decoder/layer_1/attention/linear_1/bias"][0] = 0.5  # a K bias in [b_K; b_V]
    f = read_ctranslate2(write_ctranslate2(tmp_path / "model.bin", variables))
    with pytest.raises(
        ValueError, match=r"decoder/layer_1/attention/linear_1/bias has a non-zero W_K bias"
    ):
        state_from_ctranslate2(config, f)
