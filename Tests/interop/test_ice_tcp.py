"""ICE-TCP (RFC 6544): a Chromium member on a host whose network drops all UDP publishes and
subscribes through the server's passive TCP candidates (media.ice.tcp, on by default).

The blocked member runs in a second network namespace (netns.Lab: a veth pair, 198.18.2.2 ->
the server on 198.18.2.1) whose nftables drop every UDP datagram in and out; the other member is
a Chromium page in the test's namespace. Asserted: both decode each other's video, and both of
the blocked member's connections show a selected candidate pair over TCP to the server's media
port range. Printed: the time from join to the first decoded frame on each side.
"""
from __future__ import annotations

import os
import re

import pytest

import browser
from admin_util import ADMIN_SECRET
from browser import BROWSER_SERVER_ENV, close_page, sdk_page, wait_js
from conftest import running_server
from impair import nft_binary
from minato_client import unique_name
from netns import Lab

pytestmark = pytest.mark.timeout(120)

HOST_ADDR, PEER_ADDR = "198.18.2.1", "198.18.2.2"
MEDIA_PORTS = (40000, 40999)
CAMERA = {"audio": False, "video": {"width": 320, "height": 240, "frameRate": 15}}
NO_UDP = """table inet noudp {
    chain in { type filter hook input priority 0; policy accept; meta l4proto udp counter drop comment "in"; }
    chain out { type filter hook output priority 0; policy accept; meta l4proto udp counter drop comment "out"; }
}
"""

PAIRS_JS = r"""
async () => {
  async function pair(pc) {
    if (!pc) return null;
    const st = await pc.getStats(); let out = null;
    st.forEach((s) => {
      if (s.type === 'transport' && s.selectedCandidatePairId) {
        const p = st.get(s.selectedCandidatePairId);
        const l = p && st.get(p.localCandidateId), r = p && st.get(p.remoteCandidateId);
        if (l && r) out = { local: { protocol: l.protocol, type: l.candidateType, address: l.address, tcpType: l.tcpType },
                             remote: { protocol: r.protocol, address: r.address, port: r.port, tcpType: r.tcpType } };
      }
    });
    return out;
  }
  return { send: await pair(T.me.sendConnection), recv: await pair(T.me.receiveConnection) };
}
"""


@pytest.fixture(scope="module")
def lab():
    with Lab(host_addr=HOST_ADDR, peer_addr=PEER_ADDR, tag=f"t{os.getpid()}") as lab:
        lab.exec(nft_binary(), "-f", "-", input=NO_UDP)
        yield lab


@pytest.fixture(scope="module")
def server(lab):
    env = {**BROWSER_SERVER_ENV, "MINATO_MEDIA_ICE_LOCAL_ADDRESSES": HOST_ADDR, "MINATO_ADMIN_API_SECRET": ADMIN_SECRET}
    with running_server("test_ice_tcp", env, host=lab.host_addr) as srv:
        yield srv


@pytest.fixture(scope="module")
def browsers(pw, lab, server):
    here = browser.launch_chromium(pw, secure_origin=server.http)
    there = browser.launch_chromium(pw, executable=str(lab.chromium_wrapper(browser.CHROMIUM)), secure_origin=server.http)
    yield here, there
    there.close()
    here.close()


def test_udp_blocked_member_connects_over_ice_tcp(request, server, lab, browsers, capsys):
    here, there = browsers
    room = unique_name("icetcp")
    made = []
    try:
        for b, name in ((there, "blocked"), (here, "open")):
            page, log = sdk_page(b, server, f"icetcp-{name}")
            made.append((page, log))
            page.evaluate("T.connect()")
            page.evaluate("(n) => T.findOrCreate(n)", room)
            page.evaluate("([n, m]) => T.join(n, {}, m)", [name, CAMERA])
        blocked, open_ = made[0][0], made[1][0]
        for page, name in ((blocked, "blocked"), (open_, "open")):
            wait_js(page, "() => T.firstFrameAt.size === 1", timeout=30, what=f"the {name} member decodes the other's video")
        pairs = blocked.evaluate(PAIRS_JS)
        first = {name: page.evaluate("() => [...T.firstFrameAt.values()][0] - T.tJoin")
                 for page, name in ((blocked, "blocked"), (open_, "open"))}
        counters = lab.exec(nft_binary(), "list", "table", "inet", "noudp")
        with capsys.disabled():
            print(f"\n[ice-tcp] blocked member's pairs: {pairs}; first frame after join: "
                  f"blocked {first['blocked']:.0f} ms, open {first['open']:.0f} ms")
        for direction in ("send", "recv"):
            p = pairs[direction]
            assert p and p["local"]["protocol"] == "tcp" and p["remote"]["protocol"] == "tcp", (direction, pairs)
            assert p["remote"]["address"] == HOST_ADDR and MEDIA_PORTS[0] <= p["remote"]["port"] <= MEDIA_PORTS[1], pairs
            assert p["remote"]["tcpType"] == "passive", pairs
        # The block really dropped UDP (Chromium tried its UDP candidates first).
        dropped = {name: int(n) for n, name in re.findall(r'counter packets (\d+) bytes \d+ drop comment "(\w+)"', counters)}
        assert dropped.get("out", 0) > 0, counters
    finally:
        for page, log in made:
            close_page(page, log, request.node.name)
