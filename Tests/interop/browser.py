"""Helpers of the browser tests: Debian's Chromium driven by Playwright (sync API), against the
real Minato server serving the demo page and the SDK from the source tree.

- `BROWSER_SERVER_ENV`: server environment for browser test modules (web root = the source
  tree, so the page and SDK under test are the files in this checkout, not the bundled copy).
- `launch_chromium()`: Chromium with fake camera/mic, loopback ICE, no mDNS hiding, autoplay.
- `sdk_page()`: a blank page of the server's origin with the SDK and a small test harness
  (`window.T`) loaded; `demo_page()`: the demo at `/`.
- `wait_js()`: polls a JS predicate with a generous deadline (no fixed sleeps as assertions).
"""
from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any, Optional

from waiting import wait_until  # noqa: F401 - re-exported for the browser tests

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts" / "interop"

WEB_ROOT = REPO / "Sources" / "MinatoServer" / "Resources" / "web"
BROWSER_SERVER_ENV = {"MINATO_SERVER_WEB_ROOT": str(WEB_ROOT)}
CHROMIUM = os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium")

# Features we must disable; merged with Playwright's own --disable-features list (Chromium keeps
# only the last --disable-features flag, and Playwright passes its own first).
OUR_DISABLED_FEATURES = ["WebRtcHideLocalIpsWithMdns"]
# Playwright 1.5x's list, used if discovering the exact default flag fails.
FALLBACK_PLAYWRIGHT_DISABLED = [
    "AvoidUnnecessaryBeforeUnloadCheckSync", "DestroyProfileOnBrowserClose", "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable", "LensOverlay", "MediaRouter", "PaintHolding",
    "ThirdPartyStoragePartitioning", "AvoidCorsURLLoaderRestartOnRedirect", "OptimizationHints",
    "NetworkTimeServiceQuerying", "AimEnabled", "PreconnectToSearch",
]
CHROMIUM_ARGS = [
    "--use-fake-device-for-media-stream",
    "--use-fake-ui-for-media-stream",
    "--allow-loopback-in-peer-connection",
    "--autoplay-policy=no-user-gesture-required",
    "--no-sandbox",
]


def require_chromium() -> None:
    if not os.access(CHROMIUM, os.X_OK):
        import pytest
        pytest.fail(f"Chromium not found at {CHROMIUM}: run scripts/interop-setup.sh (installs Debian's chromium)",
                    pytrace=False)


def _playwright_disable_features_flag(pw: Any) -> Optional[str]:
    """The exact --disable-features=… flag Playwright passes by default, read from chrome://version
    of a throwaway launch (so `ignore_default_args` can drop it and our merged flag replaces it)."""
    try:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
    except Exception:  # noqa: BLE001
        return None
    try:
        page = b.new_page()
        page.goto("chrome://version")
        line = page.locator("#command_line").inner_text(timeout=10000)
        m = re.search(r"(--disable-features=\S+)", line)
        return m.group(1) if m else None
    except Exception:  # noqa: BLE001
        return None
    finally:
        b.close()


def launch_chromium(pw: Any, marker: Optional[str] = None, *, executable: Optional[str] = None,
                    secure_origin: Optional[str] = None) -> Any:
    """Launches Chromium; `marker` (a word) is added to its command line for kill_chromium().
    `executable`: another binary (a netns.Lab's `chromium_wrapper`, which runs Chromium in that
    namespace); `secure_origin`: a server origin that is not loopback, treated as a secure
    context (getUserMedia and friends need one)."""
    require_chromium()
    default_flag = _playwright_disable_features_flag(pw)
    if default_flag:
        theirs = default_flag.split("=", 1)[1].split(",")
        ignore = [default_flag]
    else:
        theirs, ignore = FALLBACK_PLAYWRIGHT_DISABLED, []
    merged = "--disable-features=" + ",".join(dict.fromkeys(theirs + OUR_DISABLED_FEATURES))
    extra = [f"--minato-test-marker={marker}"] if marker else []
    if secure_origin:
        extra.append(f"--unsafely-treat-insecure-origin-as-secure={secure_origin}")
    return pw.chromium.launch(executable_path=executable or CHROMIUM, args=CHROMIUM_ARGS + [merged] + extra,
                              ignore_default_args=ignore, timeout=60000)


def kill_chromium(marker: str) -> int:
    """SIGKILLs the Chromium launched with `marker` and all its descendants (a killed app: no
    pagehide, no leave, no DTLS close). Returns how many processes were killed."""
    def procs() -> dict[int, tuple[int, str]]:
        out = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            out[int(d)] = (ppid, cmd)
        return out

    table = procs()
    roots = {pid for pid, (_, cmd) in table.items() if f"--minato-test-marker={marker}" in cmd}
    victims = set(roots)
    grew = True
    while grew:
        grew = False
        for pid, (ppid, _) in table.items():
            if ppid in victims and pid not in victims:
                victims.add(pid)
                grew = True
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(victims)


class PageLog:
    """Console output and page errors of one page, written to artifacts/interop/ at the end."""

    def __init__(self, page: Any, label: str) -> None:
        self.label = label
        self.lines: list[str] = []
        t0 = time.monotonic()
        page.on("console", lambda m: self.lines.append(f"{time.monotonic() - t0:7.2f} {m.type}: {m.text}"))
        page.on("pageerror", lambda e: self.lines.append(f"{time.monotonic() - t0:7.2f} PAGEERROR: {e}"))
        page.on("crash", lambda *_: self.lines.append(f"{time.monotonic() - t0:7.2f} CRASH"))

    @property
    def page_errors(self) -> list[str]:
        return [line for line in self.lines if "PAGEERROR" in line]

    def save(self, prefix: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / f"{prefix}-{self.label}.console.log").write_text("\n".join(self.lines) + "\n")


HARNESS_HTML = """<!doctype html><html><head><meta charset="utf-8"><title>SDK harness</title>
<style>body{margin:0;background:#111} video{width:160px;height:120px;background:#000}</style></head>
<body><div id="videos"></div></body></html>"""

# The in-page harness: joins through the SDK, publishes fake camera + mic, subscribes to every
# other member's publications (`maybeSubscribe(publication, options)` passes `options`, e.g.
# `{ preferredEncodingId }`, to subscribe), records events and when the first remote frame was decoded.
HARNESS_JS = r"""
async () => {
  const M = await import('/sdk/minato.js');
  const T = {
    M, context: null, room: null, me: null, events: [], errors: [], subs: new Map(), pubs: {},
    tJoin: null, firstFrameAt: new Map(), subscribedAt: new Map(), publishedAt: null, videos: new Map(), autoSubscribe: true,
    log(type, data) { T.events.push({ t: performance.now(), type, ...data }); },
    async connect(opts = {}) {
      T.context = await M.MinatoContext.create(opts);
      T.context.onFatalError.add((e) => T.errors.push(`${e.name}: ${e.detail}`));
      return true;
    },
    async findOrCreate(name, opts = {}) {
      T.room = await M.SFURoom.findOrCreate(T.context, { name, ...opts });
      const r = T.room;
      for (const ev of ['onMemberJoined', 'onMemberLeft', 'onStreamPublished', 'onStreamUnpublished',
                        'onPublicationEnabled', 'onPublicationDisabled', 'onPublicationMetadataUpdated',
                        'onMemberMetadataUpdated', 'onPublicationSubscribed', 'onPublicationUnsubscribed',
                        'onMetadataUpdated', 'onClosed', 'onMemberListChanged', 'onPublicationListChanged',
                        'onSubscriptionListChanged']) {
        r[ev].add((e = {}) => T.log(ev, {
          member: e.member && { id: e.member.id, name: e.member.name, metadata: e.member.metadata },
          publication: e.publication && { id: e.publication.id, publisherId: e.publication.publisherId,
                                          contentType: e.publication.contentType, state: e.publication.state,
                                          metadata: e.publication.metadata },
          subscription: e.subscription && { id: e.subscription.id, publicationId: e.subscription.publicationId,
                                            subscriberId: e.subscription.subscriberId },
          reason: e.reason, metadata: e.metadata }));
      }
      r.onStreamPublished.add(({ publication }) => { if (T.autoSubscribe) T.maybeSubscribe(publication); });
      return r.id;
    },
    async join(name, opts = {}, media = { audio: true, video: { width: 320, height: 240, frameRate: 15 } }) {
      T.tJoin = performance.now();
      T.me = await T.room.join({ name, ...opts });
      T.me.onLeft.add(({ reason }) => T.log('onLeft', { reason }));
      T.me.onFatalError.add((e) => T.errors.push(`fatal ${e.name}: ${e.detail}`));
      if (media) {
        const ms = await navigator.mediaDevices.getUserMedia(media);
        for (const track of ms.getTracks()) {
          T.pubs[track.kind] = await T.me.publish(track, { metadata: `${name}-${track.kind}` });
        }
        T.publishedAt = performance.now();
      }
      if (T.autoSubscribe) for (const p of T.room.publications) T.maybeSubscribe(p);
      return T.me.id;
    },
    async maybeSubscribe(publication, options = {}) {
      if (!T.me || publication.publisherId === T.me.id || T.subs.has(publication.id)) return;
      T.subs.set(publication.id, null);
      try {
        const { subscription, stream } = await T.me.subscribe(publication.id, options);
        T.subscribedAt.set(publication.id, performance.now());
        T.subs.set(publication.id, { subscription, stream, publisherId: publication.publisherId,
                                     publisherName: publication.publisher && publication.publisher.name,
                                     contentType: publication.contentType });
        const el = document.createElement(publication.contentType === 'video' ? 'video' : 'audio');
        el.dataset.publicationId = publication.id;
        el.muted = true;
        document.getElementById('videos').append(el);
        stream.attach(el);
        T.videos.set(publication.id, el);
        T.watchFirstFrame(publication.id, stream);
      } catch (e) {
        T.subs.delete(publication.id);
        T.errors.push(`subscribe ${publication.id}: ${e.name}: ${e.detail || e.message}`);
      }
    },
    async watchFirstFrame(pid, stream) {
      if (stream.contentType !== 'video') return;
      while (!T.firstFrameAt.has(pid) && !stream.ended) {
        const s = M.summarizeInbound(await stream.getStats());
        if (s.framesDecoded > 0) { T.firstFrameAt.set(pid, performance.now()); break; }
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    // Per live subscription of this page: counters from getStats and the element's size.
    async stats() {
      const out = [];
      for (const [pid, s] of T.subs) {
        if (!s || s.stream.ended) continue;
        const sum = M.summarizeInbound(await s.stream.getStats());
        const el = T.videos.get(pid);
        out.push({ publicationId: pid, publisherId: s.publisherId, publisherName: s.publisherName,
                   contentType: s.contentType, ...sum,
                   videoWidth: el && el.videoWidth || 0, videoHeight: el && el.videoHeight || 0,
                   firstFrameMs: T.firstFrameAt.has(pid) ? T.firstFrameAt.get(pid) - T.tJoin : null,
                   subscribedMs: T.subscribedAt.has(pid) ? T.subscribedAt.get(pid) - T.tJoin : null,
                   publishedMs: T.publishedAt === null ? null : T.publishedAt - T.tJoin });
      }
      return out;
    },
    members() { return T.room.members.map((m) => ({ id: m.id, name: m.name })).sort((a, b) => (a.name > b.name ? 1 : -1)); },
    publications() { return T.room.publications.map((p) => ({ id: p.id, publisherId: p.publisherId, contentType: p.contentType, state: p.state })); },
  };
  window.T = T;
  return M.VERSION;
}
"""


# Methods for a test page's helper object literal (`{ ... /*VIDEO_SUBSCRIPTION*/ }`): `sub()`,
# the page's one video subscription, and `inbound()`, its inbound-rtp video entry (frame size,
# frames decoded, freezes, loss, NACK/PLI counts), null before there is one.
VIDEO_SUBSCRIPTION_METHODS_JS = r"""
    // The page's one video subscription, and its inbound-rtp video entry (null before one).
    sub() {
      const s = [...T.subs.values()].find((x) => x && x.contentType === 'video');
      return s ? s.subscription : null;
    },
    async inbound() {
      const sub = this.sub();
      let out = null;
      if (!sub) return out;
      (await sub.getStats()).forEach((s) => {
        if (s.type === 'inbound-rtp' && s.kind === 'video') {
          out = { frameWidth: s.frameWidth || 0, frameHeight: s.frameHeight || 0, framesDecoded: s.framesDecoded || 0,
                  framesDropped: s.framesDropped || 0, keyFramesDecoded: s.keyFramesDecoded || 0,
                  freezeCount: s.freezeCount || 0, totalFreezesDuration: s.totalFreezesDuration || 0,
                  bytesReceived: s.bytesReceived || 0, packetsReceived: s.packetsReceived || 0,
                  packetsLost: s.packetsLost || 0, nackCount: s.nackCount || 0, pliCount: s.pliCount || 0,
                  firCount: s.firCount || 0, fps: s.framesPerSecond || 0, ssrc: s.ssrc };
        }
      });
      return out;
    },
"""


def close_page(page: Any, log: "PageLog", name: str) -> None:
    """Saves a Chromium page's console log under `name` and closes its context (if not gone yet)."""
    log.save(name)
    try:
        page.context.close()
    except Exception:  # noqa: BLE001 - already gone
        pass


def sdk_page(browser: Any, server: Any, label: str) -> tuple[Any, PageLog]:
    """A page of the server's origin (a blank document served by route) with window.T."""
    context = browser.new_context(viewport={"width": 640, "height": 480})
    page = context.new_page()
    log = PageLog(page, label)
    # A document of the server's own origin (so the page may reach it: Chromium's local network
    # access checks block a page that Playwright fulfils itself), rewritten to a blank harness.
    page.goto(server.http + "/healthz")
    page.set_content(HARNESS_HTML)
    page.evaluate(HARNESS_JS)
    return page, log


def demo_page(browser: Any, server: Any, label: str, viewport: Optional[dict] = None) -> tuple[Any, PageLog]:
    context = browser.new_context(viewport=viewport or {"width": 1280, "height": 800})
    page = context.new_page()
    log = PageLog(page, label)
    page.goto(server.http + "/")
    page.wait_for_selector("body[data-ready='true']", timeout=20000)
    return page, log


def wait_js(page: Any, expr: str, arg: Any = None, timeout: float = 20.0, what: str = "",
            interval: float = 0.2) -> Any:
    """Polls `expr` (a JS function source, awaited, taking `arg`) until it returns a truthy value."""
    return wait_until(lambda: page.evaluate(expr, arg), timeout, what or expr, interval=interval)


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1, default=str)[:4000]
