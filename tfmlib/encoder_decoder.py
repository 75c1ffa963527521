"""Notebook 08: encoder and decoder layers assembled from params dicts, and their stacks."""
from __future__ import annotations

import torch

from ._validation import (require_keys, require_like, require_mask, require_ndim,
                          require_positive_int, require_size)
from .multihead import init_mha_params, multi_head_attention
from .sublayers import (feed_forward, init_ffn_params, init_norm_params, layer_norm,
                        residual_sublayer)

ENCODER_KEYS = ("self_attn", "ffn", "norm1", "norm2")
DECODER_KEYS = ("self_attn", "cross_attn", "ffn", "norm1", "norm2", "norm3")


def encoder_layer(x: torch.Tensor, params: dict, num_heads: int, mask: torch.Tensor | None = None,
                  *, norm_first: bool = False, activation: str = "relu", dropout_p: float = 0.0,
                  training: bool = False, eps: float = 1e-5, need_weights: bool = False,
                  generator: torch.Generator | None = None):
    """(B, L, D) -> (B, L, D): self-attention sublayer, then FFN sublayer.

    `mask` broadcasts to (B, H, L, L), e.g. a padding mask (B, 1, 1, L).
    With need_weights=True also returns the attention weights (B, H, L, L).
    """
    _check_encoder_layer_inputs(x, params)
    options = dict(norm_first=norm_first, dropout_p=dropout_p, training=training, eps=eps,
                   generator=generator)
    attention = {}

    def self_attention(h):
        out, attention["weights"] = multi_head_attention(h, h, h, params["self_attn"], num_heads, mask)
        return out

    x = residual_sublayer(x, self_attention, params["norm1"], **options)                 # (B, L, D)
    x = residual_sublayer(x, lambda h: feed_forward(h, params["ffn"], activation),
                          params["norm2"], **options)                                    # (B, L, D)
    return (x, attention["weights"]) if need_weights else x


def decoder_layer(x: torch.Tensor, memory: torch.Tensor, params: dict, num_heads: int,
                  self_mask: torch.Tensor | None = None, memory_mask: torch.Tensor | None = None,
                  *, norm_first: bool = False, activation: str = "relu", dropout_p: float = 0.0,
                  training: bool = False, eps: float = 1e-5, need_weights: bool = False,
                  generator: torch.Generator | None = None):
    """(B, Lt, D), memory (B, Ls, D) -> (B, Lt, D).

    1. masked self-attention: `self_mask` (B, 1, Lt, Lt) should be causal, so a
       target position cannot peek at the tokens it must predict;
    2. cross-attention: queries from the decoder, keys and values from the
       encoder's `memory`; `memory_mask` (B, 1, 1, Ls) hides padded source tokens;
    3. position-wise FFN.
    With need_weights=True also returns (self weights (B, H, Lt, Lt), cross weights (B, H, Lt, Ls)).
    """
    _check_decoder_layer_inputs(x, memory, params, num_heads, self_mask, memory_mask)
    options = dict(norm_first=norm_first, dropout_p=dropout_p, training=training, eps=eps,
                   generator=generator)
    attention = {}

    def self_attention(h):
        out, attention["self"] = multi_head_attention(h, h, h, params["self_attn"], num_heads, self_mask)
        return out

    def cross_attention(h):
        out, attention["cross"] = multi_head_attention(h, memory, memory, params["cross_attn"],
                                                       num_heads, memory_mask)
        return out

    x = residual_sublayer(x, self_attention, params["norm1"], **options)                 # (B, Lt, D)
    x = residual_sublayer(x, cross_attention, params["norm2"], **options)                # (B, Lt, D)
    x = residual_sublayer(x, lambda h: feed_forward(h, params["ffn"], activation),
                          params["norm3"], **options)                                    # (B, Lt, D)
    return (x, (attention["self"], attention["cross"])) if need_weights else x


def encoder(x: torch.Tensor, layers: list[dict], num_heads: int, mask: torch.Tensor | None = None,
            final_norm: dict | None = None, **options) -> torch.Tensor:
    """(B, L, D) through N encoder layers -> (B, L, D); each layer reads the previous one's output."""
    _check_stack_inputs(layers, final_norm)
    hidden = x
    for params in layers:
        hidden = encoder_layer(hidden, params, num_heads, mask, **options)  # pass `hidden` on
    if final_norm is not None:
        hidden = layer_norm(hidden, final_norm["gamma"], final_norm["beta"], options.get("eps", 1e-5))
    return hidden


def decoder(x: torch.Tensor, memory: torch.Tensor, layers: list[dict], num_heads: int,
            self_mask: torch.Tensor | None = None, memory_mask: torch.Tensor | None = None,
            final_norm: dict | None = None, **options) -> torch.Tensor:
    """(B, Lt, D) through N decoder layers, all attending to the same `memory` -> (B, Lt, D)."""
    _check_stack_inputs(layers, final_norm)
    hidden = x
    for params in layers:
        hidden = decoder_layer(hidden, memory, params, num_heads, self_mask, memory_mask, **options)
    if final_norm is not None:
        hidden = layer_norm(hidden, final_norm["gamma"], final_norm["beta"], options.get("eps", 1e-5))
    return hidden


def _check_encoder_layer_inputs(x, params) -> None:
    require_ndim("x", x, 3, "(B, L, d_model)")
    require_keys("params", params, ENCODER_KEYS)


def _check_decoder_layer_inputs(x, memory, params, num_heads, self_mask, memory_mask) -> None:
    require_ndim("x", x, 3, "(B, Lt, d_model)")
    require_ndim("memory", memory, 3, "(B, Ls, d_model)")
    require_size("memory", memory, 0, x.size(0), "batch size of x")
    require_size("memory", memory, 2, x.size(2), "d_model of x")
    require_like("memory", memory, "x", x)
    require_keys("params", params, DECODER_KEYS)
    require_positive_int("num_heads", num_heads)
    batch, tgt_len, src_len = x.size(0), x.size(1), memory.size(1)
    require_mask("self_mask", self_mask, (batch, num_heads, tgt_len, tgt_len), "(B, H, Lt, Lt)")
    require_mask("memory_mask", memory_mask, (batch, num_heads, tgt_len, src_len), "(B, H, Lt, Ls)")


def _check_stack_inputs(layers, final_norm) -> None:
    if isinstance(layers, dict) or not hasattr(layers, "__iter__"):  # a dict: one layer's params
        raise TypeError(f"layers: expected a list of layer params dicts, one per layer, "
                        f"got {type(layers).__name__}; for one layer pass [params]")
    if not layers:
        raise ValueError("layers: expected at least one layer's params, got an empty list")
    if final_norm is not None:
        require_keys("final_norm", final_norm, ("gamma", "beta"))


def init_encoder_layer_params(d_model: int, d_ff: int, generator: torch.Generator | None = None,
                              dtype: torch.dtype = torch.float32, device=None) -> dict:
    require_positive_int("d_model", d_model)
    kwargs = dict(generator=generator, dtype=dtype, device=device)
    return {"self_attn": init_mha_params(d_model, **kwargs),
            "ffn": init_ffn_params(d_model, d_ff, **kwargs),
            "norm1": init_norm_params(d_model, dtype, device),
            "norm2": init_norm_params(d_model, dtype, device)}


def init_decoder_layer_params(d_model: int, d_ff: int, generator: torch.Generator | None = None,
                              dtype: torch.dtype = torch.float32, device=None) -> dict:
    require_positive_int("d_model", d_model)
    kwargs = dict(generator=generator, dtype=dtype, device=device)
    return {"self_attn": init_mha_params(d_model, **kwargs),
            "cross_attn": init_mha_params(d_model, **kwargs),
            "ffn": init_ffn_params(d_model, d_ff, **kwargs),
            "norm1": init_norm_params(d_model, dtype, device),
            "norm2": init_norm_params(d_model, dtype, device),
            "norm3": init_norm_params(d_model, dtype, device)}
