"""Simulcast across nodes (`cluster.cascade: true`): a Chromium publisher (browser SDK; three VP8
layers l/m/h of a 1280x720 fake camera: 320, 640, 1280 wide) joins through the room's node;
one Chromium subscriber joins through each other node. Every layer crosses each relay, and each
node's consumers choose among them with their own subscriber's bandwidth estimate.

Both subscribers first decode the top layer (1280 wide). Then what the test's namespace receives
from one of the two nodes is policed at 37 kB/s (~300 kbit/s; nftables `limit rate over`, input
hook, matched on that node's address): that subscriber settles below the top layer within 10 s
and is below it in >= 80% of the samples of the policed window's last 5 s, while the other
subscriber decodes 1280 in >= 95% of the policed window's samples. The policer really limits
(its counters). Chromium samples every 250 ms; the widths over time are printed.

Its own cluster (logs artifacts/interop/cascade-sim-*.log) and one Chromium for the three pages.
"""
from __future__ import annotations

import time
import types

import pytest

import browser
from browser import VIDEO_SUBSCRIPTION_METHODS_JS, close_page, sdk_page, wait_js
from cluster import node_addr, running_cluster
from impair import nft, rule_counters
from minato_client import create_room, run_async, unique_name
from test_cluster import host_of

pytestmark = pytest.mark.timeout(180)

NODES = (1, 2, 3)
CAMERA = {"width": 1280, "height": 720, "frameRate": 30}
ENCODINGS = [
    {"id": "l", "scaleResolutionDownBy": 4, "maxBitrate": 150_000},
    {"id": "m", "scaleResolutionDownBy": 2, "maxBitrate": 500_000},
    {"id": "h", "maxBitrate": 1_500_000},
]
TOP = 1280
POLICE_KBYTES = 37
WARMUP_SEC, POLICED_SEC = 4.0, 15.0
SAMPLE_SEC = 0.25
TABLE = "minato_cascade_police"

HELPERS_JS = r"""
() => {
  const B = {
    async publish(camera, encodings) {
      const ms = await navigator.mediaDevices.getUserMedia({ audio: false, video: camera });
      const pub = await T.me.publish(ms.getVideoTracks()[0], { encodings, metadata: 'cascade-simulcast' });
      return { id: pub.id, encodings: pub.encodings };
    },
    async subscribe(pid) {
      const p = T.room.publications.find((x) => x.id === pid);
      await T.maybeSubscribe(p);
      const s = T.subs.get(pid);
      if (!s) throw new Error(`subscribe failed: ${T.errors.join('; ')}`);
      return s.subscription.id;
    },
    async remoteAddress() {
      const r = await T.me.receiveConnection.getStats();
      let out = null;
      r.forEach((s) => {
        if (s.type === 'transport' && s.selectedCandidatePairId) {
          const p = r.get(s.selectedCandidatePairId); const c = p && r.get(p.remoteCandidateId);
          out = c ? (c.address || c.ip) : null; } });
      return out;
    },
    /*VIDEO_SUBSCRIPTION*/
  };
  window.B = B;
  return true;
}
""".replace("/*VIDEO_SUBSCRIPTION*/", VIDEO_SUBSCRIPTION_METHODS_JS)


@pytest.fixture(scope="module")
def cascade():
    with running_cluster(len(NODES), label="cascade-sim", MINATO_CLUSTER_CASCADE="true",
                         MINATO_SERVER_WEB_ROOT=str(browser.WEB_ROOT)) as c:
        yield c


def police_from(addr: str, kbytes: int) -> None:
    """Drops UDP from `addr` arriving in this namespace above `kbytes` kB/s (counted)."""
    unpolice()
    nft(script=f"""table inet {TABLE} {{
    chain in {{
        type filter hook input priority 0; policy accept;
        ip saddr {addr} meta l4proto udp counter comment "seen"
        ip saddr {addr} meta l4proto udp limit rate over {kbytes} kbytes/second counter drop comment "dropped"
    }}
}}
""")


def unpolice() -> None:
    nft(script=f"add table inet {TABLE}\ndelete table inet {TABLE}\n")


def test_each_node_chooses_its_own_layer(cascade, pw, capsys):
    c = cascade
    room_name = unique_name("cascade-sim")
    room = run_async(create_room(c.ws_url(1), room_name), timeout=15)
    h = run_async(host_of(c, room["id"]), timeout=15)
    policed_node, free_node = [i for i in NODES if i != h]
    b = browser.launch_chromium(pw, secure_origin=c.node_url(h))
    made = []

    def page(node: int, label: str):
        p, log = sdk_page(b, types.SimpleNamespace(http=c.node_url(node)), label)
        made.append((p, log))
        p.evaluate(HELPERS_JS)
        p.evaluate("T.connect()")
        p.evaluate("(n) => T.findOrCreate(n)", room_name)
        return p

    try:
        pub = page(h, "cascade-sim-pub")
        pub.evaluate("() => T.join('pub', {}, null)")
        info = pub.evaluate("([c, e]) => B.publish(c, e)", [CAMERA, ENCODINGS])
        assert [e["id"] for e in info["encodings"]] == ["l", "m", "h"], info
        subs = {}
        for who, node in (("policed", policed_node), ("free", free_node)):
            p = page(node, f"cascade-sim-{who}")
            p.evaluate("() => { T.autoSubscribe = false; }")
            p.evaluate("(n) => T.join(n, {}, null)", who)
            p.evaluate("(x) => B.subscribe(x)", info["id"])
            subs[who] = p
        for who, p in subs.items():
            wait_js(p, "async (w) => ((await B.inbound()) || {}).frameWidth === w", TOP, timeout=30,
                    what=f"the {who} subscriber at frameWidth {TOP}", interval=0.25)
        for who, node in (("policed", policed_node), ("free", free_node)):
            addr = subs[who].evaluate("B.remoteAddress()")
            assert addr == node_addr(node), f"the {who} subscriber receives from {addr}, not its node n{node}'s {node_addr(node)}"

        samples = []
        t0 = time.monotonic()

        def sample(phase: str, length: float) -> None:
            end = time.monotonic() + length
            while time.monotonic() < end:
                samples.append({"t": round(time.monotonic() - t0, 2), "phase": phase,
                                **{who: (p.evaluate("B.inbound()") or {}).get("frameWidth", 0) for who, p in subs.items()}})
                time.sleep(SAMPLE_SEC)
        try:
            sample("warmup", WARMUP_SEC)
            police_from(node_addr(policed_node), POLICE_KBYTES)
            t_on = time.monotonic() - t0
            sample("policed", POLICED_SEC)
            counters = rule_counters(nft("-j", "list", "table", "inet", TABLE))
        finally:
            unpolice()
        with capsys.disabled():
            print(f"\n[cascade-sim] room on n{h}; policed subscriber on n{policed_node}, free on n{free_node}; "
                  f"policer {counters}")
            print("[cascade-sim] t phase policed free: " +
                  " ".join(f"{s['t']}:{s['policed']}/{s['free']}" for s in samples))
        assert counters["dropped"]["packets"] > 0, f"the policer dropped nothing: {counters}"
        policed = [s for s in samples if s["phase"] == "policed"]
        below = next((s["t"] - t_on for s in policed if 0 < s["policed"] < TOP), None)
        with capsys.disabled():
            print(f"[cascade-sim] the policed subscriber went below {TOP} {below} s after the policer went on")
        assert below is not None and below <= 10, \
            f"the policed subscriber (n{policed_node}) never went below {TOP} within 10 s of the policer: {below}"
        tail = [s for s in policed if s["t"] >= t_on + POLICED_SEC - 5]
        share = sum(1 for s in tail if 0 < s["policed"] < TOP) / max(len(tail), 1)
        assert share >= 0.8, f"the policed subscriber was below {TOP} in only {share:.0%} of the last 5 s"
        free_top = sum(1 for s in policed if s["free"] == TOP) / max(len(policed), 1)
        assert free_top >= 0.95, f"the unconstrained subscriber (n{free_node}) decoded {TOP} in only {free_top:.0%} " \
                                 f"of the policed window"
    finally:
        for p, log in made:
            close_page(p, log, "cascade-sim")
        b.close()
