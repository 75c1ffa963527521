"""RESULTS.md and the attention-vs-length plot, from the rows the benchmarks return."""
from __future__ import annotations

import math
from pathlib import Path

from .timing import Comparison, Machine, Measured

RATIO_TARGET = 1.3
PLOT_NAME = "attention_vs_length.png"


def _ms(seconds: float) -> str:
    if seconds is None or math.isnan(seconds):
        return "-"
    ms = 1000 * seconds
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def _s(seconds: float) -> str:
    return "-" if seconds is None or math.isnan(seconds) else f"{seconds:.1f}"


def _mark(ok) -> str:
    return "" if ok is None else ("yes" if ok else "**no**")


def comparison_table(rows: list[Comparison]) -> str:
    """Markdown table: one line per (tfmlib, PyTorch reference) pair."""
    lines = ["| benchmark | pass | size | PyTorch reference | tfmlib (ms) | PyTorch (ms) "
             f"| tfmlib / PyTorch | <= {RATIO_TARGET} | spread of rounds |",
             "|---|---|---|---|---:|---:|---:|:---:|---:|"]
    for r in rows:
        spread = max(r.tfmlib.spread, r.torch.spread)
        lines.append(f"| {r.group} | {r.what} | {r.size} | `{r.reference}` | {_ms(r.tfmlib.median)} "
                     f"| {_ms(r.torch.median)} | **{r.ratio:.2f}** | {_mark(r.ratio <= RATIO_TARGET)} "
                     f"| {100 * spread:.0f} % |")
    return "\n".join(lines)


def measured_table(rows: list[Measured], unit: str = "s") -> str:
    head = "time (ms)" if unit == "ms" else "time (s)"
    lines = [f"| what | {head} | target | meets it | notes |", "|---|---:|---:|:---:|---|"]
    for r in rows:
        value = _ms(r.seconds) if unit == "ms" else _s(r.seconds)
        target = "-" if r.target_s is None else (
            f"< {1000 * r.target_s:.0f} ms" if unit == "ms" else f"< {r.target_s:.0f} s")
        lines.append(f"| {r.what} | {value} | {target} | {_mark(r.meets_target)} | {r.note} |")
    return "\n".join(lines)


def machine_lines(m: Machine, run_seconds: float, quick: bool) -> list[str]:
    load = (f"load average (1, 5, 15 min) {', '.join(map(str, m.load_start))} at the start and "
            f"{', '.join(map(str, m.load_end))} at the end")
    lines = [f"- CPU: {m.cpu}, {m.cores} cores (`os.cpu_count()`)",
             f"- torch {m.torch}, {m.threads} intra-op thread(s) in the benchmark process "
             f"(`--threads`); the notebooks run in fresh kernels with torch's default "
             f"({m.extra.get('default_threads', '?')} here)",
             f"- Python {m.python}, {m.platform}",
             f"- memory: {m.extra.get('allocator', '?')}",
             f"- measured {m.date}; the whole benchmark took {run_seconds / 60:.1f} min"
             + (" (`--quick`: small sizes, few repeats, NOT the reference figures)" if quick else ""),
             f"- {load} (this benchmark's own process adds about 1)"]
    if m.shared:
        lines.append(f"- **The machine was shared**: the load average was above "
                     f"{0.75 * m.cores:g} on {m.cores} cores, so other processes were competing "
                     "for the CPU. Ratios hold up better than absolute times (both sides of a "
                     "ratio are measured in alternating rounds), but every figure here is noisier "
                     "and slower than on a quiet machine.")
    return lines


def summary_lines(comparisons, notebooks, widgets, training) -> list[str]:
    lines = []
    if comparisons:
        misses = [r for r in comparisons if r.ratio > RATIO_TARGET]
        lines.append(f"- **tfmlib / PyTorch <= {RATIO_TARGET}**: {len(comparisons) - len(misses)} "
                     f"of {len(comparisons)} comparisons meet it."
                     + (" Missed:" if misses else ""))
        grouped = {}
        for r in misses:
            grouped.setdefault((r.group, r.what, r.reference), []).append(r)
        for (group, what, reference), rs in grouped.items():
            sizes = ", ".join(f"{r.size}: {r.ratio:.2f}" for r in rs)
            lines.append(f"  - {group}, {what}, vs `{reference}` ({sizes})")
    if notebooks:
        total = notebooks[-1]
        lines.append(f"- **Whole course headless < {total.target_s:.0f} s**: {_s(total.seconds)} s "
                     f"for {total.what.split('(')[1].rstrip(')')} -> "
                     f"{'met' if total.meets_target else 'missed'}.")
        for lab in (r for r in notebooks if "experiments lab" in r.what):
            lines.append(f"- **Experiments lab's cells < {lab.target_s:.0f} s**: {_s(lab.seconds)} s "
                         f"-> {'met' if lab.meets_target else 'missed'}.")
        failed = [r.what for r in notebooks if "FAILED" in r.note]
        if failed:
            lines.append(f"- Notebooks that raised an error while executing: {', '.join(failed)}.")
    if widgets:
        measured = [r for r in widgets if not math.isnan(r.seconds)]
        slow = [r for r in measured if not r.meets_target]
        lines.append(f"- **Every widget control redraws in < 100 ms** (95th percentile of the slowest "
                     f"control, first visits included): {len(measured) - len(slow)} of "
                     f"{len(measured)} meet it."
                     + (" Missed: " + "; ".join(f"{r.what.split(':')[0]} ({_ms(r.seconds)} ms)"
                                               for r in slow) + "." if slow else ""))
    if training:
        first = training[0]
        verdict = ("not reached" if math.isnan(first.seconds)
                   else "met" if first.meets_target else "missed")
        lines.append(f"- **Notebook 10's training, {first.what} <= {first.target_s:.0f} s**: "
                     f"{_s(first.seconds)} s -> {verdict} ({first.note}).")
    return lines


def plot_attention(rows: list[Comparison], machine: Machine, path: Path, title_size: str) -> None:
    """Log-log time vs L (both implementations, forward and forward+backward), and the ratio."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4), layout="constrained")
    styles = {("forward", "tfmlib"): ("#1f77b4", "o-"), ("forward", "torch"): ("#1f77b4", "s--"),
              ("forward+backward", "tfmlib"): ("#d62728", "o-"),
              ("forward+backward", "torch"): ("#d62728", "s--")}
    names = {"tfmlib": "tfmlib.scaled_dot_product_attention", "torch": "F.scaled_dot_product_attention"}
    lengths = []
    for what in ("forward", "forward+backward"):
        picked = [r for r in rows if r.what == what and r.group == "attention"]  # against L
        lengths = [int(r.size.split("=")[1]) for r in picked]
        for side in ("tfmlib", "torch"):
            colour, style = styles[(what, side)]
            times = [1000 * getattr(r, side).median for r in picked]
            left.plot(lengths, times, style, color=colour, ms=5, label=f"{names[side]}, {what}")
        right.plot(lengths, [r.ratio for r in picked], "o-", color=styles[(what, "tfmlib")][0],
                   label=what)
    if lengths:   # a slope-2 line under all the measured ones
        low = 0.4 * min(1000 * min(r.tfmlib.median, r.torch.median)
                        for r in rows if r.size == f"L={lengths[-1]}")
        guide = [low * (n / lengths[-1]) ** 2 for n in lengths]
        left.plot(lengths, guide, ":", color="0.5", label="grows as L² (guide)")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, labels=[str(n) for n in lengths])
        ax.set_xlabel("sequence length L (queries = keys)")
        ax.grid(alpha=0.3, which="both")
    left.set_yscale("log")
    left.set_ylabel("time per call (ms, median; log scale)")
    left.set_title(f"time vs L, CPU float32, {title_size}", fontsize=10)
    left.legend(fontsize=7.5, loc="upper left")
    right.axhline(1.0, color="0.3", lw=0.8)
    right.axhline(RATIO_TARGET, color="0.5", ls="--", lw=1, label=f"target {RATIO_TARGET}")
    right.set_ylim(0, max(2.0, 1.1 * max(r.ratio for r in rows)))
    right.set_ylabel("tfmlib time / PyTorch time")
    right.set_title("ratio (above 1: tfmlib is slower)", fontsize=10)
    right.legend(fontsize=8, loc="upper left")
    fig.suptitle(f"Scaled dot-product attention: {machine.cpu}, {machine.threads} thread(s), "
                 f"torch {machine.torch}", fontsize=10)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def render(machine: Machine, run_seconds: float, quick: bool, results: dict,
           slopes: dict, failures: list[str], plot_written: bool, title_size: str) -> str:
    """The whole RESULTS.md as a string."""
    comparisons = results.get("attention", []) + results.get("layers", []) + results.get("adam", [])
    notebooks, widgets = results.get("notebooks", []), results.get("widgets", [])
    training = results.get("training", [])
    out = ["# Benchmark results", "",
           "Generated by `python -m benchmarks` (run it with `make bench`); do not edit by hand, "
           "rerun instead. Every tfmlib figure is measured beside PyTorch's in the same process, "
           "in alternating rounds after a warm-up (`torch.utils.benchmark.Timer`), and the median "
           "round is reported. The discussion at the end is part of the generator "
           "(`benchmarks/report.py`) and says why the gaps are where they are.", ""]
    if quick:
        out += ["> **Quick run** (`--quick`): small sizes and few repeats, to check that the "
                "benchmarks work. These are not the reference figures.", ""]
    out += ["## Machine", ""] + machine_lines(machine, run_seconds, quick) + [""]
    out += ["## Against the targets", ""] + summary_lines(comparisons, notebooks, widgets, training)
    if failures:
        out += [f"- **A benchmark group failed**: {f}" for f in failures]
    out.append("")
    if comparisons:
        out += ["## tfmlib / PyTorch", "",
                "Times are per call (median of the rounds). *spread of rounds* is (slowest - "
                "fastest round) / median, the larger of the two sides: how much the machine's "
                "load moved the figures.", "", comparison_table(comparisons), ""]
    if results.get("attention"):
        out += ["## Attention: time against sequence length", ""]
        if plot_written:
            out += [f"![time per call against L, log-log]({PLOT_NAME})", ""]
        if slopes:
            out += ["Slope of log(time) against log(L) between the two longest lengths "
                    "(2 means time grows as L²):", "",
                    "| pass | tfmlib | PyTorch |", "|---|---:|---:|"]
            for what in ("forward", "forward+backward"):
                if (what, "tfmlib") in slopes:
                    out.append(f"| {what} | {slopes[(what, 'tfmlib')]:.2f} "
                               f"| {slopes[(what, 'torch')]:.2f} |")
            out.append("")
    if notebooks:
        out += ["## Each notebook, executed headless", "",
                "As `jupyter execute` runs it (nbclient, a fresh kernel, on a copy of the notebook "
                "in a temporary folder); the time includes starting and stopping the kernel.", "",
                measured_table(notebooks), ""]
    if training:
        out += ["## Notebook 10: training to 99 % exact match", "",
                "`tfmlib.training.train` with a held-out evaluation every few steps to find the first "
                "step at or above 99 %; the time of the evaluations themselves (greedy decoding) is "
                "measured and subtracted.", "", measured_table(training), ""]
    if results.get("generation"):
        out += generation_lines(results["generation"])
    if widgets:
        out += ["## Widget redraws", "",
                "Each notebook's main widget, built headlessly and driven through its `update(...)` "
                "callback with changed values, one redraw per call (the PNG frame included; "
                "sending it to the browser is not). The time is the 95th percentile of the redraws "
                "of the widget's slowest control, the first visit of each setting included.", "", measured_table(widgets, unit="ms"), ""]
    out += [DISCUSSION]
    return "\n".join(out).rstrip() + "\n"


def generation_lines(rows: list[Measured]) -> list[str]:
    """Bonus notebook b2: time per new token against L, with and without the KV cache."""
    from .generation import PLOT_NAME, slopes

    slope = slopes(rows)
    return ["## Generation: time per new token, with and without the KV cache", "",
            "`tfmlib.viz.generation.time_per_token` on an untrained language model: the fastest of "
            "a few runs of one step when L tokens are already there. With the cache the step is "
            "`lm_step` on the one new token (its query against L cached keys); without, `lm_forward` "
            "on all L + 1 tokens, as generation without a cache does at every step.", "",
            f"![time per new token against L, with and without the cache]({PLOT_NAME})", "",
            "Slope of log(time) against log(L) between the two longest lengths (1: grows like L, "
            "2: like L²): " + ", ".join(f"{name} {value:.2f}" for name, value in slope.items()) + ".",
            "", measured_table(rows, unit="ms"), ""]


DISCUSSION = """## Discussion: where tfmlib is slower, and what closing the gap would cost

tfmlib is the course's *reference code*: every function is the formula of its notebook,
written with plain tensor operations that a learner can read line by line and check against
the shapes in the comments. PyTorch's layers are built for speed. Where the two differ, the
difference is the price of readability, and the rows above measure it. tfmlib's math was not
changed to win any row here.

**Scaled dot-product attention.** `F.scaled_dot_product_attention` on a CPU dispatches to a
fused, flash-attention style kernel (`_scaled_dot_product_flash_attention_for_cpu`): it walks
over blocks of keys with a running maximum and sum for the softmax and never writes the whole
`(B, H, L, L)` matrix of weights to memory; its backward pass recomputes what it needs block by
block. tfmlib's version does what notebook 05 teaches, one full `L x L` tensor per step:
`scores = (Q / sqrt(d_k)) K^T` (a new tensor; the scaling is applied to Q, which is only
`L x d_k`), `softmax` (another), `weights @ V` (and, with a mask, a `masked_fill` and a
`torch.where`, two more); it *returns* the weights so that they can be plotted, and
autograd keeps them for the backward pass. At B = H = 8 such a tensor is 16 MB at L = 256 and
256 MB at L = 1024, far beyond the CPU's caches, and each is freshly allocated memory. Both
versions do the same two matrix products, so both grow as L² (see the slopes); the gap is the
constant factor of that memory traffic, and it widens once the `L x L` tensors stop fitting in
cache. How much it costs also depends on the memory allocator: by default glibc's `malloc`
hands blocks this large back to the operating system when they are freed, so the next call
page-faults in freshly zeroed memory for every new `L x L` tensor, and it adapts its thresholds to
what the program freed before, so the same call can take twice as long early in a process as
later (measured: 1.9 ms, then 1.0 ms for the same L = 64 forward). The benchmark therefore tells
malloc to keep freed memory (see *memory* above), which makes the figures independent of the
order of the benchmarks. Measured while writing this benchmark (one thread, quiet machine),
forward at L = 256 and L = 1024: 3.1x and 3.8x PyTorch's time with glibc's default behaviour,
1.3x and 2.0x with the memory kept. Real training loops and notebooks run under the default.
Closing the rest would mean calling `F.scaled_dot_product_attention` inside tfmlib (the notebook
would then teach nothing) or writing a blocked online softmax by hand, which is a lesson of its
own and not a readable reference. We keep the readable version.

**Multi-head attention and the encoder layer.** tfmlib's `multi_head_attention` is three
`linear` calls, `split_heads`, the attention above, `merge_heads` and one more `linear`; at
L = 128 it comes within 20 % of `nn.MultiheadAttention`, forward and backward.
`nn.MultiheadAttention` and `nn.TransformerEncoderLayer` in `eval()` without gradients take a
"fast path" written in C++ (`torch._native_multi_head_attention`,
`torch._transformer_encoder_layer_fwd`); the rows "fast path off" (`torch.backends.mha.set_fastpath_enabled(False)`) and "forward+backward" (gradients
on, so no fast path) compare the same Python-level steps. The encoder layer's remaining gap is
in the pieces around attention, measured with the profiler while writing this benchmark:
`layer_norm` spelled out as mean, `var`, subtract, divide, scale and shift where PyTorch calls one
fused `native_layer_norm`; `x @ W.T + b` as a product and a separate add where PyTorch calls one
`addmm`; the copies made by `reshape` after the `transpose` in `split_heads`/`merge_heads`; and the
attention weights computed and kept, where the layer asks PyTorch for none. Each of these is a line
the notebooks explain; fusing them would remove the explanation.

**Adam.** `tfmlib.adam_step` is the textbook update, one parameter at a time:
`m_hat = m / (1 - beta1^t)`, `v_hat = v / (1 - beta2^t)`, `p -= lr * m_hat / (sqrt(v_hat) + eps)`,
allocating a few temporaries per parameter. `torch.optim.Adam(foreach=False)` runs the same loop
(and is about as fast) but folds the bias corrections into two scalars and ends in one
`addcdiv_`; `foreach=True` updates all parameters with a handful of multi-tensor kernel calls,
which wins on a model of many small tensors like notebook 10's (90 tensors). Writing tfmlib's
step with `torch._foreach_*` calls would win the same time and lose the formula.

**Widget redraws.** Almost all of a redraw is matplotlib turning the figure into a PNG, and most
of that is drawing text: tick labels, titles and per-cell labels are laid out and rasterised glyph
by glyph on every `savefig`. Widgets that draw their axes, labels and titles once and afterwards
only paint the changing artists over that saved background (blitting, as
`tfmlib.viz.common.Frames` does) stay far under 100 ms; a widget that re-renders a whole figure
full of text on each change pays for all of it every time, and its slowest change (see the notes
column) is usually the one that changes the axes' layout. The fix for a slow widget is in
`tfmlib/viz` (blit, cache one background per layout), never in the math.

**The whole course.** Each notebook runs in a fresh kernel, and starting one (Python, torch,
matplotlib, ipywidgets, then shutting down) costs 1 s on a quiet machine and 2-4 s on a busy one
before any cell runs: about a quarter of the total for ten notebooks. Notebook 10's 400 training
steps are the largest single item; the training table shows the first evaluated step at which
the model reaches 99 % on held-out sequences, which is the most a shorter run could save (fewer steps also change the learning-rate
schedule, so check a shorter run before adopting it). On a machine that other processes load
heavily, everything here stretches: read the load averages at the top before comparing a total
with the 60 s target.

**Ideas for speed that keep the code as clear** (not applied: tfmlib's math modules are not this
benchmark's to change, and each idea moves a printed digit or a line the notebooks quote; they
are listed for the authors to weigh). Timings from one thread on the machine above, while
writing this benchmark:

- `attention.py`: scale the query before the product,
  `(query / math.sqrt(d_k)) @ key.transpose(-2, -1)`, instead of dividing the `L x L` scores: the
  same formula, one `(L, d_k)` pass instead of one `(L, L)` pass. Measured for the scores alone
  at B = H = 8, d_k = 64, with the memory kept: 6.4 -> 4.6 ms at L = 256, 151 -> 104 ms at
  L = 1024 (with glibc's default: 15 -> 4.0 ms and 281 -> 166 ms). Rounding differs in the last
  bits; notebook 05 computes `scores / math.sqrt(d_k)` in its own cells, so its printed steps
  would still follow the text.
- `sublayers.py`: `variance = ((x - mean) ** 2).mean(dim=-1, keepdim=True)` instead of
  `x.var(dim=-1, keepdim=True, unbiased=False)`: it is the definition of the (biased) variance,
  arguably clearer, and took 0.25-0.6 ms against 1.4 ms on a `(8, 128, 256)` tensor.
- `adam.py`: nothing without hiding the formula; the gap to `foreach=True` is structural.

**Threads.** The comparisons run with the number of intra-op threads given by `--threads`
(default 1). On a 2-core machine that other processes also use, two OpenMP threads per operation
spend much of their time waiting for each other (measured while writing this benchmark: the same
small attention call took a median 57 ms with 2 threads against 1.9 ms with 1), so one thread gives
the steadier ratios; `--threads 0` uses torch's default. The notebooks are executed in fresh
kernels with torch's default threads, as a learner runs them (notebook 10 sets one thread itself
before training).
"""
