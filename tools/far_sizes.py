"""`make far-sizes`: how far each exercise's check tiles each axis, counted once and stored.

A check tiles every axis of its contract (but the batch) past 1024 where the reference does
that in about 50 ms on one core, else past 512 where that costs so little, else not that far
(tfmlib.exercises.core.variations). The cost is counted, not timed, so that every machine
derives the same cases: the reference's multiply-adds (FlopCounterMode) plus every element its
operations write, on the axis tiled past 256. Counting enters TorchDispatchModes, whose first
use imports torch._dynamo and sympy (2-3 s): too slow for a learner's first check, so the sizes
are counted here and stored in tfmlib/data/far_sizes.json, and tests/test_far_sizes.py counts
them again and fails when the stored table is stale.

    python tools/far_sizes.py          # print the table
    python tools/far_sizes.py --write  # store it
"""
from __future__ import annotations

import json
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

from tfmlib.exercises import REGISTRY
from tfmlib.exercises import core

FAR_WORK = 2e7  # what one core does in ~50 ms


class _Written(TorchDispatchMode):  # counts the elements every operation writes
    count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.count += sum(t.numel() for t in tree_leaves(out) if isinstance(t, torch.Tensor))
        return out


def work(exercise: core.Exercise, case: core.Case) -> int:
    """The reference's multiply-adds on `case` plus every element it writes."""
    flops, elements = FlopCounterMode(display=False), _Written()
    with flops, elements:
        core._run_safely(exercise, exercise.reference, case)
    return flops.get_total_flops() + elements.count


def far_sizes(exercise: core.Exercise) -> dict[str, int]:
    """{axis: FAR or HALF_FAR} for the axes of `exercise`'s contract tiled that far. The cost
    grows at most as the length squared, so the work past 256 bounds the work past 1024."""
    contract = exercise.contract
    case = exercise.make_cases()[contract.base]
    names = core._argument_names(exercise, case)
    sizes = {}
    for axis in (a for a in contract.axes if a != "B"):
        probe = core._resized(case, names, axis, contract.axes[axis], core.WIDE)
        if probe is None:
            continue
        count = work(exercise, probe)
        size = next((s for s in (core.FAR, core.HALF_FAR) if count < FAR_WORK / (s / core.WIDE) ** 2), None)
        # none where the reference refuses that length (a model's longest context)
        if size is not None and core._reference_accepts(exercise, core._resized(case, names, axis, contract.axes[axis], size)):
            sizes[axis] = size
    return sizes


def table() -> dict[str, dict[str, int]]:
    return {name: sizes for name, exercise in sorted(REGISTRY.items())
            if exercise.contract is not None and (sizes := far_sizes(exercise))}


if __name__ == "__main__":
    text = json.dumps(table(), indent=1, sort_keys=True) + "\n"
    if "--write" in sys.argv[1:]:
        core.FAR_SIZES_FILE.write_text(text)
        print(f"wrote {core.FAR_SIZES_FILE}")
    else:
        print(text, end="")
