/// The WebRTC data channel establishment protocol (DCEP, RFC 8832): the two messages that open
/// a data channel on an SCTP stream, and the SCTP payload protocol identifiers (PPIDs) of RFC
/// 8831 section 8. Pure values: parsing never traps, whatever the bytes.
public enum Dcep {
    /// SCTP payload protocol identifiers of WebRTC (RFC 8831 8).
    public enum Ppid {
        public static let dcep: UInt32 = 50
        public static let string: UInt32 = 51
        public static let binary: UInt32 = 53
        public static let emptyString: UInt32 = 56
        public static let emptyBinary: UInt32 = 57
        /// Deprecated partial (fragmented) string and binary messages (Chromium never sends them).
        public static let stringPartial: UInt32 = 54
        public static let binaryPartial: UInt32 = 52

        /// Whether `ppid` carries a user message (string or binary, empty or not).
        public static func isUserMessage(_ ppid: UInt32) -> Bool {
            ppid == string || ppid == binary || ppid == emptyString || ppid == emptyBinary
        }
    }

    /// DATA_CHANNEL_OPEN's channel type (RFC 8832 5.1) as what it means.
    public struct Reliability: Sendable, Equatable {
        /// false: messages may be delivered out of order (channel type bit 0x80).
        public var ordered: Bool
        /// Partial reliability by retransmissions (types 0x01 / 0x81): at most this many.
        public var maxRetransmits: UInt32?
        /// Partial reliability by lifetime (types 0x02 / 0x82), in milliseconds.
        public var maxPacketLifeTime: UInt32?

        public init(ordered: Bool = true, maxRetransmits: UInt32? = nil, maxPacketLifeTime: UInt32? = nil) {
            self.ordered = ordered
            self.maxRetransmits = maxRetransmits
            self.maxPacketLifeTime = maxPacketLifeTime
        }

        public static let reliableOrdered = Reliability()

        /// The DCEP channel type and reliability parameter for these semantics.
        public var channelType: (type: UInt8, parameter: UInt32) {
            let unordered: UInt8 = ordered ? 0 : 0x80
            if let n = maxRetransmits { return (0x01 | unordered, n) }
            if let ms = maxPacketLifeTime { return (0x02 | unordered, ms) }
            return (unordered, 0)
        }
    }

    /// A parsed DATA_CHANNEL_OPEN.
    public struct Open: Sendable, Equatable {
        public var reliability: Reliability
        public var priority: UInt16
        public var label: String
        public var `protocol`: String

        public init(reliability: Reliability, priority: UInt16 = 256, label: String, protocol: String = "") {
            self.reliability = reliability
            self.priority = priority
            self.label = label
            self.protocol = `protocol`
        }

        /// The message's bytes (RFC 8832 5.1).
        public var bytes: [UInt8] {
            let l = Array(label.utf8), p = Array(self.protocol.utf8)
            let (type, parameter) = reliability.channelType
            var out: [UInt8] = [0x03, type]
            out.appendBigEndian(priority)
            out.appendBigEndian(parameter)
            out.appendBigEndian(UInt16(clamping: l.count))
            out.appendBigEndian(UInt16(clamping: p.count))
            out += l.prefix(Int(UInt16.max))
            out += p.prefix(Int(UInt16.max))
            return out
        }
    }

    /// What one DCEP message is.
    public enum Message: Sendable, Equatable {
        case open(Open)
        case ack
    }

    /// Why a DCEP message was refused.
    public enum ParseError: Error, Sendable, Equatable, CustomStringConvertible {
        case empty
        /// A message type RFC 8832 does not define.
        case unknownType(UInt8)
        /// A DATA_CHANNEL_OPEN with an unknown channel type.
        case unknownChannelType(UInt8)
        /// Shorter than its fixed fields, or than the label and protocol lengths it announces.
        case truncated
        /// The label or protocol is not UTF-8.
        case notUtf8

        public var description: String {
            switch self {
            case .empty: return "an empty DCEP message"
            case .unknownType(let t): return "an unknown DCEP message type 0x\(String(t, radix: 16))"
            case .unknownChannelType(let t): return "a DATA_CHANNEL_OPEN with an unknown channel type 0x\(String(t, radix: 16))"
            case .truncated: return "a truncated DCEP message"
            case .notUtf8: return "a DATA_CHANNEL_OPEN whose label or protocol is not UTF-8"
            }
        }
    }

    public static let ackBytes: [UInt8] = [0x02]

    /// Parses one DCEP message (the whole SCTP user message, PPID 50).
    public static func parse(_ bytes: UnsafeRawBufferPointer) -> Result<Message, ParseError> {
        guard let type = bytes.first else { return .failure(.empty) }
        switch type {
        case 0x02:
            return .success(.ack)
        case 0x03:
            guard bytes.count >= 12 else { return .failure(.truncated) }
            let channelType = bytes[1]
            let priority = UInt16(bytes[2]) << 8 | UInt16(bytes[3])
            let parameter = UInt32(bytes[4]) << 24 | UInt32(bytes[5]) << 16 | UInt32(bytes[6]) << 8 | UInt32(bytes[7])
            let labelLength = Int(bytes[8]) << 8 | Int(bytes[9])
            let protocolLength = Int(bytes[10]) << 8 | Int(bytes[11])
            guard bytes.count - 12 >= labelLength + protocolLength else { return .failure(.truncated) }
            let ordered = channelType & 0x80 == 0
            let reliability: Reliability
            switch channelType & 0x7F {
            case 0x00: reliability = Reliability(ordered: ordered)
            case 0x01: reliability = Reliability(ordered: ordered, maxRetransmits: parameter)
            case 0x02: reliability = Reliability(ordered: ordered, maxPacketLifeTime: parameter)
            default: return .failure(.unknownChannelType(channelType))
            }
            let labelBytes = UnsafeRawBufferPointer(rebasing: bytes[12 ..< 12 + labelLength])
            let protocolBytes = UnsafeRawBufferPointer(rebasing: bytes[12 + labelLength ..< 12 + labelLength + protocolLength])
            guard let label = utf8String(labelBytes), let proto = utf8String(protocolBytes) else { return .failure(.notUtf8) }
            return .success(.open(Open(reliability: reliability, priority: priority, label: label, protocol: proto)))
        default:
            return .failure(.unknownType(type))
        }
    }
}

/// The bytes as a String when they are valid UTF-8 (decoding replaces nothing), else nil.
func utf8String(_ bytes: UnsafeRawBufferPointer) -> String? {
    let s = String(decoding: bytes, as: UTF8.self)
    return s.utf8.elementsEqual(bytes) ? s : nil
}

private extension Array where Element == UInt8 {
    mutating func appendBigEndian(_ v: UInt16) { append(UInt8(v >> 8)); append(UInt8(v & 0xFF)) }
    mutating func appendBigEndian(_ v: UInt32) {
        append(UInt8(v >> 24)); append(UInt8((v >> 16) & 0xFF)); append(UInt8((v >> 8) & 0xFF)); append(UInt8(v & 0xFF))
    }
}
