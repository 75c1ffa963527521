"""Notebook 10: training curves, and what the trained model attends to.

`ReverseExplorer` is the widget: type digits (or pick an example), see the
greedy prediction and the cross-attention map of the last decoder layer.
"""
from __future__ import annotations

import html
import time

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from ..tokenization import decode, invert_vocab
from ..training import VOCAB, attention_maps, digits_to_ids, greedy_decode
from . import style
from .common import Explorer, place_axis_names
from .textcache import cache_text

ID_TO_TOKEN = invert_vocab(VOCAB)


def plot_training_curves(history: dict):
    """Loss per step (log scale) and held-out exact match per evaluation."""
    fig, (left, right) = style.new_figure(3.2, style.COLUMN_IN, 1, 2)
    left.semilogy(history["step"], history["loss"], linewidth=1, color=style.IDEA_COLOURS["train"])
    _guess_levels(left)
    left.set_xlabel("training step")
    left.set_ylabel("cross-entropy loss (log scale)")
    style.title(left, "training loss")
    right.plot(history["eval_step"], history["exact_match"], "o-", color=style.IDEA_COLOURS["held-out"])
    right.annotate(f"final: {history['exact_match'][-1]:.1%}",
                   (history["eval_step"][-1], history["exact_match"][-1]),
                   textcoords="offset points", xytext=(-10, -22), ha="right",
                   fontsize=style.TICK_PT)
    right.axhline(0.99, color=style.GUIDE_COLOUR, linestyle="--", linewidth=1, label="99 %")
    right.set_ylim(-0.02, 1.02)
    right.set_xlabel("training step")
    right.set_ylabel("exact match (fraction)")
    style.title(right, "held-out sequences exactly right")
    right.legend(loc="lower right")
    return fig


def _guess_levels(ax) -> None:
    """The two levels the text reads the loss against: ln 14, a uniform guess over the 14
    tokens, and ln 10, a uniform guess over the 10 digits (the loss is a natural log)."""
    low, high = ax.get_ylim()
    ax.set_ylim(low, max(high, 1.6 * np.log(len(VOCAB))))     # room above ln 14 for its name
    for count, what, va in ((len(VOCAB), "tokens", "bottom"), (10, "digits", "top")):
        level = float(np.log(count))
        ax.axhline(level, color=style.GUIDE_COLOUR, linestyle=":", linewidth=1)
        ax.annotate(f"ln {count}: a blind guess over {count} {what}", (1.0, level),
                    xycoords=("axes fraction", "data"), textcoords="offset points",
                    xytext=(-2, 2 if va == "bottom" else -2), ha="right", va=va,
                    fontsize=style.TICK_PT, color=style.GUIDE_COLOUR)


def tokens(ids: torch.Tensor) -> list[str]:
    """(L,) ids -> their tokens, specials included: ['<bos>', '3', '1', '<eos>']."""
    return [ID_TO_TOKEN[int(i)] for i in ids]


@torch.no_grad()  # no autograd graph: 20 times faster, and a widget callback needs no gradients
def predict_with_attention(params: dict, config, text: str):
    """Digits -> (source tokens, predicted tokens, cross-attention (H, Lt, Ls) of the last layer).

    Row i of the map is the decoder step that wrote predicted token i.
    """
    src = digits_to_ids(text)                                  # (1, Ls)
    # The reverse has Ls digits and <eos>: one token more shows that a model runs on.
    predicted = greedy_decode(params, src, config,             # (1, Lt + 1), starts with <bos>
                              max_new_tokens=min(config.max_len - 1, src.size(1) + 2))
    if (predicted == VOCAB["<pad>"]).any():
        predicted = predicted[:, : int((predicted != VOCAB["<pad>"]).sum())]
    tgt_in = predicted[:, :-1]                                 # what the decoder read
    cross = attention_maps(params, src, tgt_in, config)["decoder_cross"][-1]  # (1, H, Lt, Ls)
    return tokens(src[0]), tokens(predicted[0, 1:]), cross[0]


QUERY_LABEL = style.WRITTEN_QUERY_LABEL
KEY_LABEL = "key: the source digit looked at"


CROSS_HEIGHT_IN = 3.0      # a row of panels, at least; taller where the tiles need it
TITLE_CHARS = 80           # a suptitle longer than this (11 pt) goes on two lines


def plot_cross_attention(params: dict, config, text: str):
    """One heatmap per head of the last decoder layer's cross-attention, and their mean.

    The panels stand in one row while their tiles are of the classroom size
    (`style.CLASSROOM_CELL_PX`); a longer input wraps them onto more rows, and the figure is
    as tall as tiles of that size need (`CROSS_HEIGHT_IN` at least).
    """
    import matplotlib.pyplot as plt

    source, output, cross = predict_with_attention(params, config, text)
    heads = cross.size(0)
    panels = [(f"head {h}", cross[h]) for h in range(heads)] + [("mean of heads", cross.mean(0))]
    per_row = len(panels)
    while True:
        fig, axes = _cross_attention_panels(panels, source, output, per_row)
        fig.draw_without_rendering()                    # constrained layout places the panels
        cell = _slot_inches(axes, "width") / len(source) * style.DPI
        if cell >= style.CLASSROOM_CELL_PX or per_row == 1:
            break
        plt.close(fig)
        per_row = max(1, min(per_row - 1, int(per_row * cell / style.CLASSROOM_CELL_PX)))
    _fit_height(fig, axes, len(output), -(-len(panels) // per_row))
    return style.for_projection(fig)


def _cross_attention_panels(panels, source, output, per_row: int):
    """The figure of `plot_cross_attention`, `per_row` panels a row; -> (fig, the panels' axes)."""
    rows = -(-len(panels) // per_row)
    fig, grid = style.new_figure(CROSS_HEIGHT_IN * rows, style.COLUMN_IN, rows, per_row, sharey=True)
    axes = list(np.ravel(np.array(grid, dtype=object)))
    for spare in axes[len(panels):]:                   # the last row's empty places
        spare.remove()
    axes = axes[:len(panels)]
    for i, (ax, (name, weights)) in enumerate(zip(axes, panels)):
        image = style.attention_heatmap(ax, weights, output, source, title_text=name,
                                        colorbar_=False, xlabel="source digit (key)",
                                        ylabel=QUERY_LABEL if i % per_row == 0 else "", aspect="equal")
        ax.tick_params(axis="x", rotation=0)
    style.colorbar(fig, image, axes, style.ATTENTION_CBAR_LABEL.split(" (")[0],
                   ticks=[0, 0.5, 1], fraction=0.03, pad=0.02)
    title = f"last decoder layer's cross-attention, input '{' '.join(source)}'"
    fig.suptitle(title if len(title) <= TITLE_CHARS else title.replace(", input", ",\ninput"))
    return fig, axes


def _slot_inches(axes, side: str) -> float:
    """The narrowest (side="width") or shortest ("height") place that the layout gives a panel,
    in inches, before square cells shrink it to fit the map."""
    fig = axes[0].figure
    size = fig.get_figwidth() if side == "width" else fig.get_figheight()
    return min(getattr(ax.get_position(original=True), side) for ax in axes) * size


def _fit_height(fig, axes, map_rows: int, panel_rows: int) -> None:
    """Set `fig`'s height to what `panel_rows` rows of panels, each with room for `map_rows`
    rows of classroom tiles, need (`CROSS_HEIGHT_IN` at least). Constrained layout keeps the
    margins as the height changes, so the first step lands on it; a second takes up what the
    layout's rounding left."""
    needed = map_rows * style.CLASSROOM_CELL_PX / style.DPI + 0.01
    for _ in range(2):
        height = fig.get_figheight()
        fitted = max(CROSS_HEIGHT_IN, height + panel_rows * (needed - _slot_inches(axes, "height")))
        if abs(fitted - height) * style.DPI < 0.5:
            return
        fig.set_size_inches(fig.get_figwidth(), fitted)
        fig.draw_without_rendering()


def _verdict(source: list[str], output: list[str]) -> tuple[str, bool]:
    expected = " ".join(reversed(source))
    got = decode([VOCAB[t] for t in output], VOCAB)
    return got, got == expected


#: The map's figure for a short input; a longer one grows it (`map_layout`).
MAP_FIGSIZE = (6.6, 5.8)
# Around the map's axes box, in inches: room for the written tokens and the queries' axis name
# left, for the title above, for the source digits and the keys' axis name below; right of it
# the colour bar, its ticks and its label.
MAP_LEFT_IN, MAP_TOP_IN, MAP_BOTTOM_IN = 1.32, 0.812, 0.812
MAP_BAR_GAP_IN, MAP_BAR_IN, MAP_RIGHT_IN = 0.1, 0.165, 0.79
#: The axes box of a short input, in inches: the map's square cells shrink to fit it.
MAP_BOX_IN = (MAP_FIGSIZE[0] - MAP_LEFT_IN - MAP_BAR_GAP_IN - MAP_BAR_IN - MAP_RIGHT_IN,
              MAP_FIGSIZE[1] - MAP_TOP_IN - MAP_BOTTOM_IN)
MAP_TITLE_TOP_IN = 0.087
MAX_TOKENS = 34                            # labels kept for either axis (config.max_len + 2)


def map_layout(rows: int, cols: int) -> tuple[tuple[float, float], tuple, tuple]:
    """The figure of a map of `rows` x `cols` tokens -> ((width, height) in inches, the axes'
    box, the colour bar's box, in figure fractions). Up to about 25 tokens a side the map fits
    `MAP_BOX_IN` with tiles of the classroom size (`style.CLASSROOM_CELL_PX`); a longer input
    widens or heightens the box (and the figure) so that its tiles keep that size: 34 tokens
    across still fit the notebook's column."""
    cell = np.ceil(style.CLASSROOM_CELL_PX) / style.DPI              # inches, rounded up
    box_width, box_height = max(MAP_BOX_IN[0], cols * cell), max(MAP_BOX_IN[1], rows * cell)
    width = MAP_LEFT_IN + box_width + MAP_BAR_GAP_IN + MAP_BAR_IN + MAP_RIGHT_IN
    height = MAP_BOTTOM_IN + box_height + MAP_TOP_IN
    # Whole pixels: a widget's frame is an image of whole pixels, and the boxes are fractions of it.
    width, height = np.ceil(width * style.DPI) / style.DPI, np.ceil(height * style.DPI) / style.DPI
    bottom = 1 - (MAP_TOP_IN + box_height) / height
    box = (MAP_LEFT_IN / width, bottom, box_width / width, box_height / height)
    bar = ((MAP_LEFT_IN + box_width + MAP_BAR_GAP_IN) / width, bottom, MAP_BAR_IN / width, box_height / height)
    return (width, height), box, bar


class CrossAttentionMap:
    """One head's (or the mean) cross-attention map, token labels as texts.

    The tokens are plain texts moved for each input, and the axes stays where it is for
    every input of up to about 25 tokens, so one cached background (frame, axis names, colour
    bar) serves them all (see `StackPicture` in encoder_decoder.py for the same idea); a longer
    input grows the figure so that its tiles keep the classroom size (`map_layout`), with a
    background of its own size.
    """

    def __init__(self, fig):
        (width, height), box, bar_box = map_layout(1, 1)
        fig.set_size_inches(width, height)
        self.fig = fig
        self.ax = fig.add_axes(box)
        # Square cells (both axes are tokens): the box shrinks to fit the map, and the axis
        # names move with it, next to the tokens (`place_axis_names`).
        self.image = self.ax.imshow(np.zeros((2, 2)), cmap=style.ATTENTION_CMAP, vmin=0, vmax=1,
                                    interpolation="nearest", aspect="equal")
        self.ax.set_anchor("N")
        self.ax.set_xticks([])
        self.ax.set_yticks([])
        self.col_name = fig.text(0, 0, KEY_LABEL, fontsize=style.LABEL_PT, color=style.IDEA_COLOURS["key"])
        self.row_name = fig.text(0, 0, QUERY_LABEL, fontsize=style.LABEL_PT,
                                 color=style.IDEA_COLOURS["query"])
        self.bar_ax = fig.add_axes(bar_box)
        bar = fig.colorbar(self.image, cax=self.bar_ax, ticks=[0, 0.5, 1])
        bar.set_label(style.ATTENTION_CBAR_LABEL.split(" (")[0], fontsize=style.LABEL_PT)
        bar.ax.tick_params(labelsize=style.TICK_PT)
        self.title = fig.text(0.5, 1 - MAP_TITLE_TOP_IN / height, "", ha="center", va="top",
                              fontsize=style.TITLE_PT)
        text = dict(fontsize=style.TICK_PT, clip_on=False)
        self.rows = [self.ax.text(-0.7, i, "", ha="right", va="center", **text)
                     for i in range(MAX_TOKENS)]
        self.cols = [self.ax.text(j, 0, "", ha="center", va="top", **text)
                     for j in range(MAX_TOKENS)]
        self.moving = [self.image, self.title, *self.rows, *self.cols, self.row_name, self.col_name]

    def fit(self, rows: int, cols: int) -> tuple[int, int]:
        """Size the figure for a map of `rows` x `cols` tokens (`map_layout`); returns the key
        of its background, the figure's size in pixels."""
        (width, height), box, bar_box = map_layout(rows, cols)
        if (self.fig.get_figwidth(), self.fig.get_figheight()) != (width, height):
            self.fig.set_size_inches(width, height, forward=False)
            self.ax.set_position(box)
            self.bar_ax.set_position(bar_box)
            self.title.set_y(1 - MAP_TITLE_TOP_IN / height)
        return round(width * style.DPI), round(height * style.DPI)

    def draw(self, source, output, cross, head: str) -> tuple[int, int]:
        """Show head `head` ("mean" or "0".."H-1") of cross (H, Lt, Ls); returns the key of
        the background (`fit`)."""
        weights = cross.mean(0) if head == "mean" else cross[int(head)]
        rows, cols = weights.shape
        background = self.fit(rows, cols)
        self.image.set_data(weights.numpy())
        self.image.set_extent((-0.5, cols - 0.5, rows - 0.5, -0.5))
        self.ax.set_xlim(-0.5, cols - 0.5)
        self.ax.set_ylim(rows - 0.5, -0.5)
        for labels, names, place in ((self.rows, output, lambda i: (-0.6, i)),
                                     (self.cols, source, lambda j: (j, rows - 0.35))):
            for i, label in enumerate(labels):
                label.set_visible(i < len(names))
                if i < len(names):
                    label.set(text=names[i], position=place(i))
        place_axis_names(self.ax, self.rows, self.cols, self.row_name, self.col_name)
        got, right = _verdict(source, output)
        self.title.set_text(f"last decoder layer's cross-attention, head: {head}\n"
                            f"{len(source)} digits in, the reverse {'right' if right else 'wrong'}")
        return background


def plot_cross_attention_mean(params: dict, config, text: str, head: str = "mean"):
    """Static version of the widget's view: one map of the last decoder layer's cross-attention."""
    source, output, cross = predict_with_attention(params, config, text)
    fig, _ = style.new_figure(MAP_FIGSIZE[1], MAP_FIGSIZE[0])
    fig.set_layout_engine("none")          # the labels' room is fixed (`map_layout`)
    fig.delaxes(fig.axes[0])
    CrossAttentionMap(fig).draw(source, output, cross, head)
    return style.for_projection(fig)


class ReverseExplorer(Explorer):
    """Type digits or pick an example -> the greedy prediction and the cross-attention map.

    `update(text=..., head=...)` redraws (see `Explorer`); `image` is the heatmap artist,
    `result` the HTML line with the prediction. The example menu shows the example on
    screen (blank for digits of one's own), so picking any entry changes the picture.
    `trained_on` (shortest, longest) is what the result line says the model saw in training.
    """

    def __init__(self, params: dict, config, examples: list[str], head: str = "mean",
                 trained_on: tuple[int, int] = (3, 10)):
        import ipywidgets as widgets
        from matplotlib.figure import Figure

        self.params, self.config, self.trained_on = params, config, trained_on
        self.example = widgets.Dropdown(options=examples, value=examples[0], description="example")
        self.example.observe(self._on_example, names="value")
        self.text = widgets.Text(value=examples[0], description="digits", continuous_update=False,
                                 placeholder="e.g. 3 1 4 1 5")
        self.head = widgets.ToggleButtons(
            options=["mean"] + [str(h) for h in range(config.num_heads)], value=head,
            description="head", style={"button_width": "64px"})  # room for "mean"
        self.result = widgets.HTML()
        self._predictions = {}
        # Outside pyplot: the inline backend never shows it. Projected in class like the still.
        fig = style.for_projection(Figure(figsize=MAP_FIGSIZE))
        self.view = CrossAttentionMap(fig)
        self.ax, self.image = self.view.ax, self.view.image
        # One background for every input up to about 25 tokens (one per size past that,
        # `CrossAttentionMap`); map, title and tokens move.
        self._build(fig, self.view.moving, [self.text, self.head],
                    [widgets.HBox([self.example, self.text]), self.head, self.result])
        cache_text(self.frames.canvas.get_renderer())
        self.update()

    def _on_example(self, change) -> None:
        if not self._quiet and change["new"] is not None:
            self.update(text=change["new"])

    def _predict(self, text: str):
        """predict_with_attention, remembered per input: a click on a head runs no model."""
        key = "".join(text.split())
        if key not in self._predictions:
            self._predictions[key] = predict_with_attention(self.params, self.config, text)
        return self._predictions[key]

    def update(self, text=None, head=None) -> None:
        """Redraw for the given values (None keeps the control's current value)."""
        start = time.perf_counter()
        self._set_controls((self.head, head), (self.text, text))
        with self._quietly():  # None, the blank entry, included
            self.example.value = self.text.value if self.text.value in self.example.options else None
        try:
            source, output, cross = self._predict(self.text.value)
        except ValueError as error:
            self.result.value = f"<span style='color:{style.ERROR_COLOUR}'>{html.escape(str(error))}</span>"
            return
        got, right = _verdict(source, output)
        verdict = "right" if right else f"wrong: the reverse is {' '.join(reversed(source))}"
        shortest, longest = self.trained_on
        self.result.value = (f"<code>{' '.join(source)}</code> &rarr; <b><code>{got}</code></b> "
                             f"({verdict}; the model was trained on {shortest} to {longest} digits)")
        self._show(start, background=self.view.draw(source, output, cross, self.head.value))


# ---- the experiments lab ------------------------------------------------------------------------

#: One line style per seed: seed 0 solid, seed 1 dashed, ...
SEED_STYLES = ("-", "--", ":", "-.")
#: Steps averaged into one point of a smoothed loss curve (centred; fewer at either end).
SMOOTHING_WINDOW = 9


def _is_regressor(name: str) -> bool:
    """Whether lab experiment `name` trains the regressor, whose loss is an MSE, not a cross-entropy."""
    from ..experiments import EXPERIMENTS

    return name in EXPERIMENTS and EXPERIMENTS[name].model == "regressor"


def smoothed(values, window: int = SMOOTHING_WINDOW) -> np.ndarray:
    """Centred moving average of `values`, as long as `values`: near either end the window
    shrinks to what is there, so the line starts and ends where the raw one does."""
    values = np.asarray(values, dtype=float)
    if len(values) == 0:
        return values
    half = window // 2
    sums = np.concatenate([[0.0], np.cumsum(values)])
    lo = np.clip(np.arange(len(values)) - half, 0, len(values))
    hi = np.clip(np.arange(len(values)) + half + 1, 0, len(values))
    return (sums[hi] - sums[lo]) / (hi - lo)


def _log_axis(ax) -> None:
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))          # 0.5, 1, 2, 5, ...
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))  # not 5x10^-1
    ax.yaxis.set_minor_formatter(NullFormatter())


#: The exact-match panel's least room past 0 and past 1, as a fraction of 0 to 1 (`_match_room`).
MATCH_MARGIN = 0.02


def _lab_axes(fig, mse: bool = False) -> dict:
    """The panels of a lab figure -> {"loss": ..., "mse": ... or None, "match": ...}: the
    cross-entropy per step, the regressor's MSE per step in a panel of its own (`mse`: only
    when a regressor is drawn; an MSE is no cross-entropy), held-out exact match."""
    axes = fig.subplots(1, 3 if mse else 2)
    for ax in axes:
        style.style_axes(ax)
        ax.set_xlabel("training step")
    panels = {"loss": axes[0], "mse": axes[1] if mse else None, "match": axes[-1]}
    _log_axis(panels["loss"])
    panels["loss"].set_ylabel("cross-entropy loss (log scale)")
    style.title(panels["loss"], "training loss")
    if mse:
        _log_axis(panels["mse"])
        panels["mse"].set_ylabel("MSE of the sum (log scale)")
        style.title(panels["mse"], "regressor's loss")
    panels["match"].set_ylim(-MATCH_MARGIN, 1 + MATCH_MARGIN)    # widened by `_match_room`
    panels["match"].set_ylabel("exact match (fraction)")
    style.title(panels["match"], "held-out, exactly right")
    return panels


def _match_room(ax) -> None:
    """Widen the exact-match panel's limits past 0 and past 1 by the widest line or marker
    drawn there, and a pixel: a run at 0 or at 1 is drawn whole, not cut by the axes' edge,
    and a run widened under others ("sum" under "sum, no positions", both at 0) shows around
    them on both sides. Call once the lines are drawn and the axes' box is laid out."""
    height = ax.get_window_extent().height                      # pixels
    px_per_pt = ax.get_figure(root=True).dpi / 72
    base = MATCH_MARGIN / (1 + 2 * MATCH_MARGIN) * height        # the least room, in pixels

    def room(value: float) -> float:
        reach = [_half_width_pt(line) for line in ax.get_lines() if np.any(np.isclose(line.get_ydata(), value))]
        return max([base, *(r * px_per_pt + 1 for r in reach)])

    below, above = room(0.0), room(1.0)
    inner = height - below - above                              # pixels from 0 to 1
    ax.set_ylim(-below / inner, 1 + above / inner)


def _half_width_pt(line) -> float:
    """How far, in points, a line and its markers reach from the points it joins."""
    marker = line.get_marker() not in (None, "", " ", "None", "none")
    return max(line.get_linewidth() / 2,
               (line.get_markersize() + line.get_markeredgewidth()) / 2 if marker else 0.0)


#: Faded: the experiments a figure shows for context, beside the ones its claim compares.
FADED_ALPHA = 0.25
#: How much wider a run's line, and larger its markers, for each run drawn over the same points.
UNDER_WIDTH, UNDER_MARKER = 1.2, 2.5


def _record_lines(panels: dict, name: str, record: dict, dashes: str, under: int = 0,
                  faded: bool = False) -> tuple:
    """Draw one run (experiment `name` on one seed) -> its (raw loss, smoothed loss, exact
    match) lines. The loss goes on the MSE panel for the regressor, on the cross-entropy
    panel otherwise; the raw loss is faint, its moving average (`smoothed`) drawn over it.
    `under`: how many experiments are drawn after this one. Each makes its lines wider and its
    markers larger, so that a run lying exactly under a later one (two experiments at an exact
    match of 0) still shows around it. `faded`: drawn see-through, for context."""
    color = style.experiment_colour(name)
    ax = panels["mse"] if _is_regressor(name) else panels["loss"]
    if ax is None:
        raise ValueError(f"{name!r} is the regressor: its MSE needs the panel of "
                         f"_lab_axes(fig, mse=True), not the cross-entropy axis")
    alpha = FADED_ALPHA if faded else 1.0
    raw, = ax.plot(record["step"], record["loss"], "-", color=color, linewidth=0.8, alpha=0.3 * alpha)
    smooth, = ax.plot(record["step"], smoothed(record["loss"]), dashes, color=color,
                      linewidth=1.6 + UNDER_WIDTH * under, alpha=alpha)
    match, = panels["match"].plot(record["eval_step"], record["exact_match"], dashes,
                                  marker=style.experiment_marker(name), markersize=4 + UNDER_MARKER * under,
                                  color=color, linewidth=1.5 + UNDER_WIDTH * under, alpha=alpha)
    return raw, smooth, match


def _lab_handles(names, seeds, faded=()) -> list:
    """Colour (and marker) = experiment, line style = seed: one entry each, not one per line.
    The `faded` experiments' entries are faded as their lines are."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=style.experiment_colour(name), linewidth=2,
                      marker=style.experiment_marker(name), markersize=5, label=name,
                      alpha=FADED_ALPHA if name in faded else 1.0)
               for name in names]
    handles += [Line2D([], [], color=style.GUIDE_COLOUR, linestyle=SEED_STYLES[i % len(SEED_STYLES)],
                       label=f"seed {seed}") for i, seed in enumerate(seeds)]
    return handles


def _lab_legend(ax, names, seeds):
    """The legend right of `ax` (the overlay widget's place)."""
    return ax.legend(handles=_lab_handles(names, seeds), fontsize=style.TICK_PT, loc="upper left",
                     bbox_to_anchor=(1.02, 1.0), borderaxespad=0)


def lab_task(name: str) -> str:
    """The task that lab experiment `name` trains on: "reverse" (the baseline's) or "sum"."""
    from ..experiments import EXPERIMENTS

    return EXPERIMENTS[name].train_options()["task"]


def lab_seeds(results: dict) -> list[int]:
    """The seeds of a run_all result {(name, seed): record}, in order."""
    return sorted({seed for _, seed in results})


def plot_experiments(results: dict, names, compare=None):
    """Learning curves of the experiments `names` from run_all's results, every seed drawn:
    cross-entropy loss per step (left), the regressor's MSE per step (middle, only when
    "sum, regressor" is among `names`), held-out exact match (right). Colour = experiment
    (`style.EXPERIMENT_COLOURS`, the same in every figure), line style = seed; the faint
    loss lines are the raw losses, the strong ones their moving average. One legend below.

    compare: the experiments that a claim compares (e.g. ["baseline", "Pre-LN, no warm-up"]):
    drawn strong, the others of `names` faded. With label smoothing among `names`, its floor
    (the least smoothed loss any model can reach) is drawn on the loss panel."""
    seeds = lab_seeds(results)
    faded = [] if compare is None else [name for name in names if name not in compare]
    fig = style.figure(3.7)
    panels = _lab_axes(fig, mse=any(_is_regressor(name) for name in names))
    order = sorted(names, key=lambda name: name not in faded)      # the compared ones on top
    for i, name in enumerate(order):
        for j, seed in enumerate(seeds):
            _record_lines(panels, name, results[name, seed], SEED_STYLES[j % len(SEED_STYLES)],
                          under=0 if name in faded else len(order) - 1 - i, faded=name in faded)
    if "label smoothing 0.1" in names:
        _smoothing_floor(panels["loss"], 0.1)
    fig.legend(handles=_legend_rows(_lab_handles(names, seeds, faded), len(names)),
               loc="outside lower center", fontsize=style.TICK_PT, ncols=max(len(names), len(seeds)))
    fig.draw_without_rendering()           # the constrained layout sizes the panels' boxes
    _match_room(panels["match"])
    return fig


def _smoothing_floor(ax, smoothing: float) -> None:
    """The least loss a model trained with label smoothing can reach (notebook 10, 9.6)."""
    from ..experiments import smoothed_loss_floor

    floor = smoothed_loss_floor(smoothing, len(VOCAB))
    ax.axhline(floor, color=style.experiment_colour("label smoothing 0.1"), linestyle=":", linewidth=1.2)
    ax.annotate(f"smoothing's floor {floor:.2f}", (0.0, floor), xycoords=("axes fraction", "data"),
                textcoords="offset points", xytext=(3, -2), ha="left", va="top",
                fontsize=style.TICK_PT, color=style.GUIDE_COLOUR)


def _legend_rows(handles, count: int) -> list:
    """The experiments' entries (the first `count`) on the legend's first row, the seeds' on
    the second: a legend fills column by column, so the two lists are interleaved, blank
    entries where one is shorter."""
    from matplotlib.lines import Line2D

    names, seeds = handles[:count], handles[count:]
    columns = max(len(names), len(seeds))
    blank = lambda: Line2D([], [], linestyle="none", label=" ")   # noqa: E731
    names += [blank() for _ in range(columns - len(names))]
    seeds += [blank() for _ in range(columns - len(seeds))]
    return [handle for pair in zip(names, seeds) for handle in pair]


class ExperimentOverlay(Explorer):
    """Pick experiments -> their learning curves overlaid, from results already computed.

    No training on a click: every line of every run is drawn once when the widget is built;
    `update(names=...)` only shows the chosen ones, widens a line that lies under a later one
    (`_uncover`: "sum" and "sum, no positions" both at an exact match of 0) and makes a new
    legend. Each experiment
    keeps its colour (`style.EXPERIMENT_COLOURS`), as in `plot_experiments`. The axes keep
    the limits of all runs, so their tick labels, the slow part of a draw, stay in the cached
    background (see `Frames`). `lines[name]` holds the (raw loss, smoothed loss, exact-match)
    lines of each seed of experiment `name`. The regressor's MSE, if it is among `names`,
    gets a panel of its own, between the cross-entropy and the exact match.
    """

    def __init__(self, results: dict, names, selected=("baseline", "no positions")):
        import ipywidgets as widgets

        self.seeds = lab_seeds(results)
        self.choice = widgets.SelectMultiple(options=list(names), value=tuple(selected),
                                             rows=min(len(names), 12), description="overlay",
                                             layout=widgets.Layout(width="320px"))
        # One row of panels per task (reverse, sum): "select all" never puts two tasks' losses
        # and exact matches on one axis.
        tasks = list(dict.fromkeys(lab_task(name) for name in names))
        fig = Figure(figsize=(style.COLUMN_IN, 3.4 * len(tasks)))  # outside pyplot: never shown inline
        rows = fig.subfigures(len(tasks), 1) if len(tasks) > 1 else [fig]
        self.task_panels = {}
        for task, row in zip(tasks, rows):
            mse = any(_is_regressor(name) for name in names if lab_task(name) == task)
            panels = self.task_panels[task] = _lab_axes(row, mse=mse)
            row.subplots_adjust(left=0.09, right=0.74, bottom=0.15, top=0.88 if len(tasks) > 1 else 0.90,
                                wspace=0.6 if mse else 0.38)
            if len(tasks) > 1:
                row.suptitle(f"the {task} task", fontsize=style.TITLE_PT, x=0.4)
        self.panels = self.task_panels[tasks[0]]
        self.loss_ax, self.mse_ax, self.match_ax = (self.panels[k] for k in ("loss", "mse", "match"))
        self.lines = {name: [_record_lines(self.task_panels[lab_task(name)], name, results[name, seed],
                                           SEED_STYLES[j % len(SEED_STYLES)])
                             for j, seed in enumerate(self.seeds)] for name in names}
        # The background is drawn once, with an empty legend: transparency hides a legend's
        # frame, not its texts. Every update paints the chosen lines and their legend over it.
        self.legend = self.match_ax.legend(handles=[])
        self.legend.set_visible(False)
        moving = [line for runs in self.lines.values() for run in runs for line in run]
        # The smoothed loss and the exact match of each run, in drawing order, with their
        # widths and marker sizes as drawn alone, and their points in pixels (`_uncover`).
        self.strong = [line for runs in self.lines.values() for run in runs for line in run[1:]]
        self.alone = {line: (line.get_linewidth(), line.get_markersize()) for line in self.strong}
        # The limits never change (the tick labels stay in the background): they make room
        # for every run shown at once, each line as wide as it is then.
        self.pixels = {}
        self._uncover()
        for panels in self.task_panels.values():
            _match_room(panels["match"])
        self.pixels = {}                    # the points' pixels under the limits just set
        self.hint = widgets.HTML("Ctrl-click (Cmd-click on a Mac) picks several experiments.")
        self._build(fig, moving + [self.legend], [self.choice],
                    [widgets.HBox([self.choice, self.hint])])
        cache_text(self.frames.canvas.get_renderer())
        self.frames.png(background="all runs")
        self.update()

    def update(self, names=None) -> None:
        """Show the experiments `names` (None keeps the current choice)."""
        start = time.perf_counter()
        self._set_controls((self.choice, None if names is None else tuple(names)))
        chosen = list(self.choice.value)
        for name, runs in self.lines.items():
            for run in runs:
                for line in run:
                    line.set_visible(name in chosen)
        self._uncover()
        legend = _lab_legend(self.match_ax, chosen, self.seeds)
        moving = self.frames.moving
        moving[moving.index(self.legend)] = self.legend = legend  # the new legend moves instead
        self._show(start, background="all runs")

    def _uncover(self) -> None:
        """Give each shown line as many steps of width and marker size as there are shown lines
        drawn after it over the same points, as `plot_experiments` does (`_record_lines`,
        `under`): a run under another still shows around it. The axes' limits never change,
        so each line's points are turned into pixels once."""
        shown = [line for line in self.strong if line.get_visible()]
        for line in shown:
            if line not in self.pixels:
                self.pixels[line] = line.get_transform().transform(line.get_xydata().astype(float))
        for i, line in enumerate(shown):
            points = self.pixels[line]
            under = sum(other.axes is line.axes and len(self.pixels[other]) == len(points)
                        and bool(np.all(np.abs(self.pixels[other] - points) <= 1.0))
                        for other in shown[i + 1:])
            width, size = self.alone[line]
            line.set_linewidth(width + UNDER_WIDTH * under)
            line.set_markersize(size + UNDER_MARKER * under)
