"""Argument checks shared by every module.

Each helper raises a ``TypeError`` or ``ValueError`` whose message names the
argument, what was expected and what came, so a learner never has to decode an
error from deep inside torch.
"""
from __future__ import annotations

import numbers

import torch

from .shapes import broadcast_shape


def shape_str(x: torch.Tensor) -> str:
    return str(tuple(x.shape))  # "(2, 3)", and "(4,)" for a 1-D tensor, like Python writes tuples


def require_tensor(name: str, value, *, layout: str | None = None) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        expected = f"a tensor of shape {layout}" if layout else "a tensor"
        raise TypeError(f"{name}: expected {expected}, got {type(value).__name__}")
    return value


def require_ndim(name: str, x, ndim: int, layout: str) -> torch.Tensor:
    require_tensor(name, x, layout=layout)
    if x.dim() != ndim:
        raise ValueError(
            f"{name}: expected a {ndim}-D tensor {layout}, got shape {shape_str(x)}"
        )
    return x


def require_min_ndim(name: str, x, ndim: int, layout: str) -> torch.Tensor:
    require_tensor(name, x, layout=layout)
    if x.dim() < ndim:
        raise ValueError(
            f"{name}: expected at least {ndim} dimensions {layout}, got shape {shape_str(x)}"
        )
    return x


def require_like(name: str, x: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    """x must share ref's dtype and device. torch refuses a matmul of float32 with float64,
    and any operation across two devices, with a message that names neither argument."""
    if x.dtype != ref.dtype:
        raise TypeError(f"{name}: expected dtype {ref.dtype} like {ref_name}, got {x.dtype}")
    require_same_device(name, x, ref_name, ref)


def require_same_device(name: str, x: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    if x.device != ref.device:
        raise ValueError(f"{name}: expected a tensor on {ref.device} like {ref_name}, "
                         f"got one on {x.device}")


def require_float(name: str, x: torch.Tensor) -> torch.Tensor:
    if not x.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor, got dtype {x.dtype}")
    return x


def require_integer_ids(name: str, x) -> torch.Tensor:
    require_tensor(name, x, layout="of integer token ids")
    if x.dtype in (torch.bool,) or x.is_floating_point() or x.is_complex():
        raise TypeError(
            f"{name}: expected integer token ids (torch.long), got dtype {x.dtype}"
        )
    return x


def require_size(name: str, x: torch.Tensor, dim: int, size: int, what: str) -> None:
    if x.size(dim) != size:
        raise ValueError(
            f"{name}: expected size {size} ({what}) on axis {dim}, "
            f"got shape {shape_str(x)}"
        )


def require_positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected a positive int, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name}: expected a positive int, got {value}")
    return value


def require_non_negative(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a float >= 0, got {value!r}")
    if not value >= 0.0:  # also refuses nan
        raise ValueError(f"{name}: expected a float >= 0, got {value}")
    return float(value)


def require_token_id(name: str, value) -> int:
    """One id, such as the `<pad>` id: an int or a NumPy integer, not the token's str or a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected an int token id such as vocab['<pad>'], got {value!r}")
    return value


def require_factory_args(generator, dtype, device) -> None:
    """How new tensors are made: checked here, where the error can name the argument."""
    require_generator(generator)
    require_float_dtype(dtype)
    require_device(device)


def require_generator(generator) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator or None, got {generator!r}")


def require_float_dtype(dtype) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype: expected a floating-point torch.dtype such as torch.float32, "
                        f"got {dtype!r}")


def require_device(device) -> None:
    if device is None:
        return
    try:
        torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device: expected a device such as 'cpu' or 'cuda', got {device!r}") from None


def require_probability(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a float in [0, 1), got {value!r}")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name}: expected a float in [0, 1), got {value}")
    return float(value)


def require_mask(name: str, mask, target_shape: tuple[int, ...], target_layout: str):
    """A mask must be bool (True = may attend) and broadcast to the scores' shape."""
    if mask is None:
        return None
    require_tensor(name, mask, layout="of bools")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name}: expected a bool tensor (True = may attend), got dtype {mask.dtype}"
        )
    try:  # not torch.broadcast_shapes: its first call imports sympy (about 1 s)
        broadcast = broadcast_shape(mask.shape, target_shape)
    except ValueError:
        broadcast = None
    if broadcast != tuple(target_shape):
        raise ValueError(
            f"{name}: shape {shape_str(mask)} does not broadcast to the scores' shape "
            f"{tuple(target_shape)} {target_layout}"
        )
    return mask


def require_keys(name: str, params, keys: tuple[str, ...]) -> None:
    if not isinstance(params, dict):
        raise TypeError(f"{name}: expected a dict with keys {keys}, got {type(params).__name__}")
    missing = [k for k in keys if k not in params]
    if missing:
        raise ValueError(
            f"{name}: missing keys {missing}; expected {keys}, got {tuple(params)}"
        )


def require_params_like(name: str, params: dict, keys: tuple[str, ...], ref_name: str,
                        ref: torch.Tensor) -> None:
    """Every tensor of `params` (a bias may be None) shares ref's dtype and device."""
    for key in keys:
        value = params.get(key)
        if isinstance(value, torch.Tensor):
            require_like(f"{name}[{key!r}]", value, ref_name, ref)
