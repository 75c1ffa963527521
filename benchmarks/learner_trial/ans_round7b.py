"""Round 7b of the blind learner trial: notebooks 08, 09, 10, b1 and b2.

Each answer is registered with @A(exercise, 'R' or 'W', label); R = right, W = a plausible
learner mistake. Run: env -u PYTHONDONTWRITEBYTECODE ../../.venv/bin/python run.py /tmp/r7b.json ans_round7b
"""
import math
import torch
import torch.nn.functional as F
from harness import *
from tfmlib import (multi_head_attention, feed_forward, layer_norm, encoder_layer, adam_step,
                    causal_mask, embed, linear, split_heads, merge_heads,
                    scaled_dot_product_attention, cached_self_attention, decoder_block, lm_forward)
from tfmlib.training import encode_source, decode_target
import tfmlib


def _ln(x, n, eps=1e-5):
    return layer_norm(x, n["gamma"], n["beta"], eps)


def _hand_ln(x, n, eps=1e-5):   # LayerNorm written out: biased variance, eps inside the root
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) * torch.rsqrt(var + eps) * n["gamma"] + n["beta"]


def _mha(q, k, v, p, h, m):
    return multi_head_attention(q, k, v, p, h, m)[0]

# ======================= 08 encoder_layer =======================
@A("encoder_layer", "R", "plain Post-LN")
def enc_r1(x, params, num_heads, mask=None):
    x = _ln(x + _mha(x, x, x, params["self_attn"], num_heads, mask), params["norm1"])
    return _ln(x + feed_forward(x, params["ffn"]), params["norm2"])

@A("encoder_layer", "R", "hand LayerNorm, sublayers in a loop")
def enc_r2(x, params, num_heads, mask=None):
    subs = [(lambda h: _mha(h, h, h, params["self_attn"], num_heads, mask), "norm1"),
            (lambda h: feed_forward(h, params["ffn"]), "norm2")]
    for f, n in subs:
        x = _hand_ln(x + f(x), params[n])
    return x

@A("encoder_layer", "W", "Pre-LN instead of Post-LN")
def enc_w1(x, params, num_heads, mask=None):
    h = _ln(x, params["norm1"]); x = x + _mha(h, h, h, params["self_attn"], num_heads, mask)
    return x + feed_forward(_ln(x, params["norm2"]), params["ffn"])

@A("encoder_layer", "W", "mask dropped (mask=None to attention)")
def enc_w2(x, params, num_heads, mask=None):
    return enc_r1(x, params, num_heads, None)

@A("encoder_layer", "W", "norm1 used for both sublayers")
def enc_w3(x, params, num_heads, mask=None):
    x = _ln(x + _mha(x, x, x, params["self_attn"], num_heads, mask), params["norm1"])
    return _ln(x + feed_forward(x, params["ffn"]), params["norm1"])

@A("encoder_layer", "W", "FFN residual adds the layer's input x, not the running h")
def enc_w4(x, params, num_heads, mask=None):
    h = _ln(x + _mha(x, x, x, params["self_attn"], num_heads, mask), params["norm1"])
    return _ln(x + feed_forward(h, params["ffn"]), params["norm2"])

@A("encoder_layer", "W", "in-place residual x += attn (changes caller's x)")
def enc_w5(x, params, num_heads, mask=None):
    a = _mha(x, x, x, params["self_attn"], num_heads, mask)
    with torch.no_grad():
        x += a
    x = _ln(x, params["norm1"])
    return _ln(x + feed_forward(x, params["ffn"]), params["norm2"])

@A("encoder_layer", "W", "only the first row's padding mask used for the batch")
def enc_w6(x, params, num_heads, mask=None):
    return enc_r1(x, params, num_heads, None if mask is None else mask[:1])

@A("encoder_layer", "W", "unbiased variance in hand LayerNorm")
def enc_w7(x, params, num_heads, mask=None):
    def ln(t, n):
        return (t - t.mean(-1, keepdim=True)) / torch.sqrt(t.var(-1, keepdim=True) + 1e-5) * n["gamma"] + n["beta"]
    x = ln(x + _mha(x, x, x, params["self_attn"], num_heads, mask), params["norm1"])
    return ln(x + feed_forward(x, params["ffn"]), params["norm2"])

@A("encoder_layer", "W", "calls tfmlib.encoder_layer (forbidden)")
def enc_w8(x, params, num_heads, mask=None):
    return encoder_layer(x, params, num_heads, mask)

generics("encoder_layer", enc_r1, ["f32", "idcache", "buffer"])

# ======================= 08 encoder =======================
@A("encoder", "R", "loop over encoder_layer")
def encs_r1(x, layers, num_heads, mask=None):
    h = x
    for p in layers:
        h = encoder_layer(h, p, num_heads, mask)
    return h

@A("encoder", "R", "functools.reduce with my own layer")
def encs_r2(x, layers, num_heads, mask=None):
    import functools
    return functools.reduce(lambda h, p: enc_r2(h, p, num_heads, mask), layers, x)

@A("encoder", "W", "every layer reads the original x")
def encs_w1(x, layers, num_heads, mask=None):
    h = x
    for p in layers:
        h = encoder_layer(x, p, num_heads, mask)
    return h

@A("encoder", "W", "layers applied in reverse order")
def encs_w2(x, layers, num_heads, mask=None):
    return encs_r1(x, layers[::-1], num_heads, mask)

@A("encoder", "W", "mask only for the first layer")
def encs_w3(x, layers, num_heads, mask=None):
    h = x
    for i, p in enumerate(layers):
        h = encoder_layer(h, p, num_heads, mask if i == 0 else None)
    return h

@A("encoder", "W", "layers.reverse() in place, then iterate reversed (caller's list flips)")
def encs_w4(x, layers, num_heads, mask=None):
    layers.reverse()
    h = x
    for p in reversed(layers):
        h = encoder_layer(h, p, num_heads, mask)
    return h

@A("encoder", "W", "extra LayerNorm with the last layer's norm2 at the end")
def encs_w5(x, layers, num_heads, mask=None):
    h = encs_r1(x, layers, num_heads, mask)
    return _ln(h, layers[-1]["norm2"])

@A("encoder", "W", "skips the last layer (range(len-1))")
def encs_w6(x, layers, num_heads, mask=None):
    h = x
    for i in range(max(1, len(layers) - 1)):
        h = encoder_layer(h, layers[i], num_heads, mask)
    return h

generics("encoder", encs_r1, ["shapecache", "counter"])

# ======================= 08 decoder_layer =======================
@A("decoder_layer", "R", "plain Post-LN")
def dec_r1(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    x = _ln(x + _mha(x, x, x, params["self_attn"], num_heads, self_mask), params["norm1"])
    x = _ln(x + _mha(x, memory, memory, params["cross_attn"], num_heads, memory_mask), params["norm2"])
    return _ln(x + feed_forward(x, params["ffn"]), params["norm3"])

@A("decoder_layer", "R", "hand LN, table of (sublayer, norm)")
def dec_r2(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    steps = [(lambda h: _mha(h, h, h, params["self_attn"], num_heads, self_mask), "norm1"),
             (lambda h: _mha(h, memory, memory, params["cross_attn"], num_heads, memory_mask), "norm2"),
             (lambda h: feed_forward(h, params["ffn"]), "norm3")]
    for f, n in steps:
        x = _hand_ln(f(x) + x, params[n])
    return x

@A("decoder_layer", "W", "self_mask and memory_mask swapped")
def dec_w1(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    return dec_r1(x, memory, params, num_heads, memory_mask, self_mask)

@A("decoder_layer", "W", "cross-attention uses self_attn weights")
def dec_w2(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    return dec_r1(x, memory, {**params, "cross_attn": params["self_attn"]}, num_heads, self_mask, memory_mask)

@A("decoder_layer", "W", "norm2 and norm3 swapped")
def dec_w3(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    return dec_r1(x, memory, {**params, "norm2": params["norm3"], "norm3": params["norm2"]},
                  num_heads, self_mask, memory_mask)

@A("decoder_layer", "W", "cross-attention queries from the layer input, not after self-attn")
def dec_w4(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    h = _ln(x + _mha(x, x, x, params["self_attn"], num_heads, self_mask), params["norm1"])
    h = _ln(h + _mha(x, memory, memory, params["cross_attn"], num_heads, memory_mask), params["norm2"])
    return _ln(h + feed_forward(h, params["ffn"]), params["norm3"])

@A("decoder_layer", "W", "memory_mask ignored when self_mask given (if/else)")
def dec_w5(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    return dec_r1(x, memory, params, num_heads, self_mask, None if self_mask is not None else memory_mask)

@A("decoder_layer", "W", "value = x in cross-attention (keys from memory)")
def dec_w6(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    x = _ln(x + _mha(x, x, x, params["self_attn"], num_heads, self_mask), params["norm1"])
    v = memory if memory.size(1) != x.size(1) else x
    x = _ln(x + _mha(x, memory, v, params["cross_attn"], num_heads, memory_mask), params["norm2"])
    return _ln(x + feed_forward(x, params["ffn"]), params["norm3"])

@A("decoder_layer", "W", "Pre-LN")
def dec_w7(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    h = _ln(x, params["norm1"]); x = x + _mha(h, h, h, params["self_attn"], num_heads, self_mask)
    h = _ln(x, params["norm2"]); x = x + _mha(h, memory, memory, params["cross_attn"], num_heads, memory_mask)
    return x + feed_forward(_ln(x, params["norm3"]), params["ffn"])

generics("decoder_layer", dec_r1, ["f64", "mutate"])

# ======================= 09 adam =======================
def adam_init_r(parameters):
    ps = list(parameters)
    return {"t": 0, "m": [torch.zeros_like(p) for p in ps], "v": [torch.zeros_like(p) for p in ps]}

def adam_step_r1(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas
    state["t"] += 1
    t = state["t"]
    with torch.no_grad():
        for p, m, v in zip(parameters, state["m"], state["v"]):
            if p.grad is None:
                continue
            m.mul_(b1).add_((1 - b1) * p.grad)
            v.mul_(b2).add_((1 - b2) * p.grad * p.grad)
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))

def adam_step_r2(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    # torch.optim.Adam's arrangement: step size lr / bc1, denominator sqrt(v) / sqrt(bc2) + eps
    b1, b2 = betas
    state["t"] = state["t"] + 1
    bc1, bc2 = 1 - b1 ** state["t"], 1 - b2 ** state["t"]
    for i, p in enumerate(parameters):
        g = p.grad
        if g is None:
            continue
        with torch.no_grad():
            state["m"][i].lerp_(g, 1 - b1)
            state["v"][i].mul_(b2).addcmul_(g, g.conj(), value=1 - b2)
            denom = state["v"][i].sqrt() / math.sqrt(bc2) + eps
            p.addcdiv_(state["m"][i], denom, value=-lr / bc1)

A("adam", "R", "loop, explicit bias correction")((adam_init_r, adam_step_r1))
A("adam", "R", "torch.optim-style lerp/addcdiv, step size folded")((adam_init_r, adam_step_r2))

def adam_w_eps_in(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas; state["t"] += 1; t = state["t"]
    with torch.no_grad():
        for p, m, v in zip(parameters, state["m"], state["v"]):
            if p.grad is None: continue
            m.mul_(b1).add_((1 - b1) * p.grad); v.mul_(b2).add_((1 - b2) * p.grad ** 2)
            p.sub_(lr * (m / (1 - b1 ** t)) / (v / (1 - b2 ** t) + eps).sqrt())
A("adam", "W", "eps inside the sqrt")((adam_init_r, adam_w_eps_in))

def adam_w_tperparam(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas
    with torch.no_grad():
        for p, m, v in zip(parameters, state["m"], state["v"]):
            if p.grad is None: continue
            state["t"] += 1; t = state["t"]
            m.mul_(b1).add_((1 - b1) * p.grad); v.mul_(b2).add_((1 - b2) * p.grad ** 2)
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))
A("adam", "W", "t counted per parameter")((adam_init_r, adam_w_tperparam))

def adam_init_f32(parameters):
    ps = list(parameters)
    return {"t": 0, "m": [torch.zeros(p.shape) for p in ps], "v": [torch.zeros(p.shape) for p in ps]}
A("adam", "W", "state in float32 whatever the parameter dtype")((adam_init_f32, adam_step_r1))

def adam_init_shape(parameters):
    ps = list(parameters); bank = {}
    m = [bank.setdefault(("m", tuple(p.shape), p.dtype), torch.zeros_like(p)) for p in ps]
    v = [bank.setdefault(("v", tuple(p.shape), p.dtype), torch.zeros_like(p)) for p in ps]
    return {"t": 0, "m": m, "v": v}
A("adam", "W", "m/v shared between parameters of one shape")((adam_init_shape, adam_step_r1))

def adam_w_b1both(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas; state["t"] += 1; t = state["t"]
    with torch.no_grad():
        for p, m, v in zip(parameters, state["m"], state["v"]):
            if p.grad is None: continue
            m.mul_(b1).add_((1 - b1) * p.grad); v.mul_(b2).add_((1 - b2) * p.grad ** 2)
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b1 ** t)).sqrt() + eps))
A("adam", "W", "beta1 in both bias corrections")((adam_init_r, adam_w_b1both))

def adam_w_absg(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas; state["t"] += 1; t = state["t"]
    with torch.no_grad():
        for p, m, v in zip(parameters, state["m"], state["v"]):
            if p.grad is None: continue
            m.mul_(b1).add_((1 - b1) * p.grad); v.mul_(b2).add_((1 - b2) * p.grad.abs())
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)) + eps))
A("adam", "W", "v of |g| and no sqrt (AdaMax-like confusion)")((adam_init_r, adam_w_absg))

def adam_w_gradfloat(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas; state["t"] += 1; t = state["t"]
    with torch.no_grad():
        for p, m, v in zip(parameters, state["m"], state["v"]):
            if p.grad is None: continue
            g = p.grad.float()   # "to be safe"
            m.mul_(b1).add_((1 - b1) * g); v.mul_(b2).add_((1 - b2) * g * g)
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))
A("adam", "W", "gradient cast to float32 (1e40 overflows)")((adam_init_r, adam_w_gradfloat))

# ======================= 09 sgd_step =======================
@A("sgd_step", "R", "p.sub_ under no_grad")
def sgd_r1(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.sub_(lr * p.grad)

@A("sgd_step", "R", "add_ with alpha, decorator no_grad")
@torch.no_grad()
def sgd_r2(parameters, lr):
    for p in [q for q in parameters if q.grad is not None]:
        p.add_(p.grad, alpha=-lr)

@A("sgd_step", "R", "copy_ of p - lr*g")
def sgd_r3(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.copy_(p - lr * p.grad)

@A("sgd_step", "W", "rebinds p (no in-place)")
def sgd_w1(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p = p - lr * p.grad

@A("sgd_step", "W", "nan_to_num on the gradient")
def sgd_w2(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.sub_(lr * torch.nan_to_num(p.grad))

@A("sgd_step", "W", "lr clamped to at most 1")
def sgd_w3(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.sub_(min(lr, 1.0) * p.grad)

@A("sgd_step", "W", "update computed in float32")
def sgd_w4(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.sub_((lr * p.grad.float()).to(p.dtype))

@A("sgd_step", "W", "no no_grad")
def sgd_w5(parameters, lr):
    for p in parameters:
        if p.grad is not None:
            p.sub_(lr * p.grad)

@A("sgd_step", "W", "skips a gradient holding nan/inf (isfinite guard)")
def sgd_w6(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None and torch.isfinite(p.grad).all():
                p.sub_(lr * p.grad)

@A("sgd_step", "W", "p.data = p - lr*g (new storage)")
def sgd_w7(parameters, lr):
    for p in parameters:
        if p.grad is not None:
            p.data = p.data - lr * p.grad

# ======================= 09 adamw_step =======================
@A("adamw_step", "R", "decay loop, then library adam_step")
def adamw_r1(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.mul_(1 - lr * weight_decay)
    adam_step(parameters, state, lr, betas, eps)

@A("adamw_step", "R", "decay as sub_ of lr*wd*p, then my own Adam")
def adamw_r2(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.sub_(p * (lr * weight_decay))
    adam_step_r1(parameters, state, lr, betas, eps)

@A("adamw_step", "W", "decay after the Adam step")
def adamw_w1(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    adam_step(parameters, state, lr, betas, eps)
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.mul_(1 - lr * weight_decay)

@A("adamw_step", "W", "decay not scaled by lr")
def adamw_w2(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.mul_(1 - weight_decay)
    adam_step(parameters, state, lr, betas, eps)

@A("adamw_step", "W", "Adam + L2 (wd*p added to grad)")
def adamw_w3(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.grad.add_(p, alpha=weight_decay)
    adam_step(parameters, state, lr, betas, eps)

@A("adamw_step", "W", "decays parameters without gradient too")
def adamw_w4(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in parameters:
            p.mul_(1 - lr * weight_decay)
    adam_step(parameters, state, lr, betas, eps)

@A("adamw_step", "W", "weight_decay passed positionally as eps")
def adamw_w5(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.mul_(1 - lr * weight_decay)
    adam_step(parameters, state, lr, betas, weight_decay)

@A("adamw_step", "W", "default weight_decay 1e-4 (not 1e-2)")
def adamw_w6(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-4):
    adamw_r1(parameters, state, lr, betas, eps, weight_decay)

@A("adamw_step", "W", "decay compounded with t: (1-lr*wd)**t")
def adamw_w7(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.mul_((1 - lr * weight_decay) ** (state["t"] + 1))
    adam_step(parameters, state, lr, betas, eps)

# ======================= 09 clip_grad_norm =======================
def _grads(parameters):
    ps = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    return [p.grad for p in ps if p.grad is not None]

@A("clip_grad_norm", "R", "sqrt of sum of squares in float32 norms")
def clip_r1(parameters, max_norm):
    gs = _grads(parameters)
    if not gs:
        return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g, dtype=torch.promote_types(g.dtype, torch.float32)) for g in gs]))
    total = total.to(gs[0].dtype)
    scale = min(1.0, float(max_norm / (total.double() + 1e-6)))
    for g in gs:
        g.mul_(scale)
    return total

@A("clip_grad_norm", "R", "norms stacked, like the library, clamp")
def clip_r2(parameters, max_norm):
    gs = _grads(parameters)
    if len(gs) == 0:
        return torch.tensor(0.0)
    total = torch.stack([g.norm() for g in gs]).norm()
    s = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in gs:
        g.mul_(s)
    return total

@A("clip_grad_norm", "W", "no 1e-6")
def clip_w1(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = torch.stack([g.norm() for g in gs]).norm()
    s = torch.clamp(max_norm / total, max=1.0)
    for g in gs: g.mul_(s)
    return total

@A("clip_grad_norm", "W", "scales up too (no min with 1)")
def clip_w2(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = torch.stack([g.norm() for g in gs]).norm()
    for g in gs: g.mul_(max_norm / (total + 1e-6))
    return total

@A("clip_grad_norm", "W", "each gradient clipped by its own norm")
def clip_w3(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = torch.stack([g.norm() for g in gs]).norm()
    for g in gs: g.mul_(torch.clamp(max_norm / (g.norm() + 1e-6), max=1.0))
    return total

@A("clip_grad_norm", "W", "returns the norm after clipping")
def clip_w4(parameters, max_norm):
    clip_r2(parameters, max_norm)
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    return torch.stack([g.norm() for g in gs]).norm()

@A("clip_grad_norm", "W", "squares summed in the gradient dtype (float16 overflow)")
def clip_w5(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = sum((g * g).sum() for g in gs).sqrt()
    s = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in gs: g.mul_(s)
    return total

@A("clip_grad_norm", "W", "single tensor iterated as rows")
def clip_w6(parameters, max_norm):
    ps = list(parameters)
    gs = [p.grad for p in ps if p.grad is not None]
    if not gs: return torch.tensor(0.0)
    total = torch.stack([g.norm() for g in gs]).norm()
    s = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in gs: g.mul_(s)
    return total

_norm_out = torch.zeros(())
@A("clip_grad_norm", "W", "returns a module-level 0-dim buffer, overwritten next call")
def clip_w7(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = torch.stack([g.norm() for g in gs]).norm()
    s = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in gs: g.mul_(s)
    global _norm_out
    if _norm_out.dtype != total.dtype: _norm_out = torch.zeros((), dtype=total.dtype)
    _norm_out.copy_(total)
    return _norm_out

@A("clip_grad_norm", "W", "returns a Python float")
def clip_w8(parameters, max_norm):
    return float(clip_r2(parameters, max_norm))

# ======================= 09 warmup_inverse_sqrt_lr =======================
@A("warmup_inverse_sqrt_lr", "R", "formula with min")
def isq_r1(step, d_model, warmup_steps, factor=1.0):
    if step == 0:
        return 0.0
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)

@A("warmup_inverse_sqrt_lr", "R", "two branches with math.sqrt")
def isq_r2(step, d_model, warmup_steps, factor=1.0):
    if step <= 0:
        return 0.0
    if step < warmup_steps:
        return factor * step / (math.sqrt(d_model) * warmup_steps * math.sqrt(warmup_steps))
    return factor / math.sqrt(d_model * step)

@A("warmup_inverse_sqrt_lr", "W", "max instead of min")
def isq_w1(step, d_model, warmup_steps, factor=1.0):
    if step == 0: return 0.0
    return factor * d_model ** -0.5 * max(step ** -0.5, step * warmup_steps ** -1.5)

@A("warmup_inverse_sqrt_lr", "W", "step 0 not special-cased")
def isq_w2(step, d_model, warmup_steps, factor=1.0):
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)

@A("warmup_inverse_sqrt_lr", "W", "warmup ** -0.5")
def isq_w3(step, d_model, warmup_steps, factor=1.0):
    if step == 0: return 0.0
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -0.5)

@A("warmup_inverse_sqrt_lr", "W", "factor ignored")
def isq_w4(step, d_model, warmup_steps, factor=1.0):
    return isq_r1(step, d_model, warmup_steps)

@A("warmup_inverse_sqrt_lr", "W", "steps counted from 0 (step + 1)")
def isq_w5(step, d_model, warmup_steps, factor=1.0):
    if step == 0: return 0.0
    return isq_r1(step + 1, d_model, warmup_steps, factor)

@A("warmup_inverse_sqrt_lr", "W", "d_model ** 0.5 instead of ** -0.5")
def isq_w6(step, d_model, warmup_steps, factor=1.0):
    if step == 0: return 0.0
    return factor * d_model ** 0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)

# ======================= 09 warmup_cosine_lr =======================
@A("warmup_cosine_lr", "R", "reference-like")
def cos_r1(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    prog = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * prog)))

@A("warmup_cosine_lr", "R", "floor + (peak - floor) * cos^2 form")
def cos_r2(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    floor = final_fraction * peak_lr
    if step <= warmup_steps:
        return step * peak_lr / warmup_steps
    if step >= total_steps:
        return floor
    prog = (step - warmup_steps) / (total_steps - warmup_steps)
    return floor + (peak_lr - floor) * math.cos(math.pi * prog / 2) ** 2

@A("warmup_cosine_lr", "W", "step < warmup, divides by total - warmup (0 when equal)")
def cos_w1(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step < warmup_steps:
        return peak_lr * step / warmup_steps
    prog = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * prog)))

@A("warmup_cosine_lr", "W", "no clamp after total_steps")
def cos_w2(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    prog = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * prog)))

@A("warmup_cosine_lr", "W", "decays to 0")
def cos_w3(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    return cos_r1(step, peak_lr, warmup_steps, total_steps, 0.0)

@A("warmup_cosine_lr", "W", "warm-up step / (warmup + 1)")
def cos_w4(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / (warmup_steps + 1)
    return cos_r1(step, peak_lr, warmup_steps, total_steps, final_fraction)

@A("warmup_cosine_lr", "W", "floor = final_fraction absolute, not times peak")
def cos_w5(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    prog = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return final_fraction + (peak_lr - final_fraction) * 0.5 * (1 + math.cos(math.pi * prog))

@A("warmup_cosine_lr", "W", "progress over total_steps, not total - warmup")
def cos_w6(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    prog = min(1.0, step / total_steps)
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * prog)))

# ======================= 10 shift_right =======================
@A("shift_right", "R", "slices")
def sh_r1(tgt):
    return tgt[:, :-1], tgt[:, 1:]

@A("shift_right", "R", "narrow + clone")
def sh_r2(tgt):
    n = tgt.size(1) - 1
    return tgt.narrow(1, 0, n).clone(), tgt.narrow(1, 1, n).clone()

@A("shift_right", "W", "input and labels swapped")
def sh_w1(tgt):
    return tgt[:, 1:], tgt[:, :-1]

@A("shift_right", "W", "batch axis sliced")
def sh_w2(tgt):
    return tgt[:-1], tgt[1:]

@A("shift_right", "W", "labels padded back to Lt with 0")
def sh_w3(tgt):
    return tgt, torch.cat([tgt[:, 1:], torch.zeros_like(tgt[:, :1])], 1)

@A("shift_right", "W", "ids cast to int32")
def sh_w4(tgt):
    return tgt[:, :-1].int(), tgt[:, 1:].int()

@A("shift_right", "W", "roll instead of slicing (wraps around)")
def sh_w5(tgt):
    return tgt, torch.roll(tgt, -1, dims=1)

@A("shift_right", "W", "returns lists")
def sh_w6(tgt):
    return tgt[:, :-1].tolist(), tgt[:, 1:].tolist()

@A("shift_right", "W", "hard-codes Lt from the notebook's batch (drops by index 11)")
def sh_w7(tgt):
    return tgt[:, :min(tgt.size(1) - 1, 11)], tgt[:, 1:12]

# ======================= 10 forward =======================
@A("forward", "R", "encode_source then decode_target")
def fw_r1(params, src, tgt_in, config, training=False):
    memory, src_mask = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, src_mask, config, training)

@A("forward", "R", "keyword arguments, tuple unpacking later")
def fw_r2(params, src, tgt_in, config, training=False):
    enc = encode_source(params=params, src=src, config=config, training=training)
    return decode_target(params=params, tgt_in=tgt_in, memory=enc[0], src_mask=enc[1],
                         config=config, training=training)

@A("forward", "W", "training never passed on")
def fw_w1(params, src, tgt_in, config, training=False):
    memory, src_mask = encode_source(params, src, config)
    return decode_target(params, tgt_in, memory, src_mask, config)

@A("forward", "W", "memory detached")
def fw_w2(params, src, tgt_in, config, training=False):
    memory, src_mask = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory.detach(), src_mask, config, training)

@A("forward", "W", "encoder run twice (extra dropout draws)")
def fw_w3(params, src, tgt_in, config, training=False):
    _ = encode_source(params, src, config, training)   # "to look at the shape"
    memory, src_mask = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, src_mask, config, training)

@A("forward", "W", "source padding mask replaced by all-True")
def fw_w4(params, src, tgt_in, config, training=False):
    memory, src_mask = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, torch.ones_like(src_mask), config, training)

@A("forward", "W", "training=True always")
def fw_w5(params, src, tgt_in, config, training=False):
    return fw_r1(params, src, tgt_in, config, True)

@A("forward", "W", "calls tfmlib.training.forward (forbidden)")
def fw_w6(params, src, tgt_in, config, training=False):
    return tfmlib.training.forward(params, src, tgt_in, config, training)

@A("forward", "W", "no_grad in eval")
def fw_w7(params, src, tgt_in, config, training=False):
    if training:
        return fw_r1(params, src, tgt_in, config, training)
    with torch.no_grad():
        return fw_r1(params, src, tgt_in, config, training)

# ======================= 10 label_smoothed_cross_entropy =======================
@A("label_smoothed_cross_entropy", "R", "gather + mean log-prob, masked mean")
def ls_r1(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    lp = logits.log_softmax(-1).reshape(-1, V)
    y = labels.reshape(-1)
    keep = y != ignore_index
    nll = -lp.gather(1, torch.where(keep, y, 0).unsqueeze(1)).squeeze(1)
    smooth = -lp.mean(-1)
    loss = (1 - smoothing) * nll + smoothing * smooth
    loss = torch.where(keep, loss, torch.zeros_like(loss))
    return loss.sum() / keep.sum()

@A("label_smoothed_cross_entropy", "R", "dense smoothed target, float64 inside, cast back")
def ls_r2(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    lp = logits.double().log_softmax(-1).reshape(-1, V)
    y = labels.reshape(-1)
    keep = (y != ignore_index)
    target = torch.full_like(lp, smoothing / V)
    rows = keep.nonzero().squeeze(1)
    target[rows, y[rows]] += 1 - smoothing
    per = -(target * lp).sum(-1)
    per = per[keep]
    return (per.sum() / per.numel()).to(logits.dtype)

@A("label_smoothed_cross_entropy", "W", "smoothing / (V - 1) on the other classes")
def ls_w1(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    lp = logits.log_softmax(-1).reshape(-1, V); y = labels.reshape(-1); keep = y != ignore_index
    yy = torch.where(keep, y, 0)
    target = torch.full_like(lp, smoothing / (V - 1)).scatter(1, yy.unsqueeze(1), 1 - smoothing)
    per = -(target * lp).sum(-1)
    return per[keep].mean()

@A("label_smoothed_cross_entropy", "W", "mean over all positions, ignored ones count 0")
def ls_w2(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    lp = logits.log_softmax(-1).reshape(-1, V); y = labels.reshape(-1); keep = y != ignore_index
    nll = -lp.gather(1, torch.where(keep, y, 0).unsqueeze(1)).squeeze(1)
    loss = ((1 - smoothing) * nll + smoothing * -lp.mean(-1)) * keep
    return loss.mean()

@A("label_smoothed_cross_entropy", "W", "mean of per-row means")
def ls_w3(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    lp = logits.log_softmax(-1)
    keep = labels != ignore_index
    nll = -lp.gather(-1, torch.where(keep, labels, 0).unsqueeze(-1)).squeeze(-1)
    loss = ((1 - smoothing) * nll + smoothing * -lp.mean(-1)) * keep
    if loss.dim() < 2:
        return loss.sum() / keep.sum()
    return (loss.sum(-1) / keep.sum(-1)).mean()

@A("label_smoothed_cross_entropy", "W", "log(softmax) instead of log_softmax")
def ls_w4(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    lp = torch.log(torch.softmax(logits, -1)).reshape(-1, V); y = labels.reshape(-1); keep = y != ignore_index
    nll = -lp.gather(1, torch.where(keep, y, 0).unsqueeze(1)).squeeze(1)
    loss = (1 - smoothing) * nll + smoothing * -lp.mean(-1)
    return loss[keep].mean()

@A("label_smoothed_cross_entropy", "W", "ignore_index hard-coded to 0 (<pad>)")
def ls_w5(logits, labels, smoothing, ignore_index=-100):
    return ls_r1(logits, labels, smoothing, 0)

@A("label_smoothed_cross_entropy", "W", "F.cross_entropy (forbidden)")
def ls_w6(logits, labels, smoothing, ignore_index=-100):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                           label_smoothing=smoothing, ignore_index=ignore_index)

@A("label_smoothed_cross_entropy", "W", "sum instead of mean")
def ls_w7(logits, labels, smoothing, ignore_index=-100):
    return ls_r1(logits, labels, smoothing, ignore_index) * (labels != ignore_index).sum()

@A("label_smoothed_cross_entropy", "W", "smoothing term is -lp.sum (not mean over V)")
def ls_w8(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    lp = logits.log_softmax(-1).reshape(-1, V); y = labels.reshape(-1); keep = y != ignore_index
    nll = -lp.gather(1, torch.where(keep, y, 0).unsqueeze(1)).squeeze(1)
    loss = (1 - smoothing) * nll + smoothing * -lp.sum(-1)
    return loss[keep].mean()

generics("label_smoothed_cross_entropy", ls_r1, ["f32", "counter"])

# ======================= b1 decoder_block =======================
@A("decoder_block", "R", "Pre-LN with library pieces")
def db_r1(x, block, num_heads, mask=None):
    if mask is None:
        mask = causal_mask(x.size(1), device=x.device)
    h = _ln(x, block["norm1"])
    x = x + _mha(h, h, h, block["attention"], num_heads, mask)
    return x + feed_forward(_ln(x, block["norm2"]), block["ffn"])

@A("decoder_block", "R", "hand LN, tril mask built with ones")
def db_r2(x, block, num_heads, mask=None):
    L = x.size(1)
    m = torch.ones(L, L, dtype=torch.bool).tril() if mask is None else mask
    h = _hand_ln(x, block["norm1"])
    a = _mha(h, h, h, block["attention"], num_heads, m)
    y = x + a
    return y + feed_forward(_hand_ln(y, block["norm2"]), block["ffn"])

@A("decoder_block", "W", "Post-LN")
def db_w1(x, block, num_heads, mask=None):
    if mask is None: mask = causal_mask(x.size(1))
    x = _ln(x + _mha(x, x, x, block["attention"], num_heads, mask), block["norm1"])
    return _ln(x + feed_forward(x, block["ffn"]), block["norm2"])

@A("decoder_block", "W", "mask None stays None (not causal)")
def db_w2(x, block, num_heads, mask=None):
    h = _ln(x, block["norm1"]); x = x + _mha(h, h, h, block["attention"], num_heads, mask)
    return x + feed_forward(_ln(x, block["norm2"]), block["ffn"])

@A("decoder_block", "W", "passed mask ANDed with causal (text: used as it is)")
def db_w3(x, block, num_heads, mask=None):
    c = causal_mask(x.size(1))
    return db_r1(x, block, num_heads, c if mask is None else (mask & c))

@A("decoder_block", "W", "triu mask (future, not past)")
def db_w4(x, block, num_heads, mask=None):
    L = x.size(1)
    return db_r1(x, block, num_heads, torch.ones(L, L, dtype=torch.bool).triu() if mask is None else mask)

@A("decoder_block", "W", "FFN reads x, not LN2(x)")
def db_w5(x, block, num_heads, mask=None):
    if mask is None: mask = causal_mask(x.size(1))
    h = _ln(x, block["norm1"]); x = x + _mha(h, h, h, block["attention"], num_heads, mask)
    return x + feed_forward(x, block["ffn"])

_MASK = {}
@A("decoder_block", "W", "causal mask built once, module-level")
def db_w6(x, block, num_heads, mask=None):
    if mask is None:
        if "m" not in _MASK: _MASK["m"] = causal_mask(x.size(1))
        mask = _MASK["m"]
    return db_r1(x, block, num_heads, mask)

@A("decoder_block", "W", "attention output added to LN1(x), not x")
def db_w7(x, block, num_heads, mask=None):
    if mask is None: mask = causal_mask(x.size(1))
    h = _ln(x, block["norm1"]); x = h + _mha(h, h, h, block["attention"], num_heads, mask)
    return x + feed_forward(_ln(x, block["norm2"]), block["ffn"])

# ======================= b1 lm_forward =======================
@A("lm_forward", "R", "reference-like")
def lf_r1(params, ids, config):
    L = ids.size(1)
    x = embed(ids, params["token_embedding"]) + params["position_embedding"][:L]
    for b in params["blocks"]:
        x = decoder_block(x, b, config.num_heads)
    return linear(_ln(x, params["final_norm"]), params["token_embedding"])

@A("lm_forward", "R", "table indexing * sqrt(D), my own block, matmul with .T")
def lf_r2(params, ids, config):
    E = params["token_embedding"]
    x = E[ids] * math.sqrt(E.size(1)) + params["position_embedding"][: ids.shape[1]]
    for b in params["blocks"]:
        x = db_r1(x, b, config.num_heads)
    return _hand_ln(x, params["final_norm"]) @ E.T

@A("lm_forward", "W", "no sqrt(D) scale")
def lf_w1(params, ids, config):
    L = ids.size(1)
    x = embed(ids, params["token_embedding"], scale=False) + params["position_embedding"][:L]
    for b in params["blocks"]: x = decoder_block(x, b, config.num_heads)
    return linear(_ln(x, params["final_norm"]), params["token_embedding"])

@A("lm_forward", "W", "no final LayerNorm")
def lf_w2(params, ids, config):
    L = ids.size(1)
    x = embed(ids, params["token_embedding"]) + params["position_embedding"][:L]
    for b in params["blocks"]: x = decoder_block(x, b, config.num_heads)
    return linear(x, params["token_embedding"])

@A("lm_forward", "W", "positions offset by one")
def lf_w3(params, ids, config):
    L = ids.size(1)
    pe = params["position_embedding"]
    pos = pe[1:L + 1] if L < pe.size(0) else pe[:L]
    x = embed(ids, params["token_embedding"]) + pos
    for b in params["blocks"]: x = decoder_block(x, b, config.num_heads)
    return linear(_ln(x, params["final_norm"]), params["token_embedding"])

@A("lm_forward", "W", "scaled by sqrt(V) not sqrt(D)")
def lf_w4(params, ids, config):
    L = ids.size(1); E = params["token_embedding"]
    x = E[ids] * math.sqrt(E.size(0)) + params["position_embedding"][:L]
    for b in params["blocks"]: x = decoder_block(x, b, config.num_heads)
    return linear(_ln(x, params["final_norm"]), E)

@A("lm_forward", "W", "scale applied after adding positions")
def lf_w5(params, ids, config):
    L = ids.size(1); E = params["token_embedding"]
    x = (E[ids] + params["position_embedding"][:L]) * math.sqrt(E.size(1))
    for b in params["blocks"]: x = decoder_block(x, b, config.num_heads)
    return linear(_ln(x, params["final_norm"]), E)

@A("lm_forward", "W", "output h @ E when V == D (no transpose), else h @ E.T")
def lf_w6(params, ids, config):
    L = ids.size(1); E = params["token_embedding"]
    x = embed(ids, E) + params["position_embedding"][:L]
    for b in params["blocks"]: x = decoder_block(x, b, config.num_heads)
    h = _ln(x, params["final_norm"])
    return h @ E if E.size(0) == E.size(1) else h @ E.T

@A("lm_forward", "W", "only the first block")
def lf_w7(params, ids, config):
    L = ids.size(1)
    x = embed(ids, params["token_embedding"]) + params["position_embedding"][:L]
    x = decoder_block(x, params["blocks"][0], config.num_heads)
    return linear(_ln(x, params["final_norm"]), params["token_embedding"])

# ======================= b1 lm_loss =======================
@A("lm_loss", "R", "lm_forward + F.cross_entropy")
def ll_r1(params, ids, config):
    logits = lm_forward(params, ids[:, :-1], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))

@A("lm_loss", "R", "log_softmax + gather, mean")
def ll_r2(params, ids, config):
    logits = lf_r1(params, ids[:, :-1], config)
    lp = logits.log_softmax(-1)
    return -lp.gather(-1, ids[:, 1:].unsqueeze(-1)).mean()

@A("lm_loss", "W", "targets not shifted")
def ll_w1(params, ids, config):
    logits = lm_forward(params, ids[:, :-1], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, :-1].reshape(-1))

@A("lm_loss", "W", "full ids through lm_forward, logits[:, :-1] (crashes at max_len + 1)")
def ll_w2(params, ids, config):
    logits = lm_forward(params, ids, config)[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))

@A("lm_loss", "W", "sum instead of mean")
def ll_w3(params, ids, config):
    logits = lm_forward(params, ids[:, :-1], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1), reduction="sum")

@A("lm_loss", "W", "log_softmax over the length axis")
def ll_w4(params, ids, config):
    logits = lm_forward(params, ids[:, :-1], config)
    lp = logits.log_softmax(1)
    return -lp.gather(-1, ids[:, 1:].unsqueeze(-1)).mean()

@A("lm_loss", "W", "only the last position scored")
def ll_w5(params, ids, config):
    logits = lm_forward(params, ids[:, :-1], config)
    return F.cross_entropy(logits[:, -1], ids[:, -1])

@A("lm_loss", "W", "class axis guessed by size: transposes only if size(1) != vocab_size")
def ll_w6(params, ids, config):
    logits = lm_forward(params, ids[:, :-1], config)
    if logits.size(1) != config.vocab_size:   # (B, L, V) -> (B, V, L) for cross_entropy
        logits = logits.transpose(1, 2)
    return F.cross_entropy(logits, ids[:, 1:])

@A("lm_loss", "W", "reshape (B, L, V) -> (B, V, L) instead of transpose")
def ll_w7(params, ids, config):
    logits = lm_forward(params, ids[:, :-1], config)
    B, L, V = logits.shape
    return F.cross_entropy(logits.reshape(B, V, L), ids[:, 1:])

generics("lm_loss", ll_r1, ["f32"])

# ======================= b2 next_token_probs =======================
@A("next_token_probs", "R", "softmax(logits / T)")
def ntp_r1(logits, temperature=1.0):
    return torch.softmax(logits / temperature, dim=-1)

@A("next_token_probs", "R", "hand softmax with max shift, float64 inside, cast back")
def ntp_r2(logits, temperature=1.0):
    z = logits.double() / temperature
    z = z - z.amax(-1, keepdim=True)
    e = z.exp()
    return (e / e.sum(-1, keepdim=True)).to(logits.dtype)

@A("next_token_probs", "W", "divides the probabilities by T")
def ntp_w1(logits, temperature=1.0):
    return torch.softmax(logits, -1) / temperature

@A("next_token_probs", "W", "multiplies by T")
def ntp_w2(logits, temperature=1.0):
    return torch.softmax(logits * temperature, -1)

@A("next_token_probs", "W", "hand softmax without the max shift")
def ntp_w3(logits, temperature=1.0):
    e = (logits / temperature).exp()
    return e / e.sum(-1, keepdim=True)

@A("next_token_probs", "W", "in-place div_ of the logits")
def ntp_w4(logits, temperature=1.0):
    return torch.softmax(logits.div_(temperature), -1)

@A("next_token_probs", "W", "softmax then p ** (1/T) renormalised (underflows)")
def ntp_w5(logits, temperature=1.0):
    p = torch.softmax(logits, -1) ** (1 / temperature)
    return p / p.sum(-1, keepdim=True)

@A("next_token_probs", "W", "softmax over dim=1")
def ntp_w6(logits, temperature=1.0):
    return torch.softmax(logits / temperature, dim=1 if logits.dim() > 1 else 0)

@A("next_token_probs", "W", "default temperature 0.7")
def ntp_w7(logits, temperature=0.7):
    return torch.softmax(logits / temperature, dim=-1)

# ======================= b2 top_k_filter =======================
@A("top_k_filter", "R", "sort, k-th value, masked_fill")
def tk_r1(logits, k):
    kk = min(k, logits.size(-1))
    kth = logits.sort(-1, descending=True).values[..., kk - 1:kk]
    return logits.masked_fill(logits < kth, float("-inf"))

@A("top_k_filter", "R", "kthvalue of the negated logits, where")
def tk_r2(logits, k):
    V = logits.size(-1)
    kth = -(-logits).kthvalue(min(k, V), dim=-1, keepdim=True).values
    return torch.where(logits >= kth, logits, torch.full_like(logits, -math.inf))

@A("top_k_filter", "W", "topk indices scattered (ties dropped)")
def tk_w1(logits, k):
    k = min(k, logits.size(-1))
    idx = logits.topk(k, -1).indices
    out = torch.full_like(logits, float("-inf"))
    return out.scatter(-1, idx, logits.gather(-1, idx))

@A("top_k_filter", "W", "k > V not handled")
def tk_w2(logits, k):
    kth = logits.topk(k, -1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))

@A("top_k_filter", "W", "<= drops the k-th")
def tk_w3(logits, k):
    k = min(k, logits.size(-1))
    kth = logits.topk(k, -1).values[..., -1:]
    return logits.masked_fill(logits <= kth, float("-inf")) if k < logits.size(-1) else logits.clone()

@A("top_k_filter", "W", "-1e9 instead of -inf")
def tk_w4(logits, k):
    k = min(k, logits.size(-1))
    kth = logits.topk(k, -1).values[..., -1:]
    return logits.masked_fill(logits < kth, -1e9)

@A("top_k_filter", "W", "masked_fill_ in place on the input")
def tk_w5(logits, k):
    k = min(k, logits.size(-1))
    kth = logits.topk(k, -1).values[..., -1:]
    return logits.masked_fill_(logits < kth, float("-inf"))

@A("top_k_filter", "W", "k-th along dim 0 for 2D")
def tk_w6(logits, k):
    d = 0 if logits.dim() == 2 and logits.size(0) >= k else -1
    kk = min(k, logits.size(d))
    kth = logits.topk(kk, d).values.narrow(d, kk - 1, 1)
    return logits.masked_fill(logits < kth, float("-inf"))

@A("top_k_filter", "W", "k-th chosen among float32 probabilities (ties of distinct half logits)")
def tk_w7(logits, k):
    k = min(k, logits.size(-1))
    p = torch.softmax(logits.float(), -1)
    kth = p.topk(k, -1).values[..., -1:]
    return logits.masked_fill(p < kth, float("-inf"))

# ======================= b2 top_p_filter =======================
@A("top_p_filter", "R", "sort, cumsum - p, smallest kept logit")
def tp_r1(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = torch.softmax(s, -1)
    before = pr.cumsum(-1) - pr
    cut = s.masked_fill(~(before < p), float("inf")).amin(-1, keepdim=True)
    return logits.masked_fill(logits < cut, float("-inf"))

@A("top_p_filter", "R", "exclusive cumsum by shifting, count kept, gather the cut logit")
def tp_r2(logits, p):
    s, _ = torch.sort(logits, dim=-1, descending=True)
    pr = s.softmax(-1)
    cum = pr.cumsum(-1)
    before = torch.cat([torch.zeros_like(cum[..., :1]), cum[..., :-1]], -1)
    n_kept = (before < p).sum(-1, keepdim=True).clamp(min=1)
    cut = s.gather(-1, n_kept - 1)
    return torch.where(logits < cut, torch.full_like(logits, -math.inf), logits)

@A("top_p_filter", "W", "keep cumsum < p (drops the token that reaches p)")
def tp_w1(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = torch.softmax(s, -1)
    kept = pr.cumsum(-1) < p
    kept[..., 0] = True
    cut = s.masked_fill(~kept, float("inf")).amin(-1, keepdim=True)
    return logits.masked_fill(logits < cut, float("-inf"))

@A("top_p_filter", "W", "returns sorted order")
def tp_w2(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = torch.softmax(s, -1)
    return s.masked_fill(~(pr.cumsum(-1) - pr < p), float("-inf"))

@A("top_p_filter", "W", "no ties: scatter back the kept sorted positions only")
def tp_w3(logits, p):
    s, idx = logits.sort(-1, descending=True)
    pr = torch.softmax(s, -1)
    kept = pr.cumsum(-1) - pr < p
    s = s.masked_fill(~kept, float("-inf"))
    return torch.empty_like(logits).scatter(-1, idx, s)

@A("top_p_filter", "W", "softmax in float32 for half inputs (text: sum in logits' dtype)")
def tp_w4(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = torch.softmax(s.float(), -1)
    before = pr.cumsum(-1) - pr
    cut = s.masked_fill(~(before < p), float("inf")).amin(-1, keepdim=True)
    return logits.masked_fill(logits < cut, float("-inf"))

@A("top_p_filter", "W", "<= p keeps one past an exact reach")
def tp_w5(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = torch.softmax(s, -1)
    before = pr.cumsum(-1) - pr
    cut = s.masked_fill(~(before <= p), float("inf")).amin(-1, keepdim=True)
    return logits.masked_fill(logits < cut, float("-inf"))

@A("top_p_filter", "W", "no sort: cumsum in vocabulary order")
def tp_w6(logits, p):
    pr = torch.softmax(logits, -1)
    before = pr.cumsum(-1) - pr
    return logits.masked_fill(~(before < p), float("-inf"))

@A("top_p_filter", "W", "-1e9 fill instead of -inf")
def tp_w7(logits, p):
    out = tp_r1(logits, p)
    return out.masked_fill(torch.isinf(out) & (out < 0), -1e9)

# ======================= b2 cached_self_attention =======================
@A("cached_self_attention", "R", "reference-like with library helpers")
def ca_r1(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params["w_q"], params.get("b_q")), num_heads)
    k = split_heads(linear(x, params["w_k"], params.get("b_k")), num_heads)
    v = split_heads(linear(x, params["w_v"], params.get("b_v")), num_heads)
    if cache is not None:
        k = torch.cat([cache["key"], k], 2); v = torch.cat([cache["value"], v], 2)
    Ln, Lt = x.size(1), k.size(2)
    mask = causal_mask(Lt)[..., Lt - Ln:, :]
    ctx, _ = scaled_dot_product_attention(q, k, v, mask)
    return linear(merge_heads(ctx), params["w_o"], params.get("b_o")), {"key": k, "value": v}

@A("cached_self_attention", "R", "einsum, arange mask, hand softmax")
def ca_r2(x, params, num_heads, cache=None):
    B, Ln, D = x.shape; H = num_heads; dk = D // H
    def proj(w, b):
        y = torch.einsum("bld,ed->ble", x, params[w])
        if params.get(b) is not None: y = y + params[b]
        return y.reshape(B, Ln, H, dk).permute(0, 2, 1, 3)
    q, k, v = proj("w_q", "b_q"), proj("w_k", "b_k"), proj("w_v", "b_v")
    if cache is not None:
        k = torch.cat((cache["key"], k), dim=-2); v = torch.cat((cache["value"], v), dim=-2)
    Lt = k.size(2)
    qpos = torch.arange(Lt - Ln, Lt).unsqueeze(1); kpos = torch.arange(Lt).unsqueeze(0)
    s = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(dk)
    s = s.masked_fill(kpos > qpos, float("-inf"))
    w = (s - s.amax(-1, keepdim=True)).exp(); w = w / w.sum(-1, keepdim=True)
    ctx = torch.einsum("bhqk,bhkd->bhqd", w, v).permute(0, 2, 1, 3).reshape(B, Ln, D)
    out = ctx @ params["w_o"].T
    if params.get("b_o") is not None: out = out + params["b_o"]
    return out, {"key": k, "value": v}

@A("cached_self_attention", "W", "no mask (fine only for one new token)")
def ca_w1(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params["w_q"], params.get("b_q")), num_heads)
    k = split_heads(linear(x, params["w_k"], params.get("b_k")), num_heads)
    v = split_heads(linear(x, params["w_v"], params.get("b_v")), num_heads)
    if cache is not None:
        k = torch.cat([cache["key"], k], 2); v = torch.cat([cache["value"], v], 2)
    ctx, _ = scaled_dot_product_attention(q, k, v)
    return linear(merge_heads(ctx), params["w_o"], params.get("b_o")), {"key": k, "value": v}

@A("cached_self_attention", "W", "mask rows from the top, not the bottom")
def ca_w2(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params["w_q"], params.get("b_q")), num_heads)
    k = split_heads(linear(x, params["w_k"], params.get("b_k")), num_heads)
    v = split_heads(linear(x, params["w_v"], params.get("b_v")), num_heads)
    if cache is not None:
        k = torch.cat([cache["key"], k], 2); v = torch.cat([cache["value"], v], 2)
    mask = causal_mask(k.size(2))[..., :x.size(1), :]
    ctx, _ = scaled_dot_product_attention(q, k, v, mask)
    return linear(merge_heads(ctx), params["w_o"], params.get("b_o")), {"key": k, "value": v}

@A("cached_self_attention", "W", "cache returned holds only the new keys")
def ca_w3(x, params, num_heads, cache=None):
    out, c = ca_r1(x, params, num_heads, cache)
    Ln = x.size(1)
    return out, {"key": c["key"][:, :, -Ln:], "value": c["value"][:, :, -Ln:]}

@A("cached_self_attention", "W", "caller's cache dict updated in place")
def ca_w4(x, params, num_heads, cache=None):
    out, c = ca_r1(x, params, num_heads, cache)
    if cache is None:
        return out, c
    cache["key"], cache["value"] = c["key"], c["value"]
    return out, cache

@A("cached_self_attention", "W", "key and value caches swapped on return")
def ca_w5(x, params, num_heads, cache=None):
    out, c = ca_r1(x, params, num_heads, cache)
    return out, {"key": c["value"], "value": c["key"]}

@A("cached_self_attention", "W", "diagonal dropped from the new-token mask for even L_new")
def ca_w6(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params["w_q"], params.get("b_q")), num_heads)
    k = split_heads(linear(x, params["w_k"], params.get("b_k")), num_heads)
    v = split_heads(linear(x, params["w_v"], params.get("b_v")), num_heads)
    Lp = 0
    if cache is not None:
        Lp = cache["key"].size(2)
        k = torch.cat([cache["key"], k], 2); v = torch.cat([cache["value"], v], 2)
    Ln = x.size(1)
    mask = torch.cat([torch.ones(Ln, Lp, dtype=torch.bool), torch.ones(Ln, Ln, dtype=torch.bool).tril(-1) | torch.eye(Ln, dtype=torch.bool)], 1) if Ln % 2 else \
        torch.cat([torch.ones(Ln, Lp, dtype=torch.bool), torch.ones(Ln, Ln, dtype=torch.bool).tril(-1)], 1)
    ctx, _ = scaled_dot_product_attention(q, k, v, mask)
    return linear(merge_heads(ctx), params["w_o"], params.get("b_o")), {"key": k, "value": v}

_KV = {}
@A("cached_self_attention", "W", "cache kept in a module global, argument ignored")
def ca_w7(x, params, num_heads, cache=None):
    if cache is None:
        _KV.clear()
    out, c = ca_r1(x, params, num_heads, _KV.get("c"))
    _KV["c"] = c
    return out, c

# ======================= b2 lm_step =======================
def _lm_step(params, ids, config, caches, attn, start_of=lambda caches: caches[0]["key"].size(2)):
    start = 0 if caches is None else start_of(caches)
    x = embed(ids, params["token_embedding"]) + params["position_embedding"][start:start + ids.size(1)]
    new = []
    for i, b in enumerate(params["blocks"]):
        h = _ln(x, b["norm1"])
        a, c = attn(h, b["attention"], config.num_heads, None if caches is None else caches[i])
        x = x + a
        x = x + feed_forward(_ln(x, b["norm2"]), b["ffn"])
        new.append(c)
    return linear(_ln(x, params["final_norm"]), params["token_embedding"]), new

@A("lm_step", "R", "library cached_self_attention")
def st_r1(params, ids, config, caches=None):
    return _lm_step(params, ids, config, caches, cached_self_attention)

@A("lm_step", "R", "my einsum cached attention, positions via index_select")
def st_r2(params, ids, config, caches=None):
    start = 0 if not caches else caches[0]["value"].shape[-2]
    pos = params["position_embedding"].index_select(0, torch.arange(start, start + ids.size(1)))
    E = params["token_embedding"]
    x = E[ids] * E.size(1) ** 0.5 + pos
    new = []
    for i, b in enumerate(params["blocks"]):
        a, c = ca_r2(_hand_ln(x, b["norm1"]), b["attention"], config.num_heads, caches[i] if caches else None)
        x = x + a
        x = x + feed_forward(_hand_ln(x, b["norm2"]), b["ffn"])
        new.append(c)
    return _hand_ln(x, params["final_norm"]) @ E.T, new

@A("lm_step", "W", "positions restart at 0")
def st_w1(params, ids, config, caches=None):
    return _lm_step(params, ids, config, caches, cached_self_attention, lambda c: 0)

@A("lm_step", "W", "start from the heads axis (size(1))")
def st_w2(params, ids, config, caches=None):
    return _lm_step(params, ids, config, caches, cached_self_attention, lambda c: c[0]["key"].size(1))

@A("lm_step", "W", "start = number of caches (blocks)")
def st_w3(params, ids, config, caches=None):
    return _lm_step(params, ids, config, caches, cached_self_attention, lambda c: len(c))

@A("lm_step", "W", "every block uses block 0's cache")
def st_w4(params, ids, config, caches=None):
    fixed = None if caches is None else [caches[0]] * len(caches)
    return _lm_step(params, ids, config, fixed, cached_self_attention)

@A("lm_step", "W", "no final LayerNorm")
def st_w5(params, ids, config, caches=None):
    start = 0 if caches is None else caches[0]["key"].size(2)
    x = embed(ids, params["token_embedding"]) + params["position_embedding"][start:start + ids.size(1)]
    new = []
    for i, b in enumerate(params["blocks"]):
        a, c = cached_self_attention(_ln(x, b["norm1"]), b["attention"], config.num_heads, None if caches is None else caches[i])
        x = x + a; x = x + feed_forward(_ln(x, b["norm2"]), b["ffn"]); new.append(c)
    return linear(x, params["token_embedding"]), new

@A("lm_step", "W", "returns only the last block's cache, repeated")
def st_w6(params, ids, config, caches=None):
    logits, new = st_r1(params, ids, config, caches)
    return logits, [new[-1]] * len(new)

@A("lm_step", "W", "Post-LN inside the block: attention reads x, LN1 after the add")
def st_w7(params, ids, config, caches=None):
    start = 0 if caches is None else caches[0]["key"].size(2)
    x = embed(ids, params["token_embedding"]) + params["position_embedding"][start:start + ids.size(1)]
    new = []
    for i, b in enumerate(params["blocks"]):
        a, c = cached_self_attention(x, b["attention"], config.num_heads, None if caches is None else caches[i])
        x = _ln(x + a, b["norm1"]); x = x + feed_forward(_ln(x, b["norm2"]), b["ffn"]); new.append(c)
    return linear(_ln(x, params["final_norm"]), params["token_embedding"]), new


# ======================= second batch: more probes =======================
@A("encoder", "R", "rsqrt-form LayerNorm of my own (float16 gradient probe)")
def encs_r3(x, layers, num_heads, mask=None):
    def ln(t, n):
        return (t - t.mean(-1, keepdim=True)) * torch.rsqrt(t.var(-1, keepdim=True, unbiased=False) + 1e-5) * n["gamma"] + n["beta"]
    for p in layers:
        x = ln(x + _mha(x, x, x, p["self_attn"], num_heads, mask), p["norm1"])
        x = ln(x + feed_forward(x, p["ffn"]), p["norm2"])
    return x

def adam_w_filtered(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas; state["t"] += 1; t = state["t"]
    with torch.no_grad():
        live = [p for p in parameters if p.grad is not None]
        for p, m, v in zip(live, state["m"], state["v"]):   # m/v of the wrong parameter after a skip
            m.mul_(b1).add_((1 - b1) * p.grad); v.mul_(b2).add_((1 - b2) * p.grad ** 2)
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))
A("adam", "W", "parameters without grad filtered before zip with m/v")((adam_init_r, adam_w_filtered))

@A("adamw_step", "W", "no decay on 1-D parameters (biases), common practice but not the exercise")
def adamw_w8(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None and p.dim() > 1:
                p.mul_(1 - lr * weight_decay)
    adam_step(parameters, state, lr, betas, eps)

@A("clip_grad_norm", "R", "norm returned in float64")
def clip_r3(parameters, max_norm):
    gs = _grads(parameters)
    if not gs:
        return torch.tensor(0.0)
    total = sum(float((g.double() ** 2).sum()) for g in gs) ** 0.5
    scale = min(1.0, max_norm / (total + 1e-6))
    for g in gs:
        g.mul_(scale)
    return torch.tensor(total, dtype=torch.float64)

@A("clip_grad_norm", "W", "no gradients -> torch.tensor(0) (int64)")
def clip_w9(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0)
    return clip_r2(parameters, max_norm)

@A("clip_grad_norm", "W", "sum of per-tensor norms (not root of summed squares)")
def clip_w10(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = sum(g.float().norm() for g in gs)
    s = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in gs: g.mul_(s.to(g.dtype))
    return total.to(gs[0].dtype)

@A("label_smoothed_cross_entropy", "W", "all positions ignored -> 0 instead of nan (count clamped to 1)")
def ls_w9(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    lp = logits.log_softmax(-1).reshape(-1, V); y = labels.reshape(-1); keep = y != ignore_index
    nll = -lp.gather(1, torch.where(keep, y, 0).unsqueeze(1)).squeeze(1)
    loss = ((1 - smoothing) * nll + smoothing * -lp.mean(-1)) * keep
    return loss.sum() / keep.sum().clamp(min=1)

@A("label_smoothed_cross_entropy", "W", "ignored positions dropped by labels >= 0 (ignore_index not used)")
def ls_w10(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    lp = logits.log_softmax(-1).reshape(-1, V); y = labels.reshape(-1); keep = y >= 0
    nll = -lp.gather(1, torch.where(keep, y, 0).unsqueeze(1)).squeeze(1)
    loss = ((1 - smoothing) * nll + smoothing * -lp.mean(-1))
    return loss[keep].mean()

@A("next_token_probs", "W", "temperature clamped to >= 0.05 to be safe")
def ntp_w8(logits, temperature=1.0):
    return torch.softmax(logits / max(temperature, 0.05), -1)

@A("lm_forward", "W", "positions from the end of the table pe[-L:]")
def lf_w8(params, ids, config):
    L = ids.size(1)
    x = embed(ids, params["token_embedding"]) + params["position_embedding"][-L:]
    for b in params["blocks"]: x = decoder_block(x, b, config.num_heads)
    return linear(_ln(x, params["final_norm"]), params["token_embedding"])

@A("top_p_filter", "W", "nucleus over the whole flattened batch")
def tp_w8(logits, p):
    flat = logits.reshape(-1)
    s = flat.sort(descending=True).values
    pr = torch.softmax(s, -1)
    cut = s.masked_fill(~(pr.cumsum(-1) - pr < p), float("inf")).amin()
    return logits.masked_fill(logits < cut, float("-inf"))

@A("top_k_filter", "W", "k-th largest of the whole tensor for batched input")
def tk_w8(logits, k):
    kth = logits.reshape(-1).topk(min(k, logits.numel())).values[-1]
    return logits.masked_fill(logits < kth, float("-inf"))

@A("lm_step", "W", "start = length of the new ids (right only when L_new == L_past)")
def st_w8(params, ids, config, caches=None):
    return _lm_step(params, ids, config, caches, cached_self_attention, lambda c: ids.size(1))

@A("cached_self_attention", "W", "scores scaled by sqrt(D), not sqrt(d_k)")
def ca_w8(x, params, num_heads, cache=None):
    out, c = ca_r1(x * 1.0, params, num_heads, cache)
    q = split_heads(linear(x, params["w_q"], params.get("b_q")), num_heads) / math.sqrt(num_heads)
    Ln, Lt = x.size(1), c["key"].size(2)
    ctx, _ = scaled_dot_product_attention(q, c["key"], c["value"], causal_mask(Lt)[..., Lt - Ln:, :])
    return linear(merge_heads(ctx), params["w_o"], params.get("b_o")), c

@A("decoder_block", "W", "causal mask built on the batch axis length x.size(0)")
def db_w8(x, block, num_heads, mask=None):
    return db_r1(x, block, num_heads, causal_mask(x.size(0)) if mask is None else mask)

@A("shift_right", "W", "decoder input has <eos> replaced by <pad> (changes padded rows)")
def sh_w8(tgt):
    from tfmlib.training import EOS_ID, PAD_ID
    inp = tgt[:, :-1].clone()
    inp[inp == EOS_ID] = PAD_ID
    return inp, tgt[:, 1:]

@A("warmup_inverse_sqrt_lr", "R", "single expression via step / warmup ratio")
def isq_r3(step, d_model, warmup_steps, factor=1.0):
    if not step:
        return 0.0
    return factor * (d_model * step) ** -0.5 * min(1.0, (step / warmup_steps) ** 1.5)

@A("warmup_cosine_lr", "W", "warm-up from (step - 1) (0 at step 1)")
def cos_w7(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * max(step - 1, 0) / warmup_steps if step < warmup_steps else peak_lr
    return cos_r1(step, peak_lr, warmup_steps, total_steps, final_fraction)

@A("sgd_step", "W", "float16 parameters updated in float32 then rounded once... only when lr*g is tiny: uses addcmul with value")
def sgd_w8(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.sub_(p.grad * lr if lr < 1 else p.grad)

# ======================= third batch =======================
@A("encoder_layer", "W", "padding mask transposed (hides queries, not keys)")
def enc_w9(x, params, num_heads, mask=None):
    return enc_r1(x, params, num_heads, None if mask is None else mask.transpose(-1, -2))

@A("decoder_layer", "W", "memory_mask transposed")
def dec_w8(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    mm = None if memory_mask is None else memory_mask.transpose(-1, -2)
    if mm is not None and mm.size(-1) != memory.size(1) and mm.size(-1) != 1:
        mm = memory_mask
    return dec_r1(x, memory, params, num_heads, self_mask, mm)

@A("encoder", "W", "calls tfmlib.encoder (forbidden)")
def encs_w7(x, layers, num_heads, mask=None):
    return tfmlib.encoder(x, layers, num_heads, mask)

@A("decoder_block", "W", "passed mask transposed")
def db_w9(x, block, num_heads, mask=None):
    return db_r1(x, block, num_heads, None if mask is None else mask.transpose(-1, -2))

@A("lm_forward", "R", "causal mask of max_len cropped to L")
def lf_r3(params, ids, config):
    L = ids.size(1)
    mask = causal_mask(config.max_len)[..., :L, :L]
    x = embed(ids, params["token_embedding"]) + params["position_embedding"][:L]
    for b in params["blocks"]:
        x = db_r1(x, b, config.num_heads, mask)
    return linear(_ln(x, params["final_norm"]), params["token_embedding"])

@A("sgd_step", "R", "p -= lr * p.grad under no_grad")
def sgd_r4(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p -= lr * p.grad

@A("next_token_probs", "R", "log_softmax(...).exp()")
def ntp_r3(logits, temperature=1.0):
    return (logits / temperature).log_softmax(-1).exp()

@A("next_token_probs", "R", "float32 inside, cast back")
def ntp_r4(logits, temperature=1.0):
    return torch.softmax(logits.float() / temperature, -1).to(logits.dtype)

@A("top_p_filter", "R", "p >= 1 short-cut keeps every token (text: smallest set reaching p)")
def tp_r3(logits, p):
    if p >= 1:
        return logits.clone()
    return tp_r1(logits, p)

@A("cached_self_attention", "R", "empty cache tensors instead of None branch")
def ca_r3(x, params, num_heads, cache=None):
    B, Ln, D = x.shape; dk = D // num_heads
    if cache is None:
        empty = x.new_zeros(B, num_heads, 0, dk)
        cache = {"key": empty, "value": empty}
    q = split_heads(linear(x, params["w_q"], params.get("b_q")), num_heads)
    k = torch.cat([cache["key"], split_heads(linear(x, params["w_k"], params.get("b_k")), num_heads)], 2)
    v = torch.cat([cache["value"], split_heads(linear(x, params["w_v"], params.get("b_v")), num_heads)], 2)
    Lt = k.size(2)
    ctx, _ = scaled_dot_product_attention(q, k, v, causal_mask(Lt)[..., Lt - Ln:, :])
    return linear(merge_heads(ctx), params["w_o"], params.get("b_o")), {"key": k, "value": v}

@A("label_smoothed_cross_entropy", "R", "one-hot via F.one_hot, lerp to uniform")
def ls_r3(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    keep = labels != ignore_index
    lp = logits.log_softmax(-1)[keep]                                    # (N, V)
    target = F.one_hot(labels[keep], V).to(lp.dtype).lerp(torch.full_like(lp, 1.0 / V), smoothing)
    return -(target * lp).sum(-1).sum() / keep.sum()

@A("shift_right", "R", "split of a unbind/stack (copies)")
def sh_r3(tgt):
    cols = tgt.unbind(1)
    return torch.stack(cols[:-1], 1), torch.stack(cols[1:], 1)
