"""The benchmark code paths at tiny sizes: every benchmark returns positive times, and the
report renders. Nothing here asserts how fast anything is (the shared test machine is noisy).
"""
import math
import struct
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import nbformat  # noqa: E402

# benchmarks/ is not an installed package: import it from the repository root (which
# `python -m pytest` puts on sys.path anyway, but a bare `pytest` does not).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import pytest  # noqa: E402

from benchmarks import course, kernels, report  # noqa: E402
from benchmarks.__main__ import main  # noqa: E402
from benchmarks.timing import Comparison, Measured, Settings, Timing, compare, machine  # noqa: E402
from tfmlib import training as tr  # noqa: E402

TINY = Settings(rounds=2, block_s=0.001, warmup=1, quick=True)
TINY_MODEL = tr.ModelConfig(d_model=8, num_heads=2, d_ff=16, num_layers=1)


def _positive(seconds) -> bool:
    return math.isfinite(seconds) and seconds > 0


def _check_comparisons(rows, count):
    assert len(rows) == count
    for row in rows:
        assert _positive(row.tfmlib.median) and _positive(row.torch.median)
        assert row.tfmlib.low <= row.tfmlib.median <= row.tfmlib.high
        assert math.isfinite(row.ratio) and row.ratio > 0


def test_compare_interleaves_and_returns_a_median_per_function():
    calls = []
    timings = compare({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, TINY)
    assert set(timings) == {"a", "b"}
    assert all(_positive(t.median) and t.rounds == 2 for t in timings.values())
    assert calls.count("a") == calls.count("b")          # the same work on both sides


def test_attention_benchmark_at_tiny_sizes():
    rows = kernels.sdpa(lengths=(8, 16), batch=1, heads=2, d_k=4, settings=TINY)
    _check_comparisons(rows, 4)
    assert [r.what for r in rows] == ["forward", "forward+backward"] * 2
    assert set(kernels.scale_check(rows)) == {(w, s) for w in ("forward", "forward+backward")
                                              for s in ("tfmlib", "torch")}


def test_causal_attention_benchmark_at_a_tiny_size():
    rows = kernels.sdpa_causal(batch=1, heads=2, length=8, d_k=4, settings=TINY)
    _check_comparisons(rows, 1)
    assert rows[0].group == "attention, causal mask" and rows[0].what == "forward+backward"


def test_layer_benchmarks_at_tiny_sizes():
    _check_comparisons(kernels.mha(batch=2, length=8, d_model=16, heads=2, settings=TINY), 4)
    _check_comparisons(kernels.encoder_layer(batch=2, length=8, d_model=16, heads=2, d_ff=32,
                                             settings=TINY), 3)


def test_adam_benchmark_on_a_tiny_model():
    _check_comparisons(kernels.adam(TINY_MODEL, settings=TINY), 2)


def test_training_benchmark_times_steps_and_restores_exact_match():
    original = tr.exact_match
    rows, trained = course.training(config=TINY_MODEL, steps=3, eval_every=1, eval_size=4,
                                    batch_size=4)
    assert tr.exact_match is original
    assert len(rows) == 2 and _positive(rows[1].seconds)
    assert "all 3 steps" in rows[1].what
    assert trained["config"] is TINY_MODEL and len(trained["history"]["eval_step"]) == 3


def test_widget_redraw_benchmark_calls_the_update_callbacks():
    rows = course.widgets(repeats=2, names=["04_masks", "07_sublayers", "10_training: lab"])
    assert [r.what.split(":")[0] for r in rows] == ["04_masks", "07_sublayers", "10_training"]
    assert all(_positive(r.seconds) and r.target_s == course.REDRAW_TARGET_S for r in rows)


def test_notebook_benchmark_runs_a_copy_and_leaves_the_original(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 6 * 7"), nbformat.v4.new_code_cell("print(x)")]
    path = tmp_path / "01_tiny.ipynb"
    nbformat.write(nb, path)
    before = path.read_bytes()
    rows = course.notebooks([path])
    assert path.read_bytes() == before                   # executed on a copy
    assert [r.what for r in rows] == ["01_tiny", "whole course (1 notebooks), one after the other"]
    assert all(_positive(r.seconds) for r in rows) and "FAILED" not in rows[0].note


def test_notebook_benchmark_runs_notebooks_two_at_a_time_and_reports_a_failure(tmp_path):
    paths = []
    for name, source in [("01_sleep", "import time; time.sleep(1.0)"), ("02_sleep", "import time; time.sleep(1.0)"),
                         ("03_broken", "1 / 0")]:
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(source)]
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
        paths.append(tmp_path / f"{name}.ipynb")
    rows = course.notebooks(paths)
    one_after_the_other, side_by_side = rows[-2], rows[-1]
    assert side_by_side.what == "whole course (3 notebooks), 2 at a time"
    # the two sleeps overlap: less than the sequential total by at least most of one sleep
    assert side_by_side.seconds < one_after_the_other.seconds - 0.5
    assert "FAILED: 03_broken" in side_by_side.note


def test_notebook_benchmark_times_the_experiments_lab_section_apart(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import time"),
                nbformat.v4.new_markdown_cell("## 9. Experiments lab\n\nText."),
                nbformat.v4.new_code_cell("time.sleep(0.3)"),
                nbformat.v4.new_markdown_cell("### One experiment"),
                nbformat.v4.new_code_cell("time.sleep(0.2)"),
                nbformat.v4.new_markdown_cell("## 10. Checklist"),
                nbformat.v4.new_code_cell("time.sleep(0.4)")]
    path = tmp_path / "10_tiny.ipynb"
    nbformat.write(nb, path)
    rows = course.notebooks([path])
    assert [r.what for r in rows] == ["10_tiny", "10_tiny: experiments lab cells",
                                      "whole course (1 notebooks), one after the other"]
    lab = rows[1]
    assert 0.5 <= lab.seconds < 0.9 and lab.target_s == course.LAB_TARGET_S   # not the 0.4 s after
    assert rows[2].seconds == rows[0].seconds                                 # counted once


def _timing(ms):
    return Timing(ms / 1000, ms / 1000, ms / 1000, 3, 1)


def test_report_renders_the_table_and_the_plot(tmp_path):
    attention = [Comparison("attention", what, f"L={n}", "F.scaled_dot_product_attention",
                            _timing(n * n / 1000 * k), _timing(n * n / 1200 * k))
                 for n in (64, 128) for what, k in (("forward", 1), ("forward+backward", 3))]
    adam = [Comparison("Adam step", "one step", "3 tensors", "torch.optim.Adam(foreach=True)",
                       _timing(2.0), _timing(1.0))]
    widgets = [Measured("widget redraw", "04_masks: MaskExplorer.update", 0.03, 0.1, "")]
    m = machine()
    m.load_end = m.load_start
    report.plot_attention(attention, m, tmp_path / "plot.png", "B=1 H=2 d_k=4")
    png = (tmp_path / "plot.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24])[0] > 100
    text = report.render(m, 12.0, True, {"attention": attention, "adam": adam, "widgets": widgets},
                         kernels.scale_check(attention), [], True, "B=1 H=2 d_k=4")
    assert "| tfmlib / PyTorch |" in text and "**2.00** | **no**" in text
    assert "Quick run" in text and "attention_vs_length.png" in text
    assert "3 of 5 comparisons meet it" not in text and "4 of 5 comparisons meet it" in text
    assert "1 of 1 meet it" in text


def test_command_line_quick_run_writes_results(tmp_path):
    assert main(["--quick", "--only", "adam", "--malloc", "default", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "RESULTS.md").read_text()
    assert "Adam step" in text and "torch.optim.Adam(foreach=True)" in text
    assert not (tmp_path / report.PLOT_NAME).exists()    # no attention run, no plot


def test_generation_benchmark_times_both_ways_and_draws_both_curves(tmp_path):
    from benchmarks import generation
    rows = generation.rows(quick=True, out=tmp_path)
    lengths = generation.QUICK["lengths"]
    assert [r.what for r in rows] == [f"L = {n}: {name}" for n in lengths
                                      for name in ("with the cache", "without the cache")]
    assert all(_positive(r.seconds) for r in rows)
    assert (tmp_path / generation.PLOT_NAME).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(generation.slopes(rows)) == {"with the cache", "without the cache"}
    m = machine()
    m.load_end = m.load_start
    text = report.render(m, 1.0, True, {"generation": rows}, {}, [], False, "")
    assert "with and without the KV cache" in text and generation.PLOT_NAME in text


@pytest.fixture(autouse=True)
def _restore_threads():
    import torch
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_notebooks_are_named_by_number_name_or_path(tmp_path):
    every = course.course_notebooks()
    assert course.find_notebooks([]) == every
    assert [p.stem for p in course.find_notebooks(["5", "09_adam"])] == ["05_attention", "09_adam"]
    with pytest.raises(SystemExit, match="no notebook '99'"):
        course.find_notebooks(["99"])
    assert course.find_notebooks([str(tmp_path / "x.ipynb")]) == [tmp_path / "x.ipynb"]


def test_notebook_times_command_prints_each_notebook_its_slowest_cells_and_the_total(tmp_path, capsys):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import time"), nbformat.v4.new_code_cell("time.sleep(0.5)")]
    path = tmp_path / "01_tiny.ipynb"
    nbformat.write(nb, path)
    assert course.main([str(path), "--cells", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("01_tiny") and "kernel CPU" in lines[0]
    assert "cell   1  time.sleep(0.5)" in lines[1] and "CPU" in lines[1]    # the slower cell
    assert lines[2].startswith("whole course (1 notebooks)")
