"""Mutation test of the exercise checks: wrong versions of every reference solution, made
mechanically from its syntax tree, must all fail their exercise's check.

A mutant changes one place of one function the learner writes (the reference, or a helper
listed in the exercise's `solution_sources`): it swaps an operator, flips a comparison,
moves a number by one (an axis, a `dim`, a slice bound, a `range`), drops a scaling or a
call (`.transpose(...)`, `torch.sqrt(...)`), swaps two arguments or two tuple items,
deletes a step, negates a condition, or makes an operation in place (`x + y` on an
argument becomes `x.add_(y)`, `t.masked_fill(...)` becomes `t.masked_fill_(...)`).

A mutant is *equivalent* when it behaves like the reference on a large case set: the
exercise's own cases plus `random_cases(name, seed)` (tests/random_cases/) for RANDOM_SEEDS seeds, judged
by the check engine itself (same values within tolerance, same untouched arguments, same
gradients, the same exceptions where a case requires one); a mutant whose change lies on lines
the reference never runs on that set is equivalent without being run (lines_run). Every other
mutant must be rejected by `check(name, mutant)`, on the exercise's own cases alone.

It also times what a learner waits for: how many cases each check runs, and how long `check`
takes on a correct answer (the reference), the first time and again.

    python tests/mutants.py [exercise ...]   # writes benchmarks/MUTANTS.md (all exercises)
"""
from __future__ import annotations

import __future__
import ast
import copy
import functools
import inspect
import signal
import statistics
import sys
import textwrap
import time
import types
from dataclasses import dataclass, field
from pathlib import Path

import torch

from tfmlib.exercises import REGISTRY, check
from tfmlib.exercises.core import behaves_like_reference
from tfmlib.exercises.provenance import fingerprint

from random_cases import random_cases

RANDOM_SEEDS = 8
SECONDS_PER_CALL = 20  # a mutant that loops forever is stopped and counted as rejected
TIMED_CHECKS = 5  # checks after the first, of which the table gives the median time

_SWAPS = {ast.Add: [ast.Sub], ast.Sub: [ast.Add], ast.Mult: [ast.Div], ast.Div: [ast.Mult],
          ast.MatMult: [ast.Mult], ast.Pow: [ast.Mult], ast.FloorDiv: [ast.Div], ast.Mod: [ast.FloorDiv]}
_COMPARISONS = {ast.Lt: [ast.LtE, ast.GtE], ast.LtE: [ast.Lt, ast.Gt], ast.Gt: [ast.GtE, ast.LtE],
                ast.GtE: [ast.Gt, ast.Lt], ast.Eq: [ast.NotEq], ast.NotEq: [ast.Eq],
                ast.Is: [ast.IsNot], ast.IsNot: [ast.Is], ast.In: [ast.NotIn], ast.NotIn: [ast.In]}
_IN_PLACE = {ast.Add: "add_", ast.Sub: "sub_", ast.Mult: "mul_", ast.Div: "div_"}
_MODULES = {"torch", "math", "F", "np", "nn"}


def _mutations(node: ast.AST, scope: _Scope) -> list[tuple[str, callable]]:
    """Every one-place change of `node`, as (description, function making the new node)."""
    out = []
    c = copy.deepcopy
    arguments = scope.arguments
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in scope.variables:
        for other in sorted(scope.variables - {node.id}):
            out.append((f"{node.id} -> {other}", lambda other=other: ast.Name(other, ast.Load())))
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
            and isinstance(node.slice.value, str):
        for other in sorted(scope.keys - {node.slice.value}):
            out.append((f"[{node.slice.value!r}] -> [{other!r}]", lambda other=other: ast.Subscript(
                c(node.value), ast.Constant(other), c(node.ctx))))
    if isinstance(node, ast.BinOp):
        for op in _SWAPS.get(type(node.op), []):
            out.append((f"{type(node.op).__name__} -> {op.__name__}",
                        lambda op=op: ast.BinOp(c(node.left), op(), c(node.right))))
        if isinstance(node.op, (ast.Mult, ast.Div, ast.Add, ast.Sub, ast.Pow)):
            out.append(("keep the left operand only", lambda: c(node.left)))
        if isinstance(node.op, (ast.Mult, ast.Add)):
            out.append(("keep the right operand only", lambda: c(node.right)))
        if type(node.op) in _IN_PLACE and isinstance(node.left, ast.Name) and node.left.id in arguments:
            out.append((f"in place on argument {node.left.id}", lambda: ast.Call(
                ast.Attribute(c(node.left), _IN_PLACE[type(node.op)], ast.Load()), [c(node.right)], [])))
    elif isinstance(node, ast.AugAssign):
        for op in _SWAPS.get(type(node.op), []):
            out.append((f"{type(node.op).__name__}= -> {op.__name__}=",
                        lambda op=op: ast.AugAssign(c(node.target), op(), c(node.value))))
    elif isinstance(node, ast.Compare) and len(node.ops) == 1:
        for op in _COMPARISONS.get(type(node.ops[0]), []):
            out.append((f"{type(node.ops[0]).__name__} -> {op.__name__}",
                        lambda op=op: ast.Compare(c(node.left), [op()], c(node.comparators))))
    elif isinstance(node, ast.BoolOp):
        other = ast.Or if isinstance(node.op, ast.And) else ast.And
        out.append((f"{type(node.op).__name__} -> {other.__name__}",
                    lambda: ast.BoolOp(other(), c(node.values))))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.Invert, ast.USub)):
        out.append((f"drop unary {type(node.op).__name__}", lambda: c(node.operand)))
    elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
        for new in ((node.value + 1, node.value - 1) if type(node.value) is int
                    else ((1.0, 0.5) if node.value == 0 else (node.value * 2, node.value / 2, 0.0))):
            out.append((f"{node.value!r} -> {new!r}", lambda new=new: ast.Constant(new)))
    elif isinstance(node, ast.Constant) and type(node.value) is bool:
        out.append((f"{node.value} -> {not node.value}", lambda: ast.Constant(not node.value)))
    elif isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and not (isinstance(func.value, ast.Name)
                                                    and func.value.id in _MODULES):
            out.append((f"drop the call .{func.attr}(...)", lambda: c(func.value)))
            if hasattr(torch.Tensor, func.attr + "_") and not func.attr.endswith("_"):
                out.append((f".{func.attr}( -> .{func.attr}_(", lambda: ast.Call(
                    ast.Attribute(c(func.value), func.attr + "_", ast.Load()), c(node.args), c(node.keywords))))
        if len(node.args) == 1 and not node.keywords and not isinstance(node.args[0], ast.Starred):
            out.append((f"drop the call {ast.unparse(func)}(...)", lambda: c(node.args[0])))
        if len(node.args) >= 2:
            out.append(("swap the first two arguments", lambda: ast.Call(
                c(func), [c(node.args[1]), c(node.args[0])] + c(node.args[2:]), c(node.keywords))))
    elif isinstance(node, ast.Attribute) and node.attr in ("T", "mT") and isinstance(node.ctx, ast.Load):
        out.append((f"drop .{node.attr}", lambda: c(node.value)))
    elif isinstance(node, ast.Tuple) and len(node.elts) >= 2 and isinstance(node.ctx, ast.Load):
        out.append(("swap the first two tuple items", lambda: ast.Tuple(
            [c(node.elts[1]), c(node.elts[0])] + c(node.elts[2:]), ast.Load())))
    elif isinstance(node, ast.Slice):
        for bound in ("lower", "upper"):
            value = getattr(node, bound)
            if isinstance(value, ast.Name):
                for op in (ast.Add, ast.Sub):
                    out.append((f"slice {bound} bound {value.id} {'+' if op is ast.Add else '-'} 1",
                                lambda bound=bound, op=op, value=value: ast.Slice(**{
                                    **{k: c(getattr(node, k)) for k in ("lower", "upper", "step")},
                                    bound: ast.BinOp(c(value), op(), ast.Constant(1))})))
    elif isinstance(node, ast.IfExp):
        out.append(("swap the branches of a conditional expression",
                    lambda: ast.IfExp(c(node.test), c(node.orelse), c(node.body))))
    elif isinstance(node, ast.If):
        out.append(("negate the if condition",
                    lambda: ast.If(ast.UnaryOp(ast.Not(), c(node.test)), c(node.body), c(node.orelse))))
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.Expr)):
        out.append(("delete the statement", lambda: ast.Pass()))
    return out


@dataclass
class _Scope:
    """What a mutation may swap in: the function's arguments, its variables (arguments and
    names it assigns), and the string keys it reads with [...] (params["w_1"] -> ["w_2"])."""
    arguments: set[str]
    variables: set[str]
    keys: set[str]

    @classmethod
    def of(cls, tree: ast.FunctionDef) -> _Scope:
        arguments = {a.arg for a in tree.args.args + tree.args.kwonlyargs}
        assigned = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        keys = {n.slice.value for n in ast.walk(tree) if isinstance(n, ast.Subscript)
                and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str)}
        return cls(arguments, arguments | assigned, keys)


class _Mutator(ast.NodeTransformer):
    """Numbers the nodes of a function body in a fixed order; lists or applies one mutation."""

    def __init__(self, scope: _Scope, target: tuple[int, int] | None = None):
        self.scope, self.target = scope, target
        self.count, self.found = 0, []

    def visit(self, node):
        number = self.count
        self.count += 1
        if self.target is None:
            self.found.extend((number, i, description)
                              for i, (description, _) in enumerate(_mutations(node, self.scope)))
        node = self.generic_visit(node)
        if self.target is not None and self.target[0] == number:
            mutations = _mutations(node, self.scope)
            return ast.copy_location(mutations[self.target[1]][1](), node)
        return node


def _function_tree(source: str) -> ast.FunctionDef:
    """A fresh syntax tree of the function whose dedented `source` this is (every mutant
    changes its own tree; parsing the text again is much cheaper than copying a tree)."""
    tree = ast.parse(source).body[0]
    tree.decorator_list = []
    return tree


def _body(tree: ast.FunctionDef) -> list[ast.stmt]:
    body = tree.body
    has_docstring = body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
        and isinstance(body[0].value.value, str)
    return body[1:] if has_docstring else body


def _mutation_sites(source: str, scope: _Scope) -> list[tuple[int, int, str]]:
    mutator = _Mutator(scope)
    for statement in _body(_function_tree(source)):
        mutator.visit(statement)
    return mutator.found


def _mutated(function, source: str, scope: _Scope, target: tuple[int, int], namespace: dict):
    """The mutant, or None when the change changes nothing that runs (swapping two equal
    arguments, or the types in a local variable's annotation): that is the reference's own
    code again, which the check rightly fails as a copy of the reference."""
    tree = _function_tree(source)
    mutator = _Mutator(scope, target)
    start = 1 if len(_body(tree)) < len(tree.body) else 0
    tree.body[start:] = [mutator.visit(statement) for statement in tree.body[start:]]
    module = ast.fix_missing_locations(ast.Module([tree], []))
    code = compile(module, f"<mutant of {function.__name__}>", "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    exec(code, namespace)
    mutant = namespace[function.__name__]
    return None if fingerprint(mutant.__code__) == fingerprint(function.__code__) else mutant


@dataclass
class Mutant:
    exercise: str
    function: str
    description: str
    line: str
    answer: object = field(repr=False)
    # (file, line) of each line of the reference's source that the changed place spans
    source_lines: frozenset = frozenset()


def mutants(name: str) -> list[Mutant]:
    """Every mutant of exercise `name`, as an answer to hand to check(name, ...)."""
    exercise = REGISTRY[name]
    references = _references(exercise)
    found = []
    for function in exercise.solution_sources or references:
        # read, parsed and numbered once per function, not once per mutant
        source = textwrap.dedent(inspect.getsource(function))
        scope, places = _Scope.of(_function_tree(source)), _node_places(source)
        code = inspect.unwrap(function).__code__  # the code getsource read, numbered from its first line
        for number, option, description in _mutation_sites(source, scope):
            namespace = dict(function.__globals__)
            mutant = _mutated(function, source, scope, (number, option), namespace)
            if mutant is None:
                continue
            # the learner's functions, with the mutant in place and calling each other
            namespace[function.__name__] = mutant
            answer = tuple(mutant if f is function else _rebound(f, namespace) for f in references)
            line, span = places[number]
            found.append(Mutant(name, function.__name__, description, line,
                                answer if isinstance(exercise.reference, tuple) else answer[0],
                                frozenset((code.co_filename, code.co_firstlineno + i - 1) for i in span)))
    return found


def _references(exercise) -> tuple:
    return exercise.reference if isinstance(exercise.reference, tuple) else (exercise.reference,)


def _rebound(function, namespace: dict):
    """`function` reading its globals from `namespace` (so that it calls the mutated helper)."""
    rebound = types.FunctionType(function.__code__, namespace, function.__name__,
                                 function.__defaults__, function.__closure__)
    rebound.__kwdefaults__ = function.__kwdefaults__
    return rebound


def _node_places(source: str) -> list[tuple[str, range]]:
    """The source line of each node and the lines it spans (empty for a node without a
    position), numbered in the same order as _Mutator numbers them."""
    source_lines, places = source.splitlines(), []

    class _Places(ast.NodeVisitor):
        def visit(self, node):
            lineno = getattr(node, "lineno", None)
            places.append((source_lines[lineno - 1].strip(), range(lineno, node.end_lineno + 1)) if lineno
                          else ("", range(0)))
            self.generic_visit(node)
    for statement in _body(_function_tree(source)):
        _Places().visit(statement)
    return places


@functools.cache  # one case list per exercise, so that the reference's outcomes on it are computed once
def random_case_set(name: str) -> tuple:
    cases = list(REGISTRY[name].make_cases())
    for seed in range(RANDOM_SEEDS):
        cases.extend(random_cases(name, seed))
    return tuple(cases)


@functools.cache
def lines_run(name: str) -> frozenset[tuple[str, int]]:
    """(file, line) of each line of the functions the mutants change, and of the code nested in
    them, that the reference runs on random_case_set(name), on all of which it must pass.

    A mutant whose change lies on none of these lines runs exactly as the reference does on every
    case of the set (each run starts from one random state), so it behaves like the reference
    there without being run: encoder's 27 mutants of its final layer norm, which no case asks
    for, each cost 74 runs of a 4-layer stack."""
    exercise = REGISTRY[name]
    codes, pending = {}, [inspect.unwrap(f).__code__ for f in exercise.solution_sources or _references(exercise)]
    while pending:  # comprehensions, lambdas and inner functions have code objects of their own
        code = pending.pop()
        codes[id(code)] = code
        pending.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    lines = set()

    def in_code(frame, event, arg):
        if event == "line":
            lines.add((frame.f_code.co_filename, frame.f_lineno))
        return in_code

    def on_call(frame, event, arg):
        return in_code if id(frame.f_code) in codes else None  # no line events elsewhere

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        passes = behaves_like_reference(name, exercise.reference, random_case_set(name))
    finally:
        sys.settrace(previous)
    if not passes:
        raise AssertionError(f"the reference of {name!r} fails on its own or its random cases")
    return frozenset(lines)


@dataclass
class Verdict:
    mutant: Mutant
    equivalent: bool
    rejected: bool
    named: str | None
    message: str
    # The label of the first own case on which the comparison told the mutant from the
    # reference, where that rejected it without a call to check().
    differs_on: str | None = None
    # Equivalent because its change lies on lines the reference never runs on the case set.
    never_run: bool = False


class TimeOut(Exception):
    pass


def with_time_limit(call):
    def stop(signum, frame):
        raise TimeOut(f"more than {SECONDS_PER_CALL} s")
    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(SECONDS_PER_CALL)
    try:
        return call()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def judge(mutant: Mutant, own_cases: list, case_set: tuple, reference_lines: frozenset,
          name_mistakes: bool = False) -> Verdict:
    """Rejected by the check on the exercise's own cases, equivalent, or a survivor.

    check() passes an answer exactly when its outcome matches the reference's on every one of
    the cases; for an answer that fails, it then searches the catalogue of mistakes for one to
    name, which costs 20 to 30 times as much as finding the first case that tells a mutant
    from the reference (measured on adam, layer_norm, scaled_dot_product_attention). So a mutant is judged by that same
    comparison (behaves_like_reference, the check engine's own), one case at a time and only
    up to the first case that tells it from the reference, and check() itself is called on
    every mutant that comes through, which confirms that it passes. `name_mistakes` calls
    check() on every mutant instead, for the name of the mistake (the table's last column).
    A mutant the check rejects cannot be equivalent (the case set includes the own cases), so
    the large case set is only run on the mutants that pass the check, and not on those whose
    change lies outside `reference_lines` (lines_run): they run as the reference does.
    """
    exercise, answer = mutant.exercise, mutant.answer
    try:
        if not name_mistakes:
            try:
                differs_on = with_time_limit(lambda: next(
                    (case for case in own_cases if not behaves_like_reference(exercise, answer, [case])),
                    None))
            except TimeOut:
                raise
            except Exception:  # an output the comparison cannot take: check() reports those itself
                differs_on = None
            if differs_on is not None:
                return Verdict(mutant, False, True, None, "", differs_on.label)
        result = with_time_limit(lambda: check(exercise, answer, own_cases))
        if not result:
            return Verdict(mutant, False, True, result.mistake, result.message)
        if mutant.source_lines and not mutant.source_lines & reference_lines:
            return Verdict(mutant, True, False, None, "", never_run=True)
        equivalent = with_time_limit(lambda: behaves_like_reference(exercise, answer, case_set))
    except TimeOut:
        return Verdict(mutant, False, True, None, "runs forever")
    return Verdict(mutant, equivalent, False, None, "")


def judge_exercise(name: str, name_mistakes: bool = False) -> list[Verdict]:
    own_cases, case_set = REGISTRY[name].make_cases(), random_case_set(name)
    return [judge(mutant, own_cases, case_set, lines_run(name), name_mistakes) for mutant in mutants(name)]


@dataclass
class Wait:
    """What a learner waits for in one exercise's check of a correct answer."""
    cases: int
    first: float  # seconds; the first check of a session also makes the cases and the reference's outcomes
    again: float  # seconds, the median of TIMED_CHECKS checks after the first


def learners_wait(name: str) -> Wait:
    """Time check(name, reference) in this process: its first call, then TIMED_CHECKS more."""
    reference = REGISTRY[name].reference

    def seconds() -> float:
        start = time.perf_counter()
        result = check(name, reference)
        if not result:
            raise AssertionError(f"the reference of {name!r} fails its own check: {result}")
        return time.perf_counter() - start

    first = seconds()
    again = statistics.median(seconds() for _ in range(TIMED_CHECKS))
    return Wait(len(REGISTRY[name].cases()), first, again)


def wait_table(waits: dict[str, Wait]) -> list[str]:
    lines = ["", "## What a learner waits for", "",
             "How many cases each check runs (the notebook's own and those derived from the exercise's",
             "contract) and how long `check` takes on a correct answer (the reference): the first check",
             "of a session, which also makes the cases and the reference's outcomes, and the median of",
             f"{TIMED_CHECKS} checks after it. Timed before the mutants, in the same run.", "",
             "| exercise | cases | first check (ms) | check again (ms) |", "|---|---:|---:|---:|"]
    lines += [f"| `{name}` | {w.cases} | {1000 * w.first:.1f} | {1000 * w.again:.1f} |"
              for name, w in sorted(waits.items())]
    slowest = max(waits, key=lambda name: waits[name].first)
    lines += ["", f"The slowest check is `{slowest}`'s: {1000 * waits[slowest].first:.0f} ms the first time, "
              f"{1000 * waits[slowest].again:.0f} ms again. All {len(waits)} exercises, "
              f"{sum(w.cases for w in waits.values())} cases: "
              f"{sum(w.first for w in waits.values()):.1f} s of first checks."]
    return lines


def table(results: dict[str, list[Verdict]], seconds: float) -> str:
    lines = ["# Mutation test of the exercise checks", "",
             "Written by `make mutants` (`python tests/mutants.py`; its docstring says how mutants are",
             "made). A mutant is *equivalent* when it behaves like the reference, as the check engine",
             f"judges it, on the exercise's own cases plus {RANDOM_SEEDS} seeds of its random cases",
             "(tests/random_cases/); every other mutant must be rejected by the check on the exercise's",
             "own cases alone.",
             "`tests/test_mutants.py` asserts it in `make test`.", "",
             "| exercise | mutants | equivalent | non-equivalent | rejected | named by a catalogued mistake |",
             "|---|---:|---:|---:|---:|---:|"]
    totals = [0] * 5
    for name, verdicts in sorted(results.items()):
        row = [len(verdicts), sum(v.equivalent for v in verdicts),
               sum(not v.equivalent for v in verdicts), sum(v.rejected for v in verdicts),
               sum(v.named is not None for v in verdicts)]
        totals = [t + r for t, r in zip(totals, row)]
        lines.append(f"| `{name}` | " + " | ".join(map(str, row)) + " |")
    lines.append("| **all** | " + " | ".join(f"**{t}**" for t in totals) + " |")
    rate = 100.0 * totals[3] / totals[2] if totals[2] else 100.0
    lines += ["", f"{rate:.1f} % of the non-equivalent mutants are rejected; "
              f"the whole run took {seconds:.0f} s on this machine."]
    short = [name for name, verdicts in sorted(results.items())
             if sum(not v.equivalent for v in verdicts) < 30]
    if short:
        lines += ["", "Fewer than 30 non-equivalent mutants: " + ", ".join(f"`{n}`" for n in short)
                  + ". Their references are a few lines long; the table counts every mutant the "
                  "generator can make of them."]
    survivors = [v for verdicts in results.values() for v in verdicts if not v.equivalent and not v.rejected]
    if survivors:
        lines += ["", "Mutants that passed their check:", ""]
        lines += [f"- `{v.mutant.exercise}` / `{v.mutant.function}`: {v.mutant.description} "
                  f"in `{v.mutant.line}`" for v in survivors]
    return "\n".join(lines) + "\n"


def main(names: list[str]) -> None:
    everything = not names
    names = names or sorted(REGISTRY)
    waits = {name: learners_wait(name) for name in names}  # first: before anything makes their cases
    start = time.perf_counter()
    results = {}
    for name in names:
        results[name] = judge_exercise(name, name_mistakes=True)
        survivors = [v for v in results[name] if not v.equivalent and not v.rejected]
        print(f"{name}: {len(results[name])} mutants, {sum(v.equivalent for v in results[name])} "
              f"equivalent, {len(survivors)} survived", flush=True)
        for v in survivors:
            print(f"    SURVIVED {v.mutant.function}: {v.mutant.description} in `{v.mutant.line}`")
    text = table(results, time.perf_counter() - start) + "\n".join(wait_table(waits)) + "\n"
    if everything:
        Path(__file__).resolve().parent.parent.joinpath("benchmarks", "MUTANTS.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
