"""Bonus notebook b1: the language model's training curves against its baselines, and what a
trained block attends to.

`AttentionExplorer` is the widget: pick a sentence, a block and a head, see that head's causal
attention over the sentence's characters (the future is grey: masked).
"""
from __future__ import annotations

import time

import torch

from ..language_model import encode_chars, lm_attention_weights
from . import style
from .common import Explorer

#: Reference losses (counting characters, the grammar's floor): colours apart from the two curves'.
BASELINE_COLOURS = (style.PALETTE[6], style.PALETTE[3], style.PALETTE[5])
SPACE = "\u2423"  # ␣: a space made visible as a tick label


def plot_training(history: dict, baselines: dict[str, float]):
    """Training loss per step, validation loss per evaluation, and each of `baselines`
    ({label: loss on the validation text}) as a dashed line; all in nats per character."""
    fig, ax = style.new_figure(3.4)
    ax.plot(history["step"], history["loss"], linewidth=1, color=style.IDEA_COLOURS["train"], alpha=0.6,
            label="training batch")
    ax.plot(history["eval_step"], history["val_loss"], "o-", color=style.IDEA_COLOURS["held-out"],
            label="validation text")
    for i, (name, loss) in enumerate(baselines.items()):
        ax.axhline(loss, color=BASELINE_COLOURS[i % len(BASELINE_COLOURS)],
                   linestyle=style.LINESTYLES[i + 1], linewidth=1.5, label=name)
    ax.set_ylim(0, None)
    ax.set_xlabel("training step")
    ax.set_ylabel("cross-entropy (nats per character)")
    style.title(ax, "the language model against counting characters")
    ax.legend(loc="upper right", fontsize=style.TICK_PT)
    return fig


def char_labels(text: str) -> list[str]:
    return [SPACE if c == " " else c for c in text]


class _AttentionView:
    """One causal attention map on one axes: characters on both axes, the future grey."""

    def __init__(self, fig, ax, length: int):
        self.fig, self.ax = fig, ax
        self.future = torch.ones(length, length, dtype=torch.bool).triu(diagonal=1)  # masked
        self.image = style.attention_heatmap(ax, torch.zeros(length, length), masked=self.future)

    def draw(self, text: str, weights: torch.Tensor, layer: int, head: str) -> None:
        """weights: (num_layers of) (H, L, L) for `text`; head "mean" or "0".."H-1"."""
        chosen = weights[layer]                                             # (H, L, L)
        map_ = chosen.mean(0) if head == "mean" else chosen[int(head)]      # (L, L)
        self.image.set_data(style.masked_weights(map_, self.future))
        labels = char_labels(text)
        self.ax.set_xticks(range(len(labels)), labels=labels, rotation=0)
        self.ax.set_yticks(range(len(labels)), labels=labels)
        style.title(self.ax, f"block {layer}, head {head}: each row (a character) looks back")


def attention_of(params: dict, config, vocab: dict, text: str) -> list[torch.Tensor]:
    """The (H, L, L) attention weights of every block for one text of at most max_len characters."""
    ids = encode_chars(text, vocab)[None]                                  # (1, L)
    return [w[0] for w in lm_attention_weights(params, ids, config)]       # per block (H, L, L)


def plot_attention(params: dict, config, vocab: dict, text: str, layer: int = 0, head: str = "mean",
                   row: tuple[int, str] | None = None, column: tuple[int, str] | None = None):
    """Static version of the widget's view. `row`, `column`: (index, what it is), the query row
    and the key column that the text asks the reader to find, outlined in the highlight colour
    and named below the map."""
    from matplotlib.patches import Rectangle

    fig, ax = style.new_figure(6.0, 7.0)
    _AttentionView(fig, ax, len(text)).draw(text, attention_of(params, config, vocab, text), layer, head)
    notes = []
    for mark, box in ((row, lambda i: ((-0.5, i - 0.5), len(text), 1)),
                      (column, lambda j: ((j - 0.5, -0.5), 1, len(text)))):
        if mark is not None:
            xy, width, height = box(mark[0])
            ax.add_patch(Rectangle(xy, width, height, fill=False, edgecolor=style.HIGHLIGHT_COLOUR,
                                   linewidth=2.5, clip_on=False))
            notes.append(mark[1])
    if notes:
        fig.supxlabel("outlined: " + "; ".join(notes), fontsize=style.TICK_PT,
                      color=style.GUIDE_COLOUR)
    return fig


class AttentionExplorer(Explorer):
    """Sentence, block and head -> the trained model's causal attention over the characters.

    All sentences have the same length, so the axes never move: each sentence gets one cached
    background (its tick labels), and a block or head change repaints only the map and title.
    `update(text=..., layer=..., head=...)` redraws (see `Explorer`).
    """

    def __init__(self, params: dict, config, vocab: dict, texts: list[str], layer: int = 0,
                 head: str = "mean"):
        import ipywidgets as widgets

        lengths = {len(t) for t in texts}
        if len(lengths) != 1 or lengths.pop() > config.max_len:
            raise ValueError(f"texts: expected sentences of one length, at most config.max_len = "
                             f"{config.max_len}, got lengths {sorted(len(t) for t in texts)}")
        self.params, self.config, self.vocab = params, config, vocab
        self.text = widgets.Dropdown(options=texts, value=texts[0], description="sentence",
                                     layout=widgets.Layout(width="420px"))
        self.layer = widgets.ToggleButtons(options=list(range(config.num_layers)), value=layer,
                                           description="block")
        self.head = widgets.ToggleButtons(options=["mean"] + [str(h) for h in range(config.num_heads)],
                                          value=head, description="head",
                                          style={"button_width": "64px"})
        self._weights = {}
        fig, ax = style.new_figure(6.0, 7.0, pyplot=False)
        self.view = _AttentionView(fig, ax, len(texts[0]))
        self.view.draw(texts[0], self._attention(texts[0]), layer, head)
        style.freeze_layout(fig)  # one length, one-character labels: the layout never changes
        self._build(fig, [self.view.image, ax.title], [self.text, self.layer, self.head],
                    [self.text, self.layer, self.head])
        self.update()

    def _attention(self, text: str) -> list[torch.Tensor]:
        """attention_of, remembered per sentence: a click on a head runs no model."""
        if text not in self._weights:
            self._weights[text] = attention_of(self.params, self.config, self.vocab, text)
        return self._weights[text]

    def update(self, text=None, layer=None, head=None) -> None:
        """Redraw for the given values (None keeps the control's current value)."""
        start = time.perf_counter()
        self._set_controls((self.text, text), (self.layer, layer), (self.head, head))
        self.view.draw(self.text.value, self._attention(self.text.value), self.layer.value,
                       self.head.value)
        self._show(start, background=self.text.value)
