#define _GNU_SOURCE
#include "CMinatoShims.h"
#include <errno.h>
#include <string.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <linux/sockios.h>
#include <time.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdint.h>
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#include <pthread.h>
#include <linux/filter.h>
#include <openssl/ec.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <srtp2/srtp.h>
#include <sys/epoll.h>
#include <stun/stunagent.h>
#include <stun/usages/ice.h>

NiceAgent *minato_nice_agent_new(GMainContext *ctx, gboolean lite, gboolean controlling, gboolean tcp) {
    NiceAgentOption opts = NICE_AGENT_OPTION_ICE_TRICKLE;
    if (lite) opts |= NICE_AGENT_OPTION_LITE_MODE;
    else opts |= NICE_AGENT_OPTION_CONSENT_FRESHNESS;
    NiceAgent *agent = nice_agent_new_full(ctx, NICE_COMPATIBILITY_RFC5245, opts);
    if (agent == NULL) return NULL;
    g_object_set(G_OBJECT(agent),
                 "upnp", FALSE,
                 "ice-tcp", tcp,
                 "ice-udp", TRUE,
                 "controlling-mode", controlling,
                 NULL);
    return agent;
}

gulong minato_nice_on_component_state(NiceAgent *agent, minato_component_state_cb cb, gpointer data) {
    return g_signal_connect(G_OBJECT(agent), "component-state-changed", G_CALLBACK(cb), data);
}
gulong minato_nice_on_selected_pair(NiceAgent *agent, minato_selected_pair_cb cb, gpointer data) {
    return g_signal_connect(G_OBJECT(agent), "new-selected-pair-full", G_CALLBACK(cb), data);
}
gulong minato_nice_on_gathering_done(NiceAgent *agent, minato_gathering_done_cb cb, gpointer data) {
    return g_signal_connect(G_OBJECT(agent), "candidate-gathering-done", G_CALLBACK(cb), data);
}
void minato_signal_disconnect(gpointer instance, gulong handler) {
    g_signal_handler_disconnect(instance, handler);
}
gboolean minato_nice_address_from_string(NiceAddress *addr, const char *ip) {
    nice_address_init(addr);
    return nice_address_set_from_string(addr, ip);
}

void minato_set_thread_name(const char *name) {
    char short_name[16];
    strncpy(short_name, name, sizeof short_name - 1);
    short_name[sizeof short_name - 1] = 0;
    pthread_setname_np(pthread_self(), short_name);
}

EVP_PKEY *minato_ec_p256_key(void) { return EVP_EC_gen("P-256"); }

long minato_dtls_timeout_ms(SSL *ssl) {
    struct timeval tv = {0, 0};
    if (DTLSv1_get_timeout(ssl, &tv) != 1) return -1;
    /* Rounded up: a timer with 0.4 ms left is not reported as expired (which would make a
     * deadline-driven caller spin until it is). */
    return (long)tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000;
}
int minato_dtls_handle_timeout(SSL *ssl) { return (int)DTLSv1_handle_timeout(ssl); }
void minato_bio_mem_retry_when_empty(BIO *bio) { BIO_set_mem_eof_return(bio, -1); }

/* The retransmission timeout kept in the SSL's app data (microseconds, constant). */
static unsigned int minato_fixed_dtls_timer(SSL *ssl, unsigned int previous_us) {
    (void)previous_us;
    return (unsigned int)(uintptr_t)SSL_get_app_data(ssl);
}
int minato_ssl_error_is_read_timeout(void) {
    unsigned long e = ERR_peek_error();
    return ERR_GET_LIB(e) == ERR_LIB_SSL && ERR_GET_REASON(e) == SSL_R_READ_TIMEOUT_EXPIRED;
}
void minato_dtls_fixed_timeout(SSL *ssl, unsigned int microseconds) {
    SSL_set_app_data(ssl, (void *)(uintptr_t)microseconds);
    DTLS_set_timer_cb(ssl, minato_fixed_dtls_timer);
}
int minato_ssl_ctx_dtls12(SSL_CTX *ctx) {
    return (int)SSL_CTX_set_min_proto_version(ctx, DTLS1_2_VERSION)
        && (int)SSL_CTX_set_max_proto_version(ctx, DTLS1_2_VERSION);
}
void minato_ssl_ctx_server_preference_read_ahead(SSL_CTX *ctx) {
    SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_read_ahead(ctx, 1);
}
void minato_ssl_set_mtu(SSL *ssl, long mtu) {
    SSL_set_options(ssl, SSL_OP_NO_QUERY_MTU);
    SSL_set_mtu(ssl, mtu);
    DTLS_set_link_mtu(ssl, mtu);
}

int minato_nice_selected_udp(NiceAgent *agent, guint stream_id, guint component_id,
                             struct sockaddr_storage *remote, unsigned int *remote_len) {
    NiceCandidate *local = NULL, *peer = NULL;
    if (!nice_agent_get_selected_pair(agent, stream_id, component_id, &local, &peer) || local == NULL || peer == NULL)
        return -1;
    if (local->transport != NICE_CANDIDATE_TRANSPORT_UDP || local->type == NICE_CANDIDATE_TYPE_RELAYED)
        return -1;
    GSocket *socket = nice_agent_get_selected_socket(agent, stream_id, component_id);
    if (socket == NULL) return -1;
    int fd = g_socket_get_fd(socket);
    g_object_unref(socket);
    memset(remote, 0, sizeof *remote);
    nice_address_copy_to_sockaddr(&peer->addr, (struct sockaddr *)remote);
    *remote_len = remote->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    return fd;
}

int minato_send_batch(int fd, const struct sockaddr_storage *to, unsigned int to_len,
                      void *const *bufs, const size_t *lens, unsigned int n, int gso,
                      unsigned char *sent) {
    struct mmsghdr msgs[64];
    struct iovec iov[64];
    union { char buf[CMSG_SPACE(sizeof(uint16_t))]; struct cmsghdr align; } control[64];
    if (n > 64) n = 64;
    memset(sent, 0, n);
    /* first[m]: the first datagram of message m (a GSO message carries several). */
    unsigned int first[65];
    unsigned int m = 0, i = 0;
    while (i < n) {
        unsigned int j = i + 1;
        if (gso) {
            /* A GSO message: a run of equal-size datagrams (UDP_SEGMENT) plus at most one shorter
             * final one, under the 64 KiB UDP limit and the kernel's 64 segments. */
            size_t total = lens[i];
            while (j < n && lens[j] == lens[i] && total + lens[j] <= 65000) { total += lens[j]; j++; }
            if (j < n && j - i > 1 && lens[j] < lens[i] && total + lens[j] <= 65000) j++;
        }
        for (unsigned int k = i; k < j; k++) { iov[k].iov_base = bufs[k]; iov[k].iov_len = lens[k]; }
        memset(&msgs[m], 0, sizeof msgs[m]);
        first[m] = i;
        msgs[m].msg_hdr.msg_name = to_len > 0 ? (void *)to : NULL;
        msgs[m].msg_hdr.msg_namelen = to_len;
        msgs[m].msg_hdr.msg_iov = &iov[i];
        msgs[m].msg_hdr.msg_iovlen = j - i;
        if (j - i > 1) {
            memset(&control[m], 0, sizeof control[m]);
            msgs[m].msg_hdr.msg_control = control[m].buf;
            msgs[m].msg_hdr.msg_controllen = sizeof control[m].buf;
            struct cmsghdr *c = CMSG_FIRSTHDR(&msgs[m].msg_hdr);
            c->cmsg_level = SOL_UDP;
            c->cmsg_type = UDP_SEGMENT;
            c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
            uint16_t segment = (uint16_t)lens[i];
            memcpy(CMSG_DATA(c), &segment, sizeof segment);
        }
        m++;
        i = j;
    }
    first[m] = n;
    unsigned int done = 0, packets = 0;
    while (done < m) {
        int r = sendmmsg(fd, msgs + done, m - done, MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR) continue;
            /* A kernel or device without UDP GSO: tell the caller to send without it. */
            if (gso && done == 0 && (errno == EIO || errno == EINVAL || errno == ENOPROTOOPT)) return -2;
            /* The socket is full: the rest would fail too (their `sent` stays 0). */
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) break;
            /* Only this message was refused (a firewall rule, an ICMP error left by an earlier
             * send, a datagram too large): skip it (its `sent` stays 0), send the rest. */
            done++;
            continue;
        }
        if (r == 0) break;
        for (unsigned int k = done; k < done + (unsigned int)r; k++) {
            for (unsigned int d = first[k]; d < first[k + 1]; d++) sent[d] = 1;
            packets += first[k + 1] - first[k];
        }
        done += (unsigned int)r;
    }
    return (int)packets;
}

struct minato_text { char *out; size_t capacity; size_t length; };

static void minato_collect_srtp_log(srtp_log_level_t level, const char *msg, void *data) {
    (void)level;
    struct minato_text *t = data;
    if (t->capacity == 0) return;
    int n = snprintf(t->out + t->length, t->capacity - t->length, "%s\n", msg);
    if (n > 0) t->length += (size_t)n < t->capacity - t->length ? (size_t)n : t->capacity - t->length - 1;
}

size_t minato_srtp_debug_modules(char *out, size_t capacity) {
    struct minato_text t = { out, capacity, 0 };
    if (capacity > 0) out[0] = 0;
    srtp_install_log_handler(minato_collect_srtp_log, &t);
    srtp_list_debug_modules();
    srtp_install_log_handler(NULL, NULL);
    return t.length;
}

uint64_t minato_last_arrival_ns(int fd) {
    struct timespec ts;
    if (ioctl(fd, SIOCGSTAMPNS, &ts) != 0) return 0;
    struct timespec real, mono;
    clock_gettime(CLOCK_REALTIME, &real);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    int64_t stamp = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    int64_t offset = ((int64_t)real.tv_sec * 1000000000 + real.tv_nsec)
                   - ((int64_t)mono.tv_sec * 1000000000 + mono.tv_nsec);
    int64_t arrival = stamp - offset;
    return arrival > 0 ? (uint64_t)arrival : 0;
}

int minato_drop_incoming_rtp(int fd) {
    /* On a UDP socket the filter sees the UDP header first: the payload starts at offset 8. */
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 8),             /* 0: A = payload[0] */
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 128, 0, 5),   /* 1: < 128 (STUN, DTLS): keep */
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 192, 4, 0),   /* 2: >= 192: keep */
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 9),             /* 3: A = payload[1] */
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 192, 0, 1),   /* 4: < 192: RTP, drop */
        BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, 223, 0, 1),   /* 5: 192-223: RTCP, keep */
        BPF_STMT(BPF_RET | BPF_K, 0),                      /* 6: drop */
        BPF_STMT(BPF_RET | BPF_K, 0xffffffffu),            /* 7: keep */
    };
    struct sock_fprog program = { .len = sizeof code / sizeof code[0], .filter = code };
    return setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &program, sizeof program);
}

typedef struct {
    GSource base;
    gint64 deadline;
} MinatoDeadlineSource;

static gboolean minato_deadline_prepare(GSource *source, gint *timeout) {
    gint64 deadline = ((MinatoDeadlineSource *)source)->deadline;
    if (deadline < 0) { *timeout = -1; return FALSE; }
    gint64 now = g_source_get_time(source);
    if (now >= deadline) { *timeout = 0; return TRUE; }
    gint64 ms = (deadline - now + 999) / 1000;
    *timeout = ms > G_MAXINT ? G_MAXINT : (gint)ms;
    return FALSE;
}

static gboolean minato_deadline_check(GSource *source) {
    gint64 deadline = ((MinatoDeadlineSource *)source)->deadline;
    return deadline >= 0 && g_source_get_time(source) >= deadline;
}

static gboolean minato_deadline_dispatch(GSource *source, GSourceFunc callback, gpointer data) {
    (void)source;
    return callback ? callback(data) : G_SOURCE_REMOVE;
}

static GSourceFuncs minato_deadline_funcs = {
    .prepare = minato_deadline_prepare,
    .check = minato_deadline_check,
    .dispatch = minato_deadline_dispatch,
};

GSource *minato_deadline_source_new(void) {
    GSource *source = g_source_new(&minato_deadline_funcs, sizeof(MinatoDeadlineSource));
    ((MinatoDeadlineSource *)source)->deadline = -1;
    return source;
}

void minato_deadline_source_set(GSource *source, gint64 deadline_us) {
    ((MinatoDeadlineSource *)source)->deadline = deadline_us;
}

int minato_main_context_timeout_ms(GMainContext *context) {
    if (!g_main_context_acquire(context)) return 0;
    gint priority = G_PRIORITY_DEFAULT;
    gint timeout = -1;
    if (g_main_context_prepare(context, &priority)) {
        timeout = 0;
    } else {
        GPollFD fds[8];
        (void)g_main_context_query(context, priority, &timeout, fds, 8);
    }
    g_main_context_release(context);
    return timeout;
}

/* ---- Direct receive ---- */

int minato_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

int minato_epoll_add(int epfd, int fd, uint64_t key) {
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN;
    ev.data.u64 = key;
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}

int minato_epoll_remove(int epfd, int fd) {
    struct epoll_event ev;   /* ignored, but kernels before 2.6.9 wanted one */
    memset(&ev, 0, sizeof ev);
    return epoll_ctl(epfd, EPOLL_CTL_DEL, fd, &ev);
}

int minato_epoll_ready(int epfd, uint64_t *keys, int max) {
    struct epoll_event events[256];
    if (max > 256) max = 256;
    if (max <= 0) return 0;
    int n;
    do { n = epoll_wait(epfd, events, max, 0); } while (n < 0 && errno == EINTR);
    if (n <= 0) return 0;
    for (int i = 0; i < n; i++) keys[i] = events[i].data.u64;
    return n;
}

int minato_rx_timestamps(int fd, int on) {
    int value = on ? 1 : 0;
    return setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &value, sizeof value);
}

int minato_recv_batch(int fd, void *const *bufs, size_t capacity, size_t *lens,
                      struct sockaddr_storage *from, uint64_t *arrival, unsigned int n) {
    struct mmsghdr msgs[64];
    struct iovec iov[64];
    union { char buf[CMSG_SPACE(sizeof(struct timespec))]; struct cmsghdr align; } control[64];
    if (n > 64) n = 64;
    if (n == 0) return 0;
    for (unsigned int i = 0; i < n; i++) {
        iov[i].iov_base = bufs[i];
        iov[i].iov_len = capacity;
        memset(&msgs[i], 0, sizeof msgs[i]);
        msgs[i].msg_hdr.msg_name = &from[i];
        msgs[i].msg_hdr.msg_namelen = sizeof from[i];
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
        msgs[i].msg_hdr.msg_control = control[i].buf;
        msgs[i].msg_hdr.msg_controllen = sizeof control[i].buf;
    }
    int r;
    do { r = recvmmsg(fd, msgs, n, MSG_DONTWAIT, NULL); } while (r < 0 && errno == EINTR);
    if (r < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
    /* The kernel's stamps are CLOCK_REALTIME: one offset to CLOCK_MONOTONIC for the batch. */
    struct timespec real, mono;
    clock_gettime(CLOCK_REALTIME, &real);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    int64_t offset = ((int64_t)real.tv_sec * 1000000000 + real.tv_nsec)
                   - ((int64_t)mono.tv_sec * 1000000000 + mono.tv_nsec);
    for (int i = 0; i < r; i++) {
        lens[i] = (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) ? 0 : msgs[i].msg_len;
        arrival[i] = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msgs[i].msg_hdr); c != NULL; c = CMSG_NXTHDR(&msgs[i].msg_hdr, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
                struct timespec ts;
                memcpy(&ts, CMSG_DATA(c), sizeof ts);
                int64_t stamp = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec - offset;
                arrival[i] = stamp > 0 ? (uint64_t)stamp : 0;
            }
        }
    }
    return r;
}

int minato_same_address(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
    if (a->ss_family != b->ss_family) return 0;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
        return x->sin6_port == y->sin6_port && memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) == 0;
    }
    return 0;
}

int minato_send_to(int fd, const void *buf, size_t len, const struct sockaddr_storage *to) {
    socklen_t to_len = to->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    ssize_t r;
    do { r = sendto(fd, buf, len, MSG_DONTWAIT, (const struct sockaddr *)to, to_len); } while (r < 0 && errno == EINTR);
    return r == (ssize_t)len;
}

struct minato_stun_credentials { const char *ufrag; size_t ufrag_length; const char *pwd; };

/* Short-term credentials (RFC 8445 7.2.2): USERNAME is "<our ufrag>:<their ufrag>" and the key is
 * our password. */
static bool minato_stun_credentials(StunAgent *agent, StunMessage *message, uint8_t *username,
                                    uint16_t username_length, uint8_t **password, size_t *password_length,
                                    void *data) {
    (void)agent; (void)message;
    const struct minato_stun_credentials *c = data;
    if (username_length <= c->ufrag_length || memcmp(username, c->ufrag, c->ufrag_length) != 0
        || username[c->ufrag_length] != ':')
        return false;
    *password = (uint8_t *)c->pwd;
    *password_length = strlen(c->pwd);
    return true;
}

int minato_stun_answer(const uint8_t *request, size_t length, const struct sockaddr_storage *from,
                       const char *ufrag, const char *pwd, uint8_t *out, size_t capacity,
                       int *use_candidate) {
    *use_candidate = 0;
    if (length < 20 || length > 1500) return -1;
    StunAgent agent;
    stun_agent_init(&agent, STUN_ALL_KNOWN_ATTRIBUTES, STUN_COMPATIBILITY_RFC5389,
                    STUN_AGENT_USAGE_SHORT_TERM_CREDENTIALS | STUN_AGENT_USAGE_USE_FINGERPRINT
                        | STUN_AGENT_USAGE_NO_INDICATION_AUTH);
    struct minato_stun_credentials credentials = { ufrag, strlen(ufrag), pwd };
    StunMessage message;
    StunValidationStatus status = stun_agent_validate(&agent, &message, request, length,
                                                      minato_stun_credentials, &credentials);
    if (status == STUN_VALIDATION_UNMATCHED_RESPONSE) return 0;   /* a response we did not ask for */
    if (status != STUN_VALIDATION_SUCCESS) return -1;
    if (stun_message_get_class(&message) != STUN_REQUEST) return 0;
    if (stun_message_get_method(&message) != STUN_BINDING) return -1;
    StunMessage reply;
    size_t reply_length = capacity;
    bool controlling = false;   /* an ICE-lite server is always the controlled agent */
    socklen_t from_length = from->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    StunUsageIceReturn r = stun_usage_ice_conncheck_create_reply(&agent, &message, &reply, out, &reply_length,
                                                                 from, from_length, &controlling, 0,
                                                                 STUN_USAGE_ICE_COMPATIBILITY_RFC5245);
    if ((r != STUN_USAGE_ICE_RETURN_SUCCESS && r != STUN_USAGE_ICE_RETURN_ROLE_CONFLICT) || reply_length == 0) return -1;
    *use_candidate = stun_usage_ice_conncheck_use_candidate(&message) ? 1 : 0;
    return (int)reply_length;
}
