"""The graded half of a check that runs in the learner's kernel: run the answer, hand in what it did.

While nbgrader autogrades, the grader (teacher/trusted_grading.py) names an empty folder in the
environment variable TFMLIB_GRADE_OUT. Each graded test cell then calls `graded(name, my_...)`,
which runs the learner's function on the exercise's cases, exactly as `check` does, and writes
what it observed (outputs, changed arguments, gradients, exceptions) to `<folder>/<name>.json` as
plain data: numbers, strings, lists, and each tensor as its dtype, shape and bytes. It judges
nothing: the grader reads the file in its own process, where nothing the notebook did can reach,
recomputes the reference on the same seeded cases and decides the points. The file can carry no
code and no object of the learner's (a Tensor subclass, a float with its own `__sub__`): only
the values.

Outside grading (no TFMLIB_GRADE_OUT), `graded` is `check`: the learner sees the diagnosis.
"""
from __future__ import annotations

import base64
import json
import os
import sys

import torch

from .exercises import REGISTRY, check
from .exercises.core import CheckResult, Finding, _Raised, _run_safely, _where_it_raised, random_state_kept

ENV_VAR = "TFMLIB_GRADE_OUT"


def graded(name: str, fn) -> CheckResult:
    """`check(name, fn)`, or, while the grader runs, fn's outcomes handed in to it (a result
    that is not a PASS: without the grader, nothing handed in earns a point)."""
    folder = os.environ.get(ENV_VAR)
    if not folder or name not in REGISTRY:
        return check(name, fn)
    write(folder, name, outcomes(name, fn))
    return CheckResult(name, "failed", "handed in: the grader judges it outside this notebook")


def outcomes(name: str, fn) -> list[dict]:
    """What `fn` did on each of the exercise's cases, as plain data (see `encode`)."""
    exercise = REGISTRY[name]
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # as check does: the cases are tiny
        with random_state_kept():
            return [encode_outcome(_run_safely(exercise, fn, case)) for case in exercise.cases()]
    finally:
        torch.set_num_threads(threads)


def encode_outcome(outcome) -> dict:
    if isinstance(outcome, _Raised):
        error = outcome.error
        return {"raised": type(error).__name__, "message": _text(error), "checkers": _checkers_name(error),
                "builtin_bases": [c.__name__ for c in type(error).__mro__ if c.__module__ == "builtins"],
                "where": _where_it_raised(error),
                "found_by_the_checker": bool(getattr(error, "found_by_the_checker", False))}
    return {"value": encode(outcome.value), "changed": [str(c) for c in outcome.changed],
            "gradients": encode(outcome.gradients), "moved": encode(outcome.moved)}


def encode(value):
    """Plain JSON for a value: a tagged dict for each tensor and container, numbers as numbers."""
    if value is None or type(value) in (bool, str):
        return value
    if isinstance(value, Finding):
        return {"finding": str.__str__(value)}
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, torch.Tensor):
        return _encode_tensor(value)
    if isinstance(value, (list, tuple)):  # a namedtuple compares as the tuple it is
        return {"list" if isinstance(value, list) else "tuple": [encode(v) for v in value]}
    if isinstance(value, dict):
        return {"dict": [[encode(k), encode(v)] for k, v in value.items()]}
    return {"object": type(value).__name__}


def _encode_tensor(t: torch.Tensor) -> dict:
    try:
        t = t.as_subclass(torch.Tensor).detach().cpu().contiguous()
        raw = t.view(torch.int16) if t.dtype == torch.bfloat16 else t  # NumPy has no bfloat16
        data = raw.numpy().tobytes()
    except Exception:  # sparse, quantized, meta: not a value the grader can compare
        return {"object": "Tensor"}
    return {"tensor": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
            "data": base64.b64encode(data).decode("ascii")}


def _checkers_name(error: BaseException) -> str | None:
    """"tfmlib.exercises.shapes._ClashNamed" for the exceptions an exercise's run raises to say
    what it found (a clash named, a view of a transposed tensor), which the grader compares by
    type; None for any other."""
    kind = type(error)
    module = sys.modules.get(kind.__module__)
    if module is None or not kind.__module__.startswith("tfmlib.exercises."):
        return None
    return next((f"{kind.__module__}.{name}" for name, value in vars(module).items() if value is kind), None)


def _text(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:  # an exception whose __str__ is broken
        return ""


def write(folder: str, name: str, records: list[dict]) -> None:
    """Write `<folder>/<name>.json` whole (a temporary file, then renamed)."""
    path = os.path.join(folder, f"{name}.json")
    temporary = path + ".part"
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump({"exercise": name, "outcomes": records}, file)
    os.replace(temporary, path)
