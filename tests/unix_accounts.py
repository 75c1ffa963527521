"""A command run as another Unix account, for the tests that keep students apart on one machine.

Used by tests/test_grading_sandbox.py (with .venv-teacher's Python) and hub/tests/test_exchange.py
(with .venv-hub's, which imports this module as `tests.unix_accounts`: `python -m pytest` puts the
repository root on sys.path), so it needs nothing beyond the standard library. Switching accounts
needs root (CI runs as root, as the hub itself does).
"""
from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The interpreter may live where other accounts cannot read it (pyenv under /root): the process
# starts as root, imports nbgrader, and only then becomes the account.
BECOME = """
import os, pwd, sys
import nbgrader.apps, nbgrader.exchange.default
account = pwd.getpwnam(sys.argv[1])
os.setgroups([]); os.setgid(account.pw_gid); os.setuid(account.pw_uid)
if sys.argv[2] == "-c":
    exec(sys.argv[3])
else:
    sys.exit(nbgrader.apps.NbGraderApp.launch_instance(argv=sys.argv[2:]))
"""


def shipped_env(home: Path, exchange: Path, bin_dir: Path) -> dict:
    """The shipped student configuration (hub/student-config), and nothing of this process's own
    environment: `bin_dir` first on PATH, the account's home, the course's exchange."""
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(home), "COURSE_EXCHANGE": str(exchange),
            "JUPYTER_CONFIG_PATH": str(REPO / "hub" / "student-config"), "TFMLIB_PROGRESS": "",
            "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}


def as_student(name: str, home: Path, exchange: Path, bin_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """`nbgrader ARGS` (or `-c CODE`) as Unix user `name`, in their home, with the Python of `bin_dir`."""
    return subprocess.run([str(bin_dir / "python"), "-c", BECOME, name, *args], cwd=home,
                          env=shipped_env(home, exchange, bin_dir), capture_output=True, text=True, timeout=300)
