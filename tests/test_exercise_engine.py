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
    result = check("add_positional_encoding", add_in_place)
    assert not result and "changed its input `x` in place" in result.message

    def pad_in_place(id_lists, pad_id, max_len=None):
        length = max_len or max(len(ids) for ids in id_lists)
        for ids in id_lists:
            del ids[length:]
            ids.extend([pad_id] * (length - len(ids)))
        return torch.tensor(id_lists, dtype=torch.long)
    result = check("pad_batch", pad_in_place)
    assert not result and "changed its input `id_lists` in place" in result.message


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
