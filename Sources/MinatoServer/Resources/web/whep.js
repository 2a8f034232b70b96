// The WHEP player page: watches one member of a room with a plain RTCPeerConnection and one
// HTTP exchange (no SDK). POST /whep/{room}/{member} with a recvonly offer carrying every ICE
// candidate; the 201 answer starts the media; DELETE on its Location stops it.
// window.whep exposes the state (for tests and the console).

const $ = (id) => document.getElementById(id);
const state = { pc: null, location: null, status: 'stopped', error: null };
window.whep = state;

function show(status, error) {
  state.status = status;
  state.error = error || null;
  $('state').textContent = status;
  $('state').dataset.state = status === 'playing' ? 'connected' : status === 'connecting' ? 'connecting' : 'closed';
  $('error').hidden = !error;
  $('error-text').textContent = error || '';
  $('play').disabled = status === 'connecting' || status === 'playing';
  $('stop').disabled = !state.pc;
}

/** Resolves when ICE gathering is complete (or after `ms`: the offer goes with what there is). */
function gathered(pc, ms = 2000) {
  if (pc.iceGatheringState === 'complete') return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => { if (pc.iceGatheringState === 'complete') { pc.removeEventListener('icegatheringstatechange', done); resolve(); } };
    pc.addEventListener('icegatheringstatechange', done);
    setTimeout(resolve, ms);
  });
}

async function play(room, member, token) {
  await stop();
  show('connecting');
  const pc = new RTCPeerConnection({ iceServers: [], bundlePolicy: 'max-bundle' });
  state.pc = pc;
  pc.addTransceiver('audio', { direction: 'recvonly' });
  pc.addTransceiver('video', { direction: 'recvonly' });
  const stream = new MediaStream();
  pc.ontrack = (e) => { stream.addTrack(e.track); $('video').srcObject = stream; };
  pc.onconnectionstatechange = () => {
    if (pc.connectionState === 'connected') show('playing');
    if (pc.connectionState === 'failed') show('failed', 'The media connection failed.');
  };
  try {
    await pc.setLocalDescription(await pc.createOffer());
    await gathered(pc);
    const headers = { 'Content-Type': 'application/sdp' };
    if (token) headers.Authorization = `Bearer ${token}`;
    const url = `/whep/${encodeURIComponent(room)}/${encodeURIComponent(member)}`;
    const r = await fetch(url, { method: 'POST', headers, body: pc.localDescription.sdp });
    const text = await r.text();
    if (r.status !== 201) throw new Error(`${r.status}: ${text.trim()}`);
    state.location = r.headers.get('Location');
    await pc.setRemoteDescription({ type: 'answer', sdp: text });
  } catch (e) {
    pc.close();
    state.pc = null;
    show('failed', String(e.message || e));
  }
}

async function stop() {
  const { pc, location } = state;
  state.pc = null;
  state.location = null;
  // DELETE first: closing the connection first would end the session as a lost transport.
  if (location) { try { await fetch(location, { method: 'DELETE' }); } catch (e) { /* the server ends it on its own */ } }
  if (pc) pc.close();
  show('stopped');
}

/** Inbound video counters, for the status line and tests. */
state.stats = async () => {
  const out = { framesDecoded: 0, frameWidth: 0, frameHeight: 0, audioPackets: 0, codec: null };
  if (!state.pc) return out;
  const report = await state.pc.getStats();
  report.forEach((s) => {
    if (s.type === 'inbound-rtp' && s.kind === 'video') {
      out.framesDecoded += s.framesDecoded || 0; out.frameWidth = s.frameWidth || 0; out.frameHeight = s.frameHeight || 0;
      const c = s.codecId && report.get(s.codecId);
      if (c) out.codec = c.mimeType;
    }
    if (s.type === 'inbound-rtp' && s.kind === 'audio') out.audioPackets += s.packetsReceived || 0;
  });
  return out;
};
state.play = play;
state.stop = stop;

$('watch-form').addEventListener('submit', (e) => { e.preventDefault(); play($('room').value, $('member').value, $('token').value); });
$('stop').addEventListener('click', () => stop());
window.addEventListener('pagehide', () => { if (state.location) fetch(state.location, { method: 'DELETE', keepalive: true }); });

const q = new URLSearchParams(location.search);
if (q.get('room')) $('room').value = q.get('room');
if (q.get('member')) $('member').value = q.get('member');
show('stopped');
if (q.get('autoplay') === '1' && q.get('room') && q.get('member')) play(q.get('room'), q.get('member'), q.get('token') || '');
