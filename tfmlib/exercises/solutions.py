"""`solution(name)`: the reference solution of an exercise, revealed on purpose, as code that
runs when pasted into the exercise's cell."""
from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
from dataclasses import dataclass

from .tracker import REGISTRY


@dataclass
class Solution:
    name: str
    source: str

    def __str__(self) -> str:
        return self.source

    __repr__ = __str__

    def _repr_html_(self) -> str:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer
        return highlight(self.source, PythonLexer(), HtmlFormatter(noclasses=True))


def solution(name: str) -> Solution:
    """Reveal the reference solution of an exercise: the source of tfmlib's own function(s),
    after the imports it needs (its one `_check_...` line included, imported from tfmlib):
    pasted into the exercise's cell, it runs as shown."""
    exercise = REGISTRY.get(name)
    if exercise is None:
        raise ValueError(f"name: no exercise called {name!r}; known: {', '.join(sorted(REGISTRY))}")
    reference = exercise.reference if isinstance(exercise.reference, tuple) else (exercise.reference,)
    functions = exercise.solution_sources or reference
    sources = [textwrap.dedent(inspect.getsource(f)) for f in functions]
    return Solution(name, _imports_needed(functions, sources) + "\n\n\n" + "\n\n".join(sources))


def _imports_needed(functions, sources) -> str:
    """`import torch`, `from tfmlib.multihead import linear, split_heads`: the module-level
    names that the shown functions use."""
    shown, modules, names = {f.__name__ for f in functions}, [], {}
    for function, source in zip(functions, sources):
        used = {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}
        for name in sorted(used - shown):
            value = function.__globals__.get(name)
            if inspect.ismodule(value):
                line = f"import {value.__name__}" + ("" if value.__name__.endswith(name) else f" as {name}")
                modules += [line] if line not in modules else []
            elif name in function.__globals__ and not hasattr(builtins, name):
                where = getattr(value, "__module__", None) if callable(value) else function.__module__
                names.setdefault(where or function.__module__, set()).add(name)
    return "\n".join(modules + [f"from {m} import {', '.join(sorted(n))}" for m, n in names.items()])
