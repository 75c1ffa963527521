"""Plots and the tokenizer explorer of notebook 02 (sentences -> a padded (B, L) batch).

The batch is drawn as a grid: one row per sentence (the B axis), one column per
position (the L axis); each cell shows its token and its id, coloured by kind
(word, <bos>/<eos>, <unk>, <pad>; <pad> in the grey of masked positions). The grid
is one image plus a fixed pool of text artists, so a redraw changes data and strings
but creates no new artists.
"""
from __future__ import annotations

import functools
import html
import time

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import LineCollection

from ..tokenization import BOS, EOS, PAD, UNK, encode, invert_vocab, pad_batch, tokenize
from . import style
from .common import Explorer
from .style import ERROR_COLOUR, TICK_PT, TOKEN_KIND_CMAP, figure, freeze_layout, new_figure

KINDS = ("word", "bos/eos", "<unk>", "<pad>")
COLOURS = style.TOKEN_KIND_COLOURS
TEXT_COLOURS = ("#1a1a1a", "#1a1a1a", "#7a0000", "#4d4d4d")
# Longest typed sentence the grid shows (L <= 12 with <bos>/<eos>): at 12 columns a cell is wide
# enough for every word of the running example ("attention" was cut to "atten…" at 16, which
# reads as a subword in a lesson on tokens).
MAX_TOKENS = 10
MAX_COLS = MAX_TOKENS + 2
MAX_ROWS = 4


def cell_kind(token: str) -> int:
    """Index into KINDS for one token of the padded batch."""
    if token == PAD:
        return 3
    if token == UNK:
        return 2
    if token in (BOS, EOS):
        return 1
    return 0


class BatchGrid:
    """A (B, L) batch drawn on `ax` as labelled cells; `draw(batch, vocab, ...)` redraws in place.

    `fixed_width=True` keeps the axes `max_cols` cells wide: a longer batch grows to the right
    and the cells already drawn stay where they are.
    """

    def __init__(self, ax, max_rows: int = MAX_ROWS, max_cols: int = MAX_COLS, legend: bool = True,
                 fixed_width: bool = False):
        self.ax, self.max_rows, self.max_cols, self.fixed_width = ax, max_rows, max_cols, fixed_width
        self.image = ax.imshow(np.zeros((1, 1)), cmap=TOKEN_KIND_CMAP, vmin=-0.5,
                               vmax=len(KINDS) - 0.5, interpolation="nearest", aspect="auto")
        self.borders = LineCollection([], colors="white", linewidths=3)
        ax.add_collection(self.borders)
        self.cells = [[ax.text(c, r, "", ha="center", va="center", fontsize=TICK_PT, linespacing=1.5)
                       for c in range(max_cols)] for r in range(max_rows)]
        ax.xaxis.tick_top()
        ax.xaxis.set_label_position("top")
        ax.tick_params(length=0)
        # A grid kept wide for longer batches starts at the left: its axis name too, over it.
        ax.set_xlabel("position  (axis 1, L)", loc="left" if fixed_width else "center")
        ax.set_ylabel("sentence  (axis 0, B)")
        for spine in ax.spines.values():
            spine.set_visible(False)
        if legend:
            handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS]
            ax.legend(handles, KINDS, loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=4,
                      frameon=False)

    def draw(self, batch, vocab: dict, row_labels=None, unknown_rows=()) -> None:
        """batch: (B, L) ids. Cells of rows in `unknown_rows` whose token became <unk> are red."""
        ids = np.asarray(batch.tolist() if hasattr(batch, "tolist") else batch)
        rows, cols = ids.shape
        if rows > self.max_rows or cols > self.max_cols:
            raise ValueError(f"batch: the grid draws at most ({self.max_rows}, {self.max_cols}), "
                             f"got {ids.shape}")
        id_to_token = invert_vocab(vocab)
        tokens = [[id_to_token.get(int(i), "?") for i in row] for row in ids]
        kinds = np.array([[cell_kind(t) for t in row] for row in tokens])
        self.image.set_data(kinds)
        self.image.set_extent((-0.5, cols - 0.5, rows - 0.5, -0.5))
        width = self.max_cols if self.fixed_width else cols                 # in cells
        self.ax.set_xlim(-0.5, width - 0.5)
        self.ax.set_xticks(range(cols), labels=[str(c) for c in range(cols)])
        self.ax.set_ylim(rows - 0.5, -0.5)
        lines = [[(c - 0.5, -0.5), (c - 0.5, rows - 0.5)] for c in range(1, cols)]
        lines += [[(-0.5, r - 0.5), (cols - 0.5, r - 0.5)] for r in range(1, rows)]
        self.borders.set_segments(lines)
        cell_px = self._cell_px(width)
        for r in range(self.max_rows):
            for c in range(self.max_cols):
                text = self.cells[r][c]
                if r < rows and c < cols:
                    kind = kinds[r, c]
                    text.set_text(f"{_cut(tokens[r][c], cell_px, self.ax.figure)}\n{ids[r, c]}")
                    text.set_color(TEXT_COLOURS[kind])
                    text.set_fontweight("bold" if r in unknown_rows and kind == 2 else "normal")
                    text.set_visible(True)
                else:
                    text.set_visible(False)
        labels = row_labels if row_labels is not None else [str(r) for r in range(rows)]
        self.ax.set_yticks(range(rows), labels=labels)

    def _cell_px(self, cols: int) -> float:
        """The width in pixels of one cell, `cols` cells to the axes' width."""
        return self.ax.get_position().width * self.ax.figure.bbox.width / cols


@functools.lru_cache(maxsize=4096)
def _text_px(text: str, dpi: float) -> float:
    """The width of `text` in pixels at the cells' font size (measured once per text and dpi)."""
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.font_manager import FontProperties

    width, _, _ = RendererAgg(1, 1, dpi).get_text_width_height_descent(
        text, FontProperties(size=TICK_PT), ismath=False)
    return width


def _cut(token: str, cell_px: float, fig) -> str:
    """The token, or (a typed word longer than its cell) its start and an ellipsis."""
    room = cell_px - 4                                     # a little margin on either side
    if _text_px(token, fig.dpi) <= room:
        return token
    while len(token) > 1 and _text_px(token + "…", fig.dpi) > room:
        token = token[:-1]
    return token + "…"


def plot_batch(batch, vocab: dict, title: str | None = None, row_labels=None, height: float = 2.8,
               unknown_rows=()):
    """Static figure: the padded (B, L) batch as a grid of tokens and ids (see BatchGrid.draw)."""
    fig, ax = new_figure(height)
    style.title(ax, title if title is not None else
                f"the padded batch: shape (B, L) = {tuple(batch.shape)}, dtype {batch.dtype}")
    grid = BatchGrid(ax, max_rows=batch.shape[0], max_cols=batch.shape[1])
    grid.draw(batch, vocab, row_labels, unknown_rows)
    freeze_layout(fig)                 # the cells' width is known once the layout is done ...
    grid.draw(batch, vocab, row_labels, unknown_rows)   # ... so long tokens are cut to it
    return fig


# ---- the widget -------------------------------------------------------------------------------

def typed_batch(sentences, vocab: dict, typed: str):
    """The running example plus the typed sentence as a last row -> (B + 1, L) ids and its tokens.

    Returns (batch, tokens, ids, message): the typed sentence is cut to MAX_TOKENS tokens,
    and `message` says so (or that nothing was typed), else it is "".
    """
    tokens = tokenize(typed)
    message = ""
    if not tokens:
        message = "type a sentence: an empty one is just <bos> <eos>"
    if len(tokens) > MAX_TOKENS:
        message = f"only the first {MAX_TOKENS} tokens are shown (the grid has room for {MAX_COLS} positions)"
        tokens = tokens[:MAX_TOKENS]
    kept = " ".join(tokens)
    id_lists = [encode(s, vocab, add_bos=True, add_eos=True) for s in list(sentences) + [kept]]
    batch = pad_batch(id_lists, vocab[PAD])
    return batch, tokens, id_lists[-1], message


_KEY = "<b>colours</b>: " + " ".join(
    f"<span style='background:{c};padding:1px 5px;border-radius:3px;font-family:monospace'>"
    f"{html.escape(k)}</span>" for k, c in zip(KINDS, COLOURS)) + "<br>"


def _chips(tokens, vocab) -> str:
    parts = []
    for token in tokens:
        css = (f"background:{COLOURS[0]}" if token in vocab
               else f"background:{COLOURS[2]};color:{TEXT_COLOURS[2]};font-weight:bold")
        parts.append(f"<span style='{css};padding:1px 5px;margin:1px;border-radius:3px;"
                     f"font-family:monospace'>{html.escape(token)}</span>")
    return " ".join(parts) if parts else "<i>(none)</i>"


class TokenizerExplorer(Explorer):
    """A text box -> the sentence's tokens, its ids (unknown words in red) and the padded batch
    with the typed sentence added as the last row.

    `update(sentence="...")` redraws (see `Explorer`) and returns the warning shown; `batch`
    is the last (B + 1, L) batch drawn and `message` the last warning ("" when there is none).
    """

    def __init__(self, sentences, vocab: dict, sentence: str = "my cat loves attention"):
        import ipywidgets as widgets

        self.sentences, self.vocab = list(sentences), vocab
        fig = figure(3.6, pyplot=False)  # outside pyplot: the inline backend never shows it
        self.ax = fig.add_subplot()
        style.style_axes(self.ax)
        self.grid = BatchGrid(self.ax, max_rows=len(self.sentences) + 1, max_cols=MAX_COLS, legend=True,
                              fixed_width=True)          # the colour key in the picture: a still has no HTML
        self.title = fig.suptitle(" ", fontsize=style.TITLE_PT)
        self._draw_grid(typed_batch(self.sentences, vocab, sentence)[0])
        freeze_layout(fig)     # the labels' sizes do not change with the sentence: lay out once
        # The typed row gets its own image on top of the grid's: a keystroke repaints only
        # that row, its texts and the title. The other rows come from two backgrounds drawn
        # once: the batch at its longest (all 16 columns) and at its shortest (no typed
        # words); a frame of length L takes its first L columns from the first, the rest from
        # the second, so no length ever needs a full draw.
        self.typed_row = self.ax.imshow(np.zeros((1, 1)), cmap=self.grid.image.get_cmap(), vmin=-0.5,
                                        vmax=len(KINDS) - 0.5, interpolation="nearest", aspect="auto")
        moving = [self.typed_row, self.grid.borders, *self.grid.cells[len(self.sentences)], self.title]
        self.text = widgets.Text(value=sentence, description="sentence", continuous_update=True,
                                 layout=widgets.Layout(width="520px"))
        self.info = widgets.HTML()
        self._build(fig, moving, [self.text], [self.text, self.info])
        for key, typed in (("longest", " ".join(["x"] * MAX_TOKENS)), ("shortest", "")):
            self._draw_grid(typed_batch(self.sentences, vocab, typed)[0])
            self.frames.draw_background(key)
        self.batch, self.message = None, ""
        self.update()

    def _draw_grid(self, batch) -> None:
        rows = [str(r) for r in range(len(self.sentences))] + ["typed"]
        self.grid.draw(batch, self.vocab, row_labels=rows, unknown_rows=(len(self.sentences),))

    def update(self, sentence: str | None = None) -> str:
        """Redraw for the typed sentence (or the one given here); returns the warning shown."""
        start = time.perf_counter()
        self._set_controls((self.text, sentence))
        self.batch, tokens, ids, self.message = typed_batch(self.sentences, self.vocab, self.text.value)
        unknown = [t for t in tokens if t not in self.vocab]
        notes = []
        if unknown:
            notes.append(f"not in the vocabulary, so encoded as {html.escape(UNK)} (id {self.vocab[UNK]}): "
                         + ", ".join(html.escape(repr(t)) for t in unknown))
        if self.message:
            notes.append(html.escape(self.message))
        self.info.value = (
            "<div style='line-height:1.8'>"
            f"<b>tokens</b> ({len(tokens)}): {_chips(tokens, self.vocab)}<br>"
            f"<b>ids</b> with {html.escape(BOS)}/{html.escape(EOS)}: <code>{ids}</code><br>"
            + "".join(f"<span style='color:{ERROR_COLOUR}'>{note}</span><br>" for note in notes)
            + _KEY + "</div>")
        self._draw_grid(self.batch)
        typed, length = len(self.sentences), self.batch.shape[1]
        self.typed_row.set_data(self.grid.image.get_array()[typed: typed + 1])
        self.typed_row.set_extent((-0.5, length - 0.5, typed + 0.5, typed - 0.5))
        self.title.set_text(f"batch with your sentence as row {len(self.sentences)}: "
                            f"(B, L) = {tuple(self.batch.shape)}, dtype {self.batch.dtype}")
        edge = self.ax.transData.transform((length - 0.5, 0))[0]          # pixels, from the left
        self._show(start, background="longest", strip=("shortest", round(edge)))
        return self.message


def tokenizer_explorer(sentences, vocab: dict, sentence: str = "my cat loves attention") -> TokenizerExplorer:
    """Build the explorer; display `.widget` in the notebook."""
    return TokenizerExplorer(sentences, vocab, sentence)
