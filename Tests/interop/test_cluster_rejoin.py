"""The SDKs rejoin a room whose node failed (docs/sdk.md "Several servers and node failures",
docs/sdk-swift.md): three Minato nodes sharing one Redis (cluster.py), `cluster.leaseMs` 2000.

(a) Chromium with the browser SDK: a publisher page and a subscriber page, each given the three
    nodes' URLs, in a room hosted on node H. H is SIGKILLed; both pages rejoin the room by name
    on a live node, the publisher re-publishes the same camera track and the subscriber
    re-subscribes to it by publisher name and decodes again. Five runs: three with both pages'
    sockets on the other two nodes (the pages hear `closed`/`nodeFailed`: onReconnecting
    'nodeFailed'), one with the subscriber's socket on H and one with the publisher's (that page
    loses its socket, reconnects to the next URL and finds its member gone: 'memberLost').
    Kill -> the subscriber decoding again (the first frame its new subscription decodes, polled
    every 100 ms in the page) is printed as `CLUSTER_REJOIN kill->decoding p50=…s max=…s
    runs=[…]` and written to artifacts/interop/cluster-rejoin.json; only a generous cap is asserted.
(b) The Swift SDK: the `minato-client publish` bot, given the three URLs, publishes through a
    node that does not host the room and subscribes to a Chromium page's camera; H is
    SIGKILLed; the bot rejoins, re-publishes and re-subscribes: the page receives the bot's
    stream again and the bot the page's.

The killed node is started again at the end of each run, so runs are independent. The nodes
serve the SDK from the source tree (`server.webRoot`) and accept WebSockets from each other's
pages (`server.allowedOrigins`): a page loaded from one node talks to all three.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
import urllib.parse
from typing import Any, Optional

import pytest

import browser
from browser import HARNESS_HTML, WEB_ROOT, PageLog, close_page, dump, wait_js
from cluster import CLIENT_ADDR, NODE_PORT, Cluster, node_addr, request, running_cluster
from conftest import ARTIFACTS, REPO
from minato_client import unique_name
from waiting import wait_until

NODES = (1, 2, 3)
NODE_IDS = {f"n{i}": i for i in NODES}
NODE_ENV = {
    "MINATO_SERVER_WEB_ROOT": str(WEB_ROOT),
    "MINATO_SERVER_ALLOWED_ORIGINS": ",".join(f"http://{node_addr(i)}:{NODE_PORT}" for i in NODES),
}
# Which page's socket is on the node that is killed, per run of (a).
RUNS = ("neither", "neither", "neither", "subscriber", "publisher")
CAP_SEC = 20.0
FRAMES_AFTER = 30

pytestmark = pytest.mark.timeout(150)


@pytest.fixture(scope="module")
def chromium(pw):
    """Chromium as browser.launch_chromium makes it, and with the nodes' origins treated as
    secure: the pages are loaded from node 1 over plain HTTP at a non-loopback address, where
    Chromium otherwise offers no camera (navigator.mediaDevices)."""
    browser.require_chromium()
    default_flag = browser._playwright_disable_features_flag(pw)
    theirs = default_flag.split("=", 1)[1].split(",") if default_flag else browser.FALLBACK_PLAYWRIGHT_DISABLED
    merged = "--disable-features=" + ",".join(dict.fromkeys(theirs + browser.OUR_DISABLED_FEATURES))
    secure = "--unsafely-treat-insecure-origin-as-secure=" + NODE_ENV["MINATO_SERVER_ALLOWED_ORIGINS"]
    b = pw.chromium.launch(executable_path=browser.CHROMIUM, args=browser.CHROMIUM_ARGS + [merged, secure],
                           ignore_default_args=[default_flag] if default_flag else [], timeout=60000)
    yield b
    b.close()


@pytest.fixture(scope="module")
def cluster():
    with running_cluster(len(NODES), label="cluster-rejoin", aioice=False, **NODE_ENV) as c:
        yield c


def restart(c: Cluster, i: int) -> None:
    """Starts node i again after a kill and waits until it is registered."""
    if not c.alive(i):
        c.start_node(i, **NODE_ENV)
    c.wait_ready(i)


def create_room(c: Cluster, name: str) -> tuple[str, int]:
    """Creates a named room through the admin API (the cluster places it, answering 307 to the
    node it chose) and returns its id and host, the `nodeId` of `GET /v1/rooms`."""
    url = c.node_url(1) + "/v1/rooms"
    for _ in range(3):
        r = request("POST", url, {"name": name}, bearer=c.admin_secret)
        if r.status == 307:
            url = urllib.parse.urljoin(url, r.header("location"))
            continue
        assert r.status == 201, f"POST {url}: {r}"
        room_id = r.json["room"]["id"]
        break
    else:
        raise AssertionError(f"POST /v1/rooms for {name}: redirected three times")
    last: list = [None]

    def listed() -> Optional[int]:
        status, _, body = c.admin(1, "GET", "/v1/rooms")
        rooms = body.get("rooms", []) if isinstance(body, dict) else []
        last[0] = (status, rooms)
        mine = [x for x in rooms if x.get("id") == room_id]
        return NODE_IDS.get(mine[0].get("nodeId")) if mine else None
    host = wait_until(listed, 5, f"room {room_id} in GET /v1/rooms with its nodeId", interval=0.1,
                      state=lambda: last[0])
    return room_id, host


def client_binary() -> str:
    """The Swift SDK's bot (test_swift_sdk.py's)."""
    return os.environ.get("MINATO_CLIENT_BIN") or str(REPO / ".build" / "debug" / "minato-client")


def url_list(c: Cluster, first: int) -> list[str]:
    """The three nodes' WebSocket URLs, `first` first."""
    return [c.ws_url(first)] + [c.ws_url(i) for i in NODES if i != first]


# The in-page harness: one context, one room, one member; records the room's reconnect events
# and, from `arm()` on, when the first subscription made after it first decodes a frame.
PAGE_JS = r"""
async () => {
  const M = await import('/sdk/minato.js');
  const R = {
    M, ctx: null, room: null, me: null, pub: null, stream: null, subscriptions: 0, events: [], errors: [],
    armedAt: null, killAt: null, subscriptionsAtArm: 0, decodingAt: null,
    log(type, data = {}) { R.events.push({ t: Date.now(), type, ...data }); },
    async start({ urls, room, name, publish }) {
      R.events = []; R.errors = []; R.stream = null; R.pub = null; R.subscriptions = 0;
      R.armedAt = null; R.killAt = null; R.decodingAt = null;
      R.ctx = await M.MinatoContext.create({ urls, reconnectDelayMs: 200, leaveOnPageHide: false });
      R.ctx.onFatalError.add((e) => R.errors.push(`context ${e.name}: ${e.detail}`));
      R.room = await M.SFURoom.findOrCreate(R.ctx, { name: room });
      R.room.onReconnecting.add(({ reason }) => R.log('reconnecting', { reason }));
      R.room.onReconnected.add(({ reason, missing }) => R.log('reconnected', { reason, missing }));
      R.room.onClosed.add(() => R.log('closed'));
      R.me = await R.room.join({ name, metadata: `${name}-meta` });
      R.me.onLeft.add(({ reason }) => R.log('left', { reason }));
      R.me.onFatalError.add((e) => R.errors.push(`member ${e.name}: ${e.detail}`));
      // Every subscription, the first and the ones the SDK makes again after a rejoin: show it.
      R.me.onStreamSubscribed.add(({ subscription, stream }) => {
        R.subscriptions += 1;
        R.stream = stream;
        R.log('subscribed', { id: subscription.id });
        const el = document.querySelector('video') || document.body.appendChild(document.createElement('video'));
        el.muted = true;
        stream.attach(el);
      });
      if (publish) {
        const ms = await navigator.mediaDevices.getUserMedia({ video: { width: 320, height: 240, frameRate: 15 } });
        R.pub = await R.me.publish(ms.getVideoTracks()[0], { metadata: 'camera' });
      }
      return { roomId: R.room.id, memberId: R.me.id, url: R.ctx.url };
    },
    async subscribeTo(publisherName) {
      const find = () => R.room.publications.find((p) => p.contentType === 'video' && p.publisher
                                                   && p.publisher.name === publisherName);
      const p = find() || (await R.room.onStreamPublished.watch(() => !!find(), 20000), find());
      await R.me.subscribe(p.id);
      return p.id;
    },
    // Counters of the current subscription's video receiver (null before one, or once it ended).
    async inbound() {
      if (!R.stream || R.stream.ended) return null;
      let out = null;
      (await R.stream.getStats()).forEach((s) => {
        if (s.type === 'inbound-rtp' && s.kind === 'video') {
          out = { framesDecoded: s.framesDecoded || 0, framesReceived: s.framesReceived || 0,
                  packetsReceived: s.packetsReceived || 0 };
        }
      });
      return out;
    },
    arm() { R.armedAt = Date.now(); R.subscriptionsAtArm = R.subscriptions; R.decodingAt = null; },
    // Every 100 ms: has a subscription made since arm() decoded its first frame?
    async poll() {
      for (;;) {
        await new Promise((r) => setTimeout(r, 100));
        if (R.armedAt === null || R.decodingAt !== null || R.subscriptions <= R.subscriptionsAtArm) continue;
        const s = await R.inbound();
        if (s && s.framesDecoded > 0) R.decodingAt = Date.now();
      }
    },
    view() {
      return { roomId: R.room.id, roomState: R.room.state, memberId: R.me.id, memberState: R.me.state,
               roomOfMember: R.me.room === R.room, pubId: R.pub && R.pub.id,
               pubIsMine: !!R.pub && R.me.publications.includes(R.pub), url: R.ctx.url,
               members: R.room.members.map((m) => m.name).sort(), events: R.events, errors: R.errors };
    },
    stop() { if (R.ctx) R.ctx.dispose(); R.ctx = null; },
  };
  window.R = R;
  R.poll();
  return M.VERSION;
}
"""


def new_page(browser: Any, c: Cluster, label: str) -> tuple[Any, PageLog]:
    """A page of node 1's origin with window.R (it keeps working while node 1 is down: the SDK
    is loaded, and its sockets go to whichever node its URL list names)."""
    context = browser.new_context(viewport={"width": 400, "height": 300})
    page = context.new_page()
    log = PageLog(page, label)
    page.goto(c.node_url(1) + "/healthz")
    page.set_content(HARNESS_HTML)
    page.evaluate(PAGE_JS)
    return page, log


def events_of(page: Any, type_: str) -> list[dict]:
    return [e for e in page.evaluate("R.events") if e["type"] == type_]


def describe(c: Cluster, pages: dict[str, Any]) -> str:
    parts = []
    for label, page in pages.items():
        try:
            parts.append(f"{label}: {dump(page.evaluate('R.view()'))}")
        except Exception as e:  # noqa: BLE001 - a diagnostic only
            parts.append(f"{label}: (no view: {e})")
    return "\n".join(parts) + "\n" + c.describe()


def test_browser_pages_rejoin_after_the_host_dies(cluster, chromium, request, capsys):
    c = cluster
    pub, pub_log = new_page(chromium, c, "publisher")
    sub, sub_log = new_page(chromium, c, "subscriber")
    pages = {"publisher": pub, "subscriber": sub}
    results: list[dict] = []
    try:
        for run, on_host in enumerate(RUNS):
            name = unique_name("rejoin")
            room_id, host = create_room(c, name)
            others = [i for i in NODES if i != host]
            pub_node, sub_node = {"neither": (others[0], others[1]), "subscriber": (others[0], host),
                                  "publisher": (host, others[0])}[on_host]
            try:
                p = pub.evaluate("(a) => R.start(a)", {"urls": url_list(c, pub_node), "room": name, "name": "pub",
                                                       "publish": True})
                s = sub.evaluate("(a) => R.start(a)", {"urls": url_list(c, sub_node), "room": name, "name": "sub",
                                                       "publish": False})
                assert p["roomId"] == s["roomId"] == room_id, (p, s, room_id)
                assert (p["url"], s["url"]) == (c.ws_url(pub_node), c.ws_url(sub_node)), (p, s)
                sub.evaluate("() => R.subscribeTo('pub')")
                wait_js(sub, "async () => { const s = await R.inbound(); return s && s.framesDecoded > 10; }",
                        timeout=20, what="the subscriber to decode the publisher's camera")
                before = {"pub": pub.evaluate("R.view()"), "sub": sub.evaluate("R.view()")}

                sub.evaluate("R.arm()")
                killed_at = time.time()
                c.kill_node(host)
                sub.evaluate("(t) => { R.killAt = t; }", killed_at * 1000)
                wait_js(sub, "() => R.decodingAt !== null", timeout=CAP_SEC + 5,
                        what=f"the subscriber to decode again after n{host} was killed", interval=0.1)
                took = (sub.evaluate("R.decodingAt") - killed_at * 1000) / 1000
                wait_js(sub, "async (n) => { const s = await R.inbound(); return s && s.framesDecoded >= n; }",
                        FRAMES_AFTER, timeout=15, what=f"the subscriber to decode {FRAMES_AFTER} frames after the rejoin")
                for label, page in pages.items():
                    wait_js(page, "() => R.events.some((e) => e.type === 'reconnected')", timeout=15,
                            what=f"{label}: onReconnected")
                after = {"pub": pub.evaluate("R.view()"), "sub": sub.evaluate("R.view()")}
            except BaseException:
                print(describe(c, pages))
                raise

            for label, node in (("pub", pub_node), ("sub", sub_node)):
                view = after[label]
                want = "memberLost" if node == host else "nodeFailed"
                reasons = [(e["type"], e.get("reason")) for e in view["events"]
                           if e["type"] in ("reconnecting", "reconnected", "closed", "left")]
                assert reasons == [("reconnecting", want), ("reconnected", want)], \
                    f"run {run} ({label}'s socket on n{node}, room on n{host}): events {reasons}, " \
                    f"expected onReconnecting/onReconnected with {want!r}\n{dump(view)}"
                assert [e["missing"] for e in view["events"] if e["type"] == "reconnected"] == [[]], dump(view)
                assert view["errors"] == [], f"run {run} {label}: SDK errors {view['errors']}"
                # The same SFURoom and member objects, with the new room's ids, on a live node.
                assert view["roomState"] == "opened" and view["memberState"] == "joined" and view["roomOfMember"]
                assert view["roomId"] != before[label]["roomId"] and view["memberId"] != before[label]["memberId"]
                assert NODE_IDS.get(view["roomId"].split(".")[0]) in others, dump(view)
                assert view["members"] == ["pub", "sub"], dump(view)
            # The publisher's RoomPublication object is the re-published stream's.
            assert after["pub"]["pubIsMine"] and after["pub"]["pubId"] != before["pub"]["pubId"], dump(after["pub"])
            assert len([e for e in after["sub"]["events"] if e["type"] == "subscribed"]) == 2, dump(after["sub"])

            results.append({"run": run, "socketOnKilledNode": on_host, "killedNode": f"n{host}",
                            "publisherNode": f"n{pub_node}", "subscriberNode": f"n{sub_node}",
                            "newRoomNode": after["sub"]["roomId"].split(".")[0], "killToDecodingSec": round(took, 3)})
            with capsys.disabled():
                print(f"\n  run {run}: room on n{host} killed, publisher on n{pub_node}, subscriber on n{sub_node}: "
                      f"decoding again {took:.2f} s after the kill (room now on {results[-1]['newRoomNode']})")
            assert took <= CAP_SEC, f"run {run}: decoding again only {took:.1f} s after the kill"
            for page in pages.values():
                page.evaluate("R.stop()")
            restart(c, host)
    finally:
        for page in pages.values():
            try:
                page.evaluate("R.stop()")
            except Exception:  # noqa: BLE001 - the page may be gone
                pass
        for i in NODES:
            if not c.alive(i):
                restart(c, i)
        close_page(pub, pub_log, request.node.name)
        close_page(sub, sub_log, request.node.name)

    times = [r["killToDecodingSec"] for r in results]
    summary = {"p50Sec": round(statistics.median(times), 3), "maxSec": round(max(times), 3), "runs": results,
               "leaseMs": 2000}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "cluster-rejoin.json").write_text(json.dumps(summary, indent=1) + "\n")
    with capsys.disabled():
        print(f"\nCLUSTER_REJOIN kill->decoding p50={summary['p50Sec']:.2f}s max={summary['maxSec']:.2f}s "
              f"runs=[{', '.join(f'{t:.2f}' for t in times)}]")


def test_swift_bot_rejoins_publishes_and_subscribes_again(cluster, chromium, request, capsys):
    c = cluster
    name = unique_name("rejoin-swift")
    room_id, host = create_room(c, name)
    bot_node, page_node = [i for i in NODES if i != host]
    page, log = new_page(chromium, c, "swift-page")
    seconds = 16
    cmd = [client_binary(), "publish", *[a for u in url_list(c, bot_node) for a in ("--url", u)],
           "--ice-address", CLIENT_ADDR, "--room", name, "--name", "swift-bot", "--subscribe-to", "page",
           "--seconds", str(seconds)]
    bot = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        try:
            page.evaluate("(a) => R.start(a)", {"urls": url_list(c, page_node), "room": name, "name": "page",
                                                "publish": True})
            page.evaluate("() => R.subscribeTo('swift-bot')")
            # The bot's VP8 is synthetic (real payload headers and key-frame bits, no picture):
            # Chromium receives and assembles its frames but cannot decode them.
            wait_js(page, "async () => { const s = await R.inbound(); return s && s.framesReceived > 10; }",
                    timeout=20, what="the page to receive the bot's video")
            wait_js(page, "() => R.room.subscriptions.some((s) => s.publicationId === R.pub.id)", timeout=20,
                    what="the bot to subscribe to the page's camera")
            killed_at = time.monotonic()
            c.kill_node(host)
            wait_js(page, "async () => { const s = await R.inbound(); return R.subscriptions === 2 && s && s.framesReceived >= 30; }",
                    timeout=CAP_SEC, what=f"the page to receive the bot's video again after n{host} was killed")
            took = time.monotonic() - killed_at
            view = page.evaluate("R.view()")
        except BaseException:
            print(describe(c, {"page": page}))
            raise
        out, err = bot.communicate(timeout=seconds + 30)
        assert bot.returncode == 0, f"{' '.join(cmd)} exited {bot.returncode}\n{err[-3000:]}"
        result = json.loads(out.strip().splitlines()[-1])
        with capsys.disabled():
            print(f"\n  swift bot on n{bot_node}, room on n{host} killed: the page received its video again "
                  f"{took:.2f} s after the kill; bot: {json.dumps(result['rejoins'])}")
        # Its connection events, less the in-place recovery it may have begun when its media
        # stalled with the node (a rejoin supersedes it).
        rejoins = [r for r in result["rejoins"] if r["event"] in ("reconnecting", "reconnected", "failed")]
        assert [(r["event"], r["reason"]) for r in rejoins] == [("reconnecting", "nodeFailed"), ("reconnected", "nodeFailed")], \
            f"the bot's connection events: {rejoins}\n{err[-3000:]}"
        assert len(rejoins[1]["publications"]) == 1 and len(rejoins[1]["subscriptions"]) == 1, rejoins
        assert rejoins[1]["missing"] == [], rejoins
        # The bot's one sink counts on across the rejoin: the page's camera arrives again.
        after = result["packetsReceived"] - rejoins[1]["packetsReceived"]
        assert after >= 50, f"the bot received {after} packets of the page's camera after its rejoin: {result}"
        assert rejoins[1]["publications"] != result["firstPublications"], result
        assert result["roomId"] != room_id and NODE_IDS.get(result["roomId"].split(".")[0]) in (bot_node, page_node), result
        reasons = [(e["type"], e.get("reason")) for e in view["events"] if e["type"] in ("reconnecting", "reconnected")]
        assert reasons == [("reconnecting", "nodeFailed"), ("reconnected", "nodeFailed")], dump(view)
        assert view["roomId"] == result["roomId"] and view["errors"] == [], dump(view)
    finally:
        if bot.poll() is None:
            bot.kill()
            bot.communicate()
        try:
            page.evaluate("R.stop()")
        except Exception:  # noqa: BLE001 - the page may be gone
            pass
        restart(c, host)
        close_page(page, log, request.node.name)
