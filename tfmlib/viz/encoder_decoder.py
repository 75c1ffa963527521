"""Notebook 08: the attention maps of every layer of an encoder-decoder stack, tiled into one image.

`StackAttention` holds one batch and enough layers' params; `maps(...)` runs the
stack and returns each layer's weights (from tfmlib's `stack_attention_weights`).
`plot_stack_attention` draws them for a static figure, `stack_attention_widget`
lets the learner change the number of layers, heads, the sentence and which
attention to look at.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from ..encoder_decoder import encoder, stack_attention_weights
from .common import Explorer

KINDS = {"encoder self-attention": "encoder",
         "decoder self-attention (causal)": "decoder_self",
         "decoder cross-attention": "decoder_cross"}


@dataclass
class StackAttention:
    """One batch through a stack: source x (B, Ls, D) with its padding mask (B, 1, 1, Ls),
    target y (B, Lt, D) with its mask (B, 1, Lt, Lt), and params for up to len(...) layers."""
    x: torch.Tensor
    src_mask: torch.Tensor
    y: torch.Tensor
    tgt_mask: torch.Tensor
    encoder_layers: list
    decoder_layers: list
    sample_names: list

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


def tile(maps: list[torch.Tensor], sample: int) -> np.ndarray:
    """[(B, H, Lq, Lk)] per layer -> one 2-D image: a row of tiles per layer, a column per head.

    Tiles are separated by one row/column of NaN, which imshow leaves blank.
    """
    layers = [m[sample].float().numpy() for m in maps]       # each (H, Lq, Lk)
    heads, lq, lk = layers[0].shape
    canvas = np.full((len(layers) * (lq + 1) - 1, heads * (lk + 1) - 1), np.nan)
    for row, weights in enumerate(layers):
        for col in range(heads):
            top, left = row * (lq + 1), col * (lk + 1)
            canvas[top:top + lq, left:left + lk] = weights[col]
    return canvas


def _style(ax, image, canvas, num_layers, num_heads, kind_label, sample_name):
    rows, cols = canvas.shape
    lq = (rows + 1) // num_layers - 1
    lk = (cols + 1) // num_heads - 1
    image.set_data(canvas)
    image.set_extent((-0.5, cols - 0.5, rows - 0.5, -0.5))
    ax.set_xlim(-0.5, cols - 0.5)
    ax.set_ylim(rows - 0.5, -0.5)
    ax.set_xticks([c * (lk + 1) + (lk - 1) / 2 for c in range(num_heads)],
                  labels=[str(c) for c in range(num_heads)])  # heads from 0, as in 06 and 10
    ax.set_yticks([r * (lq + 1) + (lq - 1) / 2 for r in range(num_layers)],
                  labels=[str(r + 1) for r in range(num_layers)])
    ax.set_title(f"{kind_label}, '{sample_name}'\n"
                 f"{num_layers} layer(s) x {num_heads} head(s); each tile (Lq={lq}) x (Lk={lk})",
                 fontsize=10)


def _new_axes(fig, canvas):
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(canvas, cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_xlabel("head  (inside a tile: keys, left to right)")
    ax.set_ylabel("layer  (inside a tile: queries, top to bottom)")
    bar = fig.colorbar(image, ax=ax, fraction=0.03, pad=0.02)
    bar.set_label("attention weight")
    return ax, image


def plot_stack_attention(stack: StackAttention, num_layers: int = 2, num_heads: int = 4,
                         kind: str = "encoder self-attention", sample: int = 0):
    """A static figure of the tiled attention maps (for readers without widget JavaScript)."""
    canvas = tile(stack.maps(num_layers, num_heads, KINDS[kind]), sample)
    fig = plt.figure(figsize=(9, 4.2))
    ax, image = _new_axes(fig, canvas)
    _style(ax, image, canvas, num_layers, num_heads, kind, stack.sample_names[sample])
    return fig


class StackAttentionExplorer(Explorer):
    """Layers, heads, which attention and which sentence -> the tiled attention maps.

    `update(layers=..., heads=..., kind=..., sample=...)` redraws (see `Explorer`);
    `image` is the imshow artist.
    """

    def __init__(self, stack: StackAttention, num_layers: int = 2, num_heads: int = 4,
                 kind: str = "encoder self-attention", sample: int = 0):
        import ipywidgets as widgets

        self.stack = stack
        d_model = stack.x.size(-1)
        self.layers = widgets.IntSlider(value=num_layers, min=1, max=stack.max_layers,
                                        description="layers")
        self.heads = widgets.Dropdown(options=[h for h in range(1, d_model + 1) if d_model % h == 0],
                                      value=num_heads, description="heads")
        self.kind = widgets.Dropdown(options=list(KINDS), value=kind, description="attention",
                                     layout=widgets.Layout(width="330px"))
        self.sample = widgets.Dropdown(options=[(n, i) for i, n in enumerate(stack.sample_names)],
                                       value=sample, description="sentence",
                                       layout=widgets.Layout(width="330px"))
        fig = Figure(figsize=(9, 4.2))  # outside pyplot: the inline backend never shows it
        self.ax, self.image = _new_axes(fig, tile(stack.maps(num_layers, num_heads, KINDS[kind]), sample))
        controls = [self.layers, self.heads, self.kind, self.sample]
        # Ticks and title depend on every control: one background per setting, the maps move.
        self._build(fig, [self.image], controls,
                    [widgets.HBox(controls[:2]), widgets.HBox(controls[2:])])
        self.update()

    def update(self, layers=None, heads=None, kind=None, sample=None) -> None:
        """Redraw for the given values (None keeps the control's current value)."""
        start = time.perf_counter()
        self._set_controls((self.layers, layers), (self.heads, heads), (self.kind, kind),
                           (self.sample, sample))
        setting = (self.layers.value, self.heads.value, self.kind.value, self.sample.value)
        canvas = tile(self.stack.maps(setting[0], setting[1], KINDS[setting[2]]), setting[3])
        _style(self.ax, self.image, canvas, *setting[:3], self.stack.sample_names[setting[3]])
        self._show(start, background=setting)


def stack_attention_widget(stack: StackAttention, **defaults) -> StackAttentionExplorer:
    """Build the explorer; display its `.widget` in the notebook."""
    return StackAttentionExplorer(stack, **defaults)
