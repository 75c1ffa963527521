"""Every notebook, opened in JupyterLab in a real (headless) Chromium, as a learner would.

For each `notebooks/NN_*.ipynb` and `notebooks/bonus/*.ipynb` the test:

1. opens it in JupyterLab (one tab, started once in a fresh workspace, serves the tests in
   turn: the documents of the test before are closed and their kernels stopped) and waits until
   the notebook's kernel is connected and idle, accepting a kernel-selection dialog if one appears;
2. clears the outputs and runs all cells (`notebook:run-all-cells`), waits until the
   kernel is idle and every code cell has an execution count, and checks in the notebook
   model that no cell produced an error (cells tagged `raises-exception` excepted);
3. moves the first widget control the notebook shows, with the keyboard or the mouse
   (a slider handle with ArrowRight, else a dropdown option, else text + Enter in a text
   box, else a toggle button, checkbox or radio button) and waits until the plot (the
   first image) or the text of the widget's Output area changes;
4. always saves a screenshot to tests/browser/screenshots/NAME.png, also when it fails.

One more check opens a notebook without running it and makes sure that the first
"predict, then run" answer (a cell tagged `predict-answer`) is shown folded, its answer out of
sight under the question, and that one click on the folded output shows it
(screenshots predict_NAME_collapsed.png and predict_NAME_expanded.png).

The server and browser come from conftest.py; the notebooks run on copies.
"""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
# Same folder as conftest.py's `notebooks_dir` fixture (the variable is for developing this
# test against scratch notebooks; normally unset).
NOTEBOOKS_DIR = Path(os.environ.get("TFM_BROWSER_NOTEBOOKS_DIR", ROOT / "notebooks"))
# The ten, then the bonus notebooks after them (notebooks/bonus/), as paths under NOTEBOOKS_DIR.
NOTEBOOKS = [p.relative_to(NOTEBOOKS_DIR).as_posix()
             for pattern in ("[0-9][0-9]_*.ipynb", "bonus/*.ipynb")
             for p in sorted(NOTEBOOKS_DIR.glob(pattern))]
SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"

LOAD_TIMEOUT_S = 90        # JupyterLab page + kernel start, on a busy 2-core machine
RUN_ALL_TIMEOUT_S = 240    # 10_training trains a model: ~20 s here, ~45 s on a busy machine
WIDGET_TIMEOUT_S = 30      # widget rendered / its output redrawn after a change
SETTLE_S = 4               # kernel idle this long after a move and no change: the move did nothing
POLL_S = 0.25

# Widget controls, in the order they are looked for: (kind, CSS selector of the control).
CONTROLS = [
    ("slider", ".widget-slider:has(.noUi-handle)"),
    ("dropdown", ".widget-dropdown:has(select)"),
    ("text box", ".widget-text:has(input)"),
    ("toggle buttons", ".widget-toggle-buttons:has(button)"),
    ("checkbox", ".widget-checkbox:has(input[type=checkbox])"),
    ("radio buttons", ".widget-radio-box:has(input[type=radio])"),
]

# What a widget's output looks like now: the first image and the Output widgets' text
# of the cell holding the control (hashed: images are long data: URLs), and whether
# that cell shows a traceback or a widget that failed to render.
OUTPUT_STATE_JS = r"""
(control) => {
  const hash = (s) => { let h = 2166136261; for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); } return (h >>> 0).toString(16) + ':' + s.length; };
  const cell = control.closest('.jp-Cell');
  const area = cell ? cell.querySelector('.jp-Cell-outputArea') : null;
  const scope = area || document;
  const outputs = Array.from(scope.querySelectorAll('.widget-output'));
  let img = null;
  for (const o of outputs) { const i = o.querySelector('img'); if (i) { img = i.getAttribute('src'); break; } }
  if (!img && area) { const i = area.querySelector('img'); if (i) img = i.getAttribute('src'); }
  const text = outputs.map(o => o.innerText).join('\n').trim();
  const shown = area ? area.innerText : '';
  const broken = /Error displaying widget|Traceback \(most recent call last\)/.test(shown);
  return {img: img ? hash(img) : null, text: hash(text), textStart: text.slice(0, 200),
          empty: !img && !text, broken: broken ? shown.slice(0, 1500) : null};
}
"""


def _fail(message: str):
    pytest.fail(message, pytrace=False)


def _wait(what: str, poll, timeout_s: float):
    """Call poll() until it returns (True, value); fail with its last state after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        done, value = poll()
        if done:
            return value
        if time.monotonic() > deadline:
            _fail(f"{what}: timed out after {timeout_s:.0f} s; last state: {value}")
        time.sleep(POLL_S)


def _open_notebook(page, name: str) -> str:
    path = f"notebooks/{name}"
    page.evaluate("(path) => { window.jupyterapp.commands.execute('docmanager:open', {path, factory: 'Notebook'}); }",
                  path)

    def kernel_ready():
        state = page.evaluate("(path) => window.__tfm.kernelState(path)", path)
        if state.get("dialog"):
            # e.g. "Select Kernel" when a notebook names no kernel: take the proposed one.
            accept = page.locator(".jp-Dialog .jp-mod-accept")
            if accept.count():
                accept.first.click()
        ready = (state.get("sessionReady") and state.get("connection") == "connected"
                 and state.get("status") == "idle")
        return bool(ready), state

    state = _wait(f"{name}: notebook kernel connected and idle", kernel_ready, LOAD_TIMEOUT_S)
    if state["kernelName"] != "python3":
        _fail(f"{name}: runs kernel {state['kernelName']!r}, not the course's python3")
    page.evaluate("() => window.jupyterapp.shell.collapseLeft()")  # more room for the notebook
    return path


def _run_all(page, name: str, path: str) -> dict:
    is_current = page.evaluate("(path) => window.__tfm.startRunAll(path)", path)
    if not is_current:
        _fail(f"{name}: the notebook was not the current widget for 'run all'")

    def finished():
        state = page.evaluate("(path) => window.__tfm.runState(path)", path)
        ran = all(c["count"] is not None for c in state["code"] if not c["empty"])
        done = state["run"] and state["run"]["done"] and state["status"] == "idle"
        return bool(done and ran) or bool(done and _errors(state)), state

    return _wait(f"{name}: run all cells", finished, RUN_ALL_TIMEOUT_S)


def _show_cell(page, path: str, cell: dict) -> None:
    """Scroll a cell into view, for the screenshot of a failure."""
    page.evaluate("([path, i]) => window.__tfm.panel(path).content.widgets[i].node"
                  ".scrollIntoView({block: 'start'})", [path, cell["index"]])
    time.sleep(0.3)


def _errors(state: dict) -> list[str]:
    return [f"cell {c['index']} ({c['firstLine']!r}): {e['ename']}: {e['evalue']}"
            for c in state["code"] if not c["raises"] for e in c["errors"]]


def _find_control(page, name: str):
    notebook = page.locator(".jp-NotebookPanel .jp-Notebook")
    for kind, selector in CONTROLS:
        control = notebook.locator(selector).first
        if control.count():
            return kind, control
    _fail(f"{name}: no widget control found after running all cells (looked for: "
          f"{', '.join(kind for kind, _ in CONTROLS)}); every notebook should have one "
          "(or its widget did not render)")


def _label(control) -> str:
    label = control.locator(".widget-label").first
    text = label.inner_text().strip() if label.count() else ""
    return f"'{text}'" if text else "(no label)"


def _text(locator) -> str:
    return " ".join(locator.inner_text().split())  # also turns non-breaking spaces into spaces


def _moves(kind: str, control):
    """A few ways to change the control, like a user does, tried in turn until one changes
    the output (e.g. the first option of a menu can show what is already on screen).
    Each yields a description of what was done, for the messages."""
    label = _label(control)
    if kind == "slider":
        handle = control.locator(".noUi-handle").first
        now, top = handle.get_attribute("aria-valuenow"), handle.get_attribute("aria-valuemax")
        at_top = now is not None and top is not None and float(now) >= float(top)
        key = "ArrowLeft" if at_top else "ArrowRight"
        readout = control.locator(".widget-readout").first
        for _ in range(3):
            before = _text(readout) if readout.count() else handle.get_attribute("aria-valuenow")
            handle.focus()
            handle.press(key)
            time.sleep(0.2)
            after = _text(readout) if readout.count() else handle.get_attribute("aria-valuenow")
            yield f"slider {label}: {key} ({before} -> {after})"
    elif kind == "dropdown":
        select = control.locator("select").first
        current = select.input_value()
        options = [(o.get_attribute("value"), _text(o)) for o in select.locator("option").all()]
        others = [option for option in options if option[0] != current]
        if not others:
            _fail(f"dropdown {label} has only one option: nothing to change")
        # From the last option back: the first one is often a placeholder or the default.
        for value, text in others[::-1][:3]:
            select.select_option(value=value)
            yield f"dropdown {label}: picked {text!r}"
    elif kind == "text box":
        box = control.locator("input").first
        old = box.input_value()
        if box.get_attribute("type") == "number":
            candidates = [str(float(old or 0) + step).removesuffix(".0") for step in (1, 2)]
        elif re.fullmatch(r"\s*\(?\s*\d+(\s*,\s*\d+)*\s*,?\s*\)?\s*", old):
            candidates = [f"2, {old.strip()}", "1"]  # a shape: one more leading axis, or a scalar
        else:
            candidates = [f"{old} again" if old.strip() else "the cat sat", "the cat sat on the mat"]
        for new in candidates:
            box.click()
            box.fill(new)
            box.press("Enter")
            yield f"text box {label}: {old!r} -> {new!r} + Enter"
    elif kind == "toggle buttons":
        for button in control.locator("button:not(.mod-active)").all()[:2]:
            text = _text(button)
            button.click()
            yield f"toggle buttons {label}: clicked {text!r}"
    elif kind == "checkbox":
        control.locator("input[type=checkbox]").first.click()
        yield f"checkbox {label}: clicked"
    else:
        for button in control.locator("input[type=radio]:not(:checked)").all()[:2]:
            button.click()
            yield f"radio buttons {label}: clicked another option"


def _drive_widget(page, name: str, path: str) -> str:
    kind, control = _find_control(page, name)
    control.scroll_into_view_if_needed()

    def state_now():
        return control.evaluate(OUTPUT_STATE_JS)

    def shown(state):
        return state["img"], state["text"]

    def rendered_and_stable():
        first = state_now()
        if first["broken"] or first["empty"]:
            return False, first
        time.sleep(0.3)
        return state_now() == first, first

    before = _wait(f"{name}: the {kind}'s output shows a plot or text", rendered_and_stable,
                   WIDGET_TIMEOUT_S)
    if before["broken"]:
        _fail(f"{name}: the {kind}'s cell shows an error:\n{before['broken']}")

    tried = []
    for action in _moves(kind, control):
        tried.append(action)
        moved = time.monotonic()

        def changed():
            now = state_now()
            if now["broken"] or (not now["empty"] and shown(now) != shown(before)):
                return True, now
            status = page.evaluate("(path) => window.__tfm.kernelState(path).status", path)
            if status == "idle" and time.monotonic() - moved > SETTLE_S:
                return True, None  # the kernel handled it and nothing changed: try another move
            return False, now

        after = _wait(f"{name}: after {action}, waiting for the kernel to redraw (before: {before})",
                      changed, WIDGET_TIMEOUT_S)
        if after is None:
            continue
        if after["broken"]:
            _fail(f"{name}: after {action}, the widget shows an error:\n{after['broken']}")
        # The control at the top of the screenshot, its plot below it; let the redraw paint.
        control.evaluate("(el) => el.scrollIntoView({block: 'start'})")
        time.sleep(0.3)
        return action
    _fail(f"{name}: moving the first widget control never changed the plot or the text of the "
          f"output it drives; tried: {'; '.join(tried)} (output before and after: {before})")


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_and_its_widget_responds(name, lab_page, lab_server, record_property):
    page, started = lab_page, time.monotonic()
    SCREENSHOTS.mkdir(exist_ok=True)
    screenshot = SCREENSHOTS / f"{Path(name).stem}.png"
    try:
        path = _open_notebook(page, name)
        loaded = time.monotonic()
        state = _run_all(page, name, path)

        errors = _errors(state)
        if errors:
            _show_cell(page, path, next(c for c in state["code"] if c["errors"] and not c["raises"]))
            _fail(f"{name}: cells raised errors in JupyterLab:\n" + "\n".join(errors))
        not_run = [c for c in state["code"] if not c["empty"] and c["count"] is None]
        if not_run:
            _show_cell(page, path, not_run[0])
            _fail(f"{name}: code cells that did not run: "
                  + ", ".join(f"cell {c['index']} ({c['firstLine']!r})" for c in not_run))
        ran = time.monotonic()

        action = _drive_widget(page, name, path)
        record_property("widget", action)
        record_property("seconds", {"load": round(loaded - started, 1),
                                    "run_all": round(ran - loaded, 1),
                                    "widget": round(time.monotonic() - ran, 1)})
        print(f"{name}: load {loaded - started:.1f} s, run all {ran - loaded:.1f} s, "
              f"widget {time.monotonic() - ran:.1f} s; moved {action}")
    except BaseException:
        if page.tfm_console_errors:
            print(f"{name}: browser console errors:\n" + "\n".join(page.tfm_console_errors[-20:]))
        print(f"{name}: JupyterLab server log (tail):\n{lab_server.log_tail(2000)}")
        raise
    finally:
        try:
            page.screenshot(path=str(screenshot), timeout=15_000)
        except Exception as error:  # the screenshot must never hide the real failure
            print(f"{name}: could not save {screenshot}: {error}")


# ---- a "predict, then run" answer is shown collapsed ---------------------------------------
# tests/test_predict_cells.py checks the stored metadata (`jupyter.outputs_hidden` on every
# cell tagged `predict-answer`); this check makes sure JupyterLab honours it: the answer's
# stored output is hidden behind the output placeholder, which previews only the neutral first
# line `Answer:`, the question above it is on screen, and one click on the placeholder shows
# the answer. (Running the cell unfolds it too: JupyterLab shows a cell's fresh output.)
PREDICT_NOTEBOOK = "06_multihead.ipynb"

PREDICT_CELL_JS = r"""
([path, index]) => {
  const panel = window.__tfm.panel(path);
  const cell = panel.content.widgets[index];
  if (!cell) return null;
  cell.node.setAttribute('data-tfm-predict', 'answer');
  const question = panel.content.widgets[index - 1];
  if (question) question.node.setAttribute('data-tfm-predict', 'question');
  const tags = cell.model.getMetadata('tags') || [];
  return {tags: tags, outputHidden: cell.outputHidden};
}
"""


def _first_predict_answer(path: Path) -> tuple[int, str]:
    """Index of the first cell tagged `predict-answer`, and the first line of its stored
    output after the neutral `Answer:` line that the folded output previews."""
    cells = json.loads(path.read_text())["cells"]
    for index, cell in enumerate(cells):
        if "predict-answer" in cell.get("metadata", {}).get("tags", []):
            lines = []
            for output in cell.get("outputs", []):
                text = output.get("text") or output.get("data", {}).get("text/plain", "")
                text = "".join(text) if isinstance(text, list) else text
                lines += [line.strip() for line in text.splitlines() if line.strip()]
            if lines[:1] == ["Answer:"] and len(lines) > 1:
                return index, lines[1]
            _fail(f"{path.name}: cell {index} (predict-answer) should print 'Answer:' and then "
                  f"its answer; its stored output is {lines[:3]}")
    _fail(f"{path.name}: no cell tagged 'predict-answer'")


def test_predict_answer_is_collapsed_until_clicked(lab_page, lab_server):
    page = lab_page
    SCREENSHOTS.mkdir(exist_ok=True)
    name = PREDICT_NOTEBOOK
    index, answer_line = _first_predict_answer(NOTEBOOKS_DIR / name)
    screenshot = SCREENSHOTS / f"predict_{Path(name).stem}"
    try:
        path = _open_notebook(page, name)
        # Bring the cell on screen first: a notebook renders cells lazily as they scroll in.
        page.evaluate("([path, i]) => window.__tfm.panel(path).content.scrollToItem(i, 'center')",
                      [path, index])

        def rendered():
            found = page.evaluate(PREDICT_CELL_JS, [path, index])
            return found is not None, found

        state = _wait(f"{name}: cell {index} rendered", rendered, WIDGET_TIMEOUT_S)
        if "predict-answer" not in state["tags"]:
            _fail(f"{name}: JupyterLab's cell {index} has tags {state['tags']}, not predict-answer")
        if not state["outputHidden"]:
            _fail(f"{name}: JupyterLab shows the output of predict-answer cell {index}: "
                  "the notebook's jupyter.outputs_hidden metadata was not applied")

        cell = page.locator("[data-tfm-predict=answer]")
        question = page.locator("[data-tfm-predict=question]")
        placeholder = cell.locator(".jp-OutputPlaceholder")
        outputs = cell.locator(".jp-Cell-outputArea")
        cell.scroll_into_view_if_needed()
        placeholder.wait_for(state="visible", timeout=WIDGET_TIMEOUT_S * 1000)
        if not question.is_visible() or not _text(question):
            _fail(f"{name}: the question above predict-answer cell {index} is not visible")
        if outputs.is_visible() or answer_line in _text(cell):
            _fail(f"{name}: the answer {answer_line!r} is on screen before the placeholder is clicked")
        if "Answer:" not in _text(placeholder):  # the placeholder previews the first output line
            _fail(f"{name}: the folded output shows {_text(placeholder)!r}, not 'Answer:'")
        cell.evaluate("(el) => el.scrollIntoView({block: 'center'})")
        time.sleep(0.3)
        page.screenshot(path=f"{screenshot}_collapsed.png", timeout=15_000)

        placeholder.click()
        outputs.wait_for(state="visible", timeout=WIDGET_TIMEOUT_S * 1000)
        _wait(f"{name}: the answer {answer_line!r} shown after the click",
              lambda: (answer_line in _text(outputs), _text(outputs)[:300]), WIDGET_TIMEOUT_S)
        if placeholder.is_visible():
            _fail(f"{name}: the output placeholder is still shown after the click")
        cell.evaluate("(el) => el.scrollIntoView({block: 'center'})")
        time.sleep(0.3)
        page.screenshot(path=f"{screenshot}_expanded.png", timeout=15_000)
    except BaseException:
        if page.tfm_console_errors:
            print(f"{name}: browser console errors:\n" + "\n".join(page.tfm_console_errors[-20:]))
        try:
            page.screenshot(path=f"{screenshot}_failure.png", timeout=15_000)
        except Exception as error:  # the screenshot must never hide the real failure
            print(f"{name}: could not save a screenshot: {error}")
        raise
