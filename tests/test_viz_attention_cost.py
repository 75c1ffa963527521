"""Notebook 05, section 9: the cost of attention (timings, the fused kernel's memory, the figure)."""
import matplotlib
import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from tfmlib import scaled_dot_product_attention

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from tfmlib.viz.attention import (fused_block_bytes, format_bytes, plot_attention_cost,  # noqa: E402
                                  time_attention)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def _allocations(fn) -> list[int]:
    """Bytes of every allocation the profiler sees during fn()."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return [e.cpu_memory_usage for e in prof.events() if e.cpu_memory_usage > 0]


@pytest.mark.parametrize("length", [100, 300, 1000])
def test_the_fused_kernel_allocates_one_block_per_thread_and_never_l_by_l(length):
    """The claim of section 9, checked on the installed PyTorch: F.sdpa's scratch is the block
    of fused_block_bytes, while tfmlib allocates (B, H, L, L) tensors."""
    batch, heads, d_k = 1, 8, 64
    g = torch.Generator().manual_seed(length)
    q, k, v = (torch.randn(batch, heads, length, d_k, generator=g) for _ in range(3))
    square = batch * heads * length * length * 4
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fused = _allocations(lambda: F.scaled_dot_product_attention(q, k, v))
        ours = _allocations(lambda: scaled_dot_product_attention(q, k, v))
    finally:
        torch.set_num_threads(threads)
    assert fused_block_bytes(length, d_k) in fused
    assert max(fused) < square
    assert square in ours


def test_fused_block_stops_growing_once_the_blocks_are_full():
    assert fused_block_bytes(2048, 64) == fused_block_bytes(16384, 64) == 591_872
    assert fused_block_bytes(64, 64) < fused_block_bytes(256, 64) < fused_block_bytes(1024, 64)


@pytest.mark.parametrize("count, text", [(512, "512 B"), (1024, "1 KiB"), (1536, "1.5 KiB"),
                                         (8 * 2 ** 20, "8 MiB"), (8 * 2 ** 30, "8 GiB")])
def test_format_bytes(count, text):
    assert format_bytes(count) == text


def test_time_attention_measures_both_and_restores_the_threads():
    threads = torch.get_num_threads()
    timings = time_attention(lengths=(16, 32), batch=2, heads=3, d_k=8, repeats=2)
    assert torch.get_num_threads() == threads
    assert timings["length"] == [16, 32]
    assert all(t > 0 for t in timings["tfmlib"] + timings["torch"])
    assert timings["weights_bytes"] == [2 * 3 * 16 * 16 * 4, 2 * 3 * 32 * 32 * 4]


def test_cost_figure_is_readable_and_nothing_is_clipped():
    timings = {"length": [64, 128, 256], "tfmlib": [1e-4, 4e-4, 2e-3], "torch": [5e-5, 2e-4, 8e-4],
               "weights_bytes": [8 * n * n * 4 for n in (64, 128, 256)], "batch": 1, "heads": 8,
               "d_k": 64}
    fig = plot_attention_cost(timings)
    width, _ = fig.get_size_inches()
    assert width <= 9
    time_axes, memory_axes = fig.axes
    assert time_axes.get_xscale() == time_axes.get_yscale() == "log"
    assert memory_axes.get_yscale() == "log"
    renderer = fig.canvas.get_renderer()
    fig.canvas.draw()
    drawn = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            drawn += [tick.label1 for tick in axis._update_ticks() if tick.label1.get_visible()]
        drawn += [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        drawn += ax.get_legend().get_texts()
    drawn = [t for t in drawn if t.get_text()]
    assert any(t.get_text() == "8 GiB" for t in drawn)
    for text in drawn:
        assert text.get_fontsize() >= 9, text.get_text()
        box = text.get_window_extent(renderer)
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1, text.get_text()
        assert fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1, text.get_text()
