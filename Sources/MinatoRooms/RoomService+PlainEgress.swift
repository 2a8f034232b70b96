internal import Foundation
internal import MinatoMedia
internal import MinatoTransport
internal import MinatoWire

/// Plain RTP egress (admin API `/v1/rooms/{id}/plain-transports`): one publication sent as
/// plain RTP (no ICE or DTLS; SRTP with SDES-style keys if asked) to an address and ports the admin names, for tools that do
/// not speak WebRTC (FFmpeg or GStreamer with the SDP the answer carries, speech-to-text bots).
/// The address must be one of `media.plain.allowedAddresses` (loopback only by default): the
/// server is never an open relay. It ends with its publication (or the room) or on DELETE.
final class PlainEgress {
    let id: String
    let roomId: String
    let publicationId: String
    let remote: PlainRemote
    let transport: TransportId
    /// The publication's codec, with the payload type sent (the publisher's, or the one asked for).
    var codec: ForwardableCodec
    let kind: String
    let ssrc: UInt32
    var localPort: UInt16 = 0
    var consumer: ConsumerId?
    /// A publication served by another node (`cluster.cascade`): its stream relayed to the
    /// room's node, held (one reference) while the egress lasts.
    var forward: ForwardKey?
    /// SRTP keys (SDES-style) when the request asked for SRTP.
    var srtp: PlainSrtpParameters?

    init(id: String, roomId: String, publicationId: String, remote: PlainRemote, transport: TransportId,
         codec: ForwardableCodec, kind: String, ssrc: UInt32) {
        self.id = id; self.roomId = roomId; self.publicationId = publicationId; self.remote = remote
        self.transport = transport; self.codec = codec; self.kind = kind; self.ssrc = ssrc
    }

    /// An SDP a receiver opens to take the stream (`ffmpeg -protocol_whitelist file,udp,rtp -i`).
    var receiverSdp: String {
        let family = remote.address.contains(":") ? "IP6" : "IP4"
        var lines = ["v=0", "o=- 0 0 IN \(family) \(remote.address)", "s=Minato plain RTP", "c=IN \(family) \(remote.address)", "t=0 0",
                     "m=\(kind) \(remote.rtpPort) \(srtp == nil ? "RTP/AVP" : "RTP/SAVP") \(codec.payloadType)",
                     "a=rtpmap:\(codec.payloadType) \(codec.codec.encodingName)/\(codec.clockRate)" + (codec.codec == .opus ? "/2" : "")]
        if let fmtp = codec.parameters.text { lines.append("a=fmtp:\(codec.payloadType) \(fmtp)") }
        if let srtp { lines.append(srtp.cryptoLine) }
        lines += ["a=rtcp:\(remote.rtcpPort)", "a=recvonly"]
        return lines.joined(separator: "\r\n") + "\r\n"
    }

    var json: JSONValue {
        var o: [String: JSONValue] = [
            "id": .string(id), "roomId": .string(roomId), "publicationId": .string(publicationId),
            "address": .string(remote.address), "rtpPort": .int(Int(remote.rtpPort)), "rtcpPort": .int(Int(remote.rtcpPort)),
            "localPort": .int(Int(localPort)), "ssrc": .int(Int(ssrc)), "payloadType": .int(Int(codec.payloadType)),
            "sdp": .string(receiverSdp)]
        if let srtp { o["srtp"] = srtp.json }
        return .object(o)
    }
}

extension RoomService {
    public func adminCreatePlainEgress(_ roomId: String, publicationId: String?, address: String?, rtpPort: Int?,
                                       rtcpPort: Int?, payloadType: Int? = nil, srtp: JSONValue? = nil) async throws(RoomError) -> JSONValue {
        let room = try adminRoom(roomId)
        guard let publicationId, let address, let rtpPort else {
            throw RoomError.invalidParameter("The body needs \"publicationId\", \"address\" and \"rtpPort\".")
        }
        let rtcp = rtcpPort ?? rtpPort + 1
        guard (1...65534).contains(rtpPort), (1...65535).contains(rtcp) else {
            throw RoomError.invalidParameter("rtpPort must be 1...65534 and rtcpPort 1...65535.")
        }
        if let payloadType, !(96...127).contains(payloadType) {
            throw RoomError.invalidParameter("payloadType must be a dynamic payload type, 96...127.")
        }
        let srtpParameters = try PlainSrtpParameters.parse(srtp)
        guard configuration.plainAllowedAddresses.contains(address) else {
            throw RoomError(code: 403, name: "addressNotAllowed",
                            detail: "Plain RTP goes only to media.plain.allowedAddresses (\(configuration.plainAllowedAddresses.joined(separator: ", "))).")
        }
        guard let pub = room.publication(publicationId) else { throw RoomError.publicationNotFound(publicationId) }
        guard let stream = pub.stream, pub.producer != nil else {
            throw RoomError(code: 409, name: "notForwardable", detail: "Publication '\(publicationId.prefix(80))' has no audio or video stream.")
        }
        guard plainEgresses.count < configuration.plainMaxTransports else {
            throw RoomError.limitExceeded("At most \(configuration.plainMaxTransports) plain RTP transports may exist (media.plain.maxTransports).")
        }
        let tid = TransportId(nextTransportId)
        nextTransportId += 1
        let egress = PlainEgress(id: newId(), roomId: room.id, publicationId: pub.id,
                                 remote: PlainRemote(address: address, rtpPort: UInt16(rtpPort), rtcpPort: UInt16(rtcp)),
                                 transport: tid, codec: stream.codec.codec, kind: pub.contentType, ssrc: UInt32.random(in: 1...UInt32.max))
        if let payloadType { egress.codec.payloadType = UInt8(payloadType) }
        egress.srtp = srtpParameters
        plainEgresses.append(egress)
        do throws(RoomError) {
            let router = room.router, remote = egress.remote, keys = srtpParameters?.keys
            egress.localPort = try await onWorker(room) { try $0.createPlainTransport(id: tid, router: router, remote: remote, srtp: keys) }.port
            try await attachEgress(egress, of: pub, in: room)
        } catch {
            closePlainEgress(egress)
            throw error
        }
        logger.info("plain RTP egress", metadata: ["id": "\(egress.id)", "to": "\(address):\(rtpPort)"])
        return ["plainTransport": egress.json]
    }

    public func adminPlainEgresses(_ roomId: String) throws(RoomError) -> JSONValue {
        _ = try adminRoom(roomId)
        return ["plainTransports": .array(plainEgresses.filter { $0.roomId == roomId }.map(\.json))]
    }

    public func adminDeletePlainEgress(_ roomId: String, _ id: String) throws(RoomError) -> JSONValue {
        _ = try adminRoom(roomId)
        guard let e = plainEgresses.first(where: { $0.id == id && $0.roomId == roomId }) else {
            throw RoomError(code: 404, name: "plainTransportNotFound", detail: "There is no plain transport '\(id.prefix(80))' in this room.")
        }
        closePlainEgress(e)
        return [:]
    }

    /// Makes `e`'s consumer of `pub` on its plain transport: of the publication's own producer,
    /// or, for one served by another node, of its stream relayed here.
    private func attachEgress(_ e: PlainEgress, of pub: RoomPublication, in room: Room) async throws(RoomError) {
        guard room.publications.contains(where: { $0 === pub }), plainEgresses.contains(where: { $0 === e }) else {
            throw RoomError.publicationNotFound(pub.id)
        }
        let (producer, forward) = try await self.producer(of: pub, at: .home, in: room)
        guard plainEgresses.contains(where: { $0 === e }), e.consumer == nil else {
            if let forward { releaseForward(forward, in: room) }
            throw RoomError.publicationNotFound(pub.id)
        }
        let tid = e.transport, ssrc = e.ssrc, pt = e.codec.payloadType, video = pub.contentType == "video"
        do {
            e.consumer = try await onWorker(room) { core in
                let c = try core.addConsumer(on: tid) { index in
                    var c = ConsumerParameters(producer: producer, transport: index, ssrc: ssrc, payloadType: pt, extensionIds: ExtensionIdMap())
                    c.pinned = true
                    return c
                }
                if video { core.requestKeyFrame(producer) }
                return c
            }
        } catch {
            if let forward { releaseForward(forward, in: room) }
            throw error
        }
        // Closed meanwhile: its transport (and the consumer with it) is gone already.
        guard plainEgresses.contains(where: { $0 === e }) else {
            if let forward { releaseForward(forward, in: room) }
            return
        }
        e.forward = forward
    }

    /// Relayed streams stopped (their relay failed): the egresses they fed lost their consumers
    /// and are attached again over a new relay after 1 s, doubling to 30 s while that fails.
    func egressRelayStopped(_ keys: [ForwardKey], in room: Room) {
        for e in plainEgresses where e.roomId == room.id && (e.forward.map(keys.contains) ?? false) {
            e.forward = nil
            e.consumer = nil
            reattachEgress(e, in: room, after: 0)
        }
    }

    private func reattachEgress(_ e: PlainEgress, in room: Room, after failures: Int) {
        Task {
            try? await Task.sleep(for: Self.relayBackoff(failures))
            guard self.plainEgresses.contains(where: { $0 === e }), e.consumer == nil,
                  let pub = room.publication(e.publicationId) else { return }
            do {
                try await self.attachEgress(e, of: pub, in: room)
            } catch {
                self.logger.warning("a plain RTP egress could not be attached to a new relay", metadata: [
                    "id": "\(e.id)", "failures": "\(failures + 1)", "error": "\(error)"])
                self.reattachEgress(e, in: room, after: failures + 1)
            }
        }
    }

    /// Closes the transport (its consumer goes with it) and forgets it.
    func closePlainEgress(_ e: PlainEgress) {
        plainEgresses.removeAll { $0 === e }
        guard let room = rooms.first(where: { $0.id == e.roomId }) else { return }
        if let f = e.forward { releaseForward(f, in: room) }
        e.forward = nil
        let tid = e.transport
        workers[room.worker].post { $0.closeTransport(tid) }
    }

    /// A publication ended: the plain transports sending it close.
    func plainEgressPublicationEnded(_ pubId: String) {
        for e in plainEgresses where e.publicationId == pubId { closePlainEgress(e) }
    }
}
