"""The points of a graded exercise, decided in the grader's process, not in the learner's kernel.

An answer that runs in the same process as its check can always rewrite the check (replace
`check`, patch torch, return a Tensor subclass that answers `torch.equal` with True). So during
`nbgrader autograde` the learner's kernel judges nothing:

1. `HandInFolder`, before the kernel starts, makes an empty folder for this submission and names it
   in TFMLIB_GRADE_OUT (the kernel inherits it; a sandbox binds it writable).
2. Each graded test cell calls `tfmlib.handin.graded(name, my_...)`, which runs the answer on the
   exercise's seeded cases and writes what it did there as plain JSON (tensors as dtype, shape and
   bytes): nothing in it can be code or an object of the learner's.
3. `TrustedVerdict`, after the kernel finished, in nbgrader's own process: reads each file, makes
   the same cases, runs the reference on them, compares (tfmlib.exercises.core.judge, the check's
   own comparison and catalogue of mistakes), applies the own-work rules to the submitted cells'
   source (own_work.py), and writes the result as the test cell's only output: a PASS, or a FAIL
   as an error, which nbgrader's SaveAutoGrades then scores 0. Whatever the kernel printed or
   raised in that cell is dropped.

The interactive `check()` a learner runs for self-study stays in the kernel; no point depends on it.
make_nbgrader_course.py copies this file and own_work.py next to the course's nbgrader_config.py,
whose last lines put the two preprocessors around nbgrader's Execute and SaveAutoGrades.
"""
from __future__ import annotations

import ast
import base64
import builtins
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

# torch, tfmlib and own_work.py are imported by the functions that judge, not with this file: the
# course's nbgrader_config.py imports it, and nbgrader reads that config for every command (list,
# collect, export, ...), which torch's import alone would slow by about 2 s of CPU each.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # own_work.py, beside this file

MAX_BYTES = 64 * 2**20   # a hand-in larger than this is not one the cases can produce
MAX_DEPTH = 20           # nor is a value nested deeper


class BadHandIn(ValueError):
    """The file is not what `graded` writes: the grader gives no points for it."""


# ---- reading a hand-in: plain data only -------------------------------------------------------

def decode(value, depth: int = 0):
    """The value `tfmlib.handin.encode` wrote: plain tensors, numbers, strings, lists, tuples, dicts."""
    if depth > MAX_DEPTH:
        raise BadHandIn("nested too deep")
    if value is None or type(value) in (bool, int, float, str):
        return value
    if not isinstance(value, dict) or len(value) not in (1, 3):
        raise BadHandIn(f"unexpected {type(value).__name__}")
    if "tensor" in value:
        return _decode_tensor(value)
    (kind, inner), = value.items()
    if kind in ("list", "tuple") and isinstance(inner, list):
        items = [decode(v, depth + 1) for v in inner]
        return items if kind == "list" else tuple(items)
    if kind == "dict" and isinstance(inner, list):
        return {_key(decode(k, depth + 1)): decode(v, depth + 1) for k, v in inner}
    if kind == "finding" and isinstance(inner, str):
        from tfmlib.exercises.core import Finding
        return Finding(inner)
    if kind == "object" and isinstance(inner, str):
        return Opaque(inner)
    raise BadHandIn(f"unexpected entry {kind!r}")


def _key(key):
    import torch
    if isinstance(key, (list, dict, torch.Tensor)):
        raise BadHandIn("a dict key that is not a plain value")
    return key


def _decode_tensor(value: dict) -> torch.Tensor:
    import torch
    dtype = getattr(torch, str(value.get("tensor")), None)
    shape = value.get("shape")
    if not isinstance(dtype, torch.dtype) or not (isinstance(shape, list) and all(
            type(n) is int and n >= 0 for n in shape)):
        raise BadHandIn("a tensor without a dtype and shape")
    data = base64.b64decode(value.get("data", ""), validate=True)
    storage = torch.int16 if dtype == torch.bfloat16 else dtype
    count = 1
    for n in shape:
        count *= n
    if len(data) != count * storage.itemsize:
        raise BadHandIn("a tensor whose bytes do not match its shape")
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    tensor = torch.frombuffer(bytearray(data), dtype=storage).reshape(shape)
    return tensor.view(dtype) if storage != dtype else tensor


class Opaque:
    """A value the answer returned that is no tensor, number, string or container: the
    comparison says it is the wrong type."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"a {self.type_name}"


_ERRORS: dict[tuple, type] = {}


def _error(record: dict) -> BaseException:
    """An exception of the kind the answer raised: one of the exercise's own (what its run found),
    the builtin type itself, or a stand-in of the same name under its nearest builtin base (a
    check only compares types and messages)."""
    name, bases = str(record.get("raised")), [str(b) for b in record.get("builtin_bases", [])]
    checkers = _checkers_class(record.get("checkers"))
    if checkers is not None:
        error = checkers(str(record.get("message", "")))
        error.where_it_raised = str(record.get("where", "")) or None
        return error
    base = next((getattr(builtins, b) for b in bases if isinstance(getattr(builtins, b, None), type)
                 and issubclass(getattr(builtins, b), BaseException)), Exception)
    if name == base.__name__ and base is not BaseException:
        kind = base
    else:
        kind = _ERRORS.setdefault((name, base), type(name, (base if base is not BaseException else Exception,), {}))
    error = kind(str(record.get("message", "")))
    error.where_it_raised = str(record.get("where", "")) or None
    if record.get("found_by_the_checker"):
        error.found_by_the_checker = True
    return error


def _checkers_class(dotted) -> type | None:
    """The exception class of tfmlib.exercises that `dotted` names, else None."""
    if not isinstance(dotted, str) or not dotted.startswith("tfmlib.exercises."):
        return None
    module, _, name = dotted.rpartition(".")
    value = getattr(sys.modules.get(module), name, None)
    return value if isinstance(value, type) and issubclass(value, Exception) else None


def decode_outcome(record) -> object:
    from tfmlib.exercises import core
    if not isinstance(record, dict):
        raise BadHandIn("an outcome that is not a record")
    if "raised" in record:
        return core._Raised(_error(record))
    changed = record.get("changed", [])
    if not isinstance(changed, list) or not all(isinstance(c, str) for c in changed):
        raise BadHandIn("changed arguments that are not names")
    gradients = decode(record.get("gradients"))
    if not (gradients is None or isinstance(gradients, (str, dict))):
        raise BadHandIn("gradients that are not a dict")
    return core._Outcome(decode(record.get("value")), tuple(changed), gradients, decode(record.get("moved")))


def read_hand_in(path: Path, name: str) -> list:
    """The outcomes in `path`, one per case of exercise `name`; BadHandIn when it is not a hand-in."""
    if path.is_symlink() or not path.is_file():
        raise FileNotFoundError(path)
    if path.stat().st_size > MAX_BYTES:
        raise BadHandIn("larger than any hand-in")
    with open(path, encoding="utf-8") as file:
        document = json.load(file)
    if not isinstance(document, dict) or document.get("exercise") != name \
            or not isinstance(document.get("outcomes"), list):
        raise BadHandIn("not the hand-in of this exercise")
    return [decode_outcome(record) for record in document["outcomes"]]


# ---- the verdict ------------------------------------------------------------------------------

def verdict(name: str, hand_in: Path, not_own_work: str | None = None, stub: bool = False) -> core.CheckResult:
    """The result of exercise `name` from its hand-in file, judged here: the answer's outcomes
    against the reference's on the same cases, then the own-work finding (one line) if any."""
    import torch
    from tfmlib.exercises import REGISTRY, core
    exercise = REGISTRY[name]
    if stub and not_own_work is None:  # a stub with something else that hands in an answer is judged
        return core.CheckResult(name, "not attempted", "not attempted yet: the stub's body is unchanged")
    cases = exercise.cases()
    try:
        actual = read_hand_in(hand_in, name)
        if len(actual) != len(cases):
            raise BadHandIn(f"{len(actual)} outcomes for {len(cases)} cases")
    except FileNotFoundError:
        result = core.CheckResult(name, "failed", "the grader received nothing from your answer",
                                  "its test cell did not hand it in: the answer ran past the time "
                                  "limit, a cell above failed, or the answer's function is not defined")
    except (BadHandIn, ValueError, TypeError, RecursionError) as error:
        result = core.CheckResult(name, "failed", "what reached the grader is not your answer's output",
                                  f"the hand-in file is not one the test cell writes ({error})")
    else:
        threads = torch.get_num_threads()
        try:
            torch.set_num_threads(1)
            result = core.judge(exercise, cases, actual)
        except Exception as error:  # a value too odd to compare
            result = core.CheckResult(name, "failed", "the grader could not compare your answer's output",
                                      f"{type(error).__name__}: {error}")
        finally:
            torch.set_num_threads(threads)
    if not_own_work is None or result.status == "not attempted":
        return result
    if not result:  # what it found stays first, as the check says it
        return core.CheckResult(name, result.status, result.message,
                                f"{result.details}\nand it is not your own work: {not_own_work}".lstrip(),
                                result.mistake)
    return core.CheckResult(name, "failed", f"not your own work: {not_own_work}")


# ---- in nbgrader ------------------------------------------------------------------------------

def graded_call(source: str) -> tuple[str, list[str]] | None:
    """(exercise, answer names) of a test cell's `_handin.graded("name", my_...)`, else None."""
    import own_work
    from tfmlib.exercises import REGISTRY
    tree = own_work.parse(source)
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "graded" and len(node.args) == 2 \
                and isinstance(node.args[0], ast.Constant) and node.args[0].value in REGISTRY:
            answer = node.args[1]
            names = [e.id for e in answer.elts] if isinstance(answer, ast.Tuple) else [getattr(answer, "id", "")]
            return node.args[0].value, names
    return None


def is_stub(tree: ast.Module | None, functions: list[str]) -> bool:
    """True when every answer function is defined in the cell with only the stub's body, and
    bound nowhere else in it (`my_f = MyAnswer()` below the stub's def is an answer)."""
    from tfmlib.exercises import core
    defs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)} if tree else {}
    return all(name in defs and _bindings(tree, name) == 1 for name in functions) and all(
        all(core._is_placeholder(s) for s in _without_docstring(defs[name].body)) for name in functions)


def _bindings(tree: ast.Module, name: str) -> int:
    """How many times the cell binds `name`: defs and classes, assignments, imports."""
    return sum(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name
               or isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load)
               or isinstance(node, ast.alias) and (node.asname or node.name).split(".")[0] == name
               for node in ast.walk(tree))


def _without_docstring(body):
    first = body[0] if body else None
    return body[1:] if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
        and isinstance(first.value.value, str) else body


def own_work_problems(notebook, source_notebook, answers: dict[str, list[str]]) -> dict[str, str]:
    """own_work.judge_submission on the submitted notebook: a cell is unchanged when nbgrader
    restored it (a locked cell) or its text is one of the instructor's version's (not an answer
    cell), so only the learner's code is judged."""
    import own_work
    from tfmlib.exercises.provenance import ENV_VAR as FORBIDDEN_CALLS_VAR
    lesson = {cell.source for cell in source_notebook.cells if cell.cell_type == "code"
              and not cell.metadata.get("nbgrader", {}).get("solution")}
    cells = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        tree = own_work.parse(cell.source)
        if tree is None:
            continue  # it does not run either
        meta = cell.metadata.get("nbgrader", {})
        answer = meta.get("grade_id", "").removesuffix("-answer") if meta.get("solution") else None
        # nbgrader put the teacher's text back into every locked cell before the run (a test
        # cell the learner deleted comes back at the end)
        locked = not meta.get("solution") and (meta.get("locked") or meta.get("grade"))
        cells.append(own_work.Cell(index, tree, answer is not None or not locked and cell.source not in lesson,
                                   answer if answer in answers else None))
    return own_work.judge_submission(cells, answers, os.environ.get(FORBIDDEN_CALLS_VAR, ""))


class HandInFolder(Preprocessor):
    """Before the kernel starts: a new, empty folder for this submission's hand-ins, named in
    TFMLIB_GRADE_OUT (the kernel inherits the grader's environment)."""

    enabled = Bool(True)  # nbconvert's preprocessors are off unless enabled; nbgrader's are on

    def preprocess(self, nb, resources):
        from tfmlib.handin import ENV_VAR
        folder = tempfile.mkdtemp(prefix="tfmlib-grade-")
        os.environ[ENV_VAR] = folder
        resources.setdefault("tfmlib", {})["grade_out"] = folder
        return nb, resources


class TrustedVerdict(Preprocessor):
    """After the kernel finished: each graded test cell's output replaced by the verdict computed
    here, from the hand-ins and the submitted source (see the module's docstring)."""

    enabled = Bool(True)

    def preprocess(self, nb, resources):
        import own_work
        from tfmlib.handin import ENV_VAR
        handed = resources.get("tfmlib", {}).get("grade_out") or os.environ.get(ENV_VAR, "")
        # In the grading sandbox (warm_kernels.py) the kernel wrote to the sandbox's own folder,
        # which WarmExecute names here; it is removed with the sandbox when the command ends.
        folder = Path(resources.get("tfmlib_grade_out") or handed)
        os.environ.pop(ENV_VAR, None)
        try:
            tests = [(cell, graded_call(cell.source)) for cell in nb.cells if cell.cell_type == "code"
                     and cell.metadata.get("nbgrader", {}).get("grade")
                     and not cell.metadata.get("nbgrader", {}).get("solution")]
            tests = [(cell, found) for cell, found in tests if found is not None]
            answers = {name: functions for _, (name, functions) in tests}
            problems = own_work_problems(nb, self._source_notebook(resources), answers)
            trees = {cell.metadata.nbgrader.grade_id.removesuffix("-answer"): own_work.parse(cell.source)
                     for cell in nb.cells if cell.cell_type == "code"
                     and cell.metadata.get("nbgrader", {}).get("solution")}
            for cell, (name, functions) in tests:
                result = verdict(name, folder / f"{name}.json", problems.get(name),
                                 stub=is_stub(trees.get(name), functions))
                cell.outputs = outputs(result)
        finally:
            if Path(handed).name.startswith("tfmlib-grade-"):
                shutil.rmtree(handed, ignore_errors=True)
        return nb, resources

    def _source_notebook(self, resources):
        """The instructor's version of this notebook, in the course's source folder."""
        coursedir = getattr(getattr(self.parent, "parent", None), "coursedir", None)
        if coursedir is None:
            from nbgrader.coursedir import CourseDirectory
            coursedir = CourseDirectory(config=self.config)
        meta = resources["nbgrader"]
        path = Path(coursedir.format_path(coursedir.source_directory, ".", meta["assignment"])) \
            / f"{meta['notebook']}.ipynb"
        return nbformat.read(path, as_version=4)


def outputs(result: core.CheckResult) -> list:
    """The test cell's outputs for `result`: its text, and for anything but a PASS an error, which
    nbgrader scores 0 (as it scored the failed `assert` before)."""
    text = str(result)
    shown = [nbformat.v4.new_output("stream", name="stdout", text=f"{text}\n(judged by the grader, outside the notebook)\n")]
    if not result:
        shown.append(nbformat.v4.new_output("error", ename="AssertionError", evalue=text,
                                            traceback=[f"AssertionError: {text}"]))
    return shown


def autograde_preprocessors(steps=None) -> list:
    """nbgrader autograde's preprocessors (`steps`, or nbgrader's own) with HandInFolder before
    the step that runs the kernel and TrustedVerdict before the one that saves the grades."""
    from nbgrader.converters.autograde import Autograde
    from nbgrader.preprocessors import Execute, SaveAutoGrades
    if not isinstance(steps, list):
        steps = Autograde.class_traits()["autograde_preprocessors"].default()
    result = []
    for step in steps:
        if isinstance(step, type) and issubclass(step, SaveAutoGrades):
            result.append(TrustedVerdict)
        result.append(step)
        if isinstance(step, type) and issubclass(step, Execute):
            result.insert(len(result) - 1, HandInFolder)
    if HandInFolder not in result or TrustedVerdict not in result:
        raise ValueError("autograde_preprocessors: no Execute or no SaveAutoGrades step to grade around")
    return result
