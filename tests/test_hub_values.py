"""`make hub-values-check CHART=...` (hub/check_values.py): the values checked against a chart's schema.

The Zero to JupyterHub chart cannot be fetched here (no network), so each test writes a small
chart of its own with a values.schema.yaml in the chart's style (unknown keys forbidden, typed
values), as a folder and as the .tgz `helm pull` saves, and runs the command as the Makefile
does, with the teachers' environment (.venv-teacher, where jsonschema and PyYAML are pinned).
"""
from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
TEACHER_BIN = Path(os.environ.get("TFMLIB_TEACHER_VENV", REPO / ".venv-teacher")) / "bin"

SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "hub": {"type": "object", "additionalProperties": False,
                "properties": {"config": {"type": "object"}}},
        "singleuser": {"type": "object", "additionalProperties": False, "properties": {
            "defaultUrl": {"type": "string"},
            "cpu": {"type": "object", "additionalProperties": False,
                    "properties": {"guarantee": {"type": ["number", "null"]}, "limit": {"type": ["number", "null"]}}},
        }},
    },
}
VALID = {"hub": {"config": {"JupyterHub": {"authenticator_class": "generic-oauth"}}},
         "singleuser": {"defaultUrl": "/lab", "cpu": {"guarantee": 0.2, "limit": 1}}}


def chart(tmp_path: Path, packed: bool) -> Path:
    """A chart folder `jupyterhub/` with SCHEMA as its values.schema.yaml, or its .tgz."""
    folder = tmp_path / "jupyterhub"
    folder.mkdir()
    (folder / "Chart.yaml").write_text("name: jupyterhub\nversion: 0.0.1\n")
    (folder / "values.schema.yaml").write_text(yaml.safe_dump(SCHEMA))
    if not packed:
        return folder
    archive = tmp_path / "jupyterhub-0.0.1.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname="jupyterhub")
    return archive


def check(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    if not (TEACHER_BIN / "python").exists():
        pytest.fail(f"no {TEACHER_BIN / 'python'}: run `make teacher` first")
    return subprocess.run([str(TEACHER_BIN / "python"), str(REPO / "hub" / "check_values.py"), *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


def values_file(tmp_path: Path, values: dict) -> str:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return str(path)


@pytest.mark.parametrize("packed", [False, True], ids=["folder", "tgz"])
def test_values_that_follow_the_charts_schema_pass(tmp_path, packed):
    done = check(tmp_path, str(chart(tmp_path, packed)), values_file(tmp_path, VALID))
    assert done.returncode == 0 and "valid for the chart" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("packed", [False, True], ids=["folder", "tgz"])
def test_a_misspelt_key_and_a_value_of_the_wrong_type_are_each_reported(tmp_path, packed):
    wrong = {"hub": VALID["hub"], "singleuser": {"defaultURL": "/lab", "cpu": {"guarantee": "0.2 cores"}}}
    done = check(tmp_path, str(chart(tmp_path, packed)), values_file(tmp_path, wrong))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "singleuser: Additional properties are not allowed ('defaultURL' was unexpected)" in done.stdout
    assert "singleuser.cpu.guarantee: '0.2 cores' is not of type 'number', 'null'" in done.stdout
    assert "2 problem(s)" in done.stdout


def test_without_a_chart_the_command_says_how_to_get_one(tmp_path):
    done = check(tmp_path)
    assert done.returncode == 2 and "helm pull jupyterhub/jupyterhub --version 4.3.3" in done.stderr, done.stderr
    not_a_chart = tmp_path / "empty"
    not_a_chart.mkdir()
    done = check(tmp_path, str(not_a_chart))
    assert done.returncode == 2 and "no values.schema.yaml" in done.stderr, done.stderr
