public import MinatoRooms
internal import JWTKit
internal import Foundation

/// The claims of a Minato client token: SkyWay's auth token v3 (HS256 JWT).
/// ```
/// {"jti","iat","exp","version":3,"scope":{"appId","admin"?,"rooms":[{"name","methods":[…],
///   "member":{"name","methods":[…]},"sfu":{"enabled","maxSubscribersLimit"}}]}}
/// ```
struct MinatoTokenClaims: JWTPayload, Equatable {
    struct Scope: Codable, Equatable {
        var appId: String
        var admin: Bool?
        var rooms: [RoomScope]?
    }
    struct RoomScope: Codable, Equatable {
        var name: String
        var methods: [String]?
        var member: MemberScope?
        var sfu: SfuScope?
    }
    struct MemberScope: Codable, Equatable {
        var name: String
        var methods: [String]?
    }
    struct SfuScope: Codable, Equatable {
        var enabled: Bool?
        var maxSubscribersLimit: Int?
    }

    var jti: IDClaim
    var iat: IssuedAtClaim
    var exp: ExpirationClaim
    var version: Int
    var scope: Scope

    static let roomMethods: Set<String> = ["create", "close", "updateMetadata"]
    static let memberMethods: Set<String> = ["publish", "subscribe", "updateMetadata"]

    /// Checks what the signature cannot: expiry, the version and the method names.
    func verify(using algorithm: some JWTAlgorithm) async throws {
        try exp.verifyNotExpired()
        guard version == 3 else { throw JWTError.claimVerificationFailure(failedClaim: nil, reason: "version must be 3") }
        for r in scope.rooms ?? [] {
            if let bad = (r.methods ?? []).first(where: { !Self.roomMethods.contains($0) }) {
                throw JWTError.claimVerificationFailure(failedClaim: nil, reason: "unknown room method '\(bad)'")
            }
            if let bad = (r.member?.methods ?? []).first(where: { !Self.memberMethods.contains($0) }) {
                throw JWTError.claimVerificationFailure(failedClaim: nil, reason: "unknown member method '\(bad)'")
            }
        }
    }

    var grant: AuthGrant {
        AuthGrant(
            appId: scope.appId,
            rooms: (scope.rooms ?? []).map { r in
                AuthGrant.RoomRule(name: r.name, methods: Set(r.methods ?? []),
                                   member: r.member.map { AuthGrant.MemberRule(name: $0.name, methods: Set($0.methods ?? [])) },
                                   sfuEnabled: r.sfu?.enabled ?? true, maxSubscribersLimit: r.sfu?.maxSubscribersLimit)
            },
            admin: scope.admin ?? false,
            expiresAt: exp.value.timeIntervalSince1970,
            tokenId: jti.value)
    }
}

/// Signs and verifies client tokens with the configured HS256 secret.
public final class TokenAuthority: Sendable {
    let keys: JWTKeyCollection

    public init(secret: String) async {
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
        self.keys = keys
    }

    /// Verifies a token: `invalidAuthToken` (malformed, bad signature, bad claims) or
    /// `authTokenExpired`.
    public func verify(_ token: String) async -> Result<AuthGrant, RoomError> {
        do {
            let claims = try await keys.verify(token, as: MinatoTokenClaims.self)
            return .success(claims.grant)
        } catch let error as JWTError {
            if error.errorType == .claimVerificationFailure, error.failedClaim is ExpirationClaim {
                return .failure(.authTokenExpired("The token has expired; mint a new one and call updateAuthToken (or reconnect with it)."))
            }
            switch error.errorType {
            case .signatureVerificationFailed:
                return .failure(.invalidAuthToken("The token's signature does not verify with this server's secret."))
            case .malformedToken:
                return .failure(.invalidAuthToken("The token is not a well-formed JWT (header.payload.signature in base64url)."))
            default:
                return .failure(.invalidAuthToken("The token was rejected: \(error.reason ?? "\(error.errorType)")."))
            }
        } catch {
            return .failure(.invalidAuthToken(
                "The token's claims do not match the SkyWay v3 format (jti, iat, exp, version:3, scope{appId, rooms[{name, methods, member{name, methods}}]})."))
        }
    }

    /// Mints a token (the `minato token` command and tests).
    public func mint(appId: String, rooms: [AuthGrant.RoomRule], admin: Bool, ttl: Duration) async throws -> String {
        let now = Date()
        let claims = MinatoTokenClaims(
            jti: IDClaim(value: UUID().uuidString.lowercased()),
            iat: IssuedAtClaim(value: now),
            exp: ExpirationClaim(value: now.addingTimeInterval(Double(ttl.components.seconds))),
            version: 3,
            scope: .init(appId: appId, admin: admin ? true : nil, rooms: rooms.map { r in
                .init(name: r.name, methods: r.methods.sorted(),
                      member: r.member.map { .init(name: $0.name, methods: $0.methods.sorted()) },
                      sfu: .init(enabled: r.sfuEnabled, maxSubscribersLimit: r.maxSubscribersLimit))
            }))
        return try await keys.sign(claims)
    }
}
