"""Every reference to a numbered section names a section that exists.

The notebooks number their sections in their headings: `## 3 · A previous-token head, built by
hand`, with subsections `### 5.2 Normalised weights` or `### 4b · Watch the committee form`
(headings such as `## Exercises` or `### Step 1 · scores` carry no section number). A notebook
beside another has a letter after its number (03b beside 03). Markdown refers to them as
"notebook 03 §9" or "notebook 03b §4" (the series' form), and in older prose as "notebook 03,
section 6", "section 11 of notebook 03", "sections 7–8 of [03 · Multi-head attention](...)",
"[02 · Attention with weights](...) (section 5: ...)"; a bare "section 3" or "§3" is a section of
the notebook it is written in (for a solutions notebook: of the notebook it solves). This test
finds every such reference in the markdown of every notebook and solutions notebook and asserts
that the notebook it names has a heading with that number. It also asserts that every markdown
link to a notebook points to a file that exists, and that a link whose text says "notebook NN"
points to notebook NN.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]*_*.ipynb"))

NUMBER = r"\d+(?:\.\d+)?[a-z]?"  # 5, 5.2, 4b
NOTEBOOK = r"\d\d[a-z]?"  # 03, and a notebook beside it, 03b
HEADING = re.compile(rf"^#{{1,6}}\s+({NUMBER})(?=\s|$)", re.MULTILINE)
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]*)\)")
SECTIONS = rf"(?:§|\b[Ss]ections?\s+)({NUMBER})(?:\s*(?:–|-|and|to)\s*({NUMBER}))?"
# (pattern, group of the notebook number, group of the first section, group of the last)
CROSS = [
    (re.compile(rf"\b[Nn]otebooks?\s+({NOTEBOOK}),?\s*{SECTIONS}"), 1, 2, 3),
    (re.compile(rf"{SECTIONS}\s+of\s+(?:notebook\s+)?({NOTEBOOK})\b"), 3, 1, 2),
    (re.compile(rf"\b({NOTEBOOK}) · [^()\n]{{1,60}}?\((?:its\s+)?{SECTIONS}"), 1, 2, 3),
]
BARE = re.compile(SECTIONS)


def number(path: Path) -> str:
    """The number of a notebook or solutions notebook: "03" for 03_x.ipynb, "03b" for 03b_y."""
    return path.name.split("_")[0]


def markdown(path: Path) -> list[str]:
    """The markdown cells of a notebook, links reduced to their text, lines joined."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    texts = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    return [LINK.sub(r"\1", text).replace("\n", " ") for text in texts]


def section_numbers(path: Path) -> set[str]:
    """The section numbers of a notebook's headings: {"1", "2", "4a", "5.2", ...}."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    texts = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    return {m.group(1) for text in texts for m in HEADING.finditer(text)}


def expand(first: str, last: str | None) -> list[str]:
    """A section or a range of whole sections: ("5", "7") -> ["5", "6", "7"]."""
    if last is None:
        return [first]
    if first.isdigit() and last.isdigit():
        return [str(n) for n in range(int(first), int(last) + 1)]
    return [first, last]


def references(path: Path) -> list[tuple[str, str, str]]:
    """(number of the notebook referred to, section, the text around it) for every reference."""
    own = number(path)
    found = []
    for text in markdown(path):
        taken = []  # spans already read as cross-references
        for pattern, nb, first, last in CROSS:
            for m in pattern.finditer(text):
                taken.append(m.span())
                for section in expand(m.group(first), m.group(last)):
                    found.append((m.group(nb), section, m.group(0)))
        for m in BARE.finditer(text):
            if any(a <= m.start() < b for a, b in taken):
                continue
            for section in expand(m.group(1), m.group(2)):
                found.append((own, section, text[max(0, m.start() - 40) : m.end() + 20]))
    return found


SECTIONS_OF = {number(path): section_numbers(path) for path in NOTEBOOKS}
CASES = [(path, ref) for path in NOTEBOOKS + SOLUTIONS for ref in references(path)]


def test_the_series_refers_to_sections():
    """The patterns find the references (a broken pattern would make the test below vacuous)."""
    assert len(CASES) > 50
    assert any("§" in text for _, (_, _, text) in CASES)
    assert SECTIONS_OF["02"] >= {"1", "3", "4a", "4b", "4c", "6"} and "5.2" in SECTIONS_OF["01"]
    assert "03b" in SECTIONS_OF and any(nb == "03b" for _, (nb, _, _) in CASES)


@pytest.mark.parametrize(
    ("path", "ref"), CASES, ids=[f"{p.parent.name}/{number(p)}: {r[0]} §{r[1]}" for p, r in CASES]
)
def test_every_section_reference_names_a_section_that_exists(path, ref):
    notebook, section, text = ref
    assert notebook in SECTIONS_OF, f"{path.name}: no notebook {notebook} ({text!r})"
    assert section in SECTIONS_OF[notebook], (
        f"{path.name} refers to notebook {notebook} §{section} ({text!r}); its sections are "
        f"{sorted(SECTIONS_OF[notebook])}"
    )


def notebook_links(path: Path) -> list[tuple[str, str]]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    texts = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    return [
        (m.group(1), m.group(2))
        for text in texts
        for m in LINK.finditer(text)
        if m.group(2).split("#")[0].endswith(".ipynb")
    ]


@pytest.mark.parametrize("path", NOTEBOOKS + SOLUTIONS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_links_to_notebooks_point_to_the_notebook_they_name(path):
    for text, target in notebook_links(path):
        file = (path.parent / target.split("#")[0]).resolve()
        assert file.is_file(), f"{path.name}: the link [{text}]({target}) points to no file"
        named = re.search(rf"\b[Nn]otebook ({NOTEBOOK})\b", text)
        if named:
            assert number(file) == named.group(1), f"{path.name}: [{text}]({target})"
