"""Exercises of notebook 01: predict the shape that broadcasting gives, or the clash."""
from __future__ import annotations

import re

from ..shapes import broadcast_shape
from .core import Case, Exercise, Mistake, register


class _ClashNamed(ValueError):
    """A ValueError whose message names the two sizes that clash, as the notebook asks.

    `_run` turns such an error into this class; the clash cases require it, so a bare
    ValueError("shapes do not broadcast") fails while the learner's own message is shown.
    """


_ClashNamed.__name__ = _ClashNamed.__qualname__ = "ValueError naming both clashing sizes"


def _run(fn, case: Case):
    try:
        return fn(*case.args, **case.kwargs)
    except ValueError as error:
        if _names_a_clash(str(error), *case.args):  # keeps the learner's lines, for the report
            raise _ClashNamed(str(error)).with_traceback(error.__traceback__) from None
        raise


def _names_a_clash(message: str, shape_a, shape_b) -> bool:
    """True when `message` names both sizes of an axis that clashes, other than inside the
    shapes themselves: "shapes (4, 3) and (2, 3) do not broadcast" does not say which."""
    a, b = _align(shape_a, shape_b)
    for shape in {tuple(shape_a), tuple(shape_b), a, b}:
        if shape:   # (4, 3), (4,3), [4, 3], torch.Size([4, 3]), and the shapes padded with 1s
            items = r"\s*,\s*".join(str(size) for size in shape)
            message = re.sub(rf"[(\[]\s*{items}\s*,?\s*[)\]]", " ", message)
    numbers = set(re.findall(r"(?<![\d-])\d+", message))   # not the axis -2
    return any(str(size_a) in numbers and str(size_b) in numbers
               for size_a, size_b in zip(a, b) if _clash(size_a, size_b))


def _clash(size_a: int, size_b: int) -> bool:
    return size_a != size_b and 1 not in (size_a, size_b)


def _fits(a, b, label):
    return Case(label, (a, b))


def _clashes(a, b, label):
    return Case(label, (a, b), raises=_ClashNamed)


def _sizes(text: str) -> tuple[int, ...]:
    """A shape made at run time: two equal sizes above 256 are then two int objects, so that
    comparing them with `is` (true for Python's cached small ints) gives False."""
    return tuple(int(size) for size in text.split())


def _cases() -> list[Case]:
    return [
        _fits(_sizes("300 1"), _sizes("2 300 257"), "sizes past 256: equal sizes are ==, not `is`"),
        _fits((2, 3, 4), (4,), "a bias (D,) added to (B, L, D)"),
        _fits((5, 1, 3), (4, 1), "both sides stretch a size-1 axis"),
        _fits((3, 1), (1, 4), "a column times a row"),
        _fits((1,), (2, 3, 1), "the shorter shape on the left"),
        _fits((7,), (3, 1, 7), "the shorter shape on the left, a 1 in the longer one"),
        _fits((), (3, 2), "a scalar"),
        _fits((2, 1, 1, 7), (1, 3, 5, 1), "a padding mask (B,1,1,L) with scores-like (1,H,Lq,1)"),
        _fits((8, 1, 6, 1), (7, 1, 5), "different numbers of axes, ones on both sides"),
        _fits((4, 6), (4, 6), "equal shapes"),
        _fits((0, 3), (1, 3), "an empty batch: size 1 against size 0 gives 0"),
        _clashes((4, 3), (2, 3), "sizes 4 and 2 on axis -2"),
        _clashes((3, 4), (3,), "(3,) lines up with the 4, not the 3"),
        _clashes((2, 5, 3), (5, 2), "a clash on the last axis of a 3-D shape"),
        _clashes((6, 9, 8), (7, 8), "sizes 9 and 7 on axis -2"),
        _clashes((0,), (2,), "size 0 against size 2: a clash, 0 is not 1"),
        _fits((2, 1, 3, 1, 5, 1), (4, 1, 1, 5, 6), "6 axes against 5"),
        _clashes((3, 1, 1, 1, 1, 2), (2, 1, 1, 1, 1, 1), "6 axes, sizes 3 and 2 on axis -6"),
    ]


# ---- the catalogued mistakes: each a wrong version of the rule, built from one loop ------------

def _align(shape_a, shape_b, *, left=False):
    a, b = tuple(shape_a), tuple(shape_b)
    n = max(len(a), len(b))
    if left:
        return a + (1,) * (n - len(a)), b + (1,) * (n - len(b))
    return (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b


def _stretched(size_a, size_b):
    return size_a if size_b == 1 else size_b


def _broadcast(shape_a, shape_b, *, pick=_stretched, left=False, on_clash=ValueError,
               message="sizes {} and {} clash", clash=_clash):
    result = []
    for size_a, size_b in zip(*_align(shape_a, shape_b, left=left)):
        if clash(size_a, size_b) and on_clash is not None:
            raise on_clash(message.format(size_a, size_b))
        result.append(pick(size_a, size_b))
    return tuple(result)


def _rule(pick=_stretched, **how):
    def variant(shape_a, shape_b):
        return _broadcast(shape_a, shape_b, pick=pick, **how)
    return variant


def _leading_axes_dropped(pick):
    def variant(shape_a, shape_b):
        result = []
        for size_a, size_b in zip(reversed(tuple(shape_a)), reversed(tuple(shape_b))):
            if _clash(size_a, size_b):
                raise ValueError(f"sizes {size_a} and {size_b} clash")
            result.append(pick(size_a, size_b))
        return tuple(reversed(result))
    return variant


def _returns_none_on_a_clash(pick):
    def variant(shape_a, shape_b):
        try:
            return _broadcast(shape_a, shape_b, pick=pick)
        except ValueError:
            return None
    return variant


def _mistake(name, hint, make):
    """A mistake made with the size that is not 1, or with max() (wrong only for a size-0 axis against a 1): a learner
    who uses max() is still named for the other mistake. (Not for the two mistakes that only show in the error raised:
    a shared wrong value would then name them for max() alone.)"""
    return Mistake(name, hint, make(_stretched), also=(make(max),))


register(Exercise(
    name="broadcast_shape",
    reference=broadcast_shape,
    make_cases=_cases,
    run=_run,
    mistakes=[
        _mistake("shapes aligned from the left",
                 "line the shapes up from the RIGHT: pad the shorter one with 1s at the front",
                 lambda pick: _rule(pick, left=True)),
        _mistake("no error on a clash",
                 "sizes that differ with neither being 1 cannot broadcast: raise ValueError",
                 lambda pick: _rule(pick, on_clash=None)),
        _mistake("leading axes of the longer shape dropped",
                 "zip() stops at the shorter shape; pad it with 1s to the same length first",
                 _leading_axes_dropped),
        Mistake("a size-1 axis not stretched",
                "on each axis the result takes the size that is not 1 (a size-1 axis is repeated)",
                _rule(lambda size_a, size_b: size_a), also=(_rule(min),)),
        Mistake("max() of the two sizes: size 1 against size 0 gives 1",
                "a size-1 axis takes the other size, even 0: (0, 3) with (1, 3) gives (0, 3), but max(0, 1) is 1",
                _rule(max)),
        Mistake("a size 0 stretched like a 1",
                "only a 1 stretches: (0, 3) with (1, 3) gives (0, 3), and (0,) with (2,) clashes",
                _rule(lambda a, b: b if a in (0, 1) else a, clash=lambda a, b: _clash(a, b) and 0 not in (a, b))),
        Mistake("error message does not say which sizes clash",
                "name the two sizes that clash, e.g. ValueError(f'axis {axis}: sizes {size_a} and "
                "{size_b} clash'); the shapes alone leave the reader to line them up",
                _rule(message="shapes do not broadcast")),
        Mistake("wrong kind of error on a clash",
                "raise ValueError(...) naming both sizes, not assert / Exception / "
                "torch.broadcast_shapes' RuntimeError",
                _rule(on_clash=AssertionError),
                also=(_rule(on_clash=RuntimeError), _rule(on_clash=Exception))),
        _mistake("clash reported without raising",
                 "print/return does not stop the caller; use `raise ValueError(...)`",
                 _returns_none_on_a_clash),
    ],
))
