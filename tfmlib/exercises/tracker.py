"""Progress for self-study: every `check(...)` of a learner's answer is recorded in a small
local file, and `progress()` shows, per notebook, which exercises were passed, failed or not
yet tried.

    from tfmlib.exercises import progress
    progress()

Where: ~/.tfmlib/progress.json, or the file named by the environment variable
TFMLIB_PROGRESS; set it to an empty value to record nothing. Reset: `reset_progress()`
(or delete the file).

Recording must never break a check: a missing, corrupt or read-only file, or another kernel
writing at the same moment, costs at most this one record, never an exception. Only answers
handed in as the notebooks' `my_...` functions are recorded, so the deliberately wrong
attention that notebook 05 checks as a demo does not count as the learner's attempt.
"""
from __future__ import annotations

import html
import json
import os
import tempfile
import time
from dataclasses import dataclass

try:
    import fcntl  # POSIX: serialises writers from several kernels
except ImportError:  # Windows: os.replace alone keeps the file whole, a record may be lost
    fcntl = None

ENV_VAR = "TFMLIB_PROGRESS"
DEFAULT_PATH = os.path.join("~", ".tfmlib", "progress.json")
FORMAT = 1

# The notebook that teaches the exercises of each topic module of tfmlib.exercises.
NOTEBOOK_OF_TOPIC = {
    "shapes": "01_shapes", "tokenization": "02_tokenization", "embeddings": "03_embeddings",
    "masks": "04_masks", "attention": "05_attention", "multihead": "06_multihead",
    "sublayers": "07_sublayers", "encoder_decoder": "08_encoder_decoder", "adam": "09_adam",
    "training": "10_training",
    "language_model": "b1_language_model", "generation": "b2_generation",  # bonus
}


# Every exercise, by name: each topic module registers its own on import (through core).
REGISTRY: dict = {}


def register(exercise):
    if exercise.name in REGISTRY:
        raise ValueError(f"exercise {exercise.name!r} is registered twice")
    REGISTRY[exercise.name] = exercise
    return exercise


def progress_path() -> str | None:
    """The progress file's path, or None when recording is switched off (TFMLIB_PROGRESS="")."""
    path = os.environ.get(ENV_VAR, DEFAULT_PATH)
    return os.path.expanduser(path) if path else None


def notebook_of(exercise) -> str:
    """The notebook an exercise belongs to, from the topic module that registered it."""
    topic = exercise.make_cases.__module__.rsplit(".", 1)[-1]
    return NOTEBOOK_OF_TOPIC.get(topic, topic)


def is_learners_answer(fn) -> bool:
    """True for the notebooks' answers: a `my_...` function, or a tuple of them (Adam)."""
    functions = fn if isinstance(fn, tuple) else (fn,)
    return all(getattr(f, "__name__", "").startswith("my_") for f in functions)


def record(result, fn) -> None:
    """Add the result of checking the learner's `fn` to the progress file. Never raises."""
    try:
        path = progress_path()
        if path is None or result.status == "not attempted":  # running the stub says nothing
            return
        if not is_learners_answer(fn) or result.name not in REGISTRY:
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with _locked(path):
            entries = _read(path)
            previous = entries.get(result.name, {})
            entries[result.name] = {
                **result.as_dict(),
                "ever_passed": bool(result) or previous.get("ever_passed", False),
                "runs": previous.get("runs", 0) + 1,
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            _write(path, entries)
    except Exception:  # a full disk, a read-only home, a file another program broke: skip it
        pass


def _read(path: str) -> dict:
    """The recorded exercises; {} when the file is missing or is not ours (corrupt, old)."""
    try:
        with open(path, encoding="utf-8") as file:
            data = json.load(file)
        exercises = data["exercises"] if data.get("format") == FORMAT else {}
        return exercises if isinstance(exercises, dict) else {}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


def _write(path: str, entries: dict) -> None:
    """Write to a temporary file beside `path`, then rename: a reader never sees half a file."""
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".progress-")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            json.dump({"format": FORMAT, "exercises": entries}, file, indent=1, sort_keys=True)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


class _locked:
    """An exclusive lock on `path + ".lock"` for one read-modify-write (POSIX only)."""

    def __init__(self, path: str):
        self.lock_path = path + ".lock"
        self.file = None

    def __enter__(self):
        if fcntl is not None:
            self.file = open(self.lock_path, "a")
            fcntl.flock(self.file, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if self.file is not None:
            self.file.close()  # closing releases the lock


# ---- the view ---------------------------------------------------------------------------------

_MARK = {"passed": ("PASS", "#1e7e34"), "failed": ("FAIL", "#b3261e"),
         "not tried": ("TODO", "#5f6368")}


@dataclass
class Row:
    notebook: str
    exercise: str
    state: str     # "passed" (at least once), "failed" (tried, never passed) or "not tried"
    note: str      # the last check's message for a failed exercise, else ""


@dataclass
class Progress:
    """What `progress()` returns: one row per exercise, shown as a table in a notebook."""
    path: str | None
    rows: list[Row]

    def counts(self) -> dict[str, int]:
        return {state: sum(row.state == state for row in self.rows) for state in _MARK}

    def _summary(self) -> str:
        counts = self.counts()
        where = f"recorded in {self.path}" if self.path else f"recording is off ({ENV_VAR} is empty)"
        return (f"{counts['passed']} of {len(self.rows)} exercises passed at least once, "
                f"{counts['failed']} tried but never passed, {counts['not tried']} not tried yet ({where})")

    def __str__(self) -> str:
        lines = [self._summary()]
        for index, row in enumerate(self.rows):
            notebook = row.notebook if index == 0 or self.rows[index - 1].notebook != row.notebook else ""
            line = f"{notebook:<20}{row.exercise:<32}{_MARK[row.state][0]}"
            lines.append((line + "  " + row.note) if row.note else line)
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        cells = []
        for row in self.rows:
            tag, colour = _MARK[row.state]
            cells.append(f"<tr><td>{html.escape(row.notebook)}</td><td><code>{html.escape(row.exercise)}"
                         f"</code></td><td style='color:{colour}'><b>{tag}</b></td>"
                         f"<td style='text-align:left'>{html.escape(row.note)}</td></tr>")
        return (f"<p>{html.escape(self._summary())}</p><table><tr><th>notebook</th><th>exercise</th>"
                f"<th>ever passed?</th><th>the last check said (if never passed)</th></tr>{''.join(cells)}</table>")


def progress() -> Progress:
    """Every exercise of the course, per notebook: passed (at least once), failed, or not tried."""
    path = progress_path()
    entries = _read(path) if path else {}
    rows = []
    for name, exercise in REGISTRY.items():
        entry = entries.get(name)
        if not isinstance(entry, dict):
            state, note = "not tried", ""
        elif entry.get("ever_passed"):
            state, note = "passed", ""
        else:
            state, note = "failed", str(entry.get("message", ""))
        rows.append(Row(notebook_of(exercise), name, state, note))
    rows.sort(key=lambda row: row.notebook)  # stable: each notebook keeps its exercises' order
    return Progress(path, rows)


def reset_progress() -> None:
    """Forget every recorded check: deletes the progress file (nothing happens if there is none)."""
    path = progress_path()
    if path is not None and os.path.exists(path):
        os.remove(path)
