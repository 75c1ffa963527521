"""Notebook 06: multi-head attention as a handful of reshapes around one batched matmul."""
from __future__ import annotations

import math

import torch

from ._validation import (require_factory_args, require_keys, require_like, require_min_ndim,
                          require_ndim, require_params_like, require_positive_int, require_size,
                          require_tensor, shape_str)
from .attention import scaled_dot_product_attention

MHA_KEYS = ("w_q", "b_q", "w_k", "b_k", "w_v", "b_v", "w_o", "b_o")


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """(..., in), weight (out, in) -> (..., out), like nn.Linear: x @ W^T + b."""
    _check_linear_inputs(x, weight, bias)
    y = x @ weight.T
    return y + bias if bias is not None else y


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, L, d_model) -> (B, H, L, d_k): cut the feature axis into H pieces, then move H forward.

    Reshaping straight to (B, H, L, d_k) would scramble tokens across heads;
    the head axis must be split off the *feature* axis first.
    """
    _check_split_heads_inputs(x, num_heads)
    batch, length, d_model = x.shape
    x = x.reshape(batch, length, num_heads, d_model // num_heads)  # (B, L, H, d_k)
    return x.transpose(1, 2)                                        # (B, H, L, d_k)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, L, d_k) -> (B, L, H * d_k): the inverse of `split_heads`."""
    _check_merge_heads_input(x)
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
    _check_multi_head_inputs(query, key, value, params)
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
    require_factory_args(generator, dtype, device)
    bound = math.sqrt(6.0 / (d_model + d_model))
    params = {}
    for name in ("q", "k", "v", "o"):
        weight = torch.rand(d_model, d_model, generator=generator, dtype=dtype, device=device)
        params[f"w_{name}"] = (2 * weight - 1) * bound
        params[f"b_{name}"] = torch.zeros(d_model, dtype=dtype, device=device)
    return params


def _check_linear_inputs(x, weight, bias) -> None:
    require_min_ndim("x", x, 1, "(..., in_features)")
    require_ndim("weight", weight, 2, "(out_features, in_features)")
    if x.size(-1) != weight.size(-1):
        raise ValueError(
            f"weight: expected (out_features, {x.size(-1)}) to match x {shape_str(x)}, "
            f"got shape {shape_str(weight)}"
        )
    require_like("weight", weight, "x", x)
    if bias is not None:
        require_tensor("bias", bias, layout=f"({weight.size(0)},)")
        if bias.shape != weight.shape[:1]:
            raise ValueError(f"bias: expected shape ({weight.size(0)},), one per output feature of "
                             f"weight {shape_str(weight)}, got {shape_str(bias)}")
        require_like("bias", bias, "x", x)


def _check_split_heads_inputs(x, num_heads) -> None:
    require_ndim("x", x, 3, "(B, L, d_model)")
    _check_divisible(x.size(2), num_heads)


def _check_merge_heads_input(x) -> None:
    require_ndim("x", x, 4, "(B, H, L, d_k)")


def _check_multi_head_inputs(query, key, value, params) -> None:
    require_keys("params", params, ("w_q", "w_k", "w_v", "w_o"))
    for name, x, layout in (("query", query, "(B, Lq, d_model)"),
                            ("key", key, "(B, Lk, d_model)"), ("value", value, "(B, Lk, d_model)")):
        require_ndim(name, x, 3, layout)
    require_size("key", key, 0, query.size(0), "batch size of query")
    require_size("value", value, 0, query.size(0), "batch size of query")
    require_size("value", value, 1, key.size(1), "Lk, the length of key")
    require_size("key", key, 2, query.size(2), "d_model of query")
    require_size("value", value, 2, query.size(2), "d_model of query")
    require_like("key", key, "query", query)
    require_like("value", value, "query", query)
    require_params_like("params", params, MHA_KEYS, "query", query)
    _check_projection_shapes(params)


def _check_projection_shapes(params: dict) -> None:
    """Every projection maps d_model to d_model: a non-square one would reach linear or
    attention as a shape clash that cannot say which projection is wrong. Whether d_model
    fits the inputs is left to linear, whose error shows both shapes."""
    d_model = require_ndim("params['w_q']", params["w_q"], 2, "(d_model, d_model)").size(1)
    for name in ("q", "k", "v", "o"):
        for key, shape in ((f"w_{name}", (d_model, d_model)), (f"b_{name}", (d_model,))):
            value = params.get(key)
            if value is None and key.startswith("b_"):  # a projection without a bias
                continue
            require_tensor(f"params[{key!r}]", value, layout=str(shape))
            if value.shape != shape:
                raise ValueError(f"params[{key!r}]: expected shape {shape}, as every projection "
                                 f"maps d_model = {d_model} to d_model, got {shape_str(value)}")


def _check_divisible(d_model: int, num_heads) -> None:
    require_positive_int("num_heads", num_heads)
    if d_model % num_heads:
        divisors = [h for h in range(1, d_model + 1) if d_model % h == 0]
        raise ValueError(
            f"num_heads: d_model = {d_model} must be divisible by num_heads; "
            f"got {num_heads} (valid choices: {divisors})"
        )
