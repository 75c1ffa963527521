"""Notebook 08: the attention maps of every layer of an encoder-decoder stack, tiled into one image.

`StackAttention` holds one batch, its tokens and enough layers' params; `maps(...)` runs the
stack and returns each layer's weights (from tfmlib's `stack_attention_weights`).
`plot_stack_attention` draws them for a static figure, `StackAttentionExplorer` lets the
learner change the number of layers, heads, the sentence and which attention to look at.
Both draw through `StackPicture`: one image of tiles (a row per layer, a column per head),
tokens on both axes, masked keys grey, on a canvas as tall as the layers shown.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize

from ..encoder_decoder import encoder, stack_attention_weights
from ..tokenization import EOS, PAD, invert_vocab
from . import style
from .common import Explorer, _renderer, place_axis_names

KINDS = {"encoder self-attention": "encoder",
         "decoder self-attention (causal)": "decoder_self",
         "decoder cross-attention": "decoder_cross"}
HEAD_CHOICES = (1, 2, 4)   # 4 heads of 8 keys still leave room for a token under every column
MAX_LAYERS = 3             # 3 layers of tiles: a canvas 6.5 inches tall, a laptop's screen
FIGSIZE = (style.COLUMN_IN, 5.8)   # until `StackPicture.fit` sets the height for the layers shown
# The axes' box across the canvas, in figure fractions: room on the left for the query tokens,
# right for the layer names and the colour bar. 4 heads of 8 keys (35 columns of cells) fill
# its width with cells of the classroom size (style.CLASSROOM_CELL_PX). Its height is as many
# cells as the layers shown have rows, under TOP_IN for the title and head names; below it, room
# for the longest key token and the keys' axis name (`StackPicture`).
AXES_X, AXES_WIDTH = 0.155, 0.695
COLOURBAR_X, COLOURBAR_WIDTH = 0.90, 0.018
TOP_IN = 0.85
TITLE_TOP_IN = 0.03


def token_rows(ids: torch.Tensor, vocab: dict) -> list[list[str]]:
    """(B, L) ids -> B lists of L tokens."""
    id_to_token = invert_vocab(vocab)
    return [[id_to_token[i] for i in row] for row in ids.tolist()]


def written_tokens(decoder_input: list[str]) -> list[str]:
    """The token a decoder writes at each position of its input (<bos> w1 ... wn <pad> ...):
    the next one, w1 ... wn, then <eos> where the input's last word stands, <pad> after it."""
    words = [token for token in decoder_input if token != PAD]
    return words[1:] + [EOS] + [PAD] * (len(decoder_input) - len(words))


@dataclass
class StackAttention:
    """One batch through a stack: source x (B, Ls, D) with its padding mask (B, 1, 1, Ls),
    target y (B, Lt, D) with its mask (B, 1, Lt, Lt), params for up to len(...) layers, and
    each sample's name and tokens (`token_rows`)."""
    x: torch.Tensor
    src_mask: torch.Tensor
    y: torch.Tensor
    tgt_mask: torch.Tensor
    encoder_layers: list
    decoder_layers: list
    sample_names: list
    src_tokens: list
    tgt_tokens: list

    @property
    def max_layers(self) -> int:
        return min(len(self.encoder_layers), len(self.decoder_layers))

    @torch.no_grad()
    def maps(self, num_layers: int, num_heads: int, kind: str = "encoder") -> list[torch.Tensor]:
        """Weights of each of the first `num_layers` layers: [(B, H, Lq, Lk)] * num_layers."""
        encoder_layers = self.encoder_layers[:num_layers]
        if kind == "encoder":
            return stack_attention_weights(self.x, encoder_layers, num_heads,
                                           self.src_mask)["self_attn"]       # [(B, H, Ls, Ls)]
        memory = encoder(self.x, encoder_layers, num_heads, self.src_mask)    # (B, Ls, D)
        weights = stack_attention_weights(self.y, self.decoder_layers[:num_layers], num_heads,
                                          self.tgt_mask, memory=memory, memory_mask=self.src_mask)
        return weights["self_attn"] if kind == "decoder_self" else weights["cross_attn"]

    def blocked(self, kind: str, sample: int) -> torch.Tensor:
        """(Lq, Lk) bool, True where the mask hides the key from the query."""
        if kind == "encoder":
            mask = self.src_mask[sample, 0].expand(self.x.size(1), -1)       # (Ls, Ls)
        elif kind == "decoder_self":
            mask = self.tgt_mask[sample, 0]                                   # (Lt, Lt)
        else:
            mask = self.src_mask[sample, 0].expand(self.y.size(1), -1)       # (Lt, Ls)
        return ~mask

    def tokens(self, kind: str, sample: int) -> tuple[list[str], list[str]]:
        """(query tokens, key tokens) of one sample for one kind of attention. A decoder's
        queries are labelled by the token written there (`written_tokens`), as in notebook
        10; its self-attention keys by the token read there."""
        src, tgt = self.src_tokens[sample], self.tgt_tokens[sample]
        written = written_tokens(tgt)
        return {"encoder": (src, src), "decoder_self": (written, tgt), "decoder_cross": (written, src)}[kind]


def tile(maps: list[torch.Tensor], sample: int, blocked=None) -> np.ma.MaskedArray:
    """[(B, H, Lq, Lk)] per layer -> one 2-D image: a row of tiles per layer, a column per head.

    Tiles are separated by one row/column of NaN, which imshow leaves blank; `blocked`
    (Lq, Lk) bool marks the masked cells of every tile (drawn grey, not as a weight of 0).
    """
    layers = [m[sample].float().numpy() for m in maps]       # each (H, Lq, Lk)
    heads, lq, lk = layers[0].shape
    canvas = np.full((len(layers) * (lq + 1) - 1, heads * (lk + 1) - 1), np.nan)
    bad = np.zeros(canvas.shape, dtype=bool)
    for row, weights in enumerate(layers):
        for col in range(heads):
            top, left = row * (lq + 1), col * (lk + 1)
            canvas[top:top + lq, left:left + lk] = weights[col]
            if blocked is not None:
                bad[top:top + lq, left:left + lk] = blocked.numpy()
    return np.ma.masked_array(canvas, mask=bad)


def colours(canvas: np.ma.MaskedArray) -> np.ndarray:
    """The tiles (rows, cols) -> RGBA (rows, cols, 4): weights on the attention map's 0-1
    scale, masked cells grey, the NaN gaps between tiles transparent."""
    rgba = style.ATTENTION_CMAP(np.ma.masked_array(np.nan_to_num(canvas.data), mask=canvas.mask))
    rgba[np.isnan(canvas.data), 3] = 0.0
    return rgba


class StackPicture:
    """The tiled maps on an axes sized for them, with a pool of text labels moved for each setting.

    Tokens are plain texts, not tick labels: a redraw moves them (they change with every
    control) without a new layout. The canvas is as tall as the layers shown need (`fit`),
    and the axes box and the colour bar as tall as the map: one cached background (the
    frame, the colour bar) serves every setting with the same number of rows of cells.
    `stack` sets the room: its longest sequence and its tokens.
    """

    def __init__(self, fig, stack: StackAttention):
        self.fig = fig
        self.ax = fig.add_axes((AXES_X, 0.0, AXES_WIDTH, 1.0))
        # One RGBA image (`colours`): a second, masked image for the grey cells would double
        # the slowest step of a frame, resampling an image to the screen.
        self.image = self.ax.imshow(np.zeros((2, 2, 4)), interpolation="nearest", aspect="equal")
        self.ax.set_xticks([])
        self.ax.set_yticks([])
        # Square cells: both axes are tokens. A map narrower than the box (fewer heads) starts
        # at its left, after the query tokens: the queries' axis name then stays in the left
        # margin, clear of the title, and may run the canvas' height beside a one-layer map.
        self.ax.set_anchor("NW")
        # The axis names name a tile's axes, as on every attention map of the course; the
        # layers and heads are named beside and above the tiles, and counted in the title.
        self.col_name = fig.text(0, 0, style.KEY_LABEL, fontsize=style.LABEL_PT,
                                 color=style.IDEA_COLOURS["key"])
        self.row_name = fig.text(0, 0, style.QUERY_LABEL, fontsize=style.LABEL_PT,
                                 color=style.IDEA_COLOURS["query"], rotation=90)
        scale = ScalarMappable(Normalize(0.0, 1.0), style.ATTENTION_CMAP)
        self.bar = fig.colorbar(scale, cax=fig.add_axes((COLOURBAR_X, 0.0, COLOURBAR_WIDTH, 1.0)),
                                ticks=[0, 0.5, 1])
        # On two lines: about as long as the bar beside a one-layer map.
        self.bar.set_label(style.ATTENTION_CBAR_LABEL.replace(" (", "\n("), fontsize=style.LABEL_PT)
        self.bar.ax.tick_params(labelsize=style.TICK_PT)
        self.title = fig.text(0.5, 1.0, "", ha="center", va="top", fontsize=style.TITLE_PT)
        length = max(stack.x.size(1), stack.y.size(1))
        # A label for every row and column of the largest setting, and each layer's and head's name.
        text = dict(fontsize=style.TICK_PT, clip_on=False)
        self.labels = [self.ax.text(0, 0, "", **text)
                       for _ in range((MAX_LAYERS + max(HEAD_CHOICES)) * (length + 1))]
        self.moving = [self.image, self.title, *self.labels, self.row_name, self.col_name]
        self.length = length
        self.cell_in = AXES_WIDTH * fig.get_figwidth() / (max(HEAD_CHOICES) * (length + 1) - 1)
        self.bottom_in, self.min_height_in = self._room(stack)

    def _room(self, stack: StackAttention) -> tuple[float, float]:
        """(inches below a map, the canvas' least height). Below: the key tokens (the longest
        of the stack, turned), the keys' axis name under them, and a margin. The least height:
        the longest of the queries' axis names, turned, 4 px from either edge."""
        renderer = _renderer(self.fig)
        probe = self.labels[0]
        longest = 0.0
        for token in {token for rows in (*stack.src_tokens, *stack.tgt_tokens) for token in rows}:
            probe.set(text=token, rotation=90)
            longest = max(longest, probe.get_window_extent(renderer).height)
        probe.set(text="", rotation=0)
        name = self.col_name.get_window_extent(renderer).height
        row_names = []
        for query_name in (style.QUERY_LABEL, style.WRITTEN_QUERY_LABEL):
            self.row_name.set_text(query_name)
            row_names.append(self.row_name.get_window_extent(renderer).height)
        dpi = self.fig.dpi
        # Key tokens hang from 0.2 cell under the map (`draw`), the name 4 px under them
        # (`place_axis_names`), and 6 px to spare.
        return 0.2 * self.cell_in + (longest + 4 + name + 6) / dpi, (max(row_names) + 8) / dpi

    def fit(self, layers: int, rows: int) -> tuple[int, int]:
        """Size the canvas for `layers` layers of the stack's longest sequence, and the axes
        box and the colour bar for a map of `rows` rows of cells, under the title; returns the
        key of the background (the still parts: the colour bar and the axes' frame)."""
        height = max(TOP_IN + (layers * (self.length + 1) - 1) * self.cell_in + self.bottom_in,
                     self.min_height_in)
        if abs(self.fig.get_figheight() - height) * self.fig.dpi > 0.5:
            self.fig.set_size_inches(self.fig.get_figwidth(), height, forward=False)
        height = self.fig.get_figheight()
        box_height = rows * self.cell_in / height
        bottom = 1 - TOP_IN / height - box_height
        self.ax.set_position((AXES_X, bottom, AXES_WIDTH, box_height))
        self.bar.ax.set_position((COLOURBAR_X, bottom, COLOURBAR_WIDTH, box_height))
        self.title.set_y(1 - TITLE_TOP_IN / height)
        return layers, rows

    def draw(self, canvas: np.ma.MaskedArray, layers: int, heads: int, queries, keys,
             title: str, query_name: str = style.QUERY_LABEL) -> tuple[int, int]:
        """Show the tiles `canvas` (`tile`); returns the background's key (`fit`)."""
        rows, cols = canvas.shape
        background = self.fit(layers, rows)
        self.row_name.set_text(query_name)
        extent = (-0.5, cols - 0.5, rows - 0.5, -0.5)
        self.image.set_data(colours(canvas))
        self.image.set_extent(extent)
        self.ax.set_xlim(-0.5, cols - 0.5)
        self.ax.set_ylim(rows - 0.5, -0.5)
        self.title.set_text(title)
        lq, lk = len(queries), len(keys)
        places = []
        for layer in range(layers):                  # query tokens left of each layer's row
            top = layer * (lq + 1)
            places += [(-0.7, top + i, token, 0, "right", "center") for i, token in enumerate(queries)]
            places.append((cols - 0.3, top + (lq - 1) / 2, f"layer {layer + 1}", 270, "left", "center"))
        for head in range(heads):                    # key tokens under each head's column
            left = head * (lk + 1)
            places += [(left + j, rows - 0.3, token, 90, "center", "top") for j, token in enumerate(keys)]
            places.append((left + (lk - 1) / 2, -0.7, f"head {head}", 0, "center", "bottom"))
        for label, place in zip(self.labels, places):
            x, y, text, rotation, ha, va = place
            label.set(position=(x, y), text=text, rotation=rotation, ha=ha, va=va, visible=True)
        for label in self.labels[len(places):]:
            label.set_visible(False)
        query_labels = [label for label, place in zip(self.labels, places) if place[3] == 0
                        and place[4] == "right"]
        key_labels = [label for label, place in zip(self.labels, places) if place[3] == 90]
        place_axis_names(self.ax, query_labels, key_labels, self.row_name, self.col_name)
        return background


def _title(kind_label: str, sample_name: str, layers: int, heads: int, lq: int, lk: int) -> str:
    return (f"UNTRAINED: random weights, so no pattern here means anything yet\n{kind_label}, "
            f"'{sample_name}'\n{layers} layer(s) x {heads} head(s); each tile {lq} queries x {lk} keys")


def _setting_picture(stack, picture, layers, heads, kind_label, sample, maps) -> tuple[int, int]:
    kind = KINDS[kind_label]
    queries, keys = stack.tokens(kind, sample)
    canvas = tile(maps, sample, stack.blocked(kind, sample))
    return picture.draw(canvas, layers, heads, queries, keys,
                        _title(kind_label, stack.sample_names[sample], layers, heads, len(queries),
                               len(keys)),
                        style.QUERY_LABEL if kind == "encoder" else style.WRITTEN_QUERY_LABEL)


def plot_stack_attention(stack: StackAttention, num_layers: int = 2, num_heads: int = 4,
                         kind: str = "encoder self-attention", sample: int = 0):
    """A static figure of the tiled attention maps (for readers without widget JavaScript)."""
    fig, _ = style.new_figure(FIGSIZE[1], FIGSIZE[0])
    fig.set_layout_engine("none")          # StackPicture places the axes and the labels' room
    fig.delaxes(fig.axes[0])
    picture = StackPicture(fig, stack)
    _setting_picture(stack, picture, num_layers, num_heads, kind, sample,
                     stack.maps(num_layers, num_heads, KINDS[kind]))
    return style.for_projection(fig)


class StackAttentionExplorer(Explorer):
    """Layers, heads, which attention and which sentence -> the tiled attention maps.

    `update(layers=..., heads=..., kind=..., sample=...)` redraws (see `Explorer`);
    `image` is the imshow artist. Every setting's maps are computed when the explorer is
    built (27 small stack runs), so a click only moves artists. The frame is as tall as the
    layers shown; its background is drawn on the first visit of each map height and kept.
    """

    def __init__(self, stack: StackAttention, num_layers: int = 2, num_heads: int = 4,
                 kind: str = "encoder self-attention", sample: int = 0):
        import ipywidgets as widgets
        from matplotlib.figure import Figure

        self.stack = stack
        self.layers = widgets.IntSlider(value=num_layers, min=1,
                                        max=min(MAX_LAYERS, stack.max_layers), description="layers")
        self.heads = widgets.Dropdown(options=list(HEAD_CHOICES), value=num_heads,
                                      description="heads")
        self.kind = widgets.Dropdown(options=list(KINDS), value=kind, description="attention",
                                     layout=widgets.Layout(width="330px"))
        self.sample = widgets.Dropdown(options=[(n, i) for i, n in enumerate(stack.sample_names)],
                                       value=sample, description="sentence",
                                       layout=widgets.Layout(width="330px"))
        self.all_maps = {(n, h, k): stack.maps(n, h, k) for n in range(1, self.layers.max + 1)
                         for h in HEAD_CHOICES for k in KINDS.values()}
        # Outside pyplot: the inline backend never shows it. At the course's dpi: StackPicture
        # measures its labels' room on it.
        fig = Figure(figsize=FIGSIZE, dpi=style.DPI)
        self.view = StackPicture(fig, stack)
        self.image = self.view.image
        controls = [self.layers, self.heads, self.kind, self.sample]
        # The maps and labels move; the axes box and colour bar only with the map's height.
        self._build(fig, self.view.moving, controls,
                    [widgets.HBox(controls[:2]), widgets.HBox(controls[2:])])
        # Rasterise every label once now (each sentence's tokens, at the widest setting),
        # so that no click pays for drawing a text for the first time.
        for kind_label in KINDS:
            for s in range(len(stack.sample_names)):
                self.update(layers=self.layers.max, heads=max(HEAD_CHOICES), kind=kind_label, sample=s)
        self.update(layers=num_layers, heads=num_heads, kind=kind, sample=sample)

    def update(self, layers=None, heads=None, kind=None, sample=None) -> None:
        """Redraw for the given values (None keeps the control's current value)."""
        start = time.perf_counter()
        self._set_controls((self.layers, layers), (self.heads, heads), (self.kind, kind),
                           (self.sample, sample))
        n, h, kind_label, s = (self.layers.value, self.heads.value, self.kind.value,
                               self.sample.value)
        background = _setting_picture(self.stack, self.view, n, h, kind_label, s,
                                      self.all_maps[n, h, KINDS[kind_label]])
        self._show(start, background)


def stack_attention_widget(stack: StackAttention, **defaults) -> StackAttentionExplorer:
    """Build the explorer; display its `.widget` in the notebook."""
    return StackAttentionExplorer(stack, **defaults)
