/// One load shape: `rooms` rooms, each with `members` members of which the first `publishers`
/// publish (video and/or audio). Subscribers: with `allToAll`, every member subscribes to every
/// other member's publications; otherwise the `members - publishers` non-publishers subscribe
/// to every publication in their room.
struct Scenario: Sendable, Codable {
    var name: String
    var rooms: Int
    var members: Int
    var publishers: Int
    var allToAll: Bool
    var video: Bool
    var audio: Bool
    /// Video bitrate per publisher (bit/s) unless `--video-bitrate` overrides it.
    var videoBitrate: Int = 4_000_000
    /// Audio packets carry an RFC 6464 level (voiced, -30 dBov): every publisher speaks.
    var audioLevels = false
    /// Minato's `rooms.audio.forwardLoudest` for this scenario (0: all; Janus has no such
    /// thing and skips a scenario that sets it).
    var forwardLoudest = 0
    /// `minato-bench capacity`: the first `probes` subscribers of each room are measured, the
    /// others run on a quiet client thread and are muted once they received (nil: all measured).
    var probes: Int? = nil
    /// The SRTP profiles every peer of the scenario offers (nil: `benchSrtpProfiles`).
    var srtpProfiles: String? = nil

    /// Subscribing members per room.
    var subscribers: Int { allToAll ? members : members - publishers }
    /// Subscribers each publication has.
    var fanOut: Int { allToAll ? members - 1 : members - publishers }
    var streamsPerPublisher: Int { (video ? 1 : 0) + (audio ? 1 : 0) }

    static let matrix: [Scenario] = [
        Scenario(name: "fanout-1-1", rooms: 1, members: 2, publishers: 1, allToAll: false, video: true, audio: false),
        Scenario(name: "fanout-1-10", rooms: 1, members: 11, publishers: 1, allToAll: false, video: true, audio: false),
        // The same with every peer offering only AES_CM_128_HMAC_SHA1_80, the one profile
        // GStreamer's and FFmpeg's WHEP players and simple-whip-client have: what CM costs
        // against GCM.
        Scenario(name: "fanout-1-10-cm", rooms: 1, members: 11, publishers: 1, allToAll: false, video: true, audio: false,
                 srtpProfiles: "SRTP_AES128_CM_SHA1_80"),
        Scenario(name: "fanout-1-50", rooms: 1, members: 51, publishers: 1, allToAll: false, video: true, audio: false),
        // Ten people in a grid call: each sends 1 Mbit/s video (a grid tile) and audio.
        Scenario(name: "all-to-all-10", rooms: 1, members: 10, publishers: 10, allToAll: true, video: true, audio: true,
                 videoBitrate: 1_000_000),
        // A 50-member audio room where 5 members speak (publish) and everyone listens...
        Scenario(name: "audio-50", rooms: 1, members: 50, publishers: 5, allToAll: true, video: false, audio: true,
                 audioLevels: true),
        // ...and the same with only the 3 loudest forwarded (Minato only): what it saves.
        Scenario(name: "audio-50-loudest-3", rooms: 1, members: 50, publishers: 5, allToAll: true, video: false,
                 audio: true, audioLevels: true, forwardLoudest: 3),
    ]

    static func named(_ name: String) -> Scenario? { matrix.first { $0.name == name } }
}

/// Packet shapes both servers get (see README "Benchmarks").
struct LoadShape: Sendable, Codable {
    var videoBitrate: Int
    var fps: Int
    var packetSize: Int
    var audioPacketSize: Int
}

/// One (scenario, server) result: the JSON object the issue specifies, plus context fields.
struct BenchResult: Sendable, Codable {
    var scenario: String
    var server: String
    var rooms: Int
    var publishers: Int
    var subscribers: Int
    var durationSec: Double
    var packetsSent: UInt64
    var packetsForwarded: UInt64
    var packetsReceived: UInt64
    var lossPercent: Double
    var forwardedPps: Double
    var cpuMicrosPerForwardedPacket: Double
    var latencyP50Ms: Double
    var latencyP99Ms: Double
    var serverRssMB: Double
    // Context for reading the numbers.
    var serverCpuPercent: Double
    var forwardedSource: String
    var latencySamples: Int
    var srtpProfile: String
    var videoBitrate: Int
    var setupSec: Double
    /// Packets forward-loudest-N did not send (Minato's `not_loudest` drops; 0 without it).
    var leftOut: UInt64? = nil
    var error: String?
}
