"""Shared fixtures of the unit tests of tfmlib.

The tests compare tfmlib with PyTorch's own implementations in float64 on small,
awkward sizes (odd batch, Lq != Lk, d_v != d_k), so that a wrong axis or a wrong
scale cannot hide behind a square shape or behind float32 rounding.
"""
import contextlib
import json
import os
import resource
import tempfile

import psutil
import pytest
import torch

# check() records a learner's answers in a progress file (tfmlib.exercises.progress), by
# default in the home folder: a test run must never write there.
os.environ["TFMLIB_PROGRESS"] = os.path.join(tempfile.mkdtemp(prefix="tfmlib-test-progress-"),
                                             "progress.json")

# The run cache (tfmlib/_runcache.py, set by make test) lets nbval load what the notebooks trained
# in the browser test. The unit tests must train for real (some compare two ways of training), so
# it leaves their environment here and goes to the browser test's JupyterLab alone
# (tests/browser/conftest.py). xdist's workers inherit the moved variable.
if "TFMLIB_RUN_CACHE" in os.environ:
    os.environ["TFMLIB_BROWSER_RUN_CACHE"] = os.environ.pop("TFMLIB_RUN_CACHE")

# The tests run on a small shared CPU: one intra-op thread per process is much
# faster for these tiny tensors than several threads fighting over two cores
# (measured: the training test takes ~13 s with 1 thread, ~45 s with 2).
torch.set_num_threads(1)

# Every device this machine has. Nothing is skipped on a CPU-only machine: the
# device-parametrized tests simply run on the CPU alone there.
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


# Files whose tests share one expensive module- or session-scoped fixture (a JupyterLab server
# and Chromium; nbgrader's autograded gradebook; the cold and warm gradings of the warm kernels; the
# sandbox's round trip as Unix accounts; the built website): under pytest-xdist's `--dist loadgroup`
# (make test) each file's tests run on one worker, so it is built once, not once per worker.
ONE_WORKER_FILES = {"test_notebooks_in_browser.py": "browser", "test_nbgrader.py": "nbgrader",
                    "test_warm_kernels.py": "warm_kernels", "test_grading_sandbox.py": "grading_sandbox",
                    "test_site.py": "site"}


# tryfirst: xdist writes each test's group into its node id in a hook of the same name, which
# a worker registers after this file, so it would otherwise run first and see no group.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        group = ONE_WORKER_FILES.get(item.path.name)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's
def pytest_xdist_node_collection_finished(node, ids):
    """Under --dist loadgroup, xdist must have written each group into its tests' node ids; when it
    does not (it silently stopped with pytest 9.2), the expensive fixtures are built once per
    worker and nothing says why: stop instead."""
    if node.config.getvalue("dist") != "loadgroup":
        return
    for nodeid in ids:
        group = ONE_WORKER_FILES.get(nodeid.split("::")[0].rsplit("/", 1)[-1])
        if group is not None and not nodeid.endswith(f"@{group}"):
            pytest.exit(f"pytest-xdist did not put {nodeid} in its group {group!r} (--dist loadgroup): "
                        "this pytest and this pytest-xdist do not work together; keep the versions "
                        "that requirements.txt pins", returncode=pytest.ExitCode.USAGE_ERROR)


# `make test-timed` sets TFMLIB_STAGE_CPU to a file: each process adds there the CPU time of each
# test file (setup, call and teardown of its tests), so that the report can name what a stage's
# time is spent on and split the one pytest call that runs the browser tests with the others.
# Counted with every live descendant (the Jupyter server, its kernels, Chromium), not only the
# reaped children: those live on across tests.
_FILE_CPU: dict[str, float] = {}


def _cpu_seconds() -> float:
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    for process in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):  # it ended in between
            times = process.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not os.environ.get("TFMLIB_STAGE_CPU"):
        return (yield)
    start = _cpu_seconds()
    try:
        return (yield)
    finally:
        path = item.nodeid.split("::")[0]
        _FILE_CPU[path] = _FILE_CPU.get(path, 0.0) + _cpu_seconds() - start


def pytest_sessionfinish(session):
    path = os.environ.get("TFMLIB_STAGE_CPU")
    if path and _FILE_CPU:
        with open(path, "a", encoding="utf-8") as file:
            file.write(json.dumps({"files": _FILE_CPU}) + "\n")


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    return torch.device(request.param)


@pytest.fixture
def gen() -> torch.Generator:
    """A fresh, seeded CPU generator: every test draws the same numbers every run."""
    return torch.Generator().manual_seed(1234)


@pytest.fixture
def f64():
    """Make a float64 tensor of the given shape with standard-normal entries."""
    generator = torch.Generator().manual_seed(4321)

    def make(*shape, device="cpu", requires_grad=False):
        x = torch.randn(*shape, generator=generator, dtype=torch.float64).to(device)
        return x.requires_grad_(requires_grad)

    return make
