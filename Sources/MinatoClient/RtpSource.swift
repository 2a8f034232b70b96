internal import MinatoTransport
internal import MinatoWire

/// Anything that yields RTP packets for a publication: a synthetic generator, a file, a UDP
/// socket fed by ffmpeg or GStreamer. Once published, a source is used only on the client
/// worker's thread (`poll` every `pollIntervalMilliseconds`), so it needs no locks.
public protocol RtpSource: AnyObject {
    /// The codec the packets carry (its payload type is written into every packet).
    var codec: RtpCodec { get }
    /// How often the worker calls `poll`.
    var pollIntervalMilliseconds: UInt32 { get }
    /// Writes every packet due at `now` (CLOCK_MONOTONIC ns), one at a time, into `buffer`
    /// (a complete RTP packet: header then payload) and calls `emit(length)` after each. The
    /// publication then sets the SSRC, protects the packet in place and sends it.
    func poll(now: UInt64, buffer: UnsafeMutableRawBufferPointer, emit: (Int) -> Void)
    /// The server asked for a key frame (PLI or FIR).
    func requestKeyFrame()
}

/// The payload stamp synthetic sources write and benchmark receivers read: 4 bytes magic
/// "MNT1", the source's own packet counter (UInt32), and the send time (UInt64, CLOCK_MONOTONIC
/// ns), all big-endian, placed right after the codec's payload descriptor.
public enum PayloadStamp {
    public static let magic: UInt32 = 0x4D4E_5431
    public static let length = 16

    @inline(__always)
    public static func write(into p: UnsafeMutableRawPointer, counter: UInt32, sentAt: UInt64) {
        p.storeBytes(of: magic.bigEndian, toByteOffset: 0, as: UInt32.self)
        p.storeBytes(of: counter.bigEndian, toByteOffset: 4, as: UInt32.self)
        p.storeBytes(of: sentAt.bigEndian, toByteOffset: 8, as: UInt64.self)
    }

    /// The send time in a clear RTP packet's payload at `offset`, or nil if it carries no stamp.
    @inline(__always)
    public static func read(_ payload: UnsafeRawBufferPointer, offset: Int) -> (counter: UInt32, sentAt: UInt64)? {
        guard payload.count >= offset + length, let base = payload.baseAddress else { return nil }
        let m = UInt32(bigEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
        guard m == magic else { return nil }
        return (UInt32(bigEndian: base.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)),
                UInt64(bigEndian: base.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self)))
    }
}

/// Synthetic VP8 video at a target bitrate: `fps` frames a second, each a burst of packets of
/// `packetSize` bytes (RTP header included) sent back to back, key frames `keyFrameScale`×
/// larger every `keyFrameIntervalSec` and on request. The VP8 payload descriptor and header
/// bits are real (a receiver's key-frame detection works); the rest is the `PayloadStamp` and
/// filler, so it does not decode into pictures.
/// Confined to the worker thread once published (read `packetsSent` inside `Context.perform`).
public final class SyntheticVideoSource: RtpSource, @unchecked Sendable {
    public let codec: RtpCodec
    public let pollIntervalMilliseconds: UInt32 = 5
    public let bitrate: Int
    public let fps: Int
    public let packetSize: Int
    public let keyFrameIntervalSec: Int
    public let keyFrameScale: Int
    /// Packets written so far (read on the worker thread).
    public private(set) var packetsSent: UInt64 = 0

    private var sequence = UInt16.random(in: 0...UInt16.max)
    private var timestamp = UInt32.random(in: 0...UInt32.max)
    private var counter: UInt32 = 0
    private var nextFrameAt: UInt64 = 0
    private var lastKeyFrameAt: UInt64 = 0
    private var keyFrameWanted = true

    public init(bitrate: Int = 1_000_000, fps: Int = 30, packetSize: Int = 1200, keyFrameIntervalSec: Int = 2,
                keyFrameScale: Int = 3, codec: RtpCodec = .vp8) {
        self.bitrate = bitrate; self.fps = max(1, fps); self.packetSize = max(12 + 1 + 3 + PayloadStamp.length, packetSize)
        self.keyFrameIntervalSec = keyFrameIntervalSec; self.keyFrameScale = max(1, keyFrameScale); self.codec = codec
    }

    /// Packets in an average frame at the configured bitrate.
    public var packetsPerFrame: Int { max(1, bitrate / 8 / fps / packetSize) }

    public func requestKeyFrame() { keyFrameWanted = true }

    public func poll(now: UInt64, buffer: UnsafeMutableRawBufferPointer, emit: (Int) -> Void) {
        guard let base = buffer.baseAddress, buffer.count >= packetSize else { return }
        let frameInterval = 1_000_000_000 / UInt64(fps)
        if nextFrameAt == 0 { nextFrameAt = now }
        var frames = 0
        while now >= nextFrameAt && frames < 3 {   // catch up at most 3 frames after a stall
            frames += 1
            nextFrameAt &+= frameInterval
            let key = keyFrameWanted || (keyFrameIntervalSec > 0 && now &- lastKeyFrameAt >= UInt64(keyFrameIntervalSec) * 1_000_000_000)
            if key { keyFrameWanted = false; lastKeyFrameAt = now }
            // Key frames are larger; deltas a little smaller so the average stays near the bitrate.
            let perFrame = packetsPerFrame
            let count = key ? perFrame * keyFrameScale : max(1, perFrame - (perFrame * (keyFrameScale - 1)) / (fps * max(1, keyFrameIntervalSec)))
            for i in 0..<count {
                // SSRC 0: the publication writes its own.
                _ = RtpPacketView.writeHeader(into: buffer, payloadType: codec.payloadType, sequenceNumber: sequence,
                                              timestamp: timestamp, ssrc: 0, marker: i == count - 1)
                sequence &+= 1
                var p = 12
                // VP8 descriptor: X=0, N=0, S=1 on a frame's first packet, PID=0.
                base.storeBytes(of: i == 0 ? 0x10 : 0x00, toByteOffset: p, as: UInt8.self)
                p += 1
                if i == 0 {
                    // VP8 payload header: P bit (0 = key frame), version 0, show_frame 1.
                    base.storeBytes(of: key ? 0x10 : 0x11, toByteOffset: p, as: UInt8.self)
                    base.storeBytes(of: 0, toByteOffset: p + 1, as: UInt8.self)
                    base.storeBytes(of: 0, toByteOffset: p + 2, as: UInt8.self)
                    p += 3
                }
                PayloadStamp.write(into: base + p, counter: counter, sentAt: now)
                counter &+= 1
                packetsSent &+= 1
                emit(packetSize)
            }
            timestamp &+= UInt32(90_000 / fps)
        }
        if now > nextFrameAt &+ 10 * frameInterval { nextFrameAt = now }  // fell far behind: drop, don't burst
    }
}

/// A source whose packets carry the RFC 6464 audio level (`ssrc-audio-level`) in a one-byte
/// header extension with this id: its publication offers the extension (the server reads the
/// levels for active speakers and forward-loudest-N).
public protocol AudioLevelSource {
    var audioLevelExtensionId: UInt8? { get }
}

/// Synthetic Opus audio: one packet of `packetSize` bytes every 20 ms; with `audioLevel`
/// (0 loudest ... 127 silence, -dBov) each packet carries that level in the RFC 6464 header
/// extension (id `SyntheticAudioSource.levelExtensionId`), voice bit set below 127.
public final class SyntheticAudioSource: RtpSource, AudioLevelSource, @unchecked Sendable {
    public let codec: RtpCodec
    public let pollIntervalMilliseconds: UInt32 = 5
    public let packetSize: Int
    public let audioLevel: UInt8?
    public static let levelExtensionId: UInt8 = 1
    public var audioLevelExtensionId: UInt8? { audioLevel == nil ? nil : Self.levelExtensionId }
    public private(set) var packetsSent: UInt64 = 0
    private var sequence = UInt16.random(in: 0...UInt16.max)
    private var timestamp = UInt32.random(in: 0...UInt32.max)
    private var counter: UInt32 = 0
    private var nextAt: UInt64 = 0

    public init(packetSize: Int = 100, codec: RtpCodec = .opus, audioLevel: UInt8? = nil) {
        self.audioLevel = audioLevel.map { min($0, 127) }
        self.packetSize = max(12 + (audioLevel == nil ? 0 : 8) + 1 + PayloadStamp.length, packetSize)
        self.codec = codec
    }

    public func requestKeyFrame() {}

    public func poll(now: UInt64, buffer: UnsafeMutableRawBufferPointer, emit: (Int) -> Void) {
        guard let base = buffer.baseAddress, buffer.count >= packetSize else { return }
        if nextAt == 0 { nextAt = now }
        var n = 0
        while now >= nextAt && n < 5 {
            n += 1
            nextAt &+= 20_000_000
            _ = RtpPacketView.writeHeader(into: buffer, payloadType: codec.payloadType, sequenceNumber: sequence,
                                          timestamp: timestamp, ssrc: 0)
            sequence &+= 1
            timestamp &+= 960
            var p = 12
            if let level = audioLevel {
                // RFC 8285 one-byte header: 0xBEDE, one word; the element (id, length 1 - 1),
                // then V and the level (RFC 6464), then two padding bytes.
                base.storeBytes(of: base.load(as: UInt8.self) | 0x10, as: UInt8.self)
                base.storeBytes(of: UInt32(0xBEDE_0001).bigEndian, toByteOffset: 12, as: UInt32.self)
                base.storeBytes(of: Self.levelExtensionId << 4, toByteOffset: 16, as: UInt8.self)
                base.storeBytes(of: level < 127 ? 0x80 | level : level, toByteOffset: 17, as: UInt8.self)
                base.storeBytes(of: UInt16(0), toByteOffset: 18, as: UInt16.self)
                p = 20
            }
            base.storeBytes(of: 0xFC, toByteOffset: p, as: UInt8.self)   // Opus TOC: CELT FB 20 ms, 1 frame
            PayloadStamp.write(into: base + p + 1, counter: counter, sentAt: now)
            counter &+= 1
            packetsSent &+= 1
            emit(packetSize)
        }
        if now > nextAt &+ 200_000_000 { nextAt = now }
    }
}
