"""Sphinx configuration of the course's website: `make site` writes it to build/site/.

Sphinx with MyST-NB reads the notebooks as stored (nothing is executed, no network); the
sphinx-book-theme gives each notebook its launch links (Binder, Colab, a JupyterHub's
nbgitpuller link). `make site` gathers the sources in build/site-src/, each at its path in the
repository (README.md, docs/, notebooks/), with index.md and api.md from this folder: a page's
path is then its path in the repository, which the launch links and the README's own links rely
on. (Symbolic links instead of the copy do not work: MyST resolves links through them.)
"""
import os
import posixpath
import shutil
import sys
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.transforms.post_transforms import SphinxPostTransform

SITE = Path(__file__).resolve().parent
ROOT = SITE.parent
# tfmlib for the API reference (autodoc imports it) straight from the checkout, and the notebook
# reader beside this file.
sys.path[:0] = [str(ROOT), str(SITE)]

REPOSITORY = "https://github.com/transformer-shape-first/course"
BRANCH = "main"
# A school's JupyterHub: `make site HUB_URL=https://hub.example.edu`. Without it the links keep
# the README's placeholder HUB, as a template for teachers to fill in.
HUB_URL = os.environ.get("HUB_URL") or "https://HUB"

# The edition this build makes; `make site` builds both. English (the default): build/site/ from
# the notebooks, the README and docs/. Chinese (SITE_LANGUAGE=zh_CN): build/site/zh/ from
# notebooks/zh (only the notebooks generated from a complete catalogue: tools/i18n.py),
# README.zh.md and the glossary. Each page links to its page in the other edition.
SITE_LANGUAGE = os.environ.get("SITE_LANGUAGE") or "en"
CHINESE = SITE_LANGUAGE == "zh_CN"
if SITE_LANGUAGE not in ("en", "zh_CN"):
    raise ValueError(f"SITE_LANGUAGE must be en or zh_CN, got {SITE_LANGUAGE!r}")

project = "Transformer from scratch in PyTorch, shape first"
author = "the course's authors"
copyright = "the course's authors"
# zh_CN: Sphinx's own labels in Chinese, and a search index that segments Chinese words (jieba).
language = SITE_LANGUAGE
if CHINESE:
    import logging

    import jieba
    jieba.setLogLevel(logging.WARNING)      # its notices on loading its dictionary are not warnings

# githubpages: a .nojekyll file, so that GitHub Pages serves _static/ and _images/ as they are.
extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.githubpages"]
root_doc = "index"
# README.md is the home page's content (index.md includes it), not a page of its own; likewise
# README.zh.md for the Chinese edition (site/zh/index.md).
exclude_patterns = ["README.md", "README.zh.md", "**/.ipynb_checkpoints"]
templates_path = ["templates"]

# --- Notebooks (MyST-NB) ---------------------------------------------------------------------------
nb_execution_mode = "off"                          # the stored outputs, as the notebooks keep them
nb_custom_formats = {".ipynb": "course_notebooks.read"}   # folds, solutions, widgets: see there
nb_ipywidgets_js = {}                              # widgets show their stills: no widget JavaScript
nb_merge_streams = True                            # one block per cell for its printed lines
myst_enable_extensions = ["dollarmath"]            # $...$ as in JupyterLab
myst_heading_anchors = 3                           # #links to headings, as on GitHub

# --- The API reference -----------------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_docstring_signature = False   # describe's docstring starts "describe(x, ...) -> ...": text, not a signature


def docstring_as_written(app, what, name, obj, options, lines):
    """tfmlib's docstrings are plain text, written for help() and Jupyter's `?`, not
    reStructuredText: the page shows them as written (a literal block), rather than misreading
    their indentation and backticks, and failing the build over a docstring that help() shows well."""
    if lines:
        lines[:] = [".. code-block:: text", "   :class: docstring", ""] + [f"   {line}" for line in lines] + [""]

# --- HTML --------------------------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = "Transformer：形状优先" if CHINESE else "Transformer, shape first"
html_theme_options = {
    "repository_url": REPOSITORY,
    "repository_branch": BRANCH,
    "path_to_docs": "",                            # a page's path is its path in the repository
    "use_repository_button": True,
    "launch_buttons": {
        "notebook_interface": "jupyterlab",
        "binderhub_url": "https://mybinder.org",
        "colab_url": "https://colab.research.google.com",
        "jupyterhub_url": HUB_URL,
    },
    # The language switch (templates/language-switch.html) at the top of every page.
    "article_header_end": ["language-switch.html", "article-header-buttons.html"],
}
html_context = {"default_mode": "auto"}          # light or dark as the reader's system is
html_favicon = "favicon.svg"
html_static_path = ["static"]
html_css_files = ["site.css"]                       # (B, L, D); without one the browser asks for a missing /favicon.ico

# MathJax from the site itself (the django-static-mathjax package is only MathJax's files): the
# site then reads offline, and its browser test needs no network. Relative to _static/.
mathjax_path = "mathjax/tex-mml-chtml.js"
MATHJAX_FILES = ["tex-mml-chtml.js", "output/chtml/fonts/woff-v2", "input/tex/extensions"]


def copy_mathjax(app, exception):
    """The part of MathJax's es5 build that TeX input and HTML output load, into _static/mathjax."""
    if exception is not None or app.builder.format != "html":
        return
    import mathjax  # django-static-mathjax
    source = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    target = Path(app.outdir) / "_static" / "mathjax"
    for name in MATHJAX_FILES:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        if (source / name).is_dir():
            shutil.copytree(source / name, target / name, dirs_exist_ok=True)
        else:
            shutil.copy2(source / name, target / name)


def other_edition_page(repo_path: str) -> str | None:
    """The page of the other edition that the repository file `repo_path` is, if any: for the
    English site README.zh.md, notebooks/zh/... and the glossary; for the Chinese one README.md,
    the English notebooks and docs/."""
    if not (ROOT / repo_path).is_file() or not repo_path.endswith((".md", ".ipynb")):
        return None
    page = repo_path.rsplit(".", 1)[0]
    chinese = repo_path == "README.zh.md" or repo_path.startswith("notebooks/zh/") or page == "docs/glossary-zh"
    if chinese == CHINESE or not (chinese or repo_path == "README.md" or repo_path.startswith(("notebooks/", "docs/"))):
        return None
    return root_doc if repo_path in ("README.md", "README.zh.md") else page


def edition_url(pagename: str, other_page: str) -> str:
    """The relative URL from this edition's `pagename` to the other edition's `other_page`. The
    Chinese edition lives in zh/ of the English one, so the site works from any folder."""
    here, there = ("zh/", "") if CHINESE else ("", "zh/")
    return posixpath.relpath(there + other_page + ".html", posixpath.dirname(here + pagename) or ".")


class LinksToTheRepository(SphinxPostTransform):
    """A link to a file of the repository that is a page of the other edition (the README's link
    to the Chinese notebooks) goes to that page; to any other file that is no page of the site
    (the README's benchmarks/RESULTS.md, the guide's ../hub/LOAD.md), to that file on GitHub. A
    link to a file that does not exist is left alone, so MyST still warns about it."""
    default_priority = 8  # before MyST's own resolver (9), which would warn

    def run(self, **kwargs):
        for node in list(self.document.findall(addnodes.pending_xref)):
            if node.get("reftype") != "myst" or node.get("refdomain") is not None:
                continue
            path, hash_, anchor = node["reftarget"].partition("#")
            repo_path = posixpath.normpath(posixpath.join(posixpath.dirname(self.env.docname), path))
            if not path or repo_path.startswith("..") or not (ROOT / repo_path).exists():
                continue
            other = other_edition_page(repo_path)
            uri = (edition_url(self.env.docname, other) if other is not None
                   else f"{REPOSITORY}/blob/{BRANCH}/{repo_path}")
            link = nodes.reference("", "", *node.children, internal=other is not None,
                                   refuri=f"{uri}{hash_}{anchor}")
            node.replace_self(link)


def counterpart(pagename: str) -> str:
    """The page of the other edition that `pagename` switches to: a lesson's translation, or its
    original; any other page, and a lesson not translated yet, switch to the home page."""
    if CHINESE:
        if pagename.startswith("notebooks/zh/"):
            return "notebooks/" + pagename.removeprefix("notebooks/zh/")
        return root_doc
    lesson = pagename.removeprefix("notebooks/")
    if lesson != pagename and (ROOT / "notebooks" / "zh" / f"{lesson}.ipynb").exists():
        return f"notebooks/zh/{lesson}"
    return root_doc


def language_switch(app, pagename, templatename, context, doctree):
    """The link of templates/language-switch.html."""
    url = edition_url(pagename, counterpart(pagename))
    context["language_switch"] = (
        {"url": url, "label": "English", "hreflang": "en", "title": "Read this in English"} if CHINESE else
        {"url": url, "label": "中文", "hreflang": "zh-CN", "title": "中文版"})


def chinese_search():
    """Sphinx 9.0.4's Chinese search, whose JavaScript works: it ships English's stemmer
    (english-stemmer.js: Latin words are stemmed as English, in the index as in the query) but
    then sets `window.Stemmer = ChineseStemmer`, which no file defines, so every page of the
    Chinese site failed with "ChineseStemmer is not defined" and search found nothing. The
    JavaScript name is built from language_name, which is used for nothing else but a log line."""
    from sphinx.search.zh import SearchChinese

    class SearchChineseEnglishStemmer(SearchChinese):
        language_name = "English"
    return SearchChineseEnglishStemmer


def setup(app):
    if CHINESE:
        app.add_search_language(chinese_search())
    app.connect("html-page-context", language_switch)
    app.add_post_transform(LinksToTheRepository)
    app.connect("autodoc-process-docstring", docstring_as_written)
    app.connect("build-finished", copy_mathjax)
