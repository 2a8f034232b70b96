/// RED, the RTP payload for redundant audio data (RFC 2198): block headers (4 bytes for each
/// redundant block, F bit set; 1 byte for the last, the primary), then the redundant blocks'
/// data oldest first, then the primary block's data. Stateless; reads the caller's buffer.
public enum RedPayload {
    /// Where the primary (newest) block's data lies in `payload` (padding excluded), with its
    /// payload type; nil when the headers or the redundant blocks' lengths do not fit.
    @inlinable
    public static func primary(in payload: UnsafeRawBufferPointer) -> (offset: Int, length: Int, payloadType: UInt8)? {
        var o = 0
        var redundant = 0
        while o < payload.count {
            let b = payload[o]
            if b & 0x80 == 0 {
                let start = o + 1 + redundant
                guard start <= payload.count else { return nil }
                return (start, payload.count - start, b & 0x7F)
            }
            guard o + 4 <= payload.count else { return nil }
            redundant += Int(payload[o + 2] & 0x03) << 8 | Int(payload[o + 3])
            o += 4
        }
        return nil
    }
}
