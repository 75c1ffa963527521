"""Exercises of notebook 05: scaled dot-product attention."""
from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention
from .core import Case, Contract, Exercise, Mistake, register


def _cases() -> list[Case]:
    g = torch.Generator().manual_seed(5)

    def qkv(batch, lq, lk, d_k, d_v, heads=None):
        lead = (batch,) if heads is None else (batch, heads)
        return (torch.randn(*lead, lq, d_k, generator=g), torch.randn(*lead, lk, d_k, generator=g),
                torch.randn(*lead, lk, d_v, generator=g))

    q, k, v = qkv(3, 4, 4, 8, 8)
    cases = [Case("no mask, square", (q, k, v))]
    q, k, v = qkv(2, 3, 5, 6, 7, heads=3)
    cases.append(Case("4-D with heads, Lq != Lk, d_v != d_k", (q, k, v)))
    q, k, v = qkv(3, 5, 5, 4, 4, heads=2)
    lengths = torch.tensor([5, 3, 1])
    pad = (torch.arange(5)[None, :] < lengths[:, None])[:, None, None, :]       # (B, 1, 1, Lk)
    cases.append(Case("padding mask on the keys", (q, k, v), {"mask": pad}))
    causal = torch.ones(5, 5, dtype=torch.bool).tril()[None, None]              # (1, 1, L, L)
    cases.append(Case("causal mask", (q, k, v), {"mask": causal & pad}))
    q, k, v = qkv(2, 4, 3, 16, 5, heads=2)
    rows = torch.tensor([True, False, True, True])[:, None].expand(4, 3).clone()  # query 1 sees nothing
    cases.append(Case("a fully masked query row", (q, k, v), {"mask": rows[None, None]}))
    return cases


def _weigh(scores, value, mask, fill=float("-inf"), softmax_dim=-1, zero_masked=True):
    """The rest of attention after the scores; each variant below breaks one step."""
    if mask is not None:
        scores = scores.masked_fill(~mask, fill)
    weights = torch.softmax(scores, dim=softmax_dim)
    if mask is not None and zero_masked:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ value, weights


def _scores(query, key):
    return query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))


def _attention_with(scores=_scores, **how):
    """Attention whose scores are scores(query, key), weighed as _weigh's keywords `how` say:
    each variant below gets one of the two wrong."""
    def variant(query, key, value, mask=None):
        return _weigh(scores(query, key), value, mask, **how)
    return variant


def _scaled(scale_fn):
    return _attention_with(lambda query, key: query @ key.transpose(-2, -1) * scale_fn(query.size(-1)))


def _softmax_over_queries(query, key, value, mask=None):
    _, weights = _weigh(_scores(query, key), value, mask, softmax_dim=-2)
    weights = weights.nan_to_num(0.0)  # a key column that every query is masked from gives NaN
    return weights @ value, weights


def _large_negative_fill(fill_for_dtype):
    """The Annotated Transformer's -1e9 (or Hugging Face's finfo.min), and nothing after the
    softmax: a query with no visible key gets uniform weights instead of zeros."""
    def variant(query, key, value, mask=None):
        return _weigh(_scores(query, key), value, mask, fill=fill_for_dtype(query.dtype), zero_masked=False)
    return variant


def _mask_after_softmax(query, key, value, mask=None):
    weights = torch.softmax(_scores(query, key), dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)  # the visible keys keep only their old share
    return weights @ value, weights


def _query_scaled_in_place(query, key, value, mask=None):
    query /= math.sqrt(query.size(-1))  # right scores, but the caller's query is divided too
    return _weigh(query @ key.transpose(-2, -1), value, mask)


_nan_on_fully_masked = _attention_with(zero_masked=False)


def _mask_inverted(zero_after_softmax):
    def variant(query, key, value, mask=None):
        hidden = None if mask is None else ~mask  # hides the keys that were allowed
        return _weigh(_scores(query, key), value, hidden, zero_masked=zero_after_softmax)
    return variant


def _d_k_from(size):
    """The scores divided by the square root of size(query, key, value) instead of d_k."""
    def variant(query, key, value, mask=None):
        return _scaled(lambda d_k: 1 / math.sqrt(size(query, key, value)))(query, key, value, mask)
    return variant


register(Exercise(
    name="scaled_dot_product_attention",
    contract=Contract(
        axes={"B": {"query": (0,), "key": (0,), "value": (0,), "mask": (0,)},
              "H": {"query": (1,), "key": (1,), "value": (1,), "mask": (1,)},
              "Lq": {"query": (-2,), "mask": (-2,)}, "Lk": {"key": (-2,), "value": (-2,), "mask": (-1,)}},
        drop=("H",), scales={"query": (100.0, 1e5)}, base=3,  # scores far below a fill of -1e4
        values={"mask": (torch.rand(3, 2, 5, 5, generator=torch.Generator().manual_seed(9)) < 0.6,)}),  # one per head
    reference=scaled_dot_product_attention,
    make_cases=_cases,
    gradients=True,
    output_names=("context", "weights"),
    nan_hint="NaN has two usual causes: exp of a large score overflows to inf and inf / inf = nan "
             "(subtract each row's maximum before exp, as torch.softmax does), or a query row whose "
             "keys are all masked (it must give zero weights and a zero context, not 0 / 0)",
    mistakes=[
        Mistake("scores multiplied by sqrt(d_k)",
                "divide the scores by sqrt(d_k) instead of multiplying",
                _scaled(lambda d_k: math.sqrt(d_k))),
        Mistake("scores divided by d_k",
                "scale by 1 / sqrt(d_k), not 1 / d_k: math.sqrt(query.size(-1))",
                _scaled(lambda d_k: 1 / d_k)),
        Mistake("no scaling",
                "Luong's dot-product attention leaves the scores unscaled; the Transformer divides "
                "Q @ K^T by sqrt(d_k) before the softmax",
                _scaled(lambda d_k: 1.0)),
        Mistake("softmax over the query axis",
                "each query's weights must sum to 1 over the keys: softmax(dim=-1)",
                _softmax_over_queries),
        Mistake("masked scores filled with 0 instead of -inf",
                "a score of 0 still gets weight after softmax; fill masked scores with float('-inf')",
                _attention_with(fill=0.0, zero_masked=False), also=(_attention_with(fill=0.0),)),
        Mistake("NaN on a fully masked row",
                "softmax of a row of -inf is NaN; set the weights of masked keys to 0 after the softmax",
                _nan_on_fully_masked),
        Mistake("masked scores filled with -1e9, fully masked rows not zeroed",
                "The Annotated Transformer's convention: a query with no visible key gets uniform "
                "weights there, zeros here; also zero the masked weights after the softmax",
                _large_negative_fill(lambda dtype: -1e9),
                also=(_large_negative_fill(lambda dtype: torch.finfo(dtype).min),)),
        Mistake("mask applied after the softmax",
                "zeroing weights after the softmax leaves rows summing to less than 1: fill masked "
                "scores with float('-inf') before it, so visible keys share all the weight",
                _mask_after_softmax),
        Mistake("query scaled in place",
                "`query /= sqrt(d_k)` also divides the caller's tensor: scale the scores instead, "
                "scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)",
                _query_scaled_in_place),
        Mistake("transpose(1, 2) instead of transpose(-2, -1)",
                "with a heads axis, axis 1 is H, not L: swap the last two axes with key.transpose(-2, -1)",
                _attention_with(lambda q, k: q @ k.transpose(1, 2) / math.sqrt(q.size(-1)))),
        Mistake("* instead of @ for the scores",
                "`*` multiplies elementwise; the scores are a matrix product: query @ key.transpose(-2, -1)",
                _attention_with(lambda q, k: q * k / math.sqrt(q.size(-1)))),
        Mistake("mask polarity inverted",
                "True in the mask means 'may attend': fill the scores where the mask is False, "
                "scores.masked_fill(~mask, float('-inf'))",
                _mask_inverted(True), also=(_mask_inverted(False),)),
        Mistake("d_k read from the wrong axis",
                "d_k is the size of the last axis of query (or key): query.size(-1)",
                _d_k_from(lambda q, k, v: k.size(-2)),
                also=(_d_k_from(lambda q, k, v: q.size(-2)),
                      _d_k_from(lambda q, k, v: q.size(1)))),  # Lq for 3-D input, the heads for 4-D
        Mistake("scores scaled by sqrt(d_v) instead of sqrt(d_k)",
                "the paper has d_k = d_v = 64, so the two agree there; the scale belongs to the dot "
                "products' width, query.size(-1), not value.size(-1)",
                _d_k_from(lambda q, k, v: v.size(-1))),
    ],
))
