"""Notebook 08: the attention maps of every layer of an encoder-decoder stack, tiled into one image.

`StackAttention` holds one batch, its tokens and enough layers' params; `maps(...)` runs the
stack and returns each layer's weights (from tfmlib's `stack_attention_weights`).
`plot_stack_attention` draws them for a static figure, `StackAttentionExplorer` lets the
learner change the number of layers, heads, the sentence and which attention to look at.
Both draw through `StackPicture`: one image of tiles (a row per layer, a column per head),
tokens on both axes, masked keys grey.
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
from .common import Explorer, place_axis_names
from .textcache import cache_text

KINDS = {"encoder self-attention": "encoder",
         "decoder self-attention (causal)": "decoder_self",
         "decoder cross-attention": "decoder_cross"}
HEAD_CHOICES = (1, 2, 4)   # 4 heads of 8 keys still leave room for a token under every column
MAX_LAYERS = 3             # 3 layers of 8 queries still leave room for a token beside every row
FIGSIZE = (style.COLUMN_IN, 5.8)
# The axes' box in figure fractions, fixed for every setting: room on the left for the query
# tokens, below for the key tokens, above for the title and head names, right for the
# layer names and the colour bar. The default setting (2 layers x 4 heads, 17 rows x 35 columns
# of cells) fills its width with cells of the classroom size (style.CLASSROOM_CELL_PX); 3 layers
# of 8 rows fill its height with rows a token label still fits beside.
AXES_BOX = (0.155, 0.245, 0.695, 0.608)
COLOURBAR_BOX = (0.90, 0.245, 0.018, 0.608)


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
    """The tiled maps on a fixed axes, with a pool of text labels moved for each setting.

    Tokens are plain texts, not tick labels: a redraw moves them (they change with every
    control) without a new layout, and the axes box never moves, so one cached background
    (the frame, the axis names, the colour bar) serves every setting.
    """

    def __init__(self, fig):
        self.ax = fig.add_axes(AXES_BOX)
        # One RGBA image (`colours`): a second, masked image for the grey cells would double
        # the slowest step of a frame, resampling an image to the screen.
        self.image = self.ax.imshow(np.zeros((2, 2, 4)), interpolation="nearest", aspect="equal")
        self.ax.set_xticks([])
        self.ax.set_yticks([])
        # Square cells: both axes are tokens. The box shrinks to fit the map (anchored at
        # the top, under the title), so the axis names move with it, next to the tokens.
        self.ax.set_anchor("N")
        self.col_name = fig.text(0, 0, "columns: heads; inside a tile, " + style.KEY_LABEL,
                                 fontsize=style.LABEL_PT, color=style.IDEA_COLOURS["key"])
        self.row_name = fig.text(0, 0, "rows: layers; inside a tile, " + style.QUERY_LABEL,
                                 fontsize=style.LABEL_PT, color=style.IDEA_COLOURS["query"])
        scale = ScalarMappable(Normalize(0.0, 1.0), style.ATTENTION_CMAP)
        bar = fig.colorbar(scale, cax=fig.add_axes(COLOURBAR_BOX), ticks=[0, 0.5, 1])
        bar.set_label(style.ATTENTION_CBAR_LABEL, fontsize=style.LABEL_PT)
        bar.ax.tick_params(labelsize=style.TICK_PT)
        self.title = fig.text(0.5, 0.995, "", ha="center", va="top", fontsize=style.TITLE_PT)
        longest = MAX_LAYERS * 8 + max(HEAD_CHOICES) * 8     # a label for every row and column
        text = dict(fontsize=style.TICK_PT, clip_on=False)
        self.labels = [self.ax.text(0, 0, "", **text) for _ in range(longest + 16)]
        self.moving = [self.image, self.title, *self.labels, self.row_name, self.col_name]

    def draw(self, canvas: np.ma.MaskedArray, layers: int, heads: int, queries, keys,
             title: str, query_name: str = style.QUERY_LABEL) -> None:
        rows, cols = canvas.shape
        self.row_name.set_text("rows: layers; inside a tile, " + query_name)
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


def _title(kind_label: str, sample_name: str, layers: int, heads: int, lq: int, lk: int) -> str:
    return (f"UNTRAINED: random weights, so no pattern here means anything yet\n{kind_label}, "
            f"'{sample_name}'\n{layers} layer(s) x {heads} head(s); each tile {lq} queries x {lk} keys")


def _setting_picture(stack, picture, layers, heads, kind_label, sample, maps) -> None:
    kind = KINDS[kind_label]
    queries, keys = stack.tokens(kind, sample)
    canvas = tile(maps, sample, stack.blocked(kind, sample))
    picture.draw(canvas, layers, heads, queries, keys,
                 _title(kind_label, stack.sample_names[sample], layers, heads, len(queries), len(keys)),
                 style.QUERY_LABEL if kind == "encoder" else style.WRITTEN_QUERY_LABEL)


def plot_stack_attention(stack: StackAttention, num_layers: int = 2, num_heads: int = 4,
                         kind: str = "encoder self-attention", sample: int = 0):
    """A static figure of the tiled attention maps (for readers without widget JavaScript)."""
    fig, _ = style.new_figure(FIGSIZE[1], FIGSIZE[0])
    fig.set_layout_engine("none")          # the labels' room is fixed in AXES_BOX
    fig.delaxes(fig.axes[0])
    picture = StackPicture(fig)
    _setting_picture(stack, picture, num_layers, num_heads, kind, sample,
                     stack.maps(num_layers, num_heads, KINDS[kind]))
    return style.for_projection(fig)


class StackAttentionExplorer(Explorer):
    """Layers, heads, which attention and which sentence -> the tiled attention maps.

    `update(layers=..., heads=..., kind=..., sample=...)` redraws (see `Explorer`);
    `image` is the imshow artist. Every setting's maps are computed when the explorer is
    built (27 small stack runs), so a click only moves artists.
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
        fig = Figure(figsize=FIGSIZE)  # outside pyplot: the inline backend never shows it
        self.view = StackPicture(fig)
        self.image = self.view.image
        controls = [self.layers, self.heads, self.kind, self.sample]
        # The axes never move: one background for all settings; the maps and labels move.
        self._build(fig, self.view.moving, controls,
                    [widgets.HBox(controls[:2]), widgets.HBox(controls[2:])])
        cache_text(self.frames.canvas.get_renderer())
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
        _setting_picture(self.stack, self.view, n, h, kind_label, s,
                         self.all_maps[n, h, KINDS[kind_label]])
        self._show(start, background="all settings")


def stack_attention_widget(stack: StackAttention, **defaults) -> StackAttentionExplorer:
    """Build the explorer; display its `.widget` in the notebook."""
    return StackAttentionExplorer(stack, **defaults)
