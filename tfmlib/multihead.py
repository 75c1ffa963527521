"""Notebook 06: multi-head attention as a handful of reshapes around one batched matmul."""
from __future__ import annotations

import math

import torch

from ._validation import (require_keys, require_min_ndim, require_ndim, require_positive_int,
                          require_size, shape_str)
from .attention import scaled_dot_product_attention

MHA_KEYS = ("w_q", "b_q", "w_k", "b_k", "w_v", "b_v", "w_o", "b_o")


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """(..., in), weight (out, in) -> (..., out), like nn.Linear: x @ W^T + b."""
    require_min_ndim("x", x, 1, "(..., in_features)")
    require_ndim("weight", weight, 2, "(out_features, in_features)")
    if x.size(-1) != weight.size(-1):
        raise ValueError(
            f"weight: expected (out_features, {x.size(-1)}) to match x {shape_str(x)}, "
            f"got shape {shape_str(weight)}"
        )
    y = x @ weight.T
    return y + bias if bias is not None else y


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, L, d_model) -> (B, H, L, d_k): cut the feature axis into H pieces, then move H forward.

    Reshaping straight to (B, H, L, d_k) would scramble tokens across heads;
    the head axis must be split off the *feature* axis first.
    """
    require_ndim("x", x, 3, "(B, L, d_model)")
    batch, length, d_model = x.shape
    _check_divisible(d_model, num_heads)
    x = x.reshape(batch, length, num_heads, d_model // num_heads)  # (B, L, H, d_k)
    return x.transpose(1, 2)                                        # (B, H, L, d_k)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, L, d_k) -> (B, L, H * d_k): the inverse of `split_heads`."""
    require_ndim("x", x, 4, "(B, H, L, d_k)")
    batch, num_heads, length, d_k = x.shape
    x = x.transpose(1, 2)                                  # (B, L, H, d_k)
    return x.reshape(batch, length, num_heads * d_k)       # (B, L, d_model)


def multi_head_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         params: dict, num_heads: int, mask: torch.Tensor | None = None):
    """(B, Lq, D), (B, Lk, D), (B, Lk, D) -> output (B, Lq, D), weights (B, H, Lq, Lk).

    `params` holds w_q, w_k, w_v, w_o of shape (D, D) stored (out, in) like
    nn.Linear, and biases b_q, b_k, b_v, b_o of shape (D,) (or None).
    `mask` broadcasts to (B, H, Lq, Lk); True means "may attend".
    """
    require_keys("params", params, ("w_q", "w_k", "w_v", "w_o"))
    for name, x, layout in (("query", query, "(B, Lq, d_model)"),
                            ("key", key, "(B, Lk, d_model)"), ("value", value, "(B, Lk, d_model)")):
        require_ndim(name, x, 3, layout)
    require_size("key", key, 0, query.size(0), "batch size of query")
    require_size("value", value, 0, query.size(0), "batch size of query")
    require_size("value", value, 1, key.size(1), "Lk, the length of key")
    require_size("key", key, 2, query.size(2), "d_model of query")
    require_size("value", value, 2, query.size(2), "d_model of query")
    q = split_heads(linear(query, params["w_q"], params.get("b_q")), num_heads)  # (B, H, Lq, d_k)
    k = split_heads(linear(key, params["w_k"], params.get("b_k")), num_heads)    # (B, H, Lk, d_k)
    v = split_heads(linear(value, params["w_v"], params.get("b_v")), num_heads)  # (B, H, Lk, d_k)
    context, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, H, Lq, d_k), (B, H, Lq, Lk)
    output = linear(merge_heads(context), params["w_o"], params.get("b_o"))      # (B, Lq, D)
    return output, weights


def init_mha_params(d_model: int, generator: torch.Generator | None = None,
                    dtype: torch.dtype = torch.float32, device=None) -> dict:
    """Xavier-uniform weights (D, D) and zero biases: each projection starts at a moderate scale."""
    require_positive_int("d_model", d_model)
    bound = math.sqrt(6.0 / (d_model + d_model))
    params = {}
    for name in ("q", "k", "v", "o"):
        weight = torch.rand(d_model, d_model, generator=generator, dtype=dtype, device=device)
        params[f"w_{name}"] = (2 * weight - 1) * bound
        params[f"b_{name}"] = torch.zeros(d_model, dtype=dtype, device=device)
    return params


def _check_divisible(d_model: int, num_heads) -> None:
    require_positive_int("num_heads", num_heads)
    if d_model % num_heads:
        divisors = [h for h in range(1, d_model + 1) if d_model % h == 0]
        raise ValueError(
            f"num_heads: d_model = {d_model} must be divisible by num_heads; "
            f"got {num_heads} (valid choices: {divisors})"
        )
