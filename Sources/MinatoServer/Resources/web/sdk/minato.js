// Minato browser SDK: one ES module, no build step, no third-party code.
// Speaks the Minato signaling protocol v1 (JSON-RPC 2.0 over the WebSocket /ws) and mirrors
// the names of SkyWay's JS room SDK: MinatoContext, SFURoom, LocalSFURoomMember,
// RoomPublication, RoomSubscription, events with add()/once().
//
//   import { MinatoContext, SFURoom } from '/sdk/minato.js';
//   const context = await MinatoContext.create();
//   const room = await SFURoom.findOrCreate(context, { name: 'demo' });
//   const me = await room.join({ name: 'alice' });
//
// Underneath, each joined member has one *send* RTCPeerConnection (the client offers: publish,
// negotiate) and one *recv* RTCPeerConnection (the server offers: subscribe results and `offer`
// notifications, answered one at a time in arrival order). Candidates are trickled with
// `iceCandidate`. The WebSocket reconnects by itself; after a reconnect each member is taken
// over with `keepalive` (which carries the member's `reconnectSecret` from its join result: the
// server lets no other connection take a member over without it) and each room replays the
// events it missed with `subscribeRoomEvents`, page after page until `nextOffset` is null.

/** SDK version. */
export const VERSION = '1.0.0';

// ---------------------------------------------------------------------------------------------
// Types (JSDoc)

/**
 * @typedef {{id: string, name: (string|null), metadata: string, type: ('person'|'bot')}} MemberJSON
 * @typedef {{id: string, publisherId: string, contentType: ('audio'|'video'), metadata: string,
 *   state: ('enabled'|'disabled'), codecCapabilities?: {mimeType: string}[],
 *   encodings?: EncodingJSON[], maxSubscribers?: number}} PublicationJSON
 * @typedef {{id: string, maxBitrate?: number, scaleResolutionDownBy?: number}} EncodingJSON
 * @typedef {{id: string, publicationId: string, subscriberId: string, contentType: ('audio'|'video'),
 *   preferredEncodingId?: string}} SubscriptionJSON
 * @typedef {{id: string, name: (string|null), metadata: string, hasPassword: boolean, version: number,
 *   members: MemberJSON[], publications: PublicationJSON[], subscriptions: SubscriptionJSON[]}} RoomJSON
 * @typedef {{id: string, name: (string|null), metadata: string, hasPassword: boolean, memberCount: number}} RoomSummary
 * @typedef {{roomId: string, version: number, type: string, data: any, reason?: string}} RoomEventJSON
 * @typedef {'connecting'|'connected'|'reconnecting'|'closed'} ConnectionState
 */

// ---------------------------------------------------------------------------------------------
// Errors

/**
 * Every error the SDK throws. `name` is the protocol's error name (`wrongPassword`,
 * `roomNameDuplicated`, `memberNameDuplicated`, …) or one of the SDK's own:
 * `connectionLost` (the WebSocket closed while the request was out), `timeout`,
 * `disposed` (the context was disposed), `notJoined` (the local member has left),
 * `invalidParameter` (bad arguments caught before sending), `mediaError` (the browser's
 * RTCPeerConnection refused a description).
 */
export class MinatoError extends Error {
  /**
   * @param {string} name
   * @param {string} detail
   * @param {{code?: number, method?: string, cause?: any}} [info]
   */
  constructor(name, detail, info = {}) {
    super(`${name}: ${detail}`);
    /** @type {string} */
    this.name = name;
    /** @type {string} human-readable explanation */
    this.detail = detail;
    /** @type {number|undefined} JSON-RPC / HTTP-like code, when the server sent one */
    this.code = info.code;
    /** @type {string|undefined} the request that failed */
    this.method = info.method;
    if (info.cause !== undefined) this.cause = info.cause;
  }
}

/** @param {any} e @param {string} what */
function mediaError(e, what) {
  if (e instanceof MinatoError) return e;
  return new MinatoError('mediaError', `${what}: ${e && e.message ? e.message : e}`, { cause: e });
}

// ---------------------------------------------------------------------------------------------
// Events

/**
 * A SkyWay-style event: `add(handler)` returns a remover (a function, also reachable as
 * `.removeListener()`), `once(handler)` fires once; `once()` without a handler, and
 * `asPromise(timeoutMs)`, give a Promise of the next value; `watch(filter, timeoutMs)` a Promise
 * of the next value that passes `filter`.
 * @template T
 */
export class MinatoEvent {
  constructor() {
    /** @type {Set<(value: T) => void>} */
    this._handlers = new Set();
  }

  /**
   * @param {(value: T) => void} handler
   * @returns {(() => void) & {removeListener: () => void}}
   */
  add(handler) {
    this._handlers.add(handler);
    const remove = /** @type {any} */ (() => { this._handlers.delete(handler); });
    remove.removeListener = remove;
    return remove;
  }

  /**
   * @param {(value: T) => void} [handler]
   * @returns {any} a remover when a handler is given, otherwise a Promise<T>
   */
  once(handler) {
    if (!handler) return this.asPromise();
    const remove = this.add((v) => { remove(); handler(v); });
    return remove;
  }

  /**
   * @param {number} [timeoutMs]
   * @returns {Promise<T>}
   */
  asPromise(timeoutMs) {
    return this.watch(() => true, timeoutMs);
  }

  /**
   * @param {(value: T) => boolean} filter
   * @param {number} [timeoutMs]
   * @returns {Promise<T>}
   */
  watch(filter, timeoutMs) {
    return new Promise((resolve, reject) => {
      let timer = null;
      const remove = this.add((v) => {
        let ok = false;
        try { ok = filter(v); } catch (e) { ok = false; }
        if (!ok) return;
        remove();
        if (timer) clearTimeout(timer);
        resolve(v);
      });
      if (timeoutMs !== undefined && timeoutMs !== null) {
        timer = setTimeout(() => { remove(); reject(new MinatoError('timeout', `event not fired within ${timeoutMs} ms`)); }, timeoutMs);
      }
    });
  }

  /** Removes every handler. */
  removeAllListeners() { this._handlers.clear(); }

  /** @param {T} value @internal */
  emit(value) {
    for (const h of [...this._handlers]) {
      try { h(value); } catch (e) { console.error('[minato] event handler threw', e); }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Helpers

const NAME_RE = /^[A-Za-z0-9._%*-]{1,128}$/;

/** A serial queue: jobs run one after the other, in the order they were enqueued. */
class SerialQueue {
  constructor() { this._tail = Promise.resolve(); }
  /**
   * @template R
   * @param {() => Promise<R>} job
   * @returns {Promise<R>}
   */
  run(job) {
    const result = this._tail.then(job);
    this._tail = result.then(() => undefined, () => undefined);
    return result;
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function defaultUrl() {
  if (typeof location === 'undefined' || !location.host) {
    throw new MinatoError('invalidParameter', 'no page origin: pass { url: "ws://host:port/ws" }');
  }
  return `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/ws`;
}

// ---------------------------------------------------------------------------------------------
// Signaling: one WebSocket, JSON-RPC 2.0, reconnecting

class Signaling {
  /**
   * @param {string} url
   * @param {{requestTimeoutMs: number, reconnect: boolean, reconnectDelayMs: number, maxReconnectDelayMs: number,
   *   log: (...a: any[]) => void}} options
   */
  constructor(url, options) {
    this.url = url;
    this.options = options;
    /** @type {WebSocket|null} */
    this.ws = null;
    this.nextId = 1;
    /** @type {Map<number, {resolve: Function, reject: Function, method: string, timer: any}>} */
    this.pending = new Map();
    /** @type {ConnectionState} */
    this.state = 'connecting';
    this.disposed = false;
    this.reconnectAttempt = 0;
    /** @type {Array<() => void>} requests waiting for the socket to (re)open */
    this.openWaiters = [];
    /** @type {(method: string, params: any) => void} */
    this.onNotification = () => {};
    /** @type {() => Promise<void>} runs after a reconnect, before waiting requests are sent */
    this.onReconnected = async () => {};
    /** @type {(state: ConnectionState) => void} */
    this.onStateChanged = () => {};
    this.everOpened = false;
  }

  /** Opens the first connection; rejects if it cannot. */
  connect() {
    return new Promise((resolve, reject) => {
      this._open((ok, err) => (ok ? resolve(undefined) : reject(err)));
    });
  }

  /** @param {(ok: boolean, err?: any) => void} done */
  _open(done) {
    let settled = false;
    let ws;
    try {
      ws = new WebSocket(this.url);
    } catch (e) {
      done(false, new MinatoError('connectionLost', `cannot open ${this.url}: ${e.message || e}`, { cause: e }));
      return;
    }
    this.ws = ws;
    ws.onopen = () => {
      settled = true;
      this.reconnectAttempt = 0;
      this.options.log('socket open', this.url);
      done(true);
    };
    ws.onmessage = (ev) => this._onMessage(ev.data);
    ws.onerror = () => { /* close follows */ };
    ws.onclose = (ev) => {
      if (this.ws === ws) this.ws = null;
      this.options.log('socket closed', ev.code, ev.reason);
      this._failPending(new MinatoError('connectionLost', `the WebSocket closed (code ${ev.code})`));
      if (!settled) {
        settled = true;
        done(false, new MinatoError('connectionLost', `cannot connect to ${this.url} (code ${ev.code})`));
        return;
      }
      if (!this.disposed) this._scheduleReconnect();
    };
  }

  _setState(state) {
    if (this.state === state) return;
    this.state = state;
    this.onStateChanged(state);
  }

  _scheduleReconnect() {
    if (this.disposed || !this.options.reconnect) { this._setState('closed'); return; }
    this._setState('reconnecting');
    const base = this.options.reconnectDelayMs;
    const delay = Math.min(this.options.maxReconnectDelayMs, base * 2 ** Math.min(this.reconnectAttempt, 6));
    this.reconnectAttempt += 1;
    setTimeout(() => {
      if (this.disposed) return;
      this._open(async (ok) => {
        if (!ok) { if (!this.disposed) this._scheduleReconnect(); return; }
        try {
          await this.onReconnected();
        } catch (e) {
          this.options.log('resync after reconnect failed', e);
        }
        this._setState('connected');
        const waiters = this.openWaiters;
        this.openWaiters = [];
        for (const w of waiters) w();
      });
    }, delay);
  }

  _failPending(error) {
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const p of pending) { clearTimeout(p.timer); p.reject(error); }
  }

  /** @param {string} text */
  _onMessage(text) {
    let msg;
    try { msg = JSON.parse(text); } catch (e) { this.options.log('unparsable frame', text); return; }
    if (msg && typeof msg.method === 'string' && msg.id === undefined) {
      this.onNotification(msg.method, msg.params || {});
      return;
    }
    const p = this.pending.get(msg.id);
    // Only the id: a late join result carries the member's reconnectSecret, which is never logged.
    if (!p) { this.options.log('response to no request', msg && msg.id); return; }
    this.pending.delete(msg.id);
    clearTimeout(p.timer);
    if (msg.error) {
      const e = msg.error;
      const data = e.data && typeof e.data === 'object' ? e.data : {};
      p.reject(new MinatoError(data.name || e.message || 'internal', data.detail || e.message || 'request failed',
        { code: e.code, method: p.method }));
    } else {
      p.resolve(msg.result || {});
    }
  }

  /** True while a request can be written now. */
  get isOpen() { return !!this.ws && this.ws.readyState === WebSocket.OPEN; }

  /**
   * Sends a request and resolves with its result. While the socket reconnects, the request
   * waits (within its timeout) unless `immediate` is set (used by the resync itself).
   * @param {string} method
   * @param {object} [params]
   * @param {{timeoutMs?: number, immediate?: boolean}} [opts]
   * @returns {Promise<any>}
   */
  async request(method, params = {}, opts = {}) {
    if (this.disposed) throw new MinatoError('disposed', 'the context was disposed', { method });
    const timeoutMs = opts.timeoutMs ?? this.options.requestTimeoutMs;
    const started = Date.now();
    if (!this.isOpen && !opts.immediate) {
      if (this.state === 'closed') throw new MinatoError('connectionLost', 'the WebSocket is closed', { method });
      await new Promise((resolve, reject) => {
        const t = setTimeout(() => {
          this.openWaiters = this.openWaiters.filter((w) => w !== go);
          reject(new MinatoError('timeout', `${method}: no connection within ${timeoutMs} ms`, { method }));
        }, timeoutMs);
        const go = () => { clearTimeout(t); resolve(undefined); };
        this.openWaiters.push(go);
      });
    }
    if (!this.isOpen) throw new MinatoError('connectionLost', 'the WebSocket is not open', { method });
    const id = this.nextId++;
    const left = Math.max(1000, timeoutMs - (Date.now() - started));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new MinatoError('timeout', `${method}: no response within ${left} ms`, { method }));
      }, left);
      this.pending.set(id, { resolve, reject, method, timer });
      this.ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
    });
  }

  /** Writes a request without waiting for its response (pagehide, dispose). */
  fire(method, params) {
    if (!this.isOpen) return;
    try { this.ws.send(JSON.stringify({ jsonrpc: '2.0', id: this.nextId++, method, params })); } catch (e) { /* closing */ }
  }

  close() {
    this.disposed = true;
    this._setState('closed');
    const ws = this.ws;
    this.ws = null;
    this._failPending(new MinatoError('disposed', 'the context was disposed'));
    for (const w of this.openWaiters) w();
    this.openWaiters = [];
    if (ws) { try { ws.close(1000, 'dispose'); } catch (e) { /* already closed */ } }
  }
}

// ---------------------------------------------------------------------------------------------
// Context

/**
 * The connection to a Minato server (SkyWay's SkyWayContext).
 */
export class MinatoContext {
  /**
   * Connects to the server.
   * @param {{token?: string, url?: string, requestTimeoutMs?: number, reconnect?: boolean,
   *   reconnectDelayMs?: number, maxReconnectDelayMs?: number, leaveOnPageHide?: boolean,
   *   iceServers?: RTCIceServer[], debug?: boolean}} [options]
   *   `url` defaults to this page's origin + `/ws`; `token` is sent as `?token=`.
   * @returns {Promise<MinatoContext>}
   */
  static async create(options = {}) {
    const ctx = new MinatoContext(options);
    await ctx._signaling.connect();
    ctx._signaling._setState('connected');
    return ctx;
  }

  /** @param {any} options @private */
  constructor(options) {
    let url = options.url || defaultUrl();
    if (options.token) url += (url.includes('?') ? '&' : '?') + 'token=' + encodeURIComponent(options.token);
    /** @type {string} */
    this.url = url;
    this.options = {
      requestTimeoutMs: options.requestTimeoutMs ?? 20000,
      reconnect: options.reconnect ?? true,
      reconnectDelayMs: options.reconnectDelayMs ?? 300,
      maxReconnectDelayMs: options.maxReconnectDelayMs ?? 5000,
      leaveOnPageHide: options.leaveOnPageHide ?? true,
      iceServers: options.iceServers ?? [],
      debug: !!options.debug,
    };
    const log = this.options.debug ? (...a) => console.debug('[minato]', ...a) : () => {};
    this._log = log;
    this._signaling = new Signaling(url, { ...this.options, log });
    /** @type {Map<string, SFURoom>} */
    this._rooms = new Map();
    /** @type {Map<string, LocalSFURoomMember>} */
    this._localMembers = new Map();
    this.disposed = false;
    /** Fires with the connection state: 'connected' | 'reconnecting' | 'closed'. @type {MinatoEvent<ConnectionState>} */
    this.onConnectionStateChanged = new MinatoEvent();
    /** Fires after a reconnect once members and rooms are resynchronised. @type {MinatoEvent<void>} */
    this.onReconnected = new MinatoEvent();
    /** Fires on errors that no call returned (a failed resync, a failed server offer). @type {MinatoEvent<MinatoError>} */
    this.onFatalError = new MinatoEvent();
    /** How many room events were recovered by replay after reconnects (diagnostics). */
    this.replayedEvents = 0;

    this._signaling.onNotification = (method, params) => this._onNotification(method, params);
    this._signaling.onStateChanged = (s) => this.onConnectionStateChanged.emit(s);
    this._signaling.onReconnected = () => this._resync();
    this._onPageHide = () => this._leaveAllNow();
    if (this.options.leaveOnPageHide && typeof window !== 'undefined') {
      window.addEventListener('pagehide', this._onPageHide);
    }
  }

  /** @returns {ConnectionState} */
  get connectionState() { return this._signaling.state; }

  /**
   * Lists the rooms on the server.
   * @returns {Promise<RoomSummary[]>}
   */
  async listRooms() {
    const r = await this._request('listRooms', {});
    return r.rooms || [];
  }

  /**
   * Sends a raw protocol request (for methods the SDK does not wrap).
   * @param {string} method @param {object} [params] @param {{timeoutMs?: number}} [opts]
   * @returns {Promise<any>}
   */
  request(method, params = {}, opts = {}) { return this._request(method, params, opts); }

  _request(method, params, opts) {
    if (this.disposed) return Promise.reject(new MinatoError('disposed', 'the context was disposed', { method }));
    return this._signaling.request(method, params, opts);
  }

  /**
   * Leaves every joined member (without waiting), closes all connections and the WebSocket.
   */
  dispose() {
    if (this.disposed) return;
    this._leaveAllNow();
    this.disposed = true;
    if (typeof window !== 'undefined') window.removeEventListener('pagehide', this._onPageHide);
    for (const m of [...this._localMembers.values()]) m._teardown('left');
    this._signaling.close();
    for (const room of this._rooms.values()) room._disposeLocal();
    this._rooms.clear();
  }

  /** Writes `leave` for every joined member without waiting (pagehide, dispose). */
  _leaveAllNow() {
    for (const m of this._localMembers.values()) {
      if (!m._left) this._signaling.fire('leave', { memberId: m.id });
    }
  }

  /** @param {RoomJSON} json @returns {Promise<SFURoom>} */
  async _adoptRoom(json) {
    let room = this._rooms.get(json.id);
    if (room) return room;
    room = new SFURoom(this, json);
    this._rooms.set(json.id, room);
    try {
      await room._startEvents();
    } catch (e) {
      this._rooms.delete(json.id);
      throw e;
    }
    return room;
  }

  _onNotification(method, params) {
    if (method === 'roomEvent') {
      const room = this._rooms.get(params.roomId);
      if (room) room._onLiveEvent(params);
    } else if (method === 'offer') {
      const m = this._localMembers.get(params.memberId);
      if (m) m._onServerOffer(params.offer, 'notification');
      else this._log('offer for unknown member', params.memberId);
    } else {
      this._log('unknown notification', method, params);
    }
  }

  /**
   * After a reconnect: take each member over (`keepalive` with its reconnectSecret), then replay
   * each room's missed events.
   */
  async _resync() {
    for (const m of [...this._localMembers.values()]) {
      if (m._left) continue;
      try {
        await this._signaling.request('keepalive', m._keepaliveParams(), { immediate: true });
      } catch (e) {
        if (e instanceof MinatoError && (e.name === 'memberNotFound' || e.name === 'notJoined')) {
          m._lostReason = 'keepaliveExpired';
        } else if (e instanceof MinatoError && e.name === 'insufficientPermissions') {
          // The server refused the takeover (the secret did not match, or the token's member
          // rule no longer matches): this page cannot act as the member any more.
          m._lostReason = 'takeoverRefused';
        } else {
          throw e;
        }
      }
    }
    for (const room of [...this._rooms.values()]) {
      await room._replay();
    }
    // Members the server no longer knows and whose memberLeft the replay did not show.
    for (const m of [...this._localMembers.values()]) {
      if (m._left || !m._lostReason) continue;
      if (m._lostReason === 'takeoverRefused') {
        // Still in the room on the server (until its keepalive gap ends and memberLeft comes),
        // but no longer this page's: stop acting as it, keep it in the member list.
        m._teardown(m._lostReason);
      } else {
        m.room._removeMemberLocally(m.id, m._lostReason);
      }
    }
    this.onReconnected.emit(undefined);
  }
}

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
    const params = { roomId: this.id };
    for (const k of ['name', 'metadata', 'keepaliveIntervalSec', 'keepaliveIntervalGapSec', 'replace', 'type']) {
      if (init[k] !== undefined) params[k] = init[k];
    }
    const password = init.password !== undefined ? init.password : this._password;
    if (password !== undefined && password !== '') params.password = password;
    const r = await this.context._request('join', params);
    const member = new LocalSFURoomMember(this, r.member, {
      keepaliveIntervalSec: init.keepaliveIntervalSec ?? 30,
      reconnectSecret: r.reconnectSecret,
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
    if (this.state === 'closed') return;
    this._held = [];
    try {
      const replayed = await this._fetchEvents((params) =>
        this.context._signaling.request('subscribeRoomEvents', params, { immediate: true }));
      this.context.replayedEvents += replayed;
    } catch (e) {
      if (e instanceof MinatoError && e.name === 'roomNotFound') {
        this._held = null;
        this._closedLocally();
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
        this._removeSubscription(d.subscription.id);
        break;
      case 'metadataUpdated':
        this.metadata = (d.room && d.room.metadata) ?? this.metadata;
        this.onMetadataUpdated.emit({ metadata: this.metadata });
        break;
      case 'closed':
        this._closedLocally();
        break;
      default:
        this.context._log('unknown room event', ev);
    }
    this.onEvent.emit(ev);
  }

  _removeSubscription(id) {
    const s = this._subscriptions.get(id);
    if (!s) return;
    this._subscriptions.delete(id);
    s._canceled();
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

  _closedLocally() {
    if (this.state === 'closed') return;
    for (const m of this.members) this._removeMemberLocally(m.id, 'roomClosed');
    this.state = 'closed';
    this.context._rooms.delete(this.id);
    this.onClosed.emit({});
  }
}

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
   * @param {{keepaliveIntervalSec: number, reconnectSecret?: string}} opts
   */
  constructor(room, json, opts) {
    super(room, json);
    this.#reconnectSecret = typeof opts.reconnectSecret === 'string' ? opts.reconnectSecret : undefined;
    this.side = 'local';
    this.context = room.context;
    this._keepaliveIntervalSec = opts.keepaliveIntervalSec;
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
    /** @type {Map<string, {transceiver: RTCRtpTransceiver, stream: LocalStream}>} publication id → sender */
    this._senders = new Map();
    /** @type {Map<string, RemoteStream>} subscription id → stream */
    this._streams = new Map();
    /** The number of server offers this member answered. */
    this.answeredOffers = 0;
    /** Fires once when this member is no longer in the room; `reason` is the server's
     * (`left`, `replaced`, `keepaliveExpired`, `transportClosed`, `kicked`, `roomClosed`), or the
     * SDK's `takeoverRefused` (after a reconnect the server refused `keepalive` with
     * `insufficientPermissions`). @type {MinatoEvent<{reason: string}>} */
    this.onLeft = new MinatoEvent();
    /** Fires when the member is lost for a reason other than its own leave or the room's close,
     * or a negotiation with the server fails. @type {MinatoEvent<MinatoError>} */
    this.onFatalError = new MinatoEvent();
    /** @type {MinatoEvent<{publication: RoomPublication}>} */
    this.onPublicationListChanged = new MinatoEvent();
    /** @type {MinatoEvent<{subscription: RoomSubscription}>} */
    this.onSubscriptionListChanged = new MinatoEvent();
  }

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
      try {
        await this.context._request('keepalive', this._keepaliveParams(), { timeoutMs: periodMs * 2 });
      } catch (e) {
        if (e instanceof MinatoError && e.name === 'memberNotFound' && !this._left) {
          this.room._removeMemberLocally(this.id, 'keepaliveExpired');
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
      iceServers: this.context.options.iceServers,
      bundlePolicy: 'max-bundle',
      rtcpMuxPolicy: 'require',
    });
    pc.addEventListener('icecandidate', (ev) => this._sendCandidate(direction, ev.candidate));
    pc.addEventListener('connectionstatechange', () => {
      this.context._log(direction, 'connection', pc.connectionState);
      if (pc.connectionState === 'failed' && !this._left) {
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
    const track = source instanceof MediaStreamTrack ? source : source && source.track;
    if (!(track instanceof MediaStreamTrack)) {
      throw new MinatoError('invalidParameter', 'publish needs a MediaStreamTrack (or a stream with .track)', { method: 'publish' });
    }
    const stream = source instanceof LocalStream ? source : new LocalStream(track);
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
        const publication = this.room._upsertPublication(r.publication);
        publication._local = { transceiver, stream, member: this };
        this._senders.set(publication.id, { transceiver, stream });
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

  // ---- subscribing --------------------------------------------------------------------------

  /**
   * Subscribes to another member's publication.
   * @param {string|RoomPublication} publicationId
   * @param {{preferredEncodingId?: string}} [options]
   * @returns {Promise<{subscription: RoomSubscription, stream: RemoteStream}>}
   */
  async subscribe(publicationId, options = {}) {
    this._checkJoined('subscribe');
    const id = typeof publicationId === 'string' ? publicationId : publicationId.id;
    const params = { memberId: this.id, publicationId: id };
    if (options.preferredEncodingId !== undefined) params.preferredEncodingId = options.preferredEncodingId;
    const r = await this.context._request('subscribe', params);
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
    return this._recvQueue.run(async () => {
      if (this._left) return;
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
}

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
    /** Fires when the subscription ends (unsubscribe, unpublish, member left). @type {MinatoEvent<{}>} */
    this.onCanceled = new MinatoEvent();
    this._publication = room._publications.get(json.publicationId) || null;
  }

  /** @param {SubscriptionJSON} json */
  _update(json) {
    if (json.preferredEncodingId !== undefined) this.preferredEncodingId = json.preferredEncodingId;
  }

  _canceled() {
    this.state = 'canceled';
    if (this._localStream) this._localStream._ended();
    this.onCanceled.emit({});
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

/** SkyWay's name for the event class. */
export { MinatoEvent as Event };

export default { MinatoContext, SFURoom, MinatoError, MinatoEvent, VERSION };
