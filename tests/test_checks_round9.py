"""The findings of learner trial round 9 (benchmarks/learner_trial/TRIAL_round9a.md, TRIAL_round9b.md),
tested the way a learner meets them: each wrong answer the trial found passing must fail on the case
that shows it.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from tfmlib import causal_mask, encode
from tfmlib.exercises import check
from tfmlib.language_model import decoder_block, lm_forward
from tfmlib.sublayers import layer_norm

MASK_OF_32 = causal_mask(32)  # built once, at the notebook's context, and sliced


def _fails_on(name, answer, case):
    result = check(name, answer)
    assert not result and case in result.details + result.message, str(result)


def encode_flags_swapped(sentence, vocab, add_eos=False, add_bos=False):
    return encode(sentence, vocab, add_bos=add_bos, add_eos=add_eos)


def test_flags_swapped_in_the_signature_fail_when_given_by_position():
    _fails_on("encode", encode_flags_swapped, "given by position")


def lm_forward_with_a_mask_of_32(params, ids, config):
    length = ids.size(1)
    x = (F.embedding(ids, params["token_embedding"]) * config.d_model ** 0.5
         + params["position_embedding"][:length])
    for block in params["blocks"]:
        x = decoder_block(x, block, config.num_heads, MASK_OF_32[..., :length, :length])
    final = params["final_norm"]
    return layer_norm(x, final["gamma"], final["beta"]) @ params["token_embedding"].T


def test_a_causal_mask_built_once_for_32_tokens_fails_past_64():
    _fails_on("lm_forward", lm_forward_with_a_mask_of_32, "a context past 64")


def lm_loss_of(forward):
    def lm_loss(params, ids, config):
        logits = forward(params, ids[:, :-1], config)
        return F.cross_entropy(logits.transpose(1, 2), ids[:, 1:])
    return lm_loss


def test_a_loss_on_that_forward_fails_on_windows_past_64():
    _fails_on("lm_loss", lm_loss_of(lm_forward_with_a_mask_of_32), "a context past 64")


def test_the_same_loss_on_the_courses_forward_passes():
    assert check("lm_loss", lm_loss_of(lm_forward))
