"""Fixtures of the real-browser test: a private JupyterLab server and Debian's Chromium.

The server is started once per test session:

* on 127.0.0.1, on a free port, with `--ServerApp.port_retries=0` (it fails rather than
  silently moving to another port) and a random token;
* with every Jupyter, IPython and matplotlib folder (config, data, runtime, workspaces,
  settings) in a temporary folder, so that nothing of the user's own setup is used and
  nothing is written to it;
* with a `python3` kernelspec installed into that temporary data folder that runs this
  very interpreter (`sys.executable`, i.e. `.venv/bin/python`), so the notebooks run in
  the course's environment and nowhere else;
* on a COPY of `notebooks/` in a temporary root folder: "run all" in the browser
  rewrites the copies (outputs, autosave), never the repository's notebooks. `tfmlib`
  is importable from there because it is installed (editable) in the venv; the
  repository is also put on the kernel's PYTHONPATH for a checkout that only has it there.

Only the server process started here is stopped at the end (terminate, then kill).

Chromium is Debian's `/usr/bin/chromium` driven by the `playwright` Python package;
`playwright install` is never used. A missing Chromium is a test FAILURE with a message
saying how to install it (`make test` and `make browser` install it first).
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
SERVER_START_TIMEOUT_S = 90
SERVER_STOP_TIMEOUT_S = 15
VIEWPORT = {"width": 1280, "height": 1000}

# Helpers injected into every page before JupyterLab's own scripts run. They only read
# JupyterLab's state through `window.jupyterapp` (exposed by --LabApp.expose_app_in_browser).
PAGE_HELPERS = r"""
window.__tfm = {
  // The open NotebookPanel whose file is `path` (relative to the server root), or null.
  panel(path) {
    const app = window.jupyterapp;
    if (!app) return null;
    for (const w of Array.from(app.shell.widgets('main'))) {
      if (w.context && w.context.path === path && w.content && w.sessionContext) return w;
    }
    return null;
  },
  // Where the notebook stands: loaded? kernel connected and idle? a dialog in the way?
  kernelState(path) {
    const dialog = document.querySelector('.jp-Dialog');
    const state = {app: !!window.jupyterapp, panel: false,
                   dialog: dialog ? dialog.innerText.slice(0, 200) : null};
    const p = this.panel(path);
    if (!p) return state;
    const kernel = p.sessionContext.session ? p.sessionContext.session.kernel : null;
    return Object.assign(state, {
      panel: true,
      contextReady: p.context.isReady,
      sessionReady: p.sessionContext.isReady,
      kernelName: kernel ? kernel.name : null,
      connection: kernel ? kernel.connectionStatus : null,
      status: kernel ? kernel.status : null,
    });
  },
  // Clear every output (execution counts go back to none), then start "run all".
  async startRunAll(path) {
    const app = window.jupyterapp;
    const p = this.panel(path);
    app.shell.activateById(p.id);
    await app.commands.execute('notebook:clear-all-cell-outputs');
    window.__tfmRun = {done: false};
    app.commands.execute('notebook:run-all-cells').then(
      ok => { window.__tfmRun = {done: true, ok: ok}; },
      err => { window.__tfmRun = {done: true, ok: false, error: String(err)}; });
    return app.shell.currentWidget === p;
  },
  // Summary of the notebook model: per code cell, its execution count and error outputs.
  runState(path) {
    const p = this.panel(path);
    const kernel = p.sessionContext.session ? p.sessionContext.session.kernel : null;
    const cells = p.content.model.cells;
    const code = [];
    for (let i = 0; i < cells.length; i++) {
      const c = cells.get(i);
      if (c.type !== 'code') continue;
      const json = c.toJSON();
      const source = Array.isArray(json.source) ? json.source.join('') : json.source;
      const tags = (json.metadata && json.metadata.tags) || [];
      const errors = [];
      for (let j = 0; j < c.outputs.length; j++) {
        const o = c.outputs.get(j).toJSON();
        if (o.output_type === 'error') errors.push({ename: o.ename, evalue: String(o.evalue).slice(0, 300)});
      }
      code.push({index: i, count: c.executionCount, empty: source.trim() === '',
                 raises: tags.includes('raises-exception'),
                 firstLine: source.split('\n')[0].slice(0, 80), errors: errors});
    }
    return {run: window.__tfmRun || null, status: kernel ? kernel.status : null,
            connection: kernel ? kernel.connectionStatus : null, code: code};
  },
};
"""


@dataclass
class LabServer:
    url: str          # http://127.0.0.1:PORT
    token: str
    root: Path        # the server's root folder (holds the copy of notebooks/)
    log: Path         # the server's stdout and stderr

    def api(self, method: str, path: str):
        request = urllib.request.Request(f"{self.url}{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no server log)"

    def shutdown_all_sessions(self) -> None:
        """Stop every kernel of this server (they were all started by the test)."""
        for session in self.api("GET", "/api/sessions") or []:
            try:
                self.api("DELETE", f"/api/sessions/{session['id']}")
            except (urllib.error.URLError, OSError):
                pass


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))


def _stop(process: subprocess.Popen) -> None:
    """Stop the one process this fixture started: terminate, then kill after a timeout."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=SERVER_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=SERVER_STOP_TIMEOUT_S)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} is missing: the browser test needs Debian's Chromium. Install it with "
            "`apt-get install chromium` (as root), or run `make browser` / `make test`, which "
            "install it first. Do not use `playwright install`.", pytrace=False)
    return CHROMIUM


@pytest.fixture(scope="session")
def notebooks_dir() -> Path:
    """The notebooks under test (an environment variable points elsewhere, for developing
    this test itself against scratch notebooks)."""
    return Path(os.environ.get("TFM_BROWSER_NOTEBOOKS_DIR", ROOT / "notebooks")).resolve()


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory, chromium_path, notebooks_dir) -> LabServer:
    base = tmp_path_factory.mktemp("jupyterlab")
    root, home = base / "root", base / "home"
    shutil.copytree(notebooks_dir, root / "notebooks",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))

    env = dict(os.environ)
    dirs = {
        "JUPYTER_CONFIG_DIR": "jupyter-config", "JUPYTER_DATA_DIR": "jupyter-data",
        "JUPYTER_RUNTIME_DIR": "jupyter-runtime", "IPYTHONDIR": "ipython",
        "MPLCONFIGDIR": "matplotlib", "JUPYTERLAB_WORKSPACES_DIR": "lab-workspaces",
        "JUPYTERLAB_SETTINGS_DIR": "lab-settings",
    }
    for variable, name in dirs.items():
        (home / name).mkdir(parents=True)
        env[variable] = str(home / name)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("JUPYTER_PATH", None)  # no kernelspecs or extensions from elsewhere
    # The notebooks' trained runs, kept for nbval's execution after this test (tests/conftest.py).
    env["TFMLIB_RUN_CACHE"] = env.pop("TFMLIB_BROWSER_RUN_CACHE", "")
    # jupyter_core prefers a venv's share/jupyter over the user data folder; the venv's
    # python3 kernelspec says just "python". Make the private data folder (and so the
    # kernelspec written below, which names sys.executable) win.
    env["JUPYTER_PREFER_ENV_PATH"] = "0"
    env.pop("JUPYTER_TOKEN", None)

    # No news or update pop-up (and no request for them) in the page.
    _write_json(home / "lab-settings" / "@jupyterlab" / "apputils-extension"
                / "notification.jupyterlab-settings",
                {"fetchNews": "false", "checkForUpdates": False})

    # The python3 kernel runs this interpreter: a kernelspec in the private data folder
    # (searched before the venv's own share/jupyter) with argv[0] = sys.executable.
    subprocess.run([sys.executable, "-m", "ipykernel", "install", "--user", "--name", "python3",
                    "--display-name", "Python 3 (ipykernel)"],
                   env=env, check=True, capture_output=True, timeout=120)

    token = secrets.token_hex(24)
    log = base / "server.log"
    for attempt in range(3):
        # The port is free now; another program may take it before the server binds it.
        # With port_retries=0 the server then exits, and we try again on another port.
        port = _free_port()
        command = [
            sys.executable, "-m", "jupyter", "lab", "--no-browser",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
            f"--ServerApp.root_dir={root}", f"--IdentityProvider.token={token}",
            "--ServerApp.terminals_enabled=False",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.append("--allow-root")  # containers and CI run as root
        server = LabServer(url=f"http://127.0.0.1:{port}", token=token, root=root, log=log)
        with open(log, "wb") as log_file:
            process = subprocess.Popen(command, cwd=root, env=env, stdin=subprocess.DEVNULL,
                                       stdout=log_file, stderr=subprocess.STDOUT)
        try:
            if _wait_until_up(server, process):
                break
        except BaseException:
            _stop(process)
            raise
        if attempt == 2 or "already in use" not in server.log_tail():
            pytest.fail(f"JupyterLab exited with code {process.returncode} at start:\n"
                        f"{server.log_tail()}", pytrace=False)
    try:
        spec = server.api("GET", "/api/kernelspecs")["kernelspecs"]["python3"]["spec"]
        assert spec["argv"][0] == sys.executable, (
            f"the python3 kernel would run {spec['argv'][0]}, not {sys.executable}")
        yield server
    finally:
        _stop(process)


def _wait_until_up(server: LabServer, process: subprocess.Popen) -> bool:
    """True once the server answers; False if it exited; fails after the start timeout."""
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while process.poll() is None:
        try:
            server.api("GET", "/api/status")
            return True
        except (urllib.error.URLError, OSError):
            if time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not answer on {server.url} within "
                            f"{SERVER_START_TIMEOUT_S} s:\n{server.log_tail()}", pytrace=False)
            time.sleep(0.3)
    return False


@pytest.fixture(scope="session")
def browser(chromium_path):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as error:
        pytest.fail(f"the playwright Python package is missing ({error}): "
                    "`.venv/bin/pip install -r requirements.txt`", pytrace=False)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="session")
def browser_context(browser):
    """One browser context for the session: its HTTP cache spares each page from
    downloading JupyterLab's scripts again. Each test still gets its own page and its
    own JupyterLab workspace."""
    context = browser.new_context(viewport=VIEWPORT)
    context.add_init_script(PAGE_HELPERS)
    try:
        yield context
    finally:
        context.close()


@pytest.fixture(scope="session")
def _lab_tab() -> dict:
    """The tab that holds JupyterLab, shared by the tests in turn: {"page": it} once opened."""
    tab = {}
    yield tab
    if tab.get("page") is not None and not tab["page"].is_closed():
        tab["page"].close()


def _open_lab(browser_context, lab_server):
    """A new tab with JupyterLab started in a fresh workspace, no document open."""
    page = browser_context.new_page()
    page.tfm_console_errors = []
    page.on("pageerror", lambda error: page.tfm_console_errors.append(f"page error: {error}"))
    page.on("console", lambda message: message.type == "error"
            and page.tfm_console_errors.append(f"console: {message.text[:300]}"))
    page.goto(f"{lab_server.url}/lab/workspaces/test-{secrets.token_hex(4)}?reset&token={lab_server.token}",
              wait_until="domcontentloaded", timeout=SERVER_START_TIMEOUT_S * 1000)
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell", timeout=SERVER_START_TIMEOUT_S * 1000)
    page.evaluate("() => window.jupyterapp.restored")
    return page


@pytest.fixture
def lab_page(_lab_tab, browser_context, lab_server):
    """JupyterLab with no document open, its console errors counted from now. One tab serves every
    test (JupyterLab's start costs Chromium about 3.5 s of CPU): afterwards each document is closed
    unsaved and every kernel stopped; a tab left with a dialog, or that would not close them, is
    closed, and the next test starts JupyterLab afresh."""
    page = _lab_tab.get("page")
    if page is None or page.is_closed():
        page = _lab_tab["page"] = _open_lab(browser_context, lab_server)
    page.tfm_console_errors.clear()
    try:
        yield page
    finally:
        try:
            page.evaluate("() => { for (const w of Array.from(window.jupyterapp.shell.widgets('main'))) w.dispose(); }")
            if page.locator(".jp-Dialog").count():
                raise RuntimeError("a dialog is still open")
        except Exception:  # whatever went wrong, the next test gets a fresh JupyterLab
            page.close()
        try:
            lab_server.shutdown_all_sessions()
        except (urllib.error.URLError, OSError):
            pass
