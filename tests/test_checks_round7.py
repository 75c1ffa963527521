"""The findings of learner trial round 7 (benchmarks/learner_trial/TRIAL.md, round 7), tested the way
a learner meets them: each wrong answer the trial found passing (an <eos> that follows add_bos, an
SGD step that gives the parameter new memory, Adam's moments zipped with the parameters that have a
gradient, a class axis guessed by its size, a temperature clamped from below) must fail on the case
that shows it; an encoder stacked from a layer of one's own, with a LayerNorm of one's own, must
pass in half precision too.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from tfmlib import encode, encoder_layer, feed_forward, multi_head_attention
from tfmlib.adam import adam_init
from tfmlib.exercises import check
from tfmlib.language_model import lm_forward


def _fails_on(name, answer, case):
    result = check(name, answer)
    assert not result and case in result.details + result.message, str(result)


# ---- encode: <eos> added whenever <bos> is ----------------------------------------------------

def encode_eos_follows_bos(sentence, vocab, add_bos=False, add_eos=False):
    return encode(sentence, vocab, add_bos=add_bos, add_eos=add_eos or add_bos)


def test_an_eos_that_follows_add_bos_fails_on_bos_alone():
    _fails_on("encode", encode_eos_follows_bos, "<bos> only")


# ---- sgd_step: p.data = p - lr * grad ---------------------------------------------------------

def sgd_into_new_memory(parameters, lr):
    for p in parameters:
        if p.grad is not None:
            p.data = p.data - lr * p.grad


def test_an_sgd_step_that_gives_the_parameter_new_memory_is_named():
    _fails_on("sgd_step", sgd_into_new_memory, "new memory (`p.data = ...`)")


# ---- adam: moments zipped with the parameters that have a gradient ----------------------------

def adam_step_zipped_with_live_parameters(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    beta1, beta2 = betas
    state["t"] += 1
    t = state["t"]
    with torch.no_grad():
        live = [p for p in parameters if p.grad is not None]
        for p, m, v in zip(live, state["m"], state["v"]):  # the wrong moments after a skipped one
            m.mul_(beta1).add_((1 - beta1) * p.grad)
            v.mul_(beta2).add_((1 - beta2) * p.grad ** 2)
            p.sub_(lr * (m / (1 - beta1 ** t)) / ((v / (1 - beta2 ** t)).sqrt() + eps))


def test_adam_moments_zipped_with_the_parameters_that_have_a_gradient_fail():
    _fails_on("adam", (adam_init, adam_step_zipped_with_live_parameters), "the first without a gradient on step 2 only")


# ---- lm_loss: the class axis guessed by its size ----------------------------------------------

def lm_loss_axis_guessed_by_size(params, ids, config):
    logits = lm_forward(params, ids[:, :-1], config)
    if logits.size(1) != config.vocab_size:  # (B, L, V) -> (B, V, L), unless L happens to be V
        logits = logits.transpose(1, 2)
    return F.cross_entropy(logits, ids[:, 1:])


def test_a_class_axis_guessed_by_its_size_fails_when_the_length_is_the_vocab_size():
    _fails_on("lm_loss", lm_loss_axis_guessed_by_size, "as many positions as the vocab has ids")


# ---- next_token_probs: the temperature clamped "to be safe" -----------------------------------

def next_token_probs_clamped(logits, temperature=1.0):
    return torch.softmax(logits / max(temperature, 0.05), dim=-1)


def test_a_temperature_clamped_from_below_fails_on_a_nearly_greedy_one():
    _fails_on("next_token_probs", next_token_probs_clamped, "T = 0.02")


# ---- encoder: a stack of one's own layers, in half precision ----------------------------------

def layer_norm_by_hand(x, norm, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) * torch.rsqrt(variance + eps) * norm["gamma"] + norm["beta"]


def own_encoder_layer(x, params, num_heads, mask=None):
    x = layer_norm_by_hand(x + multi_head_attention(x, x, x, params["self_attn"], num_heads, mask)[0],
                           params["norm1"])
    return layer_norm_by_hand(x + feed_forward(x, params["ffn"]), params["norm2"])


def encoder_by_reduce(x, layers, num_heads, mask=None):
    return functools.reduce(lambda hidden, params: own_encoder_layer(hidden, params, num_heads, mask), layers, x)


def test_an_encoder_of_own_layers_with_an_own_layer_norm_passes_in_half_precision():
    """Its float16 and bfloat16 gradients land far from the reference's at a few entries (a ReLU input
    near 0 falls on the other side), yet near as a whole; the float32 and float64 cases judge each entry."""
    assert check("encoder_layer", own_encoder_layer)
    assert check("encoder", encoder_by_reduce), str(check("encoder", encoder_by_reduce))


def test_an_encoder_whose_gradient_is_half_wrong_in_half_precision_still_fails():
    def detached_in_half(x, layers, num_heads, mask=None):
        hidden = encoder_by_reduce(x, layers, num_heads, mask)
        return 0.5 * hidden.detach() + 0.5 * hidden if x.dtype in (torch.float16, torch.bfloat16) else hidden

    result = check("encoder", detached_in_half)
    assert not result and "float16" in result.details and "gradient" in result.message, str(result)
