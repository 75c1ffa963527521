"""The shipped one-machine configuration keeps students apart.

hub/jupyterhub_config.py, read as JupyterHub reads it: a real authenticator that admits only the
accounts the teacher made, each student's server in its own systemd unit as their own Unix user,
with limits, no sudo and a private /tmp, an idle culler, and no role that opens another user's
server. (The hub test runs this same file with a test spawner and checks, through the hub, that a
student's token gets 403 from another student's server.)

nbgrader's exchange as the shipped hub/student-config sets it up, with real Unix accounts (this
machine's `nobody` and `daemon` as two students, the test's own root as the teacher): both fetch
and submit, neither can list the submissions or change a release, and the teacher collects both.
Switching accounts needs root, as the hub itself does (CI runs as root).
"""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from traitlets.config.loader import PyFileConfigLoader

from classroom import HUB_VENV, REPO
from tests.unix_accounts import as_student, shipped_env

TEACHER_BIN = Path(os.environ.get("TFMLIB_TEACHER_VENV", REPO / ".venv-teacher")) / "bin"
ASSIGNMENT = "04_masks"
STUDENTS = ("nobody", "daemon")


@pytest.fixture(scope="module")
def shipped():
    return PyFileConfigLoader("jupyterhub_config.py", path=str(REPO / "hub")).load_config()


def test_every_setting_is_a_real_option_of_the_class_it_configures(shipped):
    """A misspelt key would be ignored by JupyterHub with only a warning in its log."""
    from firstuseauthenticator import FirstUseAuthenticator
    from systemdspawner import SystemdSpawner
    for cls, sections in ((SystemdSpawner, ("SystemdSpawner", "Spawner")),
                          (FirstUseAuthenticator, ("FirstUseAuthenticator", "Authenticator"))):
        options = cls.class_trait_names(config=True)
        for section in sections:
            assert not [key for key in shipped[section] if key not in options], (section, list(shipped[section]))


def test_students_log_in_with_a_password_only_to_accounts_the_teacher_made(shipped):
    assert shipped.JupyterHub.authenticator_class == "firstuseauthenticator.FirstUseAuthenticator"
    assert shipped.FirstUseAuthenticator.create_users is False
    assert shipped.Authenticator.allow_existing_users is True
    assert "allow_all" not in shipped.Authenticator  # not everyone who finds the address


def test_each_student_is_their_own_unix_user_in_their_own_limited_unit(shipped):
    assert shipped.JupyterHub.spawner_class == "systemdspawner.SystemdSpawner"
    spawner = shipped.SystemdSpawner
    assert spawner.username_template == "jupyter-{USERNAME}" and spawner.dynamic_users is False
    assert spawner.isolate_tmp and spawner.isolate_devices and spawner.disable_user_sudo
    assert shipped.Spawner.mem_limit and shipped.Spawner.cpu_limit == 1.0
    assert shipped.Spawner.environment["OMP_NUM_THREADS"] == "1"


def test_a_students_unix_name_is_checked_before_useradd_sees_it(shipped):
    class Spawner:
        class user:
            name = "eve;rm -rf"
    with pytest.raises(ValueError, match="letters and digits"):
        shipped.Spawner.pre_spawn_hook(Spawner())


def test_idle_servers_are_culled_and_no_role_opens_another_users_server(shipped):
    culler = next(s for s in shipped.JupyterHub.services if s["name"] == "idle-culler")
    assert "jupyterhub_idle_culler" in culler["command"] and "--timeout=3600" in culler["command"]
    scopes = [scope for role in shipped.JupyterHub.load_roles for scope in role["scopes"]]
    assert not any(scope.startswith(("access:servers", "admin", "read:users:files")) for scope in scopes), scopes
    teachers = next(r for r in shipped.JupyterHub.load_roles if r["name"] == "teachers-grade")
    assert teachers["scopes"] == ["access:services!service=grader"] and "groups" not in teachers
    grader = next(s for s in shipped.JupyterHub.services if s["name"] == "grader")
    assert grader["user"] != "root" and grader["user"] not in teachers["users"]


# ---- the exchange, as real Unix accounts --------------------------------------------------------

def teacher(course: Path, exchange: Path, *args: str) -> subprocess.CompletedProcess:
    """A teacher's command, as this process's user, in the teachers' environment."""
    return subprocess.run(args, cwd=course, env=shipped_env(course.parent, exchange, TEACHER_BIN),
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def exchange_run():
    if os.geteuid() != 0:
        pytest.fail("the exchange test switches to two other Unix accounts, which needs root "
                    "(as the hub itself does): run `make hub-test` as root")
    root = Path(tempfile.mkdtemp(prefix="hub-exchange-"))
    root.chmod(0o755)
    try:
        exchange, course = root / "exchange", root / "course"
        done = teacher(root, exchange, str(TEACHER_BIN / "python"), str(REPO / "teacher" / "make_nbgrader_course.py"),
                       "--out", str(course), ASSIGNMENT)
        assert done.returncode == 0, done.stderr
        for command in ("generate_assignment", "release_assignment"):
            done = teacher(course, exchange, "nbgrader", command, ASSIGNMENT)
            assert done.returncode == 0, done.stderr
        homes = {}
        for name in STUDENTS:
            homes[name] = root / f"home-{name}"
            homes[name].mkdir(mode=0o700)
            account = pwd.getpwnam(name)
            os.chown(homes[name], account.pw_uid, account.pw_gid)
            for command in ("fetch_assignment", "submit"):
                done = as_student(name, homes[name], exchange, HUB_VENV / "bin", command, ASSIGNMENT)
                assert done.returncode == 0, f"{name}: nbgrader {command}:\n{done.stdout}\n{done.stderr}"
        yield root, exchange, course, homes
    finally:  # also when a step above failed
        shutil.rmtree(root)


def test_every_student_submits_and_the_teacher_collects_each(exchange_run):
    root, exchange, course, _ = exchange_run
    done = teacher(course, exchange, "nbgrader", "collect", ASSIGNMENT)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (course / "submitted").iterdir()) == sorted(STUDENTS)


def test_a_student_cannot_list_the_submissions_nor_change_the_release(exchange_run):
    root, exchange, course, homes = exchange_run
    inbound = exchange / "transformer-shape-first" / "inbound"
    outbound = exchange / "transformer-shape-first" / "outbound" / ASSIGNMENT
    probe = f"""
import glob
try:
    os.listdir({str(inbound)!r}); sys.exit("listed the inbound folder")
except PermissionError:
    pass
if glob.glob({str(inbound / 'nobody+*')!r}):
    sys.exit("found nobody's submission")
try:
    open(os.path.join({str(outbound)!r}, "planted.txt"), "w"); sys.exit("wrote into the release")
except PermissionError:
    pass
try:
    os.listdir({str(homes['nobody'])!r}); sys.exit("listed nobody's home")
except PermissionError:
    pass
print("kept out")
"""
    done = as_student("daemon", homes["daemon"], exchange, HUB_VENV / "bin", "-c", probe)
    assert done.returncode == 0 and done.stdout.strip() == "kept out", done.stdout + done.stderr
    # The probe is not vacuous: the submission it looked for is there, for the teacher.
    assert any(p.name.startswith(f"nobody+{ASSIGNMENT}+") for p in inbound.iterdir())
