// Minato browser SDK: local and received streams, and conveniences around them (entry point: minato.js).

// ---------------------------------------------------------------------------------------------
// Streams

/** A local track to publish (SkyWay's LocalAudioStream / LocalVideoStream). */
export class LocalStream {
  /** @param {MediaStreamTrack} track */
  constructor(track) {
    /** @type {MediaStreamTrack} */
    this.track = track;
    /** @type {'audio'|'video'} */
    this.contentType = /** @type {any} */ (track.kind);
    this.id = track.id;
  }
  /** Shows the track in a media element. @param {HTMLMediaElement} element */
  attach(element) { attachTrack(element, this.track); }
  /** @param {HTMLMediaElement} element */
  detach(element) { detachTrack(element, this.track); }
}

/** A received track (SkyWay's RemoteAudioStream / RemoteVideoStream). */
export class RemoteStream {
  /** @param {RTCRtpTransceiver} transceiver @param {RoomSubscription} subscription */
  constructor(transceiver, subscription) {
    this._transceiver = transceiver;
    /** @type {MediaStreamTrack} */
    this.track = transceiver.receiver.track;
    /** @type {'audio'|'video'} */
    this.contentType = subscription.contentType;
    this.id = subscription.id;
    /** @type {string|null} the receiving m-line */
    this.mid = transceiver.mid;
    /** @type {Set<HTMLMediaElement>} */
    this._elements = new Set();
    this.ended = false;
  }
  /** Shows/plays the track in a media element. @param {HTMLMediaElement} element */
  attach(element) { attachTrack(element, this.track); this._elements.add(element); }
  /** @param {HTMLMediaElement} element */
  detach(element) { detachTrack(element, this.track); this._elements.delete(element); }
  /** @returns {Promise<RTCStatsReport>} */
  getStats() { return this._transceiver.receiver.getStats(); }
  _ended() {
    this.ended = true;
    for (const el of this._elements) detachTrack(el, this.track);
    this._elements.clear();
  }
}

/** @param {HTMLMediaElement} element @param {MediaStreamTrack} track */
function attachTrack(element, track) {
  element.srcObject = new MediaStream([track]);
  element.autoplay = true;
  if (element instanceof HTMLVideoElement) element.playsInline = true;
  const p = element.play();
  if (p && p.catch) p.catch(() => { /* autoplay may wait for a gesture */ });
}

/** @param {HTMLMediaElement} element @param {MediaStreamTrack} track */
function detachTrack(element, track) {
  const so = element.srcObject;
  if (so instanceof MediaStream && so.getTracks().includes(track)) element.srcObject = null;
}

// ---------------------------------------------------------------------------------------------
// Convenience

/**
 * Opens camera and/or microphone (SkyWay's SkyWayStreamFactory in one call).
 * @param {MediaStreamConstraints} [constraints]
 * @returns {Promise<{audio?: LocalStream, video?: LocalStream}>}
 */
export async function createLocalStreams(constraints = { audio: true, video: true }) {
  const ms = await navigator.mediaDevices.getUserMedia(constraints);
  const out = {};
  for (const t of ms.getTracks()) out[t.kind] = new LocalStream(t);
  return out;
}

/**
 * Sums the inbound-rtp counters of a stats report (framesDecoded, packetsReceived, bytes,
 * frame size) — convenient for UIs and tests.
 * @param {RTCStatsReport} report
 * @returns {{framesDecoded: number, packetsReceived: number, bytesReceived: number,
 *   frameWidth: number, frameHeight: number, codec: string|null}}
 */
export function summarizeInbound(report) {
  const out = { framesDecoded: 0, packetsReceived: 0, bytesReceived: 0, frameWidth: 0, frameHeight: 0, codec: null };
  report.forEach((s) => {
    if (s.type !== 'inbound-rtp') return;
    out.framesDecoded += s.framesDecoded || 0;
    out.packetsReceived += s.packetsReceived || 0;
    out.bytesReceived += s.bytesReceived || 0;
    out.frameWidth = Math.max(out.frameWidth, s.frameWidth || 0);
    out.frameHeight = Math.max(out.frameHeight, s.frameHeight || 0);
    if (s.codecId) {
      const c = report.get(s.codecId);
      if (c) out.codec = c.mimeType;
    }
  });
  return out;
}
