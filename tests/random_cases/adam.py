"""The random cases of the exercises of tfmlib/exercises/adam.py: many seeded cases of the same
kinds as the notebook's, for judging whether two functions behave the same."""
from __future__ import annotations

import torch

from tfmlib.exercises.adam import _Gradients, _Problem, _Quadratic, _Steps, _with_decay
from tfmlib.exercises.core import Case


def _random_problems(seed: int, betas: bool = True) -> list[_Problem]:
    """Problems of every kind above with random sizes and hyperparameters: 1 to 4 parameters
    of any shape (a scalar, an empty one), float32 or float64, gradients from 1e-9 to 1e2 (to
    1e20 in float64), fixed ones that may be missing on any step, or from a loss; lr from 0,
    beta1 from 0 and beta2 from 0.5, up to just below 1."""
    g = torch.Generator().manual_seed(900 + seed)

    def uniform(low, high):
        return low + (high - low) * float(torch.rand((), generator=g))

    def integer(low, high):
        return int(torch.randint(low, high + 1, (), generator=g))

    shapes = [(), (0,), (1,), (3,), (2, 3), (4, 1), (2, 1, 3)]
    problems = []
    for index in range(8):
        dtype = torch.float64 if index % 3 == 2 else torch.float32
        count, steps = integer(1, 4), integer(1, 5)
        params = [torch.randn(shapes[integer(0, len(shapes) - 1)], generator=g, dtype=dtype)
                  for _ in range(count)]
        lr = 0.0 if index == 7 else round(uniform(0.001, 0.5), 4)
        pair = (round(uniform(0.0, 0.99), 3), round(uniform(0.5, 0.9999), 4)) if betas else None
        problem = _Problem(f"random problem {index + 1}: {count} {dtype} parameters", params, lr,
                           pair, steps)
        if index % 4 == 3:  # gradients from a loss of the first few parameters
            problem.loss = _Quadratic([p.shape for p in params[:integer(1, count)]], g, dtype)
        else:
            top = 21.0 if dtype == torch.float64 and index % 2 else 2.0
            scales = [10 ** uniform(-9.0, top) for _ in params]
            chance = [[1.0, 0.0, 0.6][integer(0, 2)] for _ in params]  # always, never, sometimes
            problem.grads = [[scale * torch.randn(p.shape, generator=g, dtype=dtype)
                              if float(torch.rand((), generator=g)) < keep else None
                              for p, scale, keep in zip(params, scales, chance)]
                             for _ in range(steps)]
        problems.append(problem)
    return problems


def _random_cases(seed: int) -> list[Case]:
    return [Case(problem.description, (problem,)) for problem in _random_problems(seed)]


def _sgd_random_cases(seed: int) -> list[Case]:
    return [Case(problem.description, (problem,)) for problem in _random_problems(seed, betas=False)]


def _adamw_random_cases(seed: int) -> list[Case]:
    problems = _random_problems(seed)
    g = torch.Generator().manual_seed(950 + seed)
    decays = [0.0 if i == 5 else round(3 * float(torch.rand((), generator=g)), 3) for i in range(len(problems))]
    for problem in problems[1::3]:  # eps from 1e-9 (the paper's) to 1e-2
        problem.eps = float(f"{10 ** (-9 + 7 * float(torch.rand((), generator=g))):.2g}")
    return [Case(problem.description, (problem,)) for problem in _with_decay(problems, decays)]


def _clip_random_cases(seed: int) -> list[Case]:
    """1 to 5 parameters of any shape, float32 or float64, gradients from 1e-3 to 1e3 or none,
    max_norm from 0 to 10 (above or below the norm), sometimes one tensor not in a list."""
    g = torch.Generator().manual_seed(920 + seed)
    shapes = [(), (0,), (1,), (3,), (2, 3), (4, 1), (2, 1, 3)]

    def integer(low, high):
        return int(torch.randint(low, high + 1, (), generator=g))

    cases = []
    for index in range(8):
        dtype = torch.float64 if index % 2 else torch.float32
        params = [torch.randn(shapes[integer(0, len(shapes) - 1)], generator=g, dtype=dtype)
                  for _ in range(integer(1, 5))]
        grads = [None if integer(0, 3) == 0 else 10 ** (6 * float(torch.rand((), generator=g)) - 3)
                 * torch.randn(p.shape, generator=g, dtype=dtype) for p in params]
        max_norm = 0.0 if index == 6 else round(10 * float(torch.rand((), generator=g)), 3)
        if index == 7:  # a total norm below the 1e-6 added to it: `norm - 1e-6` would flip signs
            grads = [None if grad is None else grad * 1e-9 for grad in grads]
        problem = _Gradients(f"random problem {index + 1}: {len(params)} {dtype} parameters", params,
                             grads, max_norm, as_one_tensor=len(params) == 1 and index % 3 == 0)
        cases.append(Case(problem.description, (problem,)))
    return cases


def _steps_around(g: torch.Generator, warmup: int, last: int) -> tuple:
    """1, 2, the steps around the end of the warm-up, a few random ones, and `last`."""
    picks = {1, 2, max(1, warmup - 1), warmup, warmup + 1, warmup + 2, last}
    picks |= {int(s) for s in torch.randint(1, last + 1, (6,), generator=g)}
    return tuple(sorted(picks))


def _inverse_sqrt_random_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(930 + seed)
    cases = []
    for index in range(6):
        d_model, warmup = int(torch.randint(1, 1025, (), generator=g)), int(torch.randint(1, 5001, (), generator=g))
        factor = round(0.1 + 3 * float(torch.rand((), generator=g)), 3)
        steps = (0,) if index == 0 else _steps_around(g, warmup, 3 * warmup + 10)
        cases.append(Case(f"random schedule {index + 1}",
                          (_Steps(f"random {index + 1}", steps, (d_model, warmup, factor)),)))
    return cases


def _cosine_random_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(940 + seed)
    cases = []
    for index in range(6):
        total = int(torch.randint(1, 500, (), generator=g))
        warmup = total if index == 4 else int(torch.randint(1, total + 1, (), generator=g))
        peak = round(10 ** (-4 + 4 * float(torch.rand((), generator=g))), 6)
        final = 0.0 if index == 3 else round(float(torch.rand((), generator=g)), 3)
        steps = (0,) + _steps_around(g, warmup, total + 5)
        cases.append(Case(f"random schedule {index + 1}",
                          (_Steps(f"random {index + 1}", steps, (peak, warmup, total, final)),)))
    return cases


# exercise name -> seed -> cases
RANDOM_CASES = {
    "adam": _random_cases,
    "sgd_step": _sgd_random_cases,
    "adamw_step": _adamw_random_cases,
    "clip_grad_norm": _clip_random_cases,
    "warmup_inverse_sqrt_lr": _inverse_sqrt_random_cases,
    "warmup_cosine_lr": _cosine_random_cases,
}
