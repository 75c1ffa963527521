"""The findings of learner trial round 10 (benchmarks/learner_trial/TRIAL_round10a.md, TRIAL_round10b.md),
tested the way a learner meets them: each wrong answer the trial found passing must fail on the case
that shows it, or be refused as PyTorch's own version of the exercise.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tfmlib import feed_forward, multi_head_attention
from tfmlib.adam import adam_init
from tfmlib.exercises import check
from tfmlib.sublayers import layer_norm


def _fails_on(name, answer, case):
    result = check(name, answer)
    assert not result and case in result.details + result.message, str(result)


def layer_norm_mean_by_sum(x, gamma, beta, eps=1e-5):
    mean = x.sum(-1, keepdim=True) / x.size(-1)  # the sum of a float16 row overflows past 65504
    return (x - mean) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps) * gamma + beta


def test_a_mean_from_a_float16_sum_fails_on_a_row_near_260():
    _fails_on("layer_norm", layer_norm_mean_by_sum, "the row's sum overflow")


@pytest.mark.parametrize("name, answer, called", [
    ("layer_norm", lambda x, gamma, beta, eps=1e-5: torch.native_layer_norm(x, x.shape[-1:], gamma, beta, eps)[0],
     "torch.native_layer_norm"),
    ("causal_mask", lambda length, device=None: torch.nn.modules.transformer._generate_square_subsequent_mask(
        length).isfinite().reshape(1, 1, length, length), "_generate_square_subsequent_mask"),
    ("dropout", lambda x, p, training=True, generator=None: F.dropout1d(x.reshape(-1, 1), p, training)
     .reshape(x.shape), "torch.nn.functional.dropout1d"),
])
def test_pytorchs_own_kernel_under_another_name_is_refused(name, answer, called):
    _fails_on(name, answer, called)


def decoder_layer_first_query_row_of_the_memory_mask(x, memory, params, num_heads, self_mask=None,
                                                     memory_mask=None):
    def norm(h, name):
        return layer_norm(h, params[name]["gamma"], params[name]["beta"])

    first_row = None if memory_mask is None else memory_mask[..., :1, :]  # as if every query saw the same keys
    h = norm(x + multi_head_attention(x, x, x, params["self_attn"], num_heads, self_mask)[0], "norm1")
    h = norm(h + multi_head_attention(h, memory, memory, params["cross_attn"], num_heads, first_row)[0], "norm2")
    return norm(h + feed_forward(h, params["ffn"]), "norm3")


def test_a_memory_mask_cut_to_its_first_query_row_fails_on_a_mask_per_query():
    _fails_on("decoder_layer", decoder_layer_first_query_row_of_the_memory_mask, "a memory mask per query")


def adam_step_with_betas_swapped_by_default(parameters, state, lr, betas=(0.999, 0.9), eps=1e-8):
    beta1, beta2 = betas
    state["t"] += 1
    t = state["t"]
    with torch.no_grad():
        for p, m, v in zip(parameters, state["m"], state["v"]):
            if p.grad is not None:
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                p.sub_(lr * (m / (1 - beta1 ** t)) / ((v / (1 - beta2 ** t)).sqrt() + eps))


def test_adam_betas_swapped_in_the_default_fail_when_left_out():
    _fails_on("adam", (adam_init, adam_step_with_betas_swapped_by_default), "betas left at their default")
