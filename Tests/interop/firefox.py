"""Firefox ESR (Debian's /usr/bin/firefox-esr) for the browser tests, driven through Marionette
(PyPI `marionette-driver`; no geckodriver), the way browser.py drives Chromium with Playwright.

- `Firefox(label)`: a headless Firefox with a fresh profile (user.js = `PREFS`: fake camera and
  mic, loopback ICE, no mDNS hiding, every Mozilla service off) started with
  MOZ_DISABLE_NONLOCAL_CONNECTIONS=1 in its own process group, and a Marionette session. `close()`
  (or leaving the `with` block) ends the session and kills the whole process group, always.
- `FirefoxPage`: a window of that Firefox (`ff.page` is the first; `ff.new_page(label)` opens
  another), with a Playwright-like `evaluate(expr, arg)` so a test body can drive a Chromium page
  and a Firefox page alike (the browser.py harness `window.T` is loaded by `sdk_page()`), the
  subset of Playwright's page API the demo tests use (`fill`, `click`, `locator`, `reload`,
  `wait_for_selector`, `screenshot`; `expect()` mirrors Playwright's assertions on a
  `FirefoxLocator`), and the page's console/errors collected into a `PageLog`-like file.
  Several pages of one test are WINDOWS of one Firefox, not tabs: a background tab gets its
  timers throttled to 1/s and no requestAnimationFrame, a window that is not focused does not;
  every command first switches Marionette to the page's window (without focusing it).
- `session(label)`: a Firefox with IPv6 disabled while it runs, closed at the end.
- `ipv6_disabled()`: while Firefox runs, IPv6 is off in the test's (loopback-only) namespace, or
  Firefox also gathers ::1 candidates (docs/sdk.md "Tests"). Restored afterwards.

Traps (docs/sdk.md "Tests"): without `permissions.default.camera/microphone=1` Firefox with
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
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

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


# Resolves a FirefoxLocator's chain of (css selector, nth or null) steps to elements, like
# Playwright's chained locators: each step searches inside every element the previous one found.
RESOLVE_JS = r"""const resolve = (chain) => {
  let roots = [document];
  for (const [sel, nth] of chain) {
    const found = [];
    for (const r of roots) for (const e of r.querySelectorAll(sel)) if (!found.includes(e)) found.push(e);
    roots = nth === null ? found : found.slice(nth, nth + 1);
  }
  return roots;
};"""

# What Playwright's assertions look at, per element a locator resolves to. Visible as Playwright
# defines it: a non-empty bounding box and no `visibility: hidden`.
STATE_JS = "(chain) => { " + RESOLVE_JS + r"""
  return resolve(chain).map((el) => {
    const r = el.getBoundingClientRect();
    return { text: el.textContent, value: 'value' in el ? String(el.value) : null,
             visible: r.width > 0 && r.height > 0 && getComputedStyle(el).visibility !== 'hidden',
             enabled: !el.matches(':disabled'),
             attrs: Object.fromEntries([...el.attributes].map((a) => [a.name, a.value])),
             box: { x: r.x, y: r.y, width: r.width, height: r.height } };
  });
}"""


class FirefoxPage:
    """A window of a `Firefox`; `evaluate` mirrors Playwright's `page.evaluate`, and `fill`,
    `click`, `locator`, `reload`, `wait_for_selector`, `screenshot` the Playwright calls of the
    same names (the subset the browser tests use)."""

    def __init__(self, ff: "Firefox", label: str, handle: Optional[str] = None) -> None:
        self.ff = ff
        self.label = label
        self.handle = handle if handle is not None else ff.client.current_window_handle
        self.navigated = False
        self._earlier_console: list[str] = []   # console of documents this window showed before

    def _run(self, fn: Callable[[], Any]) -> Any:
        """Runs a Marionette command in this page's window (switching to it, unfocused)."""
        with self.ff.lock:
            self.ff.select(self.handle)
            return fn()

    def goto(self, url: str) -> None:
        self._keep_console()
        self._run(lambda: self.ff.client.navigate(url))
        self.navigated = True
        self.evaluate(CONSOLE_HOOK_JS)

    def reload(self) -> None:
        self._keep_console()
        self._run(self.ff.client.refresh)
        self.evaluate(CONSOLE_HOOK_JS)

    def evaluate(self, expr: str, arg: Any = None, timeout: float = 60.0) -> Any:
        raw = self._run(lambda: self.ff.client.execute_async_script(
            EVALUATE_JS, script_args=[expr, arg], sandbox=None, script_timeout=int(timeout * 1000)))
        out = json.loads(raw)
        if "error" in out:
            raise FirefoxError(f"{self.label}: {expr[:80]!r} failed in Firefox: {out['error']}")
        return out["ok"]

    # -- the Playwright page calls of the demo tests ---------------------------------------------

    def locator(self, selector: str) -> "FirefoxLocator":
        return FirefoxLocator(self, [(selector, None)])

    def fill(self, selector: str, value: str, timeout: float = 30.0) -> None:
        self.locator(selector).fill(value, timeout)

    def click(self, selector: str, timeout: float = 30.0) -> None:
        self.locator(selector).click(timeout)

    def wait_for_selector(self, selector: str, timeout: float = 30000) -> None:
        """Like Playwright's: waits (timeout in ms) for the selector to match a visible element."""
        loc = self.locator(selector)
        wait_until(lambda: any(s["visible"] for s in loc.states()), timeout / 1000,
                   f"{self.label}: {selector} visible")

    def screenshot(self, path: str) -> None:
        """The viewport as a PNG (what a user of this window sees)."""
        png = self._run(lambda: self.ff.client.screenshot(format="binary", full=False))
        Path(path).write_bytes(png)

    # -- console -----------------------------------------------------------------------------------

    def _keep_console(self) -> None:
        if self.navigated:
            self._earlier_console += self._current_console() + ["--- (navigated / reloaded) ---"]

    def _current_console(self) -> list[str]:
        try:
            return self.evaluate("() => window.__minatoConsole || []", timeout=10) or []
        except Exception as e:  # noqa: BLE001
            return [f"(console unavailable: {e})"]

    def console(self) -> list[str]:
        return self._earlier_console + self._current_console()

    @property
    def page_errors(self) -> list[str]:
        return [line for line in self.console() if "PAGEERROR" in line]

    def save(self, prefix: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / f"{prefix}-{self.label}.console.log").write_text("\n".join(self.console()) + "\n")


def _normalize(text: str) -> str:
    return " ".join(text.split())


class FirefoxLocator:
    """Playwright's Locator for a FirefoxPage, the calls the demo tests make: `locator`, `all`,
    `count`, `get_attribute`, `bounding_box`, `click`, `fill`. Actions are strict like
    Playwright's (exactly one element) and wait for the element to be there and actionable."""

    def __init__(self, page: FirefoxPage, chain: list[tuple[str, Optional[int]]]) -> None:
        self.page = page
        self.chain = chain

    def __repr__(self) -> str:
        return f"FirefoxLocator({self.page.label}: {' >> '.join(s if n is None else f'{s}[{n}]' for s, n in self.chain)})"

    def locator(self, selector: str) -> "FirefoxLocator":
        return FirefoxLocator(self.page, self.chain + [(selector, None)])

    def states(self) -> list[dict]:
        return self.page.evaluate(STATE_JS, [list(step) for step in self.chain])

    def _one(self) -> dict:
        st = self.states()
        if len(st) != 1:
            raise FirefoxError(f"{self!r} matches {len(st)} elements, not one")
        return st[0]

    def all(self) -> list["FirefoxLocator"]:
        *head, (sel, _) = self.chain
        return [FirefoxLocator(self.page, head + [(sel, i)]) for i in range(len(self.states()))]

    def count(self) -> int:
        return len(self.states())

    def get_attribute(self, name: str) -> Optional[str]:
        return self._one()["attrs"].get(name)

    def bounding_box(self) -> Optional[dict]:
        box = self._one()["box"]
        return box if box["width"] > 0 and box["height"] > 0 else None

    def _element(self) -> Any:
        """The Marionette WebElement (strict: exactly one match)."""
        el = self.page._run(lambda: self.page.ff.client.execute_script(
            RESOLVE_JS + " const els = resolve(arguments[0]); return els.length === 1 ? els[0] : els.length;",
            script_args=[[list(step) for step in self.chain]], sandbox=None))
        if isinstance(el, int):
            raise FirefoxError(f"{self!r} matches {el} elements, not one")
        return el

    def _act(self, what: str, action: Callable[[Any], None], timeout: float) -> None:
        """Retries `action(element)` until it succeeds (Playwright's auto-waiting: the element is
        there, visible, enabled and not covered), for at most `timeout` seconds."""
        from marionette_driver import errors as merr
        last: list[Exception] = []

        def attempt() -> bool:
            try:
                st = self._one()
                if not (st["visible"] and st["enabled"]):
                    raise FirefoxError(f"{self!r} is not visible and enabled: {st['visible']=} {st['enabled']=}")
                self.page._run(lambda: action(self._element()))
                return True
            except (FirefoxError, merr.MarionetteException) as e:
                last[:] = [e]
                return False
        try:
            wait_until(attempt, timeout, f"{what} {self!r}", interval=0.1)
        except AssertionError as e:
            raise AssertionError(f"{e}: {last[0] if last else ''}") from None

    def click(self, timeout: float = 30.0) -> None:
        """A WebDriver element click: real pointer events at the element's in-view centre."""
        self._act("click", lambda el: el.click(), timeout)

    def fill(self, value: str, timeout: float = 30.0) -> None:
        """Like Playwright's fill: the field's value becomes `value` with `input` and `change` events
        (set through the native setter, since typing needs keyboard focus, which a window that is
        not focused lacks)."""
        def set_value(el: Any) -> None:
            ok = self.page.ff.client.execute_script("""
                const [el, value] = arguments;
                el.focus();
                const proto = el instanceof HTMLTextAreaElement ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;
                Object.getOwnPropertyDescriptor(proto, 'value').set.call(el, value);
                el.dispatchEvent(new Event('input', { bubbles: true }));
                el.dispatchEvent(new Event('change', { bubbles: true }));
                return el.value === value;""", script_args=[el, value], sandbox=None)
            if not ok:
                raise FirefoxError(f"{self!r} did not take the value {value!r}")
        self._act("fill", set_value, timeout)


class FirefoxExpect:
    """Playwright's `expect(locator)` assertions for a FirefoxLocator: each polls until it holds
    or `timeout` (ms, Playwright's default 5000) passes. Text is compared whitespace-normalized,
    as Playwright does."""

    def __init__(self, loc: FirefoxLocator) -> None:
        self.loc = loc

    def _poll(self, what: str, ok: Callable[[list[dict]], bool], timeout: Optional[float]) -> None:
        seen: list[Any] = []

        def check() -> bool:
            st = self.loc.states()
            seen[:] = [st]
            return ok(st)
        try:
            wait_until(check, (timeout if timeout is not None else 5000) / 1000, f"{self.loc!r} {what}", interval=0.1)
        except AssertionError as e:
            raise AssertionError(f"{e}; last seen: {json.dumps(seen[0] if seen else None)[:1500]}") from None

    def to_be_visible(self, timeout: Optional[float] = None) -> None:
        self._poll("to be visible", lambda st: len(st) == 1 and st[0]["visible"], timeout)

    def to_be_hidden(self, timeout: Optional[float] = None) -> None:
        self._poll("to be hidden", lambda st: len(st) == 0 or (len(st) == 1 and not st[0]["visible"]), timeout)

    def to_be_enabled(self, timeout: Optional[float] = None) -> None:
        self._poll("to be enabled", lambda st: len(st) == 1 and st[0]["enabled"], timeout)

    def to_have_value(self, value: str, timeout: Optional[float] = None) -> None:
        self._poll(f"to have value {value!r}", lambda st: len(st) == 1 and st[0]["value"] == value, timeout)

    def to_have_attribute(self, name: str, value: str, timeout: Optional[float] = None) -> None:
        self._poll(f"to have {name}={value!r}", lambda st: len(st) == 1 and st[0]["attrs"].get(name) == value, timeout)

    def to_have_text(self, text: str, timeout: Optional[float] = None) -> None:
        self._poll(f"to have text {text!r}",
                   lambda st: len(st) == 1 and _normalize(st[0]["text"]) == _normalize(text), timeout)

    def to_contain_text(self, text: str, timeout: Optional[float] = None) -> None:
        self._poll(f"to contain text {text!r}",
                   lambda st: len(st) == 1 and _normalize(text) in _normalize(st[0]["text"]), timeout)

    def to_have_count(self, n: int, timeout: Optional[float] = None) -> None:
        self._poll(f"to have count {n}", lambda st: len(st) == n, timeout)


def expect(loc: FirefoxLocator) -> FirefoxExpect:
    return FirefoxExpect(loc)


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
        self.lock = threading.RLock()   # a page's window switch and its command go together
        self._window: Optional[str] = None
        self.pages: list[FirefoxPage] = []
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
        self._window = self.page.handle

    def select(self, handle: str) -> None:
        """Directs Marionette's commands at window `handle` (not focusing it). Call with `lock` held."""
        if self._window != handle:
            self.client.switch_to_window(handle, focus=False)
            self._window = handle

    def new_page(self, label: str) -> FirefoxPage:
        """A page in a window of its own: the first window if nothing used it yet, else a new one."""
        with self.lock:
            if not self.pages and not self.page.navigated:
                self.page.label = label
                page = self.page
            else:
                page = FirefoxPage(self, label, self.client.open(type="window", focus=False)["handle"])
            self.pages.append(page)
            return page

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


@contextlib.contextmanager
def session(label: str) -> Iterator[Firefox]:
    """A Firefox for one test (or module): IPv6 is off in the namespace only while it runs."""
    with ipv6_disabled():
        ff = Firefox(label)
        try:
            yield ff
        finally:
            ff.close()


def sdk_page(ff: Firefox, server: Any, page: Optional[FirefoxPage] = None) -> FirefoxPage:
    """A Firefox window (`page`, else the first one) on a document of the server's origin with the
    SDK harness (`window.T`) of browser.py loaded, like browser.sdk_page() for Chromium."""
    page = page or ff.page
    page.goto(server.http + "/healthz")
    page.evaluate("""() => {
        document.documentElement.innerHTML = '<head><meta charset="utf-8"><title>SDK harness</title></head>' +
          '<body style="margin:0;background:#111"><div id="videos"></div></body>';
        return true; }""")
    page.evaluate(HARNESS_JS)
    wait_until(lambda: page.evaluate("() => !!window.T"), 10, "the SDK harness in Firefox")
    return page


def demo_page(ff: Firefox, server: Any, label: str) -> FirefoxPage:
    """A new Firefox window on the demo at `/`, ready (like browser.demo_page() for Chromium)."""
    page = ff.new_page(label)
    page.goto(server.http + "/")
    page.wait_for_selector("body[data-ready='true']", timeout=20000)
    return page
