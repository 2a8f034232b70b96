"""aiortc data-channel peers over Minato's signaling (docs/protocol.md "Data"): publish a data
channel on a member's send connection, subscribe to a data publication and get the channel the
server opens on the receive connection. aiortc's SCTP and DCEP are its own (pure Python), an
implementation independent of Minato's usrsctp."""
from __future__ import annotations

import asyncio
import time
from typing import Optional

from aiortc import RTCDataChannel, RTCSessionDescription

from minato_client import Member, sdp_media_sections
from waiting import await_until


class DataReceiver:
    """Collects the messages of one channel with their arrival times."""

    def __init__(self, channel: RTCDataChannel) -> None:
        self.channel = channel
        self.messages: list = []
        self.arrivals: list[float] = []
        channel.on("message", self._on)

    def _on(self, m) -> None:
        self.messages.append(m)
        self.arrivals.append(time.monotonic())


async def publish_data(member: Member, label: str, *, ordered: bool = True,
                       max_retransmits: Optional[int] = None, **extra) -> tuple[dict, RTCDataChannel]:
    """Opens a channel `label` on the send connection and publishes it (`contentType:"data"`)."""
    pc = member._ensure_send_pc()
    ch = pc.createDataChannel(label, ordered=ordered, maxRetransmits=max_retransmits)
    await pc.setLocalDescription(await pc.createOffer())
    offer = pc.localDescription
    mid = next(s["mid"] for s in sdp_media_sections(offer.sdp) if s["kind"] == "application")
    dc: dict = {"label": label, "ordered": ordered}
    if max_retransmits is not None:
        dc["maxRetransmits"] = max_retransmits
    res = await member.conn.call("publish", {
        "memberId": member.id, "contentType": "data", "mid": mid,
        "offer": {"type": offer.type, "sdp": offer.sdp}, "dataChannel": dc, **extra})
    ans = res["answer"]
    await pc.setRemoteDescription(RTCSessionDescription(sdp=ans["sdp"], type=ans["type"]))
    await await_until(lambda: ch.readyState == "open", 10, f"{member.label}'s data channel {label} to open")
    return res["publication"], ch


def _watch_channels(member: Member) -> dict:
    pc = member._ensure_recv_pc()
    channels = getattr(member, "_data_channels", None)
    if channels is None:
        channels = {}
        member._data_channels = channels
        pc.on("datachannel", lambda ch: channels.__setitem__(ch.label, ch))
    return channels


async def subscribe_data(member: Member, publication_id: str) -> tuple[dict, DataReceiver]:
    """Subscribes to a data publication and waits for the channel the server opens (its label
    is the subscription id, its protocol the publication id)."""
    channels = _watch_channels(member)
    res = await member.conn.call("subscribe", {"memberId": member.id, "publicationId": publication_id})
    async with member._recv_lock:
        await member._apply_server_offer(res["offer"])
    sid = res["subscription"]["id"]
    await await_until(lambda: sid in channels, 10, f"{member.label}: the server's data channel for {sid}")
    ch = channels[sid]
    assert ch.protocol == publication_id, (ch.protocol, publication_id)
    return res["subscription"], DataReceiver(ch)


async def wait_notification(member: Member, method: str, timeout: float = 10) -> dict:
    """The first notification `method` the member's connection got (waits up to timeout)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for n in member.conn.notifications:
            if n.get("method") == method:
                return n["params"]
        await asyncio.sleep(0.02)
    raise TimeoutError(f"{member.label}: no {method} notification within {timeout}s; "
                       f"saw {[n.get('method') for n in member.conn.notifications]}")
