import Testing
@testable import MinatoClient

/// `activeSpeakersChanged` as the server sends it (docs/protocol.md "Active speakers"): read
/// into `ActiveSpeakersChanged`, kept by `ActiveSpeakerBoard` (latest list, per-member level,
/// a stream of changes only).
@Suite struct ActiveSpeakersParsingTests {
    static func params(room: String = "r1", _ speakers: [(String, String, Double)], version: Int? = nil) -> JSON {
        var o: [String: JSON] = [
            "roomId": .string(room), "type": "activeSpeakersChanged",
            "data": ["speakers": .array(speakers.map { ["memberId": .string($0.0), "publicationId": .string($0.1),
                                                         "level": .number($0.2)] })]]
        if let version { o["version"] = .number(Double(version)) }
        return .object(o)
    }

    @Test func readsTheListLoudestFirst() throws {
        let e = try #require(ActiveSpeakersChanged(Self.params([("a", "pa", 0.3), ("b", "pb", 0.1)])))
        #expect(e.roomId == "r1")
        #expect(e.speakers == [ActiveSpeaker(memberId: "a", publicationId: "pa", level: 0.3),
                               ActiveSpeaker(memberId: "b", publicationId: "pb", level: 0.1)])
        #expect(ActiveSpeakersChanged(Self.params([], version: 3)) == nil, "a versioned event is a RoomEvent")
        #expect(ActiveSpeakersChanged(["roomId": "r1", "type": "memberJoined", "data": [:]]) == nil)
        // A level outside 0...1 is clamped; an entry without ids is left out.
        let odd: JSON = ["roomId": "r1", "type": "activeSpeakersChanged",
                         "data": ["speakers": [["memberId": "a", "publicationId": "pa", "level": 7], ["level": .number(0.5)]]]]
        #expect(ActiveSpeakersChanged(odd)?.speakers == [ActiveSpeaker(memberId: "a", publicationId: "pa", level: 1)])
    }

    @Test func theBoardKeepsTheLatestListAndStreamsChangesOnly() async {
        let board = ActiveSpeakerBoard()
        #expect(board.deliver(Self.params([("a", "pa", 0.3)]), roomId: "r1"))
        #expect(board.deliver(Self.params([("a", "pa", 0.3)]), roomId: "r1"), "the same list from a second local member")
        #expect(board.deliver(Self.params(room: "other", [("x", "px", 0.2)]), roomId: "r1"), "another room's: consumed, ignored")
        #expect(board.deliver(Self.params([("b", "pb", 0.2), ("a", "pa", 0.1)]), roomId: "r1"))
        #expect(!board.deliver(["roomId": "r1", "version": 4, "type": "memberJoined", "data": [:]], roomId: "r1"))
        #expect(board.speakers.map(\.memberId) == ["b", "a"])
        #expect(board.audioLevel(of: "a") == 0.1 && board.audioLevel(of: "c") == 0)
        board.finish()
        var lists: [[String]] = []
        for await list in board.changes { lists.append(list.map(\.memberId)) }
        #expect(lists == [["a"], ["b", "a"]])
    }
}
