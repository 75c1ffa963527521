"""The one look of every figure and widget of the course, defined once.

Size. JupyterLab 4.6 in a 1280 px wide browser window with the file browser open (its
default) gives a cell's output 848 px (measured in Chromium; 1100 px with the side bar
closed, 934 px at 1366 px). The inline backend and the widgets render at 100 dpi, so a
figure at most `COLUMN_IN` = 8.4 inches wide is shown 1:1; a wider one is shrunk, and its
text with it. Fonts are at least `MIN_FONT_PT` = 9 pt as displayed.

Classroom. Projected, a figure is read from the back row: the classroom minimum is text of
`CLASSROOM_MIN_PX` = 18 px and map tiles of `CLASSROOM_MIN_CELL_PX` = 24 px on the projected
image. The course's 9 pt at 100 dpi is 12.5 px, enough on a laptop and below that minimum: to
project, zoom the browser so that the figure is shown 1.5 times larger (text 18.75 px, and a
map's tiles 1.5 times theirs), or save the figure for a slide at `classroom_dpi()` (144 dpi for
9 pt text). So a map meant for projection has tiles of at least `CLASSROOM_CELL_PX` (16.7 px at
100 dpi, 24 px projected), and the lint checks it (`lint.classroom_problems`).

Layout. One engine, constrained layout: it keeps every label inside the canvas. The
inline backend crops a stored figure to its contents (`bbox_inches="tight"`), so text
outside the canvas would still show there, but a widget's frame is the canvas itself and
clips it: only a layout that keeps text inside is safe for both.

Colour. Categories and lines take the Okabe-Ito palette (told apart with any colour
vision), and lines also differ in line style and marker, so they differ in grey too.
Values from 0 up (attention weights) use viridis; signed values use RdBu_r centred at 0.
Masked or padded positions are drawn in `MASKED_COLOUR` (a masked array's "bad" colour),
never as a weight of 0. One idea keeps one colour in every notebook (`IDEA_COLOURS`: the
query and the key, training and held-out data, masked positions), and each experiment of
notebook 10's lab has one colour of its own in every figure (`EXPERIMENT_COLOURS`).
`lint.py` checks all of this on live figures.
"""
from __future__ import annotations

import matplotlib as mpl
import numpy as np
import torch
from matplotlib.colors import ListedColormap, to_rgb

# ---- size and text ----------------------------------------------------------------------------

DPI = 100             #: the inline backend's and the widgets' dots per inch
COLUMN_PX = 840       #: widest figure shown 1:1 in JupyterLab's notebook column (see above)
COLUMN_IN = COLUMN_PX / DPI
MIN_FONT_PT = 9       #: smallest text as displayed (12.5 px at 100 dpi)
TITLE_PT = 11         #: every axes title and figure title
LABEL_PT = 10         #: axis labels, colour-bar labels
TICK_PT = 9           #: tick labels, legends, notes and numbers written into cells
CLASSROOM_MIN_PX = 18       #: smallest text on a projected screen that the back row reads
CLASSROOM_MIN_CELL_PX = 24  #: smallest tile of a map under which a token label is read from the back


def classroom_dpi(min_font_pt: float = MIN_FONT_PT) -> float:
    """The dpi at which text of `min_font_pt` is `CLASSROOM_MIN_PX` tall: save a figure for a
    slide with `fig.savefig(path, dpi=classroom_dpi())` (144 dpi for the course's 9 pt)."""
    return CLASSROOM_MIN_PX * 72 / min_font_pt


#: The smallest tile, in pixels at `DPI`, of a map meant for projection (every attention map,
#: 08's stack and 10's trained model included): shown at `classroom_dpi()` (or zoomed 1.44
#: times), it is `CLASSROOM_MIN_CELL_PX` and its 9 pt token labels are 18 px. The figure lint
#: checks it on maps of tokens (`lint.classroom_problems`).
CLASSROOM_CELL_PX = CLASSROOM_MIN_CELL_PX * DPI / classroom_dpi()

# ---- colour -----------------------------------------------------------------------------------

#: Okabe-Ito (Okabe and Ito 2008), ordered for lines: yellow last, it is faint on white.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#E69F00", "#CC79A7", "#56B4E9", "#000000", "#F0E442")
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
GUIDE_COLOUR = "#666666"      #: reference lines and notes that are not data
ERROR_COLOUR = "#b3261e"      #: text that says something is wrong (HTML notes of the widgets)
MASKED_COLOUR = "#d0d0d0"     #: masked / padded / blocked positions, in every map

#: One colour per idea, course-wide: a figure that shows one of these ideas draws it in this
#: colour, whichever notebook it is in, so that a learner carries the colour from one lesson to
#: the next: the axis names of every attention map (queries down in blue, keys across in
#: vermillion), the training curve against the held-out one (10, b1), every masked cell. Ideas
#: that no figure shows together may share a colour (a lab experiment's, the mask's "may attend").
IDEA_COLOURS = {
    "query": PALETTE[0],          # blue
    "key": PALETTE[1],            # vermillion
    "train": PALETTE[2],          # bluish green: measured on the batches the model learns from
    "held-out": PALETTE[4],       # reddish purple: measured on data it never trained on
    "masked": MASKED_COLOUR,
}

#: "You are here": the step a notebook is about, in the course map and the concept diagrams
#: (tfmlib/viz/concepts.py): an edge in Okabe-Ito's orange, a fill in a light tint of it.
HIGHLIGHT_COLOUR = PALETTE[3]
HIGHLIGHT_FILL = "#fbe3b3"

#: Colours of series that are none of the ideas above: Okabe-Ito's black, orange and sky blue
#: and Paul Tol's muted wine, teal, indigo, olive and sand, but not the query's blue, the key's
#: vermillion, training's green or held-out purple, so that those keep their one meaning.
SERIES_COLOURS = ("#000000", "#E69F00", "#44AA99", "#882255", "#332288", "#999933", "#56B4E9", "#DDCC77")

#: One pair of colours for each pair of other ideas that a figure sets side by side, none of
#: them an idea colour, and the pairs that share a notebook apart from each other (the lint
#: checks that an idea colour names one thing in a notebook, `lint.NotebookColours`).
PAIR_COLOURS = {
    "operands": ("#E69F00", "#44AA99"),          # 01: a (orange), b (teal)
    "scaling": ("#000000", "#E69F00"),           # 05: scaled (black), unscaled (orange)
    "implementations": ("#882255", "#999933"),   # 05: tfmlib (wine), PyTorch's fused kernel (olive)
    "widths": ("#000000", "#E69F00"),            # 03: D = 16 (black), D = 64 (orange)
    "optimizers": ("#E69F00", "#000000"),        # 09: SGD (orange), Adam (black)
    "bias correction": ("#882255", "#44AA99"),   # 09: raw (wine), corrected (teal)
    "schedules": ("#332288", "#999933"),         # 09: the paper's (indigo), train()'s (olive)
    "cache": ("#000000", "#E69F00"),             # b2: with the KV cache (black), without (orange)
}

SEQUENTIAL_CMAP = "viridis"   #: values from 0 up, e.g. attention weights (0-1)
DIVERGING_CMAP = "RdBu_r"     #: signed values, always with limits symmetric about 0

#: Attention weights: viridis, masked positions grey (a masked array's bad value).
ATTENTION_CMAP = mpl.colormaps[SEQUENTIAL_CMAP].with_extremes(bad=IDEA_COLOURS["masked"])
#: A bool mask: False (blocked) is the masked grey, True (may attend) bluish green.
MASK_CMAP = ListedColormap([IDEA_COLOURS["masked"], PALETTE[2]], name="mask")
#: Token kinds of notebook 02 (word, <bos>/<eos>, <unk>, <pad>): light tints keep black
#: text readable; <pad> is the masked grey, as it is in every attention map.
TOKEN_KIND_COLOURS = ("#bfdcef", "#b3e0d2", "#f4c3a6", IDEA_COLOURS["masked"])
TOKEN_KIND_CMAP = ListedColormap(TOKEN_KIND_COLOURS, name="token_kinds")

#: The colour maps a figure may use (lint.py checks it).
ALLOWED_CMAPS = frozenset({SEQUENTIAL_CMAP, DIVERGING_CMAP, MASK_CMAP.name, TOKEN_KIND_CMAP.name})

#: One colour per experiment of notebook 10's lab (tfmlib.experiments.EXPERIMENTS), the same in
#: every lab figure and in the overlay widget, whichever experiments a figure shows. The
#: baseline, in nearly every figure, is black; then Okabe-Ito's orange and sky blue and Paul
#: Tol's muted and dark colours, none of them an idea colour (`IDEA_COLOURS`: 10 draws training
#: and held-out curves and query-by-key maps too). Label smoothing, often beside the baseline,
#: is orange, far from black. Twelve colours cannot all be told apart by every reader: the
#: markers of `experiment_marker` differ too, and the experiments a figure of the notebook
#: shows together get colours far apart.
EXPERIMENT_COLOURS = {
    "baseline": "#000000",
    "no positions": "#56B4E9",
    "1 head": "#882255",
    "no sqrt(d_k)": "#44AA99",
    "Pre-LN, no warm-up": "#AA4499",
    "Post-LN": "#CC6677",
    "Post-LN, no warm-up": "#332288",
    "lr x10": "#999933",
    "label smoothing 0.1": "#E69F00",
    "sum": "#DDCC77",
    "sum, no positions": "#661100",
    "sum, regressor": "#117733",
}


def experiment_colour(name: str) -> str:
    """The colour of lab experiment `name` in every figure (`EXPERIMENT_COLOURS`)."""
    if name not in EXPERIMENT_COLOURS:
        raise ValueError(f"name: expected a lab experiment, one of {list(EXPERIMENT_COLOURS)}, "
                         f"got {name!r}")
    return EXPERIMENT_COLOURS[name]


#: One marker per experiment, all twelve different: label smoothing's is not the baseline's,
#: whatever their colours look like to a reader.
EXPERIMENT_MARKERS = dict(zip(EXPERIMENT_COLOURS, ("o", "s", "^", "D", "v", "P", "h", "*", "X", "<", ">", "p")))


def experiment_marker(name: str) -> str:
    """The marker of lab experiment `name` (its exact-match points), fixed like its colour."""
    experiment_colour(name)
    return EXPERIMENT_MARKERS[name]


# ---- attention maps ---------------------------------------------------------------------------

QUERY_LABEL = "query (the token looking)"
KEY_LABEL = "key (the token looked at)"
#: A decoder's query rows, in every map (08's untrained stack, 10's trained model): each row is
#: labelled by the token the decoder writes there, one step after the token it reads.
WRITTEN_QUERY_LABEL = "query: the token being written"
ATTENTION_CBAR_LABEL = "attention weight (grey: masked)"


def name_query_key_axes(ax, xlabel: str = KEY_LABEL, ylabel: str = QUERY_LABEL) -> None:
    """Axis names of a query-by-key map, each in its idea's colour (`IDEA_COLOURS`)."""
    ax.set_xlabel(xlabel, fontsize=LABEL_PT, color=IDEA_COLOURS["key"])
    ax.set_ylabel(ylabel, fontsize=LABEL_PT, color=IDEA_COLOURS["query"])


def line_style(i: int) -> dict:
    """Colour (`SERIES_COLOURS`), line style and marker of the i-th line: lines differ without
    colour too."""
    return {"color": SERIES_COLOURS[i % len(SERIES_COLOURS)], "linestyle": LINESTYLES[i % len(LINESTYLES)],
            "marker": MARKERS[i % len(MARKERS)]}


def distinct_colours(n: int) -> np.ndarray:
    """(n, 3) RGB colours, one per item, all different to any colour vision.

    Up to 8: the Okabe-Ito palette. More: viridis, whose lightness rises steadily, sampled
    in golden-ratio steps so that items i and i + 1 land far apart on it.
    """
    if n <= len(PALETTE):
        return np.array([to_rgb(c) for c in PALETTE[:n]])
    positions = (np.arange(n) * 0.6180339887) % 1.0
    return mpl.colormaps[SEQUENTIAL_CMAP](0.05 + 0.9 * positions)[:, :3]


def signed_limits(values) -> tuple[float, float]:
    """(vmin, vmax) symmetric about 0, so the diverging map's white is exactly 0."""
    limit = float(np.nanmax(np.abs(_numpy(values)))) or 1.0
    return -limit, limit


def _numpy(values) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        return values.detach().cpu().double().numpy()
    return np.asarray(values, dtype=float)


# ---- figures ----------------------------------------------------------------------------------

def figure(height: float, width: float = COLUMN_IN, *, pyplot: bool = True):
    """An empty figure in the course style (constrained layout, `DPI`), at most a column wide.

    `pyplot=False` builds a bare Figure for a widget (the inline backend never shows it).
    """
    if width > COLUMN_IN + 1e-9:
        raise ValueError(f"width: expected at most {COLUMN_IN} inches (JupyterLab's column at "
                         f"{DPI} dpi), got {width}")
    if pyplot:
        import matplotlib.pyplot as plt

        return plt.figure(figsize=(width, height), dpi=DPI, layout="constrained")
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def new_figure(height: float, width: float = COLUMN_IN, nrows: int = 1, ncols: int = 1, *,
               pyplot: bool = True, **subplots_kw):
    """A figure in the course style and its axes: (fig, ax) for one panel, (fig, list of axes)
    for one row or column, (fig, 2-D array of axes) for a grid. See `figure` for `pyplot`.

    Constrained layout keeps labels inside; a widget can then freeze it (`freeze_layout`).
    """
    fig = figure(height, width, pyplot=pyplot)
    axes = fig.subplots(nrows, ncols, squeeze=False, **subplots_kw)
    for ax in axes.flat:
        style_axes(ax)
    if axes.size == 1:
        return fig, axes[0, 0]
    return fig, (axes if nrows > 1 and ncols > 1 else list(axes.flat))


def style_axes(ax) -> None:
    """Course fonts on an axes made elsewhere (tick labels made later at draw time included)."""
    ax.tick_params(which="both", labelsize=TICK_PT)
    ax.title.set_fontsize(TITLE_PT)
    ax.xaxis.label.set_fontsize(LABEL_PT)
    ax.yaxis.label.set_fontsize(LABEL_PT)


def title(ax, text: str):
    """The one title style: TITLE_PT, centred, normal weight."""
    return ax.set_title(text, fontsize=TITLE_PT, fontweight="normal", loc="center")


def freeze_layout(fig) -> None:
    """Lay the figure out once and keep it: a widget's redraws then skip the layout pass.

    Only for figures whose text does not grow between frames."""
    fig.draw_without_rendering()
    fig.set_layout_engine("none")


def colorbar(fig, image, ax, label: str, **kwargs):
    """A colour bar beside `ax` (one axes or a list) with its label in the course style."""
    bar = fig.colorbar(image, ax=ax, **kwargs)
    bar.set_label(label, fontsize=LABEL_PT)
    bar.ax.tick_params(labelsize=TICK_PT)
    return bar


def attention_heatmap(ax, weights, query_tokens=None, key_tokens=None, masked=None, *,
                      title_text: str = "", colorbar_: bool = True, xlabel: str = KEY_LABEL,
                      ylabel: str = QUERY_LABEL, aspect: str = "equal"):
    """The one attention-map look on `ax`; returns the image artist (keep it for `set_data`).

    weights: (Lq, Lk), drawn on a fixed 0-1 viridis scale, queries down, keys across.
    masked: (Lq, Lk) bool (True = masked) or None; masked cells, and NaN weights (fully
    masked rows), are drawn grey, not as a weight of 0. Tokens label both axes.
    aspect: "equal" (square cells: both axes count tokens) unless a figure has a reason.
    """
    image = ax.imshow(masked_weights(weights, masked), cmap=ATTENTION_CMAP, vmin=0.0, vmax=1.0,
                      interpolation="nearest", aspect=aspect)
    if key_tokens is not None:
        ax.set_xticks(range(len(key_tokens)), labels=list(key_tokens), rotation=90)
    if query_tokens is not None:
        ax.set_yticks(range(len(query_tokens)), labels=list(query_tokens))
    ax.tick_params(length=0, labelsize=TICK_PT)
    name_query_key_axes(ax, xlabel, ylabel)
    if title_text:
        title(ax, title_text)
    if colorbar_:
        colorbar(ax.figure, image, ax, ATTENTION_CBAR_LABEL, ticks=[0, 0.5, 1])
    return image


def for_projection(fig):
    """Mark `fig` as meant for projection in a classroom: the figure lint then checks that its
    maps of tokens have tiles of at least `CLASSROOM_CELL_PX` (`lint.classroom_problems`).
    Returns `fig`."""
    fig.for_projection = True
    return fig


def masked_weights(weights, masked=None) -> np.ma.MaskedArray:
    """(Lq, Lk) weights -> a masked array: `masked` cells (True) and NaNs become "bad"."""
    values = _numpy(weights)
    bad = np.isnan(values)
    if masked is not None:
        bad = bad | _numpy(masked).astype(bool)
    return np.ma.masked_array(np.nan_to_num(values), mask=bad)
