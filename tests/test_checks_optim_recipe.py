"""Checks of notebook 09's training recipe (adamw_step, clip_grad_norm, the two schedules),
judged on answers written the way a learner would write them in a notebook cell.

Correct answers written differently from tfmlib must PASS; every catalogued mistake (each of
its variants) must FAIL and be named; other wrong answers, written here independently, must
FAIL; stubs report "not attempted", and a wrong type is diagnosed without the check raising.
"""
import math

import pytest
import torch

from tfmlib import adam_step
from tfmlib.exercises import REGISTRY, check

from random_cases import random_cases

NAMES = ["adamw_step", "clip_grad_norm", "warmup_inverse_sqrt_lr", "warmup_cosine_lr"]


def _passes(name, answer):
    result = check(name, answer)
    assert result.status == "passed", str(result)


def _fails(name, answer, *words):
    result = check(name, answer)
    assert not result and result.status in ("failed", "mistake"), str(result)
    for word in words:
        assert word in str(result), str(result)
    return result


# ---- correct answers, written differently ------------------------------------------------------

def adamw_written_out(params, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    """Every line by hand; the decay as a subtraction of lr * weight_decay * p."""
    state["t"] += 1
    b1, b2 = betas
    with torch.no_grad():
        for p, m, v in zip(params, state["m"], state["v"]):
            if p.grad is None:
                continue
            p -= lr * weight_decay * p
            m.copy_(b1 * m + (1 - b1) * p.grad)
            v.copy_(b2 * v + (1 - b2) * p.grad ** 2)
            p -= lr * (m / (1 - b1 ** state["t"])) / (torch.sqrt(v / (1 - b2 ** state["t"])) + eps)


def adamw_decay_beside_the_update(params, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    """p - lr * (update + wd * p): the same numbers as shrinking first, in one subtraction."""
    state["t"] += 1
    t, (b1, b2) = state["t"], betas
    for i, p in enumerate(params):
        if p.grad is not None:
            state["m"][i].lerp_(p.grad, 1 - b1)
            state["v"][i].mul_(b2).add_((1 - b2) * p.grad.square())
            update = state["m"][i] / (1 - b1 ** t) / ((state["v"][i] / (1 - b2 ** t)).sqrt() + eps)
            p.data.sub_(lr * (update + weight_decay * p.data))


def adamw_then_library_adam(params, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p *= 1 - lr * weight_decay
    adam_step(params, state, lr, betas, eps)


def clip_torch(parameters, max_norm):
    return torch.nn.utils.clip_grad_norm_(parameters, max_norm)


def clip_flat(parameters, max_norm):
    """All gradients as one flat vector; the factor a 0-dim tensor chosen by torch.where."""
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    with_grad = [p for p in parameters if p.grad is not None]
    if not with_grad:
        return torch.tensor(0.0)
    norm = torch.cat([p.grad.flatten() for p in with_grad]).norm()
    factor = torch.where(norm > max_norm, max_norm / (norm + 1e-6), torch.ones_like(norm))
    for p in with_grad:
        p.grad.mul_(factor)
    return norm


def w_clip_new_grads(parameters, max_norm):
    """p.grad = p.grad * factor: the gradient tensors a caller (or an optimizer) holds stay unscaled."""
    with_grad = [parameters] if isinstance(parameters, torch.Tensor) else [p for p in parameters]
    with_grad = [p for p in with_grad if p.grad is not None]
    if not with_grad:
        return torch.tensor(0.0)
    norm = torch.cat([p.grad.flatten() for p in with_grad]).norm()
    for p in with_grad:
        p.grad = p.grad * min(1.0, max_norm / (float(norm) + 1e-6))
    return norm


def clip_norm_in_float64(parameters, max_norm):
    """The norm summed in float64 and returned so: more precise than the gradients' float32."""
    params = [parameters] if torch.is_tensor(parameters) else list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros((), dtype=torch.float64)
    total = sum(g.double().square().sum() for g in grads).sqrt()
    for g in grads:
        g.mul_(min(1.0, max_norm / (float(total) + 1e-6)))
    return total


def clip_loop(parameters, max_norm):
    """Squares summed in float32: in float16 a gradient of 300 squared overflows."""
    params = [parameters] if torch.is_tensor(parameters) else list(parameters)
    squares = [(p.grad.float() ** 2).sum() for p in params if p.grad is not None]
    if not squares:
        return torch.zeros(())
    total = torch.sqrt(torch.stack(squares).sum())
    if total > max_norm:
        for p in params:
            if p.grad is not None:
                p.grad.mul_(max_norm / (total + 1e-6))
    return total


def inverse_sqrt_math(step, d_model, warmup_steps, factor=1.0):
    if step == 0:
        return 0.0
    return factor / math.sqrt(d_model) * min(1 / math.sqrt(step), step / warmup_steps ** 1.5)


def inverse_sqrt_branches(step, d_model, warmup_steps, factor=1.0):
    """The warm-up branch gives 0 at step 0 by itself."""
    if step < warmup_steps:
        return factor * d_model ** -0.5 * step * warmup_steps ** -1.5
    return factor * (d_model * step) ** -0.5


def cosine_branches(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    if step >= total_steps:
        return final_fraction * peak_lr
    low = final_fraction * peak_lr
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return low + (peak_lr - low) * (1 + math.cos(math.pi * progress)) / 2


def cosine_squared_sine(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    """(1 + cos x) / 2 = cos^2(x / 2)."""
    if step < warmup_steps:
        return peak_lr * step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * (final_fraction + (1 - final_fraction) * math.cos(math.pi * progress / 2) ** 2)


CORRECT = {
    "adamw_step": [adamw_written_out, adamw_decay_beside_the_update, adamw_then_library_adam],
    "clip_grad_norm": [clip_flat, clip_loop, clip_norm_in_float64],  # clip_torch: PyTorch's own, failed as such
    "warmup_inverse_sqrt_lr": [inverse_sqrt_math, inverse_sqrt_branches],
    "warmup_cosine_lr": [cosine_branches, cosine_squared_sine],
}


@pytest.mark.parametrize("name, index", [(n, i) for n in NAMES for i in range(len(CORRECT[n]))])
def test_correct_answers_written_differently_pass(name, index):
    _passes(name, CORRECT[name][index])


@pytest.mark.parametrize("name, index", [(n, i) for n in NAMES for i in range(len(CORRECT[n]))])
def test_correct_answers_pass_on_the_random_cases_too(name, index):
    cases = [case for seed in range(3) for case in random_cases(name, seed)]
    result = check(name, CORRECT[name][index], cases)
    assert result.status == "passed", str(result)


@pytest.mark.parametrize("name", NAMES)
def test_the_reference_passes(name):
    _passes(name, REGISTRY[name].reference)


# ---- every catalogued mistake is caught and named --------------------------------------------

@pytest.mark.parametrize("name, mistake, variant", [
    (name, mistake.name, index) for name in NAMES
    for mistake in REGISTRY[name].mistakes for index in range(len(mistake.variants))])
def test_every_catalogued_mistake_is_named(name, mistake, variant):
    answer = next(m for m in REGISTRY[name].mistakes if m.name == mistake).variants[variant]
    result = check(name, answer)
    assert result.status == "mistake" and result.mistake == mistake, str(result)


# ---- the classic mistakes, written in a learner's own words -----------------------------------

def w_adam_plus_l2(params, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    """torch.optim.Adam's weight_decay: the decay goes into the gradient."""
    state["t"] += 1
    b1, b2 = betas
    with torch.no_grad():
        for p, m, v in zip(params, state["m"], state["v"]):
            if p.grad is None:
                continue
            g = p.grad + weight_decay * p
            m.mul_(b1).add_((1 - b1) * g)
            v.mul_(b2).add_((1 - b2) * g * g)
            p -= lr * m / (1 - b1 ** state["t"]) / ((v / (1 - b2 ** state["t"])).sqrt() + eps)


def w_adam_then_decay(params, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    adam_step(params, state, lr, betas, eps)
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p.mul_(1 - lr * weight_decay)


def w_decay_without_lr(params, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p.mul_(1 - weight_decay)
    adam_step(params, state, lr, betas, eps)


def w_decay_everything(params, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    with torch.no_grad():
        for p in params:
            p.mul_(1 - lr * weight_decay)
    adam_step(params, state, lr, betas, eps)


def w_clip_each(parameters, max_norm):
    params = [parameters] if isinstance(parameters, torch.Tensor) else parameters
    total = torch.zeros(())
    for p in params:
        if p.grad is not None:
            total = total + p.grad.norm() ** 2
            torch.nn.utils.clip_grad_norm_([p], max_norm)
    return total.sqrt()


def w_clip_scales_up(parameters, max_norm):
    params = [parameters] if isinstance(parameters, torch.Tensor) else parameters
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    norm = torch.cat([g.reshape(-1) for g in grads]).norm()
    for g in grads:
        g *= max_norm / (norm + 1e-6)
    return norm


def w_clip_norm_after(parameters, max_norm):
    torch.nn.utils.clip_grad_norm_(parameters, max_norm)
    params = [parameters] if isinstance(parameters, torch.Tensor) else parameters
    grads = [p.grad.reshape(-1) for p in params if p.grad is not None]
    return torch.cat(grads).norm() if grads else torch.tensor(0.0)


def w_clip_sum_of_norms(parameters, max_norm):
    params = [parameters] if isinstance(parameters, torch.Tensor) else parameters
    grads = [p.grad for p in params if p.grad is not None]
    total = sum((g.norm() for g in grads), torch.tensor(0.0))
    for g in grads:
        g.mul_(min(1.0, max_norm / (total.item() + 1e-6)))
    return total


def w_inverse_sqrt_no_guard(step, d_model, warmup_steps, factor=1.0):
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def w_inverse_sqrt_from_zero(step, d_model, warmup_steps, factor=1.0):
    step += 1  # "steps start at 0 in my loop"
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def w_inverse_sqrt_sqrt_d(step, d_model, warmup_steps, factor=1.0):
    if step == 0:
        return 0.0
    return factor * math.sqrt(d_model) * min(1 / math.sqrt(step), step / warmup_steps ** 1.5)


def w_cosine_to_zero(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * 0.5 * (1 + math.cos(math.pi * progress))


WRONG = [
    ("adamw_step", w_adam_plus_l2, "weight decay added to the gradient (Adam + L2, not AdamW)"),
    ("adamw_step", w_adam_then_decay, "weight decay applied after the Adam update"),
    ("adamw_step", w_decay_without_lr, "weight decay not scaled by lr"),
    ("adamw_step", w_decay_everything, "parameters without a gradient decayed too"),
    ("clip_grad_norm", w_clip_each, "each parameter clipped on its own norm"),
    ("clip_grad_norm", w_clip_scales_up, "clips even when the norm is below max_norm (scales up)"),
    ("clip_grad_norm", w_clip_norm_after, "returns the norm after clipping"),
    ("clip_grad_norm", w_clip_sum_of_norms, "sum of norms instead of the global L2 norm"),
    ("clip_grad_norm", w_clip_new_grads, "p.grad replaced by a new tensor instead of scaled in place"),
    ("warmup_inverse_sqrt_lr", w_inverse_sqrt_no_guard, "step 0 divides by zero"),
    ("warmup_inverse_sqrt_lr", w_inverse_sqrt_from_zero,
     "warm-up off by one (steps counted from 0, or the peak at warmup + 1)"),
    ("warmup_inverse_sqrt_lr", w_inverse_sqrt_sqrt_d, "d_model ** 0.5 instead of d_model ** -0.5"),
    ("warmup_cosine_lr", w_cosine_to_zero, "decays to 0 instead of final_fraction * peak_lr"),
]


@pytest.mark.parametrize("name, answer, mistake", WRONG, ids=[f"{n}-{a.__name__}" for n, a, _ in WRONG])
def test_classic_mistakes_in_a_learners_words_are_named(name, answer, mistake):
    result = check(name, answer)
    assert result.status == "mistake" and result.mistake == mistake, str(result)
    assert "hint:" in result.details


# ---- other wrong answers fail, diagnosed --------------------------------------------------------

def w_adamw_eps_inside(params, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    state["t"] += 1
    b1, b2 = betas
    with torch.no_grad():
        for p, m, v in zip(params, state["m"], state["v"]):
            if p.grad is None:
                continue
            p.mul_(1 - lr * weight_decay)
            m.mul_(b1).add_((1 - b1) * p.grad)
            v.mul_(b2).add_((1 - b2) * p.grad ** 2)
            p -= lr * m / (1 - b1 ** state["t"]) / (v / (1 - b2 ** state["t"]) + eps).sqrt()


def w_adamw_decay_by_wd_only(params, state, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    """Subtracts weight_decay * lr * sign(p): an L1 pull, not a decay."""
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p -= lr * weight_decay * torch.sign(p)
    adam_step(params, state, lr, betas, eps)


def w_clip_mean_square(parameters, max_norm):
    params = [parameters] if isinstance(parameters, torch.Tensor) else parameters
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    norm = torch.cat([g.reshape(-1) for g in grads]).pow(2).mean().sqrt()  # RMS, not the norm
    for g in grads:
        g.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    return norm


def w_clip_returns_float(parameters, max_norm):
    return torch.nn.utils.clip_grad_norm_(parameters, max_norm).item()


def w_clip_scales_parameters(parameters, max_norm):
    params = [parameters] if isinstance(parameters, torch.Tensor) else parameters
    total = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
    with torch.no_grad():
        for p in params:
            p.mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total


def w_inverse_sqrt_linear_decay(step, d_model, warmup_steps, factor=1.0):
    if step == 0:
        return 0.0
    peak = factor * (d_model * warmup_steps) ** -0.5
    return peak * step / warmup_steps if step <= warmup_steps else peak * warmup_steps / step


def w_cosine_linear(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak_lr * (1 - (1 - final_fraction) * progress)  # a straight line, not a cosine


@pytest.mark.parametrize("name, answer, words", [
    ("adamw_step", w_adamw_eps_inside, ()),
    ("adamw_step", w_adamw_decay_by_wd_only, ("values differ",)),
    ("clip_grad_norm", w_clip_mean_square, ("the returned norm",)),
    ("clip_grad_norm", w_clip_returns_float, ("expected a tensor, got float",)),
    ("clip_grad_norm", w_clip_scales_parameters, ()),
    ("warmup_inverse_sqrt_lr", w_inverse_sqrt_linear_decay, ("output[",)),
    ("warmup_cosine_lr", w_cosine_linear, ("output[",)),
], ids=lambda value: getattr(value, "__name__", None))
def test_other_wrong_answers_fail(name, answer, words):
    _fails(name, answer, *words)


def test_a_schedule_failure_names_the_step():
    result = _fails("warmup_inverse_sqrt_lr", w_inverse_sqrt_linear_decay)
    assert "output[" in result.message  # e.g. output[4001]: expected ..., got ...


def test_a_schedule_returning_a_tensor_is_told_to_return_a_float():
    def as_tensor(step, d_model, warmup_steps, factor=1.0):
        return torch.tensor(inverse_sqrt_math(step, d_model, warmup_steps, factor))
    _fails("warmup_inverse_sqrt_lr", as_tensor, "expected a float, got Tensor")


@pytest.mark.parametrize("name", NAMES)
def test_stubs_are_not_attempted(name):
    def stub(*args, **kwargs):
        """contract"""
        ...  # your code here
    assert check(name, stub).status == "not attempted"


def test_a_decay_of_zero_steps_dividing_by_zero_is_diagnosed():
    def divides(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
        if step <= warmup_steps:
            return peak_lr * step / warmup_steps
        progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
        return peak_lr * (final_fraction + (1 - final_fraction) * (1 + math.cos(math.pi * progress)) / 2)
    _fails("warmup_cosine_lr", divides, "ZeroDivisionError", "warm-up takes every step")


def test_forgetting_return_in_a_schedule_is_diagnosed():
    def no_return(step, peak_lr, warmup_steps, total_steps, final_fraction=0.1):
        peak_lr * step / warmup_steps  # noqa: B018
    result = _fails("warmup_cosine_lr", no_return)
    assert "return" in result.message
