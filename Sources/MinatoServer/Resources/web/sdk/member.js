// Minato browser SDK: room members, and the local member's two peer connections (entry point: minato.js).
// Types: the JSDoc typedefs (RoomJSON, MemberJSON, …) are in minato.js.

import { MinatoError, MinatoEvent, SerialQueue, mediaError, receiveCodecCapabilities } from './core.js';
import { LocalStream, RemoteStream } from './stream.js';
import { MediaRecovery } from './recovery.js';
import { MemberIceServers } from './ice-servers.js';
import { LocalDataStream, publishData, subscribeData } from './data.js';

// ---------------------------------------------------------------------------------------------
// Members

/** A member of a room, local or remote. */
export class RoomMember {
  /** @param {SFURoom} room @param {MemberJSON} json */
  constructor(room, json) {
    this.room = room;
    /** @type {string} */
    this.id = json.id;
    /** @type {string|null} */
    this.name = json.name ?? null;
    /** @type {string} */
    this.metadata = json.metadata ?? '';
    /** @type {'person'|'bot'} */
    this.type = json.type ?? 'person';
    /** @type {'local'|'remote'} */
    this.side = 'remote';
    /** @type {'joined'|'left'} */
    this.state = 'joined';
    /** This member's audio level from the last `activeSpeakersChanged` event: the level of its
     * loudest audio publication among the speakers (linear amplitude, 0...1 of full scale), 0
     * when it is not speaking. @type {number} */
    this.audioLevel = 0;
    /** Whether the last `activeSpeakersChanged` lists this member. @type {boolean} */
    this.isSpeaking = false;
  }

  /** @param {MemberJSON} json */
  _update(json) {
    if (!json) return;
    if (json.name !== undefined) this.name = json.name;
    if (json.metadata !== undefined) this.metadata = json.metadata;
    if (json.type !== undefined) this.type = json.type;
  }

  /** This member's publications. @type {RoomPublication[]} */
  get publications() { return this.room.publications.filter((p) => p.publisherId === this.id); }
  /** This member's subscriptions. @type {RoomSubscription[]} */
  get subscriptions() { return this.room.subscriptions.filter((s) => s.subscriberId === this.id); }
}

/** Another member of the room. */
export class RemoteRoomMember extends RoomMember {}

/**
 * The member this page joined as (SkyWay's LocalSFURoomMember).
 */
export class LocalSFURoomMember extends RoomMember {
  /**
   * The join result's `reconnectSecret`: a new socket can take this member over only with it.
   * A private field, so it is neither enumerable nor serialised, and the SDK never logs it.
   * @type {string|undefined}
   */
  #reconnectSecret;

  /**
   * @param {SFURoom} room @param {MemberJSON} json
   * @param {{keepaliveIntervalSec: number, reconnectSecret?: string, joinParams?: object, password?: string,
   *   iceServers?: RTCIceServer[]}} opts
   *   `joinParams`, `password`: what `join` sent (without the room id), to join again the same way
   *   after the room was lost. `iceServers`: the join result's (TURN with this member's credential).
   */
  constructor(room, json, opts) {
    super(room, json);
    this.#reconnectSecret = typeof opts.reconnectSecret === 'string' ? opts.reconnectSecret : undefined;
    this.side = 'local';
    this.context = room.context;
    this._keepaliveIntervalSec = opts.keepaliveIntervalSec;
    this._joinParams = opts.joinParams || {};
    this._password = opts.password;
    this._left = false;
    this._lostReason = null;
    /** @type {RTCPeerConnection|null} */
    this._sendPc = null;
    /** @type {RTCPeerConnection|null} */
    this._recvPc = null;
    this._sendQueue = new SerialQueue();
    this._recvQueue = new SerialQueue();
    this._keepaliveTimer = null;
    this._endOfCandidatesSent = { send: false, recv: false };
    /** Counts the rejoins: work queued for the connections of an earlier room is dropped. */
    this._generation = 0;
    /** @type {Map<string, {transceiver: RTCRtpTransceiver, stream: LocalStream, options: object}>} publication id → sender */
    this._senders = new Map();
    /** @type {Map<string, RemoteStream>} subscription id → stream */
    this._streams = new Map();
    /** @type {Map<string, Promise<{subscription: RoomSubscription, stream: RemoteStream}>>} publication id → subscribe in flight */
    this._subscribing = new Map();
    /** The number of server offers this member answered. */
    this.answeredOffers = 0;
    /** Data channels the server opened on the receive connection, by label (a subscription id),
     * and the subscribes waiting for theirs. */
    this._dataChannels = new Map();
    this._dataWaiters = new Map();
    /** Fires when the server refused something this member's data channels sent
     * (`dataChannelError`: reason `messageTooLarge`, `unknownDcepMessage`, `invalidDcepMessage`,
     * `tooManyChannels`). @type {MinatoEvent<{reason: string, detail: string, publicationId?: string, label?: string}>} */
    this.onDataChannelError = new MinatoEvent();
    /** Fires once when this member is no longer in the room; `reason` is the server's
     * (`left`, `replaced`, `keepaliveExpired`, `transportClosed`, `kicked`, `roomClosed`), or the
     * SDK's `takeoverRefused` (after a reconnect the server refused `keepalive` with
     * `insufficientPermissions`). @type {MinatoEvent<{reason: string}>} */
    this.onLeft = new MinatoEvent();
    /** Fires when the member is lost for a reason other than its own leave or the room's close,
     * or a negotiation with the server fails, or a TURN server refused the member's credentials
     * and a connection did not come up without it (`turnCredentialsRejected`). @type {MinatoEvent<MinatoError>} */
    this.onFatalError = new MinatoEvent();
    /** @type {MinatoEvent<{publication: RoomPublication}>} */
    this.onPublicationListChanged = new MinatoEvent();
    /** @type {MinatoEvent<{subscription: RoomSubscription}>} */
    this.onSubscriptionListChanged = new MinatoEvent();
    /** Fires with each subscription this member made and its received stream: after `subscribe`,
     * and after a rejoin for each subscription the SDK made again (a new stream: show it in place
     * of the old one, which ended). @type {MinatoEvent<{subscription: RoomSubscription, stream: RemoteStream}>} */
    this.onStreamSubscribed = new MinatoEvent();
    /** A connection of this member is being restored: `{kind: 'media', direction: 'send'|'recv',
     * reason: 'iceDisconnected'|'iceFailed'|'networkChanged'}` (ICE restarts follow), or `{kind:
     * 'signaling', reason: 'socketClosed'|'unresponsive'|'networkChanged'}` (the WebSocket is
     * reconnecting). docs/sdk.md "Recovery". @type {MinatoEvent<{kind: 'media'|'signaling', direction?: 'send'|'recv', reason: string}>} */
    this.onReconnecting = new MinatoEvent();
    /** The connection is back: media `{kind, direction, reason, durationMs, restarts}` (packets
     * flow again; `restarts`: ICE restarts it took), signaling `{kind, reason, durationMs,
     * replayedEvents}` (the member was taken back and the room's missed events applied).
     * @type {MinatoEvent<{kind: 'media'|'signaling', direction?: 'send'|'recv', reason: string, durationMs: number,
     *   restarts?: number, replayedEvents?: number}>} */
    this.onReconnected = new MinatoEvent();
    /** `{quality: 'good'|'poor'|'bad', previous, packetLoss, rttMs, reason?}` when the rating of
     * this member's media connections changes (docs/sdk.md "Recovery" has the thresholds).
     * @type {MinatoEvent<{quality: 'good'|'poor'|'bad', previous: string, packetLoss: (number|null), rttMs: (number|null), reason?: string}>} */
    this.onConnectionQualityChanged = new MinatoEvent();
    /** @internal */
    this._recovery = new MediaRecovery(this);
    /** @internal the server's ICE servers for this member, renewed before they expire (ice-servers.js) */
    this._iceServers = new MemberIceServers(this, opts.iceServers);
  }

  /** The ICE servers this member's connections use: the context's `iceServers` option, then the
   * server's (`join`'s `iceServers`: a TURN server with this member's own credential). */
  get iceServers() { return this._iceServers.forPc(); }

  /** Renews the server's TURN credential now (`getIceServers`; the SDK does it by itself at 80%
   * of its lifetime) and gives it to this member's connections. @returns {Promise<RTCIceServer[]>} */
  renewIceServers() { return this._iceServers.renew(); }

  /** The current rating of this member's media connections: 'good' | 'poor' | 'bad'. */
  get connectionQuality() { return this._recovery.quality; }
  /** ICE restarts made so far, per connection (diagnostics). @type {{send: number, recv: number}} */
  get iceRestarts() { return { send: this._recovery.legs.send.restarts, recv: this._recovery.legs.recv.restarts }; }

  /** The send RTCPeerConnection (null before the first publish). */
  get sendConnection() { return this._sendPc; }
  /** The receive RTCPeerConnection (null before the first subscribe). */
  get receiveConnection() { return this._recvPc; }

  _checkJoined(method) {
    if (this._left) throw new MinatoError('notJoined', 'this member has left the room', { method });
  }

  /** The params of `keepalive`: the member id and, when the server gave one, its reconnectSecret. */
  _keepaliveParams() {
    const params = { memberId: this.id };
    if (this.#reconnectSecret !== undefined) params.reconnectSecret = this.#reconnectSecret;
    return params;
  }

  _startKeepalive() {
    const periodMs = Math.max(1000, Math.min(this._keepaliveIntervalSec * 1000 / 3, 10000));
    this._keepaliveTimer = setInterval(async () => {
      if (this._left || !this.context._signaling.isOpen) return;
      const id = this.id;
      try {
        await this.context._request('keepalive', this._keepaliveParams(), { timeoutMs: periodMs * 2 });
      } catch (e) {
        // Gone without a memberLeft (that would have come first on this socket): in a cluster,
        // the node that hosted the room failed. The answer may concern an id this member had
        // before a rejoin.
        if (e instanceof MinatoError && e.name === 'memberNotFound' && !this._left && id === this.id) {
          if (this.room._canRejoin('memberLost')) this.room._rejoin('memberLost');
          else this.room._removeMemberLocally(this.id, 'keepaliveExpired');
        }
      }
    }, periodMs);
  }

  /** @param {string} metadata */
  async updateMetadata(metadata) {
    this._checkJoined('updateMemberMetadata');
    await this.context._request('updateMemberMetadata', { memberId: this.id, metadata });
  }

  /** Leaves the room; publications end and subscriptions stop. */
  async leave() {
    if (this._left) return;
    try {
      await this.context._request('leave', { memberId: this.id });
    } finally {
      if (!this._left) this.room._removeMemberLocally(this.id, 'left');
    }
  }

  /**
   * Closes the peer connections and stops the timers (no request is sent).
   * @param {string} reason
   */
  _teardown(reason) {
    if (this._left) return;
    this._left = true;
    this.state = 'left';
    clearInterval(this._keepaliveTimer);
    this._keepaliveTimer = null;
    this._recovery.stop();
    // A transport the server gave up on after a TURN server refused the credentials: that is why.
    this._iceServers.stop(reason);
    for (const pc of [this._sendPc, this._recvPc]) {
      if (pc) { try { pc.close(); } catch (e) { /* closed */ } }
    }
    for (const s of this._streams.values()) s._ended();
    this.context._localMembers.delete(this.id);
    this.onLeft.emit({ reason });
    if (!['left', 'roomClosed'].includes(reason)) {
      this.onFatalError.emit(new MinatoError(reason, `member ${this.name ?? this.id} was removed from the room (${reason})`));
    }
  }

  // ---- peer connections ---------------------------------------------------------------------

  /** @param {'send'|'recv'} direction */
  _newPc(direction) {
    const pc = new RTCPeerConnection({
      iceServers: this._iceServers.forPc(),
      bundlePolicy: 'max-bundle',
      rtcpMuxPolicy: 'require',
    });
    // A rejoin replaces both connections: what an old one still reports is ignored.
    const current = () => pc === (direction === 'send' ? this._sendPc : this._recvPc);
    pc.addEventListener('icecandidate', (ev) => { if (current()) this._sendCandidate(direction, ev.candidate); });
    if (direction === 'recv') {
      // The server opens one channel per data subscription, labelled with the subscription id.
      pc.addEventListener('datachannel', (ev) => {
        if (!current()) return;
        const waiter = this._dataWaiters.get(ev.channel.label);
        if (waiter) { this._dataWaiters.delete(ev.channel.label); waiter(ev.channel); } else this._dataChannels.set(ev.channel.label, ev.channel);
      });
    }
    this._recovery.watch(direction, pc);
    this._iceServers.watch(direction, pc);
    pc.addEventListener('connectionstatechange', () => {
      this.context._log(direction, 'connection', pc.connectionState);
      // An ICE failure of a connection that was up is restored by ICE restarts (recovery.js),
      // which report if they give up; a DTLS failure is not.
      if (pc.connectionState === 'failed' && !this._left && current() && !this._recovery.handlesFailure(direction)) {
        this.onFatalError.emit(new MinatoError('mediaError', `the ${direction} connection failed (ICE/DTLS)`));
      }
    });
    return pc;
  }

  /**
   * Trickles one local candidate (`null` or an empty string: end of candidates).
   * @param {'send'|'recv'} direction @param {RTCIceCandidate|null} c
   */
  _sendCandidate(direction, c) {
    if (this._left) return;
    this.context._log(direction, 'local candidate', c ? c.candidate : null);
    let candidate;
    if (!c || !c.candidate) {
      if (this._endOfCandidatesSent[direction]) return;
      this._endOfCandidatesSent[direction] = true;
      candidate = { candidate: '', sdpMid: c ? c.sdpMid : null, sdpMLineIndex: c ? c.sdpMLineIndex : null };
    } else {
      candidate = { candidate: c.candidate, sdpMid: c.sdpMid, sdpMLineIndex: c.sdpMLineIndex };
    }
    this.context._request('iceCandidate', { memberId: this.id, direction, candidate })
      .catch((e) => this.context._log('iceCandidate failed', e));
  }

  // ---- publishing ---------------------------------------------------------------------------

  /**
   * Publishes a track (or a LocalStream, or anything with a `.track`).
   * @param {MediaStreamTrack|{track: MediaStreamTrack}} source
   * @param {{metadata?: string, maxSubscribers?: number, isEnabled?: boolean,
   *   encodings?: EncodingJSON[], codec?: string}} [options]
   *   `codec` is a mimeType such as `video/VP8`, `video/H264`, `video/VP9`, `video/AV1`.
   * @returns {Promise<RoomPublication>}
   */
  async publish(source, options = {}) {
    this._checkJoined('publish');
    if (source instanceof LocalDataStream) return this._publish(source, options, null);
    const track = source instanceof MediaStreamTrack ? source : source && source.track;
    if (!(track instanceof MediaStreamTrack)) {
      throw new MinatoError('invalidParameter', 'publish needs a MediaStreamTrack (or a stream with .track)', { method: 'publish' });
    }
    const stream = source instanceof LocalStream ? source : new LocalStream(track);
    return this._publish(stream, options, null);
  }

  /**
   * @param {LocalStream} stream @param {object} options (as `publish`)
   * @param {RoomPublication|null} previous after a rejoin: the publication object this one
   *   continues, which takes the new publication's id
   * @returns {Promise<RoomPublication>}
   */
  _publish(stream, options, previous) {
    if (stream instanceof LocalDataStream) return this._publishData(stream, options, previous);
    const track = stream.track;
    return this._sendQueue.run(async () => {
      this._checkJoined('publish');
      if (!this._sendPc) this._sendPc = this._newPc('send');
      const pc = this._sendPc;
      /** @type {RTCRtpTransceiverInit} */
      const init = { direction: 'sendonly', streams: [new MediaStream([track])] };
      const encodings = options.encodings || [];
      if (encodings.length === 1) {
        const e = encodings[0];
        init.sendEncodings = [{ ...(e.maxBitrate ? { maxBitrate: e.maxBitrate } : {}),
          ...(e.scaleResolutionDownBy ? { scaleResolutionDownBy: e.scaleResolutionDownBy } : {}) }];
      } else if (encodings.length > 1) {
        init.sendEncodings = encodings.map((e) => ({ rid: e.id, ...(e.maxBitrate ? { maxBitrate: e.maxBitrate } : {}),
          ...(e.scaleResolutionDownBy ? { scaleResolutionDownBy: e.scaleResolutionDownBy } : {}) }));
      }
      const transceiver = pc.addTransceiver(track, init);
      let published = false;
      try {
        if (options.codec) {
          const caps = RTCRtpSender.getCapabilities(track.kind);
          const want = options.codec.toLowerCase();
          const prefs = (caps ? caps.codecs : []).filter((c) => c.mimeType.toLowerCase() === want);
          if (!prefs.length) throw new MinatoError('invalidParameter', `this browser cannot send ${options.codec}`, { method: 'publish' });
          const rest = caps.codecs.filter((c) => /\/(rtx|red|ulpfec|flexfec-03)$/i.test(c.mimeType));
          transceiver.setCodecPreferences([...prefs, ...rest]);
        }
        let offer;
        try {
          offer = await pc.createOffer();
          await pc.setLocalDescription(offer);
        } catch (e) { throw mediaError(e, 'creating the publish offer failed'); }
        const params = {
          memberId: this.id, contentType: track.kind, mid: transceiver.mid,
          offer: { type: 'offer', sdp: pc.localDescription.sdp },
        };
        for (const k of ['metadata', 'isEnabled', 'maxSubscribers', 'encodings']) {
          if (options[k] !== undefined) params[k] = options[k];
        }
        const r = await this.context._request('publish', params);
        published = true;
        try {
          await pc.setRemoteDescription(r.answer);
        } catch (e) { throw mediaError(e, 'applying the server answer failed'); }
        const publication = previous ? this.room._continuePublication(previous, r.publication)
          : this.room._upsertPublication(r.publication);
        publication._local = { transceiver, stream, member: this };
        this._senders.set(publication.id, { transceiver, stream, options });
        return publication;
      } catch (e) {
        if (!published) {
          // Undo the transceiver so the next offer does not carry an unpublished m-line.
          try { transceiver.sender.replaceTrack(null); transceiver.direction = 'inactive'; } catch (x) { /* closed */ }
          if (pc.signalingState === 'have-local-offer') {
            try { await pc.setLocalDescription({ type: 'rollback' }); } catch (x) { /* ignore */ }
          }
        }
        throw e;
      }
    });
  }

  /** Publishes a data stream (data.js `publishData`). @returns {Promise<RoomPublication>} */
  _publishData(stream, options, previous) { return publishData(this, stream, options, previous); }

  /**
   * Ends a publication of this member and renegotiates the send connection without it.
   * @param {string|RoomPublication} publicationId
   */
  async unpublish(publicationId) {
    this._checkJoined('unpublish');
    const id = typeof publicationId === 'string' ? publicationId : publicationId.id;
    await this.context._request('unpublish', { publicationId: id });
    const sender = this._senders.get(id);
    this._senders.delete(id);
    if (!sender) return;
    if (sender.channel) { sender.stream._detach(); return; }
    await this._sendQueue.run(async () => {
      if (this._left || !this._sendPc) return;
      try {
        await sender.transceiver.sender.replaceTrack(null);
        sender.transceiver.direction = 'inactive';
      } catch (e) { return; }
      await this._renegotiateSend();
    });
  }

  /** Sends a new offer of the send connection (`negotiate`) and applies the answer. */
  async _renegotiateSend() {
    const pc = this._sendPc;
    try {
      await pc.setLocalDescription(await pc.createOffer());
    } catch (e) { throw mediaError(e, 'creating the send offer failed'); }
    const r = await this.context._request('negotiate', { memberId: this.id, offer: { type: 'offer', sdp: pc.localDescription.sdp } });
    try {
      await pc.setRemoteDescription(r.answer);
    } catch (e) { throw mediaError(e, 'applying the server answer failed'); }
  }

  /**
   * Restarts ICE on one connection (recovery.js calls it): new ICE credentials and candidates,
   * media staying on the old path until the new one is selected. Send: an offer with
   * `iceRestart` through `negotiate`; receive: `restartIce {direction: 'recv'}`, whose result is
   * a server offer with new credentials, answered like any other (in arrival order).
   * @param {'send'|'recv'} direction @param {number} timeoutMs for the request
   */
  async _restartIce(direction, timeoutMs) {
    this._checkJoined('restartIce');
    if (direction === 'recv') {
      if (!this._recvPc) return;
      const r = await this.context._request('restartIce', { memberId: this.id, direction: 'recv' }, { timeoutMs });
      // The new credentials bring a new round of local candidates, ended by a new end-of-candidates.
      this._endOfCandidatesSent.recv = false;
      await this._onServerOffer(r.offer, 'restartIce');
      return;
    }
    await this._sendQueue.run(async () => {
      const pc = this._sendPc;
      if (this._left || !pc || pc.signalingState === 'closed') return;
      if (pc.signalingState === 'have-local-offer') {
        try { await pc.setLocalDescription({ type: 'rollback' }); } catch (e) { /* stable already */ }
      }
      this._endOfCandidatesSent.send = false;
      try {
        await pc.setLocalDescription(await pc.createOffer({ iceRestart: true }));
      } catch (e) { throw mediaError(e, 'creating the ICE restart offer failed'); }
      let r;
      try {
        r = await this.context._request('negotiate',
          { memberId: this.id, offer: { type: 'offer', sdp: pc.localDescription.sdp } }, { timeoutMs });
      } catch (e) {
        // Back to the last agreed description: the next offer (a publish, another restart)
        // starts from there.
        if (pc.signalingState === 'have-local-offer') {
          try { await pc.setLocalDescription({ type: 'rollback' }); } catch (x) { /* ignore */ }
        }
        throw e;
      }
      try {
        await pc.setRemoteDescription(r.answer);
      } catch (e) { throw mediaError(e, 'applying the server answer to the ICE restart failed'); }
    });
  }

  // ---- subscribing --------------------------------------------------------------------------

  /**
   * Subscribes to another member's publication.
   * @param {string|RoomPublication} publicationId
   * @param {{preferredEncodingId?: string, pinned?: boolean}} [options] `pinned: true` (audio):
   *   forwarded even when the server sends only the room's loudest (`rooms.audio.forwardLoudest`).
   * @returns {Promise<{subscription: RoomSubscription, stream: RemoteStream}>}
   */
  async subscribe(publicationId, options = {}) {
    this._checkJoined('subscribe');
    const id = typeof publicationId === 'string' ? publicationId : publicationId.id;
    // One subscribe per publication at a time: a second call while one is out (the application's
    // own and the SDK's after a rejoin, say) gets the same result instead of a second request.
    const inFlight = this._subscribing.get(id);
    if (inFlight) return inFlight;
    const result = this._subscribe(id, options);
    this._subscribing.set(id, result);
    try {
      const got = await result;
      this.onStreamSubscribed.emit(got);
      return got;
    } finally {
      if (this._subscribing.get(id) === result) this._subscribing.delete(id);
    }
  }

  /**
   * @param {string} id @param {{preferredEncodingId?: string}} options
   * @returns {Promise<{subscription: RoomSubscription, stream: RemoteStream}>}
   */
  async _subscribe(id, options) {
    const params = { memberId: this.id, publicationId: id };
    if (options.preferredEncodingId !== undefined) params.preferredEncodingId = options.preferredEncodingId;
    if (options.pinned) params.pinned = true;
    // What this browser decodes: the server refuses a publication in any other codec with
    // `codecNotSupported` instead of offering a stream nobody here can decode.
    const known = this.room.publications.find((p) => p.id === id);
    const caps = known && known.contentType === 'data' ? [] : receiveCodecCapabilities(known ? [known.contentType] : ['audio', 'video']);
    if (caps.length) params.codecCapabilities = caps;
    const r = await this.context._request('subscribe', params);
    if (r.subscription.contentType === 'data') return this._subscribeData(r);
    // Enqueued now, i.e. before any later message is handled, so offers apply in arrival order.
    const applied = this._onServerOffer(r.offer, 'subscribe');
    const subscription = this.room._upsertSubscription(r.subscription);
    await applied;
    const transceiver = this._recvPc.getTransceivers().find((t) => t.mid === r.mid);
    if (!transceiver) throw new MinatoError('mediaError', `no receiving transceiver for mid ${r.mid}`, { method: 'subscribe' });
    const stream = new RemoteStream(transceiver, subscription);
    this._streams.set(subscription.id, stream);
    subscription._localStream = stream;
    return { subscription, stream };
  }

  /** The rest of a data subscribe (data.js `subscribeData`). */
  _subscribeData(r) { return subscribeData(this, r); }

  /** A `dataChannelError` notification for this member. @param {object} params */
  _onDataChannelError(params) {
    this.onDataChannelError.emit({ reason: params.reason, detail: params.detail, publicationId: params.publicationId, label: params.label });
  }

  /**
   * Ends one of this member's subscriptions.
   * @param {string|RoomSubscription} subscriptionId
   */
  async unsubscribe(subscriptionId) {
    this._checkJoined('unsubscribe');
    const id = typeof subscriptionId === 'string' ? subscriptionId : subscriptionId.id;
    const r = await this.context._request('unsubscribe', { subscriptionId: id });
    const applied = r.offer ? this._onServerOffer(r.offer, 'unsubscribe') : Promise.resolve();
    const stream = this._streams.get(id);
    this._streams.delete(id);
    await applied;
    if (stream) stream._ended();
  }

  /**
   * Applies a server offer on the receive connection and answers it. Offers are applied one at
   * a time, in the order they arrived.
   * @param {{type: 'offer', sdp: string}} offer @param {string} why
   * @returns {Promise<void>}
   */
  _onServerOffer(offer, why) {
    const generation = this._generation;
    return this._recvQueue.run(async () => {
      // An offer for the connection a rejoin replaced is for a room that is gone.
      if (this._left || generation !== this._generation) return;
      if (!this._recvPc) this._recvPc = this._newPc('recv');
      const pc = this._recvPc;
      try {
        await pc.setRemoteDescription(offer);
        await pc.setLocalDescription(await pc.createAnswer());
      } catch (e) {
        const err = mediaError(e, `applying the server offer (${why}) failed`);
        if (why === 'notification') this.onFatalError.emit(err);
        throw err;
      }
      try {
        await this.context._request('answer', { memberId: this.id, answer: { type: 'answer', sdp: pc.localDescription.sdp } });
        this.answeredOffers += 1;
      } catch (e) {
        if (why === 'notification' && !this._left) this.onFatalError.emit(e);
        throw e;
      }
    }).catch((e) => {
      if (why !== 'notification') throw e;
      this.context._log('server offer failed', e);
    });
  }

  // ---- rejoining a lost room ----------------------------------------------------------------

  /**
   * What a rejoin restores for this member: how it joined (its name, and its metadata as it is
   * now), what it published (the same LocalStream objects and options, with each publication's
   * metadata and enabled state as they are now) and what it subscribed to, by publisher name,
   * contentType and metadata (the publications it finds again have new ids).
   */
  _rejoinPlan() {
    const publications = [];
    for (const [id, sender] of this._senders) {
      const publication = this.room._publications.get(id);
      if (!publication) continue;
      publications.push({ publication, stream: sender.stream,
        options: { ...sender.options, metadata: publication.metadata, isEnabled: publication.state !== 'disabled' } });
    }
    const subscriptions = [];
    for (const s of this.subscriptions) {
      if (!this._streams.has(s.id)) continue;
      const p = s.publication;
      subscriptions.push({
        publisherName: p && p.publisher ? p.publisher.name : null,
        contentType: s.contentType,
        metadata: p ? p.metadata : '',
        options: s.preferredEncodingId !== undefined ? { preferredEncodingId: s.preferredEncodingId } : {},
      });
    }
    return { member: this, join: { ...this._joinParams, metadata: this.metadata }, publications, subscriptions };
  }

  /**
   * Lets go of everything the member had in a room that is gone, without a request: connections
   * closed, keepalive stopped, received streams ended. The object stays joined (no onLeft) for
   * its rejoin.
   */
  _suspend() {
    this._generation += 1;
    clearInterval(this._keepaliveTimer);
    this._keepaliveTimer = null;
    this._recovery.stop();
    this._iceServers.stop();
    for (const pc of [this._sendPc, this._recvPc]) {
      if (pc) { try { pc.close(); } catch (e) { /* closed */ } }
    }
    this._sendPc = null;
    this._recvPc = null;
    this._sendQueue = new SerialQueue();
    this._recvQueue = new SerialQueue();
    this._endOfCandidatesSent = { send: false, recv: false };
    for (const s of this._streams.values()) s._ended();
    this._streams.clear();
    this._senders.clear();
    this._subscribing.clear();
    this._dataChannels.clear();
    this._dataWaiters.clear();
    this._lostReason = null;
    this.context._localMembers.delete(this.id);
  }

  /**
   * Becomes the member a rejoin's `join` made: its id, name and metadata, its reconnectSecret
   * and its ICE servers.
   * @param {MemberJSON} json @param {string|undefined} reconnectSecret @param {RTCIceServer[]|undefined} iceServers
   */
  _rejoined(json, reconnectSecret, iceServers) {
    this.id = json.id;
    this._update(json);
    this.#reconnectSecret = typeof reconnectSecret === 'string' ? reconnectSecret : undefined;
    this._iceServers.reset(iceServers);
    this.context._localMembers.set(this.id, this);
    this._recovery.resume();
    this._startKeepalive();
  }
}
