"""The random cases of the exercises of tfmlib/exercises/masks.py: many seeded cases of the same
kinds as the notebook's, for judging whether two functions behave the same."""
from __future__ import annotations

import torch

from tfmlib.exercises.core import Case
from tfmlib.exercises.masks import _ids


def _batch_random_cases(seed: int) -> list[Case]:
    """(B, L) right-padded ids of any size: B = 1, L = 1, rows as long as L, of length 1 or of
    padding only; pad id 0 or another, with id 0 then a real token."""
    g = torch.Generator().manual_seed(seed)

    def draw(low, high):
        return int(torch.randint(low, high + 1, (), generator=g))

    cases = [Case("one token", (_ids([1], 1, 0, g), 0)),
             Case("one pad token, pad id 2", (_ids([0], 1, 2, g), 2))]
    for _ in range(8):
        batch, max_len, pad_id = draw(1, 5), draw(1, 9), draw(0, 3)
        lengths = [draw(0, max_len) for _ in range(batch)]
        cases.append(Case(f"lengths {lengths} of {max_len}, pad id {pad_id}",
                          (_ids(lengths, max_len, pad_id, g), pad_id)))
    return cases


def _causal_random_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    lengths = [1, 2, 3] + torch.randint(4, 40, (5,), generator=g).tolist()
    return [Case(f"seq_len={n}", (n,)) for n in lengths]


# exercise name -> seed -> cases
RANDOM_CASES = {
    "padding_mask": _batch_random_cases,
    "causal_mask": _causal_random_cases,
    "target_mask": _batch_random_cases,
}
