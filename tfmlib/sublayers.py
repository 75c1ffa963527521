"""Notebook 07: the pieces around attention: FFN, dropout, residual add, LayerNorm."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._validation import (require_device, require_factory_args, require_float,
                          require_float_dtype, require_generator, require_keys, require_like,
                          require_min_ndim, require_non_negative, require_params_like,
                          require_positive_int, require_probability, require_tensor, shape_str)
from .multihead import linear

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}
FFN_KEYS = ("w_1", "b_1", "w_2", "b_2")


def activation_fn(name: str):
    if name not in ACTIVATIONS:
        raise ValueError(f"activation: expected one of {sorted(ACTIVATIONS)}, got {name!r}")
    return ACTIVATIONS[name]


def feed_forward(x: torch.Tensor, params: dict, activation: str = "relu") -> torch.Tensor:
    """(B, L, D) -> (B, L, D): the same two-layer network applied to every token on its own.

    w_1 is (d_ff, D): up to the wider hidden size; w_2 is (D, d_ff): back down,
    so the result can be added to the residual stream.
    """
    _check_feed_forward_inputs(x, params)
    hidden = activation_fn(activation)(linear(x, params["w_1"], params["b_1"]))  # (B, L, d_ff)
    return linear(hidden, params["w_2"], params["b_2"])                          # (B, L, D)


def dropout(x: torch.Tensor, p: float, training: bool = True,
            generator: torch.Generator | None = None) -> torch.Tensor:
    """Inverted dropout: zero each entry with probability p, divide survivors by 1 - p.

    Dividing by the keep probability keeps E[output] = x, so evaluation
    (training=False) is simply the identity.
    """
    _check_dropout_inputs(x, p, training, generator)
    if not training or p == 0.0:
        return x
    keep = torch.rand(x.shape, generator=generator, device=x.device) >= p  # True with prob 1 - p
    return x * keep / (1.0 - p)


def layer_norm(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """(..., D) -> (..., D): normalise each token's D features, then scale and shift.

    The variance is the biased one (divide by D), as in nn.LayerNorm.
    """
    _check_layer_norm_inputs(x, gamma, beta, eps)
    mean = x.mean(dim=-1, keepdim=True)                                # (..., 1)
    variance = x.var(dim=-1, keepdim=True, unbiased=False)             # (..., 1)
    return (x - mean) / torch.sqrt(variance + eps) * gamma + beta      # (..., D)


def residual_sublayer(x: torch.Tensor, sublayer, norm: dict, *, norm_first: bool = False,
                      dropout_p: float = 0.0, training: bool = False, eps: float = 1e-5,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """Wrap `sublayer` (a function (B, L, D) -> (B, L, D)) with a residual add and LayerNorm.

    Post-LN (the 2017 paper): LayerNorm(x + Dropout(sublayer(x))).
    Pre-LN (most modern models): x + Dropout(sublayer(LayerNorm(x))); the
    residual path stays an untouched identity, which makes deep stacks train stably.
    """
    sublayer = _check_residual_inputs(x, sublayer, norm)  # wrapped: its output is checked too
    if norm_first:
        update = sublayer(layer_norm(x, norm["gamma"], norm["beta"], eps))
        return x + dropout(update, dropout_p, training, generator)
    update = sublayer(x)
    return layer_norm(x + dropout(update, dropout_p, training, generator),
                      norm["gamma"], norm["beta"], eps)


def _check_feed_forward_inputs(x, params) -> None:
    require_keys("params", params, FFN_KEYS)
    if isinstance(x, torch.Tensor):  # anything else gets linear's error, after the activation's
        require_params_like("params", params, FFN_KEYS, "x", x)


def _check_dropout_inputs(x, p, training, generator) -> None:
    require_tensor("x", x)
    require_probability("p", p)
    require_generator(generator)
    drawing = training and p != 0.0  # only then is the generator used
    if drawing and generator is not None and generator.device.type != x.device.type:
        raise ValueError(f"generator: expected one on x's device ({x.device}), "
                         f"got one on {generator.device}")


def _check_layer_norm_inputs(x, gamma, beta, eps) -> None:
    require_min_ndim("x", x, 1, "(..., d_model)")
    require_float("x", x)
    for name, p in (("gamma", gamma), ("beta", beta)):
        require_tensor(name, p, layout=f"({x.size(-1)},)")
        if p.shape != x.shape[-1:]:
            raise ValueError(f"{name}: expected shape ({x.size(-1)},) to match x {shape_str(x)}, "
                             f"got shape {shape_str(p)}")
        require_like(name, p, "x", x)
    require_non_negative("eps", eps)


def _check_residual_inputs(x, sublayer, norm):
    """-> `sublayer`, wrapped so that an update of another shape or dtype than x is reported:
    x + update would broadcast it silently, or fail inside torch."""
    require_tensor("x", x, layout="(B, L, d_model)")
    require_keys("norm", norm, ("gamma", "beta"))
    if not callable(sublayer):
        raise TypeError(f"sublayer: expected a function (B, L, D) -> (B, L, D), "
                        f"got {type(sublayer).__name__}")

    def checked_sublayer(h):
        update = sublayer(h)
        if not isinstance(update, torch.Tensor):
            raise TypeError(f"sublayer: expected it to return a tensor of shape {shape_str(h)}, "
                            f"got {type(update).__name__}")
        if update.shape != h.shape:
            raise ValueError(f"sublayer: expected it to keep the shape {shape_str(h)} of its input, "
                             f"got {shape_str(update)}")
        require_like("sublayer's output", update, "its input", h)
        return update

    return checked_sublayer


def init_ffn_params(d_model: int, d_ff: int, generator: torch.Generator | None = None,
                    dtype: torch.dtype = torch.float32, device=None) -> dict:
    """nn.Linear's default init: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    require_positive_int("d_model", d_model)
    require_positive_int("d_ff", d_ff)
    require_factory_args(generator, dtype, device)

    def uniform(*shape, fan_in):
        bound = 1 / math.sqrt(fan_in)
        return (2 * torch.rand(*shape, generator=generator, dtype=dtype, device=device) - 1) * bound

    return {"w_1": uniform(d_ff, d_model, fan_in=d_model), "b_1": uniform(d_ff, fan_in=d_model),
            "w_2": uniform(d_model, d_ff, fan_in=d_ff), "b_2": uniform(d_model, fan_in=d_ff)}


def init_norm_params(d_model: int, dtype: torch.dtype = torch.float32, device=None) -> dict:
    require_positive_int("d_model", d_model)
    require_float_dtype(dtype)
    require_device(device)
    return {"gamma": torch.ones(d_model, dtype=dtype, device=device),
            "beta": torch.zeros(d_model, dtype=dtype, device=device)}
