// Minato browser SDK: SFURoom, a room and the state its events describe (entry point: minato.js).
// Types: the JSDoc typedefs (RoomJSON, MemberJSON, …) are in minato.js.

import { MinatoError, MinatoEvent, NAME_RE, isRetryable, sleep } from './core.js';
import { LocalSFURoomMember, RemoteRoomMember } from './member.js';
import { RoomPublication, RoomSubscription } from './publication.js';

// ---------------------------------------------------------------------------------------------
// Room

/**
 * An SFU room (SkyWay's SFURoom). Get one with `SFURoom.create`, `find` or `findOrCreate`;
 * its state (members, publications, subscriptions, metadata) follows the server's room
 * events from then on, before and after joining.
 */
export class SFURoom {
  /**
   * @param {MinatoContext} context
   * @param {{name?: string, metadata?: string, password?: string}} [init]
   * @returns {Promise<SFURoom>}
   */
  static async create(context, init = {}) {
    const params = {};
    if (init.name !== undefined) params.name = init.name;
    if (init.metadata !== undefined) params.metadata = init.metadata;
    if (init.password !== undefined && init.password !== '') params.password = init.password;
    const r = await context._request('createRoom', params);
    const room = await context._adoptRoom(r.room);
    if (params.password) room._password = params.password;
    return room;
  }

  /**
   * @param {MinatoContext} context
   * @param {{id?: string, name?: string, password?: string}} query
   * @returns {Promise<SFURoom>}
   */
  static async find(context, query = {}) {
    const params = query.id ? { id: query.id } : { name: query.name };
    const r = await context._request('findRoom', params);
    const room = await context._adoptRoom(r.room);
    if (query.password) room._password = query.password;
    return room;
  }

  /**
   * @param {MinatoContext} context
   * @param {{name: string, metadata?: string, password?: string}} init
   * @returns {Promise<SFURoom>}
   */
  static async findOrCreate(context, init) {
    const params = { name: init.name };
    if (init.metadata !== undefined) params.metadata = init.metadata;
    if (init.password !== undefined && init.password !== '') params.password = init.password;
    const r = await context._request('findOrCreateRoom', params);
    const room = await context._adoptRoom(r.room);
    if (params.password) room._password = params.password;
    return room;
  }

  /** @param {MinatoContext} context @param {RoomJSON} json @private */
  constructor(context, json) {
    this.context = context;
    /** @type {'sfu'} */
    this.type = 'sfu';
    /** @type {string} */
    this.id = json.id;
    /** @type {string|null} */
    this.name = json.name ?? null;
    /** @type {string} */
    this.metadata = json.metadata ?? '';
    /** @type {boolean} */
    this.hasPassword = !!json.hasPassword;
    /** The last room event version applied. @type {number} */
    this.version = json.version ?? 0;
    /** @type {'opened'|'closed'} */
    this.state = 'opened';
    /** @type {Map<string, RoomMember>} */
    this._members = new Map();
    /** @type {Map<string, RoomPublication>} */
    this._publications = new Map();
    /** @type {Map<string, RoomSubscription>} */
    this._subscriptions = new Map();
    /** Member objects that left, so late references still resolve. @type {Map<string, RoomMember>} */
    this._formerMembers = new Map();
    this._password = undefined;
    /** @type {RoomEventJSON[]|null} live events held back while a replay is running */
    this._held = null;
    /** True from the moment the room was found lost until its members have joined it again. */
    this._rejoining = false;

    /** @type {MinatoEvent<{member: RoomMember}>} */ this.onMemberJoined = new MinatoEvent();
    /** @type {MinatoEvent<{member: RoomMember, reason: string}>} */ this.onMemberLeft = new MinatoEvent();
    /** @type {MinatoEvent<{}>} */ this.onMemberListChanged = new MinatoEvent();
    /** @type {MinatoEvent<{member: RoomMember, metadata: string}>} */ this.onMemberMetadataUpdated = new MinatoEvent();
    /** @type {MinatoEvent<{publication: RoomPublication}>} */ this.onStreamPublished = new MinatoEvent();
    /** @type {MinatoEvent<{publication: RoomPublication}>} */ this.onStreamUnpublished = new MinatoEvent();
    /** @type {MinatoEvent<{}>} */ this.onPublicationListChanged = new MinatoEvent();
    /** @type {MinatoEvent<{publication: RoomPublication}>} */ this.onPublicationEnabled = new MinatoEvent();
    /** @type {MinatoEvent<{publication: RoomPublication}>} */ this.onPublicationDisabled = new MinatoEvent();
    /** @type {MinatoEvent<{publication: RoomPublication, metadata: string}>} */ this.onPublicationMetadataUpdated = new MinatoEvent();
    /** @type {MinatoEvent<{subscription: RoomSubscription}>} */ this.onPublicationSubscribed = new MinatoEvent();
    /** @type {MinatoEvent<{subscription: RoomSubscription}>} */ this.onPublicationUnsubscribed = new MinatoEvent();
    /** @type {MinatoEvent<{}>} */ this.onSubscriptionListChanged = new MinatoEvent();
    /** @type {MinatoEvent<{metadata: string}>} */ this.onMetadataUpdated = new MinatoEvent();
    /** @type {MinatoEvent<{}>} */ this.onClosed = new MinatoEvent();
    /** The room was lost while members of this context were in it (`nodeFailed`: its node failed;
     * `memberLost`: after a reconnect the server no longer knew the member and the room) and is
     * being joined again. @type {MinatoEvent<{reason: 'nodeFailed'|'memberLost'}>} */
    this.onReconnecting = new MinatoEvent();
    /** The rejoin is complete: the members joined again, re-published, and re-subscribed to what
     * came back; `missing` lists subscriptions whose publisher did not publish again in time.
     * @type {MinatoEvent<{reason: 'nodeFailed'|'memberLost', missing: {publisherName: (string|null), contentType: string}[]}>} */
    this.onReconnected = new MinatoEvent();
    /** Who is speaking, loudest first (the first is the dominant speaker); sent when the list or
     * its order changes, at most every `rooms.speakerEventIntervalMs` (300 ms). `level` is the
     * smoothed level of the publication (linear amplitude, 0...1 of full scale). Also sets each
     * member's `audioLevel` and `isSpeaking`.
     * @type {MinatoEvent<{speakers: {member: RoomMember, publication: (RoomPublication|undefined), level: number}[]}>} */
    this.onActiveSpeakersChanged = new MinatoEvent();
    /** The last speaker list (as in `onActiveSpeakersChanged`). */
    this.activeSpeakers = [];
    /** A recording of a member started / stopped (the admin API; `reason` stopped,
     * publicationEnded, maxDuration, diskFull or recorderFailed).
     * @type {MinatoEvent<{recording: RecordingJSON, member: (RoomMember|undefined)}>} */
    this.onRecordingStarted = new MinatoEvent();
    /** @type {MinatoEvent<{recording: RecordingJSON, member: (RoomMember|undefined), reason: string}>} */
    this.onRecordingStopped = new MinatoEvent();
    /** Recordings running in the room, by id (from the snapshot and the events).
     * @type {Map<string, RecordingJSON>} */
    this.recordings = new Map();
    /** Every room event as received (raw protocol JSON), after it was applied. @type {MinatoEvent<RoomEventJSON>} */
    this.onEvent = new MinatoEvent();

    this._loadSnapshot(json);
  }

  /** @type {RoomMember[]} */
  get members() { return [...this._members.values()]; }
  /** @type {RoomPublication[]} */
  get publications() { return [...this._publications.values()]; }
  /** @type {RoomSubscription[]} */
  get subscriptions() { return [...this._subscriptions.values()]; }
  /** The local members joined to this room through this context. @type {LocalSFURoomMember[]} */
  get localMembers() { return this.members.filter((m) => m instanceof LocalSFURoomMember && !m._left); }

  /**
   * Joins the room.
   * @param {{name?: string, metadata?: string, password?: string, keepaliveIntervalSec?: number,
   *   keepaliveIntervalGapSec?: number, replace?: boolean, type?: 'person'|'bot'}} [init]
   *   `password` defaults to the one given to create/find/findOrCreate; `replace:true` removes a
   *   live member that has the same name (reason `replaced`) instead of failing.
   * @returns {Promise<LocalSFURoomMember>}
   */
  async join(init = {}) {
    if (this.state === 'closed') throw new MinatoError('roomClosed', 'the room is closed', { method: 'join' });
    if (init.name !== undefined && !NAME_RE.test(init.name)) {
      throw new MinatoError('invalidParameter', `member name must match ${NAME_RE}`, { method: 'join' });
    }
    // What a rejoin sends again (with the new room's id and replace:true).
    const joinParams = {};
    for (const k of ['name', 'metadata', 'keepaliveIntervalSec', 'keepaliveIntervalGapSec', 'type']) {
      if (init[k] !== undefined) joinParams[k] = init[k];
    }
    const params = { roomId: this.id, ...joinParams };
    if (init.replace !== undefined) params.replace = init.replace;
    const password = init.password !== undefined ? init.password : this._password;
    if (password !== undefined && password !== '') params.password = password;
    const r = await this.context._request('join', params);
    const member = new LocalSFURoomMember(this, r.member, {
      keepaliveIntervalSec: init.keepaliveIntervalSec ?? 30,
      reconnectSecret: r.reconnectSecret,
      iceServers: r.iceServers,
      joinParams,
      password: params.password,
    });
    this._members.set(member.id, member);
    this.context._localMembers.set(member.id, member);
    // Catch up with a snapshot when events were not flowing (the result's version is newer).
    if (r.room && typeof r.room.version === 'number' && r.room.version > this.version && this._held === null) {
      this._pendingJoinSnapshot = r.room;
      setTimeout(() => this._checkJoinSnapshot(), 3000);
    }
    member._startKeepalive();
    return member;
  }

  /** If the events up to the join result's version never came, reconcile with the server. */
  async _checkJoinSnapshot() {
    const snap = this._pendingJoinSnapshot;
    this._pendingJoinSnapshot = null;
    if (snap && this.version < snap.version && this.state === 'opened') {
      try { await this._reconcile(); } catch (e) { this.context._log('reconcile failed', e); }
    }
  }

  /** @param {RoomMember} member */
  async leave(member) { await member.leave(); }

  /** Closes the room on the server: every member is removed with reason `roomClosed`. */
  async close() {
    await this.context._request('closeRoom', { roomId: this.id });
  }

  /** @param {string} metadata */
  async updateMetadata(metadata) {
    await this.context._request('updateRoomMetadata', { roomId: this.id, metadata });
  }

  /** Stops following this room locally (no request is sent). */
  dispose() {
    this._disposeLocal();
    this.context._rooms.delete(this.id);
  }

  _disposeLocal() {
    for (const ev of Object.values(this)) if (ev instanceof MinatoEvent) ev.removeAllListeners();
  }

  // ---- state --------------------------------------------------------------------------------

  /** @param {RoomJSON} json */
  _loadSnapshot(json) {
    this.name = json.name ?? this.name;
    this.metadata = json.metadata ?? '';
    this.hasPassword = !!json.hasPassword;
    for (const m of json.members || []) this._upsertMember(m);
    for (const p of json.publications || []) this._upsertPublication(p);
    for (const s of json.subscriptions || []) this._upsertSubscription(s);
    this.recordings = new Map((json.recordings || []).map((r) => [r.id, r]));
  }

  /** Whether a recording of `memberId` is running. @param {string} memberId */
  isRecording(memberId) {
    for (const r of this.recordings.values()) if (r.memberId === memberId) return true;
    return false;
  }

  /** @param {string} id @returns {RoomMember|undefined} */
  _member(id) { return this._members.get(id) || this._formerMembers.get(id); }

  /** @param {MemberJSON} json @returns {RoomMember} */
  _upsertMember(json) {
    let m = this._members.get(json.id);
    if (m) { m._update(json); return m; }
    m = this.context._localMembers.get(json.id) || new RemoteRoomMember(this, json);
    m._update(json);
    this._members.set(m.id, m);
    return m;
  }

  /** @param {PublicationJSON} json @returns {RoomPublication} */
  _upsertPublication(json) {
    let p = this._publications.get(json.id);
    if (p) { p._update(json); return p; }
    p = new RoomPublication(this, json);
    this._publications.set(p.id, p);
    return p;
  }

  /** @param {SubscriptionJSON} json @returns {RoomSubscription} */
  _upsertSubscription(json) {
    let s = this._subscriptions.get(json.id);
    if (s) { s._update(json); return s; }
    s = new RoomSubscription(this, json);
    this._subscriptions.set(s.id, s);
    return s;
  }

  async _startEvents() {
    this._held = [];
    try {
      await this._fetchEvents((params) => this.context._request('subscribeRoomEvents', params));
    } finally {
      this._releaseHeld();
    }
  }

  /**
   * Applies the room's events after `this.version` with `subscribeRoomEvents`, one page after
   * the other: the server returns at most a page (100 by default) and `nextOffset`, the version
   * to ask from next, while more remain (null on the last page). The first call also starts the
   * live events on this socket; they are held meanwhile (`_held`), and `_apply` skips versions
   * already applied.
   * @param {(params: object) => Promise<any>} request
   * @returns {Promise<number>} the number of events applied from the pages
   */
  async _fetchEvents(request) {
    let applied = 0;
    let offset = this.version;
    for (;;) {
      const r = await request({ roomId: this.id, offset });
      const events = r.events || [];
      applied += events.filter((e) => e.version > offset).length;
      this._applyReplay(events, offset);
      const next = r.nextOffset;
      // null/absent: the last page. A nextOffset that does not move forward would loop forever.
      if (typeof next !== 'number' || next <= offset || this.state === 'closed') break;
      offset = next;
    }
    return applied;
  }

  /** After a reconnect: the events after our version, then the live ones held meanwhile. */
  async _replay() {
    // A rejoin that is under way asks for the events of the room it finds itself.
    if (this.state === 'closed' || this._rejoining) return;
    this._held = [];
    try {
      const replayed = await this._fetchEvents((params) => this.context._resyncRequest('subscribeRoomEvents', params));
      this.context.replayedEvents += replayed;
    } catch (e) {
      if (e instanceof MinatoError && e.name === 'roomNotFound') {
        this._held = null;
        // Not started here (the resync is still running): see MinatoContext._resync.
        if (this._canRejoin('memberLost')) setTimeout(() => this._rejoin('memberLost'), 0);
        else this._closedLocally();
        return;
      }
      throw e;
    } finally {
      this._releaseHeld();
    }
  }

  _applyReplay(events, offset) {
    const sorted = [...events].sort((a, b) => a.version - b.version);
    if (sorted.length && sorted[0].version > offset + 1) {
      // The server's event log no longer reaches back to our version: reconcile from a snapshot.
      this._reconcileSoon = true;
    }
    for (const ev of sorted) this._apply(ev);
  }

  _releaseHeld() {
    const held = this._held || [];
    this._held = null;
    held.sort((a, b) => a.version - b.version);
    for (const ev of held) this._apply(ev);
    if (this._reconcileSoon) {
      this._reconcileSoon = false;
      this._reconcile().catch((e) => this.context._log('reconcile failed', e));
    }
  }

  /** @param {RoomEventJSON} ev */
  _onLiveEvent(ev) {
    // The speaker list describes the present: it has no version, is not replayed and never waits.
    if (ev.type === 'activeSpeakersChanged') { this._speakersChanged(ev); return; }
    if (this._held) { this._held.push(ev); return; }
    this._apply(ev);
  }

  /** Brings the state in line with `getRoom`, firing the events the difference implies. */
  async _reconcile() {
    let json;
    try {
      json = (await this.context._request('getRoom', { roomId: this.id })).room;
    } catch (e) {
      if (e instanceof MinatoError && e.name === 'roomNotFound') { this._closedLocally(); return; }
      throw e;
    }
    if (json.version <= this.version) return;
    this.version = json.version;
    const subIds = new Set((json.subscriptions || []).map((s) => s.id));
    for (const s of this.subscriptions) if (!subIds.has(s.id)) this._removeSubscription(s.id);
    const pubIds = new Set((json.publications || []).map((p) => p.id));
    for (const p of this.publications) if (!pubIds.has(p.id)) this._removePublication(p.id);
    const memIds = new Set((json.members || []).map((m) => m.id));
    for (const m of this.members) if (!memIds.has(m.id)) this._removeMemberLocally(m.id, 'unknown', true);
    for (const mj of json.members || []) {
      const had = this._members.has(mj.id);
      const m = this._upsertMember(mj);
      if (!had) { this.onMemberJoined.emit({ member: m }); this.onMemberListChanged.emit({}); }
    }
    for (const pj of json.publications || []) {
      const had = this._publications.has(pj.id);
      const p = this._upsertPublication(pj);
      if (!had) { this.onStreamPublished.emit({ publication: p }); this.onPublicationListChanged.emit({}); }
    }
    for (const sj of json.subscriptions || []) {
      const had = this._subscriptions.has(sj.id);
      const s = this._upsertSubscription(sj);
      if (!had) { this.onPublicationSubscribed.emit({ subscription: s }); this.onSubscriptionListChanged.emit({}); }
    }
    this.metadata = json.metadata ?? this.metadata;
  }

  /** @param {RoomEventJSON} ev */
  _apply(ev) {
    if (typeof ev.version === 'number') {
      if (ev.version <= this.version) return;
      this.version = ev.version;
    }
    const d = ev.data || {};
    switch (ev.type) {
      case 'memberJoined': {
        const m = this._upsertMember(d.member);
        this.onMemberJoined.emit({ member: m });
        this.onMemberListChanged.emit({});
        break;
      }
      case 'memberLeft':
        this._removeMemberLocally(d.member.id, ev.reason || 'left', false, d.member);
        break;
      case 'memberMetadataUpdated': {
        const m = this._upsertMember(d.member);
        this.onMemberMetadataUpdated.emit({ member: m, metadata: m.metadata });
        break;
      }
      case 'streamPublished': {
        const p = this._upsertPublication(d.publication);
        this.onStreamPublished.emit({ publication: p });
        this.onPublicationListChanged.emit({});
        break;
      }
      case 'streamUnpublished':
        this._removePublication(d.publication.id, d.publication);
        break;
      case 'publicationMetadataUpdated': {
        const p = this._upsertPublication(d.publication);
        this.onPublicationMetadataUpdated.emit({ publication: p, metadata: p.metadata });
        p.onMetadataUpdated.emit({ metadata: p.metadata });
        break;
      }
      case 'publicationEnabled': {
        const p = this._upsertPublication(d.publication);
        this.onPublicationEnabled.emit({ publication: p });
        p.onEnabled.emit({});
        break;
      }
      case 'publicationDisabled': {
        const p = this._upsertPublication(d.publication);
        this.onPublicationDisabled.emit({ publication: p });
        p.onDisabled.emit({});
        break;
      }
      case 'publicationSubscribed': {
        const s = this._upsertSubscription(d.subscription);
        this.onPublicationSubscribed.emit({ subscription: s });
        this.onSubscriptionListChanged.emit({});
        break;
      }
      case 'publicationUnsubscribed':
        this._removeSubscription(d.subscription.id, ev.reason);
        break;
      case 'recordingStarted':
        this.recordings.set(d.recording.id, d.recording);
        this.onRecordingStarted.emit({ recording: d.recording, member: this._members.get(d.recording.memberId) });
        break;
      case 'recordingStopped':
        this.recordings.delete(d.recording.id);
        this.onRecordingStopped.emit({ recording: d.recording, member: this._members.get(d.recording.memberId),
          reason: ev.reason || 'stopped' });
        break;
      case 'metadataUpdated':
        this.metadata = (d.room && d.room.metadata) ?? this.metadata;
        this.onMetadataUpdated.emit({ metadata: this.metadata });
        break;
      case 'closed':
        if (ev.reason === 'nodeFailed' && this._canRejoin('nodeFailed')) this._rejoin('nodeFailed');
        else this._closedLocally(ev.reason === 'nodeFailed' ? 'nodeFailed' : 'roomClosed');
        break;
      default:
        this.context._log('unknown room event', ev);
    }
    this.onEvent.emit(ev);
  }

  /** `activeSpeakersChanged {speakers:[{memberId, publicationId, level}]}`. @param {RoomEventJSON} ev */
  _speakersChanged(ev) {
    const list = ((ev.data && ev.data.speakers) || [])
      .map((s) => ({ member: this._members.get(s.memberId), publication: this._publications.get(s.publicationId),
        level: typeof s.level === 'number' ? s.level : 0 }))
      .filter((s) => s.member);
    const levels = new Map();
    for (const s of list) levels.set(s.member.id, Math.max(levels.get(s.member.id) ?? 0, s.level));
    for (const m of this._members.values()) {
      m.audioLevel = levels.get(m.id) ?? 0;
      m.isSpeaking = levels.has(m.id);
    }
    this.activeSpeakers = list;
    this.onActiveSpeakersChanged.emit({ speakers: list });
    this.onEvent.emit(ev);
  }

  _removeSubscription(id, reason) {
    const s = this._subscriptions.get(id);
    if (!s) return;
    this._subscriptions.delete(id);
    s._canceled(reason);
    this.onPublicationUnsubscribed.emit({ subscription: s });
    this.onSubscriptionListChanged.emit({});
  }

  _removePublication(id, json) {
    const p = this._publications.get(id);
    if (!p) return;
    if (json) p._update(json);
    for (const s of this.subscriptions) if (s.publicationId === id) this._removeSubscription(s.id);
    this._publications.delete(id);
    p._unpublished();
    this.onStreamUnpublished.emit({ publication: p });
    this.onPublicationListChanged.emit({});
  }

  /**
   * @param {string} id @param {string} reason @param {boolean} [quietState]
   * @param {MemberJSON} [json]
   */
  _removeMemberLocally(id, reason, quietState = false, json = undefined) {
    const m = this._members.get(id);
    if (!m) {
      const local = this.context._localMembers.get(id);
      if (local && !local._left) local._teardown(reason);
      return;
    }
    if (json) m._update(json);
    for (const p of this.publications) if (p.publisherId === id) this._removePublication(p.id);
    for (const s of this.subscriptions) if (s.subscriberId === id) this._removeSubscription(s.id);
    this._members.delete(id);
    this._formerMembers.set(id, m);
    if (m instanceof LocalSFURoomMember && !m._left) m._teardown(reason);
    this.onMemberLeft.emit({ member: m, reason });
    this.onMemberListChanged.emit({});
  }

  /**
   * The room closed: its members leave with `reason` (`roomClosed`, or `nodeFailed` for a room
   * lost with its node that could not be rejoined: local members then also get onFatalError).
   * @param {string} [reason]
   */
  _closedLocally(reason = 'roomClosed') {
    if (this.state === 'closed') return;
    for (const m of this.members) this._removeMemberLocally(m.id, reason);
    this.state = 'closed';
    this.context._rooms.delete(this.id);
    this.onClosed.emit({});
  }

  // ---- rejoining a lost room ----------------------------------------------------------------

  /**
   * Whether the room can be joined again after it was lost: rejoining is on, the room has a name
   * to find it by, and members of this context are in it (a room that is only followed is not
   * made again). `memberLost` (the server no longer knew the member after a reconnect) counts
   * only in a cluster, whose ids start with the id of the node that made them and a dot: on a
   * single server it means the room was closed while the socket was away, as before.
   * @param {'nodeFailed'|'memberLost'} reason
   */
  _canRejoin(reason) {
    const ctx = this.context;
    if (!ctx.options.rejoin || ctx.disposed || this.state === 'closed' || this.name === null) return false;
    if (reason === 'memberLost' && !/^[^.]+\./.test(this.id)) return false;
    return this._rejoining || [...ctx._localMembers.values()].some((m) => m.room === this && !m._left);
  }

  /**
   * The room is gone while members of this context were in it: find or create it again by name
   * (`findOrCreateRoom`), join each member again under its name and metadata (`replace`, so that
   * a join whose answer was lost cannot block the next attempt), re-publish what it published,
   * then re-subscribe to the same publishers' streams as they come back. `serviceUnavailable`
   * and the like are retried with backoff for `rejoinTimeoutMs`; after that, or on any other
   * error, the room closes as any room does (members get onLeft and onFatalError). The SFURoom,
   * LocalSFURoomMember and local RoomPublication objects stay the same objects and take the new
   * ids; subscriptions and received streams are new (LocalSFURoomMember.onStreamSubscribed).
   * @param {'nodeFailed'|'memberLost'} reason
   */
  async _rejoin(reason) {
    if (this._rejoining || this.state === 'closed') return;
    this._rejoining = true;
    const ctx = this.context;
    const members = [...ctx._localMembers.values()].filter((m) => m.room === this && !m._left);
    const plans = members.map((m) => m._rejoinPlan());
    ctx._rooms.delete(this.id);
    for (const m of members) m._suspend();
    this._dropState(members, reason);
    this.onReconnecting.emit({ reason });
    const started = Date.now();
    let delay = ctx.options.reconnectDelayMs;
    for (;;) {
      try {
        await this._joinAgain(plans);
        break;
      } catch (e) {
        if (ctx.disposed) return;
        // The room found may be on a node that is failing too, or the socket dropped: again.
        const again = isRetryable(e) || (e instanceof MinatoError
          && ['roomNotFound', 'memberNotFound', 'publicationNotFound', 'roomClosed', 'notJoined'].includes(e.name));
        ctx._log('rejoin attempt failed', e);
        ctx._rooms.delete(this.id);
        this._forgetState();
        for (const m of members) m._suspend();
        if (!again || Date.now() - started + delay > ctx.options.rejoinTimeoutMs) {
          this._rejoining = false;
          for (const m of members) m._teardown(reason);
          this._closedLocally(reason);
          return;
        }
        await sleep(delay);
        delay = Math.min(delay * 2, ctx.options.maxReconnectDelayMs);
      }
    }
    this._rejoining = false;
    const missing = await this._resubscribe(plans);
    this.onReconnected.emit({ reason, missing });
  }

  /**
   * Empties the room's state for a rejoin: subscriptions end (their streams end and leave their
   * media elements), the other members' publications and the other members leave, with their
   * events (`onMemberLeft` with the rejoin's reason); the rejoining members and their own
   * publications are taken out quietly (the same objects come back with new ids).
   * @param {LocalSFURoomMember[]} members
   * @param {string} reason
   */
  _dropState(members, reason) {
    for (const s of this.subscriptions) this._removeSubscription(s.id);
    for (const p of this.publications) {
      if (p._local && members.includes(p._local.member)) this._publications.delete(p.id);
      else this._removePublication(p.id);
    }
    for (const m of this.members) {
      if (members.includes(/** @type {any} */ (m))) this._members.delete(m.id);
      else this._removeMemberLocally(m.id, reason);
    }
  }

  /** Drops, without events, what a failed rejoin attempt loaded (the application never saw it). */
  _forgetState() {
    this._members.clear();
    this._publications.clear();
    this._subscriptions.clear();
    this._held = null;
  }

  /**
   * One rejoin attempt: find or create the room, follow its events (held until the members are
   * back, so that their own publications are already the old objects when their
   * streamPublished is applied), join and re-publish, then tell the application what the room
   * held when it was found (onMemberJoined, onStreamPublished, onPublicationSubscribed) and
   * apply the events since.
   * @param {{member: LocalSFURoomMember, join: object, publications: any[]}[]} plans
   */
  async _joinAgain(plans) {
    const ctx = this.context;
    const params = { name: this.name };
    if (this.metadata) params.metadata = this.metadata;
    if (this._password !== undefined && this._password !== '') params.password = this._password;
    const found = (await ctx._request('findOrCreateRoom', params)).room;
    this.id = found.id;
    this.version = found.version ?? 0;
    ctx._rooms.set(this.id, this);
    this._held = [];
    let offset = this.version;
    for (;;) {
      const page = await ctx._request('subscribeRoomEvents', { roomId: this.id, offset });
      if (this._held) this._held.push(...(page.events || []));
      const next = page.nextOffset;
      if (typeof next !== 'number' || next <= offset) break;
      offset = next;
    }
    for (const plan of plans) {
      const m = plan.member;
      const join = { roomId: this.id, ...plan.join, replace: true };
      if (m._password !== undefined) join.password = m._password;
      const r = await ctx._request('join', join);
      m._rejoined(r.member, r.reconnectSecret, r.iceServers);
      this._members.set(m.id, m);
      for (const { publication, stream, options } of plan.publications) {
        await m._publish(stream, options, publication);
      }
    }
    this.metadata = found.metadata ?? '';
    this.hasPassword = !!found.hasPassword;
    for (const mj of found.members || []) {
      if (this._members.has(mj.id)) continue;
      const m = this._upsertMember(mj);
      this.onMemberJoined.emit({ member: m });
      this.onMemberListChanged.emit({});
    }
    for (const pj of found.publications || []) {
      if (this._publications.has(pj.id)) continue;
      const p = this._upsertPublication(pj);
      this.onStreamPublished.emit({ publication: p });
      this.onPublicationListChanged.emit({});
    }
    for (const sj of found.subscriptions || []) {
      if (this._subscriptions.has(sj.id)) continue;
      const s = this._upsertSubscription(sj);
      this.onPublicationSubscribed.emit({ subscription: s });
      this.onSubscriptionListChanged.emit({});
    }
    this._releaseHeld();
  }

  /**
   * After a rejoin, `previous` (a publication of a member of this page, before) becomes the
   * publication `json` that re-published it: same object, new id.
   * @param {RoomPublication} previous @param {PublicationJSON} json @returns {RoomPublication}
   */
  _continuePublication(previous, json) {
    previous.id = json.id;
    previous.publisherId = json.publisherId;
    previous._update(json);
    this._publications.set(previous.id, previous);
    return previous;
  }

  /**
   * Subscribes each rejoined member again to what it subscribed to before: for each, the
   * publication of the publisher of the same name with the same contentType (and metadata, when
   * it had some), in the room now or once it is published, within `resubscribeWaitMs`.
   * @param {{member: LocalSFURoomMember, subscriptions: any[]}[]} plans
   * @returns {Promise<{publisherName: (string|null), contentType: string}[]>} what did not come back
   */
  async _resubscribe(plans) {
    const ctx = this.context;
    const deadline = Date.now() + ctx.options.resubscribeWaitMs;
    const roomId = this.id;
    const missing = [];
    await Promise.all(plans.map(async ({ member, subscriptions }) => {
      const taken = new Set();
      const matches = (want, p) => !taken.has(p.id) && p.publisherId !== member.id && p.state !== 'canceled'
        && p.contentType === want.contentType && !!p.publisher && p.publisher.name === want.publisherName
        && (!want.metadata || p.metadata === want.metadata);
      await Promise.all(subscriptions.map(async (want) => {
        for (;;) {
          // Stop when the room was lost again (a new rejoin takes over) or the member left.
          if (this.id !== roomId || member._left) return;
          let p = want.publisherName === null ? undefined : this.publications.find((x) => matches(want, x));
          const left = deadline - Date.now();
          if (!p && want.publisherName !== null && left > 0) {
            p = await this.onStreamPublished.watch(({ publication }) => matches(want, publication), left)
              .then(({ publication }) => publication, () => undefined);
          }
          if (!p || this.id !== roomId || member._left) {
            if (this.id === roomId) missing.push({ publisherName: want.publisherName, contentType: want.contentType });
            return;
          }
          taken.add(p.id);
          // The application may have subscribed to it already (on onStreamPublished).
          if (member.subscriptions.some((s) => s.publicationId === p.id)) return;
          try {
            await member.subscribe(p.id, want.options);
            return;
          } catch (e) {
            if (e instanceof MinatoError && e.name === 'subscriptionAlreadyExists') return;
            ctx._log('re-subscribe failed', e);
            taken.delete(p.id);
            if (!isRetryable(e) || Date.now() >= deadline) {
              missing.push({ publisherName: want.publisherName, contentType: want.contentType });
              return;
            }
            await sleep(ctx.options.reconnectDelayMs);
          }
        }
      }));
    }));
    return missing;
  }
}
