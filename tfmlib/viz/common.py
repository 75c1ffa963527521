"""What the notebooks' plots and widgets share.

`heatmap` draws a labelled matrix. `Frames` and `Explorer` are the one way every
widget of the course draws: controls above a matplotlib figure, shown as PNG bytes
in an `ipywidgets.Image` (not an `Output`: nothing is printed or cleared from a
callback, so nbval and the browser see the same thing every run).
"""
from __future__ import annotations

import contextlib
import io
import time

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg

from . import style
from .style import DIVERGING_CMAP, DPI, SEQUENTIAL_CMAP, TICK_PT, new_figure, signed_limits, style_axes
from .textcache import cache_text


def heatmap(ax, matrix, x_labels=None, y_labels=None, *, title: str = "", xlabel: str = "",
            ylabel: str = "", cbar_label: str = "", cmap=SEQUENTIAL_CMAP, vmin=None, vmax=None,
            signed: bool = False, annotate: bool = False, colorbar: bool = True, aspect: str = "auto"):
    """Draw a 2-D tensor or array as a labelled heatmap on `ax`; returns the image artist.

    `signed=True` draws signed values with the diverging map, centred at 0. `aspect="equal"`
    draws square cells, for a matrix whose two axes count the same thing. Keep the
    returned artist and call `image.set_data(new)` to redraw fast in a widget.
    """
    if isinstance(matrix, torch.Tensor):
        matrix = matrix.detach().cpu().float().numpy()
    if signed:
        cmap, (vmin, vmax) = DIVERGING_CMAP, signed_limits(matrix)
    image = ax.imshow(matrix, cmap=cmap, vmin=vmin, vmax=vmax, aspect=aspect, interpolation="nearest")
    if x_labels is not None:
        ax.set_xticks(range(len(x_labels)), labels=list(x_labels), rotation=90)
    if y_labels is not None:
        ax.set_yticks(range(len(y_labels)), labels=list(y_labels))
    style_axes(ax)
    if title:
        style.title(ax, title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if annotate:
        middle = (matrix.max() + matrix.min()) / 2
        for (row, col), value in _cells(matrix):
            ax.text(col, row, f"{value:.2f}", ha="center", va="center", fontsize=TICK_PT,
                    color="white" if value < middle else "black")
    if colorbar:
        style.colorbar(ax.figure, image, ax, cbar_label)
    return image


def panel_row(count: int, height: float):
    """A column-wide figure with one row of `count` panels, `height` inches tall; -> (fig, axes)."""
    fig, axes = new_figure(height, ncols=count)
    return fig, axes if count > 1 else [axes]


def _cells(matrix):
    rows, cols = matrix.shape
    for row in range(rows):
        for col in range(cols):
            yield (row, col), float(matrix[row, col])


class Frames:
    """PNG frames of one figure whose `moving` artists change between frames.

    A full matplotlib draw of a labelled figure takes 30-250 ms, most of it text
    (tick labels, titles). So everything but the moving artists is drawn once into a cached
    background; a frame pastes that back and paints only the moving artists on
    top. The caller names the background's state with a key (e.g. the number of
    heads, which sets the tick labels); a new key draws a new background. A figure whose
    size changes between frames keys a background per size. With no
    moving artists every frame is a full draw. A figure that grows to the right can paste
    a second background right of a pixel column (`strip`): two backgrounds then serve
    every width.
    """

    MAX_BACKGROUNDS = 8  # each is a full-size RGBA copy: keep only the latest few

    def __init__(self, fig, moving=(), dpi: float = DPI):
        fig.set_dpi(dpi)
        self.fig, self.moving = fig, list(moving)
        self.axes = list(dict.fromkeys(a.axes for a in self.moving if a.axes is not None))
        # A full draw paints an axes' frame over its data: the frames around moving data move
        # too; and it paints in zorder, so frames do too (a stable sort keeps ties in order).
        for ax in self.axes:
            self.moving += ax.spines.values()
        self.moving.sort(key=lambda artist: artist.get_zorder())
        self.canvas = FigureCanvasAgg(fig)  # renders off screen, pyplot or not
        self._renderers, self._text_caches = {}, {}
        self.canvas.get_renderer = self._renderer   # what every draw of the canvas asks for
        self.backgrounds = {}

    def _renderer(self):
        """The canvas's Agg renderer for the figure's size now, with the text cache (each
        distinct text is rasterised once). Agg makes a new renderer whenever the size changes,
        and matplotlib caches text metrics per renderer: a figure whose size follows what it
        shows (08's layers) keeps one renderer per size, so a size seen before lays out its
        labels from the caches."""
        key = (*self.canvas.get_width_height(physical=True), self.fig.dpi)
        if key not in self._renderers:
            renderer = FigureCanvasAgg.get_renderer(self.canvas)      # a new one, for this size
            caches = self._text_caches.setdefault(self.fig.dpi, ({}, {}))
            self._renderers[key] = cache_text(renderer, caches)
        # FigureCanvasAgg reuses its `renderer` while `_lastKey` names the size it was made for.
        self.canvas.renderer, self.canvas._lastKey = self._renderers[key], key
        return self.canvas.renderer

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of a frame in pixels."""
        return self.canvas.get_width_height()

    def png(self, background=None, strip=None) -> bytes:
        """The figure as it is now, as PNG bytes; `background` keys the still parts.

        strip: None, or (key, x): right of pixel column x, the background saved under `key`
        (by `draw_background`) replaces `background`.
        """
        if not self.moving:
            self.canvas.draw()
        else:
            if background in self.backgrounds:
                self.canvas.restore_region(self.backgrounds[background])
                for ax in self.axes:
                    ax.apply_aspect()  # what a full draw does first: fit the box to the limits
            else:
                self.draw_background(background)
            if strip is not None:
                key, x = strip
                width, height = self.size
                self.canvas.restore_region(self.backgrounds[key], bbox=(int(x), 0, width, height),
                                           xy=(0, 0))   # in place: only the bbox is pasted
            renderer = self.canvas.get_renderer()
            for artist in self.moving:
                artist.draw(renderer)
        return self.encode()

    def draw_background(self, key) -> None:
        """Draw the still parts as they are now and keep them under `key`."""
        # Moving artists are made transparent, not invisible: matplotlib still lays them
        # out (an axes places its title by the title's size), it just paints nothing.
        alphas = [artist.get_alpha() for artist in self.moving]
        for artist in self.moving:
            artist.set_alpha(0)
        self.canvas.draw()
        for artist, alpha in zip(self.moving, alphas):
            artist.set_alpha(alpha)
        if len(self.backgrounds) >= self.MAX_BACKGROUNDS:
            del self.backgrounds[next(iter(self.backgrounds))]  # the oldest
        self.backgrounds[key] = self.canvas.copy_from_bbox(self.fig.bbox)

    def encode(self) -> bytes:
        from PIL import Image

        buffer = io.BytesIO()
        pixels = Image.frombuffer("RGBA", self.size, self.canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
        # RGB (the figure is opaque) and light compression: the fastest encoding, measured.
        pixels.convert("RGB").save(buffer, format="png", compress_level=1)
        return buffer.getvalue()


def image_widget(frames: Frames):
    """An ipywidgets.Image with the frames' pixel size: shown 1:1, as sharp as the static
    figures, and the page does not jump when a new frame arrives (narrower screens scale
    it down, keeping its proportions)."""
    import ipywidgets as widgets

    width, height = frames.size
    return widgets.Image(format="png", width=width, height=height,
                         layout=widgets.Layout(max_width="100%", height="auto"))


class Explorer:
    """The pattern of every widget in the course.

    `.widget` is what the notebook displays: rows of controls above `.picture`, an
    ipywidgets.Image. `.update(**values)` is the redraw callback: a learner's change
    of a control calls it, and tests and benchmarks call it headlessly with the new
    values. `.png()` is the frame on screen (`.snapshot()` shows it as a plain picture),
    `.last_redraw_ms` how long the last redraw took (PNG included).

    A subclass builds its figure and controls, calls `_build(...)`, and writes an
    `update` that sets the controls given (`_set_controls`, or inside `_quietly()`),
    moves its artists and ends with `self._show(start, background)`.
    """

    last_redraw_ms = float("nan")
    _quiet = False

    def _build(self, fig, moving, controls, rows) -> None:
        import ipywidgets as widgets

        self.fig = fig
        self.frames = Frames(fig, moving)
        self.picture = image_widget(self.frames)
        for control in controls:
            control.observe(self._on_change, names="value")
        self.widget = widgets.VBox([*rows, self.picture])

    def _on_change(self, _change) -> None:
        if not self._quiet:
            self.update()

    def _set_controls(self, *pairs) -> None:
        """Give each (control, value) pair's control its value (None keeps the current one)."""
        with self._quietly():
            for control, value in pairs:
                if value is not None:
                    control.value = value

    @contextlib.contextmanager
    def _quietly(self):
        """Set controls from update(): their observers must not redraw too (update redraws once)."""
        self._quiet = True
        try:
            yield
        finally:
            self._quiet = False

    def _show(self, start: float, background=None, strip=None) -> None:
        """Send the new frame; `start` is update()'s time.perf_counter() on entry (see
        `Frames.png` for `background` and `strip`). A frame of a new size resizes the Image."""
        frame = self.frames.png(background, strip)
        width, height = self.frames.size
        if (self.picture.width, self.picture.height) != (str(width), str(height)):
            self.picture.width, self.picture.height = width, height
        self.picture.value = frame
        self.last_redraw_ms = 1000 * (time.perf_counter() - start)

    def png(self) -> bytes:
        """The frame on screen, as PNG bytes."""
        return self.picture.value

    def snapshot(self):
        """The frame on screen as a plain picture, for readers whose viewer runs no widgets
        (GitHub, nbviewer): the widget's own frame, so the figure is not drawn a second time."""
        from IPython.display import Image

        return Image(self.png())

    def update(self, **values):
        raise NotImplementedError


def _renderer(fig):
    canvas = fig.canvas
    return canvas.get_renderer() if hasattr(canvas, "get_renderer") else fig._get_renderer()


def place_axis_names(ax, row_labels, col_labels, row_name, col_name, gap_px: float = 4.0,
                     below_top: bool = False) -> None:
    """Put the axis names `row_name` (left, turned) and `col_name` (below) next to the token
    labels `row_labels`, `col_labels` (texts beside the rows, under the columns) of a map on
    `ax`, `gap_px` beyond the longest one: close to what they name, wherever a map of
    square cells (aspect "equal") puts its box. Call after the labels are set.

    A row name longer than the map slides down, its top at the canvas' top, or with
    `below_top` at the map's top (a title spanning the canvas above the map keeps clear)."""
    fig = ax.figure
    ax.apply_aspect()                                # the box that the draw will use
    renderer = _renderer(fig)
    box = ax.get_window_extent(renderer)
    shown = lambda labels: [t.get_window_extent(renderer) for t in labels   # noqa: E731
                            if t.get_visible() and t.get_text()]
    rows, cols = shown(row_labels), shown(col_labels)
    left = min([b.x0 for b in rows], default=box.x0) - gap_px
    bottom = min([b.y0 for b in cols], default=box.y0) - gap_px
    width, height = fig.bbox.width, fig.bbox.height
    row_name.set(position=(left / width, (box.y0 + box.y1) / 2 / height), ha="right", va="center",
                 rotation=90)
    # A name longer than a short map is centred on it no more: slid down into the canvas.
    half = row_name.get_window_extent(renderer).height / 2
    centre = min((box.y0 + box.y1) / 2, (box.y1 if below_top else height - gap_px) - half)
    row_name.set_y(max(centre, half + gap_px) / height)
    col_name.set(position=((box.x0 + box.x1) / 2 / width, bottom / height), ha="center", va="top")
