"""tools/pip_install.py: which torch build the installs of `make course`, `make test` and
`make teacher` ask pip for, on which machine, and the exact command pip gets.

PyPI's Linux wheel of the pinned torch bundles CUDA (several GB): a learner's Linux laptop
must get the CPU build from PyTorch's CPU index where that answers, the plain pin where it
does not (this machine, offline), and the plain pin on macOS and Windows without asking.
"""
from __future__ import annotations

import http.server
import importlib.util
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("pip_install", ROOT / "tools" / "pip_install.py")
pip_install = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pip_install)

PIN = "2.13.0"


class Probe:
    """A fake reachability probe that remembers whether it was asked."""

    def __init__(self, answers: bool):
        self.answers, self.asked = answers, 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.answers


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_a_linux_machine_gets_the_cpu_index_where_it_answers_and_the_plain_pin_where_not(machine):
    reachable, unreachable = Probe(True), Probe(False)
    assert pip_install.use_cpu_index("auto", "Linux", machine, PIN, None, reachable)[0] is True
    assert pip_install.use_cpu_index("auto", "Linux", machine, PIN, None, unreachable)[0] is False
    assert reachable.asked == unreachable.asked == 1


@pytest.mark.parametrize("system, machine", [("Darwin", "arm64"), ("Darwin", "x86_64"), ("Windows", "AMD64")])
def test_macos_and_windows_get_the_plain_pin_without_asking_the_index(system, machine):
    probe = Probe(True)
    use, why = pip_install.use_cpu_index("auto", system, machine, PIN, None, probe)
    assert use is False and probe.asked == 0 and "CPU build already" in why


def test_an_installed_torch_of_the_pinned_release_is_kept_whichever_build():
    for installed in ("2.13.0+cpu", "2.13.0", "2.13.0+cu128"):
        probe = Probe(True)
        assert pip_install.use_cpu_index("auto", "Linux", "x86_64", PIN, installed, probe) == (
            False, f"torch {installed} is installed already and is kept")
        assert probe.asked == 0
    # another release is replaced, so the build is chosen again
    assert pip_install.use_cpu_index("auto", "Linux", "x86_64", PIN, "2.12.1+cu126", Probe(True))[0] is True


def test_the_choice_of_torch_overrides_the_decision_without_asking():
    probe = Probe(False)
    assert pip_install.use_cpu_index("cpu", "Darwin", "arm64", PIN, "2.13.0", probe)[0] is True
    assert pip_install.use_cpu_index("pypi", "Linux", "x86_64", PIN, None, probe)[0] is False
    assert probe.asked == 0


def test_the_exact_commands_pip_gets(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# torch==1.0.0 in a comment\nnumpy==2.4.6\ntorch==2.13.0  # pinned\n-e .\n")
    assert pip_install.pip_command("py", requirements, cpu_index=False) == [
        "py", "-m", "pip", "install", "--no-compile", "-r", str(requirements)]
    assert pip_install.pip_command("py", requirements, cpu_index=True) == [
        "py", "-m", "pip", "install", "--no-compile", "-r", str(requirements),
        "--extra-index-url", "https://download.pytorch.org/whl/cpu", "torch==2.13.0+cpu"]


@pytest.mark.parametrize("name", ["requirements.txt", "requirements-teacher.txt"])
def test_the_cpu_pin_is_the_release_the_requirements_pin_and_binder_installs(name):
    binder = (ROOT / "binder" / "requirements.txt").read_text()
    assert pip_install.torch_pin(ROOT / name) == PIN
    assert f"torch=={PIN}+cpu" in binder.splitlines()
    assert f"--extra-index-url {pip_install.CPU_INDEX}" in binder.splitlines()


def test_a_requirements_file_without_an_exact_torch_pin_is_an_error(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("torch>=2.1\n")
    with pytest.raises(SystemExit, match="no exact pin"):
        pip_install.torch_pin(requirements)


def test_dry_run_prints_the_decision_and_the_command_and_runs_nothing(monkeypatch, capsys):
    monkeypatch.setattr(pip_install.platform, "system", lambda: "Linux")
    monkeypatch.setattr(pip_install.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(pip_install, "installed_torch", lambda: None)
    monkeypatch.setattr(pip_install, "index_answers", Probe(True))
    monkeypatch.setattr(pip_install.subprocess, "call", lambda *a, **k: pytest.fail("pip ran"))
    assert pip_install.main(["--dry-run", str(ROOT / "requirements.txt")]) == 0
    why, command = capsys.readouterr().out.splitlines()
    assert "answers" in why
    assert command.endswith(f"--extra-index-url {pip_install.CPU_INDEX} torch=={PIN}+cpu")


# ---- the real probe, against servers on this machine --------------------------------------------

def _serve(handler_class) -> tuple[str, http.server.HTTPServer]:
    server = http.server.HTTPServer(("127.0.0.1", 0), handler_class)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/whl/cpu/", server


class _Index(http.server.BaseHTTPRequestHandler):
    def do_HEAD(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):  # keep the test's output clean
        pass


def test_the_probe_says_yes_to_an_index_that_answers():
    url, server = _serve(_Index)
    try:
        assert pip_install.index_answers(url, seconds=5.0)
    finally:
        server.shutdown()
        server.server_close()


def test_the_probe_gives_up_on_time_on_a_server_that_never_answers():
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # connections are queued and never answered
    try:
        start = time.monotonic()
        assert not pip_install.index_answers(f"http://127.0.0.1:{silent.getsockname()[1]}/", seconds=0.5)
        assert time.monotonic() - start < 0.5 + 0.5
    finally:
        silent.close()


def test_the_probe_says_no_at_once_where_nothing_listens():
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # the port is free: the connection is refused
    assert not pip_install.index_answers(f"http://127.0.0.1:{port}/", seconds=5.0)


# ---- the Makefile passes the choice on ----------------------------------------------------------

@pytest.mark.parametrize("choice", ["auto", "pypi"])
def test_both_installs_of_the_makefile_go_through_the_script_with_the_choice(choice):
    args = ["make", "-n", "-B", ".venv/.requirements.stamp", ".venv-teacher/.requirements.stamp"]
    if choice != "auto":
        args.append(f"TORCH={choice}")
    untimed = {key: value for key, value in os.environ.items() if key != "STAGE_TIME"}  # as make test-timed sets it
    printed = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=True, env=untimed).stdout
    installs = [line for line in printed.splitlines() if "pip install" in line or "pip_install" in line]
    assert installs == [f"{ROOT}/.venv/bin/python tools/pip_install.py --torch {choice} requirements.txt",
                        f"{ROOT}/.venv-teacher/bin/python tools/pip_install.py --torch {choice} "
                        "requirements-teacher.txt"]
