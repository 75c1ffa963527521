"""The Chinese edition: catalogues (i18n/zh_CN/*.po), the generated notebooks (notebooks/zh/) and
the glossary (docs/glossary-zh.md). Fast: no kernel; tools/i18n.py does the reading and writing.

A catalogue may still be partly untranslated while its notebook is not generated: the test prints
how many entries each one still needs. Everything that is generated must be complete, up to date,
and carry the English notebook's code and outputs unchanged.
"""
from __future__ import annotations

import ast
import importlib.util
import re
import sys
import unicodedata
from pathlib import Path

import mistune
import nbformat
import polib
import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("i18n", ROOT / "tools" / "i18n.py")
i18n = importlib.util.module_from_spec(_spec)
sys.modules["i18n"] = i18n
_spec.loader.exec_module(i18n)

NOTEBOOKS = i18n.english_notebooks()
GLOSSARY = ROOT / "docs" / "glossary-zh.md"


def catalogue(notebook: Path) -> polib.POFile:
    return polib.pofile(str(i18n.catalogue_path(notebook)))


def translated_entries():
    """(notebook stem, entry) of every entry with a translation, fuzzy ones included: a fuzzy
    translation is shown nowhere, but it will be, once someone removes the flag."""
    return [(nb.stem, e) for nb in NOTEBOOKS for e in catalogue(nb) if e.msgstr and not e.obsolete]


# --- The machinery, on small made-up cells ------------------------------------------------------

def test_blocks_split_on_blank_lines_outside_fences_and_details():
    text = ("# Title\n\nA paragraph\non two lines.\n\n```\ncode\n\nmore code\n```\n\n"
            "<details><summary>Why</summary>\n\nThe answer.\n</details>\n\n| a | b |\n|---|---|")
    blocks = [s for s, is_block in i18n.split_blocks(text) if is_block]
    assert blocks == ["# Title", "A paragraph\non two lines.", "```\ncode\n\nmore code\n```",
                      "<details><summary>Why</summary>\n\nThe answer.\n</details>", "| a | b |\n|---|---|"]


def test_every_markdown_cell_splits_and_joins_back_exactly():
    for path in NOTEBOOKS:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                assert "\n".join(s for s, _ in i18n.split_blocks(cell.source)) == cell.source, (
                    f"{path.name}, cell {cell.id}: its blocks do not join back into the cell")


@pytest.mark.parametrize("block, extracted", [
    ("$$PE[pos, 2i] = \\sin(pos \\cdot \\omega_i)$$", False),      # a formula alone
    ("$$p \\leftarrow p \\qquad \\text{then the Adam update.}$$", True),   # with a phrase
    ("1. `(4, 1, 3) + (5, 1)`\n2. `(3,) + (3, 1)`", False),          # shapes only
    ("![](figure.png)", False),
    ("</details>", False),
    ("### 9.3 No `sqrt(d_k)`", True),
    ("```\nmask   (B, 1, 1, L)\n```", True),                        # a fenced block with words
])
def test_which_blocks_are_extracted(block, extracted):
    assert i18n.needs_translation(block) is extracted


def _merge(tmp_path, monkeypatch, old_cells, new_cells, translate):
    """Extract from a notebook with `old_cells`, translate with `translate`, change the notebook
    to `new_cells`, and extract again: the merged catalogue."""
    monkeypatch.setattr(i18n, "ROOT", tmp_path)
    path = tmp_path / "notebooks" / "00_made_up.ipynb"
    path.parent.mkdir(parents=True)

    def write(cells):
        notebook = nbformat.v4.new_notebook()
        notebook.cells = [nbformat.v4.new_markdown_cell(text, id=cid) for cid, text in cells]
        nbformat.write(notebook, path)
    write(old_cells)
    first = i18n.merged(path, i18n.new_catalogue())
    for entry in first:
        entry.msgstr = translate(entry.msgid)
        entry.tcomment = "a translator's note"
    write(new_cells)
    return polib.pofile(str(i18n.merged(path, polib.pofile(str(first)))))


def test_extract_merges_as_msgmerge_does(tmp_path, monkeypatch):
    merged = _merge(tmp_path, monkeypatch,
                    [("a", "## Shapes\n\nThe batch has three sentences of unequal length.\n\nGone soon.")],
                    [("a", "## Shapes\n\nThe batch has three sentences of different lengths.\n\nBrand new."),
                     ("b", "Another cell.")],
                    translate=lambda english: "ZH " + english)
    by_id = {e.msgid: e for e in merged if not e.obsolete}
    assert by_id["## Shapes"].msgstr == "ZH ## Shapes" and not by_id["## Shapes"].fuzzy
    changed = by_id["The batch has three sentences of different lengths."]
    assert changed.fuzzy and changed.msgctxt == "a"
    assert changed.previous_msgid == "The batch has three sentences of unequal length."
    assert changed.msgstr == "ZH The batch has three sentences of unequal length."
    assert changed.tcomment == by_id["## Shapes"].tcomment == "a translator's note"
    assert by_id["Brand new."].msgstr == "" and by_id["Another cell."].msgstr == ""
    obsolete = [e for e in merged if e.obsolete]
    assert [e.msgid for e in obsolete] == ["Gone soon."] and obsolete[0].msgstr == "ZH Gone soon."
    assert merged.metadata["Language"] == "zh_CN"
    assert merged.metadata["Content-Type"] == "text/plain; charset=UTF-8"


def test_generation_refuses_an_incomplete_catalogue_and_relinks(tmp_path, monkeypatch):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell("See [02](02_tokenization.ipynb#top) and "
                                                    "[03](03_embeddings.ipynb).", id="m"),
                      nbformat.v4.new_code_cell("x = 1", id="c")]
    english = i18n.NOTEBOOKS / "10_training.ipynb"
    monkeypatch.setattr(nbformat, "read", lambda path, as_version: nbformat.from_dict(notebook))
    po = i18n.new_catalogue()
    po.append(polib.POEntry(msgctxt="m", msgid=notebook.cells[0].source, msgstr=""))
    with pytest.raises(i18n.Incomplete):
        i18n.generate(english, po, complete=set())
    po[0].msgstr = "见 [02](02_tokenization.ipynb#top) 和 [03](03_embeddings.ipynb)。"
    made = nbformat.reads(i18n.generate(english, po, complete={i18n.NOTEBOOKS / "02_tokenization.ipynb"}),
                          as_version=4)
    # 02 is complete: its Chinese copy sits beside this one; 03 is not: back to the English one
    assert made.cells[0].source == "见 [02](02_tokenization.ipynb#top) 和 [03](../03_embeddings.ipynb)。"
    assert made.cells[1].source == "x = 1" and made.metadata["language"] == "zh_CN"


# --- The catalogues and the generated notebooks -------------------------------------------------

def test_every_notebook_has_a_catalogue_and_its_progress_is_printed(capsys):
    for notebook in NOTEBOOKS:
        po = catalogue(notebook)
        assert po.metadata.get("Language") == "zh_CN", f"{notebook.stem}.po: Language must be zh_CN"
        assert "charset=UTF-8" in po.metadata.get("Content-Type", ""), f"{notebook.stem}.po: not UTF-8"
        counts = i18n.remaining(notebook, po)
        left = ", ".join(f"{n} {what}" for what, n in counts.items() if n) or "complete"
        generated = i18n.translated_path(notebook).exists()
        with capsys.disabled():
            print(f"\n  i18n/zh_CN/{notebook.stem}.po: {left}" + ("; generated" if generated else ""), end="")
        if generated:
            assert not any(counts.values()), (
                f"{i18n.translated_path(notebook).relative_to(ROOT)} exists, but its catalogue is "
                f"incomplete ({left}): finish i18n/zh_CN/{notebook.stem}.po, or run "
                "`tools/i18n.py generate`, which removes it")


def test_generated_notebooks_are_up_to_date():
    expected = i18n.expected_translations()
    on_disk = i18n.generated_notebooks()
    assert on_disk == set(expected), (
        "notebooks/zh must hold exactly the notebooks whose catalogue is complete: run "
        f"`.venv/bin/python tools/i18n.py generate` (missing: {sorted(map(str, set(expected) - on_disk))}, "
        f"extra: {sorted(map(str, on_disk - set(expected)))})")
    stale = [str(p.relative_to(ROOT)) for p, text in expected.items() if p.read_text(encoding="utf-8") != text]
    assert not stale, f"out of date with their English notebook or catalogue: {stale}; run tools/i18n.py generate"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_code_cells_and_outputs_are_the_english_ones(notebook):
    path = i18n.translated_path(notebook)
    if not path.exists():
        return          # not generated yet (its catalogue is incomplete): nothing to compare
    english, chinese = nbformat.read(notebook, as_version=4), nbformat.read(path, as_version=4)
    assert [(c.id, c.cell_type) for c in chinese.cells] == [(c.id, c.cell_type) for c in english.cells]
    for en, zh in zip(english.cells, chinese.cells):
        if en.cell_type == "code":
            assert zh == en, f"{path.name}, cell {en.id}: code, outputs or metadata differ from the English"
    assert chinese.metadata["language"] == "zh_CN"
    assert {k: v for k, v in chinese.metadata.items() if k not in ("language", "i18n")} == english.metadata


def _folder_readers(tree: ast.AST) -> list[str]:
    """What in `tree` depends on the working folder: os.getcwd(), Path.cwd(), and open() or Path()
    of a relative literal path."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "attr", getattr(node.func, "id", ""))
        literal = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
        if name in ("getcwd", "getcwdb", "cwd", "chdir") or name in ("open", "Path") and isinstance(
                literal, str) and not literal.startswith(("/", "~")):
            found.append(f"{name}() at line {node.lineno}")
    return found


def test_a_chinese_copy_computes_in_its_folder_what_its_english_notebook_does():
    """Why `make test` runs nbval on the English notebooks and on one Chinese copy (01) alone: a
    copy holds its notebook's code cells and outputs (above), and its kernel differs only in its
    working folder (Jupyter starts it in notebooks/zh). That folder changes what a cell prints only
    where a cell or tfmlib reads it: tfmlib does in one place, to choose progress()'s language,
    which no notebook shows."""
    readers = {}
    for path in sorted((ROOT / "tfmlib").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            found = _folder_readers(function)
            if found:
                readers[f"{path.relative_to(ROOT).as_posix()}:{function.name}"] = found
        assert not [f for f in _folder_readers(tree) if not any(f in found for found in readers.values())], path
    why = ("a Chinese copy could then print otherwise than its English notebook: add the copies it concerns "
           "to make test's nbval stage (TEST_NOTEBOOKS in the Makefile), or keep the folder out of it")
    assert set(readers) == {"tfmlib/exercises/tracker.py:default_language"}, f"{readers}: {why}"
    shown = []
    for notebook in NOTEBOOKS:
        for cell in nbformat.read(notebook, as_version=4).cells:
            if cell.cell_type == "code":
                magics = [line.strip() for line in cell.source.splitlines() if line.lstrip().startswith(("%", "!"))]
                shown += [f"{notebook.name}: {m}" for m in magics if m.split()[0] != "%matplotlib"]  # %cd, !ls, ...
                tree = ast.parse("\n".join(line for line in cell.source.splitlines()
                                           if not line.lstrip().startswith(("%", "!"))))
                # progress() picks its language from the folder unless it is given one
                calls = [getattr(n.func, "attr", getattr(n.func, "id", "")) for n in ast.walk(tree)
                         if isinstance(n, ast.Call) and not (n.args or any(k.arg == "lang" for k in n.keywords))]
                shown += [f"{notebook.name}: {c}()" for c in calls if c in ("progress", "default_language")]
                shown += [f"{notebook.name}: {f}" for f in _folder_readers(tree)]
    assert shown == [], f"{shown}: {why} (e.g. progress(lang='en'))"


# --- What a translation must keep ---------------------------------------------------------------

NUMBER = re.compile(r"\d+(?:\.\d+)?")
MATH = re.compile(r"\$\$.+?\$\$|(?<![\\$])\$[^$\n]+?\$", re.DOTALL)
# The Markdown that gives a block its shape: heading marks, list items, table rows, quotes, fences,
# the <details> tags. A translation keeps them, line for line.
#: Markdown to HTML as nbconvert renders a notebook's markdown.
RENDER = mistune.create_markdown()
MARKER = re.compile(r"^\s*(#{1,6} |[-*+] |\d+\. |\||> |```|~~~|</?details|<summary)", re.MULTILINE)


def unclosed_bold(block: str) -> list[str]:
    """Lines whose closing ** CommonMark does not read as closing: after punctuation, a delimiter
    closes only before a space or punctuation, so `**时长：**一节课` shows its asterisks (write
    `**时长**：一节课`)."""
    def punctuation(char):
        return unicodedata.category(char)[0] in "PS"
    bad = []
    for line in block.split("\n"):
        closing = [m.start() for m in re.finditer(r"\*\*", line)][1::2]
        if any(punctuation(line[at - 1]) and line[at + 2:at + 3].strip()
               and not punctuation(line[at + 2]) for at in closing):
            bad.append(line)
    return bad


def emphasis(block: str) -> tuple[int, int, bool]:
    """How Markdown renders the block's emphasis (nbconvert's renderer, mistune): the number of
    bold and italic spans, and whether asterisks are left over as text. The pairing rules of
    CommonMark are subtle next to CJK punctuation; the renderer, not a pattern, decides."""
    html = RENDER(block)
    return html.count("<strong>"), html.count("<em>"), "**" in html


def code_spans(block: str) -> list[str]:
    return [m.group(0) for m in i18n.CODE_SPAN.finditer(block)]


def structure(block: str) -> list[str]:
    return [m.group(1).strip() for m in MARKER.finditer(block)]


@pytest.mark.parametrize("stem, entry", translated_entries(),
                         ids=lambda x: x if isinstance(x, str) else f"{x.msgctxt}:{x.msgid[:30]}")
def test_a_translation_keeps_code_numbers_formulas_and_markdown(stem, entry):
    english, chinese = entry.msgid, entry.msgstr
    where = f"i18n/zh_CN/{stem}.po, msgctxt {entry.msgctxt!r}, {english[:50]!r}"
    assert structure(chinese) == structure(english), (
        f"{where}: the Markdown (headings, list items, table rows, fences, <details>) differs:\n"
        f"English {structure(english)}\nChinese {structure(chinese)}")
    assert not unclosed_bold(chinese), f"{where}: bold that Markdown will not close: {unclosed_bold(chinese)}"
    assert emphasis(chinese) == emphasis(english), (
        f"{where}: rendered, the translation has other bold/italic than the English, or shows its "
        f"asterisks: (bold, italic, literal **) English {emphasis(english)}, Chinese {emphasis(chinese)}")
    if i18n.is_fenced(english):           # its code is kept; its words translated
        assert set(NUMBER.findall(english)) <= set(NUMBER.findall(chinese)), f"{where}: a number is missing"
        return
    missing = [s for s in code_spans(english) if s not in chinese]
    assert not missing, f"{where}: inline code changed or missing in the translation: {missing}"
    missing = [s for s in MATH.findall(english) if s not in chinese]
    assert not missing, f"{where}: formulas changed or missing in the translation: {missing}"
    prose = i18n.CODE_SPAN.sub(" ", MATH.sub(" ", english))
    numbers = set(NUMBER.findall(prose)) - set(NUMBER.findall(chinese))
    assert not numbers, f"{where}: numbers missing in the translation: {sorted(numbers)}"


# --- The glossary -------------------------------------------------------------------------------

def glossary() -> list[tuple[list[str], str, str]]:
    """(English spellings, 中文, 首次出现) of every row of docs/glossary-zh.md's table."""
    rows = []
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or cells[0] in ("English", "") or set(cells[0]) <= set("-"):
            continue
        assert len(cells) == 3, f"docs/glossary-zh.md: a row must have 3 columns: {line!r}"
        rows.append(([s.strip() for s in cells[0].split(" / ")], cells[1], cells[2]))
    return rows


def term_pattern(english: str) -> re.Pattern:
    return re.compile(r"(?<![\w-])" + re.escape(english) + r"(?:s|es|d|ed|ing)?(?![\w-])", re.IGNORECASE)


def required_terms(english_block: str, rows) -> list[tuple[str, str]]:
    """(中文, 首次出现) of every glossary term `english_block` uses; the longest term wins."""
    text = i18n.prose_of(english_block)
    if i18n.is_fenced(english_block):
        return []                        # a diagram or code: its labels may stay names
    spellings = sorted(((s, zh, first) for names, zh, first in rows for s in names),
                       key=lambda row: -len(row[0]))
    found = []
    for spelling, zh, first in spellings:
        pattern = term_pattern(spelling)
        if pattern.search(text):
            found.append((zh, first))
            text = pattern.sub(" ", text)
    return found


def test_the_glossary_is_a_table_with_each_term_once():
    rows = glossary()
    assert len(rows) >= 40, "docs/glossary-zh.md: the table was not found"
    spellings = [s.lower() for names, _, _ in rows for s in names]
    assert len(spellings) == len(set(spellings)), "docs/glossary-zh.md: a term appears twice"
    for names, zh, first in rows:
        assert zh, f"docs/glossary-zh.md: {names[0]} has no Chinese term"
        assert not first or zh in first, f"docs/glossary-zh.md: {names[0]}: 首次出现 must contain {zh}"
    seeds = {"形状", "广播", "掩码", "多头注意力", "残差", "层归一化"}
    assert seeds <= {zh for _, zh, _ in rows}, "the seeds' own terms must be in the glossary"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_translations_follow_the_glossary(notebook):
    rows = glossary()
    first_seen = set()
    problems = []
    for entry in catalogue(notebook):
        if entry.obsolete or not entry.msgstr:
            continue
        for zh, first in required_terms(entry.msgid, rows):
            if zh not in entry.msgstr:
                problems.append(f"{entry.msgctxt}: {entry.msgid[:40]!r} must say {zh}")
            elif first and first not in first_seen:
                if first not in entry.msgstr:
                    problems.append(f"{entry.msgctxt}: the first {zh} of the notebook must be written {first}")
            first_seen.add(first)
    assert not problems, f"i18n/zh_CN/{notebook.stem}.po does not follow docs/glossary-zh.md:\n" + "\n".join(problems)


# --- README.zh.md -------------------------------------------------------------------------------

def test_the_chinese_readme_opens_every_chinese_notebook_on_colab_and_binder():
    """Each generated notebook has its Colab link in README.zh.md, at its notebooks/zh path (its
    first code cell, the English one, installs tfmlib on Colab from any path); every Colab and
    Binder link there opens a Chinese notebook that exists."""
    readme = (ROOT / "README.zh.md").read_text(encoding="utf-8")
    colab = "https://colab.research.google.com/github/transformer-shape-first/course/blob/main/"
    binder = "https://mybinder.org/v2/gh/transformer-shape-first/course/main?urlpath=lab/tree/"
    linked = set(re.findall(re.escape(colab) + r"([^)\s]+)", readme))
    expected = {p.relative_to(ROOT).as_posix() for p in i18n.generated_notebooks()}
    assert expected <= linked, f"README.zh.md lacks a Colab link for {sorted(expected - linked)}"
    opened = linked | set(re.findall(re.escape(binder) + r"([^)\s]+)", readme))
    assert opened, "README.zh.md has no Colab or Binder link"
    for path in opened:
        assert path.startswith("notebooks/zh/") and (ROOT / path).exists(), (
            f"README.zh.md links {path}, which is not a generated Chinese notebook")
