import asyncio, sys
import aioice.ice
aioice.ice.get_host_addresses = lambda *a, **k: ["127.0.0.1"]
from aiortc import RTCPeerConnection, RTCConfiguration, RTCSessionDescription
from aiortc.mediastreams import AudioStreamTrack, VideoStreamTrack

async def main():
    mode = sys.argv[1]
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    if mode == "offer":
        pc.addTransceiver(AudioStreamTrack(), direction="sendonly")
        pc.addTransceiver(VideoStreamTrack(), direction="sendrecv")
        await pc.setLocalDescription(await pc.createOffer())
    else:
        offer = open(sys.argv[2]).read()
        await pc.setRemoteDescription(RTCSessionDescription(sdp=offer, type="offer"))
        await pc.setLocalDescription(await pc.createAnswer())
    sys.stdout.write(pc.localDescription.sdp)
    await pc.close()

asyncio.run(main())
