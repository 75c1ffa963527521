"""Concept diagrams: the Transformer's ideas drawn, not only its data.

Each function returns a figure drawn in code in the course style, with the tensor names and
shapes of the running example, so that a diagram and the code beside it agree:

* `course_map(highlight)`: the course's data flow, from text to ids to vectors, through the masks,
  attention, heads, sublayers and layers, to the loss and Adam; one step highlighted (each
  notebook opens with it, its own step highlighted);
* `encoder_decoder_layers()`: one encoder layer and one decoder layer (08), Post-LN;
* `encoder_decoder_stacks(num_layers)`: the stacks, the encoder's memory going to every decoder layer;
* `ln_placement()`: Post-LN and Pre-LN side by side (07);
* `architectures()`: encoder-only, decoder-only and encoder-decoder (b1);
* `head_split()`: splitting `(B, L, D)` into heads and merging back, with the classic wrong
  reshape beside it (06);
* `shift_right()`: teacher forcing, the decoder input against the labels (10);
* `kv_cache()`: what a KV cache keeps and what one new token computes (b2);
* `rotation_clock()`: the clock hand of a sinusoidal `(sin, cos)` pair, and RoPE (03).

The running example (notebooks 02-09): three sentences, `B = 3`, `L = 8` tokens with `<bos>`,
`<eos>` and padding, `D = 16`, `H = 4` heads of `d_k = 4`, `d_ff = 64`; the targets of 08 are
`Lt = 7` long. Box diagrams are drawn on one axes whose unit is an inch of the figure (at
`DPI`, 100 px), so that a box's size in code is its size on screen; the figure lint checks that
every text fits its box (`lint._text_outside_its_box`).
"""
from __future__ import annotations

import math

import numpy as np
from matplotlib.patches import FancyBboxPatch, Rectangle

from . import style
from .style import (COLUMN_IN, GUIDE_COLOUR, HIGHLIGHT_COLOUR, HIGHLIGHT_FILL, IDEA_COLOURS,
                    LABEL_PT, TICK_PT, TITLE_PT)

#: The running example's sizes (notebooks 02-09).
B, L, D, H, D_FF, LT = 3, 8, 16, 4, 64, 7
D_K = D // H

INK = "#222222"            #: text and edges of the boxes
FADED = "#8a8a8a"          #: edges of the steps a notebook is not about
BOX_FILL = "#ffffff"
NORM_FILL = "#f2f2f2"      #: LayerNorm and add boxes: a light grey, no idea colour
ATTENTION_FILL = "#e3e3e3"  #: attention sublayers, a shade darker

#: The course's steps in data-flow order: (key, title, what flows out, the notebooks it names).
COURSE_STEPS = (
    ("02", "02 · text → ids", f"ids ({B}, {L})"),
    ("03", "03 · embeddings", f"x ({B}, {L}, {D})"),
    ("04", "04 · masks", f"mask ({B}, 1, 1, {L})"),
    ("05", "05 · attention", f"weights ({B}, {L}, {L})"),
    ("06", "06 · multi-head", f"weights ({B}, {H}, {L}, {L})"),
    ("07", "07 · sublayers", f"out ({B}, {L}, {D})"),
    ("08", "08 · layers, stacks", f"out ({B}, {LT}, {D})"),
    ("10", "10 · logits → loss", "logits (B, Lt, V) → 1"),
    ("09", "09 · grads → Adam", "new weights"),
)
#: What each notebook's map highlights, and the title that says where the learner is.
COURSE_HIGHLIGHTS = {
    "01": ((), "01 · shapes: every arrow below carries a tensor of a shape"),
    "02": (("02",), "You are at 02: sentences become a (B, L) batch of ids"),
    "03": (("03",), "You are at 03: ids become vectors, with their positions"),
    "04": (("04",), "You are at 04: masks say which keys a query may see"),
    "05": (("05",), "You are at 05: scaled dot-product attention"),
    "06": (("06",), "You are at 06: the same attention in H heads at once"),
    "07": (("07",), "You are at 07: the sublayers around attention"),
    "08": (("08",), "You are at 08: layers, stacked into an encoder and a decoder"),
    "09": (("09",), "You are at 09: Adam turns the gradients into new weights"),
    "10": (("08", "10", "09"), "You are at 10: the whole loop, trained end to end"),
    "b1": (("08", "10"), "b1: the decoder alone, trained on the next token"),
    "b2": (("05", "08"), "b2: the decoder writes, its keys and values cached"),
}


# ---- drawing on an inch grid ------------------------------------------------------------------

def _canvas(height: float, width: float = COLUMN_IN):
    """A figure of `width` x `height` inches whose one axes fills it, 1 data unit = 1 inch."""
    fig = style.figure(height, width)
    fig.set_layout_engine("none")          # the axes fills the canvas; every text is placed
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_axis_off()
    return fig, ax


def _box(ax, x, y, w, h, text, *, fill=BOX_FILL, edge=INK, weight="normal", size=TICK_PT,
         colour=INK, linewidth=1.2, linestyle="-"):
    """A rounded box centred at (x, y), `w` x `h` inches, with `text` in its middle."""
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0,rounding_size=0.06",
                                facecolor=fill, edgecolor=edge, linewidth=linewidth,
                                linestyle=linestyle, zorder=2))
    if text:
        ax.text(x, y, text, ha="center", va="center", fontsize=size, color=colour,
                fontweight=weight, zorder=3, linespacing=1.3)


def _arrow(ax, start, end, *, colour=INK, style_="-|>", linewidth=1.2, linestyle="-", bend=0.0):
    """An arrow from `start` to `end` (inches); `bend` curves it (matplotlib's arc3 rad)."""
    ax.annotate("", xy=end, xytext=start, zorder=1,
                arrowprops={"arrowstyle": style_, "color": colour, "linewidth": linewidth,
                            "linestyle": linestyle, "shrinkA": 0, "shrinkB": 0,
                            "mutation_scale": 12, "connectionstyle": f"arc3,rad={bend}"})


def _line(ax, xs, ys, *, colour=INK, linewidth=1.2, linestyle="-"):
    ax.plot(xs, ys, color=colour, linewidth=linewidth, linestyle=linestyle, zorder=1,
            solid_capstyle="butt")


def _note(ax, x, y, text, *, ha="center", size=TICK_PT, colour=INK, weight="normal", style_="normal"):
    ax.text(x, y, text, ha=ha, va="center", fontsize=size, color=colour, fontweight=weight,
            fontstyle=style_, zorder=3, linespacing=1.3)


def _heading(ax, text, y=None):
    """The figure's title, inside the canvas (a widget's frame would clip one above it)."""
    _, top = ax.get_ylim()
    _note(ax, COLUMN_IN / 2 if ax.get_xlim()[1] >= COLUMN_IN else ax.get_xlim()[1] / 2,
          top - 0.22 if y is None else y, text, size=TITLE_PT)


# ---- the course's map -------------------------------------------------------------------------

def course_map(highlight: str | None = None):
    """The course's data flow in one picture, the step of notebook `highlight` marked.

    highlight: a notebook ("01".."10", "b1", "b2") or None (nothing marked). "01" marks every
    shape, its subject; the others mark their own step in `HIGHLIGHT_COLOUR`.
    """
    if highlight is not None and highlight not in COURSE_HIGHLIGHTS:
        raise ValueError(f"highlight: expected None or a notebook, one of {list(COURSE_HIGHLIGHTS)}, "
                         f"got {highlight!r}")
    marked, heading = COURSE_HIGHLIGHTS.get(highlight, ((), "The course's data flow"))
    fig, ax = _canvas(2.75)
    _heading(ax, heading)
    w, h, gap = 1.52, 0.62, 0.14
    xs = [0.12 + w / 2 + i * (w + gap) for i in range(5)]
    top, bottom = 1.88, 0.72
    places = [(xs[i], top) for i in range(5)] + [(xs[4 - i], bottom) for i in range(4)]
    for (key, name, shape), (x, y) in zip(COURSE_STEPS, places):
        on = key in marked
        shape_on = highlight == "01"
        fill = HIGHLIGHT_FILL if on or shape_on else BOX_FILL
        edge = HIGHLIGHT_COLOUR if on else (INK if highlight in (None, "01") else FADED)
        ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0,rounding_size=0.06",
                                    facecolor=fill, edgecolor=edge, linewidth=2.6 if on else 1.0, zorder=2))
        _note(ax, x, y + 0.13, name, weight="bold" if on else "normal",
              colour=INK if on or highlight in (None, "01") else "#555555")
        _note(ax, x, y - 0.14, shape, weight="bold" if shape_on else "normal",
              colour=INK)
    for (x0, y0), (x1, y1) in zip(places[:4], places[1:5]):
        _arrow(ax, (x0 + w / 2, y0), (x1 - w / 2, y1))
    _arrow(ax, (xs[4], top - h / 2), (xs[4], bottom + h / 2))          # 06 -> 07, down
    for (x0, y0), (x1, y1) in zip(places[5:8], places[6:9]):
        _arrow(ax, (x0 - w / 2, y0), (x1 + w / 2, y1))
    _note(ax, xs[0] - w / 2, bottom - h / 2 - 0.2, "then the next step, with the new weights", ha="left",
          colour="#555555")
    return fig


# ---- layers and stacks (08) -------------------------------------------------------------------

def _sublayer(ax, x, y_in, y_box, y_norm, text, *, w, h, fill, residual_x):
    """A Post-LN sublayer: `text`'s box at y_box, then "add & LayerNorm" at y_norm; the residual
    leaves the main line at y_in and joins at the add, drawn left of the boxes at residual_x."""
    _box(ax, x, y_box, w, h, text, fill=fill)
    _box(ax, x, y_norm, w, 0.34, "add & LayerNorm", fill=NORM_FILL)
    _arrow(ax, (x, y_in), (x, y_box - h / 2))
    _arrow(ax, (x, y_box + h / 2), (x, y_norm - 0.17))
    _line(ax, [x, residual_x, residual_x], [y_in + 0.08, y_in + 0.08, y_norm])
    _arrow(ax, (residual_x, y_norm), (x - w / 2, y_norm))


def encoder_decoder_layers():
    """One encoder layer and one decoder layer of notebook 08, Post-LN, with the running
    example's shapes: the encoder's output, the memory, feeds the decoder's cross-attention."""
    fig, ax = _canvas(6.3)
    _heading(ax, "One encoder layer and one decoder layer (Post-LN, as in 08)")
    w, h = 2.9, 0.52
    ex, dx = 2.05, 6.05
    # encoder, bottom to top
    _note(ax, ex, 0.25, f"x ({B}, {L}, {D}): the source", weight="bold")
    _sublayer(ax, ex, 0.42, 1.05, 1.72, f"self-attention, {H} heads\nmask: padding ({B}, 1, 1, {L})",
              w=w, h=h, fill=ATTENTION_FILL, residual_x=ex - w / 2 - 0.25)
    _sublayer(ax, ex, 1.89, 2.5, 3.12, f"FFN {D} → {D_FF} → {D}, each token alone",
              w=w, h=0.4, fill=BOX_FILL, residual_x=ex - w / 2 - 0.25)
    _arrow(ax, (ex, 3.29), (ex, 3.78))
    _box(ax, ex, 4.0, w, 0.44, f"memory ({B}, {L}, {D}) → K, V", fill=BOX_FILL, weight="bold")
    _note(ax, ex + 0.1, 3.55, "× N", colour="#555555", ha="left")
    # decoder, bottom to top
    _note(ax, dx, 0.25, f"y ({B}, {LT}, {D}): the target, shifted right", weight="bold")
    _sublayer(ax, dx, 0.42, 1.05, 1.72,
              f"masked self-attention\nmask: causal & padding ({B}, 1, {LT}, {LT})",
              w=w, h=h, fill=ATTENTION_FILL, residual_x=dx - w / 2 - 0.25)
    _sublayer(ax, dx, 1.89, 2.58, 3.25, f"cross-attention ({B}, {H}, {LT}, {L}):\nqueries from y, keys and\nvalues from the memory",
              w=w, h=0.68, fill=ATTENTION_FILL, residual_x=dx - w / 2 - 0.25)
    _sublayer(ax, dx, 3.42, 3.98, 4.58, f"FFN {D} → {D_FF} → {D}, each token alone",
              w=w, h=0.4, fill=BOX_FILL, residual_x=dx - w / 2 - 0.25)
    _arrow(ax, (dx, 4.75), (dx, 5.28))
    _box(ax, dx, 5.5, w, 0.44, f"out ({B}, {LT}, {D}) → logits", fill=BOX_FILL, weight="bold")
    _note(ax, dx + 0.1, 5.0, "× N", colour="#555555", ha="left")
    # the memory goes to the cross-attention (its keys and values)
    _arrow(ax, (ex + w / 2, 4.0), (dx - w / 2, 2.7), bend=0.15, linewidth=2.0)
    return fig


def encoder_decoder_stacks(num_layers: int = 2):
    """The stacks of notebook 08: each layer reads the one before it, and the encoder's last
    output, the memory, goes to the cross-attention of *every* decoder layer."""
    if not isinstance(num_layers, int) or not 1 <= num_layers <= 4:
        raise ValueError(f"num_layers: expected an int from 1 to 4 (the diagram's room), got {num_layers!r}")
    step = 0.85
    height = 1.75 + step * num_layers
    fig, ax = _canvas(height)
    _heading(ax, f"The stacks: the memory goes to every decoder layer (N = {num_layers})")
    w, h = 2.6, 0.5
    ex, dx = 1.9, 6.2
    _note(ax, ex, 0.25, f"x ({B}, {L}, {D})", weight="bold")
    _note(ax, dx, 0.25, f"y ({B}, {LT}, {D})", weight="bold")
    y_prev = 0.4
    ys = [0.95 + i * step for i in range(num_layers)]
    for i, y in enumerate(ys):
        _arrow(ax, (ex, y_prev), (ex, y - h / 2))
        _arrow(ax, (dx, y_prev), (dx, y - h / 2))
        _box(ax, ex, y, w, h, f"encoder layer {i + 1}", fill=BOX_FILL)
        _box(ax, dx, y, w, h, f"decoder layer {i + 1}\n(self-attn, cross-attn, FFN)", fill=BOX_FILL)
        y_prev = y + h / 2
    memory_y = ys[-1] + step
    _arrow(ax, (ex, y_prev), (ex, memory_y - 0.2))
    _box(ax, ex, memory_y, w, 0.4, f"memory ({B}, {L}, {D})", weight="bold")
    _arrow(ax, (dx, y_prev), (dx, memory_y - 0.2))
    _box(ax, dx, memory_y, w, 0.4, f"({B}, {LT}, {D}) → logits", weight="bold")
    rail = 4.05
    _line(ax, [ex + w / 2, rail, rail], [memory_y, memory_y, ys[0]], linewidth=2.0)
    for y in ys:
        _arrow(ax, (rail, y), (dx - w / 2, y), linewidth=2.0)
    _note(ax, rail - 0.08, (memory_y + ys[-1]) / 2 + 0.05, "memory: K, V\nof every\ncross-attention",
          ha="right", size=TICK_PT)
    return fig


# ---- Post-LN and Pre-LN (07) ------------------------------------------------------------------

def ln_placement():
    """Post-LN and Pre-LN side by side (07): where LayerNorm sits against the residual add.
    The residual stream, the path that skips the sublayer, is drawn thick."""
    fig, ax = _canvas(4.85)
    _heading(ax, "Where LayerNorm goes: Post-LN (2017 paper, 08) and Pre-LN (10, b1)")
    w, h, r = 2.3, 0.42, 0.17
    for x, name, steps, formula, note in (
            (2.1, "Post-LN", ("sublayer", "+", "LayerNorm"), "out = LayerNorm(x + sublayer(x))",
             "the stream itself is normalised\nafter every sublayer"),
            (6.3, "Pre-LN", ("LayerNorm", "sublayer", "+"), "out = x + sublayer(LayerNorm(x))",
             "the stream passes untouched;\none final LayerNorm at the end")):
        _note(ax, x, 4.25, name, weight="bold", size=LABEL_PT)
        _note(ax, x, 1.05, f"x ({B}, {L}, {D})", weight="bold")
        _note(ax, x, 0.72, formula)
        _note(ax, x, 0.3, note, colour="#555555")
        y_prev = 1.2
        for step, y in zip(steps, (1.7, 2.45, 3.2)):
            if step == "+":                    # the residual add: a circle with a plus
                ax.add_patch(FancyBboxPatch((x - r, y - r), 2 * r, 2 * r, boxstyle="circle,pad=0",
                                            facecolor=BOX_FILL, edgecolor=INK, linewidth=1.2, zorder=2))
                _note(ax, x, y, "+", size=LABEL_PT, weight="bold")
                _arrow(ax, (x, y_prev), (x, y - r))
                y_prev, add_y = y + r, y
            else:
                _box(ax, x, y, w, h, step, fill=NORM_FILL if step == "LayerNorm" else ATTENTION_FILL)
                _arrow(ax, (x, y_prev), (x, y - h / 2))
                y_prev = y + h / 2
        _arrow(ax, (x, y_prev), (x, 3.75))
        _note(ax, x, 3.9, f"out ({B}, {L}, {D})")
        side = x + w / 2 + 0.3
        _line(ax, [x, side, side], [1.3, 1.3, add_y], linewidth=2.6)          # the residual stream
        _arrow(ax, (side, add_y), (x + r, add_y), linewidth=2.6)
        ax.text(side + 0.13, (1.3 + add_y) / 2, "residual", rotation=90, ha="center", va="center",
                fontsize=TICK_PT, color=INK)
    return fig


# ---- three families (b1) ----------------------------------------------------------------------

def _mask_grid(ax, x, y, allowed, cell=0.13, title_text=""):
    """A small bool mask, True (may attend) in the mask's green, centred at (x, y)."""
    rows, cols = allowed.shape
    x0, y0 = x - cols * cell / 2, y + rows * cell / 2
    for i in range(rows):
        for j in range(cols):
            ax.add_patch(Rectangle((x0 + j * cell, y0 - (i + 1) * cell), cell, cell,
                                   facecolor=style.MASK_CMAP(1) if allowed[i, j] else IDEA_COLOURS["masked"],
                                   edgecolor="white", linewidth=0.6, zorder=2))
    if title_text:
        _note(ax, x, y - rows * cell / 2 - 0.16, title_text)


def architectures():
    """Encoder-only (BERT), decoder-only (GPT) and encoder-decoder (the 2017 paper, 10), each
    with the mask of its self-attention: who may look at whom (green: may attend)."""
    fig, ax = _canvas(4.2)
    _heading(ax, "Three shapes of Transformer (green: may attend, grey: blocked)")
    n = 5
    full, causal = np.ones((n, n), bool), np.tril(np.ones((n, n), bool))
    w = 1.9
    # encoder-only
    x = 1.2
    _note(ax, x, 3.6, "encoder-only (BERT)", weight="bold")
    _box(ax, x, 2.75, w, 0.75, "N × encoder layer\nself-attention, FFN", fill=BOX_FILL)
    _note(ax, x, 1.95, "a vector per token:\nlabels, not text")
    _mask_grid(ax, x, 0.85, full, title_text="all: (B, 1, 1, L)")
    # decoder-only
    x = 3.4
    _note(ax, x, 3.6, "decoder-only (GPT, b1)", weight="bold")
    _box(ax, x, 2.75, w, 0.75, "N × decoder block\nmasked self-attn, FFN", fill=BOX_FILL)
    _note(ax, x, 1.95, "the next token,\nat every position")
    _mask_grid(ax, x, 0.85, causal, title_text="causal: (B, 1, L, L)")
    # encoder-decoder
    xe, xd = 5.4, 7.6
    _note(ax, (xe + xd) / 2, 3.6, "encoder-decoder (2017, 08, 10)", weight="bold")
    _box(ax, xe, 2.75, 1.4, 0.75, "N × encoder\nlayer", fill=BOX_FILL)
    _box(ax, xd, 2.75, 1.4, 0.75, "N × decoder\nlayer", fill=BOX_FILL)
    _arrow(ax, (xe + 0.7, 2.65), (xd - 0.7, 2.65), linewidth=2.0)
    _note(ax, (xe + xd) / 2, 2.87, "memory")
    _note(ax, xd, 1.95, "the next target\ntoken")
    _note(ax, xe, 1.95, "reads the source")
    _mask_grid(ax, xe, 0.85, full, title_text="source: all")
    _mask_grid(ax, xd, 0.85, causal, title_text="target: causal")
    return fig


# ---- splitting and merging heads (06) ---------------------------------------------------------

def head_tokens(reshape: str = "right") -> np.ndarray:
    """(H, L, d_k): which token of `x[0]` (L, D) = (8, 16) each entry of each head comes from.

    "right": `x.reshape(B, L, H, d_k).transpose(1, 2)`, as `split_heads` does; "wrong":
    `x.reshape(B, H, L, d_k)`, which refills the new shape in memory order."""
    import torch

    token = torch.arange(L).repeat_interleave(D).reshape(1, L, D)       # the token of each entry
    if reshape == "right":
        return token.reshape(1, L, H, D_K).transpose(1, 2)[0].numpy()
    if reshape == "wrong":
        return token.reshape(1, H, L, D_K)[0].numpy()
    raise ValueError(f"reshape: expected 'right' or 'wrong', got {reshape!r}")


def head_features(reshape: str = "right") -> np.ndarray:
    """(H, L, d_k): which feature (column of `x[0]`) each entry of each head comes from."""
    import torch

    feature = torch.arange(D).repeat(L).reshape(1, L, D)
    if reshape == "right":
        return feature.reshape(1, L, H, D_K).transpose(1, 2)[0].numpy()
    return feature.reshape(1, H, L, D_K)[0].numpy()


#: The four heads' feature groups: light tints of four colours that are not the query's or the
#: key's, with black digits on them (each head of `split_heads` owns one group of d_k columns).
HEAD_FILLS = ("#f6d8a8", "#cfe8d9", "#e6cfe0", "#d9d9d9")


def head_split(name: str = "q"):
    """Splitting sentence 0 of `name` (L, D) = (8, 16), the queries of 06 by default, into
    H = 4 heads of d_k = 4 (06).

    Each cell shows the token it comes from; its colour is the group of 4 features it comes
    from, which is the head it belongs to. Right (`split_heads`): every head holds all 8 tokens,
    each with its own 4 features. Wrong (`reshape(B, H, L, d_k)` straight): head 0 holds tokens
    0 and 1 only, and mixes the feature groups of every head."""
    cell = 0.19
    fig, ax = _canvas(5.3)
    _heading(ax, f"Split into heads: ({B}, {L}, {D}) → ({B}, {L}, {H}, {D_K}) → ({B}, {H}, {L}, {D_K}); sentence 0")
    # x[0]: (L, D), cells numbered by token, coloured by feature group
    x0, y_top = 0.35, 4.4
    for t in range(L):
        for f in range(D):
            _cell(ax, x0 + f * cell, y_top - (t + 1) * cell, cell, t, HEAD_FILLS[f // D_K])
    _note(ax, x0 + D * cell / 2, y_top + 0.33, f"{name}[0]: (L, D) = ({L}, {D})", weight="bold")
    for group in range(H):
        _note(ax, x0 + (group + 0.5) * D_K * cell, y_top + 0.12, f"{group * D_K}-{group * D_K + D_K - 1}")
    _note(ax, x0 + D * cell / 2, y_top - L * cell - 0.3, "digit: the token it belongs to\n"
          "colour: its 4 features, i.e. its head")
    # the heads, right and wrong
    hx0, head_w = 3.85, D_K * cell
    for row, (reshape, label, code) in enumerate((
            ("right", "right: split_heads", "reshape(3, 8, 4, 4).transpose(1, 2)"),
            ("wrong", "wrong", "reshape(3, 4, 8, 4), no transpose"))):
        top = y_top - row * 2.2
        tokens, features = head_tokens(reshape), head_features(reshape)
        for h in range(H):
            left = hx0 + h * (head_w + 0.35)
            for t in range(L):
                for k in range(D_K):
                    _cell(ax, left + k * cell, top - (t + 1) * cell, cell, tokens[h, t, k],
                          HEAD_FILLS[features[h, t, k] // D_K])
            _note(ax, left + head_w / 2, top + 0.13, f"head {h}")
        _note(ax, hx0 - 0.1, top - L * cell - 0.18, f"{label}: {code}", ha="left", weight="bold",
              colour=INK if reshape == "right" else style.ERROR_COLOUR)
    _arrow(ax, (x0 + D * cell + 0.1, 3.65), (hx0 - 0.15, 3.65), linewidth=1.6)
    _arrow(ax, (x0 + D * cell + 0.1, 3.3), (hx0 - 0.15, 1.45), linewidth=1.6, colour=style.ERROR_COLOUR)
    _note(ax, 1.85, 1.55, "merge: transpose(1, 2),\nthen reshape(3, 8, 16):\nundoes the right split exactly")
    _note(ax, hx0 - 0.1, 0.2, "head 0 holds tokens 0 and 1 only, and every head's features",
          ha="left", colour=style.ERROR_COLOUR)
    return fig


def _cell(ax, x, y, size, number, fill):
    """One square cell of a tensor, lower left at (x, y), `number` written in it."""
    ax.add_patch(Rectangle((x, y), size, size, facecolor=fill, edgecolor="white", linewidth=0.8, zorder=2))
    ax.text(x + size / 2, y + size / 2, str(int(number)), ha="center", va="center",
            fontsize=TICK_PT, color=INK, zorder=3)


# ---- shift right (10) -------------------------------------------------------------------------

#: Sample 0 of notebook 10's demo batch: the target "8 3 2 0 6 5 7 4" between <bos> and <eos>.
SHIFT_EXAMPLE = ("<bos>", "8", "3", "2", "0", "6", "5", "7", "4", "<eos>")


def shift_right(tgt=SHIFT_EXAMPLE, batch: int = 4):
    """Teacher forcing (10): the decoder reads `tgt[:-1]` and must predict `tgt[1:]`, one token
    apart; position i sees the inputs up to i (the causal mask) and predicts label i. `tgt` is
    one row of the target batch, `batch` its number of rows (the shapes written)."""
    tgt = list(tgt)
    if len(tgt) < 3 or len(tgt) > 12:
        raise ValueError(f"tgt: expected 3 to 12 tokens (the diagram's room), got {len(tgt)}")
    n = len(tgt) - 1
    cell_w, h = 0.6, 0.36
    x0 = 2.05
    fig, ax = _canvas(3.3)
    _heading(ax, "Teacher forcing: the decoder reads the target shifted right")
    rows = ((2.55, f"tgt\n({batch}, {n + 1})", tgt, 0, BOX_FILL),
            (1.55, f"labels = tgt[:, 1:]\n({batch}, {n}): must predict", tgt[1:], 1, NORM_FILL),
            (0.55, f"tgt_in = tgt[:, :-1]\n({batch}, {n}): the decoder reads", tgt[:-1], 0, HIGHLIGHT_FILL))
    for y, name, tokens, offset, fill in rows:
        _note(ax, 0.1, y, name, ha="left", weight="bold")
        for i, token in enumerate(tokens):
            x = x0 + (i + offset) * cell_w + cell_w / 2
            _box(ax, x, y, cell_w - 0.08, h, token, fill=fill)
    for i in range(n):
        x_in = x0 + i * cell_w + cell_w / 2
        x_label = x0 + (i + 1) * cell_w + cell_w / 2
        _arrow(ax, (x_in, 0.55 + h / 2), (x_label, 1.55 - h / 2), colour=GUIDE_COLOUR)
    for i in range(n):
        x = x0 + i * cell_w + cell_w / 2
        _note(ax, x, 0.16, str(i), colour="#555555")
    _note(ax, 0.15, 0.16, "position i", ha="left", colour="#555555")
    _note(ax, x0 + (n + 1) * cell_w / 2, 2.05, "position i reads tgt_in[i] and must predict labels[i],"
          " the next token", colour="#555555")
    return fig


# ---- the KV cache (b2) ------------------------------------------------------------------------

def kv_cache(cached: int = 4):
    """One generation step with a KV cache (b2), in one head of one block: the keys and values
    of the `cached` earlier tokens are kept; the new token computes its own query, key and
    value, appends the key and value, and scores its query against all `cached + 1` keys."""
    if not isinstance(cached, int) or not 1 <= cached <= 6:
        raise ValueError(f"cached: expected an int from 1 to 6 (the diagram's room), got {cached!r}")
    heads, d_k, d_model = 4, 8, 32                       # b2's model: 4 heads of 8, D = 32
    total = cached + 1
    fig, ax = _canvas(3.95)
    _heading(ax, f"A KV cache: one new token at position {cached}, {cached} tokens cached")
    h, w, step = 0.34, 0.95, 0.42
    top = 3.0
    bottom = top - cached * step                       # the new token's row
    for name, x in (("keys", 3.35), ("values", 4.55)):
        _note(ax, x, top + 0.38, name, weight="bold")
        for i in range(total):
            new = i == cached
            _box(ax, x, top - i * step, w, h, f"{name[0]}{_sub(i)}" + (" new" if new else ""),
                 fill=HIGHLIGHT_FILL if new else NORM_FILL,
                 edge=HIGHLIGHT_COLOUR if new else INK, linewidth=2.2 if new else 1.0)
    _note(ax, 1.3, top - 0.1, f"cache per block:\n(1, {heads}, {cached}, {d_k}) → (1, {heads}, {total}, {d_k}),\n"
          "appended on dim=2", colour="#555555")
    _note(ax, 1.3, top - 1.25, f"without a cache: all {total} tokens\nagain, {total} rows of logits,\n"
          "only the last used", colour="#555555")
    # the new token computes its own query, key and value
    nx, ny = 3.95, 0.42
    _box(ax, nx, ny, 2.1, 0.5, f"new token x{_sub(cached)}: (1, 1, {d_model})", fill=HIGHLIGHT_FILL,
         edge=HIGHLIGHT_COLOUR, linewidth=2.2)
    _arrow(ax, (3.35, ny + 0.25), (3.35, bottom - h / 2), colour=HIGHLIGHT_COLOUR)
    _arrow(ax, (4.55, ny + 0.25), (4.55, bottom - h / 2), colour=HIGHLIGHT_COLOUR)
    qx = 7.95
    _box(ax, qx, bottom, 0.7, h, f"q{_sub(cached)}", fill=HIGHLIGHT_FILL, edge=HIGHLIGHT_COLOUR, linewidth=2.2)
    _arrow(ax, (nx + 1.05, ny), (qx, bottom - h / 2), colour=HIGHLIGHT_COLOUR)
    # the scores of the new query against every key
    sx = 6.6
    left = sx - (total - 1) * 0.25
    _note(ax, sx, top + 0.38, f"scores (1, {heads}, 1, {total})", weight="bold")
    for i in range(total):
        _box(ax, left + i * 0.5, top, 0.44, h, f"s{_sub(i)}", fill=BOX_FILL)
    _arrow(ax, (qx, bottom + h / 2), (left + (total - 1) * 0.5 + 0.1, top - h / 2))
    _note(ax, sx - 0.35, top - 0.75, f"q{_sub(cached)} · k{_sub(0)} … k{_sub(cached)}: one row,\nno mask needed")
    _note(ax, sx - 0.35, top - 1.45, f"softmax, then · values\n→ out (1, 1, {d_model})")
    return fig


def _sub(i: int) -> str:
    """i as subscript digits (k₀, v₁)."""
    return str(i).translate(str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉"))


# ---- the clock hand of positions (03) ---------------------------------------------------------

def rotation_clock(p: int = 2, k: int = 3, pairs=(0, 2)):
    """The clock hand of sinusoidal positions (03) and RoPE.

    Left panels: one `(sin, cos)` pair of columns of the positional table `(L, D) = (8, 16)`
    per panel; position p is a point on the unit circle at angle `p * omega_i`, and moving by
    `k` positions turns the hand by `k * omega_i`, whatever p is. Right panel: RoPE turns a
    query at position m and a key at position n by those angles; their dot product depends on
    the angle between them, `(m - n) * omega`."""
    fig, axes = style.new_figure(3.3, ncols=3)
    circle = np.linspace(0, 2 * math.pi, 200)
    for ax, i in zip(axes[:2], pairs):
        omega = 10000 ** (-2 * i / D)
        _clock_face(ax, circle)
        angles = np.arange(L) * omega
        ax.plot(np.sin(angles), np.cos(angles), linestyle="none", marker="o", color=INK, markersize=4)
        for pos, colour, ls in ((p, INK, "-"), (p + k, GUIDE_COLOUR, "--")):
            ax.annotate("", xy=(math.sin(pos * omega), math.cos(pos * omega)), xytext=(0, 0),
                        arrowprops={"arrowstyle": "-|>", "color": colour, "linewidth": 2, "linestyle": ls})
        ax.text(1.25 * math.sin(p * omega), 1.25 * math.cos(p * omega), f"p={p}", ha="center",
                va="center", fontsize=TICK_PT)
        if k * omega > 0.35:
            ax.text(1.25 * math.sin((p + k) * omega), 1.25 * math.cos((p + k) * omega), f"p+{k}",
                    ha="center", va="center", fontsize=TICK_PT, color="#555555")
        arc = np.linspace(p * omega, (p + k) * omega, 30)
        ax.plot(0.35 * np.sin(arc), 0.35 * np.cos(arc), color=GUIDE_COLOUR, linewidth=1.5)
        style.title(ax, f"columns {2 * i}, {2 * i + 1}: ω = {omega:.2g}\np → p + {k}: turned {k}·ω = {k * omega:.2g} rad")
        ax.set_xlabel(f"pe[p, {2 * i}] = sin(p·ω)")
        ax.set_ylabel(f"pe[p, {2 * i + 1}] = cos(p·ω)")
    ax = axes[2]
    _clock_face(ax, circle)
    m, n, omega = 5, 2, 0.5
    for angle, colour, name in ((m * omega, IDEA_COLOURS["query"], f"q at m={m}"),
                                (n * omega, IDEA_COLOURS["key"], f"k at n={n}")):
        ax.annotate("", xy=(math.sin(angle), math.cos(angle)), xytext=(0, 0),
                    arrowprops={"arrowstyle": "-|>", "color": colour, "linewidth": 2})
        ax.text(1.3 * math.sin(angle), 1.3 * math.cos(angle), name, ha="center", va="center",
                fontsize=TICK_PT, color=colour)
    arc = np.linspace(n * omega, m * omega, 30)
    ax.plot(0.35 * np.sin(arc), 0.35 * np.cos(arc), color=GUIDE_COLOUR, linewidth=1.5)
    style.title(ax, f"RoPE (ω = {omega:g}): q and k\napart by (m − n)·ω = {(m - n) * omega:g} rad")
    ax.set_xlabel("first of a pair")
    ax.set_ylabel("second of a pair")
    return fig


def _clock_face(ax, circle):
    ax.plot(np.sin(circle), np.cos(circle), color="#bbbbbb", linewidth=1)
    ax.set_xlim(-1.6, 1.6)
    ax.set_ylim(-1.6, 1.6)
    ax.set_aspect("equal")
    ax.set_xticks([-1, 0, 1])
    ax.set_yticks([-1, 0, 1])
