internal import Foundation
internal import MinatoTransport
internal import MinatoWire
internal import Metrics

/// What a data publication is (`RoomPublication.data`): the label of the publisher's data
/// channel that carries it, and the reliability its subscribers' channels get.
struct DataPublication: Sendable {
    var label: String
    var ordered: Bool
    /// nil: reliable; else at most this many retransmissions (0: lossy).
    var maxRetransmits: UInt32?

    var json: JSONValue {
        var o: [String: JSONValue] = ["label": .string(label), "ordered": .bool(ordered)]
        if let maxRetransmits { o["maxRetransmits"] = .int(Int(maxRetransmits)) }
        return .object(o)
    }
}

/// Data through the SFU (docs/protocol.md "Data"): a member publishes `contentType:"data"`
/// with an offer whose `m=application` section carries its data channels on the send
/// connection; each subscriber gets a channel the server opens on its receive connection, and
/// the media worker copies every message of the publisher's channel to them (`DataRouter`).
extension RoomService {
    func publishData(_ r: PublishRequest, from channel: ClientChannel) async throws -> PublishResult {
        let (room, member) = try joinedMember(r.memberId, channel: channel)
        guard member.mediaSession == nil else {
            throw RoomError.invalidParameter("A WHIP session cannot publish data.")
        }
        let metadata = try Validate.metadata(r.metadata, key: "metadata") ?? ""
        guard let d = r.dataChannel else {
            throw RoomError.invalidParameter("A data publication needs \"dataChannel\": {\"label\": <the label of the RTCDataChannel that carries it>}.")
        }
        guard !d.label.isEmpty, d.label.utf8.count <= 128 else {
            throw RoomError.invalidParameter("dataChannel.label must be 1...128 bytes.")
        }
        if let n = d.maxRetransmits, !(0...65535).contains(n) {
            throw RoomError.invalidParameter("dataChannel.maxRetransmits must be 0...65535.")
        }
        var cap = configuration.maxSubscribersCap
        if let limit = tokenSubscriberLimit(channel: channel, room: room) { cap = min(cap, limit) }
        let maxSubscribers = r.maxSubscribers ?? min(configuration.defaultMaxSubscribers, cap)
        guard (1...max(1, cap)).contains(maxSubscribers) else {
            throw RoomError.invalidParameter("maxSubscribers must be 1...\(cap) (the server's cap and the token's sfu.maxSubscribersLimit).")
        }
        let sd = try await parseClientSdp(r.offer)
        guard let m = sd.media.first(where: { $0.mid == r.mid }) else {
            throw RoomError.invalidParameter("The offer has no m-line with mid '\(r.mid.prefix(64))'.")
        }
        guard SdpData.isDataChannelSection(m) else {
            throw RoomError.invalidParameter("m-line '\(r.mid.prefix(64))' is not a data-channel section (m=application ... UDP/DTLS/SCTP webrtc-datachannel).")
        }
        func check() throws(RoomError) {
            let mine = room.publications.filter { $0.publisherId == member.id }
            if mine.contains(where: { $0.data?.label == d.label }) {
                throw .invalidParameter("A data publication with label '\(d.label.prefix(128))' exists already; unpublish it first.")
            }
            guard mine.count < configuration.maxPublicationsPerMember else {
                throw .limitExceeded("A member may have at most \(configuration.maxPublicationsPerMember) publications (rooms.maxPublicationsPerMember).")
            }
        }
        try check()
        try dataServedHere(member)
        let (local, answer) = try await answerSendOffer(sd, of: member, in: room)
        try stillJoined(member, room)
        try check()
        let info = DataPublication(label: d.label, ordered: d.ordered ?? true, maxRetransmits: d.maxRetransmits.map { UInt32($0) })
        let pub = RoomPublication(id: newId(), publisherId: member.id, contentType: "data", metadata: metadata,
                                  enabled: r.isEnabled, stream: nil, maxSubscribers: maxSubscribers, encodings: [], data: info)
        let pid = pub.id, tid = local.id, label = d.label, enabled = r.isEnabled
        try await onWorker(room) { core in try core.addDataPublication(pid, on: tid, label: label, enabled: enabled) }
        guard !member.removed, rooms.contains(where: { $0 === room }) else {
            workers[room.worker].post { $0.removeDataPublication(pid) }
            throw RoomError.memberNotFound(member.id)
        }
        do { try check() } catch {
            workers[room.worker].post { $0.removeDataPublication(pid) }
            throw error
        }
        room.publications.append(pub)
        emit(room, "streamPublished", ["publication": pub.json])
        return PublishResult(publication: pub.json, answer: .init(type: "answer", sdp: answer))
    }

    /// The data subscriptions an answer accepted: the receive connection's association starts
    /// (toward the answer's `a=sctp-port`) and each gets its channel. An answer that rejected
    /// the data-channel section ends them (`dataNotSupported`).
    func startDataSubscriptions(_ subs: [RoomSubscription], answer sd: SessionDescription, of member: LocalSFURoomMember,
                                in room: Room, transport tid: TransportId) async throws {
        guard !subs.isEmpty else { return }
        guard member.site == .home, let mid = member.recvSlots.data?.mid, let m = sd.media.first(where: { $0.mid == mid }),
              SdpData.isDataChannelSection(m) else {
            for sub in subs { endSubscription(sub, in: room, offerToSubscriber: true, reason: "dataNotSupported") }
            return
        }
        let port = SdpData.sctpPort(m)
        try await onWorker(room) { core in try core.enableData(on: tid, remotePort: port) }
        for sub in subs where room.subscription(sub.id) != nil && !sub.dataStarted {
            guard let pub = room.publication(sub.publicationId), let d = pub.data else { continue }
            sub.dataStarted = true
            let sid = sub.id, pid = pub.id, ordered = d.ordered, rtx = d.maxRetransmits
            try await onWorker(room) { core in
                try core.addDataSubscription(sid, publication: pid, on: tid, ordered: ordered, maxRetransmits: rtx)
            }
        }
    }

    /// A reliable subscriber's connection could not take a message: the worker closed the
    /// channel; the subscription ends with reason `dataBufferOverflow`.
    func dataSubscriptionOverflowed(_ sid: String) {
        Counter(label: "minato_data_subscriptions_overflowed_total").increment()
        for room in rooms {
            guard let sub = room.subscription(sid) else { continue }
            logger.info("data subscription overflowed", metadata: ["subscription": "\(sid)"])
            endSubscription(sub, in: room, offerToSubscriber: false, reason: "dataBufferOverflow")
            flushOutbox()
            return
        }
    }

    /// Something a member's peer sent on a data channel was refused: the member hears
    /// `dataChannelError {memberId, publicationId?, label?, reason, detail}` (at most one a
    /// second per connection, `DataRouter`).
    func dataChannelError(_ tid: TransportId, label: String?, reason: String, detail: String) {
        guard let owner = transportOwners[tid], let room = rooms.first(where: { $0.id == owner.room }),
              let member = room.member(owner.member), let channel = member.channel else { return }
        var params: [String: JSONValue] = ["memberId": .string(member.id), "reason": .string(reason), "detail": .string(detail)]
        if let label {
            params["label"] = .string(label)
            if let pub = room.publications.first(where: { $0.publisherId == member.id && $0.data?.label == label }) {
                params["publicationId"] = .string(pub.id)
            }
        }
        outbox.append((channel, Self.notification("dataChannelError", .object(params))))
        flushOutbox()
    }
}
