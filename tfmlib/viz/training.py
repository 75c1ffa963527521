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
from .common import Explorer
from .textcache import cache_text

ID_TO_TOKEN = invert_vocab(VOCAB)


def plot_training_curves(history: dict):
    """Loss per step (log scale) and held-out exact match per evaluation."""
    fig, (left, right) = style.new_figure(3.2, style.COLUMN_IN, 1, 2)
    left.semilogy(history["step"], history["loss"], linewidth=1, color=style.PALETTE[0])
    left.set_xlabel("training step")
    left.set_ylabel("cross-entropy loss (log scale)")
    style.title(left, "training loss")
    right.plot(history["eval_step"], history["exact_match"], "o-", color=style.PALETTE[0])
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


QUERY_LABEL = "query: the token being written"
KEY_LABEL = "key: the source digit looked at"


def plot_cross_attention(params: dict, config, text: str):
    """One heatmap per head of the last decoder layer's cross-attention, and their mean."""
    source, output, cross = predict_with_attention(params, config, text)
    heads = cross.size(0)
    fig, axes = style.new_figure(3.0, style.COLUMN_IN, 1, heads + 1, sharey=True)
    panels = [(f"head {h}", cross[h]) for h in range(heads)] + [("mean of heads", cross.mean(0))]
    for i, (ax, (name, weights)) in enumerate(zip(axes, panels)):
        image = style.attention_heatmap(ax, weights, output, source, title_text=name,
                                        colorbar_=False, xlabel="source digit (key)",
                                        ylabel=QUERY_LABEL if i == 0 else "")
        ax.tick_params(axis="x", rotation=0)
    style.colorbar(fig, image, list(axes), style.ATTENTION_CBAR_LABEL.split(" (")[0],
                   ticks=[0, 0.5, 1], fraction=0.03, pad=0.02)
    fig.suptitle(f"last decoder layer's cross-attention, input '{' '.join(source)}'")
    return fig


def _verdict(source: list[str], output: list[str]) -> tuple[str, bool]:
    expected = " ".join(reversed(source))
    got = decode([VOCAB[t] for t in output], VOCAB)
    return got, got == expected


#: The map's figure: room for 31 source digits across and 32 written tokens down.
MAP_FIGSIZE = (6.6, 5.8)
MAP_BOX = (0.2, 0.14, 0.6, 0.72)          # the axes, fixed: labels are texts placed around it
MAP_BAR_BOX = (0.855, 0.14, 0.025, 0.72)
MAX_TOKENS = 34                            # labels kept for either axis (config.max_len + 2)


class CrossAttentionMap:
    """One head's (or the mean) cross-attention map on a fixed axes, token labels as texts.

    The axes never moves and the tokens are plain texts moved for each input, so one cached
    background (frame, axis names, colour bar) serves every input (see `StackPicture` in
    encoder_decoder.py for the same idea).
    """

    def __init__(self, fig):
        self.ax = fig.add_axes(MAP_BOX)
        self.image = self.ax.imshow(np.zeros((2, 2)), cmap=style.ATTENTION_CMAP, vmin=0, vmax=1,
                                    interpolation="nearest", aspect="auto")
        self.ax.set_xticks([])
        self.ax.set_yticks([])
        fig.text(MAP_BOX[0] + MAP_BOX[2] / 2, 0.015, KEY_LABEL, ha="center", va="bottom",
                 fontsize=style.LABEL_PT)
        fig.text(0.015, MAP_BOX[1] + MAP_BOX[3] / 2, QUERY_LABEL, ha="left", va="center",
                 rotation=90, fontsize=style.LABEL_PT)
        bar = fig.colorbar(self.image, cax=fig.add_axes(MAP_BAR_BOX), ticks=[0, 0.5, 1])
        bar.set_label(style.ATTENTION_CBAR_LABEL.split(" (")[0], fontsize=style.LABEL_PT)
        bar.ax.tick_params(labelsize=style.TICK_PT)
        self.title = fig.text(0.5, 0.985, "", ha="center", va="top", fontsize=style.TITLE_PT)
        text = dict(fontsize=style.TICK_PT, clip_on=False)
        self.rows = [self.ax.text(-0.7, i, "", ha="right", va="center", **text)
                     for i in range(MAX_TOKENS)]
        self.cols = [self.ax.text(j, 0, "", ha="center", va="top", **text)
                     for j in range(MAX_TOKENS)]
        self.moving = [self.image, self.title, *self.rows, *self.cols]

    def draw(self, source, output, cross, head: str) -> None:
        """Show head `head` ("mean" or "0".."H-1") of cross (H, Lt, Ls)."""
        weights = cross.mean(0) if head == "mean" else cross[int(head)]
        rows, cols = weights.shape
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
        got, right = _verdict(source, output)
        self.title.set_text(f"last decoder layer's cross-attention, head: {head}\n"
                            f"{len(source)} digits in, the reverse {'right' if right else 'wrong'}")


def plot_cross_attention_mean(params: dict, config, text: str, head: str = "mean"):
    """Static version of the widget's view: one map of the last decoder layer's cross-attention."""
    source, output, cross = predict_with_attention(params, config, text)
    fig, _ = style.new_figure(MAP_FIGSIZE[1], MAP_FIGSIZE[0])
    fig.set_layout_engine("none")          # the labels' room is fixed in MAP_BOX
    fig.delaxes(fig.axes[0])
    CrossAttentionMap(fig).draw(source, output, cross, head)
    return fig


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
        fig = Figure(figsize=MAP_FIGSIZE)  # outside pyplot: the inline backend never shows it
        self.view = CrossAttentionMap(fig)
        self.ax, self.image = self.view.ax, self.view.image
        # The axes never moves: one background for every input; map, title and tokens move.
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
        self.view.draw(source, output, cross, self.head.value)
        self._show(start, background="every input")


# ---- the experiments lab ------------------------------------------------------------------------

#: The course's colour-blind-safe palette (Okabe and Ito), one colour per experiment of a figure.
EXPERIMENT_COLORS = style.PALETTE
#: One line style per seed: seed 0 solid, seed 1 dashed, ...
SEED_STYLES = ("-", "--", ":", "-.")


def _color(index: int) -> str:
    """The colour of the index-th experiment of a figure."""
    return EXPERIMENT_COLORS[index % len(EXPERIMENT_COLORS)]


def _lab_axes(fig):
    """The two panels of every lab figure: training loss per step, held-out exact match."""
    loss_ax, match_ax = fig.subplots(1, 2)
    for ax in (loss_ax, match_ax):
        style.style_axes(ax)
    loss_ax.set_yscale("log")
    loss_ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))          # 0.5, 1, 2, 5, ...
    loss_ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))  # not 5x10^-1
    loss_ax.yaxis.set_minor_formatter(NullFormatter())
    loss_ax.set_xlabel("training step")
    loss_ax.set_ylabel("training loss (log scale)")
    style.title(loss_ax, "training loss")
    match_ax.set_ylim(-0.02, 1.02)
    match_ax.set_xlabel("training step")
    match_ax.set_ylabel("exact match (fraction)")
    style.title(match_ax, "held-out, exactly right")
    return loss_ax, match_ax


def _record_lines(loss_ax, match_ax, record: dict, color: str, dashes: str):
    """Draw one run (an experiment on one seed) -> its (loss line, exact-match line)."""
    loss_line, = loss_ax.plot(record["step"], record["loss"], dashes, color=color, linewidth=1)
    match_line, = match_ax.plot(record["eval_step"], record["exact_match"], dashes, marker="o",
                                markersize=4, color=color, linewidth=1.5)
    return loss_line, match_line


def _lab_legend(ax, names, seeds):
    """Colour = experiment, line style = seed: one entry each, not one per line."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=_color(i), linewidth=2, label=name) for i, name in enumerate(names)]
    handles += [Line2D([], [], color=style.GUIDE_COLOUR, linestyle=SEED_STYLES[i % len(SEED_STYLES)],
                       label=f"seed {seed}") for i, seed in enumerate(seeds)]
    return ax.legend(handles=handles, fontsize=style.TICK_PT, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                     borderaxespad=0)


def lab_seeds(results: dict) -> list[int]:
    """The seeds of a run_all result {(name, seed): record}, in order."""
    return sorted({seed for _, seed in results})


def plot_experiments(results: dict, names):
    """Learning curves of the experiments `names` from run_all's results, every seed drawn:
    loss per step (left) and held-out exact match (right); colour = experiment, style = seed."""
    seeds = lab_seeds(results)
    fig, _ = style.new_figure(3.4)
    fig.delaxes(fig.axes[0])              # _lab_axes makes the two panels
    loss_ax, match_ax = _lab_axes(fig)
    for i, name in enumerate(names):
        for j, seed in enumerate(seeds):
            _record_lines(loss_ax, match_ax, results[name, seed], _color(i),
                          SEED_STYLES[j % len(SEED_STYLES)])
    _lab_legend(match_ax, names, seeds)
    return fig


class ExperimentOverlay(Explorer):
    """Pick experiments -> their learning curves overlaid, from results already computed.

    No training on a click: every line of every run is drawn once when the widget is built;
    `update(names=...)` only shows the chosen ones (colours follow the order of the choice)
    and makes a new legend. The axes keep the limits of all runs, so their tick labels, the
    slow part of a draw, stay in the cached background (see `Frames`). `lines[name]` holds
    the (loss, exact-match) lines of each seed of experiment `name`.

    Give it experiments whose losses compare: the regressor's MSE is not a cross-entropy.
    """

    def __init__(self, results: dict, names, selected=("baseline", "no positions")):
        import ipywidgets as widgets

        self.seeds = lab_seeds(results)
        self.choice = widgets.SelectMultiple(options=list(names), value=tuple(selected),
                                             rows=min(len(names), 12), description="overlay",
                                             layout=widgets.Layout(width="320px"))
        fig = Figure(figsize=(style.COLUMN_IN, 3.4))  # outside pyplot: the inline backend never shows it
        self.loss_ax, self.match_ax = _lab_axes(fig)
        fig.subplots_adjust(left=0.09, right=0.74, bottom=0.15, top=0.90, wspace=0.38)
        self.lines = {name: [_record_lines(self.loss_ax, self.match_ax, results[name, seed],
                                           EXPERIMENT_COLORS[0], SEED_STYLES[j % len(SEED_STYLES)])
                             for j, seed in enumerate(self.seeds)] for name in names}
        # The background is drawn once, with an empty legend: transparency hides a legend's
        # frame, not its texts. Every update paints the chosen lines and their legend over it.
        self.legend = self.match_ax.legend(handles=[])
        self.legend.set_visible(False)
        moving = [line for runs in self.lines.values() for pair in runs for line in pair]
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
            shown = name in chosen
            for pair in runs:
                for line in pair:
                    line.set_visible(shown)
                    if shown:
                        line.set_color(_color(chosen.index(name)))
        legend = _lab_legend(self.match_ax, chosen, self.seeds)
        moving = self.frames.moving
        moving[moving.index(self.legend)] = self.legend = legend  # the new legend moves instead
        self._show(start, background="all runs")
