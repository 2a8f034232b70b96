"""The Swift SDK recovers by itself (issue 25 item 4, its Swift half; docs/sdk-swift.md
"Recovery"). A `minato-client publish --timeline` bot ("lab") runs in a second network namespace
(netns.Lab; the server listens on the veth's host side) and gathers ICE candidates on whatever
address its namespace has (`--ice-any-address`); a partner bot in the test's namespace does the
same as the lab bot: both publish synthetic video and subscribe to each other's. Two cases, each
with its own pair of bots in a room of its own:

- Address change mid-call: the lab's address is replaced with another one (`Lab.readdress`, the
  old one removed first), as a handover does. Nothing tells the bot: its supervisor sees both
  connections stall, finds its signaling socket dead (a probe goes unanswered), takes its member
  back on a new socket with its reconnectSecret, and restarts ICE on both connections with agents
  that gather on the new address. Asserted: the bot says `recovering`/`recovered` for media on
  both connections and for signaling; both ICE restarts completed; no rejoin (the member id at the
  end is the one it joined with); packets flow again on both legs (the partner receiving the lab's
  video, the lab receiving the partner's) within RESUME_MAX_SEC of the change; the bot's connection
  quality went from good to bad and back to good. Printed: how long each leg took.
- Signaling drop: TCP to and from the signaling port dropped in the lab for BLOCK_SEC. Media goes
  on throughout (no gap longer than GAP_MAX_SEC in what the lab receives, no ICE restart); the
  bot notices its silent socket (heartbeat), takes its member back once TCP passes, and gets every
  room event of the drop exactly once (another member joins and updates its metadata meanwhile:
  those events come through `subscribeRoomEvents`' replay, `replayedEvents` > 0).
"""
from __future__ import annotations

import json
import queue
import subprocess
import threading
import time

import pytest

from conftest import running_server
from minato_client import Member, run_async, unique_name
from netns import Lab
from test_swift_sdk import client_binary
from waiting import wait_until

pytestmark = pytest.mark.timeout(150)

HOST_ADDR, PEER_ADDR = "198.18.4.1", "198.18.4.2"
MINATO_SERVER_ENV = {"MINATO_MEDIA_ICE_LOCAL_ADDRESSES": HOST_ADDR}
RUN_SEC = 20           # each bot's window after it subscribed
BASELINE_SEC = 2.0     # both receiving for this long before the change
RESUME_MAX_SEC = 10.0  # the server closes a transport silent for 10 s (media.transportTimeoutSec)
BLOCK_SEC = 8.0
GAP_MAX_SEC = 0.5


@pytest.fixture(scope="module")
def lab():
    with Lab(host_addr=HOST_ADDR, peer_addr=PEER_ADDR) as lab:
        # The veth's carrier comes up a moment after the link (the kernel's link watch): until
        # then libnice, which gathers only on running interfaces, finds no address in the lab.
        wait_until(lambda: "LOWER_UP" in lab.exec("ip", "-o", "link", "show", "dev", lab.peer_if), 10,
                   "the lab's veth carrier", interval=0.05)
        yield lab


@pytest.fixture(scope="module")
def server(lab):
    """conftest's server, listening (HTTP/WS and media) on the veth's host-side address."""
    with running_server("test_recovery_swift", MINATO_SERVER_ENV, host=lab.host_addr) as srv:
        yield srv


class Bot:
    """One `minato-client publish --timeline` process: its early lines ({"joined"}, {"receiving"})
    are read as they come; its last line is the report."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lines: queue.Queue[dict] = queue.Queue()
        self.seen: dict[str, float] = {}
        self.report: dict | None = None
        self.stderr = ""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            self.lines.put(obj)

    def wait_for(self, key: str, timeout: float) -> float:
        def seen() -> bool:
            while not self.lines.empty():
                obj = self.lines.get()
                if "roomId" in obj:
                    self.report = obj
                for k in ("joined", "receiving"):
                    if k in obj:
                        self.seen[k] = time.time()
            return key in self.seen
        wait_until(seen, timeout, f"the bot's {key!r} line", interval=0.05,
                   state=lambda: {"exit": self.proc.poll(), "stderr": self._stderr_tail()})
        return self.seen[key]

    def _stderr_tail(self) -> str:
        if self.proc.poll() is None:
            return ""
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()
        return self.stderr[-2000:]

    def finish(self, timeout: float) -> dict:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        assert self.proc.stderr is not None
        err = self.stderr + self.proc.stderr.read()
        assert self.proc.returncode == 0, f"minato-client exited {self.proc.returncode}\n{err[-3000:]}"
        wait_until(lambda: self._drain() is not None, 5, "the bot's report")
        return self.report  # type: ignore[return-value]

    def _drain(self) -> dict | None:
        while not self.lines.empty():
            obj = self.lines.get()
            if "roomId" in obj:
                self.report = obj
        return self.report


def bot_cmd(server, room: str, name: str, partner: str) -> list[str]:
    return [str(client_binary()), "publish", "--url", f"ws://{HOST_ADDR}:{server.port}/ws", "--room", room,
            "--name", name, "--subscribe-to", partner, "--seconds", str(RUN_SEC), "--timeline"]


def start_pair(server, lab) -> tuple[str, Bot, Bot]:
    """The lab bot (any address of its namespace) and its partner (the host side's address), both
    receiving each other's video."""
    room = unique_name("swift-recovery")
    lab_bot = Bot(lab.popen(bot_cmd(server, room, "lab", "partner") + ["--ice-any-address"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    partner = Bot(subprocess.Popen(bot_cmd(server, room, "partner", "lab") + ["--ice-address", HOST_ADDR],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for b in (lab_bot, partner):
        b.wait_for("receiving", 30)
    return room, lab_bot, partner


def resumed_after(timeline: list[list[float]], t0_ms: float) -> float | None:
    """Seconds from t0 to the first sample after it from which the count grows at every second
    sample or better until the end (packets flowing again)."""
    after = [(t, n) for t, n in timeline if t >= t0_ms]
    for i in range(1, len(after)):
        if after[i][1] <= after[i - 1][1]:
            continue
        if all(after[j][1] > after[j - 2][1] for j in range(i + 2, len(after))):
            return (after[i][0] - t0_ms) / 1000
    return None


def longest_gap(timeline: list[list[float]], t0_ms: float, t1_ms: float) -> float:
    """The longest time in [t0, t1] the count did not grow, in seconds."""
    w = [(t, n) for t, n in timeline if t0_ms <= t <= t1_ms]
    longest, last = 0.0, w[0][0] if w else 0.0
    for (ta, na), (tb, nb) in zip(w, w[1:]):
        if nb > na:
            longest = max(longest, tb - last)
            last = tb
    if w:
        longest = max(longest, w[-1][0] - last)
    return longest / 1000


def events_of(report: dict) -> list[str]:
    return [f"{e['event']}:{e.get('cause') or e.get('reason')}" for e in report["rejoins"]]


def test_swift_address_change_recovers_in_place(server, lab, capsys):
    _, lab_bot, partner = start_pair(server, lab)
    t_ready = max(lab_bot.seen["receiving"], partner.seen["receiving"])
    time.sleep(max(0.0, t_ready + BASELINE_SEC - time.time()))   # a baseline of packets on both legs
    t_change = time.time()
    old = lab.readdress("198.18.5.2")
    lab_report, partner_report = lab_bot.finish(RUN_SEC + 30), partner.finish(RUN_SEC + 30)
    # Timelines are in ms since each bot joined (when it printed its "joined" line, give or take
    # the pipe): the change in each bot's own time.
    t0_lab = (t_change - lab_bot.seen["joined"]) * 1000
    t0_partner = (t_change - partner.seen["joined"]) * 1000
    resumed = {"partner->lab": resumed_after(lab_report["timeline"], t0_lab),
               "lab->partner": resumed_after(partner_report["timeline"], t0_partner)}
    with capsys.disabled():
        print(f"\n[swift recovery] address change {old} -> 198.18.5.2: packets again partner->lab after "
              f"{resumed['partner->lab']} s, lab->partner after {resumed['lab->partner']} s; ICE restarts "
              f"{lab_report['iceRestarts']}; lab events: "
              + " ".join(f"{e['ms'] / 1000 - t0_lab / 1000:.2f}:{e['event']}/{e.get('cause') or e.get('reason')}"
                         for e in lab_report["rejoins"]))
    events = events_of(lab_report)
    for cause in ("media send", "media recv", "signaling"):
        assert f"recovering:{cause}" in events and f"recovered:{cause}" in events, (cause, events)
    assert not any(e.startswith("reconnecting") or e.startswith("failed") for e in events), events
    assert lab_report["memberId"] == lab_report["joinedId"], lab_report
    assert lab_report["iceRestarts"]["send"] >= 1 and lab_report["iceRestarts"]["recv"] >= 1, lab_report["iceRestarts"]
    for leg, r in resumed.items():
        assert r is not None and r <= RESUME_MAX_SEC, (leg, resumed)
    # The quality said so: good before, bad while the connections were down, good again after.
    quality = [(e["ms"], e["cause"]) for e in lab_report["rejoins"] if e["event"] == "quality"]
    before = [q for t, q in quality if t < t0_lab]
    after = [q for t, q in quality if t >= t0_lab]
    assert before and before[-1] == "good", quality
    assert "bad" in after and after[-1] == "good", quality


def test_swift_signaling_drop_keeps_media_and_replays_events_once(server, lab, capsys):
    room, lab_bot, partner = start_pair(server, lab)
    t_ready = max(lab_bot.seen["receiving"], partner.seen["receiving"])
    time.sleep(max(0.0, t_ready + BASELINE_SEC - time.time()))
    t_block = time.time()
    lab.nft_load("sigblock", f"""    chain out {{ type filter hook output priority 0; policy accept; tcp dport {server.port} counter drop; }}
    chain in {{ type filter hook input priority 0; policy accept; tcp sport {server.port} counter drop; }}""")
    try:
        # Events the lab bot cannot hear while its socket is blocked: a member joins and updates
        # its metadata.
        async def late_member() -> None:
            m = await Member.join(f"ws://{HOST_ADDR}:{server.port}/ws", await room_id(server, room), "late")
            await m.conn.call("updateMemberMetadata", {"memberId": m.id, "metadata": "late-meta"})
            await m.close()
        run_async(late_member(), timeout=20)
        time.sleep(max(0.0, t_block + BLOCK_SEC - time.time()))
    finally:
        lab.nft_delete("sigblock")
    lab_report, partner_report = lab_bot.finish(RUN_SEC + 30), partner.finish(RUN_SEC + 30)
    t0 = (t_block - lab_bot.seen["joined"]) * 1000
    gap = longest_gap(lab_report["timeline"], t0, t0 + BLOCK_SEC * 1000 + 2000)
    events = events_of(lab_report)
    versions = lab_report["eventVersions"]
    with capsys.disabled():
        print(f"\n[swift recovery] signaling drop {BLOCK_SEC:.0f} s: longest gap in received packets {gap:.2f} s; "
              f"replayed {lab_report['replayedEvents']} events; lab events: "
              + " ".join(f"{e['ms'] / 1000 - t0 / 1000:.2f}:{e['event']}/{e.get('cause') or e.get('reason')}"
                         for e in lab_report["rejoins"]))
    assert "recovering:signaling" in events and "recovered:signaling" in events, events
    assert not any("media" in e or e.startswith("reconnecting") or e.startswith("failed") for e in events), events
    assert lab_report["iceRestarts"] == {"send": 0, "recv": 0}, lab_report["iceRestarts"]
    assert gap <= GAP_MAX_SEC, gap
    assert lab_report["memberId"] == lab_report["joinedId"], lab_report
    # Every event once, in order, the drop's among them.
    assert versions == sorted(set(versions)), versions
    assert lab_report["replayedEvents"] >= 1, lab_report
    types = lab_report["eventTypes"]
    assert "memberJoined" in types and "memberMetadataUpdated" in types, types


async def room_id(server, name: str) -> str:
    from minato_client import Connection
    conn = await Connection(f"ws://{HOST_ADDR}:{server.port}/ws", label="lookup").connect()
    try:
        return (await conn.call("findRoom", {"name": name}))["room"]["id"]
    finally:
        await conn.close()
