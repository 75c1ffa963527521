"""The modules of tfmlib import each other without a cycle: every import counts, those inside a
function too (a lazy import only hides a cycle until the day someone moves it to the top)."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tfmlib"


def module_names() -> dict[str, Path]:
    """Dotted name -> file, for every module of tfmlib (a package by its __init__.py)."""
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that module `name` imports, anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            base = ".".join(parts + ([node.module] if node.module else []))
            # `from . import provenance` imports a module; `from .core import check` a name of one
            found |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names}
    return found & known - {name}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` (module -> modules it imports), as a path back to its start."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        for imported in sorted(graph[module]):
            if imported in path:
                return path[path.index(imported):] + [imported]
            if imported not in done:
                found = visit(imported, path + [imported])
                if found:
                    return found
        done.add(module)
        return None

    return next((found for module in sorted(graph) if (found := visit(module, [module]))), None)


def test_the_cycle_finder_finds_a_lazy_import_back():
    graph = {"core": {"provenance", "tracker"}, "provenance": {"core"}, "tracker": set()}
    assert cycle(graph) == ["core", "provenance", "core"]
    assert cycle({**graph, "provenance": {"tracker"}}) is None


def test_the_import_graph_sees_relative_and_lazy_imports(tmp_path):
    names = module_names()
    graph = {name: imports_of(name, path, set(names)) for name, path in names.items()}
    assert {"tfmlib.exercises.core", "tfmlib.exercises.solutions"} <= graph["tfmlib.exercises"]
    assert {"tfmlib.exercises.provenance", "tfmlib.exercises.tracker"} <= graph["tfmlib.exercises.core"]
    assert "tfmlib.adam" in graph["tfmlib.exercises.adam"]   # `from ..adam import ...`
    lazy = tmp_path / "lazy.py"
    lazy.write_text("def vetted():\n    from .core import REGISTRY\n")
    assert imports_of("tfmlib.exercises.lazy", lazy, set(names)) == {"tfmlib.exercises.core"}


def test_tfmlib_has_no_import_cycle():
    names = module_names()
    graph = {name: imports_of(name, path, set(names)) for name, path in names.items()}
    found = cycle(graph)
    assert found is None, f"import cycle: {' -> '.join(found)}"
