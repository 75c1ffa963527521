"""The course in Chinese: translation catalogues, and the Chinese notebooks generated from them.

    python tools/i18n.py extract     update i18n/zh_CN/*.po from the English notebooks
    python tools/i18n.py generate    write notebooks/zh/... for every complete catalogue
    python tools/i18n.py status      how many entries each catalogue still needs

One source: the English notebooks. The Chinese prose lives in one gettext catalogue per notebook
(i18n/zh_CN/<notebook stem>.po, read and written with polib), and the Chinese notebook is
generated from the English one plus its catalogue. Code cells, their ids and their stored outputs
are the English ones; never edit a notebook under notebooks/zh by hand.

The message unit is one markdown block of a markdown cell: a paragraph, heading, list, table,
blockquote, fenced code block or HTML block (<details>...</details>), the cell's text split on
blank lines outside fences and HTML blocks. msgctxt is the cell's id, so that a changed paragraph
invalidates only its own entry. A block with no word to translate (a formula without a phrase in
\\text{...},
an image, a closing tag: see `needs_translation`) is not extracted; it is copied verbatim. A
fenced block that holds words (a diagram's labels, a comment) is extracted: translate its words,
keep its code and its layout.

extract works as msgmerge does: a new block becomes an untranslated entry; a block whose English
changed becomes a fuzzy entry that keeps the old translation and the old English (#| msgid);
a vanished block that had a translation becomes obsolete (#~). A notebook is generated only when
its catalogue is complete (every entry translated, none fuzzy, none obsolete), so the Chinese
edition only ever shows complete notebooks.
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from pathlib import Path

import nbformat
import polib

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
LANGUAGE = "zh_CN"
CATALOGUES = ROOT / "i18n" / LANGUAGE
# The Chinese notebooks mirror notebooks/: notebooks/zh/01_shapes.ipynb, notebooks/zh/bonus/b1_....
TRANSLATED = NOTEBOOKS / "zh"
PROJECT = "Transformer from scratch in PyTorch, shape first"
# msgmerge's threshold: below this similarity a changed block is a new entry, not a fuzzy one.
FUZZY_SIMILARITY = 0.6

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HTML_OPEN = re.compile(r"<details\b", re.IGNORECASE)
HTML_CLOSE = re.compile(r"</details\s*>", re.IGNORECASE)


def english_notebooks() -> list[Path]:
    """The twelve English notebooks, in the course's order."""
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")) + sorted((NOTEBOOKS / "bonus").glob("*.ipynb"))


def catalogue_path(notebook: Path) -> Path:
    return CATALOGUES / f"{notebook.stem}.po"


def translated_path(notebook: Path) -> Path:
    return TRANSLATED / notebook.relative_to(NOTEBOOKS)


# --- Blocks -------------------------------------------------------------------------------------

def split_blocks(text: str) -> list[tuple[str, bool]]:
    """`text` as (segment, is_block) pairs: blocks, and the blank lines between them.

    Blank lines inside a fenced code block or a <details> block do not split it. Joining the
    segments with "\\n" gives `text` back exactly, so replacing the blocks alone keeps the
    cell's layout.
    """
    segments: list[tuple[list[str], bool]] = []
    fence = None       # the fence that opened the code block we are in
    html_depth = 0     # how many <details> are open
    for line in text.split("\n"):
        blank = not line.strip() and fence is None and html_depth == 0
        if segments and segments[-1][1] == (not blank):
            segments[-1][0].append(line)
        else:
            segments.append(([line], not blank))
        opening = FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)
        elif fence is not None and line.strip().startswith(fence[0] * len(fence)) \
                and not line.strip().strip(fence[0]):
            fence = None
        elif fence is None:
            html_depth = max(0, html_depth + len(HTML_OPEN.findall(line)) - len(HTML_CLOSE.findall(line)))
    return [("\n".join(lines), is_block) for lines, is_block in segments]


CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
DISPLAY_MATH = re.compile(r"\$\$(.+?)\$\$", re.DOTALL)
INLINE_MATH = re.compile(r"(?<![\\$])\$(?!\s)([^$\n]+?)(?<!\s)\$")
MATH_TEXT = re.compile(r"\\text\{([^}]* [^}]*)\}")   # a phrase; \text{lr} is a name
LINK_TARGET = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HTML_TAG = re.compile(r"<[^>\n]+>")
WORD = re.compile(r"[A-Za-z]{2,}")


def prose_of(block: str) -> str:
    """The words a reader reads in `block`: without inline code, link targets, HTML tags, and of
    its formulas only the phrases in \\text{...}. A fenced block is all content (labels, comments)."""
    if is_fenced(block):
        return block
    block = CODE_SPAN.sub(" ", block)
    block = DISPLAY_MATH.sub(lambda m: " ".join(MATH_TEXT.findall(m.group(1))), block)
    block = INLINE_MATH.sub(lambda m: " ".join(MATH_TEXT.findall(m.group(1))), block)
    block = LINK_TARGET.sub("]", block)
    return HTML_TAG.sub(" ", block)


def needs_translation(block: str) -> bool:
    """Whether `block` holds a word (two letters or more) to translate."""
    return bool(WORD.search(prose_of(block)))


def messages(notebook: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """(cell id, block) of every block to translate, in reading order, each once."""
    found = []
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        for block, is_block in split_blocks(cell.source):
            if is_block and needs_translation(block) and (cell.id, block) not in found:
                found.append((cell.id, block))
    return found


def is_fenced(block: str) -> bool:
    return bool(FENCE.match(block))


# --- Catalogues ---------------------------------------------------------------------------------

def new_catalogue() -> polib.POFile:
    catalogue = polib.POFile(wrapwidth=78)
    catalogue.metadata = {
        "Project-Id-Version": PROJECT,
        "Language": LANGUAGE,
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=UTF-8",
        "Content-Transfer-Encoding": "8bit",
        "Plural-Forms": "nplurals=1; plural=0;",
    }
    return catalogue


def load_catalogue(path: Path) -> polib.POFile:
    if not path.exists():
        return new_catalogue()
    return polib.pofile(str(path), wrapwidth=78)


def is_translated(entry: polib.POEntry) -> bool:
    return bool(entry.msgstr) and "fuzzy" not in entry.flags and not entry.obsolete


def merged(notebook_path: Path, old: polib.POFile) -> polib.POFile:
    """The catalogue for `notebook_path`'s current English, keeping what `old` translated."""
    notebook = nbformat.read(notebook_path, as_version=4)
    source = notebook_path.relative_to(ROOT).as_posix()
    by_key = {(e.msgctxt, e.msgid): e for e in old}                 # obsolete ones too
    current = messages(notebook)
    wanted = set(current)
    leftovers = [e for e in old if (e.msgctxt, e.msgid) not in wanted and e.msgstr]
    catalogue = new_catalogue()
    catalogue.metadata.update({k: v for k, v in old.metadata.items() if k not in catalogue.metadata})
    for context, block in current:
        entry = polib.POEntry(msgctxt=context, msgid=block, occurrences=[(source, context)])
        if is_fenced(block):
            entry.comment = "A fenced block: translate its words, keep its code and layout."
        known = by_key.get((context, block))
        if known is not None:
            entry.msgstr = known.msgstr
            entry.tcomment = known.tcomment             # the translator's own notes (# ...)
            entry.flags = [f for f in known.flags if f == "fuzzy"]
            entry.previous_msgid = known.previous_msgid if entry.flags else None
        else:
            previous = closest(context, block, leftovers)
            if previous is not None:
                leftovers.remove(previous)
                entry.msgstr = previous.msgstr
                entry.tcomment = previous.tcomment
                entry.flags = ["fuzzy"]
                entry.previous_msgid = previous.previous_msgid or previous.msgid
        catalogue.append(entry)
    for gone in leftovers:          # translated once, its English gone: kept for reuse, as #~
        gone.obsolete = True
        gone.occurrences = []
        catalogue.append(gone)
    return catalogue


def closest(context: str, block: str, candidates: list[polib.POEntry]) -> polib.POEntry | None:
    """The candidate whose English `block` most likely replaced: the same cell first, then any."""
    def similarity(entry):
        return difflib.SequenceMatcher(None, entry.previous_msgid or entry.msgid, block).ratio()
    for pool in ([e for e in candidates if e.msgctxt == context], candidates):
        scored = [(similarity(e), n, e) for n, e in enumerate(pool)]
        scored = [s for s in scored if s[0] >= FUZZY_SIMILARITY]
        if scored:
            return max(scored, key=lambda s: (s[0], -s[1]))[2]
    return None


def extract(notebook_path: Path) -> tuple[Path, str]:
    """(catalogue path, its updated text)."""
    path = catalogue_path(notebook_path)
    return path, str(merged(notebook_path, load_catalogue(path)))


# --- Progress -----------------------------------------------------------------------------------

def remaining(notebook_path: Path, catalogue: polib.POFile) -> dict[str, int]:
    """What still stands between `catalogue` and a complete translation of the notebook."""
    wanted = set(messages(nbformat.read(notebook_path, as_version=4)))
    active = {(e.msgctxt, e.msgid): e for e in catalogue if not e.obsolete}
    return {
        "untranslated": sum(1 for key in wanted if key in active and not active[key].msgstr),
        "fuzzy": sum(1 for key in wanted if key in active and "fuzzy" in active[key].flags),
        "obsolete": sum(1 for e in catalogue if e.obsolete),
        "missing": len(wanted - set(active)),              # the English changed: run extract
        "stale": len(set(active) - wanted),
    }


def is_complete(notebook_path: Path, catalogue: polib.POFile) -> bool:
    return not any(remaining(notebook_path, catalogue).values())


# --- Generation ---------------------------------------------------------------------------------

class Incomplete(Exception):
    """A block of the English notebook has no finished translation."""


def translate_markdown(cell_id: str, text: str, translations: dict) -> str:
    parts = []
    for segment, is_block in split_blocks(text):
        if is_block and needs_translation(segment):
            if (cell_id, segment) not in translations:
                raise Incomplete(f"cell {cell_id}: no translation for {segment[:60]!r}")
            segment = translations[(cell_id, segment)]
        parts.append(segment)
    return "\n".join(parts)


MARKDOWN_LINK = re.compile(r"(\]\()([^)\s]+)")
HTML_LINK = re.compile(r"""((?:href|src)=["'])([^"']+)""")


def relink(text: str, notebook_path: Path, complete: set[Path]) -> str:
    """Relative links of the English notebook, made right from its Chinese copy: to the Chinese
    notebook where that one is generated, else to the English file."""
    here = notebook_path.parent
    there = translated_path(notebook_path).parent

    def target(match):
        link = match.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", link):
            return match.group(0)                   # absolute URLs and anchors stay
        path, _, anchor = link.partition("#")
        resolved = Path(os.path.normpath(here / path))
        if resolved in complete:
            resolved = translated_path(resolved)
        new = os.path.relpath(resolved, there).replace(os.sep, "/")
        return match.group(1) + new + ("#" + anchor if anchor else "")
    return HTML_LINK.sub(target, MARKDOWN_LINK.sub(target, text))


def generate(notebook_path: Path, catalogue: polib.POFile, complete: set[Path]) -> str:
    """The Chinese notebook's text. Raises Incomplete if the catalogue lacks a translation."""
    notebook = nbformat.read(notebook_path, as_version=4)
    translations = {(e.msgctxt, e.msgid): e.msgstr for e in catalogue if is_translated(e)}
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            cell.source = relink(translate_markdown(cell.id, cell.source, translations),
                                 notebook_path, complete)
    notebook.metadata["language"] = LANGUAGE
    notebook.metadata["i18n"] = {
        "generated_from": [notebook_path.relative_to(ROOT).as_posix(),
                           catalogue_path(notebook_path).relative_to(ROOT).as_posix()],
        "note": "Generated by tools/i18n.py generate: edit the catalogue, never this file.",
    }
    return nbformat.writes(notebook) + "\n"


def generated_notebooks() -> set[Path]:
    """The Chinese notebooks on disk (JupyterLab's .ipynb_checkpoints aside)."""
    if not TRANSLATED.exists():
        return set()
    return {p for p in TRANSLATED.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts}


def complete_notebooks() -> set[Path]:
    return {nb for nb in english_notebooks() if is_complete(nb, load_catalogue(catalogue_path(nb)))}


def expected_translations() -> dict[Path, str]:
    """{Chinese notebook path: its text} for every notebook whose catalogue is complete."""
    complete = complete_notebooks()
    return {translated_path(nb): generate(nb, load_catalogue(catalogue_path(nb)), complete)
            for nb in english_notebooks() if nb in complete}


# --- Command line -------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["extract", "generate", "status"])
    args = parser.parse_args(argv)
    if args.command == "extract":
        CATALOGUES.mkdir(parents=True, exist_ok=True)
        for notebook in english_notebooks():
            path, text = extract(notebook)
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                path.write_text(text, encoding="utf-8")
                print(f"updated {path.relative_to(ROOT)}")
    elif args.command == "generate":
        wanted = expected_translations()
        for path, text in wanted.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                path.write_text(text, encoding="utf-8")
                print(f"wrote {path.relative_to(ROOT)}")
        for stale in sorted(generated_notebooks()):
            if stale not in wanted:                 # its catalogue is no longer complete
                stale.unlink()
                print(f"removed {stale.relative_to(ROOT)} (its catalogue is incomplete)")
    for notebook in english_notebooks():
        counts = remaining(notebook, load_catalogue(catalogue_path(notebook)))
        left = ", ".join(f"{n} {what}" for what, n in counts.items() if n) or "complete"
        print(f"{catalogue_path(notebook).relative_to(ROOT)}: {left}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
