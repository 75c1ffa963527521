"""Exercise checks that name the mistake, and reference solutions on demand.

    from tfmlib.exercises import check, solution
    check("scaled_dot_product_attention", my_attention)   # PASS / TODO / FAIL with a diagnosis
    solution("scaled_dot_product_attention")              # reveals the reference, on purpose

Each topic module registers its exercises and catalogued mistakes on import.
"""
from .core import REGISTRY, Case, CheckResult, Exercise, Mistake, check, register, solution


def exercise_names() -> list[str]:
    return sorted(REGISTRY)


def catalogue() -> list[tuple[str, str, str]]:
    """Every catalogued mistake as (exercise, mistake name, hint)."""
    return [(e.name, m.name, m.hint) for e in REGISTRY.values() for m in e.mistakes]

from . import attention  # noqa: E402,F401  (registers the exercises)
