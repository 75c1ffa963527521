"""The checks of notebook 08 (encoder_layer, encoder, decoder_layer) cannot be fooled.

Every answer below is written the way a learner would write it in a notebook cell:
  - wrong answers must FAIL, and be named where the catalogue has their mistake: an
    in-place residual on the caller's x, a stack that runs one layer too few, the
    notebook's own cross-attention slip, LayerNorm(h + FFN(x)), Pre-LN, a detached input;
  - correct but unusual answers must PASS: loops over heads, einsum, torch.where,
    PyTorch's scaled_dot_product_attention, float64 inside, a non-contiguous result,
    in-place edits of the answer's own tensors, recursion and reduce over the layers.
"""
import functools
import math

import pytest
import torch
import torch.nn.functional as F

from tfmlib import encoder_layer, feed_forward, layer_norm, multi_head_attention, residual_sublayer
from tfmlib.exercises import REGISTRY, check

from random_cases import random_cases

EXERCISES = ("encoder_layer", "encoder", "decoder_layer")


# ---- pieces a learner writes once and reuses ---------------------------------------------------

def attention_einsum(query, kv, p, num_heads, mask=None):
    """Multi-head attention with einsum and torch.where; returns only the output."""
    batch, lq, d_model = query.shape
    d_k = d_model // num_heads

    def heads(t, w, b):
        return (t @ w.T + b).reshape(batch, t.shape[1], num_heads, d_k).transpose(1, 2)

    q, k, v = heads(query, p["w_q"], p["b_q"]), heads(kv, p["w_k"], p["b_k"]), heads(kv, p["w_v"], p["b_v"])
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(d_k)
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf")))
    out = torch.einsum("bhqk,bhkd->bhqd", scores.softmax(-1).nan_to_num(0.0), v)  # no visible key: zeros
    return out.transpose(1, 2).reshape(batch, lq, d_model) @ p["w_o"].T + p["b_o"]


def attention_head_loop(query, kv, p, num_heads, mask=None):
    """One head at a time, in a Python loop."""
    d_k = query.shape[-1] // num_heads
    q, k, v = (F.linear(query, p["w_q"], p["b_q"]), F.linear(kv, p["w_k"], p["b_k"]),
               F.linear(kv, p["w_v"], p["b_v"]))
    outputs = []
    for head in range(num_heads):
        cols = slice(head * d_k, (head + 1) * d_k)
        scores = q[..., cols] @ k[..., cols].transpose(-2, -1) / d_k ** 0.5     # (B, Lq, Lk)
        if mask is not None:
            scores = scores.masked_fill(~mask[:, 0], float("-inf"))
        outputs.append(torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v[..., cols])  # no visible key: zeros
    return F.linear(torch.cat(outputs, dim=-1), p["w_o"], p["b_o"])


def attention_sdpa(query, kv, p, num_heads, mask=None):
    """PyTorch's own scaled_dot_product_attention: its bool mask also means True = may attend."""
    batch, lq, d_model = query.shape

    def heads(t, w, b):
        return F.linear(t, w, b).view(batch, t.shape[1], num_heads, d_model // num_heads).transpose(1, 2)

    out = F.scaled_dot_product_attention(heads(query, p["w_q"], p["b_q"]), heads(kv, p["w_k"], p["b_k"]),
                                         heads(kv, p["w_v"], p["b_v"]), attn_mask=mask)
    return F.linear(out.transpose(1, 2).reshape(batch, lq, d_model), p["w_o"], p["b_o"])


def ln(x, norm):
    return F.layer_norm(x, x.shape[-1:], norm["gamma"], norm["beta"])


def ffn(x, p):
    return torch.relu(x @ p["w_1"].T + p["b_1"]) @ p["w_2"].T + p["b_2"]


def mha(h, kv, p, num_heads, mask):
    return multi_head_attention(h, kv, kv, p, num_heads, mask)[0]


# ---- encoder_layer: correct answers ------------------------------------------------------------

def encoder_layer_einsum(x, params, num_heads, mask=None):
    h = ln(x + attention_einsum(x, x, params["self_attn"], num_heads, mask), params["norm1"])
    return ln(h + ffn(h, params["ffn"]), params["norm2"])


def encoder_layer_head_loop(x, params, num_heads, mask=None):
    h = ln(x + attention_head_loop(x, x, params["self_attn"], num_heads, mask), params["norm1"])
    return ln(h + ffn(h, params["ffn"]), params["norm2"])


def encoder_layer_float64_inside(x, params, num_heads, mask=None):
    p = {name: {key: t.double() for key, t in sub.items()} for name, sub in params.items()}
    h = x.double()
    h = layer_norm(h + mha(h, h, p["self_attn"], num_heads, mask), p["norm1"]["gamma"], p["norm1"]["beta"])
    h = layer_norm(h + feed_forward(h, p["ffn"]), p["norm2"]["gamma"], p["norm2"]["beta"])
    return h.to(x.dtype)


def encoder_layer_features_first(x, params, num_heads, mask=None):
    """The last LayerNorm computed on a (B, D, L) view: the result is not contiguous."""
    h = ln(x + mha(x, x, params["self_attn"], num_heads, mask), params["norm1"])
    columns = (h + ffn(h, params["ffn"])).transpose(1, 2)                          # (B, D, L)
    mean = columns.mean(dim=1, keepdim=True)
    var = ((columns - mean) ** 2).mean(dim=1, keepdim=True)
    norm = params["norm2"]
    out = (columns - mean) / torch.sqrt(var + 1e-5) * norm["gamma"][:, None] + norm["beta"][:, None]
    return out.transpose(1, 2)


def encoder_layer_own_in_place(x, params, num_heads, mask=None):
    """In-place edits, but only of tensors the answer made itself."""
    h = x.clone()
    h += mha(x, x, params["self_attn"], num_heads, mask)
    h = ln(h, params["norm1"])
    out = ffn(h, params["ffn"])
    out.add_(h)
    return ln(out, params["norm2"])


def encoder_layer_residual_sublayer(x, params, num_heads, mask=None):
    h = residual_sublayer(x, lambda t: mha(t, t, params["self_attn"], num_heads, mask), params["norm1"])
    return residual_sublayer(h, lambda t: feed_forward(t, params["ffn"]), params["norm2"])


# ---- encoder_layer: wrong answers --------------------------------------------------------------

def encoder_layer_adds_in_place(x, params, num_heads, mask=None):
    x += mha(x, x, params["self_attn"], num_heads, mask)
    x = ln(x, params["norm1"])
    return ln(x + ffn(x, params["ffn"]), params["norm2"])


def encoder_layer_ffn_reads_x(x, params, num_heads, mask=None):
    h = ln(x + mha(x, x, params["self_attn"], num_heads, mask), params["norm1"])
    return ln(h + ffn(x, params["ffn"]), params["norm2"])


def encoder_layer_pre_ln(x, params, num_heads, mask=None):
    h = x + attention_einsum(ln(x, params["norm1"]), ln(x, params["norm1"]), params["self_attn"],
                             num_heads, mask)
    return h + ffn(ln(h, params["norm2"]), params["ffn"])


def encoder_layer_no_grad(x, params, num_heads, mask=None):
    with torch.no_grad():
        return encoder_layer_einsum(x, params, num_heads, mask)


def encoder_layer_detached_ffn(x, params, num_heads, mask=None):
    h = ln(x + mha(x, x, params["self_attn"], num_heads, mask), params["norm1"])
    return ln(h + ffn(h, params["ffn"]).detach(), params["norm2"])


def encoder_layer_rebuilt_tensor(x, params, num_heads, mask=None):
    return torch.tensor(encoder_layer_einsum(x, params, num_heads, mask).tolist())


# ---- encoder: correct answers ------------------------------------------------------------------

def encoder_reduce(x, layers, num_heads, mask=None):
    return functools.reduce(lambda h, p: encoder_layer_einsum(h, p, num_heads, mask), layers, x)


def encoder_recursive(x, layers, num_heads, mask=None):
    if len(layers) == 0:
        return x
    return encoder_recursive(encoder_layer(x, layers[0], num_heads, mask), layers[1:], num_heads, mask)


def encoder_while_index(x, layers, num_heads, mask=None):
    i = 0
    while i < len(layers):
        x = encoder_layer(x, layers[i], num_heads, mask)   # rebinds the name; the caller's x is untouched
        i += 1
    return x


def encoder_pops_a_copy(x, layers, num_heads, mask=None):
    todo, hidden = list(layers), x
    while todo:
        hidden = encoder_layer(hidden, todo.pop(0), num_heads, mask)
    return hidden


# ---- encoder: wrong answers --------------------------------------------------------------------

def encoder_range_minus_one(x, layers, num_heads, mask=None):
    hidden = x
    for i in range(len(layers) - 1):
        hidden = encoder_layer(hidden, layers[i], num_heads, mask)
    return hidden


def encoder_all_but_last(x, layers, num_heads, mask=None):
    for params in layers[:-1]:
        x = encoder_layer(x, params, num_heads, mask)
    return x


def encoder_from_the_second(x, layers, num_heads, mask=None):
    hidden = x
    for params in layers[1:]:
        hidden = encoder_layer_einsum(hidden, params, num_heads, mask)
    return hidden


def encoder_range_from_one(x, layers, num_heads, mask=None):
    hidden = x
    for i in range(1, len(layers)):
        hidden = encoder_layer(hidden, layers[i], num_heads, mask)
    return hidden


def encoder_return_in_loop(x, layers, num_heads, mask=None):
    hidden = x
    for params in layers:
        hidden = encoder_layer(hidden, params, num_heads, mask)
        return hidden


def encoder_every_layer_on_x(x, layers, num_heads, mask=None):
    hidden = x
    for params in layers:
        hidden = encoder_layer(x, params, num_heads, mask)
    return hidden


def encoder_in_place_layers(x, layers, num_heads, mask=None):
    for params in layers:
        x = encoder_layer_adds_in_place(x, params, num_heads, mask)
    return x


def encoder_consumes_the_list(x, layers, num_heads, mask=None):
    hidden = x
    while layers:
        hidden = encoder_layer(hidden, layers.pop(0), num_heads, mask)
    return hidden


def encoder_detached_between_layers(x, layers, num_heads, mask=None):
    hidden = x
    for params in layers:
        hidden = encoder_layer(hidden.detach(), params, num_heads, mask)   # "saves memory"
    return hidden


# ---- decoder_layer: correct answers ------------------------------------------------------------

def decoder_layer_head_loop(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    h = ln(x + attention_head_loop(x, x, params["self_attn"], num_heads, self_mask), params["norm1"])
    h = ln(h + attention_head_loop(h, memory, params["cross_attn"], num_heads, memory_mask), params["norm2"])
    return ln(h + ffn(h, params["ffn"]), params["norm3"])


def decoder_layer_sdpa(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    h = ln(x + attention_sdpa(x, x, params["self_attn"], num_heads, self_mask), params["norm1"])
    h = ln(h + attention_sdpa(h, memory, params["cross_attn"], num_heads, memory_mask), params["norm2"])
    return ln(h + ffn(h, params["ffn"]), params["norm3"])


def decoder_layer_float64_inside(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    p = {name: {key: t.double() for key, t in sub.items()} for name, sub in params.items()}
    h = ln(x.double() + attention_einsum(x.double(), x.double(), p["self_attn"], num_heads, self_mask),
           p["norm1"])
    h = ln(h + attention_einsum(h, memory.double(), p["cross_attn"], num_heads, memory_mask), p["norm2"])
    return ln(h + ffn(h, p["ffn"]), p["norm3"]).to(x.dtype)


def decoder_layer_sublayer_table(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    sublayers = [(lambda h: mha(h, h, params["self_attn"], num_heads, self_mask), "norm1"),
                 (lambda h: mha(h, memory, params["cross_attn"], num_heads, memory_mask), "norm2"),
                 (lambda h: feed_forward(h, params["ffn"]), "norm3")]
    for sublayer, norm in sublayers:
        x = residual_sublayer(x, sublayer, params[norm])
    return x


def decoder_layer_own_in_place(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    h = x.clone()
    h += mha(x, x, params["self_attn"], num_heads, self_mask)
    h = ln(h, params["norm1"])
    h2 = mha(h, memory, params["cross_attn"], num_heads, memory_mask)
    h2 += h
    h2 = ln(h2, params["norm2"])
    return ln(h2 + ffn(h2, params["ffn"]), params["norm3"])


# ---- decoder_layer: wrong answers --------------------------------------------------------------

def decoder_layer_notebook_slip(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    """Notebook 08's own wrong cross-attention, copied: keys and values from h1, with tgt_mask."""
    n1, n2 = params["norm1"], params["norm2"]
    self_out, _ = multi_head_attention(x, x, x, params["self_attn"], num_heads, self_mask)
    h1 = layer_norm(x + self_out, n1["gamma"], n1["beta"])
    cross_out, _ = multi_head_attention(h1, h1, h1, params["cross_attn"], num_heads, self_mask)
    h2 = layer_norm(h1 + cross_out, n2["gamma"], n2["beta"])
    return ln(h2 + ffn(h2, params["ffn"]), params["norm3"])


def decoder_layer_kv_from_decoder(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    h = ln(x + attention_einsum(x, x, params["self_attn"], num_heads, self_mask), params["norm1"])
    h = ln(h + attention_einsum(h, h, params["cross_attn"], num_heads, memory_mask), params["norm2"])
    return ln(h + ffn(h, params["ffn"]), params["norm3"])


def decoder_layer_adds_in_place(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    x += mha(x, x, params["self_attn"], num_heads, self_mask)
    h = ln(x, params["norm1"])
    h = ln(h + mha(h, memory, params["cross_attn"], num_heads, memory_mask), params["norm2"])
    return ln(h + ffn(h, params["ffn"]), params["norm3"])


def decoder_layer_pre_ln(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    h = ln(x, params["norm1"])
    x = x + mha(h, h, params["self_attn"], num_heads, self_mask)
    x = x + mha(ln(x, params["norm2"]), memory, params["cross_attn"], num_heads, memory_mask)
    return x + ffn(ln(x, params["norm3"]), params["ffn"])


def decoder_layer_no_causal_mask(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    return decoder_layer_head_loop(x, memory, params, num_heads, None, memory_mask)


def decoder_layer_masks_swapped(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    return decoder_layer_sublayer_table(x, memory, params, num_heads, memory_mask, self_mask)


def decoder_layer_detached_memory(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    return decoder_layer_sublayer_table(x, memory.detach(), params, num_heads, self_mask, memory_mask)


# ---- the tests ---------------------------------------------------------------------------------

CORRECT = [
    ("encoder_layer", encoder_layer_einsum), ("encoder_layer", encoder_layer_head_loop),
    ("encoder_layer", encoder_layer_float64_inside), ("encoder_layer", encoder_layer_features_first),
    ("encoder_layer", encoder_layer_own_in_place), ("encoder_layer", encoder_layer_residual_sublayer),
    ("encoder", encoder_reduce), ("encoder", encoder_recursive), ("encoder", encoder_while_index),
    ("encoder", encoder_pops_a_copy),
    ("decoder_layer", decoder_layer_head_loop), ("decoder_layer", decoder_layer_sdpa),
    ("decoder_layer", decoder_layer_float64_inside), ("decoder_layer", decoder_layer_sublayer_table),
    ("decoder_layer", decoder_layer_own_in_place),
]

NAMED = [
    ("encoder_layer", encoder_layer_adds_in_place, "residual added in place to the caller's x"),
    ("encoder_layer", encoder_layer_ffn_reads_x, "FFN sublayer fed the original x"),
    ("encoder_layer", encoder_layer_pre_ln, "Pre-LN instead of Post-LN"),
    ("encoder", encoder_range_minus_one, "skips the last layer"),
    ("encoder", encoder_all_but_last, "skips the last layer"),
    ("encoder", encoder_from_the_second, "skips the first layer"),
    ("encoder", encoder_range_from_one, "skips the first layer"),
    ("encoder", encoder_return_in_loop, "return inside the loop: only the first layer ran"),
    ("encoder", encoder_every_layer_on_x, "every layer fed the original x"),
    ("encoder", encoder_in_place_layers, "a layer adds its residual in place to the caller's x"),
    ("decoder_layer", decoder_layer_notebook_slip, "cross-attention keys and values taken from the decoder"),
    ("decoder_layer", decoder_layer_kv_from_decoder, "cross-attention keys and values taken from the decoder"),
    ("decoder_layer", decoder_layer_adds_in_place, "residual added in place to the caller's x"),
    ("decoder_layer", decoder_layer_pre_ln, "Pre-LN instead of Post-LN"),
    ("decoder_layer", decoder_layer_no_causal_mask, "self-attention without the causal self_mask"),
    ("decoder_layer", decoder_layer_masks_swapped, "the two masks swapped"),
]

# Wrong answers no catalogued mistake covers: diagnosed, with what the diagnosis must say.
DIAGNOSED = [
    ("encoder_layer", encoder_layer_no_grad, "no gradient flows back"),
    ("encoder_layer", encoder_layer_rebuilt_tensor, "no gradient flows back"),
    ("encoder_layer", encoder_layer_detached_ffn, "the gradient reaching"),
    ("encoder", encoder_consumes_the_list, "changed its input `layers` in place"),
    ("encoder", encoder_detached_between_layers, "autograd cannot follow it back to `x`"),
    ("decoder_layer", decoder_layer_detached_memory, "the gradient reaching `memory`"),
]


@pytest.mark.parametrize("name, answer", CORRECT, ids=[f.__name__ for _, f in CORRECT])
def test_correct_but_unusual_answers_pass(name, answer):
    result = check(name, answer)
    assert result.status == "passed", str(result)


@pytest.mark.parametrize("name, answer", [(n, f) for n, f in CORRECT if f is not decoder_layer_sdpa],
                         ids=[f.__name__ for _, f in CORRECT if f is not decoder_layer_sdpa])
def test_correct_answers_pass_on_the_random_cases_too(name, answer):
    """Every edge of the contract (an empty batch, no tokens, float64, four layers...) included.
    (PyTorch's sdpa gives NaN on the empty memory, where the course's attention gives zeros.)"""
    result = check(name, answer, random_cases(name, 0))
    assert result.status == "passed", str(result)


@pytest.mark.parametrize("name, answer, mistake", NAMED, ids=[f.__name__ for _, f, _ in NAMED])
def test_classic_mistakes_are_named(name, answer, mistake):
    result = check(name, answer)
    assert result.status == "mistake" and result.mistake == mistake, str(result)
    assert not result


@pytest.mark.parametrize("name, answer, says", DIAGNOSED, ids=[f.__name__ for _, f, _ in DIAGNOSED])
def test_other_wrong_answers_fail_with_a_diagnosis(name, answer, says):
    result = check(name, answer)
    assert result.status == "failed", str(result)
    assert says in str(result), str(result)


def test_an_in_place_answer_changes_only_the_checks_private_copy():
    """The check hands each answer a copy of the case: the case itself stays as it was."""
    cases = REGISTRY["encoder_layer"].make_cases()
    before = cases[0].args[0].clone()
    assert not check("encoder_layer", encoder_layer_adds_in_place, cases)
    assert torch.equal(cases[0].args[0], before)


@pytest.mark.parametrize("name, answer", [("encoder_layer", encoder_layer_detached_ffn),
                                          ("encoder", encoder_detached_between_layers),
                                          ("decoder_layer", decoder_layer_detached_memory),
                                          ("decoder_layer", decoder_layer_pre_ln)])
def test_diagnoses_print_shapes_never_tensor_values(name, answer):
    text = str(check(name, answer))
    assert "tensor([" not in text and "Parameter" not in text, text
    assert all(len(line) < 400 for line in text.splitlines()), text


@pytest.mark.parametrize("name", EXERCISES)
def test_random_cases_cover_the_edges_of_the_contract(name):
    labels = " | ".join(case.label for seed in range(3) for case in random_cases(name, seed))
    for edge in ("empty batch", "no tokens", "one token", "one head", "float64"):
        assert edge in labels, edge
    if name == "encoder":
        assert "layers=1" in labels and "layers=4" in labels
    if name == "decoder_layer":
        assert "empty memory" in labels and "one source token" in labels


@pytest.mark.parametrize("name", EXERCISES)
def test_the_check_cases_have_stacks_longer_than_two_and_unequal_lengths(name):
    cases = REGISTRY[name].make_cases()
    if name == "encoder":
        assert max(len(case.args[1]) for case in cases) >= 3
    if name == "decoder_layer":
        assert any(case.args[0].shape[1] != case.args[1].shape[1] for case in cases)
        assert any(case.args[0].shape[1] == case.args[1].shape[1] for case in cases)
