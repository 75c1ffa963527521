"""The nbgrader course of teacher/make_nbgrader_course.py, graded by the real nbgrader, offline.

In a temporary folder: generate the course from notebooks 01 and 04 (one and three exercises),
`nbgrader generate_assignment` both, check that the released notebooks show exactly the
learner's cells of notebooks/ and no reference solution, then submit three learners' copies,
`nbgrader autograde` them and read the gradebook:
  ada  every reference answer                                       -> 4 of 4 points
  bob  01: a wrong answer; 04: one right, one wrong, one untouched,
       and the locked test cell of the wrong one edited to `pass`     -> 1 of 4
  eve  01: right, its test cell deleted; 04: an answer that loops
       forever, a cell that does not even parse, and a right answer
       whose test cell was deleted                                    -> 2 of 4
nbgrader runs in the teachers' environment (.venv-teacher, `make teacher`), as a teacher's
commands would; this file runs in the course's .venv and only needs the nbgrader command.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parent.parent
TEACHER_BIN = Path(os.environ.get("TFMLIB_TEACHER_VENV", REPO / ".venv-teacher")) / "bin"
ASSIGNMENTS = ("01_shapes", "04_masks")
STUB = "...  # your code here"
CELL_TIMEOUT = 15  # seconds; the slowest cell of 01 and 04 takes well under 2 s

_spec = importlib.util.spec_from_file_location("make_nbgrader_course",
                                               REPO / "teacher" / "make_nbgrader_course.py")
make_course = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_course)

# Learners' answers, as the body that replaces the stub line of each exercise.
RIGHT = {
    "broadcast_shape": """\
    a, b = (1,) * (len(shape_b) - len(shape_a)) + tuple(shape_a), (1,) * (len(shape_a) - len(shape_b)) + tuple(shape_b)
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise ValueError(f"sizes {x} and {y} clash")
    return tuple(y if x == 1 else x for x, y in zip(a, b))""",
    "padding_mask": "    return (token_ids != pad_id)[:, None, None, :]",
    "target_mask": """\
    L = token_ids.shape[1]
    return (token_ids != pad_id)[:, None, None, :] & torch.ones(L, L, dtype=torch.bool).tril()""",
}
WRONG = {
    "broadcast_shape": "    return tuple(max(x, y) for x, y in zip(shape_a, shape_b))",
    "causal_mask": "    return torch.ones(seq_len, seq_len, dtype=torch.bool).triu()[None, None]",
}
LOOPS = "    while True:\n        pass"


def teacher_env(home: Path) -> dict:
    """The environment of the nbgrader commands: the teachers' venv first on PATH (nbgrader runs
    `alembic` from there), every Jupyter folder and the progress file inside the test's folder."""
    env = dict(os.environ, PATH=f"{TEACHER_BIN}:{os.environ['PATH']}", HOME=str(home),
               JUPYTER_CONFIG_DIR=str(home / "jupyter-config"), JUPYTER_DATA_DIR=str(home / "jupyter-data"),
               IPYTHONDIR=str(home / "ipython"), MPLCONFIGDIR=str(home / "matplotlib"),
               TFMLIB_PROGRESS=str(home / "progress.json"))
    env.pop("JUPYTER_PATH", None)
    return env


def nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    if not (TEACHER_BIN / "nbgrader").exists():
        pytest.fail(f"no nbgrader in {TEACHER_BIN}: run `make teacher` first (it creates .venv-teacher "
                    "from requirements-teacher.txt)")
    done = subprocess.run([str(TEACHER_BIN / "nbgrader"), *args], cwd=course, env=teacher_env(course.parent),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("nbgrader") / "course"
    make_course.main(["--out", str(root), *ASSIGNMENTS])
    for assignment in ASSIGNMENTS:
        nbgrader(root, "generate_assignment", assignment)
    return root


def released(course: Path, assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(course / "release" / assignment / f"{assignment}.ipynb", as_version=4)


def is_test_cell(cell) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return meta.get("grade", False) and not meta.get("solution", False)


def answer_cells(notebook) -> dict[str, nbformat.NotebookNode]:
    """{exercise name: its answer cell} (nbgrader's grade_id is "<exercise>-answer")."""
    return {cell.metadata.nbgrader.grade_id.removesuffix("-answer"): cell for cell in notebook.cells
            if cell.metadata.get("nbgrader", {}).get("solution")}


# ---- the released notebooks ---------------------------------------------------------------------

@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_release_shows_exactly_the_cells_of_the_course_notebook(course, assignment):
    original = nbformat.read(REPO / "notebooks" / f"{assignment}.ipynb", as_version=4)
    learner_cells = [cell for cell in released(course, assignment).cells if not is_test_cell(cell)]
    assert [(c.cell_type, c.source) for c in learner_cells] == [(c.cell_type, c.source) for c in original.cells]
    assert [c.get("outputs") for c in learner_cells] == [c.get("outputs") for c in original.cells]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_release_has_a_locked_one_point_test_after_each_exercise_and_no_solution(course, assignment):
    source = nbformat.read(course / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    release = released(course, assignment)
    answers = answer_cells(release)
    assert list(answers) == make_course.source_notebook(
        nbformat.read(REPO / "notebooks" / f"{assignment}.ipynb", as_version=4))[1]
    for name, cell in answers.items():
        assert cell.source.count(STUB) == 1, cell.source
        test = release.cells[release.cells.index(cell) + 1]
        assert is_test_cell(test) and test.metadata.nbgrader.locked and test.metadata.nbgrader.points == 1
        assert f'check("{name}"' in test.source and "_exercises" not in test.source  # the test is hidden
    # The instructor's version does hold a solution; none of its lines reaches the release.
    solution_lines = {line.strip() for cell in answer_cells(source).values()
                      for line in cell.source.split("\n")} - {line.strip() for c in release.cells
                                                               for line in c.source.split("\n")}
    assert any("import" in line and "# the reference" in line for line in solution_lines)
    text = json.dumps(release)
    for line in solution_lines:
        assert line not in text, f"{assignment}: the release leaks {line!r}"
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS"):
        assert marker not in text


def test_each_solution_the_generator_writes_passes_its_check_for_all_ten_notebooks():
    """The instructor's answers are right (the round trip below grades two notebooks of ten)."""
    from tfmlib.exercises import check
    checked = 0
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        notebook, exercises = make_course.source_notebook(nbformat.read(path, as_version=4))
        for name, cell in answer_cells(notebook).items():
            namespace = {"check": lambda *args: None}  # the cell's own check call: skipped here
            exec(cell.source, namespace)
            answers = make_course.exercise_call(cell.source)[1]
            answer = tuple(namespace[a] for a in answers) if len(answers) > 1 else namespace[answers[0]]
            result = check(name, answer)
            assert result, f"{path.name}: {result}"
            checked += 1
        assert exercises, f"{path.name} has no graded exercise"
    assert checked >= 33


# ---- submissions, autograde, gradebook ----------------------------------------------------------

def submit(course: Path, student: str, assignment: str, answers: dict[str, str],
           delete_tests: tuple[str, ...] = (), edit_tests: dict[str, str] | None = None) -> None:
    """A learner's copy of the released notebook: `answers` replace stub lines (an answer of ""
    leaves the stub), the test cells of `delete_tests` are deleted, those of `edit_tests` edited."""
    notebook = released(course, assignment)
    for name, cell in answer_cells(notebook).items():
        if answers.get(name):
            cell.source = cell.source.replace("    " + STUB, answers[name])
    cells = []
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        name = grade_id.removesuffix("-test")
        if is_test_cell(cell) and name in delete_tests:
            continue
        if is_test_cell(cell) and name in (edit_tests or {}):
            cell.source = edit_tests[name]
        cells.append(cell)
    notebook.cells = cells
    folder = course / "submitted" / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, folder / f"{assignment}.ipynb")


def reference_answers(course: Path, assignment: str) -> dict[str, str]:
    """The instructor's solution of each exercise, as the body that replaces the stub line."""
    source = nbformat.read(course / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    answers = {}
    for name, cell in answer_cells(source).items():
        lines = cell.source.split("\n")
        begin, end = (next(i for i, line in enumerate(lines) if marker in line)
                      for marker in ("BEGIN SOLUTION", "END SOLUTION"))
        answers[name] = "\n".join(lines[begin + 1:end])
    return answers


@pytest.fixture(scope="module")
def gradebook(course) -> dict:
    """Autograde the three learners; {student: {assignment: {exercise: points}}} from the gradebook."""
    for assignment in ASSIGNMENTS:
        submit(course, "ada", assignment, reference_answers(course, assignment))
    submit(course, "bob", "01_shapes", {"broadcast_shape": WRONG["broadcast_shape"]})
    submit(course, "bob", "04_masks", {"padding_mask": RIGHT["padding_mask"], "causal_mask": WRONG["causal_mask"]},
           edit_tests={"causal_mask": "pass  # a learner's edit of the locked test cell"})
    submit(course, "eve", "01_shapes", {"broadcast_shape": RIGHT["broadcast_shape"]},
           delete_tests=("broadcast_shape",))
    submit(course, "eve", "04_masks", {"padding_mask": LOOPS, "causal_mask": "    return torch.ones(seq_len,",
                                       "target_mask": RIGHT["target_mask"]}, delete_tests=("target_mask",))
    for assignment in ASSIGNMENTS:
        nbgrader(course, "autograde", assignment, f"--Execute.timeout={CELL_TIMEOUT}")
    script = """
import json
from nbgrader.api import Gradebook
scores = {}
with Gradebook("sqlite:///gradebook.db") as gradebook:
    for assignment in gradebook.assignments:
        for notebook in assignment.notebooks:
            for cell in notebook.grade_cells:
                for grade in cell.grades:
                    student = grade.notebook.assignment.student.id
                    scores.setdefault(student, {}).setdefault(assignment.name, {})[
                        cell.name.removesuffix("-test")] = grade.score
print(json.dumps(scores))
"""
    done = subprocess.run([str(TEACHER_BIN / "python"), "-c", script], cwd=course,
                          env=teacher_env(course.parent), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_reference_answer_gets_full_marks(gradebook):
    assert gradebook["ada"] == {"01_shapes": {"broadcast_shape": 1},
                                "04_masks": {"padding_mask": 1, "causal_mask": 1, "target_mask": 1}}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_graders_kernel_runs_the_whole_notebook_without_an_error(course, gradebook, assignment):
    """Every cell, not only the exercises: the teachers' environment has all the notebooks import."""
    graded = nbformat.read(course / "autograded" / "ada" / assignment / f"{assignment}.ipynb", as_version=4)
    errors = [(index, output.ename, output.evalue) for index, cell in enumerate(graded.cells)
              for output in cell.get("outputs", []) if output.output_type == "error"]
    assert errors == []


def test_right_wrong_and_untouched_answers_get_exactly_their_points(gradebook):
    assert gradebook["bob"] == {"01_shapes": {"broadcast_shape": 0},
                                "04_masks": {"padding_mask": 1, "causal_mask": 0, "target_mask": 0}}


def test_a_loop_a_syntax_error_and_deleted_test_cells_are_graded_not_fatal(gradebook):
    assert gradebook["eve"] == {"01_shapes": {"broadcast_shape": 1},
                                "04_masks": {"padding_mask": 0, "causal_mask": 0, "target_mask": 1}}


def test_the_autograded_notebook_shows_the_checks_diagnosis(course, gradebook):
    """The grader (and nbgrader's feedback) sees why an answer lost its point: check's own line."""
    graded = nbformat.read(course / "autograded" / "bob" / "04_masks" / "04_masks.ipynb", as_version=4)
    test = next(c for c in graded.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "causal_mask-test")
    assert test.source.startswith("### BEGIN HIDDEN TESTS") or "check(\"causal_mask\"" in test.source
    error = next(o for o in test.outputs if o.output_type == "error")
    assert error.ename == "AssertionError" and "[FAIL] causal_mask" in error.evalue


def pins(path: Path) -> dict[str, str]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return dict(line.split("==") for line in lines if "==" in line)


def test_the_teachers_environment_pins_the_learners_versions():
    teacher, learner = pins(REPO / "requirements-teacher.txt"), pins(REPO / "requirements.txt")
    assert "nbgrader" in teacher and "nbgrader" not in learner
    shared = teacher.keys() & learner.keys()
    assert {"torch", "matplotlib", "ipywidgets", "ipykernel"} <= shared
    assert {name: teacher[name] for name in shared} == {name: learner[name] for name in shared}
    assert (REPO / "requirements-teacher.txt").read_text().rstrip().endswith("-e .")
