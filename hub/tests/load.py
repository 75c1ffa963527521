"""Load test: N students at once on one JupyterHub (the hub test's, on 127.0.0.1), for N given on
the command line (`make hub-load` runs 5, 10, 20), each class on a fresh hub. Writes hub/LOAD.md.

Per class, all students at once, as at the start of a lesson:
  login     account, server start, nbgitpuller pull of the course, a kernel, the imports of
            notebook 10: the time until the whole class is ready;
  memory    each student's server and kernel (RSS, PSS, anonymous) after the imports, and after
            notebook 10 up to its trained model's widget (training 500 steps included, with the
            lab's runs started beside it on two worker processes, as the lesson starts them);
  check     a right answer to `shift_right` checked, REPEATS times per student: p50 and p95;
  redraw    the widget of notebook 10 (the trained model's cross-attention) moved to another
            example, REPEATS times per student, until the kernel is idle: p50 and p95.
Every request is to 127.0.0.1; the whole run is bounded by each step's timeout.
"""
from __future__ import annotations

import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from classroom import REPO, Hub, Student, bare_course_repo, code_cells, memory_of

REPEATS = 5
NOTEBOOK = REPO / "notebooks" / "10_training.ipynb"
WIDGET = "ReverseExplorer("  # the cell that builds the trained model's widget: the lesson runs up to it
SHIFT_RIGHT = '''
def my_shift_right(tgt):
    return tgt[:, :-1], tgt[:, 1:]

check("shift_right", my_shift_right)
'''


def _through(notebook: Path, marker: str) -> int:
    """How many cells, from the first, reach the first code cell whose source holds `marker`."""
    cells = json.loads(notebook.read_text())["cells"]
    return 1 + next(i for i, c in enumerate(cells) if c["cell_type"] == "code" and marker in "".join(c["source"]))


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def lesson(student: Student, repo: Path, started: float) -> dict:
    await student.create()
    server = await student.start_server()
    await student.pull(str(repo), NOTEBOOK.name)
    kernel = await student.open_kernel()
    cells = code_cells(NOTEBOOK, upto=_through(NOTEBOOK, WIDGET))  # through the trained model's widget
    await kernel.execute("import os; os.chdir(os.path.expanduser('~/course/notebooks'))")
    for source in cells[:2]:  # the setup cell and the imports
        result = await kernel.execute(source)
        assert result.status == "ok", result.error
    ready = time.perf_counter() - started
    return {"student": student, "kernel": kernel, "cells": cells[2:], "server": server, "ready": ready}


async def work(record: dict, hub: Hub) -> None:
    kernel, name = record["kernel"], record["student"].name
    record["memory_imports"] = memory_of(hub.marker, name)
    widgets = []
    for source in record["cells"]:
        result = await kernel.execute(source, timeout=900)
        assert result.status == "ok", f"{name}: {result.error}"
        widgets += result.comm_opens()
    record["memory_trained"] = memory_of(hub.marker, name)
    record["check"] = []
    for _ in range(REPEATS):
        result = await kernel.execute(SHIFT_RIGHT)
        assert result.stdout.startswith("[PASS] shift_right"), result.stdout + result.error
        record["check"].append(result.seconds)
    selection = next(w for w in widgets if "_options_labels" in w["data"]["state"])
    options = len(selection["data"]["state"]["_options_labels"])
    record["redraw"] = []
    for step in range(REPEATS):
        moved = await kernel.set_widget(selection["comm_id"], {"index": (step + 1) % options})
        record["redraw"].append(moved.seconds)
    await kernel.shutdown()


async def run_class(hub: Hub, repo: Path, size: int) -> list[dict]:
    started = time.perf_counter()
    records = await asyncio.gather(*(lesson(Student(hub, f"s{i:03d}"), repo, started) for i in range(size)))
    await asyncio.gather(*(work(r, hub) for r in records))
    return records


def summary(size: int, records: list[dict], seconds: float) -> dict:
    per = lambda key, field: [r[key][field] for r in records]
    checks = [t for r in records for t in r["check"]]
    redraws = [t for r in records for t in r["redraw"]]
    return {
        "students": size, "login_all": max(r["ready"] for r in records),
        "server_p50": statistics.median(r["server"] for r in records),
        "imports_rss": statistics.mean(per("memory_imports", "rss")),
        "imports_pss": statistics.mean(per("memory_imports", "pss")),
        "imports_anon": statistics.mean(per("memory_imports", "anon")),
        "trained_rss": statistics.mean(per("memory_trained", "rss")),
        "trained_pss": statistics.mean(per("memory_trained", "pss")),
        "trained_anon": statistics.mean(per("memory_trained", "anon")),
        "trained_anon_max": max(per("memory_trained", "anon")),
        "check_p50": percentile(checks, 50), "check_p95": percentile(checks, 95),
        "redraw_p50": percentile(redraws, 50), "redraw_p95": percentile(redraws, 95),
        "whole": seconds,
    }


def write_report(rows: list[dict], load_before: tuple, load_after: tuple, path: Path) -> None:
    lines = [
        "# Load test: a class on one JupyterHub",
        "",
        f"`make hub-load` (hub/tests/load.py), {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GiB; load average "
        f"{load_before[0]:.1f} at the start and {load_after[0]:.1f} at the end.",
        "",
        "Every student at once: log in (server, nbgitpuller pull, kernel, notebook 10's imports), then",
        "notebook 10 through its trained model's widget (500 training steps, the lab's runs started "
        "beside them on two worker processes as the lesson does), then "
        f"{REPEATS} checked exercises (`shift_right`, right answer) and {REPEATS} widget redraws each.",
        "Memory per student is their server plus kernel; MB. Anonymous memory is the student's own;",
        "RSS counts libtorch's shared pages once per student; PSS splits them between the students.",
        "",
        "| students | whole class logged in | server start p50 | RSS / PSS / anon after imports | "
        "RSS / PSS / anon after training (anon max) | check p50 / p95 | redraw p50 / p95 | run |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "failed" in r:
            lines.append(f"| {r['students']} | did not complete: {r['failed']} |||||||")
            continue
        lines.append(
            f"| {r['students']} | {r['login_all']:.0f} s | {r['server_p50']:.0f} s | "
            f"{r['imports_rss']:.0f} / {r['imports_pss']:.0f} / {r['imports_anon']:.0f} | "
            f"{r['trained_rss']:.0f} / {r['trained_pss']:.0f} / {r['trained_anon']:.0f} ({r['trained_anon_max']:.0f}) | "
            f"{r['check_p50'] * 1000:.0f} / {r['check_p95'] * 1000:.0f} ms | "
            f"{r['redraw_p50'] * 1000:.0f} / {r['redraw_p95'] * 1000:.0f} ms | {r['whole']:.0f} s |")
    path.write_text("\n".join(lines) + "\n")


def main(sizes: list[int]) -> None:
    rows, load_before = [], os.getloadavg()
    for size in sizes:
        workdir = Path(tempfile.mkdtemp(prefix="hub-load-"))
        hub = Hub(workdir, workdir / "exchange")
        try:
            repo = bare_course_repo(workdir)
            hub.start()
            start = time.perf_counter()
            try:
                records = asyncio.run(run_class(hub, repo, size))
                rows.append(summary(size, records, time.perf_counter() - start))
            except Exception as error:  # a class this machine could not hold is a result too
                rows.append({"students": size, "failed": f"{type(error).__name__}: {str(error).splitlines()[0]}"})
                print(f"the hub's log, last lines:\n{hub.tail(60)}", file=sys.stderr, flush=True)
            print(rows[-1], flush=True)
        finally:
            stray = hub.stop()
            shutil.rmtree(workdir)
        if stray:
            sys.exit(f"processes left running after the hub stopped (killed): {stray}")
    write_report(rows, load_before, os.getloadavg(), REPO / "hub" / "LOAD.md")


if __name__ == "__main__":
    main([int(n) for n in sys.argv[1:]] or [5, 10, 20])
