# JupyterHub for a class on one machine: the course for every student, each student their own
# Unix user, as The Littlest JupyterHub sets it up (systemd spawner, one `jupyter-<name>` account
# per student), written out so that it can be read, tested and changed.
#
#   sudo /opt/course/venv/bin/jupyterhub -f /opt/course/hub/jupyterhub_config.py
#
# docs/teachers_guide.md ("Running the course for a class") gives each step; hub/tests/ checks
# this file: the hub test runs it with a test spawner and authenticator in place of the two below
# and asserts that one student can neither open another's server nor read another's submission.
import os
import pwd
import subprocess
import sys
from pathlib import Path

c = get_config()  # noqa: F821 (JupyterHub provides it)

HUB = Path(__file__).resolve().parent
# The environment built from hub/requirements.txt: the course, nbgrader, nbgitpuller and
# jupyterhub-singleuser. The hub runs from it too (sys.prefix), so there is one to keep up to date.
USER_ENV = Path(sys.prefix)
# nbgrader's exchange, shared by the teacher (releases, collects) and the students (fetch, submit).
EXCHANGE = os.environ.get("COURSE_EXCHANGE", "/srv/nbgrader/exchange")
COURSE_ID = "transformer-shape-first"
TEACHERS = {"teacher"}
# The Unix account that owns the nbgrader course and runs the autograder, which executes the
# students' code: never the teacher's own account (see the guide, "Autograding").
GRADER = "grader-course"

# --- Who comes in --------------------------------------------------------------------------------
# A real password for each student, chosen at the first login (TLJH's default authenticator).
# Only the accounts the teacher created (admin page, Add users, or the REST API) can log in:
# a stranger who finds the address cannot make one.
c.JupyterHub.authenticator_class = "firstuseauthenticator.FirstUseAuthenticator"
c.FirstUseAuthenticator.create_users = False
c.FirstUseAuthenticator.min_password_length = 8
c.Authenticator.admin_users = TEACHERS
# Since JupyterHub 5 nobody is allowed in unless the config says who: the accounts that exist.
c.Authenticator.allow_existing_users = True

# --- One Unix user and one systemd unit per student ----------------------------------------------
# The systemd spawner runs each server as the student's own account, in a unit with its own
# memory and CPU limits, its own /tmp, no devices and no sudo: a student can read neither
# another's home (mode 700) nor their processes' memory.
c.JupyterHub.spawner_class = "systemdspawner.SystemdSpawner"
c.SystemdSpawner.username_template = "jupyter-{USERNAME}"
c.SystemdSpawner.dynamic_users = False
c.SystemdSpawner.isolate_tmp = True
c.SystemdSpawner.isolate_devices = True
c.SystemdSpawner.disable_user_sudo = True
c.SystemdSpawner.default_shell = "/bin/bash"
c.SystemdSpawner.extra_paths = [str(USER_ENV / "bin")]
# Limits from the load test (hub/LOAD.md): a student's server and kernel hold 468 MB (RSS; 333 MB
# of it their own) after notebook 10's training; 1.5 GB leaves room for a second kernel.
# One core each: the course is sized to run on one, and torch is told to use one thread.
c.Spawner.mem_limit = "1.5G"
c.Spawner.cpu_limit = 1.0
c.Spawner.cmd = [str(USER_ENV / "bin" / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.environment = {
    # N kernels on fewer cores oversubscribe unless each uses one thread.
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    # nbgrader's course id and exchange for the Assignments tab (hub/student-config/).
    "JUPYTER_CONFIG_PATH": str(HUB / "student-config"),
    "COURSE_EXCHANGE": EXCHANGE,
}
# The first start of a server imports torch; on a loaded machine that can take a while.
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120


def ensure_unix_user(spawner) -> None:
    """Make the student's Unix account on their first start (what TLJH does), home mode 700."""
    name = spawner.user.name
    if not name.isalnum():  # JupyterHub normalises names to lower case; keep them shell-safe too
        raise ValueError(f"user name {name!r}: expected letters and digits only")
    unix_name = f"jupyter-{name}"
    try:
        home = pwd.getpwnam(unix_name).pw_dir
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", unix_name], check=True)
        home = pwd.getpwnam(unix_name).pw_dir
    os.chmod(home, 0o700)


c.Spawner.pre_spawn_hook = ensure_unix_user

# --- The proxy, the idle culler ------------------------------------------------------------------
# The Python port of configurable-http-proxy (pinned in hub/requirements.txt): no Node.js.
c.ConfigurableHTTPProxy.command = [str(USER_ENV / "bin" / "configurable-http-proxy")]
c.JupyterHub.bind_url = "http://:80"  # put HTTPS in front (the guide says how); TLJH does that itself
# A server nobody used for an hour is stopped (its files stay); a lesson is 45 minutes.
CULLER = {
    "name": "idle-culler",
    "command": [sys.executable, "-m", "jupyterhub_idle_culler", "--timeout=3600", "--cull-every=300"],
}
c.JupyterHub.services = [
    CULLER,
    # The teacher's nbgrader course, served by a Jupyter server that runs as GRADER in its home:
    # the teacher opens it at /services/grader/ (formgrader, autograde) with their hub login.
    {
        "name": "grader",
        "url": "http://127.0.0.1:9999",
        "command": [str(USER_ENV / "bin" / "jupyterhub-singleuser"), "--ServerApp.port=9999"],
        "user": GRADER,
        "cwd": f"/home/{GRADER}/course",
        "environment": {"JUPYTERHUB_DEFAULT_URL": "/lab", "COURSE_EXCHANGE": EXCHANGE,
                        "JUPYTER_CONFIG_PATH": str(HUB / "student-config")},
        "oauth_no_confirm": True,
    },
]
c.JupyterHub.load_roles = [
    {"name": "idle-culler", "services": ["idle-culler"],
     "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"]},
    # Only the teachers may open the grader's server; students get no role beyond their own server.
    {"name": "teachers-grade", "users": sorted(TEACHERS), "scopes": ["access:services!service=grader"]},
]
