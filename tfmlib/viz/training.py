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
    right.annotate(f"final: {history['exact_match'][-1]:.3f}",
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
