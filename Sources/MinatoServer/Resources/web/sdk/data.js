// Minato browser SDK: data streams through the SFU (entry point: minato.js).
//
// A LocalDataStream is published like a track (`member.publish(createDataStream())`): the SDK
// opens an RTCDataChannel on the member's send connection and names it in `publish`
// (`dataChannel.label`); the server copies each message written on it to every subscriber,
// whose RemoteDataStream fires `onData` with the message (a string, or an ArrayBuffer).
import { MinatoError, MinatoEvent, mediaError } from './core.js';

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

/**
 * Publishes a data stream for `member`: an RTCDataChannel on its send connection (the first one
 * adds the connection's data-channel m-section to the offer), named in `publish` by its label.
 * @param {LocalSFURoomMember} member @param {LocalDataStream} stream
 * @param {object} options (metadata, isEnabled, maxSubscribers)
 * @param {RoomPublication|null} previous after a rejoin: the publication this one continues
 * @returns {Promise<RoomPublication>}
 */
export function publishData(member, stream, options, previous) {
  return member._sendQueue.run(async () => {
    member._checkJoined('publish');
    if (!member._sendPc) member._sendPc = member._newPc('send');
    const pc = member._sendPc;
    const label = `${stream.id}-${Math.random().toString(36).slice(2, 8)}`;
    const channel = pc.createDataChannel(label, stream.options);
    let published = false;
    try {
      let offer;
      try {
        offer = await pc.createOffer();
        await pc.setLocalDescription(offer);
      } catch (e) { throw mediaError(e, 'creating the publish offer failed'); }
      const mid = dataSectionMid(pc.localDescription.sdp);
      if (mid === null) throw new MinatoError('mediaError', 'the offer has no data-channel section', { method: 'publish' });
      const params = {
        memberId: member.id, contentType: 'data', mid,
        offer: { type: 'offer', sdp: pc.localDescription.sdp },
        dataChannel: { label, ...stream.options },
      };
      for (const k of ['metadata', 'isEnabled', 'maxSubscribers']) {
        if (options[k] !== undefined) params[k] = options[k];
      }
      const r = await member.context._request('publish', params);
      published = true;
      try {
        await pc.setRemoteDescription(r.answer);
      } catch (e) { throw mediaError(e, 'applying the server answer failed'); }
      await channelOpen(channel, 15000);
      stream._attach(channel, dataMaxMessageSize(r.answer.sdp));
      const publication = previous ? member.room._continuePublication(previous, r.publication)
        : member.room._upsertPublication(r.publication);
      publication._local = { transceiver: null, stream, member };
      member._senders.set(publication.id, { transceiver: null, stream, options, channel });
      return publication;
    } catch (e) {
      try { channel.close(); } catch (x) { /* closed */ }
      if (!published && pc.signalingState === 'have-local-offer') {
        try { await pc.setLocalDescription({ type: 'rollback' }); } catch (x) { /* ignore */ }
      }
      throw e;
    }
  });
}

/**
 * The rest of `member`'s data subscribe: the server's offer answered, then the channel the
 * server opens for the subscription (its label is the subscription id).
 * @param {LocalSFURoomMember} member
 * @param {{subscription: SubscriptionJSON, offer: {type: 'offer', sdp: string}}} r
 * @returns {Promise<{subscription: RoomSubscription, stream: RemoteDataStream}>}
 */
export async function subscribeData(member, r) {
  const applied = member._onServerOffer(r.offer, 'subscribe');
  const subscription = member.room._upsertSubscription(r.subscription);
  const stream = new RemoteDataStream(subscription);
  member._streams.set(subscription.id, stream);
  subscription._localStream = stream;
  const label = subscription.id;
  const channel = member._dataChannels.get(label) || await new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      member._dataWaiters.delete(label);
      reject(new MinatoError('timeout', 'the server did not open the data channel within 15 s', { method: 'subscribe' }));
    }, 15000);
    member._dataWaiters.set(label, (ch) => { clearTimeout(timer); resolve(ch); });
    applied.catch((e) => { clearTimeout(timer); member._dataWaiters.delete(label); reject(e); });
  });
  member._dataChannels.delete(label);
  stream._attach(channel);
  await applied;
  return { subscription, stream };
}
