"""The head explorer (notebook 05) and the watch-the-head-form sliders (notebook 06) in a
real browser: JupyterLab on loopback, driven in a headless Chromium by Playwright.

What a learner does is what the test does: open the notebook, run the cell, type a
sentence, change the head (or move the slider), and see the figure change. It also
checks that the page logs no error and that the browser asked nothing of any host other
than the local JupyterLab (the widgets' code ships inside the ipywidgets package; nothing
comes from a CDN), with every other request refused, so the page works offline.

Needs Debian's `chromium` (/usr/bin/chromium) and the `playwright` package, which drives
it (no browser of Playwright's own is downloaded). Without them the tests skip and say
why. Set EXPLORER_SCREENSHOT=path.png to save a picture of the explorer (docs/explorer.md's).
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # no route out: every host name but the loopback fails to resolve
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
]
LOCAL = {"127.0.0.1", "localhost"}
MARKER_05 = "# explorer: your own sentence"
MARKER_06 = "# explorer: watch the head form"
PER_TEST_S = 120  # a hung test fails here (all of them together take about a minute)
WAIT_MS = 90_000  # the longest single wait (a kernel start and a model load on a busy machine)


def _skip_reason() -> str | None:
    if not Path(CHROMIUM).is_file():
        return f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -r requirements.txt)"
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return "ipywidgets is not installed (pip install -r requirements.txt)"
    return None


@pytest.fixture(autouse=True)
def overall_timeout():
    """Never hang: a test that runs past PER_TEST_S fails (and its fixtures still clean up)."""

    def expired(signum, frame):
        raise TimeoutError(f"a browser test ran past {PER_TEST_S} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(PER_TEST_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _marked_copy(src: Path, marker: str, dst: Path, through_marker: bool) -> bool:
    """Copy a notebook without outputs; through_marker=True keeps only the cells up to and
    including the first one whose source contains marker. False if no cell has it."""
    nb = json.loads(src.read_text())
    hits = [i for i, c in enumerate(nb["cells"]) if marker in "".join(c["source"])]
    if not hits:
        return False
    if through_marker:
        nb["cells"] = nb["cells"][: hits[0] + 1]
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    dst.write_text(json.dumps(nb))
    return True


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab on 127.0.0.1 (free port, no token, no password) serving a temporary
    folder; stopped at the end. Yields (base url, folder)."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("lab")
    home = tmp_path_factory.mktemp("home")
    port = _free_port()
    env = dict(os.environ)
    env.update(
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
        IPYTHONDIR=str(home / "ipython"),
        MHA_LIB_DEVICE="cpu",
    )
    env.pop("MPLBACKEND", None)
    log = open(home / "lab.log", "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            "--IdentityProvider.token=",
            "--ServerApp.password=",
            f"--ServerApp.root_dir={root}",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",  # no extension catalogue to look up
            *(["--allow-root"] if os.geteuid() == 0 else []),  # CI containers run as root
        ],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"JupyterLab exited:\n{(home / 'lab.log').read_text()[-2000:]}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{url}/api/status", timeout=2) as r:
                    if r.status == 200:
                        break
            if time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not start in 60 s:\n{(home / 'lab.log').read_text()}")
            time.sleep(0.5)
        yield url, root
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


@contextlib.contextmanager
def browser_page(tmp_path):
    """A fresh Chromium (new empty profile) whose page records console errors and every
    request; requests to any host but the loopback are refused and recorded."""
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
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport={"width": 1400, "height": 1000},
        )
        try:
            context.route("**/*", route)
            page = context.pages[0] if context.pages else context.new_page()
            page.set_default_timeout(WAIT_MS)
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.on(
                "request",
                lambda req: (
                    foreign.append(req.url)
                    if urlparse(req.url).scheme in ("http", "https", "ws", "wss")
                    and urlparse(req.url).hostname not in LOCAL
                    else None
                ),
            )
            try:
                yield page, errors, foreign
            except BaseException:
                page.screenshot(path=str(tmp_path / "failure.png"), timeout=5000)
                print(f"the page at the failure: {tmp_path / 'failure.png'}")
                raise
        finally:
            context.close()


def _open(page, url: str, name: str):
    # a workspace of its own, reset: no tab of an earlier test is restored to steal the focus
    workspace = Path(name).stem.replace("_", "-")
    page.goto(f"{url}/lab/workspaces/{workspace}/tree/{name}?reset", wait_until="domcontentloaded")
    page.locator(".jp-Notebook .jp-Cell").first.wait_for()
    # the kernel is ready when its status says idle
    page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").first.wait_for(
        state="attached"
    )


def _images(cell) -> str:
    """The sources of the images a cell's output shows now (the figure, as a PNG data URL)."""
    return "|".join(cell.locator(".jp-OutputArea img").evaluate_all("l => l.map(i => i.src)"))


def _wait_changed(page, cell, before: str, what: str) -> str:
    """Wait until the cell's figure differs from `before`; fail at once on a traceback."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while time.monotonic() < deadline:
        failed = page.locator("[data-mime-type='application/vnd.jupyter.stderr']").filter(
            has_text="Traceback"
        )
        if failed.count():
            pytest.fail(f"a cell failed before {what}:\n{failed.first.inner_text()[-1500:]}")
        now = _images(cell)
        if now and now != before:
            return now
        page.wait_for_timeout(250)
    pytest.fail(f"the figure did not change after {what}")


def _clean(page, errors, foreign):
    """No console error, no request to another host; first a probe shows the listeners work."""
    local = page.evaluate(
        "() => performance.getEntriesByType('resource').filter("
        "e => new URL(e.name).hostname === '127.0.0.1').length"
    )
    assert local > 0, "the page loaded nothing from the local JupyterLab: nothing was checked"
    page.evaluate("() => console.error('probe')")
    page.wait_for_timeout(200)
    assert errors == ["probe"] or (errors and errors[-1] == "probe"), "console errors go unseen"
    errors.pop()
    assert not errors, f"the browser console shows errors: {errors}"
    assert not foreign, f"the page asked hosts other than the local JupyterLab: {foreign}"


def test_explorer_in_notebook_05(lab, tmp_path):
    url, root = lab
    src = ROOT / "notebooks" / "05_heads_at_work.ipynb"
    if not _marked_copy(src, MARKER_05, root / "nb05.ipynb", through_marker=False):
        pytest.fail(f"notebook 05 has no cell with {MARKER_05!r}")
    with browser_page(tmp_path) as (page, errors, foreign):
        _open(page, url, "nb05.ipynb")
        cell = page.locator(".jp-CodeCell").filter(has_text=MARKER_05).first
        cell.locator(".jp-InputPrompt").click()  # select the cell (its code is self-contained)
        page.wait_for_timeout(500)
        page.keyboard.press("Shift+Enter")
        app = cell.locator(".mha-explorer")
        app.wait_for()
        first = _wait_changed(page, cell, "", "running the cell")

        box = cell.locator(".mha-explorer-sentence input")
        box.fill("The cat slept on the old mat.")
        box.press("Enter")
        typed = _wait_changed(page, cell, first, "typing a sentence")
        if os.environ.get("EXPLORER_SCREENSHOT"):  # L0.H2 on the typed sentence
            page.wait_for_timeout(500)
            app.screenshot(path=os.environ["EXPLORER_SCREENSHOT"])

        cell.locator(".mha-explorer-head select").select_option(label="7")
        _wait_changed(page, cell, typed, "changing the head")
        assert "✗" not in cell.locator(".mha-explorer-figure").inner_text()
        _clean(page, errors, foreign)


def _run_all_and_slide(page, url: str, name: str, marker: str) -> None:
    """Open a notebook, run all its cells (Run > Run All Cells), move the first slider of
    the cell with the marker (to its end, or to its start if it is there already) and wait
    for the figure to change."""
    _open(page, url, name)
    page.locator(".jp-Notebook .jp-Cell").first.click()
    page.wait_for_timeout(500)
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    cell = page.locator(".jp-CodeCell").filter(has_text=marker).first
    slider = cell.locator(".widget-slider").first
    slider.wait_for()
    before = _wait_changed(page, cell, "", "running the notebook")
    readout = slider.locator(".widget-readout")
    value = readout.inner_text()
    handle = slider.locator(".noUi-handle").first
    handle.focus()
    handle.press("End")
    if readout.inner_text() == value:  # it started at the end: go to the start
        handle.press("Home")
    assert readout.inner_text() != value, "the slider did not move"
    _wait_changed(page, cell, before, "moving the slider")


SLIDER_CELL = """# explorer: watch the head form (a stand-in)
import ipywidgets as widgets
import matplotlib.pyplot as plt


def show(step):
    plt.imshow([[step, 0], [0, 1]], vmin=0, vmax=3)
    plt.title(f"step {step}")
    plt.show()


widgets.interactive(show, step=widgets.SelectionSlider(options=[0, 1, 2], value=0,
                                                       continuous_update=False))
"""


def test_slider_machinery_on_a_stand_in(lab, tmp_path):
    """The slider test below, on a one-cell notebook: it runs even when notebook 06 has no
    slider cell, so the way the test moves a slider and sees the figure change is checked."""
    url, root = lab
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {},
                "source": SLIDER_CELL,
                "outputs": [],
                "execution_count": None,
            }
        ],
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (root / "stand_in.ipynb").write_text(json.dumps(nb))
    with browser_page(tmp_path) as (page, errors, foreign):
        _run_all_and_slide(page, url, "stand_in.ipynb", "# explorer: watch the head form")
        _clean(page, errors, foreign)


def test_watch_the_head_form_in_notebook_06(lab, tmp_path):
    url, root = lab
    src = ROOT / "notebooks" / "06_heads_that_learn.ipynb"
    if not _marked_copy(src, MARKER_06, root / "nb06.ipynb", through_marker=True):
        pytest.skip("notebook 06 has no watch-the-head-form cell")
    with browser_page(tmp_path) as (page, errors, foreign):
        _run_all_and_slide(page, url, "nb06.ipynb", MARKER_06)
        _clean(page, errors, foreign)
