"""A check's verdict, and the mistake it names, depend on the answer alone: not on the global
random state (torch's generator, Python's `random`, NumPy's) that the cells before it left, nor on
the checks run before it in the same process. And a check leaves those random states as it found
them: the notebook's seeded cells draw the same numbers whether or not a check ran in between.

The exercises whose checks draw random numbers elsewhere than from a generator seeded where the
cases are made (found by reading tfmlib/exercises/ and the references it calls): `dropout` (its
reference and every catalogued mistake draw from torch's global generator), `forward` (the model's
dropout, in its training cases), `residual_sublayer` (a sublayer with dropout inside, drawing from a
generator of its own that each run copies). The second test checks every answer of those under
other states and orders, at about 1 s of CPU per answer; the first holds for every exercise, at
the cost of one case each, and fails at once when a run does not start from one random state.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from tfmlib.exercises import REGISTRY, check


def _seed_every_generator(seed: int):
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def _random_states():
    return torch.get_rng_state(), random.getstate(), np.random.get_state()


def _same_states(first, second) -> bool:
    (t1, r1, n1), (t2, r2, n2) = first, second
    return torch.equal(t1, t2) and r1 == r2 and n1[0] == n2[0] and np.array_equal(n1[1], n2[1]) \
        and n1[2:] == n2[2:]


def _drawing(fn, draws: list):
    """fn (each function of a pair), noting what every generator gives at the start of each call."""
    if isinstance(fn, tuple):
        return tuple(_drawing(f, draws) for f in fn)

    def drawing(*args, **kwargs):
        draws.append((torch.rand(1).item(), random.random(), float(np.random.random())))
        return fn(*args, **kwargs)
    return drawing


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_each_run_of_an_answer_draws_the_same_numbers_and_the_caller_keeps_its_own(name):
    exercise = REGISTRY[name]
    case = exercise.make_cases()[0]
    runs = []
    for seed in (1, 2):
        _seed_every_generator(seed)
        random.random(), np.random.random()  # the states of another cell before: not only a seed
        before, draws = _random_states(), []
        check(name, _drawing(exercise.reference, draws), [case, case])
        assert _same_states(before, _random_states()), "the check changed the caller's random numbers"
        runs.append(draws)
    half = len(runs[0]) // 2  # the same case twice: two runs
    assert runs[0] and runs[0][:half] == runs[0][half:], "two runs of one case drew other numbers"
    assert runs[0] == runs[1], "the numbers drawn depend on the random state the check was called in"


def test_deriving_the_cases_leaves_the_callers_random_state(monkeypatch):
    exercise = REGISTRY["shift_right"]
    monkeypatch.delattr(exercise, "_cases", raising=False)  # derived afresh, as in a grader's warm kernel
    _seed_every_generator(3)
    before = _random_states()
    assert exercise.cases()
    assert _same_states(before, _random_states())


# ---- the exercises that draw random numbers: every verdict, under other states and orders -------

def dropout_numpy(x, p, training=True):
    """A NumPy user's dropout: right."""
    if not training or p == 0.0:
        return x
    keep = torch.from_numpy(np.random.rand(*x.shape) >= p)
    return x * keep / (1 - p)


def dropout_numpy_one_mask(x, p, training=True):
    """One (D,) mask from NumPy, broadcast over the other axes: at p = 0.00123 it drops one of
    D entries, or none, as the draws fall."""
    if not training or p == 0.0:
        return x
    keep = torch.from_numpy(np.random.rand(x.shape[-1]) >= p)
    return x * keep / (1 - p)


def dropout_python_random(x, p, training=True):
    """A plain-Python dropout, one random.random() per entry: right."""
    if not training or p == 0.0:
        return x
    keep = torch.tensor([random.random() >= p for _ in range(x.numel())]).reshape(x.shape)
    return x * keep / (1 - p)


def dropout_percent_grid(x, p, training=True):
    """Issue 32's answer: randint(0, 100) < p * 100 drops on a grid of whole percents."""
    if not training or p == 0.0:
        return x
    keep = torch.tensor([random.randint(0, 99) >= p * 100 for _ in range(x.numel())]).reshape(x.shape)
    return x * keep / (1 - p)


LEARNERS = {"dropout": (dropout_numpy, dropout_numpy_one_mask, dropout_python_random, dropout_percent_grid)}
RIGHT = {dropout_numpy, dropout_python_random}


def _answers(name):
    exercise = REGISTRY[name]
    return [exercise.reference, *(v for m in exercise.mistakes for v in m.variants), *LEARNERS.get(name, ())]


def _verdicts(name, answers, seeds):
    """check's status and named mistake for each answer, every generator seeded first as `seeds` say."""
    verdicts = {}
    for answer, seed in zip(answers, seeds):
        _seed_every_generator(seed)
        torch.rand(seed), random.random(), np.random.random()  # left as a cell leaves them, not just seeded
        result = check(name, answer)
        verdicts[answer] = (result.status, result.mistake)
    return verdicts


@pytest.mark.parametrize("name", ["dropout", "forward", "residual_sublayer"])
def test_a_random_exercises_verdicts_do_not_depend_on_the_random_state_or_the_order_of_checks(name):
    answers = _answers(name)
    first = _verdicts(name, answers, [1] * len(answers))
    # the catalogue's outcomes are now kept from the states above (or from earlier tests): every
    # answer checked under another state, in the other order (after the checks that followed it)
    again = _verdicts(name, answers[::-1], range(100, 100 + len(answers)))
    changed = [(i, getattr(a, "__name__", a), first[a], again[a]) for i, a in enumerate(answers)
               if first[a] != again[a]]
    assert not changed, changed
    assert all((first[a][0] == "passed") == (a is answers[0] or a in RIGHT) for a in answers), first
