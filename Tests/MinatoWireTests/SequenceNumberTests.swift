import Testing
@testable import MinatoWire

@Suite struct SequenceNumberTests {
    @Test func serialComparison() {
        #expect(SequenceNumber(1).isNewer(than: SequenceNumber(0)))
        #expect(SequenceNumber(0).isNewer(than: SequenceNumber(65535)))
        #expect(!SequenceNumber(65535).isNewer(than: SequenceNumber(0)))
        #expect(!SequenceNumber(5).isNewer(than: SequenceNumber(5)))
        #expect(SequenceNumber(65530).distance(to: SequenceNumber(4)) == 10)
        #expect(SequenceNumber(4).distance(to: SequenceNumber(65530)) == -10)
        #expect(SequenceNumber(65535).advanced(by: 2) == SequenceNumber(1))
        #expect(SequenceNumber(1).advanced(by: -2) == SequenceNumber(65535))
    }

    @Test func unwrapForwardAcrossWrap() {
        var u = SequenceUnwrapper()
        #expect(u.highestExtended == nil)
        #expect(u.unwrap(65533) == 65533)
        #expect(u.unwrap(65534) == 65534)
        #expect(u.unwrap(65535) == 65535)
        #expect(u.unwrap(0) == 65536)
        #expect(u.unwrap(1) == 65537)
        #expect(u.highestExtended == 65537)
    }

    @Test func unwrapReorderAcrossWrap() {
        var u = SequenceUnwrapper()
        #expect(u.unwrap(65534) == 65534)
        #expect(u.unwrap(2) == 65538)  // jumped over the wrap (loss)
        #expect(u.unwrap(65535) == 65535)  // late packet from before the wrap
        #expect(u.unwrap(0) == 65536)
        #expect(u.unwrap(3) == 65539)
        #expect(u.highestExtended == 65539)
    }

    @Test func unwrapManyCycles() {
        var u = SequenceUnwrapper()
        var expected: UInt64 = 100
        var s: UInt16 = 100
        _ = u.unwrap(s)
        for _ in 0..<(5 * 65536 / 1000) {
            s &+= 1000
            expected += 1000
            #expect(u.unwrap(s) == expected)
        }
        #expect(ExtendedSequenceNumber(expected).cycles == expected >> 16)
        #expect(ExtendedSequenceNumber(expected).wire == SequenceNumber(s))
    }

    @Test func packetBeforeTheFirstAcrossZeroClampsToZero() {
        var u = SequenceUnwrapper()
        #expect(u.unwrap(2) == 2)
        #expect(u.unwrap(1) == 1)
        #expect(u.unwrap(65535) == 0)
        #expect(u.unwrap(3) == 3)
    }

    @Test func typedUnwrap() {
        var u = SequenceUnwrapper()
        #expect(u.unwrap(SequenceNumber(65535)) == ExtendedSequenceNumber(65535))
        #expect(u.unwrap(SequenceNumber(0)) == ExtendedSequenceNumber(65536))
        #expect(ExtendedSequenceNumber(3) < ExtendedSequenceNumber(65536))
    }
}
