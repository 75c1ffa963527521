"""Checks of notebooks 05 and 06 that cannot be fooled (issue 15): scaled_dot_product_attention,
linear, split_heads, merge_heads and multi_head_attention.

Every answer here is written the way a learner writes one in a notebook cell:
  - correct but unusual answers (loops, einsum, torch.where, float64 inside, a non-contiguous
    result, another equivalent formula) must PASS (F.scaled_dot_product_attention is PyTorch's own
    version of the exercise, not the learner's work: see tests/test_provenance.py);
  - answers that change the caller's tensors in place must FAIL and say which argument;
  - answers that cut autograd off (NumPy, .detach(), torch.tensor(values)) must FAIL with the
    gradient message, since these outputs feed training;
  - well-known other conventions (The Annotated Transformer's -1e9, Luong's unscaled scores)
    and the classic slips must FAIL and be named, with a hint saying where they come from;
  - the check's own cases cover the contract's edges (d_v != d_k, Lq != Lk, fully masked rows,
    every mask layout, one head, d_k = 1), and its diagnoses stay short.
"""
from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tfmlib.exercises import REGISTRY, check
from tfmlib.exercises.core import reference_outcome

from random_cases import random_cases

ATTENTION = "scaled_dot_product_attention"
MHA = "multi_head_attention"
MINE = [ATTENTION, "linear", "split_heads", "merge_heads", MHA]


# ==== correct answers, written differently from tfmlib ==========================================

# -- scaled_dot_product_attention
def attention_where(query, key, value, mask=None):
    scores = torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(key.shape[-1])
    if mask is not None:
        scores = torch.where(mask, scores, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = torch.where(mask, weights, 0.0)
    return weights @ value, weights


def attention_float64_inside(query, key, value, mask=None):
    q, k, v = query.double(), key.double(), value.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return (weights @ v).to(query.dtype), weights.to(query.dtype)


def attention_non_contiguous(query, key, value, mask=None):
    """Scores computed as (K Q^T)^T and the context as (V^T W^T)^T: a transposed view comes back."""
    scores = (key @ query.transpose(-2, -1)).transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    context = (value.transpose(-2, -1) @ weights.transpose(-2, -1)).transpose(-2, -1)
    return context, weights


def attention_manual_softmax(query, key, value, mask=None):
    """exp / sum by hand, with the row maximum subtracted; a row with no key divides 0 by 1.
    Masked scores become -inf before exp: exp of a masked score far above the row's maximum
    would overflow, and torch.where's gradient through that inf is NaN (scores of 100 show it)."""
    scores = torch.einsum("...qd,...kd->...qk", query, key) * query.size(-1) ** -0.5
    allowed = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask.expand_as(scores)
    top = scores.masked_fill(~allowed, float("-inf")).amax(dim=-1, keepdim=True)
    exp = torch.exp((scores - top.nan_to_num(0.0, neginf=0.0)).masked_fill(~allowed, float("-inf")))
    weights = exp / exp.sum(dim=-1, keepdim=True).clamp_min(1e-30)
    return torch.einsum("...qk,...kv->...qv", weights, value), weights


def attention_row_loop(query, key, value, mask=None):
    """One query row at a time."""
    d_k = query.size(-1)
    contexts, all_weights = [], []
    for i in range(query.size(-2)):
        scores = (query[..., i:i + 1, :] @ key.transpose(-2, -1)) / d_k ** 0.5   # (..., 1, Lk)
        if mask is not None:
            row = mask[..., i:i + 1, :] if mask.size(-2) > 1 else mask
            scores = scores.masked_fill(~row, float("-inf"))
            weights = torch.softmax(scores, dim=-1).masked_fill(~row, 0.0)
        else:
            weights = torch.softmax(scores, dim=-1)
        contexts.append(weights @ value)
        all_weights.append(weights)
    return torch.cat(contexts, dim=-2), torch.cat(all_weights, dim=-2)


# -- linear
def linear_addmm(x, weight, bias=None):
    flat = x.reshape(-1, x.size(-1))
    y = flat @ weight.t() if bias is None else torch.addmm(bias, flat, weight.t())
    return y.reshape(*x.shape[:-1], weight.size(0))


def linear_rows(x, weight, bias=None):
    """One output feature at a time: a dot product with each row of the weight."""
    y = torch.stack([(x * row).sum(dim=-1) for row in weight], dim=-1)
    return y if bias is None else y + bias


def linear_float64_inside(x, weight, bias=None):
    y = x.double() @ weight.double().T
    if bias is not None:
        y = y + bias.double()
    return y.to(x.dtype)


def linear_transposed_product(x, weight, bias=None):
    """(W x^T)^T: a non-contiguous result for a 2-D x."""
    y = (weight @ x.unsqueeze(-1)).squeeze(-1)
    return y if bias is None else bias + y


# -- split_heads
def split_unflatten(x, num_heads):
    return x.unflatten(-1, (num_heads, -1)).transpose(1, 2)


def split_view_permute(x, num_heads):
    batch, length, d_model = x.shape
    return x.view(batch, length, num_heads, d_model // num_heads).permute(0, 2, 1, 3).contiguous()


def split_head_loop(x, num_heads):
    d_k = x.size(-1) // num_heads
    return torch.stack([x[:, :, h * d_k:(h + 1) * d_k] for h in range(num_heads)], dim=1)


# -- merge_heads
def merge_permute_reshape(x):
    batch, heads, length, d_k = x.shape
    return x.permute(0, 2, 1, 3).reshape(batch, length, heads * d_k)


def merge_contiguous_view(x):
    batch, heads, length, d_k = x.shape
    return x.transpose(1, 2).contiguous().view(batch, length, heads * d_k)


def merge_einsum_flatten(x):
    return torch.einsum("bhld->blhd", x).flatten(-2)


# -- multi_head_attention
def _project(x, weight, bias):
    return x @ weight.T + bias


def mha_head_loop(query, key, value, params, num_heads, mask=None):
    """One head at a time, on slices of the projections; the heads concatenated at the end."""
    d_k = query.size(-1) // num_heads
    q = _project(query, params["w_q"], params["b_q"])
    k = _project(key, params["w_k"], params["b_k"])
    v = _project(value, params["w_v"], params["b_v"])
    contexts, weights = [], []
    for h in range(num_heads):
        part = slice(h * d_k, (h + 1) * d_k)
        head_mask = None if mask is None else mask[:, h if mask.size(1) > 1 else 0]
        scores = q[..., part] @ k[..., part].transpose(1, 2) / math.sqrt(d_k)
        if head_mask is not None:
            scores = scores.masked_fill(~head_mask, float("-inf"))
        w = torch.softmax(scores, dim=-1)
        if head_mask is not None:
            w = w.masked_fill(~head_mask, 0.0)
        contexts.append(w @ v[..., part])
        weights.append(w)
    return _project(torch.cat(contexts, dim=-1), params["w_o"], params["b_o"]), torch.stack(weights, 1)


def mha_einsum_float64(query, key, value, params, num_heads, mask=None):
    """Everything in float64 and einsum, with the weights as (H, d_k, D) blocks."""
    p = {name: t.double() for name, t in params.items()}
    d_model = query.size(-1)
    d_k = d_model // num_heads

    def heads(x, name):
        w = p[f"w_{name}"].view(num_heads, d_k, d_model)
        return torch.einsum("bld,hkd->bhlk", x.double(), w) + p[f"b_{name}"].view(num_heads, 1, d_k)
    q, k, v = heads(query, "q"), heads(key, "k"), heads(value, "v")
    scores = torch.einsum("bhqk,bhlk->bhql", q, k) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    context = torch.einsum("bhql,bhlk->bqhk", weights, v).flatten(2)
    output = F.linear(context, p["w_o"], p["b_o"])
    return output.to(query.dtype), weights.to(query.dtype)


def _torch_mha(query, key, value, params, num_heads, mask, need_weights):
    """PyTorch's own multi-head attention: its bool mask is True = blocked, one per (B * H)."""
    batch, lq, d_model = query.shape
    blocked = None
    if mask is not None:
        blocked = ~mask.expand(batch, num_heads, lq, key.size(1)).reshape(batch * num_heads, lq, -1)
    output, weights = F.multi_head_attention_forward(
        query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1), d_model, num_heads,
        in_proj_weight=None, in_proj_bias=torch.cat([params["b_q"], params["b_k"], params["b_v"]]),
        bias_k=None, bias_v=None, add_zero_attn=False, dropout_p=0.0,
        out_proj_weight=params["w_o"], out_proj_bias=params["b_o"], training=False,
        attn_mask=blocked, need_weights=need_weights, average_attn_weights=False,
        use_separate_proj_weight=True, q_proj_weight=params["w_q"], k_proj_weight=params["w_k"],
        v_proj_weight=params["w_v"])
    return output.transpose(0, 1), weights


def mha_torch_output(query, key, value, params, num_heads, mask=None):
    """The output from PyTorch's fused path (F.scaled_dot_product_attention inside, zeros on a
    query with no visible key), the weights by hand."""
    output, _ = _torch_mha(query, key, value, params, num_heads, mask, need_weights=False)
    batch, lq, d_model = query.shape
    q = F.linear(query, params["w_q"], params["b_q"]).view(batch, lq, num_heads, -1).transpose(1, 2)
    k = F.linear(key, params["w_k"], params["b_k"]).view(batch, key.size(1), num_heads, -1).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_model // num_heads)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return output, torch.softmax(scores, dim=-1).nan_to_num(0.0)


CORRECT = [
    (ATTENTION, attention_where),
    (ATTENTION, attention_float64_inside),
    (ATTENTION, attention_non_contiguous), (ATTENTION, attention_manual_softmax),
    (ATTENTION, attention_row_loop),
    ("linear", linear_addmm), ("linear", linear_rows), ("linear", linear_float64_inside),
    ("linear", linear_transposed_product),
    ("split_heads", split_unflatten), ("split_heads", split_view_permute), ("split_heads", split_head_loop),
    ("merge_heads", merge_permute_reshape), ("merge_heads", merge_contiguous_view),
    ("merge_heads", merge_einsum_flatten),
    (MHA, mha_head_loop), (MHA, mha_einsum_float64),
]


# ==== wrong answers that must be named =========================================================

def attention_query_scaled_in_place(query, key, value, mask=None):
    query /= math.sqrt(query.size(-1))
    scores = query @ key.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ value, weights


def attention_annotated(query, key, value, mask=None):
    """The Annotated Transformer's attention, as printed there (without dropout)."""
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = scores.softmax(dim=-1)
    return torch.matmul(p_attn, value), p_attn


def attention_finfo_min(query, key, value, mask=None):
    """Hugging Face's habit: the dtype's most negative number."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights


def attention_mask_after_softmax(query, key, value, mask=None):
    weights = torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), dim=-1)
    if mask is not None:
        weights = weights * mask
    return weights @ value, weights


def attention_scaled_by_d_v(query, key, value, mask=None):
    d_v = value.shape[-1]
    scores = query @ key.transpose(-2, -1) / d_v ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ value, weights


def attention_luong(query, key, value, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", query, key)
    if mask is not None:
        scores = torch.where(mask, scores, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ value, weights


def mha_no_heads_scale(query, key, value, params, num_heads, mask=None):
    """Scales by the whole width, as a single-head attention would."""
    batch, lq, d_model = query.shape
    q = (query @ params["w_q"].T + params["b_q"]).view(batch, lq, num_heads, -1).transpose(1, 2)
    k = (key @ params["w_k"].T + params["b_k"]).view(batch, key.size(1), num_heads, -1).transpose(1, 2)
    v = (value @ params["w_v"].T + params["b_v"]).view(batch, key.size(1), num_heads, -1).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_model)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    context = (weights @ v).transpose(1, 2).reshape(batch, lq, d_model)
    return context @ params["w_o"].T + params["b_o"], weights


NAMED = [
    (ATTENTION, attention_query_scaled_in_place, "query scaled in place"),
    (ATTENTION, attention_annotated, "masked scores filled with -1e9, fully masked rows not zeroed"),
    (ATTENTION, attention_finfo_min, "masked scores filled with -1e9, fully masked rows not zeroed"),
    (ATTENTION, attention_mask_after_softmax, "mask applied after the softmax"),
    (ATTENTION, attention_scaled_by_d_v, "scores scaled by sqrt(d_v) instead of sqrt(d_k)"),
    (ATTENTION, attention_luong, "no scaling"),
    (MHA, mha_no_heads_scale, "scores scaled by sqrt(d_model) instead of sqrt(d_k)"),
]


# ==== answers that change the caller's tensors in place ========================================

def attention_key_scaled_in_place(query, key, value, mask=None):
    key.div_(math.sqrt(key.size(-1)))         # scales the scores, and the caller's key
    scores = query @ key.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ value, weights


def attention_mask_flipped_in_place(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        blocked = mask.logical_not_()          # flips the caller's mask too
        scores.masked_fill_(blocked, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(blocked, 0.0)
    return weights @ value, weights


def linear_bias_unsqueezed_in_place(x, weight, bias=None):
    y = x @ weight.T
    if bias is None:
        return y
    bias.unsqueeze_(0)                         # (1, out): the caller's bias changes shape
    return y + bias.squeeze(0)


def merge_transposed_in_place(x):
    batch, heads, length, d_k = x.shape
    x.transpose_(1, 2)                         # the caller's tensor becomes (B, L, H, d_k)
    return x.reshape(batch, length, heads * d_k)


def mha_weights_transposed_in_dict(query, key, value, params, num_heads, mask=None):
    for name in ("w_q", "w_k", "w_v", "w_o"):
        params[name] = params[name].T          # rebinds the caller's dict entries
    q, k, v = (x @ params[f"w_{n}"] + params[f"b_{n}"] for x, n in ((query, "q"), (key, "k"), (value, "v")))
    return _mha_from_projections(q, k, v, params, num_heads, mask, transposed=True)


def mha_weights_transposed_in_place(query, key, value, params, num_heads, mask=None):
    for name in ("w_q", "w_k", "w_v", "w_o"):
        params[name].t_()                      # (in, out) for x @ W, but the caller's weights too
    q, k, v = (x @ params[f"w_{n}"] + params[f"b_{n}"] for x, n in ((query, "q"), (key, "k"), (value, "v")))
    return _mha_from_projections(q, k, v, params, num_heads, mask, transposed=True)


def _mha_from_projections(q, k, v, params, num_heads, mask, transposed=False):
    batch, lq, d_model = q.shape
    split = lambda t: t.reshape(batch, t.size(1), num_heads, -1).transpose(1, 2)  # noqa: E731
    context, weights = attention_where(split(q), split(k), split(v), mask)
    merged = context.transpose(1, 2).reshape(batch, lq, d_model)
    w_o = params["w_o"] if transposed else params["w_o"].T
    return merged @ w_o + params["b_o"], weights


IN_PLACE = [
    (ATTENTION, attention_query_scaled_in_place, "query"),
    (ATTENTION, attention_key_scaled_in_place, "key"),
    (ATTENTION, attention_mask_flipped_in_place, "mask"),
    ("linear", linear_bias_unsqueezed_in_place, "bias"),
    ("merge_heads", merge_transposed_in_place, "x"),
    (MHA, mha_weights_transposed_in_dict, "params"),
    (MHA, mha_weights_transposed_in_place, "params"),
]


# ==== answers that autograd cannot follow back =================================================

def attention_numpy_softmax(query, key, value, mask=None):
    scores = (query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))).detach().numpy()
    if mask is not None:
        scores = np.where(mask.numpy(), scores, -1e9)
    exp = np.exp(scores - scores.max(axis=-1, keepdims=True))
    if mask is not None:
        exp = exp * mask.numpy()
    weights = torch.from_numpy(exp / np.maximum(exp.sum(axis=-1, keepdims=True), 1e-30))
    return weights @ value, weights


def attention_detached_weights(query, key, value, mask=None):
    _, weights = attention_where(query, key, value, mask)
    weights = weights.detach()
    return weights @ value, weights


def linear_rebuilt_from_values(x, weight, bias=None):
    y = torch.tensor((x @ weight.T).tolist(), dtype=x.dtype)
    return y if bias is None else y + bias


def split_detached(x, num_heads):
    batch, length, d_model = x.shape
    return x.detach().reshape(batch, length, num_heads, -1).transpose(1, 2)


def merge_numpy(x):
    batch, heads, length, d_k = x.shape
    array = x.detach().numpy().transpose(0, 2, 1, 3).reshape(batch, length, heads * d_k)
    return torch.from_numpy(array.copy())


def mha_projections_without_grad(query, key, value, params, num_heads, mask=None):
    with torch.no_grad():
        q = F.linear(query, params["w_q"], params["b_q"])
        k = F.linear(key, params["w_k"], params["b_k"])
        v = F.linear(value, params["w_v"], params["b_v"])
    return _mha_from_projections(q, k, v, params, num_heads, mask)


NO_GRADIENT = [
    (ATTENTION, attention_numpy_softmax), (ATTENTION, attention_detached_weights),
    ("linear", linear_rebuilt_from_values), ("split_heads", split_detached),
    ("merge_heads", merge_numpy), (MHA, mha_projections_without_grad),
]


# ==== the tests ================================================================================

@pytest.mark.parametrize("name, fn", CORRECT, ids=lambda v: getattr(v, "__name__", v))
def test_correct_but_unusual_answers_pass(name, fn):
    result = check(name, fn)
    assert result.status == "passed", str(result)


@pytest.mark.parametrize("name, fn", CORRECT, ids=lambda v: getattr(v, "__name__", v))
def test_correct_answers_also_pass_on_the_random_cases(name, fn):
    result = check(name, fn, random_cases(name, 0) + random_cases(name, 1))
    assert result.status == "passed", str(result)


@pytest.mark.parametrize("name, fn, mistake", NAMED, ids=lambda v: getattr(v, "__name__", None))
def test_classic_mistakes_and_other_conventions_are_named(name, fn, mistake):
    result = check(name, fn)
    assert result.status == "mistake", str(result)
    assert result.mistake == mistake, str(result)
    assert "hint: " in result.details


@pytest.mark.parametrize("name, fn, argument", IN_PLACE, ids=lambda v: getattr(v, "__name__", None))
def test_editing_the_callers_tensors_in_place_fails_and_names_the_argument(name, fn, argument):
    result = check(name, fn)
    assert not result, str(result)
    if result.status == "mistake":   # a catalogued in-place mistake, e.g. "query scaled in place"
        assert "in place" in result.mistake, str(result)
    assert f"changed its input `{argument}" in str(result), str(result)  # or `params['w_q']`


def test_scaling_the_query_in_place_is_the_catalogued_mistake_even_though_the_values_are_right():
    result = check(ATTENTION, attention_query_scaled_in_place)
    assert result.mistake == "query scaled in place"
    assert "changed its input `query` in place" in result.details


@pytest.mark.parametrize("name, fn", NO_GRADIENT, ids=lambda v: getattr(v, "__name__", v))
def test_outputs_autograd_cannot_follow_fail_with_the_gradient_message(name, fn):
    result = check(name, fn)
    assert result.status == "failed", str(result)
    text = str(result)
    assert "gradient" in text and ("autograd cannot follow it back" in text
                                   or "no gradient flows back" in text), text


@pytest.mark.parametrize("name", MINE)
def test_the_checks_compare_gradients(name):
    assert REGISTRY[name].gradients


def test_convention_hints_say_where_the_convention_comes_from_and_what_differs():
    hints = {m.name: m.hint for m in REGISTRY[ATTENTION].mistakes}
    annotated = hints["masked scores filled with -1e9, fully masked rows not zeroed"]
    assert "Annotated Transformer" in annotated and "uniform" in annotated and "zeros" in annotated
    assert "Luong" in hints["no scaling"]
    assert "d_k = d_v" in hints["scores scaled by sqrt(d_v) instead of sqrt(d_k)"]
    assert "less than 1" in hints["mask applied after the softmax"]
    for exercise in MINE:
        for mistake in REGISTRY[exercise].mistakes:
            assert "\n" not in mistake.hint and len(mistake.hint) <= 160, mistake.name


def test_the_annotated_transformer_differs_only_on_a_query_with_no_visible_key():
    cases = REGISTRY[ATTENTION].make_cases()
    others = [c for c in cases if "mask" not in c.kwargs or c.kwargs["mask"].any(-1).all()]
    assert len(others) < len(cases) and check(ATTENTION, attention_annotated, others)
    result = check(ATTENTION, attention_annotated)
    assert result.mistake == "masked scores filled with -1e9, fully masked rows not zeroed"
    assert "a fully masked query row" in result.details


def test_pytorchs_own_multi_head_attention_passes_as_values_but_is_not_the_learners_work():
    """Right in everything a caller sees, and still not the exercise: it fails and says why."""
    result = check(MHA, mha_torch_output)
    assert not result and "`torch.nn.functional.multi_head_attention_forward`" in result.message, str(result)


def test_pytorchs_multihead_weights_give_nan_gradients_on_a_query_with_no_visible_key():
    """nn.MultiheadAttention's explicit-weights path gives NaN there, and NaN gradients even
    after nan_to_num: its convention differs from the contract, and the check says so."""
    def mha_torch_weights(query, key, value, params, num_heads, mask=None):
        output, _ = _torch_mha(query, key, value, params, num_heads, mask, need_weights=False)
        _, weights = _torch_mha(query, key, value, params, num_heads, mask, need_weights=True)
        return output, weights.nan_to_num(0.0)
    result = check(MHA, mha_torch_weights)
    assert not result and "contains NaN" in result.message, str(result)
    assert "nn.MultiheadAttention gives NaN" in result.message


def test_an_answer_with_nan_on_a_fully_masked_row_is_named_in_multi_head_attention_too():
    def mha_without_zeroing(query, key, value, params, num_heads, mask=None):
        batch, lq, d_model = query.shape
        split = lambda t: t.view(batch, t.size(1), num_heads, -1).transpose(1, 2)  # noqa: E731
        q = split(F.linear(query, params["w_q"], params["b_q"]))
        k = split(F.linear(key, params["w_k"], params["b_k"]))
        v = split(F.linear(value, params["w_v"], params["b_v"]))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        context = torch.softmax(scores, dim=-1) @ v
        merged = context.transpose(1, 2).reshape(batch, lq, d_model)
        return F.linear(merged, params["w_o"], params["b_o"]), torch.softmax(scores, dim=-1)
    result = check(MHA, mha_without_zeroing)
    assert result.mistake == "NaN on a fully masked row", str(result)


def test_attention_cases_cover_d_v_other_than_d_k_lq_other_than_lk_and_fully_masked_rows():
    cases = REGISTRY[ATTENTION].make_cases()
    assert any(c.args[2].size(-1) != c.args[0].size(-1) for c in cases)
    assert any(c.args[0].size(-2) != c.args[1].size(-2) for c in cases)
    assert any("mask" in c.kwargs and not c.kwargs["mask"].any(-1).all() for c in cases)


def test_multi_head_cases_cover_cross_attention_every_mask_layout_one_head_and_d_k_1():
    cases = REGISTRY[MHA].make_cases()
    assert any(c.args[0].size(1) != c.args[1].size(1) for c in cases)                   # Lq != Lk
    assert any(c.args[1] is not c.args[2] and not torch.equal(c.args[1], c.args[2]) for c in cases)
    layouts = {tuple(1 if n == 1 else "B" if i == 0 else "H" if i == 1 else "L" for i, n in
                     enumerate(c.kwargs["mask"].shape)) for c in cases if "mask" in c.kwargs}
    assert {(1, 1, "L", "L"), ("B", 1, 1, "L"), ("B", 1, "L", "L")} <= layouts
    assert any(c.args[4] == 1 for c in cases)                                           # one head
    assert any(c.args[0].size(-1) == c.args[4] for c in cases)                          # d_k = 1
    for c in cases:                                                                     # biases present
        assert all(c.args[3][f"b_{n}"] is not None and c.args[3][f"b_{n}"].abs().sum() > 0 for n in "qkvo")


@pytest.mark.parametrize("name", MINE)
def test_random_cases_stay_within_the_contract_and_vary_with_the_seed(name):
    exercise = REGISTRY[name]
    first, again, other = random_cases(name, 3), random_cases(name, 3), random_cases(name, 4)
    assert 5 <= len(first) <= 15
    assert [c.label for c in first] == [c.label for c in again]
    assert all(torch.equal(a.args[0], b.args[0]) for a, b in zip(first, again))
    assert any(a.args[0].shape != b.args[0].shape for a, b in zip(first, other))
    for case in first + other:
        reference_outcome(exercise, case)   # the reference accepts every one of them


def test_diagnoses_stay_short():
    def mha_off_by_a_little(query, key, value, params, num_heads, mask=None):
        output, weights = mha_head_loop(query, key, value, params, num_heads, mask)
        return output + 1e-2, weights
    for name, fn in [(MHA, mha_off_by_a_little), (MHA, mha_weights_transposed_in_dict),
                     (ATTENTION, attention_numpy_softmax), ("linear", linear_rebuilt_from_values)]:
        text = str(check(name, fn))
        assert "tensor([" not in text and "{'w_q'" not in text, text
        assert len(text.splitlines()) <= 6 and all(len(line) <= 200 for line in text.splitlines()), text


@pytest.mark.parametrize("name, fn", [(ATTENTION, attention_numpy_softmax), (MHA, mha_no_heads_scale),
                                      (MHA, mha_projections_without_grad)],
                         ids=lambda v: getattr(v, "__name__", v))
def test_a_wrong_answer_is_judged_well_under_a_second(name, fn):
    check(name, fn)                    # warm up
    start = time.process_time()        # CPU time: other work on a busy machine does not count
    check(name, fn)
    assert time.process_time() - start < 0.5
