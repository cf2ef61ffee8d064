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
- open with its "launch on Binder", "source", "edit this page" and "open an issue" links;
- show no nbval marker line in its code (`# NBVAL_IGNORE_OUTPUT` is for the tests, not for
  readers);
- give every image an alt text that says something (not empty, not a file name), and every
  block of code a copy button;
- be no wider than the window, at 1366x768 (a laptop), 820x1180 (a tablet) and 390x844 with
  touch (a phone); at 1366x768 at most 10 % of the site's code blocks scroll sideways;
- open and close its menu and its page-contents drawers at tablet and phone sizes (the themes'
  upstream bug: website/_static/series.js);
- print (print media, an A4 page's width) with no block of code clipped;
- pass axe-core (the version website/package.json pins, installed by `npm ci --prefix website`;
  without it that test skips and says so) with no serious or critical violation.

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

from tests.pretrained.test_browser_explorer import CHROMIUM, FLAGS, LOCAL, browser_page

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


FILE_NAME = re.compile(r"(^|/)[\w.-]+\.(png|jpe?g|svg|gif|webp)$", re.I)


def figure_cells(nb: dict) -> list[tuple[int, dict]]:
    """The code cells of a notebook (as JSON) that show a figure: an image output, or a widget
    whose stored view the site shows as its figure."""
    kinds = ("image/png", "image/jpeg", "image/svg+xml", series_site.WIDGET_VIEW)
    return [
        (i, cell)
        for i, cell in enumerate(nb["cells"])
        if cell["cell_type"] == "code"
        and any(kind in out.get("data", {}) for out in cell.get("outputs", []) for kind in kinds)
    ]


def alt_problem(cell: dict) -> str | None:
    """What is wrong with a figure cell's alt text (None when it says what the figure shows):
    the notebook states it in the cell's metadata, `mystnb: {image: {alt: ...}}`, which
    myst-nb gives each image of the cell (a caption, where one is needed, goes in
    `mystnb: {figure: {caption: ...}}`)."""
    alt = cell.get("metadata", {}).get("mystnb", {}).get("image", {}).get("alt")
    if not isinstance(alt, str) or not alt.strip():
        return "no alt text (metadata mystnb.image.alt)"
    if FILE_NAME.search(alt.strip()):
        return f"its alt text is a file name: {alt!r}"
    if len(alt.split()) < 8:
        return f"its alt text is too short to say what the figure shows: {alt!r}"
    return None


def test_every_figure_has_alt_text_written_with_the_notebook():
    """Every figure of every notebook and solutions notebook has an alt text, written in the
    cell's metadata, that says what it shows: not missing, not a file name, a sentence."""
    found, figures = [], 0
    for path in NOTEBOOKS + SOLUTIONS:
        nb = json.loads((ROOT / path).read_text(encoding="utf-8"))
        for i, cell in figure_cells(nb):
            figures += 1
            problem = alt_problem(cell)
            if problem:
                found.append(f"{path}, cell {i} ({cell.get('id')}): {problem}")
    assert figures > 50, "no figure was checked"
    assert not found, f"{len(found)} figures without a useful alt text:\n" + "\n".join(found)
    # the check itself, on cells broken on purpose
    cell = {"metadata": {}}
    assert alt_problem(cell) == "no alt text (metadata mystnb.image.alt)"
    cell["metadata"]["mystnb"] = {"image": {"alt": "../_images/1f3a.png"}}
    assert alt_problem(cell).startswith("its alt text is a file name")
    cell["metadata"]["mystnb"]["image"]["alt"] = "a heatmap"
    assert alt_problem(cell).startswith("its alt text is too short")
    cell["metadata"]["mystnb"]["image"]["alt"] = "A heatmap of two heads: each looks one step back."
    assert alt_problem(cell) is None


def test_site_hides_nbval_markers_unit():
    """The site shows a code cell without its nbval marker lines; other comments stay."""
    strip = series_site.without_test_markers
    source = "# NBVAL_IGNORE_OUTPUT\n# machine-dependent: timings\nprint(t)"
    assert strip(source) == "# machine-dependent: timings\nprint(t)"
    assert strip("x = 1\n  #NBVAL_SKIP\ny = 2") == "x = 1\ny = 2"
    assert strip("s = '# NBVAL_ in a string'  # NBVAL_X") == "s = '# NBVAL_ in a string'  # NBVAL_X"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source), nbformat.v4.new_markdown_cell(source)]
    read = series_site.read_notebook(nbformat.writes(nb))
    assert "NBVAL_" not in read.cells[0].source and "NBVAL_" in read.cells[1].source


def test_site_front_page_starts_reading_then_installing(site):
    """The front page says what the series is, then links to the first notebook, before the
    README's installing; the 404 page exists and leads back to the front page."""
    index = build.front_page(README)
    start = index.index("**Start reading: [")
    assert index.index("<!-- counts:end -->") < start < index.index("## Start here")
    assert f"]({NOTEBOOKS[0]})" in index[start:].split("\n")[0]
    page = (site / "index.html").read_text(encoding="utf-8")
    assert f'href="{page_of(NOTEBOOKS[0])}"' in page.split("Start reading")[1][:200]
    missing = (site / "404.html").read_text(encoding="utf-8")
    assert "Page not found" in missing and 'href="index.html"' in missing
    assert f'const root = "{build.site_path()}"' in missing
    assert build.site_path() == urlparse("https://mha-series.github.io/multi-head-attention/").path


def test_site_pages_leave_out_what_a_first_visit_need_not_download(site):
    """No page loads the theme's icon script (its icons come from its stylesheet's font), and
    only the search page loads the search index (the search box opens that page)."""
    for name in pages_of(site):
        text = (site / name).read_text(encoding="utf-8")
        assert "scripts/fontawesome.js" not in text, name
        assert ("searchindex.js" in text) == (name == "search.html"), name


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
        edit: document.querySelector("a.series-edit")?.href ?? null,
        issue: document.querySelector("a.series-issue")?.href ?? null,
        preview: document.querySelector('meta[property="og:title"]')?.content ?? null,
        markers: [...document.querySelectorAll("pre")]
            .flatMap(pre => pre.innerText.split("\n"))
            .filter(line => /^\s*#\s*NBVAL_/.test(line)).map(line => line.trim()),
        no_copy: [...document.querySelectorAll("article div.highlight > pre")]
            .filter(pre => !pre.parentElement.querySelector(":scope > button.series-copy"))
            .map(pre => pre.textContent.trim().slice(0, 60)),
        bad_alt: [...document.images].filter(i => !alt_says_something(i))
                                     .map(i => `${i.getAttribute("src")} (alt ${
                                         JSON.stringify(i.getAttribute("alt"))})`),
        ...LAYOUT(),
    };
}"""

# An alt text says something: present, not blank, and not a file name or path (myst-nb's
# default for an output image is its file's path)
ALT_SAYS_SOMETHING = r"""i => {
    const alt = (i.getAttribute("alt") ?? "").trim();
    if (i.getAttribute("role") === "presentation" || i.closest("a.navbar-brand")) return true;
    return alt.length > 0 && !/(^|\/)[\w.-]+\.(png|jpe?g|svg|gif|webp)$/i.test(alt)
        && !alt.includes("/_images/");
}"""

# How the page fits its window: how much wider than the window it is (0 when it fits), and
# which of its code blocks scroll sideways (or, in print, are clipped: print cannot scroll)
LAYOUT = r"""() => {
    const blocks = [...document.querySelectorAll("article pre")]
        .filter(pre => pre.getClientRects().length);
    const over = pre => pre.scrollWidth > pre.clientWidth + 1
        || pre.getBoundingClientRect().right > document.documentElement.clientWidth + 1;
    // the device's width: a phone's browser widens its layout to a page that is too wide
    const width = Math.min(window.innerWidth, screen.width);
    return {
        overflow: Math.max(0, document.documentElement.scrollWidth - width),
        width: width,
        code_blocks: blocks.length,
        code_scrolling: blocks.filter(over).map(pre => pre.textContent.trim().slice(0, 60)),
    };
}"""
# READ_PAGE's helpers, defined at its top
READ_PAGE = READ_PAGE.replace(
    "async () => {",
    "async () => {\n"
    f"    const LAYOUT = {LAYOUT};\n    const alt_says_something = {ALT_SAYS_SOMETHING};",
    1,
)


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
        out += [f"{name}: shows an nbval marker: {t!r}" for t in found["markers"]]
        out += [f"{name}: image without a meaningful alt text: {i}" for i in found["bad_alt"]]
        out += [f"{name}: code without a copy button: {t!r}" for t in found["no_copy"]]
        if found["overflow"]:
            out.append(f"{name}: {found['overflow']} px wider than its {found['width']} px window")
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
        <img src="_images/missing.png" alt="_images/missing.png">
        <pre style="overflow: auto"># NBVAL_IGNORE_OUTPUT\nprint("LONG")</pre>
        <div style="width: 3000px">a page wider than its window</div>
        <div class="highlight"><pre>x = 1</pre></div>
        <a href="gone.html">a missing page</a> <a href="good.html#nowhere">a missing anchor</a>
        <a href="good.html#here">a good link</a> <a href="https://example.org/">elsewhere</a>
        <script>console.error("boom")</script></article></body></html>""",
    "good.html": """<!doctype html><html><head><title>good</title>
        <link rel="icon" href="data:,"></head><body><article>
        <p id="here">Fine: <code>$HOME</code>.</p><a href="index.html">home</a>
        </article></body></html>""",
}


# a line of code longer than any window is wide: it scrolls on a screen, and is cut on paper
BROKEN["index.html"] = BROKEN["index.html"].replace("LONG", "far too long for a window " * 40)


@pytest.mark.browser
def test_site_checks_fail_on_a_broken_site(browser, tmp_path):
    """Each check catches what it is for: a page broken on purpose, and a sound one beside it."""
    page, errors, foreign = browser
    folder = tmp_path / "broken"
    folder.mkdir()
    for name, text in BROKEN.items():
        (folder / name).write_text(text)
    with serve(folder) as base:
        seen = read_site(page, errors, foreign, base, folder)
        found = problems(seen, base, folder)
    expected = [
        "index.html: console error: boom",
        "index.html: asked another host: https://cdn.example.org/x.js",
        "index.html: image did not load: _images/missing.png",
        "index.html: formula not typeset: \\(z\\)",
        "index.html: raw math delimiter in the text: 'Raw math: $x^2$ and \\\\(y\\\\).'",
        f"index.html: link to a missing page: {base}gone.html",
        f"index.html: link to a missing anchor: {base}good.html#nowhere",
        "index.html: shows an nbval marker: '# NBVAL_IGNORE_OUTPUT'",
        "index.html: code without a copy button: 'x = 1'",
        "index.html: image without a meaningful alt text: _images/missing.png "
        '(alt "_images/missing.png")',
        "index.html: 1608 px wider than its 1400 px window",  # 3000 px and the 8 px margin
    ]
    for line in expected:
        assert line in found, f"not caught: {line}\nfound: {found}"
    assert not [line for line in found if line.startswith("good.html")], found
    blocks, scrolling = code_that_scrolls(seen)
    assert (blocks, len(scrolling)) == (2, 1), (blocks, scrolling)
    assert scrolling[0].startswith("index.html: # NBVAL_IGNORE_OUTPUT"), scrolling
    page.emulate_media(media="print")  # print wraps nothing here: the block is cut
    with serve(folder) as base:
        page.goto(base + "index.html", wait_until="load")
        assert len(page.evaluate(f"() => ({LAYOUT})()")["code_scrolling"]) == 1
        assert drawer_problems(page, touch=False) == [
            "no visible menu button",
            "no visible page contents button",
        ]


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
    page.set_viewport_size(LAPTOP)
    start = time.monotonic()
    seen = read_site(page, errors, foreign, served, site)
    print(f"read {len(seen)} pages in {time.monotonic() - start:.0f} s")
    found = problems(seen, served, site)
    assert not found, f"{len(found)} problems:\n" + "\n".join(found[:40])
    blocks, scrolling = code_that_scrolls(seen)
    print(f"{len(scrolling)} of {blocks} code blocks scroll sideways at 1366x768")
    assert len(scrolling) <= SCROLLING_CODE * blocks, (
        f"{len(scrolling)} of {blocks} code blocks scroll sideways at 1366x768, for example:\n"
        + "\n".join(scrolling[:20])
    )

    expected = ["index.html", "search.html", "solutions/index.html"]
    expected += [page_of(p) for p in NOTEBOOKS + SOLUTIONS + build.more_pages()]
    assert set(expected) <= set(seen), sorted(set(expected) - set(seen))
    assert sum(found["math"] for found in seen.values()) > 100, "no formula was checked"
    assert sum(found["images"] for found in seen.values()) > 50, "no figure was checked"

    for name, found in seen.items():
        if name in ("search.html", "genindex.html", "404.html"):
            continue
        source = {"index.html": "README.md", "solutions/index.html": "solutions"}.get(name)
        source = source or next(
            p for p in NOTEBOOKS + SOLUTIONS + build.more_pages() if page_of(p) == name
        )
        assert found["binder"] and found["binder"].startswith(BINDER.group(1)), name
        if name != "index.html":
            assert found["binder"] == BINDER.group(1) + source, (name, found["binder"])
        assert found["source"].startswith(GITHUB) and found["source"].endswith(source), name
        assert found["edit"] and found["edit"].startswith(GITHUB + "edit/"), (name, found["edit"])
        if source != "solutions":
            assert found["edit"].endswith(source), (name, found["edit"])
        assert found["issue"] and found["issue"].startswith(GITHUB + "issues/new"), name
        assert found["preview"], f"{name}: no link-preview title (og:title)"


LAPTOP = {"width": 1366, "height": 768}
TABLET = {"width": 820, "height": 1180}
PHONE = {"width": 390, "height": 844}
A4 = {"width": 718, "height": 1000}  # an A4 page less 1 cm margins, at 96 px per inch
SCROLLING_CODE = 0.10  # at most this share of the code blocks scrolls sideways on a laptop


def code_that_scrolls(seen: dict[str, dict]) -> tuple[int, list[str]]:
    """How many code blocks the pages have, and (page: first words) of those that scroll."""
    blocks = sum(found["code_blocks"] for found in seen.values())
    scrolling = [f"{name}: {t}" for name, found in seen.items() for t in found["code_scrolling"]]
    return blocks, scrolling


@contextlib.contextmanager
def device(tmp_path: Path, viewport: dict, touch: bool):
    """A fresh Chromium of the given window size, with a touch screen (a phone) or without;
    yields (page, console errors, requests to other hosts), as browser_page does."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    errors, foreign = [], []

    def route(r):
        url = urlparse(r.request.url)
        if url.scheme in ("http", "https", "ws", "wss") and url.hostname not in LOCAL:
            foreign.append(r.request.url)
            r.abort()
        else:
            r.continue_()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            context = browser.new_context(viewport=viewport, has_touch=touch, is_mobile=touch)
            context.route("**/*", route)
            page = context.new_page()
            page.set_default_timeout(30_000)
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            yield page, errors, foreign
        finally:
            browser.close()


DRAWER_OPEN = """id => document.getElementById(id)?.open === true
    && document.getElementById(id).querySelectorAll("a[href]").length > 0"""


def drawer_problems(page, touch: bool) -> list[str]:
    """Open and close the menu and the page-contents drawers with the buttons a reader sees
    (tapped on a phone, clicked elsewhere): each opens a dialog with its links, which Escape
    and a tap or click beside it close. One line per thing that did not happen."""
    out = []
    size = page.viewport_size
    for what, kind, dialog in (
        ("menu", "primary-toggle", "pst-primary-sidebar-modal"),
        ("page contents", "secondary-toggle", "pst-secondary-sidebar-modal"),
    ):
        buttons = [b for b in page.locator(f"button.{kind}").all() if b.is_visible()]
        if not buttons:
            out.append(f"no visible {what} button")
            continue
        for close in ("Escape", "outside"):
            buttons[0].tap() if touch else buttons[0].click()
            try:
                page.wait_for_function(DRAWER_OPEN, arg=dialog, timeout=2_000)
            except Exception:
                out.append(f"the {what} button does not open the {what}")
                break
            if close == "Escape":
                page.keyboard.press("Escape")
            else:  # beside the drawer (on its backdrop)
                box = page.locator(f"#{dialog}").bounding_box()
                left, right = box["x"], size["width"] - box["x"] - box["width"]
                x = left / 2 if left > right else size["width"] - right / 2
                if touch:
                    page.touchscreen.tap(x, size["height"] / 2)
                else:
                    page.mouse.click(x, size["height"] / 2)
            try:
                page.wait_for_function(f"() => !document.getElementById('{dialog}').open",
                                       timeout=2_000)  # fmt: skip
            except Exception:
                out.append(f"the {what} does not close on {close}")
    return out


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


# where the front page's first link to the first notebook is, from the top of the window
START_LINK_TOP = """href => {
    const link = [...document.querySelectorAll("article a")]
        .find(a => a.getAttribute("href") === href);
    return link ? link.getBoundingClientRect().bottom : null;
}"""

# pages whose drawers are opened and closed at every size: the front page, a notebook, a
# solutions page and a page of docs/
DRAWER_PAGES = ["index.html", page_of(NOTEBOOKS[0]), page_of(SOLUTIONS[0]), "docs/install.html"]


@pytest.mark.browser
@pytest.mark.parametrize(
    "size, touch", [(PHONE, True), (TABLET, False)], ids=["phone 390x844 touch", "tablet 820x1180"]
)
def test_site_fits_phones_and_tablets_and_its_drawers_open(site, served, tmp_path, size, touch):
    """At a phone's and a tablet's size no page is wider than the window, and the menu and the
    page-contents drawers open and close."""
    with device(tmp_path, size, touch) as (page, errors, foreign):
        start = time.monotonic()
        out = []
        for name in pages_of(site):
            page.goto(served + name, wait_until="load")
            found = page.evaluate(
                f"async () => {{ await document.fonts.ready; return ({LAYOUT})(); }}"
            )
            if found["overflow"]:
                out.append(
                    f"{name}: {found['overflow']} px wider than its {found['width']} px window"
                )
            if name == "index.html":  # the first notebook's link in the first screen
                top = page.evaluate(START_LINK_TOP, page_of(NOTEBOOKS[0]))
                if top is None or top > size["height"]:
                    out.append(f"index.html: the start link is {top} px down, below the screen")
            if name in DRAWER_PAGES:
                out += [f"{name}: {line}" for line in drawer_problems(page, touch)]
        print(f"read {len(pages_of(site))} pages at {size} in {time.monotonic() - start:.0f} s")
        out += [f"console error: {e}" for e in errors] + [
            f"asked another host: {u}" for u in foreign
        ]
    assert not out, f"{len(out)} problems at {size}:\n" + "\n".join(out[:40])


@pytest.mark.browser
def test_site_collapses_and_reopens_its_sidebar_on_a_laptop(site, served, tmp_path):
    """At 1366x768 the menu button a reader sees hides the navigation sidebar, and shows it
    again (the same upstream bug left it doing nothing)."""
    with device(tmp_path, LAPTOP, False) as (page, errors, foreign):
        page.goto(served + page_of(NOTEBOOKS[0]), wait_until="load")
        button = [b for b in page.locator("button.primary-toggle").all() if b.is_visible()]
        assert button, "no visible menu button at 1366x768"
        sidebar = page.locator("#pst-primary-sidebar")
        for hidden in (True, False):
            button[0].click()
            page.wait_for_timeout(300)
            assert ("pst-sidebar-hidden" in sidebar.get_attribute("class")) == hidden, hidden
        assert not errors and not foreign, (errors, foreign)


@pytest.mark.browser
def test_site_prints_its_code_unclipped(site, served, tmp_path):
    """Printed (print media, an A4 page's width), no code block of a notebook or a solutions
    page is wider than the page: print cannot scroll, so such a block is cut."""
    with device(tmp_path, A4, False) as (page, errors, foreign):
        page.emulate_media(media="print")
        clipped, blocks = [], 0
        for path in NOTEBOOKS + SOLUTIONS:
            page.goto(served + page_of(path), wait_until="load")
            found = page.evaluate(
                f"async () => {{ await document.fonts.ready; return ({LAYOUT})(); }}"
            )
            blocks += found["code_blocks"]
            clipped += [f"{page_of(path)}: {t}" for t in found["code_scrolling"]]
        assert blocks > 100, "no code block was checked"
        assert not clipped, (
            f"{len(clipped)} of {blocks} code blocks clipped in print:\n" + "\n".join(clipped[:20])
        )
        assert not errors and not foreign, (errors, foreign)


AXE = ROOT / "website" / "node_modules" / "axe-core" / "axe.min.js"
AXE_IMPACTS = ("serious", "critical")
RUN_AXE = """async impacts => {
    await document.fonts.ready;
    if (window.MathJax && MathJax.startup) await MathJax.startup.promise;
    const result = await axe.run(document, {resultTypes: ["violations"]});
    return result.violations.filter(v => impacts.includes(v.impact)).map(v =>
        `${v.impact} ${v.id} (${v.help}): ${v.nodes.length} elements, first ${
            v.nodes[0].target.join(" ")}`);
}"""


def axe_version() -> str:
    """The axe-core version website/package.json pins."""
    return json.loads((ROOT / "website" / "package.json").read_text())["devDependencies"][
        "axe-core"
    ]


def axe_problems(page, url: str) -> list[str]:
    """axe-core's serious and critical violations on one page (its script added from the local
    file, so nothing is asked of another host)."""
    page.goto(url, wait_until="load")
    page.add_script_tag(path=str(AXE))
    return page.evaluate(RUN_AXE, list(AXE_IMPACTS))


@pytest.fixture
def axe():
    if not AXE.is_file():
        pytest.skip(
            f"axe-core is not installed at {AXE.relative_to(ROOT)}: npm ci --prefix website"
        )
    installed = json.loads((AXE.parent / "package.json").read_text())["version"]
    assert installed == axe_version(), f"axe-core {installed} installed, {axe_version()} pinned"


@pytest.mark.browser
def test_site_axe_finds_the_faults_it_is_for(axe, tmp_path):
    """axe-core, as run here, reports a page's serious faults: an image with no alt text, a
    button with no name."""
    folder = tmp_path / "axe"
    folder.mkdir()
    (folder / "index.html").write_text(
        '<!doctype html><html lang="en"><head><title>t</title><link rel="icon" href="data:,">'
        '</head><body><main><img src="data:,"><button><i></i></button></main></body></html>'
    )
    with serve(folder) as base, device(tmp_path, LAPTOP, False) as (page, _, _):
        found = axe_problems(page, base + "index.html")
    assert any(line.startswith("critical image-alt") for line in found), found
    assert any(line.startswith("critical button-name") for line in found), found


@pytest.mark.browser
def test_site_has_no_serious_accessibility_fault(site, served, axe, tmp_path):
    """axe-core on every page of the site: no serious or critical violation."""
    with device(tmp_path, LAPTOP, False) as (page, _, foreign):
        start = time.monotonic()
        found = [
            f"{name}: {line}"
            for name in pages_of(site)
            for line in axe_problems(page, served + name)
        ]
        print(f"axe-core {axe_version()}: {len(found)} faults, {time.monotonic() - start:.0f} s")
        assert not foreign, foreign
    assert not found, f"{len(found)} serious or critical violations:\n" + "\n".join(found[:40])
