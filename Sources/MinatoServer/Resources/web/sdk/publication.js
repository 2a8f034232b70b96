// Minato browser SDK: RoomPublication and RoomSubscription (entry point: minato.js).
// Types: the JSDoc typedefs (RoomJSON, MemberJSON, …) are in minato.js.

import { MinatoError, MinatoEvent, receiveCodecCapabilities } from './core.js';

// ---------------------------------------------------------------------------------------------
// Publications and subscriptions

/** A published stream (SkyWay's RoomPublication). */
export class RoomPublication {
  /** @param {SFURoom} room @param {PublicationJSON} json */
  constructor(room, json) {
    this.room = room;
    /** @type {string} */
    this.id = json.id;
    /** @type {string} */
    this.publisherId = json.publisherId;
    /** @type {'audio'|'video'} */
    this.contentType = json.contentType;
    /** @type {string} */
    this.metadata = '';
    /** @type {'enabled'|'disabled'|'canceled'} */
    this.state = 'enabled';
    /** @type {{mimeType: string}[]} */
    this.codecCapabilities = [];
    /** @type {EncodingJSON[]} */
    this.encodings = [];
    /** @type {number|undefined} */
    this.maxSubscribers = undefined;
    /** Set on publications of a local member. @type {{transceiver: RTCRtpTransceiver, stream: LocalStream, member: LocalSFURoomMember}|null} */
    this._local = null;
    /** @type {MinatoEvent<{}>} */ this.onEnabled = new MinatoEvent();
    /** @type {MinatoEvent<{}>} */ this.onDisabled = new MinatoEvent();
    /** @type {MinatoEvent<{metadata: string}>} */ this.onMetadataUpdated = new MinatoEvent();
    /** @type {MinatoEvent<{}>} */ this.onUnpublished = new MinatoEvent();
    this._update(json);
  }

  /** @param {PublicationJSON} json */
  _update(json) {
    if (json.metadata !== undefined) this.metadata = json.metadata;
    if (json.state !== undefined && this.state !== 'canceled') this.state = json.state;
    if (json.codecCapabilities) this.codecCapabilities = json.codecCapabilities;
    if (json.encodings) this.encodings = json.encodings;
    if (json.maxSubscribers !== undefined) this.maxSubscribers = json.maxSubscribers;
  }

  _unpublished() {
    this.state = 'canceled';
    this.onUnpublished.emit({});
  }

  /** The member that published this. @type {RoomMember|undefined} */
  get publisher() { return this.room._member(this.publisherId); }
  /** The subscriptions of this publication. @type {RoomSubscription[]} */
  get subscriptions() { return this.room.subscriptions.filter((s) => s.publicationId === this.id); }
  /**
   * Whether this browser can decode the publication's codec (Firefox here has no H264, for
   * example); subscribing to one it cannot fails with `codecNotSupported`. True when unknown.
   * @type {boolean}
   */
  get decodable() {
    const caps = receiveCodecCapabilities([this.contentType]);
    if (!caps.length || !this.codecCapabilities.length) return true;
    return this.codecCapabilities.some((c) => caps.some((o) => o.mimeType.toLowerCase() === c.mimeType.toLowerCase()));
  }
  /** The local stream, for a publication of this page. @type {LocalStream|null} */
  get stream() { return this._local ? this._local.stream : null; }

  /** Resumes forwarding (publisher only). */
  async enable() { await this.room.context._request('enablePublication', { publicationId: this.id }); }
  /** Pauses forwarding to every subscriber (publisher only). */
  async disable() { await this.room.context._request('disablePublication', { publicationId: this.id }); }
  /** @param {string} metadata */
  async updateMetadata(metadata) {
    await this.room.context._request('updatePublicationMetadata', { publicationId: this.id, metadata });
  }
  /** Unpublishes (publisher only). */
  async cancel() {
    if (!this._local) throw new MinatoError('insufficientPermissions', 'only the publisher can unpublish');
    await this._local.member.unpublish(this.id);
  }

  /**
   * The RTCStatsReport of this publication on this page: the sender's stats for a local
   * publication, or the receiver's stats of this page's subscription to it.
   * @returns {Promise<RTCStatsReport>}
   */
  async getStats() {
    if (this._local) return this._local.transceiver.sender.getStats();
    const sub = this.subscriptions.find((s) => s._localStream);
    if (sub) return sub.getStats();
    throw new MinatoError('invalidParameter', 'this page neither publishes nor subscribes to this publication');
  }
}

/** A subscription (SkyWay's RoomSubscription). */
export class RoomSubscription {
  /** @param {SFURoom} room @param {SubscriptionJSON} json */
  constructor(room, json) {
    this.room = room;
    /** @type {string} */
    this.id = json.id;
    /** @type {string} */
    this.publicationId = json.publicationId;
    /** @type {string} */
    this.subscriberId = json.subscriberId;
    /** @type {'audio'|'video'} */
    this.contentType = json.contentType;
    /** @type {string|undefined} */
    this.preferredEncodingId = json.preferredEncodingId;
    /** @type {'enabled'|'canceled'} */
    this.state = 'enabled';
    /** @type {RemoteStream|null} */
    this._localStream = null;
    /** Fires when the subscription ends (unsubscribe, unpublish, member left), with the server's
     * reason when it gave one (`dataBufferOverflow`: a data subscriber that did not keep up).
     * @type {MinatoEvent<{reason?: string}>} */
    this.onCanceled = new MinatoEvent();
    this._publication = room._publications.get(json.publicationId) || null;
  }

  /** @param {SubscriptionJSON} json */
  _update(json) {
    if (json.preferredEncodingId !== undefined) this.preferredEncodingId = json.preferredEncodingId;
  }

  _canceled(reason) {
    this.state = 'canceled';
    if (this._localStream) this._localStream._ended();
    this.onCanceled.emit(reason ? { reason } : {});
  }

  /** @type {RoomPublication|null} */
  get publication() { return this.room._publications.get(this.publicationId) || this._publication; }
  /** @type {RoomMember|undefined} */
  get subscriber() { return this.room._member(this.subscriberId); }
  /** The received stream, for a subscription of this page. @type {RemoteStream|null} */
  get stream() { return this._localStream; }

  /** @param {string} preferredEncodingId */
  async changePreferredEncoding(preferredEncodingId) {
    await this.room.context._request('changePreferredEncoding', { subscriptionId: this.id, preferredEncodingId });
    this.preferredEncodingId = preferredEncodingId;
  }

  /** The receiver's RTCStatsReport (subscriptions of this page only). @returns {Promise<RTCStatsReport>} */
  async getStats() {
    if (!this._localStream) throw new MinatoError('invalidParameter', 'not a subscription of this page');
    return this._localStream.getStats();
  }
}
