"""Plots and the saturation explorer of notebook 05 (scaled dot-product attention).

The explorer answers "why divide by sqrt(d_k)?" by experiment: project the
running example to d_k dimensions with random (D, d_k) matrices, attend with and
without the scaling, and watch the softmax saturate (max weight -> 1, entropy
-> 0) as d_k grows when the scores are not scaled.
"""
from __future__ import annotations

import html
import math
import time

import numpy as np
import torch

from .. import scaled_dot_product_attention
from . import style
from .common import Explorer, panel_row
from .style import (ATTENTION_CBAR_LABEL, GUIDE_COLOUR, PAIR_COLOURS, TICK_PT, TITLE_PT, attention_heatmap,
                    figure, freeze_layout, masked_weights, new_figure)

#: The d_k values offered by the explorer: powers of 2 from 2 to 512.
D_K_CHOICES = tuple(2 ** i for i in range(1, 10))
SCALED_COLOR, UNSCALED_COLOR = PAIR_COLOURS["scaling"]   # and solid vs dashed, circle vs square


def masked_keys(mask, shape) -> torch.Tensor | None:
    """A may-attend mask (True = may attend) that broadcasts to `shape` -> True where masked."""
    return None if mask is None else ~torch.broadcast_to(mask.bool(), shape)


def attention_heatmaps(weights: torch.Tensor, tokens, mask=None, titles=None, suptitle: str = "",
                       height: float = 3.3):
    """One labelled heatmap per sample: weights (B, Lq, Lk), rows = queries, columns = keys.

    mask: None, or the may-attend mask that made the weights (e.g. (B, 1, Lk)): its masked
    keys are drawn grey, not as a weight of 0.
    """
    if weights.dim() != 3:
        raise ValueError(f"weights: expected (B, Lq, Lk), got shape {tuple(weights.shape)}")
    batch = weights.size(0)
    masked = masked_keys(mask, weights.shape)                     # (B, Lq, Lk) or None
    fig, axes = panel_row(batch, height)
    titles = titles or [f"sample {b}" for b in range(batch)]
    image = None
    for b, ax in enumerate(axes):
        image = attention_heatmap(ax, weights[b], tokens[b], tokens[b],
                                  None if masked is None else masked[b], title_text=titles[b],
                                  colorbar_=False, ylabel=style.QUERY_LABEL if b == 0 else "")
    style.colorbar(fig, image, axes, ATTENTION_CBAR_LABEL, ticks=[0, 0.5, 1], aspect=20,
                   shrink=0.8)                  # square maps leave height to spare
    if suptitle:
        fig.suptitle(suptitle, fontsize=TITLE_PT)
    return fig


def row_entropy_bits(weights: torch.Tensor) -> torch.Tensor:
    """(..., Lq, Lk) weights -> (..., Lq) entropy of each row in bits (0 log 0 counts as 0).

    0 bits: all weight on one key (one-hot); log2(n) bits: spread evenly over n keys.
    """
    return -torch.special.xlogy(weights, weights).sum(-1) / math.log(2)


def random_projection(d_model: int, d_k: int, generator: torch.Generator) -> torch.Tensor:
    """(d_model, d_k) with N(0, 1/d_model) entries: unit-variance inputs stay unit-variance."""
    return torch.randn(d_model, d_k, generator=generator) / math.sqrt(d_model)


def projections(d_model: int, d_k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """W_q, W_k, both (d_model, d_k): the recipe of notebook 05 (one generator, W_q first)."""
    g = torch.Generator().manual_seed(seed)
    return random_projection(d_model, d_k, g), random_projection(d_model, d_k, g)


def attention_at(x: torch.Tensor, mask: torch.Tensor, d_k: int, scaled: bool,
                 seeds=(1,)) -> torch.Tensor:
    """(B, L, D) inputs -> (S, B, L, L) weights of q = x @ W_q, k = x @ W_k, one per seed.

    `scaled=False` feeds q * sqrt(d_k) to tfmlib's function, which divides by
    sqrt(d_k) again: the softmax then sees the raw q . k.
    """
    pairs = [projections(x.size(-1), d_k, seed) for seed in seeds]
    w_q = torch.stack([p[0] for p in pairs])[:, None]         # (S, 1, D, d_k)
    w_k = torch.stack([p[1] for p in pairs])[:, None]
    q, k = x @ w_q, x @ w_k                                     # (S, B, L, d_k) each
    if not scaled:
        q = q * math.sqrt(d_k)
    _, weights = scaled_dot_product_attention(q, k, k, mask)    # (S, B, L, L)
    return weights


def saturation_sweep(x: torch.Tensor, mask: torch.Tensor, d_ks=D_K_CHOICES, draws: int = 16,
                     seed: int = 1) -> dict:
    """Max weight and entropy per query row, averaged, for every d_k, scaled or not.

    `x` (B, L, D) is the attention input, `mask` its (B, 1, L) padding mask (self-
    attention: a query row counts when its own token is real). Each d_k is
    averaged over `draws` pairs of random projections (seeds seed, seed + 1, ...);
    `weights[(d_k, scaled)]` keeps the (B, L, L) weights of the first draw.
    """
    rows = mask[:, 0, :]                                           # (B, L): real query rows
    visible = mask.expand(-1, x.size(1), -1).sum(-1).float()       # (B, L): keys per row
    sweep = {"d_k": list(d_ks), "weights": {}, "mask": mask,
             "uniform_bits": float(torch.log2(visible[rows]).mean())}
    seeds = range(seed, seed + draws)
    for scaled in (True, False):
        max_weight, entropy = [], []
        for d_k in d_ks:
            weights = attention_at(x, mask, d_k, scaled, seeds)    # (S, B, L, L)
            sweep["weights"][(d_k, scaled)] = weights[0]
            max_weight.append(float(weights.amax(-1)[:, rows].mean()))
            entropy.append(float(row_entropy_bits(weights)[:, rows].mean()))
        sweep["scaled" if scaled else "unscaled"] = {"max_weight": max_weight, "entropy": entropy}
    return sweep


def _curve_axes(ax, sweep: dict, key: str, ylabel: str, title: str) -> None:
    d_ks = sweep["d_k"]
    ax.plot(d_ks, sweep["scaled"][key], "o-", color=SCALED_COLOR, ms=5,
            label="scores / sqrt(d_k)")
    ax.plot(d_ks, sweep["unscaled"][key], "s--", color=UNSCALED_COLOR, ms=5,
            label="no scaling")
    ax.set_xscale("log", base=2)
    ax.set_xticks(d_ks, labels=[str(d) for d in d_ks])
    ax.minorticks_off()
    ax.set_xlabel("d_k (size of each query and key vector)")
    ax.set_ylabel(ylabel)
    style.title(ax, title)
    style.style_axes(ax)
    ax.grid(alpha=0.3)


def _decorate_max_weight(ax) -> None:
    ax.set_ylim(0, 1.05)
    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    ax.text(2, 0.98, " one-hot", va="top", fontsize=TICK_PT, color=GUIDE_COLOUR)


def _decorate_entropy(ax, sweep: dict) -> None:
    top = sweep["uniform_bits"]
    ax.set_ylim(0, top * 1.15)
    ax.axhline(top, color=GUIDE_COLOUR, lw=0.8, ls=":")
    ax.text(2, top, " spread evenly", va="bottom", fontsize=TICK_PT, color=GUIDE_COLOUR)
    ax.axhline(0, color=GUIDE_COLOUR, lw=0.8, ls=":")


def plot_saturation(sweep: dict, height: float = 3.6):
    """Two panels against d_k, with and without scaling: mean max weight, mean entropy."""
    fig, (left, right) = new_figure(height, ncols=2)
    _curve_axes(left, sweep, "max_weight", "mean of each row's largest weight",
                "largest weight in a row")
    _decorate_max_weight(left)
    _curve_axes(right, sweep, "entropy", "mean row entropy (bits)", "entropy of a row")
    _decorate_entropy(right, sweep)
    right.legend(loc="lower left")
    return fig


class _SaturationPanels:
    """Heatmap of one sample beside the two curves; only the image and the markers change."""

    def __init__(self, sweep: dict, tokens, sample: int, pyplot: bool = True):
        self.sweep, self.sample = sweep, sample
        self.fig = figure(5.6, pyplot=pyplot)
        grid = self.fig.add_gridspec(2, 2, width_ratios=(1.15, 1))
        ax_map = self.fig.add_subplot(grid[:, 0])
        ax_max = self.fig.add_subplot(grid[0, 1])
        ax_ent = self.fig.add_subplot(grid[1, 1], sharex=ax_max)
        length = len(tokens)
        masked = masked_keys(sweep.get("mask"), (len(sweep["weights"][(sweep["d_k"][0], True)]),
                                                 length, length))
        self.masked = None if masked is None else masked[sample]          # (L, L)
        self.image = attention_heatmap(ax_map, np.zeros((length, length)), tokens, tokens,
                                       self.masked, title_text=f"attention weights, sample {sample}")
        _curve_axes(ax_max, sweep, "max_weight", "mean largest weight",
                    "largest weight in a row (batch mean)")
        ax_max.set_xlabel("")                                  # the panel below names d_k
        _decorate_max_weight(ax_max)
        _curve_axes(ax_ent, sweep, "entropy", "mean entropy (bits)",
                    "entropy of a row (batch mean)")
        _decorate_entropy(ax_ent, sweep)
        (self.max_marker,) = ax_max.plot([], [], "o", ms=13, mfc="none", mec="black", mew=2,
                                         label="current setting", zorder=5)
        (self.ent_marker,) = ax_ent.plot([], [], "o", ms=13, mfc="none", mec="black", mew=2,
                                         label="current setting", zorder=5)
        ax_ent.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2)  # off the data
        self.axes = (ax_map, ax_max, ax_ent)

    def draw(self, d_k: int, scaled: bool) -> torch.Tensor:
        weights = self.sweep["weights"][(d_k, scaled)]                   # (B, L, L)
        self.image.set_data(masked_weights(weights[self.sample], self.masked))
        curves = self.sweep["scaled" if scaled else "unscaled"]
        i = self.sweep["d_k"].index(d_k)
        self.max_marker.set_data([d_k], [curves["max_weight"][i]])
        self.ent_marker.set_data([d_k], [curves["entropy"][i]])
        return weights

    @property
    def changing_artists(self):
        return [self.image, self.max_marker, self.ent_marker]


def describe_setting(sweep: dict, d_k: int, scaled: bool) -> str:
    i = sweep["d_k"].index(d_k)
    curves = sweep["scaled" if scaled else "unscaled"]
    how = f"scores / sqrt({d_k}) = scores / {math.sqrt(d_k):.3g}" if scaled else "scores not scaled"
    return (f"d_k = {d_k}, {how}:  mean largest weight {curves['max_weight'][i]:.2f},  "
            f"mean entropy {curves['entropy'][i]:.2f} bits "
            f"(spread evenly: {sweep['uniform_bits']:.2f})")


class SaturationExplorer(Explorer):
    """A d_k slider (powers of 2) and a scaling switch -> heatmap and saturation curves.

    Everything is computed once by `saturation_sweep`; a redraw only swaps the
    heatmap's data and moves two markers. `update(d_k=..., scaled=...)` redraws
    (see `Explorer`); `weights` holds the current (B, L, L) weights.
    """

    def __init__(self, sweep: dict, tokens, sample: int = 0, d_k: int = 16, scaled: bool = True):
        import ipywidgets as widgets

        self.sweep = sweep
        self.panels = _SaturationPanels(sweep, tokens, sample, pyplot=False)  # shown as the PNG
        freeze_layout(self.panels.fig)         # the labels never change: lay out once
        self.d_k_slider = widgets.SelectionSlider(options=list(sweep["d_k"]), value=d_k,
                                                  description="d_k",
                                                  layout=widgets.Layout(width="420px"))
        self.scaled_box = widgets.Checkbox(value=scaled, description="divide by sqrt(d_k)")
        self.caption = widgets.HTML()
        self._build(self.panels.fig, self.panels.changing_artists,
                    [self.d_k_slider, self.scaled_box],
                    [widgets.HBox([self.d_k_slider, self.scaled_box]), self.caption])
        self.weights = None
        self.update()

    def update(self, d_k: int | None = None, scaled: bool | None = None) -> None:
        """Redraw for the given values (None keeps the control's value)."""
        start = time.perf_counter()
        if d_k is not None and d_k not in self.sweep["d_k"]:
            raise ValueError(f"d_k: expected one of {self.sweep['d_k']}, got {d_k!r}")
        self._set_controls((self.d_k_slider, d_k), (self.scaled_box, scaled))
        d_k, scaled = self.d_k_slider.value, self.scaled_box.value
        self.weights = self.panels.draw(d_k, scaled)
        self.caption.value = f"<code>{html.escape(describe_setting(self.sweep, d_k, scaled))}</code>"
        self._show(start)


def saturation_explorer(sweep: dict, tokens, sample: int = 0, **kwargs) -> SaturationExplorer:
    """Build the explorer; display `.widget` in the notebook."""
    return SaturationExplorer(sweep, tokens, sample=sample, **kwargs)


# ---- the cost of attention (section 9) --------------------------------------------------------

#: tfmlib and PyTorch's fused kernel: their own pair, apart from the query and key colours of
#: the maps and from the scaled/unscaled pair of section 8 (style.PAIR_COLOURS).
(TFMLIB_COLOR, FUSED_COLOR), GUIDE_COLOR = PAIR_COLOURS["implementations"], GUIDE_COLOUR


def format_bytes(count: int) -> str:
    """4096 -> '4 KiB', 8 * 2**30 -> '8 GiB': binary units, at most one decimal."""
    for unit, size in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if count >= size:
            return f"{count / size:.1f}".removesuffix(".0") + f" {unit}"
    return f"{count} B"


def fused_block_bytes(length: int, d_k: int, bytes_per_number: int = 4) -> int:
    """Scratch memory of one thread of PyTorch's fused CPU attention kernel, in float32.

    `_scaled_dot_product_flash_attention_for_cpu` (aten/src/ATen/native/cpu/
    FlashAttentionKernel.cpp) takes the queries in blocks of 32, 64 or 256 rows (256 from
    L = 768 on) and the keys in blocks of up to 512, and keeps per thread only one block of
    scores, a running max and sum per query row, and the block's partial output. The test
    of this function checks the formula against the allocation the profiler sees.
    """
    q_block = 256 if length >= 768 else 64 if length >= 192 else 32
    q_block, kv_block = min(q_block, length), min(512, length)
    numbers = q_block * kv_block + 2 * q_block + q_block * d_k   # scores, max, sum, output
    return numbers * bytes_per_number


def _best_time(fn, repeats: int) -> float:
    fn()  # the first call pays for allocations and caches: not counted
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)  # the least disturbed run: other programs only ever add time


def time_attention(lengths=(64, 128, 256, 512, 1024), batch: int = 1, heads: int = 8,
                   d_k: int = 64, repeats: int = 3, seed: int = 0) -> dict:
    """Best-of-`repeats` seconds of one forward call of tfmlib's scaled_dot_product_attention
    and of F.scaled_dot_product_attention on random (batch, heads, L, d_k) float32 inputs.

    Runs on one thread (restored afterwards), so the two share the CPU the same way and
    other work on the machine disturbs them less. -> {"length": [...], "tfmlib": [...],
    "torch": [...], "weights_bytes": [...]}, the last from the weights tfmlib returned.
    """
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(seed)
    result = {"length": list(lengths), "tfmlib": [], "torch": [], "weights_bytes": []}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for length in lengths:
            q, k, v = (torch.randn(batch, heads, length, d_k, generator=g) for _ in range(3))
            result["tfmlib"].append(_best_time(lambda: scaled_dot_product_attention(q, k, v), repeats))
            result["torch"].append(_best_time(lambda: F.scaled_dot_product_attention(q, k, v), repeats))
            result["weights_bytes"].append(scaled_dot_product_attention(q, k, v)[1].nbytes)
    finally:
        torch.set_num_threads(threads)
    result.update(batch=batch, heads=heads, d_k=d_k)
    return result


def _length_axis(ax, lengths) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, labels=[f"{n // 1024}k" if n >= 1024 else str(n) for n in lengths])
    ax.minorticks_off()
    ax.set_xlabel("sequence length L")
    ax.grid(alpha=0.3)


def plot_attention_cost(timings: dict, longest: int = 16384, height: float = 4.4):
    """Left: measured time against L, tfmlib and F.sdpa, with an L² guide. Right: the bytes
    that grow with L, tfmlib's (B, H, L, L) weights against the fused kernel's block."""
    batch, heads, d_k = timings["batch"], timings["heads"], timings["d_k"]
    measured = np.array(timings["length"])
    fig, (ax_time, ax_mem) = new_figure(height, ncols=2)

    ours, theirs = 1e3 * np.array(timings["tfmlib"]), 1e3 * np.array(timings["torch"])
    ax_time.plot(measured, ours, "o-", color=TFMLIB_COLOR, label="tfmlib")
    ax_time.plot(measured, theirs, "s-", color=FUSED_COLOR, label="F.scaled_dot_product_attention")
    guide = ours[-1] * (measured / measured[-1]) ** 2
    ax_time.plot(measured, guide, "--", color=GUIDE_COLOR, lw=1, label="grows like L²")
    ax_time.set_yscale("log")
    low, high = ax_time.get_ylim()
    ticks = [t for t in (0.01, 0.1, 1, 10, 100, 1000, 10000) if low <= t <= high]
    ax_time.set_yticks(ticks, labels=[f"{t:g}" for t in ticks])
    ax_time.minorticks_off()
    ax_time.set_ylabel("time of one call (ms, best of a few)")
    style.title(ax_time, f"time, B={batch} H={heads} d_k={d_k}, one thread")
    _length_axis(ax_time, measured)
    ax_time.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2))   # measured: may be anywhere

    lengths = 2 ** np.arange(int(np.log2(measured[0])), int(np.log2(longest)) + 1)
    ax_mem.plot(lengths, batch * heads * lengths ** 2 * 4.0, "-", color=TFMLIB_COLOR,
                label="tfmlib: weights (B, H, L, L)")
    ax_mem.plot(measured, timings["weights_bytes"], "o", color=TFMLIB_COLOR)   # the real tensors
    largest = batch * heads * longest ** 2 * 4
    ax_mem.annotate(format_bytes(largest), (longest, largest), xytext=(-2, 6),
                    textcoords="offset points", ha="right", va="bottom", color=TFMLIB_COLOR)
    ax_mem.plot(lengths, [fused_block_bytes(int(n), d_k) for n in lengths], "s-", ms=4,
                color=FUSED_COLOR, label="fused kernel: one block per thread")
    ax_mem.plot(lengths, batch * heads * lengths * d_k * 4.0, "--", color=GUIDE_COLOR, lw=1,
                label="Q, K, V or context (B, H, L, d_k)")
    ticks = [2 ** (10 + 4 * i) for i in range(6)]                  # 1 KiB, 16 KiB, ..., 1 TiB
    ticks = [t for t in ticks if 2 ** 12 <= t <= 2 ** 36]
    ax_mem.set_yscale("log")
    ax_mem.set_ylim(top=16 * largest)   # room above the last point for its label
    ax_mem.set_yticks(ticks, labels=[format_bytes(t) for t in ticks])
    ax_mem.minorticks_off()
    ax_mem.set_ylabel("bytes (float32)")
    style.title(ax_mem, "memory that grows with L")
    _length_axis(ax_mem, lengths[::2])
    ax_mem.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2))   # the lines fill the axes
    return fig
