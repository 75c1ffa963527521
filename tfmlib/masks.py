"""Notebook 04: which key may each query look at? True means "may attend"."""
from __future__ import annotations

import torch

from ._validation import (require_device, require_integer_ids, require_ndim, require_positive_int,
                          require_token_id)


def padding_mask(token_ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, L) ids -> (B, 1, 1, L) bool: False on padded *keys*.

    The two 1-axes stand for heads and queries: every head and every query row
    of a sample shares that sample's key mask, by broadcasting.
    """
    _check_padding_mask_inputs(token_ids, pad_id)
    return (token_ids != pad_id)[:, None, None, :]  # (B, 1, 1, L)


def causal_mask(seq_len: int, device=None) -> torch.Tensor:
    """(1, 1, L, L) bool, lower triangle True: query i sees keys 0..i, never the future."""
    _check_causal_mask_inputs(seq_len, device)
    allowed = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()  # (L, L)
    return allowed[None, None]  # (1, 1, L, L)


def target_mask(token_ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Decoder self-attention mask: padding & causal -> (B, 1, L, L)."""
    pad = padding_mask(token_ids, pad_id)                                # (B, 1, 1, L)
    causal = causal_mask(token_ids.size(1), device=token_ids.device)     # (1, 1, L, L)
    return pad & causal                                                  # (B, 1, L, L)


def _check_padding_mask_inputs(token_ids, pad_id) -> None:
    require_ndim("token_ids", token_ids, 2, "(B, L)")
    require_integer_ids("token_ids", token_ids)
    require_token_id("pad_id", pad_id)


def _check_causal_mask_inputs(seq_len, device) -> None:
    require_positive_int("seq_len", seq_len)
    require_device(device)
