"""The receiver reports Minato sends a publisher tell the truth (README: "receiver reports with
real loss and jitter").

An aiortc publisher sends Opus (a 440 Hz sine) and VP8 (with RTX) to the server; nftables drops
LOSS_PERCENT of the RTP packets of each of its two media SSRCs on their way in (impair.UdpLoss
matching the publisher's UDP port and the SSRC in the RTP header), and nothing else: not its
RTX, RTCP, STUN or DTLS, and nothing the server sends. So nft's counters say exactly how many
packets of each stream never reached the server. The test records every RTCP receiver-report
block aiortc receives for its two SSRCs, and every RTP packet it sends (time, SSRC, sequence
number, timestamp), and asserts, per stream:

- cumulative lost: after the loss window (and once a report covers a packet sent after it),
  the growth of the report's cumulative number of packets lost equals the packets nft dropped
  (exactly: on loopback nothing else is lost, reordered or duplicated). For video this is the
  loss *before* repair: the server restores every dropped packet from the publisher's RTX, and
  RFC 3550/4588 (and libwebrtc, which counts RTX-recovered packets in no SSRC's receive
  statistics) report the original stream's loss as it arrived;
- fraction lost: each report's fraction is floor(256 x lost / expected) for the interval since
  the stream's previous report (RFC 3550 A.3), the intervals read from consecutive reports'
  cumulative lost and extended highest sequence number (so, with the exact cumulative count,
  the fractions add up to nft's drops);
- jitter: non-zero, and within a factor of JITTER_RATIO (plus JITTER_SLACK_MS) of the
  interarrival jitter computed from the publisher's own send times (RFC 3550 A.8; on loopback
  a packet arrives within a fraction of a millisecond of being sent), at the same packet.

Prints one line per stream and writes artifacts/interop/loss-reports.json.
"""
from __future__ import annotations

import asyncio
import json
import struct
import time
from typing import Any

from aiortc.rtcdtlstransport import RTCDtlsTransport
from aiortc.rtcrtpsender import RTCRtpSender
from aiortc.rtp import RtcpRrPacket, RtcpSrPacket, is_rtcp

from conftest import ARTIFACTS
from impair import UdpLoss
from loss_pair import candidate_port
from media import SineAudioTrack, SyntheticVideoTrack
from minato_client import Member, create_room, run_async, unique_name
from waiting import await_until

LOSS_PERCENT = 5.0
WINDOW_SEC = 10.0
CLOCK = {"audio": 48000, "video": 90000}
# The server's jitter against the one computed from the send times: within this factor, plus
# this much (a packet's way through loopback and the server's receive thread varies by well under
# a millisecond; the slack keeps a near-zero reference from demanding a near-zero report).
JITTER_RATIO = 2.0
JITTER_SLACK_MS = 1.0


class Recorder:
    """Every report block aiortc's senders receive and every RTP packet they send, with times."""

    def __init__(self) -> None:
        self.reports: dict[int, list[dict]] = {}
        self.sent: dict[int, list[tuple[float, int, int]]] = {}   # ssrc -> [(t, seq, ts)]
        self._saved: list[tuple[type, str, Any]] = []

    def install(self) -> None:
        rec = self
        handle, send = RTCRtpSender._handle_rtcp_packet, RTCDtlsTransport._send_rtp

        async def handle_rtcp(sender: RTCRtpSender, packet: Any) -> None:
            if isinstance(packet, (RtcpRrPacket, RtcpSrPacket)):
                for r in packet.reports:
                    if r.ssrc == sender._ssrc:
                        rec.reports.setdefault(r.ssrc, []).append({
                            "t": time.monotonic(), "fraction": r.fraction_lost, "lost": r.packets_lost,
                            "highest": r.highest_sequence, "jitter": r.jitter})
            await handle(sender, packet)

        async def send_rtp(transport: RTCDtlsTransport, data: bytes) -> None:
            if not is_rtcp(data) and len(data) >= 12:
                _, _, seq, ts, ssrc = struct.unpack("!BBHII", data[:12])
                rec.sent.setdefault(ssrc, []).append((time.monotonic(), seq, ts))
            await send(transport, data)

        self._saved = [(RTCRtpSender, "_handle_rtcp_packet", handle), (RTCDtlsTransport, "_send_rtp", send)]
        RTCRtpSender._handle_rtcp_packet = handle_rtcp
        RTCDtlsTransport._send_rtp = send_rtp

    def uninstall(self) -> None:
        for cls, name, fn in self._saved:
            setattr(cls, name, fn)
        self._saved = []

    def last(self, ssrc: int) -> dict:
        return (self.reports.get(ssrc) or [{}])[-1]


def reference_jitter(sent: list[tuple[float, int, int]], clock: int) -> dict[int, float]:
    """RFC 3550 A.8 interarrival jitter over the packets as sent (send time as arrival), in
    timestamp units: {sequence number: jitter after that packet}, for the packets sent once."""
    out, j, prev = {}, 0.0, None
    for t, seq, ts in sent:
        transit = t * clock - ts
        if prev is not None:
            d = transit - prev
            # the RTP timestamp wraps modulo 2^32
            d = (d + 2**31) % 2**32 - 2**31
            j += (abs(d) - j) / 16
        prev = transit
        out[seq] = j
    return out


def judge(kind: str, ssrc: int, rec: Recorder, base: dict, final: dict, nft: dict[str, int],
          window: list[dict]) -> tuple[dict, list[str]]:
    """The numbers of one stream and what is wrong with them."""
    clock = CLOCK[kind]
    lost = final["lost"] - base["lost"]
    expected = final["highest"] - base["highest"]
    problems = []
    if lost != nft["dropped"]:
        problems.append(f"cumulative lost grew by {lost}, nft dropped {nft['dropped']} of the stream's packets")
    # Each report's fraction against its own interval (RFC 3550 A.3).
    bad_fraction = []
    for a, b in zip(window, window[1:]):
        exp_i, lost_i = b["highest"] - a["highest"], b["lost"] - a["lost"]
        want = 0 if exp_i <= 0 or lost_i <= 0 else min(255, 256 * lost_i // exp_i)
        if b["fraction"] != want:
            bad_fraction.append((b["fraction"], want, lost_i, exp_i))
    if bad_fraction:
        problems.append(f"fraction lost differs from its interval's lost/expected in {len(bad_fraction)} of "
                        f"{len(window) - 1} reports (reported, wanted, lost, expected): {bad_fraction[:5]}")
    fractions = [b["fraction"] / 256 for b in window[1:]]
    share = lost / expected if expected > 0 else 0.0
    nft_share = nft["dropped"] / max(1, nft["seen"])
    # Jitter, against the send times at the same packets.
    ref = reference_jitter(rec.sent.get(ssrc, []), clock)
    pairs = [(r["jitter"], ref[r["highest"] & 0xFFFF]) for r in window if (r["highest"] & 0xFFFF) in ref]
    slack = JITTER_SLACK_MS * clock / 1000
    off = [(j, round(x)) for j, x in pairs if not (x / JITTER_RATIO - slack <= j <= x * JITTER_RATIO + slack)]
    if not pairs:
        problems.append("no report in the window names a packet the publisher sent")
    if not any(j > 0 for j, _ in pairs):
        problems.append(f"jitter is 0 in every report ({len(pairs)})")
    if off:
        problems.append(f"jitter outside x{JITTER_RATIO:g} (+{JITTER_SLACK_MS:g} ms) of the send-time jitter in "
                        f"{len(off)} of {len(pairs)} reports (reported, reference; timestamp units): {off[:6]}")
    ms = 1000 / clock
    numbers = {
        "kind": kind, "ssrc": ssrc, "nftSeen": nft["seen"], "nftDropped": nft["dropped"],
        "cumulativeLostGrowth": lost, "expected": expected, "lostShare": round(share, 4),
        "nftDroppedShare": round(nft_share, 4), "reports": len(window),
        "fractionLostMean": round(sum(fractions) / max(1, len(fractions)), 4),
        "fractionLostRange": [round(min(fractions, default=0), 4), round(max(fractions, default=0), 4)],
        "jitterMs": [round(j * ms, 2) for j, _ in pairs], "referenceJitterMs": [round(x * ms, 2) for _, x in pairs],
    }
    return numbers, problems


async def run_case(server) -> tuple[list[dict], list[str]]:
    rec = Recorder()
    rec.install()
    room = await create_room(server.url, unique_name("rr"))
    m = await Member.join(server.url, room["id"], "rr-pub")
    try:
        audio, video = SineAudioTrack(), SyntheticVideoTrack()
        pubs = {"audio": await m.publish(audio), "video": await m.publish(video)}
        senders = {t.sender.kind: t.sender for t in m.send_pc.getTransceivers()}
        ssrcs = {kind: senders[kind]._ssrc for kind in pubs}
        port = candidate_port(m.send_pc.localDescription.sdp)
        # Clean reports first: two per stream (the second covers a full interval).
        await await_until(lambda: all(len(rec.reports.get(s, [])) >= 2 for s in ssrcs.values()), 15,
                          "two receiver reports for each stream", state=lambda: {k: len(v) for k, v in rec.reports.items()})
        base = {kind: rec.last(s) for kind, s in ssrcs.items()}
        problems = [f"{kind}: {base[kind]['lost']} packets reported lost before any loss"
                    for kind in ssrcs if base[kind]["lost"] != 0]
        n0 = {s: len(rec.reports[s]) - 1 for s in ssrcs.values()}
        losses = {kind: UdpLoss(LOSS_PERCENT, sport=port, ssrc=s, table=f"minato_impair_{kind}") for kind, s in ssrcs.items()}
        for loss in losses.values():
            loss.start()
        try:
            await asyncio.sleep(WINDOW_SEC)        # the loss window itself
            nft = {kind: loss.counters() for kind, loss in losses.items()}
        finally:
            for loss in reversed(list(losses.values())):
                loss.stop()
        # A report that covers a packet sent after the loss: every drop is counted in it.
        after = {s: (rec.sent[s][-1][1] + 1) & 0xFFFF for s in ssrcs.values()}

        def covered(s: int) -> bool:
            r = rec.last(s)
            return bool(r) and ((r["highest"] & 0xFFFF) - after[s]) & 0xFFFF < 0x8000
        await await_until(lambda: all(covered(s) for s in ssrcs.values()), 10,
                          "a receiver report covering a packet sent after the loss window",
                          state=lambda: {s: rec.last(s).get("highest") for s in ssrcs.values()})
        out = []
        for kind, s in ssrcs.items():
            problems += [f"{kind}: {p}" for p in (losses[kind].check(nft[kind]),) if p]
            numbers, found = judge(kind, s, rec, base[kind], rec.last(s), nft[kind], rec.reports[s][n0[s]:])
            out.append(numbers)
            problems += [f"{kind}: {p}" for p in found]
        return out, problems
    finally:
        rec.uninstall()
        await m.close()


def test_receiver_reports_match_nft_drops(server, capsys) -> None:
    streams, problems = run_async(run_case(server), timeout=60)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "loss-reports.json").write_text(json.dumps({"streams": streams, "problems": problems}, indent=1))
    with capsys.disabled():
        for n in streams:
            j, r = n["jitterMs"], n["referenceJitterMs"]
            print(f"\n[receiver reports {n['kind']}] nft dropped {n['nftDropped']} of {n['nftSeen']} "
                  f"({100 * n['nftDroppedShare']:.2f}%); reports: cumulative lost +{n['cumulativeLostGrowth']} of "
                  f"{n['expected']} expected ({100 * n['lostShare']:.2f}%), fraction lost mean "
                  f"{100 * n['fractionLostMean']:.2f}% range {n['fractionLostRange']} over {n['reports']} reports; "
                  f"jitter {min(j, default=0)}..{max(j, default=0)} ms (send-time reference "
                  f"{min(r, default=0)}..{max(r, default=0)} ms)")
    assert not problems, "; ".join(problems)
