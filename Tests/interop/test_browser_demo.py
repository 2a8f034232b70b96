"""The demo page at `/`, driven like a person would in real Chromium tabs, against the real server.
(b)+(e) and (c) run their one test body in Chromium and in Firefox ESR (windows of one Firefox per
test, through Tests/interop/firefox.py, whose FirefoxPage/FirefoxLocator/expect mirror the
Playwright calls used here).

(b) page 1 creates a room with a password; page 2 sees it in the list with a lock; a wrong
    password shows a visible error; the right one lets both see each other's video; a taken name
    is refused; mute/unmute reaches the others.
(e) a screenshot of the demo with three members is kept under artifacts/interop/ and checked
    non-blank. Chromium's fake camera draws a moving pattern: each tile must show a picture (luma
    spread, several colours). Firefox's fake camera is one flat colour (Y 0x80, the hue moving a
    little every frame, plus a tiny timestamp mark), so in Firefox each tile must show that colour
    (far from the near-black video background #05070a) and the colour must change over time.
(c) a page reloads: the others see it come back, with no ghost member and no duplicate video.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
import time

import pytest
from playwright.sync_api import expect as playwright_expect

import firefox
from conftest import engine_pages
from browser import ARTIFACTS, BROWSER_SERVER_ENV, demo_page, dump, wait_until
from admin_util import http
from minato_client import unique_name

# Recordings (the red dot) go to a temporary directory, removed with the module.
RECORDINGS = tempfile.mkdtemp(prefix="minato-demo-rec-")
MINATO_SERVER_ENV = {**BROWSER_SERVER_ENV, "MINATO_RECORDING_DIRECTORY": RECORDINGS, "MINATO_RECORDING_MIN_FREE_BYTES": "0"}


@pytest.fixture(scope="module", autouse=True)
def _remove_recordings():
    yield
    shutil.rmtree(RECORDINGS, ignore_errors=True)
SCREENSHOT = ARTIFACTS / "demo-three-members.png"
SCREENSHOT_FIREFOX = ARTIFACTS / "demo-three-members-firefox.png"
ENGINES = ["chromium", "firefox"]
# Firefox's fake camera: luma ~128 whatever the hue; the video background #05070a is ~7.
FIREFOX_MIN_LUMA = 60

pytestmark = pytest.mark.timeout(150)

# Per remote tile of a demo page: who, how many <video>s, frames decoded, the element's size,
# how much the picture varies (a blank or black video has ~0 luma deviation), and its mean
# colour and luma.
REMOTE_TILES_JS = """async () => {
  const d = window.minatoDemo;
  const out = [];
  const canvas = document.createElement('canvas');
  canvas.width = 64; canvas.height = 48;
  const g = canvas.getContext('2d', { willReadFrequently: true });
  for (const tile of document.querySelectorAll('#grid .tile.remote')) {
    const v = tile.querySelector('video');
    const pid = tile.dataset.videoPublicationId;
    const entry = pid && d.subscriptions.get(pid);
    let frames = 0;
    if (entry) (await entry.stream.getStats()).forEach((s) => { if (s.type === 'inbound-rtp') frames += s.framesDecoded || 0; });
    let lumaStd = 0, lumaMean = 0, rgb = [0, 0, 0];
    if (v.videoWidth > 0) {
      g.drawImage(v, 0, 0, 64, 48);
      const px = g.getImageData(0, 0, 64, 48).data;
      let sum = 0, sq = 0, n = 0;
      for (let i = 0; i < px.length; i += 4) {
        const y = 0.299 * px[i] + 0.587 * px[i + 1] + 0.114 * px[i + 2]; sum += y; sq += y * y; n++;
        rgb[0] += px[i]; rgb[1] += px[i + 1]; rgb[2] += px[i + 2];
      }
      lumaStd = Math.sqrt(Math.max(0, sq / n - (sum / n) ** 2));
      lumaMean = sum / n;
      rgb = rgb.map((c) => c / n);
    }
    out.push({ memberId: tile.dataset.memberId, name: tile.dataset.memberName, label: tile.querySelector('.label').textContent,
               videos: tile.querySelectorAll('video').length, videoWidth: v.videoWidth, videoHeight: v.videoHeight,
               frames, lumaStd, lumaMean, rgb, micOff: !tile.querySelector('.mic-off').hidden,
               camOff: !tile.querySelector('.cam-off').hidden });
  }
  return out.sort((a, b) => (a.name > b.name ? 1 : -1));
}"""


def expect(target):
    """Playwright's expect for a Chromium locator, firefox.expect (the same assertions) for a
    Firefox one."""
    return firefox.expect(target) if isinstance(target, firefox.FirefoxLocator) else playwright_expect(target)


@pytest.fixture
def engine() -> str:
    """The browser engine of the `pages` a test makes (a test parametrized over it runs in each)."""
    return "chromium"


@pytest.fixture
def pages(request, engine, server):
    """Makes demo pages: Chromium pages of the module's browser, or windows of one Firefox ESR of
    this test's own; saves their console logs and closes them after the test."""
    with engine_pages(request, engine, server, demo_page, firefox.demo_page, "demo") as make:
        yield make


def create_room(page, name: str, password: str = "") -> None:
    page.fill("#create-name", name)
    page.fill("#create-password", password)
    page.click("#create-button")
    expect(page.locator("#notice")).to_contain_text(f"Room {name} created", timeout=10000)


def join(page, room: str, name: str, password: str = "", expect_error: str | None = None) -> None:
    page.fill("#join-room", room)
    page.fill("#join-password", password)
    page.fill("#join-name", name)
    page.click("#join-button")
    if expect_error:
        expect(page.locator("#error")).to_have_attribute("data-error-name", expect_error, timeout=10000)
        expect(page.locator("#error")).to_be_visible()
        expect(page.locator("#lobby")).to_be_visible()
        expect(page.locator("#call")).to_be_hidden()
    else:
        expect(page.locator("#call")).to_be_visible(timeout=15000)
        expect(page.locator("#lobby")).to_be_hidden()
        expect(page.locator("#error")).to_be_hidden()
        expect(page.locator("#mute-video")).to_be_enabled(timeout=20000)


def remote_tiles(page) -> list[dict]:
    return page.evaluate(REMOTE_TILES_JS)


def is_engine(page, engine: str) -> bool:
    return isinstance(page, firefox.FirefoxPage) == (engine == "firefox")


def shows_picture(page, tile: dict) -> bool:
    """The tile's video shows what the publisher's fake camera draws: Chromium's moving pattern
    (luma varies across the picture); Firefox's flat colour (bright, far from the near-black video
    background)."""
    if isinstance(page, firefox.FirefoxPage):
        return tile["lumaMean"] > FIREFOX_MIN_LUMA
    return tile["lumaStd"] > 2


def sees_video_of(page, names: list[str], min_frames: int = 10) -> bool:
    tiles = remote_tiles(page)
    return sorted(t["name"] for t in tiles) == sorted(names) and all(
        t["videos"] == 1 and t["videoWidth"] > 0 and t["frames"] >= min_frames and shows_picture(page, t) for t in tiles)


def colour_moved(a: list[float], b: list[float], by: float = 4.0) -> bool:
    return max(abs(x - y) for x, y in zip(a, b)) >= by


def wait_video(page, label: str, names: list[str], timeout: float = 45) -> list[dict]:
    try:
        wait_until(lambda: sees_video_of(page, names), timeout, f"{label} to show decoding video of {names}")
        if isinstance(page, firefox.FirefoxPage):
            # Firefox's fake camera changes hue every frame: a live picture changes colour.
            before = {t["name"]: t["rgb"] for t in remote_tiles(page)}
            wait_until(lambda: all(colour_moved(before[t["name"]], t["rgb"]) for t in remote_tiles(page)), 10,
                       f"{label}: the colour of each remote video of {names} to change")
    except AssertionError as e:
        raise AssertionError(f"{e}; tiles: {dump(remote_tiles(page))}") from None
    return remote_tiles(page)


def png_stats(path, boxes: dict[str, dict]) -> dict:
    """Distinct colours (sampled) and luma spread of a PNG, whole and inside each named box
    ({x, y, width, height} in CSS pixels = PNG pixels here), decoded with PyAV."""
    import av
    with av.open(str(path)) as c:
        frame = next(c.decode(video=0)).reformat(format="rgb24")
    plane = frame.planes[0]
    data, stride = bytes(plane), plane.line_size

    def region(x0: int, y0: int, x1: int, y1: int, step: int) -> dict:
        colours, lumas, rgb = set(), [], [0, 0, 0]
        for y in range(max(0, y0), min(frame.height, y1), step):
            row = y * stride
            for x in range(max(0, x0), min(frame.width, x1), step):
                r, g, b = data[row + 3 * x: row + 3 * x + 3]
                colours.add((r >> 3, g >> 3, b >> 3))
                lumas.append(0.299 * r + 0.587 * g + 0.114 * b)
                rgb = [rgb[0] + r, rgb[1] + g, rgb[2] + b]
        mean = sum(lumas) / max(1, len(lumas))
        std = (sum((v - mean) ** 2 for v in lumas) / max(1, len(lumas))) ** 0.5
        return {"colours": len(colours), "lumaMean": round(mean, 1), "lumaStd": round(std, 1),
                "rgb": [round(c / max(1, len(lumas)), 1) for c in rgb]}

    out = {"width": frame.width, "height": frame.height, "all": region(0, 0, frame.width, frame.height, 4)}
    for name, b in boxes.items():
        out[name] = region(int(b["x"]) + 4, int(b["y"]) + 4, int(b["x"] + b["width"]) - 4,
                           int(b["y"] + b["height"]) - 4, 2)
    return out


@pytest.mark.parametrize("engine", ENGINES)
def test_password_room_list_errors_video_and_screenshot(server, engine, pages, tmp_path):
    room = unique_name("demo")
    password = "open-sesame"
    p1 = pages("p1")
    create_room(p1, room, password)
    # The form is ready to join the new room.
    expect(p1.locator("#join-room")).to_have_value(room)
    join(p1, room, "alice", password)

    p2 = pages("p2")
    row = p2.locator(f"tr.room[data-room-name='{room}']")
    expect(row).to_be_visible(timeout=10000)
    expect(row.locator(".lock")).to_have_attribute("data-locked", "true")
    expect(row.locator(".lock svg")).to_be_visible()
    expect(row.locator(".member-count")).to_have_text("1", timeout=10000)
    row.click()
    expect(p2.locator("#join-room")).to_have_value(room)
    # Wrong password: a visible error naming it; still in the lobby.
    join(p2, room, "bob", "wrong-password", expect_error="wrongPassword")
    expect(p2.locator("#error-text")).to_contain_text("Wrong password")
    # Right password: both see each other.
    join(p2, room, "bob", password)
    wait_video(p1, "alice", ["bob"])
    wait_video(p2, "bob", ["alice"])
    # A taken name is refused with a visible error, then a free one works.
    p3 = pages("p3")
    join(p3, room, "bob", password, expect_error="memberNameDuplicated")
    expect(p3.locator("#error-text")).to_contain_text("already taken")
    join(p3, room, "carol", password)
    for page, me, others in ((p1, "alice", ["bob", "carol"]), (p2, "bob", ["alice", "carol"]),
                             (p3, "carol", ["alice", "bob"])):
        tiles = wait_video(page, me, others)
        assert [t["label"] for t in tiles] == others, tiles
        expect(page.locator("#grid .tile.local .label")).to_have_text(f"{me} (you)")
    # The list counts three members (seen from a fourth tab that stays in the lobby).
    p4 = pages("p4")
    expect(p4.locator(f"tr.room[data-room-name='{room}'] .member-count")).to_have_text("3", timeout=10000)

    # (e) the screenshot: three members, each tile showing decoded video.
    assert is_engine(p1, engine)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOT if engine == "chromium" else SCREENSHOT_FIREFOX
    p1.screenshot(path=str(shot))
    boxes = {t.get_attribute("data-member-name"): t.locator("video").bounding_box()
             for t in p1.locator("#grid .tile").all()}
    st = png_stats(shot, boxes)
    print(f"screenshot {shot}: {st}")
    assert st["width"] >= 1000 and st["height"] >= 600, st
    assert sorted(boxes) == ["alice", "bob", "carol"], boxes
    assert st["all"]["colours"] >= 30 and st["all"]["lumaStd"] > 10, f"the screenshot looks blank: {st}"
    if engine == "chromium":
        for name in boxes:
            # Each video shows a picture (the fake camera's moving pattern), not a flat or black area.
            assert st[name]["lumaStd"] > 8 and st[name]["lumaMean"] > 20 and st[name]["colours"] >= 5, \
                f"{name}'s tile looks blank in the screenshot: {st[name]}"
    else:
        # Each video shows Firefox's fake-camera colour (not the near-black video background), and
        # a second screenshot a moment later shows every tile in another colour: live video.
        for name in boxes:
            assert st[name]["lumaMean"] > FIREFOX_MIN_LUMA, f"{name}'s tile looks blank in the screenshot: {st[name]}"
        t0 = time.monotonic()
        while True:
            time.sleep(0.5)   # the fake camera moves its hue by one step per frame
            p1.screenshot(path=str(tmp_path / "later.png"))
            later = png_stats(tmp_path / "later.png", boxes)
            if all(colour_moved(st[n]["rgb"], later[n]["rgb"]) for n in boxes) or time.monotonic() - t0 > 10:
                break
        print(f"screenshot {time.monotonic() - t0:.1f} s later: {later}")
        for name in boxes:
            assert later[name]["lumaMean"] > FIREFOX_MIN_LUMA, f"{name}'s tile looks blank later: {later[name]}"
            assert colour_moved(st[name]["rgb"], later[name]["rgb"]), \
                f"{name}'s tile kept its colour: {st[name]['rgb']} then {later[name]['rgb']}"

    # Mute / unmute: bob's tile at alice shows it.
    p2.click("#mute-audio")
    expect(p2.locator("#mute-audio")).to_have_text("Unmute mic", timeout=10000)
    wait_until(lambda: [t for t in remote_tiles(p1) if t["name"] == "bob" and t["micOff"]], 10, "alice to see bob muted")
    p2.click("#mute-video")
    expect(p2.locator("#mute-video")).to_have_text("Start camera", timeout=10000)
    wait_until(lambda: [t for t in remote_tiles(p1) if t["name"] == "bob" and t["camOff"]], 10, "alice to see bob's camera off")
    assert p1.evaluate("minatoDemo.room.publications.filter((p) => p.state === 'disabled').length") == 2
    p2.click("#mute-audio")
    p2.click("#mute-video")
    wait_until(lambda: [t for t in remote_tiles(p1) if t["name"] == "bob" and not t["micOff"] and not t["camOff"]], 10,
               "alice to see bob unmuted")
    frames = [t["frames"] for t in remote_tiles(p1) if t["name"] == "bob"][0]
    wait_until(lambda: [t for t in remote_tiles(p1) if t["name"] == "bob" and t["frames"] > frames + 10], 15,
               "bob's video to flow again at alice")

    # A recording of bob (admin API): bob's tile shows the red dot on every page, also on one that
    # joins while it runs (the room snapshot lists it), and the dot goes when it stops.
    room_id = p1.evaluate("minatoDemo.room.id")
    bob_id = p1.evaluate("minatoDemo.room.members.find((m) => m.name === 'bob').id")
    r = http("POST", f"{server.http}/v1/rooms/{room_id}/recordings", {"memberId": bob_id}, timeout=30)
    assert r.status == 201, r
    rec = r.json["recording"]
    recorded = "[...document.querySelectorAll('#grid .tile.recorded')].map((t) => t.dataset.memberName)"
    join(p4, room, "dave", password)
    for page in (p1, p2, p3, p4):
        wait_until(lambda: page.evaluate(recorded) == ["bob"], 15, "bob's tile to show the recording")
    r = http("DELETE", f"{server.http}/v1/rooms/{room_id}/recordings/{rec['id']}", timeout=30)
    if r.status != 200 or r.json["recording"]["state"] != "stopped":
        # The server keeps a failed recording's recorder log beside its file: show its end.
        log = Path(rec["file"] + ".log")
        tail = log.read_text(errors="replace")[-4000:] if log.exists() else f"(no {log})"
        pytest.fail(f"the recording did not stop cleanly: {r}\nrecorder log:\n{tail}")
    for page in (p1, p2, p3, p4):
        wait_until(lambda: page.evaluate(recorded) == [], 15, "the red dot to go when the recording stops")
    p4.click("#leave")
    expect(p4.locator("#lobby")).to_be_visible(timeout=10000)

    # Leave: carol's tile disappears at the others; carol is back in the lobby.
    p3.click("#leave")
    expect(p3.locator("#lobby")).to_be_visible(timeout=10000)
    expect(p3.locator("#call")).to_be_hidden()
    for page in (p1, p2):
        expect(page.locator("#grid .tile.remote[data-member-name='carol']")).to_have_count(0, timeout=10000)
    for page in (p1, p2, p3, p4):
        assert page.evaluate("minatoDemo.errors.map((e) => e.name)") in ([], ["wrongPassword"], ["memberNameDuplicated"])


@pytest.mark.parametrize("engine", ENGINES)
def test_reload_comes_back_without_ghost_or_duplicate(server, engine, pages):
    room = unique_name("reload")
    p1, p2, p3 = pages("p1"), pages("p2"), pages("p3")
    create_room(p1, room)
    join(p1, room, "alice")
    join(p2, room, "bob")
    join(p3, room, "carol")
    wait_video(p1, "alice", ["bob", "carol"])
    wait_video(p3, "carol", ["alice", "bob"])
    old_bob = p1.evaluate("minatoDemo.room.members.find((m) => m.name === 'bob').id")
    for p in (p1, p3):
        p.evaluate("""() => { window.__events = [];
            const r = minatoDemo.room;
            r.onMemberLeft.add(({ member, reason }) => __events.push({ type: 'left', id: member.id, name: member.name, reason }));
            r.onMemberJoined.add(({ member }) => __events.push({ type: 'joined', id: member.id, name: member.name })); }""")

    p2.reload()
    p2.wait_for_selector("body[data-ready='true']", timeout=20000)
    expect(p2.locator("#call")).to_be_visible(timeout=20000)   # it joins again by itself
    for page, me, others in ((p1, "alice", ["bob", "carol"]), (p3, "carol", ["alice", "bob"]),
                             (p2, "bob", ["alice", "carol"])):
        tiles = wait_video(page, me, others)
        assert len(tiles) == 2 and all(t["videos"] == 1 for t in tiles), f"{me}: duplicate tiles/videos {dump(tiles)}"
    new_bob = p1.evaluate("minatoDemo.room.members.find((m) => m.name === 'bob').id")
    assert new_bob != old_bob
    for page, me in ((p1, "alice"), (p3, "carol")):
        events = page.evaluate("__events")
        left = [e for e in events if e["type"] == "left"]
        joined = [e for e in events if e["type"] == "joined"]
        assert [(e["id"], e["name"]) for e in left] == [(old_bob, "bob")], events
        # `left` (the SDK's pagehide leave), `transportClosed` (the unloading page's DTLS close can
        # reach the server first) or `replaced` (the rejoin with replace:true came first).
        assert left[0]["reason"] in ("left", "transportClosed", "replaced"), left
        assert [(e["id"], e["name"]) for e in joined] == [(new_bob, "bob")], events
        print(f"{me}: the old bob left with reason {left[0]['reason']!r}, the new bob joined")
        # No ghost: exactly three members, one per name; bob's tile is the new member's.
        members = page.evaluate("minatoDemo.room.members.map((m) => m.name).sort()")
        assert members == ["alice", "bob", "carol"], members
        tile_ids = [t["memberId"] for t in remote_tiles(page) if t["name"] == "bob"]
        assert tile_ids == [new_bob], tile_ids
        assert page.locator("#grid video").count() == 3
        subs = page.evaluate("[...minatoDemo.subscriptions.values()].filter(Boolean).length")
        assert subs == 4, f"{me}: {subs} subscriptions, expected 2 audio + 2 video"
    # The server agrees: three members in the room.
    assert p2.evaluate("async (n) => (await minatoDemo.context.listRooms()).find((r) => r.name === n).memberCount",
                       room) == 3
