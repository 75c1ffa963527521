"""Exercise checks of notebooks 06-10: multi-head attention, sublayers, encoder/decoder, Adam, training.

For every check:
  (a) tfmlib's own function passes;
  (b) other correct implementations pass (loops, einsum, torch.where, F.*, other Adam
      state layouts, torch.optim wrapped): a check that rejects a correct answer is a bug;
  (c) every catalogued mistake (each of its variants) is caught and named, and so is at
      least one wrong answer written here independently, in a learner's own style;
  (d) answers that raise, return None, the wrong shape or NaN are diagnosed without the
      check raising; a stub reports "not attempted".
"""
import functools
import math

import pytest
import torch
import torch.nn.functional as F

from tfmlib import (decoder, encoder, encoder_layer, layer_norm, multi_head_attention, padding_mask,
                    residual_sublayer, target_mask)
from tfmlib.exercises import REGISTRY, check, solution
from tfmlib.training import (PAD_ID, attention_layers, decode_target, embed_with_positions, encode_source,
                             forward)

EXERCISES = ["linear", "split_heads", "merge_heads", "multi_head_attention", "feed_forward",
             "dropout", "layer_norm", "residual_sublayer", "encoder_layer", "encoder",
             "decoder_layer", "adam", "sgd_step", "shift_right", "forward"]


# ---- correct answers written differently from tfmlib ------------------------------------------

def linear_f(x, weight, bias=None):
    return F.linear(x, weight, bias)


def linear_einsum(x, weight, bias=None):
    y = torch.einsum("...i,oi->...o", x, weight)
    return y if bias is None else y + bias


def linear_broadcast(x, weight, bias=None):
    y = (x[..., None, :] * weight).sum(dim=-1)  # (..., 1, in) * (out, in) -> (..., out)
    return y + (0 if bias is None else bias)


def split_view_permute(x, num_heads):
    batch, length, _ = x.shape
    return x.view(batch, length, num_heads, -1).permute(0, 2, 1, 3)


def split_chunks(x, num_heads):
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)


def merge_cat(x):
    return torch.cat(x.unbind(dim=1), dim=-1)


def merge_permute_flatten(x):
    return x.permute(0, 2, 1, 3).flatten(start_dim=2)


def mha_loop(query, key, value, params, num_heads, mask=None):
    """One head at a time, slicing each head's rows out of the weights."""
    d_k = query.size(-1) // num_heads
    contexts, weights = [], []
    for h in range(num_heads):
        rows = slice(h * d_k, (h + 1) * d_k)
        q = query @ params["w_q"][rows].T + params["b_q"][rows]
        k = key @ params["w_k"][rows].T + params["b_k"][rows]
        v = value @ params["w_v"][rows].T + params["b_v"][rows]
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)            # (B, Lq, Lk)
        if mask is not None:
            scores = scores.masked_fill(~mask[:, h if mask.size(1) > 1 else 0], float("-inf"))  # head h's
        w = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        contexts.append(w @ v)
        weights.append(w)
    context = torch.cat(contexts, dim=-1)
    return context @ params["w_o"].T + params["b_o"], torch.stack(weights, dim=1)


def mha_einsum(query, key, value, params, num_heads, mask=None):
    batch, lq, d_model = query.shape
    d_k = d_model // num_heads

    def project(x, name):
        y = torch.einsum("bld,ed->ble", x, params[f"w_{name}"]) + params[f"b_{name}"]
        return y.view(batch, x.size(1), num_heads, d_k)

    q, k, v = project(query, "q"), project(key, "k"), project(value, "v")
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / d_k ** 0.5
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf")))
    weights = torch.where(torch.isnan(s := torch.softmax(scores, -1)), 0.0, s)
    context = torch.einsum("bhqk,bkhd->bqhd", weights, v).reshape(batch, lq, d_model)
    return torch.einsum("bld,ed->ble", context, params["w_o"]) + params["b_o"], weights


def ffn_f(x, params):
    return F.linear(F.linear(x, params["w_1"], params["b_1"]).clamp(min=0), params["w_2"], params["b_2"])


def ffn_einsum(x, params):
    h = torch.einsum("bld,fd->blf", x, params["w_1"]) + params["b_1"]
    h = torch.where(h > 0, h, torch.zeros_like(h))
    return torch.einsum("blf,df->bld", h, params["w_2"]) + params["b_2"]


def dropout_f(x, p, training=True):
    return F.dropout(x, p, training)


def dropout_bernoulli(x, p, training=True):
    if not training or p == 0:
        return x
    keep = torch.bernoulli(torch.full(x.shape, 1 - p)).to(x.dtype)  # in float32: 1 - 1e-4 is 1.0 in float16
    return x * keep / (1 - p)


def dropout_where(x, p, training=True):
    if not training:
        return x
    return torch.where(torch.rand(x.shape) < p, torch.zeros_like(x), x / (1 - p))


def layer_norm_f(x, gamma, beta, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], gamma, beta, eps)


def layer_norm_manual(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    wide = (x - mean).to(torch.promote_types(x.dtype, torch.float32))  # float16 squares overflow past 256
    variance = (wide ** 2).mean(dim=-1, keepdim=True).to(x.dtype)
    return gamma * (x - mean) * torch.rsqrt(variance + eps) + beta


def layer_norm_var_mean(x, gamma, beta, eps=1e-5):
    variance, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    return torch.addcmul(beta, (x - mean) / (variance + eps).sqrt(), gamma)


def residual_f(x, sublayer, norm, norm_first=False):
    def ln(t):
        return F.layer_norm(t, t.shape[-1:], norm["gamma"], norm["beta"], 1e-5)
    if norm_first:
        return x + sublayer(ln(x))
    return ln(x + sublayer(x))


def residual_one_path(x, sublayer, norm, norm_first=False):
    out = x + sublayer(layer_norm(x, **norm) if norm_first else x)
    return out if norm_first else layer_norm(out, **norm)


def _ln(x, norm, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps) * norm["gamma"] + norm["beta"]


def _ffn(x, p):
    return torch.relu(x @ p["w_1"].T + p["b_1"]) @ p["w_2"].T + p["b_2"]


def encoder_layer_scratch(x, params, num_heads, mask=None):
    h = _ln(x + mha_loop(x, x, x, params["self_attn"], num_heads, mask)[0], params["norm1"])
    return _ln(h + _ffn(h, params["ffn"]), params["norm2"])


def encoder_layer_with_residual(x, params, num_heads, mask=None):
    def attention(h):
        return multi_head_attention(h, h, h, params["self_attn"], num_heads, mask)[0]
    hidden = residual_sublayer(x, attention, params["norm1"])
    return residual_sublayer(hidden, lambda h: _ffn(h, params["ffn"]), params["norm2"])


def encoder_reduce(x, layers, num_heads, mask=None):
    return functools.reduce(lambda h, p: encoder_layer_scratch(h, p, num_heads, mask), layers, x)


def encoder_recursive(x, layers, num_heads, mask=None):
    if not layers:
        return x
    return encoder_recursive(encoder_layer(x, layers[0], num_heads, mask), layers[1:], num_heads, mask)


def decoder_layer_scratch(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    h = _ln(x + mha_einsum(x, x, x, params["self_attn"], num_heads, self_mask)[0], params["norm1"])
    h = _ln(h + mha_loop(h, memory, memory, params["cross_attn"], num_heads, memory_mask)[0], params["norm2"])
    return _ln(h + _ffn(h, params["ffn"]), params["norm3"])


def decoder_layer_with_residual(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    def self_attention(h):
        return multi_head_attention(h, h, h, params["self_attn"], num_heads, self_mask)[0]

    def cross_attention(h):
        return multi_head_attention(h, memory, memory, params["cross_attn"], num_heads, memory_mask)[0]

    for sublayer, norm in ((self_attention, "norm1"), (cross_attention, "norm2"),
                           (lambda h: _ffn(h, params["ffn"]), "norm3")):
        x = residual_sublayer(x, sublayer, params[norm])
    return x


class ClassAdam:
    """State as an object; moments keyed by id(p), created when a gradient first comes."""

    def __init__(self, params):
        self.t = 0
        self.moments = {}


def class_adam_init(params):
    return ClassAdam(params)


def class_adam_step(params, state, lr, betas=(0.9, 0.999), eps=1e-8):
    state.t += 1
    beta1, beta2 = betas
    with torch.no_grad():
        for p in params:
            if p.grad is None:
                continue
            m, v = state.moments.setdefault(id(p), (torch.zeros_like(p), torch.zeros_like(p)))
            m.lerp_(p.grad, 1 - beta1)                      # m + (1 - b1)(g - m) = b1 m + (1 - b1) g
            v.mul_(beta2).add_((1 - beta2) * p.grad ** 2)
            denominator = (v / (1 - beta2 ** state.t)).sqrt() + eps
            p.addcdiv_(m / (1 - beta1 ** state.t), denominator, value=-lr)


def tuple_adam_init(params):
    return [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params], 0


def tuple_adam_step(params, state, lr, betas=(0.9, 0.999), eps=1e-8):
    """Functional style: returns the new (m, v, t)."""
    m, v, t = state
    t += 1
    b1, b2 = betas
    new_m, new_v = [], []
    for p, m_i, v_i in zip(params, m, v):
        if p.grad is not None:
            m_i = b1 * m_i + (1 - b1) * p.grad
            v_i = b2 * v_i + (1 - b2) * p.grad * p.grad
            with torch.no_grad():
                p -= lr * (m_i / (1 - b1 ** t)) / (torch.sqrt(v_i / (1 - b2 ** t)) + eps)
        new_m.append(m_i)
        new_v.append(v_i)
    return new_m, new_v, t


def torch_adam_init(params):
    return torch.optim.Adam(params, lr=0.0)


def torch_adam_step(params, optimizer, lr, betas=(0.9, 0.999), eps=1e-8):
    for group in optimizer.param_groups:
        group.update(lr=lr, betas=betas, eps=eps)
    optimizer.step()


def sgd_data(params, lr):
    for p in params:
        if p.grad is not None:
            p.data.add_(p.grad, alpha=-lr)


def sgd_torch(params, lr):
    torch.optim.SGD(params, lr=lr).step()


def shift_narrow(tgt):
    length = tgt.size(1)
    return tgt.narrow(1, 0, length - 1), tgt.narrow(1, 1, length - 1)


def shift_ellipsis(tgt):
    return [tgt[..., :-1].clone(), tgt[..., 1:].clone()]


def forward_by_keywords(params, src, tgt_in, config, training=False):
    memory, src_mask = encode_source(params, src, config, training=training)
    return decode_target(params, tgt_in, memory, src_mask, config, training=training)


def forward_written_out(params, src, tgt_in, config, training=False):
    """From the stacks, following every field of the config (positions and score scaling too)."""
    options = dict(norm_first=config.norm_first, dropout_p=config.dropout_p, training=training)
    src_mask = padding_mask(src, PAD_ID)
    memory = encoder(embed_with_positions(params, src, config), attention_layers(params, "encoder", config),
                     config.num_heads, src_mask, final_norm=params["encoder_norm"], **options)
    y = embed_with_positions(params, tgt_in, config)
    hidden = decoder(y, memory, attention_layers(params, "decoder", config), config.num_heads,
                     target_mask(tgt_in, PAD_ID), src_mask, final_norm=params["decoder_norm"], **options)
    return hidden @ params["embedding"].T + params["out_bias"]


CORRECT = {
    "linear": [linear_einsum, linear_broadcast],
    "split_heads": [split_view_permute, split_chunks],
    "merge_heads": [merge_cat, merge_permute_flatten],
    "multi_head_attention": [mha_loop, mha_einsum],
    "feed_forward": [ffn_f, ffn_einsum],
    "dropout": [dropout_bernoulli, dropout_where],
    "layer_norm": [layer_norm_manual, layer_norm_var_mean],
    "residual_sublayer": [residual_f, residual_one_path],
    "encoder_layer": [encoder_layer_scratch, encoder_layer_with_residual],
    "encoder": [encoder_reduce, encoder_recursive],
    "decoder_layer": [decoder_layer_scratch, decoder_layer_with_residual],
    "adam": [(class_adam_init, class_adam_step), (tuple_adam_init, tuple_adam_step)],
    "sgd_step": [sgd_data],
    "shift_right": [shift_narrow, shift_ellipsis],
    "forward": [forward_by_keywords, forward_written_out],
}

# Right answers that call PyTorch's own version of the exercise: right, but not the learner's own
# (tfmlib/exercises/provenance.py), so the check fails them and names the call.
BUILT_IN = {"linear": linear_f, "dropout": dropout_f, "layer_norm": layer_norm_f, "sgd_step": sgd_torch}


# ---- wrong answers in a learner's own words, with the mistake they should be named after ------

def w_linear(x, weight, bias=None):
    return torch.matmul(x, weight) + (0 if bias is None else bias)


def w_split(x, num_heads):
    batch, length, d_model = x.shape
    return x.view(batch, num_heads, length, d_model // num_heads)


def w_merge_view(x):
    batch, heads, length, d_k = x.shape
    return x.contiguous().view(batch, length, heads * d_k)


def w_merge_transpose_view(x):
    batch, heads, length, d_k = x.shape
    return x.transpose(1, 2).view(batch, length, -1)


def w_mha_mask_dropped(query, key, value, params, num_heads, mask=None):
    return mha_loop(query, key, value, params, num_heads, mask=None)


def w_mha_one_projection(query, key, value, params, num_heads, mask=None):
    shared = {**params, "w_k": params["w_q"], "b_k": params["b_q"], "w_v": params["w_q"], "b_v": params["b_q"]}
    return mha_einsum(query, key, value, shared, num_heads, mask)


def w_ffn(x, params):
    return torch.einsum("blf,df->bld", torch.einsum("bld,fd->blf", x, params["w_1"]) + params["b_1"],
                        params["w_2"]) + params["b_2"]


def w_dropout_by_p(x, p, training=True):
    if not training:
        return x
    return torch.where(torch.rand_like(x) < p, torch.zeros_like(x), x / p)


def w_dropout_always(x, p, training=True):
    return F.dropout(x, p)


def w_dropout_no_scale(x, p, training=True):
    if not training:
        return x
    return x * torch.bernoulli(torch.full(x.shape, 1 - p)).to(x.dtype)


def w_layer_norm_unbiased(x, gamma, beta, eps=1e-5):
    mean = torch.mean(x, -1, keepdim=True)
    return gamma * (x - mean) / torch.sqrt(torch.var(x, -1, keepdim=True) + eps) + beta


def w_layer_norm_std(x, gamma, beta, eps=1e-5):
    return gamma * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + eps) + beta


def w_layer_norm_var_squared(x, gamma, beta, eps=1e-5):
    variance, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    return gamma * (x - mean) / torch.sqrt(variance ** 2 + eps) + beta


def w_residual_swapped(x, sublayer, norm, norm_first=False):
    if norm_first:
        return F.layer_norm(x + sublayer(x), x.shape[-1:], norm["gamma"], norm["beta"])
    return x + sublayer(F.layer_norm(x, x.shape[-1:], norm["gamma"], norm["beta"]))


def w_encoder_layer_one_norm(x, params, num_heads, mask=None):
    h = _ln(x + mha_loop(x, x, x, params["self_attn"], num_heads, mask)[0], params["norm1"])
    return _ln(h + _ffn(h, params["ffn"]), params["norm1"])


def w_encoder_from_x(x, layers, num_heads, mask=None):
    out = x
    for p in layers:
        out = encoder_layer_scratch(x, p, num_heads, mask)
    return out


def w_decoder_cross_from_decoder(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    h = _ln(x + mha_loop(x, x, x, params["self_attn"], num_heads, self_mask)[0], params["norm1"])
    h = _ln(h + mha_einsum(h, h, h, params["cross_attn"], num_heads, memory_mask)[0], params["norm2"])
    return _ln(h + _ffn(h, params["ffn"]), params["norm3"])


def w_decoder_no_causal(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    return decoder_layer_scratch(x, memory, params, num_heads, None, memory_mask)


def w_adam_reinit_step(params, state, lr, betas=(0.9, 0.999), eps=1e-8):
    m, v, t = tuple_adam_init(params)  # fresh state every step
    return tuple_adam_step(params, (m, v, t), lr, betas, eps)


def w_adam_t_in_loop(params, state, lr, betas=(0.9, 0.999), eps=1e-8):
    beta1, beta2 = betas
    with torch.no_grad():
        for p in params:
            if p.grad is None:
                continue
            state.t += 1
            m, v = state.moments.setdefault(id(p), (torch.zeros_like(p), torch.zeros_like(p)))
            m.mul_(beta1).add_((1 - beta1) * p.grad)
            v.mul_(beta2).add_((1 - beta2) * p.grad ** 2)
            p.sub_(lr * (m / (1 - beta1 ** state.t)) / ((v / (1 - beta2 ** state.t)).sqrt() + eps))


def w_adam_no_none_check(params, state, lr, betas=(0.9, 0.999), eps=1e-8):
    state.t += 1
    beta1, beta2 = betas
    with torch.no_grad():
        for p in params:
            m, v = state.moments.setdefault(id(p), (torch.zeros_like(p), torch.zeros_like(p)))
            m.mul_(beta1).add_((1 - beta1) * p.grad)  # p.grad is None for an unused parameter
            v.mul_(beta2).add_((1 - beta2) * p.grad.pow(2))
            p.sub_(lr * (m / (1 - beta1 ** state.t)) / ((v / (1 - beta2 ** state.t)).sqrt() + eps))


def w_adam_init_aliased(params):
    m = [torch.zeros_like(p) for p in params]
    return {"m": m, "v": m, "t": 0}


def w_adam_dict_step(params, state, lr, betas=(0.9, 0.999), eps=1e-8):
    state["t"] += 1
    b1, b2 = betas
    t = state["t"]
    with torch.no_grad():
        for i, p in enumerate(params):
            if p.grad is None:
                continue
            state["m"][i].mul_(b1).add_(p.grad, alpha=1 - b1)
            state["v"][i].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.addcdiv_(state["m"][i] / (1 - b1 ** t), (state["v"][i] / (1 - b2 ** t)).sqrt() + eps,
                       value=-lr)


def w_adam_rebinds(params, state, lr, betas=(0.9, 0.999), eps=1e-8):
    state["t"] += 1
    b1, b2 = betas
    t = state["t"]
    with torch.no_grad():
        for i, p in enumerate(params):
            if p.grad is None:
                continue
            state["m"][i] = b1 * state["m"][i] + (1 - b1) * p.grad
            state["v"][i] = b2 * state["v"][i] + (1 - b2) * p.grad ** 2
            p = p - lr * (state["m"][i] / (1 - b1 ** t)) / ((state["v"][i] / (1 - b2 ** t)).sqrt() + eps)


def w_adam_no_no_grad(params, state, lr, betas=(0.9, 0.999), eps=1e-8):
    state["t"] += 1
    b1, b2 = betas
    t = state["t"]
    for i, p in enumerate(params):
        if p.grad is None:
            continue
        state["m"][i] = b1 * state["m"][i] + (1 - b1) * p.grad
        state["v"][i] = b2 * state["v"][i] + (1 - b2) * p.grad ** 2
        p -= lr * (state["m"][i] / (1 - b1 ** t)) / ((state["v"][i] / (1 - b2 ** t)).sqrt() + eps)


def w_sgd_rebinds(params, lr):
    for p in params:
        if p.grad is not None:
            p = p - lr * p.grad


def w_sgd_ascent(params, lr):
    for p in params:
        if p.grad is not None:
            p.data += lr * p.grad


def w_shift_copy(tgt):
    decoder_input = tgt.clone()
    return decoder_input, tgt


def w_shift_batch(tgt):
    return tgt.narrow(0, 0, len(tgt) - 1), tgt.narrow(0, 1, len(tgt) - 1)


def w_forward_training(params, src, tgt_in, config, training=False):
    return forward(params, src, tgt_in, config, training=True)


def _adam_init_dict(params):
    return {"t": 0, "m": [torch.zeros_like(p) for p in params], "v": [torch.zeros_like(p) for p in params]}


WRONG = [
    ("linear", w_linear, "x @ W instead of x @ W.T"),
    ("split_heads", w_split, "reshaped straight to (B, H, L, d_k)"),
    ("merge_heads", w_merge_view, "merged without transposing back (heads interleaved)"),
    ("merge_heads", w_merge_transpose_view, ".view on a transposed tensor"),
    ("multi_head_attention", w_mha_mask_dropped, "mask not passed down (mask=None inside)"),
    ("multi_head_attention", w_mha_one_projection, "one projection shared by Q, K and V"),
    ("feed_forward", w_ffn, "no activation between the two layers"),
    ("dropout", w_dropout_by_p, "scaled by the drop probability p instead of the keep probability"),
    ("dropout", w_dropout_always, "dropout active when training=False"),
    ("dropout", w_dropout_no_scale, "survivors not rescaled"),
    ("layer_norm", w_layer_norm_unbiased, "unbiased variance"),
    ("layer_norm", w_layer_norm_std, "x.std() + eps, as in The Annotated Transformer"),
    ("layer_norm", w_layer_norm_var_squared, "variance squared"),
    ("residual_sublayer", w_residual_swapped, "Pre-LN and Post-LN swapped"),
    ("encoder_layer", w_encoder_layer_one_norm, "one LayerNorm's parameters used for both sublayers"),
    ("encoder", w_encoder_from_x, "every layer fed the original x"),
    ("decoder_layer", w_decoder_cross_from_decoder, "cross-attention keys and values taken from the decoder"),
    ("decoder_layer", w_decoder_no_causal, "self-attention without the causal self_mask"),
    ("adam", (tuple_adam_init, w_adam_reinit_step), "state re-initialised every step"),
    ("adam", (class_adam_init, w_adam_t_in_loop), "t incremented once per parameter"),
    ("adam", (class_adam_init, w_adam_no_none_check), "crash on a parameter whose grad is None"),
    ("adam", (w_adam_init_aliased, w_adam_dict_step), "v = m: both names for the same tensors"),
    ("adam", (_adam_init_dict, w_adam_rebinds), "update not in place (p = p - ... rebinds a name)"),
    ("adam", (_adam_init_dict, w_adam_no_no_grad), "update not under torch.no_grad()"),
    # torch.optim.Adam counts t per parameter: it differs once a gradient is missing mid-run
    ("adam", (torch_adam_init, torch_adam_step),
     "t counted per parameter, only on its steps with a gradient (torch.optim.Adam's way)"),
    ("sgd_step", w_sgd_rebinds, "update not in place (p = p - ... rebinds a name)"),
    ("sgd_step", w_sgd_ascent, "update added instead of subtracted"),
    ("shift_right", w_shift_copy, "not shifted: the decoder reads the answer it must predict"),
    ("shift_right", w_shift_batch, "sliced the batch axis instead of the length axis"),
    ("forward", w_forward_training, "dropout left on at evaluation"),
]


# ---- the tests --------------------------------------------------------------------------------

def test_every_exercise_of_the_second_half_is_registered():
    assert set(EXERCISES) <= set(REGISTRY)
    assert sum(len(REGISTRY[name].mistakes) for name in EXERCISES) >= 22
    assert set(CORRECT) == set(EXERCISES)
    assert {name for name, _, _ in WRONG} == set(EXERCISES)


@pytest.mark.parametrize("name", EXERCISES)
def test_the_reference_passes_its_own_check(name):
    result = check(name, REGISTRY[name].reference)
    assert result.status == "passed", str(result)
    assert result


@pytest.mark.parametrize("name, index", [(n, i) for n in EXERCISES for i in range(len(CORRECT[n]))])
def test_other_correct_implementations_pass(name, index):
    result = check(name, CORRECT[name][index])
    assert result.status == "passed", str(result)


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_right_answers_calling_pytorchs_own_version_fail_and_say_so(name):
    result = check(name, BUILT_IN[name])
    assert result.status == "failed" and "PyTorch's own version" in result.message, str(result)


@pytest.mark.parametrize("name, index", [(n, i) for n in EXERCISES
                                         for i, m in enumerate(REGISTRY[n].mistakes)])
def test_every_catalogued_mistake_is_caught_and_named(name, index):
    mistake = REGISTRY[name].mistakes[index]
    assert mistake.hint and len(mistake.hint.splitlines()) == 1
    for variant in mistake.variants:
        result = check(name, variant)
        assert result.status == "mistake", str(result)
        assert result.mistake == mistake.name, str(result)
        assert mistake.hint in result.details
        assert not result


@pytest.mark.parametrize("name, fn, mistake", WRONG, ids=[f"{n}-{m}" for n, _, m in WRONG])
def test_learner_written_wrong_answers_are_named(name, fn, mistake):
    result = check(name, fn)
    assert result.mistake == mistake, str(result)
    assert result.status == "mistake"


# ---- diagnosing broken answers ----------------------------------------------------------------

def _map_tensors(fn, value):
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_map_tensors(fn, v) for v in value)
    return value


def raises_midway(*args, **kwargs):
    size = args[0].shape[0] if isinstance(args[0], torch.Tensor) else len(args[0])
    return args[0][size + 7]


def returns_none(*args, **kwargs):
    result = args[0]
    result = None
    return result


def _wrong_shape(name):
    reference = REGISTRY[name].reference

    def wrong_shape(*args, **kwargs):
        return _map_tensors(lambda t: t[..., :-1], reference(*args, **kwargs))
    return wrong_shape


def _nan(name):
    reference = REGISTRY[name].reference

    def with_nan(*args, **kwargs):
        return _map_tensors(lambda t: t * float("nan") if t.is_floating_point() else t,
                            reference(*args, **kwargs))
    return with_nan


def _optimizer(name, step):
    """An adam pair or an sgd_step built around `step(params)`."""
    if name == "adam":
        return (_adam_init_dict, lambda params, state, lr, betas=(0.9, 0.999): step(params))
    return lambda params, lr: step(params)


def _optimizer_raises(params):
    raise ValueError("lr must be positive")


def _optimizer_shrinks(params):
    for p in params:
        p.data = p.data[..., :-1]


def _optimizer_nan(params):
    with torch.no_grad():
        for p in params:
            p.fill_(float("nan"))


def _broken(name):
    """(kind, function) pairs of broken answers to `name`."""
    if name in ("adam", "sgd_step"):
        return [("raises", _optimizer(name, _optimizer_raises)),
                ("wrong shape", _optimizer(name, _optimizer_shrinks)),
                ("NaN", _optimizer(name, _optimizer_nan))]
    broken = [("raises", raises_midway), ("None", returns_none), ("wrong shape", _wrong_shape(name))]
    if name != "shift_right":  # integer ids have no NaN
        broken.append(("NaN", _nan(name)))
    return broken


@pytest.mark.parametrize("name, kind", [(n, k) for n in EXERCISES for k, _ in _broken(n)])
def test_broken_answers_are_diagnosed_without_raising(name, kind):
    fn = dict(_broken(name))[kind]
    result = check(name, fn)
    assert result.status in ("failed", "mistake"), str(result)
    assert not result
    text = str(result)
    assert "checker itself failed" not in text, text
    if kind == "raises" and result.status == "failed":
        assert "raise" in text, text
    if kind == "None" and name != "dropout" and result.status == "failed":
        assert "None" in text, text
    result._repr_html_()  # the notebook's view renders too


def test_adam_init_returning_none_is_diagnosed():
    def init_forgets_return(params):
        state = _adam_init_dict(params)  # noqa: F841

    result = check("adam", (init_forgets_return, class_adam_step))
    assert result.status == "failed" and "return" in result.details, str(result)


def test_adam_wants_a_pair_of_functions():
    result = check("adam", class_adam_step)
    assert result.status == "failed" and "pair" in result.details, str(result)


def _stub(name):
    if name == "adam":
        def init_stub(parameters):
            """parameters -> state"""
            ...

        def step_stub(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
            """one Adam step, in place"""
            ...
        return (init_stub, step_stub)

    def stub(*args, **kwargs):
        """the learner's function, not written yet"""
        ...  # your code here
    return stub


@pytest.mark.parametrize("name", EXERCISES)
def test_a_stub_is_not_attempted(name):
    result = check(name, _stub(name))
    assert result.status == "not attempted", str(result)


def test_adam_with_only_the_step_still_a_stub_is_not_attempted():
    def step_stub(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
        raise NotImplementedError

    result = check("adam", (_adam_init_dict, step_stub))
    assert result.status == "not attempted", str(result)


def test_adam_solution_shows_both_functions():
    source = str(solution("adam"))
    assert "def adam_init" in source and "def adam_step" in source


def test_dropout_check_judges_behaviour_not_random_numbers():
    """The same correct dropout passes again and again, whatever the RNG draws."""
    for _ in range(3):
        assert check("dropout", dropout_where)
