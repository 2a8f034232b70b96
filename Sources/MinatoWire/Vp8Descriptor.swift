/// Where the fields an SFU reads or rewrites sit in a VP8 payload descriptor (RFC 7741 §4.2):
/// the PictureID (7 or 15 bits), TL0PICIDX and the temporal layer index (TID). Offsets are
/// from the start of the RTP payload; 0 means the field is absent (offset 0 is the first
/// descriptor byte, never one of these). Parsing reads only, never traps, and a descriptor
/// that does not fit the payload is nil.
public struct Vp8PayloadDescriptor: Sendable, Equatable {
    /// Offset of the PictureID's first byte; 0: none.
    public var pictureIdOffset: Int = 0
    /// True for the 15-bit form (M bit set), false for 7 bits.
    public var longPictureId = false
    /// Offset of TL0PICIDX; 0: none.
    public var tl0PicIdxOffset: Int = 0
    /// Offset of the TID/Y/KEYIDX byte when the T bit is set; 0: no temporal index.
    public var temporalOffset: Int = 0

    @inlinable
    public init?(_ p: UnsafeRawBufferPointer) {
        guard p.count >= 1 else { return nil }
        var i = 1
        if p[0] & 0x80 != 0 {  // X
            guard p.count > i else { return nil }
            let x = p[i]
            i += 1
            if x & 0x80 != 0 {  // I
                guard p.count > i else { return nil }
                pictureIdOffset = i
                longPictureId = p[i] & 0x80 != 0
                i += longPictureId ? 2 : 1
            }
            if x & 0x40 != 0 {  // L
                tl0PicIdxOffset = i
                i += 1
            }
            if x & 0x20 != 0 { temporalOffset = i }  // T
            if x & 0x30 != 0 { i += 1 }  // T or K: one TID/Y/KEYIDX byte
        }
        guard p.count > i else { return nil }
    }

    /// The PictureID (masked to 7 or 15 bits); nil when absent.
    @inlinable
    public func pictureId(in p: UnsafeRawBufferPointer) -> UInt16? {
        guard pictureIdOffset != 0 else { return nil }
        if longPictureId { return (UInt16(p[pictureIdOffset]) & 0x7F) << 8 | UInt16(p[pictureIdOffset + 1]) }
        return UInt16(p[pictureIdOffset] & 0x7F)
    }

    /// Writes `id` (masked to the field's 7 or 15 bits), keeping the M bit.
    @inlinable
    public func setPictureId(_ id: UInt16, in p: UnsafeMutableRawBufferPointer) {
        guard pictureIdOffset != 0 else { return }
        if longPictureId {
            p[pictureIdOffset] = 0x80 | UInt8(truncatingIfNeeded: id >> 8) & 0x7F
            p[pictureIdOffset + 1] = UInt8(truncatingIfNeeded: id)
        } else {
            p[pictureIdOffset] = UInt8(truncatingIfNeeded: id) & 0x7F
        }
    }

    /// TL0PICIDX; nil when absent.
    @inlinable
    public func tl0PicIdx(in p: UnsafeRawBufferPointer) -> UInt8? {
        tl0PicIdxOffset == 0 ? nil : p[tl0PicIdxOffset]
    }

    @inlinable
    public func setTl0PicIdx(_ v: UInt8, in p: UnsafeMutableRawBufferPointer) {
        guard tl0PicIdxOffset != 0 else { return }
        p[tl0PicIdxOffset] = v
    }

    /// The temporal layer index (TID, 0...3); nil when the T bit is clear.
    @inlinable
    public func temporalLayer(in p: UnsafeRawBufferPointer) -> UInt8? {
        temporalOffset == 0 ? nil : p[temporalOffset] >> 6
    }

    /// True when the packet starts a frame: S bit set and partition index 0.
    @inlinable
    public func startsFrame(in p: UnsafeRawBufferPointer) -> Bool {
        p.count > 0 && p[0] & 0x1F == 0x10
    }

    /// The Y bit (layer sync): the frame refers only to base-layer (TID 0) frames, so a
    /// receiver of the lower layers alone can start taking its layer here. False without T.
    @inlinable
    public func isLayerSync(in p: UnsafeRawBufferPointer) -> Bool {
        temporalOffset != 0 && temporalOffset < p.count && p[temporalOffset] & 0x20 != 0
    }
}
