"""The random cases of the exercises of tfmlib/exercises/generation.py: many seeded cases of the same
kinds as the notebook's, for judging whether two functions behave the same."""
from __future__ import annotations

import torch

from tfmlib.exercises.core import Case
from tfmlib.exercises.generation import (INF, _attention_case, _exact_threshold_logits,
                                         _lm_step_case, _random_logits)
from tfmlib.language_model import LMConfig


def _sizes(g: torch.Generator):
    return lambda low, high: int(torch.randint(low, high + 1, (), generator=g))


def _some_minus_inf(logits, g, share=0.3):
    """`logits` with a share of entries set to -inf (as an earlier filter leaves them), never
    the largest of a row."""
    drop = torch.rand(logits.shape, generator=g) < share
    drop &= logits < logits.amax(dim=-1, keepdim=True)
    return logits.masked_fill(drop, -INF)


def _temperature_random_cases(seed: int) -> list[Case]:
    """1 to 3 axes, V from 1 to 12, T from 0.1 to 5 (and the int 2), float32 or float64,
    logits of scale 0.5 to 40, some rows with -inf entries."""
    g = torch.Generator().manual_seed(1400 + seed)
    size = _sizes(g)
    cases = []
    for index in range(8):
        shape = tuple(size(1, 4) for _ in range(size(0, 2))) + (size(1, 12),)
        dtype = (torch.float32, torch.float64)[size(0, 1)]
        logits = _random_logits(g, shape, dtype, scale=(0.5, 3.0, 40.0)[index % 3])
        if index % 4 == 3:
            logits = _some_minus_inf(logits, g)
        temperature = 2 if index == 5 else round(0.1 + 4.9 * float(torch.rand((), generator=g)), 3)
        cases.append(Case(f"random case {index + 1}: {shape}, T = {temperature}", (logits, temperature)))
    return cases


def _top_k_random_cases(seed: int) -> list[Case]:
    """1 to 3 axes, V from 1 to 10, k from 1 to V + 2, integer logits (ties) or not, float32 or
    float64, some entries already -inf."""
    g = torch.Generator().manual_seed(1410 + seed)
    size = _sizes(g)
    cases = []
    for index in range(8):
        shape = tuple(size(1, 4) for _ in range(size(0, 2))) + (size(1, 10),)
        dtype = (torch.float32, torch.float64)[size(0, 1)]
        logits = _random_logits(g, shape, dtype, integer=index % 2 == 0)
        if index % 3 == 2:
            logits = _some_minus_inf(logits, g)
        k = size(1, shape[-1] + 2)
        cases.append(Case(f"random case {index + 1}: {shape}, k = {k}", (logits, k)))
    return cases


def _top_p_random_cases(seed: int) -> list[Case]:
    """1 to 3 axes, V from 1 to 10, p anywhere in (0, 1] (1 included), integer logits (ties)
    or not, float32 or float64, some entries already -inf; and the exact-threshold rows."""
    g = torch.Generator().manual_seed(1420 + seed)
    size = _sizes(g)
    cases = [Case("exact threshold, float64", (_exact_threshold_logits(torch.float64), 0.75))]
    for index in range(8):
        shape = tuple(size(1, 4) for _ in range(size(0, 2))) + (size(1, 10),)
        dtype = (torch.float32, torch.float64)[size(0, 1)]
        logits = _random_logits(g, shape, dtype, integer=index % 2 == 0, scale=(1.0, 3.0)[index % 2])
        if index % 3 == 2:
            logits = _some_minus_inf(logits, g)
        p = 1.0 if index == 7 else round(0.02 + 0.96 * float(torch.rand((), generator=g)), 3)
        cases.append(Case(f"random case {index + 1}: {shape}, p = {p}", (logits, p)))
    return cases


def _attention_random_cases(seed: int) -> list[Case]:
    """B from 1 to 3, 1 to 4 heads of d_k 1 to 4, 1 to 4 new tokens after 0 to 5 cached ones
    (or no cache at all), float32 or float64."""
    g = torch.Generator().manual_seed(1430 + seed)
    size = _sizes(g)
    cases = []
    for index in range(6):
        past = None if index == 0 else size(0 if index % 2 else 1, 5)
        dtype = (torch.float32, torch.float64)[size(0, 1)]
        cases.append(_attention_case(f"random case {index + 1}", g, size(1, 3), size(1, 4), past,
                                     size(1, 4), size(1, 4), dtype))
    return cases


def _lm_step_random_cases(seed: int) -> list[Case]:
    """Models of 1 to 3 blocks, 1 to 3 heads of d_k 1 to 3, V from 2 to 9; 1 to 3 new tokens
    after 1 to 6 cached (or none)."""
    g = torch.Generator().manual_seed(1440 + seed)
    size = _sizes(g)
    cases = []
    for index in range(4):
        heads = size(1, 3)
        config = LMConfig(vocab_size=size(2, 9), d_model=heads * size(1, 3), num_heads=heads,
                          d_ff=size(1, 8), num_layers=size(1, 3), max_len=10)
        past = None if index == 0 else size(1, 6)
        cases.append(_lm_step_case(f"random case {index + 1}", g, config, size(1, 3), past, size(1, 3)))
    return cases


# exercise name -> seed -> cases
RANDOM_CASES = {
    "next_token_probs": _temperature_random_cases,
    "top_k_filter": _top_k_random_cases,
    "top_p_filter": _top_p_random_cases,
    "cached_self_attention": _attention_random_cases,
    "lm_step": _lm_step_random_cases,
}
