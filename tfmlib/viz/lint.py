"""A lint of live matplotlib figures against the course style (style.py).

`lint_figure(fig)` draws the figure as the inline backend or a widget would (Agg, at the
figure's dpi) and returns a list of problems, empty when the figure is fine:

* too wide: wider than JupyterLab's column (`COLUMN_PX`), so the notebook shrinks it;
* text below `MIN_FONT_PT` as displayed (a shrunk figure shrinks its text too);
* text outside the canvas: a widget's frame clips it (the inline backend's crop hides it);
* texts that overlap: tick labels, titles, axis labels, legends, notes, numbers in cells;
* a legend over a marker of its axes' data or over a note written in the axes;
* a legend over a drawn line of its axes (any stretch of it, not only its markers);
* a colour map outside `ALLOWED_CMAPS`.

Only what a draw paints counts: tick labels outside the view limits exist but are not
drawn, and invisible or empty texts are skipped. Overlaps of texts turned by other than a
multiple of 90 degrees are not checked: their boxes overlap while their glyphs do not.

Widget tests call `lint_explorer(explorer)` after each control change (or
`assert_readable`, which fails with the list).
"""
from __future__ import annotations

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.text import Text

from .style import ALLOWED_CMAPS, COLUMN_PX, DPI, MIN_FONT_PT

SLACK_PX = 1.0     # rounding of glyph boxes: a box may poke out or overlap by this much


def lint_figure(fig, column_px: float = COLUMN_PX, min_font_pt: float = MIN_FONT_PT) -> list[str]:
    """Problems of `fig` as displayed in a notebook column `column_px` wide; [] if none."""
    renderer = _draw(fig)
    width = fig.bbox.width
    shown = min(1.0, column_px / width)           # the notebook shrinks a wider figure
    problems = []
    if width > column_px + 0.5:
        problems.append(f"too wide: {width:.0f} px > the column's {column_px:.0f} px "
                        f"(shown at {shown:.0%}, text shrinks with it)")
    texts, tick_labels = _drawn_texts(fig)
    boxes = [text.get_window_extent(renderer) for text in texts]
    small = []
    for text, box in zip(texts, boxes):
        displayed = text.get_fontsize() * shown * fig.dpi / DPI
        if displayed < min_font_pt - 1e-6:
            small.append((displayed, _name(text)))
        if (box.x0 < -SLACK_PX or box.y0 < -SLACK_PX or box.x1 > fig.bbox.width + SLACK_PX
                or box.y1 > fig.bbox.height + SLACK_PX):
            problems.append(f"text outside the canvas: {_name(text)} spans x {box.x0:.0f}..{box.x1:.0f}, "
                            f"y {box.y0:.0f}..{box.y1:.0f} of a {fig.bbox.width:.0f} x "
                            f"{fig.bbox.height:.0f} px canvas")
    if small:
        size, name = min(small)
        problems.append(f"font too small: {len(small)} texts below {min_font_pt} pt as displayed, "
                        f"the smallest {name} at {size:.1f} pt")
    problems += _overlaps(texts, boxes, tick_labels)
    for ax in fig.axes:
        problems += _covered_by_legend(ax, renderer)
    names = {_cmap_in_use(artist) for artist in _visible(fig, ScalarMappable)} - {None}
    for name in sorted(names - ALLOWED_CMAPS):
        problems.append(f"colour map {name!r} is not in the course style "
                        f"(allowed: {', '.join(sorted(ALLOWED_CMAPS))})")
    return problems


def lint_explorer(explorer) -> list[str]:
    """The problems of a widget's current frame (an `Explorer` from common.py)."""
    return lint_figure(explorer.fig)


def assert_readable(figure_or_explorer, where: str = "") -> None:
    """Fail with every problem of a figure or a widget's frame; `where` says which."""
    fig = getattr(figure_or_explorer, "fig", figure_or_explorer)
    problems = lint_figure(fig)
    assert not problems, f"figure lint{' (' + where + ')' if where else ''}:\n  " + "\n  ".join(problems)


# ---- helpers ------------------------------------------------------------------------------------

def _draw(fig):
    """Draw `fig` with Agg, as shown; returns the renderer."""
    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)                       # a bare Figure() or another backend
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _painted_tick_labels(axis) -> list[Text]:
    """Tick labels a draw paints: ticks inside the view limits, visible, non-empty."""
    labels = []
    for tick in axis._update_ticks():             # what Axis.draw itself draws
        for label in (tick.label1, tick.label2):
            if label.get_visible() and label.get_text():
                labels.append(label)
    return labels


def _drawn_texts(fig) -> tuple[list[Text], set[Text]]:
    """Every visible, non-empty text of the figure that a draw paints, and which of them are
    tick labels."""
    tick_labels, painted = set(), set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                tick_labels.update((tick.label1, tick.label2))
            painted.update(_painted_tick_labels(axis))
    texts = [text for text in _visible(fig, Text)
             if text.get_text().strip() and (text not in tick_labels or text in painted)]
    return texts, painted


def _visible(artist, kind) -> list:
    """Artists of type `kind` in the tree under `artist`, skipping hidden branches (a hidden
    legend hides its texts, though each of them is still "visible")."""
    if not artist.get_visible():
        return []
    found = [artist] if isinstance(artist, kind) else []
    for child in artist.get_children():
        found += _visible(child, kind)
    return found


def _overlaps(texts, boxes, tick_labels) -> list[str]:
    """One problem per pair of texts whose boxes overlap. Texts turned by an angle other than
    a multiple of 90 degrees are skipped: their boxes overlap while their glyphs do not."""
    upright = [(t, b) for t, b in zip(texts, boxes) if t.get_rotation() % 90 == 0]
    if len(upright) < 2:
        return []
    corners = np.array([[b.x0, b.y0, b.x1, b.y1] for _, b in upright])       # (n, 4)
    width = (np.minimum(corners[:, None, 2], corners[None, :, 2])
             - np.maximum(corners[:, None, 0], corners[None, :, 0]))          # (n, n)
    height = (np.minimum(corners[:, None, 3], corners[None, :, 3])
              - np.maximum(corners[:, None, 1], corners[None, :, 1]))
    problems = []
    for i, j in np.argwhere(np.triu((width > SLACK_PX) & (height > SLACK_PX), k=1)):
        a, b = upright[i][0], upright[j][0]
        if a in tick_labels and b in tick_labels:
            problems.append(f"tick labels overlap: {_name(a)} and {_name(b)}")
        elif a in tick_labels or b in tick_labels:
            tick, other = (a, b) if a in tick_labels else (b, a)
            problems.append(f"{_name(other)} overlaps the tick label {_name(tick)}")
        else:
            problems.append(f"texts overlap: {_name(a)} and {_name(b)}")
    return problems


def _covered_by_legend(ax, renderer) -> list[str]:
    """A legend inside an axes must not hide a marker of its data or a note written there."""
    legend = ax.get_legend()
    if legend is None or not (legend.get_visible() and ax.get_visible()):
        return []
    box = legend.get_window_extent(renderer).expanded(1.0, 1.0)
    problems = []
    for line in ax.lines:
        if line.get_visible() and line.get_marker() not in (None, "", "None", " "):
            points = line.get_transform().transform(np.column_stack(line.get_data()).astype(float))
            if any(box.contains(x, y) for x, y in points if np.isfinite(x) and np.isfinite(y)):
                problems.append(f"the legend covers a point of {_name_of_line(line)}")
    inside = box.shrunk(1.0, 1.0)
    for line in ax.lines:
        if line.get_visible() and _line_crosses(line, inside, ax.bbox):
            problems.append(f"the legend covers the line of {_name_of_line(line)}")
    for text in ax.texts:
        if text.get_visible() and text.get_text().strip() and _overlap(box, text.get_window_extent(renderer)):
            problems.append(f"the legend covers the text {_name(text)}")
    return problems


def _line_crosses(line, box, clip, step_px: float = 2.0) -> bool:
    """Whether a drawn stretch of `line` (its segments, sampled every `step_px` pixels, inside
    the axes' box `clip`) passes through `box`, shrunk by `SLACK_PX` on every side."""
    if line.get_linestyle() in ("None", "none", "", " ") or line.get_linewidth() == 0:
        return False
    if (line.get_alpha() if line.get_alpha() is not None else 1.0) < 0.05:
        return False
    xy = np.column_stack(line.get_data()).astype(float)
    if len(xy) < 2:
        return False
    points = line.get_transform().transform(xy)                          # (n, 2) pixels
    x0, y0, x1, y1 = box.x0 + SLACK_PX, box.y0 + SLACK_PX, box.x1 - SLACK_PX, box.y1 - SLACK_PX
    if x1 <= x0 or y1 <= y0:
        return False
    for a, b in zip(points[:-1], points[1:]):
        if not (np.isfinite(a).all() and np.isfinite(b).all()):
            continue
        count = int(np.hypot(*(b - a)) // step_px) + 2
        samples = a + np.linspace(0.0, 1.0, count)[:, None] * (b - a)      # (count, 2)
        drawn = ((samples[:, 0] >= clip.x0) & (samples[:, 0] <= clip.x1)
                 & (samples[:, 1] >= clip.y0) & (samples[:, 1] <= clip.y1))
        within = ((samples[:, 0] > x0) & (samples[:, 0] < x1)
                  & (samples[:, 1] > y0) & (samples[:, 1] < y1))
        if (drawn & within).any():
            return True
    return False


def _name_of_line(line) -> str:
    label = line.get_label()
    return repr(label) if label and not label.startswith("_") else "an unlabelled line"


def _overlap(a, b) -> bool:
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > SLACK_PX
            and min(a.y1, b.y1) - max(a.y0, b.y0) > SLACK_PX)


def _cmap_in_use(artist) -> str | None:
    """The name of the colour map `artist` paints with, or None (RGB images, plain colours)."""
    array = artist.get_array()
    if array is None or getattr(array, "ndim", 2) == 3:
        return None
    return artist.get_cmap().name


def _name(text: Text) -> str:
    words = text.get_text().replace("\n", " ")
    return repr(words if len(words) <= 40 else words[:37] + "...")
