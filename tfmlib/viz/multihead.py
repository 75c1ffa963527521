"""Plots and the heads explorer of notebook 06 (multi-head attention).

All heads of one sentence are tiled into a single image (one tile per head). The
explorer renders the labels of each tile layout once and afterwards only paints
the new image over that background (blitting), which keeps a redraw well under
100 ms even with a token label on every row and column.
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

from .. import (add_positional_encoding, embed, init_mha_params, multi_head_attention,
                padding_mask, sinusoidal_positional_encoding)
from ..tokenization import PAD, invert_vocab
from . import style
from .common import Explorer
from .textcache import cache_text

HEAD_CHOICES = (1, 2, 4, 8)
D_K_CHOICES = (2, 4, 8, 16)
GAP_X, GAP_Y = 1, 2  # empty cells between two tiles (rows leave room for "head h")
FIGSIZE = (style.COLUMN_IN, 5.0)


def running_example_input(ids: torch.Tensor, vocab_size: int, d_model: int,
                          seed: int = 0) -> torch.Tensor:
    """(B, L) ids -> (B, L, d_model): the course's running example at any width.

    Same recipe as the notebooks' first cells: a (V, d_model) table with entries
    ~ N(0, 1/d_model) from a generator seeded `seed`, so that the embedding times
    sqrt(d_model) has entries ~ N(0, 1); plus the sinusoidal positional encoding.
    """
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(vocab_size, d_model, generator=g) / math.sqrt(d_model)
    pe = sinusoidal_positional_encoding(ids.size(1), d_model)
    return add_positional_encoding(embed(ids, table), pe)


def grid_shape(num_heads: int) -> tuple[int, int]:
    """(rows, cols) of the tile grid: 1 -> 1x1, 2 -> 1x2, 4 -> 2x2, 8 -> 2x4, 16 -> 4x4."""
    rows = max(1, math.isqrt(num_heads))
    return rows, math.ceil(num_heads / rows)


def tile_heads(weights, blocked=None) -> np.ma.MaskedArray:
    """(H, Lq, Lk) -> one 2-D array with the heads in a grid (NaN between tiles); `blocked`
    (Lq, Lk) bool marks the masked cells of every tile (the array's mask)."""
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().cpu().float().numpy()
    heads, lq, lk = weights.shape
    rows, cols = grid_shape(heads)
    step_y, step_x = lq + GAP_Y, lk + GAP_X
    canvas = np.full((rows * step_y - GAP_Y, cols * step_x - GAP_X), np.nan)
    bad = np.zeros(canvas.shape, dtype=bool)
    for h in range(heads):
        r, c = divmod(h, cols)
        canvas[r * step_y: r * step_y + lq, c * step_x: c * step_x + lk] = weights[h]
        if blocked is not None:
            bad[r * step_y: r * step_y + lq, c * step_x: c * step_x + lk] = np.asarray(blocked)
    return np.ma.masked_array(canvas, mask=bad)


def tile_colours(canvas: np.ma.MaskedArray) -> np.ndarray:
    """Tiles (rows, cols) -> RGBA (rows, cols, 4) in the course's attention look: weights on
    the 0-1 scale, masked cells grey, the NaN gaps between tiles transparent (so texts drawn
    there, such as "head h", stay visible). One RGBA image is drawn faster than two layers."""
    rgba = style.ATTENTION_CMAP(np.ma.masked_array(np.nan_to_num(canvas.data), mask=canvas.mask))
    rgba[np.isnan(canvas.data), 3] = 0.0
    return rgba


class _HeadGrid:
    """One axes with one image holding every head's (Lq, Lk) map, and its labels."""

    def __init__(self, ax, tokens, max_heads: int = 16, cax=None, blocked=None):
        self.ax, self.tokens, self.blocked = ax, list(tokens), blocked
        self.image = ax.imshow(np.zeros((1, 1, 4)), interpolation="nearest")   # RGBA tiles
        self.head_labels = [ax.text(0, 0, "", ha="center", va="bottom", fontsize=style.TICK_PT)
                            for _ in range(max_heads)]
        for spine in ax.spines.values():
            spine.set_visible(False)
        self.cax = cax
        scale = ScalarMappable(Normalize(0.0, 1.0), style.ATTENTION_CMAP)
        if cax is None:
            bar = ax.figure.colorbar(scale, ax=ax, fraction=0.025, pad=0.02, ticks=[0, 0.5, 1])
        else:
            bar = ax.figure.colorbar(scale, cax=cax, ticks=[0, 0.5, 1])
        bar.set_label(style.ATTENTION_CBAR_LABEL, fontsize=style.LABEL_PT)
        bar.ax.tick_params(labelsize=style.TICK_PT)
        style.name_query_key_axes(ax)
        self.layout = None

    def set_layout(self, heads: int) -> None:
        """Place ticks (token names) and 'head h' labels for a grid of `heads` tiles."""
        if self.layout == heads:
            return
        length = len(self.tokens)
        rows, cols = grid_shape(heads)
        step_x, step_y = length + GAP_X, length + GAP_Y
        width, height = cols * step_x - GAP_X, rows * step_y - GAP_Y
        self.image.set_extent((-0.5, width - 0.5, height - 0.5, -0.5))
        self.ax.set_xlim(-0.5, width - 0.5)
        self.ax.set_ylim(height - 0.5, -1.7)  # room above the top row for the head labels
        xs = [c * step_x + j for c in range(cols) for j in range(length)]
        ys = [r * step_y + i for r in range(rows) for i in range(length)]
        self.ax.set_xticks(xs, labels=self.tokens * cols, rotation=90, fontsize=style.TICK_PT)
        self.ax.set_yticks(ys, labels=self.tokens * rows, fontsize=style.TICK_PT)
        for h, label in enumerate(self.head_labels):
            r, c = divmod(h, cols)
            label.set_visible(h < heads)
            label.set_position((c * step_x + (length - 1) / 2, r * step_y - 0.6))
            label.set_text(f"head {h}")
        if self.cax is not None:  # keep the colour bar right next to the tiles
            self.ax.apply_aspect()
            box = self.ax.get_position()
            self.cax.set_position((box.x1 + 0.015, box.y0, 0.012, box.height))
        self.layout = heads

    def draw(self, weights) -> None:
        """weights (H, L, L) of one sentence."""
        self.set_layout(weights.shape[0])
        self.image.set_data(tile_colours(tile_heads(weights, self.blocked)))


def plot_heads(weights, tokens, title: str = "", figsize=FIGSIZE, blocked=None):
    """Static figure: one heatmap per head of one sentence; weights (H, Lq, Lk), `blocked`
    (Lq, Lk) bool marks masked cells (drawn grey)."""
    fig, ax = style.new_figure(figsize[1], figsize[0])
    grid = _HeadGrid(ax, tokens, blocked=blocked)
    grid.draw(weights)
    style.title(ax, title)
    return fig


def describe_choice(heads: int, d_k: int, length: int) -> str:
    d_model = heads * d_k
    return (f"heads = {heads}, d_k = {d_k}  ->  d_model = {heads} x {d_k} = {d_model}\n"
            f"W_q, W_k, W_v, W_o: ({d_model}, {d_model});   "
            f"weights: (1, {heads}, {length}, {length})")


class HeadsExplorer(Explorer):
    """Dropdowns for heads and d_k -> one attention heatmap per head of one sentence.

    Each choice builds the running example at width d_model = heads x d_k,
    re-initialises seeded projections and runs tfmlib's `multi_head_attention`.
    `update(heads=..., d_k=...)` redraws (see `Explorer`); `weights` holds the
    current (heads, L, L) weights.
    """

    def __init__(self, ids: torch.Tensor, vocab: dict, sample: int = 0, heads: int = 4,
                 d_k: int = 4, seed: int = 0, param_seed: int = 1):
        import ipywidgets as widgets

        self.vocab, self.seed, self.param_seed = vocab, seed, param_seed
        self.ids = ids[sample: sample + 1]                            # (1, L)
        id_to_token = invert_vocab(vocab)
        self.tokens = [id_to_token[int(i)] for i in self.ids[0]]
        self.mask = padding_mask(self.ids, vocab[PAD])                # (1, 1, 1, L)
        fig = Figure(figsize=FIGSIZE)  # outside pyplot: the inline backend never shows it
        self.ax = fig.add_axes((0.1, 0.17, 0.74, 0.68))
        colour_bar = fig.add_axes((0.87, 0.17, 0.015, 0.68))  # moved next to the tiles later
        blocked = ~self.mask[0, 0, 0].expand(len(self.tokens), -1)      # (L, L): padded keys
        self.grid = _HeadGrid(self.ax, self.tokens, cax=colour_bar, blocked=blocked)
        self.title = fig.text(0.5, 0.975, "", ha="center", va="top", fontsize=style.TITLE_PT)
        self.heads_box = widgets.Dropdown(options=list(HEAD_CHOICES), value=heads,
                                          description="heads")
        self.d_k_box = widgets.Dropdown(options=list(D_K_CHOICES), value=d_k, description="d_k")
        # The tick labels and "head h" titles of a layout are the background (one per layout).
        self._build(fig, [self.grid.image, self.title], [self.heads_box, self.d_k_box],
                    [widgets.HBox([self.heads_box, self.d_k_box])])
        cache_text(self.frames.canvas.get_renderer())
        self.weights = None
        # All 16 choices are small: compute them now, so that a click only draws.
        self.all_weights = {(h, k): self.compute(h, k) for h in HEAD_CHOICES for k in D_K_CHOICES}
        for choice in HEAD_CHOICES:  # draw every layout's background now rather than on a click
            self.grid.set_layout(choice)
            self.frames.png(background=choice)
        self.update()

    def compute(self, heads: int, d_k: int) -> torch.Tensor:
        """(heads, L, L) attention weights of the sentence at d_model = heads * d_k."""
        d_model = heads * d_k
        x = running_example_input(self.ids, len(self.vocab), d_model, self.seed)    # (1, L, D)
        params = init_mha_params(d_model, generator=torch.Generator().manual_seed(self.param_seed))
        with torch.no_grad():
            _, weights = multi_head_attention(x, x, x, params, heads, self.mask)    # (1, H, L, L)
        return weights[0]

    def update(self, heads: int | None = None, d_k: int | None = None) -> None:
        """Redraw for the given values (None keeps the control's current value)."""
        start = time.perf_counter()
        # A value that is not offered raises traitlets.TraitError.
        self._set_controls((self.heads_box, heads), (self.d_k_box, d_k))
        heads, d_k = self.heads_box.value, self.d_k_box.value
        self.weights = self.all_weights[heads, d_k]
        self.grid.draw(self.weights)
        self.title.set_text(describe_choice(heads, d_k, len(self.tokens)))
        self._show(start, background=heads)


def heads_explorer(ids: torch.Tensor, vocab: dict, sample: int = 0, **kwargs) -> HeadsExplorer:
    """Build the explorer; display its `.widget` in the notebook."""
    return HeadsExplorer(ids, vocab, sample=sample, **kwargs)
