// Minato browser SDK: the signaling connection (internal; the entry point is minato.js).
// Types: the JSDoc typedefs (RoomJSON, MemberJSON, …) are in minato.js.

import { MinatoError } from './core.js';

// ---------------------------------------------------------------------------------------------
// Signaling: one WebSocket, JSON-RPC 2.0, reconnecting

export class Signaling {
  /**
   * @param {string[]} urls the server's WebSocket URLs (several: nodes of a cluster); at least one
   * @param {{requestTimeoutMs: number, reconnect: boolean, reconnectDelayMs: number, maxReconnectDelayMs: number,
   *   connectTimeoutMs: number, heartbeatIntervalMs: number, heartbeatTimeoutMs: number,
   *   log: (...a: any[]) => void}} options
   */
  constructor(urls, options) {
    this.urls = urls;
    /** The index in `urls` of the URL in use (or tried last). */
    this.urlIndex = 0;
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
    /** When the last frame arrived (Date.now()); a socket that stays silent is probed. */
    this.lastReceivedAt = 0;
    /** Why the socket was lost last: 'socketClosed' (it closed), 'unresponsive' (a probe went
     * unanswered: the TCP connection is dead without a close, as after a network change or a
     * firewall dropping it), or the reason given to `abandon` (e.g. 'networkChanged'). */
    this.lostReason = null;
    /** @type {() => ([string, object]|null)} a cheap request to probe the socket with (null: none) */
    this.heartbeat = () => null;
    /** @type {Promise<boolean>|null} the probe in flight */
    this._probe = null;
    this._heartbeatTimer = null;
  }

  /** The URL in use (or tried last). */
  get url() { return this.urls[this.urlIndex]; }

  /** Opens the first connection, trying each URL once in the order given; rejects if none opens. */
  async connect() {
    let failure;
    for (let i = 0; i < this.urls.length; i++) {
      this.urlIndex = i;
      try {
        await new Promise((resolve, reject) => {
          this._open((ok, err) => (ok ? resolve(undefined) : reject(err)));
        });
        this._startHeartbeat();
        return;
      } catch (e) {
        failure = e;
        this.options.log('cannot connect', this.url, e);
      }
    }
    throw failure;
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
    // A handshake whose packets vanish (a firewall dropping them, a network that just changed)
    // would wait for the browser's TCP timeout, minutes: give up after connectTimeoutMs.
    const connectTimer = setTimeout(() => {
      if (settled) return;
      settled = true;
      this._detach(ws);
      if (this.ws === ws) this.ws = null;
      this.options.log('socket did not open in time', this.url);
      done(false, new MinatoError('connectionLost', `cannot connect to ${this.url} within ${this.options.connectTimeoutMs} ms`));
    }, this.options.connectTimeoutMs);
    ws.onopen = () => {
      settled = true;
      clearTimeout(connectTimer);
      this.reconnectAttempt = 0;
      this.lastReceivedAt = Date.now();
      this.options.log('socket open', this.url);
      done(true);
    };
    ws.onmessage = (ev) => { this.lastReceivedAt = Date.now(); this._onMessage(ev.data); };
    ws.onerror = () => { /* close follows */ };
    ws.onclose = (ev) => {
      clearTimeout(connectTimer);
      if (this.ws === ws) this.ws = null;
      this.options.log('socket closed', ev.code, ev.reason);
      this._failPending(new MinatoError('connectionLost', `the WebSocket closed (code ${ev.code})`));
      if (!settled) {
        settled = true;
        done(false, new MinatoError('connectionLost', `cannot connect to ${this.url} (code ${ev.code})`));
        return;
      }
      this.lostReason = 'socketClosed';
      if (!this.disposed) this._scheduleReconnect();
    };
  }

  /** Stops listening to a socket and closes it without waiting for the close to complete. */
  _detach(ws) {
    ws.onopen = null;
    ws.onmessage = null;
    ws.onerror = null;
    ws.onclose = null;
    try { ws.close(); } catch (e) { /* closing already */ }
  }

  /**
   * Gives up the socket in use as if it had closed (requests out on it fail with
   * `connectionLost`) and reconnects: for a socket that is open as far as the browser knows but
   * carries nothing (its TCP connection died without a close).
   * @param {string} reason
   */
  abandon(reason) {
    const ws = this.ws;
    if (!ws || this.disposed) return;
    this.options.log('abandoning the socket', reason);
    this.ws = null;
    this._detach(ws);
    this.lostReason = reason;
    this._failPending(new MinatoError('connectionLost', `the WebSocket was given up (${reason})`));
    this._scheduleReconnect();
  }

  /**
   * Checks that the socket still carries messages: sends the heartbeat request and, if no
   * answer comes within `timeoutMs`, abandons the socket (reason `unresponsive`) and reconnects.
   * One probe at a time; resolves true when the socket answered (or there is nothing to probe
   * with), false when it was abandoned or is not open.
   * @param {number} timeoutMs
   * @returns {Promise<boolean>}
   */
  probe(timeoutMs) {
    if (this._probe) {
      // One in flight already (a heartbeat's, say): give it this probe's deadline if earlier.
      const p = this._probe;
      const ws = this.ws;
      setTimeout(() => { if (this._probe === p && this.ws === ws && ws) this.abandon('unresponsive'); }, timeoutMs);
      return p;
    }
    if (!this.isOpen || this.state !== 'connected') return Promise.resolve(false);
    const req = this.heartbeat();
    if (!req) return Promise.resolve(true);
    const ws = this.ws;
    const p = this.request(req[0], req[1], { timeoutMs, immediate: true }).then(() => true, (e) => {
      if (!(e instanceof MinatoError) || e.name !== 'timeout') return e.name !== 'connectionLost';
      if (this.ws === ws) this.abandon('unresponsive');
      return false;
    });
    this._probe = p;
    p.finally(() => { if (this._probe === p) this._probe = null; });
    return p;
  }

  /** Probes the socket whenever it has been silent for heartbeatIntervalMs. */
  _startHeartbeat() {
    if (this._heartbeatTimer || !(this.options.heartbeatIntervalMs > 0)) return;
    this._heartbeatTimer = setInterval(() => {
      if (this.disposed || this._probe || !this.isOpen || this.state !== 'connected') return;
      if (Date.now() - this.lastReceivedAt < this.options.heartbeatIntervalMs) return;
      this.probe(this.options.heartbeatTimeoutMs);
    }, Math.min(500, this.options.heartbeatIntervalMs));
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
    const attempt = this.reconnectAttempt;
    this.reconnectAttempt += 1;
    setTimeout(() => {
      if (this.disposed) return;
      // The first attempt goes to the URL that was lost (a restart or a network blip), each later
      // one to the next URL of the list, in turn (that server may be gone for good).
      if (attempt > 0) this.urlIndex = (this.urlIndex + 1) % this.urls.length;
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
    clearInterval(this._heartbeatTimer);
    this._heartbeatTimer = null;
    this._setState('closed');
    const ws = this.ws;
    this.ws = null;
    this._failPending(new MinatoError('disposed', 'the context was disposed'));
    for (const w of this.openWaiters) w();
    this.openWaiters = [];
    if (ws) { try { ws.close(1000, 'dispose'); } catch (e) { /* already closed */ } }
  }
}
