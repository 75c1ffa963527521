"""The random cases of the exercises of tfmlib/exercises/embeddings.py: many seeded cases of the same
kinds as the notebook's, for judging whether two functions behave the same."""
from __future__ import annotations

import torch

from tfmlib.embeddings import sinusoidal_positional_encoding
from tfmlib.exercises.core import Case
from tfmlib.exercises.embeddings import _ids_and_table


def _embed_random_cases(seed: int) -> list[Case]:
    """(B, L) ids into a (V, D) table of any size (V = 1, D = 1, odd D), scale on and off,
    and a float64 table."""
    g = torch.Generator().manual_seed(seed)

    def draw(low, high):
        return int(torch.randint(low, high + 1, (), generator=g))

    sizes = [(1, 1, 1, 1), (2, 1, 3, 2)] + [(draw(1, 4), draw(1, 7), draw(1, 20), draw(1, 12))
                                           for _ in range(6)]             # (B, L, V, D)
    cases = []
    for batch, length, vocab_size, d_model in sizes:
        ids, table = _ids_and_table(g, batch, length, vocab_size, d_model)
        for scale in (True, False):
            cases.append(Case(f"B={batch}, L={length}, V={vocab_size}, D={d_model}, scale={scale}",
                              (ids, table), {"scale": scale}))
    ids, table = _ids_and_table(g, 2, 3, 6, 5)
    cases.append(Case("a float64 table", (ids, table.double())))
    return cases


def _pe_random_cases(seed: int) -> list[Case]:
    """Any length from 1 and any even d_model from 2 (max_len stays under 64: at longer
    lengths a float32 angle, as in the Annotated Transformer, drifts past the tolerance)."""
    g = torch.Generator().manual_seed(seed)
    sizes = [(1, 2), (1, 8), (4, 2)] + [(int(torch.randint(1, 65, (), generator=g)),
                                         2 * int(torch.randint(1, 33, (), generator=g))) for _ in range(7)]
    return [Case(f"max_len={max_len}, d_model={d_model}", (max_len, d_model)) for max_len, d_model in sizes]


def _add_random_cases(seed: int) -> list[Case]:
    """x (B, L, D) and a pe (max_len >= L, D), sinusoidal or learned (random): L = 1, L = max_len,
    B = 1, B = L, D = 2, odd D, float64."""
    g = torch.Generator().manual_seed(seed)

    def draw(low, high):
        return int(torch.randint(low, high + 1, (), generator=g))

    sizes = [(1, 1, 2, 1), (3, 3, 4, 3), (2, 4, 5, 4)]        # (B, L, D, max_len)
    for _ in range(6):
        length = draw(1, 8)
        sizes.append((draw(1, 4), length, draw(1, 9), length + draw(0, 6)))
    cases = []
    for batch, length, d_model, max_len in sizes:
        x = torch.randn(batch, length, d_model, generator=g)
        learned = torch.randn(max_len, d_model, generator=g)
        cases.append(Case(f"B={batch}, L={length}, D={d_model}, learned pe of {max_len} rows", (x, learned)))
        if d_model % 2 == 0:
            cases.append(Case(f"B={batch}, L={length}, D={d_model}, sinusoidal pe of {max_len} rows",
                              (x, sinusoidal_positional_encoding(max_len, d_model))))
    x, pe = torch.randn(2, 3, 4, generator=g), torch.randn(5, 4, generator=g)
    cases.append(Case("float64", (x.double(), pe.double())))
    return cases


def _rope_random_cases(seed: int) -> list[Case]:
    """x (..., L, D) with 0 to 3 leading axes, L = 1, D = 2, float64; positions None, an offset,
    or any L integer positions."""
    g = torch.Generator().manual_seed(seed)

    def draw(low, high):
        return int(torch.randint(low, high + 1, (), generator=g))

    shapes = [(1, 2), (3, 1, 2), (2, 2, 1, 6)] + [
        tuple(draw(1, 3) for _ in range(draw(0, 3))) + (draw(1, 7), 2 * draw(1, 6)) for _ in range(6)]
    cases = []
    for shape in shapes:
        x, length, offset = torch.randn(shape, generator=g), shape[-2], draw(1, 50)
        cases += [Case(f"x {shape}", (x,)),
                  Case(f"x {shape}, positions from {offset}", (x,),
                       {"positions": torch.arange(offset, offset + length)}),
                  Case(f"x {shape}, positions in any order", (x,),
                       {"positions": torch.randint(0, 64, (length,), generator=g)})]
    cases.append(Case("float64", (torch.randn(2, 5, 4, generator=g).double(),)))
    return cases


# exercise name -> seed -> cases
RANDOM_CASES = {
    "embed": _embed_random_cases,
    "sinusoidal_positional_encoding": _pe_random_cases,
    "add_positional_encoding": _add_random_cases,
    "apply_rope": _rope_random_cases,
}
