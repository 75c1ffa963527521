"""Exercises of notebook 10: teacher forcing and the model's forward pass.

How each check calls the learner's function:
    shift_right(tgt)                                  -> (decoder input, labels)
    forward(params, src, tgt_in, config, training)    -> logits (B, Lt, V)

tgt is <bos> answer <eos>, right-padded, as tfmlib.training.make_batch makes it.
The forward check runs a tiny model whose config has dropout_p > 0, in evaluation
(training=False) and in training (training=True). Dropout draws its masks from torch's
global random generator, so the check seeds it the same way before the reference's call
and before the learner's (and puts its state back afterwards): an answer built from
encode_source and decode_target (or from tfmlib's encoder and decoder) draws the same
masks, and its logits can be compared number for number. The logits feed training, so
the gradient reaching every weight must match the reference's too.
"""
from __future__ import annotations

import contextlib

import torch

from ..training import (BOS_ID, PAD_ID, ModelConfig, decode_target, encode_source, forward,
                        init_model, make_batch, parameters, shift_right)
from .core import Case, Exercise, Mistake, register


# ---- shift_right ------------------------------------------------------------------------------

def _shift_cases() -> list[Case]:
    g = torch.Generator().manual_seed(100)
    cases = [Case(f"{task} task, {count} sequences", (make_batch(task, count, 2, 6, False, g)[1],))
             for task, count in (("reverse", 3), ("sum", 4), ("reverse", 2))]
    cases.append(Case("one sequence with an empty answer: <bos> <eos>", (_bos_eos(),)))
    return cases


def _shift_random_cases(seed: int) -> list[Case]:
    """Batches of both tasks from make_batch: 1 to 6 sequences of 0 to 9 digits (so L from 2),
    padded or not, and the shortest target of all, <bos> <eos>."""
    g = torch.Generator().manual_seed(1000 + seed)

    def integer(low, high):
        return int(torch.randint(low, high + 1, (), generator=g))

    cases = [Case("<bos> <eos>", (_bos_eos(),))]
    for _ in range(8):
        task, count, low = ("reverse", "sum")[integer(0, 1)], integer(1, 6), integer(0, 3)
        high = integer(max(low, 1), 9)  # the empty sequence is in the held-out split only
        tgt = make_batch(task, count, low, high, bool(integer(0, 1)), g)[1]
        cases.append(Case(f"{task} task, B={count}, L={tgt.size(1)}", (tgt,)))
    return cases


def _bos_eos() -> torch.Tensor:
    """The shortest target, (1, 2): the reversed empty sequence (held out, like every empty one)."""
    return make_batch("reverse", 1, 0, 0, True, torch.Generator().manual_seed(0))[1]


def _pad_labels_as_minus_100(tgt):
    labels = tgt[:, 1:].clone()
    labels[labels == PAD_ID] = -100
    return tgt[:, :-1], labels


def _pad_labels_as_minus_100_in_place(tgt):
    labels = tgt[:, 1:]                     # a view: the next line writes into tgt itself
    labels[labels == PAD_ID] = -100
    return tgt[:, :-1], labels


register(Exercise(
    name="shift_right",
    reference=shift_right,
    make_cases=_shift_cases,
    random_cases=_shift_random_cases,
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
                "tgt already starts with <bos>: just drop its last token for the input (Hugging Face's "
                "shift_tokens_right prepends a start token because its labels have none)",
                lambda tgt: (torch.cat([torch.full_like(tgt[:, :1], BOS_ID), tgt[:, :-1]], dim=1), tgt)),
        Mistake("labels not shifted",
                "the labels are the input moved one step left: tgt[:, 1:]",
                lambda tgt: (tgt[:, :-1], tgt[:, :-1])),
        Mistake("pad labels set to -100 (Hugging Face's ignore index)",
                "this course's sequence_loss skips PAD_ID (ignore_index=PAD_ID), not -100: return "
                "tgt[:, 1:] as it is",
                _pad_labels_as_minus_100),
        Mistake("labels edited in place: tgt[:, 1:] is a view, so the caller's tgt changed too",
                "a slice shares memory with tgt, so writing into it edits the caller's batch; return "
                "tgt[:, 1:] as it is (sequence_loss skips PAD_ID, not -100)",
                _pad_labels_as_minus_100_in_place),
    ],
))


# ---- forward ----------------------------------------------------------------------------------

_CONFIG = ModelConfig(d_model=16, num_heads=2, d_ff=24, num_layers=1, max_len=16, dropout_p=0.3)
_SEED = 1010  # torch's global generator is seeded with it before every call


def _model(config: ModelConfig, g: torch.Generator) -> dict:
    """init_model's params, with LayerNorm and output bias moved away from 1 and 0 (where
    swapping gamma and beta, or dropping the bias, would not show)."""
    params = init_model(config, g)
    with torch.no_grad():
        for p in parameters(params):
            if p.dim() == 1:
                p.add_(0.3 * torch.randn(p.shape, generator=g))
    return params


def _forward_cases() -> list[Case]:
    g = torch.Generator().manual_seed(101)
    params = _model(_CONFIG, g)
    cases = []
    for training, count in ((False, 3), (True, 2), (False, 2)):
        src, tgt = make_batch("reverse", count, 2, 6, False, g)
        label = "training=True: dropout on" if training else "training=False: evaluation"
        cases.append(Case(f"{label}, {count} sequences",
                          (params, src, shift_right(tgt)[0], _CONFIG, training)))
    return cases


def _forward_random_cases(seed: int) -> list[Case]:
    """Models of other sizes (1 or 2 layers, 1 to 4 heads of d_k 2 or 4, Pre-LN and Post-LN,
    dropout 0 to 0.5), batches of 1 to 4 sequences of 0 to 7 digits, in evaluation and training."""
    g = torch.Generator().manual_seed(1100 + seed)

    def integer(low, high):
        return int(torch.randint(low, high + 1, (), generator=g))

    cases = []
    for index in range(6):
        heads = integer(1, 4)
        config = ModelConfig(d_model=heads * 2 * integer(1, 2), num_heads=heads, d_ff=integer(1, 12),
                             num_layers=integer(1, 2), max_len=10, norm_first=bool(integer(0, 1)),
                             dropout_p=(0.0, 0.1, 0.5)[integer(0, 2)])
        low = integer(0, 3)
        src, tgt = make_batch(("reverse", "sum")[integer(0, 1)], integer(1, 4), low,
                              integer(max(low, 1), 7), False, g)  # an empty source is held out
        training = index % 2 == 1
        cases.append(Case(f"random model {index + 1}, B={src.size(0)}, training={training}",
                          (_model(config, g), src, shift_right(tgt)[0], config, training)))
    return cases


def _forward_run(fn, case: Case):
    """fn's logits, with torch's global generator seeded first (dropout draws from it) and
    put back as it was afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_SEED)
        return fn(*case.args, **case.kwargs)


def _forward_variant(encoder_training="argument", decoder_training="argument", pass_src_mask=True,
                     detach_memory=False, no_grad=False):
    def variant(params, src, tgt_in, config, training=False):
        modes = {"argument": training, "always": True, "never": False}
        with torch.no_grad() if no_grad else contextlib.nullcontext():
            memory, src_mask = encode_source(params, src, config, modes[encoder_training])
            if detach_memory:
                memory = memory.detach()
            return decode_target(params, tgt_in, memory, src_mask if pass_src_mask else None, config,
                                 modes[decoder_training])
    return variant


def _encoded_without_gradient(params, src, tgt_in, config, training=False):
    with torch.no_grad():
        memory, src_mask = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, src_mask, config, training)


register(Exercise(
    name="forward",
    reference=forward,
    make_cases=_forward_cases,
    random_cases=_forward_random_cases,
    run=_forward_run,
    gradients=True,
    mistakes=[
        Mistake("dropout left on at evaluation",
                "pass training=False down at evaluation, so dropout is the identity: the same input "
                "must give the same logits every time",
                _forward_variant(encoder_training="always", decoder_training="always")),
        Mistake("training flag not passed down: dropout never on",
                "hand `training` to encode_source and decode_target; with training=True dropout must act",
                _forward_variant(encoder_training="never", decoder_training="never")),
        Mistake("training flag not passed to encode_source: no dropout in the encoder",
                "hand `training` to both halves: encode_source(params, src, config, training)",
                _forward_variant(encoder_training="never")),
        Mistake("training flag not passed to decode_target: no dropout in the decoder",
                "hand `training` to both halves: decode_target(params, tgt_in, memory, src_mask, config, "
                "training)",
                _forward_variant(decoder_training="never")),
        Mistake("source padding mask not given to the decoder",
                "cross-attention must not look at padded source tokens: pass src_mask to decode_target",
                _forward_variant(pass_src_mask=False)),
        Mistake("encoder output cut off from autograd: no gradient reaches the encoder",
                "the encoder learns only through the decoder's cross-attention: hand memory on as it is, "
                "without .detach() or torch.no_grad()",
                _forward_variant(detach_memory=True), also=(_encoded_without_gradient,)),
        Mistake("forward pass under torch.no_grad(): no gradient reaches any weight",
                "the logits feed the loss, so autograd must record the pass: drop torch.no_grad() "
                "(greedy_decode has it because it never trains)",
                _forward_variant(no_grad=True)),
    ],
))
