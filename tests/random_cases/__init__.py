"""Many seeded cases per exercise, of the same kinds as the notebook's (random sizes, the edges
of each contract), for tests that judge whether two functions behave the same: the mutation
test of the checks (tests/mutants.py) and the tests that correct answers pass beyond the
notebook's cases. They live here, not in tfmlib: a learner's check never runs them.

    from random_cases import random_cases
    random_cases("encode", seed=0)   # -> list[Case]
"""
from __future__ import annotations

from tfmlib.exercises import Case

from . import (adam, attention, embeddings, encoder_decoder, generation, language_model, masks,
               multihead, shapes, sublayers, tokenization, training)

# exercise name -> seed -> cases
GENERATORS = {name: make for topic in (shapes, tokenization, embeddings, masks, attention, multihead,
                                       sublayers, encoder_decoder, adam, training, language_model,
                                       generation)
              for name, make in topic.RANDOM_CASES.items()}


def random_cases(name: str, seed: int) -> list[Case]:
    """Exercise `name`'s random cases for `seed`: the same seed gives the same cases."""
    return GENERATORS[name](seed)
