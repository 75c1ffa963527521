"""The random cases of the exercises of tfmlib/exercises/shapes.py: many seeded cases of the same
kinds as the notebook's, for judging whether two functions behave the same."""
from __future__ import annotations

import random

from tfmlib.exercises.core import Case
from tfmlib.exercises.shapes import _clashes, _fits


def _random_cases(seed: int) -> list[Case]:
    """Pairs that broadcast and pairs that clash, 0 to 6 axes with sizes 0 to 9: a result
    shape, of which each side keeps the last axes and turns some sizes into 1; a clash gives
    one or two aligned pairs of sizes two different values, neither 1."""
    rng = random.Random(100 + seed)

    def pair(ndim, least):
        result = [rng.choice((0, 1, 2, 3, 4, 5, 7, 9)) for _ in range(ndim)]

        def side():
            kept = result[ndim - rng.randint(least, ndim):]
            return [1 if rng.random() < 0.3 else size for size in kept]
        return side(), side()

    cases = []
    for _ in range(6):
        a, b = pair(rng.randint(0, 6), least=0)
        cases.append(_fits(tuple(a), tuple(b), "a random pair that broadcasts"))
    for _ in range(6):
        a, b = pair(rng.randint(1, 6), least=1)
        shared = min(len(a), len(b))
        for axis in rng.sample(range(1, shared + 1), rng.randint(1, min(2, shared))):
            a[-axis], b[-axis] = rng.sample((0, 2, 3, 4, 5, 6, 8), 2)
        cases.append(_clashes(tuple(a), tuple(b), "a random clash"))
    cases += [_fits((0,), (1,), "(0,) with (1,)"), _fits((), (), "two scalars"),
              _fits((1, 1), (0,), "size 0 against two 1s")]
    return cases


# exercise name -> seed -> cases
RANDOM_CASES = {
    "broadcast_shape": _random_cases,
}
