"""Autograding with kernels forked from one warm process (teacher/warm_kernels.py) grades
exactly as nbgrader's own kernel start does, and leaves no process behind.

Three submissions of 04_masks, graded in this order by the real `nbgrader autograde`, once with
`--WarmExecute.warm=False` (nbgrader's own start) and once as the course's config has it (forked),
each kernel in its sandbox both times:
  a_loops   padding_mask loops forever (the cell timeout interrupts it), the others right
  b_raises  every answer raises
  c_honest  the instructor's answers
Same points, same output of every test cell (what the feedback shows), and afterwards no
process of these runs is left (no zygote, no kernel). And two kernels forked in turn are two
processes: what the first does to torch, the second does not see. nbgrader runs in .venv-teacher.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import nbformat
import pytest

from benchmarks.autograde import TEACHER_BIN, grader_env
from nbgrader_course import FULL, LOOPS, course_copy, make_course

REPO = Path(__file__).resolve().parent.parent
ASSIGNMENT = "04_masks"
CELL_TIMEOUT = 30  # seconds; 04's slowest cell takes under 2 s (20 s on a busy 2-core machine)

GRADEBOOK = """
import json
from nbgrader.api import Gradebook
scores = {}
with Gradebook("sqlite:///gradebook.db") as gradebook:
    for notebook in gradebook.find_assignment("04_masks").notebooks:
        for cell in notebook.grade_cells:
            for grade in cell.grades:
                student = grade.notebook.assignment.student.id
                scores.setdefault(student, {})[cell.name.removesuffix("-test")] = grade.score
print(json.dumps(scores))
"""



def processes_of(home: Path) -> list[str]:
    """The command lines of the processes whose environment has HOME=home (this test's) or whose
    command line or environment names a path in `home` (a sandbox's bubblewrap and kernel: the
    grader's temporary folder, where the sandboxes' folders are, is in `home`)."""
    markers = (f"HOME={home}".encode() + b"\0", str(home).encode() + b"/")
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                seen = (entry / "environ").read_bytes() + (entry / "cmdline").read_bytes()
                if any(marker in seen for marker in markers):
                    found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:120])
        except OSError:  # another user's process, or one that just exited
            continue
    return found


def run(course: Path, *args: str) -> str:
    if not (TEACHER_BIN / "nbgrader").exists():
        pytest.fail(f"no nbgrader in {TEACHER_BIN}: run `make teacher` first")
    done = subprocess.run([str(TEACHER_BIN / "nbgrader"), *args], cwd=course,
                          env=dict(grader_env(course.parent), TMPDIR=str(course.parent)),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def submissions(course: Path) -> None:
    source = nbformat.read(course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    right = {}
    for cell in source.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            lines = cell.source.split("\n")
            begin, end = (next(i for i, line in enumerate(lines) if marker in line)
                          for marker in ("BEGIN SOLUTION", "END SOLUTION"))
            right[cell.metadata.nbgrader.grade_id] = "\n".join(lines[begin + 1:end])
    learners = {"a_loops": {**right, "padding_mask-answer": LOOPS},
                "b_raises": {name: "    raise RuntimeError(\"a learner's bug\")" for name in right},
                "c_honest": right}
    for student, answers in learners.items():
        notebook = nbformat.read(course / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
        for cell in notebook.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id in answers:
                cell.source = cell.source.replace("    " + make_course.STUB, answers[grade_id])
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        nbformat.write(notebook, folder / f"{ASSIGNMENT}.ipynb")


def test_outputs(course: Path, student: str) -> list:
    """Each graded test cell's outputs, as the feedback shows them."""
    notebook = nbformat.read(course / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    return [[(o.output_type, o.get("text"), o.get("ename"), o.get("evalue")) for o in cell.outputs]
            for cell in notebook.cells if cell.metadata.get("nbgrader", {}).get("grade")]


test_outputs.__test__ = False  # a helper, not a test


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict:
    """{"cold" | "warm": (scores, {student: test cell outputs}, nbgrader's log, processes left)}."""
    course = course_copy(tmp_path_factory, tmp_path_factory.mktemp("warm"))  # 04 generated (nbgrader_course.py)
    submissions(course)
    results = {}
    for setup, options in (("cold", ["--WarmExecute.warm=False"]), ("warm", [])):
        log = run(course, "autograde", ASSIGNMENT, "--force", f"--Execute.timeout={CELL_TIMEOUT}", *options)
        left = processes_of(course.parent)
        done = subprocess.run([str(TEACHER_BIN / "python"), "-c", GRADEBOOK], cwd=course, env=grader_env(course.parent),
                              capture_output=True, text=True, timeout=120, check=True)
        outputs = {student: test_outputs(course, student) for student in ("a_loops", "b_raises", "c_honest")}
        results[setup] = (json.loads(done.stdout.splitlines()[-1]), outputs, log, left)
    return results


def test_the_warm_run_forked_every_kernel_and_the_cold_run_none(graded):
    assert graded["warm"][2].count("forked, its imports done") == 3, graded["warm"][2]
    assert "forked" not in graded["cold"][2]


def test_forked_kernels_give_the_same_points(graded):
    full = FULL[ASSIGNMENT]
    assert graded["cold"][0] == {"a_loops": {**full, "padding_mask": 0},
                                 "b_raises": dict.fromkeys(full, 0), "c_honest": full}
    assert graded["warm"][0] == graded["cold"][0]


def test_forked_kernels_give_the_same_feedback(graded):
    assert graded["warm"][1] == graded["cold"][1]
    # the loop was interrupted, so nothing was handed in; the grader's verdict (which replaces the
    # cell's own outputs) names the time limit among the causes
    assert any("received nothing" in str(output) and "ran past the time limit" in str(output)
               for cell in graded["warm"][1]["a_loops"] for output in cell), graded["warm"][1]["a_loops"]


def test_no_kernel_or_zygote_is_left_after_grading(graded):
    for setup in ("cold", "warm"):
        assert graded[setup][3] == [], (setup, graded[setup][3])


FORKS = """
import json, sys
import nbformat
from nbclient import NotebookClient
sys.path.insert(0, sys.argv[1])
import warm_kernels

def run(code):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    NotebookClient(notebook, kernel_manager_class=warm_kernels.ForkKernelManager, kernel_name="python3",
                   timeout=120).execute()
    cell = notebook.cells[0]
    return {"count": cell.execution_count, "text": "".join(o.get("text", "") for o in cell.outputs)}

print(json.dumps([run(code) for code in sys.argv[2:]]))
"""


def test_each_kernel_is_a_new_process_with_the_imports_done_and_nothing_of_the_one_before(tmp_path):
    """Two kernels in turn: the first breaks torch, the second finds torch whole (and already
    imported, by the zygote they are both forks of)."""
    first = "import os, sys; print(os.getpid(), os.getppid()); import torch; torch.zeros = None"
    second = "import os, sys; print(os.getpid(), os.getppid(), 'torch' in sys.modules); import torch; print(torch.zeros is None)"
    done = subprocess.run([str(TEACHER_BIN / "python"), "-c", FORKS, str(REPO / "teacher"), first, second],
                          cwd=tmp_path, env=grader_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    one, two = json.loads(done.stdout.splitlines()[-1])
    pid_one, parent_one = one["text"].split()
    pid_two, parent_two, imported, broken = two["text"].split()
    assert pid_one != pid_two and parent_one == parent_two  # two forks of one zygote
    assert (imported, broken) == ("True", "False")
    assert one["count"] == two["count"] == 1  # the zygote's imports count no execution
    assert processes_of(tmp_path) == []


def test_a_kernel_forked_for_a_notebook_inherits_its_cases_and_still_runs_on_every_thread(tmp_path):
    """The zygote derives the cases of the notebook graded in the kernel's folder before it forks
    (nbgrader runs each submission in autograded/STUDENT/NOTEBOOK), on one thread: a fork of a
    process whose OpenMP pool had started would hang at its first parallel operation."""
    folder = tmp_path / "07_sublayers"
    folder.mkdir()
    code = ("import os, torch; from tfmlib.exercises import REGISTRY; "
            "print([hasattr(REGISTRY[n], '_cases') for n in ('residual_sublayer', 'embed')]); "
            "x = torch.randn(1500, 1500); print((x @ x).shape == x.shape, torch.get_num_threads() == os.cpu_count())")
    done = subprocess.run([str(TEACHER_BIN / "python"), "-c", FORKS, str(REPO / "teacher"), code],
                          cwd=folder, env=grader_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (result,) = json.loads(done.stdout.splitlines()[-1])
    # 07's cases, not 03's; a kernel that hangs fails at nbclient's timeout
    assert result["text"].split("\n")[:2] == ["[True, False]", "True True"], result
    assert processes_of(tmp_path) == []


def test_torchs_own_cache_variable_in_the_graders_environment_starts_no_new_zygote(tmp_path):
    """The first verdict's check imports torch._inductor in the grader's process, which sets
    TORCHINDUCTOR_CACHE_DIR there; the next kernel's environment then differs, and it must still be
    a fork of the same zygote (else every submission after the first pays the imports again)."""
    between = "from torch._inductor.runtime.cache_dir_utils import cache_dir; cache_dir()"
    script = FORKS.replace("print(json.dumps([run(code) for code in sys.argv[2:]]))",
                           f"first = run(sys.argv[2]); {between}; print(json.dumps([first, run(sys.argv[2])]))")
    code = "import os; print(os.getppid(), 'TORCHINDUCTOR_CACHE_DIR' in os.environ)"
    # without it at first, though this test's own process may have set it already
    env = {name: value for name, value in grader_env(tmp_path).items() if name != "TORCHINDUCTOR_CACHE_DIR"}
    done = subprocess.run([str(TEACHER_BIN / "python"), "-c", script, str(REPO / "teacher"), code],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    one, two = (result["text"].split() for result in json.loads(done.stdout.splitlines()[-1]))
    assert one[0] == two[0] and (one[1], two[1]) == ("False", "True"), (one, two)
    assert processes_of(tmp_path) == []


# ---- the sandbox, one kernel at a time (tests/test_grading_sandbox.py grades through nbgrader) ----

DETACH = """
import sys, subprocess
import nbformat
from nbclient import NotebookClient
sys.path.insert(0, sys.argv[1])
import warm_kernels

manager = warm_kernels.kernel_manager(warm=sys.argv[2] == "forked", sandbox=sys.argv[3] == "sandbox",
                                      limits={"RLIMIT_AS": 4 << 30, "RLIMIT_NPROC": 256})
notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(sys.argv[4])])
NotebookClient(notebook, kernel_manager_class=manager, kernel_name="python3", timeout=120).execute()
print("".join(output.get("text", "") for output in notebook.cells[0].outputs))
"""
# A cell that leaves a process behind (double fork, new session, then `sleep` with a mark to find it
# by), and reports what it can reach: a file of the grader's, a server of the grader's on 127.0.0.1.
LEAVER = """
import os, socket
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for fd in (0, 1, 2):  # not the kernel's pipes: the test waits for them to close
            os.dup2(os.open(os.devnull, os.O_RDWR), fd)
        os.execv("/bin/sleep", ["sleep", "{mark}"])
    os._exit(0)
try:
    open({secret!r}).read(); print("read the grader's file")
except OSError:
    print("no grader's file")
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=10); print("connected")
except OSError as error:
    print("network:", error.errno)
"""


def marked(mark: str) -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()
            and _cmdline(entry).endswith(f" {mark}")]


def _cmdline(entry: Path) -> str:
    try:
        return (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


@pytest.mark.parametrize("start", ["forked", "started"])
@pytest.mark.parametrize("sandbox", ["sandbox", "no sandbox"])
def test_a_sandboxed_kernel_leaves_no_process_and_reaches_no_file_and_no_network(tmp_path, start, sandbox):
    """Without the sandbox the detached process outlives its kernel, and the kernel reads the
    grader's file and reaches its server (the control: the test can see each); in the sandbox the
    process is gone with the kernel's PID namespace, the file is not there, and 127.0.0.1 is the
    sandbox's own (connection refused)."""
    mark = f"{os.getpid()}{len(start)}{len(sandbox)}.25"
    secret = tmp_path / "gradebook.db"
    secret.write_text("grades")
    with socket.create_server(("127.0.0.1", 0)) as server:
        done = subprocess.run([str(TEACHER_BIN / "python"), "-c", DETACH, str(REPO / "teacher"), start, sandbox,
                               LEAVER.format(mark=mark, secret=str(secret), port=server.getsockname()[1])],
                              cwd=tmp_path, env=grader_env(tmp_path), capture_output=True, text=True, timeout=300)
    time.sleep(1)
    left = marked(mark)
    for pid in left:
        os.kill(pid, 9)
    assert done.returncode == 0, done.stderr
    if sandbox == "no sandbox":
        assert len(left) == 1 and "read the grader's file" in done.stdout and "connected" in done.stdout, done.stdout
    else:
        assert left == [], left
        assert "no grader's file" in done.stdout and "network: 111" in done.stdout, done.stdout
