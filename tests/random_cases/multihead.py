"""The random cases of the exercises of tfmlib/exercises/multihead.py: many seeded cases of the same
kinds as the notebook's, for judging whether two functions behave the same."""
from __future__ import annotations

import torch

from tfmlib.exercises.core import Case
from tfmlib.exercises.multihead import random_mha_params


def _sizes(g: torch.Generator):
    """size(low, high): a random int in [low, high], drawn from `g`."""
    return lambda low, high: int(torch.randint(low, high + 1, (), generator=g))


def _linear_random_cases(seed: int) -> list[Case]:
    """Inputs of 1 to 4 axes, in != out, square, in = out = 1, bias or None, empty, float64."""
    g = torch.Generator().manual_seed(600 + seed)
    size = _sizes(g)

    def case(label, lead, n_in=None, n_out=None, bias=True, dtype=torch.float32):
        n_in, n_out = n_in or size(1, 8), n_out or size(1, 8)
        x = torch.randn(*lead, n_in, generator=g, dtype=dtype)
        weight = torch.randn(n_out, n_in, generator=g, dtype=dtype)
        return Case(label, (x, weight, torch.randn(n_out, generator=g, dtype=dtype) if bias else None))

    b, length, d = size(1, 3), size(1, 5), size(2, 8)
    return [case("(B, L, in) -> (B, L, out)", (b, length)),
            case("2-D input", (size(1, 5),)),
            case("bias=None", (b, length), bias=False),
            case("square weight", (b, length), n_in=d, n_out=d),
            case("one vector (in,)", ()),
            case("4-D input", (2, b, length)),
            case("in = out = 1", (b, length), n_in=1, n_out=1),
            case("empty batch", (0, length)),
            case("float64", (b, length), dtype=torch.float64)]


def _heads_random_cases(seed: int, split: bool) -> list[Case]:
    """(B, L, H * d_k) and H for split_heads, (B, H, L, d_k) for merge_heads: one head,
    d_k = 1, one token, an empty batch, float64."""
    g = torch.Generator().manual_seed((610 if split else 620) + seed)
    size = _sizes(g)

    def case(label, batch=None, heads=None, length=None, d_k=None, dtype=torch.float32):
        batch, heads = size(1, 3) if batch is None else batch, heads or size(1, 4)
        length, d_k = length or size(1, 6), d_k or size(1, 4)
        if split:
            return Case(label, (torch.randn(batch, length, heads * d_k, generator=g, dtype=dtype), heads))
        return Case(label, (torch.randn(batch, heads, length, d_k, generator=g, dtype=dtype),))

    return [case("random sizes"), case("random sizes"), case("one head", heads=1),
            case("d_k = 1", d_k=1), case("one token", length=1), case("empty batch", batch=0),
            case("float64", dtype=torch.float64)]


def _mha_random_cases(seed: int) -> list[Case]:
    """Self- and cross-attention (Lq != Lk, key is or is not value), every mask layout the
    docstring allows, fully masked rows, one head, d_k = 1, one token, float64."""
    g = torch.Generator().manual_seed(630 + seed)
    size = _sizes(g)

    def case(label, heads=None, d_k=None, lq=None, lk=None, mask=None, cross=True, shared_kv=False,
             visible=0.7, dtype=torch.float32):
        """`mask`: its shape, from "B", "H", "1", "q", "k"."""
        heads, d_k = heads or size(1, 3), d_k or size(1, 4)
        batch, d_model = size(1, 3), heads * d_k
        lq = lq or size(1, 6)
        lk = (lk or size(1, 6)) if cross else lq
        x = lambda n: torch.randn(batch, n, d_model, generator=g, dtype=dtype)  # noqa: E731
        query = x(lq)
        key = x(lk) if cross else query
        value = key if shared_kv or not cross else x(lk)
        params = {name: t.to(dtype) for name, t in random_mha_params(d_model, g).items()}
        n = {"B": batch, "H": heads, "1": 1, "q": lq, "k": lk}
        kwargs = {} if mask is None else {
            "mask": torch.rand(tuple(n[axis] for axis in mask), generator=g) < visible}
        return Case(label, (query, key, value, params, heads), kwargs)

    return [case("self-attention, no mask", cross=False),
            case("cross-attention, key is value, padding mask (B, 1, 1, Lk)", shared_kv=True, mask="B11k"),
            case("cross-attention, key != value, mask (B, 1, Lq, Lk)", mask="B1qk"),
            case("self-attention, shared mask (1, 1, Lq, Lk), rows fully masked", cross=False,
                 mask="11qk", visible=0.3),
            case("cross-attention, a mask per head (B, H, Lq, Lk)", mask="BHqk"),
            case("one head", heads=1, mask="B11k"),
            case("d_k = 1", d_k=1, mask="B1qk"),
            case("one query, one key", lq=1, lk=1),
            case("float64", mask="B11k", dtype=torch.float64)]


# exercise name -> seed -> cases
RANDOM_CASES = {
    "linear": _linear_random_cases,
    "split_heads": lambda seed: _heads_random_cases(seed, split=True),
    "merge_heads": lambda seed: _heads_random_cases(seed, split=False),
    "multi_head_attention": _mha_random_cases,
}
