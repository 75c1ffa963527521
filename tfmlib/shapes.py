"""Notebook 01: name the axes, predict broadcasting, and trace shapes through real code."""
from __future__ import annotations

import contextlib
import functools
import sys
from dataclasses import dataclass, field

import torch


def describe(x: torch.Tensor, axes: str) -> str:
    """describe(x, "B L D") -> "(B=2, L=5, D=8) float32": the shape with its axis names."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a tensor, got {type(x).__name__}")
    if not isinstance(axes, str):
        raise TypeError(f"axes: expected a str of axis names such as \"B L D\", got {axes!r}")
    names = axes.split()
    if len(names) != x.dim():
        raise ValueError(f"axes: expected {x.dim()} names for shape {tuple(x.shape)}, "
                         f"got {len(names)} ({axes!r})")
    sizes = ", ".join(f"{n}={s}" for n, s in zip(names, x.shape))
    return f"({sizes}) {str(x.dtype).replace('torch.', '')}"


def broadcast_shape(shape_a, shape_b) -> tuple[int, ...]:
    """The shape `a op b` would have, or a ValueError naming the axis that clashes.

    Shapes are aligned from the right; on each axis the sizes must be equal or
    one of them 1 (which is then repeated); a missing axis counts as 1.
    """
    _check_shapes(shape_a, shape_b)
    shape_a, shape_b = tuple(shape_a), tuple(shape_b)
    ndim = max(len(shape_a), len(shape_b))
    a = (1,) * (ndim - len(shape_a)) + shape_a
    b = (1,) * (ndim - len(shape_b)) + shape_b
    result = []
    for axis, (size_a, size_b) in enumerate(zip(a, b), start=-ndim):
        if size_a != size_b and 1 not in (size_a, size_b):  # the clash is the exercise's answer too
            raise ValueError(
                f"shapes {shape_a} and {shape_b} do not broadcast: aligned from the right, "
                f"axis {axis} has sizes {size_a} and {size_b}; they must be equal or one must be 1"
            )
        result.append(size_a if size_b == 1 else size_b)  # a size-1 axis is repeated
    return tuple(result)


def _check_shapes(shape_a, shape_b) -> None:
    for name, shape in (("shape_a", shape_a), ("shape_b", shape_b)):
        if not _is_shape(shape):
            raise TypeError(f"{name}: expected a shape, a tuple of sizes such as (2, 3), got {shape!r}")


def _is_shape(shape) -> bool:
    """A tuple (torch.Size is one) or list of sizes >= 0; not a tensor, whose shape is x.shape."""
    return isinstance(shape, (tuple, list)) and all(
        isinstance(size, int) and not isinstance(size, bool) and size >= 0 for size in shape)


@dataclass
class ShapeTrace:
    """Rows of (depth, function, input shapes, output shapes) recorded by `trace_shapes`."""
    rows: list = field(default_factory=list)

    def table(self) -> str:
        width = max((2 * d + len(n) for d, n, _, _ in self.rows), default=8)
        lines = [f"{'step':<{width}}  inputs -> output"]
        for depth, name, inputs, output in self.rows:
            lines.append(f"{'  ' * depth + name:<{width}}  {inputs} -> {output}")
        return "\n".join(lines)


def _shapes_of(value) -> str:
    if isinstance(value, torch.Tensor):
        return str(tuple(value.shape))
    if isinstance(value, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in value):
        return ", ".join(_shapes_of(v) for v in value if isinstance(v, (torch.Tensor, tuple, list)))
    return ""


@contextlib.contextmanager
def trace_shapes(function_names):
    """Record the shapes going in and out of the named tfmlib functions during a real call.

        with trace_shapes(["multi_head_attention", "split_heads"]) as trace:
            encoder_layer(x, params, num_heads=4)
        print(trace.table())

    Every tfmlib module, and the calling script or notebook, that holds tfmlib's
    function under one of the names gets a recording wrapper for the duration of
    the `with` block (a learner's own function of the same name is left alone);
    nested calls are indented.
    """
    if isinstance(function_names, str):
        raise TypeError(f"function_names: expected a list of names, got the str {function_names!r}")
    if not hasattr(function_names, "__iter__"):
        raise TypeError(f"function_names: expected a list of names, got {function_names!r}")
    trace, depth = ShapeTrace(), [0]
    patched = []
    # tfmlib's own modules, and the caller's script or notebook, which may have done
    # `from tfmlib import encoder_layer` and so holds its own reference to the function.
    modules = [m for name, m in sys.modules.items()
               if (name.startswith("tfmlib") or name == "__main__") and m is not None]
    try:  # patch inside `try`: an unknown name must not leave the earlier ones patched
        for function_name in function_names:
            originals = [getattr(m, function_name) for m in modules
                         if m.__name__.startswith("tfmlib") and callable(getattr(m, function_name, None))]
            if not originals:
                raise ValueError(f"function_names: {function_name!r} is not a tfmlib function")
            original = originals[0]
            wrapper = _recording(original, function_name, trace, depth)
            for module in modules:
                if getattr(module, function_name, None) is original:
                    patched.append((module, function_name, original))
                    setattr(module, function_name, wrapper)
        yield trace
    finally:
        for module, function_name, original in reversed(patched):  # last patched, first undone
            setattr(module, function_name, original)


def _recording(fn, name, trace, depth):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        row = [depth[0], name, ", ".join(s for s in map(_shapes_of, args) if s), None]
        trace.rows.append(row)
        depth[0] += 1
        try:
            result = fn(*args, **kwargs)
        finally:
            depth[0] -= 1
        row[3] = _shapes_of(result)
        return result
    return wrapper
