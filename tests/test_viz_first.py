"""The widgets and plots of notebooks 01-03, built headlessly.

Each widget is driven through its redraw callback `update(...)` as a slider or
text box would drive it: a new value must change what is plotted, and an
invalid value must come back as a message, never as an exception.
"""
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("ipywidgets")

from tfmlib import build_vocab, encode_batch  # noqa: E402
from tfmlib.viz import embeddings as viz_embeddings  # noqa: E402
from tfmlib.viz import shapes as viz_shapes  # noqa: E402
from tfmlib.viz import tokenization as viz_tokenization  # noqa: E402
from tfmlib.viz.lint import assert_readable  # noqa: E402

SENTENCES = ["the cat sat on the mat", "i love nlp", "attention is all you need"]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _image_data(artist) -> np.ndarray:
    return np.array(artist.get_array(), dtype=float, copy=True)


# ---- notebook 01: the broadcast explorer --------------------------------------------------------

def test_broadcast_explorer_redraws_for_new_shapes():
    explorer = viz_shapes.broadcast_explorer(a="3, 1", b="4")
    assert explorer.result == (3, 4)
    before = [_image_data(image) for image in explorer.diagram.images]

    message = explorer.update(a="2, 3, 4", b="3, 4")

    assert explorer.result == (2, 3, 4)
    assert "(2, 3, 4)" in message
    after = [_image_data(image) for image in explorer.diagram.images]
    assert all(b.shape != a.shape or not np.array_equal(b, a) for b, a in zip(before, after))
    assert "(2, 3, 4)" in explorer.info.value
    assert math.isfinite(explorer.last_redraw_ms)


def test_broadcast_explorer_reports_a_clash_and_bad_text_without_raising():
    explorer = viz_shapes.broadcast_explorer()
    message = explorer.update(a="2, 3, 4", b="2, 3")
    assert explorer.result is None
    assert "axis -2" in message and "do not broadcast" in message
    assert "do not broadcast" in explorer.info.value

    message = explorer.update(b="3, x")
    assert "'x' is not a size" in message
    message = explorer.update(b="0, 3")
    assert "size of 0" in message


def test_broadcast_explorer_examples_menu_fills_the_boxes():
    explorer = viz_shapes.broadcast_explorer()
    label = [k for k in viz_shapes.PRESETS if "keepdim" in k and "without" in k][0]
    explorer.examples.value = label
    assert (explorer.a_box.value, explorer.b_box.value) == viz_shapes.PRESETS[label]
    assert explorer.result is None          # (B, L, D) - (B, L) does not broadcast


def test_broadcast_explorer_menu_shows_the_example_on_screen():
    explorer = viz_shapes.broadcast_explorer(a="3, 1", b="4")
    first = list(viz_shapes.PRESETS)[0]
    assert viz_shapes.PRESETS[first] == ("3, 1", "4")
    assert explorer.examples.value == first           # the starting picture is the first example
    shown = explorer.png()
    for label in list(viz_shapes.PRESETS)[::-1]:      # as the browser test picks: last first
        if label == explorer.examples.value:
            continue
        explorer.examples.value = label
        assert explorer.png() != shown                # every other entry changes the picture
        shown = explorer.png()
    explorer.update(a="5, 1", b="1, 6")               # shapes of one's own: no entry selected
    assert explorer.examples.value is None
    explorer.update(a="(2, 3, 4)", b="4")             # typed as an example's shapes: it is shown
    assert viz_shapes.PRESETS[explorer.examples.value] == ("2, 3, 4", "4")


def test_broadcast_diagram_marks_repeated_cells():
    source, stored = viz_shapes.operand_cells((3, 1), (3, 4))
    assert source.tolist() == [[0] * 4, [1] * 4, [2] * 4]
    assert stored[:, 0].all() and not stored[:, 1:].any()
    source, stored = viz_shapes.operand_cells((4,), (3, 4))   # a missing axis counts as 1
    assert stored[0].all() and not stored[1:].any()
    assert viz_shapes.parse_shape("(2, 3)") == (2, 3) and viz_shapes.parse_shape("") == ()


def test_broadcast_result_cells_show_the_a_and_b_elements_they_combine():
    """Each cell of a + b is drawn in two halves: the colour of the a element it reads (left)
    and of the b element (right), the same colours as those cells in the operands' panels."""
    a, b, result = (3, 1), (4,), (3, 4)
    a_image = viz_shapes.operand_image(a, result, viz_shapes.OPERAND_HUES["a"])
    b_image = viz_shapes.operand_image(b, result, viz_shapes.OPERAND_HUES["b"])
    both = viz_shapes.result_image(result, a, b)
    cell, half = viz_shapes.CELL, viz_shapes.CELL // 2
    for row in range(3):
        for col in range(4):
            y, x = row * cell + 3, col * cell                # inside cell (row, col)
            assert np.allclose(both[y, x + 2], a_image[y, x + 2])              # left half: a's element
            assert np.allclose(both[y, x + half + 2], b_image[y, x + half + 2])  # right half: b's
    assert not np.allclose(a_image[3, 2], b_image[3, 2])


def test_broadcast_diagram_names_the_grid_axes_and_marks_a_clashing_axis():
    explorer = viz_shapes.broadcast_explorer(a="2, 3, 4", b="3, 4")
    names = explorer.diagram.names[0]
    assert [names[axis].get_text() for axis in (-1, -2, -3, -4)] == ["axis -1 →", "axis -2 →", "axis -3 →", ""]
    assert all(len(mark.get_xdata()) == 0 for mark in explorer.diagram.marks)    # nothing clashes
    explorer.update(a="2, 3, 4", b="2, 3")           # axis -1: 4 against 3
    for panel in (0, 1):
        assert explorer.diagram.names[panel][-1].get_color() == viz_shapes.ERROR_COLOUR
        assert explorer.diagram.names[panel][-2].get_color() == viz_shapes.GUIDE_COLOUR
        xs, ys = explorer.diagram.marks[panel].get_data()
        assert len(xs) == 2 and ys[0] == ys[1] == 0   # a bar along the top: axis -1
    assert "axis -1 is 4" in explorer.diagram.titles[0].get_text()
    explorer.update(a="2, 2, 3, 3", b="3, 3, 3")     # axis -3: 2 against 3, grids side by side
    xs, ys = explorer.diagram.marks[1].get_data()
    assert xs[1] - xs[0] > 3 * 3 * viz_shapes.CELL    # the bar spans b's three grids


def test_plot_broadcast_draws_a_static_figure():
    fig = viz_shapes.plot_broadcast((2, 3, 4), (3, 4))
    assert len(fig.axes) == 3


def _panel_boxes(diagram, renderer) -> list:
    """The boxes, in pixels, of what the panels draw: grids, titles, axis names and notes."""
    images = [image.get_window_extent(renderer) for image in diagram.images if image.get_visible()]
    texts = [text.get_window_extent(renderer) for ax in diagram.axes for text in ax.texts
             if text.get_visible() and text.get_text()]
    return images + texts


def test_broadcast_diagram_canvas_fits_what_each_setting_draws():
    """The old fault: the layout was sized for 4-D shapes, so a 3-D shape (notebook 01's
    (2, 3, 4) + (3, 4)) or a 2-D one left an empty band of about 100 px between its grids and
    the key. Now in every setting the drawing starts just under the canvas' top, the note on
    cut slices (or the key) sits just under the lowest grid or note, the key just above the
    canvas' bottom, and the cells keep the size the FIGSIZE room gives them (4-D ones too)."""
    explorer = viz_shapes.broadcast_explorer()
    gap = viz_shapes.KEY_GAP_PX
    cells = {("2, 1, 1, 3", "2, 2, 3, 3"): 35.4, ("8, 8, 8, 8", "8"): 8.031, ("2, 3, 4", "3, 4"): 27.231,
             ("3, 1", "4"): 57.796}                  # pixels per cell, as before the canvas fitted
    states = [*viz_shapes.PRESETS.values(), *cells, ("8, 8, 8", "8"), ("8, 1", "1"), ("1, 8", "1"),
              ("2, 3, 4", "2, 3"), ("2, 2, 2, 2, 2", "2"), ("9", "1"), ("", "")]
    for a, b in states:
        explorer.update(a=a, b=b)
        fig, diagram = explorer.fig, explorer.diagram
        fig.canvas.draw()                            # a full draw: every box where the frame has it
        renderer = fig.canvas.get_renderer()
        width, height = explorer.frames.size
        panels = _panel_boxes(diagram, renderer)
        under = diagram.cut_note if diagram.cut_note.get_text() else diagram.key
        where = f"a {a}, b {b}"
        assert height - max(box.y1 for box in panels) <= 10, where                  # none above
        band = min(box.y0 for box in panels) - under.get_window_extent(renderer).y1
        assert 0 < band <= gap + 1, where                                           # none over the key
        assert diagram.key.get_window_extent(renderer).y0 <= 10, where               # none below
        if (a, b) in cells:
            image = diagram.images[0]
            cell = image.get_window_extent(renderer).height / image.get_array().shape[0] * viz_shapes.CELL
            assert cell == pytest.approx(cells[a, b], abs=0.01), where


# ---- notebook 02: the tokenizer explorer --------------------------------------------------------

@pytest.fixture
def vocab():
    return build_vocab(SENTENCES)


def test_tokenizer_explorer_adds_the_typed_sentence_as_a_row(vocab):
    explorer = viz_tokenization.tokenizer_explorer(SENTENCES, vocab, sentence="my cat loves attention")
    assert tuple(explorer.batch.shape) == (4, 8)
    before = _image_data(explorer.grid.image)
    texts_before = [t.get_text() for row in explorer.grid.cells for t in row]

    message = explorer.update(sentence="i love the cat and the mat and the hat")

    assert message == ""
    assert tuple(explorer.batch.shape) == (4, 12)         # 10 words + <bos> + <eos>
    after = _image_data(explorer.grid.image)
    assert after.shape != before.shape or not np.array_equal(after, before)
    assert [t.get_text() for row in explorer.grid.cells for t in row] != texts_before
    assert "and" in explorer.info.value and "&lt;unk&gt;" in explorer.info.value   # unknown words named
    assert explorer.batch.dtype == torch.long
    assert torch.equal(explorer.batch[:3, :8], encode_batch(SENTENCES, vocab, add_bos=True, add_eos=True))


def test_tokenizer_explorer_gives_messages_for_empty_and_long_input(vocab):
    explorer = viz_tokenization.tokenizer_explorer(SENTENCES, vocab)
    assert "type a sentence" in explorer.update(sentence="   ")
    assert explorer.batch[3, :2].tolist() == [vocab["<bos>"], vocab["<eos>"]]
    message = explorer.update(sentence=" ".join(["cat"] * 40))
    assert "only the first" in message
    assert explorer.batch.shape[1] == viz_tokenization.MAX_COLS


def test_plot_batch_draws_the_grid(vocab):
    batch = encode_batch(SENTENCES, vocab, add_bos=True, add_eos=True)
    fig = viz_tokenization.plot_batch(batch, vocab)
    texts = [t.get_text() for t in fig.axes[0].texts if t.get_visible()]
    assert len(texts) == 3 * 8 and "<pad>\n0" in texts and "cat\n5" in texts


# ---- notebook 03: the positional-encoding explorer ----------------------------------------------

def test_pe_explorer_redraws_for_new_slider_values():
    explorer = viz_embeddings.positional_encoding_explorer(d_model=16, max_len=50, pos_i=10, pos_j=14)
    image = explorer.panels.image
    before, dot_before = _image_data(image), explorer.dot

    assert explorer.update(d_model=32, max_len=80) == ""

    assert _image_data(image).shape == (80, 32) != before.shape
    assert explorer.pe.shape == (80, 32)
    assert explorer.j_box.max == 79
    curve_before = explorer.panels.curve.get_ydata().copy()
    assert explorer.update(pos_j=40) == ""
    assert explorer.dot != dot_before
    assert np.array_equal(explorer.panels.curve.get_ydata(), curve_before)   # i did not move
    assert explorer.update(pos_i=3) == ""
    assert not np.array_equal(explorer.panels.curve.get_ydata(), curve_before)
    assert math.isfinite(explorer.last_redraw_ms)


def test_pe_explorer_dot_product_depends_only_on_distance():
    explorer = viz_embeddings.positional_encoding_explorer()
    explorer.update(pos_i=5, pos_j=12)
    first = explorer.dot
    explorer.update(pos_i=20, pos_j=27)
    assert explorer.dot == pytest.approx(first, abs=1e-9)


def test_pe_explorer_invalid_values_give_a_message_and_keep_the_picture():
    explorer = viz_embeddings.positional_encoding_explorer()
    before = _image_data(explorer.panels.image)
    for values, words in [({"d_model": 7}, "even"), ({"max_len": 3}, "max_len"),
                          ({"pos_i": 50}, "position i"), ({"pos_j": -1}, "position j")]:
        message = explorer.update(**values)
        assert words in message
        assert words in explorer.info.value
        assert np.array_equal(_image_data(explorer.panels.image), before)


def test_pe_explorer_shorter_max_len_moves_the_positions_inside():
    explorer = viz_embeddings.positional_encoding_explorer(max_len=50, pos_i=40, pos_j=45)
    assert explorer.update(max_len=20) == ""
    assert (explorer.i_box.value, explorer.j_box.value) == (19, 19)


def test_pe_explorer_dragging_max_len_below_the_positions_moves_them_inside():
    explorer = viz_embeddings.positional_encoding_explorer(max_len=50, pos_i=40, pos_j=10)
    before = _image_data(explorer.panels.image)
    explorer.max_len_box.value = 20                  # what dragging the slider does
    assert explorer.message == "" and explorer.info.value.startswith("<code>")
    assert (explorer.i_box.value, explorer.j_box.value) == (19, 10)
    assert _image_data(explorer.panels.image).shape == (20, 16) != before.shape
    assert list(explorer.panels.row_i.get_ydata()) == [19, 19]


def test_static_pe_plots():
    pe = viz_embeddings.sinusoidal_positional_encoding(30, 16)
    viz_embeddings.plot_pe_heatmap(pe)
    viz_embeddings.plot_pe_curves(pe, dims=(0, 4))
    viz_embeddings.plot_pe_similarity(pe, anchors=(0, 5))
    viz_embeddings.plot_score_matrix(torch.randn(4, 4))
    explorer = viz_embeddings.positional_encoding_explorer()
    assert len(explorer.fig.axes) == 3          # heatmap, its colour bar, the dot-product curve


def test_pe_explorer_cached_background_gives_the_same_picture_as_a_fresh_draw():
    dragged = viz_embeddings.positional_encoding_explorer(pos_i=10, pos_j=14)
    first = dragged.png()
    dragged.update(pos_i=30, pos_j=33)               # only the moving parts are redrawn
    fresh = viz_embeddings.positional_encoding_explorer(pos_i=30, pos_j=33)
    assert dragged.png() != first
    assert dragged.png() == fresh.png()
    dragged.update(d_model=32)                        # a new size redraws the background
    assert dragged.png() == viz_embeddings.positional_encoding_explorer(d_model=32, pos_i=30,
                                                                        pos_j=33).png()


def test_tokenizer_explorer_cached_background_gives_the_same_picture_as_a_fresh_draw(vocab):
    typing = viz_tokenization.tokenizer_explorer(SENTENCES, vocab, sentence="my cat")
    first = typing.png()
    typing.update(sentence="the dog sat")            # same L: only the typed row is redrawn
    assert typing.png() != first
    assert typing.png() == viz_tokenization.tokenizer_explorer(SENTENCES, vocab, "the dog sat").png()
    long = "the cat sat on the mat and the dog sat on the cat"
    typing.update(sentence=long)                      # a longer L redraws everything
    assert typing.png() == viz_tokenization.tokenizer_explorer(SENTENCES, vocab, long).png()


def test_broadcast_diagram_draws_four_axes():
    explorer = viz_shapes.broadcast_explorer()
    assert explorer.update(a="2, 1, 1, 3", b="2, 2, 3, 3") == "a + b has shape (2, 2, 3, 3)"
    image = _image_data(explorer.diagram.images[0])
    assert image.shape[0] > 2 * viz_shapes.CELL * 3      # two blocks of 3 rows, one below the other
    assert explorer.diagram.notes[0].get_text() == ""      # drawn, not "too large to draw"
    explorer.update(a="2, 2, 2, 2, 2", b="2")
    assert "too large" in explorer.diagram.notes[0].get_text()


# ---- every widget state passes the figure lint --------------------------------------------------

def test_broadcast_explorer_frames_pass_the_lint():
    explorer = viz_shapes.broadcast_explorer()
    for state in [{"a": "3, 1", "b": "4"}, {"a": "8, 8, 8, 8", "b": "8, 1, 8"}, {"a": "2, 3, 4", "b": "2, 3"},
                  {"a": "2, 2, 2, 2, 2", "b": "2"}, {"b": "3, x"}]:
        explorer.update(**state)
        assert_readable(explorer, f"broadcast explorer at {state}")


def test_tokenizer_explorer_frames_pass_the_lint(vocab):
    explorer = viz_tokenization.tokenizer_explorer(SENTENCES, vocab)
    for sentence in ["", "my cat loves attention", "attention " * 14, "a " * 40,
                     "supercalifragilistic antidisestablishmentarianism"]:
        explorer.update(sentence=sentence)
        assert_readable(explorer, f"tokenizer explorer at {sentence!r}")


def test_pe_explorer_frames_pass_the_lint():
    explorer = viz_embeddings.positional_encoding_explorer()
    for state in [{}, {"d_model": 128, "max_len": 200}, {"pos_i": 199, "pos_j": 0},
                  {"max_len": 100}, {"max_len": 8, "d_model": 4}, {"max_len": 150, "pos_i": 120}]:
        assert explorer.update(**state) == ""
        assert_readable(explorer, f"PE explorer at {state}")


def test_broadcast_diagram_gives_a_and_b_their_own_hues_and_cuts_large_shapes():
    explorer = viz_shapes.broadcast_explorer(a="2, 3, 4", b="2, 3, 4")
    a, b = (_image_data(image) for image in explorer.diagram.images[:2])
    assert not np.array_equal(a, b)                   # same shapes, yet never the same colours
    explorer.update(a="8, 8, 8, 8", b="8, 8")
    width, height = explorer.diagram.panel_px()
    k4, k3 = viz_shapes.cut_for((8, 8, 8, 8), (width, height))
    assert (k4, k3) < (8, 8)                          # 64 grids of 8 x 8 do not fit a panel ...
    image = _image_data(explorer.diagram.images[0])
    shown = min(width / image.shape[1], height / image.shape[0])
    assert viz_shapes.CELL * shown >= viz_shapes.MIN_CELL_PX - 1e-9     # ... so cells stay readable
    assert "first" in explorer.diagram.cut_note.get_text()              # and the figure says so
    explorer.update(a="3, 1", b="4")
    assert explorer.diagram.cut_note.get_text() == ""
