from harness import *
import torch.nn.functional as F
from tfmlib import (adam_step as adam_lib, layer_norm as ln_lib, multi_head_attention as mha, feed_forward as ffn_lib,
                    causal_mask, embed as embed_lib, linear, split_heads, merge_heads, scaled_dot_product_attention as sdpa,
                    decoder_block as db_lib)
from tfmlib.training import encode_source, decode_target
# ---------- 09
def _plist(ps): return [ps] if isinstance(ps, torch.Tensor) else list(ps)
def adam_init_r(parameters):
    ps = _plist(parameters); return {"t": 0, "m": [torch.zeros_like(p) for p in ps], "v": [torch.zeros_like(p) for p in ps]}
def adam_step_r(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, *, percount=False, vm=False, nobc=False, notinplace=False, epsin=False):
    b1, b2 = betas
    state["t"] += 1; t = state["t"]
    with torch.no_grad():
        for i, p in enumerate(_plist(parameters)):
            if p.grad is None: continue
            m, v = state["m"][i], state["v"][i]
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            (m if vm else v).mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            if vm: v = m
            mh = m / (1 if nobc else 1 - b1 ** t); vh = v / (1 if nobc else 1 - b2 ** t)
            upd = lr * mh / ((vh + eps ** 2).sqrt() if epsin else (vh.sqrt() + eps))
            if notinplace: p.data = p.data - upd
            else: p.sub_(upd)
E='adam'
A(E,'R','reference-style pair')((adam_init_r, adam_step_r))
A(E,'W','v = m')((adam_init_r, lambda p, s, lr, betas=(0.9, 0.999), eps=1e-8: adam_step_r(p, s, lr, betas, eps, vm=True)))
A(E,'W','no bias correction')((adam_init_r, lambda p, s, lr, betas=(0.9, 0.999), eps=1e-8: adam_step_r(p, s, lr, betas, eps, nobc=True)))
A(E,'W','eps inside sqrt')((adam_init_r, lambda p, s, lr, betas=(0.9, 0.999), eps=1e-8: adam_step_r(p, s, lr, betas, eps, epsin=True)))
def _mk_modm():
    G = {}
    def init(ps): return {"t": 0, "m": [], "v": []}
    def step(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
        b1, b2 = betas; state["t"] += 1; t = state["t"]
        with torch.no_grad():
            for p in _plist(parameters):
                if p.grad is None: continue
                m, v = G.setdefault(id(p), (torch.zeros_like(p), torch.zeros_like(p)))
                m.mul_(b1).add_(p.grad, alpha=1 - b1); v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))
    return init, step
A(E,'W','m, v in a module dict keyed by id(p)')(_mk_modm())
def _mk_tper():
    def step(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
        b1, b2 = betas
        with torch.no_grad():
            for i, p in enumerate(_plist(parameters)):
                if p.grad is None: continue
                state["t"] += 1; t = state["t"]
                m, v = state["m"][i], state["v"][i]
                m.mul_(b1).add_(p.grad, alpha=1 - b1); v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))
    return adam_init_r, step
A(E,'W','t counted per parameter')(_mk_tper())
def _step_nograd_crash(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    for p in _plist(parameters): p.grad.shape
    adam_step_r(parameters, state, lr, betas, eps)
A(E,'W','crash on grad None')((adam_init_r, _step_nograd_crash))
A(E,'W','p.data = p.data - update (rebinds data; W since round 7: the text asks for an update in place)')((adam_init_r, lambda p, s, lr, betas=(0.9, 0.999), eps=1e-8: adam_step_r(p, s, lr, betas, eps, notinplace=True)))
def _init_sharedlists(ps):
    z = [torch.zeros_like(p) for p in _plist(ps)]; return {"t": 0, "m": z, "v": z}
A(E,'W','m and v the same list')((_init_sharedlists, adam_step_r))
def _mk_tcache():
    ts = {}
    def step(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
        k = id(parameters); ts[k] = ts.get(k, 0) + 1; state["t"] = ts[k] - 1
        adam_step_r(parameters, state, lr, betas, eps)
    return adam_init_r, step
A(E,'W','t kept in a dict keyed by id(params)')(_mk_tcache())
E='sgd_step'
@A(E,'R','sub_ under no_grad')
def sg_r(parameters, lr):
    with torch.no_grad():
        for p in _plist(parameters):
            if p.grad is not None: p.sub_(lr * p.grad)
@A(E,'R','add_ alpha=-lr')
def sg_r2(parameters, lr):
    for p in _plist(parameters):
        if p.grad is not None: p.data.add_(p.grad, alpha=-lr)
@A(E,'W','p = p - lr * grad')
def sg_w1(parameters, lr):
    for p in _plist(parameters):
        if p.grad is not None: p = p - lr * p.grad
@A(E,'W','crash on None')
def sg_w2(parameters, lr):
    with torch.no_grad():
        for p in _plist(parameters): p.sub_(lr * p.grad)
@A(E,'W','plus instead of minus')
def sg_w3(parameters, lr):
    with torch.no_grad():
        for p in _plist(parameters):
            if p.grad is not None: p.add_(lr * p.grad)
@A(E,'W','also zeroes the grads')
def sg_w4(parameters, lr):
    sg_r(parameters, lr)
    for p in _plist(parameters):
        if p.grad is not None: p.grad.zero_()
@A(E,'W','returns new list, no in place')
def sg_w5(parameters, lr): return [p - lr * p.grad if p.grad is not None else p for p in _plist(parameters)]
E='adamw_step'
@A(E,'R','decay then library adam_step')
def aw_r(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in _plist(parameters):
            if p.grad is not None: p.mul_(1 - lr * weight_decay)
    adam_lib(parameters, state, lr, betas, eps)
@A(E,'W','Adam + L2')
def aw_w1(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    for p in _plist(parameters):
        if p.grad is not None: p.grad = p.grad + weight_decay * p.detach()
    adam_lib(parameters, state, lr, betas, eps)
@A(E,'W','decay after')
def aw_w2(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    adam_lib(parameters, state, lr, betas, eps)
    with torch.no_grad():
        for p in _plist(parameters):
            if p.grad is not None: p.mul_(1 - lr * weight_decay)
@A(E,'W','decay not scaled by lr')
def aw_w3(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in _plist(parameters):
            if p.grad is not None: p.mul_(1 - weight_decay)
    adam_lib(parameters, state, lr, betas, eps)
@A(E,'W','decays params without grad')
def aw_w4(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in _plist(parameters): p.mul_(1 - lr * weight_decay)
    adam_lib(parameters, state, lr, betas, eps)
@A(E,'W','weight_decay default ignored (0.01 hard-coded... 0.1)')
def aw_w5(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1):
    aw_r(parameters, state, lr, betas, eps, weight_decay)
E='clip_grad_norm'
@A(E,'R','global norm')
def cg_r(parameters, max_norm):
    ps = [p for p in _plist(parameters) if p.grad is not None]
    if not ps: return torch.tensor(0.0)
    total = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in ps)).to(ps[0].grad.dtype)
    c = min(1.0, max_norm / (total.item() + 1e-6))
    for p in ps: p.grad.mul_(c)
    return total
@A(E,'R','stack of norms, clamp')
def cg_r2(parameters, max_norm):
    ps = [p for p in _plist(parameters) if p.grad is not None]
    if not ps: return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in ps]))
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for p in ps: p.grad.mul_(coef)
    return total
@A(E,'W','no + 1e-6')
def cg_w1(parameters, max_norm):
    ps = [p for p in _plist(parameters) if p.grad is not None]
    if not ps: return torch.tensor(0.0)
    total = torch.sqrt(sum((p.grad ** 2).sum() for p in ps))
    c = min(1.0, max_norm / total.item()) if total > 0 else 1.0
    for p in ps: p.grad.mul_(c)
    return total
@A(E,'W','per-parameter norms')
def cg_w2(parameters, max_norm):
    ps = [p for p in _plist(parameters) if p.grad is not None]
    if not ps: return torch.tensor(0.0)
    total = torch.sqrt(sum((p.grad ** 2).sum() for p in ps))
    for p in ps: p.grad.mul_(min(1.0, max_norm / (p.grad.norm().item() + 1e-6)))
    return total
@A(E,'W','always scales to max_norm')
def cg_w3(parameters, max_norm):
    ps = [p for p in _plist(parameters) if p.grad is not None]
    if not ps: return torch.tensor(0.0)
    total = torch.sqrt(sum((p.grad ** 2).sum() for p in ps))
    for p in ps: p.grad.mul_(max_norm / (total + 1e-6))
    return total
@A(E,'W','returns norm after clipping')
def cg_w4(parameters, max_norm):
    cg_r(parameters, max_norm)
    ps = [p for p in _plist(parameters) if p.grad is not None]
    if not ps: return torch.tensor(0.0)
    return torch.sqrt(sum((p.grad ** 2).sum() for p in ps))
@A(E,'W','returns a float')
def cg_w5(parameters, max_norm): return float(cg_r(parameters, max_norm))
@A(E,'W','int zero when no grad')
def cg_w6(parameters, max_norm):
    if all(p.grad is None for p in _plist(parameters)): return torch.tensor(0)
    return cg_r(parameters, max_norm)
@A(E,'W','iterates a single tensor by rows')
def cg_w7(parameters, max_norm):
    ps = [p for p in parameters if p.grad is not None] if not isinstance(parameters, torch.Tensor) else [parameters]
    ps = list(parameters) if isinstance(parameters, torch.Tensor) and parameters.dim() > 0 and False else ps
    return cg_r(ps, max_norm) if ps else torch.tensor(0.0)
@A(E,'W','grad replaced, not in place')
def cg_w8(parameters, max_norm):
    ps = [p for p in _plist(parameters) if p.grad is not None]
    if not ps: return torch.tensor(0.0)
    total = torch.sqrt(sum((p.grad ** 2).sum() for p in ps))
    c = min(1.0, max_norm / (total.item() + 1e-6))
    for p in ps: p.grad = p.grad * c
    return total
E='warmup_inverse_sqrt_lr'
@A(E,'R','formula')
def wi_r(step, d_model, warmup_steps, factor=1.0):
    if step == 0: return 0.0
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)
@A(E,'W','crash at step 0')
def wi_w1(step, d_model, warmup_steps, factor=1.0): return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)
@A(E,'W','max instead of min')
def wi_w2(step, d_model, warmup_steps, factor=1.0):
    return 0.0 if step == 0 else factor * d_model ** -0.5 * max(step ** -0.5, step * warmup_steps ** -1.5)
@A(E,'W','returns a tensor')
def wi_w3(step, d_model, warmup_steps, factor=1.0): return torch.tensor(wi_r(step, d_model, warmup_steps, factor))
@A(E,'W','factor ignored')
def wi_w4(step, d_model, warmup_steps, factor=1.0): return wi_r(step, d_model, warmup_steps)
@A(E,'W','d_model ** 0.5')
def wi_w5(step, d_model, warmup_steps, factor=1.0):
    return 0.0 if step == 0 else factor * d_model ** 0.5 * min(step ** -0.5, step * warmup_steps ** -1.5) / d_model
E='warmup_cosine_lr'
@A(E,'R','formula')
def wc_r(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return peak_lr * step / warmup_steps if warmup_steps > 0 else peak_lr
    if step >= total_steps: return final_fraction * peak_lr
    prog = (step - warmup_steps) / (total_steps - warmup_steps)
    lo = final_fraction * peak_lr
    return lo + (peak_lr - lo) * 0.5 * (1 + math.cos(math.pi * prog))
@A(E,'W','cosine to 0')
def wc_w1(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1): return wc_r(step, peak_lr, warmup_steps, total_steps, 0.0) if step < total_steps else 0.0
@A(E,'W','warmup boundary < not <=')
def wc_w2(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step < warmup_steps: return peak_lr * step / warmup_steps
    if step >= total_steps: return final_fraction * peak_lr
    prog = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    lo = final_fraction * peak_lr
    return lo + (peak_lr - lo) * 0.5 * (1 + math.cos(math.pi * prog))
@A(E,'W','cosine continues past total')
def wc_w3(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps: return peak_lr * step / warmup_steps
    prog = (step - warmup_steps) / max(1, total_steps - warmup_steps); lo = final_fraction * peak_lr
    return lo + (peak_lr - lo) * 0.5 * (1 + math.cos(math.pi * prog))
@A(E,'W','warmup (step+1)/warmup')
def wc_w4(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step < warmup_steps: return peak_lr * (step + 1) / warmup_steps
    return wc_r(step, peak_lr, warmup_steps, total_steps, final_fraction)
@A(E,'W','final_fraction ignored (0.1)')
def wc_w5(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1): return wc_r(step, peak_lr, warmup_steps, total_steps)
# ---------- 10
E='shift_right'
@A(E,'R','views')
def sr_r(tgt): return tgt[:, :-1], tgt[:, 1:]
@A(E,'R','clones')
def sr_r2(tgt): return tgt[:, :-1].clone(), tgt[:, 1:].clone()
@A(E,'W','swapped')
def sr_w1(tgt): return tgt[:, 1:], tgt[:, :-1]
@A(E,'W','no shift')
def sr_w2(tgt): return tgt, tgt
@A(E,'W','roll')
def sr_w3(tgt): return tgt[:, :-1], torch.roll(tgt, -1, 1)[:, :-1].flip(0).flip(0) if False else tgt.roll(1, 1)[:, 1:]
@A(E,'W','axis 0')
def sr_w4(tgt): return tgt[:-1], tgt[1:]
@A(E,'W','labels are a list')
def sr_w5(tgt): return tgt[:, :-1], tgt[:, 1:].tolist()
E='forward'
@A(E,'R','two halves')
def fw_r(params, src, tgt_in, config, training=False):
    memory, src_mask = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, src_mask, config, training)
@A(E,'W','training ignored')
def fw_w1(params, src, tgt_in, config, training=False): return fw_r(params, src, tgt_in, config, False)
@A(E,'W','no source mask')
def fw_w2(params, src, tgt_in, config, training=False):
    memory, _ = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, None, config, training)
@A(E,'W','decoder always training')
def fw_w3(params, src, tgt_in, config, training=False):
    memory, m = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, m, config, True)
@A(E,'W','decoder first (other random order)')
def fw_w4(params, src, tgt_in, config, training=False):
    g = torch.get_rng_state(); torch.rand(1)
    memory, m = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, m, config, training)
@A(E,'W','memory detached')
def fw_w5(params, src, tgt_in, config, training=False):
    memory, m = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory.detach(), m, config, training)
generics(E, fw_r, ['f32', 'idcache'])
E='label_smoothed_cross_entropy'
def _lsce(logits, labels, s, ii, *, spread_others=False, all_pos=False, sumit=False, f32=False):
    V = logits.size(-1); lp = (logits.float() if f32 else logits).log_softmax(-1).reshape(-1, V); y = labels.reshape(-1)
    keep = y != ii; ys = y.clamp(0, V - 1) if not all_pos else y.clamp(0, V - 1)
    nll = -lp.gather(1, ys[:, None])[:, 0]
    smooth = -lp.sum(-1) / (V - 1 if spread_others else V)
    loss = (1 - s) * nll + s * (smooth if not spread_others else (smooth * (V - 1) - (-lp.gather(1, ys[:, None])[:, 0])) / (V - 1))
    if all_pos: return loss.mean()
    loss = loss[keep]
    return loss.sum() if sumit else loss.sum() / keep.sum()
@A(E,'R','log_softmax + gather, mean over kept')
def ls_r(logits, labels, smoothing, ignore_index=-100): return _lsce(logits, labels, smoothing, ignore_index)
@A(E,'R','one-hot target tensor')
def ls_r2(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1); lp = F.log_softmax(logits, dim=-1)
    keep = labels != ignore_index
    tgt = F.one_hot(torch.where(keep, labels, 0), V).to(lp.dtype) * (1 - smoothing) + smoothing / V
    per = -(tgt * lp).sum(-1)
    return (per * keep).sum() / keep.sum()
@A(E,'W','smoothing over the other V-1')
def ls_w1(logits, labels, smoothing, ignore_index=-100): return _lsce(logits, labels, smoothing, ignore_index, spread_others=True)
@A(E,'W','mean over all positions')
def ls_w2(logits, labels, smoothing, ignore_index=-100): return _lsce(logits, labels, smoothing, ignore_index, all_pos=True)
@A(E,'W','sum')
def ls_w3(logits, labels, smoothing, ignore_index=-100): return _lsce(logits, labels, smoothing, ignore_index, sumit=True)
@A(E,'W','float32 inside and out')
def ls_w4(logits, labels, smoothing, ignore_index=-100): return _lsce(logits, labels, smoothing, ignore_index, f32=True)
@A(E,'W','F.cross_entropy')
def ls_w5(logits, labels, smoothing, ignore_index=-100):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), label_smoothing=smoothing, ignore_index=ignore_index)
@A(E,'W','log(softmax) (underflow -> inf)')
def ls_w6(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1); lp = torch.log(torch.softmax(logits, -1)); keep = labels != ignore_index
    tgt = F.one_hot(torch.where(keep, labels, 0), V).to(lp.dtype) * (1 - smoothing) + smoothing / V
    per = -(tgt * lp).sum(-1); return (per * keep).sum() / keep.sum()
@A(E,'W','ignore_index hard-coded 0')
def ls_w7(logits, labels, smoothing, ignore_index=-100): return _lsce(logits, labels, smoothing, 0)
generics(E, ls_r, ['f64', 'idcache'])
# ---------- b1
def _n(x, n): return ln_lib(x, n['gamma'], n['beta'])
E='decoder_block'
@A(E,'R','Pre-LN, causal default')
def db_r(x, block, num_heads, mask=None):
    if mask is None: mask = causal_mask(x.size(1))
    h = _n(x, block['norm1']); x = x + mha(h, h, h, block['attention'], num_heads, mask)[0]
    return x + ffn_lib(_n(x, block['norm2']), block['ffn'])
@A(E,'W','Post-LN')
def db_w1(x, block, num_heads, mask=None):
    if mask is None: mask = causal_mask(x.size(1))
    x = _n(x + mha(x, x, x, block['attention'], num_heads, mask)[0], block['norm1'])
    return _n(x + ffn_lib(x, block['ffn']), block['norm2'])
@A(E,'W','no mask when None')
def db_w2(x, block, num_heads, mask=None):
    h = _n(x, block['norm1']); x = x + mha(h, h, h, block['attention'], num_heads, mask)[0]
    return x + ffn_lib(_n(x, block['norm2']), block['ffn'])
@A(E,'W','causal AND passed mask')
def db_w3(x, block, num_heads, mask=None):
    m = causal_mask(x.size(1)) if mask is None else mask & causal_mask(x.size(1))
    return db_r(x, block, num_heads, m)
@A(E,'W','norm1 used twice')
def db_w4(x, block, num_heads, mask=None):
    if mask is None: mask = causal_mask(x.size(1))
    h = _n(x, block['norm1']); x = x + mha(h, h, h, block['attention'], num_heads, mask)[0]
    return x + ffn_lib(_n(x, block['norm1']), block['ffn'])
@A(E,'W','512-causal buffer sliced')
def _mkdb():
    buf = causal_mask(512)
    def f(x, block, num_heads, mask=None):
        return db_r(x, block, num_heads, buf[:, :, :x.size(1), :x.size(1)] if mask is None else mask)
    return f
ANS[-1] = (E, 'W', '512 causal buffer sliced', _mkdb())
generics(E, db_r, ['f32', 'idcache', 'mutate'])
E='lm_forward'
@A(E,'R','embed*sqrt + pos, blocks, LN, tied')
def lf_r(params, ids, config):
    L = ids.size(1); T = params['token_embedding']
    x = T[ids] * math.sqrt(T.size(1)) + params['position_embedding'][:L]
    for b in params['blocks']: x = db_r(x, b, config.num_heads)
    return _n(x, params['final_norm']) @ T.T
@A(E,'W','no sqrt(D)')
def lf_w1(params, ids, config):
    L = ids.size(1); T = params['token_embedding']; x = T[ids] + params['position_embedding'][:L]
    for b in params['blocks']: x = db_r(x, b, config.num_heads)
    return _n(x, params['final_norm']) @ T.T
@A(E,'W','no final LN')
def lf_w2(params, ids, config):
    L = ids.size(1); T = params['token_embedding']; x = T[ids] * math.sqrt(T.size(1)) + params['position_embedding'][:L]
    for b in params['blocks']: x = db_r(x, b, config.num_heads)
    return x @ T.T
@A(E,'W','first block only')
def lf_w3(params, ids, config):
    L = ids.size(1); T = params['token_embedding']; x = T[ids] * math.sqrt(T.size(1)) + params['position_embedding'][:L]
    x = db_r(x, params['blocks'][0], config.num_heads)
    return _n(x, params['final_norm']) @ T.T
@A(E,'W','positions ignored')
def lf_w4(params, ids, config):
    T = params['token_embedding']; x = T[ids] * math.sqrt(T.size(1))
    for b in params['blocks']: x = db_r(x, b, config.num_heads)
    return _n(x, params['final_norm']) @ T.T
@A(E,'W','num_heads hard-coded 4')
def lf_w5(params, ids, config):
    L = ids.size(1); T = params['token_embedding']; x = T[ids] * math.sqrt(T.size(1)) + params['position_embedding'][:L]
    for b in params['blocks']: x = db_r(x, b, 4 if T.size(1) % 4 == 0 else config.num_heads)
    return _n(x, params['final_norm']) @ T.T
generics(E, lf_r, ['f32', 'idcache'])
E='lm_loss'
from tfmlib import lm_forward as lf_lib
@A(E,'R','shift and cross_entropy')
def ll_r(params, ids, config):
    logits = lf_lib(params, ids[:, :-1], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))
@A(E,'R','log_softmax gather')
def ll_r2(params, ids, config):
    lp = lf_lib(params, ids[:, :-1], config).log_softmax(-1)
    return -lp.gather(-1, ids[:, 1:, None]).mean()
@A(E,'W','no shift')
def ll_w1(params, ids, config):
    logits = lf_lib(params, ids[:, 1:], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))
@A(E,'W','sum')
def ll_w2(params, ids, config):
    logits = lf_lib(params, ids[:, :-1], config)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1), reduction='sum')
@A(E,'W','logits transposed wrongly (view instead of permute)')
def ll_w3(params, ids, config):
    logits = lf_lib(params, ids[:, :-1], config)
    return F.cross_entropy(logits.reshape(logits.size(0), logits.size(-1), -1), ids[:, 1:])
@A(E,'W','mean of per-row means with last position dropped')
def ll_w4(params, ids, config):
    logits = lf_lib(params, ids[:, :-1], config)[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:-1].reshape(-1))
# ---------- b2
E='next_token_probs'
@A(E,'R','softmax(logits / T)')
def nt_r(logits, temperature=1.0): return torch.softmax(logits / temperature, dim=-1)
@A(E,'R','exp-normalise with max subtracted')
def nt_r2(logits, temperature=1.0):
    z = logits / temperature; z = z - z.amax(-1, keepdim=True); e = z.exp(); return e / e.sum(-1, keepdim=True)
@A(E,'W','times T')
def nt_w1(logits, temperature=1.0): return torch.softmax(logits * temperature, dim=-1)
@A(E,'W','dim 0')
def nt_w2(logits, temperature=1.0): return torch.softmax(logits / temperature, dim=0)
@A(E,'W','float32')
def nt_w3(logits, temperature=1.0): return torch.softmax(logits.float() / temperature, dim=-1)
@A(E,'W','probs ** (1/T) not renormalised')
def nt_w4(logits, temperature=1.0): return torch.softmax(logits, -1) ** (1 / temperature)
@A(E,'W','exp without max subtraction')
def nt_w5(logits, temperature=1.0):
    e = (logits / temperature).exp(); return e / e.sum(-1, keepdim=True)
@A(E,'W','in-place div_')
def nt_w6(logits, temperature=1.0): return torch.softmax(logits.div_(temperature), -1)
generics(E, nt_r, ['idcache', 'buffer'])
E='top_k_filter'
@A(E,'R','kth value, masked_fill')
def tk_r(logits, k):
    k = min(k, logits.size(-1)); kth = logits.topk(k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float('-inf'))
@A(E,'R','sort descending, where')
def tk_r2(logits, k):
    s = logits.sort(-1, descending=True).values; kth = s[..., min(k, s.size(-1)) - 1].unsqueeze(-1)
    return torch.where(logits >= kth, logits, torch.full_like(logits, float('-inf')))
@A(E,'W','scatter topk indices (ties dropped)')
def tk_w1(logits, k):
    k = min(k, logits.size(-1)); idx = logits.topk(k, -1).indices
    out = torch.full_like(logits, float('-inf')); return out.scatter(-1, idx, logits.gather(-1, idx))
@A(E,'W','k > V crashes')
def tk_w2(logits, k):
    kth = logits.topk(k, dim=-1).values[..., -1:]; return logits.masked_fill(logits < kth, float('-inf'))
@A(E,'W','kth index off by one')
def tk_w3(logits, k):
    s = logits.sort(-1, descending=True).values; kth = s[..., min(k, s.size(-1) - 1)].unsqueeze(-1)
    return logits.masked_fill(logits < kth, float('-inf'))
@A(E,'W','in place')
def tk_w4(logits, k):
    k = min(k, logits.size(-1)); kth = logits.topk(k, dim=-1).values[..., -1:]
    return logits.masked_fill_(logits < kth, float('-inf'))
@A(E,'W','fills -1e9')
def tk_w5(logits, k):
    k = min(k, logits.size(-1)); kth = logits.topk(k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, -1e9) if logits.dtype != torch.float16 else logits.masked_fill(logits < kth, -6e4)
@A(E,'W','fills 0')
def tk_w6(logits, k):
    k = min(k, logits.size(-1)); kth = logits.topk(k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, 0.0)
generics(E, tk_r, ['idcache', 'buffer', 'f32'])
E='top_p_filter'
@A(E,'R','sort, cumsum - p, cut')
def tp_r(logits, p):
    s = logits.sort(-1, descending=True).values; pr = s.softmax(-1)
    kept = (pr.cumsum(-1) - pr) < p
    low = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < low, float('-inf'))
@A(E,'W','drops the token that crosses p')
def tp_w1(logits, p):
    s = logits.sort(-1, descending=True).values; pr = s.softmax(-1)
    kept = pr.cumsum(-1) <= p; kept[..., 0] = True
    low = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < low, float('-inf'))
@A(E,'W','returns sorted order')
def tp_w2(logits, p):
    s = logits.sort(-1, descending=True).values; pr = s.softmax(-1)
    kept = (pr.cumsum(-1) - pr) < p
    return s.masked_fill(~kept, float('-inf'))
@A(E,'W','ties at the cut dropped (scatter)')
def tp_w3(logits, p):
    s, idx = logits.sort(-1, descending=True); pr = s.softmax(-1)
    kept = (pr.cumsum(-1) - pr) < p
    return torch.full_like(logits, float('-inf')).scatter(-1, idx, s.masked_fill(~kept, float('-inf')))
@A(E,'W','probs > (1-p) threshold')
def tp_w4(logits, p):
    pr = logits.softmax(-1); return logits.masked_fill(pr < (1 - p) * pr.amax(-1, keepdim=True) * 0 + (1 - p) / logits.size(-1), float('-inf'))
@A(E,'W','cumsum in float32 for half (sum in other dtype)')
def tp_w5(logits, p):
    s = logits.sort(-1, descending=True).values; pr = s.float().softmax(-1)
    kept = (pr.cumsum(-1) - pr) < p
    low = s.masked_fill(~kept, float('inf')).amin(-1, keepdim=True)
    return logits.masked_fill(logits < low, float('-inf'))
generics(E, tp_r, ['idcache', 'buffer'])
E='cached_self_attention'
@A(E,'R','cat on dim 2, offset causal mask')
def ca_r(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params['w_q'], params.get('b_q')), num_heads)
    k = split_heads(linear(x, params['w_k'], params.get('b_k')), num_heads)
    v = split_heads(linear(x, params['w_v'], params.get('b_v')), num_heads)
    if cache is not None:
        k = torch.cat([cache['key'], k], 2); v = torch.cat([cache['value'], v], 2)
    Ln, Lt = x.size(1), k.size(2)
    mask = torch.ones(Ln, Lt, dtype=torch.bool).tril(Lt - Ln)
    c, _ = sdpa(q, k, v, mask)
    return linear(merge_heads(c), params['w_o'], params.get('b_o')), {'key': k, 'value': v}
@A(E,'W','no mask')
def ca_w1(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params['w_q'], params.get('b_q')), num_heads)
    k = split_heads(linear(x, params['w_k'], params.get('b_k')), num_heads); v = split_heads(linear(x, params['w_v'], params.get('b_v')), num_heads)
    if cache is not None: k = torch.cat([cache['key'], k], 2); v = torch.cat([cache['value'], v], 2)
    c, _ = sdpa(q, k, v)
    return linear(merge_heads(c), params['w_o'], params.get('b_o')), {'key': k, 'value': v}
@A(E,'W','causal_mask(L_new) on the new part only, past all visible... wrong offset (tril(0))')
def ca_w2(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params['w_q'], params.get('b_q')), num_heads)
    k = split_heads(linear(x, params['w_k'], params.get('b_k')), num_heads); v = split_heads(linear(x, params['w_v'], params.get('b_v')), num_heads)
    if cache is not None: k = torch.cat([cache['key'], k], 2); v = torch.cat([cache['value'], v], 2)
    mask = torch.ones(x.size(1), k.size(2), dtype=torch.bool).tril(0)
    c, _ = sdpa(q, k, v, mask)
    return linear(merge_heads(c), params['w_o'], params.get('b_o')), {'key': k, 'value': v}
@A(E,'W','cat on dim 1')
def ca_w3(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params['w_q'], params.get('b_q')), num_heads)
    k = split_heads(linear(x, params['w_k'], params.get('b_k')), num_heads); v = split_heads(linear(x, params['w_v'], params.get('b_v')), num_heads)
    if cache is not None: k = torch.cat([cache['key'], k], 1); v = torch.cat([cache['value'], v], 1)
    c, _ = sdpa(q, k, v, torch.ones(x.size(1), k.size(2), dtype=torch.bool).tril(k.size(2) - x.size(1)))
    return linear(merge_heads(c), params['w_o'], params.get('b_o')), {'key': k, 'value': v}
@A(E,'W','cache returned without the new tokens')
def ca_w4(x, params, num_heads, cache=None):
    out, new = ca_r(x, params, num_heads, cache)
    return out, (cache if cache is not None else new)
@A(E,'W','cache extended in place (dict mutated)')
def ca_w5(x, params, num_heads, cache=None):
    out, new = ca_r(x, params, num_heads, cache)
    if cache is not None: cache.update(new); return out, cache
    return out, new
generics(E, ca_r, ['f32', 'idcache'])
E='lm_step'
from tfmlib import cached_self_attention as ca_lib
def _lm_step(params, ids, config, caches=None, start=None, counter=None):
    if start is None: start = 0 if caches is None else caches[0]['key'].size(2)
    T = params['token_embedding']
    x = T[ids] * math.sqrt(T.size(1)) + params['position_embedding'][start:start + ids.size(1)]
    new = []
    for i, b in enumerate(params['blocks']):
        h = _n(x, b['norm1']); a, c = ca_r(h, b['attention'], config.num_heads, None if caches is None else caches[i])
        x = x + a; x = x + ffn_lib(_n(x, b['norm2']), b['ffn']); new.append(c)
    return _n(x, params['final_norm']) @ T.T, new
@A(E,'R','positions continue from cache length')
def lm_r(params, ids, config, caches=None): return _lm_step(params, ids, config, caches)
@A(E,'W','positions restart at 0')
def lm_w1(params, ids, config, caches=None): return _lm_step(params, ids, config, caches, start=0)
@A(E,'W','module-level position counter')
def _mklm():
    st = {'pos': 0}
    def f(params, ids, config, caches=None):
        if caches is None: st['pos'] = 0
        r = _lm_step(params, ids, config, caches, start=st['pos']); st['pos'] += ids.size(1); return r
    return f
ANS[-1] = (E, 'W', 'module-level position counter (reset when caches None)', _mklm())
@A(E,'W','one cache shared by all blocks')
def lm_w3(params, ids, config, caches=None):
    T = params['token_embedding']; start = 0 if caches is None else caches[0]['key'].size(2)
    x = T[ids] * math.sqrt(T.size(1)) + params['position_embedding'][start:start + ids.size(1)]
    new = []
    for i, b in enumerate(params['blocks']):
        h = _n(x, b['norm1']); a, c = ca_r(h, b['attention'], config.num_heads, None if caches is None else caches[0])
        x = x + a; x = x + ffn_lib(_n(x, b['norm2']), b['ffn']); new.append(c)
    return _n(x, params['final_norm']) @ T.T, new
@A(E,'W','no sqrt(D)')
def lm_w4(params, ids, config, caches=None):
    T = params['token_embedding']
    P = dict(params); P['token_embedding'] = T
    logits, c = _lm_step(params, ids, config, caches)
    start = 0 if caches is None else caches[0]['key'].size(2)
    x = T[ids] + params['position_embedding'][start:start + ids.size(1)]
    new = []
    for i, b in enumerate(params['blocks']):
        h = _n(x, b['norm1']); a, cc = ca_r(h, b['attention'], config.num_heads, None if caches is None else caches[i])
        x = x + a; x = x + ffn_lib(_n(x, b['norm2']), b['ffn']); new.append(cc)
    return _n(x, params['final_norm']) @ T.T, new
generics(E, lm_r, ['f32', 'idcache'])
