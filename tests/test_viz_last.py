"""The widgets of notebooks 08, 09 and 10, built headlessly: each update must change the plot.

Every explorer exposes `.update(...)` (what a learner's click does) and keeps its artists, so
a test can compare the plotted data before and after a change without a browser.
"""
from __future__ import annotations

import inspect
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("ipywidgets")

from tfmlib import (add_positional_encoding, build_vocab, causal_mask, embed, encode_batch,  # noqa: E402
                    init_decoder_layer_params, init_encoder_layer_params, padding_mask,
                    sinusoidal_positional_encoding, target_mask)
from tfmlib.training import VOCAB, ModelConfig, init_model, train  # noqa: E402
from tfmlib.adam import warmup_steps_for  # noqa: E402
from tfmlib.viz import adam as adam_viz  # noqa: E402
from tfmlib.viz import encoder_decoder as ed_viz  # noqa: E402
from tfmlib.viz import style  # noqa: E402
from tfmlib.viz import training as tr_viz  # noqa: E402
from tfmlib.viz.lint import assert_readable, classroom_problems, lint_figure  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

SENTENCES = ["the cat sat on the mat", "i love nlp", "attention is all you need"]
TARGETS = ["die katze sass auf der matte", "ich liebe nlp", "aufmerksamkeit ist alles"]


def _snapshot(image) -> np.ndarray:
    return np.ma.filled(np.asarray(image.get_array(), dtype=float), np.nan).copy()


def _changed(before: np.ndarray, after: np.ndarray) -> bool:
    return before.shape != after.shape or not np.allclose(before, after, equal_nan=True)


def _label_overlaps(ax, renderer) -> list[str]:
    """Pairs of the axes' visible texts (the token labels the widgets place themselves)
    whose boxes overlap by more than a pixel; the figure lint checks only tick labels."""
    texts = [t for t in ax.texts if t.get_visible() and t.get_text()]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    return [f"{a!r} and {b!r}" for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1:]
            if min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0) > 1
            and min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0) > 1]


def _assert_readable_labels(explorer, ax, where: str) -> None:
    assert_readable(explorer, where)                       # draws the frame: boxes are current
    assert not _label_overlaps(ax, explorer.fig.canvas.get_renderer()), where


@pytest.fixture(scope="module")
def stack():
    d_model, d_ff = 16, 32
    vocab, tgt_vocab = build_vocab(SENTENCES), build_vocab(TARGETS)
    ids = encode_batch(SENTENCES, vocab, add_bos=True, add_eos=True)      # (3, 8)
    tgt_ids = encode_batch(TARGETS, tgt_vocab, add_bos=True)              # (3, 7)
    g = torch.Generator().manual_seed(0)
    pe = sinusoidal_positional_encoding(16, d_model)
    x = add_positional_encoding(embed(ids, torch.randn(len(vocab), d_model, generator=g)), pe)
    y = add_positional_encoding(embed(tgt_ids, torch.randn(len(tgt_vocab), d_model, generator=g)), pe)
    return ed_viz.StackAttention(
        x, padding_mask(ids, 0), y, target_mask(tgt_ids, 0),
        encoder_layers=[init_encoder_layer_params(d_model, d_ff, generator=g) for _ in range(3)],
        decoder_layers=[init_decoder_layer_params(d_model, d_ff, generator=g) for _ in range(3)],
        sample_names=SENTENCES, src_tokens=ed_viz.token_rows(ids, vocab),
        tgt_tokens=ed_viz.token_rows(tgt_ids, tgt_vocab))


@pytest.fixture(scope="module")
def built_stack_explorer(stack):
    """One explorer for the module's tests: building one draws each sentence at the widest setting
    (its labels rasterised once), about 1 s of CPU, which each test would otherwise pay again."""
    return ed_viz.StackAttentionExplorer(stack)


@pytest.fixture
def stack_explorer(built_stack_explorer):
    """The module's explorer, set back to the state a new explorer starts in (its constructor's
    defaults, which its last update draws): each test begins there, whatever the one before left."""
    built_stack_explorer.update(layers=2, heads=4, kind="encoder self-attention", sample=0)
    return built_stack_explorer


# ---- notebook 08 ------------------------------------------------------------------------------

def test_stack_maps_shapes(stack):
    encoder_maps = stack.maps(2, 4, "encoder")
    assert [tuple(m.shape) for m in encoder_maps] == [(3, 4, 8, 8)] * 2
    assert tuple(stack.maps(3, 2, "decoder_self")[0].shape) == (3, 2, 7, 7)
    assert tuple(stack.maps(1, 8, "decoder_cross")[0].shape) == (3, 8, 7, 8)


def test_tile_layout(stack):
    canvas = ed_viz.tile(stack.maps(2, 4, "decoder_cross"), sample=1)
    assert canvas.shape == (2 * 8 - 1, 4 * 9 - 1)       # 2 layers of 7 rows, 4 heads of 8 columns
    assert np.isnan(canvas[7]).all() and np.isnan(canvas[:, 8]).all()   # the separators


@pytest.mark.parametrize("change", [dict(layers=3), dict(heads=1), dict(sample=2),
                                    dict(kind="decoder self-attention (causal)"),
                                    dict(kind="decoder cross-attention", heads=1, layers=1)])
def test_stack_widget_redraws(stack_explorer, change):
    explorer = stack_explorer
    before, picture = _snapshot(explorer.image), explorer.picture.value
    explorer.update(**change)
    assert _changed(before, _snapshot(explorer.image))
    assert explorer.picture.value != picture and explorer.picture.value[:4] == b"\x89PNG"


def test_stack_widget_offers_only_divisors_that_fit(stack, stack_explorer):
    explorer = stack_explorer
    d_model = stack.x.size(-1)
    assert list(explorer.heads.options) == [1, 2, 4]        # 8 heads x 8 keys: no room for tokens
    assert all(d_model % h == 0 for h in explorer.heads.options)
    assert explorer.layers.max == 3


def test_stack_widget_is_readable_in_every_state(stack_explorer):
    explorer = stack_explorer
    for kind in ed_viz.KINDS:
        for sample in range(3):
            for layers in (1, 3):
                for heads in (1, 4):
                    explorer.update(layers=layers, heads=heads, kind=kind, sample=sample)
                    _assert_readable_labels(explorer, explorer.view.ax,
                                            f"stack widget {layers}, {heads}, {kind}, {sample}")


def _map_extent_px(ax) -> tuple[float, float, float, float]:
    """(x0, y0, x1, y1) of the map's cells on the canvas, in pixels."""
    x0, x1, y0, y1 = ax.images[0].get_extent()
    (px0, py0), (px1, py1) = ax.transData.transform([(x0, y0), (x1, y1)])
    return min(px0, px1), min(py0, py1), max(px0, px1), max(py0, py1)


def _drawn_boxes(fig) -> list:
    """The boxes of every text and axes drawn on the canvas, in pixels."""
    renderer = fig.canvas.get_renderer()
    texts = [t for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text()]
    return [t.get_window_extent(renderer) for t in texts] + [ax.get_window_extent(renderer)
                                                             for ax in fig.axes]


def test_stack_widget_canvas_fits_what_each_setting_draws(stack_explorer):
    """The old faults: the canvas kept room below for the stack's longest token (a target
    word, under a source map too) and for its longest sequence (7 decoder rows on a canvas
    made for 8), and the width of four heads beside one. Now in every setting the drawing
    ends just above the canvas' bottom and just left of its right edge, the title sits right
    above the map, every tile has one size, and one more layer adds one layer of tiles."""
    explorer = stack_explorer
    cells = []
    for kind in ed_viz.KINDS:
        for sample in range(3):
            for heads in (1, 4):
                heights = []
                for layers in (1, 2, 3):
                    explorer.update(layers=layers, heads=heads, kind=kind, sample=sample)
                    where = f"{layers} layer(s), {heads} head(s), {kind}, sample {sample}"
                    explorer.fig.canvas.draw()       # a full draw: every box where the frame has it
                    width, height = explorer.frames.size
                    boxes = _drawn_boxes(explorer.fig)
                    assert min(box.y0 for box in boxes) <= 10, where             # no empty band below
                    assert max(box.x1 for box in boxes) >= width - 10, where      # nor on the right
                    x0, y0, x1, y1 = _map_extent_px(explorer.view.ax)
                    title = explorer.view.title.get_window_extent(explorer.fig.canvas.get_renderer())
                    assert 0 < title.y0 - y1 <= 40, where                         # right under the title
                    rows = explorer.image.get_array().shape[0]
                    cells.append((y1 - y0) / rows)
                    heights.append((height, rows))
                (h1, r1), (h2, r2), (h3, r3) = heights
                one_layer = (r2 - r1) * np.mean(cells)                            # its rows and the gap
                query_name = explorer.view.row_name.get_text()
                if h1 > explorer.view.min_height_in(query_name) * style.DPI + 1:  # not the least height
                    np.testing.assert_allclose([h2 - h1, h3 - h2], one_layer, atol=1.5)
                else:
                    np.testing.assert_allclose(h3 - h2, one_layer, atol=1.5)
    np.testing.assert_allclose(cells, cells[0], atol=0.05)                        # one cell size throughout


def test_stack_widget_colour_bar_spans_the_map_and_tiles_meet_the_classroom_minimum(stack_explorer):
    """The colour bar is as tall as the map in every setting (it reached below a two-layer
    map), and the tiles of every setting, three layers included, are of the classroom size."""
    explorer = stack_explorer
    for layers in (1, 2, 3):
        for heads in (1, 2, 4):
            for kind in ed_viz.KINDS:
                explorer.update(layers=layers, heads=heads, kind=kind)
                where = f"{layers} layer(s), {heads} head(s), {kind}"
                _, y0, _, y1 = _map_extent_px(explorer.view.ax)
                (bar,) = [ax.get_window_extent() for ax in explorer.fig.axes if hasattr(ax, "_colorbar")]
                np.testing.assert_allclose((bar.y0, bar.y1), (y0, y1), atol=1.0, err_msg=where)
                assert classroom_problems(explorer.fig) == [], where


def test_stack_widget_frames_reuse_a_renderer_per_canvas_size(stack_explorer):
    """Changing the layers changes the canvas' size; going back to a size seen before must
    reuse its renderer, whose text metrics and text cache are warm (a new renderer lays out
    every label again: 08's layer changes took twice as long)."""
    explorer = stack_explorer
    explorer.update(layers=1)
    first = explorer.frames.canvas.get_renderer()
    explorer.update(layers=3)
    assert explorer.frames.canvas.get_renderer() is not first
    explorer.update(layers=1)
    assert explorer.frames.canvas.get_renderer() is first
    assert explorer.frames.canvas.get_renderer()._text_cache      # labels drawn from the cache


def test_stack_widget_labels_tokens_and_greys_padded_keys(stack, stack_explorer):
    explorer = stack_explorer
    explorer.update(layers=1, heads=2, kind="encoder self-attention", sample=1)   # "i love nlp"
    shown = [t.get_text() for t in explorer.view.labels if t.get_visible()]
    tokens = stack.src_tokens[1]
    assert shown == tokens + ["layer 1"] + tokens + ["head 0"] + tokens + ["head 1"]
    rgba = explorer.image.get_array()                      # (8, 8 + 1 + 8, 4)
    grey = matplotlib.colors.to_rgba(style.MASKED_COLOUR)
    padded = [j for j, token in enumerate(tokens) if token == "<pad>"]
    assert padded == [5, 6, 7]
    np.testing.assert_allclose(rgba[:, padded], np.broadcast_to(grey, (8, 3, 4)))
    assert not np.allclose(rgba[:, :5], grey)
    assert (rgba[:, 8, 3] == 0).all()                       # the gap between the two heads


def test_decoder_rows_are_labelled_by_the_token_written_there(stack, stack_explorer):
    """08 labels a decoder's query rows as notebook 10 does: by the token written there, one
    step after the token read there (<bos> ich liebe nlp <pad> -> ich liebe nlp <eos> <pad>)."""
    assert ed_viz.written_tokens(["<bos>", "ich", "liebe", "nlp", "<pad>", "<pad>"]) == \
        ["ich", "liebe", "nlp", "<eos>", "<pad>", "<pad>"]
    queries, keys = stack.tokens("decoder_cross", 1)
    assert queries == ed_viz.written_tokens(stack.tgt_tokens[1]) and keys == stack.src_tokens[1]
    queries, keys = stack.tokens("decoder_self", 1)
    assert queries[0] == stack.tgt_tokens[1][1] and keys == stack.tgt_tokens[1]
    explorer = stack_explorer
    explorer.update(layers=1, heads=1, kind="decoder cross-attention", sample=1)
    assert style.WRITTEN_QUERY_LABEL in explorer.view.row_name.get_text()
    assert explorer.view.title.get_text().startswith("UNTRAINED")
    shown = [t.get_text() for t in explorer.view.labels if t.get_visible()]
    assert shown[:len(queries)] == queries


def test_stack_widget_causal_tiles_grey_the_future(stack_explorer):
    explorer = stack_explorer
    explorer.update(layers=1, heads=1, kind="decoder self-attention (causal)", sample=0)
    rgba = explorer.image.get_array()                      # (7, 7, 4)
    grey = matplotlib.colors.to_rgba(style.MASKED_COLOUR)
    future = np.triu(np.ones((7, 7), dtype=bool), k=1)
    np.testing.assert_allclose(rgba[future], np.broadcast_to(grey, (future.sum(), 4)))


def test_stack_static_figure(stack):
    """The still is drawn as the widget's frame is: its canvas fits the map (the inline
    backend's crop hid the empty band below; a saved figure or a slide kept it)."""
    fig = ed_viz.plot_stack_attention(stack, num_layers=2, num_heads=4,
                                      kind="decoder cross-attention", sample=1)
    assert fig.axes[0].get_images()[0].get_array().shape == (15, 35, 4)
    assert_readable(fig, "plot_stack_attention")
    assert min(box.y0 for box in _drawn_boxes(fig)) <= 10
    matplotlib.pyplot.close(fig)


# ---- notebook 09 ------------------------------------------------------------------------------

def test_optimizer_paths():
    sgd = adam_viz.optimizer_path("sgd", lr=0.1)
    adam = adam_viz.optimizer_path("adam", lr=0.1)
    assert sgd.shape == adam.shape == (adam_viz.STEPS + 1, 2)
    np.testing.assert_allclose(sgd[1] - sgd[0], [0.04, -0.3], atol=1e-9)    # lr * gradient
    np.testing.assert_allclose(adam[1] - adam[0], [0.1, -0.1], atol=1e-6)   # lr * sign(gradient)
    assert adam_viz.path_losses(adam)[-1] < adam_viz.path_losses(sgd)[-1]


def test_diverging_sgd_is_not_plotted_as_inf():
    path = adam_viz.optimizer_path("sgd", lr=1.5, steps=2000)
    assert not np.isinf(path).any()


@pytest.mark.parametrize("change", [dict(lr=0.5), dict(beta1=0.0), dict(beta2=0.9)])
def test_optimizer_widget_redraws(change):
    explorer = adam_viz.OptimizerPathExplorer()
    sgd_line, adam_line, sgd_loss, adam_loss = explorer.lines
    before = [np.array(adam_line.get_xydata()), np.array(adam_loss.get_ydata())]
    sgd_before = np.array(sgd_line.get_xydata())
    picture = explorer.picture.value
    explorer.update(**change)
    assert _changed(before[0], np.array(adam_line.get_xydata()))
    assert _changed(before[1], np.array(adam_loss.get_ydata()))
    if "lr" in change:                   # SGD has no betas: only lr moves its path
        assert _changed(sgd_before, np.array(sgd_line.get_xydata()))
    else:
        np.testing.assert_array_equal(sgd_before, np.array(sgd_line.get_xydata()))
    assert explorer.picture.value != picture and explorer.picture.value[:4] == b"\x89PNG"


def test_optimizer_widget_is_readable_in_every_state():
    explorer = adam_viz.OptimizerPathExplorer()
    for change in (dict(), dict(lr=10 ** 0.2), dict(lr=0.001), dict(beta1=0.0), dict(beta1=0.99),
                   dict(beta2=0.9999)):
        explorer.update(**change)
        assert_readable(explorer, f"optimizer widget {change}")


def test_optimizer_surface_contours_are_labelled_and_the_loss_range_is_tight():
    fig = adam_viz.OptimizerPathExplorer().fig
    surface, losses = fig.axes[:2]
    labels = sorted(float(t.get_text()) for t in surface.texts if t is not surface.diverged)
    assert labels == [0.2, 0.5, 1, 2, 4]                   # every contour but the innermost
    low, high = losses.get_ylim()
    start_loss = adam_viz.path_losses(np.array([adam_viz.START]))[0]
    default_end = adam_viz.path_losses(adam_viz.optimizer_path("adam", lr=0.1))[-1]
    assert low < default_end < start_loss < high            # both ends of the default run show
    assert np.log10(high / low) <= 7                        # no empty decades (it was 11)
    assert_readable(fig, "the optimizer widget's figure")


def test_a_path_that_leaves_the_surface_is_named_and_one_that_stays_is_not():
    explorer = adam_viz.OptimizerPathExplorer(lr=0.1)
    assert explorer.surface.diverged.get_text() == ""
    explorer.update(lr=1.58)                    # SGD's steps across the bowl grow: 1 - 2 lr < -1
    sgd = adam_viz.optimizer_path("sgd", 1.58)
    assert np.abs(sgd[:, 1]).max() > 2.5        # it does leave the view (y from -2.5 to 2.5)
    assert explorer.surface.diverged.get_text().startswith("SGD leaves the plot at step")
    assert "Adam" not in explorer.surface.diverged.get_text()
    assert_readable(explorer, "the optimizer widget with SGD diverging")


def test_bias_correction_true_value_stays_visible_under_the_corrected_curve():
    steps = np.arange(1, 61)
    m = 1 - 0.9 ** steps
    v = 1 - 0.999 ** steps
    fig = adam_viz.plot_bias_correction(steps, m, m / (1 - 0.9 ** steps), v, v / (1 - 0.999 ** steps),
                                        gradient=1.0)
    for ax in fig.axes:
        truth, raw, corrected = ax.get_lines()
        np.testing.assert_allclose(corrected.get_ydata(), 1.0)       # on the true value ...
        assert truth.get_linewidth() >= 3 * corrected.get_linewidth()  # ... which shows around it
        assert truth.get_zorder() <= corrected.get_zorder()
        assert truth.get_label() in [t.get_text() for t in ax.get_legend().get_texts()]
    assert_readable(fig, "plot_bias_correction")
    matplotlib.pyplot.close(fig)


def test_schedules_figure_is_readable_and_shows_trains_own_schedule():
    fig = adam_viz.plot_schedules(d_model=512, warmup_steps=4000)
    assert_readable(fig, "plot_schedules")
    defaults = inspect.signature(train).parameters
    steps, peak = defaults["steps"].default, defaults["lr"].default
    cosine = fig.axes[1]
    assert cosine.get_title() == f"train(): warm-up {warmup_steps_for(steps)}, cosine to a tenth"
    assert cosine.get_xlim() == (0, steps)
    assert max(cosine.lines[0].get_ydata()) == pytest.approx(peak)
    matplotlib.pyplot.close(fig)


def test_notebook_09_names_trains_schedule_as_train_has_it():
    """Section 10 of 09_adam describes train()'s schedule in words: its numbers must be train's."""
    defaults = inspect.signature(train).parameters
    steps, peak = defaults["steps"].default, defaults["lr"].default
    notebook = json.loads((ROOT / "notebooks" / "09_adam.ipynb").read_text(encoding="utf-8"))
    prose = next("".join(cell["source"]) for cell in notebook["cells"]
                 if cell["cell_type"] == "markdown" and "`train`'s schedule over its" in "".join(cell["source"]))
    assert (f"over its {steps} steps at its peak of {peak:g}" in prose
            and f"{warmup_steps_for(steps)} steps of warm-up" in prose and f"a tenth of the peak, {peak / 10:g}" in prose)


# ---- notebook 10 ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_model():
    config = ModelConfig(d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=16)
    return init_model(config, torch.Generator().manual_seed(0)), config


def test_predict_with_attention_shapes(tiny_model):
    params, config = tiny_model
    source, output, cross = tr_viz.predict_with_attention(params, config, "3 1 4 1 5")
    assert source == ["3", "1", "4", "1", "5"]
    assert tuple(cross.shape) == (config.num_heads, len(output), 5)
    assert torch.allclose(cross.sum(-1), torch.ones(config.num_heads, len(output)))


@pytest.mark.parametrize("change", [dict(text="9 8 7 6 5 4 3"), dict(head="1"),
                                    dict(text="1 2 3", head="0")])
def test_reverse_widget_redraws(tiny_model, change):
    params, config = tiny_model
    explorer = tr_viz.ReverseExplorer(params, config, ["3 1 4 1 5", "2 7 1 8"])
    before, picture = _snapshot(explorer.image), explorer.picture.value
    explorer.update(**change)
    assert _changed(before, _snapshot(explorer.image))
    assert explorer.picture.value != picture
    assert "&rarr;" in explorer.result.value


@pytest.mark.parametrize("digits", [3, 12, 31])
def test_reverse_widget_is_readable_for_short_and_long_inputs(digits):
    """The old bugs: the query label was clipped at 12 digits, the title overflowed at 31."""
    config = ModelConfig(d_model=16, num_heads=2, d_ff=32, num_layers=1)    # max_len 32
    params = init_model(config, torch.Generator().manual_seed(0))
    explorer = tr_viz.ReverseExplorer(params, config, ["3 1 4 1 5"])
    for head in ("mean", "1"):
        explorer.update(text=" ".join(str(i % 10) for i in range(digits)), head=head)
        _assert_readable_labels(explorer, explorer.ax, f"reverse widget, {digits} digits, head {head}")
        shown = [t.get_text() for t in explorer.view.cols if t.get_visible()]
        assert shown == [str(i % 10) for i in range(digits)]


@pytest.mark.parametrize("digits", [24, 27, 31])
def test_reverse_widget_of_a_long_input_keeps_classroom_tiles(digits):
    """The old fault: the map's box was fixed, so past about 25 tokens its tiles fell below the
    classroom minimum (31 digits: 13 px). The figure grows instead, within the column, and
    the still that the notebook shows (`plot_cross_attention_mean`) with it."""
    config = ModelConfig(d_model=16, num_heads=2, d_ff=32, num_layers=1)    # max_len 32
    params = init_model(config, torch.Generator().manual_seed(0))
    explorer = tr_viz.ReverseExplorer(params, config, ["3 1 4 1 5"])
    short = explorer.frames.size
    text = " ".join(str(i % 10) for i in range(digits))
    explorer.update(text=text)
    assert classroom_problems(explorer.fig) == [], f"{digits} digits"
    _assert_readable_labels(explorer, explorer.ax, f"reverse widget, {digits} digits")
    width, height = explorer.frames.size
    assert height > short[1] and width <= style.COLUMN_PX
    assert (int(explorer.picture.width), int(explorer.picture.height)) == (width, height)
    explorer.update(text="3 1 4 1 5")                  # back to the short input's frame
    assert explorer.frames.size == short
    fig = tr_viz.plot_cross_attention_mean(params, config, text)
    assert classroom_problems(fig) == [] and lint_figure(fig) == [], f"{digits} digits"
    matplotlib.pyplot.close(fig)


def test_reverse_widget_says_what_the_model_was_trained_on(tiny_model):
    params, config = tiny_model
    explorer = tr_viz.ReverseExplorer(params, config, ["3 1 4 1 5"], trained_on=(3, 10))
    assert "trained on 3 to 10 digits" in explorer.result.value


def test_reverse_widget_example_dropdown_sets_the_text(tiny_model):
    params, config = tiny_model
    explorer = tr_viz.ReverseExplorer(params, config, ["3 1 4 1 5", "2 7 1 8"])
    before = _snapshot(explorer.image)
    explorer.example.value = "2 7 1 8"
    assert explorer.text.value == "2 7 1 8"
    assert _changed(before, _snapshot(explorer.image))


def test_reverse_widget_menu_shows_the_example_on_screen(tiny_model):
    params, config = tiny_model
    explorer = tr_viz.ReverseExplorer(params, config, ["3 1 4 1 5", "2 7 1 8"])
    assert explorer.example.value == "3 1 4 1 5" == explorer.text.value
    explorer.update(text="9 9 1")                      # digits of one's own: no entry selected
    assert explorer.example.value is None
    before = explorer.png()
    explorer.example.value = "3 1 4 1 5"               # so the first entry redraws too
    assert explorer.text.value == "3 1 4 1 5" and explorer.png() != before


def test_reverse_widget_head_buttons_are_wide_enough_for_mean(tiny_model):
    params, config = tiny_model
    explorer = tr_viz.ReverseExplorer(params, config, ["3 1 4 1 5"])
    assert explorer.head.options[0] == "mean"
    assert int(explorer.head.style.button_width.removesuffix("px")) >= 64


def test_reverse_widget_reports_bad_input_and_keeps_the_plot(tiny_model):
    params, config = tiny_model
    explorer = tr_viz.ReverseExplorer(params, config, ["3 1 4 1 5"])
    before = _snapshot(explorer.image)
    explorer.update(text="3 x 4")
    assert "expected digits" in explorer.result.value
    np.testing.assert_array_equal(before, _snapshot(explorer.image))


def test_training_figures(tiny_model):
    params, config = tiny_model
    history = {"step": [1, 2, 3], "loss": [2.0, 1.0, 0.5], "eval_step": [3], "exact_match": [0.5]}
    for fig in (tr_viz.plot_training_curves(history),
                tr_viz.plot_cross_attention(params, config, "1 2 3"),
                tr_viz.plot_cross_attention_mean(params, config, "1 2 3")):
        assert fig.axes
        assert_readable(fig, fig.axes[0].get_title())
        matplotlib.pyplot.close(fig)
    assert tr_viz.tokens(torch.tensor([1, 4, 2])) == ["<bos>", "0", "<eos>"]


@pytest.fixture(scope="module")
def notebook_10_model():
    """Notebook 10's model (4 heads, up to 32 tokens), untrained: the figures' shapes are its."""
    config = ModelConfig()
    return init_model(config, torch.Generator().manual_seed(0)), config


@pytest.mark.parametrize("digits", [10, 12, 16])
def test_cross_attention_of_a_long_input_keeps_classroom_tiles(notebook_10_model, digits):
    """Notebook 10's digit task: five panels in one row gave 10 digits tiles of 13 px, 12
    digits 11 px, under the classroom's minimum. The panels wrap onto more rows, the figure
    grows taller, and every head and the mean are still drawn."""
    params, config = notebook_10_model
    text = " ".join(str(i % 10) for i in range(digits))
    fig = tr_viz.plot_cross_attention(params, config, text)
    assert classroom_problems(fig) == [], f"{digits} digits"
    assert_readable(fig, f"{digits} digits")
    maps = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in maps] == [f"head {h}" for h in range(config.num_heads)] + ["mean of heads"]
    assert all(ax.images[0].get_array().shape[1] == digits for ax in maps)
    matplotlib.pyplot.close(fig)


def test_cross_attention_of_a_short_input_stays_one_row(notebook_10_model):
    """Notebook 10's examples (3 to 8 digits, trained: each and <eos> written) keep one row of
    panels at the figure's least height."""
    params, config = notebook_10_model
    fig = tr_viz.plot_cross_attention(params, config, "3 0 2 4 5 2")
    maps = [ax for ax in fig.axes if ax.images]
    assert len({round(ax.get_position().y1, 3) for ax in maps}) == 1
    assert fig.get_figheight() == tr_viz.CROSS_HEIGHT_IN
    assert classroom_problems(fig) == []
    matplotlib.pyplot.close(fig)


# ---- notebook 10's experiments lab --------------------------------------------------------------

@pytest.fixture(scope="module")
def lab_results():
    """Made-up records with run_all's layout: 3 experiments x 2 seeds, no training needed."""
    g = torch.Generator().manual_seed(0)
    results = {}
    for i, name in enumerate(["baseline", "no positions", "1 head"]):
        for seed in (0, 1):
            loss = (3.0 * torch.rand(40, generator=g) + 0.1 * (i + 1)).tolist()
            results[name, seed] = {"name": name, "seed": seed, "step": list(range(1, 41)),
                                   "loss": loss, "eval_step": [20, 40],
                                   "exact_match": torch.rand(2, generator=g).tolist()}
    return results


def test_plot_experiments_draws_every_seed_of_every_experiment(lab_results):
    fig = tr_viz.plot_experiments(lab_results, ["baseline", "1 head"])
    loss_ax, match_ax = fig.axes
    assert len(loss_ax.get_lines()) == 8 and len(match_ax.get_lines()) == 4  # raw + smoothed loss
    raw, smooth = loss_ax.get_lines()[4:6]                                   # "1 head", seed 0
    np.testing.assert_array_equal(raw.get_ydata(), lab_results["1 head", 0]["loss"])
    np.testing.assert_allclose(smooth.get_ydata(), tr_viz.smoothed(lab_results["1 head", 0]["loss"]))
    assert raw.get_alpha() < 0.5 and smooth.get_alpha() in (None, 1)         # raw faint, mean strong
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["baseline", "seed 0", "1 head", "seed 1"]   # by column: experiments on row 1
    assert_readable(fig, "plot_experiments")
    matplotlib.pyplot.close(fig)


def test_every_lab_experiment_has_one_colour_of_its_own():
    from tfmlib.experiments import EXPERIMENTS

    assert list(style.EXPERIMENT_COLOURS) == list(EXPERIMENTS)
    assert len(set(style.EXPERIMENT_COLOURS.values())) == len(EXPERIMENTS)
    with pytest.raises(ValueError, match="lab experiment"):
        style.experiment_colour("no such experiment")


def test_the_regressors_mse_gets_its_own_panel(lab_results):
    results = dict(lab_results)
    for seed in (0, 1):
        record = dict(results["baseline", seed], name="sum, regressor")
        results["sum, regressor", seed] = {**record, "loss": [100.0 / (i + 1) for i in range(40)]}
        results["sum", seed] = dict(results["baseline", seed], name="sum")
    fig = tr_viz.plot_experiments(results, ["sum", "sum, regressor"])
    loss_ax, mse_ax, match_ax = fig.axes
    assert "cross-entropy" in loss_ax.get_ylabel() and "MSE of the sum" in mse_ax.get_ylabel()
    assert {line.get_color() for line in loss_ax.get_lines()} == {style.experiment_colour("sum")}
    assert {line.get_color() for line in mse_ax.get_lines()} == {style.experiment_colour("sum, regressor")}
    assert len(match_ax.get_lines()) == 4
    assert_readable(fig, "plot_experiments with the regressor")
    matplotlib.pyplot.close(fig)
    assert len(tr_viz.plot_experiments(lab_results, ["baseline"]).axes) == 2   # no MSE, no panel
    matplotlib.pyplot.close("all")


def _lab_records(names, zero=()):
    """Made-up records for `names` x 2 seeds; the `zero` experiments never answer exactly."""
    g = torch.Generator().manual_seed(1)
    results = {}
    for i, name in enumerate(names):
        for seed in (0, 1):
            match = [0.0, 0.0] if name in zero else torch.rand(2, generator=g).tolist()
            results[name, seed] = {"name": name, "seed": seed, "step": list(range(1, 41)),
                                   "loss": (2.0 * torch.rand(40, generator=g) + 1.0 + 0.1 * i).tolist(),
                                   "eval_step": [20, 40], "exact_match": match}
    return results


def test_lab_figures_show_what_their_text_names():
    """10's lab: a run under another at 0 still shows; label smoothing's floor is drawn; a claim
    comparing two experiments draws them strong and the others faded; every marker differs."""
    names = ["sum", "sum, no positions"]
    fig = tr_viz.plot_experiments(_lab_records(names, zero=names), names)
    match_ax = fig.axes[-1]
    assert not any("hidden" in p for p in lint_figure(fig))           # both at 0, both seen
    under, over = match_ax.get_lines()[0], match_ax.get_lines()[2]      # "sum" and "sum, no positions", seed 0
    assert under.get_linewidth() > over.get_linewidth() and under.get_markersize() > over.get_markersize()
    matplotlib.pyplot.close(fig)
    fig = tr_viz.plot_experiments(_lab_records(["baseline", "label smoothing 0.1"]), ["baseline", "label smoothing 0.1"])
    from tfmlib.experiments import smoothed_loss_floor
    floor = smoothed_loss_floor(0.1, len(VOCAB))
    assert any(np.allclose(line.get_ydata(), floor) for line in fig.axes[0].get_lines())
    assert_readable(fig, "label smoothing's figure")
    matplotlib.pyplot.close(fig)
    four = ["baseline", "Pre-LN, no warm-up", "Post-LN", "Post-LN, no warm-up"]
    fig = tr_viz.plot_experiments(_lab_records(four), four, compare=four[:2])
    alphas = {line.get_color(): line.get_alpha() for line in fig.axes[1].get_lines()}
    assert [alphas[style.experiment_colour(n)] for n in four] == [1.0, 1.0, tr_viz.FADED_ALPHA, tr_viz.FADED_ALPHA]
    assert_readable(fig, "Pre-LN's figure")
    matplotlib.pyplot.close(fig)
    markers = [style.experiment_marker(name) for name in style.EXPERIMENT_COLOURS]
    assert len(set(markers)) == len(markers)
    assert style.experiment_marker("label smoothing 0.1") != style.experiment_marker("baseline")


def _past_the_box_px(ax) -> float:
    """How many pixels the shown lines and markers of `ax` reach past its box (<= 0: none)."""
    box = ax.get_window_extent()
    px_per_pt = ax.figure.dpi / 72
    past = -np.inf
    for line in ax.get_lines():
        if not line.get_visible():
            continue
        reach = tr_viz._half_width_pt(line) * px_per_pt
        x, y = ax.transData.transform(line.get_xydata().astype(float)).T
        past = max(past, box.y0 - (y - reach).min(), (y + reach).max() - box.y1,
                   box.x0 - (x - reach).min(), (x + reach).max() - box.x1)
    return past


def test_lab_figures_draw_runs_at_0_and_at_1_whole():
    """The old fault: the exact-match panel left 0.02 past 0 and 1, and clipped the rest, so
    "sum" at 0, widened under "sum, no positions", showed only as a thin edge under it (and a
    baseline at 1, under three others, lost its top). Now every line and marker of the lab's
    figures, and of the overlay with every run shown, lies inside its panel."""
    three = ["sum", "sum, no positions", "sum, regressor"]
    fig = tr_viz.plot_experiments(_lab_records(three, zero=three[:2]), three)
    fig.canvas.draw()
    assert _past_the_box_px(fig.axes[-1]) <= 0
    matplotlib.pyplot.close(fig)
    four = ["baseline", "Pre-LN, no warm-up", "Post-LN", "Post-LN, no warm-up"]
    records = _lab_records(four)
    for seed in (0, 1):
        records["baseline", seed]["exact_match"] = [1.0, 1.0]
        records["Pre-LN, no warm-up", seed]["exact_match"] = [1.0, 1.0]
    fig = tr_viz.plot_experiments(records, four, compare=four[:2])
    fig.canvas.draw()
    assert _past_the_box_px(fig.axes[-1]) <= 0
    matplotlib.pyplot.close(fig)
    names = ["baseline", "sum", "sum, no positions"]
    explorer = tr_viz.ExperimentOverlay(_lab_records(names, zero=names[1:]), names, selected=names)
    explorer.fig.canvas.draw()
    assert all(_past_the_box_px(panels["match"]) <= 0 for panels in explorer.task_panels.values())


def test_training_curves_draw_the_levels_of_a_blind_guess():
    history = {"step": [1, 2, 3], "loss": [3.0, 2.0, 0.5], "eval_step": [3], "exact_match": [0.5]}
    fig = tr_viz.plot_training_curves(history)
    levels = [line.get_ydata()[0] for line in fig.axes[0].get_lines()[1:]]
    np.testing.assert_allclose(levels, [np.log(len(VOCAB)), np.log(10)])
    assert_readable(fig, "training curves")
    matplotlib.pyplot.close(fig)


def test_experiment_overlay_gives_each_task_its_own_panels():
    names = ["baseline", "no positions", "sum", "sum, no positions"]
    explorer = tr_viz.ExperimentOverlay(_lab_records(names), names, selected=("baseline",))
    assert list(explorer.task_panels) == ["reverse", "sum"]
    for name in names:
        panels = explorer.task_panels[tr_viz.lab_task(name)]
        assert all(line.axes in (panels["loss"], panels["match"]) for run in explorer.lines[name] for line in run)
    explorer.update(names=names)                                  # "select all": no task mixed
    assert_readable(explorer, "overlay of both tasks")


def test_experiment_overlay_shows_a_run_lying_under_another():
    """The old fault: in the overlay every run was drawn as wide as the next, so "sum" lay
    hidden under "sum, no positions" at an exact match of 0 once both were chosen. A run
    under later ones is widened for each of them, and set back when they are not shown."""
    names = ["baseline", "sum", "sum, no positions"]
    explorer = tr_viz.ExperimentOverlay(_lab_records(names, zero=names[1:]), names, selected=("sum",))
    under = explorer.lines["sum"][0][2]                            # seed 0's exact match
    alone = (under.get_linewidth(), under.get_markersize())
    explorer.update(names=names)
    assert not any("hidden" in p for p in lint_figure(explorer.fig))
    over = explorer.lines["sum, no positions"][1][2]               # the last run drawn at 0
    assert under.get_linewidth() > over.get_linewidth() and under.get_markersize() > over.get_markersize()
    assert_readable(explorer, "overlay of two runs at 0")
    explorer.update(names=["sum"])
    assert (under.get_linewidth(), under.get_markersize()) == alone


def test_experiment_overlay_shows_only_the_chosen_runs(lab_results):
    names = ["baseline", "no positions", "1 head"]
    explorer = tr_viz.ExperimentOverlay(lab_results, names, selected=("baseline",))
    limits = explorer.loss_ax.get_ylim()
    picture = explorer.png()
    explorer.update(names=("1 head", "baseline"))
    for name in names:
        for run in explorer.lines[name]:
            assert [line.get_visible() for line in run] == [name != "no positions"] * 3
    for name in names:                                           # one colour per experiment, always
        assert {line.get_color() for run in explorer.lines[name] for line in run} == {
            style.experiment_colour(name)}
    assert [t.get_text() for t in explorer.legend.get_texts()] == ["1 head", "baseline", "seed 0", "seed 1"]
    assert explorer.loss_ax.get_ylim() == limits                 # fixed axes: a fast redraw
    assert explorer.png() != picture and explorer.png()[:4] == b"\x89PNG"
    explorer.choice.value = ("no positions",)                    # a learner's click redraws too
    assert explorer.lines["no positions"][0][0].get_visible()
    assert not explorer.lines["baseline"][0][0].get_visible()
    for chosen in (names, ("no positions",)):
        explorer.update(names=chosen)
        assert_readable(explorer, f"experiment overlay {chosen}")


def test_b1_still_outlines_the_row_and_column_its_text_names():
    from matplotlib.patches import Rectangle

    from tfmlib import LMConfig, init_lm_params
    from tfmlib.viz import language_model as lm_viz

    text = "two small foxes like the boys."
    vocab = {c: i for i, c in enumerate(sorted(set(text)))}
    config = LMConfig(vocab_size=len(vocab), d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=32)
    params = init_lm_params(config, torch.Generator().manual_seed(0))
    fig = lm_viz.plot_attention(params, config, vocab, text, head="0", row=(19, "the row that chooses"),
                                column=(15, "the space after the subject"))
    boxes = [p for p in fig.axes[0].patches if isinstance(p, Rectangle) and not p.get_fill()]
    assert [(b.get_y(), b.get_height()) for b in boxes][0] == (18.5, 1)          # row 19, every key
    assert [(b.get_x(), b.get_width()) for b in boxes][1] == (14.5, 1)           # column 15
    assert "the space after the subject" in fig.get_supxlabel()
    assert_readable(fig, "b1's attention still")
    matplotlib.pyplot.close(fig)
