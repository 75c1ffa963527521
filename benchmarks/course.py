"""How fast the course itself runs: each notebook headless, notebook 10's training, and the
redraw of each notebook's main widget.

The notebooks' times alone, for all ten or some (a number, a name or a path each), with the
slowest cells of each:

    make notebook-times                              # all ten, in the tests' environment
    .venv/bin/python -m benchmarks.course 05 09_adam --cells 5
"""
from __future__ import annotations

import contextlib
import datetime
import io
import math
import os
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from tfmlib._runcache import ENV_VAR as RUN_CACHE_VAR

from .timing import Measured

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
NOTEBOOK_TARGET_S = 10.0        # the team's budget per notebook on 2 cores ...
TRAINING_NOTEBOOK_TARGET_S = 45.0   # ... and for 10_training
COURSE_TARGET_S = 60.0
LAB_TARGET_S = 25.0             # notebook 10's experiments lab, all its cells together
LAB_HEADING = "experiments lab"  # the section of notebook 10 whose cells that target counts
TRAINING_TARGET_S = 8.0         # notebook 10's baseline, from the first step to 99 %
REDRAW_TARGET_S = 0.100
#: The call of notebook 10: train(config, task="reverse", steps=500, batch_size=64, lr=2e-2, seed=0)
NOTEBOOK_10_TRAINING = dict(task="reverse", steps=500, batch_size=64, lr=2e-2, min_len=3, max_len=10, seed=0)
SENTENCES = ["the cat sat on the mat", "i love nlp", "attention is all you need"]


# ---- notebooks ------------------------------------------------------------------------------

def course_notebooks() -> list[Path]:
    """The course's notebooks as they are now (NN_topic.ipynb, in order)."""
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def _cell_seconds(nb) -> float:
    """Sum of the cells' own execution times, from the timestamps nbclient records."""
    return sum(_cell_seconds_of(cell) for cell in nb.cells)


def _section_seconds(nb, heading: str) -> float | None:
    """Sum of the cell times from the markdown heading containing `heading` (any case) to the
    next heading of the same or a higher level; None when the notebook has no such heading."""
    total, level = 0.0, None
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                hashes = len(line) - len(line.lstrip("#"))
                if hashes and line[hashes:hashes + 1] == " ":
                    if level is None and heading in line.lower():
                        level = hashes
                    elif level is not None and hashes <= level:
                        return total
        elif level is not None:
            total += _cell_seconds_of(cell)
    return total if level is not None else None


def _slowest_cells(nb, count: int) -> list[tuple[float, float, int, str]]:
    """The `count` slowest code cells as (seconds, kernel CPU seconds or nan, index in the
    notebook, first line)."""
    timed = [(_cell_seconds_of(cell), cell.metadata.get("cpu_s", math.nan), index,
              (cell.source.strip().splitlines() or [""])[0][:70])
             for index, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    return sorted(timed, reverse=True)[:count]


def _cell_seconds_of(cell) -> float:
    stamps = cell.get("metadata", {}).get("execution", {})
    start, end = stamps.get("iopub.execute_input"), stamps.get("shell.execute_reply")
    return (_parse_time(end) - _parse_time(start)).total_seconds() if start and end else 0.0


def _parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def execute_notebook(path: Path, timeout: int = 300) -> dict:
    """Run one notebook headless as `jupyter execute` does (nbclient, a fresh kernel), on a
    copy in a temporary folder so the repository's notebook is never rewritten.

    -> {"name", "seconds" (kernel start to shutdown), "cells_s" (sum of cell times),
        "cpu_s" (the kernel process's user + system CPU time, which other load on the machine
        changes far less than wall time), "lab_s" (the experiments lab's cells, None without
        that section), "nb" (the executed notebook, with each cell's timing), "error"}.
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    os.environ.pop(RUN_CACHE_VAR, None)  # the kernel inherits it: time the training, never a cached run
    with tempfile.TemporaryDirectory(prefix="bench-nb-") as folder:
        copy = Path(folder) / path.name
        shutil.copyfile(path, copy)
        nb = nbformat.read(copy, as_version=4)
        client = NotebookClient(nb, timeout=timeout, record_timing=True,
                                resources={"metadata": {"path": folder}})
        _record_cell_cpu(client)
        error = ""
        # The kernel is this process's child: once it has exited and been waited for, its CPU
        # time is in RUSAGE_CHILDREN.
        cpu_before = _children_cpu_seconds()
        start = time.perf_counter()
        try:
            client.execute()
        except CellExecutionError as exc:          # report it; the timing still means something
            error = str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else "error"
        seconds = time.perf_counter() - start
    return {"name": path.stem, "seconds": seconds, "cells_s": _cell_seconds(nb),
            "cpu_s": _children_cpu_seconds() - cpu_before,
            "lab_s": _section_seconds(nb, LAB_HEADING), "nb": nb, "error": error}


def _record_cell_cpu(client) -> None:
    """Note in each code cell's metadata (`cpu_s`) the CPU time its kernel spent on it, read
    from /proc before and after the cell (Linux; elsewhere nothing is noted)."""
    started = {}

    def kernel_cpu_seconds():
        try:
            fields = Path(f"/proc/{client.km.provisioner.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (AttributeError, OSError):
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")   # utime + stime

    def before(cell, cell_index, **_):
        started[cell_index] = kernel_cpu_seconds()

    def after(cell, cell_index, **_):
        end = kernel_cpu_seconds()
        if started.get(cell_index) is not None and end is not None:
            cell.metadata["cpu_s"] = end - started[cell_index]

    client.on_cell_execute, client.on_cell_executed = before, after


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def notebooks(paths=None, echo=None, slowest_cells: int = 0, side_by_side: bool = True) -> list[Measured]:
    """Execute each notebook in turn; then a row for the experiments lab's cells (part of
    notebook 10's time, not added again), the whole course's total, and (`side_by_side`) the
    wall time of the same notebooks run two at a time.

    `echo(line)`, if given, is called as each notebook finishes, with its row and then its
    `slowest_cells` slowest cells, so a long run shows where it is.
    """
    paths = course_notebooks() if paths is None else [Path(p) for p in paths]
    rows, lab_rows, cells_total, cpu_total = [], [], 0.0, 0.0
    for path in paths:
        run = execute_notebook(path)
        cells_total += run["cells_s"]
        cpu_total += run["cpu_s"]
        target = TRAINING_NOTEBOOK_TARGET_S if "training" in path.stem else NOTEBOOK_TARGET_S
        note = (f"cells {run['cells_s']:.1f} s, kernel start/stop {run['seconds'] - run['cells_s']:.1f} s, "
                f"kernel CPU {run['cpu_s']:.1f} s")
        if run["error"]:
            note += f"; FAILED: {run['error']}"
        rows.append(Measured("notebook", run["name"], run["seconds"], target, note))
        if echo:
            echo(_row_line(rows[-1]))
            for seconds, cpu, index, first_line in _slowest_cells(run["nb"], slowest_cells):
                echo(f"    {seconds:6.2f} s  (CPU {cpu:5.2f} s)  cell {index:3}  {first_line}")
        if run["lab_s"] is not None:
            lab_rows.append(Measured("notebook", f"{run['name']}: experiments lab cells",
                                     run["lab_s"], LAB_TARGET_S, "part of the notebook's time above"))
    if rows:
        total = sum(r.seconds for r in rows)
        rows.append(Measured("notebook", f"whole course ({len(rows)} notebooks), one after the other",
                             total, COURSE_TARGET_S,
                             f"cells {cells_total:.1f} s, kernel CPU {cpu_total:.1f} s"))
        rows[-1:-1] = lab_rows
        if side_by_side and len(paths) > 1:
            rows.append(notebooks_side_by_side(paths))
    return rows


def notebooks_side_by_side(paths, kernels: int = 2) -> Measured:
    """Wall time of executing `paths` with `kernels` kernels at once, the longest first (what
    `make notebooks` does with nbval's two workers: one kernel per core of a 2-core machine)."""
    from concurrent.futures import ThreadPoolExecutor

    by_length = sorted(paths, key=lambda p: "training" not in p.stem)   # 10 first: it is the longest
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=kernels) as pool:
        runs = list(pool.map(execute_notebook, by_length))
    seconds = time.perf_counter() - start
    failed = [run["name"] for run in runs if run["error"]]
    note = f"{kernels} kernels at once, {os.cpu_count()} cores" + (f"; FAILED: {', '.join(failed)}" if failed else "")
    return Measured("notebook", f"whole course ({len(paths)} notebooks), {kernels} at a time",
                    seconds, COURSE_TARGET_S, note)


def _row_line(row: Measured) -> str:
    return f"{row.what:40} {row.seconds:6.1f} s  {row.note}"


def find_notebooks(names) -> list[Path]:
    """The course's notebooks named by `names`, in course order: each name is a path, a
    notebook's stem (`05_attention`) or its number (`05`, `5`); no names: all ten."""
    every = course_notebooks()
    if not names:
        return every
    found = []
    for name in names:
        if Path(name).suffix == ".ipynb":
            found.append(Path(name))
            continue
        matches = [p for p in every if p.stem == name or p.stem.split("_")[0] == name.zfill(2)]
        if not matches:
            raise SystemExit(f"no notebook {name!r}; the course's are: "
                             + ", ".join(p.stem for p in every))
        found += matches
    return found


def main(argv=None) -> int:
    import argparse
    parser = argparse.ArgumentParser(prog="python -m benchmarks.course",
                                     description="Execute the course's notebooks headless (as "
                                                 "`jupyter execute` does, on copies) and print the "
                                                 "time of each and the total.")
    parser.add_argument("notebooks", nargs="*",
                        help="numbers (05), names (05_attention) or paths; default: all ten")
    parser.add_argument("--cells", type=int, default=0, metavar="N",
                        help="also list each notebook's N slowest cells")
    args = parser.parse_args(argv)
    paths = find_notebooks(args.notebooks)
    rows = notebooks(paths, echo=print, slowest_cells=args.cells)
    for row in rows[len(paths):]:                 # the lab's cells, then the total
        print(_row_line(row))
    return 1 if any("FAILED" in row.note for row in rows) else 0


# ---- notebook 10: training to 99 % exact match ----------------------------------------------

def training(target: float = 0.99, eval_every: int = 10, **train_kwargs) -> tuple[list[Measured], dict]:
    """tfmlib.training.train with a held-out evaluation every `eval_every` steps.

    Evaluation (greedy decoding of the held-out set) is not training, so its time
    is measured and left out: tfmlib.training.exact_match is wrapped, for this run
    only, by a function that notes when it was called and how long it took.
    -> rows, and {"params", "config", "history", ...} for the notebook-10 widget.
    """
    from tfmlib import training as tr

    original = tr.exact_match
    evals = []                                     # (called at, seconds, exact match)

    def timed_exact_match(*args, **kwargs):
        start = time.perf_counter()
        value = original(*args, **kwargs)
        evals.append((start, time.perf_counter() - start, value))
        return value

    tr.exact_match = timed_exact_match
    try:
        start = time.perf_counter()
        params, history = tr.train(eval_every=eval_every, **train_kwargs)
        total = time.perf_counter() - start
    finally:
        tr.exact_match = original
    eval_total = sum(e[1] for e in evals)
    steps = len(history["step"])
    hit = next((i for i, e in enumerate(evals) if e[2] >= target), None)
    settings = ", ".join(f"{k}={v}" for k, v in train_kwargs.items()) or "train() defaults"
    rows = []
    if hit is None:
        best = max(history["exact_match"], default=float("nan"))
        rows.append(Measured("training", f"to {target:.0%} exact match", float("nan"), TRAINING_TARGET_S,
                             f"not reached in {steps} steps (best {best:.3f}); {settings}"))
    else:
        step = history["eval_step"][hit]
        seconds = evals[hit][0] - start - sum(e[1] for e in evals[:hit])
        rows.append(Measured("training", f"to {target:.0%} exact match", seconds, TRAINING_TARGET_S,
                             f"first reached at step {step} of {steps} (checked every "
                             f"{eval_every}); {settings}"))
    rows.append(Measured("training", f"all {steps} steps", total - eval_total, None,
                         f"{1000 * (total - eval_total) / steps:.1f} ms a step, evaluation "
                         f"({len(evals)} x, {eval_total:.1f} s) left out; final exact match "
                         f"{history['exact_match'][-1]:.1%}"))
    config = train_kwargs.get("config", tr.ModelConfig())
    return rows, {"params": params, "config": config, "history": history}


# ---- widget redraws -------------------------------------------------------------------------

def _running_example(d_model: int = 16, seed: int = 0, scale: bool = False):
    """The notebooks' running example: ids (3, 8), vocab, tokens, x (3, 8, d_model)."""
    import tfmlib as T

    vocab = T.build_vocab(SENTENCES)
    ids = T.encode_batch(SENTENCES, vocab, add_bos=True, add_eos=True)
    table = torch.randn(len(vocab), d_model, generator=torch.Generator().manual_seed(seed))
    if scale:
        table = table / math.sqrt(d_model)
    x = T.add_positional_encoding(T.embed(ids, table),
                                  T.sinusoidal_positional_encoding(ids.size(1), d_model))
    id_to_token = T.invert_vocab(vocab)
    tokens = [[id_to_token[i] for i in row] for row in ids.tolist()]
    return ids, vocab, tokens, x


def _widget_01():
    from tfmlib.viz.shapes import broadcast_explorer
    return broadcast_explorer(a="3, 1", b="4"), [
        {"a": "2, 3, 4", "b": "3, 4"}, {"b": "2, 3"}, {"a": "3, 1", "b": "4"}]


def _widget_02():
    import tfmlib as T
    from tfmlib.viz.tokenization import tokenizer_explorer
    vocab = T.build_vocab(SENTENCES)
    return tokenizer_explorer(SENTENCES, vocab, sentence="my cat loves attention"), [
        {"sentence": "i love the cat and the mat and the hat"}, {"sentence": "the cat"},
        {"sentence": "my cat loves attention"}]


def _widget_03():
    from tfmlib.viz.embeddings import positional_encoding_explorer
    return positional_encoding_explorer(d_model=16, max_len=50, pos_i=10, pos_j=14), [
        {"d_model": 32}, {"pos_i": 20}, {"max_len": 80}, {"pos_j": 40},
        {"d_model": 16, "max_len": 50, "pos_i": 10, "pos_j": 14}]


def _widget_04():
    from tfmlib.viz.masks import mask_explorer
    return mask_explorer([8, 5, 7], seq_len=8, causal=True), [
        {"lengths": [3, 2, 1]}, {"causal": False}, {"lengths": [8, 5, 7], "causal": True}]


def _widget_05():
    import tfmlib as T
    from tfmlib.viz.attention import saturation_explorer, saturation_sweep
    ids, vocab, tokens, x = _running_example()
    h = T.layer_norm(x, **T.init_norm_params(16))
    mask = T.padding_mask(ids, vocab[T.PAD])[:, 0]
    sweep = saturation_sweep(h, mask)
    return saturation_explorer(sweep, tokens[0], d_k=16, scaled=True), [
        {"d_k": 256}, {"scaled": False}, {"d_k": 16, "scaled": True}]


def _widget_06():
    from tfmlib.viz import multihead as mh_viz
    ids, vocab, _, _ = _running_example()
    return mh_viz.heads_explorer(ids, vocab, sample=0, heads=4, d_k=4), [
        {"heads": 8}, {"d_k": 16}, {"heads": 4, "d_k": 4}]


def _widget_07():
    import tfmlib as T
    from tfmlib.viz import sublayers as sl_viz
    _, _, _, x = _running_example(scale=True)
    ffn_params = T.init_ffn_params(16, 64, generator=torch.Generator().manual_seed(1))
    norm = T.init_norm_params(16)
    return sl_viz.block_explorer(x, lambda h: T.feed_forward(h, ffn_params), norm, p=0.1,
                                 norm_first=False), [
        {"p": 0.5}, {"norm_first": True}, {"p": 0.1, "norm_first": False}]


def _widget_08():
    import tfmlib as T
    from tfmlib.viz import encoder_decoder as ed_viz
    ids, vocab, _, x = _running_example(scale=True)
    targets = ["die katze sass auf der matte", "ich liebe nlp",
               "aufmerksamkeit ist alles was man braucht"]
    tgt_vocab = T.build_vocab(targets)
    tgt_ids = T.encode_batch(targets, tgt_vocab, add_bos=True)
    table = torch.randn(len(tgt_vocab), 16, generator=torch.Generator().manual_seed(1)) / 4
    y = T.add_positional_encoding(T.embed(tgt_ids, table),
                                  T.sinusoidal_positional_encoding(tgt_ids.size(1), 16))
    stack = ed_viz.StackAttention(
        x, T.padding_mask(ids, vocab[T.PAD]), y, T.target_mask(tgt_ids, tgt_vocab[T.PAD]),
        encoder_layers=[T.init_encoder_layer_params(16, 64, torch.Generator().manual_seed(30 + i))
                        for i in range(4)],
        decoder_layers=[T.init_decoder_layer_params(16, 64, torch.Generator().manual_seed(40 + i))
                        for i in range(4)],
        sample_names=SENTENCES, src_tokens=ed_viz.token_rows(ids, vocab),
        tgt_tokens=ed_viz.token_rows(tgt_ids, tgt_vocab))
    # Each control set here redraws once (as one click would), so change one at a time.
    return ed_viz.StackAttentionExplorer(stack, num_layers=2, num_heads=4), [
        {"layers": 3}, {"heads": 1}, {"kind": "decoder cross-attention"}, {"sample": 1},
        {"layers": 1}, {"heads": 4}, {"kind": "decoder self-attention (causal)"}, {"sample": 2},
        {"layers": 2}, {"heads": 2}, {"kind": "encoder self-attention"}, {"sample": 0}]


def _widget_09():
    from tfmlib.viz.adam import OptimizerPathExplorer
    return OptimizerPathExplorer(lr=0.1, beta1=0.9, beta2=0.999), [
        {"lr": 0.3}, {"beta1": 0.5}, {"beta2": 0.9}, {"lr": 0.1}, {"beta1": 0.9}, {"beta2": 0.999}]


def _widget_10(trained=None):
    from tfmlib import training as tr
    from tfmlib.viz.training import ReverseExplorer
    if trained is None:               # no training run in this benchmark: untrained weights
        config = tr.ModelConfig()
        params = tr.init_model(config, torch.Generator().manual_seed(0))
    else:
        params, config = trained["params"], trained["config"]
    held_src, _ = tr.make_batch("reverse", 6, 3, 8, held_out=True,       # as notebook 10 does
                                generator=torch.Generator().manual_seed(7))
    examples = [tr.decode(s, tr.VOCAB) for s in held_src]
    return ReverseExplorer(params, config, examples), [
        {"text": examples[1]}, {"head": "1"}, {"text": examples[2]}, {"head": "mean"},
        {"text": "7 7 7 1"}, {"text": "3 1 4 1 5 9 2 6 5 3 5 8"}, {"head": "0"},
        {"text": " ".join("2718281828459045235360287471352")}, {"text": examples[0]}]


def _widget_10_lab():
    """Notebook 10's experiment overlay, on made-up records shaped like the lab's (every
    experiment it draws x 2 seeds, 500 steps, an evaluation every 50): no training needed."""
    from tfmlib.experiments import EXPERIMENTS
    from tfmlib.viz.training import ExperimentOverlay
    names = list(EXPERIMENTS)
    g = torch.Generator().manual_seed(0)
    results = {}
    for i, name in enumerate(names):
        for seed in (0, 1):
            loss = (3.0 * torch.rand(500, generator=g) * torch.linspace(1, 0.01, 500) + 0.01 * (i + 1))
            results[name, seed] = {"step": list(range(1, 501)), "loss": loss.tolist(),
                                   "eval_step": list(range(50, 501, 50)),
                                   "exact_match": torch.rand(10, generator=g).sort().values.tolist()}
    return ExperimentOverlay(results, names, selected=("baseline", "1 head", "no positions")), [
        {"names": names[:4]}, {"names": names[4:8]}, {"names": ["baseline"]},
        {"names": names[::3]}, {"names": names[1:5]}, {"names": ["baseline", "1 head", "no positions"]}]


WIDGETS = {"01_shapes": _widget_01, "02_tokenization": _widget_02, "03_embeddings": _widget_03,
           "04_masks": _widget_04, "05_attention": _widget_05, "06_multihead": _widget_06,
           "07_sublayers": _widget_07, "08_encoder_decoder": _widget_08, "09_adam": _widget_09,
           "10_training": _widget_10, "10_training: lab": _widget_10_lab}


def widgets(repeats: int = 24, names=None, trained=None) -> list[Measured]:
    """Build each notebook's main widget, then call its update callback `repeats` times,
    cycling through changed values (each call is one redraw, PNG frame included). A row
    reports the 95th percentile of the redraws of the widget's slowest control (a key of
    the changes), first visits of each setting included.

    Outside a kernel, the widgets' `display(...)` into their Output area prints a repr
    to stdout; that is swallowed here. What is not measured: sending the PNG to the
    browser (a comm message) and the browser painting it.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = []
    for name in (names or WIDGETS):
        build = WIDGETS[name]
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                explorer, changes = build(trained) if name == "10_training" else build()
            except ImportError as exc:            # a viz module not written yet
                rows.append(Measured("widget redraw", name, float("nan"), REDRAW_TARGET_S,
                                     f"not measured: {exc}"))
                continue
            per_change = [[] for _ in changes]
            for i in range(max(repeats, len(changes))):
                change = changes[i % len(changes)]
                start = time.perf_counter()
                explorer.update(**change)
                per_change[i % len(changes)].append(time.perf_counter() - start)
        plt.close("all")
        samples = [t for times in per_change for t in times]
        # Per control (a change's keys), first visits included: the 95th percentile of its redraws.
        per_control = {}
        for change, times in zip(changes, per_change):
            for control in change:
                per_control.setdefault(control, []).extend(times)
        p95 = {control: _percentile(times, 95) for control, times in per_control.items()}
        slowest = max(p95, key=p95.get)
        rows.append(Measured(
            "widget redraw", f"{name}: {type(explorer).__name__}.update", p95[slowest],
            REDRAW_TARGET_S,
            f"p95 of the slowest control, `{slowest}` ({len(per_control[slowest])} redraws, first "
            f"visits included); all {len(samples)} redraws: median {1000 * statistics.median(samples):.0f} ms, "
            f"slowest {1000 * max(samples):.0f} ms"))
    return rows


def _percentile(times: list[float], q: float) -> float:
    """The q-th percentile of `times`, interpolated between the two nearest samples."""
    ordered = sorted(times)
    place = (len(ordered) - 1) * q / 100
    low = int(place)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (place - low)


def _kwargs(change: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in change.items())


if __name__ == "__main__":
    raise SystemExit(main())
