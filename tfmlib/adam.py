"""Notebook 09: Adam written out by hand, equal step for step to torch.optim.Adam."""
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
