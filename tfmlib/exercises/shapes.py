"""Exercises of notebook 01: predict the shape that broadcasting gives, or the clash."""
from __future__ import annotations

from ..shapes import broadcast_shape
from .core import Case, Exercise, Mistake, register


def _cases() -> list[Case]:
    def fits(a, b, label):
        return Case(label, (a, b))

    def clash(a, b, label):
        return Case(label, (a, b), raises=ValueError)

    return [
        fits((2, 3, 4), (4,), "a bias (D,) added to (B, L, D)"),
        fits((5, 1, 3), (4, 1), "both sides stretch a size-1 axis"),
        fits((3, 1), (1, 4), "a column times a row"),
        fits((1,), (2, 3, 1), "the shorter shape on the left"),
        fits((), (3, 2), "a scalar"),
        fits((2, 1, 1, 7), (1, 3, 5, 1), "a padding mask (B,1,1,L) with scores-like (1,H,Lq,1)"),
        fits((8, 1, 6, 1), (7, 1, 5), "different numbers of axes, ones on both sides"),
        fits((4, 6), (4, 6), "equal shapes"),
        clash((4, 3), (2, 3), "sizes 4 and 2 on axis -2"),
        clash((3, 4), (3,), "(3,) lines up with the 4, not the 3"),
        clash((2, 5, 3), (5, 2), "a clash on the last axis of a 3-D shape"),
    ]


def _align(shape_a, shape_b, *, left=False):
    a, b = tuple(shape_a), tuple(shape_b)
    n = max(len(a), len(b))
    if left:
        return a + (1,) * (n - len(a)), b + (1,) * (n - len(b))
    return (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b


def _broadcast(shape_a, shape_b, *, left=False, on_clash=ValueError, pick=None):
    result = []
    for size_a, size_b in zip(*_align(shape_a, shape_b, left=left)):
        if size_a != size_b and 1 not in (size_a, size_b):
            if on_clash is None:
                result.append(max(size_a, size_b))
                continue
            raise on_clash(f"sizes {size_a} and {size_b} clash")
        result.append(pick(size_a, size_b) if pick else max(size_a, size_b))
    return tuple(result)


def _aligned_from_the_left(shape_a, shape_b):
    return _broadcast(shape_a, shape_b, left=True)


def _no_error_on_a_clash(shape_a, shape_b):
    return _broadcast(shape_a, shape_b, on_clash=None)


def _leading_axes_dropped(shape_a, shape_b):
    result = []
    for size_a, size_b in zip(reversed(tuple(shape_a)), reversed(tuple(shape_b))):
        if size_a != size_b and 1 not in (size_a, size_b):
            raise ValueError(f"sizes {size_a} and {size_b} clash")
        result.append(max(size_a, size_b))
    return tuple(reversed(result))


def _first_size_kept(shape_a, shape_b):
    return _broadcast(shape_a, shape_b, pick=lambda size_a, size_b: size_a)


def _smaller_size_kept(shape_a, shape_b):
    return _broadcast(shape_a, shape_b, pick=min)


def _raises(kind):
    def variant(shape_a, shape_b):
        return _broadcast(shape_a, shape_b, on_clash=kind)
    return variant


def _returns_on_a_clash(value):
    def variant(shape_a, shape_b):
        try:
            return _broadcast(shape_a, shape_b)
        except ValueError:
            return value
    return variant


register(Exercise(
    name="broadcast_shape",
    reference=broadcast_shape,
    make_cases=_cases,
    mistakes=[
        Mistake("shapes aligned from the left",
                "line the shapes up from the RIGHT: pad the shorter one with 1s at the front",
                _aligned_from_the_left),
        Mistake("no error on a clash",
                "sizes that differ with neither being 1 cannot broadcast: raise ValueError",
                _no_error_on_a_clash),
        Mistake("leading axes of the longer shape dropped",
                "zip() stops at the shorter shape; pad it with 1s to the same length first",
                _leading_axes_dropped),
        Mistake("a size-1 axis not stretched",
                "on each axis the result takes the size that is not 1 (a size-1 axis is repeated)",
                _first_size_kept, also=(_smaller_size_kept,)),
        Mistake("wrong kind of error on a clash",
                "raise ValueError(...) naming the axis and both sizes, not assert / Exception / "
                "torch.broadcast_shapes' RuntimeError",
                _raises(AssertionError), also=(_raises(RuntimeError), _raises(Exception))),
        Mistake("clash reported without raising",
                "print/return does not stop the caller; use `raise ValueError(...)`",
                _returns_on_a_clash(None)),
    ],
))
