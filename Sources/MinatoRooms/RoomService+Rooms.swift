internal import Foundation
internal import MinatoMedia
internal import MinatoTransport

/// Room methods: create, find, close, metadata, and the event log (`subscribeRoomEvents`).
extension RoomService {
    public func listRooms(from channel: ClientChannel) throws -> [JSONValue] {
        let grant = try grant(of: channel)
        return rooms.filter { room in grant.map { !$0.rules(forRoom: room.name).isEmpty } ?? true }.map(\.summaryJSON)
    }

    public func createRoom(_ r: CreateRoomRequest, from channel: ClientChannel) async throws -> JSONValue {
        let grant = try grant(of: channel)
        let name = try Validate.name(r.name, key: "name")
        let metadata = try Validate.metadata(r.metadata, key: "metadata") ?? ""
        let password = try Validate.password(r.password, key: "password")
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
        return room.json
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

    func makeRoom(name: String?, metadata: String, password: PasswordHash?, keepWhenEmpty: Bool = false) -> Room {
        // Least-loaded worker by room count.
        var counts = [Int](repeating: 0, count: workers.count)
        for r in rooms where counts.indices.contains(r.worker) { counts[r.worker] += 1 }
        let worker = counts.indices.min { counts[$0] < counts[$1] } ?? 0
        let room = Room(id: newId(), name: name, metadata: metadata,
                        password: password, worker: worker, router: RouterId(nextRouterId),
                        keepWhenEmpty: keepWhenEmpty, now: clock.now)
        nextRouterId &+= 1
        rooms.append(room)
        roomObserver?(.opened(id: room.id, name: room.name))
        armSweep()  // its empty timeout
        logger.info("room created", metadata: ["room": "\(room.id)", "worker": "\(worker)"])
        return room
    }

    /// `findRoom` (by id or name) and `getRoom` (by id).
    public func findRoom(_ r: FindRoomRequest, from channel: ClientChannel) throws -> JSONValue {
        let grant = try grant(of: channel)
        if let id = r.id {
            let room = try room(id)
            try permit(grant, room: room)
            return room.json
        }
        if let name = try Validate.name(r.name, key: "name") {
            try permit(grant, roomNamed: name, action: nil)
            guard let room = rooms.first(where: { $0.name == name }) else { throw RoomError.roomNotFound("named '\(name)'") }
            return room.json
        }
        throw RoomError.invalidParams("findRoom needs \"id\" or \"name\".")
    }

    public func findOrCreateRoom(_ r: CreateRoomRequest, from channel: ClientChannel) async throws -> JSONValue {
        let grant = try grant(of: channel)
        guard let name = try Validate.name(r.name, key: "name") else { throw RoomError.invalidParams("findOrCreateRoom needs \"name\".") }
        let metadata = try Validate.metadata(r.metadata, key: "metadata") ?? ""
        let password = try Validate.password(r.password, key: "password")
        try permit(grant, roomNamed: name, action: nil)
        if let r = rooms.first(where: { $0.name == name }) { return r.json }
        try permit(grant, roomNamed: name, action: "create")
        try checkRoomLimits(channel: channel)
        let hash = await hashPassword(password)
        // Another request may have made it meanwhile: then this is a find.
        if let r = rooms.first(where: { $0.name == name }) { return r.json }
        try checkRoomLimits(channel: channel)
        let room = makeRoom(name: name, metadata: metadata, password: hash)
        connections[channel.id, default: .init()].roomsCreated += 1
        return room.json
    }

    public func closeRoom(_ roomId: String, from channel: ClientChannel) throws {
        let grant = try grant(of: channel)
        let room = try room(roomId)
        try permit(grant, roomNamed: room.name, action: "close")
        close(room)
    }

    /// Closes `room`: every member leaves (reason `roomClosed`), then the `closed` event, with
    /// `reason` when given (`emptyTimeout` for a room the sweep closed).
    func close(_ room: Room, reason: String? = nil) {
        releaseSites(of: room)
        // Members hear `closed` too (after their memberLeft), not only event listeners.
        for m in room.members {
            if let c = m.channel { room.listeners[c.id] = c }
            removeMember(m, from: room, reason: "roomClosed")
        }
        emit(room, "closed", [:], reason: reason)
        rooms.removeAll { $0 === room }
        roomObserver?(.closed(id: room.id, name: room.name))
        logger.info("room closed", metadata: ["room": "\(room.id)"])
    }

    public func updateRoomMetadata(_ roomId: String, metadata: String, from channel: ClientChannel) throws {
        let grant = try grant(of: channel)
        let room = try room(roomId)
        try permit(grant, roomNamed: room.name, action: "updateMetadata")
        room.metadata = try Validate.metadata(metadata, key: "metadata") ?? ""
        emit(room, "metadataUpdated", ["room": room.summaryJSON])
    }

    /// At most `limit` events with `version > offset`, and the offset to ask for next while
    /// more remain. From then on this connection also receives the room's live events.
    public func subscribeRoomEvents(_ r: RoomEventsRequest, from channel: ClientChannel) throws -> RoomEventsPage {
        let grant = try grant(of: channel)
        let room = try room(r.roomId)
        try permit(grant, room: room)
        let offset = r.offset
        let limit = r.limit ?? configuration.maxEventsPerPage
        guard (1...configuration.maxEventsPerPage).contains(limit) else {
            throw RoomError.invalidParameter("limit must be 1...\(configuration.maxEventsPerPage) (rooms.maxEventsPerPage).")
        }
        room.listeners[channel.id] = channel
        // The log is in version order: find the first event after `offset`.
        let start = room.events.firstIndex { ($0["version"]?.intValue ?? 0) > offset } ?? room.events.endIndex
        let end = min(room.events.endIndex, start + limit)
        let page = Array(room.events[start..<end])
        let next = end < room.events.endIndex ? page.last?["version"]?.intValue : nil
        return RoomEventsPage(events: page, nextOffset: next)
    }
}
