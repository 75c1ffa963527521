"""Exercises of notebook 10: teacher forcing and the model's forward pass.

How each check calls the learner's function:
    shift_right(tgt)                                  -> (decoder input, labels)
    forward(params, src, tgt_in, config, training)    -> logits (B, Lt, V)
    label_smoothed_cross_entropy(logits, labels, smoothing, ignore_index) -> scalar

tgt is <bos> answer <eos>, right-padded, as tfmlib.training.make_batch makes it.
The forward check runs a tiny model whose config has dropout_p > 0, in evaluation
(training=False) and in training (training=True). Dropout draws its masks from torch's
global random generator, which the engine seeds the same way before every run (core._call):
an answer built from encode_source and decode_target (or from tfmlib's encoder and decoder)
draws the same masks as the reference, and its logits can be compared number for number.
The logits feed training, so the gradient reaching every weight must match the reference's too.
"""
from __future__ import annotations

import contextlib
import dataclasses

import torch

from ..training import (BOS_ID, PAD_ID, ModelConfig, decode_target, encode_source, forward,
                        init_model, label_smoothed_cross_entropy, make_batch, parameters,
                        shift_right)
from .core import Case, Contract, Exercise, Mistake, register


# ---- shift_right ------------------------------------------------------------------------------

def _shift_cases() -> list[Case]:
    g = torch.Generator().manual_seed(100)
    cases = [Case(f"{task} task, {count} sequences", (make_batch(task, count, 2, 6, False, g)[1],))
             for task, count in (("reverse", 3), ("sum", 4), ("reverse", 2))]
    cases.append(Case("one sequence with an empty answer: <bos> <eos>", (_bos_eos(),)))
    return cases


def _bos_eos() -> torch.Tensor:
    """The shortest target, (1, 2): the reversed empty sequence (held out, like every empty one)."""
    return make_batch("reverse", 1, 0, 0, True, torch.Generator().manual_seed(0))[1]


def _pad_labels_as_minus_100(*, in_place=False):
    def variant(tgt):
        labels = tgt[:, 1:] if in_place else tgt[:, 1:].clone()  # a view: the next line writes into tgt
        labels[labels == PAD_ID] = -100
        return tgt[:, :-1], labels
    return variant


register(Exercise(
    name="shift_right",
    contract=Contract(axes={"B": {"tgt": (0,)}, "L": {"tgt": (1,)}}),
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
                "tgt already starts with <bos>: just drop its last token for the input (Hugging Face's "
                "shift_tokens_right prepends a start token because its labels have none)",
                lambda tgt: (torch.cat([torch.full_like(tgt[:, :1], BOS_ID), tgt[:, :-1]], dim=1), tgt)),
        Mistake("labels not shifted",
                "the labels are the input moved one step left: tgt[:, 1:]",
                lambda tgt: (tgt[:, :-1], tgt[:, :-1])),
        Mistake("pad labels set to -100 (Hugging Face's ignore index)",
                "this course's sequence_loss skips PAD_ID (ignore_index=PAD_ID), not -100: return tgt[:, 1:] as it is",
                _pad_labels_as_minus_100()),
        Mistake("labels edited in place: tgt[:, 1:] is a view, so the caller's tgt changed too",
                "a slice shares memory with tgt, so writing into it edits the caller's batch; return "
                "tgt[:, 1:] as it is (sequence_loss skips PAD_ID, not -100)",
                _pad_labels_as_minus_100(in_place=True)),
    ],
))


# ---- forward ----------------------------------------------------------------------------------

_CONFIG = ModelConfig(d_model=16, num_heads=2, d_ff=24, num_layers=1, max_len=16, dropout_p=0.3)


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
    # by hand, as a contract value brings no params of two layers: every switch off the default
    other = dataclasses.replace(_CONFIG, num_layers=2, norm_first=False, positional=False, scale_scores=False)
    models = [(_CONFIG, _model(_CONFIG, g))] * 2 + [(other, _model(other, g))]
    cases = []
    for (config, params), training, count in zip(models, (False, True, False), (3, 2, 2)):
        src, tgt = make_batch("reverse", count, 2, 6, False, g)
        label = "training=True: dropout on" if training else "training=False: evaluation"
        label += "" if config is _CONFIG else ", 2 layers, Post-LN, no positions, scores not scaled"
        cases.append(Case(f"{label}, {count} sequences", (params, src, shift_right(tgt)[0], config, training)))
    return cases


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
    # float64 and half precision too: the positional table follows the weights' dtype
    contract=Contract(axes={"B": {"src": (0,), "tgt_in": (0,)}, "Lt": {"tgt_in": (1,)}}),
    reference=forward,
    make_cases=_forward_cases,
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
                "hand `training` to both halves: decode_target(params, tgt_in, memory, src_mask, config, training)",
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


# ---- label_smoothed_cross_entropy --------------------------------------------------------------- The check feeds
# logits (..., V) as a model would (padded targets right-padded, as make_batch makes them) and compares the loss and
# its gradient reaching the logits. Every case keeps at least one position: when all are ignored the loss is 0 / 0,
# and how nan flows back depends on how the mean is written, not on the idea.

def _smoothing_case(label, shape, vocab, smoothing, ignore_index, g, lengths=None,
                    scale=3.0, dtype=torch.float32) -> Case:
    """logits (*shape, vocab) and labels (*shape); with `lengths`, row b keeps its first lengths[b] labels and the
    rest are ignore_index (padding at the end, as in a batch)."""
    logits = (scale * torch.randn(*shape, vocab, generator=g)).to(dtype)
    low = 1 if ignore_index == 0 else 0   # <pad> = 0 is never a label to predict
    labels = torch.randint(low, vocab, shape, generator=g)
    if lengths is not None:
        position = torch.arange(shape[-1])
        padded = position >= torch.tensor(lengths).reshape(*shape[:-1], 1)
        labels = labels.masked_fill(padded, ignore_index)
    return Case(label, (logits, labels, smoothing, ignore_index))


def _smoothing_cases() -> list[Case]:
    g = torch.Generator().manual_seed(110)
    # exp(-800) is 0 even in float64: log(softmax(x)) gives -inf there, log_softmax does not
    confident = torch.tensor([[800.0, 0.0, -60.0, 20.0], [-20.0, 40.0, 900.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    return [
        _smoothing_case("(B, Lt, V) = (3, 5, 7), <pad> = 0 ignored, smoothing 0.1", (3, 5), 7, 0.1, PAD_ID, g,
                        lengths=[5, 3, 1]),
        _smoothing_case("(N, V) = (6, 4), float64, labels -100 ignored, smoothing 0.3", (6,), 4, 0.3,
                        -100, g, lengths=[4], dtype=torch.float64),
        _smoothing_case("smoothing 0: plain cross-entropy, (2, 4, 5) padded", (2, 4), 5, 0.0, PAD_ID,
                        g, lengths=[2, 4]),
        _smoothing_case("smoothing 1: only the uniform part, (4, 3, 6) padded", (4, 3), 6, 1.0, PAD_ID,
                        g, lengths=[3, 1, 2, 3]),
        _smoothing_case("no padding, (2, 3, 9), smoothing 0.25, ignore_index -100", (2, 3), 9, 0.25, -100, g),
        _smoothing_case("(B, H, L, V) = (2, 2, 3, 5), padded, smoothing 0.2", (2, 2, 3), 5, 0.2, PAD_ID,
                        g, lengths=[[3, 2], [1, 3]], dtype=torch.float64),
        Case("logits hundreds apart (a very confident model), smoothing 0.1",
             (confident, torch.tensor([0, 2, 3]), 0.1, -100)),
        _without_ignore_index(_smoothing_case(
            "ignore_index not given: -100 (F.cross_entropy's default) is ignored, class 0 is scored",
            (2, 6), 5, 0.2, -100, g, lengths=[6, 3])),
    ]


def _without_ignore_index(case: Case) -> Case:
    """The same call, ignore_index left at the function's default (the case pads with -100),
    and the first label made 0, a class to score like any other."""
    logits, labels, smoothing, _ = case.args
    labels = labels.clone()
    labels[(0,) * labels.dim()] = 0
    return Case(case.label, (logits, labels, smoothing))


def _target_distribution(log_probs, labels, smoothing, convention, ignore_index):
    """(..., V): the share of every class under a convention (a wrong one, but for "torch")."""
    vocab = log_probs.size(-1)
    one_hot = torch.nn.functional.one_hot(labels, vocab).to(log_probs.dtype)      # (..., V)
    others = 1 - one_hot
    if convention == "label left out of the spread":
        return (1 - smoothing) * one_hot + smoothing / vocab * others
    if convention == "V - 1":   # fairseq's label_smoothed_nll_loss
        return (1 - smoothing) * one_hot + smoothing / (vocab - 1) * others
    if convention.startswith("annotated transformer"):   # smoothing / (V - 2), nothing on <pad>
        dist = (1 - smoothing) * one_hot + smoothing / (vocab - 2) * others
        if convention.endswith("column 0"):       # <pad> = 0 written in
            dist[..., 0] = 0
        elif not convention.endswith("guarded") or 0 <= ignore_index < vocab:
            dist[..., ignore_index] = 0           # unguarded, -100 raises an IndexError
        return dist
    if convention == "swapped":
        return smoothing * one_hot + (1 - smoothing) / vocab
    if convention == "not divided by V":
        return (1 - smoothing) * one_hot + smoothing
    return (1 - smoothing) * one_hot + smoothing / vocab


def _smoothing_variant(convention="torch", reduction="mean over kept", log_probs="log_softmax",
                       smooth_padding=False, score_padding=False, kl=False, sign=1.0):
    def variant(logits, labels, smoothing, ignore_index=-100):
        if log_probs == "log of softmax":
            log_p = torch.log(torch.softmax(logits, dim=-1))
        elif log_probs == "log of sum of exp":
            log_p = logits - torch.log(torch.exp(logits).sum(dim=-1, keepdim=True))
        else:
            log_p = logits.log_softmax(dim=1 if log_probs == "axis 1" else -1)
        kept = torch.ones_like(labels, dtype=torch.bool) if score_padding else labels != ignore_index
        target = _target_distribution(log_p, labels.masked_fill(~kept, 0), smoothing, convention, ignore_index)
        per_position = -(target * log_p).sum(dim=-1)                              # (...)
        if kl:   # KLDivLoss: the target's own entropy term added
            per_position = per_position + torch.xlogy(target, target).sum(dim=-1)
        per_position = per_position * kept
        if smooth_padding:   # only the label's term is masked, the smoothing part is not
            per_position = per_position - smoothing * log_p.mean(dim=-1) * ~kept
        if reduction == "sum":
            loss = per_position.sum()
        elif reduction == "mean over all":
            loss = per_position.mean()
        elif reduction == "per sequence":
            loss = (per_position.sum(dim=-1) / kept.sum(dim=-1)).mean()
        else:
            loss = per_position.sum() / kept.sum()
        return sign * loss
    return variant


def _ignoring_minus_100_only(logits, labels, smoothing, ignore_index=-100):
    """ignore_index not handed on: -100, the default, is skipped, <pad> = 0 is scored."""
    return label_smoothed_cross_entropy(logits, labels, smoothing)


register(Exercise(
    name="label_smoothed_cross_entropy",
    contract=Contract(
        axes={"B": {"logits": (0,), "labels": (0,)}, "V": {"logits": (-1,)}}, scales={"logits": (100.0,)},
        values={"labels": (torch.zeros(3, 5, dtype=torch.long),)}),
    reference=label_smoothed_cross_entropy,
    make_cases=_smoothing_cases,
    gradients=True,
    nan_hint="0 * log(0) = nan: a probability that underflows to 0 has log -inf; "
             "take torch.log_softmax, which never underflows to -inf",
    mistakes=[
        Mistake("averages over padded positions too",
                "padded positions add 0 to the loss but must not count in the mean either: divide by "
                "the number of positions whose label is not ignore_index",
                _smoothing_variant(reduction="mean over all")),
        Mistake("padded rows still pay the smoothing term",
                "mask the whole loss of an ignored position, its smoothing part included, not only the label's term",
                _smoothing_variant(smooth_padding=True)),
        Mistake("ignore_index not used: padded positions are scored as if <pad> were the answer",
                "leave out every position whose label equals ignore_index, from the sum and from "
                "the count (F.cross_entropy's own default is -100: hand it ignore_index)",
                _smoothing_variant(score_padding=True), also=(_ignoring_minus_100_only,)),
        Mistake("smoothing spread over V - 1 classes (the label excluded)",
                "that is fairseq's convention; PyTorch's (F.cross_entropy's label_smoothing) gives "
                "every class smoothing / V, the label included, and the label also keeps 1 - smoothing",
                _smoothing_variant(convention="V - 1")),
        Mistake("smoothing / V not given to the label's own class",
                "every class gets smoothing / V, the label included, so the label's share is "
                "1 - smoothing + smoothing / V and the shares sum to 1",
                _smoothing_variant(convention="label left out of the spread")),
        Mistake("The Annotated Transformer's convention: smoothing / (V - 2), nothing on <pad>",
                "a different convention from PyTorch's: F.cross_entropy's label_smoothing gives every "
                "class, <pad> included, smoothing / V and keeps 1 - smoothing on the label",
                _smoothing_variant(convention="annotated transformer"),
                also=(_smoothing_variant(convention="annotated transformer", kl=True),
                      _smoothing_variant(convention="annotated transformer, column 0"),
                      _smoothing_variant(convention="annotated transformer, guarded"),
                      _smoothing_variant(convention="annotated transformer, guarded", kl=True))),
        Mistake("KL divergence instead of cross-entropy: lower by the target's entropy",
                "nn.KLDivLoss subtracts the smoothed target's own entropy, a constant: same gradient, "
                "but F.cross_entropy's label_smoothing reports the cross-entropy itself",
                _smoothing_variant(kl=True)),
        Mistake("1 - smoothing and smoothing swapped",
                "the label keeps 1 - smoothing (most of the mass); only `smoothing` is spread evenly",
                _smoothing_variant(convention="swapped")),
        Mistake("smoothing not divided by V: every class gets all of it",
                "the uniform part is smoothing / V per class (smoothing in all), so it is the mean of "
                "-log p over the classes, not their sum",
                _smoothing_variant(convention="not divided by V")),
        Mistake("sign error: the loss is -log p, not log p",
                "log probabilities are <= 0, so the loss, their negated weighted sum, is >= 0",
                _smoothing_variant(sign=-1.0)),
        Mistake("sum instead of mean",
                "divide the sum over kept positions by their count, so the loss does not grow with the batch size",
                _smoothing_variant(reduction="sum")),
        Mistake("averaged per sequence, then over sequences",
                "every kept position weighs the same: one sum over all kept positions, divided by "
                "their total count (short sequences must not weigh more)",
                _smoothing_variant(reduction="per sequence")),
        Mistake("log_softmax over axis 1, F.cross_entropy's (N, C, ...) class axis",
                "here logits are (..., V): the classes are the last axis, log_softmax(dim=-1)",
                _smoothing_variant(log_probs="axis 1")),
        Mistake("log of softmax in two steps: exp underflows, and log 0 = -inf",
                "right on paper, but the smoothing part reads log p of every class, and for logits far apart "
                "exp underflows to 0 (or overflows): torch.log_softmax subtracts the largest logit first",
                _smoothing_variant(log_probs="log of softmax"),
                also=(_smoothing_variant(log_probs="log of sum of exp"),)),
    ],
))
