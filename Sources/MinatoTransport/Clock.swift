#if canImport(Glibc)
import Glibc
#endif
public import MinatoMedia

/// Monotonic time in nanoseconds (CLOCK_MONOTONIC).
@inline(__always)
public func monotonicNow() -> Nanoseconds {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(truncatingIfNeeded: ts.tv_sec) &* 1_000_000_000 &+ UInt64(truncatingIfNeeded: ts.tv_nsec)
}
