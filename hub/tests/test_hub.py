"""The course on a real JupyterHub (hub/tests/jupyterhub_config.py: the shipped config with a test
spawner and authenticator), on 127.0.0.1, with a class of STUDENTS students at once.

Each student gets an account and a token from the hub's REST API, starts a server, pulls the course
with an nbgitpuller link from a local bare repository, and in a kernel runs all of lesson 05,
whose widget must come up, whose demo of a wrong answer must get the check's FAIL, and to which a
right answer must get PASS; a moved slider must redraw. One student's token must not open another
student's server. Then the teacher releases an nbgrader assignment, every student fetches it and
submits it through the Assignments tab's API, and the teacher collects and autogrades: each
student's score must be the number of exercises they answered right. Everything the hub started
must be gone at the end, by process id.

`make hub-test` runs it (needs `make hub`); the exchange test (test_exchange.py) is apart.
"""
from __future__ import annotations

import asyncio
import csv
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from classroom import REPO, Hub, Student, bare_course_repo, code_cells

STUDENTS = int(os.environ.get("HUB_TEST_STUDENTS", "10"))
TEACHER_BIN = Path(os.environ.get("TFMLIB_TEACHER_VENV", REPO / ".venv-teacher")) / "bin"
ASSIGNMENT = "04_masks"
STUB = "...  # your code here"

RIGHT_ATTENTION = '''
def my_attention(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = torch.where(mask, weights, 0.0)   # rows with every key masked: zeros, not NaN
    return weights @ value, weights

check("scaled_dot_product_attention", my_attention)
'''


def names() -> list[str]:
    return [f"student{i:02d}" for i in range(STUDENTS)]


@pytest.fixture(scope="module")
def workdir():
    # Not pytest's tmp_path (mode 700): the exchange test's other accounts must reach it.
    path = Path(tempfile.mkdtemp(prefix="hub-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@pytest.fixture(scope="module")
def hub(workdir):
    hub = Hub(workdir, workdir / "exchange")
    try:
        hub.start()
        yield hub
    finally:  # also when the hub did not come up
        stray = hub.stop()
    assert not stray, f"processes left running after the hub stopped (killed now): {stray}"


@pytest.fixture(scope="module")
def bare_repo(workdir) -> Path:
    return bare_course_repo(workdir)


@pytest.fixture(scope="module")
def students(hub, bare_repo) -> list[Student]:
    """The class logs in: accounts, servers and the course pulled, all at once."""
    async def arrive(student: Student) -> None:
        await student.create()
        await student.start_server()
        await student.pull(str(bare_repo), "05_attention.ipynb")

    class_ = [Student(hub, name) for name in names()]

    async def everyone():
        await asyncio.gather(*(arrive(s) for s in class_))
    asyncio.run(everyone())
    return class_


async def lesson_05(student: Student) -> dict:
    """Lesson 05 top to bottom in the student's kernel, then a right answer and a moved slider."""
    kernel = await student.open_kernel()
    try:
        setup = await kernel.execute("import os; os.chdir(os.path.expanduser('~/course/notebooks'))")
        assert setup.status == "ok", setup.error
        outputs, widgets = [], []
        for source in code_cells(REPO / "notebooks" / "05_attention.ipynb"):
            result = await kernel.execute(source)
            assert result.status == "ok", f"{student.name}: {result.error}\nin the cell:\n{source}"
            outputs.append(result.stdout)
            widgets += result.comm_opens()
        right = await kernel.execute(RIGHT_ATTENTION)
        sliders = [w for w in widgets if w["data"]["state"]["_model_name"] == "SelectionSliderModel"]
        assert sliders, f"{student.name}: lesson 05 made no slider; widget models: {len(widgets)}"
        state = sliders[0]["data"]["state"]
        moved = await kernel.set_widget(sliders[0]["comm_id"], {"index": (state["index"] + 1) % len(state["_options_labels"])})
        return {"outputs": outputs, "widgets": widgets, "right": right, "moved": moved}
    finally:
        await kernel.shutdown()


@pytest.fixture(scope="module")
def lessons(students) -> dict[str, dict]:
    async def everyone():
        return await asyncio.gather(*(lesson_05(s) for s in students))
    return dict(zip(names(), asyncio.run(everyone())))


def test_every_student_runs_lesson_05_with_its_widget(lessons):
    assert len(lessons) == STUDENTS >= 10
    for name, lesson in lessons.items():
        controls = [w for w in lesson["widgets"] if w["data"]["state"]["_model_module"] == "@jupyter-widgets/controls"]
        assert controls, f"{name}: lesson 05 created no widget control"


def test_every_student_gets_the_checks_verdicts(lessons):
    for name, lesson in lessons.items():
        printed = "\n".join(lesson["outputs"])
        assert "[TODO] scaled_dot_product_attention" in printed, name       # the untouched stub
        assert "[FAIL] scaled_dot_product_attention: looks like a classic mistake" in printed, name  # the demo
        assert lesson["right"].stdout.startswith("[PASS] scaled_dot_product_attention"), (name, lesson["right"])


def test_a_moved_slider_redraws_the_widget(lessons):
    for name, lesson in lessons.items():
        updates = [m for m in lesson["moved"].messages if m["msg_type"] in ("comm_msg", "display_data")]
        assert updates, f"{name}: moving the slider sent nothing back"


def test_a_students_token_opens_only_their_own_server(hub, students):
    ada, bob = students[0], students[1]

    async def attempts():
        own = await hub.api("GET", f"/user/{ada.name}/api/contents/course", token=ada.token)
        theirs = [await hub.api(method, path, token=ada.token, expect=())
                  for method, path in (("GET", f"/user/{bob.name}/api/contents/course"),
                                       ("GET", f"/user/{bob.name}/api/kernels"),
                                       ("GET", f"/user/{bob.name}/files/course/README.md"))]
        hub_api = [await hub.api(method, path, token=ada.token, expect=())
                   for method, path in (("GET", f"/hub/api/users/{bob.name}"),
                                        ("DELETE", f"/hub/api/users/{bob.name}/server"),
                                        ("POST", f"/hub/api/users/{bob.name}/tokens"),
                                        ("GET", "/hub/api/users"))]
        return own, theirs, hub_api
    own, theirs, hub_api = asyncio.run(attempts())
    assert own[0] == 200
    assert [status for status, _ in theirs] == [403, 403, 403], theirs
    # The hub's API refuses (403) or hides (404) another user, and lists no one else.
    statuses = [status for status, _ in hub_api]
    assert all(s in (403, 404) for s in statuses[:3]), hub_api
    assert statuses[3] in (403, 200)
    if statuses[3] == 200:
        assert [u["name"] for u in hub_api[3][1]] == [ada.name]


# ---- nbgrader through the hub -------------------------------------------------------------------

def teacher(course: Path, exchange: Path, *args: str) -> subprocess.CompletedProcess:
    """A command of the teacher's, in the teachers' environment (.venv-teacher), in the course."""
    if not (TEACHER_BIN / "nbgrader").exists():
        pytest.fail(f"no nbgrader in {TEACHER_BIN}: run `make teacher` first")
    env = dict(os.environ, PATH=f"{TEACHER_BIN}:{os.environ['PATH']}", COURSE_EXCHANGE=str(exchange),
               JUPYTER_CONFIG_PATH=str(REPO / "hub" / "student-config"), HOME=str(course.parent),
               TFMLIB_PROGRESS="")
    done = subprocess.run(args, cwd=course, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done


def solutions(course: Path) -> dict[str, str]:
    """{exercise: the instructor's answer lines}, from the source notebook's solution markers."""
    source = json.loads((course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text())
    answers = {}
    for cell in source["cells"]:
        meta = cell["metadata"].get("nbgrader", {})
        if meta.get("solution"):
            lines = "".join(cell["source"]).split("\n")
            begin, end = (next(i for i, line in enumerate(lines) if marker in line)
                          for marker in ("BEGIN SOLUTION", "END SOLUTION"))
            answers[meta["grade_id"].removesuffix("-answer")] = "\n".join(lines[begin + 1:end])
    return answers


async def fetch_answer_submit(student: Student, course_id: str, right: list[str], answers: dict[str, str]) -> None:
    """The Assignments tab: Fetch, answer the exercises in `right` (the others stay stubs), Submit."""
    query = f"course_id={course_id}&assignment_id={ASSIGNMENT}"
    await student.api("POST", f"/assignments/fetch?{query}")
    path = f"/api/contents/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
    _, model = await student.api("GET", path)
    for cell in model["content"]["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id", "")
        name = grade_id.removesuffix("-answer")
        if cell["metadata"].get("nbgrader", {}).get("solution") and name in right:
            cell["source"] = cell["source"].replace("    " + STUB, answers[name])
    await student.api("PUT", path, body={"type": "notebook", "format": "json", "content": model["content"]})
    _, submitted = await student.api("POST", f"/assignments/submit?{query}")
    assert not (isinstance(submitted, dict) and submitted.get("success") is False), submitted


def test_nbgrader_release_fetch_submit_collect_autograde(hub, students, workdir):
    course, exchange = workdir / "nbgrader-course", hub.exchange
    teacher(course.parent, exchange, str(TEACHER_BIN / "python"), str(REPO / "teacher" / "make_nbgrader_course.py"),
            "--out", str(course), ASSIGNMENT)
    for command in ("generate_assignment", "release_assignment"):
        teacher(course, exchange, str(TEACHER_BIN / "nbgrader"), command, ASSIGNMENT)
    answers = solutions(course)
    exercises = sorted(answers)
    assert len(exercises) >= 2
    course_id = "transformer-shape-first"
    # Student i answers the first i exercises right and leaves the rest untouched: one student per
    # possible score (autograding is the slow part: it runs each submission's whole notebook).
    graded = students[:len(exercises) + 1]
    expected = {s.name: i for i, s in enumerate(graded)}

    async def everyone():
        await asyncio.gather(*(fetch_answer_submit(s, course_id, exercises[:expected[s.name]], answers)
                               for s in graded))
    asyncio.run(everyone())

    # the students are hub users of one Unix account: the check that an account submits only under
    # its own name (course_exchange.py, tested as real accounts in tests/test_grading_sandbox.py) is off
    teacher(course, exchange, str(TEACHER_BIN / "nbgrader"), "collect", ASSIGNMENT, "--ExchangeCollect.check_owner=False")
    assert sorted(p.name for p in (course / "submitted").iterdir()) == sorted(expected)
    teacher(course, exchange, str(TEACHER_BIN / "nbgrader"), "autograde", ASSIGNMENT)
    teacher(course, exchange, str(TEACHER_BIN / "nbgrader"), "export")
    with open(course / "grades.csv") as grades:
        scores = {row["student_id"]: float(row["score"]) for row in csv.DictReader(grades)
                  if row["assignment"] == ASSIGNMENT}
    assert scores == {name: float(points) for name, points in expected.items()}
