from harness import *
import torch.nn.functional as F
from tfmlib import (scaled_dot_product_attention as sdpa, multi_head_attention as mha, feed_forward as ffn_lib,
                    layer_norm as ln_lib, causal_mask, linear as lin_lib, split_heads as sh_lib, merge_heads as mh_lib,
                    embed as embed_lib, encoder_layer as enc_lib)
# ---------- 06
E='linear'
@A(E,'R','x @ W.T + b')
def li_r(x, weight, bias=None):
    y = x @ weight.T
    return y + bias if bias is not None else y
@A(E,'R','einsum')
def li_r2(x, weight, bias=None):
    y = torch.einsum('...i,oi->...o', x, weight)
    return y if bias is None else y + bias
@A(E,'R','matmul on flattened rows, reshape back')
def li_r3(x, weight, bias=None):
    y = x.reshape(-1, x.shape[-1]).matmul(weight.t())
    if bias is not None: y = y + bias
    return y.reshape(*x.shape[:-1], weight.shape[0])
@A(E,'W','x @ W (no transpose)')
def li_w1(x, weight, bias=None):
    y = x @ weight if weight.shape[0] == x.shape[-1] else x @ weight.T.T.T
    return y + bias if bias is not None else y
@A(E,'W','float32 zero bias when None')
def li_w2(x, weight, bias=None):
    if bias is None: bias = torch.zeros(weight.shape[0])
    return x @ weight.T + bias
@A(E,'W','F.linear')
def li_w3(x, weight, bias=None): return F.linear(x, weight, bias)
@A(E,'W','transposes the weight in place')
def li_w4(x, weight, bias=None):
    weight.data = weight.data.t().contiguous().t()
    with torch.no_grad(): weight.mul_(1.0001)
    y = x @ weight.T
    return y + bias if bias is not None else y
@A(E,'W','bias subtracted')
def li_w5(x, weight, bias=None):
    y = x @ weight.T
    return y - bias if bias is not None else y
@A(E,'W','view(-1, in) (fails on non-contiguous)')
def li_w6(x, weight, bias=None):
    y = x.view(-1, x.shape[-1]) @ weight.T
    if bias is not None: y = y + bias
    return y.view(*x.shape[:-1], -1)
generics(E, li_r, ['f32', 'f64', 'idcache', 'buffer', 'mutate'])
E='split_heads'
@A(E,'R','view + transpose')
def sh_r(x, num_heads):
    B, L, D = x.shape; return x.reshape(B, L, num_heads, D // num_heads).transpose(1, 2)
@A(E,'R','unflatten + permute')
def sh_r2(x, num_heads): return x.unflatten(-1, (num_heads, -1)).permute(0, 2, 1, 3)
@A(E,'W','reshape straight to (B, H, L, d_k)')
def sh_w1(x, num_heads):
    B, L, D = x.shape; return x.reshape(B, num_heads, L, D // num_heads)
@A(E,'W','view on a non-contiguous input')
def sh_w2(x, num_heads):
    B, L, D = x.shape; return x.view(B, L, num_heads, D // num_heads).transpose(1, 2)
@A(E,'W','(B, L, H, d_k) without transpose')
def sh_w3(x, num_heads):
    B, L, D = x.shape; return x.reshape(B, L, num_heads, D // num_heads)
@A(E,'W','d_k and H swapped')
def sh_w4(x, num_heads):
    B, L, D = x.shape; return x.reshape(B, L, D // num_heads, num_heads).permute(0, 3, 1, 2)
@A(E,'W','.contiguous() copy then float32')
def sh_w5(x, num_heads): return sh_r(x, num_heads).contiguous().float()
generics(E, sh_r, ['idcache', 'buffer', 'mutate'])
E='merge_heads'
@A(E,'R','transpose + reshape')
def mh_r(x):
    B, H, L, d = x.shape; return x.transpose(1, 2).reshape(B, L, H * d)
@A(E,'R','permute + flatten')
def mh_r2(x): return x.permute(0, 2, 1, 3).flatten(2)
@A(E,'W','reshape without transpose')
def mh_w1(x):
    B, H, L, d = x.shape; return x.reshape(B, L, H * d)
@A(E,'W','view after transpose (non-contiguous)')
def mh_w2(x):
    B, H, L, d = x.shape; return x.transpose(1, 2).view(B, L, H * d)
@A(E,'W','permute(0, 2, 3, 1)')
def mh_w3(x):
    B, H, L, d = x.shape; return x.permute(0, 2, 3, 1).reshape(B, L, H * d)
@A(E,'W','cat over heads on the length axis')
def mh_w4(x): return torch.cat(list(x.unbind(1)), dim=1).reshape(x.shape[0], x.shape[2], -1)
generics(E, mh_r, ['f32', 'idcache', 'buffer'])
E='multi_head_attention'
def _mha(q, k, v, p, H, mask=None, share=False, nomask=False, avg=False, nob_o=False, own_scale=None):
    Q = sh_r(li_r(q, p['w_q'], p.get('b_q')), H)
    K = sh_r(li_r(k, p['w_q' if share else 'w_k'], p.get('b_q' if share else 'b_k')), H)
    V = sh_r(li_r(v, p['w_v'], p.get('b_v')), H)
    if own_scale:
        s = Q @ K.transpose(-2, -1) / math.sqrt(own_scale)
        if mask is not None: s = s.masked_fill(~mask, float('-inf'))
        w = s.softmax(-1).nan_to_num(0.0); c = w @ V
    else:
        c, w = sdpa(Q, K, V, None if nomask else mask)
    out = li_r(mh_r(c), p['w_o'], None if nob_o else p.get('b_o'))
    return out, (w.mean(1) if avg else w)
@A(E,'R','split/attend/merge')
def ma_r(query, key, value, params, num_heads, mask=None): return _mha(query, key, value, params, num_heads, mask)
@A(E,'R','one fused einsum per projection, own softmax')
def ma_r2(query, key, value, params, num_heads, mask=None):
    H = num_heads; D = query.shape[-1]; d = D // H
    def proj(x, w, b):
        y = torch.einsum('bld,od->blo', x, params[w]) + params[b]
        return y.view(x.shape[0], x.shape[1], H, d).permute(0, 2, 1, 3)
    Q, K, V = proj(query, 'w_q', 'b_q'), proj(key, 'w_k', 'b_k'), proj(value, 'w_v', 'b_v')
    s = torch.einsum('bhqd,bhkd->bhqk', Q, K) / math.sqrt(d)
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    w = torch.softmax(s, -1)
    if mask is not None: w = w.masked_fill(~mask, 0.0)
    c = torch.einsum('bhqk,bhkd->bqhd', w, V).reshape(query.shape[0], query.shape[1], D)
    return torch.einsum('bld,od->blo', c, params['w_o']) + params['b_o'], w
@A(E,'W','mask not passed down')
def ma_w1(query, key, value, params, num_heads, mask=None): return _mha(query, key, value, params, num_heads, mask, nomask=True)
@A(E,'W','K uses W_q')
def ma_w2(query, key, value, params, num_heads, mask=None): return _mha(query, key, value, params, num_heads, mask, share=True)
@A(E,'W','weights averaged over heads')
def ma_w3(query, key, value, params, num_heads, mask=None): return _mha(query, key, value, params, num_heads, mask, avg=True)
@A(E,'W','no b_o')
def ma_w4(query, key, value, params, num_heads, mask=None): return _mha(query, key, value, params, num_heads, mask, nob_o=True)
@A(E,'W','scaled by sqrt(D) not sqrt(d_k)')
def ma_w5(query, key, value, params, num_heads, mask=None): return _mha(query, key, value, params, num_heads, mask, own_scale=query.shape[-1])
@A(E,'W','split with reshape straight to heads')
def ma_w6(query, key, value, params, num_heads, mask=None):
    B = query.shape[0]; H = num_heads
    f = lambda x: x.reshape(B, H, x.shape[1], -1)
    c, w = sdpa(f(li_r(query, params['w_q'], params['b_q'])), f(li_r(key, params['w_k'], params['b_k'])), f(li_r(value, params['w_v'], params['b_v'])), mask)
    return li_r(mh_r(c), params['w_o'], params['b_o']), w
generics(E, ma_r, ['f32', 'idcache', 'mutate'])
# ---------- 07
E='feed_forward'
@A(E,'R','relu between')
def ff_r(x, params): return torch.relu(x @ params['w_1'].T + params['b_1']) @ params['w_2'].T + params['b_2']
@A(E,'R','clamp(min=0), addmm-free einsum')
def ff_r2(x, params):
    h = torch.einsum('...d,fd->...f', x, params['w_1']) + params['b_1']
    return torch.einsum('...f,df->...d', h.clamp(min=0), params['w_2']) + params['b_2']
@A(E,'W','gelu')
def ff_w1(x, params): return F.gelu(x @ params['w_1'].T + params['b_1']) @ params['w_2'].T + params['b_2']
@A(E,'W','no b_2')
def ff_w2(x, params): return torch.relu(x @ params['w_1'].T + params['b_1']) @ params['w_2'].T
@A(E,'W','relu at the end too')
def ff_w3(x, params): return torch.relu(ff_r(x, params))
@A(E,'W','relu in place on a view of... (relu_ on h)')
def ff_w4(x, params):
    h = x @ params['w_1'].T + params['b_1']; h.relu_(); return h @ params['w_2'].T + params['b_2']
generics(E, ff_r, ['f32', 'idcache', 'mutate', 'buffer'])
E='dropout'
@A(E,'R','rand >= p mask')
def do_r(x, p, training=True):
    if not training: return x
    return x * (torch.rand_like(x) >= p) / (1 - p) if p < 1 else x * 0
@A(E,'R','bernoulli keep mask')
def do_r2(x, p, training=True):
    if not training or p == 0: return x
    if p == 1: return torch.zeros_like(x)
    keep = torch.bernoulli(torch.full_like(x, 1 - p))
    return x * keep / (1 - p)
@A(E,'R','returns a clone when not training')
def do_r3(x, p, training=True):
    if not training: return x.clone()
    return do_r(x, p, training)
@A(E,'W','no rescale')
def do_w1(x, p, training=True):
    return x * (torch.rand_like(x) >= p) if training else x
@A(E,'W','divide by p')
def do_w2(x, p, training=True):
    return x * (torch.rand_like(x) >= p) / p if training and p > 0 else x
@A(E,'W','randperm: exactly round(p*n) drops')
def do_w3(x, p, training=True):
    if not training: return x
    n = x.numel(); k = round(p * n); m = torch.ones(n, dtype=x.dtype); m[torch.randperm(n)[:k]] = 0
    return x * m.view_as(x) / (1 - p) if p < 1 else x * 0
@A(E,'W','randint(0,100) < 100p')
def do_w4(x, p, training=True):
    if not training: return x
    keep = torch.randint(0, 100, x.shape) >= p * 100
    return x * keep / (1 - p) if p < 1 else x * 0
@A(E,'W','same mask on every row')
def do_w5(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape[-1]) >= p) / (1 - p) if p < 1 else x * 0
@A(E,'W','drops when not training too')
def do_w6(x, p, training=True): return x * (torch.rand_like(x) >= p) / (1 - p) if p < 1 else x * 0
@A(E,'W','zeroes x in place')
def do_w7(x, p, training=True):
    if not training: return x
    with torch.no_grad(): x[torch.rand_like(x) < p] = 0
    return x / (1 - p)
@A(E,'W','float32 mask (rand, not rand_like)')
def do_w8(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape) >= p).float() / (1 - p) if p < 1 else x * 0
@A(E,'W','rand > p-ish: keep where rand < p')
def do_w9(x, p, training=True):
    if not training: return x
    return x * (torch.rand_like(x) < p) / (1 - p) if p < 1 else x * 0
E='layer_norm'
@A(E,'R','biased var, eps inside')
def ln_r(x, gamma, beta, eps=1e-5):
    m = x.mean(-1, keepdim=True); v = x.var(-1, unbiased=False, keepdim=True)
    return (x - m) / torch.sqrt(v + eps) * gamma + beta
@A(E,'W','rsqrt, ((x-m)**2).mean (W since round 8: a float16 square past 65504 is inf; 07 gives float16 and extreme values)')
def ln_r2(x, gamma, beta, eps=1e-5):
    c = x - x.mean(dim=-1, keepdim=True)
    return c * torch.rsqrt((c * c).mean(dim=-1, keepdim=True) + eps) * gamma + beta
@A(E,'R','var_mean(correction=0)')
def ln_r3(x, gamma, beta, eps=1e-5):
    v, m = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    return gamma * (x - m) / (v + eps).sqrt() + beta
@A(E,'W','unbiased var')
def ln_w1(x, gamma, beta, eps=1e-5):
    m = x.mean(-1, keepdim=True); v = x.var(-1, keepdim=True)
    return (x - m) / torch.sqrt(v + eps) * gamma + beta
@A(E,'W','eps outside the root')
def ln_w2(x, gamma, beta, eps=1e-5):
    m = x.mean(-1, keepdim=True); v = x.var(-1, unbiased=False, keepdim=True)
    return (x - m) / (torch.sqrt(v) + eps) * gamma + beta
@A(E,'W','Annotated: std unbiased + eps, eps=1e-6')
def ln_w3(x, gamma, beta, eps=1e-6):
    return gamma * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + eps) + beta
@A(E,'W','correct formula, default eps 1e-6')
def ln_w4(x, gamma, beta, eps=1e-6): return ln_r(x, gamma, beta, eps)
@A(E,'W','normalise over axis 0')
def ln_w5(x, gamma, beta, eps=1e-5):
    m = x.mean(0, keepdim=True); v = x.var(0, unbiased=False, keepdim=True)
    return (x - m) / torch.sqrt(v + eps) * gamma + beta
@A(E,'W','no eps')
def ln_w6(x, gamma, beta, eps=1e-5):
    m = x.mean(-1, keepdim=True); v = x.var(-1, unbiased=False, keepdim=True)
    return (x - m) / torch.sqrt(v) * gamma + beta
@A(E,'W','float32 compute, float32 out')
def ln_w7(x, gamma, beta, eps=1e-5): return ln_r(x.float(), gamma.float(), beta.float(), eps)
@A(E,'W','gamma/beta swapped')
def ln_w8(x, gamma, beta, eps=1e-5): return ln_r(x, beta, gamma, eps)
@A(E,'W','var squared again')
def ln_w9(x, gamma, beta, eps=1e-5):
    m = x.mean(-1, keepdim=True); v = x.var(-1, unbiased=False, keepdim=True)
    return (x - m) / torch.sqrt(v ** 2 + eps) * gamma + beta
@A(E,'W','F.layer_norm')
def ln_w10(x, gamma, beta, eps=1e-5): return F.layer_norm(x, x.shape[-1:], gamma, beta, eps)
generics(E, ln_r, ['idcache', 'mutate', 'buffer'])
E='residual_sublayer'
def _ln(x, n): return ln_r(x, n['gamma'], n['beta'])
@A(E,'R','both designs')
def rs_r(x, sublayer, norm, norm_first=False):
    return x + sublayer(_ln(x, norm)) if norm_first else _ln(x + sublayer(x), norm)
@A(E,'W','one sentence at a time')
def rs_w1(x, sublayer, norm, norm_first=False):
    return torch.stack([rs_r(xi[None], sublayer, norm, norm_first)[0] for xi in x])
@A(E,'W','designs swapped')
def rs_w2(x, sublayer, norm, norm_first=False): return rs_r(x, sublayer, norm, not norm_first)
@A(E,'W','Pre-LN normalises the sum too')
def rs_w3(x, sublayer, norm, norm_first=False):
    return _ln(x + sublayer(_ln(x, norm)), norm) if norm_first else _ln(x + sublayer(x), norm)
@A(E,'W','Post-LN: norm before the add')
def rs_w4(x, sublayer, norm, norm_first=False):
    return x + sublayer(_ln(x, norm)) if norm_first else x + _ln(sublayer(x), norm)
@A(E,'W','in place x += sublayer')
def rs_w5(x, sublayer, norm, norm_first=False):
    if norm_first:
        x += sublayer(_ln(x, norm)); return x
    return _ln(x + sublayer(x), norm)
@A(E,'W','sublayer called twice (Post-LN)')
def rs_w6(x, sublayer, norm, norm_first=False):
    if norm_first: return x + sublayer(_ln(x, norm))
    sublayer(x); return _ln(x + sublayer(x), norm)
@A(E,'W','norm on sublayer(x) only, Pre-LN residual from normalised x')
def rs_w7(x, sublayer, norm, norm_first=False):
    if norm_first:
        h = _ln(x, norm); return h + sublayer(h)
    return _ln(x + sublayer(x), norm)
generics(E, rs_r, ['idcache', 'f32'])
# ---------- 08
def _n(x, n): return ln_lib(x, n['gamma'], n['beta'])
E='encoder_layer'
@A(E,'R','Post-LN')
def el_r(x, params, num_heads, mask=None):
    x = _n(x + mha(x, x, x, params['self_attn'], num_heads, mask)[0], params['norm1'])
    return _n(x + ffn_lib(x, params['ffn']), params['norm2'])
@A(E,'W','Pre-LN')
def el_w1(x, params, num_heads, mask=None):
    h = _n(x, params['norm1']); x = x + mha(h, h, h, params['self_attn'], num_heads, mask)[0]
    return x + ffn_lib(_n(x, params['norm2']), params['ffn'])
@A(E,'W','norm1 reused')
def el_w2(x, params, num_heads, mask=None):
    x = _n(x + mha(x, x, x, params['self_attn'], num_heads, mask)[0], params['norm1'])
    return _n(x + ffn_lib(x, params['ffn']), params['norm1'])
@A(E,'W','mask dropped')
def el_w3(x, params, num_heads, mask=None): return el_r(x, params, num_heads, None)
@A(E,'W','FFN reads the original x')
def el_w4(x, params, num_heads, mask=None):
    h = _n(x + mha(x, x, x, params['self_attn'], num_heads, mask)[0], params['norm1'])
    return _n(h + ffn_lib(x, params['ffn']), params['norm2'])
@A(E,'W','uses nn.TransformerEncoderLayer-free tfmlib encoder_layer')
def el_w5(x, params, num_heads, mask=None): return enc_lib(x, params, num_heads, mask)
generics(E, el_r, ['f32', 'idcache', 'mutate'])
E='encoder'
@A(E,'R','loop')
def ec_r(x, layers, num_heads, mask=None):
    for p in layers: x = el_r(x, p, num_heads, mask)
    return x
@A(E,'R','functools.reduce')
def ec_r2(x, layers, num_heads, mask=None):
    import functools
    return functools.reduce(lambda h, p: el_r(h, p, num_heads, mask), layers, x)
@A(E,'W','each layer on x')
def ec_w1(x, layers, num_heads, mask=None):
    out = x
    for p in layers: out = el_r(x, p, num_heads, mask)
    return out
@A(E,'W','reversed order')
def ec_w2(x, layers, num_heads, mask=None): return ec_r(x, layers[::-1], num_heads, mask)
@A(E,'W','first layer only')
def ec_w3(x, layers, num_heads, mask=None): return el_r(x, layers[0], num_heads, mask)
@A(E,'W','mask only to the first layer')
def ec_w4(x, layers, num_heads, mask=None):
    for i, p in enumerate(layers): x = el_r(x, p, num_heads, mask if i == 0 else None)
    return x
generics(E, ec_r, ['idcache', 'f32'])
E='decoder_layer'
@A(E,'R','Post-LN, three sublayers')
def dl_r(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    x = _n(x + mha(x, x, x, params['self_attn'], num_heads, self_mask)[0], params['norm1'])
    x = _n(x + mha(x, memory, memory, params['cross_attn'], num_heads, memory_mask)[0], params['norm2'])
    return _n(x + ffn_lib(x, params['ffn']), params['norm3'])
@A(E,'W','cross-attention K/V from x')
def dl_w1(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    x = _n(x + mha(x, x, x, params['self_attn'], num_heads, self_mask)[0], params['norm1'])
    x = _n(x + mha(memory, x, x, params['cross_attn'], num_heads, None)[0][:, :x.shape[1]] if memory.shape[1] >= x.shape[1] else x, params['norm2'])
    return _n(x + ffn_lib(x, params['ffn']), params['norm3'])
@A(E,'W','self_mask ignored')
def dl_w2(x, memory, params, num_heads, self_mask=None, memory_mask=None): return dl_r(x, memory, params, num_heads, None, memory_mask)
@A(E,'W','memory_mask ignored')
def dl_w3(x, memory, params, num_heads, self_mask=None, memory_mask=None): return dl_r(x, memory, params, num_heads, self_mask, None)
@A(E,'W','masks swapped')
def dl_w4(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    try: return dl_r(x, memory, params, num_heads, memory_mask, self_mask)
    except RuntimeError: return dl_r(x, memory, params, num_heads, None, None)
@A(E,'W','no norm3')
def dl_w5(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    x = _n(x + mha(x, x, x, params['self_attn'], num_heads, self_mask)[0], params['norm1'])
    x = _n(x + mha(x, memory, memory, params['cross_attn'], num_heads, memory_mask)[0], params['norm2'])
    return x + ffn_lib(x, params['ffn'])
@A(E,'W','causal mask always added to self_mask (None -> causal)')
def dl_w6(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    m = causal_mask(x.shape[1]) if self_mask is None else self_mask
    return dl_r(x, memory, params, num_heads, m, memory_mask)
generics(E, dl_r, ['f32', 'idcache', 'mutate'])
