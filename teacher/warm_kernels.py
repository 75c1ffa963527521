"""Autograding with the course's imports done once, not once per submission.

`nbgrader autograde` runs every submission in a new kernel, and most of a submission's time
went into starting that kernel and importing torch, matplotlib, ipywidgets and tfmlib
(benchmarks/AUTOGRADE.md). Here one helper process, the zygote, imports them once; each
submission's kernel is a fork of it (os.fork: a copy of the process, its imported modules
shared page by page until written). So every submission still gets its own new process,
used by nobody before: what one learner's code does to its kernel cannot reach another's.

make_nbgrader_course.py copies this file next to the course's nbgrader_config.py, whose lines
    import warm_kernels
    c.Autograde.autograde_preprocessors = warm_kernels.autograde_preprocessors()
turn it on; `--WarmExecute.warm=False` on the command line (or in the config) turns it off.
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import LocalProvisioner
from nbgrader.preprocessors import Execute
from traitlets import Bool

IDLE_SECONDS = 300  # a zygote unused this long exits (Formgrader's process outlives a grading run)

# The zygote: imports what every notebook of the course imports, then forks one kernel per
# request line {"argv", "cwd", "env"} on stdin, and answers each with the kernel's pid.
ZYGOTE = r'''
import importlib, json, os, signal, sys
os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")  # as ipykernel sets it
for name in ("numpy", "torch", "torch.nn.functional", "matplotlib.pyplot", "ipywidgets",
             "tfmlib", "tfmlib.exercises", "tfmlib.viz"):
    try:
        importlib.import_module(name)
    except Exception:
        pass  # then the notebook imports it itself, and shows the error where it always did
import ipykernel.kernelapp, ipykernel_launcher
replies = os.fdopen(int(sys.argv[1]), "w", buffering=1)
signal.signal(signal.SIGINT, signal.SIG_IGN)   # a Ctrl-C in the grader's terminal is the grader's
def reap(signum, frame):  # waited for, the kernels' CPU time counts in the grader's own
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
signal.signal(signal.SIGCHLD, reap)
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid:
        replies.write(f"{pid}\n")
        continue
    # The kernel: as `python -m ipykernel_launcher ...` would have started, but for the imports.
    replies.close()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()  # a process group of its own, which the grader interrupts or kills
    sys.stdin = open(os.devnull)
    os.dup2(sys.stdin.fileno(), 0)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"], JPY_PARENT_PID=str(os.getppid()))
    if "numpy" in sys.modules:  # a fresh process's own random state (Python's random reseeds itself)
        sys.modules["numpy"].random.seed()
    del sys.path[0]      # the zygote's '' ; the kernel adds its own
    sys.argv = [ipykernel_launcher.__file__, *request["argv"]]
    code = 0
    try:
        # parent_handle: ipykernel read JPY_PARENT_PID when the zygote imported it, before it was set
        ipykernel.kernelapp.IPKernelApp.launch_instance(parent_handle=os.getppid())
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
'''


class Zygote:
    """The zygote process, started with the environment its kernels will have."""

    def __init__(self, env: dict):
        self.env = env
        read, write = os.pipe()
        self.process = subprocess.Popen([sys.executable, "-c", ZYGOTE, str(write)], stdin=subprocess.PIPE,
                                        pass_fds=(write,), env=env, text=True)
        os.close(write)
        self.replies = os.fdopen(read)
        self.timer = None

    def fork(self, argv: list[str], cwd: str, env: dict) -> int:
        """A new kernel process, its pid; waits for the zygote's imports the first time."""
        self.process.stdin.write(json.dumps({"argv": argv, "cwd": cwd, "env": env}) + "\n")
        self.process.stdin.flush()
        reply = self.replies.readline()
        if not reply:
            raise RuntimeError(f"the kernels' zygote exited (status {self.process.wait()})")
        return int(reply)

    def stop(self) -> None:
        self.process.stdin.close()  # its loop ends
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.replies.close()


_lock = threading.Lock()
_zygote: Zygote | None = None


def _fork(argv: list[str], cwd: str, env: dict) -> int:
    """Fork a kernel from the zygote started with `env` (a new one when the environment changed)."""
    global _zygote
    with _lock:
        if _zygote is not None:
            _zygote.timer.cancel()
            if _zygote.env != _lasting(env) or _zygote.process.poll() is not None:
                _zygote.stop()
                _zygote = None
        if _zygote is None:
            _zygote = Zygote(_lasting(env))
        pid = _zygote.fork(argv, cwd, env)
        _zygote.timer = threading.Timer(IDLE_SECONDS, _stop, args=(_zygote,))
        _zygote.timer.daemon = True
        _zygote.timer.start()
        return pid


# Set anew for every submission (trusted_grading.py's hand-in folder): the kernel gets it, and the
# zygote, which serves every submission, is not started again for it.
PER_SUBMISSION = ("TFMLIB_GRADE_OUT",)


def _lasting(env: dict) -> dict:
    return {key: value for key, value in env.items() if key not in PER_SUBMISSION}


def _stop(zygote: Zygote | None = None) -> None:
    """Stop the zygote (only `zygote`, when given: the idle timer's own)."""
    global _zygote
    with _lock:
        if _zygote is None or (zygote is not None and _zygote is not zygote):
            return
        _zygote.timer.cancel()
        _zygote.stop()
        _zygote = None


atexit.register(_stop)


class Forked:
    """The few things of subprocess.Popen that a provisioner asks of a kernel forked by the
    zygote (its parent, which waits for it: its exit status is not known here)."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                self.returncode = 0
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def _is_this_python_kernel(cmd: list[str]) -> bool:
    executable = shutil.which(cmd[0]) or cmd[0]
    return cmd[1:3] == ["-m", "ipykernel_launcher"] and \
        os.path.realpath(executable) == os.path.realpath(sys.executable)


class ForkProvisioner(LocalProvisioner):
    """Launches an IPython kernel of this Python as a fork of the zygote; any other the usual way."""

    async def launch_kernel(self, cmd: list[str], **kw):
        if not _is_this_python_kernel(cmd):
            return await super().launch_kernel(cmd, **kw)
        self.cwd = kw.get("cwd") or os.getcwd()
        self.pid = self.pgid = _fork(cmd[3:], str(self.cwd), dict(kw.get("env") or os.environ))
        self.process = Forked(self.pid)
        self.log.info("Kernel %d forked, its imports done (warm_kernels.py)", self.pid)
        return self.connection_info


class ForkKernelManager(AsyncKernelManager):
    """nbclient's kernel manager, with ForkProvisioner."""

    async def _async_pre_start_kernel(self, **kw):
        if self.provisioner is None:
            self.kernel_id = self.kernel_id or kw.pop("kernel_id", None) or os.urandom(16).hex()
            self.provisioner = ForkProvisioner(kernel_id=self.kernel_id, kernel_spec=self.kernel_spec,
                                               parent=self)
        return await super()._async_pre_start_kernel(**kw)


class WarmExecute(Execute):
    """nbgrader's Execute, with ForkKernelManager unless `warm` is False."""

    warm = Bool(True, help="Fork each submission's kernel from one that has the course's imports "
                "done (teacher/warm_kernels.py).").tag(config=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if self.warm and self.kernel_manager_class is AsyncKernelManager:
            self.kernel_manager_class = ForkKernelManager


def autograde_preprocessors() -> list:
    """nbgrader autograde's own preprocessors, WarmExecute in place of Execute."""
    from nbgrader.converters.autograde import Autograde
    return [WarmExecute if step is Execute else step
            for step in Autograde.class_traits()["autograde_preprocessors"].default()]
