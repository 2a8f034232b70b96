// Thin wrappers for C macros and variadic functions that Swift cannot import.
// Nothing here holds state; every function forwards to the library.
#ifndef CMINATO_SHIMS_H
#define CMINATO_SHIMS_H

#include <agent.h>
#include <sys/socket.h>
#include <stdint.h>
#include <openssl/ssl.h>
#include <openssl/evp.h>

typedef void (*minato_component_state_cb)(NiceAgent *agent, guint stream_id, guint component_id,
                                          guint state, gpointer user_data);
typedef void (*minato_selected_pair_cb)(NiceAgent *agent, guint stream_id, guint component_id,
                                        NiceCandidate *local, NiceCandidate *remote, gpointer user_data);

/// Creates an agent with UPnP off; `lite` selects ICE-lite (controlled); `tcp` adds ICE-TCP
/// (RFC 6544) host candidates beside the UDP ones.
NiceAgent *minato_nice_agent_new(GMainContext *ctx, gboolean lite, gboolean controlling, gboolean tcp);
gulong minato_nice_on_component_state(NiceAgent *agent, minato_component_state_cb cb, gpointer data);
gulong minato_nice_on_selected_pair(NiceAgent *agent, minato_selected_pair_cb cb, gpointer data);
typedef void (*minato_gathering_done_cb)(NiceAgent *agent, guint stream_id, gpointer user_data);
/// "candidate-gathering-done": every candidate of the stream (host, relayed) is known.
gulong minato_nice_on_gathering_done(NiceAgent *agent, minato_gathering_done_cb cb, gpointer data);
void minato_signal_disconnect(gpointer instance, gulong handler);
/// Fills `addr` from a numeric IPv4/IPv6 string; returns FALSE when it is not one.
gboolean minato_nice_address_from_string(NiceAddress *addr, const char *ip);

/// The selected pair's local UDP socket (its fd) and remote address, for sending around
/// libnice's per-packet path; -1 when there is no selected pair or it is not a plain UDP
/// socket (TCP, TURN relay: use nice_agent_send then).
int minato_nice_selected_udp(NiceAgent *agent, guint stream_id, guint component_id,
                             struct sockaddr_storage *remote, unsigned int *remote_len);
/// Sends `n` datagrams (bufs[i], lens[i]; at most 64) to one destination with sendmmsg
/// (non-blocking, EINTR retried; `to_len` 0: the socket's connected peer). With `gso`, runs of
/// equal-size datagrams go as one UDP GSO message each (UDP_SEGMENT; the kernel splits them).
/// A message the kernel refuses alone (EPERM, ECONNREFUSED, EMSGSIZE…) is skipped and the rest
/// sent; a full socket (EAGAIN, ENOBUFS) ends the batch. `sent[i]` is set to 1 for each datagram
/// the kernel took and 0 for each it did not. Returns how many it took, or -2 when GSO is
/// unsupported (nothing was sent; retry without).
int minato_send_batch(int fd, const struct sockaddr_storage *to, unsigned int to_len,
                      void *const *bufs, const size_t *lens, unsigned int n, int gso,
                      unsigned char *sent);

/// Load generators only: attaches a classic BPF socket filter to UDP socket `fd` that drops
/// RTP (first byte 128-191 and second byte outside RTCP's 192-223) in the kernel and keeps
/// everything else (STUN, DTLS, RTCP). The peer still pays for every packet; the reader pays
/// nothing. Returns 0, or -1 with errno.
int minato_drop_incoming_rtp(int fd);

/// When the last datagram read from UDP socket `fd` reached the host (SIOCGSTAMPNS, the kernel's
/// receive timestamp), on CLOCK_MONOTONIC in nanoseconds; 0 when the kernel has none (the first
/// call only turns timestamping on). One ioctl.
uint64_t minato_last_arrival_ns(int fd);

/// Names the calling thread for the kernel (pthread_setname_np is a GNU extension Swift does not
/// import); at most 15 bytes are kept.
void minato_set_thread_name(const char *name);

/// ECDSA P-256 key (EVP_EC_gen is a macro over a variadic call).
EVP_PKEY *minato_ec_p256_key(void);
/// DTLSv1_get_timeout: milliseconds (rounded up) until the next retransmission, or -1 if no timer runs.
long minato_dtls_timeout_ms(SSL *ssl);
/// DTLSv1_handle_timeout.
int minato_dtls_handle_timeout(SSL *ssl);
/// BIO_set_mem_eof_return(bio, -1): an empty memory BIO means "retry", not EOF.
void minato_bio_mem_retry_when_empty(BIO *bio);
/// A constant DTLS retransmission timeout instead of OpenSSL's 1 s doubling to 60 s (tests:
/// OpenSSL times its retransmissions on the real clock, so tests shorten them to wait less).
/// OpenSSL treats a timer with less than 15 ms left as expired, so use 15 ms or more.
void minato_dtls_fixed_timeout(SSL *ssl, unsigned int microseconds);
/// Whether the oldest queued OpenSSL error is DTLS giving up its retransmissions
/// (SSL_R_READ_TIMEOUT_EXPIRED: OpenSSL may hit it inside SSL_do_handshake as well as in
/// DTLSv1_handle_timeout).
int minato_ssl_error_is_read_timeout(void);
/// SSL_CTX_set_min_proto_version(ctx, DTLS1_2_VERSION) and friends.
int minato_ssl_ctx_dtls12(SSL_CTX *ctx);
/// SSL_OP_CIPHER_SERVER_PREFERENCE and SSL_CTX_set_read_ahead(ctx, 1) (both macros).
void minato_ssl_ctx_server_preference_read_ahead(SSL_CTX *ctx);
/// SSL_set_mtu + SSL_OP_NO_QUERY_MTU.
void minato_ssl_set_mtu(SSL *ssl, long mtu);

/// libsrtp's debug module names ("aes icm ossl", "hmac sha-1 openssl", … or "… nss"), one per
/// line, into `out` (NUL-terminated, cut at `capacity`): which crypto backend the linked
/// libsrtp2 was built with. Call after srtp_init, not concurrently with other libsrtp logging.
size_t minato_srtp_debug_modules(char *out, size_t capacity);

/// A GLib source dispatched when its deadline has passed (and, with unix fds added, when one is
/// ready), like a source with a ready time, except that moving the deadline is a plain store:
/// `g_source_set_ready_time` signals the context's wakeup eventfd on every change, which costs
/// a write, and an extra poll and read in the next iteration, even from the thread iterating
/// the context. Set the deadline only from that thread, outside `g_main_context_iteration` or
/// inside one of its callbacks (the next prepare reads it). Starts with no deadline.
GSource *minato_deadline_source_new(void);
/// The deadline in g_get_monotonic_time microseconds; -1: none.
void minato_deadline_source_set(GSource *source, gint64 deadline_us);

/// Milliseconds until the soonest source of `context` is due (0: one is due now; -1: it has
/// none with a timeout), without dispatching anything: g_main_context_prepare and _query, as an
/// iteration starts. A source found ready stays ready for the context's next iteration. Call
/// on the thread that iterates `context`, not from inside one of its callbacks.
int minato_main_context_timeout_ms(GMainContext *context);

/// Direct receive (docs/architecture.md "Reading established transports"): an established
/// transport's UDP socket is read by its worker through one epoll set, with recvmmsg, instead of
/// one GLib source per socket.
/// epoll_create1(EPOLL_CLOEXEC).
int minato_epoll_create(void);
/// Adds `fd` for input (level-triggered) with `key` as its event data; 0 or -1 with errno.
int minato_epoll_add(int epfd, int fd, uint64_t key);
/// Removes `fd`; 0 or -1 with errno.
int minato_epoll_remove(int epfd, int fd);
/// Without waiting: the keys of up to `max` (at most 256) ready sockets; 0 on none or error.
int minato_epoll_ready(int epfd, uint64_t *keys, int max);
/// Turns SO_TIMESTAMPNS on (`on` 1) or off: each datagram read by `minato_recv_batch` carries
/// the kernel's receive time. While on, SIOCGSTAMPNS (`minato_last_arrival_ns`) is not updated.
int minato_rx_timestamps(int fd, int on);
/// Reads up to `n` (at most 64) datagrams without waiting (recvmmsg, MSG_DONTWAIT): datagram i
/// into bufs[i] (`capacity` bytes each), its length in lens[i] (0: it was larger than
/// `capacity` and is lost), its source in from[i], and when it reached the host in arrival[i]
/// (CLOCK_MONOTONIC ns; 0 without a timestamp). Returns how many were read: 0 when none was
/// waiting, -1 on another error (errno).
int minato_recv_batch(int fd, void *const *bufs, size_t capacity, size_t *lens,
                      struct sockaddr_storage *from, uint64_t *arrival, unsigned int n);
/// Whether two socket addresses are the same IPv4 or IPv6 address and port.
int minato_same_address(const struct sockaddr_storage *a, const struct sockaddr_storage *b);
/// Sends one datagram to `to` (sendto, MSG_DONTWAIT); 1 when the kernel took it, else 0.
int minato_send_to(int fd, const void *buf, size_t len, const struct sockaddr_storage *to);
/// ICE consent and connectivity checks without libnice's socket (libnice's STUN library, RFC
/// 5389 with short-term credentials and FINGERPRINT): if `request` (`length` bytes) is a
/// binding request for local username fragment `ufrag` whose MESSAGE-INTEGRITY matches `pwd`,
/// writes the success response (XOR-MAPPED-ADDRESS of `from`) into `out` and returns its
/// length, and sets `*use_candidate` to whether it nominates the pair. Returns 0 for a valid
/// STUN message that needs no answer (an indication, a response), -1 for anything that does not
/// validate (not STUN, wrong credentials, a bad fingerprint): nothing to send.
int minato_stun_answer(const uint8_t *request, size_t length, const struct sockaddr_storage *from,
                       const char *ufrag, const char *pwd, uint8_t *out, size_t capacity,
                       int *use_candidate);

#endif
