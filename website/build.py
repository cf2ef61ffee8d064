"""Build the series as a website: `python website/build.py` writes build/site/html/.

The pages are laid out in build/site/src/ as the repository has them, so that every relative
link between them works as it does on GitHub: the README as index.md (the front page), every
notebooks/NN_*.ipynb and solutions/NN_*_solutions.ipynb, docs/ and tests/README.md. The front
page is the README with a "start reading" link to the first notebook under its opening
sentence (a reader of the site starts there; installing comes second), and a 404 page is
added. The table of
contents is generated from those folders (each entry titled by its page's first heading), so a
new notebook needs no change here. Nothing is executed: the pages show the outputs stored in the
notebooks, which strict nbval checks. No network: MathJax and every script and font come with
the packages in requirements-dev.txt. Sphinx runs with warnings as errors (a broken link fails).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WEBSITE = ROOT / "website"
OUT = ROOT / "build" / "site"


def notebooks() -> list[str]:
    """The series, in order: notebooks/NN_*.ipynb, as paths relative to the repository."""
    return [f"notebooks/{p.name}" for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))]


def solutions() -> list[str]:
    """Their worked solutions, solutions/NN_*_solutions.ipynb, in order."""
    return [
        f"solutions/{p.name}"
        for p in sorted((ROOT / "solutions").glob("[0-9][0-9]*_*_solutions.ipynb"))
    ]


def more_pages() -> list[str]:
    """docs/*.md, then the rules the tests follow."""
    return [f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md"))] + ["tests/README.md"]


def first_heading(path: str) -> str:
    """A notebook's first markdown heading (its title: `00 · Start here`)."""
    nb = json.loads((ROOT / path).read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            found = re.search(r"^#+\s+(.+?)\s*$", "".join(cell["source"]), re.M)
            if found:
                return found.group(1)
    raise ValueError(f"{path} has no heading")


COUNTS_END = "<!-- counts:end -->"


def front_page(readme: str) -> str:
    """The README as the site's front page: under its opening sentence (what the series is,
    between the counts markers), a link that starts reading at the first notebook."""
    first = notebooks()[0]
    start = (
        f"\n**Start reading: [{first_heading(first)}]({first})**, here in your browser, "
        "one notebook after another. To run them yourself, install them as "
        "[below](#start-here) says.\n"
    )
    if COUNTS_END not in readme:
        raise ValueError(f"README.md has no {COUNTS_END} line: the start link goes under it")
    return readme.replace(COUNTS_END, COUNTS_END + "\n" + start, 1)


# GitHub Pages serves 404.html for any missing address: at a missing page in a folder, its
# relative links would point into that folder, so it sends the reader to itself at the root
NOT_FOUND = """---
orphan: true
---

# Page not found

There is no page at this address: it may have moved when a notebook was renumbered or
renamed. The [front page](index.md) lists every notebook, and the search box finds a page by its
words.

<script>
  (() => {{
    const root = "{root}";
    const here = window.location.pathname;
    if (here.startsWith(root) && here !== root + "404.html") {{
      window.location.replace(root + "404.html");
    }}
  }})();
</script>
"""


def toctree(caption: str, paths: list[str], hidden: bool = True) -> str:
    """A toctree directive listing pages by their paths (each shown under its first heading)."""
    entries = "\n".join("/" + Path(p).with_suffix("").as_posix() for p in paths)
    options = (f":caption: {caption}\n" if caption else "") + (
        ":hidden:\n" if hidden else ":maxdepth: 1\n"
    )
    return f"\n```{{toctree}}\n{options}\n{entries}\n```\n"


def stage(src: Path) -> None:
    """Lay the pages out in src, as the repository has them."""
    if src.exists():
        shutil.rmtree(src)
    copied = notebooks() + solutions() + more_pages()
    copied += [
        f"docs/{p.name}" for p in (ROOT / "docs").iterdir() if p.is_file() and p.suffix != ".md"
    ]
    for rel in copied:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)  # keeps the time stamp: an unchanged page is reused

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    index = front_page(readme) + toctree("Notebooks", notebooks())
    index += toctree("Solutions", ["solutions/index.md"]) + toctree("More", more_pages())
    (src / "index.md").write_text(index, encoding="utf-8")
    (src / "solutions" / "index.md").write_text(
        "# Solutions to the exercises\n\nWorked solutions, notebook by notebook. Try each "
        "exercise first: its checker says what is wrong.\n"
        + toctree("", solutions(), hidden=False),
        encoding="utf-8",
    )
    (src / "404.md").write_text(NOT_FOUND.format(root=site_path()), encoding="utf-8")


def site_path() -> str:
    """The path the published site lives under, /<repository's name>/ (conf.py's
    html_baseurl: GitHub Pages of the repository the README's Binder badge names)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return "/" + re.search(r"mybinder\.org/v2/gh/[\w.-]+/([\w.-]+)/", readme).group(1) + "/"


# What a first visit need not download (about 1.7 MB of a notebook's 4.5 MB), removed from
# every page after Sphinx writes it:
# - the theme's icon script (1.56 MB): it draws icons as SVG for a site that adds its own
#   icons ("so that users can add custom icons", pydata-sphinx-theme's template says); the
#   theme's icons come from its stylesheet's icon font, which every page loads anyway;
# - the search tools and index (about 190 kB) outside the search page: the theme loads them
#   for its search-as-you-type, which is off (the search box opens the search page).
NOT_NEEDED = {
    "icon script": re.compile(
        r'[ \t]*<script defer src="[./]*_static/scripts/fontawesome\.js[^"]*"></script>\n'
    ),
    "search tools": re.compile(
        r'[ \t]*<script src="[./]*(_static/searchtools\.js|_static/language_data\.js|'
        r'searchindex\.js)"></script>\n'
    ),
}


def lighten(html: Path) -> None:
    """Leave out of each page (the search page keeps its tools) what a reader's first visit
    need not download: NOT_NEEDED says what and why. Run after every build (Sphinx rewrites
    only the pages that changed)."""
    for page in html.rglob("*.html"):
        text = original = page.read_text(encoding="utf-8")
        text = NOT_NEEDED["icon script"].sub("", text)
        if page != html / "search.html":
            text = NOT_NEEDED["search tools"].sub("", text)
        if text != original:
            page.write_text(text, encoding="utf-8")


def build(out: Path = OUT, quiet: bool = True) -> Path:
    """Lay the pages out in out/src and build them into out/html; returns out/html."""
    out = Path(out)
    stage(out / "src")
    command = [
        sys.executable, "-m", "sphinx", "--builder", "html", "--conf-dir", str(WEBSITE),
        "--doctree-dir", str(out / "doctrees"), "--fail-on-warning", "--keep-going",
        "--jobs", "auto", *(["--quiet"] * quiet), str(out / "src"), str(out / "html"),
    ]  # fmt: skip
    subprocess.run(command, check=True)
    lighten(out / "html")
    return out / "html"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"default: {OUT}")
    args = parser.parse_args()
    start = time.perf_counter()
    try:
        html = build(args.out)
    except subprocess.CalledProcessError as error:
        sys.exit(f"the site did not build (sphinx exited with {error.returncode})")
    print(f"the site is in {html} ({time.perf_counter() - start:.0f} s); to read it:")
    python = os.path.relpath(sys.executable)  # .venv/bin/python, from the repository
    print(f"{python} -m http.server -d {html}  # then open http://127.0.0.1:8000/")


if __name__ == "__main__":
    main()
