/* LD_PRELOAD shim for Janus in a loopback-only network namespace.
 * Janus skips interfaces flagged IFF_LOOPBACK when it gathers ICE candidates, so with only `lo`
 * it finds no address at all. This wraps getifaddrs() and clears IFF_LOOPBACK on every entry,
 * so `lo` (127.0.0.1) is used like any other interface. Built by scripts/janus-run.sh:
 *   cc -shared -fPIC -O2 -o janus-getifaddrs.so janus-getifaddrs.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>

typedef int (*getifaddrs_fn)(struct ifaddrs **);

int getifaddrs(struct ifaddrs **ifap) {
    static getifaddrs_fn real;
    if (!real) real = (getifaddrs_fn)dlsym(RTLD_NEXT, "getifaddrs");
    if (!real) { errno = ENOSYS; return -1; }
    int rc = real(ifap);
    if (rc == 0)
        for (struct ifaddrs *ifa = *ifap; ifa; ifa = ifa->ifa_next)
            ifa->ifa_flags &= ~(unsigned int)IFF_LOOPBACK;
    return rc;
}
