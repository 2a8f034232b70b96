"""ICE restart on the server, driven by real Chromium peers, and the consent rule that keeps a
member whose connection carries no media (docs/protocol.md "Media negotiation", "Lifecycle").

1. Both directions: two SDK pages publish video and subscribe to each other; page A restarts
   ICE on its send connection (an offer with `iceRestart` through `negotiate`) and then on its
   receive connection (`restartIce {direction:"recv"}` and its offer). Each restart must give
   the page new server ICE credentials and candidates (a new server port), the server must
   complete it (`minato_ice_restarts_total` +1 each), both pages keep decoding each other (the
   longest gap without a decoded frame is printed), and the publication and subscription ids,
   and the SSRCs the pages receive, are unchanged.
2. WHIP PATCH (RFC 9725 4.4): a WHIP client written in the page (fetch + RTCPeerConnection, as
   the WHIP clients of OBS-like tools do it) publishes, restarts ICE with a PATCH carrying new
   credentials, applies the server's 200 fragment (new ufrag/pwd/candidates, new ETag) to its
   answer, and an SDK subscriber keeps decoding across it; the old ETag is then 412.
3. Consent: a member whose receive connection no longer carries any media (its only
   subscription ended) keeps being heard through Chromium's ICE consent checks, so it is not
   removed after `media.transportTimeoutSec` (4 s here); a member whose network died (nftables
   drops its connection's datagrams) is removed with reason transportClosed once the timeout
   passed with nothing heard.
"""
from __future__ import annotations

import re
import subprocess
import time

import pytest

from admin_util import metric, scrape
from impair import nft_binary
from browser import BROWSER_SERVER_ENV, close_page, sdk_page, wait_js, wait_until
from minato_client import unique_name

pytestmark = pytest.mark.timeout(150)

TRANSPORT_TIMEOUT_SEC = 4
MINATO_SERVER_ENV = {**BROWSER_SERVER_ENV, "MINATO_MEDIA_TRANSPORT_TIMEOUT_SEC": str(TRANSPORT_TIMEOUT_SEC)}
CAMERA = {"audio": False, "video": {"width": 320, "height": 240, "frameRate": 15}}

# Per page: what its connections show (remote ICE ufrag, selected pair's remote port) and the
# video it decodes (frames, SSRCs), for the test's before/after comparisons.
PROBE_JS = r"""
async () => {
  async function conn(pc) {
    if (!pc) return null;
    const out = { ufrag: null, port: null, state: pc.iceConnectionState };
    const m = /a=ice-ufrag:(\S+)/.exec(pc.remoteDescription ? pc.remoteDescription.sdp : '');
    out.ufrag = m ? m[1] : null;
    (await pc.getStats()).forEach((s) => {
      if (s.type === 'transport' && s.selectedCandidatePairId) {
        const r = s; out.pair = r.selectedCandidatePairId;
      }
    });
    const stats = await pc.getStats();
    stats.forEach((s) => {
      if (s.type === 'candidate-pair' && s.id === out.pair) {
        const rc = stats.get(s.remoteCandidateId); out.port = rc ? rc.port : null;
      }
    });
    return out;
  }
  const inbound = [];
  for (const [pid, s] of T.subs) {
    if (!s || s.stream.ended) continue;
    (await s.stream.getStats()).forEach((x) => {
      if (x.type === 'inbound-rtp' && x.kind === 'video') inbound.push({ pid, frames: x.framesDecoded || 0, ssrc: x.ssrc });
    });
  }
  return { send: await conn(T.me.sendConnection), recv: await conn(T.me.receiveConnection), inbound,
           subs: [...T.subs.values()].filter((s) => s).map((s) => s.subscription.id),
           pubs: Object.values(T.pubs).map((p) => p.id), errors: T.errors };
}
"""


LOCAL_PORT_JS = r"""
async () => {
  const st = await T.me.receiveConnection.getStats(); let port = null;
  st.forEach((s) => {
    if (s.type === 'transport' && s.selectedCandidatePairId) {
      const p = st.get(s.selectedCandidatePairId); const c = p && st.get(p.localCandidateId); port = c ? c.port : null;
    }
  });
  return port;
}
"""


def restarts(server) -> float:
    return metric(scrape(server.http), "minato_ice_restarts_total") or 0.0


def frames(page) -> int:
    return sum(x["frames"] for x in page.evaluate(PROBE_JS)["inbound"])


def printer(capsys):
    def say(*lines: str) -> None:
        with capsys.disabled():
            print("\n".join(lines))
    return say


@pytest.fixture
def pages(request, chromium, server):
    made = []

    def make(label: str):
        page, log = sdk_page(chromium, server, label)
        made.append((page, log))
        return page

    yield make
    for page, log in made:
        close_page(page, log, request.node.name)


def joined_pair(pages, room: str):
    """Pages A and B in `room`, each publishing video and decoding the other's."""
    a, b = pages("restart-A"), pages("restart-B")
    for page, name in ((a, "A"), (b, "B")):
        page.evaluate("T.connect()")
        page.evaluate("(n) => T.findOrCreate(n)", room)
        page.evaluate("([n, m]) => T.join(n, {}, m)", [name, CAMERA])
    for page, name in ((a, "A"), (b, "B")):
        wait_js(page, "() => T.firstFrameAt.size === 1", timeout=20, what=f"{name} decodes the other's video")
    return a, b


class GapWatch:
    """Samples both pages' decoded frame counts; the longest stretch without a new frame."""

    def __init__(self, pages_: list) -> None:
        self.pages = pages_
        self.last = [frames(p) for p in pages_]
        self.since = [time.monotonic()] * len(pages_)
        self.gap = [0.0] * len(pages_)

    def sample(self) -> None:
        now = time.monotonic()
        for i, p in enumerate(self.pages):
            f = frames(p)
            if f > self.last[i]:
                self.last[i], self.since[i] = f, now
            self.gap[i] = max(self.gap[i], now - self.since[i])

    def run(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.sample()
            time.sleep(0.1)


def test_ice_restart_both_directions_keeps_media_and_ids(server, pages, capsys):
    say = printer(capsys)
    a, b = joined_pair(pages, unique_name("restart"))
    before = a.evaluate(PROBE_JS)
    b_before = b.evaluate(PROBE_JS)
    assert before["send"]["ufrag"] and before["recv"]["ufrag"], before
    watch = GapWatch([a, b])
    watch.run(1.0)
    n0 = restarts(server)

    for direction in ("send", "recv"):
        t0 = time.monotonic()
        a.evaluate("(d) => T.me._restartIce(d, 10000)", direction)
        wait_until(lambda: restarts(server) >= n0 + 1, 10, f"the server completes the {direction} ICE restart")
        took = time.monotonic() - t0
        n0 += 1
        after = a.evaluate(PROBE_JS)
        old, new = before[direction], after[direction]
        assert new["ufrag"] != old["ufrag"], f"{direction}: the server's ICE ufrag did not change: {old} -> {new}"
        wait_until(lambda: a.evaluate(PROBE_JS)[direction]["state"] in ("connected", "completed"), 10,
                   f"A's {direction} connection connected again")
        wait_until(lambda: a.evaluate(PROBE_JS)[direction]["port"] not in (None, old["port"]), 10,
                   f"A's {direction} connection on the restart's new server port (was {old['port']})")
        watch.run(2.0)
        say(f"\n[ice-restart] {direction}: server ufrag {old['ufrag']} -> {new['ufrag']}, "
            f"port {old['port']} -> {a.evaluate(PROBE_JS)[direction]['port']}, done in {took * 1000:.0f} ms")

    after, b_after = a.evaluate(PROBE_JS), b.evaluate(PROBE_JS)
    assert after["pubs"] == before["pubs"] and b_after["pubs"] == b_before["pubs"], (before, after)
    assert after["subs"] == before["subs"] and b_after["subs"] == b_before["subs"], (before, after)
    # The video each page decodes comes on the same SSRC as before (the consumer's state survived).
    assert [x["ssrc"] for x in after["inbound"]] == [x["ssrc"] for x in before["inbound"]], (before, after)
    assert [x["ssrc"] for x in b_after["inbound"]] == [x["ssrc"] for x in b_before["inbound"]], (b_before, b_after)
    say(f"[ice-restart] longest time without a decoded frame across both restarts: "
        f"A {watch.gap[0] * 1000:.0f} ms, B {watch.gap[1] * 1000:.0f} ms")
    # 15 fps: a frame every 67 ms; a restart that broke media for a transport timeout would show.
    assert max(watch.gap) < 2.0, f"decoding stalled across the restarts: {watch.gap}"
    assert not after["errors"] and not b_after["errors"], (after["errors"], b_after["errors"])


WHIP_JS = r"""
async ([base, room]) => {
  const ms = await navigator.mediaDevices.getUserMedia({ audio: false, video: { width: 320, height: 240, frameRate: 15 } });
  const pc = new RTCPeerConnection();
  pc.addTransceiver(ms.getVideoTracks()[0], { direction: 'sendonly' });
  const gathered = () => new Promise((res) => {
    if (pc.iceGatheringState === 'complete') return res();
    pc.addEventListener('icegatheringstatechange', () => { if (pc.iceGatheringState === 'complete') res(); });
  });
  await pc.setLocalDescription(await pc.createOffer());
  await gathered();
  const r = await fetch(`${base}/whip/${room}?name=whip-page`, { method: 'POST', body: pc.localDescription.sdp,
                                                                  headers: { 'Content-Type': 'application/sdp' } });
  if (r.status !== 201) throw new Error(`POST ${r.status} ${await r.text()}`);
  const answer = await r.text();
  await pc.setRemoteDescription({ type: 'answer', sdp: answer });
  window.W = { pc, answer, url: new URL(r.headers.get('Location'), base).href, etag: r.headers.get('ETag'), gathered };
  return { url: W.url, etag: W.etag };
}
"""

WHIP_RESTART_JS = r"""
async () => {
  const { pc } = W;
  pc.restartIce();
  await pc.setLocalDescription(await pc.createOffer());
  await W.gathered();
  const sdp = pc.localDescription.sdp;
  const ufrag = /a=ice-ufrag:(\S+)/.exec(sdp)[1], pwd = /a=ice-pwd:(\S+)/.exec(sdp)[1];
  const cands = sdp.split('\r\n').filter((l) => l.startsWith('a=candidate:'));
  const mid = /a=mid:(\S+)/.exec(sdp)[1];
  const frag = [`a=ice-ufrag:${ufrag}`, `a=ice-pwd:${pwd}`, 'm=video 9 UDP/TLS/RTP/SAVPF 0', `a=mid:${mid}`,
                ...cands, 'a=end-of-candidates', ''].join('\r\n');
  const r = await fetch(W.url, { method: 'PATCH', body: frag,
                                 headers: { 'Content-Type': 'application/trickle-ice-sdpfrag', 'If-Match': W.etag } });
  const body = await r.text();
  const out = { status: r.status, type: r.headers.get('Content-Type'), etag: r.headers.get('ETag'), body, oldEtag: W.etag };
  if (r.status !== 200) return out;
  // The new answer: the old one with the server's new credentials and candidates.
  const nu = /a=ice-ufrag:(\S+)/.exec(body)[1], np = /a=ice-pwd:(\S+)/.exec(body)[1];
  const nc = body.split('\r\n').filter((l) => l.startsWith('a=candidate:'));
  let lines = W.answer.split('\r\n').filter((l) => !l.startsWith('a=candidate:') && l !== 'a=end-of-candidates');
  lines = lines.map((l) => l.startsWith('a=ice-ufrag:') ? `a=ice-ufrag:${nu}` : l.startsWith('a=ice-pwd:') ? `a=ice-pwd:${np}` : l);
  const out2 = [];
  for (const l of lines) {
    out2.push(l);
    if (l.startsWith('a=mid:')) { out2.push(...nc); out2.push('a=end-of-candidates'); }
  }
  await pc.setRemoteDescription({ type: 'answer', sdp: out2.join('\r\n') });
  W.etag = out.etag;
  return out;
}
"""

PATCH_JS = r"""
async ([url, etag]) => {
  const r = await fetch(url, { method: 'PATCH', body: 'a=end-of-candidates\r\n',
                               headers: { 'Content-Type': 'application/trickle-ice-sdpfrag', 'If-Match': etag } });
  return r.status;
}
"""


def test_whip_patch_restarts_ice(server, pages, capsys):
    say = printer(capsys)
    room = unique_name("whip-restart")
    whip = pages("whip-client")
    session = whip.evaluate(WHIP_JS, [server.http, room])
    viewer = pages("whip-viewer")
    viewer.evaluate("T.connect()")
    viewer.evaluate("(n) => T.findOrCreate(n)", room)
    viewer.evaluate("(n) => T.join(n, {}, null)", "viewer")
    wait_js(viewer, "() => T.firstFrameAt.size === 1", timeout=20, what="the viewer decodes the WHIP client's video")
    watch = GapWatch([viewer])
    watch.run(1.0)
    n0 = restarts(server)

    out = whip.evaluate(WHIP_RESTART_JS)
    assert out["status"] == 200, out
    assert out["type"].startswith("application/trickle-ice-sdpfrag"), out
    assert out["etag"] and out["etag"] != out["oldEtag"], out
    assert re.search(r"^a=ice-ufrag:\S+", out["body"], re.M) and "a=candidate:" in out["body"], out["body"]
    wait_until(lambda: restarts(server) >= n0 + 1, 10, "the server completes the WHIP session's ICE restart")
    wait_js(whip, "() => ['connected', 'completed'].includes(W.pc.iceConnectionState)", timeout=10,
            what="the WHIP client connected again")
    watch.run(2.0)
    # The old ETag no longer names the session; the new one does.
    assert whip.evaluate(PATCH_JS, [session["url"], out["oldEtag"]]) == 412
    assert whip.evaluate(PATCH_JS, [session["url"], out["etag"]]) == 204
    say(f"\n[ice-restart] WHIP PATCH restart: ETag {out['oldEtag']} -> {out['etag']}; "
        f"viewer's longest time without a decoded frame {watch.gap[0] * 1000:.0f} ms")
    assert watch.gap[0] < 2.0, f"the viewer stalled across the WHIP restart: {watch.gap}"

# The receive connection's selected pair as Chromium counts it: ICE checks it sent (consent
# checks once connected) and the responses that passed its MESSAGE-INTEGRITY check.
PAIR_CHECKS_JS = r"""
async () => {
  const st = await T.me.receiveConnection.getStats(); let out = null;
  st.forEach((s) => {
    if (s.type === 'transport' && s.selectedCandidatePairId) {
      const p = st.get(s.selectedCandidatePairId);
      if (p) out = { requests: p.requestsSent || 0, consent: p.consentRequestsSent || 0, responses: p.responsesReceived || 0 };
    }
  });
  return out;
}
"""


def test_member_without_media_is_kept_by_consent_and_a_gone_peer_is_removed(server, pages, capsys):
    say = printer(capsys)
    room = unique_name("consent")
    pub, quiet, gone = pages("consent-pub"), pages("consent-quiet"), pages("consent-silent")
    for page, name, media in ((pub, "pub", CAMERA), (quiet, "quiet", None), (gone, "gone", None)):
        page.evaluate("T.connect()")
        page.evaluate("(n) => T.findOrCreate(n)", room)
        page.evaluate("([n, m]) => T.join(n, {}, m)", [name, media])
    for page, name in ((quiet, "quiet"), (gone, "gone")):
        wait_js(page, "() => T.firstFrameAt.size === 1", timeout=20, what=f"{name} decodes pub's video")
    # Connected transports are read by the worker itself (DirectReceiver), which from now on
    # answers the consent checks that keep quiet a member.
    samples = scrape(server.http)
    direct, transports = metric(samples, "minato_transports_direct"), metric(samples, "minato_transports")
    answered_before = metric(samples, "minato_ice_consent_checks_answered_total") or 0.0
    handbacks_before = metric(samples, "minato_direct_receive_handbacks_total") or 0.0
    # pub's send connection, quiet's and gone's receive connections (and any an earlier test of
    # this module's server left open): every one.
    assert transports is not None and transports >= 3 and direct == transports, f"{direct} of {transports} transports read directly"
    checks_before = quiet.evaluate(PAIR_CHECKS_JS)
    # pub stops publishing: quiet's and gone's receive connections carry no media from now on
    # (their only m-line is inactive), only ICE consent checks.
    pub.evaluate("() => T.me.unpublish(T.pubs.video.id)")
    wait_js(quiet, "() => T.room.publications.length === 0", timeout=10, what="quiet sees the unpublish")
    # gone's network dies: every datagram from or to its receive connection's port is dropped
    # (nftables in the test's namespace), so neither media nor consent checks reach the server.
    gone_id = gone.evaluate("T.me.id")
    port = gone.evaluate(LOCAL_PORT_JS)
    assert isinstance(port, int) and port > 0, port
    t_gone = time.monotonic()
    subprocess.run([nft_binary(), "-f", "-"], check=True, text=True, input=f"""table inet consent {{
    chain out {{ type filter hook output priority 0; policy accept; udp sport {port} drop; udp dport {port} drop; }}
}}
""")
    try:
        left = lambda: [e for e in quiet.evaluate("T.events") if e["type"] == "onMemberLeft"]
        wait_until(lambda: any(e["member"]["id"] == gone_id for e in left()), TRANSPORT_TIMEOUT_SEC + 10,
                   "the silent member is removed")
    finally:
        subprocess.run([nft_binary(), "-f", "-"], text=True, input="add table inet consent\ndelete table inet consent\n")
    reason = next(e.get("reason") for e in left() if e["member"]["id"] == gone_id)
    took = time.monotonic() - t_gone
    say(f"\n[consent] the silent member was removed after {took:.1f} s (reason {reason}; "
        f"media.transportTimeoutSec {TRANSPORT_TIMEOUT_SEC})")
    assert reason == "transportClosed", left()
    assert took >= TRANSPORT_TIMEOUT_SEC - 0.5, f"removed before its silence reached the timeout: {took:.1f} s"
    # Every transport left is connected: libnice's agent timers run only when one is due (a
    # connecting transport would make them run every 20 ms, 50 times a second).
    samples = scrape(server.http)
    timers_before, t_timers = metric(samples, "minato_worker_agent_timer_wakeups_total") or 0.0, time.monotonic()
    settled = metric(samples, "minato_transports_direct") == metric(samples, "minato_transports")
    # quiet heard nothing but consent for well over the timeout, and is still a member.
    time.sleep(max(2.0, 3 * TRANSPORT_TIMEOUT_SEC - (time.monotonic() - t_gone)))
    samples = scrape(server.http)
    timer_rate = ((metric(samples, "minato_worker_agent_timer_wakeups_total") or 0.0) - timers_before) / (time.monotonic() - t_timers)
    settled = settled and metric(samples, "minato_transports_direct") == metric(samples, "minato_transports")
    say(f"\n[consent] libnice agent timers ran {timer_rate:.1f} times/s with every transport connected "
        f"({metric(samples, 'minato_transports'):.0f} transports, all read directly: {settled})")
    assert settled, "a transport was not read directly (still connecting?) while the timers were counted"
    assert timer_rate < 10, f"agent timers ran {timer_rate:.1f} times/s with no transport connecting"
    names = {m["name"] for m in pub.evaluate("T.members()")}
    assert "quiet" in names, f"the member with consent but no media was removed: {names}; {left()}"
    assert quiet.evaluate("T.me.state") != "left", quiet.evaluate("T.events")
    say(f"[consent] quiet is still a member after {3 * TRANSPORT_TIMEOUT_SEC} s with no media on its connection")
    # Chromium accepted the worker's answers to its consent checks (it counts only responses
    # that pass its integrity check), and nothing came from an address that needed libnice.
    checks_after = quiet.evaluate(PAIR_CHECKS_JS)
    samples = scrape(server.http)
    answered = (metric(samples, "minato_ice_consent_checks_answered_total") or 0.0) - answered_before
    handbacks = (metric(samples, "minato_direct_receive_handbacks_total") or 0.0) - handbacks_before
    say(f"[consent] quiet's receive pair: {checks_before} -> {checks_after}; the worker answered {answered:.0f} "
        f"checks itself, {direct:.0f} of {transports:.0f} transports read directly, {handbacks:.0f} handed back to libnice")
    assert checks_after["responses"] >= checks_before["responses"] + 1, (checks_before, checks_after)
    assert answered >= 1, answered
    assert handbacks == 0, handbacks
