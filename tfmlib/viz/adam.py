"""Notebook 09: what bias correction does, and SGD vs Adam on a 2-D loss surface.

The paths are computed with tfmlib's own `sgd_step` and `adam_step` on a
2-element parameter, with gradients from autograd, exactly as in training.
"""
from __future__ import annotations

import inspect
import time

import numpy as np
from matplotlib.ticker import FuncFormatter
import torch

from ..adam import (adam_init, adam_step, sgd_step, warmup_cosine_lr, warmup_inverse_sqrt_lr,
                    warmup_steps_for, zero_grad)
from ..training import train
from . import style
from .common import Explorer
from .textcache import cache_text

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


LOSS_RANGE = (1e-6, 1e1)   # from below where a good run ends to above the start (3.05)
TITLE_SAMPLE = "100 steps, lr=0.001; Adam betas=(0.99, 0.9999)"  # the longest title


def _draw_surface(ax):
    xs, ys = np.meshgrid(np.linspace(-5, 5, 201), np.linspace(-2.5, 2.5, 101))
    levels = [0.05, 0.2, 0.5, 1, 2, 4]
    contours = ax.contour(xs, ys, xs ** 2 / 20 + ys ** 2, levels=levels, cmap=style.SEQUENTIAL_CMAP,
                          vmin=0, vmax=6, linewidths=0.8, alpha=0.7)  # no pale yellow
    # The loss on each contour, written in the lower right, where no path from START goes
    # and no legend stands: at 70 degrees below the x axis on each ellipse.
    angle = np.radians(-70)
    # (The innermost, 0.05, is left unlabelled: the paths end there and would cover it.)
    labelled = levels[1:]
    places = [(np.sqrt(20 * level) * np.cos(angle), np.sqrt(level) * np.sin(angle)) for level in labelled]
    ax.clabel(contours, labelled, fmt="%g", fontsize=style.TICK_PT, manual=places)
    ax.plot([0], [0], marker="*", color="black", markersize=12, linestyle="none", label="minimum")
    ax.plot([START[0]], [START[1]], marker="o", color="black", linestyle="none", label="start")
    ax.set_xlim(-5, 5)
    ax.set_ylim(-2.5, 2.5)
    ax.set_aspect("equal")
    ax.set_xlabel("x  (gentle direction)")
    ax.set_ylabel("y  (steep direction)")


def _new_axes(fig_and_axes):
    fig, (surface, losses) = fig_and_axes
    _draw_surface(surface)
    sgd_style = {**style.line_style(1), "color": style.PAIR_COLOURS["optimizers"][0]}
    adam_style = {**style.line_style(0), "color": style.PAIR_COLOURS["optimizers"][1]}
    sgd_line, = surface.plot([], [], markersize=3, linewidth=1, label="SGD", **sgd_style)
    adam_line, = surface.plot([], [], markersize=3, linewidth=1, label="Adam", **adam_style)
    steps = np.arange(STEPS + 1)
    sgd_loss, = losses.semilogy(steps, np.ones(STEPS + 1), label="SGD",
                                **{**sgd_style, "marker": None})
    adam_loss, = losses.semilogy(steps, np.ones(STEPS + 1), label="Adam",
                                 **{**adam_style, "marker": None})
    losses.set_ylim(*LOSS_RANGE)
    losses.set_xlabel("step")
    losses.set_ylabel("loss  f(x, y)  (log scale)")
    style.title(losses, "loss per step")
    # One legend for both panels, below them: inside the surface it sat on the contours (and
    # on paths that swing there at a large lr); the loss panel's lines reach every corner.
    fig.legend(handles=[*surface.get_lines()[:2], sgd_line, adam_line], loc="outside lower center",
               ncols=4, fontsize=style.TICK_PT)
    surface.set_title(TITLE_SAMPLE)        # the layout makes room for the longest title
    # Where a path leaves the plot, a note says so: a diverging run must not just vanish.
    surface.diverged = surface.text(0.02, 0.03, "", transform=surface.transAxes, fontsize=style.TICK_PT,
                                    color=style.ERROR_COLOUR, ha="left", va="bottom",
                                    bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "none", "pad": 1})
    return surface, (sgd_line, adam_line, sgd_loss, adam_loss)


def _paths(lr, beta1, beta2, cache=None):
    """(SGD path, Adam path), remembered in `cache` when given: SGD depends on lr alone."""
    cache = {} if cache is None else cache
    if ("sgd", lr) not in cache:
        cache["sgd", lr] = optimizer_path("sgd", lr)
    if ("adam", lr, beta1, beta2) not in cache:
        cache["adam", lr, beta1, beta2] = optimizer_path("adam", lr, (beta1, beta2))
    return cache["sgd", lr], cache["adam", lr, beta1, beta2]


def _set(surface, lines, lr, beta1, beta2, cache=None):
    sgd, adam = _paths(lr, beta1, beta2, cache)
    sgd_line, adam_line, sgd_loss, adam_loss = lines
    sgd_line.set_data(sgd[:, 0], sgd[:, 1])
    adam_line.set_data(adam[:, 0], adam[:, 1])
    sgd_loss.set_ydata(np.clip(path_losses(sgd), 1e-12, 1e6))
    adam_loss.set_ydata(np.clip(path_losses(adam), 1e-12, 1e6))
    style.title(surface, f"{STEPS} steps, lr={lr:.3g}; Adam betas=({beta1:.2f}, {beta2:g})")
    notes = [_left_the_plot(name, path, surface) for name, path in (("SGD", sgd), ("Adam", adam))]
    surface.diverged.set_text("; ".join(note for note in notes if note))
    return sgd, adam


def _left_the_plot(name: str, path: np.ndarray, surface) -> str:
    """'SGD leaves the plot at step 7, loss 3e+04' where the path leaves the surface's view."""
    (x0, x1), (y0, y1) = surface.get_xlim(), surface.get_ylim()
    outside = ~((path[:, 0] >= x0) & (path[:, 0] <= x1) & (path[:, 1] >= y0) & (path[:, 1] <= y1))
    if not outside.any():
        return ""
    step = int(np.argmax(outside))
    return f"{name} leaves the plot at step {step}: it diverges (loss {path_losses(path)[-1]:.0e} at the end)"


FIGSIZE = (style.COLUMN_IN, 3.9)    # the legend below the panels included
WIDTH_RATIOS = [1.6, 1]


class OptimizerPathExplorer(Explorer):
    """Sliders for lr, beta1, beta2 -> the SGD and Adam paths on `bowl` and their losses.

    `update(lr=..., beta1=..., beta2=...)` redraws (see `Explorer`); `lines` are the
    (SGD path, Adam path, SGD loss, Adam loss) artists. Paths are remembered per setting.
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
        fig_and_axes = style.new_figure(FIGSIZE[1], FIGSIZE[0], 1, 2, pyplot=False,
                                        width_ratios=WIDTH_RATIOS)
        self.surface, self.lines = _new_axes(fig_and_axes)
        fig = fig_and_axes[0]
        style.freeze_layout(fig)
        self.paths = {}
        controls = [self.lr, self.beta1, self.beta2]
        # Contours, axes and ticks never change (the background); the four lines and the
        # title move.
        self._build(fig, [*self.lines, self.surface.title, self.surface.diverged], controls,
                    [widgets.HBox(controls)])
        cache_text(self.frames.canvas.get_renderer())
        self.update()

    def update(self, lr=None, beta1=None, beta2=None) -> None:
        """Redraw for the given values (None keeps the control's current value)."""
        start = time.perf_counter()
        self._set_controls((self.lr, lr), (self.beta1, beta1), (self.beta2, beta2))
        _set(self.surface, self.lines, self.lr.value, self.beta1.value, self.beta2.value,
             self.paths)
        self._show(start)


def plot_bias_correction(steps, m, m_hat, v, v_hat, gradient: float):
    """Two panels: m and m_hat, sqrt(v) and sqrt(v_hat), over the first steps.

    The corrected curves lie on the true value: the true value is a thick pale band drawn
    first, so both stay visible where they coincide.
    """
    fig, (left, right) = style.new_figure(3.4, style.COLUMN_IN, 1, 2, sharey=True)
    panels = ((left, m, m_hat, gradient, "m (raw running mean)", "m_hat = m / (1 - beta1^t)",
               "true gradient", "first moment, beta1 = 0.9"),
              (right, np.sqrt(v), np.sqrt(v_hat), abs(gradient), "sqrt(v)", "sqrt(v_hat)",
               "|true gradient|", "second moment, beta2 = 0.999"))
    for ax, raw, corrected, truth, raw_label, corrected_label, truth_label, name in panels:
        ax.axhline(truth, color=style.GUIDE_COLOUR, linewidth=7, alpha=0.3, label=truth_label)
        raw_colour, corrected_colour = style.PAIR_COLOURS["bias correction"]
        ax.plot(steps, raw, markersize=3, label=raw_label, **{**style.line_style(0), "color": raw_colour})
        ax.plot(steps, corrected, markersize=3, label=corrected_label,
                **{**style.line_style(1), "color": corrected_colour})
        style.title(ax, name)
        ax.set_xlabel("step t")
        ax.set_ylim(0, abs(gradient) * 1.25)
        # The empty band between the curves near 1 and the raw curve: lower right on the
        # left (m is near 1 there), centre right on the right (sqrt(v) stays below 0.25).
        ax.legend(loc="lower right" if ax is left else "center right")
    left.set_ylabel("value")
    return fig


def plot_schedules(d_model: int = 512, warmup_steps: int = 4000, paper_steps: int = 40000,
                   peak_lr: float | None = None, train_steps: int | None = None):
    """Two panels, learning rate against step: the paper's warmup_inverse_sqrt_lr, and the
    warmup_cosine_lr that tfmlib.training.train uses (a tenth of the steps to warm up).

    peak_lr, train_steps: None takes train()'s own defaults (`lr`, `steps`), so the figure
    cannot drift from what notebook 10 trains with.
    """
    defaults = inspect.signature(train).parameters
    peak_lr = defaults["lr"].default if peak_lr is None else peak_lr
    train_steps = defaults["steps"].default if train_steps is None else train_steps
    fig, (paper, cosine) = style.new_figure(3.4, style.COLUMN_IN, 1, 2)
    steps = np.union1d(np.arange(0, paper_steps + 1, max(1, paper_steps // 2000)), [warmup_steps])
    paper.plot(steps, [warmup_inverse_sqrt_lr(int(s), d_model, warmup_steps) for s in steps],
               color=style.PAIR_COLOURS["schedules"][0])
    peak = warmup_inverse_sqrt_lr(warmup_steps, d_model, warmup_steps)
    paper.axvline(warmup_steps, color=style.GUIDE_COLOUR, linestyle="--", linewidth=1)
    paper.annotate(f"peak {peak:.2e}\nat step {warmup_steps}", (warmup_steps, peak),
                   xytext=(warmup_steps + paper_steps * 0.08, peak * 0.8), fontsize=style.TICK_PT,
                   arrowprops={"arrowstyle": "->", "color": style.GUIDE_COLOUR})
    style.title(paper, f"the paper: d_model={d_model}, warm-up {warmup_steps}")
    paper.set_ylabel("learning rate")

    warmup = warmup_steps_for(train_steps)
    steps = np.arange(train_steps + 1)
    cosine.plot(steps, [warmup_cosine_lr(int(s), peak_lr, warmup, train_steps) for s in steps],
                color=style.PAIR_COLOURS["schedules"][1], linestyle="--")
    cosine.axvline(warmup, color=style.GUIDE_COLOUR, linestyle="--", linewidth=1)
    cosine.axhline(0.1 * peak_lr, color=style.GUIDE_COLOUR, linestyle=":", linewidth=1)
    style.title(cosine, f"train(): warm-up {warmup}, cosine to a tenth")
    for ax in (paper, cosine):
        ax.set_xlabel("step")
        ax.set_ylim(bottom=0)
        ax.set_xlim(0, steps[-1] if ax is cosine else paper_steps)
        # Plain numbers: an offset or "1e-3" above the axis made 0.02 read as 2.00.
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    return fig
