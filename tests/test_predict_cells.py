"""A "predict, then run" question keeps its answer out of sight until the learner has predicted.

The notebooks are stored with their outputs, so an answer printed by a code cell is on screen
the moment a notebook opens, right under its question. This test reads every stored notebook
and checks that no answer shows before the learner asks for it.

**Which cells are predict questions.** A markdown cell (the text inside `<details>` blocks left
out) holds a predict question when

* a sentence asks for a prediction: "predict ... then / before / first", "write ... down",
  "your guess", "what do you expect"; or
* a heading says "predict" ("### Exercise 5: predict, then run") and text follows it in the
  same cell; or
* it opens a numbered question, `**Question N.**`, under such a heading ("### Predict, then
  run" followed by several questions).

**Where the answer may be.** Either

* in a closed `<details>` block after the question, in the same cell ("predict, then
  reveal"); or
* in the next code cell, with no markdown cell in between. That cell is tagged
  `predict-answer`, holds its stored output, and that output is collapsed
  (`metadata.jupyter.outputs_hidden: true`: JupyterLab shows a placeholder until it is
  clicked; nbval still compares the output). JupyterLab's placeholder previews the first
  non-empty line of the first output, so that line is the neutral `Answer:`. The text right
  after the cell begins with a closed `<details>` block (the explanation), a heading, or the
  next question, never with open prose that gives the answer away.

And every cell tagged `predict-answer` answers one of these questions.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = (sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))     # the ten
             + sorted((ROOT / "notebooks" / "bonus").glob("*.ipynb")))  # and the bonus ones
TAG = "predict-answer"
PREVIEW = "Answer:"   # the first output line of every answer cell: all a folded answer shows
# The MIME types JupyterLab looks for, in order, to write the preview of a folded output
# (Cell.getOutputPlaceholderText in @jupyterlab/cells); a stream's text counts as one of them.
PREVIEW_TYPES = ["text/html", "image/svg+xml", "application/pdf", "text/markdown", "text/plain"]

ASKS = re.compile(r"\bpredict\b[^.\n]*\b(then|before|first)\b"
                  r"|\bwrite\b[^.\n]{0,40}\bdown\b"
                  r"|\byour guess\b"
                  r"|\bwhat do you expect\b", re.IGNORECASE)
PREDICT = re.compile(r"\bpredict", re.IGNORECASE)
HEADING = re.compile(r"^#{1,6} .*$", re.MULTILINE)
QUESTION = re.compile(r"^\*\*Question \d+\.\*\*", re.MULTILINE)
DETAILS = re.compile(r"<details\b([^>]*)>.*?</details>", re.DOTALL | re.IGNORECASE)


@dataclass
class Question:
    cell: int        # index of the markdown cell that asks it
    start: int       # where in that cell's text the question begins
    text: str        # the first words, for messages


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def _preview(cell: dict) -> str | None:
    """The text JupyterLab shows on the placeholder of the cell's folded output: the first
    non-empty line of the first output, or None."""
    outputs = cell.get("outputs") or [{}]
    first = outputs[0]
    if first.get("output_type") == "stream":
        text = first.get("text", "")
    else:
        data = first.get("data", {})
        kind = next((k for k in PREVIEW_TYPES if k in data), None)
        if kind is None:
            return None
        text = data[kind]
    text = "".join(text) if isinstance(text, list) else text
    return next((line for line in text.split("\n") if line), None)


def _blank_details(text: str) -> str:
    """The text with every <details> block replaced by spaces (newlines kept), so that
    positions still match the original text."""
    return DETAILS.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _find_questions(cells: list[dict]) -> list[Question]:
    questions = []
    in_predict_section = False
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        visible = _blank_details(_source(cell))
        # Segments: the text before the first heading, then each heading with its body.
        cuts = [0] + [m.start() for m in HEADING.finditer(visible)] + [len(visible)]
        for start, end in zip(cuts, cuts[1:]):
            segment = visible[start:end]
            heading = HEADING.match(segment)
            body = segment[heading.end():] if heading else segment
            if heading:
                in_predict_section = bool(PREDICT.search(heading.group(0)))
                asks = (in_predict_section and body.strip()) or ASKS.search(body)
            else:
                asks = (in_predict_section and QUESTION.search(body)) or ASKS.search(body)
            if asks:
                # Where the question's own text starts (a <details> block before it, the
                # answer to the previous question, is blank here).
                begins = start + len(segment) - len(segment.lstrip())
                words = " ".join(segment.split())[:90]
                questions.append(Question(index, begins, words))
    return questions


def _starts_with_details(text: str) -> bool:
    return bool(re.match(r"\s*<details\b", text, re.IGNORECASE))


def _check_notebook(path: Path) -> tuple[list[Question], list[str]]:
    cells = json.loads(path.read_text())["cells"]
    questions = _find_questions(cells)
    problems: list[str] = []
    answered: set[int] = set()

    for n, question in enumerate(questions):
        where = f"question in cell {question.cell} ({question.text!r})"
        source = _source(cells[question.cell])
        if cells[question.cell].get("metadata", {}).get("jupyter", {}).get("source_hidden"):
            problems.append(f"{where}: the question itself is hidden (source_hidden)")
        next_question = questions[n + 1] if n + 1 < len(questions) else None

        # "Predict, then reveal": a <details> block after the question, before the next one.
        limit = (next_question.start if next_question and next_question.cell == question.cell
                 else len(source))
        reveal = [m for m in DETAILS.finditer(source) if question.start <= m.start() < limit]
        if reveal:
            if any("open" in m.group(1).lower() for m in reveal):
                problems.append(f"{where}: its <details> answer is open; it must start closed")
            continue

        # "Predict, then run": the next code cell, with nothing visible in between.
        if next_question and next_question.cell == question.cell:
            problems.append(f"{where}: the next question follows in the same cell, with no "
                            f"answer cell and no <details> between them")
            continue
        answer = next((i for i in range(question.cell + 1, len(cells))
                       if cells[i]["cell_type"] == "code"), None)
        if answer is None or (next_question and next_question.cell < answer):
            problems.append(f"{where}: no answer: neither a <details> block after it nor a code "
                            f"cell before the next question")
            continue
        between = [i for i in range(question.cell + 1, answer) if _source(cells[i]).strip()]
        if between:
            problems.append(f"{where}: cells {between} stand between the question and its "
                            f"answer cell {answer}, visible before the learner runs anything")
        cell = cells[answer]
        answered.add(answer)
        if TAG not in _tags(cell):
            problems.append(f"{where}: its answer cell {answer} is not tagged {TAG!r}")
        if not cell.get("outputs"):
            problems.append(f"{where}: its answer cell {answer} has no stored output")
        if cell.get("metadata", {}).get("jupyter", {}).get("outputs_hidden") is not True:
            problems.append(f"{where}: the output of its answer cell {answer} is not collapsed "
                            f"(metadata jupyter.outputs_hidden is not true)")
        preview = _preview(cell)
        if cell.get("outputs") and preview not in (None, PREVIEW):
            problems.append(f"{where}: the folded output of its answer cell {answer} still shows "
                            f"its first line, {preview!r}; print {PREVIEW!r} first")
        after = next((i for i in range(answer + 1, len(cells)) if _source(cells[i]).strip()), None)
        if after is not None and cells[after]["cell_type"] == "markdown":
            text = _source(cells[after])
            opens_question = next_question is not None and next_question.cell == after \
                and not text[:next_question.start].strip()
            if not (_starts_with_details(text) or HEADING.match(text.lstrip()) or opens_question):
                problems.append(f"{where}: the text after its answer cell {answer} (cell {after}: "
                                f"{' '.join(text.split())[:60]!r}) is visible before the cell "
                                f"runs; put the explanation in a closed <details> block")
            elif _starts_with_details(text) and "open" in DETAILS.match(text.lstrip()).group(1):
                problems.append(f"{where}: the <details> after its answer cell {answer} is open")

    for index, cell in enumerate(cells):
        if TAG in _tags(cell) and index not in answered:
            problems.append(f"cell {index} is tagged {TAG!r} but answers no predict question "
                            f"(is its question still asked with 'predict ... then run'?)")
    return questions, problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_predict_answers_stay_hidden_until_asked_for(path):
    questions, problems = _check_notebook(path)
    assert not problems, f"{path.name}:\n" + "\n".join(f"- {p}" for p in problems)


def test_the_predict_questions_are_found():
    """Guards the detector itself: the course asks more than two dozen predict questions, in
    every notebook. If this count drops, the patterns above have stopped matching the way the
    questions are written, and the test above would pass without checking anything."""
    found = {path.stem: len(_check_notebook(path)[0]) for path in NOTEBOOKS}
    assert sum(path.parent.name == "notebooks" for path in NOTEBOOKS) == 10  # the ten; bonus ones besides
    assert all(count >= 2 for count in found.values()), found
    assert sum(found.values()) >= 25, found
