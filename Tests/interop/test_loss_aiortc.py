"""Lossy links (issue 16): an aiortc publisher -> Minato -> an aiortc subscriber, VP8 320x240 at
30 fps with the frame index drawn into the picture, random UDP loss made with nftables in this
namespace (impair.py), 15 s windows. Asserts the share of the sender's frames the subscriber
decoded (by index):
  - 2% of every UDP datagram (both legs): >= 99%,
  - 5% of every UDP datagram (both legs): >= 90% (aiortc's own receiver NACKs a packet again
    only when a new gap appears; peer to peer it keeps 91% at 5% on one leg),
  - 5% on the publisher's leg only: >= 95% (the server alone repairs this leg, with retries),
  - 5% on the subscriber's leg only: >= 90% (as both legs: aiortc's receiver does the asking).
Each case also asserts that nftables really dropped that share of the datagrams it saw (within 5
standard deviations of a binomial draw: impair.drop_rate_problem), so no case can pass without
loss. Each case prints one line (loss, frames sent/decoded, longest freeze, nft drops, the server's
NACK/RTX/keyframe/RTCP counters that moved) and writes artifacts/interop/loss-<case>.json.
The publisher runs in its own process (loss_pair.py) so that it really sends 30 fps.
"""
from __future__ import annotations

import json

import pytest

from conftest import ARTIFACTS
from impair import UdpLoss
from loss_pair import Pair, measure, minato_pair, summary
from minato_client import create_room, run_async, unique_name

WINDOW = 15.0
MIN_FPS = 27        # the publisher must really send ~30 fps, or the numbers mean nothing

CASES = [  # id, loss %, which leg ("both", "publisher", "subscriber"), frames decoded % at least
    ("both-2pct", 2.0, "both", 99.0),
    ("both-5pct", 5.0, "both", 90.0),
    ("publisher-leg-5pct", 5.0, "publisher", 95.0),
    ("subscriber-leg-5pct", 5.0, "subscriber", 90.0),
]


def impairment(pair: Pair, percent: float, leg: str) -> UdpLoss:
    if leg == "publisher":
        return UdpLoss(percent, sport=pair.pub_port)      # what the publisher sends
    if leg == "subscriber":
        return UdpLoss(percent, dport=pair.sub_port)      # what the subscriber receives
    return UdpLoss(percent)


async def run_case(server, case: str, percent: float, leg: str) -> dict:
    room = await create_room(server.url, unique_name("loss"))
    pair = await minato_pair(server.url, room["id"], ARTIFACTS)
    try:
        return await measure(pair, impairment(pair, percent, leg), WINDOW, http=server.http)
    finally:
        await pair.close()


@pytest.mark.parametrize("case,percent,leg,want", CASES, ids=[c[0] for c in CASES])
def test_loss(server, capsys, case: str, percent: float, leg: str, want: float) -> None:
    r = run_async(run_case(server, case, percent, leg), timeout=80)
    r["case"], r["wantDecodedPct"] = case, want
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"loss-{case}.json").write_text(json.dumps(r, indent=1))
    with capsys.disabled():
        print(f"\n{summary(case, r)}")
    assert r["senderFps"] >= MIN_FPS, f"the publisher sent only {r['senderFps']} fps (overloaded machine?)"
    # The loss really happened: nft dropped a share of what it saw near the configured percent.
    assert not r["nftProblem"], f"{case}: {r['nftProblem']}; {summary(case, r)}"
    assert r["decodedPct"] >= want, (f"{case}: decoded {r['decoded']}/{r['sent']} = {r['decodedPct']}% of the "
                                     f"sender's frames (< {want}%); {summary(case, r)}")
