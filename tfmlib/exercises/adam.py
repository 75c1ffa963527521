"""Exercises of notebook 09: Adam (and plain SGD) written by hand.

How each check calls the learner's functions:
    adam:      check("adam", (my_adam_init, my_adam_step))
               state = my_adam_init(parameters)
               then, once per step, after the check has set every p.grad:
               my_adam_step(parameters, state, lr, betas)   (eps left at its default, 1e-8)
               If my_adam_step returns something other than None, that is taken as the new
               state (a functional style, `state = step(...)`, passes as well).
    sgd_step:  my_sgd_step(parameters, lr)

Only behaviour is judged: the values of the parameters after every step of small
problems (fixed gradients, or gradients from loss.backward(); one parameter never
gets a gradient, another misses one on some steps; float64 parameters; gradients as
small as eps; several lr and betas), and the gradients, which the step must leave as
it found them. Any layout of the state passes: a dict, a tuple (m, v, t), a class,
moments keyed by id(p)...

t counts optimizer steps, one number for all parameters (notebook 09): a parameter
without a gradient on some step still sees t grow. torch.optim.Adam counts steps per
parameter instead; the two agree whenever every parameter has a gradient on every step.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..adam import adam_init, adam_step, sgd_step
from .core import Case, Exercise, Mistake, register

try:  # the engine's own test for "the body is only ... / pass / raise NotImplementedError"
    from .core import _body_is_stub
except ImportError:  # pragma: no cover - the engine renamed it; then no per-function stub test
    def _body_is_stub(fn) -> bool:
        return False

_STUB_BY_CODE: dict = {}  # reading a function's source is slow: once per code object


def _is_stub_function(fn) -> bool:
    code = getattr(fn, "__code__", None)
    if code is None:
        return _body_is_stub(fn)
    if code not in _STUB_BY_CODE:
        _STUB_BY_CODE[code] = _body_is_stub(fn)
    return _STUB_BY_CODE[code]


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

    def __deepcopy__(self, memo):
        return self  # never handed to the learner: _trajectory gives out clones only

    def __repr__(self) -> str:
        betas = "" if self.betas is None else f", betas={self.betas}"
        return f"{self.steps} steps, lr={self.lr}{betas}"

    def without(self, dropped: set[int]) -> _Problem:
        """The same problem without the parameters numbered in `dropped`."""
        keep = [i for i in range(len(self.params)) if i not in dropped]
        return _Problem(self.description, [self.params[i] for i in keep], self.lr, self.betas,
                        self.steps, [[grads[i] for i in keep] for grads in self.grads], self.loss)

    def sometimes_without_gradient(self) -> set[int]:
        """The parameters whose .grad is None on at least one step."""
        if self.loss is not None:
            return set(range(len(self.loss.terms), len(self.params)))
        return {i for grads in self.grads for i, grad in enumerate(grads) if grad is None}


def _problems() -> list[_Problem]:
    g = torch.Generator().manual_seed(90)
    r = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731

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
    problems.append(_Problem(
        "the second parameter has no gradient on step 2 only", [r(3), r(2, 2)], lr=0.1, steps=3,
        grads=[[r(3), r(2, 2)], [r(3), None], [r(3), r(2, 2)]]))
    problems.append(_Problem(
        "float64 parameters, gradients near 1e20 (float32 cannot hold their squares)",
        [r(3).double(), r(2).double()], lr=0.1, steps=2,
        grads=[[1e20 * r(3).double(), r(2).double()] for _ in range(2)]))
    problems.append(_Problem(
        "gradients near 1e-8, as small as eps: the denominator is half sqrt(v_hat), half eps",
        [r(3)], lr=0.1, steps=2, grads=[[1e-8 * r(3)] for _ in range(2)]))
    return problems


def _cases() -> list[Case]:
    return [Case(problem.description, (problem,)) for problem in _problems()]


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


# ---- running an optimizer on a problem --------------------------------------------------------

class _InPlaceOnLeaf(RuntimeError):
    """In-place update of a parameter outside torch.no_grad()."""


_InPlaceOnLeaf.__name__ = _InPlaceOnLeaf.__qualname__ = "RuntimeError"


class GradIsNoneError(Exception):
    """The optimizer raised on a parameter whose .grad is None, and runs without that parameter."""


class GradientChangedError(Exception):
    """The optimizer changed a parameter's .grad: the caller's gradients are not its scratch space."""


def _trajectory(problem: _Problem, init, step) -> list[list[torch.Tensor]]:
    """The parameters' values after every step."""
    model = [p.clone().requires_grad_() for p in problem.params]  # the model's own tensors
    params = list(model)  # the list handed to the optimizer, which may rebind its entries
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
        try:
            new_state = step(params, state, problem)
        except RuntimeError as error:
            if "leaf Variable that requires grad" in str(error):
                raise _InPlaceOnLeaf(*error.args).with_traceback(error.__traceback__) from None
            raise
        _require_same_gradients(model, given)
        if new_state is not None and new_state is not params:  # a functional step returns the state
            state = new_state
        trajectory.append([p.detach().clone() for p in model])
    return trajectory


def _require_same_gradients(params, given) -> None:
    """Raise GradientChangedError when the step left some p.grad other than it found it."""
    for i, (p, before) in enumerate(zip(params, given)):
        after = p.grad
        if before is None and after is None:
            continue
        if after is None:
            how = "it was a tensor, your step set it to None"
        elif before is None:
            how = "it was None, your step put a tensor there"
        elif after.shape != before.shape or after.dtype != before.dtype \
                or not bool(((after == before) | after.isnan() & before.isnan()).all()):  # NaN = NaN
            how = "your step changed its values"
        else:
            continue
        raise GradientChangedError(
            f"parameters[{i}].grad: {how}; an optimizer reads the gradients and leaves them "
            "as they were (torch.optim does too): the caller may still need them")


def _run_optimizer(problem: _Problem, init, step):
    """_trajectory, naming the crash that only happens because a gradient is None."""
    try:
        return _trajectory(problem, init, step)
    except Exception as error:
        missing = problem.sometimes_without_gradient()
        if not missing or isinstance(error, (_InPlaceOnLeaf, GradientChangedError)):
            raise
        try:
            _trajectory(problem.without(missing), init, step)
        except Exception:
            raise error from None
        raise GradIsNoneError(f"{type(error).__name__}: {error}").with_traceback(error.__traceback__) \
            from None


def _pair(functions):
    if not (isinstance(functions, (tuple, list)) and len(functions) == 2
            and all(callable(f) for f in functions)):
        raise TypeError("hand in both functions as a pair: check('adam', (my_adam_init, my_adam_step))")
    for function, name in zip(functions, ("adam_init", "adam_step")):
        if _is_stub_function(function):
            raise NotImplementedError(f"your {name} is still a stub")
    return functions


def _adam_run(functions, case: Case):
    init, step = _pair(functions)

    def checked_init(params):
        state = init(params)
        if state is None:
            raise TypeError("your adam_init returned None: is `return state` missing?")
        return state

    return _run_optimizer(case.args[0], checked_init,
                          lambda params, state, problem: step(params, state, problem.lr, problem.betas))


def _sgd_run(fn, case: Case):
    return _run_optimizer(case.args[0], None, lambda params, state, problem: fn(params, problem.lr))


# ---- Adam's classic mistakes ------------------------------------------------------------------

def _adam_step_variant(*, reinit=False, t_per_parameter=None, bias_correction=True,
                       t_after_update=False, skip_none=True, no_grad=True, in_place=True,
                       fixed_betas=False, eps_inside=False, sign=-1.0, t_kept=True,
                       missing_as_zero=False, grad_as_scratch=False):
    """adam_step with one classic mistake; the state layout is adam_init's."""
    def step(parameters, state, lr, betas=(0.9, 0.999), eps=1e-8):
        params = list(parameters)
        if reinit:
            state = adam_init(params)
        elif not t_kept:  # m and v carry on, but t = state["t"] + 1 stays a local name
            state = {**state, "t": state["t"]}
        beta1, beta2 = (0.9, 0.999) if fixed_betas else betas
        if not t_after_update and t_per_parameter is None:
            state["t"] += 1
        context = torch.no_grad() if no_grad else _nothing()
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


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _adam_init_aliased(parameters):
    m = [torch.zeros_like(p) for p in parameters]
    v = m  # the same list of the same tensors
    return {"t": 0, "m": m, "v": v}


def _adam_init_float32(parameters):
    """m and v made with torch.zeros(p.shape): float32 on the CPU, whatever p is."""
    params = list(parameters)
    return {"t": 0, "m": [torch.zeros(p.shape) for p in params],
            "v": [torch.zeros(p.shape) for p in params]}


def _adam_init_counts(parameters):
    """torch.optim.Adam's layout: a step count of its own for every parameter."""
    params = list(parameters)
    return {"t": [0] * len(params), "m": [torch.zeros_like(p) for p in params],
            "v": [torch.zeros_like(p) for p in params]}


def _adam(**mistake):
    return (adam_init, _adam_step_variant(**mistake))


_GRAD_AS_SCRATCH_HINT = ("read p.grad, never write it: g = p.grad * c makes a new tensor, while "
                         "p.grad.mul_(c), g *= c (g = p.grad) or p.grad = None change the caller's gradients")

register(Exercise(
    name="adam",
    reference=(adam_init, adam_step),
    make_cases=_cases,
    random_cases=_random_cases,
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
                "assignment shares the object: build v with its own torch.zeros_like(p) for each parameter",
                (_adam_init_aliased, _adam_step_variant())),
        Mistake("no bias correction",
                "divide by (1 - beta ** t): m_hat = m / (1 - beta1 ** t), v_hat = v / (1 - beta2 ** t)",
                _adam(bias_correction=False)),
        Mistake("bias correction with t before it is incremented",
                "increment t at the start of the step: with t = 0, 1 - beta ** t is 0",
                _adam(t_after_update=True)),
        Mistake("crash on a parameter whose grad is None",
                "a parameter that took no part in the loss has p.grad None: skip it with "
                "`if p.grad is None: continue`",
                _adam(skip_none=False)),
        Mistake("a missing gradient treated as zero",
                "skip a parameter whose p.grad is None (`continue`): a zero gradient would still "
                "decay m and v and move p with the momentum of earlier steps",
                _adam(missing_as_zero=True), also=(_adam(missing_as_zero="written into p.grad"),)),
        Mistake("t counted per parameter, only on its steps with a gradient (torch.optim.Adam's way)",
                "this course's t counts optimizer steps: one t for all parameters, +1 on every call, "
                "also for a parameter that has no gradient this step",
                (_adam_init_counts, _adam_step_variant(t_per_parameter="own count"))),
        Mistake("state not built like the parameter: use torch.zeros_like(p)",
                "torch.zeros(p.shape) is float32 on the CPU whatever p is; torch.zeros_like(p) has "
                "p's dtype and device (float32 m and v overflow here)",
                (_adam_init_float32, _adam_step_variant())),
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
        with torch.no_grad() if no_grad else _nothing():
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
    problems = [_problems()[i] for i in (0, 2)]
    for problem in problems:
        problem.betas = None  # SGD has none
    return [Case(problem.description, (problem,)) for problem in problems]


def _sgd_random_cases(seed: int) -> list[Case]:
    return [Case(problem.description, (problem,)) for problem in _random_problems(seed, betas=False)]


register(Exercise(
    name="sgd_step",
    reference=sgd_step,
    make_cases=_sgd_cases,
    random_cases=_sgd_random_cases,
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
