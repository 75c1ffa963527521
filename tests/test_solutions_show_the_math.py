"""A revealed solution shows the formula: its argument checks live in one `_check_...` call, so
the learner reads the docstring, that one line and the math, not a wall of `raise` blocks."""
import ast
import textwrap

import pytest

from tfmlib.exercises import REGISTRY, solution


def _revealed_functions(source: str) -> list[ast.FunctionDef]:
    return [node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)]


def _check_call_lines(function: ast.FunctionDef) -> set[int]:
    return {node.lineno for node in ast.walk(function)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id.startswith("_check_")}


# Raising on a clash is what exercise 1 of notebook 01 asks for: its raise is the answer.
RAISING_IS_THE_EXERCISE = {"broadcast_shape"}


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_a_revealed_solution_has_no_raise_and_no_require(name):
    source = solution(name).source
    for word in ("require_",) if name in RAISING_IS_THE_EXERCISE else ("raise", "require_"):
        assert word not in source, f"{name}: {word!r} in the revealed source\n{source}"


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_each_revealed_function_checks_its_arguments_in_at_most_one_line(name):
    for function in _revealed_functions(solution(name).source):
        lines = _check_call_lines(function)
        assert len(lines) <= 1, (f"{name}: {function.name} calls _check_ helpers on lines {sorted(lines)}:"
                                 f"\n{textwrap.indent(ast.unparse(function), '    ')}")
