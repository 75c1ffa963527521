"""tfmlib's reference functions beside PyTorch's own: attention, multi-head attention,
an encoder layer, and one Adam step.

Each benchmark first checks that both sides compute the same numbers (so the
comparison is of equal work), then times them interleaved with `timing.compare`.
"""
from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

import tfmlib
from tfmlib.training import ModelConfig, init_model, parameters

from .timing import FULL, Comparison, Settings, compare

SDPA_LENGTHS = (64, 128, 256, 512, 1024)


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _gradient_fn(forward, inputs):
    """A no-argument callable: forward, then the gradients of every input (autograd.grad,
    so nothing accumulates in .grad from one call to the next)."""
    def run():
        out = forward()
        return torch.autograd.grad(out, inputs, run.grad_out)
    run.grad_out = None
    return run


# ---- scaled dot-product attention -----------------------------------------------------------

def sdpa(lengths=SDPA_LENGTHS, batch: int = 8, heads: int = 8, d_k: int = 64,
         settings: Settings = FULL) -> list[Comparison]:
    """tfmlib.scaled_dot_product_attention vs F.scaled_dot_product_attention, no mask, float32."""
    rows = []
    for length in lengths:
        g = _generator(length)
        q, k, v = (torch.randn(batch, heads, length, d_k, generator=g) for _ in range(3))
        ours, _ = tfmlib.scaled_dot_product_attention(q, k, v)
        torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v),
                                   atol=1e-4, rtol=1e-4)
        size = f"L={length}"
        with torch.no_grad():
            timings = compare({"tfmlib": lambda: tfmlib.scaled_dot_product_attention(q, k, v),
                               "torch": lambda: F.scaled_dot_product_attention(q, k, v)}, settings)
        rows.append(Comparison("attention", "forward", size, "F.scaled_dot_product_attention",
                               timings["tfmlib"], timings["torch"]))

        qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
        grad_out = torch.randn(batch, heads, length, d_k, generator=g)
        ours = _gradient_fn(lambda: tfmlib.scaled_dot_product_attention(qg, kg, vg)[0], (qg, kg, vg))
        theirs = _gradient_fn(lambda: F.scaled_dot_product_attention(qg, kg, vg), (qg, kg, vg))
        ours.grad_out = theirs.grad_out = grad_out
        for a, b in zip(ours(), theirs()):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
        timings = compare({"tfmlib": ours, "torch": theirs}, settings)
        rows.append(Comparison("attention", "forward+backward", size,
                               "F.scaled_dot_product_attention", timings["tfmlib"], timings["torch"]))
    return rows


def sdpa_causal(batch: int = 8, heads: int = 8, length: int = 256, d_k: int = 64,
                settings: Settings = FULL) -> list[Comparison]:
    """Forward+backward with a causal mask, as a decoder trains: tfmlib vs F.sdpa given the same
    bool mask (True = may attend), float32."""
    g = _generator(1)
    q, k, v = (torch.randn(batch, heads, length, d_k, generator=g).requires_grad_() for _ in range(3))
    mask = tfmlib.causal_mask(length)                                  # (1, 1, L, L)
    grad_out = torch.randn(batch, heads, length, d_k, generator=g)
    ours = _gradient_fn(lambda: tfmlib.scaled_dot_product_attention(q, k, v, mask)[0], (q, k, v))
    theirs = _gradient_fn(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), (q, k, v))
    ours.grad_out = theirs.grad_out = grad_out
    for a, b in zip(ours(), theirs()):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    timings = compare({"tfmlib": ours, "torch": theirs}, settings)
    return [Comparison("attention, causal mask", "forward+backward",
                       f"B={batch} H={heads} L={length} d_k={d_k}",
                       "F.scaled_dot_product_attention(attn_mask=mask)",
                       timings["tfmlib"], timings["torch"])]


# ---- multi-head attention and the encoder layer ---------------------------------------------

def _batch_with_padding(batch: int, length: int, d_model: int, seed: int = 0):
    """x (B, L, D), and the same padding two ways: tfmlib's (B, 1, 1, L) "may attend" mask and
    PyTorch's (B, L) key_padding_mask (True = ignore). Lengths run from L/2 to L."""
    g = _generator(seed)
    x = torch.randn(batch, length, d_model, generator=g)
    lengths = torch.linspace(length // 2, length, batch).round().long()      # (B,)
    real = torch.arange(length)[None, :] < lengths[:, None]                  # (B, L)
    return x, real[:, None, None, :], ~real, real


def _check_same(ours: torch.Tensor, theirs: torch.Tensor, real: torch.Tensor) -> None:
    """Equal on the real (unpadded) positions; PyTorch's fast paths may leave padded rows alone."""
    torch.testing.assert_close(ours[real], theirs[real], atol=1e-4, rtol=1e-4)


def mha(batch: int = 8, length: int = 128, d_model: int = 256, heads: int = 8,
        settings: Settings = FULL) -> list[Comparison]:
    """tfmlib.multi_head_attention vs nn.MultiheadAttention (batch_first, same weights, padding)."""
    torch.manual_seed(0)
    module = nn.MultiheadAttention(d_model, heads, dropout=0.0, batch_first=True).eval()
    params = tfmlib.params_from_torch(module)
    x, mask, key_padding, real = _batch_with_padding(batch, length, d_model)
    size = f"B={batch} L={length} D={d_model} H={heads}"

    def ours_fwd():
        return tfmlib.multi_head_attention(x, x, x, params, heads, mask)

    def torch_weights():   # the same outputs as tfmlib: the output and every head's weights
        return module(x, x, x, key_padding_mask=key_padding, need_weights=True,
                      average_attn_weights=False)

    def torch_fast():      # PyTorch's fastest call: no weights, fused "fast path" in eval
        return module(x, x, x, key_padding_mask=key_padding, need_weights=False)

    rows = []
    with torch.no_grad():
        out, weights = ours_fwd()
        ref_out, ref_weights = torch_weights()
        _check_same(out, ref_out, real)
        _check_same(weights.transpose(1, 2), ref_weights.transpose(1, 2), real)   # (B, L, H, L)
        _check_same(out, torch_fast()[0], real)
        t = compare({"tfmlib": ours_fwd, "weights": torch_weights, "fast": torch_fast}, settings)
    rows.append(Comparison("multi-head attention", "forward", size,
                           "nn.MultiheadAttention, need_weights=True (per head)",
                           t["tfmlib"], t["weights"]))
    rows.append(Comparison("multi-head attention", "forward", size,
                           "nn.MultiheadAttention, need_weights=False (fused fast path)",
                           t["tfmlib"], t["fast"]))

    xg = x.clone().requires_grad_()
    ours_params = {name: p.clone().requires_grad_() for name, p in params.items()}
    grad_out = torch.randn(batch, length, d_model, generator=_generator(1))
    ours = _gradient_fn(lambda: tfmlib.multi_head_attention(xg, xg, xg, ours_params, heads, mask)[0],
                        [xg, *ours_params.values()])
    inputs = [xg, *module.parameters()]
    theirs_w = _gradient_fn(lambda: module(xg, xg, xg, key_padding_mask=key_padding, need_weights=True,
                                           average_attn_weights=False)[0], inputs)
    theirs_f = _gradient_fn(lambda: module(xg, xg, xg, key_padding_mask=key_padding,
                                           need_weights=False)[0], inputs)
    for fn in (ours, theirs_w, theirs_f):
        fn.grad_out = grad_out
    torch.testing.assert_close(ours()[0], theirs_f()[0], atol=1e-4, rtol=1e-4)   # d loss / d x
    t = compare({"tfmlib": ours, "weights": theirs_w, "fast": theirs_f}, settings)
    rows.append(Comparison("multi-head attention", "forward+backward", size,
                           "nn.MultiheadAttention, need_weights=True (per head)",
                           t["tfmlib"], t["weights"]))
    rows.append(Comparison("multi-head attention", "forward+backward", size,
                           "nn.MultiheadAttention, need_weights=False (F.sdpa inside)",
                           t["tfmlib"], t["fast"]))
    return rows


def encoder_layer(batch: int = 8, length: int = 128, d_model: int = 256, heads: int = 8,
                  d_ff: int = 1024, settings: Settings = FULL) -> list[Comparison]:
    """tfmlib.encoder_layer vs nn.TransformerEncoderLayer: Post-LN, ReLU, dropout 0, eval."""
    torch.manual_seed(0)
    module = nn.TransformerEncoderLayer(d_model, heads, d_ff, dropout=0.0, batch_first=True).eval()
    params = tfmlib.params_from_torch(module)
    x, mask, key_padding, real = _batch_with_padding(batch, length, d_model)
    size = f"B={batch} L={length} D={d_model} H={heads} d_ff={d_ff}"

    def ours_fwd():
        return tfmlib.encoder_layer(x, params, heads, mask)

    def torch_fast():      # the default in eval without grad: one fused C++ call
        return module(x, src_key_padding_mask=key_padding)

    def torch_plain():     # the same Python path as in training (fast path switched off)
        before = torch.backends.mha.get_fastpath_enabled()
        torch.backends.mha.set_fastpath_enabled(False)
        try:
            return module(x, src_key_padding_mask=key_padding)
        finally:
            torch.backends.mha.set_fastpath_enabled(before)

    rows = []
    with torch.no_grad():
        out = ours_fwd()
        _check_same(out, torch_fast(), real)
        _check_same(out, torch_plain(), real)
        t = compare({"tfmlib": ours_fwd, "fast": torch_fast, "plain": torch_plain}, settings)
    rows.append(Comparison("encoder layer", "forward", size,
                           "nn.TransformerEncoderLayer (eval fast path, fused)",
                           t["tfmlib"], t["fast"]))
    rows.append(Comparison("encoder layer", "forward", size,
                           "nn.TransformerEncoderLayer, fast path off",
                           t["tfmlib"], t["plain"]))

    xg = x.clone().requires_grad_()
    ours_params = copy.deepcopy(params)
    ours_leaves = parameters(ours_params)
    for p in ours_leaves:
        p.requires_grad_()
    grad_out = torch.randn(batch, length, d_model, generator=_generator(1))
    ours = _gradient_fn(lambda: tfmlib.encoder_layer(xg, ours_params, heads, mask),
                        [xg, *ours_leaves])
    theirs = _gradient_fn(lambda: module(xg, src_key_padding_mask=key_padding),
                          [xg, *module.parameters()])
    ours.grad_out = theirs.grad_out = grad_out
    torch.testing.assert_close(ours()[0], theirs()[0], atol=1e-4, rtol=1e-4)      # d loss / d x
    t = compare({"tfmlib": ours, "torch": theirs}, settings)
    rows.append(Comparison("encoder layer", "forward+backward", size,
                           "nn.TransformerEncoderLayer", t["tfmlib"], t["torch"]))
    return rows


# ---- Adam -----------------------------------------------------------------------------------

# Two layers per stack at D=64: 90 tensors, 168,590 numbers. Notebook 10's model had this size
# until its recipe shrank it; the row keeps it so that results stay comparable across runs.
ADAM_CONFIG = ModelConfig(d_model=64, num_heads=4, d_ff=128, num_layers=2)


def adam(config: ModelConfig = ADAM_CONFIG, settings: Settings = FULL) -> list[Comparison]:
    """One tfmlib.adam_step vs one torch.optim.Adam step (foreach=False and True) on the
    parameters of an encoder-decoder of the course, with fixed random gradients."""
    base = parameters(init_model(config, _generator(0)))
    g = _generator(1)
    grads = [torch.randn(p.shape, generator=g) for p in base]

    def fresh():
        params = [p.detach().clone().requires_grad_() for p in base]
        for p, grad in zip(params, grads):
            p.grad = grad.clone()
        return params

    lr = 1e-3
    ours_params, loop_params, foreach_params = fresh(), fresh(), fresh()
    state = tfmlib.adam_init(ours_params)
    loop = torch.optim.Adam(loop_params, lr=lr, foreach=False)
    foreach = torch.optim.Adam(foreach_params, lr=lr, foreach=True)
    for _ in range(3):                       # same numbers after a few steps: the same update
        tfmlib.adam_step(ours_params, state, lr=lr)
        loop.step()
        foreach.step()
    for a, b, c in zip(ours_params, loop_params, foreach_params):
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(a, c)

    count = sum(p.numel() for p in base)
    size = f"{len(base)} tensors, {count:,} numbers"
    t = compare({"tfmlib": lambda: tfmlib.adam_step(ours_params, state, lr=lr),
                 "loop": loop.step, "foreach": foreach.step}, settings)
    return [Comparison("Adam step", "one step", size, "torch.optim.Adam(foreach=False)",
                       t["tfmlib"], t["loop"]),
            Comparison("Adam step", "one step", size, "torch.optim.Adam(foreach=True)",
                       t["tfmlib"], t["foreach"])]


def quick_sizes() -> dict:
    """Smaller sizes for `--quick` (the same code paths)."""
    return {"sdpa": dict(lengths=(64, 128, 256)), "sdpa_causal": dict(length=64),
            "mha": dict(length=64),
            "encoder_layer": dict(length=64)}


def scale_check(rows: list[Comparison]) -> dict:
    """Slope of log(time) against log(L) between the two longest lengths, per implementation
    and pass: about 2 when the L x L score matrix dominates."""
    slopes = {}
    for what in ("forward", "forward+backward"):
        picked = [r for r in rows if r.group == "attention" and r.what == what]
        if len(picked) < 2:
            continue
        a, b = picked[-2], picked[-1]
        la, lb = (int(r.size.split("=")[1]) for r in (a, b))
        for side in ("tfmlib", "torch"):
            ta, tb = getattr(a, side).median, getattr(b, side).median
            slopes[(what, side)] = math.log(tb / ta) / math.log(lb / la)
    return slopes
