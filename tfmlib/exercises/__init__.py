"""Exercise checks that name the mistake, and reference solutions on demand.

    from tfmlib.exercises import check, solution
    check("scaled_dot_product_attention", my_attention)   # PASS / TODO / FAIL with a diagnosis
    solution("scaled_dot_product_attention")              # reveals the reference, on purpose
    progress()                                            # which exercises you passed, per notebook

Each topic module registers its exercises and catalogued mistakes on import.
"""
from .core import REGISTRY, Case, CheckResult, Exercise, Mistake, check, register
from .solutions import solution
from .tracker import progress, reset_progress


def exercise_names() -> list[str]:
    return sorted(REGISTRY)


def catalogue() -> list[tuple[str, str, str]]:
    """Every catalogued mistake as (exercise, mistake name, hint)."""
    return [(e.name, m.name, m.hint) for e in REGISTRY.values() for m in e.mistakes]


def _register_all_topics() -> None:
    """Import every topic module of this package; each registers its exercises on import."""
    import importlib
    import pkgutil
    for module in pkgutil.iter_modules(__path__):
        if module.name != "core":
            importlib.import_module(f"{__name__}.{module.name}")


_register_all_topics()
