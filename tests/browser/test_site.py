"""The course's website (`make site`, README "The course as a website"), built once per test run
with the Makefile's own command, and read in Debian's Chromium (the `browser` fixture of
conftest.py) from a local HTTP server.

* the build: `make site` turns every Sphinx warning into an error (-W); here nothing else printed
  while building may warn either (a Python warning, such as torch's without NumPy). No warning is
  allowed: should one ever have to be, it goes into site/conf.py's suppress_warnings, with why;
* every page loads with no console or page error, every image is drawn, and every link inside the
  site reaches a file that exists and, for a page, an anchor that exists. The only requests that
  leave the site are the README's badge pictures (Binder's, Colab's): offline here, they are
  answered with a blank picture, and any other request that leaves the site fails the test;
* search finds, for each notebook, a word of its prose that no other notebook uses;
* each notebook's launch links (Binder, Colab, a JupyterHub's nbgitpuller link) open that notebook
  of the repository the README's own Binder badge names;
* each notebook's page holds every cell's text in the notebook's order: markdown, code and
  outputs, the folded outputs too (the predict answers, in a closed <details>), a widget's note in
  place of the widget, and no output of a cell that calls solution();
* the Chinese edition (build/site/zh/, from notebooks/zh) passes all of the above too, its search
  finds a Chinese word of each of its lessons, and every page of both editions has a language
  switch to the same page in the other edition (or to its home page, for a page not translated).
"""
from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import threading
from dataclasses import dataclass, field
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import nbformat
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = (sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
             + sorted((ROOT / "notebooks" / "bonus").glob("*.ipynb")))
# The Chinese edition: the notebooks generated so far (tools/i18n.py), in the same order.
NOTEBOOKS_ZH = (sorted((ROOT / "notebooks" / "zh").glob("[0-9][0-9]_*.ipynb"))
                + sorted((ROOT / "notebooks" / "zh" / "bonus").glob("*.ipynb")))
GLOSSARY = ROOT / "docs" / "glossary-zh.md"
BUILD_TIMEOUT_S = 900
PAGE_TIMEOUT_MS = 60_000
# The README's badges, the only pictures the site takes from elsewhere.
BADGE_HOSTS = {"mybinder.org", "colab.research.google.com"}
BLANK_SVG = '<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"/>'
# site/course_notebooks.py: the line that stands in for a widget.
WIDGET_NOTE = "In JupyterLab it moves"
SOLUTION_CALL = re.compile(r"\bsolution\s*\(")


# --- The build, once per test run -----------------------------------------------------------------

@dataclass
class BuiltSite:
    html: Path     # the site
    log: str       # what `make site` printed


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> BuiltSite:
    base = tmp_path_factory.mktemp("site")
    # As a user runs it, not as a sub-make of `make test` (whose -j would make it warn).
    env = {name: value for name, value in os.environ.items()
           if name not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    # The install first (a no-op after `make test`'s own): pip's notices are not the build's.
    install = subprocess.run(["make", "--no-print-directory", "site-install"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    assert install.returncode == 0, f"make site-install failed:\n{install.stdout[-3000:]}{install.stderr[-3000:]}"
    build = subprocess.run(["make", "--no-print-directory", "site", f"SITE_SRC={base / 'src'}",
                            f"SITE_OUT={base / 'html'}"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=BUILD_TIMEOUT_S)
    log = build.stdout + build.stderr
    assert build.returncode == 0, f"make site failed:\n{log[-6000:]}"
    return BuiltSite(html=base / "html", log=log)


def page_of(notebook: Path) -> str:
    """The site's path of a notebook's page: notebooks/05_attention.ipynb -> notebooks/05_attention.html;
    the Chinese edition is the site in zh/: notebooks/zh/01_shapes.ipynb -> zh/notebooks/zh/01_shapes.html."""
    path = notebook.relative_to(ROOT).with_suffix(".html").as_posix()
    return f"zh/{path}" if path.startswith("notebooks/zh/") else path


def test_the_site_builds_without_a_warning(built_site):
    warnings = [line for line in built_site.log.splitlines() if re.search(r"warning|error", line, re.I)]
    assert not warnings, "make site printed warnings:\n" + "\n".join(warnings)
    pages = set(site_pages(built_site.html))
    expected = {"index.html", "api.html", "search.html", "docs/teachers_guide.html",
                "zh/index.html", "zh/search.html", "zh/docs/glossary-zh.html"}
    expected |= {page_of(notebook) for notebook in NOTEBOOKS + NOTEBOOKS_ZH}
    assert expected <= pages, f"pages missing from the site: {sorted(expected - pages)}"


# --- Every page in the browser --------------------------------------------------------------------

class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def site_url(built_site):
    handler = functools.partial(QuietHandler, directory=str(built_site.html))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Visit:
    errors: list[str] = field(default_factory=list)          # console errors, page errors, failed requests
    broken_images: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)           # every href, absolute
    ids: set[str] = field(default_factory=set)
    language_switch: str | None = None                       # its href, absolute


@pytest.fixture(scope="session")
def site_context(browser, site_url):
    """A browser context whose requests outside the site are recorded: a badge picture gets a
    blank picture, anything else is refused (and so shows as an error of its page)."""
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    context.outside_requests = []

    def outside(route):
        request = route.request
        context.outside_requests.append((request.resource_type, request.url))
        if request.resource_type == "image" and urlsplit(request.url).hostname in BADGE_HOSTS:
            route.fulfill(status=200, content_type="image/svg+xml", body=BLANK_SVG)
        else:
            route.abort()

    # A regular expression, matched by Playwright's driver: a Python predicate would send every
    # request of every page through this process.
    context.route(re.compile(rf"^(?!{re.escape(site_url)}/)"), outside)
    try:
        yield context
    finally:
        context.close()


# After the page's load event: MathJax's typesetting and the fonts it asks for, then the state.
READ_PAGE = """async () => {
  if (window.MathJax && MathJax.startup) await MathJax.startup.promise;
  await document.fonts.ready;
  return {
    broken: Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0)
                 .map(i => i.currentSrc || i.src),
    links: Array.from(document.querySelectorAll('a[href]'), a => a.href),
    ids: Array.from(document.querySelectorAll('[id]'), e => e.id),
    languageSwitch: (document.querySelector('a.language-switch') || {}).href || null,
  };
}"""


def site_pages(site: Path) -> list[str]:
    """The site's pages, as paths: not the theme's Jinja macro files it copies to _static/."""
    return sorted(path.relative_to(site).as_posix() for path in site.rglob("*.html")
                  if "_static" not in path.relative_to(site).parts)


@pytest.fixture(scope="session")
def visits(built_site, site_url, site_context) -> dict[str, Visit]:
    """Every page of the site, loaded once: {path: what the browser saw}. One tab goes from page to
    page, as a reader's does (a new tab per page costs Chromium a renderer's start each); what it
    reports is filed under the page being visited."""
    result, leaving = {}, [False]

    def failed(request):
        # leaving a page aborts what it still loads (the favicon, after the load event): not its error
        if not (leaving[0] and request.failure == "net::ERR_ABORTED"):
            visit.errors.append(f"request failed: {request.url} ({request.failure})")

    page = site_context.new_page()
    page.on("console", lambda m: m.type == "error" and visit.errors.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: visit.errors.append(f"page error: {e}"))
    page.on("requestfailed", failed)
    try:
        for path in site_pages(built_site.html):
            visit, leaving[0] = result.setdefault(path, Visit()), False
            response = page.goto(f"{site_url}/{path}", wait_until="load", timeout=PAGE_TIMEOUT_MS)
            if not response.ok:
                visit.errors.append(f"HTTP {response.status}")
            state = page.evaluate(READ_PAGE)
            visit.broken_images, visit.links, visit.ids = state["broken"], state["links"], set(state["ids"])
            visit.language_switch = state["languageSwitch"]
            leaving[0] = True
            page.goto("about:blank")  # the page's last requests and errors come in before the next one's
    finally:
        page.close()
    return result


def test_every_page_loads_without_an_error(visits):
    problems = [f"{path}: {error}" for path, visit in visits.items() for error in visit.errors]
    assert not problems, "\n".join(problems)


def test_every_image_is_drawn(visits):
    broken = [f"{path}: {src}" for path, visit in visits.items() for src in visit.broken_images]
    assert not broken, "images that did not load:\n" + "\n".join(broken)


def test_every_figure_of_a_notebook_is_on_its_page(built_site):
    """A notebook's page has at least as many pictures as the notebook stores figures."""
    short = []
    for notebook in NOTEBOOKS + NOTEBOOKS_ZH:
        page_html = (built_site.html / page_of(notebook)).read_text()
        article = page_html[page_html.find("<article"):page_html.rfind("</article>")]
        stored, shown = _count_pictures(_read(notebook)), article.count("<img ")
        if shown < stored:
            short.append(f"{notebook.name}: {stored} figures stored, {shown} pictures on the page")
    assert not short, "\n".join(short)


def test_only_the_readme_badges_come_from_elsewhere(visits, site_context):
    strangers = [(kind, url) for kind, url in site_context.outside_requests
                 if not (kind == "image" and urlsplit(url).hostname in BADGE_HOSTS)]
    assert not strangers, f"the site asked for these outside itself: {strangers}"


def test_every_internal_link_and_anchor_exists(built_site, visits, site_url):
    broken = []
    for path, visit in visits.items():
        for link in visit.links:
            if not link.startswith(site_url + "/"):
                continue
            target, _, anchor = link[len(site_url) + 1:].partition("#")
            target = unquote(target.split("?")[0]) or "index.html"
            file = built_site.html / target
            if file.is_dir():
                target, file = f"{target.rstrip('/')}/index.html", file / "index.html"
            if not file.is_file():
                broken.append(f"{path}: {link} (no file {target})")
            elif anchor and target in visits and unquote(anchor) not in visits[target].ids:
                broken.append(f"{path}: {link} (no anchor #{unquote(anchor)} in {target})")
    assert not broken, "broken links:\n" + "\n".join(broken)


# --- Search ---------------------------------------------------------------------------------------

def unique_words(notebooks: list[Path]) -> dict[Path, str]:
    """For each notebook, the longest word (6 letters or more, ties alphabetical) of its prose
    that no other notebook's prose uses."""
    words = {nb: set(re.findall(r"(?<![\w-])[A-Za-z]{6,}(?![\w-])",
                                " ".join(" ".join(seg) for cell in _read(nb).cells
                                         if cell.cell_type == "markdown"
                                         for seg in markdown_segments(cell.source))))
             for nb in notebooks}
    chosen = {}
    for nb, own in words.items():
        others = {word.lower() for other in notebooks if other != nb for word in words[other]}
        candidates = sorted((w for w in own if w.lower() not in others), key=lambda w: (-len(w), w))
        assert candidates, f"{nb.name}: every word of its prose is in another notebook too"
        chosen[nb] = candidates[0]
    return chosen


def search_terms(site: Path) -> set[str]:
    """The words a built site's search index holds (Sphinx's searchindex.js)."""
    text = (site / "searchindex.js").read_text(encoding="utf-8")
    return set(json.loads(text[text.index("(") + 1:text.rindex(")")])["terms"])


def chinese_words(notebooks: list[Path], indexed: set[str]) -> dict[Path, str]:
    """For each Chinese notebook, a term of the glossary (docs/glossary-zh.md, two Chinese characters
    or more) that its prose uses and that the search index holds as one word (jieba cuts
    多头注意力 into 多头 and 注意力), the one fewest other Chinese notebooks use (then the longest)."""
    terms = set(re.findall(r"^\|[^|]*\|\s*([\u4e00-\u9fff]{2,})\s*\|", GLOSSARY.read_text(), re.M)) & indexed
    prose = {nb: " ".join(cell.source for cell in _read(nb).cells if cell.cell_type == "markdown")
             for nb in notebooks}
    chosen = {}
    for nb, text in prose.items():
        used = [t for t in terms if t in text]
        assert used, f"{nb.name}: its prose uses no term of the glossary"
        chosen[nb] = min(used, key=lambda t: (sum(t in other for o, other in prose.items() if o != nb), -len(t), t))
    return chosen


@pytest.mark.parametrize("edition", ["en", "zh"])
def test_search_finds_a_word_of_each_notebook(built_site, site_context, site_url, edition):
    page = site_context.new_page()
    missed = []
    words = (unique_words(NOTEBOOKS) if edition == "en"
             else chinese_words(NOTEBOOKS_ZH, search_terms(built_site.html / "zh")))
    search = "search.html" if edition == "en" else "zh/search.html"
    try:
        for notebook, word in words.items():
            page.goto(f"{site_url}/{search}?q={word}", wait_until="load", timeout=PAGE_TIMEOUT_MS)
            page.wait_for_function(
                "() => (document.querySelector('#search-results .search-summary') || {}).innerText",
                timeout=PAGE_TIMEOUT_MS)
            found = {unquote(urlsplit(href).path).lstrip("/") for href in page.eval_on_selector_all(
                "#search-results ul.search li a", "links => links.map(a => a.href)")}
            if page_of(notebook) not in found:
                missed.append(f"{word!r} ({notebook.name}) found only {sorted(found)}")
    finally:
        page.close()
    assert not missed, "search missed:\n" + "\n".join(missed)


# --- The language switch ---------------------------------------------------------------------------

def test_every_page_switches_to_the_same_page_in_the_other_edition(visits, site_url):
    """A lesson's page switches to its translation (and back); a lesson not translated yet, and
    every other page, switches to the other edition's home page."""
    translated = {page_of(nb): page_of(ROOT / "notebooks" / nb.relative_to(ROOT / "notebooks" / "zh"))
                  for nb in NOTEBOOKS_ZH}
    pairs = {**translated, **{english: chinese for chinese, english in translated.items()}}
    wrong = []
    for path, visit in visits.items():
        home = "index.html" if path.startswith("zh/") else "zh/index.html"
        expected = f"{site_url}/{pairs.get(path, home)}"
        if visit.language_switch != expected:
            wrong.append(f"{path}: switches to {visit.language_switch}, expected {expected}")
    assert not wrong, "\n".join(wrong)


# --- Launch links ---------------------------------------------------------------------------------

def test_launch_links_open_their_own_notebook(visits):
    badge = re.search(r"https://mybinder\.org/v2/gh/([\w.-]+)/([\w.-]+)/([\w.-]+)\?",
                      (ROOT / "README.md").read_text())
    assert badge, "README.md has no Binder badge to take the repository from"
    owner, repo, branch = badge.groups()
    wrong = []
    for notebook in NOTEBOOKS + NOTEBOOKS_ZH:
        path = notebook.relative_to(ROOT).as_posix()
        links = visits[page_of(notebook)].links
        binder = [l for l in links if l.startswith("https://mybinder.org/")]
        colab = [l for l in links if l.startswith("https://colab.research.google.com/")]
        hub = [l for l in links if "/hub/user-redirect/git-pull?" in l]
        expected_binder = f"https://mybinder.org/v2/gh/{owner}/{repo}/{branch}?urlpath=lab/tree/{path}"
        expected_colab = f"https://colab.research.google.com/github/{owner}/{repo}/blob/{branch}/{path}"
        if binder != [expected_binder]:
            wrong.append(f"{path}: Binder {binder}, expected [{expected_binder}]")
        if colab != [expected_colab]:
            wrong.append(f"{path}: Colab {colab}, expected [{expected_colab}]")
        query = parse_qs(urlsplit(hub[0]).query) if len(hub) == 1 else None
        expected_hub = {"repo": [f"https://github.com/{owner}/{repo}"], "branch": [branch],
                        "urlpath": [f"lab/tree/{repo}/{path}"]}   # nbgitpuller clones into ~/REPO
        if query != expected_hub:
            wrong.append(f"{path}: JupyterHub {hub}, expected a git-pull link with {expected_hub}")
    assert not wrong, "\n".join(wrong)


# --- Each notebook's text, nothing dropped --------------------------------------------------------

# A word: a run of Latin letters and digits, or of Chinese characters (the Chinese edition).
WORD = re.compile(r"[A-Za-z0-9]+|[\u4e00-\u9fff]+")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
MATH = re.compile(r"\$\$.+?\$\$|\$[^$\n]+\$", re.S)
MD_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
HTML_TAG = re.compile(r"<!--.*?-->|</?[A-Za-z][^>]*>", re.S)
ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
LIST_NUMBER = re.compile(r"^(\s*(?:>\s*)*)\d+[.)](?=\s)", re.M)
BREAK = "\x00"


@functools.cache
def _read(notebook: Path):
    return nbformat.read(notebook, as_version=4)


def _count_pictures(notebook) -> int:
    return sum(any(mime.startswith("image/") for mime in output.get("data", {}))
               for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs)


class _Text(HTMLParser):
    """The text of an HTML fragment, scripts and styles left out."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts, self.skipping = [], 0

    def handle_starttag(self, tag, attrs):
        self.skipping += tag in ("script", "style")

    def handle_endtag(self, tag):
        self.skipping -= tag in ("script", "style")

    def handle_data(self, data):
        if not self.skipping:
            self.parts.append(data)


def html_text(fragment: str) -> str:
    parser = _Text()
    parser.feed(fragment)
    return " ".join(parser.parts)


def markdown_segments(source: str) -> list[list[str]]:
    """The words a reader sees of a markdown text, as runs that the page shows unbroken: the
    formulas (MathJax's own text) split them; link targets, pictures, HTML tags and list
    numbers are not text; code spans are, as written."""
    source = LIST_NUMBER.sub(r"\1", source)
    parts, last = [], 0
    for span in CODE_SPAN.finditer(source):
        parts += [_prose(source[last:span.start()]), span.group(2)]
        last = span.end()
    parts.append(_prose(source[last:]))
    return [WORD.findall(run) for run in " ".join(parts).split(BREAK)]


def _prose(text: str) -> str:
    text = MATH.sub(BREAK, text)
    text = LINK_TARGET.sub("]", MD_IMAGE.sub(" ", text))
    return ESCAPE.sub(r"\1", HTML_TAG.sub(" ", text))


def expected_runs(notebook):
    """(cell index, what, words) of everything a notebook's page must show, in order."""
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "markdown":
            for run in markdown_segments(cell.source):
                yield index, "markdown", run
            continue
        if cell.cell_type != "code":
            continue
        yield index, "code", WORD.findall(cell.source)
        if SOLUTION_CALL.search(cell.source):
            continue  # never shown: test_solution_output_is_never_shown
        for output in cell.outputs:
            data = output.get("data", {})
            if output.output_type == "stream":
                yield index, "printed", WORD.findall(ANSI.sub("", output.text))
            elif output.output_type == "error":
                yield index, "error", WORD.findall(ANSI.sub("", "\n".join(output.traceback)))
            elif "application/vnd.jupyter.widget-view+json" in data:
                yield index, "widget note", WORD.findall(WIDGET_NOTE)
            elif "text/html" in data:
                yield index, "html output", WORD.findall(html_text(data["text/html"]))
            elif "text/markdown" in data:
                for run in markdown_segments(data["text/markdown"]):
                    yield index, "markdown output", run
            elif "text/plain" in data and not any(mime.startswith("image/") for mime in data):
                yield index, "output", WORD.findall(data["text/plain"])


def words_of(fragment: str) -> str:
    """An HTML fragment's text as ' word word ... ', for finding runs of words in it."""
    return " " + " ".join(WORD.findall(html_text(fragment))) + " "


def article_words(page_html: str) -> str:
    """The page's article (no menus, no table of contents) as ' word word ... '."""
    return words_of(page_html[page_html.find("<article"):page_html.rfind("</article>")])


def dropped(notebook: Path, page_html: str) -> list[str]:
    """What of the notebook the page does not show, in the notebook's order."""
    text, position, missing = article_words(page_html), 0, []
    for index, what, words in expected_runs(_read(notebook)):
        if not words:
            continue
        run = " " + " ".join(words) + " "
        found = text.find(run, position)
        if found < 0:
            missing.append(f"cell {index} ({what}): {' '.join(words)[:200]}")
        else:
            position = found + len(run) - 1
    return missing


@pytest.mark.parametrize("notebook", NOTEBOOKS + NOTEBOOKS_ZH, ids=page_of)
def test_page_shows_every_cell_of_its_notebook(built_site, notebook):
    page_html = (built_site.html / page_of(notebook)).read_text()
    missing = dropped(notebook, page_html)
    assert not missing, f"{page_of(notebook)} lacks, of {notebook.name}:\n" + "\n".join(missing)


def test_the_text_check_sees_a_dropped_paragraph(built_site):
    """The check above can fail: the page of notebook 05 without one paragraph is caught."""
    notebook = NOTEBOOKS[4] if len(NOTEBOOKS) > 4 else NOTEBOOKS[0]
    page_html = (built_site.html / page_of(notebook)).read_text()
    article = page_html.find("<article")
    paragraphs = list(re.finditer(r"<p>(?:(?!</p>).){80,}?</p>", page_html[article:], re.S))
    assert paragraphs, "no paragraph to drop"
    middle = paragraphs[len(paragraphs) // 2]
    cut = page_html[:article + middle.start()] + page_html[article + middle.end():]
    assert dropped(notebook, cut), "a page without one of its paragraphs passed the check"


def test_predict_answers_are_folded(built_site):
    """Each cell the notebook folds (a predict answer) is on its page in a closed <details>."""
    unfolded = []
    for notebook in NOTEBOOKS + NOTEBOOKS_ZH:
        folded = [cell for cell in _read(notebook).cells
                  if cell.cell_type == "code" and cell.outputs
                  and (cell.metadata.get("jupyter", {}).get("outputs_hidden")
                       or "predict-answer" in cell.metadata.get("tags", []))]
        page_html = (built_site.html / page_of(notebook)).read_text()
        closed = [words_of(block) for block in
                  re.findall(r"<details(?![^>]*\bopen\b)[^>]*>.*?</details>", page_html, re.S)]
        for cell in folded:
            answer = " " + " ".join(WORD.findall(ANSI.sub("", cell.outputs[0].get("text", "")))) + " "
            if answer.strip() and not any(answer in block for block in closed):
                unfolded.append(f"{notebook.name}: {answer[:100]}")
    assert not unfolded, "predict answers shown unfolded:\n" + "\n".join(unfolded)


def test_solution_output_is_never_shown(built_site):
    shown = []
    for notebook in NOTEBOOKS + NOTEBOOKS_ZH:
        text = article_words((built_site.html / page_of(notebook)).read_text())
        for cell in _read(notebook).cells:
            if cell.cell_type == "code" and SOLUTION_CALL.search(cell.source):
                for output in cell.outputs:
                    words = WORD.findall(output.get("text", "") or output.get("data", {}).get("text/plain", ""))
                    if len(words) > 3 and " " + " ".join(words) + " " in text:
                        shown.append(f"{notebook.name}: {' '.join(words)[:100]}")
    assert not shown, "solution() output on the site:\n" + "\n".join(shown)
