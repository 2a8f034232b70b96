"""Writes the seed corpora in fuzz/corpus/ (committed). RTP/RTCP seeds are serialized by aiortc's
own packet classes (an independent implementation), SDP seeds are the captured offers in
Tests/MinatoWireTests/Fixtures, JSON-RPC seeds are request chains of every method.
Run: .venv-interop/bin/python fuzz/make_seeds.py"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from aiortc import rtp
from aiortc.rtcrtpparameters import RTCRtpHeaderExtensionParameters, RTCRtpParameters

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "corpus"


def put(target: str, data: bytes) -> None:
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)


def rtp_seeds() -> list[bytes]:
    params = RTCRtpParameters(headerExtensions=[
        RTCRtpHeaderExtensionParameters(id=1, uri="urn:ietf:params:rtp-hdrext:sdes:mid"),
        RTCRtpHeaderExtensionParameters(id=2, uri="http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time"),
        RTCRtpHeaderExtensionParameters(id=3, uri="urn:ietf:params:rtp-hdrext:ssrc-audio-level"),
    ])
    ext_map = rtp.HeaderExtensionsMap()
    ext_map.configure(params)
    out = []
    for pt, payload, marker in [(96, b"\x10\x00\x9d\x01\x2a" + bytes(40), 1),    # VP8 keyframe start
                                (96, b"\x90\x80\x05\x01" + bytes(30), 0),         # VP8 with picture id
                                (102, b"\x7c\x85" + bytes(30), 0),                # H264 FU-A IDR start
                                (102, b"\x18\x00\x05\x67\x42\x00\x1f\x00" + bytes(8), 0),  # STAP-A SPS
                                (98, b"\x8a" + bytes(20), 1),                     # VP9
                                (111, b"\xfc\xff\xfe" + bytes(60), 0)]:           # Opus
        p = rtp.RtpPacket(payload_type=pt, marker=marker, sequence_number=65530, timestamp=123456, ssrc=0x11223344)
        p.extensions.mid = "0"
        p.extensions.abs_send_time = 0x123456
        if pt == 111:
            p.extensions.audio_level = (True, 30)
        p.payload = payload
        out.append(p.serialize(ext_map))
        bare = rtp.RtpPacket(payload_type=pt, sequence_number=1, timestamp=2, ssrc=3)
        bare.payload = payload
        bare.csrc = [7, 8]
        out.append(bare.serialize())
    return out


def rtcp_seeds() -> list[bytes]:
    rb = rtp.RtcpReceiverInfo(ssrc=0x11223344, fraction_lost=3, packets_lost=10, highest_sequence=70000,
                              jitter=20, lsr=0x12345678, dlsr=100)
    sr = rtp.RtcpSrPacket(ssrc=1, sender_info=rtp.RtcpSenderInfo(ntp_timestamp=0x1234567890ABCDEF, rtp_timestamp=99,
                                                                  packet_count=5, octet_count=500), reports=[rb])
    rr = rtp.RtcpRrPacket(ssrc=2, reports=[rb, rb])
    sdes = rtp.RtcpSdesPacket(chunks=[rtp.RtcpSourceInfo(ssrc=1, items=[(1, b"cname-abc")])])
    bye = rtp.RtcpByePacket(sources=[1, 2])
    pli = rtp.RtcpPsfbPacket(fmt=rtp.RTCP_PSFB_PLI, ssrc=2, media_ssrc=1)
    fir = rtp.RtcpPsfbPacket(fmt=4, ssrc=2, media_ssrc=0, fci=b"\x00\x00\x00\x01\x05\x00\x00\x00")
    remb = rtp.RtcpPsfbPacket(fmt=rtp.RTCP_PSFB_APP, ssrc=2, media_ssrc=0, fci=rtp.pack_remb_fci(750000, [1, 5]))
    nack = rtp.RtcpRtpfbPacket(fmt=rtp.RTCP_RTPFB_NACK, ssrc=2, media_ssrc=1, lost=[10, 12, 30, 500])
    twcc = bytes.fromhex("8fcd0005" "00000002" "00000001" "0001000a" "00001201" "20050000")
    # TWCC with a run of large deltas, a 1-bit and a 2-bit status vector; and one with RTCP padding.
    twcc_chunks = bytes.fromhex("8fcd0008" "00000001" "00000002" "000a0013" "00000100" "4002a000" "c400ffff" "01000506" "00000000")
    twcc_padded = bytes.fromhex("afcd0006" "01020304" "0a0b0c0d" "fffe0003" "fffffe42" "d2000403" "e8000003")
    single = [bytes(p) for p in (sr, rr, sdes, bye, pli, fir, remb, nack)] + [twcc, twcc_chunks, twcc_padded]
    return single + [single[0] + single[2], single[1] + single[4] + single[7], b"".join(single)]


def jsonrpc_seeds() -> list[bytes]:
    def req(i: int, method: str, params: dict) -> str:
        return json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params})
    sdp = (REPO / "Tests/MinatoWireTests/Fixtures/aiortc-offer-audio-video.sdp").read_text()
    chains = [
        [req(1, "createRoom", {"name": "r1", "metadata": "m", "password": "pw"}),
         req(2, "join", {"roomId": "$room", "name": "alice", "password": "pw"}),
         req(3, "updateMemberMetadata", {"memberId": "$member", "metadata": "x"}),
         req(4, "keepalive", {"memberId": "$member"}),
         req(5, "publish", {"memberId": "$member", "contentType": "audio", "mid": "0", "offer": {"type": "offer", "sdp": sdp}}),
         req(6, "negotiate", {"memberId": "$member", "offer": {"type": "offer", "sdp": sdp}}),
         req(7, "getRoom", {"roomId": "$room"}),
         req(8, "leave", {"memberId": "$member"})],
        [req(1, "findOrCreateRoom", {"name": "r2"}), req(2, "listRooms", {}),
         req(3, "findRoom", {"name": "r2"}), req(4, "subscribeRoomEvents", {"roomId": "$room", "offset": 0}),
         req(5, "updateRoomMetadata", {"roomId": "$room", "metadata": "y"}),
         req(6, "join", {"roomId": "$room", "name": "bob", "keepaliveIntervalSec": 5, "replace": True}),
         req(7, "subscribe", {"memberId": "$member", "publicationId": "nope"}),
         req(8, "unsubscribe", {"subscriptionId": "nope"}),
         req(9, "unpublish", {"publicationId": "nope"}),
         req(10, "enablePublication", {"publicationId": "nope"}),
         req(11, "disablePublication", {"publicationId": "nope"}),
         req(12, "updatePublicationMetadata", {"publicationId": "nope", "metadata": ""}),
         req(13, "answer", {"memberId": "$member", "answer": {"type": "answer", "sdp": "v=0"}}),
         req(14, "iceCandidate", {"memberId": "$member", "direction": "send",
                                  "candidate": {"candidate": "candidate:1 1 udp 1 127.0.0.1 5000 typ host", "sdpMid": "0", "sdpMLineIndex": 0}}),
         req(15, "changePreferredEncoding", {"subscriptionId": "nope", "preferredEncodingId": "h"}),
         req(16, "closeRoom", {"roomId": "$room"})],
        ['{"jsonrpc":"2.0","id":1,"method":"getRoom",', '[1,2]', '{"jsonrpc":"2.0","id":{},"method":"x"}',
         '{"jsonrpc":"2.0","id":"s","method":"nope","params":[]}'],
    ]
    return ["\n".join(c).encode() for c in chains]


def sdp_edge_seeds() -> list[bytes]:
    """Offers with numeric edge cases and bytes that must not pass through: huge clock rates,
    payload types out of 0...127, ports past 65535, SSRCs past 32 bits, a lone CR or a NUL
    inside a line, bad mids, unsafe fmtp parameters."""
    head = ("v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0\r\n"
            "a=ice-ufrag:abcd\r\na=ice-pwd:aaaaaaaaaaaaaaaaaaaaaa\r\n"
            "a=fingerprint:sha-256 AB:CD:EF:01\r\na=setup:actpass\r\n")

    def video(pt: str = "96", rtpmap: str = "a=rtpmap:96 VP8/90000", extra: str = "", port: str = "9") -> str:
        return (f"m=video {port} UDP/TLS/RTP/SAVPF {pt}\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\na=sendonly\r\n"
                f"a=rtcp-mux\r\n{rtpmap}\r\n{extra}a=ssrc:1234 cname:x\r\n")

    def audio(rtpmap: str, extra: str = "") -> str:
        return (f"m=audio 9 UDP/TLS/RTP/SAVPF 111\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\na=sendonly\r\n"
                f"a=rtcp-mux\r\n{rtpmap}\r\n{extra}a=ssrc:1 cname:y\r\n")

    texts = [
        head + video(rtpmap="a=rtpmap:96 VP8/99999999999"),
        head + video(rtpmap="a=rtpmap:96 VP8/99999999999999999999999"),
        head + video(rtpmap="a=rtpmap:96 VP8/0"),
        head + video(rtpmap="a=rtpmap:96 VP8/4294967296"),
        head + video(rtpmap="a=rtpmap:96 VP8/48000"),
        head + video(pt="128", rtpmap="a=rtpmap:128 VP8/90000"),
        head + video(pt="255", rtpmap="a=rtpmap:255 VP8/90000"),
        head + video(pt="-1", rtpmap="a=rtpmap:-1 VP8/90000"),
        head + video(pt="96 128", rtpmap="a=rtpmap:96 VP8/90000\r\na=rtpmap:128 VP9/90000"),
        head + video(port="65536"),
        head + video(port="99999999999999999999/2"),
        head + video(extra="a=ssrc:99999999999999999999 cname:x\r\n"),
        head + video(extra="a=ssrc:0 cname:zero\r\n"),
        head + video(extra="a=ssrc-group:FID 1234 4294967296\r\n"),
        head + video(rtpmap="a=rtpmap:96 H264/90000", extra="a=fmtp:96 packetization-mode=10;profile-level-id=42e01f\r\n"),
        head + video(rtpmap="a=rtpmap:96 H264/90000",
                     extra="a=fmtp:96 packetization-mode=1;x=<script>;" + "k" * 40 + "=1;" + ";".join(f"p{i}=v" for i in range(20)) + "\r\n"),
        head + video(extra="a=fmtp:96 max-fs=12288\ra=injected:1\r\n"),
        head + video(extra="a=extmap:1 urn:ietf:params:rtp-hdrext:sdes:mid\x00a=evil\r\n"),
        head + video().replace("a=mid:0", "a=mid:bad mid"),
        head + video().replace("a=mid:0", "a=mid:" + "m" * 33),
        head + video().replace("a=mid:0", "a=mid:"),
        head + audio("a=rtpmap:111 opus/48000/3"),
        head + audio("a=rtpmap:111 opus/48000"),
        head + audio("a=rtpmap:111 opus/90000/2"),
        head + audio("a=rtpmap:111 opus/48000/99999999999999999999"),
        head + audio("a=rtpmap:111 opus/48000/2", extra="a=fmtp:111 minptime=10;useinbandfec=1\r\r\n"),
        "v=0\ro=- 1 1 IN IP4 127.0.0.1\rs=-\r\n",
        "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=\x00\r\n",
    ]
    return [t.encode("utf-8", "surrogateescape") for t in texts]


def main() -> None:
    for data in rtp_seeds():
        put("FuzzRtp", data)
        put("FuzzDemux", data)
        put("FuzzRouter", bytes([5, 0x80, 5, 0x01, 0, len(data)]) + data + bytes([2, 50, 3, 1, 3, 1, 5, 0x81]))
    for data in rtcp_seeds():
        put("FuzzRtcp", data)
        put("FuzzDemux", data)
        put("FuzzRouter", bytes([5, 0x80, 1, 1, min(len(data), 255)]) + data[:255] + bytes([2, 200]))
    for f in sorted((REPO / "Tests/MinatoWireTests/Fixtures").glob("*.sdp")):
        put("FuzzSdp", f.read_bytes())
    for data in sdp_edge_seeds():
        put("FuzzSdp", data)
    for data in jsonrpc_seeds():
        put("FuzzJsonRpc", data)
    put("FuzzDemux", b"\x00\x01\x00\x00\x21\x12\xa4\x42" + bytes(12))   # STUN binding request header
    put("FuzzDemux", b"\x16\xfe\xfd" + bytes(10))                        # DTLS 1.2 handshake record


if __name__ == "__main__":
    main()
