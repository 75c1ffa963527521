"""The checking engine behind `check(name, fn)`.

An `Exercise` knows the reference function, how to make seeded cases, and the
catalogue of classic mistakes for that step (each a deliberately wrong variant of
the reference). `check` runs the learner's function on every case and reports, in
this order of preference:
  not attempted yet  -> the function is still a stub;
  passed             -> it behaves like the reference on every case;
  a named mistake    -> it behaves like one catalogued wrong variant on every case;
  a diagnosis        -> what the function raised (at which of its own lines, with a
                        hint for the classic Python slips), a None / wrong type /
                        dtype / shape / NaN output, or the first failing case with
                        the element that fails worst.

"Behaves like" means everything a caller can observe (see COURSE_PLAN, "What PASS
means"):
  - the returned values, compared with the reference computed in float64 and cast
    back, so that an answer more accurate than the float32 reference passes;
  - the arguments: each one must be left as it was, except those the exercise says
    the function updates (`Exercise.updates`); an answer that edits its input in
    place is named for it, even when its return value is right;
  - the gradients, for exercises whose output feeds training (`Exercise.gradients`):
    a fixed random projection of the output is back-propagated, and the gradient
    reaching every floating-point input must match the reference's.
`check` never raises: a learner's bug is reported, not re-thrown.

Every run of a function on a case (the answer's, the reference's, each catalogued mistake's)
starts from one random state: torch's global generator, Python's `random` and NumPy's seeded
alike (`_call`). A function that draws random numbers (dropout) then draws the same ones
whatever the cells or the checks before it did, so its verdict and the mistake it is named for
depend on the answer alone; and `check` puts the caller's random states back afterwards.
"""
from __future__ import annotations

import ast
import contextlib
import copy
import dataclasses
import difflib
import functools
import html
import inspect
import json
import numbers
import os
import random
import re
import textwrap
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import provenance, tracker
from .tracker import REGISTRY, register  # noqa: F401  (where topic modules find them)

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


@dataclass(frozen=True)
class Case:
    """One input to try: positional and keyword arguments, and a label saying what it tests.

    `raises`: the exception type a correct answer must raise on this input (e.g.
    ValueError for shapes that do not broadcast); None when it must return a value.
    `omit_defaults`: call the function without every trailing argument, and every keyword,
    whose value is the reference's default, so that the function's own defaults are used.
    `nudge`: also observe how the output moves when every float input is nudged by about
    1e-6 (float64 inputs: an answer computing in float32 inside cannot follow so small a change).
    """
    label: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    raises: type[BaseException] | None = None
    omit_defaults: bool = False
    nudge: bool = False
    # Called on `first` before, whose output is then overwritten and whose tensors get this
    # case's values in place: the call judged gets the same objects, as a training loop's.
    first: Case | None = None


class Finding(str):
    """What a run found about an answer in place of a value it could not take (a p.grad that
    was replaced, not scaled): a comparison says it as it is."""


@dataclass(frozen=True)
class Mistake:
    """A classic wrong answer: its name, a one-line hint, and a function that makes it.

    `also`: more functions that make the same mistake in another form (ids as float32 or as int32; a frequency term
    hard-coded for d_model 8 or for 512); the learner's answer is named after this mistake when it matches any of them.
    """
    name: str
    hint: str
    variant: Callable
    also: tuple[Callable, ...] = ()

    @property
    def variants(self) -> tuple[Callable, ...]:
        return (self.variant, *self.also)


@dataclass(frozen=True)
class Contract:
    """What the exercise's function must accept beyond the notebook's cases: the engine derives
    one more case per variation from case `base` (see `variations`), so that an exercise declares
    what may vary and never writes those cases itself.

    `axes`: named axes, each {argument: its indices}; the engine cuts each axis to 1 (a batch of
        one, a single query) and tiles it past the notebook's sizes, in every tensor of those
        arguments (dicts of weights included) whose size there is the axis's size; an argument
        that is the size itself (an int length) lists no index.
    `drop`: axes the contract lets be absent (attention without a heads axis, with its mask).
    `wide`: axes tiled past 256 (model widths); the others are tiled past 64 (lengths).
    `never_one`: axes not cut to 1 (LayerNorm over one feature normalises every token to 0).
    `scales`: {argument: factors} for extreme values (scores of 100, tiny or zero gradients).
    `values`: {argument: other values it may take} (eps, betas, p, a sublayer that mixes tokens).
    `float64`: whether float64 inputs must give float64 outputs (off where the contract fixes
        the dtype, or where a float64 run would draw other random numbers).
    """
    axes: dict = field(default_factory=dict)
    drop: tuple[str, ...] = ()
    wide: tuple[str, ...] = ()
    never_one: tuple[str, ...] = ()
    scales: dict = field(default_factory=dict)
    values: dict = field(default_factory=dict)
    float64: bool = True
    base: int = 0
    text: tuple[str, ...] = ()  # text or id arguments also given as learners type them (_TYPED)


@dataclass
class Exercise:
    name: str
    reference: Callable
    make_cases: Callable[[], list[Case]]
    mistakes: list[Mistake] = field(default_factory=list)
    # How to turn a function (or whatever the learner hands in) and a case into
    # comparable outputs; the default calls fn(*args, **kwargs).
    run: Callable[[Any, Case], Any] | None = None
    output_names: tuple[str, ...] = ()
    solution_sources: tuple[Callable, ...] = ()
    atol: float = 1e-5
    rtol: float = 1e-4
    # Said after "contains NaN" when the learner's output has NaN and the reference
    # has none, e.g. "a row where every key is masked must give zeros, not NaN".
    nan_hint: str = ""
    # Arguments the function is meant to change (e.g. a random generator it draws
    # from); every other argument must be left exactly as it came.
    updates: tuple[str, ...] = ()
    # Compare against the reference run on float64 copies of the inputs, cast back.
    # Off where float64 would change the computation itself (random draws).
    float64_reference: bool = True
    # Check the gradients that reach each floating-point input (outputs that feed training).
    gradients: bool = False
    # What may vary beyond the notebook's cases; None: only the cases of make_cases.
    contract: Contract | None = None

    def cases(self) -> list[Case]:
        """The notebook's cases, then those the engine derives from the contract (made once)."""
        if not hasattr(self, "_cases"):
            with random_state_kept():  # deriving runs the reference (a grader's warm kernel derives them alone)
                own = self.make_cases()
                self._cases = own + (variations(self, own) if self.contract is not None else [])
        return list(self._cases)

    def outcome(self, fn, case: Case, float64: bool = False) -> _Outcome:
        """Run `fn` on a private copy of `case`; report its output, the arguments it
        changed, and (for `gradients` exercises) the gradients reaching the inputs."""
        before = _to_float64(case) if float64 else case
        start = before.first or before
        # deepcopy, with each tensor copied by clone (keeps its strides; Tensor.__deepcopy__ is
        # a quarter of a heavy exercise's check); the memo keeps one tensor passed twice one.
        working = copy.deepcopy(start, {id(t): t.detach().clone().requires_grad_(t.requires_grad)
                                        for t in _tensors_in((start.args, start.kwargs)) if t.is_leaf})
        call = _without_defaults(fn, self.reference) if case.omit_defaults and callable(fn) else fn
        if before.first is not None:
            kept = _in_place_between_calls(self._call(call, working), working, before)
        leaves = _track_gradients(working, _argument_names(self, case)) \
            if self.gradients and before.first is None else {}
        value = self._call(call, working)
        if before.first is not None and not all(_same_value(t, held) for t, held in kept):
            raise OutputOverwrittenError(
                "your function's second call wrote into the output of its first call: it returns a view "
                "of a buffer of its own, so a caller's earlier result changes under it\nreturn a new "
                "tensor on every call (compute it afresh, or return a .clone() of what you keep)")
        changed = tuple(path for name, old, new in _named_arguments(self, before, working)
                        if name not in self.updates for path in _changes(name, old, new))
        gradients = _gradients(value, leaves) if self.gradients else None
        moved = _moved_by_a_nudge(lambda nudged: self._call(call, nudged), before, _detached(value)) \
            if case.nudge else None
        return _Outcome(_detached(value), changed, gradients, moved)

    def _call(self, fn, case: Case):
        _seed_every_generator()
        return self.run(fn, case) if self.run is not None else fn(*case.args, **case.kwargs)


_RUN_SEED = 20_261_204  # no seed a learner types (0, 1, 42, 1234): an answer that seeds its own draws shows


def _seed_every_generator():
    """Every generator a learner may draw from without naming one, seeded with _RUN_SEED."""
    torch.default_generator.manual_seed(_RUN_SEED)  # not torch.manual_seed: CUDA's lazy seeding costs ms
    random.seed(_RUN_SEED)
    np.random.seed(_RUN_SEED)


@contextlib.contextmanager
def random_state_kept():
    """The caller's random states (torch's global generator, Python's `random`, NumPy's) as they
    were before the block: the runs in it seed them (`_call`), and a notebook's seeded cells must
    draw the same numbers whether a check ran in between or not."""
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        torch.set_rng_state(states[0])
        random.setstate(states[1])
        np.random.set_state(states[2])


@dataclass
class _Outcome:
    """Everything a caller can observe of one call: value, changed arguments, gradients."""
    value: Any
    changed: tuple[str, ...] = ()
    gradients: dict[str, torch.Tensor] | str | None = None  # a str says why none flowed back
    moved: Any = None  # how the output moves per unit of a tiny nudge to the inputs (Case.nudge)


_NUDGE = 1e-6


def _moved_by_a_nudge(call, case: Case, value):
    """(call(nudged case) - value) / _NUDGE for every float tensor of the output, with every float
    input that holds non-integer values nudged by _NUDGE times a fixed random number in [-1, 1]
    (masks and positions given as floats hold integers: they stay as they are). In float64 a
    correct answer moves as the reference does; one that computes in float32 inside loses the
    nudge in its rounding (float32 resolves about 6e-8) and moves by several percent otherwise."""
    g = torch.Generator().manual_seed(2)

    def nudged(t: torch.Tensor) -> torch.Tensor:
        finite = t[torch.isfinite(t)]
        if not t.is_floating_point() or finite.numel() == 0 or bool((finite == finite.round()).all()):
            return t
        step = _NUDGE * (2 * torch.rand(t.shape, generator=g, dtype=torch.float64) - 1)
        return (t.detach() + step.to(t.dtype)).requires_grad_(t.requires_grad)

    other = copy.deepcopy(_map_tensors(case, nudged))
    try:
        moved_value = _detached(call(other))
    except Exception:  # it raises on the nudged inputs only: the value's comparison tells the rest
        return None
    return _per_unit(moved_value, value)


def _per_unit(moved, value):
    """(moved - value) / _NUDGE for each float tensor of `value` (same structure), else None."""
    if isinstance(value, torch.Tensor):
        if not (isinstance(moved, torch.Tensor) and value.is_floating_point() and moved.shape == value.shape):
            return None
        return (moved.double() - value.double()).nan_to_num(0.0, 0.0, 0.0) / _NUDGE
    if isinstance(value, (list, tuple)) and isinstance(moved, (list, tuple)) and len(value) == len(moved) \
            and not hasattr(value, "_fields"):
        return [_per_unit(m, v) for m, v in zip(moved, value)]
    if isinstance(value, dict) and isinstance(moved, dict) and value.keys() == moved.keys():
        return {k: _per_unit(moved[k], value[k]) for k in value}
    return None


def _without_defaults(fn, reference):
    """fn, called without every trailing positional argument and every keyword argument whose
    value is the reference's default for it: the answer's own defaults are then used."""
    try:
        parameters = list(inspect.signature(reference).parameters.values())
    except (TypeError, ValueError):
        return fn
    by_name = {p.name: p for p in parameters}

    def is_default(parameter, value) -> bool:
        default = parameter.default
        return default is not inspect.Parameter.empty and type(value) is type(default) and _same_value(value, default)

    def call(*args, **kwargs):
        args = list(args)
        while args and len(args) <= len(parameters) and is_default(parameters[len(args) - 1], args[-1]):
            args.pop()
        kwargs = {k: v for k, v in kwargs.items() if not (k in by_name and is_default(by_name[k], v))}
        return fn(*args, **kwargs)
    return call


def _map_tensors(value, fn):
    """A copy of `value` with fn applied to every tensor in it, at any depth."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)) and type(value) not in (list, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_map_tensors(v, fn) for v in value))  # a namedtuple
    if isinstance(value, (list, tuple)):
        return type(value)(_map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        return type(value)((k, _map_tensors(v, fn)) for k, v in value.items())
    if isinstance(value, Case):
        return dataclasses.replace(value, args=_map_tensors(value.args, fn),
                                   kwargs=_map_tensors(value.kwargs, fn), first=_map_tensors(value.first, fn))
    return value


def _to_float64(value, dtype=torch.float64):
    """A copy of `value` with every floating-point tensor in it, at any depth, made float64."""
    return _map_tensors(value, lambda t: t.detach().to(dtype).requires_grad_(t.requires_grad)
                        if t.is_floating_point() else t)  # a leaf, like the input


def _argument_names(exercise: Exercise, case: Case) -> list[str]:
    """The reference's names for the case's positional arguments."""
    try:
        names = list(inspect.signature(exercise.reference).parameters)
    except (TypeError, ValueError):  # a pair of functions, or a builtin
        names = []
    return [names[i] if i < len(names) else f"argument {i + 1}" for i in range(len(case.args))]


def _named_arguments(exercise: Exercise, before: Case, after: Case):
    """(name, value before the call, the same argument after it) for every argument."""
    yield from zip(_argument_names(exercise, before), before.args, after.args)
    for key in before.kwargs:
        yield key, before.kwargs[key], after.kwargs[key]


def _changes(path: str, old, new) -> list[str]:
    """Where `new` differs from `old`: the deepest entries of dicts and lists that changed
    (params['w_q'] rather than the whole params), or `path` itself."""
    if isinstance(old, dict) and isinstance(new, dict) and old.keys() == new.keys():
        return [p for key in old for p in _changes(f"{path}[{key!r}]", old[key], new[key])]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new) \
            and any(isinstance(v, (dict, list, torch.Tensor)) for v in old):
        return [p for i, (a, b) in enumerate(zip(old, new)) for p in _changes(f"{path}[{i}]", a, b)]
    return [] if _same_value(old, new) else [path]


def _same_value(first, second) -> bool:
    """True when two argument values are equal, tensors bit for bit (NaN equal to NaN)."""
    if isinstance(first, torch.Tensor) or isinstance(second, torch.Tensor):
        if not (isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor)):
            return False
        if first.shape != second.shape or first.dtype != second.dtype:
            return False
        a, b = first.detach(), second.detach()
        return bool(((a == b) | (a != a) & (b != b)).all()) if a.is_floating_point() else torch.equal(a, b)
    if isinstance(first, torch.Generator) and isinstance(second, torch.Generator):
        return torch.equal(first.get_state(), second.get_state())
    if isinstance(first, (list, tuple)) and isinstance(second, (list, tuple)):
        return len(first) == len(second) and all(_same_value(a, b) for a, b in zip(first, second))
    if isinstance(first, dict) and isinstance(second, dict):
        return first.keys() == second.keys() and all(_same_value(first[k], second[k]) for k in first)
    try:
        return bool(first == second)
    except Exception:  # an object that cannot be compared: nothing to say about it
        return True


def _track_gradients(case: Case, names: list[str]) -> dict[str, torch.Tensor]:
    """Make every floating-point tensor among the arguments a fresh autograd leaf.

    The function receives a copy of each leaf (`leaf.clone()`, not the leaf itself), so that an in-place edit of an
    input is allowed by autograd and is seen as a changed argument, as in a caller's code, rather than raising.
    """
    leaves: dict[str, torch.Tensor] = {}

    def track(value, path):
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            leaves[path] = leaf = value.detach().clone().requires_grad_(True)
            return leaf.clone()
        if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
            return type(value)(track(v, f"{path}[{i}]") for i, v in enumerate(value))
        if isinstance(value, dict):
            return type(value)((k, track(v, f"{path}[{k!r}]")) for k, v in value.items())
        return value

    args = tuple(track(v, name) for v, name in zip(case.args, names))
    kwargs = {k: track(v, k) for k, v in case.kwargs.items()}
    object.__setattr__(case, "args", args)      # `case` is the private working copy
    object.__setattr__(case, "kwargs", kwargs)
    return leaves


def _gradients(value, leaves: dict[str, torch.Tensor]):
    """Gradients of a fixed random projection of the output with respect to every leaf."""
    outputs = [t for t in _tensors_in(value) if t.is_floating_point()]
    if not leaves or not outputs:
        return None
    loss = sum((t * _projection(t.shape, i, t.dtype)).sum() for i, t in enumerate(outputs))
    if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
        return ("no gradient flows back through your output: was it computed outside autograd (NumPy, "
                ".item() or .tolist(), torch.tensor(...) of values, .detach(), or under torch.no_grad())?")
    try:
        grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    except RuntimeError as error:  # e.g. a tensor autograd needs was overwritten in place
        return f"{_AUTOGRAD_FAILED}: {str(error).splitlines()[0]}"
    return {name: torch.zeros_like(leaf) if grad is None else grad.detach()
            for (name, leaf), grad in zip(leaves.items(), grads)}


_AUTOGRAD_FAILED = "autograd cannot go back through your function"


def _projection(shape, index: int, dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + index)
    return torch.randn(tuple(shape), generator=g, dtype=torch.float64).to(dtype)


def _tensors_in(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors_in(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors_in(v)


def _detached(value):
    if isinstance(value, torch.Tensor):  # a copy: a later call that writes into it changes no result kept
        return value.detach().clone()
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields") and any(
            isinstance(v, (torch.Tensor, list, tuple, dict)) for v in value):
        return type(value)(_detached(v) for v in value)
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    return value


# ---- the cases derived from a contract -------------------------------------------------------

LONG, WIDE = 65, 257  # past every length (64) and every width (256) that the notebooks use
FAR = 1025  # past 1024: an answer's 512-row buffer shows
TABLE = 5001  # past the 5000 rows of the table learners copy and slice (The Annotated Transformer's max_len)
HALF_FAR = 513  # past 512, where past 1024 costs too much: a 512 x 512 causal buffer shows
_PAST = ", past the notebook's sizes"


def variations(exercise: Exercise, own: list[Case]) -> list[Case]:
    """The cases that vary what `exercise.contract` lets vary, each derived from one case of `own`; a variation on
    which the reference itself fails is left out (it is not an input that the contract accepts)."""
    contract = exercise.contract
    case = own[contract.base]
    names = _argument_names(exercise, case)
    # Called again first: an answer that keeps a result from an earlier call fails there, before
    # the float64 case, whose nudge it would not follow either.
    derived = _called_again(case, names)
    if contract.float64 and any(t.is_floating_point() for t in _tensors_in((case.args, case.kwargs))):
        derived.append(dataclasses.replace(_to_float64(case), label="float64 inputs: the output follows",
                                           nudge=exercise.float64_reference))
        # bfloat16 with the defaults left out: a float32 zero made for a bias not given shows.
        half = [(case, torch.float16), ((_defaults_left_out(exercise, case, names) or [case])[0], torch.bfloat16)]
        derived += [dataclasses.replace(_to_float64(c, dtype), label=f"{str(dtype)[6:]} inputs: the output keeps "
                                        f"their dtype{'' if c is case else '; ' + c.label}") for c, dtype in half]
    # Every axis but the batch cut to 1 in one case (one query), a batch of one with every
    # other axis tiled long in another; one case per axis where the reference rejects them
    # together. Each case costs the learner's wait; the batch is never cut with the others, as
    # a tensor of one element answers `and`, `if` and .item() where a learner's slip must not.
    for axes, size in (([a for a in contract.axes if a not in contract.never_one and a != "B"], lambda a: 1),
                       (["B"] * ("B" in contract.axes) + [a for a in contract.axes if a != "B"],
                        lambda a: 1 if a == "B" else WIDE if a in contract.wide else LONG)):
        apart = [c for c in (_resized(case, names, a, contract.axes[a], size(a)) for a in axes) if c]
        together = _all_resized(case, names, contract, axes, size) if len(apart) > 1 else None
        derived += [together] if together is not None and _reference_accepts(exercise, together) else apart
    derived += [_resized(case, names, axis, contract.axes[axis], None) for axis in contract.drop]
    # past 1024 where that costs the reference under ~50 ms, else past 512 where that does
    far = _far_sizes().get(exercise.name, {})
    derived += [_resized(case, names, axis, contract.axes[axis], far[axis]) for axis in contract.axes if axis in far]
    # a length given as an int builds a table of that length (a PE table, a causal mask): past TABLE too
    derived += [_resized(case, names, axis, where, TABLE) for axis, where in contract.axes.items()
                if axis not in contract.wide and not any(where.values())]
    for name in [*names, *case.kwargs]:  # a mask that hides every key, and one that hides none
        mask = _value_of(case, names, name)
        if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:
            derived += [_with(case, names, name, lambda t, f=f: torch.full_like(t, f), f"`{name}` all {f}")
                        for f in (False, True)]
    for name in contract.text:
        value = _value_of(case, names, name)
        derived += [_with(case, names, name, lambda v, f=f: _typed(v, f), label) for label, f in _TYPED
                    if repr(_typed(value, f)) != repr(value)]  # repr, not ==: np.int64(5) == 5
    for name, factors in contract.scales.items():
        derived += [_with(case, names, name, lambda v, f=f: _map_tensors(
            v, lambda t: t * f if t.is_floating_point() else t), f"`{name}` times {f:g}") for f in factors]
    for name, values in contract.values.items():
        derived += [_with(case, names, name, lambda _, v=v: v, f"`{name}` = {_describe(v)}") for v in values]
    derived += _defaults_left_out(exercise, case, names)
    return [c for c in derived if c is not None and _reference_accepts(exercise, c)]


def _value_of(case: Case, names: list[str], name: str):
    return case.args[names.index(name)] if name in names else case.kwargs.get(name)


def _with(case: Case, names: list[str], name: str, change: Callable, label: str) -> Case:
    """`case` with argument `name` (positional or keyword, given or not) replaced by change(it)."""
    if name in names:
        i = names.index(name)
        return Case(label, case.args[:i] + (change(case.args[i]),) + case.args[i + 1:], case.kwargs)
    return Case(label, case.args, {**case.kwargs, name: change(case.kwargs.get(name))})


def _called_again(case: Case, names: list[str]) -> list[Case]:
    """The same shapes with other values: only the first argument, then all but the first (or, with one tensor
    argument, that one). An answer that caches its result by shape, by its input alone or by its weights alone repeats
    an old result on one of them. Floats are scaled elementwise by 0.5 to 1.5 (signs, zeros and infinities stay); ids
    and masks are rolled along their last axis (each stays a valid id or mask)."""
    g = torch.Generator().manual_seed(1)

    def other(value):
        return _map_tensors(value, lambda t: t * (0.5 + torch.rand(t.shape, generator=g, dtype=torch.float64))
                            .to(t.dtype) if t.is_floating_point()
                            else t.roll(1, -1) if t.dim() and t.shape[-1] > 1 else t)

    keys = [n for n, v in zip(names, case.args) if _has_tensor(v)] \
        + [k for k, v in case.kwargs.items() if _has_tensor(v)]
    # With two or more tensors, the two calls below also catch a cache keyed by shape alone.
    # The new values are stored transposed: `.view` on any of them raises where `.reshape`
    # works (no case of its own for the learner to wait for).
    stored = " and stored transposed (not contiguous)"

    def changed(value):
        return _map_tensors(other(value), _transposed_view)

    if len(keys) < 2:
        again = [dataclasses.replace(changed(case), label=f"called again: same shapes, other values{stored}")] * len(keys)
    else:
        rest = case
        for key in keys[1:]:
            rest = _with(rest, names, key, changed, f"called again: all but `{keys[0]}` changed{stored}")
        again = [_with(case, names, keys[0], changed, f"called again: only `{keys[0]}` changed{stored}"), rest]
    # Then twice on the very same arguments, the first output overwritten and the tensors' values
    # changed in place in between (as an optimizer does): a result kept by `id`, or an output
    # that is a view of a buffer of the answer's own, shows.
    return again + [dataclasses.replace(other(case), first=case, label="called twice on the same arguments, "
                                        "the first output overwritten and the values changed in place in between")]


def _in_place_between_calls(output, working: Case, new: Case) -> list:
    """What a caller does between two calls (Case.first): reuse the first output's memory, and
    write the next values into the same argument tensors. Returns (tensor, copy) for each tensor
    of the first output that is no view of an argument: the second call must leave it alone."""
    # a tensor without data (device "meta") has no memory to reuse: the comparison with the
    # reference says what is wrong with it
    stored = [t for t in _tensors_in(output) if not t.is_meta]
    for t in stored:
        with contextlib.suppress(RuntimeError):  # an expanded view cannot be written
            t.detach().fill_(float("nan") if t.is_floating_point() else 1)
    arguments = list(_tensors_in((working.args, working.kwargs)))
    with torch.no_grad():
        for old, value in zip(arguments, _tensors_in((new.args, new.kwargs))):
            old.copy_(value)
    storages = {a.untyped_storage().data_ptr() for a in arguments}
    return [(t, t.detach().clone()) for t in stored if t.untyped_storage().data_ptr() not in storages]


class OutputOverwrittenError(Exception):
    """The answer's second call wrote into its first call's output (a buffer of its own)."""
    found_by_the_checker = True  # the check says this message, not "your function raised ..."


FAR_SIZES_FILE = Path(__file__).parent.parent / "data" / "far_sizes.json"


@functools.cache
def _far_sizes() -> dict[str, dict[str, int]]:
    """{exercise: {axis: FAR or HALF_FAR}}: the reference's work, counted by tools/far_sizes.py
    (counting imports torch._dynamo: seconds a learner's first check would wait)."""
    return json.loads(FAR_SIZES_FILE.read_text())


# Text as learners type it: whitespace of every kind, punctuation stuck to every word; (None) the whole text,
# list or id sequence given twice, so that specials such as <eos> repeat; ids as NumPy integers (np.argmax's).
_TYPED = (("typed with tabs, newlines and double spaces", lambda s: "\t" + s.replace(" ", "  \n\t") + "\n"),
          ("punctuation stuck to every word", lambda s: re.sub(r"(\S+)", r"\1,", s)),
          ("given twice in a row (its specials repeated)", None),
          ("its ids NumPy integers (np.int64)", np.int64))


def _typed(value, how):
    if how is None:
        return torch.cat([value, value]) if isinstance(value, torch.Tensor) \
            else value + " " + value if isinstance(value, str) else value + value
    if isinstance(value, list):
        return [_typed(v, how) for v in value]
    return how(value) if isinstance(value, int if how is np.int64 else str) else value


def _has_tensor(value) -> bool:
    return next(_tensors_in(value), None) is not None


def _resized(case: Case, names: list[str], axis: str, where: dict, size: int | None) -> Case | None:
    """`case` with `axis` cut to 1, tiled past `size`, or removed (size None), in every
    argument of `where`; None when the axis already has that size."""
    first, indices = next(iter(where.items()))
    value = _value_of(case, names, first)
    n = value if not indices or value is None else value.shape[indices[0]]
    if n is None or size == 1 and n == 1:
        return None
    copies = -(-size // n) if size and size > 1 else 1

    def change(t: torch.Tensor) -> torch.Tensor:
        dims = sorted({d % t.dim() for d in where[name] if -t.dim() <= d < t.dim() and (t.shape[d] == n or size is None)},
                      reverse=True)
        for d in dims:
            t = t.select(d, 0) if size is None else t.narrow(d, 0, 1) if size == 1 \
                else t.repeat(*[copies if i == d else 1 for i in range(t.dim())])
        return t.clone()

    label = ("a batch of one" if axis == "B" else f"{axis} = 1") if size == 1 \
        else f"without the {axis} axis" if size is None else f"{axis} = {n * copies}{_PAST}"
    for name in where:
        case = _with(case, names, name, (lambda _: 1 if size == 1 else n * copies) if not where[name]
                     else (lambda v: _map_tensors(v, change)), label)
    return case


def _all_resized(case: Case, names: list[str], contract: Contract, axes: list[str], size) -> Case | None:
    """`case` with every axis of `axes` resized at once, labelled with them all."""
    labels = []
    for axis in axes:
        resized = _resized(case, names, axis, contract.axes[axis], size(axis))
        if resized is not None:
            case, labels = resized, labels + [resized.label.removesuffix(_PAST)]
    return dataclasses.replace(case, label=", ".join(labels) + (_PAST if any(size(a) > 1 for a in axes) else ""))


def _defaults_left_out(exercise: Exercise, case: Case, names: list[str]) -> list[Case]:
    """The case without each keyword argument that has a default, and without the trailing
    positional ones that have defaults: an answer's own defaults must be the contract's."""
    try:
        parameters = inspect.signature(exercise.reference).parameters
    except (TypeError, ValueError):  # a pair of functions: the run decides how they are called
        return []
    if exercise.run is not None:  # the run decides how the function is called: leave out at the call
        return [dataclasses.replace(case, label="the arguments whose value is their default left out: "
                                    "your defaults are used", omit_defaults=True)]
    has_default = [name in parameters and parameters[name].default is not inspect.Parameter.empty for name in names]
    cut = len(names)
    while cut and has_default[cut - 1]:
        cut -= 1
    left_out = [Case(f"`{', '.join(names[cut:])}` left at the default", case.args[:cut], case.kwargs)] \
        if cut < len(names) else []
    return left_out + [Case(f"`{key}` left at its default", case.args,
                            {k: v for k, v in case.kwargs.items() if k != key})
                       for key in case.kwargs
                       if key in parameters and parameters[key].default is not inspect.Parameter.empty]


def _transposed_view(t: torch.Tensor) -> torch.Tensor:
    """The same values, stored transposed: `.view` on it raises where `.reshape` works."""
    if t.dim() >= 4 and min(t.shape[1:3]) > 1:  # (B, H, L, d) as split_heads gives it: heads not merged by .view
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    return t.mT.contiguous().mT if t.dim() >= 2 and min(t.shape[-2:]) > 1 else t


def _reference_accepts(exercise: Exercise, case: Case) -> bool:
    try:
        _cached_reference_outcome(exercise, case)
        return True
    except Exception:  # sizes that no longer fit together: not an input of the contract
        return False


# ---- the result shown in the notebook --------------------------------------------------------

_STYLE = {"passed": ("#e6f4ea", "#1e7e34", "PASS"),
          "not attempted": ("#f1f3f4", "#5f6368", "TODO"),
          "mistake": ("#fdecea", "#b3261e", "FAIL"),
          "failed": ("#fdecea", "#b3261e", "FAIL")}


@dataclass
class CheckResult:
    """What `check` returns: truthy only when the answer passed."""
    name: str
    status: str            # "passed", "not attempted", "mistake" or "failed"
    message: str           # one line
    details: str = ""      # more lines: shapes, errors, the learner's line
    mistake: str | None = None

    def __bool__(self) -> bool:
        return self.status == "passed"

    def as_dict(self) -> dict:
        """The result for a program (an autograder, the progress file): no text to parse."""
        return {**dataclasses.asdict(self), "passed": bool(self)}

    def __str__(self) -> str:
        tag = _STYLE[self.status][2]
        text = f"[{tag}] {self.name}: {self.message}"
        return text + ("\n" + textwrap.indent(self.details, "    ") if self.details else "")

    __repr__ = __str__

    def _repr_html_(self) -> str:
        background, colour, tag = _STYLE[self.status]
        details = (f"<pre style='margin:4px 0 0 0;white-space:pre-wrap'>{html.escape(self.details)}</pre>"
                   if self.details else "")
        return (f"<div style='background:{background};border-left:4px solid {colour};"
                f"padding:6px 10px;font-family:sans-serif'><b style='color:{colour}'>{tag}</b> "
                f"<code>{html.escape(self.name)}</code>: {html.escape(self.message)}{details}</div>")


# ---- checking ---------------------------------------------------------------------------------

class _Raised:
    """Stands in for an output when the learner's function raised."""
    def __init__(self, error: BaseException):
        self.error = error


class _ExpectedRaise:
    """Stands in for the reference's output on a case where a correct answer must raise."""
    def __init__(self, kind: type[BaseException]):
        self.kind = kind


def check(name: str, fn, cases: list[Case] | None = None) -> CheckResult:
    """Run the learner's `fn` against the reference of exercise `name` and say what is wrong.

    `cases`: other cases to judge on than the exercise's own (tests use many random ones)."""
    threads = torch.get_num_threads()
    try:
        # The cases are tiny: extra threads only cost time, and a lot of it on a busy CPU.
        torch.set_num_threads(1)
        # A PASS of an answer that calls the reference (or PyTorch's own version) becomes a FAIL.
        with random_state_kept():
            result = provenance.vetted(name, fn, lambda answer: _check(name, answer, cases))
        if cases is None:  # a learner's call, not a test judging on cases of its own
            tracker.record(result, fn)  # never raises
        return result
    except Exception as error:  # the checker's own bug, or an output too odd to compare
        return CheckResult(str(name), "failed", "the checker itself failed on this answer",
                           f"{type(error).__name__}: {error}\nThis is a problem of the checker, not necessarily "
                           "of your code; please report it to the course maintainers.")
    finally:
        torch.set_num_threads(threads)


def _check(name: str, fn, cases: list[Case] | None) -> CheckResult:
    exercise = REGISTRY.get(name) if isinstance(name, str) else None
    if exercise is None:
        return CheckResult(str(name), "failed", "no exercise of that name",
                           "known exercises: " + ", ".join(sorted(REGISTRY)))
    if _is_stub(fn):
        return CheckResult(name, "not attempted", "not attempted yet: replace the stub's body "
                           "with your code, then run this cell again")
    if not (callable(fn) or isinstance(fn, tuple)):
        return CheckResult(name, "failed", f"expected your function, got {type(fn).__name__}",
                           f"call it as check({name!r}, my_function), without calling my_function")
    cases = exercise.cases() if cases is None else cases
    return judge(exercise, cases, [_run_safely(exercise, fn, case) for case in cases])


# ---- hook for a grader that runs the answer elsewhere (teacher/trusted_grading.py) -----------
def judge(exercise: Exercise, cases: list[Case], actual: list) -> CheckResult:
    """The result of an answer whose outcome on each of `cases` is `actual` (an _Outcome or a
    _Raised each, however they were obtained: here, or in another process and read back)."""
    name = exercise.name
    expected = [_cached_reference_outcome(exercise, case) for case in cases]
    problems = [_compare(e, a, exercise) for e, a in zip(expected, actual)]
    if all(p is None for p in problems):
        return CheckResult(name, "passed", f"all {len(cases)} cases match the reference")
    if any(isinstance(a, _Raised) and isinstance(a.error, NotImplementedError) for a in actual):
        return CheckResult(name, "not attempted", "not attempted yet (it raises NotImplementedError)")
    # A missing `return` comes first: whatever else is wrong, the learner must see this.
    missing_return = next((i for i, (e, a) in enumerate(zip(expected, actual))
                           if isinstance(a, _Outcome) and a.value is None
                           and isinstance(e, _Outcome) and e.value is not None), None)
    mistake = None if missing_return is not None else _matching_mistake(exercise, cases, expected, actual)
    first = next(i for i, p in enumerate(problems) if p is not None)
    if mistake is not None:
        raised = next((a.error for a, p in zip(actual, problems)  # on a case that failed
                       if isinstance(a, _Raised) and p is not None
                       and not getattr(a.error, "found_by_the_checker", False)), None)
        details = (f"hint: {mistake.hint}\nfirst seen on case {first + 1} of {len(cases)} "
                   f"({cases[first].label}): {problems[first].splitlines()[0]}")
        if raised is not None:
            details += "\non some cases your function raised:\n" + _where_it_raised(raised)
        return CheckResult(name, "mistake", f"looks like a classic mistake: {mistake.name}",
                           details, mistake=mistake.name)
    index = first if missing_return is None else missing_return
    case, outcome = cases[index], actual[index]
    header = f"case {index + 1} of {len(cases)} ({case.label}); inputs: {_describe_inputs(case)}"
    if isinstance(outcome, _Raised):
        return CheckResult(name, "failed", problems[index].splitlines()[0],
                           header + "\n" + _where_it_raised(outcome.error))
    return CheckResult(name, "failed", problems[index].splitlines()[0],
                       header + "".join("\n" + line for line in problems[index].splitlines()[1:]))


def _run_safely(exercise: Exercise, fn, case: Case, float64: bool = False):
    try:
        return exercise.outcome(fn, case, float64)
    except Exception as error:  # the learner's bug, reported rather than re-raised
        return _Raised(error)


def reference_outcome(exercise: Exercise, case: Case):
    """What a correct answer must give on `case`: the reference's outcome, with its floating-point values taken from a
    float64 run (see `_Close`); or _ExpectedRaise where the case says a correct answer must raise."""
    if case.raises is not None:
        outcome = _run_safely(exercise, exercise.reference, case)
        if isinstance(outcome, _Raised) and isinstance(outcome.error, case.raises):
            return _ExpectedRaise(case.raises)
        raise RuntimeError(f"exercise {exercise.name!r}: the reference should raise "
                           f"{case.raises.__name__} on case {case.label!r}, it did not")
    outcome = _precise_outcome(exercise, exercise.reference, case)
    if isinstance(outcome, _Raised):  # a bug of the exercise, not of the learner
        raise outcome.error
    return outcome


_OUTCOMES: dict[tuple[int, int], tuple] = {}


def _remembered(fn, case: Case, compute: Callable):
    """compute(), remembered for the very same function and case objects: a check's cases are
    made once, so a second check (and a test judging hundreds of answers on one case list)
    runs the reference and the catalogued mistakes only once per case."""
    key = (id(fn), id(case))
    if key not in _OUTCOMES or _OUTCOMES[key][0] is not fn or _OUTCOMES[key][1] is not case:
        if len(_OUTCOMES) > 5000:
            _OUTCOMES.clear()
        _OUTCOMES[key] = (fn, case, compute())
    return _OUTCOMES[key][2]


def _cached_reference_outcome(exercise: Exercise, case: Case):
    return _remembered(exercise.reference, case, lambda: reference_outcome(exercise, case))


def behaves_like_reference(name: str, fn, cases: list[Case]) -> bool:
    """True when `fn` passes on every one of `cases`; stops at the first that fails."""
    exercise = REGISTRY[name]
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        with random_state_kept():
            return all(_compare(_cached_reference_outcome(exercise, case), _run_safely(exercise, fn, case),
                                exercise) is None for case in cases)
    finally:
        torch.set_num_threads(threads)


def _precise_outcome(exercise: Exercise, fn, case: Case):
    """fn's outcome on `case`, its floating-point values from a float64 run where that runs."""
    native = _run_safely(exercise, fn, case)
    if isinstance(native, _Raised) or not exercise.float64_reference or not any(
            t.dtype in (torch.float32, torch.float16, torch.bfloat16) for t in _tensors_in((case.args, case.kwargs))):
        return native
    wide = _run_safely(exercise, fn, case, float64=True)
    if isinstance(wide, _Raised):  # a mistake variant that only runs in float32
        return native
    return _Outcome(_closer(native.value, wide.value), native.changed, _closer(native.gradients, wide.gradients))


@dataclass
class _Close:
    """An expected floating-point tensor: the float64 reference cast to the answer's dtype,
    and `slack`, how far the reference itself (in its own dtype) lands from that."""
    value: torch.Tensor
    slack: float


def _closer(native, wide):
    """`native` with each floating-point tensor replaced by a _Close built from `wide`."""
    if isinstance(native, torch.Tensor) and native.is_floating_point() \
            and isinstance(wide, torch.Tensor) and wide.shape == native.shape:
        value = wide.to(native.dtype)
        error = (native.double() - wide.double()).abs()
        slack = float(error[torch.isfinite(error)].max()) if torch.isfinite(error).any() else 0.0
        return _Close(value, slack)
    if isinstance(native, (list, tuple)) and isinstance(wide, (list, tuple)) \
            and len(native) == len(wide) and not hasattr(native, "_fields"):
        return type(native)(_closer(n, w) for n, w in zip(native, wide))
    if isinstance(native, dict) and isinstance(wide, dict) and native.keys() == wide.keys():
        return {k: _closer(native[k], wide[k]) for k in native}
    return native


def _matching_mistake(exercise: Exercise, cases, expected, actual) -> Mistake | None:
    """The first catalogued mistake one of whose variants behaves like the learner's answer
    on every case; None when no mistake explains every case.

    Behaving alike: the same outcome (values, changed arguments, gradients), or both
    raising. A crash may surface as another exception type in another implementation,
    but a crash alone is weak evidence: unless the two also agree on a wrong value
    somewhere, every crash must be of the same type as the variant's.
    """
    for lenient in (False, True):  # a mistake that agrees everywhere, NaN included, comes first
        for mistake in exercise.mistakes:
            for variant in mistake.variants:
                if _behaves_like(exercise, variant, cases, expected, actual, lenient):
                    return mistake
    return None


def _behaves_like(exercise: Exercise, variant, cases, expected, actual, lenient=False) -> bool:
    """Strict: the same outcome or a crash on every case. Lenient: the same wherever both are finite and defined: a
    case where only one of them raises is left out, and so is every output position where either is NaN or infinite,
    and the gradients where autograd fails on either; a wrong value shared outside those must then show."""
    wrong_value_shared, crashed, crashes_of_one_type, skipped = False, False, True, False
    for case, reference, outcome in zip(cases, expected, actual):
        wrong = _remembered(variant, case, lambda: _precise_outcome(exercise, variant, case))
        if isinstance(wrong, _Raised) and isinstance(outcome, _Raised):
            crashed = True
            crashes_of_one_type &= _crash_signature(wrong.error) == _crash_signature(outcome.error)
        elif isinstance(wrong, _Raised) or isinstance(outcome, _Raised):
            if not lenient:
                return False
            skipped = True
        else:
            if lenient:
                outcome, wrong, reference, both = _where_both_are_finite(outcome, wrong, reference)
                if any(isinstance(o.gradients, str) and o.gradients.startswith(_AUTOGRAD_FAILED)
                       for o in (outcome, wrong)):
                    # autograd could not go back through one of them (an in-place step): undefined, for
                    # the reference too (its gradients are no wrong value that the two share)
                    outcome, wrong, reference = (dataclasses.replace(o, gradients=None) if isinstance(o, _Outcome)
                                                 else o for o in (outcome, wrong, reference))
            else:
                both = False
            outcome, wrong = (dataclasses.replace(o, moved=None) for o in (outcome, wrong))
            if _compare(wrong, outcome, exercise) is not None:
                return False
            wrong_value_shared |= both or _compare(reference, wrong, exercise) is not None
    return wrong_value_shared or crashed and crashes_of_one_type and not skipped


def _where_both_are_finite(answer: _Outcome, wrong: _Outcome, reference):
    """The outcomes with every output position where the answer or the mistake is NaN or infinite set to 0, and
    whether both are undefined where the reference is not: a mistake is named when the answer agrees with it wherever
    both are defined (softmax over the queries gives NaN where a whole key column is masked; the variant patches it to
    0). NaN in the output spreads to every gradient: those are then left out."""
    def undefined(a, w):
        a, w = (a.value if isinstance(a, _Close) else a), (w.value if isinstance(w, _Close) else w)
        if isinstance(a, torch.Tensor) and isinstance(w, torch.Tensor) and a.is_floating_point() \
                and w.is_floating_point() and a.shape == w.shape:
            return ~torch.isfinite(a) | ~torch.isfinite(w)
        if isinstance(a, (list, tuple)) and isinstance(w, (list, tuple)) and len(a) == len(w) \
                and not hasattr(a, "_fields"):
            return [undefined(x, y) for x, y in zip(a, w)]
        return None

    def masked(value, drop):
        tensor = value.value if isinstance(value, _Close) else value
        if isinstance(drop, torch.Tensor) and isinstance(tensor, torch.Tensor) and tensor.shape == drop.shape:
            return tensor.masked_fill(drop, 0)
        if isinstance(drop, list) and isinstance(value, (list, tuple)) and len(value) == len(drop):
            return type(value)(masked(v, d) for v, d in zip(value, drop))
        return value

    drop = undefined(answer.value, wrong.value)
    if not any(bool(d.any()) for d in _tensors_in(drop)):
        return answer, wrong, reference, False
    both = isinstance(reference, _Outcome) and any(
        bool((~torch.isfinite(a) & ~torch.isfinite(w) & torch.isfinite(r)).any()) for a, w, r in zip(
            _tensors_in(_unclosed(answer.value)), _tensors_in(_unclosed(wrong.value)),
            _tensors_in(_unclosed(reference.value))) if a.shape == w.shape == r.shape)
    return (*(dataclasses.replace(o, value=masked(o.value, drop), gradients=None)
              if isinstance(o, _Outcome) else o for o in (answer, wrong, reference)), both)


def _crash_signature(error: BaseException) -> tuple:
    """The exception's type; for a RuntimeError also its message with numbers blanked, since
    torch raises RuntimeError for everything (a shape mismatch and `and` on a tensor alike)."""
    if type(error) is not RuntimeError:
        return (type(error),)
    return type(error), re.sub(r"\d+", "#", str(error))[:80]


def _is_stub(fn) -> bool:
    """True when every function handed in has a body of only `...`, `pass` or NotImplementedError."""
    functions = fn if isinstance(fn, tuple) else (fn,)
    return bool(functions) and all(body_is_stub(f) for f in functions)


_STUB_BY_CODE: dict = {}  # reading a function's source is slow: once per code object


def body_is_stub(fn) -> bool:
    """True when fn's body is only `...`, `pass` or `raise NotImplementedError` (a docstring aside)."""
    fn = inspect.unwrap(fn)  # a wrapper's code is shared by every function it wraps (provenance's)
    code = getattr(fn, "__code__", None)
    if code is not None and code not in _STUB_BY_CODE:
        _STUB_BY_CODE[code] = _body_is_stub(fn)
    return _STUB_BY_CODE[code] if code is not None else _body_is_stub(fn)


def _body_is_stub(fn) -> bool:
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return False
    if not tree.body or not isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    body = tree.body[0].body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # the docstring
    return all(_is_placeholder(statement) for statement in body)


def _is_placeholder(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Pass):
        return True
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return statement.value.value is Ellipsis
    if isinstance(statement, ast.Raise) and statement.exc is not None:
        exc = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    return False


# ---- comparing outputs -----------------------------------------------------------------------

def _compare(expected, actual, exercise: Exercise) -> str | None:
    """None when the outcome `actual` matches `expected`; otherwise a message, first line a summary."""
    if isinstance(expected, _ExpectedRaise):
        must = f"expected your function to raise {expected.kind.__name__} on this input"
        if isinstance(actual, _Raised):
            return None if isinstance(actual.error, expected.kind) \
                else f"{must}, it raised {type(actual.error).__name__}"
        return f"{must}, it returned {_short(actual.value)}"
    if isinstance(actual, _Raised):
        # The checker's own finding about the answer (an optimizer that changed p.grad) is
        # said as such, not as an exception of the learner's.
        return str(actual.error) if getattr(actual.error, "found_by_the_checker", False) \
            else f"your function raised {type(actual.error).__name__}"
    changed = [name for name in actual.changed if name not in expected.changed]
    problem = _compare_values(expected.value, actual.value, exercise)
    if problem is not None:
        also = f"\nit also changed its input {', '.join(f'`{n}`' for n in changed)} in place" if changed else ""
        return problem + also
    if changed:
        names = ", ".join(f"`{name}`" for name in changed)
        return (f"your function changed its input {names} in place: the caller's data is no longer "
                f"what it passed in\ncompute new tensors or lists instead (`x = x + pe`, not `x += pe`; "
                f"`scores / scale`, not `scores /= scale`; copy a list before editing it)")
    if actual.changed != expected.changed:
        return f"it leaves {', '.join(expected.changed)} unchanged where the other one does not"
    if any(t.is_floating_point() and bool(torch.isnan(t).any()) for t in _tensors_in(_unclosed(expected.value))):
        return None  # the gradients of an output that is NaN (nothing to average) say nothing
    return _compare_gradients(expected.gradients, actual.gradients, exercise) \
        or _compare_moved(expected.moved, actual.moved)


def _compare_moved(expected, actual) -> str | None:
    """None when the answer's output follows a nudge of the float64 inputs as the reference's
    does (Case.nudge): to 1e-3 of the largest move, far above float64's rounding (about 1e-9
    here) and of float32 constants inside (1e-7), far below float32 arithmetic's (about 5e-2)."""
    pairs = [(e, a) for e, a in zip(_tensors_in(expected), _tensors_in(actual)) if e.shape == a.shape]
    for e, a in pairs:
        if e.numel() and float((a - e).abs().max()) > 1e-3 * max(1.0, float(e.abs().max())):
            return ("float64 inputs computed in float32 inside? The values are close, but when the inputs move "
                    f"by {_NUDGE:g} your output does not move as the reference's does (float32 cannot resolve "
                    "so small a change)\nkeep the input's dtype throughout: make new tensors with dtype=x.dtype "
                    "(torch.zeros(..., dtype=x.dtype), torch.arange(...).to(x.dtype)), never .float() the data")
    return None


def _unclosed(value):
    """`value` with each _Close replaced by its tensor."""
    if isinstance(value, _Close):
        return value.value
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return [_unclosed(v) for v in value]
    if isinstance(value, dict):
        return {k: _unclosed(v) for k, v in value.items()}
    return value


def _compare_gradients(expected, actual, exercise: Exercise) -> str | None:
    if not isinstance(expected, dict):
        return None
    if not isinstance(actual, dict):
        return actual or "no gradient flows back through your output"
    # A gradient's size depends on the input (LayerNorm's grows as 1/std): the absolute tolerance
    # scales with the largest entry of all the gradients, not each one's own, as a gradient that is
    # mathematically zero (a bias on the keys cancels in softmax) comes out as the largest's rounding.
    largest = max((_largest(grad) for grad in expected.values()), default=0.0)
    scaled = dataclasses.replace(exercise, atol=exercise.atol * max(1.0, largest))
    for name, grad in expected.items():
        problem = _compare_values(grad, actual.get(name), scaled, f"the gradient reaching `{name}`")
        if problem is not None and not _half_and_near_in_all(expected, actual):
            return (problem + "\nthe output is right but autograd cannot follow it back to "
                    f"`{name}`: look for .detach(), .data, a NumPy step, or a value rebuilt "
                    "with torch.tensor(...)") if _is_zero(actual.get(name)) else problem
    return None


def _half_and_near_in_all(expected: dict, actual: dict) -> bool:
    """Half-precision gradients judged all together: through a stack of layers a ReLU input near 0 falls on
    either side as two right answers round differently, moving whole rows. Near: all errors' L2 norm under a
    quarter of all gradients' (zero, NaN, a factor, a sign show); float32 and float64 cases judge each entry."""
    pairs = [(getattr(e, "value", e), actual.get(name)) for name, e in expected.items()]
    if not all(e.dtype in (torch.float16, torch.bfloat16) and isinstance(a, torch.Tensor)
               and a.dtype == e.dtype and a.shape == e.shape for e, a in pairs):
        return False
    finite = [(e.double()[torch.isfinite(e)], a.double()[torch.isfinite(e)]) for e, a in pairs]
    error = sum(float((a - e).pow(2).sum()) for e, a in finite)  # NaN (never near) if a is not finite
    return error <= sum(float(e.pow(2).sum()) for e, _ in finite) / 16


def _largest(value) -> float:
    tensor = value.value if isinstance(value, _Close) else value
    if not isinstance(tensor, torch.Tensor) or tensor.numel() == 0:
        return 0.0
    finite = tensor[torch.isfinite(tensor)]
    return float(finite.abs().max()) if finite.numel() else 0.0


def _is_zero(value) -> bool:
    return isinstance(value, torch.Tensor) and not bool(value.any())


def _compare_values(expected, actual, exercise: Exercise, path: str = "output") -> str | None:
    """None when the value `actual` matches `expected`; otherwise a message, first line a summary."""
    if actual is None and expected is not None:
        return (f"your function returned None: is a `return` statement missing?") if path == "output" \
            else f"{path}: expected {_short(expected)}, got None"
    if isinstance(expected, (torch.Tensor, _Close)):
        return _compare_tensors(expected, actual, exercise, path)
    if isinstance(expected, (tuple, list)):
        # A pair of returned tensors may come as a list or a tuple; a container of plain
        # values must be of the expected kind (a shape is a tuple, token ids a list).
        values = not any(isinstance(e, (torch.Tensor, _Close, tuple, list, dict)) for e in expected)
        kind = (tuple if isinstance(expected, tuple) else list) if values else (tuple, list)
        if not isinstance(actual, kind) or len(actual) != len(expected):
            got = f"{type(actual).__name__} of length {len(actual)}" \
                if isinstance(actual, (tuple, list)) else type(actual).__name__
            return f"{path}: expected {_a(type(expected).__name__)} of {len(expected)} values, got {got}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            name = exercise.output_names[i] if path == "output" and i < len(exercise.output_names) \
                else f"{path}[{i}]"
            problem = _compare_values(e, a, exercise, name)
            if problem is not None:
                return problem
        return None
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return f"{path}: expected a dict, got {type(actual).__name__}"
        if set(expected) != set(actual):
            missing, extra = set(expected) - set(actual), set(actual) - set(expected)
            return (f"{path}: keys differ; missing {sorted(missing, key=str)}, "
                    f"unexpected {sorted(extra, key=str)}")
        for key in expected:
            problem = _compare_values(expected[key], actual[key], exercise, f"{path}[{key!r}]")
            if problem is not None:
                return problem
        return None
    if type(actual) is not type(expected) and not (isinstance(expected, float) and isinstance(actual, (int, float))
                                                   or type(expected) is int and isinstance(actual, numbers.Integral)):
        return (f"{path}: expected {_a(type(expected).__name__)}, "
                f"got {type(actual).__name__} ({_short(actual)})")
    if isinstance(expected, float):
        return None if abs(expected - actual) <= exercise.atol + exercise.rtol * abs(expected) \
            else f"{path}: expected {_digits_that_differ(expected, actual)}"
    if expected == actual:
        return None
    return f"{path}: expected {_short(expected, 120)}, got {_short(actual, 120)}"


def _digits_that_differ(expected: float, actual: float) -> str:
    """'E, got A' with 6 significant digits, or as many more as it takes to tell them apart."""
    digits = next((d for d in range(6, 17) if f"{expected:.{d}g}" != f"{actual:.{d}g}"), 17)
    return f"{expected:.{digits}g}, got {actual:.{digits}g}"


def _a(noun: str) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


def _short(value, width: int = 80) -> str:
    if isinstance(value, (torch.Tensor, _Close, dict)) or isinstance(value, (list, tuple)) and any(
            isinstance(v, (torch.Tensor, dict, list, tuple)) for v in value):
        return _describe(value)
    try:
        text = repr(value)
    except Exception:  # a learner's object whose repr is broken
        return f"a {type(value).__name__}"
    return text if len(text) <= width else text[: width - 3] + "..."


def _compare_tensors(expected, actual, exercise: Exercise, path: str) -> str | None:
    expected, slack = (expected.value, expected.slack) if isinstance(expected, _Close) else (expected, 0.0)
    if isinstance(actual, _Close):  # two wrong answers' precise outcomes compared with each other
        actual = actual.value
    if isinstance(actual, Finding):
        return f"{path}: {actual}"
    if not isinstance(actual, torch.Tensor):
        return f"{path}: expected a tensor, got {type(actual).__name__}"
    if actual.shape != expected.shape:
        return (f"{path}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    if actual.dtype != expected.dtype:
        return f"{path}: dtype {actual.dtype}, expected {expected.dtype}"
    if actual.device != expected.device:
        return f"{path}: on device {actual.device}, expected {expected.device}"
    if torch.equal(actual, expected):  # exactly: no tolerance arithmetic (a second on a 5005 x 5005 float mask)
        return None
    if expected.dtype == torch.bool or not expected.is_floating_point():
        differ = actual != expected  # its first True by argmax: nonzero() lists them all (25M in a 5005 causal mask)
        where = tuple(int(i) for i in np.unravel_index(int(differ.flatten().byte().argmax()), differ.shape))
        return (f"{path}: values differ at {int(torch.count_nonzero(differ))} positions\n"
                f"first at index {where}: expected {expected[where].item()}, got {actual[where].item()}")
    if actual.numel() == 0:
        return None
    # Half precision: a few of the dtype's steps, of the value and of the largest (at least 1).
    half = 4 * torch.finfo(expected.dtype).eps if expected.dtype in (torch.float16, torch.bfloat16) else 0.0
    actual, expected = actual.detach().double(), expected.detach().double()
    if torch.isnan(actual).any() and not torch.isnan(expected).any():
        where = tuple(torch.isnan(actual).nonzero()[0].tolist())
        hint = f"; {exercise.nan_hint}" if exercise.nan_hint else ""
        return f"{path}: contains NaN (first at index {where}) where the reference has none{hint}"
    # The allowed error: the usual tolerances, widened by twice what the reference itself
    # is off from float64, so that both it and a more accurate answer pass.
    allowed = exercise.atol + (exercise.rtol + half) * expected.abs() + 2 * slack + half * max(1.0, _largest(expected))
    error = (actual - expected).abs()
    same = (error <= allowed) | (actual == expected) | (torch.isnan(actual) & torch.isnan(expected))
    if bool(same.all()):
        return None
    excess = torch.where(same, float("-inf"), (error - allowed).nan_to_num(float("inf")))
    where = tuple((excess == excess.max()).nonzero()[0].tolist())  # the worst element, not the largest
    count = int((~same).sum())                                   # error (torch.unravel_index is slow)
    return (f"{path}: values differ at {count} of {actual.numel()} positions "
            f"(largest absolute error {error[~same].max().item():.3g})\n"
            f"worst at index {where}: expected {expected[where].item():.5g}, got {actual[where].item():.5g}")


# ---- telling the learner where their code failed ---------------------------------------------

def _describe_inputs(case: Case) -> str:
    parts = [_describe(a) for a in case.args] + [f"{k}={_describe(v)}" for k, v in case.kwargs.items()]
    return ", ".join(parts)


def _describe(value, depth: int = 0) -> str:
    """A short description: dtype and shape for a tensor, keys for a dict, never a long dump."""
    if isinstance(value, _Close):
        value = value.value
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).replace('torch.', '')}{tuple(value.shape)}"
    if isinstance(value, dict):  # a dict of dicts (a layer's params) is named by its keys
        if depth > 0 or len(value) > 6 or any(isinstance(v, dict) for v in value.values()):
            keys = ", ".join(str(k) for k in list(value)[:6]) + (", ..." if len(value) > 6 else "")
            return f"dict({keys})"
        return "{" + ", ".join(f"{k}: {_describe(v, depth + 1)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)) and (len(value) > 4 or depth > 1 or any(
            isinstance(v, (dict, list, tuple, torch.Tensor)) for v in value)):
        kinds = {type(v).__name__ for v in value}
        of = f" {kinds.pop()}s" if len(kinds) == 1 else ""
        return f"{type(value).__name__} of {len(value)}{of}"
    return _short(value, 40)


def _where_it_raised(error: BaseException) -> str:
    if getattr(error, "where_it_raised", None):  # said where it ran (judge's hook): it was sent as text
        return error.where_it_raised
    frames = traceback.extract_tb(error.__traceback__)
    own = [f for f in frames if not _is_library_file(f.filename)]
    message = f"{type(error).__name__}: {error}".strip()
    hint = _python_slip(error)
    if hint:
        message += f"\nhint: {hint}"
    if not own:
        return message
    frame = own[-1]
    line = (frame.line or "").strip()
    return f"in {frame.name}, line {frame.lineno}: {line}\n{message}"


def _python_slip(error: BaseException) -> str:
    """A hint for the Python slips that the seed notes list (checklist of seed 002)."""
    text = str(error)
    if isinstance(error, AttributeError) and text.startswith("'dict' object has no attribute"):
        key = text.rsplit("'", 2)[-2] if text.count("'") >= 4 else "key"
        return f"a dict's entries are read with square brackets: params['{key}'], not params.{key}"
    if isinstance(error, NameError):
        name = getattr(error, "name", None) or text.split("'")[1] if "'" in text else "?"
        known = _names_in_scope(error)
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.5) if known else []
        similar = f" (you have `{close[0]}`: one name per thing)" if close else ""
        return f"`{name}` is used before anything was assigned to it{similar}"
    if isinstance(error, RuntimeError) and "Boolean value of Tensor" in text:
        return ("`if t:` on a tensor (a mask, a bias) asks it for one True/False; to test "
                "whether an optional argument was given, write `if mask is not None:`")
    if isinstance(error, RuntimeError) and "numpy() on Tensor that requires grad" in text:
        return ("this output feeds training, and autograd cannot follow a NumPy step: "
                "stay in torch (torch.softmax, torch.exp, ...)")
    if isinstance(error, TypeError) and "__round__" in text:
        return ("round() does not take tensors, and rounding an intermediate value throws away "
                "precision: keep the full values")
    return ""


def _names_in_scope(error: BaseException) -> list[str]:
    """The local names of the learner's frame that raised, for a did-you-mean."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return list(tb.tb_frame.f_locals) if tb is not None else []


def _is_library_file(filename: str) -> bool:
    path = os.path.abspath(filename)
    return path.startswith(_TORCH_DIR) or path.startswith(_PACKAGE_DIR) or "site-packages" in path

