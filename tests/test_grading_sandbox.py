"""Students kept apart on one machine, and a submission graded in a sandbox, as separate Unix accounts.

The teacher (this test's root, as the grading account) sets up the course and the exchange as
docs/teachers_guide.md says: the course folder readable by the teacher alone (make_nbgrader_course.py
makes it mode 700), the exchange mode 1777 (sticky: nobody renames what is not theirs), each home 700.
Two students, this machine's accounts `nobody` and `daemon`, fetch 04_masks and submit through the
exchange with the shipped student configuration (hub/student-config):
  nobody   honest answers                                                  -> every point
  daemon   an honest padding mask in a cell that also tries to write the gradebook and the course
           folder, to list the solutions, and leaves a double-forked, setsid process behind that
           tries again after the cell and then lingers                      -> 1 point, nothing written,
                                                                               no process left
  daemon   after nobody, a wrong notebook under nobody's name (`submit --student=nobody`)
                                                                            -> refused by collect
Then, as each student: the solutions, the gradebook, another's home and another's collected
notebook are out of reach, and the course's exchange folder cannot be renamed.
Switching accounts needs root (CI runs as root, as the hub itself does).
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from benchmarks.autograde import TEACHER_BIN, grader_env
from nbgrader_course import FULL, course_copy
from test_nbgrader import RIGHT, WRONG, answer_cells, learners_copy
from test_warm_kernels import test_outputs
from unix_accounts import as_student

ASSIGNMENT = "04_masks"
COURSE_ID = "transformer-shape-first"
STUDENTS = ("nobody", "daemon")
MARKER = "86399.271828"  # the lingering process's `sleep` argument, to find it by

# Top-level code after the honest padding mask of the daemon's own notebook. It prints what it
# reached, and its grandchild (double fork, new session) tries again once the cell is over.
ATTACK = """
import os, time
def attempts():
    done = []
    for path in ({gradebook!r}, {planted!r}):
        try:
            with open(path, "a") as file:
                file.write("x")
            done.append("wrote " + path)
        except OSError as error:
            done.append(type(error).__name__)
    try:
        done.append("listed " + str(os.listdir({source!r})))
    except OSError as error:
        done.append(type(error).__name__)
    return done
print("attempts:", attempts())
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(3)
        attempts()
        os.execv("/bin/sleep", ["sleep", "{marker}"])
    os._exit(0)
"""


def teacher(course: Path, exchange: Path, *args: str) -> str:
    done = subprocess.run([str(TEACHER_BIN / "nbgrader"), *args, f"--Exchange.root={exchange}"], cwd=course,
                          env=grader_env(course.parent), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"nbgrader {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def lingering() -> list[str]:
    """Command lines of the processes that carry MARKER."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and MARKER.encode() in (entry / "cmdline").read_bytes():
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return found


def answered(home: Path, answers: dict[str, str]) -> None:
    path = home / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    nbformat.write(learners_copy(nbformat.read(path, as_version=4), answers), path)


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("this test switches to two other Unix accounts, which needs root: run it as root (CI does)")
    root = Path(tempfile.mkdtemp(prefix="grading-sandbox-"))
    root.chmod(0o755)
    try:
        exchange, course = root / "exchange", root / "course"
        exchange.mkdir()
        exchange.chmod(0o1777)  # the guide's `install -d -m 1777`
        course_copy(tmp_path_factory, root)  # 01 and 04 generated (nbgrader_course.py)
        teacher(course, exchange, "release_assignment", ASSIGNMENT)
        homes = {}
        for name in STUDENTS:
            homes[name] = root / f"home-{name}"
            homes[name].mkdir(mode=0o700)
            account = pwd.getpwnam(name)
            os.chown(homes[name], account.pw_uid, account.pw_gid)
            done = as_student(name, homes[name], exchange, TEACHER_BIN, "fetch_assignment", ASSIGNMENT)
            assert done.returncode == 0, f"{name}: fetch:\n{done.stdout}\n{done.stderr}"

        def submit(name: str, answers: dict[str, str], *options: str) -> None:
            account = pwd.getpwnam(name)
            answered(homes[name], answers)
            os.chown(homes[name] / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", account.pw_uid, account.pw_gid)
            done = as_student(name, homes[name], exchange, TEACHER_BIN, "submit", ASSIGNMENT, *options)
            assert done.returncode == 0, f"{name}: submit:\n{done.stdout}\n{done.stderr}"
            time.sleep(1.1)  # nbgrader's submission names carry the time to the second

        attack = ATTACK.format(gradebook=str(course / "gradebook.db"), planted=str(course / "planted.txt"),
                               source=str(course / "source"), marker=MARKER)
        submit("nobody", RIGHT)
        submit("daemon", {"padding_mask": RIGHT["padding_mask"] + "\n" + attack})
        # daemon fetches a fresh copy and hands in a wrong one as nobody's, after nobody's own
        shutil.rmtree(homes["daemon"] / ASSIGNMENT)
        done = as_student("daemon", homes["daemon"], exchange, TEACHER_BIN, "fetch_assignment", ASSIGNMENT)
        assert done.returncode == 0, done.stderr
        submit("daemon", WRONG, "--student=nobody")
        collected = teacher(course, exchange, "collect", ASSIGNMENT)
        graded = teacher(course, exchange, "autograde", ASSIGNMENT)
        time.sleep(4)  # longer than the lingering process waits before it tries again
        yield {"root": root, "course": course, "exchange": exchange, "homes": homes, "collect": collected,
               "autograde": graded, "lingering": lingering()}
    finally:  # also when a step above failed
        shutil.rmtree(root)


def scores(course: Path) -> dict:
    script = """
import json
from nbgrader.api import Gradebook
with Gradebook("sqlite:///gradebook.db") as gradebook:
    print(json.dumps({s.id: {g.name.removesuffix("-test"): g.score for g in
                             gradebook.find_submission_notebook("04_masks", "04_masks", s.id).grades}
                      for s in gradebook.students}))
"""
    done = subprocess.run([str(TEACHER_BIN / "python"), "-c", script], cwd=course, env=grader_env(course.parent),
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_a_submission_under_another_students_name_is_refused_and_the_victims_own_is_graded(term):
    assert "Refused" in term["collect"] and "claims to be by nobody but the account daemon" in term["collect"], \
        term["collect"]
    assert scores(term["course"])["nobody"] == FULL[ASSIGNMENT]  # the honest notebook, not the impostor's


def test_a_cell_cannot_reach_the_gradebook_or_the_course_and_leaves_no_process(term):
    course = term["course"]
    # The answer is right, but its cell also forks and opens files: the own-work rules (read from the
    # source, outside the sandbox) give it no point and say why; the sandbox is what stops it running.
    assert scores(course)["daemon"] == {"padding_mask": 0, "causal_mask": 0, "target_mask": 0}
    assert not (course / "planted.txt").exists()
    printed = "".join(str(output) for cell in test_outputs(course, "daemon") for output in cell)
    assert "not your own work" in printed, printed
    notebook = nbformat.read(course / "autograded" / "daemon" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    attempts = "".join(o.get("text", "") for o in answer_cells(notebook)["padding_mask"].outputs)
    # The course is not in the sandbox: no solutions to list, and what the cell wrote (if anything:
    # a file of that name in the sandbox's private /tmp, gone with it) never reached the gradebook.
    assert attempts.startswith("attempts: [") and attempts.strip().endswith("'FileNotFoundError']"), \
        attempts + printed
    assert not (course / "gradebook.db").read_bytes().endswith(b"x")
    assert term["lingering"] == [], term["lingering"]
    assert "in its sandbox" in term["autograde"], term["autograde"]


PROBE = """
import os, sys
reached = []
def attempt(what, action, *args):
    try:
        action(*args)
        reached.append(what)
    except PermissionError:
        pass
attempt("read the solutions", os.listdir, {source!r})
attempt("read the gradebook", open, {gradebook!r}, "rb")
attempt("replaced a collected notebook", open, {collected!r}, "w")
attempt("listed another's home", os.listdir, {other_home!r})
attempt("renamed the course's exchange folder", os.rename, {course_exchange!r}, {course_exchange!r} + "-old")
print(reached)
"""


@pytest.mark.parametrize("name, other", [("nobody", "daemon"), ("daemon", "nobody")])
def test_a_student_reaches_neither_the_course_the_gradebook_another_home_nor_the_exchange(term, name, other):
    course, exchange = term["course"], term["exchange"]
    collected = course / "submitted" / other / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    paths = dict(source=str(course / "source"), gradebook=str(course / "gradebook.db"), collected=str(collected),
                 other_home=str(term["homes"][other]), course_exchange=str(exchange / COURSE_ID))
    for path in paths.values():  # the probe is not vacuous: each is there, for its owner
        assert os.path.exists(path), path
    done = as_student(name, term["homes"][name], exchange, TEACHER_BIN, "-c", PROBE.format(**paths))
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr
