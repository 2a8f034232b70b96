public import MinatoTransport
public import MinatoWire
internal import Synchronization

// The client SDK's value types around a member (Room.swift holds Context, SFURoom and
// LocalSFURoomMember): how it joined, what it publishes and subscribes to, and what it keeps to
// do all of that again after a rejoin.

/// How a member joined: its rejoin joins the same way.
struct JoinRequest: Sendable {
    let name: String?
    let metadata: String?
    let password: String?
    let keepaliveIntervalSec: Int

    func params(roomId: String, replace: Bool) -> JSON {
        var p: [String: JSON] = ["roomId": .string(roomId), "keepaliveIntervalSec": .number(Double(keepaliveIntervalSec))]
        if let name { p["name"] = .string(name) }
        if let metadata { p["metadata"] = .string(metadata) }
        if let password { p["password"] = .string(password) }
        if replace { p["replace"] = true }
        return .object(p)
    }
}

/// The part of a room's state a rejoin needs: its members (for names) and its publications,
/// from a snapshot and the events since.
struct RoomDirectory {
    var version = 0
    var members: [String: Member] = [:]
    var publications: [String: Publication] = [:]

    init() {}

    init(_ snapshot: RoomSnapshot) {
        version = snapshot.version ?? 0
        for m in snapshot.members ?? [] { members[m.id] = m }
        for p in snapshot.publications ?? [] { publications[p.id] = p }
    }

    mutating func apply(_ e: RoomEvent) {
        guard e.version > version else { return }
        version = e.version
        switch e.type {
        case "memberJoined", "memberMetadataUpdated":
            if let m = e.member { members[m.id] = m }
        case "memberLeft":
            if let m = e.member {
                members[m.id] = nil
                publications = publications.filter { $0.value.publisherId != m.id }
            }
        case "streamPublished", "publicationMetadataUpdated", "publicationEnabled", "publicationDisabled":
            if let p = e.publication { publications[p.id] = p }
        case "streamUnpublished":
            if let p = e.publication { publications[p.id] = nil }
        default:
            break
        }
    }

    /// The name of the member that published `publication`, if it is known and has one.
    func publisherName(of publication: Publication) -> String? { members[publication.publisherId]?.name }
}

/// Options of a publication (docs/protocol.md `publish`).
public struct PublicationOptions: Sendable {
    public var metadata: String?
    public var isEnabled: Bool
    public var maxSubscribers: Int?
    public init(metadata: String? = nil, isEnabled: Bool = true, maxSubscribers: Int? = nil) {
        self.metadata = metadata; self.isEnabled = isEnabled; self.maxSubscribers = maxSubscribers
    }
}

/// What `publish` returns: the server's publication and the local stream's identifiers.
public struct RoomPublication: Sendable {
    public let publication: Publication
    public var id: String { publication.id }
    public var contentType: ContentType { publication.contentType }
    public let mid: String
    public let ssrc: UInt32
}

/// What `subscribe` returns: the subscription and the stream's SSRC on the receive connection.
public struct RoomSubscription: Sendable {
    public let subscription: Subscription
    public var id: String { subscription.id }
    public var publicationId: String { subscription.publicationId }
    public var contentType: ContentType { subscription.contentType }
    public let mid: String
    /// The SSRC the server sends this stream with (from its offer), if it announced one.
    public let ssrc: UInt32?
    /// The codec the server will send.
    public let codec: RtpMap?
}

/// Controls an `OutboundStream<S>` without knowing `S` (worker-confined).
protocol OutboundControl: AnyObject {
    var enabled: Bool { get set }
    var ssrc: UInt32 { get }
    func stop(on core: ClientWorkerCore)
    func feedback(_ rtcp: UnsafeRawBufferPointer)
}
extension OutboundStream: OutboundControl {}

/// The worker-confined half of a member's media: its send and receive connections.
final class MemberMedia {
    var send: ClientConnection?
    var sendDemux = InboundDemux()
    var outbound: [String: any OutboundControl] = [:]   // by mid
    var recv: ClientConnection?
    var recvDemux = InboundDemux()
    var collectors: [UInt32: PacketCollector] = [:]
    /// Data subscriptions waiting for or holding the server's channel, by subscription id (the
    /// channel's label), and the same by the channel's stream once it opened.
    var dataInboxes: [String: DataInbox] = [:]
    var dataByStream: [UInt16: DataInbox] = [:]
    /// The server's latest receiver report on what it got of our streams: the worst fraction
    /// lost (0...255) and how many reports came.
    var reportedFractionLost: UInt8 = 0
    var reports: UInt64 = 0

    /// Reads the receiver reports in a compound RTCP packet from the server (send connection).
    func readReports(_ rtcp: UnsafeRawBufferPointer) {
        var it = RtcpIterator(rtcp)
        while let p = it.next() {
            guard let rr = ReceiverReport(p) else { continue }
            var worst: UInt8 = 0, ours = false
            for i in 0..<rr.reportCount {
                guard let block = rr.reportBlock(at: i) else { continue }
                if outbound.values.contains(where: { $0.ssrc == block.ssrc }) {
                    ours = true
                    worst = max(worst, block.fractionLost)
                }
            }
            if ours {
                reportedFractionLost = worst
                reports &+= 1
            }
        }
    }
}

/// One of a member's two connections: `send` (it publishes on it) or `recv` (it subscribes).
public enum ConnectionSide: String, Sendable {
    case send, recv
}

/// Why a member joins its room again.
public enum RejoinReason: String, Sendable {
    /// The node hosting the room failed: the server said `closed` with reason `nodeFailed`.
    case nodeFailed
    /// The member's socket closed, or the server no longer knew the member.
    case memberLost
}

/// A subscription a rejoin did not make again: no publisher of that name published a stream of
/// that kind (and metadata) again within `Context.Options.resubscribeWait`.
public struct MissingSubscription: Sendable, Equatable {
    public let publisherName: String?
    public let contentType: ContentType
    public let metadata: String?
}

/// What happens to a member's place in its room (`LocalSFURoomMember.connectionEvents`).
public enum MemberConnectionEvent: Sendable {
    /// The room was lost: the member finds it again by name (on any of the context's servers)
    /// and joins it again.
    case reconnecting(reason: RejoinReason)
    /// The member is back: joined under its name and metadata (`member.id` and `room.id` are the
    /// new ones), every source published again (`publications`, new ids), and subscribed again to
    /// the publications of the same publishers (by name, contentType and metadata) as they came
    /// back (`subscriptions`, new ids: a subscription made without a sink of yours has a new
    /// `packets(of:)` stream). `missing` did not come back in time.
    case reconnected(reason: RejoinReason, publications: [RoomPublication], subscriptions: [RoomSubscription],
                     missing: [MissingSubscription])
    /// The room could not be joined again (it has no name to find it by, `rejoin` is off, or
    /// `rejoinTimeout` passed): the member is gone and `events` ends.
    case failed(reason: RejoinReason, error: String)
    /// The member is being recovered in place (docs/sdk-swift.md "Recovery"): its signaling
    /// socket is being had again, or ICE restarted on a connection whose path went silent. Its
    /// id, publications and subscriptions stay.
    case recovering(RecoveryCause)
    /// That recovery worked: the member was taken back on a new socket (and the events missed
    /// meanwhile were delivered), or the connection has a new path. A recovery that fails ends
    /// in a rejoin (`.reconnecting(.memberLost)`).
    case recovered(RecoveryCause)
    /// The member's connection quality changed (`LocalSFURoomMember.connectionQuality`): from
    /// the loss on both connections over the last 2 s, `.bad` while a connection is down.
    case qualityChanged(ConnectionQuality)
}

/// How well a member's media gets through, from packet loss (the worse direction): the browser
/// SDK's levels and bounds (docs/sdk.md "Recovery"), without its round-trip time, which this
/// SDK does not measure.
public enum ConnectionQuality: String, Sendable {
    /// Under 3% lost: NACK/RTX and Opus FEC repair it.
    case good
    /// Under 10% lost: repairs show (late frames, concealed audio).
    case poor
    /// 10% or more lost, or a connection is down.
    case bad
}

/// A source this member publishes, kept to publish it again after a rejoin.
struct PublishedSource: Sendable {
    let publicationId: String
    let source: any RtpSource & Sendable
    let options: PublicationOptions
}

/// A subscription of this member, kept to make it again after a rejoin.
struct SubscribedStream: Sendable {
    let publicationId: String
    let contentType: ContentType
    let sink: (any RtpSink & Sendable)?
}

/// What a rejoin subscribes to again: the publication of the member named `publisherName` with
/// this contentType (and metadata, when it had some).
struct WantedSubscription: Sendable {
    let publisherName: String?
    let contentType: ContentType
    let metadata: String?
    let sink: (any RtpSink & Sendable)?
}
