"""An answer that is not the learner's own work FAILs, with a message that says why (issue 21).

The cheats, each written the way a learner would in a notebook cell: calling the reference
(imported under its own name, under another, or through `import tfmlib as t`), handing the
reference in as the answer, running `solution(...)`'s text with `exec`, calling `solution()`,
and calling PyTorch's own version of the exercise. Against them: honest answers that use the
helpers an exercise allows, the reference checked as itself (as the test suite and the mutation
proof do), and a wrong answer that calls the reference, which keeps its diagnosis.
"""
from __future__ import annotations

import json
import sys
import types

import pytest
import torch
import torch.nn.functional as F

import tfmlib
from tfmlib.exercises import REGISTRY, check, progress, solution
from tfmlib.exercises.provenance import ENV_VAR, FORBIDDEN, resolve


def in_a_cell(source: str) -> dict:
    """Run `source` as a notebook cell does (module level, a file name outside tfmlib); its names."""
    namespace = {"__name__": "__main__"}
    exec(compile(source, "/tmp/ipykernel_0/cell.py", "exec"), namespace)
    return namespace


def assert_flagged(result, *words):
    assert result.status == "failed" and "write it yourself" in result.message, str(result)
    for word in words:
        assert word in str(result), str(result)


# ---- the reference, however it is reached -----------------------------------------------------

def test_an_answer_that_calls_the_reference_fails_and_names_it():
    cell = in_a_cell("""
from tfmlib.exercises import check
from tfmlib.masks import padding_mask

def my_padding_mask(token_ids, pad_id):
    return padding_mask(token_ids, pad_id)

result = check("padding_mask", my_padding_mask)
""")
    assert_flagged(cell["result"], "your function calls `tfmlib.masks.padding_mask`, the reference")


@pytest.mark.parametrize("imports, call", [
    ("from tfmlib.masks import padding_mask as pm", "pm(token_ids, pad_id)"),
    ("import tfmlib as t", "t.padding_mask(token_ids, pad_id)"),
    ("import tfmlib.masks", "tfmlib.masks.padding_mask(token_ids, pad_id)"),
    ("from tfmlib import *", "(lambda f: f(token_ids, pad_id))(padding_mask)"),
], ids=["aliased", "package alias", "module path", "through a lambda"])
def test_every_alias_of_the_reference_is_the_reference(imports, call):
    cell = in_a_cell(f"""
from tfmlib.exercises import check
{imports}

def my_padding_mask(token_ids, pad_id):
    return {call}

result = check("padding_mask", my_padding_mask)
""")
    assert_flagged(cell["result"], "`tfmlib.masks.padding_mask`")


def test_the_reference_handed_in_under_a_learners_name_fails():
    cell = in_a_cell("""
from tfmlib.exercises import check
from tfmlib.masks import padding_mask

def my_padding_mask(token_ids, pad_id):
    ...  # your code here

my_padding_mask = padding_mask
result = check("padding_mask", my_padding_mask)
""")
    assert_flagged(cell["result"], "your answer is `tfmlib.masks.padding_mask` itself")


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_for_every_exercise_a_wrapper_of_the_reference_fails(name):
    references = REGISTRY[name].reference

    def wrapper_of(reference):
        def my_answer(*args, **kwargs):
            return reference(*args, **kwargs)
        return my_answer
    answer = tuple(map(wrapper_of, references)) if isinstance(references, tuple) else wrapper_of(references)
    assert_flagged(check(name, answer), "the reference")


@pytest.mark.parametrize("name", ["padding_mask", "scaled_dot_product_attention", "adam"])
def test_the_reference_checked_as_itself_passes(name):
    """What the test suite's "every reference passes its own check" and the mutation proof do."""
    assert check(name, REGISTRY[name].reference)


# ---- solution()'s text ------------------------------------------------------------------------

def test_running_the_text_of_solution_in_the_cell_is_a_copy_of_the_reference():
    cell = in_a_cell("""
import torch
from tfmlib.exercises import check, solution
from tfmlib.masks import _check_causal_mask_inputs
exec(solution("causal_mask").source)    # defines causal_mask here

def my_causal_mask(seq_len, device=None):
    return causal_mask(seq_len, device)

result = check("causal_mask", my_causal_mask)
""")
    assert_flagged(cell["result"], "runs a copy of `tfmlib.masks.causal_mask`", 'solution("causal_mask")')


def test_the_text_of_solution_renamed_and_handed_in_is_still_a_copy():
    cell = in_a_cell("""
import torch
from tfmlib.exercises import check, solution
from tfmlib.masks import _check_causal_mask_inputs
exec(solution("causal_mask").source.replace("def causal_mask", "def my_causal_mask"))
result = check("causal_mask", my_causal_mask)
""")
    assert_flagged(cell["result"], "copy of `tfmlib.masks.causal_mask`")


def test_calling_solution_inside_the_answer_fails():
    def my_padding_mask(token_ids, pad_id):
        solution("padding_mask")
        return (token_ids != pad_id)[:, None, None, :]
    assert_flagged(check("padding_mask", my_padding_mask), "your function calls `solution()`")


# ---- PyTorch's own version of the exercise ----------------------------------------------------

def attention_from_torch(query, key, value, mask=None):
    context = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    scores = query @ key.mT / query.size(-1) ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return context, scores.softmax(-1).nan_to_num(0.0)


def layer_norm_from_torch(x, gamma, beta, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], gamma, beta, eps)


def label_smoothing_from_torch(logits, labels, smoothing, ignore_index=-100):
    return F.cross_entropy(logits.flatten(0, -2), labels.flatten(), label_smoothing=smoothing,
                           ignore_index=ignore_index)


@pytest.mark.parametrize("name, answer, called", [
    ("scaled_dot_product_attention", attention_from_torch, "torch.nn.functional.scaled_dot_product_attention"),
    ("layer_norm", layer_norm_from_torch, "torch.nn.functional.layer_norm"),
    ("label_smoothed_cross_entropy", label_smoothing_from_torch, "torch.nn.functional.cross_entropy"),
], ids=["F.scaled_dot_product_attention", "F.layer_norm", "F.cross_entropy"])
def test_pytorchs_own_version_fails_and_is_named(name, answer, called):
    # Scores near 1e5 (the case that shows a fill of -1e4) leave float32 a few thousandths: the fused
    # kernel's gradients then differ from the reference's, and the check fails it for them first.
    cases = [c for c in REGISTRY[name].cases() if "times 100000" not in c.label]
    assert_flagged(check(name, answer, cases), f"`{called}`, PyTorch's own version")


def test_pytorchs_builtin_handed_in_directly_fails():
    assert_flagged(check("linear", F.linear), "`torch.nn.functional.linear`")


def test_every_forbidden_name_exists_in_the_pinned_torch():
    """A misspelt name would forbid nothing, silently."""
    for name, dotted in FORBIDDEN.items():
        assert name in REGISTRY, name
        for path in dotted:
            assert callable(resolve(path)), path


# ---- what stays allowed -----------------------------------------------------------------------

def test_the_helpers_an_exercise_allows_may_be_tfmlibs():
    """04: "You may call your two functions from above (or tfmlib's)"; 06: "You may call
    scaled_dot_product_attention"; tfmlib's helpers may use anything inside."""
    def my_target_mask(token_ids, pad_id):
        return tfmlib.padding_mask(token_ids, pad_id) & tfmlib.causal_mask(token_ids.size(1))

    def my_multi_head_attention(query, key, value, params, num_heads, mask=None):
        def heads(x, w, b):
            return tfmlib.split_heads(tfmlib.linear(x, w, b), num_heads)
        context, weights = tfmlib.scaled_dot_product_attention(
            heads(query, params["w_q"], params["b_q"]), heads(key, params["w_k"], params["b_k"]),
            heads(value, params["w_v"], params["b_v"]), mask)
        return tfmlib.linear(tfmlib.merge_heads(context), params["w_o"], params["b_o"]), weights

    assert check("target_mask", my_target_mask), "target_mask"
    assert check("multi_head_attention", my_multi_head_attention), "multi_head_attention"


def test_a_wrong_answer_that_calls_the_reference_keeps_its_diagnosis():
    def my_padding_mask(token_ids, pad_id):
        return tfmlib.padding_mask(token_ids, pad_id).transpose(-1, -2)
    result = check("padding_mask", my_padding_mask)
    assert result.status == "mistake" and "query axis" in result.message, str(result)


def test_the_teachers_table_adds_calls_and_a_broken_one_changes_nothing(monkeypatch):
    def my_causal_mask(seq_len, device=None):
        return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device))[None, None]
    assert check("causal_mask", my_causal_mask)
    monkeypatch.setenv(ENV_VAR, json.dumps({"causal_mask": ["torch.tril"]}))
    assert_flagged(check("causal_mask", my_causal_mask), "`torch.tril`")
    for broken in ("not json", json.dumps(["torch.tril"]), json.dumps({"causal_mask": ["no.such.thing"]})):
        monkeypatch.setenv(ENV_VAR, broken)
        assert check("causal_mask", my_causal_mask), broken


def test_the_check_leaves_no_profile_hook_behind_even_when_the_answer_raises():
    def my_padding_mask(token_ids, pad_id):
        raise KeyError("oops")
    assert not check("padding_mask", my_padding_mask)
    assert sys.getprofile() is None


def test_progress_records_the_fail(tmp_path, monkeypatch):
    monkeypatch.setenv("TFMLIB_PROGRESS", str(tmp_path / "progress.json"))

    def my_causal_mask(seq_len, device=None):
        return tfmlib.causal_mask(seq_len, device)
    check("causal_mask", my_causal_mask)
    row = next(r for r in progress().rows if r.exercise == "causal_mask")
    assert row.state == "failed" and "the reference" in row.note


def test_a_mutant_of_a_helper_calls_a_copy_of_the_reference_that_is_not_the_reference():
    """What tests/mutants.py hands in for a helper's mutant: the reference's own code, rebound to
    globals where the mutated helper lives. It is judged on its behaviour alone."""
    import tfmlib.masks
    namespace = dict(vars(tfmlib.masks))
    namespace["padding_mask"] = lambda token_ids, pad_id: (token_ids != pad_id)[:, None, None, :]
    rebound = types.FunctionType(tfmlib.masks.target_mask.__code__, namespace, "target_mask")
    assert check("target_mask", rebound)
