# Round 8b of the blind learner trial: notebooks 08, 09, 10, b1, b2.
from harness import *
import math
import torch
import torch.nn.functional as F
from tfmlib import (multi_head_attention, feed_forward, layer_norm, linear, split_heads,
                    merge_heads, scaled_dot_product_attention, causal_mask, embed)
import tfmlib.encoder_decoder as ed
import tfmlib.adam as ad
import tfmlib.training as tr
import tfmlib.language_model as lmm
import tfmlib.generation as gen
from tfmlib.sublayers import residual_sublayer


# ---------------------------------------------------------------- helpers a learner writes
def ln32(x, g, b, eps=1e-5):   # LayerNorm in float32 inside, cast back
    x32 = x.float()
    mu = x32.mean(-1, keepdim=True)
    var = ((x32 - mu) ** 2).mean(-1, keepdim=True)
    return ((x32 - mu) / torch.sqrt(var + eps) * g.float() + b.float()).to(x.dtype)


def ln_hand(x, g, b, eps=1e-5):  # in the input dtype, variance by hand
    mu = x.sum(-1, keepdim=True) / x.size(-1)
    d = x - mu
    var = (d * d).sum(-1, keepdim=True) / x.size(-1)
    return d * torch.rsqrt(var + eps) * g + b


def softmax_hand(s):
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    z = e.sum(-1, keepdim=True)
    return torch.where(z > 0, e / z.clamp_min(torch.finfo(e.dtype).tiny), torch.zeros_like(e))


def mha_einsum(q_in, kv_in, p, H, mask, up=None):
    """multi-head attention written out; up: compute in this dtype, cast back."""
    dt = q_in.dtype
    c = (lambda t: t if t is None or up is None else t.to(up))
    qi, ki = c(q_in), c(kv_in)
    B, Lq, D = qi.shape
    Lk = ki.size(1)
    dk = D // H
    def proj(x, w, b):
        y = torch.einsum('bld,od->blo', x, c(w))
        return y if p.get(b) is None else y + c(p[b])
    q = proj(qi, p['w_q'], 'b_q').reshape(B, Lq, H, dk)
    k = proj(ki, p['w_k'], 'b_k').reshape(B, Lk, H, dk)
    v = proj(ki, p['w_v'], 'b_v').reshape(B, Lk, H, dk)
    s = torch.einsum('bqhd,bkhd->bhqk', q, k) / math.sqrt(dk)
    if mask is not None:
        s = s.masked_fill(~mask, float('-inf'))
    w = softmax_hand(s)
    ctx = torch.einsum('bhqk,bkhd->bqhd', w, v).reshape(B, Lq, D)
    out = torch.einsum('bld,od->blo', ctx, c(p['w_o']))
    if p.get('b_o') is not None:
        out = out + c(p['b_o'])
    return out.to(dt)


def ffn_hand(x, p, up=None):
    dt = x.dtype
    c = (lambda t: t if up is None else t.to(up))
    h = torch.relu(c(x) @ c(p['w_1']).T + c(p['b_1']))
    return (h @ c(p['w_2']).T + c(p['b_2'])).to(dt)


def mha(x, kv, p, H, mask):
    return multi_head_attention(x, kv, kv, p, H, mask)[0]


# ================================================================ 08 encoder_layer
@A('encoder_layer', 'W', 'library mha/ffn + LayerNorm float32 inside (also for float64: label corrected)')
def r(x, params, num_heads, mask=None):
    n1, n2 = params['norm1'], params['norm2']
    x = ln32(x + mha(x, x, params['self_attn'], num_heads, mask), n1['gamma'], n1['beta'])
    return ln32(x + feed_forward(x, params['ffn']), n2['gamma'], n2['beta'])


@A('encoder_layer', 'R', 'all einsum, own softmax and LN (dtype of input)')
def r(x, params, num_heads, mask=None):
    n1, n2 = params['norm1'], params['norm2']
    x = ln_hand(x + mha_einsum(x, x, params['self_attn'], num_heads, mask), n1['gamma'], n1['beta'])
    return ln_hand(x + ffn_hand(x, params['ffn']), n2['gamma'], n2['beta'])


@A('encoder_layer', 'R', 'everything in float64, cast back')
def r(x, params, num_heads, mask=None):
    n1, n2 = params['norm1'], params['norm2']
    d = torch.float64
    h = x.to(d)
    h = ln_hand(h + mha_einsum(h, h, params['self_attn'], num_heads, mask, up=d), n1['gamma'].to(d), n1['beta'].to(d))
    h = ln_hand(h + ffn_hand(h, params['ffn'], up=d), n2['gamma'].to(d), n2['beta'].to(d))
    return h.to(x.dtype)


@A('encoder_layer', 'R', 'residual_sublayer from notebook 07')
def r(x, params, num_heads, mask=None):
    x = residual_sublayer(x, lambda h: mha(h, h, params['self_attn'], num_heads, mask), params['norm1'])
    return residual_sublayer(x, lambda h: feed_forward(h, params['ffn']), params['norm2'])


def enc_right(x, params, num_heads, mask=None):
    n1, n2 = params['norm1'], params['norm2']
    x = layer_norm(x + mha(x, x, params['self_attn'], num_heads, mask), n1['gamma'], n1['beta'])
    return layer_norm(x + feed_forward(x, params['ffn']), n2['gamma'], n2['beta'])


@A('encoder_layer', 'W', 'Pre-LN instead of Post-LN')
def w(x, params, num_heads, mask=None):
    n1, n2 = params['norm1'], params['norm2']
    h = layer_norm(x, n1['gamma'], n1['beta'])
    x = x + mha(h, h, params['self_attn'], num_heads, mask)
    return x + feed_forward(layer_norm(x, n2['gamma'], n2['beta']), params['ffn'])


@A('encoder_layer', 'W', 'norm1 for both sublayers')
def w(x, params, num_heads, mask=None):
    n1 = params['norm1']
    x = layer_norm(x + mha(x, x, params['self_attn'], num_heads, mask), n1['gamma'], n1['beta'])
    return layer_norm(x + feed_forward(x, params['ffn']), n1['gamma'], n1['beta'])


@A('encoder_layer', 'W', '-1e9 fill: fully masked rows average the values')
def w(x, params, num_heads, mask=None):
    n1, n2 = params['norm1'], params['norm2']
    p = params['self_attn']; B, L, D = x.shape; H = num_heads; dk = D // H
    q = split_heads(linear(x, p['w_q'], p['b_q']), H)
    k = split_heads(linear(x, p['w_k'], p['b_k']), H)
    v = split_heads(linear(x, p['w_v'], p['b_v']), H)
    s = q @ k.transpose(-2, -1) / math.sqrt(dk)
    if mask is not None:
        s = s.masked_fill(~mask, -1e4 if x.dtype == torch.float16 else -1e9)
    a = linear(merge_heads(torch.softmax(s, -1) @ v), p['w_o'], p['b_o'])
    x = layer_norm(x + a, n1['gamma'], n1['beta'])
    return layer_norm(x + feed_forward(x, params['ffn']), n2['gamma'], n2['beta'])


@A('encoder_layer', 'W', 'LayerNorm with unbiased variance')
def w(x, params, num_heads, mask=None):
    def ln(t, n):
        return (t - t.mean(-1, keepdim=True)) / torch.sqrt(t.var(-1, keepdim=True) + 1e-5) * n['gamma'] + n['beta']
    x = ln(x + mha(x, x, params['self_attn'], num_heads, mask), params['norm1'])
    return ln(x + feed_forward(x, params['ffn']), params['norm2'])


@A('encoder_layer', 'W', 'LayerNorm eps 1e-6')
def w(x, params, num_heads, mask=None):
    n1, n2 = params['norm1'], params['norm2']
    x = layer_norm(x + mha(x, x, params['self_attn'], num_heads, mask), n1['gamma'], n1['beta'], 1e-6)
    return layer_norm(x + feed_forward(x, params['ffn']), n2['gamma'], n2['beta'], 1e-6)


@A('encoder_layer', 'W', 'mask dropped when B > 1 broadcast fails -> mask[0] used')
def w(x, params, num_heads, mask=None):
    if mask is not None:
        mask = mask[:1]   # "the mask is the same for every sample"
    return enc_right(x, params, num_heads, mask)


@A('encoder_layer', 'W', 'attention in place: x.add_(attn)')
def w(x, params, num_heads, mask=None):
    n1, n2 = params['norm1'], params['norm2']
    a = mha(x, x, params['self_attn'], num_heads, mask)
    with torch.no_grad():
        x2 = x.detach().add_(a.detach())
    x = layer_norm(x2, n1['gamma'], n1['beta'])
    return layer_norm(x + feed_forward(x, params['ffn']), n2['gamma'], n2['beta'])


@A('encoder_layer', 'W', 'calls the library encoder_layer')
def w(x, params, num_heads, mask=None):
    return ed.encoder_layer(x, params, num_heads, mask)


@A('encoder_layer', 'W', 'LayerNorm float16 computed via x.half() always')
def w(x, params, num_heads, mask=None):
    return enc_right(x.half().to(x.dtype), params, num_heads, mask) if x.dtype == torch.float64 else enc_right(x, params, num_heads, mask)


generics('encoder_layer', enc_right, ['f32', 'mutate', 'idcache', 'buffer'])


# ================================================================ 08 encoder
def my_enc_layer(x, params, num_heads, mask=None):
    n1, n2 = params['norm1'], params['norm2']
    x = ln_hand(x + mha_einsum(x, x, params['self_attn'], num_heads, mask), n1['gamma'], n1['beta'])
    return ln_hand(x + ffn_hand(x, params['ffn']), n2['gamma'], n2['beta'])


@A('encoder', 'R', 'loop over my own einsum encoder layer')
def r(x, layers, num_heads, mask=None):
    h = x
    for p in layers:
        h = my_enc_layer(h, p, num_heads, mask)
    return h


@A('encoder', 'R', 'functools.reduce over library encoder_layer')
def r(x, layers, num_heads, mask=None):
    return functools.reduce(lambda h, p: ed.encoder_layer(h, p, num_heads, mask), layers, x)


def enc_rec(x, layers, num_heads, mask=None):
    if not layers:
        return x
    p = layers[0]
    n1, n2 = p['norm1'], p['norm2']
    h = ln32(x + mha(x, x, p['self_attn'], num_heads, mask), n1['gamma'], n1['beta'])
    h = ln32(h + feed_forward(h, p['ffn']), n2['gamma'], n2['beta'])
    return enc_rec(h, layers[1:], num_heads, mask)


A('encoder', 'W', 'recursion, float32-inside LN layer (also for float64: label corrected)')(enc_rec)


def enc_stack_right(x, layers, num_heads, mask=None):
    for p in layers:
        x = ed.encoder_layer(x, p, num_heads, mask)
    return x


@A('encoder', 'W', 'every layer reads the original x')
def w(x, layers, num_heads, mask=None):
    out = x
    for p in layers:
        out = ed.encoder_layer(x, p, num_heads, mask)
    return out


@A('encoder', 'W', 'layers in reverse order')
def w(x, layers, num_heads, mask=None):
    for p in reversed(layers):
        x = ed.encoder_layer(x, p, num_heads, mask)
    return x


@A('encoder', 'W', 'mask only for the first layer')
def w(x, layers, num_heads, mask=None):
    for i, p in enumerate(layers):
        x = ed.encoder_layer(x, p, num_heads, mask if i == 0 else None)
    return x


@A('encoder', 'W', 'extra final LayerNorm with the last layer norm2')
def w(x, layers, num_heads, mask=None):
    x = enc_stack_right(x, layers, num_heads, mask)
    n = layers[-1]['norm2']
    return layer_norm(x, n['gamma'], n['beta'])


@A('encoder', 'W', 'first layer params repeated len(layers) times')
def w(x, layers, num_heads, mask=None):
    for _ in layers:
        x = ed.encoder_layer(x, layers[0], num_heads, mask)
    return x


@A('encoder', 'W', 'skips the last layer (range(len-1))')
def w(x, layers, num_heads, mask=None):
    for i in range(max(1, len(layers) - 1)):
        x = ed.encoder_layer(x, layers[i], num_heads, mask)
    return x


@A('encoder', 'W', 'calls the library encoder')
def w(x, layers, num_heads, mask=None):
    return ed.encoder(x, layers, num_heads, mask)


generics('encoder', enc_stack_right, ['f32', 'mutate', 'shapecache', 'counter'])


# ================================================================ 08 decoder_layer
def dec_right(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    n1, n2, n3 = params['norm1'], params['norm2'], params['norm3']
    x = layer_norm(x + mha(x, x, params['self_attn'], num_heads, self_mask), n1['gamma'], n1['beta'])
    x = layer_norm(x + mha(x, memory, params['cross_attn'], num_heads, memory_mask), n2['gamma'], n2['beta'])
    return layer_norm(x + feed_forward(x, params['ffn']), n3['gamma'], n3['beta'])


@A('decoder_layer', 'R', 'einsum attention, own softmax/LN')
def r(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    n1, n2, n3 = params['norm1'], params['norm2'], params['norm3']
    x = ln_hand(x + mha_einsum(x, x, params['self_attn'], num_heads, self_mask), n1['gamma'], n1['beta'])
    x = ln_hand(x + mha_einsum(x, memory, params['cross_attn'], num_heads, memory_mask), n2['gamma'], n2['beta'])
    return ln_hand(x + ffn_hand(x, params['ffn']), n3['gamma'], n3['beta'])


@A('decoder_layer', 'W', 'float32-inside LN also for float64 (label corrected)')
def r(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    d = torch.float32 if x.dtype != torch.float64 else torch.float64
    n1, n2, n3 = params['norm1'], params['norm2'], params['norm3']
    h, m = x.to(d), memory.to(d)
    h = ln32(h + mha_einsum(h, h, params['self_attn'], num_heads, self_mask, up=d), n1['gamma'], n1['beta'])
    h = ln32(h + mha_einsum(h, m, params['cross_attn'], num_heads, memory_mask, up=d), n2['gamma'], n2['beta'])
    return ln32(h + ffn_hand(h, params['ffn'], up=d), n3['gamma'], n3['beta']).to(x.dtype)


@A('decoder_layer', 'R', 'list of (sublayer, norm) pairs + residual_sublayer')
def r(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    steps = [(lambda h: mha(h, h, params['self_attn'], num_heads, self_mask), 'norm1'),
             (lambda h: mha(h, memory, params['cross_attn'], num_heads, memory_mask), 'norm2'),
             (lambda h: feed_forward(h, params['ffn']), 'norm3')]
    for f, n in steps:
        x = residual_sublayer(x, f, params[n])
    return x


@A('decoder_layer', 'W', 'cross-attention keys/values from x')
def w(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    n1, n2, n3 = params['norm1'], params['norm2'], params['norm3']
    x = layer_norm(x + mha(x, x, params['self_attn'], num_heads, self_mask), n1['gamma'], n1['beta'])
    x = layer_norm(x + mha(x, x, params['cross_attn'], num_heads, self_mask), n2['gamma'], n2['beta'])
    return layer_norm(x + feed_forward(x, params['ffn']), n3['gamma'], n3['beta'])


@A('decoder_layer', 'W', 'cross-attention with self_attn weights')
def w(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    p = dict(params); p['cross_attn'] = params['self_attn']
    return dec_right(x, memory, p, num_heads, self_mask, memory_mask)


@A('decoder_layer', 'W', 'memory_mask ignored')
def w(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    return dec_right(x, memory, params, num_heads, self_mask, None)


@A('decoder_layer', 'W', 'norm2 and norm3 swapped')
def w(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    p = dict(params); p['norm2'], p['norm3'] = params['norm3'], params['norm2']
    return dec_right(x, memory, p, num_heads, self_mask, memory_mask)


@A('decoder_layer', 'W', 'cross-attn residual added to the pre-self-attn x')
def w(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    n1, n2, n3 = params['norm1'], params['norm2'], params['norm3']
    h = layer_norm(x + mha(x, x, params['self_attn'], num_heads, self_mask), n1['gamma'], n1['beta'])
    h = layer_norm(x + mha(h, memory, params['cross_attn'], num_heads, memory_mask), n2['gamma'], n2['beta'])
    return layer_norm(h + feed_forward(h, params['ffn']), n3['gamma'], n3['beta'])


@A('decoder_layer', 'W', 'self_mask only if Lt > 1; masks swapped when shapes allow')
def w(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    if x.size(1) == memory.size(1):
        self_mask, memory_mask = memory_mask, self_mask
    return dec_right(x, memory, params, num_heads, self_mask, memory_mask)


@A('decoder_layer', 'W', 'mask of the first sample for all (B > 1)')
def w(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    mm = None if memory_mask is None else memory_mask[:1]
    return dec_right(x, memory, params, num_heads, self_mask, mm)


generics('decoder_layer', dec_right, ['f32', 'mutate', 'idcache', 'buffer'])


# ================================================================ 09 adam
def adam_init_r(parameters):
    ps = list(parameters)
    return {"t": 0, "m": [torch.zeros_like(p) for p in ps], "v": [torch.zeros_like(p) for p in ps]}


def adam_step_r(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas
    state['t'] += 1
    t = state['t']
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None:
                continue
            g = p.grad
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))


def adam_step_paper(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    # Kingma & Ba's "more efficient" order: fold both corrections into the step size.
    b1, b2 = betas
    state['t'] += 1
    t = state['t']
    bc2 = math.sqrt(1 - b2 ** t)
    step_size = lr * bc2 / (1 - b1 ** t)
    with torch.no_grad():
        for i, p in enumerate(parameters):
            if p.grad is None:
                continue
            m, v = state['m'][i], state['v'][i]
            m.lerp_(p.grad, 1 - b1)
            v.mul_(b2).add_((1 - b2) * p.grad * p.grad)
            p.addcdiv_(m, v.sqrt().add_(eps * bc2), value=-step_size)


def adam_init_zeros(parameters):
    ps = list(parameters)
    return {"t": 0, "m": [p.detach().clone().zero_() for p in ps],
            "v": [torch.zeros(p.shape, dtype=p.dtype, device=p.device) for p in ps]}


def adam_step_f64(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas
    state['t'] = state['t'] + 1
    t = state['t']
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None:
                continue
            g = p.grad.double()
            m64 = b1 * m.double() + (1 - b1) * g
            v64 = b2 * v.double() + (1 - b2) * g * g
            m.copy_(m64); v.copy_(v64)
            upd = lr * (m.double() / (1 - b1 ** t)) / ((v.double() / (1 - b2 ** t)).sqrt() + eps)
            p.copy_(p.double() - upd)


A('adam', 'R', 'plain loop, library formula order')((adam_init_r, adam_step_r))
A('adam', 'R', 'paper efficient form: step size folded, eps*sqrt(bc2), lerp_')((adam_init_r, adam_step_paper))
A('adam', 'R', 'float64 moment arithmetic, copy back')((adam_init_zeros, adam_step_f64))


def adam_step_foreach(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas
    state['t'] += 1
    t = state['t']
    idx = [i for i, p in enumerate(parameters) if p.grad is not None]
    if not idx:
        return
    ps = [parameters[i] for i in idx]; gs = [p.grad for p in ps]
    ms = [state['m'][i] for i in idx]; vs = [state['v'][i] for i in idx]
    with torch.no_grad():
        torch._foreach_mul_(ms, b1); torch._foreach_add_(ms, gs, alpha=1 - b1)
        torch._foreach_mul_(vs, b2); torch._foreach_addcmul_(vs, gs, gs, value=1 - b2)
        for p, m, v in zip(ps, ms, vs):
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))


A('adam', 'R', 'torch._foreach ops, list(parameters) indexing')((adam_init_r, adam_step_foreach))


def mk_adam_step(mod):
    def step(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
        return mod(parameters, state, lr, betas, eps)
    return step


def w_t_per_param(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None:
                continue
            state['t'] += 1; t = state['t']
            m.mul_(b1).add_(p.grad, alpha=1 - b1); v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))


def w_eps_inside(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas
    state['t'] += 1; t = state['t']
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None:
                continue
            m.mul_(b1).add_(p.grad, alpha=1 - b1); v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.sub_(lr * (m / (1 - b1 ** t)) / (v / (1 - b2 ** t) + eps).sqrt())


def w_decay_on_none(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    # grad None treated as zero gradient: m and v still decay and p still moves
    b1, b2 = betas
    state['t'] += 1; t = state['t']
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            m.mul_(b1).add_(g, alpha=1 - b1); v.mul_(b2).addcmul_(g, g, value=1 - b2)
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))


def init_shared_by_shape(parameters):
    zeros = {}
    ps = list(parameters)
    ms, vs = [], []
    for p in ps:
        key = (tuple(p.shape), p.dtype)
        if key not in zeros:
            zeros[key] = (torch.zeros_like(p), torch.zeros_like(p))
        ms.append(zeros[key][0]); vs.append(zeros[key][1])
    return {"t": 0, "m": ms, "v": vs}


def init_f32(parameters):
    ps = list(parameters)
    return {"t": 0, "m": [torch.zeros(p.shape, dtype=torch.float32) for p in ps],
            "v": [torch.zeros(p.shape, dtype=torch.float32) for p in ps]}


def step_f32_moments(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas
    state['t'] += 1; t = state['t']
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None:
                continue
            g = p.grad.float()
            m.mul_(b1).add_(g, alpha=1 - b1); v.mul_(b2).addcmul_(g, g, value=1 - b2)
            p.sub_((lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps)).to(p.dtype))


def w_squares_of_sum(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    # v from the bias-corrected m: v = b2 v + (1-b2) m^2
    b1, b2 = betas
    state['t'] += 1; t = state['t']
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None:
                continue
            m.mul_(b1).add_(p.grad, alpha=1 - b1); v.mul_(b2).addcmul_(m, m, value=1 - b2)
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))


def w_corr_t_plus1(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    # bias correction with t + 1 (t incremented after the update)
    b1, b2 = betas
    t = state['t'] + 1
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None:
                continue
            m.mul_(b1).add_(p.grad, alpha=1 - b1); v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.sub_(lr * (m / (1 - b1 ** (t + 1))) / ((v / (1 - b2 ** (t + 1))).sqrt() + eps))
    state['t'] = t


ADAM_G = {}


def step_global_moments(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    # moments kept in a module dict keyed by id(p); the state only counts t
    b1, b2 = betas
    state['t'] += 1; t = state['t']
    with torch.no_grad():
        for p in parameters:
            if p.grad is None:
                continue
            m, v = ADAM_G.setdefault(id(p), (torch.zeros_like(p), torch.zeros_like(p)))
            m.mul_(b1).add_(p.grad, alpha=1 - b1); v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))


def w_sqrt_g_abs(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    # v tracks |g| instead of g^2 (then sqrt): "v is the RMS"
    b1, b2 = betas
    state['t'] += 1; t = state['t']
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None:
                continue
            m.mul_(b1).add_(p.grad, alpha=1 - b1); v.mul_(b2).add_(p.grad.abs() ** 2 * (1 - b2))
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))


A('adam', 'W', 't counted per parameter')((adam_init_r, w_t_per_param))
A('adam', 'W', 'eps inside the sqrt')((adam_init_r, w_eps_inside))
A('adam', 'W', 'grad None treated as zero gradient')((adam_init_r, w_decay_on_none))
A('adam', 'W', 'init shares m/v between params of one shape')((init_shared_by_shape, adam_step_r))
A('adam', 'W', 'moments in float32 whatever p dtype')((init_f32, step_f32_moments))
A('adam', 'W', 'v from m^2')((adam_init_r, w_squares_of_sum))
A('adam', 'W', 'bias correction uses t+1')((adam_init_r, w_corr_t_plus1))
A('adam', 'W', 'moments in a module dict keyed by id')((adam_init_r, step_global_moments))
A('adam', 'R', 'v from |g|**2 (same as g*g)')((adam_init_r, w_sqrt_g_abs))


# ================================================================ 09 sgd_step
@A('sgd_step', 'R', 'p.add_(grad, alpha=-lr)')
def r(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.add_(p.grad, alpha=-lr)


@A('sgd_step', 'R', 'p.copy_(p - lr*grad)')
def r(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.copy_(p - lr * p.grad)


@A('sgd_step', 'R', 'p -= lr * grad via torch.no_grad decorator, generator filter')
@torch.no_grad()
def r(parameters, lr):
    for p in (q for q in parameters if q.grad is not None):
        p -= lr * p.grad


@A('sgd_step', 'R', 'foreach_add_ with alpha')
def r(parameters, lr):
    ps = [p for p in parameters if p.grad is not None]
    if ps:
        with torch.no_grad():
            torch._foreach_add_(ps, [p.grad for p in ps], alpha=-lr)


@A('sgd_step', 'W', 'nan_to_num on the gradient')
def w(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.sub_(lr * torch.nan_to_num(p.grad))


@A('sgd_step', 'W', 'lr clamped to 1')
def w(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.sub_(min(lr, 1.0) * p.grad)


@A('sgd_step', 'W', 'lr as float32 tensor (float64 params lose precision)')
def w(parameters, lr):
    lr_t = torch.tensor(lr)
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.sub_(lr_t * p.grad)


@A('sgd_step', 'W', 'scales the gradient in place (p.grad.mul_(lr))')
def w(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.sub_(p.grad.mul_(lr))


@A('sgd_step', 'W', 'p.data = p - lr*g (new memory)')
def w(parameters, lr):
    for p in parameters:
        if p.grad is not None:
            p.data = p.data - lr * p.grad


@A('sgd_step', 'W', 'stops at the first parameter without grad')
def w(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is None:
                break
            p.sub_(lr * p.grad)


@A('sgd_step', 'W', 'update computed in float16 for speed')
def w(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.sub_((lr * p.grad.half()).to(p.dtype))


@A('sgd_step', 'W', 'grad None -> crash-free but zeros the param')
def w(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            g = p.grad if p.grad is not None else p
            p.sub_(lr * g) if p.grad is not None else p.mul_(1.0 - 1e-3)


# ================================================================ 09 adamw_step
@A('adamw_step', 'R', 'decay then library adam_step')
def r(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.mul_(1 - lr * weight_decay)
    ad.adam_step(parameters, state, lr, betas, eps)


@A('adamw_step', 'R', 'decay as p -= lr*wd*p, then my paper-form adam')
def r(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.sub_(lr * weight_decay * p)
    adam_step_paper(parameters, state, lr, betas, eps)


@A('adamw_step', 'R', 'one loop: decay and Adam per parameter, t once')
def r(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    b1, b2 = betas
    state['t'] += 1; t = state['t']
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None:
                continue
            p.mul_(1 - lr * weight_decay)
            m.mul_(b1).add_(p.grad, alpha=1 - b1); v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))


@A('adamw_step', 'W', 'Adam + L2 (grad += wd * p)')
def w(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.grad.add_(p, alpha=weight_decay)
    ad.adam_step(parameters, state, lr, betas, eps)


@A('adamw_step', 'W', 'decay after the update')
def w(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    ad.adam_step(parameters, state, lr, betas, eps)
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.mul_(1 - lr * weight_decay)


@A('adamw_step', 'W', 'decay not scaled by lr')
def w(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.mul_(1 - weight_decay)
    ad.adam_step(parameters, state, lr, betas, eps)


@A('adamw_step', 'W', 'decays parameters without a gradient')
def w(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in parameters:
            p.mul_(1 - lr * weight_decay)
    ad.adam_step(parameters, state, lr, betas, eps)


@A('adamw_step', 'W', 'default weight_decay 0.01 ignored -> 1e-4 hard-coded')
def w(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.mul_(1 - lr * 1e-4)
    ad.adam_step(parameters, state, lr, betas, eps)


@A('adamw_step', 'W', 'decay multiplies by exp(-lr*wd) (close but not equal)')
def w(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.mul_(math.exp(-lr * weight_decay))
    ad.adam_step(parameters, state, lr, betas, eps)


@A('adamw_step', 'W', 'my adam with t per parameter')
def w(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.mul_(1 - lr * weight_decay)
    w_t_per_param(parameters, state, lr, betas, eps)


# ================================================================ 09 clip_grad_norm
@A('clip_grad_norm', 'R', 'float64 sum of squares, cast to grad dtype')
def r(parameters, max_norm):
    ps = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    gs = [p.grad for p in ps if p.grad is not None]
    if not gs:
        return torch.tensor(0.0)
    total = torch.sqrt(sum((g.double() ** 2).sum() for g in gs))
    scale = min(1.0, max_norm / (total.item() + 1e-6))
    for g in gs:
        g.mul_(scale)
    return total.to(gs[0].dtype)


@A('clip_grad_norm', 'R', 'cat of flattened float32 grads, torch.where')
def r(parameters, max_norm):
    ps = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    gs = [p.grad for p in ps if p.grad is not None]
    if not gs:
        return torch.tensor(0.0)
    wide = torch.float64 if any(g.dtype == torch.float64 for g in gs) else torch.float32
    flat = torch.cat([g.reshape(-1).to(wide) for g in gs])
    total = flat.pow(2).sum().sqrt()
    scale = torch.where(total > max_norm, max_norm / (total + 1e-6), torch.ones_like(total))
    for g in gs:
        g.mul_(scale.to(g.dtype))
    return total.to(gs[0].dtype)


@A('clip_grad_norm', 'R', 'norm of norms, float32 norm returned')
def r(parameters, max_norm):
    ps = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    gs = [p.grad for p in ps if p.grad is not None]
    if not gs:
        return torch.tensor(0.0)
    norms = torch.stack([torch.linalg.vector_norm(g, dtype=torch.float64) for g in gs])
    total = torch.linalg.vector_norm(norms)
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in gs:
        g.mul_(scale)
    return total.to(gs[0].dtype)


def clip_right(parameters, max_norm):
    return ad.clip_grad_norm(parameters, max_norm)


@A('clip_grad_norm', 'W', 'no 1e-6')
def w(parameters, max_norm):
    ps = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    gs = [p.grad for p in ps if p.grad is not None]
    if not gs:
        return torch.tensor(0.0)
    total = torch.sqrt(sum((g.double() ** 2).sum() for g in gs))
    scale = min(1.0, max_norm / total.item())
    for g in gs:
        g.mul_(scale)
    return total.to(gs[0].dtype)


@A('clip_grad_norm', 'W', 'scales up too (no min with 1)')
def w(parameters, max_norm):
    ps = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    gs = [p.grad for p in ps if p.grad is not None]
    if not gs:
        return torch.tensor(0.0)
    total = torch.sqrt(sum((g.double() ** 2).sum() for g in gs))
    for g in gs:
        g.mul_(max_norm / (total.item() + 1e-6))
    return total.to(gs[0].dtype)


@A('clip_grad_norm', 'W', 'per-parameter clipping')
def w(parameters, max_norm):
    ps = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    gs = [p.grad for p in ps if p.grad is not None]
    if not gs:
        return torch.tensor(0.0)
    norms = []
    for g in gs:
        n = g.double().norm()
        norms.append(n)
        g.mul_(min(1.0, max_norm / (n.item() + 1e-6)))
    return torch.stack(norms).norm().to(gs[0].dtype)


@A('clip_grad_norm', 'W', 'returns the norm after clipping')
def w(parameters, max_norm):
    ps = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    gs = [p.grad for p in ps if p.grad is not None]
    if not gs:
        return torch.tensor(0.0)
    total = torch.sqrt(sum((g.double() ** 2).sum() for g in gs))
    for g in gs:
        g.mul_(min(1.0, max_norm / (total.item() + 1e-6)))
    return torch.sqrt(sum((g.double() ** 2).sum() for g in gs)).to(gs[0].dtype)


@A('clip_grad_norm', 'W', 'sums squares in the grad dtype (float16 overflow)')
def w(parameters, max_norm):
    ps = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    gs = [p.grad for p in ps if p.grad is not None]
    if not gs:
        return torch.tensor(0.0)
    total = torch.sqrt(sum((g * g).sum() for g in gs))
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in gs:
        g.mul_(scale)
    return total


@A('clip_grad_norm', 'W', 'list(parameters) on a single tensor (iterates rows)')
def w(parameters, max_norm):
    ps = list(parameters)
    gs = [p.grad for p in ps if p.grad is not None]
    if not gs:
        return torch.tensor(0.0)
    total = torch.sqrt(sum((g.double() ** 2).sum() for g in gs))
    for g in gs:
        g.mul_(min(1.0, max_norm / (total.item() + 1e-6)))
    return total.to(gs[0].dtype)


@A('clip_grad_norm', 'W', 'not in place: p.grad = p.grad * scale')
def w(parameters, max_norm):
    ps = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    gs = [p for p in ps if p.grad is not None]
    if not gs:
        return torch.tensor(0.0)
    total = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in gs))
    for p in gs:
        p.grad = p.grad * min(1.0, max_norm / (total.item() + 1e-6))
    return total.to(gs[0].grad.dtype)


@A('clip_grad_norm', 'W', 'max norm compared, then scale = max_norm/total (no eps) only if above')
def w(parameters, max_norm):
    ps = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    gs = [p.grad for p in ps if p.grad is not None]
    if not gs:
        return torch.tensor(0.0)
    total = torch.sqrt(sum((g.double() ** 2).sum() for g in gs))
    if total > max_norm:
        for g in gs:
            g.mul_(max_norm / total.item())
    return total.to(gs[0].dtype)


@A('clip_grad_norm', 'W', 'no-gradient case returns python 0.0')
def w(parameters, max_norm):
    ps = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    if all(p.grad is None for p in ps):
        return 0.0
    return clip_right_manual(ps, max_norm)


def clip_right_manual(ps, max_norm):
    gs = [p.grad for p in ps if p.grad is not None]
    total = torch.sqrt(sum((g.double() ** 2).sum() for g in gs))
    for g in gs:
        g.mul_(min(1.0, max_norm / (total.item() + 1e-6)))
    return total.to(gs[0].dtype)


generics('clip_grad_norm', lambda ps, mx: clip_right_manual([ps] if isinstance(ps, torch.Tensor) else list(ps), mx) if any(p.grad is not None for p in ([ps] if isinstance(ps, torch.Tensor) else list(ps))) else torch.tensor(0.0), ['buffer', 'f64'])


# ================================================================ 09 warmup_inverse_sqrt_lr
@A('warmup_inverse_sqrt_lr', 'R', 'division form')
def r(step, d_model, warmup_steps, factor=1.0):
    if step == 0:
        return 0.0
    return factor / math.sqrt(d_model) * min(1 / math.sqrt(step), step / warmup_steps ** 1.5)


@A('warmup_inverse_sqrt_lr', 'R', 'piecewise if/else')
def r(step, d_model, warmup_steps, factor=1.0):
    if step == 0:
        return 0.0
    base = factor * d_model ** -0.5
    if step < warmup_steps:
        return base * step * warmup_steps ** -1.5
    return base * step ** -0.5


@A('warmup_inverse_sqrt_lr', 'R', 'torch float64 scalar, returned as float')
def r(step, d_model, warmup_steps, factor=1.0):
    s = torch.tensor(float(step), dtype=torch.float64)
    if step == 0:
        return 0.0
    v = factor * torch.rsqrt(torch.tensor(float(d_model), dtype=torch.float64)) * torch.minimum(torch.rsqrt(s), s * torch.tensor(float(warmup_steps), dtype=torch.float64) ** -1.5)
    return float(v)


@A('warmup_inverse_sqrt_lr', 'W', 'crash at step 0')
def w(step, d_model, warmup_steps, factor=1.0):
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


@A('warmup_inverse_sqrt_lr', 'W', 'steps from 0 (step + 1)')
def w(step, d_model, warmup_steps, factor=1.0):
    s = step + 1
    return factor * d_model ** -0.5 * min(s ** -0.5, s * warmup_steps ** -1.5)


@A('warmup_inverse_sqrt_lr', 'W', 'warmup ** -0.5')
def w(step, d_model, warmup_steps, factor=1.0):
    if step == 0:
        return 0.0
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -0.5)


@A('warmup_inverse_sqrt_lr', 'W', 'factor ignored')
def w(step, d_model, warmup_steps, factor=1.0):
    if step == 0:
        return 0.0
    return d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


@A('warmup_inverse_sqrt_lr', 'W', 'max instead of min')
def w(step, d_model, warmup_steps, factor=1.0):
    if step == 0:
        return 0.0
    return factor * d_model ** -0.5 * max(step ** -0.5, step * warmup_steps ** -1.5)


@A('warmup_inverse_sqrt_lr', 'W', 'step 0 returns the step-1 value')
def w(step, d_model, warmup_steps, factor=1.0):
    s = max(step, 1)
    return factor * d_model ** -0.5 * min(s ** -0.5, s * warmup_steps ** -1.5)


@A('warmup_inverse_sqrt_lr', 'W', 'float32 arithmetic')
def w(step, d_model, warmup_steps, factor=1.0):
    if step == 0:
        return 0.0
    t = lambda v: torch.tensor(float(v), dtype=torch.float32)
    return float(t(factor) * t(d_model) ** -0.5 * torch.minimum(t(step) ** -0.5, t(step) * t(warmup_steps) ** -1.5))


# ================================================================ 09 warmup_cosine_lr
@A('warmup_cosine_lr', 'R', 'final + (peak-final) * (1+cos)/2, explicit end')
def r(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    if step >= total_steps:
        return final_fraction * peak_lr
    x = (step - warmup_steps) / (total_steps - warmup_steps)
    lo = final_fraction * peak_lr
    return lo + (peak_lr - lo) * (1 + math.cos(math.pi * x)) / 2


@A('warmup_cosine_lr', 'R', 'cos^2 half-angle form')
def r(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return step / warmup_steps * peak_lr
    x = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * (final_fraction + (1 - final_fraction) * math.cos(math.pi * x / 2) ** 2)


@A('warmup_cosine_lr', 'W', 'table of the whole schedule, table[-1] after the end (label corrected: peak when warmup == total)')
def r(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    def lr_at(s):
        if s <= warmup_steps:
            return peak_lr * s / warmup_steps
        x = min(1.0, (s - warmup_steps) / max(1, total_steps - warmup_steps))
        return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * x)))
    table = [lr_at(s) for s in range(total_steps + 1)]
    return table[step] if step <= total_steps else table[-1]


@A('warmup_cosine_lr', 'W', 'no guard when warmup == total')
def w(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    x = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * x)))


@A('warmup_cosine_lr', 'W', 'no clamp after total_steps')
def w(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    x = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * x)))


@A('warmup_cosine_lr', 'W', 'decays to 0 (final_fraction ignored)')
def w(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    x = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * 0.5 * (1 + math.cos(math.pi * x))


@A('warmup_cosine_lr', 'W', 'strict < warmup: warm-up then cosine with 0-based progress')
def w(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step < warmup_steps:
        return peak_lr * step / warmup_steps
    x = min(1.0, (step - warmup_steps + 1) / max(1, total_steps - warmup_steps))
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * x)))


@A('warmup_cosine_lr', 'W', 'warm-up from (step+1)/warmup')
def w(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * min(1.0, (step + 1) / warmup_steps)
    x = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * x)))


@A('warmup_cosine_lr', 'W', 'progress over total_steps, not total - warmup')
def w(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    x = min(1.0, step / total_steps)
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * x)))


@A('warmup_cosine_lr', 'W', 'final value final_fraction (not times peak)')
def w(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    x = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return final_fraction + (peak_lr - final_fraction) * 0.5 * (1 + math.cos(math.pi * x))


# ================================================================ 10 shift_right
@A('shift_right', 'R', 'clones of the two slices')
def r(tgt):
    return tgt[:, :-1].clone(), tgt[:, 1:].clone()


@A('shift_right', 'R', 'narrow')
def r(tgt):
    n = tgt.size(1) - 1
    return tgt.narrow(1, 0, n), tgt.narrow(1, 1, n)


@A('shift_right', 'R', 'index_select with aranges')
def r(tgt):
    idx = torch.arange(tgt.size(1) - 1, device=tgt.device)
    return tgt.index_select(1, idx), tgt.index_select(1, idx + 1)


@A('shift_right', 'R', 'plain Python lists, back to a long tensor')
def r(tgt):
    rows = tgt.tolist()
    return (torch.tensor([row[:-1] for row in rows], dtype=tgt.dtype).reshape(tgt.size(0), -1),
            torch.tensor([row[1:] for row in rows], dtype=tgt.dtype).reshape(tgt.size(0), -1))


@A('shift_right', 'W', 'input and labels swapped')
def w(tgt):
    return tgt[:, 1:], tgt[:, :-1]


@A('shift_right', 'W', 'batch axis sliced')
def w(tgt):
    return tgt[:-1], tgt[1:]


@A('shift_right', 'W', 'roll: keeps length Lt')
def w(tgt):
    return tgt, torch.roll(tgt, -1, dims=1)


@A('shift_right', 'W', 'labels pad -> -100 in place on the view')
def w(tgt):
    labels = tgt[:, 1:]
    labels[labels == 0] = -100
    return tgt[:, :-1], labels


@A('shift_right', 'W', 'decoder input: <eos> replaced by <pad>')
def w(tgt):
    from tfmlib.training import EOS_ID, PAD_ID
    inp = tgt[:, :-1].clone()
    inp[inp == EOS_ID] = PAD_ID
    return inp, tgt[:, 1:]


@A('shift_right', 'W', 'float labels')
def w(tgt):
    return tgt[:, :-1], tgt[:, 1:].float()


@A('shift_right', 'W', 'prepends <bos> instead of dropping the last')
def w(tgt):
    from tfmlib.training import BOS_ID
    bos = torch.full_like(tgt[:, :1], BOS_ID)
    return torch.cat([bos, tgt[:, 1:-1]], 1), tgt[:, 1:]


@A('shift_right', 'W', 'labels drop the first two columns (off by one)')
def w(tgt):
    return tgt[:, :-1], torch.cat([tgt[:, 2:], tgt[:, -1:]], 1)


generics('shift_right', lambda t: (t[:, :-1], t[:, 1:]), ['idcache', 'shapecache', 'counter'])


# ================================================================ 10 forward
@A('forward', 'R', 'encode_source then decode_target')
def r(params, src, tgt_in, config, training=False):
    memory, src_mask = tr.encode_source(params, src, config, training)
    return tr.decode_target(params, tgt_in, memory, src_mask, config, training)


@A('forward', 'R', 'keywords, tuple unpack')
def r(params, src, tgt_in, config, training=False):
    enc = tr.encode_source(params=params, src=src, config=config, training=bool(training))
    return tr.decode_target(params=params, tgt_in=tgt_in, memory=enc[0], src_mask=enc[1],
                            config=config, training=bool(training))


@A('forward', 'R', 'rebuilt from embed_with_positions, encoder, decoder, linear')
def r(params, src, tgt_in, config, training=False):
    from tfmlib import padding_mask, target_mask
    opts = dict(norm_first=config.norm_first, dropout_p=config.dropout_p, training=training)
    x = tr.embed_with_positions(params, src, config)
    src_mask = padding_mask(src, tr.PAD_ID)
    memory = ed.encoder(x, tr.attention_layers(params, 'encoder', config), config.num_heads, src_mask,
                        final_norm=params['encoder_norm'], **opts)
    y = tr.embed_with_positions(params, tgt_in, config)
    h = ed.decoder(y, memory, tr.attention_layers(params, 'decoder', config), config.num_heads,
                   self_mask=target_mask(tgt_in, tr.PAD_ID), memory_mask=src_mask,
                   final_norm=params['decoder_norm'], **opts)
    return linear(h, params['embedding'], params['out_bias'])


def fwd_right(params, src, tgt_in, config, training=False):
    memory, src_mask = tr.encode_source(params, src, config, training)
    return tr.decode_target(params, tgt_in, memory, src_mask, config, training)


@A('forward', 'W', 'training never passed (dropout always off)')
def w(params, src, tgt_in, config, training=False):
    memory, src_mask = tr.encode_source(params, src, config)
    return tr.decode_target(params, tgt_in, memory, src_mask, config)


@A('forward', 'W', 'training only for the decoder')
def w(params, src, tgt_in, config, training=False):
    memory, src_mask = tr.encode_source(params, src, config, False)
    return tr.decode_target(params, tgt_in, memory, src_mask, config, training)


@A('forward', 'W', 'memory detached')
def w(params, src, tgt_in, config, training=False):
    memory, src_mask = tr.encode_source(params, src, config, training)
    return tr.decode_target(params, tgt_in, memory.detach(), src_mask, config, training)


@A('forward', 'W', 'src_mask of all True (padding not hidden)')
def w(params, src, tgt_in, config, training=False):
    memory, src_mask = tr.encode_source(params, src, config, training)
    return tr.decode_target(params, tgt_in, memory, torch.ones_like(src_mask), config, training)


@A('forward', 'W', 'encodes twice (debug print), uses the second memory')
def w(params, src, tgt_in, config, training=False):
    tr.encode_source(params, src, config, training)
    memory, src_mask = tr.encode_source(params, src, config, training)
    return tr.decode_target(params, tgt_in, memory, src_mask, config, training)


@A('forward', 'W', 'under torch.no_grad')
def w(params, src, tgt_in, config, training=False):
    with torch.no_grad():
        return fwd_right(params, src, tgt_in, config, training)


@A('forward', 'W', 'tgt_in shifted again inside')
def w(params, src, tgt_in, config, training=False):
    memory, src_mask = tr.encode_source(params, src, config, training)
    out = tr.decode_target(params, tgt_in[:, :-1], memory, src_mask, config, training)
    return torch.cat([out, out[:, -1:]], 1)


@A('forward', 'W', 'seeds its own dropout (torch.manual_seed(0))')
def w(params, src, tgt_in, config, training=False):
    torch.manual_seed(0)
    return fwd_right(params, src, tgt_in, config, training)


generics('forward', fwd_right, ['f64', 'idcache', 'counter'])


# ================================================================ 10 label_smoothed_cross_entropy
@A('label_smoothed_cross_entropy', 'R', 'logsumexp by hand, gather')
def r(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    lp = logits - torch.logsumexp(logits, -1, keepdim=True)
    keep = labels != ignore_index
    safe = torch.where(keep, labels, torch.zeros_like(labels))
    nll = -lp.gather(-1, safe[..., None])[..., 0]
    smooth = -lp.sum(-1) / V
    loss = ((1 - smoothing) * nll + smoothing * smooth) * keep
    return loss.sum() / keep.sum()


@A('label_smoothed_cross_entropy', 'R', 'explicit smoothed target distribution')
def r(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    lp = F.log_softmax(logits, dim=-1).reshape(-1, V)
    lab = labels.reshape(-1)
    keep = lab != ignore_index
    lp, lab = lp[keep], lab[keep]
    q = torch.full_like(lp, smoothing / V)
    q[torch.arange(lab.numel()), lab] += 1 - smoothing
    return -(q * lp).sum() / keep.sum()


@A('label_smoothed_cross_entropy', 'R', 'float64 inside, cast back')
def r(logits, labels, smoothing, ignore_index=-100):
    x = logits.double()
    lp = x.log_softmax(-1)
    keep = labels != ignore_index
    safe = labels.masked_fill(~keep, 0)
    per = -(1 - smoothing) * lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) - smoothing * lp.mean(-1)
    return (per.masked_fill(~keep, 0).sum() / keep.sum()).to(logits.dtype)


@A('label_smoothed_cross_entropy', 'R', 'one_hot einsum, mean of masked')
def r(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    lp = torch.log_softmax(logits, -1)
    keep = labels != ignore_index
    oh = F.one_hot(labels.clamp(min=0) * keep, V).to(lp.dtype)
    target = oh * (1 - smoothing) + smoothing / V
    per = -torch.einsum('...v,...v->...', target, lp)
    return per[keep].mean() if keep.any() else per.sum() * float('nan')


@A('label_smoothed_cross_entropy', 'W', 'smoothing / (V - 1) on the other classes')
def w(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    lp = logits.log_softmax(-1)
    keep = labels != ignore_index
    safe = labels.masked_fill(~keep, 0)
    tgt = -lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    others = (-lp.sum(-1) - tgt) / (V - 1)
    per = (1 - smoothing) * tgt + smoothing * others
    return per.masked_fill(~keep, 0).sum() / keep.sum()


@A('label_smoothed_cross_entropy', 'W', 'mean over every position, ignored ones as 0')
def w(logits, labels, smoothing, ignore_index=-100):
    lp = logits.log_softmax(-1)
    keep = labels != ignore_index
    safe = labels.masked_fill(~keep, 0)
    per = -(1 - smoothing) * lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) - smoothing * lp.mean(-1)
    return per.masked_fill(~keep, 0).mean()


@A('label_smoothed_cross_entropy', 'W', 'log(softmax()) naive')
def w(logits, labels, smoothing, ignore_index=-100):
    lp = torch.log(torch.softmax(logits, -1))
    keep = labels != ignore_index
    safe = labels.masked_fill(~keep, 0)
    per = -(1 - smoothing) * lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) - smoothing * lp.mean(-1)
    return per.masked_fill(~keep, 0).sum() / keep.sum()


@A('label_smoothed_cross_entropy', 'W', 'all-ignored batch returns 0 (clamp count)')
def w(logits, labels, smoothing, ignore_index=-100):
    lp = logits.log_softmax(-1)
    keep = labels != ignore_index
    safe = labels.masked_fill(~keep, 0)
    per = -(1 - smoothing) * lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) - smoothing * lp.mean(-1)
    return per.masked_fill(~keep, 0).sum() / keep.sum().clamp(min=1)


@A('label_smoothed_cross_entropy', 'W', 'calls F.cross_entropy')
def w(logits, labels, smoothing, ignore_index=-100):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                           label_smoothing=smoothing, ignore_index=ignore_index)


@A('label_smoothed_cross_entropy', 'W', 'pad id 0 hard-coded as ignored')
def w(logits, labels, smoothing, ignore_index=-100):
    lp = logits.log_softmax(-1)
    keep = (labels != ignore_index) & (labels != 0)
    safe = labels.masked_fill(~keep, 0)
    per = -(1 - smoothing) * lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) - smoothing * lp.mean(-1)
    return per.masked_fill(~keep, 0).sum() / keep.sum()


@A('label_smoothed_cross_entropy', 'W', 'ignored positions: nan * 0 (masked by multiply)')
def w(logits, labels, smoothing, ignore_index=-100):
    lp = logits.log_softmax(-1)
    keep = labels != ignore_index
    safe = labels.masked_fill(~keep, 0)
    per = -(1 - smoothing) * lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) - smoothing * lp.mean(-1)
    return (per * keep).sum() / keep.sum()


@A('label_smoothed_cross_entropy', 'W', 'mean per row, then mean of rows')
def w(logits, labels, smoothing, ignore_index=-100):
    lp = logits.log_softmax(-1)
    keep = labels != ignore_index
    safe = labels.masked_fill(~keep, 0)
    per = -(1 - smoothing) * lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) - smoothing * lp.mean(-1)
    if per.dim() < 2:
        return per.masked_fill(~keep, 0).sum() / keep.sum()
    rows = per.masked_fill(~keep, 0).sum(-1) / keep.sum(-1).clamp(min=1)
    return rows.mean()


@A('label_smoothed_cross_entropy', 'W', 'smoothing spread with logits.mean (not log-probs)')
def w(logits, labels, smoothing, ignore_index=-100):
    lp = logits.log_softmax(-1)
    keep = labels != ignore_index
    safe = labels.masked_fill(~keep, 0)
    per = -(1 - smoothing) * lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) - smoothing * logits.mean(-1)
    return per.masked_fill(~keep, 0).sum() / keep.sum()


# ================================================================ b1 decoder_block
def blk_right(x, block, num_heads, mask=None):
    if mask is None:
        mask = causal_mask(x.size(1), device=x.device)
    n1, n2 = block['norm1'], block['norm2']
    h = layer_norm(x, n1['gamma'], n1['beta'])
    x = x + mha(h, h, block['attention'], num_heads, mask)
    return x + feed_forward(layer_norm(x, n2['gamma'], n2['beta']), block['ffn'])


@A('decoder_block', 'R', 'einsum attention, own LN, arange causal mask')
def r(x, block, num_heads, mask=None):
    L = x.size(1)
    if mask is None:
        i = torch.arange(L, device=x.device)
        mask = (i[None, :] <= i[:, None])[None, None]
    n1, n2 = block['norm1'], block['norm2']
    h = ln_hand(x, n1['gamma'], n1['beta'])
    x = x + mha_einsum(h, h, block['attention'], num_heads, mask)
    return x + ffn_hand(ln_hand(x, n2['gamma'], n2['beta']), block['ffn'])


@A('decoder_block', 'R', 'float32 inside for half, float64 kept')
def r(x, block, num_heads, mask=None):
    d = torch.float64 if x.dtype == torch.float64 else torch.float32
    if mask is None:
        mask = causal_mask(x.size(1), device=x.device)
    n1, n2 = block['norm1'], block['norm2']
    c = lambda t: t.to(d)
    h = c(x)
    a = ln_hand(h, c(n1['gamma']), c(n1['beta']))
    h = h + mha_einsum(a, a, block['attention'], num_heads, mask, up=d)
    h = h + ffn_hand(ln_hand(h, c(n2['gamma']), c(n2['beta'])), block['ffn'], up=d)
    return h.to(x.dtype)


@A('decoder_block', 'R', 'residual_sublayer with norm_first=True')
def r(x, block, num_heads, mask=None):
    if mask is None:
        mask = causal_mask(x.size(1), device=x.device)
    x = residual_sublayer(x, lambda h: mha(h, h, block['attention'], num_heads, mask), block['norm1'], norm_first=True)
    return residual_sublayer(x, lambda h: feed_forward(h, block['ffn']), block['norm2'], norm_first=True)


@A('decoder_block', 'R', 'library encoder_layer(norm_first=True) with a causal mask')
def r(x, block, num_heads, mask=None):
    if mask is None:
        mask = causal_mask(x.size(1), device=x.device)
    p = {'self_attn': block['attention'], 'ffn': block['ffn'], 'norm1': block['norm1'], 'norm2': block['norm2']}
    return ed.encoder_layer(x, p, num_heads, mask, norm_first=True)


@A('decoder_block', 'W', 'Post-LN')
def w(x, block, num_heads, mask=None):
    if mask is None:
        mask = causal_mask(x.size(1), device=x.device)
    n1, n2 = block['norm1'], block['norm2']
    x = layer_norm(x + mha(x, x, block['attention'], num_heads, mask), n1['gamma'], n1['beta'])
    return layer_norm(x + feed_forward(x, block['ffn']), n2['gamma'], n2['beta'])


@A('decoder_block', 'W', 'mask None -> no mask at all')
def w(x, block, num_heads, mask=None):
    n1, n2 = block['norm1'], block['norm2']
    h = layer_norm(x, n1['gamma'], n1['beta'])
    x = x + mha(h, h, block['attention'], num_heads, mask)
    return x + feed_forward(layer_norm(x, n2['gamma'], n2['beta']), block['ffn'])


@A('decoder_block', 'W', 'passed mask combined with causal')
def w(x, block, num_heads, mask=None):
    c = causal_mask(x.size(1), device=x.device)
    return blk_right(x, block, num_heads, c if mask is None else (mask & c))


@A('decoder_block', 'W', 'triu causal (future instead of past)')
def w(x, block, num_heads, mask=None):
    if mask is None:
        mask = torch.ones(x.size(1), x.size(1), dtype=torch.bool).triu()[None, None]
    return blk_right(x, block, num_heads, mask)


@A('decoder_block', 'W', 'causal mask strictly below the diagonal (tril(-1))')
def w(x, block, num_heads, mask=None):
    if mask is None:
        mask = torch.ones(x.size(1), x.size(1), dtype=torch.bool).tril(-1)[None, None]
    return blk_right(x, block, num_heads, mask)


@A('decoder_block', 'W', 'FFN reads the un-normed x')
def w(x, block, num_heads, mask=None):
    if mask is None:
        mask = causal_mask(x.size(1), device=x.device)
    n1 = block['norm1']
    h = layer_norm(x, n1['gamma'], n1['beta'])
    x = x + mha(h, h, block['attention'], num_heads, mask)
    return x + feed_forward(x, block['ffn'])


@A('decoder_block', 'W', 'residual from the normed h')
def w(x, block, num_heads, mask=None):
    if mask is None:
        mask = causal_mask(x.size(1), device=x.device)
    n1, n2 = block['norm1'], block['norm2']
    h = layer_norm(x, n1['gamma'], n1['beta'])
    x = h + mha(h, h, block['attention'], num_heads, mask)
    return x + feed_forward(layer_norm(x, n2['gamma'], n2['beta']), block['ffn'])


@A('decoder_block', 'R', 'causal mask built by a roundabout test (ends up causal_mask(L): label corrected)')
def w(x, block, num_heads, mask=None):
    if mask is None:
        mask = causal_mask(max(x.size(0), 1), device=x.device) if x.size(0) == x.size(1) else causal_mask(x.size(1), device=x.device)
        mask = mask if mask.size(-1) == x.size(1) else causal_mask(x.size(1))
    return blk_right(x, block, num_heads, mask)


@A('decoder_block', 'W', 'calls the library decoder_block')
def w(x, block, num_heads, mask=None):
    return lmm.decoder_block(x, block, num_heads, mask)


generics('decoder_block', blk_right, ['f32', 'mutate', 'buffer'])


# ================================================================ b1 lm_forward
def lmf_right(params, ids, config):
    L = ids.size(1)
    x = embed(ids, params['token_embedding']) + params['position_embedding'][:L]
    for b in params['blocks']:
        x = blk_right(x, b, config.num_heads)
    h = layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta'])
    return linear(h, params['token_embedding'])


@A('lm_forward', 'R', 'one_hot @ table, einsum tied output')
def r(params, ids, config):
    T = params['token_embedding']
    V, D = T.shape
    L = ids.size(1)
    x = F.one_hot(ids, V).to(T.dtype) @ T * math.sqrt(D) + params['position_embedding'][:L]
    for b in params['blocks']:
        x = blk_right(x, b, config.num_heads)
    h = ln_hand(x, params['final_norm']['gamma'], params['final_norm']['beta'])
    return torch.einsum('bld,vd->blv', h, T)


@A('lm_forward', 'R', 'library decoder_block, index_select positions')
def r(params, ids, config):
    pos = params['position_embedding'].index_select(0, torch.arange(ids.size(1), device=ids.device))
    x = embed(ids, params['token_embedding']) + pos
    for b in params['blocks']:
        x = lmm.decoder_block(x, b, config.num_heads)
    h = layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta'])
    return h @ params['token_embedding'].T


@A('lm_forward', 'R', 'float32-inside blocks for half, reduce')
def r(params, ids, config):
    def blk(x, block):
        return decoder_block_f32(x, block, config.num_heads)
    x = embed(ids, params['token_embedding']) + params['position_embedding'][:ids.size(1)]
    x = functools.reduce(blk, params['blocks'], x)
    h = layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta'])
    return linear(h, params['token_embedding'])


def decoder_block_f32(x, block, num_heads, mask=None):
    d = torch.float64 if x.dtype == torch.float64 else torch.float32
    if mask is None:
        mask = causal_mask(x.size(1), device=x.device)
    n1, n2 = block['norm1'], block['norm2']
    c = lambda t: t.to(d)
    h = c(x)
    a = ln_hand(h, c(n1['gamma']), c(n1['beta']))
    h = h + mha_einsum(a, a, block['attention'], num_heads, mask, up=d)
    h = h + ffn_hand(ln_hand(h, c(n2['gamma']), c(n2['beta'])), block['ffn'], up=d)
    return h.to(x.dtype)


@A('lm_forward', 'W', 'embedding not scaled')
def w(params, ids, config):
    x = params['token_embedding'][ids] + params['position_embedding'][:ids.size(1)]
    for b in params['blocks']:
        x = blk_right(x, b, config.num_heads)
    h = layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta'])
    return linear(h, params['token_embedding'])


@A('lm_forward', 'W', 'scaled by sqrt(V) (table.size(0))')
def w(params, ids, config):
    T = params['token_embedding']
    x = T[ids] * math.sqrt(T.size(0)) + params['position_embedding'][:ids.size(1)]
    for b in params['blocks']:
        x = blk_right(x, b, config.num_heads)
    h = layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta'])
    return linear(h, T)


@A('lm_forward', 'W', 'positions off by one [1:L+1] when room')
def w(params, ids, config):
    L = ids.size(1)
    P = params['position_embedding']
    pos = P[1:L + 1] if L < P.size(0) else P[:L]
    x = embed(ids, params['token_embedding']) + pos
    for b in params['blocks']:
        x = blk_right(x, b, config.num_heads)
    h = layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta'])
    return linear(h, params['token_embedding'])


@A('lm_forward', 'W', 'no final LayerNorm')
def w(params, ids, config):
    x = embed(ids, params['token_embedding']) + params['position_embedding'][:ids.size(1)]
    for b in params['blocks']:
        x = blk_right(x, b, config.num_heads)
    return linear(x, params['token_embedding'])


@A('lm_forward', 'W', 'only the first block, when several')
def w(params, ids, config):
    x = embed(ids, params['token_embedding']) + params['position_embedding'][:ids.size(1)]
    x = blk_right(x, params['blocks'][0], config.num_heads)
    h = layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta'])
    return linear(h, params['token_embedding'])


@A('lm_forward', 'W', 'sinusoidal positions instead of the learned table')
def w(params, ids, config):
    from tfmlib import sinusoidal_positional_encoding
    T = params['token_embedding']
    pe = sinusoidal_positional_encoding(config.max_len, T.size(1), dtype=T.dtype)
    x = embed(ids, T) + pe[:ids.size(1)]
    for b in params['blocks']:
        x = blk_right(x, b, config.num_heads)
    h = layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta'])
    return linear(h, T)


@A('lm_forward', 'W', 'num_heads hard-coded 4')
def w(params, ids, config):
    x = embed(ids, params['token_embedding']) + params['position_embedding'][:ids.size(1)]
    for b in params['blocks']:
        x = blk_right(x, b, 4)
    h = layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta'])
    return linear(h, params['token_embedding'])


@A('lm_forward', 'W', 'positions added in place to the table row view (+=)')
def w(params, ids, config):
    pos = params['position_embedding'][:ids.size(1)]
    x = embed(ids, params['token_embedding'])
    x = x + pos
    for b in params['blocks']:
        x = blk_right(x, b, config.num_heads)
    h = layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta'], eps=1e-6)
    return linear(h, params['token_embedding'])


@A('lm_forward', 'W', 'calls the library lm_forward')
def w(params, ids, config):
    return lmm.lm_forward(params, ids, config)


generics('lm_forward', lmf_right, ['f32', 'shapecache', 'counter'])


# ================================================================ b1 lm_loss
def lml_right(params, ids, config):
    logits = lmf_right(params, ids[:, :-1], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))


@A('lm_loss', 'R', 'library lm_forward + logsumexp - gather')
def r(params, ids, config):
    logits = lmm.lm_forward(params, ids[:, :-1], config)
    tgt = ids[:, 1:]
    nll = torch.logsumexp(logits, -1) - logits.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
    return nll.mean()


@A('lm_loss', 'R', 'nll_loss of log_softmax, flatten')
def r(params, ids, config):
    logits = lmf_right(params, ids[:, :-1], config)
    return F.nll_loss(F.log_softmax(logits, -1).flatten(0, 1), ids[:, 1:].flatten())


@A('lm_loss', 'R', 'float64 inside, cast back')
def r(params, ids, config):
    logits = lmm.lm_forward(params, ids[:, :-1], config)
    lp = logits.double().log_softmax(-1)
    return (-lp.gather(-1, ids[:, 1:, None]).mean()).to(logits.dtype)


@A('lm_loss', 'R', 'per-row mean then mean of rows (equal lengths)')
def r(params, ids, config):
    logits = lmm.lm_forward(params, ids[:, :-1], config)
    lp = logits.log_softmax(-1)
    return (-lp.gather(-1, ids[:, 1:, None]).squeeze(-1)).mean(1).mean()


@A('lm_loss', 'W', 'no shift: predicts ids from ids')
def w(params, ids, config):
    logits = lmm.lm_forward(params, ids[:, :-1], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, :-1].reshape(-1))


@A('lm_loss', 'W', 'forward on all ids, drop the last logit')
def w(params, ids, config):
    logits = lmm.lm_forward(params, ids, config)[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))


@A('lm_loss', 'W', 'sum instead of mean')
def w(params, ids, config):
    logits = lmm.lm_forward(params, ids[:, :-1], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1), reduction='sum')


@A('lm_loss', 'W', 'only the last position scored')
def w(params, ids, config):
    logits = lmm.lm_forward(params, ids[:, :-1], config)
    return F.cross_entropy(logits[:, -1], ids[:, -1])


@A('lm_loss', 'W', 'log(softmax()) naive')
def w(params, ids, config):
    logits = lmm.lm_forward(params, ids[:, :-1], config)
    return -torch.log(torch.softmax(logits, -1)).gather(-1, ids[:, 1:, None]).mean()


@A('lm_loss', 'W', 'reshape transposed: logits.transpose(1,2) as (N, V)')
def w(params, ids, config):
    logits = lmm.lm_forward(params, ids[:, :-1], config)
    V = logits.size(-1)
    return F.cross_entropy(logits.transpose(1, 2).reshape(-1, V), ids[:, 1:].reshape(-1))


@A('lm_loss', 'W', 'targets from ids[:, 1:] but inputs ids[:, 1:] too')
def w(params, ids, config):
    logits = lmm.lm_forward(params, ids[:, 1:], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))


@A('lm_loss', 'W', 'ignore_index=0 (pads out char id 0)')
def w(params, ids, config):
    logits = lmm.lm_forward(params, ids[:, :-1], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1), ignore_index=0)


@A('lm_loss', 'W', 'calls library lm_loss')
def w(params, ids, config):
    return lmm.lm_loss(params, ids, config)


generics('lm_loss', lml_right, ['f32', 'shapecache', 'counter'])


# ================================================================ b2 next_token_probs
@A('next_token_probs', 'R', 'hand softmax with max subtracted')
def r(logits, temperature=1.0):
    z = logits / temperature
    z = z - z.amax(-1, keepdim=True)
    e = z.exp()
    return e / e.sum(-1, keepdim=True)


@A('next_token_probs', 'R', 'exp(log_softmax)')
def r(logits, temperature=1.0):
    return torch.log_softmax(logits / temperature, dim=-1).exp()


@A('next_token_probs', 'R', 'float32 inside, cast back')
def r(logits, temperature=1.0):
    up = torch.float64 if logits.dtype == torch.float64 else torch.float32
    return torch.softmax(logits.to(up) / temperature, -1).to(logits.dtype)


@A('next_token_probs', 'R', 'multiply by 1/T, F.softmax')
def r(logits, temperature=1.0):
    return F.softmax(logits * (1.0 / temperature), dim=-1)


@A('next_token_probs', 'W', 'probs divided by T after softmax')
def w(logits, temperature=1.0):
    return torch.softmax(logits, -1) / temperature


@A('next_token_probs', 'W', 'multiplied by T')
def w(logits, temperature=1.0):
    return torch.softmax(logits * temperature, -1)


@A('next_token_probs', 'W', 'softmax over dim 0')
def w(logits, temperature=1.0):
    return torch.softmax(logits / temperature, 0)


@A('next_token_probs', 'W', 'softmax(logits)**(1/T) renormalised (underflows)')
def w(logits, temperature=1.0):
    p = torch.softmax(logits, -1) ** (1 / temperature)
    return p / p.sum(-1, keepdim=True)


@A('next_token_probs', 'W', 'T clamped to >= 0.05')
def w(logits, temperature=1.0):
    return torch.softmax(logits / max(temperature, 0.05), -1)


@A('next_token_probs', 'W', 'hand softmax without max (overflow)')
def w(logits, temperature=1.0):
    e = (logits / temperature).exp()
    return e / e.sum(-1, keepdim=True)


@A('next_token_probs', 'W', 'divides logits in place')
def w(logits, temperature=1.0):
    return torch.softmax(logits.div_(temperature) if not logits.requires_grad else logits / temperature, -1)


@A('next_token_probs', 'W', 'softmax in float16 for speed')
def w(logits, temperature=1.0):
    return torch.softmax((logits / temperature).half(), -1).to(logits.dtype) if logits.dtype == torch.float32 else torch.softmax(logits / temperature, -1)


@A('next_token_probs', 'W', 'T == 1 fast path returns the logits')
def w(logits, temperature=1.0):
    if temperature == 1.0:
        return logits.softmax(-1) if logits.dim() > 1 else logits
    return torch.softmax(logits / temperature, -1)


# ================================================================ b2 top_k_filter
@A('top_k_filter', 'R', 'sort, threshold, torch.where')
def r(logits, k):
    k = min(k, logits.size(-1))
    thr = logits.sort(-1, descending=True).values[..., k - 1:k]
    return torch.where(logits >= thr, logits, torch.full_like(logits, float('-inf')))


@A('top_k_filter', 'R', 'kthvalue of the negated logits')
def r(logits, k):
    V = logits.size(-1)
    k = min(k, V)
    thr = -(-logits).kthvalue(k, dim=-1, keepdim=True).values
    return logits.masked_fill(logits < thr, float('-inf'))


@A('top_k_filter', 'R', 'python loop over rows')
def r(logits, k):
    flat = logits.reshape(-1, logits.size(-1))
    out = flat.clone()
    for i in range(flat.size(0)):
        vals = sorted(flat[i].tolist(), reverse=True)
        thr = vals[min(k, len(vals)) - 1]
        out[i][flat[i] < thr] = float('-inf')
    return out.reshape(logits.shape)


@A('top_k_filter', 'R', 'ascending sort, V-k index, float32 compare')
def r(logits, k):
    V = logits.size(-1)
    thr = logits.sort(-1).values[..., max(V - k, 0):max(V - k, 0) + 1]
    return logits.masked_fill(logits < thr, float('-inf'))


@A('top_k_filter', 'W', 'scatter topk indices (ties dropped)')
def w(logits, k):
    k = min(k, logits.size(-1))
    idx = logits.topk(k, -1).indices
    out = torch.full_like(logits, float('-inf'))
    return out.scatter(-1, idx, logits.gather(-1, idx))


@A('top_k_filter', 'W', 'topk with k > V crashes')
def w(logits, k):
    thr = logits.topk(k, -1).values[..., -1:]
    return logits.masked_fill(logits < thr, float('-inf'))


@A('top_k_filter', 'W', 'strict > threshold (keeps k-1)')
def w(logits, k):
    k = min(k, logits.size(-1))
    thr = logits.topk(k, -1).values[..., -1:]
    return logits.masked_fill(~(logits > thr), float('-inf')) if k < logits.size(-1) else logits


@A('top_k_filter', 'W', 'others set to a large negative, not -inf')
def w(logits, k):
    k = min(k, logits.size(-1))
    thr = logits.topk(k, -1).values[..., -1:]
    return logits.masked_fill(logits < thr, torch.finfo(logits.dtype).min)


@A('top_k_filter', 'W', 'in place masked_fill_ on the input')
def w(logits, k):
    k = min(k, logits.size(-1))
    thr = logits.topk(k, -1).values[..., -1:]
    return logits.masked_fill_(logits < thr, float('-inf'))


@A('top_k_filter', 'W', 'threshold from the flattened tensor (whole batch)')
def w(logits, k):
    k = min(k, logits.size(-1))
    thr = logits.reshape(-1).topk(k).values[-1]
    return logits.masked_fill(logits < thr, float('-inf'))


@A('top_k_filter', 'W', 'k-th of the sorted copy but threshold column k (off by one)')
def w(logits, k):
    V = logits.size(-1)
    k = min(k, V)
    s = logits.sort(-1, descending=True).values
    thr = s[..., min(k, V - 1):min(k, V - 1) + 1]
    return logits.masked_fill(logits < thr, float('-inf'))


@A('top_k_filter', 'W', 'threshold in float16')
def w(logits, k):
    k = min(k, logits.size(-1))
    thr = logits.topk(k, -1).values[..., -1:].half().to(logits.dtype)
    return logits.masked_fill(logits < thr, float('-inf'))


# ================================================================ b2 top_p_filter
@A('top_p_filter', 'R', 'sort, exclusive cumsum (cumsum shifted right)')
def r(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = s.softmax(-1)
    before = torch.cat([torch.zeros_like(pr[..., :1]), pr.cumsum(-1)[..., :-1]], -1)
    kept = before < p
    last = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < last, float('-inf'))


@A('top_p_filter', 'R', 'python loop per row')
def r(logits, p):
    flat = logits.reshape(-1, logits.size(-1))
    out = flat.clone()
    for i in range(flat.size(0)):
        row = flat[i]
        order = row.argsort(descending=True)
        probs = row.softmax(-1)[order]
        mass = probs.new_zeros(())
        last = row[order[0]]
        for j in range(row.numel()):
            if mass >= p:
                break
            last = row[order[j]]
            mass = mass + probs[j]
        out[i][row < last] = float('-inf')
    return out.reshape(logits.shape)


@A('top_p_filter', 'R', 'count of kept tokens, gather the threshold')
def r(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = s.softmax(-1)
    n = ((pr.cumsum(-1) - pr) < p).sum(-1, keepdim=True).clamp(min=1)
    thr = s.gather(-1, n - 1)
    return logits.masked_fill(logits < thr, float('-inf'))


@A('top_p_filter', 'R', 'softmax in float64, cumsum in the logits dtype')
def r(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = s.double().softmax(-1).to(logits.dtype)
    kept = (pr.cumsum(-1) - pr) < p
    last = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < last, float('-inf'))


@A('top_p_filter', 'W', 'HF style: remove cumsum > p shifted (keeps one more at exact p)')
def w(logits, p):
    s, idx = logits.sort(-1, descending=True)
    c = s.softmax(-1).cumsum(-1)
    remove = c > p
    remove[..., 1:] = remove[..., :-1].clone()
    remove[..., 0] = False
    last = s.masked_fill(remove, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < last, float('-inf'))


@A('top_p_filter', 'W', 'keeps cumsum < p (drops the token that reaches p)')
def w(logits, p):
    s = logits.sort(-1, descending=True).values
    c = s.softmax(-1).cumsum(-1)
    kept = c < p
    kept[..., 0] = True
    last = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < last, float('-inf'))


@A('top_p_filter', 'W', 'scatter back by sorted indices (ties at the cut dropped)')
def w(logits, p):
    s, idx = logits.sort(-1, descending=True)
    pr = s.softmax(-1)
    kept = (pr.cumsum(-1) - pr) < p
    mask = torch.zeros_like(kept).scatter(-1, idx, kept)
    return logits.masked_fill(~mask, float('-inf'))


@A('top_p_filter', 'W', 'returns the sorted logits')
def w(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = s.softmax(-1)
    kept = (pr.cumsum(-1) - pr) < p
    return s.masked_fill(~kept, float('-inf'))


@A('top_p_filter', 'W', 'cumsum on the unsorted probabilities')
def w(logits, p):
    pr = logits.softmax(-1)
    kept = (pr.cumsum(-1) - pr) < p
    return logits.masked_fill(~kept, float('-inf'))


@A('top_p_filter', 'W', 'p compared with logits, not probabilities')
def w(logits, p):
    s = logits.sort(-1, descending=True).values
    kept = (s.cumsum(-1) - s) < p
    kept[..., 0] = True
    last = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < last, float('-inf'))


@A('top_p_filter', 'W', 'probs over the whole batch (softmax dim 0)')
def w(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = s.softmax(0)
    kept = (pr.cumsum(-1) - pr) < p
    last = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < last, float('-inf'))


@A('top_p_filter', 'W', 'float16 cumsum')
def w(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = s.softmax(-1).half()
    kept = (pr.cumsum(-1) - pr) < p
    last = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < last, float('-inf'))


@A('top_p_filter', 'W', 'ascending sort: drop tail while tail mass <= 1 - p (one token too many off)')
def w(logits, p):
    s = logits.sort(-1).values
    pr = s.softmax(-1)
    drop = pr.cumsum(-1) < (1 - p)
    first = s.masked_fill(drop, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < first, float('-inf'))


# ================================================================ b2 cached_self_attention
def csa_right(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params['w_q'], params.get('b_q')), num_heads)
    k = split_heads(linear(x, params['w_k'], params.get('b_k')), num_heads)
    v = split_heads(linear(x, params['w_v'], params.get('b_v')), num_heads)
    if cache is not None:
        k = torch.cat([cache['key'], k], 2)
        v = torch.cat([cache['value'], v], 2)
    Ln, Lk = x.size(1), k.size(2)
    mask = causal_mask(Lk, device=x.device)[:, :, Lk - Ln:]
    ctx, _ = scaled_dot_product_attention(q, k, v, mask)
    return linear(merge_heads(ctx), params['w_o'], params.get('b_o')), {'key': k, 'value': v}


A('cached_self_attention', 'R', 'library pieces, cat on dim 2, bottom rows of causal')(csa_right)


@A('cached_self_attention', 'R', 'einsum, offset mask from aranges, own softmax')
def r(x, params, num_heads, cache=None):
    B, Ln, D = x.shape
    H = num_heads; dk = D // H
    def proj(w, b):
        y = torch.einsum('bld,od->blo', x, params[w])
        if params.get(b) is not None:
            y = y + params[b]
        return y.reshape(B, Ln, H, dk).permute(0, 2, 1, 3)
    q, k, v = proj('w_q', 'b_q'), proj('w_k', 'b_k'), proj('w_v', 'b_v')
    Lp = 0 if cache is None else cache['key'].size(2)
    if cache is not None:
        k = torch.cat([cache['key'], k], 2); v = torch.cat([cache['value'], v], 2)
    qpos = torch.arange(Lp, Lp + Ln, device=x.device)[:, None]
    kpos = torch.arange(Lp + Ln, device=x.device)[None, :]
    s = torch.einsum('bhqd,bhkd->bhqk', q, k) / math.sqrt(dk)
    s = s.masked_fill(kpos > qpos, float('-inf'))
    w = softmax_hand(s)
    ctx = torch.einsum('bhqk,bhkd->bqhd', w, v).reshape(B, Ln, D)
    out = torch.einsum('bld,od->blo', ctx, params['w_o'])
    if params.get('b_o') is not None:
        out = out + params['b_o']
    return out, {'key': k, 'value': v}


@A('cached_self_attention', 'R', 'attention in float32 inside, cache kept in the input dtype')
def r(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params['w_q'], params.get('b_q')), num_heads)
    k = split_heads(linear(x, params['w_k'], params.get('b_k')), num_heads)
    v = split_heads(linear(x, params['w_v'], params.get('b_v')), num_heads)
    if cache is not None:
        k = torch.cat([cache['key'], k], 2); v = torch.cat([cache['value'], v], 2)
    up = torch.float64 if x.dtype == torch.float64 else torch.float32
    Ln, Lk = x.size(1), k.size(2)
    mask = torch.ones(Ln, Lk, dtype=torch.bool).tril(Lk - Ln)
    s = (q.to(up) @ k.to(up).transpose(-2, -1)) / math.sqrt(q.size(-1))
    s = s.masked_fill(~mask, float('-inf'))
    ctx = (s.softmax(-1) @ v.to(up)).to(x.dtype)
    return linear(merge_heads(ctx), params['w_o'], params.get('b_o')), {'key': k, 'value': v}


@A('cached_self_attention', 'W', 'causal mask from the top rows (no offset)')
def w(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params['w_q'], params.get('b_q')), num_heads)
    k = split_heads(linear(x, params['w_k'], params.get('b_k')), num_heads)
    v = split_heads(linear(x, params['w_v'], params.get('b_v')), num_heads)
    if cache is not None:
        k = torch.cat([cache['key'], k], 2); v = torch.cat([cache['value'], v], 2)
    mask = causal_mask(k.size(2))[:, :, :x.size(1)]
    ctx, _ = scaled_dot_product_attention(q, k, v, mask)
    return linear(merge_heads(ctx), params['w_o'], params.get('b_o')), {'key': k, 'value': v}


@A('cached_self_attention', 'W', 'no mask (fine for one new token)')
def w(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params['w_q'], params.get('b_q')), num_heads)
    k = split_heads(linear(x, params['w_k'], params.get('b_k')), num_heads)
    v = split_heads(linear(x, params['w_v'], params.get('b_v')), num_heads)
    if cache is not None:
        k = torch.cat([cache['key'], k], 2); v = torch.cat([cache['value'], v], 2)
    ctx, _ = scaled_dot_product_attention(q, k, v)
    return linear(merge_heads(ctx), params['w_o'], params.get('b_o')), {'key': k, 'value': v}


@A('cached_self_attention', 'W', 'new cache holds only the new keys')
def w(x, params, num_heads, cache=None):
    out, c = csa_right(x, params, num_heads, cache)
    Ln = x.size(1)
    return out, {'key': c['key'][:, :, -Ln:], 'value': c['value'][:, :, -Ln:]}


@A('cached_self_attention', 'W', 'new keys put before the cached ones')
def w(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params['w_q'], params.get('b_q')), num_heads)
    k = split_heads(linear(x, params['w_k'], params.get('b_k')), num_heads)
    v = split_heads(linear(x, params['w_v'], params.get('b_v')), num_heads)
    if cache is not None:
        k = torch.cat([k, cache['key']], 2); v = torch.cat([v, cache['value']], 2)
    Ln, Lk = x.size(1), k.size(2)
    mask = causal_mask(Lk)[:, :, Lk - Ln:]
    ctx, _ = scaled_dot_product_attention(q, k, v, mask)
    return linear(merge_heads(ctx), params['w_o'], params.get('b_o')), {'key': k, 'value': v}


@A('cached_self_attention', 'W', 'updates the caller cache dict in place')
def w(x, params, num_heads, cache=None):
    out, c = csa_right(x, params, num_heads, cache)
    if cache is not None:
        cache['key'], cache['value'] = c['key'], c['value']
        return out, cache
    return out, c


@A('cached_self_attention', 'W', 'cache split with reshape straight to (B, H, L, d_k)')
def w(x, params, num_heads, cache=None):
    B, Ln, D = x.shape
    sp = lambda t: t.reshape(B, num_heads, Ln, D // num_heads)
    q = sp(linear(x, params['w_q'], params.get('b_q')))
    k = sp(linear(x, params['w_k'], params.get('b_k')))
    v = sp(linear(x, params['w_v'], params.get('b_v')))
    if cache is not None:
        k = torch.cat([cache['key'], k], 2); v = torch.cat([cache['value'], v], 2)
    Lk = k.size(2)
    ctx, _ = scaled_dot_product_attention(q, k, v, causal_mask(Lk)[:, :, Lk - Ln:])
    return linear(merge_heads(ctx), params['w_o'], params.get('b_o')), {'key': k, 'value': v}


@A('cached_self_attention', 'W', 'cache stores keys before the bias is added')
def w(x, params, num_heads, cache=None):
    out, c = csa_right(x, params, num_heads, cache)
    Ln = x.size(1)
    kb = split_heads(linear(x, params['w_k']), num_heads)
    key = torch.cat([c['key'][:, :, :-Ln], kb], 2)
    return out, {'key': key, 'value': c['value']}


@A('cached_self_attention', 'W', 'keeps the last 64 positions only (sliding window)')
def w(x, params, num_heads, cache=None):
    if cache is not None and cache['key'].size(2) > 64:
        cache = {'key': cache['key'][:, :, -64:], 'value': cache['value'][:, :, -64:]}
    return csa_right(x, params, num_heads, cache)


generics('cached_self_attention', csa_right, ['f32', 'idcache', 'buffer'])


# ================================================================ b2 lm_step
def lms_right(params, ids, config, caches=None):
    start = 0 if caches is None else caches[0]['key'].size(2)
    x = embed(ids, params['token_embedding']) + params['position_embedding'][start:start + ids.size(1)]
    new = []
    for i, b in enumerate(params['blocks']):
        h = layer_norm(x, b['norm1']['gamma'], b['norm1']['beta'])
        a, c = gen.cached_self_attention(h, b['attention'], config.num_heads, None if caches is None else caches[i])
        x = x + a
        x = x + feed_forward(layer_norm(x, b['norm2']['gamma'], b['norm2']['beta']), b['ffn'])
        new.append(c)
    h = layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta'])
    return linear(h, params['token_embedding']), new


A('lm_step', 'R', 'library cached_self_attention')(lms_right)


@A('lm_step', 'R', 'my own cached attention, zip over blocks and caches')
def r(params, ids, config, caches=None):
    blocks = params['blocks']
    caches_in = caches if caches is not None else [None] * len(blocks)
    start = 0 if caches is None else caches[0]['value'].shape[-2]
    pos = params['position_embedding'][torch.arange(start, start + ids.size(1))]
    x = embed(ids, params['token_embedding']) + pos
    new = []
    for b, c in zip(blocks, caches_in):
        a, c2 = csa_right(ln_hand(x, b['norm1']['gamma'], b['norm1']['beta']), b['attention'], config.num_heads, c)
        x = x + a
        x = x + ffn_hand(ln_hand(x, b['norm2']['gamma'], b['norm2']['beta']), b['ffn'])
        new.append(c2)
    return torch.einsum('bld,vd->blv', layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta']), params['token_embedding']), new


@A('lm_step', 'R', 'one_hot embedding, float32-inside LN for half')
def r(params, ids, config, caches=None):
    T = params['token_embedding']
    start = 0 if caches is None else caches[0]['key'].size(2)
    x = F.one_hot(ids, T.size(0)).to(T.dtype) @ T * math.sqrt(T.size(1))
    x = x + params['position_embedding'][start:start + ids.size(1)]
    ln = (lambda t, n: ln32(t, n['gamma'], n['beta'])) if T.dtype in (torch.float16, torch.bfloat16) else (lambda t, n: layer_norm(t, n['gamma'], n['beta']))
    new = []
    for i, b in enumerate(params['blocks']):
        a, c = gen.cached_self_attention(ln(x, b['norm1']), b['attention'], config.num_heads, caches[i] if caches else None)
        x = x + a
        x = x + feed_forward(ln(x, b['norm2']), b['ffn'])
        new.append(c)
    return linear(ln(x, params['final_norm']), T), new


@A('lm_step', 'W', 'positions restart at 0')
def w(params, ids, config, caches=None):
    x = embed(ids, params['token_embedding']) + params['position_embedding'][:ids.size(1)]
    new = []
    for i, b in enumerate(params['blocks']):
        h = layer_norm(x, b['norm1']['gamma'], b['norm1']['beta'])
        a, c = gen.cached_self_attention(h, b['attention'], config.num_heads, None if caches is None else caches[i])
        x = x + a
        x = x + feed_forward(layer_norm(x, b['norm2']['gamma'], b['norm2']['beta']), b['ffn'])
        new.append(c)
    h = layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta'])
    return linear(h, params['token_embedding']), new


@A('lm_step', 'W', 'L_past read from the head axis (size(1))')
def w(params, ids, config, caches=None):
    start = 0 if caches is None else caches[0]['key'].size(1)
    x = embed(ids, params['token_embedding']) + params['position_embedding'][start:start + ids.size(1)]
    new = []
    for i, b in enumerate(params['blocks']):
        h = layer_norm(x, b['norm1']['gamma'], b['norm1']['beta'])
        a, c = gen.cached_self_attention(h, b['attention'], config.num_heads, None if caches is None else caches[i])
        x = x + a
        x = x + feed_forward(layer_norm(x, b['norm2']['gamma'], b['norm2']['beta']), b['ffn'])
        new.append(c)
    h = layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta'])
    return linear(h, params['token_embedding']), new


@A('lm_step', 'W', 'first block cache for every block')
def w(params, ids, config, caches=None):
    start = 0 if caches is None else caches[0]['key'].size(2)
    x = embed(ids, params['token_embedding']) + params['position_embedding'][start:start + ids.size(1)]
    new = []
    for i, b in enumerate(params['blocks']):
        h = layer_norm(x, b['norm1']['gamma'], b['norm1']['beta'])
        a, c = gen.cached_self_attention(h, b['attention'], config.num_heads, None if caches is None else caches[0])
        x = x + a
        x = x + feed_forward(layer_norm(x, b['norm2']['gamma'], b['norm2']['beta']), b['ffn'])
        new.append(c)
    h = layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta'])
    return linear(h, params['token_embedding']), new


@A('lm_step', 'W', 'no final LayerNorm')
def w(params, ids, config, caches=None):
    logits, new = lms_right(params, ids, config, caches)
    start = 0 if caches is None else caches[0]['key'].size(2)
    x = embed(ids, params['token_embedding']) + params['position_embedding'][start:start + ids.size(1)]
    for i, b in enumerate(params['blocks']):
        h = layer_norm(x, b['norm1']['gamma'], b['norm1']['beta'])
        a, _ = gen.cached_self_attention(h, b['attention'], config.num_heads, None if caches is None else caches[i])
        x = x + a
        x = x + feed_forward(layer_norm(x, b['norm2']['gamma'], b['norm2']['beta']), b['ffn'])
    return linear(x, params['token_embedding']), new


@A('lm_step', 'W', 'caches returned in reverse order')
def w(params, ids, config, caches=None):
    logits, new = lms_right(params, ids, config, caches)
    return logits, new[::-1]


@A('lm_step', 'W', 'cache attention reads un-normed x')
def w(params, ids, config, caches=None):
    start = 0 if caches is None else caches[0]['key'].size(2)
    x = embed(ids, params['token_embedding']) + params['position_embedding'][start:start + ids.size(1)]
    new = []
    for i, b in enumerate(params['blocks']):
        a, c = gen.cached_self_attention(x, b['attention'], config.num_heads, None if caches is None else caches[i])
        x = x + a
        x = x + feed_forward(layer_norm(x, b['norm2']['gamma'], b['norm2']['beta']), b['ffn'])
        new.append(c)
    h = layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta'])
    return linear(h, params['token_embedding']), new


@A('lm_step', 'W', 'only the last position logits (B, 1, V)')
def w(params, ids, config, caches=None):
    logits, new = lms_right(params, ids, config, caches)
    return logits[:, -1:], new


@A('lm_step', 'W', 'calls library lm_step')
def w(params, ids, config, caches=None):
    return gen.lm_step(params, ids, config, caches)


generics('lm_step', lms_right, ['f32', 'counter', 'shapecache'])


# ---------------------------------------------------------------- batch 2: more answers
def ln_wide(x, g, b, eps=1e-5):   # float32 inside for half precision only; float64 stays float64
    if x.dtype in (torch.float16, torch.bfloat16):
        return ln32(x, g, b, eps)
    return ln_hand(x, g, b, eps)


@A('encoder', 'R', 'while loop with index, widened LN and einsum attention')
def r(x, layers, num_heads, mask=None):
    i, h = 0, x
    while i < len(layers):
        p = layers[i]
        up = torch.float32 if h.dtype in (torch.float16, torch.bfloat16) else None
        h = ln_wide(h + mha_einsum(h, h, p['self_attn'], num_heads, mask, up=up), p['norm1']['gamma'], p['norm1']['beta'])
        h = ln_wide(h + ffn_hand(h, p['ffn'], up=up), p['norm2']['gamma'], p['norm2']['beta'])
        i += 1
    return h


@A('encoder_layer', 'R', 'float32 inside for half only (widened LN, attention, FFN)')
def r(x, params, num_heads, mask=None):
    up = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else None
    n1, n2 = params['norm1'], params['norm2']
    x = ln_wide(x + mha_einsum(x, x, params['self_attn'], num_heads, mask, up=up), n1['gamma'], n1['beta'])
    return ln_wide(x + ffn_hand(x, params['ffn'], up=up), n2['gamma'], n2['beta'])


@A('decoder_layer', 'R', 'float32 inside for half only, float64 kept')
def r(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    up = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else None
    n1, n2, n3 = params['norm1'], params['norm2'], params['norm3']
    x = ln_wide(x + mha_einsum(x, x, params['self_attn'], num_heads, self_mask, up=up), n1['gamma'], n1['beta'])
    x = ln_wide(x + mha_einsum(x, memory, params['cross_attn'], num_heads, memory_mask, up=up), n2['gamma'], n2['beta'])
    return ln_wide(x + ffn_hand(x, params['ffn'], up=up), n3['gamma'], n3['beta'])


@A('decoder_layer', 'R', 'library mha for self-attention, einsum for cross, hand LN')
def r(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    # self-attention and FFN sublayers as in my encoder layer, cross-attention in between
    n1, n2, n3 = params['norm1'], params['norm2'], params['norm3']
    h = ln_hand(x + mha(x, x, params['self_attn'], num_heads, self_mask), n1['gamma'], n1['beta'])
    h = ln_hand(h + mha_einsum(h, memory, params['cross_attn'], num_heads, memory_mask), n2['gamma'], n2['beta'])
    return ln_hand(h + feed_forward(h, params['ffn']), n3['gamma'], n3['beta'])


@A('next_token_probs', 'W', 'softmax over dim=1')
def w(logits, temperature=1.0):
    return torch.softmax(logits / temperature, dim=1 if logits.dim() > 1 else 0)


KV = {}


@A('cached_self_attention', 'W', 'preallocated module-level KV buffer, returns views of it')
def w(x, params, num_heads, cache=None):
    out, c = csa_right(x, params, num_heads, cache)
    k, v = c['key'], c['value']
    buf = KV.get('b')
    if buf is None or buf[0].shape[:2] != k.shape[:2] or buf[0].shape[3] != k.shape[3] or buf[0].size(2) < k.size(2) or buf[0].dtype != k.dtype:
        shape = (k.size(0), k.size(1), max(1024, k.size(2)), k.size(3))
        buf = KV['b'] = (torch.empty(shape, dtype=k.dtype), torch.empty(shape, dtype=k.dtype))
    L = k.size(2)
    buf[0][:, :, :L].copy_(k.detach()); buf[1][:, :, :L].copy_(v.detach())
    return out, {'key': buf[0][:, :, :L], 'value': buf[1][:, :, :L]}


@A('cached_self_attention', 'W', 'masked scores filled with -1e4 instead of -inf')
def w(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params['w_q'], params.get('b_q')), num_heads)
    k = split_heads(linear(x, params['w_k'], params.get('b_k')), num_heads)
    v = split_heads(linear(x, params['w_v'], params.get('b_v')), num_heads)
    if cache is not None:
        k = torch.cat([cache['key'], k], 2); v = torch.cat([cache['value'], v], 2)
    Ln, Lk = x.size(1), k.size(2)
    s = q @ k.transpose(-2, -1) / math.sqrt(x.size(-1) // num_heads)
    s = s.masked_fill(~causal_mask(Lk)[:, :, Lk - Ln:], -1e4)
    ctx = s.softmax(-1) @ v
    return linear(merge_heads(ctx), params['w_o'], params.get('b_o')), {'key': k, 'value': v}


@A('lm_step', 'W', 'positions for the new tokens from len(caches) (blocks), not L_past')
def w(params, ids, config, caches=None):
    start = 0 if caches is None else len(caches)
    x = embed(ids, params['token_embedding']) + params['position_embedding'][start:start + ids.size(1)]
    new = []
    for i, b in enumerate(params['blocks']):
        h = layer_norm(x, b['norm1']['gamma'], b['norm1']['beta'])
        a, c = gen.cached_self_attention(h, b['attention'], config.num_heads, None if caches is None else caches[i])
        x = x + a
        x = x + feed_forward(layer_norm(x, b['norm2']['gamma'], b['norm2']['beta']), b['ffn'])
        new.append(c)
    h = layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta'])
    return linear(h, params['token_embedding']), new


@A('shift_right', 'W', 'labels: last <eos> dropped, pad appended (length kept by cat)')
def w(tgt):
    return tgt[:, :-1], torch.cat([tgt[:, 1:-1], torch.zeros_like(tgt[:, :1])], 1)


def w_corr_f32(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    # bias corrections as float32 tensors: (1 - b^t) rounded to float32 for float64 parameters
    b1, b2 = betas
    state['t'] += 1; t = state['t']
    c1 = 1 - torch.tensor(b1) ** t
    c2 = 1 - torch.tensor(b2) ** t
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None:
                continue
            m.mul_(b1).add_(p.grad, alpha=1 - b1); v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.sub_(lr * (m / c1) / ((v / c2).sqrt() + eps))


A('adam', 'W', 'bias corrections as float32 tensors')((adam_init_r, w_corr_f32))


@A('warmup_cosine_lr', 'W', 'end-of-schedule test before the warm-up test')
def w(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step >= total_steps:
        return final_fraction * peak_lr
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    x = (step - warmup_steps) / (total_steps - warmup_steps)
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * x)))


@A('decoder_layer', 'W', 'self_mask None -> causal mask added (ambiguous)')
def w(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    if self_mask is None:
        self_mask = causal_mask(x.size(1), device=x.device)
    return dec_right(x, memory, params, num_heads, self_mask, memory_mask)


@A('encoder', 'W', "consumes the caller's list (layers.pop(0))")
def w(x, layers, num_heads, mask=None):
    while layers:
        x = ed.encoder_layer(x, layers.pop(0), num_heads, mask)
    return x


@A('warmup_cosine_lr', 'R', 'torch float64 scalars, explicit total == warmup branch')
def r(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    if total_steps == warmup_steps:
        return final_fraction * peak_lr
    x = torch.tensor(min(step - warmup_steps, total_steps - warmup_steps) / (total_steps - warmup_steps), dtype=torch.float64)
    lo = final_fraction * peak_lr
    return float(lo + (peak_lr - lo) * 0.5 * (1 + torch.cos(math.pi * x)))


def adam_step_rebind(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    # functional moments: new m and v tensors stored back into the state's lists
    b1, b2 = betas
    state['t'] += 1; t = state['t']
    with torch.no_grad():
        for i, p in enumerate(parameters):
            if p.grad is None:
                continue
            state['m'][i] = b1 * state['m'][i] + (1 - b1) * p.grad
            state['v'][i] = b2 * state['v'][i] + (1 - b2) * p.grad ** 2
            p -= lr * (state['m'][i] / (1 - b1 ** t)) / (torch.sqrt(state['v'][i] / (1 - b2 ** t)) + eps)


A('adam', 'R', 'functional m, v stored back into state lists')((adam_init_r, adam_step_rebind))


@A('lm_step', 'R', 'L_past from the last block cache, shape[-2]')
def r(params, ids, config, caches=None):
    start = 0 if not caches else caches[-1]['key'].shape[-2]
    pos = params['position_embedding'].narrow(0, start, ids.size(1))
    x = embed(ids, params['token_embedding']) + pos
    new = []
    for i, b in enumerate(params['blocks']):
        h = ln_wide(x, b['norm1']['gamma'], b['norm1']['beta'])
        a, c = csa_right(h, b['attention'], config.num_heads, caches[i] if caches else None)
        x = x + a
        x = x + feed_forward(ln_wide(x, b['norm2']['gamma'], b['norm2']['beta']), b['ffn'])
        new.append(c)
    return linear(ln_wide(x, params['final_norm']['gamma'], params['final_norm']['beta']), params['token_embedding']), new


def attn_additive(h, p, H, mask, fix):
    B, L, D = h.shape
    q = split_heads(linear(h, p['w_q'], p['b_q']), H)
    k = split_heads(linear(h, p['w_k'], p['b_k']), H)
    v = split_heads(linear(h, p['w_v'], p['b_v']), H)
    bias = torch.zeros(mask.shape, dtype=h.dtype).masked_fill(~mask, float('-inf'))
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D // H) + bias, -1)
    if fix:
        w = torch.nan_to_num(w, nan=0.0)
    return linear(merge_heads(w @ v), p['w_o'], p['b_o'])


@A('decoder_block', 'W', 'additive float mask (0 / -inf), NaN rows zeroed after softmax: NaN gradient (label corrected)')
def r(x, block, num_heads, mask=None):
    if mask is None:
        mask = causal_mask(x.size(1), device=x.device)
    n1, n2 = block['norm1'], block['norm2']
    x = x + attn_additive(layer_norm(x, n1['gamma'], n1['beta']), block['attention'], num_heads, mask, True)
    return x + feed_forward(layer_norm(x, n2['gamma'], n2['beta']), block['ffn'])


@A('decoder_block', 'W', 'additive float mask, fully masked rows give NaN')
def w(x, block, num_heads, mask=None):
    if mask is None:
        mask = causal_mask(x.size(1), device=x.device)
    n1, n2 = block['norm1'], block['norm2']
    x = x + attn_additive(layer_norm(x, n1['gamma'], n1['beta']), block['attention'], num_heads, mask, False)
    return x + feed_forward(layer_norm(x, n2['gamma'], n2['beta']), block['ffn'])
