import Foundation
import Logging
import MinatoRooms
import MinatoSignaling
import MinatoTransport

/// JSON-RPC requests of every method against a real RoomService with one real media worker.
/// The input is newline-separated frames (a seed may chain createRoom -> join -> publish …;
/// the ids the server makes are predictable only through "$room"/"$member" placeholders, which
/// are replaced by the last room/member id seen, "$secret" by the last reconnectSecret; a frame
/// that starts with "@2 " is sent from a second connection, so takeover chains are reachable).
/// Invariant: every frame gets exactly one
/// well-formed response (a result, or an error with code, name and a non-empty detail).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJsonRpc(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeRawBufferPointer(start: data, count: size), as: UTF8.self)
    let frames = text.split(separator: "\n", omittingEmptySubsequences: true).prefix(16).map(String.init)
    let done = DispatchSemaphore(value: 0)
    Task {
        await Harness.shared.run(frames)
        done.signal()
    }
    done.wait()
    return 0
}

final class Collector: @unchecked Sendable {
    private let lock = NSLock()
    private var messages: [String] = []
    func add(_ s: String) { lock.lock(); messages.append(s); lock.unlock() }
    func take() -> [String] { lock.lock(); defer { messages = []; lock.unlock() }; return messages }
}

actor Harness {
    static let shared = Harness()
    let worker: MediaWorker
    init() {
        let runtime = try! CryptoRuntime()
        var logger = Logger(label: "fuzz")
        logger.logLevel = .critical
        worker = MediaWorker(index: 0, runtime: runtime, ice: IceConfiguration(), transportTimeout: .seconds(10), logger: logger)
    }

    func run(_ frames: [String]) async {
        var logger = Logger(label: "fuzz")
        logger.logLevel = .critical
        let service = RoomService(configuration: RoomConfiguration(), workers: [worker], logger: logger)
        let signaling = SignalingFrontDoor(rooms: service)
        let collector = Collector()
        let first = ClientChannel(id: 1) { collector.add($0) }
        let second = ClientChannel(id: 2) { collector.add($0) }
        var roomId = "none", memberId = "none", secret = "none"
        for frame in frames {
            let onSecond = frame.hasPrefix("@2 ")
            let request = String(onSecond ? frame.dropFirst(3) : frame[...])
                .replacingOccurrences(of: "$room", with: roomId).replacingOccurrences(of: "$member", with: memberId)
                .replacingOccurrences(of: "$secret", with: secret)
            await signaling.handle(text: request, channel: onSecond ? second : first)
            var responses = 0
            for message in collector.take() {
                guard let obj = (try? JSONSerialization.jsonObject(with: Data(message.utf8))) as? [String: Any] else {
                    preconditionFailure("the server sent something that is not a JSON object: \(message)")
                }
                if obj["method"] != nil && obj["id"] == nil { continue }   // a notification
                responses += 1
                if let error = obj["error"] as? [String: Any] {
                    let data = error["data"] as? [String: Any]
                    precondition(error["code"] is Int && error["message"] is String, "malformed error \(message)")
                    precondition((data?["detail"] as? String)?.isEmpty == false && data?["name"] as? String == error["message"] as? String,
                                 "an error without a name and a detail: \(message)")
                } else {
                    guard let result = obj["result"] as? [String: Any] else { preconditionFailure("no result or error: \(message)") }
                    if let room = result["room"] as? [String: Any], let id = room["id"] as? String { roomId = id }
                    if let member = result["member"] as? [String: Any], let id = member["id"] as? String { memberId = id }
                    if let s = result["reconnectSecret"] as? String { secret = s }
                }
            }
            precondition(responses == 1, "\(responses) responses to one frame: \(request.prefix(300))")
        }
        await service.channelClosed(1)
        await service.channelClosed(2)
        await service.closeAllRooms()
        _ = collector.take()
    }
}

// SwiftPM links an executable's entry point as `FuzzJsonRpc_main`; hand control to libFuzzer's driver.
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<CInt>,
                         _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt) -> CInt

@_cdecl("FuzzJsonRpc_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var args = argv
    return LLVMFuzzerRunDriver(&count, &args, fuzzJsonRpc)
}
