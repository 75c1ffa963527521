"""`make sweep`: train what notebooks 10, b1 and b2 train, on many seeds and two CPU kernel
settings, and store the raw numbers their claims rest on in tfmlib/data/sweep.json.

A trained result depends on the seed and, through the order in which floats are summed, on
the CPU. One run cannot carry "on every seed"; the sweep can: the claims (tfmlib.claims) are
functions of its stored numbers, checked by tests/test_claims.py in `make test` without
training, and each notebook shows the learner's own run against the sweep's range.

Each run is a fresh process (tests/claim_runs.py PART SEED) on one thread, with the kernel
setting in its environment: "native" (the CPU's own vector kernels) and "emulated"
(ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE, the plain C++ kernels and MKL's
reproducible mode, a stand-in for another CPU). The seeds SWEEP_SEEDS set the ranges; the
HELD_BACK seeds are never used for that, only to count how many of their runs a range
misses (tfmlib.claims.held_back_report), an estimate of how often a new seed or CPU would.

    python tools/sweep.py [--workers 2] [--seeds 20] [--held-back 4] [--parts reverse lab language_model]

Every finished run is appended to build/sweep/runs.jsonl at once, so an interrupted sweep
resumes where it stopped (without that file, it keeps the runs of the stored JSON and trains
only the missing ones: delete both to start afresh, e.g. after a change that moves trained
results); the JSON is written at the end, with the command, the commit, the CPU, torch's
version and the wall time (also appended to benchmarks/SWEEP.md).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "tfmlib" / "data" / "sweep.json"
PROGRESS = ROOT / "build" / "sweep" / "runs.jsonl"
TIMES = ROOT / "benchmarks" / "SWEEP.md"
PARTS = ("reverse", "lab", "language_model")
SETTINGS = {"native": {}, "emulated": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}}
#: One thread per run: bit-reproducible on one machine, and what notebooks 10 and b2 set.
THREADS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _order(seeds: list[int], sweep_seeds: int) -> list[int]:
    """The seeds in the order they are trained: a held-back seed after every few sweep seeds, so
    that a sweep stopped early (and written with --write-only) still has some of each."""
    sweep, held_back = seeds[:sweep_seeds], seeds[sweep_seeds:]
    every = max(1, len(sweep) // max(1, len(held_back)))
    order = []
    for i, seed in enumerate(sweep):
        order.append(seed)
        if (i + 1) % every == 0 and held_back:
            order.append(held_back.pop(0))
    return order + held_back


def _environment(setting: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "TFMLIB_RUN_CACHE")}
    return env | THREADS | SETTINGS[setting]


def _run(part: str, seed: int, setting: str) -> dict:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "claim_runs.py"), part, str(seed)],
                          env=_environment(setting), capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{part} seed {seed} {setting} failed:\n{done.stderr[-3000:]}")
    return {"part": part, "seed": seed, "setting": setting, "seconds": time.perf_counter() - started,
            "numbers": json.loads(done.stdout.strip().splitlines()[-1])}


def _capability(setting: str) -> str:
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    return subprocess.run([sys.executable, "-c", code], env=_environment(setting), capture_output=True,
                          text=True, check=True).stdout.strip()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _commit() -> str:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    # the sweep's own outputs do not count: a resumed sweep has rewritten them already
    outputs = [f":!{path.relative_to(ROOT)}" for path in (OUTPUT, TIMES)]
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *outputs],
                           cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return head + (" (with uncommitted changes)" if dirty else "")


def _rounded(value):
    """Floats to 6 significant digits: the file stays small, and no claim needs more."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=20, help="seeds 0 .. N-1 set the ranges")
    parser.add_argument("--held-back", type=int, default=4, help="the next seeds, only counted")
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--write-only", action="store_true",
                        help="train nothing: write the JSON from the runs finished so far")
    args = parser.parse_args(argv)
    seeds = list(range(args.seeds + args.held_back))
    done = {}
    if PROGRESS.exists():                                   # resume: keep the finished runs
        for line in PROGRESS.read_text().splitlines():
            run = json.loads(line)
            done[run["part"], run["seed"], run["setting"]] = run
    elif OUTPUT.exists():                                   # or those of the stored sweep
        stored = json.loads(OUTPUT.read_text())
        for part, settings in stored["runs"].items():
            for setting, runs in settings.items():
                for seed, numbers in runs.items():
                    done[part, int(seed), setting] = {"part": part, "seed": int(seed), "setting": setting,
                                                      "seconds": 0.0, "numbers": numbers}
    jobs = [(part, seed, setting) for seed in _order(seeds, args.seeds) for setting in args.settings
            for part in args.parts if (part, seed, setting) not in done and not args.write_only]
    print(f"{len(done)} runs kept from {PROGRESS.relative_to(ROOT)}; {len(jobs)} to train", flush=True)
    PROGRESS.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with ThreadPoolExecutor(args.workers) as pool, PROGRESS.open("a") as progress:
        for run in pool.map(lambda job: _run(*job), jobs):
            progress.write(json.dumps(run) + "\n")
            progress.flush()
            done[run["part"], run["seed"], run["setting"]] = run
            print(f"{run['part']:15} seed {run['seed']:2} {run['setting']:9} {run['seconds']:6.1f} s"
                  f"   ({time.perf_counter() - started:6.0f} s so far)", flush=True)
    write(done, seeds, args, None if args.write_only else time.perf_counter() - started)


def write(done: dict, seeds: list[int], args, wall: float | None) -> None:
    """The sweep's JSON from the finished runs: for each setting, the seeds whose every part is done
    (an interrupted sweep, written with --write-only, says how many it has)."""
    complete = {setting: [s for s in seeds if all((part, s, setting) in done for part in args.parts)]
                for setting in args.settings}
    runs = {part: {setting: {str(seed): _rounded(done[part, seed, setting]["numbers"])
                             for seed in complete[setting]} for setting in args.settings}
            for part in args.parts}
    cpu_seconds = sum(run["seconds"] for run in done.values())
    sweep = {"command": "python tools/sweep.py " + " ".join(sys.argv[1:]),
             "commit": _commit(), "date": datetime.date.today().isoformat(), "cpu": _cpu_model(),
             "torch": __import__("torch").__version__, "threads": 1,
             "settings": {name: {"env": env, "capability": _capability(name)} for name, env in SETTINGS.items()
                          if name in args.settings},
             "seeds": [s for s in seeds[:args.seeds] if any(s in c for c in complete.values())],
             "held_back_seeds": [s for s in seeds[args.seeds:] if any(s in c for c in complete.values())],
             "run_seconds": round(cpu_seconds), "runs": runs}
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(json.dumps(sweep, separators=(",", ":")) + "\n")
    counts = ", ".join(f"{setting} {len(seeds_done)}" for setting, seeds_done in complete.items())
    print(f"wrote {OUTPUT.relative_to(ROOT)}: seeds done {counts}; {cpu_seconds:.0f} s of training")
    if wall is not None:                          # the wall time of this call, in benchmarks/SWEEP.md
        with TIMES.open("a") as times:
            times.write(f"| {sweep['date']} | {sweep['cpu']} | {args.workers} | {counts} "
                        f"| {wall:.0f} s | {cpu_seconds:.0f} s |\n")

if __name__ == "__main__":
    main()
