"""(b) As (a), with A's video forced to H264 by setCodecPreferences on its transceiver."""
from __future__ import annotations

from minato_client import run_async
from test_fanout_vp8 import fanout


def test_fanout_opus_h264(server):
    run_async(fanout(server, "video/H264"), timeout=90)
