"""The series as a website (website/build.py), built and read in a real browser.

The site is built into a temporary folder by website/build.py (the README's site command, given
--out), served on 127.0.0.1 and read by Debian's Chromium, driven by Playwright as
tests/pretrained/test_browser_explorer.py drives it (its flags and its page, which refuses and
records every request to another host; without Chromium these tests skip and say why). Every
page is visited, and each must

- load with no console error;
- ask nothing of any host but the local server;
- show every image (`naturalWidth > 0`);
- have every formula typeset (MathJax's output inside each math element, no raw `$`, `\\(` or
  `\\[` left in the text);
- link only to pages that exist and to anchors that exist on them;
- open with its "launch on Binder" and "source" links.

The search page must find the last notebook by its title (and notebook "gated delta" by those
words, once a notebook's title says them). Every check is first shown to fail on a small site
broken on purpose. The build itself, its table of contents and the notes it adds are checked
without a browser.
"""

import contextlib
import functools
import html
import http.server
import importlib.util
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import quote_plus, unquote, urlparse

import nbformat
import pytest

from tests.pretrained.test_browser_explorer import CHROMIUM, browser_page

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    """A module of website/ (not a package; `build` would be another project's name)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _load("website_build", ROOT / "website" / "build.py")
series_site = _load("series_site", ROOT / "website" / "series_site.py")

README = (ROOT / "README.md").read_text(encoding="utf-8")
BINDER = re.search(
    r"\((https://mybinder\.org/v2/gh/([\w.-]+/[\w.-]+)/[^)?]+\?urlpath=lab/tree/)", README
)
GITHUB = f"https://github.com/{BINDER.group(2)}/"
NOTEBOOKS = build.notebooks()
SOLUTIONS = build.solutions()
BUILD_S = 120  # the build takes about 30 s on 2 busy cores (under a minute is the target)


def command(path: Path, marker: str) -> str:
    """The command between <!-- marker:start --> and <!-- marker:end --> in a file."""
    text = path.read_text(encoding="utf-8")
    block = text.split(f"<!-- {marker}:start -->")[1].split(f"<!-- {marker}:end -->")[0]
    return " ".join(line for line in block.splitlines() if line.strip() and "```" not in line)


def title(path: str) -> str:
    """A notebook's title: its first markdown heading, as the site shows it."""
    nb = json.loads((ROOT / path).read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            m = re.search(r"^#+\s+(.+?)\s*$", "".join(cell["source"]), re.M)
            if m:
                return m.group(1)
    raise AssertionError(f"{path} has no heading")


def page_of(path: str) -> str:
    return Path(path).with_suffix(".html").as_posix()


# --- the build -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built by the README's site command into a temporary folder; its html/."""
    out = tmp_path_factory.mktemp("site")
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(ROOT / "website" / "build.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=BUILD_S * 3,
    )
    assert done.returncode == 0, (
        f"the site did not build:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    )
    print(f"the site built in {time.monotonic() - start:.0f} s")
    return out / "html"


def test_site_command_is_the_build_script_in_readme_and_contributing():
    readme = command(ROOT / "README.md", "site-command")
    assert readme == ".venv/bin/python website/build.py", readme
    assert command(ROOT / "CONTRIBUTING.md", "site-command") == readme
    assert "https://mha-series.github.io/multi-head-attention/" in (ROOT / "README.md").read_text()


def test_site_workflow_builds_with_the_readme_command_and_publishes_to_pages():
    """site.yml installs the website's block of requirements-dev.txt (every pin of the build),
    runs the README's site command and uploads what it writes."""
    workflow = (ROOT / ".github" / "workflows" / "site.yml").read_text(encoding="utf-8")
    marker = re.search(r"sed -n '/\^(# [^/]+)/,/\^\$/p' requirements-dev\.txt", workflow)
    assert marker, "site.yml does not take the website's block of requirements-dev.txt"
    dev = (ROOT / "requirements-dev.txt").read_text(encoding="utf-8")
    block = dev.split(marker.group(1))[1].split("\n\n")[0]
    for package in ("sphinx", "myst-nb", "sphinx-book-theme", "sphinx-mathjax-offline"):
        assert re.search(rf"^{package}==", block, re.M), f"{package} is not in the block"
    assert "<!-- site-command:start -->" in workflow and "path: build/site/html" in workflow
    assert "actions/upload-pages-artifact" in workflow and "actions/deploy-pages" in workflow


def test_site_lists_every_notebook_in_order_titled_by_its_first_heading(site):
    """The table of contents is generated from the folders: the notebooks in order, each
    under its first heading, then the solutions, docs/ and tests/README.md."""
    index = (site / "index.html").read_text(encoding="utf-8")
    nav = index.split('bd-docs-nav" aria-label="Main">')[1].split("</nav>")[0]
    listed = re.findall(r'<a class="reference internal" href="([^"#]+)">(.*?)</a>', nav)
    hrefs = [href for href, _ in listed]
    pages = [page_of(p) for p in NOTEBOOKS]
    assert [h for h in hrefs if h.startswith("notebooks/")] == pages
    for path in NOTEBOOKS:
        text = dict(listed)[page_of(path)]
        assert html.unescape(text) == title(path), (path, text)
    assert "solutions/index.html" in hrefs
    more = [page_of(p) for p in build.more_pages()]
    assert [h for h in hrefs if h.startswith(("docs/", "tests/"))] == more
    solutions = (site / "solutions" / "index.html").read_text(encoding="utf-8")
    for path in SOLUTIONS:
        assert f'href="{Path(path).with_suffix(".html").name}"' in solutions, path
        assert (site / page_of(path)).is_file(), path


def test_site_links_each_notebook_to_its_solutions_before_its_exercises(site):
    """Each notebook with a solutions notebook has a note linking to its solutions page, put
    before its first exercise (or at the end if no exercise is found)."""
    for path in NOTEBOOKS:
        solutions = series_site.solutions_page(
            {str(Path(p).with_suffix("")) for p in SOLUTIONS}, str(Path(path).with_suffix(""))
        )
        page_html = (site / page_of(path)).read_text(encoding="utf-8")
        notes = re.findall(r'<div class="series-solutions admonition">(.*?)</div>', page_html, re.S)
        if solutions is None:
            assert not notes, path
            continue
        assert len(notes) == 1, (path, len(notes))
        assert f'href="../{solutions}.html"' in notes[0], (path, notes[0])
        before, after = page_html.split('<div class="series-solutions admonition">')
        heading = re.findall(r"<h[1-6][^>]*>(.*?)<a class=\"headerlink", before)[-1]
        after = after.split("</div>", 1)[1].lstrip()
        if not re.search(r"<h[1-6][^>]*>[^<]*Exercise|<strong>Exercise", page_html):
            continue  # no exercise found: the note closes the page
        assert "Exercise" in heading or after.startswith("<p><strong>Exercise"), (
            f"{path}: the solutions note is not at the first exercise (it follows {heading!r})"
        )


def test_site_shows_widgets_as_their_stored_view(site):
    """No widget script on any page; each widget output is its stored figure and a note."""
    for path in NOTEBOOKS:
        nb = json.loads((ROOT / path).read_text(encoding="utf-8"))
        widgets = sum(
            series_site.WIDGET_VIEW in output.get("data", {})
            for cell in nb["cells"]
            for output in cell.get("outputs", [])
        )
        page_html = (site / page_of(path)).read_text(encoding="utf-8")
        assert "widget-view+json" not in page_html and "widget-state+json" not in page_html, path
        assert (
            page_html.count("An interactive widget, shown here as the notebook stored it")
            == widgets
        )


def _widget_notebook() -> nbformat.NotebookNode:
    """A notebook with two widgets: one whose Output child held a figure, one with only text."""
    png = "iVBORw0KGgo="
    state = {
        "box": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_out"]}},
        "out": {"model_name": "OutputModel", "state": {"outputs": [{"data": {"image/png": png}}]}},
        "slider": {"model_name": "IntSliderModel", "state": {"value": 3}},
    }
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {series_site.WIDGET_STATE: {"state": state}}
    for model in ("box", "slider"):
        data = {series_site.WIDGET_VIEW: {"model_id": model}, "text/plain": f"{model}(...)"}
        cell = nbformat.v4.new_code_cell("w")
        cell.outputs = [nbformat.v4.new_output("execute_result", data=data, execution_count=1)]
        nb.cells.append(cell)
    nb.cells.append(
        nbformat.v4.new_code_cell(
            "print(1)", outputs=[nbformat.v4.new_output("stream", name="stdout", text="1\n")]
        )
    )
    return nb


def test_site_widget_views_unit():
    nb = series_site.static_widget_views(_widget_notebook())
    assert "widgets" not in nb.metadata
    box, slider, plain = (cell.outputs for cell in nb.cells)
    assert [list(o["data"]) for o in box] == [["image/png"], ["text/markdown"]]
    assert box[0]["data"]["image/png"] == "iVBORw0KGgo="
    assert [list(o["data"]) for o in slider] == [["text/plain"], ["text/markdown"]]
    assert slider[0]["data"]["text/plain"] == "slider(...)"
    assert "live" in slider[1]["data"]["text/markdown"]
    assert plain[0]["text"] == "1\n"


def test_site_formulas_on_one_line_unit():
    """A formula's line breaks become spaces (a line of TeX starting with `+ ` is no list);
    code, escaped dollars and dollar signs a blank line apart are left alone."""
    join = series_site.math_on_one_line
    assert join("a $x\n+ y$ b") == "a $x + y$ b"
    assert join("$$p\n  q$$ and $r$") == "$$p q$$ and $r$"
    assert join("`$a\nb$` then ```\n$c\nd$\n```") == "`$a\nb$` then ```\n$c\nd$\n```"
    assert join("costs \\$5\nand \\$6") == "costs \\$5\nand \\$6"
    assert join("$5 here\n\nand $6 there") == "$5 here\n\nand $6 there"


def test_site_solutions_pairing_unit():
    found = {"notebooks/03_x", "solutions/03_x_solutions", "solutions/01_y_solutions"}
    assert series_site.solutions_page(found, "notebooks/03_x") == "solutions/03_x_solutions"
    assert series_site.solutions_page(found, "notebooks/01_z") == "solutions/01_y_solutions"
    assert series_site.solutions_page(found, "notebooks/02_w") is None
    assert series_site.solutions_page(found, "solutions/03_x_solutions") is None
    found |= {"notebooks/03b_v", "solutions/03b_v_solutions"}  # a notebook beside 03
    assert series_site.solutions_page(found, "notebooks/03b_v") == "solutions/03b_v_solutions"
    assert series_site.solutions_page(found, "notebooks/03_x") == "solutions/03_x_solutions"


# --- reading the site in a browser -----------------------------------------------------------

READ_PAGE = r"""async () => {
    if (window.MathJax && MathJax.startup) await MathJax.startup.promise;
    await document.fonts.ready;
    const article = document.querySelector("article") || document.body;
    const raw = [];
    const walker = document.createTreeWalker(article, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
        const text = walker.currentNode;
        const code = text.parentElement.closest("pre, code, script, style, textarea, .math");
        if (!code && /\$|\\\(|\\\[/.test(text.data)) raw.push(text.data.trim().slice(0, 80));
    }
    const math = [...article.querySelectorAll(".math")];
    return {
        math: math.length,
        untypeset: math.filter(m => !m.querySelector("mjx-container"))
                       .map(m => m.textContent.trim().slice(0, 80)),
        raw: raw,
        images: document.images.length,
        broken_images: [...document.images].filter(i => !(i.complete && i.naturalWidth > 0))
                                           .map(i => i.getAttribute("src")),
        ids: [...document.querySelectorAll("[id], a[name]")].map(e => e.id || e.name),
        links: [...document.querySelectorAll("a[href]")].map(a => a.href),
        binder: document.querySelector("a.series-binder")?.href ?? null,
        source: document.querySelector("a.series-source")?.href ?? null,
    };
}"""


@contextlib.contextmanager
def serve(folder: Path):
    """An HTTP server for folder on 127.0.0.1 (a free port), quiet; yields its base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()


def pages_of(folder: Path) -> list[str]:
    """Every HTML page of a built site (the theme's template fragments in _static aside)."""
    return sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*.html")
        if not p.relative_to(folder).parts[0].startswith("_")
    )


def read_site(page, errors, foreign, base: str, folder: Path) -> dict[str, dict]:
    """Visit every page; for each, what READ_PAGE found and the console errors and foreign
    requests it caused."""
    seen = {}
    for name in pages_of(folder):
        before_errors, before_foreign = len(errors), len(foreign)
        page.goto(base + name, wait_until="load")
        found = page.evaluate(READ_PAGE)
        page.wait_for_timeout(50)  # late console messages
        found["errors"] = errors[before_errors:]
        found["foreign"] = foreign[before_foreign:]
        seen[name] = found
    return seen


def problems(seen: dict[str, dict], base: str, folder: Path) -> list[str]:
    """Everything wrong with the pages read, one line each (empty when the site is sound)."""
    out = []
    ids = {name: set(found["ids"]) for name, found in seen.items()}
    for name, found in seen.items():
        out += [f"{name}: console error: {e}" for e in found["errors"]]
        out += [f"{name}: asked another host: {u}" for u in found["foreign"]]
        out += [f"{name}: image did not load: {src}" for src in found["broken_images"]]
        out += [f"{name}: formula not typeset: {m}" for m in found["untypeset"]]
        out += [f"{name}: raw math delimiter in the text: {t!r}" for t in found["raw"]]
        for link in found["links"]:
            url = urlparse(link)
            if not link.startswith(base):
                continue  # another site (GitHub, Binder, a paper): not requested by the page
            target = unquote(url.path)[len(urlparse(base).path) :] or "index.html"
            if target.endswith("/"):
                target += "index.html"
            if not (folder / target).is_file():
                out.append(f"{name}: link to a missing page: {link}")
            elif url.fragment and target.endswith(".html"):
                if target not in ids:
                    out.append(f"{name}: link to a page that was not read: {link}")
                elif unquote(url.fragment) not in ids[target]:
                    out.append(f"{name}: link to a missing anchor: {link}")
    return out


def _skip_reason() -> str | None:
    if not Path(CHROMIUM).is_file():
        return f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -r requirements-dev.txt)"
    return None


@pytest.fixture
def browser(tmp_path):
    """The explorer test's Chromium page: (page, console errors, requests to other hosts)."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    with browser_page(tmp_path) as (page, errors, foreign):
        page.set_default_timeout(30_000)
        yield page, errors, foreign


BROKEN = {
    "index.html": """<!doctype html><html><head><title>broken</title><link rel="icon" href="data:,">
        <script src="https://cdn.example.org/x.js"></script></head><body><article>
        <p>Raw math: $x^2$ and \\(y\\).</p>
        <span class="math">\\(z\\)</span>
        <img src="_images/missing.png">
        <a href="gone.html">a missing page</a> <a href="good.html#nowhere">a missing anchor</a>
        <a href="good.html#here">a good link</a> <a href="https://example.org/">elsewhere</a>
        <script>console.error("boom")</script></article></body></html>""",
    "good.html": """<!doctype html><html><head><title>good</title>
        <link rel="icon" href="data:,"></head><body><article>
        <p id="here">Fine: <code>$HOME</code>.</p><a href="index.html">home</a>
        </article></body></html>""",
}


@pytest.mark.browser
def test_site_checks_fail_on_a_broken_site(browser, tmp_path):
    """Each check catches what it is for: a page broken on purpose, and a sound one beside it."""
    page, errors, foreign = browser
    folder = tmp_path / "broken"
    folder.mkdir()
    for name, text in BROKEN.items():
        (folder / name).write_text(text)
    with serve(folder) as base:
        found = problems(read_site(page, errors, foreign, base, folder), base, folder)
    expected = [
        "index.html: console error: boom",
        "index.html: asked another host: https://cdn.example.org/x.js",
        "index.html: image did not load: _images/missing.png",
        "index.html: formula not typeset: \\(z\\)",
        "index.html: raw math delimiter in the text: 'Raw math: $x^2$ and \\\\(y\\\\).'",
        f"index.html: link to a missing page: {base}gone.html",
        f"index.html: link to a missing anchor: {base}good.html#nowhere",
    ]
    for line in expected:
        assert line in found, f"not caught: {line}\nfound: {found}"
    assert not [line for line in found if line.startswith("good.html")], found


@pytest.fixture
def served(site):
    with serve(site) as base:
        yield base


@pytest.mark.browser
def test_site_every_page_in_a_browser(site, served, browser):
    """Every page of the built site: no console error, nothing from another host, every image
    loaded, every formula typeset, every internal link and anchor there, and the Binder and
    source links of its page."""
    page, errors, foreign = browser
    start = time.monotonic()
    seen = read_site(page, errors, foreign, served, site)
    print(f"read {len(seen)} pages in {time.monotonic() - start:.0f} s")
    found = problems(seen, served, site)
    assert not found, f"{len(found)} problems:\n" + "\n".join(found[:40])

    expected = ["index.html", "search.html", "solutions/index.html"]
    expected += [page_of(p) for p in NOTEBOOKS + SOLUTIONS + build.more_pages()]
    assert set(expected) <= set(seen), sorted(set(expected) - set(seen))
    assert sum(found["math"] for found in seen.values()) > 100, "no formula was checked"
    assert sum(found["images"] for found in seen.values()) > 50, "no figure was checked"

    for name, found in seen.items():
        if name in ("search.html", "genindex.html"):
            continue
        source = {"index.html": "README.md", "solutions/index.html": "solutions"}.get(name)
        source = source or next(
            p for p in NOTEBOOKS + SOLUTIONS + build.more_pages() if page_of(p) == name
        )
        assert found["binder"] and found["binder"].startswith(BINDER.group(1)), name
        if name != "index.html":
            assert found["binder"] == BINDER.group(1) + source, (name, found["binder"])
        assert found["source"].startswith(GITHUB) and found["source"].endswith(source), name


def search(page, base: str, query: str) -> list[str]:
    """The pages the site's search page lists for a query (paths relative to the site)."""
    page.goto(f"{base}search.html?q={quote_plus(query)}", wait_until="load")
    # the theme hides this heading; it reads "Search Results" once every result is listed
    page.locator("#search-results h2", has_text="Search Results").wait_for(state="attached")
    links = page.locator("#search-results ul.search li a").evaluate_all("l => l.map(a => a.href)")
    return [urlparse(link).path[len(urlparse(base).path) :] for link in links]


@pytest.mark.browser
def test_site_search_finds_the_last_notebook(site, served, browser):
    """The search index covers the whole series: the last notebook is found by the words of its
    title (before any colon), and a notebook titled with "gated delta" by those words."""
    page, errors, foreign = browser
    last = NOTEBOOKS[-1]
    words = re.sub(r"^\d+\s*·\s*", "", title(last)).split(":")[0]
    assert search(page, served, "qzxv") == [], "the search page lists pages for any word"
    assert page_of(last) in search(page, served, words), (words, last)
    for path in NOTEBOOKS:
        if "gated delta" in title(path).lower():
            assert page_of(path) in search(page, served, "gated delta"), path
    assert not errors and not foreign, (errors, foreign)
