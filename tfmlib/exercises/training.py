"""Exercises of notebook 10: teacher forcing and the model's forward pass in evaluation mode.

How each check calls the learner's function:
    shift_right(tgt)                                  -> (decoder input, labels)
    forward(params, src, tgt_in, config, training)    -> logits (B, Lt, V)

tgt is <bos> answer <eos>, right-padded, as tfmlib.training.make_batch makes it.
The forward check runs a tiny model whose config has dropout_p > 0: in evaluation
(training=False) the logits must be the same on every call; with training=True they
must not be. So the learner's function is called twice per case, and outputs that
change between calls are reported as "varies between calls" instead of numbers.
"""
from __future__ import annotations

import torch

from ..training import (BOS_ID, ModelConfig, decode_target, encode_source, forward, init_model,
                        make_batch, shift_right)
from .core import Case, Exercise, Mistake, register
from .encoder_decoder import ShortList


# ---- shift_right ------------------------------------------------------------------------------

def _shift_cases() -> list[Case]:
    g = torch.Generator().manual_seed(100)
    return [Case(f"{task} task, {count} sequences", (make_batch(task, count, 2, 6, False, g)[1],))
            for task, count in (("reverse", 3), ("sum", 4), ("reverse", 2))]


register(Exercise(
    name="shift_right",
    reference=shift_right,
    make_cases=_shift_cases,
    output_names=("decoder input", "labels"),
    mistakes=[
        Mistake("not shifted: the decoder reads the answer it must predict",
                "the decoder reads tgt[:, :-1] and predicts tgt[:, 1:]: each position's label is the next token",
                lambda tgt: (tgt, tgt)),
        Mistake("shifted the wrong way",
                "the input starts with <bos>: decoder input tgt[:, :-1], labels tgt[:, 1:]",
                lambda tgt: (tgt[:, 1:], tgt[:, :-1])),
        Mistake("sliced the batch axis instead of the length axis",
                "tgt is (B, L): slice the second axis, tgt[:, :-1] and tgt[:, 1:]",
                lambda tgt: (tgt[:-1], tgt[1:])),
        Mistake("<bos> prepended again",
                "tgt already starts with <bos>: do not add another, just drop the last token for the input",
                lambda tgt: (torch.cat([torch.full_like(tgt[:, :1], BOS_ID), tgt[:, :-1]], dim=1), tgt)),
        Mistake("labels not shifted",
                "the labels are the input moved one step left: tgt[:, 1:]",
                lambda tgt: (tgt[:, :-1], tgt[:, :-1])),
    ],
))


# ---- forward (evaluation mode) ----------------------------------------------------------------

_CONFIG = ModelConfig(d_model=16, num_heads=2, d_ff=24, num_layers=1, max_len=16, dropout_p=0.3)
_VARIES = "varies between calls"


def _forward_cases() -> list[Case]:
    g = torch.Generator().manual_seed(101)
    params = init_model(_CONFIG, g)
    params["encoder"], params["decoder"] = ShortList(params["encoder"]), ShortList(params["decoder"])
    for p in params["encoder"][0]["norm1"].values():  # LayerNorm params away from 1 and 0
        p.data.add_(0.3 * torch.randn(p.shape, generator=g))
    cases = []
    for training, count in ((False, 3), (True, 2), (False, 2)):
        src, tgt = make_batch("reverse", count, 2, 6, False, g)
        tgt_in = tgt[:, :-1]
        label = "training=True: dropout on" if training else "training=False: evaluation"
        cases.append(Case(f"{label}, {count} sequences", (params, src, tgt_in, _CONFIG, training)))
    return cases


def _forward_run(fn, case: Case):
    """Call fn twice; logits that differ between the calls are reported as `_VARIES`."""
    with torch.no_grad():
        first = fn(*case.args, **case.kwargs)
        if not isinstance(first, torch.Tensor):
            return first
        second = fn(*case.args, **case.kwargs)
    same = isinstance(second, torch.Tensor) and second.shape == first.shape \
        and second.dtype == first.dtype \
        and bool(torch.allclose(first, second, rtol=0.0, atol=0.0, equal_nan=True))
    return {"same logits on two calls": same, "logits": first.detach() if same else _VARIES}


def _forward_variant(training_source="argument", pass_src_mask=True):
    def variant(params, src, tgt_in, config, training=False):
        mode = {"argument": training, "always": True, "never": False}[training_source]
        memory, src_mask = encode_source(params, src, config, mode)
        return decode_target(params, tgt_in, memory, src_mask if pass_src_mask else None, config, mode)
    return variant


register(Exercise(
    name="forward",
    reference=forward,
    make_cases=_forward_cases,
    run=_forward_run,
    mistakes=[
        Mistake("dropout left on at evaluation",
                "pass training=False down at evaluation, so dropout is the identity: the same input "
                "must give the same logits every time",
                _forward_variant(training_source="always")),
        Mistake("training flag not passed down: dropout never on",
                "hand `training` to encode_source and decode_target; with training=True dropout must act",
                _forward_variant(training_source="never")),
        Mistake("source padding mask not given to the decoder",
                "cross-attention must not look at padded source tokens: pass src_mask to decode_target",
                _forward_variant(pass_src_mask=False)),
    ],
))
