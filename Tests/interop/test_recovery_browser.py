"""The browser SDK recovers by itself (issue 25 item 4): a Chromium page in a second network
namespace (netns.Lab, the server on the veth's host side) publishes camera + mic and subscribes
to another page's, which runs in the test's namespace and does the same. Two cases:

- Address change mid-call: the lab side's address is replaced with another one from
  198.18.0.0/15 (the old one removed first, `Lab.readdress`), as a handover does. Nothing tells
  the page but the browser itself (its `online` event, ICE going `disconnected`): the SDK finds
  its signaling socket dead (a probe goes unanswered), reconnects from the new address, takes its
  member back with its reconnectSecret, and restarts ICE on both connections (`negotiate` with an
  ICE-restart offer for the send connection, `restartIce {direction: "recv"}` for the receive
  one). Measured: from the change to decoding resumed on both legs (the lab page decoding the
  other's camera, the other page decoding the lab's), and frames lost; asserted: both legs decode
  again within RESUME_MAX_SEC, member, publication and subscription ids unchanged, both
  connections' selected local candidate is the new address, the SDK's onReconnecting /
  onReconnected events came for media (both directions).
- Signaling drop: TCP to and from the signaling port dropped (nftables in the lab) for 8 s
  mid-call. Media must keep flowing throughout (frames per second on both legs within
  FPS_MIN_SHARE of before, no stall longer than STALL_MAX_SEC, no ICE restart); the SDK notices
  the silent socket (its heartbeat probe), reconnects once TCP passes again, takes its member
  back, and receives every event that happened meanwhile exactly once (another member joins,
  the other page updates its member's and its publication's metadata, the new member updates its
  own).

"Decoding resumed" is the first decoded frame after which decoding goes on for STEADY_SEC with
no gap of STALL_MAX_SEC (framesDecoded of the inbound video, sampled in the page every 100 ms);
"frames lost" is the frame rate before the change times the time from the change to the end of
that steady stretch, minus the frames decoded in it.

RECOVERY_RUNS (default 1) repeats each case that many times in the same call (a new address
each time; `make bench-recovery` runs 10) and prints p50/max; every run's numbers go to
artifacts/interop/recovery-address-change.json and recovery-signaling-drop.json.
"""
from __future__ import annotations

import json
import os
import statistics
import time

import pytest

import browser
from browser import BROWSER_SERVER_ENV, close_page, sdk_page, wait_js
from conftest import ARTIFACTS, running_server
from minato_client import unique_name
from netns import Lab
from waiting import wait_until

RUNS = int(os.environ.get("RECOVERY_RUNS", "1"))
pytestmark = pytest.mark.timeout(120 + 60 * RUNS)

HOST_ADDR, PEER_ADDR = "198.18.0.1", "198.18.0.2"
MINATO_SERVER_ENV = {
    **BROWSER_SERVER_ENV,
    # Media on the veth's address only (the lab page reaches nothing else).
    "MINATO_MEDIA_ICE_LOCAL_ADDRESSES": HOST_ADDR,
}
MEDIA = {"audio": True, "video": {"width": 320, "height": 240, "frameRate": 30}}

RESUME_MAX_SEC = 20.0
STEADY_SEC = 2.0
STALL_MAX_SEC = 0.5
BLOCK_SEC = 8.0
FPS_MIN_SHARE = 0.8
BASELINE_SEC = 3.0

HELPERS_JS = r"""
() => {
  const R = {
    samples: [], rec: [], timer: null,
    start() {
      const me = T.me;
      const on = (name) => me[name].add((e) => R.rec.push({ t: Date.now(), type: name, ...e }));
      on('onReconnecting'); on('onReconnected'); on('onConnectionQualityChanged');
      T.context.onConnectionStateChanged.add((s) => R.rec.push({ t: Date.now(), type: 'connectionState', state: s }));
      R.timer = setInterval(async () => {
        const s = [...T.subs.values()].find((x) => x && x.contentType === 'video');
        if (!s) return;
        const sum = T.M.summarizeInbound(await s.stream.getStats());
        R.samples.push([Date.now(), sum.framesDecoded]);
        if (R.samples.length > 20000) R.samples.splice(0, 10000);
      }, 100);
      return true;
    },
    since(t) { return R.samples.filter((x) => x[0] >= t); },
    recSince(t) { return R.rec.filter((x) => x.t >= t); },
    async selected() {
      const out = {};
      for (const [dir, pc] of [['send', T.me.sendConnection], ['recv', T.me.receiveConnection]]) {
        const r = await pc.getStats();
        out[dir] = null;
        r.forEach((s) => {
          if (s.type === 'transport' && s.selectedCandidatePairId) {
            const p = r.get(s.selectedCandidatePairId); const c = p && r.get(p.localCandidateId);
            out[dir] = c ? (c.address || c.ip) : null;
          }
        });
      }
      return out;
    },
    ids() {
      return {
        member: T.me.id, left: T.me._left, state: T.context.connectionState,
        publications: Object.fromEntries(Object.entries(T.pubs).map(([k, p]) => [k, p.id])),
        subscriptions: [...T.subs.values()].filter(Boolean).map((s) => s.subscription.id).sort(),
        roomPublications: T.room.publications.map((p) => p.id).sort(),
        roomSubscriptions: T.room.subscriptions.map((s) => s.id).sort(),
        restarts: T.me.iceRestarts, quality: T.me.connectionQuality,
      };
    },
  };
  window.R = R;
  return true;
}
"""


# ---- fixtures ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lab():
    with Lab(host_addr=HOST_ADDR, peer_addr=PEER_ADDR) as lab:
        yield lab


@pytest.fixture(scope="module")
def server(lab):
    """conftest's server, but listening (HTTP/WS and media) on the veth's address."""
    with running_server("test_recovery_browser", MINATO_SERVER_ENV, host=lab.host_addr) as srv:
        yield srv


@pytest.fixture(scope="module")
def chromium(pw, server):
    """The other member's Chromium, in the test's namespace."""
    b = browser.launch_chromium(pw, secure_origin=server.http)
    yield b
    b.close()


@pytest.fixture(scope="module")
def chromium_lab(pw, lab, server):
    """The recovering member's Chromium, inside the lab's namespace."""
    b = browser.launch_chromium(pw, executable=str(lab.chromium_wrapper(browser.CHROMIUM)), secure_origin=server.http)
    yield b
    b.close()


@pytest.fixture
def call(request, server, lab, chromium, chromium_lab):
    """A room with the lab page ("lab") and the other page ("peer"), each publishing camera + mic
    and decoding the other's camera; yields (lab page, peer page)."""
    made = []
    room = unique_name("recovery")
    pages = {}
    for who, b in (("lab", chromium_lab), ("peer", chromium)):
        page, log = sdk_page(b, server, f"recovery-{who}")
        made.append((page, log))
        page.evaluate(HELPERS_JS)
        page.evaluate("(o) => T.connect(o)", {"debug": True} if who == "lab" else {})
        page.evaluate("(n) => T.findOrCreate(n)", room)
        page.evaluate("([n, m]) => T.join(n, {}, m)", [who, MEDIA])
        pages[who] = page
    for who, page in pages.items():
        wait_js(page, "() => [...T.subs.values()].filter(Boolean).length === 2", timeout=20, what=f"{who} subscribed to both")
        wait_js(page, "() => T.firstFrameAt.size > 0", timeout=20, what=f"{who}'s first remote frame")
        page.evaluate("R.start()")
    local = pages["lab"].evaluate("R.selected()")
    assert local == {"send": lab.peer_addr, "recv": lab.peer_addr}, f"the lab page's candidates: {local}"
    yield pages["lab"], pages["peer"]
    for page, log in made:
        close_page(page, log, request.node.name)


# ---- measuring --------------------------------------------------------------------------------

def samples_since(page, t: float) -> list[tuple[float, int]]:
    return [(ms / 1000.0, f) for ms, f in page.evaluate("(t) => R.since(t)", t * 1000)]


def resumed_after(samples: list[tuple[float, int]], t0: float) -> float | None:
    """Seconds from t0 to the first decoded frame after which decoding goes on for STEADY_SEC
    with no gap longer than STALL_MAX_SEC; None while there is none yet."""
    s = [x for x in samples if x[0] >= t0]
    for i in range(1, len(s)):
        t, f = s[i]
        if f <= s[i - 1][1]:
            continue
        last, prev, ok = t, f, True
        for t2, f2 in s[i + 1:]:
            if t2 > t + STEADY_SEC:
                break
            if f2 > prev:
                last, prev = t2, f2
            elif t2 - last > STALL_MAX_SEC:
                ok = False
                break
        if ok and s[-1][0] >= t + STEADY_SEC:
            return t - t0
    return None


def steady(page) -> bool:
    """The page has decoded more than 10 frames/s over the last BASELINE_SEC (and has samples
    that old)."""
    now = time.time()
    s = samples_since(page, now - BASELINE_SEC - 0.5)
    return bool(s) and s[0][0] <= now - BASELINE_SEC + 0.2 and fps(s, now - BASELINE_SEC, now) > 10


def fps(samples: list[tuple[float, int]], t0: float, t1: float) -> float:
    w = [x for x in samples if t0 <= x[0] <= t1]
    if len(w) < 2 or w[-1][0] <= w[0][0]:
        return 0.0
    return (w[-1][1] - w[0][1]) / (w[-1][0] - w[0][0])


def longest_stall(samples: list[tuple[float, int]], t0: float, t1: float) -> float:
    w = [x for x in samples if t0 <= x[0] <= t1]
    longest, last = 0.0, None
    for (ta, fa), (tb, fb) in zip(w, w[1:]):
        if last is None:
            last = ta
        if fb > fa:
            longest = max(longest, tb - last)
            last = tb
    if w and last is not None:
        longest = max(longest, w[-1][0] - last)
    return longest


def frames_at(samples: list[tuple[float, int]], t: float) -> int:
    before = [f for ts, f in samples if ts <= t]
    return before[-1] if before else samples[0][1]


def frames_lost(samples: list[tuple[float, int]], t0: float, t1: float, rate: float) -> int:
    return max(0, round(rate * (t1 - t0)) - (frames_at(samples, t1) - frames_at(samples, t0)))


def say(capsys, *lines: str) -> None:
    with capsys.disabled():
        print("\n".join(lines))


def summary(values: list[float]) -> str:
    if not values:
        return "none"
    return f"p50 {statistics.median(values):.2f} max {max(values):.2f}"


def write_runs(name: str, runs: list[dict]) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / name).write_text(json.dumps({"runs": runs}, indent=1))


# ---- address change -----------------------------------------------------------------------------

def test_address_change_mid_call_restarts_ice_by_itself(server, lab, call, capsys):
    lab_page, peer = call
    before_ids = {"lab": lab_page.evaluate("R.ids()"), "peer": peer.evaluate("R.ids()")}
    runs = []
    for run in range(RUNS):
        new_addr = f"198.18.{1 + run // 200}.{2 + run % 200}"
        # A steady baseline first (the previous run's recovery is over).
        wait_until(lambda: steady(lab_page) and steady(peer), 20, "both pages decoding before the change", interval=0.5)
        restarts_before = lab_page.evaluate("T.me.iceRestarts")
        lab_page.evaluate("(a) => console.debug(`[test] address change to ${a}`)", new_addr)
        t_change = time.time()
        old_addr = lab.readdress(new_addr)
        legs = {"peer->lab": lab_page, "lab->peer": peer}
        resumed: dict[str, float] = {}

        def both_resumed() -> bool:
            for leg, page in legs.items():
                if leg not in resumed:
                    r = resumed_after(samples_since(page, t_change - BASELINE_SEC), t_change)
                    if r is not None:
                        resumed[leg] = r
            return len(resumed) == len(legs)

        wait_until(both_resumed, RESUME_MAX_SEC + STEADY_SEC + 2, f"both legs decoding again after {old_addr} -> {new_addr}",
                   interval=0.25, state=lambda: {"resumed": resumed, "lab": lab_page.evaluate("R.ids()"),
                                                 "rec": lab_page.evaluate("(t) => R.recSince(t)", t_change * 1000)})
        result = {"run": run, "from": old_addr, "to": new_addr}
        for leg, page in legs.items():
            s = samples_since(page, t_change - BASELINE_SEC - 1)
            rate = fps(s, t_change - BASELINE_SEC, t_change)
            t_end = t_change + resumed[leg] + STEADY_SEC
            result[leg] = {"resumedSec": round(resumed[leg], 3), "framesLost": frames_lost(s, t_change, t_end, rate),
                           "fpsBefore": round(rate, 1), "stallSec": round(longest_stall(s, t_change, t_end), 3),
                           "samples": [(round(t - t_change, 2), f) for t, f in s if t_change - 0.5 <= t <= t_end]}
        rec = lab_page.evaluate("(t) => R.recSince(t)", t_change * 1000)
        result["events"] = [{k: v for k, v in e.items() if k in ("type", "kind", "direction", "reason", "durationMs",
                                                                   "restarts", "state", "quality")} | {"t": round(e["t"] / 1000 - t_change, 3)}
                            for e in rec]
        # Both connections moved to the new address (their restarts may still be settling).
        wait_js(lab_page, "async (a) => { const s = await R.selected(); return s.send === a && s.recv === a; }", new_addr,
                timeout=10, what=f"the lab page's selected candidates on {new_addr}")
        result["restarts"] = {d: lab_page.evaluate("T.me.iceRestarts")[d] - restarts_before[d] for d in ("send", "recv")}
        signaling = [e for e in rec if e["type"] == "onReconnected" and e.get("kind") == "signaling"]
        result["signalingReconnectedSec"] = round(signaling[0]["t"] / 1000 - t_change, 3) if signaling else None
        runs.append(result)
        say(capsys, f"\n[recovery] address change {run + 1}/{RUNS} {old_addr} -> {new_addr}: decoding resumed "
                    f"peer->lab {result['peer->lab']['resumedSec']:.2f} s ({result['peer->lab']['framesLost']} frames lost, "
                    f"{result['peer->lab']['fpsBefore']:.0f} fps before), lab->peer {result['lab->peer']['resumedSec']:.2f} s "
                    f"({result['lab->peer']['framesLost']} frames lost); ICE restarts send {result['restarts']['send']} "
                    f"recv {result['restarts']['recv']}; signaling back after {result['signalingReconnectedSec']} s",
            "[recovery]   lab page events: " + " ".join(
                f"{e['t']:.2f}:{e['type'].removeprefix('on')}/{e.get('kind') or e.get('state') or e.get('quality')}"
                f"{'/' + e['direction'] if e.get('direction') else ''}{'/' + e['reason'] if e.get('reason') else ''}"
                for e in result["events"]))
        # The SDK restarted ICE on both connections by itself and said so.
        assert result["restarts"]["send"] >= 1 and result["restarts"]["recv"] >= 1, result
        for direction in ("send", "recv"):
            assert any(e["type"] == "onReconnecting" and e.get("kind") == "media" and e.get("direction") == direction
                       for e in rec), (direction, result["events"])
            assert any(e["type"] == "onReconnected" and e.get("kind") == "media" and e.get("direction") == direction
                       for e in rec), (direction, result["events"])
        for leg in legs:
            assert result[leg]["resumedSec"] <= RESUME_MAX_SEC, result
    write_runs("recovery-address-change.json", runs)
    if RUNS > 1:
        say(capsys, f"[recovery] address change over {RUNS} runs: decoding resumed peer->lab "
                    f"{summary([r['peer->lab']['resumedSec'] for r in runs])} s, lab->peer "
                    f"{summary([r['lab->peer']['resumedSec'] for r in runs])} s; frames lost peer->lab "
                    f"{summary([r['peer->lab']['framesLost'] for r in runs])}, lab->peer "
                    f"{summary([r['lab->peer']['framesLost'] for r in runs])}")
    # Same member, same publications and subscriptions, on both pages; nobody left.
    after = {"lab": lab_page.evaluate("R.ids()"), "peer": peer.evaluate("R.ids()")}
    for who in ("lab", "peer"):
        for key in ("member", "publications", "subscriptions", "roomPublications", "roomSubscriptions"):
            assert after[who][key] == before_ids[who][key], (who, key, before_ids[who][key], after[who][key])
        assert not after[who]["left"], after
    left = [e for p in (lab_page, peer) for e in p.evaluate("T.events") if e["type"] in ("onMemberLeft", "onLeft")]
    assert left == [], left
    for p in (lab_page, peer):
        assert p.evaluate("T.errors") == [], p.evaluate("T.errors")


# ---- signaling drop -----------------------------------------------------------------------------

def block_signaling(lab, port: int) -> None:
    """Drops TCP to and from the server's signaling port in the lab (a table of its own)."""
    lab.nft_load("sigblock", f"""    chain out {{ type filter hook output priority 0; policy accept; tcp dport {port} counter drop; }}
    chain in {{ type filter hook input priority 0; policy accept; tcp sport {port} counter drop; }}""")


def unblock_signaling(lab) -> None:
    lab.nft_delete("sigblock")


def test_signaling_drop_keeps_media_and_replays_events_once(server, lab, call, capsys):
    lab_page, peer = call
    before_ids = lab_page.evaluate("R.ids()")
    runs = []
    try:
        for run in range(RUNS):
            wait_until(lambda: lab_page.evaluate("T.context.connectionState") == "connected", 20, "the lab page connected")
            wait_until(lambda: steady(lab_page) and steady(peer), 20, "both pages decoding before the drop", interval=0.5)
            restarts_before = lab_page.evaluate("T.me.iceRestarts")
            tag = f"{run}-{unique_name('x')[-6:]}"
            t_block = time.time()
            block_signaling(lab, server.port)
            # Things happen in the room while the lab page cannot hear: a member joins (through the
            # peer page's context) and updates its metadata, the peer updates its member's and its
            # video publication's metadata.
            peer.evaluate("""async (tag) => {
                window.X = await T.room.join({ name: `late-${tag}`, metadata: 'joined' });
                await T.me.updateMetadata(`peer-${tag}`);
                await T.pubs.video.updateMetadata(`video-${tag}`);
                await window.X.updateMetadata(`late-${tag}`);
                return true; }""", tag)
            # The SDK notices the silent socket within the drop (its heartbeat probe goes unanswered).
            wait_until(lambda: lab_page.evaluate("T.context.connectionState") == "reconnecting", BLOCK_SEC - 0.5,
                       "the lab page to notice its silent socket and reconnect")
            t_detect = time.time()
            # The drop lasts BLOCK_SEC (the subject of the test).
            time.sleep(max(0.0, t_block + BLOCK_SEC - time.time()))
            t_unblock = time.time()
            unblock_signaling(lab)
            wait_until(lambda: lab_page.evaluate("T.context.connectionState") == "connected", 20, "the lab page reconnected")
            t_back = time.time()
            lab_id = lab_page.evaluate("T.me.id")

            def seen(kind: str, pred) -> list:
                return [e for e in lab_page.evaluate("T.events") if e["type"] == kind and pred(e)]

            def all_seen() -> bool:
                return (seen("onMemberJoined", lambda e: e["member"]["name"] == f"late-{tag}")
                        and seen("onMemberMetadataUpdated", lambda e: e["member"]["name"] == f"late-{tag}")
                        and seen("onMemberMetadataUpdated", lambda e: e["metadata"] == f"peer-{tag}")
                        and seen("onPublicationMetadataUpdated", lambda e: e["metadata"] == f"video-{tag}"))
            wait_until(all_seen, 10, "the lab page to get the events it missed")
            # Media went on throughout, on both legs: the window from the drop to 2 s after the reconnect.
            t_end = max(t_back + 2.0, time.time())
            wait_until(lambda: time.time() >= t_end, 5, "the window after the reconnect")
            result = {"run": run, "detectSec": round(t_detect - t_block, 3), "reconnectedAfterUnblockSec": round(t_back - t_unblock, 3)}
            for leg, page in (("peer->lab", lab_page), ("lab->peer", peer)):
                s = samples_since(page, t_block - BASELINE_SEC - 1)
                before, during = fps(s, t_block - BASELINE_SEC, t_block), fps(s, t_block, t_end)
                result[leg] = {"fpsBefore": round(before, 1), "fpsDuring": round(during, 1),
                               "stallSec": round(longest_stall(s, t_block, t_end), 3),
                               "framesLost": frames_lost(s, t_block, t_end, before), "resumedSec": 0.0}
            rec = lab_page.evaluate("(t) => R.recSince(t)", t_block * 1000)
            sig = [e for e in rec if e["type"] == "onReconnected" and e.get("kind") == "signaling"]
            result["replayedEvents"] = sig[0].get("replayedEvents") if sig else None
            result["restarts"] = {d: lab_page.evaluate("T.me.iceRestarts")[d] - restarts_before[d] for d in ("send", "recv")}
            runs.append(result)
            say(capsys, f"\n[recovery] signaling drop {run + 1}/{RUNS} ({BLOCK_SEC:g} s of TCP to port {server.port} dropped): "
                        f"noticed after {result['detectSec']:.2f} s, reconnected {result['reconnectedAfterUnblockSec']:.2f} s "
                        f"after the drop ended, {result['replayedEvents']} events replayed; fps peer->lab "
                        f"{result['peer->lab']['fpsBefore']:.1f} before / {result['peer->lab']['fpsDuring']:.1f} during "
                        f"(longest stall {result['peer->lab']['stallSec']:.2f} s, {result['peer->lab']['framesLost']} frames lost), "
                        f"lab->peer {result['lab->peer']['fpsBefore']:.1f} / {result['lab->peer']['fpsDuring']:.1f} "
                        f"(stall {result['lab->peer']['stallSec']:.2f} s, {result['lab->peer']['framesLost']} lost); "
                        f"ICE restarts {result['restarts']}")
            # Exactly once each, and the member is the same one, taken back (not rejoined).
            for kind, pred in (("onMemberJoined", lambda e: e["member"]["name"] == f"late-{tag}"),
                               ("onMemberMetadataUpdated", lambda e: e["member"]["name"] == f"late-{tag}"),
                               ("onMemberMetadataUpdated", lambda e: e["metadata"] == f"peer-{tag}"),
                               ("onPublicationMetadataUpdated", lambda e: e["metadata"] == f"video-{tag}")):
                assert len(seen(kind, pred)) == 1, (kind, seen(kind, pred))
            assert lab_id == before_ids["member"]
            assert [e for e in rec if e["type"] == "onReconnecting" and e.get("kind") == "signaling"], rec
            assert sig, rec
            assert result["restarts"] == {"send": 0, "recv": 0}, "signaling only was lost: no ICE restart"
            for leg in ("peer->lab", "lab->peer"):
                r = result[leg]
                assert r["fpsDuring"] >= FPS_MIN_SHARE * r["fpsBefore"], (leg, r)
                assert r["stallSec"] <= STALL_MAX_SEC, (leg, r)
            peer.evaluate("() => window.X.leave()")
    finally:
        unblock_signaling(lab)
    write_runs("recovery-signaling-drop.json", runs)
    if RUNS > 1:
        say(capsys, f"[recovery] signaling drop over {RUNS} runs: noticed {summary([r['detectSec'] for r in runs])} s, "
                    f"reconnected after the drop {summary([r['reconnectedAfterUnblockSec'] for r in runs])} s; frames lost "
                    f"peer->lab {summary([r['peer->lab']['framesLost'] for r in runs])}, lab->peer "
                    f"{summary([r['lab->peer']['framesLost'] for r in runs])}; longest stall peer->lab "
                    f"{summary([r['peer->lab']['stallSec'] for r in runs])} s, lab->peer "
                    f"{summary([r['lab->peer']['stallSec'] for r in runs])} s")
    after = lab_page.evaluate("R.ids()")
    for key in ("member", "publications", "subscriptions"):
        assert after[key] == before_ids[key], (key, before_ids[key], after[key])
    left = [e for e in lab_page.evaluate("T.events") if e["type"] == "onLeft"]
    assert left == [], left
    assert lab_page.evaluate("T.errors") == [], lab_page.evaluate("T.errors")
