"""Is the answer the learner's own work? The calls a check sees the learner's function make.

An answer can behave exactly like the reference because it *is* the reference: it calls
`tfmlib.masks.padding_mask`, runs a copy of `solution("padding_mask")`'s text, or calls
PyTorch's own version of what the exercise asks to write (`F.scaled_dot_product_attention`,
`torch.optim.Adam`, `F.layer_norm`). While `check` runs the learner's function, a `_Watch`
records every such call that the learner's own code makes, and `vetted` turns a PASS that rests
on one into a FAIL that says which call it was. Only a PASS is turned: a wrong answer keeps its diagnosis.

What counts, per exercise:
  - the exercise's reference function(s), called from the learner's code, or handed in under a
    learner's name (`my_padding_mask = padding_mask`);
  - a copy of a reference's code (the same instructions, names and constants: what `exec` of
    `solution(...)`'s text makes, renamed or not), wherever it runs;
  - `solution()` itself, called while the check runs;
  - the PyTorch (or NumPy) built-ins that FORBIDDEN lists for the exercise, and those a
    teacher adds in the course's nbgrader_config.py (the environment variable
    TFMLIB_FORBIDDEN_CALLS, a JSON object {"exercise": ["module.function", ...]}).

"The learner's code" is any code outside tfmlib and outside the installed libraries (torch,
NumPy, the standard library): a notebook cell, an `exec`'d string. A forbidden call counts when
the nearest caller outside the installed libraries is the learner's code, so the library
helpers an exercise allows (tfmlib's `multi_head_attention` in notebook 08) may use anything
inside, and the reference checked on its own (`check(name, reference)`, as the tests and the
mutation proof do) is not the learner's code calling it.

It is cheap: a profile hook (`sys.setprofile`) that looks each call up by identity in a dict,
on only while the learner's function runs (not while the check runs the reference).
"""
from __future__ import annotations

import dataclasses
import dis
import functools
import importlib
import inspect
import json
import os
import sys
import sysconfig
import types
from dataclasses import dataclass

import torch

from .solutions import solution
from .tracker import REGISTRY

ENV_VAR = "TFMLIB_FORBIDDEN_CALLS"

# PyTorch's (or NumPy's) own version of the operation an exercise asks to write, by exercise.
# A function, a builtin or a class (all its methods count). Helpers of earlier notebooks that an
# exercise's text allows are never listed, and neither is what a reference itself uses.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "broadcast_shape": ("torch.broadcast_shapes", "numpy.broadcast_shapes"),
    "causal_mask": ("torch.nn.Transformer.generate_square_subsequent_mask",
                    "torch.nn.modules.transformer._generate_square_subsequent_mask"),
    "scaled_dot_product_attention": ("torch.nn.functional.scaled_dot_product_attention",),
    "linear": ("torch.nn.functional.linear", "torch.nn.Linear"),
    "multi_head_attention": ("torch.nn.functional.multi_head_attention_forward",
                             "torch.nn.MultiheadAttention"),
    "dropout": ("torch.nn.functional.dropout", "torch.dropout", "torch.nn.Dropout", "torch.native_dropout",
                "torch.nn.functional.dropout1d", "torch.nn.functional.dropout2d", "torch.nn.functional.dropout3d"),
    "layer_norm": ("torch.nn.functional.layer_norm", "torch.layer_norm", "torch.native_layer_norm",
                   "torch.nn.LayerNorm"),
    "encoder_layer": ("torch.nn.TransformerEncoderLayer",),
    "encoder": ("torch.nn.TransformerEncoder", "torch.nn.TransformerEncoderLayer"),
    "decoder_layer": ("torch.nn.TransformerDecoderLayer",),
    "adam": ("torch.optim.Adam", "torch.optim.AdamW", "torch.optim.adam.adam"),
    "sgd_step": ("torch.optim.SGD", "torch.optim.sgd.sgd"),
    "adamw_step": ("torch.optim.AdamW", "torch.optim.Adam", "torch.optim.adam.adam"),
    "clip_grad_norm": ("torch.nn.utils.clip_grad_norm_", "torch.nn.utils.get_total_norm"),
    "label_smoothed_cross_entropy": ("torch.nn.functional.cross_entropy", "torch.nn.CrossEntropyLoss"),
}


@dataclass(frozen=True)
class Found:
    """One call that makes an answer not the learner's own: what was called, and what it is."""
    name: str   # e.g. "tfmlib.masks.padding_mask"
    kind: str   # "reference", "copy", "handed in", "solution" or "built-in"

    def message(self, exercise: str) -> tuple[str, str]:
        """(the one-line summary, the line under it) of the FAIL shown for this call."""
        if self.kind == "reference":
            return (f"your function calls `{self.name}`, the reference: write it yourself",
                    "the check compares your code with the reference, so it cannot be the reference")
        if self.kind == "handed in":
            return (f"your answer is `{self.name}` itself, the reference: write it yourself",
                    "define your own function with `def` and write its body")
        if self.kind == "copy":
            return (f"your function runs a copy of `{self.name}`, the reference "
                    f"(`solution(\"{exercise}\")`'s text): write it yourself", "")
        if self.kind == "solution":
            return ("your function calls `solution()`: write it yourself",
                    "`solution` shows the reference to read, not to run as the answer")
        return (f"your function calls `{self.name}`, PyTorch's own version of what this "
                f"exercise asks you to write: write it yourself",
                "it is a fine way to test your answer, in a cell of its own, not as the answer")


# ---- what each exercise forbids ------------------------------------------------------------------

@dataclass
class _Forbidden:
    """The calls forbidden to one exercise's answer, ready to look up during the check."""
    codes: dict[int, tuple[str, str]]           # id(code) -> (name, kind), any Python function
    builtins: dict[int, str]                    # id(builtin) -> name
    module_globals: dict[int, dict]             # id(a reference's code) -> its module's globals
    fingerprints: dict[tuple, str]              # a reference's fingerprint -> its name
    objects: list[tuple[object, str, str]]      # (object, name, kind): what must not be the answer


def forbidden(exercise) -> _Forbidden:
    """What `exercise`'s answer may not call: its reference(s), `solution`, FORBIDDEN's built-ins
    for it and the teacher's additions (TFMLIB_FORBIDDEN_CALLS)."""
    return _forbidden(exercise.name, os.environ.get(ENV_VAR, ""))


@functools.lru_cache(maxsize=None)
def _forbidden(name: str, teachers: str) -> _Forbidden:
    exercise = REGISTRY[name]
    references = exercise.reference if isinstance(exercise.reference, tuple) else (exercise.reference,)
    table = _Forbidden({}, {}, {}, {}, [])
    for reference in references:
        function = inspect.unwrap(reference)
        label = f"{function.__module__}.{function.__qualname__}"
        _add(table, reference, label, "reference")
        table.module_globals[id(function.__code__)] = function.__globals__
        table.fingerprints[fingerprint(function.__code__)] = label
    _add(table, solution, "solution", "solution")
    for dotted in FORBIDDEN.get(name, ()) + tuple(teachers_calls(teachers).get(name, ())):
        try:
            _add(table, resolve(dotted), dotted, "built-in")
        except (ImportError, AttributeError):  # a name this torch lacks: nothing to forbid
            pass
    return table


def teachers_calls(text: str) -> dict[str, list[str]]:
    """The teacher's additions, from TFMLIB_FORBIDDEN_CALLS's JSON; {} when empty or unreadable
    (a check never raises; the course generator validates the teacher's table instead)."""
    try:
        calls = json.loads(text) if text else {}
    except ValueError:
        return {}
    if not isinstance(calls, dict):
        return {}
    return {str(k): [str(v) for v in values] for k, values in calls.items() if isinstance(values, list)}


def resolve(dotted: str):
    """The object a dotted name stands for: "torch.nn.functional.layer_norm" -> the function."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            value = getattr(value, attribute)
        return value
    raise ImportError(f"no module in {dotted!r}")


def _add(table: _Forbidden, value, label: str, kind: str) -> None:
    """Forbid `value`: a Python function by its code (the innermost, under any decorator), a
    builtin by identity, a class by every function it defines (__init__, forward, step...)."""
    table.objects.append((value, label, kind))
    if isinstance(value, type):
        for attribute in vars(value).values():
            function = attribute.__func__ if isinstance(attribute, (staticmethod, classmethod)) else attribute
            if isinstance(function, types.FunctionType):
                table.codes[id(inspect.unwrap(function).__code__)] = (label, kind)
        return
    code = getattr(inspect.unwrap(value), "__code__", None)
    if isinstance(code, types.CodeType):
        table.codes[id(code)] = (label, kind)
    else:
        table.builtins[id(value)] = label


def fingerprint(code: types.CodeType) -> tuple:
    """What a copy of a function compiled from the same text shares with it, whatever its name, file and line: its
    instructions with their arguments (names, constants, the docstring included). Read through `dis`, not co_code,
    because the bytes depend on the module compiling them (3.11 calls a method of an imported module with LOAD_ATTR,
    of any other name with LOAD_METHOD): those two are counted as one."""
    return tuple((_SAME_OPERATION.get(i.opname, i.opname),
                  fingerprint(i.argval) if isinstance(i.argval, types.CodeType) else repr(i.argval))
                 for i in dis.get_instructions(code) if i.opname not in ("CACHE", "NOP", "RESUME"))


_SAME_OPERATION = {"LOAD_METHOD": "LOAD_ATTR"}


# ---- whose code is a frame? -------------------------------------------------------------------

_TFMLIB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY_DIRS = tuple({os.path.dirname(os.path.abspath(torch.__file__)),
                       *(os.path.abspath(p) for p in (sysconfig.get_paths()["stdlib"],
                                                       sysconfig.get_paths()["purelib"],
                                                       sysconfig.get_paths()["platlib"]))})


@functools.lru_cache(maxsize=4096)
def _owner(filename: str) -> str:
    """"tfmlib", "library" (torch, NumPy, the standard library: anything installed) or "learner"."""
    if filename.startswith("<frozen"):
        return "library"
    path = os.path.abspath(filename) if not filename.startswith("<") else filename
    if path.startswith(_TFMLIB_DIR + os.sep):
        return "tfmlib"
    if path.startswith(_LIBRARY_DIRS) or "site-packages" in path:
        return "library"
    return "learner"


def _called_by_learner(frame: types.FrameType | None) -> bool:
    """True when the nearest caller of a call, looking past the installed libraries' own frames
    (nn.Module.__call__ on the way to a forward), is the learner's code."""
    while frame is not None:
        owner = _owner(frame.f_code.co_filename)
        if owner != "library":
            return owner == "learner"
        frame = frame.f_back
    return False


# ---- watching a check ---------------------------------------------------------------------------

class _Watch:
    """The profile hook of one check: records the first forbidden call the learner's code makes.
    The table's objects stay alive as long as it (lru_cache), so their ids stay theirs."""

    def __init__(self, table: _Forbidden):
        self.table = table
        self.found: Found | None = None
        self.copies: dict[int, tuple[types.CodeType, str | None]] = {}  # id(code) -> (code, copy of)

    def __call__(self, frame, event, arg):
        if self.found is not None:
            return
        if event == "call":
            self._on_python_call(frame)
        elif event == "c_call" and id(arg) in self.table.builtins and _called_by_learner(frame):
            self.found = Found(self.table.builtins[id(arg)], "built-in")

    def _on_python_call(self, frame) -> None:
        code = frame.f_code
        entry = self.table.codes.get(id(code))
        if entry is not None:
            module_globals = self.table.module_globals.get(id(code))
            if module_globals is not None and frame.f_globals is not module_globals:
                return  # the reference's code rebound to other globals: a mutant calling its own helpers
            if _called_by_learner(frame.f_back):
                self.found = Found(*entry)
        elif _owner(code.co_filename) == "learner":
            copy_of = self._copy_of(code)
            if copy_of is not None:
                self.found = Found(copy_of, "copy")

    def _copy_of(self, code: types.CodeType) -> str | None:
        """The reference `code` is a copy of (compiled from its text), or None; remembered per code."""
        known = self.copies.get(id(code))
        if known is None or known[0] is not code:
            known = self.copies[id(code)] = (code, self.table.fingerprints.get(fingerprint(code)))
        return known[1]


def handed_in(table: _Forbidden, fn) -> Found | None:
    """The answer itself, rather than a function of the learner's: a forbidden built-in,
    `solution`, a copy of the reference, or the reference under a learner's name
    (`my_padding_mask = padding_mask`; the reference checked as itself, as the tests do, is fine)."""
    for function in fn if isinstance(fn, tuple) else (fn,):
        while isinstance(function, functools.partial):
            function = function.func
        for value, label, kind in table.objects:
            if function is value and (kind != "reference" or _bound_to_a_learners_name(value)):
                return Found(label, "handed in" if kind == "reference" else kind)
        code = getattr(inspect.unwrap(function), "__code__", None) if callable(function) else None
        if isinstance(code, types.CodeType) and id(code) not in table.module_globals:
            copy_of = table.fingerprints.get(fingerprint(code))
            if copy_of is not None:
                return Found(copy_of, "copy")
    return None


def _bound_to_a_learners_name(value) -> bool:
    """True when the code that called `check` holds `value` under a `my_...` name, the notebooks'
    names for the learner's answers."""
    frame = sys._getframe(1)
    while frame is not None and _owner(frame.f_code.co_filename) == "tfmlib":
        frame = frame.f_back
    if frame is None:
        return False
    return any(name.startswith("my_") and bound is value
               for namespace in (frame.f_locals, frame.f_globals) for name, bound in list(namespace.items()))


def watched(fn, watch: _Watch):
    """`fn` (or each function of a tuple), hooked to `watch` while it runs and only then: the
    reference's own runs, which the check makes too, cost nothing extra."""
    if isinstance(fn, tuple):
        return tuple(watched(f, watch) for f in fn)
    if not callable(fn):
        return fn

    @functools.wraps(fn)  # keeps its name and, through __wrapped__, its source (a stub is a stub)
    def answer(*args, **kwargs):
        previous = sys.getprofile()
        sys.setprofile(watch)
        try:
            return fn(*args, **kwargs)
        finally:
            sys.setprofile(previous)
    return answer


def vetted(name: str, fn, run_check):
    """`run_check(answer)`'s result, where `answer` is `fn` watched: a PASS turned into a FAIL
    when the answer is not the learner's own; a FAIL that says so too, after what it found."""
    exercise = REGISTRY.get(name) if isinstance(name, str) else None
    if exercise is None:
        return run_check(fn)
    table = forbidden(exercise)
    watch = _Watch(table)
    result = run_check(watched(fn, watch))
    found = handed_in(table, fn) or watch.found
    if found is None or result.status == "not attempted":
        return result
    summary, details = found.message(name)
    if not result:  # what it found stays first (a library's convention is named); this follows
        return dataclasses.replace(result, details=f"{result.details}\nand {summary}".lstrip())
    return dataclasses.replace(result, status="failed", message=summary, details=details)
