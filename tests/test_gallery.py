"""The figure gallery (tools/gallery.py, `make gallery`), built from a small notebook: it keeps
each figure and several frames of each widget with the cell they come from, and the figure
lint's problems reach the page and the exit status."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
BROKEN = "fig.text(0.8, 0.5, 'a note that runs off the right edge of the figure')"
CELLS = [
    ("markdown", "# A small notebook"),
    ("code", "import matplotlib.pyplot as plt\n%matplotlib inline\nfrom tfmlib.viz.embeddings import PositionalEncodingExplorer"),
    ("code", "fig, ax = plt.subplots(figsize=(3, 2), layout='constrained')\nax.plot([0, 1], [1, 0])\nplt.show()"),
    ("code", f"fig, ax = plt.subplots(figsize=(3, 2))\n{BROKEN}\nplt.show()"),
    ("code", "explorer = PositionalEncodingExplorer()\nexplorer.widget"),
    ("code", "explorer.update(pos_i=7)\nexplorer.snapshot()"),
]


def _gallery():
    spec = importlib.util.spec_from_file_location("gallery", ROOT / "tools" / "gallery.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gallery_shows_each_figure_and_widget_state_with_its_cell_and_lints_them(tmp_path):
    cells = [nbformat.v4.new_markdown_cell(text) if kind == "markdown" else nbformat.v4.new_code_cell(text)
             for kind, text in CELLS]
    notebook = tmp_path / "small.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), notebook)
    before = notebook.read_text()
    out = tmp_path / "gallery"

    status = _gallery().main([str(notebook), "--out", str(out)])

    page = (out / "index.html").read_text()
    assert status == 1                                     # the broken figure fails the build
    assert notebook.read_text() == before                  # the notebook itself is left as it was
    listed = re.findall(r"<li class='problem'>([^<]*)</li>", page)
    assert listed and all(line.startswith("small.ipynb, cell 4 of 6 (In [3]): fig, ax = plt.subplots")
                          for line in listed), listed            # the broken figure's, and only its
    assert any("text outside the canvas: &#x27;a note that runs off" in line for line in listed), listed
    figures = re.findall(r"<b>figure</b>, cell (\d) of 6", page)
    assert figures == ["3", "4"]
    frames = re.findall(r"<b>widget frame</b>, cell 5 of 6 \(In \[4\]\): [^<]*<br>PositionalEncodingExplorer: ([^<]*)<", page)
    assert frames[0] == "as the cell leaves it" and len(frames) >= 5, frames
    assert "d_model = 4" in frames                         # a slider at its ends: another frame
    still = re.findall(r"<b>widget frame</b>, cell 6 of 6 \(In \[5\]\): explorer.update\(pos_i=7\)<br>"
                       r"PositionalEncodingExplorer: the still picture the notebook shows", page)
    assert len(still) == 1                                 # a snapshot is a picture of the notebook too
    images = re.findall(r"<img src='([^']+)'", page)
    assert len(images) == 2 + len(frames) + 1
    pictures = {(out / image).read_bytes() for image in images}
    assert all(picture.startswith(b"\x89PNG") for picture in pictures)
    assert len(pictures) == len(images)                   # every state drew a frame of its own
