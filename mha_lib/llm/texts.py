"""The English text notebook 13 measures on: part of Python's own documentation, which every
Python installation ships (`pydoc_data.topics`, the pages `help()` shows), pinned by its hash.

Derived in notebook 13. Nothing is downloaded and no text is stored here: `pydoc_data.topics`
holds the reference manual's sections as plain text, keyed by topic. Its pages change between
Python versions as the documentation is edited (the "compound" topic of 3.11.2 differs from
3.11.7's), so this module uses only the 32 topics (`DOC_TOPICS`) whose text was identical in
every Python checked (`CHECKED_PYTHONS`), joined with blank lines in that order: about 12,200
tokens of SmolLM2's tokenizer. `doc_text()` checks the joined text against `DOC_SHA256` and
refuses a different one, so every cached number of notebook 13 is about this exact text.

What it holds:
- `DOC_TOPICS`, `DOC_SHA256`, `CHECKED_PYTHONS`;
- `doc_text() -> str`: the joined topics, hash-checked;
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
    "CHECKED_PYTHONS",
    "DOC_SHA256",
    "DOC_TOPICS",
    "doc_paragraphs",
    "doc_text",
    "stretches",
]

# identical, topic by topic, in the pydoc_data of each of these Pythons (checked by hand; the
# largest topics, "compound", "types" and "specialnames", differ between 3.11 patch versions)
CHECKED_PYTHONS = ("3.10.13", "3.11.2", "3.11.7", "3.12.1", "3.13.0")
DOC_TOPICS = (
    "comparisons", "import", "with", "exceptions", "in", "integers", "slicings", "booleans",
    "id-classes", "context-managers", "global", "typesmodules", "assert", "return", "bitwise",
    "del", "unary", "yield", "bltin-code-objects", "while", "dynamic-features", "break", "else",
    "if", "continue", "lambda", "pass", "typesfunctions", "bltin-ellipsis-object",
    "bltin-null-object", "bltin-type-objects", "callable-types",
)  # fmt: skip
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
