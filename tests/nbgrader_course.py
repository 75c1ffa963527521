"""The nbgrader course that the grading tests share, built once per test run.

tests/test_nbgrader.py, test_warm_kernels.py and test_grading_sandbox.py each grade in a course of
their own, and each starts from the same one: teacher/make_nbgrader_course.py's course of 01 and 04,
with the teacher's settings below, and `nbgrader generate_assignment` of both. The first module to
ask builds it, under a lock in the run's temporary folder, which pytest-xdist's workers share
(pytest-xdist's way for a fixture built once per session); every module then grades in a copy of
its own, since grading writes the gradebook and the folders of the submissions. A copy takes well
under a second; the build takes an nbgrader start per assignment.
"""
from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks.autograde import TEACHER_BIN, grader_env

REPO = Path(__file__).resolve().parent.parent
ASSIGNMENTS = ("01_shapes", "04_masks")
POINTS = {"target_mask": 2}                       # the teacher's override; 1 point for the others
FORBIDDEN_CALLS = {"target_mask": ["torch.tril"]}  # the teacher's addition to tfmlib's table
# An answer that never returns, as a learner's loop whose condition never changes: the cell timeout
# interrupts it. It waits rather than spins, so that the timeout's wait costs the test run no CPU.
LOOPS = "    import time\n    while True:\n        time.sleep(0.1)"
FULL = {"01_shapes": {"broadcast_shape": 1}, "04_masks": {"padding_mask": 1, "causal_mask": 1, "target_mask": 2}}

_spec = importlib.util.spec_from_file_location("make_nbgrader_course",
                                               REPO / "teacher" / "make_nbgrader_course.py")
make_course = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_course)


def _run_folder(tmp_path_factory) -> Path:
    """This test run's own temporary folder: under pytest-xdist, the parent of the workers' folders
    (each worker's is <run>/popen-gwN); without it, its base folder (whose parent holds every run's)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _build(folder: Path) -> None:
    """The course in folder/course, and folder/commands: the nbgrader commands run to build it."""
    if not (TEACHER_BIN / "nbgrader").exists():
        pytest.fail(f"no nbgrader in {TEACHER_BIN}: run `make teacher` first (it creates .venv-teacher "
                    "from requirements-teacher.txt)")
    course = folder / "course"
    course.mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(make_course.CONFIG.replace(
        "POINTS = {}", f"POINTS = {POINTS!r}").replace("FORBIDDEN_CALLS = {}", f"FORBIDDEN_CALLS = {FORBIDDEN_CALLS!r}"))
    make_course.main(["--out", str(course), *ASSIGNMENTS])
    commands = []
    for assignment in ASSIGNMENTS:
        args = ["generate_assignment", assignment]
        done = subprocess.run([str(TEACHER_BIN / "nbgrader"), *args], cwd=course, env=grader_env(folder),
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
        warnings = [line for line in (done.stdout + done.stderr).splitlines() if "checksum" in line]
        assert warnings == [], "\n".join(warnings)
        commands.append(args[0])
    (folder / "commands").write_text("\n".join(commands))


def _built(tmp_path_factory) -> Path:
    """The folder of the run's built course, built by whichever test gets here first."""
    folder = _run_folder(tmp_path_factory) / "nbgrader-course"
    with open(f"{folder}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when a worker dies
        if not folder.exists():
            # built aside and renamed once whole: a build that failed half-way is never used, and
            # the next test to ask tries again (and fails with its own message)
            partial = folder.with_name(folder.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            _build(partial)
            partial.rename(folder)
    return folder


def course_copy(tmp_path_factory, into: Path) -> Path:
    """A copy of the run's built course, into/course, for one module to grade in (modes and
    times kept: the course folder stays its owner's alone)."""
    return Path(shutil.copytree(_built(tmp_path_factory) / "course", into / "course", symlinks=True))


def build_commands(tmp_path_factory) -> list[str]:
    """The nbgrader commands that built the course, in order."""
    return (_built(tmp_path_factory) / "commands").read_text().split("\n")
