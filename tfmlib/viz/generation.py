"""Bonus notebook b2: the next-token distribution through temperature, top-k and top-p, and the
time per new token with and without the KV cache.

`FilterExplorer` is the widget: sliders for T, k and p above three bar charts of one row of
logits, before the filters, after top-k and after top-p, and a few tokens drawn from the result.
"""
from __future__ import annotations

import html
import time

import numpy as np
import torch
from matplotlib.collections import PolyCollection

from ..generation import lm_step, next_token_probs, top_k_filter, top_p_filter
from ..language_model import LMConfig, lm_forward
from . import style
from .common import Explorer

SAMPLES = 24       # tokens the widget draws from the filtered distribution
GHOST = "#c8c8c8"  # the bars before a filter, behind the ones after it


def shown_token(token: str) -> str:
    """A character as a tick label: the space as an open box, so it can be seen."""
    return "\u2423" if token == " " else token


def _filtered_logits(logits: torch.Tensor, temperature: float, k: int, p: float):
    """(V,) logits -> the logits (V,) after the temperature, after top-k and after top-p."""
    scaled = logits / temperature                                   # (V,)
    after_k = top_k_filter(scaled, k)                               # (V,), -inf where dropped
    return [scaled, after_k, top_p_filter(after_k, p)]


def filter_stages(logits: torch.Tensor, temperature: float, k: int, p: float):
    """(V,) logits -> the probabilities (V,) after the temperature, after top-k and after top-p.

    Each stage renormalises what is left: softmax of the filtered logits.
    """
    return [next_token_probs(stage) for stage in _filtered_logits(logits, temperature, k, p)]


def filter_kept(logits: torch.Tensor, temperature: float, k: int, p: float):
    """(V,) logits -> bool masks (V,) of the tokens each stage keeps (a finite logit).

    Count kept tokens with these, not with `probability > 0`: at a low temperature a kept
    token's probability can round to 0 (exp(-120) is 0 in float32), yet a filter kept it.
    """
    return [stage > float("-inf") for stage in _filtered_logits(logits, temperature, k, p)]


def draw_samples(probs: torch.Tensor, count: int = SAMPLES, seed: int = 0) -> list[int]:
    """`count` token ids drawn from `probs` (V,) with a generator seeded by `seed`."""
    g = torch.Generator().manual_seed(seed)
    return torch.multinomial(probs, count, replacement=True, generator=g).tolist()


class _Bars:
    """V bars as one PolyCollection: one artist to redraw instead of V rectangles.

    `bottom`: where the bars start (0 on a linear axis; the axis' floor on a log axis, where 0
    cannot be drawn; a bar below the floor is not drawn)."""

    def __init__(self, ax, count: int, width: float, colour: str, bottom: float = 0.0):
        self.left = np.arange(count) - width / 2
        self.width, self.bottom = width, bottom
        self.collection = PolyCollection(self._verts(np.zeros(count)), facecolors=colour,
                                         edgecolors="none")
        ax.add_collection(self.collection)

    def _verts(self, heights) -> np.ndarray:
        """(V, 4, 2): the corners of each bar, counter-clockwise from the bottom left."""
        left, right = self.left, self.left + self.width
        zero = np.full_like(left, self.bottom)
        heights = np.maximum(np.asarray(heights, dtype=float), self.bottom)
        return np.stack([np.stack([left, zero], -1), np.stack([right, zero], -1),
                         np.stack([right, heights], -1), np.stack([left, heights], -1)], axis=1)

    def set_heights(self, heights) -> None:
        self.collection.set_verts(self._verts(heights))

    def heights(self) -> np.ndarray:
        return np.array([path.vertices[2, 1] for path in self.collection.get_paths()])


LOG_FLOOR = 1e-4   # the bottom of a log-scale probability axis: smaller bars are not drawn


class _FilterPanels:
    """Three bar charts sharing the token axis; every bar and title moves, nothing else.

    Grey, behind each panel's bars: the distribution that stage started from (at T = 1 in the
    first panel, so the temperature's effect shows too). `log`: probabilities on a log scale
    from LOG_FLOOR to 1, where the tail of small probabilities can be seen."""

    TITLES = ("softmax(logits / T): before the filters", "after top-k", "after top-p")

    def __init__(self, fig, axes, labels, log: bool = False):
        positions = np.arange(len(labels))
        bottom = LOG_FLOOR if log else 0.0
        self.axes, self.titles, self.ghosts, self.bars = axes, [], [], []
        self.untempered = None    # the first panel's grey bars: softmax(logits), T = 1
        for i, ax in enumerate(axes):
            ghost = _Bars(ax, len(labels), 0.8, GHOST, bottom)
            if i:  # the distribution each filter started from, in grey behind it
                self.ghosts.append(ghost)
            else:
                self.untempered = ghost
            self.bars.append(_Bars(ax, len(labels), 0.55, style.PALETTE[i], bottom))
            ax.set_xlim(-0.6, len(labels) - 0.4)
            if log:
                ax.set_yscale("log")
                ax.set_ylim(LOG_FLOOR, 1.5)
                ax.set_yticks([1e-4, 1e-2, 1], labels=["0.0001", "0.01", "1"])
                ax.minorticks_off()
                ax.set_ylabel("probability (log)")
            else:
                ax.set_ylim(0, 1.05)
                ax.set_yticks([0, 0.5, 1])
                ax.set_ylabel("probability")
            self.titles.append(style.title(ax, self.TITLES[i]))
        axes[-1].set_xticks(positions, labels=[shown_token(t) for t in labels])
        axes[-1].set_xlabel("next token (grey: the distribution each stage started from; "
                            "in the top panel, at T = 1)")
        for ax in axes[:-1]:
            ax.tick_params(labelbottom=False)

    @property
    def moving(self) -> list:
        return ([bars.collection for bars in [self.untempered] + self.ghosts + self.bars]
                + self.titles)

    def draw(self, stages, kept_masks, temperature: float, k: int, p: float,
             untempered: torch.Tensor) -> None:
        """`stages`: filter_stages' probabilities; `kept_masks`: filter_kept's masks, which
        the titles count (a kept token's probability may round to 0); `untempered`: the
        probabilities at T = 1, grey behind the first panel."""
        heights = [stage.numpy() for stage in stages]
        for bars, values in zip(self.bars, heights):
            bars.set_heights(values)
        for ghosts, values in zip(self.ghosts, heights):  # each filter's input: the stage before
            ghosts.set_heights(values)
        self.untempered.set_heights(untempered.numpy())
        kept = [int(mask.sum()) for mask in kept_masks]
        vocab = len(stages[0])
        self.titles[0].set_text(f"softmax(logits / T), T = {temperature:.2f}: before the filters")
        self.titles[1].set_text(f"after top-k, k = {k}: {kept[1]} of {vocab} tokens kept")
        self.titles[2].set_text(f"after top-p, p = {p:.2f}: {kept[2]} of {kept[1]} tokens kept")


def _new_panels(labels, pyplot: bool, log: bool = False):
    fig, axes = style.new_figure(5.4, style.COLUMN_IN, 3, 1, sharex=True, pyplot=pyplot)
    return fig, _FilterPanels(fig, axes, labels, log)


def samples_html(ids: list[int], labels) -> str:
    """The drawn tokens as one line of code, the space shown as an open box."""
    text = " ".join(shown_token(labels[i]) for i in ids)
    return f"{len(ids)} tokens drawn from the last distribution: <code>{html.escape(text)}</code>"


def plot_filters(logits: torch.Tensor, labels, temperature: float = 1.0, k: int | None = None,
                 p: float = 1.0, log: bool = False, mark=(), mark_name: str = ""):
    """Static figure: the distribution of `logits` (V,) before the filters, after top-k and after
    top-p (k None: the whole vocabulary); `log`: probabilities on a log scale, to show the tail.

    mark: tokens the text asks the reader to find (e.g. the two that make a word), `mark_name`
    what they are: their columns are shaded in every panel, their labels in the highlight
    colour, and the first panel writes what all the other tokens (the tail) hold together at
    T = 1 and at `temperature`."""
    k = len(labels) if k is None else k
    fig, panels = _new_panels(labels, pyplot=True, log=log)
    panels.draw(filter_stages(logits, temperature, k, p), filter_kept(logits, temperature, k, p),
                temperature, k, p, next_token_probs(logits))
    if mark:
        _mark_tokens(panels.axes, list(labels), mark, mark_name, logits, temperature)
    return fig


def _mark_tokens(axes, labels: list, mark, mark_name: str, logits, temperature: float) -> None:
    """Shade the columns of the `mark` tokens in every panel, colour their labels, and write the
    tail's mass (every other token) at T = 1 and at `temperature` in the first panel."""
    where = [labels.index(token) for token in mark]
    for ax in axes:
        for i in where:
            ax.axvspan(i - 0.5, i + 0.5, color=style.HIGHLIGHT_FILL, zorder=0, linewidth=0)
    for i, label in enumerate(axes[-1].get_xticklabels()):
        if i in where:
            label.set(color=style.HIGHLIGHT_COLOUR, fontweight="bold")
    others = torch.ones(len(labels), dtype=torch.bool)
    others[where] = False
    tail = [next_token_probs(logits, t)[others].sum().item() for t in (1.0, temperature)]
    axes[0].text(0.99, 0.95, f"shaded: {mark_name}\nall the other tokens together: "
                 f"{tail[0]:.3f} at T = 1 (grey), {tail[1]:.3f} at T = {temperature:g}",
                 transform=axes[0].transAxes, ha="right", va="top", fontsize=style.TICK_PT)


class FilterExplorer(Explorer):
    """Sliders for T, k and p -> the next-token distribution before and after each filter, and
    SAMPLES tokens drawn from the last one.

    `logits` (V,) is one row of a model's output; `labels` the V tokens. `update(temperature=...,
    k=..., p=...)` redraws (see `Explorer`); `panels.bars` are the three bar containers and
    `samples` the HTML line of drawn tokens.
    """

    def __init__(self, logits: torch.Tensor, labels, temperature: float = 1.0,
                 k: int | None = None, p: float = 1.0, seed: int = 0):
        import ipywidgets as widgets

        self.logits, self.labels, self.seed = logits.detach(), list(labels), seed
        self.untempered = next_token_probs(self.logits)         # (V,) at T = 1, grey in panel 1
        vocab = len(self.labels)
        self.temperature = widgets.FloatLogSlider(value=temperature, base=10, min=-1, max=0.5,
                                                  step=0.05, description="T",
                                                  readout_format=".2f")
        self.k = widgets.IntSlider(value=vocab if k is None else k, min=1, max=vocab,
                                   description="top-k")
        self.p = widgets.FloatSlider(value=p, min=0.05, max=1.0, step=0.05, description="top-p")
        self.samples = widgets.HTML()
        fig, self.panels = _new_panels(self.labels, pyplot=False)
        style.freeze_layout(fig)
        controls = [self.temperature, self.k, self.p]
        # Axes, ticks and labels never change (one background); bars and titles move.
        self._build(fig, self.panels.moving, controls, [widgets.HBox(controls), self.samples])
        self.update()

    def update(self, temperature=None, k=None, p=None) -> None:
        """Redraw for the given values (None keeps the control's current value)."""
        start = time.perf_counter()
        self._set_controls((self.temperature, temperature), (self.k, k), (self.p, p))
        values = (self.temperature.value, self.k.value, self.p.value)
        stages = filter_stages(self.logits, *values)
        self.panels.draw(stages, filter_kept(self.logits, *values), *values, self.untempered)
        self.samples.value = samples_html(draw_samples(stages[-1], seed=self.seed), self.labels)
        self._show(start, background="always")


# ---- the KV cache: time per new token -----------------------------------------------------------

@torch.no_grad()
def time_per_token(params: dict, config: LMConfig, lengths, use_cache: bool, batch_size: int = 1,
                   repeats: int = 5) -> list[float]:
    """Seconds the model takes to score the next token of `batch_size` sequences when L tokens
    are already there, for each L in `lengths` (the fastest of `repeats` runs, the least
    disturbed one).

    With the cache: one lm_step on the one new token, given the cache of the L before it.
    Without: lm_forward on all L + 1 tokens, as generation without a cache must do each step.
    """
    g = torch.Generator().manual_seed(0)
    seconds = []
    for length in lengths:
        ids = torch.randint(0, config.vocab_size, (batch_size, length + 1), generator=g)
        if use_cache:
            _, caches = lm_step(params, ids[:, :length], config)

            def step():
                lm_step(params, ids[:, length:], config, caches)
        else:
            def step():
                lm_forward(params, ids, config)
        step()  # warm-up: the first call allocates
        runs = []
        for _ in range(repeats):
            begin = time.perf_counter()
            step()
            runs.append(time.perf_counter() - begin)
        seconds.append(min(runs))
    return seconds


def plot_time_per_token(lengths, cached_s, uncached_s):
    """Milliseconds per new token against the length so far, with and without the cache: on
    linear axes, and on log-log axes with grey guides of slope 1 (grows like L) and 2 (L^2)."""
    fig, (linear_ax, log_ax) = style.new_figure(3.7, style.COLUMN_IN, 1, 2)   # legend below
    lengths = np.asarray(lengths, dtype=float)
    series = [("no cache: lm_forward, L + 1 tokens", np.asarray(uncached_s) * 1e3),
              ("KV cache: lm_step, 1 token", np.asarray(cached_s) * 1e3)]
    for ax in (linear_ax, log_ax):
        for i, ((label, ms), colour) in enumerate(zip(series, style.PAIR_COLOURS["cache"][::-1])):
            ax.plot(lengths, ms, label=label, markersize=4, **{**style.line_style(i), "color": colour})
        ax.set_xlabel("tokens so far, L")
    last = series[0][1][-1]
    for power, dashes in ((1, ":"), (2, "-.")):   # guides through the last point
        log_ax.plot(lengths, last * (lengths / lengths[-1]) ** power, color=style.GUIDE_COLOUR,
                    linestyle=dashes, linewidth=1)
    log_ax.set_xscale("log", base=2)
    log_ax.set_yscale("log")
    linear_ax.set_ylim(bottom=0)
    linear_ax.set_ylabel("milliseconds per new token")
    # One legend for both panels, below them: inside, the steep uncached line crossed it.
    fig.legend(handles=linear_ax.get_lines(), loc="outside lower center", ncols=2,
               fontsize=style.TICK_PT)
    style.title(linear_ax, "time per new token")
    style.title(log_ax, "log-log; grey: dotted ~ L, dash-dot ~ L\u00b2")
    return fig
