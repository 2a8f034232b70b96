"""Chromium pages through the browser SDK under random UDP loss (issue 16): what a viewer and a
listener would notice.

A publisher page (fake camera 640x360 / fake microphone) and a subscriber page join one room;
`impair.UdpLoss` drops a random share of UDP datagrams in the test namespace (nftables, input
hook: silent drops, like a lossy link; see impair.py). Each case measures a 15 s window that
starts when the subscriber has decoded its first frame (video) or played 1 s of audio, with the
loss switched on at that moment:

(1) video, 5% of every UDP datagram (both legs: publisher -> server and server -> subscriber):
    the subscriber's `totalFreezesDuration` grows by <= 1% of the window and its
    `framesDecoded` by >= 95% of the publisher's `framesEncoded` growth;
(2) audio, 5% of every UDP datagram (both legs, so ~9.75% of the publisher's packets are lost
    end to end): the share of concealed samples stays below AUDIO_MAX_CONCEALED, the audio is
    negotiated as RED (`audio/red`) and RED carries redundancy: most of the lost audio is
    recovered (RED_MIN_RECOVERED) and the redundant copies of packets that did arrive are
    discarded by the receiver (RED_MIN_DISCARDED_SHARE);
(3) video, 5% loss on the subscriber's leg only (both directions of its link: the media it
    receives and the NACKs/reports it sends), same assertions as (1).

Every case first asserts that the loss happened: nft dropped a share of the datagrams it saw
near the configured percent (within 5 standard deviations of a binomial draw; for (3) in each
direction on its own; impair.drop_rate_problem).
Each case prints one summary line, the raw counters (NACKs, retransmissions, losses, codecs,
whether RTX was negotiated) and the server's loss-related /metrics (deltas over the case).
Why input-hook drops matter here: Chromium resends a datagram once when sendto() fails, so an
output-hook drop of a packet Chromium sends usually costs nothing (5% becomes ~0.25%).
"""
from __future__ import annotations

import os
import time
from typing import Any, Optional

import pytest

from browser import BROWSER_SERVER_ENV, sdk_page, wait_js
from conftest import engine_pages
from impair import UdpLoss, drop_rate_problem
from loss_pair import metrics, metrics_delta
from minato_client import unique_name

MINATO_SERVER_ENV = dict(BROWSER_SERVER_ENV)

pytestmark = pytest.mark.timeout(120)

WINDOW_SEC = 15.0
# Every case drops this share (default 5%). LOSS_BROWSER_PERCENT is a knob for measuring (0: a
# control run); not MINATO_…, which the server would reject as an unknown configuration key.
LOSS_PERCENT = float(os.environ.get("LOSS_BROWSER_PERCENT", "5"))
# Chromium's fake camera delivers 20 fps whatever frame rate is asked for.
VIDEO = {"width": 640, "height": 360, "frameRate": 30}
# Video: frozen at most 1% of the window, >= 95% of the encoded frames decoded (the issue).
MAX_FROZEN_SHARE = 0.01
MIN_DECODED_SHARE = 0.95
# Audio: concealed samples / samples received over the window. Measured here, Chromium 156 to
# Chromium 156 peer to peer (one hop, silent random loss on input, 15 s): Opus alone (with its
# in-band FEC on) conceals 4.6% at 5% loss, 8.7% at 10%, 16.9% at 19%; with RED 0.1% at 5%,
# 0.5-0.8% at 10%, 2.8% at 19%. Through the SFU with 5% on both legs a packet is lost with
# ~9.75%, so RED should conceal ~0.5-0.8% and plain Opus ~8.5%. 5% per leg rather than 10% because it separates them best: at 10% per
# leg (19% end to end) RED still conceals ~2.8% against ~17%. Through Minato (this test): plain
# Opus 8.1% and 8.9%; RED 0.3%, 0.8%, 1.0%. Later, 9 more runs of RED: 0.35-1.44% (and one early
# run failed the 2.5% bound first chosen), so the bound is 3.5%: over 2x the highest RED run and
# still 2.3x under plain Opus. Measured again for issue "loss tests that pass without loss", 10
# runs: 0.19-0.94% (0.65, 0.47, 0.52, 0.94, 0.46, 0.84, 0.57, 0.81, 0.54, 0.19), 2-7 concealment
# events of 10-30 ms each per run, while 91-336 packets were lost. Likely (not proven) what RED
# leaves concealed are the few losses whose redundant copy (in the next packet) came after
# NetEq had to play the gap, so the share depends on Chromium's jitter-buffer level, not on the
# server (which forwards RED untouched). The 2.5% failure was not reproduced,
# so the bound stays 3.5%.
AUDIO_MAX_CONCEALED = 0.035
# RED must carry redundancy, not only be negotiated. Chromium's receiver (NetEq) splits each RED
# packet into its primary and redundant blocks; a redundant block whose packet is still missing
# fills the gap, and one whose packet already arrived is thrown away and counted in inbound
# `packetsDiscarded` (Opus in-band FEC would count in fecPacketsReceived instead). Over the window:
#  - recovered: the share of the lost audio that was not concealed, 1 - (concealedSamples /
#    totalSamplesReceived) / (packetsLost / (packetsReceived + packetsLost)) (every packet
#    carries the same duration; packetsLost counts before any repair), must be >=
#    RED_MIN_RECOVERED (a lower bound: concealment for other reasons, e.g. a jitter-buffer
#    underrun, counts against it). 0.6 matches AUDIO_MAX_CONCEALED at ~9.75% end-to-end loss;
#  - redundant copies arrived: packetsDiscarded grew by >= RED_MIN_DISCARDED_SHARE of the
#    packets received (each RED packet repeats earlier packets, almost all of which arrived).
# Measured here (5% on both legs, 15 s, 9 runs): RED recovered 90.4-98.0% of the lost audio
# (9.1-10.9% of the packets lost) and discarded 21-70% of the packets received (Chromium's
# packet rate for RED audio varied between runs, 60-200 packets/s, hence the spread); the control
# (LOSS_BROWSER_AUDIO=opus: the publisher's offer without audio/red, so plain Opus with in-band
# FEC) recovered 5% (8.54% concealed at 9.0% lost), discarded 0 and reported fecPacketsReceived 0.
RED_MIN_RECOVERED = 0.60
RED_MIN_DISCARDED_SHARE = 0.05
# LOSS_BROWSER_AUDIO=opus: a control run of the audio case without RED (its RED assertions then
# fail by design; the printed numbers are the plain-Opus baseline).
AUDIO_CODEC = os.environ.get("LOSS_BROWSER_AUDIO", "red")
STRIP_RED_JS = r"""
() => {
  const add = RTCPeerConnection.prototype.addTransceiver;
  RTCPeerConnection.prototype.addTransceiver = function (trackOrKind, init) {
    const t = add.call(this, trackOrKind, init);
    if ((trackOrKind.kind || trackOrKind) === 'audio') {
      t.setCodecPreferences(RTCRtpSender.getCapabilities('audio').codecs
        .filter((c) => c.mimeType.toLowerCase() !== 'audio/red'));
    }
    return t;
  };
  return true;
}
"""
METRIC_HEADS = ("rtcp_", "rtp_", "keyframe_", "nack", "retrans", "rtx")


# ---- fixtures ---------------------------------------------------------------------------------

@pytest.fixture
def pages(request, server):
    """Makes harness pages (window.T); saves their console logs and closes them after the test."""
    with engine_pages(request, "chromium", server, sdk_page, None, "loss") as make:
        yield make


# ---- stats ------------------------------------------------------------------------------------

# Everything the page's two peer connections report, plus what was negotiated per transceiver.
# What Chromium 156 reports here: inbound video has nackCount, pliCount, packetsLost,
# freezeCount, totalFreezesDuration, and only when RTX is negotiated rtxSsrc,
# retransmittedPacketsReceived/BytesReceived (these count its RTX padding probes too, so they
# run far above the NACKed packets); outbound has nackCount and retransmittedPacketsSent (also
# for plain retransmission without RTX) and rtxSsrc whenever its offer had RTX. Inbound audio
# has concealedSamples, silentConcealedSamples, concealmentEvents, inserted/removed samples,
# fecPacketsReceived (Opus in-band FEC used) and no nackCount. Codec stats name the payload a
# stream decodes: a RED audio stream shows audio/opus on both ends.
SNAPSHOT_JS = r"""
async () => {
  const out = { t: performance.now() };
  for (const [name, pc] of [['send', T.me.sendConnection], ['recv', T.me.receiveConnection]]) {
    if (!pc) continue;
    const stats = [];
    (await pc.getStats()).forEach((s) => stats.push(s));
    const trx = pc.getTransceivers().map((t) => ({
      mid: t.mid, direction: t.currentDirection,
      sendCodecs: (t.sender.getParameters().codecs || []).map((c) => c.mimeType),
      recvCodecs: (t.receiver.getParameters().codecs || []).map((c) => c.mimeType) }));
    out[name] = { stats, trx, local: pc.localDescription && pc.localDescription.sdp,
                  remote: pc.remoteDescription && pc.remoteDescription.sdp };
  }
  return out;
}
"""


class Snap:
    """One getStats snapshot of a page (both of its connections)."""

    def __init__(self, raw: dict) -> None:
        self.raw = raw
        self.t = raw["t"] / 1000.0

    def stats(self, side: str) -> list[dict]:
        return self.raw.get(side, {}).get("stats", [])

    def one(self, side: str, type_: str, kind: str) -> dict:
        found = [s for s in self.stats(side) if s["type"] == type_ and s.get("kind") == kind]
        return found[0] if found else {}

    def inbound(self, kind: str) -> dict:
        return self.one("recv", "inbound-rtp", kind)

    def outbound(self, kind: str) -> dict:
        return self.one("send", "outbound-rtp", kind)

    def remote_inbound(self, kind: str) -> dict:
        return self.one("send", "remote-inbound-rtp", kind)

    def codec_of(self, side: str, stat: dict) -> Optional[str]:
        for s in self.stats(side):
            if s["type"] == "codec" and s["id"] == stat.get("codecId"):
                return s["mimeType"]
        return None

    def codecs(self, side: str) -> list[str]:
        """Every codec stats entry of a connection (Chromium lists the ones streams refer to)."""
        return sorted({s["mimeType"] for s in self.stats(side) if s["type"] == "codec"})

    def negotiated(self, side: str) -> list[str]:
        """Per transceiver, the negotiated codecs (receiver's for recv, sender's for send)."""
        key = "recvCodecs" if side == "recv" else "sendCodecs"
        return [",".join(t[key]) for t in self.raw.get(side, {}).get("trx", []) if t["direction"] != "inactive"]

    def sdp(self, side: str, which: str) -> str:
        return self.raw.get(side, {}).get(which) or ""

    def local_port(self, side: str) -> int:
        """This page's UDP port of the connection's selected candidate pair."""
        by_id = {s["id"]: s for s in self.stats(side)}
        for s in self.stats(side):
            if s["type"] == "transport" and s.get("selectedCandidatePairId"):
                pair = by_id[s["selectedCandidatePairId"]]
                return int(by_id[pair["localCandidateId"]]["port"])
        raise AssertionError(f"no selected candidate pair on the {side} connection")


def snap(page) -> Snap:
    return Snap(page.evaluate(SNAPSHOT_JS))


def grew(a: dict, b: dict, key: str) -> Optional[float]:
    """b[key] - a[key], or None when Chromium does not report `key`."""
    if key not in b:
        return None
    return b[key] - a.get(key, 0)


def deltas(a: dict, b: dict, keys: list[str]) -> dict[str, Any]:
    out = {}
    for k in keys:
        d = grew(a, b, k)
        out[k] = "n/a" if d is None else (round(d, 3) if isinstance(d, float) else d)
    return out


def rtx_lines(sdp: str) -> str:
    """Whether an SDP carries RTX / RED (rtpmap lines), e.g. 'rtx=yes red=no'."""
    low = sdp.lower()
    return f"rtx={'yes' if ' rtx/' in low else 'no'} red={'yes' if ' red/' in low else 'no'}"


def short_metrics(before: dict, after: dict) -> dict[str, int]:
    return {k: v for k, v in metrics_delta(before, after).items() if k.startswith(METRIC_HEADS)}


# ---- the call ---------------------------------------------------------------------------------

def start_call(server, pages, media: dict, tag: str, prepare_pub: Optional[str] = None):
    """Publisher page (media from its fake devices) and subscriber page in a fresh room.
    `prepare_pub`: JS evaluated in the publisher's page before it joins (and publishes)."""
    room = unique_name(tag)
    pub, sub = pages("pub"), pages("sub")
    for p in (pub, sub):
        p.evaluate("T.connect()")
        p.evaluate("(n) => T.findOrCreate(n)", room)
    if prepare_pub:
        pub.evaluate(prepare_pub)
    pub.evaluate("(m) => T.join('pub', {}, m)", media)
    sub.evaluate("() => T.join('sub', {}, null)")
    return pub, sub


# One inbound-rtp entry (of `kind`) of the subscriber page, for the per-second timeline.
INBOUND_JS = r"""
async (kind) => {
  let out = null;
  if (!T.me.receiveConnection) return out;
  (await T.me.receiveConnection.getStats()).forEach((s) => { if (s.type === 'inbound-rtp' && s.kind === kind) out = s; });
  return out;
}
"""


def measure(pub, sub, loss: UdpLoss, kind: str):
    """Switches `loss` on; samples both pages at its start and after WINDOW_SEC, and the
    subscriber's inbound `kind` stats once a second in between (the timeline)."""
    with loss:
        p0, s0 = snap(pub), snap(sub)
        t0 = time.monotonic()
        timeline = [(0.0, s0.inbound(kind))]
        # The measurement window (the subject of the test), sampled once a second.
        for i in range(1, int(WINDOW_SEC)):
            time.sleep(max(0.0, t0 + i - time.monotonic()))
            timeline.append((time.monotonic() - t0, sub.evaluate(INBOUND_JS, kind) or {}))
        time.sleep(max(0.0, t0 + WINDOW_SEC - time.monotonic()))
        p1, s1 = snap(pub), snap(sub)
        elapsed = time.monotonic() - t0
        timeline.append((elapsed, s1.inbound(kind)))
        counters = loss.counters()
    return p0, p1, s0, s1, counters, elapsed, timeline


def per_second(timeline: list, key: str) -> list:
    """How much `key` grew in each second of the timeline."""
    return [round(b.get(key, 0) - a.get(key, 0), 3) for (_, a), (_, b) in zip(timeline, timeline[1:])]


def when_grew(timeline: list, key: str) -> str:
    """'at 3.0 s +0.24, at 9.0 s +0.21': the samples at which `key` grew (a freeze is counted
    when it ends, with the next frame)."""
    out = [f"at {t:.0f} s +{b.get(key, 0) - a.get(key, 0):.2f}" for (_, a), (t, b) in zip(timeline, timeline[1:])
           if b.get(key, 0) > a.get(key, 0)]
    return ", ".join(out) or "none"


def video_case(server, pages, capsys, name: str, loss_for) -> None:
    m0 = metrics(server.http)
    pub, sub = start_call(server, pages, {"audio": False, "video": VIDEO}, "lossv")
    wait_js(sub, "() => T.firstFrameAt.size > 0", timeout=30, what="the subscriber to decode its first frame")
    loss = loss_for(snap(sub))
    p0, p1, s0, s1, counters, elapsed, timeline = measure(pub, sub, loss, "video")
    m1 = metrics(server.http)

    vin0, vin1 = s0.inbound("video"), s1.inbound("video")
    vout0, vout1 = p0.outbound("video"), p1.outbound("video")
    encoded = grew(vout0, vout1, "framesEncoded") or 0
    decoded = grew(vin0, vin1, "framesDecoded") or 0
    frozen = grew(vin0, vin1, "totalFreezesDuration") or 0.0
    share = decoded / encoded if encoded else 0.0
    sub_d = deltas(vin0, vin1, ["packetsReceived", "packetsLost", "nackCount", "pliCount", "firCount",
                                "retransmittedPacketsReceived", "retransmittedBytesReceived", "freezeCount",
                                "framesReceived", "framesDropped", "keyFramesDecoded", "totalFreezesDuration"])
    pub_d = deltas(vout0, vout1, ["packetsSent", "framesEncoded", "keyFramesEncoded", "nackCount", "pliCount",
                                  "firCount", "retransmittedPacketsSent", "retransmittedBytesSent"])
    rin = p1.remote_inbound("video")
    jb = grew(vin0, vin1, "jitterBufferDelay")
    jbn = grew(vin0, vin1, "jitterBufferEmittedCount")
    with capsys.disabled():
        print(f"\n[{name}] loss {loss.describe()} ({counters['dropped']} of {counters['seen']} datagrams dropped), "
              f"{elapsed:.1f} s: decoded {decoded} of {encoded} encoded frames ({100 * share:.1f}%), "
              f"frozen {frozen:.2f} s in {grew(vin0, vin1, 'freezeCount')} freezes")
        print(f"  subscriber inbound video: {sub_d}")
        print(f"    per second: decoded {per_second(timeline, 'framesDecoded')}, NACKs {per_second(timeline, 'nackCount')}; "
              f"freezes ended {when_grew(timeline, 'totalFreezesDuration')}")
        print(f"    codec {s1.codec_of('recv', vin1)}, codec stats {s1.codecs('recv')}, negotiated "
              f"{s1.negotiated('recv')}, server offer {rtx_lines(s1.sdp('recv', 'remote'))}, "
              f"rtxSsrc {vin1.get('rtxSsrc', 'n/a')}, avg jitter buffer "
              f"{(1000 * jb / jbn) if jb and jbn else 0:.0f} ms, {vin1.get('frameWidth')}x{vin1.get('frameHeight')}")
        print(f"  publisher outbound video: {pub_d}")
        print(f"    codec {p1.codec_of('send', vout1)}, codec stats {p1.codecs('send')}, negotiated "
              f"{p1.negotiated('send')}, server answer {rtx_lines(p1.sdp('send', 'remote'))}, "
              f"rtxSsrc {vout1.get('rtxSsrc', 'n/a')}, {vout1.get('frameWidth')}x{vout1.get('frameHeight')} "
              f"{vout1.get('framesPerSecond')} fps, limited by {vout1.get('qualityLimitationReason')}, "
              f"server's reports: packetsLost {rin.get('packetsLost', 'n/a')} fractionLost "
              f"{rin.get('fractionLost', 'n/a')} rtt {rin.get('roundTripTime', 'n/a')}")
        print(f"  server /metrics (delta): {short_metrics(m0, m1)}")

    assert encoded > 0 and vin1, f"no video measured: publisher encoded {encoded} frames, subscriber stats {vin1}"
    # The loss really happened: nft dropped a share of what it saw near LOSS_PERCENT.
    nft_problem = loss.check(counters)
    assert not nft_problem, f"{name}: {nft_problem}"
    problems = []
    if frozen > MAX_FROZEN_SHARE * WINDOW_SEC:
        problems.append(f"frozen {frozen:.2f} s (> {MAX_FROZEN_SHARE * WINDOW_SEC:.2f} s, 1% of the window) in "
                        f"{grew(vin0, vin1, 'freezeCount')} freezes")
    if share < MIN_DECODED_SHARE:
        problems.append(f"decoded {decoded} of {encoded} encoded frames ({100 * share:.1f}% < "
                        f"{100 * MIN_DECODED_SHARE:.0f}%)")
    assert not problems, (
        f"{name}: at {loss.describe()} over {elapsed:.1f} s the subscriber " + " and ".join(problems)
        + f"; subscriber sent {sub_d['nackCount']} NACKs and {sub_d['pliCount']} PLIs, received "
        f"{sub_d['retransmittedPacketsReceived']} RTX packets (padding probes included), lost {sub_d['packetsLost']} packets; "
        f"publisher got {pub_d['nackCount']} NACKs, resent {pub_d['retransmittedPacketsSent']}; freezes ended "
        f"{when_grew(timeline, 'totalFreezesDuration')}; server {short_metrics(m0, m1)}")


class BothWays(UdpLoss):
    """UdpLoss on one port, both directions (datagrams to it and from it): two tables."""

    def __init__(self, percent: float, port: int) -> None:
        super().__init__(percent, dport=port, table="minato_impair_in")
        self.out = UdpLoss(percent, sport=port, table="minato_impair_out")
        self.port = port

    def describe(self) -> str:
        return f"{self.percent:g}% of datagrams to and from port {self.port} (the subscriber's link)"

    def start(self) -> "BothWays":
        super().start()
        try:
            self.out.start()
        except BaseException:
            super().stop()
            raise
        return self

    def stop(self) -> None:
        try:
            self.out.stop()
        finally:
            super().stop()

    def counters(self) -> dict[str, int]:
        a, b = super().counters(), self.out.counters()
        self.parts = (a, b)
        return {k: a[k] + b[k] for k in a}

    def check(self, counters: Optional[dict[str, int]] = None) -> str:
        """Each direction on its own (the sum of the last counters() read, per table)."""
        if counters is None or not getattr(self, "parts", None):
            self.counters()
        return "; ".join(f"{way}: {p}" for way, p in zip(
            ("to the subscriber", "from the subscriber"),
            (drop_rate_problem(part, self.permille / 1000) for part in self.parts)) if p)


# ---- the cases --------------------------------------------------------------------------------

def test_video_5pct_both_legs(server, pages, capsys):
    video_case(server, pages, capsys, f"video {LOSS_PERCENT:g}% both legs", lambda _: UdpLoss(LOSS_PERCENT))


def test_audio_red_5pct_both_legs(server, pages, capsys):
    m0 = metrics(server.http)
    pub, sub = start_call(server, pages, {"audio": True, "video": False}, "lossa",
                          STRIP_RED_JS if AUDIO_CODEC == "opus" else None)
    wait_js(sub, """async () => { const pc = T.me && T.me.receiveConnection; if (!pc) return false;
                let n = 0; (await pc.getStats()).forEach((s) => {
                if (s.type === 'inbound-rtp' && s.kind === 'audio') n = s.totalSamplesReceived || 0; });
                return n >= 48000; }""", timeout=30, what="the subscriber to play 1 s of the publisher's audio")
    loss = UdpLoss(LOSS_PERCENT)
    p0, p1, s0, s1, counters, elapsed, timeline = measure(pub, sub, loss, "audio")
    m1 = metrics(server.http)

    ain0, ain1 = s0.inbound("audio"), s1.inbound("audio")
    aout0, aout1 = p0.outbound("audio"), p1.outbound("audio")
    samples = grew(ain0, ain1, "totalSamplesReceived") or 0
    concealed = grew(ain0, ain1, "concealedSamples") or 0
    share = concealed / samples if samples else 1.0
    sub_d = deltas(ain0, ain1, ["packetsReceived", "packetsLost", "packetsDiscarded", "concealedSamples",
                                "silentConcealedSamples", "concealmentEvents", "totalSamplesReceived",
                                "insertedSamplesForDeceleration", "removedSamplesForAcceleration",
                                "fecPacketsReceived", "fecPacketsDiscarded", "nackCount"])
    pub_d = deltas(aout0, aout1, ["packetsSent", "bytesSent", "nackCount", "retransmittedPacketsSent"])
    in_codec, out_codec = s1.codec_of("recv", ain1), p1.codec_of("send", aout1)
    sub_negotiated, pub_negotiated = s1.negotiated("recv"), p1.negotiated("send")
    rin = p1.remote_inbound("audio")
    with capsys.disabled():
        print(f"\n[audio RED {LOSS_PERCENT:g}% both legs] loss {loss.describe()} ({counters['dropped']} of "
              f"{counters['seen']} datagrams dropped), {elapsed:.1f} s: concealed {100 * share:.2f}% of "
              f"{samples} samples, codec at subscriber {in_codec}, at publisher {out_codec}")
        print(f"  subscriber inbound audio: {sub_d}")
        print(f"    concealed samples per second {per_second(timeline, 'concealedSamples')}")
        print(f"    codec stats {s1.codecs('recv')}, negotiated {sub_negotiated}, server offer "
              f"{rtx_lines(s1.sdp('recv', 'remote'))}")
        print(f"  publisher outbound audio: {pub_d}")
        print(f"    codec stats {p1.codecs('send')}, negotiated {pub_negotiated}, server answer "
              f"{rtx_lines(p1.sdp('send', 'remote'))}, server's reports: packetsLost "
              f"{rin.get('packetsLost', 'n/a')} fractionLost {rin.get('fractionLost', 'n/a')}")
        print(f"  server /metrics (delta): {short_metrics(m0, m1)}")

    assert samples > 0, f"the subscriber played no audio in the window: {sub_d}"
    # The loss really happened: nft dropped a share of what it saw near LOSS_PERCENT.
    nft_problem = loss.check(counters)
    assert not nft_problem, f"audio: {nft_problem}"
    lost = grew(ain0, ain1, "packetsLost") or 0
    received = grew(ain0, ain1, "packetsReceived") or 0
    discarded = grew(ain0, ain1, "packetsDiscarded") or 0
    lost_share = lost / (received + lost) if received + lost > 0 else 0.0
    recovered = 1 - share / lost_share if lost_share > 0 else 0.0
    discarded_share = discarded / received if received else 0.0
    with capsys.disabled():
        print(f"  RED at work: {lost} packets lost before repair ({100 * lost_share:.2f}%), {100 * recovered:.1f}% of "
              f"the lost audio recovered (not concealed; bound {100 * RED_MIN_RECOVERED:g}%), {discarded} redundant copies discarded = "
              f"{100 * discarded_share:.1f}% of {received} received (bound {100 * RED_MIN_DISCARDED_SHARE:g}%); "
              f"audio {AUDIO_CODEC}")
    # RED negotiated: Chromium names the codec of an inbound RED stream after the payload it
    # decodes (audio/opus), so "audio/red" shows in the codec stats or, failing that, as the first
    # (sending) codec negotiated on both the publisher's sender and the subscriber's receiver.
    red = "audio/red"
    red_used = red in (in_codec, out_codec) or (
        any(n.lower().startswith(red) for n in pub_negotiated) and any(n.lower().startswith(red) for n in sub_negotiated))
    problems = []
    if not red_used:
        problems.append(f"the audio is not RED (codec at subscriber {in_codec}, at publisher {out_codec}, "
                        f"negotiated: publisher {pub_negotiated}, subscriber {sub_negotiated})")
    # ... and carrying redundancy (RED_MIN_RECOVERED above).
    if lost <= 0:
        problems.append(f"the subscriber lost no packets ({sub_d}): the loss did not reach it")
    elif recovered < RED_MIN_RECOVERED:
        problems.append(f"only {100 * recovered:.1f}% of the audio of the {lost} lost packets was recovered (< "
                        f"{100 * RED_MIN_RECOVERED:g}%: {concealed} samples concealed)")
    if discarded_share < RED_MIN_DISCARDED_SHARE:
        problems.append(f"no redundant copies arrived: packetsDiscarded +{discarded} of {received} received "
                        f"(< {100 * RED_MIN_DISCARDED_SHARE:g}%)")
    if share >= AUDIO_MAX_CONCEALED:
        problems.append(f"concealed {100 * share:.2f}% of the samples (>= {100 * AUDIO_MAX_CONCEALED:.1f}%: "
                        f"{concealed} of {samples}, {sub_d['concealmentEvents']} concealment events)")
    assert not problems, (
        f"audio at {loss.describe()} over {elapsed:.1f} s: " + "; ".join(problems)
        + f"; subscriber lost {sub_d['packetsLost']} packets, FEC packets {sub_d['fecPacketsReceived']}; "
        f"server {short_metrics(m0, m1)}")


def test_video_5pct_subscriber_leg(server, pages, capsys):
    def subscriber_link(sub_snap: Snap) -> UdpLoss:
        # Only the subscriber's link, both ways: what it receives (media, retransmissions) and
        # what it sends (NACKs, PLIs, receiver reports); the publisher's leg stays clean.
        port = sub_snap.local_port("recv")
        return BothWays(LOSS_PERCENT, port)
    video_case(server, pages, capsys, f"video {LOSS_PERCENT:g}% subscriber leg", subscriber_link)

