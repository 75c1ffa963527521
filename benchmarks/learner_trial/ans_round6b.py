# Round 6b of the blind learner trial: notebooks 08_encoder_decoder, 09_adam, 10_training and
# bonus/b2_generation. Answers written from the notebooks' exercise texts and tfmlib's public
# functions only. 'R' = right on every input the exercise's contract allows (checked against the
# reference in a scratch script, /tmp/r6b/verify.py); 'W' = a mistake a learner could make.
import math

import torch
import torch.nn.functional as F

from harness import *
from tfmlib import (adam_step, causal_mask, embed, encoder_layer, feed_forward, layer_norm, linear,
                    merge_heads, multi_head_attention, scaled_dot_product_attention, split_heads)
from tfmlib.training import ModelConfig, decode_target, encode_source

NEG_INF = float("-inf")


# ---- helpers a learner writes once and reuses -------------------------------------------------

def ln(x, norm, eps=1e-5):
    return layer_norm(x, norm["gamma"], norm["beta"], eps)


def ln_by_hand(x, norm, eps=1e-5, unbiased=False):
    mean = x.mean(dim=-1, keepdim=True)
    centred = x - mean
    n = x.size(-1) - (1 if unbiased else 0)
    var = (centred * centred).sum(dim=-1, keepdim=True) / n
    return centred / torch.sqrt(var + eps) * norm["gamma"] + norm["beta"]


def softmax_by_hand(s):
    """softmax over the last axis; a row with no finite score gets zeros (fully masked)."""
    top = s.amax(dim=-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    e = torch.exp(s - top)
    total = e.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, e / torch.where(total > 0, total, torch.ones_like(total)), torch.zeros_like(e))


def mha_einsum(q_in, kv_in, p, num_heads, mask, fill=NEG_INF, scale_by=None, split="reshape"):
    """Multi-head attention written with einsum; keys and values both from kv_in."""
    B, Lq, D = q_in.shape
    Lk = kv_in.size(1)
    dk = D // num_heads

    def proj(t, w, b):
        y = torch.einsum("bld,ed->ble", t, w)
        return y if b is None else y + b

    def heads(t, L):
        if split == "view_straight":   # the classic slip: reshape straight to (B, H, L, dk)
            return t.reshape(B, num_heads, L, dk).transpose(1, 2)
        return t.reshape(B, L, num_heads, dk)

    q = heads(proj(q_in, p["w_q"], p.get("b_q")), Lq)       # (B, Lq, H, dk)
    k = heads(proj(kv_in, p["w_k"], p.get("b_k")), Lk)
    v = heads(proj(kv_in, p["w_v"], p.get("b_v")), Lk)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(dk if scale_by is None else scale_by)
    if mask is not None:
        s = s.masked_fill(~mask, fill)
    w = softmax_by_hand(s)
    ctx = torch.einsum("bhqk,bkhd->bqhd", w, v).reshape(B, Lq, D)
    return proj(ctx, p["w_o"], p.get("b_o"))


def params_to(params, dtype):
    return {k: ({kk: (None if vv is None else vv.to(dtype)) for kk, vv in v.items()}
                if isinstance(v, dict) else v) for k, v in params.items()}


# ================================================================================================
# 08 · encoder_layer(x, params, num_heads, mask=None)
# ================================================================================================

@A("encoder_layer", "R", "einsum MHA, hand LN and softmax")
def enc_layer_einsum(x, params, num_heads, mask=None):
    h = ln_by_hand(x + mha_einsum(x, x, params["self_attn"], num_heads, mask), params["norm1"])
    f = linear(torch.relu(linear(h, params["ffn"]["w_1"], params["ffn"]["b_1"])),
               params["ffn"]["w_2"], params["ffn"]["b_2"])
    return ln_by_hand(h + f, params["norm2"])


@A("encoder_layer", "R", "float64 inside, cast back")
def enc_layer_f64(x, params, num_heads, mask=None):
    p64 = params_to(params, torch.float64)
    x64 = x.double()
    a, _ = multi_head_attention(x64, x64, x64, p64["self_attn"], num_heads, mask)
    h = ln(x64 + a, p64["norm1"])
    return ln(h + feed_forward(h, p64["ffn"]), p64["norm2"]).to(x.dtype)


@A("encoder_layer", "R", "per-head loop with scaled_dot_product_attention")
def enc_layer_headloop(x, params, num_heads, mask=None):
    p = params["self_attn"]
    D = x.size(-1)
    dk = D // num_heads
    q, k, v = (linear(x, p["w_" + n], p.get("b_" + n)) for n in "qkv")
    outs = []
    for h in range(num_heads):
        cut = slice(h * dk, (h + 1) * dk)
        m = None if mask is None else mask[:, h:h + 1] if mask.size(1) > 1 else mask
        if m is not None and m.dim() == 4:
            m = m[:, 0]                                  # (B or 1, Lq or 1, Lk)
        ctx, _ = scaled_dot_product_attention(q[..., cut], k[..., cut], v[..., cut], m)
        outs.append(ctx)
    a = linear(torch.cat(outs, dim=-1), p["w_o"], p.get("b_o"))
    h1 = ln(x + a, params["norm1"])
    return ln(h1 + feed_forward(h1, params["ffn"]), params["norm2"])


def _enc_layer_std(x, params, num_heads, mask=None):
    a, _ = multi_head_attention(x, x, x, params["self_attn"], num_heads, mask)
    h = ln(x + a, params["norm1"])
    return ln(h + feed_forward(h, params["ffn"]), params["norm2"])


@A("encoder_layer", "W", "FFN reads x instead of h")
def enc_layer_ffn_x(x, params, num_heads, mask=None):
    a, _ = multi_head_attention(x, x, x, params["self_attn"], num_heads, mask)
    h = ln(x + a, params["norm1"])
    return ln(h + feed_forward(x, params["ffn"]), params["norm2"])


@A("encoder_layer", "W", "Pre-LN instead of Post-LN")
def enc_layer_preln(x, params, num_heads, mask=None):
    n = ln(x, params["norm1"])
    h = x + multi_head_attention(n, n, n, params["self_attn"], num_heads, mask)[0]
    return h + feed_forward(ln(h, params["norm2"]), params["ffn"])


@A("encoder_layer", "W", "masked_fill -1e9: fully masked row averages values")
def enc_layer_fill_1e9(x, params, num_heads, mask=None):
    fill = -1e9 if x.dtype in (torch.float32, torch.float64) else torch.finfo(x.dtype).min
    h = ln(x + mha_einsum(x, x, params["self_attn"], num_heads, mask, fill=fill), params["norm1"])
    return ln(h + feed_forward(h, params["ffn"]), params["norm2"])


@A("encoder_layer", "W", "mask transposed: hides padded queries not keys")
def enc_layer_mask_T(x, params, num_heads, mask=None):
    m = None if mask is None else mask.transpose(-1, -2)
    a, _ = multi_head_attention(x, x, x, params["self_attn"], num_heads, m)
    h = ln(x + a, params["norm1"])
    return ln(h + feed_forward(h, params["ffn"]), params["norm2"])


@A("encoder_layer", "W", "first sample's mask for the whole batch")
def enc_layer_mask_first(x, params, num_heads, mask=None):
    m = None if mask is None else mask[:1]
    a, _ = multi_head_attention(x, x, x, params["self_attn"], num_heads, m)
    h = ln(x + a, params["norm1"])
    return ln(h + feed_forward(h, params["ffn"]), params["norm2"])


@A("encoder_layer", "W", "heads split straight to (B,H,L,dk)")
def enc_layer_split_straight(x, params, num_heads, mask=None):
    h = ln(x + mha_einsum(x, x, params["self_attn"], num_heads, mask, split="view_straight"),
           params["norm1"])
    return ln(h + feed_forward(h, params["ffn"]), params["norm2"])


@A("encoder_layer", "W", "scores scaled by sqrt(D) not sqrt(d_k)")
def enc_layer_scale_D(x, params, num_heads, mask=None):
    h = ln(x + mha_einsum(x, x, params["self_attn"], num_heads, mask, scale_by=x.size(-1)),
           params["norm1"])
    return ln(h + feed_forward(h, params["ffn"]), params["norm2"])


@A("encoder_layer", "W", "hand LayerNorm with unbiased variance")
def enc_layer_unbiased(x, params, num_heads, mask=None):
    a, _ = multi_head_attention(x, x, x, params["self_attn"], num_heads, mask)
    h = ln_by_hand(x + a, params["norm1"], unbiased=True)
    return ln_by_hand(h + feed_forward(h, params["ffn"]), params["norm2"], unbiased=True)


@A("encoder_layer", "W", "hand LayerNorm eps=1e-3")
def enc_layer_eps(x, params, num_heads, mask=None):
    a, _ = multi_head_attention(x, x, x, params["self_attn"], num_heads, mask)
    h = ln_by_hand(x + a, params["norm1"], eps=1e-3)
    return ln_by_hand(h + feed_forward(h, params["ffn"]), params["norm2"], eps=1e-3)


@A("encoder_layer", "W", "one LayerNorm (norm1) for both sublayers")
def enc_layer_one_norm(x, params, num_heads, mask=None):
    a, _ = multi_head_attention(x, x, x, params["self_attn"], num_heads, mask)
    h = ln(x + a, params["norm1"])
    return ln(h + feed_forward(h, params["ffn"]), params["norm1"])


@A("encoder_layer", "W", "residual added in place into x (x += attn)")
def enc_layer_inplace(x, params, num_heads, mask=None):
    a, _ = multi_head_attention(x, x, x, params["self_attn"], num_heads, mask)
    with torch.no_grad():
        x += a
    h = ln(x, params["norm1"])
    return ln(h + feed_forward(h, params["ffn"]), params["norm2"])


@A("encoder_layer", "W", "float16 input: attention computed in float16 with -1e4 fill on scores")
def enc_layer_half_fill(x, params, num_heads, mask=None):
    # -1e4 is the usual 'safe' half-precision fill; a masked score of -1e4 still gets weight when
    # every score of the row is near -1e4, and rows fully masked average the values
    h = ln(x + mha_einsum(x, x, params["self_attn"], num_heads, mask, fill=-1e4), params["norm1"])
    return ln(h + feed_forward(h, params["ffn"]), params["norm2"])


generics("encoder_layer", _enc_layer_std, ["f32", "f64", "mutate", "idcache", "buffer", "counter"])


# ================================================================================================
# 08 · encoder(x, layers, num_heads, mask=None)
# ================================================================================================

@A("encoder", "R", "functools.reduce over layers")
def enc_reduce(x, layers, num_heads, mask=None):
    import functools
    return functools.reduce(lambda h, p: encoder_layer(h, p, num_heads, mask), layers, x)


@A("encoder", "R", "recursion, own layer")
def enc_recursive(x, layers, num_heads, mask=None):
    layers = list(layers)
    if not layers:
        return x
    return enc_recursive(_enc_layer_std(x, layers[0], num_heads, mask), layers[1:], num_heads, mask)


@A("encoder", "R", "index loop, all-True mask dropped")
def enc_index(x, layers, num_heads, mask=None):
    if mask is not None and bool(mask.all()):
        mask = None                     # a mask that hides nothing is no mask
    hidden = x
    for i in range(len(layers)):
        hidden = encoder_layer(hidden, layers[i], num_heads, mask)
    return hidden


@A("encoder", "W", "every layer reads x")
def enc_x(x, layers, num_heads, mask=None):
    out = x
    for p in layers:
        out = encoder_layer(x, p, num_heads, mask)
    return out


@A("encoder", "W", "layers in reverse order")
def enc_reversed(x, layers, num_heads, mask=None):
    h = x
    for p in reversed(layers):
        h = encoder_layer(h, p, num_heads, mask)
    return h


@A("encoder", "W", "mask only for the first layer")
def enc_mask_once(x, layers, num_heads, mask=None):
    h = x
    for i, p in enumerate(layers):
        h = encoder_layer(h, p, num_heads, mask if i == 0 else None)
    return h


@A("encoder", "W", "same params twice counted once (dedupe by id)")
def enc_dedupe(x, layers, num_heads, mask=None):
    h = x
    for p in {id(p): p for p in layers}.values():
        h = encoder_layer(h, p, num_heads, mask)
    return h


@A("encoder", "W", "empties the caller's list (pop(0))")
def enc_pop(x, layers, num_heads, mask=None):
    h = x
    while layers:
        h = encoder_layer(h, layers.pop(0), num_heads, mask)
    return h


@A("encoder", "W", "hard-coded 3 layers (the notebook's stack)")
def enc_three(x, layers, num_heads, mask=None):
    h = x
    for i in range(min(3, len(layers))):
        h = encoder_layer(h, layers[i], num_heads, mask)
    return h


@A("encoder", "W", "extra final LayerNorm with the last layer's norm2")
def enc_final_norm(x, layers, num_heads, mask=None):
    h = x
    for p in layers:
        h = encoder_layer(h, p, num_heads, mask)
    return ln(h, layers[-1]["norm2"])


@A("encoder", "W", "skips the first layer (layers[1:])")
def enc_skip_first(x, layers, num_heads, mask=None):
    h = encoder_layer(x, layers[0], num_heads, mask) if len(layers) == 1 else x
    for p in layers[1:]:
        h = encoder_layer(h, p, num_heads, mask)
    return h


def _enc_std(x, layers, num_heads, mask=None):
    h = x
    for p in layers:
        h = encoder_layer(h, p, num_heads, mask)
    return h


generics("encoder", _enc_std, ["f32", "mutate", "idcache", "buffer", "counter"])


# ================================================================================================
# 08 · decoder_layer(x, memory, params, num_heads, self_mask=None, memory_mask=None)
# ================================================================================================

@A("decoder_layer", "R", "einsum MHA, hand LN")
def dec_layer_einsum(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    h1 = ln_by_hand(x + mha_einsum(x, x, params["self_attn"], num_heads, self_mask), params["norm1"])
    h2 = ln_by_hand(h1 + mha_einsum(h1, memory, params["cross_attn"], num_heads, memory_mask),
                    params["norm2"])
    return ln_by_hand(h2 + feed_forward(h2, params["ffn"]), params["norm3"])


@A("decoder_layer", "R", "float64 inside, sublayers in a table")
def dec_layer_table(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    p = params_to(params, torch.float64)
    h, mem = x.double(), memory.double()
    sublayers = [
        ("norm1", lambda t: multi_head_attention(t, t, t, p["self_attn"], num_heads, self_mask)[0]),
        ("norm2", lambda t: multi_head_attention(t, mem, mem, p["cross_attn"], num_heads, memory_mask)[0]),
        ("norm3", lambda t: feed_forward(t, p["ffn"])),
    ]
    for norm, f in sublayers:
        h = ln(h + f(h), p[norm])
    return h.to(x.dtype)


def _dec_std(x, memory, params, num_heads, self_mask=None, memory_mask=None, *, q_from=None,
             kv="memory", cross_mask="memory", cross_params="cross_attn", norms=("norm1", "norm2", "norm3")):
    a, _ = multi_head_attention(x, x, x, params["self_attn"], num_heads, self_mask)
    h1 = ln(x + a, params[norms[0]])
    q = h1 if q_from is None else x
    kvt = memory if kv == "memory" else h1
    m = {"memory": memory_mask, "self": self_mask, "none": None}[cross_mask]
    c, _ = multi_head_attention(q, kvt, kvt, params[cross_params], num_heads, m)
    h2 = ln(h1 + c, params[norms[1]])
    return ln(h2 + feed_forward(h2, params["ffn"]), params[norms[2]])


@A("decoder_layer", "W", "cross-attention queries from x, not h1")
def dec_q_x(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    return _dec_std(x, memory, params, num_heads, self_mask, memory_mask, q_from="x")


@A("decoder_layer", "W", "cross-attention without memory_mask")
def dec_no_mem_mask(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    return _dec_std(x, memory, params, num_heads, self_mask, memory_mask, cross_mask="none")


@A("decoder_layer", "W", "cross-attention uses self_attn's params")
def dec_shared_attn(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    return _dec_std(x, memory, params, num_heads, self_mask, memory_mask, cross_params="self_attn")


@A("decoder_layer", "W", "norm2 and norm3 swapped")
def dec_norm_swap(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    return _dec_std(x, memory, params, num_heads, self_mask, memory_mask, norms=("norm1", "norm3", "norm2"))


@A("decoder_layer", "W", "causal mask added when self_mask is None")
def dec_default_causal(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    if self_mask is None:
        self_mask = causal_mask(x.size(1))
    return _dec_std(x, memory, params, num_heads, self_mask, memory_mask)


@A("decoder_layer", "W", "first sample's memory_mask for the whole batch")
def dec_mem_mask_b0(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    m = None if memory_mask is None else memory_mask[:1]
    return _dec_std(x, memory, params, num_heads, self_mask, m)


@A("decoder_layer", "W", "memory normalised in place with norm2 first")
def dec_mem_inplace(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    with torch.no_grad():
        memory.copy_(ln(memory, params["norm2"]))
    return _dec_std(x, memory, params, num_heads, self_mask, memory_mask)


@A("decoder_layer", "W", "FFN residual from h1 (skips the cross sublayer's output)")
def dec_ffn_h1(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    a, _ = multi_head_attention(x, x, x, params["self_attn"], num_heads, self_mask)
    h1 = ln(x + a, params["norm1"])
    c, _ = multi_head_attention(h1, memory, memory, params["cross_attn"], num_heads, memory_mask)
    h2 = ln(h1 + c, params["norm2"])
    return ln(h1 + feed_forward(h2, params["ffn"]), params["norm3"])


@A("decoder_layer", "W", "masked_fill -1e9 in both attentions")
def dec_fill(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    fill = -1e9 if x.dtype in (torch.float32, torch.float64) else torch.finfo(x.dtype).min
    h1 = ln(x + mha_einsum(x, x, params["self_attn"], num_heads, self_mask, fill=fill), params["norm1"])
    h2 = ln(h1 + mha_einsum(h1, memory, params["cross_attn"], num_heads, memory_mask, fill=fill),
            params["norm2"])
    return ln(h2 + feed_forward(h2, params["ffn"]), params["norm3"])


def _dec_plain(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    return _dec_std(x, memory, params, num_heads, self_mask, memory_mask)


generics("decoder_layer", _dec_plain, ["f32", "f64", "mutate", "idcache", "buffer", "counter"])


# ================================================================================================
# 09 · adam = (adam_init, adam_step)
# ================================================================================================

def adam_init_plain(parameters):
    ps = list(parameters)
    return {"t": 0, "m": [torch.zeros_like(p) for p in ps], "v": [torch.zeros_like(p) for p in ps]}


def adam_step_torch_grouping(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    """PyTorch's grouping: denominator sqrt(v) / sqrt(1 - b2^t) + eps, step lr / (1 - b1^t)."""
    b1, b2 = betas
    state["t"] += 1
    t = state["t"]
    bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
    with torch.no_grad():
        for p, m, v in zip(parameters, state["m"], state["v"]):
            if p.grad is None:
                continue
            m.lerp_(p.grad, 1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad.conj(), value=1 - b2)
            denom = (v.sqrt() / math.sqrt(bc2)).add_(eps)
            p.addcdiv_(m, denom, value=-lr / bc1)


A("adam", "R", "torch.optim.Adam's grouping, lerp_ for m")((adam_init_plain, adam_step_torch_grouping))


def adam_init_dictcomp(parameters):
    ps = list(parameters)
    zeros = lambda: [p.detach().new_zeros(p.shape) for p in ps]
    return dict(t=0, m=zeros(), v=zeros())


def adam_step_float64(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    """Moments kept in the state's dtype, the step's arithmetic in float64, then copied back."""
    b1, b2 = betas
    state["t"] = state["t"] + 1
    t = state["t"]
    with torch.no_grad():
        for i, p in enumerate(parameters):
            g = p.grad
            if g is None:
                continue
            m_new = b1 * state["m"][i].double() + (1 - b1) * g.double()
            v_new = b2 * state["v"][i].double() + (1 - b2) * g.double() ** 2
            state["m"][i].copy_(m_new)
            state["v"][i].copy_(v_new)
            m_hat = m_new / (1 - b1 ** t)
            v_hat = v_new / (1 - b2 ** t)
            p.copy_(p.double() - lr * m_hat / (v_hat.sqrt() + eps))


A("adam", "R", "float64 arithmetic, copy_ back")((adam_init_dictcomp, adam_step_float64))


def adam_step_ref_like(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, *, t_per_param=False,
                       eps_in_sqrt=False, no_bias_corr=False, decay_none=False, eps_unscaled=False,
                       grad_inplace=False):
    b1, b2 = betas
    if not t_per_param:
        state["t"] += 1
    with torch.no_grad():
        for p, m, v in zip(parameters, state["m"], state["v"]):
            if decay_none and p.grad is None:
                m.mul_(b1)
                v.mul_(b2)
                continue
            if p.grad is None:
                continue
            if t_per_param:
                state["t"] += 1
            t = state["t"]
            g = p.grad
            m.mul_(b1).add_(g, alpha=1 - b1)
            if grad_inplace:
                v.mul_(b2).add_(g.pow_(2), alpha=1 - b2)    # squares the gradient itself
            else:
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
            if no_bias_corr:
                m_hat, v_hat = m, v
            else:
                m_hat, v_hat = m / (1 - b1 ** t), v / (1 - b2 ** t)
            if eps_in_sqrt:
                p.sub_(lr * m_hat / (v_hat + eps).sqrt())
            elif eps_unscaled:   # Kingma & Ba's 'efficient' form: eps not corrected
                lr_t = lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
                p.sub_(lr_t * m / (v.sqrt() + eps))
            else:
                p.sub_(lr * m_hat / (v_hat.sqrt() + eps))


def _adam_variant(label, init=adam_init_plain, **kw):
    A("adam", "W", label)((init, lambda *a, **k: adam_step_ref_like(*a, **k, **kw)))


_adam_variant("t counted once per parameter", t_per_param=True)
_adam_variant("no bias correction", no_bias_corr=True)
_adam_variant("eps inside the sqrt", eps_in_sqrt=True)
_adam_variant("gradient squared in place (p.grad.pow_)", grad_inplace=True)
_adam_variant("moments decayed for params without grad", decay_none=True)
_adam_variant("Kingma-Ba efficient form: eps not bias-corrected", eps_unscaled=True)


def adam_init_shared_list(parameters):
    ps = list(parameters)
    return {"t": 0, "m": [torch.zeros_like(ps[0])] * len(ps) if all(p.shape == ps[0].shape for p in ps)
            else [torch.zeros_like(p) for p in ps],
            "v": [torch.zeros_like(p) for p in ps]}


_adam_variant("[zeros] * n when every shape is equal", init=adam_init_shared_list)


def adam_init_per_shape(parameters):
    """'one zeros tensor per shape is enough': m and v shared by parameters of equal shape."""
    ps = list(parameters)
    zeros_m, zeros_v = {}, {}
    return {"t": 0,
            "m": [zeros_m.setdefault(tuple(p.shape), torch.zeros_like(p)) for p in ps],
            "v": [zeros_v.setdefault(tuple(p.shape), torch.zeros_like(p)) for p in ps]}


_adam_variant("moments shared by parameters of equal shape", init=adam_init_per_shape)


def adam_init_float32(parameters):
    ps = list(parameters)
    return {"t": 0, "m": [torch.zeros(p.shape) for p in ps], "v": [torch.zeros(p.shape) for p in ps]}


_adam_variant("moments always float32 (torch.zeros(p.shape))", init=adam_init_float32)

_ADAM_GLOBAL = {}


def adam_step_global(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    """m and v in a module dict keyed by id(p); state['t'] counted properly."""
    b1, b2 = betas
    state["t"] += 1
    t = state["t"]
    with torch.no_grad():
        for p in parameters:
            if p.grad is None:
                continue
            m, v = _ADAM_GLOBAL.setdefault(id(p), (torch.zeros_like(p), torch.zeros_like(p)))
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))


A("adam", "W", "m, v in a module dict keyed by id(p)")((adam_init_plain, adam_step_global))


def adam_step_grad_f32(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
    """The gradient cast to float32 'to be safe': float64 parameters lose precision."""
    b1, b2 = betas
    state["t"] += 1
    t = state["t"]
    with torch.no_grad():
        for p, m, v in zip(parameters, state["m"], state["v"]):
            if p.grad is None:
                continue
            g = p.grad.to(torch.float32)           # 'to be safe' in float32
            m.copy_(b1 * m + (1 - b1) * g)
            v.copy_(b2 * v + (1 - b2) * g * g)
            p.sub_(lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps))


A("adam", "W", "gradient cast to float32 before the moments")((adam_init_plain, adam_step_grad_f32))


# ================================================================================================
# 09 · sgd_step(parameters, lr)
# ================================================================================================

@A("sgd_step", "R", "p.add_(grad, alpha=-lr)")
def sgd_alpha(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.add_(p.grad, alpha=-lr)


@A("sgd_step", "R", "float64 arithmetic, copy_ back")
def sgd_f64(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.copy_(p.double() - lr * p.grad.double())


@A("sgd_step", "R", "torch._foreach_add_ on the ones with a grad")
def sgd_foreach(parameters, lr):
    ps = [p for p in parameters if p.grad is not None]
    if ps:
        with torch.no_grad():
            torch._foreach_add_(ps, [p.grad for p in ps], alpha=-lr)


@A("sgd_step", "W", "scales p.grad in place first")
def sgd_grad_inplace(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.grad.mul_(lr)
                p.sub_(p.grad)


@A("sgd_step", "W", "sign flipped (gradient ascent)")
def sgd_ascent(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.add_(p.grad, alpha=lr)


_VEL = {}


@A("sgd_step", "W", "momentum 0.9 kept in a module dict")
def sgd_momentum(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                v = _VEL.setdefault(id(p), torch.zeros_like(p))
                v.mul_(0.9).add_(p.grad)
                p.sub_(lr * v)



@A("sgd_step", "W", "returns after the first parameter")
def sgd_first_only(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.sub_(lr * p.grad)
                return


@A("sgd_step", "W", "nan_to_num on the gradient ('defensive')")
def sgd_nan_to_num(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.sub_(lr * torch.nan_to_num(p.grad))


@A("sgd_step", "W", "update rounded through float16")
def sgd_half(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.sub_((lr * p.grad).half().to(p.dtype))


@A("sgd_step", "W", "update computed in float32 (float64 params lose precision)")
def sgd_f32(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.copy_(p.float() - lr * p.grad.float())


@A("sgd_step", "W", "lr clamped to 1 ('safety')")
def sgd_clamp_lr(parameters, lr):
    lr = min(lr, 1.0)
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.sub_(lr * p.grad)


# ================================================================================================
# 09 · adamw_step(parameters, state, lr, betas, eps, weight_decay=1e-2)
# ================================================================================================

@A("adamw_step", "R", "decay by add_(p, alpha=-lr*wd), then library adam_step")
def adamw_add(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    parameters = list(parameters)
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.add_(p, alpha=-lr * weight_decay)
    adam_step(parameters, state, lr, betas, eps)


@A("adamw_step", "R", "own Adam, update computed first, decay folded into one sub_")
def adamw_folded(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    b1, b2 = betas
    state["t"] += 1
    t = state["t"]
    with torch.no_grad():
        for p, m, v in zip(parameters, state["m"], state["v"]):
            if p.grad is None:
                continue
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            update = (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps)
            p.mul_(1 - lr * weight_decay).sub_(lr * update)


def _adamw(parameters, state, lr, betas, eps, weight_decay, *, only_matrices=False, pass_hyper=True,
           decay_all=False):
    parameters = list(parameters)
    with torch.no_grad():
        for p in parameters:
            if (p.grad is not None or decay_all) and (p.dim() > 1 or not only_matrices):
                p.mul_(1 - lr * weight_decay)
    if pass_hyper:
        adam_step(parameters, state, lr, betas, eps)
    else:
        adam_step(parameters, state, lr)


@A("adamw_step", "W", "no decay on biases and norms (dim < 2)")
def adamw_matrices(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    _adamw(parameters, state, lr, betas, eps, weight_decay, only_matrices=True)


@A("adamw_step", "W", "betas and eps not passed to adam_step")
def adamw_nohyper(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    _adamw(parameters, state, lr, betas, eps, weight_decay, pass_hyper=False)


@A("adamw_step", "W", "default weight_decay 0.1")
def adamw_default(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1):
    _adamw(parameters, state, lr, betas, eps, weight_decay)


@A("adamw_step", "W", "decay by (1 - weight_decay) ** lr")
def adamw_pow(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    parameters = list(parameters)
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.mul_((1 - weight_decay) ** lr)
    adam_step(parameters, state, lr, betas, eps)


@A("adamw_step", "W", "decay uses the gradient's sign (p -= lr*wd*sign(p)) L1-style")
def adamw_l1(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    parameters = list(parameters)
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.sub_(lr * weight_decay * p.sign())
    adam_step(parameters, state, lr, betas, eps)


@A("adamw_step", "W", "decay once per call only from the 2nd step (t > 0 check)")
def adamw_skip_first(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    parameters = list(parameters)
    if state["t"] > 0:                      # 'nothing to decay before the first step'
        with torch.no_grad():
            for p in parameters:
                if p.grad is not None:
                    p.mul_(1 - lr * weight_decay)
    adam_step(parameters, state, lr, betas, eps)


@A("adamw_step", "R", "Adam step first, then subtract lr*wd*p_old (the same numbers)")
def adamw_after_old(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    parameters = list(parameters)
    old = [p.detach().clone() for p in parameters]
    adam_step(parameters, state, lr, betas, eps)
    with torch.no_grad():
        for p, o in zip(parameters, old):
            if p.grad is not None:
                p.sub_(lr * weight_decay * o)


# ================================================================================================
# 09 · clip_grad_norm(parameters, max_norm)
# ================================================================================================

def _grads(parameters):
    ps = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    return [p.grad for p in ps if p.grad is not None]


@A("clip_grad_norm", "R", "torch.cat of flattened grads, norm in float64, cast back")
def clip_cat64(parameters, max_norm):
    grads = _grads(parameters)
    if not grads:
        return torch.tensor(0.0)
    flat = torch.cat([g.reshape(-1).double() for g in grads])
    total = flat.square().sum().sqrt()
    scale = min(1.0, max_norm / (total.item() + 1e-6))
    for g in grads:
        g.mul_(scale)
    return total.to(grads[0].dtype)


@A("clip_grad_norm", "R", "running sum of per-tensor norms squared, torch.where for the factor")
def clip_loop(parameters, max_norm):
    grads = _grads(parameters)
    if not grads:
        return torch.tensor(0.0)
    norms = [torch.linalg.vector_norm(g) for g in grads]
    total = torch.linalg.vector_norm(torch.stack(norms))
    factor = max_norm / (total.double() + 1e-6)        # float64: 1 / (norm + 1e-6) overflows float16
    factor = torch.where(factor < 1, factor, torch.ones_like(factor)).to(total.dtype)
    for g in grads:
        g.mul_(factor)
    return total


@A("clip_grad_norm", "W", "sum of squares in the grads' own dtype")
def clip_sq_native(parameters, max_norm):
    grads = _grads(parameters)
    if not grads:
        return torch.tensor(0.0)
    total = sum((g * g).sum() for g in grads).sqrt()
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(scale)
    return total


@A("clip_grad_norm", "W", "single tensor iterated row by row")
def clip_rows(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(scale)
    return total


@A("clip_grad_norm", "W", "eps under the root: sqrt(sum + 1e-6)")
def clip_eps_root(parameters, max_norm):
    grads = _grads(parameters)
    if not grads:
        return torch.tensor(0.0)
    sq = sum(torch.linalg.vector_norm(g) ** 2 for g in grads)
    total = sq.sqrt()
    scale = torch.clamp(max_norm / (sq + 1e-6).sqrt(), max=1.0)
    for g in grads:
        g.mul_(scale)
    return total


@A("clip_grad_norm", "W", "no grads: returns torch.tensor(0) (int64)")
def clip_zero_int(parameters, max_norm):
    grads = _grads(parameters)
    if not grads:
        return torch.tensor(0)
    return clip_loop(parameters, max_norm)


@A("clip_grad_norm", "W", "returns the norm after clipping")
def clip_after(parameters, max_norm):
    grads = _grads(parameters)
    if not grads:
        return torch.tensor(0.0)
    clip_loop(parameters, max_norm)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))


@A("clip_grad_norm", "W", "factor max_norm / max(norm, 1e-6)")
def clip_max_eps(parameters, max_norm):
    grads = _grads(parameters)
    if not grads:
        return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = torch.clamp(max_norm / total.clamp_min(1e-6), max=1.0)
    for g in grads:
        g.mul_(scale)
    return total


@A("clip_grad_norm", "W", "replaces .grad with a new tensor (not in place)")
def clip_rebind(parameters, max_norm):
    ps = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    grads = [p.grad for p in ps if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for p in ps:
        if p.grad is not None:
            p.grad = p.grad * scale
    return total


@A("clip_grad_norm", "W", "returns a Python float")
def clip_float(parameters, max_norm):
    return float(clip_loop(parameters, max_norm))


@A("clip_grad_norm", "W", "L1 norm instead of L2")
def clip_l1(parameters, max_norm):
    grads = _grads(parameters)
    if not grads:
        return torch.tensor(0.0)
    total = sum(g.abs().sum() for g in grads)
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(scale)
    return total


@A("clip_grad_norm", "W", "returns one module buffer, overwritten by the next call")
def clip_alias(parameters, max_norm):
    grads = _grads(parameters)
    if not grads:
        return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(scale)
    # 'no new tensor per call': the norm copied into one module-level 0-dim buffer
    return _CLIP_BUF.setdefault("b", torch.zeros(())).copy_(total) if total.dtype == torch.float32 else total


_CLIP_BUF = {}


# ================================================================================================
# 09 · warmup_inverse_sqrt_lr(step, d_model, warmup_steps, factor=1.0)
# ================================================================================================

@A("warmup_inverse_sqrt_lr", "R", "piecewise if/else with math.sqrt")
def wis_piecewise(step, d_model, warmup_steps, factor=1.0):
    if step == 0:
        return 0.0
    if step < warmup_steps:
        return factor / math.sqrt(d_model) * step / warmup_steps ** 1.5
    return factor / math.sqrt(d_model) / math.sqrt(step)


@A("warmup_inverse_sqrt_lr", "R", "lru_cache'd pure function")
@__import__("functools").lru_cache(maxsize=None)
def wis_cached(step, d_model, warmup_steps, factor=1.0):
    if step == 0:
        return 0.0
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)



@A("warmup_inverse_sqrt_lr", "R", "log-space: exp of sums of logs")
def wis_log(step, d_model, warmup_steps, factor=1.0):
    if step == 0 or factor == 0:
        return 0.0
    a = -0.5 * math.log(step)
    b = math.log(step) - 1.5 * math.log(warmup_steps)
    return factor * math.exp(-0.5 * math.log(d_model) + min(a, b))


@A("warmup_inverse_sqrt_lr", "W", "step 0 -> value at step 1 (max(step, 1))")
def wis_max1(step, d_model, warmup_steps, factor=1.0):
    step = max(step, 1)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


@A("warmup_inverse_sqrt_lr", "W", "counts from 0 like LambdaLR (step + 1)")
def wis_plus1(step, d_model, warmup_steps, factor=1.0):
    s = step + 1
    return 0.0 if step == 0 else factor * d_model ** -0.5 * min(s ** -0.5, s * warmup_steps ** -1.5)


@A("warmup_inverse_sqrt_lr", "W", "warm-up exponent -0.5")
def wis_exp(step, d_model, warmup_steps, factor=1.0):
    if step == 0:
        return 0.0
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -0.5)


@A("warmup_inverse_sqrt_lr", "W", "factor ignored")
def wis_nofactor(step, d_model, warmup_steps, factor=1.0):
    if step == 0:
        return 0.0
    return d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


@A("warmup_inverse_sqrt_lr", "W", "d_model hard-coded 512")
def wis_512(step, d_model, warmup_steps, factor=1.0):
    if step == 0:
        return 0.0
    return factor * 512 ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


@A("warmup_inverse_sqrt_lr", "W", "max instead of min")
def wis_max(step, d_model, warmup_steps, factor=1.0):
    if step == 0:
        return 0.0
    return factor * d_model ** -0.5 * max(step ** -0.5, step * warmup_steps ** -1.5)


@A("warmup_inverse_sqrt_lr", "W", "computed in float16 tensors")
def wis_half(step, d_model, warmup_steps, factor=1.0):
    if step == 0:
        return 0.0
    s = torch.tensor(float(step), dtype=torch.float16)
    val = factor * d_model ** -0.5 * torch.minimum(s ** -0.5, s * float(warmup_steps) ** -1.5)
    return float(val)


@A("warmup_inverse_sqrt_lr", "W", "warm-up in integer steps: step // warmup * peak")
def wis_intdiv(step, d_model, warmup_steps, factor=1.0):
    if step == 0:
        return 0.0
    if step < warmup_steps:
        return factor * d_model ** -0.5 * warmup_steps ** -0.5 * (step // warmup_steps)
    return factor * d_model ** -0.5 * step ** -0.5


# ================================================================================================
# 09 · warmup_cosine_lr(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1)
# ================================================================================================

@A("warmup_cosine_lr", "R", "cos^2 form of the half cosine")
def wc_cos2(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    if step >= total_steps:
        return final_fraction * peak_lr
    x = (step - warmup_steps) / (total_steps - warmup_steps)
    return peak_lr * (final_fraction + (1 - final_fraction) * math.cos(math.pi * x / 2) ** 2)


@A("warmup_cosine_lr", "R", "lerp from the floor, clamp of the progress")
def wc_lerp(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return step / warmup_steps * peak_lr
    floor = final_fraction * peak_lr
    span = max(total_steps - warmup_steps, 1)
    progress = min(max((step - warmup_steps) / span, 0.0), 1.0)
    return floor + (peak_lr - floor) * (1 + math.cos(math.pi * progress)) / 2


@A("warmup_cosine_lr", "W", "no clamp: cosine rises again after total_steps")
def wc_noclamp(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    x = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * x)))


@A("warmup_cosine_lr", "W", "'<' warm-up, divides by total - warmup")
def wc_lt(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step < warmup_steps:
        return peak_lr * step / warmup_steps
    if step >= total_steps and total_steps > warmup_steps:
        return final_fraction * peak_lr
    x = (step - warmup_steps) / (total_steps - warmup_steps)
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * x)))


@A("warmup_cosine_lr", "W", "progress over total_steps, not the decay span")
def wc_total(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    x = min(1.0, (step - warmup_steps) / total_steps)
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * x)))


@A("warmup_cosine_lr", "W", "final_fraction hard-coded 0.1")
def wc_ff(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    x = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * x)))


@A("warmup_cosine_lr", "W", "warm-up counts from step + 1")
def wc_plus1(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    x = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * x)))


@A("warmup_cosine_lr", "W", "decay to 0, then final_fraction * peak after total")
def wc_to_zero(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    if step >= total_steps:
        return final_fraction * peak_lr
    x = (step - warmup_steps) / (total_steps - warmup_steps)
    return peak_lr * 0.5 * (1 + math.cos(math.pi * x))


@A("warmup_cosine_lr", "W", "span total - warmup - 1 (off by one)")
def wc_span_m1(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    x = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps - 1))
    return peak_lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * x)))


@A("warmup_cosine_lr", "W", "linear decay instead of cosine")
def wc_linear(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    x = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * (1 - (1 - final_fraction) * x)


# ================================================================================================
# 10 · shift_right(tgt)
# ================================================================================================

@A("shift_right", "R", "narrow")
def sr_narrow(tgt):
    n = tgt.size(1) - 1
    return tgt.narrow(1, 0, n), tgt.narrow(1, 1, n)


@A("shift_right", "R", "index_select with aranges, cloned")
def sr_index(tgt):
    L = tgt.size(1)
    idx = torch.arange(L, device=tgt.device)
    return tgt.index_select(1, idx[:-1]).clone(), tgt.index_select(1, idx[1:]).clone()


@A("shift_right", "R", "unbind columns and stack")
def sr_unbind(tgt):
    cols = tgt.unbind(dim=1)
    return torch.stack(cols[:-1], dim=1), torch.stack(cols[1:], dim=1)


@A("shift_right", "W", "batch axis shifted (tgt[:-1], tgt[1:])")
def sr_batch(tgt):
    return tgt[:-1], tgt[1:]


@A("shift_right", "W", "<eos> in the decoder input replaced by <pad>")
def sr_no_eos(tgt):
    tgt_in = tgt[:, :-1].clone()
    tgt_in[tgt_in == 2] = 0
    return tgt_in, tgt[:, 1:]


@A("shift_right", "W", "squeeze() first: 1-D outputs for a batch of one")
def sr_squeeze(tgt):
    t = tgt.squeeze()
    return t[..., :-1], t[..., 1:]


@A("shift_right", "W", "swapped: (labels, decoder input)")
def sr_swapped(tgt):
    return tgt[:, 1:], tgt[:, :-1]


@A("shift_right", "W", "ids cast to int32")
def sr_int32(tgt):
    return tgt[:, :-1].int(), tgt[:, 1:].int()


@A("shift_right", "W", "<eos> blanked in place in tgt")
def sr_inplace(tgt):
    labels = tgt[:, 1:].clone()
    tgt[tgt == 2] = 0
    return tgt[:, :-1], labels


@A("shift_right", "W", "decoder input rebuilt: <bos> + labels[:, :-1] with BOS id 1")
def sr_rebuild(tgt):
    labels = tgt[:, 1:]
    bos = torch.full_like(tgt[:, :1], 1)
    return torch.cat([bos, labels[:, :-1]], dim=1), labels


@A("shift_right", "W", "trailing all-pad columns trimmed")
def sr_trim(tgt):
    tgt_in, labels = tgt[:, :-1], tgt[:, 1:]
    keep = (labels != 0).any(dim=0)
    last = int(keep.nonzero().max()) + 1 if keep.any() else labels.size(1)
    return tgt_in[:, :last], labels[:, :last]


generics("shift_right", lambda tgt: (tgt[:, :-1], tgt[:, 1:]), ["idcache", "counter", "buffer"])


# ================================================================================================
# 10 · forward(params, src, tgt_in, config, training=False)
# ================================================================================================

@A("forward", "R", "the two halves, keyword arguments")
def fwd_kw(params, src, tgt_in, config, training=False):
    memory, src_mask = encode_source(params=params, src=src, config=config, training=training)
    return decode_target(params=params, tgt_in=tgt_in, memory=memory, src_mask=src_mask,
                         config=config, training=training)


@A("forward", "R", "halves via a tuple splat, bool(training)")
def fwd_splat(params, src, tgt_in, config, training=False):
    training = bool(training)
    return decode_target(params, tgt_in, *encode_source(params, src, config, training), config, training)


@A("forward", "W", "rebuilt from public pieces: ignores config.positional and config.scale_scores")
def fwd_manual(params, src, tgt_in, config, training=False):
    from tfmlib import (add_positional_encoding, decoder, encoder, padding_mask,
                        sinusoidal_positional_encoding, target_mask)
    table = params["embedding"]
    pe = sinusoidal_positional_encoding(config.max_len, config.d_model, dtype=table.dtype)
    opts = dict(norm_first=config.norm_first, dropout_p=config.dropout_p, training=training)
    src_mask = padding_mask(src, 0)
    memory = encoder(add_positional_encoding(embed(src, table), pe), params["encoder"], config.num_heads,
                     src_mask, final_norm=params["encoder_norm"], **opts)
    hidden = decoder(add_positional_encoding(embed(tgt_in, table), pe), memory, params["decoder"],
                     config.num_heads, target_mask(tgt_in, 0), src_mask,
                     final_norm=params["decoder_norm"], **opts)
    return hidden @ table.T + params["out_bias"]


@A("forward", "W", "rebuilt from public pieces: only layer 0 of each stack")
def fwd_manual_one_layer(params, src, tgt_in, config, training=False):
    return fwd_manual({**params, "encoder": params["encoder"][:1], "decoder": params["decoder"][:1]},
                      src, tgt_in, config, training)


@A("forward", "W", "rebuilt from public pieces: norm_first hard-coded True")
def fwd_manual_preln(params, src, tgt_in, config, training=False):
    import dataclasses
    return fwd_manual(params, src, tgt_in, dataclasses.replace(config, norm_first=True), training)


@A("forward", "W", "training not passed to encode_source")
def fwd_enc_eval(params, src, tgt_in, config, training=False):
    memory, src_mask = encode_source(params, src, config)
    return decode_target(params, tgt_in, memory, src_mask, config, training)


@A("forward", "W", "training not passed to decode_target")
def fwd_dec_eval(params, src, tgt_in, config, training=False):
    memory, src_mask = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, src_mask, config)


@A("forward", "W", "memory detached")
def fwd_detach(params, src, tgt_in, config, training=False):
    memory, src_mask = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory.detach(), src_mask, config, training)


@A("forward", "W", "encoder under no_grad in evaluation")
def fwd_nograd_eval(params, src, tgt_in, config, training=False):
    if training:
        memory, src_mask = encode_source(params, src, config, training)
    else:
        with torch.no_grad():                      # 'no training, no gradients'
            memory, src_mask = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, src_mask, config, training)


@A("forward", "W", "default config instead of the one given")
def fwd_default_cfg(params, src, tgt_in, config, training=False):
    cfg = ModelConfig(vocab_size=config.vocab_size, dropout_p=config.dropout_p)
    memory, src_mask = encode_source(params, src, cfg, training)
    return decode_target(params, tgt_in, memory, src_mask, cfg, training)


@A("forward", "W", "training defaults to True")
def fwd_train_default(params, src, tgt_in, config, training=True):
    memory, src_mask = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, src_mask, config, training)


@A("forward", "W", "source mask from tgt_in padding (decoder masks with target's pads)")
def fwd_wrong_mask(params, src, tgt_in, config, training=False):
    from tfmlib import padding_mask
    memory, src_mask = encode_source(params, src, config, training)
    if tgt_in.size(1) == src.size(1):
        src_mask = padding_mask(tgt_in, 0)
    return decode_target(params, tgt_in, memory, src_mask, config, training)


@A("forward", "W", "encoder run twice (memory and mask from separate calls)")
def fwd_twice(params, src, tgt_in, config, training=False):
    memory = encode_source(params, src, config, training)[0]
    src_mask = encode_source(params, src, config, training)[1]
    return decode_target(params, tgt_in, memory, src_mask, config, training)


@A("forward", "W", "decoder sees the whole target: mask from padding only (no causal)")
def fwd_no_causal(params, src, tgt_in, config, training=False):
    from tfmlib import decoder, padding_mask
    from tfmlib.training import embed_with_positions, attention_layers
    memory, src_mask = encode_source(params, src, config, training)
    y = embed_with_positions(params, tgt_in, config)
    hidden = decoder(y, memory, attention_layers(params, "decoder", config), config.num_heads,
                     self_mask=padding_mask(tgt_in, 0), memory_mask=src_mask,
                     final_norm=params["decoder_norm"], norm_first=config.norm_first,
                     dropout_p=config.dropout_p, training=training)
    return linear(hidden, params["embedding"], params["out_bias"])


generics("forward", fwd_kw, ["f32", "idcache", "counter", "buffer", "shapecache"])


# ================================================================================================
# 10 · label_smoothed_cross_entropy(logits, labels, smoothing, ignore_index=-100)
# ================================================================================================

@A("label_smoothed_cross_entropy", "R", "explicit smoothed target distribution, scatter")
def ls_target(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    lp = logits.log_softmax(dim=-1)
    kept = labels != ignore_index
    safe = torch.where(kept, labels, torch.zeros_like(labels))
    target = torch.full_like(lp, smoothing / V)
    target = target.scatter_add(-1, safe.unsqueeze(-1),
                                torch.full_like(lp[..., :1], 1 - smoothing))
    per = -(target * lp).sum(dim=-1)
    per = torch.where(kept, per, torch.zeros_like(per))
    return per.sum() / kept.sum()


@A("label_smoothed_cross_entropy", "R", "float64 inside, logsumexp by hand, boolean indexing")
def ls_f64(logits, labels, smoothing, ignore_index=-100):
    z = logits.double()
    lp = z - z.logsumexp(dim=-1, keepdim=True)
    kept = labels != ignore_index
    lp_k, lab_k = lp[kept], labels[kept]                 # (N, V), (N,)
    nll = -lp_k.gather(1, lab_k[:, None])[:, 0]
    smooth = -lp_k.mean(dim=1)
    return ((1 - smoothing) * nll + smoothing * smooth).mean().to(logits.dtype)


@A("label_smoothed_cross_entropy", "R", "flattened to (N, V), one_hot, dot with the target")
def ls_onehot(logits, labels, smoothing, ignore_index=-100):
    V = logits.size(-1)
    lp = logits.reshape(-1, V).log_softmax(dim=-1)
    lab = labels.reshape(-1)
    kept = lab != ignore_index
    onehot = F.one_hot(lab.clamp(0, V - 1), V).to(lp.dtype)
    target = (1 - smoothing) * onehot + smoothing / V
    per = -(target * lp).sum(dim=1) * kept
    return per.sum() / kept.sum()


def _ls(logits, labels, smoothing, ignore_index=-100, *, others_only=False, mean_all=False,
        sum_uniform=False, log_softmax=None, row_mean=False, detach_uniform=False):
    V = logits.size(-1)
    lp = log_softmax(logits) if log_softmax else logits.log_softmax(dim=-1)
    kept = labels != ignore_index
    safe = labels.masked_fill(~kept, 0)
    nll = -lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    if others_only:
        uni = -(lp.sum(-1) + nll) / max(V - 1, 1)      # mean of -log p over the other classes
    elif sum_uniform:
        uni = -lp.sum(-1)
    else:
        uni = -lp.mean(-1)
    if detach_uniform:
        uni = uni.detach()
    per = ((1 - smoothing) * nll + smoothing * uni).masked_fill(~kept, 0.0)
    if mean_all:
        return per.sum() / per.numel()
    if row_mean and per.dim() >= 2:
        flat, k = per.reshape(-1, per.size(-1)), kept.reshape(-1, kept.size(-1))
        return (flat.sum(-1) / k.sum(-1)).mean()
    return per.sum() / kept.sum()


@A("label_smoothed_cross_entropy", "W", "smoothing spread over the V-1 other classes")
def ls_others(logits, labels, smoothing, ignore_index=-100):
    return _ls(logits, labels, smoothing, ignore_index, others_only=True)


@A("label_smoothed_cross_entropy", "W", "mean over every position, ignored ones too")
def ls_mean_all(logits, labels, smoothing, ignore_index=-100):
    return _ls(logits, labels, smoothing, ignore_index, mean_all=True)


@A("label_smoothed_cross_entropy", "W", "uniform term summed, not averaged over V")
def ls_sum_uniform(logits, labels, smoothing, ignore_index=-100):
    return _ls(logits, labels, smoothing, ignore_index, sum_uniform=True)


@A("label_smoothed_cross_entropy", "W", "log(softmax) instead of log_softmax")
def ls_log_softmax(logits, labels, smoothing, ignore_index=-100):
    return _ls(logits, labels, smoothing, ignore_index, log_softmax=lambda z: z.softmax(-1).log())


@A("label_smoothed_cross_entropy", "W", "mean per row, then mean of rows")
def ls_row_mean(logits, labels, smoothing, ignore_index=-100):
    return _ls(logits, labels, smoothing, ignore_index, row_mean=True)


@A("label_smoothed_cross_entropy", "W", "uniform term detached (value right, gradient wrong)")
def ls_detach(logits, labels, smoothing, ignore_index=-100):
    return _ls(logits, labels, smoothing, ignore_index, detach_uniform=True)


@A("label_smoothed_cross_entropy", "W", "count clamped to 1: every position ignored gives 0, not nan")
def ls_clamp_count(logits, labels, smoothing, ignore_index=-100):
    lp = logits.log_softmax(dim=-1)
    kept = labels != ignore_index
    nll = -lp.gather(-1, labels.masked_fill(~kept, 0).unsqueeze(-1)).squeeze(-1)
    per = ((1 - smoothing) * nll - smoothing * lp.mean(-1)).masked_fill(~kept, 0.0)
    return per.sum() / kept.sum().clamp(min=1)


@A("label_smoothed_cross_entropy", "W", "ignore_index default 0 (the course's <pad>)")
def ls_default0(logits, labels, smoothing, ignore_index=0):
    return _ls(logits, labels, smoothing, ignore_index)


@A("label_smoothed_cross_entropy", "W", "class axis 1 (right only for 2-D logits)")
def ls_dim1(logits, labels, smoothing, ignore_index=-100):
    if logits.dim() < 2:
        return _ls(logits, labels, smoothing, ignore_index)
    V = logits.size(1)
    lp = logits.log_softmax(dim=1)
    kept = labels != ignore_index
    safe = labels.masked_fill(~kept, 0)
    if lp.dim() == 2:
        nll = -lp.gather(1, safe[:, None])[:, 0]
        uni = -lp.mean(1)
    else:
        nll = -lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
        uni = -lp.mean(-1)
    per = ((1 - smoothing) * nll + smoothing * uni).masked_fill(~kept, 0.0)
    return per.sum() / kept.sum()


@A("label_smoothed_cross_entropy", "W", "float32 inside for half logits, result left float32")
def ls_f32(logits, labels, smoothing, ignore_index=-100):
    return _ls(logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits,
               labels, smoothing, ignore_index)


generics("label_smoothed_cross_entropy", ls_target, ["f64", "idcache", "counter", "shapecache"])


# ================================================================================================
# b2 · next_token_probs(logits, temperature=1.0)
# ================================================================================================

@A("next_token_probs", "R", "hand softmax, max subtracted")
def ntp_hand(logits, temperature=1.0):
    z = logits / temperature
    z = z - z.amax(dim=-1, keepdim=True)
    e = z.exp()
    return e / e.sum(dim=-1, keepdim=True)


@A("next_token_probs", "R", "float64 exp(log_softmax), cast back")
def ntp_f64(logits, temperature=1.0):
    return torch.exp(torch.log_softmax(logits.double() / temperature, dim=-1)).to(logits.dtype)


@A("next_token_probs", "R", "softmax of logits * (1/T)")
def ntp_recip(logits, temperature=1.0):
    return torch.softmax(logits * (1.0 / temperature), dim=-1)


@A("next_token_probs", "W", "temperature multiplies")
def ntp_mul(logits, temperature=1.0):
    return torch.softmax(logits * temperature, dim=-1)


@A("next_token_probs", "W", "probabilities ** (1/T), renormalised")
def ntp_pow(logits, temperature=1.0):
    p = torch.softmax(logits, dim=-1) ** (1.0 / temperature)
    return p / p.sum(dim=-1, keepdim=True)


@A("next_token_probs", "W", "softmax over dim=1")
def ntp_dim1(logits, temperature=1.0):
    return torch.softmax(logits / temperature, dim=1 if logits.dim() > 1 else 0)


@A("next_token_probs", "W", "no max subtraction")
def ntp_nomax(logits, temperature=1.0):
    e = (logits / temperature).exp()
    return e / e.sum(dim=-1, keepdim=True)


@A("next_token_probs", "W", "divides the logits in place")
def ntp_inplace(logits, temperature=1.0):
    return torch.softmax(logits.div_(temperature), dim=-1)


@A("next_token_probs", "W", "default temperature 0.7")
def ntp_default(logits, temperature=0.7):
    return torch.softmax(logits / temperature, dim=-1)


@A("next_token_probs", "W", "-inf logits replaced by -1e9 'to avoid NaN'")
def ntp_neg(logits, temperature=1.0):
    z = torch.nan_to_num(logits, neginf=-1e9) / temperature
    return torch.softmax(z, dim=-1)


generics("next_token_probs", lambda logits, temperature=1.0: torch.softmax(logits / temperature, dim=-1),
         ["f32", "f64", "mutate", "idcache", "buffer", "counter"])


# ================================================================================================
# b2 · top_k_filter(logits, k)
# ================================================================================================

@A("top_k_filter", "R", "sort descending, threshold the k-th")
def tk_sort(logits, k):
    k = min(k, logits.size(-1))
    kth = logits.sort(dim=-1, descending=True).values[..., k - 1:k]
    return torch.where(logits >= kth, logits, torch.full_like(logits, NEG_INF))


@A("top_k_filter", "R", "kthvalue from the bottom")
def tk_kthvalue(logits, k):
    V = logits.size(-1)
    if k >= V:
        return logits.clone()
    kth = logits.kthvalue(V - k + 1, dim=-1, keepdim=True).values
    return logits.masked_fill(logits < kth, NEG_INF)


@A("top_k_filter", "R", "plain Python per row over a (N, V) view")
def tk_rows(logits, k):
    flat = logits.reshape(-1, logits.size(-1))
    out = flat.clone()
    for r in range(flat.size(0)):
        vals = sorted(flat[r].tolist(), reverse=True)
        kth = vals[min(k, len(vals)) - 1]
        for c, val in enumerate(flat[r].tolist()):
            if val < kth:
                out[r, c] = NEG_INF
    return out.reshape(logits.shape)


@A("top_k_filter", "W", "exactly k via topk indices (ties cut)")
def tk_indices(logits, k):
    k = min(k, logits.size(-1))
    idx = logits.topk(k, dim=-1).indices
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, idx, True)
    return logits.masked_fill(~keep, NEG_INF)


@A("top_k_filter", "W", "k-th largest distinct value")
def tk_distinct(logits, k):
    flat = logits.reshape(-1, logits.size(-1))
    out = flat.clone()
    for r in range(flat.size(0)):
        u = flat[r].unique(sorted=True).flip(0)
        kth = u[min(k, u.numel()) - 1]
        out[r] = out[r].masked_fill(flat[r] < kth, NEG_INF)
    return out.reshape(logits.shape)


@A("top_k_filter", "W", "threshold sorted[..., k] (off by one)")
def tk_off1(logits, k):
    V = logits.size(-1)
    if k >= V:
        return logits.clone()
    kth = logits.sort(dim=-1, descending=True).values[..., k:k + 1]
    return logits.masked_fill(logits <= kth, NEG_INF)


@A("top_k_filter", "W", "-1e9 instead of -inf")
def tk_1e9(logits, k):
    k = min(k, logits.size(-1))
    kth = logits.topk(k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, -1e9)


@A("top_k_filter", "W", "masked_fill_ on the input")
def tk_inplace(logits, k):
    k = min(k, logits.size(-1))
    kth = logits.topk(k, dim=-1).values[..., -1:]
    return logits.masked_fill_(logits < kth, NEG_INF)


@A("top_k_filter", "W", "threshold from the first row for every row")
def tk_first_row(logits, k):
    k = min(k, logits.size(-1))
    kth = logits.reshape(-1, logits.size(-1))[0].topk(k).values[-1]
    return logits.masked_fill(logits < kth, NEG_INF)


@A("top_k_filter", "W", "topk over dim=1")
def tk_dim1(logits, k):
    if logits.dim() < 3:
        return tk_sort(logits, k)
    k = min(k, logits.size(1))
    kth = logits.topk(k, dim=1).values[:, -1:]
    return logits.masked_fill(logits < kth, NEG_INF)


@A("top_k_filter", "W", "k > V not clamped: keeps only the max")
def tk_no_clamp(logits, k):
    V = logits.size(-1)
    kth = logits.sort(dim=-1, descending=True).values[..., (k - 1 if k <= V else 0):][..., :1]
    return logits.masked_fill(logits < kth, NEG_INF)


generics("top_k_filter", tk_sort, ["f32", "f64", "mutate", "idcache", "buffer", "counter"])


# ================================================================================================
# b2 · top_p_filter(logits, p)
# ================================================================================================

@A("top_p_filter", "R", "count kept, gather the threshold logit")
def tp_count(logits, p):
    s = logits.sort(dim=-1, descending=True).values
    probs = s.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs
    n = (before < p).sum(dim=-1, keepdim=True).clamp(min=1)        # a prefix; the top token always stays
    thresh = s.gather(-1, n - 1)
    return logits.masked_fill(logits < thresh, NEG_INF)


@A("top_p_filter", "R", "argsort, keep in sorted order, scatter back, extend ties")
def tp_scatter(logits, p):
    order = logits.argsort(dim=-1, descending=True)
    s = logits.gather(-1, order)
    probs = s.softmax(dim=-1)
    keep_sorted = (probs.cumsum(dim=-1) - probs) < p
    keep_sorted[..., 0] = True                                     # the most likely token always stays
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    lowest = logits.masked_fill(~keep, float("inf")).amin(dim=-1, keepdim=True)
    return torch.where(logits >= lowest, logits, torch.full_like(logits, NEG_INF))


@A("top_p_filter", "R", "running sum over the sorted row in a Python loop (logits' dtype)")
def tp_loop(logits, p):
    flat = logits.reshape(-1, logits.size(-1))
    out = flat.clone()
    for r in range(flat.size(0)):
        s = flat[r].sort(descending=True).values
        probs = s.softmax(dim=-1)
        cum = probs.cumsum(dim=-1) - probs
        n = max(1, int((cum < p).sum()))
        out[r] = out[r].masked_fill(flat[r] < s[n - 1], NEG_INF)
    return out.reshape(logits.shape)


def _tp(logits, p, *, rule="exclusive", ties=True, sorted_out=False, fill=NEG_INF, unsort="scatter"):
    s, order = logits.sort(dim=-1, descending=True)
    probs = s.softmax(dim=-1)
    cum = probs.cumsum(dim=-1)
    if rule == "exclusive":
        keep_sorted = cum - probs < p
    elif rule == "inclusive_le":
        keep_sorted = cum <= p
        keep_sorted[..., 0] = True
    elif rule == "inclusive_lt":
        keep_sorted = cum < p
        keep_sorted[..., 0] = True
    if sorted_out:
        return s.masked_fill(~keep_sorted, fill)
    if unsort == "scatter":
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    else:   # gather with the sort order: the inverse permutation is needed here
        keep = keep_sorted.gather(-1, order)
    if ties:
        lowest = logits.masked_fill(~keep, float("inf")).amin(dim=-1, keepdim=True)
        keep = logits >= lowest
    return logits.masked_fill(~keep, fill)


@A("top_p_filter", "W", "cumsum <= p (drops the token that reaches p)")
def tp_le(logits, p):
    return _tp(logits, p, rule="inclusive_le")


@A("top_p_filter", "W", "cumsum < p")
def tp_lt(logits, p):
    return _tp(logits, p, rule="inclusive_lt")


@A("top_p_filter", "W", "no tie extension")
def tp_noties(logits, p):
    return _tp(logits, p, ties=False)


@A("top_p_filter", "W", "unsorted with gather instead of scatter")
def tp_gather(logits, p):
    return _tp(logits, p, unsort="gather")


@A("top_p_filter", "W", "returned in sorted order")
def tp_sorted(logits, p):
    return _tp(logits, p, sorted_out=True)


@A("top_p_filter", "W", "-1e9 fill")
def tp_1e9(logits, p):
    return _tp(logits, p, fill=-1e9)


@A("top_p_filter", "W", "probabilities from exp without max subtraction")
def tp_nomax(logits, p):
    s = logits.sort(dim=-1, descending=True).values
    e = s.exp()
    probs = e / e.sum(dim=-1, keepdim=True)
    n = ((probs.cumsum(-1) - probs) < p).sum(-1, keepdim=True).clamp(min=1)
    return logits.masked_fill(logits < s.gather(-1, n - 1), NEG_INF)


@A("top_p_filter", "W", "in place on the input")
def tp_inplace(logits, p):
    out = _tp(logits, p)
    return logits.copy_(out)


@A("top_p_filter", "R", "float64 softmax and cumsum (sums more exact than the logits' dtype)")
def tp_f64sum(logits, p):
    s = logits.sort(dim=-1, descending=True).values
    probs = s.double().softmax(dim=-1)
    n = ((probs.cumsum(-1) - probs) < p).sum(-1, keepdim=True)
    return logits.masked_fill(logits < s.gather(-1, n - 1), NEG_INF)


generics("top_p_filter", tp_count, ["f32", "f64", "mutate", "idcache", "buffer", "counter"])


# ================================================================================================
# b2 · cached_self_attention(x, params, num_heads, cache=None)
# ================================================================================================

@A("cached_self_attention", "R", "einsum, fused QKV, arange causal mask, hand softmax")
def csa_einsum(x, params, num_heads, cache=None):
    B, Ln, D = x.shape
    dk = D // num_heads
    w = torch.cat([params["w_q"], params["w_k"], params["w_v"]], dim=0)           # (3D, D)
    bs = [params.get(n) for n in ("b_q", "b_k", "b_v")]
    qkv = torch.einsum("bld,ed->ble", x, w)
    if all(b is not None for b in bs):
        qkv = qkv + torch.cat(bs)
    elif any(b is not None for b in bs):
        qkv = qkv + torch.cat([torch.zeros(D, dtype=x.dtype) if b is None else b for b in bs])
    q, k, v = (t.reshape(B, Ln, num_heads, dk).permute(0, 2, 1, 3) for t in qkv.split(D, dim=-1))
    if cache is not None:
        k = torch.cat([cache["key"], k], dim=2)
        v = torch.cat([cache["value"], v], dim=2)
    Lt = k.size(2)
    past = Lt - Ln
    qpos = torch.arange(past, Lt)[:, None]
    kpos = torch.arange(Lt)[None, :]
    s = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(dk)
    s = s.masked_fill(kpos > qpos, NEG_INF)
    ctx = torch.einsum("bhqk,bhkd->bqhd", softmax_by_hand(s), v).reshape(B, Ln, D)
    out = torch.einsum("bld,ed->ble", ctx, params["w_o"])
    if params.get("b_o") is not None:
        out = out + params["b_o"]
    return out, {"key": k, "value": v}


@A("cached_self_attention", "R", "float64 attention, cast back; cache in x's dtype")
def csa_f64(x, params, num_heads, cache=None):
    k = split_heads(linear(x, params["w_k"], params.get("b_k")), num_heads)
    v = split_heads(linear(x, params["w_v"], params.get("b_v")), num_heads)
    q = split_heads(linear(x, params["w_q"], params.get("b_q")), num_heads)
    if cache is not None:
        k = torch.cat((cache["key"], k), dim=-2)
        v = torch.cat((cache["value"], v), dim=-2)
    Ln, Lt = x.size(1), k.size(2)
    mask = torch.ones(Ln, Lt, dtype=torch.bool).tril(diagonal=Lt - Ln)
    ctx, _ = scaled_dot_product_attention(q.double(), k.double(), v.double(), mask)
    out = linear(merge_heads(ctx.to(x.dtype)), params["w_o"], params.get("b_o"))
    return out, {"key": k, "value": v}


def _csa(x, params, num_heads, cache=None, *, mask_mode="last_rows", prepend=False,
         scale=None, mutate_cache=False, return_new_only=False):
    q = split_heads(linear(x, params["w_q"], params.get("b_q")), num_heads)
    k_new = split_heads(linear(x, params["w_k"], params.get("b_k")), num_heads)
    v_new = split_heads(linear(x, params["w_v"], params.get("b_v")), num_heads)
    k, v = k_new, v_new
    if cache is not None:
        if prepend:
            k = torch.cat([k_new, cache["key"]], dim=2)
            v = torch.cat([v_new, cache["value"]], dim=2)
        else:
            k = torch.cat([cache["key"], k_new], dim=2)
            v = torch.cat([cache["value"], v_new], dim=2)
    Ln, Lt = x.size(1), k.size(2)
    if mask_mode == "last_rows":
        mask = causal_mask(Lt)[:, :, -Ln:]
    elif mask_mode == "first_rows":
        mask = causal_mask(Lt)[:, :, :Ln]
    elif mask_mode == "none":
        mask = None
    elif mask_mode == "new_only":    # causal among the new tokens, past always visible... for Ln == Lt
        mask = causal_mask(Ln) if Ln == Lt else None
    if scale is not None:
        q = q * math.sqrt(q.size(-1)) / math.sqrt(scale)
    ctx, _ = scaled_dot_product_attention(q, k, v, mask)
    out = linear(merge_heads(ctx), params["w_o"], params.get("b_o"))
    if mutate_cache and cache is not None:
        cache["key"], cache["value"] = k, v
        return out, cache
    if return_new_only:
        return out, {"key": k_new, "value": v_new}
    return out, {"key": k, "value": v}


@A("cached_self_attention", "W", "no mask (one new token assumed)")
def csa_nomask(x, params, num_heads, cache=None):
    return _csa(x, params, num_heads, cache, mask_mode="none")


@A("cached_self_attention", "W", "causal mask's first rows, not its last")
def csa_first_rows(x, params, num_heads, cache=None):
    return _csa(x, params, num_heads, cache, mask_mode="first_rows")


@A("cached_self_attention", "W", "causal only without a cache")
def csa_new_only(x, params, num_heads, cache=None):
    return _csa(x, params, num_heads, cache, mask_mode="new_only")


@A("cached_self_attention", "W", "new keys prepended to the cache")
def csa_prepend(x, params, num_heads, cache=None):
    return _csa(x, params, num_heads, cache, prepend=True)


@A("cached_self_attention", "W", "scores scaled by sqrt(D)")
def csa_scaleD(x, params, num_heads, cache=None):
    return _csa(x, params, num_heads, cache, scale=x.size(-1))


@A("cached_self_attention", "W", "updates the caller's cache dict and returns it")
def csa_mutate(x, params, num_heads, cache=None):
    return _csa(x, params, num_heads, cache, mutate_cache=True)


@A("cached_self_attention", "W", "returns only the new keys and values as the cache")
def csa_newonly_cache(x, params, num_heads, cache=None):
    return _csa(x, params, num_heads, cache, return_new_only=True)


@A("cached_self_attention", "W", "heads merged by reshape without the transpose")
def csa_view_merge(x, params, num_heads, cache=None):
    # merge by view straight from (B, H, L, dk) to (B, L, D): scrambles tokens across heads
    q = split_heads(linear(x, params["w_q"], params.get("b_q")), num_heads)
    k = split_heads(linear(x, params["w_k"], params.get("b_k")), num_heads)
    v = split_heads(linear(x, params["w_v"], params.get("b_v")), num_heads)
    if cache is not None:
        k = torch.cat([cache["key"], k], dim=2)
        v = torch.cat([cache["value"], v], dim=2)
    ctx, _ = scaled_dot_product_attention(q, k, v, causal_mask(k.size(2))[:, :, -x.size(1):])
    B, H, Ln, dk = ctx.shape
    return linear(ctx.reshape(B, Ln, H * dk), params["w_o"], params.get("b_o")), {"key": k, "value": v}


@A("cached_self_attention", "W", "mask with a -1e4 additive bias (half-precision 'safe')")
def csa_additive(x, params, num_heads, cache=None):
    q = split_heads(linear(x, params["w_q"], params.get("b_q")), num_heads)
    k = split_heads(linear(x, params["w_k"], params.get("b_k")), num_heads)
    v = split_heads(linear(x, params["w_v"], params.get("b_v")), num_heads)
    if cache is not None:
        k = torch.cat([cache["key"], k], dim=2)
        v = torch.cat([cache["value"], v], dim=2)
    Ln, Lt = x.size(1), k.size(2)
    allowed = causal_mask(Lt)[0, 0, -Ln:]
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    s = s + torch.zeros_like(s).masked_fill(~allowed, -1e4)
    ctx = s.softmax(-1) @ v
    return linear(merge_heads(ctx), params["w_o"], params.get("b_o")), {"key": k, "value": v}


generics("cached_self_attention", lambda x, params, num_heads, cache=None: _csa(x, params, num_heads, cache),
         ["f32", "f64", "mutate", "idcache", "counter"])


# ================================================================================================
# b2 · lm_step(params, ids, config, caches=None)
# ================================================================================================

def _lm_step(params, ids, config, caches=None, *, restart=False, scale=True, final_norm=True,
             post_ln=False, cache_index=None, start_axis=2, csa=None):
    from tfmlib import cached_self_attention
    csa = csa or cached_self_attention
    start = 0 if (caches is None or restart) else caches[0]["key"].size(start_axis)
    Ln = ids.size(1)
    table = params["token_embedding"]
    x = (embed(ids, table) if scale else table[ids]) + params["position_embedding"][start:start + Ln]
    new = []
    for i, block in enumerate(params["blocks"]):
        c = None if caches is None else caches[i if cache_index is None else cache_index]
        if post_ln:
            a, c2 = csa(x, block["attention"], config.num_heads, c)
            x = ln(x + a, block["norm1"])
            x = ln(x + feed_forward(x, block["ffn"]), block["norm2"])
        else:
            a, c2 = csa(ln(x, block["norm1"]), block["attention"], config.num_heads, c)
            x = x + a
            x = x + feed_forward(ln(x, block["norm2"]), block["ffn"])
        new.append(c2)
    if final_norm:
        x = ln(x, params["final_norm"])
    return linear(x, table), new


@A("lm_step", "R", "arange positions, einsum tied output, own cached attention")
def lm_r1(params, ids, config, caches=None):
    past = 0 if caches is None else caches[0]["value"].shape[-2]
    pos = torch.arange(past, past + ids.size(1))
    table = params["token_embedding"]
    x = table[ids] * table.size(1) ** 0.5 + params["position_embedding"][pos]
    out_caches = []
    for block, cache in zip(params["blocks"], caches or [None] * len(params["blocks"])):
        a, c = csa_einsum(ln_by_hand(x, block["norm1"]), block["attention"], config.num_heads, cache)
        x = x + a
        x = x + feed_forward(ln_by_hand(x, block["norm2"]), block["ffn"])
        out_caches.append(c)
    h = ln_by_hand(x, params["final_norm"])
    return torch.einsum("bld,vd->blv", h, table), out_caches


@A("lm_step", "R", "library cached_self_attention, positions sliced")
def lm_r2(params, ids, config, caches=None):
    return _lm_step(params, ids, config, caches)


@A("lm_step", "W", "positions restart at 0")
def lm_restart(params, ids, config, caches=None):
    return _lm_step(params, ids, config, caches, restart=True)


@A("lm_step", "W", "no sqrt(D) scaling of the embedding")
def lm_noscale(params, ids, config, caches=None):
    return _lm_step(params, ids, config, caches, scale=False)


@A("lm_step", "W", "no final LayerNorm")
def lm_nofinal(params, ids, config, caches=None):
    return _lm_step(params, ids, config, caches, final_norm=False)


@A("lm_step", "W", "Post-LN blocks")
def lm_postln(params, ids, config, caches=None):
    return _lm_step(params, ids, config, caches, post_ln=True)


@A("lm_step", "W", "caches[0] for every block")
def lm_cache0(params, ids, config, caches=None):
    return _lm_step(params, ids, config, caches, cache_index=0)


@A("lm_step", "W", "L_past read from the head axis (size(1))")
def lm_axis1(params, ids, config, caches=None):
    return _lm_step(params, ids, config, caches, start_axis=1)


@A("lm_step", "W", "caches list extended in place and returned")
def lm_extend(params, ids, config, caches=None):
    logits, new = _lm_step(params, ids, config, caches)
    if caches is None:
        return logits, new
    caches[:] = new
    return logits, caches


@A("lm_step", "W", "cached attention without the causal mask inside")
def lm_nomask(params, ids, config, caches=None):
    return _lm_step(params, ids, config, caches, csa=csa_nomask)


@A("lm_step", "W", "positions from a module counter of tokens fed since the last call without caches")
def lm_counter(params, ids, config, caches=None):
    # a module counter of tokens fed so far instead of the cache length
    _LM_FED.setdefault("n", 0)
    if caches is None:
        _LM_FED["n"] = 0
    start = _LM_FED["n"]
    _LM_FED["n"] += ids.size(1)
    table = params["token_embedding"]
    x = embed(ids, table) + params["position_embedding"][start:start + ids.size(1)]
    from tfmlib import cached_self_attention
    new = []
    for i, block in enumerate(params["blocks"]):
        a, c = cached_self_attention(ln(x, block["norm1"]), block["attention"], config.num_heads,
                                     None if caches is None else caches[i])
        x = x + a
        x = x + feed_forward(ln(x, block["norm2"]), block["ffn"])
        new.append(c)
    return linear(ln(x, params["final_norm"]), table), new


_LM_FED = {}

generics("lm_step", lm_r2, ["f32", "idcache", "counter"])
