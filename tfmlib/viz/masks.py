"""Plots and the mask explorer of notebook 04 (padding, causal and combined masks).

A mask is drawn as one (Lq, Lk) grid per sample: rows are queries (the token
looking), columns are keys (the token looked at), green = True = "may attend",
grey = False = blocked (the grey of masked positions in every attention map).
"""
from __future__ import annotations

import html
import time

import numpy as np
import torch

from .. import causal_mask, padding_mask
from . import style
from .common import Explorer, heatmap, panel_row
from .style import MASK_CMAP, TITLE_PT, figure, freeze_layout


def per_sample_grids(mask: torch.Tensor, batch: int) -> torch.Tensor:
    """Any mask that broadcasts to (B, 1, Lq, Lk) -> (B, Lq, Lk), for drawing.

    A padding mask (B, 1, 1, L) becomes L identical rows per sample, a causal
    mask (1, 1, L, L) the same triangle for every sample: what broadcasting does
    when the mask meets the (B, H, Lq, Lk) scores.
    """
    if mask.dim() != 4:
        raise ValueError(f"mask: expected a 4-D mask (B or 1, 1, Lq or 1, Lk), got shape "
                         f"{tuple(mask.shape)}")
    length = mask.size(-1)
    rows = length if mask.size(-2) == 1 else mask.size(-2)   # a padding mask: one row per query
    return torch.broadcast_to(mask, (batch, mask.size(1), rows, length))[:, 0]


def _grid_lines(ax, rows: int, cols: int) -> None:
    """White lines between the cells, so single cells can be counted."""
    ax.set_xticks(np.arange(-0.5, cols, 1.0), minor=True)
    ax.set_yticks(np.arange(-0.5, rows, 1.0), minor=True)
    ax.grid(which="minor", color="white", linewidth=1.2)
    ax.tick_params(which="minor", length=0)


def mask_grid(ax, grid, x_labels, y_labels, title: str = ""):
    """One (Lq, Lk) bool grid on `ax` with labels; returns the image artist."""
    grid = grid.float() if isinstance(grid, torch.Tensor) else np.asarray(grid, dtype=float)
    image = heatmap(ax, grid, x_labels=x_labels, y_labels=y_labels, title=title,
                    cmap=MASK_CMAP, vmin=0, vmax=1, colorbar=False, aspect="equal")
    style.name_query_key_axes(ax)
    _grid_lines(ax, grid.shape[0], grid.shape[1])
    return image


def mask_legend(fig, image, axes) -> None:
    """One colour bar for the whole figure, saying which colour means what."""
    bar = style.colorbar(fig, image, axes, "mask value", ticks=[0.25, 0.75], fraction=0.04,
                         aspect=12, shrink=0.8)   # square maps leave height to spare
    bar.ax.set_yticklabels(["False\nblocked", "True\nmay\nattend"])


def plot_masks(mask: torch.Tensor, tokens, titles=None, suptitle: str = "", height: float = 3.3):
    """One labelled query-by-key grid per sample of a 4-D mask (anything that
    broadcasts to (B, 1, Lq, Lk)); `tokens` is one list of L tokens per sample."""
    batch = len(tokens)
    grids = per_sample_grids(mask, batch)                     # (B, Lq, Lk)
    fig, axes = panel_row(batch, height)
    titles = titles or [f"sample {b}" for b in range(batch)]
    image = None
    for b, ax in enumerate(axes):
        image = mask_grid(ax, grids[b], tokens[b], tokens[b], titles[b])
        if b:
            ax.set_ylabel("")
    mask_legend(fig, image, axes)
    if suptitle:
        fig.suptitle(suptitle, fontsize=TITLE_PT)
    return fig


def plot_mask_variants(variants: dict, tokens, sample: int, columns: int = 3,
                       panel_height: float = 2.6):
    """The same sample under several masks, `columns` panels a row: {title: 4-D mask}.

    Right of each panel: how many keys each query row may see; a row with 0 visible keys
    (in red) gives NaN after the softmax (notebook 05).
    """
    names = list(variants)
    rows = -(-len(names) // columns)                                    # ceil
    fig = figure(panel_height * rows)
    axes = list(fig.subplots(rows, columns, squeeze=False).flat)
    image = None
    for i, (ax, name) in enumerate(zip(axes, names)):
        mask = variants[name]
        mask = mask[sample: sample + 1] if mask.size(0) > 1 else mask   # (1, 1, Lq or 1, Lk)
        grid = per_sample_grids(mask, 1)[0]                             # (L, L)
        image = mask_grid(ax, grid, tokens, tokens, name)
        _row_counts(ax, grid.sum(-1).tolist())
        if i % columns:
            ax.set_ylabel("")
        if i < len(names) - columns:                                    # a panel below says it
            ax.set_xlabel("")
    for ax in axes[len(names):]:
        ax.remove()
    mask_legend(fig, image, axes[:len(names)])
    return fig


def _row_counts(ax, counts) -> None:
    """Each row's number of visible keys, right of the grid, above the word "keys"."""
    beside = ax.get_yaxis_transform()              # x in axes fractions, y in rows
    ax.text(1.03, len(counts) - 0.4, "keys", transform=beside, ha="left", va="top",
            fontsize=style.TICK_PT)
    for row, count in enumerate(counts):
        ax.text(1.03, row, str(count), transform=beside, ha="left", va="center",
                fontsize=style.TICK_PT, color=style.ERROR_COLOUR if count == 0 else "black",
                fontweight="bold" if count == 0 else "normal")


# ---- the widget ----------------------------------------------------------------------------

def _cell_borders(ax, rows: int, cols: int):
    """White lines between cells as one artist (drawn on top of the image in every frame)."""
    from matplotlib.collections import LineCollection

    segments = [[(x, -0.5), (x, rows - 0.5)] for x in np.arange(-0.5, cols, 1.0)]
    segments += [[(-0.5, y), (cols - 0.5, y)] for y in np.arange(-0.5, rows, 1.0)]
    return ax.add_collection(LineCollection(segments, colors="white", linewidths=1.2, zorder=3))


def masks_from_lengths(lengths, seq_len: int, causal: bool) -> torch.Tensor:
    """Real-token counts per sample -> the mask the batch would get, (B, 1, L, L).

    Builds a stand-in id batch (1 = some real token, 0 = <pad>) and uses tfmlib's
    own `padding_mask` and `causal_mask`.
    """
    lengths = torch.as_tensor(list(lengths))
    ids = (torch.arange(seq_len)[None, :] < lengths[:, None]).long()   # (B, L): 1 real, 0 pad
    mask = padding_mask(ids, pad_id=0)                                 # (B, 1, 1, L)
    if causal:
        mask = mask & causal_mask(seq_len)                             # (B, 1, L, L)
    return torch.broadcast_to(mask, (len(lengths), 1, seq_len, seq_len))


def describe_setting(lengths, seq_len: int, causal: bool) -> str:
    """One line saying which shapes meet and where the padding is."""
    batch = len(lengths)
    if causal:
        shapes = (f"padding ({batch}, 1, 1, {seq_len}) & causal (1, 1, {seq_len}, {seq_len})"
                  f" -> combined ({batch}, 1, {seq_len}, {seq_len})")
    else:
        shapes = (f"padding mask ({batch}, 1, 1, {seq_len}), drawn broadcast to "
                  f"({batch}, 1, {seq_len}, {seq_len})")
    pads = []
    for b, n in enumerate(lengths):
        pads.append(f"sample {b}: " + (f"positions {n}..{seq_len - 1} are <pad>" if n < seq_len - 1
                                        else f"position {n} is <pad>" if n == seq_len - 1
                                        else "no <pad>"))
    return shapes + "\n" + ";  ".join(pads)


class _MaskPanels:
    """The explorer's figure: one grid per sample with fixed labels; only the images change."""

    def __init__(self, batch: int, seq_len: int, height: float = 3.0, pyplot: bool = True):
        self.seq_len = seq_len
        self.fig = figure(height, pyplot=pyplot)
        self.axes = list(self.fig.subplots(1, batch, squeeze=False)[0])
        blank = np.zeros((seq_len, seq_len))
        positions = [str(i) for i in range(seq_len)]
        self.images = []
        self.borders = []
        for b, ax in enumerate(self.axes):
            image = heatmap(ax, blank, x_labels=positions, y_labels=positions,
                            title=f"sample {b}", cmap=MASK_CMAP, vmin=0, vmax=1, colorbar=False,
                            aspect="equal")
            style.name_query_key_axes(ax, "key position", "query position" if b == 0 else "")
            ax.tick_params(axis="x", labelrotation=0)
            self.images.append(image)
            self.borders.append(_cell_borders(ax, seq_len, seq_len))
        mask_legend(self.fig, self.images[0], self.axes)

    def draw(self, lengths, causal: bool) -> torch.Tensor:
        masks = masks_from_lengths(lengths, self.seq_len, causal)        # (B, 1, L, L)
        for b, image in enumerate(self.images):
            image.set_data(masks[b, 0].float().numpy())
        return masks

    @property
    def changing_artists(self):
        return [*self.images, *self.borders]


class MaskExplorer(Explorer):
    """Sliders for each sample's number of real tokens and a causal switch -> mask grids.

    `update(lengths=[...], causal=...)` redraws (see `Explorer`); `masks` holds the
    current (B, 1, L, L) mask.
    """

    def __init__(self, lengths, seq_len: int, causal: bool = True):
        import ipywidgets as widgets

        self.seq_len = seq_len
        self.panels = _MaskPanels(len(lengths), seq_len, pyplot=False)  # shown only as the PNG
        freeze_layout(self.panels.fig)          # the labels never change: lay out once
        self.sliders = [widgets.IntSlider(value=int(n), min=1, max=seq_len,
                                          description=f"sample {b}",
                                          style={"description_width": "60px"},
                                          layout=widgets.Layout(width="250px"))
                        for b, n in enumerate(lengths)]
        self.causal_box = widgets.Checkbox(value=causal, description="causal (decoder)")
        self.caption = widgets.HTML()
        header = widgets.Label(f"real tokens per sample (the other positions of L = {seq_len} "
                               "are <pad>):")
        self._build(self.panels.fig, self.panels.changing_artists, [*self.sliders, self.causal_box],
                    [header, widgets.HBox(self.sliders), self.causal_box, self.caption])
        self.masks = None
        self.update()

    def update(self, lengths=None, causal: bool | None = None) -> None:
        """Redraw for the given values (None keeps the control's value)."""
        start = time.perf_counter()
        if lengths is None:
            lengths = [None] * len(self.sliders)
        elif len(lengths) != len(self.sliders):
            raise ValueError(f"lengths: expected {len(self.sliders)} values, got {list(lengths)}")
        elif not all(1 <= int(n) <= self.seq_len for n in lengths):
            raise ValueError(f"lengths: expected values in 1..{self.seq_len}, got {list(lengths)}")
        self._set_controls(*zip(self.sliders, lengths), (self.causal_box, causal))
        lengths = [s.value for s in self.sliders]
        self.masks = self.panels.draw(lengths, self.causal_box.value)
        text = describe_setting(lengths, self.seq_len, self.causal_box.value)
        self.caption.value = "<br>".join(f"<code>{html.escape(line)}</code>"
                                         for line in text.split("\n"))
        self._show(start)


def mask_explorer(lengths, seq_len: int, causal: bool = True) -> MaskExplorer:
    """Build the explorer; display `.widget` in the notebook."""
    return MaskExplorer(lengths, seq_len, causal=causal)
