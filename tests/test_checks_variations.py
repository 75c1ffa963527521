"""The variations the engine derives from each exercise's contract (issue 25), tested the way a
learner meets them: answers written as a learner would write them, each taking one shortcut
that the notebook's own cases keep fixed (float32 only, called once, no batch of one, the
notebook's sizes, one layout, moderate values, kind vocabularies, edges), must fail; correct
answers in unusual styles must still pass.
"""
from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from tfmlib.exercises import REGISTRY, check
from tfmlib.exercises.core import LONG, WIDE, Contract, Exercise, variations
from tfmlib.tokenization import EOS, PAD, SPECIALS, UNK


# ---- 1. float32 only ----------------------------------------------------------------------------

def f32_embed(token_ids, table, scale=True):
    out = table.float()[token_ids]
    return out * math.sqrt(table.shape[1]) if scale else out


def f32_linear(x, weight, bias=None):
    y = x.float() @ weight.float().T
    return y if bias is None else y + bias.float()


def f32_layer_norm(x, gamma, beta, eps=1e-5):
    return F.layer_norm(x.float(), x.shape[-1:], gamma.float(), beta.float(), eps)


def f32_split_heads(x, num_heads):
    b, length, d = x.shape
    return x.float().reshape(b, length, num_heads, d // num_heads).transpose(1, 2)


# ---- 2. called once: results cached by shape, or by one argument --------------------------------

def _cached_by(key_of):
    """A learner's memo: the first result for a key is returned again for every later call."""
    def wrap(fn):
        memo = {}

        def cached(*args, **kwargs):
            key = key_of(*args, **kwargs)
            if key not in memo:
                memo[key] = fn(*args, **kwargs)
            return memo[key]
        cached.__name__ = f"cached_{fn.__name__}"
        return cached
    return wrap


def _shapes(*args, **kwargs):
    return tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else repr(a) for a in args)


def _reference(name):
    return REGISTRY[name].reference


cached_linear = _cached_by(_shapes)(_reference("linear"))
cached_layer_norm = _cached_by(lambda x, *rest, **kw: (tuple(x.shape), x.dtype))(_reference("layer_norm"))
cached_encoder_layer = _cached_by(lambda x, params, *rest, **kw: (tuple(x.shape), x.dtype))(
    _reference("encoder_layer"))
cached_by_weights_linear = _cached_by(lambda x, weight, bias=None: (tuple(x.shape), x.dtype,
                                                                    tuple(weight.flatten().tolist())))(
    _reference("linear"))
cached_shift_right = _cached_by(lambda tgt: tuple(tgt.shape))(_reference("shift_right"))


def rope_with_cached_angles(x, positions=None):
    """cos and sin computed once per shape: the positions of a later call are ignored."""
    length, d = x.shape[-2], x.shape[-1]
    key = (length, d)
    if key not in rope_with_cached_angles.memo:
        where = torch.arange(length) if positions is None else positions
        angle = where[:, None].double() * 10000.0 ** (-torch.arange(0, d, 2).double() / d)
        rope_with_cached_angles.memo[key] = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    cos, sin = rope_with_cached_angles.memo[key]
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


rope_with_cached_angles.memo = {}


# ---- 3. no batch of one, no single query: .squeeze() ---------------------------------------------

def squeezed_linear(x, weight, bias=None):
    y = x @ weight.T
    return (y if bias is None else y + bias).squeeze()


def squeezed_mha(query, key, value, params, num_heads, mask=None):
    output, weights = _reference("multi_head_attention")(query, key, value, params, num_heads, mask)
    return output.squeeze(), weights


def squeezed_decoder_layer(*args, **kwargs):
    return _reference("decoder_layer")(*args, **kwargs).squeeze()


def squeezed_forward(params, src, tgt_in, config, training=False):
    return _reference("forward")(params, src, tgt_in, config, training).squeeze()


# ---- 4. the notebook's sizes and no others -------------------------------------------------------

_BUFFER = torch.ones(50, 50, dtype=torch.bool).tril()


def causal_mask_from_a_buffer(seq_len, device=None):
    return _BUFFER[:seq_len, :seq_len][None, None]  # max_len = 50, as in the notebooks


def broadcast_with_is(shape_a, shape_b):
    a, b = tuple(shape_a), tuple(shape_b)
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if not (x is y or x == 1 or y == 1):  # `is`: True only for Python's cached small ints
            raise ValueError(f"sizes {x} and {y} clash")
        out.append(y if x == 1 else x)
    return tuple(out)


# ---- 5. one layout, one kind of sublayer ---------------------------------------------------------

def attention_mask_always_4d(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        while mask.dim() < 4:
            mask = mask.unsqueeze(1)  # (B, L, L) -> (B, 1, L, L): wrong for 3-D inputs
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ value, weights


def residual_on_flattened_tokens(x, sublayer, norm, *, norm_first=False, **rest):
    layer_norm = _reference("layer_norm")
    b, length, d = x.shape
    if norm_first:
        update = sublayer(layer_norm(x, norm["gamma"], norm["beta"]).reshape(b * length, 1, d))
        return x + update.reshape(b, length, d)
    return layer_norm(x + sublayer(x.reshape(b * length, 1, d)).reshape(b, length, d), norm["gamma"], norm["beta"])


def residual_time_major(x, sublayer, norm, *, norm_first=False, **rest):
    layer_norm = _reference("layer_norm")
    if norm_first:
        return x + sublayer(layer_norm(x, norm["gamma"], norm["beta"]).transpose(0, 1)).transpose(0, 1)
    return layer_norm(x + sublayer(x.transpose(0, 1)).transpose(0, 1), norm["gamma"], norm["beta"])


# ---- 6. moderate values, fixed arguments ---------------------------------------------------------

def mha_softmax_without_the_maximum(query, key, value, params, num_heads, mask=None):
    def attention(q, k, v, mask=None):
        exp = torch.exp(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)))  # inf above scores of ~88
        if mask is not None:
            exp = exp.masked_fill(~mask, 0.0)
        weights = exp / exp.sum(-1, keepdim=True).clamp_min(1e-30)
        return weights @ v, weights
    from tfmlib.multihead import linear, merge_heads, split_heads
    q, k, v = (split_heads(linear(t, params[f"w_{n}"], params[f"b_{n}"]), num_heads)
               for t, n in ((query, "q"), (key, "k"), (value, "v")))
    context, weights = attention(q, k, v, mask)
    return linear(merge_heads(context), params["w_o"], params["b_o"]), weights


def top_k_on_probabilities(logits, k):
    probs = torch.softmax(logits, dim=-1)  # large logits: many probabilities underflow to a tie at 0
    kth = probs.topk(min(k, logits.size(-1)), dim=-1).values[..., -1:]
    return logits.masked_fill(probs < kth, float("-inf"))


def probs_with_default_temperature_2(logits, temperature=2.0):
    return torch.softmax(logits / temperature, dim=-1)


# ---- 7. vocabularies and sentences that are too kind ---------------------------------------------

def encode_by_place_in_dict(sentence, vocab, add_bos=False, add_eos=False):
    place = {token: i for i, token in enumerate(vocab)}  # the dict's order, not its ids
    ids = [place.get(t, place[UNK]) for t in sentence.split()]
    return ([place["<bos>"]] if add_bos else []) + ids + ([place[EOS]] if add_eos else [])


def build_vocab_without_punctuation(sentences, specials=SPECIALS):
    vocab = {s: i for i, s in enumerate(specials)}
    for sentence in sentences:
        for token in sentence.split():
            vocab.setdefault(token.strip(".,!?"), len(vocab))
    return vocab


def decode_stopping_at_pad(ids, vocab, skip_specials=True):
    words = {i: t for t, i in vocab.items()}
    out = []
    for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids):
        if skip_specials and words[i] in (EOS, PAD):
            break
        if not (skip_specials and words[i] in SPECIALS):
            out.append(words[i])
    return " ".join(out)


def decode_dropping_every_bracketed_word(ids, vocab, skip_specials=True):
    words = {i: t for t, i in vocab.items()}
    out = []
    for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids):
        if skip_specials and words[i] == EOS:
            break
        if not (skip_specials and words[i].startswith("<") and words[i].endswith(">")):
            out.append(words[i])
    return " ".join(out)


# ---- 8. edges no case reached -------------------------------------------------------------------

def label_smoothing_zero_when_all_ignored(logits, labels, smoothing, ignore_index=-100):
    keep = labels != ignore_index
    if not keep.any():
        return logits.new_zeros(())  # F.cross_entropy gives nan here
    return _reference("label_smoothed_cross_entropy")(logits, labels, smoothing, ignore_index)


def linear_with_view(x, weight, bias=None):
    y = x.view(-1, x.shape[-1]) @ weight.T  # .view fails on a transposed (non-contiguous) input
    y = y.view(*x.shape[:-1], weight.shape[0])
    return y if bias is None else y + bias


# ---- defaults, layouts and precision that a custom run or a plain case left open ---------------

def dropout_off_by_default(x, p, training=False):
    if not training or p == 0:
        return x
    return x * (torch.rand(x.shape) >= p) / (1 - p)


def forward_training_by_default(params, src, tgt_in, config, training=True):
    from tfmlib.training import decode_target, encode_source
    memory, src_mask = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, src_mask, config, training)


def inverse_sqrt_factor_2_by_default(step, d_model, warmup_steps, factor=2.0):
    if step == 0:
        return 0.0
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def cosine_to_zero_by_default(step, peak_lr, warmup_steps, total_steps, final_fraction=0.0):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * progress)))


def attention_view_on_key_and_value(query, key, value, mask=None):
    d_k = query.size(-1)
    flat_key = key.view(-1, d_k)   # .view fails once key is stored transposed
    scores = query @ flat_key.view(key.shape).transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ value.view(-1, value.size(-1)).view(value.shape), weights


def attention_in_float32_inside(query, key, value, mask=None):
    q, k, v = query.float(), key.float(), value.float()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return (weights @ v).to(query.dtype), weights.to(query.dtype)


def linear_in_float32_inside(x, weight, bias=None):
    y = x.float() @ weight.float().T
    return (y if bias is None else y + bias.float()).to(x.dtype)


def layer_norm_in_float32_inside(x, gamma, beta, eps=1e-5):
    return F.layer_norm(x.float(), x.shape[-1:], gamma.float(), beta.float(), eps).to(x.dtype)


def mha_in_float32_inside(query, key, value, params, num_heads, mask=None):
    from tfmlib import linear, merge_heads, scaled_dot_product_attention, split_heads
    wide = {name: w.float() for name, w in params.items()}
    q, k, v = (split_heads(linear(x.float(), wide[f"w_{n}"], wide[f"b_{n}"]), num_heads)
               for x, n in ((query, "q"), (key, "k"), (value, "v")))
    context, weights = scaled_dot_product_attention(q, k, v, mask)
    return linear(merge_heads(context), wide["w_o"], wide["b_o"]).to(query.dtype), weights.to(query.dtype)


def dropout_with_a_float32_mask(x, p, training=True):
    if not training or p == 0:
        return x
    return x * (torch.rand(x.shape) >= p).float() / (1 - p)   # float16 x * float32 mask -> float32


WRONG = [
    ("multi_head_attention", mha_in_float32_inside, "float64"),
    ("dropout", dropout_with_a_float32_mask, "float16"),
    ("dropout", dropout_off_by_default, "your defaults are used"),
    ("forward", forward_training_by_default, "`training` left at the default"),
    ("warmup_inverse_sqrt_lr", inverse_sqrt_factor_2_by_default, "your defaults are used"),
    ("warmup_cosine_lr", cosine_to_zero_by_default, "your defaults are used"),
    ("scaled_dot_product_attention", attention_view_on_key_and_value, "stored transposed"),
    ("scaled_dot_product_attention", attention_in_float32_inside, "float64"),
    ("linear", linear_in_float32_inside, "float64"), ("layer_norm", layer_norm_in_float32_inside, "float64"),
    ("embed", f32_embed, "float64"), ("linear", f32_linear, "float64"),
    ("layer_norm", f32_layer_norm, "one feature 300 above"),  # its own float16 case (round 8) shows it first
    ("split_heads", f32_split_heads, "float64"),
    ("linear", cached_linear, "called again"), ("layer_norm", cached_layer_norm, "called again"),
    ("encoder_layer", cached_encoder_layer, "called again"),
    ("linear", cached_by_weights_linear, "called again"), ("shift_right", cached_shift_right, "called again"),
    ("apply_rope", rope_with_cached_angles, "called again"),
    ("linear", squeezed_linear, "= 1"), ("multi_head_attention", squeezed_mha, "= 1"),
    ("decoder_layer", squeezed_decoder_layer, "= 1"),
    ("forward", squeezed_forward, "= 1"),
    ("causal_mask", causal_mask_from_a_buffer, "the first output overwritten"),  # a view of the buffer
    ("broadcast_shape", broadcast_with_is, "sizes past 256"),
    ("scaled_dot_product_attention", attention_mask_always_4d, "without the H axis"),
    ("residual_sublayer", residual_on_flattened_tokens, "takes the whole batch, (B, L, D) = (2, 5, 6), got shape (10, 1, 6)"),
    ("residual_sublayer", residual_time_major, "takes the whole batch, (B, L, D) = (2, 5, 6), got shape (5, 2, 6)"),
    ("multi_head_attention", mha_softmax_without_the_maximum, "times 100"),
    ("top_k_filter", top_k_on_probabilities, "times 1000"),
    ("next_token_probs", probs_with_default_temperature_2, "default"),
    ("encode", encode_by_place_in_dict, "dict order is not its id order"),
    ("build_vocab", build_vocab_without_punctuation, "punctuation"),
    ("decode", decode_stopping_at_pad, "<pad>"),
    ("decode", decode_dropping_every_bracketed_word, "dict order"),
    ("label_smoothed_cross_entropy", label_smoothing_zero_when_all_ignored, "`labels` ="),
    ("linear", linear_with_view, "stored transposed"),
]


@pytest.mark.parametrize("name, answer, case", WRONG, ids=[f"{n}-{a.__name__}" for n, a, _ in WRONG])
def test_a_shortcut_the_notebook_keeps_fixed_fails_on_its_variation(name, answer, case):
    result = check(name, answer)
    assert result.status in ("failed", "mistake"), str(result)
    if result.status == "failed":  # the first failing case is the variation that catches it
        assert case in result.details, str(result)


# ---- correct answers in unusual styles ----------------------------------------------------------

def build_vocab_dict_comprehension(sentences, specials=SPECIALS):
    tokens = itertools.chain(specials, (t for s in sentences for t in s.split()))
    return {token: i for i, token in enumerate(dict.fromkeys(tokens))}


def pad_batch_zip_longest(id_lists, pad_id, max_len=None):
    if not id_lists:
        raise ValueError("id_lists: expected at least one row, got none")
    rows = list(zip(*itertools.zip_longest(*id_lists, fillvalue=pad_id)))
    length = max(map(len, id_lists)) if max_len is None else max_len
    rows = [list(r)[:length] + [pad_id] * (length - len(r)) for r in rows] if rows else [[pad_id] * length] * len(id_lists)
    return torch.tensor(rows, dtype=torch.long).reshape(len(id_lists), length)


def linear_einsum(x, weight, bias=None):
    y = torch.einsum("...i,oi->...o", x, weight)
    return y if bias is None else y + bias


def layer_norm_float64_inside(x, gamma, beta, eps=1e-5):
    wide = x.double()
    mean = wide.mean(-1, keepdim=True)
    variance = ((wide - mean) ** 2).mean(-1, keepdim=True)
    return ((wide - mean) / torch.sqrt(variance + eps) * gamma.double() + beta.double()).to(x.dtype)


def _key(*args, **kwargs):
    """A cache key from every argument: shape, dtype and values of each tensor."""
    return tuple((tuple(a.shape), a.dtype, tuple(a.detach().double().flatten().tolist()))
                 if isinstance(a, torch.Tensor) else a for a in (*args, *sorted(kwargs.items())))


linear_cached_on_everything = _cached_by(_key)(linear_einsum)  # not the reference: provenance


def attention_einsum(query, key, value, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", query, key) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.einsum("...qk,...kv->...qv", weights, value), weights


def encode_with_get(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(token, vocab[UNK]) for token in sentence.split()]
    return [vocab["<bos>"]] * add_bos + ids + [vocab[EOS]] * add_eos


def rope_with_float32_frequencies(x, positions=None, base=10000.0):
    """float32 constants (the frequencies), float64 arithmetic on float64 x: right."""
    length, dim = x.shape[-2], x.shape[-1]
    positions = torch.arange(length) if positions is None else positions
    wide = torch.promote_types(x.dtype, torch.float32)  # float16 angles are radians off at position 10000
    freqs = (base ** (-torch.arange(0, dim, 2, dtype=torch.float32) / dim)).to(wide)
    angles = positions.to(wide)[:, None] * freqs                       # (L, D/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def linear_float64_inside(x, weight, bias=None):
    y = x.double() @ weight.double().T
    return (y if bias is None else y + bias.double()).to(x.dtype)


CORRECT = [("apply_rope", rope_with_float32_frequencies), ("linear", linear_float64_inside),
           ("build_vocab", build_vocab_dict_comprehension), ("pad_batch", pad_batch_zip_longest),
           ("linear", linear_einsum), ("layer_norm", layer_norm_float64_inside),
           ("linear", linear_cached_on_everything), ("scaled_dot_product_attention", attention_einsum),
           ("encode", encode_with_get)]


@pytest.mark.parametrize("name, answer", CORRECT, ids=[f"{n}-{a.__name__}" for n, a in CORRECT])
def test_a_correct_answer_in_an_unusual_style_passes_every_variation(name, answer):
    result = check(name, answer)
    assert result, str(result)


# ---- the engine's rules -------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(n for n, e in REGISTRY.items() if e.contract is not None))
def test_every_variation_of_a_contract_is_one_the_reference_accepts_and_passes(name):
    exercise = REGISTRY[name]
    derived = exercise.cases()[len(exercise.make_cases()):]
    assert derived, f"{name}: its contract derives no case"
    labels = [case.label for case in derived]
    base = exercise.make_cases()[exercise.contract.base]
    if any(isinstance(v, (torch.Tensor, dict, list)) for v in (*base.args, *base.kwargs.values())):
        assert any(label.startswith("called") for label in labels), labels  # again, or twice
    if exercise.contract.float64 and any(isinstance(a, torch.Tensor) and a.is_floating_point() for a in base.args):
        assert "float64 inputs: the output follows" in labels
    assert check(name, exercise.reference)


def test_tensor_exercises_declare_a_contract():
    without = sorted(name for name, e in REGISTRY.items() if e.contract is None)
    # Problems (optimizers, schedules), shapes and tokenization have their cases as data.
    assert set(without) <= {"adam", "sgd_step", "adamw_step", "clip_grad_norm", "warmup_inverse_sqrt_lr",
                            "warmup_cosine_lr", "broadcast_shape", "build_vocab", "encode", "decode",
                            "pad_batch"}, without


def _toy(contract, reference, *cases):
    return Exercise(name="toy", reference=reference, make_cases=lambda: list(cases), contract=contract)


def test_axes_are_cut_to_one_and_tiled_past_the_notebook_in_every_argument_that_has_them():
    def add(x, y):
        return x + y
    case = torch.zeros(3, 4), torch.zeros(3, 1)
    from tfmlib.exercises import Case
    toy = _toy(Contract(axes={"B": {"x": (0,), "y": (0,)}, "L": {"x": (1,), "y": (1,)}}, wide=()),
               add, Case("base", case))
    shapes = {c.label: [tuple(a.shape) for a in c.args] for c in variations(toy, toy.make_cases())}
    assert shapes["L = 1"] == [(3, 1), (3, 1)]      # y's broadcast axis is left alone
    # a batch of one with the other axes long, in one case; y's broadcast axis stays 1
    assert shapes[f"a batch of one, L = {LONG + 3}, past the notebook's sizes"] == [(1, LONG + 3), (1, 1)]
    toy = _toy(Contract(axes={"D": {"x": (1,)}}, wide=("D",)), add, Case("base", case))
    assert any(c.args[0].shape[1] >= WIDE for c in variations(toy, toy.make_cases()))


def test_a_variation_the_reference_rejects_is_left_out():
    from tfmlib.exercises import Case

    def needs_four(x):
        if x.shape[-1] != 4:
            raise ValueError(f"x: expected 4 columns, got {x.shape[-1]}")
        return x * 2
    toy = _toy(Contract(axes={"D": {"x": (1,)}}), needs_four, Case("base", (torch.ones(2, 4),)))
    labels = [c.label for c in variations(toy, toy.make_cases())]
    assert not any(label.startswith("D =") for label in labels), labels


def test_other_values_keep_shapes_signs_zeros_and_ids_valid():
    from tfmlib.exercises import Case
    x = torch.tensor([[-1.0, 0.0, 2.0, float("-inf")]])
    ids = torch.tensor([[3, 1, 0, 2]])
    toy = _toy(Contract(), lambda x, ids: x, Case("base", (x, ids)))
    cases = variations(toy, toy.make_cases())
    again = next(c for c in cases if c.label.startswith("called again: only `x`"))
    assert again.args[0].shape == x.shape and torch.equal(again.args[0].sign(), x.sign())
    assert not torch.equal(again.args[0], x)
    again = next(c for c in cases if c.label.startswith("called again: all but `x`"))
    assert sorted(again.args[1].flatten().tolist()) == sorted(ids.flatten().tolist())
    assert not torch.equal(again.args[1], ids)


# ---- messages that name what went wrong ---------------------------------------------------------

def dropout_mask_kept_per_shape(x, p, training=True, _masks={}):
    if not training or p == 0:
        return x
    if x.shape not in _masks:
        _masks[x.shape] = torch.rand_like(x) >= p
    return x * _masks[x.shape] / (1 - p)


def adam_step_v_is_m(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    beta1, beta2 = betas
    state["t"] += 1
    t = state["t"]
    with torch.no_grad():
        for i, p in enumerate(parameters):
            if p.grad is None:
                continue
            m = state["m"][i]
            v = m                                   # meant: state["v"][i]
            m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
            v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            p.sub_(lr * (m / (1 - beta1 ** t)) / ((v / (1 - beta2 ** t)).sqrt() + eps))


def mha_keys_and_values_from_the_query(query, key, value, params, num_heads, mask=None):
    from tfmlib import linear, merge_heads, scaled_dot_product_attention, split_heads
    q, k, v = (split_heads(linear(query, params[f"w_{n}"], params[f"b_{n}"]), num_heads) for n in "qkv")
    context, weights = scaled_dot_product_attention(q, k, v, mask)
    return linear(merge_heads(context), params["w_o"], params["b_o"]), weights


def clip_replacing_each_gradient(parameters, max_norm):
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    with_grad = [p for p in params if p.grad is not None]
    total = torch.sqrt(sum((p.grad ** 2).sum() for p in with_grad)) if with_grad else torch.tensor(0.0)
    factor = min(1.0, max_norm / (float(total) + 1e-6))
    for p in with_grad:
        p.grad = p.grad * factor
    return total


def mha_through_pytorchs_module(query, key, value, params, num_heads, mask=None):
    module = torch.nn.MultiheadAttention(query.size(-1), num_heads, batch_first=True)
    with torch.no_grad():
        module.in_proj_weight.copy_(torch.cat([params["w_q"], params["w_k"], params["w_v"]]))
        module.in_proj_bias.copy_(torch.cat([params["b_q"], params["b_k"], params["b_v"]]))
        module.out_proj.weight.copy_(params["w_o"])
        module.out_proj.bias.copy_(params["b_o"])
    blocked = None if mask is None else ~mask.expand(
        query.size(0), num_heads, query.size(1), key.size(1)).reshape(-1, query.size(1), key.size(1))
    return module(query, key, value, attn_mask=blocked, average_attn_weights=False)


def test_nan_from_an_overflowing_softmax_is_told_its_cause():
    result = check("multi_head_attention", mha_softmax_without_the_maximum)
    assert not result and "overflows" in str(result) and "maximum" in str(result), str(result)


@pytest.mark.parametrize("name, answer, mistake", [
    ("dropout", dropout_mask_kept_per_shape, "the same mask on every call"),
    ("multi_head_attention", mha_keys_and_values_from_the_query, "keys and values projected from the query"),
], ids=["dropout-mask-per-shape", "mha-kv-from-query"])
def test_a_mistake_is_named_by_what_it_does_not_by_one_way_to_make_it(name, answer, mistake):
    result = check(name, answer)
    assert result.status == "mistake" and result.mistake.startswith(mistake), str(result)


def test_v_aliased_to_m_inside_the_step_is_named():
    from tfmlib import adam_init
    result = check("adam", (adam_init, adam_step_v_is_m))
    assert result.status == "mistake" and result.mistake.startswith("v = m"), str(result)


def test_a_replaced_gradient_is_said_in_words_not_as_a_type():
    result = check("clip_grad_norm", clip_replacing_each_gradient)
    assert not result and "replaced by a new tensor" in str(result), str(result)
    assert "got str" not in str(result)


def test_a_failing_answer_that_calls_pytorchs_own_version_is_also_told_so():
    result = check("multi_head_attention", mha_through_pytorchs_module)
    assert not result and "torch.nn.MultiheadAttention" in result.details, str(result)
