import functools, io, contextlib, sys, time, math, traceback
import torch
from tfmlib.exercises import check
ANS = []
def A(ex, expect, label):
    def deco(fn):
        ANS.append((ex, expect, label, fn)); return fn
    return deco
def tensors_map(out, f):
    if isinstance(out, torch.Tensor): return f(out)
    if isinstance(out, tuple): return tuple(tensors_map(o, f) for o in out)
    if isinstance(out, list): return [tensors_map(o, f) for o in out]
    if isinstance(out, dict): return {k: tensors_map(v, f) for k, v in out.items()}
    return out
# generic mistakes, applied to a right answer
def W_f32(fn):
    @functools.wraps(fn)
    def g(*a, **k): return tensors_map(fn(*a, **k), lambda t: t.float() if t.is_floating_point() else t)
    return g
def W_f64(fn):
    @functools.wraps(fn)
    def g(*a, **k): return tensors_map(fn(*a, **k), lambda t: t.double() if t.is_floating_point() else t)
    return g
def W_mutate(fn):   # computes, then changes its first tensor input in place (e.g. x += ...)
    @functools.wraps(fn)
    def g(*a, **k):
        out = fn(*a, **k)
        for t in a:
            if isinstance(t, torch.Tensor):
                with torch.no_grad():
                    if t.is_floating_point(): t.mul_(1.5)
                    elif t.dtype == torch.bool: t.logical_not_()
                    else: t.add_(0)  # ints: nothing sensible
                break
        return out
    return g
def W_idcache(fn):
    cache = {}
    @functools.wraps(fn)
    def g(*a, **k):
        key = tuple(id(x) for x in a)
        if key not in cache: cache[key] = fn(*a, **k)
        return cache[key]
    return g
def W_shapecache(fn):   # global cache keyed by shapes and scalars, not values
    cache = {}
    @functools.wraps(fn)
    def g(*a, **k):
        key = tuple((tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else repr(x)[:50] for x in a) + tuple(sorted(k.items()))
        key = repr(key)
        if key not in cache: cache[key] = fn(*a, **k)
        return cache[key]
    return g
def W_buffer(fn):   # returns a view of a persistent buffer of its own
    buf = {}
    @functools.wraps(fn)
    def g(*a, **k):
        out = fn(*a, **k)
        if isinstance(out, torch.Tensor):
            b = buf.get('b')
            if b is None or b.numel() < out.numel() or b.dtype != out.dtype:
                b = buf['b'] = torch.empty(out.numel() * 2, dtype=out.dtype)
            v = b[:out.numel()].view(out.shape); v.copy_(out); return v
        return out
    return g
def W_counter(fn):   # a module-level counter: from the 3rd call on, returns the 1st call's output
    st = {'n': 0}
    @functools.wraps(fn)
    def g(*a, **k):
        st['n'] += 1
        if st['n'] == 1: st['first'] = fn(*a, **k)
        if st['n'] >= 3: return st['first']
        return fn(*a, **k)
    return g
def W_const(value):
    def g(*a, **k): return value() if callable(value) else value
    return g
GENERIC = {'f32': W_f32, 'f64': W_f64, 'mutate': W_mutate, 'idcache': W_idcache,
           'shapecache': W_shapecache, 'buffer': W_buffer, 'counter': W_counter}
def generics(ex, right, which):
    for w in which:
        A(ex, 'W', 'generic:' + w)(GENERIC[w](right))

def run(only=None):
    rows = []
    for ex, expect, label, fn in ANS:
        if only and ex not in only: continue
        buf = io.StringIO(); t0 = time.time()
        try:
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                r = check(ex, fn)
            msg = str(r)
        except BaseException as e:
            msg = '[CRASH] ' + repr(e)[:300]
        got = 'PASS' if msg.startswith('[PASS]') else 'FAIL'
        ok = (got == 'PASS') == (expect == 'R')
        rows.append((ex, expect, label, got, ok, msg.replace('\n', ' | ')[:400], time.time() - t0))
        print(f"{'ok ' if ok else 'BAD'} {ex:30s} {expect} {got} {label:40s} {msg.splitlines()[0][:150] if msg else ''}", flush=True)
    return rows
