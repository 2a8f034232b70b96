// Minato browser SDK: errors, events and small helpers shared by the other modules.
// Part of the SDK whose entry point is minato.js (import from there; names exported here that
// minato.js does not re-export are internal).

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
export function mediaError(e, what) {
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

export const NAME_RE = /^[A-Za-z0-9._%*-]{1,128}$/;

/** A serial queue: jobs run one after the other, in the order they were enqueued. */
export class SerialQueue {
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

/** @param {number} ms @returns {Promise<void>} */
export function sleep(ms) { return new Promise((resolve) => setTimeout(resolve, ms)); }

/**
 * Whether a failed request may succeed when sent again shortly: the server said
 * `serviceUnavailable` (in a cluster: the node that hosts the room cannot be reached yet), or
 * the request never got an answer (`timeout`, `connectionLost`).
 * @param {any} e
 */
export function isRetryable(e) {
  return e instanceof MinatoError && ['serviceUnavailable', 'timeout', 'connectionLost'].includes(e.name);
}

export function defaultUrl() {
  if (typeof location === 'undefined' || !location.host) {
    throw new MinatoError('invalidParameter', 'no page origin: pass { url: "ws://host:port/ws" }');
  }
  return `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/ws`;
}

/**
 * The codecs this browser can decode for each of `kinds`, as `[{mimeType}]` (RTX, RED and FEC
 * formats left out); empty where the browser does not say (no RTCRtpReceiver.getCapabilities).
 * @param {('audio'|'video')[]} kinds
 * @returns {{mimeType: string}[]}
 */
export function receiveCodecCapabilities(kinds) {
  const out = [];
  if (typeof RTCRtpReceiver === 'undefined' || !RTCRtpReceiver.getCapabilities) return out;
  for (const kind of kinds) {
    const caps = RTCRtpReceiver.getCapabilities(kind);
    for (const c of caps ? caps.codecs : []) {
      if (/\/(rtx|red|ulpfec|flexfec-03)$/i.test(c.mimeType)) continue;
      if (!out.some((o) => o.mimeType.toLowerCase() === c.mimeType.toLowerCase())) out.push({ mimeType: c.mimeType });
    }
  }
  return out;
}
