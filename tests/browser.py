"""The tools our users look through, driven from tests: Debian's Chromium
(headless, through Playwright), Netron and a JupyterLab server.

No pytest here: test_browser.py wraps these in fixtures.  Everything listens
on loopback only, and the browser context refuses every request that leaves
the machine (Netron's page asks ipinfo.io and Google Analytics; JupyterLab
may ask for news), so the tests see what an offline user sees and send
nothing out.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from html.parser import HTMLParser
from pathlib import Path

from customops.notebook.browser import (  # noqa: F401  (used by test_browser.py)
    CHROMIUM, launch_chromium, missing_chromium_message, open_in_netron,
)


def texts(locator) -> list[str]:
    """Text of every element a locator matches, in document order.  (Netron
    replaces ``window.eval``, which breaks Playwright's all_inner_texts and
    evaluate; count/nth/text_content do not need it.)"""
    return [(locator.nth(i).text_content() or "").strip() for i in range(locator.count())]


class _SidebarParser(HTMLParser):
    """Netron's property sidebar as {section: {name: [values]}}; the first
    section (type, module, name) is called "". Each row is a
    div.sidebar-item holding <input value=NAME> and one or more
    div.sidebar-item-value-line."""

    def __init__(self):
        super().__init__()
        self.sections: dict[str, dict[str, list[str]]] = {"": {}}
        self._section = ""
        self._name = None
        self._capture = None  # "section" or "value" while inside such an element
        self._depth = 0
        self._buffer = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if self._capture:
            self._depth += 1
            return
        if "sidebar-section" in classes:
            self._capture, self._depth, self._buffer = "section", 1, []
        elif tag == "input":
            self._name = attrs.get("value", "")
            self.sections[self._section].setdefault(self._name, [])
        elif "sidebar-item-value-line" in classes:
            self._capture, self._depth, self._buffer = "value", 1, []

    def handle_endtag(self, tag):
        if not self._capture:
            return
        self._depth -= 1
        if self._depth == 0:
            text = " ".join("".join(self._buffer).split())
            if self._capture == "section":
                self._section = text
                self.sections.setdefault(text, {})
            elif self._name is not None:
                self.sections[self._section][self._name].append(text)
            self._capture = None

    def handle_data(self, data):
        if self._capture:
            self._buffer.append(data)


def parse_sidebar(html: str) -> dict[str, dict[str, list[str]]]:
    parser = _SidebarParser()
    parser.feed(html)
    return parser.sections


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterLab:
    """``jupyter lab`` as ``make lab`` starts it (the venv's jupyter, on the
    notebooks folder), on 127.0.0.1 with a random token, in its own process
    group.  Runtime files, workspaces, user settings and checkpoints go to
    ``state_dir``, so the test neither reads nor changes the user's
    JupyterLab layout nor writes into the notebooks folder."""

    def __init__(self, notebook_dir: Path, state_dir: Path):
        self.notebook_dir = Path(notebook_dir)
        self.state_dir = Path(state_dir)
        self.token = secrets.token_hex(24)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.state_dir / "jupyter.log"
        self.process = None

    def command(self) -> list[str]:
        jupyter = Path(sys.executable).with_name("jupyter")
        launcher = [str(jupyter)] if jupyter.exists() else [sys.executable, "-m", "jupyter"]
        return launcher + [
            "lab", "--no-browser",
            # (--ServerApp.token also works, with a deprecation warning.)
            f"--IdentityProvider.token={self.token}", f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0", "--ServerApp.ip=127.0.0.1",
            f"--notebook-dir={self.notebook_dir}",
            # Opening a notebook makes a checkpoint copy; keep it out of the checkout.
            f"--FileCheckpoints.checkpoint_dir={self.state_dir / 'checkpoints'}",
            # Offline: never ask pypi/GitHub whether a newer JupyterLab exists.
            "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate",
        ] + (["--allow-root"] if os.geteuid() == 0 else [])  # containers and CI often run as root

    def start(self, timeout: float = 60) -> None:
        env = dict(os.environ)
        for var, sub in [("JUPYTER_RUNTIME_DIR", "runtime"),
                         ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"),
                         ("JUPYTERLAB_SETTINGS_DIR", "settings")]:
            env[var] = str(self.state_dir / sub)
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            self.command(), cwd=self.notebook_dir.parent, env=env, stdin=subprocess.DEVNULL,
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        try:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"jupyter lab exited with {self.process.returncode}:\n{self.log()}")
                try:
                    self.api("GET", "/api/status")
                    return
                except (urllib.error.URLError, ConnectionError):
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"jupyter lab did not answer within {timeout} s:\n{self.log()}")
                time.sleep(0.25)
        except BaseException:
            self.stop()
            raise

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def api(self, method: str, path: str, body=None, timeout: float = 10):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read()
        return json.loads(text) if text else None

    def stop(self, timeout: float = 20) -> None:
        """Asks the server to shut down (it stops its kernels), then
        terminates and finally kills the process group we started."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            try:
                self.api("POST", "/api/shutdown", timeout=5)
            except Exception:
                pass
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)  # the server's group: its kernels too
            except ProcessLookupError:
                break
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                continue
        self._log.close()
        self.process = None

    # --- running code in a kernel of this server -----------------------------

    def run_cells(self, sources: list[str], timeout: float = 180) -> list[dict]:
        """Starts a python3 kernel through the REST API, sends each source
        as an execute_request over the kernel's websocket (the channel
        JupyterLab itself uses), stops at the first failing cell, deletes
        the kernel.  Returns one dict per executed cell: status, the error
        (ename, evalue, traceback) if any, and its stream output."""
        import websocket  # websocket-client, a dependency of jupyter_server
        from jupyter_client.jsonutil import json_default
        from jupyter_client.session import Session

        kernel = self.api("POST", "/api/kernels", {"name": "python3"})
        session = Session(username="test_browser")
        ws = websocket.create_connection(
            f"ws://127.0.0.1:{self.port}/api/kernels/{kernel['id']}/channels"
            f"?session_id={uuid.uuid4().hex}",
            header=[f"Authorization: token {self.token}"], timeout=timeout)
        results = []
        try:
            for source in sources:
                message = session.msg("execute_request", {
                    "code": source, "silent": False, "store_history": True,
                    "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
                message["channel"] = "shell"
                ws.send(json.dumps(message, default=json_default))
                result = {"source": source, "status": None, "error": None, "stream": ""}
                idle = False
                deadline = time.monotonic() + timeout
                while result["status"] is None or not idle:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"cell did not finish in {timeout} s:\n{source[:300]}")
                    reply = json.loads(ws.recv())
                    if reply.get("parent_header", {}).get("msg_id") != message["header"]["msg_id"]:
                        continue
                    kind, content = reply["msg_type"], reply["content"]
                    if kind == "execute_reply":
                        result["status"] = content["status"]
                    elif kind == "error":
                        result["error"] = content
                    elif kind == "stream":
                        result["stream"] += content["text"]
                    elif kind == "status" and content["execution_state"] == "idle":
                        idle = True
                results.append(result)
                if result["status"] != "ok":
                    break
        finally:
            ws.close()
            try:
                self.api("DELETE", f"/api/kernels/{kernel['id']}")
            except Exception:
                pass
        return results
