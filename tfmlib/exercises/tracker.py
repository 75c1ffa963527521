"""Progress for self-study: every `check(...)` of a learner's answer is recorded in a small
local file, and `progress()` shows, per notebook, which exercises were passed, failed or not
yet tried.

    from tfmlib.exercises import progress
    progress()            # labels in Chinese in notebooks/zh (the kernel's folder), else English
    progress(lang="zh")   # or "en": either language anywhere

Where: ~/.tfmlib/progress.json, or the file named by the environment variable
TFMLIB_PROGRESS; set it to an empty value to record nothing. Reset: `reset_progress()`
(or delete the file).

Recording must never break a check: a missing, corrupt or read-only file, or another kernel
writing at the same moment, costs at most this one record, never an exception. Only answers
handed in as the notebooks' `my_...` functions are recorded, so the deliberately wrong
attention that notebook 05 checks as a demo does not count as the learner's attempt.
"""
from __future__ import annotations

import contextlib
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


@contextlib.contextmanager
def _locked(path: str):
    """An exclusive lock on `path + ".lock"` for one read-modify-write (POSIX only)."""
    if fcntl is None:
        yield
        return
    with open(path + ".lock", "a") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


# ---- the view ---------------------------------------------------------------------------------

_COLOUR = {"passed": "#1e7e34", "failed": "#b3261e", "not tried": "#5f6368"}

# What the view says, per language. Its words follow docs/glossary-zh.md (exercise 练习); the
# note, the last check's own message, stays English in both, like every check message.
_LABELS = {
    "en": {
        "tag": {"passed": "PASS", "failed": "FAIL", "not tried": "TODO"},
        "summary": "{passed} of {total} exercises passed at least once, {failed} tried but never passed, "
                   "{not_tried} not tried yet ({where})",
        "recorded": "recorded in {path}",
        "off": "recording is off ({var} is empty)",
        "headers": ("notebook", "exercise", "ever passed?", "the last check said (if never passed)"),
    },
    "zh": {
        "tag": {"passed": "通过", "failed": "未通过", "not tried": "未尝试"},
        "summary": "共 {total} 个练习：{passed} 个至少通过过一次，{failed} 个尝试过但从未通过，"
                   "{not_tried} 个尚未尝试（{where}）",
        "recorded": "记录在 {path}",
        "off": "记录已关闭：{var} 为空",
        "headers": ("笔记本", "练习", "是否通过过", "最近一次检查给出的提示（从未通过时）"),
    },
}
LANGUAGES = tuple(_LABELS)


def default_language() -> str:
    """"zh" when Python runs in the Chinese edition's folders (notebooks/zh, notebooks/zh/bonus), else
    "en": Jupyter starts a notebook's kernel in the notebook's folder."""
    try:
        parts = os.path.normpath(os.getcwd()).split(os.sep)
    except OSError:  # the working folder was deleted under the kernel
        return "en"
    return "zh" if any(a == "notebooks" and b == "zh" for a, b in zip(parts, parts[1:])) else "en"


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
    lang: str = "en"   # the labels' language, one of LANGUAGES

    def counts(self) -> dict[str, int]:
        return {state: sum(row.state == state for row in self.rows) for state in _COLOUR}

    def _summary(self) -> str:
        labels, counts = _LABELS[self.lang], self.counts()
        where = labels["recorded"].format(path=self.path) if self.path else labels["off"].format(var=ENV_VAR)
        return labels["summary"].format(passed=counts["passed"], total=len(self.rows), failed=counts["failed"],
                                        not_tried=counts["not tried"], where=where)

    def __str__(self) -> str:
        tags = _LABELS[self.lang]["tag"]
        lines = [self._summary()]
        for index, row in enumerate(self.rows):
            notebook = row.notebook if index == 0 or self.rows[index - 1].notebook != row.notebook else ""
            line = f"{notebook:<20}{row.exercise:<32}{tags[row.state]}"
            lines.append((line + "  " + row.note) if row.note else line)
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        labels = _LABELS[self.lang]
        cells = [f"<tr><td>{html.escape(row.notebook)}</td><td><code>{html.escape(row.exercise)}"
                 f"</code></td><td style='color:{_COLOUR[row.state]}'><b>{labels['tag'][row.state]}</b></td>"
                 f"<td style='text-align:left'>{html.escape(row.note)}</td></tr>" for row in self.rows]
        headers = "".join(f"<th>{html.escape(header)}</th>" for header in labels["headers"])
        return f"<p>{html.escape(self._summary())}</p><table><tr>{headers}</tr>{''.join(cells)}</table>"


def progress(lang: str | None = None) -> Progress:
    """Every exercise of the course, per notebook: passed (at least once), failed, or not tried.

    lang: the labels' language, "en" or "zh"; by default "zh" in the Chinese edition's folders
    (notebooks/zh), where Jupyter runs its notebooks' kernels, else "en".
    """
    if lang is None:
        lang = default_language()
    elif lang not in LANGUAGES:
        raise ValueError(f"progress(lang={lang!r}): lang must be one of {', '.join(map(repr, LANGUAGES))}, "
                         "or left out for the language of the folder the notebook runs in")
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
    return Progress(path, rows, lang)


def reset_progress() -> None:
    """Forget every recorded check: deletes the progress file (nothing happens if there is none)."""
    path = progress_path()
    if path is not None and os.path.exists(path):
        os.remove(path)
