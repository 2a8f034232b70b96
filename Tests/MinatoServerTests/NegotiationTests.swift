import Testing
@testable import MinatoRooms
@testable import MinatoTransport

/// The receive connection's offer/answer state machine and the transport slot, driven with
/// integer time (a simulated clock) and no sockets, workers or actors.
@Suite struct ReceiveNegotiationTests {
    typealias Machine = ReceiveNegotiation<Int>

    @Test func twoSubscribesAtOnceOfferOneAfterTheOther() throws {
        var m = Machine()
        #expect(m.acquire(1) == .proceed)
        #expect(m.acquire(2) == .wait)            // the second subscribe waits its turn
        m.offerSent(by: 1, deadline: 10)
        #expect(m.offerOutstanding)
        #expect(m.acquire(3) == .wait)
        #expect(try m.answered(connected: true) == [.proceed(2)])
        #expect(!m.offerOutstanding)                // 2 holds the turn; nothing is out yet
        m.offerSent(by: 2, deadline: 20)
        #expect(try m.answered(connected: true) == [.proceed(3)])
        m.offerSent(by: 3, deadline: 30)
        #expect(try m.answered(connected: true) == [])
        #expect(m.acquire(4) == .proceed)
    }

    @Test func anAnswerWithNoOfferOutIsRefused() {
        var m = Machine()
        #expect(throws: RoomError.self) { try m.answered(connected: true) }
        _ = m.acquire(1)
        #expect(throws: RoomError.self) { try m.answered(connected: true) }   // granted, not offered
    }

    @Test func anOfferNeverAnsweredLetsTheNextRequestGoOnAtItsDeadline() {
        var m = Machine()
        _ = m.acquire(1)
        m.offerSent(by: 1, deadline: 100)
        #expect(m.acquire(2) == .wait)
        #expect(m.deadline == 100)
        #expect(m.timedOut(now: 99, connected: true) == [])           // not yet
        #expect(m.timedOut(now: 100, connected: true) == [.proceed(2)])
        // A late timer for an offer that was answered meanwhile does nothing.
        m.offerSent(by: 2, deadline: 200)
        #expect(m.timedOut(now: 150, connected: true) == [])
    }

    @Test func aServerChangeWhileAnOfferIsOutIsOfferedAfterTheAnswer() throws {
        var m = Machine()
        _ = m.acquire(1)
        m.offerSent(by: 1, deadline: 10)
        #expect(m.serverChanged(connected: true) == [])   // never two offers out at once
        #expect(try m.answered(connected: true) == [.sendOffer])
        m.offerSent(by: nil, deadline: 20)
        #expect(try m.answered(connected: true) == [])
    }

    @Test func unpublishDuringASubscribeIsCarriedByTheSubscribersOffer() throws {
        var m = Machine()
        _ = m.acquire(1)                                    // a subscribe holds the turn
        #expect(m.serverChanged(connected: true) == [])   // a publication ends meanwhile
        m.offerSent(by: 1, deadline: 10)                    // its offer carries that change
        #expect(try m.answered(connected: true) == [])    // nothing more is owed
    }

    @Test func aHolderThatFailsReleasesTheTurnAndAnOwedOfferGoesOut() {
        var m = Machine()
        _ = m.acquire(1)
        #expect(m.acquire(2) == .wait)
        #expect(m.release(1, connected: true) == [.proceed(2)])
        #expect(m.serverChanged(connected: true) == [])
        #expect(m.release(2, connected: true) == [.sendOffer])
    }

    @Test func reconnectMidNegotiationOffersAgainOnTheNewConnection() throws {
        var m = Machine()
        _ = m.acquire(1)
        m.offerSent(by: 1, deadline: 10)
        #expect(m.acquire(2) == .wait)
        #expect(m.reconnected() == [.sendOffer])   // the old connection may have lost the offer
        m.offerSent(by: nil, deadline: 20)          // the re-offer replaces it; 2 still waits
        #expect(m.deadline == 20)
        #expect(try m.answered(connected: true) == [.proceed(2)])
    }

    @Test func aChangeWhileDisconnectedIsOwedUntilTheReconnect() {
        var m = Machine()
        #expect(m.serverChanged(connected: false) == [])
        #expect(m.reconnected() == [.sendOffer])
        m.offerSent(by: nil, deadline: 5)
        #expect(m.offerOutstanding)
    }

    @Test func closingFailsEveryWaitingRequest() {
        var m = Machine()
        _ = m.acquire(1)
        m.offerSent(by: 1, deadline: 10)
        _ = m.acquire(2)
        _ = m.acquire(3)
        #expect(m.close() == [.fail(2), .fail(3)])
        #expect(m.acquire(4) == .closed)
        #expect(m.serverChanged(connected: true) == [])
    }
}

@Suite struct PeerTransportTests {
    @Test func requestsWaitForOneCreationAndCandidatesAreHeldUntilTheRemoteIsApplied() throws {
        var t = PeerTransport()
        guard case .create = t.need(1) else { Issue.record("the first request creates"); return }
        guard case .wait = t.need(2) else { Issue.record("the second waits"); return }
        guard case .held = try t.trickle("candidate:1 1 udp 1 127.0.0.1 5000 typ host", maxCount: 3, maxHeldBytes: 1000) else {
            Issue.record("held before the transport exists"); return
        }
        #expect(t.isCreating)
        #expect(t.failed() == [2])                         // a failure lets the waiter try again
        guard case .create = t.need(2) else { Issue.record("the waiter creates next"); return }
        #expect(try t.applyRemote() == ["candidate:1 1 udp 1 127.0.0.1 5000 typ host"])
        #expect(try t.applyRemote() == nil)                // applied once only
        #expect(throws: RoomError.self) {                  // the count limit counts every candidate trickled
            _ = try t.trickle(nil, maxCount: 1, maxHeldBytes: 1000)
        }
    }

    /// docs/protocol.md "ICE restart": a description with another ufrag restarts ICE once its
    /// parameters were applied; the restart makes the next description apply again, with the
    /// trickle count starting afresh; another DTLS fingerprint is refused.
    @Test func anotherUfragAfterTheRemoteWasAppliedIsAnIceRestart() throws {
        var t = PeerTransport()
        guard case .create = t.need(1) else { Issue.record("the first request creates"); return }
        let d = TransportDescription(id: TransportId(1), iceUfrag: "s1", icePwd: "p1", candidates: [], fingerprint: "sha-256 AA", iceLite: true)
        _ = t.created(d)
        #expect(try t.restarts(ufrag: "c1", fingerprint: "sha-256 CC") == false, "nothing applied yet: not a restart")
        #expect(try t.applyRemote(candidates: 2, maxCount: 3, ufrag: "c1", fingerprint: "sha-256 CC") == [])
        #expect(try t.restarts(ufrag: "c1", fingerprint: "sha-256 CC") == false, "the same ufrag: a renegotiation")
        #expect(try t.restarts(ufrag: "c2", fingerprint: "SHA-256 cc") == true)
        #expect(throws: RoomError.self) { _ = try t.restarts(ufrag: "c2", fingerprint: "sha-256 DD") }
        let fresh = TransportDescription(id: TransportId(1), iceUfrag: "s2", icePwd: "p2", candidates: [], fingerprint: "sha-256 AA", iceLite: true)
        t.restarted(fresh)
        #expect(t.description?.iceUfrag == "s2")
        #expect(t.trickled == 0, "the new ICE generation counts its candidates afresh")
        guard case .held = try t.trickle("candidate:1 1 udp 1 127.0.0.1 5000 typ host", maxCount: 3, maxHeldBytes: 1000) else {
            Issue.record("held until the restart's description is applied"); return
        }
        #expect(try t.applyRemote(candidates: 2, maxCount: 3, ufrag: "c2", fingerprint: "sha-256 CC") == ["candidate:1 1 udp 1 127.0.0.1 5000 typ host"])
        #expect(t.remoteUfrag == "c2")
        #expect(try t.restarts(ufrag: "c2", fingerprint: "sha-256 CC") == false)
    }

    @Test func heldBytesAreBounded() throws {
        var t = PeerTransport()
        let line = "candidate:" + String(repeating: "x", count: 90)
        _ = try t.trickle(line, maxCount: 100, maxHeldBytes: 250)
        _ = try t.trickle(line, maxCount: 100, maxHeldBytes: 250)
        #expect(throws: RoomError.self) { _ = try t.trickle(line, maxCount: 100, maxHeldBytes: 250) }
        #expect(t.trickled == 2)
    }
}
