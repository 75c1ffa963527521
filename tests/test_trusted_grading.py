"""The graded verdict outside the learner's kernel, and the own-work rules read from the source (issue 31).

The kernel's half (tfmlib/handin.py) writes what an answer did as plain data; the grader's half
(teacher/trusted_grading.py) reads it back as plain tensors and numbers, judges it with the
check's own comparison, and applies teacher/own_work.py's rules to the submitted cells. Here
each half is tried on its own and together, without nbgrader: what a lying return value becomes,
what a forged file earns, which cheats each rule catches and in one line says why, and that
honest answers in many styles, the course's own model answers included, break no rule.
tests/test_nbgrader.py takes the same cheats through the real nbgrader round trip.
"""
from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
import torch

from tfmlib import handin
from tfmlib.exercises import REGISTRY, check

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "teacher"))
import own_work  # noqa: E402
import trusted_grading  # noqa: E402

_spec = importlib.util.spec_from_file_location("make_nbgrader_course", REPO / "teacher" / "make_nbgrader_course.py")
make_course = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_course)


def hand_in(tmp_path: Path, name: str, fn) -> Path:
    handin.write(str(tmp_path), name, handin.outcomes(name, fn))
    return tmp_path / f"{name}.json"


def my_padding_mask(token_ids, pad_id):
    return (token_ids != pad_id)[:, None, None, :]


def inverted_padding_mask(token_ids, pad_id):
    return (token_ids == pad_id)[:, None, None, :]


class Agreeable(torch.Tensor):
    """A Tensor subclass that says it equals anything (class 6 of the issue)."""
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.equal, torch.allclose, torch.Tensor.__eq__, torch.isclose):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


class AnyFloat(float):
    def __sub__(self, other):
        return 0.0
    __rsub__ = __sub__


# ---- the hand-in: plain data both ways -----------------------------------------------------------

@pytest.mark.parametrize("value", [
    torch.randn(2, 3), torch.randn(2, 3, dtype=torch.float64).mT, torch.ones(2, dtype=torch.bfloat16),
    torch.tensor([[True, False]]), torch.zeros(0, 4), torch.arange(6).reshape(2, 3)[:, ::2],
    (1, 2.5, "x", None, True), [torch.ones(1), {"w": torch.ones(2)}], {"a": [1, 2], 3: (4,)},
])
def test_a_value_comes_back_as_it_went(value):
    back = trusted_grading.decode(json.loads(json.dumps(handin.encode(value))))

    def same(a, b):
        if isinstance(a, torch.Tensor):
            return type(b) is torch.Tensor and a.dtype == b.dtype and torch.equal(a, b)
        if isinstance(a, (list, tuple)):
            return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        return type(a) is type(b) and a == b
    assert same(value, back)


def test_lying_values_come_back_as_the_plain_values_they_hold():
    liar = torch.zeros(3).as_subclass(Agreeable)
    back = trusted_grading.decode(json.loads(json.dumps(handin.encode((liar, AnyFloat(2.0))))))
    assert type(back[0]) is torch.Tensor and not torch.equal(back[0], torch.ones(3))
    assert type(back[1]) is float and back[1] - 1.0 == 1.0


@pytest.mark.parametrize("document, why", [
    ({"exercise": "padding_mask", "outcomes": [{"value": {"pickle": "gASV..."}}]}, "unexpected entry"),
    ({"exercise": "padding_mask", "outcomes": [{"value": {"tensor": "float32", "shape": [2],
                                                          "data": "AAAA"}}]}, "bytes do not match"),
    ({"exercise": "padding_mask", "outcomes": [{"value": {"tensor": "Tensor", "shape": [1],
                                                          "data": "AAAAAA=="}}]}, "without a dtype"),
    ({"exercise": "causal_mask", "outcomes": []}, "not the hand-in of this exercise"),
    ({"exercise": "padding_mask", "outcomes": [{"value": {"list": [{"list": []}] * 2}}] * 100}, "outcomes for"),
])
def test_a_file_that_is_not_a_hand_in_earns_nothing(tmp_path, document, why):
    path = tmp_path / "padding_mask.json"
    path.write_text(json.dumps(document))
    result = trusted_grading.verdict("padding_mask", path)
    assert result.status == "failed" and "not your answer's output" in result.message and why in result.details


def test_a_deeply_nested_value_is_refused():
    deep = 1
    for _ in range(50):
        deep = {"list": [deep]}
    with pytest.raises(trusted_grading.BadHandIn, match="too deep"):
        trusted_grading.decode(deep)


# ---- the verdict: the check's comparison, in the grader's process -------------------------------

@pytest.mark.parametrize("fn", [my_padding_mask, inverted_padding_mask,
                                lambda token_ids, pad_id: token_ids, lambda token_ids, pad_id: None])
def test_the_verdict_is_what_check_says(tmp_path, fn):
    """The same result as the in-kernel check, from the hand-in alone: PASS, a named mistake, a diagnosis."""
    assert str(trusted_grading.verdict("padding_mask", hand_in(tmp_path, "padding_mask", fn))) == \
        str(check("padding_mask", fn))


def test_a_raised_exception_is_told_as_check_tells_it(tmp_path):
    def my_broadcast_shape(shape_a, shape_b):
        return tuple(max(x, y) for x, y in zip(shape_a, shape_b[5]))
    got = trusted_grading.verdict("broadcast_shape", hand_in(tmp_path, "broadcast_shape", my_broadcast_shape))
    assert str(got) == str(check("broadcast_shape", my_broadcast_shape))
    assert "in my_broadcast_shape, line" in got.details


@pytest.mark.parametrize("fn", [
    lambda token_ids, pad_id: torch.zeros(token_ids.shape[0], 1, 1, token_ids.shape[1],
                                          dtype=torch.bool).as_subclass(Agreeable),
    lambda token_ids, pad_id: AnyFloat(0.0),
])
def test_return_values_that_lie_to_the_comparison_fail(tmp_path, fn):
    assert trusted_grading.verdict("padding_mask", hand_in(tmp_path, "padding_mask", fn)).status == "failed"


def test_check_replaced_in_the_kernel_changes_nothing(tmp_path, monkeypatch):
    import tfmlib.exercises
    monkeypatch.setattr(tfmlib.exercises, "check", lambda *args: True)
    monkeypatch.setattr(torch, "equal", lambda *args: True)
    path = hand_in(tmp_path, "padding_mask", inverted_padding_mask)
    monkeypatch.undo()
    assert trusted_grading.verdict("padding_mask", path).mistake == "polarity inverted"


def test_nothing_handed_in_and_a_stub_earn_nothing(tmp_path):
    assert trusted_grading.verdict("padding_mask", tmp_path / "none.json").message == \
        "the grader received nothing from your answer"
    assert trusted_grading.verdict("padding_mask", tmp_path / "none.json", stub=True).status == "not attempted"


STUB = 'def my_padding_mask(token_ids, pad_id):\n    """(B, L) ids -> (B, 1, 1, L) bool."""\n    ...  # your code here\n'


@pytest.mark.parametrize("cell, stub", [
    (STUB, True),
    (STUB + "\ncheck('padding_mask', my_padding_mask)", True),
    (STUB.replace("...", "return (token_ids != pad_id)[:, None, None, :]  #"), False),
    # the stub's def left in place, the answer bound to its name below it (a class with __call__)
    (STUB + "\nclass Mask:\n    def __call__(self, t, p):\n        return t != p\nmy_padding_mask = Mask()", False),
    (STUB + "\nfrom mine import padding as my_padding_mask", False),
])
def test_a_stub_is_the_stubs_def_alone(cell, stub):
    assert trusted_grading.is_stub(own_work.parse(cell), ["my_padding_mask"]) is stub


def test_a_pass_that_is_not_own_work_fails_and_a_fail_says_both(tmp_path):
    found = "your answer to padding_mask uses `import os` (processes): why"
    passed = trusted_grading.verdict("padding_mask", hand_in(tmp_path, "padding_mask", my_padding_mask), found)
    assert passed.status == "failed" and passed.message == f"not your own work: {found}"
    failed = trusted_grading.verdict("padding_mask", hand_in(tmp_path, "padding_mask", inverted_padding_mask), found)
    assert failed.mistake == "polarity inverted" and found in failed.details


def test_outside_grading_graded_is_check(monkeypatch):
    monkeypatch.delenv(handin.ENV_VAR, raising=False)
    assert str(handin.graded("padding_mask", my_padding_mask)) == str(check("padding_mask", my_padding_mask))


def test_while_grading_graded_hands_in_and_is_no_pass_by_itself(tmp_path, monkeypatch):
    monkeypatch.setenv(handin.ENV_VAR, str(tmp_path))
    result = handin.graded("padding_mask", my_padding_mask)
    assert not result and (tmp_path / "padding_mask.json").exists()


# ---- the own-work rules ---------------------------------------------------------------------------

LESSON = """\
import torch
import math
import tfmlib
from tfmlib import PAD, broadcast_shape, causal_mask, padding_mask, target_mask
from tfmlib.exercises import check"""
NAMES = {"padding_mask": ["my_padding_mask"], "causal_mask": ["my_causal_mask"], "target_mask": ["my_target_mask"],
         "layer_norm": ["my_layer_norm"], "adam": ["my_adam_init", "my_adam_step"]}
TEACHERS = json.dumps({"target_mask": ["torch.tril"]})


def findings(answer: str, name: str = "target_mask", extra: tuple[str, ...] = ()) -> str | None:
    """The own-work finding for `answer` (an answer cell) with `extra` cells the learner added."""
    cells = [own_work.Cell(0, own_work.parse(LESSON), False),
             own_work.Cell(1, own_work.parse(answer), True, name)]
    cells += [own_work.Cell(2 + i, own_work.parse(source), True) for i, source in enumerate(extra)]
    return own_work.judge_submission(cells, {name: NAMES[name]}, TEACHERS).get(name)


HONEST = """\
def my_target_mask(token_ids, pad_id):
    pad = my_padding_mask(token_ids, pad_id)
    causal = my_causal_mask(token_ids.shape[1])
    return pad & causal"""

HONEST_ANSWERS = [
    HONEST,
    # the three-line target_mask with the allowed helpers, as the reference itself writes it
    """\
def my_target_mask(token_ids, pad_id):
    pad = padding_mask(token_ids, pad_id)
    causal = causal_mask(token_ids.size(1), device=token_ids.device)
    return pad & causal""",
    """\
from tfmlib.masks import causal_mask, padding_mask
def my_target_mask(token_ids, pad_id):
    return padding_mask(token_ids, pad_id) & causal_mask(token_ids.shape[1])""",
    """\
def my_target_mask(token_ids, pad_id, input=None):
    L = token_ids.shape[-1]
    keep = torch.arange(L)[None, :] <= torch.arange(L)[:, None]
    causal_mask = keep[None, None]        # a variable of that name is not the reference
    return (token_ids != PAD if pad_id is None else token_ids != pad_id)[:, None, None, :] & causal_mask""",
]


@pytest.mark.parametrize("answer", HONEST_ANSWERS)
def test_honest_target_masks_break_no_rule(answer):
    assert findings(answer) is None


CHEATS = {  # issue 31's classes and more, each with the rule that must catch it
    "watcher off": ("import sys\nsys.setprofile(None)\n" + HONEST, "(introspection)"),
    "settrace": ("def my_target_mask(t, p):\n    import sys as s\n    s.settrace(None)\n    return t", "(introspection)"),
    "thread": ("import threading\n" + HONEST, "(threads)"),
    "futures": ("from concurrent.futures import ThreadPoolExecutor\n" + HONEST, "(threads)"),
    "multiprocessing": ("import multiprocessing as mp\n" + HONEST, "(threads)"),
    "library file name": ("exec(compile('x = 1', '/usr/lib/python3/torch/x.py', 'exec'))\n" + HONEST, "(introspection)"),
    "eval": ("def my_target_mask(t, p):\n    return eval('target' + '_mask')(t, p)", "(introspection)"),
    "code object": ("def my_target_mask(t, p):\n    return my_padding_mask.__code__", "(introspection)"),
    "FunctionType": ("import types\n" + HONEST, "(introspection)"),
    "inspect": ("def my_target_mask(t, p):\n    import inspect\n    return inspect.getsource(t)", "(introspection)"),
    "partial": ("import functools\nmy_target_mask = functools.partial(target_mask)", "(imports)"),
    "reference": ("def my_target_mask(t, p):\n    return target_mask(t, p)", "(reference)"),
    "reference aliased": ("from tfmlib.masks import target_mask as tm\n" + HONEST, "(reference)"),
    "reference through tfmlib": ("def my_target_mask(t, p):\n    return tfmlib.masks.target_mask(t, p)", "(reference)"),
    "tfmlib module": ("def my_target_mask(t, p):\n    return tfmlib.masks.padding_mask(t, p)", "(tfmlib)"),
    "import tfmlib": ("import tfmlib.masks as m\n" + HONEST, "(tfmlib)"),
    "not a helper": ("from tfmlib.embeddings import embed\n" + HONEST, "(tfmlib)"),
    "solution": ("from tfmlib.exercises import solution\n" + HONEST, "(solution)"),
    "os": ("def my_target_mask(t, p):\n    import os\n    return t", "(processes)"),
    "subprocess": ("import subprocess\n" + HONEST, "(processes)"),
    "ctypes": ("import ctypes\n" + HONEST, "(processes)"),
    "importlib": ("import importlib\n" + HONEST, "(processes)"),
    "__import__": ("def my_target_mask(t, p):\n    return __import__('tfmlib').target_mask(t, p)", "(introspection)"),
    "open": ("def my_target_mask(t, p):\n    return open('/etc/passwd')", "(processes)"),
    "getattr computed": ("def my_target_mask(t, p):\n    return getattr(t, 'tr' + 'il')()", "(introspection)"),
    "getattr by name": ("def my_target_mask(t, p):\n    return getattr(t, 'tril')()", "(built-in)"),
    "torch.ops": ("def my_target_mask(t, p):\n    return torch.ops.aten.tril(t)", "(internals)"),
    "torch._C": ("def my_target_mask(t, p):\n    return torch._C._VariableFunctions.tril(t)", "(internals)"),
    "native": ("def my_target_mask(t, p):\n    return torch.native_norm(t)", "(internals)"),
    "private": ("def my_target_mask(t, p):\n    return torch._foreach_mul(t, 1)", "(internals)"),
    "tril function": ("def my_target_mask(t, p):\n    return torch.tril(t)", "(built-in)"),
    "tril method": ("def my_target_mask(t, p):\n    return t.tril()", "(built-in)"),
    "tril imported": ("from torch import tril as lower\n" + HONEST, "(built-in)"),
    "subclass": ("class T(torch.Tensor):\n    @classmethod\n    def __torch_function__(cls, *a):\n"
                 "        return True\n" + HONEST, "(introspection)"),
    "patch check": ("import tfmlib.exercises as e\ne.check = print\n" + HONEST, "(changes)"),
    "patch torch": ("torch.equal = lambda *a: True\n" + HONEST, "(changes)"),
    "patch through an alias": ("t = torch.Tensor\nt.tril = t.triu\n" + HONEST, "(changes)"),
    "global": ("def my_target_mask(t, p):\n    global my_padding_mask\n    return t", "(changes)"),
    "history": ("def my_target_mask(t, p):\n    return In[-1]", "(introspection)"),
    "get_ipython": ("get_ipython().run_cell('x = 1')\n" + HONEST, "(introspection)"),
    "shell": ("!cat /etc/passwd\n" + HONEST, "(processes)"),
    "hand-in": ("import tfmlib.handin\n" + HONEST, "(hand-in)"),
    "star import": ("from tfmlib import *\n" + HONEST, "(introspection)"),
    "getattr handed on": ("g = getattr\n" + HONEST, "(introspection)"),
    "torch.os": ("def my_target_mask(t, p):\n    return torch.os.environ", "(processes)"),
    "torch.sys": ("def my_target_mask(t, p):\n    return torch.sys.modules", "(introspection)"),
    "jit fork": ("def my_target_mask(t, p):\n    return torch.jit.fork(my_padding_mask, t, p)", "(threads)"),
    "torch.load": ("def my_target_mask(t, p):\n    return torch.load('answer.pt', weights_only=False)", "(processes)"),
    "fullwidth exec": ("\uff45\uff58\uff45\uff43('x = 1')\n" + HONEST, "(introspection)"),
    "vars": ("def my_target_mask(t, p):\n    return vars(tfmlib)['target_mask'](t, p)", "(introspection)"),
    # the attack trial of the trusted grading: names and code in strings that a library reads
    "typing eval": ("import typing\ndef my_target_mask(t, p):\n    def probe(x: 'target_' + 'mask'): pass\n"
                    "    return typing.get_type_hints(probe)['x'](t, p)", "(introspection)"),
    "operator through typing": ("import typing\ndef my_target_mask(t, p):\n"
                                "    return typing.operator.attrgetter('tr' + 'il')(t)()", "(introspection)"),
    "Formatter.get_field": ("import string\ndef my_target_mask(t, p):\n"
                            "    return string.Formatter().get_field('0.tr' + 'il', (t,), {})[0]()", "(introspection)"),
    "benchmark timer": ("def my_target_mask(t, p):\n    out = []\n"
                        "    torch.utils.benchmark.Timer('out.append(1)', globals={'out': out}).timeit(1)\n"
                        "    return out", "(introspection)"),
    "numpy measure": ("import numpy as np\ndef my_target_mask(t, p):\n    np.testing.measure('x = 1')\n    return t",
                      "(introspection)"),
    "TorchScript source": ("def my_target_mask(t, p):\n"
                           "    return torch.jit.CompilationUnit('def f(x):\\n    return x\\n').f(t)", "(introspection)"),
    "fx by name": ("def my_target_mask(t, p):\n    g = torch.fx.Graph()\n"
                   "    g.output(g.call_method('tr' + 'il', (g.placeholder('x'),)))\n    return g", "(introspection)"),
    "overrides table": ("def my_target_mask(t, p):\n"
                        "    return [f for f in torch.overrides.get_testing_overrides() if 'tri' + 'l ' in repr(f)]",
                        "(introspection)"),
    "default argument": ("def my_target_mask(t, p, target_mask=target_mask):\n    return target_mask(t, p)",
                         "(reference)"),
    "decorator": ("@lambda f, target_mask=target_mask: target_mask\ndef my_target_mask(t, p):\n    pass",
                  "(reference)"),
    "type() namespace": ("T = type('T', (torch.Tensor,), {'__torch_' + 'function__': print})\n" + HONEST,
                         "(introspection)"),
    "file read by numpy": ("import numpy as np\ndef my_target_mask(t, p):\n    return np.fromfile('masks.py')",
                           "(processes)"),
}


@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_each_cheat_breaks_the_rule_meant_for_it_and_the_message_says_why_in_one_line(cheat):
    answer, rule = CHEATS[cheat]
    found = findings(answer)
    assert found is not None and rule in found, found
    assert "\n" not in found and found.startswith("your answer to target_mask uses ")


@pytest.mark.parametrize("cell, rule", [
    ("from tfmlib.handin import graded\ngraded('target_mask', target_mask)", "(hand-in)"),
    ("_handin.graded('target_mask', target_mask)", "(hand-in)"),
    ("import os\nos.remove('x')", "(processes)"),
    ("my_target_mask = target_mask", "(changes)"),
    ("def my_target_mask(t, p):\n    return target_mask(t, p)", "(changes)"),
    ("import tfmlib.exercises\ntfmlib.exercises.check = lambda *a: True", "(changes)"),
    ("torch.Tensor.__eq__ = lambda *a: True", "(introspection)"),
    ("import threading\nthreading.Thread(target=print).start()", "(threads)"),
])
def test_an_escape_route_in_any_cell_the_learner_added_costs_the_exercise(cell, rule):
    found = findings(HONEST, extra=(cell,))
    assert found is not None and rule in found and found.startswith("code cell 3 uses"), found


def test_a_helper_in_another_cell_is_judged_as_part_of_the_answer():
    answer = "def my_target_mask(t, p):\n    return lower_triangle(t, p)"
    assert "(built-in)" in findings(answer, extra=("def lower_triangle(t, p):\n    return torch.tril(t)",))
    assert findings(answer, extra=("def lower_triangle(t, p):\n    return t",)) is None


@pytest.mark.parametrize("cell", [
    "print(torch.equal(my_target_mask(ids, 0), target_mask(ids, 0)))",   # testing against the reference
    "import torch.nn.functional as F\nx = F.layer_norm(torch.ones(3), (3,))",
    "import matplotlib.pyplot as plt\nplt.plot([1, 2])",
    "for input in range(3):\n    print(input)",
])
def test_cells_that_only_try_things_out_break_no_rule(cell):
    assert findings(HONEST, extra=(cell,)) is None


def test_the_rules_of_an_exercise_name_its_references_solution_and_builtins():
    rules = own_work.rules_for("target_mask", TEACHERS)
    assert rules.forbidden == {"target_mask": "reference", "solution": "solution", "tril": "built-in"}
    assert {"padding_mask", "causal_mask"} <= rules.helpers and "target_mask" not in rules.helpers
    assert own_work.rules_for("layer_norm").forbidden["LayerNorm"] == "built-in"


# ---- copies of the reference --------------------------------------------------------------------

LONG_REFERENCES = sorted((name, position) for name in REGISTRY
                         for position, reference in enumerate(own_work.references_of(name))
                         if len(own_work._reference_tokens(reference)) >= own_work.MIN_TOKENS)


class _Renamed(ast.NodeTransformer):
    """Every variable and argument renamed (v0, v1, ...), as a learner hiding a paste would."""

    def __init__(self):
        self.names: dict[str, str] = {}

    def _new(self, name: str) -> str:
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_arg(self, node):
        node.arg = self._new(node.arg)
        return node

    def visit_Name(self, node):
        if node.id in self.names or not isinstance(node.ctx, ast.Load):
            node.id = self._new(node.id)
        return node


def pasted(reference, leave_out: int) -> ast.FunctionDef:
    """The reference's source with its variables renamed and its `leave_out`-th simple line gone."""
    tree = _Renamed().visit(ast.parse(textwrap.dedent(inspect.getsource(reference))).body[0])
    simple = [(body, child) for parent in ast.walk(tree) for field in ("body", "orelse")
              if isinstance(body := getattr(parent, field, None), list) and len(body) > 1
              for child in body if isinstance(child, (ast.Assign, ast.Expr, ast.AugAssign))]
    body, child = simple[leave_out % len(simple)]
    body.remove(child)
    return tree


def passes(name: str, position: int, tree: ast.FunctionDef) -> bool:
    """Whether the pasted function, run, passes the exercise's check (with the other references
    of a pair as they are)."""
    references = own_work.references_of(name)
    namespace = dict(references[position].__globals__)
    exec(compile(ast.Module([tree], []), "<pasted>", "exec"), namespace)
    answer = list(references)
    answer[position] = namespace[tree.name]
    return bool(check(name, tuple(answer) if len(answer) > 1 else answer[0]))


@pytest.mark.parametrize("name, position", LONG_REFERENCES)
def test_a_reference_pasted_with_renamed_variables_and_a_line_left_out_is_a_copy_or_wrong(name, position):
    """Left out: the first, second and last simple line. Where so much of the code goes with the
    line that too little is left to call it a copy, the answer no longer works: no points either."""
    reference = own_work.references_of(name)[position]
    for leave_out in (0, 1, -1):
        tree = pasted(reference, leave_out)
        share = own_work.copy_of(tree, reference)
        assert share >= own_work.COPY_SHARE or not passes(name, position, tree), (name, leave_out, share)
    assert own_work.copy_of(_Renamed().visit(ast.parse(textwrap.dedent(inspect.getsource(reference))).body[0]),
                            reference) == 1.0


def _honest_styles():
    """The right answers in other styles that the check tests already pass."""
    import test_checks_label_smoothing as smoothing
    import test_checks_variations as variations
    styles = list(variations.CORRECT)
    styles += [("label_smoothed_cross_entropy", fn) for fn in (
        smoothing.with_target_distribution, smoothing.with_a_loop, smoothing.with_where,
        smoothing.in_float64_inside, smoothing.einsum_style)]
    return [(name, inspect.unwrap(fn)) for name, fn in styles if hasattr(inspect.unwrap(fn), "__code__")]


@pytest.mark.parametrize("name, fn", _honest_styles(), ids=lambda v: getattr(v, "__name__", v))
def test_right_answers_in_other_styles_are_no_copies_and_break_no_rule(name, fn):
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    assert (own_work.copy_of(tree.body[0], own_work.references_of(name)[0]) or 0) < own_work.COPY_SHARE
    rules = own_work.rules_for(name)
    assert own_work.answer_problem(tree, rules, set()) is None
    assert own_work.escapes(tree, set()) is None


def test_the_model_answers_break_no_rule_but_the_long_ones_are_copies():
    """The instructor's answers (the reference's own body) of every notebook: no import, name or
    escape rule fails them; those long enough to tell are copies, as a learner's paste would be."""
    copies, judged = set(), 0
    for path in make_course.course_notebooks([], bonus=True):
        notebook, _ = make_course.source_notebook(nbformat.read(path, as_version=4))
        cells, answers = [], {}
        for index, cell in enumerate(notebook.cells):
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type != "code" or meta.get("grade"):
                continue
            tree = own_work.parse(cell.source)
            name = meta["grade_id"].removesuffix("-answer") if meta.get("solution") else None
            if name:
                answers[name] = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
            cells.append(own_work.Cell(index, tree, name is not None, name))
        for name, why in own_work.judge_submission(cells, answers).items():
            assert why.endswith(own_work.WHY["copy"]), why
            copies.add(name)
        judged += len(answers)
    assert judged == 41
    assert copies == {name for name, _ in LONG_REFERENCES}


def test_an_answer_cell_stripped_of_its_marks_is_still_judged_as_the_answer():
    cells = [own_work.Cell(0, own_work.parse(LESSON), False),
             own_work.Cell(1, own_work.parse("def my_target_mask(t, p):\n    return target_mask(t, p)"), True)]
    found = own_work.judge_submission(cells, {"target_mask": ["my_target_mask"]}, TEACHERS)["target_mask"]
    assert found.startswith("code cell 2 uses `def my_target_mask`, an answer's name outside its own cell")


def test_the_exercises_own_exceptions_come_back_as_themselves(tmp_path):
    """broadcast_shape's clash cases want a ValueError that names both sizes (the exercise's run
    raises a class of its own for it): a right answer passes from its hand-in as it does in check."""
    def my_broadcast_shape(shape_a, shape_b):
        a = (1,) * (len(shape_b) - len(shape_a)) + tuple(shape_a)
        b = (1,) * (len(shape_a) - len(shape_b)) + tuple(shape_b)
        for x, y in zip(a, b):
            if x != y and 1 not in (x, y):
                raise ValueError(f"sizes {x} and {y} clash")
        return tuple(y if x == 1 else x for x, y in zip(a, b))
    assert trusted_grading.verdict("broadcast_shape", hand_in(tmp_path, "broadcast_shape", my_broadcast_shape))


def test_the_courses_config_imports_no_torch(tmp_path):
    """nbgrader reads the course's nbgrader_config.py for every command (list, collect, export, ...):
    the grading helpers it imports leave torch and tfmlib to the verdict, when an autograde needs them."""
    from benchmarks.autograde import TEACHER_BIN
    make_course.main(["--out", str(tmp_path / "course"), "01_shapes"])
    script = ("import sys\nfrom traitlets.config import get_config\nconfig = sys.argv[1]\n"
              "exec(compile(open(config).read(), config, 'exec'), {'get_config': get_config, '__file__': config})\n"
              "print(sorted(m for m in ('torch', 'tfmlib') if m in sys.modules))")
    done = subprocess.run([str(TEACHER_BIN / "python"), "-c", script, str(tmp_path / "course" / "nbgrader_config.py")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2] == "[]", done.stdout
