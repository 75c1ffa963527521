"""Plots and the LayerNorm explorer of notebook 07 (FFN, dropout, residual, LayerNorm).

Three histograms follow one residual block: what goes into the LayerNorm, what
comes out of it, and what the block hands to the next layer. Post-LN and Pre-LN
put the LayerNorm in different places, so the same three panels tell them apart.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from .. import dropout, layer_norm, residual_sublayer
from . import style
from .common import Explorer
from .textcache import cache_text

EDGES = np.linspace(-6.0, 6.0, 49)  # bins of width 0.25; values beyond +-6 land in the end bins
P_MAX = 0.9
P_STEP = 0.05
PANEL_TITLES = {
    False: ("LayerNorm input:\nx + Dropout(FFN(x))", "LayerNorm output",
            "block output =\nLayerNorm(x + Dropout(FFN(x)))"),
    True: ("LayerNorm input:\nx itself", "LayerNorm output\n(fed to the FFN)",
           "block output =\nx + Dropout(FFN(LayerNorm(x)))"),
}
FIGSIZE = (style.COLUMN_IN, 3.9)
# Fixed margins (figure fractions): room for two-line panel titles under the summary line.
MARGINS = dict(left=0.085, right=0.985, bottom=0.14, top=0.76, wspace=0.1)


def block_stages(x: torch.Tensor, sublayer, norm: dict, p: float, norm_first: bool,
                 seed: int = 0) -> dict:
    """The three tensors the histograms show, each (B, L, D).

    "block output" comes from tfmlib's `residual_sublayer`; the other two repeat
    its steps with the same seeded dropout mask, so all three belong together.
    """
    def generator():
        return torch.Generator().manual_seed(seed)

    with torch.no_grad():
        output = residual_sublayer(x, sublayer, norm, norm_first=norm_first, dropout_p=p,
                                   training=True, generator=generator())
        if norm_first:   # Pre-LN: x + Dropout(sublayer(LN(x)))
            norm_in = x
        else:            # Post-LN: LN(x + Dropout(sublayer(x)))
            norm_in = x + dropout(sublayer(x), p, training=True, generator=generator())
        norm_out = layer_norm(norm_in, norm["gamma"], norm["beta"])
    return {"LayerNorm input": norm_in, "LayerNorm output": norm_out, "block output": output}


def fractions(values: torch.Tensor) -> np.ndarray:
    """Share of all entries in each bin of EDGES (entries outside go to the end bins)."""
    data = np.clip(values.detach().cpu().double().numpy().ravel(), EDGES[0], EDGES[-1])
    counts, _ = np.histogram(data, bins=EDGES)
    return counts / data.size


def stage_note(values: torch.Tensor, normalised: bool) -> str:
    """The note of one panel: for the LayerNorm's output, what LayerNorm does (every token back
    to mean 0 and std 1: the worst token's numbers); for every panel, the share of values past
    the histogram's ends, piled into its end bins."""
    lines = []
    if normalised:
        mean = values.mean(dim=-1).abs().max()                  # (B, L) -> the worst token
        std = values.std(dim=-1, unbiased=False)
        lines.append(f"each token:\nmean {_fixed(mean, 2):.2f}\nstd {_fixed(std.min(), 2):.2f}-{_fixed(std.max(), 2):.2f}")
    beyond = (values.abs() > EDGES[-1]).double().mean().item()
    if beyond > 0:
        lines.append(f"{100 * beyond:.1f} %\npast ±{EDGES[-1]:g},\nin the\nend bins")
    return "\n".join(lines)


def _fixed(value: float, digits: int) -> float:
    return round(float(value), digits) + 0.0  # + 0.0 turns -0.0 into 0.0: no "-0.000"


def summary(output: torch.Tensor, p: float, norm_first: bool) -> str:
    """One line: mean and std of the block output, overall and per token."""
    token_std = output.std(dim=-1, unbiased=False)  # (B, L)
    name = "Pre-LN" if norm_first else "Post-LN"
    return (f"{name}, dropout p = {p:.2f}:  block output mean {_fixed(output.mean(), 3):+.3f}, "
            f"std {_fixed(output.std(unbiased=False), 3):.3f};  per-token std from "
            f"{_fixed(token_std.min(), 2):.2f} to {_fixed(token_std.max(), 2):.2f}")


def _draw_panels(axes, stages: dict, block_input: torch.Tensor, norm_first: bool, ymax: float):
    """Fill three axes with step histograms; returns the artists a redraw repaints."""
    steps, titles, means, notes = [], [], [], []
    for ax, values, title in zip(axes, stages.values(), PANEL_TITLES[norm_first]):
        steps.append(ax.stairs(fractions(values), EDGES, fill=True, alpha=0.75, color=style.SERIES_COLOURS[2],
                               label="stage"))
        mean = values.mean().item()
        means.append(ax.axvline(mean, color=style.SERIES_COLOURS[1], linestyle="--", linewidth=1.2,
                                label="mean"))
        titles.append(style.title(ax, title))
        notes.append(ax.text(0.98, 0.97, stage_note(values, ax is axes[1]), transform=ax.transAxes,
                             ha="right", va="top", fontsize=style.TICK_PT))
        ax.set_xlim(EDGES[0], EDGES[-1])
        ax.set_ylim(0, ymax)
        ax.set_xlabel("activation value")
    # The block's input x, dashed on the last panel: how much did the block change it?
    reference = axes[-1].stairs(fractions(block_input), EDGES, color="black", linestyle="--",
                                linewidth=1, label="input x")
    axes[-1].legend(loc="upper left", fontsize=style.TICK_PT, frameon=False)  # left of the bars
    axes[0].set_ylabel("share of the B x L x D values")
    return steps, titles, means, reference, notes


class BlockExplorer(Explorer):
    """A dropout-probability slider and a Post-LN / Pre-LN switch -> three histograms.

    `update(p=..., norm_first=...)` redraws (see `Explorer`); `summary` is the line
    above the plots.
    """

    def __init__(self, x: torch.Tensor, sublayer, norm: dict, p: float = 0.1,
                 norm_first: bool = False, seed: int = 0):
        import ipywidgets as widgets

        self.x, self.sublayer, self.norm, self.seed = x, sublayer, norm, seed
        # Every setting the slider offers, computed now: a move only redraws. One y-range for
        # all of them, so bars can be compared across moves of the slider.
        self.all_stages = {(round(float(q), 2), first): block_stages(x, sublayer, norm, float(q), first, seed)
                           for q in np.arange(0.0, P_MAX + 1e-9, P_STEP) for first in (False, True)}
        self.ymax = 1.1 * max(fractions(v).max() for stages in self.all_stages.values()
                              for v in stages.values())
        fig, self.axes = style.new_figure(FIGSIZE[1], FIGSIZE[0], 1, 3, pyplot=False, sharey=True)
        fig.set_layout_engine(None)
        fig.subplots_adjust(**MARGINS)
        self.stages = block_stages(x, sublayer, norm, p, norm_first, seed)
        self.steps, self.titles, self.means, self.reference, self.notes = _draw_panels(
            self.axes, self.stages, x, norm_first, self.ymax)
        self.headline = fig.suptitle("", fontsize=style.TITLE_PT)
        self.p_slider = widgets.FloatSlider(value=p, min=0.0, max=P_MAX, step=P_STEP,
                                            description="dropout p", readout_format=".2f")
        self.mode = widgets.ToggleButtons(options=[("Post-LN", False), ("Pre-LN", True)],
                                          value=norm_first, description="LayerNorm")
        # The panel titles depend on the mode: one background per mode. The reference
        # histogram never changes, but it is drawn on top of the bars, so it moves too.
        self._build(fig, [*self.steps, *self.means, self.reference, self.headline, *self.notes],
                    [self.p_slider, self.mode], [widgets.HBox([self.p_slider, self.mode])])
        cache_text(self.frames.canvas.get_renderer())
        self.summary = ""
        for mode in (not norm_first, norm_first):  # draw both backgrounds now, not on a click
            self.update(norm_first=mode)

    def update(self, p: float | None = None, norm_first: bool | None = None) -> None:
        """Redraw for the given values (None keeps the control's current value)."""
        start = time.perf_counter()
        self._set_controls((self.p_slider, p), (self.mode, norm_first))
        p, norm_first = float(self.p_slider.value), bool(self.mode.value)
        key = (round(p, 2), norm_first)
        if key not in self.all_stages:             # a value set from code, off the slider's steps
            self.all_stages[key] = block_stages(self.x, self.sublayer, self.norm, p, norm_first,
                                                self.seed)
        self.stages = self.all_stages[key]
        for i, (step, line, note, values) in enumerate(zip(self.steps, self.means, self.notes,
                                                            self.stages.values())):
            step.set_data(fractions(values))
            note.set_text(stage_note(values, i == 1))
            mean = values.mean().item()
            line.set_xdata([mean, mean])
        for title, text in zip(self.titles, PANEL_TITLES[norm_first]):
            title.set_text(text)
        self.summary = summary(self.stages["block output"], p, norm_first)
        self.headline.set_text(self.summary)
        self._show(start, background=norm_first)


def block_explorer(x: torch.Tensor, sublayer, norm: dict, **kwargs) -> BlockExplorer:
    """Build the explorer; display its `.widget` in the notebook."""
    return BlockExplorer(x, sublayer, norm, **kwargs)
