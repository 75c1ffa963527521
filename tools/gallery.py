"""The course's figure gallery: every static figure and a few states of every widget of the
notebooks on one HTML page, each with the notebook and the cell it comes from, all linted.

    make gallery                                   # every notebook -> build/gallery/index.html
    .venv/bin/python tools/gallery.py notebooks/05_attention.ipynb --out /tmp/gallery

For review, and for a teacher preparing a lesson: the page shows what a learner sees without
running anything. Each notebook runs in a fresh kernel (nbclient; the notebook file is not
changed), two at a time. A startup hook in the kernel (KERNEL_HOOK) keeps each figure the inline
backend shows and each still of a widget (`snapshot()`), and after each cell drives every widget
the cell built through a few values of each control (the ends of a slider, the first and last
option, a checkbox flipped, a text cut to its first word and doubled), keeping each frame, then
sets every control back (one moved can clamp others). Every figure and
frame goes through the figure lint (tfmlib/viz/lint.py); its problems are listed at the top of
the page and beside the picture, and make the exit status 1, as a cell that fails does.
"""
from __future__ import annotations

import argparse
import html
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb")) + sorted((ROOT / "notebooks" / "bonus").glob("*.ipynb"))
DEFAULT_OUT = ROOT / "build" / "gallery"
ENV_VAR = "TFMLIB_GALLERY_DIR"       # where the kernel hook writes its pictures and records

KERNEL_HOOK = r'''
"""The gallery's hook (tools/gallery.py): keep and lint every figure shown and a few states
of every widget built, in the folder named by TFMLIB_GALLERY_DIR."""
import json as _json
import os as _os
from pathlib import Path as _Path

from IPython import get_ipython as _get_ipython
from matplotlib.backend_bases import FigureCanvasBase as _Canvas
from tfmlib.viz.common import Explorer as _Explorer
from tfmlib.viz.lint import NotebookColours as _NotebookColours
from tfmlib.viz.lint import lint_figure as _lint_figure

_notebook_colours = _NotebookColours()       # one kernel runs one notebook: its idea colours


def _lint_figure_in_notebook(figure):
    return _lint_figure(figure) + _notebook_colours.check(figure)


_gallery = {"dir": _Path(_os.environ["TFMLIB_GALLERY_DIR"]), "pictures": 0, "kept": [], "built": []}


def _gallery_keep(kind, png, problems, state=""):
    """Save a picture; its record waits for the cell's end, which knows the cell's In [n]."""
    _gallery["pictures"] += 1
    name = f"{_gallery['pictures']:03d}.png"
    (_gallery["dir"] / name).write_bytes(png)
    _gallery["kept"].append({"kind": kind, "image": name, "problems": problems, "state": state})


def _gallery_print_figure(self, filename, *args, _original=_Canvas.print_figure, **kwargs):
    problems = _lint_figure_in_notebook(self.figure)  # before the crop of bbox_inches="tight"
    result = _original(self, filename, *args, **kwargs)
    if hasattr(filename, "getvalue") and kwargs.get("format", "png") == "png":   # the inline backend
        _gallery_keep("figure", filename.getvalue(), problems)
    return result


def _gallery_snapshot(self, _original=_Explorer.snapshot):
    """The still of a widget that a notebook shows for viewers without widgets."""
    _gallery_keep("widget", self.png(), _lint_figure_in_notebook(self.fig),
                  f"{type(self).__name__}: the still picture the notebook shows (snapshot)")
    return _original(self)


def _gallery_build(self, *args, _original=_Explorer._build, **kwargs):
    _original(self, *args, **kwargs)
    _gallery["built"].append(self)


def _gallery_controls(widget):
    """The controls a learner can change in the widget tree under `widget`, top to bottom."""
    import ipywidgets as widgets

    shown_only = (widgets.Image, widgets.HTML, widgets.HTMLMath, widgets.Label, widgets.Output, widgets.Valid)
    if isinstance(widget, widgets.Box):
        return [control for child in widget.children for control in _gallery_controls(child)]
    if isinstance(widget, widgets.ValueWidget) and not isinstance(widget, shown_only) and not widget.disabled:
        return [widget]
    return []


def _gallery_other_values(control):
    """Up to two settings of `control` other than its own: (what to show, how to set it)."""
    if hasattr(control, "options") and hasattr(control, "index"):
        count = len(control.options)
        if isinstance(control.index, tuple):              # a multiple selection: one, and all
            ends = [(0,), tuple(range(count))] if count else []
        else:
            ends = list(dict.fromkeys((0, count - 1))) if count else []
        return [("index", i) for i in ends if i != control.index]
    if isinstance(control.value, bool):
        return [("value", not control.value)]
    if hasattr(control, "min") and hasattr(control, "max"):
        ends = (control.min, control.max)
        if hasattr(control, "base"):                      # a log slider: min and max are exponents
            ends = tuple(control.base ** end for end in ends)
        return [("value", v) for v in dict.fromkeys(ends) if v != control.value]
    if isinstance(control.value, str):
        words = control.value.split()
        doubled = f"{control.value} {control.value}" if words else "a"
        return [("value", v) for v in dict.fromkeys((words[0] if words else "", doubled)) if v != control.value]
    return []


def _gallery_shown(control, attribute, setting):
    name = control.description or type(control).__name__
    if attribute == "index":
        labels = [option[0] if isinstance(option, tuple) else option for option in control.options]
        shown = [labels[i] for i in setting] if isinstance(setting, tuple) else labels[setting]
    else:
        shown = float(f"{setting:.4g}") if isinstance(setting, float) else setting   # a log slider's end
    return f"{name} = {shown!r}"


def _gallery_drive(explorer):
    """Keep the frame the cell left, then one per other setting of each control."""
    where = type(explorer).__name__
    controls = _gallery_controls(explorer.widget)
    _gallery_keep("widget", explorer.png(), _lint_figure_in_notebook(explorer.fig), f"{where}: as the cell leaves it")
    for control in controls:
        for attribute, setting in _gallery_other_values(control):
            before = _gallery_settings(controls)
            state = f"{where}: {_gallery_shown(control, attribute, setting)}"
            try:
                setattr(control, attribute, setting)      # its observer redraws, as a click does
                _gallery_keep("widget", explorer.png(), _lint_figure_in_notebook(explorer.fig), state)
            except Exception as error:                    # the page shows it; the next state runs
                _gallery_keep("widget", explorer.png(), [f"the redraw raised {error!r}"], state)
            finally:
                _gallery_restore(before)


def _gallery_settings(controls):
    """What every control is set to: a control moved can clamp others (03's positions, when
    max_len falls to 8), and the next state must start from the cell's own settings."""
    return [(c, "index" if hasattr(c, "options") and hasattr(c, "index") else "value",
             getattr(c, "index" if hasattr(c, "options") and hasattr(c, "index") else "value"))
            for c in controls]


def _gallery_restore(settings):
    """Set every control back, top to bottom (a control above may set the range of one below)."""
    for control, attribute, value in settings:
        if getattr(control, attribute) != value:
            setattr(control, attribute, value)


def _gallery_post_run_cell(result):
    built, _gallery["built"] = _gallery["built"], []
    for explorer in built:
        _gallery_drive(explorer)
    kept, _gallery["kept"] = _gallery["kept"], []
    with open(_gallery["dir"] / "records.jsonl", "a") as records:
        for record in kept:
            records.write(_json.dumps({**record, "execution_count": result.execution_count}) + "\n")


_Canvas.print_figure, _Explorer._build, _Explorer.snapshot = _gallery_print_figure, _gallery_build, _gallery_snapshot
_get_ipython().events.register("post_run_cell", _gallery_post_run_cell)
'''


def run_notebook(path: Path, into: Path) -> dict:
    """Execute `path` in a fresh kernel with the hook; its pictures go to `into`.
    -> {"path", "cells", "records", "error", "seconds"}."""
    import nbformat
    from nbclient import NotebookClient

    into.mkdir(parents=True, exist_ok=True)
    ipython_dir = Path(tempfile.mkdtemp(prefix="gallery-ipython-"))
    startup = ipython_dir / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-gallery.py").write_text(KERNEL_HOOK)
    env = {**os.environ, ENV_VAR: str(into), "IPYTHONDIR": str(ipython_dir)}
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    start, error = time.perf_counter(), None
    try:
        client.execute(env=env)
    except Exception as failure:                         # the page says so; the rest still shows
        error = str(failure).strip().splitlines()[-1] if str(failure).strip() else repr(failure)
    records_file = into / "records.jsonl"
    records = [json.loads(line) for line in records_file.read_text().splitlines()] if records_file.exists() else []
    return {"path": path, "cells": notebook.cells, "records": records, "error": error,
            "seconds": time.perf_counter() - start}


def where_from(cells, execution_count) -> str:
    """'cell 12 of 40 (In [7]): its first line of code' for the code cell that ran as In [n]
    (comments skipped: the code says which figure it is)."""
    for number, cell in enumerate(cells, start=1):
        if cell.cell_type == "code" and cell.get("execution_count") == execution_count:
            code = [line for line in cell.source.splitlines() if line.strip() and not line.lstrip().startswith("#")]
            first = code[0] if code else ""
            return f"cell {number} of {len(cells)} (In [{execution_count}]): {first}"
    return f"In [{execution_count}]"


def failures(result: dict) -> list[str]:
    """One line per problem of a notebook: the lint's, and a notebook that did not run through."""
    lines = [f"{result['path'].name}: the notebook stopped: {result['error']}"] if result["error"] else []
    for record in result["records"]:
        for problem in record["problems"]:
            lines.append(f"{result['path'].name}, {where_from(result['cells'], record['execution_count'])}"
                         f"{' [' + record['state'] + ']' if record['state'] else ''}: {problem}")
    return lines


def page(results: list[dict], out: Path, seconds: float) -> str:
    """The gallery's HTML: problems first, then each notebook's pictures in cell order."""
    esc = html.escape
    problems = [line for result in results for line in failures(result)]
    figures = sum(r["kind"] == "figure" for result in results for r in result["records"])
    frames = sum(r["kind"] == "widget" for result in results for r in result["records"])
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Course figure gallery</title>",
        "<style>body{font-family:sans-serif;max-width:900px;margin:auto;padding:1em}"
        "figure{margin:1.5em 0;border-top:1px solid #ccc;padding-top:.5em}"
        "figcaption{font-size:90%;color:#333;margin-bottom:.3em}code{background:#f3f3f3}"
        ".problem{color:#b3261e}img{max-width:100%;height:auto}</style></head><body>",
        "<h1>Course figure gallery</h1>",
        f"<p>{figures} static figures and {frames} widget frames of {len(results)} notebooks, "
        f"built by <code>make gallery</code> in {seconds:.0f} s. Each picture names the notebook and "
        "the cell it comes from (cells counted from the top, markdown included).</p>",
        f"<h2>Figure lint: {len(problems)} problem(s)</h2>",
        "<ul>" + "".join(f"<li class='problem'>{esc(p)}</li>" for p in problems) + "</ul>" if problems
        else "<p>None: every figure and frame passes the lint.</p>",
        "<h2>Notebooks</h2><ul>" + "".join(
            f"<li><a href='#{esc(r['path'].stem)}'>{esc(r['path'].name)}</a> ({len(r['records'])} pictures)</li>"
            for r in results) + "</ul>",
    ]
    for result in results:
        stem = result["path"].stem
        name = result["path"].relative_to(ROOT) if result["path"].is_relative_to(ROOT) else result["path"].name
        parts.append(f"<h2 id='{esc(stem)}'>{esc(str(name))}</h2>")
        if result["error"]:
            parts.append(f"<p class='problem'>The notebook stopped: {esc(result['error'])}</p>")
        for record in result["records"]:
            caption = esc(where_from(result["cells"], record["execution_count"]))
            kind = "widget frame" if record["kind"] == "widget" else "figure"
            state = f"<br>{esc(record['state'])}" if record["state"] else ""
            lint = "".join(f"<br><span class='problem'>lint: {esc(p)}</span>" for p in record["problems"])
            parts.append(f"<figure><figcaption><b>{kind}</b>, {caption}{state}{lint}</figcaption>"
                         f"<img src='{esc(stem)}/{esc(record['image'])}' alt='{kind} of {caption}' loading='lazy'></figure>")
    parts.append("</body></html>")
    return "\n".join(parts)


def build(paths: list[Path], out: Path, workers: int = 2) -> tuple[list[dict], list[str]]:
    """Run the notebooks, write out/index.html with the pictures beside it; -> (results, problems)."""
    start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*/[0-9][0-9][0-9].png"):       # pictures of an earlier build
        old.unlink()
    for old in out.glob("*/records.jsonl"):
        old.unlink()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        # The biggest notebooks (they train) start first, so that none is left to run alone.
        futures = {path: pool.submit(run_notebook, path, out / path.stem)
                   for path in sorted(paths, key=lambda path: -path.stat().st_size)}
        results = [futures[path].result() for path in paths]
    (out / "index.html").write_text(page(results, out, time.perf_counter() - start))
    return results, [line for result in results for line in failures(result)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks (default: all of the course)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    parser.add_argument("--workers", type=int, default=2, help="notebooks run at once (default 2)")
    args = parser.parse_args(argv)
    paths = [path.resolve() for path in args.notebooks] or NOTEBOOKS
    start = time.perf_counter()
    results, problems = build(paths, args.out, args.workers)
    for result in results:
        print(f"{result['path'].name}: {len(result['records'])} pictures in {result['seconds']:.1f} s"
              + (f", stopped: {result['error']}" if result["error"] else ""))
    print(f"{args.out / 'index.html'}: {time.perf_counter() - start:.0f} s, "
          f"{len(problems)} figure lint problem(s)")
    for line in problems:
        print("  " + line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
