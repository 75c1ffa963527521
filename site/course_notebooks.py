"""How the site reads a notebook: as stored, with the notebook's own conventions made web pages.

MyST-NB calls `read` for every .ipynb (conf.py: nb_custom_formats). Nothing is executed; the
notebook file is never changed. Four conventions of the course's notebooks become page features:

* an output the notebook keeps folded (`jupyter.outputs_hidden`, the predict questions' answers,
  tagged `predict-answer`) stays folded: MyST-NB's `hide-output` tag, a "show" toggle;
* a cell that calls `solution(...)` never shows its output (`remove-output`): the solutions are
  out of sight in the notebooks, and so they are on the site;
* a widget, which needs a kernel, shows its stored still (the picture its state holds) and a line
  saying that it moves in JupyterLab;
* the notebook's widget state is dropped, so that MyST-NB loads no widget JavaScript (from a CDN).
"""
from __future__ import annotations

import re

import nbformat

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
MODEL_REFERENCE = "IPY_MODEL_"
SOLUTION_CALL = re.compile(r"\bsolution\s*\(")
WIDGET_NOTE = ("*A still of this widget. In JupyterLab it moves: open this notebook with the "
               "launch button at the top of the page (Binder, Colab or your JupyterHub).*")
WIDGET_NOTE_NO_STILL = ("*A widget. In JupyterLab it moves (launch button at the top of the page); "
                        "this notebook stores no still of it.*")


def read(text: str) -> nbformat.NotebookNode:
    """The notebook in `text` as the site shows it."""
    notebook = nbformat.reads(text, as_version=4)
    models = notebook.metadata.pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in notebook.cells:
        fold_what_the_notebook_folds(cell)
        if cell.cell_type == "code":
            if SOLUTION_CALL.search(cell.source):
                add_tag(cell, "remove-output")
            cell.outputs = [shown for output in cell.outputs
                            for shown in widget_as_still(output, models)]
    return notebook


def add_tag(cell, tag: str) -> None:
    tags = cell.metadata.setdefault("tags", [])
    if tag not in tags:
        tags.append(tag)


def fold_what_the_notebook_folds(cell) -> None:
    """JupyterLab's collapsed input or output becomes MyST-NB's folded input or output."""
    jupyter = cell.metadata.get("jupyter", {})
    if jupyter.get("outputs_hidden") or "predict-answer" in cell.metadata.get("tags", []):
        add_tag(cell, "hide-output")
    if jupyter.get("source_hidden"):
        add_tag(cell, "hide-input")


def widget_as_still(output, models: dict) -> list:
    """`output` itself, or, for a widget's view, its stored pictures followed by the note."""
    view = output.get("data", {}).get(WIDGET_VIEW)
    if view is None:
        return [output]
    stills = [nbformat.v4.new_output("display_data", {mime: data})
              for mime, data in widget_pictures(view["model_id"], models)]
    note = WIDGET_NOTE if stills else WIDGET_NOTE_NO_STILL
    return stills + [nbformat.v4.new_output("display_data", {"text/markdown": note})]


def widget_pictures(model_id: str, models: dict, seen: set | None = None) -> list[tuple[str, str]]:
    """(mime type, base64 data) of every Image widget inside the widget `model_id`, in the order
    its views show them (children first to last)."""
    seen = set() if seen is None else seen
    model = models.get(model_id)
    if model is None or model_id in seen:
        return []
    seen.add(model_id)
    pictures = []
    if model.get("model_name") == "ImageModel":
        value = next((b["data"] for b in model.get("buffers", []) if b.get("path") == ["value"]), None)
        if value is not None:
            pictures.append((f"image/{model['state'].get('format', 'png')}", value))
    for value in model.get("state", {}).values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and item.startswith(MODEL_REFERENCE):
                pictures += widget_pictures(item[len(MODEL_REFERENCE):], models, seen)
    return pictures
