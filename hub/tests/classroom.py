"""A class on a real JupyterHub, driven the way browsers drive it: through the hub's REST API,
each student's server's REST API and the kernel websocket. Used by the hub test and the load test.

The hub runs hub/tests/jupyterhub_config.py (the shipped hub/jupyterhub_config.py with a test
spawner and authenticator) from .venv-hub on 127.0.0.1 only. Every process it starts (proxy,
services, servers, kernels, git) carries HUB_TEST_RUN=<this run's id> in its environment, which
is how `Hub.stop` finds them by process id, and how `memory_of` finds a student's processes.
"""
from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import websocket_connect

REPO = Path(__file__).resolve().parents[2]
HUB_VENV = Path(os.environ.get("HUB_VENV", REPO / ".venv-hub"))
TEST_CONFIG = Path(__file__).resolve().parent / "jupyterhub_config.py"

AsyncHTTPClient.configure(None, max_clients=200)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bare_course_repo(workdir: Path) -> Path:
    """The course's committed HEAD as branch main of a bare repository: nbgitpuller's source."""
    bare = workdir / "course.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    subprocess.run(["git", "-C", str(REPO), "push", "-q", str(bare), "HEAD:refs/heads/main"], check=True)
    return bare


def marked_processes(marker: str) -> list[int]:
    """Process ids whose environment holds HUB_TEST_RUN=marker."""
    needle = f"HUB_TEST_RUN={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:  # gone meanwhile, or not ours
                pass
    return found


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "gone"


def memory_of(marker: str, user: str) -> dict[str, float]:
    """MB of a student's server and kernels together: RSS (counts libtorch's shared pages once per
    student), PSS (shared pages split between the processes that map them) and anonymous memory
    (the student's own: what a machine must hold per student)."""
    total = {"rss": 0.0, "pss": 0.0, "anon": 0.0, "processes": 0}
    for pid in marked_processes(marker):
        try:
            if _environ(pid).get("JUPYTERHUB_USER") != user:
                continue
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
        except OSError:
            continue
        fields = {line.split(":")[0]: int(line.split()[1]) for line in rollup[1:]}
        total["rss"] += fields["Rss"] / 1024
        total["pss"] += fields["Pss"] / 1024
        total["anon"] += fields["Anonymous"] / 1024
        total["processes"] += 1
    return total


def _body(method: str, body) -> str | None:
    """A POST always carries a body: one without is forwarded by the Python proxy with both
    Transfer-Encoding and Content-Length, which the hub rejects (400)."""
    if body is None:
        return "{}" if method in ("POST", "PUT", "PATCH") else None
    return body if isinstance(body, str) else json.dumps(body)


class Hub:
    """One JupyterHub process and everything it starts, on loopback ports of its own."""

    def __init__(self, workdir: Path, exchange: Path):
        self.workdir = workdir
        self.marker = uuid.uuid4().hex
        self.token = secrets.token_hex(32)  # the admin service's token (class-test)
        self.port, self.hub_port, self.api_port = free_port(), free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.exchange = exchange
        self.process: subprocess.Popen | None = None
        self.log = workdir / "jupyterhub.log"

    def start(self, timeout: float = 120) -> None:
        env = dict(os.environ, HUB_TEST_RUN=self.marker, HUB_TEST_DIR=str(self.workdir),
                   HUB_TEST_TOKEN=self.token, COURSE_EXCHANGE=str(self.exchange),
                   HUB_TEST_PORTS=f"{self.port},{self.hub_port},{self.api_port}",
                   PATH=f"{HUB_VENV / 'bin'}:{os.environ['PATH']}")
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen([str(HUB_VENV / "bin" / "jupyterhub"), "-f", str(TEST_CONFIG)],
                                            cwd=self.workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyterhub exited with {self.process.returncode}:\n{self.tail()}")
            try:
                asyncio.run(self.api("GET", "/hub/api/"))
                return
            except (OSError, RuntimeError):
                time.sleep(0.5)
        raise RuntimeError(f"jupyterhub did not answer within {timeout} s:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    async def api(self, method: str, path: str, token: str | None = None, body=None,
                  expect: tuple[int, ...] = (200, 201, 202, 204), timeout: float = 120) -> tuple[int, object]:
        """(status, JSON body or text) of a request to the proxy's public port."""
        request = HTTPRequest(self.url + path, method=method, request_timeout=timeout,
                              follow_redirects=False,
                              headers={"Authorization": f"token {token or self.token}"},
                              body=_body(method, body),
                              allow_nonstandard_methods=True)
        response = await AsyncHTTPClient().fetch(request, raise_error=False)
        if response.code == 599:
            raise OSError(f"{method} {path}: {response.error}")
        text = response.body.decode(errors="replace") if response.body else ""
        if expect and response.code not in expect:
            raise RuntimeError(f"{method} {path}: HTTP {response.code}, expected {expect}: {text[:500]}")
        try:
            return response.code, json.loads(text) if text else None
        except ValueError:
            return response.code, text

    def stop(self, timeout: float = 60) -> list[str]:
        """Stop the hub (it stops the proxy, its services and the servers it spawned), then end
        any process of this run still alive, by process id. Returns those that had to be killed
        (id and command line)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        # A loaded machine takes a while to end every kernel of a class; wait before calling one stray.
        deadline = time.monotonic() + 60
        while marked_processes(self.marker) and time.monotonic() < deadline:
            time.sleep(0.5)
        pids = marked_processes(self.marker)
        stray = [f"{pid} ({_command(pid)})" for pid in pids]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return stray


@dataclass
class Result:
    """One execution in a kernel: its reply's status, what it printed and its value's text, the
    error if any."""
    status: str
    stdout: str
    error: str
    seconds: float
    messages: list = field(default_factory=list)

    def comm_opens(self, target: str = "jupyter.widget") -> list[dict]:
        return [m["content"] for m in self.messages
                if m["msg_type"] == "comm_open" and m["content"].get("target_name") == target]


def _decode(raw: str | bytes) -> dict:
    """A kernel message from the websocket: text is JSON; a message with binary buffers (a
    widget's picture) comes as one binary frame: the count of parts, their offsets (4-byte big
    endian each), then the JSON message and the buffers, which are not needed here."""
    if isinstance(raw, str):
        return json.loads(raw)
    parts = int.from_bytes(raw[:4], "big")
    offsets = [int.from_bytes(raw[4 * i:4 * i + 4], "big") for i in range(1, parts + 1)] + [len(raw)]
    return json.loads(raw[offsets[0]:offsets[1]].decode())


class Kernel:
    """A kernel of a student's server, over the websocket as JupyterLab uses it."""

    def __init__(self, hub: Hub, student: "Student", kernel_id: str, ws):
        self.hub, self.student, self.id, self.ws = hub, student, kernel_id, ws
        self.session = uuid.uuid4().hex

    def _message(self, msg_type: str, content: dict) -> dict:
        return {"header": {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "session": self.session,
                           "username": self.student.name, "version": "5.3"},
                "parent_header": {}, "metadata": {}, "content": content,
                "channel": "shell"}

    async def _run(self, message: dict, needs_reply: bool, timeout: float) -> Result:
        """Send a shell message; done once its iopub `idle` and (for a request) its reply arrived."""
        msg_id = message["header"]["msg_id"]
        start = time.perf_counter()
        await self.ws.write_message(json.dumps(message))
        stdout, error, status, idle, seen = [], "", None, False, []
        while idle is False or (needs_reply and status is None):
            raw = await asyncio.wait_for(self.ws.read_message(), timeout)
            if raw is None:
                raise RuntimeError(f"{self.student.name}: the kernel websocket closed")
            msg = _decode(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            msg_type = msg["msg_type"]
            seen.append(msg)
            if msg_type == "stream":
                stdout.append(msg["content"]["text"])
            elif msg_type == "execute_result":  # a check's verdict is the cell's value
                stdout.append(msg["content"]["data"].get("text/plain", "") + "\n")
            elif msg_type == "error":
                error = f"{msg['content']['ename']}: {msg['content']['evalue']}"
            elif msg_type == "status" and msg["content"]["execution_state"] == "idle":
                idle = True
            elif msg_type.endswith("_reply"):
                status = msg["content"]["status"]
        return Result(status or "ok", "".join(stdout), error, time.perf_counter() - start, seen)

    async def execute(self, code: str, timeout: float = 300) -> Result:
        return await self._run(self._message("execute_request", {
            "code": code, "silent": False, "store_history": True, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True}), needs_reply=True, timeout=timeout)

    async def set_widget(self, comm_id: str, state: dict, timeout: float = 120) -> Result:
        """What a moved control sends: the new state of its model; done when the kernel is idle."""
        return await self._run(self._message("comm_msg", {
            "comm_id": comm_id, "data": {"method": "update", "state": state, "buffer_paths": []}}),
            needs_reply=False, timeout=timeout)

    async def shutdown(self) -> None:
        self.ws.close()
        await self.student.api("DELETE", f"/api/kernels/{self.id}")


class Student:
    def __init__(self, hub: Hub, name: str):
        self.hub, self.name, self.token = hub, name, ""

    async def create(self) -> None:
        """The teacher adds the student (admin page or REST API); the student gets a token."""
        await self.hub.api("POST", f"/hub/api/users/{self.name}")
        _, token = await self.hub.api("POST", f"/hub/api/users/{self.name}/tokens",
                                      body={"note": "class test", "expires_in": 3600})
        self.token = token["token"]

    async def api(self, method: str, path: str, body=None, **kwargs):
        """A request to the student's own server, with the student's own token."""
        return await self.hub.api(method, f"/user/{self.name}{path}", token=self.token, body=body, **kwargs)

    async def start_server(self, timeout: float = 240) -> float:
        """Seconds from asking the hub for a server to the server answering its API."""
        start = time.perf_counter()
        await self.hub.api("POST", f"/hub/api/users/{self.name}/server", token=self.token)
        while time.perf_counter() - start < timeout:
            _, user = await self.hub.api("GET", f"/hub/api/users/{self.name}", token=self.token)
            server = user["servers"].get("")
            if server and server["ready"]:
                await self.api("GET", "/api/status")
                return time.perf_counter() - start
            if not server:
                raise RuntimeError(f"{self.name}: the server stopped while starting:\n{self.hub.tail()}")
            await asyncio.sleep(0.5)
        raise RuntimeError(f"{self.name}: no server after {timeout} s")

    def git_pull_link(self, repo: str, notebook: str) -> str:
        """The nbgitpuller link a teacher hands out (README, "A class on JupyterHub")."""
        query = urlencode({"repo": repo, "branch": "main",
                           "urlpath": f"lab/tree/course/notebooks/{notebook}"}, quote_via=quote)
        return f"/hub/user-redirect/git-pull?{query}"

    async def pull(self, repo: str, notebook: str, timeout: float = 240) -> None:
        """Follow the link: the hub sends the student to their server's git-pull page, whose
        script streams /git-pull/api until the clone is done; the same requests as a browser."""
        status, _ = await self.hub.api("GET", self.git_pull_link(repo, notebook), token=self.token, expect=(302,))
        query = urlencode({"repo": repo, "branch": "main", "targetpath": "course"}, quote_via=quote)
        _, stream = await self.api("GET", f"/git-pull/api?{query}", timeout=timeout)
        events = [json.loads(line[len("data:"):]) for line in stream.splitlines() if line.startswith("data:")]
        if not events or events[-1].get("phase") != "finished":
            raise RuntimeError(f"{self.name}: nbgitpuller did not finish: {events[-3:]}")

    async def open_kernel(self, timeout: float = 180) -> Kernel:
        _, kernel = await self.api("POST", "/api/kernels", body={"name": "python3"}, timeout=timeout)
        ws_url = self.hub.url.replace("http", "ws") + f"/user/{self.name}/api/kernels/{kernel['id']}/channels"
        # tornado's default of 20 s is too short when a class opens its kernels at once on 2 cores.
        ws = await websocket_connect(HTTPRequest(ws_url, headers={"Authorization": f"token {self.token}"},
                                                 connect_timeout=timeout, request_timeout=timeout))
        return Kernel(self.hub, self, kernel["id"], ws)


def code_cells(notebook: Path, upto: int | None = None) -> list[str]:
    """The sources of a notebook's code cells (of its first `upto` cells), in order."""
    cells = json.loads(notebook.read_text())["cells"][:upto]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
