"""Notebook 09: Adam written out by hand, equal step for step to torch.optim.Adam; and the
training recipe around it: AdamW's decoupled weight decay, gradient clipping by the global
norm, and two learning-rate schedules (warm-up then cosine; the Transformer paper's
warm-up then inverse square root)."""
from __future__ import annotations

import math

import torch

from ._validation import require_keys, require_like, require_tensor


def adam_init(parameters) -> dict:
    """State: step count t, and per parameter a first moment m and second moment v (zeros).

    m and v are separate tensors: `v = m` would make both names one tensor.
    """
    params = list(parameters)
    _check_parameters(params)
    return {"t": 0,
            "m": [torch.zeros_like(p) for p in params],
            "v": [torch.zeros_like(p) for p in params]}


def adam_step(parameters, state: dict, lr: float, betas: tuple[float, float] = (0.9, 0.999),
              eps: float = 1e-8) -> None:
    """One Adam update of every parameter that has a gradient, in place.

        m = b1 m + (1 - b1) g            v = b2 v + (1 - b2) g^2
        m_hat = m / (1 - b1^t)           v_hat = v / (1 - b2^t)
        p = p - lr m_hat / (sqrt(v_hat) + eps)

    t counts optimizer steps (once per call, not once per parameter). Bias
    correction undoes the pull of the zero initial m and v towards 0 in the first steps.
    """
    params = list(parameters)
    _check_adam_step_inputs(params, state, lr, betas, eps)
    beta1, beta2 = betas
    state["t"] += 1
    t = state["t"]
    with torch.no_grad():  # the update itself must not be recorded by autograd
        for p, m, v in zip(params, state["m"], state["v"]):
            if p.grad is None:  # unused this step: leave p, m and v alone
                continue
            g = p.grad
            m.mul_(beta1).add_(g, alpha=1 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            m_hat = m / (1 - beta1 ** t)
            v_hat = v / (1 - beta2 ** t)
            p.sub_(lr * m_hat / (v_hat.sqrt() + eps))  # in place: p stays the same leaf tensor


def adamw_step(parameters, state: dict, lr: float, betas: tuple[float, float] = (0.9, 0.999),
               eps: float = 1e-8, weight_decay: float = 1e-2) -> None:
    """One AdamW update, in place: shrink each parameter that has a gradient, then Adam.

        p = p * (1 - lr * weight_decay)      then the adam_step update of p

    The decay is decoupled from the gradient: it never enters m and v, so it is not
    divided by sqrt(v_hat), and every weight shrinks by the same fraction, however large
    its gradients. (Adam + L2 adds weight_decay * p to the gradient instead.) The state
    is adam_init's.
    """
    params = list(parameters)
    _check_adamw_step_inputs(params, state, lr, betas, eps, weight_decay)
    with torch.no_grad():
        for p in params:
            if p.grad is not None:  # no gradient this step: no decay either (torch.optim.AdamW)
                p.mul_(1 - lr * weight_decay)
    adam_step(params, state, lr, betas, eps)


def clip_grad_norm(parameters, max_norm: float) -> torch.Tensor:
    """Scale all gradients by one factor so that their global L2 norm is at most max_norm.

    The norm is that of every gradient entry of every parameter taken as one long vector;
    the gradients are scaled in place by min(1, max_norm / (norm + 1e-6)), so their
    direction is kept. Parameters whose .grad is None are skipped.
    Returns the norm before clipping, a 0-dim tensor (what torch.nn.utils.clip_grad_norm_ returns).
    """
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)  # 1 or many
    _check_clip_grad_norm_inputs(params, max_norm)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    norms = torch.stack([torch.linalg.vector_norm(g) for g in grads])  # (number of gradients,)
    total_norm = torch.linalg.vector_norm(norms)  # sqrt of the sum of every squared entry
    scale = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)  # never scale up
    for g in grads:
        g.mul_(scale)
    return total_norm


def warmup_steps_for(total_steps: int) -> int:
    """The warm-up of the course's trainings (`train`, `train_lm`, the lab): a tenth of the
    steps, at least one."""
    return max(1, total_steps // 10)


def warmup_cosine_lr(step: int, peak_lr: float, warmup_steps: int, total_steps: int,
                     final_fraction: float = 0.1) -> float:
    """The learning rate at optimizer step `step` (counted from 1): a linear warm-up from 0
    to peak_lr over steps 1 to warmup_steps (peak_lr at warmup_steps, even when that is also
    total_steps), then half a cosine down to final_fraction * peak_lr at total_steps (and
    kept there after it)."""
    _check_warmup_cosine_inputs(step, peak_lr, warmup_steps, total_steps, final_fraction)
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))  # 0 to 1
    cosine = 0.5 * (1 + math.cos(math.pi * progress))                                # 1 to 0
    return peak_lr * (final_fraction + (1 - final_fraction) * cosine)


def warmup_inverse_sqrt_lr(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """The Transformer paper's schedule at optimizer step `step` (counted from 1):

        factor * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

    rising linearly for warmup_steps steps, then falling as 1 / sqrt(step). The peak is at
    step = warmup_steps, where the two terms are equal. Step 0 gives 0.0 (no step has been
    taken; torch's LambdaLR asks for it before the first one).
    """
    _check_warmup_inverse_sqrt_inputs(step, d_model, warmup_steps, factor)
    if step == 0:
        return 0.0  # step ** -0.5 would divide by zero
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def sgd_step(parameters, lr: float) -> None:
    """Plain gradient descent, p = p - lr g, for comparison with Adam."""
    params = list(parameters)
    _check_sgd_step_inputs(params, lr)
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p.sub_(lr * p.grad)


def zero_grad(parameters) -> None:
    """Forget last step's gradients (backward() adds to .grad, it does not overwrite)."""
    for p in parameters:
        p.grad = None


def _check_parameters(params: list) -> None:
    if not params:
        raise ValueError("parameters: expected at least one tensor, got an empty list")
    for i, p in enumerate(params):
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"parameters[{i}]: expected a tensor, got {type(p).__name__}")
        if not p.requires_grad:
            raise ValueError(f"parameters[{i}]: expected a tensor with requires_grad=True, "
                             f"got one with requires_grad=False (shape {tuple(p.shape)})")
        if not p.is_leaf:  # its .grad stays None: Adam would silently never move it
            raise ValueError(f"parameters[{i}]: expected a leaf tensor (a weight itself, not the "
                             f"result of an operation; a list [w, b], not one tensor w), "
                             f"got a non-leaf of shape {tuple(p.shape)}")


def _check_adam_step_inputs(params: list, state, lr, betas, eps) -> None:
    _check_parameters(params)
    _check_hyperparameters(lr, betas, eps)
    require_keys("state", state, ("t", "m", "v"))
    if isinstance(state["t"], bool) or not isinstance(state["t"], int):
        raise TypeError(f"state['t']: expected the int step count, got {state['t']!r}")
    for moment in ("m", "v"):
        if len(state[moment]) != len(params):
            raise ValueError(f"state: expected moments for {len(params)} parameters, "
                             f"got {len(state[moment])}; create it with adam_init(parameters)")
        for i, (p, m) in enumerate(zip(params, state[moment])):
            name = f"state[{moment!r}][{i}]"
            require_tensor(name, m)
            if m.shape != p.shape:
                raise ValueError(f"{name}: expected shape {tuple(p.shape)} like parameters[{i}], "
                                 f"got {tuple(m.shape)}; create the state with adam_init(parameters)")
            require_like(name, m, f"parameters[{i}]", p)


def _check_sgd_step_inputs(params: list, lr) -> None:
    _check_parameters(params)
    _check_hyperparameters(lr, (0.0, 0.0), 1e-8)


def _check_hyperparameters(lr, betas, eps) -> None:
    if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not math.isfinite(lr) or lr < 0:
        raise ValueError(f"lr: expected a finite float >= 0, got {lr!r}")
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise ValueError(f"betas: expected a pair (beta1, beta2), got {betas!r}")
    for i, beta in enumerate(betas):
        if not isinstance(beta, (int, float)) or not 0.0 <= beta < 1.0:
            raise ValueError(f"betas[{i}]: expected a float in [0, 1), got {beta!r}")
    if not isinstance(eps, (int, float)) or not eps >= 0:  # `not >=` also refuses nan
        raise ValueError(f"eps: expected a float >= 0, got {eps!r}")


def _check_adamw_step_inputs(params: list, state, lr, betas, eps, weight_decay) -> None:
    _check_adam_step_inputs(params, state, lr, betas, eps)
    _require_non_negative("weight_decay", weight_decay)


def _check_clip_grad_norm_inputs(params: list, max_norm) -> None:
    for i, p in enumerate(params):
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"parameters[{i}]: expected a tensor, got {type(p).__name__}")
        if p.grad is not None and p.grad.shape != p.shape:
            raise ValueError(f"parameters[{i}].grad: expected shape {tuple(p.shape)} like the "
                             f"parameter, got {tuple(p.grad.shape)}")
    _require_non_negative("max_norm", max_norm)


def _check_warmup_cosine_inputs(step, peak_lr, warmup_steps, total_steps, final_fraction) -> None:
    _require_count("step", step, 0)
    _require_non_negative("peak_lr", peak_lr)
    _require_count("warmup_steps", warmup_steps, 1)
    _require_count("total_steps", total_steps, 1)
    if warmup_steps > total_steps:
        raise ValueError(f"warmup_steps: expected at most total_steps = {total_steps}, "
                         f"got {warmup_steps}")
    _require_non_negative("final_fraction", final_fraction)
    if final_fraction > 1:
        raise ValueError(f"final_fraction: expected a float in [0, 1], got {final_fraction!r}")


def _check_warmup_inverse_sqrt_inputs(step, d_model, warmup_steps, factor) -> None:
    _require_count("step", step, 0)
    _require_count("d_model", d_model, 1)
    _require_count("warmup_steps", warmup_steps, 1)
    _require_non_negative("factor", factor)


def _require_count(name: str, value, smallest: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < smallest:
        raise ValueError(f"{name}: expected an int >= {smallest}, got {value!r}")


def _require_non_negative(name: str, value) -> None:
    """A finite int or float >= 0 (not a bool, not a tensor)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0:
        raise ValueError(f"{name}: expected a finite float >= 0, got {value!r}")
