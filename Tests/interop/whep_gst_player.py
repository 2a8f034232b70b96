#!/usr/bin/python3
"""A WHEP player on GStreamer webrtcbin (1.22, libnice): a third-party receiver for the WHEP tests.

Run with Debian's /usr/bin/python3 (GStreamer's Python bindings, python3-gi, exist only there;
the suite's venv cannot import them), as a subprocess of whip_peers.WhepPlayer:

    /usr/bin/python3 Tests/interop/whep_gst_player.py --url http://127.0.0.1:PORT/whep/ROOM/MEMBER \
        --seconds 5 [--token JWT] [--video-codecs VP8,H264] [--no-audio | --no-video] [--keep]

What it does, in order:
 1. webrtcbin (bundle-policy max-bundle) with one recvonly audio transceiver (Opus) and one
    recvonly video transceiver (VP8 and H264 constrained baseline, packetization-mode 1; NACK on);
 2. ICE: explicit local address 127.0.0.1 on webrtcbin's NiceAgent (libnice skips interfaces
    flagged loopback, so without it a loopback-only namespace has no candidate), UPnP off, ICE-TCP
    off; the Python references to the GstWebRTCNice and NiceAgent objects are kept in globals for
    the whole run (dropping them makes PyGObject unref objects webrtcbin still uses: criticals,
    then a segfault);
 3. creates the offer, sets it, waits for ICE gathering to complete (no trickle: every candidate
    is in the offer; --gather-timeout caps the wait, then whatever was gathered is sent);
 4. POSTs the offer (Content-Type application/sdp, `Authorization: Bearer TOKEN` if given, no
    proxies) and applies a 201 answer; any other status is recorded and the player stops;
 5. decodes what arrives: each webrtcbin src pad -> decodebin -> fakesink with handoffs, counting
    video frames (width/height from the negotiated caps) and audio buffers;
 6. after --seconds (counted from the answer being applied) sends DELETE to the Location (unless
    --keep) and prints ONE JSON line on stdout, the last line of output:

    {"status": 201, "location": "...", "etag": "...", "video_frames": N, "width": W, "height": H,
     "audio_buffers": N, "first_frame_s": S, "first_audio_s": S, "errors": [...],
     "delete_status": 200, "video_codec": "VP8", "audio_codec": "OPUS", "decoders": [...],
     "ice_connection_state": "...", "connection_state": "...", "offer": SDP, "answer": SDP}

first_frame_s / first_audio_s are seconds from sending the POST to the first decoded video frame
/ audio buffer (null if none). Logs go to stderr. Exit code 0 whenever the JSON line was printed
(the caller asserts on it), 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstWebRTC", "1.0")
gi.require_version("GstSdp", "1.0")
gi.require_version("Nice", "0.1")
from gi.repository import GLib, Gst, GstSdp, GstWebRTC, Nice  # noqa: E402

VIDEO_CAPS = {
    "VP8": "application/x-rtp,media=video,encoding-name=VP8,payload=96,clock-rate=90000",
    "H264": ("application/x-rtp,media=video,encoding-name=H264,payload=102,clock-rate=90000,"
             "packetization-mode=(string)1,profile-level-id=(string)42e01f,level-asymmetry-allowed=(string)1"),
}
AUDIO_CAPS = "application/x-rtp,media=audio,encoding-name=OPUS,payload=111,clock-rate=48000,encoding-params=(string)2"

# Kept alive for the whole run (see the docstring, step 2).
KEEP: list = []


def log(*a) -> None:
    print(f"[whep-gst {time.monotonic() - T0:7.3f}]", *a, file=sys.stderr, flush=True)


T0 = time.monotonic()


class Player:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.loop = GLib.MainLoop()
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self.result = {
            "status": None, "location": None, "etag": None,
            "video_frames": 0, "width": None, "height": None, "audio_buffers": 0,
            "first_frame_s": None, "first_audio_s": None, "errors": [],
            "delete_status": None, "video_codec": None, "audio_codec": None, "decoders": [],
            "audio_rate": None, "ice_connection_state": None, "connection_state": None,
            "offer": None, "answer": None,
        }
        self.t_post: float | None = None
        self.offer_sent = False
        self.pipe = Gst.Pipeline.new("whep")
        self.webrtc = Gst.ElementFactory.make("webrtcbin", "recv")
        if self.webrtc is None:
            raise SystemExit("webrtcbin missing: apt-get install gstreamer1.0-plugins-bad gstreamer1.0-nice")
        self.webrtc.set_property("bundle-policy", GstWebRTC.WebRTCBundlePolicy.MAX_BUNDLE)
        self.pipe.add(self.webrtc)
        self._configure_ice()
        self.webrtc.connect("pad-added", self._on_pad_added)
        self.webrtc.connect("notify::ice-gathering-state", self._on_gathering)
        self.webrtc.connect("notify::ice-connection-state", self._on_state)
        self.webrtc.connect("notify::connection-state", self._on_state)
        bus = self.pipe.get_bus()
        bus.add_signal_watch()
        bus.connect("message::error", self._on_error)
        bus.connect("message::warning", self._on_warning)

    # ---- setup -------------------------------------------------------------------------------
    def _configure_ice(self) -> None:
        ice = self.webrtc.get_property("ice-agent")
        agent = ice.get_property("agent")
        KEEP.extend([ice, agent])
        agent.set_property("upnp", False)
        agent.set_property("ice-tcp", False)
        ice.set_property("ice-tcp", False)
        for ip in self.args.local_address:
            addr = Nice.Address.new()
            if not addr.set_from_string(ip):
                raise SystemExit(f"bad --local-address {ip!r}")
            agent.add_local_address(addr)
            KEEP.append(addr)

    def _add_transceivers(self) -> None:
        RECVONLY = GstWebRTC.WebRTCRTPTransceiverDirection.RECVONLY
        if not self.args.no_audio:
            t = self.webrtc.emit("add-transceiver", RECVONLY, Gst.Caps.from_string(AUDIO_CAPS))
            KEEP.append(t)
        if not self.args.no_video:
            caps = Gst.Caps.new_empty()
            for name in self.args.video_codecs.split(","):
                c = Gst.Caps.from_string(VIDEO_CAPS[name.strip().upper()])
                caps.append(c)
            t = self.webrtc.emit("add-transceiver", RECVONLY, caps)
            t.set_property("do-nack", True)
            KEEP.append(t)

    def start(self) -> None:
        self._add_transceivers()
        if self.pipe.set_state(Gst.State.PLAYING) == Gst.StateChangeReturn.FAILURE:
            self.fail("pipeline did not go to PLAYING")
            return
        promise = Gst.Promise.new_with_change_func(self._on_offer_created, None)
        self.webrtc.emit("create-offer", None, promise)
        GLib.timeout_add(int(self.args.gather_timeout * 1000), self._gather_timeout)

    # ---- signalling --------------------------------------------------------------------------
    def _on_offer_created(self, promise: Gst.Promise, _data) -> None:
        promise.wait()
        reply = promise.get_reply()
        if reply is None or not reply.has_field("offer"):
            GLib.idle_add(self.fail, f"create-offer failed: {reply.to_string() if reply else None}")
            return
        offer = reply.get_value("offer")
        self.webrtc.emit("set-local-description", offer, Gst.Promise.new())
        log("offer set; gathering")

    def _on_gathering(self, *_a) -> None:
        state = self.webrtc.get_property("ice-gathering-state")
        log("ice gathering", state.value_nick)
        if state == GstWebRTC.WebRTCICEGatheringState.COMPLETE:
            GLib.idle_add(self._send_offer, "complete")

    def _gather_timeout(self) -> bool:
        if not self.offer_sent:
            self.result["errors"].append(f"ICE gathering not complete after {self.args.gather_timeout}s; "
                                         "sent the candidates gathered so far")
            self._send_offer("timeout")
        return False

    def _request(self, method: str, url: str, body: bytes | None, headers: dict) -> tuple[int, dict, bytes]:
        if self.args.token:
            headers = {**headers, "Authorization": f"Bearer {self.args.token}"}
        req = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            with self.opener.open(req, timeout=self.args.http_timeout) as r:
                return r.status, dict(r.headers.items()), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers.items()), e.read()

    def _send_offer(self, why: str) -> bool:
        if self.offer_sent:
            return False
        self.offer_sent = True
        desc = self.webrtc.get_property("local-description")
        sdp = desc.sdp.as_text()
        self.result["offer"] = sdp
        log(f"POST offer ({why}; {sum(1 for l in sdp.splitlines() if l.startswith('a=candidate'))} candidates)")
        self.t_post = time.monotonic()
        try:
            status, headers, body = self._request("POST", self.args.url, sdp.encode(),
                                                  {"Content-Type": "application/sdp"})
        except Exception as e:  # noqa: BLE001 - reported in the JSON
            self.result["status"] = None
            return self.fail(f"POST failed: {e!r}")
        hdr = {k.lower(): v for k, v in headers.items()}
        self.result["status"] = status
        self.result["etag"] = hdr.get("etag")
        if hdr.get("location"):
            self.result["location"] = urllib.parse.urljoin(self.args.url, hdr["location"])
        log("POST ->", status, "Location", hdr.get("location"), "ETag", hdr.get("etag"))
        if status != 201:
            return self.fail(f"POST answered {status}: {body[:300].decode(errors='replace')}")
        answer_text = body.decode()
        self.result["answer"] = answer_text
        ok, sdpmsg = GstSdp.SDPMessage.new_from_text(answer_text)
        if ok != GstSdp.SDPResult.OK:
            return self.fail("answer is not parseable SDP")
        answer = GstWebRTC.WebRTCSessionDescription.new(GstWebRTC.WebRTCSDPType.ANSWER, sdpmsg)
        promise = Gst.Promise.new_with_change_func(self._on_answer_set, None)
        self.webrtc.emit("set-remote-description", answer, promise)
        return False

    def _on_answer_set(self, promise: Gst.Promise, _data) -> None:
        promise.wait()
        reply = promise.get_reply()
        if reply is not None and reply.has_field("error"):
            GLib.idle_add(self.fail, f"set-remote-description: {reply.get_value('error')}")
            return
        log(f"answer applied; playing {self.args.seconds}s")
        GLib.timeout_add(int(self.args.seconds * 1000), self.finish)

    # ---- media -------------------------------------------------------------------------------
    def _on_pad_added(self, _webrtc, pad: Gst.Pad) -> None:
        if pad.get_direction() != Gst.PadDirection.SRC:
            return
        caps = pad.get_current_caps() or pad.query_caps(None)
        s = caps.get_structure(0)
        media = s.get_string("media")
        enc = s.get_string("encoding-name")
        log("incoming", media, enc, "pt", s.get_value("payload") if s.has_field("payload") else "?")
        self.result[f"{media}_codec"] = enc
        dec = Gst.ElementFactory.make("decodebin")
        dec.connect("pad-added", self._on_decoded_pad, media)
        dec.connect("deep-element-added", self._on_element)
        self.pipe.add(dec)
        dec.sync_state_with_parent()
        if pad.link(dec.get_static_pad("sink")) != Gst.PadLinkReturn.OK:
            self.result["errors"].append(f"could not link {media} pad to decodebin")

    def _on_element(self, _bin, _sub, element: Gst.Element) -> None:
        f = element.get_factory()
        if f is not None and "Decoder" in (f.get_metadata("klass") or ""):
            self.result["decoders"].append(f.get_name())

    def _on_decoded_pad(self, _dec, pad: Gst.Pad, media: str) -> None:
        caps = pad.get_current_caps() or pad.query_caps(None)
        name = caps.get_structure(0).get_name()
        kind = "video" if name.startswith("video/") else "audio" if name.startswith("audio/") else None
        if kind is None:
            return
        sink = Gst.ElementFactory.make("fakesink")
        sink.set_property("sync", False)
        sink.set_property("async", False)
        sink.set_property("signal-handoffs", True)
        sink.connect("handoff", self._on_handoff, kind)
        self.pipe.add(sink)
        sink.sync_state_with_parent()
        pad.link(sink.get_static_pad("sink"))

    def _on_handoff(self, _sink, _buf, pad: Gst.Pad, kind: str) -> None:
        # streaming thread: only counters and a few fields, no GLib calls
        now = time.monotonic()
        if kind == "video":
            self.result["video_frames"] += 1
            if self.result["first_frame_s"] is None and self.t_post is not None:
                self.result["first_frame_s"] = round(now - self.t_post, 3)
                caps = pad.get_current_caps()
                if caps is not None:
                    s = caps.get_structure(0)
                    self.result["width"] = s.get_value("width")
                    self.result["height"] = s.get_value("height")
            elif self.result["video_frames"] % 30 == 0:
                caps = pad.get_current_caps()
                if caps is not None:
                    s = caps.get_structure(0)
                    self.result["width"], self.result["height"] = s.get_value("width"), s.get_value("height")
        else:
            self.result["audio_buffers"] += 1
            if self.result["first_audio_s"] is None and self.t_post is not None:
                self.result["first_audio_s"] = round(now - self.t_post, 3)
                caps = pad.get_current_caps()
                if caps is not None and caps.get_structure(0).has_field("rate"):
                    self.result["audio_rate"] = caps.get_structure(0).get_value("rate")

    # ---- state, errors, end ------------------------------------------------------------------
    def _on_state(self, *_a) -> None:
        ice = self.webrtc.get_property("ice-connection-state").value_nick
        conn = self.webrtc.get_property("connection-state").value_nick
        if (ice, conn) != (self.result["ice_connection_state"], self.result["connection_state"]):
            log("ice", ice, "connection", conn)
        self.result["ice_connection_state"] = ice
        self.result["connection_state"] = conn

    def _on_error(self, _bus, msg: Gst.Message) -> None:
        err, dbg = msg.parse_error()
        self.result["errors"].append(f"{msg.src.get_name()}: {err.message}")
        log("ERROR", msg.src.get_name(), err.message, dbg)

    def _on_warning(self, _bus, msg: Gst.Message) -> None:
        w, dbg = msg.parse_warning()
        log("warning", msg.src.get_name(), w.message)

    def fail(self, why: str) -> bool:
        log("FAIL", why)
        self.result["errors"].append(why)
        return self.finish()

    def finish(self) -> bool:
        if not self.loop.is_running():
            return False
        if self.result["location"] and not self.args.keep:
            try:
                self.result["delete_status"], _h, _b = self._request("DELETE", self.result["location"], None, {})
            except Exception as e:  # noqa: BLE001
                self.result["errors"].append(f"DELETE failed: {e!r}")
            log("DELETE ->", self.result["delete_status"])
        self.loop.quit()
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True, help="WHEP endpoint, e.g. http://127.0.0.1:7880/whep/ROOM/MEMBER")
    ap.add_argument("--seconds", type=float, default=5.0, help="play this long after the answer is applied")
    ap.add_argument("--token", help="bearer token for POST and DELETE")
    ap.add_argument("--video-codecs", default="VP8,H264", help="offered in this order: VP8, H264")
    ap.add_argument("--no-audio", action="store_true")
    ap.add_argument("--no-video", action="store_true")
    ap.add_argument("--keep", action="store_true", help="do not DELETE the session at the end")
    ap.add_argument("--local-address", action="append", default=None, help="ICE local address (127.0.0.1)")
    ap.add_argument("--gather-timeout", type=float, default=5.0)
    ap.add_argument("--http-timeout", type=float, default=10.0)
    args = ap.parse_args()
    args.local_address = args.local_address or ["127.0.0.1"]
    for name in args.video_codecs.split(","):
        if name.strip().upper() not in VIDEO_CAPS:
            ap.error(f"unknown video codec {name!r} (VP8, H264)")
    Gst.init(None)
    player = Player(args)
    GLib.idle_add(lambda: (player.start(), False)[1])
    # hard stop: whatever happens, print the JSON
    GLib.timeout_add(int((args.seconds + args.gather_timeout + 2 * args.http_timeout + 10) * 1000),
                     lambda: player.fail("hard deadline reached"))
    player.loop.run()
    player.pipe.set_state(Gst.State.NULL)
    print(json.dumps(player.result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
