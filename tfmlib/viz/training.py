"""Notebook 10: training curves, and what the trained model attends to.

`ReverseExplorer` is the widget: type digits (or pick an example), see the
greedy prediction and the cross-attention map of the last decoder layer.
"""
from __future__ import annotations

import html
import time

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from ..tokenization import decode, invert_vocab
from ..training import VOCAB, attention_maps, digits_to_ids, greedy_decode
from .common import Explorer

ID_TO_TOKEN = invert_vocab(VOCAB)


def plot_training_curves(history: dict):
    """Loss per step (log scale) and held-out exact match per evaluation."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.4))
    left.semilogy(history["step"], history["loss"], linewidth=1)
    left.set_xlabel("training step")
    left.set_ylabel("cross-entropy loss (log scale)")
    left.set_title("training loss")
    right.plot(history["eval_step"], history["exact_match"], "o-")
    right.annotate(f"final: {history['exact_match'][-1]:.1%}",
                   (history["eval_step"][-1], history["exact_match"][-1]),
                   textcoords="offset points", xytext=(-10, -22), ha="right", fontsize=9)
    right.axhline(0.99, color="0.5", linestyle="--", linewidth=1, label="99 %")
    right.set_ylim(-0.02, 1.02)
    right.set_xlabel("training step")
    right.set_ylabel("exact match (fraction)")
    right.set_title("held-out sequences decoded exactly right")
    right.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
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
    predicted = greedy_decode(params, src, config)             # (1, Lt + 1), starts with <bos>
    if (predicted == VOCAB["<pad>"]).any():
        predicted = predicted[:, : int((predicted != VOCAB["<pad>"]).sum())]
    tgt_in = predicted[:, :-1]                                 # what the decoder read
    cross = attention_maps(params, src, tgt_in, config)["decoder_cross"][-1]  # (1, H, Lt, Ls)
    return tokens(src[0]), tokens(predicted[0, 1:]), cross[0]


def plot_cross_attention(params: dict, config, text: str):
    """One heatmap per head of the last decoder layer's cross-attention, and their mean."""
    source, output, cross = predict_with_attention(params, config, text)
    heads = cross.size(0)
    fig, axes = plt.subplots(1, heads + 1, figsize=(2.6 * (heads + 1), 2.9), sharey=True)
    panels = [(f"head {h}", cross[h]) for h in range(heads)] + [("mean of heads", cross.mean(0))]
    for ax, (title, weights) in zip(axes, panels):
        image = ax.imshow(weights.numpy(), cmap="viridis", vmin=0, vmax=1)
        ax.set_xticks(range(len(source)), labels=source)
        ax.set_yticks(range(len(output)), labels=output)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("source token (key)")
    axes[0].set_ylabel("token being written (query)")
    bar = fig.colorbar(image, ax=list(axes), fraction=0.02, pad=0.01)
    bar.set_label("attention weight")
    fig.suptitle(f"last decoder layer's cross-attention, input '{' '.join(source)}'", y=1.04)
    return fig


def _verdict(source: list[str], output: list[str]) -> tuple[str, bool]:
    expected = " ".join(reversed(source))
    got = decode([VOCAB[t] for t in output], VOCAB)
    return got, got == expected


def _draw_map(ax, image, source, output, cross, head: str):
    """Put head `head` ("mean" or "0".."H-1") of cross (H, Lt, Ls) into the image artist."""
    weights = cross.mean(0) if head == "mean" else cross[int(head)]
    rows, cols = weights.shape
    image.set_data(weights.numpy())
    image.set_extent((-0.5, cols - 0.5, rows - 0.5, -0.5))
    ax.set_xticks(range(cols), labels=source)
    ax.set_yticks(range(rows), labels=output)
    got, right = _verdict(source, output)
    ax.set_title(f"'{' '.join(source)}' -> '{got}' ({'right' if right else 'wrong'})\n"
                 f"cross-attention, last decoder layer, head: {head}", fontsize=10)


def _new_map(fig):
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(np.zeros((2, 2)), cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
    ax.set_xlabel("source token (key)")
    ax.set_ylabel("token being written (query)")
    bar = fig.colorbar(image, ax=ax, fraction=0.04)
    bar.set_label("attention weight")
    return ax, image


def plot_cross_attention_mean(params: dict, config, text: str, head: str = "mean"):
    """Static version of the widget's view: one map of the last decoder layer's cross-attention."""
    source, output, cross = predict_with_attention(params, config, text)
    fig = plt.figure(figsize=(5.2, 4.0))
    ax, image = _new_map(fig)
    _draw_map(ax, image, source, output, cross, head)
    return fig


class ReverseExplorer(Explorer):
    """Type digits or pick an example -> the greedy prediction and the cross-attention map.

    `update(text=..., head=...)` redraws (see `Explorer`); `image` is the heatmap artist,
    `result` the HTML line with the prediction. The example menu shows the example on
    screen (blank for digits of one's own), so picking any entry changes the picture.
    """

    def __init__(self, params: dict, config, examples: list[str], head: str = "mean"):
        import ipywidgets as widgets

        self.params, self.config = params, config
        self.example = widgets.Dropdown(options=examples, value=examples[0], description="example")
        self.example.observe(self._on_example, names="value")
        self.text = widgets.Text(value=examples[0], description="digits", continuous_update=False,
                                 placeholder="e.g. 3 1 4 1 5")
        self.head = widgets.ToggleButtons(
            options=["mean"] + [str(h) for h in range(config.num_heads)], value=head,
            description="head", style={"button_width": "64px"})  # room for "mean"
        self.result = widgets.HTML()
        fig = Figure(figsize=(5.2, 4.0))  # outside pyplot: the inline backend never shows it
        self.ax, self.image = _new_map(fig)
        # The ticks (the tokens) change with the input: one background per input; switching
        # heads only repaints the map and its title.
        self._build(fig, [self.image, self.ax.title], [self.text, self.head],
                    [widgets.HBox([self.example, self.text]), self.head, self.result])
        self.update()

    def _on_example(self, change) -> None:
        if not self._quiet and change["new"] is not None:
            self.update(text=change["new"])

    def update(self, text=None, head=None) -> None:
        """Redraw for the given values (None keeps the control's current value)."""
        start = time.perf_counter()
        self._set_controls((self.head, head), (self.text, text))
        with self._quietly():  # None, the blank entry, included
            self.example.value = self.text.value if self.text.value in self.example.options else None
        try:
            source, output, cross = predict_with_attention(self.params, self.config, self.text.value)
        except ValueError as error:
            self.result.value = f"<span style='color:#b3261e'>{html.escape(str(error))}</span>"
            return
        got, right = _verdict(source, output)
        verdict = "right" if right else f"wrong: the reverse is {' '.join(reversed(source))}"
        self.result.value = (f"<code>{' '.join(source)}</code> &rarr; <b><code>{got}</code></b> "
                             f"({verdict}; the model was trained on 3 to 8 digits)")
        _draw_map(self.ax, self.image, source, output, cross, self.head.value)
        self._show(start, background=(tuple(source), tuple(output)))


# ---- the experiments lab ------------------------------------------------------------------------

#: Okabe and Ito's colour-blind-safe palette, one colour per experiment of a figure.
EXPERIMENT_COLORS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#000000")
#: One line style per seed: seed 0 solid, seed 1 dashed, ...
SEED_STYLES = ("-", "--", ":", "-.")


def _color(index: int) -> str:
    """The colour of the index-th experiment of a figure."""
    return EXPERIMENT_COLORS[index % len(EXPERIMENT_COLORS)]


def _lab_axes(fig):
    """The two panels of every lab figure: training loss per step, held-out exact match."""
    loss_ax, match_ax = fig.subplots(1, 2)
    loss_ax.set_yscale("log")
    loss_ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))          # 0.5, 1, 2, 5, ...
    loss_ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))  # not 5x10^-1
    loss_ax.yaxis.set_minor_formatter(NullFormatter())
    loss_ax.set_xlabel("training step")
    loss_ax.set_ylabel("training loss (log scale)")
    loss_ax.set_title("training loss")
    match_ax.set_ylim(-0.02, 1.02)
    match_ax.set_xlabel("training step")
    match_ax.set_ylabel("exact match (fraction)")
    match_ax.set_title("held-out sequences answered exactly right")
    return loss_ax, match_ax


def _record_lines(loss_ax, match_ax, record: dict, color: str, style: str):
    """Draw one run (an experiment on one seed) -> its (loss line, exact-match line)."""
    loss_line, = loss_ax.plot(record["step"], record["loss"], style, color=color, linewidth=1)
    match_line, = match_ax.plot(record["eval_step"], record["exact_match"], style, marker="o",
                                markersize=4, color=color, linewidth=1.5)
    return loss_line, match_line


def _lab_legend(ax, names, seeds):
    """Colour = experiment, line style = seed: one entry each, not one per line."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=_color(i), linewidth=2, label=name) for i, name in enumerate(names)]
    handles += [Line2D([], [], color="0.4", linestyle=SEED_STYLES[i % len(SEED_STYLES)],
                       label=f"seed {seed}") for i, seed in enumerate(seeds)]
    return ax.legend(handles=handles, fontsize=9, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                     borderaxespad=0)


def lab_seeds(results: dict) -> list[int]:
    """The seeds of a run_all result {(name, seed): record}, in order."""
    return sorted({seed for _, seed in results})


def plot_experiments(results: dict, names):
    """Learning curves of the experiments `names` from run_all's results, every seed drawn:
    loss per step (left) and held-out exact match (right); colour = experiment, style = seed."""
    seeds = lab_seeds(results)
    fig = plt.figure(figsize=(10, 3.4), layout="constrained")
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
        fig = Figure(figsize=(10, 3.4))  # outside pyplot: the inline backend never shows it
        self.loss_ax, self.match_ax = _lab_axes(fig)
        fig.subplots_adjust(left=0.075, right=0.785, bottom=0.16, top=0.90, wspace=0.3)
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
