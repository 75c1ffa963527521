"""Timing helpers: interleaved comparisons with torch.utils.benchmark.Timer, and the machine.

Two implementations of the same computation are timed in the same process,
round by round and in alternating order (A B, then B A, ...), so that a burst of
load from another process hits both about equally. Each round times a block of
calls with `Timer.timeit(number)`; the figure reported is the median over rounds.
"""
from __future__ import annotations

import ctypes
import datetime
import os
import platform
import statistics
import time
from dataclasses import dataclass, field

import torch
from torch.utils.benchmark import Timer


@dataclass(frozen=True)
class Settings:
    """How long to measure: the full run and `--quick` differ only here and in the sizes."""
    rounds: int = 7          # timed blocks per implementation; the median is reported
    block_s: float = 0.2     # aim for blocks of about this many seconds (at least one call)
    warmup: int = 2          # untimed calls first (allocator, kernels picked, caches)
    max_s: float = 20.0      # about the longest one comparison may take (fewer rounds, >= 3)
    quick: bool = False


FULL = Settings()
QUICK = Settings(rounds=3, block_s=0.02, warmup=1, max_s=2.0, quick=True)


@dataclass
class Timing:
    """Median seconds per call, and the spread of the rounds around it."""
    median: float
    low: float     # fastest round
    high: float    # slowest round
    rounds: int
    number: int    # calls per round

    @property
    def spread(self) -> float:
        """(slowest - fastest) / median: how noisy the rounds were."""
        return (self.high - self.low) / self.median if self.median > 0 else float("nan")


def compare(functions: dict, settings: Settings = FULL) -> dict[str, Timing]:
    """Time every callable of `functions` (name -> no-argument callable), interleaved.

    All callables get the same number of calls per block (set by the slowest),
    so each round is the same amount of work for every implementation.
    """
    threads = torch.get_num_threads()
    timers = {name: Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
              for name, fn in functions.items()}
    per_call = {}
    for name, fn in functions.items():
        for _ in range(settings.warmup):
            fn()
        start = time.perf_counter()
        fn()
        per_call[name] = time.perf_counter() - start
    number = max(1, round(settings.block_s / max(max(per_call.values()), 1e-9)))
    # Slow calls (seconds each) get fewer rounds, so the whole run stays within minutes.
    round_s = number * sum(per_call.values())
    rounds = max(min(settings.rounds, 3), min(settings.rounds, int(settings.max_s / round_s)))
    names = list(functions)
    samples = {name: [] for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            samples[name].append(timers[name].timeit(number).median)
    return {name: Timing(statistics.median(s), min(s), max(s), len(s), number)
            for name, s in samples.items()}


@dataclass
class Machine:
    cpu: str
    cores: int
    threads: int
    torch: str
    python: str
    platform: str
    date: str
    load_start: tuple = ()
    load_end: tuple = ()
    extra: dict = field(default_factory=dict)

    @property
    def shared(self) -> bool:
        """The load average (1 min) above the number of cores, at start or end: others were busy."""
        loads = [self.load_start[0]] if self.load_start else []
        loads += [self.load_end[0]] if self.load_end else []
        return any(load > 0.75 * self.cores for load in loads)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def keep_freed_memory() -> str:
    """Ask glibc's malloc to keep freed memory for reuse instead of returning it to the OS.

    By default glibc gives large blocks back (munmap, or trimming the heap) and adapts those
    thresholds to what the program has freed so far, so a call that allocates big temporaries
    page-faults in fresh memory, more or less often depending on which benchmarks ran before.
    Pinning the allocator makes each figure independent of the order of the benchmarks.
    -> a description of what was done, for RESULTS.md.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_max = -1, -4          # from glibc's malloc.h
        ok = libc.mallopt(m_mmap_max, 0) == 1 and libc.mallopt(m_trim_threshold, 2**31 - 1) == 1
    except (OSError, AttributeError):
        ok = False
    if not ok:
        return "allocator left as it is (no glibc `mallopt` here)"
    return ("glibc malloc told to keep freed memory (`mallopt`: M_MMAP_MAX=0, "
            "M_TRIM_THRESHOLD=2^31-1; `--malloc default` leaves it alone)")


def load_average() -> tuple:
    try:
        return tuple(round(x, 2) for x in os.getloadavg())
    except (AttributeError, OSError):
        return ()


def machine() -> Machine:
    return Machine(cpu=cpu_model(), cores=os.cpu_count() or 0, threads=torch.get_num_threads(),
                   torch=torch.__version__, python=platform.python_version(),
                   platform=platform.platform(terse=True),
                   date=datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
                   load_start=load_average())


@dataclass
class Comparison:
    """One tfmlib figure beside PyTorch's, measured interleaved in the same process."""
    group: str
    what: str          # e.g. "forward", "forward+backward"
    size: str          # e.g. "L=256"
    reference: str     # the PyTorch call it is compared with
    tfmlib: Timing
    torch: Timing

    @property
    def ratio(self) -> float:
        """tfmlib / PyTorch: above 1 means tfmlib is slower."""
        return self.tfmlib.median / self.torch.median


@dataclass
class Measured:
    """A figure with a target but no PyTorch counterpart (a notebook, a widget redraw)."""
    group: str
    what: str
    seconds: float
    target_s: float | None = None
    note: str = ""

    @property
    def meets_target(self) -> bool | None:
        return None if self.target_s is None else self.seconds <= self.target_s
