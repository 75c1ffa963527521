"""The random cases of the exercises of tfmlib/exercises/attention.py: many seeded cases of the same
kinds as the notebook's, for judging whether two functions behave the same."""
from __future__ import annotations

import torch

from tfmlib.exercises.core import Case


def _random_cases(seed: int) -> list[Case]:
    """Every kind of case above with random sizes, plus the contract's edges: no batch axis,
    Lq = 1, Lk = 1, d_k = 1, an empty batch, float64, 2-D and per-query masks."""
    g = torch.Generator().manual_seed(500 + seed)

    def size(low, high):
        return int(torch.randint(low, high + 1, (), generator=g))

    def case(label, lead, mask=None, visible=0.7, dtype=torch.float32, d_k=None, **lengths):
        """`lead`: the leading axes, from "B" and "H"; `mask`: its shape, from "B", "1", "q", "k";
        `lengths`: sizes to fix instead of drawing them (B=0, q=1, ...)."""
        n = {"B": size(1, 3), "H": size(1, 3), "q": size(1, 6), "k": size(1, 6), "1": 1, **lengths}
        d_k, d_v = d_k or size(1, 9), size(1, 9)
        lead = tuple(n[axis] for axis in lead)
        scale = 0.5 + 2.5 * float(torch.rand((), generator=g))  # soft and sharp softmaxes
        q, k, v = (scale * torch.randn(*lead, n["q"], d_k, generator=g, dtype=dtype),
                   torch.randn(*lead, n["k"], d_k, generator=g, dtype=dtype),
                   torch.randn(*lead, n["k"], d_v, generator=g, dtype=dtype))
        kwargs = {} if mask is None else {
            "mask": torch.rand(tuple(n[axis] for axis in mask), generator=g) < visible}
        return Case(label, (q, k, v), kwargs)

    return [
        case("3-D, no mask", "B"),
        case("4-D with heads, no mask", "BH"),
        case("padding mask (B, 1, 1, Lk)", "BH", "B11k"),
        case("per-query mask (B, 1, Lq, Lk)", "BH", "B1qk", visible=0.5),
        case("shared mask (1, 1, Lq, Lk), some rows fully masked", "BH", "11qk", visible=0.3),
        case("3-D with a 2-D mask (Lq, Lk)", "B", "qk"),
        case("no batch axis: (Lq, d_k)", "", "qk"),
        case("one query, one key, d_k = 1", "BH", "B11k", visible=0.5, q=1, k=1, d_k=1),
        case("one key", "B", k=1),
        case("empty batch", "BH", "B11k", B=0),
        case("float64", "BH", "B1qk", dtype=torch.float64),
    ]


# exercise name -> seed -> cases
RANDOM_CASES = {
    "scaled_dot_product_attention": _random_cases,
}
