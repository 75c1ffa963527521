"""Bonus notebook b2: the time to score one new token against the length of the text so far,
with the KV cache (`lm_step` on the one new token) and without it (`lm_forward` on all L + 1),
on an untrained language model (speed does not depend on what the weights learned).
"""
from __future__ import annotations

import math
from pathlib import Path

import torch

from tfmlib.language_model import LMConfig, init_lm_params
from tfmlib.viz.generation import plot_time_per_token, time_per_token

from .timing import Measured

PLOT_NAME = "generation_vs_length.png"
FULL = dict(lengths=(64, 128, 256, 512, 1024), batch_size=16, d_model=64, repeats=5)
QUICK = dict(lengths=(16, 32, 64), batch_size=2, d_model=16, repeats=2)
WAYS = (("with the cache", True), ("without the cache", False))


def per_token(lengths, batch_size: int, d_model: int, repeats: int):
    """-> (config, {True: seconds per token with the cache, False: without}, one per length)."""
    config = LMConfig(vocab_size=32, d_model=d_model, num_heads=4, d_ff=4 * d_model, num_layers=2,
                      max_len=max(lengths) + 1)
    params = init_lm_params(config, torch.Generator().manual_seed(0))
    seconds = {use_cache: time_per_token(params, config, lengths, use_cache, batch_size, repeats)
               for _, use_cache in WAYS}
    return config, seconds


def rows(quick: bool = False, out: Path | None = None) -> list[Measured]:
    """One row per length and way; with `out`, also the figure of both curves (PLOT_NAME)."""
    sizes = QUICK if quick else FULL
    config, seconds = per_token(**sizes)
    lengths = sizes["lengths"]
    if out is not None:
        import matplotlib.pyplot as plt

        fig = plot_time_per_token(lengths, seconds[True], seconds[False])
        fig.savefig(out / PLOT_NAME, dpi=100, bbox_inches="tight")
        plt.close(fig)
    model = (f"batch {sizes['batch_size']}, D={config.d_model}, H={config.num_heads}, "
             f"{config.num_layers} layers")
    result = []
    for i, length in enumerate(lengths):
        speed_up = seconds[False][i] / seconds[True][i]
        for name, use_cache in WAYS:
            note = model if use_cache else f"{speed_up:.1f} x the time with the cache"
            result.append(Measured("generation", f"L = {length}: {name}", seconds[use_cache][i],
                                   None, note))
    return result


def slopes(measured: list[Measured]) -> dict[str, float]:
    """Slope of log(time) against log(L) between the two longest lengths, per way: about 1
    where the time per token grows like L, about 2 where it grows like L^2."""
    out = {}
    for name, _ in WAYS:
        points = [(int(r.what.split(":")[0].removeprefix("L = ")), r.seconds)
                  for r in measured if r.what.endswith(name)]
        (l1, t1), (l2, t2) = points[-2:]
        out[name] = math.log(t2 / t1) / math.log(l2 / l1)
    return out
