"""Every mechanically made wrong version of a reference solution fails its exercise's check.

tests/mutants.py makes the mutants and decides which are equivalent (they behave like the
reference on the exercise's own cases plus many random ones); see its docstring. Each
exercise is one test, so a failure lists that exercise's surviving mutants, and pytest-xdist
spreads the exercises over the CPU's cores. The table in benchmarks/MUTANTS.md is written by
`make mutants` from the same functions.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutants import (judge_exercise, learners_wait, lines_run, random_case_set, wait_table,  # noqa: E402
                     with_time_limit)

from tfmlib.exercises import REGISTRY, check  # noqa: E402
from tfmlib.exercises.core import behaves_like_reference  # noqa: E402

# Exercises whose reference is too short to give 30 non-equivalent mutants: for these
# every non-equivalent mutant the generator can make must be rejected, however few.
SHORT = {"add_positional_encoding", "causal_mask", "next_token_probs", "padding_mask", "shift_right"}
# About this many mutants per exercise that judge() rejected without check() are given to check().
CONFIRMED_PER_EXERCISE = 3


# Both tests of an exercise on one pytest-xdist worker (make test's --dist loadgroup): the reference's
# run on the random cases, and its outcomes there, are then made once for both (tests/mutants.py).
EXERCISES = [pytest.param(name, marks=pytest.mark.xdist_group(f"mutants {name}")) for name in sorted(REGISTRY)]


@pytest.mark.parametrize("name", EXERCISES)
def test_the_reference_passes_on_its_own_and_on_the_random_cases(name):
    """Else every mutant would look rejected (or equivalent) for the wrong reason."""
    assert check(name, REGISTRY[name].reference)
    assert lines_run(name)  # runs the reference on random_case_set(name): fails unless it passes on every case


@pytest.mark.parametrize("name", EXERCISES)
def test_every_non_equivalent_mutant_is_rejected(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # mutants trip torch's deprecation warnings on purpose
        verdicts = judge_exercise(name)
    survivors = [v for v in verdicts if not v.equivalent and not v.rejected]
    assert not survivors, "mutants that passed the check:\n" + "\n".join(
        f"  {v.mutant.function}: {v.mutant.description} in `{v.mutant.line}`" for v in survivors)
    non_equivalent = sum(not v.equivalent for v in verdicts)
    assert name in SHORT or non_equivalent >= 30, f"only {non_equivalent} non-equivalent mutants"
    # judge() rejects most mutants at the first case where the check engine's comparison tells
    # them from the reference, without calling check() (see its docstring); check() must agree.
    compared = [v for v in verdicts if v.differs_on is not None]
    own_cases = REGISTRY[name].make_cases()
    for verdict in compared[::max(1, len(compared) // CONFIRMED_PER_EXERCISE)]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # the time limit ends a mutant that loops forever on a later case: check() fails it
            result = with_time_limit(lambda: check(name, verdict.mutant.answer, own_cases))
        assert not result, (f"check() passes a mutant that differs on case {verdict.differs_on!r}: "
                            f"{verdict.mutant.description} in `{verdict.mutant.line}`")
    # judge() calls a mutant equivalent without running it on the random cases where its change lies
    # on lines the reference never runs there (lines_run); running it must agree.
    never_run = [v for v in verdicts if v.never_run]
    for verdict in never_run[::max(1, len(never_run) // CONFIRMED_PER_EXERCISE)]:
        answer = verdict.mutant.answer
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            alike = with_time_limit(lambda: behaves_like_reference(name, answer, random_case_set(name)))
        assert alike, (f"a mutant of lines the reference never runs differs from it: "
                       f"{verdict.mutant.description} in `{verdict.mutant.line}`")


def test_the_table_of_waits_counts_each_checks_cases_and_names_the_slowest():
    waits = {name: learners_wait(name) for name in ("shift_right", "decoder_layer")}
    assert waits["shift_right"].cases == len(REGISTRY["shift_right"].cases())
    assert all(w.first > 0 and w.again > 0 for w in waits.values())
    text = "\n".join(wait_table(waits))
    assert f"| `shift_right` | {waits['shift_right'].cases} |" in text
    slowest = max(waits, key=lambda name: waits[name].first)
    assert f"The slowest check is `{slowest}`'s" in text
