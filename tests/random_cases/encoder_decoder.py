"""The random cases of the exercises of tfmlib/exercises/encoder_decoder.py: many seeded cases of the same
kinds as the notebook's, for judging whether two functions behave the same."""
from __future__ import annotations

import random

import torch

from tfmlib.exercises.core import Case
from tfmlib.exercises.encoder_decoder import random_decoder_params, random_encoder_params
from tfmlib.exercises.multihead import causal, padding

# The masks the notebook hands a layer: none, padding (B, 1, 1, L), causal (1, 1, L, L), both (B, 1, L, L).
_MASKS = ("no mask", "padding mask", "causal mask", "causal & padding mask")


def _double(value):
    """`value` (a tensor, or dicts, lists and tuples of them) with every float tensor made float64."""
    if isinstance(value, torch.Tensor):
        return value.double() if value.is_floating_point() else value
    if isinstance(value, dict):
        return {k: _double(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_double(v) for v in value)
    return value


# The masks the notebook hands a decoder layer's self-attention and its cross-attention.
_SELF_MASKS = ("no mask", "causal mask", "causal & padding mask")
_MEMORY_MASKS = ("no mask", "padding mask")


def _mask(kind: str, lengths: list[int], length: int):
    if kind == "no mask":
        return None
    if kind == "padding mask":
        return padding(lengths, length)
    if kind == "causal mask":
        return causal(length)
    return causal(length) & padding(lengths, length)


def _random_shapes(rng: random.Random) -> list[tuple[str, int, int]]:
    """(what, batch, length) of one seed's cases: the edges of the contract (an empty batch,
    no tokens, one token, one head, float64), then random sizes."""
    return ([("empty batch", 0, rng.randint(1, 5)), ("no tokens", rng.randint(1, 3), 0),
             ("one token", rng.randint(1, 3), 1), ("one head", rng.randint(1, 3), rng.randint(2, 7)),
             ("float64", rng.randint(1, 3), rng.randint(2, 7))]
            + [("random", rng.randint(1, 3), rng.randint(2, 7)) for _ in range(4)])


def _random_sizes(rng: random.Random, what: str) -> tuple[int, int, int]:
    """(num_heads, d_model, d_ff). d_model = num_heads * d_k is at least 2: a LayerNorm over a
    single feature returns beta whatever its input, which would hide everything before it."""
    heads = 1 if what == "one head" else rng.randint(1, 4)
    return heads, heads * rng.randint(2 if heads == 1 else 1, 3), rng.randint(1, 24)


def _lengths(rng: random.Random, batch: int, length: int) -> list[int]:
    """Sentence lengths for a padding mask: at least one real token where there is room."""
    return [rng.randint(min(1, length), length) for _ in range(batch)]


def _random_encoder_cases(seed: int, stack: bool) -> list[Case]:
    """Random cases of `encoder` (stack=True: 1 to 4 layers) or of `encoder_layer`."""
    rng, g = random.Random(seed), torch.Generator().manual_seed(8000 + seed)
    cases = []
    for what, batch, length in _random_shapes(rng):
        heads, d_model, d_ff = _random_sizes(rng, what)
        kind, count = rng.choice(_MASKS), rng.randint(1, 4)
        x = rng.uniform(0.3, 3.0) * torch.randn(batch, length, d_model, generator=g)
        params = [random_encoder_params(d_model, d_ff, g) for _ in range(count)] if stack \
            else random_encoder_params(d_model, d_ff, g)
        mask = _mask(kind, _lengths(rng, batch, length), length)
        args = _double((x, params, heads)) if what == "float64" else (x, params, heads)
        label = f"{what}: (B, L, D) = ({batch}, {length}, {d_model}), heads={heads}, {kind}"
        cases.append(Case(f"{label}, layers={count}" if stack else label,
                          args, {} if mask is None else {"mask": mask}))
    return cases


def _random_decoder_layer_cases(seed: int) -> list[Case]:
    """Random sizes with Lt and Ls drawn apart, random masks of each kind; besides the edges
    of _random_shapes, an empty memory (Ls = 0) and a single source token."""
    rng, g = random.Random(seed), torch.Generator().manual_seed(8200 + seed)
    cases = []
    for what, batch, lt in _random_shapes(rng) + [("empty memory", rng.randint(1, 3), rng.randint(1, 6)),
                                                  ("one source token", rng.randint(1, 3), rng.randint(1, 6))]:
        heads, d_model, d_ff = _random_sizes(rng, what)
        ls = {"empty memory": 0, "one source token": 1}.get(what, rng.randint(1, 7))
        self_kind, memory_kind = rng.choice(_SELF_MASKS), rng.choice(_MEMORY_MASKS)
        x = rng.uniform(0.3, 3.0) * torch.randn(batch, lt, d_model, generator=g)
        memory = rng.uniform(0.3, 3.0) * torch.randn(batch, ls, d_model, generator=g)
        self_mask = _mask(self_kind, _lengths(rng, batch, lt), lt)
        memory_mask = _mask(memory_kind, _lengths(rng, batch, ls), ls)
        args = (x, memory, random_decoder_params(d_model, d_ff, g), heads, self_mask, memory_mask)
        cases.append(Case(f"{what}: (B, Lt, Ls, D) = ({batch}, {lt}, {ls}, {d_model}), heads={heads}, "
                          f"self_mask: {self_kind}, memory_mask: {memory_kind}",
                          _double(args) if what == "float64" else args))
    return cases


# exercise name -> seed -> cases
RANDOM_CASES = {
    "encoder_layer": lambda seed: _random_encoder_cases(seed, stack=False),
    "encoder": lambda seed: _random_encoder_cases(seed, stack=True),
    "decoder_layer": _random_decoder_layer_cases,
}
