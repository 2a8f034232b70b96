/*
 * The cost of one srtp_protect in the linked libsrtp2 (scripts/build-libsrtp.sh), as a media
 * worker calls it: SESSIONS sessions (one per subscriber transport) of STREAMS SSRCs each,
 * protected round-robin (session after session, so each call finds its session cold in the
 * cache, as in a fan-out), ROUNDS rounds of SIZE-byte RTP packets. bench/srtp-protect.sh runs it
 * under cachegrind twice (ROUNDS and 2 x ROUNDS) so that set-up cancels out, and prints
 * instructions and first-level data-cache misses per call: counts, not timings, so they do not
 * move with the machine's load.
 *   srtp-protect SESSIONS STREAMS SIZE ROUNDS [gcm|gcrypt|cm|cm-gcrypt] [time]
 * With `time` it also prints the wall-clock nanoseconds per call of the protect loop, run
 * natively (under valgrind the libraries see neither VAES nor the SHA extensions).
 * gcm (the default): AES-GCM-128 with libsrtp's OpenSSL cipher; cm: AES-CM + HMAC-SHA1 with
 * libsrtp's OpenSSL ones; gcrypt and cm-gcrypt: the same profiles with Minato's libgcrypt/nettle ciphers
 * (scripts/libsrtp/minato_gcrypt.c), as the server runs them.
 */
#include <srtp2/srtp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

srtp_err_status_t minato_srtp_use_gcrypt(void);

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: srtp-protect SESSIONS STREAMS SIZE ROUNDS [gcm|gcrypt|cm|cm-gcrypt]\n");
        return 2;
    }
    int sessions = atoi(argv[1]), streams = atoi(argv[2]), size = atoi(argv[3]), rounds = atoi(argv[4]);
    int cm = argc > 5 && (strcmp(argv[5], "cm") == 0 || strcmp(argv[5], "cm-gcrypt") == 0);
    int gcrypt = argc > 5 && (strcmp(argv[5], "gcrypt") == 0 || strcmp(argv[5], "cm-gcrypt") == 0);
    if (sessions < 1 || streams < 1 || size < 12 || size > 1400 || rounds < 0) {
        fprintf(stderr, "srtp-protect: bad arguments\n");
        return 2;
    }
    if (srtp_init() != srtp_err_status_ok) {
        return 1;
    }
    if (gcrypt && minato_srtp_use_gcrypt() != srtp_err_status_ok) {
        return 1;
    }
    srtp_t *session = calloc((size_t)sessions, sizeof(srtp_t));
    unsigned char key[46];
    for (int i = 0; i < 46; i++) {
        key[i] = (unsigned char)(i * 37);
    }
    for (int i = 0; i < sessions; i++) {
        srtp_policy_t policy;
        memset(&policy, 0, sizeof policy);
        if (cm) {
            srtp_crypto_policy_set_rtp_default(&policy.rtp);
            srtp_crypto_policy_set_rtcp_default(&policy.rtcp);
        } else {
            srtp_crypto_policy_set_aes_gcm_128_16_auth(&policy.rtp);
            srtp_crypto_policy_set_aes_gcm_128_16_auth(&policy.rtcp);
        }
        /* As SrtpSession makes its outbound sessions. */
        policy.ssrc.type = ssrc_any_outbound;
        policy.key = key;
        policy.window_size = 1024;
        policy.allow_repeat_tx = 1;
        if (srtp_create(&session[i], &policy) != srtp_err_status_ok) {
            return 1;
        }
    }
    unsigned char packet[1500];
    memset(packet, 0, sizeof packet);
    int timed = argc > 6 && strcmp(argv[6], "time") == 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int round = 0; round < rounds; round++) {
        unsigned seq = (unsigned)round + 1;
        for (int s = 0; s < streams; s++) {
            unsigned ssrc = 0x10000000u + (unsigned)s * 977u;
            for (int i = 0; i < sessions; i++) {
                packet[0] = 0x80;
                packet[1] = 111;
                packet[2] = (unsigned char)(seq >> 8);
                packet[3] = (unsigned char)seq;
                packet[8] = (unsigned char)(ssrc >> 24);
                packet[9] = (unsigned char)(ssrc >> 16);
                packet[10] = (unsigned char)(ssrc >> 8);
                packet[11] = (unsigned char)ssrc;
                int len = size;
                if (srtp_protect(session[i], packet, &len) != srtp_err_status_ok) {
                    return 1;
                }
            }
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (timed && rounds > 0) {
        double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
        printf("%.0f\n", ns / ((double)rounds * sessions * streams));
    }
    return 0;
}
