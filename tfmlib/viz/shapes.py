"""Plots and the broadcast explorer of notebook 01 (shapes and broadcasting).

The broadcasting diagram draws `a + b = result` as three panels side by side, each operand
*as it is read* at the result's shape: each operand has its own hue (a orange, b teal), every
element of it its own shade of that hue, the cells where it is really stored are drawn solid,
and the cells where broadcasting reads the same element again (a size-1 or missing axis,
repeated) are drawn in a lighter tint of that shade. Each cell of the result shows the two
elements it combines, a's in its left half and b's in its right. The axes are named on the
grids (axis -1 along the top, -2 down the side), and when the shapes do not broadcast, the
clashing axis is named in red and barred in both operands. Each panel is one RGB image, so a
redraw is three `set_data` calls, a few texts and one PNG render. A shape too large to show
with cells of at least `MIN_CELL_PX` pixels is cut: the first slices of axes -4 and -3 are
drawn, and a note says how many.
"""
from __future__ import annotations

import html
import math
import re
import time

import matplotlib.pyplot as plt
import numpy as np

from ..shapes import broadcast_shape
from .common import DPI, Explorer, _renderer
from .style import ERROR_COLOUR, GUIDE_COLOUR, PAIR_COLOURS, TICK_PT, TITLE_PT

MAX_AXES = 4     # the diagram draws shapes of up to 4 axes ...
MAX_SIZE = 8     # ... with at most 8 elements along each
CELL = 12        # pixels per cell in a panel's image
GAP = 6          # pixels between two slices of a 3-D or 4-D shape
LIGHTEN = 0.62   # how far a repeated cell's colour is mixed towards white
EDGE = np.array([0.35, 0.35, 0.35])
#: The hue of each operand: a orange, b teal (style.PAIR_COLOURS), never the same colours, and
#: not the query's blue and the key's vermillion.
OPERAND_HUES = dict(zip("ab", PAIR_COLOURS["operands"]))
MIN_CELL_PX = 8  # smallest cell as displayed: a larger shape is cut to its first slices

PRESETS = {
    "(3, 1) and (4,): both operands repeat": ("3, 1", "4"),
    "x + positional encoding: (B, L, D) + (L, D)": ("2, 3, 4", "3, 4"),
    "x - mean with keepdim: (B, L, D) - (B, L, 1)": ("2, 3, 4", "2, 3, 1"),
    "x - mean without keepdim: (B, L, D) - (B, L)": ("2, 3, 4", "2, 3"),
    "bias: (B, L, D) + (D,)": ("2, 3, 4", "4"),
    "padding mask: (B, 1, 1, L) & (B, H, L, L)": ("2, 1, 1, 3", "2, 2, 3, 3"),
}


# ---- parsing ----------------------------------------------------------------------------------

def parse_shape(text: str) -> tuple[int, ...]:
    """"3, 1" / "(3, 1)" / "3 1" / "4," -> (3, 1) ...; "" or "()" is a scalar's shape ().

    Raises ValueError with a message meant for the learner.
    """
    cleaned = text.strip().strip("()[]").strip()
    if not cleaned:
        return ()
    parts = [p for p in re.split(r"[,\s]+", cleaned) if p]
    sizes = []
    for part in parts:
        if not part.isdigit():
            raise ValueError(f"{part!r} is not a size: type whole numbers separated by commas, e.g. 2, 3, 4")
        sizes.append(int(part))
    if 0 in sizes:
        raise ValueError("a size of 0 makes an empty tensor: use sizes of 1 or more")
    return tuple(sizes)


# ---- the diagram ------------------------------------------------------------------------------

def _as_4d(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    return (1,) * (4 - len(shape)) + tuple(shape)


def operand_cells(shape, result):
    """For each cell of `result`: the flat index of the operand element it reads, and
    whether that cell is where the element is stored (True) or a broadcast repeat (False)."""
    padded = (1,) * (len(result) - len(shape)) + tuple(shape)   # a missing axis counts as 1
    source = np.broadcast_to(np.arange(math.prod(padded)).reshape(padded), result)
    stored = np.zeros(result, dtype=bool)
    stored[tuple(slice(0, 1) if p == 1 else slice(None) for p in padded)] = True
    return source, stored


def grid_image(colours: np.ndarray, right: np.ndarray | None = None) -> np.ndarray:
    """(s0, s1, s2, s3, 3) cell colours -> one RGB image of s2 x s3 grids: the s1 slices of
    axis -3 side by side, the s0 slices of axis -4 one below the other. `right`, of the same
    shape: each cell's right half in these colours (a + b: the a element left, the b right)."""
    s0, s1, s2, s3, _ = colours.shape
    block_h, block_w = s2 * CELL + 1, s3 * CELL + 1
    image = np.ones((s0 * block_h + (s0 - 1) * GAP, s1 * block_w + (s1 - 1) * GAP, 3))
    for a in range(s0):
        for b in range(s1):
            top, left = a * (block_h + GAP), b * (block_w + GAP)
            block = image[top: top + block_h, left: left + block_w]      # a view into image
            block[:-1, :-1] = np.repeat(np.repeat(colours[a, b], CELL, axis=0), CELL, axis=1)
            if right is not None:
                halves = np.repeat(np.repeat(right[a, b], CELL, axis=0), CELL, axis=1)
                halves = halves.reshape(s2 * CELL, s3, CELL, 3)
                cells = block[:-1, :-1].reshape(s2 * CELL, s3, CELL, 3)  # a view: per cell
                cells[:, :, CELL // 2:] = halves[:, :, CELL // 2:]
            block[::CELL, :] = EDGE                                      # horizontal cell borders
            block[:, ::CELL] = EDGE                                      # vertical cell borders
    return image


def operand_colours(n: int, hue) -> np.ndarray:
    """(n, 3) shades of `hue`, one per element: from 25 % towards white to 50 % towards
    black, in golden-ratio steps so that neighbouring elements land far apart. Even the
    lightest stays darker than a repeated cell's tint (`LIGHTEN`)."""
    from matplotlib.colors import to_rgb

    base = np.array(to_rgb(hue))
    shade = -0.25 + 0.75 * ((np.arange(n) * 0.6180339887) % 1.0)[:, None]   # <0: whiter, >0: darker
    return np.where(shade < 0, base + (-shade) * (1 - base), base * (1 - shade))


def read_colours(shape, result, hue) -> np.ndarray:
    """(s0, s1, s2, s3, 3): the colour of the operand element each cell of `result` reads,
    in shades of `hue`, solid where it is stored and light where it is read again."""
    source, stored = operand_cells(shape, result)
    colours = operand_colours(max(math.prod(shape), 1), hue)[source]       # (*result, 3)
    colours = np.where(stored[..., None], colours, colours + LIGHTEN * (1 - colours))
    return colours.reshape(*_as_4d(result), 3)


def operand_image(shape, result, hue=OPERAND_HUES["a"], cut=None) -> np.ndarray:
    """RGB image of an operand read at the `result` shape (stored cells solid, repeats light),
    in shades of `hue`; `cut` (k4, k3): draw only the first k4 slices of axis -4 and the
    first k3 of axis -3 (see `cut_for`)."""
    return grid_image(_cut(read_colours(shape, result, hue), cut))


def _cut(colours: np.ndarray, cut) -> np.ndarray:
    if cut is None:
        return colours
    return np.ascontiguousarray(colours[: cut[0], : cut[1]])


def cut_for(result, panel_px: tuple[float, float]) -> tuple[int, int]:
    """(k4, k3): how many slices of axes -4 and -3 of `result` to draw so that a cell shows at
    least `MIN_CELL_PX` pixels in a panel of `panel_px` (width, height); at least one each."""
    s0, s1, s2, s3 = _as_4d(result)
    width, height = panel_px
    scale = MIN_CELL_PX / CELL                      # the least shrink allowed
    block_h, block_w = s2 * CELL + 1, s3 * CELL + 1
    fits = lambda k, block, room: k * block + (k - 1) * GAP <= room / scale   # noqa: E731
    k4 = max([k for k in range(1, s0 + 1) if fits(k, block_h, height)], default=1)
    k3 = max([k for k in range(1, s1 + 1) if fits(k, block_w, width)], default=1)
    return k4, k3


def _cut_note(result, cut) -> str:
    """'; first 1 of 8 slices of axis -4 drawn' (empty when nothing is cut)."""
    s0, s1 = _as_4d(result)[:2]
    parts = [f"first {k} of {n} slices of axis {axis}" for k, n, axis in
             ((cut[0], s0, -4), (cut[1], s1, -3)) if k < n]
    return ("too large to show every slice: " + ", ".join(parts) + " drawn") if parts else ""


def result_image(result, shape_a, shape_b, cut=None) -> np.ndarray:
    """RGB image of `a op b` at the `result` shape: each cell in two halves, the colour of the
    a element it combines (left) and of the b element (right), as the operands' panels draw
    them."""
    return grid_image(_cut(read_colours(shape_a, result, OPERAND_HUES["a"]), cut),
                      _cut(read_colours(shape_b, result, OPERAND_HUES["b"]), cut))


def drawable(*shapes) -> bool:
    return all(len(s) <= MAX_AXES and all(n <= MAX_SIZE for n in s) for s in shapes)


def alignment_table(shape_a, shape_b, op: str = "+") -> str:
    """The two shapes written right-aligned, axis by axis, with the result or the clash."""
    ndim = max(len(shape_a), len(shape_b), 1)
    a = ("",) * (ndim - len(shape_a)) + tuple(shape_a)
    b = ("",) * (ndim - len(shape_b)) + tuple(shape_b)
    try:
        result, clash = broadcast_shape(shape_a, shape_b), None
    except ValueError:
        result, clash = None, [i for i in range(ndim)
                               if a[i] != "" and b[i] != "" and a[i] != b[i] and 1 not in (a[i], b[i])]
    label_width = max(len(str(tuple(shape_a))), len(str(tuple(shape_b))), 6) + 4
    lines = [f"{'axis':<{label_width}}" + "".join(f"{i - ndim:>5}" for i in range(ndim))]
    lines.append(f"{'a ' + str(tuple(shape_a)):<{label_width}}" + "".join(f"{str(s):>5}" for s in a))
    lines.append(f"{'b ' + str(tuple(shape_b)):<{label_width}}" + "".join(f"{str(s):>5}" for s in b))
    if result is not None:
        lines.append(f"{'a ' + op + ' b':<{label_width}}" + "".join(f"{s:>5}" for s in result))
    else:
        lines.append(" " * label_width + "".join("    ^" if i in clash else "     " for i in range(ndim))
                     + "  sizes differ and neither is 1")
    return "\n".join(lines)


FIGSIZE = (8.4, 3.9)       # inches: the width, and the height whose room sets the cells' size
#: Each panel's box in figure fractions (left, bottom, width, height) on a canvas of FIGSIZE: the
#: titles above, the operator between two panels, the key below. A grid is drawn as large as
#: this room allows (4-D shapes fill its height), then the canvas' height is fitted to what
#: is drawn (`BroadcastDiagram.fit`), so that no empty band is left above the key.
PANEL_LEFTS = (0.0, 0.35, 0.70)
PANEL_BOX = (0.30, 0.16, 0.83)   # width, bottom, height
NAME_PX = 16     # room left of and above a grid for the names of its axes
TITLE_PX = 36    # room above a grid for its title (two lines)
EDGE_PX = 4      # between the canvas' edge and the titles (top) or the key (bottom)
KEY_GAP_PX = 12  # between the lowest grid or note and the note on cut slices, or the key


class BroadcastDiagram:
    """Three panels side by side (a, b and the result) on `fig`, redrawn in place by
    `draw(shape_a, shape_b)`. The grid's axes are named on it; the result's cells show the
    a and b elements each one combines; a clashing axis is marked in both operands. The
    figure's size when given sets the width and the room for the grids (`panel_px`); each
    draw fits the canvas' height to what it shows."""

    def __init__(self, fig, op: str = "+"):
        self.fig = fig
        width, bottom, height = PANEL_BOX
        # The grids' room, fixed: the same shapes are drawn at the same size whatever was shown before.
        self.room = (width * fig.bbox.width - NAME_PX, height * fig.bbox.height - NAME_PX - TITLE_PX)
        self.axes = [fig.add_axes((left, bottom, width, height)) for left in PANEL_LEFTS]
        self.images, self.titles, self.notes, self.marks = [], [], [], []
        self.names = []        # per panel: axis -1 and axis -3 above the grids, -2 and -4 left of them
        for ax in self.axes:
            self.images.append(ax.imshow(np.ones((2, 2, 3)), interpolation="nearest"))
            ax.set_anchor("C")
            ax.set_axis_off()
            for spine in ax.spines.values():      # the frames draw an axes' spines as it moves
                spine.set_visible(False)
            # Above the grids, where they are drawn: the title moves with them.
            self.titles.append(ax.text(0, 0, "", ha="center", va="bottom", fontsize=TITLE_PT, clip_on=False))
            self.notes.append(ax.text(0, 0, "", ha="center", va="top", fontsize=TICK_PT,
                                      color=ERROR_COLOUR, clip_on=False))
            text = dict(fontsize=TICK_PT, color=GUIDE_COLOUR, clip_on=False)
            self.names.append({-1: ax.text(0, 0, "", ha="left", va="bottom", **text),
                               -3: ax.text(0, 0, "", ha="right", va="bottom", **text),
                               -2: ax.text(0, 0, "", ha="right", va="top", rotation=-90, **text),
                               -4: ax.text(0, 0, "", ha="right", va="bottom", rotation=-90, **text)})
            self.marks.append(ax.plot([], [], color=ERROR_COLOUR, linewidth=4, clip_on=False,
                                      solid_capstyle="butt")[0])
        # Halfway down the grids, which `fit` moves: they move with them.
        self.signs = [fig.text(left - 0.025, 0.5, sign, ha="center", va="center", fontsize=16)
                      for left, sign in zip(PANEL_LEFTS[1:], (op, "="))]
        # Says which slices a shape too large to show whole has kept (see `cut_for`).
        self.cut_note = fig.text(0.5, 0, "", ha="center", va="bottom", fontsize=TICK_PT,
                                 color=ERROR_COLOUR)
        self.key = fig.text(0.5, 0, "solid cell: where an element is stored;  light cell: the same element "
                 f"read again (broadcast);  axis -3: grids side by side,\naxis -4: one below the other;  "
                 f"each cell of a {op} b: the a element it combines (left half) and the b element (right half)", ha="center", va="bottom", fontsize=TICK_PT,
                 color=GUIDE_COLOUR)
        self.moving = [*self.images, *self.titles, *self.notes, *self.marks, self.cut_note, *self.signs,
                       *(text for names in self.names for text in names.values())]

    def panel_px(self) -> tuple[float, float]:
        """(width, height) in pixels that a panel's grids may fill (the room for the names of
        their axes and the title taken off), set by the figure's size when it was given."""
        return self.room

    def draw(self, shape_a, shape_b, op: str = "+") -> tuple[int, ...] | None:
        """Redraw for two shapes, on a canvas fitted to them (`fit`); returns the result shape,
        or None when they do not broadcast."""
        shape_a, shape_b = tuple(shape_a), tuple(shape_b)
        try:
            result = broadcast_shape(shape_a, shape_b)
        except ValueError:
            result = None
        clash = None
        if result is not None and drawable(shape_a, shape_b, result):
            cut = cut_for(result, self.panel_px())
            images = [operand_image(shape_a, result, OPERAND_HUES["a"], cut),
                      operand_image(shape_b, result, OPERAND_HUES["b"], cut),
                      result_image(result, shape_a, shape_b, cut)]
            grids = [result] * 3
            titles = [f"{name} {shape}" + ("" if shape == result else f"\nread as {result}")
                      for name, shape in (("a", shape_a), ("b", shape_b))]
            titles += [f"a {op} b\n{result}"]
            notes = ["", "", ""]
            cut_note = _cut_note(result, cut)
        elif result is not None:
            images, grids = [None] * 3, [None] * 3
            titles = [f"a {shape_a}", f"b {shape_b}", f"a {op} b\n{result}"]
            notes = [f"too large to draw:\nthe diagram shows up to\n{MAX_AXES} axes of size <= {MAX_SIZE}",
                     "", ""]
            cut_note = ""
        else:
            clash = clashing_axis(shape_a, shape_b)
            axis, size_a, size_b = clash
            images, grids = [], []
            for name, shape in (("a", shape_a), ("b", shape_b)):
                fits = drawable(shape)
                images.append(operand_image(shape, shape, OPERAND_HUES[name], cut_for(shape, self.panel_px()))
                              if fits else None)
                grids.append(shape if fits else None)
            images.append(None)
            grids.append(None)
            titles = [f"a {shape_a}\naxis {axis} is {size_a}", f"b {shape_b}\naxis {axis} is {size_b}",
                      f"a {op} b"]
            notes = ["" if images[0] is not None else "too large to draw",
                     "" if images[1] is not None else "too large to draw",
                     f"does not broadcast:\naxis {axis} clashes,\n{size_a} against {size_b},\nand neither is 1"]
            cut_note = ""
        drawn = [im for im in images if im is not None] or [np.ones((1, 1, 3))]
        height = max(im.shape[0] for im in drawn)
        width = max(im.shape[1] for im in drawn)
        room_w, room_h = self.panel_px()
        scale = min(room_w / width, room_h / height)         # display pixels per image pixel
        pad = NAME_PX / scale                                # the names' room
        for i, (ax, image, grid) in enumerate(zip(self.axes, images, grids)):
            artist = self.images[i]
            ax.set_xlim(-pad, width)
            centre = (width - pad) / 2 if image is None else width - image.shape[1] / 2
            self.titles[i].set(position=(centre, -pad - 2 / scale), text=titles[i])
            self.notes[i].set(position=(centre, 0), text=notes[i])
            self.marks[i].set_data([], [])
            for text in self.names[i].values():
                text.set_text("")
            if image is None:
                artist.set_visible(False)
                continue
            h, w = image.shape[:2]
            left = width - w                                 # right-aligned, like the shapes
            artist.set_visible(True)
            artist.set_data(image)
            artist.set_extent((left, left + w, h, 0))
            self._name_axes(i, grid, drawn_shape(image, grid), left, 2 / scale, clash)
        self.cut_note.set_text(cut_note)
        self.fit(scale, [im.shape[0] * scale for im in images if im is not None])
        return result

    def fit(self, scale: float, grid_heights) -> None:
        """Size the canvas' height to what is drawn, given `scale` (display pixels per image
        pixel) and the grids' heights in pixels: from the top, the titles and the axes' names,
        the grids or the notes hanging from the grids' top (whichever reaches lowest), the note
        on cut slices, the key. Whole pixels: a frame is an image of whole pixels."""
        renderer = _renderer(self.fig)
        # Text hanging from the grids' top: the notes, and axis -2's name down the side.
        hanging = [text for text in self.notes + [names[-2] for names in self.names] if text.get_text()]
        content = max([*grid_heights, *(text.get_window_extent(renderer).height for text in hanging)])
        below = EDGE_PX + self.key.get_window_extent(renderer).height + KEY_GAP_PX
        cut_y = below
        if self.cut_note.get_text():
            below += self.cut_note.get_window_extent(renderer).height + KEY_GAP_PX
        panel = TITLE_PX + NAME_PX + content
        height = math.ceil(EDGE_PX + panel + below)
        dpi = self.fig.dpi
        if self.fig.get_figheight() != height / dpi:
            self.fig.set_size_inches(self.fig.get_figwidth(), height / dpi, forward=False)
        width, _, _ = PANEL_BOX
        for ax, left in zip(self.axes, PANEL_LEFTS):
            ax.set_position((left, below / height, width, panel / height))
            ax.set_ylim(content / scale, -(NAME_PX + TITLE_PX) / scale)
        self.key.set_y(EDGE_PX / height)
        self.cut_note.set_y(cut_y / height)
        for sign in self.signs:
            sign.set_y((below + content / 2) / height)

    def _name_axes(self, i: int, shape, drawn, left: float, gap: float, clash) -> None:
        """Name the axes of panel i's grids: axis -1 along the top of the first grid, -3 (when
        several grids stand side by side) at the top right, -2 down the left side, -4 (grids
        one below the other) at the bottom left; a clashing axis in red, with a red bar along it.
        `drawn`: the 4-D shape drawn, which a cut (`cut_for`) makes smaller than `shape`."""
        s0, s1, s2, s3 = drawn
        block_h, block_w = s2 * CELL + 1, s3 * CELL + 1
        width_all = s1 * block_w + (s1 - 1) * GAP
        height_all = s0 * block_h + (s0 - 1) * GAP
        clash_axis = clash[0] if clash else None
        shown = {-1: True, -2: len(shape) >= 2, -3: len(shape) >= 3 and s1 > 1, -4: len(shape) >= 4 and s0 > 1}
        places = {-1: (left, -gap), -3: (left + width_all, -gap), -2: (left - gap, 0),
                  -4: (left - gap, height_all)}
        words = {axis: f"axis {axis} →" for axis in places}
        for axis, text in self.names[i].items():
            text.set(position=places[axis], text=words[axis] if shown[axis] else "",
                     color=ERROR_COLOUR if axis == clash_axis else GUIDE_COLOUR)
        bars = {-1: ([left, left + block_w], [0, 0]), -3: ([left, left + width_all], [0, 0]),
                -2: ([left, left], [0, block_h]), -4: ([left, left], [0, height_all])}
        if clash_axis is not None and clash_axis >= -len(shape):
            self.marks[i].set_data(*bars[clash_axis])


def drawn_shape(image: np.ndarray, shape) -> tuple[int, int, int, int]:
    """The 4-D shape of the grids in `image`, an image of `shape` maybe cut to fewer slices of
    axes -4 and -3 (`cut_for`)."""
    _, _, s2, s3 = _as_4d(shape)
    block_h, block_w = s2 * CELL + 1, s3 * CELL + 1
    return ((image.shape[0] + GAP) // (block_h + GAP), (image.shape[1] + GAP) // (block_w + GAP), s2, s3)


def clashing_axis(shape_a, shape_b) -> tuple[int, int, int]:
    """(axis counted from the right, size in a, size in b) of the first axis, from the right,
    on which two shapes that do not broadcast clash."""
    for axis in range(-1, -min(len(shape_a), len(shape_b)) - 1, -1):
        a, b = shape_a[axis], shape_b[axis]
        if a != b and 1 not in (a, b):
            return axis, a, b
    raise ValueError(f"shape_a, shape_b: expected shapes that do not broadcast, got {shape_a} and {shape_b}")


def plot_broadcast(shape_a, shape_b, op: str = "+", figsize=FIGSIZE):
    """Static broadcasting diagram of `a op b` (pyplot figure, shown inline)."""
    fig = plt.figure(figsize=figsize, dpi=DPI)
    BroadcastDiagram(fig, op).draw(shape_a, shape_b, op)
    return fig


# ---- the widget -------------------------------------------------------------------------------

class BroadcastExplorer(Explorer):
    """Two text boxes (and a menu of examples) -> the broadcast result or the error, and the diagram.

    `update(a="2, 3, 4", b="3, 4")` redraws (see `Explorer`) and returns the message shown;
    `result` is the last result shape (None on an error). The menu always shows the example
    on screen (blank for shapes of one's own), so picking any entry changes the picture.
    """

    def __init__(self, a: str = "3, 1", b: str = "4"):
        import ipywidgets as widgets
        from matplotlib.figure import Figure

        fig = Figure(figsize=FIGSIZE, dpi=DPI)        # its height follows the shapes (`BroadcastDiagram.fit`)
        self.diagram = BroadcastDiagram(fig)
        layout = widgets.Layout(width="260px")
        self.a_box = widgets.Text(value=a, description="shape a", layout=layout)
        self.b_box = widgets.Text(value=b, description="shape b", layout=layout)
        self.examples = widgets.Dropdown(options=list(PRESETS), value=None, description="examples",
                                         layout=widgets.Layout(width="440px"))
        self.examples.observe(self._on_example, names="value")
        self.info = widgets.HTML()
        # Three images of new sizes, their titles, notes, axis names and the operators move; the
        # key is the background, drawn once per canvas height.
        self._build(fig, self.diagram.moving,
                    [self.a_box, self.b_box],
                    [self.examples, widgets.HBox([self.a_box, self.b_box]), self.info])
        self.result, self.message = None, ""
        self.update()

    def _on_example(self, change) -> None:
        if not self._quiet and change["new"] in PRESETS:
            self.update(*PRESETS[change["new"]])

    def update(self, a: str | None = None, b: str | None = None) -> str:
        """Redraw for the shapes typed in (or given here); returns the message shown."""
        start = time.perf_counter()
        self._set_controls((self.a_box, a), (self.b_box, b))
        with self._quietly():  # None, the blank entry, included
            self.examples.value = _preset_of(self.a_box.value, self.b_box.value)
        try:
            shape_a = parse_shape(self.a_box.value)
            shape_b = parse_shape(self.b_box.value)
        except ValueError as error:
            self.result, self.message = None, str(error)
            self.info.value = _html_note(self.message, ok=False)
            return self.message                        # keep the last diagram on a half-typed shape
        try:
            self.result = broadcast_shape(shape_a, shape_b)
            self.message = f"a + b has shape {self.result}"
        except ValueError as error:
            self.result, self.message = None, str(error)
        self.info.value = (f"<pre style='margin:0;line-height:1.3'>"
                           f"{html.escape(alignment_table(shape_a, shape_b))}</pre>"
                           + _html_note(self.message, ok=self.result is not None))
        self.diagram.draw(shape_a, shape_b)
        self._show(start, background=self.frames.size)
        return self.message


def _preset_of(a: str, b: str) -> str | None:
    """The example whose shapes are the ones typed, or None (the menu then shows no entry)."""
    try:
        shapes = (parse_shape(a), parse_shape(b))
    except ValueError:
        return None
    return next((name for name, (pa, pb) in PRESETS.items()
                 if (parse_shape(pa), parse_shape(pb)) == shapes), None)


def _html_note(text: str, ok: bool) -> str:
    colour = "#1e7e34" if ok else "#b3261e"
    mark = "&#10003;" if ok else "&#10007;"
    return f"<div style='color:{colour};font-family:monospace'>{mark} {html.escape(text)}</div>"


def broadcast_explorer(a: str = "3, 1", b: str = "4") -> BroadcastExplorer:
    """Build the explorer; display `.widget` in the notebook."""
    return BroadcastExplorer(a, b)
