# Round 5 (issue 32): 07's feed_forward, dropout, layer_norm, residual_sublayer and b1's
# decoder_block, lm_forward, lm_loss, written blind from the exercise texts.
import math

import numpy as np
import torch.nn.functional as F

from harness import *
from tfmlib import (causal_mask, decoder_block as db_lib, embed as embed_lib, feed_forward as ffn_lib,
                    layer_norm as ln_lib, linear as lin_lib, lm_forward as lf_lib, multi_head_attention as mha)

# ---------- 07, exercise 1: feed_forward
E = 'feed_forward'
@A(E, 'R', 'relu between, @ W.T')
def ff_r(x, params):
    return torch.relu(x @ params['w_1'].T + params['b_1']) @ params['w_2'].T + params['b_2']
@A(E, 'R', 'tfmlib linear + F.relu')
def ff_r2(x, params):
    return lin_lib(F.relu(lin_lib(x, params['w_1'], params['b_1'])), params['w_2'], params['b_2'])
@A(E, 'R', 'F.linear (not refused in 07)')
def ff_r3(x, params):
    return F.linear(F.linear(x, params['w_1'], params['b_1']).clamp_min(0), params['w_2'], params['b_2'])
@A(E, 'R', 'addmm on flattened rows (reshape), reshape back')
def ff_r4(x, params):
    rows = x.reshape(-1, x.size(-1))
    h = torch.addmm(params['b_1'], rows, params['w_1'].t()).relu()
    return torch.addmm(params['b_2'], h, params['w_2'].t()).reshape(*x.shape[:-1], -1)
@A(E, 'R', 'torch.maximum with a zero of h')
def ff_r5(x, params):
    h = torch.einsum('...d,fd->...f', x, params['w_1']) + params['b_1']
    return torch.einsum('...f,df->...d', torch.maximum(h, torch.zeros_like(h)), params['w_2']) + params['b_2']
@A(E, 'W', 'reshape of w_1 instead of transpose')
def ff_w1(x, params):
    d_ff, D = params['w_1'].shape
    h = torch.relu(x @ params['w_1'].reshape(D, d_ff) + params['b_1'])
    return h @ params['w_2'].reshape(d_ff, D) + params['b_2']
@A(E, 'W', 'b_1 added after the ReLU')
def ff_w2(x, params):
    return (torch.relu(x @ params['w_1'].T) + params['b_1']) @ params['w_2'].T + params['b_2']
@A(E, 'W', 'leaky_relu(0.01)')
def ff_w3(x, params):
    return F.leaky_relu(x @ params['w_1'].T + params['b_1'], 0.01) @ params['w_2'].T + params['b_2']
@A(E, 'W', 'view(-1, D) (non-contiguous input)')
def ff_w4(x, params):
    h = torch.relu(x.view(-1, x.size(-1)) @ params['w_1'].T + params['b_1'])
    return (h @ params['w_2'].T + params['b_2']).view(*x.shape)
@A(E, 'W', 'relu_ on the input x in place first (thinking it is h)')
def ff_w5(x, params):
    h = x @ params['w_1'].T + params['b_1']
    with torch.no_grad():
        x.relu_()
    return h.relu() @ params['w_2'].T + params['b_2']
@A(E, 'W', 'float32 compute for half inputs, float32 out')
def ff_w6(x, params):
    p = {k: v.float() for k, v in params.items()}
    return ff_r(x.float(), p) if x.dtype in (torch.float16, torch.bfloat16) else ff_r(x, params)
generics(E, ff_r, ['shapecache', 'counter'])

# ---------- 07, exercise 2: dropout
E = 'dropout'
@A(E, 'R', 'torch.rand(x.shape) >= p, float32 draw')
def do_r(x, p, training=True):
    if not training:
        return x
    return x * (torch.rand(x.shape, device=x.device) >= p) / (1 - p)
@A(E, 'R', 'keep = rand < 1 - p (same law)')
def do_r2(x, p, training=True):
    if not training:
        return x
    return x * (torch.rand(x.shape) < 1 - p) / (1 - p)
@A(E, 'R', 'masked_fill where rand < p, then / (1 - p)')
def do_r3(x, p, training=True):
    if not training or p == 0:
        return x
    return x.masked_fill(torch.rand(x.shape) < p, 0) / (1 - p)
@A(E, 'R', 'bernoulli of a float32 keep probability, cast to x dtype')
def do_r4(x, p, training=True):
    if not training:
        return x
    keep = torch.bernoulli(torch.full(x.shape, 1 - p)).to(x.dtype)
    return x * keep * (1.0 / (1 - p))
@A(E, 'R', 'numpy RNG mask')
def do_r5(x, p, training=True):
    if not training:
        return x
    keep = torch.from_numpy(np.random.rand(*x.shape) >= p)
    return x * keep / (1 - p)
@A(E, 'R', 'module-level Generator seeded once (a stream, not a repeat)')
def _mk_do_r6():
    gen = torch.Generator().manual_seed(1234)
    def f(x, p, training=True):
        if not training:
            return x
        return x * (torch.rand(x.shape, generator=gen) >= p) / (1 - p)
    return f
ANS[-1] = (E, 'R', 'module-level Generator seeded once (a stream, not a repeat)', _mk_do_r6())
@A(E, 'R', 'float64 uniforms, torch.where')
def do_r7(x, p, training=True):
    if not training:
        return x
    u = torch.rand(x.shape, dtype=torch.float64)
    return torch.where(u >= p, x / (1 - p), torch.zeros((), dtype=x.dtype))
@A(E, 'R', 'clone when not training, rand > p')
def do_r8(x, p, training=True):
    if not training:
        return x.clone()
    return x * (torch.rand(x.shape) > p) / (1 - p)
@A(E, 'W', 'rand_like(x) in x dtype (bfloat16 uniforms on a 1/256 grid near 0)')
def do_w1(x, p, training=True):
    if not training:
        return x
    return x * (torch.rand_like(x) >= p) / (1 - p)
@A(E, 'W', 'randint(0, 1000) < 1000 p (a per-mille grid)')
def do_w2(x, p, training=True):
    if not training:
        return x
    return x * (torch.randint(0, 1000, x.shape) >= p * 1000) / (1 - p)
@A(E, 'W', 'p rounded to 2 decimals for the draw')
def do_w3(x, p, training=True):
    if not training:
        return x
    return x * (torch.rand(x.shape) >= round(p, 2)) / (1 - p)
@A(E, 'W', 'exactly round(p*n) drops via randperm')
def do_w4(x, p, training=True):
    if not training:
        return x
    n = x.numel()
    keep = torch.ones(n, dtype=torch.bool)
    keep[torch.randperm(n)[:round(p * n)]] = False
    return x * keep.view(x.shape) / (1 - p)
@A(E, 'W', 'stratified uniforms (randperm + rand) / n')
def do_w5(x, p, training=True):
    if not training:
        return x
    n = x.numel()
    u = (torch.randperm(n).double() + torch.rand(n, dtype=torch.float64)) / n
    return x * (u >= p).view(x.shape) / (1 - p)
@A(E, 'W', 'one uniform per pair of neighbours (repeat_interleave)')
def do_w6(x, p, training=True):
    if not training:
        return x
    n = x.numel()
    u = torch.rand((n + 1) // 2).repeat_interleave(2)[:n]
    return x * (u >= p).view(x.shape) / (1 - p)
@A(E, 'W', 'mask cached by shape (the same mask on every call)')
def _mk_do_w7():
    cache = {}
    def f(x, p, training=True):
        if not training:
            return x
        key = (tuple(x.shape), p)
        if key not in cache:
            cache[key] = torch.rand(x.shape) >= p
        return x * cache[key] / (1 - p)
    return f
ANS[-1] = (E, 'W', 'mask cached by shape (the same mask on every call)', _mk_do_w7())
@A(E, 'W', 'torch.manual_seed(0) inside (same mask each call)')
def do_w8(x, p, training=True):
    if not training:
        return x
    torch.manual_seed(0)
    return x * (torch.rand(x.shape) >= p) / (1 - p)
@A(E, 'W', 'fresh Generator seeded 0 inside (same mask each call)')
def do_w9(x, p, training=True):
    if not training:
        return x
    return x * (torch.rand(x.shape, generator=torch.Generator().manual_seed(0)) >= p) / (1 - p)
@A(E, 'W', 'whole tokens dropped: one draw per row, shared along the last axis')
def do_w10(x, p, training=True):
    if not training:
        return x
    return x * (torch.rand(*x.shape[:-1], 1) >= p) / (1 - p)
@A(E, 'W', 'x.detach() (no gradient to x)')
def do_w11(x, p, training=True):
    if not training:
        return x
    return x.detach() * (torch.rand(x.shape) >= p) / (1 - p)
@A(E, 'W', 'x.detach() when not training')
def do_w12(x, p, training=True):
    if not training:
        return x.detach()
    return x * (torch.rand(x.shape) >= p) / (1 - p)
@A(E, 'W', 'float32 keep mask times x (output float32 for half)')
def do_w13(x, p, training=True):
    if not training:
        return x
    return x * (torch.rand(x.shape) >= p).float() / (1 - p)
@A(E, 'W', 'p below 0.01 treated as 0 ("too small to matter")')
def do_w14(x, p, training=True):
    if not training:
        return x
    q = p if p >= 0.01 else 0.0      # "too small to matter"
    return x * (torch.rand(x.shape) >= q) / (1 - p)

# ---------- 07, exercise 3: layer_norm
E = 'layer_norm'
@A(E, 'R', 'var(unbiased=False), eps inside')
def ln_r(x, gamma, beta, eps=1e-5):
    m = x.mean(-1, keepdim=True)
    v = x.var(-1, keepdim=True, unbiased=False)
    return (x - m) / torch.sqrt(v + eps) * gamma + beta
@A(E, 'W', 'einsum sums / D, rsqrt (W since round 8: a float16 square past 65504 is inf; 07 gives float16 and extreme values)')
def ln_r2(x, gamma, beta, eps=1e-5):
    D = x.size(-1)
    m = torch.einsum('...d->...', x)[..., None] / D
    c = x - m
    v = torch.einsum('...d,...d->...', c, c)[..., None] / D
    return c * torch.rsqrt(v + eps) * gamma + beta
@A(E, 'R', 'float32 compute for half, cast back')
def ln_r3(x, gamma, beta, eps=1e-5):
    if x.dtype in (torch.float16, torch.bfloat16):
        return ln_r(x.float(), gamma.float(), beta.float(), eps).to(x.dtype)
    return ln_r(x, gamma, beta, eps)
@A(E, 'R', 'float64 compute always, cast back')
def ln_r4(x, gamma, beta, eps=1e-5):
    return ln_r(x.double(), gamma.double(), beta.double(), eps).to(x.dtype)
@A(E, 'W', 'mean without keepdim, [..., None]; addcmul (W since round 8: a float16 square past 65504 is inf; 07 gives float16 and extreme values)')
def ln_r5(x, gamma, beta, eps=1e-5):
    m = x.mean(-1)
    c = x - m[..., None]
    s = (c.pow(2).mean(-1) + eps).sqrt()
    return torch.addcmul(beta, c / s[..., None], gamma)
@A(E, 'W', 'E[x^2] - E[x]^2 variance (cancels at large offsets)')
def ln_w1(x, gamma, beta, eps=1e-5):
    m = x.mean(-1, keepdim=True)
    v = (x * x).mean(-1, keepdim=True) - m * m
    return (x - m) / torch.sqrt(v + eps) * gamma + beta
@A(E, 'W', 'eps ignored (always 1e-5)')
def ln_w2(x, gamma, beta, eps=1e-5):
    return ln_r(x, gamma, beta, 1e-5)
@A(E, 'W', 'normalises over the last two axes')
def ln_w3(x, gamma, beta, eps=1e-5):
    if x.dim() < 2:
        return ln_r(x, gamma, beta, eps)
    m = x.mean((-2, -1), keepdim=True)
    v = x.var((-2, -1), keepdim=True, unbiased=False)
    return (x - m) / torch.sqrt(v + eps) * gamma + beta
@A(E, 'W', 'x - x.mean(-1) without keepdim (broadcast on the wrong axis)')
def ln_w4(x, gamma, beta, eps=1e-5):
    c = x - x.mean(-1)
    return c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + eps) * gamma + beta
@A(E, 'W', 'gamma, beta cast to float32 (half in, float32 out)')
def ln_w5(x, gamma, beta, eps=1e-5):
    m = x.mean(-1, keepdim=True)
    v = x.var(-1, keepdim=True, unbiased=False)
    return (x - m) / torch.sqrt(v + eps) * gamma.float() + beta.float()
@A(E, 'W', 'std(unbiased=False) + eps')
def ln_w6(x, gamma, beta, eps=1e-5):
    c = x - x.mean(-1, keepdim=True)
    return c / (x.std(-1, keepdim=True, unbiased=False) + eps) * gamma + beta
@A(E, 'W', 'no gamma and beta')
def ln_w7(x, gamma, beta, eps=1e-5):
    m = x.mean(-1, keepdim=True)
    return (x - m) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps)
@A(E, 'W', 'x centred in place (x.sub_)')
def ln_w8(x, gamma, beta, eps=1e-5):
    with torch.no_grad():
        x.sub_(x.mean(-1, keepdim=True))
    return x / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps) * gamma + beta
@A(E, 'W', 'nn.LayerNorm module built inside')
def ln_w9(x, gamma, beta, eps=1e-5):
    mod = torch.nn.LayerNorm(x.size(-1), eps=eps, dtype=x.dtype)
    with torch.no_grad():
        mod.weight.copy_(gamma); mod.bias.copy_(beta)
    return mod(x)

# ---------- 07, exercise 4: residual_sublayer
E = 'residual_sublayer'
def _ln(x, n):
    return ln_lib(x, n['gamma'], n['beta'])
@A(E, 'R', 'both designs, tfmlib layer_norm')
def rs_r(x, sublayer, norm, norm_first=False):
    if norm_first:
        return x + sublayer(_ln(x, norm))
    return _ln(x + sublayer(x), norm)
@A(E, 'R', 'my own layer_norm inline (var_mean)')
def rs_r2(x, sublayer, norm, norm_first=False):
    def ln(t):
        v, m = torch.var_mean(t, dim=-1, keepdim=True, correction=0)
        return (t - m) / (v + 1e-5).sqrt() * norm['gamma'] + norm['beta']
    return x + sublayer(ln(x)) if norm_first else ln(x + sublayer(x))
@A(E, 'R', 'sublayer(...).add(x), torch.add order swapped')
def rs_r3(x, sublayer, norm, norm_first=False):
    if norm_first:
        return sublayer(_ln(x, norm)).add(x)
    return _ln(torch.add(sublayer(x), x), norm)
@A(E, 'R', 'sublayer given a clone of x')
def rs_r4(x, sublayer, norm, norm_first=False):
    h = _ln(x, norm) if norm_first else x.clone()
    out = sublayer(h)
    return x + out if norm_first else _ln(x + out, norm)
@A(E, 'R', 'LayerNorm in float32 for half inputs (mixed precision)')
def rs_r5(x, sublayer, norm, norm_first=False):
    def ln(t):
        if t.dtype in (torch.float16, torch.bfloat16):
            return ln_lib(t.float(), norm['gamma'].float(), norm['beta'].float()).to(t.dtype)
        return _ln(t, norm)
    return x + sublayer(ln(x)) if norm_first else ln(x + sublayer(x))
@A(E, 'R', 'F.layer_norm inside (07 refuses it for exercise 3, not 4?)')
def rs_r6(x, sublayer, norm, norm_first=False):
    ln = lambda t: F.layer_norm(t, t.shape[-1:], norm['gamma'], norm['beta'], 1e-5)
    return x + sublayer(ln(x)) if norm_first else ln(x + sublayer(x))
@A(E, 'W', 'sublayer called twice (Pre-LN)')
def rs_w1(x, sublayer, norm, norm_first=False):
    if norm_first:
        h = _ln(x, norm)
        _ = sublayer(h).shape  # "check the shape first"
        return x + sublayer(h)
    return _ln(x + sublayer(x), norm)
@A(E, 'W', 'sublayer called twice (both designs)')
def rs_w2(x, sublayer, norm, norm_first=False):
    if norm_first:
        return x + 0.5 * (sublayer(_ln(x, norm)) + sublayer(_ln(x, norm)))
    return _ln(x + 0.5 * (sublayer(x) + sublayer(x)), norm)
@A(E, 'W', 'probe the sublayer on the first sentence, then call it on all')
def rs_w3(x, sublayer, norm, norm_first=False):
    h = _ln(x, norm) if norm_first else x
    if sublayer(h[:1]).shape[-1] != x.shape[-1]:
        raise ValueError('sublayer must return d_model')
    return x + sublayer(h) if norm_first else _ln(x + sublayer(h), norm)
@A(E, 'W', 'one sentence at a time')
def rs_w4(x, sublayer, norm, norm_first=False):
    return torch.cat([rs_r(x[i:i + 1], sublayer, norm, norm_first) for i in range(x.size(0))])
@A(E, 'W', 'all sentences as one long sequence (1, B*L, D)')
def rs_w5(x, sublayer, norm, norm_first=False):
    B, L, D = x.shape
    h = _ln(x, norm) if norm_first else x
    out = sublayer(h.reshape(1, B * L, D)).reshape(B, L, D)
    return x + out if norm_first else _ln(x + out, norm)
@A(E, 'W', 'one token at a time')
def rs_w6(x, sublayer, norm, norm_first=False):
    h = _ln(x, norm) if norm_first else x
    out = torch.cat([sublayer(h[:, t:t + 1]) for t in range(x.size(1))], dim=1)
    return x + out if norm_first else _ln(x + out, norm)
@A(E, 'W', 'norm_first ignored (always Post-LN)')
def rs_w7(x, sublayer, norm, norm_first=False):
    return _ln(x + sublayer(x), norm)
@A(E, 'W', 'Post-LN: sublayer reads LayerNorm(x) too')
def rs_w8(x, sublayer, norm, norm_first=False):
    if norm_first:
        return x + sublayer(_ln(x, norm))
    return _ln(x + sublayer(_ln(x, norm)), norm)
@A(E, 'W', 'LayerNorm with the unbiased variance inside')
def rs_w9(x, sublayer, norm, norm_first=False):
    def ln(t):
        return (t - t.mean(-1, keepdim=True)) / torch.sqrt(t.var(-1, keepdim=True) + 1e-5) * norm['gamma'] + norm['beta']
    return x + sublayer(ln(x)) if norm_first else ln(x + sublayer(x))
@A(E, 'W', 'LayerNorm over axis 1 inside')
def rs_w10(x, sublayer, norm, norm_first=False):
    def ln(t):
        c = t - t.mean(1, keepdim=True)
        return c / torch.sqrt(c.pow(2).mean(1, keepdim=True) + 1e-5) * norm['gamma'] + norm['beta']
    return x + sublayer(ln(x)) if norm_first else ln(x + sublayer(x))
@A(E, 'W', 'dropout 0.1 always inside (from the table)')
def rs_w11(x, sublayer, norm, norm_first=False):
    def drop(t):
        return t * (torch.rand(t.shape) >= 0.1) / 0.9
    return x + drop(sublayer(_ln(x, norm))) if norm_first else _ln(x + drop(sublayer(x)), norm)
@A(E, 'W', 'sublayer called under torch.no_grad()')
def rs_w12(x, sublayer, norm, norm_first=False):
    with torch.no_grad():
        out = sublayer(_ln(x, norm) if norm_first else x)
    return x + out if norm_first else _ln(x + out, norm)
@A(E, 'W', 'sublayer given x.detach()')
def rs_w13(x, sublayer, norm, norm_first=False):
    h = _ln(x, norm) if norm_first else x
    out = sublayer(h.detach())
    return x + out if norm_first else _ln(x + out, norm)
@A(E, 'W', 'Post-LN x += sublayer(x) in place')
def rs_w14(x, sublayer, norm, norm_first=False):
    if norm_first:
        return x + sublayer(_ln(x, norm))
    out = sublayer(x)
    with torch.no_grad():
        x += out
    return _ln(x, norm)
@A(E, 'W', 'norm params remembered from the first call')
def _mk_rs_w15():
    kept = {}
    def f(x, sublayer, norm, norm_first=False):
        n = kept.setdefault('norm', {k: v.detach().clone() for k, v in norm.items()})
        n = {k: v.to(x.dtype) for k, v in n.items()}
        return x + sublayer(_ln(x, n)) if norm_first else _ln(x + sublayer(x), n)
    return f
ANS[-1] = (E, 'W', 'norm params remembered from the first call', _mk_rs_w15())
@A(E, 'W', 'sublayer output cached by id(sublayer)')
def _mk_rs_w16():
    cache = {}
    def f(x, sublayer, norm, norm_first=False):
        h = _ln(x, norm) if norm_first else x
        key = (id(sublayer), norm_first, tuple(x.shape), x.dtype)
        if key not in cache:
            cache[key] = sublayer(h)
        out = cache[key]
        return x + out if norm_first else _ln(x + out, norm)
    return f
ANS[-1] = (E, 'W', 'sublayer output cached by id(sublayer)', _mk_rs_w16())
@A(E, 'W', 'Pre-LN output normalised again (final norm inside)')
def rs_w17(x, sublayer, norm, norm_first=False):
    return _ln(x + sublayer(_ln(x, norm)), norm) if norm_first else _ln(x + sublayer(x), norm)
@A(E, 'W', 'sublayer on x.transpose(0, 1) (L, B, D) for a seq-first sublayer')
def rs_w18(x, sublayer, norm, norm_first=False):
    h = _ln(x, norm) if norm_first else x
    out = sublayer(h.transpose(0, 1)).transpose(0, 1)
    return x + out if norm_first else _ln(x + out, norm)
generics(E, rs_r, ['mutate', 'buffer', 'shapecache', 'f64'])

# ---------- b1, exercise 1: decoder_block
E = 'decoder_block'
def _n(x, n):
    return ln_lib(x, n['gamma'], n['beta'])
@A(E, 'R', 'Pre-LN with tfmlib pieces, causal_mask default')
def db_r(x, block, num_heads, mask=None):
    if mask is None:
        mask = causal_mask(x.size(1))
    h = _n(x, block['norm1'])
    x = x + mha(h, h, h, block['attention'], num_heads, mask)[0]
    return x + ffn_lib(_n(x, block['norm2']), block['ffn'])
@A(E, 'R', 'arange comparison mask')
def db_r2(x, block, num_heads, mask=None):
    L = x.size(1)
    if mask is None:
        i = torch.arange(L)
        mask = (i[None, :] <= i[:, None])[None, None]
    return db_r(x, block, num_heads, mask)
@A(E, 'R', 'residual_sublayer(norm_first=True) twice')
def db_r3(x, block, num_heads, mask=None):
    from tfmlib import residual_sublayer
    m = causal_mask(x.size(1)) if mask is None else mask
    x = residual_sublayer(x, lambda h: mha(h, h, h, block['attention'], num_heads, m)[0], block['norm1'], norm_first=True)
    return residual_sublayer(x, lambda h: ffn_lib(h, block['ffn']), block['norm2'], norm_first=True)
def _own_attention(h, p, H, mask, fill=float('-inf'), nan_fix=True):
    B, L, D = h.shape
    dk = D // H
    def proj(w, b):
        return (h @ p[w].T + p[b]).view(B, L, H, dk).transpose(1, 2)
    q, k, v = proj('w_q', 'b_q'), proj('w_k', 'b_k'), proj('w_v', 'b_v')
    s = torch.einsum('bhqd,bhkd->bhqk', q, k) / math.sqrt(dk)
    s = s.masked_fill(~mask, fill)
    w = torch.softmax(s, dim=-1)
    if nan_fix:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    ctx = torch.einsum('bhqk,bhkd->bhqd', w, v).transpose(1, 2).reshape(B, L, D)
    return ctx @ p['w_o'].T + p['b_o']
@A(E, 'R', 'own multi-head attention with einsum, -inf then zeroed rows')
def db_r4(x, block, num_heads, mask=None):
    m = causal_mask(x.size(1)) if mask is None else mask
    h = _n(x, block['norm1'])
    x = x + _own_attention(h, block['attention'], num_heads, m)
    return x + ffn_lib(_n(x, block['norm2']), block['ffn'])
@A(E, 'R', 'causal buffer cached, rebuilt larger when needed')
def _mk_db_r5():
    buf = {'m': causal_mask(8)}
    def f(x, block, num_heads, mask=None):
        L = x.size(1)
        if mask is None:
            if buf['m'].size(-1) < L:
                buf['m'] = causal_mask(2 * L)
            mask = buf['m'][:, :, :L, :L]
        return db_r(x, block, num_heads, mask)
    return f
ANS[-1] = (E, 'R', 'causal buffer cached, rebuilt larger when needed', _mk_db_r5())
@A(E, 'R', 'loop over sentences, mask sliced when it has a batch axis')
def db_r6(x, block, num_heads, mask=None):
    outs = []
    for i in range(x.size(0)):
        m = mask
        if m is not None and m.dim() == 4 and m.size(0) == x.size(0):
            m = m[i:i + 1]
        outs.append(db_r(x[i:i + 1], block, num_heads, m))
    return torch.cat(outs)
@A(E, 'W', 'GPT-2 style 1024 x 1024 causal buffer sliced')
def _mk_db_w1():
    buf = causal_mask(1024)
    def f(x, block, num_heads, mask=None):
        L = x.size(1)
        return db_r(x, block, num_heads, buf[:, :, :L, :L] if mask is None else mask)
    return f
ANS[-1] = (E, 'W', 'GPT-2 style 1024 x 1024 causal buffer sliced', _mk_db_w1())
@A(E, 'W', 'mask = mask or causal_mask(L)')
def db_w2(x, block, num_heads, mask=None):
    mask = mask or causal_mask(x.size(1))
    return db_r(x, block, num_heads, mask)
@A(E, 'W', 'a passed mask ignored (always causal)')
def db_w3(x, block, num_heads, mask=None):
    return db_r(x, block, num_heads, causal_mask(x.size(1)))
@A(E, 'W', 'an all-False passed mask replaced by the causal one')
def db_w4(x, block, num_heads, mask=None):
    if mask is None or not mask.any():
        mask = causal_mask(x.size(1))
    return db_r(x, block, num_heads, mask)
@A(E, 'W', 'a padding-shaped mask (B,1,1,L) combined with causal')
def db_w5(x, block, num_heads, mask=None):
    c = causal_mask(x.size(1))
    if mask is None:
        mask = c
    elif mask.size(-2) == 1:
        mask = mask & c
    return db_r(x, block, num_heads, mask)
@A(E, 'W', 'own attention without the fully-masked-row fix')
def db_w6(x, block, num_heads, mask=None):
    m = causal_mask(x.size(1)) if mask is None else mask
    h = _n(x, block['norm1'])
    x = x + _own_attention(h, block['attention'], num_heads, m, nan_fix=False)
    return x + ffn_lib(_n(x, block['norm2']), block['ffn'])
@A(E, 'W', 'own attention, -1e9 fill, no zeroing')
def db_w7(x, block, num_heads, mask=None):
    m = causal_mask(x.size(1)) if mask is None else mask
    h = _n(x, block['norm1'])
    x = x + _own_attention(h, block['attention'], num_heads, m, fill=-1e9, nan_fix=False)
    return x + ffn_lib(_n(x, block['norm2']), block['ffn'])
@A(E, 'W', 'own attention, -1e4 fill then zeroed rows')
def db_w8(x, block, num_heads, mask=None):
    m = causal_mask(x.size(1)) if mask is None else mask
    h = _n(x, block['norm1'])
    x = x + _own_attention(h, block['attention'], num_heads, m, fill=-1e4)
    return x + ffn_lib(_n(x, block['norm2']), block['ffn'])
@A(E, 'W', 'own attention, finfo(float32).min fill then zeroed rows')
def db_w9(x, block, num_heads, mask=None):
    m = causal_mask(x.size(1)) if mask is None else mask
    h = _n(x, block['norm1'])
    x = x + _own_attention(h, block['attention'], num_heads, m, fill=torch.finfo(torch.float32).min)
    return x + ffn_lib(_n(x, block['norm2']), block['ffn'])
@A(E, 'W', "first sentence's mask for every sentence (mask[:1])")
def db_w10(x, block, num_heads, mask=None):
    return db_r(x, block, num_heads, causal_mask(x.size(1)) if mask is None else mask[:1])
@A(E, 'W', 'FFN residual from the normalised stream (h + ffn(h))')
def db_w11(x, block, num_heads, mask=None):
    m = causal_mask(x.size(1)) if mask is None else mask
    h = _n(x, block['norm1'])
    x = x + mha(h, h, h, block['attention'], num_heads, m)[0]
    h = _n(x, block['norm2'])
    return h + ffn_lib(h, block['ffn'])
@A(E, 'W', 'FFN reads the un-normalised stream')
def db_w12(x, block, num_heads, mask=None):
    m = causal_mask(x.size(1)) if mask is None else mask
    h = _n(x, block['norm1'])
    x = x + mha(h, h, h, block['attention'], num_heads, m)[0]
    return x + ffn_lib(x, block['ffn'])
@A(E, 'W', 'causal default as a float tril of ones')
def db_w13(x, block, num_heads, mask=None):
    if mask is None:
        mask = torch.tril(torch.ones(x.size(1), x.size(1)))[None, None]
    return db_r(x, block, num_heads, mask.bool() if mask.dtype == torch.bool else mask)
@A(E, 'W', 'loop over sentences with the whole mask')
def db_w14(x, block, num_heads, mask=None):
    return torch.cat([db_r(x[i:i + 1], block, num_heads, mask)[:1] for i in range(x.size(0))])
@A(E, 'W', 'causal with diagonal excluded (tril(-1))')
def db_w15(x, block, num_heads, mask=None):
    if mask is None:
        mask = torch.ones(x.size(1), x.size(1), dtype=torch.bool).tril(-1)[None, None]
    return db_r(x, block, num_heads, mask)
@A(E, 'W', 'x += attention in place')
def db_w16(x, block, num_heads, mask=None):
    m = causal_mask(x.size(1)) if mask is None else mask
    h = _n(x, block['norm1'])
    a = mha(h, h, h, block['attention'], num_heads, m)[0]
    with torch.no_grad():
        x += a
    return x + ffn_lib(_n(x, block['norm2']), block['ffn'])
generics(E, db_r, ['buffer', 'shapecache', 'f64'])

# ---------- b1, exercise 2: lm_forward
E = 'lm_forward'
def _fw(params, ids, config, *, scale=None, pos=None, blocks=None, final=True, tie=lambda h, T: h @ T.T,
        block_fn=db_r):
    L = ids.size(1)
    T = params['token_embedding']
    D = T.size(1)
    x = T[ids] * (math.sqrt(D) if scale is None else scale(D, config))
    x = x + (params['position_embedding'][:L] if pos is None else pos(params['position_embedding'], L))
    for b in (params['blocks'] if blocks is None else blocks(params['blocks'])):
        x = block_fn(x, b, config.num_heads)
    if final:
        x = _n(x, params['final_norm'])
    return tie(x, T)
@A(E, 'R', 'index * sqrt(D) + pos[:L], blocks, final LN, h @ E.T')
def lf_r(params, ids, config):
    return _fw(params, ids, config)
@A(E, 'R', 'tfmlib embed, F.embedding of positions, tfmlib linear')
def lf_r2(params, ids, config):
    L = ids.size(1)
    x = embed_lib(ids, params['token_embedding']) + F.embedding(torch.arange(L), params['position_embedding'])
    m = causal_mask(L)
    for b in params['blocks']:
        x = db_lib(x, b, config.num_heads, m)
    return lin_lib(_n(x, params['final_norm']), params['token_embedding'])
@A(E, 'R', 'sqrt(config.d_model), my own decoder block (einsum attention)')
def lf_r3(params, ids, config):
    return _fw(params, ids, config, scale=lambda D, c: c.d_model ** 0.5, block_fn=db_r4)
@A(E, 'R', 'one-hot matmul in the weights dtype, einsum tie')
def lf_r4(params, ids, config):
    T = params['token_embedding']
    onehot = F.one_hot(ids, T.size(0)).to(T.dtype)
    x = onehot @ T * math.sqrt(T.size(1)) + params['position_embedding'][torch.arange(ids.size(1))]
    for b in params['blocks']:
        x = db_lib(x, b, config.num_heads)
    return torch.einsum('bld,vd->blv', _n(x, params['final_norm']), T)
@A(E, 'R', 'causal_mask(max_len) sliced to L')
def lf_r5(params, ids, config):
    L = ids.size(1)
    m = causal_mask(config.max_len)[:, :, :L, :L]
    return _fw(params, ids, config, block_fn=lambda x, b, H: db_lib(x, b, H, m))
@A(E, 'W', 'scaled by sqrt(V)')
def lf_w1(params, ids, config):
    return _fw(params, ids, config, scale=lambda D, c: math.sqrt(c.vocab_size))
@A(E, 'W', 'positions from 1 (pos[1:L+1])')
def lf_w2(params, ids, config):
    return _fw(params, ids, config, pos=lambda P, L: torch.cat([P[1:L + 1], P[:max(0, L + 1 - P.size(0))]])[:L])
@A(E, 'W', 'positions scaled by sqrt(D) too')
def lf_w3(params, ids, config):
    return _fw(params, ids, config, pos=lambda P, L: P[:L] * math.sqrt(P.size(1)))
@A(E, 'W', 'blocks in reverse order')
def lf_w4(params, ids, config):
    return _fw(params, ids, config, blocks=lambda bs: list(reversed(bs)))
@A(E, 'W', "final norm = last block's norm2")
def lf_w5(params, ids, config):
    x = _fw(params, ids, config, final=False, tie=lambda h, T: h)
    return _n(x, params['blocks'][-1]['norm2']) @ params['token_embedding'].T
@A(E, 'W', 'h @ E without transpose when V == D, else E.T')
def lf_w6(params, ids, config):
    return _fw(params, ids, config, tie=lambda h, T: h @ T if T.size(0) == T.size(1) else h @ T.T)
@A(E, 'W', 'position table cast to float32')
def lf_w7(params, ids, config):
    return _fw(params, ids, config, pos=lambda P, L: P[:L].float())
@A(E, 'W', 'pos[:config.max_len] (breaks when L < max_len)')
def lf_w8(params, ids, config):
    return _fw(params, ids, config, pos=lambda P, L: P[:config.max_len])
@A(E, 'W', 'no causal mask (full mask of ones)')
def lf_w9(params, ids, config):
    L = ids.size(1)
    full = torch.ones(1, 1, L, L, dtype=torch.bool)
    return _fw(params, ids, config, block_fn=lambda x, b, H: db_lib(x, b, H, full))
@A(E, 'W', 'table scaled in place in params')
def lf_w10(params, ids, config):
    T = params['token_embedding']
    with torch.no_grad():
        T.mul_(math.sqrt(T.size(1)))
    out = _fw(params, ids, config, scale=lambda D, c: 1.0)
    with torch.no_grad():
        T.div_(math.sqrt(T.size(1)))
    return out
generics(E, lf_r, ['f32', 'shapecache', 'counter'])

# ---------- b1, exercise 3: lm_loss
E = 'lm_loss'
@A(E, 'R', 'shift, reshape, F.cross_entropy')
def ll_r(params, ids, config):
    logits = lf_lib(params, ids[:, :-1], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))
@A(E, 'R', 'cross_entropy with classes on dim 1 (transpose)')
def ll_r2(params, ids, config):
    return F.cross_entropy(lf_lib(params, ids[:, :-1], config).transpose(1, 2), ids[:, 1:])
@A(E, 'R', 'logsumexp minus the target logit')
def ll_r3(params, ids, config):
    z = lf_lib(params, ids[:, :-1], config)
    return (z.logsumexp(-1) - z.gather(-1, ids[:, 1:, None]).squeeze(-1)).mean()
@A(E, 'R', 'mean of per-window means (windows of equal length)')
def ll_r4(params, ids, config):
    lp = lf_lib(params, ids[:, :-1], config).log_softmax(-1)
    return torch.stack([F.nll_loss(lp[b], ids[b, 1:]) for b in range(ids.size(0))]).mean()
@A(E, 'R', 'my own lm_forward inside')
def ll_r5(params, ids, config):
    logits = lf_r(params, ids[:, :-1], config)
    return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
@A(E, 'W', 'forward on all L+1 ids, logits[:, :-1] (breaks at max_len + 1)')
def ll_w1(params, ids, config):
    logits = lf_lib(params, ids, config)[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))
@A(E, 'W', 'shift the wrong way: predict ids[:, :-1] from ids[:, 1:]')
def ll_w2(params, ids, config):
    logits = lf_lib(params, ids[:, 1:], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, :-1].reshape(-1))
@A(E, 'W', 'softmax then cross_entropy (softmax twice)')
def ll_w3(params, ids, config):
    p = lf_lib(params, ids[:, :-1], config).softmax(-1)
    return F.cross_entropy(p.reshape(-1, p.size(-1)), ids[:, 1:].reshape(-1))
@A(E, 'W', 'label_smoothing=0.1')
def ll_w4(params, ids, config):
    logits = lf_lib(params, ids[:, :-1], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1), label_smoothing=0.1)
@A(E, 'W', 'loss in bits (log2)')
def ll_w5(params, ids, config):
    return ll_r(params, ids, config) / math.log(2)
@A(E, 'W', 'perplexity returned (exp of the loss)')
def ll_w6(params, ids, config):
    return ll_r(params, ids, config).exp()
@A(E, 'W', 'sum over positions, mean over windows')
def ll_w7(params, ids, config):
    lp = lf_lib(params, ids[:, :-1], config).log_softmax(-1)
    return -lp.gather(-1, ids[:, 1:, None]).squeeze(-1).sum(1).mean()
@A(E, 'W', 'loss returned as a Python float (.item())')
def ll_w8(params, ids, config):
    return ll_r(params, ids, config).item()
@A(E, 'W', 'first window only')
def ll_w9(params, ids, config):
    logits = lf_lib(params, ids[:1, :-1], config)
    return F.cross_entropy(logits[0], ids[0, 1:])
@A(E, 'W', 'reshape logits (B, V, L) with view instead of transpose')
def ll_w10(params, ids, config):
    logits = lf_lib(params, ids[:, :-1], config)
    B, L, V = logits.shape
    return F.cross_entropy(logits.reshape(B, V, L), ids[:, 1:])
generics(E, ll_r, ['f32', 'shapecache'])

# ---------- second batch, after the first run: refused built-ins, more state and mask mistakes
E = 'layer_norm'
@A(E, 'W', 'nn.LayerNorm(elementwise_affine=False), then * gamma + beta')
def ln_w10(x, gamma, beta, eps=1e-5):
    return torch.nn.LayerNorm(x.size(-1), eps=eps, elementwise_affine=False)(x) * gamma + beta
@A(E, 'W', 'torch.layer_norm (the op under F.layer_norm)')
def ln_w11(x, gamma, beta, eps=1e-5):
    return torch.layer_norm(x, x.shape[-1:], gamma, beta, eps)
@A(E, 'W', 'mean as sum / x.shape[0] (size of the wrong axis)')
def ln_w12(x, gamma, beta, eps=1e-5):
    m = x.sum(-1, keepdim=True) / x.shape[0]
    c = x - m
    return c / torch.sqrt((c * c).sum(-1, keepdim=True) / x.shape[0] + eps) * gamma + beta

E = 'dropout'
@A(E, 'W', 'F.dropout')
def do_w15(x, p, training=True):
    return F.dropout(x, p, training)
@A(E, 'W', 'torch.dropout (the op under F.dropout)')
def do_w16(x, p, training=True):
    return torch.dropout(x, p, training)
@A(E, 'W', 'nn.Dropout module')
def do_w17(x, p, training=True):
    d = torch.nn.Dropout(p)
    d.train(training)
    return d(x)
@A(E, 'W', 'one mask shared along the batch axis (rand(x.shape[1:]))')
def do_w18(x, p, training=True):
    if not training:
        return x
    return x * (torch.rand(x.shape[1:]) >= p) / (1 - p)
@A(E, 'W', 'uniforms cached by shape, rolled by one each call')
def _mk_do_w19():
    cache = {}
    def f(x, p, training=True):
        if not training:
            return x
        key = tuple(x.shape)
        u = cache[key] = cache[key].flatten().roll(1).view(x.shape) if key in cache else torch.rand(x.shape)
        return x * (u >= p) / (1 - p)
    return f
ANS[-1] = (E, 'W', 'uniforms cached by shape, rolled by one each call', _mk_do_w19())
@A(E, 'R', 'scale as a tensor of x dtype')
def do_r9(x, p, training=True):
    if not training:
        return x
    return x * (torch.rand(x.shape) >= p).to(x.dtype) * torch.tensor(1 / (1 - p), dtype=x.dtype)

E = 'residual_sublayer'
@A(E, 'W', 'Post-LN without the LayerNorm')
def rs_w19(x, sublayer, norm, norm_first=False):
    return x + sublayer(_ln(x, norm)) if norm_first else x + sublayer(x)
@A(E, 'W', 'own LayerNorm with eps 1e-6 inside')
def rs_w20(x, sublayer, norm, norm_first=False):
    ln = lambda t: ln_lib(t, norm['gamma'], norm['beta'], 1e-6)
    return x + sublayer(ln(x)) if norm_first else ln(x + sublayer(x))
@A(E, 'W', 'beta forgotten')
def rs_w21(x, sublayer, norm, norm_first=False):
    ln = lambda t: ln_lib(t, norm['gamma'], torch.zeros_like(norm['beta']))
    return x + sublayer(ln(x)) if norm_first else ln(x + sublayer(x))
@A(E, 'W', 'Post-LN as LayerNorm(x) + sublayer(x)')
def rs_w22(x, sublayer, norm, norm_first=False):
    return x + sublayer(_ln(x, norm)) if norm_first else _ln(x, norm) + sublayer(x)
@A(E, 'W', 'norm dict remembered from the first call (by reference)')
def _mk_rs_w23():
    kept = {}
    def f(x, sublayer, norm, norm_first=False):
        n = kept.setdefault('norm', norm)
        if n['gamma'].dtype != x.dtype or n['gamma'].shape != x.shape[-1:]:
            n = kept['norm'] = norm
        return x + sublayer(_ln(x, n)) if norm_first else _ln(x + sublayer(x), n)
    return f
ANS[-1] = (E, 'W', 'norm dict remembered from the first call (by reference)', _mk_rs_w23())

E = 'decoder_block'
@A(E, 'W', 'mask transposed (mask.mT)')
def db_w17(x, block, num_heads, mask=None):
    m = causal_mask(x.size(1)) if mask is None else mask.mT
    return db_r(x, block, num_heads, m)
@A(E, 'W', 'keys and values from the un-normalised x')
def db_w18(x, block, num_heads, mask=None):
    m = causal_mask(x.size(1)) if mask is None else mask
    h = _n(x, block['norm1'])
    x = x + mha(h, x, x, block['attention'], num_heads, m)[0]
    return x + ffn_lib(_n(x, block['norm2']), block['ffn'])
@A(E, 'W', 'norm2 applied to the attention output, not the stream')
def db_w19(x, block, num_heads, mask=None):
    m = causal_mask(x.size(1)) if mask is None else mask
    h = _n(x, block['norm1'])
    a = mha(h, h, h, block['attention'], num_heads, m)[0]
    return x + a + ffn_lib(_n(a, block['norm2']), block['ffn'])

E = 'lm_forward'
@A(E, 'W', 'padding mask with pad id 0 (the space) & causal')
def lf_w11(params, ids, config):
    L = ids.size(1)
    m = (ids != 0)[:, None, None, :] & causal_mask(L)
    return _fw(params, ids, config, block_fn=lambda x, b, H: db_lib(x, b, H, m))
@A(E, 'W', 'final LayerNorm with eps 1e-6')
def lf_w12(params, ids, config):
    x = _fw(params, ids, config, final=False, tie=lambda h, T: h)
    fn = params['final_norm']
    return ln_lib(x, fn['gamma'], fn['beta'], 1e-6) @ params['token_embedding'].T

E = 'lm_loss'
@A(E, 'W', 'ignore_index=0 (thinking 0 is padding; it is the space)')
def ll_w11(params, ids, config):
    logits = lf_lib(params, ids[:, :-1], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1), ignore_index=0)
@A(E, 'W', 'logits of positions 1.. of the window scored against the next ids (off by one)')
def ll_w12(params, ids, config):
    logits = lf_lib(params, ids[:, :config.max_len], config)[:, 1:]
    t = ids[:, 1:logits.size(1) + 1]
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), t.reshape(-1))

# ---------- third batch: more unusual right answers, and LayerNorm eps inside b1's exercises
E = 'dropout'
@A(E, 'R', 'empty(x.shape).uniform_() >= p; p == 1 gives zeros')
def do_r10(x, p, training=True):
    if not training or p == 0:
        return x
    if p == 1:
        return torch.zeros_like(x)
    return x * (torch.empty(x.shape).uniform_() >= p) / (1 - p)
@A(E, 'R', 'keep mask cast to x dtype, divided in place (own tensor)')
def do_r11(x, p, training=True):
    if not training:
        return x
    scale = (torch.rand(x.shape) >= p).to(x.dtype).div_(1 - p)
    return x * scale
E = 'layer_norm'
@A(E, 'W', '(v + eps) ** -0.5 (W since round 8: a float16 square past 65504 is inf; 07 gives float16 and extreme values)')
def ln_r6(x, gamma, beta, eps=1e-5):
    c = x - x.mean(dim=-1, keepdim=True)
    return gamma * c * (c.square().mean(dim=-1, keepdim=True) + eps) ** -0.5 + beta
E = 'residual_sublayer'
@A(E, 'R', 'stack([x, update]).sum(0) as the add')
def rs_r7(x, sublayer, norm, norm_first=False):
    if norm_first:
        return torch.stack([x, sublayer(_ln(x, norm))]).sum(0)
    return _ln(torch.stack([x, sublayer(x)]).sum(0), norm)
@A(E, 'R', 'one branch: h = ln(x) if norm_first else x, then the two endings')
def rs_r8(x, sublayer, norm, norm_first=False):
    update = sublayer(_ln(x, norm) if norm_first else x)
    s = x + update
    return s if norm_first else _ln(s, norm)
E = 'decoder_block'
@A(E, 'R', 'triu(1).logical_not() on x.device, mha with mask=')
def db_r7(x, block, num_heads, mask=None):
    L = x.size(1)
    if mask is None:
        mask = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1).logical_not()
    h = _n(x, block['norm1'])
    attn, _ = mha(query=h, key=h, value=h, params=block['attention'], num_heads=num_heads, mask=mask)
    x = x + attn
    return x + ffn_lib(_n(x, block['norm2']), block['ffn'])
@A(E, 'R', 'LayerNorm in float32 for half inputs (mixed precision)')
def db_r8(x, block, num_heads, mask=None):
    def n(t, p):
        if t.dtype in (torch.float16, torch.bfloat16):
            return ln_lib(t.float(), p['gamma'].float(), p['beta'].float()).to(t.dtype)
        return _n(t, p)
    m = causal_mask(x.size(1)) if mask is None else mask
    h = n(x, block['norm1'])
    x = x + mha(h, h, h, block['attention'], num_heads, m)[0]
    return x + ffn_lib(n(x, block['norm2']), block['ffn'])
@A(E, 'W', 'LayerNorms with eps 1e-6 (The Annotated Transformer)')
def db_w20(x, block, num_heads, mask=None):
    m = causal_mask(x.size(1)) if mask is None else mask
    n1, n2 = block['norm1'], block['norm2']
    h = ln_lib(x, n1['gamma'], n1['beta'], 1e-6)
    x = x + mha(h, h, h, block['attention'], num_heads, m)[0]
    return x + ffn_lib(ln_lib(x, n2['gamma'], n2['beta'], 1e-6), block['ffn'])
E = 'lm_forward'
@A(E, 'R', 'narrow positions, F.embedding, F.linear tie')
def lf_r6(params, ids, config):
    T = params['token_embedding']
    x = F.embedding(ids, T) * T.size(1) ** 0.5 + params['position_embedding'].narrow(0, 0, ids.size(1)).unsqueeze(0)
    for b in params['blocks']:
        x = db_lib(x, b, config.num_heads)
    return F.linear(_n(x, params['final_norm']), T)
E = 'lm_loss'
@A(E, 'R', 'one-hot times log_softmax')
def ll_r6(params, ids, config):
    lp = F.log_softmax(lf_lib(params, ids[:, :-1], config), dim=-1)
    return -(lp * F.one_hot(ids[:, 1:], lp.size(-1)).to(lp.dtype)).sum(-1).mean()
@A(E, 'R', 'nll_loss on flattened log-probs, contiguous inputs')
def ll_r7(params, ids, config):
    lp = lf_lib(params, ids[:, :-1].contiguous(), config).log_softmax(-1)
    return F.nll_loss(lp.flatten(0, 1), ids[:, 1:].flatten())
