"""The series as a website: what the site adds to the pages Sphinx and myst-nb make.

website/build.py lays the pages out as the repository has them (notebooks/, solutions/, docs/,
tests/README.md) with the README as index.md; website/conf.py loads this extension, which

- shows each widget as the view the notebook stored (the figure its Output widget held, else
  its text), with a sentence saying it is live in JupyterLab and on Binder: the widget
  scripts would come from a CDN, and a site read offline loads nothing from elsewhere;
- points links to files that are not pages (LICENSE, binder/README.md, a folder) at the
  repository on GitHub, and the notebooks' links to ../README.md at the front page;
- shows a remote image (the README's Binder badge) as its text, so no page asks another host;
- adds to each notebook a note before its first exercise that links to its solutions page;
- gives each page its "launch on Binder", "source", "edit this page" and "open an issue" links
  and its link-preview metadata (the page template shows them);
- leaves out of the code the site shows the lines that only the tests read (`# NBVAL_...`):
  the notebooks keep them, a reader has no use for them.
"""

import html
import posixpath
import re
from pathlib import Path
from urllib.parse import urlencode

import nbformat
from docutils import nodes
from sphinx import addnodes

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_NOTE = (
    "*An interactive widget, shown here as the notebook stored it. It is live when the notebook "
    "runs in JupyterLab or on Binder.*"
)
# pages the build writes, and the file or folder of the repository each one stands for
GENERATED = {"index": "README.md", "solutions/index": "solutions"}
# the file to edit for a page the build writes from a folder: the build script writes it
EDITED = {"solutions/index": "website/build.py"}
NOT_FOUND = "404"  # the page GitHub Pages shows for a missing address (website/build.py)
EXERCISE = re.compile(r"\bExercises?\b")


# --- widgets: their stored view ------------------------------------------------------------


def _widget_images(state: dict, model_id: str) -> list[str]:
    """The PNG images (base64) that the Output widgets inside widget `model_id` held when the
    notebook was saved, in the order the widget shows its children."""
    images, todo, seen = [], [model_id], set()
    while todo:
        model = state.get(todo.pop(0))
        if model is None or id(model) in seen:
            continue
        seen.add(id(model))
        fields = model.get("state", {})
        for output in fields.get("outputs", []):
            if "image/png" in output.get("data", {}):
                images.append(output["data"]["image/png"])
        todo += [c.removeprefix("IPY_MODEL_") for c in fields.get("children", [])]
    return images


def static_widget_views(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Replace each widget output by its stored view (its figures, else its text/plain) and a
    note that it is live in JupyterLab and on Binder; drop the widget state, so myst-nb adds
    no widget script to the page."""
    widgets = nb.metadata.pop("widgets", {})
    state = widgets.get(WIDGET_STATE, {}).get("state", {})
    for cell in nb.cells:
        outputs = []
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_VIEW not in data:
                outputs.append(output)
                continue
            images = _widget_images(state, data[WIDGET_VIEW].get("model_id", ""))
            views = [{"image/png": png} for png in images] or [
                {"text/plain": data.get("text/plain", "")}
            ]
            views.append({"text/markdown": WIDGET_NOTE})
            outputs += [
                nbformat.v4.new_output("display_data", data=view, metadata={}) for view in views
            ]
        if cell.cell_type == "code":
            cell.outputs = outputs
    return nb


# code (fenced or inline), which is left alone, or a formula: $$...$$ or $...$
CODE_OR_MATH = re.compile(
    r"(?P<code>^```.*?^```|`[^`]+`)|(?P<math>\$\$.+?\$\$|(?<!\\)\$[^$]+?(?<!\\)\$)", re.S | re.M
)


def math_on_one_line(markdown: str) -> str:
    """Each formula of a markdown cell on one line, as JupyterLab reads it: it takes the math
    out before it parses the markdown, while a markdown parser would read a formula's line
    that starts with `+ ` or `- ` as a list (notebook 07's expanded square). A newline inside
    TeX is a space; a formula with a blank line in it is not a formula and stays as it is."""

    def join(match: re.Match) -> str:
        text = match.group(0)
        if match.group("code") or "\n\n" in text:
            return text
        return re.sub(r"\s*\n\s*", " ", text)

    return CODE_OR_MATH.sub(join, markdown)


# a line that tells nbval what to do with a cell (`# NBVAL_IGNORE_OUTPUT`, `# NBVAL_SKIP`, ...)
NBVAL_LINE = re.compile(r"^[ \t]*#[ \t]*NBVAL_\w+.*(?:\n|$)", re.M)


def without_test_markers(source: str) -> str:
    """A code cell's source without its nbval marker lines (the notebook keeps them)."""
    return NBVAL_LINE.sub("", source)


def read_notebook(text: str) -> nbformat.NotebookNode:
    """myst-nb's reader for .ipynb (nb_custom_formats): the notebook as JupyterLab shows it,
    widgets as their stored views, each formula on one line, and no nbval marker lines."""
    nb = static_widget_views(nbformat.reads(text, as_version=4))
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = math_on_one_line(cell.source)
        elif cell.cell_type == "code":
            cell.source = without_test_markers(cell.source)
    return nb


# --- links and images -----------------------------------------------------------------------


def repo_path(docname: str, source_suffix: str) -> str:
    """The repository file (or folder) a page was made from."""
    return GENERATED.get(docname, docname + source_suffix)


def _repo_target(env, docname: str, target: str) -> tuple[str, str]:
    """A link's target, relative to the repository's root, and its #anchor ('' if none)."""
    path, _, anchor = target.partition("#")
    here = posixpath.dirname(repo_path(docname, Path(env.doc2path(docname)).suffix))
    return posixpath.normpath(posixpath.join(here, path)), anchor


def link_outside_pages(app, doctree) -> None:
    """Links to repository files that are not pages: README.md is the front page, a folder
    with a generated page is that page, anything else is its file on GitHub."""
    env, config = app.env, app.config
    docname = env.docname
    pages = {repo: doc for doc, repo in GENERATED.items()}
    for node in list(doctree.findall(addnodes.pending_xref)):
        if node.get("reftype") != "myst" or node.get("refdomain"):
            continue  # a link myst-parser resolved to a page already
        target = node["reftarget"]
        if target.startswith("#"):
            continue
        path, anchor = _repo_target(env, docname, target)
        root = Path(config.series_repository_root)
        if path in pages:
            node["refdomain"], node["reftarget"] = "doc", pages[path]
            node["reftargetid"] = anchor or None
        elif path != ".." and not path.startswith("../") and (root / path).exists():
            kind = "tree" if (root / path).is_dir() else "blob"
            url = f"{config.series_github_url}/{kind}/{config.series_branch}/{path}"
            node.replace_self(
                nodes.reference("", "", *node.children, refuri=url + (f"#{anchor}" * bool(anchor)))
            )
        # anything else stays, and myst-parser warns that it is broken (the build fails on it)


def remote_images_as_text(app, doctree) -> None:
    """An image from another host (a badge) becomes its alt text: no page loads anything
    from elsewhere."""
    for image in list(doctree.findall(nodes.image)):
        if re.match(r"^(https?:)?//", image["uri"]):
            image.replace_self(nodes.inline("", image.get("alt", "")))


# --- solutions ------------------------------------------------------------------------------


def solutions_page(found_docs, docname: str) -> str | None:
    """The solutions page of notebook page `docname` (notebooks/NN_x), if there is one."""
    if not re.fullmatch(r"notebooks/\d\d[a-z]?_.+", docname):
        return None
    number = docname.split("/")[1].split("_")[0]
    found = sorted(d for d in found_docs if re.fullmatch(rf"solutions/{number}_.+_solutions", d))
    return found[0] if found else None


def _first_exercise(doctree):
    """(parent, index) where the note goes: at the top of the first section whose title names
    exercises, else before the first paragraph that opens with a bold "Exercise", else at the
    end of the page."""
    for node in doctree.findall(lambda n: isinstance(n, nodes.section | nodes.paragraph)):
        if isinstance(node, nodes.section):
            if EXERCISE.search(node[0].astext()):
                return node, 1
        else:
            first = [c for c in node.children if c.astext().strip()][:1]
            if first and isinstance(first[0], nodes.strong):
                if first[0].astext().startswith("Exercise"):
                    return node.parent, node.parent.index(node)
    top = next(iter(doctree.findall(nodes.section)), doctree)
    return top, len(top)


def note_solutions(app, doctree) -> None:
    """Before a notebook's first exercise: a note that links to its solutions page."""
    solutions = solutions_page(app.env.found_docs, app.env.docname)
    if solutions is None:
        return
    link = addnodes.pending_xref(
        "", refdomain="std", reftype="doc", reftarget=f"/{solutions}", refexplicit=False
    )
    link += nodes.inline("", solutions)
    text = nodes.paragraph("", "Worked solutions to this notebook's exercises: ")
    text += [link, nodes.Text(". Try each exercise first.")]
    note = nodes.admonition("", nodes.title("", "Solutions"), text, classes=["series-solutions"])
    parent, index = _first_exercise(doctree)
    parent.insert(index, note)


# --- the links at the top of each page ------------------------------------------------------


def description(doctree, limit: int = 200) -> str:
    """A page's first paragraph of prose, on one line, cut at a word before `limit`
    characters: what a link preview shows under the title."""
    for paragraph in doctree.findall(nodes.paragraph):
        text = " ".join(paragraph.astext().split())
        if len(text) > 40 and not text.startswith(("Launch on Binder", "Binder")):
            return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"
    return ""


def page_links(app, pagename, templatename, context, doctree) -> None:
    """For the page template: context['series_binder_url'], ['series_source_url'],
    ['series_edit_url'] and ['series_issue_url'], and ['series_preview'] (the title,
    description and address a link preview shows)."""
    if doctree is None or pagename not in app.env.found_docs or pagename == NOT_FOUND:
        return  # search, genindex, the 404 page: no source
    config = app.config
    path = repo_path(pagename, Path(app.env.doc2path(pagename)).suffix)
    kind = "tree" if pagename in GENERATED and not path.endswith(".md") else "blob"
    repository = f"{config.series_github_url}/{kind}/{config.series_branch}"
    context["series_source_url"] = f"{repository}/{path}"
    opened = config.series_binder_home if pagename == "index" else path
    context["series_binder_url"] = config.series_binder_url + opened
    edited = EDITED.get(pagename, path)
    context["series_edit_url"] = f"{config.series_github_url}/edit/{config.series_branch}/{edited}"
    title = html.unescape(re.sub(r"<[^>]+>", "", context.get("title", ""))).strip()
    title = title or config.project
    url = config.html_baseurl + ("" if pagename == "index" else f"{pagename}.html")
    body = f"Page: {url}\n\n"
    query = urlencode({"title": f"{title}: ", "body": body})
    context["series_issue_url"] = f"{config.series_github_url}/issues/new?{query}"
    context["series_preview"] = {
        "title": title if pagename == "index" else f"{title} · {config.project}",
        "description": description(doctree) or config.project,
        "url": url,
    }


def setup(app):
    app.add_config_value("series_repository_root", "", "env")
    app.add_config_value("series_github_url", "", "env")
    app.add_config_value("series_branch", "main", "env")
    app.add_config_value("series_binder_url", "", "env")
    app.add_config_value("series_binder_home", "", "env")
    app.add_config_value("series_code", "", "env")
    app.connect("doctree-read", link_outside_pages)
    app.connect("doctree-read", remote_images_as_text)
    app.connect("doctree-read", note_solutions)
    app.connect("html-page-context", page_links)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
