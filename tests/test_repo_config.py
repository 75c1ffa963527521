"""Checks that the repository's install files agree with each other.

requirements.txt (local install and CI), binder/requirements.txt (mybinder.org)
and pyproject.toml (the tfmlib package) are edited by hand; these tests catch
them drifting apart, e.g. a version bumped in one file but not the other.
"""

import os
import re
import subprocess
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "requirements.txt"
BINDER_REQUIREMENTS = ROOT / "binder" / "requirements.txt"
PYPROJECT = ROOT / "pyproject.toml"

TORCH_VERSION = "2.13.0"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
EDITABLE_SELF = "-e ."


def lines(path):
    """Non-empty lines of a requirements file, comments removed."""
    out = []
    for line in path.read_text().splitlines():
        line = re.sub(r"(^|\s)#.*", "", line).strip()
        if line:
            out.append(line)
    return out


def pins(path):
    """{canonical name: Requirement} for the package lines (not the options)."""
    result = {}
    for line in lines(path):
        if line.startswith("-"):  # -e ., --extra-index-url, -r ...
            continue
        req = Requirement(line)
        name = canonicalize_name(req.name)
        assert name not in result, f"{path.name}: {req.name} is listed twice"
        result[name] = req
    return result


def pinned_version(req, path):
    """The version of an exact `name==X` pin; fails for any other specifier."""
    specs = list(req.specifier)
    assert len(specs) == 1 and specs[0].operator == "==", (
        f"{path.relative_to(ROOT)}: {req} must be an exact pin (name==version)"
    )
    return Version(specs[0].version)


def test_requirements_are_exact_pins():
    for req in pins(REQUIREMENTS).values():
        pinned_version(req, REQUIREMENTS)
    for req in pins(BINDER_REQUIREMENTS).values():
        pinned_version(req, BINDER_REQUIREMENTS)


def test_torch_pinned_in_requirements():
    # An unpinned or newer torch resolves to a multi-GB CUDA build.
    reqs = pins(REQUIREMENTS)
    assert "torch" in reqs, "requirements.txt must pin torch"
    assert str(pinned_version(reqs["torch"], REQUIREMENTS)) == TORCH_VERSION, (
        f"requirements.txt must pin torch=={TORCH_VERSION}, found {reqs['torch']}"
    )


def test_binder_and_requirements_pin_the_same_versions():
    local, binder = pins(REQUIREMENTS), pins(BINDER_REQUIREMENTS)
    extra = sorted(set(binder) - set(local))
    assert not extra, f"binder/requirements.txt has packages missing from requirements.txt: {extra}"
    mismatched = []
    for name in sorted(set(local) & set(binder)):
        v_local = pinned_version(local[name], REQUIREMENTS)
        v_binder = pinned_version(binder[name], BINDER_REQUIREMENTS)
        # Compare public versions: binder's torch is "2.13.0+cpu", the same
        # release as "2.13.0" from the CPU wheel index.
        if v_local.public != v_binder.public:
            mismatched.append(f"{name}: requirements.txt {v_local} vs binder {v_binder}")
    assert not mismatched, "versions differ:\n" + "\n".join(mismatched)


def test_binder_uses_cpu_only_torch():
    index_urls = [
        match.group(1).rstrip("/")
        for line in lines(BINDER_REQUIREMENTS)
        if (match := re.fullmatch(r"--(?:extra-)?index-url[ =]\s*(\S+)", line))
    ]
    assert CPU_INDEX in index_urls, (
        f"binder/requirements.txt must use PyTorch's CPU index: --extra-index-url {CPU_INDEX}"
    )
    torch = pins(BINDER_REQUIREMENTS).get("torch")
    assert torch is not None, "binder/requirements.txt must pin torch"
    version = pinned_version(torch, BINDER_REQUIREMENTS)
    assert version.public == TORCH_VERSION and version.local in (None, "cpu"), (
        f"binder must pin torch=={TORCH_VERSION}+cpu, found {torch}"
    )


def test_binder_python_version():
    # numpy, ipython and ipykernel as pinned need Python >= 3.11; without
    # runtime.txt repo2docker picks its own default Python.
    runtime = (ROOT / "binder" / "runtime.txt").read_text().strip()
    match = re.fullmatch(r"python-3\.(\d+)", runtime)
    assert match and int(match.group(1)) >= 11, f"binder/runtime.txt says {runtime!r}"


def test_tfmlib_installed_editable_everywhere():
    project = tomllib.loads(PYPROJECT.read_text())
    assert project["project"]["name"] == "tfmlib"
    find = project["tool"]["setuptools"]["packages"]["find"]
    assert "tfmlib*" in find["include"]

    # requirements.txt installs tfmlib from this checkout, editable, last.
    assert lines(REQUIREMENTS)[-1] == EDITABLE_SELF, (
        f"the last line of requirements.txt must be {EDITABLE_SELF!r}"
    )
    # Binder: in binder/requirements.txt, or in binder/postBuild.
    post_build = ROOT / "binder" / "postBuild"
    assert EDITABLE_SELF in lines(BINDER_REQUIREMENTS) or (
        post_build.exists() and "pip install -e ." in post_build.read_text()
    ), "binder must install tfmlib with -e ."


def test_pyproject_dependencies_satisfied_by_pins():
    # tfmlib's own (loose) dependencies must accept the versions the course pins.
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    local = pins(REQUIREMENTS)
    for dep in map(Requirement, project["dependencies"]):
        name = canonicalize_name(dep.name)
        assert name in local, f"pyproject depends on {dep.name}, requirements.txt does not pin it"
        version = pinned_version(local[name], REQUIREMENTS)
        assert dep.specifier.contains(version, prereleases=True), (
            f"pyproject wants {dep}, requirements.txt pins {version}"
        )


def test_make_test_times_each_stage_only_when_asked():
    # make test-timed (benchmarks/test_time.sh) sets STAGE_TIME; nobody else pays for /usr/bin/time
    untimed = {key: value for key, value in os.environ.items() if key != "STAGE_TIME"}
    plain = subprocess.run(["make", "-n", "-B", "test"], cwd=ROOT, capture_output=True, text=True,
                           check=True, env=untimed).stdout
    timed = subprocess.run(["make", "-n", "-B", "test", "STAGE_TIME=1"], cwd=ROOT, capture_output=True,
                           text=True, check=True, env=untimed).stdout
    assert "/usr/bin/time" not in plain
    assert set(re.findall(r"'STAGE ([^:]+):", timed)) == {"installs", "unit + browser", "notebooks",
                                                          "other CPU kernels"}
    # .ci/run's hub test after it: its installs are its own, not make test's
    hub = subprocess.run(["make", "-n", "-B", "hub-test", "STAGE_TIME=1"], cwd=ROOT, capture_output=True,
                         text=True, check=True, env=untimed).stdout
    assert {"hub installs", "hub"} <= set(re.findall(r"'STAGE ([^:]+):", hub)) <= {"installs", "hub installs", "hub"}


def test_make_test_spreads_the_tests_over_the_cores_and_lists_the_slowest():
    # -n needs pytest-xdist in the course's environment; --durations prints where the time goes.
    assert "pytest-xdist" in pins(REQUIREMENTS)
    printed = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
    unit, notebooks, other_cpu = [line for line in printed.splitlines() if " -m pytest" in line]
    assert "--nbval" not in unit and "-n auto" in unit and "--dist loadgroup" in unit
    assert "--nbval" in notebooks and "--dist loadscope" in notebooks  # a notebook's cells on one worker
    # every English notebook, and the Chinese 01 for their folder (tests/test_i18n.py says why only it)
    stored = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))]
    assert set(stored + ["notebooks/bonus", "notebooks/zh/01_shapes.ipynb"]) <= set(notebooks.split())
    assert "--durations=" in unit and "--durations=" in notebooks
    # the notebooks that train, a second time with other CPU kernels (tests/test_claims.py)
    assert "ATEN_CPU_CAPABILITY=default" in other_cpu and "MKL_CBWR=COMPATIBLE" in other_cpu
    assert "--nbval" in other_cpu and "10_training.ipynb" in other_cpu and "bonus" in other_cpu
