"""The random cases of the exercises of tfmlib/exercises/sublayers.py: many seeded cases of the same
kinds as the notebook's, for judging whether two functions behave the same."""
from __future__ import annotations

import math

import torch

from tfmlib.exercises.core import Case
from tfmlib.exercises.sublayers import (_as, _away_from_zero, _norm_case, _residual_case,
                                        random_ffn_params)


def _size(g: torch.Generator, low: int, high: int) -> int:
    return int(torch.randint(low, high + 1, (), generator=g))


def _uniform(g: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * float(torch.rand((), generator=g))


def _ffn_random_cases(seed: int) -> list[Case]:
    """The kinds above with random sizes, d_ff below, equal to and above D, plus the
    contract's edges: B = 1 and L = 1, D = 1, an empty sequence, float64."""
    g = torch.Generator().manual_seed(7000 + seed)

    def case(label, dtype=torch.float32, **sizes):
        n = {"B": _size(g, 1, 4), "L": _size(g, 1, 6), "D": _size(g, 1, 9), "d_ff": _size(g, 1, 12),
             **sizes}
        x = _uniform(g, 0.3, 3.0) * torch.randn(n["B"], n["L"], n["D"], generator=g)
        return Case(f"{label}: ({n['B']}, {n['L']}, {n['D']}), d_ff = {n['d_ff']}",
                    (x.to(dtype), _as(dtype, random_ffn_params(n["D"], n["d_ff"], g))))

    d_model = _size(g, 2, 9)
    return [case("random sizes"), case("random sizes"), case("random sizes"),
            case("d_ff < D", D=d_model, d_ff=_size(g, 1, d_model - 1)),
            case("d_ff = D", D=d_model, d_ff=d_model),
            case("one sentence of one token", B=1, L=1),
            case("D = 1", D=1),
            case("empty sequence", L=0),
            case("float64", dtype=torch.float64)]


def _dropout_random_cases(seed: int) -> list[Case]:
    """The kinds above with random shapes and p, plus the contract's edges: p close to 1,
    p = 0.5, 2-D and 4-D x, float64, and (in evaluation or with p = 0) tiny and empty x.

    Training with 0 < p keeps x at >= 6000 entries, so that the zeroed fraction is a fact
    (see _FRACTION_TOLERANCE), and p away from 0.5 (except 0.5 itself), so that "about p"
    and "about 1 - p" are told apart.
    """
    g = torch.Generator().manual_seed(7100 + seed)

    def large(ndim):
        lead = [_size(g, 1, 6) for _ in range(ndim - 1)]
        return (*lead, 6000 // math.prod(lead) + _size(g, 0, 40))

    def small():
        return tuple(_size(g, 0, 4) for _ in range(_size(g, 1, 3)))

    def p_away_from_half():
        return round(_uniform(g, 0.05, 0.42) if _size(g, 0, 1) else _uniform(g, 0.58, 0.9), 3)

    def case(label, shape, p, training, dtype=torch.float32):
        return Case(f"{label}: x {shape}, p = {p}, training={training}",
                    (_away_from_zero(shape, g).to(dtype), p, training))

    return [case("training", large(3), p_away_from_half(), True),
            case("training", large(3), p_away_from_half(), True),
            case("training, p = 0.5", large(3), 0.5, True),
            case("training, p close to 1", large(2), round(_uniform(g, 0.85, 0.95), 3), True),
            case("training, 4-D", large(4), p_away_from_half(), True),
            case("training, float64", large(3), p_away_from_half(), True, torch.float64),
            case("training, 1-D", large(1), p_away_from_half(), True),
            case("evaluation", large(3), p_away_from_half(), False),
            case("evaluation, small", small(), round(_uniform(g, 0.0, 0.9), 3), False),
            case("training, p = 0", small(), 0.0, True),
            case("training, empty", (_size(g, 0, 3), 0, _size(g, 1, 5)), p_away_from_half(), True)]


def _layer_norm_random_cases(seed: int) -> list[Case]:
    """The kinds above with random shapes, spreads, offsets and eps, plus the contract's
    edges: any number of leading axes (none too), L = 1, D = 1 and 2, an empty batch, eps
    left at its default, float64.

    Every row's spread is exactly the one drawn, and offsets stay within 10 spreads: on
    rows closer to constant relative to their offset, and on D = 1 or 2 with a small eps
    (every token normalises to 0 or +-1), the gradient mostly shows float32 rounding
    divided by the standard deviation, and two correct float32 answers (this one,
    F.layer_norm) differ there by more than the check's absolute tolerance.
    """
    g = torch.Generator().manual_seed(7200 + seed)

    def case(label, shape=None, spread=None, eps="random", dtype=torch.float32):
        shape = shape or (_size(g, 1, 4), _size(g, 1, 6), _size(g, 3, 10))
        spread = spread or (0.1, 1.0, 4.0)[_size(g, 0, 2)]
        eps = (1e-5, 1e-4, 1e-3, 0.1, 1.0)[_size(g, 0, 4)] if eps == "random" else eps
        return _norm_case(f"{label}: x {shape}, spread {spread}, eps = {eps}", shape, spread,
                          _uniform(g, -10.0, 10.0) * spread, eps, g, dtype, exact_spread=True)

    d_model = _size(g, 3, 10)
    return [case("random"), case("random"), case("random"),
            case("small spread: eps matters", spread=0.01, eps=1e-5),
            case("eps at its default", eps=None),
            case("one token: L = 1", (_size(g, 1, 3), 1, d_model)),
            case("B = 1, L = D", (1, d_model, d_model)),
            case("2-D", (_size(g, 1, 6), d_model)),
            case("1-D: one vector", (d_model,)),
            case("4-D", (2, _size(g, 1, 3), _size(g, 1, 4), d_model)),
            case("D = 1", (_size(g, 1, 3), _size(g, 1, 4), 1), eps=1.0),
            case("D = 2", (_size(g, 1, 3), _size(g, 1, 4), 2), eps=1.0),
            case("empty batch", (0, _size(g, 1, 4), d_model)),
            case("float64", dtype=torch.float64)]


def _residual_random_cases(seed: int) -> list[Case]:
    """Both designs with random shapes, plus the contract's edges: norm_first left at its
    default, B = 1, L = 1, an empty batch, small spreads (where eps matters) and float64.
    Dropout stays off: the exercise's function has no dropout arguments.

    D stays >= 3 and offsets within a few spreads: with eps fixed at 1e-5, rows close to
    constant relative to their offset (D = 1 or 2 above all) give gradients that mostly
    show float32 rounding (see _layer_norm_random_cases).
    """
    g = torch.Generator().manual_seed(7300 + seed)

    def case(label, norm_first, shape=None, spread=None, **options):
        shape = shape or (_size(g, 1, 3), _size(g, 1, 6), _size(g, 3, 10))
        spread = spread or _uniform(g, 0.3, 3.0)
        design = {True: "Pre-LN", False: "Post-LN", None: "default (Post-LN)"}[norm_first]
        return _residual_case(f"{design}, {label}: x {shape}", shape, norm_first, g, spread,
                              _uniform(g, -2.0, 2.0) * spread, **options)

    return [case("random", False), case("random", True), case("random", None),
            case("one token", bool(_size(g, 0, 1)), (1, 1, _size(g, 3, 8))),
            case("empty batch", bool(_size(g, 0, 1)), (0, _size(g, 1, 4), _size(g, 3, 8))),
            case("small spread", True, spread=0.01),
            case("small spread, small update", False, spread=0.01, update=0.01),
            case("float64", bool(_size(g, 0, 1)), dtype=torch.float64)]


# exercise name -> seed -> cases
RANDOM_CASES = {
    "feed_forward": _ffn_random_cases,
    "dropout": _dropout_random_cases,
    "layer_norm": _layer_norm_random_cases,
    "residual_sublayer": _residual_random_cases,
}
