"""mha_lib.llm.texts: the documentation text is this Python's, pinned by its hash; a changed page is
refused; the paragraphs and stretches are what they say."""

import hashlib

import pytest
import torch

from mha_lib.llm import texts
from mha_lib.llm.texts import DOC_SHA256, DOC_TOPICS, doc_paragraphs, doc_text, stretches


def test_the_text_is_the_pinned_one():
    text = doc_text()
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == DOC_SHA256
    assert len(DOC_TOPICS) == len(set(DOC_TOPICS)) == 32
    assert text.startswith("Comparisons\n***********") and 45_000 < len(text) < 55_000


def test_a_changed_page_is_refused(monkeypatch):
    from pydoc_data import topics

    changed = {**topics.topics, "assert": topics.topics["assert"] + " "}
    monkeypatch.setattr(topics, "topics", changed)
    with pytest.raises(ValueError, match="documentation text has sha256"):
        texts.doc_text()
    monkeypatch.setattr(topics, "topics", {k: v for k, v in changed.items() if k != "while"})
    with pytest.raises(ValueError, match="no topic 'while'"):
        texts.doc_text()


def test_the_paragraphs_are_prose():
    paragraphs = doc_paragraphs()
    assert len(paragraphs) > 60
    assert all(len(p) >= 200 and "\n" not in p and "***" not in p for p in paragraphs)
    assert paragraphs[0].startswith("Unlike C, all comparison operations in Python")
    assert all(p in " ".join(doc_text().split()) for p in paragraphs[:5])


def test_stretches_cut_consecutive_pieces():
    ids = list(range(23))
    out = stretches(ids, 5, 4)
    assert out.shape == (4, 5) and out[1].tolist() == [5, 6, 7, 8, 9]
    assert torch.equal(stretches(torch.arange(10), 10, 1)[0], torch.arange(10))
    with pytest.raises(ValueError, match="25 tokens; ids has 23"):
        stretches(ids, 5, 5)
    with pytest.raises(ValueError, match="expected one sequence"):
        stretches(torch.zeros(2, 5, dtype=torch.long), 2, 1)


def test_the_other_kinds_are_the_pinned_texts():
    code, licence = texts.kind_text("code"), texts.kind_text("licence")
    assert code.startswith("#\n# GGUF file reading/modification support.")
    assert "class GGUFReader" in code
    assert licence.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert texts.kind_text("documentation") == doc_text()
    for kind in texts.ALL_KINDS:
        text = texts.kind_text(kind)
        assert hashlib.sha256(text.encode("utf-8")).hexdigest() == texts.KIND_SHA256[kind]
    with pytest.raises(ValueError, match="kind = 'poetry'"):
        texts.kind_text("poetry")


def test_the_three_more_kinds_are_what_they_say():
    assert texts.ALL_KINDS == texts.KINDS + texts.MORE_KINDS and len(set(texts.ALL_KINDS)) == 6
    prose, data, markdown = (texts.kind_text(k) for k in texts.MORE_KINDS)
    assert prose.split("\n\n") == doc_paragraphs()
    rows = data.splitlines()
    assert rows[1].startswith("Date,IBM,AAPL,MSFT") and all(r.count(",") == 10 for r in rows[1:])
    assert markdown.startswith("## gguf\n\nThis is a Python package for writing binary files")


def test_a_changed_data_file_is_refused(monkeypatch):
    monkeypatch.setattr(texts, "_read", lambda kind: "Date,IBM\n")
    with pytest.raises(ValueError, match=r"the data text .* of matplotlib\) has sha256"):
        texts.kind_text("data")


def test_another_licence_is_refused(monkeypatch):
    from importlib import metadata

    class Other:
        def read_text(self, name):
            return "MIT License\n"

    monkeypatch.setattr(metadata, "distribution", lambda name: Other())
    with pytest.raises(ValueError, match=r"the licence text .* has sha256"):
        texts.kind_text("licence")
