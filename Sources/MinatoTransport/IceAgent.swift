internal import CNice
internal import CMinatoShims
#if canImport(Glibc)
internal import Glibc
#endif

/// ICE settings for every agent a worker makes (from configuration).
public struct IceConfiguration: Sendable {
    /// Numeric local addresses to gather on (default 127.0.0.1 only). Empty: every address the
    /// host has when an agent gathers (libnice's own list, loopback only when there is no other),
    /// so that an agent made after a network change gathers on the new address.
    public var localAddresses: [String]
    public var portMin: UInt32
    public var portMax: UInt32
    /// ICE-lite (the server answers checks, never sends them) or full ICE.
    public var lite: Bool
    /// ICE-TCP (RFC 6544, framed per RFC 4571): passive TCP host candidates on the same
    /// addresses and port range, beside the UDP ones. Browsers pair them only when UDP fails.
    public var tcp: Bool
    /// A server worker reads the sockets of established transports itself (`DirectReceiver`:
    /// one epoll set, `recvmmsg`, consent checks answered without libnice) instead of through
    /// GLib's per-socket sources.
    public var directReceive: Bool
    public init(localAddresses: [String] = ["127.0.0.1"], portMin: UInt32 = 40000, portMax: UInt32 = 40999, lite: Bool = true,
                tcp: Bool = true, directReceive: Bool = true) {
        self.localAddresses = localAddresses; self.portMin = portMin; self.portMax = portMax; self.lite = lite; self.tcp = tcp
        self.directReceive = directReceive
    }
}

extension IceConfiguration {
    /// The same addresses and ports for the connecting side of a relay between two nodes: full
    /// ICE over UDP (it sends the checks and nominates; its peer is an ICE-lite server).
    public var forRelayClient: IceConfiguration {
        var c = self
        c.lite = false
        c.tcp = false
        return c
    }
}

/// A TURN server a client agent allocates a relayed candidate on (RFC 8656): a numeric address,
/// the port, the credential, and how the client reaches it.
public struct IceRelay: Sendable, Equatable {
    public enum Transport: Sendable, Equatable { case udp, tcp, tls }
    public let address: String
    public let port: UInt16
    public let username: String
    public let password: String
    public let transport: Transport
    public init(address: String, port: UInt16, username: String, password: String, transport: Transport) {
        self.address = address; self.port = port; self.username = username; self.password = password
        self.transport = transport
    }
}

/// One libnice agent with one stream and one component (BUNDLE + rtcp-mux). Owns the
/// `NiceAgent`; lives on the media worker whose `GMainContext` it was made with.
final class IceAgent {
    enum State { case new, checking, connected, failed }
    enum Failure: Error, CustomStringConvertible {
        case create, badAddress(String), stream, gather
        var description: String {
            switch self {
            case .create: return "libnice could not create an agent"
            case .badAddress(let a): return "'\(a)' is not a numeric IP address"
            case .stream: return "libnice could not add a stream"
            case .gather: return "libnice gathered no candidates (is the port range exhausted?)"
            }
        }
    }

    let agent: OpaquePointer
    let streamId: UInt32
    private(set) var localUfrag = ""
    private(set) var localPwd = ""
    private var signalHandlers: [UInt] = []

    /// `owner` receives datagrams and state changes (an unretained pointer: the owner outlives us)
    /// through `receive` and `stateChanged`, C callbacks that know the owner's type (the server's
    /// `WebRtcTransport` by default, a client's `ClientConnection` otherwise).
    /// `controlling` defaults to full-ICE agents controlling, lite agents controlled.
    /// `relays`: TURN servers to allocate relayed candidates on (a client's; gathering them takes
    /// round trips: `gatheringDone` is called when every candidate is known).
    /// `timers`: the GLib context libnice runs the agent's own timers on (its keepalives and
    /// check pacing; default `context`, where its sockets are read).
    init(context: OpaquePointer, timers: OpaquePointer? = nil, configuration: IceConfiguration, owner: UnsafeMutableRawPointer,
         controlling: Bool? = nil,
         receive: NiceAgentRecvFunc = iceReceive,
         stateChanged: minato_component_state_cb = iceStateChanged,
         relays: [IceRelay] = [], gatheringDone: minato_gathering_done_cb? = nil) throws {
        let controls = controlling ?? !configuration.lite
        guard let agent = minato_nice_agent_new(timers ?? context, configuration.lite ? 1 : 0, controls ? 1 : 0,
                                                configuration.tcp ? 1 : 0)
        else { throw Failure.create }
        self.agent = agent
        for ip in configuration.localAddresses {
            var address = NiceAddress()
            guard minato_nice_address_from_string(&address, ip) != 0 else {
                g_object_unref(UnsafeMutableRawPointer(agent))
                throw Failure.badAddress(ip)
            }
            nice_agent_add_local_address(agent, &address)
        }
        let stream = nice_agent_add_stream(agent, 1)
        guard stream != 0 else { g_object_unref(UnsafeMutableRawPointer(agent)); throw Failure.stream }
        streamId = stream
        nice_agent_set_port_range(agent, stream, 1, configuration.portMin, configuration.portMax)
        nice_agent_attach_recv(agent, stream, 1, context, receive, owner)
        signalHandlers.append(UInt(minato_nice_on_component_state(agent, stateChanged, owner)))
        if let gatheringDone { signalHandlers.append(UInt(minato_nice_on_gathering_done(agent, gatheringDone, owner))) }
        for r in relays {
            let type: NiceRelayType
            switch r.transport {
            case .udp: type = NICE_RELAY_TYPE_TURN_UDP
            case .tcp: type = NICE_RELAY_TYPE_TURN_TCP
            case .tls: type = NICE_RELAY_TYPE_TURN_TLS
            }
            // A refused entry (not a numeric address) is skipped: host candidates still work.
            _ = nice_agent_set_relay_info(agent, stream, 1, r.address, UInt32(r.port), r.username, r.password, type)
        }
        guard nice_agent_gather_candidates(agent, stream) != 0 else {
            nice_agent_attach_recv(agent, stream, 1, context, nil, nil)
            g_object_unref(UnsafeMutableRawPointer(agent))
            throw Failure.gather
        }
        readLocalCredentials()
    }

    private func readLocalCredentials() {
        var ufrag: UnsafeMutablePointer<gchar>?
        var pwd: UnsafeMutablePointer<gchar>?
        if nice_agent_get_local_credentials(agent, streamId, &ufrag, &pwd) != 0, let ufrag, let pwd {
            localUfrag = String(cString: ufrag)
            localPwd = String(cString: pwd)
            g_free(ufrag)
            g_free(pwd)
        }
    }

    /// Stops callbacks and frees the agent. Call on the worker before dropping the owner.
    func close(context: OpaquePointer) {
        for h in signalHandlers { minato_signal_disconnect(UnsafeMutableRawPointer(agent), gulong(h)) }
        signalHandlers = []
        nice_agent_attach_recv(agent, streamId, 1, context, nil, nil)
        nice_agent_remove_stream(agent, streamId)
        g_object_unref(UnsafeMutableRawPointer(agent))
    }

    /// Moves the agent's sockets (their GLib sources) to `context`, still delivering to
    /// `receive` with `owner`: a context that is never iterated parks them (no polling, no
    /// reads; `DirectReceiver`), the worker's own context takes them back.
    func attachReceive(context: OpaquePointer, owner: UnsafeMutableRawPointer, receive: NiceAgentRecvFunc = iceReceive) {
        nice_agent_attach_recv(agent, streamId, 1, context, receive, owner)
    }

    /// Our candidates as SDP attribute values ("candidate:…" without "a="). Of the TCP ones only
    /// the passive candidates: an ICE-lite server is never the side that connects, and a full
    /// agent (the Swift client) offers active ones only to peers that listen (not Minato).
    func localCandidates() -> [String] {
        var out: [String] = []
        var list = nice_agent_get_local_candidates(agent, streamId, 1)
        let head = list
        while let node = list {
            if let cand = node.pointee.data?.assumingMemoryBound(to: NiceCandidate.self),
               let sdp = nice_agent_generate_local_candidate_sdp(agent, cand) {
                var line = String(cString: sdp)
                if line.hasPrefix("a=") { line.removeFirst(2) }
                if cand.pointee.transport == NICE_CANDIDATE_TRANSPORT_UDP || cand.pointee.transport == NICE_CANDIDATE_TRANSPORT_TCP_PASSIVE {
                    out.append(line)
                }
                g_free(sdp)
            }
            list = node.pointee.next
        }
        if let head { g_slist_free_full(head) { nice_candidate_free($0?.assumingMemoryBound(to: NiceCandidate.self)) } }
        return out
    }

    func setRemoteCredentials(ufrag: String, pwd: String) {
        nice_agent_set_remote_credentials(agent, streamId, ufrag, pwd)
    }

    /// Adds one remote candidate ("candidate:…" with or without "a="); false if libnice rejects it.
    @discardableResult
    func addRemoteCandidate(_ line: String) -> Bool {
        var text = line
        if text.hasPrefix("a=") { text.removeFirst(2) }
        if !text.hasPrefix("candidate:") { text = "candidate:" + text }
        // With ICE-TCP off libnice refuses TCP candidates here (they are skipped).
        guard let cand = nice_agent_parse_remote_candidate_sdp(agent, streamId, "a=" + text) else { return false }
        let list = g_slist_append(nil, cand)
        let added = nice_agent_set_remote_candidates(agent, streamId, 1, list)
        g_slist_free(list)
        nice_candidate_free(cand)
        return added > 0
    }

    func endOfRemoteCandidates() { nice_agent_peer_candidate_gathering_done(agent, streamId) }

    /// Calls `changed` (with the owner) when ICE selects a new pair.
    func onSelectedPairChange(_ changed: minato_selected_pair_cb, owner: UnsafeMutableRawPointer) {
        signalHandlers.append(UInt(minato_nice_on_selected_pair(agent, changed, owner)))
    }

    /// The selected pair's local candidate type ("host", "srflx", "prflx", "relay"), nil before
    /// a pair is selected.
    func selectedLocalType() -> String? {
        var local: UnsafeMutablePointer<NiceCandidate>?
        var remote: UnsafeMutablePointer<NiceCandidate>?
        guard nice_agent_get_selected_pair(agent, streamId, 1, &local, &remote) != 0, let local else { return nil }
        switch local.pointee.type {
        case NICE_CANDIDATE_TYPE_HOST: return "host"
        case NICE_CANDIDATE_TYPE_SERVER_REFLEXIVE: return "srflx"
        case NICE_CANDIDATE_TYPE_PEER_REFLEXIVE: return "prflx"
        case NICE_CANDIDATE_TYPE_RELAYED: return "relay"
        default: return nil
        }
    }

    /// The selected pair's UDP socket fd and peer address, or -1 (no pair yet, TCP or relay).
    func selectedUdpSocket(peer: inout sockaddr_storage, length: inout UInt32) -> Int32 {
        minato_nice_selected_udp(agent, streamId, 1, &peer, &length)
    }

    /// Sends one datagram on the selected pair; returns false if nothing could be sent.
    @inline(__always)
    func send(_ base: UnsafeRawPointer, length: Int) -> Bool {
        nice_agent_send(agent, streamId, 1, UInt32(length), base.assumingMemoryBound(to: gchar.self)) >= 0
    }
}

/// libnice's receive callback for a server transport: the transport turns the datagram into an
/// outcome, its worker acts on it.
func iceReceive(_ agent: OpaquePointer?, _ stream: guint, _ component: guint, _ len: guint,
                _ buf: UnsafeMutablePointer<gchar>?, _ owner: gpointer?) {
    guard let owner, let buf, len > 0 else { return }
    let transport = Unmanaged<WebRtcTransport>.fromOpaque(owner).takeUnretainedValue()
    transport.worker.received(UnsafeMutableRawBufferPointer(start: buf, count: Int(len)), on: transport)
}

func iceStateChanged(_ agent: OpaquePointer?, _ stream: guint, _ component: guint, _ state: guint, _ owner: gpointer?) {
    guard let owner else { return }
    let transport = Unmanaged<WebRtcTransport>.fromOpaque(owner).takeUnretainedValue()
    transport.worker.iceChanged(IceProgress(state), agent: agent, on: transport)
}

/// What a libnice component state means to an agent's owner (server or client transport).
enum IceProgress {
    case connected, failed, none
    init(_ state: guint) {
        switch state {
        case NICE_COMPONENT_STATE_CONNECTED.rawValue, NICE_COMPONENT_STATE_READY.rawValue: self = .connected
        case NICE_COMPONENT_STATE_FAILED.rawValue: self = .failed
        default: self = .none
        }
    }
}
