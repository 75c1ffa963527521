"""A lint of live matplotlib figures against the course style (style.py).

`lint_figure(fig)` draws the figure as the inline backend or a widget would (Agg, at the
figure's dpi) and returns a list of problems, empty when the figure is fine:

* too wide: wider than JupyterLab's column (`COLUMN_PX`), so the notebook shrinks it;
* text below `MIN_FONT_PT` as displayed (a shrunk figure shrinks its text too);
* text outside the canvas: a widget's frame clips it (the inline backend's crop hides it);
* texts that overlap: tick labels, titles, axis labels, legends, notes, numbers in cells;
* a text written in a box (a diagram's rectangle or rounded box) that spills over its edges;
* a legend over a marker of its axes' data or over a note written in the axes;
* a legend over a drawn line of its axes (any stretch of it, not only its markers);
* a colour map outside `ALLOWED_CMAPS`;
* a map whose cells are not square where both axes count the same thing (tokens against
  tokens, e.g. queries x keys, or positions against positions): a stretched tile reads as a
  difference between the axes that is not there;
* two series of one axes, or two entries of one legend, that a reader cannot tell apart:
  different labels in the same colour (a legend entry may share its colour with another
  when its line style or marker differs: the lab's seeds are grey lines of several dashes);
* a labelled series drawn exactly under a later one as wide or wider, so that it cannot be seen;
* a level that a title or note of an axes names ("floor 0.55", "ln 14") with no horizontal line
  drawn at it;
* an idea colour (`IDEA_COLOURS`: the query's blue, the key's vermillion, ...) that names its
  idea in one figure of a notebook and something else in the same or another figure of it
  (`NotebookColours`, which the nbval plugin and the gallery keep for each notebook);
* a count in a title that disagrees with what is drawn: "4 heads" above 3 panels, or
  "5 tokens" above a map of 6 columns (see `_title_counts` for what is counted, and where);
* on a figure meant for projection (`style.for_projection`), a map of tokens whose tiles are
  below the classroom minimum `CLASSROOM_CELL_PX` (`classroom_problems`).

Only what a draw paints counts: tick labels outside the view limits exist but are not
drawn, and invisible or empty texts are skipped. Overlaps of texts turned by other than a
multiple of 90 degrees are not checked: their boxes overlap while their glyphs do not.

Widget tests call `lint_explorer(explorer)` after each control change (or
`assert_readable`, which fails with the list); nbval runs the lint on every figure and frame of
the notebooks (tests/nbval_figure_lint.py), and `make gallery` on a few states of every widget
(tools/gallery.py).
"""
from __future__ import annotations

import re

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.image import AxesImage
from matplotlib.patches import FancyBboxPatch, Rectangle
from matplotlib.cm import ScalarMappable
from matplotlib.text import Text

from .style import ALLOWED_CMAPS, CLASSROOM_CELL_PX, COLUMN_PX, DPI, IDEA_COLOURS, MIN_FONT_PT

SLACK_PX = 1.0     # rounding of glyph boxes: a box may poke out or overlap by this much
SQUARE_TOLERANCE = 0.05   # a map's cell may be this much wider than tall, or taller than wide
#: A map of at most this many cells along either side is read cell by cell, by its tokens (an
#: attention map, a mask, 08's tiles); a larger one (03's positional table) by its pattern.
TOKEN_MAP_CELLS = 40


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
        problems += _text_outside_its_box(ax, renderer)
        problems += _covered_by_legend(ax, renderer)
        problems += _stretched_tiles(ax)
        problems += _same_colour_series(ax)
        problems += _hidden_series(ax)
        problems += _levels_not_drawn(ax)
    for legend in _legends(fig):
        problems += _same_looking_entries(legend)
    problems += _title_counts(fig)
    if getattr(fig, "for_projection", False):
        problems += classroom_problems(fig)
    names = {_cmap_in_use(artist) for artist in _visible(fig, ScalarMappable)} - {None}
    for name in sorted(names - ALLOWED_CMAPS):
        problems.append(f"colour map {name!r} is not in the course style "
                        f"(allowed: {', '.join(sorted(ALLOWED_CMAPS))})")
    return problems


#: The words that name each idea of `IDEA_COLOURS` in a label or a coloured text.
IDEA_WORDS = {"query": ("query", "queries", "q"), "key": ("key", "keys", "k"),
              "train": ("train", "training"), "held-out": ("held-out", "held out", "validation")}


def colour_meanings(fig) -> dict[str, set[str]]:
    """What each idea colour names in `fig`: the labels of its labelled series and the texts
    painted in it, each read as its idea where it names the idea (`IDEA_WORDS`)."""
    ideas = {to_hex(colour): idea for idea, colour in IDEA_COLOURS.items() if idea in IDEA_WORDS}
    named = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for artist in [*ax.lines, *ax.collections]:
            label = artist.get_label()
            if artist.get_visible() and label and not label.startswith("_"):
                named.append((_series_colour(artist), label))
    for text in _visible(fig, Text):
        if text.get_text().strip():
            named.append((to_hex(text.get_color()), text.get_text()))
    meanings = {}
    for colour, label in named:
        idea = ideas.get(colour)
        if idea is None:
            continue
        words = re.findall(r"[a-z]+(?:-[a-z]+)?", label.lower())
        says = any(word in words or (" " in word and word in label.lower()) for word in IDEA_WORDS[idea])
        meanings.setdefault(colour, set()).add(idea if says else label.replace("\n", " "))
    return meanings


class NotebookColours:
    """The idea colours of one notebook, figure after figure: where an idea colour names its
    idea (blue: the query) in a figure of the notebook, it must name nothing else there or in
    any other figure of the notebook ("scaled" in blue beside queries in blue reads as one idea).
    `check(fig)` records the figure and returns its problems."""

    def __init__(self):
        self.meanings: dict[str, set[str]] = {}

    def check(self, fig) -> list[str]:
        for colour, meanings in colour_meanings(fig).items():
            self.meanings.setdefault(colour, set()).update(meanings)
        ideas = {to_hex(colour): idea for idea, colour in IDEA_COLOURS.items()}
        problems = []
        for colour, meanings in colour_meanings(fig).items():
            idea = ideas[colour]
            seen = self.meanings[colour]
            if idea in seen and len(seen) > 1:
                others = sorted((seen | meanings) - {idea})
                problems.append(f"the colour {colour} is the {idea}'s in this notebook, and here or in another "
                                f"of its figures also names {', '.join(repr(o) for o in others)}")
        return problems


def classroom_problems(fig) -> list[str]:
    """Maps of tokens (at most `TOKEN_MAP_CELLS` cells a side) whose tiles, as drawn at the
    figure's dpi, are below `CLASSROOM_CELL_PX`: projected, their token labels cannot be told
    apart from the back row (style.py, "Classroom"). `lint_figure` runs it on every figure
    marked `style.for_projection`; a widget's test runs it on the widget's first frame."""
    _draw(fig)
    problems = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for image in ax.images:
            rows, cols = image.get_array().shape[:2]
            if not image.get_visible() or max(rows, cols) > TOKEN_MAP_CELLS:
                continue
            x0, x1, y0, y1 = image.get_extent()
            (px0, py0), (px1, py1) = ax.transData.transform([(x0, y0), (x1, y1)])
            scale = DPI / fig.dpi                        # as shown at the course's dpi
            width, height = abs(px1 - px0) / cols * scale, abs(py1 - py0) / rows * scale
            if min(width, height) < CLASSROOM_CELL_PX - 0.05:
                where = _name(ax.title) if ax.get_title() else "an untitled axes"
                problems.append(f"tiles too small to project: the map under {where} has cells of "
                                f"{width:.1f} x {height:.1f} px, below the classroom's "
                                f"{CLASSROOM_CELL_PX:.1f} px (style.CLASSROOM_CELL_PX)")
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
            if ax.axison:                          # set_axis_off(): no tick label is painted
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


def _text_outside_its_box(ax, renderer) -> list[str]:
    """A text written in a box (a rectangle or rounded box of the axes that holds its anchor,
    the smallest one if several do) must fit inside it: a diagram's label that spills over its
    box's edge reads as cut, or as belonging to the next box."""
    if not ax.get_visible():
        return []
    boxes = [patch.get_window_extent(renderer) for patch in ax.patches
             if patch.get_visible() and isinstance(patch, (Rectangle, FancyBboxPatch))]
    boxes = [box for box in boxes if box.width > 2 and box.height > 2]
    problems = []
    for text in ax.texts:
        if not (text.get_visible() and text.get_text().strip()) or text.get_rotation() % 90:
            continue
        extent = text.get_window_extent(renderer)
        anchor = text.get_transform().transform(text.get_position())
        # strictly inside: a value written on a bar's top edge (va="bottom") is not in the bar
        holders = [box for box in boxes if box.x0 + SLACK_PX < anchor[0] < box.x1 - SLACK_PX
                   and box.y0 + SLACK_PX < anchor[1] < box.y1 - SLACK_PX]
        if not holders:
            continue
        box = min(holders, key=lambda b: b.width * b.height)
        if (extent.x0 < box.x0 - SLACK_PX or extent.x1 > box.x1 + SLACK_PX
                or extent.y0 < box.y0 - SLACK_PX or extent.y1 > box.y1 + SLACK_PX):
            problems.append(f"text outside its box: {_name(text)} spans x {extent.x0:.0f}..{extent.x1:.0f}, "
                            f"y {extent.y0:.0f}..{extent.y1:.0f} of a box x {box.x0:.0f}..{box.x1:.0f}, "
                            f"y {box.y0:.0f}..{box.y1:.0f} px")
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


def _tick_texts(axis) -> list[str]:
    return [label.get_text() for label in _painted_tick_labels(axis)]


def _shares_a_unit(ax) -> bool:
    """Whether both axes of `ax` count the same thing: the same painted tick labels (tokens
    against the same tokens), the same axis name, or queries against keys."""
    names = (ax.get_xlabel().lower(), ax.get_ylabel().lower())
    if names[0] and names[0] == names[1]:
        return True
    if any("query" in a and "key" in b for a, b in (names, names[::-1])):
        return True
    x_ticks, y_ticks = _tick_texts(ax.xaxis), _tick_texts(ax.yaxis)
    numbers = re.compile(r"^[-\u2212]?[\d.]+$")
    return (len(x_ticks) > 1 and sorted(x_ticks) == sorted(y_ticks)
            and not all(numbers.match(t) for t in x_ticks))   # tokens, not an axis of numbers


def _stretched_tiles(ax) -> list[str]:
    """A map drawn in cells (imshow) whose cells are not square where both axes count the
    same thing (`_shares_a_unit`)."""
    images = [image for image in ax.images if image.get_visible()]
    if not images or not ax.get_visible() or not _shares_a_unit(ax):
        return []
    problems = []
    for image in images:
        rows, cols = image.get_array().shape[:2]
        x0, x1, y0, y1 = image.get_extent()
        (px0, py0), (px1, py1) = ax.transData.transform([(x0, y0), (x1, y1)])
        width, height = abs(px1 - px0) / cols, abs(py1 - py0) / rows     # one cell, in pixels
        if height and abs(width / height - 1) > SQUARE_TOLERANCE:
            problems.append(f"tiles not square: the map under {_name(ax.title) if ax.get_title() else 'an untitled axes'} "
                            f"has cells {width:.1f} x {height:.1f} px, though its axes count the same thing "
                            "(use aspect='equal')")
    return problems


def _series_colour(artist) -> str | None:
    """The colour of a line, or of a collection or patch painted in one colour; else None."""
    if hasattr(artist, "get_color") and hasattr(artist, "get_xydata"):          # a Line2D
        return to_hex(artist.get_color())
    faces = artist.get_facecolor() if hasattr(artist, "get_facecolor") else None
    faces = np.atleast_2d(faces) if faces is not None else np.zeros((0, 4))
    if len(faces) == 0 or not np.allclose(faces, faces[0]) or faces[0][3] == 0:
        return None
    return to_hex(faces[0])


def _points(artist) -> int:
    """How many data points a line or a scatter draws (a bar chart counts as many)."""
    if hasattr(artist, "get_xydata"):
        return len(artist.get_xydata())
    if hasattr(artist, "get_offsets") and len(artist.get_offsets()):
        return len(artist.get_offsets())
    return 2


def _same_colour_series(ax) -> list[str]:
    """Two labelled series of `ax` (lines, scatters, bars) with different labels in one colour.
    A single labelled point is a landmark (a start, a minimum), named by its marker: not a series."""
    seen, problems = {}, []
    bars = [(c.patches[0], c.get_label()) for c in ax.containers if getattr(c, "patches", None)]
    labelled = [(artist, artist.get_label()) for artist in [*ax.lines, *ax.collections]] + bars
    for artist, label in labelled:                        # a bar chart's label is its container's
        if not artist.get_visible() or not label or label.startswith("_") or _points(artist) < 2:
            continue
        if artist.get_alpha() is not None and artist.get_alpha() < 0.05:
            continue
        colour = _series_colour(artist)
        if colour is None:
            continue
        other = seen.setdefault(colour, label)
        if other != label:
            problems.append(f"two series in the same colour {colour}: {other!r} and {label!r}")
    return problems


def _has_markers(line) -> bool:
    return line.get_marker() not in (None, "None", "none", "", " ")


def _hidden_series(ax) -> list[str]:
    """A data series whose every point lies within a pixel of a later line's, drawn as wide or
    wider (and its markers as large or larger), with the same dashes or solid, and not
    see-through: the reader sees one line where the legend promises two. A series is a
    labelled line, or a line with markers (the lab's runs, which a figure-wide legend names)."""
    lines = [line for line in ax.lines if line.get_visible() and len(line.get_xydata()) >= 2
             and (line.get_alpha() is None or line.get_alpha() > 0.5)
             and line.get_linestyle() not in ("None", "none", "", " ")]
    problems = []
    for i, under in enumerate(lines):
        label = under.get_label()
        if (not label or label.startswith("_")) and not _has_markers(under):
            continue
        points = under.get_transform().transform(under.get_xydata().astype(float))
        for over in lines[i + 1:]:
            if over.get_zorder() < under.get_zorder() or over.get_linewidth() < under.get_linewidth():
                continue
            if over.get_linestyle() not in ("-", "solid", under.get_linestyle()):
                continue
            if _has_markers(under) and (not _has_markers(over) or over.get_markersize() < under.get_markersize()):
                continue
            other = over.get_transform().transform(over.get_xydata().astype(float))
            if len(other) == len(points) and np.all(np.abs(other - points) <= 1.0):
                problems.append(f"{_name_of_line(under)} lies hidden under {_name_of_line(over)}: the "
                                "same points, drawn over it as wide or wider")
                break
    return problems


#: A level named in a title or a note: "floor 0.55", "level 2.3", "chance 0.1", or "ln 14".
_LEVEL = re.compile(r"\bln\s?(\d+(?:\.\d+)?)\b|\b(?:floor|ceiling|level|chance)\b(?:(?!\bln\b)\D){0,12}?(-?\d+(?:\.\d+)?)")


def _levels_not_drawn(ax) -> list[str]:
    """A level that the axes' title or a note in it names, with no horizontal line drawn at it
    (within 1 % of the axis' span): the text points at something the figure does not show."""
    if not ax.get_visible() or not (ax.lines or ax.collections):
        return []
    texts = [ax.title] + [t for t in ax.texts if t.get_visible()]
    low, high = sorted(ax.get_ylim())
    if ax.get_yscale() != "linear" or high <= low:
        return []
    drawn = []                                     # the heights of the horizontal lines (axhline too)
    for line in ax.lines:
        y = np.asarray(line.get_ydata(), dtype=float)
        if line.get_visible() and len(y) >= 2 and np.allclose(y, y[0]):
            drawn.append(float(y[0]))
    problems = []
    for text in texts:
        for log_of, plain in _LEVEL.findall(text.get_text()):
            level = float(plain) if plain else float(np.log(float(log_of)))
            if not low <= level <= high:
                continue
            if not any(abs(level - y) <= 0.01 * (high - low) for y in drawn):
                problems.append(f"the text {_name(text)} names the level {level:.3g}, but no horizontal "
                                "line is drawn at it")
    return problems


def _legends(fig) -> list:
    found = [ax.get_legend() for ax in fig.axes] + list(fig.legends)
    return [legend for legend in found if legend is not None and legend.get_visible()]


def _same_looking_entries(legend) -> list[str]:
    """Two entries of one legend, with different labels, that look the same: same colour,
    same line style, same marker."""
    seen, problems = {}, []
    for handle, text in zip(legend.legend_handles, legend.get_texts()):
        if handle is None or not text.get_text():
            continue
        colour = _series_colour(handle)
        if colour is None:
            continue
        look = (colour, str(getattr(handle, "get_linestyle", lambda: "")()),
                str(getattr(handle, "get_marker", lambda: "")()))
        other = seen.setdefault(look, text.get_text())
        if other != text.get_text():
            problems.append(f"two legend entries look the same ({colour}): {other!r} and {text.get_text()!r}")
    return problems


#: "N <noun>" in a title, and what N must equal: the panels of the figure, or the columns or
#: rows of the map under an axes title. "N of M <noun>" (a part of a whole) is not checked.
_COUNT = re.compile(r"(?<![\w.])(?<!\d of )(\d+) (token|key|position|column|quer(?:y|ie)|row|head|panel|sample)"
                    r"(?:s|\(s\))?\b(?! of)")
_COUNTED = {"token": "columns", "key": "columns", "position": "columns", "column": "columns",
            "query": "rows", "querie": "rows", "row": "rows",
            "head": "panels", "panel": "panels", "sample": "panels"}


def _data_panels(fig) -> list:
    """The axes that draw data (not colour bars, not empty or hidden ones)."""
    return [ax for ax in fig.axes if ax.get_visible() and not hasattr(ax, "_colorbar")
            and (ax.images or ax.lines or ax.collections or ax.patches)]


def _title_counts(fig) -> list[str]:
    """A count in a title that disagrees with what is drawn. Figure titles (the suptitle,
    texts placed on the figure) count panels, where there are two or more: "4 heads" above
    3 panels. An axes title counts the columns (tokens, keys, positions) or rows (queries)
    of the one map drawn under it. Where the figure does not draw that kind of thing (the
    heads tiled into one map), nothing is checked."""
    problems = []
    panels = len(_data_panels(fig))
    figure_titles = [fig._suptitle] + list(fig.texts)
    for text in figure_titles:
        if text is None or not text.get_visible():
            continue
        for number, noun in _COUNT.findall(text.get_text()):
            if _COUNTED[noun] == "panels" and panels >= 2 and int(number) != panels:
                problems.append(f"the title {_name(text)} counts {number} {noun}s above {panels} panels")
    for ax in _data_panels(fig):
        images = [image for image in ax.images if image.get_visible()]
        if len(images) != 1 or not ax.get_title():
            continue
        rows, cols = images[0].get_array().shape[:2]
        for number, noun in _COUNT.findall(ax.get_title()):
            drawn = {"columns": cols, "rows": rows}.get(_COUNTED[noun])
            if drawn is not None and int(number) != drawn:
                problems.append(f"the title {_name(ax.title)} counts {number} {noun}s above a map "
                                f"of {drawn} {_COUNTED[noun]}")
    return problems


def _name_of_line(line) -> str:
    label = line.get_label()
    if label and not label.startswith("_"):
        return repr(label)
    marker = f", marker {line.get_marker()!r}" if _has_markers(line) else ""
    return f"the unlabelled line in {to_hex(line.get_color())}{marker}"


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
