"""The random cases of the exercises of tfmlib/exercises/training.py: many seeded cases of the same
kinds as the notebook's, for judging whether two functions behave the same."""
from __future__ import annotations

import torch

from tfmlib.exercises.core import Case
from tfmlib.exercises.training import _bos_eos, _model, _smoothing_case
from tfmlib.training import ModelConfig, PAD_ID, make_batch, shift_right


def _shift_random_cases(seed: int) -> list[Case]:
    """Batches of both tasks from make_batch: 1 to 6 sequences of 0 to 9 digits (so L from 2),
    padded or not, and the shortest target of all, <bos> <eos>."""
    g = torch.Generator().manual_seed(1000 + seed)

    def integer(low, high):
        return int(torch.randint(low, high + 1, (), generator=g))

    cases = [Case("<bos> <eos>", (_bos_eos(),))]
    for _ in range(8):
        task, count, low = ("reverse", "sum")[integer(0, 1)], integer(1, 6), integer(0, 3)
        high = integer(max(low, 1), 9)  # the empty sequence is in the held-out split only
        tgt = make_batch(task, count, low, high, bool(integer(0, 1)), g)[1]
        cases.append(Case(f"{task} task, B={count}, L={tgt.size(1)}", (tgt,)))
    return cases


def _forward_random_cases(seed: int) -> list[Case]:
    """Models of other sizes (1 or 2 layers, 1 to 4 heads of d_k 2 or 4, Pre-LN and Post-LN,
    dropout 0 to 0.5), batches of 1 to 4 sequences of 0 to 7 digits, in evaluation and training."""
    g = torch.Generator().manual_seed(1100 + seed)

    def integer(low, high):
        return int(torch.randint(low, high + 1, (), generator=g))

    cases = []
    for index in range(6):
        heads = integer(1, 4)
        config = ModelConfig(d_model=heads * 2 * integer(1, 2), num_heads=heads, d_ff=integer(1, 12),
                             num_layers=integer(1, 2), max_len=10, norm_first=bool(integer(0, 1)),
                             dropout_p=(0.0, 0.1, 0.5)[integer(0, 2)])
        low = integer(0, 3)
        src, tgt = make_batch(("reverse", "sum")[integer(0, 1)], integer(1, 4), low,
                              integer(max(low, 1), 7), False, g)  # an empty source is held out
        training = index % 2 == 1
        cases.append(Case(f"random model {index + 1}, B={src.size(0)}, training={training}",
                          (_model(config, g), src, shift_right(tgt)[0], config, training)))
    return cases


def _smoothing_random_cases(seed: int) -> list[Case]:
    """1 to 3 leading axes of sizes 1 to 5, V from 2 to 12, float32 or float64, smoothing 0, 1 or
    anything between, <pad> = 0 or -100 ignored with padded rows of any length (at least one
    position kept), logits of scale 1 to 60 (softmax underflows at the top)."""
    g = torch.Generator().manual_seed(1200 + seed)

    def integer(low, high):
        return int(torch.randint(low, high + 1, (), generator=g))

    cases = []
    for index in range(8):
        shape = tuple(integer(1, 5) for _ in range(integer(1, 3)))
        vocab = integer(2, 12)
        ignore_index = (PAD_ID, -100)[integer(0, 1)]
        if ignore_index == PAD_ID and vocab == 2:
            vocab = 3   # one class besides <pad> would make every label the same
        smoothing = (0.0, 1.0, round(float(torch.rand((), generator=g)), 3))[index % 3]
        lengths = torch.randint(0, shape[-1] + 1, shape[:-1], generator=g)
        lengths.view(-1)[0] = max(1, int(lengths.view(-1)[0]))   # at least one position kept
        dtype = (torch.float32, torch.float64)[integer(0, 1)]
        scale = (1.0, 5.0, 60.0)[integer(0, 2)]
        cases.append(_smoothing_case(f"random case {index + 1}: {shape + (vocab,)}, smoothing "
                                     f"{smoothing}, ignore_index {ignore_index}", shape, vocab,
                                     smoothing, ignore_index, g, lengths.tolist(), scale, dtype))
    return cases


# exercise name -> seed -> cases
RANDOM_CASES = {
    "shift_right": _shift_random_cases,
    "forward": _forward_random_cases,
    "label_smoothed_cross_entropy": _smoothing_random_cases,
}
