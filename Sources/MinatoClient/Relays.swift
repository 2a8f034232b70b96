internal import MinatoTransport
#if canImport(Glibc)
internal import Glibc
#endif

extension IceServer {
    /// The TURN servers in `servers` as relays for libnice: each `turn:` / `turns:` URL of an
    /// entry with a credential (`turn:host[:port][?transport=udp|tcp]`, port 3478 by default;
    /// `turns:host[:port]`, TLS, 5349 by default). A host name is resolved here (IPv4 first);
    /// URLs that do not parse or resolve are skipped. STUN URLs are not relays (and a client
    /// that reaches the server's media addresses needs no server-reflexive candidate).
    static func relays(_ servers: [IceServer]) -> [IceRelay] {
        var out: [IceRelay] = []
        for server in servers {
            guard let username = server.username, let credential = server.credential else { continue }
            for url in server.urls {
                guard let (host, port, transport) = parseTurnURL(url), let address = numericAddress(host) else { continue }
                let relay = IceRelay(address: address, port: port, username: username, password: credential, transport: transport)
                if !out.contains(relay) { out.append(relay) }
            }
        }
        return out
    }

    /// (host, port, transport) of a `turn:` or `turns:` URL (RFC 7065), nil otherwise.
    static func parseTurnURL(_ url: String) -> (String, UInt16, IceRelay.Transport)? {
        let secure: Bool
        var rest: Substring
        if url.hasPrefix("turns:") { secure = true; rest = url.dropFirst(6) }
        else if url.hasPrefix("turn:") { secure = false; rest = url.dropFirst(5) }
        else { return nil }
        var transport: IceRelay.Transport = secure ? .tls : .udp
        if let q = rest.firstIndex(of: "?") {
            let query = rest[rest.index(after: q)...]
            rest = rest[..<q]
            for pair in query.split(separator: "&") where pair.hasPrefix("transport=") {
                switch pair.dropFirst("transport=".count) {
                case "udp": if secure { return nil } else { transport = .udp }
                case "tcp": transport = secure ? .tls : .tcp
                default: return nil
                }
            }
        }
        var host: Substring, portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return nil }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") { portText = after.dropFirst() } else if !after.isEmpty { return nil }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        } else {
            host = rest
        }
        guard !host.isEmpty else { return nil }
        var port: UInt16 = secure ? 5349 : 3478
        if let portText {
            guard let p = UInt16(portText), p > 0 else { return nil }
            port = p
        }
        return (String(host), port, transport)
    }

    /// `host` when it is a numeric address, else its first address (IPv4 preferred), nil when it
    /// does not resolve.
    static func numericAddress(_ host: String) -> String? {
        var v4 = in_addr(), v6 = in6_addr()
        if inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1 { return host }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &result) == 0, let first = result else { return nil }
        defer { freeaddrinfo(first) }
        var best: String?
        var node: UnsafeMutablePointer<addrinfo>? = first
        while let n = node {
            var buffer = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            if let a = n.pointee.ai_addr,
               getnameinfo(a, n.pointee.ai_addrlen, &buffer, socklen_t(buffer.count), nil, 0, NI_NUMERICHOST) == 0 {
                let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                if n.pointee.ai_family == AF_INET { return text }
                if best == nil { best = text }
            }
            node = n.pointee.ai_next
        }
        return best
    }
}

extension LocalSFURoomMember {
    /// The relays this member's connections use: its `iceServers`' TURN entries.
    var relays: [IceRelay] { IceServer.relays(iceServers) }

    /// With relays, waits until `side`'s newest agent knows its candidates (the relayed ones take
    /// round trips to the TURN server), at most `relayGatherTimeout`; returns its parameters then.
    /// The local parameters of the member's send or receive connection, making it first if
    /// there is none (`isNew`): wired to its demux (the send side's RTCP to the outbound streams
    /// and the loss reports); with TURN relays, once its relayed candidates are gathered.
    func connection(_ side: ConnectionSide) async throws -> (local: LocalTransportParameters, isNew: Bool) {
        let media = self.media
        let profiles = room.context.options.srtpProfiles, relays = self.relays
        let (local, isNew) = try await worker.perform { core -> (LocalTransportParameters, Bool) in
            if let c = side == .send ? media.value.send : media.value.recv { return (c.local, false) }
            let c = try core.makeConnection(srtpProfiles: profiles, relays: relays)
            if side == .send {
                media.value.send = c
                media.value.sendDemux.attach(to: c)
                media.value.sendDemux.onRtcp = { rtcp in
                    for o in media.value.outbound.values { o.feedback(rtcp) }
                    media.value.readReports(rtcp)
                }
            } else {
                media.value.recv = c
                media.value.recvDemux.attach(to: c)
            }
            return (c.local, true)
        }
        if isNew, !relays.isEmpty, let gathered = try await gatheredLocal(side) { return (gathered, true) }
        return (local, isNew)
    }

    func gatheredLocal(_ side: ConnectionSide) async throws -> LocalTransportParameters? {
        let media = self.media
        let deadline = ContinuousClock.now + room.context.options.relayGatherTimeout
        while true {
            let (done, local) = try await worker.perform { _ -> (Bool, LocalTransportParameters?) in
                let c = side == .send ? media.value.send : media.value.recv
                return (c?.gathered ?? true, c?.local)
            }
            if done || ContinuousClock.now >= deadline { return local }
            try await Task.sleep(for: .milliseconds(20))
        }
    }
}
