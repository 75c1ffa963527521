"""Rasterise each distinct text once: the widgets' redraws paint token labels from a cache.

Drawing a text with Agg lays out its glyphs with FreeType and renders each one, about 1 ms a
label on a 2-core machine; a widget frame with 60 token labels spent most of its time there.
`cache_text(renderer)` makes that renderer keep the coverage bitmap of every (text, font,
angle) it draws and stamp it on later draws, in the text's colour: 5-10 times faster. Text
stays a matplotlib `Text` artist (layout, alignment, the figure lint all see it); only the
pixels are reused. A stamp lands on whole pixels, where Agg places glyphs to 1/64 pixel:
a label may sit up to half a pixel from where a full draw puts it.
"""
from __future__ import annotations

import math

import numpy as np
from matplotlib.backends.backend_agg import RendererAgg


def cache_text(renderer: RendererAgg, caches: tuple[dict, dict] | None = None) -> RendererAgg:
    """Give `renderer` (a canvas's Agg renderer) a text cache; returns it.

    caches: (bitmaps, font metrics) shared with other renderers of the same dpi (a widget's
    canvas at another size, `common.Frames`); None starts empty ones.
    """
    if getattr(renderer, "_text_cache", None) is not None:
        return renderer
    renderer._text_cache, metrics = caches if caches is not None else ({}, {})
    draw_uncached = renderer.draw_text

    def draw_text(gc, x, y, s, prop, angle, ismath=False, mtext=None):
        if ismath:                                  # math text: rare, drawn as usual
            return draw_uncached(gc, x, y, s, prop, angle, ismath, mtext)
        key = (s, hash(prop), round(angle, 3), gc.get_antialiased())
        if key not in renderer._text_cache:
            renderer._text_cache[key] = _rasterise(renderer, s, prop, angle, gc.get_antialiased())
        stamp = renderer._text_cache[key]
        if stamp is not None:
            coverage, top, left = stamp
            # x, y: the text's anchor, y downwards; draw_text_image takes the bitmap's bottom.
            renderer._renderer.draw_text_image(coverage, round(x) + left,
                                               round(y) + top + coverage.shape[0], 0, gc)

    renderer.draw_text = draw_text
    # Text layout asks for the font's line metrics on every draw (matplotlib reads them from
    # the font file's tables each time); they depend on the font only.
    def font_height_metrics(prop):
        key = hash(prop)
        if key not in metrics:
            metrics[key] = _font_height_metrics(prop, renderer.dpi)
        return metrics[key]

    renderer._get_font_height_metrics = font_height_metrics
    return renderer


def _rasterise(renderer, s, prop, angle, antialiased):
    """The text's coverage (rows, cols) uint8 and its offset (top, left) from the anchor."""
    width, height, descent = renderer.get_text_width_height_descent(s, prop, False)
    # The text's box around its anchor (baseline start; y up), turned by `angle`, in pixels
    # with y down, and 3 pixels to spare on each side.
    cos, sin = math.cos(math.radians(angle)), math.sin(math.radians(angle))
    corners = [(x, y) for x in (0, width) for y in (-descent, height - descent)]
    xs = [x * cos - y * sin for x, y in corners]
    ys = [-(x * sin + y * cos) for x, y in corners]
    left, top = math.floor(min(xs)) - 3, math.floor(min(ys)) - 3
    scratch = RendererAgg(math.ceil(max(xs)) + 3 - left, math.ceil(max(ys)) + 3 - top, renderer.dpi)
    gc = scratch.new_gc()
    gc.set_foreground((0, 0, 0))
    gc.set_antialiased(antialiased)
    RendererAgg.draw_text(scratch, gc, -left, -top, s, prop, angle, False)
    alpha = np.asarray(scratch.buffer_rgba())[..., 3]
    rows, cols = np.nonzero(alpha)
    if rows.size == 0:                              # blank text: nothing to paint
        return None
    first_row, first_col = rows.min(), cols.min()
    coverage = np.ascontiguousarray(alpha[first_row:rows.max() + 1, first_col:cols.max() + 1])
    return coverage, int(first_row) + top, int(first_col) + left


def _font_height_metrics(prop, dpi):
    """(ascent, descent, line gap) in pixels, as matplotlib's Text._get_layout reads them."""
    from matplotlib.font_manager import fontManager, get_font

    font = get_font(fontManager._find_fonts_by_props(prop))
    for table_name, gap, ascent, descent in (("OS/2", "sTypoLineGap", "sTypoAscender", "sTypoDescender"),
                                             ("hhea", "lineGap", "ascent", "descent")):
        table = font.get_sfnt_table(table_name)
        if table is not None:
            scale = prop.get_size_in_points() * dpi / 72 / font.get_sfnt_table("head")["unitsPerEm"]
            return table[ascent] * scale, -table[descent] * scale, table[gap] * scale
    return None, None, None                         # matplotlib then measures "lp" itself
