// Minato browser SDK: data streams through the SFU (entry point: minato.js).
//
// A LocalDataStream is published like a track (`member.publish(createDataStream())`): the SDK
// opens an RTCDataChannel on the member's send connection and names it in `publish`
// (`dataChannel.label`); the server copies each message written on it to every subscriber,
// whose RemoteDataStream fires `onData` with the message (a string, or an ArrayBuffer).
import { MinatoError, MinatoEvent } from './core.js';

/** Messages a RemoteDataStream keeps while nobody listens to `onData` yet (then the oldest go). */
const MAX_HELD_MESSAGES = 10000;

/** A data stream to publish (SkyWay's LocalDataStream). */
export class LocalDataStream {
  /**
   * @param {{ordered?: boolean, maxRetransmits?: number}} [options] reliable and ordered by
   *   default; `{ordered: false, maxRetransmits: 0}` for lossy data (positions, cursors).
   */
  constructor(options = {}) {
    /** @type {'data'} */
    this.contentType = 'data';
    this.id = `data-${Math.random().toString(36).slice(2)}${Date.now().toString(36)}`;
    this.options = {};
    if (options.ordered !== undefined) this.options.ordered = !!options.ordered;
    if (options.maxRetransmits !== undefined) this.options.maxRetransmits = options.maxRetransmits;
    /** The largest message `write` takes (the server's `a=max-message-size`, known once published). */
    this.maxMessageBytes = 65536;
    /** @type {RTCDataChannel|null} */
    this._channel = null;
  }

  /** Bytes written and not yet sent by the browser. */
  get bufferedAmount() { return this._channel ? this._channel.bufferedAmount : 0; }

  /** Whether `write` can send now (published, channel open). */
  get isOpen() { return !!this._channel && this._channel.readyState === 'open'; }

  /**
   * Sends one message to every subscriber.
   * @param {string|ArrayBuffer|ArrayBufferView|Blob} data
   */
  write(data) {
    if (!this.isOpen) {
      throw new MinatoError('invalidParameter', 'this data stream is not published (or its channel closed)', { method: 'write' });
    }
    const size = typeof data === 'string' ? new TextEncoder().encode(data).length
      : data instanceof Blob ? data.size : data.byteLength;
    if (size > this.maxMessageBytes) {
      throw new MinatoError('messageTooLarge',
        `a data message may have at most ${this.maxMessageBytes} bytes (rooms.data.maxMessageBytes); this one has ${size}`,
        { method: 'write' });
    }
    this._channel.send(/** @type {any} */ (data));
  }

  /** @param {RTCDataChannel} channel @param {number} maxMessageBytes */
  _attach(channel, maxMessageBytes) {
    this._channel = channel;
    if (maxMessageBytes > 0) this.maxMessageBytes = maxMessageBytes;
  }

  _detach() {
    if (this._channel) { try { this._channel.close(); } catch (e) { /* closed */ } }
    this._channel = null;
  }
}

/**
 * A data stream to publish.
 * @param {{ordered?: boolean, maxRetransmits?: number}} [options]
 */
export function createDataStream(options = {}) { return new LocalDataStream(options); }

/** A subscribed data stream (SkyWay's RemoteDataStream). */
export class RemoteDataStream {
  /** @param {RoomSubscription} subscription */
  constructor(subscription) {
    /** @type {'data'} */
    this.contentType = 'data';
    this.id = subscription.id;
    this.ended = false;
    /** Fires with each message: a string, or an ArrayBuffer. @type {MinatoEvent<string|ArrayBuffer>} */
    this.onData = new MinatoEvent();
    /** Messages that arrived before the first `onData` handler (at most MAX_HELD_MESSAGES). */
    this._held = [];
    this.heldDropped = 0;
    const add = this.onData.add.bind(this.onData);
    this.onData.add = (handler) => {
      const remove = add(handler);
      const held = this._held;
      this._held = [];
      for (const m of held) { try { handler(m); } catch (e) { console.error('[minato] onData handler threw', e); } }
      return remove;
    };
    /** @type {RTCDataChannel|null} */
    this._channel = null;
  }

  /** @param {RTCDataChannel} channel */
  _attach(channel) {
    this._channel = channel;
    channel.binaryType = 'arraybuffer';
    channel.addEventListener('message', (ev) => {
      if (this.onData._handlers.size > 0) { this.onData.emit(ev.data); return; }
      if (this._held.length >= MAX_HELD_MESSAGES) { this._held.shift(); this.heldDropped += 1; }
      this._held.push(ev.data);
    });
  }

  _ended() {
    this.ended = true;
    if (this._channel) { try { this._channel.close(); } catch (e) { /* closed */ } }
    this._channel = null;
  }
}

/** The mid of the data-channel (m=application) section of an SDP, or null. @param {string} sdp */
export function dataSectionMid(sdp) {
  const sections = sdp.split(/\r?\nm=/).slice(1);
  for (const s of sections) {
    if (!s.startsWith('application')) continue;
    const m = s.match(/\r?\na=mid:([^\r\n]+)/);
    if (m) return m[1];
  }
  return null;
}

/** The `a=max-message-size` of an SDP's data-channel section, or 0. @param {string} sdp */
export function dataMaxMessageSize(sdp) {
  const m = sdp.match(/\r?\na=max-message-size:(\d+)/);
  return m ? Number(m[1]) : 0;
}

/**
 * Waits until `channel` is open (or fails after `timeoutMs`).
 * @param {RTCDataChannel} channel @param {number} timeoutMs
 */
export function channelOpen(channel, timeoutMs) {
  if (channel.readyState === 'open') return Promise.resolve();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new MinatoError('timeout', `the data channel did not open within ${timeoutMs} ms`)), timeoutMs);
    channel.addEventListener('open', () => { clearTimeout(timer); resolve(); }, { once: true });
    channel.addEventListener('close', () => { clearTimeout(timer); reject(new MinatoError('mediaError', 'the data channel closed before it opened')); }, { once: true });
  });
}
