internal import MinatoWire

/// Keeps a simulcast consumer's VP8 PictureID and TL0PICIDX continuous when it switches from
/// one layer to another (each layer's encoder numbers its own pictures): after a `resync`, the
/// next packet's PictureID continues at last + 1 and its TL0PICIDX at last + 1, and later
/// packets keep that offset. Reordered packets keep their place (only newer values move
/// "last"). Sans-IO, allocation-free; rewrites the descriptor in place.
struct PictureIdRewriter {
    private var pictureIdDelta: UInt16 = 0
    private var tl0Delta: UInt8 = 0
    private var lastPictureId: UInt16 = 0
    private var lastTl0: UInt8 = 0
    private var havePictureId = false
    private var haveTl0 = false
    private var needsSync = false

    /// The next packet starts a new source (a layer switch).
    mutating func resync() { needsSync = true }

    /// Rewrites the descriptor at the start of `payload` (a VP8 RTP payload).
    @inline(__always)
    mutating func rewrite(_ payload: UnsafeMutableRawBufferPointer) {
        let view = UnsafeRawBufferPointer(payload)
        guard let d = Vp8PayloadDescriptor(view) else { return }
        let sync = needsSync
        needsSync = false
        if let id = d.pictureId(in: view) {
            let mask: UInt16 = d.longPictureId ? 0x7FFF : 0x7F
            if sync && havePictureId { pictureIdDelta = (lastPictureId &+ 1) &- id }
            let out = (id &+ pictureIdDelta) & mask
            // Newer (mod the field) moves "last"; the first value always does.
            let ahead = (out &- lastPictureId) & mask
            if !havePictureId || (ahead != 0 && ahead <= mask / 2) { lastPictureId = out }
            havePictureId = true
            d.setPictureId(out, in: payload)
        }
        if let tl0 = d.tl0PicIdx(in: view) {
            if sync && haveTl0 { tl0Delta = (lastTl0 &+ 1) &- tl0 }
            let out = tl0 &+ tl0Delta
            let ahead = out &- lastTl0
            if !haveTl0 || (ahead != 0 && ahead < 128) { lastTl0 = out }
            haveTl0 = true
            d.setTl0PicIdx(out, in: payload)
        }
    }

    /// Writes the current offsets into a resent packet's descriptor (no resync, "last" unchanged):
    /// a retransmission carries the values the first copy carried.
    @inline(__always)
    func translate(_ payload: UnsafeMutableRawBufferPointer) {
        let view = UnsafeRawBufferPointer(payload)
        guard let d = Vp8PayloadDescriptor(view) else { return }
        if let id = d.pictureId(in: view) { d.setPictureId(id &+ pictureIdDelta, in: payload) }
        if let tl0 = d.tl0PicIdx(in: view) { d.setTl0PicIdx(tl0 &+ tl0Delta, in: payload) }
    }
}
