"""A relay between two media workers, inside this suite's network namespace.

The Swift suite `RelayTransportTests` (Tests/MinatoTransportTests/RelayTransportTests.swift)
opens real sockets (libnice, DTLS, SRTP on 127.0.0.1), so `make unit` skips it; here it runs in
the namespace the interop suite already has, from the test bundle `swift test` built
(`make test` builds it before this suite). Two workers are joined by a relay transport pair
(ICE-lite on one, full ICE + DTLS client on the other), a publisher client's stream crosses
it to a subscriber client, and the subscriber's PLI crosses it back to the publisher.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = Path(os.environ.get("MINATO_TEST_BUNDLE", ROOT / ".build/debug/minatoPackageTests.xctest"))


def test_media_and_keyframe_requests_cross_a_relay_between_workers(capsys):
    if not BUNDLE.exists():
        pytest.fail(f"{BUNDLE} is missing: build the tests first (`swift build --build-tests`, or `make test`)")
    env = dict(os.environ, MINATO_NETNS_TESTS="1")
    run = subprocess.run([str(BUNDLE), "--testing-library", "swift-testing", "--filter", "RelayTransportTests"],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=90)
    out = run.stdout + run.stderr
    (ROOT / "artifacts/interop").mkdir(parents=True, exist_ok=True)
    (ROOT / "artifacts/interop/test_relay_transport.log").write_text(out)
    relay = [line for line in out.splitlines() if line.startswith("relay:")]
    with capsys.disabled():
        print("\n" + "\n".join(relay))
    assert run.returncode == 0, out[-4000:]
    # Ran (not skipped for want of the namespace variable) and passed.
    assert "Test run with 1 test in 1 suite passed" in out, out[-4000:]
    assert relay, out[-4000:]
