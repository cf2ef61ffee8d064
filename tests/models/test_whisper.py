"""mha_lib.models.whisper: Whisper's options read from a transformers WhisperConfig and from the
packaged CTranslate2 file agree; every weight row names a tensor transformers has (and every
tensor of transformers' state dict is named, the tied head aside); CTranslate2's names cover
the file with its fused projections split; config_from_hf refuses it naming its reader."""

import pytest

from mha_lib.models import ARCHITECTURES, config_from_hf
from mha_lib.models.spec import SPLITS
from mha_lib.models.whisper import ARCHITECTURE, CTRANSLATE2, hf_options
from tests.speech.conftest import TINY, needs_whisper, tiny_pair


def test_it_is_found_by_name_and_reads_no_gguf():
    assert ARCHITECTURES["whisper"] is ARCHITECTURE
    assert ARCHITECTURE.gguf_options is None and ARCHITECTURE.config_class == "whisper"
    assert ARCHITECTURE.layer_weights == ()  # not the decoder of mha_lib.nn.decoder


def test_config_from_hf_refuses_it_naming_its_reader():
    from transformers import WhisperConfig

    for config in (WhisperConfig(), WhisperConfig().to_dict()):
        with pytest.raises(
            ValueError,
            match=r"is an encoder-decoder: read it with mha_lib.speech.WhisperConfig.from_hf",
        ):
            config_from_hf(config)


def test_the_options_read_from_transformers():
    from transformers import WhisperConfig as HFConfig

    from mha_lib.speech.model import WhisperConfig

    options = hf_options(HFConfig(**TINY))
    assert set(options) == set(ARCHITECTURE.options)
    c = WhisperConfig(**options)
    assert (
        WhisperConfig.from_hf(HFConfig(**TINY))
        == c
        == WhisperConfig.from_hf(HFConfig(**TINY).to_dict())
    )
    assert (c.hidden_size, c.encoder_heads, c.decoder_layers, c.max_source_positions) == (
        12,
        3,
        3,
        7,
    )
    assert c.suppress_tokens == (5, 9) and c.begin_suppress_tokens == (2, 7)
    with pytest.raises(
        ValueError, match=r"activation_function = 'relu'; Whisper's MLPs use 'gelu'"
    ):
        hf_options(HFConfig(**TINY, activation_function="relu"))
    with pytest.raises(ValueError, match=r"scale_embedding = True"):
        hf_options(HFConfig(**TINY, scale_embedding=True))


def test_the_rows_name_every_tensor_of_transformers_and_of_ours():
    hf, ours = tiny_pair(0)
    rows = ARCHITECTURE.encoder_decoder_weights
    assert set(rows) == {"model", "encoder layer", "decoder layer"}
    named = {w.hf for w in rows["model"]}
    for stack, n in (("encoder", TINY["encoder_layers"]), ("decoder", TINY["decoder_layers"])):
        named |= {
            f"model.{stack}.layers.{l}.{w.hf}" for l in range(n) for w in rows[f"{stack} layer"]
        }
    assert set(hf.state_dict()) - named == {"proj_out.weight"}  # the tied head
    assert named <= set(hf.state_dict())
    ours_named = {w.ours for w in rows["model"]}
    for stack, n in (("encoder", TINY["encoder_layers"]), ("decoder", TINY["decoder_layers"])):
        ours_named |= {
            f"{stack}.layers.{l}.{w.ours}" for l in range(n) for w in rows[f"{stack} layer"]
        }
    assert ours_named == set(ours.state_dict())
    for group in rows.values():
        assert all(w.gguf is None and w.split in SPLITS for w in group)
        norms = {w.ours for w in group if w.norm}
        assert all(n.split(".")[-2].startswith("norm") for n in norms)
        assert all(n.endswith(".weight") for n in norms)


@needs_whisper
def test_ctranslate2s_names_cover_the_packaged_file():
    from mha_lib.llm.model_files import find_model_file
    from mha_lib.speech.ctranslate2 import read_ctranslate2

    f = read_ctranslate2(find_model_file("whisper"))
    used = {name for name, _, _ in CTRANSLATE2["model"].values()}
    for stack in ("encoder", "decoder"):
        for l in range(6):
            for ours, (name, _, _) in CTRANSLATE2["layer"].items():
                if stack == "encoder" and ours.split(".")[0] in ("cross_attn", "norm_cross"):
                    continue
                used.add(f"{stack}/layer_{l}/{name}")
    scalars = {n for n, t in f.variables.items() if t.dim() == 0}  # options, not weights
    assert set(f.variables) - scalars == used
    assert scalars == {  # CTranslate2's options of the layers it builds, read by name
        "decoder/activation",
        "decoder/alibi",
        "decoder/alignment_heads",
        "decoder/alignment_layer",
        "decoder/num_heads",
        "decoder/pre_norm",
        "decoder/scale_embeddings",
        "decoder/start_from_zero_embedding",
        "encoder/num_heads",
    }
    assert int(f["decoder/pre_norm"]) == 1 and int(f["decoder/scale_embeddings"]) == 0


@needs_whisper
def test_the_options_read_from_the_file_are_whisper_base(whisper_base):
    model, _ = whisper_base
    c = model.config
    assert (c.vocab_size, c.hidden_size, c.encoder_layers, c.decoder_layers) == (51865, 512, 6, 6)
    assert (c.encoder_heads, c.decoder_heads, c.encoder_ffn_dim) == (8, 8, 2048)
    assert (c.max_source_positions, c.max_target_positions, c.num_mel_bins) == (1500, 448, 80)
    assert len(c.alignment_heads) == 8 and c.alignment_heads[0] == (3, 1)
    assert len(c.suppress_tokens) == 88 and c.begin_suppress_tokens == (220, 50257)
