internal import Foundation
internal import MinatoMedia
internal import MinatoTransport

/// Room methods: create, find, close, metadata, and the event log (`subscribeRoomEvents`).
extension RoomService {
    func createRoom(_ p: Params, channel: ClientChannel, grant: AuthGrant?) async throws -> JSONValue {
        let name = try p.name("name")
        let metadata = try p.metadata("metadata") ?? ""
        let password = try p.password("password")
        try permit(grant, roomNamed: name, action: "create")
        func check() throws {
            if let name, rooms.contains(where: { $0.name == name }) { throw RoomError.roomNameDuplicated(name) }
            try checkRoomLimits(channel: channel)
        }
        try check()
        let hash = await hashPassword(password)
        try check()
        let room = makeRoom(name: name, metadata: metadata, password: hash)
        connections[channel.id, default: .init()].roomsCreated += 1
        return ["room": room.json]
    }

    /// Server-wide and per-connection room limits (`rooms.maxRooms`, `rooms.maxRoomsCreatedPerConnection`).
    func checkRoomLimits(channel: ClientChannel?) throws(RoomError) {
        guard rooms.count < configuration.maxRooms else {
            throw .limitExceeded("The server has its maximum of \(configuration.maxRooms) rooms (rooms.maxRooms).")
        }
        if let channel, let used = connections[channel.id]?.roomsCreated, used >= configuration.maxRoomsCreatedPerConnection {
            throw .limitExceeded("This connection has created \(used) rooms, its maximum (rooms.maxRoomsCreatedPerConnection).")
        }
    }

    func hashPassword(_ password: String?) async -> PasswordHash? {
        guard let password else { return nil }
        return await passwords.hash(password)
    }

    func makeRoom(name: String?, metadata: String, password: PasswordHash?) -> Room {
        // Least-loaded worker by room count.
        var counts = [Int](repeating: 0, count: workers.count)
        for r in rooms where counts.indices.contains(r.worker) { counts[r.worker] += 1 }
        let worker = counts.indices.min { counts[$0] < counts[$1] } ?? 0
        let room = Room(id: UUID().uuidString.lowercased(), name: name, metadata: metadata,
                        password: password, worker: worker, router: RouterId(nextRouterId))
        nextRouterId &+= 1
        rooms.append(room)
        logger.info("room created", metadata: ["room": "\(room.id)", "worker": "\(worker)"])
        return room
    }

    func findRoom(_ p: Params, grant: AuthGrant?) throws -> JSONValue {
        if let id = try p.optionalString("id") {
            let r = try room(id)
            try permit(grant, room: r)
            return ["room": r.json]
        }
        if let name = try p.name("name") {
            try permit(grant, roomNamed: name, action: nil)
            guard let r = rooms.first(where: { $0.name == name }) else { throw RoomError.roomNotFound("named '\(name)'") }
            return ["room": r.json]
        }
        throw RoomError.invalidParams("findRoom needs \"id\" or \"name\".")
    }

    func findOrCreateRoom(_ p: Params, channel: ClientChannel, grant: AuthGrant?) async throws -> JSONValue {
        guard let name = try p.name("name") else { throw RoomError.invalidParams("findOrCreateRoom needs \"name\".") }
        let metadata = try p.metadata("metadata") ?? ""
        let password = try p.password("password")
        try permit(grant, roomNamed: name, action: nil)
        if let r = rooms.first(where: { $0.name == name }) { return ["room": r.json] }
        try permit(grant, roomNamed: name, action: "create")
        try checkRoomLimits(channel: channel)
        let hash = await hashPassword(password)
        // Another request may have made it meanwhile: then this is a find.
        if let r = rooms.first(where: { $0.name == name }) { return ["room": r.json] }
        try checkRoomLimits(channel: channel)
        let room = makeRoom(name: name, metadata: metadata, password: hash)
        connections[channel.id, default: .init()].roomsCreated += 1
        return ["room": room.json]
    }

    func closeRoom(_ p: Params, grant: AuthGrant?) throws -> JSONValue {
        let room = try room(p.string("roomId"))
        try permit(grant, roomNamed: room.name, action: "close")
        close(room)
        return [:]
    }

    func close(_ room: Room) {
        // Members hear `closed` too (after their memberLeft), not only event listeners.
        for m in room.members {
            if let c = m.channel { room.listeners[c.id] = c }
            removeMember(m, from: room, reason: "roomClosed")
        }
        emit(room, "closed", [:])
        rooms.removeAll { $0 === room }
        logger.info("room closed", metadata: ["room": "\(room.id)"])
    }

    func updateRoomMetadata(_ p: Params, grant: AuthGrant?) throws -> JSONValue {
        let room = try room(p.string("roomId"))
        try permit(grant, roomNamed: room.name, action: "updateMetadata")
        room.metadata = try p.requiredMetadata("metadata")
        emit(room, "metadataUpdated", ["room": room.summaryJSON])
        return [:]
    }

    /// `{roomId, offset, limit?}` → `{events, nextOffset}`: at most `limit` events with
    /// `version > offset`; `nextOffset` is the offset to ask for next while more remain, else
    /// null. From then on this connection also receives the room's live events.
    func subscribeRoomEvents(_ p: Params, channel: ClientChannel, grant: AuthGrant?) throws -> JSONValue {
        let room = try room(p.string("roomId"))
        try permit(grant, room: room)
        let offset = try p.optionalInt("offset") ?? 0
        let limit = try p.optionalInt("limit") ?? configuration.maxEventsPerPage
        guard (1...configuration.maxEventsPerPage).contains(limit) else {
            throw RoomError.invalidParameter("limit must be 1...\(configuration.maxEventsPerPage) (rooms.maxEventsPerPage).")
        }
        room.listeners[channel.id] = channel
        // The log is in version order: find the first event after `offset`.
        let start = room.events.firstIndex { ($0["version"]?.intValue ?? 0) > offset } ?? room.events.endIndex
        let end = min(room.events.endIndex, start + limit)
        let page = Array(room.events[start..<end])
        let next: JSONValue = end < room.events.endIndex ? (page.last?["version"] ?? .null) : .null
        return ["events": .array(page), "nextOffset": next]
    }
}
