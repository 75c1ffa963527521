"""Notebook 09: what bias correction does, and SGD vs Adam on a 2-D loss surface.

The paths are computed with tfmlib's own `sgd_step` and `adam_step` on a
2-element parameter, with gradients from autograd, exactly as in training.
"""
from __future__ import annotations

import time

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from ..adam import (adam_init, adam_step, sgd_step, warmup_cosine_lr, warmup_inverse_sqrt_lr,
                    zero_grad)
from .common import Explorer

START = (-4.0, 1.5)
STEPS = 100
BETA2_CHOICES = (0.9, 0.99, 0.999, 0.9999)


def bowl(p: torch.Tensor) -> torch.Tensor:
    """An elongated bowl, 20 times steeper across (y) than along (x): f = x^2 / 20 + y^2."""
    return p[..., 0] ** 2 / 20 + p[..., 1] ** 2


def optimizer_path(method: str, lr: float, betas=(0.9, 0.999), steps: int = STEPS,
                   start=START) -> np.ndarray:
    """Positions (steps + 1, 2) visited by `sgd_step` or `adam_step` from `start` on `bowl`."""
    p = torch.tensor(start, dtype=torch.float64, requires_grad=True)
    state = adam_init([p]) if method == "adam" else None
    path = [p.detach().clone()]
    for _ in range(steps):
        zero_grad([p])
        bowl(p).backward()
        if method == "adam":
            adam_step([p], state, lr=lr, betas=betas)
        else:
            sgd_step([p], lr=lr)
        path.append(p.detach().clone())
    path = torch.stack(path).numpy()
    path[~np.isfinite(path).all(axis=1)] = np.nan
    return path


def path_losses(path: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return path[:, 0] ** 2 / 20 + path[:, 1] ** 2


def _draw_surface(ax):
    xs, ys = np.meshgrid(np.linspace(-5, 5, 201), np.linspace(-2.5, 2.5, 101))
    levels = [0.01, 0.05, 0.2, 0.5, 1, 2, 4, 6.25]
    ax.contour(xs, ys, xs ** 2 / 20 + ys ** 2, levels=levels, colors="0.6", linewidths=0.8)
    ax.plot([0], [0], marker="*", color="black", markersize=12, linestyle="none", label="minimum")
    ax.plot([START[0]], [START[1]], marker="o", color="black", linestyle="none", label="start")
    ax.set_xlim(-5, 5)
    ax.set_ylim(-2.5, 2.5)
    ax.set_aspect("equal")
    ax.set_xlabel("x  (gentle direction)")
    ax.set_ylabel("y  (steep direction)")


def _new_axes(fig):
    surface, losses = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.6, 1]})
    _draw_surface(surface)
    sgd_line, = surface.plot([], [], ".-", color="tab:orange", markersize=3, linewidth=1,
                             label="SGD")
    adam_line, = surface.plot([], [], ".-", color="tab:blue", markersize=3, linewidth=1,
                              label="Adam")
    surface.legend(loc="lower right", fontsize=8)
    steps = np.arange(STEPS + 1)
    sgd_loss, = losses.semilogy(steps, np.ones(STEPS + 1), color="tab:orange", label="SGD")
    adam_loss, = losses.semilogy(steps, np.ones(STEPS + 1), color="tab:blue", label="Adam")
    losses.set_ylim(1e-8, 1e3)
    losses.set_xlabel("step")
    losses.set_ylabel("loss  f(x, y)  (log scale)")
    losses.set_title("loss per step")
    losses.legend(fontsize=8)
    fig.tight_layout()
    return surface, (sgd_line, adam_line, sgd_loss, adam_loss)


def _set(surface, lines, lr, beta1, beta2):
    sgd = optimizer_path("sgd", lr)
    adam = optimizer_path("adam", lr, (beta1, beta2))
    sgd_line, adam_line, sgd_loss, adam_loss = lines
    sgd_line.set_data(sgd[:, 0], sgd[:, 1])
    adam_line.set_data(adam[:, 0], adam[:, 1])
    sgd_loss.set_ydata(np.clip(path_losses(sgd), 1e-12, 1e6))
    adam_loss.set_ydata(np.clip(path_losses(adam), 1e-12, 1e6))
    surface.set_title(f"{STEPS} steps, lr={lr:.3g}; Adam betas=({beta1:.2f}, {beta2:g})")
    return sgd, adam


def plot_optimizer_paths(lr: float = 0.1, beta1: float = 0.9, beta2: float = 0.999):
    """Static figure: SGD and Adam paths on `bowl`, and their losses."""
    fig = plt.figure(figsize=(10, 3.6))
    surface, lines = _new_axes(fig)
    _set(surface, lines, lr, beta1, beta2)
    return fig


class OptimizerPathExplorer(Explorer):
    """Sliders for lr, beta1, beta2 -> the SGD and Adam paths on `bowl` and their losses.

    `update(lr=..., beta1=..., beta2=...)` redraws (see `Explorer`); `lines` are the
    (SGD path, Adam path, SGD loss, Adam loss) artists.
    """

    def __init__(self, lr: float = 0.1, beta1: float = 0.9, beta2: float = 0.999):
        import ipywidgets as widgets

        self.lr = widgets.FloatLogSlider(value=lr, base=10, min=-3, max=0.2, step=0.05,
                                         description="lr", readout_format=".3f",
                                         continuous_update=False)
        self.beta1 = widgets.FloatSlider(value=beta1, min=0.0, max=0.99, step=0.01,
                                         description="beta1", continuous_update=False)
        self.beta2 = widgets.SelectionSlider(options=list(BETA2_CHOICES), value=beta2,
                                             description="beta2", continuous_update=False)
        fig = Figure(figsize=(10, 3.6))  # outside pyplot: the inline backend never shows it
        self.surface, self.lines = _new_axes(fig)
        controls = [self.lr, self.beta1, self.beta2]
        # Contours, axes and ticks never change (the background); the four lines and the
        # title move.
        self._build(fig, [*self.lines, self.surface.title], controls, [widgets.HBox(controls)])
        self.update()

    def update(self, lr=None, beta1=None, beta2=None) -> None:
        """Redraw for the given values (None keeps the control's current value)."""
        start = time.perf_counter()
        self._set_controls((self.lr, lr), (self.beta1, beta1), (self.beta2, beta2))
        _set(self.surface, self.lines, self.lr.value, self.beta1.value, self.beta2.value)
        self._show(start)


def plot_bias_correction(steps, m, m_hat, v, v_hat, gradient: float):
    """Two panels: m and m_hat, sqrt(v) and sqrt(v_hat), over the first steps."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.4))
    left.plot(steps, m, "o-", markersize=3, label="m (raw running mean)")
    left.plot(steps, m_hat, "o-", markersize=3, label="m_hat = m / (1 - beta1^t)")
    left.axhline(gradient, color="0.5", linestyle="--", linewidth=1, label="the true gradient")
    left.set_title("first moment, beta1 = 0.9")
    right.plot(steps, np.sqrt(v), "o-", markersize=3, label="sqrt(v)")
    right.plot(steps, np.sqrt(v_hat), "o-", markersize=3, label="sqrt(v_hat)")
    right.axhline(abs(gradient), color="0.5", linestyle="--", linewidth=1, label="|gradient|")
    right.set_title("second moment, beta2 = 0.999")
    for ax, place in ((left, "lower right"), (right, "center right")):
        ax.set_xlabel("step t")
        ax.set_ylim(0, abs(gradient) * 1.25)
        ax.legend(fontsize=8, loc=place)
    left.set_ylabel("value")
    fig.tight_layout()
    return fig


def plot_schedules(d_model: int = 512, warmup_steps: int = 4000, paper_steps: int = 40000,
                   peak_lr: float = 3e-3, train_steps: int = 400):
    """Two panels, learning rate against step: the paper's warmup_inverse_sqrt_lr, and the
    warmup_cosine_lr that tfmlib.training.train uses (a tenth of the steps to warm up)."""
    fig, (paper, cosine) = plt.subplots(1, 2, figsize=(10, 3.4))
    steps = np.union1d(np.arange(0, paper_steps + 1, max(1, paper_steps // 2000)), [warmup_steps])
    paper.plot(steps, [warmup_inverse_sqrt_lr(int(s), d_model, warmup_steps) for s in steps],
               color="tab:blue")
    peak = warmup_inverse_sqrt_lr(warmup_steps, d_model, warmup_steps)
    paper.axvline(warmup_steps, color="0.5", linestyle="--", linewidth=1)
    paper.annotate(f"peak {peak:.2e}\nat step {warmup_steps}", (warmup_steps, peak),
                   xytext=(warmup_steps + paper_steps * 0.08, peak * 0.8), fontsize=9,
                   arrowprops={"arrowstyle": "->", "color": "0.3"})
    paper.set_title(f"the paper: d_model={d_model}, warm-up {warmup_steps} steps")
    paper.set_ylabel("learning rate")

    warmup = max(1, train_steps // 10)
    steps = np.arange(train_steps + 1)
    cosine.plot(steps, [warmup_cosine_lr(int(s), peak_lr, warmup, train_steps) for s in steps],
                color="tab:orange")
    cosine.axvline(warmup, color="0.5", linestyle="--", linewidth=1)
    cosine.axhline(0.1 * peak_lr, color="0.5", linestyle=":", linewidth=1)
    cosine.set_title(f"train(): warm-up {warmup} steps, cosine to a tenth")
    for ax in (paper, cosine):
        ax.set_xlabel("step")
        ax.set_ylim(bottom=0)
        ax.set_xlim(0, steps[-1] if ax is cosine else paper_steps)
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    fig.tight_layout()
    return fig
