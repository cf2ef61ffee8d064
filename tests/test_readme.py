"""The README as a newcomer reads it: the two commands near the top, the notebook table complete,
every number it states backed by what it counts, and every link it gives pointing at a file."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CORE = ["attention", "multihead", "pytorch", "block", "positions"]  # what a learner reads


def table_rows() -> list[list[str]]:
    return [
        [cell.strip() for cell in line.split("|")[1:-1]]
        for line in README.splitlines()
        if line.startswith("| [")
    ]


def test_both_commands_come_first_and_the_readme_stays_short():
    lines = README.splitlines()
    for marker in ("lab-command", "test-command"):
        start = next(i for i, line in enumerate(lines) if f"<!-- {marker}:start -->" in line)
        assert start < 60, (
            f"the {marker} starts at line {start + 1}; a newcomer should meet it first"
        )
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; details belong in docs/"
    assert "notebooks/00_start_here.ipynb" in README.split("<!-- lab-command:end -->")[0]


def test_the_table_lists_every_notebook_in_order():
    links = [re.search(r"\(notebooks/([^)]+)\)", row[0]).group(1) for row in table_rows()]
    assert links == sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))


def test_the_counts_it_states_are_what_it_counts():
    block = README.split("<!-- counts:start -->")[1].split("<!-- counts:end -->")[0]
    m = re.search(r"(\d+) Jupyter notebooks, about (\d+) hours of study", block)
    assert m, block
    rows = table_rows()
    assert int(m.group(1)) == len(rows)
    minutes = sum(int(row[2]) for row in rows)
    assert int(m.group(2)) == round(minutes / 60), minutes
    lines = sum(len((ROOT / "mha_lib" / f"{name}.py").read_text().splitlines()) for name in CORE)
    stated = int(re.search(r"is about ([\d,]+) lines", README).group(1).replace(",", ""))
    assert abs(lines - stated) <= 0.1 * stated, (lines, stated)
    blocks = sum(len(p.read_text().splitlines()) for p in (ROOT / "mha_lib" / "nn").glob("*.py"))
    stated = int(
        re.search(r"`mha_lib/nn`\)\s+are about ([\d,]+) lines", README).group(1).replace(",", "")
    )
    assert abs(blocks - stated) <= 0.1 * stated, (blocks, stated)


def test_every_local_link_points_at_a_file():
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if target.startswith("http"):
            continue
        assert (ROOT / target).exists(), target
    for page in sorted((ROOT / "docs").glob("*.md")):
        for target in re.findall(r"\]\(([^)#]+)\)", page.read_text()):
            if not target.startswith("http"):
                assert (page.parent / target).exists(), (page.name, target)


def test_the_license_it_names_is_there():
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert "[`LICENSE`](LICENSE)" in README
    for package in re.findall(
        r"^([a-z0-9\-]+)==", (ROOT / "requirements-model.txt").read_text(), re.M
    ):
        assert f"`{package}`" in README.split("## License")[1], package
