internal import Foundation
internal import MinatoMedia
internal import MinatoTransport
internal import MinatoWire

/// A publication fed by a plain RTP sender (admin API `/v1/rooms/{id}/plain-publications`):
/// FFmpeg (`-f rtp`), GStreamer (`udpsink`), an RTP camera. Its member is a bot (`plainIngress`)
/// named in the request; each publication has its own plain transport, whose port the answer
/// gives. RTP and RTCP (multiplexed) are taken from `address` only, which must be one of
/// `media.plain.allowedAddresses`.
final class PlainIngress {
    let id: String
    let roomId: String
    let memberId: String
    let publicationId: String
    let transport: TransportId
    let address: String
    let kind: String
    let codec: ForwardableCodec
    let ssrc: UInt32
    var port: UInt16 = 0
    /// SRTP keys (SDES-style) when the request asked for SRTP.
    var srtp: PlainSrtpParameters?

    init(id: String, roomId: String, memberId: String, publicationId: String, transport: TransportId, address: String,
         kind: String, codec: ForwardableCodec, ssrc: UInt32) {
        self.id = id; self.roomId = roomId; self.memberId = memberId; self.publicationId = publicationId
        self.transport = transport; self.address = address; self.kind = kind; self.codec = codec; self.ssrc = ssrc
    }

    var json: JSONValue {
        var o: [String: JSONValue] = [
            "id": .string(id), "roomId": .string(roomId), "memberId": .string(memberId), "publicationId": .string(publicationId),
            "kind": .string(kind), "mimeType": .string("\(kind)/\(codec.codec.encodingName)"),
            "payloadType": .int(Int(codec.payloadType)), "ssrc": .int(Int(ssrc)), "address": .string(address), "port": .int(Int(port))]
        if let srtp { o["srtp"] = srtp.json }
        return .object(o)
    }
}

/// What a plain publication request names (the admin API's body, checked here).
public struct PlainPublicationRequest: Sendable {
    public var memberName: String?
    public var mimeType: String?
    public var payloadType: Int?
    public var ssrc: Int?
    public var address: String?
    public var fmtp: String?
    /// `{cryptoSuite, keyBase64?}`: SRTP with SDES-style keys (`PlainSrtpParameters`).
    public var srtp: JSONValue?
    public init(memberName: String?, mimeType: String?, payloadType: Int?, ssrc: Int?, address: String?, fmtp: String?,
                srtp: JSONValue? = nil) {
        self.memberName = memberName; self.mimeType = mimeType; self.payloadType = payloadType; self.ssrc = ssrc
        self.address = address; self.fmtp = fmtp; self.srtp = srtp
    }
}

extension RoomService {
    public func adminCreatePlainIngress(_ roomId: String, _ r: PlainPublicationRequest) async throws(RoomError) -> JSONValue {
        ["plainPublication": try await createPlainIngress(in: try adminRoom(roomId), r).json]
    }

    /// Makes the member (or takes the bot of that name), the transport, the producer and the
    /// publication; nothing is left behind when it fails.
    /// `anyAddress`: the sender is the server's own (a playback), whatever `allowedAddresses` says.
    func createPlainIngress(in room: Room, _ r: PlainPublicationRequest, anyAddress: Bool = false) async throws(RoomError) -> PlainIngress {
        guard let mimeType = r.mimeType, let codecName = ForwardedCodec(mimeType: mimeType) else {
            throw RoomError.invalidParameter("\"mimeType\" must be audio/opus, video/VP8, video/VP9 or video/H264.")
        }
        guard codecName != .av1 else { throw RoomError.invalidParameter("AV1 is not taken over plain RTP.") }
        guard let payloadType = r.payloadType, (96...127).contains(payloadType) else {
            throw RoomError.invalidParameter("\"payloadType\" must be a dynamic payload type, 96...127.")
        }
        guard let ssrc = r.ssrc, (1...Int(UInt32.max)).contains(ssrc) else {
            throw RoomError.invalidParameter("\"ssrc\" must be 1...4294967295 (the sender's, e.g. FFmpeg's -ssrc).")
        }
        let srtpParameters = try PlainSrtpParameters.parse(r.srtp)
        let address = r.address ?? "127.0.0.1"
        guard anyAddress || configuration.plainAllowedAddresses.contains(address) else {
            throw RoomError(code: 403, name: "addressNotAllowed",
                            detail: "Plain RTP is taken only from media.plain.allowedAddresses (\(configuration.plainAllowedAddresses.joined(separator: ", "))).")
        }
        let name = try Validate.name(r.memberName ?? Self.sessionName("rtp"), key: "memberName") ?? Self.sessionName("rtp")
        let fmtp = FmtpParameters(parsing: r.fmtp ?? "")
        let kind = codecName.kind
        guard plainEgresses.count + plainIngresses.count < configuration.plainMaxTransports else {
            throw RoomError.limitExceeded("At most \(configuration.plainMaxTransports) plain RTP transports may exist (media.plain.maxTransports).")
        }
        let member = try plainIngressMember(named: name, in: room)
        if room.publications.contains(where: { $0.stream?.ssrc == UInt32(ssrc) && $0.publisherId == member.id }) {
            throw RoomError(code: 409, name: "ssrcInUse", detail: "The member publishes SSRC \(ssrc) already.")
        }
        guard room.publications.filter({ $0.publisherId == member.id }).count < configuration.maxPublicationsPerMember else {
            throw RoomError.limitExceeded("A member may have at most \(configuration.maxPublicationsPerMember) publications (rooms.maxPublicationsPerMember).")
        }
        let codec = ForwardableCodec(payloadType: UInt8(payloadType), codec: codecName, channels: 2, parameters: fmtp)
        let stream = PublishedStream(mid: "plain-\(nextTransportId)", kind: kind,
                                     codec: NegotiatedCodec(codec: codec, keyFrameRequest: kind == "video" ? .pli : .none),
                                     ssrc: UInt32(ssrc), rtxSsrc: nil, rtxPayloadType: nil, redPayloadType: nil, nack: false,
                                     extensionIds: [])
        let tid = TransportId(nextTransportId)
        nextTransportId += 1
        let ingress = PlainIngress(id: newId(), roomId: room.id, memberId: member.id, publicationId: newId(), transport: tid,
                                   address: address, kind: kind, codec: codec, ssrc: UInt32(ssrc))
        ingress.srtp = srtpParameters
        plainIngresses.append(ingress)
        let producer: ProducerId
        do throws(RoomError) {
            let router = room.router, keys = srtpParameters?.keys
            ingress.port = try await onWorker(room) {
                try $0.createPlainTransport(id: tid, router: router, remote: PlainRemote(address: address, rtpPort: 0, rtcpPort: 0),
                                            ingress: true, srtp: keys)
            }.port
            let media: MediaKind = kind == "audio" ? .audio : .video
            producer = try await onWorker(room) { core in
                try core.addProducer(on: tid) { index in
                    ProducerParameters(transport: index, kind: media, ssrc: UInt32(ssrc), payloadType: UInt8(payloadType),
                                       clockRate: codec.clockRate, codec: codec.codec.videoCodec,
                                       keyFrameRequest: stream.codec.keyFrameRequest)
                }
            }
            guard !member.removed, rooms.contains(where: { $0 === room }), plainIngresses.contains(where: { $0 === ingress }) else {
                workers[room.worker].post { $0.removeProducer(producer) }
                throw RoomError.roomClosed(room.id)
            }
        } catch {
            closePlainIngress(ingress)
            leaveIfNothingPublished(member, in: room)
            throw error
        }
        let pub = RoomPublication(id: ingress.publicationId, publisherId: member.id, contentType: kind, metadata: "",
                                  enabled: true, stream: stream, maxSubscribers: configuration.defaultMaxSubscribers, encodings: [])
        pub.producer = producer
        room.publications.append(pub)
        emit(room, "streamPublished", ["publication": pub.json])
        await followPublication(pub, in: room)
        flushOutbox()
        logger.info("plain RTP publication", metadata: ["publication": "\(pub.id)", "port": "\(ingress.port)"])
        return ingress
    }

    public func adminPlainIngresses(_ roomId: String) throws(RoomError) -> JSONValue {
        _ = try adminRoom(roomId)
        return ["plainPublications": .array(plainIngresses.filter { $0.roomId == roomId }.map(\.json))]
    }

    /// Ends the publication (`streamUnpublished`); its member leaves with its last one.
    public func adminDeletePlainIngress(_ roomId: String, _ id: String) throws(RoomError) -> JSONValue {
        let room = try adminRoom(roomId)
        guard let i = plainIngresses.first(where: { $0.id == id && $0.roomId == roomId }) else {
            throw RoomError(code: 404, name: "plainPublicationNotFound", detail: "There is no plain publication '\(id.prefix(80))' in this room.")
        }
        if let pub = room.publication(i.publicationId) { unpublish(pub, in: room) } else { closePlainIngress(i) }
        if let m = room.member(i.memberId) { leaveIfNothingPublished(m, in: room) }
        flushOutbox()
        return [:]
    }

    /// The bot member of that name made for plain publications, or a new one.
    private func plainIngressMember(named name: String, in room: Room) throws(RoomError) -> LocalSFURoomMember {
        if let m = room.members.first(where: { $0.name == name }) {
            guard m.plainIngress else { throw RoomError.memberNameDuplicated(name) }
            return m
        }
        // No signaling connection: a channel of its own that sends nowhere, for the
        // per-connection count (one member).
        let channel = ClientChannel(id: UInt64.max - UInt64(truncatingIfNeeded: nextTransportId), send: { _ in })
        try checkMemberLimits(room: room, channel: channel, replacing: nil)
        let member = LocalSFURoomMember(id: newId(), name: name, metadata: "", type: "bot", roomId: room.id, channel: channel,
                                        keepaliveIntervalSec: configuration.defaultKeepaliveIntervalSec,
                                        keepaliveIntervalGapSec: configuration.defaultKeepaliveIntervalGapSec, now: clock.now)
        member.plainIngress = true
        room.members.append(member)
        room.emptySince = nil
        emit(room, "memberJoined", ["member": member.json])
        return member
    }

    func leaveIfNothingPublished(_ m: LocalSFURoomMember, in room: Room) {
        guard m.plainIngress, !m.removed, !room.publications.contains(where: { $0.publisherId == m.id }) else { return }
        removeMember(m, from: room, reason: "left")
    }

    func closePlainIngress(_ i: PlainIngress) {
        plainIngresses.removeAll { $0 === i }
        guard let room = rooms.first(where: { $0.id == i.roomId }) else { return }
        let tid = i.transport
        workers[room.worker].post { $0.closeTransport(tid) }
    }

    /// A publication ended (DELETE, its member kicked, the room closed): its transport closes.
    func plainIngressPublicationEnded(_ pubId: String) {
        for i in plainIngresses where i.publicationId == pubId { closePlainIngress(i) }
    }
}
