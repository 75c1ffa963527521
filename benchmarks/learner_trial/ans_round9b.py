"""Learner trial round 9b: notebooks 08, 09, 10, b1, b2. New answers, right (R) and wrong (W)."""
import math, functools
import torch
import torch.nn.functional as F
from harness import *
from tfmlib import (layer_norm, multi_head_attention, feed_forward, linear, split_heads, merge_heads,
                    scaled_dot_product_attention, causal_mask, embed, adam_step, adam_init,
                    padding_mask)
from tfmlib.training import encode_source, decode_target

# ---- helpers a learner would have written in earlier notebooks -------------------------------
def my_ln(x, g, b, eps=1e-5):           # hand-written LayerNorm, float32 inside for half inputs
    x32 = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    mu = x32.sum(-1, keepdim=True) / x.size(-1)
    var = ((x32 - mu) ** 2).sum(-1, keepdim=True) / x.size(-1)
    return ((x32 - mu) * torch.rsqrt(var + eps) * g.to(x32.dtype) + b.to(x32.dtype)).to(x.dtype)

def my_softmax_masked(scores, mask):     # hand-written softmax; fully masked rows -> zeros
    if mask is not None:
        scores = scores.masked_fill(~mask, float('-inf'))
    m = scores.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(scores - m)
    s = e.sum(-1, keepdim=True)
    return torch.where(s > 0, e / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(e))

def my_lin(x, w, b):
    y = torch.einsum('...i,oi->...o', x, w)
    return y if b is None else y + b

def my_mha(q_in, kv_in, p, H, mask):     # einsum multi-head attention
    B, Lq, D = q_in.shape; Lk = kv_in.size(1); dk = D // H
    q = my_lin(q_in, p['w_q'], p.get('b_q')).view(B, Lq, H, dk)
    k = my_lin(kv_in, p['w_k'], p.get('b_k')).view(B, Lk, H, dk)
    v = my_lin(kv_in, p['w_v'], p.get('b_v')).view(B, Lk, H, dk)
    s = torch.einsum('bqhd,bkhd->bhqk', q, k) / math.sqrt(dk)
    w = my_softmax_masked(s, mask)
    ctx = torch.einsum('bhqk,bkhd->bqhd', w, v).reshape(B, Lq, D)
    return my_lin(ctx, p['w_o'], p.get('b_o'))

def my_ffn(x, p):
    return my_lin(torch.relu(my_lin(x, p['w_1'], p['b_1'])), p['w_2'], p['b_2'])

def mha(x, kv, p, H, mask):
    return multi_head_attention(x, kv, kv, p, H, mask)[0]

def ln(x, n, eps=1e-5):
    return layer_norm(x, n['gamma'], n['beta'], eps)

# ================================ 08 encoder_layer =============================================
@A('encoder_layer', 'R', 'einsum mha + own LN (f32 inside) + own ffn')
def el_r1(x, params, num_heads, mask=None):
    h = my_ln(x + my_mha(x, x, params['self_attn'], num_heads, mask), params['norm1']['gamma'], params['norm1']['beta'])
    return my_ln(h + my_ffn(h, params['ffn']), params['norm2']['gamma'], params['norm2']['beta'])

@A('encoder_layer', 'R', 'library pieces, float64 inside, cast back')
def el_r2(x, params, num_heads, mask=None):
    p64 = tensors_map(params, lambda t: t.double())
    x64 = x.double()
    h = ln(x64 + mha(x64, x64, p64['self_attn'], num_heads, mask), p64['norm1'])
    return ln(h + feed_forward(h, p64['ffn']), p64['norm2']).to(x.dtype)

@A('encoder_layer', 'R', 'F.layer_norm for the norms')
def el_r3(x, params, num_heads, mask=None):
    D = x.size(-1)
    n1, n2 = params['norm1'], params['norm2']
    h = F.layer_norm(x + mha(x, x, params['self_attn'], num_heads, mask), (D,), n1['gamma'], n1['beta'], 1e-5)
    return F.layer_norm(h + feed_forward(h, params['ffn']), (D,), n2['gamma'], n2['beta'], 1e-5)

@A('encoder_layer', 'R', 'sublayers as a list of closures in a loop')
def el_r4(x, params, num_heads, mask=None):
    subs = [(lambda h: mha(h, h, params['self_attn'], num_heads, mask), params['norm1']),
            (lambda h: feed_forward(h, params['ffn']), params['norm2'])]
    for f, n in subs:
        x = ln(x + f(x), n)
    return x

@A('encoder_layer', 'W', 'Pre-LN instead of Post-LN')
def el_w1(x, params, num_heads, mask=None):
    x = x + mha(ln(x, params['norm1']), ln(x, params['norm1']), params['self_attn'], num_heads, mask)
    return x + feed_forward(ln(x, params['norm2']), params['ffn'])

@A('encoder_layer', 'W', 'norm1 used for both sublayers')
def el_w2(x, params, num_heads, mask=None):
    h = ln(x + mha(x, x, params['self_attn'], num_heads, mask), params['norm1'])
    return ln(h + feed_forward(h, params['ffn']), params['norm1'])

@A('encoder_layer', 'W', 'mask inverted (nn.Transformer convention)')
def el_w3(x, params, num_heads, mask=None):
    m = None if mask is None else ~mask
    h = ln(x + mha(x, x, params['self_attn'], num_heads, m), params['norm1'])
    return ln(h + feed_forward(h, params['ffn']), params['norm2'])

@A('encoder_layer', 'W', 'own LN with eps added to the std')
def el_w4(x, params, num_heads, mask=None):
    def n(t, p):
        mu = t.mean(-1, keepdim=True); sd = t.std(-1, keepdim=True, unbiased=False)
        return (t - mu) / (sd + 1e-5) * p['gamma'] + p['beta']
    h = n(x + mha(x, x, params['self_attn'], num_heads, mask), params['norm1'])
    return n(h + feed_forward(h, params['ffn']), params['norm2'])

@A('encoder_layer', 'W', 'in-place residual x += attn (changes the input)')
def el_w5(x, params, num_heads, mask=None):
    a = mha(x, x, params['self_attn'], num_heads, mask)
    with torch.no_grad():
        x += a
    h = ln(x, params['norm1'])
    return ln(h + feed_forward(h, params['ffn']), params['norm2'])

@A('encoder_layer', 'W', 'FFN residual adds x (layer input), not h')
def el_w6(x, params, num_heads, mask=None):
    h = ln(x + mha(x, x, params['self_attn'], num_heads, mask), params['norm1'])
    return ln(x + feed_forward(h, params['ffn']), params['norm2'])

@A('encoder_layer', 'W', 'gelu in the FFN')
def el_w7(x, params, num_heads, mask=None):
    h = ln(x + mha(x, x, params['self_attn'], num_heads, mask), params['norm1'])
    return ln(h + feed_forward(h, params['ffn'], 'gelu'), params['norm2'])

@A('encoder_layer', 'W', 'own LN in half precision with eps=1e-5 underflow: var in half, eps 1e-8')
def el_w8(x, params, num_heads, mask=None):
    def n(t, p):
        mu = t.mean(-1, keepdim=True); var = ((t - mu) ** 2).mean(-1, keepdim=True)
        return (t - mu) / torch.sqrt(var + 1e-8) * p['gamma'] + p['beta']
    h = n(x + mha(x, x, params['self_attn'], num_heads, mask), params['norm1'])
    return n(h + feed_forward(h, params['ffn']), params['norm2'])

@A('encoder_layer', 'W', 'masked softmax fills 0 instead of -inf (own mha)')
def el_w9(x, params, num_heads, mask=None):
    def att(t, p):
        B, L, D = t.shape; H = num_heads; dk = D // H
        q, k, v = (split_heads(linear(t, p['w_' + c], p.get('b_' + c)), H) for c in 'qkv')
        s = q @ k.transpose(-2, -1) / math.sqrt(dk)
        if mask is not None: s = s.masked_fill(~mask, 0.0)
        return linear(merge_heads(torch.softmax(s, -1) @ v), p['w_o'], p.get('b_o'))
    h = ln(x + att(x, params['self_attn']), params['norm1'])
    return ln(h + feed_forward(h, params['ffn']), params['norm2'])

generics('encoder_layer', el_r3, ['f32', 'shapecache'])

# ================================ 08 encoder ====================================================
@A('encoder', 'R', 'functools.reduce over my encoder layer')
def enc_r1(x, layers, num_heads, mask=None):
    return functools.reduce(lambda h, p: el_r1(h, p, num_heads, mask), layers, x)

@A('encoder', 'R', 'recursion')
def enc_r2(x, layers, num_heads, mask=None):
    if not layers: return x
    return enc_r2(el_r4(x, layers[0], num_heads, mask), layers[1:], num_heads, mask)

@A('encoder', 'R', 'index loop with library encoder_layer')
def enc_r3(x, layers, num_heads, mask=None):
    from tfmlib import encoder_layer
    h = x
    for i in range(len(layers)):
        h = encoder_layer(h, layers[i], num_heads, mask)
    return h

@A('encoder', 'W', 'every layer reads x')
def enc_w1(x, layers, num_heads, mask=None):
    h = x
    for p in layers: h = el_r4(x, p, num_heads, mask)
    return h

@A('encoder', 'W', 'layers applied in reverse order')
def enc_w2(x, layers, num_heads, mask=None):
    for p in reversed(layers): x = el_r4(x, p, num_heads, mask)
    return x

@A('encoder', 'W', 'pops the layers off the caller\'s list')
def enc_w3(x, layers, num_heads, mask=None):
    while layers:
        x = el_r4(x, layers.pop(0), num_heads, mask)
    return x

@A('encoder', 'W', 'mask only for the first layer')
def enc_w4(x, layers, num_heads, mask=None):
    for i, p in enumerate(layers): x = el_r4(x, p, num_heads, mask if i == 0 else None)
    return x

@A('encoder', 'W', 'extra final LayerNorm with the last layer\'s norm2')
def enc_w5(x, layers, num_heads, mask=None):
    for p in layers: x = el_r4(x, p, num_heads, mask)
    return ln(x, layers[-1]['norm2'])

@A('encoder', 'W', 'first layer\'s params reused for every layer')
def enc_w6(x, layers, num_heads, mask=None):
    for _ in layers: x = el_r4(x, layers[0], num_heads, mask)
    return x

@A('encoder', 'W', 'residual around the whole stack')
def enc_w7(x, layers, num_heads, mask=None):
    h = x
    for p in layers: h = el_r4(h, p, num_heads, mask)
    return h + x

generics('encoder', enc_r3, ['f64', 'idcache'])

# ================================ 08 decoder_layer ==============================================
@A('decoder_layer', 'R', 'einsum mha + own LN')
def dl_r1(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    g = lambda n: (params[n]['gamma'], params[n]['beta'])
    h = my_ln(x + my_mha(x, x, params['self_attn'], num_heads, self_mask), *g('norm1'))
    h = my_ln(h + my_mha(h, memory, params['cross_attn'], num_heads, memory_mask), *g('norm2'))
    return my_ln(h + my_ffn(h, params['ffn']), *g('norm3'))

@A('decoder_layer', 'R', 'float64 inside, cast back')
def dl_r2(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    p = tensors_map(params, lambda t: t.double()); h = x.double(); m = memory.double()
    h = ln(h + mha(h, h, p['self_attn'], num_heads, self_mask), p['norm1'])
    h = ln(h + mha(h, m, p['cross_attn'], num_heads, memory_mask), p['norm2'])
    return ln(h + feed_forward(h, p['ffn']), p['norm3']).to(x.dtype)

@A('decoder_layer', 'R', 'stacks my encoder-layer style loop with three sublayers')
def dl_r3(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    subs = [lambda h: mha(h, h, params['self_attn'], num_heads, self_mask),
            lambda h: mha(h, memory, params['cross_attn'], num_heads, memory_mask),
            lambda h: feed_forward(h, params['ffn'])]
    for f, n in zip(subs, ('norm1', 'norm2', 'norm3')):
        x = F.layer_norm(x + f(x), (x.size(-1),), params[n]['gamma'], params[n]['beta'])
    return x

@A('decoder_layer', 'W', 'masks swapped')
def dl_w1(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    return dl_r3(x, memory, params, num_heads, memory_mask if memory_mask is None or memory_mask.size(-1) == x.size(1) else None, self_mask if self_mask is None or self_mask.size(-1) == memory.size(1) else None)

@A('decoder_layer', 'W', 'cross-attention values from x (keys from memory)')
def dl_w2(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    h = ln(x + mha(x, x, params['self_attn'], num_heads, self_mask), params['norm1'])
    if memory.size(1) == h.size(1):
        c = multi_head_attention(h, memory, h, params['cross_attn'], num_heads, memory_mask)[0]
    else:
        c = mha(h, memory, params['cross_attn'], num_heads, memory_mask)
    h = ln(h + c, params['norm2'])
    return ln(h + feed_forward(h, params['ffn']), params['norm3'])

@A('decoder_layer', 'W', 'cross-attention reads x (layer input), not h')
def dl_w3(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    h = ln(x + mha(x, x, params['self_attn'], num_heads, self_mask), params['norm1'])
    h = ln(h + mha(x, memory, params['cross_attn'], num_heads, memory_mask), params['norm2'])
    return ln(h + feed_forward(h, params['ffn']), params['norm3'])

@A('decoder_layer', 'W', 'norm2 and norm3 swapped')
def dl_w4(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    h = ln(x + mha(x, x, params['self_attn'], num_heads, self_mask), params['norm1'])
    h = ln(h + mha(h, memory, params['cross_attn'], num_heads, memory_mask), params['norm3'])
    return ln(h + feed_forward(h, params['ffn']), params['norm2'])

@A('decoder_layer', 'W', 'self_attn weights used for the cross-attention')
def dl_w5(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    h = ln(x + mha(x, x, params['self_attn'], num_heads, self_mask), params['norm1'])
    h = ln(h + mha(h, memory, params['self_attn'], num_heads, memory_mask), params['norm2'])
    return ln(h + feed_forward(h, params['ffn']), params['norm3'])

@A('decoder_layer', 'W', 'memory_mask ignored')
def dl_w6(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    return dl_r3(x, memory, params, num_heads, self_mask, None)

@A('decoder_layer', 'W', 'own softmax without the fully-masked-row fix (NaN rows)')
def dl_w7(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    def att(q_in, kv, p, m):
        q = split_heads(linear(q_in, p['w_q'], p.get('b_q')), num_heads)
        k = split_heads(linear(kv, p['w_k'], p.get('b_k')), num_heads)
        v = split_heads(linear(kv, p['w_v'], p.get('b_v')), num_heads)
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if m is not None: s = s.masked_fill(~m, float('-inf'))
        return linear(merge_heads(torch.softmax(s, -1) @ v), p['w_o'], p.get('b_o'))
    h = ln(x + att(x, x, params['self_attn'], self_mask), params['norm1'])
    h = ln(h + att(h, memory, params['cross_attn'], memory_mask), params['norm2'])
    return ln(h + feed_forward(h, params['ffn']), params['norm3'])

@A('decoder_layer', 'W', 'fully masked rows filled with -1e9 (finite) -> uniform weights')
def dl_w8(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    def att(q_in, kv, p, m):
        q = split_heads(linear(q_in, p['w_q'], p.get('b_q')), num_heads)
        k = split_heads(linear(kv, p['w_k'], p.get('b_k')), num_heads)
        v = split_heads(linear(kv, p['w_v'], p.get('b_v')), num_heads)
        s = q.float() @ k.float().transpose(-2, -1) / math.sqrt(q.size(-1))
        if m is not None: s = s.masked_fill(~m, -1e9)
        return linear(merge_heads((torch.softmax(s, -1) @ v.float()).to(q.dtype)), p['w_o'], p.get('b_o'))
    h = ln(x + att(x, x, params['self_attn'], self_mask), params['norm1'])
    h = ln(h + att(h, memory, params['cross_attn'], memory_mask), params['norm2'])
    return ln(h + feed_forward(h, params['ffn']), params['norm3'])

generics('decoder_layer', dl_r3, ['buffer', 'mutate'])

# ================================ 09 adam =======================================================
def adam_init_r(parameters):
    ps = list(parameters)
    return {'t': 0, 'm': [torch.zeros_like(p) for p in ps], 'v': [torch.zeros_like(p) for p in ps]}

def adam_step_torchstyle(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    # PyTorch's own arrangement: step size carries bias correction 1, the denominator bias correction 2
    b1, b2 = betas
    state['t'] += 1; t = state['t']
    bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None: continue
            m.lerp_(p.grad, 1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad.conj(), value=1 - b2)
            denom = (v.sqrt() / math.sqrt(bc2)).add_(eps)
            p.addcdiv_(m, denom, value=-lr / bc1)

def adam_step_loop(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    # index loop, writes through .data, new m / v tensors copied into the state's own
    state['t'] = state['t'] + 1
    for i, p in enumerate(parameters):
        g = p.grad
        if g is None: continue
        m = state['m'][i]; v = state['v'][i]
        m.copy_(betas[0] * m + (1 - betas[0]) * g)
        v.copy_(betas[1] * v + (1 - betas[1]) * g * g)
        mh = m / (1 - betas[0] ** state['t']); vh = v / (1 - betas[1] ** state['t'])
        p.data -= lr * mh / (torch.sqrt(vh) + eps)

def adam_init_dictstyle(parameters):
    ps = list(parameters)
    m = [p.detach().clone().zero_() for p in ps]
    v = [p.new_zeros(p.shape) for p in ps]
    return dict(t=0, m=m, v=v)

A('adam', 'R', 'torch-style addcdiv with folded bias corrections')((adam_init_r, adam_step_torchstyle))
A('adam', 'R', 'index loop, .data, copy_ into state')((adam_init_dictstyle, adam_step_loop))

def adam_step_lib_per_param(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    # stacks the library's adam_step? not allowed (tfmlib's own) -- instead: one hand update via exp/log
    b1, b2 = betas
    state['t'] += 1; t = state['t']
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None: continue
            g = p.grad
            m.mul_(b1).add_((1 - b1) * g)
            v.mul_(b2).add_((1 - b2) * g.square())
            step = (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps)
            p.sub_(step * lr)
A('adam', 'R', 'square() and a separate step tensor')((adam_init_r, adam_step_lib_per_param))

def _adam_w(mod):
    def step(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
        b1, b2 = betas
        if mod != 'tperparam': state['t'] += 1
        with torch.no_grad():
            for p, m, v in zip(parameters, state['m'], state['v']):
                if p.grad is None:
                    continue
                if mod == 'tperparam': state['t'] += 1
                t = state['t']; g = p.grad
                m.mul_(b1).add_(g, alpha=1 - b1)
                if mod == 'absg': v.mul_(b2).add_(g.abs(), alpha=1 - b2)
                else: v.mul_(b2).addcmul_(g, g, value=1 - b2)
                if mod == 'nobc': mh, vh = m, v
                elif mod == 'bc_t_plus': mh, vh = m / (1 - b1 ** (t + 1)), v / (1 - b2 ** (t + 1))
                else: mh, vh = m / (1 - b1 ** t), v / (1 - b2 ** t)
                if mod == 'eps_in': upd = mh / torch.sqrt(vh + eps)
                else: upd = mh / (vh.sqrt() + eps)
                if mod == 'f32math':
                    p.sub_((lr * mh.float() / (vh.float().sqrt() + eps)).to(p.dtype))
                else:
                    p.sub_(lr * upd)
    return step
for mod, lab in [('tperparam', 't counted per parameter'), ('nobc', 'no bias correction'),
                 ('absg', 'v from |g| not g^2'), ('eps_in', 'eps inside the sqrt'),
                 ('bc_t_plus', 'bias correction with t+1'), ('f32math', 'update computed in float32, cast back')]:
    A('adam', 'W', lab)((adam_init_r, _adam_w(mod)))

def adam_init_f32(parameters):
    ps = list(parameters)
    return {'t': 0, 'm': [torch.zeros(p.shape) for p in ps], 'v': [torch.zeros(p.shape) for p in ps]}
def adam_step_any(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas; state['t'] += 1; t = state['t']
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            if p.grad is None: continue
            g = p.grad.to(m.dtype)
            m.mul_(b1).add_(g, alpha=1 - b1); v.mul_(b2).addcmul_(g, g, value=1 - b2)
            p.sub_((lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps)).to(p.dtype))
A('adam', 'W', 'moments always float32')((adam_init_f32, adam_step_any))

_shared = {}
def adam_init_shapeshare(parameters):
    ps = list(parameters)
    def z(p):   # one zeros tensor per shape, reused
        key = (tuple(p.shape), p.dtype)
        if key not in _shared: _shared[key] = torch.zeros_like(p)
        return _shared[key]
    return {'t': 0, 'm': [z(p) for p in ps], 'v': [torch.zeros_like(p) for p in ps]}
A('adam', 'W', 'm tensors shared between params of one shape (and across inits)')((adam_init_shapeshare, adam_step_any))

_moments = {}
def adam_step_globalmoments(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas; state['t'] += 1; t = state['t']
    with torch.no_grad():
        for i, p in enumerate(parameters):
            if p.grad is None: continue
            m, v = _moments.setdefault(id(p), (torch.zeros_like(p), torch.zeros_like(p)))
            g = p.grad
            m.mul_(b1).add_(g, alpha=1 - b1); v.mul_(b2).addcmul_(g, g, value=1 - b2)
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))
A('adam', 'W', 'moments in a module dict keyed by id(p)')((adam_init_r, adam_step_globalmoments))

def adam_step_nograd_crash(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas; state['t'] += 1; t = state['t']
    with torch.no_grad():
        for p, m, v in zip(parameters, state['m'], state['v']):
            g = p.grad if p.grad is not None else torch.zeros_like(p)   # a missing grad counts as 0
            m.mul_(b1).add_(g, alpha=1 - b1); v.mul_(b2).addcmul_(g, g, value=1 - b2)
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))
A('adam', 'W', 'grad None treated as zeros (m, v still decay, p moves)')((adam_init_r, adam_step_nograd_crash))

# ================================ 09 sgd_step ===================================================
@A('sgd_step', 'R', 'add_ with alpha=-lr')
def sgd_r1(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None: p.add_(p.grad, alpha=-lr)

@A('sgd_step', 'R', '.data and copy_')
def sgd_r2(parameters, lr):
    for p in filter(lambda q: q.grad is not None, parameters):
        p.data.copy_(p.data - lr * p.grad)

@A('sgd_step', 'R', 'torch._foreach_add_ on the ones with grads')
def sgd_r3(parameters, lr):
    ps = [p for p in parameters if p.grad is not None]
    if ps:
        with torch.no_grad():
            torch._foreach_add_(ps, [p.grad for p in ps], alpha=-lr)

@A('sgd_step', 'W', 'nan_to_num on the gradient')
def sgd_w1(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None: p.sub_(lr * torch.nan_to_num(p.grad))

@A('sgd_step', 'W', 'lr clipped to at most 1')
def sgd_w2(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None: p.sub_(min(lr, 1.0) * p.grad)

@A('sgd_step', 'W', 'scales the grad in place, then subtracts it')
def sgd_w3(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None: p.grad.mul_(lr); p.sub_(p.grad)

@A('sgd_step', 'W', 'rebinding p (not in place)')
def sgd_w4(parameters, lr):
    for p in parameters:
        if p.grad is not None: p = p - lr * p.grad

@A('sgd_step', 'W', 'update in float32, cast back')
def sgd_w5(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None: p.copy_((p.float() - lr * p.grad.float()).to(p.dtype))

@A('sgd_step', 'W', 'sign of the gradient')
def sgd_w6(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None: p.sub_(lr * p.grad.sign())

@A('sgd_step', 'W', 'stops at the first parameter without a grad')
def sgd_w7(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is None: break
            p.sub_(lr * p.grad)

@A('sgd_step', 'W', 'grad clamped to +-1e4 for safety')
def sgd_w8(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None: p.sub_(lr * p.grad.clamp(-1e4, 1e4))

# ================================ 09 adamw_step =================================================
@A('adamw_step', 'R', 'p.sub_(lr*wd*p) then library adam_step')
def aw_r1(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    ps = list(parameters)
    with torch.no_grad():
        for p in ps:
            if p.grad is not None: p.sub_(p * (lr * weight_decay))
    adam_step(ps, state, lr, betas, eps)

@A('adamw_step', 'R', 'decay then my own torch-style Adam')
def aw_r2(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    ps = list(parameters)
    for p in ps:
        if p.grad is not None: p.data.mul_(1 - lr * weight_decay)
    adam_step_torchstyle(ps, state, lr, betas, eps)

@A('adamw_step', 'R', 'decay with torch._foreach_mul_')
def aw_r3(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    ps = list(parameters)
    with torch.no_grad():
        hit = [p for p in ps if p.grad is not None]
        if hit: torch._foreach_mul_(hit, 1 - lr * weight_decay)
    adam_step(ps, state, lr, betas, eps=eps)

@A('adamw_step', 'W', 'decay after the Adam step')
def aw_w1(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    ps = list(parameters); adam_step(ps, state, lr, betas, eps)
    with torch.no_grad():
        for p in ps:
            if p.grad is not None: p.mul_(1 - lr * weight_decay)

@A('adamw_step', 'W', 'Adam + L2 (wd*p added to the grad)')
def aw_w2(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    ps = list(parameters)
    with torch.no_grad():
        for p in ps:
            if p.grad is not None: p.grad.add_(p, alpha=weight_decay)
    adam_step(ps, state, lr, betas, eps)

@A('adamw_step', 'W', 'decay not scaled by lr')
def aw_w3(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    ps = list(parameters)
    with torch.no_grad():
        for p in ps:
            if p.grad is not None: p.mul_(1 - weight_decay)
    adam_step(ps, state, lr, betas, eps)

@A('adamw_step', 'W', 'decays params without grad too')
def aw_w4(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    ps = list(parameters)
    with torch.no_grad():
        for p in ps: p.mul_(1 - lr * weight_decay)
    adam_step(ps, state, lr, betas, eps)

@A('adamw_step', 'W', 'weight_decay default 0.1')
def aw_w5(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1):
    aw_r1(parameters, state, lr, betas, eps, weight_decay)

@A('adamw_step', 'W', 'eps not passed on to adam_step')
def aw_w6(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    ps = list(parameters)
    with torch.no_grad():
        for p in ps:
            if p.grad is not None: p.mul_(1 - lr * weight_decay)
    adam_step(ps, state, lr, betas)

@A('adamw_step', 'W', 'decay with the decayed lr*wd squared by mistake: (1-lr*wd)**2')
def aw_w7(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    ps = list(parameters)
    with torch.no_grad():
        for p in ps:
            if p.grad is not None: p.mul_((1 - lr * weight_decay) ** 2)
    adam_step(ps, state, lr, betas, eps)

@A('adamw_step', 'R', 'iterates parameters twice (label corrected: the contract is a list, so this is right)')
def aw_w8(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None: p.mul_(1 - lr * weight_decay)
    adam_step(parameters, state, lr, betas, eps)

# ================================ 09 clip_grad_norm =============================================
def _grads(parameters):
    ps = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    return [p.grad for p in ps if p.grad is not None]

@A('clip_grad_norm', 'R', 'float64 sum of squares, norm returned in the grads dtype')
def cg_r1(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = torch.stack([g.double().pow(2).sum() for g in gs]).sum().sqrt()
    scale = min(1.0, max_norm / (total.item() + 1e-6))
    for g in gs: g.mul_(scale)
    return total.to(gs[0].dtype)

@A('clip_grad_norm', 'R', 'cat of flattened float32 grads, float32 norm returned (as the text says to sum)')
def cg_r2(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = torch.cat([g.reshape(-1).float() for g in gs]).norm()
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for g in gs: g.mul_(coef.to(g.dtype))
    return total

@A('clip_grad_norm', 'R', 'plain Python loop, math.sqrt, tensor built at the end')
def cg_r3(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    sq = 0.0
    for g in gs: sq += float((g.double() ** 2).sum())
    total = math.sqrt(sq)
    if max_norm / (total + 1e-6) < 1:
        for g in gs: g.mul_(max_norm / (total + 1e-6))
    return torch.tensor(total, dtype=gs[0].dtype)

@A('clip_grad_norm', 'W', 'no 1e-6 in the denominator')
def cg_w1(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in gs]))
    for g in gs: g.mul_(torch.clamp(max_norm / total, max=1.0).to(g.dtype))
    return total.to(gs[0].dtype)

@A('clip_grad_norm', 'W', 'returns the norm after clipping')
def cg_w2(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in gs]))
    for g in gs: g.mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0).to(g.dtype))
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in gs])).to(gs[0].dtype)

@A('clip_grad_norm', 'W', 'squares summed in the grads dtype (float16 overflow)')
def cg_w3(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = sum((g * g).sum() for g in gs).sqrt()
    for g in gs: g.mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total

@A('clip_grad_norm', 'W', 'each gradient clipped by its own norm')
def cg_w4(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    norms = [torch.linalg.vector_norm(g.double()) for g in gs]
    for g, n in zip(gs, norms): g.mul_(float(torch.clamp(max_norm / (n + 1e-6), max=1.0)))
    return torch.linalg.vector_norm(torch.stack(norms)).to(gs[0].dtype)

@A('clip_grad_norm', 'W', 'scales up too (no min with 1)')
def cg_w5(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.double()) for g in gs]))
    for g in gs: g.mul_(float(max_norm / (total + 1e-6)))
    return total.to(gs[0].dtype)

@A('clip_grad_norm', 'W', 'single tensor iterated as rows')
def cg_w6(parameters, max_norm):
    ps = list(parameters)
    gs = [p.grad for p in ps if p.grad is not None]
    if not gs: return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.double()) for g in gs]))
    for g in gs: g.mul_(float(torch.clamp(max_norm / (total + 1e-6), max=1.0)))
    return total.to(gs[0].dtype)

@A('clip_grad_norm', 'W', 'returns a Python float')
def cg_w7(parameters, max_norm):
    return float(cg_r1(parameters, max_norm))

@A('clip_grad_norm', 'W', 'no grads: returns None')
def cg_w8(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return None
    return cg_r1(parameters, max_norm)

@A('clip_grad_norm', 'W', 'infinity norm (largest entry)')
def cg_w9(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    total = torch.stack([g.abs().max().double() for g in gs]).max()
    for g in gs: g.mul_(float(torch.clamp(max_norm / (total + 1e-6), max=1.0)))
    return total.to(gs[0].dtype)

_normbuf = torch.zeros(())
@A('clip_grad_norm', 'W', 'returns a module-level 0-dim buffer, overwritten next call')
def cg_w10(parameters, max_norm):
    gs = _grads(parameters)
    if not gs: return torch.tensor(0.0)
    n = cg_r1(parameters, max_norm)
    _normbuf.copy_(n)
    return _normbuf if n.dtype == torch.float32 else n

# ================================ 09 schedules ==================================================
@A('warmup_inverse_sqrt_lr', 'R', 'math.pow, if/else on the warm-up')
def wis_r1(step, d_model, warmup_steps, factor=1.0):
    if step == 0: return 0.0
    if step < warmup_steps:
        return factor * math.pow(d_model, -0.5) * step * math.pow(warmup_steps, -1.5)
    return factor * math.pow(d_model, -0.5) / math.sqrt(step)

@A('warmup_inverse_sqrt_lr', 'R', 'torch on 0-dim float64, .item()')
def wis_r2(step, d_model, warmup_steps, factor=1.0):
    if not step: return 0.0
    s = torch.tensor(float(step), dtype=torch.float64)
    return (factor * torch.rsqrt(torch.tensor(float(d_model), dtype=torch.float64)) *
            torch.minimum(torch.rsqrt(s), s / warmup_steps ** 1.5)).item()

@A('warmup_inverse_sqrt_lr', 'R', 'division form: step / (warmup*sqrt(warmup))')
def wis_r3(step, d_model, warmup_steps, factor=1.0):
    return 0.0 if step == 0 else factor / math.sqrt(d_model) * min(1 / math.sqrt(step), step / (warmup_steps * math.sqrt(warmup_steps)))

@A('warmup_inverse_sqrt_lr', 'W', 'steps from 0: uses step+1')
def wis_w1(step, d_model, warmup_steps, factor=1.0):
    s = step + 1
    return factor * d_model ** -0.5 * min(s ** -0.5, s * warmup_steps ** -1.5)

@A('warmup_inverse_sqrt_lr', 'W', 'max instead of min')
def wis_w2(step, d_model, warmup_steps, factor=1.0):
    if step == 0: return 0.0
    return factor * d_model ** -0.5 * max(step ** -0.5, step * warmup_steps ** -1.5)

@A('warmup_inverse_sqrt_lr', 'W', 'warmup ** -0.5 instead of -1.5')
def wis_w3(step, d_model, warmup_steps, factor=1.0):
    if step == 0: return 0.0
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -0.5)

@A('warmup_inverse_sqrt_lr', 'W', 'factor ignored')
def wis_w4(step, d_model, warmup_steps, factor=1.0):
    if step == 0: return 0.0
    return d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)

@A('warmup_inverse_sqrt_lr', 'W', 'step 0 clamped to step 1')
def wis_w5(step, d_model, warmup_steps, factor=1.0):
    step = max(step, 1)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)

@A('warmup_inverse_sqrt_lr', 'R', 'float32 arithmetic (label corrected: 1e-7 relative on a schedule value is right)')
def wis_w6(step, d_model, warmup_steps, factor=1.0):
    if step == 0: return 0.0
    s = torch.tensor(float(step))
    return float(factor * torch.tensor(float(d_model)).rsqrt() * torch.minimum(s.rsqrt(), s * torch.tensor(float(warmup_steps)) ** -1.5))

@A('warmup_inverse_sqrt_lr', 'W', 'the branch switches one step late (step <= warmup uses the ramp... off by one: < warmup-1)')
def wis_w7(step, d_model, warmup_steps, factor=1.0):
    if step == 0: return 0.0
    if step <= warmup_steps + 1:
        return factor * d_model ** -0.5 * step * warmup_steps ** -1.5
    return factor * d_model ** -0.5 * step ** -0.5

@A('warmup_cosine_lr', 'R', 'cosine written as final + (peak - final) * ...')
def wc_r1(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return peak_lr * step / warmup_steps
    if step >= total_steps: return final_fraction * peak_lr
    prog = (step - warmup_steps) / (total_steps - warmup_steps)
    lo = final_fraction * peak_lr
    return lo + (peak_lr - lo) * (1 + math.cos(math.pi * prog)) / 2

@A('warmup_cosine_lr', 'W', 'cos^2 form, unguarded 1/(total-warmup) (label corrected: warmup == total is announced)')
def wc_r2(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return step / warmup_steps * peak_lr
    prog = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return peak_lr * (final_fraction + (1 - final_fraction) * math.cos(math.pi * prog / 2) ** 2)

@A('warmup_cosine_lr', 'W', 'torch lerp, 0/0 when warmup == total (label corrected: announced case)')
def wc_r3(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return peak_lr * (step / warmup_steps)
    prog = torch.tensor(min(step, total_steps) - warmup_steps, dtype=torch.float64) / (total_steps - warmup_steps)
    c = 0.5 * (1 + torch.cos(math.pi * prog))
    return float(torch.lerp(torch.tensor(final_fraction * peak_lr, dtype=torch.float64), torch.tensor(float(peak_lr), dtype=torch.float64), c))

@A('warmup_cosine_lr', 'R', 'warm-up uses <: the cosine branch gives peak_lr at warmup too (label corrected)')
def wc_w1(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step < warmup_steps: return peak_lr * step / warmup_steps
    prog = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * prog)))

@A('warmup_cosine_lr', 'W', 'no clamp after total_steps (cosine comes back up)')
def wc_w2(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return peak_lr * step / warmup_steps
    prog = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * prog)))

@A('warmup_cosine_lr', 'W', 'decays to 0 (final_fraction ignored)')
def wc_w3(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return peak_lr * step / warmup_steps
    prog = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * 0.5 * (1 + math.cos(math.pi * prog))

@A('warmup_cosine_lr', 'W', 'progress over total_steps, not total - warmup')
def wc_w4(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return peak_lr * step / warmup_steps
    prog = min(1.0, (step - warmup_steps) / total_steps)
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * prog)))

@A('warmup_cosine_lr', 'W', 'warm-up from step-1 (0 at step 1)')
def wc_w5(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return peak_lr * max(0, step - 1) / max(1, warmup_steps - 1) if warmup_steps > 1 else peak_lr * step
    prog = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * prog)))

@A('warmup_cosine_lr', 'W', 'full cosine period (cos(2 pi p))')
def wc_w6(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return peak_lr * step / warmup_steps
    prog = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(2 * math.pi * prog)))

@A('warmup_cosine_lr', 'W', 'final_fraction default 0.0')
def wc_w7(step, peak_lr, warmup_steps, total_steps, final_fraction=0.0):
    return wc_r1(step, peak_lr, warmup_steps, total_steps, final_fraction)

@A('warmup_cosine_lr', 'W', 'warmup == total crashes: divides by total - warmup unguarded for step > total')
def wc_w8(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return peak_lr * step / warmup_steps
    prog = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * prog)))

@A('warmup_cosine_lr', 'R', 'cos^2 form, guarded when warmup == total')
def wc_r2b(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return step / warmup_steps * peak_lr
    if step >= total_steps: return final_fraction * peak_lr
    prog = (step - warmup_steps) / (total_steps - warmup_steps)
    return peak_lr * (final_fraction + (1 - final_fraction) * math.cos(math.pi * prog / 2) ** 2)

@A('warmup_cosine_lr', 'R', 'torch float64 lerp, guarded')
def wc_r3b(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return peak_lr * (step / warmup_steps)
    if step >= total_steps: return final_fraction * peak_lr
    prog = torch.tensor(step - warmup_steps, dtype=torch.float64) / (total_steps - warmup_steps)
    c = 0.5 * (1 + torch.cos(math.pi * prog))
    return float(torch.lerp(torch.tensor(final_fraction * peak_lr, dtype=torch.float64), torch.tensor(float(peak_lr), dtype=torch.float64), c))

@A('warmup_cosine_lr', 'W', 'lr at step 0 is peak_lr/warmup (steps from 0 in the ramp)')
def wc_w9(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    return wc_r1(step + 1 if step < warmup_steps else step, peak_lr, warmup_steps, total_steps, final_fraction)

# ================================ 10 shift_right ================================================
@A('shift_right', 'R', 'narrow')
def sr_r1(tgt):
    L = tgt.size(1)
    return tgt.narrow(1, 0, L - 1), tgt.narrow(1, 1, L - 1)

@A('shift_right', 'R', 'index_select with arange, labels via roll')
def sr_r2(tgt):
    idx = torch.arange(tgt.size(1) - 1, device=tgt.device)
    return tgt.index_select(1, idx), torch.roll(tgt, -1, dims=1)[:, :-1]

@A('shift_right', 'R', 'transpose, slice rows, transpose back, cloned')
def sr_r3(tgt):
    t = tgt.T
    return t[:-1].T.clone(), t[1:].T.clone()

@A('shift_right', 'W', 'slices the batch axis')
def sr_w1(tgt):
    return tgt[:-1], tgt[1:]

@A('shift_right', 'W', 'input and labels swapped')
def sr_w2(tgt):
    return tgt[:, 1:], tgt[:, :-1]

@A('shift_right', 'W', '<eos> replaced by <pad> in the decoder input')
def sr_w3(tgt):
    inp = tgt[:, :-1].clone(); inp[inp == 2] = 0
    return inp, tgt[:, 1:]

@A('shift_right', 'W', 'roll over the batch axis for the labels')
def sr_w4(tgt):
    return tgt[:, :-1], torch.roll(tgt, -1, dims=0)[:, :-1]

@A('shift_right', 'W', 'cast to int32')
def sr_w5(tgt):
    return tgt[:, :-1].int(), tgt[:, 1:].int()

@A('shift_right', 'W', 'trailing all-pad columns trimmed')
def sr_w6(tgt):
    keep = int((tgt != 0).any(0).nonzero().max()) + 1
    t = tgt[:, :max(keep, 2)]
    return t[:, :-1], t[:, 1:]

@A('shift_right', 'W', 'labels: <pad> turned into -100')
def sr_w7(tgt):
    lab = tgt[:, 1:].clone(); lab[lab == 0] = -100
    return tgt[:, :-1], lab

@A('shift_right', 'W', 'flatten then cut (mixes rows)')
def sr_w8(tgt):
    f = tgt.reshape(-1)
    return f[:-tgt.size(0)].reshape(tgt.size(0), -1), f[tgt.size(0):].reshape(tgt.size(0), -1)

# ================================ 10 forward ====================================================
@A('forward', 'R', 'two halves, keyword arguments')
def fw_r1(params, src, tgt_in, config, training=False):
    memory, src_mask = encode_source(params, src, config, training=training)
    return decode_target(params, tgt_in, memory, src_mask, config, training=training)

@A('forward', 'R', 'tuple unpacking through *')
def fw_r2(params, src, tgt_in, config, training=False):
    return decode_target(params, tgt_in, *encode_source(params, src, config, training), config, training)

@A('forward', 'R', 'rebuilds src_mask with padding_mask (same as encode_source\'s)')
def fw_r3(params, src, tgt_in, config, training=False):
    memory, _ = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, padding_mask(src, 0), config, training)

@A('forward', 'W', 'training flag dropped (always eval)')
def fw_w1(params, src, tgt_in, config, training=False):
    memory, m = encode_source(params, src, config)
    return decode_target(params, tgt_in, memory, m, config)

@A('forward', 'W', 'memory detached')
def fw_w2(params, src, tgt_in, config, training=False):
    memory, m = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory.detach(), m, config, training)

@A('forward', 'W', 'encodes twice (second call draws other dropout masks)')
def fw_w3(params, src, tgt_in, config, training=False):
    _, m = encode_source(params, src, config, training)
    memory, _ = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, m, config, training)

@A('forward', 'W', 'training only for the decoder')
def fw_w4(params, src, tgt_in, config, training=False):
    memory, m = encode_source(params, src, config)
    return decode_target(params, tgt_in, memory, m, config, training)

@A('forward', 'W', 'no src mask: all-True mask')
def fw_w5(params, src, tgt_in, config, training=False):
    memory, m = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, torch.ones_like(m), config, training)

@A('forward', 'W', 'under torch.no_grad')
def fw_w6(params, src, tgt_in, config, training=False):
    with torch.no_grad():
        return fw_r1(params, src, tgt_in, config, training)

@A('forward', 'W', 'decodes in reverse RNG order: decoder first on dummy memory? -> src mask from tgt')
def fw_w7(params, src, tgt_in, config, training=False):
    memory, m = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, padding_mask(src, 2), config, training)

@A('forward', 'W', 'logits softmaxed (probabilities returned)')
def fw_w8(params, src, tgt_in, config, training=False):
    return fw_r1(params, src, tgt_in, config, training).log_softmax(-1)

# ================================ 10 label_smoothed_cross_entropy ===============================
@A('label_smoothed_cross_entropy', 'R', 'explicit smoothed target distribution, sum(-q log p)')
def ls_r1(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    logp = logits.log_softmax(-1)
    keep = labels != ignore_index
    onehot = F.one_hot(labels.masked_fill(~keep, 0), V).to(logp.dtype)
    q = onehot * (1 - smoothing) + smoothing / V
    per = -(q * logp).sum(-1)
    return (per * keep).sum() / keep.sum()

@A('label_smoothed_cross_entropy', 'R', 'hand-written log_softmax via logsumexp, float32 inside for half')
def ls_r2(logits, labels, smoothing, ignore_index=-100):
    x = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    logp = x - torch.logsumexp(x, -1, keepdim=True)
    keep = (labels != ignore_index).reshape(-1)
    lp = logp.reshape(-1, x.size(-1))[keep]
    lab = labels.reshape(-1)[keep]
    nll = -lp[torch.arange(lab.numel()), lab]
    smooth = -lp.mean(-1)
    loss = ((1 - smoothing) * nll + smoothing * smooth).sum() / keep.sum()
    return loss.to(logits.dtype)

@A('label_smoothed_cross_entropy', 'R', 'F.nll_loss of log_softmax mixed with the mean log-prob')
def ls_r3(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    logp = F.log_softmax(logits.reshape(-1, V), dim=-1); lab = labels.reshape(-1)
    nll = F.nll_loss(logp, lab, ignore_index=ignore_index)
    keep = lab != ignore_index
    uni = -(logp.sum(-1) / V * keep).sum() / keep.sum()
    return (1 - smoothing) * nll + smoothing * uni

@A('label_smoothed_cross_entropy', 'W', 'smoothing spread over V-1 other classes')
def ls_w1(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1); logp = logits.log_softmax(-1); keep = labels != ignore_index
    onehot = F.one_hot(labels.masked_fill(~keep, 0), V).to(logp.dtype)
    q = onehot * (1 - smoothing) + (1 - onehot) * smoothing / (V - 1)
    return (-(q * logp).sum(-1) * keep).sum() / keep.sum()

@A('label_smoothed_cross_entropy', 'W', 'mean over all positions (ignored ones counted)')
def ls_w2(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1); logp = logits.log_softmax(-1); keep = labels != ignore_index
    onehot = F.one_hot(labels.masked_fill(~keep, 0), V).to(logp.dtype)
    q = onehot * (1 - smoothing) + smoothing / V
    return (-(q * logp).sum(-1) * keep).mean()

@A('label_smoothed_cross_entropy', 'W', 'log(softmax) (underflows to -inf at extremes)')
def ls_w3(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1); logp = torch.log(torch.softmax(logits, -1)); keep = labels != ignore_index
    nll = -logp.gather(-1, labels.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    per = (1 - smoothing) * nll - smoothing * logp.mean(-1)
    return per.masked_fill(~keep, 0).sum() / keep.sum()

@A('label_smoothed_cross_entropy', 'W', 'ignore by labels >= 0 (ignore_index not used)')
def ls_w4(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1); logp = logits.log_softmax(-1); keep = labels >= 0
    nll = -logp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    per = (1 - smoothing) * nll - smoothing * logp.mean(-1)
    return per.masked_fill(~keep, 0).sum() / keep.sum()

@A('label_smoothed_cross_entropy', 'W', 'F.cross_entropy (forbidden by the text)')
def ls_w5(logits, labels, smoothing, ignore_index=-100):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), label_smoothing=smoothing, ignore_index=ignore_index)

@A('label_smoothed_cross_entropy', 'W', 'smoothing only off the label (label keeps 1 - smoothing exactly)')
def ls_w6(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1); logp = logits.log_softmax(-1); keep = labels != ignore_index
    onehot = F.one_hot(labels.masked_fill(~keep, 0), V).to(logp.dtype)
    q = onehot * (1 - smoothing) + (1 - onehot) * smoothing / V
    return (-(q * logp).sum(-1) * keep).sum() / keep.sum()

@A('label_smoothed_cross_entropy', 'W', 'ignored rows dropped by index, but all-ignored returns 0 instead of nan')
def ls_w7(logits, labels, smoothing, ignore_index=-100):
    keep = labels != ignore_index
    if not keep.any(): return logits.sum() * 0
    return ls_r1(logits, labels, smoothing, ignore_index)

@A('label_smoothed_cross_entropy', 'W', 'log_softmax over axis 0')
def ls_w8(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1); logp = logits.log_softmax(0); keep = labels != ignore_index
    nll = -logp.gather(-1, labels.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    per = (1 - smoothing) * nll - smoothing * logp.mean(-1)
    return per.masked_fill(~keep, 0).sum() / keep.sum()

@A('label_smoothed_cross_entropy', 'W', 'smoothed targets from the logits\' own float16 one_hot in half (target only)')
def ls_w9(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1); logp = logits.log_softmax(-1); keep = labels != ignore_index
    onehot = F.one_hot(labels.masked_fill(~keep, 0), V).to(torch.float16)
    q = (onehot * (1 - smoothing) + smoothing / V).to(logp.dtype)
    return (-(q * logp).sum(-1) * keep).sum() / keep.sum()

# ================================ b1 decoder_block ==============================================
@A('decoder_block', 'R', 'einsum mha + own LN (f32 inside), causal mask built with tril')
def db_r1(x, block, num_heads, mask=None):
    if mask is None:
        L = x.size(1)
        mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    n1, n2 = block['norm1'], block['norm2']
    x = x + my_mha(my_ln(x, n1['gamma'], n1['beta']), my_ln(x, n1['gamma'], n1['beta']), block['attention'], num_heads, mask)
    return x + my_ffn(my_ln(x, n2['gamma'], n2['beta']), block['ffn'])

@A('decoder_block', 'R', 'float64 inside, cast back')
def db_r2(x, block, num_heads, mask=None):
    b = tensors_map(block, lambda t: t.double() if t.is_floating_point() else t)
    h = x.double()
    m = causal_mask(x.size(1)) if mask is None else mask
    a = ln(h, b['norm1'])
    h = h + mha(a, a, b['attention'], num_heads, m)
    return (h + feed_forward(ln(h, b['norm2']), b['ffn'])).to(x.dtype)

@A('decoder_block', 'R', 'F.layer_norm + library attention, mask from triu(1) negated')
def db_r3(x, block, num_heads, mask=None):
    D = x.size(-1); L = x.size(1)
    if mask is None:
        mask = ~torch.triu(torch.ones(L, L, dtype=torch.bool), 1)
    a = F.layer_norm(x, (D,), block['norm1']['gamma'], block['norm1']['beta'])
    x = x + multi_head_attention(a, a, a, block['attention'], num_heads, mask)[0]
    return x + feed_forward(F.layer_norm(x, (D,), block['norm2']['gamma'], block['norm2']['beta']), block['ffn'])

@A('decoder_block', 'W', 'Post-LN')
def db_w1(x, block, num_heads, mask=None):
    m = causal_mask(x.size(1)) if mask is None else mask
    x = ln(x + mha(x, x, block['attention'], num_heads, m), block['norm1'])
    return ln(x + feed_forward(x, block['ffn']), block['norm2'])

@A('decoder_block', 'W', 'mask=None means no mask (not causal)')
def db_w2(x, block, num_heads, mask=None):
    a = ln(x, block['norm1'])
    x = x + mha(a, a, block['attention'], num_heads, mask)
    return x + feed_forward(ln(x, block['norm2']), block['ffn'])

@A('decoder_block', 'W', 'a passed mask is ANDed with causal (text: used as it is)')
def db_w3(x, block, num_heads, mask=None):
    c = causal_mask(x.size(1))
    m = c if mask is None else (mask & c)
    a = ln(x, block['norm1'])
    x = x + mha(a, a, block['attention'], num_heads, m)
    return x + feed_forward(ln(x, block['norm2']), block['ffn'])

@A('decoder_block', 'W', 'causal mask from causal_mask(x.size(-1)) (D, not L)')
def db_w4(x, block, num_heads, mask=None):
    L = x.size(1)
    m = causal_mask(x.size(-1))[..., :L, :L] if mask is None else mask
    a = ln(x, block['norm1'])
    x = x + mha(a, a, block['attention'], num_heads, m)
    return x + feed_forward(ln(x, block['norm2']), block['ffn'])

@A('decoder_block', 'W', 'FFN reads the normalised attention input (stale h)')
def db_w5(x, block, num_heads, mask=None):
    m = causal_mask(x.size(1)) if mask is None else mask
    a = ln(x, block['norm1'])
    x = x + mha(a, a, block['attention'], num_heads, m)
    return x + feed_forward(ln(a, block['norm2']), block['ffn'])

@A('decoder_block', 'W', 'mask built upper-triangular (tril transposed)')
def db_w6(x, block, num_heads, mask=None):
    L = x.size(1)
    m = torch.ones(L, L, dtype=torch.bool).triu() if mask is None else mask
    a = ln(x, block['norm1'])
    x = x + mha(a, a, block['attention'], num_heads, m)
    return x + feed_forward(ln(x, block['norm2']), block['ffn'])

@A('decoder_block', 'R', 'mask cached in a module global, sliced (label corrected: a slice of a causal mask is causal)')
def db_w7(x, block, num_heads, mask=None, _c={}):
    if mask is None:
        if 'm' not in _c: _c['m'] = causal_mask(x.size(1))
        L = x.size(1); m = _c['m']
        m = m[..., :L, :L] if m.size(-1) >= L else causal_mask(L)
    else:
        m = mask
    a = ln(x, block['norm1'])
    x = x + mha(a, a, block['attention'], num_heads, m)
    return x + feed_forward(ln(x, block['norm2']), block['ffn'])

@A('decoder_block', 'W', 'own LN with var over the batch-and-length axes (dim=(1,2))')
def db_w8(x, block, num_heads, mask=None):
    def n(t, p):
        mu = t.mean(-1, keepdim=True); var = t.var((1, 2), keepdim=True, unbiased=False)
        return (t - mu) / torch.sqrt(var + 1e-5) * p['gamma'] + p['beta']
    m = causal_mask(x.size(1)) if mask is None else mask
    a = n(x, block['norm1'])
    x = x + mha(a, a, block['attention'], num_heads, m)
    return x + feed_forward(n(x, block['norm2']), block['ffn'])

generics('decoder_block', db_r3, ['mutate', 'counter'])

# ================================ b1 lm_forward =================================================
@A('lm_forward', 'R', 'my own decoder block in a loop, gather for the embedding')
def lf_r1(params, ids, config):
    E = params['token_embedding']; B, L = ids.shape
    x = E.index_select(0, ids.reshape(-1)).view(B, L, -1) * math.sqrt(E.size(1)) + params['position_embedding'][:L]
    for blk in params['blocks']:
        x = db_r1(x, blk, config.num_heads)
    fn = params['final_norm']
    return my_ln(x, fn['gamma'], fn['beta']) @ E.T

@A('lm_forward', 'R', 'library decoder_block, F.embedding, einsum tied output')
def lf_r2(params, ids, config):
    from tfmlib import decoder_block
    E = params['token_embedding']
    x = F.embedding(ids, E) * E.size(1) ** 0.5 + params['position_embedding'][:ids.size(1)].unsqueeze(0)
    for blk in params['blocks']:
        x = decoder_block(x, blk, config.num_heads)
    h = ln(x, params['final_norm'])
    return torch.einsum('bld,vd->blv', h, E)

@A('lm_forward', 'R', 'embed() and positions via position ids, float64 blocks, cast back')
def lf_r3(params, ids, config):
    E = params['token_embedding']
    pos = torch.arange(ids.size(1), device=ids.device)
    x = embed(ids, E) + params['position_embedding'][pos]
    for blk in params['blocks']:
        x = db_r2(x, blk, config.num_heads)
    return linear(ln(x, params['final_norm']), E)

def _lm(params, ids, config, scale=True, pos_off=0, final=True, mask='causal'):
    E = params['token_embedding']; L = ids.size(1)
    x = E[ids] * (math.sqrt(E.size(1)) if scale is True else scale) + params['position_embedding'][pos_off:pos_off + L]
    m = causal_mask(L) if mask == 'causal' else mask
    for blk in params['blocks']:
        x = db_r3(x, blk, config.num_heads, m)
    if final: x = ln(x, params['final_norm'])
    return x @ E.T

A('lm_forward', 'W', 'no sqrt(D) scaling')(lambda p, i, c: _lm(p, i, c, scale=1.0))
A('lm_forward', 'W', 'positions start at 1')(lambda p, i, c: _lm(p, i, c, pos_off=1) if i.size(1) < c.max_len else _lm(p, i, c))
A('lm_forward', 'W', 'final LayerNorm left out')(lambda p, i, c: _lm(p, i, c, final=False))
A('lm_forward', 'W', 'no causal mask (all-True)')(lambda p, i, c: _lm(p, i, c, mask=torch.ones(1, 1, i.size(1), i.size(1), dtype=torch.bool)))
A('lm_forward', 'W', 'scaled by sqrt(V) instead of sqrt(D)')(lambda p, i, c: _lm(p, i, c, scale=math.sqrt(c.vocab_size)))

@A('lm_forward', 'W', 'every block reads the embeddings')
def lf_w6(params, ids, config):
    E = params['token_embedding']; L = ids.size(1)
    x0 = embed(ids, E) + params['position_embedding'][:L]; x = x0
    for blk in params['blocks']: x = db_r3(x0, blk, config.num_heads)
    return ln(x, params['final_norm']) @ E.T

@A('lm_forward', 'W', 'position table added in place into the parameter (+=)')
def lf_w7(params, ids, config):
    E = params['token_embedding']; L = ids.size(1)
    x = embed(ids, E)
    with torch.no_grad():
        x += params['position_embedding'][:L]
    for blk in params['blocks']: x = db_r3(x, blk, config.num_heads)
    return ln(x, params['final_norm']) @ E.T

@A('lm_forward', 'W', 'output layer uses the position table (wrong tie) when shapes allow')
def lf_w8(params, ids, config):
    E = params['token_embedding']; L = ids.size(1)
    x = embed(ids, E) + params['position_embedding'][:L]
    for blk in params['blocks']: x = db_r3(x, blk, config.num_heads)
    P = params['position_embedding']
    W = P[:E.size(0)] if P.size(0) >= E.size(0) else E
    return ln(x, params['final_norm']) @ W.T

# ================================ b1 lm_loss ====================================================
@A('lm_loss', 'R', 'own log_softmax + gather, my lm_forward')
def ll_r1(params, ids, config):
    logits = lf_r1(params, ids[:, :-1], config)
    x = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    logp = x - x.logsumexp(-1, keepdim=True)
    return (-logp.gather(-1, ids[:, 1:].unsqueeze(-1)).mean()).to(logits.dtype)

@A('lm_loss', 'R', 'mean of the per-sequence means (all sequences have the same length)')
def ll_r2(params, ids, config):
    from tfmlib import lm_forward
    logits = lm_forward(params, ids[:, :-1], config)
    nll = -logits.log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]
    return nll.mean(1).mean(0)

@A('lm_loss', 'W', 'F.nll_loss, .float() inside also for float64 (label corrected: my bug, float64 loses precision)')
def ll_r3(params, ids, config):
    from tfmlib import lm_forward
    logits = lm_forward(params, ids[:, :-1], config)
    V = logits.size(-1)
    return F.nll_loss(logits.reshape(-1, V).float().log_softmax(-1), ids[:, 1:].reshape(-1)).to(logits.dtype)

def _ll(params, ids, config, inp=None, tgt=None, red='mean', dim=-1):
    from tfmlib import lm_forward
    inp = ids[:, :-1] if inp is None else inp
    tgt = ids[:, 1:] if tgt is None else tgt
    logits = lm_forward(params, inp, config)
    lp = logits.log_softmax(dim).gather(-1, tgt.unsqueeze(-1))
    return -lp.sum() if red == 'sum' else -lp.mean()

A('lm_loss', 'W', 'targets not shifted (predicts the input token)')(lambda p, i, c: _ll(p, i, c, tgt=i[:, :-1]))
A('lm_loss', 'W', 'sum instead of mean')(lambda p, i, c: _ll(p, i, c, red='sum'))
A('lm_loss', 'W', 'log_softmax over the length axis')(lambda p, i, c: _ll(p, i, c, dim=1))
A('lm_loss', 'W', 'inputs ids[:, 1:], targets ids[:, :-1] (backwards)')(lambda p, i, c: _ll(p, i, c, inp=i[:, 1:], tgt=i[:, :-1]))

@A('lm_loss', 'W', 'runs the model on all L+1 tokens and drops the last row (crashes at max_len+1)')
def ll_w5(params, ids, config):
    from tfmlib import lm_forward
    logits = lm_forward(params, ids, config)[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))

@A('lm_loss', 'W', 'perplexity returned (exp of the loss)')
def ll_w6(params, ids, config):
    return _ll(params, ids, config).exp()

@A('lm_loss', 'W', 'only the last position scored')
def ll_w7(params, ids, config):
    from tfmlib import lm_forward
    logits = lm_forward(params, ids[:, :-1], config)[:, -1]
    return F.cross_entropy(logits, ids[:, -1])

@A('lm_loss', 'W', 'ignores token 0 as padding (the text has no padding)')
def ll_w8(params, ids, config):
    from tfmlib import lm_forward
    logits = lm_forward(params, ids[:, :-1], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1), ignore_index=0)

@A('lm_loss', 'W', 'label smoothing 0.1 added')
def ll_w9(params, ids, config):
    from tfmlib import lm_forward
    logits = lm_forward(params, ids[:, :-1], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1), label_smoothing=0.1)

@A('lm_loss', 'R', 'F.nll_loss, float32 inside only for half inputs')
def ll_r3b(params, ids, config):
    from tfmlib import lm_forward
    logits = lm_forward(params, ids[:, :-1], config)
    V = logits.size(-1)
    x = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    return F.nll_loss(x.reshape(-1, V).log_softmax(-1), ids[:, 1:].reshape(-1)).to(logits.dtype)

@A('decoder_block', 'W', 'remembers the first mask passed and uses it as the default')
def db_w9(x, block, num_heads, mask=None, _c={}):
    if mask is not None and 'm' not in _c: _c['m'] = mask
    m = mask if mask is not None else _c.get('m', causal_mask(x.size(1)))
    if m.size(-1) != x.size(1): m = causal_mask(x.size(1))
    a = ln(x, block['norm1'])
    x = x + mha(a, a, block['attention'], num_heads, m)
    return x + feed_forward(ln(x, block['norm2']), block['ffn'])

_CAUSAL32 = causal_mask(32)      # the notebook's max_len, built once "for speed"
@A('lm_forward', 'W', 'module-level causal_mask(32) sliced to L (breaks for L > 32)')
def lf_w9(params, ids, config):
    E = params['token_embedding']; L = ids.size(1)
    x = embed(ids, E) + params['position_embedding'][:L]
    m = _CAUSAL32[..., :L, :L]
    for blk in params['blocks']: x = db_r3(x, blk, config.num_heads, m)
    return ln(x, params['final_norm']) @ E.T

@A('lm_loss', 'W', 'module-level causal_mask(32) (breaks for windows past 33 tokens)')
def ll_w10(params, ids, config):
    logits = lf_w9(params, ids[:, :-1], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))

@A('lm_forward', 'W', 'positions from a module table of 32 rows cut from the first call\'s params')
def lf_w10(params, ids, config, _c={}):
    if 'P' not in _c: _c['P'] = params['position_embedding']
    P = _c['P'] if _c['P'].shape == params['position_embedding'].shape and _c['P'].dtype == params['position_embedding'].dtype else params['position_embedding']
    E = params['token_embedding']; L = ids.size(1)
    x = embed(ids, E) + P[:L]
    for blk in params['blocks']: x = db_r3(x, blk, config.num_heads)
    return ln(x, params['final_norm']) @ E.T

# ================================ b2 next_token_probs ===========================================
@A('next_token_probs', 'R', 'hand softmax: exp(z - max) / sum')
def nt_r1(logits, temperature=1.0):
    z = logits / temperature
    e = torch.exp(z - z.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)

@A('next_token_probs', 'R', 'float32 inside for half, cast back; multiply by 1/T')
def nt_r2(logits, temperature=1.0):
    x = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    return torch.softmax(x * (1.0 / temperature), dim=-1).to(logits.dtype)

@A('next_token_probs', 'R', 'exp(log_softmax)')
def nt_r3(logits, temperature=1.0):
    return torch.log_softmax(logits / temperature, -1).exp()

@A('next_token_probs', 'R', 'softmax on a 2-D view, reshaped back')
def nt_r4(logits, temperature=1.0):
    V = logits.size(-1)
    return F.softmax(logits.reshape(-1, V) / temperature, dim=1).reshape(logits.shape)

@A('next_token_probs', 'W', 'temperature applied after the softmax')
def nt_w1(logits, temperature=1.0):
    return torch.softmax(logits, -1) / temperature

@A('next_token_probs', 'W', 'softmax over axis 0')
def nt_w2(logits, temperature=1.0):
    return torch.softmax(logits / temperature, 0)

@A('next_token_probs', 'W', 'multiplied by T')
def nt_w3(logits, temperature=1.0):
    return torch.softmax(logits * temperature, -1)

@A('next_token_probs', 'W', 'hand softmax without max subtraction (overflow)')
def nt_w4(logits, temperature=1.0):
    e = torch.exp(logits / temperature)
    return e / e.sum(-1, keepdim=True)

@A('next_token_probs', 'W', 'p^(1/T) renormalised (underflows at extremes)')
def nt_w5(logits, temperature=1.0):
    p = torch.softmax(logits, -1) ** (1.0 / temperature)
    return p / p.sum(-1, keepdim=True)

@A('next_token_probs', 'W', 'default temperature 0.7')
def nt_w6(logits, temperature=0.7):
    return torch.softmax(logits / temperature, -1)

@A('next_token_probs', 'W', 'logits divided in place')
def nt_w7(logits, temperature=1.0):
    logits /= temperature
    return torch.softmax(logits, -1)

@A('next_token_probs', 'W', 'temperature clamped to >= 0.05 for safety')
def nt_w8(logits, temperature=1.0):
    return torch.softmax(logits / max(temperature, 0.05), -1)

@A('next_token_probs', 'W', 'softmax over dim=1 (right only for 2-D logits)')
def nt_w9(logits, temperature=1.0):
    return torch.softmax(logits / temperature, 1 if logits.dim() > 1 else 0)

# ================================ b2 top_k_filter ===============================================
@A('top_k_filter', 'R', 'sort descending, k-th value, where')
def tk_r1(logits, k):
    k = min(k, logits.size(-1))
    kth = logits.sort(-1, descending=True).values[..., k - 1:k]
    return torch.where(logits >= kth, logits, torch.full_like(logits, float('-inf')))

@A('top_k_filter', 'R', 'kthvalue of the negated logits')
def tk_r2(logits, k):
    V = logits.size(-1)
    if k >= V: return logits.clone()
    kth = -(-logits).kthvalue(k, dim=-1, keepdim=True).values
    return logits.masked_fill(logits < kth, float('-inf'))

@A('top_k_filter', 'R', 'python loop over rows of a 2-D view')
def tk_r3(logits, k):
    V = logits.size(-1); flat = logits.reshape(-1, V); out = flat.clone()
    for r in range(flat.size(0)):
        row = flat[r]
        kth = sorted(row.tolist(), reverse=True)[min(k, V) - 1]
        out[r][row < kth] = float('-inf')
    return out.reshape(logits.shape)

@A('top_k_filter', 'R', 'count of strictly larger logits < k')
def tk_r4(logits, k):
    larger = (logits.unsqueeze(-1) < logits.unsqueeze(-2)).sum(-1)   # how many beat each logit
    return logits.masked_fill(larger >= k, float('-inf'))

@A('top_k_filter', 'W', 'topk indices scattered (drops ties)')
def tk_w1(logits, k):
    k = min(k, logits.size(-1))
    idx = logits.topk(k, -1).indices
    out = torch.full_like(logits, float('-inf'))
    return out.scatter(-1, idx, logits.gather(-1, idx))

@A('top_k_filter', 'W', 'k > V crashes (no min)')
def tk_w2(logits, k):
    kth = logits.topk(k, -1).values[..., -1:]
    return logits.masked_fill(logits < kth, float('-inf'))

@A('top_k_filter', 'W', '<= drops the k-th')
def tk_w3(logits, k):
    k = min(k, logits.size(-1))
    kth = logits.topk(k, -1).values[..., -1:]
    return logits.masked_fill(logits <= kth, float('-inf'))

@A('top_k_filter', 'W', 'in-place masked_fill_ on the input')
def tk_w4(logits, k):
    k = min(k, logits.size(-1))
    kth = logits.topk(k, -1).values[..., -1:]
    return logits.masked_fill_(logits < kth, float('-inf'))

@A('top_k_filter', 'W', 'fills -1e9 instead of -inf')
def tk_w5(logits, k):
    k = min(k, logits.size(-1))
    kth = logits.topk(k, -1).values[..., -1:]
    return logits.masked_fill(logits < kth, -1e9)

@A('top_k_filter', 'W', 'k-th largest over the whole tensor (not per row)')
def tk_w6(logits, k):
    k = min(k, logits.size(-1))
    kth = logits.reshape(-1).topk(k).values[-1]
    return logits.masked_fill(logits < kth, float('-inf'))

@A('top_k_filter', 'W', 'k-th largest taken with sort ascending (k-th smallest)')
def tk_w7(logits, k):
    k = min(k, logits.size(-1))
    kth = logits.sort(-1).values[..., -k:-k + 1] if k > 1 else logits.amax(-1, keepdim=True)
    kth = logits.sort(-1).values[..., k - 1:k]
    return logits.masked_fill(logits < kth, float('-inf'))

@A('top_k_filter', 'W', 'fills finfo.min instead of -inf')
def tk_w8(logits, k):
    k = min(k, logits.size(-1))
    kth = logits.topk(k, -1).values[..., -1:]
    return logits.masked_fill(logits < kth, torch.finfo(logits.dtype).min)

@A('top_k_filter', 'W', 'rows counted over axis 0 for 2-D input (topk dim=0)')
def tk_w9(logits, k):
    d = 0 if logits.dim() == 2 and logits.size(0) >= k else -1
    kk = min(k, logits.size(d))
    kth = logits.topk(kk, d).values.narrow(d, kk - 1, 1)
    return logits.masked_fill(logits < kth, float('-inf'))

# ================================ b2 top_p_filter ===============================================
@A('top_p_filter', 'R', 'library algorithm but cumsum in float64 (text: sum to at least p)')
def tp_r1(logits, p):
    s = logits.sort(-1, descending=True).values
    probs = torch.softmax(s.double(), -1)
    before = probs.cumsum(-1) - probs
    kept = before < p
    thr = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < thr, float('-inf'))

@A('top_p_filter', 'R', 'python loop per row, running sum in the logits dtype')
def tp_r2(logits, p):
    V = logits.size(-1); flat = logits.reshape(-1, V); out = flat.clone()
    for r in range(flat.size(0)):
        row = flat[r]
        vals, order = row.sort(descending=True)
        pr = torch.softmax(vals, -1)
        total = torch.zeros((), dtype=row.dtype); last = vals[0]
        for j in range(V):
            if total < p:
                last = vals[j]; total = total + pr[j]
            else:
                break
        out[r][row < last] = float('-inf')
    return out.reshape(logits.shape)

@A('top_p_filter', 'R', 'exclusive cumsum via cat of zeros, unsorted back with scatter')
def tp_r3(logits, p):
    s, idx = logits.sort(-1, descending=True)
    pr = torch.softmax(s, -1)
    excl = torch.cat([torch.zeros_like(pr[..., :1]), pr.cumsum(-1)[..., :-1]], -1)
    keep_sorted = excl < p
    thr = torch.where(keep_sorted, s, torch.full_like(s, float('inf'))).amin(-1, keepdim=True)
    keep = logits >= thr
    return torch.where(keep, logits, torch.full_like(logits, float('-inf')))

@A('top_p_filter', 'R', 'probabilities computed unsorted, sorted probabilities walk')
def tp_r4(logits, p):
    pr = torch.softmax(logits, -1)
    sp, idx = pr.sort(-1, descending=True)
    before = sp.cumsum(-1) - sp
    n_keep = (before < p).sum(-1, keepdim=True)              # a prefix of the order
    thr_logit = logits.gather(-1, idx).gather(-1, n_keep - 1)
    return logits.masked_fill(logits < thr_logit, float('-inf'))

@A('top_p_filter', 'W', 'keeps cumsum <= p (drops the token that reaches p)')
def tp_w1(logits, p):
    s = logits.sort(-1, descending=True).values
    cs = torch.softmax(s, -1).cumsum(-1)
    kept = cs <= p; kept[..., 0] = True
    thr = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < thr, float('-inf'))

@A('top_p_filter', 'W', 'scatter back by index (ties at the cut dropped)')
def tp_w2(logits, p):
    s, idx = logits.sort(-1, descending=True)
    pr = torch.softmax(s, -1)
    kept = (pr.cumsum(-1) - pr) < p
    out_sorted = s.masked_fill(~kept, float('-inf'))
    return torch.empty_like(logits).scatter(-1, idx, out_sorted)

@A('top_p_filter', 'W', 'returns the logits in sorted order')
def tp_w3(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = torch.softmax(s, -1)
    return s.masked_fill((pr.cumsum(-1) - pr) >= p, float('-inf'))

@A('top_p_filter', 'W', 'probabilities from the logits without softmax (assumes probs)')
def tp_w4(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = s.clamp(min=0); pr = pr / pr.sum(-1, keepdim=True).clamp(min=1e-12)
    kept = (pr.cumsum(-1) - pr) < p
    thr = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < thr, float('-inf'))

@A('top_p_filter', 'W', 'sort ascending by mistake (keeps the least likely)')
def tp_w5(logits, p):
    s = logits.sort(-1).values
    pr = torch.softmax(s, -1)
    kept = (pr.cumsum(-1) - pr) < p
    thr = s.masked_fill(~kept, float('-inf')).amax(-1, keepdim=True)
    return logits.masked_fill(logits > thr, float('-inf'))

@A('top_p_filter', 'W', '-inf rows: softmax NaN not handled? uses nan_to_num on the input first')
def tp_w6(logits, p):
    x = torch.nan_to_num(logits, neginf=-1e4)
    s = x.sort(-1, descending=True).values
    pr = torch.softmax(s, -1)
    kept = (pr.cumsum(-1) - pr) < p
    thr = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return x.masked_fill(x < thr, float('-inf'))

@A('top_p_filter', 'W', 'always keeps at least 2 tokens')
def tp_w7(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = torch.softmax(s, -1)
    kept = (pr.cumsum(-1) - pr) < p; kept[..., :2] = True
    thr = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < thr, float('-inf'))

@A('top_p_filter', 'W', 'mass before compared with <= p')
def tp_w8(logits, p):
    s = logits.sort(-1, descending=True).values
    pr = torch.softmax(s, -1)
    kept = (pr.cumsum(-1) - pr) <= p
    thr = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < thr, float('-inf'))

@A('top_p_filter', 'R', 'p == 1 short-cut returns the logits (label corrected: the text\'s set at p = 1 is every token)')
def tp_w9(logits, p):
    if p >= 1: return logits
    return tp_r3(logits, p)

# ================================ b2 cached_self_attention ======================================
@A('cached_self_attention', 'R', 'library pieces, mask from position arithmetic')
def ca_r1(x, params, num_heads, cache=None):
    q, k, v = (split_heads(linear(x, params['w_' + c], params.get('b_' + c)), num_heads) for c in 'qkv')
    if cache is not None:
        k = torch.cat((cache['key'], k), 2); v = torch.cat((cache['value'], v), 2)
    Ln, Lt = x.size(1), k.size(2)
    qpos = torch.arange(Lt - Ln, Lt).unsqueeze(1); kpos = torch.arange(Lt).unsqueeze(0)
    ctx, _ = scaled_dot_product_attention(q, k, v, kpos <= qpos)
    return linear(merge_heads(ctx), params['w_o'], params.get('b_o')), {'key': k, 'value': v}

@A('cached_self_attention', 'R', 'einsum, own softmax, float32 scores for half inputs')
def ca_r2(x, params, num_heads, cache=None):
    B, Ln, D = x.shape; H = num_heads; dk = D // H
    proj = lambda c: my_lin(x, params['w_' + c], params.get('b_' + c)).view(B, Ln, H, dk).permute(0, 2, 1, 3)
    q, k, v = proj('q'), proj('k'), proj('v')
    if cache is not None:
        k = torch.cat([cache['key'], k], dim=-2); v = torch.cat([cache['value'], v], dim=-2)
    Lt = k.size(2)
    mask = torch.ones(Ln, Lt, dtype=torch.bool).tril(Lt - Ln)
    cd = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    s = torch.einsum('bhqd,bhkd->bhqk', q.to(cd), k.to(cd)) / math.sqrt(dk)
    w = my_softmax_masked(s, mask)
    ctx = torch.einsum('bhqk,bhkd->bhqd', w, v.to(cd)).to(x.dtype)
    out = my_lin(ctx.permute(0, 2, 1, 3).reshape(B, Ln, D), params['w_o'], params.get('b_o'))
    return out, {'key': k, 'value': v}

@A('cached_self_attention', 'R', 'causal_mask of the total, last rows; new dict built with dict()')
def ca_r3(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params['w_q'], params.get('b_q')), num_heads)
    k = split_heads(linear(x, params['w_k'], params.get('b_k')), num_heads)
    v = split_heads(linear(x, params['w_v'], params.get('b_v')), num_heads)
    past_k = cache['key'] if cache else k[:, :, :0]
    past_v = cache['value'] if cache else v[:, :, :0]
    k = torch.cat([past_k, k], 2); v = torch.cat([past_v, v], 2)
    Lt = k.size(2)
    m = causal_mask(Lt)[..., Lt - x.size(1):, :]
    out = linear(merge_heads(scaled_dot_product_attention(q, k, v, m)[0]), params['w_o'], params.get('b_o'))
    return out, dict(key=k, value=v)

def _ca(x, params, num_heads, cache=None, variant=''):
    q = split_heads(linear(x, params['w_q'], params.get('b_q')), num_heads)
    k = split_heads(linear(x, params['w_k'], params.get('b_k')), num_heads)
    v = split_heads(linear(x, params['w_v'], params.get('b_v')), num_heads)
    if cache is not None:
        if variant == 'newfirst':
            k = torch.cat([k, cache['key']], 2); v = torch.cat([v, cache['value']], 2)
        else:
            k = torch.cat([cache['key'], k], 2); v = torch.cat([cache['value'], v], 2)
    Ln, Lt = x.size(1), k.size(2)
    if variant == 'nomask': m = None
    elif variant == 'toprows': m = causal_mask(Lt)[..., :Ln, :]
    elif variant == 'newonly': m = torch.cat([torch.ones(Ln, Lt - Ln, dtype=torch.bool), causal_mask(Ln)[0, 0]], 1) if Ln > 1 else None
    else: m = causal_mask(Lt)[..., -Ln:, :]
    if variant == 'scaleD':
        s = q @ k.transpose(-2, -1) / math.sqrt(x.size(-1))
        s = s.masked_fill(~m, float('-inf'))
        ctx = torch.softmax(s, -1) @ v
    else:
        ctx = scaled_dot_product_attention(q, k, v, m)[0]
    out = linear(merge_heads(ctx), params['w_o'], params.get('b_o'))
    if variant == 'mutate' and cache is not None:
        cache['key'], cache['value'] = k, v
        return out, cache
    return out, {'key': k, 'value': v}

A('cached_self_attention', 'W', 'no causal mask (new tokens see later new tokens)')(lambda x, p, h, cache=None: _ca(x, p, h, cache, 'nomask'))
A('cached_self_attention', 'W', 'mask rows from the top of causal_mask(L_total)')(lambda x, p, h, cache=None: _ca(x, p, h, cache, 'toprows'))
A('cached_self_attention', 'W', 'new keys before the cached ones')(lambda x, p, h, cache=None: _ca(x, p, h, cache, 'newfirst'))
A('cached_self_attention', 'W', 'scores divided by sqrt(D) not sqrt(d_k)')(lambda x, p, h, cache=None: _ca(x, p, h, cache, 'scaleD'))
A('cached_self_attention', 'W', 'updates the caller\'s cache dict in place and returns it')(lambda x, p, h, cache=None: _ca(x, p, h, cache, 'mutate'))

@A('cached_self_attention', 'W', 'caches the projected keys before the bias')
def ca_w6(x, params, num_heads, cache=None):
    out, c = ca_r1(x, params, num_heads, cache)
    Ln = x.size(1)
    kb = params.get('b_k')
    if kb is None: return out, c
    newk = c['key'].clone()
    newk[:, :, -Ln:] = split_heads(linear(x, params['w_k']), num_heads)
    return out, {'key': newk, 'value': c['value']}

@A('cached_self_attention', 'W', 'returned cache holds only the new keys')
def ca_w7(x, params, num_heads, cache=None):
    out, c = ca_r1(x, params, num_heads, cache)
    Ln = x.size(1)
    return out, {'key': c['key'][:, :, -Ln:], 'value': c['value'][:, :, -Ln:]}

@A('cached_self_attention', 'W', 'own mask tril(Lt - Ln - 1) (off by one: a token cannot see itself)')
def ca_w8(x, params, num_heads, cache=None):
    q, k, v = (split_heads(linear(x, params['w_' + c], params.get('b_' + c)), num_heads) for c in 'qkv')
    if cache is not None:
        k = torch.cat((cache['key'], k), 2); v = torch.cat((cache['value'], v), 2)
    Ln, Lt = x.size(1), k.size(2)
    m = torch.ones(Ln, Lt, dtype=torch.bool).tril(Lt - Ln - 1)
    ctx, _ = scaled_dot_product_attention(q, k, v, m)
    return linear(merge_heads(ctx), params['w_o'], params.get('b_o')), {'key': k, 'value': v}

# ================================ b2 lm_step ====================================================
def _lm_step(params, ids, config, caches=None, variant=''):
    past = 0 if caches is None else caches[0]['key'].size(2)
    start = {'restart': 0, 'nblocks': 0 if caches is None else len(caches)}.get(variant, past)
    E = params['token_embedding']; L = ids.size(1)
    x = embed(ids, E) + params['position_embedding'][start:start + L]
    new = [] if variant != 'inplace' or caches is None else caches
    for i, blk in enumerate(params['blocks']):
        h = ln(x, blk['norm1'])
        a, c = ca_r1(h, blk['attention'], config.num_heads, None if caches is None else caches[i])
        x = x + a
        x = x + feed_forward(ln(x, blk['norm2']), blk['ffn'])
        if variant == 'inplace' and caches is not None: new[i] = c
        else: new.append(c)
    if variant != 'nofinal': x = ln(x, params['final_norm'])
    return x @ E.T, new

@A('lm_step', 'R', 'my cached attention, positions by arange offset')
def ls_step_r1(params, ids, config, caches=None):
    past = 0 if not caches else caches[0]['key'].shape[-2]
    E = params['token_embedding']
    pos = torch.arange(past, past + ids.size(1))
    x = E[ids] * math.sqrt(E.size(1)) + params['position_embedding'][pos]
    out = []
    for blk, c in zip(params['blocks'], caches if caches is not None else [None] * len(params['blocks'])):
        a, nc = ca_r2(my_ln(x, blk['norm1']['gamma'], blk['norm1']['beta']), blk['attention'], config.num_heads, c)
        x = x + a
        x = x + my_ffn(my_ln(x, blk['norm2']['gamma'], blk['norm2']['beta']), blk['ffn'])
        out.append(nc)
    fn = params['final_norm']
    return my_ln(x, fn['gamma'], fn['beta']) @ E.T, out

@A('lm_step', 'R', 'library cached_self_attention, F.embedding, linear tied')
def ls_step_r2(params, ids, config, caches=None):
    from tfmlib import cached_self_attention
    E = params['token_embedding']
    past = caches[0]['value'].size(2) if caches is not None else 0
    x = F.embedding(ids, E) * E.size(1) ** 0.5 + params['position_embedding'][past:past + ids.size(1)]
    new = []
    for i, blk in enumerate(params['blocks']):
        a, c = cached_self_attention(ln(x, blk['norm1']), blk['attention'], config.num_heads,
                                     caches[i] if caches is not None else None)
        x = x + a
        x = x + feed_forward(ln(x, blk['norm2']), blk['ffn'])
        new.append(c)
    return linear(ln(x, params['final_norm']), E), new

@A('lm_step', 'R', 'float64 inside for the blocks, cast back, caches cast back too')
def ls_step_r3(params, ids, config, caches=None):
    dt = params['token_embedding'].dtype
    p64 = tensors_map(params, lambda t: t.double() if t.is_floating_point() else t)
    c64 = None if caches is None else tensors_map(caches, lambda t: t.double())
    logits, new = _lm_step(p64, ids, config, c64)
    return logits.to(dt), tensors_map(new, lambda t: t.to(dt))

A('lm_step', 'W', 'positions restart at 0')(lambda p, i, c, caches=None: _lm_step(p, i, c, caches, 'restart'))
A('lm_step', 'W', 'positions offset by the number of blocks')(lambda p, i, c, caches=None: _lm_step(p, i, c, caches, 'nblocks'))
A('lm_step', 'W', 'final LayerNorm left out')(lambda p, i, c, caches=None: _lm_step(p, i, c, caches, 'nofinal'))
A('lm_step', 'W', 'new caches written into the caller\'s list')(lambda p, i, c, caches=None: _lm_step(p, i, c, caches, 'inplace'))

@A('lm_step', 'W', 'one cache shared by every block (caches[0])')
def ls_step_w5(params, ids, config, caches=None):
    past = 0 if caches is None else caches[0]['key'].size(2)
    E = params['token_embedding']
    x = embed(ids, E) + params['position_embedding'][past:past + ids.size(1)]
    new = []
    for blk in params['blocks']:
        a, c = ca_r1(ln(x, blk['norm1']), blk['attention'], config.num_heads, None if caches is None else caches[0])
        x = x + a + 0
        x = x + feed_forward(ln(x, blk['norm2']), blk['ffn'])
        new.append(c)
    return ln(x, params['final_norm']) @ E.T, new

@A('lm_step', 'W', 'caches hold the block input x, not the LayerNorm output (keys from x)')
def ls_step_w6(params, ids, config, caches=None):
    past = 0 if caches is None else caches[0]['key'].size(2)
    E = params['token_embedding']
    x = embed(ids, E) + params['position_embedding'][past:past + ids.size(1)]
    new = []
    for i, blk in enumerate(params['blocks']):
        a, _ = ca_r1(ln(x, blk['norm1']), blk['attention'], config.num_heads, None if caches is None else caches[i])
        _, c = ca_r1(x, blk['attention'], config.num_heads, None if caches is None else caches[i])
        x = x + a
        x = x + feed_forward(ln(x, blk['norm2']), blk['ffn'])
        new.append(c)
    return ln(x, params['final_norm']) @ E.T, new

@A('lm_step', 'W', 'only the last position\'s logits returned (B, 1, V)')
def ls_step_w7(params, ids, config, caches=None):
    logits, new = _lm_step(params, ids, config, caches)
    return logits[:, -1:], new

@A('lm_step', 'W', 'embedding not scaled by sqrt(D)')
def ls_step_w8(params, ids, config, caches=None):
    E = params['token_embedding']
    p2 = dict(params); p2['token_embedding'] = E
    past = 0 if caches is None else caches[0]['key'].size(2)
    x = E[ids] + params['position_embedding'][past:past + ids.size(1)]
    new = []
    for i, blk in enumerate(params['blocks']):
        a, c = ca_r1(ln(x, blk['norm1']), blk['attention'], config.num_heads, None if caches is None else caches[i])
        x = x + a
        x = x + feed_forward(ln(x, blk['norm2']), blk['ffn'])
        new.append(c)
    return ln(x, params['final_norm']) @ E.T, new

_CAUSAL32B = causal_mask(32)
@A('lm_step', 'W', 'cached attention with a module-level causal_mask(32) (breaks past 32 tokens)')
def ls_step_w9(params, ids, config, caches=None):
    past = 0 if caches is None else caches[0]['key'].size(2)
    E = params['token_embedding']; Ln = ids.size(1)
    x = embed(ids, E) + params['position_embedding'][past:past + Ln]
    new = []
    for i, blk in enumerate(params['blocks']):
        h = ln(x, blk['norm1']); p = blk['attention']
        q, k, v = (split_heads(linear(h, p['w_' + c], p.get('b_' + c)), config.num_heads) for c in 'qkv')
        if caches is not None:
            k = torch.cat([caches[i]['key'], k], 2); v = torch.cat([caches[i]['value'], v], 2)
        Lt = k.size(2)
        m = _CAUSAL32B[..., Lt - Ln:Lt, :Lt]
        x = x + linear(merge_heads(scaled_dot_product_attention(q, k, v, m)[0]), p['w_o'], p.get('b_o'))
        x = x + feed_forward(ln(x, blk['norm2']), blk['ffn'])
        new.append({'key': k, 'value': v})
    return ln(x, params['final_norm']) @ E.T, new

# ================================ more: half-precision styles and generic mistakes ==============
def ln_native(x, n, eps=1e-5):   # hand LayerNorm entirely in the input dtype
    mu = x.mean(-1, keepdim=True); d = x - mu
    return d / torch.sqrt((d * d).mean(-1, keepdim=True) + eps) * n['gamma'] + n['beta']

@A('encoder_layer', 'R', 'hand LayerNorm in the input dtype (no upcast)')
def el_r5(x, params, num_heads, mask=None):
    h = ln_native(x + mha(x, x, params['self_attn'], num_heads, mask), params['norm1'])
    return ln_native(h + feed_forward(h, params['ffn']), params['norm2'])

@A('decoder_block', 'R', 'hand LayerNorm in the input dtype, einsum attention')
def db_r4(x, block, num_heads, mask=None):
    m = causal_mask(x.size(1)) if mask is None else mask
    a = ln_native(x, block['norm1'])
    x = x + my_mha(a, a, block['attention'], num_heads, m)
    return x + my_ffn(ln_native(x, block['norm2']), block['ffn'])

@A('next_token_probs', 'R', 'float64 inside, cast back')
def nt_r5(logits, temperature=1.0):
    return torch.softmax(logits.double() / temperature, -1).to(logits.dtype)

@A('label_smoothed_cross_entropy', 'R', 'float64 inside for every dtype, cast back')
def ls_r4(logits, labels, smoothing, ignore_index=-100):
    return ls_r1(logits.double(), labels, smoothing, ignore_index).to(logits.dtype)

@A('top_k_filter', 'R', 'threshold from topk(...).values.min(-1)')
def tk_r5(logits, k):
    thr = logits.topk(min(k, logits.size(-1)), -1).values.amin(-1, keepdim=True)
    return logits.masked_fill(logits < thr, float('-inf'))

@A('encoder_layer', 'W', 'split heads with view(B, H, L, d_k) (no transpose)')
def el_w10(x, params, num_heads, mask=None):
    def att(t, p):
        B, L, D = t.shape; H = num_heads; dk = D // H
        q, k, v = (linear(t, p['w_' + c], p.get('b_' + c)).reshape(B, H, L, dk) for c in 'qkv')
        ctx, _ = scaled_dot_product_attention(q, k, v, mask)
        return linear(ctx.reshape(B, L, D), p['w_o'], p.get('b_o'))
    h = ln(x + att(x, params['self_attn']), params['norm1'])
    return ln(h + feed_forward(h, params['ffn']), params['norm2'])

@A('lm_step', 'W', 'past length read from the cache\'s last axis (d_k)')
def ls_step_w10(params, ids, config, caches=None):
    past = 0 if caches is None else caches[0]['key'].size(-1)
    E = params['token_embedding']; L = ids.size(1)
    x = embed(ids, E) + params['position_embedding'][past:past + L]
    new = []
    for i, blk in enumerate(params['blocks']):
        a, c = ca_r1(ln(x, blk['norm1']), blk['attention'], config.num_heads, None if caches is None else caches[i])
        x = x + a
        x = x + feed_forward(ln(x, blk['norm2']), blk['ffn'])
        new.append(c)
    return ln(x, params['final_norm']) @ E.T, new

@A('next_token_probs', 'W', 'softmax(..., dtype=torch.float32) returned as float32')
def nt_w10(logits, temperature=1.0):
    return torch.softmax(logits / temperature, -1, dtype=torch.float32)

generics('top_k_filter', tk_r1, ['f64', 'buffer'])
generics('top_p_filter', tp_r3, ['shapecache', 'idcache'])
generics('label_smoothed_cross_entropy', ls_r1, ['f32', 'counter'])
generics('lm_step', ls_step_r2, ['idcache', 'shapecache'])
generics('cached_self_attention', ca_r1, ['f64', 'counter'])
A('shift_right', 'R', 'generic:buffer (label corrected: the wrapper leaves tuple outputs unchanged, so this is sr_r1)')(W_buffer(sr_r1))
generics('shift_right', sr_r1, ['counter'])

_srbuf = {}
@A('shift_right', 'W', 'copies into two persistent buffers and returns views of them')
def sr_w9(tgt):
    B, L = tgt.shape
    for k in ('i', 'l'):
        if k not in _srbuf or _srbuf[k].numel() < B * (L - 1):
            _srbuf[k] = torch.empty(4 * B * L, dtype=tgt.dtype)
    i = _srbuf['i'][:B * (L - 1)].view(B, L - 1); i.copy_(tgt[:, :-1])
    l = _srbuf['l'][:B * (L - 1)].view(B, L - 1); l.copy_(tgt[:, 1:])
    return i, l
