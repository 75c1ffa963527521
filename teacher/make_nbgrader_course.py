"""Generate an nbgrader course from the course's notebooks: one graded assignment per notebook.

    python teacher/make_nbgrader_course.py                 # the ten notebooks -> nbgrader-course/
    python teacher/make_nbgrader_course.py --out DIR 01_shapes 04_masks b1_language_model
    python teacher/make_nbgrader_course.py --bonus         # the ten and both bonus notebooks

Each coding exercise of a notebook (a `def my_...` stub followed by `check("name", my_...)`)
becomes an autograded answer cell, the stub, followed by a visible, locked test cell worth
the exercise's points that runs the same check (`tfmlib.handin.graded`) and fails unless it says
PASS. So `nbgrader validate` on a learner's copy lists every exercise that does not pass yet.
While autograding, the test cell only hands the answer's outputs in, and nbgrader's own process
decides the points (trusted_grading.py: the comparison; own_work.py: the rules, read from the
submitted code, that fail an answer using the reference, `solution()`, PyTorch's own version of
the exercise or an escape route).
In the instructor's version the stub's line `...  # your code here` is wrapped in nbgrader's
solution markers around the reference's own body, written out (`nbgrader generate_assignment`
puts the stub back). The release carries no `solution()`: its import and the "Stuck? Run
`solution(...)`" lines are taken out. Everything else ("predict, then run" questions
included) stays as it is, ungraded.

The folder written (default nbgrader-course/, git-ignored) is an nbgrader course root:
nbgrader_config.py (written once, yours to edit afterwards: the points of each exercise and
the calls an answer may not make are set there), warm_kernels.py (which forks each
submission's kernel from one process with the course's imports done, in a sandbox),
course_exchange.py (collect refuses a submission filed under another learner's name),
trusted_grading.py and own_work.py (the verdict; the four rewritten on every run) and
source/<notebook>/<notebook>.ipynb (rewritten on every run). The folder is made readable by its
owner alone (mode 700): the solutions and the gradebook are in it. See docs/teachers_guide.md.
"""
from __future__ import annotations

import argparse
import ast
import copy
import inspect
import re
import shutil
import sys
import textwrap
from pathlib import Path

import nbformat

from tfmlib.exercises import REGISTRY
from tfmlib.exercises.provenance import resolve

REPO = Path(__file__).resolve().parent.parent
STUB = "...  # your code here"
STUB_LINE = re.compile(r"^(?P<indent>[ \t]+)" + re.escape(STUB) + r"$", re.MULTILINE)

CONFIG = '''\
# nbgrader's configuration of this course, written by teacher/make_nbgrader_course.py
# (once: edit it freely, the script does not overwrite it).
import json
import os
import sys

c = get_config()  # noqa: F821 (nbgrader provides it)
c.CourseDirectory.course_id = "transformer-shape-first"

# ---- the course's own settings (plain Python literals) ------------------------------------------
# Points of each autograded exercise: DEFAULT_POINTS, or its entry in POINTS. After a change run
# `python teacher/make_nbgrader_course.py` again, then `nbgrader generate_assignment --force NAME`.
DEFAULT_POINTS = 1
POINTS = {}                # e.g. {"multi_head_attention": 3, "adam": 2}
# Calls an answer may not make, added to tfmlib's own table (tfmlib/exercises/provenance.py):
# {"exercise": ["module.function", ...]}; the checks read it while nbgrader autogrades.
FORBIDDEN_CALLS = {}       # e.g. {"causal_mask": ["torch.tril"]}
os.environ["TFMLIB_FORBIDDEN_CALLS"] = json.dumps(FORBIDDEN_CALLS)

# ---- nbgrader -----------------------------------------------------------------------------------
# The released notebook shows the learner's stub, exactly as in the course's notebooks/.
c.ClearSolutions.code_stub = {"python": "...  # your code here"}
# Keep the stored outputs (figures, the static picture of each widget) in the release.
c.ClearOutput.enabled = False
# A submission that deleted a test cell is graded with the cell put back.
c.OverwriteCells.add_missing_cells = True
# A cell that runs longer than this (seconds) is interrupted, and grading goes on.
# Notebook 10's slowest cell trains a model for about 20 s on a laptop CPU.
c.Execute.timeout = 120
# After a cell ends (or is interrupted), how long to wait for its last output. nbgrader fails the
# whole submission when this runs out, and nbclient's 4 s did on a busy 2-core grader, right after
# interrupting a cell that looped.
c.Execute.iopub_timeout = 30
# The grader's kernel draws no figure: nobody looks at them, and drawing them was up to half
# of a submission's time (benchmarks/AUTOGRADE.md). Learners' kernels are not affected.
c.Execute.extra_arguments = ["--InlineBackend.figure_formats=set()"]
# Autograding must not write the grader's own progress file (tfmlib.exercises.progress).
os.environ["TFMLIB_PROGRESS"] = ""
# ---- kernels, sandbox and exchange (teacher/warm_kernels.py, teacher/course_exchange.py) --------
# Each submission's kernel is a fork of one process that imported torch, matplotlib and the
# course's library once: 3x faster per submission (benchmarks/AUTOGRADE.md), and still a new
# process per submission. Each runs in a bubblewrap sandbox: the user nobody, no network, a private
# /tmp, no file of the course, the gradebook or the exchange, and every process of it killed when
# its grading ends (docs/teachers_guide.md, section 5). make_nbgrader_course.py rewrites
# warm_kernels.py and course_exchange.py next to this file.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import course_exchange  # noqa: E402
import warm_kernels  # noqa: E402
c.Autograde.autograde_preprocessors = warm_kernels.autograde_preprocessors()
# Collect refuses a submission whose claimed learner is not the account that submitted it.
c.ExchangeFactory.collect = course_exchange.OwnerCheckedCollect
# ---- end of kernels, sandbox and exchange ---------------------------------------------------------
# ---- the trusted verdict (trusted_grading.py, own_work.py; keep these lines) --------------------
# The points are decided here, in nbgrader's process, not in the learner's kernel: each graded test
# cell hands in what the answer returned on the check's cases, as plain data, and this process
# compares it with the reference and applies the own-work rules to the submitted code. Without
# these lines every graded cell scores 0 (what it hands in is no PASS by itself).
import trusted_grading  # noqa: E402
c.Autograde.autograde_preprocessors = trusted_grading.autograde_preprocessors(c.Autograde.autograde_preprocessors)
# ---- end of the trusted verdict -----------------------------------------------------------------
'''

SETTINGS = ("DEFAULT_POINTS", "POINTS", "FORBIDDEN_CALLS")

TEST_CELL = '''\
# Graded, {points} point{plural}: {answer} must PASS this check. Run this cell to see how it does.
# When grading, the grader runs {answer} here and judges what it returns outside this notebook;
# an answer that calls tfmlib's version, solution() or PyTorch's own version gets no points.
import tfmlib.handin as _handin
_result = _handin.graded("{name}", {answer})
assert _result, str(_result)
print(_result)'''

STUCK = re.compile(r"^Stuck\? Run `solution\(.*$\n?", re.MULTILINE)


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
    """The solution lines for one stub: the reference's own body, written out (a call of the
    reference would be refused by the check), after the imports of the module-level names it
    uses and its other arguments at their defaults."""
    reference = REGISTRY[exercise_name].reference
    reference = inspect.unwrap(reference[position] if isinstance(reference, tuple) else reference)
    parameters = inspect.signature(reference).parameters
    names = [a.arg for a in stub.args.posonlyargs + stub.args.args + stub.args.kwonlyargs]
    unknown = set(names) - set(parameters)
    if unknown:
        raise ValueError(f"exercise {exercise_name!r}: {stub.name} has arguments that "
                         f"{reference.__name__} does not know: {', '.join(sorted(unknown))}")
    source = textwrap.dedent(inspect.getsource(reference))
    tree = ast.parse(source).body[0]
    if tree.decorator_list:
        raise ValueError(f"exercise {exercise_name!r}: {reference.__name__} is decorated; "
                         "its body alone would not do what it does")
    body = tree.body[1:] if ast.get_docstring(tree) is not None else tree.body
    lines = textwrap.dedent("\n".join(source.split("\n")[body[0].lineno - 1:tree.end_lineno])).split("\n")
    defaults = [f"{name} = {_default(parameter)}" for name, parameter in parameters.items()
                if name not in names]
    return [f'# {reference.__module__}.{reference.__name__}, as solution("{exercise_name}") shows it',
            *_imports(reference, tree, set(parameters)), *defaults, *lines]


def _default(parameter: inspect.Parameter) -> str:
    if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
        return "()"
    if parameter.kind is inspect.Parameter.VAR_KEYWORD:
        return "{}"
    return repr(parameter.default)


def _imports(function, tree: ast.FunctionDef, parameters: set[str]) -> list[str]:
    """Import lines for the module-level names `function`'s body reads (its helpers, torch, F)."""
    body = ast.Module(tree.body, [])  # not the signature: its annotations are never run
    assigned = {node.id for node in ast.walk(body) if isinstance(node, ast.Name)
                and not isinstance(node.ctx, ast.Load)}
    read = sorted({node.id for node in ast.walk(body) if isinstance(node, ast.Name)
                   and isinstance(node.ctx, ast.Load)} - assigned - parameters)
    lines, helpers = [], []
    if any("torch." in repr(p.default) for p in inspect.signature(function).parameters.values()):
        read = sorted(set(read) | {"torch"})
    for name in read:
        value = function.__globals__.get(name)
        if value is None:
            continue  # a builtin
        if inspect.ismodule(value):
            lines.append(f"import {value.__name__}" + (f" as {name}" if value.__name__ != name else ""))
        else:
            helpers.append(name)
    if helpers:
        lines.append(f"from {function.__module__} import {', '.join(helpers)}")
    return lines


def with_solutions(source: str, exercise_name: str, answers: list[str]) -> str:
    """The answer cell's source with each stub line wrapped in nbgrader's solution markers,
    and without its closing `check(...)` line: the test cell below runs the check."""
    tree = ast.parse(source)
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    stubs = list(STUB_LINE.finditer(source))
    if len(stubs) != len(answers) or any(name not in functions for name in answers):
        raise ValueError(f"exercise {exercise_name!r}: expected one {STUB!r} line in each of "
                         f"{', '.join(answers)}; found {len(stubs)} in:\n{source}")
    lines = source.split("\n")[:tree.body[-1].lineno - 1]  # the closing check(...) call goes
    while lines and not lines[-1].strip():
        lines.pop()
    # From the last stub up, so that the line numbers of the ones above stay right.
    for position, name in reversed(list(enumerate(answers))):
        function = functions[name]
        stub_index = next(i for i in range(function.lineno - 1, function.end_lineno)
                          if STUB_LINE.fullmatch(lines[i]))
        indent = STUB_LINE.fullmatch(lines[stub_index])["indent"]
        body = ["### BEGIN SOLUTION", *solution_body(exercise_name, function, position), "### END SOLUTION"]
        lines[stub_index:stub_index + 1] = [(indent + line).rstrip() for line in body]
    return "\n".join(lines)


def without_solution_help(cell: nbformat.NotebookNode) -> nbformat.NotebookNode | None:
    """The cell with no way to `solution()` left: its import, the "Stuck?" lines; None for a cell
    left empty."""
    if cell.cell_type == "markdown":
        cell.source = STUCK.sub("", cell.source).strip("\n")
    elif cell.cell_type == "code":
        cell.source = re.sub(r"^(from tfmlib\.exercises import .*)\bsolution, |, solution\b", r"\1",
                             cell.source, flags=re.MULTILINE)
    return cell if cell.source.strip() else None


def nbgrader_metadata(grade_id: str, *, solution: bool, grade: bool, points: float = 0) -> dict:
    metadata = {"grade": grade, "grade_id": grade_id, "locked": not solution,
                "schema_version": 3, "solution": solution, "task": False}
    if grade:
        metadata["points"] = points
    return metadata


def points_of(name: str, settings: dict) -> float:
    return settings["POINTS"].get(name, settings["DEFAULT_POINTS"])


def source_notebook(notebook: nbformat.NotebookNode, settings: dict | None = None,
                    ) -> tuple[nbformat.NotebookNode, list[str]]:
    """The instructor's version of a course notebook, and the names of its graded exercises."""
    settings = settings or {"DEFAULT_POINTS": 1, "POINTS": {}}
    result = copy.deepcopy(notebook)
    cells, exercises = [], []
    for cell in result.cells:
        found = exercise_call(cell.source) if cell.cell_type == "code" else None
        cell = without_solution_help(cell)
        if cell is None:
            continue
        cells.append(cell)
        if found is None:
            continue
        name, answers = found
        cell.source = with_solutions(cell.source, name, answers)
        cell.outputs = []
        cell.metadata["nbgrader"] = nbgrader_metadata(f"{name}-answer", solution=True, grade=False)
        answer = f"({', '.join(answers)})" if len(answers) > 1 else answers[0]
        points = points_of(name, settings)
        test = nbformat.v4.new_code_cell(TEST_CELL.format(points=points, plural="" if points == 1 else "s",
                                                          name=name, answer=answer))
        test.metadata["nbgrader"] = nbgrader_metadata(f"{name}-test", solution=False, grade=True,
                                                      points=points)
        cells.append(test)
        exercises.append(name)
    result.cells = cells
    return result, exercises


def course_notebooks(selected: list[str], bonus: bool = False) -> list[Path]:
    """The notebooks to turn into assignments: the ten by default (and the bonus ones with
    `bonus`), or those named (stem or path; a bonus notebook by its name, b1_language_model)."""
    ten = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    bonus_notebooks = sorted((REPO / "notebooks" / "bonus").glob("b[0-9]_*.ipynb"))
    if not selected:
        return ten + (bonus_notebooks if bonus else [])
    by_stem = {path.stem: path for path in ten + bonus_notebooks}
    paths = []
    for name in selected:
        path = by_stem.get(Path(name).stem)
        if path is None:
            raise SystemExit(f"error: no course notebook {name!r}; known: {', '.join(by_stem)}")
        paths.append(path)
    return paths


def read_settings(config: Path) -> dict:
    """DEFAULT_POINTS, POINTS and FORBIDDEN_CALLS from the course's nbgrader_config.py (literals),
    checked: a misspelt exercise or function name would otherwise change nothing, silently."""
    values = {}
    for node in ast.parse(config.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and getattr(node.targets[0], "id", None) in SETTINGS:
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                raise SystemExit(f"error: {config}: {node.targets[0].id} must be a plain literal")
    settings = {"DEFAULT_POINTS": 1, "POINTS": {}, "FORBIDDEN_CALLS": {}, **values}
    for key in ("POINTS", "FORBIDDEN_CALLS"):
        unknown = set(settings[key]) - set(REGISTRY)
        if unknown:
            raise SystemExit(f"error: {config}: {key} names no exercise called {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(sorted(REGISTRY))}")
    for name, points in {"DEFAULT_POINTS": settings["DEFAULT_POINTS"], **settings["POINTS"]}.items():
        if not isinstance(points, (int, float)) or isinstance(points, bool) or points <= 0:
            raise SystemExit(f"error: {config}: the points of {name} must be a positive number, not {points!r}")
    for name, calls in settings["FORBIDDEN_CALLS"].items():
        for dotted in calls:
            try:
                resolve(dotted)
            except (ImportError, AttributeError):
                raise SystemExit(f"error: {config}: FORBIDDEN_CALLS[{name!r}]: no function {dotted!r}")
    return settings


def write_course(out: Path, notebooks: list[Path]) -> dict[str, list[tuple[str, float]]]:
    """Write the course root `out`; returns {assignment: [(graded exercise, points), ...]}."""
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o700)  # the solutions (source/), the gradebook, the submissions: the teacher's alone
    config = out / "nbgrader_config.py"
    if not config.exists():
        config.write_text(CONFIG)
    for helper in ("warm_kernels.py", "course_exchange.py", "trusted_grading.py", "own_work.py"):
        shutil.copyfile(REPO / "teacher" / helper, out / helper)
    settings = read_settings(config)
    assignments = {}
    for path in notebooks:
        notebook, exercises = source_notebook(nbformat.read(path, as_version=4), settings)
        folder = out / "source" / path.stem
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        nbformat.write(notebook, folder / path.name)
        assignments[path.stem] = [(name, points_of(name, settings)) for name in exercises]
    return assignments


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*",
                        help="notebook names, e.g. 01_shapes or b1_language_model (default: the ten)")
    parser.add_argument("--bonus", action="store_true", help="with no names: the bonus notebooks too")
    parser.add_argument("--out", type=Path, default=REPO / "nbgrader-course",
                        help="the nbgrader course folder to write (default: nbgrader-course/)")
    args = parser.parse_args(argv)
    assignments = write_course(args.out, course_notebooks(args.notebooks, args.bonus))
    for assignment, exercises in assignments.items():
        print(f"{assignment}: {len(exercises)} autograded exercise(s), "
              f"{sum(points for _, points in exercises):g} point(s)")
    print(f"Course written to {args.out}. Next, in that folder: nbgrader generate_assignment ASSIGNMENT")


if __name__ == "__main__":
    sys.exit(main())
