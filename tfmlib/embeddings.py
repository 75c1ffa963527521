"""Notebook 03: ids (B, L) -> vectors (B, L, D), plus where each token sits."""
from __future__ import annotations

import math

import torch

from ._validation import (require_device, require_factory_args, require_float, require_float_dtype,
                          require_integer_ids, require_like, require_min_ndim, require_ndim,
                          require_positive_int, require_same_device, require_tensor, shape_str)


def embed(token_ids: torch.Tensor, table: torch.Tensor, scale: bool = True) -> torch.Tensor:
    """(B, L) ids, (V, D) table -> (B, L, D), multiplied by sqrt(D).

    The lookup is plain indexing: row `id` of the table. The scaling by sqrt(D) is
    the paper's (Vaswani et al., 3.4), which gives no reason for it. The usual one: a
    table drawn with standard deviation 1/sqrt(D), as in the paper's reference code
    (tensor2tensor), comes back to entries of size about 1, and is not drowned by the
    positional encoding, whose entries lie in [-1, 1].
    """
    _check_embed_inputs(token_ids, table)
    vectors = table[token_ids]  # (B, L, D)
    return vectors * math.sqrt(table.size(1)) if scale else vectors


def sinusoidal_positional_encoding(max_len: int, d_model: int, base: float = 10000.0,
                                   dtype: torch.dtype = torch.float32,
                                   device=None) -> torch.Tensor:
    """(max_len, d_model): PE[pos, 2i] = sin(pos / base^(2i/d)), PE[pos, 2i+1] = cos(same)."""
    _check_sinusoidal_inputs(max_len, d_model, base, dtype, device)
    position = torch.arange(max_len, dtype=torch.float64, device=device)[:, None]  # (L, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64, device=device)        # (D/2,)
    inv_freq = base ** (-two_i / d_model)                                           # (D/2,)
    angle = position * inv_freq                                                     # (L, D/2)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64, device=device)
    pe[:, 0::2] = torch.sin(angle)  # even columns
    pe[:, 1::2] = torch.cos(angle)  # odd columns
    return pe.to(dtype)


def add_positional_encoding(x: torch.Tensor, pe: torch.Tensor) -> torch.Tensor:
    """(B, L, D) + (max_len, D)[:L] -> (B, L, D); the (L, D) slice broadcasts over B."""
    _check_add_positional_inputs(x, pe)
    return x + pe[: x.size(1)]


def learned_positional_encoding(max_len: int, d_model: int, generator=None,
                                dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """(max_len, d_model) trainable table, used exactly like the sinusoidal one."""
    require_positive_int("max_len", max_len)
    require_positive_int("d_model", d_model)
    require_factory_args(generator, dtype, device)
    table = torch.randn(max_len, d_model, generator=generator, dtype=dtype, device=device)
    return (0.02 * table).requires_grad_()


def rotate_half_pairs(x: torch.Tensor) -> torch.Tensor:
    """(..., D) -> (..., D): each pair (x0, x1) becomes (-x1, x0), a 90-degree turn."""
    _check_pairs(x)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((-odd, even), dim=-1).flatten(-2)


def apply_rope(x: torch.Tensor, positions: torch.Tensor | None = None,
               base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding: (..., L, D) -> (..., L, D).

    Pair (2i, 2i+1) of the vector at position p is rotated by p * base^(-2i/D).
    Applied to queries and keys, q_m . k_n then depends only on m - n.
    """
    _check_rope_inputs(x, positions, base)
    length, dim = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(length, device=x.device)
    inv_freq = base ** (-torch.arange(0, dim, 2, device=x.device, dtype=torch.float64) / dim)
    angle = positions.to(torch.float64)[:, None] * inv_freq          # (L, D/2)
    angle = angle.repeat_interleave(2, dim=-1)                       # (L, D): one angle per pair
    # cos and sin in float64, then cast: an angle of p * base^(-2i/D) rounded to fp16/bf16
    # first would be off by up to p * 2^-8 radians at position p.
    cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    return x * cos + rotate_half_pairs(x) * sin


def _check_embed_inputs(token_ids, table) -> None:
    require_integer_ids("token_ids", token_ids)
    require_ndim("table", table, 2, "(vocab_size, d_model)")
    require_same_device("token_ids", token_ids, "table", table)
    if token_ids.numel() and (token_ids.min() < 0 or token_ids.max() >= table.size(0)):
        raise ValueError(
            f"token_ids: expected ids in [0, {table.size(0)}) (rows of table), "
            f"got min {int(token_ids.min())}, max {int(token_ids.max())}"
        )


def _check_sinusoidal_inputs(max_len, d_model, base, dtype, device) -> None:
    require_positive_int("max_len", max_len)
    require_positive_int("d_model", d_model)
    if d_model % 2:
        raise ValueError(f"d_model: expected an even number (sin/cos pairs), got {d_model}")
    _check_base(base)
    require_float_dtype(dtype)
    require_device(device)


def _check_base(base) -> None:
    """The frequencies are base^(-2i/D): a base <= 0 would make them inf or nan."""
    if isinstance(base, bool) or not isinstance(base, (int, float)):
        raise TypeError(f"base: expected a float > 0 such as 10000.0, got {base!r}")
    if not base > 0:
        raise ValueError(f"base: expected a float > 0 such as 10000.0, got {base}")


def _check_add_positional_inputs(x, pe) -> None:
    require_ndim("x", x, 3, "(B, L, d_model)")
    require_ndim("pe", pe, 2, "(max_len, d_model)")
    if pe.size(1) != x.size(2) or pe.size(0) < x.size(1):
        raise ValueError(
            f"pe: expected at least ({x.size(1)}, {x.size(2)}) to cover x {shape_str(x)}, "
            f"got shape {shape_str(pe)}"
        )
    require_like("pe", pe, "x", x)  # float64 pe would silently make the whole model float64


def _check_pairs(x) -> None:
    require_min_ndim("x", x, 1, "(..., D)")
    if x.size(-1) % 2:
        raise ValueError(f"x: expected an even last dimension (pairs), got shape {shape_str(x)}")


def _check_rope_inputs(x, positions, base) -> None:
    require_min_ndim("x", x, 2, "(..., L, D)")
    require_float("x", x)
    length, dim = x.shape[-2], x.shape[-1]
    if dim % 2:
        raise ValueError(f"x: expected an even last dimension (rotated pairs), got shape {shape_str(x)}")
    if positions is not None:  # None: the function counts 0, 1, ..., L - 1 itself
        require_tensor("positions", positions, layout=f"({length},)")
        if positions.shape != (length,):
            raise ValueError(f"positions: expected shape ({length},), got {shape_str(positions)}")
        require_same_device("positions", positions, "x", x)
    _check_base(base)
