"""Every notebook opens on Colab (and anywhere else) with one setup cell.

Colab opens a single .ipynb from GitHub, without the rest of the repository, so
`tfmlib` is not there. Each notebook's first code cell installs it from the repository
when, and only when, it is missing; everywhere the course is installed (`make course`,
Binder, a JupyterHub image) the cell does nothing and prints nothing.

These tests check that cell in every notebook, that it really is a no-op when `tfmlib`
is importable, what it runs when it is not, and that the README's Colab and Binder links
point at the same repository and at notebooks that exist.
"""
import importlib.util
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
README = ROOT / "README.md"

# The course's canonical repository (assumed; the README says so). Change it HERE only:
# the setup cell, the Colab badges and the Binder badge are all derived from it.
REPO_URL = "https://github.com/transformer-shape-first/course"
REPO_SLUG = REPO_URL.removeprefix("https://github.com/")
BRANCH = "main"

SETUP_CELL = f'''\
# Installs the course's library when it is missing (on Colab); does nothing elsewhere.
import importlib.util, subprocess, sys
if importlib.util.find_spec("tfmlib") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                    "git+{REPO_URL}.git"], check=True)'''


def colab_url(notebook: Path) -> str:
    return f"https://colab.research.google.com/github/{REPO_SLUG}/blob/{BRANCH}/notebooks/{notebook.name}"


BINDER_URL = (f"https://mybinder.org/v2/gh/{REPO_SLUG}/{BRANCH}"
              "?urlpath=lab/tree/notebooks/01_shapes.ipynb")


def first_code_cell(path: Path):
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            return cell
    pytest.fail(f"{path.name} has no code cell")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_code_cell_is_the_setup_cell(path):
    cell = first_code_cell(path)
    assert cell.source.rstrip() == SETUP_CELL, (
        f"{path.name}: the first code cell must be exactly the setup cell "
        f"(see tests/test_colab_setup.py), found:\n{cell.source}")
    assert cell.get("outputs") == [], (
        f"{path.name}: the setup cell has stored outputs; it must print nothing where "
        f"tfmlib is installed: {cell.outputs}")


def run_setup_cell(monkeypatch, *, installed: bool) -> list:
    """Run the setup cell's code here, with pip replaced by a recorder."""
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda *args, **kwargs: calls.append((args, kwargs)))
    if not installed:
        real_find_spec = importlib.util.find_spec
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a: None if name == "tfmlib" else real_find_spec(name, *a))
    exec(compile(SETUP_CELL, "<setup cell>", "exec"), {})
    return calls


def test_setup_cell_does_nothing_where_tfmlib_is_installed(monkeypatch):
    assert importlib.util.find_spec("tfmlib") is not None, "tfmlib must be installed to run the tests"
    assert run_setup_cell(monkeypatch, installed=True) == []


def test_setup_cell_installs_tfmlib_from_the_repository_where_missing(monkeypatch):
    calls = run_setup_cell(monkeypatch, installed=False)
    assert len(calls) == 1
    (command,), kwargs = calls[0]
    assert command == [sys.executable, "-m", "pip", "install", "-q", f"git+{REPO_URL}.git"]
    assert kwargs == {"check": True}  # a failed install stops the notebook at once


def test_readme_has_a_colab_badge_for_every_notebook():
    readme = README.read_text()
    missing = [p.name for p in NOTEBOOKS if f"({colab_url(p)})" not in readme]
    assert not missing, (f"README.md lacks an 'Open in Colab' link for {', '.join(missing)}; "
                         f"expected e.g. {colab_url(ROOT / 'notebooks' / missing[0])}")


def test_readme_colab_links_point_at_existing_notebooks():
    readme = README.read_text()
    prefix = f"https://colab.research.google.com/github/{REPO_SLUG}/blob/{BRANCH}/notebooks/"
    linked = {chunk.split(")", 1)[0] for chunk in readme.split(prefix)[1:]}
    existing = {p.name for p in NOTEBOOKS}
    assert linked <= existing, f"README.md links notebooks that do not exist: {sorted(linked - existing)}"


def test_readme_has_the_binder_badge():
    readme = README.read_text()
    assert f"({BINDER_URL})" in readme, f"README.md must link the Binder badge to {BINDER_URL}"
    assert "https://mybinder.org/badge_logo.svg" in readme
