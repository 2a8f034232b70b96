"""Data through the SFU with the browser SDK in Chromium and aiortc (two independent SCTP/DCEP
stacks besides Minato's usrsctp): `createDataStream()` / `publish` / `write` on one page,
`subscribe` / `onData` on another page and at an aiortc peer, and aiortc's publication read by a
page. 10,000 reliable messages (strings and binary) arrive complete and in order at each
subscriber; a message over the server's a=max-message-size is refused by `write` with
`messageTooLarge`; an unpublished data stream's channel closes at the subscriber."""
from __future__ import annotations

import time

import pytest

from browser import BROWSER_SERVER_ENV, close_page, sdk_page, wait_js
from data_peers import publish_data, subscribe_data
from minato_client import LoopThread, Member, unique_name
from waiting import await_until, wait_until

MINATO_SERVER_ENV = {**BROWSER_SERVER_ENV, "MINATO_ROOMS_DATA_MAX_MESSAGES_PER_SEC": "1000000"}
COUNT = 10_000

pytestmark = pytest.mark.timeout(150)

# Page helpers: publish a data stream, write numbered messages (strings, every 10th binary),
# subscribe and record what arrives.
DATA_JS = r"""
() => {
  T.data = {
    streams: {}, got: {}, errors: [],
    async publish(key, options = {}) {
      const s = T.M.createDataStream(options);
      const p = await T.me.publish(s, { metadata: key });
      T.data.streams[key] = s;
      return p.id;
    },
    async subscribe(pid) {
      const { subscription, stream } = await T.me.subscribe(pid);
      const got = T.data.got[pid] = [];
      subscription.onCanceled.add((e) => T.data.errors.push(`canceled ${e.reason || ''}`));
      stream.onData.add((d) => got.push(typeof d === 'string' ? d : `bin:${new DataView(d).getUint32(0)}:${d.byteLength}`));
      return subscription.id;
    },
    async writeNumbered(key, n) {
      const s = T.data.streams[key];
      const t0 = performance.now();
      for (let i = 0; i < n; i++) {
        while (s.bufferedAmount > (1 << 20)) await new Promise((r) => setTimeout(r, 2));
        if (i % 10 === 9) {
          const b = new ArrayBuffer(64);
          new DataView(b).setUint32(0, i);
          s.write(b);
        } else {
          s.write(`${i}:` + 'y'.repeat(60));
        }
      }
      return performance.now() - t0;
    },
    count(pid) { return (T.data.got[pid] || []).length; },
    check(pid, n) {
      const got = T.data.got[pid] || [];
      const bad = [];
      for (let i = 0; i < n; i++) {
        const want = i % 10 === 9 ? `bin:${i}:64` : `${i}:` + 'y'.repeat(60);
        if (got[i] !== want) { bad.push([i, String(got[i]).slice(0, 20)]); if (bad.length > 5) break; }
      }
      return { count: got.length, bad };
    },
    tooLarge(key) {
      try { T.data.streams[key].write('z'.repeat(70000)); return 'sent'; }
      catch (e) { return `${e.name}: ${e.detail || e.message}`; }
    },
  };
  return true;
}
"""


def expected(i: int):
    return i.to_bytes(4, "big") + bytes(60) if i % 10 == 9 else f"{i}:" + "y" * 60


def test_data_chromium_pages_and_aiortc(server, chromium, capsys):
    room = unique_name("data-web")
    pa, la = sdk_page(chromium, server, "data-alice")
    pb, lb = sdk_page(chromium, server, "data-bob")
    lt = LoopThread()
    carol: Member | None = None
    try:
        for p, name in ((pa, "alice"), (pb, "bob")):
            p.evaluate("() => { T.autoSubscribe = false; }")
            p.evaluate("T.connect()")
            room_id = p.evaluate("(n) => T.findOrCreate(n)", room)
            p.evaluate("([n]) => T.join(n, {}, null)", [name])
            p.evaluate(DATA_JS)

        # alice publishes (reliable, the default); bob and carol (aiortc) subscribe.
        pid = pa.evaluate("T.data.publish('chat')")
        pub = pa.evaluate("(id) => { const p = T.room.publications.find((x) => x.id === id); return { contentType: p.contentType }; }", pid)
        assert pub == {"contentType": "data"}, pub
        pb.evaluate("(pid) => T.data.subscribe(pid)", pid)

        async def carol_joins() -> tuple:
            m = await Member.join(server.url, room_id, "carol")
            _, receiver = await subscribe_data(m, pid)
            cpub, cch = await publish_data(m, "from-carol")
            return m, receiver, cpub, cch
        carol, rc, cpub, cch = lt.run(carol_joins())
        pb.evaluate("(pid) => T.data.subscribe(pid)", cpub["id"])

        t0 = time.monotonic()
        wrote_ms = pa.evaluate("(n) => T.data.writeNumbered('chat', n)", COUNT)
        wait_js(pb, "([pid, n]) => T.data.count(pid) >= n", [pid, COUNT], timeout=60,
                what=f"bob to get {COUNT} messages from alice")
        lt.run(await_until(lambda: len(rc.messages) >= COUNT, 60, f"carol to get {COUNT} messages from alice",
                           state=lambda: len(rc.messages)))
        took = time.monotonic() - t0
        check = pb.evaluate("([pid, n]) => T.data.check(pid, n)", [pid, COUNT])
        assert check == {"count": COUNT, "bad": []}, check
        assert rc.messages == [expected(i) for i in range(COUNT)], "carol's messages are not complete and in order"

        # aiortc -> Chromium: carol's messages reach bob's page in order.
        def carol_writes() -> None:
            for i in range(1000):
                cch.send(expected(i))
        lt.call_soon(carol_writes)
        wait_js(pb, "([pid, n]) => T.data.count(pid) >= n", [cpub["id"], 1000], timeout=30,
                what="bob to get 1000 messages from carol")
        check = pb.evaluate("([pid, n]) => T.data.check(pid, n)", [cpub["id"], 1000])
        assert check == {"count": 1000, "bad": []}, check

        # A message over the server's a=max-message-size is refused by the SDK with a clear error.
        refused = pa.evaluate("T.data.tooLarge('chat')")
        assert refused.startswith("messageTooLarge:") and "65536" in refused, refused

        # Unpublishing ends bob's subscription (its channel closes).
        pa.evaluate("(pid) => T.me.unpublish(pid)", pid)
        wait_js(pb, "() => T.data.errors.length > 0", timeout=10, what="bob's subscription to end")
        assert pb.evaluate("T.data.errors") == ["canceled "], pb.evaluate("T.data.errors")
        print(f"data browser: {COUNT} messages from a Chromium page to a Chromium page and aiortc, complete and in "
              f"order in {took:.2f} s (written in {wrote_ms / 1000:.2f} s); 1000 aiortc -> Chromium in order")
        assert not pa.evaluate("T.errors") and not pb.evaluate("T.errors")
    finally:
        if carol is not None:
            lt.run(carol.close())
        lt.close()
        close_page(pa, la, "data-alice")
        close_page(pb, lb, "data-bob")
