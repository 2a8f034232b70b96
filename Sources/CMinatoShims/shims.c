#define _GNU_SOURCE
#include "CMinatoShims.h"
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <openssl/ec.h>
#include <openssl/bio.h>

NiceAgent *minato_nice_agent_new(GMainContext *ctx, gboolean lite, gboolean controlling) {
    NiceAgentOption opts = NICE_AGENT_OPTION_ICE_TRICKLE;
    if (lite) opts |= NICE_AGENT_OPTION_LITE_MODE;
    else opts |= NICE_AGENT_OPTION_CONSENT_FRESHNESS;
    NiceAgent *agent = nice_agent_new_full(ctx, NICE_COMPATIBILITY_RFC5245, opts);
    if (agent == NULL) return NULL;
    g_object_set(G_OBJECT(agent),
                 "upnp", FALSE,
                 "ice-tcp", FALSE,
                 "ice-udp", TRUE,
                 "controlling-mode", controlling,
                 NULL);
    return agent;
}

gulong minato_nice_on_component_state(NiceAgent *agent, minato_component_state_cb cb, gpointer data) {
    return g_signal_connect(G_OBJECT(agent), "component-state-changed", G_CALLBACK(cb), data);
}
gulong minato_nice_on_gathering_done(NiceAgent *agent, minato_gathering_done_cb cb, gpointer data) {
    return g_signal_connect(G_OBJECT(agent), "candidate-gathering-done", G_CALLBACK(cb), data);
}
gulong minato_nice_on_selected_pair(NiceAgent *agent, minato_selected_pair_cb cb, gpointer data) {
    return g_signal_connect(G_OBJECT(agent), "new-selected-pair-full", G_CALLBACK(cb), data);
}
void minato_signal_disconnect(gpointer instance, gulong handler) {
    g_signal_handler_disconnect(instance, handler);
}
gboolean minato_nice_address_from_string(NiceAddress *addr, const char *ip) {
    nice_address_init(addr);
    return nice_address_set_from_string(addr, ip);
}

EVP_PKEY *minato_ec_p256_key(void) { return EVP_EC_gen("P-256"); }

long minato_dtls_timeout_ms(SSL *ssl) {
    struct timeval tv = {0, 0};
    if (DTLSv1_get_timeout(ssl, &tv) != 1) return -1;
    return (long)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}
int minato_dtls_handle_timeout(SSL *ssl) { return (int)DTLSv1_handle_timeout(ssl); }
void minato_bio_mem_retry_when_empty(BIO *bio) { BIO_set_mem_eof_return(bio, -1); }
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
void minato_bio_set_retry_write(BIO *bio) { BIO_set_retry_write(bio); }

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
                      void *const *bufs, const size_t *lens, unsigned int n) {
    struct mmsghdr msgs[64];
    struct iovec iov[64];
    if (n > 64) n = 64;
    for (unsigned int i = 0; i < n; i++) {
        iov[i].iov_base = bufs[i];
        iov[i].iov_len = lens[i];
        memset(&msgs[i], 0, sizeof msgs[i]);
        msgs[i].msg_hdr.msg_name = (void *)to;
        msgs[i].msg_hdr.msg_namelen = to_len;
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    unsigned int sent = 0;
    while (sent < n) {
        int r = sendmmsg(fd, msgs + sent, n - sent, MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR) continue;
            return sent > 0 ? (int)sent : -1;
        }
        if (r == 0) break;
        sent += (unsigned int)r;
    }
    return (int)sent;
}
