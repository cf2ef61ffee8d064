"""Sphinx configuration of the series' website (built by website/build.py, which says how).

The title, the repository and the Binder link pattern are read from README.md's title and
Binder badge, so the site says what the README says.
"""

import hashlib
import re
import sys
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

README = (ROOT / "README.md").read_text(encoding="utf-8")
BINDER = re.search(
    r"\((https://mybinder\.org/v2/gh/([\w.-]+/[\w.-]+)/[\w.-]+\?urlpath=lab/tree/)([^)]+)\)", README
)
REPOSITORY = BINDER.group(2)  # owner/name

project = re.search(r"^# (.+)$", README, re.M).group(1)
html_title = project
author = REPOSITORY.split("/")[0]
copyright = "the authors of the series (MIT license)"

# githubpages writes .nojekyll, so that GitHub Pages serves _static/ and _images/ as they are
extensions = ["myst_nb", "sphinx.ext.githubpages", "series_site"]
root_doc = "index"
exclude_patterns = []

# the notebooks as stored: nothing is executed, widgets as their stored view (series_site)
nb_execution_mode = "off"
nb_custom_formats = {".ipynb": "series_site.read_notebook"}
nb_ipywidgets_js = {}  # no widget script from a CDN
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_dmath_double_inline = True  # $$...$$ inside a paragraph, as JupyterLab shows it
myst_heading_anchors = 6
# `Exercise 1 · ...` under `##` titles: the notebooks' heading levels are theirs
suppress_warnings = ["myst.header"]

# series_site: where the pages come from and where Binder opens them
series_repository_root = str(ROOT)
series_github_url = f"https://github.com/{REPOSITORY}"
series_branch = "main"
series_binder_url = BINDER.group(1)
series_binder_home = BINDER.group(3)
# Sphinx rereads every page when conf.py changes, not when the extension does: this makes it so
series_code = hashlib.sha256((HERE / "series_site.py").read_bytes()).hexdigest()

html_theme = "sphinx_book_theme"
html_baseurl = f"https://{author}.github.io/{REPOSITORY.split('/')[1]}/"
html_theme_options = {
    "repository_url": series_github_url,
    "repository_branch": series_branch,
    "use_repository_button": True,
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
}
templates_path = ["_templates"]
# MathJax from the site itself: the files sphinx-mathjax-offline ships (its own hook is not
# declared safe for parallel reading, so its folder is used as a static path instead)
MATHJAX = metadata.distribution("sphinx-mathjax-offline").locate_file("sphinx-mathjax-offline")
html_static_path = ["_static", str(MATHJAX / "static")]
mathjax_path = "mathjax/tex-chtml.js"
html_css_files = ["series.css"]
# the drawers' buttons at every width (a workaround for the themes' bug), names for unnamed
# controls, a copy button on code: website/_static/series.js says what and why
html_js_files = ["series.js"]
html_show_sourcelink = False
html_last_updated_fmt = None
html_favicon = "_static/favicon.svg"  # without one the browser asks for /favicon.ico and logs a 404
html_context = {"default_mode": "auto"}  # the reader's light or dark setting
