"""Fixtures for the end-to-end tests: a real `mnemo serve` on the default model, on a free port.

The binary comes from $MNEMO_BIN (CTest sets it) or --mnemo-bin. Anything the suite needs that is
missing (binary, model, Python packages, Chromium) is an error, never a skip: a skipped test
fails the session too (see pytest_sessionfinish).
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from helpers import API_KEY, CLUSTER_SECRET, reference_model_path

SERVING_LINE = re.compile(r"^mnemo: (?:serving|routing) .* at (https?://[^\s/]+)/")
STARTUP_TIMEOUT_S = 120.0


def pytest_addoption(parser):
    parser.addoption("--mnemo-bin", default=os.environ.get("MNEMO_BIN", ""),
                     help="path of the mnemo executable (default: $MNEMO_BIN)")


# ---- a skipped test is a failed run ----------------------------------------------------------

_skipped: list[str] = []


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    if _skipped and session.exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _skipped:
        terminalreporter.write_line(
            f"FAILED: {len(_skipped)} test(s) skipped; this suite must not skip: " + ", ".join(_skipped), red=True)


# ---- the server process ----------------------------------------------------------------------

@dataclass
class MnemoServer:
    """One `mnemo serve` process; `url` is http://127.0.0.1:PORT (no trailing slash)."""

    args: list[str]
    proc: subprocess.Popen | None = None
    url: str = ""
    stderr_path: str = ""
    stdout_lines: list[str] = field(default_factory=list)
    _stdout_thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def certificate(self) -> str | None:
        """The --ssl-cert-file it serves HTTPS with (None: plain HTTP)."""
        if "--ssl-cert-file" in self.args:
            return self.args[self.args.index("--ssl-cert-file") + 1]
        return None

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def start(self) -> "MnemoServer":
        fd, self.stderr_path = tempfile.mkstemp(prefix="mnemo-serve-", suffix=".log")
        with os.fdopen(fd, "w") as stderr:
            self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=stderr, text=True, bufsize=1,
                                         stdin=subprocess.DEVNULL)
        lines: queue.Queue[str | None] = queue.Queue()

        def pump():
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.stdout_lines.append(line)
                lines.put(line)
            lines.put(None)

        self._stdout_thread = threading.Thread(target=pump, daemon=True)
        self._stdout_thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self.url:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                pytest.fail(f"mnemo serve printed no 'serving' line in {STARTUP_TIMEOUT_S:.0f}s\n{self.log_tail()}")
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                code = self.proc.wait(timeout=10)
                pytest.fail(f"mnemo serve exited with {code} before serving\n{self.log_tail()}")
            match = SERVING_LINE.match(line)
            if match:
                self.url = match.group(1)
        self.wait_healthy(deadline)
        return self

    def wait_healthy(self, deadline: float) -> None:
        last_error = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                pytest.fail(f"mnemo serve exited with {self.proc.returncode}\n{self.log_tail()}")
            try:
                r = requests.get(self.url + "/health", timeout=5, verify=self.certificate or True)
                if r.status_code == 200 and r.json().get("status") == "ok":
                    return
                last_error = f"HTTP {r.status_code}: {r.text[:200]}"
            except requests.RequestException as e:
                last_error = repr(e)
            time.sleep(0.05)
        pytest.fail(f"/health never answered ok: {last_error}\n{self.log_tail()}")

    def log_tail(self, n: int = 40) -> str:
        try:
            text = Path(self.stderr_path).read_text(errors="replace")
        except OSError:
            text = ""
        return "stdout:\n" + "".join(self.stdout_lines[-n:]) + "stderr:\n" + "\n".join(text.splitlines()[-n:])

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM, then waits for the exit; returns the exit code (kills it on timeout)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"mnemo serve did not exit {timeout:.0f}s after SIGTERM\n{self.log_tail()}")
            raise  # unreachable

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture(scope="session")
def mnemo_bin(pytestconfig) -> str:
    path = pytestconfig.getoption("--mnemo-bin")
    if not path:
        pytest.fail("no mnemo binary: set MNEMO_BIN or pass --mnemo-bin")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"mnemo binary not found or not executable: {path}")
    return path


@pytest.fixture(scope="session")
def start_server(mnemo_bin):
    """Factory: start_server(*extra_args) starts a server (Gemma 3 270M, free port) that is stopped
    at the end of the session unless the test stopped it."""
    servers: list[MnemoServer] = []
    secret_file = os.path.join(tempfile.mkdtemp(prefix="mnemo-e2e-secret-"), "cluster-secret")
    with open(secret_file, "w") as f:
        f.write(CLUSTER_SECRET + "\n")

    def start(*extra: str, default_model: bool = False) -> MnemoServer:
        # Every server gets its own state (conversations, KV disk tier) unless a test shares one.
        state = [] if "--state-dir" in extra else ["--state-dir", tempfile.mkdtemp(prefix="mnemo-e2e-state-")]
        # Cluster members run as the loopback cluster without a secret their test routers form.
        secret = [] if "--cluster-secret-file" in extra or "--cluster" in extra else ["--cluster-secret-file", secret_file]
        # Gemma 3 270M unless the test names a model (serve's own default is the chat model).
        model = [] if default_model or "--model" in extra or "-m" in extra else ["--model", reference_model_path()]
        args = [mnemo_bin, "serve", "--host", "127.0.0.1", "--port", "0", *model, *state, *secret, *extra]
        server = MnemoServer(args)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        if server.proc is not None and server.proc.poll() is None:
            server.terminate()


@pytest.fixture(scope="session")
def server(start_server) -> MnemoServer:
    """The shared server most tests use."""
    return start_server()




@pytest.fixture(scope="session")
def auth_server(start_server) -> MnemoServer:
    """A second server, started with --api-key API_KEY."""
    return start_server("--api-key", API_KEY)


@pytest.fixture(scope="session")
def model_info(server) -> dict:
    r = requests.get(server.base_url + "/models", timeout=10)
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert len(data) == 1
    return data[0]


@pytest.fixture(scope="session")
def model_id(model_info) -> str:
    return model_info["id"]


@pytest.fixture(scope="session")
def client(server):
    import openai

    with openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120) as c:
        yield c  # closed before the server stops: idle keep-alive connections delay its exit


@pytest.fixture(scope="session")
def raw(server):
    """A requests session with the server's base URL at hand."""
    session = requests.Session()
    session.base = server.url  # type: ignore[attr-defined]
    yield session
    session.close()
