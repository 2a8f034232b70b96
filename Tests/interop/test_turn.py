"""TURN for clients (issue 25 item 2): a browser whose network lets through only TCP to the TURN
host reaches the server through Debian's coturn, with the credentials Minato mints per member;
with credentials coturn refuses, the SDK says so within a bounded time instead of hanging.

Hosts (netns.Lab, 198.18.0.0/15, the test's namespace routing between them):

    coturn host 198.18.0.2 ---- 198.18.0.1  test namespace: Minato (HTTP/WS and media on
                                198.18.0.5  198.18.0.1), aiortc member ---- 198.18.0.6 client host:
                                                                              Chromium (the SDK page)

On the client host nftables drops every UDP datagram both ways, and every TCP connection except
to coturn's 3478 and to the server's signaling port (so TCP to the server's media ports, where
ICE-TCP would listen, is dropped too: the relay is the one path that works). Minato is
configured with `media.turn.urls` (turn:198.18.0.2:3478 over udp and tcp) and the secret coturn
was started with.

1. The page joins, publishes its fake camera and subscribes to an aiortc member's video in the
   test namespace; aiortc subscribes to the page's camera. Both of the page's connections select
   a `relay` local candidate whose `relayProtocol` is `tcp`; both sides decode. The join result's
   `iceServers` carry the member's own credential, `renewIceServers()` (`getIceServers`) gives the
   connections a fresh one, and neither the secret nor a credential is in the server's log.
2. coturn restarted with another secret: a new page's publish gets `turnCredentialsRejected`
   from the SDK within 20 s, as the first error the application hears: the SDK reports a refusal
   10 s after it if the connection did not come up meanwhile, or at once when the server gives up
   on the transport first (memberLeft `transportClosed`, which by itself names no cause).

Logs: artifacts/interop/test_turn.log (server), test_turn-coturn.log, the pages' console logs.
"""
from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

import browser
from browser import BROWSER_SERVER_ENV, close_page, sdk_page, wait_js
from conftest import ARTIFACTS, running_server
from coturn import Coturn
from media import SyntheticVideoTrack, VideoSink
from minato_client import LoopThread, Member, unique_name
from netns import Lab
from test_swift_sdk import client_binary
from waiting import wait_until

pytestmark = pytest.mark.timeout(180)

SERVER_ADDR, TURN_ADDR = "198.18.0.1", "198.18.0.2"
ROUTER_ADDR, CLIENT_ADDR = "198.18.0.5", "198.18.0.6"
TURN_PORT = 3478
MEDIA_PORTS = (40000, 40999)            # the server's media.ice.portMin/portMax (defaults)
SECRET = "minato-interop-turn-secret-0001"
WRONG_SECRET = "another-static-auth-secret-0002"
TTL_SEC = 600
TURN_URLS = [f"turn:{TURN_ADDR}:{TURN_PORT}?transport=udp", f"turn:{TURN_ADDR}:{TURN_PORT}?transport=tcp"]
MINATO_SERVER_ENV = {
    **BROWSER_SERVER_ENV,
    "MINATO_MEDIA_ICE_LOCAL_ADDRESSES": SERVER_ADDR,
    "MINATO_MEDIA_TURN_URLS": ",".join(TURN_URLS),
    "MINATO_MEDIA_TURN_SECRET": SECRET,
    "MINATO_MEDIA_TURN_TTL_SEC": str(TTL_SEC),
}
VIDEO = {"width": 320, "height": 240, "frameRate": 15}
# The bound for the failure case: a clear error, not a hang.
REJECTED_WITHIN_SEC = 20.0
COUNTERS = ("udp-out", "udp-in", "turn-tcp", "media-tcp", "other-tcp")


def blocking_rules(signaling_port: int) -> str:
    """The client host's firewall: only TCP to the TURN host (and the signaling port) passes."""
    return f"""
    chain out {{
        type filter hook output priority 0; policy accept;
        oif "lo" accept
        meta l4proto udp counter drop comment "udp-out"
        ip daddr {TURN_ADDR} tcp dport {TURN_PORT} counter accept comment "turn-tcp"
        ip daddr {SERVER_ADDR} tcp dport {signaling_port} accept
        ip daddr {SERVER_ADDR} tcp dport {MEDIA_PORTS[0]}-{MEDIA_PORTS[1]} counter drop comment "media-tcp"
        meta l4proto tcp counter drop comment "other-tcp"
    }}
    chain in {{
        type filter hook input priority 0; policy accept;
        iif "lo" accept
        meta l4proto udp counter drop comment "udp-in"
    }}"""


# ---- fixtures ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def hosts():
    with Lab(host_addr=SERVER_ADDR, peer_addr=TURN_ADDR, routed=True) as turn_host, \
         Lab(host_addr=ROUTER_ADDR, peer_addr=CLIENT_ADDR, routed=True) as client_host:
        yield turn_host, client_host


@pytest.fixture(scope="module")
def coturn(hosts):
    c = Coturn(hosts[0], TURN_ADDR, log=ARTIFACTS / "test_turn-coturn.log", port=TURN_PORT)
    (ARTIFACTS / "test_turn-coturn.log").unlink(missing_ok=True)
    c.start(SECRET)
    yield c
    c.close()


@pytest.fixture(scope="module")
def server(hosts, coturn):
    with running_server("test_turn", MINATO_SERVER_ENV, host=SERVER_ADDR) as srv:
        yield srv


@pytest.fixture(scope="module")
def client_host(hosts, server):
    """The client's host with its firewall up."""
    host = hosts[1]
    host.nft_load("block", blocking_rules(server.port))
    yield host
    host.nft_delete("block")


@pytest.fixture(scope="module")
def chromium(pw, client_host, server):
    """Chromium on the client host, the server's origin treated as secure (getUserMedia)."""
    b = browser.launch_chromium(pw, executable=str(client_host.chromium_wrapper(browser.CHROMIUM)), secure_origin=server.http)
    yield b
    b.close()


@pytest.fixture
def loop(monkeypatch):
    """aiortc's loop; its member gathers on the server's veth address (the suite's aioice patch
    gives it 127.0.0.1, from which libnice's checks to 198.18.0.1 go unanswered)."""
    import aioice.ice
    monkeypatch.setattr(aioice.ice, "get_host_addresses", lambda use_ipv4=True, use_ipv6=False: [SERVER_ADDR])
    lt = LoopThread()
    yield lt
    lt.close()


@pytest.fixture
def pages(request):
    made = []

    def make(b, server, label: str):
        page, log = sdk_page(b, server, label)
        made.append((page, log))
        return page, log

    yield make
    for page, log in made:
        close_page(page, log, request.node.name)


# In the page: each of the member's connections' selected pair, as getStats tells it.
SELECTED_PAIRS_JS = r"""
async () => {
  const out = {};
  for (const [dir, pc] of [['send', T.me.sendConnection], ['recv', T.me.receiveConnection]]) {
    if (!pc) { out[dir] = null; continue; }
    const stats = await pc.getStats();
    let pair = null;
    stats.forEach((s) => {
      if (s.type === 'transport' && s.selectedCandidatePairId) pair = stats.get(s.selectedCandidatePairId);
    });
    if (!pair) { out[dir] = null; continue; }
    const l = stats.get(pair.localCandidateId), r = stats.get(pair.remoteCandidateId);
    out[dir] = { state: pair.state, local: { type: l.candidateType, protocol: l.protocol, relayProtocol: l.relayProtocol,
                 address: l.address, url: l.url }, remote: { type: r.candidateType, protocol: r.protocol,
                 address: r.address, port: r.port } };
  }
  return out;
}
"""

OUTBOUND_JS = r"""
async () => {
  let out = null;
  (await T.me.sendConnection.getStats()).forEach((s) => {
    if (s.type === 'outbound-rtp' && s.kind === 'video') {
      out = { framesEncoded: s.framesEncoded, framesSent: s.framesSent, packetsSent: s.packetsSent,
              keyFramesEncoded: s.keyFramesEncoded, pliCount: s.pliCount, nackCount: s.nackCount,
              targetBitrate: s.targetBitrate, qualityLimitationReason: s.qualityLimitationReason,
              frameWidth: s.frameWidth };
    }
  });
  return out;
}
"""

PC_ICE_SERVERS_JS = r"""
() => [T.me.sendConnection, T.me.receiveConnection].map((pc) => pc.getConfiguration().iceServers
  .filter((s) => s.username).map((s) => s.username))
"""


def relayed_over_tcp(pairs: dict) -> bool:
    return all(p and p["state"] == "succeeded" and p["local"]["type"] == "relay" and p["local"]["relayProtocol"] == "tcp"
               for p in (pairs.get("send"), pairs.get("recv")))


# ---- the tests --------------------------------------------------------------------------------

def test_tcp_only_client_publishes_and_subscribes_through_coturn(server, client_host, coturn, chromium, pages,
                                                                 loop, request, capsys):
    room = unique_name("turn")
    page, log = pages(chromium, server, "turn-client")
    page.evaluate("() => T.connect()")
    room_id = page.evaluate("(n) => T.findOrCreate(n)", room)
    before = client_host.nft_counters("block", COUNTERS)
    aio: Member | None = None
    sinks: list[VideoSink] = []
    try:
        async def aio_join_and_publish() -> tuple[Member, str]:
            m = await Member.join(server.url, room_id, "aio")
            pub = await m.publish(SyntheticVideoTrack(), codec="video/VP8")
            return m, pub.id
        aio, aio_video = loop.run(aio_join_and_publish())

        # The page joins (subscribing to aiortc's video) and publishes its camera, all through coturn.
        member_id = page.evaluate("([n, v]) => T.join(n, {}, { audio: false, video: v })", ["web", VIDEO])
        t_published = time.monotonic()
        web_video = page.evaluate("() => T.pubs.video.id")
        async def aio_subscribe() -> VideoSink:
            sub = await aio.subscribe(web_video)
            return VideoSink(sub.track, "aio<-web")    # its task runs on aiortc's loop
        sink = loop.run(aio_subscribe())
        sinks.append(sink)

        # The join result's iceServers: the TURN URLs with this member's own credential.
        servers = page.evaluate("() => T.me.iceServers")
        turn = [s for s in servers if s.get("username")]
        assert len(turn) == 1 and turn[0]["urls"] == TURN_URLS, servers
        m = re.fullmatch(r"(\d+):(.+)", turn[0]["username"])
        assert m and m.group(2) == member_id, turn
        assert abs(int(m.group(1)) - (time.time() + TTL_SEC)) < 30, turn
        assert turn[0]["credential"], turn

        wait_js(page, "() => T.firstFrameAt.size > 0", timeout=30,
                what="Chromium to decode aiortc's video through coturn")
        ok = loop.run(sink.wait_frames(30, 30), timeout=40)
        assert ok, (f"aiortc decoded {sink.frames} frames of the page's camera through coturn; "
                    f"the page sent {page.evaluate(OUTBOUND_JS)}")
        recv_first_ms = page.evaluate("() => [...T.firstFrameAt.values()][0] - T.tJoin")
        send_first_ms = (sink.first_frame_at - t_published) * 1000
        pairs = wait_until(lambda: (lambda p: p if relayed_over_tcp(p) else None)(page.evaluate(SELECTED_PAIRS_JS)),
                           10, "both connections on a relay candidate over TCP",
                           state=lambda: page.evaluate(SELECTED_PAIRS_JS))
        decoded = page.evaluate("async () => (await T.stats()).find((s) => s.contentType === 'video')")
        assert decoded and decoded["framesDecoded"] > 0 and decoded["videoWidth"] == 320, decoded

        # The firewall was in the way: UDP was tried and dropped, TCP went to coturn.
        after = client_host.nft_counters("block", COUNTERS)
        delta = {k: after[k]["packets"] - before[k]["packets"] for k in COUNTERS}
        assert delta["turn-tcp"] > 0, delta
        assert delta["udp-out"] > 0, delta

        # Renewal: getIceServers gives both connections a newer credential.
        old_usernames = page.evaluate(PC_ICE_SERVERS_JS)
        wait_until(lambda: int(time.time()) + TTL_SEC > int(m.group(1)), 3, "a second to pass (expiry has 1 s steps)")
        renewed = page.evaluate("async () => (await T.me.renewIceServers()).filter((s) => s.username)")
        assert len(renewed) == 1 and renewed[0]["username"].endswith(":" + member_id), renewed
        assert int(renewed[0]["username"].split(":")[0]) > int(m.group(1)), (renewed, turn)
        new_usernames = page.evaluate(PC_ICE_SERVERS_JS)
        assert new_usernames == [[renewed[0]["username"]]] * 2, (old_usernames, new_usernames)
        # Still relayed and decoding after setConfiguration.
        n = sink.frames
        loop.run(sink.wait_frames(n + 15, 10), timeout=15)
        assert sink.frames >= n + 15, (n, sink.frames)
        assert not page.evaluate("T.errors"), page.evaluate("T.errors")

        # Keep secrets out of logs: the server's own output (the harness's first line shows its env).
        server_log = "\n".join(server.log_path.read_text(errors="replace").splitlines()[1:])
        assert SECRET not in server_log
        assert turn[0]["credential"] not in server_log and renewed[0]["credential"] not in server_log

        with capsys.disabled():
            print(f"\nTURN over TCP: page join -> first frame of aiortc's video {recv_first_ms:.0f} ms; "
                  f"page publish -> aiortc's first frame {send_first_ms:.0f} ms; "
                  f"send {pairs['send']['local']['type']}/{pairs['send']['local']['relayProtocol']} "
                  f"recv {pairs['recv']['local']['type']}/{pairs['recv']['local']['relayProtocol']}; "
                  f"firewall drops udp {delta['udp-out']} out/{delta['udp-in']} in, "
                  f"tcp to media ports {delta['media-tcp']}, other tcp {delta['other-tcp']}")
        page.evaluate("() => T.me.leave()")
        loop.run(aio.leave())
    finally:
        for s in sinks:
            loop.call_soon(s.stop)
        if aio is not None:
            try:
                loop.run(aio.close(), timeout=10)
            except Exception:  # noqa: BLE001
                pass
    assert not log.page_errors, log.page_errors


def test_swift_client_relays_through_coturn(server, client_host, coturn, capsys):
    """The Swift SDK on the same TCP-only host (`minato-client loopback`: one member publishes,
    another subscribes): both connections allocate a relayed candidate on coturn over TCP with
    the join result's credential (libnice), select it, and the packets come through whole."""
    cmd = [str(client_binary()), "loopback", "--url", f"ws://{SERVER_ADDR}:{server.port}/ws", "--ice-any-address",
           "--room", unique_name("turn-swift"), "--seconds", "3"]
    before = client_host.nft_counters("block", COUNTERS)
    proc = client_host.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}\n{err[-3000:]}"
    result = json.loads(out.strip().splitlines()[-1])
    after = client_host.nft_counters("block", COUNTERS)
    delta = {k: after[k]["packets"] - before[k]["packets"] for k in COUNTERS}
    stream = result["streams"][0]
    with capsys.disabled():
        print(f"\nSwift SDK through TURN over TCP: selected {result['candidates']}, {stream['packets']} of "
              f"{stream['expected']} packets, latency p50 {stream['latencyP50Ms']:.1f} ms; firewall drops udp "
              f"{delta['udp-out']} out")
    assert result["relays"] >= 1, result
    assert result["candidates"] == {"send": "relay", "recv": "relay"}, result
    assert stream["packets"] >= 0.95 * stream["expected"] and stream["expected"] > 50, stream   # ~1.5 s of 3 go to connecting
    assert stream["decryptFailures"] == 0 and stream["stampsRead"] > 0, stream
    assert delta["turn-tcp"] > 0 and delta["udp-out"] > 0, delta


def test_refused_credentials_are_a_clear_sdk_error(server, client_host, coturn, chromium, pages, capsys):
    """coturn now checks another secret than the one Minato mints with: every credential is 401."""
    coturn.restart(WRONG_SECRET)
    try:
        page, log = pages(chromium, server, "turn-refused")
        page.evaluate("() => T.connect({ debug: true })")
        page.evaluate("(n) => T.findOrCreate(n)", unique_name("turn-refused"))
        t0 = time.monotonic()
        page.evaluate("([n, v]) => T.join(n, {}, { audio: false, video: v })", ["web", VIDEO])
        errors = wait_js(page, "() => T.errors.length ? T.errors : null", timeout=REJECTED_WITHIN_SEC + 5,
                         what="the SDK to report the refused TURN credentials", interval=0.1)
        elapsed = time.monotonic() - t0
        assert errors[0].startswith("fatal turnCredentialsRejected: the TURN server turn:"), errors
        assert "static-auth-secret" in errors[0], errors
        assert elapsed <= REJECTED_WITHIN_SEC, elapsed
        # The first thing the application hears, before (or instead of) the server giving up on the
        # transport (memberLeft transportClosed, which names no cause).
        left = [e for e in page.evaluate("T.events") if e["type"] == "onLeft"]
        assert "401" in coturn.log_text(), "coturn's log shows no 401"
        with capsys.disabled():
            print(f"\nTURN refused: publish -> turnCredentialsRejected in {elapsed:.1f} s"
                  + (f" (then onLeft {left[0]['reason']})" if left else ""))
        if not left:
            page.evaluate("() => T.me.leave()")
        assert not log.page_errors, log.page_errors
    finally:
        coturn.restart(SECRET)
