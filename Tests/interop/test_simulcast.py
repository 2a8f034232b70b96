"""Simulcast from Chromium through the browser SDK: one publisher page sends three VP8 layers
(rids l/m/h of a 1280x720 fake camera: 320, 640 and 1280 wide), subscriber pages each get one.

(0) the publisher gets the server's transport-wide feedback: Chromium's own bandwidth estimate
    (the candidate pair's availableOutgoingBitrate) reaches RAMP_MIN_KBPS within RAMP_BOUND_SEC
    of publish(), which it does not without feedback (measured below), and the server counted
    the feedback packets it sent.
(1) a subscriber without a preference ends up on the top layer (frameWidth 1280); after
    `subscription.changePreferredEncoding('l')` it decodes 320 wide, after 'h' 1280 again, with
    frames decoded throughout (no stall, freezes printed and bounded); the time from the call to
    the first stats sample (polled every 100 ms in the page) at the new width is printed;
(2) `changePreferredEncoding` with an id that is not one of the publication's encodings fails
    with invalidParameter (400) and the exact detail, and the subscription keeps decoding;
(3) `subscribe(..., { preferredEncodingId: 'm' })` decodes 640 wide from the start.
(4) a recording of the publication (admin API, issue 28) holds the top layer (every frame
    1280 wide); with `encodingId: "l"` every frame is 320 wide; an unknown encodingId (or one
    that is not a string) is refused with invalidParameter and its detail.

All tests share one room and publisher page (module fixture `publisher`); each has its own
subscriber page, made only after the publisher's ramp of (0) is over (see RAMP_BOUND_SEC). The
publisher page samples its outbound-rtp stats per rid once a second from the moment publish()
resolved: what Chromium sends on loopback with the server's RTCP (receiver reports, NACK, PLI
and transport-wide feedback; no REMB) is printed as a timeline at the end of (1).
Knobs (not MINATO_…, which the server would refuse as unknown configuration):
SIMULCAST_OBSERVE_SEC=N keeps test (1) sampling until N s after publish before printing the
timeline; SIMULCAST_SWITCHES=l,h,m,… sets the switches of (1) (default l,h);
SIMULCAST_ADMIN_LAYER=1 also asserts the admin API's per-subscription layer/targetLayer;
SIMULCAST_NO_TRANSPORT_CC=1 strips the transport-wide-cc extension and `transport-cc` from the
server's answer in the publisher page, so the publisher gets no transport-wide feedback: (0)
and (1) must then fail (the no-feedback case the bounds are measured against).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from admin_util import http
from browser import BROWSER_SERVER_ENV, VIDEO_SUBSCRIPTION_METHODS_JS, close_page, sdk_page, wait_js
from loss_pair import metrics, metrics_delta
from minato_client import unique_name

RECORDINGS = Path(tempfile.mkdtemp(prefix="minato-simulcast-rec-"))
MINATO_SERVER_ENV = {**BROWSER_SERVER_ENV, "MINATO_RECORDING_DIRECTORY": str(RECORDINGS),
                     "MINATO_RECORDING_MIN_FREE_BYTES": "0"}

pytestmark = pytest.mark.timeout(120)

CAMERA = {"width": 1280, "height": 720, "frameRate": 30}
ENCODINGS = [
    {"id": "l", "scaleResolutionDownBy": 4, "maxBitrate": 150_000},
    {"id": "m", "scaleResolutionDownBy": 2, "maxBitrate": 500_000},
    {"id": "h", "maxBitrate": 1_500_000},
]
WIDTH = {"l": 320, "m": 640, "h": 1280}
# Chromium's bandwidth estimate for the publisher's connection (availableOutgoingBitrate) must
# reach RAMP_MIN_KBPS within RAMP_BOUND_SEC of publish(). Measured here (Chromium 156, the
# three layers of ENCODINGS, 2 cores shared with builds), from publish():
# - with the server's transport-wide feedback, no page made meanwhile: its first probes
#   succeed; >= 1,700 kbit/s at the first estimate, 1.1-1.3 s (10 of 10 runs; top layer on at
#   1.2-1.3 s);
# - without it (SIMULCAST_NO_TRANSPORT_CC=1: receiver reports only): 300 kbit/s until 3 s, then
#   352 at 5 s, 447 at 8 s, 523 at 10 s, 774 at 15 s; top layer on at 22.1-22.6 s (8 of 8 runs,
#   the same numbers each time); 1,000 kbit/s is not reached before ~18 s.
# The "1 in 10" slow ramp (the estimate growing from ~300 kbit/s at ~8%/s, top layer at ~22 s as
# without feedback) came from making a subscriber page while Chromium's first probes (~1.05 s
# after publish) arrived: that Chromium burst starved the server's media worker thread of CPU
# (runnable, 100-330 ms of run-queue wait in /proc/<tid>/schedstat), the probe packets waited
# in the socket buffer, and the server stamps arrivals when it reads them, so its feedback
# reported them arriving together (or late) and Chromium discarded the probes (7 of 31 runs
# with the page made then; 0 of 10 with it made after the ramp). Hence the fixture waits for
# the ramp before any subscriber page exists.
RAMP_MIN_KBPS = 1000
RAMP_BOUND_SEC = 8.0
# The subscriber decoding the top layer, counted from publish() (knob SIMULCAST_TOP_LAYER_SEC):
# with feedback Chromium turns it on with its first estimate (1.2-1.3 s; up to 8.4 s when only
# part of its first probes counted), without feedback at 22.1-22.6 s (above).
TOP_LAYER_TIMEOUT_SEC = float(os.environ.get("SIMULCAST_TOP_LAYER_SEC", "15"))
SWITCH_BOUND_SEC = 3.0
# Frozen time (Chromium's totalFreezesDuration) allowed over both switches together.
MAX_FROZEN_SEC = 0.5
OBSERVE_SEC = float(os.environ.get("SIMULCAST_OBSERVE_SEC", "0"))
# The switches of (1), in order; the default is the issue's: down to l, back up to h.
SWITCHES = os.environ.get("SIMULCAST_SWITCHES", "l,h").split(",")
CHECK_ADMIN_LAYER = os.environ.get("SIMULCAST_ADMIN_LAYER") == "1"
NO_TRANSPORT_CC = os.environ.get("SIMULCAST_NO_TRANSPORT_CC") == "1"

# SIMULCAST_NO_TRANSPORT_CC: the publisher page drops the transport-wide-cc extension and the
# transport-cc feedback type from every answer it applies, so Chromium neither numbers its packets
# nor expects feedback, and the server sends it none (its answer follows the offer's extensions).
STRIP_TRANSPORT_CC_JS = r"""
() => {
  const set = RTCPeerConnection.prototype.setRemoteDescription;
  RTCPeerConnection.prototype.setRemoteDescription = function (d, ...rest) {
    if (d && d.type === 'answer' && d.sdp) {
      d = { type: d.type, sdp: d.sdp.split('\r\n')
        .filter((l) => !/transport-wide-cc|^a=rtcp-fb:\d+ transport-cc/.test(l)).join('\r\n') };
    }
    return set.call(this, d, ...rest);
  };
  return true;
}
"""

# Extra page helpers (window.S) on top of the SDK harness (window.T). Times are epoch ms
# (timeOrigin + now) so that the publisher's and subscriber's pages can be compared.
HELPERS_JS = r"""
() => {
  const now = () => performance.timeOrigin + performance.now();
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const S = {
    now, publishedAt: null, timeline: [], sampling: false,
    // The publisher's video outbound-rtp entries (one per rid) and Chromium's bandwidth estimate.
    async outbound() {
      const pc = T.me.sendConnection;
      const layers = [];
      let bwe = null;
      if (!pc) return { layers, bwe };
      const report = await pc.getStats();
      report.forEach((s) => {
        if (s.type === 'outbound-rtp' && s.kind === 'video') {
          layers.push({ rid: s.rid ?? null, ssrc: s.ssrc, active: s.active, frameWidth: s.frameWidth || 0,
                        frameHeight: s.frameHeight || 0, fps: s.framesPerSecond || 0, bytesSent: s.bytesSent || 0,
                        packetsSent: s.packetsSent || 0, framesEncoded: s.framesEncoded || 0,
                        retransmittedBytesSent: s.retransmittedBytesSent || 0, headerBytesSent: s.headerBytesSent || 0,
                        keyFramesEncoded: s.keyFramesEncoded || 0, targetBitrate: s.targetBitrate ?? null,
                        qualityLimitationReason: s.qualityLimitationReason ?? null,
                        encoder: s.encoderImplementation ?? null, scalabilityMode: s.scalabilityMode ?? null,
                        pliCount: s.pliCount || 0, firCount: s.firCount || 0, nackCount: s.nackCount || 0,
                        codec: s.codecId && report.get(s.codecId) ? report.get(s.codecId).mimeType : null });
        }
        if (s.type === 'candidate-pair' && s.nominated && s.state === 'succeeded') {
          bwe = s.availableOutgoingBitrate ?? null;
        }
      });
      layers.sort((a, b) => String(a.rid).localeCompare(String(b.rid)));
      return { layers, bwe };
    },
    async publishSimulcast(camera, encodings, metadata) {
      const ms = await navigator.mediaDevices.getUserMedia({ audio: false, video: camera });
      const track = ms.getVideoTracks()[0];
      const pub = await T.me.publish(track, { encodings, metadata });
      T.pubs.video = pub;
      S.publishedAt = now();
      S.sampling = true;
      (async () => {   // one sample a second, from publish() on
        for (let i = 0; S.sampling; i++) {
          const o = await S.outbound();
          S.timeline.push({ t: (now() - S.publishedAt) / 1000, ...o });
          await sleep(Math.max(0, S.publishedAt + (i + 1) * 1000 - now()));
        }
      })();
      const s = track.getSettings();
      const answer = T.me.sendConnection.remoteDescription.sdp.split('\r\n')
        .filter((l) => /^a=(rid|simulcast|extmap|rtcp-fb:\d+ (transport-cc|goog-remb))|^a=rtpmap:\d+ rtx/.test(l));
      return { id: pub.id, encodings: pub.encodings, camera: { width: s.width, height: s.height, frameRate: s.frameRate },
               answer };
    },
    // Chromium's estimate for the publisher's connection, polled every 100 ms until it is at least
    // minBps or deadlineSec after publish(): when it first was (s after publish; null: not by then),
    // when the top layer (rid topRid) first encoded a frame, and the samples [s, kbit/s, its frames].
    async waitRamp(minBps, deadlineSec, topRid) {
      const out = { reachedAt: null, topAt: null, samples: [] };
      for (;;) {
        const o = await S.outbound();
        const t = (now() - S.publishedAt) / 1000;
        const top = o.layers.find((x) => x.rid === topRid);
        out.samples.push([Math.round(t * 100) / 100, Math.round((o.bwe || 0) / 1000), top ? top.framesEncoded : 0]);
        if (out.topAt === null && top && top.framesEncoded > 0) out.topAt = t;
        if (o.bwe && o.bwe >= minBps) { out.reachedAt = t; break; }
        if (t >= deadlineSec) break;
        await sleep(100);
      }
      return out;
    },
    /*VIDEO_SUBSCRIPTION*/
    // Polls inbound stats every 100 ms until frameWidth === width; returns when (epoch ms) or null.
    async waitWidth(width, timeoutMs) {
      const t0 = now();
      let last = null;
      while (now() - t0 < timeoutMs) {
        last = await S.inbound();
        if (last && last.frameWidth === width) return { at: now(), stats: last };
        await sleep(100);
      }
      return { at: null, stats: last };
    },
    // changePreferredEncoding(id), then stats every 100 ms until frameWidth === width and for
    // `afterMs` more (frames must keep coming), or until timeoutMs.
    async switchTo(id, width, timeoutMs, afterMs) {
      const sub = S.sub();
      const before = await S.inbound();
      const t0 = now();
      let requestMs = null, error = null;
      const req = sub.changePreferredEncoding(id).then(() => { requestMs = now() - t0; },
                                                     (e) => { error = `${e.name}: ${e.detail || e.message}`; });
      const samples = [];
      let hitMs = null, atHit = null;
      while (now() - t0 < timeoutMs) {
        const s = await S.inbound();
        const t = now() - t0;
        samples.push([Math.round(t), s.frameWidth, s.framesDecoded]);
        if (hitMs === null && s.frameWidth === width) { hitMs = t; atHit = s; }
        if (hitMs !== null && t >= hitMs + afterMs) break;
        await sleep(100);
      }
      await req;
      return { hitMs, requestMs, error, before, atHit, after: await S.inbound(), samples,
               preferredEncodingId: sub.preferredEncodingId };
    },
  };
  window.S = S;
  return true;
}
""".replace("/*VIDEO_SUBSCRIPTION*/", VIDEO_SUBSCRIPTION_METHODS_JS)


def admin_stats(server, room_id: str) -> dict:
    r = http("GET", f"{server.http}/v1/rooms/{room_id}/stats")
    assert r.status == 200, f"admin stats: {r}"
    return r.json


def layer_line(layer: dict, prev: dict | None, dt: float) -> str:
    def kbps(key: str) -> float:
        return (layer[key] - (prev or {}).get(key, 0)) * 8 / 1000 / dt if dt > 0 else 0
    tb = layer["targetBitrate"]
    return (f"{layer['rid']}:{'on' if layer['active'] else 'off'} {layer['frameWidth']}x{layer['frameHeight']}"
            f"@{layer['fps']:g} {kbps('bytesSent'):.0f}kbps (resent {kbps('retransmittedBytesSent'):.0f}k, "
            f"headers+padding {kbps('headerBytesSent'):.0f}k, "
            f"target {tb / 1000 if tb else 0:.0f}k, {layer['qualityLimitationReason']})")


def print_timeline(timeline: list[dict]) -> None:
    """The publisher's layers per second: on/off, frame size and fps, kbit/s sent in the last
    second, Chromium's target bitrate and quality limitation, and its bandwidth estimate."""
    print("[simulcast] publisher outbound per rid (per 1 s sample after publish; kbps = bytesSent delta, "
          "resent = retransmittedBytesSent delta, headers+padding = headerBytesSent delta; bwe = the "
          "candidate pair's availableOutgoingBitrate):")
    prev = None
    for sample in timeline:
        dt = sample["t"] - prev["t"] if prev else sample["t"]
        by_rid = {x["rid"]: x for x in prev["layers"]} if prev else {}
        parts = [layer_line(x, by_rid.get(x["rid"]), dt) for x in sample["layers"]]
        bwe = sample["bwe"]
        print(f"  t={sample['t']:5.1f}s bwe={bwe / 1000 if bwe else 0:.0f}k | " + " | ".join(parts))
        prev = sample


# ---- fixtures ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def publisher(request, server, chromium):
    """A room and a publisher page sending ENCODINGS of a 1280x720 fake camera."""
    room = unique_name("simulcast")
    page, log = sdk_page(chromium, server, "pub")
    try:
        page.evaluate(HELPERS_JS)
        page.evaluate("T.connect()")
        room_id = page.evaluate("(n) => T.findOrCreate(n)", room)
        page.evaluate("() => T.join('pub', {}, null)")
        if NO_TRANSPORT_CC:
            page.evaluate(STRIP_TRANSPORT_CC_JS)
        m0 = metrics(server.http)
        info = page.evaluate("([c, e]) => S.publishSimulcast(c, e, 'simulcast-video')", [CAMERA, ENCODINGS])
        # Chromium's first probes come ~1 s after publish(): no other page is made until its
        # estimate is up (or RAMP_BOUND_SEC have passed), so they are not starved (see above).
        ramp = page.evaluate("([b, s, r]) => S.waitRamp(b, s, r)", [RAMP_MIN_KBPS * 1000, RAMP_BOUND_SEC, "h"])
        ramp["server"] = metrics_delta(m0, metrics(server.http))
        info.update(room=room, room_id=room_id, page=page, ramp=ramp)
        yield info
    finally:
        close_page(page, log, "test_simulcast-publisher")


@pytest.fixture
def subscriber(request, server, chromium, publisher):
    """Makes subscriber pages in the publisher's room (joined, nothing published, not yet
    subscribed); saves their console logs and closes them after the test."""
    made = []

    def make(label: str):
        page, log = sdk_page(chromium, server, label)
        made.append((page, log))
        page.evaluate(HELPERS_JS)
        page.evaluate("T.connect()")
        page.evaluate("(n) => T.findOrCreate(n)", publisher["room"])
        page.evaluate("() => { T.autoSubscribe = false; }")
        page.evaluate("(n) => T.join(n, {}, null)", label)
        return page

    yield make
    for page, log in made:
        close_page(page, log, request.node.name)


def subscribe(page, publication_id: str, options: dict | None = None) -> None:
    page.evaluate("""async ([pid, opts]) => {
        const p = T.room.publications.find((x) => x.id === pid);
        await T.maybeSubscribe(p, opts);
        if (!T.subs.get(pid)) throw new Error(`subscribe failed: ${T.errors.join('; ')}`);
    }""", [publication_id, options or {}])


# ---- the tests --------------------------------------------------------------------------------

def test_simulcast_publisher_gets_transport_wide_feedback(server, publisher, capsys):
    ramp = publisher["ramp"]
    fed_back = ramp["server"].get("rtcp_transport_feedback_sent_total", 0)
    reached = f"{ramp['reachedAt']:.2f} s" if ramp["reachedAt"] is not None else f"not within {RAMP_BOUND_SEC:g} s"
    top = f"{ramp['topAt']:.2f} s" if ramp["topAt"] is not None else "not yet"
    with capsys.disabled():
        print(f"\n[simulcast] publisher ramp{' (NO transport-cc)' if NO_TRANSPORT_CC else ''}: "
              f"availableOutgoingBitrate >= {RAMP_MIN_KBPS} kbit/s at {reached} after publish (bound "
              f"{RAMP_BOUND_SEC:g} s; measured without feedback: 447 kbit/s at 8 s, 1,000 after ~18 s), "
              f"top layer first encoded {top}; server sent {fed_back} transport-wide feedback packets meanwhile "
              f"(counters {ramp['server']})")
        print(f"  samples [s, kbit/s, top-layer frames]: {ramp['samples'][-40:]}")
    assert fed_back > 0, f"the server sent the publisher no transport-wide feedback: {ramp['server']}"
    assert ramp["reachedAt"] is not None, (
        f"Chromium's estimate for the publisher stayed below {RAMP_MIN_KBPS} kbit/s for {RAMP_BOUND_SEC:g} s "
        f"after publish (as without transport-wide feedback): {ramp['samples']}")


def test_simulcast_subscriber_gets_top_layer_and_follows_preferred_encoding(server, publisher, subscriber, capsys):
    pub = publisher["page"]
    assert [e["id"] for e in publisher["encodings"]] == ["l", "m", "h"], publisher["encodings"]
    sub = subscriber("sub")
    t_sub = sub.evaluate("S.now()")
    subscribe(sub, publisher["id"])
    wait_js(sub, "() => T.firstFrameAt.size > 0", timeout=20, what="the subscriber's first decoded frame")
    first = sub.evaluate("S.inbound()")
    t_first = sub.evaluate("() => performance.timeOrigin + [...T.firstFrameAt.values()][0]")
    t_pub = pub.evaluate("S.publishedAt")
    top = sub.evaluate("(ms) => S.waitWidth(1280, ms)", t_pub + TOP_LAYER_TIMEOUT_SEC * 1000 - sub.evaluate("S.now()"))
    out = pub.evaluate("S.outbound()")

    lines = [f"\n[simulcast] camera {publisher['camera']}, publication encodings "
             f"{[e['id'] for e in publisher['encodings']]}; server answer: {publisher['answer']}",
             f"[simulcast] subscribe -> first frame {t_first - t_sub:.0f} ms at {first['frameWidth']}x"
             f"{first['frameHeight']}; subscribe -> frameWidth 1280: "
             + (f"{top['at'] - t_sub:.0f} ms (publish -> 1280: {top['at'] - t_pub:.0f} ms)"
                if top["at"] else f"never within {TOP_LAYER_TIMEOUT_SEC:g} s of publish (last {top['stats']})"),
             f"[simulcast] publisher now (bwe {out['bwe']}): "
             + "; ".join(f"{x['rid']} {x['frameWidth']}x{x['frameHeight']} {x['bytesSent']} B "
                         f"target {x['targetBitrate']} {x['qualityLimitationReason']} {x['codec']} {x['encoder']}"
                         for x in out["layers"])]
    with capsys.disabled():
        print("\n".join(lines))
    assert sorted(x["rid"] for x in out["layers"]) == ["h", "l", "m"], out
    if not top["at"]:
        with capsys.disabled():
            print_timeline(pub.evaluate("S.timeline"))
    assert top["at"], (f"the subscriber never decoded 1280 wide within {TOP_LAYER_TIMEOUT_SEC:g} s of publish: "
                       f"{top['stats']} (publisher timeline above)")

    # Switches: down to l, back up to h (SWITCHES). Around each: the publisher's PLIs received
    # and keyframes encoded per rid, and the server's keyframe requests by cause.
    results = []
    for enc in SWITCHES:
        m0, p0 = metrics(server.http), pub.evaluate("S.outbound()")
        r = sub.evaluate("([id, w, t, a]) => S.switchTo(id, w, t, a)", [enc, WIDTH[enc], 6000, 1000])
        m1, p1 = metrics(server.http), pub.evaluate("S.outbound()")
        results.append(r)
        took = f"{r['hitMs']:.0f} ms" if r["hitMs"] is not None else "never"
        frames_after = r["after"]["framesDecoded"] - r["atHit"]["framesDecoded"] if r["atHit"] else 0
        with capsys.disabled():
            print(f"[simulcast] changePreferredEncoding('{enc}') -> first sample at frameWidth {WIDTH[enc]}: {took} "
                  f"(request resolved in {r['requestMs'] or 0:.0f} ms); frames decoded during the switch "
                  f"{(r['atHit'] or r['after'])['framesDecoded'] - r['before']['framesDecoded']}, in the "
                  f"{1000 if r['atHit'] else 0} ms after {frames_after}; freezes "
                  f"+{r['after']['freezeCount'] - r['before']['freezeCount']} "
                  f"(+{r['after']['totalFreezesDuration'] - r['before']['totalFreezesDuration']:.3f} s); keyframes "
                  f"+{r['after']['keyFramesDecoded'] - r['before']['keyFramesDecoded']}, PLIs sent "
                  f"+{r['after']['pliCount'] - r['before']['pliCount']}")
            print(f"  samples [ms, frameWidth, framesDecoded]: {r['samples'][:40]}")
            before = {x["rid"]: x for x in p0["layers"]}
            print("  publisher per rid: " + ", ".join(
                f"{x['rid']} PLIs +{x['pliCount'] - before[x['rid']]['pliCount']} keyframes "
                f"+{x['keyFramesEncoded'] - before[x['rid']]['keyFramesEncoded']}" for x in p1["layers"])
                + f"; server {{{', '.join(f'{k}: {v}' for k, v in metrics_delta(m0, m1).items() if 'keyframe' in k)}}}")
        assert r["error"] is None, r["error"]
        assert r["preferredEncodingId"] == enc
        assert r["hitMs"] is not None, (f"after changePreferredEncoding('{enc}') the subscriber never decoded "
                                        f"{WIDTH[enc]} wide in 6 s: {r['samples']}")
        assert r["hitMs"] < SWITCH_BOUND_SEC * 1000, f"switch to '{enc}' took {r['hitMs']:.0f} ms"
        # No stall: frames decoded while switching and in the second after.
        assert r["atHit"]["framesDecoded"] > r["before"]["framesDecoded"], r["samples"]
        assert frames_after >= 5, f"only {frames_after} frames decoded in the 1 s after the switch to '{enc}'"
        if CHECK_ADMIN_LAYER:
            st = admin_stats(server, publisher["room_id"])
            subs = [s for s in st["subscriptionStats"] if s["subscriptionId"] == sub.evaluate("S.sub().id")]
            assert subs and subs[0].get("layer") == "lmh".index(enc) and subs[0].get("targetLayer") == "lmh".index(enc), st

    frozen = results[-1]["after"]["totalFreezesDuration"] - results[0]["before"]["totalFreezesDuration"]
    total_frozen = results[-1]["after"]["totalFreezesDuration"]
    with capsys.disabled():
        took = ", ".join("never" if r["hitMs"] is None else f"{r['hitMs']:.0f}" for r in results)
        print(f"[simulcast] switches {','.join(SWITCHES)}: {took} ms; "
              f"frozen during them {frozen:.3f} s (since subscribe {total_frozen:.3f} s in "
              f"{results[-1]['after']['freezeCount']} freezes)")
        if CHECK_ADMIN_LAYER:
            st = admin_stats(server, publisher["room_id"])
            print(f"[simulcast] admin stats: publications {st['publicationStats']}, subscriptions "
                  f"{st['subscriptionStats']}")
    assert frozen <= MAX_FROZEN_SEC, f"frozen {frozen:.3f} s over the switches"

    # What Chromium sent per layer since publish (with OBSERVE_SEC, up to that many seconds).
    if OBSERVE_SEC:
        wait_js(pub, "(n) => S.timeline.length && S.timeline[S.timeline.length - 1].t >= n", OBSERVE_SEC,
                timeout=OBSERVE_SEC + 10, what=f"{OBSERVE_SEC:g} s of publisher samples", interval=1.0)
    with capsys.disabled():
        print_timeline(pub.evaluate("S.timeline"))
    assert sub.evaluate("T.errors") == []


def test_simulcast_unknown_preferred_encoding_is_refused(server, publisher, subscriber):
    sub = subscriber("sub-bad")
    subscribe(sub, publisher["id"])
    wait_js(sub, "() => T.firstFrameAt.size > 0", timeout=20, what="the subscriber's first decoded frame")
    err = sub.evaluate("""async () => {
        try { await S.sub().changePreferredEncoding('x'); return { ok: true }; }
        catch (e) { return { ok: false, isMinatoError: e instanceof T.M.MinatoError, name: e.name, code: e.code,
                             detail: e.detail }; }
    }""")
    assert err == {"ok": False, "isMinatoError": True, "name": "invalidParameter", "code": 400,
                   "detail": "preferredEncodingId 'x' is not one of the publication's encodings (l, m, h)."}, err
    assert sub.evaluate("S.sub().preferredEncodingId") is None
    # The server keeps serving: the subscription keeps decoding, and a valid id is accepted.
    frames = sub.evaluate("S.inbound()")["framesDecoded"]
    wait_js(sub, "async (n) => (await S.inbound()).framesDecoded >= n + 20", frames, timeout=10,
            what="the subscriber to keep decoding after the refused request")
    sub.evaluate("() => S.sub().changePreferredEncoding('m')")
    assert sub.evaluate("S.sub().preferredEncodingId") == "m"
    assert server.alive()


def test_simulcast_subscribe_with_preferred_encoding_m(server, publisher, subscriber, capsys):
    sub = subscriber("sub-m")
    t0 = sub.evaluate("S.now()")
    subscribe(sub, publisher["id"], {"preferredEncodingId": "m"})
    assert sub.evaluate("S.sub().preferredEncodingId") == "m"
    r = sub.evaluate("(ms) => S.waitWidth(640, ms)", TOP_LAYER_TIMEOUT_SEC * 1000)
    with capsys.disabled():
        print(f"\n[simulcast] subscribe(preferredEncodingId 'm') -> frameWidth 640: "
              + (f"{r['at'] - t0:.0f} ms" if r["at"] else f"never (last {r['stats']})"))
    assert r["at"], f"never decoded 640 wide: {r['stats']}"
    # It stays on m (never above it) while frames keep coming; sampled for 2 s.
    seen = sub.evaluate("""async () => {
        const widths = new Set(); const f0 = (await S.inbound()).framesDecoded; const t0 = S.now();
        while (S.now() - t0 < 2000) { widths.add((await S.inbound()).frameWidth);
                                      await new Promise((r) => setTimeout(r, 100)); }
        return { widths: [...widths], frames: (await S.inbound()).framesDecoded - f0 };
    }""")
    with capsys.disabled():
        print(f"[simulcast] on 'm' for 2 s: widths {seen['widths']}, {seen['frames']} frames decoded")
    assert seen["widths"] == [640], seen
    assert seen["frames"] >= 10, seen


@pytest.fixture(scope="module")
def recordings_dir():
    yield RECORDINGS
    shutil.rmtree(RECORDINGS, ignore_errors=True)


def record_widths(server, room_id: str, body: dict, seconds: float) -> tuple[dict, dict[int, int]]:
    """Records for `seconds` (admin API); (the stopped recording, {frame width: frames}) of its file."""
    import av
    r = http("POST", f"{server.http}/v1/rooms/{room_id}/recordings", body, timeout=30)
    assert r.status == 201, r.text
    started = r.json["recording"]
    time.sleep(seconds)
    r = http("DELETE", f"{server.http}/v1/rooms/{room_id}/recordings/{started['id']}", timeout=30)
    assert r.status == 200 and r.json["recording"]["state"] == "stopped", r.text
    done = r.json["recording"]
    widths: dict[int, int] = {}
    with av.open(done["file"]) as f:
        for frame in f.decode(video=0):
            widths[frame.width] = widths.get(frame.width, 0) + 1
    return done, widths


@pytest.mark.skipif(shutil.which("gst-launch-1.0") is None, reason="gst-launch-1.0 is installed by the test command")
def test_recording_a_simulcast_publication_takes_the_top_layer_or_the_encoding_asked(server, publisher, recordings_dir, capsys):
    room_id, pid = publisher["room_id"], publisher["id"]
    top, top_widths = record_widths(server, room_id, {"publicationIds": [pid]}, 3.0)
    low, low_widths = record_widths(server, room_id, {"publicationIds": [pid], "encodingId": "l"}, 3.0)
    with capsys.disabled():
        print(f"\n[simulcast] recorded without encodingId: frames by width {top_widths} ({top['durationMs']} ms); "
              f"with encodingId 'l': {low_widths} ({low['durationMs']} ms)")
    assert "encodingId" not in top and low["encodingId"] == "l", (top, low)
    assert set(top_widths) == {WIDTH["h"]} and top_widths[WIDTH["h"]] >= 30, top_widths
    assert set(low_widths) == {WIDTH["l"]} and low_widths[WIDTH["l"]] >= 30, low_widths
    r = http("POST", f"{server.http}/v1/rooms/{room_id}/recordings", {"publicationIds": [pid], "encodingId": "x"}, timeout=30)
    assert (r.status, r.json["error"]["name"], r.json["error"]["detail"]) == (
        400, "invalidParameter", "encodingId 'x' is not one of the publication's encodings (l, m, h)."), r.text
    r = http("POST", f"{server.http}/v1/rooms/{room_id}/recordings", {"publicationIds": [pid], "encodingId": 7}, timeout=30)
    assert (r.status, r.json["error"]["name"]) == (400, "invalidParameter"), r.text
