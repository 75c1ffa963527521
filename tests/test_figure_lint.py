"""The figure lint (tfmlib/viz/lint.py): it flags each kind of defect on a small figure made
to have it, passes the course style's own figures, and passes every figure the notebooks
show and every widget frame they draw.

The notebooks' figures and widget frames are linted while nbval runs them, by the plugin
tests/nbval_figure_lint.py (the last test here shows that a broken one fails its cell).
Widget tests lint the frames of each control change with `assert_readable`.
"""
from __future__ import annotations

import re
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from tfmlib.viz.lint import assert_readable, lint_figure  # noqa: E402
from tfmlib.viz.style import (COLUMN_IN, DIVERGING_CMAP, MASK_CMAP, attention_heatmap,  # noqa: E402
                              distinct_colours, line_style, new_figure, signed_limits)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _one_problem(fig, words: str) -> str:
    problems = lint_figure(fig)
    assert any(words in p for p in problems), f"expected a problem with {words!r}, got {problems}"
    return next(p for p in problems if words in p)


# ---- each defect is caught ----------------------------------------------------------------------

def test_a_clean_figure_passes():
    fig, ax = new_figure(3)
    for i in range(3):
        ax.plot(np.arange(10), np.arange(10) * (i + 1), label=f"line {i}")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title("three lines")
    ax.legend()
    assert lint_figure(fig) == []


def test_text_outside_the_canvas_is_caught():
    fig, ax = new_figure(3)
    fig.text(0.8, 0.5, "a note that runs off the right edge of the figure")  # not laid out
    assert "outside the canvas" in _one_problem(fig, "runs off")


def test_a_label_cut_by_a_fixed_layout_is_caught():
    fig = plt.figure(figsize=(4, 3))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))          # no room left for the labels
    ax.set_ylabel("value")
    _one_problem(fig, "outside the canvas")


def test_overlapping_tick_labels_are_caught():
    fig, ax = new_figure(3, width=3)
    ax.set_xticks(range(8), labels=[f"token_{i}" for i in range(8)])   # too long for the width
    assert "tick labels overlap" in _one_problem(fig, "tick labels overlap")


def test_upright_tick_labels_turned_by_90_degrees_fit_where_flat_ones_overlap():
    fig, ax = new_figure(3, width=3)
    ax.set_xticks(range(8), labels=[f"token_{i}" for i in range(8)], rotation=90)
    assert lint_figure(fig) == []


def test_slanted_labels_are_not_counted_as_overlapping():
    fig, ax = new_figure(3, width=3)
    ax.set_xticks(range(8), labels=[f"token_{i}" for i in range(8)], rotation=45, ha="right")
    assert not [p for p in lint_figure(fig) if "overlap" in p]   # boxes overlap, glyphs do not


def test_titles_that_run_into_each_other_are_caught():
    fig, axes = new_figure(3, ncols=3)
    for ax in axes:
        ax.set_title("a title far too long for its narrow panel")
    assert "texts overlap" in _one_problem(fig, "texts overlap")


def test_an_axis_label_over_the_tick_labels_is_caught():
    fig, ax = new_figure(3)
    ax.set_ylim(0, 1000)
    ax.set_ylabel("position")
    ax.yaxis.set_label_coords(-0.02, 0.5)          # a fixed place that ignores wide tick labels
    assert "overlaps the tick label" in _one_problem(fig, "'position' overlaps")


def test_tick_labels_outside_the_view_are_not_counted():
    fig, ax = new_figure(3)
    ax.set_xticks(range(100), labels=[str(i) for i in range(100)])   # 100 labels made ...
    ax.set_xlim(-0.5, 4.5)                                          # ... 5 of them drawn
    assert lint_figure(fig) == []


def test_a_legend_over_a_data_point_or_a_note_is_caught():
    fig, ax = new_figure(3)
    ax.plot([0, 1, 2], [2, 1, 0], "o-", label="falling")
    ax.text(1.9, 1.8, "a note")
    ax.legend(loc="upper left")
    assert "'falling'" in _one_problem(fig, "legend covers a point")
    ax.get_legend().set_loc("upper right")
    assert "'a note'" in _one_problem(fig, "legend covers the text")
    ax.get_legend().set_loc("lower left")
    assert lint_figure(fig) == []


def test_a_legend_over_a_stretch_of_line_without_markers_is_caught():
    """Issue 23: 09's legend sat on the optimizer paths, between their markers."""
    fig, ax = new_figure(3)
    x = np.array([0.0, 10.0])                      # two points only: no marker under the legend
    ax.plot(x, x, label="rising")
    ax.plot(x, 10 - x, label="falling")
    ax.legend(loc="center")
    assert "'rising'" in _one_problem(fig, "legend covers the line")
    ax.get_legend().set_loc("upper center")        # between the two lines' ends: no line there
    assert lint_figure(fig) == []
    ax.lines[0].set_alpha(0)                       # a line drawn invisible hides nothing
    ax.lines[1].set_visible(False)
    ax.get_legend().set_loc("center")
    assert lint_figure(fig) == []


def test_a_line_beyond_the_view_under_the_legend_is_not_counted():
    fig, ax = new_figure(3)
    ax.plot([0, 10], [0, 10], label="rising")
    ax.plot([0, 10], [20, 30], label="above the view")   # outside the limits: not drawn
    ax.set_ylim(0, 10)
    ax.legend(loc="upper left")
    assert lint_figure(fig) == []


def test_a_rainbow_map_is_caught():
    fig, ax = new_figure(3)
    ax.imshow(np.random.default_rng(0).random((4, 4)), cmap="turbo")
    assert "'turbo'" in _one_problem(fig, "colour map")


def test_the_style_maps_pass():
    fig, axes = new_figure(3, ncols=3)
    values = np.random.default_rng(0).normal(size=(4, 4))
    axes[0].imshow(values, cmap=DIVERGING_CMAP, vmin=signed_limits(values)[0], vmax=signed_limits(values)[1])
    axes[1].imshow(values > 0, cmap=MASK_CMAP)
    attention_heatmap(axes[2], torch.softmax(torch.tensor(values), -1), list("abcd"), list("abcd"),
                      masked=np.triu(np.ones((4, 4), bool), 1))
    assert lint_figure(fig) == []


def test_a_tiny_font_is_caught():
    fig, ax = new_figure(3)
    ax.text(0.5, 0.5, "7 pt", fontsize=7, transform=ax.transAxes)
    assert "'7 pt' at 7.0 pt" in _one_problem(fig, "font too small")


def test_a_figure_wider_than_the_column_is_caught_and_its_text_shrinks_with_it():
    fig = plt.figure(figsize=(2 * COLUMN_IN, 3), layout="constrained")
    ax = fig.add_subplot()
    ax.set_title("12 pt, shown at half size", fontsize=12)
    assert "too wide" in _one_problem(fig, "too wide")
    assert "at 5.0 pt" in _one_problem(fig, "font too small")   # 10 pt tick labels at 50 %


def test_new_figure_refuses_a_width_beyond_the_column():
    with pytest.raises(ValueError, match="width"):
        new_figure(3, width=COLUMN_IN + 1)


def test_a_hidden_legend_is_not_linted():
    fig, ax = new_figure(3)
    ax.plot([0, 1], label="a")
    legend = ax.legend(fontsize=5)
    legend.set_visible(False)
    assert lint_figure(fig) == []


def test_assert_readable_lists_the_problems():
    fig, ax = new_figure(3)
    ax.imshow(np.zeros((2, 2)), cmap="jet")
    with pytest.raises(AssertionError, match="jet"):
        assert_readable(fig, "a jet map")


def test_attention_heatmap_draws_masked_cells_as_bad_not_as_zero():
    fig, ax = new_figure(3)
    weights = torch.tensor([[1.0, 0.0], [float("nan"), float("nan")]])
    image = attention_heatmap(ax, weights, ["a", "b"], ["a", "b"], masked=[[False, True], [True, True]])
    data = image.get_array()
    assert data.mask.tolist() == [[False, True], [True, True]]
    rgba = image.cmap(image.norm(data))
    assert np.allclose(rgba[0, 1], matplotlib.colors.to_rgba(image.cmap.get_bad()))
    assert not np.allclose(rgba[0, 1], image.cmap(0.0))           # not the colour of a 0 weight


def test_stretched_tiles_are_caught_where_both_axes_count_tokens():
    """Issue 23: 08's and 10's attention maps had cells twice as wide as tall."""
    fig, ax = new_figure(3)
    tokens = list("abcd")
    weights = torch.softmax(torch.randn(4, 4, generator=torch.Generator().manual_seed(0)), -1)
    image = attention_heatmap(ax, weights, tokens, tokens, aspect="auto")   # stretched
    assert "tiles not square" in _one_problem(fig, "tiles not square")
    image.axes.set_aspect("equal")
    assert lint_figure(fig) == []


def test_a_stretched_map_of_two_different_units_is_not_counted():
    fig, ax = new_figure(3)
    ax.imshow(np.random.default_rng(0).random((4, 16)), aspect="auto")   # positions x dimensions
    ax.set_xlabel("dimension")
    ax.set_ylabel("position")
    assert lint_figure(fig) == []
    ax.set_xlabel("position")                                            # the same unit on both
    _one_problem(fig, "tiles not square")


def test_two_series_in_one_colour_are_caught():
    """Issue 23: 01's explorer drew a and b in the same colour."""
    fig, ax = new_figure(3)
    ax.plot([0, 1], [0, 1], color="C0", label="train")
    ax.plot([0, 1], [1, 0], color="C0", linestyle="--", label="held-out")
    assert "'train' and 'held-out'" in _one_problem(fig, "two series in the same colour")
    ax.lines[1].set_color("C1")
    ax.plot([0], [0], "k*", label="minimum")                            # landmarks, one point each,
    ax.plot([1], [1], "ko", label="start")                              # told apart by their markers
    assert lint_figure(fig) == []


def test_bars_and_scatters_of_one_colour_are_caught_and_a_faint_unlabelled_line_is_not():
    fig, ax = new_figure(3)
    ax.bar([0, 1], [1, 2], color="#0072B2", label="kept")
    ax.scatter([0.5, 1.5], [1.5, 0.5], color="#0072B2", label="drawn")
    ax.plot([0, 1], [0, 2], color="#0072B2", alpha=0.3)                  # raw curve under a smooth one
    problem = _one_problem(fig, "two series in the same colour")
    assert "'kept'" in problem and "'drawn'" in problem


def test_two_legend_entries_that_look_the_same_are_caught_and_dashes_tell_seeds_apart():
    from matplotlib.lines import Line2D

    fig, ax = new_figure(3)
    ax.plot([0, 1], [0, 1])
    seeds = [Line2D([], [], color="grey", linestyle=style, label=f"seed {i}") for i, style in enumerate("-:")]
    ax.legend(handles=seeds, loc="lower right")
    assert lint_figure(fig) == []                                       # same colour, other dashes
    seeds[1].set_linestyle("-")
    ax.legend(handles=seeds, loc="lower right")
    assert "'seed 0' and 'seed 1'" in _one_problem(fig, "two legend entries look the same")


def test_a_count_in_a_title_that_disagrees_with_the_panels_is_caught():
    fig, axes = new_figure(3, ncols=3)
    for ax in axes:
        ax.imshow(np.eye(3))
    fig.suptitle("4 heads, one map each")
    assert "counts 4 heads above 3 panels" in _one_problem(fig, "counts 4 heads")
    fig.suptitle("3 heads, one map each")
    assert lint_figure(fig) == []


def test_a_count_in_an_axes_title_that_disagrees_with_its_map_is_caught():
    fig, ax = new_figure(3)
    ax.imshow(np.eye(3)[:, :2].repeat(3, axis=1))                       # 3 rows x 6 columns
    ax.set_title("5 keys")
    assert "of 6 columns" in _one_problem(fig, "counts 5 keys")
    ax.set_title("3 queries x 6 keys; 2 of 9 tokens kept")               # a part of a whole: not a count
    assert lint_figure(fig) == []


def test_heads_tiled_into_one_map_are_not_counted_as_panels():
    fig, ax = new_figure(3)
    ax.imshow(np.zeros((3, 13)))                                         # 4 heads side by side
    fig.text(0.5, 0.98, "2 layer(s) x 4 head(s)", ha="center", va="top")
    assert lint_figure(fig) == []


# ---- the style's colours -------------------------------------------------------------------------

def _lightness(rgb) -> np.ndarray:
    """CIE L* of sRGB colours (n, 3): what a viewer without colour vision still sees."""
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    y = linear @ np.array([0.2126, 0.7152, 0.0722])
    return np.where(y > 0.008856, 116 * np.cbrt(y) - 16, 903.3 * y)


def test_neighbouring_elements_differ_in_lightness_even_with_many_of_them():
    for n in (9, 12, 24, 64):
        lightness = _lightness(distinct_colours(n))
        assert np.abs(np.diff(lightness)).min() > 15, n          # i and i + 1 never look alike
        assert len(np.unique(np.round(lightness, 3))) == n, n     # and no two are the same


def test_the_first_lines_differ_in_dash_and_marker_not_only_in_colour():
    styles = [line_style(i) for i in range(4)]
    assert len({(s["linestyle"], s["marker"]) for s in styles}) == 4
    assert len({s["color"] for s in styles}) == 4


# ---- the notebooks ------------------------------------------------------------------------------
# Every figure and widget frame of the notebooks is linted while nbval runs them (make test), by the
# plugin tests/nbval_figure_lint.py: a broken one fails its cell. This shows that it does.

BROKEN = "fig.text(0.8, 0.5, 'a note that runs off the right edge of the figure')"
LINT_CELLS = [
    "import matplotlib.pyplot as plt\n%matplotlib inline\nfrom tfmlib.viz.embeddings import PositionalEncodingExplorer",
    "fig, ax = plt.subplots(figsize=(3, 2), layout='constrained')\nax.plot([0, 1], [1, 0])\nax.set_xlabel('x')\nplt.show()",
    f"fig, ax = plt.subplots(figsize=(3, 2))\n{BROKEN}\nplt.show()",
    "explorer = PositionalEncodingExplorer()\nexplorer.widget",
    f"fig = explorer.fig\n{BROKEN}\nexplorer.update(pos_i=3)",
]


def test_the_nbval_plugin_fails_each_cell_that_shows_a_broken_figure_or_widget_frame(tmp_path):
    import subprocess
    import sys

    import nbformat

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in LINT_CELLS])
    nbformat.write(notebook, tmp_path / "lint.ipynb")
    run = subprocess.run([sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env", "-p",
                          "tests.nbval_figure_lint", "-p", "no:cacheprovider", "-rA", str(tmp_path / "lint.ipynb")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    report = run.stdout + run.stderr
    outcomes = {int(cell): outcome for outcome, cell in
                re.findall(r"^(PASSED|FAILED) \S*lint.ipynb::Cell (\d)", report, re.MULTILINE)}
    assert outcomes == {0: "PASSED", 1: "PASSED", 2: "FAILED", 3: "PASSED", 4: "FAILED"}, report[-3000:]
    assert "problem(s) in this figure:" in report and "text outside the canvas" in report, report[-3000:]
    assert "problem(s) in this frame of PositionalEncodingExplorer:" in report, report[-3000:]


# ---- one colour per idea (style.IDEA_COLOURS) ----------------------------------------------------

def test_every_query_by_key_map_names_its_axes_in_the_query_and_key_colours():
    from tfmlib.viz.embeddings import plot_score_matrix
    from tfmlib.viz.masks import plot_masks
    from tfmlib.viz.multihead import plot_heads
    from tfmlib.viz.style import IDEA_COLOURS

    tokens = list("abcd")
    weights = torch.softmax(torch.randn(1, 2, 4, 4, generator=torch.Generator().manual_seed(0)), -1)
    causal = torch.tril(torch.ones(4, 4, dtype=torch.bool))[None, None]
    fig, ax = new_figure(3)
    attention_heatmap(ax, weights[0, 0], tokens, tokens)
    axes = {"attention_heatmap": ax, "plot_masks": plot_masks(causal, [tokens]).axes[0],
            "plot_heads": plot_heads(weights[0], tokens).axes[0],
            "plot_score_matrix": plot_score_matrix(weights[0, 0]).axes}
    for name, ax in axes.items():
        assert matplotlib.colors.same_color(ax.xaxis.label.get_color(), IDEA_COLOURS["key"]), name
        assert matplotlib.colors.same_color(ax.yaxis.label.get_color(), IDEA_COLOURS["query"]), name


def test_training_and_held_out_curves_keep_their_colours_in_10_and_b1():
    from tfmlib.viz.language_model import plot_training
    from tfmlib.viz.style import IDEA_COLOURS
    from tfmlib.viz.training import plot_training_curves

    history = {"step": [1, 2, 3], "loss": [3.0, 2.0, 1.0], "eval_step": [1, 3], "exact_match": [0.1, 0.5],
               "val_loss": [3.1, 1.5]}
    loss, match = plot_training_curves(history).axes[:2]
    lm = plot_training(history, {"unigram": 2.5}).axes[0]
    for line in (loss.lines[0], lm.lines[0]):
        assert matplotlib.colors.same_color(line.get_color(), IDEA_COLOURS["train"])
    for line in (match.lines[0], lm.lines[1]):
        assert matplotlib.colors.same_color(line.get_color(), IDEA_COLOURS["held-out"])
    assert len({matplotlib.colors.to_hex(c) for c in (IDEA_COLOURS["train"], IDEA_COLOURS["held-out"],
                                                       IDEA_COLOURS["query"], IDEA_COLOURS["key"])}) == 4


def test_an_idea_colour_that_names_another_thing_in_a_later_figure_of_the_notebook_is_caught():
    from tfmlib.viz.lint import NotebookColours
    from tfmlib.viz.style import IDEA_COLOURS, name_query_key_axes

    notebook = NotebookColours()
    fig, ax = new_figure(3)
    ax.imshow(np.eye(4), cmap="viridis", aspect="equal")
    name_query_key_axes(ax)                                   # queries in blue, keys in vermillion
    assert notebook.check(fig) == []
    fig, ax = new_figure(3)                                   # a later cell: "scaled" in the query's blue
    ax.plot([0, 1], [0, 1], color=IDEA_COLOURS["query"], label="scaled")
    ax.plot([0, 1], [1, 0], color="#E69F00", label="unscaled")
    problems = notebook.check(fig)
    assert len(problems) == 1 and "'scaled'" in problems[0] and "query" in problems[0]
    other = NotebookColours()                                 # another notebook, without queries: fine
    assert other.check(fig) == []


def test_a_series_hidden_under_a_later_one_is_caught_and_a_thinner_one_on_top_is_not():
    fig, ax = new_figure(3)
    x = np.arange(10.0)
    ax.plot(x, 0 * x, color="#999933", linewidth=1.5, label="sum")
    ax.plot(x, 0 * x, color="#661100", linewidth=1.5, label="sum, no positions")
    _one_problem(fig, "'sum' lies hidden under 'sum, no positions'")
    fig, ax = new_figure(3)
    ax.plot(x, 0 * x, color="#999933", linewidth=6, alpha=0.6, label="sum")
    ax.plot(x, 0 * x, color="#661100", linewidth=1.5, linestyle="--", label="sum, no positions")
    assert not any("hidden" in p for p in lint_figure(fig))


def test_unlabelled_runs_with_markers_hidden_under_a_later_run_are_caught():
    """10's lab draws its runs unlabelled (one legend names them for the whole figure): "sum"
    lay under "sum, no positions" at an exact match of 0, its markers under theirs."""
    fig, ax = new_figure(3)
    x = np.arange(4.0)
    ax.plot(x, 0 * x, "-", marker="<", markersize=4, color="#DDCC77", linewidth=1.5)
    ax.plot(x, 0 * x, "-", marker=">", markersize=4, color="#661100", linewidth=1.5)
    _one_problem(fig, "the unlabelled line in #ddcc77, marker '<' lies hidden under the unlabelled line in #661100")
    ax.lines[0].set(linewidth=2.7, markersize=6.5)   # the lab's fix: the one drawn first is wider
    assert not any("hidden" in p for p in lint_figure(fig))
    fig, ax = new_figure(3)
    ax.plot(x, 0 * x, "--", marker="o", markersize=4, color="#000000", linewidth=1.5)
    ax.plot(x, 0 * x, "--", marker="s", markersize=4, color="#E69F00", linewidth=1.5)   # same dashes
    _one_problem(fig, "lies hidden under")


def test_classroom_minimum_is_checked_on_figures_meant_for_projection():
    from tfmlib.viz.lint import classroom_problems
    from tfmlib.viz.style import CLASSROOM_CELL_PX, for_projection

    tokens = [f"t{i}" for i in range(30)]
    fig, ax = new_figure(3.0, 4.0)
    attention_heatmap(ax, torch.full((30, 30), 1 / 30), tokens, tokens)       # ~7 px tiles
    assert not any("too small to project" in p for p in lint_figure(fig))    # not marked: fine
    assert "below the classroom's" in " ".join(classroom_problems(fig))
    for_projection(fig)
    _one_problem(fig, "tiles too small to project")
    fig, ax = new_figure(5.0, COLUMN_IN)
    attention_heatmap(ax, torch.full((6, 6), 1 / 6), tokens[:6], tokens[:6])
    assert classroom_problems(for_projection(fig)) == [] and CLASSROOM_CELL_PX > 16


def test_a_level_named_in_a_title_but_not_drawn_is_caught():
    fig, ax = new_figure(3)
    ax.plot(np.arange(10), np.linspace(3, 0.6, 10), color="black", label="loss")
    style_title = "held-out loss; the floor 0.55 of a perfect model"
    ax.set_title(style_title)
    _one_problem(fig, "names the level 0.55")
    ax.axhline(0.55, color="#666666", linestyle=":")
    assert not any("names the level" in p for p in lint_figure(fig))
    fig, ax = new_figure(3)
    ax.plot(np.arange(10), np.linspace(3, 0.6, 10), color="black")
    ax.text(5, 2.7, "chance: ln 14")
    _one_problem(fig, f"names the level {np.log(14):.3g}")


def test_a_text_wider_than_its_box_is_caught():
    from matplotlib.patches import Rectangle

    fig, ax = new_figure(2)
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 2)
    ax.add_patch(Rectangle((1, 0.5), 1, 1, facecolor="white", edgecolor="black"))
    ax.text(1.5, 1.0, "attention is all you need", ha="center", va="center", fontsize=9)
    _one_problem(fig, "text outside its box")
