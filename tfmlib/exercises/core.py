"""The checking engine behind `check(name, fn)` and `solution(name)`.

An `Exercise` knows the reference function, how to make seeded random cases,
and the catalogue of classic mistakes for that step (each a deliberately wrong
variant of the reference). `check` runs the learner's function on every case and
reports, in this order of preference:
  not attempted yet  -> the function is still a stub;
  passed             -> every case matches the reference;
  a named mistake    -> the outputs match one catalogued wrong variant;
  a diagnosis        -> what the function raised (at which of its own lines),
                        a None / wrong type / dtype / shape / NaN output, or the
                        first failing case with the largest error and where.
`check` never raises: a learner's bug is reported, not re-thrown.

A `Case` whose `raises` is set is one where a correct answer must raise that
exception (e.g. ValueError for shapes that do not broadcast). A `Mistake` may
list more variants in `also` (ids as float32 or int32; a frequency term
hard-coded for d_model 8 or 512): matching any of them names the mistake.
"""
from __future__ import annotations

import ast
import copy
import html
import inspect
import os
import textwrap
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


@dataclass(frozen=True)
class Case:
    """One input to try: positional and keyword arguments, and a label saying what it tests.

    `raises`: the exception type a correct answer must raise on this input (e.g.
    ValueError for shapes that do not broadcast); None when it must return a value.
    """
    label: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    raises: type[BaseException] | None = None


@dataclass(frozen=True)
class Mistake:
    """A classic wrong answer: its name, a one-line hint, and a function that makes it.

    `also`: more functions that make the same mistake in another form (ids as
    float32 or as int32; a frequency term hard-coded for d_model 8 or for 512);
    the learner's answer is named after this mistake when it matches any of them.
    """
    name: str
    hint: str
    variant: Callable
    also: tuple[Callable, ...] = ()

    @property
    def variants(self) -> tuple[Callable, ...]:
        return (self.variant, *self.also)


@dataclass
class Exercise:
    name: str
    reference: Callable
    make_cases: Callable[[], list[Case]]
    mistakes: list[Mistake] = field(default_factory=list)
    # How to turn a function (or whatever the learner hands in) and a case into
    # comparable outputs; the default calls fn(*args, **kwargs).
    run: Callable[[Any, Case], Any] | None = None
    output_names: tuple[str, ...] = ()
    solution_sources: tuple[Callable, ...] = ()
    atol: float = 1e-5
    rtol: float = 1e-4
    # Said after "contains NaN" when the learner's output has NaN and the reference
    # has none, e.g. "a row where every key is masked must give zeros, not NaN".
    nan_hint: str = ""

    def outputs(self, fn, case: Case):
        case = copy.deepcopy(case)  # a function that edits its inputs must not spoil the next run
        if self.run is not None:
            return self.run(fn, case)
        return fn(*case.args, **case.kwargs)


REGISTRY: dict[str, Exercise] = {}


def register(exercise: Exercise) -> Exercise:
    if exercise.name in REGISTRY:
        raise ValueError(f"exercise {exercise.name!r} is registered twice")
    REGISTRY[exercise.name] = exercise
    return exercise


# ---- the result shown in the notebook --------------------------------------------------------

_STYLE = {"passed": ("#e6f4ea", "#1e7e34", "PASS"),
          "not attempted": ("#f1f3f4", "#5f6368", "TODO"),
          "mistake": ("#fdecea", "#b3261e", "FAIL"),
          "failed": ("#fdecea", "#b3261e", "FAIL")}


@dataclass
class CheckResult:
    """What `check` returns: truthy only when the answer passed."""
    name: str
    status: str            # "passed", "not attempted", "mistake" or "failed"
    message: str           # one line
    details: str = ""      # more lines: shapes, errors, the learner's line
    mistake: str | None = None

    def __bool__(self) -> bool:
        return self.status == "passed"

    def __str__(self) -> str:
        tag = _STYLE[self.status][2]
        text = f"[{tag}] {self.name}: {self.message}"
        return text + ("\n" + textwrap.indent(self.details, "    ") if self.details else "")

    __repr__ = __str__

    def _repr_html_(self) -> str:
        background, colour, tag = _STYLE[self.status]
        details = (f"<pre style='margin:4px 0 0 0;white-space:pre-wrap'>{html.escape(self.details)}</pre>"
                   if self.details else "")
        return (f"<div style='background:{background};border-left:4px solid {colour};"
                f"padding:6px 10px;font-family:sans-serif'><b style='color:{colour}'>{tag}</b> "
                f"<code>{html.escape(self.name)}</code>: {html.escape(self.message)}{details}</div>")


# ---- checking ---------------------------------------------------------------------------------

class _Raised:
    """Stands in for an output when the learner's function raised."""
    def __init__(self, error: BaseException):
        self.error = error


class _ExpectedRaise:
    """Stands in for the reference's output on a case where a correct answer must raise."""
    def __init__(self, kind: type[BaseException]):
        self.kind = kind


def check(name: str, fn) -> CheckResult:
    """Run the learner's `fn` against the reference of exercise `name` and say what is wrong."""
    threads = torch.get_num_threads()
    try:
        # The cases are tiny: extra threads only cost time, and a lot of it on a busy CPU.
        torch.set_num_threads(1)
        return _check(name, fn)
    except Exception as error:  # the checker's own bug, or an output too odd to compare
        return CheckResult(str(name), "failed", "the checker itself failed on this answer",
                           f"{type(error).__name__}: {error}\n"
                           "This is a problem of the checker, not necessarily of your code; "
                           "please report it to the course maintainers.")
    finally:
        torch.set_num_threads(threads)


def _check(name: str, fn) -> CheckResult:
    exercise = REGISTRY.get(name) if isinstance(name, str) else None
    if exercise is None:
        return CheckResult(str(name), "failed", "no exercise of that name",
                           "known exercises: " + ", ".join(sorted(REGISTRY)))
    if _is_stub(fn):
        return CheckResult(name, "not attempted", "not attempted yet: replace the stub's body "
                           "with your code, then run this cell again")
    if not (callable(fn) or isinstance(fn, tuple)):
        return CheckResult(name, "failed", f"expected your function, got {type(fn).__name__}",
                           f"call it as check({name!r}, my_function), without calling my_function")
    cases = exercise.make_cases()
    actual = [_run_safely(exercise, fn, case) for case in cases]
    expected = [_reference_outcome(exercise, case) for case in cases]
    problems = [_compare(e, a, exercise) for e, a in zip(expected, actual)]
    if all(p is None for p in problems):
        return CheckResult(name, "passed", f"all {len(cases)} cases match the reference")
    if any(isinstance(a, _Raised) and isinstance(a.error, NotImplementedError) for a in actual):
        return CheckResult(name, "not attempted", "not attempted yet (it raises NotImplementedError)")
    # A missing `return` comes first: whatever else is wrong, the learner must see this.
    missing_return = next((i for i, (e, a) in enumerate(zip(expected, actual))
                           if a is None and e is not None and not isinstance(e, _ExpectedRaise)), None)
    mistake = None if missing_return is not None else _matching_mistake(exercise, cases, expected, actual)
    if mistake is not None:
        raised = next((a.error for a, p in zip(actual, problems)
                       if isinstance(a, _Raised) and p is not None), None)
        first = next(i for i, p in enumerate(problems) if p is not None)
        details = (f"hint: {mistake.hint}\nfirst seen on case {first + 1} of {len(cases)} "
                   f"({cases[first].label}): {problems[first].splitlines()[0]}")
        if raised is not None:
            details += "\non some cases your function raised:\n" + _where_it_raised(raised)
        return CheckResult(name, "mistake", f"looks like a classic mistake: {mistake.name}",
                           details, mistake=mistake.name)
    index = missing_return if missing_return is not None \
        else next(i for i, p in enumerate(problems) if p is not None)
    case, outcome = cases[index], actual[index]
    header = f"case {index + 1} of {len(cases)} ({case.label}); inputs: {_describe_inputs(case)}"
    if isinstance(outcome, _Raised):
        return CheckResult(name, "failed", problems[index].splitlines()[0],
                           header + "\n" + _where_it_raised(outcome.error))
    return CheckResult(name, "failed", problems[index].splitlines()[0],
                       header + "".join("\n" + line for line in problems[index].splitlines()[1:]))


def _run_safely(exercise: Exercise, fn, case: Case):
    try:
        return exercise.outputs(fn, case)
    except Exception as error:  # the learner's bug, reported rather than re-raised
        return _Raised(error)


def _reference_outcome(exercise: Exercise, case: Case):
    """The reference's output on `case`, or _ExpectedRaise where the case says it must raise."""
    if case.raises is None:
        return exercise.outputs(exercise.reference, case)  # raising here is a bug of the exercise
    outcome = _run_safely(exercise, exercise.reference, case)
    if isinstance(outcome, _Raised) and isinstance(outcome.error, case.raises):
        return _ExpectedRaise(case.raises)
    raise RuntimeError(f"exercise {exercise.name!r}: the reference should raise "
                       f"{case.raises.__name__} on case {case.label!r}, it did not")


def _matching_mistake(exercise: Exercise, cases, expected, actual) -> Mistake | None:
    """The catalogued mistake that best explains the learner's outputs, if any.

    A mistake explains them when the learner agrees with one of its wrong
    variants on at least one case where that variant is wrong, and is never right
    where the variant is wrong. Other cases may differ (a learner can make two
    mistakes at once); the variant agreeing on the most cases wins (an equal
    output weighs more than raising the same kind of exception).
    """
    best, best_score = None, 0
    for mistake in exercise.mistakes:
        for variant in mistake.variants:
            score = _agreement(exercise, variant, cases, expected, actual)
            if score > best_score:
                best, best_score = mistake, score
    return best


def _agreement(exercise: Exercise, variant, cases, expected, actual) -> int:
    score, agreed_on_a_value, raised_where_variant_did_not = 0, False, False
    for case, reference, outcome in zip(cases, expected, actual):
        wrong = _run_safely(exercise, variant, case)
        if isinstance(outcome, _Raised) and not isinstance(wrong, _Raised):
            raised_where_variant_did_not = True
        if _compare(reference, wrong, exercise) is None:
            continue  # the variant is right here: this case tells nothing about it
        if _compare(reference, outcome, exercise) is None:
            return 0  # right where this mistake goes wrong: not this mistake
        if _same_outcome(wrong, outcome, exercise):
            score += 1 if isinstance(outcome, _Raised) else 2
            agreed_on_a_value |= not isinstance(outcome, _Raised)
    if raised_where_variant_did_not and not agreed_on_a_value:
        return 0  # only a crash that resembles this mistake's crash: not enough to name it
    return score


def _same_outcome(first, second, exercise: Exercise) -> bool:
    if isinstance(first, _Raised) or isinstance(second, _Raised):
        return (isinstance(first, _Raised) and isinstance(second, _Raised)
                and type(first.error) is type(second.error))
    return _compare(first, second, exercise) is None


def _is_stub(fn) -> bool:
    """True when every function handed in has a body of only `...`, `pass` or NotImplementedError."""
    functions = fn if isinstance(fn, tuple) else (fn,)
    return bool(functions) and all(_body_is_stub(f) for f in functions)


def _body_is_stub(fn) -> bool:
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return False
    if not tree.body or not isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    body = tree.body[0].body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # the docstring
    return all(_is_placeholder(statement) for statement in body)


def _is_placeholder(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Pass):
        return True
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return statement.value.value is Ellipsis
    if isinstance(statement, ast.Raise) and statement.exc is not None:
        exc = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    return False


# ---- comparing outputs -----------------------------------------------------------------------

def _compare(expected, actual, exercise: Exercise, path: str = "output") -> str | None:
    """None when `actual` matches `expected`; otherwise a message, first line a summary."""
    if isinstance(expected, _ExpectedRaise):
        must = f"expected your function to raise {expected.kind.__name__} on this input"
        if isinstance(actual, _Raised):
            return None if isinstance(actual.error, expected.kind) \
                else f"{must}, it raised {type(actual.error).__name__}"
        return f"{must}, it returned {_short(actual)}"
    if isinstance(actual, _Raised):
        return f"your function raised {type(actual.error).__name__}"
    if actual is None and expected is not None:
        return (f"your function returned None: is a `return` statement missing?")
    if isinstance(expected, torch.Tensor):
        return _compare_tensors(expected, actual, exercise, path)
    if isinstance(expected, (tuple, list)):
        if not isinstance(actual, (tuple, list)) or len(actual) != len(expected):
            got = f"{type(actual).__name__} of length {len(actual)}" \
                if isinstance(actual, (tuple, list)) else type(actual).__name__
            return f"{path}: expected {_a(type(expected).__name__)} of {len(expected)} values, got {got}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            name = exercise.output_names[i] if path == "output" and i < len(exercise.output_names) \
                else f"{path}[{i}]"
            problem = _compare(e, a, exercise, name)
            if problem is not None:
                return problem
        return None
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return f"{path}: expected a dict, got {type(actual).__name__}"
        if set(expected) != set(actual):
            missing, extra = set(expected) - set(actual), set(actual) - set(expected)
            return (f"{path}: keys differ; missing {sorted(missing, key=str)}, "
                    f"unexpected {sorted(extra, key=str)}")
        for key in expected:
            problem = _compare(expected[key], actual[key], exercise, f"{path}[{key!r}]")
            if problem is not None:
                return problem
        return None
    if type(actual) is not type(expected) and not (isinstance(expected, float)
                                                   and isinstance(actual, (int, float))):
        return (f"{path}: expected {_a(type(expected).__name__)}, "
                f"got {type(actual).__name__} ({_short(actual)})")
    if isinstance(expected, float):
        return None if abs(expected - actual) <= exercise.atol + exercise.rtol * abs(expected) \
            else f"{path}: expected {expected:.6g}, got {actual:.6g}"
    if expected == actual:
        return None
    return f"{path}: expected {_short(expected, 120)}, got {_short(actual, 120)}"


def _a(noun: str) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


def _short(value, width: int = 80) -> str:
    if isinstance(value, torch.Tensor):
        return _describe(value)
    try:
        text = repr(value)
    except Exception:  # a learner's object whose repr is broken
        return f"a {type(value).__name__}"
    return text if len(text) <= width else text[: width - 3] + "..."


def _compare_tensors(expected: torch.Tensor, actual, exercise: Exercise, path: str) -> str | None:
    if not isinstance(actual, torch.Tensor):
        return f"{path}: expected a tensor, got {type(actual).__name__}"
    if actual.shape != expected.shape:
        return (f"{path}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    if actual.dtype != expected.dtype:
        return f"{path}: dtype {actual.dtype}, expected {expected.dtype}"
    if actual.device != expected.device:
        return f"{path}: on device {actual.device}, expected {expected.device}"
    if expected.dtype == torch.bool or not expected.is_floating_point():
        if torch.equal(actual, expected):
            return None
        where = tuple((actual != expected).nonzero()[0].tolist())
        return (f"{path}: values differ at {int((actual != expected).sum())} positions\n"
                f"first at index {where}: expected {expected[where].item()}, got {actual[where].item()}")
    if torch.isnan(actual).any() and not torch.isnan(expected).any():
        where = tuple(torch.isnan(actual).nonzero()[0].tolist())
        hint = f"; {exercise.nan_hint}" if exercise.nan_hint else ""
        return f"{path}: contains NaN (first at index {where}) where the reference has none{hint}"
    if torch.allclose(actual, expected, atol=exercise.atol, rtol=exercise.rtol, equal_nan=True):
        return None
    error = (actual.detach() - expected.detach()).abs().nan_to_num(float("inf"))
    where = tuple((error == error.max()).nonzero()[0].tolist())  # (torch.unravel_index imports sympy: slow)
    return (f"{path}: values differ (largest absolute error {error.max().item():.3g})\n"
            f"at index {where}: expected {expected[where].item():.5g}, got {actual[where].item():.5g}")


# ---- telling the learner where their code failed ---------------------------------------------

def _describe_inputs(case: Case) -> str:
    parts = [_describe(a) for a in case.args] + [f"{k}={_describe(v)}" for k, v in case.kwargs.items()]
    return ", ".join(parts)


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).replace('torch.', '')}{tuple(value.shape)}"
    if isinstance(value, (list, tuple)) and len(value) > 4:
        return f"{type(value).__name__} of {len(value)}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_describe(v)}" for k, v in list(value.items())[:8]) + "}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _where_it_raised(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    own = [f for f in frames if not _is_library_file(f.filename)]
    message = f"{type(error).__name__}: {error}".strip()
    if not own:
        return message
    frame = own[-1]
    line = (frame.line or "").strip()
    return f"in {frame.name}, line {frame.lineno}: {line}\n{message}"


def _is_library_file(filename: str) -> bool:
    path = os.path.abspath(filename)
    return path.startswith(_TORCH_DIR) or path.startswith(_PACKAGE_DIR) or "site-packages" in path


# ---- solutions --------------------------------------------------------------------------------

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
    """Reveal the reference solution of an exercise: the source of tfmlib's own function(s)."""
    exercise = REGISTRY.get(name)
    if exercise is None:
        raise ValueError(f"name: no exercise called {name!r}; known: {', '.join(sorted(REGISTRY))}")
    reference = exercise.reference if isinstance(exercise.reference, tuple) else (exercise.reference,)
    functions = exercise.solution_sources or reference
    source = "\n\n".join(textwrap.dedent(inspect.getsource(f)) for f in functions)
    return Solution(name, source)
