"""Plots and the positional-encoding explorer of notebook 03 (embeddings and positions)."""
from __future__ import annotations

import html
import time

from matplotlib.ticker import MaxNLocator
import numpy as np
import torch

from ..embeddings import sinusoidal_positional_encoding
from .common import Explorer, heatmap
from . import style
from .style import (DIVERGING_CMAP, ERROR_COLOUR, GUIDE_COLOUR, PAIR_COLOURS, SERIES_COLOURS, TICK_PT, figure, freeze_layout, line_style,
                    new_figure, signed_limits, style_axes)

D_MODEL_RANGE = (4, 128, 2)     # (min, max, step): sin/cos pairs need an even d_model
MAX_LEN_RANGE = (8, 200, 1)


def _numpy(x) -> np.ndarray:
    return x.detach().cpu().double().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def plot_pe_heatmap(pe, ax=None, title: str | None = None):
    """The (max_len, d_model) encoding as an image: positions down, dimensions across."""
    if ax is None:
        _, ax = new_figure(4.2, width=7)
    max_len, d_model = pe.shape
    image = heatmap(ax, pe, cmap=DIVERGING_CMAP, vmin=-1, vmax=1, cbar_label="PE value",
                    xlabel="dimension (column of PE)", ylabel="position in the sentence",
                    title=title or f"sinusoidal PE, shape (max_len, d_model) = ({max_len}, {d_model})")
    return image


def plot_pe_curves(pe, dims=(0, 2, 4, 8), ax=None):
    """A few columns of PE as curves over position: each even column is a sine of its own period."""
    if ax is None:
        _, ax = new_figure(3.6)
    values = _numpy(pe)
    max_len, d_model = values.shape
    positions = np.arange(max_len)
    for n, d in enumerate(dims):   # colour, line style and marker differ: no colour needed
        period = 2 * np.pi * 10000 ** ((d - d % 2) / d_model)
        ax.plot(positions, values[:, d], markersize=4, **line_style(n),
                label=f"column {d} ({'sin' if d % 2 == 0 else 'cos'}, period {period:.1f})")
    ax.set_xlabel("position")
    ax.set_ylabel("PE value")
    ax.set_ylim(-1.15, 1.75)
    style.title(ax, f"columns of PE over position (d_model = {d_model}): low columns turn fast, "
                    "high columns slowly")
    ax.legend(loc="upper right", ncol=2)
    ax.grid(alpha=0.3)
    return ax


def plot_pe_similarity(pe, anchors=(0, 10, 25), ax=None):
    """PE[p] . PE[p + k] against the offset k, one curve per anchor p: the curves coincide."""
    if ax is None:
        _, ax = new_figure(3.4, width=7)
    values = _numpy(pe)
    max_len, d_model = values.shape
    # The curves lie on top of each other: widths and dashes keep each one visible.
    styles = [dict(linewidth=7, alpha=0.35, color=SERIES_COLOURS[2]),
              dict(linewidth=3, linestyle="--", color=SERIES_COLOURS[1]),
              dict(linewidth=1.5, linestyle=":", color=SERIES_COLOURS[0])]
    for n, p in enumerate(anchors):
        offsets = np.arange(max_len - p)
        dots = values[p + offsets] @ values[p]
        ax.plot(offsets, dots, label=f"anchor p = {p}", **styles[n % 3])
    ax.set_xlabel("offset k (distance between the two positions)")
    ax.set_ylabel("PE[p] · PE[p + k]")
    style.title(ax, f"PE[p] · PE[p + k] depends only on the distance k  (d_model = {d_model})")
    ax.legend()
    ax.grid(alpha=0.3)
    return ax


def plot_rope_distance(distances, same: dict, unrelated, unrelated_label: str, ax=None):
    """RoPE scores q · k against the distance between query and key, each divided by the width D.

    same: {label: (N, K) scores of N random vectors with a copy of themselves at each of the K
    distances}, drawn as their mean; unrelated: (N, K) scores of N unrelated pairs, drawn as
    their mean with a band of one standard deviation on either side, labelled `unrelated_label`.
    """
    if ax is None:
        _, ax = new_figure(3.6, width=7)
    x = _numpy(distances)
    for n, (label, scores) in enumerate(same.items()):
        values = _numpy(scores)
        ax.plot(x, values.mean(axis=0), label=label, linewidth=1.8,
                color=PAIR_COLOURS["widths"][n % 2], linestyle=("-", "--")[n % 2])
    values = _numpy(unrelated)
    mean, spread = values.mean(axis=0), values.std(axis=0)
    ax.fill_between(x, mean - spread, mean + spread, color=SERIES_COLOURS[3], alpha=0.2,
                    label=f"{unrelated_label}: mean ± one standard deviation")
    ax.plot(x, mean, color=SERIES_COLOURS[3], linewidth=1.2, linestyle=":")
    ax.axhline(0, color=GUIDE_COLOUR, linewidth=0.8)
    ax.set_xlabel("distance between the query's and the key's positions")
    ax.set_ylabel("score q · k / D")
    ax.set_ylim(-0.4, 1.45)
    style.title(ax, "RoPE: the score of a vector with itself falls with distance, on average")
    ax.legend(loc="upper right", fontsize=TICK_PT)
    ax.grid(alpha=0.3)
    return ax


def plot_score_matrix(scores, ax=None, title: str = "", cbar_label: str = "q_m · k_n"):
    """An (L, L) matrix of query-key dot products, with its values written in the cells."""
    if ax is None:
        _, ax = new_figure(4.6, width=5.6)
    values = _numpy(scores)
    length = values.shape[0]
    image = heatmap(ax, values, title=title, signed=True, cbar_label=cbar_label, aspect="equal")
    style.name_query_key_axes(ax, "key position n", "query position m")
    limit = signed_limits(values)[1]
    ax.set_xticks(range(length), labels=range(length), rotation=0)
    ax.set_yticks(range(length))
    for (row, col), value in np.ndenumerate(values):
        ax.text(col, row, f"{value:.2f}", ha="center", va="center", fontsize=TICK_PT,
                color="white" if abs(value) > 0.6 * limit else "black")
    return image


# ---- the widget -------------------------------------------------------------------------------

class PEPanels:
    """Two panels on `fig`: the PE heatmap with rows i and j marked, and PE[i] . PE[p] over p.
    `draw(d_model, max_len, pos_i, pos_j)` redraws in place and returns (pe, dots).

    Rows i and j differ by line style and marker (solid and circle, dashed and square), so
    no colour is needed to tell them apart.
    """

    def __init__(self, fig):
        fig.get_layout_engine().set(wspace=0.12)    # the colour bar's label apart from the next panel
        self.ax_map, self.ax_dot = fig.subplots(1, 2, width_ratios=(1.1, 1))
        self.image = heatmap(self.ax_map, np.zeros((2, 2)), cmap=DIVERGING_CMAP, vmin=-1, vmax=1,
                             cbar_label="PE value", xlabel="dimension (column of PE)",
                             ylabel="position (row of PE)")
        self.ax_map.images[0].colorbar.set_ticks([-1, -0.5, 0, 0.5, 1])   # fewer labels: faster
        self.row_i = self.ax_map.axhline(0, color="black", linewidth=2)
        self.row_j = self.ax_map.axhline(0, color="black", linewidth=2, linestyle=(0, (3, 2)))
        (self.curve,) = self.ax_dot.plot([], [], color=GUIDE_COLOUR, linewidth=1.5)
        (self.mark_i,) = self.ax_dot.plot([], [], "o", color="black", markersize=7,
                                          label="p = i (solid)")
        (self.mark_j,) = self.ax_dot.plot([], [], "s", mfc="none", mec="black", mew=2,
                                          markersize=9, label="p = j (dashed)")
        self.ax_dot.axhline(0, color=GUIDE_COLOUR, linewidth=0.8)
        self.ax_dot.set_xlabel("position p")
        self.ax_dot.set_ylabel("PE[i] · PE[p]")
        self.ax_dot.grid(alpha=0.3)
        self.ax_dot.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)  # off the data
        for ax in (self.ax_map, self.ax_dot):
            style_axes(ax)
            style.title(ax, " ")
            ax.xaxis.set_major_locator(MaxNLocator(6, integer=True))
            ax.yaxis.set_major_locator(MaxNLocator(6, integer=True))
        # What moves when only the positions change; everything else is the background.
        self.moving = [self.row_i, self.row_j, self.curve, self.mark_i, self.mark_j,
                       self.ax_dot.title]

    def draw(self, d_model: int, max_len: int, pos_i: int, pos_j: int):
        pe = sinusoidal_positional_encoding(max_len, d_model)                 # (max_len, d_model)
        values = pe.double().numpy()
        dots = values @ values[pos_i]                                           # (max_len,)
        self.image.set_data(values)
        self.image.set_extent((-0.5, d_model - 0.5, max_len - 0.5, -0.5))
        self.ax_map.set_xlim(-0.5, d_model - 0.5)
        self.ax_map.set_ylim(max_len - 0.5, -0.5)
        self.row_i.set_ydata([pos_i, pos_i])
        self.row_j.set_ydata([pos_j, pos_j])
        self.ax_map.title.set_text(f"PE, shape (max_len, d_model) = ({max_len}, {d_model})")
        self.curve.set_data(np.arange(max_len), dots)
        self.mark_i.set_data([pos_i], [dots[pos_i]])
        self.mark_j.set_data([pos_j], [dots[pos_j]])
        self.ax_dot.set_xlim(-0.5, max_len - 0.5)
        self.ax_dot.set_ylim(-0.55 * d_model, 0.62 * d_model)
        self.ax_dot.title.set_text(f"PE[{pos_i}] · PE[{pos_j}] = {dots[pos_j]:.2f}  "
                                   f"(|i - j| = {abs(pos_i - pos_j)})")
        return pe, dots


class PositionalEncodingExplorer(Explorer):
    """Sliders for d_model, max_len and two positions -> the PE heatmap with the two rows marked,
    and the dot product of position i's encoding with every position.

    `update(d_model=..., max_len=..., pos_i=..., pos_j=...)` redraws (see `Explorer`); it
    returns a message ("" when the values were valid) instead of raising. `pe` is the last
    encoding drawn and `dot` the last PE[i] . PE[j].
    """

    def __init__(self, d_model: int = 16, max_len: int = 50, pos_i: int = 10, pos_j: int = 14):
        import ipywidgets as widgets

        fig = figure(4.2, pyplot=False)  # outside pyplot: the inline backend never shows it
        self.panels = PEPanels(fig)
        hi_d, hi_len = D_MODEL_RANGE[1], MAX_LEN_RANGE[1]
        self.panels.draw(hi_d, hi_len, hi_len - 1, hi_len - 1)  # the widest labels there are ...
        freeze_layout(fig)                                     # ... set the layout, once
        slider = dict(continuous_update=True, layout=widgets.Layout(width="340px"))
        lo, hi, step = D_MODEL_RANGE
        self.d_model_box = widgets.IntSlider(value=d_model, min=lo, max=hi, step=step,
                                             description="d_model", **slider)
        lo, hi, step = MAX_LEN_RANGE
        self.max_len_box = widgets.IntSlider(value=max_len, min=lo, max=hi, step=step,
                                             description="max_len", **slider)
        self.i_box = widgets.IntSlider(value=pos_i, min=0, max=max_len - 1, description="position i",
                                       **slider)
        self.j_box = widgets.IntSlider(value=pos_j, min=0, max=max_len - 1, description="position j",
                                       **slider)
        self.info = widgets.HTML()
        boxes = [self.d_model_box, self.max_len_box, self.i_box, self.j_box]
        # Dragging a position moves only lines, markers, the curve and the titles: the heatmap,
        # colour bar and ticks are the background, drawn once per (d_model, max_len).
        self._build(fig, self.panels.moving, boxes,
                    [widgets.HBox(boxes[:2]), widgets.HBox(boxes[2:]), self.info])
        self.pe, self.dot, self.message = None, float("nan"), ""
        self.update()

    @staticmethod
    def validate(d_model, max_len, pos_i, pos_j) -> str:
        """"" when the values are valid, else what is wrong (the sliders only offer valid values)."""
        lo, hi, _ = D_MODEL_RANGE
        if not (isinstance(d_model, int) and lo <= d_model <= hi and d_model % 2 == 0):
            return f"d_model must be an even whole number from {lo} to {hi} (sin/cos pairs), got {d_model!r}"
        lo, hi, _ = MAX_LEN_RANGE
        if not (isinstance(max_len, int) and lo <= max_len <= hi):
            return f"max_len must be a whole number from {lo} to {hi}, got {max_len!r}"
        for name, pos in (("position i", pos_i), ("position j", pos_j)):
            if not (isinstance(pos, int) and 0 <= pos < max_len):
                return f"{name} must be a row of PE: 0 to max_len - 1 = {max_len - 1}, got {pos!r}"
        return ""

    def update(self, d_model: int | None = None, max_len: int | None = None,
               pos_i: int | None = None, pos_j: int | None = None) -> str:
        """Redraw for the sliders' values (or the ones given here); returns a message, "" if valid."""
        start = time.perf_counter()
        wanted = {"d_model": d_model if d_model is not None else self.d_model_box.value,
                  "max_len": max_len if max_len is not None else self.max_len_box.value}
        # A position left to its slider follows a shorter max_len inside, as the slider does:
        # on every path (a learner drags max_len below i, or a call gives only max_len).
        last = wanted["max_len"] - 1 if isinstance(wanted["max_len"], int) else None
        for name, given, box in (("pos_i", pos_i, self.i_box), ("pos_j", pos_j, self.j_box)):
            wanted[name] = given if given is not None or last is None else min(box.value, last)
        self.message = self.validate(**wanted)
        if self.message:                         # keep the last picture, say what is wrong
            self.info.value = f"<span style='color:{ERROR_COLOUR}'>{html.escape(self.message)}</span>"
            return self.message
        self._move_sliders(**wanted)
        d, i, j = wanted["d_model"], wanted["pos_i"], wanted["pos_j"]
        self.pe, dots = self.panels.draw(d, wanted["max_len"], i, j)
        self.dot = float(dots[j])
        self.info.value = (f"<code>PE[{i}] · PE[{j}] = {self.dot:.3f}</code>; the largest possible value is "
                           f"<code>d_model / 2 = {d // 2}</code> (a position with itself). Move both "
                           "positions by the same amount: the dot product does not change.")
        self._show(start, background=(d, wanted["max_len"]))
        return ""

    def _move_sliders(self, d_model, max_len, pos_i, pos_j) -> None:
        with self._quietly():
            self.d_model_box.value = d_model
            for box, pos in ((self.i_box, pos_i), (self.j_box, pos_j)):
                box.max = max(box.max, max_len - 1)      # widen first, or the value would be clipped
                box.value = pos
                box.max = max_len - 1
            self.max_len_box.value = max_len


def positional_encoding_explorer(d_model: int = 16, max_len: int = 50, pos_i: int = 10,
                                 pos_j: int = 14) -> PositionalEncodingExplorer:
    """Build the explorer; display `.widget` in the notebook."""
    return PositionalEncodingExplorer(d_model, max_len, pos_i, pos_j)
