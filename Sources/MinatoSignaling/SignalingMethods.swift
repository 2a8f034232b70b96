public import MinatoRooms

/// One method of the signaling protocol (docs/protocol.md "Requests"): its name, the
/// permission the caller's token needs and the member it acts as, and how its params become a
/// typed request to the room core and its result the JSON the client gets. The table below is
/// the one list of methods.
struct SignalingMethod: Sendable {
    let name: String
    let access: @Sendable (Params) -> (Permission, MemberTarget?)
    let run: @Sendable (Params, isolated RoomService, ClientChannel) async throws -> JSONValue

    init(_ name: String, _ permission: Permission, target: (@Sendable (Params) -> MemberTarget?)? = nil,
         _ run: @escaping @Sendable (Params, isolated RoomService, ClientChannel) async throws -> JSONValue) {
        self.name = name
        self.access = { p in (permission, target?(p)) }
        self.run = run
    }

    init(_ name: String, access: @escaping @Sendable (Params) -> (Permission, MemberTarget?),
         _ run: @escaping @Sendable (Params, isolated RoomService, ClientChannel) async throws -> JSONValue) {
        self.name = name; self.access = access; self.run = run
    }
}

private func member(_ p: Params) -> MemberTarget? { (try? p.string("memberId")).map { .member($0) } }
private func publication(_ p: Params) -> MemberTarget? { (try? p.string("publicationId")).map { .publication($0) } }
private func subscription(_ p: Params) -> MemberTarget? { (try? p.string("subscriptionId")).map { .subscription($0) } }

extension SignalingMethod {
    static let all: [String: SignalingMethod] = Dictionary(uniqueKeysWithValues: list.map { ($0.name, $0) })

    static let list: [SignalingMethod] = [
        SignalingMethod("authenticate", .authenticate) { p, core, c in
            let r = try await core.authenticate(token: try p.string("token"), update: false, from: c)
            return ["expiresAt": r.expiresAt.map { .string($0) } ?? .null]
        },
        SignalingMethod("updateAuthToken", .authenticate) { p, core, c in
            let r = try await core.authenticate(token: try p.string("token"), update: true, from: c)
            return ["expiresAt": r.expiresAt.map { .string($0) } ?? .null]
        },
        SignalingMethod("listRooms", .none) { _, core, c in ["rooms": .array(try core.listRooms(from: c))] },
        SignalingMethod("createRoom", .room) { p, core, c in
            ["room": try await core.createRoom(try createRequest(p), from: c)]
        },
        SignalingMethod("findRoom", .room) { p, core, c in
            ["room": try core.findRoom(FindRoomRequest(id: try p.optionalString("id"), name: try p.optionalString("name")), from: c)]
        },
        SignalingMethod("findOrCreateRoom", .room) { p, core, c in
            ["room": try await core.findOrCreateRoom(try createRequest(p), from: c)]
        },
        SignalingMethod("closeRoom", .room) { p, core, c in
            try core.closeRoom(try p.string("roomId"), from: c)
            return [:]
        },
        SignalingMethod("updateRoomMetadata", .room) { p, core, c in
            try core.updateRoomMetadata(try p.string("roomId"), metadata: try p.string("metadata"), from: c)
            return [:]
        },
        SignalingMethod("getRoom", .room) { p, core, c in
            ["room": try core.findRoom(FindRoomRequest(id: try p.string("roomId")), from: c)]
        },
        SignalingMethod("subscribeRoomEvents", .room) { p, core, c in
            let page = try core.subscribeRoomEvents(
                RoomEventsRequest(roomId: try p.string("roomId"), offset: try p.optionalInt("offset") ?? 0,
                                  limit: try p.optionalInt("limit")), from: c)
            return ["events": .array(page.events), "nextOffset": page.nextOffset.map { .int($0) } ?? .null]
        },
        SignalingMethod("join", .room) { p, core, c in
            let r = try await core.join(
                JoinRequest(roomId: try p.string("roomId"), name: try p.optionalString("name"),
                            metadata: try p.optionalString("metadata"), password: try p.optionalString("password"),
                            keepaliveIntervalSec: try p.optionalInt("keepaliveIntervalSec"),
                            keepaliveIntervalGapSec: try p.optionalInt("keepaliveIntervalGapSec"),
                            replace: try p.optionalBool("replace") ?? false, type: try p.optionalString("type")), from: c)
            var result: [String: JSONValue] = ["member": r.member, "room": r.room, "reconnectSecret": .string(r.reconnectSecret)]
            // Only when the server has ICE servers to hand out (media.turn.*, media.clientIceServers).
            if !r.iceServers.isEmpty { result["iceServers"] = .array(r.iceServers.map(\.json)) }
            return .object(result)
        },
        SignalingMethod("getIceServers", .member(nil), target: member) { p, core, c in
            ["iceServers": .array(try core.iceServers(memberId: try p.string("memberId"), from: c).map(\.json))]
        },
        SignalingMethod("leave", .member(nil), target: member) { p, core, c in
            try core.leave(memberId: try p.string("memberId"), from: c)
            return [:]
        },
        SignalingMethod("keepalive", .member(nil), target: member) { p, core, c in
            let ttl = try core.keepalive(memberId: try p.string("memberId"), reconnectSecret: try p.optionalString("reconnectSecret"), from: c)
            return ["ttlSec": .int(ttl)]
        },
        SignalingMethod("updateMemberMetadata", .member("updateMetadata"), target: member) { p, core, c in
            try core.updateMemberMetadata(memberId: try p.string("memberId"), metadata: try p.string("metadata"), from: c)
            return [:]
        },
        SignalingMethod("publish", .member("publish"), target: member) { p, core, c in
            let r = try await core.publish(
                PublishRequest(memberId: try p.string("memberId"), contentType: try p.string("contentType"),
                               mid: try p.string("mid"), offer: try p.sessionDescription("offer", type: "offer"),
                               metadata: try p.optionalString("metadata"), isEnabled: try p.optionalBool("isEnabled") ?? true,
                               maxSubscribers: try p.optionalInt("maxSubscribers"), encodings: try p.encodings("encodings"),
                               dataChannel: try p.dataChannel("dataChannel")), from: c)
            return ["publication": r.publication, "answer": r.answer.json]
        },
        SignalingMethod("negotiate", .member("publish"), target: member) { p, core, c in
            let answer = try await core.negotiate(memberId: try p.string("memberId"),
                                                  offer: try p.sessionDescription("offer", type: "offer"), from: c)
            return ["answer": answer.json]
        },
        SignalingMethod("unpublish", .member("publish"), target: publication) { p, core, c in
            try core.unpublish(publicationId: try p.string("publicationId"), from: c)
            return [:]
        },
        SignalingMethod("enablePublication", .member("publish"), target: publication) { p, core, c in
            try core.setPublicationEnabled(publicationId: try p.string("publicationId"), true, from: c)
            return [:]
        },
        SignalingMethod("disablePublication", .member("publish"), target: publication) { p, core, c in
            try core.setPublicationEnabled(publicationId: try p.string("publicationId"), false, from: c)
            return [:]
        },
        SignalingMethod("updatePublicationMetadata", .member("publish"), target: publication) { p, core, c in
            try core.updatePublicationMetadata(publicationId: try p.string("publicationId"), metadata: try p.string("metadata"), from: c)
            return [:]
        },
        SignalingMethod("subscribe", .member("subscribe"), target: member) { p, core, c in
            let r = try await core.subscribe(
                SubscribeRequest(memberId: try p.string("memberId"), publicationId: try p.string("publicationId"),
                                 preferredEncodingId: try p.optionalString("preferredEncodingId"),
                                 codecCapabilities: try p.codecCapabilities("codecCapabilities"),
                                 pinned: try p.optionalBool("pinned") ?? false), from: c)
            return ["subscription": r.subscription, "mid": .string(r.mid), "offer": r.offer.json]
        },
        SignalingMethod("unsubscribe", .member("subscribe"), target: subscription) { p, core, c in
            guard let offer = try await core.unsubscribe(subscriptionId: try p.string("subscriptionId"), from: c) else { return [:] }
            return ["offer": offer.json]
        },
        SignalingMethod("answer", .member("subscribe"), target: member) { p, core, c in
            try await core.answer(memberId: try p.string("memberId"), answer: try p.sessionDescription("answer", type: "answer"), from: c)
            return [:]
        },
        SignalingMethod("iceCandidate", access: { p in
            ((try? p.string("direction")) == "send" ? .member("publish") : .member("subscribe"), member(p))
        }) { p, core, c in
            guard let direction = ConnectionDirection(rawValue: try p.string("direction")) else {
                throw RoomError.invalidParameter("direction must be \"send\" or \"recv\".")
            }
            guard case .object(let o)? = p.raw["candidate"], let text = o["candidate"]?.stringValue else {
                throw RoomError.invalidParams("candidate must be {candidate, sdpMid, sdpMLineIndex}.")
            }
            try await core.addIceCandidate(memberId: try p.string("memberId"), direction: direction, candidate: text, from: c)
            return [:]
        },
        SignalingMethod("restartIce", access: { p in
            ((try? p.string("direction")) == "send" ? .member("publish") : .member("subscribe"), member(p))
        }) { p, core, c in
            guard let direction = ConnectionDirection(rawValue: try p.string("direction")) else {
                throw RoomError.invalidParameter("direction must be \"send\" or \"recv\".")
            }
            let offer = try await core.restartIce(memberId: try p.string("memberId"), direction: direction, from: c)
            return ["offer": offer.json]
        },
        SignalingMethod("changePreferredEncoding", .member("subscribe"), target: subscription) { p, core, c in
            try core.changePreferredEncoding(subscriptionId: try p.string("subscriptionId"),
                                             preferredEncodingId: try p.string("preferredEncodingId"), from: c)
            return [:]
        },
    ]

    private static func createRequest(_ p: Params) throws -> CreateRoomRequest {
        CreateRoomRequest(name: try p.optionalString("name"), metadata: try p.optionalString("metadata"),
                          password: try p.optionalString("password"))
    }
}
