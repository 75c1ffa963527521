"""Generate an nbgrader course from the course's notebooks: one assignment per notebook.

    python teacher/make_nbgrader_course.py                 # all ten notebooks -> nbgrader-course/
    python teacher/make_nbgrader_course.py --out DIR 01_shapes 04_masks

Each coding exercise of a notebook (a `def my_...` stub followed by `check("name", my_...)`)
becomes an autograded answer cell, whose stub line `...  # your code here` is wrapped in
nbgrader's solution markers around a call of tfmlib's reference, followed by a new read-only
test cell worth one point that runs the same check in a hidden test and fails unless it says
PASS. `nbgrader generate_assignment` puts the stub back (ClearSolutions.code_stub below), so
the released notebook shows exactly the cells of notebooks/, plus the test cells. Everything
else ("predict, then run" questions included) stays as it is, ungraded.

The folder written (default nbgrader-course/, git-ignored) is an nbgrader course root:
nbgrader_config.py (written once, yours to edit afterwards) and source/<notebook>/<notebook>.ipynb
(rewritten on every run). See the README, "For teachers".
"""
from __future__ import annotations

import argparse
import ast
import copy
import inspect
import re
import shutil
import sys
from pathlib import Path

import nbformat

from tfmlib.exercises import REGISTRY

REPO = Path(__file__).resolve().parent.parent
STUB = "...  # your code here"
STUB_LINE = re.compile(r"^(?P<indent>[ \t]+)" + re.escape(STUB) + r"$", re.MULTILINE)
POINTS = 1

CONFIG = '''\
# nbgrader's configuration of this course, written by teacher/make_nbgrader_course.py
# (once: edit it freely, the script does not overwrite it).
import os

c = get_config()  # noqa: F821 (nbgrader provides it)
c.CourseDirectory.course_id = "transformer-shape-first"

# The released notebook shows the learner's stub, exactly as in the course's notebooks/.
c.ClearSolutions.code_stub = {"python": "...  # your code here"}
# Keep the stored outputs (figures, the static picture of each widget) in the release.
c.ClearOutput.enabled = False
# A submission that deleted a test cell is graded with the cell put back.
c.OverwriteCells.add_missing_cells = True
# A cell that runs longer than this (seconds) is interrupted, and grading goes on.
# Notebook 10's slowest cell trains a model for about 20 s on a laptop CPU.
c.Execute.timeout = 120
# Autograding must not write the grader's own progress file (tfmlib.exercises.progress).
os.environ["TFMLIB_PROGRESS"] = ""
'''

TEST_CELL = '''\
# Autograded ({points} point): check("{name}", {answer}) must say PASS.
### BEGIN HIDDEN TESTS
import tfmlib.exercises as _exercises
_result = _exercises.check("{name}", {answer})
assert _result, str(_result)
### END HIDDEN TESTS'''


def exercise_call(source: str) -> tuple[str, list[str]] | None:
    """(exercise name, answer function names) when `source` ends with check("name", my_...),
    the call that closes an exercise cell; None for any other cell (the demo of a wrong
    answer in notebook 05 checks a function that is not the learner's `my_...`)."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return None
    if not body or not isinstance(body[-1], ast.Expr) or not isinstance(body[-1].value, ast.Call):
        return None
    call = body[-1].value
    if not (isinstance(call.func, ast.Name) and call.func.id == "check" and len(call.args) == 2
            and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)):
        return None
    answer = call.args[1]
    names = [e.id for e in answer.elts] if isinstance(answer, ast.Tuple) else [getattr(answer, "id", "")]
    if not all(isinstance(n, str) and n.startswith("my_") for n in names):
        return None
    return call.args[0].value, names


def solution_body(exercise_name: str, stub: ast.FunctionDef, position: int) -> list[str]:
    """The solution lines for one stub: a call of tfmlib's reference with the stub's arguments."""
    reference = REGISTRY[exercise_name].reference
    reference = reference[position] if isinstance(reference, tuple) else reference
    names = [a.arg for a in stub.args.posonlyargs + stub.args.args]
    unknown = set(names) - set(inspect.signature(reference).parameters)
    if unknown:
        raise ValueError(f"exercise {exercise_name!r}: {stub.name} has arguments that "
                         f"{reference.__name__} does not know: {', '.join(sorted(unknown))}")
    arguments = ", ".join(f"{name}={name}" for name in names)  # by name: some are keyword-only
    return [f"from {reference.__module__} import {reference.__name__}  "
            f'# the reference; solution("{exercise_name}") shows its source',
            f"return {reference.__name__}({arguments})"]


def with_solutions(source: str, exercise_name: str, answers: list[str]) -> str:
    """The answer cell's source with each stub line wrapped in nbgrader's solution markers."""
    functions = {node.name: node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)}
    stubs = list(STUB_LINE.finditer(source))
    if len(stubs) != len(answers) or any(name not in functions for name in answers):
        raise ValueError(f"exercise {exercise_name!r}: expected one {STUB!r} line in each of "
                         f"{', '.join(answers)}; found {len(stubs)} in:\n{source}")
    lines = source.split("\n")
    # From the last stub up, so that the line numbers of the ones above stay right.
    for position, name in reversed(list(enumerate(answers))):
        function = functions[name]
        stub_index = next(i for i in range(function.lineno - 1, function.end_lineno)
                          if STUB_LINE.fullmatch(lines[i]))
        indent = STUB_LINE.fullmatch(lines[stub_index])["indent"]
        body = ["### BEGIN SOLUTION", *solution_body(exercise_name, function, position), "### END SOLUTION"]
        lines[stub_index:stub_index + 1] = [indent + line for line in body]
    return "\n".join(lines)


def nbgrader_metadata(grade_id: str, *, solution: bool, grade: bool) -> dict:
    metadata = {"grade": grade, "grade_id": grade_id, "locked": not solution,
                "schema_version": 3, "solution": solution, "task": False}
    if grade:
        metadata["points"] = POINTS
    return metadata


def source_notebook(notebook: nbformat.NotebookNode) -> tuple[nbformat.NotebookNode, list[str]]:
    """The instructor's version of a course notebook, and the names of its graded exercises."""
    result = copy.deepcopy(notebook)
    cells, exercises = [], []
    for cell in result.cells:
        cells.append(cell)
        found = exercise_call(cell.source) if cell.cell_type == "code" else None
        if found is None:
            continue
        name, answers = found
        cell.source = with_solutions(cell.source, name, answers)
        cell.metadata["nbgrader"] = nbgrader_metadata(f"{name}-answer", solution=True, grade=False)
        answer = f"({', '.join(answers)})" if len(answers) > 1 else answers[0]
        test = nbformat.v4.new_code_cell(TEST_CELL.format(points=POINTS, name=name, answer=answer))
        test.metadata["nbgrader"] = nbgrader_metadata(f"{name}-test", solution=False, grade=True)
        cells.append(test)
        exercises.append(name)
    result.cells = cells
    return result, exercises


def course_notebooks(selected: list[str]) -> list[Path]:
    """The notebooks to turn into assignments: the ten by default, or those named (stem or path)."""
    every = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if not selected:
        return every
    by_stem = {path.stem: path for path in every}
    paths = []
    for name in selected:
        path = by_stem.get(Path(name).stem)
        if path is None:
            raise SystemExit(f"error: no course notebook {name!r}; known: {', '.join(by_stem)}")
        paths.append(path)
    return paths


def write_course(out: Path, notebooks: list[Path]) -> dict[str, list[str]]:
    """Write the course root `out`; returns {assignment: its graded exercises}."""
    out.mkdir(parents=True, exist_ok=True)
    config = out / "nbgrader_config.py"
    if not config.exists():
        config.write_text(CONFIG)
    assignments = {}
    for path in notebooks:
        notebook, exercises = source_notebook(nbformat.read(path, as_version=4))
        folder = out / "source" / path.stem
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        nbformat.write(notebook, folder / path.name)
        assignments[path.stem] = exercises
    return assignments


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="notebook names, e.g. 01_shapes (default: all ten)")
    parser.add_argument("--out", type=Path, default=REPO / "nbgrader-course",
                        help="the nbgrader course folder to write (default: nbgrader-course/)")
    args = parser.parse_args(argv)
    assignments = write_course(args.out, course_notebooks(args.notebooks))
    for assignment, exercises in assignments.items():
        print(f"{assignment}: {len(exercises)} autograded exercise(s), {len(exercises) * POINTS} point(s)")
    print(f"Course written to {args.out}. Next, in that folder: nbgrader generate_assignment ASSIGNMENT")


if __name__ == "__main__":
    sys.exit(main())
