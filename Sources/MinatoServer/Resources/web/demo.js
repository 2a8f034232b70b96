// The Minato demo page: room list, create, join, camera + mic, a grid of remote videos.
// Everything goes through the SDK at /sdk/minato.js. State is exposed as window.minatoDemo.
import { MinatoContext, SFURoom, MinatoError } from '/sdk/minato.js';

const $ = (id) => document.getElementById(id);
const SESSION_KEY = 'minato-demo-session';
const LOCK_SVG = '<svg viewBox="0 0 14 16" aria-hidden="true"><rect x="1" y="7" width="12" height="9" rx="1.5" fill="currentColor"/>'
  + '<path d="M3.5 7V4.8a3.5 3.5 0 0 1 7 0V7" fill="none" stroke="currentColor" stroke-width="2"/></svg>';

/** Everything the page holds; also handy from the devtools console (and for tests). */
const state = {
  /** @type {MinatoContext|null} */ context: null,
  /** @type {import('/sdk/minato.js').SFURoom|null} */ room: null,
  /** @type {import('/sdk/minato.js').LocalSFURoomMember|null} */ me: null,
  /** @type {MediaStream|null} */ local: null,
  /** publication id → RoomPublication of ours */ myPublications: {},
  /** publication id → {subscription, stream} */ subscriptions: new Map(),
  /** member id → tile element */ tiles: new Map(),
  removers: [],
  rooms: [],
  errors: [],
  joining: false,
};
window.minatoDemo = state;

// ---- messages ------------------------------------------------------------------------------

const FRIENDLY = {
  wrongPassword: 'Wrong password for this room.',
  memberNameDuplicated: 'That name is already taken in this room: choose another one.',
  roomNameDuplicated: 'A room with that name exists already: join it instead.',
  roomNotFound: 'No such room (it may have been closed).',
  invalidParameter: 'Invalid input.',
  limitExceeded: 'A server limit was reached (the room may be full, or this page has made too many rooms or members).',
  connectionLost: 'The connection to the server was lost.',
};

function showError(e, context = '') {
  const name = e instanceof MinatoError ? e.name : (e && e.name) || 'error';
  const detail = e instanceof MinatoError ? e.detail : (e && e.message) || String(e);
  const friendly = FRIENDLY[name] ? `${FRIENDLY[name]} ` : '';
  $('error-text').textContent = `${context ? context + ': ' : ''}${friendly}(${name}: ${detail})`;
  $('error').dataset.errorName = name;
  $('error').hidden = false;
  state.errors.push({ name, detail, context });
  console.warn('[demo]', context, e);
}

function clearError() {
  $('error').hidden = true;
  delete $('error').dataset.errorName;
}

function notice(text) {
  $('notice').textContent = text;
  $('notice').hidden = !text;
}

// ---- room list ------------------------------------------------------------------------------

async function refreshRooms() {
  if (!state.context) return;
  try {
    state.rooms = await state.context.listRooms();
  } catch (e) {
    return; // reconnecting: the status badge says so
  }
  const body = $('room-list');
  body.textContent = '';
  const rooms = [...state.rooms].filter((r) => r.name).sort((a, b) => a.name.localeCompare(b.name));
  if (!rooms.length) {
    const tr = document.createElement('tr');
    tr.className = 'empty';
    tr.innerHTML = '<td colspan="3">No rooms yet: create one.</td>';
    body.append(tr);
    return;
  }
  for (const r of rooms) {
    const tr = document.createElement('tr');
    tr.className = 'room';
    tr.dataset.roomName = r.name;
    tr.dataset.hasPassword = String(r.hasPassword);
    tr.dataset.memberCount = String(r.memberCount);
    if ($('join-room').value === r.name) tr.classList.add('selected');
    const name = document.createElement('td');
    name.className = 'room-name';
    name.textContent = r.name;
    const count = document.createElement('td');
    count.className = 'member-count';
    count.textContent = String(r.memberCount);
    const lock = document.createElement('td');
    lock.className = 'lock';
    if (r.hasPassword) {
      lock.innerHTML = LOCK_SVG;
      lock.title = 'password required';
      lock.setAttribute('aria-label', 'password required');
      lock.dataset.locked = 'true';
    }
    tr.append(name, count, lock);
    tr.addEventListener('click', () => {
      $('join-room').value = r.name;
      for (const row of body.querySelectorAll('tr.room')) row.classList.toggle('selected', row === tr);
      (r.hasPassword ? $('join-password') : $('join-name')).focus();
    });
    body.append(tr);
  }
}

// ---- create / join / leave --------------------------------------------------------------------

async function onCreate(ev) {
  ev.preventDefault();
  clearError();
  const name = $('create-name').value.trim();
  const password = $('create-password').value;
  $('create-button').disabled = true;
  try {
    const room = await SFURoom.create(state.context, { name, password: password || undefined });
    room.dispose();
    $('join-room').value = name;
    $('join-password').value = password;
    notice(`Room ${name} created${password ? ' (with a password)' : ''}. Enter your name and join.`);
    $('join-name').focus();
    refreshRooms();
  } catch (e) {
    showError(e, 'Could not create the room');
  } finally {
    $('create-button').disabled = false;
  }
}

async function onJoin(ev) {
  if (ev) ev.preventDefault();
  clearError();
  await join($('join-room').value.trim(), $('join-password').value, $('join-name').value.trim(), false);
}

async function join(roomName, password, name, replace) {
  if (state.joining || state.me) return;
  state.joining = true;
  $('join-button').disabled = true;
  let room = null;
  try {
    room = await SFURoom.find(state.context, { name: roomName });
    const me = await room.join({ name, password: password || undefined, replace });
    state.room = room;
    state.me = me;
    sessionStorage.setItem(SESSION_KEY, JSON.stringify({ room: roomName, password, name }));
    enterCall();
    await startMedia();
  } catch (e) {
    if (!state.me) {
      if (room) room.dispose();
      showError(e, `Could not join ${roomName}`);
    } else {
      showError(e, 'Camera/microphone');
    }
  } finally {
    state.joining = false;
    $('join-button').disabled = false;
  }
}

function enterCall() {
  const { room, me } = state;
  notice('');
  $('lobby').hidden = true;
  $('call').hidden = false;
  $('call-room').textContent = room.name;
  $('call-me').textContent = me.name;
  document.title = `${me.name} in ${room.name} — Minato`;
  tileFor(me, true);
  for (const m of room.members) if (m.id !== me.id) tileFor(m, false);

  const on = (event, handler) => state.removers.push(event.add(handler));
  on(room.onMemberJoined, ({ member }) => { if (member.id !== me.id) tileFor(member, false); });
  on(room.onMemberLeft, ({ member }) => removeTile(member.id));
  on(room.onStreamPublished, ({ publication }) => maybeSubscribe(publication));
  on(room.onStreamUnpublished, ({ publication }) => {
    state.subscriptions.delete(publication.id);
    const tile = state.tiles.get(publication.publisherId);
    if (tile && publication.contentType === 'video') tile.classList.remove('has-video');
  });
  on(room.onPublicationDisabled, ({ publication }) => setBadge(publication, true));
  on(room.onPublicationEnabled, ({ publication }) => setBadge(publication, false));
  on(room.onMemberMetadataUpdated, ({ member }) => {
    const tile = state.tiles.get(member.id);
    if (tile) tile.querySelector('.label').textContent = labelOf(member, member.id === me.id);
  });
  // The speakers' tiles are outlined, the dominant (loudest) one more strongly.
  on(room.onActiveSpeakersChanged, ({ speakers }) => {
    for (const [id, tile] of state.tiles) {
      const i = speakers.findIndex((s) => s.member.id === id);
      tile.classList.toggle('speaking', i >= 0);
      tile.classList.toggle('dominant', i === 0);
    }
  });
  // A recorded member's tile has a red dot (the room snapshot says who is recorded already).
  const markRecorded = () => {
    for (const [id, tile] of state.tiles) tile.classList.toggle('recorded', room.isRecording(id));
  };
  on(room.onRecordingStarted, markRecorded);
  on(room.onRecordingStopped, markRecorded);
  on(room.onMemberJoined, markRecorded);
  markRecorded();
  watchConnection(me, on);
  on(me.onLeft, ({ reason }) => {
    if (reason !== 'left') showError(new MinatoError(reason, `you are no longer in the room (${reason})`), 'Disconnected');
    exitCall(false);
  });
  for (const p of room.publications) maybeSubscribe(p);
}

/**
 * The local tile's connection line: what is being restored (media per direction, signaling) while
 * the SDK recovers, else the connection quality; its title says how long the last recovery took.
 */
function watchConnection(me, on) {
  const tile = state.tiles.get(me.id);
  const el = tile && tile.querySelector('.net');
  if (!el) return;
  const down = new Set();
  const what = ({ kind, direction }) => (kind === 'media' ? `media (${direction})` : 'signaling');
  const render = () => {
    el.dataset.quality = me.connectionQuality;
    el.dataset.state = down.size ? 'reconnecting' : 'connected';
    el.textContent = down.size ? `reconnecting ${[...down].join(', ')}…` : `connection ${me.connectionQuality}`;
  };
  on(me.onReconnecting, (e) => { down.add(what(e)); render(); });
  on(me.onReconnected, (e) => {
    down.delete(what(e));
    el.title = `${what(e)} back after ${(e.durationMs / 1000).toFixed(1)} s (${e.reason})`;
    render();
  });
  on(me.onConnectionQualityChanged, ({ packetLoss, rttMs }) => {
    const loss = packetLoss === null || packetLoss === undefined ? '' : `loss ${(packetLoss * 100).toFixed(1)}%`;
    el.dataset.detail = [loss, rttMs === null || rttMs === undefined ? '' : `RTT ${rttMs} ms`].filter(Boolean).join(', ');
    render();
  });
  render();
}

async function startMedia() {
  const { me } = state;
  state.local = await navigator.mediaDevices.getUserMedia({
    audio: true,
    video: { width: { ideal: 640 }, height: { ideal: 480 }, frameRate: { ideal: 24 } },
  });
  if (state.me !== me) { state.local.getTracks().forEach((t) => t.stop()); return; }
  const tile = state.tiles.get(me.id);
  const video = state.local.getVideoTracks()[0];
  const audio = state.local.getAudioTracks()[0];
  if (video && tile) {
    tile.querySelector('video').srcObject = new MediaStream([video]);
    tile.classList.add('has-video');
  }
  if (audio) {
    const p = await me.publish(audio, { metadata: JSON.stringify({ source: 'microphone' }) });
    state.myPublications.audio = p;
    $('mute-audio').disabled = false;
  }
  if (video) {
    const p = await me.publish(video, { metadata: JSON.stringify({ source: 'camera' }) });
    state.myPublications.video = p;
    $('mute-video').disabled = false;
  }
}

async function maybeSubscribe(publication) {
  const { me } = state;
  if (!me || publication.publisherId === me.id || state.subscriptions.has(publication.id)) return;
  if (publication.contentType === 'data') return;   // the demo shows media only
  state.subscriptions.set(publication.id, null);
  try {
    const { subscription, stream } = await me.subscribe(publication.id);
    if (!state.subscriptions.has(publication.id)) {  // unpublished meanwhile
      return;
    }
    state.subscriptions.set(publication.id, { subscription, stream });
    const tile = tileFor(publication.publisher, false);
    if (!tile) return;
    if (publication.contentType === 'video') {
      stream.attach(tile.querySelector('video'));
      tile.classList.add('has-video');
      tile.dataset.videoPublicationId = publication.id;
    } else {
      stream.attach(tile.querySelector('audio'));
      tile.dataset.audioPublicationId = publication.id;
    }
    setBadge(publication, publication.state === 'disabled');
  } catch (e) {
    state.subscriptions.delete(publication.id);
    if (e instanceof MinatoError && ['publicationNotFound', 'notJoined', 'memberNotFound'].includes(e.name)) return;
    if (e instanceof MinatoError && e.name === 'codecNotSupported') {
      // e.g. an H264 camera seen from Firefox: say so on the tile instead of an error box.
      const tile = tileFor(publication.publisher, false);
      const codec = (publication.codecCapabilities[0] || {}).mimeType || 'its codec';
      if (tile) tile.querySelector('.label').title = `This browser cannot decode ${codec}.`;
      return;
    }
    showError(e, 'Could not receive a stream');
  }
}

function labelOf(member, isMe) {
  const name = member.name || member.id.slice(0, 8);
  return isMe ? `${name} (you)` : name;
}

function tileFor(member, isMe) {
  if (!member) return null;
  let tile = state.tiles.get(member.id);
  if (tile) return tile;
  tile = document.createElement('div');
  tile.className = 'tile' + (isMe ? ' local' : ' remote');
  tile.dataset.memberId = member.id;
  tile.dataset.memberName = member.name || '';
  tile.innerHTML = '<video autoplay playsinline></video><audio autoplay></audio>'
    + '<div class="placeholder">waiting for video…</div><div class="label"></div><div class="rec" title="recorded">REC</div>'
    + '<div class="badges"><span class="badge mic-off" hidden>mic off</span><span class="badge cam-off" hidden>camera off</span></div>'
    + (isMe ? '<div class="net" data-state="connected" data-quality="good"></div>' : '');
  tile.querySelector('.label').textContent = labelOf(member, isMe);
  if (isMe) tile.querySelector('video').muted = true;
  state.tiles.set(member.id, tile);
  const grid = $('grid');
  if (isMe) grid.prepend(tile); else grid.append(tile);
  return tile;
}

function removeTile(memberId) {
  const tile = state.tiles.get(memberId);
  if (!tile) return;
  for (const el of tile.querySelectorAll('video, audio')) el.srcObject = null;
  tile.remove();
  state.tiles.delete(memberId);
}

function setBadge(publication, off) {
  const tile = state.tiles.get(publication.publisherId);
  if (!tile) return;
  const badge = tile.querySelector(publication.contentType === 'audio' ? '.mic-off' : '.cam-off');
  badge.hidden = !off;
}

async function toggle(kind) {
  const pub = state.myPublications[kind];
  if (!pub) return;
  const button = $(kind === 'audio' ? 'mute-audio' : 'mute-video');
  button.disabled = true;
  try {
    if (pub.state === 'disabled') {
      await pub.enable();
      pub.state = 'enabled';
    } else {
      await pub.disable();
      pub.state = 'disabled';
    }
    const off = pub.state === 'disabled';
    button.textContent = kind === 'audio' ? (off ? 'Unmute mic' : 'Mute mic') : (off ? 'Start camera' : 'Stop camera');
    button.classList.toggle('off', off);
    button.dataset.state = pub.state;
    setBadge(pub, off);
  } catch (e) {
    showError(e, kind === 'audio' ? 'Mute' : 'Camera');
  } finally {
    button.disabled = false;
  }
}

async function onLeave() {
  const me = state.me;
  sessionStorage.removeItem(SESSION_KEY);
  if (me) {
    try { await me.leave(); } catch (e) { /* gone already */ }
  }
  exitCall(true);
}

function exitCall(clearSession) {
  if (clearSession) sessionStorage.removeItem(SESSION_KEY);
  for (const r of state.removers) r();
  state.removers = [];
  for (const id of [...state.tiles.keys()]) removeTile(id);
  if (state.local) state.local.getTracks().forEach((t) => t.stop());
  if (state.room) state.room.dispose();
  Object.assign(state, { room: null, me: null, local: null, myPublications: {} });
  state.subscriptions = new Map();
  for (const id of ['mute-audio', 'mute-video']) {
    $(id).disabled = true;
    $(id).classList.remove('off');
  }
  $('mute-audio').textContent = 'Mute mic';
  $('mute-video').textContent = 'Stop camera';
  $('call').hidden = true;
  $('lobby').hidden = false;
  document.title = 'Minato demo';
  refreshRooms();
}

// ---- start --------------------------------------------------------------------------------------

async function main() {
  $('error-close').addEventListener('click', clearError);
  $('create-form').addEventListener('submit', onCreate);
  $('join-form').addEventListener('submit', onJoin);
  $('refresh').addEventListener('click', refreshRooms);
  $('mute-audio').addEventListener('click', () => toggle('audio'));
  $('mute-video').addEventListener('click', () => toggle('video'));
  $('leave').addEventListener('click', onLeave);
  try {
    state.context = await MinatoContext.create();
  } catch (e) {
    $('conn').dataset.state = 'closed';
    $('conn').textContent = 'offline';
    showError(e, 'Cannot reach the server');
    return;
  }
  const setConn = (s) => { $('conn').dataset.state = s; $('conn').textContent = s; };
  setConn(state.context.connectionState);
  state.context.onConnectionStateChanged.add(setConn);
  await refreshRooms();
  setInterval(refreshRooms, 2000);
  document.body.dataset.ready = 'true';
  // A reload of a tab that was in a call joins again (replacing the old member if it lingers).
  const saved = sessionStorage.getItem(SESSION_KEY);
  if (saved) {
    try {
      const s = JSON.parse(saved);
      $('join-room').value = s.room;
      $('join-password').value = s.password || '';
      $('join-name').value = s.name;
      await join(s.room, s.password, s.name, true);
    } catch (e) {
      sessionStorage.removeItem(SESSION_KEY);
    }
  }
}

main();
