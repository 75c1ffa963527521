"""The findings of learner trial round 8 (benchmarks/learner_trial/TRIAL_round8a.md, TRIAL_round8b.md),
tested the way a learner meets them: each wrong answer the trial found passing must fail on the
case that shows it; right answers written in other styles must pass.
"""
from __future__ import annotations

import math

import pytest
import torch

from tfmlib import causal_mask, linear, merge_heads, split_heads
from tfmlib.adam import adam_init
from tfmlib.exercises import check
from tfmlib.language_model import lm_forward
from tfmlib.training import decode_target, encode_source


def _fails_on(name, answer, case):
    result = check(name, answer)
    assert not result and case in result.details + result.message, str(result)


# ---- layer_norm: squares of float16 values overflow past 256 -----------------------------------

def layer_norm_squares_in_dtype(x, gamma, beta, eps=1e-5):
    centred = x - x.mean(-1, keepdim=True)
    return centred / torch.sqrt((centred ** 2).mean(-1, keepdim=True) + eps) * gamma + beta


def layer_norm_in_float32_at_least(x, gamma, beta, eps=1e-5):
    wide = torch.promote_types(x.dtype, torch.float32)  # float16 and bfloat16 widened, float64 kept
    centred = x.to(wide) - x.to(wide).mean(-1, keepdim=True)
    out = centred * torch.rsqrt((centred ** 2).mean(-1, keepdim=True) + eps) * gamma.to(wide) + beta.to(wide)
    return out.to(x.dtype)


def test_squares_summed_in_float16_fail_on_an_outlier_feature():
    _fails_on("layer_norm", layer_norm_squares_in_dtype, "one feature 300 above")


def test_squares_summed_in_float32_and_cast_back_pass():
    assert check("layer_norm", layer_norm_in_float32_at_least)


# ---- feed_forward: a ReLU written with arithmetic breaks at float16's edge ---------------------

def _ffn(relu):
    def feed_forward(x, params):
        return linear(relu(linear(x, params["w_1"], params["b_1"])), params["w_2"], params["b_2"])
    return feed_forward


@pytest.mark.parametrize("relu", [lambda h: h * (h > 0), lambda h: (h + h.abs()) / 2],
                         ids=["h times (h > 0): NaN at -inf", "(h + |h|) / 2: inf at 40000"])
def test_a_relu_by_arithmetic_fails_at_float16s_edge(relu):
    _fails_on("feed_forward", _ffn(relu), "hidden units at 40000 and -inf")


def test_a_relu_by_clamp_passes():
    assert check("feed_forward", _ffn(lambda h: h.clamp(min=0)))


# ---- sgd_step and adam -------------------------------------------------------------------------

def sgd_stops_at_the_first_parameter_without_a_gradient(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is None:
                break
            p.sub_(lr * p.grad)


def test_an_sgd_step_that_stops_at_a_missing_gradient_fails():
    _fails_on("sgd_step", sgd_stops_at_the_first_parameter_without_a_gradient,
              "the first without a gradient on step 2 only")


def adam_step_with_float32_bias_corrections(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    beta1, beta2 = betas
    state["t"] += 1
    correction1, correction2 = 1 - torch.tensor(beta1) ** state["t"], 1 - torch.tensor(beta2) ** state["t"]
    with torch.no_grad():
        for p, m, v in zip(parameters, state["m"], state["v"]):
            if p.grad is not None:
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                p.sub_(lr * (m / correction1) / ((v / correction2).sqrt() + eps))


def test_adam_bias_corrections_rounded_to_float32_fail_on_float64_parameters():
    _fails_on("adam", (adam_init, adam_step_with_float32_bias_corrections), "steps back to 0")


# ---- forward: an answer that seeds its own dropout ---------------------------------------------

def forward_seeding_its_own_dropout(params, src, tgt_in, config, training=False):
    torch.manual_seed(0)
    memory, src_mask = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, src_mask, config, training)


def test_a_forward_that_seeds_its_own_dropout_fails():
    result = check("forward", forward_seeding_its_own_dropout)
    assert not result and "dropout" in result.details, str(result)


# ---- cached_self_attention ---------------------------------------------------------------------

def _cached_attention(fill=-math.inf, window=None):
    def cached_self_attention(x, params, num_heads, cache=None):
        if cache is not None and window is not None:
            cache = {name: cache[name][:, :, -window:] for name in ("key", "value")}
        q, k, v = (split_heads(linear(x, params[f"w_{n}"], params.get(f"b_{n}")), num_heads) for n in "qkv")
        if cache is not None:
            k, v = torch.cat([cache["key"], k], 2), torch.cat([cache["value"], v], 2)
        new, length = x.size(1), k.size(2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        scores = scores.masked_fill(~causal_mask(length)[:, :, length - new:], fill)
        context = scores.softmax(-1) @ v
        return linear(merge_heads(context), params["w_o"], params.get("b_o")), {"key": k, "value": v}
    return cached_self_attention


def test_a_cache_cut_to_its_last_64_positions_fails():
    _fails_on("cached_self_attention", _cached_attention(window=64), "after 70 cached")


def test_a_fill_of_minus_1e4_fails_on_tokens_that_repel_themselves():
    _fails_on("cached_self_attention", _cached_attention(fill=-1e4), "w_k = -w_q")


def test_the_same_attention_with_minus_inf_passes():
    assert check("cached_self_attention", _cached_attention())


# ---- generation: top-p summed in float16; the default temperature ------------------------------

def top_p_summed_in_float16(logits, p):
    ordered = logits.sort(-1, descending=True).values
    probs = ordered.softmax(-1).half()
    kept = (probs.cumsum(-1) - probs) < p
    last = ordered.masked_fill(~kept, math.inf).amin(-1, keepdim=True)
    return logits.masked_fill(logits < last, -math.inf)


def test_top_p_summed_in_float16_fails_on_a_long_tail():
    _fails_on("top_p_filter", top_p_summed_in_float16, "a long tail")


def next_token_probs_skipping_a_1d_default(logits, temperature=1.0):
    if temperature == 1.0 and logits.dim() == 1:
        return logits
    return torch.softmax(logits / temperature, -1)


def test_a_shortcut_at_the_default_temperature_fails():
    _fails_on("next_token_probs", next_token_probs_skipping_a_1d_default, "T left at its default")


# ---- lm_loss: log of softmax in two steps ------------------------------------------------------

def lm_loss_log_of_softmax(params, ids, config):
    logits = lm_forward(params, ids[:, :-1], config)
    log_probs = torch.log(torch.softmax(logits, -1))
    return -log_probs.gather(-1, ids[:, 1:, None]).mean()


def test_a_log_of_softmax_fails_on_logits_in_the_thousands():
    _fails_on("lm_loss", lm_loss_log_of_softmax, "`params` times 30")
