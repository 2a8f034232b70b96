/// A view over one RTP packet (RFC 3550 §5.1) in a caller-owned buffer. It owns nothing and
/// never allocates; fields are read and written in place on demand. `init?` validates the
/// layout (version 2, CSRC list, header-extension block and padding all fit), so every
/// accessor is bounds-safe afterwards. Valid only while the caller keeps the memory alive;
/// lives on whichever thread owns that buffer.
public struct RtpPacketView {
    /// The packet bytes, exactly (passed by argument; not owned).
    public let buffer: UnsafeMutableRawBufferPointer
    /// Fixed header + CSRCs + extension block.
    public let headerLength: Int
    /// Payload bytes, excluding padding.
    public let payloadLength: Int
    /// Offset of the 4-byte extension block header, or 0 when the X bit is clear.
    @usableFromInline let extensionOffset: Int

    public static let fixedHeaderLength = 12

    /// Writes a 12-byte RTP header (version 2, no padding, extension or CSRCs) at the start
    /// of `buffer`; returns 12, or 0 if it does not fit.
    @inlinable
    public static func writeHeader(
        into buffer: UnsafeMutableRawBufferPointer, payloadType: UInt8, sequenceNumber: UInt16,
        timestamp: UInt32, ssrc: UInt32, marker: Bool = false
    ) -> Int {
        guard buffer.count >= 12 else { return 0 }
        buffer[0] = 0x80
        buffer[1] = (marker ? 0x80 : 0) | (payloadType & 0x7F)
        buffer.setWireU16(2, sequenceNumber)
        buffer.setWireU32(4, timestamp)
        buffer.setWireU32(8, ssrc)
        return 12
    }

    @inlinable
    public init?(_ buffer: UnsafeMutableRawBufferPointer) {
        let n = buffer.count
        guard n >= 12 else { return nil }
        let b0 = buffer[0]
        guard b0 >> 6 == 2 else { return nil }
        var header = 12 + Int(b0 & 0x0F) * 4
        guard header <= n else { return nil }
        var ext = 0
        if b0 & 0x10 != 0 {
            guard header + 4 <= n else { return nil }
            ext = header
            let words = Int(buffer.wireU16(header + 2))
            header += 4 + words * 4
            guard header <= n else { return nil }
        }
        var padding = 0
        if b0 & 0x20 != 0 {
            padding = Int(buffer[n - 1])
            guard padding >= 1, header + padding <= n else { return nil }
        }
        self.buffer = buffer
        self.headerLength = header
        self.payloadLength = n - header - padding
        self.extensionOffset = ext
    }

    @inlinable public var version: UInt8 { buffer[0] >> 6 }
    @inlinable public var hasPadding: Bool { buffer[0] & 0x20 != 0 }
    @inlinable public var hasExtension: Bool { extensionOffset != 0 }
    @inlinable public var csrcCount: Int { Int(buffer[0] & 0x0F) }
    /// Number of padding bytes at the end (0 without the P bit).
    @inlinable public var paddingLength: Int { buffer.count - headerLength - payloadLength }

    @inlinable public var marker: Bool {
        get { buffer[1] & 0x80 != 0 }
        nonmutating set { buffer[1] = newValue ? buffer[1] | 0x80 : buffer[1] & 0x7F }
    }

    /// 7-bit payload type; setting masks to 7 bits and keeps the marker bit.
    @inlinable public var payloadType: UInt8 {
        get { buffer[1] & 0x7F }
        nonmutating set { buffer[1] = (buffer[1] & 0x80) | (newValue & 0x7F) }
    }

    @inlinable public var sequenceNumber: UInt16 {
        get { buffer.wireU16(2) }
        nonmutating set { buffer.setWireU16(2, newValue) }
    }

    @inlinable public var timestamp: UInt32 {
        get { buffer.wireU32(4) }
        nonmutating set { buffer.setWireU32(4, newValue) }
    }

    @inlinable public var ssrc: UInt32 {
        get { buffer.wireU32(8) }
        nonmutating set { buffer.setWireU32(8, newValue) }
    }

    /// CSRC at `index` (0..<csrcCount), or nil.
    @inlinable public func csrc(at index: Int) -> UInt32? {
        guard index >= 0, index < csrcCount else { return nil }
        return buffer.wireU32(12 + 4 * index)
    }

    @inlinable public var payload: UnsafeMutableRawBufferPointer {
        UnsafeMutableRawBufferPointer(rebasing: buffer[headerLength ..< headerLength + payloadLength])
    }

    /// The 16-bit "defined by profile" field of the extension block (0xBEDE one-byte form,
    /// 0x100X two-byte form), or nil without an extension block.
    @inlinable public var extensionProfile: UInt16? {
        extensionOffset == 0 ? nil : buffer.wireU16(extensionOffset)
    }

    /// The extension elements area (after the 4-byte block header).
    @inlinable public var extensionData: UnsafeMutableRawBufferPointer {
        guard extensionOffset != 0 else { return UnsafeMutableRawBufferPointer(rebasing: buffer[0 ..< 0]) }
        return UnsafeMutableRawBufferPointer(rebasing: buffer[extensionOffset + 4 ..< headerLength])
    }

    /// Value bytes of the RFC 8285 header extension element with `id`, in the one-byte (0xBEDE)
    /// or two-byte (0x100X) form; nil if absent, the block uses another profile, or the
    /// elements are malformed before `id` is found.
    @inlinable
    public func extensionValue(id: UInt8) -> UnsafeRawBufferPointer? {
        guard id != 0, let profile = extensionProfile else { return nil }
        let data = UnsafeRawBufferPointer(extensionData)
        if profile == 0xBEDE {
            guard id < 15 else { return nil }
            var i = 0
            while i < data.count {
                let h = data[i]
                let eid = h >> 4
                if eid == 0 { i += 1; continue }  // padding byte
                if eid == 15 { return nil }  // reserved: stop parsing
                let len = Int(h & 0x0F) + 1
                guard i + 1 + len <= data.count else { return nil }
                if eid == id { return UnsafeRawBufferPointer(rebasing: data[i + 1 ..< i + 1 + len]) }
                i += 1 + len
            }
            return nil
        } else if profile & 0xFFF0 == 0x1000 {
            var i = 0
            while i < data.count {
                let eid = data[i]
                if eid == 0 { i += 1; continue }  // padding byte
                guard i + 2 <= data.count else { return nil }
                let len = Int(data[i + 1])
                guard i + 2 + len <= data.count else { return nil }
                if eid == id { return UnsafeRawBufferPointer(rebasing: data[i + 2 ..< i + 2 + len]) }
                i += 2 + len
            }
            return nil
        }
        return nil
    }

    /// Rewrites header extension ids in place through `map`. Elements whose id maps to 0 (or,
    /// in the one-byte form, to 15 or more) are erased: their bytes become zero padding, which
    /// RFC 8285 §4.2/§4.3 allows anywhere between elements. The packet size never changes.
    /// Parsing stops at a malformed element or a one-byte id 15; the rest is left as is.
    @inlinable
    public func remapExtensionIds(_ map: ExtensionIdMap) {
        guard let profile = extensionProfile else { return }
        let data = extensionData
        if profile == 0xBEDE {
            var i = 0
            while i < data.count {
                let h = data[i]
                let eid = h >> 4
                if eid == 0 { i += 1; continue }
                if eid == 15 { return }
                let len = Int(h & 0x0F) + 1
                guard i + 1 + len <= data.count else { return }
                let target = map[id: eid]
                if target == 0 || target >= 15 {
                    for k in i ..< i + 1 + len { data[k] = 0 }
                } else {
                    data[i] = target << 4 | (h & 0x0F)
                }
                i += 1 + len
            }
        } else if profile & 0xFFF0 == 0x1000 {
            var i = 0
            while i < data.count {
                let eid = data[i]
                if eid == 0 { i += 1; continue }
                guard i + 2 <= data.count else { return }
                let len = Int(data[i + 1])
                guard i + 2 + len <= data.count else { return }
                let target = map[id: eid]
                if target == 0 {
                    for k in i ..< i + 2 + len { data[k] = 0 }
                } else {
                    data[i] = target
                }
                i += 2 + len
            }
        }
    }
}

extension RtpPacketView {
    /// The fixed 12-byte header (RFC 3550 §5.1) of a packet whose payload may still be
    /// encrypted: SRTP leaves these fields in clear but appends an authentication tag, so the
    /// padding count and lengths `RtpPacketView.init?` checks are not readable yet. Needs 12
    /// bytes and version 2, nothing else. A plain value, read once.
    public struct FixedHeader: Sendable, Equatable {
        public var marker: Bool
        public var payloadType: UInt8
        public var sequenceNumber: UInt16
        public var timestamp: UInt32
        public var ssrc: UInt32

        public init(marker: Bool, payloadType: UInt8, sequenceNumber: UInt16, timestamp: UInt32, ssrc: UInt32) {
            self.marker = marker
            self.payloadType = payloadType & 0x7F
            self.sequenceNumber = sequenceNumber
            self.timestamp = timestamp
            self.ssrc = ssrc
        }

        @inlinable
        public init?(_ buffer: UnsafeRawBufferPointer) {
            guard buffer.count >= 12, buffer[0] >> 6 == 2 else { return nil }
            marker = buffer[1] & 0x80 != 0
            payloadType = buffer[1] & 0x7F
            sequenceNumber = buffer.wireU16(2)
            timestamp = buffer.wireU32(4)
            ssrc = buffer.wireU32(8)
        }
    }
}

/// A fixed-size (no heap) table from incoming RFC 8285 extension ids to outgoing ones, with
/// 15 slots for ids 1...15. Unset entries are 0, meaning "erase". Two-byte-form ids above 15
/// are erased unless `keepsHighIds` is true (only `identity` sets it). A plain value.
public struct ExtensionIdMap: Sendable, Equatable, Codable {
    // Slot k (ids 0...15) lives in byte k of the 128-bit pair (low, high).
    @usableFromInline var low: UInt64 = 0
    @usableFromInline var high: UInt64 = 0
    /// When true, ids 16...255 (two-byte form only) pass through unchanged instead of being erased.
    public var keepsHighIds = false

    @inlinable public init() {}

    /// Every id 1...15 maps to itself and ids above 15 are kept.
    public static let identity: ExtensionIdMap = {
        var m = ExtensionIdMap()
        for id in UInt8(1)...15 { m[id: id] = id }
        m.keepsHighIds = true
        return m
    }()

    /// Every element is erased.
    public static let eraseAll = ExtensionIdMap()

    /// Outgoing id for incoming `id`; 0 means erase. Setting an id outside 1...15 is ignored.
    @inlinable public subscript(id: UInt8) -> UInt8 {
        get { self[id: id] }
        set { self[id: id] = newValue }
    }

    /// Same as the unlabeled subscript.
    @inlinable public subscript(id id: UInt8) -> UInt8 {
        get {
            if id == 0 { return 0 }
            if id > 15 { return keepsHighIds ? id : 0 }
            return id < 8
                ? UInt8(truncatingIfNeeded: low >> (UInt64(id) * 8))
                : UInt8(truncatingIfNeeded: high >> (UInt64(id - 8) * 8))
        }
        set {
            guard id >= 1, id <= 15 else { return }
            if id < 8 {
                let shift = UInt64(id) * 8
                low = (low & ~(0xFF << shift)) | UInt64(newValue) << shift
            } else {
                let shift = UInt64(id - 8) * 8
                high = (high & ~(0xFF << shift)) | UInt64(newValue) << shift
            }
        }
    }
}
