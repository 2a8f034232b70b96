// Minato browser SDK: MinatoContext, the connection to a server (entry point: minato.js).
// Types: the JSDoc typedefs (RoomJSON, MemberJSON, …) are in minato.js.

import { MinatoError, MinatoEvent, defaultUrl, sleep } from './core.js';
import { SFURoom } from './room.js';
import { Signaling } from './signaling.js';
import { NETWORK_PROBE_MS } from './recovery.js';

// ---------------------------------------------------------------------------------------------
// Context


/**
 * The connection to a Minato server (SkyWay's SkyWayContext).
 */
export class MinatoContext {
  /**
   * Connects to the server.
   * @param {{token?: string, url?: string, urls?: string[], requestTimeoutMs?: number, reconnect?: boolean,
   *   reconnectDelayMs?: number, maxReconnectDelayMs?: number, leaveOnPageHide?: boolean,
   *   iceServers?: RTCIceServer[], rejoin?: boolean, rejoinTimeoutMs?: number, resubscribeWaitMs?: number,
   *   connectTimeoutMs?: number, heartbeatIntervalMs?: number, heartbeatTimeoutMs?: number,
   *   iceRestart?: boolean, iceRestartGraceMs?: number, iceRestartBackoffMs?: number,
   *   maxIceRestartBackoffMs?: number, mediaRecoveryTimeoutMs?: number, qualityIntervalMs?: number,
   *   debug?: boolean}} [options]
   *   `url` defaults to this page's origin + `/ws`; `urls` lists several servers (the nodes of a
   *   cluster), tried in that order, the first one first; `token` is sent as `?token=`.
   *   `rejoin` (default true): when a joined room is lost (its node failed), find or create it
   *   again by name and rejoin, re-publish and re-subscribe (SFURoom.onReconnecting / onReconnected).
   *   `heartbeatIntervalMs` / `heartbeatTimeoutMs`: a socket silent that long is probed, and given
   *   up (and reconnected) when the probe is not answered in time; `connectTimeoutMs` bounds each
   *   connection attempt. `iceRestart` (default true) and the `iceRestart…`, `mediaRecovery…`
   *   and `quality…` options: the media recovery of each joined member (docs/sdk.md "Recovery").
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
    const given = options.urls && options.urls.length ? options.urls : [options.url || defaultUrl()];
    const urls = given.map((url) => (options.token
      ? url + (url.includes('?') ? '&' : '?') + 'token=' + encodeURIComponent(options.token) : url));
    /** The server URLs, in the order they are tried. @type {string[]} */
    this.urls = urls;
    this.options = {
      requestTimeoutMs: options.requestTimeoutMs ?? 20000,
      reconnect: options.reconnect ?? true,
      reconnectDelayMs: options.reconnectDelayMs ?? 300,
      maxReconnectDelayMs: options.maxReconnectDelayMs ?? 5000,
      leaveOnPageHide: options.leaveOnPageHide ?? true,
      iceServers: options.iceServers ?? [],
      rejoin: options.rejoin ?? true,
      rejoinTimeoutMs: options.rejoinTimeoutMs ?? 60000,
      resubscribeWaitMs: options.resubscribeWaitMs ?? 10000,
      connectTimeoutMs: options.connectTimeoutMs ?? 5000,
      heartbeatIntervalMs: options.heartbeatIntervalMs ?? 2000,
      heartbeatTimeoutMs: options.heartbeatTimeoutMs ?? 3000,
      iceRestart: options.iceRestart ?? true,
      iceRestartGraceMs: options.iceRestartGraceMs ?? 1500,
      iceRestartBackoffMs: options.iceRestartBackoffMs ?? 2000,
      maxIceRestartBackoffMs: options.maxIceRestartBackoffMs ?? 8000,
      mediaRecoveryTimeoutMs: options.mediaRecoveryTimeoutMs ?? 60000,
      qualityIntervalMs: options.qualityIntervalMs ?? 2000,
      debug: !!options.debug,
    };
    const log = this.options.debug ? (...a) => console.debug('[minato]', ...a) : () => {};
    this._log = log;
    this._signaling = new Signaling(urls, { ...this.options, log });
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
    this._signaling.onStateChanged = (s) => {
      if (s === 'reconnecting') {
        for (const m of this._localMembers.values()) m._recovery.signalingLost(this._signaling.lostReason || 'socketClosed');
      }
      this.onConnectionStateChanged.emit(s);
    };
    this._signaling.onReconnected = () => this._resync();
    // The socket is probed with the first joined member's keepalive (which it needs anyway).
    this._signaling.heartbeat = () => {
      const m = [...this._localMembers.values()].find((x) => !x._left);
      return m ? ['keepalive', m._keepaliveParams()] : null;
    };
    this._onPageHide = () => this._leaveAllNow();
    if (this.options.leaveOnPageHide && typeof window !== 'undefined') {
      window.addEventListener('pagehide', this._onPageHide);
    }
    // The browser says the network changed: `online` (it was offline), or a new connection type
    // (`navigator.connection.type`, e.g. wifi -> cellular, where the browser reports one; its
    // bandwidth and RTT estimates change all the time and are no reason to reconnect).
    this._connectionType = this._networkType();
    this._onOnline = () => this._networkChanged('online');
    this._onConnectionChange = () => {
      const type = this._networkType();
      if (type === this._connectionType) return;
      this._connectionType = type;
      this._networkChanged(`connection type ${type}`);
    };
    if (typeof window !== 'undefined') window.addEventListener('online', this._onOnline);
    const conn = typeof navigator !== 'undefined' ? navigator.connection : undefined;
    if (conn && conn.addEventListener) conn.addEventListener('change', this._onConnectionChange);
  }

  _networkType() {
    const conn = typeof navigator !== 'undefined' ? navigator.connection : undefined;
    return conn && conn.type !== undefined ? conn.type : null;
  }

  /**
   * The network changed: the signaling socket's TCP connection may be dead without a close (its
   * local address is gone), so it is probed with a short timeout (given up and reconnected when
   * silent), and every joined member restarts ICE on its connections.
   * @param {string} why
   */
  _networkChanged(why) {
    if (this.disposed) return;
    this._log('network changed', why);
    this._probeSignaling(NETWORK_PROBE_MS);
    for (const m of [...this._localMembers.values()]) m._recovery.networkChanged();
  }

  /**
   * Probes the signaling socket unless a frame arrived in the last `recentMs` (then it is alive).
   * @param {number} timeoutMs @param {number} [recentMs]
   * @returns {Promise<boolean>}
   */
  _probeSignaling(timeoutMs, recentMs = 0) {
    const sig = this._signaling;
    if (recentMs > 0 && Date.now() - sig.lastReceivedAt < recentMs) return Promise.resolve(true);
    return sig.probe(timeoutMs);
  }

  /**
   * Resolves once requests can go out: the socket is connected (after a reconnect: members taken
   * back and events replayed) and no probe of it is in flight. Rejects if the context is closed.
   * @returns {Promise<void>}
   */
  async _signalingReady() {
    for (;;) {
      const sig = this._signaling;
      if (this.disposed || sig.state === 'closed') throw new MinatoError('disposed', 'the context is closed');
      if (sig._probe) { await sig._probe; continue; }
      if (sig.state === 'connected' && sig.isOpen) return;
      await this.onConnectionStateChanged.watch((s) => s === 'connected' || s === 'closed');
    }
  }

  /** @returns {ConnectionState} */
  get connectionState() { return this._signaling.state; }

  /** The server URL in use (one of `urls`). @type {string} */
  get url() { return this._signaling.url; }

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
    if (typeof window !== 'undefined') {
      window.removeEventListener('pagehide', this._onPageHide);
      window.removeEventListener('online', this._onOnline);
    }
    const conn = typeof navigator !== 'undefined' ? navigator.connection : undefined;
    if (conn && conn.removeEventListener) conn.removeEventListener('change', this._onConnectionChange);
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
    } else if (method === 'dataChannelError') {
      const m = this._localMembers.get(params.memberId);
      if (m) m._onDataChannelError(params);
    } else {
      this._log('unknown notification', method, params);
    }
  }

  /**
   * Sends a request of the resync again while the server answers `serviceUnavailable` (in a
   * cluster: the node hosting the room is unreachable and its lease has not lapsed yet; after
   * that the answer is final), backing off, for at most `requestTimeoutMs`.
   * @param {string} method @param {object} params
   */
  async _resyncRequest(method, params) {
    const deadline = Date.now() + this.options.requestTimeoutMs;
    let delay = this.options.reconnectDelayMs;
    for (;;) {
      try {
        return await this._signaling.request(method, params, { immediate: true });
      } catch (e) {
        if (!(e instanceof MinatoError && e.name === 'serviceUnavailable') || Date.now() + delay > deadline) throw e;
      }
      await sleep(delay);
      delay = Math.min(delay * 2, 2000);
    }
  }

  /**
   * After a reconnect: take each member over (`keepalive` with its reconnectSecret), then replay
   * each room's missed events. A member the server no longer knows, whose leaving the replay
   * does not explain (its room is gone: its node failed), is rejoined (SFURoom._rejoin).
   */
  async _resync() {
    const replayedBefore = this.replayedEvents;
    for (const m of [...this._localMembers.values()]) {
      if (m._left) continue;
      try {
        await this._resyncRequest('keepalive', m._keepaliveParams());
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
      } else if (m.room._canRejoin('memberLost')) {
        // Not started here: the rejoin's requests then go out once the connection counts as
        // connected again, and its waiting (for publishers to come back) holds up nothing.
        setTimeout(() => m.room._rejoin('memberLost'), 0);
      } else {
        m.room._removeMemberLocally(m.id, m._lostReason);
      }
    }
    // The members taken back: their signaling is back (media may still need an ICE restart,
    // which their recovery starts now that requests can go out).
    for (const m of [...this._localMembers.values()]) {
      if (!m._left && !m._lostReason) m._recovery.signalingRestored(this.replayedEvents - replayedBefore);
    }
    this.onReconnected.emit(undefined);
  }
}
