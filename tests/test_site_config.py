"""The website's configuration, without building it (tests/browser/test_site.py builds and reads it):

* the GitHub Pages workflow builds with the same command as everyone else, `make site`, and
  publishes the folder that command writes;
* `make test` installs the site's environment (so that a fresh clone builds the site in its tests);
* requirements-site.txt pins exactly, torch at the course's version, and the packages it shares
  with requirements.txt at the same versions;
* the API reference lists every public module of tfmlib (tfmlib.viz aside, as api.md says);
* the notebook reader (site/course_notebooks.py) folds what the notebook folds, hides solution()
  output and turns a widget into its stored still and a note, on a notebook made here.
"""
from __future__ import annotations

import base64
import importlib.util
import re
from pathlib import Path

import nbformat
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "site.yml"
MAKEFILE = ROOT / "Makefile"
TORCH_VERSION = "2.13.0"


def make_variable(name: str) -> str:
    match = re.search(rf"^{name}\s*\??=\s*(\S+)\s*$", MAKEFILE.read_text(), re.M)
    assert match, f"the Makefile sets no {name}"
    return match.group(1)


def test_pages_workflow_builds_with_make_site_on_a_push_to_main():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow.get("on", workflow.get(True))   # YAML 1.1 reads a bare `on` as True
    assert triggers["push"]["branches"] == ["main"]
    steps = [step for job in workflow["jobs"].values() for step in job.get("steps", [])]
    runs = [step["run"].strip() for step in steps if "run" in step]
    assert runs == ["make site"], f"the workflow must build with `make site` alone, it runs {runs}"
    uploads = [step for step in steps if step.get("uses", "").startswith("actions/upload-pages-artifact")]
    assert [step["with"]["path"] for step in uploads] == [make_variable("SITE_OUT")]
    assert any(step.get("uses", "").startswith("actions/deploy-pages") for step in steps)


def test_make_test_installs_the_site_environment():
    prerequisites = re.search(r"^test:(.*)$", MAKEFILE.read_text(), re.M).group(1).split()
    assert "site-install" in prerequisites


def pins(path: Path) -> dict[str, str]:
    result = {}
    for line in path.read_text().splitlines():
        line = re.sub(r"(^|\s)#.*", "", line).strip()
        if not line or line.startswith("-"):
            continue
        requirement = Requirement(line)
        (spec,) = requirement.specifier
        assert spec.operator == "==", f"{path.name}: {line} must be an exact pin"
        result[canonicalize_name(requirement.name)] = spec.version
    return result


def test_site_requirements_pin_the_course_versions():
    site, course = pins(ROOT / "requirements-site.txt"), pins(ROOT / "requirements.txt")
    assert site.get("torch") == TORCH_VERSION
    differ = {name: (version, course[name]) for name, version in site.items()
              if name in course and course[name] != version}
    assert not differ, f"requirements-site.txt vs requirements.txt: {differ}"


def test_api_reference_lists_every_public_module():
    api = (ROOT / "site" / "api.md").read_text()
    listed = set(re.findall(r"automodule:: tfmlib\.(\w+)", api))
    modules = {path.stem for path in (ROOT / "tfmlib").glob("*.py")
               if not path.stem.startswith("_")} | {"exercises"}
    assert modules - listed == set(), f"site/api.md lacks tfmlib.{sorted(modules - listed)}"


# --- The notebook reader --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def reader():
    spec = importlib.util.spec_from_file_location("course_notebooks", ROOT / "site" / "course_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n a still").decode()


def widget_notebook(with_state: bool) -> str:
    """A notebook of a folded predict answer, a solution() call and a widget (a VBox of a
    slider and an Image)."""
    nb = nbformat.v4.new_notebook()
    answer = nbformat.v4.new_code_cell('print("Answer:")', outputs=[
        nbformat.v4.new_output("stream", text="Answer:\n(2, 3)\n")])
    answer.metadata.update({"jupyter": {"outputs_hidden": True}, "tags": ["predict-answer"]})
    shown = nbformat.v4.new_code_cell('solution("layer_norm")', outputs=[
        nbformat.v4.new_output("stream", text="def layer_norm(x): ...\n")])
    widget = nbformat.v4.new_code_cell("explorer.widget", outputs=[nbformat.v4.new_output(
        "execute_result", {"application/vnd.jupyter.widget-view+json":
                           {"model_id": "box", "version_major": 2, "version_minor": 0},
                           "text/plain": "VBox(children=(...))"}, execution_count=1)])
    nb.cells = [answer, shown, widget]
    if with_state:
        nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {
            "version_major": 2, "version_minor": 0, "state": {
                "box": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_slider", "IPY_MODEL_image"],
                                                             "layout": "IPY_MODEL_layout"}},
                "slider": {"model_name": "IntSliderModel", "state": {"value": 3}},
                "layout": {"model_name": "LayoutModel", "state": {}},
                "image": {"model_name": "ImageModel", "state": {"format": "png"},
                          "buffers": [{"path": ["value"], "encoding": "base64", "data": PNG}]}}}}
    return nbformat.writes(nb)


def test_reader_folds_answers_and_hides_solution_output(reader):
    answer, shown, _ = reader.read(widget_notebook(with_state=True)).cells
    assert "hide-output" in answer.metadata["tags"] and answer.outputs   # folded, not removed
    assert "remove-output" in shown.metadata["tags"]


def test_reader_shows_a_widget_as_its_still_and_a_note(reader):
    notebook = reader.read(widget_notebook(with_state=True))
    outputs = notebook.cells[2].outputs
    assert [list(output.data) for output in outputs] == [["image/png"], ["text/markdown"]]
    assert outputs[0].data["image/png"] == PNG
    assert "In JupyterLab it moves" in outputs[1].data["text/markdown"]
    assert "widgets" not in notebook.metadata   # no widget JavaScript on the page


def test_reader_says_so_when_a_widget_has_no_still(reader):
    outputs = reader.read(widget_notebook(with_state=False)).cells[2].outputs
    assert [list(output.data) for output in outputs] == [["text/markdown"]]
    assert "In JupyterLab it moves" in outputs[0].data["text/markdown"]


def test_make_site_builds_the_chinese_edition_into_zh():
    """The second build: SITE_LANGUAGE=zh_CN, from the Chinese sources, into $(SITE_OUT)/zh; and the
    search of a Chinese site needs jieba (Sphinx's zh search indexes no Chinese word without it)."""
    recipe = re.search(r"^site: .*?\n((?:\t.*\n)+)", MAKEFILE.read_text(), re.M).group(1)
    builds = [line for line in recipe.replace("\\\n", " ").splitlines() if "-m sphinx" in line]
    assert len(builds) == 2, f"make site must build two editions, it runs {builds}"
    assert "SITE_LANGUAGE" not in builds[0] and builds[0].rstrip().endswith("$(SITE_SRC) $(SITE_OUT)")
    assert "SITE_LANGUAGE=zh_CN" in builds[1] and builds[1].rstrip().endswith("$(SITE_SRC_ZH) $(SITE_OUT)/zh")
    assert "cp -pR notebooks/zh $(SITE_SRC_ZH)/notebooks/" in recipe
    assert "jieba" in pins(ROOT / "requirements-site.txt")
