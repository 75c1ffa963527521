"""The checking engine itself (tfmlib/exercises/core.py), apart from any one topic.

Result objects and how they render, unknown names and non-functions, stubs,
revealing solutions only on request, the mistake catalogue, and the engine's
features on small toy exercises registered for a test: cases where a correct
answer must raise, mistakes with several variants, a missing `return` taking
precedence, crashes that merely resemble a mistake, and a check that never
raises whatever the learner hands in.
"""
from __future__ import annotations

import inspect
import math

import pytest
import torch

from tfmlib.exercises import (REGISTRY, Case, CheckResult, Exercise, Mistake, catalogue, check,
                              exercise_names, register, solution)


# ---- CheckResult ------------------------------------------------------------------------------

def test_only_a_passed_result_is_truthy():
    assert CheckResult("x", "passed", "all 3 cases match the reference")
    for status in ("not attempted", "mistake", "failed"):
        assert not CheckResult("x", status, "something")


@pytest.mark.parametrize("status, tag", [("passed", "[PASS]"), ("not attempted", "[TODO]"),
                                         ("mistake", "[FAIL]"), ("failed", "[FAIL]")])
def test_text_rendering(status, tag):
    result = CheckResult("embed", status, "one line", "detail one\ndetail two")
    assert str(result) == f"{tag} embed: one line\n    detail one\n    detail two"
    assert repr(result) == str(result)
    assert str(CheckResult("embed", status, "one line")) == f"{tag} embed: one line"


def test_html_rendering_escapes_and_labels():
    result = CheckResult("decode", "mistake", "looks like a classic mistake: <eos> & <bos>",
                         "hint: a < b", mistake="x")
    page = result._repr_html_()
    assert "FAIL" in page and "<code>decode</code>" in page
    assert "&lt;eos&gt; &amp; &lt;bos&gt;" in page and "<eos>" not in page
    assert "<pre" in page and "hint: a &lt; b" in page
    assert "PASS" in CheckResult("x", "passed", "ok")._repr_html_()
    assert "TODO" in CheckResult("x", "not attempted", "not yet")._repr_html_()
    assert "<pre" not in CheckResult("x", "passed", "ok")._repr_html_()


def test_a_real_result_renders_as_html_too():
    page = check("causal_mask", lambda seq_len: torch.ones(seq_len, seq_len).tril())._repr_html_()
    assert page.startswith("<div") and "FAIL" in page


# ---- what check accepts -----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["no_such_exercise", "", None, 3, ["embed"]])
def test_an_unknown_exercise_is_reported_not_raised(name):
    result = check(name, lambda x: x)
    assert not result and result.status == "failed"
    assert result.message == "no exercise of that name"
    assert "embed" in result.details and "causal_mask" in result.details


@pytest.mark.parametrize("value", [3, None, "my_embed", torch.zeros(2, 3), [1, 2]])
def test_a_non_function_is_reported(value):
    result = check("embed", value)
    assert not result and result.status == "failed"
    assert result.message.startswith("expected your function, got ")
    assert "without calling" in result.details


def test_a_builtin_with_no_source_is_run_not_treated_as_a_stub():
    result = check("broadcast_shape", max)   # inspect.getsource(max) fails
    assert not result and result.status != "not attempted"


# ---- stubs ------------------------------------------------------------------------------------

def stub_docstring_ellipsis(token_ids, table, scale=True):
    """(B, L) ids, (V, D) table -> (B, L, D)"""
    ...  # your code here


def stub_ellipsis(token_ids, table, scale=True):
    ...


def stub_docstring_pass(token_ids, table, scale=True):
    """Docstring."""
    pass


def stub_pass(token_ids, table, scale=True):
    pass


def stub_docstring_raise(token_ids, table, scale=True):
    """Docstring."""
    raise NotImplementedError


def stub_raise_call(token_ids, table, scale=True):
    raise NotImplementedError("replace this line with your code")


def stub_docstring_only(token_ids, table, scale=True):
    """Only a docstring: still nothing written."""


def stub_two_placeholders(token_ids, table, scale=True):
    # your code here
    ...
    pass


STUBS = [stub_docstring_ellipsis, stub_ellipsis, stub_docstring_pass, stub_pass,
         stub_docstring_raise, stub_raise_call, stub_docstring_only, stub_two_placeholders]


@pytest.mark.parametrize("stub", STUBS, ids=lambda f: f.__name__)
def test_stubs_are_not_attempted_and_falsy(stub):
    result = check("embed", stub)
    assert not result
    assert result.status == "not attempted"
    assert result.message.startswith("not attempted yet")
    assert str(result).startswith("[TODO] embed: not attempted yet")
    assert "TODO" in result._repr_html_()


def started_then_unfinished(token_ids, table, scale=True):
    vectors = table[token_ids]
    if scale:
        raise NotImplementedError("scaling comes next")
    return vectors


def started(token_ids, table, scale=True):
    vectors = table[token_ids]
    ...


def test_raising_not_implemented_at_run_time_is_not_attempted_either():
    result = check("embed", started_then_unfinished)
    assert not result and result.status == "not attempted"
    assert "NotImplementedError" in result.message


def test_a_started_body_is_not_a_stub():
    result = check("embed", started)
    assert result.status == "failed" and "returned None" in result.message


# ---- solutions --------------------------------------------------------------------------------

def _reference_functions(exercise):
    """The reference function(s): some exercises take a tuple, e.g. (adam_init, adam_step)."""
    reference = exercise.reference
    return reference if isinstance(reference, tuple) else (reference,)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_solution_reveals_the_reference_source_of_every_exercise(name):
    exercise = REGISTRY[name]
    revealed = solution(name)
    for function in _reference_functions(exercise):
        source = inspect.getsource(function)
        assert f"def {function.__name__}(" in revealed.source
        assert source.strip().splitlines()[-1].strip() in revealed.source
    assert str(revealed) == revealed.source and repr(revealed) == revealed.source
    page = revealed._repr_html_()
    assert _reference_functions(exercise)[0].__name__ in page and "<" in page


def test_solution_of_an_unknown_exercise_names_it():
    with pytest.raises(ValueError, match="no_such_exercise"):
        solution("no_such_exercise")


def _source_lines(fn):
    return [line.strip() for line in inspect.getsource(fn).splitlines() if len(line.strip()) > 25]


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_check_reveals_no_solution_and_prints_nothing(name, capsys):
    exercise = REGISTRY[name]
    results = [check(name, exercise.reference)]
    if exercise.mistakes:
        results.append(check(name, exercise.mistakes[0].variant))
    results.append(check(name, stub_pass))
    shown = "\n".join(str(r) + r._repr_html_() for r in results)
    for function in _reference_functions(exercise):
        for line in _source_lines(function):
            assert line not in shown, line
    assert capsys.readouterr().out == ""


# ---- the catalogue ----------------------------------------------------------------------------

def test_catalogue_lists_every_mistake_once_with_a_one_line_hint():
    entries = catalogue()
    assert len(entries) == sum(len(e.mistakes) for e in REGISTRY.values())
    assert len({(exercise, name) for exercise, name, _ in entries}) == len(entries)
    for exercise, name, hint in entries:
        assert exercise in REGISTRY
        assert name.strip() and hint.strip(), (exercise, name)
        assert "\n" not in hint and "\n" not in name, (exercise, name)
    assert len(entries) >= 35 or len(REGISTRY) < 20   # the whole course aims at >= 35


def test_exercise_names_are_sorted_registry_keys():
    assert exercise_names() == sorted(REGISTRY)


def test_registering_a_name_twice_is_refused():
    with pytest.raises(ValueError, match="registered twice"):
        register(REGISTRY["embed"])


# ---- engine features, on toy exercises registered for a test ------------------------------------

def _checked_sqrt(x: float) -> float:
    if x < 0:
        raise ValueError(f"x: expected x >= 0, got {x}")
    return math.sqrt(x)


def _toy_cases():
    return [Case("4", (4.0,)), Case("2", (2.0,)), Case("0.25", (0.25,)),
            Case("negative", (-1.0,), raises=ValueError)]


def _times(factor):
    def variant(x):
        if x < 0:
            raise ValueError("negative")
        return math.sqrt(x) * factor
    return variant


def _sqrt_or_none(x):
    return math.sqrt(x) if x >= 0 else None


@pytest.fixture
def toy():
    """Register toy exercises for one test, and remove them again afterwards."""
    added = []

    def add(name, **fields):
        fields.setdefault("reference", _checked_sqrt)
        fields.setdefault("make_cases", _toy_cases)
        added.append(name)
        return register(Exercise(name=name, **fields))

    yield add
    for name in added:
        REGISTRY.pop(name, None)


def test_a_case_can_require_an_exception(toy):
    toy("toy_sqrt")
    assert check("toy_sqrt", _checked_sqrt)

    def clamps(x):
        return math.sqrt(max(x, 0.0))
    result = check("toy_sqrt", clamps)
    assert result.status == "failed"
    assert result.message == "expected your function to raise ValueError on this input, it returned 0.0"
    assert "case 4 of 4 (negative)" in result.details

    def math_domain_error(x):
        return math.sqrt(x)   # math.sqrt(-1) raises ValueError itself: that is a pass
    assert check("toy_sqrt", math_domain_error)

    def assertion(x):
        assert x >= 0, "negative"
        return math.sqrt(x)
    result = check("toy_sqrt", assertion)
    assert result.message == ("expected your function to raise ValueError on this input, "
                              "it raised AssertionError")
    assert "assert x >= 0" in result.details


def test_a_mistake_with_several_variants_is_named_by_any_of_them(toy):
    toy("toy_sqrt", mistakes=[Mistake("doubled", "do not double it", _times(2.0),
                                      also=(_times(3.0), _times(4.0))),
                              Mistake("halved", "do not halve it", _times(0.5))])
    for factor in (2.0, 3.0, 4.0):
        result = check("toy_sqrt", _times(factor))
        assert result.status == "mistake" and result.mistake == "doubled"
        assert "hint: do not double it" in result.details
        assert "first seen on case 1 of 4 (4): output: expected 2, got" in result.details
    assert check("toy_sqrt", _times(0.5)).mistake == "halved"
    assert check("toy_sqrt", _times(5.0)).status == "failed"   # not catalogued: the first failing case
    assert [m.name for m in REGISTRY["toy_sqrt"].mistakes] == ["doubled", "halved"]
    assert REGISTRY["toy_sqrt"].mistakes[0].variants[1] is not None


def test_a_missing_return_comes_before_any_mistake(toy):
    toy("toy_sqrt", mistakes=[Mistake("None for negatives", "raise instead", _sqrt_or_none)])
    assert check("toy_sqrt", _sqrt_or_none).mistake == "None for negatives"

    def forgot_return(x):
        root = math.sqrt(abs(x))
    result = check("toy_sqrt", forgot_return)
    assert result.status == "failed" and result.mistake is None
    assert result.message == "your function returned None: is a `return` statement missing?"


def _key_error_on_two(x):
    if x == 2.0:
        raise KeyError("two")
    return _checked_sqrt(x)


def test_a_crash_that_only_resembles_a_mistake_is_not_named_after_it(toy):
    toy("toy_sqrt", mistakes=[Mistake("KeyError on 2", "handle 2", _key_error_on_two)])
    assert check("toy_sqrt", _key_error_on_two).mistake == "KeyError on 2"

    def key_error_everywhere(x):
        return {}["typo"]
    result = check("toy_sqrt", key_error_everywhere)
    assert result.status == "failed" and result.mistake is None
    assert "raised KeyError" in result.message and 'return {}["typo"]' in result.details


def _broken_reference(x):
    raise RuntimeError("a bug in the exercise")


def test_a_broken_exercise_reports_instead_of_raising(toy):
    toy("toy_broken", reference=_broken_reference)
    result = check("toy_broken", _checked_sqrt)
    assert not result and result.status == "failed"
    assert result.message == "the checker itself failed on this answer"
    assert "a bug in the exercise" in result.details and "report" in result.details


def test_a_reference_that_should_raise_but_does_not_is_reported(toy):
    toy("toy_lenient", reference=lambda x: math.sqrt(abs(x)))
    result = check("toy_lenient", _checked_sqrt)
    assert result.status == "failed" and "should raise ValueError" in result.details


def test_the_nan_hint_is_the_exercises(toy):
    toy("toy_vector", reference=lambda x: x * 2, make_cases=lambda: [Case("v", (torch.ones(3),))],
        nan_hint="NaN means you divided by zero")
    result = check("toy_vector", lambda x: x * 2 / torch.tensor([1.0, 0.0, 1.0]) * 0)
    assert "contains NaN" in result.message and "NaN means you divided by zero" in result.message
    assert "contains NaN (first at index (0, 0, 0)) where the reference has none" in \
        check("embed", lambda ids, table, scale=True: table[ids] * float("nan")).message


# ---- check never raises, whatever it is handed ------------------------------------------------

class _Hostile:
    def __eq__(self, other):
        raise RuntimeError("no comparing me")

    def __repr__(self):
        raise RuntimeError("no printing me")

    __hash__ = object.__hash__


def _output_of(value):
    def learner(*args, **kwargs):
        return value
    return learner


@pytest.mark.parametrize("value", [_Hostile(), (x for x in range(3)), "text", 3.5, {"a": 1},
                                   [torch.zeros(1)], torch.zeros(2, 2, dtype=torch.complex64),
                                   float("nan"), object()],
                         ids=lambda v: type(v).__name__)
@pytest.mark.parametrize("name", ["broadcast_shape", "build_vocab", "decode", "embed", "causal_mask",
                                  "scaled_dot_product_attention"])
def test_odd_outputs_are_reported_not_raised(name, value):
    result = check(name, _output_of(value))
    assert isinstance(result, CheckResult) and not result
    assert result.status in ("failed", "mistake")
    str(result), result._repr_html_()


def test_an_answer_that_edits_its_inputs_in_place_fails_and_says_which():
    def add_in_place(x, pe):
        x += pe[: x.size(1)]
        return x
    result = check("add_positional_encoding", add_in_place)   # also a catalogued mistake: the name comes first
    assert not result and "changed its input `x` in place" in str(result)

    def pad_in_place(id_lists, pad_id, max_len=None):
        length = max_len or max(len(ids) for ids in id_lists)
        for ids in id_lists:
            del ids[length:]
            ids.extend([pad_id] * (length - len(ids)))
        return torch.tensor(id_lists, dtype=torch.long)
    result = check("pad_batch", pad_in_place)   # a catalogued mistake too
    assert not result and "changed its input `id_lists" in str(result)


def test_check_runs_on_one_thread_and_restores_the_number_of_threads():
    before = torch.get_num_threads()
    seen = []

    def records_threads(token_ids, table, scale=True):
        seen.append(torch.get_num_threads())
        return table[token_ids]
    try:
        torch.set_num_threads(2)
        check("embed", records_threads)
        assert torch.get_num_threads() == 2 and set(seen) == {1}
    finally:
        torch.set_num_threads(before)


def test_tensor_outputs_on_the_wrong_kind_are_named_in_words():
    result = check("encode", lambda sentence, vocab, add_bos=False, add_eos=False: torch.tensor([1]))
    assert "expected a list of" in result.message and "got Tensor" in result.message
    result = check("decode", lambda ids, vocab, skip_specials=True: 7)
    assert result.message == "output: expected a str, got int (7)"


# ---- what PASS means: arguments, precision, gradients, naming on every case ---------------------

def _scale_rows(x, factor):
    return x * factor


def _scale_cases():
    g = torch.Generator().manual_seed(0)
    return [Case("(2, 3)", (torch.randn(2, 3, generator=g), 2.0)),
            Case("(4, 1)", (torch.randn(4, 1, generator=g), -0.5))]


def test_only_the_arguments_an_exercise_updates_may_change(toy):
    def in_place(x, factor):
        return x.mul_(factor)
    toy("toy_scale", reference=_scale_rows, make_cases=_scale_cases)
    result = check("toy_scale", in_place)
    assert not result and "changed its input `x` in place" in result.message
    assert "x = x + pe" in result.details  # says how to do it instead

    toy("toy_scale_in_place", reference=in_place, make_cases=_scale_cases, updates=("x",))
    assert check("toy_scale_in_place", in_place)
    result = check("toy_scale_in_place", _scale_rows)
    assert result, "an exercise that allows an update does not demand it"


def test_an_in_place_mistake_is_named_when_it_is_catalogued(toy):
    def in_place(x, factor):
        x *= factor
        return x
    toy("toy_scale", reference=_scale_rows, make_cases=_scale_cases,
        mistakes=[Mistake("x scaled in place", "multiply into a new tensor", in_place)])
    result = check("toy_scale", lambda x, factor: x.mul_(factor))
    assert result.mistake == "x scaled in place"


def _variance(x):
    return x.var(dim=-1, unbiased=False)


def _tiny_spread_cases():
    g = torch.Generator().manual_seed(1)
    return [Case("large offset, tiny spread", (1000.0 + 1e-2 * torch.randn(3, 50, generator=g),))]


def test_a_more_accurate_answer_passes_and_so_does_the_float32_reference(toy):
    toy("toy_variance", reference=_variance, make_cases=_tiny_spread_cases, atol=1e-9, rtol=1e-6)
    assert check("toy_variance", _variance)
    assert check("toy_variance", lambda x: x.double().var(dim=-1, unbiased=False).float())
    one_pass = lambda x: (x * x).mean(-1) - x.mean(-1) ** 2  # noqa: E731 (cancels catastrophically)
    assert not check("toy_variance", one_pass)


def test_the_element_shown_is_the_one_that_fails_worst_not_the_largest_error(toy):
    def reference(x):
        return x

    def cases():
        return [Case("big and small", (torch.tensor([1000.0, 1e-3]),))]

    toy("toy_identity", reference=reference, make_cases=cases, atol=1e-6, rtol=1e-3)
    # 0.5 off at 1000 is within rtol; 1e-3 off at 1e-3 is not
    result = check("toy_identity", lambda x: x + torch.tensor([0.5, 1e-3]))
    assert "worst at index (1,)" in result.details and "values differ at 1 of 2" in result.message


def _softmax_rows(x):
    return torch.softmax(x, dim=-1)


def test_gradients_must_flow_back_to_the_inputs(toy):
    import numpy as np

    def numpy_softmax(x):
        e = np.exp(x.detach().numpy())
        return torch.from_numpy(e / e.sum(-1, keepdims=True))

    def detached(x):
        return torch.softmax(x, dim=-1).detach()

    toy("toy_softmax", reference=_softmax_rows, make_cases=_scale_cases_one, gradients=True)
    assert check("toy_softmax", _softmax_rows)
    assert check("toy_softmax", lambda x: x.exp() / x.exp().sum(-1, keepdim=True))
    for wrong in (numpy_softmax, detached):
        result = check("toy_softmax", wrong)
        assert not result and "no gradient flows back" in result.message, str(result)

    def numpy_on_input(x):
        return torch.tensor(np.exp(x.numpy()))
    result = check("toy_softmax", numpy_on_input)
    assert "autograd cannot follow a NumPy step" in result.details

    def half_detached(x):  # right values, but the gradient only reaches through the numerator
        return x.exp() / x.exp().sum(-1, keepdim=True).detach()
    result = check("toy_softmax", half_detached)
    assert not result and "the gradient reaching `x`" in result.message


def _scale_cases_one():
    return [Case(c.label, c.args[:1]) for c in _scale_cases()]


def test_a_mistake_is_named_only_when_it_explains_every_case(toy):
    def wrong_on_first_case_only(x):
        return math.sqrt(x) * (2.0 if x == 4.0 else 1.0)
    toy("toy_sqrt", mistakes=[Mistake("doubled", "do not double it", _times(2.0))])
    result = check("toy_sqrt", wrong_on_first_case_only)
    assert result.status == "failed" and result.mistake is None
    assert "case 1 of 4 (4)" in result.details


def test_a_crash_of_another_type_is_named_only_with_a_shared_wrong_value(toy):
    def crashes_on_two_else_doubles(x):
        if x == 2.0:
            raise IndexError("two")
        return _times(2.0)(x)

    def variant(x):
        if x == 2.0:
            raise KeyError("two")
        return _times(2.0)(x)
    toy("toy_sqrt", mistakes=[Mistake("doubled", "do not double it", variant)])
    assert check("toy_sqrt", crashes_on_two_else_doubles).mistake == "doubled"


@pytest.mark.parametrize("slip, hint", [
    ("params.w_q", "params['w_q'], not params.w_q"),
    ("ctx", "`ctx` is used before anything was assigned to it (you have `context`"),
    ("if_mask", "if mask is not None:"),
    ("round", "round() does not take tensors"),
])
def test_the_classic_python_slips_get_a_hint(slip, hint):
    def answer(query, key, value, mask=None):
        context = query
        if slip == "params.w_q":
            return {"w": 1}.w_q
        if slip == "ctx":
            return ctx  # noqa: F821
        if slip == "if_mask":
            scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
            if mask:  # fine while mask is None, a crash on the first real mask
                scores = scores.masked_fill(~mask, float("-inf"))
            weights = torch.softmax(scores, dim=-1)
            return weights @ value, weights
        return round(query, 2)
    result = check("scaled_dot_product_attention", answer)
    assert not result and hint in result.details, str(result)


def test_a_diagnosis_never_prints_a_whole_params_dict_or_a_long_tensor():
    from tfmlib.exercises.core import _describe
    params = {"self_attn": {"w_q": torch.zeros(8, 8), "b_q": torch.zeros(8)}, "norm1": {"gamma": torch.ones(8)}}
    assert _describe(params) == "dict(self_attn, norm1)"
    assert _describe(params["self_attn"]) == "{w_q: float32(8, 8), b_q: float32(8,)}"
    assert _describe([params, params, params]) == "list of 3 dicts"
    assert _describe(torch.zeros(100, 100)) == "float32(100, 100)"
    result = check("multi_head_attention", lambda *args, **kwargs: args[3])
    assert len(str(result)) < 1500 and "tensor(" not in str(result)


def _square(x):
    return x * x


def test_an_input_overwritten_after_use_is_named_not_hidden_by_autograd(toy):
    def overwrites_after_use(x):
        y = x * x
        x.zero_()  # autograd needed x for the backward pass: the engine's backward fails
        return y
    toy("toy_square", reference=_square, make_cases=_scale_cases_one, gradients=True)
    result = check("toy_square", overwrites_after_use)
    assert not result and "changed its input `x` in place" in result.message, str(result)


def test_a_large_gradient_is_compared_relative_to_its_size(toy):
    def cases():
        return [Case("gradients near 1e3", (1e3 * torch.linspace(1.0, 2.0, 7),))]
    toy("toy_square_large", reference=_square, make_cases=cases, gradients=True, atol=1e-5, rtol=0.0)
    def off_gradient(offset):  # the value x * x exactly, with a gradient 2x + 2 * offset
        return lambda x: x * x.detach() + (x - x.detach()) * (x.detach() + 2 * offset)
    assert check("toy_square_large", off_gradient(5e-5))    # about 1e-8 of the gradient's size
    result = check("toy_square_large", off_gradient(0.5))  # about 1e-4 of it: a real difference
    assert not result and "the gradient reaching `x`" in result.message
