"""Firefox ESR (Debian's /usr/bin/firefox-esr) for the browser tests, driven through Marionette
(PyPI `marionette-driver`; no geckodriver), the way browser.py drives Chromium with Playwright.

- `Firefox(label)`: a headless Firefox with a fresh profile (user.js = `PREFS`: fake camera and
  mic, loopback ICE, no mDNS hiding, every Mozilla service off) started with
  MOZ_DISABLE_NONLOCAL_CONNECTIONS=1 in its own process group, and a Marionette session. `close()`
  (or leaving the `with` block) ends the session and kills the whole process group, always.
- `FirefoxPage`: the one tab of that Firefox, with a Playwright-like `evaluate(expr, arg)` so a
  test body can drive a Chromium page and a Firefox page alike (the browser.py harness `window.T`
  is loaded by `sdk_page()`), and the page's console/errors collected into a `PageLog`-like file.
- `ipv6_disabled()`: while Firefox runs, IPv6 is off in the test's (loopback-only) namespace, or
  Firefox also gathers ::1 candidates (TESTING.md). Restored afterwards.

Traps (TESTING.md "Firefox ESR"): without `permissions.default.camera/microphone=1` Firefox with
fake devices gathers no candidates in an lo-only namespace; without
MOZ_DISABLE_NONLOCAL_CONNECTIONS=1 ESR ignores the blanked remote-settings URL and keeps trying to
reach Mozilla; there is no H264 (OpenH264 is a download that is disabled), so Firefox is VP8/VP9/AV1.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Optional

from browser import ARTIFACTS, HARNESS_JS
from waiting import wait_until

FIREFOX = os.environ.get("FIREFOX_BIN", "/usr/bin/firefox-esr")

# user.js of the test profile: offline, loopback-only WebRTC with fake devices.
PREFS = {
    # WebRTC with fake devices, no prompts, loopback host candidates, no mDNS names, no STUN.
    "media.navigator.streams.fake": True,
    "media.navigator.permission.disabled": True,
    "media.peerconnection.ice.loopback": True,
    "media.peerconnection.ice.obfuscate_host_addresses": False,
    "media.peerconnection.default_iceservers": "[]",
    "media.autoplay.default": 0,
    # Fake devices do not count as capturing: without a default permission Firefox gathers only
    # the default-route address, which an lo-only namespace lacks -> no candidates at all.
    "permissions.default.camera": 1,
    "permissions.default.microphone": 1,
    # Never fetch OpenH264 (so: no H264 in Firefox here).
    "media.gmp-manager.url": "",
    "media.gmp-manager.updateEnabled": False,
    # The page's console on Firefox's stdout (the gecko log in artifacts/interop/).
    "devtools.console.stdout.content": True,
    # Telemetry, updates, captive portal, safe browsing, normandy, remote settings, push, DNS, ...
    "toolkit.telemetry.enabled": False,
    "toolkit.telemetry.unified": False,
    "toolkit.telemetry.server": "",
    "toolkit.telemetry.archive.enabled": False,
    "datareporting.healthreport.uploadEnabled": False,
    "datareporting.policy.dataSubmissionEnabled": False,
    "datareporting.policy.firstRunURL": "",
    "browser.ping-centre.telemetry": False,
    "app.update.disabledForTesting": True,
    "app.update.auto": False,
    "app.update.url": "",
    "network.captive-portal-service.enabled": False,
    "captivedetect.canonicalURL": "",
    "network.connectivity-service.enabled": False,
    "browser.safebrowsing.malware.enabled": False,
    "browser.safebrowsing.phishing.enabled": False,
    "browser.safebrowsing.downloads.enabled": False,
    "browser.safebrowsing.downloads.remote.enabled": False,
    "browser.safebrowsing.blockedURIs.enabled": False,
    "browser.safebrowsing.provider.google.updateURL": "",
    "browser.safebrowsing.provider.google.gethashURL": "",
    "browser.safebrowsing.provider.google4.updateURL": "",
    "browser.safebrowsing.provider.google4.gethashURL": "",
    "browser.safebrowsing.provider.mozilla.updateURL": "",
    "browser.safebrowsing.provider.mozilla.gethashURL": "",
    "app.normandy.enabled": False,
    "app.normandy.api_url": "",
    "app.shield.optoutstudies.enabled": False,
    # Honoured on ESR only with MOZ_DISABLE_NONLOCAL_CONNECTIONS=1 in the environment.
    "services.settings.server": "data:,#remote-settings-dummy/v1",
    "messaging-system.rsexperimentloader.enabled": False,
    "extensions.update.enabled": False,
    "extensions.getAddons.cache.enabled": False,
    "extensions.blocklist.enabled": False,
    "extensions.systemAddon.update.enabled": False,
    "extensions.systemAddon.update.url": "",
    "dom.push.enabled": False,
    "dom.push.serverURL": "",
    "network.trr.mode": 5,
    "network.dns.disablePrefetch": True,
    "network.prefetch-next": False,
    "network.http.speculative-parallel-limit": 0,
    "geo.provider.network.url": "",
    "browser.search.geoip.url": "",
    "browser.region.network.url": "",
    "browser.shell.checkDefaultBrowser": False,
    "browser.startup.page": 0,
    "browser.startup.homepage": "about:blank",
    "browser.startup.homepage_override.mstone": "ignore",
    "startup.homepage_welcome_url": "",
    "startup.homepage_welcome_url.additional": "",
    "browser.aboutwelcome.enabled": False,
    "browser.newtabpage.enabled": False,
    "browser.newtabpage.activity-stream.feeds.system.topstories": False,
    "browser.newtabpage.activity-stream.feeds.snippets": False,
    "browser.newtabpage.activity-stream.telemetry": False,
    "browser.discovery.enabled": False,
    "security.OCSP.enabled": 0,
    "security.remote_settings.crlite_filters.enabled": False,
    "security.remote_settings.intermediates.enabled": False,
    "toolkit.startup.max_resumed_crashes": -1,
}


def require_firefox() -> None:
    if not os.access(FIREFOX, os.X_OK):
        import pytest
        pytest.fail(f"Firefox not found at {FIREFOX}: run scripts/interop-setup.sh (installs Debian's firefox-esr)",
                    pytrace=False)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def user_js(prefs: dict[str, Any]) -> str:
    return "".join(f"user_pref({json.dumps(k)}, {json.dumps(v)});\n" for k, v in prefs.items())


IPV6_KNOBS = ["/proc/sys/net/ipv6/conf/all/disable_ipv6", "/proc/sys/net/ipv6/conf/lo/disable_ipv6"]


@contextlib.contextmanager
def ipv6_disabled() -> Iterator[None]:
    """IPv6 off in this process's network namespace (the suite's loopback-only one: conftest
    refuses to run anywhere else), restored on exit."""
    saved = {}
    for knob in IPV6_KNOBS:
        try:
            saved[knob] = Path(knob).read_text().strip()
            Path(knob).write_text("1\n")
        except OSError:
            pass
    try:
        yield
    finally:
        for knob, value in saved.items():
            try:
                Path(knob).write_text(value + "\n")
            except OSError:
                pass


# Runs `src` in the page like Playwright's page.evaluate: a function source is called with `arg`,
# anything else is evaluated as an expression; promises are awaited; the value comes back as JSON.
EVALUATE_JS = r"""
const [src, arg, resolve] = arguments;
(async () => {
  const v = (0, eval)('(' + src + ')');
  return typeof v === 'function' ? await v(arg) : await v;
})().then(
  (v) => resolve(JSON.stringify({ ok: v === undefined ? null : v })),
  (e) => resolve(JSON.stringify({ error: (e && e.name ? e.name + ': ' : '') + String(e && (e.detail || e.message) || e) })));
"""

# Keeps the page's console and uncaught errors in window.__minatoConsole (read by FirefoxPage.log).
CONSOLE_HOOK_JS = r"""() => {
  if (window.__minatoConsole) return true;
  const lines = window.__minatoConsole = [];
  const t0 = performance.now();
  const fmt = (a) => { try { return typeof a === 'string' ? a : JSON.stringify(a); } catch (e) { return String(a); } };
  for (const level of ['log', 'info', 'warn', 'error', 'debug']) {
    const orig = console[level].bind(console);
    console[level] = (...args) => { lines.push(`${((performance.now() - t0) / 1000).toFixed(2)} ${level}: ${args.map(fmt).join(' ')}`); orig(...args); };
  }
  window.addEventListener('error', (e) => lines.push(`${((performance.now() - t0) / 1000).toFixed(2)} PAGEERROR: ${e.message}`));
  window.addEventListener('unhandledrejection', (e) => lines.push(`${((performance.now() - t0) / 1000).toFixed(2)} PAGEERROR: unhandled ${e.reason && (e.reason.name || '')} ${e.reason && (e.reason.detail || e.reason.message) || e.reason}`));
  return true;
}"""


class FirefoxError(RuntimeError):
    pass


class FirefoxPage:
    """The tab of a `Firefox`; `evaluate` mirrors Playwright's `page.evaluate`."""

    def __init__(self, ff: "Firefox", label: str) -> None:
        self.ff = ff
        self.label = label

    def goto(self, url: str) -> None:
        self.ff.client.navigate(url)
        self.evaluate(CONSOLE_HOOK_JS)

    def evaluate(self, expr: str, arg: Any = None, timeout: float = 60.0) -> Any:
        raw = self.ff.client.execute_async_script(EVALUATE_JS, script_args=[expr, arg], sandbox=None,
                                                  script_timeout=int(timeout * 1000))
        out = json.loads(raw)
        if "error" in out:
            raise FirefoxError(f"{self.label}: {expr[:80]!r} failed in Firefox: {out['error']}")
        return out["ok"]

    def console(self) -> list[str]:
        try:
            return self.evaluate("() => window.__minatoConsole || []", timeout=10) or []
        except Exception as e:  # noqa: BLE001
            return [f"(console unavailable: {e})"]

    @property
    def page_errors(self) -> list[str]:
        return [line for line in self.console() if "PAGEERROR" in line]

    def save(self, prefix: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / f"{prefix}-{self.label}.console.log").write_text("\n".join(self.console()) + "\n")


class Firefox:
    """A headless Firefox ESR with a fresh profile and a Marionette session (one tab)."""

    def __init__(self, label: str = "firefox", extra_prefs: Optional[dict[str, Any]] = None) -> None:
        require_firefox()
        from marionette_driver.marionette import Marionette

        self.label = label
        self.port = _free_port()
        self.profile = Path(tempfile.mkdtemp(prefix="minato-ff-"))
        (self.profile / "user.js").write_text(user_js({**PREFS, **(extra_prefs or {}), "marionette.port": self.port}))
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.gecko_log_path = ARTIFACTS / f"firefox-{label}.gecko.log"
        self._log = open(self.gecko_log_path, "wb")
        env = {**os.environ, "MOZ_HEADLESS": "1", "MOZ_DISABLE_NONLOCAL_CONNECTIONS": "1",
               "MOZ_CRASHREPORTER_DISABLE": "1"}
        t0 = time.monotonic()
        # Its own process group: close() kills Firefox and every content process it started.
        self.proc = subprocess.Popen([FIREFOX, "--headless", "--marionette", "--no-remote", "-profile", str(self.profile)],
                                     stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                     start_new_session=True)
        self.client = None
        try:
            client = Marionette(host="127.0.0.1", port=self.port)
            client.raise_for_port(timeout=60, check_process_status=False)
            self.capabilities = client.start_session()
            self.client = client
        except Exception:
            self.close()
            raise
        self.startup_seconds = time.monotonic() - t0
        self.version = self.capabilities.get("browserVersion")
        self.page = FirefoxPage(self, label)

    def close(self) -> None:
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.delete_session()
            self.client = None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        # Whatever is left of the group (content processes outliving the parent), always.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        self._log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Firefox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def sdk_page(ff: Firefox, server: Any) -> FirefoxPage:
    """The Firefox tab on a document of the server's origin with the SDK harness (`window.T`) of
    browser.py loaded, like browser.sdk_page() for Chromium."""
    page = ff.page
    page.goto(server.http + "/healthz")
    page.evaluate("""() => {
        document.documentElement.innerHTML = '<head><meta charset="utf-8"><title>SDK harness</title></head>' +
          '<body style="margin:0;background:#111"><div id="videos"></div></body>';
        return true; }""")
    page.evaluate(HARNESS_JS)
    wait_until(lambda: page.evaluate("() => !!window.T"), 10, "the SDK harness in Firefox")
    return page
