"""Fixtures of the interop suite: a loopback-only namespace guard, the Minato server per module.

Run through scripts/interop.sh, which makes a fresh network namespace holding only `lo`.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

import pytest

from waiting import WaitTimeout, wait_until

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts" / "interop"


def _interfaces() -> list[str]:
    """Interfaces of *this process's* network namespace. (/sys/class/net would show the
    namespace sysfs was mounted in, i.e. the host's, so it cannot be trusted after unshare -n.)"""
    try:
        with open("/proc/self/net/dev") as f:
            lines = f.read().splitlines()[2:]
        return sorted(line.split(":")[0].strip() for line in lines if ":" in line)
    except OSError:
        out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        return sorted(line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line)


def pytest_configure(config: pytest.Config) -> None:
    ifaces = _interfaces()
    if ifaces != ["lo"]:
        pytest.exit(
            "interop tests must run in a loopback-only network namespace (found interfaces "
            f"{ifaces}); use scripts/interop.sh, which runs "
            "`unshare -n sh -c 'ip link set lo up; exec ...'`", returncode=3)
    up = subprocess.run(["ip", "-o", "addr", "show", "dev", "lo"], capture_output=True, text=True).stdout
    if "127.0.0.1" not in up:
        pytest.exit("`lo` is down in this namespace: run `ip link set lo up` first (scripts/interop.sh does)",
                    returncode=3)


def minato_binary() -> Path:
    return Path(os.environ.get("MINATO_BIN") or REPO / ".build" / "debug" / "minato")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary: Path, log_path: Path, env: dict[str, str] | None = None,
                 host: str = "127.0.0.1") -> None:
        self.binary = binary
        self.env = dict(env or {})
        self.host = host  # --host: HTTP/WebSocket listen address (test_simulcast_bwe uses a veth's)
        self.port = _free_port()
        self.log_path = log_path
        self.url = f"ws://{host}:{self.port}/ws"
        self.http = f"http://{host}:{self.port}"
        self.proc: subprocess.Popen | None = None
        self._log = None

    def start(self, timeout: float = 20.0) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")
        cmd = [str(self.binary), "serve", "--host", self.host, "--port", str(self.port), "--log-level", "debug"]
        # Secrets (auth, admin, cluster, TURN) are not written to the artifacts.
        shown_env = "".join(f"{k}={'(set)' if 'SECRET' in k else v} " for k, v in sorted(self.env.items()))
        self._log.write(("$ " + shown_env + " ".join(cmd) + "\n").encode())
        self._log.flush()
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=REPO, env={**os.environ, **self.env} if self.env else None)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        last_err = ["no attempt"]

        def healthy() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"minato exited with {self.proc.returncode} during startup\n{self.tail()}")
            try:
                with opener.open(self.http + "/healthz", timeout=1) as r:
                    if r.status == 200:
                        return True
                    last_err[0] = f"status {r.status}"
            except (urllib.error.URLError, OSError) as e:
                last_err[0] = repr(e)
            return False
        try:
            wait_until(healthy, timeout, f"minato healthy on {self.http}/healthz", interval=0.1)
        except WaitTimeout:
            self.stop()
            raise RuntimeError(f"minato not healthy on {self.http}/healthz within {timeout}s ({last_err[0]})\n"
                               f"{self.tail()}") from None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._log:
            self._log.close()
            self._log = None

    def tail(self, lines: int = 80) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no server log)"
        return "\n".join(text[-lines:])


@contextlib.contextmanager
def running_server(name: str, env: Optional[dict] = None, host: str = "127.0.0.1"):
    """A Minato server for one test module (log in artifacts/interop/<name>.log), listening on
    `host`; the module fails if the binary is missing or the server died while it ran."""
    binary = minato_binary()
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        pytest.fail(f"Minato server binary not found at {binary}: build it first (`swift build`, "
                    "which makes .build/debug/minato) or set MINATO_BIN to the binary", pytrace=False)
    srv = Server(binary, ARTIFACTS / f"{name}.log", env=env, host=host)
    try:
        srv.start()
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    yield srv
    crashed = not srv.alive()
    srv.stop()
    if crashed:
        pytest.fail(f"minato died during {name} (exit {srv.proc.returncode})\n{srv.tail()}", pytrace=False)


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest):
    # A test module may set MINATO_SERVER_ENV = {"MINATO_…": "…"} for its server.
    with running_server(Path(str(request.node.path)).stem, getattr(request.module, "MINATO_SERVER_ENV", None)) as srv:
        yield srv


# ---- browsers, one of each per test module ----------------------------------------------------

@pytest.fixture(scope="module")
def pw():
    """Playwright's sync API (its event loop runs on the test thread while the module uses it)."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def chromium(pw):
    """Debian's Chromium with the flags of browser.launch_chromium."""
    from browser import launch_chromium
    b = launch_chromium(pw)
    yield b
    b.close()


@pytest.fixture(scope="module")
def ff(request: pytest.FixtureRequest):
    """A headless Firefox ESR (firefox.py) for the module, with IPv6 off while it runs."""
    import firefox
    with firefox.ipv6_disabled():
        f = firefox.Firefox(Path(str(request.node.path)).stem)
        try:
            yield f
        finally:
            f.close()


@contextlib.contextmanager
def engine_pages(request: pytest.FixtureRequest, engine: str, server, chromium_page, firefox_page, prefix: str):
    """A maker of pages for one test in `engine`: Chromium pages of the module's browser
    (`chromium_page(browser, server, label)` -> (page, log)), or windows of one Firefox ESR of the
    test's own (`firefox_page(ff, server, label)` -> page). Saves their console logs and closes
    them afterwards."""
    made = []
    if engine == "firefox":
        import firefox
        with firefox.session(f"{prefix}-{request.node.originalname}") as ff:
            def make_ff(label: str):
                page = firefox_page(ff, server, label)
                made.append(page)
                return page

            try:
                yield make_ff
            finally:
                for page in made:
                    page.save(request.node.name)
        return
    chromium = request.getfixturevalue("chromium")

    def make(label: str):
        page, log = chromium_page(chromium, server, label)
        made.append((page, log))
        return page

    try:
        yield make
    finally:
        from browser import close_page
        for page, log in made:
            close_page(page, log, request.node.name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        srv = getattr(item, "funcargs", {}).get("server")
        if isinstance(srv, Server):
            state = "running" if srv.alive() else f"exited {srv.proc.returncode if srv.proc else '?'}"
            report.sections.append((f"minato log tail ({srv.log_path}, server {state})", srv.tail()))
