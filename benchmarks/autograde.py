"""`python -m benchmarks.autograde [--students N] [--rounds R] [ASSIGNMENT ...]`

How long `nbgrader autograde` takes per submission, as the course grades now and as it graded
before, side by side on the same machine, in alternating rounds:
  before      nbgrader starts a new kernel per submission, which imports torch, matplotlib,
              ipywidgets and tfmlib in the notebook's first cells (`--WarmExecute.warm=False`),
              in the grading sandbox;
  unsandboxed each submission's kernel is forked from one process that imported them once
              (teacher/warm_kernels.py), without the sandbox (`--WarmExecute.sandbox=False`);
  now         forked, and in the grading sandbox, as the course's nbgrader_config.py grades.
Figures are not drawn in any (the config's `--InlineBackend.figure_formats=set()`).
Each round autogrades N copies of the instructor's answers (every output matches the reference;
the grader judges the long ones copies of it, which costs no other work) with
`--force`, and then one copy; per submission is (N copies - one copy) / (N - 1), which leaves
out nbgrader's own start (and the zygote's imports, once per command), in wall-clock seconds
and in CPU seconds (nbgrader and every process it started: kernels, the zygote, the sandboxes).
Writes benchmarks/AUTOGRADE.md. Needs the teachers' environment (`make teacher`).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import psutil

from .timing import load_average, machine

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TEACHER_BIN = Path(os.environ.get("TFMLIB_TEACHER_VENV", REPO / ".venv-teacher")) / "bin"
SETUPS = {"before": ["--WarmExecute.warm=False"], "unsandboxed": ["--WarmExecute.sandbox=False"], "now": []}


def _generator():
    spec = importlib.util.spec_from_file_location("make_nbgrader_course",
                                                  REPO / "teacher" / "make_nbgrader_course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def grader_env(home: Path) -> dict:
    """The environment of an nbgrader command run for a course in `home`: the teachers' venv first on
    PATH, and Jupyter's, IPython's and matplotlib's configuration in `home`, not the user's."""
    env = dict(os.environ, PATH=f"{TEACHER_BIN}:{os.environ['PATH']}", HOME=str(home),
               JUPYTER_CONFIG_DIR=str(home / "jupyter-config"), JUPYTER_DATA_DIR=str(home / "jupyter-data"),
               IPYTHONDIR=str(home / "ipython"), MPLCONFIGDIR=str(home / "matplotlib"))
    env.pop("JUPYTER_PATH", None)
    return env


def _nbgrader(course: Path, *args: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds of nbgrader and every process it started) of one command.

    The CPU time is each process's own, read while it lives (every 50 ms), not the reaped
    children's total: a sandboxed kernel dies with its PID namespace and nobody reaps it, so its
    time never reaches nbgrader's rusage. A process loses at most its last 50 ms."""
    start = time.perf_counter()
    process = subprocess.Popen([str(TEACHER_BIN / "nbgrader"), *args], cwd=course, env=grader_env(course.parent),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    root, seen, output = psutil.Process(process.pid), {}, []
    reader = threading.Thread(target=lambda: output.append(process.stdout.read()))  # a full pipe would block it
    reader.start()
    while process.poll() is None:
        with contextlib.suppress(psutil.Error):
            for child in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    times = child.cpu_times()
                    seen[(child.pid, child.create_time())] = times.user + times.system
        time.sleep(0.05)
        if time.perf_counter() - start > 3600:
            process.kill()
    reader.join()
    wall = time.perf_counter() - start
    if process.returncode != 0:
        raise SystemExit(f"nbgrader {' '.join(args)} exited with {process.returncode}; the end of its "
                         f"output:\n{output[0][-3000:]}")
    return wall, sum(seen.values())


def _copies(course: Path, assignment: str, students: int, generator) -> None:
    """N copies of the instructor's answers for each setup, as a learner would hand them in."""
    source = nbformat.read(course / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    notebook = nbformat.read(course / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    answers = {}
    for cell in source.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            lines = cell.source.split("\n")
            begin = next(i for i, line in enumerate(lines) if "BEGIN SOLUTION" in line)
            end = next(i for i, line in enumerate(lines) if "END SOLUTION" in line)
            answers[meta["grade_id"]] = "\n".join(lines[begin + 1:end])
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = cell.source.replace("    " + generator.STUB, answers[grade_id])
    for setup in SETUPS:
        for number in range(students):
            folder = course / "submitted" / f"{setup}{number:02d}" / assignment
            folder.mkdir(parents=True, exist_ok=True)
            nbformat.write(notebook, folder / f"{assignment}.ipynb")


def measure(assignment: str, students: int, rounds: int) -> dict:
    """{setup: (wall per submission, CPU per submission, wall of nbgrader's own start)}."""
    generator = _generator()
    with tempfile.TemporaryDirectory() as folder:
        course = Path(folder) / "course"
        generator.main(["--out", str(course), assignment])
        _nbgrader(course, "generate_assignment", assignment)
        _copies(course, assignment, students, generator)
        samples = {setup: [] for setup in SETUPS}
        for _ in range(rounds):
            for setup, options in SETUPS.items():  # alternating, so that the load hits both alike
                full = _nbgrader(course, "autograde", assignment, f"--student={setup}*", "--force", *options)
                one = _nbgrader(course, "autograde", assignment, f"--student={setup}00", "--force", *options)
                each = ((full[0] - one[0]) / (students - 1), (full[1] - one[1]) / (students - 1))
                samples[setup].append((*each, one[0] - each[0]))
    return {setup: tuple(statistics.median(s[i] for s in rows) for i in range(3))
            for setup, rows in samples.items()}


def render(results: dict, students: int, rounds: int, seconds: float, loads: tuple) -> str:
    info = machine()
    lines = ["# Autograding time per submission", "",
             "Written by `python -m benchmarks.autograde` (its docstring says what is measured).",
             f"Machine: {info.cpu}, {info.cores} cores, torch {info.torch}; load average "
             f"{loads[0]:.1f} at the start, {loads[1]:.1f} at the end (other jobs shared the cores: "
             "read the ratios, measured side by side, rather than the seconds). "
             f"{students} submissions per assignment, median of {rounds} alternating rounds; "
             f"the run took {seconds / 60:.0f} min.", "",
             "| assignment | before: wall / CPU per submission | forked, no sandbox: wall / CPU "
             "| now, forked and sandboxed: wall / CPU | faster than before (wall / CPU) "
             "| a class of 40, wall: before / now |",
             "|---|---:|---:|---:|---:|---:|"]
    for assignment, setups in results.items():
        before, bare, now = setups["before"], setups["unsandboxed"], setups["now"]
        lines.append(f"| `{assignment}` | {before[0]:.1f} s / {before[1]:.1f} s | {bare[0]:.1f} s / {bare[1]:.1f} s "
                     f"| {now[0]:.1f} s / {now[1]:.1f} s | {before[0] / now[0]:.1f}x / {before[1] / now[1]:.1f}x | "
                     f"{(before[2] + 40 * before[0]) / 60:.1f} min / {(now[2] + 40 * now[0]) / 60:.1f} min |")
    lines += ["", "A class of 40 is nbgrader's own start plus 40 times the time per submission, for "
              "one notebook; the ten notebooks take about ten times as long. In `now`, nbgrader's own "
              "start includes the zygote's imports, once per command.", "",
              "Before, most of a submission's time was the kernel's start and the notebook's first "
              "cells importing torch, matplotlib, ipywidgets and tfmlib, in every kernel. Now one process "
              "imports them and each submission's kernel is a fork of it (teacher/warm_kernels.py): "
              "still a new process per submission. What is left per submission is nbgrader's own work "
              "on each notebook (sanitizing, writing it, the gradebook), the fork and ipykernel's start, "
              "and the lesson's own cells. The sandbox (bubblewrap; docs/teachers_guide.md, section 5) "
              "adds a bubblewrap process per submission that holds the sandbox's namespaces, which the "
              "forked kernel joins: compare the two forked columns."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.autograde", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("assignments", nargs="*", default=["04_masks", "07_sublayers"])
    parser.add_argument("--students", type=int, default=3, help="at least 2")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=HERE / "AUTOGRADE.md")
    args = parser.parse_args(argv)
    start, first = time.perf_counter(), load_average()[0]
    results = {}
    for assignment in args.assignments:
        results[assignment] = measure(assignment, args.students, args.rounds)
        print(assignment, results[assignment], flush=True)
    text = render(results, args.students, args.rounds, time.perf_counter() - start,
                  (first, load_average()[0]))
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
