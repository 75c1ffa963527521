"""Notebook 08: the attention maps of every layer of an encoder-decoder stack, tiled into one image.

`StackAttention` holds one batch, its tokens and enough layers' params; `maps(...)` runs the
stack and returns each layer's weights (from tfmlib's `stack_attention_weights`).
`plot_stack_attention` draws them for a static figure, `StackAttentionExplorer` lets the
learner change the number of layers, heads, the sentence and which attention to look at.
Both draw through `StackPicture`: one image of tiles (a row per layer, a column per head),
tokens on both axes, masked keys grey, on a canvas that fits what the setting draws.
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
FIGSIZE = (style.COLUMN_IN, 5.8)   # until `StackPicture.fit` sizes the canvas for what is shown
# The canvas around the map, in inches (`StackPicture.fit`): left of it, room for the query
# tokens and the queries' axis name; right of it, the layer names, then the colour bar, its
# ticks and its label. The widest setting (4 heads of the stack's longest sequence) fills the
# notebook's column; with 8 keys its tiles are of the classroom size (style.CLASSROOM_CELL_PX).
# Above the map, TOP_IN for the title and the head names; below it, room for the longest key
# token shown and the keys' axis name.
LEFT_IN = 1.30
BAR_GAP_IN = 0.42
BAR_IN = 0.15
RIGHT_IN = 0.69
TOP_IN = 0.85
TITLE_TOP_IN = 0.03
EDGE_PX = 6                # the least margin between the canvas' edge and a text


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
    control) without a new layout. The canvas fits what a setting draws (`fit`): as wide as its
    heads' tiles (or its title) need, as tall as its layers' tiles and its key tokens need, so
    no band of it is left empty. Each canvas size keys a cached background (the colour bar
    beside the map, the axes' frame). `stack` sets the size of a tile and the pool of labels.
    """

    def __init__(self, fig, stack: StackAttention):
        self.fig = fig
        self.ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))     # placed by `fit`
        # One RGBA image (`colours`): a second, masked image for the grey cells would double
        # the slowest step of a frame, resampling an image to the screen.
        self.image = self.ax.imshow(np.zeros((2, 2, 4)), interpolation="nearest", aspect="equal")
        self.ax.set_xticks([])
        self.ax.set_yticks([])
        # Square cells: both axes are tokens; `fit` gives the axes box the map's own size.
        self.ax.set_anchor("NW")
        # The axis names name a tile's axes, as on every attention map of the course; the
        # layers and heads are named beside and above the tiles, and counted in the title.
        self.col_name = fig.text(0, 0, style.KEY_LABEL, fontsize=style.LABEL_PT,
                                 color=style.IDEA_COLOURS["key"])
        self.row_name = fig.text(0, 0, style.QUERY_LABEL, fontsize=style.LABEL_PT,
                                 color=style.IDEA_COLOURS["query"], rotation=90)
        scale = ScalarMappable(Normalize(0.0, 1.0), style.ATTENTION_CMAP)
        self.bar = fig.colorbar(scale, cax=fig.add_axes((0.0, 0.0, 0.1, 1.0)), ticks=[0, 0.5, 1])
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
        self.cell_in = ((style.COLUMN_IN - LEFT_IN - BAR_GAP_IN - BAR_IN - RIGHT_IN)
                        / (max(HEAD_CHOICES) * (length + 1) - 1))
        self.turned_px, self.name_px, self.row_name_px = self._room(stack)

    def _room(self, stack: StackAttention) -> tuple[dict, float, dict]:
        """({token: its height turned, in px} for every token of the stack, the keys' axis
        name's height in px, {queries' axis name: its height turned, in px})."""
        renderer = _renderer(self.fig)
        probe = self.labels[0]
        turned = {}
        for token in {token for rows in (*stack.src_tokens, *stack.tgt_tokens) for token in rows}:
            probe.set(text=token, rotation=90)
            turned[token] = probe.get_window_extent(renderer).height
        probe.set(text="", rotation=0)
        row_names = {}
        for query_name in (style.QUERY_LABEL, style.WRITTEN_QUERY_LABEL):
            self.row_name.set_text(query_name)
            row_names[query_name] = self.row_name.get_window_extent(renderer).height
        return turned, self.col_name.get_window_extent(renderer).height, row_names

    def min_height_in(self, query_name: str) -> float:
        """The canvas' least height: room under the title for the queries' axis name
        `query_name`, turned, from the map's top down (`draw`)."""
        return TOP_IN + (self.row_name_px[query_name] + EDGE_PX) / self.fig.dpi

    def fit(self, rows: int, cols: int, keys, title_px: float, query_name: str) -> tuple[int, int, int, int]:
        """Size the canvas for a map of `rows` x `cols` cells with the tokens `keys` under its
        columns, a title `title_px` wide and the queries' axis name `query_name`, and place the
        map and the colour bar on it; returns the key of the background (the still parts: the
        colour bar and the axes' frame)."""
        dpi = self.fig.dpi
        map_width, map_height = cols * self.cell_in, rows * self.cell_in
        # Key tokens hang from 0.2 cell under the map (`draw`), the keys' name 4 px under them
        # (`place_axis_names`), and the canvas' edge EDGE_PX below that.
        below = 0.2 * self.cell_in + (max(self.turned_px[k] for k in keys) + 4 + self.name_px + EDGE_PX) / dpi
        width = max(LEFT_IN + map_width + BAR_GAP_IN + BAR_IN + RIGHT_IN, (title_px + 2 * EDGE_PX) / dpi)
        height = max(TOP_IN + map_height + below, self.min_height_in(query_name))
        # Whole pixels: the frame is an image of whole pixels, and every fraction below is of it.
        width, height = np.ceil(width * dpi) / dpi, np.ceil(height * dpi) / dpi
        if (self.fig.get_figwidth(), self.fig.get_figheight()) != (width, height):
            self.fig.set_size_inches(width, height, forward=False)
        bottom = 1 - (TOP_IN + map_height) / height
        self.ax.set_position((LEFT_IN / width, bottom, map_width / width, map_height / height))
        self.bar.ax.set_position(((LEFT_IN + map_width + BAR_GAP_IN) / width, bottom, BAR_IN / width,
                                  map_height / height))
        self.title.set_y(1 - TITLE_TOP_IN / height)
        return round(width * dpi), round(height * dpi), rows, cols

    def draw(self, canvas: np.ma.MaskedArray, layers: int, heads: int, queries, keys,
             title: str, query_name: str = style.QUERY_LABEL) -> tuple[int, int, int, int]:
        """Show the tiles `canvas` (`tile`); returns the background's key (`fit`)."""
        rows, cols = canvas.shape
        self.title.set_text(title)
        self.row_name.set_text(query_name)
        background = self.fit(rows, cols, keys, self.title.get_window_extent(_renderer(self.fig)).width,
                              query_name)
        extent = (-0.5, cols - 0.5, rows - 0.5, -0.5)
        self.image.set_data(colours(canvas))
        self.image.set_extent(extent)
        self.ax.set_xlim(-0.5, cols - 0.5)
        self.ax.set_ylim(rows - 0.5, -0.5)
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
        # The title may span the canvas over a narrow map: the queries' name stays under it.
        place_axis_names(self.ax, query_labels, key_labels, self.row_name, self.col_name,
                         below_top=True)
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
    built (27 small stack runs), so a click only moves artists. The frame fits the setting
    shown (`StackPicture.fit`); its background is drawn on the first visit of each frame size
    and kept.
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
        # measures its labels' room on it. Projected in class like the still.
        fig = style.for_projection(Figure(figsize=FIGSIZE, dpi=style.DPI))
        self.view = StackPicture(fig, stack)
        self.image = self.view.image
        controls = [self.layers, self.heads, self.kind, self.sample]
        # The maps and labels move; the axes box and colour bar only with the frame's size.
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
