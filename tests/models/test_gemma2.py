"""mha_lib.models.gemma2: soft caps, a query scale not 1/√d, one sliding layer to each global
one, read from a transformers config and from a GGUF file, equal to transformers (logits and
greedy tokens through the caches, from a file); the 27B's score scale as llama.cpp sets it."""

import torch

from mha_lib.models import ARCHITECTURES
from mha_lib.nn import generate
from mha_lib.testing import assert_close
from tests.models.checks import ATOL, check_gguf_reader, check_hf_reader, options_set


def test_read_from_transformers_equals_transformers():
    config = check_hf_reader("gemma2")
    assert options_set(config) == set(ARCHITECTURES["gemma2"].options)  # every one it names
    assert config.layer_types[:2] == ("sliding_attention", "full_attention")
    assert config.query_scale == 20**-0.5  # query_pre_attn_scalar, not d = 16


def test_a_file_reads_as_transformers_config_and_loads_equal_to_transformers(tmp_path):
    """The 2B's and 9B's scale, 1/√d (query_pre_attn_scalar = d = 16 here)."""
    from mha_lib.llm.loader import load_gguf
    from tests.hf_models import random_hf

    config = check_gguf_reader("gemma2", tmp_path, query_pre_attn_scalar=16)
    assert config.attn_logit_softcap == 3.0 and config.final_logit_softcap == 5.0
    hf = random_hf(
        "gemma2",
        vocab_size=config.vocab_size,
        hidden_size=64,
        dtype=torch.float32,
        query_pre_attn_scalar=16,
    )
    ours, _ = load_gguf(tmp_path / "gemma2.gguf")  # the file check_gguf_reader wrote from hf
    ids = torch.randint(0, config.vocab_size, (2, 13), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert_close(ours(ids), hf(ids).logits, rtol=0, atol=ATOL)  # past the window of 5
    prompt = ids[:1, :7]
    out = generate(ours, prompt, 10, stop_ids=())
    expected = hf.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=10,
        min_new_tokens=10,
        do_sample=False,
        pad_token_id=0,
    )
    assert out.tolist() == expected.tolist()


def test_the_27b_scales_its_scores_by_one_over_root_c_over_h(tmp_path):
    """llama.cpp scales the 27B's (46 layers) scores by 1/√(C/h), transformers'
    query_pre_attn_scalar 144 = 4608/32 there. Here d = 16 and C/h = 64/4 = 16 would not tell
    them apart, so the heads are of 32: C/h = 16 against d = 32."""
    from mha_lib.llm.gguf_file import GGUFFile
    from mha_lib.models import config_from_gguf
    from tests.gguf_files import vocab_size, write_gguf
    from tests.hf_models import random_hf

    hf = random_hf(
        "gemma2",
        vocab_size=vocab_size("gemma2"),
        hidden_size=64,
        dtype=torch.float32,
        num_layers=46,
    )
    hf.config.head_dim = 32  # only the file's key_length is read here, not the weights
    write_gguf(tmp_path / "g46.gguf", hf, qtype="F32", embed_qtype="F32", skip=_all(hf))
    with GGUFFile(tmp_path / "g46.gguf") as f:
        config = config_from_gguf(f)
    assert config.num_layers == 46 and config.head_dim == 32
    assert config.query_scale == 16**-0.5  # 1/√(C/h), not 1/√d


def _all(hf) -> tuple[str, ...]:
    """Every tensor name of hf's file: the configuration alone is written."""
    from mha_lib.models import config_from_hf, gguf_names

    return tuple(gguf_names(config_from_hf(hf.config)))
