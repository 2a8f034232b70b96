// Minato browser SDK: a joined member's recovery (internal; the entry point is minato.js).
// Watches the member's two RTCPeerConnections, restarts ICE on one that lost its path (the
// network changed, a NAT binding expired), tells the application (LocalSFURoomMember's
// onReconnecting / onReconnected / onConnectionQualityChanged), and rates the connection
// from getStats. docs/sdk.md "Recovery" is the contract; this file is the how.

import { MinatoError, sleep } from './core.js';

/** Loss (share of packets, both directions, the worse one) and round-trip time bounds of the
 * quality levels. 'good': NACK/RTX and Opus FEC repair what is lost (at 5% random loss the suite
 * still decodes every frame, README), RTT within ITU-T G.114's 150 ms one-way for a natural
 * conversation; 'poor': repairs show (late frames, concealed audio), RTT up to G.114's 400 ms
 * one-way limit; 'bad': beyond either, or media is down. */
export const QUALITY_THRESHOLDS = Object.freeze({
  good: { loss: 0.03, rttMs: 300 },
  poor: { loss: 0.10, rttMs: 800 },
});

/** Fewer packets than this in a sample (per direction) say nothing about loss. */
const MIN_PACKETS_FOR_LOSS = 20;

/** After a restart's negotiation: how often the connection is checked for packets again. */
const CHECK_EVERY_MS = 200;

/** How often the connections' received bytes are read to notice a stall, how long packets must
 * have arrived at every read before a stall counts, and how long a stall must last. On a
 * connection that carries media (or, for the send connection, the server's transport-wide
 * feedback and reports) packets arrive every few tens of milliseconds, so a second of silence
 * means the path is gone, well before Chromium's ICE says `disconnected` (2.5 s without a
 * packet at best, 6 s after an address change here). */
const FLOW_EVERY_MS = 500;
const FLOW_STEADY_READS = 4;
const STALL_MS = 1000;

/** How recently a signaling frame must have arrived for the socket to count as alive without a
 * probe when media stalls (a probe is cheap, but not needed then). */
const SIGNALING_RECENT_MS = 1000;

/** How long a probe of the signaling socket may wait when the network may have changed (the
 * browser said so, or media stalled): on a live path it is answered within a round trip, and a
 * socket whose address is gone stays silent, so waiting longer only delays the reconnect. */
export const NETWORK_PROBE_MS = 1500;

/**
 * A number that grows whenever a connection receives something: RTP packets received, and bytes
 * on its candidate pairs and its transport (Chromium updates these at different moments; any
 * growth counts).
 * @param {RTCPeerConnection} pc @returns {Promise<number>}
 */
async function receivedCounter(pc) {
  let n = 0;
  (await pc.getStats()).forEach((s) => {
    if (s.type === 'inbound-rtp') n += s.packetsReceived || 0;
    else if (s.type === 'candidate-pair' || s.type === 'transport') n += s.bytesReceived || 0;
  });
  return n;
}

/**
 * The id of the connection's selected candidate pair (null: none). An ICE restart that worked
 * has a pair of new candidates selected (new credentials, new ports), whether media flows or not.
 * @param {RTCPeerConnection} pc @returns {Promise<string|null>}
 */
async function selectedPair(pc) {
  let id = null;
  (await pc.getStats()).forEach((s) => {
    if (s.type === 'transport' && s.selectedCandidatePairId) id = s.selectedCandidatePairId;
    else if (s.type === 'candidate-pair' && s.selected && id === null) id = s.id;   // Firefox: no transport stats
  });
  return id;
}

/**
 * The state of one of the member's connections ('send' or 'recv').
 */
class Leg {
  /** @param {'send'|'recv'} direction */
  constructor(direction) {
    this.direction = direction;
    /** @type {RTCPeerConnection|null} */
    this.pc = null;
    /** Whether ICE has connected on this connection once (before that, failing is not "lost"). */
    this.everConnected = false;
    /** @type {{since: number, reason: string}|null} set while the connection is being restored */
    this.down = null;
    /** A restart (negotiation plus waiting for packets) is running. */
    this.running = false;
    /** The network changed while a restart was running: restart again when it ends. */
    this.again = false;
    /** Restarts in the current episode. */
    this.attempts = 0;
    /** Restarts of this connection, in total (diagnostics, tests). */
    this.restarts = 0;
    this.timer = null;
    /** The last transport counters read, to tell whether packets arrive. */
    this.lastBytes = null;
    /** Previous getStats counters, for loss over a sample. */
    this.prev = null;
    /** The stall watch: bytes received at the last read, when they last grew, reads in a row
     * that saw them grow. */
    this.flowBytes = null;
    this.flowAt = 0;
    this.flowReads = 0;
    /** When the stall watch saw this connection stop receiving (0: it receives). */
    this.stalledAt = 0;
    this.gaveUp = false;
  }
}

/**
 * One joined member's recovery: ICE restarts with backoff, the application's events, the
 * connection quality. Lives on the page's main thread with its member; made by the member,
 * fed by the member's connections and by the context (signaling lost/restored, network change).
 */
export class MediaRecovery {
  /** @param {import('./member.js').LocalSFURoomMember} member */
  constructor(member) {
    this.member = member;
    this.context = member.context;
    this.legs = { send: new Leg('send'), recv: new Leg('recv') };
    /** @type {'good'|'poor'|'bad'} */
    this.quality = 'good';
    /** The level the last sample pointed to (a change is reported when two samples agree). */
    this._candidate = null;
    this._qualityTimer = null;
    /** @type {{since: number, reason: string}|null} set while the signaling socket is away */
    this.signalingDown = null;
    this.stopped = false;
  }

  get options() { return this.context.options; }

  /**
   * Follows a connection the member made (a rejoin makes new ones: the old one's reports are
   * ignored from then on).
   * @param {'send'|'recv'} direction @param {RTCPeerConnection} pc
   */
  watch(direction, pc) {
    const leg = new Leg(direction);
    leg.restarts = this.legs[direction].restarts;
    clearTimeout(this.legs[direction].timer);
    this.legs[direction] = leg;
    leg.pc = pc;
    pc.addEventListener('iceconnectionstatechange', () => {
      if (leg !== this.legs[direction] || this.stopped) return;
      this._onIceState(leg);
    });
    if (!this._qualityTimer && this.options.qualityIntervalMs > 0) {
      this._qualityTimer = setInterval(() => { this._sampleQuality(); }, this.options.qualityIntervalMs);
    }
    if (!this._flowTimer && this.options.iceRestart) {
      this._flowTimer = setInterval(() => { this._watchFlow(); }, FLOW_EVERY_MS);
    }
  }

  /** The member left or was suspended for a rejoin: timers stop, nothing more is reported. */
  stop() {
    this.stopped = true;
    clearInterval(this._qualityTimer);
    this._qualityTimer = null;
    clearInterval(this._flowTimer);
    this._flowTimer = null;
    for (const leg of Object.values(this.legs)) { clearTimeout(leg.timer); leg.timer = null; leg.down = null; }
  }

  /** The member came back with new connections after a rejoin. */
  resume() {
    this.stopped = false;
    this.legs = { send: new Leg('send'), recv: new Leg('recv') };
    this._candidate = null;
  }

  /** Whether this connection is failing in a way recovery takes care of (not a DTLS failure). */
  handlesFailure(direction) {
    const leg = this.legs[direction];
    return this.options.iceRestart && !this.stopped && leg.everConnected && !leg.gaveUp
      && leg.pc && ['disconnected', 'failed', 'checking'].includes(leg.pc.iceConnectionState);
  }

  // ---- ICE ------------------------------------------------------------------------------------

  /** @param {Leg} leg */
  _onIceState(leg) {
    const state = leg.pc.iceConnectionState;
    this.context._log(leg.direction, 'ice', state);
    if (state === 'connected' || state === 'completed') {
      leg.everConnected = true;
      this._legUp(leg);
    } else if (!leg.everConnected || !this.options.iceRestart) {
      // The first connection is the member's own business (publish/subscribe fail as before).
    } else if (state === 'disconnected') {
      // Chromium says `disconnected` after ~2.5 s with nothing received; a blip (a burst of
      // loss, a Wi-Fi roam) clears within the grace by itself, so restart only after it.
      this._legDown(leg, 'iceDisconnected', this.options.iceRestartGraceMs);
      // Media stalled: the signaling socket may be dead too (same network). Check it now, so
      // that a restart does not wait on a socket that will never answer.
      this.context._probeSignaling(this.options.heartbeatTimeoutMs, SIGNALING_RECENT_MS);
    } else if (state === 'failed') {
      this._legDown(leg, 'iceFailed', 0);
    }
  }

  /**
   * @param {Leg} leg @param {string} reason @param {number} delayMs until the first restart
   */
  _legDown(leg, reason, delayMs) {
    if (this.stopped || this.member._left || leg.gaveUp) return;
    if (!leg.down) {
      leg.down = { since: Date.now(), reason };
      leg.attempts = 0;
      this.member.onReconnecting.emit({ kind: 'media', direction: leg.direction, reason });
      this._setQuality('bad', { reason: 'mediaDown' }, true);
    }
    if (leg.running) {
      if (delayMs === 0) leg.again = true;
      return;
    }
    if (leg.timer && delayMs > 0) return;
    clearTimeout(leg.timer);
    leg.timer = setTimeout(() => { leg.timer = null; this._run(leg); }, delayMs);
  }

  /** @param {Leg} leg */
  _legUp(leg) {
    clearTimeout(leg.timer);
    leg.timer = null;
    if (!leg.down) return;
    const { since, reason } = leg.down;
    leg.down = null;
    this.member.onReconnected.emit({ kind: 'media', direction: leg.direction, reason,
      durationMs: Date.now() - since, restarts: leg.attempts });
    leg.attempts = 0;
    this._candidate = null;
  }

  /** The browser said the network changed: restart ICE on every connection that was up. */
  networkChanged() {
    if (!this.options.iceRestart || this.stopped || this.member._left) return;
    for (const leg of Object.values(this.legs)) {
      if (!leg.pc || !leg.everConnected || leg.pc.connectionState === 'closed') continue;
      this._legDown(leg, 'networkChanged', 0);
    }
  }

  /**
   * Restores one connection: restart ICE, wait for packets, again with backoff while it stays
   * down, at most one restart at a time, none while the signaling socket is away (the restart's
   * request waits for the member to be taken back).
   * @param {Leg} leg
   */
  async _run(leg) {
    if (leg.running) { leg.again = true; return; }
    leg.running = true;
    const member = this.member;
    try {
      while (leg.down && !this.stopped && !member._left && leg === this.legs[leg.direction]) {
        if (Date.now() - leg.down.since > this.options.mediaRecoveryTimeoutMs) {
          leg.gaveUp = true;
          member.onFatalError.emit(new MinatoError('mediaError',
            `the ${leg.direction} connection could not be restored within ${this.options.mediaRecoveryTimeoutMs} ms`));
          return;
        }
        leg.again = false;
        try {
          await this.context._signalingReady();
        } catch (e) { return; }
        if (!leg.down || this.stopped || member._left) return;
        // Packets may be flowing again already (the old path came back while we waited for the
        // socket). Not checked when the network changed (the old path may work, but for how long)
        // or right after a check said nothing arrives (mediaStalled).
        if (leg.attempts > 0 || !['networkChanged', 'mediaStalled'].includes(leg.down.reason)) {
          if (await this._flowing(leg, 0)) { this._legUp(leg); return; }
        }
        leg.attempts += 1;
        leg.restarts += 1;
        const wait = Math.min(this.options.maxIceRestartBackoffMs, this.options.iceRestartBackoffMs * 2 ** (leg.attempts - 1));
        this.context._log(leg.direction, 'ice restart', leg.attempts, leg.down.reason);
        let pairBefore = null;
        try { pairBefore = await selectedPair(leg.pc); } catch (e) { /* closed */ }
        try {
          await member._restartIce(leg.direction, Math.max(wait, 5000));
        } catch (e) {
          if (member._left || this.stopped) return;
          const name = e instanceof MinatoError ? e.name : '';
          this.context._log(leg.direction, 'ice restart failed', e);
          if (name === 'connectionLost') continue;      // the next attempt waits for the reconnect
          if (!['timeout', 'serviceUnavailable', 'mediaError', 'limitExceeded'].includes(name)) {
            // The server cannot restart this connection (an old server: methodNotFound; the
            // member is gone: notJoined, memberNotFound): nothing to retry.
            leg.gaveUp = true;
            member.onFatalError.emit(e instanceof MinatoError ? e : new MinatoError('mediaError', String(e)));
            return;
          }
          await this._sleepUnlessAgain(leg, wait);
          continue;
        }
        if (await this._waitFlowing(leg, wait, pairBefore)) { this._legUp(leg); return; }
      }
    } finally {
      leg.running = false;
      // A network change (or a failure) that came in during the last step.
      if (leg.down && leg.again && !this.stopped && !member._left && leg === this.legs[leg.direction]) {
        leg.again = false;
        setTimeout(() => this._run(leg), 0);
      }
    }
  }

  /** @param {Leg} leg @param {number} ms */
  async _sleepUnlessAgain(leg, ms) {
    const end = Date.now() + ms;
    while (Date.now() < end && !leg.again && leg.down && !this.stopped) await sleep(CHECK_EVERY_MS);
  }

  /**
   * Waits up to `ms` for the restart to take: ICE connected on a newly selected candidate pair,
   * or packets arriving again (or an ICE state change saying so); true when it did.
   * @param {Leg} leg @param {number} ms @param {string|null} pairBefore the pair selected before
   */
  async _waitFlowing(leg, ms, pairBefore) {
    const end = Date.now() + ms;
    leg.lastBytes = null;
    while (Date.now() < end) {
      if (!leg.down) return true;
      if (this.stopped || this.member._left || leg.again) return false;
      if (await this._flowing(leg, CHECK_EVERY_MS)) return true;
      if (['connected', 'completed'].includes(leg.pc.iceConnectionState)) {
        const pair = await selectedPair(leg.pc).catch(() => null);
        if (pair && pair !== pairBefore) return true;
      }
      await sleep(CHECK_EVERY_MS);
    }
    return false;
  }

  /**
   * Whether ICE is connected and packets arrived on the selected pair since the last look (the
   * server sends RTCP on both connections every second, media on the receive one). With
   * `sinceMs` 0 it looks twice, 500 ms apart.
   * @param {Leg} leg @param {number} sinceMs
   */
  async _flowing(leg, sinceMs) {
    const pc = leg.pc;
    if (!pc || !['connected', 'completed'].includes(pc.iceConnectionState)) return false;
    const read = () => receivedCounter(pc);
    if (sinceMs === 0) {
      const a = await read();
      await sleep(500);
      return (await read()) > a && ['connected', 'completed'].includes(pc.iceConnectionState);
    }
    const b = await read();
    const grew = leg.lastBytes !== null && b > leg.lastBytes;
    leg.lastBytes = b;
    return grew;
  }

  /**
   * Notices a connection that stopped receiving after packets had been arriving steadily: the
   * network under it may have changed (an address gone). Media alone cannot say whether the
   * publisher just went quiet, so this only probes the signaling socket at once: if that is dead
   * too, the socket is given up and reconnected, and once the member is taken back
   * (`signalingRestored`) every connection that still receives nothing restarts ICE.
   */
  async _watchFlow() {
    if (this.stopped || this.member._left) return;
    for (const leg of Object.values(this.legs)) {
      const pc = leg.pc;
      if (!pc || !leg.everConnected || leg.down || !['connected', 'completed'].includes(pc.iceConnectionState)) {
        leg.flowReads = 0;
        continue;
      }
      let bytes = 0;
      try { bytes = await receivedCounter(pc); } catch (e) { continue; }
      const now = Date.now();
      if (leg.flowBytes === null || bytes > leg.flowBytes) {
        if (leg.flowBytes !== null) leg.flowReads += 1;
        leg.flowBytes = bytes;
        leg.flowAt = now;
        leg.stalledAt = 0;
      } else if (leg.flowReads >= FLOW_STEADY_READS && now - leg.flowAt >= STALL_MS) {
        leg.flowReads = 0;
        leg.stalledAt = now;
        this.context._log(leg.direction, 'no packets for', now - leg.flowAt, 'ms: probing the signaling socket');
        this.context._probeSignaling(NETWORK_PROBE_MS);
      }
    }
  }

  // ---- signaling ------------------------------------------------------------------------------

  /** @param {string} reason 'socketClosed' | 'unresponsive' | … */
  signalingLost(reason) {
    if (this.stopped || this.member._left || this.signalingDown) return;
    this.signalingDown = { since: Date.now(), reason };
    this.member.onReconnecting.emit({ kind: 'signaling', reason });
  }

  /**
   * The member was taken back on a new socket and the room's missed events replayed. A
   * connection that went down meanwhile restarts now (its restart was waiting for this).
   * @param {number} replayedEvents
   */
  signalingRestored(replayedEvents) {
    if (this.stopped || this.member._left || !this.signalingDown) return;
    const { since, reason } = this.signalingDown;
    this.signalingDown = null;
    this.member.onReconnected.emit({ kind: 'signaling', reason, durationMs: Date.now() - since, replayedEvents });
    if (!this.options.iceRestart) return;
    // A socket that went silent (rather than closing) died with its path, often with the
    // network under both: restart every connection that receives nothing now, without waiting
    // for ICE to say so (it takes seconds). One that carries packets is left alone.
    for (const leg of Object.values(this.legs)) {
      if (!leg.pc || !leg.everConnected || leg.down || leg.pc.connectionState === 'closed') continue;
      const state = leg.pc.iceConnectionState;
      if (state === 'disconnected' || state === 'failed') {
        this._legDown(leg, state === 'failed' ? 'iceFailed' : 'iceDisconnected', 0);
      } else if (reason !== 'socketClosed' && leg.stalledAt > 0) {
        // It stopped receiving (and has not received since) when the socket went silent.
        this._legDown(leg, 'mediaStalled', 0);
      } else if (reason !== 'socketClosed') {
        this._flowing(leg, 0).then((flowing) => {
          if (!flowing && !leg.down && leg === this.legs[leg.direction]) this._legDown(leg, 'mediaStalled', 0);
        });
      }
    }
  }

  // ---- quality --------------------------------------------------------------------------------

  async _sampleQuality() {
    if (this.stopped || this.member._left) return;
    let worstLoss = null;
    let rttMs = null;
    for (const leg of Object.values(this.legs)) {
      const pc = leg.pc;
      if (!pc || pc.connectionState === 'closed') continue;
      let report;
      try { report = await pc.getStats(); } catch (e) { continue; }
      const now = { sent: 0, lostRemote: 0, received: 0, lost: 0 };
      report.forEach((s) => {
        if (s.type === 'outbound-rtp') now.sent += s.packetsSent || 0;
        else if (s.type === 'remote-inbound-rtp') {
          now.lostRemote += Math.max(0, s.packetsLost || 0);
          if (typeof s.roundTripTime === 'number') rttMs = Math.max(rttMs ?? 0, s.roundTripTime * 1000);
        } else if (s.type === 'inbound-rtp') { now.received += s.packetsReceived || 0; now.lost += Math.max(0, s.packetsLost || 0); }
        else if (s.type === 'transport' && s.selectedCandidatePairId) {
          const pair = report.get(s.selectedCandidatePairId);
          if (pair && typeof pair.currentRoundTripTime === 'number') rttMs = Math.max(rttMs ?? 0, pair.currentRoundTripTime * 1000);
        }
      });
      const prev = leg.prev;
      leg.prev = now;
      if (!prev) continue;
      const sent = now.sent - prev.sent;
      const lostRemote = now.lostRemote - prev.lostRemote;
      const received = now.received - prev.received;
      const lost = now.lost - prev.lost;
      if (sent >= MIN_PACKETS_FOR_LOSS) worstLoss = Math.max(worstLoss ?? 0, Math.min(1, Math.max(0, lostRemote) / sent));
      if (received + lost >= MIN_PACKETS_FOR_LOSS) worstLoss = Math.max(worstLoss ?? 0, Math.max(0, lost) / (received + lost));
    }
    if (this.stopped || this.member._left) return;
    const down = Object.values(this.legs).some((l) => l.down);
    let level;
    if (down) level = 'bad';
    else if (worstLoss === null && rttMs === null) return;
    else {
      const loss = worstLoss ?? 0;
      const rtt = rttMs ?? 0;
      const t = QUALITY_THRESHOLDS;
      level = loss <= t.good.loss && rtt <= t.good.rttMs ? 'good' : loss <= t.poor.loss && rtt <= t.poor.rttMs ? 'poor' : 'bad';
    }
    const info = { packetLoss: worstLoss, rttMs: rttMs === null ? null : Math.round(rttMs) };
    if (down) info.reason = 'mediaDown';
    this._setQuality(level, info, false);
  }

  /**
   * Reports a new level once two samples in a row agree (one sample is one `qualityIntervalMs`:
   * a single burst of loss does not flip it), at once when media went down.
   * @param {'good'|'poor'|'bad'} level @param {object} info @param {boolean} now
   */
  _setQuality(level, info, now) {
    if (level === this.quality) { this._candidate = null; return; }
    if (!now && this._candidate !== level) { this._candidate = level; return; }
    this._candidate = null;
    const previous = this.quality;
    this.quality = level;
    this.member.onConnectionQualityChanged.emit({ quality: level, previous, packetLoss: null, rttMs: null, ...info });
  }
}
