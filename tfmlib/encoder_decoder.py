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
                  training: bool = False, eps: float = 1e-5,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """(B, L, D) -> (B, L, D): a self-attention sublayer, then an FFN sublayer.

    `mask` broadcasts to (B, H, L, L), e.g. a padding mask (B, 1, 1, L).
    residual_sublayer (notebook 07) adds each sublayer's output back and applies its
    LayerNorm: after the add (Post-LN, the default) or before the sublayer (norm_first).
    """
    _check_encoder_layer_inputs(x, params, num_heads, mask)

    def attend(h):  # (B, L, D) -> (B, L, D): queries, keys and values all come from h
        return multi_head_attention(h, h, h, params["self_attn"], num_heads, mask)[0]  # [0]: output

    def ffn(h):     # (B, L, D) -> (B, L, D): each token on its own
        return feed_forward(h, params["ffn"], activation)

    # How residual_sublayer wraps each sublayer: Post-LN or Pre-LN, dropout, LayerNorm's eps.
    wrap = dict(norm_first=norm_first, dropout_p=dropout_p, training=training, eps=eps,
                generator=generator)
    x = residual_sublayer(x, attend, params["norm1"], **wrap)   # (B, L, D)
    x = residual_sublayer(x, ffn, params["norm2"], **wrap)      # (B, L, D)
    return x


def decoder_layer(x: torch.Tensor, memory: torch.Tensor, params: dict, num_heads: int,
                  self_mask: torch.Tensor | None = None, memory_mask: torch.Tensor | None = None,
                  *, norm_first: bool = False, activation: str = "relu", dropout_p: float = 0.0,
                  training: bool = False, eps: float = 1e-5,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """(B, Lt, D), memory (B, Ls, D) -> (B, Lt, D).

    1. masked self-attention: `self_mask` (B, 1, Lt, Lt) should be causal, so a
       target position cannot peek at the tokens it must predict;
    2. cross-attention: queries from the decoder, keys and values from the
       encoder's `memory`; `memory_mask` (B, 1, 1, Ls) hides padded source tokens;
    3. position-wise FFN.
    """
    _check_decoder_layer_inputs(x, memory, params, num_heads, self_mask, memory_mask)

    def attend(h):         # (B, Lt, D) -> (B, Lt, D): the target looks at itself
        return multi_head_attention(h, h, h, params["self_attn"], num_heads, self_mask)[0]

    def attend_memory(h):  # (B, Lt, D) -> (B, Lt, D): queries from h, keys and values from memory
        return multi_head_attention(h, memory, memory, params["cross_attn"], num_heads,
                                    memory_mask)[0]

    def ffn(h):            # (B, Lt, D) -> (B, Lt, D)
        return feed_forward(h, params["ffn"], activation)

    # How residual_sublayer wraps each sublayer: Post-LN or Pre-LN, dropout, LayerNorm's eps.
    wrap = dict(norm_first=norm_first, dropout_p=dropout_p, training=training, eps=eps,
                generator=generator)
    x = residual_sublayer(x, attend, params["norm1"], **wrap)          # (B, Lt, D)
    x = residual_sublayer(x, attend_memory, params["norm2"], **wrap)   # (B, Lt, D)
    x = residual_sublayer(x, ffn, params["norm3"], **wrap)             # (B, Lt, D)
    return x


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


@torch.no_grad()  # weights to look at, not to train: no autograd graph
def stack_attention_weights(x: torch.Tensor, layers: list[dict], num_heads: int,
                            mask: torch.Tensor | None = None, *, memory: torch.Tensor | None = None,
                            memory_mask: torch.Tensor | None = None, norm_first: bool = False,
                            activation: str = "relu", eps: float = 1e-5) -> dict:
    """The attention weights of every layer of a stack, in evaluation (no dropout).

    Encoder stack (no memory): x (B, L, D), mask ->
        {"self_attn": [(B, H, L, L), one per layer]}
    Decoder stack: x (B, Lt, D), mask (its self_mask), memory (B, Ls, D), memory_mask ->
        {"self_attn": [(B, H, Lt, Lt), ...], "cross_attn": [(B, H, Lt, Ls), ...]}
    The keys are those of the layer params the weights come from. The real encoder_layer or
    decoder_layer passes `hidden` on; each attention's weights are computed again from the
    input that attention reads inside the layer.
    """
    _check_stack_attention_inputs(layers, memory, memory_mask)
    options = dict(norm_first=norm_first, activation=activation, eps=eps)
    weights = {"self_attn": []} if memory is None else {"self_attn": [], "cross_attn": []}
    hidden = x
    for params in layers:
        # The real layer (it also checks every input) gives the next layer's input.
        if memory is None:
            output = encoder_layer(hidden, params, num_heads, mask, **options)
        else:
            output = decoder_layer(hidden, memory, params, num_heads, mask, memory_mask, **options)
        # Self-attention reads the layer's input.
        h = _attention_input(hidden, params["norm1"], norm_first, eps)
        self_out, self_weights = multi_head_attention(h, h, h, params["self_attn"], num_heads, mask)
        weights["self_attn"].append(self_weights)                        # (B, H, L, L)
        if memory is not None:
            # Cross-attention reads the output of the first sublayer (self-attention, whose
            # update self_out was computed just above from the h this sublayer is handed).
            after_self = residual_sublayer(hidden, lambda _: self_out, params["norm1"],
                                           norm_first=norm_first, eps=eps)
            h = _attention_input(after_self, params["norm2"], norm_first, eps)
            _, cross_weights = multi_head_attention(h, memory, memory, params["cross_attn"],
                                                    num_heads, memory_mask)
            weights["cross_attn"].append(cross_weights)                  # (B, H, Lt, Ls)
        hidden = output
    return weights


def _attention_input(hidden: torch.Tensor, norm: dict, norm_first: bool, eps: float) -> torch.Tensor:
    """The tensor an attention sublayer reads, as residual_sublayer (notebook 07) hands it over.

    The one place where Post-LN and Pre-LN differ for the weights:
      Post-LN: LayerNorm(h + attention(h)): attention reads the hidden state h itself;
      Pre-LN:  h + attention(LayerNorm(h)): attention reads h after the sublayer's LayerNorm.
    """
    return layer_norm(hidden, norm["gamma"], norm["beta"], eps) if norm_first else hidden


def _check_encoder_layer_inputs(x, params, num_heads, mask) -> None:
    require_ndim("x", x, 3, "(B, L, d_model)")
    require_keys("params", params, ENCODER_KEYS)
    require_positive_int("num_heads", num_heads)
    batch, length = x.size(0), x.size(1)
    require_mask("mask", mask, (batch, num_heads, length, length), "(B, H, L, L)")


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


def _check_stack_attention_inputs(layers, memory, memory_mask) -> None:
    _check_stack_inputs(layers, None)
    if memory is None and memory_mask is not None:
        raise ValueError("memory_mask: given without memory; pass memory=... for a decoder stack's "
                         "weights, or leave memory_mask out for an encoder stack's")


def init_encoder_layer_params(d_model: int, d_ff: int, generator: torch.Generator | None = None,
                              dtype: torch.dtype = torch.float32, device=None) -> dict:
    """{"self_attn", "ffn", "norm1", "norm2"}: what one encoder layer learns."""
    return _init_layer_params(ENCODER_KEYS, d_model, d_ff, generator, dtype, device)


def init_decoder_layer_params(d_model: int, d_ff: int, generator: torch.Generator | None = None,
                              dtype: torch.dtype = torch.float32, device=None) -> dict:
    """The encoder layer's entries plus "cross_attn" and "norm3"."""
    return _init_layer_params(DECODER_KEYS, d_model, d_ff, generator, dtype, device)


def _init_layer_params(keys, d_model, d_ff, generator, dtype, device) -> dict:
    """One entry per key, made in the order of `keys` (the order of the random draws)."""
    require_positive_int("d_model", d_model)

    def init(key):
        if key in ("self_attn", "cross_attn"):
            return init_mha_params(d_model, generator=generator, dtype=dtype, device=device)
        if key == "ffn":
            return init_ffn_params(d_model, d_ff, generator=generator, dtype=dtype, device=device)
        return init_norm_params(d_model, dtype, device)  # norm1, norm2, norm3

    return {key: init(key) for key in keys}
