// Minato browser SDK: ES modules, no build step, no third-party code; this is its entry point.
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
// Given several server URLs (the nodes of a cluster), it reconnects to the next one when one
// is gone, and a room lost with its node is found again by name and rejoined: its members join,
// publish and subscribe again on their own (SFURoom.onReconnecting / onReconnected).
// A socket that goes silent without closing (a dead TCP connection) is noticed by a heartbeat
// and reconnected. A member whose connection loses its path (ICE disconnected or failed, media
// stalled, the browser's `online` event) restarts ICE on it by itself, and says so
// (LocalSFURoomMember.onReconnecting / onReconnected / onConnectionQualityChanged).
//
// The SDK is a set of ES modules next to this file, loaded by the browser as they are (no
// build step); this entry point re-exports the public API:
//   core.js         MinatoError, MinatoEvent (and internal helpers)
//   signaling.js    the WebSocket, JSON-RPC 2.0, reconnecting (internal)
//   context.js      MinatoContext
//   room.js         SFURoom
//   member.js       RoomMember, RemoteRoomMember, LocalSFURoomMember
//   publication.js  RoomPublication, RoomSubscription
//   stream.js       LocalStream, RemoteStream, createLocalStreams, summarizeInbound
//   recovery.js     ICE restarts, recovery events, connection quality of a member (internal)

import { MinatoError, MinatoEvent } from './core.js';
import { MinatoContext } from './context.js';
import { SFURoom } from './room.js';

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
 *   members: MemberJSON[], publications: PublicationJSON[], subscriptions: SubscriptionJSON[],
 *   recordings?: RecordingJSON[]}} RoomJSON
 * @typedef {{id: string, name: (string|null), metadata: string, hasPassword: boolean, memberCount: number}} RoomSummary
 * @typedef {{roomId: string, version: number, type: string, data: any, reason?: string}} RoomEventJSON
 * @typedef {{id: string, memberId: string, publicationIds: string[], startedAt: string}} RecordingJSON
 * @typedef {'connecting'|'connected'|'reconnecting'|'closed'} ConnectionState
 */

export { MinatoError, MinatoEvent, MinatoContext, SFURoom };
export { RoomMember, RemoteRoomMember, LocalSFURoomMember } from './member.js';
export { RoomPublication, RoomSubscription } from './publication.js';
export { LocalStream, RemoteStream, createLocalStreams, summarizeInbound } from './stream.js';
export { LocalDataStream, RemoteDataStream, createDataStream } from './data.js';

/** SkyWay's name for the event class. */
export { MinatoEvent as Event };

export default { MinatoContext, SFURoom, MinatoError, MinatoEvent, VERSION };
