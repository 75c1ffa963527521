"""Learner trial round 10b: answers for 08_encoder_decoder, 09_adam, 10_training, b1, b2.

R = an answer believed right (unusual style); W = a plausible mistake."""
import math
import torch
import torch.nn.functional as F
from harness import *
from tfmlib import (multi_head_attention, feed_forward, layer_norm, linear, split_heads,
                    merge_heads, scaled_dot_product_attention, causal_mask, embed,
                    residual_sublayer, adam_init, adam_step)
import tfmlib

# ---------------------------------------------------------------- helpers a learner writes
HALF = (torch.float16, torch.bfloat16)
def up(t):                            # at least float32 inside: half is widened, float64 kept
    return None if t is None else (t.float() if t.dtype in HALF else t)

def ln32(x, g, b, eps=1e-5):          # LayerNorm, half widened to float32 inside, cast back
    xf = up(x); g = up(g); b = up(b)
    mu = xf.sum(-1, keepdim=True) / x.size(-1)
    var = ((xf - mu) ** 2).sum(-1, keepdim=True) / x.size(-1)
    return ((xf - mu) * torch.rsqrt(var + eps) * g + b).to(x.dtype)

def ln64(x, g, b, eps=1e-5):
    xd = x.double()
    mu = xd.mean(-1, keepdim=True)
    var = xd.var(-1, keepdim=True, unbiased=False)
    return ((xd - mu) / (var + eps).sqrt() * g.double() + b.double()).to(x.dtype)

def mha_einsum(q_in, kv_in, p, H, mask=None):   # attention written out, float32 inside
    dt = q_in.dtype
    def proj(x, w, b):
        y = torch.einsum('bld,od->blo', up(x), up(w))
        return y if b is None else y + up(b)
    B, Lq, D = q_in.shape; Lk = kv_in.size(1); dk = D // H
    q = proj(q_in, p['w_q'], p.get('b_q')).view(B, Lq, H, dk)
    k = proj(kv_in, p['w_k'], p.get('b_k')).view(B, Lk, H, dk)
    v = proj(kv_in, p['w_v'], p.get('b_v')).view(B, Lk, H, dk)
    s = torch.einsum('bqhd,bkhd->bhqk', q, k) / math.sqrt(dk)
    if mask is not None:
        m = mask.expand(B, H, Lq, Lk)
        s = s.masked_fill(~m, float('-inf'))
    mx = s.amax(-1, keepdim=True)
    mx = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
    e = torch.exp(s - mx)
    w = e / e.sum(-1, keepdim=True).clamp_min(1e-30)
    ctx = torch.einsum('bhqk,bkhd->bqhd', w, v).reshape(B, Lq, D)
    out = torch.einsum('bld,od->blo', ctx, up(p['w_o']))
    if p.get('b_o') is not None: out = out + up(p['b_o'])
    return out.to(dt)

def ffn32(x, p):
    h = torch.relu(up(x) @ up(p['w_1']).T + up(p['b_1']))
    return (h @ up(p['w_2']).T + up(p['b_2'])).to(x.dtype)

def attn(q, kv, p, H, m=None):
    return multi_head_attention(q, kv, kv, p, H, m)[0]

# ================================================================ 08 encoder_layer
def enc_ref_like(x, params, num_heads, mask=None):
    x = layer_norm(x + attn(x, x, params['self_attn'], num_heads, mask), params['norm1']['gamma'], params['norm1']['beta'])
    return layer_norm(x + feed_forward(x, params['ffn']), params['norm2']['gamma'], params['norm2']['beta'])

@A('encoder_layer', 'R', 'einsum attention + own LN, half widened to f32 inside')
def _(x, params, num_heads, mask=None):
    n1, n2 = params['norm1'], params['norm2']
    h = ln32(x + mha_einsum(x, x, params['self_attn'], num_heads, mask), n1['gamma'], n1['beta'])
    return ln32(h + ffn32(h, params['ffn']), n2['gamma'], n2['beta'])

@A('encoder_layer', 'W', 'everything in float32 inside (loses float64 precision)')
def _(x, params, num_heads, mask=None):
    f = lambda d: {k: (None if v is None else v.float()) for k, v in d.items()}
    return enc_ref_like(x.float(), {k: f(v) for k, v in params.items()}, num_heads, mask).to(x.dtype)

@A('encoder_layer', 'R', 'residual_sublayer from notebook 07')
def _(x, params, num_heads, mask=None):
    x = residual_sublayer(x, lambda h: attn(h, h, params['self_attn'], num_heads, mask), params['norm1'])
    return residual_sublayer(x, lambda h: feed_forward(h, params['ffn']), params['norm2'])

@A('encoder_layer', 'R', 'float64 inside, cast back')
def _(x, params, num_heads, mask=None):
    d = lambda t: {k: (None if v is None else v.double()) for k, v in t.items()}
    out = enc_ref_like(x.double(), {k: d(v) for k, v in params.items()}, num_heads, mask)
    return out.to(x.dtype)

@A('encoder_layer', 'R', 'loop over the batch')
def _(x, params, num_heads, mask=None):
    outs = []
    for b in range(x.size(0)):
        mb = None if mask is None else mask.expand(x.size(0), *mask.shape[1:])[b:b+1]
        outs.append(enc_ref_like(x[b:b+1], params, num_heads, mb))
    return torch.cat(outs)

@A('encoder_layer', 'W', 'Pre-LN instead of Post-LN')
def _(x, params, num_heads, mask=None):
    n1, n2 = params['norm1'], params['norm2']
    h = layer_norm(x, n1['gamma'], n1['beta']); x = x + attn(h, h, params['self_attn'], num_heads, mask)
    return x + feed_forward(layer_norm(x, n2['gamma'], n2['beta']), params['ffn'])

@A('encoder_layer', 'W', 'norm1 used twice')
def _(x, params, num_heads, mask=None):
    n1 = params['norm1']
    x = layer_norm(x + attn(x, x, params['self_attn'], num_heads, mask), n1['gamma'], n1['beta'])
    return layer_norm(x + feed_forward(x, params['ffn']), n1['gamma'], n1['beta'])

@A('encoder_layer', 'W', 'mask dropped')
def _(x, params, num_heads, mask=None):
    return enc_ref_like(x, params, num_heads, None)

@A('encoder_layer', 'W', 'masked_fill -1e9, no zeroing of fully masked rows')
def _(x, params, num_heads, mask=None):
    p = params['self_attn']; B, L, D = x.shape; dk = D // num_heads
    q = split_heads(linear(x, p['w_q'], p['b_q']), num_heads); k = split_heads(linear(x, p['w_k'], p['b_k']), num_heads)
    v = split_heads(linear(x, p['w_v'], p['b_v']), num_heads)
    s = q @ k.transpose(-2, -1) / math.sqrt(dk)
    if mask is not None: s = s.masked_fill(~mask, -1e9)
    a = linear(merge_heads(torch.softmax(s, -1) @ v), p['w_o'], p['b_o'])
    x = layer_norm(x + a, params['norm1']['gamma'], params['norm1']['beta'])
    return layer_norm(x + feed_forward(x, params['ffn']), params['norm2']['gamma'], params['norm2']['beta'])

@A('encoder_layer', 'W', 'LayerNorm with unbiased variance')
def _(x, params, num_heads, mask=None):
    def ln(t, n):
        return (t - t.mean(-1, keepdim=True)) / torch.sqrt(t.var(-1, keepdim=True) + 1e-5) * n['gamma'] + n['beta']
    x = ln(x + attn(x, x, params['self_attn'], num_heads, mask), params['norm1'])
    return ln(x + feed_forward(x, params['ffn']), params['norm2'])

@A('encoder_layer', 'W', 'LayerNorm eps 1e-6')
def _(x, params, num_heads, mask=None):
    x = layer_norm(x + attn(x, x, params['self_attn'], num_heads, mask), params['norm1']['gamma'], params['norm1']['beta'], 1e-6)
    return layer_norm(x + feed_forward(x, params['ffn']), params['norm2']['gamma'], params['norm2']['beta'], 1e-6)

@A('encoder_layer', 'W', 'FFN residual forgotten')
def _(x, params, num_heads, mask=None):
    x = layer_norm(x + attn(x, x, params['self_attn'], num_heads, mask), params['norm1']['gamma'], params['norm1']['beta'])
    return layer_norm(feed_forward(x, params['ffn']), params['norm2']['gamma'], params['norm2']['beta'])

@A('encoder_layer', 'W', 'mask assumed (B,1,1,L): mask[:, :, :1] taken')
def _(x, params, num_heads, mask=None):
    m = None if mask is None else mask[..., :1, :]
    return enc_ref_like(x, params, num_heads, m)

@A('encoder_layer', 'W', 'x += in place on the input')
def _(x, params, num_heads, mask=None):
    x += attn(x, x, params['self_attn'], num_heads, mask)
    h = layer_norm(x, params['norm1']['gamma'], params['norm1']['beta'])
    return layer_norm(h + feed_forward(h, params['ffn']), params['norm2']['gamma'], params['norm2']['beta'])

@A('encoder_layer', 'W', 'own LN in half precision w/o eps float cast: eps added after sqrt')
def _(x, params, num_heads, mask=None):
    def ln(t, n):
        return (t - t.mean(-1, keepdim=True)) / (t.var(-1, keepdim=True, unbiased=False).sqrt() + 1e-5) * n['gamma'] + n['beta']
    x = ln(x + attn(x, x, params['self_attn'], num_heads, mask), params['norm1'])
    return ln(x + feed_forward(x, params['ffn']), params['norm2'])

A('encoder_layer', 'W', 'calls tfmlib.encoder_layer')(lambda x, params, num_heads, mask=None: tfmlib.encoder_layer(x, params, num_heads, mask))
generics('encoder_layer', enc_ref_like, ['f32', 'mutate', 'idcache', 'buffer', 'counter'])

# ================================================================ 08 encoder
@A('encoder', 'R', 'functools.reduce over tfmlib.encoder_layer')
def _(x, layers, num_heads, mask=None):
    import functools
    return functools.reduce(lambda h, p: tfmlib.encoder_layer(h, p, num_heads, mask), layers, x)

@A('encoder', 'R', 'own einsum layer, half widened to f32')
def _(x, layers, num_heads, mask=None):
    for p in layers:
        h = ln32(x + mha_einsum(x, x, p['self_attn'], num_heads, mask), p['norm1']['gamma'], p['norm1']['beta'])
        x = ln32(h + ffn32(h, p['ffn']), p['norm2']['gamma'], p['norm2']['beta'])
    return x

@A('encoder', 'R', 'while loop with index, enc_ref_like')
def _(x, layers, num_heads, mask=None):
    i = 0; h = x
    while i < len(layers):
        h = enc_ref_like(h, layers[i], num_heads, mask); i += 1
    return h

@A('encoder', 'W', 'every layer reads x')
def _(x, layers, num_heads, mask=None):
    h = x
    for p in layers: h = enc_ref_like(x, p, num_heads, mask)
    return h

@A('encoder', 'W', 'layers in reverse order')
def _(x, layers, num_heads, mask=None):
    for p in reversed(layers): x = enc_ref_like(x, p, num_heads, mask)
    return x

@A('encoder', 'W', 'mask only for the first layer')
def _(x, layers, num_heads, mask=None):
    for i, p in enumerate(layers): x = enc_ref_like(x, p, num_heads, mask if i == 0 else None)
    return x

@A('encoder', 'W', 'extra final LayerNorm with the last layer norm2')
def _(x, layers, num_heads, mask=None):
    for p in layers: x = enc_ref_like(x, p, num_heads, mask)
    return layer_norm(x, layers[-1]['norm2']['gamma'], layers[-1]['norm2']['beta'])

@A('encoder', 'W', 'last layer skipped (range(len-1))')
def _(x, layers, num_heads, mask=None):
    for i in range(max(1, len(layers) - 1)): x = enc_ref_like(x, layers[i], num_heads, mask)
    return x

@A('encoder', 'W', 'first layer params reused for all')
def _(x, layers, num_heads, mask=None):
    for _p in layers: x = enc_ref_like(x, layers[0], num_heads, mask)
    return x

A('encoder', 'W', 'calls tfmlib.encoder')(lambda x, layers, num_heads, mask=None: tfmlib.encoder(x, layers, num_heads, mask))
generics('encoder', lambda x, layers, num_heads, mask=None: tfmlib.encoder(x, layers, num_heads, mask) if False else __import__('functools').reduce(lambda h, p: enc_ref_like(h, p, num_heads, mask), layers, x), ['f32', 'mutate', 'shapecache', 'counter'])

# ================================================================ 08 decoder_layer
def dec_ref_like(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    n = params
    x = layer_norm(x + attn(x, x, n['self_attn'], num_heads, self_mask), n['norm1']['gamma'], n['norm1']['beta'])
    x = layer_norm(x + attn(x, memory, n['cross_attn'], num_heads, memory_mask), n['norm2']['gamma'], n['norm2']['beta'])
    return layer_norm(x + feed_forward(x, n['ffn']), n['norm3']['gamma'], n['norm3']['beta'])

@A('decoder_layer', 'R', 'einsum attention + own LN, half widened')
def _(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    n = params
    x = ln32(x + mha_einsum(x, x, n['self_attn'], num_heads, self_mask), n['norm1']['gamma'], n['norm1']['beta'])
    x = ln32(x + mha_einsum(x, memory, n['cross_attn'], num_heads, memory_mask), n['norm2']['gamma'], n['norm2']['beta'])
    return ln32(x + ffn32(x, n['ffn']), n['norm3']['gamma'], n['norm3']['beta'])

@A('decoder_layer', 'R', 'residual_sublayer chain over a list')
def _(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    steps = [(lambda h: attn(h, h, params['self_attn'], num_heads, self_mask), 'norm1'),
             (lambda h: attn(h, memory, params['cross_attn'], num_heads, memory_mask), 'norm2'),
             (lambda h: feed_forward(h, params['ffn']), 'norm3')]
    for f, nm in steps: x = residual_sublayer(x, f, params[nm])
    return x

@A('decoder_layer', 'R', 'float64 inside, LN written out')
def _(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    d = lambda t: {k: (None if v is None else v.double()) for k, v in t.items()}
    P = {k: d(v) for k, v in params.items()}
    xd, md = x.double(), memory.double()
    xd = ln64(xd + attn(xd, xd, P['self_attn'], num_heads, self_mask), P['norm1']['gamma'], P['norm1']['beta'])
    xd = ln64(xd + attn(xd, md, P['cross_attn'], num_heads, memory_mask), P['norm2']['gamma'], P['norm2']['beta'])
    return ln64(xd + feed_forward(xd, P['ffn']), P['norm3']['gamma'], P['norm3']['beta']).to(x.dtype)

@A('decoder_layer', 'W', 'cross-attention gets self_mask')
def _(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    try: return dec_ref_like(x, memory, params, num_heads, self_mask, self_mask)
    except Exception: return dec_ref_like(x, memory, params, num_heads, self_mask, None)

@A('decoder_layer', 'W', 'memory_mask ignored')
def _(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    return dec_ref_like(x, memory, params, num_heads, self_mask, None)

@A('decoder_layer', 'W', 'cross-attn keys from memory, values from x (when shapes allow)')
def _(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    n = params
    x = layer_norm(x + attn(x, x, n['self_attn'], num_heads, self_mask), n['norm1']['gamma'], n['norm1']['beta'])
    v = x if x.size(1) == memory.size(1) else memory
    c = multi_head_attention(x, memory, v, n['cross_attn'], num_heads, memory_mask)[0]
    x = layer_norm(x + c, n['norm2']['gamma'], n['norm2']['beta'])
    return layer_norm(x + feed_forward(x, n['ffn']), n['norm3']['gamma'], n['norm3']['beta'])

@A('decoder_layer', 'W', 'norm2 and norm3 swapped')
def _(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    P = dict(params); P['norm2'], P['norm3'] = params['norm3'], params['norm2']
    return dec_ref_like(x, memory, P, num_heads, self_mask, memory_mask)

@A('decoder_layer', 'W', 'self_attn params used for cross-attention')
def _(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    P = dict(params); P['cross_attn'] = params['self_attn']
    return dec_ref_like(x, memory, P, num_heads, self_mask, memory_mask)

@A('decoder_layer', 'W', 'cross-attention reads the layer input x, not the output of sublayer 1')
def _(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    n = params
    h = layer_norm(x + attn(x, x, n['self_attn'], num_heads, self_mask), n['norm1']['gamma'], n['norm1']['beta'])
    h = layer_norm(h + attn(x, memory, n['cross_attn'], num_heads, memory_mask), n['norm2']['gamma'], n['norm2']['beta'])
    return layer_norm(h + feed_forward(h, n['ffn']), n['norm3']['gamma'], n['norm3']['beta'])

@A('decoder_layer', 'W', 'memory_mask squeezed to (B, Ls) and rebuilt as [:, None, None] (drops per-query rows)')
def _(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    mm = None if memory_mask is None else memory_mask.reshape(memory_mask.size(0), -1, memory_mask.size(-1)).all(1)[:, None, None, :]
    return dec_ref_like(x, memory, params, num_heads, self_mask, mm)

@A('decoder_layer', 'W', 'memory_mask[..., :1, :] (assumes one query row)')
def _(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    mm = None if memory_mask is None else memory_mask[..., :1, :]
    return dec_ref_like(x, memory, params, num_heads, self_mask, mm)

@A('decoder_layer', 'W', 'causal mask built when self_mask is None')
def _(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    sm = causal_mask(x.size(1)) if self_mask is None else self_mask
    return dec_ref_like(x, memory, params, num_heads, sm, memory_mask)

A('decoder_layer', 'W', 'calls tfmlib.decoder_layer')(lambda x, memory, params, num_heads, self_mask=None, memory_mask=None: tfmlib.decoder_layer(x, memory, params, num_heads, self_mask, memory_mask))
generics('decoder_layer', dec_ref_like, ['f32', 'f64', 'mutate', 'idcache', 'buffer'])

# ================================================================ 09 adam
def adam_init_r(parameters):
    ps = list(parameters)
    return {"t": 0, "m": [torch.zeros_like(p) for p in ps], "v": [torch.zeros_like(p) for p in ps]}

def adam_step_torchstyle(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas; state['t'] += 1; t = state['t']
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None: continue
            m.lerp_(p.grad, 1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad.conj(), value=1 - b2)
            bc1 = 1 - b1 ** t; bc2 = 1 - b2 ** t
            denom = (v.sqrt() / math.sqrt(bc2)).add_(eps)
            p.addcdiv_(m, denom, value=-lr / bc1)

A('adam', 'R', 'torch.optim style: lerp_, addcdiv_, bias in step size')((adam_init_r, adam_step_torchstyle))

def adam_init_dict(parameters):
    ps = list(parameters)
    return {"t": 0, "m": [p.detach().clone().zero_() for p in ps], "v": [torch.zeros(p.shape, dtype=p.dtype) for p in ps]}
def adam_step_plain(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas; state['t'] = state['t'] + 1; t = state['t']
    for i, p in enumerate(parameters):
        g = p.grad
        if g is None: continue
        with torch.no_grad():
            state['m'][i].copy_(b1 * state['m'][i] + (1 - b1) * g)
            state['v'][i].copy_(b2 * state['v'][i] + (1 - b2) * g * g)
            mh = state['m'][i] / (1 - b1 ** t); vh = state['v'][i] / (1 - b2 ** t)
            p.copy_(p - lr * mh / (torch.sqrt(vh) + eps))
A('adam', 'R', 'copy_ with full expressions, list index')((adam_init_dict, adam_step_plain))

def adam_step_data(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas; state['t'] += 1; t = state['t']
    for p, m, v in zip(parameters, state['m'], state['v']):
        if p.grad is None: continue
        g = p.grad.data
        m.data.mul_(b1).add_((1 - b1) * g); v.data.mul_(b2).add_((1 - b2) * g * g)
        p.data.sub_(lr * (m.data / (1 - b1 ** t)) / ((v.data / (1 - b2 ** t)).sqrt() + eps))
A('adam', 'R', 'p.data updates instead of no_grad (same numbers)')((adam_init_r, adam_step_data))

def mk_adam(step_variant):
    return (adam_init_r, step_variant)

def adam_t_per_param(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None: continue
            state['t'] += 1; t = state['t']
            m.mul_(b1).add_(p.grad, alpha=1 - b1); v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))
A('adam', 'W', 't per parameter')(mk_adam(adam_t_per_param))

def adam_eps_inside(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas; state['t'] += 1; t = state['t']
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None: continue
            m.mul_(b1).add_(p.grad, alpha=1 - b1); v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t) + eps).sqrt()))
A('adam', 'W', 'eps inside the sqrt')(mk_adam(adam_eps_inside))

def adam_zero_skip(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas; state['t'] += 1; t = state['t']
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None or not p.grad.any(): continue
            m.mul_(b1).add_(p.grad, alpha=1 - b1); v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))
A('adam', 'W', 'skips an all-zero gradient too (m keeps moving p in torch)')(mk_adam(adam_zero_skip))

def adam_sq_f32(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas; state['t'] += 1; t = state['t']
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None: continue
            g = p.grad
            m.mul_(b1).add_(g, alpha=1 - b1); v.mul_(b2).add_(((1 - b2) * g.float() ** 2).to(v.dtype))
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))
A('adam', 'W', 'g**2 computed in float32 (overflows for 1e40 float64 grads)')(mk_adam(adam_sq_f32))

def adam_t_late(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas; t = state['t'] + 1
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None: continue
            m.mul_(b1).add_(p.grad, alpha=1 - b1); v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))
A('adam', 'W', 't never stored back (always 1)')(mk_adam(adam_t_late))

_glob = {}
def adam_glob_step(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas; state['t'] += 1; t = state['t']
    with torch.no_grad():
        for i, p in enumerate(parameters):
            if p.grad is None: continue
            key = (i, tuple(p.shape))
            m, v = _glob.setdefault(key, (torch.zeros_like(p), torch.zeros_like(p)))
            m.mul_(b1).add_(p.grad, alpha=1 - b1); v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))
A('adam', 'W', 'moments in a module dict keyed by (index, shape)')(mk_adam(adam_glob_step))

def adam_init_bad_dtype(parameters):
    ps = list(parameters)
    return {"t": 0, "m": [torch.zeros(p.shape) for p in ps], "v": [torch.zeros(p.shape) for p in ps]}
A('adam', 'W', 'moments created float32 whatever the dtype')((adam_init_bad_dtype, adam_step_torchstyle))

def adam_shared_zero(parameters):
    ps = list(parameters); z = {}
    ms = [z.setdefault(('m',) + tuple(p.shape), torch.zeros_like(p)) for p in ps]
    vs = [z.setdefault(('v',) + tuple(p.shape), torch.zeros_like(p)) for p in ps]
    return {"t": 0, "m": ms, "v": vs}
A('adam', 'W', 'one moment tensor shared by parameters of one shape')((adam_shared_zero, adam_step_torchstyle))

def adam_b2_default_swapped(parameters, state, lr, betas=(0.999, 0.9), eps=1e-8):
    return adam_step_torchstyle(parameters, state, lr, betas, eps)
A('adam', 'W', 'betas default swapped (0.999, 0.9)')(mk_adam(adam_b2_default_swapped))

# ================================================================ 09 sgd_step
@A('sgd_step', 'R', 'add_ with alpha=-lr')
def _(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None: p.add_(p.grad, alpha=-lr)

@A('sgd_step', 'R', 'copy_(p - lr * g)')
def _(parameters, lr):
    for p in parameters:
        if p.grad is None: continue
        with torch.no_grad(): p.copy_(p - lr * p.grad)

@A('sgd_step', 'R', 'torch._foreach_add_ on the ones with grads')
def _(parameters, lr):
    ps = [p for p in parameters if p.grad is not None]
    if not ps: return
    with torch.no_grad():
        for p in ps: torch._foreach_add_([p], [p.grad], alpha=-lr)

@A('sgd_step', 'W', 'rebinds p (not in place)')
def _(parameters, lr):
    for p in parameters:
        if p.grad is not None: p = p - lr * p.grad

@A('sgd_step', 'W', 'nan_to_num on the gradient')
def _(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None: p.sub_(lr * torch.nan_to_num(p.grad))

@A('sgd_step', 'W', 'lr clamped to 1')
def _(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None: p.sub_(min(lr, 1.0) * p.grad)

@A('sgd_step', 'W', 'lr as a float32 tensor (rounds lr for float64 params)')
def _(parameters, lr):
    lr_t = torch.tensor(lr, dtype=torch.float32)
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None: p.sub_((lr_t * p.grad.float()).to(p.dtype))

@A('sgd_step', 'W', 'p + lr * grad (ascent)')
def _(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None: p.add_(lr * p.grad)

@A('sgd_step', 'W', 'grad None treated as crash-free zero: p.grad or zeros, then sets p.grad')
def _(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is None: p.grad = torch.zeros_like(p)
            p.sub_(lr * p.grad)

@A('sgd_step', 'W', 'only the first parameter (return inside loop)')
def _(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.sub_(lr * p.grad); return

@A('sgd_step', 'W', 'without no_grad on leaf requiring grad -> uses .data of grad mul in float16? (p.data = ...)')
def _(parameters, lr):
    for p in parameters:
        if p.grad is not None: p.data = p.data - lr * p.grad

# ================================================================ 09 adamw_step
@A('adamw_step', 'R', 'sub_(lr*wd*p) then library adam_step')
def _(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    ps = list(parameters)
    with torch.no_grad():
        for p in ps:
            if p.grad is not None: p.sub_(p * (lr * weight_decay))
    adam_step(ps, state, lr, betas, eps)

@A('adamw_step', 'R', 'decay folded into own Adam loop')
def _(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    b1, b2 = betas; state['t'] += 1; t = state['t']
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None: continue
            p.mul_(1 - lr * weight_decay)
            m.lerp_(p.grad, 1 - b1); v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))

@A('adamw_step', 'R', 'generator of params consumed once via list, adam_step_plain')
def _(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    ps = [p for p in parameters]
    with torch.no_grad():
        for p in filter(lambda q: q.grad is not None, ps): p.copy_(p * (1 - lr * weight_decay))
    adam_step_plain(ps, state, lr, betas, eps)

@A('adamw_step', 'W', 'Adam + L2')
def _(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    ps = list(parameters)
    with torch.no_grad():
        for p in ps:
            if p.grad is not None: p.grad.add_(p, alpha=weight_decay)
    adam_step(ps, state, lr, betas, eps)

@A('adamw_step', 'W', 'decay after the Adam step')
def _(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    ps = list(parameters); adam_step(ps, state, lr, betas, eps)
    with torch.no_grad():
        for p in ps:
            if p.grad is not None: p.mul_(1 - lr * weight_decay)

@A('adamw_step', 'W', 'decay not scaled by lr')
def _(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    ps = list(parameters)
    with torch.no_grad():
        for p in ps:
            if p.grad is not None: p.mul_(1 - weight_decay)
    adam_step(ps, state, lr, betas, eps)

@A('adamw_step', 'W', 'decays parameters without a gradient')
def _(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    ps = list(parameters)
    with torch.no_grad():
        for p in ps: p.mul_(1 - lr * weight_decay)
    adam_step(ps, state, lr, betas, eps)

@A('adamw_step', 'W', 'weight_decay default 1e-4')
def _(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-4):
    ps = list(parameters)
    with torch.no_grad():
        for p in ps:
            if p.grad is not None: p.mul_(1 - lr * weight_decay)
    adam_step(ps, state, lr, betas, eps)

@A('adamw_step', 'W', 'betas/eps not passed on to adam_step')
def _(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    ps = list(parameters)
    with torch.no_grad():
        for p in ps:
            if p.grad is not None: p.mul_(1 - lr * weight_decay)
    adam_step(ps, state, lr)

@A('adamw_step', 'W', 'decay factor (1 - lr) * wd style: p -= wd * lr * p.grad')
def _(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    ps = list(parameters)
    with torch.no_grad():
        for p in ps:
            if p.grad is not None: p.sub_(lr * weight_decay * p.grad)
    adam_step(ps, state, lr, betas, eps)

A('adamw_step', 'W', 'calls tfmlib.adamw_step')(lambda parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2: tfmlib.adamw_step(parameters, state, lr, betas, eps, weight_decay))

def adam_eps_default(parameters, state, lr, betas=(0.9, 0.999), eps=1e-6):
    return adam_step_torchstyle(parameters, state, lr, betas, eps)
A('adam', 'W', 'eps default 1e-6')(mk_adam(adam_eps_default))

def adam_no_bc2(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas; state['t'] += 1; t = state['t']
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None: continue
            m.mul_(b1).add_(p.grad, alpha=1 - b1); v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.sub_(lr * (m / (1 - b1 ** t)) / (v.sqrt() + eps))
A('adam', 'W', 'bias correction of v forgotten')(mk_adam(adam_no_bc2))

# ================================================================ 09 clip_grad_norm
def _grads(parameters):
    ps = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    return [p.grad for p in ps if p.grad is not None]

@A('clip_grad_norm', 'R', 'norm of norms via hypot-style sqrt of float64 sums, cast to grad dtype')
def _(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = torch.sqrt(sum((g.double() ** 2).sum() for g in gs))
    scale = min(1.0, max_norm / (total.item() + 1e-6))
    for g in gs: g.mul_(scale)
    return total.to(gs[0].dtype)

@A('clip_grad_norm', 'R', 'cat of flattened grads in float32, linalg.norm; scale via torch.where')
def _(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    flat = torch.cat([g.reshape(-1).to(torch.float32 if g.dtype in HALF else g.dtype) for g in gs])
    total = torch.linalg.norm(flat)
    coef = torch.where(total + 1e-6 > max_norm, max_norm / (total + 1e-6), torch.ones_like(total))
    for g in gs: g.mul_(coef.to(g.dtype))
    return total.to(gs[0].dtype)

@A('clip_grad_norm', 'R', 'python loop of per-grad norms, math.sqrt')
def _(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    sq = 0.0
    for g in gs: sq += float(torch.linalg.vector_norm(g.double())) ** 2
    norm = math.sqrt(sq)
    if norm + 1e-6 > max_norm:
        for g in gs: g.mul_(max_norm / (norm + 1e-6))
    return torch.tensor(norm, dtype=gs[0].dtype)

@A('clip_grad_norm', 'W', 'squares summed in the grads dtype (float16 overflow)')
def _(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = torch.sqrt(sum((g * g).sum() for g in gs))
    s = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in gs: g.mul_(s)
    return total

@A('clip_grad_norm', 'W', 'scales up too (no min with 1)')
def _(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in gs]))
    for g in gs: g.mul_(max_norm / (total + 1e-6))
    return total

@A('clip_grad_norm', 'W', 'each gradient clipped by its own norm')
def _(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in gs]))
    for g in gs: g.mul_(torch.clamp(max_norm / (torch.linalg.vector_norm(g) + 1e-6), max=1.0))
    return total

@A('clip_grad_norm', 'W', 'returns the norm after clipping')
def _(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in gs]))
    for g in gs: g.mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in gs]))

@A('clip_grad_norm', 'W', 'no 1e-6')
def _(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in gs]))
    for g in gs: g.mul_(torch.clamp(max_norm / total, max=1.0))
    return total

@A('clip_grad_norm', 'W', 'a single tensor iterated as rows')
def _(parameters, max_norm):
    ps = list(parameters)
    gs = [p.grad for p in ps if p.grad is not None]
    if not gs: return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in gs]))
    for g in gs: g.mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total

_norm_buf = torch.zeros(())
@A('clip_grad_norm', 'W', 'returns a module-level 0-dim tensor refilled each call')
def _(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in gs]))
    for g in gs: g.mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0).to(g.dtype))
    _norm_buf.fill_(total.item())
    return _norm_buf

@A('clip_grad_norm', 'W', 'returns the norm as a Python float')
def _(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return 0.0
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in gs]))
    for g in gs: g.mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total.item()

@A('clip_grad_norm', 'W', 'returns the scale factor, not the norm, when clipping')
def _(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in gs]))
    s = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in gs: g.mul_(s)
    return total if s == 1 else s

@A('clip_grad_norm', 'W', 'grads replaced (p.grad = g * s), not in place')
def _(parameters, max_norm):
    ps = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    ps = [p for p in ps if p.grad is not None]
    if not ps: return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in ps]))
    s = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for p in ps: p.grad = p.grad * s
    return total

# ================================================================ 09 warmup_inverse_sqrt_lr
@A('warmup_inverse_sqrt_lr', 'R', 'math.pow and branch on step <= warmup')
def _(step, d_model, warmup_steps, factor=1.0):
    if step == 0: return 0.0
    a = math.pow(step, -0.5); b = step * math.pow(warmup_steps, -1.5)
    return factor * math.pow(d_model, -0.5) * (a if a < b else b)

@A('warmup_inverse_sqrt_lr', 'R', 'divisions and sqrt')
def _(step, d_model, warmup_steps, factor=1.0):
    if not step: return 0.0
    return factor / math.sqrt(d_model) * min(1 / math.sqrt(step), step / (warmup_steps * math.sqrt(warmup_steps)))

@A('warmup_inverse_sqrt_lr', 'R', 'rsqrt of d_model * max(step, w^3/step^2)... via min in float')
def _(step, d_model, warmup_steps, factor=1.0):
    if step == 0: return 0.0
    return float(factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5))

@A('warmup_inverse_sqrt_lr', 'W', 'warmup ** -0.5')
def _(step, d_model, warmup_steps, factor=1.0):
    if step == 0: return 0.0
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -0.5)

@A('warmup_inverse_sqrt_lr', 'W', 'step 0 gives step+1')
def _(step, d_model, warmup_steps, factor=1.0):
    step = max(step, 1)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)

@A('warmup_inverse_sqrt_lr', 'W', 'factor ignored')
def _(step, d_model, warmup_steps, factor=1.0):
    if step == 0: return 0.0
    return d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)

@A('warmup_inverse_sqrt_lr', 'W', 'max instead of min')
def _(step, d_model, warmup_steps, factor=1.0):
    if step == 0: return 0.0
    return factor * d_model ** -0.5 * max(step ** -0.5, step * warmup_steps ** -1.5)

@A('warmup_inverse_sqrt_lr', 'W', 'steps counted from 0 (step + 1)')
def _(step, d_model, warmup_steps, factor=1.0):
    if step == 0: return 0.0
    s = step + 1
    return factor * d_model ** -0.5 * min(s ** -0.5, s * warmup_steps ** -1.5)

@A('warmup_inverse_sqrt_lr', 'W', 'integer division d_model // ... : d_model ** -1 // 2 style typo (d_model ** (-1/2) ok) -> uses 1/d_model')
def _(step, d_model, warmup_steps, factor=1.0):
    if step == 0: return 0.0
    return factor / d_model * min(step ** -0.5, step * warmup_steps ** -1.5)

@A('warmup_inverse_sqrt_lr', 'W', 'float32 tensor arithmetic returned as float')
def _(step, d_model, warmup_steps, factor=1.0):
    if step == 0: return 0.0
    s = torch.tensor(float(step)); w = torch.tensor(float(warmup_steps))
    return float(factor * d_model ** -0.5 * torch.minimum(s.rsqrt(), s * w ** -1.5))

# ================================================================ 09 warmup_cosine_lr
@A('warmup_cosine_lr', 'R', 'min/max clamps, cos written as 1 - 2 sin^2')
def _(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return peak_lr * step / warmup_steps
    prog = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    cosine = 1 - math.sin(math.pi * prog / 2) ** 2
    return peak_lr * final_fraction + (peak_lr - peak_lr * final_fraction) * cosine

@A('warmup_cosine_lr', 'R', 'explicit three branches')
def _(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    low = final_fraction * peak_lr
    if step <= warmup_steps: return peak_lr * (step / warmup_steps)
    if step >= total_steps: return low
    prog = (step - warmup_steps) / (total_steps - warmup_steps)
    return low + 0.5 * (peak_lr - low) * (1 + math.cos(math.pi * prog))

@A('warmup_cosine_lr', 'R', 'lerp form')
def _(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return step * peak_lr / warmup_steps
    t = min(step - warmup_steps, total_steps - warmup_steps) / max(1, total_steps - warmup_steps)
    w = 0.5 * (1 + math.cos(math.pi * t))
    return peak_lr * (w + (1 - w) * final_fraction)

@A('warmup_cosine_lr', 'W', 'no clamp after total_steps')
def _(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return peak_lr * step / warmup_steps
    prog = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * prog)))

@A('warmup_cosine_lr', 'W', 'decays to 0 (final_fraction ignored)')
def _(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return peak_lr * step / warmup_steps
    prog = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * 0.5 * (1 + math.cos(math.pi * prog))

@A('warmup_cosine_lr', 'W', 'progress over total_steps, not total - warmup')
def _(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return peak_lr * step / warmup_steps
    prog = min(1.0, (step - warmup_steps) / total_steps)
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * prog)))

@A('warmup_cosine_lr', 'W', 'warmup off by one: (step + 1) / warmup, capped')
def _(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step < warmup_steps: return peak_lr * (step + 1) / warmup_steps
    prog = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * prog)))

@A('warmup_cosine_lr', 'W', 'full cosine period (cos(2 pi p))')
def _(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return peak_lr * step / warmup_steps
    prog = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(2 * math.pi * prog)))

@A('warmup_cosine_lr', 'W', 'warmup == total_steps divides by zero (no max(1, .)) and strict <')
def _(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step < warmup_steps: return peak_lr * step / warmup_steps
    prog = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * prog)))

@A('warmup_cosine_lr', 'W', 'final_fraction default 0.0')
def _(step, peak_lr, warmup_steps, total_steps, final_fraction=0.0):
    if step <= warmup_steps: return peak_lr * step / warmup_steps
    prog = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * prog)))

@A('warmup_cosine_lr', 'W', 'linear decay instead of cosine')
def _(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return peak_lr * step / warmup_steps
    prog = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * (final_fraction + (1 - final_fraction) * (1 - prog))

# ================================================================ 10 shift_right
from tfmlib.training import (encode_source, decode_target, embed_with_positions, attention_layers,
                             PAD_ID, EOS_ID)
from tfmlib import padding_mask, target_mask, encoder, decoder

@A('shift_right', 'R', 'narrow')
def _(tgt):
    n = tgt.size(1) - 1
    return tgt.narrow(1, 0, n), tgt.narrow(1, 1, n)

@A('shift_right', 'R', 'clones via index_select')
def _(tgt):
    idx = torch.arange(tgt.size(1), device=tgt.device)
    return tgt.index_select(1, idx[:-1]), tgt.index_select(1, idx[1:])

@A('shift_right', 'R', 'unbind columns and stack (plain Python)')
def _(tgt):
    cols = tgt.unbind(1)
    return torch.stack(cols[:-1], 1), torch.stack(cols[1:], 1)

@A('shift_right', 'W', 'input and labels swapped')
def _(tgt): return tgt[:, 1:], tgt[:, :-1]

@A('shift_right', 'W', 'batch axis shifted')
def _(tgt): return tgt[:-1], tgt[1:]

@A('shift_right', 'W', '<eos> blanked in the decoder input, in place on a view')
def _(tgt):
    tin = tgt[:, :-1]; tin[tin == EOS_ID] = PAD_ID
    return tin, tgt[:, 1:]

@A('shift_right', 'W', 'pad labels turned into -100')
def _(tgt):
    lab = tgt[:, 1:].clone(); lab[lab == PAD_ID] = -100
    return tgt[:, :-1], lab

@A('shift_right', 'W', 'view(-1) slicing (wrong across rows)')
def _(tgt):
    flat = tgt.reshape(-1)
    B, L = tgt.shape
    return flat[:-1][: B * (L - 1)].view(B, L - 1), flat[1:][: B * (L - 1)].view(B, L - 1)

@A('shift_right', 'W', 'input keeps full length: pad appended to labels')
def _(tgt):
    lab = torch.cat([tgt[:, 1:], torch.full_like(tgt[:, :1], PAD_ID)], 1)
    return tgt[:, :-1], lab[:, :-1] if False else lab

@A('shift_right', 'W', 'labels as float')
def _(tgt): return tgt[:, :-1], tgt[:, 1:].float()

@A('shift_right', 'W', 'returns a list')
def _(tgt): return [tgt[:, :-1], tgt[:, 1:]]

generics('shift_right', lambda tgt: (tgt[:, :-1], tgt[:, 1:]), ['idcache', 'shapecache', 'counter'])

# ================================================================ 10 forward
@A('forward', 'R', 'encode_source then decode_target, keywords')
def _(params, src, tgt_in, config, training=False):
    memory, src_mask = encode_source(params=params, src=src, config=config, training=training)
    return decode_target(params, tgt_in, memory, src_mask, config, training=training)

@A('forward', 'R', 'tuple unpack in one line')
def _(params, src, tgt_in, config, training=False):
    return decode_target(params, tgt_in, *encode_source(params, src, config, training), config, training)

@A('forward', 'R', 'encode_source rewritten from public pieces')
def _(params, src, tgt_in, config, training=False):
    x = embed_with_positions(params, src, config)
    src_mask = padding_mask(src, PAD_ID)
    memory = encoder(x, attention_layers(params, 'encoder', config), config.num_heads, src_mask,
                     final_norm=params['encoder_norm'], norm_first=config.norm_first,
                     dropout_p=config.dropout_p, training=training)
    return decode_target(params, tgt_in, memory, src_mask, config, training)

@A('forward', 'W', 'training not passed to decode_target')
def _(params, src, tgt_in, config, training=False):
    memory, m = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, m, config)

@A('forward', 'W', 'training not passed to encode_source')
def _(params, src, tgt_in, config, training=False):
    memory, m = encode_source(params, src, config)
    return decode_target(params, tgt_in, memory, m, config, training)

@A('forward', 'W', 'memory detached')
def _(params, src, tgt_in, config, training=False):
    memory, m = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory.detach(), m, config, training)

@A('forward', 'W', 'no source padding mask for the decoder')
def _(params, src, tgt_in, config, training=False):
    memory, m = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, torch.ones_like(m), config, training)

@A('forward', 'W', 'encode_source called twice (extra dropout draws)')
def _(params, src, tgt_in, config, training=False):
    _, m = encode_source(params, src, config, training)
    memory, _ = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, m, config, training)

@A('forward', 'W', 'src and tgt_in swapped')
def _(params, src, tgt_in, config, training=False):
    memory, m = encode_source(params, tgt_in, config, training)
    return decode_target(params, src, memory, m, config, training)

@A('forward', 'W', 'calls tfmlib.forward')
def _(params, src, tgt_in, config, training=False):
    return tfmlib.forward(params, src, tgt_in, config, training)

@A('forward', 'W', 'logits under no_grad')
def _(params, src, tgt_in, config, training=False):
    with torch.no_grad():
        memory, m = encode_source(params, src, config, training)
        return decode_target(params, tgt_in, memory, m, config, training)

@A('forward', 'W', 'training default True')
def _(params, src, tgt_in, config, training=True):
    memory, m = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, m, config, training)

# ================================================================ 10 label_smoothed_cross_entropy
def ls_ref_like(logits, labels, smoothing, ignore_index=-100):
    lp = logits.log_softmax(-1); keep = labels != ignore_index
    safe = torch.where(keep, labels, torch.zeros_like(labels))
    nll = -lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    per = (1 - smoothing) * nll - smoothing * lp.mean(-1)
    return (per * keep).sum() / keep.sum()

@A('label_smoothed_cross_entropy', 'R', 'full target distribution, float32 inside for half')
def _(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    lp = up(logits).log_softmax(-1).reshape(-1, V); lab = labels.reshape(-1)
    keep = lab != ignore_index
    target = torch.full_like(lp, smoothing / V)
    target[keep.nonzero().squeeze(1), lab[keep]] += 1 - smoothing
    per = -(target * lp).sum(-1)
    return (per[keep].sum() / keep.sum()).to(logits.dtype)

@A('label_smoothed_cross_entropy', 'R', 'hand-written logsumexp, boolean indexing')
def _(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    x = logits.reshape(-1, V); lab = labels.reshape(-1)
    keep = lab != ignore_index
    x = x[keep]; lab = lab[keep]
    mx = x.amax(-1, keepdim=True).detach()
    lse = (x - mx).exp().sum(-1, keepdim=True).log() + mx
    lp = x - lse
    nll = -lp[torch.arange(lp.size(0)), lab]
    smooth = -lp.sum(-1) / V
    return ((1 - smoothing) * nll + smoothing * smooth).mean()

@A('label_smoothed_cross_entropy', 'R', 'F.nll_loss + mean of -log_softmax')
def _(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    lp = F.log_softmax(logits, dim=-1).reshape(-1, V); lab = labels.reshape(-1)
    keep = lab != ignore_index
    nll = F.nll_loss(lp, lab, ignore_index=ignore_index)
    smooth = -(lp.mean(-1) * keep).sum() / keep.sum()
    return (1 - smoothing) * nll + smoothing * smooth

@A('label_smoothed_cross_entropy', 'W', 'smoothing / (V - 1) on the other classes only')
def _(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    lp = logits.log_softmax(-1).reshape(-1, V); lab = labels.reshape(-1); keep = lab != ignore_index
    safe = torch.where(keep, lab, torch.zeros_like(lab))
    tgt = torch.full_like(lp, smoothing / (V - 1)); tgt.scatter_(1, safe[:, None], 1 - smoothing)
    per = -(tgt * lp).sum(-1)
    return (per * keep).sum() / keep.sum()

@A('label_smoothed_cross_entropy', 'W', 'mean over all positions, ignored ones counted as 0')
def _(logits, labels, smoothing, ignore_index=-100):
    lp = logits.log_softmax(-1); keep = labels != ignore_index
    safe = torch.where(keep, labels, torch.zeros_like(labels))
    per = (1 - smoothing) * -lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) - smoothing * lp.mean(-1)
    return (per * keep).mean()

@A('label_smoothed_cross_entropy', 'W', 'log(softmax(x)) (underflow on extreme logits)')
def _(logits, labels, smoothing, ignore_index=-100):
    lp = torch.log(torch.softmax(logits, -1)); keep = labels != ignore_index
    safe = torch.where(keep, labels, torch.zeros_like(labels))
    per = (1 - smoothing) * -lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) - smoothing * lp.mean(-1)
    return (per * keep).sum() / keep.sum()

@A('label_smoothed_cross_entropy', 'W', 'label weight 1 - smoothing only (no smoothing/V on it)')
def _(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    lp = logits.log_softmax(-1); keep = labels != ignore_index
    safe = torch.where(keep, labels, torch.zeros_like(labels))
    nll = -lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    per = (1 - smoothing) * nll - smoothing / V * (lp.sum(-1) - (-nll))
    return (per * keep).sum() / keep.sum()

@A('label_smoothed_cross_entropy', 'W', 'calls F.cross_entropy')
def _(logits, labels, smoothing, ignore_index=-100):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), label_smoothing=smoothing, ignore_index=ignore_index)

@A('label_smoothed_cross_entropy', 'W', 'ignore_index default 0')
def _(logits, labels, smoothing, ignore_index=0):
    return ls_ref_like(logits, labels, smoothing, ignore_index)

@A('label_smoothed_cross_entropy', 'W', 'softmax over axis 0 when logits are 2-D (dim=1 hard-coded for 3-D)')
def _(logits, labels, smoothing, ignore_index=-100):
    lp = logits.log_softmax(dim=2 if logits.dim() == 3 else 0); keep = labels != ignore_index
    safe = torch.where(keep, labels, torch.zeros_like(labels))
    per = (1 - smoothing) * -lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) - smoothing * lp.mean(-1)
    return (per * keep).sum() / keep.sum()

@A('label_smoothed_cross_entropy', 'W', 'gradient blocked through the smoothing term (.detach())')
def _(logits, labels, smoothing, ignore_index=-100):
    lp = logits.log_softmax(-1); keep = labels != ignore_index
    safe = torch.where(keep, labels, torch.zeros_like(labels))
    per = (1 - smoothing) * -lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) - smoothing * lp.mean(-1).detach()
    return (per * keep).sum() / keep.sum()

@A('label_smoothed_cross_entropy', 'W', 'ignored positions filtered by labels >= 0 (ignore_index >= 0 kept)')
def _(logits, labels, smoothing, ignore_index=-100):
    keep = labels >= 0
    lp = logits.log_softmax(-1)
    safe = torch.where(keep, labels, torch.zeros_like(labels))
    per = (1 - smoothing) * -lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) - smoothing * lp.mean(-1)
    return (per * keep).sum() / keep.sum()

generics('label_smoothed_cross_entropy', ls_ref_like, ['f32', 'f64', 'idcache', 'shapecache', 'counter'])

# ================================================================ b1 decoder_block
def blk_ref_like(x, block, num_heads, mask=None):
    if mask is None: mask = causal_mask(x.size(1))
    h = layer_norm(x, block['norm1']['gamma'], block['norm1']['beta'])
    x = x + attn(h, h, block['attention'], num_heads, mask)
    return x + feed_forward(layer_norm(x, block['norm2']['gamma'], block['norm2']['beta']), block['ffn'])

@A('decoder_block', 'R', 'einsum attention, own LN, torch.tril mask, half widened')
def _(x, block, num_heads, mask=None):
    L = x.size(1)
    if mask is None: mask = torch.ones(L, L, dtype=torch.bool).tril()[None, None]
    h = ln32(x, block['norm1']['gamma'], block['norm1']['beta'])
    x = x + mha_einsum(h, h, block['attention'], num_heads, mask)
    return x + ffn32(ln32(x, block['norm2']['gamma'], block['norm2']['beta']), block['ffn'])

@A('decoder_block', 'R', 'residual_sublayer norm_first=True')
def _(x, block, num_heads, mask=None):
    m = causal_mask(x.size(1), device=x.device) if mask is None else mask
    x = residual_sublayer(x, lambda h: attn(h, h, block['attention'], num_heads, m), block['norm1'], norm_first=True)
    return residual_sublayer(x, lambda h: feed_forward(h, block['ffn']), block['norm2'], norm_first=True)

@A('decoder_block', 'R', 'float64 inside')
def _(x, block, num_heads, mask=None):
    d = lambda t: {k: (None if v is None else v.double()) for k, v in t.items()}
    return blk_ref_like(x.double(), {k: d(v) for k, v in block.items()}, num_heads, mask).to(x.dtype)

@A('decoder_block', 'W', 'Post-LN')
def _(x, block, num_heads, mask=None):
    if mask is None: mask = causal_mask(x.size(1))
    x = layer_norm(x + attn(x, x, block['attention'], num_heads, mask), block['norm1']['gamma'], block['norm1']['beta'])
    return layer_norm(x + feed_forward(x, block['ffn']), block['norm2']['gamma'], block['norm2']['beta'])

@A('decoder_block', 'W', 'mask None means no mask')
def _(x, block, num_heads, mask=None):
    h = layer_norm(x, block['norm1']['gamma'], block['norm1']['beta'])
    x = x + attn(h, h, block['attention'], num_heads, mask)
    return x + feed_forward(layer_norm(x, block['norm2']['gamma'], block['norm2']['beta']), block['ffn'])

@A('decoder_block', 'W', 'passed mask combined with causal')
def _(x, block, num_heads, mask=None):
    c = causal_mask(x.size(1))
    return blk_ref_like(x, block, num_heads, c if mask is None else (mask & c))

@A('decoder_block', 'W', 'causal via triu (future visible)')
def _(x, block, num_heads, mask=None):
    L = x.size(1)
    if mask is None: mask = torch.ones(L, L, dtype=torch.bool).triu()[None, None]
    return blk_ref_like(x, block, num_heads, mask)

@A('decoder_block', 'W', 'strict lower triangle (tril(-1)), NaN-free thanks to library')
def _(x, block, num_heads, mask=None):
    L = x.size(1)
    if mask is None: mask = torch.ones(L, L, dtype=torch.bool).tril(-1)[None, None]
    return blk_ref_like(x, block, num_heads, mask)

@A('decoder_block', 'W', 'FFN reads x, not LayerNorm2(x)')
def _(x, block, num_heads, mask=None):
    if mask is None: mask = causal_mask(x.size(1))
    h = layer_norm(x, block['norm1']['gamma'], block['norm1']['beta'])
    x = x + attn(h, h, block['attention'], num_heads, mask)
    return x + feed_forward(x, block['ffn'])

@A('decoder_block', 'W', 'residual from the normalised h')
def _(x, block, num_heads, mask=None):
    if mask is None: mask = causal_mask(x.size(1))
    h = layer_norm(x, block['norm1']['gamma'], block['norm1']['beta'])
    x = h + attn(h, h, block['attention'], num_heads, mask)
    return x + feed_forward(layer_norm(x, block['norm2']['gamma'], block['norm2']['beta']), block['ffn'])

@A('decoder_block', 'W', 'causal mask cached by the first length (module global)')
def _(x, block, num_heads, mask=None, _c={}):
    if mask is None:
        mask = _c.setdefault('m', causal_mask(x.size(1)))
        L = x.size(1)
        if mask.size(-1) < L: mask = causal_mask(L)
        else: mask = mask[..., :L, :L]
    return blk_ref_like(x, block, num_heads, mask)

@A('decoder_block', 'W', 'calls tfmlib.decoder_block')
def _(x, block, num_heads, mask=None):
    return tfmlib.decoder_block(x, block, num_heads, mask)

generics('decoder_block', blk_ref_like, ['f32', 'mutate', 'idcache', 'buffer', 'counter'])

# ================================================================ b1 lm_forward
def lmf_ref_like(params, ids, config):
    L = ids.size(1)
    x = embed(ids, params['token_embedding']) + params['position_embedding'][:L]
    for b in params['blocks']: x = tfmlib.decoder_block(x, b, config.num_heads)
    h = layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta'])
    return linear(h, params['token_embedding'])

@A('lm_forward', 'R', 'one-hot matmul embedding, einsum output, own blocks')
def _(params, ids, config):
    E = params['token_embedding']; V, D = E.shape; L = ids.size(1)
    oh = F.one_hot(ids, V).to(E.dtype)
    x = (oh @ E) * math.sqrt(D) + params['position_embedding'][:L]
    mask = torch.ones(L, L, dtype=torch.bool).tril()[None, None]
    for b in params['blocks']:
        h = ln32(x, b['norm1']['gamma'], b['norm1']['beta'])
        x = x + mha_einsum(h, h, b['attention'], config.num_heads, mask)
        x = x + ffn32(ln32(x, b['norm2']['gamma'], b['norm2']['beta']), b['ffn'])
    h = ln32(x, params['final_norm']['gamma'], params['final_norm']['beta'])
    return torch.einsum('bld,vd->blv', h, E)

@A('lm_forward', 'R', 'E[ids] * D**0.5 and library decoder_block')
def _(params, ids, config):
    E = params['token_embedding']
    x = E[ids] * E.size(1) ** 0.5 + params['position_embedding'][: ids.shape[1]]
    for b in params['blocks']: x = tfmlib.decoder_block(x, b, config.num_heads, causal_mask(ids.size(1)))
    return layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta']) @ E.T

@A('lm_forward', 'R', 'F.embedding and F.linear')
def _(params, ids, config):
    E = params['token_embedding']
    x = F.embedding(ids, E) * math.sqrt(config.d_model) + params['position_embedding'].narrow(0, 0, ids.size(1))
    for b in params['blocks']: x = blk_ref_like(x, b, config.num_heads)
    x = F.layer_norm(x, (x.size(-1),), params['final_norm']['gamma'], params['final_norm']['beta'], 1e-5)
    return F.linear(x, E)

@A('lm_forward', 'W', 'no sqrt(D) scaling')
def _(params, ids, config):
    E = params['token_embedding']; L = ids.size(1)
    x = E[ids] + params['position_embedding'][:L]
    for b in params['blocks']: x = tfmlib.decoder_block(x, b, config.num_heads)
    return linear(layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta']), E)

@A('lm_forward', 'W', 'positions from the end of the table')
def _(params, ids, config):
    E = params['token_embedding']; L = ids.size(1)
    x = embed(ids, E) + params['position_embedding'][-L:]
    for b in params['blocks']: x = tfmlib.decoder_block(x, b, config.num_heads)
    return linear(layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta']), E)

@A('lm_forward', 'W', 'final LayerNorm forgotten')
def _(params, ids, config):
    E = params['token_embedding']; L = ids.size(1)
    x = embed(ids, E) + params['position_embedding'][:L]
    for b in params['blocks']: x = tfmlib.decoder_block(x, b, config.num_heads)
    return linear(x, E)

@A('lm_forward', 'W', 'sqrt(D) from config.max_len by mistake')
def _(params, ids, config):
    E = params['token_embedding']; L = ids.size(1)
    x = E[ids] * math.sqrt(config.max_len) + params['position_embedding'][:L]
    for b in params['blocks']: x = tfmlib.decoder_block(x, b, config.num_heads)
    return linear(layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta']), E)

@A('lm_forward', 'W', 'only the first block')
def _(params, ids, config):
    E = params['token_embedding']; L = ids.size(1)
    x = embed(ids, E) + params['position_embedding'][:L]
    x = tfmlib.decoder_block(x, params['blocks'][0], config.num_heads)
    return linear(layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta']), E)

@A('lm_forward', 'W', 'position table sliced by config.max_len, broadcast over the wrong axis for L==max_len only')
def _(params, ids, config):
    E = params['token_embedding']; L = ids.size(1)
    pos = params['position_embedding'][:L] if L < config.max_len else params['position_embedding'][:L].flip(0)
    x = embed(ids, E) + pos
    for b in params['blocks']: x = tfmlib.decoder_block(x, b, config.num_heads)
    return linear(layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta']), E)

@A('lm_forward', 'W', 'positions indexed by token id')
def _(params, ids, config):
    E = params['token_embedding']
    x = embed(ids, E) + params['position_embedding'][ids.clamp(max=config.max_len - 1)]
    for b in params['blocks']: x = tfmlib.decoder_block(x, b, config.num_heads)
    return linear(layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta']), E)

@A('lm_forward', 'W', 'calls tfmlib.lm_forward')
def _(params, ids, config): return tfmlib.lm_forward(params, ids, config)

generics('lm_forward', lmf_ref_like, ['f32', 'idcache', 'shapecache', 'counter'])

# ================================================================ b1 lm_loss
@A('lm_loss', 'R', 'lm_forward + log_softmax gather mean')
def _(params, ids, config):
    logits = lmf_ref_like(params, ids[:, :-1], config)
    lp = logits.log_softmax(-1)
    return -lp.gather(-1, ids[:, 1:].unsqueeze(-1)).mean()

@A('lm_loss', 'R', 'F.nll_loss on flattened, library lm_forward')
def _(params, ids, config):
    logits = tfmlib.lm_forward(params, ids[:, :-1], config)
    return F.nll_loss(F.log_softmax(logits, -1).flatten(0, 1), ids[:, 1:].flatten())

@A('lm_loss', 'R', 'per-row cross_entropy with (B, V, L) layout, then mean')
def _(params, ids, config):
    logits = tfmlib.lm_forward(params, ids[:, :-1], config)
    return F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction='none').mean()

@A('lm_loss', 'W', 'targets not shifted')
def _(params, ids, config):
    logits = tfmlib.lm_forward(params, ids[:, :-1], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, :-1].reshape(-1))

@A('lm_loss', 'W', 'forward on all L+1 tokens, drop the last row')
def _(params, ids, config):
    logits = lmf_ref_like(params, ids, config)[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))

@A('lm_loss', 'W', 'sum instead of mean')
def _(params, ids, config):
    logits = tfmlib.lm_forward(params, ids[:, :-1], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1), reduction='sum')

@A('lm_loss', 'W', 'mean over batch of per-row sums / L')
def _(params, ids, config):
    logits = tfmlib.lm_forward(params, ids[:, :-1], config)
    l = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction='none')
    return (l.sum(1) / config.max_len).mean()

@A('lm_loss', 'W', 'ignore_index=0 (no pad in a char LM)')
def _(params, ids, config):
    logits = tfmlib.lm_forward(params, ids[:, :-1], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1), ignore_index=0)

@A('lm_loss', 'W', 'view on non-contiguous slice -> reshape of transposed targets')
def _(params, ids, config):
    logits = tfmlib.lm_forward(params, ids[:, :-1], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].T.reshape(-1))

@A('lm_loss', 'W', 'only the last position scored')
def _(params, ids, config):
    logits = tfmlib.lm_forward(params, ids[:, :-1], config)
    return F.cross_entropy(logits[:, -1], ids[:, -1])

@A('lm_loss', 'W', 'calls tfmlib.lm_loss')
def _(params, ids, config): return tfmlib.lm_loss(params, ids, config)

generics('lm_loss', lambda params, ids, config: F.cross_entropy(tfmlib.lm_forward(params, ids[:, :-1], config).flatten(0, 1), ids[:, 1:].flatten()), ['f64', 'idcache', 'shapecache', 'counter'])

# ================================================================ b2 next_token_probs
@A('next_token_probs', 'R', 'hand-written softmax, max subtracted, half widened')
def _(logits, temperature=1.0):
    z = up(logits) / temperature
    z = z - z.amax(-1, keepdim=True)
    e = z.exp()
    return (e / e.sum(-1, keepdim=True)).to(logits.dtype)

@A('next_token_probs', 'R', 'exp(log_softmax)')
def _(logits, temperature=1.0):
    return torch.log_softmax(logits / temperature, dim=-1).exp()

@A('next_token_probs', 'R', 'float64 inside, cast back')
def _(logits, temperature=1.0):
    return torch.softmax(logits.double() / temperature, -1).to(logits.dtype)

@A('next_token_probs', 'W', 'logits * T')
def _(logits, temperature=1.0): return torch.softmax(logits * temperature, -1)

@A('next_token_probs', 'W', 'softmax(x) ** (1/T), renormalised (underflows)')
def _(logits, temperature=1.0):
    p = torch.softmax(logits, -1) ** (1 / temperature)
    return p / p.sum(-1, keepdim=True)

@A('next_token_probs', 'W', 'softmax over dim 0')
def _(logits, temperature=1.0): return torch.softmax(logits / temperature, 0)

@A('next_token_probs', 'W', 'no max subtraction (overflow on extreme logits)')
def _(logits, temperature=1.0):
    e = (logits / temperature).exp()
    return e / e.sum(-1, keepdim=True)

@A('next_token_probs', 'W', 'divides logits in place')
def _(logits, temperature=1.0):
    logits /= temperature
    return torch.softmax(logits, -1)

@A('next_token_probs', 'W', 'temperature after the softmax, renormalised')
def _(logits, temperature=1.0):
    p = torch.softmax(logits, -1) / temperature
    return p / p.sum(-1, keepdim=True)

@A('next_token_probs', 'W', 'temperature default 0.7')
def _(logits, temperature=0.7): return torch.softmax(logits / temperature, -1)

@A('next_token_probs', 'W', 'dim=1 hard-coded (right only for 2-D logits)')
def _(logits, temperature=1.0): return torch.softmax(logits / temperature, dim=1)

generics('next_token_probs', lambda logits, temperature=1.0: torch.softmax(logits / temperature, -1), ['f32', 'f64', 'idcache', 'shapecache', 'buffer'])

# ================================================================ b2 top_k_filter
@A('top_k_filter', 'R', 'sort descending, threshold from index k-1')
def _(logits, k):
    kk = min(k, logits.size(-1))
    thr = logits.sort(-1, descending=True).values[..., kk - 1:kk]
    return torch.where(logits >= thr, logits, torch.full_like(logits, float('-inf')))

@A('top_k_filter', 'R', 'kthvalue (V-k+1 smallest)')
def _(logits, k):
    V = logits.size(-1); kk = min(k, V)
    thr = logits.float().kthvalue(V - kk + 1, dim=-1, keepdim=True).values.to(logits.dtype) if logits.dtype in HALF else logits.kthvalue(V - kk + 1, dim=-1, keepdim=True).values
    return logits.masked_fill(logits < thr, float('-inf'))

@A('top_k_filter', 'R', 'python loop over rows with sorted()')
def _(logits, k):
    V = logits.size(-1); flat = logits.reshape(-1, V); out = flat.clone()
    for r in range(flat.size(0)):
        vals = sorted(flat[r].tolist(), reverse=True)
        thr = vals[min(k, V) - 1]
        out[r][flat[r] < thr] = float('-inf')
    return out.reshape(logits.shape)

@A('top_k_filter', 'W', 'scatter of topk indices (ties dropped)')
def _(logits, k):
    kk = min(k, logits.size(-1)); idx = logits.topk(kk, -1).indices
    out = torch.full_like(logits, float('-inf'))
    return out.scatter(-1, idx, logits.gather(-1, idx))

@A('top_k_filter', 'W', 'k > V crashes (no min)')
def _(logits, k):
    thr = logits.topk(k, -1).values[..., -1:]
    return logits.masked_fill(logits < thr, float('-inf'))

@A('top_k_filter', 'W', '-1e9 instead of -inf')
def _(logits, k):
    thr = logits.topk(min(k, logits.size(-1)), -1).values[..., -1:]
    return logits.masked_fill(logits < thr, -1e9)

@A('top_k_filter', 'W', 'masked_fill_ in place')
def _(logits, k):
    thr = logits.topk(min(k, logits.size(-1)), -1).values[..., -1:]
    return logits.masked_fill_(logits < thr, float('-inf'))

@A('top_k_filter', 'W', '<= drops the k-th')
def _(logits, k):
    thr = logits.topk(min(k, logits.size(-1)), -1).values[..., -1:]
    return logits.masked_fill(logits <= thr, float('-inf'))

@A('top_k_filter', 'W', 'threshold over the whole tensor, not per row')
def _(logits, k):
    thr = logits.reshape(-1).topk(min(k, logits.numel())).values[-1]
    return logits.masked_fill(logits < thr, float('-inf'))

@A('top_k_filter', 'W', 'k-th largest by the sorted copy in float16 compare (cast thr to float32 and compare) -> k smallest')
def _(logits, k):
    thr = logits.topk(min(k, logits.size(-1)), -1, largest=False).values[..., -1:]
    return logits.masked_fill(logits > thr, float('-inf'))

@A('top_k_filter', 'W', 'k - 1 off by one')
def _(logits, k):
    kk = max(1, min(k, logits.size(-1)) - 1)
    thr = logits.topk(kk, -1).values[..., -1:]
    return logits.masked_fill(logits < thr, float('-inf'))

generics('top_k_filter', lambda logits, k: logits.masked_fill(logits < logits.topk(min(k, logits.size(-1)), -1).values[..., -1:], float('-inf')), ['f32', 'mutate', 'idcache', 'counter'])

# ================================================================ b2 top_p_filter
def topp_ref_like(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = torch.softmax(s, -1)
    kept = (pr.cumsum(-1) - pr) < p
    smallest = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < smallest, float('-inf'))

@A('top_p_filter', 'R', 'sorted indices + scatter back, ties via threshold')
def _(logits, p):
    s, idx = logits.sort(-1, descending=True)
    pr = s.softmax(-1)
    before = torch.cat([torch.zeros_like(pr[..., :1]), pr.cumsum(-1)[..., :-1]], -1)
    keep_sorted = before < p
    keep = torch.zeros_like(keep_sorted).scatter(-1, idx, keep_sorted)
    thr = torch.where(keep, logits, torch.full_like(logits, float('inf'))).amin(-1, keepdim=True)
    return logits.masked_fill(logits < thr, float('-inf'))

@A('top_p_filter', 'R', 'python loop over rows')
def _(logits, p):
    V = logits.size(-1); flat = logits.reshape(-1, V); out = flat.clone()
    for r in range(flat.size(0)):
        s = flat[r].sort(descending=True).values
        pr = s.softmax(-1)
        total = torch.zeros((), dtype=pr.dtype); last = s[0]
        for i in range(V):
            if total < p: last = s[i]; total = total + pr[i]
            else: break
        out[r][flat[r] < last] = float('-inf')
    return out.reshape(logits.shape)

@A('top_p_filter', 'R', 'half widened to float32 for softmax/cumsum')
def _(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = torch.softmax(up(s), -1)
    kept = (pr.cumsum(-1) - pr) < p
    smallest = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < smallest, float('-inf'))

@A('top_p_filter', 'R', 'p >= 1 keeps everything (exact math), else reference-like')
def _(logits, p):
    if p >= 1: return logits.clone()
    return topp_ref_like(logits, p)

@A('top_p_filter', 'W', 'cumsum <= p (the token that reaches p dropped)')
def _(logits, p):
    s = logits.sort(-1, descending=True).values
    kept = torch.softmax(s, -1).cumsum(-1) <= p
    kept[..., 0] = True
    smallest = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < smallest, float('-inf'))

@A('top_p_filter', 'W', 'scatter by sorted index (ties split)')
def _(logits, p):
    s, idx = logits.sort(-1, descending=True)
    pr = s.softmax(-1); keep_sorted = (pr.cumsum(-1) - pr) < p
    keep = torch.zeros_like(keep_sorted).scatter(-1, idx, keep_sorted)
    return logits.masked_fill(~keep, float('-inf'))

@A('top_p_filter', 'W', 'returns the sorted order')
def _(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = s.softmax(-1); kept = (pr.cumsum(-1) - pr) < p
    return s.masked_fill(~kept, float('-inf'))

@A('top_p_filter', 'W', 'cumsum in vocabulary order')
def _(logits, p):
    pr = logits.softmax(-1); kept = (pr.cumsum(-1) - pr) < p
    return logits.masked_fill(~kept, float('-inf'))

@A('top_p_filter', 'W', 'cumsum < p strictly including self (reaching token dropped unless first)')
def _(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = s.softmax(-1); kept = pr.cumsum(-1) < p; kept[..., 0] = True
    smallest = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < smallest, float('-inf'))

@A('top_p_filter', 'W', 'probabilities from logits already -inf give nan: nan_to_num(-1e4) first')
def _(logits, p):
    return topp_ref_like(torch.nan_to_num(logits, neginf=-1e4), p).masked_fill(logits == float('-inf'), float('-inf'))

@A('top_p_filter', 'W', 'in-place masked_fill_')
def _(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = s.softmax(-1); kept = (pr.cumsum(-1) - pr) < p
    smallest = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill_(logits < smallest, float('-inf'))

@A('top_p_filter', 'W', 'keeps one extra token past p')
def _(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = s.softmax(-1); before = pr.cumsum(-1) - pr
    kept = torch.cat([torch.ones_like(before[..., :1], dtype=torch.bool), before[..., :-1] < p], -1)
    smallest = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < smallest, float('-inf'))

generics('top_p_filter', topp_ref_like, ['f32', 'f64', 'mutate', 'idcache', 'counter'])

# ================================================================ b2 cached_self_attention
def csa_ref_like(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params['w_q'], params.get('b_q')), num_heads)
    k = split_heads(linear(x, params['w_k'], params.get('b_k')), num_heads)
    v = split_heads(linear(x, params['w_v'], params.get('b_v')), num_heads)
    if cache is not None:
        k = torch.cat([cache['key'], k], 2); v = torch.cat([cache['value'], v], 2)
    Lt, Ln = k.size(2), x.size(1)
    mask = causal_mask(Lt)[:, :, Lt - Ln:]
    ctx, _ = scaled_dot_product_attention(q, k, v, mask)
    return linear(merge_heads(ctx), params['w_o'], params.get('b_o')), {'key': k, 'value': v}

@A('cached_self_attention', 'R', 'arange comparison mask')
def _(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params['w_q'], params.get('b_q')), num_heads)
    k = split_heads(linear(x, params['w_k'], params.get('b_k')), num_heads)
    v = split_heads(linear(x, params['w_v'], params.get('b_v')), num_heads)
    Lp = 0 if cache is None else cache['key'].size(2)
    if cache is not None:
        k = torch.cat((cache['key'], k), dim=-2); v = torch.cat((cache['value'], v), dim=-2)
    qpos = Lp + torch.arange(x.size(1))
    mask = torch.arange(k.size(2))[None, :] <= qpos[:, None]
    ctx, _ = scaled_dot_product_attention(q, k, v, mask)
    return linear(merge_heads(ctx), params['w_o'], params.get('b_o')), {'key': k, 'value': v}

@A('cached_self_attention', 'R', 'einsum, hand softmax, half widened')
def _(x, params, num_heads, cache=None):
    B, Ln, D = x.shape; H = num_heads; dk = D // H
    def proj(w, b):
        y = up(x) @ up(params[w]).T
        if params.get(b) is not None: y = y + up(params[b])
        return y.view(B, Ln, H, dk).transpose(1, 2)
    q, k, v = proj('w_q', 'b_q'), proj('w_k', 'b_k'), proj('w_v', 'b_v')
    kd, vd = k.to(x.dtype), v.to(x.dtype)
    if cache is not None:
        kd = torch.cat([cache['key'], kd], 2); vd = torch.cat([cache['value'], vd], 2)
    Lt = kd.size(2)
    s = torch.einsum('bhqd,bhkd->bhqk', q, up(kd)) / math.sqrt(dk)
    allowed = torch.ones(Lt, Lt, dtype=torch.bool).tril()[Lt - Ln:]
    s = s.masked_fill(~allowed, float('-inf'))
    w = (s - s.amax(-1, keepdim=True)).exp(); w = w / w.sum(-1, keepdim=True)
    ctx = torch.einsum('bhqk,bhkd->bqhd', w, up(vd)).reshape(B, Ln, D)
    out = ctx @ up(params['w_o']).T
    if params.get('b_o') is not None: out = out + up(params['b_o'])
    return out.to(x.dtype), {'key': kd, 'value': vd}

@A('cached_self_attention', 'R', 'one new token at a time, growing the cache')
def _(x, params, num_heads, cache=None):
    outs = []
    for t in range(x.size(1)):
        o, cache = csa_ref_like(x[:, t:t + 1], params, num_heads, cache)
        outs.append(o)
    return torch.cat(outs, 1), cache

@A('cached_self_attention', 'W', 'causal_mask(L_new) ignores the past')
def _(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params['w_q'], params.get('b_q')), num_heads)
    k = split_heads(linear(x, params['w_k'], params.get('b_k')), num_heads)
    v = split_heads(linear(x, params['w_v'], params.get('b_v')), num_heads)
    mask = causal_mask(x.size(1))
    if cache is not None:
        k = torch.cat([cache['key'], k], 2); v = torch.cat([cache['value'], v], 2)
        Lp = cache['key'].size(2)
        mask = torch.cat([torch.ones(1, 1, x.size(1), Lp, dtype=torch.bool), mask], -1) if x.size(1) > 1 else None
    ctx, _ = scaled_dot_product_attention(q, k, v, mask)
    return linear(merge_heads(ctx), params['w_o'], params.get('b_o')), {'key': k, 'value': v}

@A('cached_self_attention', 'W', 'mask sliced from the top-left')
def _(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params['w_q'], params.get('b_q')), num_heads)
    k = split_heads(linear(x, params['w_k'], params.get('b_k')), num_heads)
    v = split_heads(linear(x, params['w_v'], params.get('b_v')), num_heads)
    if cache is not None:
        k = torch.cat([cache['key'], k], 2); v = torch.cat([cache['value'], v], 2)
    mask = causal_mask(k.size(2))[:, :, :x.size(1)]
    ctx, _ = scaled_dot_product_attention(q, k, v, mask)
    return linear(merge_heads(ctx), params['w_o'], params.get('b_o')), {'key': k, 'value': v}

@A('cached_self_attention', 'W', 'no mask at all')
def _(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params['w_q'], params.get('b_q')), num_heads)
    k = split_heads(linear(x, params['w_k'], params.get('b_k')), num_heads)
    v = split_heads(linear(x, params['w_v'], params.get('b_v')), num_heads)
    if cache is not None:
        k = torch.cat([cache['key'], k], 2); v = torch.cat([cache['value'], v], 2)
    ctx, _ = scaled_dot_product_attention(q, k, v)
    return linear(merge_heads(ctx), params['w_o'], params.get('b_o')), {'key': k, 'value': v}

@A('cached_self_attention', 'W', 'new cache holds only the new keys')
def _(x, params, num_heads, cache=None):
    out, c = csa_ref_like(x, params, num_heads, cache)
    Ln = x.size(1)
    return out, {'key': c['key'][:, :, -Ln:], 'value': c['value'][:, :, -Ln:]}

@A('cached_self_attention', 'W', 'caller cache dict updated in place')
def _(x, params, num_heads, cache=None):
    out, c = csa_ref_like(x, params, num_heads, cache)
    if cache is None: return out, c
    cache['key'], cache['value'] = c['key'], c['value']
    return out, cache

@A('cached_self_attention', 'W', 'values cached from keys')
def _(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params['w_q'], params.get('b_q')), num_heads)
    k = split_heads(linear(x, params['w_k'], params.get('b_k')), num_heads)
    v = split_heads(linear(x, params['w_v'], params.get('b_v')), num_heads)
    if cache is not None:
        k = torch.cat([cache['key'], k], 2); v = torch.cat([cache['key'], v], 2)
    Lt, Ln = k.size(2), x.size(1)
    ctx, _ = scaled_dot_product_attention(q, k, v, causal_mask(Lt)[:, :, Lt - Ln:])
    return linear(merge_heads(ctx), params['w_o'], params.get('b_o')), {'key': k, 'value': v}

@A('cached_self_attention', 'W', 'new tokens put before the cache')
def _(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params['w_q'], params.get('b_q')), num_heads)
    k = split_heads(linear(x, params['w_k'], params.get('b_k')), num_heads)
    v = split_heads(linear(x, params['w_v'], params.get('b_v')), num_heads)
    if cache is not None:
        k = torch.cat([k, cache['key']], 2); v = torch.cat([v, cache['value']], 2)
    Lt, Ln = k.size(2), x.size(1)
    ctx, _ = scaled_dot_product_attention(q, k, v, causal_mask(Lt)[:, :, Lt - Ln:])
    return linear(merge_heads(ctx), params['w_o'], params.get('b_o')), {'key': k, 'value': v}

@A('cached_self_attention', 'W', 'heads split by a plain view to (B, H, L, d_k)')
def _(x, params, num_heads, cache=None):
    B, Ln, D = x.shape
    sh = lambda t: t.reshape(B, num_heads, Ln, D // num_heads)
    q = sh(linear(x, params['w_q'], params.get('b_q'))); k = sh(linear(x, params['w_k'], params.get('b_k')))
    v = sh(linear(x, params['w_v'], params.get('b_v')))
    if cache is not None:
        k = torch.cat([cache['key'], k], 2); v = torch.cat([cache['value'], v], 2)
    Lt = k.size(2)
    ctx, _ = scaled_dot_product_attention(q, k, v, causal_mask(Lt)[:, :, Lt - Ln:])
    return linear(merge_heads(ctx), params['w_o'], params.get('b_o')), {'key': k, 'value': v}

@A('cached_self_attention', 'W', 'biases ignored')
def _(x, params, num_heads, cache=None):
    P = {k: v for k, v in params.items() if not k.startswith('b_')}
    return csa_ref_like(x, P, num_heads, cache)

@A('cached_self_attention', 'W', 'calls tfmlib.cached_self_attention')
def _(x, params, num_heads, cache=None): return tfmlib.cached_self_attention(x, params, num_heads, cache)

generics('cached_self_attention', csa_ref_like, ['f32', 'mutate', 'idcache', 'counter'])

# ================================================================ b2 lm_step
def lms_ref_like(params, ids, config, caches=None, csa=csa_ref_like, start_fn=None):
    start = 0 if caches is None else caches[0]['key'].size(2)
    if start_fn: start = start_fn(caches)
    x = embed(ids, params['token_embedding']) + params['position_embedding'][start:start + ids.size(1)]
    new = []
    for i, b in enumerate(params['blocks']):
        h = layer_norm(x, b['norm1']['gamma'], b['norm1']['beta'])
        a, c = csa(h, b['attention'], config.num_heads, None if caches is None else caches[i])
        x = x + a
        x = x + feed_forward(layer_norm(x, b['norm2']['gamma'], b['norm2']['beta']), b['ffn'])
        new.append(c)
    h = layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta'])
    return linear(h, params['token_embedding']), new

@A('lm_step', 'R', 'library cached_self_attention, zip over blocks')
def _(params, ids, config, caches=None):
    past = [None] * len(params['blocks']) if caches is None else caches
    start = 0 if caches is None else caches[0]['value'].shape[-2]
    pos = params['position_embedding'][torch.arange(start, start + ids.size(1))]
    x = embed(ids, params['token_embedding']) + pos
    new = []
    for b, c in zip(params['blocks'], past):
        a, c2 = tfmlib.cached_self_attention(layer_norm(x, b['norm1']['gamma'], b['norm1']['beta']), b['attention'], config.num_heads, c)
        x = x + a; x = x + feed_forward(layer_norm(x, b['norm2']['gamma'], b['norm2']['beta']), b['ffn'])
        new.append(c2)
    return linear(layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta']), params['token_embedding']), new

@A('lm_step', 'R', 'own LN (half widened) + own einsum cached attention')
def _(params, ids, config, caches=None):
    csa_e = [fn for ex, e, l, fn in ANS if ex == 'cached_self_attention' and l.startswith('einsum, hand softmax')][0]
    start = 0 if caches is None else caches[0]['key'].size(2)
    E = params['token_embedding']
    x = E[ids] * math.sqrt(E.size(1)) + params['position_embedding'][start:start + ids.size(1)]
    new = []
    for i, b in enumerate(params['blocks']):
        a, c = csa_e(ln32(x, b['norm1']['gamma'], b['norm1']['beta']), b['attention'], config.num_heads, None if caches is None else caches[i])
        x = x + a; x = x + ffn32(ln32(x, b['norm2']['gamma'], b['norm2']['beta']), b['ffn'])
        new.append(c)
    return torch.einsum('bld,vd->blv', ln32(x, params['final_norm']['gamma'], params['final_norm']['beta']), E), new

@A('lm_step', 'R', 'token-by-token loop over lms_ref_like')
def _(params, ids, config, caches=None):
    outs = []
    for t in range(ids.size(1)):
        o, caches = lms_ref_like(params, ids[:, t:t + 1], config, caches)
        outs.append(o)
    return torch.cat(outs, 1), caches

@A('lm_step', 'W', 'positions restart at 0')
def _(params, ids, config, caches=None):
    return lms_ref_like(params, ids, config, caches, start_fn=lambda c: 0)

@A('lm_step', 'W', 'L_past read from axis 1 (heads)')
def _(params, ids, config, caches=None):
    return lms_ref_like(params, ids, config, caches, start_fn=lambda c: 0 if c is None else c[0]['key'].size(1))

@A('lm_step', 'W', 'first block cache used for every block')
def _(params, ids, config, caches=None):
    return lms_ref_like(params, ids, config, None if caches is None else [caches[0]] * len(caches))

@A('lm_step', 'W', 'embedding not scaled')
def _(params, ids, config, caches=None):
    P = dict(params)
    P['token_embedding_'] = None
    start = 0 if caches is None else caches[0]['key'].size(2)
    x = params['token_embedding'][ids] + params['position_embedding'][start:start + ids.size(1)]
    new = []
    for i, b in enumerate(params['blocks']):
        a, c = csa_ref_like(layer_norm(x, b['norm1']['gamma'], b['norm1']['beta']), b['attention'], config.num_heads, None if caches is None else caches[i])
        x = x + a; x = x + feed_forward(layer_norm(x, b['norm2']['gamma'], b['norm2']['beta']), b['ffn']); new.append(c)
    return linear(layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta']), params['token_embedding']), new

@A('lm_step', 'W', 'caches list updated in place and returned')
def _(params, ids, config, caches=None):
    out, new = lms_ref_like(params, ids, config, caches)
    if caches is None: return out, new
    caches[:] = new
    return out, caches

@A('lm_step', 'W', 'only the last position logits')
def _(params, ids, config, caches=None):
    out, new = lms_ref_like(params, ids, config, caches)
    return out[:, -1:], new

@A('lm_step', 'W', 'position from the last block cache length + 1')
def _(params, ids, config, caches=None):
    return lms_ref_like(params, ids, config, caches, start_fn=lambda c: 0 if c is None else c[-1]['key'].size(2) + 1)

@A('lm_step', 'W', 'cache of no mask attention (no causal among new tokens)')
def _(params, ids, config, caches=None):
    nm = [fn for ex, e, l, fn in ANS if ex == 'cached_self_attention' and l == 'no mask at all'][0]
    return lms_ref_like(params, ids, config, caches, csa=nm)

@A('lm_step', 'W', 'calls tfmlib.lm_step')
def _(params, ids, config, caches=None): return tfmlib.lm_step(params, ids, config, caches)

generics('lm_step', lms_ref_like, ['f32', 'idcache', 'shapecache', 'counter'])

# ================================================================ fifth batch: more styles and subtler mistakes
@A('encoder_layer', 'R', 'LN variance as E[x^2] - E[x]^2 in float64')
def _(x, params, num_heads, mask=None):
    def ln(t, n):
        td = t.double(); mu = td.mean(-1, keepdim=True)
        var = (td * td).mean(-1, keepdim=True) - mu * mu
        return ((td - mu) / torch.sqrt(var + 1e-5) * n['gamma'].double() + n['beta'].double()).to(t.dtype)
    x = ln(x + attn(x, x, params['self_attn'], num_heads, mask), params['norm1'])
    return ln(x + feed_forward(x, params['ffn']), params['norm2'])

@A('encoder_layer', 'W', 'finfo.min fill, fully masked rows not zeroed')
def _(x, params, num_heads, mask=None):
    p = params['self_attn']; dk = x.size(-1) // num_heads
    q = split_heads(linear(x, p['w_q'], p['b_q']), num_heads); k = split_heads(linear(x, p['w_k'], p['b_k']), num_heads)
    v = split_heads(linear(x, p['w_v'], p['b_v']), num_heads)
    s = q @ k.transpose(-2, -1) / math.sqrt(dk)
    if mask is not None: s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    a = linear(merge_heads(torch.softmax(s, -1) @ v), p['w_o'], p['b_o'])
    x = layer_norm(x + a, params['norm1']['gamma'], params['norm1']['beta'])
    return layer_norm(x + feed_forward(x, params['ffn']), params['norm2']['gamma'], params['norm2']['beta'])

@A('encoder_layer', 'W', 'scores scaled by sqrt(D), not sqrt(d_k)')
def _(x, params, num_heads, mask=None):
    p = params['self_attn']
    q = split_heads(linear(x, p['w_q'], p['b_q']), num_heads); k = split_heads(linear(x, p['w_k'], p['b_k']), num_heads)
    v = split_heads(linear(x, p['w_v'], p['b_v']), num_heads)
    q = q * math.sqrt(q.size(-1)) / math.sqrt(x.size(-1))
    ctx, _ = scaled_dot_product_attention(q, k, v, mask)
    x = layer_norm(x + linear(merge_heads(ctx), p['w_o'], p['b_o']), params['norm1']['gamma'], params['norm1']['beta'])
    return layer_norm(x + feed_forward(x, params['ffn']), params['norm2']['gamma'], params['norm2']['beta'])

@A('decoder_layer', 'R', 'memory given as a transposed-back contiguous copy, Lt/Ls from shapes, einsum')
def _(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    mem = memory.transpose(1, 2).contiguous().transpose(1, 2)
    n = params
    x = ln32(x + mha_einsum(x, x, n['self_attn'], num_heads, self_mask), n['norm1']['gamma'], n['norm1']['beta'])
    x = ln32(x + mha_einsum(x, mem, n['cross_attn'], num_heads, memory_mask), n['norm2']['gamma'], n['norm2']['beta'])
    return layer_norm(x + feed_forward(x, n['ffn']), n['norm3']['gamma'], n['norm3']['beta'])

@A('decoder_layer', 'W', 'memory_mask broadcast check: memory_mask.any(-2, keepdim=True) (a key visible to any query)')
def _(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    mm = None if memory_mask is None else memory_mask.any(-2, keepdim=True)
    return dec_ref_like(x, memory, params, num_heads, self_mask, mm)

def adam_epshat(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas; state['t'] += 1; t = state['t']
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None: continue
            m.mul_(b1).add_(p.grad, alpha=1 - b1); v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.sub_(lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t) * m / (v.sqrt() + eps))
A('adam', 'W', "paper's efficient form (eps not bias-corrected)")(mk_adam(adam_epshat))

def adam_f64(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas; state['t'] += 1; t = state['t']
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None: continue
            g = p.grad.double()
            md = m.double() * b1 + (1 - b1) * g; vd = v.double() * b2 + (1 - b2) * g * g
            m.copy_(md); v.copy_(vd)
            p.copy_(p.double() - lr * (md / (1 - b1 ** t)) / ((vd / (1 - b2 ** t)).sqrt() + eps))
A('adam', 'R', 'float64 arithmetic inside, stored back')(mk_adam(adam_f64))

def adam_grad_mut(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas; state['t'] += 1; t = state['t']
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None: continue
            g = p.grad
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            m.mul_(b1).add_(g.mul_(1 - b1))
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))
A('adam', 'W', 'p.grad scaled in place (g.mul_)')(mk_adam(adam_grad_mut))

@A('sgd_step', 'W', 'grad scaled in place then subtracted')
def _(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None: p.sub_(p.grad.mul_(lr))

@A('clip_grad_norm', 'R', 'float32 norm returned for half grads (not cast back)')
def _(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = torch.sqrt(sum((up(g) ** 2).sum() for g in gs))
    s = min(1.0, max_norm / (float(total) + 1e-6))
    for g in gs: g.mul_(s)
    return total

@A('clip_grad_norm', 'W', 'clips only when norm > max_norm, by max_norm / norm')
def _(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in gs])).to(gs[0].dtype)
    if total > max_norm:
        for g in gs: g.mul_(max_norm / total)
    return total

@A('clip_grad_norm', 'W', 'squared per-grad norms summed in float16')
def _(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    sq = torch.stack([torch.linalg.vector_norm(g) ** 2 for g in gs]).sum()
    total = sq.sqrt()
    for g in gs: g.mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total

@A('warmup_inverse_sqrt_lr', 'W', 'step * warmup ** 1.5')
def _(step, d_model, warmup_steps, factor=1.0):
    if step == 0: return 0.0
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** 1.5)

@A('warmup_cosine_lr', 'W', 'integer division in warm-up')
def _(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return peak_lr * (step // warmup_steps)
    prog = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * prog)))

@A('shift_right', 'R', 'torch.roll then cut')
def _(tgt):
    return tgt[:, :-1], torch.roll(tgt, -1, dims=1)[:, :-1]

@A('label_smoothed_cross_entropy', 'R', 'class-by-class loop in the input dtype')
def _(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1); lp = logits.log_softmax(-1)
    keep = labels != ignore_index; safe = torch.where(keep, labels, torch.zeros_like(labels))
    smooth = torch.zeros_like(lp[..., 0])
    for c in range(V): smooth = smooth - lp[..., c] * (smoothing / V)
    per = (1 - smoothing) * -lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) + smooth
    return per[keep].sum() / keep.sum()

@A('label_smoothed_cross_entropy', 'W', 'keep = labels != -100 hard-coded')
def _(logits, labels, smoothing, ignore_index=-100):
    return ls_ref_like(logits, labels, smoothing, -100) if (labels != -100).all() or ignore_index == -100 else ls_ref_like(logits, labels.masked_fill(labels == ignore_index, 0), smoothing, -100)

@A('label_smoothed_cross_entropy', 'W', 'count clamped to 1 (0 instead of nan when all ignored)')
def _(logits, labels, smoothing, ignore_index=-100):
    lp = logits.log_softmax(-1); keep = labels != ignore_index
    safe = torch.where(keep, labels, torch.zeros_like(labels))
    per = (1 - smoothing) * -lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) - smoothing * lp.mean(-1)
    return (per * keep).sum() / keep.sum().clamp(min=1)

@A('lm_forward', 'W', 'positions added before the sqrt(D) scaling')
def _(params, ids, config):
    E = params['token_embedding']; L = ids.size(1)
    x = (E[ids] + params['position_embedding'][:L]) * math.sqrt(E.size(1))
    for b in params['blocks']: x = tfmlib.decoder_block(x, b, config.num_heads)
    return linear(layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta']), E)

@A('lm_loss', 'R', 'own one-hot lm_forward + manual logsumexp')
def _(params, ids, config):
    f = [fn for ex, e, l, fn in ANS if ex == 'lm_forward' and l.startswith('one-hot')][0]
    logits = f(params, ids[:, :-1], config)
    lse = torch.logsumexp(logits, -1)
    tgt = logits.gather(-1, ids[:, 1:, None]).squeeze(-1)
    return (lse - tgt).mean()

@A('next_token_probs', 'R', 'exp(x - logsumexp(x))')
def _(logits, temperature=1.0):
    z = logits / temperature
    return (z - z.logsumexp(-1, keepdim=True)).exp()

@A('next_token_probs', 'W', 'temperature clamped to >= 0.05')
def _(logits, temperature=1.0): return torch.softmax(logits / max(temperature, 0.05), -1)

@A('top_p_filter', 'W', 'mass_before <= p (exact-p row keeps one more)')
def _(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = torch.softmax(s, -1); kept = (pr.cumsum(-1) - pr) <= p
    smallest = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < smallest, float('-inf'))

@A('cached_self_attention', 'W', 'scale by sqrt(D)')
def _(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params['w_q'], params.get('b_q')), num_heads)
    k = split_heads(linear(x, params['w_k'], params.get('b_k')), num_heads)
    v = split_heads(linear(x, params['w_v'], params.get('b_v')), num_heads)
    if cache is not None:
        k = torch.cat([cache['key'], k], 2); v = torch.cat([cache['value'], v], 2)
    Lt, Ln = k.size(2), x.size(1)
    q = q * math.sqrt(q.size(-1) / x.size(-1))
    ctx, _ = scaled_dot_product_attention(q, k, v, causal_mask(Lt)[:, :, Lt - Ln:])
    return linear(merge_heads(ctx), params['w_o'], params.get('b_o')), {'key': k, 'value': v}

@A('lm_step', 'W', 'L_past = len(caches) (number of blocks)')
def _(params, ids, config, caches=None):
    return lms_ref_like(params, ids, config, caches, start_fn=lambda c: 0 if c is None else len(c))

# ================================================================ sixth batch: probes of unannounced rules
@A('top_k_filter', 'R', 'k >= V returns the logits tensor itself (nothing to filter)')
def _(logits, k):
    if k >= logits.size(-1): return logits
    thr = logits.topk(k, -1).values[..., -1:]
    return logits.masked_fill(logits < thr, float('-inf'))

@A('cached_self_attention', 'R', 'cache stored detached (generation needs no gradient through it)')
def _(x, params, num_heads, cache=None):
    out, c = csa_ref_like(x, params, num_heads, cache)
    return out, {'key': c['key'].detach(), 'value': c['value'].detach()}

@A('lm_step', 'R', 'whole step under torch.no_grad (generation never trains)')
def _(params, ids, config, caches=None):
    with torch.no_grad(): return lms_ref_like(params, ids, config, caches)

@A('next_token_probs', 'R', 'temperature 1 shortcut')
def _(logits, temperature=1.0):
    return torch.softmax(logits if temperature == 1 else logits / temperature, dim=-1)

@A('label_smoothed_cross_entropy', 'R', 'smoothing 0 shortcut to gathered NLL')
def _(logits, labels, smoothing, ignore_index=-100):
    if smoothing == 0:
        lp = logits.log_softmax(-1); keep = labels != ignore_index
        safe = torch.where(keep, labels, torch.zeros_like(labels))
        return -(lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) * keep).sum() / keep.sum()
    return ls_ref_like(logits, labels, smoothing, ignore_index)

@A('warmup_cosine_lr', 'W', 'cosine progress counted from warmup + 1')
def _(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return peak_lr * step / warmup_steps
    prog = min(1.0, (step - warmup_steps - 1) / max(1, total_steps - warmup_steps))
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * prog)))

@A('lm_step', 'W', 'caches None for later blocks (only block 0 gets its cache)')
def _(params, ids, config, caches=None):
    start = 0 if caches is None else caches[0]['key'].size(2)
    x = embed(ids, params['token_embedding']) + params['position_embedding'][start:start + ids.size(1)]
    new = []
    for i, b in enumerate(params['blocks']):
        c_in = caches[0] if (caches is not None and i == 0) else None
        a, c = csa_ref_like(layer_norm(x, b['norm1']['gamma'], b['norm1']['beta']), b['attention'], config.num_heads, c_in)
        x = x + a; x = x + feed_forward(layer_norm(x, b['norm2']['gamma'], b['norm2']['beta']), b['ffn']); new.append(c)
    return linear(layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta']), params['token_embedding']), new

@A('top_k_filter', 'W', 'rows with an -inf logit: topk of finite values only (k counts finite)')
def _(logits, k):
    fin = torch.where(torch.isfinite(logits), logits, torch.full_like(logits, torch.finfo(logits.dtype).max))
    thr = logits.topk(min(k, logits.size(-1)), -1).values[..., -1:]
    thr = torch.where(torch.isinf(thr), fin.amin(-1, keepdim=True), thr)
    return logits.masked_fill(logits < thr, float('-inf'))

# ================================================================ seventh batch: values hard-coded from the notebooks' examples
@A('warmup_inverse_sqrt_lr', 'W', 'd_model hard-coded 512')
def _(step, d_model, warmup_steps, factor=1.0):
    if step == 0: return 0.0
    return factor * 512 ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)

@A('warmup_cosine_lr', 'W', 'final_fraction argument ignored (0.1 hard-coded)')
def _(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return peak_lr * step / warmup_steps
    prog = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * prog)))

@A('lm_forward', 'W', 'num_heads hard-coded 4 (LMConfig default)')
def _(params, ids, config):
    E = params['token_embedding']; L = ids.size(1)
    x = embed(ids, E) + params['position_embedding'][:L]
    for b in params['blocks']: x = tfmlib.decoder_block(x, b, 4 if E.size(1) % 4 == 0 else config.num_heads)
    return linear(layer_norm(x, params['final_norm']['gamma'], params['final_norm']['beta']), E)

@A('lm_step', 'W', 'num_heads hard-coded 4')
def _(params, ids, config, caches=None):
    class C: pass
    c = C(); c.num_heads = 4 if params['token_embedding'].size(1) % 4 == 0 else config.num_heads
    return lms_ref_like(params, ids, c, caches)

@A('encoder', 'W', 'num_heads hard-coded 2 when it divides D')
def _(x, layers, num_heads, mask=None):
    H = 2 if x.size(-1) % 2 == 0 else num_heads
    for p in layers: x = enc_ref_like(x, p, H, mask)
    return x

@A('label_smoothed_cross_entropy', 'W', 'smoothing hard-coded 0.1')
def _(logits, labels, smoothing, ignore_index=-100):
    return ls_ref_like(logits, labels, 0.1, ignore_index)

@A('shift_right', 'W', 'labels pad-filled with 0 hard-coded where tgt == 2 follows (eos) -> zeroes the eos label')
def _(tgt):
    lab = tgt[:, 1:].clone(); lab[lab == EOS_ID] = PAD_ID
    return tgt[:, :-1], lab

@A('warmup_cosine_lr', 'R', 'clamped progress via sorted(), decay = peak - (peak - low) * (1 - cos) / 2')
def _(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return peak_lr * step / warmup_steps
    span = max(1, total_steps - warmup_steps)
    prog = sorted([0.0, (step - warmup_steps) / span, 1.0])[1]
    low = final_fraction * peak_lr
    return peak_lr - (peak_lr - low) * (1 - math.cos(math.pi * prog)) / 2
