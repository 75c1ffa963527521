"""Progress for self-study: check() records each answer in a small file, progress() shows it.

Every test points TFMLIB_PROGRESS at its own temporary file (tests/conftest.py also points it
away from the user's home for the whole run).
"""
from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import nbformat
import pytest
import torch

import tfmlib
from tfmlib.exercises import REGISTRY, check, progress, reset_progress, tracker

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def progress_file(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "deep" / "folder" / "progress.json"   # check must create the folders
    monkeypatch.setenv("TFMLIB_PROGRESS", str(path))
    return path


def my_padding_mask(token_ids, pad_id):
    return (token_ids != pad_id)[:, None, None, :]


def my_causal_mask(seq_len):
    return torch.ones(seq_len, seq_len, dtype=torch.bool).triu()[None, None]   # the future, not the past


def my_target_mask(token_ids, pad_id):
    ...  # your code here


def states(view) -> dict[str, str]:
    return {row.exercise: row.state for row in view.rows}


def test_passed_failed_and_not_tried_per_exercise(progress_file):
    check("padding_mask", my_padding_mask)
    check("causal_mask", my_causal_mask)
    check("target_mask", my_target_mask)   # the untouched stub: not an attempt
    view = progress()
    assert states(view)["padding_mask"] == "passed"
    assert states(view)["causal_mask"] == "failed"
    assert states(view)["target_mask"] == "not tried"
    assert set(states(view)) == set(REGISTRY)
    assert view.counts() == {"passed": 1, "failed": 1, "not tried": len(REGISTRY) - 2}
    text = str(view)
    assert re.search(r"^04_masks\s+padding_mask\s+PASS$", text, re.M), text
    assert re.search(r"^\s+causal_mask\s+FAIL  looks like a classic mistake", text, re.M), text
    assert f"1 of {len(REGISTRY)} exercises passed" in text.splitlines()[0]
    assert "<td><code>causal_mask</code></td>" in view._repr_html_()


def test_the_view_says_that_passed_means_passed_once_and_the_note_is_the_last_check(progress_file):
    """A learner who passed and then broke the answer still sees PASS (progress is what was
    achieved); the table and the summary say so, rather than calling it "the last check"."""
    def my_broken_padding_mask(token_ids, pad_id):
        return token_ids != pad_id

    check("padding_mask", my_padding_mask)
    check("padding_mask", my_broken_padding_mask)
    check("causal_mask", my_causal_mask)
    view = progress()
    assert states(view)["padding_mask"] == "passed"
    assert "passed at least once, 1 tried but never passed" in str(view)
    page = view._repr_html_()
    assert "<th>ever passed?</th>" in page and "<th>the last check said (if never passed)</th>" in page


def tags_in_html(page: str) -> list[str]:
    """The state tag of every row of the HTML table, in order."""
    return re.findall(r"<td style='color:#[0-9a-f]{6}'><b>([^<]*)</b></td>", page)


def test_the_chinese_view_has_chinese_labels_and_the_right_counts(progress_file):
    """Issue 34: in the Chinese edition the summary, the tags and the headers are Chinese (the
    glossary's 练习 for exercise); the note is the check's own message, English in both."""
    check("padding_mask", my_padding_mask)
    check("causal_mask", my_causal_mask)
    total = len(REGISTRY)
    view = progress(lang="zh")
    text = str(view)
    assert text.splitlines()[0] == (f"共 {total} 个练习：1 个至少通过过一次，1 个尝试过但从未通过，"
                                    f"{total - 2} 个尚未尝试（记录在 {progress_file}）")
    assert re.search(r"^04_masks\s+padding_mask\s+通过$", text, re.M), text
    assert re.search(r"^\s+causal_mask\s+未通过  looks like a classic mistake", text, re.M), text
    assert re.search(r"^\s+target_mask\s+未尝试$", text, re.M), text
    assert not re.search(r"PASS|FAIL|TODO|exercises passed", text)
    page = view._repr_html_()
    assert ("<tr><th>笔记本</th><th>练习</th><th>是否通过过</th><th>最近一次检查给出的提示（从未通过时）</th></tr>"
            in page)
    tags = tags_in_html(page)
    assert len(tags) == total
    assert (tags.count("通过"), tags.count("未通过"), tags.count("未尝试")) == (1, 1, total - 2)
    assert f"<p>共 {total} 个练习：1 个至少通过过一次" in page and "looks like a classic mistake" in page
    assert "ever passed?" not in page and "PASS" not in page


def test_the_english_view_when_asked_for(progress_file, monkeypatch):
    monkeypatch.chdir(REPO / "notebooks" / "zh")        # the Chinese edition's folder, yet English asked
    check("causal_mask", my_causal_mask)
    view = progress(lang="en")
    total = len(REGISTRY)
    assert str(view).splitlines()[0].startswith(f"0 of {total} exercises passed at least once, 1 tried but "
                                                f"never passed, {total - 1} not tried yet (recorded in ")
    tags = tags_in_html(view._repr_html_())
    assert (tags.count("PASS"), tags.count("FAIL"), tags.count("TODO")) == (0, 1, total - 1)
    assert "<th>ever passed?</th>" in view._repr_html_()


def test_the_chinese_view_says_when_recording_is_off(monkeypatch):
    monkeypatch.setenv("TFMLIB_PROGRESS", "")
    assert "（记录已关闭：TFMLIB_PROGRESS 为空）" in str(progress(lang="zh"))


@pytest.mark.parametrize("folder, lang", [
    ("notebooks/zh", "zh"), ("notebooks/zh/bonus", "zh"),       # the Chinese edition, as stored
    ("notebooks", "en"), ("notebooks/bonus", "en"), (".", "en"),
])
def test_the_default_language_follows_the_working_folder(progress_file, monkeypatch, folder, lang):
    """Jupyter starts a kernel in its notebook's folder, so a Chinese notebook's progress() is Chinese."""
    monkeypatch.chdir(REPO / folder)
    view = progress()
    assert view.lang == lang
    summary = f"共 {len(REGISTRY)} 个练习：0 个" if lang == "zh" else f"0 of {len(REGISTRY)} exercises passed"
    assert str(view).startswith(summary), str(view).splitlines()[0]


def test_a_folder_called_zh_elsewhere_is_not_the_chinese_edition(progress_file, monkeypatch, tmp_path):
    """Only notebooks/zh is: a learner's own folder named zh (a user name, a course copy) is not."""
    (tmp_path / "zh" / "notebooks").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "zh" / "notebooks")
    assert progress().lang == "en"
    (tmp_path / "my-course" / "notebooks" / "zh").mkdir(parents=True)   # a clone under another name
    monkeypatch.chdir(tmp_path / "my-course" / "notebooks" / "zh")
    assert progress().lang == "zh"


def test_an_unknown_language_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"progress\(lang='fr'\): lang must be one of 'en', 'zh'"):
        progress(lang="fr")


def test_the_file_holds_the_machine_readable_result(progress_file):
    result = check("causal_mask", my_causal_mask)
    entry = json.loads(progress_file.read_text())["exercises"]["causal_mask"]
    assert {key: entry[key] for key in result.as_dict()} == result.as_dict()
    assert entry["passed"] is False and entry["status"] == "mistake" and entry["mistake"] == result.mistake
    assert entry["runs"] == 1 and entry["ever_passed"] is False


def test_a_pass_stays_passed_after_a_later_failure(progress_file):
    check("padding_mask", my_padding_mask)
    check("padding_mask", lambda ids, pad: None)   # not a my_ answer: not recorded at all
    def my_padding_mask_broken(token_ids, pad_id):
        return None
    check("padding_mask", my_padding_mask_broken)
    entry = json.loads(progress_file.read_text())["exercises"]["padding_mask"]
    assert entry["runs"] == 2 and entry["status"] == "failed" and entry["ever_passed"] is True
    assert states(progress())["padding_mask"] == "passed"


def test_only_the_learners_own_calls_are_recorded(progress_file):
    check("padding_mask", tfmlib.padding_mask)                               # not a my_ function
    check("padding_mask", my_padding_mask, REGISTRY["padding_mask"].make_cases())  # a test's own cases
    check("no_such_exercise", my_padding_mask)
    assert not progress_file.exists()


def test_each_exercise_is_shown_under_the_notebook_that_checks_it():
    checked = {}
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            for name in re.findall(r'^check\("(\w+)", \(?my_', cell.source, re.M):
                checked[name] = path.stem
    assert len(checked) >= 33
    assert {name: tracker.notebook_of(REGISTRY[name]) for name in checked} == checked


def test_a_corrupt_file_is_replaced_and_never_breaks_a_check(progress_file):
    progress_file.parent.mkdir(parents=True)
    for garbage in ("{not json", "[1, 2]", '{"format": 1, "exercises": [3]}', ""):
        progress_file.write_text(garbage)
        assert states(progress())["padding_mask"] == "not tried"
        assert check("padding_mask", my_padding_mask)
        assert states(progress())["padding_mask"] == "passed"


def test_a_read_only_folder_never_breaks_a_check(progress_file, monkeypatch):
    check("padding_mask", my_padding_mask)
    def refuse(*args, **kwargs):   # what a read-only folder answers (root would not see it)
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(tracker.tempfile, "mkstemp", refuse)
    before = progress_file.read_text()
    assert not check("causal_mask", my_causal_mask)
    assert progress_file.read_text() == before


def test_an_unwritable_path_never_breaks_a_check_nor_changes_its_output(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("TFMLIB_PROGRESS", "")
    expected = [str(check("causal_mask", my_causal_mask)), check("padding_mask", my_padding_mask)._repr_html_()]
    monkeypatch.setenv("TFMLIB_PROGRESS", str(blocker / "progress.json"))   # its folder is a file
    assert [str(check("causal_mask", my_causal_mask)),
            check("padding_mask", my_padding_mask)._repr_html_()] == expected
    assert states(progress())["padding_mask"] == "not tried"


def test_an_empty_variable_switches_recording_off(tmp_path, monkeypatch):
    monkeypatch.setenv("TFMLIB_PROGRESS", "")
    monkeypatch.setenv("HOME", str(tmp_path))
    check("padding_mask", my_padding_mask)
    assert tracker.progress_path() is None and list(tmp_path.iterdir()) == []
    assert "recording is off" in str(progress())


def test_the_default_file_is_in_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("TFMLIB_PROGRESS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert tracker.progress_path() == str(tmp_path / ".tfmlib" / "progress.json")


def test_concurrent_writers_lose_no_record(progress_file):
    class Result:   # a stand-in for CheckResult: record() only needs these
        def __init__(self, name):
            self.name, self.status = name, "failed"
        def __bool__(self):
            return False
        def as_dict(self):
            return {"name": self.name, "status": self.status}

    names, rounds = sorted(REGISTRY)[:8], 10

    def my_answer():
        pass

    def writer(name):
        for _ in range(rounds):
            tracker.record(Result(name), my_answer)

    threads = [threading.Thread(target=writer, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    entries = json.loads(progress_file.read_text())["exercises"]
    assert {name: entries[name]["runs"] for name in names} == {name: rounds for name in names}


def test_reset_forgets_everything(progress_file):
    check("padding_mask", my_padding_mask)
    reset_progress()
    assert not progress_file.exists()
    assert progress().counts()["passed"] == 0
    reset_progress()   # nothing to delete: no error
