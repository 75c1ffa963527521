"""Exercises of notebook 06: the linear layer, splitting and merging heads, multi-head attention.

How each check calls the learner's function:
    linear(x, weight, bias)                      -> (..., out); bias may be None
    split_heads(x, num_heads)                    -> (B, H, L, d_k)
    merge_heads(x)                               -> (B, L, H * d_k)
    multi_head_attention(query, key, value, params, num_heads, mask)  -> (output, weights)
"""
from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention
from ..multihead import linear, merge_heads, multi_head_attention, split_heads
from .attention import _attention_with, _large_negative_fill, _nan_on_fully_masked
from .core import Case, Contract, Exercise, Mistake, register


# ---- telling one RuntimeError from another ---------------------------------------------------

class _ViewOfNonContiguous(RuntimeError):
    """`.view` on a transposed tensor: a RuntimeError of its own, so the check can name it."""


_ViewOfNonContiguous.__name__ = _ViewOfNonContiguous.__qualname__ = "RuntimeError"


def call_naming_view_errors(fn, *args, **kwargs):
    """fn(*args, **kwargs), re-raising torch's "view size is not compatible" error as a type of
    its own: the engine matches raised errors by type, and a plain RuntimeError could be anything."""
    try:
        return fn(*args, **kwargs)
    except RuntimeError as error:
        if isinstance(error, _ViewOfNonContiguous) or "view size is not compatible" not in str(error):
            raise
        raise _ViewOfNonContiguous(*error.args).with_traceback(error.__traceback__) from None


def random_mha_params(d_model: int, g: torch.Generator) -> dict:
    """Weights (D, D) stored (out, in) and non-zero biases, so that every term shows."""
    params = {}
    for name in "qkvo":
        params[f"w_{name}"] = torch.randn(d_model, d_model, generator=g) / math.sqrt(d_model)
        params[f"b_{name}"] = 0.2 * torch.randn(d_model, generator=g)
    return params


def padding(lengths: list[int], length: int) -> torch.Tensor:
    """(B, 1, 1, L) bool, True on the first lengths[b] positions of sample b."""
    return (torch.arange(length)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]


def causal(length: int) -> torch.Tensor:
    """(1, 1, L, L) bool, lower triangle True."""
    return torch.ones(length, length, dtype=torch.bool).tril()[None, None]


# ---- linear -----------------------------------------------------------------------------------

def _linear_cases() -> list[Case]:
    g = torch.Generator().manual_seed(60)
    r = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    return [Case("(B, L, in) -> (B, L, out), out != in", (r(2, 5, 4), r(7, 4), r(7))),
            Case("2-D input, square weight", (r(3, 6), r(6, 6), r(6))),
            Case("bias=None", (r(2, 3, 5), r(3, 5), None)),
            Case("3-D input, square weight", (r(3, 2, 5), r(5, 5), r(5))),
            Case("one vector (in,) -> (out,)", (r(4), r(3, 4), r(3)))]


def _linear_untransposed(x, weight, bias=None):
    y = x @ weight
    return y + bias if bias is not None else y


register(Exercise(
    name="linear",
    contract=Contract(axes={"B": {"x": (0,)}, "in": {"x": (-1,), "weight": (1,)},
                               "out": {"weight": (0,), "bias": (0,)}}, wide=("in", "out")),
    reference=linear,
    make_cases=_linear_cases,
    gradients=True,
    mistakes=[
        Mistake("x @ W instead of x @ W.T",
                "weights are stored (out, in) like nn.Linear: multiply by the transpose, x @ weight.T",
                _linear_untransposed),
        Mistake("crash when bias is None",
                "bias may be None: add it only `if bias is not None`",
                lambda x, weight, bias=None: x @ weight.T + bias),
        Mistake("bias left out",
                "add the bias after the product: x @ weight.T + bias (it broadcasts over (..., out))",
                lambda x, weight, bias=None: x @ weight.T),
    ],
))


# ---- split_heads ------------------------------------------------------------------------------

def _split_cases() -> list[Case]:
    g = torch.Generator().manual_seed(61)
    return [Case("(B, L, D) = (2, 5, 12), 3 heads", (torch.randn(2, 5, 12, generator=g), 3)),
            Case("(3, 4, 8), 2 heads", (torch.randn(3, 4, 8, generator=g), 2)),
            Case("(1, 7, 6), 3 heads", (torch.randn(1, 7, 6, generator=g), 3)),
            Case("(2, 3, 4), 4 heads: d_k = 1", (torch.randn(2, 3, 4, generator=g), 4))]


def _split_straight(x, num_heads):
    batch, length, d_model = x.shape
    return x.reshape(batch, num_heads, length, d_model // num_heads)


def _split_no_transpose(x, num_heads):
    batch, length, d_model = x.shape
    return x.reshape(batch, length, num_heads, d_model // num_heads)


def _split_strided(x, num_heads):
    batch, length, d_model = x.shape
    return x.reshape(batch, length, d_model // num_heads, num_heads).permute(0, 3, 1, 2)


register(Exercise(
    name="split_heads",
    contract=Contract(axes={"B": {"x": (0,)}, "L": {"x": (1,)}, "D": {"x": (2,)}},
                                    wide=("D",), values={"num_heads": (1,)}),
    reference=split_heads,
    make_cases=_split_cases,
    gradients=True,
    mistakes=[
        Mistake("reshaped straight to (B, H, L, d_k)",
                "reshape only splits the last axis: reshape to (B, L, H, d_k) first, "
                "then .transpose(1, 2) to bring H forward",
                _split_straight),
        Mistake("transpose forgotten: left as (B, L, H, d_k)",
                "attention needs (B, H, L, d_k): finish with .transpose(1, 2)",
                _split_no_transpose),
        Mistake("features split as (d_k, H): each head takes every H-th feature",
                "each head owns a contiguous block of d_k features: reshape to (B, L, H, d_k), H before d_k",
                _split_strided),
    ],
))


# ---- merge_heads ------------------------------------------------------------------------------

def _merge_cases() -> list[Case]:
    g = torch.Generator().manual_seed(62)
    return [Case("(B, H, L, d_k) = (2, 3, 5, 4)", (torch.randn(2, 3, 5, 4, generator=g),)),
            Case("(1, 4, 3, 2)", (torch.randn(1, 4, 3, 2, generator=g),)),
            Case("(3, 2, 6, 5)", (torch.randn(3, 2, 6, 5, generator=g),)),
            Case("one head: (2, 1, 4, 3)", (torch.randn(2, 1, 4, 3, generator=g),))]


def _merge_interleaved(x):
    batch, num_heads, length, d_k = x.shape
    return x.reshape(batch, length, num_heads * d_k)


def _merge_with_view(x):
    batch, num_heads, length, d_k = x.shape
    return x.transpose(1, 2).view(batch, length, num_heads * d_k)


def _view_on_transposed(variant) -> Mistake:
    return Mistake(".view on a transposed tensor", "after transpose the tensor is not contiguous: use "
                   ".reshape(...) (or .contiguous().view(...))", variant)


def _merge_strided(x):
    batch, num_heads, length, d_k = x.shape
    return x.permute(0, 2, 3, 1).reshape(batch, length, num_heads * d_k)


register(Exercise(
    name="merge_heads",
    contract=Contract(axes={"B": {"x": (0,)}, "H": {"x": (1,)}, "L": {"x": (2,)},
                                    "d_k": {"x": (3,)}}),
    reference=merge_heads,
    make_cases=_merge_cases,
    gradients=True,
    run=lambda fn, case: call_naming_view_errors(fn, *case.args, **case.kwargs),
    mistakes=[
        Mistake("merged without transposing back (heads interleaved)",
                "reshape reads elements in memory order: .transpose(1, 2) to (B, L, H, d_k) first, "
                "so each token's heads sit side by side, then reshape",
                _merge_interleaved),
        _view_on_transposed(_merge_with_view),
        Mistake("features merged as (d_k, H)",
                "concatenate head after head: transpose to (B, L, H, d_k), H before d_k, then reshape",
                _merge_strided),
        Mistake("heads averaged instead of concatenated",
                "merging keeps every head: the result is (B, L, H * d_k), the heads side by side",
                lambda x: x.mean(dim=1)),
    ],
))


# ---- multi_head_attention ---------------------------------------------------------------------

def _mha_cases() -> list[Case]:
    g = torch.Generator().manual_seed(63)
    cases = []
    x = torch.randn(2, 5, 12, generator=g)
    cases.append(Case("self-attention, no mask, (2, 5, 12), 3 heads", (x, x, x, random_mha_params(12, g), 3)))
    q, k, v = (torch.randn(3, 3, 8, generator=g), torch.randn(3, 6, 8, generator=g), torch.randn(3, 6, 8, generator=g))
    cases.append(Case("cross-attention Lq=3, Lk=6, key != value, padding mask, 2 heads",
                      (q, k, v, random_mha_params(8, g), 2), {"mask": padding([6, 4, 2], 6)}))
    x = torch.randn(2, 5, 12, generator=g)
    cases.append(Case("self-attention, causal & padding mask, 4 heads",
                      (x, x, x, random_mha_params(12, g), 4), {"mask": causal(5) & padding([5, 3], 5)}))
    x = torch.randn(2, 4, 6, generator=g)
    cases.append(Case("one head, causal mask (1, 1, L, L)", (x, x, x, random_mha_params(6, g), 1),
                      {"mask": causal(4)}))
    q, kv = torch.randn(2, 2, 4, generator=g), torch.randn(2, 3, 4, generator=g)
    visible = torch.tensor([[[True, False, True], [False, False, False]],   # sample 0, query 1: no key
                            [[False, True, True], [True, True, False]]])[:, None]  # (B, 1, Lq, Lk)
    cases.append(Case("d_k = 1 (4 heads of 4 features), key is value, mask (B, 1, Lq, Lk) in which "
                      "sample 0's query 1 sees no key at all",
                      (q, kv, kv, random_mha_params(4, g), 4), {"mask": visible}))
    return cases


def _mha_variant(project=None, split=split_heads, merge=merge_heads, pass_mask=True,
                 share_projection=False, value_from_key=False, kv_from_query=False, output_projection=True,
                 attention=scaled_dot_product_attention):
    """multi_head_attention with one step done wrong."""
    project = project or linear

    def variant(query, key, value, params, num_heads, mask=None):
        w = {name: ("q" if share_projection else name) for name in "qkv"}
        q = split(project(query, params[f"w_{w['q']}"], params[f"b_{w['q']}"]), num_heads)
        if kv_from_query:
            key = value = query
        k = split(project(key, params[f"w_{w['k']}"], params[f"b_{w['k']}"]), num_heads)
        source = key if value_from_key else value
        v = split(project(source, params[f"w_{w['v']}"], params[f"b_{w['v']}"]), num_heads)
        context, weights = attention(q, k, v, mask if pass_mask else None)
        merged = merge(context)
        output = project(merged, params["w_o"], params["b_o"]) if output_projection else merged
        return output, weights
    return variant


register(Exercise(
    name="multi_head_attention",
    contract=Contract(
        axes={"B": {"query": (0,), "key": (0,), "value": (0,), "mask": (0,)},
              "Lq": {"query": (1,), "mask": (-2,)}, "Lk": {"key": (1,), "value": (1,), "mask": (-1,)}},
        scales={"query": (100.0,)}, base=1,  # and a mask with a pattern of its own in each head
        values={"mask": (torch.rand(3, 2, 3, 6, generator=torch.Generator().manual_seed(9)) < 0.6,)}),
    reference=multi_head_attention,
    make_cases=_mha_cases,
    gradients=True,
    run=lambda fn, case: call_naming_view_errors(fn, *case.args, **case.kwargs),
    output_names=("output", "weights"),
    nan_hint="NaN has two usual causes: exp of a large score overflows to inf and inf / inf = nan (subtract "
             "each row's maximum before exp, as torch.softmax does), or a query whose keys are all masked "
             "(it must get zero weights, so its output is b_o; PyTorch's nn.MultiheadAttention gives NaN there)",
    mistakes=[
        Mistake("x @ W instead of x @ W.T",
                "weights are stored (out, in) like nn.Linear: project with x @ W.T + b (or tfmlib.linear)",
                _mha_variant(project=_linear_untransposed)),
        Mistake("split by reshaping straight to (B, H, L, d_k)",
                "split heads with reshape(B, L, H, d_k) then .transpose(1, 2)",
                _mha_variant(split=_split_straight)),
        Mistake("merged without transposing back (heads interleaved)",
                "merge with .transpose(1, 2) back to (B, L, H, d_k) first, then reshape to (B, L, D)",
                _mha_variant(merge=_merge_interleaved)),
        _view_on_transposed(_mha_variant(merge=_merge_with_view)),
        Mistake("mask not passed down (mask=None inside)",
                "hand the mask you received to the attention: scaled_dot_product_attention(q, k, v, mask)",
                _mha_variant(pass_mask=False)),
        Mistake("one projection shared by Q, K and V",
                "Q, K and V each have their own weights: w_q/b_q, w_k/b_k, w_v/b_v",
                _mha_variant(share_projection=True)),
        Mistake("values projected from the key input",
                "V comes from the `value` argument: linear(value, w_v, b_v)",
                _mha_variant(value_from_key=True)),
        Mistake("keys and values projected from the query input (self-attention only)",
                "K comes from the `key` argument and V from `value`: in cross-attention they are the "
                "encoder's memory, not the query",
                _mha_variant(kv_from_query=True)),
        Mistake("output projection forgotten",
                "after merging the heads, apply the output projection: linear(merged, w_o, b_o)",
                _mha_variant(output_projection=False)),
        Mistake("NaN on a fully masked row",
                "softmax of a row of -inf is NaN; set the weights of masked keys to 0 after the softmax",
                _mha_variant(attention=_nan_on_fully_masked)),
        Mistake("masked scores filled with -1e9, fully masked rows not zeroed",
                "with -1e9 a query that sees no key gets uniform weights (The Annotated Transformer's "
                "way); fill with float('-inf'), zero masked weights after the softmax",
                _mha_variant(attention=_large_negative_fill(lambda dtype: -1e9)),
                also=(_mha_variant(attention=_large_negative_fill(lambda dtype: torch.finfo(dtype).min)),)),
        Mistake("scores scaled by sqrt(d_model) instead of sqrt(d_k)",
                "each head's scores are divided by sqrt(d_k) = sqrt(d_model / num_heads)",
                _mha_variant(attention=_attention_with(  # d_model = H * d_k
                    lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(q.size(1) * q.size(-1))))),
    ],
))
