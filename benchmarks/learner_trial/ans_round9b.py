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
