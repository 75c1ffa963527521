"""A lesson's length is the same in its notebook's first cell and in the README's table for
teachers (09_adam once said 70 minutes in one and 45 in the other)."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parent.parent


def minutes_in_the_readme() -> dict[str, int]:
    rows = re.findall(r"^\| \d\d \| `(\d\d_\w+)\.ipynb` \| [^|]*?about (\d+) min", (REPO / "README.md").read_text(),
                      flags=re.MULTILINE)
    return {stem: int(minutes) for stem, minutes in rows}


def minutes_in_the_notebook(stem: str) -> int:
    first = nbformat.read(REPO / "notebooks" / f"{stem}.ipynb", as_version=4).cells[0].source
    return int(re.search(r"\*\*Time:\*\*[^\n]*?about (\d+) minutes", first).group(1))


def test_every_lesson_has_one_length():
    readme = minutes_in_the_readme()
    assert sorted(readme) == sorted(p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert {stem: minutes_in_the_notebook(stem) for stem in readme} == readme
