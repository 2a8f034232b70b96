"""Captures firefox-offer-audio-video.sdp: Firefox ESR's offer for sendonly audio + video under
max-bundle (the SDK's send connection), fake devices, driven by Tests/interop/firefox.py.

    unshare -n sh -c 'ip link set lo up; .venv-interop/bin/python Tests/MinatoWireTests/Fixtures/capture/capture_firefox.py'

(run from the repository root, in a loopback-only namespace; the page is served from 127.0.0.1).
"""
import http.server
import sys
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "interop"))
import firefox  # noqa: E402

httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=httpd.serve_forever, daemon=True).start()
with firefox.ipv6_disabled(), firefox.Firefox("capture") as ff:
    ff.client.navigate("http://127.0.0.1:%d/" % httpd.server_address[1])
    sdp = ff.page.evaluate("""async () => {
      const pc = new RTCPeerConnection({ bundlePolicy: 'max-bundle', rtcpMuxPolicy: 'require' });
      const ms = await navigator.mediaDevices.getUserMedia({ audio: true, video: true });
      pc.addTransceiver(ms.getAudioTracks()[0], { direction: 'sendonly', streams: [ms] });
      pc.addTransceiver(ms.getVideoTracks()[0], { direction: 'sendonly', streams: [ms] });
      await pc.setLocalDescription(await pc.createOffer());
      return pc.localDescription.sdp; }""")
httpd.shutdown()
(HERE.parent / "firefox-offer-audio-video.sdp").write_text(sdp)
print(f"Firefox {ff.version}: wrote firefox-offer-audio-video.sdp")
