"""The random cases of the exercises of tfmlib/exercises/language_model.py: many seeded cases of the same
kinds as the notebook's, for judging whether two functions behave the same."""
from __future__ import annotations

import random

import torch

from tfmlib.exercises.core import Case
from tfmlib.exercises.language_model import _block_case, _forward_case
from tfmlib.language_model import LMConfig
from .encoder_decoder import _double

# The masks a caller hands the block: none (the causal default), causal & padding (a padded
# batch), and masks with no causal part (the block must use them as given).
_MASKS = ("default (None)", "causal & padding", "padding only", "all True")


def _random_decoder_block_cases(seed: int) -> list[Case]:
    """Random sizes and masks, and the edges: one token, one head, an empty batch, float64."""
    rng, g = random.Random(seed), torch.Generator().manual_seed(14000 + seed)
    cases = []
    for what in ("one token", "one head", "empty batch", "float64") + ("random",) * 5:
        heads = 1 if what == "one head" else rng.randint(1, 4)
        d_model, d_ff = heads * rng.randint(2 if heads == 1 else 1, 4), rng.randint(1, 24)
        batch = 0 if what == "empty batch" else rng.randint(1, 3)
        length = 1 if what == "one token" else rng.randint(2, 7)
        lengths = [rng.randint(1, length) for _ in range(batch)]
        case = _block_case(what, g, batch, length, d_model, d_ff, heads, rng.choice(_MASKS), lengths,
                           scale=rng.uniform(0.3, 3.0))
        cases.append(Case(case.label, _double(case.args), case.kwargs) if what == "float64" else case)
    return cases


def _random_lm_config(rng: random.Random, what: str) -> LMConfig:
    heads = rng.randint(1, 3)
    d_model = heads * rng.randint(2 if heads == 1 else 1, 4)
    vocab = d_model if what == "vocab_size == d_model" else rng.randint(2, 13)
    return LMConfig(vocab, d_model=d_model, num_heads=heads, d_ff=rng.randint(1, 16),
                    num_layers=rng.randint(1, 3), max_len=rng.randint(1, 8))


def _random_lm_forward_cases(seed: int, *, extra: int = 0) -> list[Case]:
    """Random configs and lengths up to max_len (+ `extra`: lm_loss reads one more), and the
    edges: one token, a full context, an empty batch, vocab_size == d_model, float64."""
    rng, g = random.Random(seed), torch.Generator().manual_seed(14100 + seed)
    cases = []
    # An empty batch has no position to average a loss over (nan): lm_forward's edge only.
    edges = ("shortest", "full context") + (() if extra else ("empty batch",))
    for what in edges + ("vocab_size == d_model", "float64") + ("random",) * 4:
        config = _random_lm_config(rng, what)
        longest = config.max_len + extra
        length = {"shortest": 1 + extra, "full context": longest}.get(what, rng.randint(1 + extra, longest))
        batch = 0 if what == "empty batch" else rng.randint(1, 3)
        case = _forward_case(what, g, batch, length, config)
        cases.append(Case(case.label, _double(case.args)) if what == "float64" else case)
    return cases


# exercise name -> seed -> cases
RANDOM_CASES = {
    "decoder_block": _random_decoder_block_cases,
    "lm_forward": _random_lm_forward_cases,
    "lm_loss": lambda seed: _random_lm_forward_cases(seed, extra=1),
}
