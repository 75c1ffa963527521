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

Every kernel of a submission, forked or not, runs in a sandbox made by bubblewrap (`bwrap`,
Debian's package `bubblewrap`; `make teacher` installs it): a user namespace where it is the
user nobody, with no network, a private /tmp, the Python environment and tfmlib read-only, and
nothing else of the machine's files but a folder of its own (SANDBOX_OUT, below), in a PID
namespace of its own, with limits on memory and processes. When its grading ends, the sandbox is
killed, and every process the submission started with it: a double fork or `setsid` does not get
out of a PID namespace. The course folder, the gradebook, the exchange, the other submissions and
the grading account's home are not in the sandbox at all. A forked kernel keeps its imports: it
is forked outside the sandbox and joins the sandbox's namespaces (setns(2), as `nsenter` does)
before it runs a line of the submission, and drops every capability there.
`--WarmExecute.sandbox=False` turns the sandbox off (for a comparison only: then a submission can
do anything the grading account can).
"""
from __future__ import annotations

import atexit
import importlib.util
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import LocalProvisioner
from nbgrader.preprocessors import Execute
from traitlets import Bool, Int

IDLE_SECONDS = 300  # a zygote unused this long exits (Formgrader's process outlives a grading run)

# The zygote: imports what every notebook of the course imports, then forks one kernel per
# request line {"argv", "cwd", "env", "sandbox"} on stdin, and answers each with the kernel's pid.
# With "sandbox" (the pid of a bubblewrap sandbox's first process, its log file and limits), the
# fork joins that sandbox's namespaces and forks the kernel inside its PID namespace; the fork
# stays outside, waits for the kernel and answers with its pid.
ZYGOTE = r'''
import ctypes, importlib, json, os, resource, signal, sys
os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")  # as ipykernel sets it
for name in ("numpy", "torch", "torch.nn.functional", "matplotlib.pyplot", "ipywidgets",
             "tfmlib", "tfmlib.exercises", "tfmlib.viz"):
    try:
        importlib.import_module(name)
    except Exception:
        pass  # then the notebook imports it itself, and shows the error where it always did
import ipykernel.kernelapp, ipykernel_launcher
libc = ctypes.CDLL(None, use_errno=True)
NAMESPACES = (("user", 0x10000000), ("mnt", 0x00020000), ("ipc", 0x08000000), ("uts", 0x04000000),
              ("net", 0x40000000), ("pid", 0x20000000))

def join(sandbox_pid):
    """setns(2) into every namespace of the sandbox's first process (the PID namespace then holds
    this process's children)."""
    opened = [(os.open(f"/proc/{sandbox_pid}/ns/{name}", os.O_RDONLY), flag) for name, flag in NAMESPACES]
    left = opened
    while left:  # in the order the kernel allows: the user namespace first, unless run as root
        failed = [(fd, flag) for fd, flag in left if libc.setns(fd, flag) != 0]
        if len(failed) == len(left):
            raise OSError(ctypes.get_errno(), "setns into the sandbox")
        left = failed
    for fd, _ in opened:
        os.close(fd)

class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

class CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

def confine(limits):
    """No capability left (joining the user namespace gave them all), none to gain by exec, limits."""
    if libc.capset(ctypes.byref(CapHeader(0x20080522, 0)), (CapData * 2)()) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl")
    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), (value, value))

replies = os.fdopen(int(sys.argv[1]), "w", buffering=1)
signal.signal(signal.SIGINT, signal.SIG_IGN)   # a Ctrl-C in the grader's terminal is the grader's
def reap(signum, frame):  # waited for, the kernels' CPU time counts in the grader's own
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
signal.signal(signal.SIGCHLD, reap)
prepared = set()

def prepare(cwd):
    """Derive the cases of the exercises of the notebook graded in `cwd` (nbgrader runs each one
    in autograded/STUDENT/NOTEBOOK) once, here: every kernel forked after inherits them, instead
    of deriving them again (about a second, and 2-3 s more for the first TorchDispatchMode's
    imports, which core's work count enters) in each submission's kernel."""
    notebook = os.path.basename(os.path.normpath(cwd))
    if notebook in prepared or "tfmlib.exercises" not in sys.modules:
        return
    prepared.add(notebook)
    import torch
    from tfmlib.exercises.tracker import REGISTRY, notebook_of
    # On one thread: a fork of a process whose OpenMP pool has started hangs at its own first
    # parallel operation (measured: a matmul in the kernel never returns).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for exercise in REGISTRY.values():
            if notebook_of(exercise) == notebook:
                try:
                    exercise.cases()
                except Exception:
                    pass  # the kernel derives them again, and its check reports what went wrong
    finally:
        torch.set_num_threads(threads)

for line in sys.stdin:
    request = json.loads(line)
    sandbox = request.get("sandbox")
    prepare(request["cwd"])
    pid = os.fork()
    if pid:
        if not sandbox:
            replies.write(f"{pid}\n")
        continue
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if sandbox:
        try:
            join(sandbox["pid"])
            pid = os.fork()
        except OSError as error:
            replies.write(f"error {error}\n")
            os._exit(1)
        if pid:  # outside the sandbox's PID namespace: answer, wait for the kernel, go
            replies.write(f"{pid}\n")
            replies.close()
            os._exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) & 0xFF)
    # The kernel: as `python -m ipykernel_launcher ...` would have started, but for the imports.
    replies.close()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.setsid()  # a process group of its own, which the grader interrupts or kills
    sys.stdin = open(os.devnull)
    os.dup2(sys.stdin.fileno(), 0)
    if sandbox:
        confine(sandbox["limits"])
        log = os.open(sandbox["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 1)  # not the grader's terminal
        os.dup2(log, 2)
        os.closerange(3, 65536)  # nothing of the zygote's left open (its pipes, the namespaces)
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

    def fork(self, argv: list[str], cwd: str, env: dict, sandbox: dict | None) -> int:
        """A new kernel process, its pid; waits for the zygote's imports the first time."""
        self.process.stdin.write(json.dumps({"argv": argv, "cwd": cwd, "env": env, "sandbox": sandbox}) + "\n")
        self.process.stdin.flush()
        reply = self.replies.readline()
        if not reply:
            raise RuntimeError(f"the kernels' zygote exited (status {self.process.wait()})")
        if reply.startswith("error"):
            raise RuntimeError(f"the kernel could not enter its sandbox: {reply[6:].strip()}")
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


def _fork(argv: list[str], cwd: str, env: dict, sandbox: dict | None = None) -> int:
    """Fork a kernel from the zygote started with `env` (a new one when the environment changed),
    into `sandbox` when given."""
    global _zygote
    with _lock:
        if _zygote is not None:
            _zygote.timer.cancel()
            if _zygote.env != _zygote_env(env) or _zygote.process.poll() is not None:
                _zygote.stop()
                _zygote = None
        if _zygote is None:
            _zygote = Zygote(_zygote_env(env))
        pid = _zygote.fork(argv, cwd, env, sandbox)
        _zygote.timer = threading.Timer(IDLE_SECONDS, _stop, args=(_zygote,))
        _zygote.timer.daemon = True
        _zygote.timer.start()
        return pid


def _zygote_env(env: dict) -> dict:
    """A kernel's environment less what differs from one submission to the next."""
    return {name: value for name, value in env.items() if name not in PER_SUBMISSION}


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
    zygote (its parent, or in a sandbox a fork of the zygote, waits for it: its exit status is not
    known here)."""

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


# ---- the sandbox ---------------------------------------------------------------------------------

BWRAP = "bwrap"
# The environment variable that names the submission's own writable folder inside the sandbox
# (the same path outside it): what the graded cells hand back to the grader goes there.
OUT_VARIABLE = "TFMLIB_GRADE_OUT"

# What differs from one submission's kernel environment to the next: the hand-in folder; and a
# variable torch sets in the grader's own process, whose environment the kernels inherit, when the
# first verdict's check imports torch._inductor (else the second submission started a new zygote,
# and its imports and cases again: 4.5 s a submission unsandboxed, against 2 s).
PER_SUBMISSION = (OUT_VARIABLE, "TORCHINDUCTOR_CACHE_DIR")

# What of the grader's environment a submission's kernel gets: no token, no home, no path of the
# grading account's (a hub service's JUPYTERHUB_API_TOKEN, for one, must not reach it).
KEPT_VARIABLES = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                  "ATEN_CPU_CAPABILITY", "MKL_CBWR", "MPLBACKEND", "PYDEVD_DISABLE_FILE_VALIDATION")
NOBODY = 65534


def sandbox_env(env: dict, folder: Path) -> dict:
    """The kernel's environment: the harmless part of `env`, the course's TFMLIB_ settings, and a
    home, IPython's and matplotlib's folders in the sandbox's private /tmp."""
    kept = {name: value for name, value in env.items() if name in KEPT_VARIABLES or name.startswith("TFMLIB_")}
    return {**kept, "HOME": "/tmp", "IPYTHONDIR": "/tmp/ipython", "MPLCONFIGDIR": "/tmp/matplotlib",
            OUT_VARIABLE: str(folder / "out")}


def readable_paths() -> list[str]:
    """What a kernel must read: this Python and its environment, and the tfmlib package (its folder
    alone: with an editable install, the checkout around it holds the teacher's course)."""
    spec = importlib.util.find_spec("tfmlib")
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    if spec is not None and spec.origin:
        paths.add(str(Path(spec.origin).parent))
    return sorted(path for path in paths if os.path.isdir(path))


def bwrap_args(folder: Path, cwd: str | None) -> list[str]:
    """bubblewrap's options for one submission: every namespace of its own (user, PID, network,
    IPC, UTS, cgroup), the user nobody, the system's programs and libraries and this Python
    read-only, /dev's harmless devices, a private /tmp, and read-write only `folder`. No --dev (it
    would need a second user namespace, which a kernel could not join) and no --new-session (the
    grader interrupts a cell through the kernel's process group)."""
    args = [BWRAP, "--unshare-all", "--die-with-parent", "--uid", str(NOBODY), "--gid", str(NOBODY),
            "--hostname", "sandbox", "--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):  # merged /usr: links; otherwise folders
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for path in ("/etc/ld.so.cache", "/etc/passwd", "/etc/group", "/etc/localtime", "/etc/nsswitch.conf"):
        args += ["--ro-bind-try", path, path]
    # The private /tmp first: a Python or a checkout that lives under /tmp (a CI clone) is bound
    # onto it afterwards, where a tmpfs mounted later would hide it.
    args += ["--proc", "/proc", "--tmpfs", "/dev/shm", "--tmpfs", "/tmp"]
    for path in readable_paths():
        args += ["--ro-bind", path, path]
    for device in ("null", "zero", "full", "random", "urandom"):
        args += ["--dev-bind", f"/dev/{device}", f"/dev/{device}"]
    if cwd is not None:
        args += ["--ro-bind", cwd, cwd]
    return args + ["--bind", str(folder), str(folder)]


def submission_folder(cwd: str, folder: Path) -> str | None:
    """The folder nbgrader runs a submission in (autograded/<student>/<assignment>/), to be shown
    read-only to its kernel; None when it holds more than that submission: the grader's own folder
    or one above it (the course root, with the gradebook), or the sandbox's own."""
    cwd = os.path.realpath(cwd)
    here = os.path.realpath(os.getcwd())
    if not os.path.isdir(cwd) or os.path.commonpath([cwd, here]) == cwd \
            or os.path.commonpath([cwd, str(folder)]) == cwd:
        return None
    return cwd


class Sandbox:
    """One submission's sandbox: its folder on the grader's side (the connection file, the kernel's
    sockets and log, and `out/`), and for a forked kernel a bubblewrap process that holds the
    namespaces until the grading ends (`cat`, as PID 1 of the sandbox's PID namespace)."""

    root: Path | None = None  # every sandbox folder of this grading command, removed at its end

    def __init__(self):
        if Sandbox.root is None:
            Sandbox.root = Path(tempfile.mkdtemp(prefix="tfmlib-grading-"))
            atexit.register(shutil.rmtree, Sandbox.root, True)
        self.folder = Path(tempfile.mkdtemp(prefix="submission-", dir=Sandbox.root))
        (self.folder / "out").mkdir()
        self.holder: subprocess.Popen | None = None

    def hold(self, cwd: str | None) -> int:
        """Start the sandbox's first process; its pid, whose namespaces a forked kernel joins."""
        info_read, info_write = os.pipe()
        self.holder = subprocess.Popen(
            [*bwrap_args(self.folder, cwd), "--as-pid-1", "--info-fd", str(info_write), "--",
             "sh", "-c", "echo ready; exec cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, pass_fds=(info_write,), env={"PATH": "/usr/bin:/bin"})
        os.close(info_write)
        with os.fdopen(info_read) as info:
            text = info.read()
        if self.holder.stdout.readline() != b"ready\n":  # its mounts are in place once it runs `sh`
            raise RuntimeError(f"bubblewrap could not make the sandbox: {self.holder.stderr.read().decode().strip()}")
        return json.loads(text[:text.index("}") + 1])["child-pid"]

    def close(self) -> None:
        """Kill the sandbox, and with its PID namespace every process of the submission."""
        if self.holder is not None:
            self.holder.kill()
            self.holder.wait()
            self.holder.stdin.close()
            self.holder.stdout.close()
            self.holder.stderr.close()
            self.holder = None


def check_bubblewrap() -> None:
    """Fail early, and say what to do, where bubblewrap is missing or cannot make a sandbox."""
    if shutil.which(BWRAP) is None:
        raise RuntimeError("the grading sandbox needs bubblewrap (`bwrap`), which is not installed: "
                           "`sudo apt-get install bubblewrap` (or `make teacher`, which does it), "
                           "or grade without a sandbox, at your own risk: --WarmExecute.sandbox=False")
    done = subprocess.run([BWRAP, "--unshare-all", "--ro-bind", "/", "/", "--", "true"], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise RuntimeError(f"bubblewrap cannot make a sandbox here: {done.stderr.strip()} (it needs "
                           "unprivileged user namespaces: on Ubuntu 24.04, Debian's sysctl "
                           "kernel.unprivileged_userns_clone=1; see the teacher's guide, section 5)")


def _set_limits(limits: dict) -> None:
    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), (value, value))


# ---- the kernels ---------------------------------------------------------------------------------

class CourseProvisioner(LocalProvisioner):
    """Launches a kernel as the course grades: forked from the zygote (`warm`, for an IPython
    kernel of this Python), in a sandbox (`sandbox`), or both; `KernelManager.transport` is then
    "ipc": the kernel has no network, and talks to the grader through sockets in its folder."""

    warm = True
    sandbox = True
    limits: dict = {}

    latest: Path | None = None  # the folder of the last sandbox made, for WarmExecute

    async def pre_launch(self, **kw):
        self.box = Sandbox() if self.sandbox else None
        if self.box is not None:
            CourseProvisioner.latest = self.box.folder
            self.parent.transport = "ipc"
            self.parent.ip = str(self.box.folder / "kernel")
            self.parent.connection_file = str(self.box.folder / "kernel.json")
        return await super().pre_launch(**kw)

    async def launch_kernel(self, cmd: list[str], **kw):
        self.cwd = kw.get("cwd") or os.getcwd()
        env = dict(kw.get("env") or os.environ)
        shown = cwd = str(self.cwd)
        if self.box is not None:
            env = sandbox_env(env, self.box.folder)
            shown = submission_folder(cwd, self.box.folder)
            cwd = shown or str(self.box.folder)
        if self.warm and _is_this_python_kernel(cmd):
            sandbox = None
            if self.box is not None:
                sandbox = {"pid": self.box.hold(shown), "log": str(self.box.folder / "kernel.log"),
                           "limits": self.limits}
            self.pid = self.pgid = _fork(cmd[3:], cwd, env, sandbox)
            self.process = Forked(self.pid)
            self.log.info("Kernel %d forked, its imports done (warm_kernels.py)%s", self.pid,
                          ", in its sandbox" if sandbox else "")
            return self.connection_info
        if self.box is None:
            return await super().launch_kernel(cmd, **kw)
        # A cell that runs too long is interrupted by a message on the control channel, which the
        # kernel turns into its own SIGINT: a signal to the process group would reach bubblewrap
        # first, whose death (--die-with-parent) takes the kernel with it.
        self.parent.kernel_spec.interrupt_mode = "message"
        log = open(self.box.folder / "kernel.log", "ab")  # not the grader's terminal
        # Not RLIMIT_NPROC here: bubblewrap itself would count the grading account's processes.
        limits = {name: value for name, value in self.limits.items() if name != "RLIMIT_NPROC"}
        kw.update(env=env, stdout=log, stderr=log, preexec_fn=lambda: _set_limits(limits))
        # the launcher names the grader as the kernel's parent: no such pid in the sandbox
        sandboxed = [*bwrap_args(self.box.folder, shown), "--unsetenv", "JPY_PARENT_PID", "--chdir", cwd, "--", *cmd]
        info = await super().launch_kernel(sandboxed, **kw)
        log.close()
        self.log.info("Kernel %d started in its sandbox", self.pid)
        return info

    async def cleanup(self, restart: bool = False) -> None:
        await super().cleanup(restart)
        if self.box is not None and not restart:
            if self.process is not None and self.process.poll() is None:
                await self.kill()
            self.box.close()


class CourseKernelManager(AsyncKernelManager):
    """nbclient's kernel manager, with CourseProvisioner."""

    provisioner_settings: dict = {}

    async def _async_pre_start_kernel(self, **kw):
        if self.provisioner is None:
            self.kernel_id = self.kernel_id or kw.pop("kernel_id", None) or os.urandom(16).hex()
            self.provisioner = CourseProvisioner(kernel_id=self.kernel_id, kernel_spec=self.kernel_spec,
                                                 parent=self)
            for name, value in self.provisioner_settings.items():
                setattr(self.provisioner, name, value)
        return await super()._async_pre_start_kernel(**kw)


def kernel_manager(warm: bool = True, sandbox: bool = True, limits: dict | None = None) -> type:
    """A CourseKernelManager class that forks (`warm`) and sandboxes (`sandbox`) as asked."""
    return type("CourseKernelManager", (CourseKernelManager,),
                {"provisioner_settings": {"warm": warm, "sandbox": sandbox, "limits": limits or {}}})


ForkKernelManager = kernel_manager(warm=True, sandbox=False)  # forked, not sandboxed (tests, benchmarks)


class WarmExecute(Execute):
    """nbgrader's Execute, with each kernel forked (unless `warm` is False) and sandboxed (unless
    `sandbox` is False)."""

    warm = Bool(True, help="Fork each submission's kernel from one that has the course's imports "
                "done (teacher/warm_kernels.py).").tag(config=True)
    sandbox = Bool(True, help="Run each submission's kernel in a bubblewrap sandbox: no network, no "
                   "file of the course, its processes killed when its grading ends.").tag(config=True)
    memory_limit = Int(4 << 30, help="Bytes of address space a submission's kernel may map (torch "
                       "maps 0.7 GB on import).").tag(config=True)
    process_limit = Int(256, help="Processes and threads a submission may run at once.").tag(config=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if self.sandbox:
            check_bubblewrap()
        if (self.warm or self.sandbox) and self.kernel_manager_class is AsyncKernelManager:
            self.kernel_manager_class = kernel_manager(
                self.warm, self.sandbox, {"RLIMIT_AS": self.memory_limit, "RLIMIT_NPROC": self.process_limit})

    def preprocess(self, nb, resources=None, km=None):
        """Execute, and tell the preprocessors after this one where the submission's sandbox folder
        was: resources["tfmlib_grade_out"], the host path of its TFMLIB_GRADE_OUT (None without a
        sandbox); it stays until the grading command ends."""
        CourseProvisioner.latest = None
        nb, resources = super().preprocess(nb, resources, km=km)
        latest = CourseProvisioner.latest
        resources["tfmlib_grade_out"] = None if latest is None else str(latest / "out")
        return nb, resources


def autograde_preprocessors() -> list:
    """nbgrader autograde's own preprocessors, WarmExecute in place of Execute."""
    from nbgrader.converters.autograde import Autograde
    return [WarmExecute if step is Execute else step
            for step in Autograde.class_traits()["autograde_preprocessors"].default()]
