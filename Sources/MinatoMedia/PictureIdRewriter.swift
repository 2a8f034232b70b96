internal import MinatoWire

/// Keeps a VP8 consumer's PictureID and TL0PICIDX continuous: across a simulcast layer switch
/// (each layer's encoder numbers its own pictures) and across pictures it leaves out (a
/// temporal layer it does not forward). After a `resync`, the next packet's PictureID continues
/// at last + 1 and its TL0PICIDX at last + 1, and later packets keep that offset; each dropped
/// picture (`drop`) moves the later ones down by one, so the subscriber's decoder sees every
/// number and waits for no missing picture. Reordered packets keep their place (only newer
/// values move "last"; a late one gets the offset that held at its place). Sans-IO,
/// allocation-free; rewrites the descriptor in place.
struct PictureIdRewriter {
    private var pictureIdDelta: UInt16 = 0
    private var tl0Delta: UInt8 = 0
    private var lastPictureId: UInt16 = 0
    private var lastTl0: UInt8 = 0
    private var havePictureId = false
    private var haveTl0 = false
    private var needsSync = false
    /// The newest producer PictureID of this run, forwarded or dropped, and the dropped ones.
    private var highestInput: UInt16 = 0
    private var haveInput = false
    private var dropped = DroppedNumbers(mask: 0x7FFF)

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
            var delta = pictureIdDelta
            if sync || !haveInput || dropped.mask != mask {
                if sync && havePictureId { pictureIdDelta = (lastPictureId &+ 1) &- id }
                delta = pictureIdDelta
                dropped = DroppedNumbers(mask: mask)
                highestInput = id
                haveInput = true
            } else if dropped.isNewer(id, than: highestInput) {
                highestInput = id
            } else if !dropped.isEmpty {
                // Late (or another packet of the newest picture): the offset before later drops.
                delta &+= UInt16(truncatingIfNeeded: dropped.dropsNewer(than: id) ?? 0)
            }
            let out = (id &+ delta) & mask
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

    /// Leaves picture `pictureId` (of a packet not forwarded) out of the numbering: once per
    /// picture, when it is newer than every one seen in this run.
    @inline(__always)
    mutating func drop(pictureId id: UInt16) {
        guard haveInput, !needsSync, dropped.isNewer(id & dropped.mask, than: highestInput) else { return }
        highestInput = id & dropped.mask
        pictureIdDelta &-= 1
        dropped.append(id)
    }

    /// Writes the current offsets into a resent packet's descriptor (no resync, "last" unchanged):
    /// a retransmission carries the values the first copy carried.
    @inline(__always)
    func translate(_ payload: UnsafeMutableRawBufferPointer) {
        let view = UnsafeRawBufferPointer(payload)
        guard let d = Vp8PayloadDescriptor(view) else { return }
        if let id = d.pictureId(in: view) {
            var delta = pictureIdDelta
            if haveInput, !dropped.isEmpty, !dropped.isNewer(id, than: highestInput) {
                delta &+= UInt16(truncatingIfNeeded: dropped.dropsNewer(than: id) ?? 0)
            }
            d.setPictureId(id &+ delta, in: payload)
        }
        if let tl0 = d.tl0PicIdx(in: view) { d.setTl0PicIdx(tl0 &+ tl0Delta, in: payload) }
    }
}
