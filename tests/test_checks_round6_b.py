"""The findings of learner trial round 6b (benchmarks/learner_trial/TRIAL_round6b.md) on notebooks
08-10 and b2, tested the way a learner meets them: each wrong answer the trial found passing (a
power of the probabilities, exp without the maximum, moments shared by shape, a fill of -1e4, a
defensive SGD step, float16 squares, a norm kept in a buffer, a forward that ignores the config,
a float32 gradient in a float64 Adam) must fail on the case that shows it, named where a
catalogued mistake fits; right answers written in other styles must pass.
"""
from __future__ import annotations

import math

import pytest
import torch

from tfmlib import (add_positional_encoding, causal_mask, decoder, embed, encoder, linear, merge_heads,
                    padding_mask, sinusoidal_positional_encoding, split_heads, target_mask)
from tfmlib.exercises import check
from tfmlib.training import PAD_ID, decode_target, encode_source

NEG_INF = float("-inf")


def _fails_on(name, answer, case, named=None):
    result = check(name, answer)
    assert not result and case in result.details, str(result)
    assert named is None or result.mistake == named, str(result)


def _passes(name, answer):
    result = check(name, answer)
    assert result, str(result)


# ---- 1. next_token_probs: the probabilities raised to 1 / T -------------------------------------

def probs_to_the_power(logits, temperature=1.0):
    p = torch.softmax(logits, dim=-1) ** (1.0 / temperature)
    return p / p.sum(dim=-1, keepdim=True)


def softmax_by_hand(logits, temperature=1.0):
    z = logits / temperature
    e = (z - z.amax(dim=-1, keepdim=True)).exp()
    return e / e.sum(dim=-1, keepdim=True)


def softmax_of_logits_times_one_over_t(logits, temperature=1.0):
    return torch.softmax(logits * (1.0 / temperature), dim=-1)


def test_probabilities_to_the_power_fail_on_wide_logits_at_a_high_temperature():
    _fails_on("next_token_probs", probs_to_the_power, "`logits` times 100",
              named="probabilities raised to the power 1 / T and renormalised")


@pytest.mark.parametrize("right", [softmax_by_hand, softmax_of_logits_times_one_over_t])
def test_dividing_the_logits_passes(right):
    _passes("next_token_probs", right)


# ---- 2. top_p_filter: exp without the maximum subtracted ----------------------------------------

def top_p_exp_over_sum(logits, p):
    s = logits.sort(dim=-1, descending=True).values
    e = s.exp()
    probs = e / e.sum(dim=-1, keepdim=True)
    n = ((probs.cumsum(-1) - probs) < p).sum(-1, keepdim=True).clamp(min=1)  # the top token always stays
    return logits.masked_fill(logits < s.gather(-1, n - 1), NEG_INF)


def top_p_float64_sums(logits, p):
    s = logits.sort(dim=-1, descending=True).values
    probs = s.double().softmax(dim=-1)
    n = ((probs.cumsum(-1) - probs) < p).sum(-1, keepdim=True)
    return logits.masked_fill(logits < s.gather(-1, n - 1), NEG_INF)


def top_p_loop(logits, p):
    out = logits.clone()
    for row, filtered in zip(logits.reshape(-1, logits.size(-1)), out.view(-1, logits.size(-1))):
        values = row.sort(descending=True).values
        probs, mass, smallest = values.softmax(-1), 0.0, values[0]
        for value, prob in zip(values, probs):
            if mass >= p:
                break
            mass, smallest = mass + float(prob), value
        filtered[row < smallest] = NEG_INF
    return out


def test_exp_over_sum_fails_on_logits_near_100():
    _fails_on("top_p_filter", top_p_exp_over_sum, "exp(100) overflows")


@pytest.mark.parametrize("right", [top_p_float64_sums, top_p_loop])
def test_softmax_that_subtracts_the_largest_passes(right):
    _passes("top_p_filter", right)


# ---- 3 and 9. adam: moments shared by parameters of one shape; the gradient cast to float32 ---------

def adam_init_one_zeros_per_shape(parameters):
    zeros_m, zeros_v = {}, {}
    return {"t": 0, "m": [zeros_m.setdefault(tuple(p.shape), torch.zeros_like(p)) for p in parameters],
            "v": [zeros_v.setdefault(tuple(p.shape), torch.zeros_like(p)) for p in parameters]}


def adam_init_zeros_times_n(parameters):
    ps = list(parameters)
    same = all(p.shape == ps[0].shape for p in ps)
    return {"t": 0, "m": [torch.zeros_like(ps[0])] * len(ps) if same else [torch.zeros_like(p) for p in ps],
            "v": [torch.zeros_like(p) for p in ps]}


def adam_init(parameters):
    return {"t": 0, "m": [torch.zeros_like(p) for p in parameters], "v": [torch.zeros_like(p) for p in parameters]}


def _adam_step(grad_of=lambda p: p.grad):
    def step(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
        b1, b2 = betas
        state["t"] += 1
        t = state["t"]
        with torch.no_grad():
            for p, m, v in zip(parameters, state["m"], state["v"]):
                if p.grad is None:
                    continue
                g = grad_of(p)
                m.copy_(b1 * m + (1 - b1) * g)
                v.copy_(b2 * v + (1 - b2) * g * g)
                p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))
    return step


@pytest.mark.parametrize("init", [adam_init_one_zeros_per_shape, adam_init_zeros_times_n])
def test_moments_shared_by_parameters_of_one_shape_fail(init):
    _fails_on("adam", (init, _adam_step()), "two parameters of one shape")


def test_a_gradient_cast_to_float32_fails_on_float64_and_is_named():
    _fails_on("adam", (adam_init, _adam_step(lambda p: p.grad.to(torch.float32))), "gradients near 1e40",
              named="float32 inside a float64 step: m and v from torch.zeros(p.shape), or p.grad cast")


@pytest.mark.parametrize("grad_of", [lambda p: p.grad, lambda p: p.grad.double()], ids=["own dtype", "float64"])
def test_own_moments_in_the_parameters_dtype_or_wider_pass(grad_of):
    _passes("adam", (adam_init, _adam_step(grad_of)))


# ---- 4. cached_self_attention: an additive -1e4 mask ---------------------------------------------

def _cached_attention(fill):
    def attention(x, params, num_heads, cache=None):
        q, k, v = (split_heads(linear(x, params[f"w_{n}"], params.get(f"b_{n}")), num_heads) for n in "qkv")
        if cache is not None:
            k, v = torch.cat([cache["key"], k], dim=2), torch.cat([cache["value"], v], dim=2)
        allowed = causal_mask(k.size(2))[:, :, -x.size(1):]
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        scores = scores + torch.zeros_like(scores).masked_fill(~allowed, -1e4) if fill == "-1e4 added" \
            else scores.masked_fill(~allowed, fill(scores))
        context = scores.softmax(-1) @ v
        return linear(merge_heads(context), params["w_o"], params.get("b_o")), {"key": k, "value": v}
    return attention


def test_an_additive_minus_1e4_mask_fails_where_scores_pass_1e4():
    # round 8 added an own case that shows it first: a prompt whose tokens score -1e6 with themselves
    _fails_on("cached_self_attention", _cached_attention("-1e4 added"), "w_k = -w_q, x times 1000")


@pytest.mark.parametrize("fill", [lambda s: NEG_INF, lambda s: torch.finfo(s.dtype).min], ids=["-inf", "finfo.min"])
def test_a_fill_that_no_score_passes_passes(fill):
    _passes("cached_self_attention", _cached_attention(fill))


# ---- 5. sgd_step: float64, lr above 1, non-finite gradients --------------------------------------

def _sgd(update):
    def step(parameters, lr):
        with torch.no_grad():
            for p in parameters:
                if p.grad is not None:
                    update(p, lr)
    return step


@pytest.mark.parametrize("wrong", [
    lambda p, lr: p.sub_(lr * torch.nan_to_num(p.grad)),           # 'defensive'
    lambda p, lr: p.copy_(p.float() - lr * p.grad.float()),        # float32 arithmetic
    lambda p, lr: p.sub_(min(lr, 1.0) * p.grad),                   # lr clamped 'for safety'
], ids=["nan_to_num", "float32", "lr clamped"])
def test_a_step_that_is_not_the_formula_as_it_is_fails(wrong):
    _fails_on("sgd_step", _sgd(wrong), "a gradient holding nan, inf and 1e40")


@pytest.mark.parametrize("right", [
    lambda p, lr: p.add_(p.grad, alpha=-lr),
    lambda p, lr: p.copy_(p.double() - lr * p.grad.double()),
], ids=["add_ alpha", "float64 copy_"])
def test_the_formula_as_it_is_passes(right):
    _passes("sgd_step", _sgd(right))


# ---- 6. clip_grad_norm: float16 squares; a norm kept in a buffer ----------------------------------

def _grads(parameters):
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    return [p.grad for p in params if p.grad is not None]


def clip_squares_in_their_dtype(parameters, max_norm):
    grads = _grads(parameters)
    if not grads:
        return torch.tensor(0.0)
    total = sum((g * g).sum() for g in grads).sqrt()
    for g in grads:
        g.mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total


_BUFFER = torch.zeros(())


def clip_into_a_buffer(parameters, max_norm):
    grads = _grads(parameters)
    if not grads:
        return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    for g in grads:
        g.mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return _BUFFER.copy_(total) if total.dtype == _BUFFER.dtype else total  # "no new tensor per call"


def clip_in_float64(parameters, max_norm):
    grads = _grads(parameters)
    if not grads:
        return torch.tensor(0.0)
    total = torch.cat([g.reshape(-1).double() for g in grads]).square().sum().sqrt()
    for g in grads:
        g.mul_(min(1.0, max_norm / (total.item() + 1e-6)))
    return total.to(grads[0].dtype)


def clip_vector_norms(parameters, max_norm):
    grads = _grads(parameters)
    if not grads:
        return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    factor = max_norm / (total.double() + 1e-6)  # float64: 1 / (norm + 1e-6) overflows float16
    for g in grads:
        g.mul_(factor.clamp(max=1.0).to(total.dtype))
    return total


def test_squares_in_float16_fail():
    _fails_on("clip_grad_norm", clip_squares_in_their_dtype, "float16 gradients of norm 500")


def test_a_norm_returned_in_a_buffer_fails_when_the_next_call_writes_it():
    result = check("clip_grad_norm", clip_into_a_buffer)
    assert not result and "changed when it was called again" in result.message, str(result)


@pytest.mark.parametrize("right", [clip_in_float64, clip_vector_norms])
def test_a_fresh_norm_summed_wide_enough_passes(right):
    _passes("clip_grad_norm", right)


# ---- 7. forward: a config off the default ---------------------------------------------------------

def forward_rebuilt_from_the_stacks(params, src, tgt_in, config, training=False):
    """From the public pieces, with positions always added and the scores always scaled."""
    pe = sinusoidal_positional_encoding(config.max_len, config.d_model, dtype=params["embedding"].dtype)
    options = dict(norm_first=config.norm_first, dropout_p=config.dropout_p, training=training)
    src_mask = padding_mask(src, PAD_ID)
    memory = encoder(add_positional_encoding(embed(src, params["embedding"]), pe), params["encoder"],
                     config.num_heads, src_mask, final_norm=params["encoder_norm"], **options)
    hidden = decoder(add_positional_encoding(embed(tgt_in, params["embedding"]), pe), memory, params["decoder"],
                     config.num_heads, target_mask(tgt_in, PAD_ID), src_mask, final_norm=params["decoder_norm"],
                     **options)
    return hidden @ params["embedding"].T + params["out_bias"]


def forward_one_layer_each(params, src, tgt_in, config, training=False):
    return forward_by_the_halves({**params, "encoder": params["encoder"][:1], "decoder": params["decoder"][:1]},
                                 src, tgt_in, config, training)


def forward_by_the_halves(params, src, tgt_in, config, training=False):
    memory, src_mask = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, src_mask, config, training)


@pytest.mark.parametrize("wrong", [forward_rebuilt_from_the_stacks, forward_one_layer_each])
def test_a_forward_that_fixes_what_the_config_says_fails(wrong):
    _fails_on("forward", wrong, "2 layers, Post-LN, no positions, scores not scaled")


def test_the_two_halves_pass():
    _passes("forward", forward_by_the_halves)
