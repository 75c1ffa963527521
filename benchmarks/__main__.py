"""`python -m benchmarks [--quick] [--out DIR] [--threads N] [--only GROUP ...]`

Measures on this machine and writes RESULTS.md and attention_vs_length.png into --out
(default: benchmarks/; with --quick: benchmarks/scratch/, which git ignores, so a smoke
run never overwrites the committed figures).
"""
from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

import torch

from . import course, generation, kernels, report
from .timing import FULL, QUICK, keep_freed_memory, load_average, machine

GROUPS = ("attention", "layers", "adam", "generation", "widgets", "training", "notebooks")
HERE = Path(__file__).resolve().parent


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="small sizes and few repeats: checks that everything runs (~1 min)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for RESULTS.md and the plot (default benchmarks/, "
                             "or benchmarks/scratch/ with --quick)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads in this process (default 1; 0 = torch's "
                             "default). The notebooks' kernels always use torch's default.")
    parser.add_argument("--malloc", choices=("keep", "default"), default="keep",
                        help="keep: tell glibc's malloc to keep freed memory, so timings do not "
                             "depend on the order of the benchmarks (default); default: leave "
                             "the allocator alone")
    parser.add_argument("--only", choices=GROUPS, action="append",
                        help="run only this group (repeatable); default: all")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    default_threads = torch.get_num_threads()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    allocator = (keep_freed_memory() if args.malloc == "keep"
                 else "glibc malloc left as it is (`--malloc default`)")
    settings = QUICK if args.quick else FULL
    out = args.out or (HERE / "scratch" if args.quick else HERE)
    out.mkdir(parents=True, exist_ok=True)
    groups = args.only or GROUPS
    m = machine()
    m.extra["default_threads"] = default_threads
    m.extra["allocator"] = allocator
    print(f"{m.cpu}, {m.cores} cores, torch {m.torch}, {m.threads} thread(s), "
          f"load {m.load_start}", flush=True)

    quick = kernels.quick_sizes() if args.quick else {}
    trained = None

    def training():
        nonlocal trained
        kwargs = dict(course.NOTEBOOK_10_TRAINING, eval_every=10)
        if args.quick:
            kwargs.update(steps=20, eval_every=5, eval_size=20)
        rows, trained = course.training(**kwargs)
        return rows

    jobs = {
        "attention": lambda: (kernels.sdpa(settings=settings, **quick.get("sdpa", {}))
                              + kernels.sdpa_causal(settings=settings, **quick.get("sdpa_causal", {}))),
        "layers": lambda: (kernels.mha(settings=settings, **quick.get("mha", {}))
                           + kernels.encoder_layer(settings=settings, **quick.get("encoder_layer", {}))),
        "adam": lambda: kernels.adam(settings=settings),
        "generation": lambda: generation.rows(quick=args.quick, out=out),   # writes its figure
        "training": training,   # before the widgets: notebook 10's widget shows the trained model
        "widgets": lambda: course.widgets(repeats=6 if args.quick else 30, trained=trained),
        "notebooks": lambda: course.notebooks(course.course_notebooks()[:1] if args.quick else None),
    }
    results, failures = {}, []
    for group in ("attention", "layers", "adam", "generation", "training", "widgets", "notebooks"):
        if group not in groups:
            continue
        print(f"== {group}", flush=True)
        start = time.perf_counter()
        try:
            results[group] = jobs[group]()
        except Exception as exc:                       # report it, run the other groups
            traceback.print_exc()
            failures.append(f"{group}: {type(exc).__name__}: {exc}")
            continue
        for row in results[group]:
            print("  " + _line(row), flush=True)
        print(f"   ({time.perf_counter() - start:.0f} s)", flush=True)

    m.load_end = load_average()
    plot_written = False
    if results.get("attention"):
        report.plot_attention(results["attention"], m, out / report.PLOT_NAME, "B=8 H=8 d_k=64")
        plot_written = True
    run_seconds = time.perf_counter() - started
    text = report.render(m, run_seconds, args.quick, results,
                         kernels.scale_check(results.get("attention", [])), failures,
                         plot_written, "B=8 H=8 d_k=64")
    (out / "RESULTS.md").write_text(text, encoding="utf-8")
    print(f"wrote {out / 'RESULTS.md'}" + (f" and {out / report.PLOT_NAME}" if plot_written else "")
          + f" in {run_seconds / 60:.1f} min; load {m.load_end}")
    return 1 if failures else 0


def _line(row) -> str:
    if hasattr(row, "ratio"):
        return (f"{row.group:20} {row.what:16} {row.size:30} {1000 * row.tfmlib.median:9.3f} ms "
                f"vs {1000 * row.torch.median:9.3f} ms  ratio {row.ratio:5.2f}  ({row.reference})")
    return f"{row.what:55} {row.seconds:9.3f} s  {row.note}"


def main(argv=None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
