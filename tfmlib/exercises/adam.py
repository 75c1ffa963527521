"""Exercises of notebook 09: Adam (and plain SGD) written by hand.

How each check calls the learner's functions:
    adam:      check("adam", (my_adam_init, my_adam_step))
               state = my_adam_init(parameters)
               then, once per step, after the check has set every p.grad:
               my_adam_step(parameters, state, lr, betas[, eps=...])   (eps given on some cases)
               If my_adam_step returns something other than None, that is taken as the new
               state (a functional style, `state = step(...)`, passes as well).
    sgd_step:  my_sgd_step(parameters, lr)
    adamw_step: state = tfmlib's adam_init(parameters), then once per step
               my_adamw_step(parameters, state, lr, betas, weight_decay=...)
    clip_grad_norm: total_norm = my_clip_grad_norm(parameters, max_norm), once, after the
               check has set every p.grad; judged: the returned norm (a 0-dim tensor), every
               p.grad afterwards (scaled in place: a new tensor put in p.grad leaves the one
               held unscaled) and the parameters
    warmup_inverse_sqrt_lr, warmup_cosine_lr: called once per step of a list of steps;
               judged: the float returned for each step (and the exception, if one is due)

Only behaviour is judged: the parameters after every step of the small problems below, and
the gradients, which the step must leave as it found them. Any layout of the state passes:
a dict, a tuple (m, v, t), a class, moments keyed by id(p)...

t counts optimizer steps, one number for all parameters (notebook 09): a parameter
without a gradient on some step still sees t grow. torch.optim.Adam counts steps per
parameter instead; the two agree whenever every parameter has a gradient on every step.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass, field

import torch

from ..adam import (adam_init, adam_step, adamw_step, clip_grad_norm, sgd_step, warmup_cosine_lr,
                    warmup_inverse_sqrt_lr)
from .core import Case, Contract, Exercise, Finding, Mistake, OutputOverwrittenError, _same_value, body_is_stub, register

# ---- the problems the optimizer is run on -----------------------------------------------------

class _Quadratic:
    """loss(params) = sum_i |A_i p_i - b_i|^2 over the parameters that take part (the first few)."""

    def __init__(self, shapes, g: torch.Generator, dtype=torch.float32):
        self.terms = [(torch.randn(n, n, generator=g).to(dtype) / n ** 0.5,
                       torch.randn(n, generator=g).to(dtype))
                      for n in (torch.Size(s).numel() for s in shapes)]

    def __call__(self, params):
        return sum(((a @ p.reshape(-1) - b) ** 2).sum() for (a, b), p in zip(self.terms, params))


@dataclass(eq=False)
class _Problem:
    """Initial parameter values, how their gradients come, and the hyperparameters."""
    description: str
    params: list
    lr: float
    betas: tuple = (0.9, 0.999)
    steps: int = 3
    grads: list = field(default_factory=list)   # per step, one tensor or None per parameter
    loss: _Quadratic | None = None              # or: gradients from loss(params).backward()
    weight_decay: float | None = None           # AdamW's only
    eps: float | None = None                    # None: left at its default
    decay_given: bool = True                    # False: weight_decay left at its default

    def __deepcopy__(self, memo):
        return self  # never handed to the learner: _trajectory gives out clones only

    def __repr__(self) -> str:
        betas = "" if self.betas is None else f", betas={self.betas}"
        decay = "" if self.weight_decay is None or not self.decay_given else f", weight_decay={self.weight_decay}"
        eps = "" if self.eps is None else f", eps={self.eps}"
        return f"{self.steps} steps, lr={self.lr}{betas}{decay}{eps}"

    def without(self, dropped: set[int]) -> _Problem:
        """The same problem without the parameters numbered in `dropped`."""
        keep = [i for i in range(len(self.params)) if i not in dropped]
        return dataclasses.replace(self, params=[self.params[i] for i in keep],
                                   grads=[[grads[i] for i in keep] for grads in self.grads])

    def sometimes_without_gradient(self) -> set[int]:
        """The parameters whose .grad is None on at least one step."""
        if self.loss is not None:
            return set(range(len(self.loss.terms), len(self.params)))
        return {i for grads in self.grads for i, grad in enumerate(grads) if grad is None}


def _problems() -> list[_Problem]:
    g = torch.Generator().manual_seed(90)
    r = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731

    signs = torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64)

    def tiny(*shape):  # gradients around 1e-3: where eps's place in the formula shows
        return 1e-3 * (0.5 + torch.rand(*shape, generator=g)) * torch.sign(r(*shape))

    problems = [
        _Problem("fixed gradients; the last parameter never gets one", [r(3), r(2, 3), r(4), r(2)],
                 lr=0.1, steps=3, grads=[[r(3), 2 * r(2, 3), tiny(4), None] for _ in range(3)]),
        _Problem("fixed gradients, other betas", [r(5), r(3)], lr=0.05, betas=(0.8, 0.99), steps=4,
                 grads=[[r(5), None] for _ in range(4)]),
        _Problem("gradients from loss.backward()", [r(3), r(2, 2), r(2)], lr=0.2, steps=5),
        _Problem("one parameter, one step", [r(4)], lr=0.01, steps=1, grads=[[r(4)]]),
    ]
    problems[2].loss = _Quadratic([(3,), (2, 2)], g)
    return problems + [
        _Problem("two parameters of one shape, the first without a gradient on step 2 only", [r(3), r(3)], lr=0.1,
                 steps=3, grads=[[r(3), r(3)], [None, r(3)], [r(3), r(3)]]),
        _Problem("float64, gradients near 1e40 (float32 cannot hold them), lr = 3: the first parameter steps back to "
                 "0, where 1 - beta2 ** t rounded to float32 (off by 1.3e-5) shows", [6 * signs, r(2).double()],
                 lr=3.0, steps=2, grads=[[1e40 * signs, r(2).double()] for _ in range(2)]),
        _Problem("gradients near 1e-8, as small as eps: the denominator is half sqrt(v_hat), half eps",
                 [r(3)], lr=0.1, steps=2, grads=[[1e-8 * r(3)] for _ in range(2)]),
    ]


def _cases() -> list[Case]:
    """The problems above, and three that only Adam's own check has: eps given, zero
    gradients after non-zero ones, and a call where no parameter has a gradient."""
    g = torch.Generator().manual_seed(91)
    r = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    tiny = lambda *shape: 1e-3 * (0.5 + torch.rand(*shape, generator=g)) * torch.sign(r(*shape))  # noqa: E731
    problems = _problems() + [
        _Problem("eps given (1e-3), gradients near 1e-3: the eps passed in, not 1e-8", [r(3)], lr=0.1,
                 steps=2, eps=1e-3, grads=[[tiny(3)] for _ in range(2)]),
        _Problem("zero gradients after non-zero ones (m, v decay, p moves); two parameters of one shape, own m, v",
                 [r(3), r(3)], lr=0.1, steps=3,
                 grads=[[r(3), r(3)], [torch.zeros(3), r(3)], [torch.zeros(3), r(3)]]),
        _Problem("a step where no parameter has a gradient: t counts that call too", [r(3)], lr=0.1,
                 steps=3, grads=[[r(3)], [None], [r(3)]]),
        _Problem("betas left at their default, (0.9, 0.999)", [r(3)], lr=0.1, betas=None, steps=3,
                 grads=[[r(3)] for _ in range(3)]),
    ]
    return [Case(problem.description, (problem,)) for problem in problems]


# ---- running an optimizer on a problem --------------------------------------------------------

class _InPlaceOnLeaf(RuntimeError):
    """In-place update of a parameter outside torch.no_grad()."""


_InPlaceOnLeaf.__name__ = _InPlaceOnLeaf.__qualname__ = "RuntimeError"


class GradIsNoneError(Exception):
    """The optimizer raised on a parameter whose .grad is None, and runs without that parameter."""


class OptimizerRuleError(Exception):
    """The optimizer broke a rule its caller relies on."""
    found_by_the_checker = True  # the check says this message, not "your function raised ..."


class GradientChangedError(OptimizerRuleError):
    """It changed a parameter's .grad: the caller's gradients are not its scratch space."""


class NewMemoryError(OptimizerRuleError):
    """It gave a parameter new memory (p.data = ...): what shares the old one keeps the old values."""


def _trajectory(problem: _Problem, init, step) -> list[list[torch.Tensor]]:
    """The parameters' values after every step. With a state (init), the run is made twice on the same tensors, reset
    in place, from a fresh init: moments kept outside the state (keyed by id(p)) carry over and show."""
    model = [p.clone().requires_grad_() for p in problem.params]  # the model's own tensors
    # The list handed to the optimizer, which may rebind its entries: the same object in both
    # runs, as a training loop's, so that a state kept by id(parameters) carries over and shows.
    params = list(model)
    for _ in range(2 if init is not None else 1):
        with torch.no_grad():
            for p, value in zip(model, problem.params):
                p.copy_(value)
        params[:] = model
        state = init(params) if init is not None else None
        trajectory = []
        shapes = [p.shape for p in params]
        for k in range(problem.steps):
            # A step that put new tensors into the list (params[i] = p - ...) never changed the
            # model's tensors: like `p = p - ...`, the update is lost. Read the model, not the list.
            params[:] = model
            for i, p in enumerate(params):
                if not isinstance(p, torch.Tensor) or p.shape != shapes[i]:
                    got = tuple(p.shape) if isinstance(p, torch.Tensor) else type(p).__name__
                    raise ValueError(f"parameters[{i}]: your step changed its shape from "
                                     f"{tuple(shapes[i])} to {got}; update the values in place")
                p.grad = None
            if problem.loss is not None:
                problem.loss(params).backward()
            else:
                for p, grad in zip(params, problem.grads[k]):
                    p.grad = None if grad is None else grad.clone()
            given = [None if p.grad is None else p.grad.clone() for p in params]
            memory = [p.data_ptr() for p in model]
            try:
                new_state = step(params, state, problem)
            except RuntimeError as error:
                if "leaf Variable that requires grad" in str(error):
                    raise _InPlaceOnLeaf(*error.args).with_traceback(error.__traceback__) from None
                raise
            _require_rules_kept(model, given, memory)
            if new_state is not None and new_state is not params:  # a functional step returns the state
                state = new_state
            trajectory.append([p.detach().clone() for p in model])
    return trajectory


def _require_rules_kept(params, given, memory) -> None:
    """Raise NewMemoryError when the step moved p's data, GradientChangedError when it left p.grad changed."""
    for i, (p, before, address) in enumerate(zip(params, given, memory)):
        if p.data_ptr() != address:
            raise NewMemoryError(
                f"parameters[{i}]: your step gave it new memory (`p.data = ...`), not the update in place it asks for: "
                "a view of p or a weight tied to it keeps the old values; write p.sub_(...) or p -= ..., under no_grad")
        if _same_value(p.grad, before):  # NaN equal to NaN
            continue
        how = ("it was a tensor, your step set it to None" if p.grad is None
               else "it was None, your step put a tensor there" if before is None
               else "your step changed its values")
        raise GradientChangedError(
            f"parameters[{i}].grad: {how}; an optimizer reads the gradients and leaves them "
            "as they were (torch.optim does too): the caller may still need them")


def _run_optimizer(problem: _Problem, init, step):
    """_trajectory, naming the crash that only happens because a gradient is None."""
    try:
        return _trajectory(problem, init, step)
    except Exception as error:
        missing = problem.sometimes_without_gradient()
        if not missing or isinstance(error, (_InPlaceOnLeaf, OptimizerRuleError)):
            raise
        try:  # with no parameter left, the missing gradients alone made it crash
            _trajectory(problem.without(missing), init, step) if len(missing) < len(problem.params) else None
        except Exception:
            raise error from None
        raise GradIsNoneError(f"{type(error).__name__}: {error}").with_traceback(error.__traceback__) from None


# _run_optimizer returns the parameters after every step: name them so in the messages.
_AFTER_EACH_STEP = tuple(f"after step {k}: parameters" for k in range(1, 11))


def _pair(functions):
    if not (isinstance(functions, (tuple, list)) and len(functions) == 2
            and all(callable(f) for f in functions)):
        raise TypeError("hand in both functions as a pair: check('adam', (my_adam_init, my_adam_step))")
    for function, name in zip(functions, ("adam_init", "adam_step")):
        if body_is_stub(function):
            raise NotImplementedError(f"your {name} is still a stub")
    return functions


def _adam_run(functions, case: Case):
    init, step = _pair(functions)

    def checked_init(params):
        state = init(params)
        if state is None:
            raise TypeError("your adam_init returned None: is `return state` missing?")
        return state

    return _run_optimizer(case.args[0], checked_init, lambda params, state, problem: step(
        params, state, problem.lr, *(() if problem.betas is None else (problem.betas,)),
        **({} if problem.eps is None else {"eps": problem.eps})))


def _sgd_run(fn, case: Case):
    return _run_optimizer(case.args[0], None, lambda params, state, problem: fn(params, problem.lr))


# ---- Adam's classic mistakes ------------------------------------------------------------------

def _adam_step_variant(*, reinit=False, t_per_parameter=None, bias_correction=True,
                       t_after_update=False, skip_none=True, no_grad=True, in_place=True,
                       fixed_betas=False, eps_inside=False, sign=-1.0, t_kept=True,
                       missing_as_zero=False, grad_as_scratch=False, fixed_eps=False, v_is_m=False):
    """adam_step with one classic mistake; the state layout is adam_init's."""
    def step(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
        params = list(parameters)
        eps = 1e-8 if fixed_eps else eps
        if reinit:
            state = adam_init(params)
        elif not t_kept:  # m and v carry on, but t = state["t"] + 1 stays a local name
            state = {**state, "t": state["t"]}
        beta1, beta2 = (0.9, 0.999) if fixed_betas else betas
        if not t_after_update and t_per_parameter is None:
            state["t"] += 1
        context = torch.no_grad() if no_grad else contextlib.nullcontext()
        with context:
            for i, p in enumerate(params):
                if t_per_parameter == "before the None check":
                    state["t"] += 1
                if skip_none and not missing_as_zero and p.grad is None:
                    continue
                if t_per_parameter == "after the None check":
                    state["t"] += 1
                if t_per_parameter == "own count":  # state["t"] is a list: one count per parameter
                    state["t"][i] += 1
                t = state["t"][i] if t_per_parameter == "own count" else state["t"]
                g, m, v = p.grad, state["m"][i], state["v"][i]
                if v_is_m:
                    v = m
                if missing_as_zero and g is None:
                    g = torch.zeros_like(p)
                    if missing_as_zero == "written into p.grad":
                        p.grad = g
                if grad_as_scratch:
                    g.mul_(1 - beta1)  # the caller's gradient, scaled in place
                    m.mul_(beta1).add_(g)
                    v.mul_(beta2).addcmul_(g, g, value=(1 - beta2) / (1 - beta1) ** 2)
                else:
                    m.mul_(beta1).add_(g, alpha=1 - beta1)
                    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                m_hat = m / (1 - beta1 ** t) if bias_correction else m
                v_hat = v / (1 - beta2 ** t) if bias_correction else v
                denominator = (v_hat + eps).sqrt() if eps_inside else v_hat.sqrt() + eps
                update = sign * lr * m_hat / denominator
                if in_place:
                    p.add_(update)
                else:
                    p = p + update  # rebinds the loop's name; the parameter itself never changes
        if t_after_update:
            state["t"] += 1
    return step


def _adam_init_variant(*, zeros=torch.zeros_like, v_is_m=False, count_per_parameter=False):
    """adam_init with one mistake: m and v made by `zeros`, v the very same list as m, or
    torch.optim.Adam's layout, a step count of its own for every parameter."""
    def init(parameters):
        params = list(parameters)
        m = [zeros(p) for p in params]
        v = m if v_is_m else [zeros(p) for p in params]
        return {"t": [0] * len(params) if count_per_parameter else 0, "m": m, "v": v}
    return init


def _adam(**mistake):
    return (adam_init, _adam_step_variant(**mistake))


_GRAD_AS_SCRATCH_HINT = ("read p.grad, never write it: g = p.grad * c makes a new tensor, while "
                         "p.grad.mul_(c), g *= c (g = p.grad) or p.grad = None change the caller's gradients")

register(Exercise(
    name="adam",
    output_names=_AFTER_EACH_STEP,
    reference=(adam_init, adam_step),
    make_cases=_cases,
    run=_adam_run,
    float64_reference=False,  # the run clones the problem's own tensors: a float64 copy is the same run
    solution_sources=(adam_init, adam_step),
    mistakes=[
        Mistake("state re-initialised every step",
                "create m, v and t once, in adam_init; adam_step must carry on the state it is given",
                _adam(reinit=True)),
        Mistake("t incremented once per parameter",
                "t counts optimizer steps: add 1 once per adam_step call, outside the loop over parameters",
                _adam(t_per_parameter="after the None check"),
                also=(_adam(t_per_parameter="before the None check"),)),
        Mistake("t not carried to the next step",
                "t must grow by one every step: store it back in the state (or return the new state "
                "and use it), else the bias correction always acts as on step 1",
                _adam(t_kept=False)),
        Mistake("v = m: both names for the same tensors",
                "assignment shares the object: m and v must be two tensors per parameter, each made by "
                "its own torch.zeros_like(p) in adam_init and read from its own list in adam_step",
                (_adam_init_variant(v_is_m=True), _adam_step_variant()), also=(_adam(v_is_m=True),)),
        Mistake("no bias correction",
                "divide by (1 - beta ** t): m_hat = m / (1 - beta1 ** t), v_hat = v / (1 - beta2 ** t)",
                _adam(bias_correction=False)),
        Mistake("bias correction with t before it is incremented",
                "increment t at the start of the step: with t = 0, 1 - beta ** t is 0",
                _adam(t_after_update=True)),
        Mistake("crash on a parameter whose grad is None",
                "a parameter that took no part in the loss has p.grad None: skip it with `if p.grad is None: continue`",
                _adam(skip_none=False)),
        Mistake("a missing gradient treated as zero",
                "skip a parameter whose p.grad is None (`continue`): a zero gradient would still "
                "decay m and v and move p with the momentum of earlier steps",
                _adam(missing_as_zero=True), also=(_adam(missing_as_zero="written into p.grad"),)),
        Mistake("t counted per parameter, only on its steps with a gradient (torch.optim.Adam's way)",
                "this course's t counts optimizer steps: one t for all parameters, +1 on every call, "
                "also for a parameter that has no gradient this step",
                (_adam_init_variant(count_per_parameter=True), _adam_step_variant(t_per_parameter="own count"))),
        Mistake("float32 inside a float64 step: m and v from torch.zeros(p.shape), or p.grad cast",
                "torch.zeros(p.shape) is float32 on the CPU whatever p is, and so is p.grad.float(): float32 "
                "overflows here; make m and v with torch.zeros_like(p) (p's dtype and device), keep p.grad's",
                (_adam_init_variant(zeros=lambda p: torch.zeros(p.shape)), _adam_step_variant())),
        Mistake("p.grad changed by the step (the caller's gradients)",
                _GRAD_AS_SCRATCH_HINT,
                _adam(grad_as_scratch=True)),
        Mistake("update not in place (p = p - ... rebinds a name)",
                "change the parameter itself: p.sub_(...) or p -= ... inside torch.no_grad()",
                _adam(in_place=False)),
        Mistake("update not under torch.no_grad()",
                "wrap the updates in `with torch.no_grad():`, autograd may not record them",
                _adam(no_grad=False)),
        Mistake("betas ignored",
                "use the betas you are given: beta1, beta2 = betas",
                _adam(fixed_betas=True)),
        Mistake("eps inside the square root",
                "eps is added after the root: m_hat / (torch.sqrt(v_hat) + eps)",
                _adam(eps_inside=True)),
        Mistake("update added instead of subtracted",
                "go against the gradient: p = p - lr * m_hat / (sqrt(v_hat) + eps)",
                _adam(sign=1.0)),
    ],
))


# ---- SGD --------------------------------------------------------------------------------------

def _sgd_variant(*, skip_none=True, no_grad=True, in_place=True, sign=-1.0, grad_as_scratch=False):
    def step(parameters, lr):
        with torch.no_grad() if no_grad else contextlib.nullcontext():
            for p in parameters:
                if skip_none and p.grad is None:
                    continue
                if grad_as_scratch:
                    p.grad.mul_(lr)  # the caller's gradient, scaled in place
                    p.sub_(p.grad)
                elif in_place:
                    p.add_(sign * lr * p.grad)
                else:
                    p = p + sign * lr * p.grad  # rebinds the loop's name only
    return step


def _sgd_cases() -> list[Case]:
    problems = [dataclasses.replace(_problems()[i], betas=None) for i in (0, 2, 4)]  # SGD has no betas
    odd = torch.tensor([math.nan, math.inf, 1e40, 1.0], dtype=torch.float64)  # float32 cannot hold 1e40
    problems.append(_Problem("float64, lr = 3, a gradient holding nan, inf and 1e40: the formula as it is",
                             [torch.ones(4, dtype=torch.float64)], lr=3.0, betas=None, steps=1, grads=[[odd]]))
    return [Case(problem.description, (problem,)) for problem in problems]


register(Exercise(
    name="sgd_step",
    output_names=_AFTER_EACH_STEP,
    reference=sgd_step,
    make_cases=_sgd_cases,
    run=_sgd_run,
    float64_reference=False,  # the run clones the problem's own tensors: a float64 copy is the same run
    mistakes=[
        Mistake("crash on a parameter whose grad is None",
                "skip parameters without a gradient: `if p.grad is None: continue`",
                _sgd_variant(skip_none=False)),
        Mistake("p.grad changed by the step (the caller's gradients)",
                _GRAD_AS_SCRATCH_HINT,
                _sgd_variant(grad_as_scratch=True)),
        Mistake("update not in place (p = p - ... rebinds a name)",
                "change the parameter itself: p.sub_(lr * p.grad) or p -= lr * p.grad",
                _sgd_variant(in_place=False)),
        Mistake("update not under torch.no_grad()",
                "wrap the updates in `with torch.no_grad():`, autograd may not record them",
                _sgd_variant(no_grad=False)),
        Mistake("update added instead of subtracted",
                "go against the gradient: p = p - lr * p.grad",
                _sgd_variant(sign=1.0)),
    ],
))


# ---- AdamW ------------------------------------------------------------------------------------

def _with_decay(problems: list[_Problem], decays) -> list[_Problem]:
    for problem, decay in zip(problems, decays):
        problem.weight_decay = decay
    return problems


def _adamw_cases() -> list[Case]:
    # lr * weight_decay up to 0.5: large enough that decaying after the update, or without
    # lr, moves p visibly; one problem without decay (AdamW is then Adam).
    problems = _with_decay(_problems(), (0.5, 2.0, 1.0, 0.0, 5.0, 0.3, 0.1))
    g = torch.Generator().manual_seed(91)
    r = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    problems += [
        _Problem("large parameters, large gradients: the decay and the update both show", [10 * r(3), r(2, 2)],
                 lr=0.2, steps=3, weight_decay=1.5, grads=[[50 * r(3), r(2, 2)] for _ in range(3)]),
        _Problem("eps = 1e-3 with gradients near 1e-3: the eps you are given counts", [r(4)], lr=0.1, steps=3,
                 weight_decay=0.5, eps=1e-3, grads=[[1e-3 * r(4)] for _ in range(3)]),
        _Problem("weight_decay not given: AdamW's default, 1e-2", [r(3)], lr=0.5, steps=3, weight_decay=1e-2,
                 decay_given=False, grads=[[r(3)] for _ in range(3)]),
    ]
    return [Case(problem.description, (problem,)) for problem in problems]


def _adamw_run(fn, case: Case):
    def step(params, state, problem):
        given = {"eps": problem.eps} if problem.eps is not None else {}
        if problem.decay_given:
            given["weight_decay"] = problem.weight_decay
        return fn(params, state, problem.lr, problem.betas, **given)
    return _run_optimizer(case.args[0], adam_init, step)


def _adamw_variant(*, decay="decoupled", decay_all=False, **adam_mistake):
    """adamw_step with one mistake: where (or whether) the decay goes, or one of Adam's."""
    adam = _adam_step_variant(**adam_mistake)

    def step(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        params = list(parameters)
        decayed = [p for p in params if decay_all or p.grad is not None]
        if decay in ("l2", "l2 left in p.grad"):  # weight_decay * p added to the gradient Adam reads
            grads = [p.grad for p in params]
            for p in decayed:
                p.grad = (p.grad if p.grad is not None else torch.zeros_like(p)) + weight_decay * p.detach()
            adam(params, state, lr, betas, eps)
            for p, grad in zip(params, grads):
                p.grad = grad if decay == "l2" else p.grad  # 09 section 8's way leaves it there
            return
        factor = {"decoupled": 1 - lr * weight_decay, "after": 1 - lr * weight_decay,
                  "without lr": 1 - weight_decay, "added": 1 + lr * weight_decay, None: 1.0}[decay]
        with torch.no_grad():
            for p in decayed if decay != "after" else ():
                p.mul_(factor)
        adam(params, state, lr, betas, eps)
        with torch.no_grad():
            for p in decayed if decay == "after" else ():
                p.mul_(factor)
    return step


def _adamw_decay_in_fraction(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    """weight_decay * p put beside m_hat, so that it is divided by sqrt(v_hat) as well."""
    params = list(parameters)
    beta1, beta2 = betas
    state["t"] += 1
    t = state["t"]
    with torch.no_grad():
        for p, m, v in zip(params, state["m"], state["v"]):
            if p.grad is None:
                continue
            m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
            v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            m_hat, v_hat = m / (1 - beta1 ** t), v / (1 - beta2 ** t)
            p.sub_(lr * (m_hat + weight_decay * p) / (v_hat.sqrt() + eps))


register(Exercise(
    name="adamw_step",
    output_names=_AFTER_EACH_STEP,
    reference=adamw_step,
    make_cases=_adamw_cases,
    run=_adamw_run,
    float64_reference=False,  # the run clones the problem's own tensors: a float64 copy is the same run
    mistakes=[
        Mistake("weight decay added to the gradient (Adam + L2, not AdamW)",
                "g + weight_decay * p goes through m and v, so the decay is divided by sqrt(v_hat) "
                "like the gradient: decouple it, multiply p by (1 - lr * weight_decay), then take the Adam step",
                _adamw_variant(decay="l2"), also=(_adamw_variant(decay="l2 left in p.grad"),)),
        Mistake("weight decay inside the Adam fraction, divided by sqrt(v_hat)",
                "(m_hat + weight_decay * p) / (sqrt(v_hat) + eps) scales the decay by each weight's "
                "gradient size; AdamW subtracts lr * weight_decay * p on its own",
                _adamw_decay_in_fraction),
        Mistake("weight decay applied after the Adam update",
                "shrink p first (times 1 - lr * weight_decay), then take the Adam step "
                "(torch.optim.AdamW's order): decaying afterwards also shrinks this step's update",
                _adamw_variant(decay="after")),
        Mistake("weight decay not scaled by lr",
                "the decay is lr * weight_decay per step: p times (1 - lr * weight_decay), not (1 - weight_decay)",
                _adamw_variant(decay="without lr")),
        Mistake("weight decay with the wrong sign (the weights grow)",
                "decay shrinks the weights: multiply by 1 - lr * weight_decay",
                _adamw_variant(decay="added")),
        Mistake("weight decay ignored (plain Adam)",
                "AdamW first multiplies each parameter that has a gradient by 1 - lr * weight_decay",
                _adamw_variant(decay=None)),
        Mistake("parameters without a gradient decayed too",
                "skip a parameter whose p.grad is None entirely, decay included (torch.optim.AdamW "
                "does): it took no part in this step",
                _adamw_variant(decay_all=True)),
        Mistake("crash on a parameter whose grad is None",
                "a parameter that took no part in the loss has p.grad None: skip it, for the decay "
                "as for the Adam update",
                _adamw_variant(skip_none=False)),
        Mistake("no bias correction",
                "divide by (1 - beta ** t): m_hat = m / (1 - beta1 ** t), v_hat = v / (1 - beta2 ** t)",
                _adamw_variant(bias_correction=False)),
        Mistake("t incremented once per parameter",
                "t counts optimizer steps: add 1 once per call, outside the loop over parameters",
                _adamw_variant(t_per_parameter="after the None check"),
                also=(_adamw_variant(t_per_parameter="before the None check"),)),
        Mistake("update not in place (p = p - ... rebinds a name)",
                "change the parameter itself: p.mul_(...) and p.sub_(...) inside torch.no_grad()",
                _adamw_variant(in_place=False)),
        Mistake("betas ignored",
                "use the betas you are given: beta1, beta2 = betas",
                _adamw_variant(fixed_betas=True)),
        Mistake("eps ignored",
                "pass the eps you are given on to the Adam step (adam_step(..., betas, eps)): "
                "the paper uses 1e-9, not the default 1e-8",
                _adamw_variant(fixed_eps=True)),
        Mistake("state re-initialised every step",
                "m, v and t come in the state and carry on from step to step: never rebuild them inside the step",
                _adamw_variant(reinit=True)),
        Mistake("update not under torch.no_grad()",
                "wrap the decay and the update in `with torch.no_grad():`, autograd may not record "
                "in-place changes of a parameter",
                _adamw_variant(no_grad=False)),
    ],
))


# ---- clip_grad_norm ---------------------------------------------------------------------------

@dataclass(eq=False)
class _Gradients:
    """Parameters and their gradients (None: no gradient), and the max_norm to clip to."""
    description: str
    params: list
    grads: list
    max_norm: float
    as_one_tensor: bool = False  # hand the single parameter over as a tensor, not in a list

    def __deepcopy__(self, memo):
        return self  # never handed to the learner: _clip_run gives out fresh tensors only

    def __repr__(self) -> str:
        shapes = ", ".join(f"{tuple(p.shape)}" + (" no grad" if g is None else "")
                           for p, g in zip(self.params, self.grads))
        return f"parameters [{shapes}], max_norm={self.max_norm}"


def _clip_run(fn, case: Case, factor: float = 1.0):
    """-> (returned norm, every p.grad afterwards, every parameter afterwards), the gradients the
    problem's times `factor`; the norm is read after a call on twice the gradients, as a log is."""
    problem = case.args[0]
    params = [p.clone().requires_grad_() for p in problem.params]
    for p, grad in zip(params, problem.grads):
        p.grad = None if grad is None else grad * factor
    held = [p.grad for p in params]  # what an optimizer holding the gradients would see
    total_norm = fn(params[0] if problem.as_one_tensor else params, problem.max_norm)
    if factor == 1.0 and isinstance(total_norm, torch.Tensor):
        logged = total_norm.detach().clone()
        _clip_run(fn, case, 2.0)  # the next step's call
        if not _same_value(total_norm.detach(), logged):
            raise OutputOverwrittenError("the norm your function returned changed when it was called again: it "
                                         "is a buffer that every call writes\nreturn a new tensor on every call")
    if isinstance(total_norm, torch.Tensor) and total_norm.is_floating_point():
        total_norm = total_norm.detach().double()  # a norm in float64 (more precise) passes too
    elif isinstance(total_norm, torch.Tensor):
        total_norm = Finding(f"{total_norm.dtype}: the norm is a float tensor, torch.tensor(0.0) not torch.tensor(0)")
    grads = [None if p.grad is None else p.grad.detach().clone() if p.grad is grad
             else Finding("p.grad was replaced by a new tensor, so the tensor held before (an optimizer "
                          "holds it) was left unscaled: scale it in place, p.grad.mul_(scale)")
             for p, grad in zip(params, held)]
    return total_norm, grads, [p.detach().clone() for p in params]


def _clip_problems(g: torch.Generator, dtype=torch.float32) -> list[_Gradients]:
    def r(*shape, scale=1.0):
        return scale * torch.randn(shape, generator=g, dtype=dtype)

    return [
        _Gradients("a gradient spike: the global norm far above max_norm; one parameter without grad",
                   [r(3), r(2, 3), r(4), r(2)], [r(3, scale=10), r(2, 3, scale=20), r(4, scale=0.1), None],
                   max_norm=1.0),
        _Gradients("the global norm below max_norm: nothing changes (no scaling up)",
                   [r(3), r(2, 2)], [r(3, scale=0.1), r(2, 2, scale=0.1)], max_norm=5.0),
        _Gradients("one large gradient and one small: one factor for both, not one each",
                   [r(5), r(3)], [r(5, scale=30), r(3, scale=0.05)], max_norm=2.0),
        _Gradients("one tensor, not a list (torch accepts both)", [r(4, 3)], [r(4, 3, scale=5)],
                   max_norm=3.0, as_one_tensor=True),
        _Gradients("no parameter has a gradient: the norm is 0", [r(3), r(2)], [None, None], max_norm=1.0),
        _Gradients("a scalar, an empty parameter and a zero gradient among the others",
                   [r(), r(0), r(2, 2), r(3)], [r(scale=4), r(0), torch.zeros(2, 2, dtype=dtype), r(3, scale=4)],
                   max_norm=1.5),
    ]


def _clip_cases() -> list[Case]:
    g = torch.Generator().manual_seed(92)
    r = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    problems = _clip_problems(g)
    problems.append(dataclasses.replace(_clip_problems(g, torch.float64)[0],
                                        description="float64 gradients, the global norm above max_norm"))

    def with_norm(norm, *shapes):  # gradients whose global norm is exactly `norm`
        grads = [r(shape) for shape in shapes]
        total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(x) for x in grads]))
        return [x * (norm / total) for x in grads]

    # Between sqrt(max_norm) and max_norm, or the other way round: where comparing the squared
    # norm with max_norm gives the wrong answer.
    problems += [
        _Gradients("norm 3 below max_norm 4 (its square, 9, is above): nothing changes",
                   [r(3), r(2)], with_norm(3.0, (3,), (2,)), max_norm=4.0),
        _Gradients("norm 0.4 above max_norm 0.25 (its square, 0.16, is below): clipped",
                   [r(2, 2)], with_norm(0.4, (2, 2)), max_norm=0.25),
        _Gradients("norm 2e-6 above max_norm 1e-6: the 1e-6 added to the norm matters (factor 1/3, not 1/2)",
                   [r(4)], with_norm(2e-6, (4,)), max_norm=1e-6),
        _Gradients("tiny gradients (norm 1e-8, below the 1e-6 added to it): left as they are",
                   [r(3)], with_norm(1e-8, (3,)), max_norm=1.0),
        _Gradients("every gradient zero: the norm is 0, nothing to scale (and nothing to divide by)",
                   [r(3), r(2)], [torch.zeros(3), torch.zeros(2)], max_norm=1.0),
        _Gradients("float16 gradients of norm 500: squared in float16 they overflow (65504 at most)",
                   [r(2).half(), r(1).half()], [torch.tensor([300.0, 0.0]).half(), torch.tensor([400.0]).half()], 1.0),
    ]
    return [Case(problem.description, (problem,)) for problem in problems]


def _clip_variant(*, norm="global", clamp=True, returns="before", skip_none=True, squared_test=False,
                  in_place=True):
    """clip_grad_norm with one classic mistake."""
    def clip(parameters, max_norm):
        params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        with_grad = [p for p in params if p.grad is not None or not skip_none]
        grads = [p.grad for p in with_grad]
        if not grads:
            return torch.tensor(0.0)
        norms = torch.stack([torch.linalg.vector_norm(g) for g in grads])
        total = {"global": torch.linalg.vector_norm(norms), "sum": norms.sum(),
                 "squared": norms.square().sum()}.get(norm, torch.linalg.vector_norm(norms))
        if squared_test:  # `if norm ** 2 > max_norm`: then scaled to max_norm, up or down
            if total ** 2 > max_norm:
                for g in grads:
                    g.mul_(max_norm / (total + 1e-6))
            return total
        for p, own in zip(with_grad, norms):
            scale = max_norm / ((own if norm == "each" else total) + 1e-6)
            scale = torch.clamp(scale, max=1.0) if clamp else scale
            if in_place:
                p.grad.mul_(scale)
            else:
                p.grad = p.grad * scale  # a new tensor
        if returns == "after":
            return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        return total
    return clip


register(Exercise(
    name="clip_grad_norm",
    reference=clip_grad_norm,
    make_cases=_clip_cases,
    run=_clip_run,
    output_names=("the returned norm", "the gradients", "the parameters"),
    atol=1e-12,  # gradients near 1e-6 are judged too (the 1e-6 added to the norm shows there)
    float64_reference=False,  # the run builds its tensors from the problem: a float64 copy is the same run
    mistakes=[
        Mistake("each parameter clipped on its own norm",
                "one norm for all: sqrt of the sum of every squared gradient entry of every parameter, "
                "and one factor max_norm / (norm + 1e-6) for all gradients, so their direction is kept",
                _clip_variant(norm="each")),
        Mistake("clips even when the norm is below max_norm (scales up)",
                "clip only shrinks: scale = min(1, max_norm / (norm + 1e-6)) (torch.clamp(..., max=1.0))",
                _clip_variant(clamp=False)),
        Mistake("p.grad replaced by a new tensor instead of scaled in place",
                "scale each gradient in place, p.grad.mul_(scale) (as torch's clip_grad_norm_ does): "
                "code that holds the gradient tensors, an optimizer's or yours, sees the new values",
                _clip_variant(in_place=False)),
        Mistake("returns the norm after clipping",
                "return the norm measured before scaling: it is what you log to see gradient spikes",
                _clip_variant(returns="after")),
        Mistake("sum of norms instead of the global L2 norm",
                "the global norm is sqrt(sum of the squared per-parameter norms), not their sum",
                _clip_variant(norm="sum")),
        Mistake("squared norm (no square root)",
                "the L2 norm is the square root of the sum of squares",
                _clip_variant(norm="squared")),
        Mistake("crash on a parameter whose grad is None",
                "skip parameters without a gradient: keep only the p.grad that are not None",
                _clip_variant(skip_none=False)),
        Mistake("the squared norm compared with max_norm",
                "compare the norm itself with max_norm: norm**2 > max_norm clips a norm of 3 "
                "against max_norm 4 (and scales it up), and leaves 0.4 against 0.25 alone",
                _clip_variant(squared_test=True)),
    ],
))


# ---- learning-rate schedules ------------------------------------------------------------------

@dataclass(eq=False)
class _Steps:
    """The steps to ask the schedule for, and its other arguments (after `step`)."""
    description: str
    steps: tuple
    arguments: tuple

    def __deepcopy__(self, memo):
        return self

    def __repr__(self) -> str:
        shown = ", ".join(map(str, self.steps[:6])) + (", ..." if len(self.steps) > 6 else "")
        return f"steps ({shown}), other arguments {self.arguments}"


def _schedule_run(fn, case: Case):
    """-> {step: the learning rate fn returns for it}, or None when every call returned None."""
    schedule = case.args[0]
    rates = {step: fn(step, *schedule.arguments) for step in schedule.steps}
    return None if all(rate is None for rate in rates.values()) else rates


def _inverse_sqrt_cases() -> list[Case]:
    return [Case("step 0, before the first step", (_Steps("step 0", (0,), (512, 4000, 1.0)),)),
            Case("the paper: d_model 512, 4000 warm-up steps",
                 (_Steps("paper", (1, 2, 100, 3999, 4000, 4001, 4002, 20000, 100000), (512, 4000, 1.0)),)),
            Case("every step from 1 to 30, warm-up 7", (_Steps("small", tuple(range(1, 31)), (16, 7, 1.0)),)),
            Case("factor 2, warm-up of one step", (_Steps("factor", tuple(range(1, 12)), (33, 1, 2.0)),))]


def _inverse_sqrt_variant(*, guard=True, shift=0, warm_shift=0, d_power=-0.5, w_power=-1.5,
                          pick=min, use_factor=True, step0_as_1=False):
    """warmup_inverse_sqrt_lr with one classic mistake."""
    def schedule(step, d_model, warmup_steps, factor=1.0):
        if step == 0 and step0_as_1:
            step = 1
        if step == 0 and guard:
            return 0.0
        s = step + shift
        scale = (factor if use_factor else 1.0) * d_model ** d_power
        return scale * pick(s ** -0.5, (s + warm_shift) * warmup_steps ** w_power)
    return schedule


register(Exercise(
    name="warmup_inverse_sqrt_lr",
    contract=Contract(float64=False, base=1),  # base: the paper's case, where factor is its default
    reference=warmup_inverse_sqrt_lr,
    make_cases=_inverse_sqrt_cases,
    run=_schedule_run,
    float64_reference=False,  # plain Python floats
    # Learning rates near 1e-4: the engine's usual atol of 1e-5 would hide them. rtol 4e-6 lets a
    # float32 computation pass (it is off by up to 1e-6); every catalogued mistake is off by far more.
    atol=1e-12, rtol=4e-6,
    mistakes=[
        Mistake("step 0 divides by zero",
                "0 ** -0.5 is a division by zero: return 0.0 for step 0 (LambdaLR asks for it before the first step)",
                _inverse_sqrt_variant(guard=False)),
        Mistake("step 0 treated as step 1 (the Annotated Transformer's convention, not this course's)",
                "here steps count from 1 and step 0, before any step, gives 0.0; the Annotated "
                "Transformer maps step 0 to 1 instead, so that LambdaLR's first step is not at lr 0",
                _inverse_sqrt_variant(step0_as_1=True)),
        Mistake("warm-up off by one (steps counted from 0, or the peak at warmup + 1)",
                "steps are counted from 1 and the peak is at step == warmup_steps, where "
                "step ** -0.5 == step * warmup_steps ** -1.5",
                _inverse_sqrt_variant(shift=1, guard=False),
                also=(_inverse_sqrt_variant(shift=1), _inverse_sqrt_variant(warm_shift=-1))),
        Mistake("d_model ** 0.5 instead of d_model ** -0.5",
                "a larger model takes smaller steps: multiply by d_model ** -0.5 (1 / sqrt(d_model))",
                _inverse_sqrt_variant(d_power=0.5)),
        Mistake("warmup_steps ** -0.5 in the warm-up term (no warm-up left)",
                "the warm-up term is step * warmup_steps ** -1.5, which equals step ** -0.5 at step == warmup_steps",
                _inverse_sqrt_variant(w_power=-0.5)),
        Mistake("max instead of min",
                "take the smaller of the two terms: the linear warm-up until warmup_steps, then 1 / sqrt(step)",
                _inverse_sqrt_variant(pick=max)),
        Mistake("factor ignored",
                "multiply the whole schedule by factor",
                _inverse_sqrt_variant(use_factor=False)),
    ],
))


def _cosine_cases() -> list[Case]:
    return [Case("400 steps, 40 of warm-up, down to a tenth",
                 (_Steps("train", tuple(range(0, 401, 1)), (3e-3, 40, 400, 0.1)),)),
            Case("every step from 0 to 25, warm-up 5, down to a quarter",
                 (_Steps("small", tuple(range(0, 26)), (1.0, 5, 20, 0.25)),)),
            Case("warm-up of one step, down to 0", (_Steps("to zero", tuple(range(0, 12)), (0.5, 1, 10, 0.0)),)),
            Case("the warm-up ends one step before total_steps",
                 (_Steps("short decay", tuple(range(0, 13)), (0.1, 9, 10, 0.1)),)),
            Case("the warm-up takes every step; asked beyond total_steps",
                 (_Steps("no decay", tuple(range(0, 9)), (0.2, 5, 5, 0.1)),))]


def _cosine_variant(*, late_warmup=False, progress_from_zero=False, to_zero=False, angle=math.pi,
                    clamped=True, unscaled_floor=False):
    """warmup_cosine_lr with one classic mistake."""
    def schedule(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
        if step <= warmup_steps:
            return peak_lr * step / (warmup_steps + 1 if late_warmup else warmup_steps)
        start = 0 if progress_from_zero else warmup_steps
        progress = (step - start) / max(1, total_steps - start)
        progress = min(1.0, progress) if clamped else progress
        cosine = 0.5 * (1 + math.cos(angle * progress))
        floor = 0.0 if to_zero else final_fraction
        return peak_lr * (floor + (1.0 if unscaled_floor else 1 - floor) * cosine)
    return schedule


register(Exercise(
    name="warmup_cosine_lr",
    contract=Contract(float64=False),
    reference=warmup_cosine_lr,
    make_cases=_cosine_cases,
    run=_schedule_run,
    float64_reference=False,  # plain Python floats
    atol=1e-12, rtol=4e-6,    # as warmup_inverse_sqrt_lr's
    mistakes=[
        Mistake("decays to 0 instead of final_fraction * peak_lr",
                "the cosine runs from 1 to 0 and must land on final_fraction: "
                "peak_lr * (final_fraction + (1 - final_fraction) * cosine)",
                _cosine_variant(to_zero=True)),
        Mistake("final_fraction added without shrinking the cosine (starts above the peak)",
                "scale the cosine part by (1 - final_fraction), so that the decay starts at peak_lr",
                _cosine_variant(unscaled_floor=True)),
        Mistake("warm-up off by one (the peak one step late)",
                "the warm-up reaches peak_lr at step == warmup_steps: peak_lr * step / warmup_steps",
                _cosine_variant(late_warmup=True)),
        Mistake("the cosine's progress counted from step 0, not from the end of the warm-up",
                "progress = (step - warmup_steps) / (total_steps - warmup_steps): 0 when the decay "
                "starts, 1 at total_steps",
                _cosine_variant(progress_from_zero=True)),
        Mistake("cosine without pi (it never reaches the bottom)",
                "half a period from 1 to 0: 0.5 * (1 + cos(pi * progress))",
                _cosine_variant(angle=1.0)),
        Mistake("a full cosine period (the rate rises again to the peak)",
                "half a period from 1 to 0: cos(pi * progress), not cos(2 pi progress)",
                _cosine_variant(angle=2 * math.pi)),
        Mistake("not held after total_steps (the cosine comes back up)",
                "clamp the progress at 1: after total_steps the rate stays at final_fraction * peak_lr",
                _cosine_variant(clamped=False)),
    ],
))
