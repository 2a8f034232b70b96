import sys, gi
gi.require_version("Gst", "1.0"); gi.require_version("GstWebRTC", "1.0"); gi.require_version("GstSdp", "1.0")
from gi.repository import Gst, GstWebRTC, GstSdp, GLib
Gst.init(None)
pipe = Gst.parse_launch(
    "webrtcbin name=w bundle-policy=max-bundle "
    "videotestsrc is-live=true ! videoconvert ! vp8enc deadline=1 ! rtpvp8pay ! "
    "application/x-rtp,media=video,encoding-name=VP8,payload=96 ! w. "
    "audiotestsrc is-live=true ! audioconvert ! audioresample ! opusenc ! rtpopuspay ! "
    "application/x-rtp,media=audio,encoding-name=OPUS,payload=97 ! w.")
w = pipe.get_by_name("w")
ice = w.get_property("ice-agent")
keep = [ice]
try:
    ice.set_property("ice-tcp", False)
    nice = ice.get_property("agent"); keep.append(nice)
    nice.set_property("upnp", False)
except Exception as e:
    sys.stderr.write("ice props: %r\n" % e)
loop = GLib.MainLoop()
def on_offer(promise, _):
    promise.wait()
    reply = promise.get_reply()
    keep.append(reply); keep.append(promise)
    offer = reply.get_value("offer")
    keep.append(offer)
    sdp = offer.sdp
    keep.append(sdp)
    sys.stdout.write(sdp.as_text())
    loop.quit()
def on_negotiation_needed(el):
    w.emit("create-offer", None, Gst.Promise.new_with_change_func(on_offer, None))
w.connect("on-negotiation-needed", on_negotiation_needed)
pipe.set_state(Gst.State.PLAYING)
GLib.timeout_add_seconds(20, loop.quit)
loop.run()
pipe.set_state(Gst.State.NULL)
