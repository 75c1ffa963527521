"""Notebook 05: scaled dot-product attention, softmax(Q K^T / sqrt(d_k)) V."""
from __future__ import annotations

import math

import torch

from ._validation import (require_float, require_like, require_mask, require_min_ndim,
                          require_same_device, shape_str)
from .shapes import broadcast_shape


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor,
                                 value: torch.Tensor, mask: torch.Tensor | None = None):
    """(..., Lq, d_k), (..., Lk, d_k), (..., Lk, d_v) -> context (..., Lq, d_v), weights (..., Lq, Lk).

    `mask` is bool and broadcasts to (..., Lq, Lk); True means "may attend".
    A query row whose keys are all masked gets zero weights and a zero context.
    """
    _check_attention_inputs(query, key, value, mask)
    d_k = query.size(-1)
    # Q K^T / sqrt(d_k), with the scaling applied to Q: the same numbers, but it touches
    # Lq * d_k entries instead of Lq * Lk (and as many in the backward pass).
    scores = (query / math.sqrt(d_k)) @ key.transpose(-2, -1)  # (..., Lq, Lk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))      # masked keys get no weight
    weights = torch.softmax(scores, dim=-1)                    # over keys; NaN on all -inf rows
    if mask is not None:
        weights = torch.where(mask, weights, 0.0)              # exact zeros, and no NaN
    return weights @ value, weights                            # (..., Lq, d_v), (..., Lq, Lk)


def _check_attention_inputs(query, key, value, mask) -> None:
    for name, x, layout in (("query", query, "(..., Lq, d_k)"), ("key", key, "(..., Lk, d_k)"),
                            ("value", value, "(..., Lk, d_v)")):
        require_min_ndim(name, x, 2, layout)
        require_float(name, x)
    require_like("key", key, "query", query)
    require_like("value", value, "query", query)
    if key.size(-1) != query.size(-1):
        raise ValueError(
            f"key: expected last axis d_k = {query.size(-1)} to match query {shape_str(query)}, "
            f"got shape {shape_str(key)}"
        )
    if value.size(-2) != key.size(-2):
        raise ValueError(
            f"value: expected Lk = {key.size(-2)} rows to match key {shape_str(key)}, "
            f"got shape {shape_str(value)}"
        )
    try:
        batch_shape = broadcast_shape(query.shape[:-2], key.shape[:-2])  # that of the scores
        broadcast_shape(batch_shape, value.shape[:-2])
    except ValueError:
        raise ValueError(
            f"query, key, value: leading (batch/head) axes must broadcast, got "
            f"{shape_str(query)}, {shape_str(key)}, {shape_str(value)}"
        ) from None
    if mask is not None:
        scores_shape = (*batch_shape, query.size(-2), key.size(-2))  # query @ key^T
        require_mask("mask", mask, scores_shape, "(..., Lq, Lk)")
        require_same_device("mask", mask, "query", query)
