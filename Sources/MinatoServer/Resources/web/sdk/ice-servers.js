// Minato browser SDK: a joined member's ICE servers (internal; the entry point is minato.js).
// The server hands each member a TURN server with a time-limited credential of its own (join's
// `iceServers`, coturn's REST scheme: username "<unix expiry>:<member id>"); this keeps them for
// the member's RTCPeerConnections (with the application's own `iceServers`), renews them with
// `getIceServers` before they expire, and turns a TURN server refusing them into an error the
// application sees instead of a connection that never comes up. docs/sdk.md "TURN".

import { MinatoError } from './core.js';

/** Renew at this share of a credential's lifetime. */
const RENEW_AT = 0.8;
/** Never renew sooner than this after the last renewal (a skewed clock cannot make it spin). */
const MIN_RENEW_MS = 30000;
/** setTimeout's longest delay. */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** STUN error codes a TURN server answers a credential it does not accept with (RFC 8489
 * 401 Unauthorized; RFC 8656 441 Wrong Credentials). */
const REFUSED = new Set([401, 441]);
/** After a refusal, how long a connection may still come up another way before the refusal is
 * reported (a host or server-reflexive path connects within a second or two when there is one). */
const FAILURE_TIMEOUT_MS = 10000;

/** @param {any} s @returns {boolean} */
function isTurnUrl(s) { return typeof s === 'string' && /^turns?:/i.test(s); }

/**
 * The ICE servers of one joined member.
 */
export class MemberIceServers {
  /** @param {LocalSFURoomMember} member @param {RTCIceServer[]|undefined} servers join's `iceServers` */
  constructor(member, servers) {
    this.member = member;
    /** @type {RTCIceServer[]} the server's list as last received */
    this.servers = Array.isArray(servers) ? servers : [];
    this.timer = null;
    /** Per direction: the TURN refusal seen on the current connection, and whether it was reported. */
    this.refused = { send: null, recv: null };
    this.reported = { send: false, recv: false };
    this.failTimers = { send: null, recv: null };
    this.lastRenewAt = 0;
    this._schedule();
  }

  /** What an RTCPeerConnection is configured with: the application's servers, then the member's. */
  forPc() {
    return [...(this.member.context.options.iceServers || []), ...this.servers];
  }

  /** The TURN credential's expiry (Unix ms), from its username "<unix seconds>:<id>"; null without one. */
  get expiresAt() {
    for (const s of this.servers) {
      const urls = Array.isArray(s.urls) ? s.urls : [s.urls];
      if (!urls.some(isTurnUrl) || typeof s.username !== 'string') continue;
      const sec = Number(s.username.split(':')[0]);
      if (Number.isFinite(sec) && sec > 0) return sec * 1000;
    }
    return null;
  }

  /** Renews at 80% of the remaining lifetime of the credential just received (or, after a
   * failed renewal, `retryMs` from now). @param {number} [retryMs] */
  _schedule(retryMs) {
    clearTimeout(this.timer);
    this.timer = null;
    const expires = this.expiresAt;
    if (expires === null || this.member._left) return;
    const delay = retryMs ?? Math.min(MAX_TIMER_MS, Math.max(MIN_RENEW_MS, (expires - Date.now()) * RENEW_AT));
    this.timer = setTimeout(() => {
      this.renew().catch((e) => this.member.context._log('getIceServers failed', e));
    }, delay);
  }

  /**
   * Asks the server for fresh credentials (`getIceServers`) and gives them to the member's
   * connections (`setConfiguration`: used by their next ICE gathering, e.g. an ICE restart).
   * @returns {Promise<RTCIceServer[]>}
   */
  async renew() {
    const m = this.member;
    if (m._left) return this.servers;
    this.lastRenewAt = Date.now();
    let r;
    try {
      r = await m.context._request('getIceServers', { memberId: m.id });
    } catch (e) {
      this._schedule(MIN_RENEW_MS);
      throw e;
    }
    if (m._left) return this.servers;
    this.servers = Array.isArray(r.iceServers) ? r.iceServers : [];
    for (const pc of [m._sendPc, m._recvPc]) {
      if (!pc || pc.signalingState === 'closed') continue;
      try {
        pc.setConfiguration({ ...pc.getConfiguration(), iceServers: this.forPc() });
      } catch (e) { m.context._log('setConfiguration failed', e); }
    }
    this._schedule();
    return this.servers;
  }

  /** A rejoin's new member: its servers replace the old ones. @param {RTCIceServer[]|undefined} servers */
  reset(servers) {
    this.servers = Array.isArray(servers) ? servers : [];
    this.lastRenewAt = 0;
    this._schedule();
  }

  /**
   * Watches one new connection for a TURN server refusing the credentials (`icecandidateerror`
   * 401/441). If the connection then does not come up within 10 s (or ICE
   * fails), the member's onFatalError gets `turnCredentialsRejected`; fresh credentials are
   * fetched at once, for the ICE restart that may follow.
   * @param {'send'|'recv'} direction @param {RTCPeerConnection} pc
   */
  watch(direction, pc) {
    const m = this.member;
    const current = () => pc === (direction === 'send' ? m._sendPc : m._recvPc);
    this.refused[direction] = null;
    this.reported[direction] = false;
    clearTimeout(this.failTimers[direction]);
    const up = () => ['connected', 'completed'].includes(pc.iceConnectionState);
    pc.addEventListener('icecandidateerror', (ev) => {
      if (!current() || m._left || !REFUSED.has(ev.errorCode) || !isTurnUrl(ev.url)) return;
      m.context._log(direction, 'TURN refused', ev.url, ev.errorCode, ev.errorText);
      const first = this.refused[direction] === null;
      this.refused[direction] = { url: ev.url, code: ev.errorCode, text: ev.errorText || '' };
      if (!first) return;
      if (Date.now() - this.lastRenewAt > MIN_RENEW_MS) {
        this.renew().catch((e) => m.context._log('getIceServers failed', e));
      }
      this.failTimers[direction] = setTimeout(() => {
        if (current() && !up()) this._report(direction);
      }, FAILURE_TIMEOUT_MS);
    });
    pc.addEventListener('iceconnectionstatechange', () => {
      if (!current()) return;
      if (up()) { clearTimeout(this.failTimers[direction]); return; }
      if (pc.iceConnectionState === 'failed' && this.refused[direction]) this._report(direction);
    });
  }

  /** @param {'send'|'recv'} direction */
  _report(direction) {
    const m = this.member;
    const r = this.refused[direction];
    if (!r || this.reported[direction]) return;
    this.reported[direction] = true;
    clearTimeout(this.failTimers[direction]);
    m.onFatalError.emit(new MinatoError('turnCredentialsRejected',
      `the TURN server ${r.url} refused this member's credentials (${r.code}${r.text ? ' ' + r.text : ''}) ` +
      `and the ${direction} connection did not connect without it: the server's media.turn.secret must be ` +
      'the TURN server\'s static-auth-secret, and both clocks right'));
  }

  /** Stops the timers. With `reason` 'transportClosed' (the server removed the member because a
   * transport did not connect), a TURN refusal not yet reported is reported now, before the
   * member's onLeft and onFatalError say `transportClosed`. @param {string} [reason] */
  stop(reason) {
    if (reason === 'transportClosed') {
      for (const d of ['send', 'recv']) this._report(d);
    }
    clearTimeout(this.timer);
    this.timer = null;
    for (const d of ['send', 'recv']) clearTimeout(this.failTimers[d]);
  }
}
