"""The variations of round 4 (issue 32), tested the way a learner meets them: answers written as a
learner would, each taking a shortcut that no earlier variation reached (float32 inside a
float16 model, a buffer of 512 or 5000 rows, text split on " ", a mask skipped when it hides
everything, a fill of -1e4, a cache keyed by id, a dropout with the right mean and the wrong law,
a residual that goes one sentence at a time), must fail on the variation that shows it; correct
answers written in the same styles must pass; and the messages name what went wrong.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tfmlib.exercises import REGISTRY, check
from tfmlib.exercises.core import FAR
from tfmlib.exercises.provenance import FORBIDDEN
from tfmlib.exercises.sublayers import _CALLS, _TAIL, _binomial_range
from tfmlib.exercises.tracker import notebook_of
from tfmlib.language_model import decoder_block
from tfmlib.multihead import multi_head_attention
from tfmlib.sublayers import feed_forward, layer_norm
from tfmlib.tokenization import BOS, EOS, SPECIALS, UNK

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


# ---- 1. half precision: float32 creeping into a float16 model -----------------------------------

def embed_with_a_scale_vector(token_ids, table, scale=True):
    vectors = table[token_ids]
    return vectors * torch.full((table.size(1),), math.sqrt(table.size(1))) if scale else vectors


def embed_scaled(token_ids, table, scale=True):
    return table[token_ids] * math.sqrt(table.size(1)) if scale else table[token_ids]


def rope_angles_in_float32(x, positions=None):
    length, d = x.shape[-2:]
    pos = (torch.arange(length) if positions is None else positions).float()
    theta = (pos[:, None] / 10000 ** (torch.arange(0, d, 2).float() / d)).repeat_interleave(2, -1)
    rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return x * theta.cos() + rotated * theta.sin()


def rope_angles_in_xs_dtype(x, positions=None):
    length, d = x.shape[-2:]
    pos = (torch.arange(length) if positions is None else positions).double()
    theta = (pos[:, None] / 10000 ** (torch.arange(0, d, 2).double() / d)).repeat_interleave(2, -1)
    rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return x * theta.cos().to(x.dtype) + rotated * theta.sin().to(x.dtype)


def linear_with_a_zero_bias(x, weight, bias=None):
    return x @ weight.T + (torch.zeros(weight.size(0)) if bias is None else bias)


def linear_with_a_zero_bias_of_xs_dtype(x, weight, bias=None):
    return x @ weight.T + (x.new_zeros(weight.size(0)) if bias is None else bias)


def _attention_filled_with(fill_of):
    def attention(query, key, value, mask=None):
        scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask, fill_of(scores))
        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            weights = weights.masked_fill(~mask, 0.0)
        return weights @ value, weights
    return attention


attention_float32_min = _attention_filled_with(lambda s: torch.finfo(torch.float32).min)
attention_annotated_then_zeroed = _attention_filled_with(lambda s: -1e9)
attention_min_of_its_dtype = _attention_filled_with(lambda s: torch.finfo(s.dtype).min)
attention_filled_with_minus_1e4 = _attention_filled_with(lambda s: -1e4)


@pytest.mark.parametrize("name, wrong, right", [
    ("embed", embed_with_a_scale_vector, embed_scaled),
    ("apply_rope", rope_angles_in_float32, rope_angles_in_xs_dtype),
    ("linear", linear_with_a_zero_bias, linear_with_a_zero_bias_of_xs_dtype),
    ("scaled_dot_product_attention", attention_float32_min, attention_min_of_its_dtype),
    ("scaled_dot_product_attention", attention_annotated_then_zeroed, attention_min_of_its_dtype),
], ids=["embed", "rope", "linear", "finfo-float32", "minus-1e9"])
def test_float32_inside_a_half_precision_call_fails_there(name, wrong, right):
    result = check(name, wrong)
    assert result.status == "failed" and "float16 inputs" in result.details, str(result)
    assert check(name, right), str(check(name, right))


@pytest.mark.parametrize("name", ["embed", "add_positional_encoding", "apply_rope", "scaled_dot_product_attention",
                                  "linear", "split_heads", "merge_heads", "multi_head_attention", "feed_forward",
                                  "layer_norm", "residual_sublayer", "encoder_layer", "decoder_layer"])
def test_every_floating_contract_gets_both_half_precisions(name):
    labels = " ".join(c.label for c in REGISTRY[name].cases())
    assert "float16 inputs" in labels and "bfloat16 inputs" in labels


# ---- 2. lengths past 1024, and buffers of one's own ---------------------------------------------

_CAUSAL = torch.ones(512, 512, dtype=torch.bool).tril()


def causal_mask_sliced_from_512(seq_len):
    return _CAUSAL[:seq_len, :seq_len].clone()[None, None]


def causal_mask_a_view_of_a_big_buffer(seq_len, _buffer=torch.ones(4096, 4096, dtype=torch.bool).tril()):
    return _buffer[:seq_len, :seq_len][None, None]


def causal_mask_made_each_call(seq_len):
    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()[None, None]


_TABLES: dict = {}


def positional_encoding_from_a_5000_row_table(max_len, d_model):
    if d_model not in _TABLES:  # the Annotated Transformer's max_len=5000 buffer
        position = torch.arange(5000.0)[:, None]
        div = torch.exp(torch.arange(0, d_model, 2.0) * -(math.log(10000.0) / d_model))
        table = torch.zeros(5000, d_model)
        table[:, 0::2], table[:, 1::2] = torch.sin(position * div), torch.cos(position * div)
        _TABLES[d_model] = table
    return _TABLES[d_model][:max_len]


def positional_encoding_made_each_call(max_len, d_model):
    position = torch.arange(max_len, dtype=torch.float64)[:, None]
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * -(math.log(10000.0) / d_model))
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = torch.sin(position * div), torch.cos(position * div)
    return table.float()


@pytest.mark.parametrize("name, wrong, case", [
    ("causal_mask", causal_mask_sliced_from_512, f"L = {FAR}"),
    ("causal_mask", causal_mask_a_view_of_a_big_buffer, "the first output overwritten"),
    ("sinusoidal_positional_encoding", positional_encoding_from_a_5000_row_table, "the first output overwritten"),
])
def test_a_buffer_of_ones_own_fails_past_1024_or_when_its_output_is_written(name, wrong, case):
    result = check(name, wrong)
    assert result.status == "failed" and case in result.details, str(result)


@pytest.mark.parametrize("name, right", [("causal_mask", causal_mask_made_each_call),
                                         ("sinusoidal_positional_encoding", positional_encoding_made_each_call)])
def test_a_fresh_tensor_on_every_call_passes(name, right):
    assert check(name, right), str(check(name, right))


def test_a_length_axis_goes_past_1024_where_that_is_cheap():
    for name in ("causal_mask", "embed", "apply_rope", "scaled_dot_product_attention", "layer_norm"):
        sizes = [int(n) for c in REGISTRY[name].cases() for n in re.findall(r"= (\d+)", c.label)]
        assert max(sizes) >= FAR, name


def broadcast_padded_to_4_axes(shape_a, shape_b):
    a, b = (1,) * (4 - len(shape_a)) + tuple(shape_a), (1,) * (4 - len(shape_b)) + tuple(shape_b)
    result = []
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y and 1 not in (x, y):
            raise ValueError(f"axis {i - 4}: sizes {x} and {y} clash")
        result.append(y if x == 1 else x)
    return tuple(result[4 - max(len(shape_a), len(shape_b)):])


def broadcast_any_number_of_axes(shape_a, shape_b):
    n = max(len(shape_a), len(shape_b))
    a, b = (1,) * (n - len(shape_a)) + tuple(shape_a), (1,) * (n - len(shape_b)) + tuple(shape_b)
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y and 1 not in (x, y):
            raise ValueError(f"axis {i - n}: sizes {x} and {y} clash")
    return tuple(y if x == 1 else x for x, y in zip(a, b))


def test_broadcast_shape_goes_to_6_axes():
    result = check("broadcast_shape", broadcast_padded_to_4_axes)
    assert not result and "6 axes" in str(result), str(result)
    assert check("broadcast_shape", broadcast_any_number_of_axes)


# ---- 3. text as learners type it ----------------------------------------------------------------

def build_vocab_split_on_spaces(sentences, specials=SPECIALS):
    vocab = {token: i for i, token in enumerate(specials)}
    for sentence in sentences:
        for word in [w for w in sentence.split(" ") if w]:
            vocab.setdefault(word, len(vocab))
    return vocab


def build_vocab_split(sentences, specials=SPECIALS):
    vocab = {token: i for i, token in enumerate(specials)}
    for sentence in sentences:
        for word in sentence.split():
            vocab.setdefault(word, len(vocab))
    return vocab


def encode_split_on_spaces(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(w, vocab[UNK]) for w in sentence.split(" ") if w]
    return [vocab[BOS]] * add_bos + ids + [vocab[EOS]] * add_eos


def encode_stripping_punctuation(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(w.strip(".,!?;:"), vocab[UNK]) for w in sentence.split()]
    return [vocab[BOS]] * add_bos + ids + [vocab[EOS]] * add_eos


def encode_numpy_ids(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(w, vocab[UNK]) for w in sentence.split()]
    return list(np.array([vocab[BOS]] * add_bos + ids + [vocab[EOS]] * add_eos, dtype=np.int64))


def decode_cut_at_the_last_eos(ids, vocab, skip_specials=True):
    words = {i: t for t, i in vocab.items()}
    tokens = [words[int(i)] for i in ids]
    if skip_specials and EOS in tokens:
        tokens = tokens[:len(tokens) - 1 - tokens[::-1].index(EOS)]
    return " ".join(t for t in tokens if not (skip_specials and t in SPECIALS))


def decode_cut_at_the_first_eos(ids, vocab, skip_specials=True):
    words = {i: t for t, i in vocab.items()}
    tokens = [words[int(i)] for i in ids]
    if skip_specials and EOS in tokens:
        tokens = tokens[:tokens.index(EOS)]
    return " ".join(t for t in tokens if not (skip_specials and t in SPECIALS))


@pytest.mark.parametrize("name, wrong, case", [
    ("build_vocab", build_vocab_split_on_spaces, "tabs, newlines and double spaces"),
    ("encode", encode_split_on_spaces, "tabs, newlines and double spaces"),
    ("decode", decode_cut_at_the_last_eos, "given twice in a row"),
])
def test_text_as_typed_shows_a_split_on_one_space_and_a_cut_at_the_last_eos(name, wrong, case):
    result = check(name, wrong)
    assert result.status == "failed" and case in result.details, str(result)


@pytest.mark.parametrize("name, right", [("build_vocab", build_vocab_split), ("encode", encode_numpy_ids),
                                         ("decode", decode_cut_at_the_first_eos)])
def test_text_split_on_any_whitespace_and_numpy_ids_pass(name, right):
    assert check(name, right), str(check(name, right))


def test_punctuation_stays_on_its_word():
    assert not check("encode", encode_stripping_punctuation)


# ---- 4. masks and scores at their edges; inputs as the next notebook lays them out --------------

def attention_skipping_a_mask_that_hides_everything(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None and mask.any():  # "nothing visible: nothing to mask"
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ value, weights


def attention_merging_heads_with_view(query, key, value, mask=None):
    *lead, length, d_k = query.shape
    q, k, v = (t.view(-1, t.size(-2), t.size(-1)) for t in (query, key, value))
    scores = (q @ k.transpose(1, 2) / math.sqrt(d_k)).view(*lead, length, key.size(-2))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ value, weights


def attention_with_where(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = torch.where(mask, scores, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return (weights.nan_to_num(0.0) @ value), weights.nan_to_num(0.0)


@pytest.mark.parametrize("wrong, case", [
    (attention_skipping_a_mask_that_hides_everything, "`mask` all False"),
    (attention_filled_with_minus_1e4, "`query` times 100000"),
    (attention_merging_heads_with_view, "stored transposed"),
])
def test_masks_scores_and_layouts_at_their_edges(wrong, case):
    result = check("scaled_dot_product_attention", wrong)
    assert not result and case in str(result), str(result)
    assert check("scaled_dot_product_attention", attention_with_where)


def test_a_head_split_layout_is_what_split_heads_leaves():
    x = REGISTRY["scaled_dot_product_attention"].cases()
    again = next(c for c in x if c.label.startswith("called again: only"))
    query = again.args[0]
    assert query.dim() == 4 and query.transpose(1, 2).is_contiguous()  # (B, L, H, d) in memory


# ---- 5. state that must follow a change ---------------------------------------------------------

_BY_ID: dict = {}


def linear_cached_by_id_of_weight(x, weight, bias=None):
    key = (id(x), id(weight))
    if key not in _BY_ID:
        _BY_ID[key] = x @ weight.T + (0 if bias is None else bias)
    return _BY_ID[key]


_MOMENTS: dict = {}


def adam_init_without_moments(parameters):
    return {"t": 0}


def adam_step_moments_by_id(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    beta1, beta2 = betas
    state["t"] += 1
    with torch.no_grad():
        for p in parameters:
            if p.grad is None:
                continue
            m, v = _MOMENTS.get(id(p), (torch.zeros_like(p), torch.zeros_like(p)))
            m, v = beta1 * m + (1 - beta1) * p.grad, beta2 * v + (1 - beta2) * p.grad ** 2
            _MOMENTS[id(p)] = m, v
            p -= lr * (m / (1 - beta1 ** state["t"])) / ((v / (1 - beta2 ** state["t"])).sqrt() + eps)


def adam_init_with_moments(parameters):
    return {"t": 0, "m": [torch.zeros_like(p) for p in parameters], "v": [torch.zeros_like(p) for p in parameters]}


def adam_step_moments_in_the_state(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    beta1, beta2 = betas
    state["t"] += 1
    with torch.no_grad():
        for p, m, v in zip(parameters, state["m"], state["v"]):
            if p.grad is not None:
                m.mul_(beta1).add_((1 - beta1) * p.grad)
                v.mul_(beta2).add_((1 - beta2) * p.grad ** 2)
                p -= lr * (m / (1 - beta1 ** state["t"])) / ((v / (1 - beta2 ** state["t"])).sqrt() + eps)


def test_a_cache_keyed_by_id_fails_when_the_same_tensors_change_in_place():
    same = [c for c in REGISTRY["linear"].cases() if "changed in place in between" in c.label]
    assert len(same) == 1 and not check("linear", linear_cached_by_id_of_weight, same)
    assert check("linear", linear_with_a_zero_bias_of_xs_dtype, same)


def test_adam_moments_kept_outside_the_state_fail_and_inside_pass():
    assert not check("adam", (adam_init_without_moments, adam_step_moments_by_id))
    assert check("adam", (adam_init_with_moments, adam_step_moments_in_the_state))


# ---- 6. randomness with the right law -----------------------------------------------------------

def dropout_exactly_round_p_n(x, p, training=True):
    if not training or p == 0:
        return x
    keep = torch.ones(x.numel(), dtype=torch.bool)
    keep[torch.randperm(x.numel())[:round(p * x.numel())]] = False
    return x * keep.reshape(x.shape) / (1 - p)


def dropout_on_a_percent_grid(x, p, training=True):
    if not training or p == 0:
        return x
    return x * (torch.randint(0, 100, x.shape) >= 100 * p) / (1 - p)


def dropout_on_a_per_mille_grid(x, p, training=True):
    if not training or p == 0:
        return x
    return x * (torch.randint(0, 1000, x.shape) >= 1000 * p) / (1 - p)


def dropout_drawn_in_xs_dtype(x, p, training=True):
    """torch.rand_like(x): in float16 and bfloat16 the uniforms are rounded."""
    if not training or p == 0:
        return x
    return x * (torch.rand_like(x) >= p) / (1 - p)


def dropout_bernoulli_in_xs_dtype(x, p, training=True):
    """1 - p in float16 is 1.0 for p = 0.000123: nothing is ever dropped."""
    if not training or p == 0:
        return x
    return x * torch.bernoulli(torch.full_like(x, 1 - p)) / (1 - p)


def dropout_bernoulli(x, p, training=True):
    if not training or p == 0:
        return x
    return x * torch.bernoulli(torch.full(x.shape, 1 - p)).to(x.dtype) / (1 - p)


@pytest.mark.parametrize("wrong, fact", [(dropout_exactly_round_p_n, "drops over many calls"),
                                         (dropout_on_a_percent_grid, "drops at p = 0.000123"),
                                         (dropout_on_a_per_mille_grid, "drops at p = 0.000123"),
                                         (dropout_drawn_in_xs_dtype, "drawn in x's dtype"),
                                         (dropout_bernoulli_in_xs_dtype, "drops at p = 0.000123")])
def test_dropout_with_the_right_mean_and_the_wrong_law_fails(wrong, fact):
    result = check("dropout", wrong)
    assert not result and fact in str(result), str(result)
    assert check("dropout", dropout_bernoulli)


@pytest.mark.parametrize("n, p", [(_CALLS, 0.3), (_CALLS, 0.09), (_CALLS, 0.00123 ** 2), (7585, 0.00123)])
def test_each_binomial_range_leaves_out_under_1e_8(n, p):
    low, high = _binomial_range(n, p)
    pmf = torch.distributions.Binomial(n, torch.tensor(p, dtype=torch.float64)).log_prob(
        torch.arange(n + 1, dtype=torch.float64)).exp()
    assert float(pmf[:low].sum() + pmf[high + 1:].sum()) < 2 * _TAIL <= 1e-8


# ---- 7. the notebook's own sublayers ------------------------------------------------------------

def residual_one_sentence_at_a_time(x, sublayer, norm, norm_first=False):
    def ln(t):
        return layer_norm(t, norm["gamma"], norm["beta"])
    rows = [row[None] for row in x]
    return torch.cat([r + sublayer(ln(r)) if norm_first else ln(r + sublayer(r)) for r in rows])


def residual_whole_batch(x, sublayer, norm, norm_first=False):
    def ln(t):
        return layer_norm(t, norm["gamma"], norm["beta"])
    return x + sublayer(ln(x)) if norm_first else ln(x + sublayer(x))


def test_a_residual_one_sentence_at_a_time_fails_on_the_notebooks_attention_sublayer():
    result = check("residual_sublayer", residual_one_sentence_at_a_time)
    assert not result and "takes the whole batch" in result.details, str(result)  # the dropout sublayer's
    without_dropout = [c for c in REGISTRY["residual_sublayer"].cases() if "dropout inside" not in c.label]
    result = check("residual_sublayer", residual_one_sentence_at_a_time, without_dropout)
    assert not result and "self-attention sublayer" in result.details, str(result)
    assert check("residual_sublayer", residual_whole_batch)


def residual_calling_its_sublayer_twice(x, sublayer, norm, norm_first=False):
    """The second learner trial's answer: a first call for nothing, Post-LN only."""
    def ln(t):
        return layer_norm(t, norm["gamma"], norm["beta"])
    if norm_first:
        return x + sublayer(ln(x))
    sublayer(x)
    return ln(x + sublayer(x))


def residual_calling_its_sublayer_again_after(x, sublayer, norm, norm_first=False):
    """The fifth trial's answer: the first call's output kept, a second call thrown away (one step
    alone gives the reference's output; the next step's mask is the wrong one)."""
    def ln(t):
        return layer_norm(t, norm["gamma"], norm["beta"])
    out = x + sublayer(ln(x)) if norm_first else ln(x + sublayer(x))
    sublayer(ln(x) if norm_first else x)
    return out


@pytest.mark.parametrize("answer", [residual_calling_its_sublayer_twice, residual_calling_its_sublayer_again_after])
def test_a_residual_calling_its_sublayer_twice_is_named_on_the_sublayer_with_dropout(answer):
    result = check("residual_sublayer", answer)
    assert result.mistake == "the sublayer called twice" and "dropout inside" in result.details, str(result)


# ---- 8. corner values, and messages that name the mistake ---------------------------------------

def _clip(total_norm_of, scale_of):
    def clip_grad_norm(parameters, max_norm):
        params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return total_norm_of(None)
        total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        if total > max_norm:
            for g in grads:
                g.mul_(scale_of(max_norm, total))
        return total
    return clip_grad_norm


clip_without_the_1e_6 = _clip(lambda _: torch.tensor(0.0), lambda max_norm, total: max_norm / total)
clip_returning_an_int_zero = _clip(lambda _: torch.tensor(0), lambda max_norm, total: max_norm / (total + 1e-6))


def test_clip_grad_norm_near_1e_6_and_an_int_zero():
    result = check("clip_grad_norm", clip_without_the_1e_6)
    assert not result and "norm 2e-6" in str(result), str(result)
    result = check("clip_grad_norm", clip_returning_an_int_zero)
    assert not result and "float tensor" in result.message and "expected torch.float64" not in str(result)


def attention_softmax_over_axis_2(query, key, value, mask=None):   # the queries' axis of 4-D input
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=-2).nan_to_num(0.0)
    return weights @ value, weights


def attention_d_k_from_shape_1(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ value, weights


def attention_zeroed_in_place(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights.masked_fill_(~mask, 0.0)
    return weights @ value, weights


def layer_norm_annotated_defaults(x, gamma, beta, eps=1e-6):
    return gamma * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + eps) + beta


def layer_norm_eps_1e_6(x, gamma, beta, eps=1e-6):
    mean, variance = x.mean(-1, keepdim=True), x.var(-1, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(variance + eps) * gamma + beta


@pytest.mark.parametrize("name, answer, mistake", [
    ("scaled_dot_product_attention", attention_softmax_over_axis_2, "softmax over the query axis"),
    ("scaled_dot_product_attention", attention_d_k_from_shape_1, "d_k read from the wrong axis"),
    ("layer_norm", layer_norm_annotated_defaults, "x.std() + eps"),
    ("layer_norm", layer_norm_eps_1e_6, "eps defaults to 1e-6"),
])
def test_the_mistake_is_named(name, answer, mistake):
    result = check(name, answer)
    assert result.status == "mistake" and result.mistake.startswith(mistake), str(result)


def test_an_in_place_fill_of_the_weights_is_told_it_breaks_backward():
    result = check("scaled_dot_product_attention", attention_zeroed_in_place)
    assert not result and "inplace" in result.message and "NaN" not in result.message, str(result)


# ---- every refused built-in is said in its exercise's text --------------------------------------

def _markdown(notebook: str) -> str:
    cells = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


@pytest.mark.parametrize("name", sorted(FORBIDDEN))
def test_each_refused_builtin_is_named_in_the_notebook_text(name):
    text = _markdown(notebook_of(REGISTRY[name]))
    assert "The checks refuse an answer that calls PyTorch's own version of what an exercise asks" in text
    for dotted in FORBIDDEN[name]:
        assert dotted.rsplit(".", 1)[-1] in text, dotted


# ---- the second learner trial of round 4 (benchmarks/learner_trial/TRIAL.md): shortcuts that still passed ----------------

_OWN: dict = {}


def positional_encoding_into_its_own_buffer(max_len, d_model):
    """A table kept per size and refilled on every call: the next call overwrites the last output."""
    table = _OWN.setdefault(("pe", max_len, d_model), torch.empty(max_len, d_model))
    return table.copy_(positional_encoding_made_each_call(max_len, d_model))


def top_k_into_its_own_buffer(logits, k):
    buffer = _OWN.setdefault(("top_k", logits.shape, logits.dtype), torch.empty_like(logits))
    kth = logits.topk(min(k, logits.size(-1)), dim=-1).values[..., -1:]
    return buffer.copy_(logits.masked_fill(logits < kth, float("-inf")))


def split_heads_a_view_of_its_input(x, num_heads):
    batch, length, d_model = x.shape
    return x.view(batch, length, num_heads, d_model // num_heads).transpose(1, 2)


_ROPE_BY_LENGTH: dict = {}


def rope_cached_by_length(x, positions=None):
    length, d = x.shape[-2:]
    if positions is not None or length not in _ROPE_BY_LENGTH:  # the angles of the first D seen
        pos = torch.arange(length) if positions is None else positions
        theta = (pos[:, None].double() / 10000 ** (torch.arange(0, d, 2).double() / d)).repeat_interleave(2, -1)
        if positions is not None:
            return rope_angles_in_xs_dtype(x, positions)
        _ROPE_BY_LENGTH[length] = theta
    theta = _ROPE_BY_LENGTH[length][:, :d]
    rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return x * theta.cos().to(x.dtype) + rotated * theta.sin().to(x.dtype)


_STEPS_BY_LIST: dict = {}


def adam_step_counting_by_id_of_the_list(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    """t kept per list object instead of in the state: a fresh adam_init does not reset it."""
    _STEPS_BY_LIST[id(parameters)] = _STEPS_BY_LIST.get(id(parameters), 0) + 1
    state["t"] = _STEPS_BY_LIST[id(parameters)] - 1
    adam_step_moments_in_the_state(parameters, state, lr, betas, eps)


def forward_logits_as_float32(params, src, tgt_in, config, training=False):
    from tfmlib.training import decode_target, encode_source
    memory, src_mask = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, src_mask, config, training).float()


@pytest.mark.parametrize("name, wrong, case, said", [
    ("sinusoidal_positional_encoding", positional_encoding_into_its_own_buffer, "called twice",
     "wrote into the output of its first call"),
    ("top_k_filter", top_k_into_its_own_buffer, "called twice", "wrote into the output of its first call"),
    ("apply_rope", rope_cached_by_length, "nothing kept by L alone", "raised"),
    ("forward", forward_logits_as_float32, "float64 inputs", "dtype torch.float32, expected torch.float64"),
])
def test_the_second_trials_passing_shortcuts_now_fail(name, wrong, case, said):
    result = check(name, wrong)
    assert not result and case in result.details and said in str(result), str(result)


def test_adam_step_counted_by_id_of_the_list_fails():
    result = check("adam", (adam_init_with_moments, adam_step_counting_by_id_of_the_list))
    assert not result and "values differ" in result.message, str(result)


@pytest.mark.parametrize("name, right", [("split_heads", split_heads_a_view_of_its_input),
                                         ("apply_rope", rope_angles_in_xs_dtype)])
def test_a_view_of_the_input_and_a_fresh_tensor_still_pass(name, right):
    assert check(name, right), str(check(name, right))


def test_attention_layers_go_past_512_where_past_1024_is_too_dear():
    for name in ("multi_head_attention", "cached_self_attention", "decoder_layer"):
        sizes = [int(m) for c in REGISTRY[name].cases() for m in re.findall(r"= (\d+), past", c.label)]
        assert any(512 < s <= 1024 for s in sizes), name


def decoder_block_with_a_fixed_causal_buffer(size):
    """The learner trials' answers: a causal mask made once for 512 tokens (or GPT-2's 1024), sliced."""
    buffer = torch.ones(size, size, dtype=torch.bool).tril()

    def block_(x, block, num_heads, mask=None):
        length = x.size(1)
        mask = buffer[:length, :length] if mask is None else mask
        h = layer_norm(x, block["norm1"]["gamma"], block["norm1"]["beta"])
        x = x + multi_head_attention(h, h, h, block["attention"], num_heads, mask)[0]
        h = layer_norm(x, block["norm2"]["gamma"], block["norm2"]["beta"])
        return x + feed_forward(h, block["ffn"])
    return block_


@pytest.mark.parametrize("size", [512, 1024])
def test_a_decoder_block_with_a_fixed_causal_buffer_fails_past_1024_with_the_default_mask(size):
    result = check("decoder_block", decoder_block_with_a_fixed_causal_buffer(size))
    assert not result and "past 1024 tokens" in result.details and f"({size}, {size})" in result.details, str(result)


def decoder_block_attending_with_a_fill(fill):
    """Its own attention: hidden scores filled with `fill` (None: the dtype's lowest), rows with no
    key seen zeroed after."""
    def block_(x, block, num_heads, mask=None):
        batch, length, width = x.shape
        mask = torch.ones(length, length, dtype=torch.bool).tril() if mask is None else mask
        p, d_k = block["attention"], width // num_heads

        def heads(h, name):
            return (h @ p[f"w_{name}"].T + p[f"b_{name}"]).view(batch, length, num_heads, d_k).transpose(1, 2)
        h = layer_norm(x, block["norm1"]["gamma"], block["norm1"]["beta"])
        scores = heads(h, "q") @ heads(h, "k").transpose(-2, -1) / math.sqrt(d_k)
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min if fill is None else fill)
        weights = scores.softmax(-1).masked_fill(~mask.any(-1, keepdim=True), 0.0)
        context = (weights @ heads(h, "v")).transpose(1, 2).reshape(batch, length, width)
        x = x + context @ p["w_o"].T + p["b_o"]
        h = layer_norm(x, block["norm2"]["gamma"], block["norm2"]["beta"])
        return x + feed_forward(h, block["ffn"])
    return block_


@pytest.mark.parametrize("fill, right", [(float("-inf"), True), (None, True), (-1e4, False)])
def test_a_fill_of_minus_1e4_fails_where_scores_go_past_it(fill, right):
    result = check("decoder_block", decoder_block_attending_with_a_fill(fill))
    assert bool(result) is right, str(result)
    assert right or "scores of +-1e5" in result.details, str(result)


def lm_forward_with_final_eps(eps):
    def forward(params, ids, config):
        x = F.embedding(ids, params["token_embedding"]) * math.sqrt(config.d_model)
        x = x + params["position_embedding"][:ids.size(1)]
        for block in params["blocks"]:
            x = decoder_block(x, block, config.num_heads)
        norm = params["final_norm"]
        return layer_norm(x, norm["gamma"], norm["beta"], eps) @ params["token_embedding"].T
    return forward


@pytest.mark.parametrize("eps, right", [(1e-5, True), (1e-6, False)])
def test_lm_forwards_final_layer_norm_eps_shows_on_a_nearly_constant_hidden_state(eps, right):
    result = check("lm_forward", lm_forward_with_final_eps(eps))
    assert bool(result) is right, str(result)
    assert right or "x 1e-3" in result.details, str(result)


def causal_mask_on_the_meta_device(seq_len):
    """Right shape and dtype, no data: the second-call case must not take it for 'not attempted'."""
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device="meta").tril()[None, None]


def test_an_answer_without_data_is_named_by_its_device_not_called_not_attempted():
    result = check("causal_mask", causal_mask_on_the_meta_device)
    assert not result and "on device meta, expected cpu" in str(result), str(result)
