"""A pytest plugin for the nbval runs of `make test`: the figure lint (tfmlib/viz/lint.py) checks
every figure a notebook shows and every widget frame it draws, in the notebook's own kernel,
while nbval runs it. One execution of each notebook serves both (a separate lint run cost a
second execution of every notebook: 170 s for 10_training alone).

Each kernel nbval starts runs KERNEL_HOOK at startup (an IPython startup file in a private
IPYTHONDIR). A figure or frame with a problem raises FigureLintError in the cell that drew it,
and nbval fails that cell with the lint's words (an error fails a cell even where its output is
not compared). tests/test_figure_lint.py shows that a broken figure fails this way.

Use: pytest --nbval -p tests.nbval_figure_lint ... (the Makefile's NBVAL_FLAGS).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

KERNEL_HOOK = r'''
"""The figure lint of the nbval run (tests/nbval_figure_lint.py): every figure shown and every
widget frame drawn is linted, and a problem is an error of the cell that drew it."""
from matplotlib.backend_bases import FigureCanvasBase as _LintCanvas
from tfmlib.viz.common import Explorer as _LintExplorer
from tfmlib.viz.lint import NotebookColours as _NotebookColours
from tfmlib.viz.lint import lint_figure as _lint_figure

_notebook_colours = _NotebookColours()       # one kernel runs one notebook: its idea colours


class FigureLintError(Exception):
    """A figure or widget frame that the figure lint (tfmlib/viz/lint.py) finds fault with."""


def _lint_or_raise(figure, what):
    problems = _lint_figure(figure) + _notebook_colours.check(figure)
    if problems:
        raise FigureLintError(f"the figure lint found {len(problems)} problem(s) in this {what}:\n  "
                              + "\n  ".join(problems))


def _linted_print_figure(self, *args, _original=_LintCanvas.print_figure, **kwargs):
    _lint_or_raise(self.figure, "figure")
    return _original(self, *args, **kwargs)


def _linted_show(self, *args, _original=_LintExplorer._show, **kwargs):
    result = _original(self, *args, **kwargs)
    _lint_or_raise(self.fig, f"frame of {type(self).__name__}")
    return result


_LintCanvas.print_figure, _LintExplorer._show = _linted_print_figure, _linted_show
del _linted_print_figure, _linted_show
'''


def pytest_configure(config):
    """Before xdist starts its workers, which (and whose kernels) inherit the environment."""
    if hasattr(config, "workerinput") or not (config.getoption("nbval") or config.getoption("nbval_lax")):
        return
    ipython_dir = Path(tempfile.mkdtemp(prefix="nbval-figure-lint-")) / "ipython"
    startup = ipython_dir / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-figure-lint.py").write_text(KERNEL_HOOK)
    os.environ["IPYTHONDIR"] = str(ipython_dir)
